"""Sampling settings as part of the model: chosen on the dev set through the eval command, written into
final_model/generation_config.json at promotion, read back the way vLLM reads them, checked by finalize."""

from __future__ import annotations

import json

import pytest

from aci import records, sampling
from aci.errors import ACIError
from aci.evaluation import swap
from tests.eval_helpers import (
    call,
    copy_model,
    ctx,
    init_run,
    register,
    single_thread,  # noqa: F401 (fixture)
)

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.mark.parametrize("text, settings", [
    ("greedy", {"temperature": 0.0}),
    ("temperature=0.6,top_p=0.95", {"temperature": 0.6, "top_p": 0.95}),
    ("greedy,max_new_tokens=4096", {"temperature": 0.0, "max_new_tokens": 4096}),
    ("temperature=0.7,top_p=0.8,top_k=20,min_p=0.05,repetition_penalty=1.05,max_new_tokens=512",
     {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "min_p": 0.05, "repetition_penalty": 1.05, "max_new_tokens": 512}),
])
def test_settings_parse_name_and_read_back_as_vllm_reads_them(tmp_path, text, settings):
    """The file `apply` writes, read as vLLM 0.11 reads generation_config.json (transformers'
    GenerationConfig, non-default values, its six keys, max_new_tokens as max_tokens), gives the settings.
    (Also checked by hand under transformers 4.57.3, the PostTrainBench image's version.)"""
    assert sampling.parse(text) == settings
    assert sampling.parse(sampling.name(settings)) == settings
    base = {"eos_token_id": [2, 1], "do_sample": False, "temperature": 0.7, "top_k": 20, "max_new_tokens": 2048}
    written = sampling.apply(base, settings)
    assert written["eos_token_id"] == [2, 1] and written["do_sample"] is (settings["temperature"] > 0)
    (tmp_path / "generation_config.json").write_text(json.dumps(written))
    reads = sampling.vllm_reads(tmp_path)
    assert reads == sampling.expected_reads(settings)
    assert reads.get("temperature", 1.0) == settings["temperature"]
    assert reads.get("max_tokens") == settings.get("max_new_tokens")  # the base's 2048 cap is gone unless named
    assert "top_k" not in reads or settings.get("top_k") == reads["top_k"]


@pytest.mark.parametrize("text, message", [
    ("top_p=0.9", "need `greedy` or temperature"),
    ("temperature=hot", "temperature=hot: Input should be a valid number"),
    ("temperature=-1", "temperature=-1: Input should be greater than or equal to 0"),
    ("greedy,top_p=0.9", "greedy decoding ignores top_p"),
    ("temperature=0.6,top_k=50", "transformers' default"),
    ("temperature=0.6,beams=4", "a key vLLM reads"),
    ("temperature=0.6,temperature=0.7", "twice"),
    ("greedy,max_new_tokens=1.5", "max_new_tokens=1.5: Input should be a valid integer"),
    ("temperature=inf", "temperature=inf: Input should be a finite number"),  # issue 26 row 12: was accepted
    ("temperature=0.6,top_p=nan", "top_p=nan: Input should be a finite number"),
    ("temperature=0.6,repetition_penalty=Infinity", "repetition_penalty=Infinity: Input should be a finite"),
])
def test_bad_settings_are_refused_with_the_reason(text, message):
    with pytest.raises(ACIError, match=message):
        sampling.parse(text)


def test_a_broken_generation_config_would_stop_vllm(tmp_path):
    (tmp_path / "generation_config.json").write_text('{"max_new_tokens": 0}')
    with pytest.raises(ACIError, match="vLLM would fail to start"):
        sampling.vllm_reads(tmp_path)
    assert sampling.vllm_reads(tmp_path / "nothing") == {}


def test_settings_are_chosen_on_the_dev_set_and_written_at_promotion(workdir, tiny_model):
    """A checkpoint that scores 0.5 sampled at vLLM's default temperature 1.0 and 0.7 greedy (the stand-in
    evaluate.py reads generation_config.json as vLLM does): `<ck>@greedy` is evaluated like any model,
    beats `<ck>` under keep-best, and its promotion writes the settings that finalize then checks."""
    c = init_run(workdir, tiny_model)
    ck = copy_model(tiny_model, workdir / "runs" / "checkpoint-10", 0.5)
    config = json.loads((ck / "config.json").read_text())
    (ck / "config.json").write_text(json.dumps({**config, "aci_test_score_by_temperature": {"0": 0.7, "1": 0.5}}))
    register(workdir, "job1/checkpoint-10", ck)
    call(workdir, checkpoint="base", limit=100)
    assert call(workdir, checkpoint="job1/checkpoint-10", limit=100, promote=True).promotion.promoted
    # nothing chosen: the base's generation config, so vLLM samples at 1.0 under the tiny base's 64-token cap
    assert sampling.vllm_reads(workdir / "final_model") == {"max_tokens": 64}

    out = call(workdir, checkpoint="job1/checkpoint-10@greedy", limit=100, promote=True)
    assert out.result["checkpoint"] == "job1/checkpoint-10@greedy" and out.result["score"] == pytest.approx(0.7)
    assert out.comparison.b == "job1/checkpoint-10" and out.comparison.beats
    assert out.promotion.promoted and any("sampling settings greedy" in n for n in out.promotion.notes)
    final = workdir / "final_model"
    gen = json.loads((final / "generation_config.json").read_text())
    assert (gen["temperature"], gen["do_sample"]) == (0.0, False) and 2 in gen["eos_token_id"]
    assert sampling.vllm_reads(final) == {"temperature": 0.0}
    assert c.state.read(records.BEST)["checkpoint"] == "job1/checkpoint-10@greedy"
    assert swap.marker(final)["origin"]["sampling"] == "greedy"

    # a sampled setting that scores as the default does not replace the greedy one (keep-best)
    out = call(workdir, checkpoint="job1/checkpoint-10@temperature=1,top_p=0.95", limit=100, promote=True)
    assert out.result["score"] == pytest.approx(0.5) and not out.promotion.promoted

    from aci import registry

    items = {i.name: i for i in registry.call("finalize", {}, ctx(workdir)).items}
    assert items["sampling"].passed and "temperature 0" in items["sampling"].detail
    (final / "generation_config.json").write_text(json.dumps({**gen, "temperature": 0.9, "do_sample": True}))
    items = {i.name: i for i in registry.call("finalize", {}, ctx(workdir)).items}
    assert not items["sampling"].passed and "not the chosen greedy" in items["sampling"].detail
    assert items["sampling"].fix


