"""A full disk, for real: a size-limited tmpfs mounted for the test holds the run's working directory and
state. Training keeps a bounded number of checkpoints; a job whose disk fills fails with the disk named,
its exit record written even though its state commit cannot be, and that commit is made once there is
space again; a promotion that would not fit is refused before it copies anything, and one that runs out
of space midway leaves the old final_model.

Mounting needs root (CAP_SYS_ADMIN), as in CI; elsewhere these tests are skipped with that reason."""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
import time
from pathlib import Path

import pytest

from aci import jobfiles, jobs, processes, records
from aci.errors import ACIError
from aci.evaluation import swap
from aci.state import State, read_jsonl
from tests.conftest import mcp_client
from tests.eval_helpers import call as eval_call
from tests.eval_helpers import copy_model, init_run, single_thread  # noqa: F401 (fixture)
from tests.train_helpers import FAST, call, make_run, no_stray_jobs  # noqa: F401 (fixture)


@pytest.fixture
def small_disk(tmp_path):
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m,mode=0755", "tmpfs", str(mnt)], capture_output=True,
                       text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a size-limited tmpfs here (needs root): {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(where: Path, leave: int = 0) -> Path:
    """Write a ballast file until the disk is full, then give back `leave` bytes."""
    ballast = where / "ballast.bin"
    chunk = b"\0" * (64 << 10)
    with open(ballast, "wb") as f:
        try:
            while True:
                f.write(chunk)
                f.flush()
        except OSError as e:
            assert e.errno == errno.ENOSPC
    if leave:
        os.truncate(ballast, max(0, ballast.stat().st_size - leave))
    return ballast


def free(where: Path) -> int:
    return os.statvfs(where).f_bavail * os.statvfs(where).f_frsize


def _wait_supervisor(state: State, job_id: str, timeout: float = 300) -> jobs.JobView:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = jobs.view(state, job_id)
        job = jobs.read_json(jobs.job_dir(state, job_id) / "job.json")
        if v.status != "running" and not processes.alive(job.get("supervisor_pid"), job.get("supervisor_start")):
            return v
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} still running after {timeout} s")


@pytest.mark.usefixtures("no_stray_jobs")
def test_training_keeps_few_checkpoints_and_names_a_full_disk(small_disk, tiny_model, monkeypatch):
    monkeypatch.delenv("ACI_STATE", raising=False)
    run = small_disk / "run"
    run.mkdir()
    make_run(run, tiny_model, profile="default", contamination=None)
    state = State(run / "state")

    # bounded by default: six saves, three checkpoints on disk, the removals in the journal
    done = call(run, action="start", data="sft.jsonl", **FAST, max_steps=6, save_steps=1).job
    v = _wait_supervisor(state, done.id)
    assert v.status == "succeeded", v.log_tail
    kept = sorted(p.name for p in (run / "checkpoints" / done.id).glob("checkpoint-*"))
    assert kept == ["checkpoint-4", "checkpoint-5", "checkpoint-6"]
    assert any(f"removed {done.id}/checkpoint-1" in e["message"] for e in state.journal())

    # the disk fills while the next job loads: it fails with the disk named, not as a vanished process
    job = call(run, action="start", data="sft.jsonl", **FAST, max_steps=1000, save_steps=1).job
    ballast = fill(small_disk)
    v = _wait_supervisor(state, job.id)
    assert v.status == "failed" and "is full" in v.reason and "No space left on device" in v.reason, v.reason
    assert (state.root / records.JOBS / job.id / "exit.json").is_file()
    assert (state.root / records.JOBS / job.id / jobfiles.END_PENDING).exists()  # its commit could not be made

    # with space again, the next look at the jobs records the end event, and state is whole
    ballast.unlink()
    out = call(run, action="status", job=job.id)
    assert out.job.status == "failed" and "is full" in out.job.reason
    assert not (state.root / records.JOBS / job.id / jobfiles.END_PENDING).exists()
    assert any(e["message"].startswith(f"job {job.id} failed (recorded late") for e in state.journal())
    read_jsonl(state.root / records.CHECKPOINTS)
    porcelain = subprocess.run(["git", "status", "--porcelain"], cwd=state.root, capture_output=True, text=True)
    assert porcelain.stdout == ""


@pytest.mark.usefixtures("single_thread")
def test_promotion_checks_free_space_and_keeps_the_old_model_when_the_disk_fills(small_disk, tiny_model, monkeypatch):
    workdir = small_disk / "run"
    workdir.mkdir()
    monkeypatch.chdir(workdir)  # set up after the disk, so undone before it is unmounted
    init_run(workdir, tiny_model)
    copy_model(tiny_model, workdir / "ck", 0.6)
    copy_model(tiny_model, workdir / "ck2", 0.9)
    eval_call(workdir, checkpoint="base", limit=40)
    assert eval_call(workdir, checkpoint="ck", parent="base", limit=40, promote=True).promotion.promoted
    eval_call(workdir, checkpoint="ck2", parent="base", limit=40)
    final = workdir / "final_model"
    before = swap.marker(final)["promotion_id"]

    ballast = fill(small_disk, leave=300 << 10)  # less than the weights plus the kept margin

    async def go():
        async with mcp_client(workdir) as client:
            return await client.call_tool("eval-checkpoint", {"action": "promote", "checkpoint": "ck2"})

    r = asyncio.run(go())
    assert r.is_error and "disk full: promoting ck2" in r.content[0].text and "free" in r.content[0].text, r.content
    assert swap.marker(final)["promotion_id"] == before and swap.verify(final) == []
    assert not list(workdir.glob("final_model.*"))

    # the disk fills during the copy itself (the check passed): a named error, the old folder in place
    def build(out: Path) -> dict:
        (out / "weights.bin").write_bytes(b"\0" * (free(small_disk) + (1 << 20)))
        return {}

    with swap.locked(workdir / "state"), pytest.raises(ACIError, match="disk full while building the new final_model"):
        swap.install(workdir, "full", build, {"checkpoint": "ck2"})
    assert swap.marker(final)["promotion_id"] == before and swap.verify(final) == []
    assert not list(workdir.glob("final_model.*"))
    ballast.unlink()
    assert eval_call(workdir, action="promote", checkpoint="ck2").promotion.promoted
