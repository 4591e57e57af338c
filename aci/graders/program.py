"""Grader programs (`command`, `python:`) run where the unit-tests grader runs model code, with a time limit.

Why: a grader program is code run on this machine at every score, with model output as its input. Only the
caller names one (--grader, the run card's grader: `aci.graders.task_spec` refuses a task row that does), and
even so it runs in the unit-tests sandbox (`aci.graders.sandbox`: an unprivileged uid, no capabilities, no
network and, under bubblewrap, no file of the machine but the system's and Python's, read-only), under the
harness's limits (`aci.graders.harness`) and a wall-clock limit that kills it with everything it started.

Of the workdir it sees only the files its spec names, copied into its folder: the python grader's module (a
`.py` file, or the module or package its name finds in the workdir) and each argument of a command that names
a file by a path relative to the workdir. Each must resolve inside the allowed roots (`Context.path`), all
together at most GRADER_FILES_MB. They are read again at every score, so an edit counts at the next one.

A command starts once per score, its input on stdin. A python grader's module is loaded once in a `Worker`
that stays up and scores one request per line: a sandboxed start per score costs some 80 ms, minutes over a
2,500-row `verify-task`. A call past its time limit kills the worker; the next call starts a fresh one.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import shutil
import subprocess
import sys
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

from aci.errors import ACIError
from aci.graders.code import HARNESS_FILES, Files, kill_group, start, tail_of, work_folder
from aci.graders.sandbox import Sandbox

GRADER_FILES_MB = 16
WORKER_CPU_S = 24 * 3600  # a worker's CPU-time limit over its whole life; each call has the wall-clock one
IDLE_S = 60  # a worker with no request for this long ends (a long-lived server keeps no idle processes)
IDLE_MARGIN_S = 10  # how much sooner the caller starts a fresh one, so that it never writes to one ending
REPLY_BYTES = 1 << 20  # the longest reply line a worker may send
STDERR_KEEP = 1 << 20  # a worker's stderr is emptied past this, far below the harness's file-size limit


def _context(workdir: Path | None):
    from aci.context import Context  # here: the registry reads the graders at server start

    return Context(workdir=workdir or Path.cwd())


def _add(files: Files, rel: str, path: Path, what: str) -> None:
    if rel in HARNESS_FILES:
        raise ACIError(f"{what}: {rel} has the name of one of the sandbox's own files ({', '.join(HARNESS_FILES)}); "
                       f"rename it")
    files[rel] = (path.read_bytes(), 0o755 if os.access(path, os.X_OK) else 0o644)
    if sum(len(data) for data, _ in files.values()) > GRADER_FILES_MB << 20:
        raise ACIError(f"{what}: the files it names hold more than {GRADER_FILES_MB} MB; a grader program copied into "
                       f"its sandbox at every score must be smaller")


def command_files(argv: list[str], workdir: Path | None, what: str) -> Files:
    """The files a command names by paths relative to the workdir (its program, where written with a `/`, and
    its arguments), read from inside the allowed roots, under the same paths in its sandbox folder."""
    ctx, files = _context(workdir), {}
    for i, arg in enumerate(argv):
        if not arg or arg.startswith("-") or os.path.isabs(arg) or i == 0 and "/" not in arg:
            continue
        try:
            named = (ctx.workdir / arg).is_file()
        except (OSError, ValueError):  # a long `-c` program, a NUL: not a file name
            continue
        if not named:
            continue
        rel = os.path.normpath(arg)
        if rel.startswith(".."):
            raise ACIError(f"{what}: {arg!r} names a file outside the workdir; a command sees only files in it")
        _add(files, rel, ctx.path(arg, must_exist=True, what=f"{what}: file", kind="file"), what)
    return files


def program_path(name: str) -> tuple[str, bool]:
    """A command's program as it will start in the sandbox (a bare name found on this PATH, as a shell would),
    and whether it is this Python: that one restarts itself through /proc/self/exe, because the sandbox's uid
    may not search the folders on its path (a Python under /root, mode 0700), which the harness's own start
    does not need."""
    path = name if "/" in name else shutil.which(name) or name
    return path, os.path.realpath(path) == os.path.realpath(sys.executable)


@dataclass(frozen=True)
class Module:
    """Where a python grader's function lives: `file.py:function` (copied as `aci_grader/<name>`), or
    `module:function`, a module or package in the workdir (copied) or in the Python installation."""

    target: str  # as written after `python:`
    file: str | None  # the file as written, for `file.py:function`
    name: str | None  # the module's name, for `module:function`
    attr: str

    @classmethod
    def parse(cls, target: str) -> Module:
        module, sep, attr = target.rpartition(":")
        if not sep or not module or not attr:
            raise ACIError(f"python grader {target!r}: expected python:module:function or python:file.py:function")
        if module.endswith(".py"):
            return cls(target, module, None, attr)
        if not all(part.isidentifier() for part in module.split(".")):
            raise ACIError(f"python grader {target!r}: {module!r} is not a module name (names joined by dots)")
        return cls(target, None, module, attr)

    @property
    def source(self) -> str | None:
        """The copied file the worker loads, for `file.py:function`."""
        return f"aci_grader/{Path(self.file).name}" if self.file else None

    def files(self, workdir: Path | None) -> Files:
        """The module's files, read afresh from inside the allowed roots."""
        what = f"python grader {self.target!r}"
        ctx, files = _context(workdir), {}
        if self.file:
            path = ctx.path(self.file, must_exist=True, what=f"{what}: file", kind="file")
            _add(files, self.source, path, what)
            return files
        top = self.name.split(".")[0]
        if (ctx.workdir / f"{top}.py").is_file():
            _add(files, f"{top}.py", ctx.path(f"{top}.py", what=f"{what}: file", kind="file"), what)
        elif (ctx.workdir / top).is_dir():
            for path in sorted((ctx.workdir / top).rglob("*")):
                rel = path.relative_to(ctx.workdir).as_posix()
                if path.is_file() and "__pycache__" not in path.parts:
                    _add(files, rel, ctx.path(rel, what=f"{what}: file", kind="file"), what)
        return files  # none: the worker imports it from the Python installation


