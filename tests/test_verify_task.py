"""`verify-task` through the real registry, the CLI and the stdio MCP server."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from aci import manifest, registry
from aci.context import Context
from aci.errors import ACIError
from tests.conftest import mcp_client
from tests.openai_stub import OpenAIStub

EVAL = "python evaluate.py --model-path {model_path} --limit {limit} --json-output-file {output}"
ADD = "def add(a, b):\n    return a + b\n"


def rows_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def t(id: str, type: str, gold: dict, grader=None, subtype=None) -> dict:
    row = {"id": id, "type": type, "messages": [{"role": "user", "content": f"task {id}"}], "gold": gold}
    if grader is not None:
        row["grader"] = grader
    if subtype is not None:
        row["subtype"] = subtype
    return row


# A mixed Method B set where we know which candidates are broken and why.
MIXED = [
    t("math-ok", "math", {"answer": "42"}, subtype="sum"),
    t("math-ok-default", "math", {"answer": "1,234"}, subtype="sum"),  # graded by the --grader default
    t("math-no-gold", "math", {}, "final-answer", subtype="sum"),  # missing-gold
    t("mcq-ok", "mcq", {"answer": "B"}, "choice"),
    t("mcq-bad-gold", "mcq", {"answer": "maybe"}, "choice"),  # missing-gold: not a letter
    t("code-ok", "code", {"answer": ADD, "tests": "assert add(2, 3) == 5"}, "unit-tests"),
    t("code-vacuous", "code", {"answer": ADD, "tests": "assert True"}, "unit-tests"),  # corrupt-passes
    t("code-wrong-gold", "code", {"answer": ADD.replace("+", "-"), "tests": "assert add(2, 3) == 5"},
      "unit-tests"),  # gold-fails
    t("tool-ok", "tool-use", {"tool_calls": [{"name": "cancel", "arguments": {"order": "#1", "why": "late"}}]},
      "tool-call", subtype="cancel"),
    t("tool-no-calls", "tool-use", {"answer": "cancelled"}, "tool-call", subtype="cancel"),  # missing-gold
    t("regex-any", "qa", {"answer": "whatever"}, {"type": "regex", "pattern": ".*"}),  # corrupt-passes
    t("bad-grader", "qa", {"answer": "x"}, "no-such-grader"),  # grader-error
]
EXPECTED_REJECTED = {
    "math-no-gold": "missing-gold", "mcq-bad-gold": "missing-gold", "code-vacuous": "corrupt-passes",
    "code-wrong-gold": "gold-fails", "tool-no-calls": "missing-gold", "regex-any": "corrupt-passes",
    "bad-grader": "grader-error",
}


def call(workdir: Path, **args):
    return registry.call("verify-task", args, Context(workdir=workdir))


def test_method_b_keeps_exactly_the_sound_candidates(workdir):
    src = write_jsonl(workdir / "cands.jsonl", MIXED)
    out = call(workdir, tasks="cands.jsonl", method="B", grader="final-answer", workers=2)
    kept_rows, rejected_rows = rows_of(workdir / "cands.kept.jsonl"), rows_of(workdir / "cands.rejected.jsonl")
    assert [r["id"] for r in kept_rows] == ["math-ok", "math-ok-default", "mcq-ok", "code-ok", "tool-ok"]
    assert kept_rows == [r for r in MIXED if r["id"] not in EXPECTED_REJECTED]  # rows written as read
    assert {r["id"]: r["_rejected_reason"].split(":")[0] for r in rejected_rows} == EXPECTED_REJECTED
    assert [r["id"] for r in rejected_rows] == [r["id"] for r in MIXED if r["id"] in EXPECTED_REJECTED]
    assert (out.candidates, out.kept, out.rejected) == (12, 5, 7)
    assert out.reasons == {"missing-gold": 3, "corrupt-passes": 2, "gold-fails": 1, "grader-error": 1}
    assert "code-vacuous (line 7)" in out.examples["corrupt-passes"]
    yields = {s.subtype: (s.candidates, s.kept, s.rate) for s in out.by_subtype}
    assert yields == {"code": (3, 1, 0.3333), "math/sum": (3, 2, 0.6667), "mcq": (2, 1, 0.5),
                      "qa": (2, 0, 0.0), "tool-use/cancel": (2, 1, 0.5)}
    m = manifest.current(Context(workdir=workdir).state, workdir / "cands.kept.jsonl")
    assert m["role"] == "train"
    assert m["verify"]["kept"] == 5 and m["verify"]["reasons"]["missing-gold"] == 3
    assert m["verify"]["source_sha256"] == manifest.file_hash(src)
    assert "verify-task method B: kept 5/12" in Context(workdir=workdir).state.history()[0]
    text = out.summary()
    assert "kept 5/12" in text and "tool-use/cancel" in text


def test_without_a_grader_tasks_are_rejected_not_guessed(workdir):
    write_jsonl(workdir / "c.jsonl", [t("a", "math", {"answer": "1"})])
    out = call(workdir, tasks="c.jsonl", kept="out/k.jsonl", rejected="out/r.jsonl")
    assert out.reasons == {"no-grader": 1}
    assert out.kept_file == str(workdir / "out" / "k.jsonl") and rows_of(workdir / "out" / "k.jsonl") == []


def test_the_run_cards_grader_is_the_default_before_the_benchmark_cards(workdir):
    ctx = Context(workdir=workdir)
    registry.call("plan", {"action": "init", "base_model": "base", "benchmark": "toy"}, ctx)
    registry.call("log-state", {"action": "append", "kind": "benchmark-card", "message": "numbers",
                                "data": {"answer_format": "the last number"}}, ctx)
    write_jsonl(workdir / "c.jsonl", [t("a", "math", {"answer": "7"})])
    out = call(workdir, tasks="c.jsonl")
    assert (out.grader, out.kept) == ("last-number", 1) and "benchmark card" in out.grader_source
    with pytest.raises(ACIError, match="unknown grader 'exact'"):
        registry.call("plan", {"action": "update", "grader": "exact"}, ctx)
    registry.call("plan", {"action": "update", "grader": "final-answer"}, ctx)
    out = call(workdir, tasks="c.jsonl")  # gold 7 rendered as `ANSWER: 7`; the corruption scores 0
    assert (out.grader, out.grader_source, out.kept) == ("final-answer", "the run card's grader", 1)


def test_adapted_gsm8k_rows_verify_with_a_default_grader(workdir):
    rows = [{"question": "6 x 7?", "answer": "6*7 = 42\n#### 42"}, {"question": "2 + 2?", "answer": "#### 4"}]
    write_jsonl(workdir / "gsm.jsonl", rows)
    out = call(workdir, tasks="gsm.jsonl", grader="last-number")
    assert (out.kept, out.rejected) == (2, 0)
    assert rows_of(workdir / "gsm.kept.jsonl") == rows


METHOD_A = [
    t("good", "qa", {"answer": "Order #1 ships on May 3 to Oslo with 2 items.", "claims": ["ships May 3", "to Oslo",
                                                                                           "2 items"]}),
    t("short", "qa", {"answer": "Yes.", "claims": ["a", "b", "c"]}),
    t("error", "qa", {"answer": "Error: tool get_order failed with status 500", "claims": ["a", "b", "c"]}),
    t("notfound", "qa", {"answer": "I could not find any order matching that id.", "claims": ["a", "b", "c"]}),
    t("few", "qa", {"answer": "The order ships on May 3 to Oslo.", "claims": ["ships May 3"]}),
    t("good2", "qa", {"answer": "The user has 3 orders totalling 120.50 USD.", "claims": ["3 orders", "120.50",
                                                                                            "USD"]}),
]


def test_method_a_discard_filters(workdir):
    write_jsonl(workdir / "a.jsonl", METHOD_A)
    out = call(workdir, tasks="a.jsonl", method="A")
    assert [r["id"] for r in rows_of(workdir / "a.kept.jsonl")] == ["good", "good2"]
    assert out.reasons == {"empty-answer": 1, "error-answer": 1, "not-found": 1, "too-few-facts": 1}
    assert out.judge_mean is None
    relaxed = call(workdir, tasks="a.jsonl", method="A", min_answer_chars=0, min_facts=1, error_patterns=[],
                   not_found_patterns=["matching that id"])
    assert (relaxed.kept, relaxed.reasons) == (5, {"not-found": 1})
    with pytest.raises(ACIError, match="not a valid regular expression"):
        call(workdir, tasks="a.jsonl", method="A", not_found_patterns=["("])


def test_method_a_with_an_independent_local_judge(workdir):
    write_jsonl(workdir / "a.jsonl", METHOD_A)

    def reply(body: dict) -> str:
        prompt = body["messages"][1]["content"]
        return '{"score": 0.9, "reason": "supported"}' if "Oslo" in prompt else '{"score": 0.2, "reason": "vague"}'

    with OpenAIStub(reply) as stub:
        out = call(workdir, tasks="a.jsonl", method="A", judge_endpoint=stub.url, judge_model="judge",
                   judge_rubric="Are the facts supported?", judge_threshold=0.5, workers=1)
        assert len(stub.requests) == 2  # only answers that passed the filters are judged
        assert "Are the facts supported?" in stub.requests[0]["messages"][1]["content"]
    assert [r["id"] for r in rows_of(workdir / "a.kept.jsonl")] == ["good"]
    assert out.reasons["judge-below-threshold"] == 1 and out.judge_mean == pytest.approx(0.55)
    assert "judge scored 0.20" in out.examples["judge-below-threshold"]


def test_posttrainbench_profile_refuses_a_hosted_judge(workdir):
    ctx = Context(workdir=workdir)
    registry.call("plan", {"action": "init", "base_model": "base", "benchmark": "gsm8k", "eval_command": EVAL,
                           "profile": "posttrainbench"}, ctx)
    write_jsonl(workdir / "a.jsonl", METHOD_A)
    with pytest.raises(ACIError) as err:
        call(workdir, tasks="a.jsonl", method="A", judge_endpoint="https://api.openai.com/v1", judge_model="gpt")
    assert err.value.rule == "no-hosted-llm"
    assert not (workdir / "a.kept.jsonl").exists()
    judged = t("j", "qa", {"answer": "Paris"}, {"type": "judge", "endpoint": "https://judge.example.com/v1",
                                                "model": "m"})
    write_jsonl(workdir / "b.jsonl", [judged])
    with pytest.raises(ACIError) as err:
        call(workdir, tasks="b.jsonl")
    assert err.value.rule == "no-hosted-llm"
    with OpenAIStub(['{"score": 1}', '{"score": 0}']) as stub:  # loopback is fine
        local = {**judged, "grader": {"type": "judge", "endpoint": stub.url, "model": "m"}}
        write_jsonl(workdir / "b.jsonl", [local])
        assert call(workdir, tasks="b.jsonl", workers=1).kept == 1


def test_paths_are_checked(workdir, tmp_path_factory):
    write_jsonl(workdir / "c.jsonl", MIXED[:1])
    with pytest.raises(ACIError, match="outside the allowed roots"):
        call(workdir, tasks="c.jsonl", kept=str(tmp_path_factory.mktemp("elsewhere") / "k.jsonl"))
    with pytest.raises(ACIError, match="three different files"):
        call(workdir, tasks="c.jsonl", kept="c.jsonl")
    with pytest.raises(ACIError, match="does not exist"):
        call(workdir, tasks="missing.jsonl")


BAD = {
    "broken": (b'{"id": "a", "type": "qa", "messages": [{"role": "user", "content": "q"}], "gold": {}}\n{"id": \n', 2),
    "missing": (b'{"question": "q", "answer": "1"}\n{"id": "b", "type": "qa", "gold": {"answer": "1"}}\n', 2),
    "types": (b'{"question": "q", "answer": "1"}\n{"question": "q", "answer": {"x": 1}}\n', 2),
    "empty": (b"", 1),
    "binary": (b'{"question": "q", "answer": "1"}\n\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\n', 2),
}


@pytest.mark.parametrize("kind", sorted(BAD))
def test_malformed_input_through_registry_keeps_old_outputs(workdir, kind):
    data, line = BAD[kind]
    (workdir / "bad.jsonl").write_bytes(data)
    (workdir / "bad.kept.jsonl").write_text("previous\n")
    with pytest.raises(ACIError, match=f"bad.jsonl:{line}:"):
        call(workdir, tasks="bad.jsonl", grader="final-answer")
    assert (workdir / "bad.kept.jsonl").read_text() == "previous\n"  # nothing half-written
    assert not list(workdir.glob(".bad.*.tmp"))


def test_malformed_input_through_the_cli(workdir):
    for kind, (data, line) in sorted(BAD.items()):
        (workdir / f"{kind}.jsonl").write_bytes(data)
        proc = subprocess.run([sys.executable, "-m", "aci.cli", "verify-task", "--tasks", f"{kind}.jsonl",
                               "--grader", "final-answer"], cwd=workdir, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, (kind, proc.stdout, proc.stderr)
        assert f"{workdir / kind}.jsonl:{line}:" in proc.stderr, (kind, proc.stderr)
    write_jsonl(workdir / "ok.jsonl", MIXED[:2])
    proc = subprocess.run([sys.executable, "-m", "aci.cli", "--json", "verify-task", "--tasks", "ok.jsonl",
                           "--grader", '{"type": "final-answer"}', "--method", "B"],
                          cwd=workdir, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["kept"] == 2


def test_verify_task_through_the_stdio_mcp_server(workdir):
    for kind, (data, _) in BAD.items():
        (workdir / f"{kind}.jsonl").write_bytes(data)
    write_jsonl(workdir / "cands.jsonl", MIXED)

    async def go():
        async with mcp_client(workdir) as c:
            for kind, (_, line) in sorted(BAD.items()):
                r = await c.call_tool("verify-task", {"tasks": f"{kind}.jsonl", "grader": "final-answer"})
                assert r.is_error, kind
                assert f"{kind}.jsonl:{line}:" in r.content[0].text, r.content[0].text
            r = await c.call_tool("verify-task", {"tasks": "cands.jsonl", "grader": "final-answer"})
            assert not r.is_error, r.content
            assert r.structured_content["kept"] == 5 and r.structured_content["reasons"]["missing-gold"] == 3

    asyncio.run(go())


# -- issue 33: graders named by data rows are data; every grader has a time limit --------------------------
def test_a_data_row_cannot_run_a_program_through_verify_task(workdir, tmp_path_factory):
    """A downloaded data file whose rows name a `command` or `python:` grader, given to verify-task through the
    CLI and the MCP server: each such row is rejected with its reason, the command never runs and no module is
    imported; the sound row is kept, and the same kind of grader given as --grader still grades."""
    import uuid

    elsewhere = tmp_path_factory.mktemp("elsewhere")
    touched = Path("/tmp") / f"aci-issue33-{uuid.uuid4().hex}"
    markers = [elsewhere / "imported", workdir / "imported"]
    (elsewhere / "evil.py").write_text(f"open({str(markers[0])!r}, 'w').write('x')\n"
                                       "def f(task, response):\n    return 1.0\n")
    (workdir / "evil_mod.py").write_text(f"open({str(markers[1])!r}, 'w').write('x')\n"
                                         "def f(task, response):\n    return 1.0\n")
    (workdir / "check.py").write_text("def check(task, response):\n    return float(response.strip() == '42')\n")
    write_jsonl(workdir / "downloaded.jsonl", [
        t("cmd", "qa", {"answer": "42"}, {"type": "command", "command": ["touch", str(touched)]}),
        t("py-path", "qa", {"answer": "42"}, f"python:{elsewhere / 'evil.py'}:f"),
        t("py-module", "qa", {"answer": "42"}, {"type": "python", "function": "evil_mod:f"}),
        t("sound", "qa", {"answer": "42"}, "final-answer"),
    ])
    try:
        proc = subprocess.run([sys.executable, "-m", "aci.cli", "--json", "verify-task", "--tasks", "downloaded.jsonl"],
                              cwd=workdir, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        via_cli = json.loads(proc.stdout)

        async def go():
            async with mcp_client(workdir) as c:
                r = await c.call_tool("verify-task", {"tasks": "downloaded.jsonl", "kept": "mcp.kept.jsonl",
                                                      "rejected": "mcp.rejected.jsonl"})
                assert not r.is_error, r.content
                return r.structured_content

        for out in (via_cli, asyncio.run(go())):
            assert (out["kept"], out["reasons"]) == (1, {"grader-not-allowed": 3}), out
            example = out["examples"]["grader-not-allowed"]
            assert example.startswith("cmd (line 1): task 'cmd' names the grader 'command', which runs a program")
        rejected = {r["id"]: r["_rejected_reason"] for r in rows_of(workdir / "downloaded.rejected.jsonl")}
        assert set(rejected) == {"cmd", "py-path", "py-module"}
        assert all(why.startswith("grader-not-allowed: ") and "a task row may name only" in why
                   for why in rejected.values())
        assert not touched.exists() and not any(m.exists() for m in markers)
        # the agent's own program grader, given as --grader for rows that name none, grades (in the sandbox)
        write_jsonl(workdir / "mine.jsonl", [t("mine", "qa", {"answer": "42"})])
        out = call(workdir, tasks="mine.jsonl", grader="python:check.py:check")
        assert out.kept == 1, out.examples
    finally:
        touched.unlink(missing_ok=True)


def test_a_runaway_regex_row_is_rejected_at_its_time_limit(workdir):
    """`(a|aa)+$` against 40 `a`s and a `!` took about 50 s per call; now the gold scores 0 at the time
    limit. A pattern whose gold matches at once but whose corruption (every match removed) runs away is
    rejected as grader-timeout, not as missing gold."""
    import time

    write_jsonl(workdir / "r.jsonl", [
        t("redos", "qa", {"answer": "a" * 40 + "!"}, {"type": "regex", "pattern": "(a|aa)+$"}),
        t("redos-corrupt", "qa", {"answer": "x" + "a" * 40 + "!"}, {"type": "regex", "pattern": "^x|(a|aa)+$"}),
    ])
    start = time.monotonic()
    out = call(workdir, tasks="r.jsonl", workers=1)
    assert time.monotonic() - start < 5
    assert out.reasons == {"gold-fails": 1, "grader-timeout": 1}, out.examples
    assert "gold scored 0.00" in out.examples["gold-fails"] and "time limit" in out.examples["gold-fails"]
    assert "time limit" in out.examples["grader-timeout"]
