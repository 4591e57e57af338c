"""How fast a training job runs now, and what that means for its end: the step time measured as it runs,
the time a checkpoint takes to save, and the forecast `train status` shows.

Step times are measured between consecutive optimizer steps, less the time spent saving in between.
The step time planned with is the larger of their medians over the last `WINDOW` and the last `RECENT`
steps: it follows a machine that slows down within two steps, is not thrown by one slow step, and
trusts a speed-up only once it has lasted; plans count `HEADROOM` times it. Until `MIN_STEPS` are
measured, the start gate's estimate (`TrainConfig.estimate`) stands in, named as such (without one,
the mean of the steps so far). The save time is measured at every save (writing the checkpoint and
registering it); before the first it is estimated from the bytes the checkpoint will hold at an
assumed `ASSUMED_WRITE_BPS`, and the forecast says which. The job keeps `SAVE_SAFETY` times that free
before its stop time for its last save, and with several ranks `RANKS_EXIT_S` more for them to end:
each then exits through the interpreter's full teardown (its process group's too) and the launcher
waits for all, 2 s after the last save on this 2-core machine against under 1 s for one process, so a
job planned to the second was still ending at its stop time and was stopped there.

Pure arithmetic on times (no heavy import): shared by the job's callback and the tests.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from datetime import datetime, timedelta

WINDOW = 10
RECENT = 3
MIN_STEPS = 3
HEADROOM = 1.1
ASSUMED_WRITE_BPS = 200e6  # a modest disk's sustained write: only until the first save is measured
SAVE_FIXED_S = 2.0  # registering a checkpoint (its content hash, one git commit), assumed likewise
SAVE_SAFETY = 1.5
RANKS_EXIT_S = 5.0


class Pace:
    def __init__(self, estimate: dict | None = None, exit_s: float = 0.0):
        self.estimate = estimate or {}
        self.exit_s = exit_s  # kept free after the last save for the job's processes to end
        self.durations: deque[float] = deque(maxlen=WINDOW)
        self.last_end: float | None = None
        self.mark: float | None = None  # when the last step, save or evaluation ended
        self.aside = 0.0  # seconds spent saving or evaluating since the last step ended
        self.save_s: float | None = None  # the last save, measured
        self.save_bytes = 0
        self.eval_per_step = 0.0  # the dev evaluation's time, spread over the steps between two of them

    def started(self, t: float) -> None:
        self.last_end, self.mark, self.aside = t, t, 0.0

    def step_ended(self, t: float) -> None:
        if self.last_end is not None:
            self.durations.append(max(1e-6, t - self.last_end - self.aside))
        self.last_end, self.mark, self.aside = t, t, 0.0

    def _since_mark(self, t: float) -> float | None:
        if self.mark is None:
            return None
        took, self.mark = t - self.mark, t
        self.aside += took
        return took

    def saved(self, t: float) -> None:
        """A save finished at `t` (it began when the last step, or an evaluation after it, ended)."""
        took = self._since_mark(t)
        if took is not None:
            self.save_s = took

    def evaluated(self, t: float, every: int) -> None:
        """A dev evaluation finished at `t`; it recurs every `every` steps, so each step costs a share of it."""
        took = self._since_mark(t)
        if took is not None:
            self.eval_per_step = took / every

    def measured(self) -> float | None:
        """The step time measured now (None before `MIN_STEPS` steps)."""
        if len(self.durations) < MIN_STEPS:
            return None
        return max(statistics.median(self.durations), statistics.median(list(self.durations)[-RECENT:]))

    def step_s(self) -> tuple[float | None, str]:
        if self.measured() is not None:
            return self.measured(), \
                f"measured: the larger median of the last {len(self.durations)} and the last {RECENT} steps"
        if self.estimate.get("step_s"):
            return self.estimate["step_s"], f"the start's estimate ({self.estimate.get('source')})"
        if self.durations:
            return statistics.mean(self.durations), f"measured: mean of the first {len(self.durations)} steps"
        return None, "not measured yet"

    def save_time(self) -> tuple[float, str]:
        if self.save_s is not None:
            return self.save_s, "measured"
        return SAVE_FIXED_S + self.save_bytes / ASSUMED_WRITE_BPS, \
            f"estimated from {self.save_bytes / 1e6:,.1f} MB at an assumed {ASSUMED_WRITE_BPS / 1e6:.0f} MB/s"

    def more_steps(self, seconds_left: float) -> int | None:
        """How many more steps end, with the last save (and the exit), within `seconds_left` (None: no rate known
        yet)."""
        step_s, _ = self.step_s()
        if step_s is None:
            return None
        return max(0, math.floor((seconds_left - SAVE_SAFETY * self.save_time()[0] - self.exit_s) /
                                 (HEADROOM * (step_s + self.eval_per_step))))


def forecast(pace: Pace, *, step: int, end: int, total: int, kind: str, stop_at: datetime | None,
             at: datetime) -> dict:
    """Where the job will end at the rate measured now, and whether the stop time cuts its schedule, with a
    note that says so in words (`end`: the planned last step; `total`: the steps the trainer planned)."""
    step_s, source = pace.step_s()
    save_s, save_source = pace.save_time()
    out = {"kind": kind, "step_s": None if step_s is None else round(step_s, 4), "step_s_source": source,
           "save_s": round(save_s, 2), "save_s_source": save_source, "end_step": end, "planned_steps": total,
           "stop_at": stop_at.isoformat(timespec="seconds") if stop_at else None}
    if pace.estimate.get("step_s"):
        out["start_estimate"] = {"step_s": round(pace.estimate["step_s"], 4), "source": pace.estimate.get("source")}
    if step_s is None:
        out["note"] = "no step measured yet"
        return out
    if stop_at is not None and kind != "wsd":  # a fixed schedule: where the stop time cuts it, if it does
        reach = step + (pace.more_steps((stop_at - at).total_seconds()) or 0)
        if reach < end:
            out.update(cut=True, stop_step=reach, note=(
                f"at {step_s:.3g} s/step the stop time cuts this {kind} schedule at about step {reach} of {end}, "
                f"before its decay ends: the job will stop there with the learning rate still high "
                f"(--lr-schedule wsd decays by the stop time)"))
            return out
    end_at = at + timedelta(seconds=(end - step) * step_s + save_s)
    out.update(cut=kind == "wsd" and end < total, end_at=end_at.isoformat(timespec="seconds"))
    slack = f", {span((stop_at - end_at).total_seconds())} before the stop time" if stop_at else ""
    if out["cut"]:
        out["note"] = (f"the stop time comes before the {total} planned steps: the decay moved earlier, to end at "
                       f"step {end} by {out['end_at']} at {step_s:.3g} s/step{slack}")
    else:
        out["note"] = f"ends at step {end} by {out['end_at']} at {step_s:.3g} s/step{slack}"
    return out


def span(seconds: float) -> str:
    """A duration as a message gives it: seconds under 2 minutes, minutes under 2 hours, else hours."""
    size = abs(seconds)
    return f"{seconds:.0f} s" if size < 120 else f"{seconds / 60:.0f} min" if size < 7200 else f"{seconds / 3600:.1f} h"
