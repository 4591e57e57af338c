"""`contamination`: the overlap check of a training set against the benchmark's items, as a gate for `train`."""

from __future__ import annotations

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
    path: str = Field(description="training set to check (SFT samples or task records, JSONL or a JSON array)")
    reference: str = Field(description="the benchmark's items: task records or PostTrainBench-style "
                                       "{question, answer} rows")
    mode: Literal["simple", "ngram13"] = Field(
        "simple", description="simple: the PostTrainBench judges' decon-SIMPLE algorithm (cl100k tokens, "
                              "IDF-weighted n-gram overlap); ngram13: any shared 13-word sequence")
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
    reference: str
    rows: int
    references: int = Field(description="reference items read")
    indexed: int = Field(description="reference items indexed (others too short to judge)")
    skipped_references: int
    threshold: float | None
    tolerated_rows: int
    flagged: int = Field(description="contaminated training rows")
    contaminated: list[dict] = Field(default_factory=list, description="line, id, score, matches "
                                                                       "(reference id, score, component)")
    clean_output: str | None = None
    kept_rows: int | None = None
    manifest: str | None = None
    seconds: float
    warnings: list[str] = Field(default_factory=list)

    def summary(self) -> str:
        lines = [f"{self.verdict.upper()}: {self.flagged} of {self.rows} rows contaminated "
                 f"(tolerated {self.tolerated_rows}; mode {self.mode}"
                 + (f", threshold {self.threshold}" if self.threshold is not None else "") + ")",
                 f"reference {self.reference}: {self.indexed} of {self.references} items indexed"]
        for r in self.contaminated:
            m = r["matches"][0]
            lines.append(f"  line {r['line']}{' id ' + r['id'] if r['id'] else ''}: {m['reference']} "
                         f"score {m['score']} ({m['component']}, needs {m['required']})")
        if self.flagged > len(self.contaminated):
            lines.append(f"  ... {self.flagged - len(self.contaminated)} more in the manifest's contamination.jsonl")
        if self.clean_output:
            lines.append(f"clean copy: {self.clean_output} ({self.kept_rows} rows); check it again before training")
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


@tool("contamination", title="Contamination check against benchmark items", idempotent=True)
def contamination(inp: ContaminationInput, ctx: Context) -> ContaminationOutput:
    """Check a training set against the benchmark's reference items the way the PostTrainBench judges
    do (mode simple: decon SIMPLE, cl100k tokens of cleaned text, question/answer/passage n-grams of
    5/3/4, sampled seeds with cluster expansion, IDF-weighted overlap, question .75 / answer .25,
    threshold 0.8 relaxed from 1.0 for 20-50 token questions, short items skipped; stricter than the
    judges in flagging a copied question alone and a copied worked solution alone), or with a plain
    13-gram overlap (mode ngram13). Returns the contaminated rows with the matched reference ids and
    scores and a verdict against the rules profile's tolerance, and records it in the training file's
    data manifest: train refuses a set that failed or was never checked. Refuses training data whose
    file name or declared sources match a banned dataset. Use --clean-output to write the rows that pass."""
    path = ctx.path(inp.path, must_exist=True, what="training set")
    ref = ctx.path(inp.reference, must_exist=True, what="reference set")
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
    started = time.perf_counter()
    declared: set[str] = set()
    report = C.check(C.reference_items(ref), C.training_rows(path, declared), inp.mode, threshold)
    seconds = time.perf_counter() - started
    for name in sorted(declared):
        rules.check_dataset_name(name)
    flagged = len(report.flagged)
    verdict = "pass" if flagged <= limits.tolerated_rows else "fail"
    warnings = []
    if report.indexed == 0:
        warnings.append(f"none of the {report.references} reference items is long enough to judge "
                        f"({'20 tokens and 4 unique words' if inp.mode == 'simple' else '13 words'}); "
                        f"nothing was checked")
    elif report.skipped:
        warnings.append(f"{len(report.skipped)} short reference items skipped, e.g. {', '.join(report.skipped[:3])}")

    clean_path, kept = None, None
    if inp.clean_output:
        clean_path = ctx.path(inp.clean_output, what="clean output")
        if clean_path in (path, ref):
            raise ACIError("--clean-output must be a new file, not the training set or the reference")
        kept = _write_clean(path, clean_path, {r["row"] for r in report.flagged})

    mpath = None
    if inp.record:
        result = {"verdict": verdict, "reference": str(ref), "reference_sha256": manifest.file_hash(ref),
                  "mode": inp.mode, "flagged": flagged, "rows": report.rows, "threshold": threshold if
                  inp.mode == "simple" else None, "tolerated_rows": limits.tolerated_rows,
                  "indexed_references": report.indexed, "skipped_references": len(report.skipped),
                  "lines": [r["line"] for r in report.flagged][:200], "side_file": "contamination.jsonl"}
        side = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in report.flagged).encode()
        manifest.update(ctx.state, path, "contamination", result, role="train", tool="contamination",
                        message=f"contamination {verdict}: {flagged} of {report.rows} rows of {path.name} "
                                f"against {ref.name} ({inp.mode})",
                        extra_files={"contamination.jsonl": side})
        mpath = str(ctx.state.root / manifest.rel(path))
    if verdict == "fail":
        warnings.insert(0, rules.refuse("no-test-data", f"{flagged} contaminated row(s) exceed the "
                                                        f"{limits.tolerated_rows} tolerated").args[0])
    return ContaminationOutput(
        verdict=verdict, mode=inp.mode, path=str(path), reference=str(ref), rows=report.rows,
        references=report.references, indexed=report.indexed, skipped_references=len(report.skipped),
        threshold=threshold if inp.mode == "simple" else None, tolerated_rows=limits.tolerated_rows,
        flagged=flagged, contaminated=report.flagged[:inp.show], clean_output=str(clean_path) if clean_path else None,
        kept_rows=kept, manifest=mpath, seconds=round(seconds, 2), warnings=warnings)


def _write_clean(src, dst, drop: set[int]) -> int:
    """The rows of `src` whose 0-based position is not in `drop`, as JSONL, written atomically."""
    from aci.state import atomic_write_bytes
    from aci.tasks import read_rows

    kept, out = 0, []
    for k, (_, row) in enumerate(read_rows(src)):
        if k not in drop:
            out.append(json.dumps(row, ensure_ascii=False) + "\n")
            kept += 1
    atomic_write_bytes(dst, "".join(out).encode())
    return kept
