"""Bench: what the crash-safe promotion costs over a plain copy of the same model folder.

Builds a checkpoint folder with a synthetic safetensors file of SIZE_MB (default 512) plus the embedded
tokenizer and config, then times, in the same run:
* baseline: `shutil.copytree` of the folder followed by an fsync of every file (a careful plain copy);
* promotion: `promotion.install` (build the servable folder beside `final_model/`, sha256 of every file
  for the seal, fsync, atomic swap, `best.json` and a journal commit), twice, so the second one also
  replaces a previous model.
Last line: `ratio=<promotion seconds / copy seconds>` (the median of the two promotions).
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from aci import registry
from aci.context import Context
from aci.embedded import build_model
from aci.evaluation import checkpoints, promotion, swap
from aci.evaluation.folder import fsync_tree

SIZE_MB = int(sys.argv[1]) if len(sys.argv) > 1 else 512


def _big_checkpoint(root: Path) -> Path:
    import torch
    from safetensors.torch import save_file

    ck = build_model(root / "ck", "test")
    n = SIZE_MB * (1 << 20) // 4
    save_file({"model.embed_tokens.weight": torch.zeros(600, 32), "padding.weight": torch.rand(n)},
              ck / "model.safetensors", metadata={"format": "pt"})
    return ck


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        ck = _big_checkpoint(work)
        shutil.copytree(ck, work / "base")
        os.chdir(work)
        ctx = Context(workdir=work)
        registry.call("plan", {"action": "init", "base_model": "base", "benchmark": "bench",
                               "eval_command": "python evaluate.py --model-path {model_path}"}, ctx)
        t = time.perf_counter()
        shutil.copytree(ck, work / "copy")
        fsync_tree(work / "copy")
        copy_s = time.perf_counter() - t
        cp = checkpoints.resolve(ctx, "ck", parent="base")
        runs = []
        for _ in range(2):
            t = time.perf_counter()
            with swap.locked(ctx.state.root):
                promotion.install(ctx, cp, {"score": 0.5, "evaluator": "bench", "samples": 100}, None, None)
            runs.append(time.perf_counter() - t)
        size = sum(p.stat().st_size for p in ck.iterdir()) / 1e6
        print(f"folder {size:.0f} MB: copy+fsync {copy_s:.2f} s; promotion {', '.join(f'{r:.2f}' for r in runs)} s")
        print(f"ratio={statistics.median(runs) / copy_s:.2f}")


if __name__ == "__main__":
    main()
