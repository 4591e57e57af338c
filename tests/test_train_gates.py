"""Every refusal of `train` names its rule; nonsense configurations are refused before launch. The checks
run in-process through the real registry on one shared run (posttrainbench rules), nothing is launched."""

from __future__ import annotations

import asyncio
import json
import math
import re
import shutil
import subprocess
import sys
from datetime import timedelta

import pytest

from aci import manifest, records, registry, templates
from aci.errors import ACIError
from aci.state import now
from aci.training import data as training_data
from tests.conftest import mcp_client
from tests.train_helpers import FAST, bench_items, call, ctx_for, make_run, sft_rows, task_rows, write_jsonl


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_model):
    wd = tmp_path_factory.mktemp("gates")
    make_run(wd, tiny_model)
    return wd


def checked(workdir, path) -> None:
    """The real contamination check of `path` against the run card's pinned items, passing."""
    assert registry.call("contamination", {"path": str(path)}, ctx_for(workdir)).opens_train_gate


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
    checked(run, path)
    write_jsonl(path, sft_rows(5))  # edited after the check
    assert "changed since its contamination check" in refused("no-test-data", run, data="edited.jsonl")


def test_the_job_trains_only_the_bytes_that_were_checked(run):
    """A row appended after the contamination check and the train checks: the job refuses the file."""
    path = write_jsonl(run / "late.jsonl", sft_rows(4))
    assert registry.call("contamination", {"path": "late.jsonl"}, ctx_for(run)).opens_train_gate
    out = call(run, action="dry-run", data="late.jsonl", **FAST, max_steps=2)
    config = run / "late-config.json"
    config.write_text(json.dumps(out.config))
    item = bench_items()[2]
    with open(path, "a") as f:
        f.write(json.dumps({"messages": [{"role": "user", "content": item["question"]},
                                         {"role": "assistant", "content": item["answer"]}]}) + "\n")
    job = subprocess.run([sys.executable, "-m", "aci.training.run", str(config)], capture_output=True, text=True,
                         cwd=run, timeout=300)
    assert job.returncode == 2, job.stdout + job.stderr
    assert "[rule no-test-data]" in job.stdout and "changed after this job's checks" in job.stdout
    assert "changed since its contamination check" in refused("no-test-data", run, data="late.jsonl")
    check = registry.call("contamination", {"path": "late.jsonl"}, ctx_for(run))
    assert check.verdict == "fail" and check.contaminated[0]["label"] == "judge"


def test_only_a_pass_against_the_pinned_reference_counts(run):
    write_jsonl(run / "other_items.jsonl", [{**r, "question": r["question"].replace("marbles", "kites")}
                                             for r in bench_items()])
    write_jsonl(run / "elsewhere.jsonl", sft_rows(3))
    assert registry.call("contamination", {"path": "elsewhere.jsonl", "reference": "other_items.jsonl"},
                         ctx_for(run)).verdict == "pass"
    assert "not the run card's pinned reference" in refused("no-test-data", run, data="elsewhere.jsonl")


