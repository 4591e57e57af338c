"""Faults stay inside their task: 500s, timeouts, malformed calls, raising and hanging tools, limits.
Each is recorded on its turn or step, the task is graded, the run goes on, nothing written is lost,
and a run killed with SIGKILL resumes without duplicates."""

from __future__ import annotations

import os
import signal
import threading
import time

from aci import jobs
from aci.state import State
from tests.openai_stub import OpenAIStub
from tests.rollout_helpers import call, calls, copy_fixture, lines, marker, run_tool, task, turn, write_tasks

LIMITS = dict(retries=2, request_timeout_s=0.5, tool_timeout_s=1.0, max_turns=4, max_tool_calls=5, time_limit_s=20,
              concurrency=3)


def faulty_policy():
    seen: dict[str, int] = {}
    lock = threading.Lock()

    def reply(body):
        key, n = marker(body), turn(body)
        with lock:
            seen[key] = seen.get(key, 0) + 1
            count = seen[key]
        if key == "f-ok":
            return "ANSWER: 1"
        if key == "f-500-then-ok":
            return {"status": 500, "body": "overloaded"} if count <= 2 else "ANSWER: 2"
        if key == "f-500":
            return {"status": 503, "body": "down"}
        if key == "f-slow":
            time.sleep(1.5)
            return "ANSWER: 3"
        if key == "f-malformed":
            return calls(call("add", '{"a": 1, "b":', "c1")) if n == 0 else "That call was invalid.\nANSWER: 4"
        if key == "f-raise":
            return calls(call("explode", {}, "c1")) if n == 0 else "ANSWER: 5"
        if key == "f-hang":
            return calls(call("hang", {"seconds": 20}, "c1")) if n == 0 else "The tool timed out.\nANSWER: 6"
        if key == "f-loop":
            return calls(*(call("add", {"a": i, "b": 1}, f"c{i}") for i in range(3)))
        if key == "f-turns":
            return calls(call("add", {"a": n, "b": 1}, "c1"))
        raise AssertionError(key)

    return reply


FAULT_TASKS = [task("f-ok", "one", "1"), task("f-500-then-ok", "two", "2"), task("f-500", "x", "9"),
               task("f-slow", "three", "3"), task("f-malformed", "four", "4"), task("f-raise", "five", "5"),
               task("f-hang", "six", "6"), task("f-loop", "loop", "7"), task("f-turns", "turns", "8")]


def test_faults_are_recorded_graded_and_the_run_goes_on(workdir):
    tools = copy_fixture("rollout_tools.py", workdir)
    first = write_tasks(workdir / "first.jsonl", FAULT_TASKS[:1])
    every = write_tasks(workdir / "every.jsonl", [t for t in FAULT_TASKS if t["id"] != "f-slow"])
    slow = write_tasks(workdir / "slow.jsonl", [t for t in FAULT_TASKS if t["id"] == "f-slow"])
    with OpenAIStub(faulty_policy()) as stub:
        run_tool(workdir, tasks=str(first), endpoint=stub.url, tools=str(tools), out="r/faults", **LIMITS)
        written = (workdir / "r/faults/trial-1.jsonl").read_bytes()
        out = run_tool(workdir, tasks=str(every), endpoint=stub.url, tools=str(tools), out="r/faults", **LIMITS)
    # the stub answers scripted replies one at a time, so the slow endpoint gets a run (and a stub) of its own
    with OpenAIStub(faulty_policy()) as stub:
        out_slow = run_tool(workdir, tasks=str(slow), endpoint=stub.url, tools=str(tools), out="r/faults", **LIMITS)
    data = (workdir / "r/faults/trial-1.jsonl").read_bytes()
    assert data.startswith(written), "lines written by earlier runs must survive later ones"
    assert out.counts["ran"] == 7 and out.counts["skipped_done"] == 1 and out_slow.counts["ran"] == 1
    by = {t["task_id"]: t for t in lines(workdir / "r/faults/trial-1.jsonl")}
    assert len(by) == 9

    retried = by["f-500-then-ok"]["turns"][0]
    assert retried["attempts"] == 3 and len(retried["retry_errors"]) == 2 and "HTTP 500" in retried["retry_errors"][0]
    assert by["f-500-then-ok"]["success"]

    down = by["f-500"]
    assert down["stop_reason"] == "policy-error" and down["turns"][0]["attempts"] == 3
    assert "HTTP 503" in down["turns"][0]["error"] and down["score"] == 0.0 and down["reason"]

    slow = by["f-slow"]
    assert slow["stop_reason"] == "policy-error" and slow["turns"][0]["attempts"] == 3
    assert all("Timeout" in e for e in slow["turns"][0]["retry_errors"]) and slow["score"] == 0.0

    bad = by["f-malformed"]["turns"][0]["steps"][0]
    assert bad["invalid_arguments"] and "not valid JSON" in bad["invalid_reason"] and not bad["executed"]
    assert bad["arguments_raw"] == '{"a": 1, "b":' and bad["error_ignored"] is False
    assert by["f-malformed"]["turns"][1]["request"]["messages"][-1]["content"].startswith("Error: invalid arguments for add")
    assert by["f-malformed"]["success"]

    boom = by["f-raise"]["turns"][0]["steps"][0]
    assert boom["executed"] and boom["error"] == "tool explode raised RuntimeError: boom" and boom["error_ignored"] is True
    assert by["f-raise"]["success"]

    hang = by["f-hang"]["turns"][0]["steps"][0]
    assert hang["error"] == "tool hang timed out after 1 s" and 0.9 <= hang["duration_s"] < 5
    assert by["f-hang"]["success"] and by["f-hang"]["turns"][0]["steps"][0]["error_ignored"] is False

    loop = by["f-loop"]
    assert loop["stop_reason"] == "max-tool-calls"
    steps = [s for t in loop["turns"] for s in t["steps"]]
    assert [s.get("executed", False) for s in steps] == [True] * 5 + [False]
    assert steps[-1]["error"] == "tool-call limit of 5 per task reached: not executed"

    turns = by["f-turns"]
    assert turns["stop_reason"] == "max-turns" and len(turns["turns"]) == 4 and turns["score"] == 0.0

    f = out_slow.metrics["trials"][0]["figures"]
    assert f["task_success_rate"]["numerator"] == 5 and f["task_success_rate"]["denominator"] == 9
    # the failed export keeps the four failures that produced a reply (f-500 and f-slow never did)
    e = out_slow.export
    assert (e["kept"], e["failed"], e["without_reply"]) == (5, 2, 2)


