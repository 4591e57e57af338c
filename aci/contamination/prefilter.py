"""Which rows of a batch could be flagged at all: a necessary condition, computed for thousands of rows at
once with numpy, so that most rows skip the per-row scan in Python.

Why: on a training set in the test items' own style, scanning every row in Python cost about three
times the reading and tokenising alone (bench/contamination.py), though few rows come near any item.

The condition. `SimpleIndex.scan` flags a row only through an (item, check) pair that the probe index
finds among the row's 5-grams and whose bound holds: for the judge's check, the IDF share of the item's
question n-grams found anywhere in the row reaches the item's question floor and, with a long answer
counted by the IDF share of its 3-grams found anywhere in the row and the passage (or a short answer)
counted as fully found, the weighted score reaches the item's bar (what `JudgeScan._candidates`
requires, with the passage and short answer counted as found); for a check alone, the share of its
n-grams found anywhere. The same pairs and bounds are computed here on 64-bit hashes of the n-grams:
equal n-grams have equal hashes, so every n-gram the exact check finds is found here, and a collision
can only find one more, raising the bound. A row none of whose pairs reaches its bar (lowered by a
margin for float sums in another order) cannot be flagged; every other row is scanned exactly as
before, so the verdicts are the same (tested, also with a hash that collides on purpose).

A stricter check alone is also decided here, for a row's own text: its best share within one run of
matches (`Alone.best`), from the n-grams found whose tokens are the key's own (so a collision counts
for nothing), summed over integer weights, so the number is the scan's to the bit. A row kept only for
such checks skips the scan (`SimpleIndex.scan_rows`): in a training set in the test items' style that
is most kept rows, each of which cost the scan about 0.2 ms in Python.

The tokens of a cleaned text are those of its words in order (`text.Tokens`), so each distinct word is
tokenised once and a batch's tokens are gathered from a table (`wordids`: the batch's words as ids
without a Python string per word); its n-gram hashes are looked up in the keys through `lookup`. A row
is checked on its texts and, when the judge's tool would read text that is not inside them, on that
text too.
"""

from __future__ import annotations

from itertools import chain
from typing import NamedTuple

import numpy as np

from aci.contamination.close import CloseIndex
from aci.contamination.inputs import Row
from aci.contamination.judge import Item
from aci.contamination.lookup import SortedHashes, distinct, distinct_inverse, ranges
from aci.contamination.report import CLOSE_COMPONENTS
from aci.contamination.rules import A_N, EPS, Q_MAX_MISSES, Q_N, relaxed
from aci.contamination.short import ShortIndex
from aci.contamination.short_close import ShortCloseIndex
from aci.contamination.stricter import JUDGE, Code
from aci.contamination.wordids import WordIds

MARGIN = 1e-6  # the bars are lowered by this much: float sums here run in another order than the scan's
_MIX = np.uint64(0x9E3779B97F4A7C15)
DENSE_CELLS = 1 << 22  # flags in `Grams.shares`' table of (text, n-gram): 4 MB, a batch's texts in turns


def hash_grams(cols: list[np.ndarray]) -> np.ndarray:
    """One 64-bit hash per n-gram, from its token columns (uint64 arrays of one length), mixed into its
    top bits (`lookup` buckets by them)."""
    h = cols[0].copy()
    for c in cols[1:]:
        h *= _MIX
        h ^= c
    h ^= h >> np.uint64(29)
    h *= _MIX
    return h


def by_identity(objs: list) -> tuple[list, np.ndarray]:
    """The distinct objects of `objs`, compared by identity, in order, and each entry's position among them:
    a set or IDF table that several codes share (an item's judge check and its question alone share one
    set) is built into the arrays once."""
    position: dict[int, int] = {}
    of = np.fromiter((position.setdefault(id(o), len(position)) for o in objs), np.int64, len(objs))
    return list({id(o): o for o in objs}.values()), of


