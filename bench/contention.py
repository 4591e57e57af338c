"""Training on a shared CPU: does `aci train`'s own thread choice run as fast as the best fixed one?

The demo model's SFT (`aci train start`, the overhead bench's data and settings) runs while a competitor
keeps two processes busy (a pure-Python loop each) for the whole measurement. Three sides, alternated
round by round: `aci train` choosing its threads itself (`aci.cpus`: the cores other processes leave
free, re-checked while it runs), and the same job at each fixed thread count from 1 to the core count
(`OMP_NUM_THREADS`, which the job keeps as the caller's choice). Each run's figure is its training time
from the first step to the last (the job's own `elapsed_s`), so loading and tokenizing do not dilute it.
The best fixed count is the one with the lowest median; the ratio compares medians of `--runs` rounds:

    contention_ratio=X   (median of the own choice / median of the best fixed count; goal <= 1.15)

    .venv/bin/python bench/contention.py [--runs 5] [--steps 150]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from deadline_schedule import BUSY  # noqa: E402 (the competitor's busy loop)
from train_overhead import CHOSEN, demo_run  # noqa: E402 (the overhead bench's data, settings and run)

from aci import cpus, jobfiles  # noqa: E402
from aci.processes import alive  # noqa: E402

COMPETITORS = 2
ACI_CMD = [sys.executable, "-m", "aci.cli"]


def train(work: Path, steps: int, threads: int | None) -> tuple[float, str]:
    """One job to its end; (its training seconds, the threads it computed with, in words)."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    args = [f"--{k.replace('_', '-')}={v}" for k, v in CHOSEN.items()]
    out = subprocess.run([*ACI_CMD, "--json", "train", "start", "--data", "data.jsonl", *args, f"--max-steps={steps}",
                          f"--save-steps={steps}"], cwd=work, capture_output=True, text=True, env=env)
    if out.returncode:
        raise SystemExit(f"aci train start failed: {out.stderr}")
    folder = work / "state" / "jobs" / json.loads(out.stdout)["job"]["id"]
    while not (folder / jobfiles.EXIT).exists():
        time.sleep(0.2)
    supervisor = json.loads((folder / jobfiles.JOB).read_text())["supervisor_pid"]
    while alive(supervisor):
        time.sleep(0.05)
    progress = json.loads((folder / jobfiles.PROGRESS).read_text())
    if progress.get("step") != steps:
        raise SystemExit(f"the job stopped at step {progress.get('step')} of {steps}: {folder}")
    return progress["elapsed_s"], (progress.get("cpu_threads") or {}).get("why") or "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="rounds; each runs every side once")
    ap.add_argument("--steps", type=int, default=150)
    a = ap.parse_args()
    sides: list[int | None] = [None, *range(1, cpus.cores() + 1)]
    times: dict[int | None, list[float]] = {s: [] for s in sides}
    with demo_run() as work:
        train(work, 2, None)  # tokenized once, cached for every run
        procs = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(COMPETITORS)]
        try:
            for k in range(a.runs):
                for side in sides:
                    took, why = train(work, a.steps, side)
                    times[side].append(took)
                    name = "own choice" if side is None else f"{side} thread(s)"
                    print(f"round {k + 1}: {name}: {took:.1f} s ({why})", flush=True)
        finally:
            for p in procs:
                p.kill()
                p.wait()
    med = {s: statistics.median(v) for s, v in times.items()}
    best = min((s for s in sides if s is not None), key=lambda s: med[s])
    for s in sides:
        print(f"{'own choice' if s is None else f'{s} thread(s)'}: median {med[s]:.1f} s "
              f"(range {min(times[s]):.1f}-{max(times[s]):.1f}) over {a.runs} runs")
    print(f"best fixed: {best} thread(s); competitor: {COMPETITORS} busy processes on {cpus.cores()} cores")
    print(f"contention_ratio={med[None] / med[best]:.3f}")


if __name__ == "__main__":
    main()
