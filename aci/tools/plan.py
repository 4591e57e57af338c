"""`plan`: the run card (what, against what, until when; `aci.runcard`) and the phase plan derived from state."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from aci import records, runcard
from aci.context import Context
from aci.errors import ACIError
from aci.evaluation import translation
from aci.graders import SPEC_HELP
from aci.progress import Gate, PhaseStatus, gates, next_actions, phases
from aci.registry import ToolInput, ToolOutput, tool
from aci.rules import ProfileName

OPTION_FIELDS = ("model_option", "limit_option", "output_option", "seed_option")


class PlanInput(ToolInput):
    action: Literal["init", "show", "update"] = Field("show", description="init the run card, show it, or update fields")
    base_model: str | None = Field(None, description="path or hub id of the base model (init)")
    benchmark: str | None = Field(None, description="benchmark name, e.g. gsm8k (init)")
    eval_command: str | None = Field(
        None, description="evaluation command as typed (e.g. python evaluate.py --model-path final_model --limit -1; "
                          "init says how it turned it into {model_path}, {limit}, {output} placeholders) or with them"
    )
    model_option: str | None = Field(None, description="the eval command's option that takes the model folder, when "
                                                       "plan init cannot place it (with --eval-command)")
    limit_option: str | None = Field(None, description="the eval command's option that takes the sample count "
                                                       "(e.g. --n), when plan init cannot place it")
    limit_all: str | None = Field(None, description="the value of that option that means every item (e.g. 0 or "
                                                    "-1), when its --help does not say")
    output_option: str | None = Field(None, description="the eval command's option that takes the metrics JSON file")
    seed_option: str | None = Field(None, description="the eval command's option that takes a seed")
    metric_key: str | None = Field(None, description="key of the score in the eval command's JSON output (dotted "
                                                     "for nested JSON: results.task.exact_match)")
    count_key: str | None = Field(None, description="key of the number of items scored in the eval command's JSON "
                                                    "(dotted), when the tools cannot find one")
    template: str | None = Field(None, description="chat template .jinja the evaluation renders (default: templates/<family>.jinja)")
    grader: str | None = Field(None, description="grader for tasks that name none, as the evaluation scores "
                                                 f"(verify-task's default): {SPEC_HELP}")
    benchmark_size: int | None = Field(None, ge=1, description="items in the full benchmark (sets the minimum eval samples)")
    budget_hours: float | None = Field(None, gt=0, allow_inf_nan=False,
                                       description="time budget from the run's start (default: to --deadline, "
                                                   "else the rules profile's)")
    budget_minutes: float | None = Field(None, gt=0, allow_inf_nan=False,
                                         description="the same in minutes (give one of the two)")
    deadline: str | None = Field(None, description="when the run ends: an ISO time or a clock time (18:00, the next "
                                                   "one); sets the budget; timer.sh wins when present")
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
    eval_options: list[str] = Field(default_factory=list, description="which option of the eval command takes the "
                                                                      "model path, the limit, the output and the seed")

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
        lines += [f"eval option for {t}" for t in self.eval_options]
        lines += [f"next: {a}" for a in self.next_actions]
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


@tool("plan", title="Run card and phase plan", idempotent=False)
def plan(inp: PlanInput, ctx: Context) -> PlanOutput:
    """Create (init), read (show) or change (update) the run card: base model, benchmark, eval command,
    template, budget and deadline. The eval command goes in as typed: its options (model path, sample
    limit and its every-item value, output file, seed) are read from the script's own --help and the
    mapping is shown; what cannot be placed is asked for (--model-option, --limit-option, --limit-all,
    --output-option, --seed-option). The deadline comes from timer.sh when present, else --deadline (ISO
    or a clock time) or --budget-minutes/--budget-hours, which also set the budget the phase plan and the
    final reserve follow. Returns the phase plan with time allocated and spent, the gates passed, and the
    next actions."""
    roles = {"model_path": inp.model_option, "limit": inp.limit_option, "output": inp.output_option,
             "seed": inp.seed_option}
    fields = inp.model_dump(exclude={"action", "force", "limit_all", "budget_minutes", *OPTION_FIELDS},
                            exclude_none=True)
    if inp.budget_minutes is not None:
        if inp.budget_hours is not None:
            raise ACIError("give --budget-minutes or --budget-hours, not both")
        fields["budget_hours"] = inp.budget_minutes / 60
    warnings: list[str] = []
    typed = {}
    learnt = translation.for_card(ctx.card, inp.eval_command, {r: o for r, o in roles.items() if o}, inp.limit_all,
                                  ctx.workdir)
    if learnt:
        fields["eval_command"] = learnt.command
        fields["eval_options"] = learnt.options
        typed = {"eval_command_typed": learnt.options["typed"], "translation": learnt.changes} if learnt.changes else {}
    action = inp.action
    if action == "init" and ctx.card and not inp.force:  # e.g. PostTrainBench's solve.sh made it already
        fields, notes = runcard.onto_existing(ctx.card, fields)
        warnings += notes
        action = "update" if fields else "show"
    if action == "init":
        warnings += runcard.init(ctx, fields, typed)
    elif action == "update":
        warnings += runcard.update(ctx, fields, typed)
    warnings += learnt.warnings if learnt else []
    ctx.forget()
    if not ctx.card:
        return PlanOutput(deadline_source=ctx.clock.source, next_actions=next_actions(ctx))
    gate_map = gates(ctx)
    phase_list = phases(ctx, gate_map)
    return PlanOutput(
        card=ctx.card.model_dump(mode="json", exclude_none=True), deadline_source=ctx.clock.source,
        phases=phase_list, gates=list(gate_map.values()), next_actions=next_actions(ctx, phase_list),
        warnings=warnings, translation=typed.get("translation", []),
        eval_options=translation.describe(learnt.options) if learnt else [],
    )
