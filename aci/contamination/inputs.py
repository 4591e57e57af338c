"""The two inputs of a check, read as the judge's tool reads them: training rows and reference items.

Why apart: the judge's verdict depends on which text of a row it sees, so the reading rules are facts
to keep in one place. Training rows: the row's texts in reading order (`aci.tasks.row_texts`: turns in
order, prompt then completion, passage, question, answer), and also the text the judge's tool takes
when given the file itself (`text`, else the first of `text`, `content`, `input`, `prompt`,
`question`, else all string values). Reference rows (a JSON array or JSONL): question = the first
non-blank string among `question`, `input`, `prompt`, `text`, `content`; answer = among `answer`,
`output`, `response`, `target`; passage = among `passage`, `context`, `document`; a row with none of
these is one question made of all its string values. (Task records and chats, which that reading
cannot use, are read by `aci.tasks.record_texts`.) A row with a `fingerprint` repeating an earlier
(`eval_key`, `fingerprint`) is skipped by the index.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import BinaryIO

from aci.contamination.text import clean
from aci.errors import ACIError, where

REF_QUESTION = ("question", "input", "prompt", "text", "content")
REF_ANSWER = ("answer", "output", "response", "target")
REF_PASSAGE = ("passage", "context", "document")
TOOL_INPUT = ("text", "content", "input", "prompt", "question")  # what the judge's tool reads of a row
EXCERPT = 80


@dataclass(slots=True)
class Row:
    index: int  # 0-based position in the file (two rows of a compact JSON array can share a line)
    line: int
    id: str | None
    text: str  # the row's texts in reading order, one per line
    tool_text: str | None = None  # what the judge's tool reads of the row, when that is not `text`
    tool_inside: bool = False  # tool_text is a run of text's words, so only worth tokenising if text matched


def tool_text(row: dict) -> str | None:
    """The text the judge's tool takes from a JSONL row given to it as is (None: it skips the row or
    cannot read it): `text`, else the first of TOOL_INPUT present, else all string values joined."""
    if len(row) == 1 and type(row.get("messages")) is list:  # the usual chat row: no string value to read
        return None
    text = row.get("text")
    if text is None:
        for key in TOOL_INPUT:  # a loop, not next() over a generator: this runs for every row
            if key in row:
                text = row[key]
                break
    if text is None:
        text = " ".join([v for v in row.values() if isinstance(v, str)])
    return text if isinstance(text, str) and text else None


def training_rows(path: Path, sources: set[str] | None = None, content: bytes | BinaryIO | None = None
                  ) -> Iterator[Row]:
    """The rows of a training file as text (`aci.tasks.row_texts`), streamed (from `content` when given:
    its bytes, or a binary stream such as a `HashingReader`); declared dataset names (`source`/`dataset`,
    also under `meta`) are collected into `sources` on the way, so the banned-dataset check needs no
    second pass."""
    from aci.tasks import read_rows, row_texts

    name = str(path)
    for k, (n, row) in enumerate(read_rows(path, content)):
        try:
            texts = row_texts(row, name)
        except ACIError:  # read again to name its line: formatting it for every row cost more than the rest
            texts = row_texts(row, f"{name}:{n}")
        text = "\n".join(texts)
        if not text or text.isspace():
            raise ACIError(f"{where(path, n)}: no text in this row")
        if sources is not None:
            meta = row.get("meta") if isinstance(row.get("meta"), dict) else {}
            for holder in (row, meta):
                for key in ("source", "dataset"):
                    if isinstance(holder.get(key), str):
                        sources.add(holder[key])
        seen = tool_text(row)
        seen = None if seen == text else seen
        # Words inside the row's text are tokens inside its tokens (a cleaned text's pre-tokens end at
        # spaces), so they can only match where the whole row could.
        inside = seen is not None and f" {clean(seen)} " in f" {clean(text)} "
        rid = row.get("id")
        yield Row(k, n, None if rid is None or not isinstance(rid, (str, int)) else str(rid), text, seen, inside)


class HashingReader:
    """A binary file read through, the sha256 of every byte read kept on the way; given `expect`, the
    digest of an earlier read, an ACIError at the end of the file when these bytes differ from those.

    Why: a verdict holds for the bytes the check parsed. Hashing them as they stream past, in the one
    read that parses them, binds the verdict to them without holding the file in memory (which cost a
    check about 1 MB per MB of input). A later pass over the same file (the clean copy, the task's own
    tool) reads it again through `expect`, so it cannot act on bytes other than those the verdict is for.
    """

    def __init__(self, f: BinaryIO, path: Path, expect: str | None = None):
        self.f, self.path, self.expect = f, path, expect
        self.hash = hashlib.sha256()
        self.pos = self.hashed = 0  # where the next read starts; how many bytes from the start are hashed

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n)
        return self._seen(data, at_end=not data or n is None or n < 0)

    def readline(self, n: int = -1) -> bytes:
        data = self.f.readline(n)
        return self._seen(data, at_end=not data)

    def seek(self, pos: int) -> int:
        """Go back to `pos` (`read_rows` reads the head, then starts over): bytes read again are not
        hashed again."""
        self.pos = self.f.seek(pos)
        return self.pos

    def hexdigest(self) -> str:
        return self.hash.hexdigest()

    def _seen(self, data: bytes, at_end: bool) -> bytes:
        start, self.pos = self.pos, self.pos + len(data)
        if self.pos > self.hashed:
            self.hash.update(memoryview(data)[self.hashed - start:])
            self.hashed = self.pos
        if at_end and self.expect is not None and self.hexdigest() != self.expect:
            raise ACIError(f"{self.path} changed while it was being checked (sha256 {self.expect[:12]} when "
                           f"scanned, {self.hexdigest()[:12]} now): run the check again on the finished file")
        return data


@dataclass
class RefItem:
    index: int  # 0-based position in the reference file: the judge's `ref_index`
    line: int
    id: str | None
    question: str = ""
    answer: str = ""
    passage: str = ""
    duplicate_key: str | None = None  # (eval_key, fingerprint) when the row has a fingerprint

    @property
    def name(self) -> str:
        return self.id if self.id is not None else f"#{self.index}"

    @cached_property
    def head(self) -> dict:
        """What a report says of the item in each match against it (copied into each: the same items are
        named thousands of times)."""
        return {"reference": self.name, "item": self.index, "line": self.line, "excerpt": self.excerpt}

    @cached_property
    def excerpt(self) -> str:
        """A short excerpt of the item; once per item, since a report names the same items many times."""
        text = " ".join((self.question or self.answer or self.passage).split())
        return text if len(text) <= EXCERPT else text[:EXCERPT - 3] + "..."


def reference_fields(row: dict) -> dict[str, str]:
    """Question, answer and passage of a reference row, as the judge's tool reads them (see the module
    docstring); task records and chats, which that reading cannot use, through `record_texts`."""
    out = {}
    for part, keys in (("question", REF_QUESTION), ("answer", REF_ANSWER), ("passage", REF_PASSAGE)):
        value = next((row[k] for k in keys if isinstance(row.get(k), str) and row[k].strip()), None)
        if value is not None:
            out[part] = value
    if out:
        return out
    if "messages" in row or "gold" in row:
        from aci.tasks import record_texts

        return {k: v for k, v in record_texts(row).items() if v.strip()}
    joined = " ".join(v for v in row.values() if isinstance(v, str) and v.strip())
    return {"question": joined} if joined else {}


def reference_items(path: Path, content: bytes | None = None) -> Iterator[RefItem]:
    """Reference items of a JSONL or JSON-array file, in order, named by `id` or by their position."""
    from aci.tasks import read_rows

    for k, (n, row) in enumerate(read_rows(path, content)):
        fields = reference_fields(row)
        if not fields:
            raise ACIError(f"{where(path, n)}: reference row has no text; expected `question`/`answer`, "
                           f"chat `messages` or a task record")
        rid = row.get("id")
        fp = row.get("fingerprint")
        dup = json.dumps([row.get("eval_key", ""), fp], sort_keys=True, default=str) if fp else None
        yield RefItem(k, n, str(rid) if isinstance(rid, (str, int)) and rid != "" else None, duplicate_key=dup,
                      **fields)
