"""Faults a run meets: a job's supervisor and the MCP server SIGKILLed mid-job (by the out-of-memory killer,
or a user's `kill -9`). Nothing of the job may run on unwatched past its stop time, and what state records
must be what happened (issue 26, row 4). Real processes throughout: `aci serve`, supervisors, the stand-in
eval command."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from aci import jobs, registry
from aci.context import Context
from aci.processes import alive
from aci.state import State, now, read_json
from tests.conftest import mcp_client
from tests.eval_helpers import entries, eval_command, init_run

# A job command that escapes what the supervisor gives it: it drops its parent-death signal and ignores
# SIGTERM, then sleeps, with a child of its own that sleeps too.
STUBBORN = r"""
import ctypes, signal, subprocess, time
ctypes.CDLL(None).prctl(1, 0)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
subprocess.Popen(["sleep", "300"])
print("armed", flush=True)
time.sleep(300)
"""


def _processes_of(folder: Path) -> list[int]:
    from aci.processes import carrying

    return carrying(f"ACI_JOB_DIR={folder}".encode())


def _recorded(folder: Path) -> dict | None:
    """job.json once the supervisor has recorded the command's pid."""
    job = read_json(folder / "job.json")
    return job if job.get("pid") else None


def _until(predicate, timeout: float, poll: float = 0.1):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = predicate()
        if got:
            return got
        time.sleep(poll)
    return predicate()


def _server_pids(workdir: Path) -> list[int]:
    """The `aci serve` processes started in `workdir` (argv holds `aci.cli` and `serve`: a pytest process
    whose argv names test_server.py, in the same folder, is not one)."""
    found = []
    for p in Path("/proc").iterdir():
        try:
            argv = (p / "cmdline").read_bytes().split(b"\0") if p.name.isdigit() else []
            if b"aci.cli" in argv and b"serve" in argv and Path(os.readlink(p / "cwd")) == workdir:
                found.append(int(p.name))
        except OSError:
            continue
    return found


def test_killing_the_server_and_the_supervisor_ends_the_job_and_state_says_so(workdir, tiny_model, state):
    """The MCP server runs a foreground evaluation (a job: supervisor, evaluation runner, eval command in a
    session of its own). Both the server and the supervisor are SIGKILLed: the eval command must not go on
    for its 120 s, and a fresh server reports the job failed because its supervisor vanished, with no score."""
    init_run(workdir, tiny_model, command=eval_command("--sleep", "120"))

    def job_started():
        found = jobs.list_jobs(state, kind="eval")
        job = read_json(Path(found[0].folder) / "job.json") if found else None
        return job if job and job.get("pid") and len(_processes_of(Path(found[0].folder))) >= 2 else None

    seen: dict = {}

    async def go():
        async with mcp_client(workdir) as client:
            call = asyncio.create_task(client.call_tool("eval-checkpoint", {"checkpoint": "base", "limit": 40}))
            seen["job"] = job = await asyncio.to_thread(_until, job_started, 60)
            assert job, "the evaluation job did not start"
            for pid in [*_server_pids(workdir), job["supervisor_pid"]]:
                os.kill(pid, signal.SIGKILL)
            await asyncio.wait_for(call, 20)  # the server is gone: the call cannot answer

    try:
        asyncio.run(go())
    except BaseException:  # noqa: BLE001 - the client's transport breaks with the server
        pass
    job = seen.get("job")
    assert job, "the evaluation job did not start"
    folder = workdir / "state" / "jobs" / job["id"]
    killed_at = time.monotonic()
    left = _until(lambda: not _processes_of(folder), 10)
    assert left, f"the job's processes still run after its supervisor died: {_processes_of(folder)}"
    assert time.monotonic() - killed_at < 10
    assert not alive(job["pid"], job["pid_start"])

    async def after():
        async with mcp_client(workdir) as client:
            return await client.call_tool("eval-checkpoint", {"action": "list"}), await client.call_tool("status", {})

    listed, status = asyncio.run(after())
    assert not status.is_error and not status.structured_content["state"]["running_jobs"]
    view = jobs.view(state, job["id"])
    assert view.status == "failed" and "supervisor is gone" in view.reason and "did not finish" in view.reason
    assert not [e for e in entries(workdir) if e.get("score") is not None]  # no score from a killed evaluation
    registry.call("train", {"action": "list"}, Context(workdir=workdir))  # reaps: the verdict is recorded
    assert read_json(folder / "exit.json")["status"] == "failed"
    assert any(e["message"] == f"job {job['id']} failed: its supervisor vanished" for e in state.journal())


@pytest.fixture
def state(tmp_path):
    s = State(tmp_path / "state")
    yield s
    for folder in (s.root / "jobs").glob("*"):  # whatever a failing test left running
        for pid in _processes_of(folder):
            os.kill(pid, signal.SIGKILL)


def test_a_job_that_outlives_its_supervisor_is_held_to_its_stop_time(state, tmp_path):
    """A command that dropped its parent-death signal and ignores SIGTERM, its supervisor SIGKILLed: looking
    at the job (as `aci status` does) SIGTERMs it at its stop time and SIGKILLs it after the grace, with its
    child, and it is recorded as stopped at its stop time, not as a success or a vanished job."""
    stop_at = now() + timedelta(seconds=4)
    v = jobs.start(state, "eval", [sys.executable, "-c", STUBBORN], {}, cwd=tmp_path, message="stubborn",
                   stop_at=stop_at, grace_s=1)
    folder = Path(v.folder)
    job = _until(lambda: "armed" in jobs.tail(folder / "log") and _recorded(folder), 30)
    os.kill(job["supervisor_pid"], signal.SIGKILL)
    time.sleep(0.5)
    early = jobs.view(state, v.id)
    assert early.status == "running" and "supervisor is gone" in early.reason
    assert len(_processes_of(folder)) == 2  # before its stop time it may run

    def ended():
        return jobs.view(state, v.id).status != "running"

    assert _until(ended, 15, poll=0.2), "the job ran on past its stop time and grace"
    assert now() < stop_at + timedelta(seconds=8)
    assert _until(lambda: not _processes_of(folder), 5), "its child still runs"
    done = jobs.view(state, v.id)
    assert done.status == "stopped" and "reached its stop time" in done.reason and "supervisor" in done.reason
    assert jobs.reap(state) == [v.id]
    assert read_json(folder / "exit.json")["status"] == "stopped"


def test_a_killed_supervisor_takes_its_command_along_at_once(state, tmp_path):
    """No stop time at all: the parent-death signal alone ends the command, and its child is ended when the
    job is next looked at."""
    v = jobs.start(state, "eval", [sys.executable, "-c", "import subprocess, time; subprocess.Popen(['sleep', "
                                   "'300']); print('armed', flush=True); time.sleep(300)"], {}, cwd=tmp_path,
                   message="plain", stop_at=None)
    folder = Path(v.folder)
    job = _until(lambda: "armed" in jobs.tail(folder / "log") and _recorded(folder), 30)
    os.kill(job["supervisor_pid"], signal.SIGKILL)
    assert _until(lambda: not alive(job["pid"], job["pid_start"]), 5), "the command outlived its supervisor"
    gone = jobs.view(state, v.id)
    assert gone.status == "failed" and "did not finish" in gone.reason
    assert _until(lambda: not _processes_of(folder), 5)
