"""The run's clock: the deadline, the final reserve, and how long work will take.

The deadline comes from `timer.sh` in the working directory when it exists (PostTrainBench's harness
prints `Remaining time (hours:minutes):` then `H:MM`, or `Timer expired!`), because the harness started
counting before the agent did. Otherwise it comes from the run card (a fixed deadline, or start time
plus budget). The final reserve (`rules.Profile.reserve_min`) is time kept for promotion, `finalize`
and checks, which no job may eat into.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from aci.errors import ACIError
from aci.records import RunCard
from aci.state import now

TIMER = "timer.sh"
TIMER_RESOLUTION = timedelta(minutes=1)  # timer.sh prints whole minutes, rounded down
TIMER_SLACK = timedelta(seconds=5)  # running timer.sh and reading this machine's clock
_REMAINING = re.compile(r"(\d+):(\d{1,2})\s*$")


def parse_timer_output(text: str) -> timedelta:
    """Remaining time from `timer.sh`'s output; raises on anything it cannot read."""
    if "Timer expired" in text:
        return timedelta(0)
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        m = _REMAINING.search(ln)
        if m:
            return timedelta(hours=int(m.group(1)), minutes=int(m.group(2)))
    raise ACIError(f"cannot read the remaining time from timer.sh output: {text.strip()[:200]!r}")


def read_timer(workdir: Path, timeout_s: float = 10.0) -> timedelta | None:
    """Remaining time per `workdir/timer.sh`, or None when there is no timer."""
    script = workdir / TIMER
    if not script.is_file():
        return None
    try:
        out = subprocess.run(
            ["bash", str(script)], cwd=workdir, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        raise ACIError(f"{script} did not answer within {timeout_s:.0f} s") from None
    return parse_timer_output(out.stdout + out.stderr)


@dataclass(frozen=True)
class Clock:
    deadline: datetime | None
    reserve: timedelta
    source: str  # "timer.sh", "run card deadline", "run card budget" or "none"
    to_record: bool = False  # timer.sh disagrees with the run card's deadline: record this one (Context does)

    def left(self, at: datetime | None = None) -> timedelta | None:
        if self.deadline is None:
            return None
        return max(self.deadline - (at or now()), timedelta(0))

    def left_for_work(self, at: datetime | None = None) -> timedelta | None:
        """Time until the final reserve starts: what jobs may use."""
        left = self.left(at)
        return None if left is None else max(left - self.reserve, timedelta(0))

    def in_reserve(self) -> bool:
        left = self.left()
        return left is not None and left <= self.reserve

    def fits(self, duration: timedelta) -> bool:
        work = self.left_for_work()
        return work is None or duration <= work


def parse_deadline(text: str) -> tuple[datetime, str | None]:
    """A `--deadline` as an aware time, and a note when it had no time zone.

    A naive time is read as this machine's local time (what a person typing "18:00" means), never as
    UTC; the note says which offset was applied so a wrong guess is visible at once.
    """
    try:
        t = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except ValueError:
        raise ACIError(f"deadline {text!r} is not an ISO date-time (e.g. 2026-05-01T18:00:00+02:00)") from None
    if t.tzinfo is not None:
        return t, None
    local = t.astimezone()
    return local, (f"deadline {text!r} has no time zone: read as this machine's local time, "
                   f"{local.isoformat(timespec='seconds')}; add an offset (+02:00) or Z to say otherwise")


def from_timer(remaining: timedelta, recorded: datetime | None) -> tuple[datetime, bool]:
    """(deadline, whether it moved): the recorded deadline while timer.sh agrees with it, else the timer's.

    timer.sh prints whole minutes rounded down, so successive readings put the deadline anywhere in a
    minute (11:04:15, 11:04:31, 11:04:00 for a real 11:04:59): the deadline is recorded once (at plan
    init) and moves only when a reading disagrees by more than that resolution, to the reading rounded
    down, the safe side."""
    low = now() + remaining  # the deadline lies in [low, low + resolution)
    if recorded is not None and low - TIMER_SLACK <= recorded <= low + TIMER_RESOLUTION + TIMER_SLACK:
        return recorded, False
    return low, True


def clock_for(workdir: Path, card: RunCard | None, reserve_min: float) -> Clock:
    reserve = timedelta(minutes=reserve_min)
    remaining = read_timer(workdir)
    if remaining is not None:
        deadline, moved = from_timer(remaining, card.deadline if card else None)
        return Clock(deadline, reserve, TIMER, to_record=moved and card is not None)
    if card:
        if card.deadline:
            return Clock(card.deadline, reserve, "run card deadline")
        return Clock(card.started_at + timedelta(hours=card.budget_hours), reserve, "run card budget")
    return Clock(None, reserve, "none")


def estimate(work_units: float, units_per_s: float | None, overhead_s: float = 60.0) -> timedelta | None:
    """Duration of `work_units` (tokens, samples, steps) at a measured or declared rate, plus start-up."""
    if not units_per_s or units_per_s <= 0:
        return None
    return timedelta(seconds=overhead_s + work_units / units_per_s)


def fmt(td: timedelta | None) -> str:
    if td is None:
        return "unknown"
    minutes = int(td.total_seconds() // 60)
    return f"{minutes // 60}h{minutes % 60:02d}m"
