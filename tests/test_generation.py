"""One generation module for every local generation: which backend runs, and that the vLLM path and the
transformers path are given the same thing.

vLLM cannot be installed here (it needs CUDA), so its path runs against `tests.vllm_stub`, a stand-in
with vLLM's offline API that answers with transformers' greedy generation and records what it was given:
the dev-set evaluator and the rollout's local policy then give the same replies through either path,
from the same token ids, sampling settings and stop tokens.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import shutil

import pytest

from aci import generation
from aci.errors import ACIError
from tests import vllm_stub


def test_the_backend_is_chosen_from_what_is_present():
    choose = generation.choose
    assert choose("auto", cuda=True, vllm=True, free_fraction=0.8) == ("vllm", "installed, CUDA present, memory free")
    assert choose("auto", cuda=True, vllm=False, free_fraction=0.8) == ("transformers", "vllm is not installed")
    assert choose("auto", cuda=False, vllm=True, free_fraction=None) == ("transformers", "no CUDA device")
    name, why = choose("auto", cuda=True, vllm=True, free_fraction=0.1)  # a training job holds the GPU
    assert name == "transformers" and why == "only 10% of GPU memory is free"
    assert choose("transformers", cuda=True, vllm=True, free_fraction=0.9)[0] == "transformers"
    with pytest.raises(ACIError, match="vLLM generation was asked for but no CUDA device"):
        choose("vllm", cuda=False, vllm=True, free_fraction=None)
    with pytest.raises(ACIError, match="unknown generation backend"):
        choose("tgi", cuda=True, vllm=True, free_fraction=0.9)
    assert generation.vllm_memory(0.97) == 0.9 and generation.vllm_memory(0.5) == 0.45


def test_grpo_uses_colocated_vllm_asleep_between_generations_where_vllm_can(monkeypatch):
    from trl import GRPOConfig

    from aci.training import run

    versions = {"vllm": "0.11.0"}

    def version(name):
        if name not in versions:
            raise importlib.metadata.PackageNotFoundError(name)
        return versions[name]

    monkeypatch.setattr(generation.importlib.metadata, "version", version)
    assert run.vllm_settings() == {"vllm_mode": "colocate", "vllm_enable_sleep_mode": True}
    args = run.make_args(GRPOConfig, output_dir="out", use_cpu=True, use_vllm=True, **run.vllm_settings())
    assert args.use_vllm and args.vllm_mode == "colocate" and args.vllm_enable_sleep_mode
    versions["vllm"] = "0.9.2"  # before the sleep mode TRL calls
    assert run.vllm_settings()["vllm_enable_sleep_mode"] is False
    del versions["vllm"]
    assert not generation.vllm_sleeps()


def test_both_paths_get_the_same_tokens_settings_and_stop_tokens(tiny_model):
    from aci import templates

    tok = templates.load_tokenizer(tiny_model)
    messages = [{"role": "user", "content": "What is 2 plus 2?"}]
    text = generation.render(tok, messages)
    assert text == tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids = generation.encode(tok, text)
    eos = generation.stop_token_ids(tiny_model, tok)
    assert eos == json.loads((tiny_model / "generation_config.json").read_text())["eos_token_id"]
    s = generation.Sampling(max_new_tokens=7, temperature=0.7, top_p=0.9, seed=3, stop=("ANSWER",))
    prompts, params = generation.vllm_request([ids], s, eos_ids=eos)
    kw = generation.transformers_kwargs(s, pad_token_id=tok.pad_token_id, eos_ids=eos)
    assert prompts == [{"prompt_token_ids": ids}]
    assert (params["max_tokens"], params["temperature"], params["top_p"]) == (kw["max_new_tokens"], kw["temperature"],
                                                                              kw["top_p"]) == (7, 0.7, 0.9)
    assert params["stop_token_ids"] == kw["eos_token_id"] == eos and params["seed"] == 3
    assert params["stop"] == ["ANSWER"] and params["n"] == 1 and params["skip_special_tokens"]
    greedy = generation.Sampling(max_new_tokens=5)
    _, params = generation.vllm_request([ids], greedy, eos_ids=eos)
    kw = generation.transformers_kwargs(greedy, pad_token_id=tok.pad_token_id, eos_ids=eos)
    assert params["temperature"] == 0.0 and params["top_p"] == 1.0 and not kw["do_sample"] and "temperature" not in kw


def _force(monkeypatch, backend: str) -> None:
    if backend == "vllm":
        vllm_stub.install(monkeypatch)
    monkeypatch.setattr(generation, "choose", lambda requested, **kw: (backend, "forced by the test"))


def _dev(tmp_path, model, out: str):
    from aci.evaluation.devset import DevSetEvaluator

    rows = [{"id": f"t{i}", "messages": [{"role": "user", "content": f"What is {i} plus {i}?"}],
             "gold": {"pattern": "(?s).*"}, "grader": {"type": "regex", "pattern": "(?s).*"}} for i in range(5)]
    path = tmp_path / "dev.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return DevSetEvaluator(path, limit=None, template=None, default_grader=None, temperature=0.0, max_new_tokens=6,
                           batch_size=2, workdir=tmp_path, out_dir=tmp_path / out, check_host=None, label="dev")


def test_dev_set_replies_are_the_same_through_vllm_and_transformers(tmp_path, tiny_model, monkeypatch):
    from aci import templates

    _force(monkeypatch, "transformers")
    hf = _dev(tmp_path, tiny_model, "hf").run(str(tiny_model), seed=0)
    _force(monkeypatch, "vllm")
    vl = _dev(tmp_path, tiny_model, "vllm").run(str(tiny_model), seed=0)
    assert hf.details["generator"] == "transformers" and vl.details["generator"] == "vllm"
    read = lambda out: [json.loads(x)["response"] for x in (tmp_path / out / "seed-0.responses.jsonl").open()]  # noqa: E731
    assert read("vllm") == read("hf") and any(read("hf"))
    [call] = vllm_stub.CALLS  # one batch for the whole dev set
    tok = templates.load_tokenizer(tiny_model)
    assert [p["prompt_token_ids"] for p in call["prompts"]] == [
        generation.encode(tok, generation.render(tok, [{"role": "user", "content": f"What is {i} plus {i}?"}]))
        for i in range(5)]
    assert call["params"]["max_tokens"] == 6 and call["params"]["seed"] == 0
    assert call["params"]["stop_token_ids"] == generation.stop_token_ids(tiny_model, tok)
    assert 0 < vllm_stub.ENGINES[0]["gpu_memory_utilization"] <= generation.VLLM_MEMORY_CAP


def test_rollout_policy_batches_concurrent_requests_through_vllm(tmp_path, tiny_model, monkeypatch):
    from aci.rollout.hf_policy import HFPolicy
    from aci.rollout.policy import Settings

    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    convs = [[{"role": "user", "content": f"Say {w}."}] for w in ("hi", "yes", "no")]

    async def roll(backend: str):
        _force(monkeypatch, backend)
        policy = HFPolicy(model)
        reqs = [policy.request(c, None, Settings(max_tokens=5, seed=1)) for c in convs]
        replies = await asyncio.gather(*(policy.complete(r) for r in reqs))
        await policy.aclose()
        return reqs, replies

    hf_reqs, hf = asyncio.run(roll("transformers"))
    vl_reqs, vl = asyncio.run(roll("vllm"))
    assert [r["prompt"] for r in hf_reqs] == [r["prompt"] for r in vl_reqs]
    assert [(r.content, r.completion_tokens, r.prompt_tokens, r.finish_reason) for r in vl] == \
           [(r.content, r.completion_tokens, r.prompt_tokens, r.finish_reason) for r in hf]
    assert [len(c["prompts"]) for c in vllm_stub.CALLS] == [3]  # the three trajectories' turns in one batch
