"""The dev curve of `train --dev-set`: a real SFT job on the demo model scores generated replies every N
steps, `train status` shows the curve, and the best point is saved, registered with its score and kept
through rotation. Without a grader the curve is the gold answers' loss, and it says so. Pilots with
curves are ranked at equal steps."""

from __future__ import annotations

import pytest

from aci import records
from aci.embedded import build_model
from aci.jobs import JobView
from aci.state import read_jsonl
from aci.training import pace, status
from tests.train_helpers import FAST, call, make_run, no_stray_jobs, task_rows, wait, write_jsonl  # noqa: F401

pytestmark = pytest.mark.usefixtures("no_stray_jobs")


@pytest.fixture(scope="module")
def demo_model(tmp_path_factory):
    return build_model(tmp_path_factory.mktemp("demo-model"), "demo")


@pytest.fixture
def run(tmp_path, demo_model, monkeypatch):
    monkeypatch.delenv("ACI_STATE", raising=False)
    make_run(tmp_path, demo_model)
    return tmp_path


def _train(run, **args):
    settings = {**FAST, "max_steps": 80, "dev_every": 20, "dev_max_new_tokens": 48, "save_steps": 1000,
                "learning_rate": 3e-3, **args}
    out = call(run, action="start", data="sft.jsonl", **settings)
    return out, wait(run, out.job.id)


def test_the_dev_curve_is_shown_and_its_best_checkpoint_registered_and_kept(run):
    # The reply format the training data teaches ("ANSWER: <n>"), graded by a regex the dev tasks name.
    write_jsonl(run / "dev.jsonl", task_rows(8, grader={"type": "regex", "pattern": "ANSWER: [0-9]+"}))
    started, done = _train(run, dev_set="dev.jsonl", keep_checkpoints=1)
    assert started.config["dev"]["metric"] == "accuracy" and started.checks["dev"]["items"] == 8
    assert done.job.status == "succeeded", done.job.log_tail
    dev = done.job.progress["dev"]
    assert [p["step"] for p in dev["curve"]] == [20, 40, 60, 80]
    scores = [p["score"] for p in dev["curve"]]
    assert max(scores) > scores[0], scores  # the model learns the format within 80 steps
    best = dev["best"]
    assert best["score"] == max(scores) and best["step"] == next(p["step"] for p in dev["curve"] if p["score"] == max(scores))

    registered = [e for e in read_jsonl(run / "state" / records.CHECKPOINTS) if e.get("job") == done.job.id]
    by_id = {e["checkpoint"]: e for e in registered}
    assert best["checkpoint"] == f"{done.job.id}/checkpoint-{best['step']}"
    assert by_id[best["checkpoint"]]["dev"] == {"metric": "accuracy", "score": best["score"], "items": 8, "best": True}
    assert (run / "checkpoints" / best["checkpoint"]).is_dir()  # kept although keep_checkpoints=1
    assert not (run / "checkpoints" / done.job.id / "checkpoint-20").exists() or best["step"] == 20

    text = done.summary()
    assert "dev accuracy on 8 items (each task's own grader) by step: 20: " in text
    assert f"best by dev: {best['score']} at step {best['step']} ({best['checkpoint']})" in text
    assert "dev reply at step 80" in text  # replies to read, with their grader's reason
    assert "cpu threads: OMP_NUM_THREADS=1 (set by the caller)" in text  # the tests' own choice, kept


def test_without_a_grader_the_curve_is_the_gold_answers_loss_and_says_so(run):
    rows = task_rows(8)
    for r in rows:
        r.pop("grader")
        r["gold"]["answer"] = f"ANSWER: {r['gold']['answer']}"
    write_jsonl(run / "dev.jsonl", rows)
    started, done = _train(run, dev_set="dev.jsonl", max_steps=40)
    assert any("the dev curve is the loss of each task's gold.answer, not accuracy" in w for w in started.warnings)
    assert done.job.status == "succeeded", done.job.log_tail
    dev = done.job.progress["dev"]
    assert dev["metric"] == "loss" and dev["scored_by"] == "no grader can score these tasks"
    first, last = dev["curve"][0]["score"], dev["curve"][-1]["score"]
    assert last < first and dev["best"]["step"] == 40


def test_an_eval_script_that_reads_an_answer_line_grades_a_dev_set_without_graders(run):
    """Tasks drawn from a generator name no grader; the eval script's own `ANSWER:` rule is the one to use,
    not the loss of a bare gold answer that the designed reply never writes alone."""
    rows = task_rows(4)
    for r in rows:
        r.pop("grader")
    write_jsonl(run / "dev.jsonl", rows)
    dry = call(run, action="dry-run", data="sft.jsonl", dev_set="dev.jsonl", **FAST)
    assert dry.checks["dev"]["metric"] == "loss"  # nothing names the format yet
    (run / "evaluate.py").write_text('import re\nANSWER = re.compile(r"^ANSWER:\\s*(.+)$", re.M)\n')
    dry = call(run, action="dry-run", data="sft.jsonl", dev_set="dev.jsonl", **FAST)
    dev = dry.checks["dev"]
    assert (dev["metric"], dev["grader"]) == ("accuracy", "final-answer")
    assert "evaluate.py, which reads an `ANSWER:` line" in dev["source"]


def test_a_dev_set_without_graders_or_answers_is_refused_before_the_job(run):
    rows = task_rows(4)
    for r in rows:
        r.pop("grader")
        r.pop("gold")
    write_jsonl(run / "dev.jsonl", rows)
    from aci.errors import ACIError

    with pytest.raises(ACIError, match="names no grader .* lacks. Pass --grader"):
        call(run, action="dry-run", data="sft.jsonl", dev_set="dev.jsonl", **FAST)


def _view(job: str, metric: str, curve: list[tuple[int, float]]) -> JobView:
    return JobView(id=job, kind="train", status="succeeded", started_at="2026-12-02T00:00:00+00:00", folder="/x",
                   progress={"dev": {"metric": metric, "curve": [{"step": s, "score": v} for s, v in curve]}})


def test_pilots_are_ranked_at_the_largest_step_they_all_reached():
    views = [_view("a", "accuracy", [(50, 0.1), (100, 0.2), (150, 0.9)]), _view("b", "accuracy", [(50, 0.3), (100, 0.5)]),
             _view("c", "accuracy", [(50, 0.0), (100, 0.05)])]
    assert status.ranking(views) == ["pilots by dev accuracy at step 100, best first: b 0.5, a 0.2, c 0.05"]
    assert status.ranking([views[0], _view("d", "loss", [(100, 1.0)])])[0].startswith("pilots: not ranked")
    assert status.ranking(views[:1]) == []


def test_the_dev_evaluation_is_not_counted_as_step_time_but_is_planned_for():
    p = pace.Pace()
    p.started(0.0)
    for i in range(1, 11):
        p.step_ended(float(i))  # 1 s steps
    p.evaluated(15.0, every=10)  # 5 s of evaluation after step 10
    p.saved(17.0)  # then a 2 s save
    p.step_ended(18.0)
    assert p.durations[-1] == pytest.approx(1.0) and p.save_s == pytest.approx(2.0)
    assert p.eval_per_step == pytest.approx(0.5)
    with_eval = p.more_steps(100.0)
    p.eval_per_step = 0.0
    assert with_eval < p.more_steps(100.0)
