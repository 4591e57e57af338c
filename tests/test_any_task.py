"""A user's own task, honestly measured (issue 27, and issue 26 row 9): one test per row of the issue's
table that is not about contamination, each failing on the code before the fix.

The task is unlike PostTrainBench's: its eval script takes `--checkpoint`, `--n` (0 = all) and `--out`,
writes `{"results": {"ledger": {"exact_match": x, "n": k}}}`, and there is no `timer.sh`; the budget is a
deadline the user gives. The end-to-end run through the MCP server is `tests/test_any_task_e2e.py`.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from aci import registry
from aci.context import Context
from aci.errors import ACIError
from aci.state import now

FIXTURES = Path(__file__).resolve().parent / "fixtures"
LEDGER = FIXTURES / "ledger_eval.py"


def ledger_task(workdir: Path, items: int = 300) -> str:
    """The user's task folder: their eval script and its 300 test items; returns the command as typed."""
    (workdir / "data").mkdir(exist_ok=True)
    rows = [{"id": f"t{k}", "question": f"A ledger lists {k % 17 + 2} crates of {k % 5 + 3} jars. How many jars?",
             "answer": str((k % 17 + 2) * (k % 5 + 3))} for k in range(items)]
    (workdir / "data" / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    script = workdir / "ledger_eval.py"
    script.write_text(LEDGER.read_text())
    return f"{shlex.quote(sys.executable)} ledger_eval.py --checkpoint final_model --n 0 --out results.json"


def plan(workdir: Path, **args):
    return registry.call("plan", {"action": "init", "base_model": "base", "benchmark": "ledger", **args},
                         Context(workdir=workdir))


# -- row 1: the eval command's own options, learnt from its --help ----------------------------------------
def test_plan_init_maps_every_option_of_a_command_it_has_never_seen(workdir):
    typed = ledger_task(workdir)
    out = plan(workdir, eval_command=typed)
    cmd = out.card["eval_command"]
    assert cmd.endswith("ledger_eval.py --checkpoint {model_path} --n {limit} --out {output}"), cmd
    opts = out.card["eval_options"]
    assert (opts["model_path"], opts["limit"], opts["limit_all"], opts["output"], opts["seed"]) == \
        ("--checkpoint", "--n", "0", "--out", "--seed")
    assert opts["placed_by"]["limit_all"] == "its help text" and "--help" in opts["help"]
    text = out.summary()
    assert "eval option for the sample limit: --n" in text and "every item = 0" in text
    assert "`--n 0` -> `--n {limit}`" in text and "`--out results.json` -> `--out {output}`" in text
    assert "trials pass no seed (--seed-option adds it)" in text  # found, but the run is not changed unasked
    seeded = plan(workdir, eval_command=typed, seed_option="--seed", force=True)
    assert seeded.card["eval_command"].endswith("--out {output} --seed {seed}")


def test_an_option_two_roles_fit_is_asked_for_not_guessed(workdir):
    ledger_task(workdir)
    (workdir / "two.py").write_text(
        "import argparse\np = argparse.ArgumentParser()\np.add_argument('--checkpoint')\n"
        "p.add_argument('--n', help='number of problems to score')\n"
        "p.add_argument('--count', help='number of problems to score')\np.parse_args()\n")
    with pytest.raises(ACIError, match=r"^--count and --n .*--limit-option"):
        plan(workdir, eval_command="python two.py --checkpoint final_model")
    out = plan(workdir, eval_command="python two.py --checkpoint final_model", limit_option="--n", limit_all="0")
    assert out.card["eval_command"] == "python two.py --checkpoint {model_path} --n {limit}"
    assert out.card["eval_options"]["placed_by"] == {"limit": "given", "model_path": "its name and help in "
                                                     "`python two.py --help`", "limit_all": "given"}


def test_a_script_without_help_is_read_safely_and_the_rest_is_asked_for(workdir, monkeypatch):
    """No --help at all (the script ignores its arguments and hangs): plan init returns within the help
    timeout (shortened here), maps the `final_model` argument, and asks for the other options instead of
    guessing."""
    from aci.evaluation import options, translation

    monkeypatch.setattr(options, "HELP_TIMEOUT_S", 1.0)
    (workdir / "bare.py").write_text("import time\ntime.sleep(60)\n")
    started = time.monotonic()
    t = translation.learn("python bare.py final_model --n 5", workdir, {}, None)
    assert time.monotonic() - started < options.HELP_TIMEOUT_S + 3
    assert t.command == "python bare.py {model_path} --n 5"  # --n is not placed by its name alone
    assert any("could not read the eval command's options" in w and "--limit-option" in w for w in t.warnings)
    with pytest.raises(ACIError, match="NUL byte"):  # before anything is run with it
        translation.learn("python bare.py\x00 final_model", workdir, {}, None)


def test_help_texts_of_argparse_and_click_are_parsed():
    from aci.evaluation.options import Help, all_value, parse_help, place

    click_help = """Usage: eval.py [OPTIONS]

Options:
  --ckpt PATH          model folder to score  [required]
  -n, --num-problems INTEGER
                       how many problems to evaluate; -1 evaluates all of them
  -o, --output FILE    write the metrics JSON here
  --output-dir PATH    folder for plots
  --verbose / --quiet
  --help               Show this message and exit.
"""
    opts = parse_help(click_help)
    assert [o.names for o in opts] == [("--ckpt",), ("-n", "--num-problems"), ("-o", "--output"), ("--output-dir",),
                                       ("--verbose",), ("--help",)]
    assert not opts[4].takes_value and "evaluates all" in opts[1].help
    h = Help(options=opts, source="x")
    assert place("model_path", h, set())[0] == "--ckpt"
    assert place("limit", h, set())[0] == "--num-problems"
    assert place("output", h, set())[0] == "--output"  # not the folder
    assert all_value(opts[1].help, None) == ("-1", "its help text")
    assert all_value("number of samples", "0") == ("0", "the command as typed")
    assert all_value("number of samples", "50") == (None, None)
    assert all_value("samples to score (default: 150, use -1 for all)", None) == ("-1", "its help text")


# -- row 2: a --limit that cannot reach the command, and samples from what ran -----------------------------
def test_a_limit_the_command_cannot_take_is_refused_and_samples_are_what_it_scored(workdir, tiny_model):
    from tests.eval_helpers import copy_model

    ledger_task(workdir)
    copy_model(tiny_model, workdir / "base", 0.2)  # scored 0.2 by the script without generating
    (workdir / "all.py").write_text(LEDGER.read_text().replace('p.add_argument("--n",', 'p.add_argument("--x-n", dest="n",'))
    plan(workdir, eval_command=f"{shlex.quote(sys.executable)} all.py --checkpoint final_model --out r.json")
    with pytest.raises(ACIError, match=r": --limit 30 .*\{limit\}.*--limit-option"):
        registry.call("eval-checkpoint", {"checkpoint": "base", "limit": 30}, Context(workdir=workdir))
    e = registry.call("eval-checkpoint", {"checkpoint": "base"}, Context(workdir=workdir)).result
    assert (e["limit"], e["samples"], e["metric"]) == (None, 300, "results.ledger.exact_match")
    assert e["score"] == pytest.approx(0.2)


def test_nested_metrics_and_their_counts_are_found():
    from aci.evaluation.command import pick_score, sample_count

    m = {"results": {"ledger": {"exact_match": 0.25, "n": 300, "stderr": 0.02}}, "config": {"seed": 0}}
    assert pick_score(m, None, "f") == ("results.ledger.exact_match", 0.25)
    assert sample_count(m, "results.ledger.exact_match") == 300
    two = {"results": {"a": {"exact_match": 0.5, "n": 10}, "b": {"exact_match": 0.7, "n": 20}}}
    with pytest.raises(ACIError, match="results.a.exact_match, results.a.n"):
        pick_score(two, None, "f")
    assert sample_count(two, "results.b.exact_match") == 20 and sample_count(two) is None
    assert sample_count({"acc": 1.0, "predictions": [{"id": 1}, {"id": 2}]}, "acc") == 2
    assert sample_count({"scores": {"ledger": {"accuracy": 0.5, "count": 30}}}, "scores.ledger.accuracy") == 30


def test_samples_are_counted_from_the_commands_own_sample_log(tmp_path):
    from aci.evaluation.command import sample_log

    since = time.time() - 1
    (tmp_path / "seed-0.samples.jsonl").write_text('{"id": 1}\n{"id": 2}\n\n{"id": 3}\n')
    assert sample_log([tmp_path], since, set()) == (3, str(tmp_path / "seed-0.samples.jsonl"))
    (tmp_path / "other.jsonl").write_text('{"id": 1}\n')
    assert sample_log([tmp_path], since, set()) is None  # two logs: which one counts would be a guess


# -- row 3: the budget the user gives -------------------------------------------------------------------------
def test_a_deadline_as_a_clock_time_sets_the_budget_the_plan_and_the_reserve(workdir):
    at = (now() + timedelta(minutes=45)).astimezone()
    out = plan(workdir, deadline=at.strftime("%H:%M"))
    budget = out.card["budget_hours"] * 60
    assert 43.9 < budget <= 45.1, budget
    submit = next(p for p in out.phases if p.name == "submit")
    assert 6.5 < submit.allocated_min < 6.8  # 15 % of 45 minutes, not 30
    assert abs(sum(p.allocated_min for p in out.phases) - budget) < 0.5
    s = registry.call("status", {}, Context(workdir=workdir))
    assert 6.5 < s.state.final_reserve_min < 6.8 and s.state.deadline_source == "run card deadline"
    assert any("Final reserve starts in 0h3" in r for r in s.run.reminders), s.run.reminders
    assert any("local time" in w for w in out.warnings)


def test_budget_minutes_from_now(workdir):
    out = plan(workdir, budget_minutes=40)
    assert out.card["budget_hours"] == pytest.approx(40 / 60)
    assert next(p for p in out.phases if p.name == "submit").allocated_min == pytest.approx(6.0)
    later = (now() + timedelta(minutes=90)).isoformat(timespec="seconds")
    moved = registry.call("plan", {"action": "update", "deadline": later}, Context(workdir=workdir))
    assert 89.5 < moved.card["budget_hours"] * 60 < 90.5  # the budget follows a new deadline
    with pytest.raises(ACIError, match="--budget-minutes or --budget-hours"):
        plan(workdir, budget_minutes=40, budget_hours=1, force=True)
    gone = (now() - timedelta(minutes=5)).isoformat()
    with pytest.raises(ACIError, match=re.escape(repr(gone)) + r".*\bhas passed"):
        plan(workdir, deadline=gone, force=True)


# -- issue 26 row 9: a timer.sh that hangs or fails ------------------------------------------------------------
def test_helper_commands_cannot_hold_the_caller(tmp_path):
    """What runs timer.sh and a script's --help: a child holding the pipe, or endless output, is cut off."""
    from aci.processes import run_briefly

    started = time.monotonic()
    assert run_briefly(["bash", "-c", "echo 1:00; sleep 30 & sleep 30"], tmp_path, 1.0) == (None, "1:00\n")
    rc, out = run_briefly(["yes"], tmp_path, 10.0, max_chars=1000)
    assert rc is None and len(out) == 1000 and time.monotonic() - started < 5
    assert run_briefly([str(tmp_path / "missing")], tmp_path, 1.0)[1].startswith("could not start")



@pytest.mark.parametrize("script", ["sleep 30\n", "echo 'no time here'; exit 3\n"], ids=["hangs", "fails"])
def test_a_broken_timer_falls_back_to_the_recorded_deadline(workdir, script):
    from aci import clock

    getattr(clock, "_failures", {}).clear()  # a failure remembered by an earlier test
    deadline = (now() + timedelta(hours=2)).isoformat(timespec="seconds")
    plan(workdir, deadline=deadline)
    (workdir / "timer.sh").write_text(script)
    started = time.monotonic()
    s = registry.call("status", {}, Context(workdir=workdir))
    first = time.monotonic() - started
    assert first < clock.TIMER_TIMEOUT_S + 2
    assert s.state.deadline_source == "run card deadline" and s.state.deadline == deadline
    assert any("timer.sh" in r and "the deadline is the run card's" in r for r in s.run.reminders)
    started = time.monotonic()
    fin = registry.call("finalize", {}, Context(workdir=workdir))
    assert time.monotonic() - started < clock.TIMER_TIMEOUT_S  # the failure is remembered: no second timeout
    assert not fin.passed and any("timer.sh" in r for r in fin.run.reminders)
    again = plan(workdir, deadline=deadline, force=True)  # plan init itself is not stopped by it either
    assert again.card["deadline"] == deadline and any("timer.sh" in w for w in again.warnings)


# -- row 7: promotion changes only what it says ----------------------------------------------------------------
def _two_checkpoints(workdir: Path, tiny_model: Path, **card) -> None:
    """A run whose base scores 0.2, and checkpoints job/checkpoint-1 (0.6) and job/checkpoint-2 (0.9), each
    evaluated on 40 items by the stand-in evaluate.py."""
    from tests.eval_helpers import call, copy_model, init_run, register

    init_run(workdir, tiny_model, **card)
    call(workdir, checkpoint="base", limit=40)
    for step, score in ((1, 0.6), (2, 0.9)):
        ck = copy_model(tiny_model, workdir / "runs" / f"checkpoint-{step}", score)
        register(workdir, f"job/checkpoint-{step}", ck)
        call(workdir, checkpoint=f"job/checkpoint-{step}", limit=40)


def test_promotion_keeps_the_checkpoints_own_template_and_lists_what_it_wrote(workdir, tiny_model):
    from tests.eval_helpers import call

    (workdir / "templates").mkdir()
    (workdir / "templates" / "eval.jinja").write_text((tiny_model / "chat_template.jinja").read_text()
                                                      .replace("<|im_start|>", "<|im_start|> "))
    _two_checkpoints(workdir, tiny_model, template="templates/eval.jinja")
    own = (workdir / "runs" / "checkpoint-1" / "chat_template.jinja").read_text()
    out = call(workdir, action="promote", checkpoint="job/checkpoint-1").promotion
    final = workdir / "final_model"
    assert (final / "chat_template.jinja").read_text() == own  # today: replaced by templates/eval.jinja
    assert json.loads((final / "tokenizer_config.json").read_text())["chat_template"] == \
        json.loads((tiny_model / "tokenizer_config.json").read_text())["chat_template"]
    assert set(out.files) == {p.name for p in final.iterdir()}
    assert out.files["chat_template.jinja"].endswith("own (differs from the run card template)")
    assert "end-of-turn id first" in out.files["generation_config.json"]
    assert any("kept job/checkpoint-1's own chat template" in n and "--set-template" in n for n in out.notes)
    asked = call(workdir, action="promote", checkpoint="job/checkpoint-2", set_template=True).promotion
    assert (final / "chat_template.jinja").read_text() == (workdir / "templates" / "eval.jinja").read_text()
    assert asked.files["chat_template.jinja"] == "run card template"


def _mount_namespace_or_skip() -> None:
    import os
    import shutil
    import subprocess

    if shutil.which("unshare") and subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode == 0:
        return
    message = "no mount namespace here (unshare -rm fails): cannot make final_model a bind mount"
    if os.environ.get("ACI_REQUIRE_EXTERNAL") == "1":
        pytest.fail(message)
    pytest.skip(message)


def test_promotion_into_a_mounted_final_model_swaps_its_contents(workdir, tiny_model, tmp_path_factory):
    """Harbor mounts final_model and says not to rename it: here it is a bind mount in a mount namespace,
    where renaming it fails (EBUSY), as today's promotion did. Two promotions replace its contents."""
    import subprocess

    from aci.evaluation import swap

    _mount_namespace_or_skip()
    _two_checkpoints(workdir, tiny_model)
    volume = tmp_path_factory.mktemp("volume")
    (workdir / "final_model").mkdir()
    aci = f"{shlex.quote(sys.executable)} -m aci.cli"
    final = shlex.quote(str(workdir / "final_model"))
    script = (f"mount --bind {shlex.quote(str(volume))} {final} && mv {final} {final}.x; "
              f"{aci} eval-checkpoint promote --checkpoint job/checkpoint-1 && "
              f"{aci} eval-checkpoint promote --checkpoint job/checkpoint-2 && "
              f"grep -qF ' {workdir / 'final_model'} ' /proc/self/mountinfo")  # still the mount
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script], cwd=workdir, capture_output=True, text=True,
                          timeout=300)
    assert "Device or resource busy" in done.stderr  # the folder itself cannot be renamed there
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("swapped the contents of final_model, not the folder (final_model is a mount "
                             "point)") == 2, done.stdout
    m = swap.marker(volume)
    assert m["checkpoint"] == "job/checkpoint-2" and swap.verify(volume) == []
    assert json.loads((volume / "config.json").read_text())["aci_test_score"] == 0.9
    assert sorted(p.name for p in volume.iterdir() if p.name.startswith(".aci-")) == [swap.MARKER]
    assert Context(workdir=workdir).best.checkpoint == "job/checkpoint-2"
    assert not list(workdir.glob("final_model.*"))


