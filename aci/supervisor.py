"""A job's supervisor process: `python -m aci.supervisor <job dir>`, started by `aci.jobs.start` in a new session.

It starts the job's command first, with the standard library alone, and imports the rest of aci (pydantic,
the records: a third of a second or more) only then, so the job does not wait for those imports; a SIGTERM
meanwhile goes on to the job. Then it records the job's pid, holds the job to its stop time (SIGTERM to
the job's process group at `stop_at`, SIGKILL `grace_s` later), waits for it, and records how it ended:
`exit.json` first, in space reserved at launch (so a full disk cannot leave it unwritten), then the end
event in state (which `aci.jobs.reap` retries when that commit fails). Should the supervisor itself fail
before the job ends, it kills the job, and should it die without a chance to (SIGKILL), the kernel kills
the job's command with it (a parent-death signal): no job runs unwatched, past its stop time.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import threading
from pathlib import Path

from aci import jobfiles
from aci.processes import dies_with_parent, signal_group, start_time


def main() -> int:
    folder = Path(sys.argv[1])
    command = json.loads((folder / jobfiles.JOB).read_text())["command"]
    child = subprocess.Popen(command, stdin=subprocess.DEVNULL, start_new_session=True,
                             preexec_fn=dies_with_parent())
    signal.signal(signal.SIGTERM, lambda *_: signal_group(child.pid, signal.SIGTERM))
    try:
        return supervise(folder, child)
    finally:
        if child.returncode is None:  # the supervisor failed before the job ended: no job runs unwatched
            signal_group(child.pid, signal.SIGKILL)


def supervise(folder: Path, child: subprocess.Popen) -> int:
    """Record the job's pid, hold it to its stop time, wait, then record how it ended."""
    from aci import disk, jobs
    from aci.state import State, atomic_write_json, read_json

    job = read_json(folder / jobfiles.JOB)
    state = State(folder.parent.parent)
    try:
        with state.locked():
            atomic_write_json(folder / jobfiles.JOB, {**read_json(folder / jobfiles.JOB), "pid": child.pid,
                                                    "pid_start": start_time(child.pid)})
    except OSError as e:  # a full disk: `jobs.stop` then signals this supervisor, which forwards to the job
        _say(f"[aci] could not record the job's pid ({e.strerror})")
    ended = threading.Event()
    if job.get("stop_at"):
        grace = float(job.get("grace_s") or jobs.DEFAULT_DEADLINE_GRACE_S)
        threading.Thread(target=_enforce_stop_time, args=(folder, child.pid, job["stop_at"], grace, ended),
                         daemon=True).start()
    _, raw, usage = os.wait4(child.pid, 0)  # like child.wait(), plus the resources the job used
    ended.set()
    rc = child.returncode = os.waitstatus_to_exitcode(raw)
    own = resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage.ru_utime + usage.ru_stime + own.ru_utime + own.ru_stime
    stop = read_json(folder / jobfiles.STOP)
    if stop is not None:
        status, reason = "stopped", stop.get("reason") or "stop requested"
    elif rc == 0:
        status, reason = "succeeded", None
    elif rc < 0:
        status, reason = "failed", f"killed by signal {signal.Signals(-rc).name}"
    else:
        status, reason = "failed", f"exited with code {rc}"
    if rc == -signal.SIGKILL and status == "failed":
        reason += f" (the out-of-memory killer sends it too; peak memory {usage.ru_maxrss / 1024:.0f} MB)"
    if status == "failed":
        last = [ln for ln in jobs.tail(folder / jobfiles.LOG, 5).splitlines() if ln.strip()]
        reason += f": {last[-1][:300]}" if last else ""
        full = disk.full_note(*[Path(p) for p in (job.get("cwd"), (job.get("config") or {}).get("output_dir"),
                                                  folder) if p])
        reason += f" ({full})" if full else ""
    ex = jobs.exit_record(rc, status, reason, cpu_s=round(cpu, 2), max_rss_mb=round(usage.ru_maxrss / 1024, 1))
    _write_exit_record(folder, ex)  # first: if the commit below fails, the job still reads as what it was
    try:
        jobs.record_end(state, folder, job, ex)
    except Exception as e:  # noqa: BLE001 - the end event is retried by reap(); the job's status is in exit.json
        _say(f"[aci] the end of job {job['id']} is in exit.json but not yet in state ({e}); the next "
             f"`aci train status` or `aci status` records it")
    return 0


def _enforce_stop_time(folder: Path, pid: int, stop_at: str, grace_s: float, ended: threading.Event) -> None:
    """At `stop_at`, record why and SIGTERM the job's group; SIGKILL it `grace_s` later if still running."""
    from aci.state import atomic_write_json, iso, now, parse_ts

    if ended.wait(max(0.0, (parse_ts(stop_at) - now()).total_seconds())):
        return
    atomic_write_json(folder / jobfiles.STOP, {"requested_at": iso(), "reason": f"reached its stop time {stop_at} (the "
                                        f"final reserve starts; SIGTERM, SIGKILL after {grace_s:g} s)"})
    signal_group(pid, signal.SIGTERM)
    if not ended.wait(grace_s):
        signal_group(pid, signal.SIGKILL)


def _write_exit_record(folder: Path, ex: dict) -> None:
    """Write exit.json into the space reserved at launch (then rename it), so it needs no new disk blocks."""
    from aci.state import atomic_write_json, fsync_dir

    data = (json.dumps(ex, indent=2) + "\n").encode()
    reserve = folder / jobfiles.EXIT_RESERVE
    if not reserve.exists() or len(data) > reserve.stat().st_size:
        atomic_write_json(folder / jobfiles.EXIT, ex)
        reserve.unlink(missing_ok=True)
        return
    with open(reserve, "r+b") as f:
        f.write(data)
        f.truncate(len(data))
        f.flush()
        os.fsync(f.fileno())
    os.replace(reserve, folder / jobfiles.EXIT)
    fsync_dir(folder)


def _say(message: str) -> None:
    """A line in the job's log, which may be on a full disk: the supervisor must not die of writing it."""
    try:
        print(message, flush=True)
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
