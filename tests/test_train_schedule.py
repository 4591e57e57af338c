"""The schedule that ends on time: the wsd plan decays to its floor by the stop time at the measured step
rate, re-decided as the rate falls. First the plan alone on a simulated clock (milliseconds), then real
TRL runs of the tiny model (SFT and GRPO) slowed part-way by a callback that sleeps."""

from __future__ import annotations

import json
import signal
import time
from datetime import timedelta

import pytest

from aci.state import now, parse_ts, read_jsonl
from aci.training import config as config_mod
from aci.training import pace, schedule
from tests.train_helpers import FAST, call, make_run, no_stray_jobs  # noqa: F401 (a fixture)


def _simulate(step_s, *, total: int, stop_s: float | None, warmup: int = 0):
    """Run the plan as the callback does, on a clock that advances `step_s(step)` per step: (plan, factors
    the scheduler set after each step, the time each step ended, why it ended)."""
    plan, p = schedule.Wsd(), pace.Pace()
    plan.begin(total, warmup)
    p.started(0.0)
    t, factors, ends = 0.0, [plan.factor(0)], [0.0]
    for step in range(1, total + 1):
        t += step_s(step)
        p.step_ended(t)
        more = p.more_steps(stop_s - t) if stop_s is not None else None
        plan.follow(step, more)
        factors.append(plan.factor(step))
        ends.append(t)
        if step >= plan.end:
            return plan, factors, ends, "planned end"
        if more is not None and more < 1:
            return plan, factors, ends, "cut"
    raise AssertionError("the trainer's own end: never reached, the plan ends at total at the latest")


def test_the_plan_moves_its_decay_earlier_when_the_rate_falls_and_ends_on_time():
    fast = lambda step: 1.0  # noqa: E731
    planned_fast, *_ = _simulate(fast, total=1000, stop_s=300.0)
    plan, factors, ends, why = _simulate(lambda step: 1.0 if step <= 100 else 3.0, total=1000, stop_s=300.0)
    assert why == "planned end" and plan.end < planned_fast.end < 1000  # the slowdown moved the end earlier
    assert ends[plan.end] + pace.SAVE_SAFETY * pace.SAVE_FIXED_S <= 300.0  # the last step and its save end in time
    assert factors[plan.end] == schedule.FLOOR and factors[plan.end - 1] <= 0.1  # the last step ran near the floor
    decay = factors[plan.decay_from:plan.end + 1]
    assert all(a >= b for a, b in zip(decay, decay[1:], strict=False))  # falling, never back up
    assert plan.end - plan.decay_from >= schedule.DECAY_SHARE * plan.end - 1


def test_a_slowdown_that_passes_costs_only_its_own_steps():
    """A few very slow steps (an evaluation sharing the machine) pull the end in and start the decay; once
    the rate is back, the decay stretches to the end the clock allows again, falling all the way."""
    spike = lambda step: 20.0 if 150 < step <= 153 else 1.0  # noqa: E731
    plan, factors, ends, why = _simulate(spike, total=1000, stop_s=300.0)
    assert why == "planned end"
    margin = pace.SAVE_SAFETY * pace.SAVE_FIXED_S
    assert ends[plan.end] + margin <= 300.0  # still in time
    assert ends[plan.end] >= 300.0 - margin - 25.0  # but not ended early for steps that ran slow only briefly
    decay = factors[plan.decay_from:plan.end + 1]
    assert all(a >= b for a, b in zip(decay, decay[1:], strict=False)) and decay[-1] == schedule.FLOOR


def test_without_a_clock_the_plan_is_plain_wsd_over_the_steps():
    plan, factors, _, why = _simulate(lambda step: 1.0, total=100, stop_s=None, warmup=5)
    assert why == "planned end" and plan.end == 100 and plan.decay_from == 100 - 20 - 1
    assert factors[:6] == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0] and set(factors[6:80]) == {1.0}
    assert factors[100] == schedule.FLOOR


def test_the_measured_step_time_follows_a_slowdown_within_a_few_steps():
    p = pace.Pace({"step_s": 9.0, "source": "declared"})
    assert p.step_s() == (9.0, "the start's estimate (declared)")
    t = 0.0
    p.started(t)
    for d in [1.0] * 10 + [4.0] * 2:
        t += d
        p.step_ended(t)
    assert p.step_s()[0] == 4.0  # two slow steps are enough: the recent median
    p.saved(t + 30.0)  # a save between two steps is not step time
    p.step_ended(t + 30.0 + 4.0)
    assert p.step_s()[0] == 4.0 and p.save_time() == (30.0, "measured")


def test_the_forecast_gives_a_far_stop_time_in_hours():
    """The note's slack before the stop time reads in the unit that fits it (it said "569 min")."""
    p = pace.Pace({"step_s": 0.02, "source": "declared"})
    at = now()
    far = pace.forecast(p, step=0, end=400, total=400, kind="cosine", stop_at=at + timedelta(hours=9.5), at=at)
    near = pace.forecast(p, step=0, end=400, total=400, kind="cosine", stop_at=at + timedelta(minutes=20), at=at)
    assert far["note"].endswith(", 9.5 h before the stop time"), far["note"]
    assert near["note"].endswith(", 20 min before the stop time"), near["note"]


