"""The judge's scan of one row: seeds, clusters, and the question, answer and passage scores.

Why apart: this is the judge's algorithm itself, the part a verdict must never be less strict than
(`tests/data/contamination_judge/` holds its tool's verdicts). Positions 0, 10, 20, ... are sampled; a
sampled question 5-gram that items hold seeds a cluster for all of them, grown left, then right, over
positions while fewer than 11 positions in a row bring an item nothing new; scanning resumes after the
cluster. Per item and cluster: question score = IDF share of the item's question n-grams matched. It
must reach q_min = (0.8 - 0.3) / 0.7 (what a perfect answer and passage could still lift to 0.8), and
1.0 for a question of <= 20 tokens, relaxed linearly to q_min at 50 tokens. The answer is sought after
the question cluster: a short answer as its exact tokens within 50 tokens, a longer one as the IDF
share of its 3-grams within max(2 x its length, 100) tokens. The passage is sought before the cluster,
within max(2 x its length, 100) tokens, walking backwards and stopping after 2 misses past the first
match. `JudgeScan` holds the scan; `aci.contamination.index.SimpleIndex` builds the tables it reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from itertools import islice

from aci.contamination.report import Match
from aci.contamination.rules import (
    A_N,
    EPS,
    JUDGE_THRESHOLD,
    MIN_ANSWER_WINDOW,
    MIN_PASSAGE_WINDOW,
    P_MAX_MISSES,
    P_N,
    Q_MAX_MISSES,
    Q_N,
    SHORT_ANSWER_WINDOW,
    ngrams,
    relaxed,
)
from aci.contamination.stricter import JUDGE, Code


@dataclass
class Item:
    """One indexed reference item: its fields' token counts and n-gram sets, and what it must reach."""

    ref: int
    q_len: int
    q_set: frozenset
    fields: tuple[str, ...]
    weights: dict[str, float]
    cum_len: int
    a_toks: list[int] | None = None
    a_set: frozenset = frozenset()
    a_short: bool = False
    p_len: int = 0
    p_set: frozenset = frozenset()
    q_total: float = 0.0
    a_total: float = 0.0
    p_total: float = 0.0
    q_floor: float = 1.0  # the question share below which the item cannot pass
    q_fewest: int = 0  # the fewest question n-grams that can reach q_floor


def _distinct(toks: list[int], n: int) -> set[tuple]:
    """The distinct n-grams of `toks`, without a list of them all first (a long row's would be its largest
    object)."""
    return set(zip(*(islice(toks, k, None) for k in range(n)), strict=False))


class RowView:
    """One row's tokens and the n-gram sets the checks need, each built on first use."""

    def __init__(self, toks: list[int]):
        self.toks = toks
        self.grams = ngrams(toks, Q_N)

    @cached_property
    def distinct(self) -> set[tuple]:
        return set(self.grams)

    @cached_property
    def distinct3(self) -> set[tuple]:
        return _distinct(self.toks, A_N)

    @cached_property
    def distinct4(self) -> set[tuple]:
        return _distinct(self.toks, P_N)

    def holds(self, seq: list[int]) -> bool:
        n, toks = len(seq), self.toks
        return any(toks[j:j + n] == seq for j in range(len(toks) - n + 1))


