"""The run card (`run.json`, `records.RunCard`): what is post-trained, against what, until when.

`plan init` creates it (template guessed from `templates/`, deadline from `timer.sh`, the evaluation files
that `no-eval-edits` protects hashed), `plan update` changes fields; both validate the whole card and
write it as one event.
"""

from __future__ import annotations

import re
import shlex
from datetime import timedelta
from pathlib import Path

from pydantic import ValidationError

from aci import manifest, records
from aci import rules as rules_mod
from aci.clock import TIMER, card_deadline, fmt, parse_deadline, read_timer
from aci.contamination import shared
from aci.context import Context
from aci.errors import ACIError
from aci.progress import BASE_MODEL_CHANGE, DEADLINE_CHANGE, PROFILE_CHANGE
from aci.state import iso, now, parse_ts
from aci.training import gates as train_gates

FAMILIES = ("qwen", "llama", "gemma", "smollm", "mistral", "phi")


def init(ctx: Context, fields: dict, event_data: dict) -> list[str]:
    """Write a new run card from the given fields and what the working directory says; returns warnings."""
    missing = [f for f in ("base_model", "benchmark") if f not in fields]
    if missing:
        raise ACIError(f"plan init needs {', '.join('--' + m.replace('_', '-') for m in missing)}")
    profile = fields.get("profile", "default")
    rules = rules_mod.load(profile)
    card = {"profile": profile, "budget_hours": rules.profile.budget_hours, "started_at": iso(),
            "workdir": str(ctx.workdir), **fields}
    if "template" not in card:
        guess = guess_template(ctx, card["base_model"], card.get("eval_command"))
        if guess:
            card["template"] = guess
    warnings: list[str] = []
    remaining = timer_remaining(ctx, warnings)
    warnings += _set_deadline(card, fields, remaining)
    card["protected"] = protected_digests(ctx, rules.protected())
    provided = shared.beside(ctx.workdir, shared.ITEMS)  # the task's own test items, when it provides them
    if "reference" in card or provided:
        card["reference"] = train_gates.pin_reference(ctx, card.get("reference") or str(provided), None)
    warnings += check_fields(ctx, card)
    if provided and "reference" not in fields:
        warnings.append(f"pinned the task's provided test items {provided} as the contamination reference")
    message = f"run card: {card['base_model']} on {card['benchmark']}"
    change = profile_change(ctx, profile)
    if change:
        message += f" (rules profile {change['from']} -> {change['to']})"
        event_data = {**event_data, PROFILE_CHANGE: change}
        if change["weakened"]:
            warnings.append(f"the rules profile changed from {change['from']} to {change['to']} mid-run, which "
                            f"weakens them: {'; '.join(change['weakened'])}. The journal keeps this and status "
                            f"shows it for the rest of the run")
    switched = base_model_change(ctx, card["base_model"])
    if switched:
        message += f" (base model {switched['from']} -> {switched['to']})"
        event_data = {**event_data, BASE_MODEL_CHANGE: switched}
        warnings.append(f"the base model changed from {switched['from']!r} to {switched['to']!r} mid-run: "
                        f"{switched['weakened'][0]}. The journal keeps this and status shows it for the rest of "
                        f"the run")
    warnings += _write(ctx, card, message, event_data, timer_set=remaining is not None)
    return warnings


def timer_remaining(ctx: Context, warnings: list[str]) -> timedelta | None:
    """What timer.sh says is left (None without one); a failing timer is a warning here, not an error."""
    try:
        return read_timer(ctx.workdir)
    except ACIError as e:
        warnings.append(f"{e}: the deadline comes from --deadline or --budget-* instead (else the profile's "
                        f"budget), and every tool falls back to it while timer.sh fails")
        return None


def _set_deadline(card: dict, fields: dict, remaining: timedelta | None) -> list[str]:
    """The card's deadline and budget: timer.sh's when it answers; else the `--deadline` given, whose distance
    from now is the budget unless one was given too (a run that started earlier); else start plus budget."""
    warnings: list[str] = []
    if remaining is not None:
        if "deadline" in fields:
            warnings.append(f"timer.sh says {fmt(remaining)} left: it sets the deadline, not --deadline "
                            f"{fields['deadline']}")
        card["deadline"] = (now() + remaining).isoformat(timespec="seconds")
        if "budget_hours" not in fields:
            card["budget_hours"] = round(remaining.total_seconds() / 3600, 3)
    elif "deadline" in fields:
        deadline, note = parse_deadline(str(fields["deadline"]))
        left = deadline - now()
        if left.total_seconds() <= 0:
            raise ACIError(f"deadline {fields['deadline']!r} ({deadline.isoformat(timespec='seconds')}) has passed")
        card["deadline"] = deadline.isoformat(timespec="seconds")
        if "budget_hours" not in fields:
            card["budget_hours"] = round(left.total_seconds() / 3600, 4)
        warnings += [note] if note else []
    return warnings


