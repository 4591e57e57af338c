"""The cleaned words of a batch of texts as ids into a table of their tokens, without a Python string
per word.

Why: splitting every row into word strings and looking each up in a dict cost the prefilter more than
all its numpy work (bench/contamination.py). Here a batch is cleaned as one byte string (an ASCII text
with one `bytes.translate`: lower case, the judge's punctuation and every whitespace character of
`str.split` to a space; any other text through `text.words`, then UTF-8), its words are found with
numpy, and each word of at most WIDTH bytes is packed into two little-endian integers, zero-padded. Byte
string and length are the word itself, so a known word is found exactly: a hash of the packed word
points into the sorted table of known packed words, and the match counts only when the packed bytes and
length are equal too (a hash collision can only send a word to the slow path). Every other word (new,
longer than WIDTH, or behind a collision) is decoded and looked up in the word dict, and tokenised on
first sight (" " + word, `text.Tokens`).
"""

from __future__ import annotations

import string

import numpy as np

from aci.contamination.lookup import SortedHashes
from aci.contamination.text import clean

WIDTH = 16  # bytes of a word the packed table holds; longer words go through the dict
WORDS_LIMIT = 1 << 21  # distinct words in the table; it starts over beyond this
_MIX = np.uint64(0x9E3779B97F4A7C15)
_MASK = np.array([(1 << (8 * k)) - 1 for k in range(9)], np.uint64)  # the low k bytes
_CLEAN = bytes(c if c >= 128 else 32 if chr(c) in string.punctuation or chr(c).isspace() else ord(chr(c).lower())
               for c in range(256))  # bytes >= 128 are UTF-8 of text already cleaned as str


def hash_words(lo: np.ndarray, hi: np.ndarray, length: np.ndarray) -> np.ndarray:
    """One 64-bit hash per packed word, mixed into its top bits (`lookup` buckets by them); only a pointer
    into the table: matches are checked in full."""
    h = ((lo * _MIX) ^ hi) * _MIX ^ length
    return (h ^ (h >> np.uint64(29))) * _MIX


def split(texts: list[str]) -> tuple[bytes, np.ndarray, np.ndarray, np.ndarray]:
    """The batch's cleaned words as one byte string (texts joined by spaces, one space around all): the
    start and end of each word in it, and how many words each text has."""
    joined = " ".join(texts)
    if joined.isascii():  # the usual batch: one encode, and a text's bytes are its characters
        blob, sizes = joined.encode(), map(len, texts)
    else:
        parts = [t.encode() if t.isascii() else clean(t).encode() for t in texts]
        blob, sizes = b" ".join(parts), map(len, parts)
    blob = b" " + blob.translate(_CLEAN) + b" "
    room = np.fromiter(sizes, np.int64, len(texts)) + 1  # each text and the space after it
    text_start = np.cumsum(room) - room + 1
    word = np.frombuffer(blob, np.uint8) != 32
    edges = np.flatnonzero(word[1:] != word[:-1]) + 1  # a word's first byte, the space after a word
    starts, ends = edges[0::2], edges[1::2]
    return blob, starts, ends, np.diff(np.searchsorted(starts, text_start), append=len(starts))


