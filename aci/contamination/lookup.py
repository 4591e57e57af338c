"""Where millions of 64-bit hashes are in a sorted table, at about one gather each; and the array steps
every batch takes: `ranges`, the gather of many slices, and `distinct`, an array's distinct values.

Why: `np.searchsorted` of five million n-gram hashes into the prefilter's keys was its costliest step
(a binary search per value, each step a cache miss). Here the keys' top bits index buckets (eight to
sixteen buckets per key, at most 2^22; the hashes are mixed into their top bits), so a value is first
compared with the one key its bucket starts with, then, in a bucket holding more, with its second key;
only a value that is neither, in a bucket holding more than two keys, is searched for in full. The
answer is the same as a binary search's, only sooner.
"""

from __future__ import annotations

import numpy as np

MAX_BITS = 22  # buckets at most 2^22: a bigger table has more keys per bucket, not more memory


class SortedHashes:
    """A sorted uint64 array (`keys`) and, per bucket of top bits, where its keys start."""

    def __init__(self, keys: np.ndarray):
        self.keys = keys
        bits = min(MAX_BITS, max(1, (8 * len(keys)).bit_length()))
        self.shift = np.uint64(64 - bits)
        counts = np.bincount((keys >> self.shift).astype(np.int64), minlength=1 << bits)
        self.first = np.cumsum(counts) - counts  # bucket b: keys[first[b]:first[b] + counts[b]]
        self.crowded, self.deep = counts > 1, counts > 2
        # A value of an empty bucket meets the next bucket's first key, which it cannot equal (equal
        # hashes share a bucket), or, past the last bucket, this 0, which is less than it
        self.padded = np.append(keys, np.uint64(0))

    def find(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Whether each value is a key, and the position of the first key equal to it (where found)."""
        if not len(self.keys):
            return np.zeros(len(values), bool), np.zeros(len(values), np.int64)
        bucket = (values >> self.shift).astype(np.intp)  # gathers by a uint64 index convert it at each one
        pos = self.first[bucket]
        found = self.padded[pos] == values
        rest = np.flatnonzero(self.crowded[bucket] & ~found)
        if len(rest):  # the bucket's second key (most crowded buckets hold two); beyond it, a binary search
            second = pos[rest] + 1
            equal = self.padded[second] == values[rest]
            pos[rest[equal]], found[rest[equal]] = second[equal], True
            rest = rest[~equal & self.deep[bucket[rest]]]
            at = np.searchsorted(self.keys, values[rest])
            pos[rest] = at
            found[rest] = self.padded[at] == values[rest]
        return found, pos


def ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The elements of the ranges [starts, starts + counts), one range after another: the gather of many
    variable-length slices in one call."""
    first = np.cumsum(counts) - counts
    return np.arange(int(counts.sum())) + np.repeat(starts - first, counts)


def distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values of an integer array, ascending: `np.unique`'s answer, by a sort. Why not
    `np.unique`: since numpy 2.3 it finds them by hashing, which on these arrays (thousands to hundreds
    of thousands of integers) took 5 to 25 times as long as sorting them (numpy 2.4, 2026-12-02)."""
    out = np.sort(values)
    return out[_first_of_each(out)]


def distinct_inverse(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`distinct(values)`, and where each value is among them (`np.unique`'s `return_inverse`)."""
    order = np.argsort(values)
    ordered = values[order]
    first = _first_of_each(ordered)
    inverse = np.empty(len(values), np.intp)
    inverse[order] = np.cumsum(first) - 1
    return ordered[first], inverse


def _first_of_each(ordered: np.ndarray) -> np.ndarray:
    """Where each run of equal values in a sorted array starts."""
    first = np.empty(len(ordered), bool)
    first[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    return first