def test_forbidden_datasets_by_source_or_file_name(run):
    assert "Idavidrein/gpqa" in refused("forbidden-datasets", run, source="Idavidrein/gpqa")
    shutil.copy(run / "sft.jsonl", run / "humaneval_solutions.jsonl")
    assert "humaneval" in refused("forbidden-datasets", run, data="humaneval_solutions.jsonl")
    (run / "bfcl-work").mkdir()  # a folder named after the benchmark does not make its data banned
    write_jsonl(run / "bfcl-work" / "mine.jsonl", sft_rows(4))
    assert registry.call("contamination", {"path": "bfcl-work/mine.jsonl"}, ctx_for(run)).opens_train_gate
    assert call(run, action="dry-run", data="bfcl-work/mine.jsonl", **FAST, max_steps=2).checks["rows"] == 4


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
    """A fixed-step schedule that does not fit is refused with the steps that would; a wsd one (the default
    with a deadline) is let through with the step its decay is timed to, unless not one step fits."""
    msg = refused("final-reserve", run, max_steps=5000, tokens_per_s=2.0, lr_schedule="cosine")
    fit = int(re.search(r"max_steps=(\d+) would fit", msg).group(1))
    assert "would take" in msg and "left before the final reserve" in msg and "--lr-schedule wsd" in msg
    assert 10 < fit < 5000
    out = call(run, action="dry-run", data="sft.jsonl", **FAST, max_steps=fit, tokens_per_s=2.0, lr_schedule="cosine")
    assert out.checks["estimate"]["steps"] == fit and out.checks["estimate"]["rate_source"] == "declared"
    wsd = call(run, action="dry-run", data="sft.jsonl", **FAST, max_steps=5000, tokens_per_s=2.0)
    est = wsd.checks["estimate"]
    assert est["lr_schedule"] == "wsd" and est["cut"] and abs(est["steps_that_fit"] - fit) <= 1
    assert any(f"reaches about step {est['steps_that_fit']}" in w for w in wsd.warnings)
    assert wsd.config["estimate"]["step_s"] == est["step_s"] > 0  # the job plans with it until it measures
    for schedule in ("wsd", "cosine"):
        msg = refused("final-reserve", run, max_steps=5000, tokens_per_s=0.001, lr_schedule=schedule)
        assert "no run of even one step fits, so no checkpoint would be saved" in msg


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
    make_run(tmp_path, tiny_model, profile="default", contamination=None, budget_hours=10,  # a 10-hour run
             deadline=(now() + timedelta(minutes=10)).isoformat())  # with 10 minutes left
    assert "the final reserve has started" in refused("final-reserve", tmp_path)


def test_nonsense_is_refused_before_launch(run):
    with pytest.raises(ACIError, match=r"\b16\b.*max_length=36 \(longest \d+ tokens\).*--max-length"):
        call(run, action="dry-run", data="sft.jsonl", **{**FAST, "max_length": 36})
    long_prompt = [{"messages": [{"role": "user", "content": "word " * 80}, {"role": "assistant", "content": "ok"}]}]
    path = write_jsonl(run / "long.jsonl", long_prompt * 3)
    checked(run, path)
    with pytest.raises(ACIError, match=r"\bfirst 3 samples\b.*assistant token"):
        call(run, action="dry-run", data="long.jsonl", **FAST)
    with pytest.raises(ACIError, match=r"\b2 completions\b.*num_generations=3"):  # batch_size 2 x grad_accum 1 x 1 GPU
        call(run, action="dry-run", method="grpo", data="tasks.jsonl", **FAST, num_generations=3)
    with pytest.raises(ACIError, match="`pip install deepspeed`"):
        call(run, action="dry-run", data="sft.jsonl", **FAST, deepspeed="zero2")
    with pytest.raises(ACIError, match=re.escape(f"no run card in {run / 'templates' / 'state'}:")):
        call(run / "templates", action="dry-run", data="sft.jsonl")


def test_grpo_checks_report_prompts_and_graders(run):
    grpo = {**FAST, "batch_size": 4, "num_generations": 2}
    out = call(run, action="dry-run", method="grpo", data="tasks.jsonl", **grpo, max_completion_length=8)
    assert out.checks["samples_checked"] == 8 and out.checks["example"].endswith("<|im_start|>assistant\n")
    assert out.config["grpo"]["num_generations"] == 2 and out.config["learning_rate"] == 1e-6
    write_jsonl(run / "nograder.jsonl", [{"id": "a", "messages": [{"role": "user", "content": "1+1?"}],
                                          "gold": {"answer": "2"}}])
    checked(run, run / "nograder.jsonl")
    with pytest.raises(ACIError, match=r"^task 'a' .*--grader"):
        call(run, action="dry-run", method="grpo", data="nograder.jsonl", **grpo)
    touched = run / "touched"  # a row's own program grader is refused before the job, never built or run
    write_jsonl(run / "programs.jsonl", task_rows(4, grader={"type": "command", "command": ["touch", str(touched)]}))
    checked(run, run / "programs.jsonl")
    with pytest.raises(ACIError, match=r"^task 'add-0' names the grader 'command', which runs a program"):
        call(run, action="dry-run", method="grpo", data="programs.jsonl", **grpo)
    assert not touched.exists()


