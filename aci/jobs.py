"""Jobs: detached, supervised processes with a folder in state.

`start()` launches the job's supervisor (`aci.supervisor`) in a new session, so the job outlives the MCP
server and the agent's shell; the supervisor runs the job's command with its output in `log`, holds it to
its stop time and records how it ended, for any reason (`exit.json` with the CPU time and peak memory the
job used, and a journal event). Every job, of any kind, has a stop time (`stop_at` in `job.json`; by
default where the run's final reserve starts, see `Clock.job_stop`), so no training, evaluation, server
or measurement runs past it whatever the job's own code does. The job itself reports progress by writing
`progress.json` (see `write_progress`). A job whose supervisor vanished without `exit.json` (SIGKILL, OOM
killer, machine restart) is reported failed, with the tail of its log, and `reap()` records that verdict
in state so it survives; the job's command dies with its supervisor (a parent-death signal), what is left
of its process group is killed when the job is next looked at, and a command that outlived its supervisor
anyway is held to its stop time by `view()`. Processes are recognised by pid *and* start time, so a recycled pid never makes
a dead job look alive.

Folder `jobs/<id>/`: `job.json` (command, config, pids), `config.json` (the resolved config the job reads),
`log`, `progress.json`, `exit.json`, and `stop` (present once a stop was requested); `aci.jobfiles` names them.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from aci import jobfiles, records
from aci.errors import ACIError
from aci.processes import alive, carrying, signal_group, start_time
from aci.state import STATE_ENV, State, atomic_write_json, iso, now, parse_ts, read_json

STOP_GRACE_S = 20.0
# Seconds between SIGTERM and SIGKILL at a job's stop time: a training job saves a last checkpoint then.
DEADLINE_GRACE_S = {"train": 120.0}
DEFAULT_DEADLINE_GRACE_S = 30.0
JOB_DIR_ENV = "ACI_JOB_DIR"  # the job's folder, in the environment of everything the job runs
RUN_CLOCK = "run"  # `start(stop_at=RUN_CLOCK)`: the stop time the run's clock gives a job started now


class JobView(BaseModel):
    id: str
    kind: str
    status: str = Field(description="running, succeeded, failed or stopped")
    started_at: str
    ended_at: str | None = None
    pid: int | None = None
    progress: dict[str, Any] = Field(default_factory=dict)
    reason: str | None = None
    log_tail: str | None = None
    folder: str


_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def job_dir(state: State, job_id: str) -> Path:
    """The folder of job `job_id`; an id that could point outside `jobs/` (`../x`, `a/b`) is refused."""
    if not isinstance(job_id, str) or not _JOB_ID.fullmatch(job_id) or ".." in job_id:
        raise ACIError(f"{job_id!r} is not a job id (letters, digits, '.', '_' and '-'; see `aci status` for the "
                       f"running jobs)")
    return state.root / records.JOBS / job_id


def new_id(kind: str) -> str:
    return f"{kind}-{time.strftime('%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"


def run_stop_time(state: State, workdir: Path) -> datetime | None:
    """The stop time the run's clock gives a job started now (None without a deadline)."""
    from aci.context import Context

    return Context(state=state.root, workdir=workdir).clock.job_stop()


