"""`plan`: the run card (what, against what, until when) and the phase plan derived from state."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from aci import manifest, records
from aci.clock import read_timer
from aci.context import Context
from aci.errors import ACIError
from aci.progress import Gate, PhaseStatus, gates, next_actions, phases
from aci.registry import ToolInput, ToolOutput, tool
from aci.state import iso, now, parse_ts

PROTECTED = ("evaluate.py", "evaluation_code", "templates")
_FAMILIES = ("qwen", "llama", "gemma", "smollm", "mistral", "phi")


class PlanInput(ToolInput):
    action: Literal["init", "show", "update"] = Field("show", description="init the run card, show it, or update fields")
    base_model: str | None = Field(None, description="path or hub id of the base model (init)")
    benchmark: str | None = Field(None, description="benchmark name, e.g. gsm8k (init)")
    eval_command: str | None = Field(
        None, description="evaluation command with {model_path}, {limit}, {output} placeholders"
    )
    metric_key: str | None = Field(None, description="key of the score in the eval command's JSON output")
    template: str | None = Field(None, description="chat template .jinja the evaluation renders (default: templates/<family>.jinja)")
    benchmark_size: int | None = Field(None, ge=1, description="items in the full benchmark (sets the minimum eval samples)")
    budget_hours: float | None = Field(None, gt=0, description="time budget (default from the rules profile)")
    deadline: str | None = Field(None, description="fixed ISO deadline; timer.sh wins when present")
    profile: Literal["posttrainbench", "default"] | None = Field(None, description="rules profile (init)")
    targets: list[records.Target] | None = Field(None, description='targets, e.g. [{"metric": "accuracy", "value": 0.6}]')
    notes: str | None = Field(None, description="free text kept on the card")
    force: bool = Field(False, description="with init: replace an existing run card")


class PlanOutput(ToolOutput):
    card: dict | None = None
    deadline_source: str
    phases: list[PhaseStatus] = Field(default_factory=list)
    gates: list[Gate] = Field(default_factory=list)
    next_actions: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)

    def summary(self) -> str:
        lines = []
        if self.card:
            c = self.card
            lines.append(f"{c['base_model']} on {c['benchmark']} ({c['profile']} rules)")
            lines.append(f"eval: {c.get('eval_command') or '-'}")
            lines.append(f"template: {c.get('template') or '-'}   deadline source: {self.deadline_source}")
        for p in self.phases:
            mark = {"done": "x", "current": ">", "pending": " "}[p.status]
            lines.append(f" [{mark}] {p.name:<12} {p.spent_min:7.1f} / {p.allocated_min:6.1f} min   gate {p.gate}")
        lines += [f"next: {a}" for a in self.next_actions]
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def _guess_template(ctx: Context, base_model: str) -> str | None:
    folder = ctx.workdir / "templates"
    if not folder.is_dir():
        return None
    found = sorted(folder.glob("*.jinja"))
    low = base_model.lower()
    for fam in _FAMILIES:
        if fam in low:
            match = [p for p in found if fam in p.stem.lower() and "tool" not in p.stem.lower()]
            if match:
                return str(match[0].relative_to(ctx.workdir))
    return str(found[0].relative_to(ctx.workdir)) if len(found) == 1 else None


def _protected_digests(ctx: Context) -> dict[str, str]:
    out = {}
    for name in PROTECTED:
        p = ctx.workdir / name
        files = [p] if p.is_file() else sorted(q for q in p.rglob("*") if q.is_file()) if p.is_dir() else []
        for f in files[:500]:
            out[str(f.relative_to(ctx.workdir))] = manifest.file_hash(f)
    return out


def _check_fields(ctx: Context, card: dict) -> list[str]:
    warnings = []
    cmd = card.get("eval_command")
    if cmd and "{model_path}" not in cmd:
        raise ACIError("eval_command must contain the {model_path} placeholder (and ideally {limit} and {output})")
    if cmd and "{output}" not in cmd and not card.get("metric_key"):
        warnings.append("eval_command has no {output} placeholder: its metrics JSON cannot be read")
    if card.get("template"):
        ctx.path(card["template"], must_exist=True, what="template")
    if card.get("deadline"):
        try:
            card["deadline"] = parse_ts(card["deadline"]).isoformat()
        except ValueError:
            raise ACIError(f"deadline {card['deadline']!r} is not an ISO date-time") from None
    return warnings


@tool("plan", title="Run card and phase plan", idempotent=False)
def plan(inp: PlanInput, ctx: Context) -> PlanOutput:
    """Create (init), read (show) or change (update) the run card: base model, benchmark, eval command,
    template, budget and deadline (read from timer.sh when present). Returns the phase plan with time
    allocated and spent, the gates passed, and the next actions."""
    fields = inp.model_dump(exclude={"action", "force"}, exclude_none=True)
    warnings: list[str] = []
    if inp.action == "init":
        if ctx.card and not inp.force:
            raise ACIError(f"a run card already exists in {ctx.state.root}; use action=update, or force=true to replace it")
        missing = [f for f in ("base_model", "benchmark") if f not in fields]
        if missing:
            raise ACIError(f"plan init needs {', '.join('--' + m.replace('_', '-') for m in missing)}")
        from aci import rules as rules_mod

        profile = fields.get("profile", "default")
        prof = rules_mod.load(profile).profile
        card = {"profile": profile, "budget_hours": prof.budget_hours, "started_at": iso(), "workdir": str(ctx.workdir), **fields}
        if "template" not in card:
            guess = _guess_template(ctx, card["base_model"])
            if guess:
                card["template"] = guess
        remaining = read_timer(ctx.workdir)
        if remaining is not None:
            card["deadline"] = (now() + remaining).isoformat(timespec="seconds")
            if not inp.budget_hours:
                card["budget_hours"] = round(remaining.total_seconds() / 3600, 3)
        card["protected"] = _protected_digests(ctx)
        warnings += _check_fields(ctx, card)
        model = records.RunCard.model_validate(card)
        with ctx.state.event("plan", f"run card: {card['base_model']} on {card['benchmark']}", tool="plan") as w:
            w.write_json(records.RUN_CARD, model.model_dump(mode="json", exclude_none=True))
    elif inp.action == "update":
        card = dict(ctx.require_card())
        if not fields:
            raise ACIError("plan update needs at least one field to change")
        if "profile" in fields and fields["profile"] != card.get("profile"):
            raise ACIError("the rules profile is fixed at init; re-init with force=true to change it")
        card.update({k: (v if k != "targets" else [t for t in v]) for k, v in fields.items()})
        warnings += _check_fields(ctx, card)
        model = records.RunCard.model_validate(card)
        with ctx.state.event("plan", f"run card updated: {', '.join(sorted(fields))}", tool="plan") as w:
            w.write_json(records.RUN_CARD, model.model_dump(mode="json", exclude_none=True))
    ctx.forget()
    if not ctx.card:
        return PlanOutput(deadline_source=ctx.clock.source, next_actions=next_actions(ctx))
    gate_map = gates(ctx)
    phase_list = phases(ctx, gate_map)
    return PlanOutput(
        card=ctx.card, deadline_source=ctx.clock.source, phases=phase_list, gates=list(gate_map.values()),
        next_actions=next_actions(ctx, phase_list), warnings=warnings,
    )
