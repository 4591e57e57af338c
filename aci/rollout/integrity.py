"""Which endpoints and which policies a rollout may use under the rules profile in force.

* Host (`no-hosted-llm`): the endpoint's host must pass `ctx.rules.check_host` (loopback only under
  `posttrainbench`). Checked from the URL alone, before anything connects.
* Policy (`no-teacher-distillation`): under a `base-only` profile the policy must be the run card's base
  model or a registered checkpoint whose `parent` chain reaches `base` (or the promoted final_model of
  one). Every name the policy goes by is checked: the `--model` name sent in requests and, for vLLM,
  the `root` path that `/v1/models` reports it loaded, so a teacher served under the base model's name
  is still caught. Names match as given, as resolved paths (relative to the workdir), and for hub-cache
  paths (`.../models--Org--Name/snapshots/...`) as the hub id `Org/Name`, case-insensitively.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import urlsplit

from aci import records
from aci.context import Context
from aci.errors import ACIError

_HUB_CACHE = re.compile(r"models--([^/\\]+?)--([^/\\]+)")


def check_endpoint(ctx: Context, base_url: str) -> str:
    """The endpoint's host, or the `no-hosted-llm` refusal. Makes no connection."""
    from aci.rollout.endpoint import normal_base_url

    host = urlsplit(normal_base_url(base_url)).hostname
    if not host:
        raise ACIError(f"endpoint {base_url!r} has no host; e.g. http://127.0.0.1:8000/v1")
    ctx.rules.check_host(host)
    return host


def _keys(value: str, workdir: Path) -> set[str]:
    value = value.strip()
    keys = {value.lower(), value.rstrip("/\\").lower()}
    p = Path(value).expanduser()
    if p.is_absolute() or value.startswith(".") or os.path.exists(workdir / p):  # False for a name too long
        keys.add(str((p if p.is_absolute() else workdir / p).resolve()).lower())
    m = _HUB_CACHE.search(value)
    if m:
        keys.add(f"{m.group(1)}/{m.group(2)}".lower())
    return keys


def allowed_models(ctx: Context) -> dict[str, str]:
    """name/path key -> checkpoint id, for the base model and every checkpoint derived from it."""
    allowed = {k: "base" for k in _keys(ctx.require_card().base_model, ctx.workdir)}
    registered = {e["checkpoint"]: e for e in ctx.state.lines(records.CHECKPOINTS) if e.get("type") == "registered"}

    def derived(cid: str | None) -> bool:
        seen = set()
        while cid and cid != "base" and cid not in seen:
            seen.add(cid)
            cid = (registered.get(cid) or {}).get("parent")
        return cid == "base"

    for cid, entry in registered.items():
        if derived(cid):
            allowed[cid.lower()] = cid
            if entry.get("path"):
                allowed.update({k: cid for k in _keys(entry["path"], ctx.workdir)})
    best = ctx.best
    if best and (best.checkpoint == "base" or derived(best.checkpoint)):
        allowed.update({k: best.checkpoint for k in _keys(best.path, ctx.workdir)})
    return allowed


def check_policy(ctx: Context, names: list[str]) -> str | None:
    """The checkpoint id every name resolves to, or the `no-teacher-distillation` refusal.

    Returns None when the profile allows any teacher.
    """
    if ctx.rules.profile.teacher == "any":
        return None
    allowed = allowed_models(ctx)
    found = None
    for name in names:
        match = next((allowed[k] for k in _keys(name, ctx.workdir) if k in allowed), None)
        if match is None:
            base = ctx.card.base_model
            raise ctx.rules.refuse(
                "no-teacher-distillation",
                f"policy model {name!r} is neither the run card's base model {base!r} nor a checkpoint registered "
                f"in {records.CHECKPOINTS} whose parents lead to base; roll out with the base model or one of "
                f"its own checkpoints",
            )
        found = found or match
    return found
