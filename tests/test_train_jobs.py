"""Training jobs as processes: progress while running, a graceful stop that saves a last checkpoint, jobs
killed with SIGKILL (the trainer alone, or the trainer and its supervisor) reported failed with state
consistent, and a new job starting afterwards that saves and stops by itself where the final reserve begins."""

from __future__ import annotations

import os
import signal
import subprocess
from datetime import timedelta

import pytest

from aci import jobs, processes, records, registry
from aci.errors import ACIError
from aci.state import State, now, parse_ts, read_json, read_jsonl
from tests.train_helpers import FAST, call, ctx_for, make_run, no_stray_jobs, wait  # noqa: F401 (fixture)

LONG = {**FAST, "max_steps": 100_000, "save_steps": 100_000, "lr_schedule": "constant"}


def _training(view) -> bool:
    return view.status != "running" or view.progress.get("step", 0) >= 2 and "loss" in view.progress


@pytest.mark.usefixtures("no_stray_jobs")
def test_stop_kill_and_restart(tmp_path, tiny_model, monkeypatch):
    monkeypatch.delenv("ACI_STATE", raising=False)
    make_run(tmp_path, tiny_model, profile="default", contamination=None)
    state = State(tmp_path / "state")

    a = call(tmp_path, action="start", data="sft.jsonl", **LONG).job
    b = call(tmp_path, action="start", data="sft.jsonl", **LONG, concurrent=True).job
    c = call(tmp_path, action="start", data="sft.jsonl", **LONG, concurrent=True).job
    # one of the three running jobs, and the command that stops it
    with pytest.raises(ACIError, match=rf"^train job ({a.id}|{b.id}|{c.id}) .*`aci train stop --job \1`"):
        call(tmp_path, action="start", data="sft.jsonl", **FAST, max_steps=1)

    # status while running: step, total, loss, learning rate, tokens/s, ETA
    running = wait(tmp_path, a.id, until=_training, timeout=240).job
    assert running.status == "running", running.log_tail
    p = running.progress
    assert p["total_steps"] == 100_000 and p["step"] >= 2 and p["learning_rate"] > 0 and p["loss"] > 0
    assert p["tokens_per_s"] > 0 and p["eta_s"] > 0 and p["phase"] == "training"

    # stop: the job saves where it is, registers that checkpoint, and is reported stopped
    stopped = call(tmp_path, action="stop", job=a.id, grace_s=60)
    assert stopped.action == "stop" and stopped.job.status == "stopped", stopped.job.reason
    step = stopped.job.progress["step"]
    assert [e["checkpoint"] for e in stopped.checkpoints] == [f"{a.id}/checkpoint-{step}"]
    assert (tmp_path / "checkpoints" / a.id / f"checkpoint-{step}" / "model.safetensors").is_file()

    # SIGKILL the trainer alone: its supervisor records the failure
    for j in (b, c):
        assert wait(tmp_path, j.id, until=_training, timeout=240).job.status == "running"
    job_b = read_json(state.root / records.JOBS / b.id / "job.json")
    os.kill(job_b["pid"], signal.SIGKILL)
    failed = wait(tmp_path, b.id, timeout=30)
    assert failed.job.status == "failed" and "SIGKILL" in failed.job.reason
    assert failed.job.log_tail and "[aci] step" in failed.job.log_tail

    # SIGKILL the supervisor and the trainer: nobody writes exit.json, the tool reaps the job
    job_c = read_json(state.root / records.JOBS / c.id / "job.json")
    os.kill(job_c["supervisor_pid"], signal.SIGKILL)
    os.kill(job_c["pid"], signal.SIGKILL)
    gone = wait(tmp_path, c.id, timeout=30)
    assert gone.job.status == "failed" and "without an exit status" in gone.job.reason
    assert read_json(state.root / records.JOBS / c.id / "exit.json")["status"] == "failed"
    assert any(e["message"] == f"job {c.id} failed: its supervisor vanished" for e in state.journal())
    assert jobs.reap(state) == []  # once

    # state is consistent: every line parses, every write was committed, nothing is left running
    read_jsonl(state.root / "journal.jsonl")
    read_jsonl(state.root / records.CHECKPOINTS)
    assert subprocess.run(["git", "status", "--porcelain"], cwd=state.root, capture_output=True, text=True).stdout == ""
    assert {j.id: j.status for j in call(tmp_path, action="list").jobs} == {a.id: "stopped", b.id: "failed",
                                                                           c.id: "failed"}

    # and a new job starts (no --concurrent needed). Its declared throughput is wildly optimistic, so the
    # deadline gate lets it through, but the job saves and stops by itself where the final reserve begins.
    reserve = timedelta(minutes=ctx_for(tmp_path).rules.profile.final_reserve_min)
    registry.call("plan", {"action": "update", "deadline": (now() + reserve + timedelta(seconds=75)).isoformat(),
                           "budget_hours": 10}, ctx_for(tmp_path))  # a 10-hour run near its end
    d = call(tmp_path, action="start", data="sft.jsonl", **LONG, tokens_per_s=1e9).job
    done = wait(tmp_path, d.id, timeout=240)
    assert done.job.status == "succeeded", done.job.log_tail
    p = done.job.progress
    assert "reached the final reserve" in p["stop_reason"] and 0 < p["step"] < 100_000
    assert [e["checkpoint"] for e in done.checkpoints] == [f"{d.id}/checkpoint-{p['step']}"]