class Grams:
    """n-grams of one length as dense keys (their hashes, deduplicated) and, per dense code, its n-gram
    set as keys with their IDF weights.

    Built with numpy from the n-grams' tokens, each distinct set once (an item's judge check and its
    question alone share one), so that no n-gram is a dict lookup: this index is built for every check,
    and the lookups per n-gram per code cost as much as the rest of it."""

    def __init__(self, n: int, sets: list, idfs: list):
        self.n = n
        uniq, of_set = by_identity(sets)
        size = np.fromiter(map(len, uniq), np.int64, len(uniq))
        flat = np.fromiter(chain.from_iterable(chain.from_iterable(uniq)), np.uint64, n * int(size.sum()))
        cols = flat.reshape(-1, n).T
        keys, key_of = distinct_inverse(hash_grams(list(cols)) if len(flat) else np.zeros(0, np.uint64))
        self.keys, self.n_keys = SortedHashes(keys), len(keys)
        # each key's tokens (column k: its k-th token), to tell a key from an n-gram whose hash equals it;
        # None when two of the n-grams share a hash, and then nothing is decided from the keys alone
        self.key_toks = np.zeros((n, len(keys)), np.uint64)
        self.key_toks[:, key_of] = cols
        if not (self.key_toks[:, key_of] == cols).all():
            self.key_toks = None
        self.dense = np.zeros(max(DENSE_CELLS, len(keys)), bool)  # `shares`' table, all False between calls
        # each code's n-grams: its set's keys, in the set's order, weighed by its IDF table
        counts = size[of_set]
        self.start = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.code_keys = key_of[ranges((np.cumsum(size) - size)[of_set], counts)]
        tables, self.code_table = by_identity(idfs)  # each code's row of `weight`
        self.weight = np.stack([self.weights(t) for t in tables]) if tables else np.zeros((0, 0))
        self.code_w = self.weight[np.repeat(self.code_table, counts), self.code_keys]

    def find_grams(self, grams) -> tuple[np.ndarray, np.ndarray]:
        """Whether each of `grams` (token tuples) has a key, and that key."""
        flat = np.fromiter(chain.from_iterable(grams), np.uint64, self.n * len(grams))
        return self.keys.find(hash_grams(list(flat.reshape(-1, self.n).T))) if len(flat) else (
            np.zeros(0, bool), np.zeros(0, np.int64))

    def weights(self, idf: dict[tuple, float]) -> np.ndarray:
        """One IDF table's weight per key. Where n-grams share a key (a hash collision), the largest: the
        sums stay bounds, and the stricter checks' exact shares run only without collisions among their
        tables' n-grams, which are their sets' own."""
        out = np.zeros(self.n_keys)
        found, key = self.find_grams(list(idf))
        np.maximum.at(out, key[found], np.fromiter(idf.values(), np.float64, len(idf))[found])
        return out

    def shares(self, held_text: np.ndarray, held_key: np.ndarray, text: np.ndarray, code: np.ndarray) -> np.ndarray:
        """Per (text, code) pair, `text` sorted, each code with at least one n-gram: the weight of the
        code's n-grams that the text holds (`held_text`, `held_key`: every n-gram a text holds, repeats
        allowed, `held_text` sorted).

        The texts' n-grams are flagged in a table of n_keys flags per text, so each of the codes' n-grams
        is looked up with one gather; the table is kept between calls (filling fresh pages cost more than
        the lookups) and cleared where it was set, and texts that do not fit in it are taken in turns, each
        turn flagging only its own texts' n-grams (a slice, `held_text` being sorted)."""
        out = np.zeros(len(code))
        if not len(code):
            return out
        texts = text[np.flatnonzero(np.diff(text, prepend=-1))]  # `text` is sorted: where it changes
        turn = max(1, len(self.dense) // self.n_keys)
        rank = np.full(int(max(texts[-1], held_text.max(initial=0))) + 1, -1, np.int64)
        for first in range(0, len(texts), turn):
            chosen = texts[first:first + turn]
            rank[chosen] = np.arange(len(chosen))
            a, b = np.searchsorted(text, [chosen[0], chosen[-1] + 1])
            lo, hi = np.searchsorted(held_text, [chosen[0], chosen[-1] + 1])
            mine = rank[held_text[lo:hi]]
            own = np.flatnonzero(mine >= 0)  # the n-grams of this turn's texts
            cells = mine[own] * self.n_keys + held_key[lo:hi][own]
            self.dense[cells] = True
            counts = self.start[code[a:b] + 1] - self.start[code[a:b]]
            at = ranges(self.start[code[a:b]], counts)
            hit = self.dense[np.repeat(rank[text[a:b]] * self.n_keys, counts) + self.code_keys[at]]
            out[a:b] = np.add.reduceat(self.code_w[at] * hit, np.cumsum(counts) - counts)
            self.dense[cells] = False
            rank[chosen] = -1
        return out

    def member(self, code: np.ndarray, pair: np.ndarray, key: np.ndarray) -> np.ndarray:
        """Per query (`pair`, `key`), `pair` ascending: whether `key` is one of the n-grams of code
        `code[pair]`. The codes' n-grams are flagged in `shares`' table, n_keys flags per code, in turns."""
        out = np.zeros(len(pair), bool)
        turn = max(1, len(self.dense) // self.n_keys)
        counts = self.start[code + 1] - self.start[code]
        for first in range(0, len(code), turn):
            last = min(first + turn, len(code))
            own = ranges(self.start[code[first:last]], counts[first:last])
            cells = np.repeat(np.arange(last - first) * self.n_keys, counts[first:last]) + self.code_keys[own]
            self.dense[cells] = True
            a, b = np.searchsorted(pair, [first, last])
            out[a:b] = self.dense[(pair[a:b] - first) * self.n_keys + key[a:b]]
            self.dense[cells] = False
        return out


class Bars(NamedTuple):
    """One probe code's n-grams and the bars the prefilter bounds it by."""

    check: int  # stricter.Check
    item: int
    grams: frozenset  # its question 5-grams (a check alone: its field's 5-grams)
    idf: dict  # their weights
    norm: float  # their total weight
    floor: float  # the share of it a row must hold
    w_question: float  # the question's weight in the score
    w_rest: float  # the other fields', counted as fully found
    need: float  # the score the row must reach
    answer: Item | None = None  # the item, when its long answer is bounded by its 3-grams' share too


class Prefilter:
    """The index's probe codes and bounds as arrays: `keep(rows)` says which rows the scan must see."""

    def __init__(self, index):
        checks = [Bars(JUDGE, i, it.q_set, index.q_idf, it.q_total, it.q_floor, it.weights["question"],
                       sum(w for f, w in it.weights.items() if f != "question"), relaxed(it.cum_len, index.threshold),
                       it if "answer" in it.weights and not it.a_short and it.a_total > 0 else None)
                  for i, it in enumerate(index.items) if it.q_total > 0 and it.weights]
        checks += [Bars(kind, i, s, check.idf, check.norm[i], check.need[i], 1.0, 0.0, check.need[i])
                   for kind, check in index.alone.items() for i, s in check.sets.items() if check.norm[i] > 0]
        self.q = Grams(Q_N, [c.grams for c in checks], [c.idf for c in checks])
        self.a = Grams(A_N, [c.answer.a_set if c.answer else frozenset() for c in checks], [index.a_idf] * len(checks))
        self.probe_code = [Code.of(c.item, c.check) for c in checks]  # dense code -> the probe's code
        code_of = {code: k for k, code in enumerate(self.probe_code)}
        self.n_codes = len(checks)
        # each code's bars
        self.norm = np.array([c.norm for c in checks], np.float64)
        self.floor = np.array([c.floor for c in checks], np.float64) - EPS - MARGIN
        self.w_q = np.array([c.w_question for c in checks], np.float64)
        self.rest = np.array([c.w_rest for c in checks], np.float64)
        self.need = np.array([c.need for c in checks], np.float64) - EPS - MARGIN
        answer = [c.answer for c in checks]
        self.tracked = np.array([it is not None for it in answer], bool)
        self.w_a = np.array([it.weights["answer"] if it else 0.0 for it in answer], np.float64)
        self.a_total = np.array([it.a_total if it else 1.0 for it in answer], np.float64)
        self.rest_a = np.array([sum(w for f, w in it.weights.items() if f not in ("question", "answer")) if it
                                else 0.0 for it in answer], np.float64)
        # key -> the codes the probe index files under it
        post = index.probe.post
        _, key = self.q.find_grams(list(post))
        entries = [(k, code_of[code]) for k, codes in zip(key.tolist(), post.values(), strict=True) for code in codes
                   if code in code_of]
        probe = np.array(sorted(entries), np.int64).reshape(-1, 2)
        self.probe_codes = probe[:, 1]
        self.probe_start = np.searchsorted(probe[:, 0], np.arange(self.q.n_keys + 1))
        # word -> its tokens, the reference's words first, for the checks that read word ids
        fields = [tuple(f.split() for f in c) for c in index.cleaned]  # each item's question, answer, passage
        vocab = sorted({w for f in fields for words in f for w in words})
        key = {w: k for k, w in enumerate(vocab)}
        self.words = WordIds(index.tokens, vocab)
        self.short = ShortIndex(fields, index.skipped_at, key)
        self.close = CloseIndex(fields, key, index.skipped_at)
        self.short_close = ShortCloseIndex(fields, index.skipped_at, key, self.close.evidence, self.close.specific)
        # the stricter checks' codes, whose shares `alone_shares` computes where their integer weights' sums
        # are exact in float64
        self.alone = np.array([c.check != JUDGE for c in checks], bool)
        self.exact = self.q.key_toks is not None and (self.norm[self.alone].max(initial=0) < 2.0 ** 53)

    def keep(self, rows: list[Row]) -> list[dict[int, float | None] | None]:
        """Per row: None when it cannot be flagged by the judge's or the stricter checks, else the probe
        codes (`Code`) whose bars its texts reach, the only ones the scan can flag it by, each with its
        stricter check's share in the row's text where computed here (else None)."""
        return self.check(rows)[0]

    def check(self, rows: list[Row]) -> tuple[list[dict[int, float | None] | None], dict[int, list[tuple]]]:
        """`keep`'s answer, and the short items' copies and the close variants found in the rows, as
        (label, item, component, score, required, matched) per row that has any (by its position in
        `rows`; `matched`: what of the item a close row holds, `CloseIndex.matched`, else None).

        The batch's texts are the rows' own texts in order, then the few texts the judge's tool would
        read besides (`Row.tool_text`), so that text k is row k's for most texts."""
        texts = [r.text for r in rows]
        owner = list(range(len(rows)))
        for k, r in enumerate(rows):
            if r.tool_text is not None and not r.tool_inside:
                texts.append(r.tool_text)
                owner.append(k)
        ids, per_text = self.words.ids(texts)
        main = np.arange(len(texts)) < len(rows)
        out: list[dict[int, float | None] | None] = [None] * len(rows)
        text, code, share = self.survivors(ids, per_text, main)
        for t, c, s in zip(text.tolist(), code.tolist(), share.tolist(), strict=True):
            k = owner[t]
            if out[k] is None:
                out[k] = {}
            if s == s:  # not NaN: the share in the row's own text
                out[k][self.probe_code[c]] = s
            else:
                out[k].setdefault(self.probe_code[c], None)
        found: dict[int, list[tuple]] = {}
        if self.short:
            for t, i in zip(*(a.tolist() for a in self.short.find(ids, per_text)), strict=True):
                found.setdefault(owner[t], []).append(("short", i, "", 1.0, 1.0, None))
        finds = [self.close.find(ids, per_text, main)]
        if self.short_close:
            finds.append(self.short_close.find(ids, per_text, main, self.words.digits[ids]))
        text, item, component, score, need = (np.concatenate(a) for a in zip(*finds, strict=True))
        matched = self.close.matched(ids, per_text, text, item, self.words.pinned)
        for t, i, c, s, r, m in zip(text.tolist(), item.tolist(), component.tolist(), score.tolist(), need.tolist(),
                                    matched, strict=True):
            found.setdefault(owner[t], []).append(("close", i, CLOSE_COMPONENTS[c], s, r, m))
        return out, found

    def survivors(self, ids: np.ndarray, per_text: np.ndarray, main: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The (text, dense code) pairs whose bar the text reaches, with the exact share of each pair of a
        stricter check in a `main` text (NaN for the others); `ids`, `per_text`: the texts' word ids."""
        n = len(per_text)
        out = np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
        toks, ends = self.words.tokens_of(ids)
        total = len(toks)
        if total < Q_N or not self.n_codes:
            return out
        word_end = np.cumsum(per_text)
        text_end = np.concatenate([[0], ends])[word_end]
        tok_text = np.repeat(np.arange(n), np.diff(text_end, prepend=0))
        m = total - Q_N + 1
        inside = tok_text[:m] == tok_text[Q_N - 1:]  # n-grams that do not cross into the next text
        found, pos = self.q.keys.find(hash_grams([toks[k:k + m] for k in range(Q_N)])[inside])
        # every n-gram held: where it starts, its text and its key
        found = np.flatnonzero(found)  # once: about half the n-grams, in no pattern a mask would follow fast
        at, held_key = np.flatnonzero(inside)[found], pos[found]
        held_text = tok_text[at]
        # (text, code) pairs the probe names, through the few n-grams held that it files codes under
        counts = self.probe_start[held_key + 1] - self.probe_start[held_key]
        probed = np.flatnonzero(counts)
        counts = counts[probed]
        pairs = distinct(np.repeat(held_text[probed] * self.n_codes, counts)
                          + self.probe_codes[ranges(self.probe_start[held_key[probed]], counts)])
        if not len(pairs):
            return out
        text, code = np.divmod(pairs, self.n_codes)
        # each pair's share: the weights of the code's n-grams that the text holds
        share = self.q.shares(held_text, held_key, text, code) / self.norm[code]
        ok = (share >= self.floor[code]) & (self.w_q[code] * share + self.rest[code] >= self.need[code])
        # a long answer counts with its 3-grams' share in place of in full
        t = np.flatnonzero(ok & self.tracked[code])
        if len(t):
            answer = self.answer_shares(toks, text_end, text[t], code[t])
            ok[t] = self.w_q[code[t]] * share[t] + self.w_a[code[t]] * answer + self.rest_a[code[t]] >= self.need[code[t]]
        text, code = text[ok], code[ok]
        exact = np.full(len(code), np.nan)
        if self.exact:
            t = np.flatnonzero(self.alone[code] & main[text])
            exact[t] = self.alone_shares(toks, at, held_text, held_key, text[t], code[t])
        return text, code, exact

    def alone_shares(self, toks, at, held_text, key, text, code) -> np.ndarray:
        """Per (text, stricter code) pair: the code's best share within one run of matches in the text,
        the number `Alone.best` gives. `at`, `held_text`, `key`: where each n-gram found in the keys
        starts, its text and key, in order."""
        first = np.searchsorted(held_text, text)
        counts = np.searchsorted(held_text, text, "right") - first
        e = ranges(first, counts)  # each pair's n-grams found, in order
        pair = np.repeat(np.arange(len(text)), counts)
        mine = np.flatnonzero(self.q.member(code, pair, key[e]))  # the code holds the n-gram's key
        start, key, pair = at[e[mine]], key[e[mine]], pair[mine]
        same = np.ones(len(key), bool)  # and the n-gram is the key's own, not one whose hash only equals it
        for k in range(Q_N):
            same &= toks[start + k] == self.q.key_toks[k][key]
        start, key, pair = start[same], key[same], pair[same]
        best = np.zeros(len(text))
        if not len(key):
            return best
        # runs: a new one at each pair and after more than Q_MAX_MISSES positions without a match
        new = np.ones(len(key), bool)
        new[1:] = (pair[1:] != pair[:-1]) | (np.diff(start) > Q_MAX_MISSES)
        run = np.cumsum(new) - 1
        # each run's distinct n-grams, weighed: sums of integers below 2^53, exact in any order
        owner = pair[new]  # each run's pair
        run, key = np.divmod(distinct(run * self.q.n_keys + key), self.q.n_keys)
        weight = self.q.weight[self.q.code_table[code[owner[run]]], key]
        np.maximum.at(best, owner, np.bincount(run, weights=weight, minlength=len(owner)))
        return best / self.norm[code]

    def answer_shares(self, toks, text_end, text, code) -> np.ndarray:
        """Per (text, code) pair, `text` sorted: the IDF share of the code's answer 3-grams found anywhere
        in the text (`text_end`: where each text's tokens end). Only these texts' 3-grams are hashed."""
        texts = text[np.flatnonzero(np.diff(text, prepend=-1))]
        begin = np.concatenate([[0], text_end])[texts]
        counts = np.maximum(text_end[texts] - begin - (A_N - 1), 0)
        at = ranges(begin, counts)  # each text's 3-grams, none crossing into the next text
        found, pos = self.a.keys.find(hash_grams([toks[at + k] for k in range(A_N)]))
        return self.a.shares(np.repeat(texts, counts)[found], pos[found], text, code) / self.a_total[code]
