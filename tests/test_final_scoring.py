"""How the strict profile's final evaluation scores final_model: one run or the mean over seeds, from the
temperature vLLM reads in generation_config.json, stated by finalize; and the sampling-settings step
warned when a sampled setting has too few trials to estimate that mean."""

from __future__ import annotations

import json

import pytest

from aci import registry, rules
from aci.evaluation.final_scoring import statement, trials_warning
from tests.eval_helpers import call, copy_model, ctx, eval_command, own_eval, single_thread  # noqa: F401 (fixture)

FINAL = rules.load("posttrainbench").profile.final_eval


def folder(tmp_path, gen: dict | None):
    if gen is not None:
        (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [2], **gen}))
    return tmp_path


@pytest.mark.parametrize("benchmark, gen, seeds, greedy", [
    ("GSM8K (Grade School Math 8K)", {"temperature": 0.0, "do_sample": False}, 1, True),
    ("gsm8k", {"temperature": 0.000009}, 1, True),  # below vLLM's epsilon 1e-5
    ("gsm8k", {"temperature": 0.00002, "do_sample": True}, 5, False),
    ("gsm8k", None, 5, False),  # no file: vLLM's 1.0
    ("AIME 2025", {"temperature": 0.6, "top_p": 0.95, "do_sample": True}, 5, False),
    ("HumanEval", {"temperature": 0.0}, 1, True),
    ("GPQA main", {"temperature": 0.0}, 5, True),  # every seed: its seed shuffles the choices
    ("Arena-Hard v2 writing", {"temperature": 0.7, "do_sample": True}, 1, False),
    ("HealthBench", {"temperature": 0.0}, 1, True),
])
def test_seeds_follow_the_temperature_vllm_reads(tmp_path, benchmark, gen, seeds, greedy):
    s = statement(FINAL, benchmark, folder(tmp_path, gen))
    assert (s.seeds, s.greedy, s.warnings) == (seeds, greedy, [])
    assert ("one run" if seeds == 1 else f"the mean over {seeds} seeds") in s.reason
    if benchmark.startswith("GPQA"):
        assert "shuffles the answer choices" in s.reason


def test_do_sample_false_without_a_temperature_is_sampled_and_warned(tmp_path):
    s = statement(FINAL, "gsm8k", folder(tmp_path, {"do_sample": False}))
    assert (s.seeds, s.greedy, s.temperature) == (5, False, 1.0)
    assert "no temperature in generation_config.json" in s.reason
    assert len(s.warnings) == 1 and "do_sample: false" in s.warnings[0] and "@greedy" in s.warnings[0]


def test_an_unlisted_benchmark_or_a_broken_file_says_so(tmp_path):
    s = statement(FINAL, "my-benchmark", folder(tmp_path, {"temperature": 0.0}))
    assert s.seeds == 5 and "lists no entry for 'my-benchmark'" in s.reason
    (tmp_path / "generation_config.json").write_text('{"max_new_tokens": 0}')
    s = statement(FINAL, "gsm8k", tmp_path)
    assert s.greedy is None and "1 seed(s) if greedy, 5 if sampled" in s.reason and "vLLM would fail" in s.reason


def test_too_few_trials_of_a_sampled_setting_are_warned():
    sampled, greedy = {"temperature": 0.6}, {"temperature": 0.0}
    assert "--trials 3 or more" in trials_warning(FINAL, "gsm8k", sampled, [0])
    assert trials_warning(FINAL, "gsm8k", sampled, [0, 1, 2]) is None
    assert trials_warning(FINAL, "gsm8k", greedy, [0]) is None
    assert trials_warning(FINAL, "healthbench", sampled, [0]) is None  # one run whatever the decoding
    assert trials_warning(None, "gsm8k", sampled, [0]) is None  # a profile without a final evaluation


def test_only_the_strict_profile_knows_the_final_evaluation():
    assert rules.load("default").profile.final_eval is None
    assert FINAL.seeds == 5 and FINAL.greedy_below == 1e-5 and FINAL.default_temperature == 1.0


@pytest.mark.usefixtures("single_thread")
def test_finalize_states_the_final_scoring(workdir, tiny_model):
    """The tiny base's generation_config.json holds do_sample: false and no temperature, as many base
    models' do: finalize says the final evaluation will sample it at 1.0 and average five seeds, and
    eval-checkpoint warns when a sampled setting gets one trial."""
    copy_model(tiny_model, workdir / "base", 0.2)
    registry.call("plan", {"action": "init", "base_model": "base", "benchmark": "gsm8k", "profile": "posttrainbench",
                           "eval_command": eval_command()}, ctx(workdir))
    assert call(workdir, checkpoint="base", limit=40, promote=True).promotion.promoted
    assert any("--trials 3 or more" in w for w in call(workdir, checkpoint="base@temperature=0.6", limit=40).warnings)
    out = registry.call("finalize", {}, ctx(workdir))
    assert (out.scoring.seeds, out.scoring.greedy) == (5, False)
    assert "final evaluation: the mean over 5 seeds: sampled at temperature 1" in out.summary()
    assert "warning: generation_config.json says do_sample: false" in out.summary()


GREEDY_SCRIPT = own_eval(40, '''
# decodes with transformers: model.generate(**batch, do_sample=False, max_new_tokens=64)
json.dump({"accuracy": 0.2, "n_examples": a.limit}, open(a.json_output_file, "w"))
''')


@pytest.mark.usefixtures("single_thread")
def test_a_script_of_its_own_decoding_is_not_told_about_vllm(workdir, tiny_model):
    """A user's task under the strict profile: its benchmark is not one the profile lists and its script
    decodes greedily with transformers, so the do_sample: false warning about vLLM would be wrong."""
    copy_model(tiny_model, workdir / "base", 0.2)
    (workdir / "my_eval.py").write_text(GREEDY_SCRIPT)
    cmd = "python my_eval.py --model-path {model_path} --limit {limit} --json-output-file {output}"
    registry.call("plan", {"action": "init", "base_model": "base", "benchmark": "column-sums",
                           "profile": "posttrainbench", "eval_command": cmd}, ctx(workdir))
    assert call(workdir, checkpoint="base", limit=40, promote=True).promotion.promoted
    out = registry.call("finalize", {}, ctx(workdir))
    assert out.scoring.seeds is None and out.scoring.greedy is None and out.scoring.warnings == []
    assert "my_eval.py does not use vLLM: the model is scored as my_eval.py decodes it" in out.summary()
    assert "do_sample" not in out.summary()
    (workdir / "vllm_eval.py").write_text(GREEDY_SCRIPT.replace("transformers", "vllm"))
    s = statement(FINAL, "column-sums", workdir / "final_model", workdir / "vllm_eval.py")
    assert s.seeds == 5 and "lists no entry for 'column-sums'" in s.reason and "do_sample: false" in s.warnings[0]
