"""`plan`: the run card (what, against what, until when) and the phase plan derived from state."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Literal

from pydantic import Field

from aci import manifest, records
from aci.clock import parse_deadline, read_timer
from aci.context import Context
from aci.errors import ACIError
from aci.evaluation.command import translate
from aci.progress import Gate, PhaseStatus, gates, next_actions, phases
from aci.registry import ToolInput, ToolOutput, tool
from aci.state import iso, now
from aci.training import gates as train_gates

_FAMILIES = ("qwen", "llama", "gemma", "smollm", "mistral", "phi")


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
    benchmark_size: int | None = Field(None, ge=1, description="items in the full benchmark (sets the minimum eval samples)")
    budget_hours: float | None = Field(None, gt=0, description="time budget (default from the rules profile)")
    deadline: str | None = Field(None, description="fixed ISO deadline; timer.sh wins when present")
    profile: Literal["posttrainbench", "default"] | None = Field(None, description="rules profile (init)")
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
            mark = {"done": "x", "current": ">", "pending": " "}[p.status]
            lines.append(f" [{mark}] {p.name:<12} {p.spent_min:7.1f} / {p.allocated_min:6.1f} min   gate {p.gate}")
        lines += [f"eval command as typed, changed: {t}" for t in self.translation]
        lines += [f"next: {a}" for a in self.next_actions]
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def _eval_script(ctx: Context, eval_command: str | None) -> Path | None:
    """The Python script the eval command runs (`evaluate.py` in the task folder by default)."""
    words = shlex.split(eval_command or "", posix=True) if eval_command else []
    named = [ctx.workdir / w for w in words if w.endswith(".py")]
    found = [p for p in [*named, ctx.workdir / "evaluate.py"] if p.is_file()]
    return found[0] if found else None


def _template_named_by(script: Path | None, family: str) -> str | None:
    """The .jinja file the evaluation script picks for `family`: the first file name quoted after the
    family's name with no other string between, as in PostTrainBench's `elif model_type_str == 'gemma':
    template = 'gemma3_tool_calling.jinja'` (BFCL; its other benchmarks pick `gemma3.jinja`)."""
    if script is None:
        return None
    text = script.read_text(encoding="utf-8", errors="replace")
    found = re.search(rf"""['"]{re.escape(family)}['"][^'"]{{0,80}}['"]([\w.-]+\.jinja)['"]""", text)
    return found.group(1) if found else None


def _guess_template(ctx: Context, base_model: str, eval_command: str | None) -> str | None:
    """The template the evaluation renders for this base model: the one its script names for the model's
    family, else the family's template in templates/ (not a tool-calling variant), else the only one."""
    folder = ctx.workdir / "templates"
    if not folder.is_dir():
        return None
    found = sorted(folder.glob("*.jinja"))
    low = base_model.lower()
    for fam in _FAMILIES:
        if fam in low:
            named = _template_named_by(_eval_script(ctx, eval_command), fam)
            if named and (folder / named).is_file():
                return str((folder / named).relative_to(ctx.workdir))
            match = [p for p in found if fam in p.stem.lower() and "tool" not in p.stem.lower()]
            if match:
                return str(match[0].relative_to(ctx.workdir))
    return str(found[0].relative_to(ctx.workdir)) if len(found) == 1 else None


def _protected_digests(ctx: Context, protected: list[str]) -> dict[str, str]:
    out = {}
    for name in protected:
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
        deadline, note = parse_deadline(str(card["deadline"]))
        card["deadline"] = deadline.isoformat()
        warnings += [note] if note else []
    return warnings


def _onto_existing_card(card: dict, fields: dict) -> tuple[dict, list[str]]:
    """`init` on a card that exists: the fields to apply as an update, and notes saying so. The profile
    and the base model stay as the card has them (they decide the rules and what may be trained)."""
    notes = []
    for key in ("profile", "base_model"):
        given = fields.pop(key, None)
        if given is not None and given != card.get(key):
            notes.append(f"kept the card's {key} {card.get(key)!r} (you gave {given!r}); if that is wrong, "
                         f"`aci plan init --force` with every field replaces the card")
    changed = {k: v for k, v in fields.items() if card.get(k) != v}
    notes.insert(0, f"a run card already existed (started {card.get('started_at')}): init applied "
                    f"{', '.join(sorted(changed)) or 'nothing new'} to it as an update")
    return changed, notes


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
        fields, notes = _onto_existing_card(ctx.card, fields)
        warnings += notes
        action = "update" if fields else "show"
    if action == "init":
        missing = [f for f in ("base_model", "benchmark") if f not in fields]
        if missing:
            raise ACIError(f"plan init needs {', '.join('--' + m.replace('_', '-') for m in missing)}")
        from aci import rules as rules_mod

        profile = fields.get("profile", "default")
        rules = rules_mod.load(profile)
        prof = rules.profile
        card = {"profile": profile, "budget_hours": prof.budget_hours, "started_at": iso(), "workdir": str(ctx.workdir), **fields}
        if "template" not in card:
            guess = _guess_template(ctx, card["base_model"], card.get("eval_command"))
            if guess:
                card["template"] = guess
        remaining = read_timer(ctx.workdir)
        if remaining is not None:
            card["deadline"] = (now() + remaining).isoformat(timespec="seconds")
            if not inp.budget_hours:
                card["budget_hours"] = round(remaining.total_seconds() / 3600, 3)
        card["protected"] = _protected_digests(ctx, rules.protected())
        if "reference" in card:
            card["reference"] = train_gates.pin_reference(ctx, card["reference"], None)
        warnings += _check_fields(ctx, card)
        model = records.RunCard.model_validate(card)
        with ctx.state.event("plan", f"run card: {card['base_model']} on {card['benchmark']}", tool="plan", data=typed) as w:
            w.write_json(records.RUN_CARD, model.model_dump(mode="json", exclude_none=True))
    elif action == "update":
        card = dict(ctx.require_card())
        if not fields:
            raise ACIError("plan update needs at least one field to change")
        if "profile" in fields and fields["profile"] != card.get("profile"):
            raise ACIError("the rules profile is fixed at init; re-init with force=true to change it")
        if "reference" in fields:
            fields["reference"] = train_gates.pin_reference(ctx, fields["reference"], card.get("reference"))
        card.update({k: (v if k != "targets" else [t for t in v]) for k, v in fields.items()})
        warnings += _check_fields(ctx, card)
        model = records.RunCard.model_validate(card)
        with ctx.state.event("plan", f"run card updated: {', '.join(sorted(fields))}", tool="plan", data=typed) as w:
            w.write_json(records.RUN_CARD, model.model_dump(mode="json", exclude_none=True))
    ctx.forget()
    if not ctx.card:
        return PlanOutput(deadline_source=ctx.clock.source, next_actions=next_actions(ctx))
    gate_map = gates(ctx)
    phase_list = phases(ctx, gate_map)
    return PlanOutput(
        card=ctx.card, deadline_source=ctx.clock.source, phases=phase_list, gates=list(gate_map.values()),
        next_actions=next_actions(ctx, phase_list), warnings=warnings, translation=typed.get("translation", []),
    )
