"""What each structural feature of a record measures (see the package docstring): the two feature sets,
tool read/write classes, answer formats, length buckets, custom `python:` features, token lengths."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aci import hermes
from aci.errors import ACIError

SETS = ("chat", "tool-use")
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


@dataclass(frozen=True)
class Feature:
    name: str
    kind: str  # "category" | "numeric" | "mix"
    description: str
    order: tuple[str, ...] = ()  # bin order for numeric and length features
    cap: int | None = None  # numeric: values >= cap share the bin "cap+"
    per_kind: bool = False  # measures a task's gold answer but a sample's response (see `MEASURES`)


MEASURES = {"task": "gold answers", "sample": "assistant responses"}


def numeric_label(v: int, cap: int | None) -> str:
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


def call_name(call: Any) -> str | None:
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
        names = [n for n in map(call_name, gold.get("tool_calls") or ()) if n]
        return msgs, answer, names, True
    last = max((i for i, m in enumerate(msgs) if m.get("role") == "assistant"), default=len(msgs))
    answer = _content(msgs[last]) if last < len(msgs) else ""
    names = []
    for m in msgs:
        if m.get("role") != "assistant":
            continue
        names += [n for n in map(call_name, m.get("tool_calls") or ()) if n]
        text = _content(m)
        if "<tool_call>" in text:
            for b in hermes.blocks(text):
                if b.closed and b.body.startswith("{") and b.body.endswith("}"):  # counted only when complete
                    names.append((None if b.error else call_name(b.value)) or "<unparsed>")
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


def check_tool_kinds(kinds: dict[str, str] | None) -> dict[str, str]:
    bad = {k: v for k, v in (kinds or {}).items() if v not in ("read", "write")}
    if bad:
        raise ACIError(f"tool_kinds values must be 'read' or 'write'; got {bad}")
    return dict(kinds or {})
