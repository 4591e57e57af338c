"""Checkpoint ids, where their files are, where they came from, and what their evaluations say.

Ids: `base` is the run card's base model; a training job registers each checkpoint it saves as
`{"type": "registered", "checkpoint": "<job>/checkpoint-<step>", "path", "parent", "adapter",
"content_hash", "files"}` in `checkpoints.jsonl`. A folder inside the allowed roots can be named by
path; it is registered on first use (its parent given, or read from a LoRA adapter's
`base_model_name_or_path` when that is the base model). "Derived from the base model" (rule
`base-model-only`) means the `parent` chain reaches `base`; under a strict profile a registration with a
parent must show evidence for it (`identity.provenance`). Every registration pins its folder's content
(`identity.pin`), and resolving a registered checkpoint verifies it, so evaluation, training and
promotion refuse a folder that changed since.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from aci import records, sampling
from aci.context import Context
from aci.errors import ACIError
from aci.evaluation import folder, identity
from aci.state import iso

BASE = "base"


@dataclass
class Checkpoint:
    id: str
    path: str  # a local folder, or (base only) a hub id when no local copy exists
    parent: str | None
    adapter: bool
    new: bool = False  # not yet registered: the caller writes `registration()` with its event
    pin: dict | None = None  # `identity.pin` of `root` at registration (None: base, or registered unpinned)
    root: str | None = None  # the registered folder (`path` may be its merged/ copy)
    evidence: str | None = None  # why a new registration is believed to descend from its parent
    sampling: dict | None = None  # `<id>@<settings>`: written into generation_config.json (aci.sampling)

    @property
    def local(self) -> Path | None:
        p = Path(self.path)
        return p if p.is_dir() else None

    def registration(self) -> dict:
        entry = records.CheckpointEntry(type="registered", checkpoint=self.id, ts=iso(), path=self.path,
                                        parent=self.parent, adapter=self.adapter, **(self.pin or {}))
        keep = {"type", "checkpoint", "ts", "path", "parent", "adapter", "content_hash", "files"}
        return entry.model_dump(mode="json", include=keep, exclude_none=True) | (
            {"evidence": self.evidence} if self.evidence else {})

    def verify(self, ctx: Context) -> None:
        """Refuse the checkpoint when its folder no longer has the content it was registered with."""
        if self.pin and self.root:
            identity.verify(ctx, {"checkpoint": self.id, **self.pin}, Path(self.root))


def registered(ctx: Context) -> dict[str, dict]:
    """Registered checkpoints by id (a later registration of an id replaces an earlier one)."""
    return {e["checkpoint"]: e for e in ctx.state.lines(records.CHECKPOINTS) if e.get("type") == "registered"}


def base(ctx: Context) -> Checkpoint:
    card = ctx.require_card()
    local = folder.local_dir(card.base_model, ctx.workdir)
    return Checkpoint(BASE, str(local) if local else card.base_model, None, False)


def resolve(ctx: Context, ref: str, parent: str | None = None) -> Checkpoint:
    """The checkpoint named by an id or a folder path; a new path is registered with `parent`.

    `<ref>@<settings>` (e.g. `job/checkpoint-200@temperature=0.6,top_p=0.95`) is `<ref>` decoded with those
    sampling settings: its own id and evaluations, the same files, `<ref>` as its parent."""
    plain, settings = sampling.split(ref)
    if settings is not None:
        ck = resolve(ctx, plain, parent)
        if ck.sampling is not None:
            raise ACIError(f"{ref!r} names sampling settings twice")
        if ck.new:
            raise ACIError(f"register {plain!r} first (evaluate it once), then name its sampling variant")
        return Checkpoint(f"{ck.id}@{sampling.name(settings)}", ck.path, ck.id, ck.adapter, pin=ck.pin, root=ck.root,
                          sampling=settings)
    if ref == BASE:
        return base(ctx)
    known = registered(ctx)
    if ref in known:
        return _from_entry(ctx, known[ref])
    path = ctx.path(ref, what="checkpoint")
    if not path.exists():
        raise ACIError(f"{ref!r} is neither a checkpoint id (known: {', '.join([BASE, *list(known)[-8:]])}) "
                       f"nor an existing folder ({path})")
    if path == base(ctx).local:
        return base(ctx)
    for e in known.values():
        if any(e.get(k) and (ctx.workdir / e[k]).resolve() == path for k in ("path", "merged")):
            return _from_entry(ctx, e)
    if not path.is_dir() or not (folder.is_adapter(path) or (path / folder.CONFIG).is_file()):
        raise ACIError(f"{ref!r} is neither a checkpoint id ({', '.join([BASE, *known][:8])}) nor a model folder "
                       f"(a folder with config.json or adapter_config.json)")
    ctx.check_links(path, "checkpoint")  # promotion copies what a link points to
    if parent is not None and parent != BASE and parent not in known:
        raise ACIError(f"parent {parent!r} is not a known checkpoint id (known: {', '.join([BASE, *known][:8])})")
    evidence = None
    if ctx.rules.strict:
        parent, evidence = identity.provenance(ctx, path, parent, derived_folders(ctx))
        if parent is not None and not folder.is_adapter(path):
            reference = base(ctx).local if parent == BASE else resolve(ctx, parent).local
            identity.same_architecture(ctx, str(path.name), path, reference, f"its parent {parent}")
    elif parent is None and folder.is_adapter(path):
        declared = (folder.read_json(path / "adapter_config.json") or {}).get("base_model_name_or_path")
        card_base = ctx.require_card().base_model
        if declared and (declared == card_base or folder.local_dir(declared, ctx.workdir) == base(ctx).local):
            parent = BASE
    try:
        cid = str(path.relative_to(ctx.workdir))
    except ValueError:
        cid = str(path)
    return Checkpoint(cid, str(path), parent, folder.is_adapter(path), new=True, pin=identity.pin(path),
                      root=str(path), evidence=evidence)


def derived_folders(ctx: Context) -> dict[str, Path]:
    """Registered checkpoints derived from the base model, by id, with their folders."""
    known = registered(ctx)
    out = {}
    for cid, e in known.items():
        chain, cur = {cid}, e.get("parent")
        while cur not in (None, BASE) and cur not in chain:
            chain.add(cur)
            cur = known.get(cur, {}).get("parent")
        if cur == BASE and e.get("path"):
            out[cid] = (ctx.workdir / e["path"]).resolve()
    return out


def _from_entry(ctx: Context, e: dict) -> Checkpoint:
    """A registered checkpoint, its content verified against its pin (see `identity.verify`); a LoRA one the
    trainer also saved merged (`merged`) is used as that full model."""
    if not e.get("path"):
        raise ACIError(f"checkpoint {e['checkpoint']!r} is registered without a path")
    root = (ctx.workdir / e["path"]).resolve()
    pin = {k: e[k] for k in ("content_hash", "files") if k in e} or None
    identity.verify(ctx, e, root)
    merged = ctx.workdir / e["merged"] if e.get("merged") else None
    if merged is not None and (merged / folder.CONFIG).is_file():
        return Checkpoint(e["checkpoint"], str(merged.resolve()), e.get("parent"), False, pin=pin, root=str(root))
    return Checkpoint(e["checkpoint"], str(root), e.get("parent"), bool(e.get("adapter")), pin=pin, root=str(root))


def ancestry(ctx: Context, ck: Checkpoint) -> list[str]:
    """The ids from `ck` up its parent chain (ending at `base` when derived from the base model)."""
    known = registered(ctx)
    chain, cur = [ck.id], ck.parent
    while cur is not None and cur not in chain:
        chain.append(cur)
        if cur == BASE:
            break
        cur = known.get(cur, {}).get("parent")
    return chain


def derived_from_base(ctx: Context, ck: Checkpoint) -> bool:
    return ck.id == BASE or ancestry(ctx, ck)[-1] == BASE


def evaluations(ctx: Context, checkpoint: str | None = None) -> list[dict]:
    """Successful evaluations, oldest first (of one checkpoint when given)."""
    return [e for e in ctx.state.lines(records.CHECKPOINTS)
            if e.get("type") == "evaluated" and not e.get("error") and e.get("score") is not None
            and (checkpoint is None or e.get("checkpoint") == checkpoint)]


def describe(entry: dict) -> list[str]:
    """An evaluation as an agent reads it: score, spread, samples, trials, evaluator, limit, time, breakdown."""
    scores = entry.get("scores", [])
    rng = f" range {entry['range'][0]:.4g}..{entry['range'][1]:.4g}" if len(scores) > 1 else ""
    seeds = " (no seed reaches the command)" if entry.get("seeds_passed") is False and len(scores) > 1 else ""
    lines = [f"{entry['checkpoint']}: {entry['score']:.4g}{rng} on {entry.get('samples') or 'unknown'} samples, "
             f"{len(scores)} trial(s){seeds}, {entry['evaluator']} limit {entry.get('limit')} "
             f"({entry['duration_s']:.0f} s)"]
    if entry.get("beside"):
        lines.append(f"  beside {entry.get('metric')}: {json.dumps(entry['beside'], default=str)[:700]}")
    return lines


def listed(entry: dict) -> str:
    """One line of `eval-checkpoint list`: an evaluation or a failed one."""
    score = f"{entry['score']:.4g}" if entry.get("score") is not None else "FAILED"
    return (f"  {entry['ts']}  {entry['checkpoint']:<32} {score:>8}  n={entry.get('samples') or 'unknown'}  "
            f"{entry.get('evaluator')} limit {entry.get('limit')}" + (f"  {entry['error'][:80]}" if entry.get("error") else ""))


def key(entry: dict) -> tuple[str, int | None]:
    """What makes two evaluations comparable: the same evaluator and the same limit."""
    return entry.get("evaluator") or "", entry.get("limit")


def comparable_pair(ctx: Context, a: str, b: str, prefer: dict | None = None) -> tuple[dict, dict] | None:
    """The latest evaluations of `a` and `b` with the same evaluator and limit.

    `prefer` (an evaluation of `a`) is used when `b` has an evaluation comparable with it; otherwise
    `a`'s newest evaluation that `b` can be compared with.
    """
    ea, eb = evaluations(ctx, a), evaluations(ctx, b)
    latest_b: dict[tuple, dict] = {}
    for e in eb:
        latest_b[key(e)] = e
    order = ([prefer] if prefer else []) + list(reversed(ea))
    for e in order:
        if key(e) in latest_b:
            return e, latest_b[key(e)]
    return None


def min_samples(ctx: Context) -> int:
    """The rules' minimum sample count for a comparison (rule min-eval-samples)."""
    return ctx.rules.min_samples(ctx.card.benchmark_size if ctx.card else None)
