"""The learning-rate schedule that ends on time: warmup, stable, then a decay timed to the stop time (WSD).

A run's score is its last good checkpoint before the deadline. Cosine and linear schedules decay over a
fixed number of steps, so a job that runs slower than planned (a busy machine, an evaluation sharing the
GPU) is cut at its stop time with the learning rate still high. Warmup-stable-decay holds the peak rate
and decays only at the end (Hu et al. 2024, "MiniCPM"; Hägele et al. 2024, "Scaling Laws and
Compute-Optimal Training Beyond Fixed Training Durations": a cooldown over the last ~20 % of the steps
matched cosine), so the decay can start whenever the clock says. `Wsd` is told after every optimizer
step how many more steps still end, and save, before the stop time at the rate measured so far
(`aci.training.pace`); it starts a linear decay to `FLOOR` when the run enters the last `DECAY_SHARE`
of that end. Should the rate fall during the decay, the decay is re-anchored where it is and ends
sooner. Should it recover (a few slow steps while an evaluation shared the machine pulled the end in),
the decay is stretched from where it is to the later end, so a slowdown that passed costs its own
steps, not the rest of the run. The rate still only falls, and a later end must add `STRETCH_SHARE` of
a full decay's steps (`DECAY_SHARE` of the end): more than the plan's `pace.HEADROOM` gives back over a
decay at a steady rate, and more than a decay cut short by falls has left, so a wavering rate re-plans
seldom. The decay's end is the job's planned end: the job saves there and stops.

The plan is re-decided between the optimizer's step and the scheduler's (the callback's
`on_optimizer_step`), so the rate of the very next step already follows it; a decay decided after step
k is anchored at the rate step k used, so it falls from the next step on.

The trainer keeps its own loop: `planned(trainer_cls, plan)` is the trainer class whose
`create_scheduler` (transformers' hook for a custom scheduler) builds a `LambdaLR` reading the plan.
No heavy import at module level.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DECAY_SHARE = 0.2
MIN_DECAY_STEPS = 2
STRETCH_SHARE = 0.2  # a decay moves later only by at least this share of a full decay's steps
FLOOR = 0.0  # the learning rate at the planned end, over the peak


@dataclass
class Wsd:
    """The plan, in optimizer steps. `factor(step)` is the learning rate over the peak after `step` steps
    (what `LambdaLR` asks); `follow` re-decides the end as the clock and the rate allow."""

    total: int = 1  # steps the trainer plans (its max_steps)
    warmup: int = 0
    warmup_share: float = 0.0  # of the planned end, while the run is still warming up
    end: int = 1  # the planned end: the decay reaches FLOOR here
    decay_from: int | None = None  # the step the decay is anchored at
    decay_from_factor: float = 1.0

    def begin(self, total: int, warmup: int) -> None:
        self.total = self.end = max(1, total)
        self.warmup = min(max(0, warmup), self.total)
        self.warmup_share = self.warmup / self.total
        self.decay_from, self.decay_from_factor = None, 1.0

    def decay_steps(self, end: int) -> int:
        return max(MIN_DECAY_STEPS, math.ceil(DECAY_SHARE * end))

    def factor(self, step: int) -> float:
        if self.decay_from is not None and step >= self.decay_from:
            if step >= self.end:
                return FLOOR
            left = (self.end - step) / (self.end - self.decay_from)
            return FLOOR + (self.decay_from_factor - FLOOR) * left
        if step < self.warmup:
            return step / self.warmup
        return 1.0

    def phase(self, step: int) -> str:
        if step >= self.end:
            return "done"
        return "decay" if self.decay_from is not None else "warmup" if step < self.warmup else "stable"

    def follow(self, step: int, more: int | None) -> str | None:
        """Re-decide once step `step` is applied, before the scheduler sets the next step's rate: `more`
        further steps still end before the stop time (None: no clock, or no rate measured yet). Returns
        what changed, in words, when the decay starts or moves."""
        end = self.total if more is None else min(self.total, step + more)
        if end <= step:  # not one more step fits: the caller stops and saves now
            return None
        if self.decay_from is not None:
            before = self.end
            if end < before:
                self._anchor(step, end)
                return f"the step rate fell: the decay now ends at step {end} (was {before})"
            if end - before < math.ceil(STRETCH_SHARE * self.decay_steps(before)):
                return None
            self._anchor(step, end)
            return f"the step rate recovered: the decay now ends at step {end} (was {before})"
        self.end = end
        if step < self.warmup:  # the warmup is a share of the run as it will end, not of steps it will not reach
            self.warmup = max(step + 1, math.ceil(self.warmup_share * end))
        if step < end - self.decay_steps(end):
            return None
        self._anchor(step, end)
        cut = f" of {self.total} planned: the stop time comes first" if end < self.total else ""
        return f"decay started after step {step}, to reach the floor at step {end}{cut}"

    def decay_now(self, step: int) -> int:
        """Steps more for a decay that starts at once after `step`: the last `DECAY_SHARE` of a run ending
        there, so `follow` anchors it at this step, on every rank alike, given only the count."""
        end = max(step + 1, math.ceil(step / (1 - DECAY_SHARE)))
        while end - self.decay_steps(end) > step:  # rounding, and MIN_DECAY_STEPS for a short run
            end -= 1
        return end - step

    def _anchor(self, step: int, end: int) -> None:
        """Decay from the rate step `step` used (`factor(step - 1)`) to FLOOR at `end`."""
        self.decay_from_factor, self.decay_from, self.end = self.factor(step - 1), step - 1, end

    def report(self, step: int) -> dict:
        return {"kind": "wsd", "phase": self.phase(step), "warmup_steps": self.warmup, "planned_steps": self.total,
                "end_step": self.end, "decay_from_step": self.decay_from}


def planned(trainer_cls: type, plan: Wsd | None) -> type:
    """`trainer_cls`, or with a plan its subclass whose scheduler is a `LambdaLR` reading `plan` (begun with
    the trainer's own step count and warmup, so `warmup_ratio` means what it means to transformers)."""
    if plan is None:
        return trainer_cls

    class Planned(trainer_cls):
        def create_scheduler(self, num_training_steps: int, optimizer=None):
            if self.lr_scheduler is None:
                from torch.optim.lr_scheduler import LambdaLR

                plan.begin(num_training_steps, self.args.get_warmup_steps(num_training_steps))
                self.lr_scheduler = LambdaLR(optimizer or self.optimizer, plan.factor)
            return self.lr_scheduler

    Planned.__name__ = Planned.__qualname__ = f"Planned{trainer_cls.__name__}"
    return Planned
