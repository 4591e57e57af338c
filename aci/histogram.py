"""Structural histograms of task and sample sets, and the comparison that turns gaps into quotas.

Why: synthetic data whose *structure* differs from the benchmark's (writes per task, share of tasks that
return information, answer format, prompt length) lowers the score even when every sample is correct
(see `data-synthesis.md`). So the benchmark's histogram is the alignment target: compute it before
generating, compare the synthetic set with it after, and add what is missing, scarcest bin first.

Records are task records or SFT samples (`aci.tasks`); each feature maps one record to a value:
a bin label (category), an int (numeric: binned, with its mean kept), or a list of labels (a mix,
counted per element, e.g. the tool of every call). `None` means "does not apply" and the record is not
counted for that feature. Everything is computed in one streaming pass with plain dicts.

Feature sets, chosen from the first records' content unless named:
- `chat` (chat/QA tasks): `turns` (user turns), `system_prompt`, `prompt_length`, `answer_length`
  (characters, or tokens of a local tokenizer), `answer_format`
  (tool-call / code-block / answer-line / letter / number / free-text / empty), `subtype`;
- `tool-use`: `tool_calls`, `distinct_tools`, `writes` per task, `multi_write` (>= 2 writes),
  `returns_info` (the task must tell the user something: gold `answer` or `claims`), `tool_mix`,
  `subtype`. Tool calls are the gold calls of a task record, or the assistant's calls in an SFT sample
  (structured `tool_calls` and hermes `<tool_call>` blocks). Read/write comes from a user map, else from
  the verbs in the tool name (`READ_VERBS`, `WRITE_VERBS`); names matching neither count as reads and
  are listed as `unclassified`.

`subtype` is the records' own label (a task's `subtype`, a sample's `meta.subtype`), in both sets,
because a benchmark's sub-type mix is the structure that most often differs from a generator's
default. An SFT sample has no gold or sub-type of its own: `returns_info` reads `meta.gold` or the bool
`meta.returns_info`, and `subtype` reads `meta.subtype`, when present.

What a feature measures can depend on the record: a task's "answer" is its gold answer (what the
grader compares, e.g. `4321`), a sample's is the whole assistant response (`ANSWER: 4321`). Each
histogram keeps what its answer features measured (`measures`).

Comparison (candidate vs target) covers only the features both sides carry and measure the same way;
every other feature is listed under `skipped` with the reason (no value on one side, or gold answers on
one side and responses on the other), and gets neither pass/fail nor quotas: a quota for a feature
measured on one side only would ask for data that breaks the format. Per compared bin, the gap in
percentage points (candidate share - target share); per feature, the total-variation distance (half
the L1 distance of the two distributions, 0..1); a feature FAILS when any bin's |gap| exceeds the
tolerance. Quotas, for a final size N (the smallest reachable by adding samples, over every compared
feature): per bin of a failing feature, `need = max(0, ceil(target_share * N) - count)`, listed
scarcest first (largest need relative to the bin's target count). Quotas are for failing per-record
features only; a mix feature (counted per call) gets gaps but no quotas, a passing one none either
(added samples keep its mix when they look like the rest). Quotas are per feature and one added
sample counts toward a bin of every feature, so fill the scarcest quotas with samples that also serve
the other features' quotas (a task with two writes that returns an amount serves `writes=2`,
`multi_write=yes` and `returns_info=yes` at once).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aci import hermes
from aci.errors import ACIError, where

KIND = "aci-histogram"
VERSION = 1
SETS = ("chat", "tool-use")
AUTO_PEEK = 200  # records looked at to choose a feature set

READ_VERBS = frozenset({"get", "list", "find", "search", "read", "lookup", "query", "fetch", "view", "show",
                        "check", "count", "calculate", "compute", "describe", "retrieve", "think"})
WRITE_VERBS = frozenset({"create", "update", "delete", "cancel", "modify", "exchange", "return", "book", "set",
                         "add", "remove", "insert", "send", "transfer", "place", "change", "edit", "write",
                         "put", "post", "reset", "assign", "submit", "toggle", "upgrade", "refund"})

# Length bucket edges; a value v falls in the first bucket whose upper edge exceeds it.
LENGTH_EDGES = {"chars": (10, 30, 100, 300, 1000, 3000, 10000), "tokens": (3, 10, 30, 100, 300, 1000, 3000)}
CAPS = {"turns": 5, "tool_calls": 6, "distinct_tools": 5, "writes": 4}

_ANSWER_LINE = re.compile(r"(?im)^\s*\**answer\**\s*:")
_LETTER = re.compile(r"\(?[A-Ja-j]\)?[.)]?")
_NUMBER = re.compile(r"[-+]?[$€£]?\d[\d,]*(\.\d+)?%?")
_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")


# -- features --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Feature:
    name: str
    kind: str  # "category" | "numeric" | "mix"
    description: str
    order: tuple[str, ...] = ()  # bin order for numeric and length features
    cap: int | None = None  # numeric: values >= cap share the bin "cap+"
    per_kind: bool = False  # measures a task's gold answer but a sample's response (see `MEASURES`)


MEASURES = {"task": "gold answers", "sample": "assistant responses"}


def _numeric_label(v: int, cap: int | None) -> str:
    return f"{cap}+" if cap is not None and v >= cap else str(v)


def _length_labels(edges: tuple[int, ...]) -> tuple[str, ...]:
    lows = (0, *edges)
    return tuple(f"{lo}-{hi - 1}" for lo, hi in zip(lows, edges, strict=False)) + (f"{edges[-1]}+",)


def _bucket(v: int, edges: tuple[int, ...], labels: tuple[str, ...]) -> str:
    for i, hi in enumerate(edges):
        if v < hi:
            return labels[i]
    return labels[-1]


def classify_tool(name: str, kinds: dict[str, str] | None = None) -> str:
    """'read', 'write' or 'unknown' for a tool name: the user's map first, then the name's verbs, the
    first word deciding when it is a known verb (`get_order_return` is a read, `return_items` a write)."""
    if kinds and name in kinds:
        return kinds[name]
    for w in (w.lower() for w in _WORDS.findall(name)):
        if w in WRITE_VERBS:
            return "write"
        if w in READ_VERBS:
            return "read"
    return "unknown"


def answer_format(answer: str, has_calls: bool) -> str:
    """The answer's format class, the thing a benchmark's answer extractor keys on."""
    if has_calls or "<tool_call>" in answer:
        return "tool-call"
    text = answer.strip()
    if not text:
        return "empty"
    if "```" in text:
        return "code-block"
    if _ANSWER_LINE.search(text):
        return "answer-line"
    if _LETTER.fullmatch(text):
        return "letter"
    if _NUMBER.fullmatch(text):
        return "number"
    return "free-text"


def _content(m: dict) -> str:
    c = m.get("content")
    if isinstance(c, str):
        return c
    if isinstance(c, list):  # multimodal-style parts
        return "".join(p.get("text", "") for p in c if isinstance(p, dict))
    return ""


def _call_name(call: Any) -> str | None:
    if not isinstance(call, dict):
        return None
    fn = call.get("function")
    name = fn.get("name") if isinstance(fn, dict) else call.get("name")
    return name if isinstance(name, str) else None


def record_parts(rec: dict) -> tuple[list[dict], str, list[str], bool]:
    """(prompt messages, answer text, tool-call names, is_task) of a task record or an SFT sample.

    A task's answer is its gold answer and its calls the gold calls; a sample's prompt is everything
    before its last assistant turn, its answer that turn's text, its calls every assistant call.
    """
    if "messages" not in rec and isinstance(rec.get("text"), str):  # plain text: all of it is learned
        return [], rec["text"], [], False
    msgs = [m for m in (rec.get("messages") or ()) if isinstance(m, dict)]
    if "gold" in rec or "grader" in rec:
        gold = rec.get("gold") or {}
        ans = gold.get("answer")
        answer = ans if isinstance(ans, str) else ("" if ans is None else json.dumps(ans))
        names = [n for n in map(_call_name, gold.get("tool_calls") or ()) if n]
        return msgs, answer, names, True
    last = max((i for i, m in enumerate(msgs) if m.get("role") == "assistant"), default=len(msgs))
    answer = _content(msgs[last]) if last < len(msgs) else ""
    names = []
    for m in msgs:
        if m.get("role") != "assistant":
            continue
        names += [n for n in map(_call_name, m.get("tool_calls") or ()) if n]
        text = _content(m)
        if "<tool_call>" in text:
            for b in hermes.blocks(text):
                if b.closed and b.body.startswith("{") and b.body.endswith("}"):  # counted only when complete
                    names.append((None if b.error else _call_name(b.value)) or "<unparsed>")
    return msgs[:last], answer, names, False


def is_tool_use(rec: dict) -> bool:
    return bool(rec.get("tools")) or rec.get("type") == "tool-use" or bool(record_parts(rec)[2])


class Extractor:
    """Computes every feature of one record in a single function call (the hot loop)."""

    def __init__(self, feature_set: str, *, length: Callable[[str], int] | None = None, unit: str = "chars",
                 tool_kinds: dict[str, str] | None = None, custom: list[tuple[str, Callable]] | None = None):
        if feature_set not in SETS:
            raise ACIError(f"unknown feature set {feature_set!r}; use one of {', '.join(SETS)} or auto")
        self.set = feature_set
        self.unit = unit
        self.length = length or len
        self.tool_kinds = tool_kinds or {}
        self._kind_cache: dict[str, str] = {}
        self.unclassified: set[str] = set()
        self.custom = custom or []
        edges = LENGTH_EDGES[unit]
        self._edges, self._labels = edges, _length_labels(edges)
        if feature_set == "chat":
            feats = [
                Feature("turns", "numeric", "user turns in the prompt", cap=CAPS["turns"]),
                Feature("system_prompt", "category", "a system message is present"),
                Feature("prompt_length", "category", f"prompt length in {unit}", order=self._labels),
                Feature("answer_length", "category", f"answer length in {unit}", order=self._labels, per_kind=True),
                Feature("answer_format", "category", "format class of the answer", per_kind=True),
                Feature("subtype", "category", "the records' own sub-type label"),
            ]
        else:
            feats = [
                Feature("tool_calls", "numeric", "tool calls per task", cap=CAPS["tool_calls"]),
                Feature("distinct_tools", "numeric", "distinct tools per task", cap=CAPS["distinct_tools"]),
                Feature("writes", "numeric", "write operations per task", cap=CAPS["writes"]),
                Feature("multi_write", "category", "task has >= 2 write operations"),
                Feature("returns_info", "category", "task must return information to the user"),
                Feature("tool_mix", "mix", "share of calls per tool"),
                Feature("subtype", "category", "the records' own sub-type label"),
            ]
        # A custom feature named like a built-in one replaces it (e.g. a sub-type read from the question).
        names = {name for name, _ in self.custom}
        self._builtin = [i for i, f in enumerate(feats) if f.name not in names]
        self._all_builtin = len(self._builtin) == len(feats)
        feats = [feats[i] for i in self._builtin]
        feats += [Feature(name, "custom", f"custom feature {name}") for name, _ in self.custom]
        self.features = feats
        self.kinds = {"task": 0, "sample": 0}  # records seen of each kind: what `per_kind` features measured

    def _kind(self, name: str) -> str:
        k = self._kind_cache.get(name)
        if k is None:
            k = self._kind_cache[name] = classify_tool(name, self.tool_kinds)
            if k == "unknown":
                self.unclassified.add(name)
        return k

    def values(self, rec: dict) -> list[Any]:
        prompt, answer, names, is_task = record_parts(rec)
        self.kinds["task" if is_task else "sample"] += 1
        # A sample carries no gold or sub-type of its own; its task's may travel in `meta`.
        meta = {} if is_task or not isinstance(rec.get("meta"), dict) else rec["meta"]
        sub = rec.get("subtype") if is_task or "subtype" in rec else meta.get("subtype")
        sub = sub if isinstance(sub, str) and sub else None
        if self.set == "chat":
            text = "\n".join(_content(m) for m in prompt)
            out: list[Any] = [
                sum(1 for m in prompt if m.get("role") == "user"),
                "yes" if any(m.get("role") == "system" for m in prompt) else "no",
                _bucket(self.length(text), self._edges, self._labels),
                _bucket(self.length(answer), self._edges, self._labels),
                answer_format(answer, bool(names)),
                sub,
            ]
        else:
            kind = self._kind
            writes = sum(1 for n in names if kind(n) == "write")
            gold = rec.get("gold") if is_task or isinstance(rec.get("gold"), dict) else meta.get("gold")
            if isinstance(gold, dict):
                info = "yes" if gold.get("answer") not in (None, "") or gold.get("claims") else "no"
            else:
                flag = meta.get("returns_info")
                info = ("yes" if flag else "no") if isinstance(flag, bool) else None
            out = [len(names), len(set(names)), writes, "yes" if writes >= 2 else "no", info, names, sub]
        if not self._all_builtin:
            out = [out[i] for i in self._builtin]
        for name, fn in self.custom:
            try:
                out.append(fn(rec))
            except Exception as e:  # a user function: report which one failed and why
                raise ACIError(f"custom feature {name} raised {type(e).__name__}: {e}") from None
        return out


def load_function(spec: str, workdir: Path | None = None) -> tuple[str, Callable]:
    """`[name=]python:module:function` (or `python:file.py:function`) -> (name, function), with the
    loader python graders use; the workdir is importable."""
    from aci.graders.external import load_function as load

    name, _, ref = spec.rpartition("=")
    kind, _, target = ref.partition(":")
    if kind != "python" or target.count(":") != 1:
        raise ACIError(f"custom feature {spec!r}: write it as python:module:function (optionally name=python:...)")
    try:
        fn = load(target, workdir)
    except ACIError as e:
        raise ACIError(f"custom feature {spec!r}: {e}") from None
    return name or target.rpartition(":")[2], fn


def token_length(tokenizer: Path) -> Callable[[str], int]:
    """Token count with a local tokenizer folder (transformers, loaded here and only here)."""
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(tokenizer), local_files_only=True)
    except Exception as e:
        raise ACIError(f"cannot load a tokenizer from {tokenizer}: {e}") from None

    def count(text: str) -> int:
        return len(tok(text, add_special_tokens=False)["input_ids"]) if text else 0

    return count


# -- reading -----------------------------------------------------------------------------------------
_ROLES = frozenset({"system", "user", "assistant", "tool"})


def _calls_ok(calls: Any, plain: bool) -> bool:
    if calls is None:
        return True
    if not isinstance(calls, list):
        return False
    for c in calls:
        if not isinstance(c, dict):
            return False
        if plain and not (isinstance(c.get("name"), str) and isinstance(c.get("arguments"), dict)):
            return False
        if not plain and _call_name(c) is None:
            return False
    return True


def _well_formed(row: dict) -> bool:
    """The fields features read have the types the schemas give them: a subset of `aci.tasks`' schema
    check, because the full check (even compiled) costs about as much as the JSON parse itself on
    records that carry tool definitions, which the features never read."""
    msgs = row.get("messages")
    if not isinstance(msgs, list):
        return False
    for m in msgs:
        if not (isinstance(m, dict) and m.get("role") in _ROLES and isinstance(m.get("content"), str)
                and _calls_ok(m.get("tool_calls"), plain=False)):
            return False
    if not isinstance(row.get("tools", []), list) or not isinstance(row.get("subtype") or "", str):
        return False
    if "gold" in row or "grader" in row:
        gold = row.get("gold")
        return (isinstance(gold, dict) and isinstance(gold.get("answer", ""), str)
                and _calls_ok(gold.get("tool_calls"), plain=True) and isinstance(gold.get("claims", []), list))
    return True


def records(path: Path) -> Iterator[dict]:
    """Task records and SFT samples of a data file, for features: rows already in those shapes pass a
    fast type check; anything else goes through `aci.tasks`' adapters and schema, whose errors name
    `file:line`."""
    from aci.tasks import read_rows, row_shape, to_sample, to_task

    for n, row in read_rows(path):
        if _well_formed(row):
            yield row
            continue
        loc = where(path, n)
        if row_shape(row, loc) in ("messages", "text") and "grader" not in row:
            yield to_sample(row, loc)
        else:
            yield to_task(row, loc, f"{path.stem}-{n}")


# -- computing -------------------------------------------------------------------------------------
@dataclass
class _Tally:
    counts: dict[str, int] = field(default_factory=dict)
    total: int = 0  # records with a value
    sum: float = 0.0
    ints: bool = False
    labels: bool = False
    lists: bool = False

    def kind(self, declared: str) -> str:
        if declared != "custom":
            return declared
        return "mix" if self.lists else "numeric" if self.ints and not self.labels else "category"


def choose_set(records: list[dict]) -> str:
    """`tool-use` when any of the first records has tools or tool calls, else `chat`."""
    return "tool-use" if any(is_tool_use(r) for r in records) else "chat"


def compute(records: Iterable[dict], extractor: Extractor, *, source: str = "") -> dict:
    """One streaming pass over `records`; returns the histogram as a JSON-ready dict."""
    feats = extractor.features
    tallies = [_Tally() for _ in feats]
    caps = [f.cap for f in feats]
    n = 0
    for rec in records:
        n += 1
        for i, v in enumerate(extractor.values(rec)):
            if v is None:
                continue
            t = tallies[i]
            c = t.counts
            t.total += 1
            if isinstance(v, str):
                c[v] = c.get(v, 0) + 1
                t.labels = True
            elif isinstance(v, bool):
                key = "yes" if v else "no"
                c[key] = c.get(key, 0) + 1
                t.labels = True
            elif isinstance(v, int):
                key = _numeric_label(v, caps[i])
                c[key] = c.get(key, 0) + 1
                t.sum += v
                t.ints = True
            elif isinstance(v, list):
                for x in v:
                    x = str(x)
                    c[x] = c.get(x, 0) + 1
                t.lists = True
            else:
                raise ACIError(f"feature {feats[i].name} returned {type(v).__name__}; a feature returns a bin "
                               f"label (str), a bool, an int, a list of labels, or None")
    out_feats = {}
    for f, t in zip(feats, tallies, strict=True):
        kind = t.kind(f.kind)
        entry: dict[str, Any] = {"kind": kind, "description": f.description, "records": t.total,
                                 "counts": dict(sorted(t.counts.items(), key=_bin_key(f.order)))}
        if kind == "numeric":
            entry["mean"] = round(t.sum / t.total, 4) if t.total else None
        if f.order:
            entry["order"] = list(f.order)
        if f.per_kind and t.total:
            entry["measures"] = " and ".join(MEASURES[k] for k, c in extractor.kinds.items() if c)
        out_feats[f.name] = entry
    return {"kind": KIND, "version": VERSION, "source": source, "records": n, "feature_set": extractor.set,
            "unit": extractor.unit, "features": out_feats, "record_kinds": dict(extractor.kinds),
            "unclassified_tools": sorted(extractor.unclassified)}


def _bin_key(order: tuple[str, ...]) -> Callable[[tuple[str, int]], tuple]:
    rank = {b: i for i, b in enumerate(order)}

    def key(item: tuple[str, int]) -> tuple:
        b, count = item
        if b in rank:
            return (0, rank[b], "")
        m = re.match(r"^(\d+)\+?$", b)
        return (1, int(m.group(1)), "") if m else (2, -count, b)

    return key


def histogram_of(rows: Iterator[dict], feature_set: str, make: Callable[[str], Extractor],
                 source: str = "") -> dict:
    """Choose the feature set from the first records when `feature_set` is 'auto', then compute."""
    head: list[dict] = []
    if feature_set == "auto":
        for rec in rows:
            head.append(rec)
            if len(head) >= AUTO_PEEK:
                break
        feature_set = choose_set(head)

    def chained() -> Iterator[dict]:
        yield from head
        yield from rows

    return compute(chained(), make(feature_set), source=source)


def read_saved(path: Path) -> dict | None:
    """A saved histogram (JSON written by `save`), or None when the file is something else."""
    if path.suffix.lower() != ".json":
        return None
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if isinstance(data, dict) and data.get("kind") == KIND:
        if data.get("version") != VERSION or not isinstance(data.get("features"), dict):
            raise ACIError(f"{path}: saved histogram of an unknown version; compute it again")
        return data
    return None


def restrict(hist: dict, only: list[str]) -> dict:
    if not only:
        return hist
    missing = [f for f in only if f not in hist["features"]]
    if missing:
        raise ACIError(f"unknown feature(s) {', '.join(missing)}; this histogram has {', '.join(hist['features'])}")
    return {**hist, "features": {k: v for k, v in hist["features"].items() if k in only}}


# -- comparing -------------------------------------------------------------------------------------
def _shares(entry: dict) -> dict[str, float]:
    total = sum(entry["counts"].values())
    return {b: c / total for b, c in entry["counts"].items()} if total else {}


def _ceil_share(target_count: int, target_total: int, size: int) -> int:
    return -(-target_count * size // target_total)


def comparable(target: dict, candidate: dict) -> tuple[list[str], list[dict]]:
    """(features to compare, skipped features with the reason): a feature is compared only when both
    sides carry a value for it and measured the same thing (gold answers vs responses)."""
    names, skipped = [], []
    tfeats, cfeats = target["features"], candidate["features"]
    for name in [*tfeats, *(k for k in cfeats if k not in tfeats)]:
        t, c = tfeats.get(name), cfeats.get(name)
        if not t or not t["records"]:
            reason = "no value in the target"
        elif not c or not c["records"]:
            reason = "no value in the candidate" + (
                " (tasks carry `subtype`, samples `meta.subtype`)" if name == "subtype" else
                " (samples carry `meta.returns_info` or `meta.gold`)" if name == "returns_info" else "")
        elif t.get("measures") and c.get("measures") and t["measures"] != c["measures"]:
            reason = (f"the target measures {t['measures']}, the candidate {c['measures']}: not the same thing "
                      f"(compare like with like: tasks with tasks, samples with samples)")
        else:
            names.append(name)
            continue
        if c and c["records"] or t and t["records"]:  # a feature neither side has is not worth a line
            skipped.append({"feature": name, "reason": reason})
    return names, skipped


def min_size(target: dict, candidate: dict, names: Iterable[str] | None = None) -> int:
    """The smallest N at which adding samples alone can reach the target in every compared per-record
    feature (`names`, default: those `comparable` returns)."""
    n = candidate["records"]
    for name in comparable(target, candidate)[0] if names is None else names:
        t, c = target["features"][name], candidate["features"][name]
        if t["kind"] == "mix":
            continue
        tt = sum(t["counts"].values())
        for b, have in c["counts"].items():
            want = t["counts"].get(b, 0)
            if want:
                n = max(n, -(-have * tt // want))
    return n


def compare(target: dict, candidate: dict, tolerance_pp: float, size: int | None = None) -> dict:
    """Gaps, TV distance, pass/fail and quotas of `candidate` against `target` (both histogram dicts), over
    the features both carry and measure alike; the others are listed under `skipped` with the reason."""
    if target.get("unit") != candidate.get("unit"):
        raise ACIError(f"the target's lengths are in {target.get('unit')} and the candidate's in "
                       f"{candidate.get('unit')}: pass the same --tokenizer as the target was computed with "
                       f"(or none for characters)")
    n = candidate["records"]
    if size is not None and size < n:
        raise ACIError(f"size {size} is below the candidate's {n} records; quotas only add samples")
    names, skipped = comparable(target, candidate)
    size = size or min_size(target, candidate, names)
    features, quotas = {}, []
    for name in names:
        t, c = target["features"][name], candidate["features"][name]
        ts, cs = _shares(t), _shares(c)
        order = list(t["counts"]) + [b for b in c["counts"] if b not in t["counts"]]
        order.sort(key=lambda b: _bin_key(tuple(t.get("order", ())))((b, t["counts"].get(b, 0))))
        bins = []
        for b in order:
            gap = 100 * (cs.get(b, 0.0) - ts.get(b, 0.0))
            bins.append({"bin": b, "target_pct": round(100 * ts.get(b, 0.0), 2),
                         "candidate_pct": round(100 * cs.get(b, 0.0), 2), "gap_pp": round(gap, 2),
                         "target": t["counts"].get(b, 0), "candidate": c["counts"].get(b, 0)})
        tv = 0.5 * sum(abs(cs.get(b, 0.0) - ts.get(b, 0.0)) for b in order)
        worst = max((abs(x["gap_pp"]) for x in bins), default=0.0)
        entry: dict[str, Any] = {"passed": worst <= tolerance_pp, "tv": round(tv, 4), "max_gap_pp": round(worst, 2),
                                 "bins": bins}
        if c["records"] < n:  # counted over the records that carry it
            entry["coverage"] = {"candidate": c["records"], "of": n}
        if t.get("mean") is not None and c.get("mean") is not None:
            entry["mean"] = {"target": t["mean"], "candidate": c["mean"]}
        if t["kind"] != "mix":
            q, after = _quotas(name, t, c, size)
            quotas += q if not entry["passed"] else []  # a passing feature's "quota" is only the growth to N
            entry["max_gap_after_quotas_pp"] = after
            excess = [b["bin"] for b in bins if b["target"] == 0 and b["candidate"] > 0]
            if excess:
                entry["excess_bins"] = excess
        features[name] = entry
    quotas.sort(key=lambda q: (-q["relative_deficit"], -q["need"], q["feature"], q["bin"]))
    return {"tolerance_pp": tolerance_pp, "passed": bool(features) and all(f["passed"] for f in features.values()),
            "failed": [k for k, f in features.items() if not f["passed"]], "skipped": skipped,
            "size": size, "candidate_records": n, "features": features, "quotas": quotas}


def _quotas(name: str, t: dict, c: dict, size: int) -> tuple[list[dict], float]:
    tt = sum(t["counts"].values())
    out, after = [], {}
    for b, want_count in t["counts"].items():
        have = c["counts"].get(b, 0)
        want = _ceil_share(want_count, tt, size)
        need = max(0, want - have)
        after[b] = have + need
        if need:
            out.append({"feature": name, "bin": b, "have": have, "target_pct": round(100 * want_count / tt, 2),
                        "need": need, "relative_deficit": round(need / want, 4)})
    for b, have in c["counts"].items():
        after.setdefault(b, have)
    total = sum(after.values())
    worst = max(abs(after[b] / total - t["counts"].get(b, 0) / tt) for b in after) if total else 0.0
    return out, round(100 * worst, 2)


# -- output ------------------------------------------------------------------------------------------
def save(hist: dict, path: Path) -> None:
    from aci.state import atomic_write_json

    atomic_write_json(path, hist)


def plot(name: str, target: dict | None, candidate: dict, out: Path) -> Path:
    """Bars of target vs candidate shares for one feature (matplotlib, Agg, imported here)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cs = _shares(candidate)
    ts = _shares(target) if target else {}
    bins = list(dict.fromkeys([*(target or {}).get("counts", {}), *candidate["counts"]]))
    fig, ax = plt.subplots(figsize=(max(4.0, 0.6 * len(bins) + 2), 3.2))
    xs = range(len(bins))
    width = 0.4 if target else 0.8
    if target:
        ax.bar([x - width / 2 for x in xs], [100 * ts.get(b, 0) for b in bins], width, label="target")
    ax.bar([x + (width / 2 if target else 0) for x in xs], [100 * cs.get(b, 0) for b in bins], width,
           label="candidate")
    ax.set_xticks(list(xs), bins, rotation=30 if len(bins) > 6 else 0, ha="right" if len(bins) > 6 else "center")
    ax.set_ylabel("% of records" if candidate["kind"] != "mix" else "% of calls")
    ax.set_title(name)
    ax.legend()
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=80)
    plt.close(fig)
    return out


def check_tool_kinds(kinds: dict[str, str] | None) -> dict[str, str]:
    bad = {k: v for k, v in (kinds or {}).items() if v not in ("read", "write")}
    if bad:
        raise ACIError(f"tool_kinds values must be 'read' or 'write'; got {bad}")
    return dict(kinds or {})
