"""Verify candidate tasks: keep those whose gold is right (Method B) or whose answer is usable (A).

Method B (rule-graded benchmarks): the task's gold, rendered as a response, must score 1 under its grader
and a corrupted variant must score 0; a task that fails either is broken (wrong gold, or a grader that
cannot tell right from wrong) and is rejected with the reason. Method A (judge-graded benchmarks): the
discard filters of Auto-BenchMax on the executed answer (empty, error, "not found", too few extracted
facts) and, with a judge endpoint, an independent judge score. Kept and rejected rows are written as
they were read (rejected ones with `_rejected_reason`), and the counts go to the kept file's manifest.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from aci import manifest
from aci.context import Context
from aci.default_grader import card_grader
from aci.errors import ACIError
from aci.graders import SPEC_HELP, code_sandbox, grader_for, parse_spec, task_spec
from aci.graders.base import GraderTimeout
from aci.graders.sandbox import record

NOT_FOUND = [
    r"\bnot found\b",
    r"\bno (?:matching |relevant )?(?:results?|matches|records?|data|information)\b",
    r"\b(?:could not|couldn't|cannot|can't|unable to) (?:find|locate)\b",
    r"\bdoes(?: not|n't) exist\b",
    r"\bno such\b",
]
ERROR_PREFIXES = [
    r"error\b", r"exception\b", r"traceback\b", r"failed\b", r"failure\b", r"\[error\]", r"\{\s*\"error\"",
    r"sorry,? (?:an error|something went wrong)",
]


class VerifyRequest(BaseModel):
    """What to verify and how: the `verify-task` tool's options."""

    model_config = ConfigDict(extra="forbid")

    tasks: str = Field(description="candidate tasks: JSONL or a JSON array of task records (or chat, prompt/"
                                   "completion, question/answer rows)")
    method: Literal["B", "A"] = Field("B", description="B: gold scores 1 and its corruption 0 (rule-graded); "
                                                       "A: discard filters on gold.answer/gold.claims (judge-graded)")
    kept: str | None = Field(None, description="output for kept rows (default <stem>.kept.jsonl beside the input)")
    rejected: str | None = Field(None, description="output for rejected rows (default <stem>.rejected.jsonl)")
    grader: str | None = Field(None, description=f"Method B: grader for tasks without one: {SPEC_HELP}")
    min_answer_chars: int = Field(20, ge=0, description="Method A: shorter answers are discarded as empty")
    min_facts: int = Field(3, ge=0, description="Method A: answers with fewer gold.claims are discarded")
    not_found_patterns: list[str] | None = Field(None, description="Method A: regexes (case-insensitive, searched) "
                                                                   "marking 'not found' answers; default a built-in list")
    error_patterns: list[str] | None = Field(None, description="Method A: regexes (case-insensitive) matched at the "
                                                               "start of the answer marking error answers")
    judge_endpoint: str | None = Field(None, description="Method A: OpenAI-compatible endpoint of an independent "
                                                         "judge, e.g. http://127.0.0.1:8000/v1 (loopback only under "
                                                         "the posttrainbench profile)")
    judge_model: str | None = Field(None, description="Method A: the judge's model name")
    judge_rubric: str | None = Field(None, description="Method A: the judge's rubric")
    judge_threshold: float = Field(0.5, ge=0, le=1, description="Method A: judge scores below this are discarded")
    workers: int | None = Field(None, ge=1, le=32, description="tasks checked in parallel (default min(4, CPUs))")
    unsafe_grader: bool = Field(False, description="Method B: let unit-tests run the code as root where no sandbox "
                                                   "can drop root (rule sandbox; journaled as a weakening)")


class SubtypeYield(BaseModel):
    subtype: str
    candidates: int
    kept: int
    rate: float