def test_sampling_variants_need_the_eval_command_and_a_known_checkpoint(workdir, tiny_model):
    init_run(workdir, tiny_model)
    with pytest.raises(ACIError, match="measured with the eval command"):
        call(workdir, checkpoint="base@greedy", evaluator="dev", dev_set="dev.jsonl")
    copy_model(tiny_model, workdir / "loose", 0.5)
    with pytest.raises(ACIError, match="register 'loose' first"):
        call(workdir, checkpoint="loose@greedy", parent="base", limit=40)
    with pytest.raises(ACIError, match="Input should be a valid number"):
        call(workdir, checkpoint="base@temperature=warm", limit=40)
    assert call(workdir, checkpoint="base@greedy", limit=40).result["checkpoint"] == "base@greedy"


def test_no_infinity_reaches_a_generation_config(tmp_path, tiny_model):
    """Issue 26 row 12: `@temperature=inf` is refused before anything is written, and a checkpoint whose own
    generation_config.json holds Python's non-JSON `Infinity` is refused at build, not copied on."""
    from aci.evaluation import folder
    from aci.evaluation.runner import EvalSpec

    with pytest.raises(ACIError, match="finite"):
        sampling.split("job/checkpoint-1@temperature=inf")
    with pytest.raises(ValueError, match="finite"):
        EvalSpec(evaluator="dev", temperature=float("inf"))
    src = copy_model(tiny_model, tmp_path / "ck")
    gen = json.loads((src / "generation_config.json").read_text())
    (src / "generation_config.json").write_text(json.dumps({**gen, "temperature": float("inf")}))  # `Infinity`
    with pytest.raises(ACIError, match="only finite numbers are valid JSON"):
        folder.build(src, tmp_path / "out", base_dir=None)


# Values no sampler can use, and what every tool answers (pydantic's words for `aci.sampling`'s ranges).
BAD = {"temperature": [("inf", "a finite number"), ("1e309", "a finite number"), ("nan", "a finite number"),
                       ("-0.5", "greater than")],
       "top_p": [("0", "greater than 0"), ("1.5", "less than or equal to 1"), ("inf", "a finite number"),
                 ("nan", "a finite number")]}


def _refused(capsys, workdir, *argv: str) -> str:
    """What `aci <argv>` prints on stderr, through the real command line (click parses the option as it
    would from a shell), which must exit 2: refused, with nothing run."""
    from aci import cli

    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        cli.main(["--workdir", str(workdir), *argv])
    assert e.value.code == 2
    return capsys.readouterr().err


def test_every_tool_refuses_the_same_sampling_values_by_name(workdir, tiny_model, capsys):
    """Issue 33 row 3: `train dry-run --method grpo --temperature inf` (or 1e309) and `run-trajectory run
    --temperature inf` were accepted (a trajectory ran) while eval-checkpoint refused them. Each tool's
    sampling options, and the `@<settings>` suffix, now take `aci.sampling`'s one definition."""
    init_run(workdir, tiny_model)
    tools = {"train": (["dry-run", "--method", "grpo"], ["temperature"]),
             "run-trajectory": (["run", "--tasks", "tasks.jsonl"], ["temperature", "top_p"]),
             "eval-checkpoint": (["evaluate", "--evaluator", "dev"], ["temperature"])}
    for tool, (argv, fields) in tools.items():
        for field in fields:
            for value, why in BAD[field]:
                err = _refused(capsys, workdir, tool, *argv, f"--{field.replace('_', '-')}={value}")
                assert f"invalid arguments for {tool}: {field}: Input should be {why}" in err, (tool, value, err)
    for field, values in BAD.items():
        for value, why in values:
            settings = f"temperature={value}" if field == "temperature" else f"temperature=0.6,top_p={value}"
            err = _refused(capsys, workdir, "eval-checkpoint", "evaluate", "--checkpoint", f"base@{settings}")
            assert f"sampling settings {settings!r}: {field}={value}: Input should be {why}" in err, err
    assert _refused(capsys, workdir, "train", "dry-run", "--method", "grpo", "--temperature=0").endswith(
        "temperature: Input should be greater than 0\n")  # GRPO samples: greedy groups teach nothing
    assert not (workdir / "rollouts").exists() and not (workdir / "evals").exists()
