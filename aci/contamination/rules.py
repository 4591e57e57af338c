"""The judge's numbers and formulas (decon SIMPLE defaults, as the judge's tool applies them).

Why apart: the index, the judge's scan, the stricter extras and the prefilter all derive their bars
from these; written once, they cannot disagree. Weights: question .75 / answer .25; with a passage
.70 / .20 / .10; question + passage .85 / .15; a question with fewer than 20 n-grams (or an answer with
fewer than 4 unique tokens, with a passage) gives part of its weight to the other fields. The weighted
score must reach 0.8, or 1.0 when the item's fields together hold <= 20 tokens, relaxed linearly to
0.8 at 50. An item is skipped when its passage, question and answer *together* have fewer than 4
unique words or fewer than 20 non-space tokens: a 10-token question with a long answer (BFCL) is
checked.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from itertools import chain, islice

# The judge's numbers (decon SIMPLE defaults)
Q_N, A_N, P_N = 5, 3, 4
SAMPLE_EVERY = 10
Q_MAX_MISSES, P_MAX_MISSES = 11, 2
JUDGE_THRESHOLD = 0.8
Q_MIN = (JUDGE_THRESHOLD - 0.3) / 0.7
DECAY_START, DECAY_END = 20, 50
SHORT_ANSWER_TOKENS, SHORT_ANSWER_WINDOW = 3, 50
MIN_ANSWER_WINDOW = MIN_PASSAGE_WINDOW = 100
MIN_TOKENS, MIN_UNIQUE_WORDS = 20, 4
INFORMATIVE_Q_NGRAMS, INFORMATIVE_A_TOKENS = 20, 4
WEIGHTS = {("question",): {"question": 1.0},
           ("question", "answer"): {"question": 0.75, "answer": 0.25},
           ("question", "passage"): {"question": 0.85, "passage": 0.15},
           ("question", "answer", "passage"): {"question": 0.70, "answer": 0.20, "passage": 0.10}}
EPS = 1e-9  # float sums in another order: a score this close to its bar counts as reaching it


def relaxed(length: int, bar: float) -> float:
    """1.0 up to 20 tokens, `bar` from 50, linear in between: the judge's allowance for short texts."""
    if length <= DECAY_START:
        return 1.0
    if length >= DECAY_END:
        return bar
    return 1.0 - (1.0 - bar) * (length - DECAY_START) / (DECAY_END - DECAY_START)


def ngrams(toks: list[int], n: int) -> list[tuple[int, ...]]:
    """The n-gram starting at each position (C-speed zip, over iterators: a slice per offset would copy a
    long row's tokens n times)."""
    return list(zip(*(islice(toks, k, None) for k in range(n)), strict=False))


def fewest(weights: Iterable[float], need: float) -> int:
    """The fewest n-grams whose weights can add up to `need`: a row holding fewer cannot reach it."""
    acc = 0.0
    for k, w in enumerate(sorted(weights, reverse=True), 1):
        acc += w
        if acc >= need:
            return k
    return 1 << 30


def doc_freq(sets: Iterable[set]) -> dict[tuple, int]:
    """How many of `sets` hold each n-gram (counted in C: `Counter` over the chained sets)."""
    return Counter(chain.from_iterable(sets))


def idf_table(sets: Iterable[set], weight: Callable[[int], float]) -> dict[tuple, float]:
    """Each n-gram of `sets` weighed by `weight(its document frequency)`. Why the detour: the reference's
    n-grams are many and their frequencies few, so each weight is computed once per frequency and the
    table is filled in C."""
    df = doc_freq(sets)
    by_df = {d: weight(d) for d in set(df.values())}
    return dict(zip(df.keys(), map(by_df.__getitem__, df.values()), strict=True))


def field_weights(fields: tuple[str, ...], q_ngrams: int, a_unique: int) -> dict[str, float]:
    """The judge's base weights, with an uninformative question's (and, beside a passage, answer's)
    weight partly handed to the other fields."""
    base = WEIGHTS[fields]
    q_conf = 0.5 + 0.5 * q_ngrams / INFORMATIVE_Q_NGRAMS if q_ngrams < INFORMATIVE_Q_NGRAMS else 1.0
    if len(fields) == 3:
        a_conf = 0.5 + 0.5 * a_unique / INFORMATIVE_A_TOKENS if a_unique < INFORMATIVE_A_TOKENS else 1.0
        if q_conf == 1.0 and a_conf == 1.0:
            return dict(base)
        lost = base["question"] * (1 - q_conf)
        a = base["answer"] + lost / 2
        return {"question": base["question"] * q_conf, "answer": a * a_conf,
                "passage": base["passage"] + lost / 2 + a * (1 - a_conf)}
    if len(fields) == 2 and q_conf < 1.0:
        other = fields[1]
        return {"question": base["question"] * q_conf, other: base[other] + base["question"] * (1 - q_conf)}
    return dict(base)