class VerifyReport(BaseModel):
    """What a verify run did: counts, yield per subtype, rejection reasons, where the rows went."""

    method: str
    tasks: str
    kept_file: str
    rejected_file: str
    candidates: int
    kept: int
    rejected: int
    rate: float = Field(description="kept / candidates")
    by_subtype: list[SubtypeYield] = Field(default_factory=list, description="yield per sub-type (the records' "
                                                                            "own labels)")
    grader: str | None = Field(None, description="Method B: the grader for tasks that name none")
    grader_source: str = Field("none", description="where that grader came from: --grader, the run card or the benchmark card")
    reasons: dict[str, int] = Field(default_factory=dict, description="rejections per reason")
    examples: dict[str, str] = Field(default_factory=dict, description="first rejection per reason")
    judge_mean: float | None = Field(None, description="Method A: mean judge score over judged answers")
    manifest: str = Field(description="state file holding these counts")
    sandbox: str | None = Field(None, description="where graded code ran (unit-tests), and what that sandbox lacks")


class AtomicLines:
    """A JSONL output written to a temporary file beside it and renamed into place only when complete."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, self.tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        self.file = os.fdopen(fd, "w", encoding="utf-8")

    def write(self, row: dict) -> None:
        self.file.write(json.dumps(row, ensure_ascii=False) + "\n")

    def commit(self) -> None:
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        os.replace(self.tmp, self.path)

    def discard(self) -> None:
        self.file.close()
        Path(self.tmp).unlink(missing_ok=True)


def _patterns(values: list[str] | None, default: list[str], what: str) -> list[re.Pattern]:
    out = []
    for p in default if values is None else values:
        try:
            out.append(re.compile(p, re.IGNORECASE))
        except re.error as e:
            raise ACIError(f"{what} {p!r} is not a valid regular expression: {e}") from None
    return out


Verdict = tuple[str | None, str, float | None]  # (rejection reason id or None, detail, judge score)


def method_b(inp: VerifyRequest, ctx: Context, check_host: Callable[[str], None],
             default_spec: str | None = None) -> Callable[[dict], Verdict]:
    spec_text = inp.grader or default_spec
    default = parse_spec(spec_text) if spec_text else None

    def check(task: dict) -> Verdict:
        try:
            spec = task_spec(task, default)
        except ACIError as e:  # a row naming a grader that runs a program: refused, never built
            return "grader-not-allowed", str(e), None
        if spec is None:
            return "no-grader", ("task names no grader, no --grader was given and the benchmark card records "
                                 "neither a grader nor an answer format"), None
        try:
            grader = grader_for(spec, workdir=ctx.workdir, check_host=check_host, unsafe_grader=inp.unsafe_grader)
        except ACIError as e:
            if e.rule:
                raise
            return "grader-error", str(e), None
        try:
            good = grader.score(task, *grader.gold(task))
            if good.score < 1:
                return "gold-fails", f"gold scored {good.score:.2f}: {good.reason}", None
            bad = grader.score(task, *grader.corrupt(task))
            if bad.score > 0:
                return "corrupt-passes", f"corrupted gold scored {bad.score:.2f}: {bad.reason}", None
        except GraderTimeout as e:  # rendering the corruption ran past the grader's time limit
            return "grader-timeout", str(e), None
        except ACIError as e:
            if e.rule:
                raise
            return "missing-gold", str(e), None
        return None, f"gold 1, corrupted {bad.score:.0f}", None

    return check


def method_a(inp: VerifyRequest, check_host: Callable[[str], None]) -> Callable[[dict], Verdict]:
    not_found = _patterns(inp.not_found_patterns, NOT_FOUND, "not-found pattern")
    errors = _patterns(inp.error_patterns, ERROR_PREFIXES, "error pattern")
    judge = None
    if inp.judge_endpoint or inp.judge_model:
        if not (inp.judge_endpoint and inp.judge_model):
            raise ACIError("an independent judge needs both --judge-endpoint and --judge-model")
        judge = grader_for({"type": "judge", "endpoint": inp.judge_endpoint, "model": inp.judge_model,
                            "rubric": inp.judge_rubric}, check_host=check_host)

    def check(task: dict) -> Verdict:
        gold = task["gold"]
        answer = gold.get("answer") if isinstance(gold.get("answer"), str) else ""
        text = answer.strip()
        if len(text) < inp.min_answer_chars:
            return "empty-answer", f"answer has {len(text)} characters, under {inp.min_answer_chars}", None
        for p in errors:
            if p.match(text):
                return "error-answer", f"answer starts like an error ({p.pattern}): {text[:60]!r}", None
        for p in not_found:
            m = p.search(text)
            if m:
                return "not-found", f"answer says {m.group(0)!r}", None
        claims = [c for c in gold.get("claims") or [] if c.strip()]
        if len(claims) < inp.min_facts:
            return "too-few-facts", f"{len(claims)} extracted facts, under {inp.min_facts}", None
        if judge is None:
            return None, "passed the discard filters", None
        verdict = judge.score(task, answer)
        if verdict.score < inp.judge_threshold:
            return ("judge-below-threshold", f"judge scored {verdict.score:.2f} < {inp.judge_threshold}: "
                    f"{verdict.reason}", verdict.score)
        return None, f"judge scored {verdict.score:.2f}", verdict.score

    return check


def ordered(fn: Callable, items: Iterable, workers: int) -> Iterator:
    """`map(fn, items)` over a thread pool, in order, holding at most a few items per worker in flight."""
    if workers <= 1:
        yield from map(fn, items)
        return
    with ThreadPoolExecutor(workers) as pool:
        window: deque = deque()
        for item in items:
            window.append(pool.submit(fn, item))
            if len(window) >= workers * 4:
                yield window.popleft().result()
        while window:
            yield window.popleft().result()


def _label(row: dict, task: dict) -> str:
    """The yield's label: the record's own sub-type (with its own type when it states one), never a type
    the reader inferred (`copy`, not `math/copy`); the type only when there is no sub-type."""
    sub = task.get("subtype")
    if not sub:
        return task["type"]
    own_type = row.get("type") if isinstance(row.get("type"), str) else None
    return f"{own_type}/{sub}" if own_type else sub


class Files(NamedTuple):
    tasks: Path
    kept: Path
    rejected: Path


def _files(inp: VerifyRequest, ctx: Context) -> Files:
    """The tasks file and where its kept and rejected rows go (beside it by default): three different files."""
    src = ctx.path(inp.tasks, must_exist=True, what="tasks file")
    stem = src.name.removesuffix(".jsonl").removesuffix(".json")
    kept_path = ctx.path(inp.kept or src.with_name(f"{stem}.kept.jsonl"), what="kept file", kind="file")
    rejected_path = ctx.path(inp.rejected or src.with_name(f"{stem}.rejected.jsonl"), what="rejected file", kind="file")
    if len({src, kept_path, rejected_path}) < 3:
        raise ACIError(f"the tasks, kept and rejected files must be three different files ({src}, {kept_path}, "
                       f"{rejected_path})")
    return Files(src, kept_path, rejected_path)


def _default_grader(inp: VerifyRequest, ctx: Context) -> tuple[str | None, str]:
    """(grader, where it came from) for the tasks that name none: Method B's, from --grader or the cards."""
    if inp.grader:
        return inp.grader, "--grader"
    return card_grader(ctx) if inp.method == "B" else (None, "none")


