"""How many CPU threads a job should compute with, from the cores other processes leave free.

On a shared machine the default (one thread per core) makes a job's threads wait on each other while
another process holds a core: every parallel region runs at the pace of its slowest thread. A job that
uses only the free cores runs several times faster there. "Free" is measured, not guessed: the busy
time of all cores between two moments (`/proc/stat`) less this process's own (`os.times`), so a job
that re-checks while it computes does not count itself as load; reading counters costs no pause. An
explicit `OMP_NUM_THREADS` is the user's choice and is kept, except where a launcher set it for want of
one (torchrun sets 1 for each rank; `aci.training.launch` marks that with `LAUNCHER_SET_ENV`). Standard library only; Linux (`/proc/stat`); elsewhere the core count stands.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

RECHECK_S = 30.0  # a running job measures again this often
LAUNCHER_SET_ENV = "ACI_OMP_NUM_THREADS_UNSET"  # present: the caller set no OMP_NUM_THREADS, a launcher did


@dataclass(frozen=True)
class Choice:
    threads: int
    why: str


@dataclass(frozen=True)
class Sample:
    """CPU seconds since boot, busy and in all, of every core, and this process's own, at `t`."""

    busy_s: float
    total_s: float
    own_s: float
    t: float


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def sample() -> Sample | None:
    """Now's counters, from /proc/stat and `os.times`; None where /proc/stat cannot be read."""
    try:
        with open("/proc/stat") as f:
            fields = [float(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    if len(fields) < 4:
        return None
    hz = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already counted in user
    own = os.times()
    return Sample((total - idle) / hz, total / hz, own.user + own.system, time.monotonic())


def others_busy(a: Sample, b: Sample) -> float | None:
    """Cores other processes kept busy between two samples (None when no time passed between them)."""
    if b.total_s <= a.total_s or b.t <= a.t:
        return None
    busy_share = (b.busy_s - a.busy_s) / (b.total_s - a.total_s)  # of all cores
    own_cores = (b.own_s - a.own_s) / (b.t - a.t)
    return max(0.0, busy_share * cores() - own_cores)


def choose(a: Sample | None, b: Sample | None) -> Choice:
    """The threads to compute with, from the load between samples `a` and `b`, and why, in words."""
    n = cores()
    given = "" if os.environ.get(LAUNCHER_SET_ENV) else os.environ.get("OMP_NUM_THREADS", "").strip()
    if given.isdigit() and int(given) > 0:
        return Choice(int(given), f"OMP_NUM_THREADS={given} (set by the caller)")
    busy = others_busy(a, b) if a and b else None
    if busy is None:
        return Choice(n, f"all {n} cores (CPU load cannot be read here)")
    threads = max(1, min(n, int(n - busy + 0.5)))
    return Choice(threads, f"{threads} of {n} cores: other processes kept {busy:.1f} busy over the last "
                           f"{b.t - a.t:.0f} s")


def measure(window_s: float = 0.3) -> Choice:
    """The threads for a process about to start (an eval command beside training): the load over a short
    pause now, for want of an earlier sample."""
    a = sample()
    time.sleep(window_s)
    return choose(a, sample())


class Governor:
    """Sets torch's intra-op threads from the load measured since the last check: created while the job
    prepares (so its first window is the model's loading, at no cost), applied at the first step and every
    `RECHECK_S` seconds after. Measuring is reading two counters: no pause."""

    def __init__(self, recheck_s: float = RECHECK_S):
        self.recheck_s = recheck_s
        self.last = sample()
        self.choice: Choice | None = None
        self.changes: list[dict] = []

    def apply(self, force: bool = False) -> Choice | None:
        """Measure and apply when due; returns the choice when it changed."""
        now = sample()
        if not force and (now is None or self.last is None or now.t - self.last.t < self.recheck_s):
            return None
        new = choose(self.last, now)
        self.last = now
        if self.choice is not None and new.threads == self.choice.threads:
            self.choice = new
            return None
        import torch

        torch.set_num_threads(new.threads)
        self.choice = new
        self.changes = [*self.changes[-4:], {"threads": new.threads, "why": new.why}]
        return new

    def report(self) -> dict:
        return {"threads": self.choice.threads if self.choice else None,
                "why": self.choice.why if self.choice else None, "changes": self.changes}
