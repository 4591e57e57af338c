"""Test items too short for the judge's algorithm, checked by exact and normalised match (label `short`).

Why: the judge's tool skips an item whose fields together hold fewer than 20 tokens or 4 unique words
(`rules.MIN_TOKENS`, `rules.MIN_UNIQUE_WORDS`), so against a test set of short questions its check, and
ours with it, would pass a file holding them verbatim. Here each such item (and each item skipped as a
repeated fingerprint) is sought as its cleaned words (`text.words`: the normalised text) in a row's
cleaned words: its question, when that has at least 4 unique words; else its fields in turn (question,
answer, passage) until they do, each found somewhere in the same text. An item whose fields together
have fewer than 4 unique words is too short for any rule: it is counted as not checked. A match is
`exact` when the item's question appears character for character in the row, else `normalised`.

A batch is searched with numpy on the word ids the prefilter already has (`wordids`, the reference's
words pinned): each needle is anchored at its word that fewest items hold, and every place that word
occurs is compared with the whole needle.
"""

from __future__ import annotations

from collections import Counter
from itertools import chain

import numpy as np

from aci.contamination.lookup import distinct, ranges
from aci.contamination.rules import MIN_UNIQUE_WORDS


def needles(fields: tuple[list[str], ...]) -> list[list[str]]:
    """The word sequences that must all be found for an item, of its question, answer and passage words
    (none: too short to check)."""
    out, seen = [], set()
    for found in fields:
        if found:
            out.append(found)
            seen.update(found)
        if len(seen) >= MIN_UNIQUE_WORDS:
            return out
    return []


class ShortIndex:
    """The needles of the items the judge skips, over the pinned word ids (`key` of each word)."""

    def __init__(self, fields: list[tuple[list[str], ...]], items: list[int], key: dict[str, int]):
        found = {i: needles(fields[i]) for i in items}
        self.checked = sorted(i for i, n in found.items() if n)
        self.unchecked = sorted(i for i, n in found.items() if not n)
        seqs = [(i, [key[w] for w in seq]) for i in self.checked for seq in found[i]]
        self.n_keys = len(key)
        df = Counter(chain.from_iterable(set(map(key.__getitem__, chain.from_iterable(n))) for n in found.values()))
        self.item = np.array([i for i, _ in seqs], np.int64)
        self.length = np.array([len(s) for _, s in seqs], np.int64)
        self.flat = np.fromiter(chain.from_iterable(s for _, s in seqs), np.int64, int(self.length.sum()))
        self.start = np.cumsum(self.length) - self.length
        self.needed = Counter(i for i, _ in seqs)  # needles per item
        # anchor: the needle's word fewest items hold; key -> (needle, offset) entries
        anchors = sorted((s[k], n, k) for n, (_, s) in enumerate(seqs)
                         for k in [min(range(len(s)), key=lambda j, s=s: (df[s[j]], j))])
        keys = np.array([a for a, _, _ in anchors], np.int64)
        self.entry_needle = np.array([n for _, n, _ in anchors], np.int64)
        self.entry_offset = np.array([k for _, _, k in anchors], np.int64)
        self.entry_start = np.searchsorted(keys, np.arange(self.n_keys + 2))

    def __bool__(self) -> bool:
        return bool(len(self.item))

    def find(self, ids: np.ndarray, per_text: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(text, item) of each item whose needles are all found in one text of the batch."""
        none = np.zeros(0, np.int64), np.zeros(0, np.int64)
        clipped = np.minimum(ids, self.n_keys)
        counts = self.entry_start[clipped + 1] - self.entry_start[clipped]
        at = np.flatnonzero(counts)
        if not len(at):
            return none
        text_end = np.cumsum(per_text)
        word_text = np.repeat(np.arange(len(per_text)), per_text)
        e = ranges(self.entry_start[clipped[at]], counts[at])
        pos = np.repeat(at, counts[at])
        needle = self.entry_needle[e]
        first = pos - self.entry_offset[e]
        text = word_text[pos]
        fits = (first >= text_end[text] - per_text[text]) & (first + self.length[needle] <= text_end[text])
        first, needle, text = first[fits], needle[fits], text[fits]
        if not len(needle):
            return none
        n = self.length[needle]
        same = ids[ranges(first, n)] == self.flat[ranges(self.start[needle], n)]
        whole = np.logical_and.reduceat(same, np.cumsum(n) - n)
        text, needle = np.divmod(distinct(text[whole] * len(self.item) + needle[whole]), len(self.item))
        hits = Counter(zip(text.tolist(), self.item[needle].tolist(), strict=True))  # needles found per item
        done = [(t, i) for (t, i), k in hits.items() if k == self.needed[i]]
        return np.array([t for t, _ in done], np.int64), np.array([i for _, i in done], np.int64)