def start(state: State, kind: str, command: list[str], config: dict, *, cwd: Path, message: str,
          env: dict[str, str] | None = None, job_id: str | None = None, exclusive: bool = False,
          stop_at: datetime | str | None = RUN_CLOCK, grace_s: float | None = None) -> JobView:
    """Launch a supervised job and record it as one state event.

    `exclusive`: refuse while another job holds the GPU (`gpu_busy`), checked under the state lock so two
    concurrent starts cannot both pass. `stop_at`: when the supervisor ends the job (default: the run's
    clock; None: never); `grace_s`: SIGTERM to SIGKILL then (default per kind).
    """
    job_id = job_id or new_id(kind)
    if stop_at == RUN_CLOCK:
        stop_at = run_stop_time(state, cwd)
    ends = parse_ts(stop_at) if isinstance(stop_at, str) else stop_at
    if ends is not None and ends <= now():
        raise ACIError(f"no time is left for another {kind} job: its stop time {iso(ends)} has passed (no job runs "
                       f"into the last minutes before the deadline); final_model stays as it is: run aci finalize")
    grace = grace_s if grace_s is not None else DEADLINE_GRACE_S.get(kind, DEFAULT_DEADLINE_GRACE_S)
    folder = job_dir(state, job_id)
    if folder.exists():
        raise ACIError(f"job {job_id} already exists")
    rel = f"{records.JOBS}/{job_id}"
    with state.event(kind, f"started job {job_id}: {message}", tool=kind, data={"job": job_id}) as w:
        busy = gpu_busy(state) if exclusive else None
        if busy:
            raise ACIError(busy)
        folder.mkdir(parents=True)
        _reserve_exit_record(folder)
        w.write_json(f"{rel}/{jobfiles.CONFIG}", config)
        record = records.JobRecord(id=job_id, kind=kind, command=command, started_at=iso(), config=config)
        dumped = record.model_dump(mode="json") | {"grace_s": grace, "stop_at": iso(stop_at) if stop_at else None}
        w.write_json(f"{rel}/{jobfiles.JOB}", dumped | {"cwd": str(cwd)})
        log = open(folder / jobfiles.LOG, "ab")
        full_env = {**os.environ, **(env or {}), JOB_DIR_ENV: str(folder), STATE_ENV: str(state.root),
                    "PYTHONUNBUFFERED": "1"}
        sup = subprocess.Popen(
            [sys.executable, "-m", "aci.supervisor", str(folder)],
            cwd=cwd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, env=full_env,
        )
        log.close()
        w.write_json(f"{rel}/{jobfiles.JOB}", dumped | {
            "cwd": str(cwd), "supervisor_pid": sup.pid, "supervisor_start": start_time(sup.pid)})
    return view(state, job_id)


def _reserve_exit_record(folder: Path) -> None:
    with open(folder / jobfiles.EXIT_RESERVE, "wb") as f:
        f.write(b" " * 4096)
        f.flush()
        os.fsync(f.fileno())
    (folder / jobfiles.END_PENDING).touch()


def tail(path: Path, lines: int = 30) -> str:
    if not path.exists():
        return ""
    with open(path, "rb") as f:
        f.seek(0, 2)
        f.seek(max(0, f.tell() - 16384))
        return b"\n".join(f.read().splitlines()[-lines:]).decode(errors="replace")


def view(state: State, job_id: str) -> JobView:
    folder = job_dir(state, job_id)
    job = read_json(folder / jobfiles.JOB)
    if job is None:
        raise ACIError(f"no job {job_id!r} in {state.root / records.JOBS}")
    ex = read_json(folder / jobfiles.EXIT)
    progress = read_json(folder / jobfiles.PROGRESS) or {}
    if ex:
        status, ended, reason = ex["status"], ex["ended_at"], ex.get("reason")
    elif _running(job):
        status, ended, reason = "running", None, _hold_unwatched(folder, job)
    else:
        (status, reason), ended = _unrecorded_end(folder, job, progress), None
    return JobView(
        id=job_id, kind=job["kind"], status=status, started_at=job["started_at"], ended_at=ended,
        pid=job.get("pid"), progress=progress, reason=reason, folder=str(folder),
        log_tail=tail(folder / jobfiles.LOG) if status == "failed" else None,
    )


def _running(job: dict) -> bool:
    return alive(job.get("supervisor_pid"), job.get("supervisor_start")) or alive(job.get("pid"), job.get("pid_start"))


def _vanished(progress: dict) -> str:
    last = f"; last progress: step {progress.get('step')}/{progress.get('total_steps')} ({progress.get('phase')})" \
        if progress else ""
    return (f"the job's supervisor is gone without an exit status (killed: SIGKILL, out of memory?) and the job "
            f"ended with it (the kernel kills a job's command when its supervisor dies), so it did not finish: "
            f"treat what it wrote as partial{last}")


