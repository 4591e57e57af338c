"""The `Stop` guard: an agent may not stop while more than the final reserve remains, target met or not.

Agents lose most PostTrainBench points by quitting after 2-3 of their 10 hours, and a met target is where
they quit: so meeting one moves the run to a stretch goal (`aci.goal`) and the guard keeps blocking until
the final reserve. In the reserve it blocks once more while `aci finalize` has not passed on final_model
(not when the hook already sent the agent back: `stop_hook_active`, so it never traps a session). The
Claude Code `Stop` hook calls `aci guard stop`; a `{"decision": "block", "reason": ...}` answer sends the
agent back to work with the reason as its next instruction.
"""

from __future__ import annotations

from aci import clock
from aci.context import Context
from aci.goal import goal
from aci.progress import gates, next_actions


def stop_decision(ctx: Context, hook: dict | None = None) -> dict | None:
    """None when stopping is fine; otherwise the hook's block decision with a reason."""
    if not ctx.card:
        return None  # not a post-training run: never trap an unrelated session
    clk = ctx.clock
    work_left = clk.left_for_work()
    if work_left is None:
        return None
    best = ctx.best
    best_txt = f"best {best.checkpoint} = {best.score:.4g}" if best else "no final_model promoted yet"
    if work_left.total_seconds() <= 0:
        left = clk.left()
        if gates(ctx)["finalized"].passed or (hook or {}).get("stop_hook_active") or not left:
            return None
        return {"decision": "block", "reason": (
            f"Final reserve, {clock.fmt(left)} left: before stopping, run aci finalize on final_model ({best_txt}) "
            f"and fix what it flags; stopping is fine once it passes.")}
    g = goal(ctx)
    why = (f"{g.text}; a met target is a milestone, not the end" if g.stretch
           else f"{g.text}, and no target is met")
    return {
        "decision": "block",
        "reason": (
            f"Do not stop: {clock.fmt(clk.left())} left ({clock.fmt(work_left)} before the final reserve), "
            f"{best_txt}; {why} (rule never-stop-early). Next: {next_actions(ctx)[0]}"
        ),
    }
