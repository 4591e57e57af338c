"""posttrain-aci: an agent-computer interface for post-training a language model under a deadline.

Importing this package is cheap on purpose: heavy libraries (torch, transformers, trl, lm-eval) are
imported inside the functions that need them, so the MCP server and the CLI start fast.
"""

__version__ = "0.1.0"
DISTRIBUTION = "posttrain-aci"  # the package's name in pyproject.toml: what pip installs and reports the version of