def base_model_change(ctx: Context, base_model: str) -> dict | None:
    """`init --force` over a card with another base model: from, to, and what that weakens (a checkpoint is
    "derived from the base model" when its parent chain reaches `base`, whatever model `base` names now)."""
    old = ctx.card.base_model if ctx.card else None
    if not old or old == base_model:
        return None
    return {"from": old, "to": base_model, "weakened": [
        "checkpoints registered before now still count as derived from `base`, which names another model now, "
        "so rule base-model-only no longer tells them apart"]}


def profile_change(ctx: Context, profile: str) -> dict | None:
    """`init --force` over a card with another rules profile: from, to, and what the switch weakens (an
    agent once switched to `default` to get past a refusal and silently dropped the contamination gate)."""
    old = ctx.card.profile if ctx.card else None
    if not old or old == profile:
        return None
    weakened = rules_mod.load(old).profile.weakened_in(rules_mod.load(profile).profile)
    return {"from": old, "to": profile, "weakened": weakened}


def update(ctx: Context, fields: dict, event_data: dict) -> list[str]:
    """Change fields of the run card (never its profile or base model); returns warnings."""
    card = ctx.require_card().model_dump(mode="json", exclude_none=True)
    if not fields:
        raise ACIError("plan update needs at least one field to change")
    if "profile" in fields and fields["profile"] != card.get("profile"):
        raise ACIError("the rules profile is fixed at init; re-init with force=true to change it")
    if "base_model" in fields and fields["base_model"] != card.get("base_model"):
        raise ctx.rules.refuse("base-model-only", f"the base model is fixed at init ({card.get('base_model')!r}, "
                               f"given {fields['base_model']!r}): every checkpoint of the run is traced to it and "
                               f"promotion checks against it. If the card names the wrong model, `aci plan init "
                               f"--force` with every field replaces the card, and the journal keeps the switch as "
                               f"a weakening of the rules")
    if "reference" in fields:
        fields["reference"] = train_gates.pin_reference(ctx, fields["reference"], card.get("reference"))
    if "deadline" in fields and "budget_hours" not in fields:  # the budget follows a new deadline
        deadline, _ = parse_deadline(str(fields["deadline"]))
        if deadline <= now():
            raise ACIError(f"deadline {fields['deadline']!r} ({deadline.isoformat(timespec='seconds')}) has passed")
        started = parse_ts(card["started_at"])
        fields["budget_hours"] = round(max((deadline - started).total_seconds(), 60) / 3600, 4)
    card.update(fields)
    warnings = check_fields(ctx, card)
    warnings += _write(ctx, card, f"run card updated: {', '.join(sorted(fields))}", event_data)
    return warnings


def _write(ctx: Context, card: dict, message: str, event_data: dict, *, timer_set: bool = False) -> list[str]:
    """Validate and write the card as one plan event; returns warnings. `timer_set`: timer.sh gave this
    card its deadline (plan init), so no later deadline is the caller's doing."""
    try:
        model = records.RunCard.model_validate(card)
    except ValidationError as e:  # e.g. an empty --deadline, which check_fields has nothing to parse in
        err = e.errors()[0]
        raise ACIError(f"run card field {'.'.join(str(p) for p in err['loc'])}: {err['msg']} (given "
                       f"{err.get('input')!r})") from None
    change = None if timer_set else deadline_change(ctx, model)
    warnings = []
    if change:
        event_data = {**event_data, DEADLINE_CHANGE: change}
        warnings.append(f"the deadline moved later ({change['from']} -> {change['to']}) under the strict "
                        f"{ctx.card.profile} rules with no timer.sh to hold it: {change['weakened'][0]}. The "
                        f"journal keeps this as a weakening and status shows it for the rest of the run")
    with ctx.state.event("plan", message, tool="plan", data=event_data) as w:
        w.write_json(records.RUN_CARD, model.model_dump(mode="json", exclude_none=True))
    return warnings


