"""The `Stop` guard: an agent may not stop while more than the final reserve remains and no target is met.

Agents lose most PostTrainBench points by quitting after 2-3 of their 10 hours. The Claude Code `Stop`
hook calls `aci guard stop`; a `{"decision": "block", "reason": ...}` answer sends the agent back to
work with the reason as its next instruction.
"""

from __future__ import annotations

from aci import clock
from aci.context import Context
from aci.progress import gates, next_actions


def stop_decision(ctx: Context, hook: dict | None = None) -> dict | None:
    """None when stopping is fine; otherwise the hook's block decision with a reason."""
    if not ctx.card:
        return None  # not a post-training run: never trap an unrelated session
    clk = ctx.clock
    work_left = clk.left_for_work()
    if work_left is None or work_left.total_seconds() <= 0:
        return None
    if gates(ctx)["target-met"].passed:
        return None
    best = ctx.best
    best_txt = f"best {best.checkpoint} = {best.score:.4g}" if best else "no final_model promoted yet"
    action = next_actions(ctx)[0]
    return {
        "decision": "block",
        "reason": (
            f"Do not stop: {clock.fmt(clk.left())} left ({clock.fmt(work_left)} before the final reserve), "
            f"{best_txt}, and no target is met (rule never-stop-early). Next: {action}"
        ),
    }