def _sleeper(job_callback, slow_after_s: float, sleep_s: float):
    """A callback that makes every step `sleep_s` slower once `slow_after_s` of training have passed, and
    notes the planned end just before."""
    from transformers import TrainerCallback

    class Sleeper(TrainerCallback):
        began = None
        end_before = None
        slowed_at = None

        def on_step_begin(self, args, state, control, **kwargs):
            self.began = self.began or time.monotonic()
            if time.monotonic() - self.began >= slow_after_s:
                if self.slowed_at is None:
                    self.slowed_at, self.end_before = state.global_step, job_callback.plan.end
                time.sleep(sleep_s)

    return Sleeper()


@pytest.mark.parametrize("method", ["sft", "grpo"])
def test_wsd_reaches_its_floor_by_the_stop_time_under_a_slowdown(tmp_path, tiny_model, monkeypatch, method):
    """A real TRL run whose steps slow down threefold part-way: the decay moves earlier, the learning rate
    reaches its floor at the planned end, and that checkpoint is saved before the stop time."""
    from aci.training import run

    monkeypatch.delenv("ACI_STATE", raising=False)
    monkeypatch.setenv("ACI_JOB_DIR", str(tmp_path / "job"))
    (tmp_path / "job").mkdir()
    make_run(tmp_path, tiny_model, profile="default", contamination=None)
    args = {**FAST, "data": "sft.jsonl", "max_steps": 100_000, "save_steps": 100_000}
    if method == "grpo":
        args.update(method="grpo", data="tasks.jsonl", batch_size=4, num_generations=2, max_completion_length=8)
    cfg = config_mod.TrainConfig.model_validate(call(tmp_path, action="dry-run", **args).config)
    assert cfg.lr_schedule == "wsd" and cfg.stop_at  # the default when the run has a deadline
    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        trainer, job = run.prepare(cfg, time.monotonic())
        budget = 10.0 if method == "sft" else 14.0
        sleeper = _sleeper(job, slow_after_s=budget / 3, sleep_s=0.3)
        trainer.add_callback(sleeper)
        job.stop_at = stop_at = now() + timedelta(seconds=budget)  # counted from a ready trainer: a busy
        trainer.train()  # machine's slow start does not eat the budget
    finally:
        signal.signal(signal.SIGTERM, sigterm)
    progress = json.loads((tmp_path / "job" / "progress.json").read_text())
    assert progress["stop_reason"].startswith("planned end: the wsd decay reached its floor"), progress
    end = progress["step"]
    assert sleeper.slowed_at and end < sleeper.end_before < 100_000  # the slowdown moved the end earlier
    assert trainer.lr_scheduler.get_last_lr()[0] == schedule.FLOOR * cfg.learning_rate
    [ckpt] = [e for e in read_jsonl(tmp_path / "state" / "checkpoints.jsonl") if e.get("type") == "registered"]
    assert ckpt["step"] == end and parse_ts(ckpt["ts"]) <= stop_at
    assert 0 < ckpt["learning_rate"] < cfg.learning_rate  # the last step ran on the way down
    lrs = [h["learning_rate"] for h in trainer.state.log_history if "learning_rate" in h]
    peak = lrs.index(max(lrs))
    assert all(a >= b for a, b in zip(lrs[peak:], lrs[peak + 1:], strict=False))
    fc = progress["schedule"]
    assert fc["kind"] == "wsd" and fc["cut"] and fc["end_step"] == end and "moved earlier" in fc["note"]
    assert any("decay started" in e["what"] for e in progress["schedule_events"])


@pytest.mark.usefixtures("no_stray_jobs")
def test_stop_with_decay_ends_a_wsd_run_on_its_decay(tmp_path, tiny_model, monkeypatch):
    """A real job held at its peak rate: `train stop --decay` makes it decay at once over a quarter of the
    steps it ran, then save, register and stop at the floor; a cosine job is refused with what to do."""
    from tests.train_helpers import wait

    monkeypatch.delenv("ACI_STATE", raising=False)
    make_run(tmp_path, tiny_model, profile="default", contamination=None)
    args = {**FAST, "data": "sft.jsonl", "max_steps": 100_000, "save_steps": 100_000, "lr_schedule": "wsd",
            "warmup_ratio": 0.0}
    started = call(tmp_path, action="start", **args)
    job, peak = started.job.id, started.config["learning_rate"]
    held = wait(tmp_path, job, until=lambda v: v.status != "running" or v.progress.get("step", 0) >= 20)
    assert held.job.status == "running" and held.job.progress["schedule"]["phase"] == "stable"
    assert f"aci train stop --job {job} --decay" in held.summary()
    out = call(tmp_path, action="stop", job=job, decay=True)
    assert out.job.status == "running"  # it decays first
    done = wait(tmp_path, job).job
    p = done.progress
    assert done.status == "succeeded" and p["stop_reason"].startswith("planned end: the wsd decay reached its floor")
    asked = p["decay_requested"]
    assert asked["after_step"] >= 20 and p["step"] == asked["end_step"] == p["schedule"]["end_step"] < 100_000
    assert asked["end_step"] - asked["after_step"] == schedule.Wsd().decay_now(asked["after_step"])
    assert any(e["what"].startswith("decay requested") for e in p["schedule_events"])
    [ckpt] = [e for e in read_jsonl(tmp_path / "state" / "checkpoints.jsonl") if e.get("type") == "registered"]
    assert ckpt["step"] == p["step"] and 0 < ckpt["learning_rate"] < peak / 2

    cosine = call(tmp_path, action="start", **{**args, "lr_schedule": "cosine"}).job.id
    with pytest.raises(Exception, match="cosine schedule, which decays over its --max-steps by itself"):
        call(tmp_path, action="stop", job=cosine, decay=True)
    call(tmp_path, action="stop", job=cosine)