@dataclass
class Tally:
    """What the checked rows add up to."""

    per_subtype: dict[str, list[int]] = field(default_factory=dict)  # label -> [candidates, kept]
    reasons: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)  # reason -> its first rejection
    judged: list[float] = field(default_factory=list)

    @property
    def candidates(self) -> int:
        return sum(c for c, _ in self.per_subtype.values())

    @property
    def kept(self) -> int:
        return sum(k for _, k in self.per_subtype.values())

    def yields(self) -> list[SubtypeYield]:
        return [SubtypeYield(subtype=s, candidates=c, kept=k, rate=round(k / c, 4))
                for s, (c, k) in sorted(self.per_subtype.items())]

    def judge_mean(self) -> float | None:
        return round(sum(self.judged) / len(self.judged), 4) if self.judged else None


def _sort(checked: Iterable[tuple[int, dict, dict, Verdict]], files: Files) -> Tally:
    """Write each checked row, as read, to the kept or the rejected file (with its reason), and tally it;
    both files are renamed into place only once every row is in, so a failure leaves neither half-written."""
    tally = Tally()
    kept_out, rejected_out = AtomicLines(files.kept), AtomicLines(files.rejected)
    try:
        for line, row, task, (reason, detail, judge_score) in checked:
            counts = tally.per_subtype.setdefault(_label(row, task), [0, 0])
            counts[0] += 1
            if judge_score is not None:
                tally.judged.append(judge_score)
            if reason is None:
                counts[1] += 1
                kept_out.write(row)
            else:
                tally.reasons[reason] += 1
                tally.examples.setdefault(reason, f"{task['id']} (line {line}): {detail}")
                rejected_out.write({**row, "_rejected_reason": f"{reason}: {detail}"})
    except BaseException:
        kept_out.discard()
        rejected_out.discard()
        raise
    kept_out.commit()
    rejected_out.commit()
    return tally


