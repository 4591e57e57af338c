"""Close variants of the short test items (label `close`, components `template` and `reworded`).

Why: an item too short for the judge's n-gram score (`short`) is a sentence or two, and most of its
words are its template's, which its siblings (the task's other items, and any data in the benchmark's
style) share; what is its own is its numbers, in order, and the result they give. `close` weighs words
by rarity, so a short item with its name and object changed keeps too little of its story, and its
numbers alone are too few to pass by chance. Here, for each short item with a number in its question
(numbers are words of digits, `text.words`; df(w) is how many of the N reference items hold w):

- `template`: its question's numbers in the same order, with as many words between each two as the
  item has (GAP_SLACK more or fewer), and at least 70 % of its other words (at least 3), each in a
  place of its own among them: before the first number (within the item's lead and GAP_SLACK), between
  the same two numbers, or after the last (within its tail and GAP_SLACK). That is its template and
  operation under other names. Its numbers must be evidence enough: their weight (ln(N / df) each, as
  `close` weighs them) at least ln N, or that with the item's result (the numbers of its answer that
  are not in its question) where the text's last number is the result, within REACH words after them.
  A sibling has the same template and other numbers, so it fails on its numbers, whatever its wording.
- `reworded`: the text's last number is the item's result (or one of its numbers), and within the REACH
  words before it are every number of its question, in any order, and the rest of its result; they
  weigh, with the item's rare words found within REACH of it (`close.specific`), at least ln N + ln 10.
  That is its numbers and its answer, which stand for its operation, in a differently worded question:
  the answer comes last, as a row's answer does, so "50 - 30 = 20. ANSWER: 20" holds 30, 20 and 50 but
  is not the item 30 + 20 = 50, nor "72 - 67 = 5" the item 72 - 5 = 67. A rewording that leaves the
  answer out holds only its question's numbers, which its siblings and unrelated rows hold too: not
  evidence enough here.

A batch is decided with numpy on the word ids the prefilter already has (`wordids`, the reference's
words pinned): only the positions of the short items' numbers and rare words are read, and each rule
starts from the positions of an item's first question number (`template`) or rarest result number
(`reworded`).
"""

from __future__ import annotations

import math
from itertools import chain

import numpy as np

from aci.contamination.close import Postings
from aci.contamination.lookup import distinct, ranges
from aci.contamination.report import CLOSE_COMPONENTS
from aci.contamination.rules import EPS

TEMPLATE_SHARE = 0.7
MIN_TEMPLATE_WORDS = 3  # fewer other words are no template to recognise ("what is 12 5")
GAP_SLACK = 2  # words: a name or object a word longer or shorter, a word dropped or added
REACH = 128  # words between a question's last number and its answer (a worked solution between them)
REWORDED_CHANCE = math.log(10)  # beyond ln N: the answer's place is the rest of the evidence
TEMPLATE, REWORDED = CLOSE_COMPONENTS.index("template"), CLOSE_COMPONENTS.index("reworded")  # a match's component
_FAR = np.iinfo(np.int64).max // 4  # a position past any batch's


