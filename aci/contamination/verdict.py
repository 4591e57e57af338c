"""A contamination check of one training file, as `train` will count it: the policy around `check`.

Why here, in the domain: the threshold a profile allows, the pinned reference, which rows count against
the file (copies always; close variants under the strict profile; the task's provided tool's flags),
what a pass over a partly checked reference says, the data manifest `train` reads and the clean copy
are rules, and the tool adapter only translates. One `Record` is built per check: the manifest holds
it, the tool returns it with the rows it found.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal

from pydantic import BaseModel, ConfigDict, Field

from aci import manifest
from aci.contamination import shared
from aci.contamination.inputs import HashingReader
from aci.contamination.report import Mode
from aci.context import Context
from aci.errors import ACIError
from aci.files import regular_only

SIDE_FILE = "contamination.jsonl"  # every flagged and close row, beside the manifest


class ContaminationRequest(BaseModel):
    """What to check against what: the `contamination` tool's options."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="training set to check (any shape train reads: messages, prompt/completion, "
                                  "question/answer, text, task records; JSONL or a JSON array)")
    reference: str | None = Field(None, description="the benchmark's test items ({question, answer} rows as in a "
                                                    "task's test_data.json, or task records; default: the run "
                                                    "card's pinned reference)")
    mode: Mode = Field("simple", description="simple: n-gram overlap by decon's SIMPLE method (label judge), the "
                                             "stricter checks, exact match of short items and close variants; "
                                             "ngram13: any shared 13-word sequence (never opens the train gate "
                                             "under posttrainbench)")
    threshold: float | None = Field(None, gt=0, le=1, description="simple: score that flags a row (default: the "
                                                                  "rules profile's; only lower is allowed under "
                                                                  "strict rules)")
    sources: list[str] = Field(default_factory=list, description="dataset names the training data came from "
                                                                 "(checked against the banned datasets)")
    show: int = Field(20, ge=0, le=1000, description="flagged and close rows to return each (all are written to "
                                                     "state)")
    clean_output: str | None = Field(None, description="write the rows that do not count against the file here "
                                                       "(JSONL), to check again and train on")
    record: bool = Field(True, description="record the verdict in the training file's data manifest (train "
                                           "refuses a failed or unchecked set)")


class Record(BaseModel):
    """The verdict as the data manifest keeps it (`train` reads it, `aci.training.gates`)."""

    verdict: Literal["pass", "fail"]
    verdict_text: str = Field(description="the verdict in words: what counted, and what could not be checked")
    mode: Mode
    reference: str
    reference_sha256: str
    rows: int
    references: int = Field(description="reference items read")
    indexed: int = Field(description="reference items the SIMPLE n-gram score checks (others are too short for it)")
    skipped_references: int = Field(description="reference items too short for the SIMPLE n-gram score")
    coverage: dict[str, int] = Field(description="reference items per rule: judge (the SIMPLE n-gram score), short "
                                                 "(exact and normalised match of the items too short for it), "
                                                 "close (close variants), unchecked (by neither judge nor short)")
    threshold: float | None
    tolerated_rows: int
    flagged: int = Field(description="rows holding a test item (labels judge, stricter, short)")
    judge_flagged: int = Field(description="of them, rows the SIMPLE n-gram score flags (label judge)")
    stricter_flagged: int = Field(description="of them, rows only the stricter checks flag")
    short_flagged: int = Field(description="of them, copies of items too short for the SIMPLE n-gram score")
    close: int = Field(description="other rows that closely resemble a specific test item (label close)")
    close_counted: bool = Field(description="whether close rows count against the file (the strict profile)")
    counted: int = Field(description="rows that count against the file: flagged, close if counted, and the "
                                     "task's provided tool's")
    shared_tool: shared.SharedVerdict | None = Field(None, description="the verdict of the task's provided "
                                                                       "../contamination_check.py (strict profile)")
    lines: list[int] = Field(default_factory=list, description="lines of the counted rows (first 200)")


class Result(Record):
    """The record and what the tool shows besides: the rows, the files written, the warnings."""

    path: str
    sha256: str = Field(description="hash of the training bytes scanned: the verdict holds for these bytes only")
    opens_train_gate: bool = Field(description="whether this result lets `train` use the file under these rules")
    contaminated: list[dict] = Field(default_factory=list, description="line, id, label (judge|stricter|short), "
                                                                       "score, matches (test item, its line and "
                                                                       "excerpt, score, component, label)")
    close_rows: list[dict] = Field(default_factory=list, description="the close rows, the same way (label close), "
                                                                     "each match with what of the item the row "
                                                                     "holds (matched: numbers, words)")
    clean_output: str | None = None
    kept_rows: int | None = None
    manifest: str | None = None
    seconds: float
    warnings: list[str] = Field(default_factory=list)


