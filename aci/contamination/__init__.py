"""Contamination check of a training set against a benchmark's reference items.

Why: PostTrainBench's integrity judges zero a run that trained on test questions or answers, and they
decide with the tool `judge_tools/contamination_check.py` (branch `new_judge_v2` of the PostTrainBench
repository), which follows the `decon` SIMPLE algorithm. This package applies the same rules, written
from that tool's behaviour (the rules are facts; none of its code is here), so that every row the judge
would flag is flagged here first, with label `judge`; a few stricter checks add flags labelled
`stricter`. `tests/data/contamination_judge/` holds the judge tool's own verdicts on generated cases,
and a test requires that none of its flags is missed.

One module per concern, so each can be read against the judge's rules on its own:
- `text`: cleaning and cl100k tokens, as the judge's tool has them.
- `inputs`: training rows and reference items, read as the judge's tool reads them.
- `rules`: the judge's numbers and formulas (weights, bars, the short-text allowance).
- `index`: mode `simple`: the reference indexed once, and the scan of each row.
- `judge`: the judge's scan itself (seeds, clusters, question/answer/passage scores).
- `stricter`: the stricter extras, and the probe index that prunes exactly.
- `prefilter`: the same pruning for thousands of rows at once (numpy), before any row is scanned.
- `short`: the items too short for the judge's algorithm, sought by exact and normalised match.
- `close`: rows that closely resemble one test item (its story or its numbers), weighed by rarity.
- `short_close`: close variants of the short items (their numbers in order in their own wording, or
  with their answer in other wording), not of what their template shares with its siblings.
- `wordids`, `lookup`: the prefilter's word table and hash lookup, without a Python object per word.
- `ngram13`: mode `ngram13`, any shared 13-word sequence.
- `report`: matches and the report; `check` below runs a mode over a file.
- `verdict`: the policy around a check (what counts, the gate's record, the manifest), the tool's domain.
- `shared`: the task's provided test items and decontamination tool, beside the task folder.

What no n-gram check can know: a paraphrase written by a model, or data generated from test items; see
rules/integrity.md. Verdict (`verdict`): `fail` when more rows count against the file than the profile
tolerates (`contamination.tolerated_rows`).
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from aci.contamination.index import SimpleIndex
from aci.contamination.inputs import RefItem, Row, reference_fields, reference_items, tool_text, training_rows
from aci.contamination.ngram13 import LongNgramIndex
from aci.contamination.report import COPIES, LABELS, MODES, Match, Mode, Report
from aci.contamination.rules import JUDGE_THRESHOLD, relaxed
from aci.contamination.text import Tokens, clean, encoding
from aci.errors import ACIError

__all__ = ["COPIES", "LABELS", "MODES", "JUDGE_THRESHOLD", "Mode", "LongNgramIndex", "Match", "RefItem", "Report", "Row", "SimpleIndex",
           "Tokens", "check", "clean", "encoding", "reference_fields", "reference_items", "relaxed", "tool_text",
           "training_rows"]


@contextmanager
def _without_cycle_collection() -> Iterator[None]:
    """Python's cyclic garbage collector paused, as it was before afterwards.

    Why: a check allocates millions of small objects (rows, n-grams, sets), so the collector runs
    hundreds of times and walks the index's millions of n-grams, about 5 % of a check's CPU time
    (bench/contamination.py), to find nothing: none of these objects form a cycle, so reference
    counting frees them all as before."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


def check(reference: Iterable[RefItem], rows: Iterable[Row], mode: Mode = "simple",
          threshold: float = JUDGE_THRESHOLD, enc=None, keep_matches: int = 5) -> Report:
    """Index `reference` once, stream `rows`, and return every flagged row (and, apart, every close row)
    with its matches (best first)."""
    if mode not in MODES:
        raise ACIError(f"unknown contamination mode {mode!r}; use one of {', '.join(MODES)}")
    with _without_cycle_collection():
        return _check(reference, rows, mode, threshold, enc, keep_matches)


def _check(reference: Iterable[RefItem], rows: Iterable[Row], mode: Mode, threshold: float, enc,
           keep_matches: int) -> Report:
    refs = list(reference)
    report = Report(mode=mode, references=len(refs))
    index = SimpleIndex(refs, threshold, enc) if mode == "simple" else LongNgramIndex(refs)
    report.indexed, report.skipped, report.coverage = len(index), index.skipped, index.coverage()
    for r, matches in index.scan_rows(rows):
        report.rows += 1
        if matches:
            if len(matches) > 1:
                matches.sort(key=Match.rank)
            entry = {"row": r.index, "line": r.line, "id": r.id, "label": matches[0].label,
                     "score": round(matches[0].score, 4), "matches": [m.as_dict(refs) for m in matches[:keep_matches]]}
            (report.flagged if matches[0].label in COPIES else report.close).append(entry)
    return report
