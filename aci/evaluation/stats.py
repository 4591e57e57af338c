"""Trials to a score and a range, and the decision whether one evaluation beats another.

Single numbers mislead: 90 % and 74 % over two trials are not "82 %", and 0.53 against 0.50 on 150
samples is noise. A comparison therefore states its method and is only `decided` when it can be:

* **ranges** (both sides ran >= 2 trials that differ): A beats B when A's lowest trial is above B's
  highest; overlapping ranges mean the difference is not shown. Trials that all scored the same (a
  greedy, deterministic evaluator) carry no spread, and two such ranges a single item apart would
  "decide" on noise, so then the tests below decide instead.
* **paired bootstrap** (per-sample scores on the same items, e.g. a dev set or an lm-eval task):
  A beats B when the one-sided 95 % lower bound of the mean per-item difference is above 0.
* **two-proportion z-test** (scores are proportions in [0, 1] and sample counts are known, e.g.
  `evaluate.py` accuracies): A beats B at one-sided p < 0.05.

Evaluations with fewer samples than the rules' minimum, or whose sample count is unknown (the evaluator
reported none: a limit asked for is not a count), are never decided (rule `min-eval-samples`).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from pydantic import BaseModel, Field

ALPHA = 0.05
BOOTSTRAP_ITERS = 2000


@dataclass
class Trial:
    """One pass over the evaluation set with one seed."""

    seed: int
    score: float
    samples: int | None
    per_sample: dict[str, float] | None = None
    details: dict = field(default_factory=dict)


def aggregate(trials: list[Trial]) -> tuple[float, tuple[float, float]]:
    scores = [t.score for t in trials]
    return sum(scores) / len(scores), (min(scores), max(scores))


def mean_per_sample(trials: list[Trial]) -> dict[str, float] | None:
    """Each item's score averaged over the trials that scored it (None when a trial has no per-sample data)."""
    if not trials or any(t.per_sample is None for t in trials):
        return None
    total: dict[str, list[float]] = {}
    for t in trials:
        for k, v in (t.per_sample or {}).items():
            total.setdefault(k, []).append(v)
    return {k: sum(v) / len(v) for k, v in total.items()}


class Comparison(BaseModel):
    """Whether checkpoint `a` beats `b` on one comparable evaluation (same evaluator and limit)."""

    a: str
    b: str
    evaluator: str
    limit: int | None = None
    a_score: float
    b_score: float
    a_range: tuple[float, float] | None = None
    b_range: tuple[float, float] | None = None
    a_samples: int | None = None
    b_samples: int | None = None
    delta: float = Field(description="a_score - b_score")
    ci: tuple[float, float] | None = Field(None, description="95 % interval of the difference, when the method gives one")
    method: str = Field(description="ranges, paired bootstrap, two-proportion z-test, or none")
    p_value: float | None = Field(None, description="one-sided, for the tests that give one")
    decided: bool = Field(description="false when the evaluations cannot support a decision")
    beats: bool = Field(description="a is shown to be better than b")
    reason: str
    a_eval: str | None = None
    b_eval: str | None = None


def _phi(z: float) -> float:
    return 0.5 * (1 + math.erf(z / math.sqrt(2)))


def z_test(p1: float, n1: int, p2: float, n2: int) -> tuple[float, tuple[float, float]] | None:
    """One-sided p-value that proportion 1 exceeds proportion 2, and the 95 % interval of p1 - p2."""
    pooled = (p1 * n1 + p2 * n2) / (n1 + n2)
    var = pooled * (1 - pooled) * (1 / n1 + 1 / n2)
    if var <= 0:
        return None
    p = 1 - _phi((p1 - p2) / math.sqrt(var))
    se = math.sqrt(p1 * (1 - p1) / n1 + p2 * (1 - p2) / n2)
    return p, (p1 - p2 - 1.96 * se, p1 - p2 + 1.96 * se)


def paired_bootstrap(diffs: list[float], iters: int = BOOTSTRAP_ITERS, seed: int = 0) -> tuple[float, tuple[float, float], float]:
    """Bootstrap the mean of per-item differences: (one-sided p of mean <= 0, 95 % interval, 5 % lower bound)."""
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(rng.choices(diffs, k=n)) / n for _ in range(iters))
    p = sum(1 for m in means if m <= 0) / iters
    return p, (means[int(0.025 * iters)], means[int(0.975 * iters) - 1]), means[int(ALPHA * iters)]


