"""Bench: pinning a checkpoint folder (`identity.pin`) against a full sha256 of the same files, same run.

Evaluation, training and promotion verify a registered folder before using it, so the check runs often
and on multi-GB folders. Builds a folder with SIZE_MB (default 2048) of safetensors weights in two
shards plus a config and tokenizer-sized files, then times `identity.pin` and a plain sha256 of every
file, each twice (the page cache is warm for both: the files were just written). Last line:
`ratio=<pin seconds / sha256 seconds>`; `gb_per_s` of the full hash is printed to size the alternative.

    .venv/bin/python bench/content_hash.py [SIZE_MB]
"""

from __future__ import annotations

import json
import os
import struct
import sys
import tempfile
import time
from pathlib import Path

from aci.evaluation import identity
from aci.manifest import file_hash

SIZE_MB = int(sys.argv[1]) if len(sys.argv) > 1 else 2048


def _shard(path: Path, mb: int) -> None:
    header = json.dumps({"w": {"dtype": "BF16", "shape": [mb << 19], "data_offsets": [0, mb << 20]}}).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        block = os.urandom(1 << 20)
        for _ in range(mb):
            f.write(block)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for i in (1, 2):
            _shard(root / f"model-0000{i}-of-00002.safetensors", SIZE_MB // 2)
        (root / "config.json").write_text(json.dumps({"model_type": "qwen3", "hidden_size": 2048}))
        (root / "tokenizer.json").write_bytes(os.urandom(11 << 20))
        size = sum(p.stat().st_size for p in root.iterdir()) / 1e9
        pin_s, full_s = [], []
        for _ in range(2):
            t = time.perf_counter()
            identity.pin(root)
            pin_s.append(time.perf_counter() - t)
            t = time.perf_counter()
            for p in sorted(root.iterdir()):
                file_hash(p)
            full_s.append(time.perf_counter() - t)
        print(f"folder {size:.2f} GB: identity.pin {min(pin_s) * 1000:.1f} ms, full sha256 {min(full_s):.2f} s "
              f"(gb_per_s={size / min(full_s):.2f})")
        print(f"ratio={min(pin_s) / min(full_s):.4f}")


if __name__ == "__main__":
    main()
