"""A cheap start and a truthful estimate: an SFT job's tokenized data is kept by what made it (hit on the
same inputs, missed when any changes); a second job on the same data starts from it; the start gate's
estimate names the measurement it uses, how old it is and what differs; the job then plans with its own
rate. A hub model in the local cache gets the same reuse."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from aci import templates
from aci.training import run
from aci.training.config import TrainConfig
from tests.train_helpers import FAST, call, make_run, no_stray_jobs, sft_rows, wait, write_jsonl  # noqa: F401


class _Sink:
    """Where `sft_data` reports (the job's callback, without a job folder)."""

    def __init__(self):
        self.progress: dict = {}

    def preparing(self, what, done=None, total=None):
        pass


def test_the_tokenized_data_is_reused_until_any_input_changes(tmp_path, tiny_model, monkeypatch):
    monkeypatch.delenv("ACI_STATE", raising=False)
    model = shutil.copytree(tiny_model, tmp_path / "model")
    make_run(tmp_path, model, profile="default", contamination=None)
    cfg = TrainConfig.model_validate(call(tmp_path, action="dry-run", data="sft.jsonl", **FAST, max_steps=2).config)
    tok = templates.load_tokenizer(cfg.model_path)
    template = templates.load(cfg.template, tok)

    def build(cfg: TrainConfig, pack_to: int | None = None) -> tuple[str, list]:
        sink = _Sink()
        content = open(cfg.data, "rb").read()
        rows = run.sft_data(cfg, tok, template, sink, content, pack_to)
        return sink.progress["startup"]["tokenized"], rows["input_ids"]

    def fresh_then_kept(cfg: TrainConfig, pack_to: int | None = None) -> bool:
        (how, made), (again, kept) = build(cfg, pack_to), build(cfg, pack_to)
        return how == "tokenized now, cached for the next job" and again == "cached by an earlier job" and made == kept

    assert fresh_then_kept(cfg)
    assert fresh_then_kept(cfg.model_copy(update={"max_length": 48}))
    assert fresh_then_kept(cfg.model_copy(update={"template_kwargs": {"enable_thinking": False}}))
    assert fresh_then_kept(cfg, pack_to=64)
    other = write_jsonl(tmp_path / "other.jsonl", sft_rows(12))
    sha = hashlib.sha256(other.read_bytes()).hexdigest()
    assert fresh_then_kept(cfg.model_copy(update={"data": str(other), "data_sha256": sha}))
    with open(cfg.template, "a") as f:
        f.write("\n")
    assert fresh_then_kept(cfg)
    tokenizer_config = model / "tokenizer_config.json"
    tokenizer_config.write_text(json.dumps({**json.loads(tokenizer_config.read_text()), "model_max_length": 77}))
    assert fresh_then_kept(cfg)
    kept = [p for p in (tmp_path / "state" / "checks" / "tokenized").iterdir() if not p.name.startswith(".")]
    assert len(kept) == 4  # the newest entries only


@pytest.mark.usefixtures("no_stray_jobs")
def test_a_second_start_is_cheap_and_the_estimate_names_its_measurement(tmp_path, tiny_model, monkeypatch):
    monkeypatch.delenv("ACI_STATE", raising=False)
    make_run(tmp_path, tiny_model, profile="default", contamination=None)
    args = {**FAST, "data": "sft.jsonl", "max_steps": 4}
    first = wait(tmp_path, call(tmp_path, action="start", **args).job.id).job
    assert first.status == "succeeded", first.log_tail
    assert first.progress["startup"]["tokenized"] == "tokenized now, cached for the next job"

    est = call(tmp_path, action="dry-run", **args).checks["estimate"]
    assert est["rate_job"] == first.id and est["rate_measured_at"] == first.progress["updated_at"]
    assert est["rate_source"].startswith(f"measured by job {first.id} ") and " s ago (same model, method, LoRA " \
        "setting, max_length and process count)" in est["rate_source"]
    assert est["startup_source"] == f"measured by job {first.id}" and est["startup_s"] < 60
    assert est["tokenize_s"] == 0 and est["tokenize_source"].startswith("none: an earlier job's tokenized data")
    shorter = call(tmp_path, action="dry-run", **{**args, "max_length": 48}).checks["estimate"]
    assert shorter["rate_differs"] == ["max_length"] and "differs: max_length 64 (this run: max_length 48)" in \
        shorter["rate_source"] and shorter["tokenize_source"].startswith("measured on 16 checked samples")
    ranks = call(tmp_path, action="dry-run", **{**args, "processes": 2}).checks["estimate"]
    assert ranks["rate_differs"] == ["num_processes"] and "1 process(es) (this run: 2 process(es))" in \
        ranks["rate_source"]

    started = call(tmp_path, action="start", **args)
    assert started.config["estimate"]["source"].startswith(f"measured by job {first.id}")
    second = wait(tmp_path, started.job.id)
    p = second.job.progress
    assert second.job.status == "succeeded", second.job.log_tail
    assert p["startup"]["tokenized"] == "cached by an earlier job" and p["startup"]["to_first_step_s"] > 0
    fc = p["schedule"]  # the start's estimate, then the job's own rate
    assert fc["start_estimate"]["source"].startswith(f"measured by job {first.id}")
    assert fc["step_s_source"].startswith("measured: the larger median") and fc["step_s"] > 0
    text = second.summary()
    assert f"time to step 1: {p['startup']['to_first_step_s']} s (data: cached by an earlier job" in text
    assert "schedule wsd: ends at step 4 by " in text and "the start estimated" in text


def test_a_hub_model_in_the_local_cache_gets_its_checks_and_tokenized_data_reused(tmp_path, tiny_model, monkeypatch):
    """PostTrainBench names the base model by its hub id, with the files in the hub cache: the check's key
    reads them there, so the start after the dry-run does not check again (a fresh CLI process each)."""
    import os
    import subprocess
    import sys

    snapshot = tmp_path / "hub" / "models--aci--tiny" / "snapshots" / "0123abc"
    shutil.copytree(tiny_model, snapshot)
    (tmp_path / "hub" / "models--aci--tiny" / "refs").mkdir()
    (tmp_path / "hub" / "models--aci--tiny" / "refs" / "main").write_text("0123abc")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    env = {**os.environ}
    env.pop("ACI_STATE", None)
    make_run(tmp_path, Path("aci/tiny"), profile="default", contamination=None)  # the card names the hub id

    def cli(*argv: str) -> dict:
        done = subprocess.run([sys.executable, "-m", "aci.cli", "--json", *argv], cwd=tmp_path, env=env,
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    args = ["--data", "sft.jsonl", "--max-length", "64", "--check-samples", "16", "--max-steps", "2"]
    first, again = cli("train", "dry-run", *args), cli("train", "dry-run", *args)
    assert first["config"]["model_path"] == "aci/tiny"
    assert "checked_at" not in first["checks"] and again["checks"]["checked_at"]
