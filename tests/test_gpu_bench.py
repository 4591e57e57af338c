"""The GPU benchmarks run end to end on CPU (`--cpu-smoke`: tiny shapes, the same code path), so they are
known to work before a GPU ever sees them; the script that runs both on a GPU machine parses."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("script", ["gpu_train.py", "gpu_generate.py"])
def test_gpu_bench_runs_on_cpu(script, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("ACI_STATE", None)
    r = subprocess.run([sys.executable, str(ROOT / "bench" / script), "--cpu-smoke"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    lines = r.stdout.strip().splitlines()
    assert re.fullmatch(r"\w+=(\d+(\.\d+)?|nan)", lines[-1]), lines[-3:]
    if script == "gpu_train.py":
        assert "aci: dry-run chose micro-batch 4 x 1" in r.stdout  # asked 2 x 2; searched: a CPU fits all 4 rows
        assert re.search(r"tokens_per_s_aci=\d+ tokens_per_s_trl=\d+", r.stdout)
    else:
        assert re.search(r"transformers: [\d,]+ tokens/s", r.stdout) and "vllm: not measured" in r.stdout


def test_the_gpu_figures_script_parses():
    r = subprocess.run(["bash", "-n", str(ROOT / "bench" / "gpu_figures.sh")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
