"""The `Stop` guard: an agent may not stop while more than the final reserve remains, target met or not.

Agents lose most PostTrainBench points by quitting after 2-3 of their 10 hours, and a met target is where
they quit: so meeting one moves the run to a stretch goal (`aci.goal`) and the guard keeps blocking until
the final reserve. In the reserve it blocks once more while `aci finalize` has not passed on final_model
(not when the hook already sent the agent back: `stop_hook_active`, so it never traps a session). The
Claude Code `Stop` hook calls `aci guard stop`; a `{"decision": "block", "reason": ...}` answer sends the
agent back to work with the reason as its next instruction.

A run must also end visibly: a judge reading the transcript counts an end without a stated reason against
it. So when stopping becomes fine, the guard journals why (`end_state`) and sends the agent back once to
say so in its last message; `finalize` passing in the reserve says the same, for agents without a Stop
hook; and whoever started the agent journals how it ended (`aci guard end`, from the PostTrainBench
integrations), so the journal's last entry names the reason.

Before the reserve the guard ignores `stop_hook_active` (Claude Code keeps it set for the rest of a session
once a hook has sent it back), so it needs its own way out of a loop: when the model API fails, older
Claude Code releases (2.0) end each turn with the error and run the Stop hook again, about once a second,
until the deadline. The guard therefore records its blocks (`guard.json` in the state folder) and lets the
stop through, journaled, after `BLOCK_CAP` blocks in a row within `BLOCK_WINDOW` with no tool call in the
session's transcript and no journal event in between: the cap Claude Code 2.1 applies itself
(`CLAUDE_CODE_STOP_HOOK_BLOCK_CAP`, 8 consecutive blocks without a tool call), where 2.1 also runs
`StopFailure` hooks instead of `Stop` after an API error.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from aci import clock
from aci.context import Context
from aci.errors import ACIError
from aci.goal import goal
from aci.progress import gates, next_actions
from aci.state import JOURNAL, atomic_write_json, iso, now, parse_ts, read_json

BLOCK_CAP = 8
BLOCK_WINDOW = timedelta(minutes=5)
RECORD = "guard.json"  # the current run of blocks: session, times, journal size, transcript offset
END = "end"  # the journal kind of an entry that says why the run ends
_TRANSCRIPT_READ_MAX = 4 << 20  # more than this appended since the last block is activity in itself


def stop_decision(ctx: Context, hook: dict | None = None) -> dict | None:
    """None when stopping is fine; otherwise the hook's block decision with a reason."""
    if not ctx.card:
        return None  # not a post-training run: never trap an unrelated session
    hook = hook or {}
    clk = ctx.clock
    work_left = clk.left_for_work()
    if work_left is None:
        return None
    best_txt = _best_text(ctx)
    if work_left.total_seconds() <= 0:
        left = clk.left()
        if gates(ctx)["finalized"].passed or hook.get("stop_hook_active") or not left:
            return _closing(ctx)
        return {"decision": "block", "reason": (
            f"Final reserve, {clock.fmt(left)} left: before stopping, run aci finalize on final_model ({best_txt}) "
            f"and fix what it flags; stopping is fine once it passes.")}
    if _stuck(ctx, hook):
        return None
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


def end_state(ctx: Context) -> str:
    """Where the run stands as it ends: the time left and what final_model holds, from state."""
    clk = ctx.clock
    left, work_left = clk.left(), clk.left_for_work()
    if left is None:
        when = "no deadline is known"
    elif not left:
        when = "the deadline has passed"
    elif not work_left:
        when = f"the final reserve has begun ({clock.fmt(left)} left)"
    else:
        when = f"{clock.fmt(left)} are left, {clock.fmt(work_left)} of them before the final reserve"
    if ctx.best is None:
        model = "no final_model has been promoted"
    elif gates(ctx)["finalized"].passed:
        model = f"final_model passed finalize ({_best_text(ctx)})"
    else:
        model = f"finalize has not passed on final_model ({_best_text(ctx)})"
    return f"{when}; {model}"


def closing_note(ctx: Context) -> str | None:
    """What an agent in the final reserve is told once stopping is fine (None before the reserve)."""
    work_left = ctx.clock.left_for_work()
    if not ctx.card or work_left is None or work_left.total_seconds() > 0:
        return None
    return _stopping_is_fine(end_state(ctx))


