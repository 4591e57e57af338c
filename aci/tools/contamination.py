"""`contamination`: an adapter over `aci.contamination.verdict` (the overlap check, as a gate for `train`)."""

from __future__ import annotations

from aci.contamination.verdict import ContaminationRequest, Result, check_file
from aci.context import Context
from aci.registry import ToolInput, ToolOutput, tool


class ContaminationInput(ToolInput, ContaminationRequest):
    """The request's fields are the tool's options."""


class ContaminationOutput(ToolOutput, Result):
    def summary(self) -> str:
        c = self.coverage
        lines = [self.verdict.upper() + self.verdict_text[len(self.verdict):],
                 f"  {self.flagged} rows hold a test item ({self.judge_flagged} flagged by the SIMPLE n-gram score, "
                 f"{self.stricter_flagged} only by stricter checks, {self.short_flagged} copies of short items); "
                 f"{self.close} close variants; tolerated {self.tolerated_rows}; mode {self.mode}"
                 + (f", threshold {self.threshold}" if self.threshold is not None else ""),
                 f"reference {self.reference}: {self.references} items; checked by the SIMPLE n-gram score "
                 f"{c.get('judge', c.get('ngram13', 0))}, by exact match only {c.get('short', 0)}, for close "
                 f"variants {c.get('close', 0)}, not checked {c.get('unchecked', 0)}"]
        for r in self.contaminated + self.close_rows:
            m = r["matches"][0]
            why = m.get("matched")
            lines.append(f"  line {r['line']}{' id ' + r['id'] if r['id'] else ''} [{r['label']}]: test item "
                         f"{m['reference']} (line {m['line']}) score {m['score']} ({m['component']}, needs "
                         f"{m['required']}): {m['excerpt']}" + (f" (matched numbers: {' '.join(why['numbers']) or '-'}; "
                                                                 f"words: {' '.join(why['words']) or '-'})" if why else ""))
        hidden = self.flagged + self.close - len(self.contaminated) - len(self.close_rows)
        if hidden:
            lines.append(f"  ... {hidden} more in the manifest's contamination.jsonl")
        if self.shared_tool:
            s = self.shared_tool
            lines.append(f"the task's provided tool ({s.tool}): {s.verdict}"
                         + (f", {s.flagged} rows flagged" if s.flagged else "") + (f" ({s.reason})" if s.reason else ""))
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
    alone, a copied worked answer alone) add label `stricter`; items too short for that score are sought
    by exact and normalised match (label `short`); rows that closely resemble one test item (its story
    with names, numbers or wording changed, or its numbers and operation in another story; a short
    item's numbers in its own wording under other names, or with its answer in other wording; matching
    the benchmark's style or templates is allowed) get label `close`, with what matched (numbers, words). Each match names the test item (id or
    #index, line, excerpt); the report gives how many items each rule checked. Under posttrainbench any
    flagged or close row fails the file, and when the task provides ../contamination_check.py it is run
    on the same rows too and its flags count; the default profile reports close rows without failing on
    them. The verdict is recorded in the training file's data manifest for the sha256 of the bytes
    scanned; `train` refuses a file that failed, changed, was never checked, or passed only in mode
    ngram13, with no item checked, or against another reference than the run card's pinned one (pinned
    at plan init, from ../test_data.json when the task provides it, or at the first check). Refuses
    training data whose file name or declared sources match a banned dataset. Use --clean-output to
    write the rows that pass."""
    return ContaminationOutput(**check_file(inp, ctx).model_dump())
