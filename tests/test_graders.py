"""Every built-in grader: correct, wrong and malformed responses; gold scores 1 and corruption 0."""

from __future__ import annotations

import gc
import json
import sys
import textwrap
import time
from pathlib import Path

import pytest

from aci import graders, rules
from aci.errors import ACIError
from aci.graders import GRADERS, NAMES, SPEC_HELP, Score, grade, grader_for, parse_spec
from aci.graders.answers import Choice
from tests.openai_stub import OpenAIStub

DATA = Path(__file__).parent / "data"


def task(**gold) -> dict:
    return {"id": "t", "type": "x", "subtype": None, "messages": [{"role": "user", "content": "question?"}],
            "gold": gold, "grader": None, "meta": {}}


SOLUTION = "def add(a, b):\n    return a + b\n"
GREP = textwrap.dedent("""
    import json, sys
    d = json.load(sys.stdin)
    ok = d["task"]["gold"]["answer"] in d["response"]
    print(json.dumps({"score": 1 if ok else 0, "reason": "found" if ok else "missing"}))
""")

# (spec, task) pairs covering every grader family; each must accept its gold and reject its corruption.
SAMPLES = {
    "final-answer-int": ("final-answer", task(answer="42")),
    "final-answer-money": ("final-answer", task(answer="$1,234.50")),
    "final-answer-text": ("final-answer", task(answer="Paris")),
    "last-number": ("last-number", task(answer="1,234")),
    "last-number-decimal": ("last-number", task(answer="-0.25")),
    "choice": ("choice", task(answer="B")),
    "choice-last-letter": ("choice", task(answer="D")),
    "choice-wide": ({"type": "choice", "letters": "ABCDEFGHIJ"}, task(answer="J")),
    "unit-tests": ("unit-tests", task(answer=SOLUTION, tests="assert add(2, 3) == 5\nassert add(-1, 1) == 0")),
    "tool-call": ("tool-call", task(tool_calls=[{"name": "get_order", "arguments": {"order_id": "#W42", "n": 2}},
                                                {"name": "cancel", "arguments": {"reason": "no longer needed"}}])),
    "tool-call-no-args": ("tool-call", task(tool_calls=[{"name": "list_orders", "arguments": {}}])),
    "tool-call-bool": ("tool-call", task(tool_calls=[{"name": "set", "arguments": {"on": True}}])),
    "regex": ({"type": "regex", "pattern": r"\b42\b"}, task(answer="The answer is 42.")),
    "python": ("python:aci_grader_fixtures:contains_gold", task(answer="blue")),
    "python-tools": ("python:aci_grader_fixtures:first_tool_name", task(tool_calls=[{"name": "f", "arguments": {"a": 1}}])),
    "command": ({"type": "command", "command": [sys.executable, "-c", GREP]}, task(answer="needle")),
}