class JudgeScan:
    """The judge's scan over the indexed items. Reads the index's `items`, `q_post` (question n-gram ->
    items), `q_idf`, `a_idf`, `p_idf` and `threshold`, which `SimpleIndex` builds."""

    items: list[Item]
    q_post: dict[tuple, set[int]]
    q_idf: dict[tuple, float]
    a_idf: dict[tuple, float]
    p_idf: dict[tuple, float]
    threshold: float

    def _candidates(self, row: RowView, codes: Iterable[int]) -> set[int]:
        """The items (of the probe's judge codes) that could pass in this row: with every question, answer
        and passage n-gram found anywhere in it counted as matched, their score still reaches the bar.
        Only they are scored; the judge's verdict on any other item is known to be no."""
        out = set()
        for code in codes:
            i, kind = Code.split(code)
            if kind != JUDGE or i in out:
                continue
            it = self.items[i]
            found = row.distinct.intersection(it.q_set)
            if len(found) < it.q_fewest:
                continue
            q = sum(map(self.q_idf.__getitem__, found)) / it.q_total
            if q < it.q_floor - EPS:
                continue
            bound = it.weights["question"] * q
            if "answer" in it.weights:
                if it.a_short:
                    a = 1.0 if row.holds(it.a_toks) else 0.0
                else:
                    found = row.distinct3.intersection(it.a_set)
                    a = sum(self.a_idf[g] for g in found) / it.a_total if found and it.a_total > 0 else 0.0
                bound += it.weights["answer"] * a
            if "passage" in it.weights:
                found = row.distinct4.intersection(it.p_set)
                bound += it.weights["passage"] * (sum(self.p_idf[g] for g in found) / it.p_total
                                                  if found and it.p_total > 0 else 0.0)
            if bound >= relaxed(it.cum_len, self.threshold) - EPS:
                out.add(i)
        return out

    def _clusters(self, grams: list[tuple], every: int) -> Iterator[tuple[dict, dict, dict]]:
        """The judge's clusters: (matched n-grams, first and last matched position) per item, from seeds
        sampled every `every` positions."""
        post = self.q_post
        i = 0
        while i < len(grams):
            holders = post.get(grams[i])
            if holders is None:
                i += every
                continue
            matched, lo, hi, right = self._grow(grams, i, holders)
            yield matched, lo, hi
            i = max(i, right + 1)

    def _grow(self, grams: list[tuple], hit: int, holders: set[int]) -> tuple[dict, dict, dict, int]:
        post, seed = self.q_post, grams[hit]
        matched = {k: {seed} for k in holders}
        lo, hi = dict.fromkeys(holders, hit), dict.fromkeys(holders, hit)
        pos = hit
        for step, stop, edge in ((-1, 0, lo), (1, len(grams) - 1, hi)):
            active, misses, pos = set(holders), dict.fromkeys(holders, 0), hit
            while pos != stop and active:
                pos += step
                g = grams[pos]
                have = post.get(g)
                both = active.intersection(have) if have else ()
                for k in both:
                    if g not in matched[k]:
                        matched[k].add(g)
                        misses[k] = 0
                    edge[k] = pos
                gone = []
                for k in active.difference(have) if both else active:
                    misses[k] += 1
                    if misses[k] >= Q_MAX_MISSES:
                        gone.append(k)
                active.difference_update(gone)
        return matched, lo, hi, pos

    def _answer(self, it: Item, toks: list[int], start: int) -> float:
        a = it.a_toks
        if it.a_short:
            end = min(start + SHORT_ANSWER_WINDOW, len(toks))
            n = len(a)
            return 1.0 if any(toks[j:j + n] == a for j in range(start, end - n + 1)) else 0.0
        end = min(start + max(2 * len(a), MIN_ANSWER_WINDOW), len(toks))
        found = it.a_set.intersection(ngrams(toks[start:end], A_N))
        return sum(self.a_idf[g] for g in found) / it.a_total if found and it.a_total > 0 else 0.0

    def _passage(self, it: Item, toks: list[int], end: int) -> float:
        start = max(0, end - max(2 * it.p_len, MIN_PASSAGE_WINDOW))
        found: set = set()
        misses = 0
        for j in range(end - P_N, start - 1, -1):
            g = tuple(toks[j:j + P_N])
            if g in it.p_set:
                found.add(g)
                misses = 0
            elif found:
                misses += 1
                if misses > P_MAX_MISSES:
                    break
        return sum(self.p_idf[g] for g in found) / it.p_total if found and it.p_total > 0 else 0.0

    def _judge(self, row: RowView, items: set[int], every: int) -> dict[int, Match]:
        """The judge's scores of `items` in one row: the best match per item that reaches its bar."""
        best: dict[int, Match] = {}
        toks = row.toks
        for matched, lo, hi in self._clusters(row.grams, every):
            for i in items.intersection(matched):
                it = self.items[i]
                q = sum(self.q_idf[g] for g in matched[i]) / it.q_total
                if q < it.q_floor - EPS:
                    continue
                last = hi[i] + Q_N - 1
                q_end = last - max(0, last - lo[i] + 1 - it.q_len)
                scores = {"question": q}
                if it.a_toks is not None:
                    scores["answer"] = self._answer(it, toks, q_end + 1)
                if it.p_len:
                    scores["passage"] = self._passage(it, toks, lo[i])
                score = min(sum(w * scores[f] for f, w in it.weights.items()), 1.0)
                need = relaxed(it.cum_len, self.threshold)
                if score < need - EPS or (i in best and best[i].score >= score):
                    continue
                label = "judge" if score >= relaxed(it.cum_len, JUDGE_THRESHOLD) - EPS else "stricter"
                best[i] = Match(it.ref, score, need, label, "combined", q, scores.get("answer"),
                                scores.get("passage"))
        return best
