"""An SFT job's tokenized data, kept on disk by everything that made it, so the next job on the same data
starts in seconds instead of rendering and tokenizing every sample again.

The key is the data check's (`aci.training.datacheck.key`: the data's sha256, the template's bytes, the
tokenizer's files, the library versions and the code that renders) over the job's settings that shape
its rows: `max_length`, `template_kwargs` and the packing width. What is kept is the dataset the trainer
gets (sequences with nothing to learn dropped, packed when the job packs), saved with `datasets` (Arrow
files, memory-mapped when loaded), with the data report, in `state/checks/tokenized/<key>/`. It is
written to a temporary folder and renamed into place, so a job killed while writing leaves no half
entry; the newest `KEEP` entries stay. The start gate asks `cached()`, so its estimate counts no
tokenizing time for a job that will not tokenize. A cache that cannot be written (a full disk) only
costs the next job the tokenizing.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from aci.training import datacheck
from aci.training.config import TrainConfig

FOLDER = "tokenized"
REPORT = "report.json"
KEEP = 4


def key(cfg: TrainConfig, pack_to: int | None) -> str | None:
    """The cache key of `cfg`'s dataset packed to `pack_to` tokens per row (None: unpacked)."""
    return datacheck.key(method=cfg.method, model_path=cfg.model_path, data_sha256=cfg.data_sha256,
                         template=Path(cfg.template) if cfg.template else None,
                         settings={"tokenized": True, "max_length": cfg.max_length, "pack_to": pack_to,
                                   "template_kwargs": cfg.template_kwargs})


def _root(state: str | Path) -> Path:
    return Path(state) / datacheck.FOLDER / FOLDER


def cached(state: str | Path, cache_key: str | None) -> bool:
    return cache_key is not None and (_root(state) / cache_key / REPORT).is_file()


def load(state: str | Path, cache_key: str | None) -> tuple[Any, dict] | None:
    """(dataset, data report) of an earlier job with this key, or None."""
    if not cached(state, cache_key):
        return None
    from datasets import load_from_disk

    folder = _root(state) / cache_key
    try:
        return load_from_disk(str(folder)), json.loads((folder / REPORT).read_text())
    except (OSError, ValueError) as e:  # a damaged entry: tokenize again, and replace it
        print(f"[aci] tokenized data cache {folder} unreadable ({type(e).__name__}: {e}); tokenizing again", flush=True)
        shutil.rmtree(folder, ignore_errors=True)
        return None


def save(state: str | Path, cache_key: str | None, dataset: Any, report: dict) -> str:
    """Keep `dataset` under `cache_key`; returns what happened, in words."""
    if cache_key is None:
        return "not cached: the model's tokenizer files are not in a local folder"
    root = _root(state)
    final, tmp = root / cache_key, root / f".{cache_key}.{os.getpid()}"
    try:
        dataset.save_to_disk(str(tmp))
        (tmp / REPORT).write_text(json.dumps(report))
        os.rename(tmp, final)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        return "cached already by another job" if final.is_dir() else f"not cached: {e.strerror or e}"
    entries = sorted((p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")),
                     key=lambda p: p.stat().st_mtime)
    for old in entries[:-KEEP]:
        shutil.rmtree(old, ignore_errors=True)
    return "cached for the next job"
