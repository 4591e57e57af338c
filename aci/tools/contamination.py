"""`contamination`: the overlap check of a training set against the benchmark's items, as a gate for `train`."""

from __future__ import annotations

import hashlib
import json
import time
from typing import Literal

from pydantic import Field

from aci import contamination as C
from aci import manifest
from aci.context import Context
from aci.errors import ACIError
from aci.registry import ToolInput, ToolOutput, tool


class ContaminationInput(ToolInput):
    path: str = Field(description="training set to check (any shape train reads: messages, prompt/completion, "
                                  "question/answer, text, task records; JSONL or a JSON array)")
    reference: str | None = Field(None, description="the benchmark's test items (test_data.json "
                                                    "rows, {question, answer} rows or task records; default: the "
                                                    "run card's pinned reference)")
    mode: Literal["simple", "ngram13"] = Field(
        "simple", description="simple: n-gram overlap by decon's SIMPLE method (label judge) plus stricter checks; "
                              "ngram13: any shared 13-word sequence (never opens the train gate under posttrainbench)")
    threshold: float | None = Field(None, gt=0, le=1, description="simple: score that flags a row (default: the "
                                                                  "rules profile's; only lower is allowed under strict rules)")
    sources: list[str] = Field(default_factory=list, description="dataset names the training data came from "
                                                                 "(checked against the banned datasets)")
    show: int = Field(20, ge=0, le=1000, description="contaminated rows to return (all are written to state)")
    clean_output: str | None = Field(None, description="write the training rows that are not contaminated here "
                                                       "(JSONL), to check again and train on")
    record: bool = Field(True, description="record the verdict in the training file's data manifest "
                                           "(train refuses a failed or unchecked set)")


class ContaminationOutput(ToolOutput):
    verdict: Literal["pass", "fail"]
    mode: str
    path: str
    sha256: str = Field(description="hash of the training bytes scanned: the verdict holds for these bytes only")
    reference: str
    reference_sha256: str
    rows: int
    references: int = Field(description="reference items read")
    indexed: int = Field(description="reference items indexed (others too short to judge)")
    skipped_references: int
    threshold: float | None
    tolerated_rows: int
    flagged: int = Field(description="contaminated training rows")
    judge_flagged: int = Field(description="of them, rows the SIMPLE n-gram score flags (label judge)")
    stricter_flagged: int = Field(description="of them, rows only the stricter checks flag")
    opens_train_gate: bool = Field(description="whether this result lets `train` use the file under these rules")
    contaminated: list[dict] = Field(default_factory=list, description="line, id, label (judge|stricter), score, "
                                                                       "matches (test item, its line and excerpt, "
                                                                       "score, component, label)")
    clean_output: str | None = None
    kept_rows: int | None = None
    manifest: str | None = None
    seconds: float
    warnings: list[str] = Field(default_factory=list)

    def summary(self) -> str:
        lines = [f"{self.verdict.upper()}: {self.flagged} of {self.rows} rows contaminated ({self.judge_flagged} "
                 f"flagged by the SIMPLE n-gram score, {self.stricter_flagged} only by stricter checks; tolerated "
                 f"{self.tolerated_rows}; mode {self.mode}"
                 + (f", threshold {self.threshold}" if self.threshold is not None else "") + ")",
                 f"reference {self.reference}: {self.indexed} of {self.references} items indexed"]
        for r in self.contaminated:
            m = r["matches"][0]
            lines.append(f"  line {r['line']}{' id ' + r['id'] if r['id'] else ''} [{r['label']}]: test item "
                         f"{m['reference']} (line {m['line']}) score {m['score']} ({m['component']}, needs "
                         f"{m['required']}): {m['excerpt']}")
        if self.flagged > len(self.contaminated):
            lines.append(f"  ... {self.flagged - len(self.contaminated)} more in the manifest's contamination.jsonl")
        if self.clean_output:
            lines.append(f"clean copy: {self.clean_output} ({self.kept_rows} rows); check it again before training")
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


