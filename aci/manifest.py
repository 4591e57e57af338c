"""Data manifests: what the gates found about a data file, kept in `state/data/<name>/manifest.json`.

A manifest is keyed by the file's name and pinned to its content hash: `histogram`, `verify-task` and
`contamination` each write their section; `train` reads the `contamination` section and accepts it only
while the hash still matches, so editing a checked file means checking it again.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from aci import records
from aci.errors import ACIError
from aci.state import State, iso

SECTIONS = ("histogram", "verify", "contamination")


def file_hash(path: Path) -> str:
    h = hashlib.sha256()
    try:
        f = open(path, "rb")
    except IsADirectoryError:  # every data file, reference and template is pinned here first
        raise ACIError(f"{path} is a folder; a file is needed here") from None
    with f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def name_for(path: Path) -> str:
    """A stable, readable manifest name for a data file: its stem plus a short hash of its full path."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", path.stem)[:60] or "data"
    return f"{stem}-{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:6]}"


def rel(path: Path) -> str:
    return f"{records.DATA}/{name_for(path)}/manifest.json"


def read(state: State, path: Path) -> dict | None:
    return state.read(rel(path))


def update(state: State, path: Path, section: str, result: dict[str, Any], *, role: str = "train",
           message: str, tool: str, extra_files: dict[str, bytes] | None = None, sha256: str | None = None) -> dict:
    """Write one section of a file's manifest (and optional side files) as one state event; `sha256`: the
    hash of the bytes the section describes, when the tool read them itself (default: the file's now)."""
    if section not in SECTIONS:
        raise ValueError(f"unknown manifest section {section!r}")
    digest = sha256 or file_hash(path)
    with state.event("data", message, tool=tool, data={"file": str(path), "section": section}) as w:
        current = state.read(rel(path)) or {}
        if current.get("sha256") != digest:  # the file changed: earlier findings no longer hold
            current = {}
        manifest = {
            **current,
            "name": name_for(path),
            "path": str(path.resolve()),
            "sha256": digest,
            "role": current.get("role", role) if section != "contamination" else role,
            section: {**result, "at": iso()},
        }
        w.write_json(rel(path), manifest)
        for name, blob in (extra_files or {}).items():
            side = f"{records.DATA}/{name_for(path)}/{name}"
            (state.root / side).parent.mkdir(parents=True, exist_ok=True)
            (state.root / side).write_bytes(blob)
            w.track(side)
    return manifest


def current(state: State, path: Path) -> dict | None:
    """The manifest only if it describes the file as it is now."""
    m = read(state, path)
    return m if m and m.get("sha256") == file_hash(path) else None
