"""The eval command's own per-sample replies, read back so that failures can be read without a script.

An eval command that logs each sample (a JSONL file of one object per item, as the demo's `evaluate.py`
writes to `logs/`, or an inspect_ai JSON log, as PostTrainBench's inspect-based scripts write) already
holds what "read 15 failures" needs: the reply and its verdict. Rows are read by the keys such logs use;
a row with no reply or no verdict it can read is left out rather than guessed. Every reply has the shape
the dev set's replies have (`id`, `score`, `reason`, `response`), lowest scores first.
"""

from __future__ import annotations

import json
from pathlib import Path

TEXT_KEYS = ("response", "completion", "output", "prediction", "generation", "generated", "model_output")
VERDICT_KEYS = ("correct", "is_correct", "score", "passed", "acc", "exact_match")
GOLD_KEYS = ("gold", "target", "expected", "reference", "answer")
INSPECT_VALUES = {"C": 1.0, "I": 0.0, "P": 0.5, "N": 0.0}  # inspect_ai's CORRECT, INCORRECT, PARTIAL, NOANSWER
MAX_LOG_BYTES = 256 << 20  # an inspect log is parsed whole: a larger one is not read


def _score(value) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        return INSPECT_VALUES.get(value.strip().upper())
    return None


def _first(row: dict, keys: tuple[str, ...], skip: str | None = None):
    return next(((k, row[k]) for k in keys if k in row and k != skip), (None, None))


def _reply(id_, score: float, response: str, gold, answer=None) -> dict:
    said = f"read {str(answer)[:80]!r}, " if answer is not None else ""
    reason = f"{said}gold {str(gold)[:80]!r}" if gold is not None else (said.rstrip(", ") or "logged verdict")
    return {"id": str(id_), "score": score, "reason": reason, "response": response}


def from_jsonl(path: Path) -> list[dict]:
    """Replies of a per-sample JSONL log: each row's reply text, verdict and gold, by the usual keys."""
    out = []
    for i, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines()):
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if not isinstance(row, dict):
            continue
        text_key, text = _first(row, TEXT_KEYS)
        _, verdict = _first(row, VERDICT_KEYS)
        score = _score(verdict)
        if isinstance(text, str) and score is not None:
            out.append(_reply(row.get("id", i), score, text, _first(row, GOLD_KEYS, skip=text_key)[1]))
    return out


def from_inspect(path: Path) -> list[dict]:
    """Replies of an inspect_ai JSON log: each sample's completion, its first score's value and target."""
    if path.stat().st_size > MAX_LOG_BYTES:
        return []
    try:
        log = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except ValueError:
        return []
    out = []
    for sample in log.get("samples") or [] if isinstance(log, dict) else []:
        if not isinstance(sample, dict):
            continue
        text = (sample.get("output") or {}).get("completion")
        scores = [s for s in (sample.get("scores") or {}).values() if isinstance(s, dict)]
        score = _score(scores[0].get("value")) if scores else None
        if isinstance(text, str) and score is not None:
            out.append(_reply(sample.get("id"), score, text, sample.get("target"), scores[0].get("answer")))
    return out


def logged(paths: list[str], n: int) -> list[dict]:
    """Up to `n` replies, failures first, from the first of the logs that yields any."""
    for name in paths:
        path = Path(name)
        try:
            rows = from_jsonl(path) if path.suffix == ".jsonl" else from_inspect(path)
        except OSError:
            continue
        if rows:
            return sorted(rows, key=lambda r: r["score"])[:n]
    return []