def _hold_unwatched(folder: Path, job: dict) -> str | None:
    """A job running without its supervisor (which could not give it a parent-death signal): held to its stop
    time here, SIGTERM at `stop_at` and SIGKILL `grace_s` later, as the supervisor would have. None while
    the supervisor watches it, else what is being done."""
    if alive(job.get("supervisor_pid"), job.get("supervisor_start")) or not job.get("stop_at"):
        return None
    stop_at, grace = parse_ts(job["stop_at"]), float(job.get("grace_s") or DEFAULT_DEADLINE_GRACE_S)
    if now() < stop_at:
        return f"its supervisor is gone; aci stops it at its stop time {job['stop_at']}"
    if not (folder / jobfiles.STOP).exists():
        atomic_write_json(folder / jobfiles.STOP, {"requested_at": iso(), "reason": (
            f"reached its stop time {job['stop_at']} after its supervisor was gone (SIGTERM, SIGKILL after "
            f"{grace:g} s)")})
    signal_group(job["pid"], signal.SIGKILL if (now() - stop_at).total_seconds() >= grace else signal.SIGTERM)
    return f"past its stop time {job['stop_at']} without its supervisor: being stopped"


def _unrecorded_end(folder: Path, job: dict, progress: dict) -> tuple[str, str]:
    """How a job ended whose supervisor vanished without `exit.json`. What is left of it (its command's own
    children, which no parent-death signal reached) is killed first, so nothing of it runs on unwatched."""
    for pid in carrying(f"{JOB_DIR_ENV}={folder}".encode()) if job.get("supervisor_pid") else []:
        try:  # (no supervisor_pid yet: `start` is launching it, under the state lock, and nothing has died)
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    stop = read_json(folder / jobfiles.STOP)
    if stop is not None:
        return "stopped", f"{stop.get('reason') or 'stop requested'}; no exit status (its supervisor was gone)"
    return "failed", _vanished(progress)


class _AlreadyEnded(Exception):
    pass


def reap(state: State) -> list[str]:
    """Record jobs whose processes vanished without an exit status as failed (one event each).

    The supervisor normally writes `exit.json`; when it was killed too, nothing would, and the job
    would only look failed to whoever reads it next. A job whose supervisor wrote `exit.json` but could
    not commit its end event (a full disk) gets that event now. Returns the ids reaped.
    """
    root = state.root / records.JOBS
    reaped = []
    for d in sorted(root.iterdir()) if root.is_dir() else []:
        job = read_json(d / jobfiles.JOB) if (d / jobfiles.JOB).exists() else None
        if job is not None and (d / jobfiles.EXIT).exists() and (d / jobfiles.END_PENDING).exists() and not _running(job):
            try:
                record_end(state, d, job, read_json(d / jobfiles.EXIT), late=True)
            except ACIError:  # still no space: exit.json says how it ended; the event waits for the next look
                continue
            reaped.append(job["id"])
            continue
        if job is None or (d / jobfiles.EXIT).exists() or _running(job):
            continue
        status, reason = _unrecorded_end(d, job, read_json(d / jobfiles.PROGRESS) or {})
        try:
            with state.event(job["kind"], f"job {job['id']} {status}: its supervisor vanished", tool=job["kind"],
                             data={"job": job["id"]}) as w:
                if (d / jobfiles.EXIT).exists():  # the supervisor finished after all: log nothing
                    raise _AlreadyEnded
                w.write_json(f"{records.JOBS}/{job['id']}/{jobfiles.EXIT}", exit_record(None, status, reason))
                for name in (jobfiles.JOB, jobfiles.STOP):  # job.json: with the pid its supervisor recorded
                    if (d / name).exists():
                        w.track(f"{records.JOBS}/{job['id']}/{name}")
        except _AlreadyEnded:
            continue
        (d / jobfiles.END_PENDING).unlink(missing_ok=True)
        (d / jobfiles.EXIT_RESERVE).unlink(missing_ok=True)
        reaped.append(job["id"])
    return reaped


def wait(state: State, job_id: str, poll_s: float = 0.1) -> JobView:
    """Block until the job has ended and its supervisor has recorded it (the end event committed)."""
    while True:
        v = view(state, job_id)
        job = read_json(job_dir(state, job_id) / jobfiles.JOB)
        if v.status != "running" and not alive(job.get("supervisor_pid"), job.get("supervisor_start")):
            return v
        time.sleep(poll_s)