def test_time_limit_per_task(workdir):
    tools = copy_fixture("rollout_tools.py", workdir)

    def slow_policy(body):
        time.sleep(1.5)
        return "ANSWER: 1"

    def slow_tool(body):
        return calls(call("hang", {"seconds": 20}, "c1"))

    by = {}
    for name, script in (("slow-policy", slow_policy), ("slow-tool", slow_tool)):
        tasks = write_tasks(workdir / f"{name}.jsonl", [task(name, "a", "1")])
        with OpenAIStub(script) as stub:
            out = run_tool(workdir, tasks=str(tasks), endpoint=stub.url, tools=str(tools), time_limit_s=1.0,
                           tool_timeout_s=30, request_timeout_s=10)
        assert out.counts["ran"] == 1
        by[name] = lines(workdir / f"rollouts/{name}/trial-1.jsonl")[0]
    assert by["slow-policy"]["stop_reason"] == "time-limit"
    assert "waiting for the policy" in by["slow-policy"]["turns"][0]["error"]
    assert by["slow-tool"]["stop_reason"] == "time-limit"
    assert "timed out" in by["slow-tool"]["turns"][0]["steps"][0]["error"]
    assert all(t["duration_s"] < 3 and t["score"] == 0.0 for t in by.values())


def test_sigkill_then_resume_without_duplicates(workdir):
    """A background job is killed with SIGKILL mid-run; the re-run does only the rest."""
    n = 12

    def reply(body):
        time.sleep(0.3)
        return f"ANSWER: {marker(body).split('-')[1]}"

    tasks = write_tasks(workdir / "k.jsonl", [task(f"k-{i}", "number?", str(i)) for i in range(n)])
    trial = workdir / "rollouts/k/trial-1.jsonl"
    state = State(workdir / "state")
    with OpenAIStub(reply) as stub:
        started = run_tool(workdir, tasks=str(tasks), endpoint=stub.url, concurrency=2, background=True)
        job_id = started.job["id"]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (trial.exists() and len(lines(trial)) >= 3):
            time.sleep(0.05)
        running = jobs.view(state, job_id)
        assert running.status == "running" and running.progress["total"] == n and running.progress["done"] >= 1
        os.killpg(running.pid, signal.SIGKILL)
        while jobs.view(state, job_id).status == "running" and time.monotonic() < deadline:
            time.sleep(0.1)
        view = jobs.view(state, job_id)
        assert view.status == "failed" and "SIGKILL" in (view.reason or "")
        before = trial.read_bytes()
        done = len(lines(trial))
        assert 3 <= done < n
        again = run_tool(workdir, tasks=str(tasks), endpoint=stub.url, concurrency=4, background=False)
    assert again.counts["ran"] == n - done and again.counts["skipped_done"] == done
    assert trial.read_bytes().startswith(before)
    ids = [t["task_id"] for t in lines(trial)]
    assert len(ids) == n and len(set(ids)) == n
    assert again.metrics["pooled"]["task_success_rate"]["value"] == 1.0
    status = run_tool(workdir, action="status", out="rollouts/k", job=job_id)
    assert status.counts == {"done": n} and status.job["status"] == "failed"
