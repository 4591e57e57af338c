"""`log-state` and `status`: write to the journal, and read back what a fresh context needs."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from aci.context import Context
from aci.errors import ACIError
from aci.progress import Summary, summarise
from aci.records import AgentKind
from aci.registry import ToolInput, ToolOutput, tool
from aci.state import DATA_FILE, EVENT_DATA_BYTES, EVENTS


class LogStateInput(ToolInput):
    action: Literal["append", "summary"] = Field("append", description="append an event, or summarise the run")
    kind: AgentKind = Field("note", description="event kind; benchmark-card records the recon findings")
    message: str | None = Field(None, max_length=4000, description="one or two sentences")
    data: dict[str, Any] | None = Field(None, description=(
        f"structured details (scores, paths, counts); past {EVENT_DATA_BYTES >> 10} KiB as JSON the largest "
        f"values go to state/{EVENTS}/<event id>.json, which the event's {DATA_FILE} names"))
    last: int = Field(10, ge=1, le=200, description="summary: how many recent events to include")


class LogStateOutput(ToolOutput):
    event: dict | None = None
    state: Summary | None = None

    def summary(self) -> str:
        if self.event:
            return f"logged {self.event['kind']}: {self.event['message']}"
        return render_summary(self.state)


def render_summary(s: Summary | None) -> str:
    if s is None:
        return ""
    if not s.has_run_card:
        return "no run card yet\n" + "\n".join(f"next: {a}" for a in s.next_actions)
    lines = [f"{s.base_model} on {s.benchmark}: {s.time_left} left (deadline {s.deadline}, from {s.deadline_source})",
             *s.plainly,
             f"phase: {s.current_phase}   best: " + (f"{s.best['checkpoint']} = {s.best['score']}" if s.best else "none")
             + (f"   goal: {s.goal.value:.4g} ({s.goal.source})" if s.goal and s.goal.value is not None else "")]
    lines += [f"job {j['id']} {j['status']} {j.get('progress', {}).get('step', '')}" for j in s.running_jobs]
    lines += [f"  {e['ts']} {e['kind']}: {e['message']}" for e in s.last_events[-5:]]
    lines += [f"next: {a}" for a in s.next_actions]
    lines += [f"rule {r}" for r in s.rules_now]
    return "\n".join(lines)


@tool("log-state", title="Journal and run summary")
def log_state(inp: LogStateInput, ctx: Context) -> LogStateOutput:
    """Append a decision, observation, result or benchmark card to the run's journal (one git commit
    each), or return the summary a fresh context needs: time left, best model and score, last events,
    running jobs, next actions, and the rules that apply now."""
    if inp.action == "summary":
        return LogStateOutput(state=summarise(ctx, inp.last))
    ctx.require_card()
    if not inp.message or not inp.message.strip():
        raise ACIError("log-state append needs --message")
    with ctx.state.event(inp.kind, inp.message.strip(), tool="log-state", data=inp.data or {}):
        pass
    return LogStateOutput(event=ctx.state.journal(1)[0])


class StatusInput(ToolInput):
    last: int = Field(10, ge=1, le=200, description="how many recent events to include")


class StatusOutput(ToolOutput):
    state: Summary

    def summary(self) -> str:
        return render_summary(self.state)


@tool("status", title="Run status", read_only=True, idempotent=True)
def status(inp: StatusInput, ctx: Context) -> StatusOutput:
    """Read-only summary of the run: time left, phase, best checkpoint, running jobs, recent events,
    next actions and the rules that apply now. Call it first after a restart or a lost context."""
    return StatusOutput(state=summarise(ctx, inp.last))
