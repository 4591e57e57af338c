"""A histogram of a data file: records read fast (or through `aci.tasks`' adapters), counted in one
streaming pass per feature; saved histograms read back and restricted to chosen features."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aci import manifest
from aci.errors import ACIError, where
from aci.histogram.features import MEASURES, Extractor, call_name, is_tool_use, numeric_label
from aci.state import State, atomic_write_json

KIND = "aci-histogram"
VERSION = 1
AUTO_PEEK = 200  # records looked at to choose a feature set
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
        if not plain and call_name(c) is None:
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
                key = numeric_label(v, caps[i])
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
                                 "counts": dict(sorted(t.counts.items(), key=bin_key(f.order)))}
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


def bin_key(order: tuple[str, ...]) -> Callable[[tuple[str, int]], tuple]:
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


def save(hist: dict, path: Path) -> None:
    atomic_write_json(path, hist)


def record(state: State, path: Path, hist: dict, comparison: dict | None, *, target: str | None,
           tolerance: float, role: str) -> str:
    """Keep the histogram (and its comparison) in `path`'s data manifest; returns the manifest's path."""
    result: dict[str, Any] = {
        "records": hist["records"], "feature_set": hist["feature_set"], "unit": hist["unit"],
        "side_file": "histogram.json",
        "means": {k: v["mean"] for k, v in hist["features"].items() if v.get("mean") is not None},
    }
    if comparison:
        result.update({
            "target": str(target), "tolerance_pp": tolerance, "passed": comparison["passed"],
            "failed": comparison["failed"], "skipped": comparison["skipped"], "size": comparison["size"],
            "tv": {k: v["tv"] for k, v in comparison["features"].items()},
            "quotas": comparison["quotas"][:50],
        })
    verdict = ("" if not comparison else " passed" if comparison["passed"]
               else f" failed ({', '.join(comparison['failed'])})")
    manifest.update(state, path, "histogram", result, role=role, tool="histogram",
                    message=f"histogram of {path.name}{verdict}",
                    extra_files={"histogram.json": (json.dumps(hist, indent=2) + "\n").encode()})
    return str(state.root / manifest.rel(path))
