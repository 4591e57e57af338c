"""Rows of a data file: JSONL streamed or a JSON array read whole, every error naming `file:line`, and the
loaders that turn rows into validated task records and SFT samples."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import BinaryIO

import msgspec

from aci.errors import ACIError, where
from aci.files import regular_only
from aci.tasks.adapters import json_kind, to_sample, to_task

_DECODER = msgspec.json.Decoder()  # strict JSON, read as `json` reads it; `_line_row` takes the rest
# The most one row may hold. Why: every reader holds a row whole, the contamination check some 40-60
# bytes per byte of it (its n-grams as Python tuples; a 20 MB line took 1.26 GB), and 8 MiB is some two
# million tokens, far beyond any training context: a longer row is a mistake (a file without newlines,
# a dump in one field).
MAX_ROW_BYTES = 8 << 20
CHUNK_BYTES = 1 << 20  # JSONL read this much at a time, plus the rest of its last line


def read_rows(path: Path | str, content: bytes | BinaryIO | None = None) -> Iterator[tuple[int, dict]]:
    """Yield `(line, row)` for each JSON object in a JSONL file (streamed) or a JSON array file.

    Raises ACIError naming `file:line` for a missing, empty or binary file, broken JSON, a row that
    is not an object, or a row longer than MAX_ROW_BYTES. Blank lines in JSONL are skipped. With `content`, those bytes are parsed in
    place of the file's (errors still name `path`): the training job reads a file once, checks its hash,
    and trains on exactly the bytes it hashed. `content` may also be a seekable binary stream at its start
    (left open), so that a caller can hash the bytes as they are parsed, without holding the file
    (`aci.contamination.inputs.HashingReader`).
    """
    path = Path(path)
    if content is None:
        regular_only(path, "data file")  # before open(): a FIFO would block it
    try:
        source = open(path, "rb") if content is None else io.BytesIO(content) if isinstance(content, bytes) else \
            nullcontext(content)
    except FileNotFoundError:
        raise ACIError(f"data file {path} does not exist") from None
    except IsADirectoryError:
        raise ACIError(f"data file {path} is a directory, expected a .jsonl or .json file") from None
    with source as f:
        head = f.read(4096)
        first = head.removeprefix(b"\xef\xbb\xbf").lstrip()[:1]
        f.seek(0)
        if not first:
            if b"\0" in head:
                raise ACIError(f"{where(path, 1)}: binary data (NUL byte), expected UTF-8 JSON lines")
            raise ACIError(f"{where(path, 1)}: empty file, expected one JSON object per line (JSONL) or a JSON array")
        if first == b"[":
            yield from _array_rows(path, f.read())
        else:
            yield from _jsonl_rows(path, f)


def _decode_line(path: Path, n: int, raw: bytes) -> str:
    nul = raw.find(b"\0")
    if nul >= 0:
        raise ACIError(f"{where(path, n)}: binary data (NUL byte at column {nul + 1}); expected UTF-8 JSON lines")
    try:
        return raw.decode("utf-8-sig" if n == 1 else "utf-8")
    except UnicodeDecodeError as e:
        raise ACIError(f"{where(path, n)}: not valid UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1}); "
                       f"is this a binary or differently encoded file?") from None


def _too_long(path: Path, n: int, size: str) -> ACIError:
    return ACIError(f"{where(path, n)}: a row of {size} is longer than the {MAX_ROW_BYTES >> 20} MiB one row may "
                    f"hold; split it into rows or shorten it")


def _jsonl_rows(path: Path, f) -> Iterator[tuple[int, dict]]:
    """The rows of a JSONL file, a chunk of whole lines at a time.

    Why: a `readline` and a `json` parse per line cost a large file's reading twice what this does. The
    usual line (one JSON object, then its newline) is parsed in place by msgspec, which reads strict
    JSON as `json` reads it and checks its UTF-8; any other (a BOM, a blank or broken line, a NUL
    byte, NaN, a lone surrogate, a row over the cap) goes through `_line_row`, which reads it as `json`
    does or names its error."""
    seen, n = False, 0
    decode = _DECODER.decode
    while chunk := f.read(CHUNK_BYTES):
        if chunk[-1:] != b"\n":  # its last line completed up to the cap and a little more, never whole
            chunk += f.readline(MAX_ROW_BYTES + 3)
        view, pos, size = memoryview(chunk), 0, len(chunk)
        while pos < size:
            n += 1
            eol = chunk.find(b"\n", pos)
            eol = size if eol < 0 else eol
            if eol - pos <= MAX_ROW_BYTES:
                try:
                    row = decode(view[pos:eol])
                    if type(row) is dict:
                        seen = True
                        yield n, row
                        pos = eol + 1
                        continue
                except msgspec.MsgspecError:
                    pass
            if (row := _line_row(path, n, chunk[pos:eol + 1])) is not None:
                seen = True
                yield n, row
            pos = eol + 1
    if not seen:
        raise ACIError(f"{where(path, 1)}: empty file (only blank lines), expected JSON objects")


def _line_row(path: Path, n: int, raw: bytes) -> dict | None:
    """Line `n` of a JSONL file as a row (None for a blank line), or the error that names it."""
    if len(raw) > MAX_ROW_BYTES and len(raw.rstrip(b"\r\n")) > MAX_ROW_BYTES:
        raise _too_long(path, n, f"over {MAX_ROW_BYTES >> 20} MiB")
    text = _decode_line(path, n, raw)
    if not text.strip():
        return None
    try:
        row = json.loads(text)
    except json.JSONDecodeError as e:
        hint = " (a pretty-printed object? write one object per line, or a JSON array)" if text.strip() == "{" else ""
        raise ACIError(f"{where(path, n)}: broken JSON at column {e.colno}: {e.msg}{hint}") from None
    if not isinstance(row, dict):
        raise ACIError(f"{where(path, n)}: expected a JSON object per line, got {json_kind(row)}")
    return row


def _array_rows(path: Path, data: bytes) -> Iterator[tuple[int, dict]]:
    if b"\0" in data:
        line = data.count(b"\n", 0, data.index(b"\0")) + 1
        raise ACIError(f"{where(path, line)}: binary data (NUL byte), expected a UTF-8 JSON array")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ACIError(f"{where(path, line)}: not valid UTF-8 (byte 0x{data[e.start]:02x})") from None
    decoder = json.JSONDecoder()
    pos, line = text.index("[") + 1, 1

    def skip(p: int) -> int:
        while p < len(text) and text[p] in " \t\r\n":
            p += 1
        return p

    def line_at(p: int) -> int:
        nonlocal line, last
        line += text.count("\n", last, p)
        last = p
        return line

    last = 0
    pos = skip(pos)
    if pos < len(text) and text[pos] == "]":
        raise ACIError(f"{where(path, line_at(text.index('[')))}: empty JSON array, expected objects")
    while True:
        try:
            row, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            raise ACIError(f"{where(path, e.lineno)}: broken JSON at column {e.colno}: {e.msg}") from None
        n = line_at(pos)
        if not isinstance(row, dict):
            raise ACIError(f"{where(path, n)}: expected a JSON object in the array, got {json_kind(row)}")
        if end - pos > MAX_ROW_BYTES and len(text[pos:end].encode()) > MAX_ROW_BYTES:
            raise _too_long(path, n, f"{len(text[pos:end].encode()) / (1 << 20):.1f} MiB")
        yield n, row
        pos = skip(end)
        if pos < len(text) and text[pos] == ",":
            pos = skip(pos + 1)
            continue
        if pos < len(text) and text[pos] == "]":
            if text[skip(pos + 1):].strip():
                raise ACIError(f"{where(path, line_at(skip(pos + 1)))}: unexpected data after the JSON array")
            return
        raise ACIError(f"{where(path, line_at(min(pos, len(text))))}: broken JSON array: expected ',' or ']'")


# -- loaders ------------------------------------------------------------------------------------------
def iter_tasks(path: Path | str, content: bytes | None = None) -> Iterator[tuple[int, dict, dict]]:
    """Stream `(line, raw row, validated task)`; for tools that write rows back as they were read.

    Rows without an `id` get `<file stem>-<line>`; a repeated id is an error at its line.
    """
    path = Path(path)
    seen: dict[str, int] = {}
    for n, row in read_rows(path, content):
        loc = where(path, n)
        task = to_task(row, loc, f"{path.stem}-{n}")
        if task["id"] in seen:
            raise ACIError(f"{loc}: duplicate task id {task['id']!r} (first at line {seen[task['id']]})")
        seen[task["id"]] = n
        yield n, row, task


def load_tasks(path: Path | str, content: bytes | None = None) -> Iterator[dict]:
    """Stream validated task records from `path`; ACIError at `file:line` on the first bad row."""
    for _, _, task in iter_tasks(path, content):
        yield task


def load_samples(path: Path | str) -> Iterator[dict]:
    """Stream validated SFT samples from `path`; ACIError at `file:line` on the first bad row."""
    path = Path(path)
    for n, row in read_rows(path):
        yield to_sample(row, where(path, n))
