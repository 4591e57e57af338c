"""`eval-checkpoint` through the real registry (and once the stdio MCP server): the three evaluators,
trials and ranges, failures recorded, comparisons, and keep-best promotion with LoRA merging."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aci import records, registry
from aci.errors import ACIError
from aci.evaluation import command, stats, swap
from aci.progress import gates
from tests.conftest import mcp_client
from tests.eval_helpers import (
    call,
    copy_model,
    ctx,
    entries,
    eval_command,
    init_run,
    make_lora,
    own_eval,
    plant,
    register,
    single_thread,  # noqa: F401 (fixture)
)

pytestmark = pytest.mark.usefixtures("single_thread")


def test_eval_command_result_is_recorded_as_one_event(workdir, tiny_model):
    c = init_run(workdir, tiny_model)
    commits = len(c.state.history())
    out = call(workdir, checkpoint="base", limit=40)
    e = out.result
    assert (e["checkpoint"], e["evaluator"], e["limit"], e["samples"], e["seeds"]) == ("base", "eval-command", 40, 40, [0])
    assert e["score"] == pytest.approx(0.2) and e["range"] == [pytest.approx(0.2)] * 2 and e["metric"] == "accuracy"
    assert e["duration_s"] > 0 and e["error"] is None
    assert entries(workdir) == [e]
    records.CheckpointEntry.model_validate(e)
    # one evaluation event with the result, between the events of the job it ran in
    assert c.state.history()[:3] == [f"eval: job {e['job']} succeeded", "eval: base scored 0.2 on 40 samples by "
                                     "eval-command", f"eval: started job {e['job']}: evaluate base with command"]
    assert len(c.state.history()) == commits + 3
    metrics = c.state.root / "evals" / e["eval_id"] / "seed-0.metrics.json"
    assert json.loads(metrics.read_text())["accuracy"] == pytest.approx(0.2)
    assert f"evals/{e['eval_id']}/seed-0.metrics.json" in _tracked(c)
    assert gates(ctx(workdir))["baseline"].passed  # 40 >= the default minimum of 32
    assert out.warnings == []


def _tracked(c) -> str:
    import git

    return git.Repo(c.state.root).git.ls_files()


def test_eval_command_arguments_and_metrics_parsing(tmp_path):
    cmd = "python evaluate.py --model-path {model_path} --limit {limit} --json-output-file {output} --seed={seed}"
    assert command.argv(cmd, model_path="/m dir/x", limit=None, output=tmp_path / "o.json", seed=3) == [
        "python", "evaluate.py", "--model-path", "/m dir/x", "--json-output-file", str(tmp_path / "o.json"), "--seed=3"]
    assert command.argv(cmd, model_path="m", limit=50, output=tmp_path / "o.json", seed=0)[5] == "50"
    assert command.pick_score({"accuracy": 0.5, "stderr": 0.1}, None, "f") == ("accuracy", 0.5)
    assert command.pick_score({"pass_rate": 0.7, "stderr": 0.1, "n_examples": 9}, None, "f") == ("pass_rate", 0.7)
    assert command.pick_score({"results": {"gsm8k": {"em": 0.25}}}, "results.gsm8k.em", "f") == ("results.gsm8k.em", 0.25)
    with pytest.raises(ACIError, match=r"\bf\b.*\(numeric values: a, b\).*--metric-key"):
        command.pick_score({"a": 0.1, "b": 0.2}, None, "f")
    assert command.sample_count({"accuracy": 0.5, "n_examples": 245}) == 245


def test_metric_key_and_sample_count_come_from_the_json(workdir, tiny_model):
    init_run(workdir, tiny_model, command=eval_command("--metric", "pass_rate", "--n-examples", "37"),
             metric_key="pass_rate")
    out = call(workdir, checkpoint="base", limit=50)
    e = out.result
    assert (e["score"], e["samples"], e["metric"]) == (pytest.approx(0.2), 37, "pass_rate")
    assert e["beside"] == {"stderr": 0.01, "n_examples": 37}  # what the script wrote next to the score
    assert 'beside pass_rate: {"stderr": 0.01, "n_examples": 37}' in out.summary()


LOGGING_SCRIPT = own_eval(6, """
rows = [{"id": f"q{i}", "response": f"working {i}\\nANSWER: {i % 3}", "gold": "1", "correct": i % 3 == 1}
        for i in range(a.limit)]
