"""The run's clock: the deadline, the final reserve, and how long work will take.

The deadline comes from `timer.sh` in the working directory when it exists (PostTrainBench's harness
prints `Remaining time (hours:minutes):` then `H:MM`, or `Timer expired!`), because the harness started
counting before the agent did. Otherwise it comes from the run card (a fixed deadline, or start time
plus budget). A `timer.sh` that fails or hangs does not stop the tools: the clock falls back to the run
card (which records the timer's deadline at plan init) and says so in a note every result carries; the
failure is remembered for a minute, so a hanging timer costs one short timeout, not one per read. The
final reserve (`rules.Profile.reserve_min`) is time kept for promotion, `finalize` and checks, which no
job may eat into.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from aci.errors import ACIError
from aci.processes import run_briefly
from aci.records import RunCard
from aci.state import now

TIMER = "timer.sh"
LAST_MARGIN = timedelta(minutes=5)  # no job runs into the last minutes: finalize and the harness need them
# ... or into the second half of a reserve shorter than twice that (a 30-minute budget's 4.5), which would
# otherwise give a job started in the reserve a stop time before its start
TIMER_RESOLUTION = timedelta(minutes=1)  # timer.sh prints whole minutes, rounded down
TIMER_SLACK = timedelta(seconds=5)  # running timer.sh and reading this machine's clock
TIMER_TIMEOUT_S = 3.0  # timer.sh reads a file and does arithmetic: milliseconds when it works
TIMER_FAILURE_TTL_S = 60.0  # a failed timer.sh is not run again for this long (per script version)
TIMER_MAX = timedelta(days=365)  # the most timer.sh may say is left: runs last hours; more is a broken timer
# H:MM at a line's end, with its sign, and not the tail of a longer figure (12:34:56, x-0:30, 1.5:30)
_REMAINING = re.compile(r"(?<![\w:.+-])([+-]?)(\d+):(\d{1,2})\s*$")
_CLOCK_TIME = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?$")
_failures: dict[tuple, tuple[float, str]] = {}


def parse_timer_output(text: str) -> timedelta:
    """Remaining time from `timer.sh`'s output; raises on anything it cannot read.

    Only a sane reading counts: a negative time, minutes past 59 or more than `TIMER_MAX` is refused by
    name like unreadable output (the caller then keeps the recorded deadline), because read as given it
    would either gain time (the digits of `-0:30` are 0h30m) or overflow the date (`99999999999:00`)."""
    if "Timer expired" in text:
        return timedelta(0)
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        m = _REMAINING.search(ln)
        if not m:
            continue
        sign, hours, minutes = m.group(1), m.group(2).lstrip("0") or "0", int(m.group(3))
        if sign == "-":
            raise ACIError(f"timer.sh says {m.group(0).strip()!r} is left: a negative time is no reading (an "
                           f"expired timer prints 'Timer expired!')")
        if minutes > 59:
            raise ACIError(f"timer.sh says {m.group(0).strip()!r} is left: minutes past 59 are no H:MM reading")
        max_hours = int(TIMER_MAX.total_seconds() // 3600)
        if len(hours) > len(str(max_hours)) or int(hours) * 60 + minutes > max_hours * 60:
            raise ACIError(f"timer.sh says {m.group(0).strip()[:40]!r} is left, more than the {TIMER_MAX.days} days "
                           f"(clock.TIMER_MAX) any run lasts: a broken timer, not a deadline")
        return timedelta(hours=int(hours), minutes=minutes)
    raise ACIError(f"cannot read the remaining time from timer.sh output: {text.strip()[:200]!r}")


def read_timer(workdir: Path, timeout_s: float = TIMER_TIMEOUT_S) -> timedelta | None:
    """Remaining time per `workdir/timer.sh`, or None when there is no timer; ACIError when it fails, hangs
    or prints nothing readable (remembered for `TIMER_FAILURE_TTL_S` while the script is unchanged)."""
    script = workdir / TIMER
    try:
        st = script.stat()
    except OSError:
        return None
    if not script.is_file():
        return None
    key = (str(script), st.st_mtime_ns, st.st_size)
    failed = _failures.get(key)
    if failed and time.monotonic() - failed[0] < TIMER_FAILURE_TTL_S:
        raise ACIError(failed[1])
    rc, out = run_briefly(["bash", str(script)], workdir, timeout_s, max_chars=4096)
    try:
        if rc is None and not out.strip():
            raise ACIError(f"{script} did not answer within {timeout_s:g} s")
        return parse_timer_output(out)
    except ACIError as e:
        _failures[key] = (time.monotonic(), str(e))
        raise


@dataclass(frozen=True)
class Clock:
    deadline: datetime | None
    reserve: timedelta
    source: str  # "timer.sh", "run card deadline", "run card budget" or "none"
    to_record: bool = False  # timer.sh disagrees with the run card's deadline: record this one (Context does)
    note: str | None = None  # timer.sh failed and the run card's deadline stands in: said with every result

    def left(self, at: datetime | None = None) -> timedelta | None:
        if self.deadline is None:
            return None
        return max(self.deadline - (at or now()), timedelta(0))

    def left_for_work(self, at: datetime | None = None) -> timedelta | None:
        """Time until the final reserve starts: what jobs may use."""
        left = self.left(at)
        return None if left is None else max(left - self.reserve, timedelta(0))

    def job_stop(self, at: datetime | None = None) -> datetime | None:
        """When a job started at `at` (now) must end: where the final reserve starts. A job started inside
        the reserve (an evaluation before the last promotion) ends `LAST_MARGIN` before the deadline, or
        halfway through a short reserve."""
        if self.deadline is None:
            return None
        start = self.deadline - self.reserve
        return start if (at or now()) < start else self.deadline - min(LAST_MARGIN, self.reserve / 2)

    def in_reserve(self) -> bool:
        left = self.left()
        return left is not None and left <= self.reserve

    def fits(self, duration: timedelta) -> bool:
        work = self.left_for_work()
        return work is None or duration <= work


def parse_deadline(text: str, at: datetime | None = None) -> tuple[datetime, str | None]:
    """A `--deadline` as an aware time, and a note when it had no time zone or no date.

    An ISO date-time, or a clock time (`18:00`, `18:00:30`: its next occurrence, today or tomorrow). A
    time without an offset is read as this machine's local time (what a person typing "18:00" means),
    never as UTC; the note says what was read so a wrong guess is visible at once.
    """
    text = text.strip()
    clock = _CLOCK_TIME.match(text)
    if clock:
        h, m, sec = int(clock.group(1)), int(clock.group(2)), int(clock.group(3) or 0)
        if h > 23 or m > 59 or sec > 59:
            raise ACIError(f"deadline {text!r} is not a clock time (HH:MM or HH:MM:SS, 00:00 to 23:59:59)")
        base = (at or now()).astimezone()
        t = base.replace(hour=h, minute=m, second=sec, microsecond=0)
        if t <= base:
            t += timedelta(days=1)
        return t, (f"deadline {text!r} read as this machine's local time {t.isoformat(timespec='seconds')}, "
                   f"{fmt(t - base)} from now; give a date and an offset (2026-05-01T18:00+02:00) to say otherwise")
    try:
        t = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except ValueError:
        raise ACIError(f"deadline {text!r} is not an ISO date-time (e.g. 2026-05-01T18:00:00+02:00) or a clock "
                       f"time (18:00); for a length of time use --budget-minutes or --budget-hours") from None
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
    try:
        remaining = read_timer(workdir)
    except ACIError as e:
        return _from_card(card, reserve, f"{e}; the deadline is the run card's ({_card_says(card)}) until "
                                         f"timer.sh answers again")
    if remaining is not None:
        deadline, moved = from_timer(remaining, card.deadline if card else None)
        return Clock(deadline, reserve, TIMER, to_record=moved and card is not None)
    return _from_card(card, reserve)


def _card_says(card: RunCard | None) -> str:
    if card is None:
        return "none: no run card"
    return f"recorded deadline {card.deadline.isoformat(timespec='seconds')}" if card.deadline else \
        f"start {card.started_at.isoformat(timespec='seconds')} plus {card.budget_hours:g} h"


def card_deadline(card: RunCard) -> datetime:
    """When the run card says the run ends: its fixed deadline, else its start plus its budget."""
    return card.deadline or card.started_at + timedelta(hours=card.budget_hours)


def _from_card(card: RunCard | None, reserve: timedelta, note: str | None = None) -> Clock:
    if card:
        return Clock(card_deadline(card), reserve, "run card deadline" if card.deadline else "run card budget",
                     note=note)
    return Clock(None, reserve, "none", note=note)


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
