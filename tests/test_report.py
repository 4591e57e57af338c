"""`aci report`: a self-contained HTML page of a real run, checked in real headless Chromium.

The run is built with the real tools (registry calls): a run card, a benchmark card, a baseline and a
trained folder scored by the stand-in `evaluate.py` with seeded trials, histogram comparisons of a
skewed and a corrected synthetic set against the benchmark, verify-task, contamination, a real 3-step
training job on the tiny model (its loss curve), promotion and finalize.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aci import jobs, records, registry, report, toybench
from aci.context import Context
from aci.errors import ACIError
from aci.report import data as report_data
from aci.report import html as report_html
from tests import chromium
from tests.eval_helpers import copy_model, eval_command


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def call(workdir: Path, tool: str, **args):
    return registry.call(tool, args, Context(workdir=workdir))


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, tiny_model) -> Path:
    wd = tmp_path_factory.mktemp("report-run")
    source = toybench.load_source()
    copy_model(tiny_model, wd / "base", 0.2)
    copy_model(tiny_model, wd / "tuned", 0.6)
    write_jsonl(wd / "test.jsonl", source.generate(40, 1, toybench.TEST_MIX, split="test", prefix="test"))
    write_jsonl(wd / "skewed.jsonl", source.generate(60, 2, {"copy": 0.8, "reverse": 0.1, "swap": 0.1}))
    write_jsonl(wd / "fixed.jsonl", source.generate(60, 3, toybench.TEST_MIX))
    import shutil

    shutil.copy(toybench.ASSETS / "train_source.py", wd / "train_source.py")
    call(wd, "plan", action="init", base_model="base", benchmark="lock-codes", benchmark_size=40,
         eval_command=eval_command("--seed {seed}"), metric_key="accuracy")
    call(wd, "log-state", kind="benchmark-card", message="ANSWER line, exact match")
    call(wd, "eval-checkpoint", action="evaluate", checkpoint="base", limit=40, trials=3)
    custom = ["subtype=python:train_source.py:subtype"]
    call(wd, "histogram", action="compute", path="test.jsonl", role="reference", custom=custom)
    assert not call(wd, "histogram", action="compare", path="skewed.jsonl", target="test.jsonl", custom=custom).passed
    assert call(wd, "histogram", action="compare", path="fixed.jsonl", target="test.jsonl", custom=custom).passed
    kept = call(wd, "verify-task", tasks="fixed.jsonl", grader="python:train_source.py:check").kept_file
    sft = write_jsonl(wd / "sft.jsonl", [
        {"messages": [{"role": "user", "content": t["question"]}, {"role": "assistant", "content": f"ANSWER: {t['answer']}"}]}
        for t in map(json.loads, Path(kept).read_text().splitlines())])
    assert call(wd, "contamination", path=sft.name, reference="test.jsonl").verdict == "pass"
    job = call(wd, "train", action="start", data=sft.name, max_steps=3, batch_size=2, grad_accum=1, save_steps=3,
               logging_steps=1, max_length=128).job.id
    state = Context(workdir=wd).state
    end = time.monotonic() + 240
    while jobs.view(state, job).status == "running" and time.monotonic() < end:
        time.sleep(0.5)
    assert jobs.view(state, job).status == "succeeded", jobs.view(state, job)
    out = call(wd, "eval-checkpoint", action="evaluate", checkpoint="tuned", parent="base", limit=40, trials=3,
               promote=True)
    assert out.promotion and out.promotion.promoted, out
    call(wd, "finalize")
    return wd


def test_report_page_in_headless_chromium(run_dir: Path, tmp_path: Path):
    out = tmp_path / "report"
    proc = subprocess.run([sys.executable, "-m", "aci.cli", "report", "--state", str(run_dir / "state"), "--out",
                           str(out)], capture_output=True, text=True, cwd=run_dir, timeout=120)
    assert proc.returncode == 0, proc.stderr
    page = out / report_html.PAGE
    assert f"wrote {page}" in proc.stdout
    for png in ("scores.png", "loss.png", "phases.png", "histogram-test-subtype.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
    html_text = page.read_text()
    # Self-contained: no script, no stylesheet or image fetched from anywhere.
    assert "<script" not in html_text
    assert not re.search(r'(?:src|href)="(?!data:|#)', html_text), re.findall(r'(?:src|href)="[^"]{0,40}', html_text)

    shot = tmp_path / "report-screenshot.png"
    seen = chromium.load(page, screenshot=shot)
    assert seen.problems == []
    assert seen.images >= 4 and seen.broken_images == 0
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    best = json.loads((run_dir / "state" / records.BEST).read_text())
    text = seen.text
    assert f"{best['score']:.3f}" in text and best["checkpoint"] in text  # the promoted model's score
    base = [e for e in Context(workdir=run_dir).state.lines(records.CHECKPOINTS)
            if e["type"] == "evaluated" and e["checkpoint"] == "base"][-1]
    lo, hi = base["range"]
    assert f"{lo:.3f} – {hi:.3f}" in text  # the baseline's trial range
    for heading in ("Scores", "Time per phase against the plan", "Training loss", "Data gates", "Timeline"):
        assert heading in text
    assert "skewed.jsonl" in text and "fail" in text and "pass" in text  # the histogram gate, both verdicts


def test_report_reads_loss_from_history_log_or_trainer_state(run_dir: Path, tmp_path: Path):
    state = Context(workdir=run_dir).state
    curves = report_data.loss_curves(state)
    (job, points), = curves.items()
    assert [s for s, _ in points] == [1, 2, 3] and all(v > 0 for _, v in points)  # trainer_state.json
    log_only = tmp_path / "log"
    log_only.write_text("noise\n[aci] step 5/9 loss=1.5 learning_rate=0.1\n[aci] step 9/9 loss=0.25\n")
    assert report_data._log_lines(log_only) == [(5, 1.5), (9, 0.25)]
    (tmp_path / "history.jsonl").write_text('{"step": 2, "loss": 0.5}\n{"step": 4, "loss": 0.4}\n')
    assert report_data._history(tmp_path) == [(2, 0.5), (4, 0.4)]


def test_report_of_a_fresh_run_and_of_no_run(tmp_path: Path):
    call(tmp_path, "plan", action="init", base_model="m", benchmark="b")
    page = report.write(tmp_path / "state", tmp_path / "out")
    text = page.read_text()
    assert "No evaluation yet" in text and "No training job yet" in text and "No data checked yet" in text
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "ACI_STATE"}
    done = subprocess.run([sys.executable, "-m", "aci.cli", "--workdir", str(tmp_path), "report"], cwd=elsewhere,
                          capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"wrote {tmp_path / 'report' / 'report.html'}"  # --workdir's state and folder
    with pytest.raises(ACIError, match="no run card"):
        report.write(tmp_path / "elsewhere")


def test_browser_check_catches_console_errors_and_broken_images(tmp_path: Path):
    """The negative control: the checker above would see a broken page."""
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><html><head><link rel="icon" href="data:,"></head><body><p>hello</p>'
                   '<img src="missing.png"><script>console.error("planted"); notDefined();</script></body></html>')
    seen = chromium.load(bad)
    assert seen.text == "hello" and seen.broken_images == 1
    joined = "\n".join(seen.problems)
    assert "planted" in joined and "notDefined" in joined and "missing.png" in joined


def test_report_without_matplotlib_still_renders(run_dir: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    page = report.write(run_dir / "state", tmp_path / "plain")
    text = page.read_text()
    assert "No plots: matplotlib is not installed" in text and "<img" not in text
    assert "Scores" in text and "<svg" in text and not list((tmp_path / "plain").glob("*.png"))
