"""Graders defined outside this package: a python function, or an external command.

Both return a number in [0, 1] or a number with a reason; anything else (an exception, a non-number,
a value out of range, a crash, a timeout) scores 0 with a reason saying what went wrong, so a broken
grader shows up in `verify-task` as rejected gold instead of as a crash. Both run programs, so only the
caller names them (never a task row), and they run in the unit-tests sandbox with a time limit
(`aci.graders.program`). `load_function` imports a function here, for `histogram --custom` features.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import math
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aci.errors import ACIError
from aci.graders.base import Grader, Response, Score, gold, short, time_limit
from aci.graders.code import MAX_PROCESSES, admit, noted, run_harness
from aci.graders.program import EXEC, Module, Worker, command_files, program_path
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
    """Gold and corruption when the grader itself is opaque: the gold answer or gold tool calls."""

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
    """`python:module:function`: calls `function(task, response[, tool_calls])` in a sandboxed worker.

    It returns a float in [0, 1], `(float, reason)`, or `{"score", "reason"}`. The module is a `.py` file
    (`python:grade.py:score`) or a module or package of the workdir or the Python installation; it sees
    nothing else of the workdir (`aci.graders.program`). Options: `timeout` (seconds per call, default 30),
    `memory_mb` (address space; default 0, none: a grader may import what it likes).
    """

    name = "python"
    written = "python:module:function"
    sandboxed = True

    @classmethod
    def build(cls, spec, *, workdir, check_host, unsafe_grader):
        return cls(spec, workdir, unsafe_grader=unsafe_grader)

    def __init__(self, spec, workdir: Path | None = None, *, unsafe_grader: bool = False):
        super().__init__(spec)
        target = spec.get("function")
        if not isinstance(target, str):
            raise ACIError('python grader needs a function: python:module:function, or {"type": "python", '
                           '"function": "module:function"}')
        self.target, self.workdir, self.unsafe_grader = target, workdir, unsafe_grader
        self.module = Module.parse(target)
        self.worker = Worker(self.module, time_limit(spec, 30, "python grader"), _memory(spec), MAX_PROCESSES)
        why = self.worker.check(admit(unsafe_grader), self.module.files(workdir))  # refused now, not at a score
        if why:
            raise ACIError(f"python grader {target!r} {why}")

    def _score(self, task, response, tool_calls):
        box = admit(self.unsafe_grader)
        reply, why = self.worker.call(box, self.module.files(self.workdir),
                                      {"task": task, "response": response, "tool_calls": tool_calls})
        label = f"python:{self.target}"
        if reply is None:
            return noted(Score.of(0, f"{label} {why}"), box)
        if "error" in reply:
            return noted(Score.of(0, f"{label} {reply['error']}"), box)
        return noted(as_score(reply["value"], label), box)


def _memory(spec: dict) -> int:
    value = spec.get("memory_mb", 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ACIError(f"memory_mb must be a whole number of MB >= 0 (0: no limit), got {value!r}")
    return value


class Command(_Generic):
    """An external command: `{"task", "response", "tool_calls"}` as JSON on stdin, the score on stdout.

    Stdout's last line is a number or `{"score": .., "reason": ..}`. It runs in the sandbox, in a folder
    holding the files its arguments name in the workdir (`aci.graders.program`). Options: `command` (string,
    split like a shell would, or a list), `timeout` (seconds, default 30), `memory_mb` (default 0, none).
    """

    name = "command"
    minimal_spec = {"type": "command", "command": "python grade.py"}
    sandboxed = True

    @classmethod
    def build(cls, spec, *, workdir, check_host, unsafe_grader):
        return cls(spec, workdir, unsafe_grader=unsafe_grader)

    def __init__(self, spec, workdir: Path | None = None, *, unsafe_grader: bool = False):
        super().__init__(spec)
        command = spec.get("command")
        if isinstance(command, str):
            command = shlex.split(command)
        if not isinstance(command, list) or not command or not all(isinstance(c, str) for c in command):
            raise ACIError(f"command grader needs `command`, e.g. {json.dumps(self.minimal_spec)}")
        self.command, self.workdir, self.unsafe_grader = command, workdir, unsafe_grader
        self.label = short(" ".join(command), 60)
        program, self.python = program_path(command[0])
        self.argv = [program, *command[1:]]
        self.timeout = time_limit(spec, 30, "command grader")
        self.memory_mb = _memory(spec)
        self._files()  # refused now, not at the first score
        admit(unsafe_grader)

    def _files(self):
        return command_files(self.command, self.workdir, f"command grader {self.label!r}")

    def _score(self, task, response, tool_calls):
        box = admit(self.unsafe_grader)
        payload = json.dumps({"task": task, "response": response, "tool_calls": tool_calls}, ensure_ascii=False)
        ran = run_harness(box, EXEC.format(argv=self.argv, python=self.python), "pass", self.timeout, self.memory_mb, MAX_PROCESSES,
                          files=self._files(), stdin=payload.encode())
        return noted(self._read(ran), box)

    def _read(self, ran) -> Score:
        label = self.label
        if ran.rc is None:
            return Score.of(0, f"command {label!r} timed out after {self.timeout:g} s (its time limit)")
        if ran.rc != 0:
            tail = ran.stderr.splitlines()
            return Score.of(0, f"command {label!r} exited {ran.rc}: {tail[-1] if tail else 'no stderr'}")
        lines = [ln for ln in ran.stdout.splitlines() if ln.strip()]
        if not lines:
            return Score.of(0, f"command {label!r} printed no score")
        try:
            value = json.loads(lines[-1])
        except json.JSONDecodeError:
            return Score.of(0, f"command {label!r} printed {short(lines[-1], 60)!r}, not a number or JSON")
        return as_score(value, f"command {label!r}")
