"""run-trajectory end to end: a scripted policy behind a real OpenAI-API HTTP server on 127.0.0.1, real
Python and MCP tool environments, real graders; trajectories, grades and every metric checked against
values computed by hand from the script below."""

from __future__ import annotations

import json
import sys
from fractions import Fraction

import pytest

from aci.errors import ACIError
from tests.conftest import mcp_client
from tests.openai_stub import OpenAIStub
from tests.rollout_helpers import (
    call,
    calls,
    copy_fixture,
    last_tool,
    lines,
    marker,
    run_tool,
    task,
    turn,
    write_tasks,
)

SYSTEM = "You are a careful assistant. Use the tools."
# A task's own tool schema, with a null default and unicode, that must reach the policy and the export as is.
OWN_TOOLS = [{"type": "function", "function": {
    "name": "add", "description": "Sum of a and b — exactly.",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer", "default": None},
                                                    "b": {"type": "integer"}}, "required": ["b"]}}}]


def tasks_six() -> list[dict]:
    return [
        task("t-add", "What is 2+3?", "5"),
        task("t-state", "Store x=7, then read it back.", "7"),
        task("t-leak", "Read x (nothing was stored in this session).", "missing"),
        task("t-bad", "Multiply 2 and 3.", "6"),
        {**task("t-fail", "What is 6*7?", "42"),
         "messages": [{"role": "system", "content": "Answer tersely."},
                      {"role": "user", "content": "[t-fail] What is 6*7?"}]},
        {**task("t-tool", "Add 1 and 2 with the tool.", None), "tools": OWN_TOOLS, "grader": "tool-call",
         "gold": {"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}]}},
    ]


def policy(body: dict):
    """The scripted policy. Trial 2 (seed 101) gets t-add wrong; everything else is the same in both."""
    key, n = marker(body), turn(body)
    if key == "t-add":
        if n == 0:
            return calls(call("add", {"a": 2, "b": 3}, "c1"))
        return f"ANSWER: {last_tool(body)}" if body["seed"] == 100 else "ANSWER: 4"
    if key == "t-state":
        if n == 0:
            return calls(call("put", {"key": "x", "value": 7}, "c1"), call("get", {"key": "x"}, "c2"))
        return f"ANSWER: {last_tool(body)}"
    if key == "t-leak":
        if n == 0:
            return calls(call("get", {"key": "x"}, "c1"))
        assert last_tool(body).startswith("Error: tool get raised KeyError"), last_tool(body)
        return "The get tool failed: x is missing.\nANSWER: missing"
    if key == "t-bad":
        if n == 0:
            return calls(call("multiply", {"a": 2, "b": 3}, "c1"), call("add", {"a": "two", "b": 3}, "c2"))
        return "ANSWER: 6"
    if key == "t-fail":
        return "ANSWER: 41"
    if key == "t-tool":
        return calls(call("add", {"a": 1, "b": 2}, "c1")) if n == 0 else "ANSWER: 3"
    raise AssertionError(key)


def fig(value) -> float:
    return round(float(value), 6)


def test_rollout_python_tools_metrics_by_hand(workdir):
    tools = copy_fixture("rollout_tools.py", workdir)
    tasks = write_tasks(workdir / "tasks.jsonl", tasks_six())
    with OpenAIStub(policy) as stub:
        out = run_tool(workdir, tasks=str(tasks), endpoint=stub.url, tools=str(tools), trials=2, concurrency=4,
                       seed=100, temperature=0.0, max_tokens=64, system_prompt=SYSTEM, out="rollouts/six")
        sent = list(stub.requests)
    folder = workdir / "rollouts/six"
    assert out.out == str(folder)
    t1, t2 = lines(folder / "trial-1.jsonl"), lines(folder / "trial-2.jsonl")
    assert sorted(t["task_id"] for t in t1) == sorted(t["task_id"] for t in t2) == sorted(x["id"] for x in tasks_six())
    by = {t["task_id"]: t for t in t1}

    # exact requests: settings per trial, the system prompt added only where the task has none
    assert {b["seed"] for b in sent} == {100, 101} and all(b["temperature"] == 0.0 and b["max_tokens"] == 64 for b in sent)
    first = by["t-add"]["turns"][0]["request"]
    assert first["messages"][0] == {"role": "system", "content": SYSTEM} and first["seed"] == 100
    assert [t["function"]["name"] for t in first["tools"]] == ["put", "get", "add", "explode", "hang"]
    assert first["tools"][2]["function"]["parameters"]["properties"]["a"] == {"description": "first addend", "type": "integer"}
    assert by["t-fail"]["turns"][0]["request"]["messages"][0] == {"role": "system", "content": "Answer tersely."}

    # trajectories: tool outputs are the real returns, state is fresh per trajectory
    st = by["t-state"]
    assert [s["output"] for s in st["turns"][0]["steps"]] == ["stored x", "7"]
    assert st["turns"][1]["request"]["messages"][-2:] == [
        {"role": "tool", "tool_call_id": "c1", "content": "stored x"}, {"role": "tool", "tool_call_id": "c2", "content": "7"}]
    leak = by["t-leak"]["turns"][0]["steps"][0]
    assert leak["error"].startswith("tool get raised KeyError") and leak["executed"] and leak["error_ignored"] is False
    multiply, add = by["t-bad"]["turns"][0]["steps"]
    assert multiply["unknown_tool"] and not multiply["executed"] and multiply["error"].startswith("unknown tool 'multiply'")
    assert add["invalid_arguments"] and "'two' is not of type 'integer'" in add["invalid_reason"] and not add["executed"]
    assert multiply["error_ignored"] is True and add["error_ignored"] is True
    assert by["t-bad"]["success"] is True  # E2E 1 with step-level faults: both readings are kept
    own = by["t-tool"]
    assert own["turns"][0]["request"]["tools"] == OWN_TOOLS and own["score"] == 1.0
    assert own["turns"][0]["steps"][0]["basis"] == "gold" and own["turns"][0]["steps"][0]["output"] == "3"
    assert by["t-fail"]["score"] == 0.0 and "41" in by["t-fail"]["reason"]
    assert {t["task_id"]: t["success"] for t in t2}["t-add"] is False

    # the six metrics, per trial and over trials, against the script
    m = out.metrics
    f1, f2 = m["trials"][0]["figures"], m["trials"][1]["figures"]
    assert f1["task_success_rate"]["value"] == fig(Fraction(5, 6)) and f1["task_success_rate"]["level"] == "task"
    assert f2["task_success_rate"]["value"] == fig(Fraction(4, 6))
    # calls: add, put, get, get(error), multiply(unknown), add(invalid), add(gold) -> 4 correct of 7
    assert (f1["tool_call_precision"]["numerator"], f1["tool_call_precision"]["denominator"]) == (4, 7)
    assert f1["tool_call_precision"]["level"] == "step"
    assert (f1["argument_accuracy"]["numerator"], f1["argument_accuracy"]["denominator"]) == (5, 6)
    assert (f1["steps_per_success"]["numerator"], f1["steps_per_success"]["denominator"]) == (12, 5)
    assert (f2["steps_per_success"]["numerator"], f2["steps_per_success"]["denominator"]) == (10, 4)
    assert (f1["errors_ignored"]["numerator"], f1["errors_ignored"]["denominator"]) == (2, 3)
    assert f1["tokens_per_success"]["value"] == 0.0  # the stub reports zero usage
    seconds = sum(t["duration_s"] for t in t1)
    assert f1["seconds_per_success"]["value"] == pytest.approx(seconds / 5, abs=1e-3)
    c = m["consistency"]
    assert c["level"] == "trial" and c["min"] == fig(Fraction(4, 6)) and c["max"] == fig(Fraction(5, 6))
    assert c["spread"] == fig(Fraction(1, 6))
    assert m["success_rate_mean"]["value"] == 0.75 and m["success_rate_mean"]["level"] == "trial"
    p = m["pooled"]
    assert (p["tool_call_precision"]["numerator"], p["tool_call_precision"]["denominator"]) == (8, 14)
    assert (p["argument_accuracy"]["numerator"], p["argument_accuracy"]["denominator"]) == (10, 12)
    assert p["steps_per_success"]["value"] == fig(Fraction(22, 9))
    assert m["unsolved_tasks"] == ["t-fail"]
    assert json.loads((folder / "metrics.json").read_text()) == m

    # export: 9 successes, 4 of them the same conversation in both trials; 3 failures apart
    assert (out.export["kept"], out.export["duplicates"], out.export["failed"]) == (5, 4, 3)
    sft = lines(folder / "sft.jsonl")
    tool_sample = next(s for s in sft if s["meta"]["task_id"] == "t-tool")
    received = next(b for b in sent if marker(b) == "t-tool")
    assert json.dumps(tool_sample["tools"]) == json.dumps(OWN_TOOLS) == json.dumps(received["tools"])
    add_sample = next(s for s in sft if s["meta"]["task_id"] == "t-add")
    assert add_sample["messages"][0]["content"] == SYSTEM and add_sample["messages"][-1] == {"role": "assistant", "content": "ANSWER: 5"}
    assert [m["role"] for m in add_sample["messages"]] == ["system", "user", "assistant", "tool", "assistant"]
    failed = lines(folder / "failed.jsonl")
    assert sorted(s["meta"]["task_id"] for s in failed) == ["t-add", "t-fail", "t-fail"]
    from aci.tasks import load_samples

    assert len(list(load_samples(folder / "sft.jsonl"))) == 5  # valid SFT samples by the shared schema

    # for the next self-improvement round: the task records no trial solved, ready to roll again
    from aci.tasks import load_tasks

    assert out.export["unsolved"] == 1 and lines(folder / "unsolved.jsonl") == \
        [t for t in load_tasks(str(folder / "unsolved.jsonl"))] == [t for t in load_tasks(str(tasks)) if t["id"] == "t-fail"]
    # everything kept (reward 0), at most one sample per task: t-add's second, different reply is left out
    capped = run_tool(workdir, action="export", out="rollouts/six", min_reward=0.0, max_per_task=1).export
    assert (capped["kept"], capped["capped"], capped["unsolved"]) == (6, 1, 0), capped
    assert sorted(s["meta"]["task_id"] for s in lines(folder / "sft.jsonl")) == sorted(x["id"] for x in tasks_six())

    # resume: nothing new to do, nothing duplicated, files untouched
    before = (folder / "trial-1.jsonl").read_bytes()
    with OpenAIStub(policy) as stub:
        again = run_tool(workdir, tasks=str(tasks), endpoint=stub.url, tools=str(tools), trials=2, seed=100,
                         temperature=0.0, max_tokens=64, system_prompt=SYSTEM, out="rollouts/six")
        assert stub.requests == []
    assert again.counts["ran"] == 0 and again.counts["skipped_done"] == 12
    assert (folder / "trial-1.jsonl").read_bytes() == before
    with OpenAIStub(policy) as stub, pytest.raises(ACIError, match="different settings"):
        run_tool(workdir, tasks=str(tasks), endpoint=stub.url, tools=str(tools), trials=2, seed=7, out="rollouts/six")


def test_rollout_mcp_tool_server(workdir):
    """Tools from a real stdio MCP server: real outputs and errors; one server per run unless mcp_fresh."""
    server = copy_fixture("mcp_tool_server.py", workdir)

    def script(body):
        key, n = marker(body), turn(body)
        if key == "m-add":
            return calls(call("add", {"a": 20, "b": 22}, "c1")) if n == 0 else f"ANSWER: {last_tool(body)}"
        if key == "m-fail":
            return calls(call("fail", {"reason": "disk full"}, "c1")) if n == 0 else "It failed.\nANSWER: none"
        if key.startswith("m-bump"):
            return calls(call("bump", {}, "c1")) if n == 0 else f"ANSWER: {last_tool(body)}"
        raise AssertionError(key)

    rows = [task("m-add", "20+22?", "42"), task("m-fail", "Try it.", "none"),
            task("m-bump1", "Bump.", "1"), task("m-bump2", "Bump.", "1")]
    tasks = write_tasks(workdir / "mcp.jsonl", rows)
    bumps = write_tasks(workdir / "bumps.jsonl", rows[2:])
    cmd = f"{sys.executable} {server.name}"
    with OpenAIStub(script) as stub:
        shared = run_tool(workdir, tasks=str(tasks), endpoint=stub.url, mcp_command=cmd, concurrency=1, out="r/shared")
        fresh = run_tool(workdir, tasks=str(bumps), endpoint=stub.url, mcp_command=cmd, concurrency=2,
                         mcp_fresh=True, out="r/fresh")
    by = {t["task_id"]: t for t in lines(workdir / "r/shared/trial-1.jsonl")}
    assert [t["function"]["name"] for t in by["m-add"]["turns"][0]["request"]["tools"]] == ["add", "bump", "fail", "hang"]
    assert by["m-add"]["turns"][0]["steps"][0]["output"] == "42" and by["m-add"]["success"]
    err = by["m-fail"]["turns"][0]["steps"][0]
    assert err["executed"] and "failed on purpose: disk full" in err["error"] and err["error_ignored"] is False
    assert by["m-fail"]["turns"][1]["request"]["messages"][-1]["content"].startswith("Error: ")
    # one shared server: the counter goes 1, 2 across tasks (so one bump task fails); fresh servers: 1 and 1
    assert sorted(by[k]["final_text"] for k in ("m-bump1", "m-bump2")) == ["ANSWER: 1", "ANSWER: 2"]
    assert shared.metrics["pooled"]["task_success_rate"]["numerator"] == 3
    assert fresh.metrics["pooled"]["task_success_rate"]["numerator"] == 2  # a new server per trajectory
    assert shared.policy["model"] == "stub-model"


def test_the_grader_class_decides_where_a_trajectory_is_graded(tmp_path):
    """`Grader.inline` places the grading: on the event loop for graders that only read the response, in a
    worker thread for the others (a command here), so a new grader runs where its class says."""
    import asyncio
    import threading

    from aci.graders import GRADERS, parse_spec
    from aci.rollout.endpoint import EndpointPolicy
    from aci.rollout.loop import Rollout, default_grade, run

    specs = {"fa": "final-answer", "ln": "last-number", "ch": "choice", "re": {"type": "regex", "pattern": "5"},
             "tc": "tool-call", "cmd": {"type": "command", "command": [sys.executable, "-c", "print(1)"]}}
    rows = [{**task(tid, "2+3?", "5"), "grader": spec} for tid, spec in specs.items()]
    rows[4]["gold"] = {"tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 3}}]}
    on_loop: dict[str, bool] = {}

    def grade(t, response, tool_calls):
        on_loop[t["id"]] = threading.current_thread() is threading.main_thread()
        return default_grade(t, response, tool_calls)

    async def roll(url: str):
        policy = EndpointPolicy(url, "stub-model")
        try:
            return await run(Rollout(tasks=rows, policy=policy, out=tmp_path / "out", grade=grade))
        finally:
            await policy.aclose()

    with OpenAIStub(lambda body: "ANSWER: 5") as stub:
        counts = asyncio.run(roll(stub.url))
    assert counts.ran == len(rows)
    assert on_loop == {tid: GRADERS[parse_spec(spec)["type"]].inline for tid, spec in specs.items()}
    assert on_loop["fa"] and not on_loop["cmd"]


def test_rollout_through_stdio_mcp_server(workdir):
    """The tool itself, called through the real `aci serve` over stdio."""
    import anyio

    tools = copy_fixture("rollout_tools.py", workdir)
    tasks = write_tasks(workdir / "tasks.jsonl", [task("t-add", "What is 2+3?", "5")])

    async def go(url):
        async with mcp_client(workdir) as client:
            return await client.call_tool("run-trajectory", {"tasks": str(tasks), "endpoint": url, "tools": str(tools),
                                                             "seed": 100})

    with OpenAIStub(policy) as stub:
        result = anyio.run(go, stub.url.removesuffix("/v1"))  # a bare host:port base URL is accepted too
    assert not result.is_error, result.content
    data = result.structured_content
    assert data["metrics"]["pooled"]["task_success_rate"]["value"] == 1.0
    assert data["export"]["kept"] == 1 and data["run"]["time_left"]
    assert (workdir / "rollouts/tasks/trial-1.jsonl").exists()


def test_rollout_local_hf_policy(workdir, tiny_model):
    """The local transformers policy end to end: rendered prompt recorded, real token counts, export."""
    from transformers import AutoTokenizer

    tools = copy_fixture("rollout_tools.py", workdir)
    model = workdir / "model"
    import shutil

    shutil.copytree(tiny_model, model)
    rows = [{**task("h1", "Say hi.", "hi"), "grader": {"type": "regex", "pattern": "(?s).*"}},
            {**task("h2", "Add 1 and 2.", "3"), "grader": {"type": "regex", "pattern": "(?s).*"}}]
    tasks = write_tasks(workdir / "hf.jsonl", rows)
    out = run_tool(workdir, tasks=str(tasks), hf_model="model", tools=str(tools), max_tokens=8, max_turns=2,
                   seed=3, system_prompt=SYSTEM)
    traces = lines(workdir / "rollouts/hf/trial-1.jsonl")
    assert len(traces) == 2 and out.policy == {"kind": "hf", "model": str(model)}
    tok = AutoTokenizer.from_pretrained(model)
    total = 0
    for t in traces:
        for tr in t["turns"]:
            req = tr["request"]
            assert req["prompt"] == tok.apply_chat_template(req["messages"], tools=req["tools"], add_generation_prompt=True,
                                                            tokenize=False)
            assert tr["prompt_tokens"] == len(tok(req["prompt"], add_special_tokens=False)["input_ids"])
            assert 1 <= tr["completion_tokens"] <= 8 and req["max_tokens"] == 8 and req["seed"] == 3
            total += tr["prompt_tokens"] + tr["completion_tokens"]
        assert t["success"] and t["stop_reason"] in ("final", "max-turns", "max-tool-calls")
    f = out.metrics["pooled"]
    assert f["tokens_per_success"]["numerator"] == total and f["tokens_per_success"]["value"] == fig(Fraction(total, 2))
    sft = lines(workdir / "rollouts/hf/sft.jsonl")
    assert len(sft) == 2 and all(s["messages"][0] == {"role": "system", "content": SYSTEM} for s in sft)
    assert all(s["tools"] == traces[0]["turns"][0]["request"]["tools"] for s in sft)
