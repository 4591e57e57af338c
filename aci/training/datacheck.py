"""The data check of an SFT request, remembered by what it read, so `train start` after a `train dry-run`
of the same request does not render and tokenize the data again.

Why: the check loads the tokenizer through transformers, whose import is most of a fresh `aci train
start` process's 2-3 s; the train skill runs a dry-run first, and the start that follows checks the
same bytes with the same tokenizer and template. The result (report and warnings) is kept under a key
made of everything the check reads: the data's sha256 (the bytes the gates passed), the request's
settings that the check uses, the template file's bytes (or the tokenizer's own template, inside its
files), the tokenizer's files, the installed transformers and tokenizers versions, and the source of
the modules that render and encode. Any change makes a new key, so a stale result is never used; a
refusal is never kept. Only SFT: a GRPO check also builds the tasks' graders, which may read files.

Kept in `state/checks/<key>.json`, not committed (a cache, not history), written atomically.
"""

from __future__ import annotations

import hashlib
import json
from importlib import metadata
from pathlib import Path

from aci.state import State, atomic_write_json, iso, read_json

FOLDER = "checks"
KEEP = 64  # results kept; the oldest go first
TOKENIZER_FILES = ("config.json", "special_tokens_map.json", "added_tokens.json", "vocab.json", "vocab.txt",
                   "merges.txt", "spiece.model", "chat_template.jinja", "chat_template.json")
CHECK_CODE = ("templates.py", "training/data.py", "training/prepare.py", "training/datacheck.py",
              "training/tokenized.py")
PACKAGE = Path(__file__).resolve().parent.parent


def key(*, method: str, settings: dict, model_path: str, template: Path | None, data_sha256: str) -> str | None:
    """The key of a check's inputs, or None when they cannot all be read from files (a hub model id that is
    not in the local hub cache)."""
    folder = model_folder(model_path)
    if method != "sft" or folder is None:
        return None
    h = hashlib.sha256()

    def add(label: str, data: bytes) -> None:
        h.update(f"{label}\0{len(data)}\0".encode())
        h.update(data)

    add("request", json.dumps({**settings, "data_sha256": data_sha256}, sort_keys=True, default=str).encode())
    add("template", template.read_bytes() if template else b"<the tokenizer's own>")
    for f in sorted(folder.iterdir()):
        if f.is_file() and (f.name.startswith("tokenizer") or f.name in TOKENIZER_FILES):
            add(f.name, f.read_bytes())
    for dist in ("transformers", "tokenizers", "jinja2"):
        try:
            add(dist, metadata.version(dist).encode())
        except metadata.PackageNotFoundError:
            add(dist, b"")
    for rel in CHECK_CODE:
        add(rel, (PACKAGE / rel).read_bytes())
    return h.hexdigest()


def model_folder(model_path: str) -> Path | None:
    """The folder holding the model's files: the path itself, or a hub id's snapshot in the local cache."""
    if Path(model_path).is_dir():
        return Path(model_path)
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(model_path, "config.json")
    except (ValueError, OSError):  # not a hub id (an odd path), or no readable cache: no key, no reuse
        return None
    return Path(found).parent if isinstance(found, str) else None


def recall(state: State, check_key: str | None) -> tuple[dict, list[str]] | None:
    """The report and warnings of an earlier check with this key (the report says when it ran)."""
    if check_key is None:
        return None
    kept = read_json(state.root / FOLDER / f"{check_key}.json")
    if not isinstance(kept, dict) or not isinstance(kept.get("report"), dict):
        return None
    return {**kept["report"], "checked_at": kept.get("at")}, list(kept.get("warnings") or [])


def remember(state: State, check_key: str | None, report: dict, warnings: list[str]) -> None:
    if check_key is None:
        return
    folder = state.root / FOLDER
    folder.mkdir(exist_ok=True)
    atomic_write_json(folder / f"{check_key}.json", {"at": iso(), "report": report, "warnings": warnings})
    kept = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime)
    for old in kept[:-KEEP]:
        old.unlink(missing_ok=True)
