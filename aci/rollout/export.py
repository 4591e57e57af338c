"""Trajectories as training data: kept (score >= threshold) for SFT, the rest apart for DPO/RL.

A sample is the last request's `messages` plus the last reply, and the request's `tools`, copied from
the trace rather than rebuilt: the system prompt and tool schemas are byte-identical to what the
policy was sent (Auto-BenchMax lost points to schemas stripped between training and evaluation).
Identical kept conversations (same task solved the same way in two trials) are written once.
Both files are rewritten whole from the trial files, so re-exporting with another threshold is cheap.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from aci.rollout.trace import TaskTrace
from aci.state import atomic_write_bytes

KEPT = "sft.jsonl"
FAILED = "failed.jsonl"


class ExportCounts(BaseModel):
    kept: int = 0
    duplicates: int = 0
    failed: int = 0
    without_reply: int = 0
    min_reward: float
    kept_file: str
    failed_file: str


def sample(trace: TaskTrace) -> dict[str, Any] | None:
    """The conversation the policy produced, or None when it never replied."""
    last = next((t for t in reversed(trace.turns) if t.reply is not None), None)
    if last is None:
        return None
    out: dict[str, Any] = {"messages": [*last.request["messages"], last.reply]}
    if last.request.get("tools"):
        out["tools"] = last.request["tools"]
    out["meta"] = {"task_id": trace.task_id, "trial": trace.trial, "score": trace.score}
    return out


def export(traces: dict[int, list[TaskTrace]], out_dir: Path, min_reward: float) -> ExportCounts:
    counts = ExportCounts(min_reward=min_reward, kept_file=str(out_dir / KEPT), failed_file=str(out_dir / FAILED))
    kept, failed, seen = [], [], set()
    for trial in sorted(traces):
        for t in traces[trial]:
            s = sample(t)
            if s is None:
                counts.without_reply += 1
                continue
            if t.score >= min_reward:
                key = hashlib.sha256(json.dumps([s["messages"], s.get("tools")], sort_keys=True).encode()).hexdigest()
                if key in seen:
                    counts.duplicates += 1
                    continue
                seen.add(key)
                kept.append(s)
            else:
                s["meta"] |= {"reason": t.reason, "stop_reason": t.stop_reason}
                failed.append(s)
    counts.kept, counts.failed = len(kept), len(failed)
    for name, rows in ((KEPT, kept), (FAILED, failed)):
        data = "".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in rows)
        atomic_write_bytes(out_dir / name, data.encode())
    return counts
