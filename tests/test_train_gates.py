"""Every refusal of `train` names its rule; nonsense configurations are refused before launch. The checks
run in-process through the real registry on one shared run (posttrainbench rules), nothing is launched."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from datetime import timedelta

import pytest

from aci import manifest, records
from aci.errors import ACIError
from aci.state import now
from tests.conftest import mcp_client
from tests.train_helpers import FAST, call, ctx_for, make_run, sft_rows, write_jsonl


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_model):
    wd = tmp_path_factory.mktemp("gates")
    make_run(wd, tiny_model)
    return wd


def refused(rule: str, workdir, **args) -> str:
    with pytest.raises(ACIError) as e:
        call(workdir, **{"action": "dry-run", "data": "sft.jsonl", **FAST, "max_steps": 2, **args})
    assert e.value.rule == rule and f"[rule {rule}]" in str(e.value), str(e.value)
    return str(e.value)


def test_the_shared_run_passes_every_check(run):
    out = call(run, action="dry-run", data="sft.jsonl", **FAST, max_steps=2)
    assert out.checks["end_of_turn"] == "<|im_end|>" and out.checks["rows"] == 16 and out.job is None
    assert out.config["parent"] == "base" and out.config["stop_at"] is not None


def test_no_test_data_needs_a_passing_result_for_the_current_content(run):
    write_jsonl(run / "unchecked.jsonl", sft_rows(4))
    assert "has no contamination result" in refused("no-test-data", run, data="unchecked.jsonl")
    path = write_jsonl(run / "failed.jsonl", sft_rows(4))
    manifest.update(ctx_for(run).state, path, "contamination", {"verdict": "fail"}, message="x", tool="contamination")
    assert "failed its contamination check" in refused("no-test-data", run, data="failed.jsonl")
    path = write_jsonl(run / "edited.jsonl", sft_rows(4))
    manifest.update(ctx_for(run).state, path, "contamination", {"verdict": "pass"}, message="x", tool="contamination")
    write_jsonl(path, sft_rows(5))  # edited after the check
    assert "changed since its contamination check" in refused("no-test-data", run, data="edited.jsonl")


def test_forbidden_datasets_by_source_or_file_name(run):
    assert "Idavidrein/gpqa" in refused("forbidden-datasets", run, source="Idavidrein/gpqa")
    shutil.copy(run / "sft.jsonl", run / "humaneval_solutions.jsonl")
    assert "humaneval" in refused("forbidden-datasets", run, data="humaneval_solutions.jsonl")


def test_base_model_only(run, tiny_model):
    other = run / "instruct-model"
    shutil.copytree(tiny_model, other, dirs_exist_ok=True)
    assert "neither the run card's base model" in refused("base-model-only", run, model=str(other))
    assert "neither" in refused("base-model-only", run, model="Qwen/Qwen3-1.7B")
    ctx = ctx_for(run)
    with ctx.state.event("train", "registered a checkpoint of another model", tool="test") as w:
        w.append(records.CHECKPOINTS, {"type": "registered", "checkpoint": "x/checkpoint-1", "ts": now().isoformat(),
                                       "path": str(other), "parent": "instruct", "job": "x", "step": 1})
    assert "breaks at 'instruct'" in refused("base-model-only", run, model="x/checkpoint-1")
    assert "breaks at 'instruct'" in refused("base-model-only", run, model=str(other))  # its path, likewise


def test_final_reserve_says_what_fits(run):
    msg = refused("final-reserve", run, max_steps=5000, tokens_per_s=2.0)
    fit = int(re.search(r"max_steps=(\d+) would fit", msg).group(1))
    assert "would take" in msg and "left before the final reserve" in msg and 10 < fit < 5000
    out = call(run, action="dry-run", data="sft.jsonl", **FAST, max_steps=fit, tokens_per_s=2.0)
    assert out.checks["estimate"]["steps"] == fit and out.checks["estimate"]["rate_source"] == "declared"
    assert "no run of even one step" in refused("final-reserve", run, max_steps=5000, tokens_per_s=0.001)


def test_eval_template(run):
    (run / "other.jinja").write_text((run / "templates" / "model.jinja").read_text())
    assert "the evaluation renders templates/model.jinja" in refused("eval-template", run, template="other.jinja")
    assert "does not exist" in refused("eval-template", run, template="missing.jinja")


def test_eval_template_must_render_the_data_and_must_be_named(tmp_path, tiny_model):
    from tests.train_helpers import DATA

    make_run(tmp_path, tiny_model, profile="default", template="gemma_like", contamination=None)
    write_jsonl(tmp_path / "odd.jsonl", [{"messages": [{"role": "assistant", "content": "Hi"},
                                                       {"role": "user", "content": "Hello"},
                                                       {"role": "assistant", "content": "Bye"}]}])
    msg = refused("eval-template", tmp_path, data="odd.jsonl")
    assert "does not render the data" in msg and "odd.jsonl:1" in msg and "roles must alternate" in msg
    (tmp_path / "templates" / "model.jinja").unlink()
    assert "run card's template templates/model.jinja does not exist" in refused("eval-template", tmp_path)
    shutil.copy(DATA / "gemma_like.jinja", tmp_path / "templates" / "model.jinja")
    # under posttrainbench rules a run card without a template is refused
    strict = tmp_path / "strict"
    make_run(strict, tiny_model)
    card = json.loads((strict / "state" / "run.json").read_text())
    del card["template"]
    (strict / "state" / "run.json").write_text(json.dumps(card))
    assert "names no template" in refused("eval-template", strict)


def test_final_reserve_started(tmp_path, tiny_model):
    make_run(tmp_path, tiny_model, profile="default", contamination=None,
             deadline=(now() + timedelta(minutes=10)).isoformat())
    assert "the final reserve has started" in refused("final-reserve", tmp_path)


def test_nonsense_is_refused_before_launch(run):
    with pytest.raises(ACIError, match=r"all 16 checked samples exceed max_length=36 \(longest \d+ tokens\)"):
        call(run, action="dry-run", data="sft.jsonl", **{**FAST, "max_length": 36})
    long_prompt = [{"messages": [{"role": "user", "content": "word " * 80}, {"role": "assistant", "content": "ok"}]}]
    path = write_jsonl(run / "long.jsonl", long_prompt * 3)
    manifest.update(ctx_for(run).state, path, "contamination", {"verdict": "pass"}, message="x", tool="contamination")
    with pytest.raises(ACIError, match="nothing to train on: none of the first 3 samples has an assistant token"):
        call(run, action="dry-run", data="long.jsonl", **FAST)
    with pytest.raises(ACIError, match="multiple of num_generations=3"):
        call(run, action="dry-run", method="grpo", data="tasks.jsonl", **FAST, num_generations=3)
    with pytest.raises(ACIError, match="deepspeed is not installed"):
        call(run, action="dry-run", data="sft.jsonl", **FAST, deepspeed="zero2")
    with pytest.raises(ACIError, match="no run card"):
        call(run / "templates", action="dry-run", data="sft.jsonl")


def test_grpo_checks_report_prompts_and_graders(run):
    grpo = {**FAST, "batch_size": 4, "num_generations": 2}
    out = call(run, action="dry-run", method="grpo", data="tasks.jsonl", **grpo, max_completion_length=8)
    assert out.checks["samples_checked"] == 8 and out.checks["example"].endswith("<|im_start|>assistant\n")
    assert out.config["grpo"]["num_generations"] == 2 and out.config["learning_rate"] == 1e-6
    write_jsonl(run / "nograder.jsonl", [{"id": "a", "messages": [{"role": "user", "content": "1+1?"}],
                                          "gold": {"answer": "2"}}])
    manifest.update(ctx_for(run).state, run / "nograder.jsonl", "contamination", {"verdict": "pass"}, message="x",
                    tool="contamination")
    with pytest.raises(ACIError, match="names no grader: pass --grader"):
        call(run, action="dry-run", method="grpo", data="nograder.jsonl", **grpo)


def test_a_refusal_reaches_the_agent_through_mcp(run):
    async def go():
        async with mcp_client(run) as c:
            return await c.call_tool("train", {"action": "start", "data": "sft.jsonl", "source": "openai/healthbench"})

    r = asyncio.run(go())
    assert r.is_error and "[rule forbidden-datasets]" in r.content[0].text and "openai/healthbench" in r.content[0].text


def test_the_deadline_check_counts_the_time_to_tokenize_the_whole_file(tmp_path, tiny_model):
    """Over MCP: a file the job must tokenize for minutes before step 1 does not fit in 150 s, however fast
    the declared training throughput (the estimate used to assume a fixed 60 s before step 1)."""
    make_run(tmp_path, tiny_model, profile="default", contamination=None)
    row = json.dumps(sft_rows(1)[0]) + "\n"
    (tmp_path / "big.jsonl").write_text(row * 30_000)
    ctx = ctx_for(tmp_path)
    reserve = timedelta(minutes=ctx.rules.profile.final_reserve_min)
    from aci import registry

    registry.call("plan", {"action": "update", "deadline": (now() + reserve + timedelta(seconds=150)).isoformat()},
                  ctx)

    async def go():
        async with mcp_client(tmp_path) as c:
            small = await c.call_tool("train", {"action": "dry-run", "data": "sft.jsonl", **FAST, "max_steps": 2,
                                                "tokens_per_s": 1e12})
            big = await c.call_tool("train", {"action": "dry-run", "data": "big.jsonl", **FAST, "max_steps": 2,
                                              "tokens_per_s": 1e12})
            return small, big

    small, big = asyncio.run(go())
    assert not small.is_error, small.content
    assert small.structured_content["checks"]["estimate"]["tokenize_s"] < 5
    assert big.is_error and "[rule final-reserve]" in big.content[0].text
    assert re.search(r"after ~[\d,]+ s tokenizing the data", big.content[0].text), big.content[0].text