# The worker's program (the harness's solution.py): load the function once, then one JSON request per line in,
# one reply per line out (`{"check": true}`: whether it loaded). What the function prints goes to stderr, so it
# cannot forge a reply.
WORKER = r'''import importlib, importlib.util, inspect, json, os, select, sys
SOURCE, NAME, ATTR, IDLE_S = {source!r}, {name!r}, {attr!r}, {idle!r}
replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
os.dup2(2, 1)
sys.path.insert(0, os.getcwd())


def load():
    if SOURCE:
        spec = importlib.util.spec_from_file_location("aci_grader_" + os.path.basename(SOURCE)[:-3], SOURCE)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(NAME)
    fn = getattr(module, ATTR, None)
    if not callable(fn):
        raise LookupError(f"{{NAME or SOURCE}} has no function {{ATTR!r}}")
    try:
        params = inspect.signature(fn).parameters.values()
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        return fn, 3 if len(positional) >= 3 or any(p.kind == p.VAR_POSITIONAL for p in params) else 2
    except (TypeError, ValueError):
        return fn, 3


try:
    fn, arity = load()
    broken = None
except Exception as e:
    broken = f"could not be loaded: {{type(e).__name__}}: {{e}}"
while select.select([sys.stdin], [], [], IDLE_S)[0]:
    line = sys.stdin.readline()
    if not line:
        break
    job = json.loads(line)
    if broken or job.get("check"):
        reply = {{"error": broken}} if broken else {{"value": None}}
    else:
        try:
            value = fn(*(job["task"], job["response"], job["tool_calls"])[:arity])
            if hasattr(value, "score") and hasattr(value, "reason"):
                value = {{"score": value.score, "reason": value.reason}}
            reply = {{"value": value}}
        except Exception as e:
            reply = {{"error": f"raised {{type(e).__name__}}: {{e}}"}}
    try:
        text = json.dumps(reply, default=repr)
    except (TypeError, ValueError) as e:
        text = json.dumps({{"error": f"returned what JSON cannot hold ({{e}})"}})
    replies.write(text + "\n")
    replies.flush()
'''

# A command's program (the harness's solution.py): become the command, its input already on stdin.
EXEC = r'''import os, sys
argv = {argv!r}
try:
    os.execv("/proc/self/exe", argv) if {python!r} else os.execvp(argv[0], argv)
except OSError as e:
    sys.stderr.write(f"could not start: {{e}}\n")
    sys.stderr.flush()
    os._exit(127)
'''


