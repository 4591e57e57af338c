"""Safetensors weights cut into shards of at most a given size, byte for byte, without loading a model.

A harness that copies `final_model/` out file by file can fail on one large file (PostTrainBench's Harbor
runs fail to transfer a file over 5 GiB), and transformers 5 saves up to 50 GB in one file by default, so a
4B model in bf16 is one 8 GB `model.safetensors`. `reshard` writes such weights again as
`model-0000k-of-0000n.safetensors` files and their index, as transformers' own
`save_pretrained(max_shard_size=...)` does, but by copying each tensor's bytes: no torch, memory bounded
by a read buffer, and the weights, their names, dtypes and the file metadata stay exactly as they were
(loading and saving through transformers could rename tied weights or drop a vision tower).

The safetensors layout (github.com/huggingface/safetensors, "Format"): an 8-byte little-endian header
length, a JSON header naming each tensor's dtype, shape and `data_offsets` within the data that follows
(plus an optional `__metadata__` of strings), then the data. Like the library's writer, a shard pads its
header with spaces to a multiple of 8 bytes and orders tensors by element size, largest first, so every
tensor starts at a multiple of its element size.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from aci.errors import ACIError

HEADER_LIMIT = 100_000_000  # the safetensors library refuses a longer header
ELEMENT_BYTES = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2,
                 "U16": 2}  # any other dtype (8-bit and smaller) aligns on 1
CHUNK = 16 << 20


@dataclass(frozen=True)
class Tensor:
    name: str
    file: Path
    start: int  # where its bytes begin in `file`
    size: int
    dtype: str
    shape: list[int]


def read_header(path: Path) -> tuple[list[Tensor], dict[str, str]]:
    """The tensors of a safetensors file, in the order of their bytes, and its metadata."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        if not 0 < n <= HEADER_LIMIT:
            raise ACIError(f"{path} is not a safetensors file (header length {n})")
        try:
            header = json.loads(f.read(n))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ACIError(f"{path} is not a safetensors file (its header is not JSON: {e})") from None
    meta = header.pop("__metadata__", None) or {}
    tensors = [Tensor(name, path, 8 + n + t["data_offsets"][0], t["data_offsets"][1] - t["data_offsets"][0],
                      t["dtype"], t["shape"]) for name, t in header.items()]
    return sorted(tensors, key=lambda t: t.start), meta


def save_limit(shard_bytes: int | None) -> dict:
    """`save_pretrained`'s arguments for shards of at most `shard_bytes`; none keeps transformers' default."""
    return {"max_shard_size": shard_bytes} if shard_bytes else {}


def plan(tensors: list[Tensor], max_bytes: int) -> list[list[Tensor]]:
    """`tensors` in order, cut into groups of at most `max_bytes` of data; a tensor larger than that is a
    group of its own (safetensors cannot split one tensor; transformers does the same)."""
    groups: list[list[Tensor]] = [[]]
    size = 0
    for t in tensors:
        if groups[-1] and size + t.size > max_bytes:
            groups.append([])
            size = 0
        groups[-1].append(t)
        size += t.size
    return groups


def reshard(files: list[Path], out: Path, max_bytes: int) -> dict:
    """Write the weights of `files` (one model's safetensors files, in order) into `out` as shards of at
    most `max_bytes` of tensor data. Returns their index (`model.safetensors.index.json`: total size and
    which shard holds each tensor), for the caller to write beside them."""
    tensors: list[Tensor] = []
    meta: dict[str, str] = {}
    for p in files:
        found, m = read_header(p)
        tensors += found
        meta |= m
    groups = plan(tensors, max_bytes)
    names = [f"model-{i:05d}-of-{len(groups):05d}.safetensors" for i in range(1, len(groups) + 1)]
    for name, group in zip(names, groups, strict=True):
        _write(out / name, group, meta)
    return {"metadata": {"total_size": sum(t.size for t in tensors)},
            "weight_map": {t.name: name for name, group in zip(names, groups, strict=True) for t in group}}


def _write(path: Path, tensors: list[Tensor], meta: dict[str, str]) -> None:
    tensors = sorted(tensors, key=lambda t: -ELEMENT_BYTES.get(t.dtype, 1))  # stable: aligned, else in order
    header: dict = {"__metadata__": meta} if meta else {}
    offset = 0
    for t in tensors:
        header[t.name] = {"dtype": t.dtype, "shape": t.shape, "data_offsets": [offset, offset + t.size]}
        offset += t.size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as dst:
        dst.write(len(text).to_bytes(8, "little") + text)
        for t in tensors:
            with open(t.file, "rb") as src:
                src.seek(t.start)
                left = t.size
                while left:
                    chunk = src.read(min(left, CHUNK))
                    if not chunk:
                        raise ACIError(f"{t.file} ends inside tensor {t.name}: the file is truncated")
                    dst.write(chunk)
                    left -= len(chunk)
        dst.flush()
        os.fsync(dst.fileno())