def _record(inp: VerifyRequest, ctx: Context, files: Files, tally: Tally) -> None:
    """The counts, in the kept file's manifest (what training and the report read back)."""
    result = {
        "method": inp.method,
        "source": str(files.tasks),
        "source_sha256": manifest.file_hash(files.tasks),
        "rejected_file": str(files.rejected),
        "candidates": tally.candidates,
        "kept": tally.kept,
        "rejected": tally.candidates - tally.kept,
        "by_subtype": [s.model_dump() for s in tally.yields()],
        "reasons": dict(tally.reasons.most_common()),
        "judge_mean": tally.judge_mean(),
    }
    manifest.update(ctx.state, files.kept, "verify", result, role="train", tool="verify-task",
                    message=f"verify-task method {inp.method}: kept {tally.kept}/{tally.candidates} of "
                            f"{files.tasks.name}")


def verify(inp: VerifyRequest, ctx: Context) -> VerifyReport:
    """Check every task of `inp.tasks`, write kept and rejected rows atomically, record the counts."""
    from aci.tasks import iter_tasks

    files = _files(inp, ctx)

    def check_host(host: str) -> None:
        ctx.rules.check_host(host, judge=True)

    grader, grader_source = _default_grader(inp, ctx)
    check = method_b(inp, ctx, check_host, grader) if inp.method == "B" else method_a(inp, check_host)
    specs: dict[str, str | dict] = {}  # the grader specs met, once each, to say where graded code ran

    def run(item: tuple[int, dict, dict]) -> tuple[int, dict, dict, Verdict]:
        line, row, task = item
        if inp.method == "B":
            try:
                spec = task_spec(task, grader)
            except ACIError:
                spec = None  # refused: `check` says why, and nothing of it runs
            specs.setdefault(json.dumps(spec, sort_keys=True), spec)
        return line, row, task, check(task)

    tally = _sort(ordered(run, iter_tasks(files.tasks), inp.workers or min(4, os.cpu_count() or 1)), files)
    box = code_sandbox(specs.values(), unsafe_grader=inp.unsafe_grader)
    _record(inp, ctx, files, tally)
    candidates, kept = tally.candidates, tally.kept
    return VerifyReport(
        method=inp.method, tasks=str(files.tasks), kept_file=str(files.kept), rejected_file=str(files.rejected),
        candidates=candidates, kept=kept, rejected=candidates - kept,
        rate=round(kept / candidates, 4) if candidates else 0.0, by_subtype=tally.yields(),
        reasons=dict(tally.reasons.most_common()), examples=tally.examples, judge_mean=tally.judge_mean(),
        manifest=manifest.rel(files.kept), grader=grader, grader_source=grader_source,
        sandbox=record(ctx, box, "verify-task") if box else None,
    )