@pytest.fixture(autouse=True)
def fixtures_module(tmp_path, monkeypatch):
    """A grader module `aci_grader_fixtures` in the workdir (the current directory), as an agent's own grader
    module would be: a python grader finds it there and runs it in the sandbox."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "aci_grader_fixtures.py").write_text(textwrap.dedent("""
        def contains_gold(task, response):
            return 1.0 if task["gold"]["answer"] in response else 0.0

        def first_tool_name(task, response, tool_calls):
            names = [c["function"]["name"] for c in tool_calls or []]
            want = task["gold"]["tool_calls"][0]["name"]
            return (1.0, "right tool") if names[:1] == [want] and tool_calls[0]["function"]["arguments"] == \\
                '{"a": 1}' else (0.0, f"tools {names}")

        def out_of_range(task, response):
            return 1.5

        def not_a_number(task, response):
            return "yes"

        def raises(task, response):
            raise RuntimeError("grader bug")

        def as_dict(task, response):
            return {"score": 0.25, "reason": "quarter"}
    """))
    yield
    graders._CACHE.clear()  # the python graders' workers end with their graders
    gc.collect()


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_gold_scores_one_and_corruption_zero(name):
    spec, t = SAMPLES[name]
    g = grader_for(spec)
    good = g.score(t, *g.gold(t))
    bad_response, bad_calls = g.corrupt(t)
    bad = g.score(t, bad_response, bad_calls)
    assert good.score == 1, good.reason
    assert bad.score == 0, (bad_response, bad_calls, bad.reason)
    assert good.reason and bad.reason


def test_every_named_grader_is_covered():
    covered = {parse_spec(spec)["type"] for spec, _ in SAMPLES.values()} | {"judge"}
    assert {n.split(":")[0] for n in NAMES} == covered


def test_the_registry_is_what_the_classes_say():
    """What other modules read off a grader class holds: a name alone builds it unless the class gives a
    minimal spec (then that spec builds it and the name alone is refused with how to write it); the help
    text names every grader; only graders that just read the response are inline."""
    for name, cls in GRADERS.items():
        if cls.minimal_spec is None and cls.written is None:
            assert type(grader_for(name, unsafe_grader=True)) is cls
        else:
            with pytest.raises(ACIError, match="needs"):
                grader_for(name)
        if cls.minimal_spec is not None:
            assert type(grader_for(cls.minimal_spec)) is cls
        assert (cls.written or name) in SPEC_HELP
    assert {n for n, cls in GRADERS.items() if cls.inline} == {"final-answer", "last-number", "choice", "regex",
                                                               "tool-call"}


def test_final_answer_normalisation_and_malformed():
    t = task(answer="1234")
    for ok in ["ANSWER: 1234", "ANSWER: 1,234", "answer: $1,234.00", "Work...\nANSWER: 1234.\n",
               "ANSWER: 1\nlater, corrected:\nANSWER: 1234", "**Answer**: 1234"]:
        assert grade(t, ok, default="final-answer").score == 1, ok
    assert grade(task(answer="42"), "ANSWER: 42.0", default="final-answer").score == 1
    assert grade(task(answer="Paris"), "ANSWER:  paris ", default="final-answer").score == 1
    wrong = grade(t, "ANSWER: 1235", default="final-answer")
    assert wrong.score == 0 and "1235" in wrong.reason
    for malformed in ["", "1234", "ANSWER:", "\x00\x01", "ANSWER 1234"]:
        s = grade(t, malformed, default="final-answer")
        assert s.score == 0 and s.reason, malformed
    assert grader_for("final-answer").score(t, None).score == 0  # not text at all
    exact = {"type": "final-answer", "normalize": False}
    assert grade(task(answer="Paris"), "ANSWER: paris", default=exact).score == 0
    custom = {"type": "final-answer", "pattern": r"####\s*(\S+)", "template": "#### {answer}"}
    g = grader_for(custom)
    assert g.gold(t) == ("#### 1234", None)
    assert g.score(t, "so #### 1,234").score == 1 and g.score(t, "ANSWER: 1234").score == 0
    with pytest.raises(ACIError, match="capturing group"):
        grader_for({"type": "final-answer", "pattern": "ANSWER"})
    with pytest.raises(ACIError, match="unknown normalize"):
        grader_for({"type": "final-answer", "normalize": ["upper"]})


def test_last_number():
    t = task(answer="1234")
    assert grade(t, "First 12, then the total is $1,234.", default="last-number").score == 1
    assert grade(t, "1234 at first, but really 1233", default="last-number").score == 0
    assert grade(t, "no digits here", default="last-number").reason == "no number in the response"
    with pytest.raises(ACIError, match="numeric gold.answer"):
        grade(task(answer="Paris"), "x", default="last-number")


def test_choice():
    t = task(answer="C")
    for ok in ["ANSWER: C", "Reasoning...\nANSWER: C", "Final answer: C", "**ANSWER: C**"]:
        assert grade(t, ok, default="choice").score == 1, ok
    assert grade(t, "ANSWER: A", default="choice").score == 0
    s = grade(t, "It could be anything", default="choice")
    assert s.score == 0 and "no choice letter" in s.reason
    assert grade(t, "ANSWER: Z", default="choice").score == 0  # not among A-D: no letter
    assert "no choice letter" in grade(t, "Answer: a dog would say C", default="choice").reason
    assert grader_for("choice").corrupt(task(answer="D"))[0] == "ANSWER: A"
    with pytest.raises(ACIError, match="letter"):
        grade(task(answer="42"), "A", default="choice")


def test_choice_reads_the_letter_the_evaluation_reads():
    """GPQA's evaluation (inspect_ai's multiple_choice) reads the first `ANSWER:` line, not the last, and
    reads `ANSWER: (C)`, `ANSWER: c` or a lone `C` as no answer: the grader agrees on every reply that
    inspect_ai 0.3.150 itself scored (tests/data/inspect_choice_cases.json)."""
    cases = json.loads((DATA / "inspect_choice_cases.json").read_text())["cases"]
    assert len(cases) >= 30
    for case in cases:
        assert Choice.extract(case["response"], "ABCD") == case["letter"], case["response"]
    first_wins = "ANSWER: B\nOn reflection the right one is C.\nANSWER: C"
    assert grade(task(answer="B"), first_wins, default="choice").score == 1
    assert grade(task(answer="C"), first_wins, default="choice").score == 0


def test_unit_tests_results_and_malformed_code():
    t = task(answer=SOLUTION, tests="assert add(2, 3) == 5")
    g = grader_for("unit-tests")
    assert g.score(t, f"Here:\n```python\n{SOLUTION}```\nDone.").score == 1
    assert g.score(t, SOLUTION).score == 1  # unfenced code is taken whole
    wrong = g.score(t, "def add(a, b):\n    return a - b\n")
    assert wrong.score == 0 and "AssertionError" in wrong.reason
    syntax = g.score(t, "def add(a, b) return")
    assert syntax.score == 0 and "SyntaxError" in syntax.reason
    assert g.score(t, "").score == 0
    with pytest.raises(ACIError, match="gold.tests"):
        g.score(task(answer=SOLUTION), SOLUTION)


def test_unit_tests_kill_a_runaway_solution_at_the_time_limit():
    g = grader_for({"type": "unit-tests", "timeout": 1.0})
    t = task(answer=SOLUTION, tests="assert add(1, 1) == 2")
    start = time.monotonic()
    s = g.score(t, "while True:\n    pass\n")
    elapsed = time.monotonic() - start
    assert s.score == 0 and "timeout" in s.reason
    assert 1.0 <= elapsed < 1.0 + 5, elapsed


def test_unit_tests_kill_forked_children_too(tmp_path):
    marker = tmp_path / "child-alive"
    code = textwrap.dedent(f"""
        import os, time
        if os.fork() == 0:
            time.sleep(1)
            open({str(marker)!r}, "w").write("still here")
            os._exit(0)
        while True:
            pass
    """)
    s = grader_for({"type": "unit-tests", "timeout": 0.5}).score(task(answer="x", tests="pass"), code)
    assert s.score == 0
    time.sleep(1.5)
    assert not marker.exists()  # the whole process group went down at the limit


# Responses a reward-hacking policy finds: each would pass a grader that reads only the exit status.
# All define a wrong `add`, so only a grader fooled into skipping or ignoring the tests scores them 1.
HACKS = {
    "sys.exit(0)": "def add(a, b):\n    return 0\nimport sys\nsys.exit(0)\n",
    "os._exit(0)": "def add(a, b):\n    return 0\nimport os\nos._exit(0)\n",
    "atexit os._exit": "import atexit, os\natexit.register(lambda: os._exit(0))\ndef add(a, b):\n    return 0\n",
    "SystemExit from atexit": "import atexit, sys\ndef bye():\n    sys.stderr.flush()\n    raise SystemExit(0)\n"
                              "atexit.register(bye)\nsys.excepthook = lambda *a: None\ndef add(a, b):\n    return 0\n",
    "patched builtins": "import builtins\nbuiltins.abs = lambda x: 0\ndef add(a, b):\n    return 0\n",
    "shadowed builtin": "abs = lambda x: 0\ndef add(a, b):\n    return 0\n",
    "tests deleted": "import os, sys\nfor f in os.listdir('.'):\n    if f.endswith('.py'):\n        os.remove(f)\n"
                     "def add(a, b):\n    return 0\nsys.exit(0)\n",
    "trace hook ends the tests": "import sys\ndef add(a, b):\n    return 0\ndef tracer(frame, event, arg):\n"
                                 "    if event == 'line' and frame.f_lineno > 9:\n        raise SystemExit(0)\n"
                                 "    return tracer\nsys.settrace(tracer)\nsys._getframe().f_trace = tracer\n",
}


@pytest.mark.parametrize("hack", sorted(HACKS))
def test_unit_tests_need_proof_that_every_test_ran(hack):
    t = task(answer=SOLUTION, tests="assert abs(add(2, 3) - 5) < 1e-9\nassert add(-1, 1) == 0")
    g = grader_for("unit-tests")
    assert g.score(t, SOLUTION).score == 1
    s = g.score(t, HACKS[hack])
    assert s.score == 0, s.reason


def test_unit_tests_stop_an_endless_print_at_the_output_limit():
    g = grader_for({"type": "unit-tests", "timeout": 30})
    start = time.monotonic()
    s = g.score(task(answer="x", tests="pass"), "while True:\n    print('x' * 100_000)\n")
    assert s.score == 0 and "output limit" in s.reason, s.reason
    assert time.monotonic() - start < 15  # ended by the file-size limit, not by the 30 s clock


def _harness_processes() -> int:
    from pathlib import Path

    n = 0
    for p in Path("/proc").iterdir():
        try:
            n += p.name.isdigit() and b"aci_harness.py" in (p / "cmdline").read_bytes()
        except OSError:
            continue
    return n


def _isolation_available() -> bool:
    """Whether this kernel lets the harness make its PID and network namespaces (root, or user namespaces)."""
    import subprocess

    probe = "from aci.graders import harness; import sys; sys.exit(0 if harness.isolate() else 1)"
    return subprocess.run([sys.executable, "-c", probe]).returncode == 0


@pytest.mark.parametrize("escape", [False, True], ids=["fork-bomb", "fork-bomb-in-own-session"])
def test_unit_tests_bound_a_fork_bomb_and_leave_nothing_behind(escape):
    import threading

    if escape and not _isolation_available():
        pytest.skip("no PID namespace here: a process that left the group is bounded but outlives the grade")
    bomb = textwrap.dedent(f"""
        import os, time
        if {escape} and os.fork() == 0:
            os.setsid()
        while True:
            try:
                os.fork()
            except OSError:
                time.sleep(0.01)
    """)
    peak, done = [0], threading.Event()

    def watch():
        while not done.is_set():
            peak[0] = max(peak[0], _harness_processes())
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        s = grader_for({"type": "unit-tests", "timeout": 2, "max_processes": 32}).score(task(answer="x", tests="pass"), bomb)
    finally:
        done.set()
        watcher.join()
    assert s.score == 0 and "timeout" in s.reason
    assert 4 <= peak[0] <= 32 + 2, peak[0]  # the bomb ran, up to the process limit (plus the harness and init)
    time.sleep(0.3)
    assert _harness_processes() == 0


def test_unit_tests_have_no_network():
    import socket

    if not _isolation_available():
        pytest.skip("no network namespace available to this user on this kernel")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(0.5)
        port = server.getsockname()[1]
        leak = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'x')\n" + SOLUTION
        s = grader_for("unit-tests").score(task(answer=SOLUTION, tests="assert add(1, 1) == 2"), leak)
        with pytest.raises(TimeoutError):
            server.accept()
    assert s.score == 0 and ("Network is unreachable" in s.reason or "Connection refused" in s.reason), s.reason


def test_unit_tests_memory_limit():
    g = grader_for({"type": "unit-tests", "memory_mb": 256})
    s = g.score(task(answer="x", tests="pass"), "blob = bytearray(1024 * 1024 * 1024)\n")
    assert s.score == 0 and "memory" in s.reason.lower()


def test_tool_call_parsing_and_comparison():
    t = task(tool_calls=[{"name": "get_order", "arguments": {"order_id": "#W1", "qty": 2}}])
    g = grader_for("tool-call")
    openai = [{"id": "c1", "type": "function",
               "function": {"name": "get_order", "arguments": "{\"qty\": 2.0, \"order_id\": \"#W1\"}"}}]
    assert g.score(t, "", openai).score == 1  # structured calls win; 2 == 2.0; key order free
    hermes = 'Sure.\n<tool_call>\n{"name": "get_order", "arguments": {"order_id": "#W1", "qty": 2}}\n</tool_call>'
    assert g.score(t, hermes).score == 1
    assert g.score(t, '<tool_call>{"name": "get_order", "arguments": "{\\"order_id\\": \\"#W1\\", \\"qty\\": 2}"}'
                      '</tool_call>').score == 1  # arguments as a JSON string
    assert g.score(t, hermes.replace("#W1", "#W2")).score == 0
    assert "expected 'get_order'" in g.score(t, hermes.replace('"get_order"', '"get_user"')).reason
    assert "2 tool call(s)" in g.score(t, hermes + "\n" + hermes).reason
    assert g.score(t, "I will look it up.").score == 0
    broken = g.score(t, '<tool_call>{"name": "get_order", "arguments": {"order_id": </tool_call>')
    assert broken.score == 0 and "malformed" in broken.reason
    assert g.score(t, "", [{"function": {"name": "get_order", "arguments": "not json"}}]).score == 0
    assert g.score(t, "", [42]).score == 0
    flag = task(tool_calls=[{"name": "set", "arguments": {"on": True}}])
    assert g.score(flag, "", [{"name": "set", "arguments": {"on": 1}}]).score == 0  # true is not 1
    two = task(tool_calls=[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {}}])
    swapped = [{"name": "b", "arguments": {}}, {"name": "a", "arguments": {}}]
    assert g.score(two, "", swapped).score == 0
    assert grader_for({"type": "tool-call", "ordered": False}).score(two, "", swapped).score == 1
    with pytest.raises(ACIError, match="gold.tool_calls"):
        g.score(task(answer="x"), hermes)


def test_regex():
    g = grader_for({"type": "regex", "pattern": r"^yes\b", "ignorecase": True})
    t = task(answer="Yes, it is.")
    assert g.score(t, "YES indeed").score == 1 and g.score(t, "no").score == 0
    full = grader_for({"type": "regex", "pattern": r"\d+", "fullmatch": True, "example": "12"})
    assert full.score(t, " 12 ").score == 1 and full.score(t, "12 apples").score == 0
    assert full.gold(t)[0] == "12"
    everything = grader_for({"type": "regex", "pattern": ".*"})
    assert everything.score(t, everything.corrupt(t)[0]).score == 1  # verify-task rejects such a grader
    with pytest.raises(ACIError, match="invalid regular expression"):
        grader_for({"type": "regex", "pattern": "("})
    with pytest.raises(ACIError, match="needs a `pattern`"):
        grader_for("regex")


def test_python_function_results_and_failures(tmp_path):
    t = task(answer="blue")
    assert grade(t, "it is blue", default="python:aci_grader_fixtures:contains_gold").score == 1
    quarter = grade(t, "x", default="python:aci_grader_fixtures:as_dict")
    assert quarter.score == 0.25 and quarter.reason.startswith("quarter")
    for fn, why in [("out_of_range", "outside [0, 1]"), ("not_a_number", "not a score"), ("raises", "grader bug")]:
        s = grade(t, "x", default=f"python:aci_grader_fixtures:{fn}")
        assert s.score == 0 and why in s.reason, s
    (tmp_path / "my_grader.py").write_text("def score(task, response):\n    return (0.5, 'half')\n")
    half = grader_for("python:my_grader.py:score", workdir=tmp_path).score(t, "x")
    assert half.score == 0.5 and half.reason.startswith("half")
    assert grader_for({"type": "python", "function": "my_grader:score"}, workdir=tmp_path).score(t, "x").score == 0.5
    with pytest.raises(ACIError, match="could not be loaded: ModuleNotFoundError"):
        grader_for("python:no_such_module_here:fn")
    with pytest.raises(ACIError, match="no function 'nope'"):
        grader_for("python:aci_grader_fixtures:nope")
    for spec in ("python", {"type": "python"}, {"type": "python", "function": 3}):  # were a KeyError, a crash
        with pytest.raises(ACIError, match="python grader needs a function"):
            grader_for(spec)


def test_command_results_and_failures(tmp_path):
    t = task(answer="needle")
    script = tmp_path / "grade.py"
    script.write_text(GREP)
    g = grader_for({"type": "command", "command": f"{sys.executable} grade.py"}, workdir=tmp_path)
    found, missing = g.score(t, "a needle here"), g.score(t, "hay")
    assert (found.score, missing.score) == (1, 0) and found.reason.startswith("found")
    assert missing.reason.startswith("missing")

    def run(code: str, **opts) -> Score:
        return grader_for({"type": "command", "command": [sys.executable, "-c", code], **opts}).score(t, "r")

    assert run("print('log line'); print(0.75)").score == 0.75  # last line is the score
    assert run("print('maybe')").score == 0 and "not a number" in run("print('maybe')").reason
    assert "exited 3" in run("import sys; sys.stderr.write('boom'); sys.exit(3)").reason
    assert "outside" in run("print(2)").reason
    assert "printed no score" in run("pass").reason
    start = time.monotonic()
    slow = run("import time; time.sleep(30)", timeout=0.5)
    assert slow.score == 0 and "timed out" in slow.reason and time.monotonic() - start < 10
    missing = grader_for({"type": "command", "command": "/no/such/binary"}).score(t, "r")
    assert missing.score == 0 and "could not start" in missing.reason
    with pytest.raises(ACIError, match="needs `command`"):
        grader_for("command")


def test_judge_against_a_local_openai_server():
    replies = [
        '{"score": 1, "reason": "correct"}',
        'Thinking...\n```json\n{"score": 0.5, "reason": "partly"}\n```',
        "<think>hmm {not json}</think>I cannot decide.",
        '{"score": 3, "reason": "too high"}',
        '{"score": "high"}',
        {"status": 500, "body": "overloaded"},
        {"content": None},
    ]
    t = task(answer="Paris", claims=["Paris is the capital of France"])
    with OpenAIStub(replies) as stub:
        g = grader_for({"type": "judge", "endpoint": stub.url, "model": "judge-1", "rubric": "Is it Paris?"})
        results = [g.score(t, "It is Paris.") for _ in replies]
        assert [r.score for r in results] == [1, 0.5, 0, 0, 0, 0, 0]
        assert results[0].reason == "judge: correct"
        assert "no JSON score" in results[2].reason and "outside" in results[3].reason
        assert "HTTP 500" in results[5].reason
        sent = stub.requests[0]
        assert sent["model"] == "judge-1" and sent["temperature"] == 0
        prompt = sent["messages"][1]["content"]
        assert "Is it Paris?" in prompt and "It is Paris." in prompt and "question?" in prompt
        assert "Paris is the capital of France" in prompt
        scaled = grader_for({"type": "judge", "endpoint": stub.url + "/chat/completions", "model": "j", "scale": 10})
        stub.replies = ['{"score": 7}']
        assert scaled.score(t, "x").score == pytest.approx(0.7)
        url = stub.url
    down = grader_for({"type": "judge", "endpoint": url, "model": "j", "timeout": 2}).score(t, "x")
    assert down.score == 0 and "judge request failed" in down.reason


def test_judge_ignores_proxy_variables(workdir):
    """verify-task over MCP with http_proxy set: the loopback judge is asked directly, the proxy never."""
    import asyncio
    import socket

    from tests.conftest import mcp_client

    judged = {"id": "j", "type": "qa", "messages": [{"role": "user", "content": "Capital of France?"}],
              "gold": {"answer": "Paris"}}
    with socket.socket() as proxy, OpenAIStub(lambda body: '{"score": 1}' if "RESPONSE:\nParis" in
                                              body["messages"][1]["content"] else '{"score": 0}') as stub:
        proxy.bind(("127.0.0.1", 0))
        proxy.listen()
        proxy.settimeout(0.2)
        url = f"http://127.0.0.1:{proxy.getsockname()[1]}"
        judged["grader"] = {"type": "judge", "endpoint": stub.url, "model": "judge", "timeout": 5}
        (workdir / "t.jsonl").write_text(json.dumps(judged) + "\n")

        async def go():
            env = {"http_proxy": url, "HTTP_PROXY": url, "no_proxy": "", "NO_PROXY": ""}
            async with mcp_client(workdir, env=env) as c:
                return await c.call_tool("verify-task", {"tasks": "t.jsonl", "method": "B", "workers": 1})

        r = asyncio.run(go())
        assert not r.is_error, r.content
        with pytest.raises(TimeoutError):
            proxy.accept()
        assert len(stub.requests) == 2  # the gold and its corruption, both judged directly
    assert r.structured_content["kept"] == 1, r.structured_content


def test_judge_host_check_under_posttrainbench_rules():
    strict = rules.load("posttrainbench")

    def check(host: str) -> None:
        strict.check_host(host, judge=True)

    with pytest.raises(ACIError) as err:
        grader_for({"type": "judge", "endpoint": "https://api.openai.com/v1", "model": "gpt"}, check_host=check)
    assert err.value.rule == "no-hosted-llm"
    assert grader_for({"type": "judge", "endpoint": "http://localhost:9/v1", "model": "m"}, check_host=check)
    with pytest.raises(ACIError, match="must be an http"):
        grader_for({"type": "judge", "endpoint": "ftp://x", "model": "m"})
    with pytest.raises(ACIError, match="needs `endpoint` and `model`"):
        grader_for("judge")


def test_grade_uses_the_task_grader_then_the_default():
    t = {**task(answer="7"), "grader": "last-number"}
    assert grade(t, "it is 7", default="final-answer").score == 1  # the task's own grader wins
    assert grade(task(answer="7"), "ANSWER: 7", default='{"type": "final-answer"}').score == 1
    with pytest.raises(ACIError, match="names no grader"):
        grade(task(answer="7"), "7")
    with pytest.raises(ACIError, match="unknown grader 'nope'"):
        grader_for("nope")
    with pytest.raises(ACIError, match="not valid JSON"):
        grader_for("{broken")
    with pytest.raises(ValueError):
        Score(score=1.5, reason="x")
    assert json.loads(Score.of(1, "a\n  b").model_dump_json()) == {"score": 1.0, "reason": "a b"}


# -- issue 33: graders named by data rows are data; every grader has a time limit --------------------------
def test_a_task_row_may_name_only_graders_that_run_no_program(tmp_path):
    """`grade` (rollouts, GRPO rewards, dev-set evaluation) refuses a row's own `command` or `python:` grader
    before building it: the command does not run, the module is not imported. The list a row may name is
    the registry's (`Grader.from_rows`), and the same programs given by the caller still grade."""
    touched = tmp_path / "touched"
    imported = tmp_path / "imported"
    module = tmp_path / "evil.py"
    module.write_text(f"open({str(imported)!r}, 'w').write('x')\ndef f(task, response):\n    return 1.0\n")
    rows = {"command": {"type": "command", "command": ["touch", str(touched)]},
            "python": f"python:{module}:f", "python-object": {"type": "python", "function": "evil:f"}}
    for kind, spec in rows.items():
        row = {**task(answer="x"), "id": f"row-{kind}", "grader": spec}
        with pytest.raises(ACIError, match=f"task 'row-{kind}' names the grader '{kind.split('-')[0]}', which runs "
                                           f"a program; a task row may name only"):
            grade(row, "x", workdir=tmp_path)
    assert not touched.exists() and not imported.exists()
    assert set(graders.ROW_GRADERS) == {n for n, g in GRADERS.items() if g.from_rows}  # another test may reorder
    assert {"final-answer", "regex", "tool-call", "unit-tests"} <= set(graders.ROW_GRADERS)
    assert not {"python", "command"} & set(graders.ROW_GRADERS)
    # given by the caller (--grader, the run card), a command grades, in the sandbox
    caller = {"type": "command", "command": [sys.executable, "-c", "print(1)"]}
    assert grade(task(answer="x"), "x", default=caller, workdir=tmp_path).score == 1


