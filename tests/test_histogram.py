"""`histogram`: features equal hand-computed values; the tau2-retail lesson (mean writes 1.00 vs 1.56) fails
the comparison and its quotas, applied, pass it; saved targets, manifest, plots, custom features, token
lengths, and file:line errors through the registry and the real stdio MCP server."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from aci import manifest, registry
from aci.context import Context
from aci.errors import ACIError
from aci.histogram import build, features
from tests.conftest import mcp_client

SYSTEM = {"role": "system", "content": "You are a retail agent."}


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def run(workdir: Path, **args):
    return registry.call("histogram", args, Context(workdir=workdir))


def task(i: int, calls: list[str], *, answer: str = "", claims: list[str] | None = None, subtype: str | None = None):
    gold: dict = {"answer": answer, "tool_calls": [{"name": n, "arguments": {"order_id": f"#W{i}"}} for n in calls]}
    if claims:
        gold["claims"] = claims
    return {"id": f"t{i}", "type": "tool-use", "subtype": subtype, "messages": [SYSTEM, {"role": "user", "content": "Help."}],
            "gold": gold, "grader": "tool-call", "meta": {}}


def retail(i: int, writes: int, info: bool) -> dict:
    """A tau2-retail-like task: one lookup, then `writes` write calls; `info` = it must tell the user something."""
    names = ["cancel_pending_order", "modify_pending_order_items", "return_delivered_order_items"]
    return task(i, ["get_order_details", *names[:writes]], answer="$54.20" if info else "", subtype="order")


# -- hand-computed features ----------------------------------------------------------------------------
HAND_TASKS = [
    task(1, ["get_order_details", "cancel_pending_order"], subtype="cancel"),
    task(2, ["get_user_details", "modify_pending_order_items", "modify_user_address", "get_order_details"],
         answer="$54.00", subtype="modify"),
    task(3, [], claims=["The order shipped on May 2."]),
    task(4, ["exchange_delivered_order_items", "exchange_delivered_order_items", "return_delivered_order_items",
             "frobnicate"], subtype="exchange"),
]


def test_tool_use_features_equal_hand_computed_values(workdir):
    write_jsonl(workdir / "tasks.jsonl", HAND_TASKS)
    out = run(workdir, path="tasks.jsonl", record=False)
    f = out.features
    assert out.feature_set == "tool-use" and out.records == 4
    assert f["tool_calls"]["counts"] == {"0": 1, "2": 1, "4": 2} and f["tool_calls"]["mean"] == 2.5
    assert f["distinct_tools"]["counts"] == {"0": 1, "2": 1, "3": 1, "4": 1} and f["distinct_tools"]["mean"] == 2.25
    assert f["writes"]["counts"] == {"0": 1, "1": 1, "2": 1, "3": 1} and f["writes"]["mean"] == 1.5
    assert f["multi_write"]["counts"] == {"no": 2, "yes": 2}
    assert f["returns_info"]["counts"] == {"no": 2, "yes": 2}  # answer "$54.00" and the claims
    # the records' own labels; task 3 has none and is not counted (not "none": a missing label is no bin)
    assert f["subtype"]["counts"] == {"cancel": 1, "exchange": 1, "modify": 1} and f["subtype"]["records"] == 3
    assert f["tool_mix"]["counts"] == {"get_order_details": 2, "exchange_delivered_order_items": 2,
                                       "cancel_pending_order": 1, "frobnicate": 1, "get_user_details": 1,
                                       "modify_pending_order_items": 1, "modify_user_address": 1,
                                       "return_delivered_order_items": 1}
    assert out.unclassified_tools == ["frobnicate"]
    mapped = run(workdir, path="tasks.jsonl", record=False, tool_kinds={"frobnicate": "write"})
    assert mapped.features["writes"]["counts"] == {"0": 1, "1": 1, "2": 1, "4+": 1}
    assert mapped.features["writes"]["mean"] == 1.75 and mapped.unclassified_tools == []


def test_sft_samples_count_the_assistants_calls(workdir):
    hermes = '<tool_call>{"name": "cancel_pending_order", "arguments": {"order_id": "#W1"}}</tool_call>'
    sample = {"messages": [
        {"role": "user", "content": "Cancel #W1 and book a new one."},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "get_order_details", "arguments": "{}"}}]},
        {"role": "tool", "content": "{}"},
        {"role": "assistant", "content": hermes},
        {"role": "tool", "content": "ok"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "book_reservation", "arguments": "{}"}}]},
        {"role": "assistant", "content": "Done."}], "tools": [{"type": "function", "function": {"name": "x"}}]}
    write_jsonl(workdir / "sft.jsonl", [sample])
    f = run(workdir, path="sft.jsonl", record=False).features
    assert f["tool_calls"]["counts"] == {"3": 1} and f["writes"]["counts"] == {"2": 1}
    assert f["returns_info"]["records"] == 0  # a sample carries no gold: not applicable, not "no"


@pytest.mark.parametrize("name,kind", [("get_order_details", "read"), ("cancel_pending_order", "write"),
                                       ("exchangeDeliveredOrderItems", "write"), ("get_order_return", "read"),
                                       ("return_items", "write"), ("search_flights", "read"),
                                       ("calculate", "read"), ("transfer_to_human_agents", "write"),
                                       ("frobnicate", "unknown")])
def test_read_write_verb_heuristic(name, kind):
    assert features.classify_tool(name) == kind


@pytest.mark.parametrize("answer,calls,cls", [
    ("Reasoning...\nANSWER: 42", False, "answer-line"), ("42", False, "number"), ("-1,234.5", False, "number"),
    ("(B)", False, "letter"), ("```python\nprint(1)\n```", False, "code-block"),
    ('<tool_call>{"name": "f"}</tool_call>', False, "tool-call"), ("", True, "tool-call"),
    ("  ", False, "empty"), ("The capital is Paris.", False, "free-text")])
def test_answer_format_classes(answer, calls, cls):
    assert features.answer_format(answer, calls) == cls


def test_chat_features_equal_hand_computed_values(workdir):
    rows = [
        {"id": "a", "type": "math", "messages": [{"role": "system", "content": "Be brief."},
                                                 {"role": "user", "content": "What is 2+3?"}],
         "gold": {"answer": "ANSWER: 5"}, "grader": "final-answer"},
        {"question": "Which is larger, A or B?", "answer": "B"},  # adapted by aci.tasks
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
                      {"role": "user", "content": "Write code."},
                      {"role": "assistant", "content": "```python\nprint('x')\n```"}]},
        {"prompt": "How many legs does a spider have?", "completion": "8"},
    ]
    write_jsonl(workdir / "chat.jsonl", rows)
    out = run(workdir, path="chat.jsonl", record=False)
    f = out.features
    assert out.feature_set == "chat" and out.unit == "chars"
    assert f["turns"]["counts"] == {"1": 3, "2": 1} and f["turns"]["mean"] == 1.25
    assert f["system_prompt"]["counts"] == {"no": 3, "yes": 1}
    # prompts: "Be brief.\nWhat is 2+3?" = 22 chars, 24, "hi\nHello! How can I help?\nWrite code." = 37, 34
    assert f["prompt_length"]["counts"] == {"10-29": 2, "30-99": 2}
    # answers: 9, 1, 24, 1 chars
    assert f["answer_length"]["counts"] == {"0-9": 3, "10-29": 1}
    assert f["answer_format"]["counts"] == {"answer-line": 1, "code-block": 1, "letter": 1, "number": 1}


def test_lengths_in_tokens_of_a_local_tokenizer(workdir, tiny_model, monkeypatch):
    from transformers import AutoTokenizer

    monkeypatch.setenv("ACI_ROOTS", str(tiny_model))
    tok = AutoTokenizer.from_pretrained(str(tiny_model))
    text = " ".join(["The quick brown fox jumps over the lazy dog."] * 3)
    write_jsonl(workdir / "chat.jsonl", [{"question": text, "answer": "ANSWER: 12"}])
    out = run(workdir, path="chat.jsonl", record=False, tokenizer=str(tiny_model))
    n = len(tok(text, add_special_tokens=False)["input_ids"])
    expected = features._bucket(n, features.LENGTH_EDGES["tokens"], features._length_labels(features.LENGTH_EDGES["tokens"]))
    assert out.unit == "tokens" and out.features["prompt_length"]["counts"] == {expected: 1}
    assert expected != features._bucket(len(text), features.LENGTH_EDGES["tokens"], features._length_labels(features.LENGTH_EDGES["tokens"]))


def test_custom_feature_from_python_module(workdir, monkeypatch):
    (workdir / "myfeatures.py").write_text(
        "def difficulty(rec):\n    return rec['meta'].get('difficulty')\n\n"
        "def order_ids(rec):\n    return [c['arguments']['order_id'][:3] for c in rec['gold']['tool_calls']]\n")
    monkeypatch.syspath_prepend(str(workdir))
    rows = [{**retail(i, 1, False), "meta": {"difficulty": d}} for i, d in enumerate(["easy", "hard", "hard"])]
    rows.append(retail(3, 2, False))
    write_jsonl(workdir / "tasks.jsonl", rows)
    out = run(workdir, path="tasks.jsonl", record=False,
              custom=["python:myfeatures:difficulty", "ids=python:myfeatures:order_ids"])
    assert out.features["difficulty"]["counts"] == {"hard": 2, "easy": 1}
    assert out.features["difficulty"]["records"] == 3  # None: not applicable
    assert out.features["ids"]["kind"] == "mix" and out.features["ids"]["counts"] == {"#W0": 2, "#W1": 2, "#W2": 2, "#W3": 3}
    with pytest.raises(ACIError, match="python:module:function"):
        run(workdir, path="tasks.jsonl", custom=["myfeatures.difficulty"])


# -- the acceptance case: mean writes 1.00 vs 1.56 ------------------------------------------------------------
def tau2_target() -> list[dict]:
    """114-task-like target: writes 1/2/3 = 61/22/17 % (mean 1.56, 39 % with >= 2), 33 % return information."""
    return [retail(i, 1 if i < 61 else 2 if i < 83 else 3, i % 100 < 33) for i in range(100)]


def test_writes_gap_fails_and_applied_quotas_pass(workdir):
    write_jsonl(workdir / "target.jsonl", tau2_target())
    saved = run(workdir, path="target.jsonl", save="target-hist.json", role="reference")
    assert saved.features["writes"]["mean"] == 1.56
    candidate = [retail(1000 + i, 1, False) for i in range(200)]  # synthetic v1: exactly one write, never informs
    write_jsonl(workdir / "cand.jsonl", candidate)
    feats = ["writes", "multi_write", "returns_info"]
    out = run(workdir, action="compare", path="cand.jsonl", target="target-hist.json", features=feats)
    c = out.comparison
    assert out.passed is False and set(c["failed"]) == set(feats) and c["tolerance_pp"] == 5.0
    w = c["features"]["writes"]
    assert w["mean"] == {"target": 1.56, "candidate": 1.0}
    assert w["tv"] == 0.39 and w["max_gap_pp"] == 39.0
    assert [(b["bin"], b["gap_pp"]) for b in w["bins"]] == [("1", 39.0), ("2", -22.0), ("3", -17.0)]
    # smallest size reachable by adding only: 200 one-write tasks must stay 61 % -> N = ceil(200 / 0.61) = 328
    assert c["size"] == 328
    need = {(q["feature"], q["bin"]): q["need"] for q in c["quotas"]}
    assert need[("writes", "2")] == 73 and need[("writes", "3")] == 56 and need[("writes", "1")] == 1  # ceil(.22*328) ...
    assert need[("multi_write", "yes")] == 128 and need[("returns_info", "yes")] == 109
    firsts = [(q["feature"], q["bin"]) for q in c["quotas"][:4]]
    assert firsts == [("multi_write", "yes"), ("returns_info", "yes"), ("writes", "2"), ("writes", "3")]  # scarcest first
    assert all(q["relative_deficit"] == 1.0 for q in c["quotas"][:4]) and c["quotas"][-1]["relative_deficit"] < 1

    writes = [w for w in (1, 2, 3) for _ in range(need.get(("writes", str(w)), 0))]  # the writes quotas ...
    added = [retail(5000 + k, w, k < need[("returns_info", "yes")]) for k, w in enumerate(writes)]  # ... and info
    write_jsonl(workdir / "cand.jsonl", candidate + added)
    fixed = run(workdir, action="compare", path="cand.jsonl", target="target-hist.json", features=feats)
    assert fixed.passed is True, fixed.summary()
    assert all(f["max_gap_pp"] <= 0.5 for f in fixed.comparison["features"].values())
    assert fixed.features["writes"]["mean"] == pytest.approx(1.56, abs=0.01)


def test_exported_samples_compare_with_the_benchmark_tasks(workdir):
    """Rollout exports are SFT samples without gold or sub-type: those features are not comparable
    (not failed) unless the task's sub-type and information flag travel in `meta`."""
    write_jsonl(workdir / "target.jsonl", tau2_target())
    run(workdir, path="target.jsonl", save="target-hist.json", role="reference", record=False)

    def sample(i: int, writes: int, meta: dict) -> dict:
        calls = retail(i, writes, False)["gold"]["tool_calls"]
        turns = [{"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}]}
            for c in calls]
        return {"messages": [SYSTEM, {"role": "user", "content": "Help."}, *turns,
                             {"role": "assistant", "content": "Done."}], "meta": {"task_id": f"t{i}", **meta}}

    write_jsonl(workdir / "sft.jsonl", [sample(i, 1 if i < 61 else 2 if i < 83 else 3, {}) for i in range(100)])
    out = run(workdir, action="compare", path="sft.jsonl", target="target-hist.json", record=False)
    c = out.comparison
    assert [x["feature"] for x in c["skipped"]] == ["returns_info", "subtype"] and "returns_info" not in c["features"]
    assert "meta.subtype" in c["skipped"][1]["reason"] and not any(q["feature"] == "subtype" for q in c["quotas"])
    assert c["features"]["writes"]["passed"] and out.passed is True
    assert "skipped (not compared, no quotas)" in out.summary()
    write_jsonl(workdir / "sft.jsonl", [sample(i, 1 if i < 61 else 2 if i < 83 else 3,
                                               {"subtype": "order", "returns_info": False}) for i in range(100)])
    out = run(workdir, action="compare", path="sft.jsonl", target="target-hist.json", record=False)
    assert out.comparison["skipped"] == [] and out.comparison["failed"] == ["returns_info"]


# -- quotas that cannot mislead (the lock-codes run): like with like, the sub-type mix always --------------
def lock_codes(workdir: Path) -> tuple[Path, Path, Path]:
    """The demo's test items (copy/reverse/swap 30/40/30), the generator's default tasks (a third each) and
    the SFT samples an agent renders from them (`ANSWER: <code>`, no sub-type)."""
    import sys

    from aci import toybench

    bench = toybench.build(workdir, python=sys.executable, model=False)
    tasks = toybench.load_source(bench.train_source).generate(600, 1, {"copy": 1, "reverse": 1, "swap": 1})
    write_jsonl(workdir / "tasks.jsonl", tasks)
    write_jsonl(workdir / "sft.jsonl", [{"messages": [{"role": "user", "content": t["question"]},
                                                      {"role": "assistant", "content": f"ANSWER: {t['answer']}"}]}
                                        for t in tasks])
    return bench.test, workdir / "tasks.jsonl", workdir / "sft.jsonl"


def test_tasks_against_the_benchmark_name_the_subtype_gap(workdir):
    test, tasks, _ = lock_codes(workdir)
    out = run(workdir, action="compare", path=tasks.name, target=str(test.relative_to(workdir)), record=False)
    c = out.comparison
    assert out.feature_set == "chat" and c["failed"] == ["subtype"] and c["skipped"] == []
    assert {b["bin"]: b["target_pct"] for b in c["features"]["subtype"]["bins"]} == {"reverse": 40.0, "copy": 30.0,
                                                                                    "swap": 30.0}
    assert c["features"]["answer_format"]["passed"]  # gold answers on both sides: compared, and alike
    # quotas only for the failing feature; the reverse bin is the scarcest
    assert {q["feature"] for q in c["quotas"]} == {"subtype"} and c["quotas"][0]["bin"] == "reverse"
    assert "FAIL subtype" in out.summary() and "add     67 with subtype = reverse" in out.summary()


def test_samples_against_gold_answers_skip_the_answer_features(workdir):
    """The run's mistake: samples answer `ANSWER: 4321`, the test file holds the gold `4321`. That is not a
    format gap, and a quota "add N with answer_format = number" would wreck the format."""
    test, tasks, sft = lock_codes(workdir)
    out = run(workdir, action="compare", path=sft.name, target=str(test.relative_to(workdir)), record=False)
    c = out.comparison
    skipped = {x["feature"]: x["reason"] for x in c["skipped"]}
    assert set(skipped) == {"answer_length", "answer_format", "subtype"}
    assert "gold answers" in skipped["answer_format"] and "assistant responses" in skipped["answer_format"]
    assert "meta.subtype" in skipped["subtype"]
    assert out.passed is True and c["quotas"] == [] and not set(skipped) & set(c["features"])
    assert "answer_format = number" not in out.summary() and "skip answer_format" in out.summary()
    # the sub-type travels in meta: compared, and the gap named
    rows = [{**json.loads(line), "meta": {"subtype": t["subtype"]}}
            for line, t in zip(sft.read_text().splitlines(), map(json.loads, tasks.read_text().splitlines()),
                               strict=True)]
    write_jsonl(sft, rows)
    out = run(workdir, action="compare", path=sft.name, target=str(test.relative_to(workdir)), record=False)
    assert out.comparison["failed"] == ["subtype"] and {x["feature"] for x in out.comparison["skipped"]} == {
        "answer_length", "answer_format"}


def test_a_feature_only_the_candidate_carries_is_skipped(workdir):
    write_jsonl(workdir / "target.jsonl", [{"question": f"What is {i}+1?", "answer": str(i + 1)} for i in range(20)])
    write_jsonl(workdir / "cand.jsonl", [{"question": f"What is {i}+2?", "answer": str(i + 2), "subtype": "add"}
                                         for i in range(20)])
    c = run(workdir, action="compare", path="cand.jsonl", target="target.jsonl", record=False).comparison
    assert c["skipped"] == [{"feature": "subtype", "reason": "no value in the target"}] and c["quotas"] == []


def test_a_custom_feature_replaces_the_builtin_of_its_name(workdir, monkeypatch):
    (workdir / "feat.py").write_text("def sub(rec):\n    return 'custom-' + (rec.get('subtype') or 'x')\n")
    monkeypatch.syspath_prepend(str(workdir))
    write_jsonl(workdir / "t.jsonl", [{"question": "q", "answer": "1", "subtype": "add"}])
    out = run(workdir, path="t.jsonl", record=False, custom=["subtype=python:feat:sub"])
    assert list(out.features).count("subtype") == 1 and out.features["subtype"]["counts"] == {"custom-add": 1}


def test_compare_records_manifest_side_file_and_plots(workdir):
    write_jsonl(workdir / "target.jsonl", tau2_target())
    write_jsonl(workdir / "cand.jsonl", [retail(i, 1, False) for i in range(50)])
    out = run(workdir, action="compare", path="cand.jsonl", target="target.jsonl", plot_dir="plots", size=400)
    assert out.comparison["size"] == 400 and out.passed is False
    m = manifest.current(Context(workdir=workdir).state, workdir / "cand.jsonl")
    h = m["histogram"]
    assert m["role"] == "train" and h["passed"] is False and h["target"] == "target.jsonl"
    assert h["means"]["writes"] == 1.0 and h["tv"]["writes"] == 0.39 and h["quotas"][0]["need"] > 0
    side = json.loads((Path(out.manifest).parent / "histogram.json").read_text())
    assert side["kind"] == build.KIND and side["features"]["writes"]["counts"] == {"1": 50}
    assert sorted(Path(p).name for p in out.plots) == sorted(f"{k}.png" for k in out.features)
    assert all(Path(p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in out.plots)
    assert "FAIL writes" in out.summary() and "quotas to reach N=400" in out.summary()
    with pytest.raises(ACIError, match="below the candidate"):
        run(workdir, action="compare", path="cand.jsonl", target="target.jsonl", size=10)


# -- malformed input ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("content,where", [
    (json.dumps(retail(1, 1, False)) + "\n{broken\n", "data.jsonl:2"),
    (json.dumps(retail(1, 1, False)) + "\n" + json.dumps({**retail(2, 1, False), "gold": {"tool_calls": "cancel"}}) + "\n",
     "data.jsonl:2"),
    (json.dumps({"messages": "hello"}) + "\n", "data.jsonl:1"),
    (json.dumps({"answer": "no question"}) + "\n", "data.jsonl:1"),
    ("", "data.jsonl:1"),
    ("\x00\x01binary", "data.jsonl:1"),
])
def test_malformed_input_names_file_and_line(workdir, content, where):
    (workdir / "data.jsonl").write_text(content)
    with pytest.raises(ACIError, match=re.escape(where)):
        run(workdir, path="data.jsonl")


def test_over_stdio_mcp(workdir):
    write_jsonl(workdir / "target.jsonl", tau2_target())
    write_jsonl(workdir / "cand.jsonl", [retail(i, 1, False) for i in range(20)])

    async def go():
        async with mcp_client(workdir) as c:
            ok = await c.call_tool("histogram", {"action": "compare", "path": "cand.jsonl", "target": "target.jsonl"})
            (workdir / "cand.jsonl").write_text(json.dumps(retail(0, 1, False)) + "\n[1, 2]\n")
            bad = await c.call_tool("histogram", {"path": "cand.jsonl"})
            return ok, bad

    ok, bad = asyncio.run(go())
    assert not ok.is_error and ok.structured_content["passed"] is False
    assert ok.structured_content["comparison"]["features"]["writes"]["mean"] == {"target": 1.56, "candidate": 1.0}
    assert bad.is_error and "cand.jsonl:2" in bad.content[0].text
