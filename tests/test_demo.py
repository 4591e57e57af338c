"""`aci demo --quick`: the whole loop, as a user runs it, ends with a trained model above the base model.

One subprocess run (about two minutes on two cores) checks the printed table, `demo-summary.json`, the
state the tools left (every step of the loop in the journal, a promoted and finalized `final_model`),
and the run report in headless Chromium.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from aci import records
from aci.demo import MARKER, SUMMARY
from tests import chromium


def test_quick_demo_trains_above_base(tmp_path: Path):
    workdir = tmp_path / "demo"
    env = {k: v for k, v in os.environ.items() if k != "ACI_STATE"}
    proc = subprocess.run([sys.executable, "-m", "aci.cli", "demo", "--workdir", str(workdir), "--quick"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((workdir / SUMMARY).read_text())
    base, trained = summary["base"], summary["trained"]
    assert summary["quick"] is True and summary["above"] is True
    assert trained["range"][0] > base["range"][1]  # non-overlapping: the worst trial beats the best base trial
    assert trained["score"] > base["score"] and trained["checkpoint"].startswith("train-")
    assert f"base {base['score']:.3f} -> trained {trained['score']:.3f}" in proc.stdout
    assert "<- final_model" in proc.stdout and "total" in proc.stdout

    state = workdir / "state"
    kinds = [json.loads(line)["kind"] for line in (state / "journal.jsonl").read_text().splitlines()]
    for kind in ("plan", "benchmark-card", "eval", "data", "train", "promote", "finalize", "result"):
        assert kind in kinds, kind
    tools = {json.loads(line).get("tool") for line in (state / "journal.jsonl").read_text().splitlines()}
    assert {"plan", "log-state", "eval-checkpoint", "histogram", "verify-task", "contamination", "train",
            "finalize"} <= tools
    best = json.loads((state / records.BEST).read_text())
    assert best["checkpoint"] == trained["checkpoint"]
    assert json.loads((state / "finalize.json").read_text())["passed"] is True
    assert (workdir / "final_model" / "config.json").is_file() and (workdir / MARKER).is_file()
    card = json.loads((state / records.RUN_CARD).read_text())
    assert card["profile"] == "posttrainbench" and card["template"] == "templates/qwen.jinja"

    seen = chromium.load(Path(summary["report"]), screenshot=tmp_path / "demo-report.png")
    assert seen.problems == [] and seen.broken_images == 0
    assert trained["checkpoint"] in seen.text and f"{trained['score']:.3f}" in seen.text


def test_toy_evaluate_reads_limit_as_posttrainbench_does(tmp_path: Path, tiny_model: Path):
    """`--limit -1` scores every item (PostTrainBench's meaning), a count scores that many, other negatives
    are a usage error instead of a silent slice."""
    from aci import toybench

    bench = toybench.build(tmp_path / "task", python=sys.executable, model=False)

    def run(limit: str) -> subprocess.CompletedProcess:
        out = tmp_path / f"metrics{limit}.json"
        proc = subprocess.run([sys.executable, "evaluate.py", "--model-path", str(tiny_model), "--limit", limit,
                               "--max-tokens", "1", "--json-output-file", str(out)],
                              capture_output=True, text=True, timeout=300, cwd=bench.workdir)
        proc.metrics = json.loads(out.read_text()) if out.is_file() else None
        return proc

    assert run("-1").metrics["n_examples"] == bench.size
    assert run("7").metrics["n_examples"] == 7
    bad = run("-2")
    assert bad.returncode == 2 and bad.metrics is None and "--limit" in bad.stderr