pathlib.Path("logs").mkdir(exist_ok=True)
pathlib.Path("logs/run.jsonl").write_text("".join(json.dumps(r) + "\\n" for r in rows))
json.dump({"accuracy": sum(r["correct"] for r in rows) / a.limit}, open(a.json_output_file, "w"))
""")


def test_replies_the_eval_command_logged_are_read_back(workdir, tiny_model):
    """Failures to read come from the command's own per-sample log: a JSONL of rows, or inspect's log."""
    (workdir / "my_eval.py").write_text(LOGGING_SCRIPT)
    init_run(workdir, tiny_model, command="python my_eval.py --model-path {model_path} --limit {limit} "
                                          "--json-output-file {output}")
    out = call(workdir, checkpoint="base", limit=36)
    assert out.result["samples"] == 36 and out.result["sample_logs"] == [str(workdir / "logs" / "run.jsonl")]
    assert len(out.replies) == 15 and all(r["score"] == 0.0 for r in out.replies)  # the 24 failures first
    first = out.replies[0]
    assert first["id"] == "q0" and first["response"] == "working 0\nANSWER: 0" and first["reason"] == "gold '1'"
    assert "reply q0 scored 0 (gold '1'): " in out.summary()
    init_run(workdir / "ptb", tiny_model)  # the stand-in for an inspect-based evaluate.py
    inspected = call(workdir / "ptb", checkpoint="base", limit=40).replies
    assert inspected and {(r["response"], r["score"]) for r in inspected} == {("Default output from mockllm/model", 0.0)}
    assert inspected[0]["reason"] == "read 'Default output from mockllm/model', gold '0'"


def test_the_values_beside_a_nested_score_are_kept_and_cut():
    metrics = {"results": {"accuracy": 0.01, "by_kind": {"add": 0.0, "sub": 0.02}, "n": 400}, "other": 1}
    assert command.beside(metrics, "results.accuracy") == {"by_kind": {"add": 0.0, "sub": 0.02}, "n": 400}
    long = command.beside({"accuracy": 1, "rows": ["x" * 50] * 40}, "accuracy", limit=100)
    assert list(long) == ["rows"] and long["rows"].endswith("...") and len(long["rows"]) <= 103
    assert command.beside({"accuracy": 1}, "accuracy") is None


def test_trials_give_a_mean_and_a_range_and_small_samples_warn(workdir, tiny_model):
    init_run(workdir, tiny_model, command=eval_command("--seed", "{seed}"))
    out = call(workdir, checkpoint="base", limit=10, trials=3)
    e = out.result
    assert e["seeds"] == [0, 1, 2]
    assert e["scores"] == [pytest.approx(0.19), pytest.approx(0.20), pytest.approx(0.21)]
    assert e["score"] == pytest.approx(0.2) and e["range"] == [pytest.approx(0.19), pytest.approx(0.21)]
    assert any("under the minimum of 32" in w and "min-eval-samples" in w for w in out.warnings)
    assert not gates(ctx(workdir))["baseline"].passed  # 10 samples do not count
    assert "range 0.19..0.21" in out.summary()
    e2 = call(workdir, checkpoint="base", limit=40, seeds=[5, 6]).result
    assert e2["seeds"] == [5, 6] and e2["scores"] == [pytest.approx(0.21), pytest.approx(0.19)]


FAILURES = {
    "exit-code": (eval_command("--exit-code", "3"), {}, "exited with code 3"),
    "no-json": (eval_command("--no-json"), {}, "wrote no metrics JSON"),
    "wrong-key": (eval_command(), {"metric_key": "f1"}, "metric key 'f1' is not in"),
    "timeout": (eval_command("--sleep", "60"), {"timeout_s": 1}, "timed out after 1 s"),
}


@pytest.mark.parametrize("name", sorted(FAILURES))
def test_a_failing_eval_command_is_a_clear_error_recorded_in_state_and_promotes_nothing(workdir, tiny_model, name):
    cmd, extra, message = FAILURES[name]
    c = init_run(workdir, tiny_model)
    copy_model(tiny_model, workdir / "ck", 0.9)
    with pytest.raises(ACIError) as err:
        call(workdir, checkpoint="ck", parent="base", limit=40, command=cmd, promote=True, **extra)
    assert message in str(err.value) and "recorded in checkpoints.jsonl" in str(err.value)
    [e] = entries(workdir)
    assert e["checkpoint"] == "ck" and message in e["error"] and e["score"] is None
    assert c.state.journal(1)[0]["kind"] == "eval" and "failed" in c.state.journal(1)[0]["message"]
    assert not (workdir / "final_model").exists() and c.state.read(records.BEST) is None
    assert not list((workdir / ".aci-scratch").iterdir())  # the throw-away evaluation folder is gone
    with pytest.raises(ACIError) as refused:  # a failed evaluation cannot justify a promotion either
        call(workdir, action="promote", checkpoint="ck")
    assert refused.value.rule == "keep-best" and not (workdir / "final_model").exists()


def test_an_interpreter_without_the_scripts_libraries_is_named_with_one_that_has_them(workdir, tiny_model):
    """The eval command's `python` lacks a library its script imports (here: this interpreter with its
    site-packages off): the error says which interpreter, which module, and which interpreter has it."""
    init_run(workdir, tiny_model)
    (workdir / "eval_lib.py").write_text("import pydantic\n")
    cmd = f"{sys.executable} -S eval_lib.py --model-path {{model_path}} --limit {{limit}} --json-output-file {{output}}"
    with pytest.raises(ACIError) as err:
        call(workdir, checkpoint="base", limit=40, command=cmd)
    assert "ModuleNotFoundError: No module named 'pydantic'" in str(err.value)
    assert f"the command's interpreter `{sys.executable}` ({sys.executable}) has no module 'pydantic'; " \
           f"{sys.executable} has it: put that interpreter in the command's place" in str(err.value)


def _task_folder(workdir: Path) -> Path:
    folder = workdir / "lm_tasks"
    folder.mkdir()
    rows = [{"question": f"What is {i} plus {i}?", "answer": str(2 * i)} for i in range(12)]
    (folder / "toy.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "toy.yaml").write_text(
        "task: toy_add\ndataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {folder / 'toy.jsonl'}\ntest_split: test\n"
        "output_type: multiple_choice\ndoc_to_text: \"Q: {{question}}\\nA:\"\n"
        "doc_to_choice: [\"{{answer}}\", \"seven\"]\ndoc_to_target: 0\n"
        "metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n")
    return folder


def test_lm_eval_task_from_a_local_yaml_folder(workdir, tiny_model):
    init_run(workdir, tiny_model)
    _task_folder(workdir)
    e = call(workdir, checkpoint="base", evaluator="lm-eval", task="toy_add", task_dir="lm_tasks", limit=8).result
    assert e["evaluator"].startswith("lm-eval:toy_add@") and e["samples"] == 8 and e["metric"] == "acc,none"
    samples = json.loads((ctx(workdir).state.root / "evals" / e["eval_id"] / "samples.json").read_text())
    per = samples["trials"][0]["per_sample"]
    assert sorted(per, key=int) == [str(i) for i in range(8)] and set(per.values()) <= {0.0, 1.0}
    assert e["score"] == pytest.approx(sum(per.values()) / 8)
    with pytest.raises(ACIError, match="no task 'nope'"):
        call(workdir, checkpoint="base", evaluator="lm-eval", task="nope", task_dir="lm_tasks", limit=8)


def _dev_set(path: Path, n: int = 34) -> Path:
    rows = []
    for i in range(n):
        if i % 2:  # a regex every reply matches: scores 1
            rows.append({"id": f"any-{i}", "messages": [{"role": "user", "content": f"Say anything ({i})."}],
                         "gold": {"answer": "x"}, "grader": {"type": "regex", "pattern": ".*"}})
        else:  # an answer a random tiny model cannot produce: scores 0
            rows.append({"id": f"num-{i}", "question": f"What is 123456789 times {i}?", "answer": "98765432123456789"})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_dev_set_is_generated_and_graded_per_task(workdir, tiny_model):
    init_run(workdir, tiny_model)
    _dev_set(workdir / "dev.jsonl")
    out = call(workdir, checkpoint="base", evaluator="dev", dev_set="dev.jsonl", grader="last-number",
               max_new_tokens=6, batch_size=17)
    e = out.result
    assert e["evaluator"].startswith("dev:dev.jsonl@") and e["samples"] == 34 and e["limit"] is None
    assert e["score"] == pytest.approx(0.5)  # exactly the 17 regex tasks
    folder = ctx(workdir).state.root / "evals" / e["eval_id"]
    replies = [json.loads(line) for line in (folder / "seed-0.responses.jsonl").read_text().splitlines()]
    assert len(replies) == 34 and all(r["score"] == (1.0 if r["id"].startswith("any") else 0.0) for r in replies)
    per = json.loads((folder / "samples.json").read_text())["trials"][0]["per_sample"]
    assert per["any-1"] == 1.0 and per["num-0"] == 0.0
    with pytest.raises(ACIError, match="'num-0'"):  # tasks without a grader need a default
        call(workdir, checkpoint="base", evaluator="dev", dev_set="dev.jsonl", limit=2)
    assert len(out.replies) == 15 and {r["score"] for r in out.replies} == {0.0}  # failures first
    registry.call("plan", {"action": "update", "grader": "last-number"}, ctx(workdir))  # the run card's default
    again = call(workdir, checkpoint="base", evaluator="dev", dev_set="dev.jsonl", max_new_tokens=6, batch_size=17)
    assert again.result["score"] == pytest.approx(0.5) and again.result["evaluator"] == e["evaluator"]  # same grader


def test_sample_generates_and_grades_a_few_items_to_read(workdir, tiny_model):
    init_run(workdir, tiny_model)
    _dev_set(workdir / "dev.jsonl")
    with pytest.raises(ACIError, match="sample needs --dev-set"):
        call(workdir, action="sample", checkpoint="base")
    out = call(workdir, action="sample", checkpoint="base", dev_set="dev.jsonl", grader="last-number",
               max_new_tokens=6)
    assert out.action == "sample" and out.result["samples"] == 15 and out.result["limit"] == 15
    assert len(out.replies) == 15 and [r["score"] for r in out.replies] == sorted(r["score"] for r in out.replies)
    text = out.summary()
    first = out.replies[0]
    assert f"reply {first['id']} scored {first['score']:.3g} ({first['reason']}): " in text


def test_promotion_keeps_the_better_checkpoint_and_refuses_a_worse_one(workdir, tiny_model):
    c = init_run(workdir, tiny_model, command=eval_command("--seed", "{seed}"))
    for step, score in ((10, 0.5), (20, 0.9), (30, 0.52)):
        copy_model(tiny_model, workdir / "runs" / f"checkpoint-{step}", score)
        register(workdir, f"job1/checkpoint-{step}", workdir / "runs" / f"checkpoint-{step}")
    with pytest.raises(ACIError, match=r"^'job1/checkpoint-99' .*\bbase, job1/checkpoint-10, job1/checkpoint-20"):
        call(workdir, checkpoint="job1/checkpoint-99", limit=100)
    with pytest.raises(ACIError) as err:  # nothing to compare with yet
        call(workdir, action="promote", checkpoint="job1/checkpoint-10")
    assert err.value.rule == "keep-best" and "no evaluation with the same evaluator and limit" in str(err.value)
    call(workdir, checkpoint="base", limit=100, trials=3)
    out = call(workdir, checkpoint="job1/checkpoint-10", limit=100, trials=3, promote=True)
    assert out.comparison.method == "ranges" and out.comparison.beats and out.promotion.promoted
    assert out.comparison.delta == pytest.approx(0.3)
    # 30 (0.51..0.53) vs 10 (0.49..0.51): the ranges overlap at 0.51, so the gain is not shown
    out = call(workdir, checkpoint="job1/checkpoint-30", limit=100, trials=3, promote=True)
    assert not out.comparison.beats and "overlap" in out.comparison.reason
    assert not out.promotion.promoted and "[rule keep-best]" in out.promotion.notes[-1]
    out = call(workdir, checkpoint="job1/checkpoint-20", limit=100, trials=3, promote=True)
    assert out.promotion.promoted and out.promotion.reference == "job1/checkpoint-10"
    with pytest.raises(ACIError) as err:  # 10 is worse than the new best
        call(workdir, action="promote", checkpoint="job1/checkpoint-10")
    assert err.value.rule == "keep-best" and "does not beat job1/checkpoint-20" in str(err.value)
    best = c.state.read(records.BEST)
    assert best["checkpoint"] == "job1/checkpoint-20" and best["score"] == pytest.approx(0.9)
    assert best["range"] == [pytest.approx(0.89), pytest.approx(0.91)] and best["samples"] == 100
    final = workdir / "final_model"
    assert json.loads((final / "config.json").read_text())["aci_test_score"] == 0.9
    assert swap.verify(final) == [] and swap.marker(final)["checkpoint"] == "job1/checkpoint-20"
    promotes = [e for e in c.state.journal() if e["kind"] == "promote"]
    assert [e["data"]["checkpoint"] for e in promotes] == ["job1/checkpoint-10", "job1/checkpoint-20"]
    g = gates(ctx(workdir))
    assert g["first-promoted"].passed and "job1/checkpoint-20" in g["first-promoted"].evidence
    listed = call(workdir, action="list", checkpoint="job1/checkpoint-30").evaluations
    assert [e["score"] for e in listed] == [pytest.approx(0.52)]
    cmp = call(workdir, action="compare", checkpoint="job1/checkpoint-20", against="base").comparison
    assert cmp.beats and cmp.delta == pytest.approx(0.7)


def test_promotion_needs_enough_samples_and_a_checkpoint_derived_from_base(workdir, tiny_model):
    init_run(workdir, tiny_model)
    copy_model(tiny_model, workdir / "other", 0.9)
    copy_model(tiny_model, workdir / "mine", 0.9)
    call(workdir, checkpoint="base", limit=10)
    out = call(workdir, checkpoint="mine", parent="base", limit=10, promote=True)
    assert not out.promotion.promoted and "[rule min-eval-samples]" in out.promotion.notes[-1]
    call(workdir, checkpoint="base", limit=40)
    call(workdir, checkpoint="other", limit=40)  # registered without a parent
    with pytest.raises(ACIError) as err:
        call(workdir, action="promote", checkpoint="other")
    assert err.value.rule == "base-model-only"
    out = call(workdir, checkpoint="mine", limit=40, promote=True)
    assert out.promotion.promoted and out.comparison.method == "two-proportion z-test"


def test_over_a_base_that_scored_zero_one_item_right_is_promoted(workdir, tiny_model):
    """1 of 400 against 0 of 400: the z-test alone (p = 0.159) would leave the run on the untrained floor."""
    init_run(workdir, tiny_model, base_score=0.0)
    for name, score in (("none", 0.0), ("one", 0.0025)):
        copy_model(tiny_model, workdir / name, score)
    call(workdir, checkpoint="base", limit=400)
    call(workdir, action="promote", checkpoint="base")
    out = call(workdir, checkpoint="none", parent="base", limit=400, promote=True)
    assert not out.comparison.beats and not out.promotion.promoted
    out = call(workdir, checkpoint="one", parent="base", limit=400, promote=True)
    assert out.comparison.method == "two-proportion z-test" and out.comparison.p_value > 0.05
    assert out.comparison.beats and "the base model scored 0" in out.comparison.reason
    assert out.promotion.promoted and out.promotion.reference == "base"
    assert gates(ctx(workdir))["first-promoted"].passed


def test_base_can_be_promoted_first_as_a_floor(workdir, tiny_model):
    c = init_run(workdir, tiny_model)
    with pytest.raises(ACIError, match="aci eval-checkpoint evaluate --checkpoint base$"):
        call(workdir, action="promote", checkpoint="base")
    call(workdir, checkpoint="base", limit=40)
    out = call(workdir, action="promote", checkpoint="base")
    assert out.promotion.promoted and c.state.read(records.BEST)["checkpoint"] == "base"
    assert (workdir / "final_model" / "config.json").is_file()
    assert not gates(ctx(workdir))["first-promoted"].passed  # a floor, not a trained model
    assert any(r.startswith("final_model is the base model, a floor") for r in out.run.reminders), out.run.reminders
    with pytest.raises(ACIError, match="^base is already final_model"):
        call(workdir, action="promote", checkpoint="base")


def test_lora_checkpoint_is_merged_with_template_processor_files_and_end_of_turn(workdir, tiny_model):
    templates = workdir / "templates"
    templates.mkdir()
    from aci.embedded import CHATML_TEMPLATE

    (templates / "qwen.jinja").write_text(CHATML_TEMPLATE.replace("You may call tools.", "Tools available."))
    c = init_run(workdir, tiny_model, template="templates/qwen.jinja")
    base = workdir / "base"
    (base / "preprocessor_config.json").write_text('{"image_processor_type": "Gemma3ImageProcessor"}')
    gen = json.loads((base / "generation_config.json").read_text())
    (base / "generation_config.json").write_text(json.dumps({**gen, "eos_token_id": 0}))  # no end-of-turn
    adapter = make_lora(base, workdir / "runs" / "lora" / "checkpoint-5")
    shutil.copy(base / "generation_config.json", adapter)  # as a trainer saves it: eos 0 only
    plant(adapter, 0.8, "generation_config.json")  # the stand-in evaluator's score for the merged model
    register(workdir, "lora/checkpoint-5", adapter, adapter=True)
    call(workdir, checkpoint="base", limit=40)
    out = call(workdir, checkpoint="lora/checkpoint-5", limit=40, promote=True)
    assert out.result["score"] == pytest.approx(0.8) and out.promotion.promoted
    final = workdir / "final_model"
    names = {p.name for p in final.iterdir()}
    assert not names & {"adapter_config.json", "adapter_model.safetensors"} and "model.safetensors" in names
    assert (final / "preprocessor_config.json").is_file()
    assert (final / "chat_template.jinja").read_text() == (templates / "qwen.jinja").read_text()
    assert json.loads((final / "tokenizer_config.json").read_text())["chat_template"] == (templates / "qwen.jinja").read_text()
    assert json.loads((final / "generation_config.json").read_text())["eos_token_id"] == [2, 0]  # <|im_end|> first

    import torch
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    expected = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32),
                                         str(adapter)).merge_and_unload().state_dict()
    merged = load_file(final / "model.safetensors")
    key = "model.layers.0.self_attn.q_proj.weight"
    assert torch.allclose(merged[key], expected[key])
    assert not torch.allclose(merged[key], load_file(base / "model.safetensors")[key])
    fin = registry.call("finalize", {}, c)
    assert fin.passed, [i for i in fin.items if not i.passed]


def test_lora_trained_on_a_lora_checkpoint_merges_onto_its_merged_parent(workdir, tiny_model):
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    init_run(workdir, tiny_model)
    base = workdir / "base"
    first = make_lora(base, workdir / "j1" / "checkpoint-1")
    merged_first = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32),
                                             str(first)).merge_and_unload()
    torch.manual_seed(1)  # what a job training from j1/checkpoint-1 does: merge it, then a new LoRA on top
    second = get_peft_model(merged_first, LoraConfig(r=4, target_modules=["q_proj"], init_lora_weights=False))
    second.save_pretrained(workdir / "j2" / "checkpoint-2")
    expected = second.merge_and_unload().state_dict()
    shutil.copy(base / "generation_config.json", workdir / "j2" / "checkpoint-2")
    plant(workdir / "j2" / "checkpoint-2", 0.8, "generation_config.json")
    register(workdir, "j1/checkpoint-1", first, adapter=True)
    register(workdir, "j2/checkpoint-2", workdir / "j2" / "checkpoint-2", parent="j1/checkpoint-1", adapter=True)
    call(workdir, checkpoint="base", limit=40)
    assert call(workdir, checkpoint="j2/checkpoint-2", limit=40, promote=True).promotion.promoted
    key = "model.layers.1.self_attn.q_proj.weight"
    got = load_file(workdir / "final_model" / "model.safetensors")[key]
    assert torch.allclose(got, expected[key], atol=1e-6)
    assert not list(workdir.glob("final_model.*")) and not list((workdir / ".aci-scratch").iterdir())
    # a LoRA checkpoint the trainer also saved merged is used as that full model
    merged_dir = workdir / "j3" / "checkpoint-3" / "merged"
    copy_model(tiny_model, merged_dir, 0.95)
    make_lora(base, workdir / "j3" / "checkpoint-3" / "adapter")
    with ctx(workdir).state.event("train", "checkpoint j3/checkpoint-3 saved", tool="train") as w:
        w.append(records.CHECKPOINTS, {"type": "registered", "checkpoint": "j3/checkpoint-3", "ts": "2026-01-01T00:00:00+00:00",
                                       "path": str(merged_dir.parent / "adapter"), "parent": "base", "adapter": True,
                                       "merged": str(merged_dir)})
    out = call(workdir, checkpoint="j3/checkpoint-3", limit=40, promote=True)
    assert out.result["score"] == pytest.approx(0.95) and out.result["path"] == str(merged_dir)
    assert out.promotion.promoted


def test_background_evaluation_runs_as_a_job_and_can_promote(workdir, tiny_model):
    c = init_run(workdir, tiny_model)
    copy_model(tiny_model, workdir / "ck", 0.7)
    call(workdir, checkpoint="base", limit=40)
    out = call(workdir, checkpoint="ck", parent="base", limit=40, background=True, promote=True)
    assert out.job and out.job.kind == "eval"
    done = Path(out.job.folder) / "exit.json"
    for _ in range(600):
        if done.exists():
            break
        time.sleep(0.1)
    from aci import jobs

    view = jobs.view(c.state, out.job.id)
    assert view.status == "succeeded", view.log_tail
    e = entries(workdir)[-1]
    assert (e["checkpoint"], e["job"], e["score"]) == ("ck", out.job.id, pytest.approx(0.7))
    assert view.progress["done"] and view.progress["eval_id"] == e["eval_id"]
    assert c.state.read(records.BEST)["checkpoint"] == "ck"


def test_compare_states_its_method_and_decision():
    def ev(score, n, scores=None):
        scores = scores or [score]
        return {"evaluator": "e", "limit": n, "score": score, "samples": n, "scores": scores,
                "range": (min(scores), max(scores))}

    c = stats.compare("a", ev(0.6, 100, [0.58, 0.6, 0.62]), None, "b", ev(0.5, 100, [0.48, 0.5, 0.52]), None, 32)
    assert (c.method, c.decided, c.beats) == ("ranges", True, True)
    c = stats.compare("a", ev(0.55, 100, [0.5, 0.55, 0.6]), None, "b", ev(0.5, 100, [0.48, 0.5, 0.52]), None, 32)
    assert (c.method, c.beats) == ("ranges", False) and "overlap" in c.reason
    c = stats.compare("a", ev(0.6, 40), None, "b", ev(0.3, 40), None, 32)
    assert c.method == "two-proportion z-test" and c.beats and c.p_value < 0.01 and c.ci[0] < 0.3 < c.ci[1]
    c = stats.compare("a", ev(0.35, 40), None, "b", ev(0.3, 40), None, 32)
    assert c.decided and not c.beats and c.p_value > 0.05
    a = {str(i): 1.0 if i < 30 else 0.0 for i in range(40)}
    b = {str(i): 1.0 if i < 20 else 0.0 for i in range(40)}
    c = stats.compare("a", ev(0.75, 40), a, "b", ev(0.5, 40), b, 32)
    assert c.method == "paired bootstrap" and c.beats and c.ci[0] > 0
    c = stats.compare("a", ev(0.9, 10), None, "b", ev(0.1, 10), None, 32)
    assert not c.decided and "min-eval-samples" in c.reason
    c = stats.compare("a", ev(12.0, 40), None, "b", ev(10.0, 40), None, 32)
    assert c.method == "none" and not c.decided
    # identical trials (a greedy evaluator) carry no spread: one item apart is not a decision by ranges
    c = stats.compare("a", ev(0.5067, 150, [0.5067, 0.5067]), None, "b", ev(0.5, 150, [0.5, 0.5]), None, 32)
    assert c.method == "two-proportion z-test" and c.decided and not c.beats
    c = stats.compare("a", ev(0.75, 40, [0.75, 0.75]), a, "b", ev(0.5, 40, [0.5, 0.5]), b, 32)
    assert c.method == "paired bootstrap" and c.beats


def test_eval_checkpoint_through_the_stdio_mcp_server(workdir, tiny_model):
    init_run(workdir, tiny_model)
    copy_model(tiny_model, workdir / "ck", 0.6)

    async def go():
        async with mcp_client(workdir) as client:
            r = await client.call_tool("eval-checkpoint", {"action": "evaluate", "checkpoint": "base", "limit": 40})
            assert not r.is_error, r.content
            assert r.structured_content["result"]["score"] == pytest.approx(0.2)
            r = await client.call_tool("eval-checkpoint", {"checkpoint": "ck", "parent": "base", "limit": 40,
                                                           "promote": True})
            assert not r.is_error, r.content
            s = r.structured_content
            assert s["promotion"]["promoted"] and s["comparison"]["beats"] and s["run"]["best"]["checkpoint"] == "ck"
            r = await client.call_tool("eval-checkpoint", {"action": "promote", "checkpoint": "base"})
            assert r.is_error and "[rule keep-best]" in r.content[0].text

    asyncio.run(go())
    assert swap.marker(workdir / "final_model")["checkpoint"] == "ck"


def test_cli_prints_results_and_exits_2_on_errors(workdir, tiny_model):
    init_run(workdir, tiny_model)
    aci = [sys.executable, "-m", "aci.cli"]
    ok = subprocess.run([*aci, "eval-checkpoint", "evaluate", "--checkpoint", "base", "--limit", "40", "--trials", "2"],
                        cwd=workdir, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert "base: 0.2 range 0.2..0.2 on 40 samples, 2 trial(s) (no seed reaches the command), eval-command " \
        "limit 40" in ok.stdout
    bad = subprocess.run([*aci, "eval-checkpoint", "compare", "--checkpoint", "base"], cwd=workdir,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "two different checkpoints" in bad.stderr
    listed = subprocess.run([*aci, "--json", "eval-checkpoint", "list"], cwd=workdir, capture_output=True, text=True,
                            timeout=120)
    assert [e["score"] for e in json.loads(listed.stdout)["evaluations"]] == [0.2]


def test_comparisons_count_what_was_measured(workdir, tiny_model):
    """Over MCP: identical trials a single item apart decide nothing, and a result whose sample count the eval
    command did not report (no --limit) is not counted as the whole benchmark."""
    init_run(workdir, tiny_model, base_score=0.5, benchmark_size=1319)
    copy_model(tiny_model, workdir / "ck", 0.5 + 1 / 150)

    async def go():
        async with mcp_client(workdir) as client:
            async def ev(**args):
                r = await client.call_tool("eval-checkpoint", {"action": "evaluate", **args})
                assert not r.is_error, r.content
                return r.structured_content

            # a script that scores its default subset and reports no count anywhere
            whole = await ev(checkpoint="base", command=eval_command("--no-inspect-log"))
            await ev(checkpoint="base", limit=150, trials=2)
            won = await ev(checkpoint="ck", parent="base", limit=150, trials=2, promote=True)
            return whole, won

    whole, won = asyncio.run(go())
    assert whole["result"]["samples"] is None
    assert any("unknown" in w and "min-eval-samples" in w for w in whole["warnings"])
    assert won["result"]["scores"] == [pytest.approx(0.5 + 1 / 150)] * 2
    assert won["comparison"]["method"] == "two-proportion z-test" and not won["comparison"]["beats"]
    assert not won["promotion"]["promoted"] and "[rule keep-best]" in won["promotion"]["notes"][-1]
    c = ctx(workdir)
    assert gates(c)["baseline"].passed  # by the 150-sample evaluation, not the one of unknown size
    base_only = [e for e in entries(workdir) if e["limit"] is None]
    cmp = stats.compare("base", base_only[0], None, "base", base_only[0], None, 66)
    assert not cmp.decided and "unknown" in cmp.reason and "min-eval-samples" in cmp.reason


def _claims(src: Path, dst: Path, score: float, trainer_state: bool = True, **config) -> Path:
    """A copy of the tiny model that claims to be trained: a trainer_state.json, config fields overridden."""
    copy_model(src, dst, score)
    cfg = json.loads((dst / "config.json").read_text())
    for key, value in config.items():
        if "." in key:
            outer, inner = key.split(".")
            cfg[outer] = {**cfg.get(outer, {}), inner: value}
        else:
            cfg[key] = value
    (dst / "config.json").write_text(json.dumps(cfg))
    if trainer_state:
        (dst / "trainer_state.json").write_text(json.dumps({"global_step": 10, "log_history": []}))
    return dst


def test_model_identity_under_posttrainbench(workdir, tiny_model):
    """Over MCP: registering a folder with --parent needs evidence and no name pointing at another model; the
    architecture (nested text_config too) must match; a registered folder that changed is refused by
    evaluation, training and promotion."""
    from tests.train_helpers import bench_items

    base = copy_model(tiny_model, workdir / "models" / "Qwen3-1.7B-Base", 0.2)
    cfg = json.loads((base / "config.json").read_text())
    text = {k: cfg[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                                "num_key_value_heads", "vocab_size")} | {"model_type": cfg["model_type"]}
    (base / "config.json").write_text(json.dumps({**cfg, "text_config": text}))  # nested, as Gemma 3 has it
    (workdir / "bench_items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in bench_items()))
    registry.call("plan", {"action": "init", "base_model": "models/Qwen3-1.7B-Base", "benchmark": "toy",
                           "profile": "posttrainbench", "eval_command": eval_command(),
                           "reference": "bench_items.jsonl"}, ctx(workdir))
    _claims(base, workdir / "models" / "Qwen3-1.7B", 0.9)  # the instruct sibling, with a trainer_state.json
    _claims(base, workdir / "out" / "named", 0.9, _name_or_path="Qwen/Qwen3-1.7B")
    lora = workdir / "out" / "lora"
    lora.mkdir(parents=True)
    (lora / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "Qwen/Qwen3-1.7B",
                                                          "peft_type": "LORA"}))
    _claims(base, workdir / "out" / "bare", 0.9, trainer_state=False)
    _claims(base, workdir / "out" / "wider", 0.9, **{"text_config.intermediate_size": 2 * text["intermediate_size"]})
    _claims(base, workdir / "out" / "fewer-kv", 0.9, num_key_value_heads=1)
    good = _claims(base, workdir / "out" / "sft-run", 0.9)
    data = workdir / "sft.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant",
                                                                                  "content": "hello"}]}) + "\n")
    assert registry.call("contamination", {"path": "sft.jsonl"}, ctx(workdir)).opens_train_gate

    async def go():
        async with mcp_client(workdir) as client:
            async def tool(name, **args):
                return await client.call_tool(name, args)

            refused = {}
            for name in ("models/Qwen3-1.7B", "out/named", "out/lora", "out/bare", "out/wider", "out/fewer-kv"):
                refused[name] = await tool("eval-checkpoint", checkpoint=name, parent="base", limit=40)
            assert not (await tool("eval-checkpoint", checkpoint="base", limit=40)).is_error
            ok = await tool("eval-checkpoint", checkpoint="out/sft-run", parent="base", limit=40, promote=True)
            plant(good, 0.95)  # the registered folder is changed afterwards
            after = [await tool("eval-checkpoint", checkpoint="out/sft-run", limit=40),
                     await tool("eval-checkpoint", action="promote", checkpoint="out/sft-run"),
                     await tool("train", action="dry-run", data="sft.jsonl", model="out/sft-run")]
            return refused, ok, after

    refused, ok, after = asyncio.run(go())
    why = {name: r.content[0].text for name, r in refused.items()}
    for n, r in refused.items():
        assert r.is_error and "[rule base-model-only]" in why[n], (n, why[n])
    assert "folder name 'Qwen3-1.7B' names another model" in why["models/Qwen3-1.7B"]
    assert "config.json _name_or_path is 'Qwen/Qwen3-1.7B'" in why["out/named"]
    assert "adapter_config.json base_model_name_or_path is 'Qwen/Qwen3-1.7B'" in why["out/lora"]
    assert "shows no sign of being trained from 'base'" in why["out/bare"]
    assert "intermediate_size" in why["out/wider"] and "num_key_value_heads 1 vs" in why["out/fewer-kv"]
    assert not ok.is_error and ok.structured_content["promotion"]["promoted"], ok.content
    [entry] = [e for e in entries(workdir, "registered") if e["checkpoint"] == "out/sft-run"]
    assert entry["content_hash"] and entry["evidence"] == "trainer_state.json from the training run that wrote it"
    for r in after:
        assert r.is_error and "[rule base-model-only]" in r.content[0].text, r.content
        assert "changed since it was registered (config.json differs)" in r.content[0].text
    assert swap.marker(workdir / "final_model")["checkpoint"] == "out/sft-run" and swap.verify(workdir / "final_model") == []


@pytest.mark.parametrize("name,base,other", [
    ("Qwen3-1.7B", "Qwen/Qwen3-1.7B-Base", True),  # the instruct sibling has no suffix
    ("Qwen3-1.7B-Instruct", "Qwen/Qwen3-1.7B-Base", True),
    ("Qwen3-4B-Base", "Qwen/Qwen3-1.7B-Base", True),  # another size
    ("gemma-3-4b-it", "google/gemma-3-4b-pt", True),
    ("SmolLM3-3B", "HuggingFaceTB/SmolLM3-3B-Base", True),
    ("Qwen3-1.7B-Base", "Qwen/Qwen3-1.7B-Base", False),
    ("qwen3-1.7b-sft-v2", "Qwen/Qwen3-1.7B-Base", False),
    ("checkpoint-500", "Qwen/Qwen3-1.7B-Base", False),
    ("fix-it", "google/gemma-3-4b-pt", False),
])
def test_names_of_other_models(name, base, other):
    from aci.evaluation import identity

    assert identity.other_model_name(name, base) is other


def test_architecture_reads_the_text_model_of_a_multimodal_config():
    from aci.evaluation import identity

    text = {"model_type": "gemma3_text", "hidden_size": 2560, "intermediate_size": 10240, "num_hidden_layers": 34,
            "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 262208}
    base = {"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"], "text_config": text,
            "vision_config": {"hidden_size": 1152}}
    assert identity.architecture_diff(text, base) == []  # a text-only checkpoint of the multimodal base
    assert identity.architecture_diff({**text, "num_key_value_heads": 8}, base) == ["num_key_value_heads 8 vs 4"]
    wider = {**base, "text_config": {**text, "intermediate_size": 9216}}
    assert identity.architecture_diff(wider, base) == ["intermediate_size 9216 vs 10240"]


def test_content_hash_sees_a_weight_swap_but_not_a_copy(tmp_path, tiny_model):
    from aci.evaluation import identity

    a = shutil.copytree(tiny_model, tmp_path / "a")
    pinned = identity.pin(a)
    b = shutil.copytree(a, tmp_path / "b", copy_function=shutil.copyfile)  # new files, new times, same content
    assert identity.pin(b)["content_hash"] == pinned["content_hash"]
    big = a / "model-00002.safetensors"  # over the whole-file size: sampled
    big.write_bytes(bytes(8) + bytes(3 << 20))
    before = identity.pin(a)
    with open(big, "r+b") as f:  # the same size, one sampled block different
        f.seek(1 << 20)
        f.write(b"\x01" * 65536)
    after = identity.pin(a)
    assert after["content_hash"] != before["content_hash"]
    assert [k for k in after["files"] if after["files"][k] != before["files"][k]] == ["model-00002.safetensors"]


def test_a_foreground_evaluation_is_a_job_that_outlives_the_server(workdir, tiny_model):
    """The MCP server dies (SIGKILL) during a foreground evaluation: the eval command does not run on unseen;
    it is the child of an evaluation job that status lists, which finishes and records the result."""
    import os
    import signal

    from aci import jobs

    init_run(workdir, tiny_model, command=eval_command("--sleep", "6"))

    def server_pids() -> list[int]:
        found = []
        for p in Path("/proc").iterdir():
            try:
                if p.name.isdigit() and b"serve" in (p / "cmdline").read_bytes() and \
                        Path(os.readlink(p / "cwd")) == workdir:
                    found.append(int(p.name))
            except OSError:
                continue
        return found

    async def go():
        async with mcp_client(workdir) as client:
            call_ = asyncio.create_task(client.call_tool("eval-checkpoint", {"checkpoint": "base", "limit": 40}))
            await asyncio.sleep(3)
            [pid] = server_pids()
            os.kill(pid, signal.SIGKILL)
            try:
                await asyncio.wait_for(call_, 30)
            except BaseException:  # the server is gone: the call cannot answer
                pass

    try:
        asyncio.run(go())
    except BaseException:
        pass
    c = ctx(workdir)
    [job] = jobs.list_jobs(c.state, kind="eval")
    assert job.status in ("running", "succeeded"), job
    done = jobs.wait(c.state, job.id)
    assert done.status == "succeeded", done
    [e] = entries(workdir)
    assert e["job"] == job.id and e["score"] == pytest.approx(0.2)
    registry.call("status", {}, c)  # and the run goes on


def test_full_evaluation_and_the_sample_count_the_run_reports(workdir, tiny_model):
    """Without --limit the script's own default applies (150, as GSM8K's evaluate.py); --limit -1 reaches it
    as every item; the count recorded is the one its inspect log holds, not a guess from the limit."""
    init_run(workdir, tiny_model)
    e = call(workdir, checkpoint="base").result
    assert (e["limit"], e["samples"]) == (None, 150)
    e = call(workdir, checkpoint="base", limit=-1).result
    assert (e["limit"], e["samples"]) == (-1, 1319)
    assert [Path(p).parent.name for p in e["inspect_logs"]] == ["logs"]  # where to read its failures
    log = (ctx(workdir).state.root / "evals" / e["eval_id"] / "seed-0.log").read_text()
    assert "on -1 samples" in log  # passed through as typed, which the script reads as all
    assert call(workdir, checkpoint="base", limit=66).result["samples"] == 66
    with pytest.raises(ACIError, match="--limit 0 .*-1 for every item"):
        call(workdir, checkpoint="base", limit=0)


def test_the_sample_count_is_read_from_a_real_inspect_log(tmp_path):
    """A log written by inspect_ai 0.3.150 itself (mockllm, 2 samples): model and count are found in its head."""
    import os

    (tmp_path / "logs").mkdir()
    log = tmp_path / "logs" / "run.json"
    shutil.copy(Path(__file__).parent / "data" / "inspect_log_mockllm.json", log)
    started = time.time() - 5
    os.utime(log, (started + 1, started + 1))
    assert command.inspect_log(tmp_path, started, "model") == (2, str(log))
    assert command.inspect_log(tmp_path, started, "other-model") is None
    assert command.inspect_log(tmp_path, started + 10, "model") is None  # written before this run
    assert command.inspect_log(tmp_path / "nowhere", started, "model") is None


def test_one_gpu_job_at_a_time(workdir, tiny_model, monkeypatch):
    """With a GPU, an evaluation waits for a running GPU job (here a background evaluation) unless
    --concurrent; so does a training start. Without one, an evaluation runs beside it on the free cores."""
    from aci import jobs
    from aci.training import hardware

    assert not hardware.cuda_likely()  # this machine: evaluations share the cores, no GPU's memory
    init_run(workdir, tiny_model, command=eval_command("--sleep", "60"))
    state = ctx(workdir).state
    job = call(workdir, checkpoint="base", limit=40, background=True).job
    beside = call(workdir, checkpoint="base", limit=40, background=True).job  # no --concurrent needed on a CPU
    assert jobs.stop(state, beside.id, grace_s=5).status in ("stopped", "failed")
    monkeypatch.setattr(hardware, "cuda_likely", lambda: True)  # a stand-in for the GPU this machine lacks
    try:
        busy = rf"^eval job {job.id} .*--concurrent"  # what holds the GPU, and the option that shares it
        with pytest.raises(ACIError, match=busy):
            call(workdir, checkpoint="base", limit=40)
        with pytest.raises(ACIError, match=busy):
            call(workdir, checkpoint="base", limit=40, background=True)
        with pytest.raises(ACIError, match=busy):
            registry.call("train", {"action": "start", "data": "none.jsonl"}, ctx(workdir))
    finally:
        deadline = time.monotonic() + 60
        while jobs.view(state, job.id).pid is None and time.monotonic() < deadline:
            time.sleep(0.2)  # the job's own process is up before it can be signalled
        assert jobs.stop(state, job.id, grace_s=5).status == "stopped"
    registry.call("plan", {"action": "update", "eval_command": eval_command()}, ctx(workdir))
    assert call(workdir, checkpoint="base", limit=40).result["score"] == pytest.approx(0.2)


TALLY_EVAL = own_eval(500, """json.dump({"results": {"accuracy": 0.25, "tally": {"scored": min(a.limit, 500)}}},
          open(a.json_output_file, "w"))
""")


def test_an_unreadable_sample_count_says_what_blocks_and_a_count_key_reads_it(workdir, tiny_model):
    (workdir / "tally_eval.py").write_text(TALLY_EVAL)
    cmd = f"{sys.executable} tally_eval.py --model-path {{model_path}} --limit {{limit}} --json-output-file {{output}}"
    init_run(workdir, tiny_model, command=cmd)
    assert call(workdir, checkpoint="base", limit=100).result["samples"] is None
    gate = gates(ctx(workdir))["baseline"]
    assert not gate.passed and "asked for --limit 100" in gate.evidence and "--count-key" in gate.evidence
    registry.call("plan", {"action": "update", "count_key": "results.tally.scored"}, ctx(workdir))
    assert call(workdir, checkpoint="base", limit=100).result["samples"] == 100
    assert gates(ctx(workdir))["baseline"].passed
    registry.call("plan", {"action": "update", "count_key": "results.nothing"}, ctx(workdir))
    with pytest.raises(ACIError, match="count_key 'results.nothing' is not a positive whole number"):
        call(workdir, checkpoint="base", limit=100)
