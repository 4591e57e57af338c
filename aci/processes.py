"""Processes recognised by pid *and* start time (so a recycled pid never makes a dead job look alive),
signals to a job's process group, short helper commands, and a finished job's quick exit. The standard
library alone: the job supervisor uses these before it imports anything else (`aci.supervisor`)."""

from __future__ import annotations

import os
import signal
import sys
from typing import NoReturn


def _proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state is [0], start time is [19])."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def start_time(pid: int) -> int | None:
    fields = _proc_stat(pid)
    return int(fields[19]) if fields else None


def alive(pid: int | None, started: int | None = None) -> bool:
    """Whether `pid` runs and (when `started` is known) is the same process that was recorded."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    fields = _proc_stat(pid)
    if fields is None:  # no /proc (not Linux): trust the signal check
        return True
    if fields[0] in ("Z", "X"):  # a zombie (an unreaped child) is not alive
        return False
    return started is None or int(fields[19]) == started


def signal_group(pid: int | None, sig: int) -> None:
    """Signal the process group `pid` leads (a job's command and its children; jobs start in a session of
    their own), or `pid` alone when it leads none; a process already gone is no error."""
    if not pid:
        return
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def carrying(entry: bytes) -> list[int]:
    """The live processes whose environment holds `entry` (a job's `ACI_JOB_DIR=<folder>`, which everything it
    starts inherits, in its own session or not): what is left of a job whose supervisor is gone, found by
    what it is rather than by a pid or group number that may have been reused."""
    found = []
    for p in os.listdir("/proc") if os.path.isdir("/proc") else []:
        fields = _proc_stat(int(p)) if p.isdigit() else None
        if not fields or fields[0] in ("Z", "X"):
            continue
        try:
            with open(f"/proc/{p}/environ", "rb") as f:
                if entry in f.read().split(b"\0"):
                    found.append(int(p))
        except OSError:
            continue
    return found


PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def dies_with_parent(sig: int = signal.SIGKILL):
    """A `preexec_fn` for `subprocess.Popen`: the kernel sends the child `sig` when the process that started
    it dies (Linux's parent-death signal), so a parent killed by SIGKILL or the out-of-memory killer, which
    runs no cleanup, leaves no child running unwatched. Looked up before the fork, so the child only calls
    it; None where there is no `prctl` (not Linux)."""
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (AttributeError, OSError):
        return None
    parent = os.getpid()

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, sig)
        if os.getppid() != parent:  # the parent died before the call: the signal can no longer come
            os.kill(os.getpid(), sig)

    return arm


def run_briefly(argv: list[str], cwd, timeout_s: float, max_chars: int = 65536) -> tuple[int | None, str]:
    """Run a short helper command (`timer.sh`, an eval script's `--help`) to its end or `timeout_s`:
    (exit code, or None when it timed out, flooded its output or could not start; its stdout and stderr,
    at most `max_chars`).

    It runs in a session of its own with no stdin; its output is read as it comes, so neither a child
    that keeps the pipe open (`sleep` in a hanging script) nor endless output can hold the caller longer
    than `timeout_s` or fill its memory: on either, the whole group is killed. The command's answer is
    what it printed by the time it exited: a background child it left holding the pipe open is killed
    with the group then, not waited for (a timer.sh that did so cost the full limit on every read). The
    exit is seen without reaping (`_exited`), so the group's number cannot pass to another process before
    the kill."""
    import select
    import subprocess
    import time

    try:
        proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in an argument
        return None, f"could not start: {getattr(e, 'strerror', None) or e}"
    out, end, exited = bytearray(), time.monotonic() + timeout_s, False
    fd = proc.stdout.fileno()
    try:
        while len(out) <= max_chars * 4:
            left = end - time.monotonic()
            # Once it has exited, only what is already in the pipe is read; before, wait a moment for more
            wait = 0.0 if exited else min(left, _EXIT_POLL_S)
            if left <= 0 or not select.select([fd], [], [], wait)[0]:
                if exited or left <= 0:
                    break
                exited = _exited(proc.pid)
                continue
            chunk = os.read(fd, 65536)
            if not chunk:  # every writer closed the pipe: it has exited or soon will, else it runs on
                exited = exited or _exited(proc.pid, wait_s=max(end - time.monotonic(), 0.0))
                break
            out += chunk
    finally:
        proc.stdout.close()
    signal_group(proc.pid, signal.SIGKILL)  # still a zombie at worst, so the group is still its own
    rc = proc.wait()
    return (rc if exited else None), out.decode(errors="replace")[:max_chars]


def run_to_exit(argv: list[str], *, timeout_s: float, cwd=None, env: dict | None = None,
                stdin_text: str | None = None) -> tuple[int | None, str, str]:
    """Run a command to its own exit or `timeout_s`: (exit code, or None when it timed out; stdout; stderr).

    Its output goes to files, not pipes, so the wait ends when the command exits even if a child it left
    behind (a worker pool, vLLM's engine) still holds its stdout or stderr; a pipe would be read until
    that child closed it, past any limit. The command's whole session is killed once it has exited or
    timed out, so nothing it started outlives the call. `stdin_text` is its standard input."""
    import subprocess
    import tempfile

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as inp:
        inp.write((stdin_text or "").encode())
        inp.seek(0)
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=inp, stdout=out, stderr=err, start_new_session=True)
        try:
            rc: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            rc = None
        except BaseException:  # interrupted: the command goes with the call
            signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        signal_group(proc.pid, signal.SIGKILL)  # what it left behind, or the command itself on a timeout
        proc.wait()
        out.seek(0)
        err.seek(0)
        return rc, out.read().decode(errors="replace"), err.read().decode(errors="replace")


_EXIT_POLL_S = 0.02  # how often run_briefly looks whether its command has exited while the pipe stays quiet


def _exited(pid: int, wait_s: float = 0.0) -> bool:
    """Whether child `pid` has exited, within `wait_s`, leaving it unreaped (a zombie keeps its pid and
    process group number from reuse until `wait`)."""
    import time

    end = time.monotonic() + wait_s
    while True:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
        except ChildProcessError:
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(min(_EXIT_POLL_S, max(end - time.monotonic(), 0.0)))


def exit_without_teardown(code: int) -> NoReturn:
    """End a process whose work is done with `code`, skipping the interpreter's teardown of its modules.

    With torch, transformers and TRL imported that teardown takes about 2 s on a 2-core CPU (`import torch,
    transformers, trl` then exit: 1.97 s; with `os._exit`: 0.04 s), and a job reads as ended, and whoever
    waits for a child's result gets it, only when the process is gone. The exit handlers still run
    (logging's and the libraries' flushes), then stdout and stderr are flushed. A process with a thread of
    its own still running, or one rank of several (`WORLD_SIZE` > 1, whose process group the teardown
    closes), exits the usual way."""
    import atexit
    import threading

    others = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    if others or int(os.environ.get("WORLD_SIZE") or 1) > 1:
        sys.exit(code)
    atexit._run_exitfuncs()  # noqa: SLF001 - what sys.exit would run first; the teardown after it is skipped
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken stream: nothing more can reach it
            pass
    os._exit(code)
