#!/usr/bin/env bash
# The GPU figures in one go, on a machine with CUDA: installs what the benches need, runs
# bench/gpu_train.py (aci train vs TRL's defaults: tokens/s, MFU) and bench/gpu_generate.py (vLLM vs
# transformers: tokens/s), and writes their output, the GPU, the versions and the date to $OUT.
#
#   bash bench/gpu_figures.sh                    # packages from PyPI
#   WHEELS=.whl bash bench/gpu_figures.sh        # no network there: wheels carried in .whl (pip download here)
#
# Both scripts are checked on CPU first (tests/test_gpu_bench.py runs their --cpu-smoke). Budget: about
# 3 minutes of installs and 8 of measurement on one H100/H200. Without vllm (it pins its own torch and is
# too large to carry to an offline machine) gpu_generate.py measures transformers alone and says so.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-figures}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}

if [ -n "${WHEELS:-}" ]; then
  $PY -m pip install -q --no-index --find-links "$WHEELS" --no-deps --no-compile "$WHEELS"/*.whl
else
  $PY -m pip install -q -e ".[train]" liger-kernel || exit 1
  $PY -m pip install -q vllm || echo "vllm not installed: generation measured with transformers only"
fi

{
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  $PY - <<'EOF'
import importlib.metadata as m
for p in ("torch", "transformers", "trl", "peft", "accelerate", "liger-kernel", "flash-attn", "vllm"):
    try:
        print(p, m.version(p))
    except m.PackageNotFoundError:
        print(p, "not installed")
EOF
} > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

status=0
timeout 420 $PY bench/gpu_train.py --steps 24 2>&1 | tee "$OUT/gpu_train.txt" || status=1
timeout 300 $PY bench/gpu_generate.py 2>&1 | tee "$OUT/gpu_generate.txt" || status=1
{ cat "$OUT/machine.txt"; tail -n 2 "$OUT/gpu_train.txt"; tail -n 2 "$OUT/gpu_generate.txt"; } > "$OUT/figures.txt"
exit $status