@dataclass
class _Inputs:
    path: Path
    ref: Path
    ref_data: bytes  # the reference, read once: the index is built from the bytes its digest is of
    ref_digest: str
    threshold: float
    warnings: list[str]


def check_file(req: ContaminationRequest, ctx: Context) -> Result:
    """Check `req.path` against the reference, apply the profile's policy, record the verdict."""
    from aci import contamination as C
    from aci.training import gates

    inp = _inputs(req, ctx)
    path, ref, warnings = inp.path, inp.ref, inp.warnings
    clean_path = ctx.path(req.clean_output, what="clean output", kind="file") if req.clean_output else None
    if clean_path in (path, ref):  # refused before the scan, and before the reference is pinned
        raise ACIError("--clean-output must be a new file, not the training set or the reference")
    started = time.perf_counter()
    declared: set[str] = set()
    with _reading(path) as scanned:  # streamed: the check keeps per-row findings, never the file
        report = C.check(C.reference_items(ref, inp.ref_data), C.training_rows(path, declared, scanned), req.mode,
                         inp.threshold)
    digest = scanned.hexdigest()
    for name in sorted(declared):
        ctx.rules.check_dataset_name(name)
    tool = shared.beside(ctx.workdir, shared.TOOL) if ctx.rules.strict and req.mode == "simple" else None
    if tool:
        with _reading(path, digest) as again:
            theirs = shared.run(tool, ref, C.training_rows(path, None, again), ctx.state.root / "cache" / "tiktoken")
    else:
        theirs = None
    seconds = time.perf_counter() - started
    gates.pin_at_first_check(ctx, ref, inp.ref_digest)
    counted = _counted(report, theirs, ctx.rules.strict)
    record = _record(req, ctx, inp, report, theirs, counted)
    limits = ctx.rules.profile.contamination
    if report.skipped:
        rule = C.SimpleIndex.SKIP_RULE if req.mode == "simple" else C.LongNgramIndex.SKIP_RULE
        warnings.append(f"{len(report.skipped)} of the {report.references} test items are too short for the SIMPLE "
                        f"n-gram score ({rule}), e.g. {', '.join(report.skipped[:3])}: "
                        + (f"{report.coverage['short']} of them checked by exact and normalised match only"
                           if "short" in report.coverage else "not checked"))
    closed = gates.contamination_gate(ctx, record)
    if closed and record["verdict"] == "pass" and limits.required_before_training:
        warnings.append(f"this pass does not let `train` use {path.name}: it {closed}")
    if theirs and theirs.verdict == "not-checked":
        warnings.append(f"not checked by the task's provided {shared.TOOL}: {theirs.reason}")
    kept = _write_clean(path, digest, clean_path, set(counted)) if clean_path else None
    mpath = None
    if req.record:
        side = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in report.flagged + report.close).encode()
        manifest.update(ctx.state, path, "contamination", Record(**record).model_dump(mode="json"), role="train",
                        tool="contamination", message=f"contamination {record['verdict_text']} ({path.name} "
                                                      f"against {ref.name}, {req.mode})",
                        extra_files={SIDE_FILE: side}, sha256=digest)
        mpath = str(ctx.state.root / manifest.rel(path))
    if record["verdict"] == "fail":
        warnings.insert(0, ctx.rules.refuse("no-test-data", f"{len(counted)} row(s) count against the file, "
                                                            f"{limits.tolerated_rows} tolerated").args[0])
    gate_open = closed is None or (record["verdict"] == "pass" and not limits.required_before_training)
    return Result(**record, path=str(path), sha256=digest, opens_train_gate=gate_open,
                  contaminated=report.flagged[:req.show], close_rows=report.close[:req.show],
                  clean_output=str(clean_path) if clean_path else None, kept_rows=kept, manifest=mpath,
                  seconds=round(seconds, 2), warnings=warnings)


