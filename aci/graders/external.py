"""Graders defined outside this package: a python function, or an external command.

Both return a number in [0, 1] or a number with a reason; anything else (an exception, a non-number,
a value out of range, a crash, a timeout) scores 0 with a reason saying what went wrong, so a broken
grader shows up in `verify-task` as rejected gold instead of as a crash.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import math
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aci.errors import ACIError
from aci.graders.base import Grader, Response, Score, gold, short
from aci.graders.toolcall import ToolCall


def as_score(value: Any, source: str) -> Score:
    """A grader's return value (`0.5`, `(0.5, "why")`, `{"score": .., "reason": ..}`, a Score) as a Score."""
    reason = ""
    if isinstance(value, Score):
        return value
    if isinstance(value, dict):
        value, reason = value.get("score"), str(value.get("reason", ""))
    elif isinstance(value, (tuple, list)) and len(value) == 2:
        value, reason = value[0], str(value[1])
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return Score.of(0, f"{source} returned {short(repr(value), 80)}, not a score in [0, 1]")
    if not 0 <= value <= 1:
        return Score.of(0, f"{source} returned {value}, outside [0, 1]")
    return Score.of(float(value), reason or f"{source} scored {value:g}")


class _Generic(Grader):
    """Gold and corruption when the grader itself is opaque: the gold answer or gold tool calls. Both run
    in the run's workdir."""

    @classmethod
    def build(cls, spec, *, workdir, check_host, unsafe_grader):
        return cls(spec, workdir)

    def gold(self, task) -> Response:
        if gold(task).get("tool_calls") and not gold(task).get("answer"):
            return ToolCall({}).gold(task)
        return super().gold(task)

    def corrupt(self, task) -> Response:
        if gold(task).get("tool_calls") and not gold(task).get("answer"):
            return ToolCall({}).corrupt(task)
        return super().corrupt(task)


def load_function(target: str, workdir: Path | None = None) -> Callable:
    """`package.module:function` or `path/to/file.py:function` (relative to `workdir`)."""
    module_name, sep, attr = target.rpartition(":")
    if not sep or not module_name or not attr:
        raise ACIError(f"python grader {target!r}: expected python:module:function or python:file.py:function")
    try:
        if module_name.endswith(".py"):
            path = Path(module_name)
            path = path if path.is_absolute() else (workdir or Path.cwd()) / path
            spec = importlib.util.spec_from_file_location(f"aci_grader_{path.stem}", path)
            if spec is None or not path.exists():
                raise ACIError(f"python grader {target!r}: file {path} not found")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            if workdir is not None and str(workdir) not in sys.path:
                sys.path.append(str(workdir))
            module = importlib.import_module(module_name)
    except ACIError:
        raise
    except Exception as e:
        raise ACIError(f"python grader {target!r}: cannot import {module_name} ({type(e).__name__}: {e})") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ACIError(f"python grader {target!r}: {module_name} has no function {attr!r}")
    return fn


class PythonFunction(_Generic):
    """`python:module:function`: calls `function(task, response[, tool_calls])`.

    It returns a float in [0, 1], `(float, reason)`, or `{"score", "reason"}`.
    """

    name = "python"
    written = "python:module:function"

    def __init__(self, spec, workdir: Path | None = None):
        super().__init__(spec)
        self.target = spec.get("function")
        if not isinstance(self.target, str):
            raise ACIError('python grader needs a function: python:module:function, or {"type": "python", '
                           '"function": "module:function"}')
        self.fn = load_function(self.target, workdir)
        try:
            params = inspect.signature(self.fn).parameters.values()
            positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
            self.arity = 3 if len(positional) >= 3 or any(p.kind == p.VAR_POSITIONAL for p in params) else 2
        except (TypeError, ValueError):
            self.arity = 3

    def _score(self, task, response, tool_calls):
        args = (task, response, tool_calls)[: self.arity]
        try:
            value = self.fn(*args)
        except Exception as e:
            return Score.of(0, f"python:{self.target} raised {type(e).__name__}: {e}")
        return as_score(value, f"python:{self.target}")


class Command(_Generic):
    """An external command: `{"task", "response", "tool_calls"}` as JSON on stdin, the score on stdout.

    Stdout's last line is a number or `{"score": .., "reason": ..}`. Options: `command` (string, split
    like a shell would, or a list), `timeout` (seconds, default 30). Runs in the run's workdir.
    """

    name = "command"
    minimal_spec = {"type": "command", "command": "python grade.py"}

    def __init__(self, spec, workdir: Path | None = None):
        super().__init__(spec)
        command = spec.get("command")
        if isinstance(command, str):
            command = shlex.split(command)
        if not isinstance(command, list) or not command or not all(isinstance(c, str) for c in command):
            raise ACIError(f"command grader needs `command`, e.g. {json.dumps(self.minimal_spec)}")
        self.command = command
        self.timeout = float(spec.get("timeout", 30))
        self.workdir = workdir

    def _score(self, task, response, tool_calls):
        payload = json.dumps({"task": task, "response": response, "tool_calls": tool_calls}, ensure_ascii=False)
        label = short(" ".join(self.command), 60)
        try:
            proc = subprocess.Popen(self.command, cwd=self.workdir, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True)
        except OSError as e:
            return Score.of(0, f"command {label!r} could not start: {e}")
        try:
            out, err = proc.communicate(payload.encode(), timeout=self.timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.communicate()
            return Score.of(0, f"command {label!r} timed out after {self.timeout:g} s")
        if proc.returncode != 0:
            tail = err.decode("utf-8", "replace").strip().splitlines()
            return Score.of(0, f"command {label!r} exited {proc.returncode}: {tail[-1] if tail else 'no stderr'}")
        lines = [ln for ln in out.decode("utf-8", "replace").splitlines() if ln.strip()]
        if not lines:
            return Score.of(0, f"command {label!r} printed no score")
        try:
            value = json.loads(lines[-1])
        except json.JSONDecodeError:
            return Score.of(0, f"command {label!r} printed {short(lines[-1], 60)!r}, not a number or JSON")
        return as_score(value, f"command {label!r}")