class _Ragged:
    """Per item a list of (key, extra) entries: flat arrays, with each item's start and count."""

    def __init__(self, lists: list[list[tuple[int, int]]]):
        self.count = np.fromiter(map(len, lists), np.int64, len(lists))
        self.start = np.cumsum(self.count) - self.count
        flat = np.array(list(chain.from_iterable(lists)), np.int64).reshape(-1, 2)
        self.key, self.extra = flat[:, 0], flat[:, 1]

    def entries(self, owner: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The entries of the items `owner[c]` for each c: their indices, and the c each is for."""
        counts = self.count[owner]
        return ranges(self.start[owner], counts), np.repeat(np.arange(len(owner)), counts)


class _Occurrences:
    """Where each read word occurs in a batch: `first(key, lo, hi)`, its first position in [lo, hi]."""

    def __init__(self, keys: np.ndarray, at: np.ndarray, scale: int):
        self.scale = scale  # above every position
        self.sorted = np.append(np.sort(keys * scale + at), np.iinfo(np.int64).max)

    def first(self, key: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Whether `key` occurs in [lo, hi], and its first position there (where it does)."""
        base = key * self.scale
        p = self.sorted[np.searchsorted(self.sorted, base + np.maximum(lo, 0))] - base
        return (p <= hi) & (lo <= hi), p


class ShortCloseIndex:
    """The short items' numbers, templates, results and rare words over the pinned word ids, and `find`."""

    def __init__(self, fields: list[tuple[list[str], ...]], items: list[int], key: dict[str, int],
                 evidence: np.ndarray, specific: np.ndarray):
        """`fields`: each item's question, answer and passage words; `items`: the short ones; `evidence`,
        `specific`: per key, its weight ln(N / df) and whether it is rare (`close.CloseIndex`)."""
        self.n_keys, n = len(key), len(fields)
        self.ln_n = math.log(n) if n else 0.0
        numbers, template, result, question, rare, lead, checked = [], [], [], [], [], [], []
        for i in items:
            words, answer = fields[i][0], fields[i][1]
            at = [k for k, w in enumerate(words) if w.isdigit()]
            if not at:
                continue
            keys = [key[words[k]] for k in at]
            after = [b - a for a, b in zip(at, at[1:], strict=False)] + [len(words) - at[-1]]  # to the next, or the end
            checked.append(i)
            lead.append(at[0])
            numbers.append(list(zip(keys, after, strict=True)))
            template.append(sorted({(key[w], sum(p < k for p in at)) for k, w in enumerate(words) if not w.isdigit()}))
            result.append([(k, 0) for k in sorted({key[w] for w in answer if w.isdigit()} - set(keys))])
            question.append([(k, 0) for k in sorted(set(keys))])
            rare.append([(k, 0) for k in sorted({key[w] for w in chain(*fields[i]) if specific[key[w]]})])
        self.checked = checked
        self.item = np.array(checked, np.int64)
        self.lead = np.array(lead, np.int64)
        self.numbers, self.template, self.result = _Ragged(numbers), _Ragged(template), _Ragged(result)
        self.question, self.rare = _Ragged(question), _Ragged(rare)
        self.longest = int(self.numbers.count.max(initial=0))
        self.words = np.array([len({k for k, _ in t}) for t in template], np.int64)  # the template's distinct words
        per = np.append(evidence, 0.0)
        m = len(checked)

        def weight(r: _Ragged) -> np.ndarray:
            return np.bincount(np.repeat(np.arange(m), r.count), per[r.key], m)

        self.e_question, self.e_result = weight(self.question), weight(self.result)
        self.rare_w = per[self.rare.key]
        fits = (self.words >= MIN_TEMPLATE_WORDS) & (self.e_question + self.e_result >= self.ln_n - EPS)
        self.by_first = Postings(self.numbers.key[self.numbers.start[fits]], np.flatnonzero(fits), np.zeros(
            int(fits.sum())), self.n_keys)
        self.by_result = Postings(self.result.key, np.repeat(np.arange(m), self.result.count),
                                  np.zeros(len(self.result.key)), self.n_keys)
        self.scanned = np.zeros(self.n_keys + 1, bool)  # the words whose positions are read
        for r in (self.numbers, self.result, self.rare):
            self.scanned[r.key] = True

    def __bool__(self) -> bool:
        return bool(len(self.item))

    def find(self, ids: np.ndarray, per_text: np.ndarray, main: np.ndarray, digits: np.ndarray):
        """(text, item, component, score, required) of each pair of a `main` text of the batch and a short
        item it is a close variant of, one component per pair (`template` before `reworded`); `digits`:
        whether each word of the batch is a number."""
        none = (np.zeros(0, np.int64),) * 3 + (np.zeros(0),) * 2
        if not self:
            return none
        clipped = np.minimum(ids, self.n_keys)
        at = np.flatnonzero(self.scanned[clipped])
        end = np.cumsum(per_text)
        text = np.searchsorted(end, at, "right")
        keep = main[text]
        at, text = at[keep], text[keep]
        if not len(at):
            return none
        occ = _Occurrences(clipped[at], at, len(ids) + 1)
        start = end - per_text
        numbers = np.append(np.flatnonzero(digits), _FAR)
        k = np.searchsorted(numbers, end) - 1  # each text's last number, or -1
        last = np.where((k >= 0) & (numbers[np.maximum(k, 0)] >= start), numbers[np.maximum(k, 0)], -1)
        found = [self._template(occ, ids, clipped, at, text, start, end, last),
                 self._reworded(occ, clipped, np.flatnonzero(main & (last >= 0)), start, end, last)]
        text, item, component, score, required = (np.concatenate(a) for a in zip(*found, strict=True))
        order = np.lexsort((component, item, text))
        text, item, component, score, required = (a[order] for a in (text, item, component, score, required))
        first = np.ones(len(text), bool)
        first[1:] = (text[1:] != text[:-1]) | (item[1:] != item[:-1])
        return text[first], self.item[item[first]], component[first], score[first], required[first]

    def _template(self, occ: _Occurrences, ids, clipped, at, text, start, end, answer):
        """The `template` pairs: (text, checked item, component, share, required). `answer`: each text's
        last number (-1: none)."""
        k, j, _ = self.by_first.pairs(np.arange(len(at)), clipped[at])
        pos, t = at[k], text[k]
        places = np.full((len(pos), max(self.longest, 1)), _FAR, np.int64)  # each number's position in the row
        places[:, 0] = pos
        alive = np.ones(len(pos), bool)
        last = pos.copy()
        for step in range(1, self.longest):
            c = np.flatnonzero(alive & (self.numbers.count[j] > step))
            if not len(c):
                break
            e = self.numbers.start[j[c]] + step
            gap = self.numbers.extra[e - 1]
            ok, p = occ.first(self.numbers.key[e], last[c] + np.maximum(1, gap - GAP_SLACK),
                              np.minimum(last[c] + gap + GAP_SLACK, end[t[c]] - 1))
            alive[c[~ok]] = False
            last[c[ok]] = places[c[ok], step] = p[ok]
        c = np.flatnonzero(alive)
        pos, last, j, t, places = pos[c], last[c], j[c], t[c], places[c]
        # the row's words around the numbers, each with its place among them
        tail = self.numbers.extra[self.numbers.start[j] + self.numbers.count[j] - 1]
        lo = np.maximum(start[t], pos - self.lead[j] - GAP_SLACK)
        hi = np.minimum(end[t], last + tail + GAP_SLACK)
        w = ranges(lo, hi - lo)
        owner = np.repeat(np.arange(len(pos)), hi - lo)
        mine = ids[w] < self.n_keys
        w, owner = w[mine], owner[mine]
        place = (places[owner] < w[:, None]).sum(1)
        segments = self.longest + 1
        have = np.append(distinct((owner * segments + place) * self.n_keys + ids[w]), np.iinfo(np.int64).max)
        e, c = self.template.entries(j)
        cells = (c * segments + self.template.extra[e]) * self.n_keys + self.template.key[e]
        hit = have[np.searchsorted(have, cells)] == cells
        held = distinct(c[hit] * self.n_keys + self.template.key[e][hit]) // self.n_keys  # a word held in a place of its
        share = np.bincount(held, minlength=len(j)) / self.words[j]
        # the result, the text's last number, after the question's, where those alone weigh too little
        p = answer[t]
        e, c = self.result.entries(j)
        ok, _ = occ.first(self.result.key[e], last[c] + 1, p[c])
        last_is = np.bincount(c, self.result.key[e] == clipped[p[c]], len(j)) > 0
        answered = (np.bincount(c, ok, len(j)) == self.result.count[j]) & last_is & (p - last <= REACH)
        enough = (self.e_question[j] >= self.ln_n - EPS) | answered  # with the result: enough (`fits`)
        ok = (share >= TEMPLATE_SHARE - EPS) & enough
        return t[ok], j[ok], np.full(int(ok.sum()), TEMPLATE), share[ok], np.full(int(ok.sum()), TEMPLATE_SHARE)

    def _reworded(self, occ: _Occurrences, clipped, texts, start, end, answer):
        """The `reworded` pairs of `texts`: (text, checked item, component, weight, required). `answer`: each
        text's last number."""
        t, j, _ = self.by_result.pairs(texts, clipped[answer[texts]])
        pos = answer[t]
        lo, hi = np.maximum(start[t], pos - REACH), np.minimum(end[t] - 1, pos + REACH)
        e, c = self.question.entries(j)
        ok = np.bincount(c, occ.first(self.question.key[e], lo[c], pos[c] - 1)[0], len(j)) == self.question.count[j]
        e, c = self.result.entries(j)
        ok &= np.bincount(c, occ.first(self.result.key[e], lo[c], pos[c])[0], len(j)) == self.result.count[j]
        e, c = self.rare.entries(j)
        weight = self.e_question[j] + self.e_result[j] + np.bincount(
            c, self.rare_w[e] * occ.first(self.rare.key[e], lo[c], hi[c])[0], len(j))
        need = self.ln_n + REWORDED_CHANCE
        ok &= weight >= need - EPS
        return t[ok], j[ok], np.full(int(ok.sum()), REWORDED), weight[ok], np.full(int(ok.sum()), need)