def test_a_recycled_pid_is_not_mistaken_for_the_job(tmp_path):
    me = os.getpid()
    assert processes.alive(me) and processes.alive(me, processes.start_time(me))
    assert not processes.alive(me, processes.start_time(me) + 1)  # same pid, another process
    assert not processes.alive(None)


@pytest.mark.usefixtures("no_stray_jobs")
def test_two_simultaneous_starts_launch_one_train_job(tmp_path, tiny_model, monkeypatch):
    """The one-train-job check runs under the state lock: two `aci train start` at once cannot both pass."""
    import sys

    monkeypatch.delenv("ACI_STATE", raising=False)
    make_run(tmp_path, tiny_model, profile="default", contamination=None)
    args = [sys.executable, "-m", "aci.cli", "train", "start", "--data", "sft.jsonl", "--max-steps", "100000",
            "--save-steps", "100000", "--max-length", "64", "--batch-size", "2", "--check-samples", "4"]
    procs = [subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    assert sorted(rc for rc, _ in results) == [0, 2], results
    assert "is still running" in next(err for rc, err in results if rc == 2)
    assert len(call(tmp_path, action="list").jobs) == 1


def test_job_ids_cannot_leave_the_jobs_folder(workdir, tiny_model):
    """`train stop --job ../../x` over MCP must not signal whatever pid a job.json outside state/jobs names."""
    import asyncio
    import json
    import time

    from tests.conftest import mcp_client

    make_run(workdir, tiny_model, profile="default", contamination=None)
    victim = subprocess.Popen(["sleep", "120"], start_new_session=True)
    try:
        fake = workdir / "elsewhere"
        fake.mkdir()
        (fake / "job.json").write_text(json.dumps({
            "id": "x", "kind": "train", "command": ["sleep"], "started_at": "2030-01-01T00:00:00+00:00",
            "pid": victim.pid, "pid_start": processes.start_time(victim.pid)}))

        async def go():
            async with mcp_client(workdir) as c:
                return [await c.call_tool("train", {"action": action, "job": "../../elsewhere"})
                        for action in ("stop", "status")]

        for r in asyncio.run(go()):
            assert r.is_error and "is not a job id" in r.content[0].text, r.content
        time.sleep(0.5)
        assert victim.poll() is None  # still alive: nothing was signalled
    finally:
        victim.kill()
        victim.wait()


def _processes_mentioning(text: str) -> list[int]:
    from pathlib import Path

    found = []
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and text.encode() in (p / "cmdline").read_bytes():
                found.append(int(p.name))
        except OSError:
            continue
    return found


def test_the_supervisor_stops_every_job_kind_at_its_stop_time(workdir, tiny_model):
    """Over MCP, a background evaluation whose eval command hangs ends where the final reserve starts, the eval
    command with it; a server job that ignores SIGTERM is killed after its grace period."""
    import asyncio
    import sys
    import time

    from tests.conftest import mcp_client
    from tests.eval_helpers import eval_command, init_run

    c = init_run(workdir, tiny_model, command=eval_command("--sleep", "600", "--templates-dir", str(workdir)))
    reserve = timedelta(minutes=c.rules.profile.final_reserve_min)
    deadline = (now() + reserve + timedelta(seconds=30)).replace(microsecond=0)
    registry.call("plan", {"action": "update", "deadline": deadline.isoformat(), "budget_hours": 10}, c)

    async def go():
        async with mcp_client(workdir) as client:
            r = await client.call_tool("eval-checkpoint", {"action": "evaluate", "checkpoint": "base", "limit": 40,
                                                           "background": True})
            assert not r.is_error, r.content
            return r.structured_content["job"]

    job = asyncio.run(go())
    assert job["status"] == "running" and job["id"].startswith("eval-")
    stop_at = read_json(c.state.root / records.JOBS / job["id"] / "job.json")["stop_at"]
    assert parse_ts(stop_at) == deadline - reserve  # where the final reserve starts
    view = jobs.wait(c.state, job["id"])
    assert view.status == "stopped" and "reached its stop time" in view.reason, view
    assert _processes_mentioning(str(workdir)) == []  # the eval command went down with the job
    [failed] = [e for e in read_jsonl(c.state.root / records.CHECKPOINTS) if e.get("type") == "evaluated"]
    assert "stop time" in failed["error"]

    stubborn = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                                      f"time.sleep(600)  # {workdir}"]
    started = time.monotonic()
    v = jobs.start(c.state, "serve", stubborn, {}, cwd=workdir, message="a server that ignores SIGTERM",
                   stop_at=now() + timedelta(seconds=1), grace_s=1)
    v = jobs.wait(c.state, v.id)
    assert v.status == "stopped" and "SIGKILL after 1 s" in v.reason and time.monotonic() - started < 30
    assert read_json(c.state.root / records.JOBS / v.id / "exit.json")["returncode"] == -9
    assert _processes_mentioning(str(workdir)) == []