def list_jobs(state: State, kind: str | None = None) -> list[JobView]:
    root = state.root / records.JOBS
    if not root.is_dir():
        return []
    out = []
    for d in sorted(root.iterdir()):
        if (d / jobfiles.JOB).exists():
            v = view(state, d.name)
            if kind is None or v.kind == kind:
                out.append(v)
    return out


def active(state: State) -> list[JobView]:
    return [j for j in list_jobs(state) if j.status == "running"]


# Jobs that hold the GPU: training, evaluation (PostTrainBench's evaluate.py starts vLLM on the same GPU
# with 30-80 % of its memory) and a vLLM server for rollouts. Two at once slow each other or run out of memory.
GPU_KINDS = ("train", "eval", "serve")
_STOP = {"train": "`aci train stop --job {id}`, ", "serve": "`aci run-trajectory stop --job {id}`, "}


def gpu_busy(state: State) -> str | None:
    """Why a new GPU job should wait (the running GPU job and what to do), or None when the GPU is free."""
    holders = [j for j in active(state) if j.kind in GPU_KINDS]
    if not holders:
        return None
    j = holders[0]
    return (f"{j.kind} job {j.id} is still running: {_STOP.get(j.kind, '').format(id=j.id)}wait for it (`aci "
            f"status` shows it), or pass --concurrent to share the GPU anyway (one GPU job at a time: vLLM's memory "
            f"share plus training's can run out of memory)")


def stop(state: State, job_id: str, grace_s: float = STOP_GRACE_S) -> JobView:
    """Ask a job to stop (SIGTERM to its process group, SIGKILL after `grace_s`) and wait for it."""
    v = view(state, job_id)
    if v.status != "running":
        return v
    folder = job_dir(state, job_id)
    with state.event(v.kind, f"stop requested for job {job_id}", tool=v.kind, data={"job": job_id}) as w:
        w.write_json(f"{records.JOBS}/{job_id}/{jobfiles.STOP}", {"requested_at": iso()})
    job = read_json(folder / jobfiles.JOB)
    pid, started = job.get("pid"), job.get("pid_start")
    forwarded = pid is None  # not recorded (a full disk at launch): the supervisor forwards SIGTERM to the job
    if forwarded:
        pid, started = job.get("supervisor_pid"), job.get("supervisor_start")
    deadline = time.monotonic() + grace_s
    signal_group(pid, signal.SIGTERM)
    while time.monotonic() < deadline and alive(pid, started):
        time.sleep(0.2)
    if alive(pid, started) and not forwarded:
        signal_group(pid, signal.SIGKILL)
    end = time.monotonic() + 10
    while time.monotonic() < end and not (folder / jobfiles.EXIT).exists() and \
            alive(job.get("supervisor_pid"), job.get("supervisor_start")):
        time.sleep(0.1)
    return view(state, job_id)


def write_progress(fields: dict[str, Any], folder: str | Path | None = None) -> None:
    """Called from inside a job (e.g. a trainer callback): replace `progress.json` atomically."""
    folder = folder or os.environ.get(JOB_DIR_ENV)
    if not folder:  # not inside a job (a trainer built in-process): nowhere to report
        return
    atomic_write_json(Path(folder) / jobfiles.PROGRESS, {**fields, "updated_at": iso()})


def exit_record(rc: int | None, status: str, reason: str | None, **usage) -> dict:
    ex = records.JobExit(returncode=rc, status=status, ended_at=now(), reason=reason, **usage)
    return ex.model_dump(mode="json")


def record_end(state: State, folder: Path, job: dict, ex: dict, late: bool = False) -> None:
    """The job's end event (exit.json, job.json and any stop request committed), then `END_PENDING` goes."""
    note = " (recorded late: the first commit failed)" if late else ""
    with state.event(job["kind"], f"job {job['id']} {ex['status']}{note}", tool=job["kind"],
                     data={"job": job["id"], "returncode": ex.get("returncode")}) as w:
        for name in (jobfiles.EXIT, jobfiles.JOB, jobfiles.STOP):  # job.json: with the pid recorded at launch
            if (folder / name).exists():
                w.track(f"{records.JOBS}/{job['id']}/{name}")
    (folder / jobfiles.END_PENDING).unlink(missing_ok=True)
