"""The run card (`run.json`, `records.RunCard`): what is post-trained, against what, until when.

`plan init` creates it (template guessed from `templates/`, deadline from `timer.sh`, the evaluation files
that `no-eval-edits` protects hashed), `plan update` changes fields; both validate the whole card and
write it as one event.
"""

from __future__ import annotations

from aci import manifest, records
from aci import rules as rules_mod
from aci.clock import read_timer
from aci.context import Context
from aci.errors import ACIError
from aci.state import iso, now, parse_ts

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
        guess = guess_template(ctx, card["base_model"])
        if guess:
            card["template"] = guess
    remaining = read_timer(ctx.workdir)
    if remaining is not None:
        card["deadline"] = (now() + remaining).isoformat(timespec="seconds")
        if "budget_hours" not in fields:
            card["budget_hours"] = round(remaining.total_seconds() / 3600, 3)
    card["protected"] = protected_digests(ctx, rules.protected())
    warnings = check_fields(ctx, card)
    _write(ctx, card, f"run card: {card['base_model']} on {card['benchmark']}", event_data)
    return warnings


def update(ctx: Context, fields: dict, event_data: dict) -> list[str]:
    """Change fields of the run card (never its profile); returns warnings."""
    card = ctx.require_card().model_dump(mode="json", exclude_none=True)
    if not fields:
        raise ACIError("plan update needs at least one field to change")
    if "profile" in fields and fields["profile"] != card.get("profile"):
        raise ACIError("the rules profile is fixed at init; re-init with force=true to change it")
    card.update(fields)
    warnings = check_fields(ctx, card)
    _write(ctx, card, f"run card updated: {', '.join(sorted(fields))}", event_data)
    return warnings


def _write(ctx: Context, card: dict, message: str, event_data: dict) -> None:
    model = records.RunCard.model_validate(card)
    with ctx.state.event("plan", message, tool="plan", data=event_data) as w:
        w.write_json(records.RUN_CARD, model.model_dump(mode="json", exclude_none=True))


def guess_template(ctx: Context, base_model: str) -> str | None:
    """The evaluation's template for this model family in `templates/`, or the only one there."""
    folder = ctx.workdir / "templates"
    if not folder.is_dir():
        return None
    found = sorted(folder.glob("*.jinja"))
    low = base_model.lower()
    for fam in FAMILIES:
        if fam in low:
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
