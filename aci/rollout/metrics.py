"""The six metrics, per trial and over trials, each figure naming the level it counts.

| metric | formula | level counted |
|---|---|---|
| task success rate | successful tasks / tasks | task |
| consistency | range (max - min) of the trials' success rates | trial |
| tool-call precision | correct calls / calls issued | step |
| argument accuracy | calls with correct arguments / calls with the right tool | step |
| steps per success | steps of successful tasks / successful tasks | step per task |
| cost per success | tokens (prompt + completion, all tasks) / successful tasks, and task seconds likewise | task |

Steps per success measures how long *successful* trajectories were; cost per success charges every
task's spend (failures cost too) to the successes, which is the economic unit. A figure whose
denominator is zero has value None, never a made-up 0. Over trials, ratios are pooled (sums of
numerators over sums of denominators), and the success rate is the mean with its range.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from aci.rollout.trace import TaskTrace

Level = Literal["step", "turn", "task", "trial"]


def _r(x: float) -> float:
    return round(x, 6)


class Figure(BaseModel):
    value: float | None = Field(description="None when the denominator is 0")
    level: Level = Field(description="what is counted: steps, turns, tasks or trials")
    numerator: float
    denominator: float
    formula: str

    @classmethod
    def ratio(cls, num: float, den: float, level: Level, formula: str) -> Figure:
        return cls(value=_r(num / den) if den else None, level=level, numerator=num, denominator=den,
                   formula=formula)


class Counts(BaseModel):
    """Sums over a set of task traces, from which every figure is computed (and pooled over trials)."""

    tasks: int = 0
    successes: int = 0
    score_sum: float = 0.0
    turns: int = 0
    steps: int = 0
    success_steps: int = 0
    calls: int = 0
    correct_calls: int = 0
    right_tool_calls: int = 0
    correct_argument_calls: int = 0
    unknown_tool: int = 0
    invalid_arguments: int = 0
    step_errors: int = 0
    errors_judged: int = 0
    errors_ignored: int = 0
    tokens: int = 0
    seconds: float = 0.0

    def add(self, t: TaskTrace) -> None:
        self.tasks += 1
        self.successes += int(t.success)
        self.score_sum += t.score
        self.turns += len(t.turns)
        steps = t.steps()
        self.steps += len(steps)
        self.success_steps += len(steps) if t.success else 0
        for s in steps:
            if s.kind != "tool_call":
                continue
            self.calls += 1
            self.correct_calls += int(bool(s.correct))
            self.right_tool_calls += int(bool(s.correct_tool))
            self.correct_argument_calls += int(bool(s.correct_tool and s.correct_arguments))
            self.unknown_tool += int(bool(s.unknown_tool))
            self.invalid_arguments += int(bool(s.invalid_arguments))
            self.step_errors += int(s.error is not None)
            self.errors_judged += int(s.error_ignored is not None)
            self.errors_ignored += int(bool(s.error_ignored))
        self.tokens += sum(turn.prompt_tokens + turn.completion_tokens for turn in t.turns)
        self.seconds += t.duration_s

    def merge(self, other: Counts) -> Counts:
        return Counts(**{k: getattr(self, k) + getattr(other, k) for k in Counts.model_fields})


class Figures(BaseModel):
    task_success_rate: Figure
    tool_call_precision: Figure
    argument_accuracy: Figure
    steps_per_success: Figure
    tokens_per_success: Figure
    seconds_per_success: Figure
    mean_score: Figure
    errors_ignored: Figure

    @classmethod
    def of(cls, c: Counts) -> Figures:
        return cls(
            task_success_rate=Figure.ratio(c.successes, c.tasks, "task", "successful tasks / tasks"),
            tool_call_precision=Figure.ratio(c.correct_calls, c.calls, "step", "correct calls / calls issued"),
            argument_accuracy=Figure.ratio(c.correct_argument_calls, c.right_tool_calls, "step",
                                           "calls with correct arguments / calls with the right tool"),
            steps_per_success=Figure.ratio(c.success_steps, c.successes, "step",
                                           "steps of successful tasks / successful tasks"),
            tokens_per_success=Figure.ratio(c.tokens, c.successes, "task",
                                            "prompt + completion tokens of all tasks / successful tasks"),
            seconds_per_success=Figure.ratio(round(c.seconds, 3), c.successes, "task",
                                             "task wall seconds of all tasks / successful tasks"),
            mean_score=Figure.ratio(round(c.score_sum, 6), c.tasks, "task", "sum of grader scores / tasks"),
            errors_ignored=Figure.ratio(c.errors_ignored, c.errors_judged, "step",
                                        "failed steps the next reply ignored / failed steps with a next reply"),
        )


class TrialMetrics(BaseModel):
    trial: int
    counts: Counts
    figures: Figures


class Consistency(BaseModel):
    level: Level = "trial"
    min: float | None
    max: float | None
    spread: float | None = Field(description="max - min of the trials' task success rates")
    rates: list[float | None]


class RunMetrics(BaseModel):
    trials: list[TrialMetrics]
    pooled: Figures = Field(description="every trial's counts summed, then divided")
    success_rate_mean: Figure = Field(description="mean of the trials' task success rates (level: trial)")
    consistency: Consistency
    unsolved_tasks: list[str] = Field(default_factory=list, description="tasks no trial solved (first 100)")
    tasks_solved_any: int = 0


def compute(traces: dict[int, list[TaskTrace]]) -> RunMetrics:
    per_trial = []
    total = Counts()
    solved: dict[str, bool] = {}
    for trial in sorted(traces):
        c = Counts()
        for t in traces[trial]:
            c.add(t)
            solved[t.task_id] = solved.get(t.task_id, False) or t.success
        per_trial.append(TrialMetrics(trial=trial, counts=c, figures=Figures.of(c)))
        total = total.merge(c)
    exact = [m.counts.successes / m.counts.tasks if m.counts.tasks else None for m in per_trial]
    known = [r for r in exact if r is not None]
    return RunMetrics(
        trials=per_trial,
        pooled=Figures.of(total),
        success_rate_mean=Figure.ratio(round(sum(known), 6), len(known), "trial", "sum of trial success rates / trials"),
        consistency=Consistency(min=_r(min(known)) if known else None, max=_r(max(known)) if known else None,
                                spread=_r(max(known) - min(known)) if known else None,
                                rates=[m.figures.task_success_rate.value for m in per_trial]),
        unsolved_tasks=[k for k, v in solved.items() if not v][:100],
        tasks_solved_any=sum(solved.values()),
    )
