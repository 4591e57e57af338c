"""Training jobs of two processes, really launched on this CPU by accelerate's own launcher (torchrun, gloo):
every rank trains, rank 0 alone saves, registers and reports, `train status` names the ranks; a stop
(`train stop`, a SIGTERM that reaches one rank only, the stop time) ends every rank after the same step
with one checkpoint; a rank that dies fails the job, saying which; a launcher killed outright leaves no
rank running. SFT and GRPO. The ranks' agreement itself is checked on two real gloo processes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from aci import records, registry
from aci.jobs import JOB_DIR_ENV
from aci.state import State, now, read_json, read_jsonl
from tests.train_helpers import (
    FAST,
    call,
    ctx_for,
    make_run,
    no_stray_jobs,  # noqa: F401 (fixture)
    task_rows,
    wait,
    write_jsonl,
)

TWO = {**FAST, "processes": 2, "concurrent": True}
LONG = {**TWO, "max_steps": 100_000, "save_steps": 100_000, "lr_schedule": "constant"}
GRPO = {**TWO, "method": "grpo", "data": "tasks.jsonl", "num_generations": 2, "max_completion_length": 8}


def _training(view) -> bool:
    return view.status != "running" or view.progress.get("step", 0) >= 2


def _left(state: State, job_id: str, wait_s: float = 10.0) -> list[int]:
    """The live processes that still carry the job's folder (its launcher and ranks), after up to `wait_s`."""
    entry = f"{JOB_DIR_ENV}={state.root / records.JOBS / job_id}".encode()
    end = time.monotonic() + wait_s
    while True:
        found = []
        for p in Path("/proc").iterdir():
            try:
                if p.name.isdigit() and (p / "stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX" and \
                        entry in (p / "environ").read_bytes().split(b"\0"):
                    found.append(int(p.name))
            except OSError:
                continue
        if not found or time.monotonic() > end:
            return found
        time.sleep(0.2)


def _ended(workdir: Path, job_id: str):
    """The job once it has ended, within 3 minutes (ranks that disagree wait on each other for 30)."""
    view = wait(workdir, job_id, timeout=180).job
    assert view.status != "running", f"job {job_id} still running: its ranks wait on each other"
    return view


def _rank_pid(view, rank: int) -> int:
    return next(r["pid"] for r in view.progress["processes"]["ranks"] if r["rank"] == rank)


def _saved_events(state: State, job_id: str) -> list[dict]:
    return [e for e in state.journal() if (e.get("data") or {}).get("job") == job_id and "checkpoint" in
            (e.get("data") or {})]


@pytest.mark.usefixtures("no_stray_jobs")
def test_sft_on_two_ranks_stops_and_fails_as_one_job(tmp_path, tiny_model, monkeypatch):
    monkeypatch.delenv("ACI_STATE", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # torchrun then sets 1, which is not the caller's
    make_run(tmp_path, tiny_model, profile="default", contamination=None)
    state = State(tmp_path / "state")
    a, b, c, d = (call(tmp_path, action="start", data="sft.jsonl", **LONG).job for _ in range(4))
    assert read_json(state.root / records.JOBS / a.id / "job.json")["command"][1:5] == \
        ["-m", "aci.training.launch", "--multi_gpu", "--num_processes"]

    # every rank trains: two processes, each its share of each batch (the trainer's epoch counter shows it)
    views = {j.id: wait(tmp_path, j.id, until=_training, timeout=240).job for j in (a, b, c, d)}
    for v in views.values():
        assert v.status == "running", v.log_tail
        procs = v.progress["processes"]
        assert procs["world_size"] == 2 and sorted(r["rank"] for r in procs["ranks"]) == [0, 1]
        assert all(os.path.exists(f"/proc/{r['pid']}") for r in procs["ranks"])
        assert "cores" in v.progress["cpu_threads"]["why"], v.progress["cpu_threads"]  # measured, not "caller"
    status = call(tmp_path, action="status", job=a.id)
    assert f"processes: 2 ranks (rank 0 pid {_rank_pid(status.job, 0)}, rank 1 pid {_rank_pid(status.job, 1)})" \
        in status.summary()

    # SIGTERM to rank 1 alone: both ranks agree to stop after the same step; rank 0 saves and registers once
    os.kill(_rank_pid(views[a.id], 1), signal.SIGTERM)
    done = _ended(tmp_path, a.id)
    assert done.status == "succeeded" and done.progress["stop_reason"] == "stop requested", done.log_tail
    step = done.progress["step"]
    assert [e["checkpoint"] for e in read_jsonl(state.root / records.CHECKPOINTS) if e.get("job") == a.id] == \
        [f"{a.id}/checkpoint-{step}"]
    assert len(_saved_events(state, a.id)) == 1
    assert (tmp_path / "checkpoints" / a.id / f"checkpoint-{step}" / "model.safetensors").is_file()
    assert _left(state, a.id) == []

    # train stop: every rank ends, after a last checkpoint
    stopped = call(tmp_path, action="stop", job=b.id, grace_s=60)
    assert stopped.job.status == "stopped", stopped.job.reason
    assert [e["checkpoint"] for e in stopped.checkpoints] == [f"{b.id}/checkpoint-{stopped.job.progress['step']}"]
    assert _left(state, b.id) == []

    # a rank that dies fails the job, which names it, and the other rank ends with it
    os.kill(_rank_pid(views[c.id], 1), signal.SIGKILL)
    failed = _ended(tmp_path, c.id)
    assert failed.status == "failed" and "rank 1" in failed.reason and "SIGKILL" in failed.reason, failed.reason
    assert "Root Cause (first observed failure)" in failed.log_tail  # torchrun's report of every rank's exit
    assert _left(state, c.id) == []

    # the launcher killed outright: its ranks (each in a session of its own) die with it
    os.kill(read_json(state.root / records.JOBS / d.id / "job.json")["pid"], signal.SIGKILL)
    assert _ended(tmp_path, d.id).status == "failed"
    assert _left(state, d.id, wait_s=5) == []

    # the stop time: rank 0's step times decide when the wsd decay starts and where the job stops, and both
    # ranks follow (a rank stopping alone would leave the other waiting, and the job failed); rank 0 scores
    # the dev set and both ranks save its best (the first point here: the tiny model scores 0 throughout)
    write_jsonl(tmp_path / "dev.jsonl", task_rows(4, grader={"type": "regex", "pattern": "ANSWER: [0-9]+"}))
    reserve = timedelta(minutes=ctx_for(tmp_path).rules.profile.final_reserve_min)
    registry.call("plan", {"action": "update", "deadline": (now() + reserve + timedelta(seconds=30)).isoformat(),
                           "budget_hours": 10}, ctx_for(tmp_path))
    e = call(tmp_path, action="start", data="sft.jsonl", **{**LONG, "lr_schedule": "wsd"}, dev_set="dev.jsonl",
             dev_every=100, dev_max_new_tokens=8).job  # the rate: measured by jobs a-d
    ended = _ended(tmp_path, e.id)
    p = ended.progress
    assert ended.status == "succeeded", ended.log_tail
    assert p["stop_reason"].startswith(("planned end", "reached the final reserve")), p
    assert p["schedule"]["decay_from_step"] is not None and p["step"] < 100_000, p
    saved = [x for x in read_jsonl(state.root / records.CHECKPOINTS) if x.get("job") == e.id]
    assert saved[0]["checkpoint"] == p["dev"]["best"]["checkpoint"] == f"{e.id}/checkpoint-100"
    assert saved[-1]["checkpoint"] == f"{e.id}/checkpoint-{p['step']}" and len(_saved_events(state, e.id)) == len(saved)
    assert _left(state, e.id) == []


@pytest.mark.usefixtures("no_stray_jobs")
def test_grpo_on_two_ranks(tmp_path, tiny_model, monkeypatch):
    monkeypatch.delenv("ACI_STATE", raising=False)
    make_run(tmp_path, tiny_model, profile="default", contamination=None)
    state = State(tmp_path / "state")
    g1, g2 = (call(tmp_path, action="start", **GRPO, max_steps=100_000, save_steps=100_000).job for _ in range(2))
    views = {j.id: wait(tmp_path, j.id, until=_training, timeout=240).job for j in (g1, g2)}
    for v in views.values():
        assert v.status == "running" and v.progress["processes"]["world_size"] == 2, v.log_tail
        assert "reward" in v.progress

    stopped = call(tmp_path, action="stop", job=g1.id, grace_s=60)
    assert stopped.job.status == "stopped", stopped.job.reason
    assert [e["checkpoint"] for e in stopped.checkpoints] == [f"{g1.id}/checkpoint-{stopped.job.progress['step']}"]
    assert len(_saved_events(state, g1.id)) == 1
    assert _left(state, g1.id) == []

    os.kill(_rank_pid(views[g2.id], 0), signal.SIGKILL)
    failed = _ended(tmp_path, g2.id)
    assert failed.status == "failed" and "rank 0" in failed.reason and "SIGKILL" in failed.reason, failed.reason
    assert _left(state, g2.id) == []


def test_a_launch_of_fewer_ranks_than_asked_is_refused(tmp_path, tiny_model, monkeypatch):
    """An accelerate config that names no distributed type starts one process whatever --num_processes says:
    the job says so and fails, instead of training alone."""
    monkeypatch.delenv("ACI_STATE", raising=False)
    make_run(tmp_path, tiny_model, profile="default", contamination=None)
    (tmp_path / "one.yaml").write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: 'NO'\n"
                                       "num_machines: 1\nnum_processes: 2\nmixed_precision: 'no'\nuse_cpu: true\n")
    out = call(tmp_path, action="start", data="sft.jsonl", **FAST, max_steps=2, accelerate_config="one.yaml")
    assert out.config["num_processes"] == 2  # the file's count
    view = _ended(tmp_path, out.job.id)
    assert view.status == "failed" and "asked for 2 processes but the launcher started 1" in view.log_tail


_AGREE = """
import json, sys
from accelerate import PartialState
PartialState(cpu=True)
from aci.training import ranks
stop, count = json.loads(sys.argv[1])
print(json.dumps([ranks.agree(stop, count), [m["rank"] for m in ranks.members()]]))
"""


def test_ranks_agree_on_rank_zeros_count_and_any_ranks_stop():
    """Two real gloo processes: each gets rank 0's count (or None) and the stop that either one asked for."""
    def run(inputs: list) -> list:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        procs = [subprocess.Popen([sys.executable, "-c", _AGREE, json.dumps(inputs[r])], stdout=subprocess.PIPE,
                                  text=True, env={**os.environ, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": "2",
                                                  "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
                 for r in range(2)]
        return [json.loads(p.communicate(timeout=120)[0].strip().splitlines()[-1]) for p in procs]

    assert run([[False, 5], [True, 9]]) == [[[True, 5], [0, 1]]] * 2
    assert run([[False, None], [False, 3]]) == [[[False, None], [0, 1]]] * 2
