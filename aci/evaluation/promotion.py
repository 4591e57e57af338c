"""Promotion: the keep-best decision, then the atomic replacement of `final_model/` and `best.json`.

A checkpoint becomes `final_model` only when
* it is derived from the base model (its parent chain reaches `base`), has the base model's architecture
  and the content it was registered with (rule `base-model-only`, see `identity`), and
* it beats the current best (or, before any promotion, the base model) on a comparable evaluation:
  same evaluator and limit, enough samples, and a decided comparison (`stats.compare`; rule `keep-best`).
Two exceptions: before anything was promoted, the base model itself may be promoted as a floor, so that
a loadable `final_model` exists from the start; and over a base model that scored 0 on enough samples,
any score above 0 beats it. A test needs three or more items right out of 400 to call 0 beaten, and a
run whose base answers nothing would otherwise end on the untrained floor with a model that learned
something waiting behind it; nothing can score below 0, so the trained one cannot be the worse bet.

The folder is built and swapped by `swap.install` under the promotion lock; `best.json` and a
`promote` journal event are written after the swap. The folder's marker holds the same `Best` record,
so a crash between the swap and the state write is repaired by `sync()` (run before every promotion and
by `finalize`): state follows the folder, never the other way round.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

from pydantic import BaseModel, Field

from aci import disk, records
from aci.context import Context
from aci.errors import ACIError
from aci.evaluation import checkpoints, folder, identity, runner, stats, swap
from aci.evaluation.checkpoints import BASE, Checkpoint
from aci.state import iso


class Promotion(BaseModel):
    checkpoint: str
    promoted: bool
    path: str
    reference: str | None = Field(None, description="the checkpoint it had to beat")
    comparison: stats.Comparison | None = None
    best: dict | None = None
    files: dict[str, str] = Field(default_factory=dict, description="every file written into final_model, with "
                                                                   "where it came from")
    notes: list[str] = Field(default_factory=list)


def sync(ctx: Context) -> list[str]:
    """Repair an interrupted swap and make `best.json` match the folder now in `final_model/`.

    Call with the promotion lock held.
    """
    notes = swap.recover(ctx.workdir)
    m = swap.marker(swap.final_dir(ctx.workdir))
    ctx.forget()
    best = ctx.best
    if m and m.get("best") and (not best or best.promotion_id != m.get("promotion_id")):
        with ctx.state.event("promote", f"best.json repaired to match final_model ({m['checkpoint']})",
                             tool="eval-checkpoint",
                             data={"checkpoint": m["checkpoint"], "promotion_id": m.get("promotion_id")}) as w:
            w.write_json(records.BEST, m["best"])
        notes.append(f"best.json now names {m['checkpoint']}, the model in {swap.FINAL} (a promotion was interrupted)")
        ctx.forget()
    return notes


def _refuse(ctx: Context, rule: str, detail: str) -> ACIError:
    return ctx.rules.refuse(rule, detail)


def _check_architecture(ctx: Context, ck: Checkpoint) -> None:
    if ck.adapter or ck.local is None or ck.id == BASE:
        return
    identity.same_architecture(ctx, ck.id, ck.local, checkpoints.base(ctx).local, "the base model")


def _no_pair_message(ctx: Context, ck: str, ref: str) -> str:
    def keys(cid):
        found = {checkpoints.key(e) for e in checkpoints.evaluations(ctx, cid)}
        return ", ".join(f"{ev} limit {lim}" for ev, lim in sorted(found, key=str)) or "none"

    return (f"{ck} and {ref} have no evaluation with the same evaluator and limit ({ck}: {keys(ck)}; "
            f"{ref}: {keys(ref)}); evaluate both the same way, e.g. aci eval-checkpoint evaluate "
            f"--checkpoint {ref} with the evaluator and --limit used for {ck}")


ZERO_FLOOR = ("the base model scored 0: an item right is one the base could not get, so it beats the base "
              "(evaluate more items to show by how much)")


def comparison(ctx: Context, a: str, b: str, prefer: dict | None = None) -> tuple[dict, stats.Comparison] | None:
    """`a`'s evaluation and its comparison with `b`'s latest comparable one (over a base that scored 0, any
    score above it wins: see the module docstring); None when there is none."""
    pair = checkpoints.comparable_pair(ctx, a, b, prefer)
    if pair is None:
        return None
    ea, eb = pair
    cmp = stats.compare(a, ea, runner.per_sample(ctx, ea), b, eb, runner.per_sample(ctx, eb),
                        checkpoints.min_samples(ctx))
    if b == BASE and cmp.decided and not cmp.beats and cmp.b_score == 0 < cmp.a_score:
        p = f", one-sided p = {cmp.p_value:.3g}" if cmp.p_value is not None else ""
        cmp = cmp.model_copy(update={"beats": True, "reason": f"{cmp.a_score:.4g} on {cmp.a_samples} vs 0 on "
                                                              f"{cmp.b_samples} ({cmp.method}{p}): {ZERO_FLOOR}"})
    return ea, cmp


def to_beat(ctx: Context) -> str:
    """The checkpoint a new one is compared with and must beat to be promoted: the current best, else base."""
    return ctx.best.checkpoint if ctx.best else BASE


def compare(ctx: Context, checkpoint: str, against: str | None = None) -> stats.Comparison:
    """`checkpoint`'s latest evaluation against `against`'s (default: `to_beat`) with the same evaluator and
    limit; a clear error when they are one checkpoint or have no such pair."""
    a = checkpoints.resolve(ctx, checkpoint).id
    b = checkpoints.resolve(ctx, against).id if against else to_beat(ctx)
    if a == b:
        raise ACIError(f"compare needs two different checkpoints (both are {a}); pass --against")
    found = comparison(ctx, a, b)
    if found is None:
        raise no_pair_error(ctx, a, b)
    return found[1]


def against_best(ctx: Context, checkpoint: str, entry: dict) -> tuple[stats.Comparison | None, str | None]:
    """A fresh evaluation `entry` of `checkpoint` compared with the one to beat on that very evaluation's
    evaluator and limit; else why it cannot be (None, None for the one to beat itself)."""
    ref = to_beat(ctx)
    if checkpoint == ref:
        return None, None
    found = comparison(ctx, checkpoint, ref, prefer=entry)
    if found and checkpoints.key(found[0]) == checkpoints.key(entry):
        return found[1], None
    return None, (f"{ref} has no evaluation comparable with this one (same evaluator and limit): "
                  f"evaluate it the same way before comparing or promoting")


def promote_if_better(ctx: Context, checkpoint: str, entry: dict, set_template: bool = False) -> Promotion:
    """`promote` on the evaluation just made, a refusal kept as the promotion's note instead of raised."""
    try:
        return promote(ctx, checkpoint, prefer=entry, set_template=set_template)
    except ACIError as e:
        return Promotion(checkpoint=checkpoint, promoted=False, path=str(ctx.workdir / "final_model"),
                         reference=to_beat(ctx), notes=[str(e)])


