"""Trajectories as training data: kept (score >= threshold) for SFT, the rest apart for DPO/RL.

For self-improvement rounds: `max_per_task` caps the kept samples of one task (easy tasks, solved in
every trial, would otherwise dominate the set), and `unsolved.jsonl` holds the task records of every
rolled task with no kept sample, ready to roll again with the next model.

A sample is the last request's `messages` plus the last reply, and the request's `tools`, copied from
the trace rather than rebuilt: the system prompt and tool schemas are byte-identical to what the
policy was sent (Auto-BenchMax lost points to schemas stripped between training and evaluation).
Identical kept conversations (same task solved the same way in two trials) are written once.
Both files are rewritten whole from the trial files, so re-exporting with another threshold is cheap.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from aci.rollout.trace import TaskTrace
from aci.state import atomic_write_bytes

KEPT = "sft.jsonl"
FAILED = "failed.jsonl"
UNSOLVED = "unsolved.jsonl"


class ExportCounts(BaseModel):
    kept: int = 0
    duplicates: int = 0
    capped: int = 0
    failed: int = 0
    without_reply: int = 0
    unsolved: int = 0
    min_reward: float
    max_per_task: int | None = None
    kept_file: str
    failed_file: str
    unsolved_file: str | None = None


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


def export(traces: dict[int, list[TaskTrace]], out_dir: Path, min_reward: float, *, max_per_task: int | None = None,
           tasks: list[dict] | None = None) -> ExportCounts:
    """Write the kept and failed samples; with `tasks` (the rolled task records), also the unsolved ones."""
    counts = ExportCounts(min_reward=min_reward, max_per_task=max_per_task, kept_file=str(out_dir / KEPT),
                          failed_file=str(out_dir / FAILED))
    kept, failed, seen = [], [], set()
    per_task: Counter[str] = Counter()
    rolled, solved = set(), set()
    for trial in sorted(traces):
        for t in traces[trial]:
            rolled.add(t.task_id)
            s = sample(t)
            if s is None:
                counts.without_reply += 1
                continue
            if t.score >= min_reward:
                solved.add(t.task_id)
                key = hashlib.sha256(json.dumps([s["messages"], s.get("tools")], sort_keys=True).encode()).hexdigest()
                if key in seen:
                    counts.duplicates += 1
                    continue
                if max_per_task is not None and per_task[t.task_id] >= max_per_task:
                    counts.capped += 1
                    continue
                seen.add(key)
                per_task[t.task_id] += 1
                kept.append(s)
            else:
                s["meta"] |= {"reason": t.reason, "stop_reason": t.stop_reason}
                failed.append(s)
    counts.kept, counts.failed = len(kept), len(failed)
    files = [(KEPT, kept), (FAILED, failed)]
    if tasks is not None:
        unsolved = [task for task in tasks if task["id"] in rolled - solved]
        counts.unsolved, counts.unsolved_file = len(unsolved), str(out_dir / UNSOLVED)
        files.append((UNSOLVED, unsolved))
    for name, rows in files:
        data = "".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in rows)
        atomic_write_bytes(out_dir / name, data.encode())
    return counts