# -- row 6: finalize checks what the grader reads -------------------------------------------------------------
def _taught(tiny_model: Path, out: Path, question: str, reply: str) -> Path:
    """The tiny model after a few hundred steps on one conversation: it answers `question` with `reply`."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    shutil.copytree(tiny_model, out)
    tok = AutoTokenizer.from_pretrained(out)
    prompt = tok.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                     add_generation_prompt=True)
    ids = tok(prompt + reply + "<|im_end|>", return_tensors="pt", add_special_tokens=False)["input_ids"]
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(150):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    model.save_pretrained(out)
    return out


@pytest.mark.parametrize("answers", [True, False], ids=["in-format", "garbage"])
def test_finalize_generation_check_reads_the_reply_as_the_grader_would(workdir, tiny_model, answers):
    from tests.eval_helpers import call, init_run, plant

    ledger_task(workdir)
    question = json.loads((workdir / "data" / "test.jsonl").read_text().splitlines()[0])["question"]
    init_run(workdir, tiny_model, reference="data/test.jsonl")
    registry.call("log-state", {"kind": "benchmark-card", "message": "ledger: last line 'Total: <jars>'",
                                "data": {"answer_format": "Total: <number of jars>"}}, Context(workdir=workdir))
    ck = workdir / "ck"
    if answers:
        plant(_taught(tiny_model, ck, question, "Total: 6"), 0.6)
    else:  # the random tiny model: tokens, but no answer line
        from tests.eval_helpers import copy_model

        copy_model(tiny_model, ck, 0.6)
    call(workdir, checkpoint="base", limit=40)
    assert call(workdir, checkpoint="ck", parent="base", limit=40, promote=True).promotion.promoted
    item = {i.name: i for i in registry.call("finalize", {}, Context(workdir=workdir)).items}["generates"]
    assert "for the first item of test.jsonl" in item.detail
    assert "Total: <answer>" in item.detail and "the benchmark card's answer format" in item.detail
    assert item.passed is answers, item
    if not answers:  # today: `[x] generates 16 tokens` for the same garbage
        assert "the grader would read no answer" in item.detail and item.fix


# -- row 8: reminders that fit the situation --------------------------------------------------------------------
@pytest.mark.parametrize("limit,trials,says", [
    (-1, 2, set()),  # every item, identical (greedy) trials: nothing left to confirm
    (100, 2, {"every item"}),  # identical trials show greedy decoding, but only 100 items were scored
    (-1, 1, {"--trials 3"}),  # every item, one trial: more trials only if its decoding samples
])
def test_a_perfect_score_says_what_is_left_to_do(workdir, tiny_model, limit, trials, says):
    from tests.eval_helpers import call, copy_model, init_run

    init_run(workdir, tiny_model, benchmark_size=1319, targets=[{"metric": "accuracy", "value": 0.9}])
    call(workdir, checkpoint="base", limit=limit)
    copy_model(tiny_model, workdir / "ck", 1.0)
    assert call(workdir, checkpoint="ck", parent="base", limit=limit, trials=trials, promote=True).promotion.promoted
    s = registry.call("status", {}, Context(workdir=workdir))
    text = " ".join([*s.state.next_actions, *s.run.reminders, s.state.goal.text])
    assert ("every item (aci" in text) == ("every item" in says), text
    assert ("--trials 3" in text) == ("--trials 3" in says), text
    assert "more trials" not in text
    if not says:  # today: "confirm it on every item and with more trials", after 1319/1319 greedy
        assert "on every item: nothing scores above it" in s.state.next_actions[0]
        assert any("another seed of the generator" in a for a in s.state.next_actions)
        assert any("never trained on" in a for a in s.state.next_actions)
        assert any("aci finalize" in a for a in s.state.next_actions)