def _stopping_is_fine(where: str) -> str:
    return f"Stopping is fine now: {where}. Make your last message say that this is why the run ends, then stop."


def end_of_run(ctx: Context, how: str) -> str | None:
    """Journal how the run ended (`how`: who or what ended the agent) and where it stood; None without a run."""
    if not ctx.card:
        return None
    message = f"Run ended: {how.strip().rstrip('.')}; {end_state(ctx)}"
    with ctx.state.event(END, message, tool="guard", data={"how": how}):
        pass
    return message


def _closing(ctx: Context) -> dict | None:
    """Once per run, when stopping is fine: journal why and send the agent back to state it in its last
    message. Afterwards (the reason journaled) stopping goes through."""
    if any(e.get("kind") == END for e in ctx.state.journal()):
        return None
    where = end_state(ctx)  # once: it reads the journal (the gates); called only in the final reserve
    with ctx.state.event(END, f"Stop guard: stopping is fine: {where}", tool="guard"):
        pass
    return {"decision": "block", "reason": _stopping_is_fine(where)}


def _best_text(ctx: Context) -> str:
    best = ctx.best
    return f"best {best.checkpoint} = {best.score:.4g}" if best else "no final_model promoted yet"


def _stuck(ctx: Context, hook: dict) -> bool:
    """Record this block; True (and journaled) when the session has been sent back `BLOCK_CAP` times in a
    row within `BLOCK_WINDOW` without doing anything, so this stop goes through instead."""
    root = ctx.state.root
    try:
        record = read_json(root / RECORD) or {}
    except ACIError:
        record = {}  # a damaged record only starts the count again
    journal_size = _size(root / JOURNAL) or 0
    transcript = Path(hook["transcript_path"]) if hook.get("transcript_path") else None
    transcript_size = _size(transcript) if transcript else None
    appended, last_message = _appended(transcript, record.get("transcript_at"), transcript_size)
    idle = (hook.get("stop_hook_active") and record.get("session") == hook.get("session_id")
            and record.get("journal") == journal_size and appended is not None and '"tool_use"' not in appended)
    t = now()
    blocks = [parse_ts(b) for b in record.get("blocks", [])] if idle else []
    recent = [b for b in blocks if t - b <= BLOCK_WINDOW]
    if len(recent) >= BLOCK_CAP:
        said = hook.get("last_assistant_message") or last_message
        with ctx.state.event("guard", (
                f"Stop guard let the stop through: it had sent the agent back {len(recent)} times in "
                f"{(t - recent[0]).total_seconds():.0f} s with no tool call or state change in between"
                + (f"; the agent's last message: {said[:300]}" if said else "")),
                tool="guard", data={"blocks": len(recent), "session": hook.get("session_id")}):
            pass
        (root / RECORD).unlink(missing_ok=True)
        return True
    if root.is_dir():
        atomic_write_json(root / RECORD, {"session": hook.get("session_id"), "journal": journal_size,
                                          "transcript_at": transcript_size,
                                          "blocks": [iso(b) for b in [*recent, t][-BLOCK_CAP:]]})
    return False


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def _appended(transcript: Path | None, offset: int | None, size: int | None) -> tuple[str | None, str | None]:
    """What the transcript gained since `offset` (None when that cannot be told: treat as activity), and the
    text of the last assistant message in it."""
    if transcript is None and offset is None:
        return "", None  # no transcript to read: the journal and the times decide
    if transcript is None or offset is None or size is None or size < offset or size - offset > _TRANSCRIPT_READ_MAX:
        return None, None
    try:
        with open(transcript, "rb") as f:
            f.seek(offset)
            text = f.read(size - offset).decode(errors="replace")
    except OSError:
        return None, None
    last = None
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(entry, dict) and entry.get("type") == "assistant":
            content = (entry.get("message") or {}).get("content")
            parts = content if isinstance(content, list) else [{"type": "text", "text": str(content)}]
            last = " ".join(p.get("text", "") for p in parts if isinstance(p, dict) and p.get("type") == "text")
    return text, last or None