def test_a_refusal_reaches_the_agent_through_mcp(run):
    async def go():
        async with mcp_client(run) as c:
            return await c.call_tool("train", {"action": "start", "data": "sft.jsonl", "source": "openai/healthbench"})

    r = asyncio.run(go())
    assert r.is_error and "[rule forbidden-datasets]" in r.content[0].text and "openai/healthbench" in r.content[0].text


def test_the_deadline_check_counts_the_time_to_tokenize_the_whole_file(tmp_path, tiny_model):
    """Over MCP: a file the job must tokenize for a while before step 1 does not fit in the loading time plus
    a quarter of its measured tokenizing time, however fast the declared training throughput (the estimate
    used to assume a fixed 60 s before step 1). The deadline is set from the dry run's own measurement, so
    a faster or a busier machine moves it along."""
    from aci.training.gates import STARTUP_S

    make_run(tmp_path, tiny_model, profile="default", contamination=None)
    row = json.dumps(sft_rows(1)[0]) + "\n"
    (tmp_path / "big.jsonl").write_text(row * 100_000)  # ~0.2-1 ms each to render and tokenize
    reserve = timedelta(minutes=ctx_for(tmp_path).rules.profile.final_reserve_min)
    args = {**FAST, "max_steps": 2, "tokens_per_s": 1e12}

    async def go():
        async with mcp_client(tmp_path) as c:
            small = await c.call_tool("train", {"action": "dry-run", "data": "sft.jsonl", **args})
            measured = await c.call_tool("train", {"action": "dry-run", "data": "big.jsonl", **args})
            tokenize_s = measured.structured_content["checks"]["estimate"]["tokenize_s"]
            deadline = now() + reserve + timedelta(seconds=STARTUP_S + tokenize_s / 4)
            update = {"action": "update", "deadline": deadline.isoformat(), "budget_hours": 10}  # a 10-hour run
            assert not (await c.call_tool("plan", update)).is_error
            big = await c.call_tool("train", {"action": "dry-run", "data": "big.jsonl", **args})
            return small, tokenize_s, big

    small, tokenize_s, big = asyncio.run(go())
    assert not small.is_error, small.content
    assert small.structured_content["checks"]["estimate"]["tokenize_s"] < 5
    assert tokenize_s > 10  # a quarter of it outlasts the time between the two dry runs
    assert big.is_error and "[rule final-reserve]" in big.content[0].text, big.content
    assert re.search(r"and ~[\d,]+ s tokenizing the data", big.content[0].text), big.content[0].text


def test_every_row_shape_trains_as_the_other_tools_read_it(run, tiny_model):
    """text (every token learned, no template), prompt/completion, question/answer and multi-turn chats."""
    rows = [{"text": "Plain text to learn from: 2 plus 2 is 4."},
            {"prompt": "What is 3 plus 3?", "completion": "6"},
            {"question": "What is 4 plus 4?", "answer": "8"},
            {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                          {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "5 plus 5?"},
                          {"role": "assistant", "content": "10"}]}]
    write_jsonl(run / "shapes.jsonl", rows)
    checked(run, run / "shapes.jsonl")
    out = call(run, action="dry-run", data="shapes.jsonl", **FAST, max_steps=2)
    assert out.checks["rows"] == 4 and out.checks["samples_checked"] == 4
    write_jsonl(run / "blank.jsonl", [rows[0], {"text": " "}, *rows[1:]])  # the check and the job read it alike
    tokenizer = templates.load_tokenizer(tiny_model)
    for refusing in (lambda: registry.call("contamination", {"path": "blank.jsonl"}, ctx_for(run)),
                     lambda: training_data.encode_samples(run / "blank.jsonl", tokenizer, None, max_length=64)):
        with pytest.raises(ACIError, match=r"blank\.jsonl:2: field text\b"):
            refusing()


