"""The run envelope: what every tool result carries, so the clock and the rules come back with every call.

Time left, the deadline, the best checkpoint, and at most three reminders that apply now, all derived
from state by `aci.progress` on each call.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from aci import clock
from aci.context import Context
from aci.goal import goal
from aci.progress import Gate, gates, protected_changed, rules_weakened, unchecked_datasets


class BestInfo(BaseModel):
    checkpoint: str
    score: float
    range: tuple[float, float] | None = None


class RunInfo(BaseModel):
    """Carried by every result, so the rules and the clock come back with every call."""

    deadline: str | None = Field(None, description="ISO time the run ends")
    time_left: str = Field(description="e.g. 7h12m, or 'unknown' without a run card or timer")
    time_left_min: float | None = None
    in_final_reserve: bool = False
    best: BestInfo | None = None
    reminders: list[str] = Field(default_factory=list, max_length=3)


def reminders(ctx: Context, gate_map: dict[str, Gate] | None = None) -> list[str]:
    if not ctx.card:
        return ["No run card yet: run aci plan init first."]
    out = []
    clk = ctx.clock
    if clk.note:  # timer.sh failed: say whose deadline every figure now follows
        out.append(clk.note)
    gate_map = gate_map or gates(ctx)
    if clk.in_reserve():
        out.append("Final reserve: final_model passed finalize; the run is complete." if gate_map["finalized"].passed
                   else ctx.rules.guide(None, has_card=True, in_reserve=True).next[0])  # rules.yaml's words
    else:
        work = clk.left_for_work()
        if work is not None and work.total_seconds() < 3600:
            out.append(f"Final reserve starts in {clock.fmt(work)}: plan jobs to end before it.")
    changed = protected_changed(ctx)
    if changed:
        out.append(f"Evaluation files changed since init ({', '.join(changed[:3])}): restore them (rule no-eval-edits).")
    if not gate_map["baseline"].passed:
        out.append("No baseline yet: evaluate the base model before training.")
    elif not gate_map["first-promoted"].passed:
        out.append("final_model is the base model, a floor: promote the first trained checkpoint that beats it."
                   if ctx.best else "No final_model yet: promote the first checkpoint that beats the base model.")
    elif not clk.in_reserve():
        g = goal(ctx)
        if g.source == "top of the scale":  # nothing above it to improve: say what is left to confirm or do
            out.append(f"{g.text[:1].upper()}{g.text[1:]} (rule never-stop-early).")
        elif g.stretch:
            out.append(f"{g.text[:1].upper()}{g.text[1:]}: keep improving until the final reserve "
                       f"(rule never-stop-early).")
    weakened = rules_weakened(ctx)
    if weakened:
        out.append(f"Rules weakened mid-run: {weakened[-1]}.")
    if ctx.rules.profile.contamination.required_before_training:
        unchecked = unchecked_datasets(ctx)
        if unchecked:
            out.append(f"Data not contamination-checked: {', '.join(unchecked[:3])}.")
    return out[:3]


def envelope(ctx: Context) -> RunInfo:
    clk = ctx.clock
    left = clk.left()
    best = ctx.best
    return RunInfo(
        deadline=clk.deadline.isoformat(timespec="seconds") if clk.deadline else None,
        time_left=clock.fmt(left),
        time_left_min=round(left.total_seconds() / 60, 1) if left is not None else None,
        in_final_reserve=clk.in_reserve(),
        best=BestInfo(checkpoint=best.checkpoint, score=best.score, range=best.range) if best else None,
        reminders=reminders(ctx),
    )


