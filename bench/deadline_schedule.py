"""A training job whose stop time is about 90 s away, slowed part-way by a CPU-bound competitor: does its
schedule still end, with a checkpoint, before the stop time and near the learning rate's floor?

On the demo model (`aci.embedded`, "demo"), as the train skill has it: `aci train dry-run --measure-steps
20` measures the throughput; the run's deadline is set so that a job's stop time (the deadline minus the
final reserve, for a run this short a share of its budget) is `--stop-in` seconds away; a dry-run with
far more steps says how many fit at the measured rate, and `aci train start` (a fresh CLI process)
launches that many with the default schedule (`wsd`; `--schedule cosine` runs the same with
transformers' cosine, to compare). `--slow-after` seconds (20) after the job's first step, a competitor
starts: one busy-looping process per CPU core, until the job ends, so the job runs slower than its
estimate. Then the bench reads what the job registered in state
and prints its schedule changes, how it ended, and last:

    saved_before_stop=yes|no   (the last registered checkpoint's time against the stop time)
    lr_at_stop_ratio=X         (the learning rate of the last step before that checkpoint over the peak; goal <= 0.1)

    .venv/bin/python bench/deadline_schedule.py [--stop-in 90] [--slow-after 30] [--schedule wsd|cosine]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from train_overhead import ACI, CHOSEN, demo_run  # noqa: E402 (the overhead bench's data, settings and run)

from aci import jobfiles  # noqa: E402
from aci.context import Context  # noqa: E402
from aci.processes import alive  # noqa: E402
from aci.state import now, parse_ts, read_jsonl  # noqa: E402

BUSY = "while True: pass"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stop-in", type=float, default=90.0, help="seconds from the start call to the job's stop time")
    ap.add_argument("--slow-after", type=float, default=20.0, help="seconds after step 1 the competitor starts")
    ap.add_argument("--schedule", choices=["wsd", "cosine"], default="wsd")
    a = ap.parse_args()
    with demo_run() as work:
        args = [f"--{k.replace('_', '-')}={v}" for k, v in CHOSEN.items() if k != "lr_schedule"]
        aci(work, "train", "dry-run", "--data", "data.jsonl", *args, "--measure-steps=20")
        stop_in(work, a.stop_in)
        est = aci(work, "train", "dry-run", "--data", "data.jsonl", *args, "--max-steps=100000")["checks"]["estimate"]
        fit = int(0.95 * est["steps_that_fit"])  # the seconds until the start leave a little less
        print(f"the start gate estimates {est['steps_that_fit']} steps fit at {est['tokens_per_s']:.0f} tokens/s "
              f"({est['rate_source']}); starting {fit}")
        job = aci(work, "train", "start", "--data", "data.jsonl", *args, f"--max-steps={fit}",
                  f"--lr-schedule={a.schedule}")["job"]["id"]
        folder = work / "state" / "jobs" / job
        stop_at = parse_ts(json.loads((folder / jobfiles.CONFIG).read_text())["stop_at"])
        competitors = run_with_competitor(folder, a.slow_after)
        report(work, folder, job, stop_at, competitors)


def stop_in(work: Path, seconds: float) -> None:
    """Set the run's deadline so that a job started now stops `seconds` from now. The final reserve depends
    on the budget the deadline leaves (a short run keeps a share of it), so the deadline is corrected by
    what the run's own clock then says, until the two agree within a second."""
    target = now() + timedelta(seconds=seconds)
    deadline = target
    for _ in range(10):
        aci(work, "plan", "update", "--deadline", deadline.isoformat(timespec="seconds"))
        stop = Context(state=work / "state", workdir=work).clock.job_stop()
        if abs((stop - target).total_seconds()) < 1:
            return
        deadline += target - stop
    raise SystemExit(f"could not set a stop time {seconds:.0f} s away: the clock says {stop.isoformat()}")


def aci(work: Path, *argv: str) -> dict:
    out = subprocess.run([*ACI, "--json", *argv], cwd=work, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"aci {' '.join(argv)} failed: {out.stderr}")
    return json.loads(out.stdout)


def _progress(folder: Path) -> dict:
    try:
        return json.loads((folder / jobfiles.PROGRESS).read_text())
    except (OSError, ValueError):
        return {}


def run_with_competitor(folder: Path, slow_after: float) -> int:
    """Wait for the job's first step, start the competitor `slow_after` s later, stop it when the job ends."""
    procs: list[subprocess.Popen] = []
    first = None
    try:
        while not (folder / jobfiles.EXIT).exists():
            if first is None and _progress(folder).get("step", 0) >= 1:
                first = time.monotonic()
                print(f"step 1 after {_progress(folder).get('startup', {}).get('to_first_step_s')} s", flush=True)
            if first is not None and not procs and time.monotonic() - first >= slow_after:
                procs = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(os.cpu_count() or 1)]
                print(f"competitor: {len(procs)} busy processes from step {_progress(folder).get('step')}", flush=True)
            time.sleep(0.2)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    supervisor = json.loads((folder / jobfiles.JOB).read_text())["supervisor_pid"]
    while alive(supervisor):  # it commits the job's end after exit.json: the folder is removed after this
        time.sleep(0.05)
    return len(procs)


def report(work: Path, folder: Path, job: str, stop_at, competitors: int) -> None:
    progress = _progress(folder)
    ended = json.loads((folder / jobfiles.EXIT).read_text())
    cfg = json.loads((folder / jobfiles.CONFIG).read_text())
    changes = [line for line in (folder / jobfiles.LOG).read_text().splitlines() if line.startswith("[aci] schedule:")]
    print(f"{len(changes)} schedule change(s)" + (", the first and last 3:" if len(changes) > 6 else ":" if changes else ""))
    for line in changes if len(changes) <= 6 else changes[:3] + ["..."] + changes[-3:]:
        print(line)
    fc = progress.get("schedule") or {}
    print(f"job {job} {ended['status']} at step {progress.get('step')} of {progress.get('total_steps')} planned "
          f"({cfg['lr_schedule']}): {progress.get('stop_reason') or ended.get('reason') or 'its planned steps'}")
    print(f"step time at the end: {fc.get('step_s')} s ({fc.get('step_s_source')}); competitor processes: {competitors}")
    ckpts = [e for e in read_jsonl(work / "state" / "checkpoints.jsonl") if e.get("type") == "registered"]
    if not ckpts:
        print("saved_before_stop=no (no checkpoint registered)")
        print("lr_at_stop_ratio=nan")
        return
    last = ckpts[-1]
    saved = parse_ts(last["ts"])
    print(f"last checkpoint {last['checkpoint']} saved {saved.isoformat()} ({(stop_at - saved).total_seconds():.0f} s "
          f"before the stop time {stop_at.isoformat()}); its last step's learning rate {last.get('learning_rate')}, "
          f"peak {cfg['learning_rate']}")
    print(f"saved_before_stop={'yes' if saved <= stop_at else 'no'}")
    print(f"lr_at_stop_ratio={(last.get('learning_rate') or 0.0) / cfg['learning_rate']:.3f}")


if __name__ == "__main__":
    main()