def no_pair_error(ctx: Context, a: str, b: str, rule: str | None = None) -> ACIError:
    msg = _no_pair_message(ctx, a, b)
    return _refuse(ctx, rule, msg) if rule else ACIError(msg)


def decide(ctx: Context, ck: Checkpoint, reference: str, prefer: dict | None = None) -> tuple[dict, stats.Comparison]:
    """The evaluation that justifies promoting `ck` over `reference`, or a refusal naming the rule."""
    found = comparison(ctx, ck.id, reference, prefer)
    if found is None:
        raise no_pair_error(ctx, ck.id, reference, "keep-best")
    a, cmp = found
    if not cmp.decided and cmp.method == "none" and "min-eval-samples" in cmp.reason:
        raise _refuse(ctx, "min-eval-samples", cmp.reason)
    if not cmp.beats:
        raise _refuse(ctx, "keep-best", f"{ck.id} ({cmp.a_score:.4g}) does not beat {reference} ({cmp.b_score:.4g}) "
                      f"on {cmp.evaluator} limit {cmp.limit}: {cmp.reason}")
    return a, cmp


def install(ctx: Context, ck: Checkpoint, evaluation: dict, comparison: stats.Comparison | None,
            reference: str | None, set_template: bool = False) -> Promotion:
    """Build `ck` into `final_model/` atomically and record it (no decision: call with the lock held)."""
    tag = f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', ck.id)[:40]}-{uuid.uuid4().hex[:6]}"
    final = swap.final_dir(ctx.workdir)
    best = records.Best(
        checkpoint=ck.id, path=str(final), source=ck.path, score=evaluation["score"], range=evaluation.get("range"),
        evaluator=evaluation["evaluator"], limit=evaluation.get("limit"), samples=evaluation.get("samples"),
        promoted_at=iso(), promotion_id=tag, eval_id=evaluation.get("eval_id"),
    ).model_dump(mode="json")
    if comparison is not None:
        best["beat"] = {"checkpoint": reference, "score": comparison.b_score, "method": comparison.method,
                        "delta": comparison.delta, "p_value": comparison.p_value}
    size = folder.weights_bytes(checkpoints.base(ctx).local if ck.adapter else ck.local) if ck.local else 0
    disk.require_free(ctx.workdir, size, f"promoting {ck.id} (the new {swap.FINAL} is built beside the old one)")

    def build(out):
        if ck.root:  # a link added since registration would be copied as what it points to
            ctx.check_links(Path(ck.root), "checkpoint")
        info = runner.prepare(ctx, ck, out, link=False, set_template=set_template)
        ck.verify(ctx)  # what was copied is what was registered and evaluated
        return info

    marker, notes = swap.install(ctx.workdir, tag, build,
                                 {"promotion_id": tag, "checkpoint": ck.id, "source": ck.path, "best": best})
    how = f" over {reference} ({comparison.reason})" if comparison is not None else " as the first final_model"
    with ctx.state.event("promote", f"promoted {ck.id} ({best['score']:.4g}) to {swap.FINAL}{how}",
                         tool="eval-checkpoint", data={"checkpoint": ck.id, "promotion_id": tag,
                                                       "eot": marker.get("eot")}) as w:
        if ck.new:
            w.append(records.CHECKPOINTS, ck.registration())
            ck.new = False
        w.write_json(records.BEST, best)
    ctx.forget()
    notes.append(f"end-of-turn token {marker.get('eot')} (id {marker.get('eot_id')}) is in generation_config.json eos_token_id")
    if ck.sampling is not None:
        notes.append(f"generation_config.json holds the sampling settings {ck.id.rpartition('@')[2]}: vLLM decodes "
                     f"final_model with them")
    if "differs from the run card template" in (marker.get("origin") or {}).get("template", ""):
        notes.append(f"kept {ck.id}'s own chat template, which differs from the run card's template: an evaluation "
                     f"that renders with the tokenizer's template sees the checkpoint's; --set-template writes the "
                     f"run card's instead")
    files = {**marker.get("written", {}), swap.MARKER: "written: the promotion record (sha256 of every file)"}
    return Promotion(checkpoint=ck.id, promoted=True, path=str(final), reference=reference, comparison=comparison,
                     best=best, files=files, notes=notes)