def test_a_supervisor_that_fails_takes_its_job_down(tmp_path):
    """The supervisor starts the job's command before it imports the rest of aci; if it then fails (here on a
    job.json whose grace period is not a number) it kills the job rather than leave it running unwatched,
    past any stop time."""
    import json
    import sys
    import time

    folder = tmp_path / "state" / records.JOBS / "serve-x"
    folder.mkdir(parents=True)
    (folder / "job.json").write_text(json.dumps({
        "id": "serve-x", "kind": "serve", "command": [sys.executable, "-c", "import time; time.sleep(600)"],
        "started_at": "2030-01-01T00:00:00+00:00", "stop_at": "2030-01-01T01:00:00+00:00", "grace_s": "soon"}))
    with open(tmp_path / "log", "w") as log:  # a file, not a pipe: a job left running would keep a pipe open
        rc = subprocess.run([sys.executable, "-m", "aci.supervisor", str(folder)], stdout=log, stderr=log,
                            timeout=120).returncode
    pid = read_json(folder / "job.json")["pid"]  # recorded before the failure
    try:
        out = (tmp_path / "log").read_text()
        assert rc != 0 and "could not convert string to float: 'soon'" in out, out
        end = time.monotonic() + 10
        while processes.alive(pid) and time.monotonic() < end:
            time.sleep(0.1)
        assert not processes.alive(pid)
    finally:
        processes.signal_group(pid, signal.SIGKILL)


_ENDING = """
import atexit, logging, pathlib, sys, threading, time
from aci import processes
out = pathlib.Path(sys.argv[1])
class Teardown:  # its __del__ runs when the interpreter tears the module down
    def __del__(self):
        (out / "teardown").write_text("ran")
kept = Teardown()
logging.basicConfig(filename=out / "log", level=logging.INFO)
logging.info("logged before the end")
atexit.register(lambda: (out / "atexit").write_text("ran"))
if sys.argv[2] == "thread":
    threading.Thread(target=lambda: (time.sleep(0.5), (out / "thread").write_text("done"))).start()
sys.stdout.write("unflushed output")  # a pipe: block-buffered
processes.exit_without_teardown(3)
"""


@pytest.mark.parametrize("case", ["alone", "thread", "ranks"])
def test_a_finished_job_exits_without_the_teardown_but_loses_nothing(tmp_path, case):
    """Jobs end with `exit_without_teardown`, which skips the interpreter's teardown (about 2 s with torch,
    transformers and TRL imported) but still runs the exit handlers and flushes output and logs; with a
    thread still working, or as one rank of several, it exits the usual way."""
    import sys

    env = {**os.environ, "WORLD_SIZE": "2" if case == "ranks" else "1"}
    r = subprocess.run([sys.executable, "-c", _ENDING, str(tmp_path), case], capture_output=True, text=True,
                       timeout=60, env=env)
    assert r.returncode == 3, r.stderr
    assert r.stdout == "unflushed output"
    assert "logged before the end" in (tmp_path / "log").read_text()
    assert (tmp_path / "atexit").read_text() == "ran"
    assert (tmp_path / "teardown").exists() == (case != "alone")  # skipped only when nothing else needs it
    assert (tmp_path / "thread").exists() == (case == "thread")
