"""The eval command as the user types it: `translate` turns it into the tools' template, `plan init`
records what it changed, and `plan init` on a card that PostTrainBench's solve.sh already made updates it
instead of failing."""

from __future__ import annotations

import json

import pytest

from aci import registry
from aci.context import Context
from aci.errors import ACIError
from aci.evaluation.command import argv
from aci.evaluation.translation import translate

TEMPLATE = "python evaluate.py --model-path {model_path} --limit {limit} --json-output-file {output}"


@pytest.mark.parametrize("typed, want", [
    ("python evaluate.py --model-path final_model --limit -1", TEMPLATE),
    ("python evaluate.py --model-path final_model", TEMPLATE),
    ("python evaluate.py --model-path /home/ben/task/final_model --limit 50 --json-output-file metrics.json", TEMPLATE),
    ("python evaluate.py --model-path=./final_model/ --limit=150",
     "python evaluate.py --model-path={model_path} --limit={limit} --json-output-file {output}"),
    (TEMPLATE, TEMPLATE),
    ("python evaluate.py --limit 20 --model-path final_model --max-tokens 4000",
     "python evaluate.py --limit {limit} --model-path {model_path} --max-tokens 4000 --json-output-file {output}"),
    ("bash run_eval.sh final_model", "bash run_eval.sh {model_path}"),
    ("python evaluate.py --model-path 'my models/final_model'", TEMPLATE),
])
def test_translate_turns_the_typed_command_into_the_template(typed, want):
    t = translate(typed)
    assert t.command == want
    assert translate(t.command) == type(t)(want, [])  # a template comes back unchanged
    assert bool(t.changes) == (typed != want)


def test_translate_says_what_it_changed_and_why():
    changes = translate("python evaluate.py --model-path final_model --limit -1").changes
    assert changes[0].startswith("`--model-path final_model` -> `--model-path {model_path}`")
    assert changes[1].startswith("`--limit -1` -> `--limit {limit}`") and "with `--limit -1`" in changes[1]
    assert changes[2].startswith("added `--json-output-file {output}`")


def test_the_translation_runs_as_the_user_meant(tmp_path):
    cmd = translate("python evaluate.py --model-path=final_model --limit=-1").command
    out = tmp_path / "m.json"
    assert argv(cmd, model_path="ck/1", limit=None, output=out, seed=0) == [
        "python", "evaluate.py", "--model-path=ck/1", "--json-output-file", str(out)]
    assert argv(cmd, model_path="ck/1", limit=66, output=out, seed=0)[3] == "--limit=66"


@pytest.mark.parametrize("typed, match", [  # what to add or fix, beside the command as read
    ("python evaluate.py --checkpoint ck", r"\{model_path\}.*--model-option"),
    ("python evaluate.py --model-path 'x", "No closing quotation"),
    ("", "empty"),
])
def test_translate_refuses_what_it_cannot_read(typed, match):
    with pytest.raises(ACIError, match=match) as e:
        translate(typed)
    assert repr(typed) in str(e.value) or not typed


def test_plan_init_accepts_the_typed_command_and_records_the_translation(workdir):
    c = Context(workdir=workdir)
    out = registry.call("plan", {"action": "init", "base_model": "base", "benchmark": "gsm8k",
                                 "eval_command": "python evaluate.py --model-path final_model --limit -1",
                                 "metric_key": "accuracy", "targets": [{"metric": "accuracy", "value": 0.885}]}, c)
    assert out.card["eval_command"] == TEMPLATE and out.card["metric_key"] == "accuracy"
    assert out.card["targets"] == [{"metric": "accuracy", "value": 0.885}]
    assert len(out.translation) == 3 and "eval command as typed, changed" in out.summary()
    event = json.loads((workdir / "state" / "journal.jsonl").read_text().splitlines()[-1])
    assert event["data"]["eval_command_typed"] == "python evaluate.py --model-path final_model --limit -1"
    assert event["data"]["translation"] == out.translation


def test_plan_init_on_an_existing_card_updates_it_and_keeps_the_base_model(workdir):
    c = Context(workdir=workdir)
    registry.call("plan", {"action": "init", "profile": "posttrainbench", "base_model": "Qwen/Qwen3-1.7B-Base",
                           "benchmark": "GSM8K (Grade School Math 8K)", "eval_command": TEMPLATE}, c)
    started = json.loads((workdir / "state" / "run.json").read_text())["started_at"]
    out = registry.call("plan", {"action": "init", "profile": "posttrainbench", "base_model": "./Qwen3-1.7B-Base",
                                 "benchmark": "gsm8k", "benchmark_size": 1319, "metric_key": "accuracy",
                                 "eval_command": "python evaluate.py --model-path final_model --limit -1"}, Context(workdir=workdir))
    card = out.card
    assert card["base_model"] == "Qwen/Qwen3-1.7B-Base" and card["profile"] == "posttrainbench"
    assert (card["benchmark"], card["benchmark_size"], card["metric_key"]) == ("gsm8k", 1319, "accuracy")
    assert card["started_at"] == started  # the deadline and the clock stay the card's
    # eval_options: the command as typed (`--limit -1`) says what every item is, which the template did not
    assert "already existed" in out.warnings[0] and "benchmark, benchmark_size, eval_options, metric_key" in out.warnings[0]
    assert any("kept the card's base_model" in w and "--force" in w for w in out.warnings)
    same = registry.call("plan", {"action": "init", "base_model": "Qwen/Qwen3-1.7B-Base", "benchmark": "gsm8k"},
                         Context(workdir=workdir))
    assert "init applied nothing new" in same.warnings[0]