class _Live:
    """A running worker: its process, folder and pipes, and what it was started with."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.folder: Path | None = None
        self.key: tuple | None = None
        self.stderr = None
        self.done_r: int | None = None  # held open: the harness writes to it, and a closed pipe would end it
        self.used = 0.0  # when it was last called (time.monotonic)

    def stop(self) -> None:
        if self.proc is not None:
            for pipe in (self.proc.stdin, self.proc.stdout):
                try:
                    pipe.close()
                except OSError:
                    pass
            kill_group(self.proc)
        if self.stderr is not None:
            self.stderr.close()
        if self.done_r is not None:
            os.close(self.done_r)
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
        self.proc = self.folder = self.key = self.stderr = self.done_r = None


class Worker:
    """One python grader's module, loaded in a harness that stays up in the sandbox; one call at a time."""

    def __init__(self, module: Module, timeout: float, memory_mb: int, max_processes: int):
        self.module, self.timeout, self.memory_mb, self.max_processes = module, timeout, memory_mb, max_processes
        self._lock = threading.Lock()
        self._live = _Live()
        weakref.finalize(self, self._live.stop)  # a grader dropped from the cache takes its worker with it

    def check(self, box: Sandbox, files: Files) -> str:
        """Why the module cannot be scored with (it does not load, it lacks the function), else ""."""
        reply, why = self.call(box, files, {"check": True})
        return why if reply is None else reply.get("error") or ""

    def call(self, box: Sandbox, files: Files, request: dict) -> tuple[dict | None, str]:
        """(the reply, "") or (None, why there is none: the time limit, or how the worker ended)."""
        with self._lock:
            live = self._live
            digest = hashlib.sha256()
            for rel, (data, mode) in sorted(files.items()):
                digest.update(f"{rel}\0{mode}\0{len(data)}\0".encode())
                digest.update(data)
            key = (box, digest.hexdigest())
            idle = time.monotonic() - live.used > IDLE_S - IDLE_MARGIN_S
            if live.proc is None or live.proc.poll() is not None or live.key != key or idle:
                live.stop()
                self._start(box, files, key)
            if os.fstat(live.stderr.fileno()).st_size > STDERR_KEEP:  # what it printed: kept short of the file limit
                os.ftruncate(live.stderr.fileno(), 0)
            line = json.dumps(request, default=str).encode() + b"\n"
            deadline = time.monotonic() + self.timeout
            try:
                _send(live.proc.stdin.fileno(), line, deadline)
                reply = _receive(live.proc.stdout.fileno(), deadline)
            except TimeoutError:
                live.stop()
                return None, f"timed out after {self.timeout:g} s (its time limit)"
            except (BrokenPipeError, EOFError, ValueError) as e:
                try:
                    rc = live.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    rc = None
                tail = tail_of(live.folder / "stderr", 4000).splitlines()
                live.stop()
                why = str(e) if isinstance(e, ValueError) else tail[-1] if tail else "no stderr"
                return None, f"ended (exit {rc}): {why}"
            live.used = time.monotonic()
            return json.loads(reply), ""

    def _start(self, box: Sandbox, files: Files, key: tuple) -> None:
        live = self._live
        m = self.module
        code = WORKER.format(source=m.source, name=m.name, attr=m.attr, idle=IDLE_S)
        live.folder = work_folder(box, code, "pass", files)
        live.stderr = open(live.folder / "stderr", "ab")  # appended, so that emptying it moves its end
        live.proc, _, live.done_r = start(box, live.folder, memory_mb=self.memory_mb, cpu_s=WORKER_CPU_S,
                                          max_processes=self.max_processes, stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=live.stderr)
        live.key = key


def _send(fd: int, data: bytes, deadline: float) -> None:
    os.set_blocking(fd, False)
    while data:
        if not select.select([], [fd], [], max(0.0, deadline - time.monotonic()))[1]:
            raise TimeoutError
        try:
            data = data[os.write(fd, data):]
        except BlockingIOError:
            continue


def _receive(fd: int, deadline: float) -> bytes:
    got = b""
    while b"\n" not in got:
        if not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
            raise TimeoutError
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            raise EOFError
        got += chunk
        if len(got) > REPLY_BYTES:
            raise ValueError(f"a reply longer than {REPLY_BYTES >> 20} MiB")
    return got.split(b"\n", 1)[0]
