"""Model-loading work in a child process that exits, so the memory it takes (GPU memory above all) is given
back when it ends: the long-lived MCP server never holds a model that a later full fine-tune needs.

`run(fn, timeout_s, **args)` starts `python -m aci.evaluation.isolated` with the function's module and
name and its arguments (JSON) on stdin, and returns the JSON object `fn(**args)` returns in the child; a
failure in the child comes back as ACIError with its message. The child runs in its own session, which
is killed whole when it exits or at the timeout (`processes.run_to_exit`). Callers pass their own
module-level functions (`folder.merge_lora_here`, `folder.resave_here`, `checks.generate_here`); this
module imports none of them.

Whole evaluations (dev sets, lm-eval tasks, eval commands) run in an evaluation job instead
(`aci.evaluation.job`), which is a child process too and is also tracked and held to the clock.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import sys
from collections.abc import Callable

from aci import processes
from aci.errors import ACIError


def run(fn: Callable[..., dict | None], timeout_s: float = 3600.0, **args) -> dict:
    """Run `fn(**args)` in a child process and return its result (see the module docstring)."""
    op = fn.__name__.removesuffix("_here")  # in messages: merge_lora, resave, generate
    request = {"module": fn.__module__, "function": fn.__name__, "args": args}
    rc, out, err = processes.run_to_exit([sys.executable, "-m", "aci.evaluation.isolated"], timeout_s=timeout_s,
                                         stdin_text=json.dumps(request))
    if rc is None:
        raise ACIError(f"{op} did not finish within {timeout_s:.0f} s (child process killed)")
    lines = [ln for ln in out.splitlines() if ln.strip()]
    try:
        result = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        result = None
    if not isinstance(result, dict):
        tail = " ".join(err.strip().splitlines()[-3:])[-500:]
        raise ACIError(f"{op} in a child process failed (exit {rc}): {tail or 'no output'}")
    if "error" in result:
        raise ACIError(result["error"])
    return result


def main() -> int:
    request = json.loads(sys.stdin.read())
    try:
        with contextlib.redirect_stdout(sys.stderr):  # library output must not mix with the result line
            fn = getattr(importlib.import_module(request["module"]), request["function"])
            result = fn(**request["args"])
    except ACIError as e:
        result = {"error": str(e)}
    print(json.dumps(result or {}), flush=True)
    return 0


if __name__ == "__main__":
    processes.exit_without_teardown(main())
