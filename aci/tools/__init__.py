"""Tool modules. Each registers its tools with `aci.registry.tool`; `registry.tools()` imports them all.

A module here must import nothing heavy at module level (torch, transformers, trl, lm-eval): the
server imports every module at start and must answer its first call fast.
"""
