"""The stricter extras (label `stricter`) and the probe index that keeps every check cheap.

Why: the rule is "never train on test questions or answers", and the judges also read the data and the
trace, so a few checks go beyond the judge's algorithm:
- `combined` seeded at every position, not every tenth: the judge's score under any alignment of its
  samples (a prefix such as "User:" or a dropped system prompt shifts them); run by the index with the
  judge's own scan.
- `question`: the question alone, when it has >= 20 tokens and >= 4 unique words: the best IDF share
  (IDF ln(1 + N / df), so a single-item reference still counts; kept as an integer, see `Alone`) of
  its 5-grams in one run of matches (gaps of at most 11 positions), against 1.0 at 20 tokens relaxed to
  the threshold at 50.
- `answer`: a worked answer (>= 20 tokens, >= 4 unique words) alone, the same way with its 5-grams.
These run only where an item could pass: the row's n-grams are looked up once in the probe index, which
holds, per item and check, just enough of its rarest n-grams that a row holding none of them cannot
reach the share the check needs (exact pruning, tested against scoring every item).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from enum import IntEnum

from aci.contamination.rules import EPS, Q_MAX_MISSES, idf_table

# A run of matches: matched positions (byte 1) at most Q_MAX_MISSES apart, i.e. with at most
# Q_MAX_MISSES - 1 unmatched positions (byte 0) between two of them
_RUN = re.compile(b"\\x01(?:\\x00{0,%d}\\x01)*" % (Q_MAX_MISSES - 1))

# The stricter checks' IDF weights are integers in units of 1 / SCALE (an IDF of 1 is 2^30, of a
# million-item reference's rarest n-gram under 2^34): exact in Python, and in numpy's float64 sums of
# up to 2^53, half a million n-grams per item (the prefilter checks)
SCALE = 1 << 30



class Check(IntEnum):
    """The checks an (item, check) probe code names."""

    JUDGE = 0  # the judge's weighted score
    QUESTION_ALONE = 1
    ANSWER_ALONE = 2


JUDGE, QUESTION_ALONE, ANSWER_ALONE = Check


class Code:
    """(item, check) pairs as one int, `len(Check) * item + check`: the probe index and the prefilter file
    millions of them in dicts and numpy arrays, where a tuple per pair would cost an object each."""

    WIDTH = len(Check)

    @staticmethod
    def of(item: int, check: int) -> int:
        return Code.WIDTH * item + check

    @staticmethod
    def split(code: int) -> tuple[int, int]:
        """(item, check) of a code."""
        return divmod(code, Code.WIDTH)


class Probe:
    """n-gram -> the (item, check) pairs for which it is one of the item's rarest: a row holding none of
    an item's probe n-grams for a check cannot reach the share that check needs."""

    def __init__(self):
        self.post: dict[tuple, list[int]] = {}

    def add(self, code: int, grams: Iterable[tuple], idf: dict[tuple, float], total: float, need: float) -> None:
        may_miss = total * (1 - need) + 2 * EPS * total
        acc = 0.0
        # Rarest first; n-grams of equal weight in the set's order: any n-grams weighing more than the
        # check may miss prune exactly, so which of them are chosen changes no verdict
        for g in sorted(grams, key=idf.__getitem__, reverse=True):
            w = idf[g]
            if w <= 0:
                break
            self.post.setdefault(g, []).append(code)
            acc += w
            if acc > may_miss:
                break


class Alone:
    """A stricter check: one field of each item alone (question or worked answer), as 5-grams.

    Its IDF weights are integers, in units of 1 / SCALE, so a share is the same number in whatever order
    its weights are summed: the prefilter computes it for a whole batch with numpy, the scan with Python
    sets, and the two agree to the bit."""

    def __init__(self, sets: dict[int, frozenset], need: dict[int, float], n_refs: int):
        self.sets, self.need = sets, need
        self.idf = idf_table(sets.values(), lambda d: round(SCALE * math.log(1 + n_refs / d)))
        self.norm = {i: sum(map(self.idf.__getitem__, s)) for i, s in sets.items()}

    def best(self, i: int, grams: list[tuple]) -> float:
        """The best share of item i's n-grams within one run of matches in a row's n-grams `grams`. The
        row's positions become one byte each (1: the item holds that n-gram), so the runs are found by a
        regular expression in C rather than position by position in Python."""
        s, norm = self.sets[i], self.norm[i]
        if not norm:
            return 0.0
        weight = self.idf.__getitem__
        runs = _RUN.finditer(bytes(map(s.__contains__, grams)))
        return max((sum(map(weight, s.intersection(grams[m.start():m.end()]))) for m in runs), default=0) / norm
