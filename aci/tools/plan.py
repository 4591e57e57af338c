"""`plan`: the run card (what, against what, until when; `aci.runcard`) and the phase plan derived from state."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from aci import records, runcard
from aci.context import Context
from aci.evaluation.command import translate
from aci.graders import SPEC_HELP
from aci.progress import Gate, PhaseStatus, gates, next_actions, phases
from aci.registry import ToolInput, ToolOutput, tool
from aci.rules import ProfileName


class PlanInput(ToolInput):
    action: Literal["init", "show", "update"] = Field("show", description="init the run card, show it, or update fields")
    base_model: str | None = Field(None, description="path or hub id of the base model (init)")
    benchmark: str | None = Field(None, description="benchmark name, e.g. gsm8k (init)")
    eval_command: str | None = Field(
        None, description="evaluation command as typed (e.g. python evaluate.py --model-path final_model --limit -1; "
                          "init says how it turned it into {model_path}, {limit}, {output} placeholders) or with them"
    )
    metric_key: str | None = Field(None, description="key of the score in the eval command's JSON output")
    template: str | None = Field(None, description="chat template .jinja the evaluation renders (default: templates/<family>.jinja)")
    grader: str | None = Field(None, description="grader for tasks that name none, as the evaluation scores "
                                                 f"(verify-task's default): {SPEC_HELP}")
    benchmark_size: int | None = Field(None, ge=1, description="items in the full benchmark (sets the minimum eval samples)")
    budget_hours: float | None = Field(None, gt=0, description="time budget (default from the rules profile)")
    deadline: str | None = Field(None, description="fixed ISO deadline; timer.sh wins when present")
    profile: ProfileName | None = Field(None, description="rules profile (init)")
    targets: list[records.Target] | None = Field(None, description='targets, e.g. [{"metric": "accuracy", "value": 0.6}]')
    notes: str | None = Field(None, description="free text kept on the card")
    reference: str | None = Field(None, description="the benchmark's test items that contamination checks count "
                                                    "against (pinned with its sha256; else the first check's)")
    force: bool = Field(False, description="with init: replace an existing run card")


class PlanOutput(ToolOutput):
    card: dict | None = None
    deadline_source: str
    phases: list[PhaseStatus] = Field(default_factory=list)
    gates: list[Gate] = Field(default_factory=list)
    next_actions: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    translation: list[str] = Field(default_factory=list, description="what was changed in the eval command as typed")

    def summary(self) -> str:
        lines = []
        if self.card:
            c = self.card
            lines.append(f"{c['base_model']} on {c['benchmark']} ({c['profile']} rules)")
            lines.append(f"eval: {c.get('eval_command') or '-'}")
            lines.append(f"template: {c.get('template') or '-'}   deadline source: {self.deadline_source}")
        for p in self.phases:
            mark = {"done": "x", "current": ">", "pending": " ", "missed": "-"}[p.status]
            lines.append(f" [{mark}] {p.name:<12} {p.spent_min:7.1f} / {p.allocated_min:6.1f} min   gate {p.gate}")
        lines += [f"eval command as typed, changed: {t}" for t in self.translation]
        lines += [f"next: {a}" for a in self.next_actions]
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


@tool("plan", title="Run card and phase plan", idempotent=False)
def plan(inp: PlanInput, ctx: Context) -> PlanOutput:
    """Create (init), read (show) or change (update) the run card: base model, benchmark, eval command,
    template, budget and deadline (read from timer.sh when present). Returns the phase plan with time
    allocated and spent, the gates passed, and the next actions."""
    fields = inp.model_dump(exclude={"action", "force"}, exclude_none=True)
    warnings: list[str] = []
    typed = {}
    if inp.eval_command:
        t = translate(inp.eval_command)
        fields["eval_command"] = t.command
        typed = {"eval_command_typed": inp.eval_command, "translation": t.changes} if t.changes else {}
    action = inp.action
    if action == "init" and ctx.card and not inp.force:  # e.g. PostTrainBench's solve.sh made it already
        fields, notes = runcard.onto_existing(ctx.card, fields)
        warnings += notes
        action = "update" if fields else "show"
    if action == "init":
        warnings += runcard.init(ctx, fields, typed)
    elif action == "update":
        warnings += runcard.update(ctx, fields, typed)
    ctx.forget()
    if not ctx.card:
        return PlanOutput(deadline_source=ctx.clock.source, next_actions=next_actions(ctx))
    gate_map = gates(ctx)
    phase_list = phases(ctx, gate_map)
    return PlanOutput(
        card=ctx.card.model_dump(mode="json", exclude_none=True), deadline_source=ctx.clock.source,
        phases=phase_list, gates=list(gate_map.values()), next_actions=next_actions(ctx, phase_list), warnings=warnings, translation=typed.get("translation", []),
    )