@pytest.mark.parametrize("first_loss,vocab,flagged", [(11.8, 151_936, True), (2.1, 151_936, False),
                                                      (5.4, 256, True), (None, 256, False), (3.0, None, False)])
def test_a_first_loss_at_chance_is_named_with_what_it_means(first_loss, vocab, flagged):
    from aci.training import chance

    note = chance.advice(first_loss, vocab, 2e-5)
    assert (note is not None) == flagged
    if flagged:
        assert f"ln {vocab:,} = {math.log(vocab):.2f}" in note and "2e-05" in note and "tokenizer and template" in note


def test_a_start_after_the_dry_run_reuses_its_data_check_until_an_input_changes(tmp_path, tiny_model):
    """The second check of the same request neither imports transformers (a fresh CLI process) nor renders
    again; editing the data, the template or the tokenizer's files, or another max_length, checks anew."""
    model = tmp_path / "model"  # a copy whose tokenizer files the test edits
    shutil.copytree(tiny_model, model)
    make_run(tmp_path, model, profile="default", contamination=None)
    argv = ["train", "dry-run", "--data", "sft.jsonl", "--max-length", "64", "--check-samples", "16", "--max-steps", "2"]
    probe = ("import atexit, runpy, sys; atexit.register(lambda: print('transformers' in sys.modules, file=sys.stderr)); "
             f"sys.argv = ['aci', '--json', *{argv!r}]; runpy.run_module('aci.cli', run_name='__main__')")

    def cli() -> tuple[dict, bool]:
        done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)["checks"], done.stderr.strip().endswith("True")

    first, imported = cli()
    assert "checked_at" not in first and imported
    again, imported = cli()
    assert again["checked_at"] and not imported
    assert {k: again[k] for k in first if k != "estimate"} == {k: first[k] for k in first if k != "estimate"}

    def fresh(**args) -> bool:
        return "checked_at" not in call(tmp_path, action="dry-run", data="sft.jsonl", **{**FAST, "max_steps": 2, **args}).checks

    assert fresh() is False
    assert fresh(max_length=48) is True and fresh(max_length=48) is False
    write_jsonl(tmp_path / "sft.jsonl", sft_rows(17))
    assert fresh() is True and fresh() is False
    template = tmp_path / "templates" / "model.jinja"
    template.write_text(template.read_text() + "\n")
    assert fresh() is True
    config = json.loads((model / "tokenizer_config.json").read_text())
    (model / "tokenizer_config.json").write_text(json.dumps({**config, "model_max_length": 77}))
    assert fresh() is True and fresh() is False
    kept = subprocess.run(["git", "status", "--porcelain"], cwd=tmp_path / "state", capture_output=True, text=True)
    assert kept.stdout == "" and len(list((tmp_path / "state" / "checks").glob("*.json"))) == 5


def test_the_chance_advice_is_spent_once_the_loss_leaves_the_plateau(tmp_path):
    """`train status` repeated the first-loss advice long after the loss had fallen to 0.01."""
    from aci.jobs import JobView
    from aci.training import status

    (tmp_path / "config.json").write_text(json.dumps({"method": "sft", "learning_rate": 2e-3}))

    def advice(loss):
        progress = {"first_loss": 5.4, "vocab_size": 256, "loss": loss}
        return status.rate_advice(JobView(id="j", kind="train", status="running", started_at="now",
                                          progress=progress, folder=str(tmp_path)))

    assert "sits at chance" in advice(5.3) and "sits at chance" in advice(2.8)  # ln 256 = 5.55: still above half
    assert advice(2.7) is None and advice(0.01) is None