def deadline_change(ctx: Context, card: records.RunCard) -> dict | None:
    """A strict run's card moving its deadline later (`plan update --budget-hours`, `--deadline`, `init
    --force`): refused while timer.sh exists (the harness's timer says how long the run has; the card's
    deadline is what every tool falls back to when the timer fails), else from, to and what it weakens,
    which the plan event journals. An earlier deadline, or a run under a profile that is not strict, is
    no change to report (None)."""
    old = ctx.card
    if old is None or not rules_mod.load(old.profile).strict:
        return None
    was, will = card_deadline(old), card_deadline(card)
    if will <= was:
        return None
    if (ctx.workdir / TIMER).is_file():
        raise ACIError(f"the deadline cannot move later under the strict {old.profile} rules while {TIMER} exists "
                       f"(from {iso(was)} to {iso(will)}, {fmt(will - was)} more): the harness's timer says how "
                       f"long the run has. An earlier --deadline or a smaller budget is accepted")
    return {"from": iso(was), "to": iso(will),
            "weakened": [f"the run gave itself {fmt(will - was)} more than its card allowed"]}


def eval_script(ctx: Context, eval_command: str | None) -> Path | None:
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


def guess_template(ctx: Context, base_model: str, eval_command: str | None) -> str | None:
    """The template the evaluation renders for this base model: the one its script names for the model's
    family, else the family's template in templates/ (not a tool-calling variant), else the only one."""
    folder = ctx.workdir / "templates"
    if not folder.is_dir():
        return None
    found = sorted(folder.glob("*.jinja"))
    low = base_model.lower()
    for fam in FAMILIES:
        if fam in low:
            named = _template_named_by(eval_script(ctx, eval_command), fam)
            if named and (folder / named).is_file():
                return str((folder / named).relative_to(ctx.workdir))
            match = [p for p in found if fam in p.stem.lower() and "tool" not in p.stem.lower()]
            if match:
                return str(match[0].relative_to(ctx.workdir))
    return str(found[0].relative_to(ctx.workdir)) if len(found) == 1 else None


def protected_digests(ctx: Context, protected: list[str]) -> dict[str, str]:
    """sha256 of every file under the protected paths, so a later edit can be named (rule no-eval-edits)."""
    out = {}
    for name in protected:
        p = ctx.workdir / name
        files = [p] if p.is_file() else sorted(q for q in p.rglob("*") if q.is_file()) if p.is_dir() else []
        for f in files[:500]:
            out[str(f.relative_to(ctx.workdir))] = manifest.file_hash(f)
    return out


def check_fields(ctx: Context, card: dict) -> list[str]:
    """Refuse an unusable eval command or template; normalise the deadline; warnings for what may work."""
    warnings = []
    cmd = card.get("eval_command")
    if cmd and "{model_path}" not in cmd:
        raise ACIError("eval_command must contain the {model_path} placeholder (and ideally {limit} and {output})")
    if cmd and "{output}" not in cmd:
        warnings.append("eval_command has no {output} placeholder: the score is read from the last JSON object the "
                        "command prints; if it writes its metrics to a file, name that option with --output-option")
    if card.get("template"):
        ctx.path(card["template"], must_exist=True, what="template")
    if card.get("grader"):
        from aci.graders import check_spec

        check_spec(card["grader"])
    if card.get("deadline"):
        deadline, note = parse_deadline(str(card["deadline"]))
        card["deadline"] = deadline.isoformat()
        warnings += [note] if note else []
    return warnings


def onto_existing(card: records.RunCard, fields: dict) -> tuple[dict, list[str]]:
    """`init` on a card that exists: the fields to apply as an update, and notes saying so. The profile
    and the base model stay as the card has them (they decide the rules and what may be trained)."""
    notes = []
    current = card.model_dump(mode="json")
    for key in ("profile", "base_model"):
        given = fields.pop(key, None)
        if given is not None and given != current.get(key):
            notes.append(f"kept the card's {key} {current.get(key)!r} (you gave {given!r}); if that is wrong, "
                         f"`aci plan init --force` with every field replaces the card")
    changed = {k: v for k, v in fields.items() if current.get(k) != v}
    notes.insert(0, f"a run card already existed (started {current.get('started_at')}): init applied "
                    f"{', '.join(sorted(changed)) or 'nothing new'} to it as an update")
    return changed, notes