def promote(ctx: Context, ref: str, *, parent: str | None = None, prefer: dict | None = None,
            set_template: bool = False) -> Promotion:
    """Promote checkpoint `ref` if the rules allow it (see the module docstring); refuse otherwise."""
    with swap.locked(ctx.state.root):
        notes = sync(ctx)
        ck = checkpoints.resolve(ctx, ref, parent)
        best = ctx.best
        final = swap.final_dir(ctx.workdir)
        in_place = bool(best) and (swap.marker(final) or {}).get("promotion_id") == best.promotion_id
        if best and ck.id == best.checkpoint and in_place:
            raise ACIError(f"{ck.id} is already final_model (promoted {iso(best.promoted_at)})")
        if not checkpoints.derived_from_base(ctx, ck):
            chain = " -> ".join(checkpoints.ancestry(ctx, ck))
            raise _refuse(ctx, "base-model-only", f"{ck.id} is not derived from the base model (parent chain: {chain}; "
                          f"register a path with --parent <the checkpoint it was trained from>)")
        _check_architecture(ctx, ck)
        reference = to_beat(ctx)
        if ck.id == reference:  # the floor (base before any promotion) or re-installing a lost best
            mine = checkpoints.evaluations(ctx, ck.id)
            if not mine:
                raise ACIError(f"evaluate {ck.id} before promoting it: aci eval-checkpoint evaluate --checkpoint {ck.id}")
            result = install(ctx, ck, prefer or mine[-1], None, None, set_template)
        else:
            evaluation, cmp = decide(ctx, ck, reference, prefer)
            result = install(ctx, ck, evaluation, cmp, reference, set_template)
        result.notes = notes + result.notes
        return result
