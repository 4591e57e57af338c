"""The reference indexed once for mode `simple`, and what runs on each training row.

Why apart: building the tables (n-gram sets, IDF, the probe) happens once per check, scanning once per
row; the scan combines the judge's algorithm (`judge.JudgeScan`) with the stricter extras
(`stricter`). Index: question 5-grams, answer 3-grams (an answer of <= 3 tokens is kept as its exact
token sequence), passage 4-grams. IDF of an n-gram = ln(N / df), N = reference rows read (skipped ones
included), df = indexed items whose same field holds it; an n-gram every row holds weighs 0. A row is
scanned as its texts in reading order and, when it differs, as the text the judge's tool would read of
it; a match either reading gives at the judge's bar is labelled `judge`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import cached_property

from aci.contamination.inputs import RefItem, Row
from aci.contamination.judge import Item, JudgeScan, RowView
from aci.contamination.report import SHORT_CLOSE, Match
from aci.contamination.rules import (
    A_N,
    EPS,
    JUDGE_THRESHOLD,
    MIN_TOKENS,
    MIN_UNIQUE_WORDS,
    P_N,
    Q_MIN,
    Q_N,
    SAMPLE_EVERY,
    SHORT_ANSWER_TOKENS,
    WEIGHTS,
    fewest,
    field_weights,
    idf_table,
    ngrams,
    relaxed,
)
from aci.contamination.stricter import ANSWER_ALONE, JUDGE, QUESTION_ALONE, Alone, Code, Probe
from aci.contamination.text import Tokens, clean, encoding

BATCH = 1024  # rows the prefilter takes at once: its arrays stay a few MB, reused by the allocator (at 4096
# they were returned to the system and faulted in again each batch, 0.3 CPU-s per 100,000 rows)
BATCH_CHARS = 1 << 20  # and at most about this much text: the prefilter holds some 60 bytes per character of a
# batch, so a check of 40 MB of 20 KB rows peaked at 877 MB with 1,024 of them a batch, 185 MB with this cap


def batches(rows: Iterable[Row]) -> Iterator[list[Row]]:
    """`rows` in order, BATCH at a time, or fewer once their texts reach BATCH_CHARS: what a batch holds is
    bounded by its text, not by the count alone (a row longer than that is a batch of its own)."""
    batch, size = [], 0
    for r in rows:
        batch.append(r)
        size += len(r.text) + (len(r.tool_text) if r.tool_text is not None else 0)
        if len(batch) == BATCH or size >= BATCH_CHARS:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


class SimpleIndex(JudgeScan):
    """The reference items indexed once; `scan(tokens)` scores one training row against all of them."""

    SKIP_RULE = f"under {MIN_TOKENS} tokens or {MIN_UNIQUE_WORDS} unique words, all fields together"

    def __init__(self, refs: list[RefItem], threshold: float = JUDGE_THRESHOLD, enc=None):
        self.enc = enc or encoding()
        self.tokens = Tokens(self.enc)
        self.threshold = threshold
        self.refs = refs
        self.skipped_at: list[int] = []  # the reference items the judge skips (too short, a repeated fingerprint)
        self.cleaned: list[tuple[str, str, str]] = []  # each item's question, answer and passage, cleaned
        self.items: list[Item] = []
        space = self.enc.encode_ordinary(" ")[0]
        seen: set[str] = set()
        for r in refs:
            c = (clean(r.passage), clean(r.question), clean(r.answer))
            self.cleaned.append((c[1], c[2], c[0]))
            p_toks, q_toks, a_toks = map(self.tokens, c)  # the fields joined are these tokens in a row
            if r.duplicate_key is not None:
                if r.duplicate_key in seen:
                    self.skipped_at.append(r.index)
                    continue
                seen.add(r.duplicate_key)
            words = set(" ".join(p for p in c if p).split())
            toks = p_toks + q_toks + a_toks
            if len(words) < MIN_UNIQUE_WORDS or len(toks) - toks.count(space) < MIN_TOKENS:
                self.skipped_at.append(r.index)
                continue
            present = tuple(f for f, v in (("question", r.question), ("answer", r.answer), ("passage", r.passage))
                            if v.strip())
            item = Item(r.index, len(q_toks) if r.question.strip() else 0,
                         frozenset(ngrams(q_toks, Q_N)) if r.question.strip() else frozenset(),
                         present, {}, 0)
            lens = {"question": item.q_len}
            if "answer" in present:
                item.a_toks, item.a_short = a_toks, len(a_toks) <= SHORT_ANSWER_TOKENS
                item.a_set = frozenset() if item.a_short else frozenset(ngrams(a_toks, A_N))
                lens["answer"] = len(a_toks)
            if "passage" in present:
                item.p_len, item.p_set = len(p_toks), frozenset(ngrams(p_toks, P_N))
                lens["passage"] = len(p_toks)
            item.cum_len = sum(lens[f] for f in present)
            if present in WEIGHTS:  # an item without a question is never seeded
                item.weights = field_weights(present, len(item.q_set), len(set(a_toks)) if "answer" in present else 0)
            self.items.append(item)
        n = len(refs)

        def idf(sets: Iterable[frozenset]) -> dict[tuple, float]:
            return idf_table(sets, lambda d: math.log(n / d) if d < n else 0.0)

        self.q_idf = idf(it.q_set for it in self.items)
        self.a_idf = idf(it.a_set for it in self.items)
        self.p_idf = idf(it.p_set for it in self.items)
        self.q_post: dict[tuple, set[int]] = {}
        self.probe = Probe()
        q_alone: dict[int, frozenset] = {}
        a_alone: dict[int, frozenset] = {}
        q_need: dict[int, float] = {}
        a_need: dict[int, float] = {}
        for i, it in enumerate(self.items):
            it.q_total = sum(map(self.q_idf.__getitem__, it.q_set))
            it.a_total = sum(map(self.a_idf.__getitem__, it.a_set))
            it.p_total = sum(map(self.p_idf.__getitem__, it.p_set))
            it.q_floor = max(Q_MIN, relaxed(it.q_len, Q_MIN))
            # rarest first, equal weights in the set's order: what `fewest` and the probe both walk
            ranked = sorted(it.q_set, key=self.q_idf.__getitem__, reverse=True)
            it.q_fewest = fewest(map(self.q_idf.__getitem__, ranked), (it.q_floor - EPS) * it.q_total)
            for g in it.q_set:
                self.q_post.setdefault(g, set()).add(i)
            if it.q_total > 0 and it.weights:
                self.probe.add(Code.of(i, JUDGE), ranked, self.q_idf, it.q_total, it.q_floor)
            question, answer, _ = self.cleaned[it.ref]
            if it.q_len >= MIN_TOKENS and len(set(question.split())) >= MIN_UNIQUE_WORDS:
                q_alone[i], q_need[i] = it.q_set, relaxed(it.q_len, threshold)
            if it.a_toks and len(it.a_toks) >= MIN_TOKENS and len(set(answer.split())) >= MIN_UNIQUE_WORDS:
                a_alone[i], a_need[i] = frozenset(ngrams(it.a_toks, Q_N)), relaxed(len(it.a_toks), threshold)
        self.alone = {QUESTION_ALONE: Alone(q_alone, q_need, n), ANSWER_ALONE: Alone(a_alone, a_need, n)}
        for kind, check in self.alone.items():
            for i, s in check.sets.items():
                self.probe.add(Code.of(i, kind), s, check.idf, check.norm[i], check.need[i])

    def __len__(self) -> int:
        return len(self.items)

    @property
    def skipped(self) -> list[str]:
        return [self.refs[i].name for i in self.skipped_at]

    @cached_property
    def prefilter(self):
        from aci.contamination.prefilter import Prefilter  # numpy, loaded only when a check runs

        return Prefilter(self)

    def coverage(self) -> dict[str, int]:
        """Reference items per rule: checked by the judge's, by exact match (short ones the judge skips), for
        close variants, and by neither of the first two."""
        short, close = self.prefilter.short, self.prefilter.close.checks.copy()
        close[self.prefilter.short_close.checked] = True
        return {"judge": len(self.items), "short": len(short.checked), "close": int(close.sum()),
                "unchecked": len(short.unchecked)}

    def scan_rows(self, rows: Iterable[Row]) -> Iterator[tuple[Row, list[Match]]]:
        """Each row with the items it matches. Rows go through the prefilter a batch at a time, and only
        those it keeps are scanned, for the (item, check) pairs it lets through: the others cannot flag
        them (`prefilter`). A row kept only for stricter checks whose shares the prefilter has computed
        is decided by those shares, without a scan. The prefilter also finds the short items' copies and
        the close variants (`short`, `close`)."""
        prefilter = self.prefilter
        for batch in batches(rows):
            kept, found = prefilter.check(batch)
            for k, (r, allowed) in enumerate(zip(batch, kept, strict=True)):
                if not allowed:
                    matches = []
                elif None in allowed.values():
                    matches = self.scan_row(r, allowed)
                else:
                    matches = list(self._alone(allowed, {}, []).values())
                extra = found.get(k)
                yield r, (matches + self._extra(r, extra, {m.item for m in matches})) if extra else matches

    def _extra(self, r: Row, extra: list[tuple[str, int, str, float, float, dict | None]], have: set[int]
               ) -> list[Match]:
        """The prefilter's short and close matches of a row as Matches, one per item the row does not match
        already (a copy before a close match; of close matches, the short items' own rules first, then the
        highest score): a short item's is `exact` when its question is in the row as written."""
        out: dict[int, Match] = {}

        def rank(e: tuple) -> tuple:
            return e[0] != "short", e[2] not in SHORT_CLOSE, -e[3]

        for label, item, component, score, required, matched in sorted(extra, key=rank):
            if item in have or item in out:
                continue
            if label == "short":
                question = self.refs[item].question.strip()
                written = bool(question) and any(question in t for t in (r.text, r.tool_text) if t)
                component = "exact" if written else "normalised"
            out[item] = Match(item, score, required, label, component, matched=matched)
        return list(out.values())

    def _codes(self, grams: list[tuple], allowed: Mapping[int, float | None] | None = None) -> set[int]:
        post = self.probe.post
        codes = {c for g in post.keys() & grams for c in post[g]}
        return codes if allowed is None else codes & allowed.keys()

    def scan_row(self, r: Row, allowed: Mapping[int, float | None] | None = None) -> list[Match]:
        tokens = self.tokens
        if r.tool_text is None:
            return self.scan(tokens(clean(r.text)), allowed=allowed)
        tool = clean(r.tool_text)
        return self.scan(tokens(clean(r.text)), (lambda: tokens(tool)) if r.tool_inside else tokens(tool), allowed)

    def scan(self, toks: list[int], tool: list[int] | Callable[[], list[int]] | None = None,
             allowed: Mapping[int, float | None] | None = None) -> list[Match]:
        """Every item `toks` (a row's texts) matches. `tool`: the tokens of what the judge's tool would
        read of the row, when that differs, scanned the judge's way too; a callable is called only when
        `toks` could match (its text is inside the row's). `allowed`: the probe codes the prefilter let
        through (any other fails its bound here too), each with the share of its stricter check where
        the prefilter computed it, else all."""
        row = RowView(toks)
        codes = self._codes(row.grams, allowed)
        if not codes and not isinstance(tool, list):
            return []
        judge = self._candidates(row, codes)
        found = self._judge(row, judge, SAMPLE_EVERY) if judge else {}
        if callable(tool):
            tool = tool() if judge else None
        if tool is not None:
            seen = RowView(tool)
            for i, m in self._judge(seen, self._candidates(seen, self._codes(seen.grams, allowed)),
                                    SAMPLE_EVERY).items():
                if i not in found or (m.label == "judge", m.score) > (found[i].label == "judge", found[i].score):
                    found[i] = m
        rest = judge - {i for i, m in found.items() if m.label == "judge"}
        for i, m in self._judge(row, rest, 1).items() if rest else ():
            if i not in found:
                found[i] = Match(m.item, m.score, m.required, "stricter", "combined", m.question, m.answer, m.passage)
        shares = {c: allowed.get(c) for c in codes} if allowed is not None else dict.fromkeys(codes)
        return list(self._alone(shares, found, row.grams).values())

    def _alone(self, shares: Mapping[int, float | None], found: dict[int, Match], grams: list[tuple]) -> dict[int, Match]:
        """`found` with the stricter checks alone added for the items it lacks, in code order: each check's
        share from `shares`, or from the row's n-grams `grams` where that is None."""
        for code in sorted(shares):
            i, kind = Code.split(code)
            if kind == JUDGE or i in found:
                continue
            check = self.alone[kind]
            share = shares[code]
            if share is None:
                share = check.best(i, grams)
            if share >= check.need[i] - EPS:
                part = "question" if kind == QUESTION_ALONE else "answer"
                found[i] = Match(self.items[i].ref, share, check.need[i], "stricter", part,
                                 share if kind == QUESTION_ALONE else 0.0, share if kind == ANSWER_ALONE else None)
        return found