class WordIds:
    """word -> id, id -> its tokens (`flat[offset:offset + length]`) and whether it is a number (`digits`:
    a word of digits), filled as words are met. The `pinned` words (the reference's) take ids 0, 1, ... in
    their order, also after the table starts over, so that an id below `len(pinned)` is that reference word
    for the checks that read ids."""

    def __init__(self, tokens, pinned: list[str] = ()):
        self.tokens = tokens  # text.Tokens: " " + word -> cl100k tokens
        self.pinned = list(pinned)
        self.clear()

    def clear(self) -> None:
        self.word_id: dict[str, int] = {}
        self.flat = np.zeros(0, np.uint64)
        self.offset = np.zeros(0, np.int64)
        self.length = np.zeros(0, np.int64)
        self.digits = np.zeros(0, bool)
        # the packed table: sorted by hash, with each entry's packed bytes, length and id, and a last
        # entry (length -1) that no word equals
        self.t_lo, self.t_hi = np.zeros(1, np.uint64), np.zeros(1, np.uint64)
        self.t_len, self.t_id = np.full(1, -1, np.int64), np.full(1, -1, np.int64)
        self.table = SortedHashes(np.zeros(0, np.uint64))
        if self.pinned:
            self.ids([" ".join(self.pinned)])
            assert [self.word_id[w] for w in self.pinned] == list(range(len(self.pinned)))

    def ids(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """The ids of the texts' cleaned words in order, and how many words each text has."""
        if len(self.word_id) > WORDS_LIMIT:
            self.clear()
        blob, starts, ends, per_text = split(texts)
        length = ends - starts
        padded = np.frombuffer(blob + bytes(WIDTH), np.uint8)
        view = np.ndarray((len(padded) - 7,), "<u8", padded, strides=(1,))  # 8 bytes from each position
        lo = view[starts] & _MASK[np.minimum(length, 8)]
        hi = np.zeros(len(starts), np.uint64)
        long = np.flatnonzero(length > 8)
        hi[long] = view[starts[long] + 8] & _MASK[np.minimum(length[long] - 8, 8)]
        h = hash_words(lo, hi, length.astype(np.uint64))
        # The entry at pos is the word exactly when its bytes and length are equal, whatever pos is
        _, pos = self.table.find(h)
        ok = (self.t_len[pos] == length) & (self.t_lo[pos] == lo) & (self.t_hi[pos] == hi)
        ids = np.where(ok, self.t_id[pos], -1)
        rest = np.flatnonzero(~ok)
        if len(rest):
            self._add(blob, starts, ends, rest, ids, (h, lo, hi, length))
        return ids, per_text

    def tokens_of(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The tokens of words `ids` in a row, and where each word's tokens end. Every word's first token
        is placed, then the second of the words that have one (a number is a space, then digits), and so
        on: numpy repeats many short runs (a gather of each word's tokens by `lookup.ranges`) at several
        times the cost of these few gathers."""
        length = self.length[ids]
        ends = np.cumsum(length)
        first, offset = ends - length, self.offset[ids]
        toks = np.empty(int(ends[-1]) if len(ends) else 0, np.uint64)
        toks[first] = self.flat[offset]
        k, more = 1, np.flatnonzero(length > 1)
        while len(more):
            toks[first[more] + k] = self.flat[offset[more] + k]
            k += 1
            more = more[np.flatnonzero(length[more] > k)]
        return toks, ends

    def _add(self, blob: bytes, starts, ends, rest: np.ndarray, ids: np.ndarray, packed: tuple) -> None:
        """Resolve the words at `rest` through the dict, tokenising and tabling the new ones."""
        toks: list[int] = []
        offsets, lengths, tabled, digits = [], [], [], []
        base, n = len(self.flat), len(self.offset)
        found = []
        for k, a, b in zip(rest.tolist(), starts[rest].tolist(), ends[rest].tolist(), strict=True):
            w = blob[a:b].decode()
            j = self.word_id.get(w)
            if j is None:
                j = self.word_id[w] = n + len(offsets)
                t = self.tokens(w)
                offsets.append(base + len(toks))
                lengths.append(len(t))
                digits.append(w.isdigit())
                toks += t
                if b - a <= WIDTH:
                    tabled.append(k)
            found.append(j)
        ids[rest] = found
        if not offsets:
            return
        self.flat = np.concatenate([self.flat, np.array(toks, np.uint64)])
        self.offset = np.concatenate([self.offset, np.array(offsets, np.int64)])
        self.length = np.concatenate([self.length, np.array(lengths, np.int64)])
        self.digits = np.concatenate([self.digits, np.array(digits, bool)])
        new = np.array(tabled, np.int64)
        h, lo, hi, length = (a[new] for a in packed)
        order = np.argsort(h, kind="stable")
        at = np.searchsorted(self.table.keys, h[order])
        self.table = SortedHashes(np.insert(self.table.keys, at, h[order]))
        self.t_lo = np.insert(self.t_lo, at, lo[order])
        self.t_hi = np.insert(self.t_hi, at, hi[order])
        self.t_len = np.insert(self.t_len, at, length[order])
        self.t_id = np.insert(self.t_id, at, ids[new][order])