def test_a_task_row_cannot_send_a_key_from_the_environment_to_its_own_judge(tmp_path, monkeypatch):
    """A row may name a judge (its host passes the rules' check), but not `api_key_env`: a dataset naming its
    own endpoint and the variable of your key would send the key there. The caller's judge may name it."""
    import http.server
    import threading

    seen = []

    class Catch(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (the standard library's name)
            seen.append(self.headers.get("Authorization"))
            self.send_response(500)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Catch)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("MY_SECRET_KEY", "sk-not-for-rows")
    spec = {"type": "judge", "endpoint": f"http://127.0.0.1:{server.server_port}/v1", "model": "m",
            "api_key_env": "MY_SECRET_KEY"}
    try:
        with pytest.raises(ACIError, match=r"task 'row-judge' sets api_key_env in its judge grader, which only "
                                           r"--grader or the run card's grader may set"):
            grade({**task(answer="x"), "id": "row-judge", "grader": spec}, "x", workdir=tmp_path)
        assert seen == []
        graded = grade(task(answer="x"), "x", default=spec, workdir=tmp_path)  # the caller's own judge
        assert graded.score == 0 and seen == ["Bearer sk-not-for-rows"]
    finally:
        server.shutdown()


def test_grader_programs_run_in_the_sandbox_and_see_only_their_files(workdir):
    """A python grader runs in a sandboxed worker (not in this process), as a non-root uid where we are root,
    without network, seeing of the workdir only its own module; what it prints cannot forge a score."""
    import os

    from aci.graders.code import sandbox

    (workdir / "secret.txt").write_text("s3cret")
    (workdir / "spy.py").write_text(textwrap.dedent("""
        import os, socket
        def f(task, response):
            print('{"value": 1}')  # a forged reply on stdout
            try:
                socket.create_connection(("127.0.0.1", 9), timeout=1)
                net = "reached"
            except OSError as e:
                net = type(e).__name__
            return 0.0, f"uid={os.getuid()} files={sorted(os.listdir('.'))} net={net}"
    """))
    s = grade(task(answer="x"), "r", default="python:spy:f", workdir=workdir)
    assert s.score == 0, s
    assert "aci_grader_fixtures" not in sys.modules and "spy" not in sys.modules  # never imported here
    assert "'spy.py'" in s.reason and "secret.txt" not in s.reason and "net=reached" not in s.reason, s
    if os.geteuid() == 0:
        assert "uid=0 " not in s.reason, s
    box = sandbox()
    assert (box.note in s.reason) if box.note else "sandbox:" not in s.reason


def test_a_python_grader_worker_outlives_no_time_limit_and_follows_edits(workdir):
    """Each call has the time limit; a call past it kills the worker and the next call starts a fresh one;
    an edit to the module counts at the next score; a module outside the allowed roots is refused."""
    import os

    (workdir / "g.py").write_text("import time\ndef f(task, response):\n    if response == 'slow':\n"
                                  "        time.sleep(60)\n    return 1.0, 'first'\n")
    g = grader_for({"type": "python", "function": "g.py:f", "timeout": 1}, workdir=workdir)
    assert g.score(task(), "r").reason.startswith("first")
    again = grader_for({"type": "python", "function": "g.py:f", "timeout": 1}, workdir=workdir,
                       check_host=lambda host: None)  # the rollout passes a new check per score
    assert again is g  # the same worker, not a sandbox start per score
    start = time.monotonic()
    slow = g.score(task(), "slow")
    assert slow.score == 0 and "timed out after 1 s (its time limit)" in slow.reason
    assert time.monotonic() - start < 5
    assert g.score(task(), "r").score == 1
    (workdir / "g.py").write_text("def f(task, response):\n    return 0.5, 'edited'\n")
    assert g.score(task(), "r").reason.startswith("edited")
    outside = Path(os.path.realpath(workdir)).parent / f"{workdir.name}-outside.py"
    outside.write_text("def f(task, response):\n    return 1.0\n")
    try:
        (workdir / "link.py").symlink_to(outside)
        for spec in ("python:link.py:f", {"type": "command", "command": [sys.executable, "link.py"]}):
            with pytest.raises(ACIError, match="outside the allowed roots"):
                grader_for(spec, workdir=workdir)
    finally:
        outside.unlink()


def test_a_command_grader_sees_only_the_files_it_names(workdir):
    (workdir / "secret.txt").write_text("s3cret")
    (workdir / "ls.py").write_text("import os\nprint(0, file=open(os.devnull, 'w'))\n"
                                   "import json\nprint(json.dumps({'score': 0, 'reason': str(sorted(os.listdir('.')))}))\n")
    s = grade(task(answer="x"), "r", default={"type": "command", "command": f"{sys.executable} ls.py"},
              workdir=workdir)
    assert "'ls.py'" in s.reason and "secret.txt" not in s.reason, s


REDOS = "(a|aa)+$"


@pytest.mark.parametrize("spec", [{"type": "regex", "pattern": REDOS},
                                  {"type": "regex", "pattern": REDOS, "fullmatch": True},
                                  {"type": "final-answer", "pattern": f"({REDOS})"}])
def test_a_runaway_pattern_scores_zero_at_its_time_limit(spec):
    """`(a|aa)+$` on 40 `a`s and a `!` took about 50 s per call under `re`; now 0 with the limit named."""
    start = time.monotonic()
    s = grader_for(spec).score(task(answer="x"), "a" * 40 + "!")
    assert time.monotonic() - start < 5
    assert s.score == 0 and "time limit" in s.reason, s


def test_the_built_in_patterns_hold_on_long_model_output():
    """The default final-answer pattern is quadratic on a long line of spaces and the number check was
    cubic on a long run of digits (20,000 digits and an `x` took 20 s): bounded now, and each such reply
    scores 0, named."""
    for spec, reply in [("final-answer", "ANSWER: a" + " " * 200_000 + "b"),
                        ("final-answer", "ANSWER: " + "1" * 200_000 + "x"),
                        ("last-number", "1" * 200_000 + "x"), ("choice", ("answer:" + "a" * 50 + "_") * 20_000)]:
        start = time.monotonic()
        s = grader_for(spec).score(task(answer="B" if spec == "choice" else "7"), reply)
        assert time.monotonic() - start < 5, spec
        assert s.score == 0, (spec, s)


@pytest.mark.parametrize("options", [{"timeout": float("inf")}, {"timeout": 1e9}, {"timeout": 0}, {"timeout": "soon"},
                                     {"memory_mb": "lots"}])
def test_a_spec_cannot_lift_a_time_limit_or_crash_the_build(options):
    """A row's unit-tests or judge options, or the caller's program grader's: a named error, never no limit
    (`inf` was an OverflowError, `"soon"` a ValueError out of `verify-task`)."""
    for kind in ("unit-tests", "command", "python", *(["judge"] if "timeout" in options else [])):
        spec = {"type": kind, "endpoint": "http://127.0.0.1:9/v1", "model": "m", "command": "true",
                "function": "aci_grader_fixtures:contains_gold", **options}
        with pytest.raises(ACIError, match="timeout must be a number|memory_mb|not of the kind"):
            grader_for(spec)