def compare(a_id: str, a: dict, a_samples: dict[str, float] | None, b_id: str, b: dict,
            b_samples: dict[str, float] | None, minimum: int) -> Comparison:
    """Compare two `evaluated` entries of the same evaluator and limit (see the module docstring)."""
    base = dict(
        a=a_id, b=b_id, evaluator=a["evaluator"], limit=a.get("limit"), a_score=a["score"], b_score=b["score"],
        a_range=a.get("range"), b_range=b.get("range"), a_samples=a.get("samples"), b_samples=b.get("samples"),
        delta=a["score"] - b["score"], a_eval=a.get("eval_id"), b_eval=b.get("eval_id"),
    )
    counts = ((a_id, a.get("samples")), (b_id, b.get("samples")))
    unknown = [cid for cid, n in counts if n is None]
    if unknown:
        return Comparison(**base, method="none", decided=False, beats=False,
                          reason=f"the sample count of {' and '.join(unknown)} is unknown (the evaluator reported "
                                 f"none; rule min-eval-samples): evaluate both with a command that reports the count "
                                 f"it scored, on {minimum} or more samples")
    short = [f"{cid} has {n}" for cid, n in counts if n < minimum]
    if short:
        return Comparison(**base, method="none", decided=False, beats=False,
                          reason=f"too few samples to compare ({', '.join(short)}; the minimum is {minimum}, "
                                 f"rule min-eval-samples): evaluate both with --limit {minimum} or more")
    ka, kb = len(a.get("scores") or []), len(b.get("scores") or [])
    if ka >= 2 and kb >= 2 and _spread(a["range"]) and _spread(b["range"]):
        lo_a, hi_b = a["range"][0], b["range"][1]
        beats = lo_a > hi_b
        worse = a["range"][1] < b["range"][0]
        why = (f"{a_id}'s lowest trial {lo_a:.4g} is above {b_id}'s highest {hi_b:.4g}" if beats else
               f"{a_id}'s highest trial {a['range'][1]:.4g} is below {b_id}'s lowest {b['range'][0]:.4g}" if worse else
               f"the trial ranges overlap ({_fmt(a['range'])} vs {_fmt(b['range'])}): the difference is not shown")
        return Comparison(**base, method="ranges", decided=True, beats=beats, reason=why)
    if a_samples and b_samples:
        common = sorted(set(a_samples) & set(b_samples))
        if len(common) >= max(minimum, 2):
            diffs = [a_samples[k] - b_samples[k] for k in common]
            p, ci, lower = paired_bootstrap(diffs)
            beats = lower > 0
            why = (f"paired bootstrap over {len(common)} items: mean difference {sum(diffs) / len(diffs):+.4g}, "
                   f"95 % interval {_fmt(ci)}, one-sided p = {p:.3g}")
            return Comparison(**{**base, "ci": ci}, method="paired bootstrap", p_value=p, decided=True, beats=beats,
                              reason=why + ("" if beats else ": the improvement is not shown"))
    na, nb = a.get("samples"), b.get("samples")
    if na and nb and all(0 <= s <= 1 for s in (a["score"], b["score"])):
        test = z_test(a["score"], na, b["score"], nb)
        if test is None:
            return Comparison(**base, method="two-proportion z-test", decided=True, beats=False,
                              reason=f"both scores are {a['score']:.4g}: no difference")
        p, ci = test
        beats = p < ALPHA
        return Comparison(**{**base, "ci": ci}, method="two-proportion z-test", p_value=p, decided=True, beats=beats,
                          reason=f"{a['score']:.4g} on {na} vs {b['score']:.4g} on {nb}: one-sided p = {p:.3g}"
                                 + ("" if beats else f" (needs < {ALPHA}): the improvement is not shown"))
    return Comparison(**base, method="none", decided=False, beats=False,
                      reason="no test applies (scores outside [0, 1] and no per-sample scores): "
                             "run --trials 2 or more on both so their ranges can be compared")


def _spread(r) -> bool:
    return r[1] - r[0] > 1e-12


def _fmt(r) -> str:
    return f"{r[0]:.4g}..{r[1]:.4g}"
