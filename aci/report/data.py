"""The report's data: everything it shows, read once from the state folder and the files it names.

The run card, the journal, every evaluation with its trial range, the phase plan against the time used
(`aci.progress.phases`), the data manifests (histogram comparisons, verify-task yields, contamination
verdicts) and the loss curve of each training job (from the job's `history.jsonl` when present, else the
trainer's `trainer_state.json` of its last checkpoint, else the `[aci] step` lines of its log).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from aci import jobfiles, records
from aci.state import State, iso

_STEP_LINE = re.compile(r"\[aci\] step (\d+)/\d+ .*?\bloss=([0-9.eE+-]+)")


@dataclass
class Run:
    """What the page shows, read once from the state folder."""

    state: State
    card: dict
    journal: list[dict]
    evaluations: list[dict]
    best: dict | None
    finalize: dict | None
    phases: list[dict]
    losses: dict[str, list[tuple[int, float]]]
    data: list[dict]
    workdir: Path
    generated: str = field(default_factory=iso)


def collect(state_dir: Path, workdir: Path | None = None) -> Run:
    from aci.context import Context
    from aci.errors import ACIError
    from aci.progress import FINALIZE, phases

    state = State(state_dir)
    card = state.read(records.RUN_CARD)
    if not card:
        raise ACIError(f"no run card in {state.root}: nothing to report (is --state the run's state folder?)")
    if workdir is None:  # the run's own working directory, else the folder holding the state
        workdir = Path(card.get("workdir") or state.root.parent)
        workdir = workdir if workdir.is_dir() else state.root.parent
    ctx = Context(state=state.root, workdir=workdir)
    return Run(
        state=state, card=card, journal=state.journal(),
        evaluations=[e for e in state.lines(records.CHECKPOINTS) if e.get("type") == "evaluated"],
        best=state.read(records.BEST), finalize=state.read(FINALIZE),
        phases=[p.model_dump() for p in phases(ctx)], losses=loss_curves(state), data=data_manifests(state, workdir),
        workdir=workdir,
    )


# -- loss curves ----------------------------------------------------------------------------------
def loss_curves(state: State) -> dict[str, list[tuple[int, float]]]:
    """Per training job, (step, loss) points from the best source the job left."""
    root = state.root / records.JOBS
    out: dict[str, list[tuple[int, float]]] = {}
    for job_dir in sorted(root.iterdir()) if root.is_dir() else []:
        job = state.read(f"{records.JOBS}/{job_dir.name}/{jobfiles.JOB}") or {}
        if job.get("kind") != "train" or (job.get("config") or {}).get("measure"):
            continue
        points = _history(job_dir) or _trainer_state(job.get("config") or {}) or _log_lines(job_dir / jobfiles.LOG)
        if points:
            out[job_dir.name] = points
    return out


def _history(job_dir: Path) -> list[tuple[int, float]]:
    path = job_dir / "history.jsonl"
    if not path.is_file():
        return []
    from aci.state import read_jsonl

    return [(int(r["step"]), float(r["loss"])) for r in read_jsonl(path) if "loss" in r and "step" in r]


def _trainer_state(config: dict) -> list[tuple[int, float]]:
    folder = Path(config.get("output_dir") or "")
    if not config.get("output_dir") or not folder.is_dir():
        return []
    found = []
    for p in folder.glob("checkpoint-*/trainer_state.json"):
        try:
            found.append((int(p.parent.name.split("-")[-1]), p))
        except ValueError:
            continue
    if not found:
        return []
    try:
        history = json.loads(max(found)[1].read_text()).get("log_history", [])
    except (OSError, json.JSONDecodeError):
        return []
    return [(int(h["step"]), float(h["loss"])) for h in history if "loss" in h and "step" in h]


def _log_lines(path: Path) -> list[tuple[int, float]]:
    if not path.is_file():
        return []
    return [(int(m.group(1)), float(m.group(2))) for m in _STEP_LINE.finditer(path.read_text(errors="replace"))]


# -- data manifests -------------------------------------------------------------------------------
def data_manifests(state: State, workdir: Path) -> list[dict]:
    """Each manifest with its histogram (and the target's, when the target's own manifest has one)."""
    root = state.root / records.DATA
    manifests = []
    for m in sorted(root.glob("*/manifest.json")) if root.is_dir() else []:
        try:
            manifest = json.loads(m.read_text())
        except json.JSONDecodeError:
            continue
        side = m.parent / "histogram.json"
        manifest["_histogram"] = json.loads(side.read_text()) if side.is_file() else None
        manifests.append(manifest)
    by_path = {str(Path(x.get("path", "")).resolve()): x for x in manifests}
    for x in manifests:
        target = (x.get("histogram") or {}).get("target")
        if target:
            tpath = Path(target) if Path(target).is_absolute() else workdir / target
            found = by_path.get(str(tpath.resolve()))
            x["_target_histogram"] = (found or {}).get("_histogram")
    manifests.sort(key=lambda x: min((x.get(s) or {}).get("at", "~") for s in ("histogram", "verify", "contamination")))
    return manifests


# -- views -------------------------------------------------------------------------------------------
def latest_evaluations(run: Run) -> list[dict]:
    """The newest successful evaluation per (checkpoint, evaluator, limit), in the order first evaluated."""
    out: dict[tuple, dict] = {}
    for e in run.evaluations:
        if e.get("error") or e.get("score") is None:
            continue
        out[(e["checkpoint"], e.get("evaluator"), e.get("limit"))] = e
    return list(out.values())


def short_name(checkpoint: str) -> str:
    """`train-1129-120402-d7de/checkpoint-500` -> `d7de/ckpt-500` for axis labels."""
    if "/" not in checkpoint:
        return checkpoint
    job, ck = checkpoint.rsplit("/", 1)
    return f"{job.split('-')[-1]}/{ck.replace('checkpoint', 'ckpt')}"
