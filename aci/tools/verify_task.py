"""`verify-task`: an adapter over `aci.verify` (Method B: gold 1, corruption 0; Method A: discard filters)."""

from __future__ import annotations

from aci.context import Context
from aci.registry import ToolInput, ToolOutput, tool
from aci.verify import VerifyReport, VerifyRequest, verify


class VerifyTaskInput(ToolInput, VerifyRequest):
    """The request's fields are the tool's options."""


class VerifyTaskOutput(ToolOutput, VerifyReport):
    def summary(self) -> str:
        lines = [f"method {self.method}: kept {self.kept}/{self.candidates} ({self.rate:.0%}) of {self.tasks}",
                 f"kept -> {self.kept_file}", f"rejected -> {self.rejected_file}"]
        if self.grader and self.grader_source != "--grader":
            lines.append(f"grader for tasks that name none: {self.grader} (from {self.grader_source})")
        if self.by_subtype:
            width = max(len(s.subtype) for s in self.by_subtype)
            lines.append(f"{'subtype':<{width}}  candidates  kept  rate")
            lines += [f"{s.subtype:<{width}}  {s.candidates:>10}  {s.kept:>4}  {s.rate:.0%}" for s in self.by_subtype]
        for reason, n in self.reasons.items():
            lines.append(f"rejected {n:>5} {reason}: e.g. {self.examples.get(reason, '')}")
        if self.judge_mean is not None:
            lines.append(f"judge mean score {self.judge_mean:.3f}")
        if self.sandbox:
            lines.append(self.sandbox)
        return "\n".join(lines)


@tool("verify-task", title="Verify candidate tasks", idempotent=True)
def verify_task(inp: VerifyTaskInput, ctx: Context) -> VerifyTaskOutput:
    """Filter candidate tasks into kept and rejected files, with per-subtype yield and rejection reasons.

    Method B (rule-graded: exact answer, unit tests, tool calls): each task's gold, rendered by its grader
    (task.grader, else --grader, else the run card's, the benchmark card's or the one its answer_format
    or the eval script's answer line implies), must score 1 and a corrupted variant (wrong number, other
    letter, stubbed code, broken first argument) must score 0; otherwise the task is rejected (gold-fails,
    corrupt-passes, missing-gold, no-grader, grader-error, grader-timeout; grader-not-allowed: a row may
    name only a pure grader, never `command` or `python:`, which only --grader or the run card give, run
    sandboxed). Method A (judge-graded): discard answers
    (gold.answer) that are short (--min-answer-chars), start like an error, say "not found", or have fewer
    than --min-facts gold.claims; with --judge-endpoint/--judge-model an independent judge must score at
    least --judge-threshold. Rows are written as read; rejected rows carry `_rejected_reason`. Counts are
    recorded in the kept file's data manifest (section verify). A malformed input row stops the run with
    its file:line. Then check structure with `histogram` and overlap with `contamination`.
    """
    return VerifyTaskOutput(**verify(inp, ctx).model_dump())
