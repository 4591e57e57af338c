"""What a check finds: a match of one row against one reference item, and the report over a file.

Why apart: every mode (the judge's, the stricter extras, ngram13) reports in these terms, and the tool
writes them to the manifest; `label` says whether the judge's own algorithm flags the row (`judge`), only
our stricter checks do (`stricter`), it copies a test item too short for the judge (`short`), or it
only resembles one (`close`), so an agent knows which rows the judge's tool itself would flag.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

from aci.contamination.inputs import RefItem

Mode = Literal["simple", "ngram13"]  # simple: the judge's algorithm and ours around it; ngram13: 13-word overlap
MODES: tuple[str, ...] = get_args(Mode)
# Labels, strongest first: the judge's algorithm; our stricter checks; a short item's copy; a close variant
LABELS = ("judge", "stricter", "short", "close")
COPIES = LABELS[:3]  # a row with one of these holds a test item; `close` only resembles one
# A close match's component: what resembles the item (`close`'s rules, then `short_close`'s for short items)
SHORT_CLOSE = ("template", "reworded")
CLOSE_COMPONENTS = ("story", "numbers", *SHORT_CLOSE)


@dataclass
class Match:
    item: int  # position of the reference item (its RefItem.index)
    score: float
    required: float
    label: str  # one of LABELS
    component: str  # "combined" (the judge's weighted score), "question" or "answer" (alone), "ngram13";
    # short: "exact" or "normalised"; close: one of CLOSE_COMPONENTS
    question: float = 0.0
    answer: float | None = None
    passage: float | None = None
    matched: dict | None = None  # close: the item's numbers and words the row holds (`CloseIndex.matched`)

    def rank(self) -> tuple:
        """A row's matches sort by this, best first: by label, a close match by a short item's numbers and
        answer in other wording (`reworded`, its score a weight, not a share) after the others, then by
        score."""
        return LABELS.index(self.label), self.component == "reworded", -self.score, self.item

    def as_dict(self, refs: list[RefItem]) -> dict:
        out = {**refs[self.item].head, "label": self.label, "component": self.component,
               "score": round(self.score, 4), "required": round(self.required, 4)}
        if self.label in ("judge", "stricter"):  # the n-gram checks' question share; the others have none
            out["question"] = round(self.question, 4)
        if self.answer is not None:
            out["answer"] = round(self.answer, 4)
        if self.passage is not None:
            out["passage"] = round(self.passage, 4)
        if self.matched is not None:
            out["matched"] = self.matched
        return out


@dataclass
class Report:
    mode: str
    rows: int = 0
    references: int = 0
    indexed: int = 0
    skipped: list[str] = field(default_factory=list)  # the items the judge's algorithm skips
    coverage: dict[str, int] = field(default_factory=dict)  # reference items per rule that checked them
    flagged: list[dict] = field(default_factory=list)  # {"row", "line", "id", "label", "score", "matches"}
    close: list[dict] = field(default_factory=list)  # rows that only resemble test items, the same way

    @property
    def judge_flagged(self) -> int:
        return sum(1 for r in self.flagged if r["label"] == "judge")