@tool("contamination", title="Contamination check against benchmark items", idempotent=True)
def contamination(inp: ContaminationInput, ctx: Context) -> ContaminationOutput:
    """Check a training set against the benchmark's test items. Mode simple applies decon's SIMPLE method
    (cl100k tokens, question/answer/passage n-grams of 5/3/4, sampled seeds with cluster expansion,
    IDF-weighted overlap, adaptive weights, thresholds relaxed for short items) to each row read in
    order and as a single-field checker such as contamination_check.py reads the file, and labels the
    rows it flags `judge`; stricter checks (the same score at any seed alignment, a copied question
    alone, a copied worked answer alone) add rows labelled `stricter`. Each match names the test item (id or #index, line, excerpt). The verdict
    (`fail` above the profile's tolerated rows: 0 under posttrainbench) is recorded in the training
    file's data manifest for the sha256 of the bytes scanned; `train` refuses a file that failed,
    changed, was never checked, or passed only in mode ngram13, with 0 items indexed, or against
    another reference than the run card's pinned one (pinned at plan init or at the first check).
    Refuses training data whose file name or declared sources match a banned dataset. Use
    --clean-output to write the rows that pass."""
    from aci.training import gates

    path = ctx.path(inp.path, must_exist=True, what="training set")
    pin = ctx.card.reference if ctx.card else None
    if not inp.reference and not pin:
        raise ACIError("no --reference given and none pinned in the run card: pass the benchmark's test items")
    ref = ctx.path(inp.reference or pin["path"], must_exist=True, what="reference set")
    if path == ref:
        raise ACIError("the training set and the reference are the same file")
    rules = ctx.rules
    # The reference *is* the benchmark's data, so only the training side is checked against the banned list.
    for name in [path.name, *inp.sources]:
        rules.check_dataset_name(name)
    limits = rules.profile.contamination
    threshold = inp.threshold if inp.threshold is not None else limits.threshold
    if rules.strict and threshold > limits.threshold:
        raise rules.refuse("no-test-data", f"threshold {threshold} is looser than the profile's {limits.threshold}")
    data, ref_data = _read(path), _read(ref)
    digest, ref_digest = hashlib.sha256(data).hexdigest(), hashlib.sha256(ref_data).hexdigest()
    warnings = []
    if pin and pin["path"] == str(ref) and pin["sha256"] != ref_digest:
        if rules.strict:
            raise rules.refuse("no-test-data", f"the pinned reference {ref} changed since it was pinned (sha256 "
                                               f"{pin['sha256'][:12]} then, {ref_digest[:12]} now)")
        warnings.append(f"the pinned reference {ref} changed since it was pinned")
    started = time.perf_counter()
    declared: set[str] = set()
    report = C.check(C.reference_items(ref, ref_data), C.training_rows(path, declared, data), inp.mode, threshold)
    seconds = time.perf_counter() - started
    gates.pin_at_first_check(ctx, ref, ref_digest)
    for name in sorted(declared):
        rules.check_dataset_name(name)
    flagged = len(report.flagged)
    verdict = "pass" if flagged <= limits.tolerated_rows else "fail"
    if report.indexed == 0:
        warnings.append(f"none of the {report.references} reference items is long enough to judge "
                        f"({'20 tokens and 4 unique words, all fields together' if inp.mode == 'simple' else '13 words'}); "
                        f"nothing was checked")
    elif report.skipped:
        warnings.append(f"{len(report.skipped)} short reference items skipped, as the judge skips them, e.g. "
                        f"{', '.join(report.skipped[:3])}")

    clean_path, kept = None, None
    if inp.clean_output:
        clean_path = ctx.path(inp.clean_output, what="clean output", kind="file")
        if clean_path in (path, ref):
            raise ACIError("--clean-output must be a new file, not the training set or the reference")
        kept = _write_clean(path, data, clean_path, {r["row"] for r in report.flagged})

    result = {"verdict": verdict, "reference": str(ref), "reference_sha256": ref_digest, "mode": inp.mode,
              "flagged": flagged, "judge_flagged": report.judge_flagged, "rows": report.rows,
              "threshold": threshold if inp.mode == "simple" else None, "tolerated_rows": limits.tolerated_rows,
              "indexed_references": report.indexed, "skipped_references": len(report.skipped),
              "lines": [r["line"] for r in report.flagged][:200], "side_file": "contamination.jsonl"}
    closed = gates.contamination_gate(ctx, result)
    if closed and verdict == "pass" and limits.required_before_training:
        warnings.append(f"this pass does not let `train` use {path.name}: it {closed}")
    mpath = None
    if inp.record:
        side = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in report.flagged).encode()
        manifest.update(ctx.state, path, "contamination", result, role="train", tool="contamination",
                        message=f"contamination {verdict}: {flagged} of {report.rows} rows of {path.name} "
                                f"against {ref.name} ({inp.mode})",
                        extra_files={"contamination.jsonl": side}, sha256=digest)
        mpath = str(ctx.state.root / manifest.rel(path))
    if verdict == "fail":
        warnings.insert(0, rules.refuse("no-test-data", f"{flagged} contaminated row(s) exceed the "
                                                        f"{limits.tolerated_rows} tolerated").args[0])
    return ContaminationOutput(
        verdict=verdict, mode=inp.mode, path=str(path), sha256=digest, reference=str(ref),
        reference_sha256=ref_digest, rows=report.rows, references=report.references, indexed=report.indexed,
        skipped_references=len(report.skipped), threshold=threshold if inp.mode == "simple" else None,
        tolerated_rows=limits.tolerated_rows, flagged=flagged, judge_flagged=report.judge_flagged,
        stricter_flagged=flagged - report.judge_flagged,
        opens_train_gate=closed is None or not limits.required_before_training and verdict == "pass",
        contaminated=report.flagged[:inp.show], clean_output=str(clean_path) if clean_path else None,
        kept_rows=kept, manifest=mpath, seconds=round(seconds, 2), warnings=warnings)


def _read(path) -> bytes:
    try:
        return path.read_bytes()
    except IsADirectoryError:
        raise ACIError(f"data file {path} is a directory, expected a .jsonl or .json file") from None


def _write_clean(src, content: bytes, dst, drop: set[int]) -> int:
    """The rows of `src` (the bytes scanned) whose 0-based position is not in `drop`, as JSONL, written
    atomically."""
    from aci.state import atomic_write_bytes
    from aci.tasks import read_rows

    kept, out = 0, []
    for k, (_, row) in enumerate(read_rows(src, content)):
        if k not in drop:
            out.append(json.dumps(row, ensure_ascii=False) + "\n")
            kept += 1
    atomic_write_bytes(dst, "".join(out).encode())
    return kept
