"""What the run aims at now: the lowest target not met yet, else a stretch goal. Meeting a target never ends
a run.

PostTrainBench's largest loss is agents that stop after 2-3 of their 10 hours. A run card target (the
official instruct model's score, say) is a milestone, not a finish line: once the promoted model meets
it, the goal becomes the next target the benchmark card recorded (`aci log-state append --kind
benchmark-card --data '{"targets": [{"value": 0.92, "note": "..."}]}'`), else the best score plus the
profile's `stretch_margin`. A best score at the top of the scale (1.0) has no stretch above it: the goal
is then to confirm it where that is not done yet (on every item; with more trials unless decoding is
greedy, whose trials are identical), and once it is, what remains worth doing (rules.yaml
`top_of_scale`). Derived from state on every call, like everything in `aci.progress`.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from aci.context import Context

BENCHMARK_CARD = "benchmark-card"  # journal kind that closes recon


class Goal(BaseModel):
    value: float | None = Field(None, description="the score aimed at now; none when there is nothing above the best")
    source: str = Field(description="run card target, benchmark card, best + margin, top of the scale, or none")
    met: list[float] = Field(default_factory=list, description="targets the promoted model has met")
    stretch: bool = Field(False, description="every target is met: this goal is beyond them")
    text: str = Field(description="the goal in plain words")


def benchmark_card(ctx: Context) -> dict:
    """What recon recorded: the `data` of every benchmark-card event, later keys winning."""
    out: dict = {}
    if ctx.card:
        for e in ctx.state.journal():
            if e.get("kind") == BENCHMARK_CARD and isinstance(e.get("data"), dict):
                out.update(e["data"])
    return out


def targets(ctx: Context) -> list[tuple[float, str]]:
    """(value, where it comes from) of every target, lowest first: the run card's, then the benchmark card's."""
    found = [(t.value, "run card target") for t in (ctx.card.targets if ctx.card else [])]
    for t in benchmark_card(ctx).get("targets") or []:
        if isinstance(t, dict) and isinstance(t.get("value"), (int, float)):
            found.append((float(t["value"]), "benchmark card" + (f": {t['note']}" if t.get("note") else "")))
    return sorted(set(found))


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def goal(ctx: Context) -> Goal:
    best = ctx.best.score if ctx.best else None
    all_targets = targets(ctx)
    met = [v for v, _ in all_targets if best is not None and best >= v]
    unmet = [(v, s) for v, s in all_targets if best is None or best < v]
    if unmet:
        value, source = unmet[0]
        stretch = bool(met)
        lead = f"target {_fmt(met[-1])} met; next goal" if met else "goal"
        return Goal(value=value, source=source, met=met, stretch=stretch,
                    text=f"{lead} {_fmt(value)} ({source}); best so far " + (_fmt(best) if best is not None else "none"))
    if best is None:
        return Goal(source="none", text="no target set and no model promoted yet: promote a first trained model, "
                                        "and set the instruct model's score as the target (aci plan update --targets)")
    lead = f"target {_fmt(met[-1])} met, so the run goes on" if met else "no target set"
    if best >= 1.0:
        missing = unconfirmed(ctx)
        rest = (' and '.join(missing) if missing else
                "confirmed on every item; what remains is to check that it holds beyond this data")
        return Goal(source="top of the scale", met=met, stretch=bool(met),
                    text=f"{lead}: final_model scores {_fmt(best)}, the top of the scale; {rest}, and keep the "
                         f"best model safe")
    margin = ctx.rules.profile.stretch_margin
    value = min(best + margin, 1.0) if best <= 1.0 else best * (1 + margin)
    how = f"best {_fmt(best)} + {margin:g}" if value < 1.0 else f"the top of the scale; best {_fmt(best)}"
    return Goal(value=round(value, 6), source=f"best + {margin:g}", met=met, stretch=True,
                text=f"{lead}: next goal {_fmt(value)} ({how})")


def unconfirmed(ctx: Context) -> list[str]:
    """What the best model's evaluations have not shown yet, in words: a score on every item (the limit -1,
    or the benchmark's size), and, unless decoding is greedy (trials then are identical: two that scored
    the same show it, as do `@greedy` settings or the benchmark card's `decoding`), several trials."""
    from aci import records

    best = ctx.best
    if best is None:
        return []
    mine = [e for e in ctx.state.lines(records.CHECKPOINTS) if e.get("type") == "evaluated" and not e.get("error")
            and e.get("checkpoint") == best.checkpoint and e.get("score") is not None]
    size = ctx.card.benchmark_size if ctx.card else None
    every = any(e.get("limit") == -1 or size and (e.get("samples") or 0) >= size for e in mine)
    trials = [e["scores"] for e in mine if len(e.get("scores") or []) > 1]
    greedy = best.checkpoint.endswith("@greedy") or benchmark_card(ctx).get("decoding") == "greedy" or \
        any(len(set(s)) == 1 for s in trials)
    out = []
    if not every:
        out.append(f"evaluate it on every item (aci eval-checkpoint evaluate --checkpoint {best.checkpoint} "
                   f"--limit -1)")
    if not greedy and not trials:
        out.append(f"{'' if out else 'evaluate it '}with --trials 3 if its decoding samples (greedy trials are "
                   f"identical)")
    return out
