"""The agent's experience (issue 17): an agent on a fresh copy of the demo's lock-codes task with about 40
minutes, the strict profile and only the tools, replayed through the real MCP server.

What that run met, and what the tools now do instead: the final reserve fits the budget, so training is
allowed; the histogram names the sub-type gap (test 40 % reverse, the generator a third each) and proposes
no answer-format quota for samples held against gold answers; verify-task takes its grader from the
benchmark card and keeps the records' own sub-type labels; a met target moves the run to a stretch goal
while the phase stays `iterate`, the Stop guard keeps blocking, and status after `finalize` says plainly
what is done and what to try next. Smaller checks of the same items follow the replay.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from aci import registry, toybench
from aci.clock import TIMER_RESOLUTION, from_timer
from aci.context import Context
from aci.errors import ACIError
from aci.guard import stop_decision
from aci.state import iso, now
from tests.conftest import mcp_client

BUDGET_MIN = 40
TARGET = 0.9  # the run's target, which its 0.96 met


def jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path.name


def sft(tasks: list[dict]) -> list[dict]:
    return [{"messages": [{"role": "user", "content": t["question"]},
                          {"role": "assistant", "content": f"ANSWER: {t['answer']}"}]} for t in tasks]


async def replay(workdir: Path, bench: toybench.Bench) -> dict:
    seen: dict = {"t": {}}
    t0 = time.monotonic()
    source = toybench.load_source(bench.train_source)
    async with mcp_client(workdir) as c:
        async def call(tool: str, **args) -> dict:
            r = await c.call_tool(tool, args)
            assert not r.is_error, f"{tool}: {r.content[0].text}"
            return r.structured_content

        # the user's words: the eval command as typed, the strict rules, the instruct-like target
        await call("plan", action="init", base_model="base_model", benchmark=toybench.BENCHMARK,
                   eval_command=f"{sys.executable} evaluate.py --model-path final_model --limit -1",
                   metric_key="accuracy", benchmark_size=bench.size, profile="posttrainbench",
                   targets=[{"metric": "accuracy", "value": TARGET}])
        await call("log-state", action="append", kind="benchmark-card",
                   message="lock codes: story + instruction; last line 'ANSWER: <code>' compared exactly",
                   data={"answer_format": "ANSWER: <4 digits>"})
        seen["start"] = (await call("status"))["state"]
        seen["start_run"] = (await call("status"))["run"]
        await call("eval-checkpoint", action="evaluate", checkpoint="base", limit=32, trials=1)
        seen["t"]["baseline"] = time.monotonic() - t0

        # data: the generator's default mix against the benchmark
        tasks = source.generate(1200, 1, {"copy": 1, "reverse": 1, "swap": 1}, prefix="syn")
        seen["tasks_vs_test"] = await call("histogram", action="compare", path=jsonl(workdir / "tasks.jsonl", tasks),
                                           target="data/test.jsonl")
        seen["sft_vs_test"] = await call("histogram", action="compare", path=jsonl(workdir / "sft0.jsonl", sft(tasks)),
                                         target="data/test.jsonl", record=False)
        for i, q in enumerate(q for q in seen["tasks_vs_test"]["comparison"]["quotas"] if q["feature"] == "subtype"):
            tasks += source.generate(q["need"], 10 + i, {q["bin"]: 1.0}, prefix=f"quota{i}")
        seen["fixed"] = await call("histogram", action="compare", path=jsonl(workdir / "tasks.jsonl", tasks),
                                   target="data/test.jsonl")
        seen["verify"] = await call("verify-task", tasks="tasks.jsonl")  # no --grader: the benchmark card's
        kept = [json.loads(line) for line in Path(seen["verify"]["kept_file"]).read_text().splitlines()]
        jsonl(workdir / "sft.jsonl", sft(kept))
        assert (await call("contamination", path="sft.jsonl", reference="data/test.jsonl"))["verdict"] == "pass"

        # training under the strict profile, with 40 minutes: allowed
        train = dict(data="sft.jsonl", learning_rate=1e-3, batch_size=16, grad_accum=1, max_steps=500,
                     save_steps=500, warmup_ratio=0.05, lr_schedule="linear", logging_steps=25, max_length=256)
        seen["t"]["data"] = time.monotonic() - t0
        seen["dry_run"] = await call("train", action="dry-run", **train)
        job = (await call("train", action="start", **train))["job"]["id"]
        seen["preparing"] = []
        while True:
            j = (await call("train", action="status", job=job))["job"]
            if j["progress"].get("phase") == "preparing":
                seen["preparing"].append(j["progress"]["preparing"]["what"])
            if j["status"] != "running":
                break
            await asyncio.sleep(1)
        assert j["status"] == "succeeded", j
        seen["t"]["trained"] = time.monotonic() - t0
        ckpt = j["progress"]["last_checkpoint"]
        seen["promoted"] = await call("eval-checkpoint", action="evaluate", checkpoint=ckpt, limit=32, trials=1,
                                      promote=True)
        seen["t"]["promoted"] = time.monotonic() - t0
        # The run met its target with 0.96 after 1000 steps; this test trains 500 (the demo's quick run), which
        # beats the base model but not reliably 0.9. What is tested is what the tools say once a target is
        # met, so the target is lowered to the promoted score, as `plan update --targets` lets an agent do.
        seen["unmet"] = (await call("status"))["state"]
        best = seen["promoted"]["result"]["score"]
        if best < TARGET:
            await call("plan", action="update", targets=[{"metric": "accuracy", "value": best}])
        seen["met"] = (await call("status"))["state"]
        seen["met_run"] = (await call("status"))["run"]
        seen["guard"] = stop_decision(Context(workdir=workdir))
        seen["finalize"] = await call("finalize")
        seen["done"] = await call("status")
        seen["t"]["finalized"] = time.monotonic() - t0
    print("replay times (s):", {k: round(v) for k, v in seen["t"].items()})
    return seen


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, dict]:
    workdir = tmp_path_factory.mktemp("lock-codes")
    bench = toybench.build(workdir, python=sys.executable, deadline_s=BUDGET_MIN * 60)
    return workdir, asyncio.run(replay(workdir, bench))


def test_the_reserve_fits_a_short_budget_and_training_is_allowed(run):
    _, seen = run
    start = seen["start"]
    assert start["profile"] == "posttrainbench" and 5 < start["final_reserve_min"] < 7  # 15 % of ~40 min
    assert not seen["start_run"]["in_final_reserve"]
    assert not any("start no training" in r for r in seen["start_run"]["reminders"])
    submit = next(p for p in start["phases"] if p["name"] == "submit")
    assert abs(submit["allocated_min"] - start["final_reserve_min"]) < 0.1
    assert seen["dry_run"]["job"] is None and seen["dry_run"]["checks"]["estimate"]["steps"] == 500
    assert seen["preparing"], "train status never said what the job was preparing"


def test_the_histogram_names_the_subtype_gap_and_proposes_no_answer_format_quota(run):
    _, seen = run
    c = seen["tasks_vs_test"]["comparison"]
    assert c["failed"] == ["subtype"]
    assert {b["bin"]: b["target_pct"] for b in c["features"]["subtype"]["bins"]} == {"reverse": 40.0, "copy": 30.0,
                                                                                    "swap": 30.0}
    assert {q["feature"] for q in c["quotas"]} == {"subtype"}
    s = seen["sft_vs_test"]["comparison"]
    assert {x["feature"] for x in s["skipped"]} == {"answer_length", "answer_format", "subtype"}
    assert not any(q["feature"].startswith("answer") for q in s["quotas"])
    assert seen["fixed"]["passed"] is True


def test_verify_task_finds_its_grader_and_keeps_the_records_labels(run):
    _, seen = run
    v = seen["verify"]
    assert v["grader"] == "final-answer" and "benchmark card" in v["grader_source"]
    assert v["kept"] == v["candidates"] and {s["subtype"] for s in v["by_subtype"]} == {"copy", "reverse", "swap"}


def test_a_met_target_keeps_the_run_in_iterate_with_a_stretch_goal(run):
    _, seen = run
    best = seen["promoted"]["result"]["score"]
    assert seen["promoted"]["promotion"]["promoted"], seen["promoted"]
    unmet = seen["unmet"]  # before the target is met (unless 500 steps reached it)
    assert unmet["current_phase"] == "iterate" and (best >= TARGET or not unmet["goal"]["stretch"])
    met = seen["met"]
    assert met["current_phase"] == "iterate" and next(g for g in met["gates"] if g["name"] == "target-met")["passed"]
    assert met["goal"]["stretch"] and (met["goal"]["value"] is None or met["goal"]["value"] > best)
    assert f"target {min(best, TARGET):.4g} met" in " ".join(met["plainly"]).lower()
    assert "the run goes on" in met["plainly"][-1] and "keep improving until then" in met["plainly"][-1]
    assert any("keep improving until the final reserve" in r for r in seen["met_run"]["reminders"])
    assert seen["guard"]["decision"] == "block" and "milestone" in seen["guard"]["reason"]


def test_status_after_finalize_reads_plainly(run):
    _, seen = run
    assert seen["finalize"]["passed"] is True
    s = seen["done"]["state"]
    assert s["current_phase"] == "iterate"  # time is left: not `None`, not `submit`
    assert s["plainly"][0].startswith("Done so far: final_model (") and "passed finalize" in s["plainly"][0]
    assert "left before the final reserve" in s["plainly"][1]
    assert s["next_actions"][0].startswith(("Target met", "final_model ("))  # the goal first, then the phase's
    assert not s["next_actions"][0].startswith("Read 15 failures")


# -- the same items, in small --------------------------------------------------------------------------------
def _init(workdir: Path, **extra) -> None:
    registry.call("plan", {"action": "init", "base_model": "base", "benchmark": "toy",
                           "eval_command": "python evaluate.py --model-path {model_path} --json-output-file {output}",
                           **extra}, Context(workdir=workdir))


def test_timer_readings_do_not_move_the_recorded_deadline():
    """The run's readings for a real 11:04:59: 11:04:15, 11:04:31, 11:04:37, 11:04:00."""
    real = now().replace(microsecond=0) + timedelta(minutes=40)
    readings = [real - now() - timedelta(seconds=s) for s in (44, 28, 22, 59)]  # what the timer floors away
    recorded = now() + readings[0]
    for r in readings:
        deadline, moved = from_timer(timedelta(minutes=r.total_seconds() // 60), recorded)
        assert not moved and deadline == recorded
    deadline, moved = from_timer(timedelta(minutes=52), recorded)  # the harness restarted the timer
    assert moved and deadline - recorded > TIMER_RESOLUTION


def test_a_disagreeing_timer_moves_the_deadline_once_and_says_so(workdir):
    (workdir / "timer.sh").write_text('echo "Remaining time (hours:minutes):"; echo "2:00"\n')
    _init(workdir)
    first = iso(Context(workdir=workdir).card.deadline)
    (workdir / "timer.sh").write_text('echo "Remaining time (hours:minutes):"; echo "3:00"\n')
    for _ in range(2):
        registry.call("status", {}, Context(workdir=workdir))
    ctx = Context(workdir=workdir)
    moved = [e for e in ctx.state.journal() if e["kind"] == "clock"]
    assert len(moved) == 1 and moved[0]["data"]["was"] == first
    assert iso(ctx.card.deadline) == moved[0]["data"]["deadline"] and ctx.clock.source == "timer.sh"


def test_a_profile_switch_is_journaled_and_shown_as_weaker_rules(workdir):
    _init(workdir, profile="posttrainbench")
    out = registry.call("plan", {"action": "init", "base_model": "base", "benchmark": "toy", "profile": "default",
                                 "force": True}, Context(workdir=workdir))
    assert any("weakens them" in w and "contamination" in w for w in out.warnings)
    ctx = Context(workdir=workdir)
    change = ctx.state.journal()[-1]["data"]["profile_change"]
    assert change["from"] == "posttrainbench" and change["to"] == "default"
    s = registry.call("status", {}, ctx)
    assert s.state.rules_weakened and "posttrainbench -> default" in s.state.rules_weakened[0]
    assert any(line.startswith("Rules weakened mid-run") for line in s.state.plainly)
    assert any("Rules weakened mid-run" in r for r in s.run.reminders)
    assert "Rules weakened" in s.summary()


def test_the_reserve_is_refused_before_any_data_is_read(workdir):
    _init(workdir, profile="posttrainbench", budget_hours=10, deadline=(now() + timedelta(minutes=20)).isoformat())
    started = time.perf_counter()
    with pytest.raises(ACIError) as e:  # the data file does not even exist: the clock answers first
        registry.call("train", {"action": "dry-run", "data": "missing.jsonl"}, Context(workdir=workdir))
    assert e.value.rule == "final-reserve" and time.perf_counter() - started < 5


def _promote(workdir: Path, score: float, samples: int = 64) -> None:
    from aci.state import State, iso

    with State(workdir / "state").event("promote", f"promoted x at {score}") as w:
        w.write_json("best.json", {"checkpoint": "job/checkpoint-9", "path": "final_model", "score": score,
                                   "evaluator": "cmd", "samples": samples, "promoted_at": iso()})


@pytest.mark.parametrize("best,value,source", [
    (0.4, 0.5, "run card target"),  # not met yet: the run card's target
    (0.6, 0.8, "benchmark card: the instruct model"),  # met: the benchmark card's next target
    (0.85, 0.87, "best + 0.02"),  # every target met: best + the profile's margin
    (0.99, 1.0, "best + 0.02"),  # the margin reaches past the scale: the goal is its top, said so
    (1.0, None, "top of the scale"),  # nothing above a perfect score: confirm it
])
def test_the_goal_moves_on_when_a_target_is_met(workdir, best, value, source):
    _init(workdir, targets=[{"metric": "accuracy", "value": 0.5}])
    registry.call("log-state", {"kind": "benchmark-card", "message": "card",
                                "data": {"targets": [{"value": 0.8, "note": "the instruct model"}]}},
                  Context(workdir=workdir))
    _promote(workdir, best)
    s = registry.call("status", {}, Context(workdir=workdir)).state
    assert s.goal.source == source and s.goal.value == (pytest.approx(value) if value else None)
    assert s.goal.stretch == (best >= 0.5)
    if source == "top of the scale":
        assert "evaluate it on every item" in s.next_actions[0] and "--trials 3" in s.next_actions[0]
    if best == 0.99:
        assert s.goal.text.endswith("next goal 1 (the top of the scale; best 0.99)"), s.goal.text


def test_in_the_final_reserve_the_plan_says_what_was_missed(workdir):
    _init(workdir, budget_hours=10, deadline=(now() + timedelta(minutes=20)).isoformat())
    out = registry.call("plan", {"action": "show"}, Context(workdir=workdir))
    status = {p.name: p.status for p in out.phases}
    assert status == {"recon": "missed", "baseline": "missed", "first-model": "missed", "iterate": "missed",
                      "submit": "current"}
    assert "[-] recon" in out.summary() and "[>] submit" in out.summary()
    s = registry.call("status", {}, Context(workdir=workdir)).state
    assert s.plainly[0].startswith("Final reserve (") and "no final_model" in s.plainly[0]
