"""`train` through the real stdio MCP server: SFT full, SFT LoRA (merged) and GRPO with a grader reward run
as jobs on CPU with the tiny model, rendered with a template that has no generation markers; checkpoints
are registered in state while the jobs run; status reports progress; a dry run measures throughput."""

from __future__ import annotations

import asyncio
import json
import math
import shutil
import time
from pathlib import Path

import pytest

from aci import records
from aci.evaluation import identity
from aci.state import read_jsonl
from tests.conftest import mcp_client
from tests.train_helpers import FAST, ctx_for, make_run, no_stray_jobs  # noqa: F401 (fixture)


@pytest.fixture
def run(tmp_path, tiny_model, monkeypatch):
    monkeypatch.delenv("ACI_STATE", raising=False)
    make_run(tmp_path, tiny_model)
    return tmp_path


def _ok(result) -> dict:
    assert not result.is_error, result.content[0].text
    return result.structured_content


@pytest.mark.usefixtures("no_stray_jobs")
def test_sft_full_lora_and_grpo_jobs_through_mcp(run, tiny_model):
    async def go():
        async with mcp_client(run) as c:
            full = _ok(await c.call_tool("train", {"action": "start", "data": "sft.jsonl", **FAST, "max_steps": 3,
                                                   "save_steps": 2, "note": "full"}))
            lora = _ok(await c.call_tool("train", {"action": "start", "data": "sft.jsonl", **FAST, "max_steps": 2,
                                                   "save_steps": 1, "lora": True, "merge_lora": True,
                                                   "concurrent": True}))
            grpo = _ok(await c.call_tool("train", {
                "action": "start", "method": "grpo", "data": "tasks.jsonl", **FAST, "batch_size": 4,
                "num_generations": 2, "max_completion_length": 8, "max_steps": 2, "concurrent": True}))
            ids = [full["job"]["id"], lora["job"]["id"], grpo["job"]["id"]]
            seen_running = {}
            end = time.monotonic() + 300
            while time.monotonic() < end:
                views = {i: _ok(await c.call_tool("train", {"action": "status", "job": i})) for i in ids}
                for i, v in views.items():
                    if v["job"]["status"] == "running" and v["job"]["progress"].get("total_steps"):
                        seen_running[i] = v["job"]["progress"]
                if all(v["job"]["status"] != "running" for v in views.values()):
                    break
                await asyncio.sleep(0.5)
            # train on from a LoRA checkpoint whose merged copy is gone: the job merges the adapter itself
            adapter = f"{ids[1]}/checkpoint-1"
            shutil.rmtree(run / "checkpoints" / ids[1] / "checkpoint-1" / "merged")
            more = _ok(await c.call_tool("train", {"action": "start", "data": "sft.jsonl", **FAST, "max_steps": 1,
                                                   "model": adapter}))
            while (v := _ok(await c.call_tool("train", {"action": "status", "job": more["job"]["id"]})))["job"][
                    "status"] == "running" and time.monotonic() < end:
                await asyncio.sleep(0.5)
            views[more["job"]["id"]] = v
            listed = _ok(await c.call_tool("train", {"action": "list"}))
            dry = _ok(await c.call_tool("train", {"action": "dry-run", "data": "sft.jsonl", **FAST, "max_steps": 3}))
            return full, views, seen_running, listed, dry

    full, views, seen_running, listed, dry = asyncio.run(go())
    for i, v in views.items():
        assert v["job"]["status"] == "succeeded", (i, v["job"]["reason"], v["job"].get("log_tail"))
    ids = list(views)
    assert {j["id"] for j in listed["jobs"]} == set(ids)
    chained = views.pop(ids.pop())  # the job trained from the LoRA checkpoint
    assert chained["job"]["status"] == "succeeded", chained["job"].get("log_tail")
    assert chained["checkpoints"][0]["parent"] == f"{ids[1]}/checkpoint-1" and not chained["checkpoints"][0]["adapter"]
    cfg = json.loads((run / "state" / "jobs" / chained["job"]["id"] / "config.json").read_text())
    assert cfg["model_adapter"] and cfg["model_path"].endswith(f"{ids[1]}/checkpoint-1")

    # the checks ran before launch on the evaluation's template, which has no generation markers
    checks = full["checks"]
    assert checks["samples_checked"] == 16 and checks["truncated"] == 0 and checks["end_of_turn"] == "<|im_end|>"
    assert 0.2 < checks["assistant_token_share"] < 0.8
    assert checks["example"].startswith("<|im_start|>user\nWhat is 0 plus 0?<|im_end|>\n<|im_start|>assistant\n<think>")
    cfg = full["config"]
    assert cfg["parent"] == "base" and cfg["template"] == str(run / "templates" / "model.jinja")
    assert cfg["output_dir"] == str(run / "checkpoints" / ids[0]) and len(cfg["data_sha256"]) == 64
    assert json.loads((run / "state" / "jobs" / ids[0] / "config.json").read_text()) == cfg

    # every checkpoint was registered as it was saved, with its ancestry
    reg = [e for e in read_jsonl(run / "state" / records.CHECKPOINTS) if e["type"] == "registered"]
    by_job = {i: [e for e in reg if e["job"] == i] for i in ids}
    assert [e["checkpoint"] for e in by_job[ids[0]]] == [f"{ids[0]}/checkpoint-2", f"{ids[0]}/checkpoint-3"]
    assert [e["checkpoint"] for e in by_job[ids[1]]] == [f"{ids[1]}/checkpoint-1", f"{ids[1]}/checkpoint-2"]
    assert [e["checkpoint"] for e in by_job[ids[2]]] == [f"{ids[2]}/checkpoint-2"]
    for e in (e for i in ids for e in by_job[i]):
        records.CheckpointEntry.model_validate(e)
        assert e["parent"] == "base" and Path(e["path"]).is_dir() and e["adapter"] == (e["job"] == ids[1])
        assert e["content_hash"] and identity.verify(ctx_for(run), e, Path(e["path"])) is None  # pinned as saved
    assert [c["checkpoint"] for c in views[ids[0]]["checkpoints"]] == [e["checkpoint"] for e in by_job[ids[0]]]

    # checkpoints carry the evaluation's template and stop generating at its end-of-turn token
    template = (run / "templates" / "model.jinja").read_text()
    full_ckpt = Path(by_job[ids[0]][-1]["path"])
    merged = Path(by_job[ids[1]][-1]["merged"])
    for folder in (full_ckpt, merged, Path(by_job[ids[2]][0]["path"])):
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(folder)
        assert tok.chat_template == template
        eos = json.loads((folder / "generation_config.json").read_text())["eos_token_id"]
        assert tok.convert_tokens_to_ids("<|im_end|>") in (eos if isinstance(eos, list) else [eos])
    assert (merged / "model.safetensors").is_file() and not (merged / "adapter_config.json").exists()
    assert (Path(by_job[ids[1]][-1]["path"]) / "adapter_config.json").is_file()

    # progress: seen while running, final figures after
    for i in ids:
        p = views[i]["job"]["progress"]
        assert p["phase"] == "finished" and p["step"] == p["total_steps"] and p["tokens_per_s"] > 0
    assert seen_running and all(p["total_steps"] in (2, 3) for p in seen_running.values())
    assert views[ids[2]]["job"]["progress"]["reward"] > 0  # the regex grader rewarded the completions
    assert views[ids[0]]["job"]["progress"]["loss"] > 0

    # the dry run estimates from the throughput the jobs measured
    est = dry["checks"]["estimate"]
    assert est["tokens_per_s"] > 0 and "measured by job" in est["rate_source"] and est["steps"] == 3
    assert dry["job"] is None and not (run / "checkpoints" / dry["config"]["job"]).exists()


@pytest.mark.usefixtures("no_stray_jobs")
def test_dry_run_measures_throughput_with_a_short_job(run):
    from tests.train_helpers import call

    out = call(run, action="dry-run", data="sft.jsonl", **FAST, max_steps=50, measure_steps=2)
    est = out.checks["estimate"]
    assert est["rate_source"] == f"measured now by job {out.job.id}" and est["tokens_per_s"] > 0
    assert out.job.status == "succeeded" and out.job.progress["step"] == 2
    # the tiny model is untrained: its first loss sits at chance, and the dry run says what that means
    vocab = out.job.progress["vocab_size"]
    assert out.checks["first_loss"] == out.job.progress["first_loss"] >= 0.75 * math.log(vocab)
    note = next(w for w in out.warnings if "sits at chance" in w)
    assert f"ln {vocab:,}" in note and "has not learned this task's format" in note and "learning rate" in note
    assert not (run / "checkpoints" / out.job.id).exists()  # a measurement saves no checkpoint
    assert not [e for e in read_jsonl(run / "state" / records.CHECKPOINTS) if e.get("job") == out.job.id]