def _inputs(req: ContaminationRequest, ctx: Context) -> _Inputs:
    """The files and the threshold a check may run on: refused when the rules forbid them."""
    from aci.training import gates

    path = ctx.path(req.path, must_exist=True, what="training set")
    pin = ctx.card.reference if ctx.card else None
    if not req.reference and not pin:
        raise ACIError("no --reference given and none pinned in the run card: pass the benchmark's test items")
    ref = gates.reference_path(ctx, req.reference or pin["path"])
    if path == ref:
        raise ACIError("the training set and the reference are the same file")
    rules, limits = ctx.rules, ctx.rules.profile.contamination
    # The reference *is* the benchmark's data, so only the training side is checked against the banned list.
    for name in [path.name, *req.sources]:
        rules.check_dataset_name(name)
    threshold = req.threshold if req.threshold is not None else limits.threshold
    if rules.strict and threshold > limits.threshold:
        raise rules.refuse("no-test-data", f"threshold {threshold} is looser than the profile's {limits.threshold}")
    ref_data = _read(ref)
    ref_digest = hashlib.sha256(ref_data).hexdigest()
    warnings = []
    if pin and pin["path"] == str(ref) and pin["sha256"] != ref_digest:
        if rules.strict:
            raise rules.refuse("no-test-data", f"the pinned reference {ref} changed since it was pinned (sha256 "
                                               f"{pin['sha256'][:12]} then, {ref_digest[:12]} now)")
        warnings.append(f"the pinned reference {ref} changed since it was pinned")
    return _Inputs(path, ref, ref_data, ref_digest, threshold, warnings)


def _counted(report, theirs: shared.SharedVerdict | None, strict: bool) -> dict[int, int]:
    """The rows that count against the file (0-based position -> line): every copy of a test item, the
    close variants under the strict profile, and what the task's provided tool flagged."""
    counted = {r["row"]: r["line"] for r in report.flagged}
    if strict:
        counted.update({r["row"]: r["line"] for r in report.close})
    if theirs:
        counted.update(theirs.rows)
    return counted


def _record(req: ContaminationRequest, ctx: Context, inp: _Inputs, report, theirs, counted: dict[int, int]) -> dict:
    """The `Record` fields of a check."""
    from aci import contamination as C

    limits = ctx.rules.profile.contamination
    labels = {label: sum(r["label"] == label for r in report.flagged) for label in C.COPIES}
    record = dict(
        verdict="pass" if len(counted) <= limits.tolerated_rows else "fail", mode=req.mode, reference=str(inp.ref),
        reference_sha256=inp.ref_digest, rows=report.rows, references=report.references, indexed=report.indexed,
        skipped_references=len(report.skipped), coverage=report.coverage,
        threshold=inp.threshold if req.mode == "simple" else None, tolerated_rows=limits.tolerated_rows,
        flagged=len(report.flagged), judge_flagged=labels["judge"], stricter_flagged=labels["stricter"],
        short_flagged=labels["short"], close=len(report.close), close_counted=ctx.rules.strict, counted=len(counted),
        shared_tool=theirs, lines=sorted(counted.values())[:200])
    record["verdict_text"] = _verdict_text(record)
    return record


def _verdict_text(r: dict) -> str:
    """`pass` or `fail`, what counted, and the reference items no rule that fails a file could check."""
    text = f"{r['verdict']}: {r['counted']} of {r['rows']} rows count against the file"
    unchecked = r["coverage"].get("unchecked", 0)
    if unchecked:
        text += f"; {unchecked} of {r['references']} test items were not checked (too short for any rule)"
    if r["close"] and not r["close_counted"]:
        text += f"; {r['close']} close variants reported, not counted under this profile"
    theirs = r["shared_tool"]
    if theirs is not None:
        text += {"pass": "; the task's provided tool: pass", "fail": f"; the task's provided tool flagged "
                                                                    f"{theirs.flagged}",
                 "not-checked": "; not checked by the task's provided tool"}[theirs.verdict]
    return text


def _read(path: Path) -> bytes:
    with _opened(path) as f:
        return f.read()


def _opened(path: Path) -> BinaryIO:
    regular_only(path, "data file")  # before open(): a FIFO would block it
    try:
        return open(path, "rb")
    except IsADirectoryError:
        raise ACIError(f"data file {path} is a directory, expected a .jsonl or .json file") from None


@contextmanager
def _reading(path: Path, expect: str | None = None) -> Iterator[HashingReader]:
    """`path` open for one streamed pass, hashed as it is read; with `expect` (the digest of the bytes
    scanned) a pass that meets other bytes ends in an ACIError."""
    with _opened(path) as f:
        yield HashingReader(f, path, expect)


def _write_clean(src: Path, digest: str, dst: Path, drop: set[int]) -> int:
    """The rows of `src` whose 0-based position is not in `drop`, as JSONL, streamed into a file that
    replaces `dst` atomically once `src` has been read to its end as the bytes scanned (`digest`): a
    file that changed since leaves `dst` as it was."""
    from aci.state import atomic_writer
    from aci.tasks import read_rows

    kept = 0
    with _reading(src, digest) as f, atomic_writer(dst) as out:
        for k, (_, row) in enumerate(read_rows(src, f)):
            if k not in drop:
                out.write((json.dumps(row, ensure_ascii=False) + "\n").encode())
                kept += 1
    return kept
