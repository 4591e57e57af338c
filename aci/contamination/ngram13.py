"""Mode `ngram13`: the classic contamination test, on cleaned words.

Why kept: it needs no tokenizer and catches long verbatim copies in any language. A row sharing any
13-word sequence with an item's question and answer is contaminated (score = share of that item's
13-grams found). Not the judge's algorithm, so it never opens the train gate under posttrainbench.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from aci.contamination.inputs import RefItem, Row
from aci.contamination.report import Match
from aci.contamination.text import clean

LONG_N = 13


class LongNgramIndex:
    """Every 13-gram of the items' cleaned words -> items; a row sharing one is contaminated."""

    SKIP_RULE = f"under {LONG_N} words"

    def __init__(self, refs: list[RefItem]):
        self.refs = refs
        self.items: list[int] = []
        self.skipped: list[str] = []
        self.post: dict[tuple, list[int]] = {}
        self.size: list[int] = []
        for r in refs:
            words = clean(f"{r.question}\n{r.answer}").split()
            if len(words) < LONG_N:
                self.skipped.append(r.name)
                continue
            i = len(self.items)
            self.items.append(r.index)
            grams = {tuple(words[k:k + LONG_N]) for k in range(len(words) - LONG_N + 1)}
            self.size.append(len(grams))
            for g in grams:
                self.post.setdefault(g, []).append(i)

    def __len__(self) -> int:
        return len(self.items)

    def coverage(self) -> dict[str, int]:
        return {"ngram13": len(self.items), "unchecked": len(self.skipped)}

    def scan_row(self, r: Row) -> list[Match]:
        return self.scan(clean(r.text).split())

    def scan_rows(self, rows: Iterable[Row]) -> Iterator[tuple[Row, list[Match]]]:
        return ((r, self.scan_row(r)) for r in rows)

    def scan(self, words: list[str]) -> list[Match]:
        hits: dict[int, set] = {}
        post = self.post
        for g in set(zip(*(words[k:] for k in range(LONG_N)), strict=False)):
            for i in post.get(g, ()):
                hits.setdefault(i, set()).add(g)
        return [Match(self.items[i], len(g) / self.size[i], 0.0, "stricter", "ngram13", len(g) / self.size[i])
                for i, g in hits.items()]
