"""DeepSpeed ZeRO-2 and ZeRO-3 train end to end: a 2-rank job of each with the shipped configs, on CPU here
(DeepSpeed's CPU accelerator, gloo), saves and registers a checkpoint that loads with the base model's
weights. Runs in the `make deepspeed` lane, which installs DeepSpeed (`.ci/deepspeed/requirements.txt`);
skipped where DeepSpeed is not installed (the venv, and the PostTrainBench image, have none)."""

from __future__ import annotations

from pathlib import Path

import pytest

from aci import records
from aci.state import read_jsonl
from tests.train_helpers import FAST, call, make_run, no_stray_jobs, wait  # noqa: F401 (fixture)

pytest.importorskip("deepspeed")


@pytest.mark.usefixtures("no_stray_jobs")
def test_zero2_and_zero3_train_save_and_register(tmp_path, tiny_model, monkeypatch):
    from safetensors import safe_open

    monkeypatch.delenv("ACI_STATE", raising=False)
    make_run(tmp_path, tiny_model, profile="default", contamination=None)
    started = {stage: call(tmp_path, action="start", data="sft.jsonl", **FAST, processes=2, max_steps=3,
                           deepspeed=stage, concurrent=True).job for stage in ("zero2", "zero3")}
    base = safe_open(str(Path(tiny_model) / "model.safetensors"), "pt")
    for stage, job in started.items():
        done = wait(tmp_path, job.id, timeout=600).job
        assert done.status == "succeeded", (stage, done.log_tail)
        assert done.progress["processes"]["world_size"] == 2 and done.progress["step"] == 3
        [entry] = [e for e in read_jsonl(tmp_path / "state" / records.CHECKPOINTS) if e.get("job") == job.id]
        saved = safe_open(str(Path(entry["path"]) / "model.safetensors"), "pt")
        for key in base.keys():  # every weight, whole (ZeRO-3 gathers its shards to save)
            assert saved.get_tensor(key).shape == base.get_tensor(key).shape, (stage, key)
