"""Task records and SFT samples: schemas, streaming loaders, adapters, file:line errors, record texts."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from aci import tasks
from aci.errors import ACIError

ROOT = Path(__file__).resolve().parent.parent


def write(path: Path, text: str | bytes) -> Path:
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def jsonl(path: Path, rows: list) -> Path:
    return write(path, "".join(json.dumps(r) + "\n" for r in rows))


def test_committed_schema_files_match_the_python_definition(tmp_path):
    for written in tasks.write_schemas(tmp_path):
        committed = ROOT / "state" / "schemas" / written.name
        assert committed.read_text() == written.read_text(), f"regenerate with python -m aci.tasks ({written.name})"
    for schema in tasks.SCHEMAS.values():
        jsonschema.Draft202012Validator.check_schema(schema)


def test_jsonl_is_streamed_so_rows_before_a_broken_line_arrive(tmp_path):
    f = write(tmp_path / "d.jsonl", '{"question": "a", "answer": "1"}\n\n{"question": "b", "answer": "2"}\n{broken\n')
    rows = tasks.read_rows(f)
    assert next(rows) == (1, {"question": "a", "answer": "1"})
    assert next(rows) == (3, {"question": "b", "answer": "2"})  # blank line 2 skipped, numbering kept
    with pytest.raises(ACIError, match=rf"{f}:4: broken JSON"):
        next(rows)


def test_json_array_rows_carry_their_starting_line(tmp_path):
    f = write(tmp_path / "a.json", '[\n  {"question": "q1", "answer": 1},\n\n  {"question": "q2",\n   "answer": 2}\n]\n')
    assert [n for n, _ in tasks.read_rows(f)] == [2, 4]
    assert [t["gold"]["answer"] for t in tasks.load_tasks(f)] == ["1", "2"]


def test_bom_is_accepted(tmp_path):
    f = write(tmp_path / "bom.jsonl", b'\xef\xbb\xbf{"question": "q", "answer": "a"}\n')
    assert [r for _, r in tasks.read_rows(f)] == [{"question": "q", "answer": "a"}]


MALFORMED = {
    "broken-json": ('{"question": "q", "answer": "1"}\n{"question": "q2", \n', 2, "broken JSON"),
    "not-an-object": ('{"question": "q", "answer": "1"}\n[1, 2]\n', 2, "expected a JSON object"),
    "wrong-type": ('{"id": "x", "type": "qa", "messages": [{"role": "user", "content": 5}], "gold": {}}\n', 1,
                   "field messages.0.content: 5 is not of type 'string'"),
    "wrong-type-adapted": ('{"question": "q", "answer": "1"}\n{"question": ["q"], "answer": "1"}\n', 2,
                           "field question: expected a string or number"),
    "missing-field": ('{"id": "x", "type": "qa", "gold": {"answer": "1"}}\n', 1, "'messages' is a required property"),
    "unknown-shape": ('{"question": "q", "answer": "1"}\n{"foo": 1}\n', 2, "no known record shape (keys: foo)"),
    "empty": ("", 1, "empty file"),
    "blank-lines": ("\n  \n\n", 1, "empty file"),
    "nul-bytes": (b'{"question": "q", "answer": "1"}\n\x00\x00\x01\x02\n', 2, "binary data"),
    "invalid-utf8": (b'{"question": "q", "answer": "1"}\n{"question": "\xff\xfe", "answer": "1"}\n', 2,
                     "not valid UTF-8"),
    "binary-array": (b'[{"question": "q", "answer": "1"},\n\x00]', 2, "binary data"),
    "array-broken": ('[\n{"question": "q", "answer": "1"},\n{"question": }\n]', 3, "broken JSON"),
    "array-empty": ("[\n]\n", 1, "empty JSON array"),
    "array-trailing": ('[{"question": "q", "answer": "1"}]\n{"x": 1}\n', 2, "unexpected data after"),
    "duplicate-id": ('{"id": "a", "question": "q", "answer": "1"}\n{"id": "a", "question": "r", "answer": "2"}\n', 2,
                     "duplicate task id 'a' (first at line 1)"),
    "bad-grader": ('{"id": "x", "type": "qa", "messages": [{"role": "user", "content": "q"}], "gold": {}, '
                   '"grader": 3}\n', 1, "field grader"),
    "typo-in-record": ('{"id": "x", "type": "qa", "messages": [{"role": "user", "content": "q"}], "gold": {}, '
                       '"grder": "regex"}\n', 1, "'grder' was unexpected"),
    "bad-role": ('{"id": "x", "type": "qa", "messages": [{"role": "bot", "content": "q"}], "gold": {}}\n', 1,
                 "field messages.0.role"),
}


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_malformed_input_names_file_and_line(tmp_path, kind):
    text, line, message = MALFORMED[kind]
    f = write(tmp_path / ("data.json" if kind.startswith(("array", "binary-array")) else "data.jsonl"), text)
    with pytest.raises(ACIError) as err:
        list(tasks.load_tasks(f))
    assert f"{f}:{line}:" in str(err.value)
    assert message in str(err.value)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(ACIError, match="does not exist"):
        list(tasks.read_rows(tmp_path / "nope.jsonl"))
    with pytest.raises(ACIError, match="is a directory"):
        list(tasks.read_rows(tmp_path))


def test_adapters_for_common_shapes(tmp_path):
    f = jsonl(tmp_path / "mix.jsonl", [
        {"question": "Janet has 3 apples and buys 2. How many?", "answer": "3 + 2 = 5\n#### 1,005", "source": "gsm8k"},
        {"question": "Find the remainder.", "answer": 204},  # PostTrainBench AIME-style test row
        {"prompt": "Say hi", "completion": "hi there"},
        {"prompt": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2"}],
         "completion": [{"role": "assistant", "content": "4"}]},
        {"messages": [{"role": "user", "content": "weather in Oslo"},
                      {"role": "assistant", "content": None,
                       "tool_calls": [{"type": "function", "function": {"name": "get_weather",
                                                                        "arguments": "{\"city\": \"Oslo\"}"}}]}],
         "tools": [{"name": "get_weather", "parameters": {"type": "object"}}]},
        {"question": "Which is a prime?", "choices": ["4", "6", "7", "8"], "answer": 2},
        {"problem": "What is the capital of France?", "answer": "Paris", "context": "France is in Europe."},
        {"id": "t9", "type": "code", "subtype": "strings", "messages": [{"role": "user", "content": "write f"}],
         "gold": {"answer": "def f(): return 1", "tests": "assert f() == 1"}, "grader": "unit-tests", "meta": {"k": 1}},
    ])
    got = list(tasks.load_tasks(f))
    gsm, aime, hi, conv, tool, mcq, qa, code = got
    assert gsm["id"] == "mix-1" and gsm["type"] == "math" and gsm["gold"] == {"answer": "1005"}
    assert gsm["meta"] == {"source": "gsm8k", "solution": "3 + 2 = 5\n#### 1,005"}
    assert aime["type"] == "math" and aime["gold"]["answer"] == "204"
    assert aime["messages"] == [{"role": "user", "content": "Find the remainder."}]
    assert hi["messages"] == [{"role": "user", "content": "Say hi"}] and hi["gold"]["answer"] == "hi there"
    assert [m["role"] for m in conv["messages"]] == ["system", "user"] and conv["gold"]["answer"] == "4"
    assert tool["type"] == "tool-use" and tool["grader"] == "tool-call"
    assert tool["gold"]["tool_calls"] == [{"name": "get_weather", "arguments": {"city": "Oslo"}}]
    assert tool["messages"] == [{"role": "user", "content": "weather in Oslo"}]
    assert tool["tools"][0] == {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    assert mcq["type"] == "mcq" and mcq["grader"] == "choice" and mcq["gold"]["answer"] == "C"
    assert "C. 7" in mcq["messages"][0]["content"]
    assert qa["type"] == "qa" and qa["meta"]["passage"] == "France is in Europe."
    assert qa["messages"][0]["content"].startswith("France is in Europe.")
    assert code == {"id": "t9", "type": "code", "subtype": "strings", "messages": [{"role": "user", "content": "write f"}],
                    "gold": {"answer": "def f(): return 1", "tests": "assert f() == 1"}, "grader": "unit-tests",
                    "meta": {"k": 1}}
    for t in got:
        jsonschema.validate(t, tasks.TASK_SCHEMA)


def test_bad_choice_answer_is_an_error(tmp_path):
    f = jsonl(tmp_path / "c.jsonl", [{"question": "q", "choices": ["a", "b"], "answer": 5}])
    with pytest.raises(ACIError, match=rf"{f}:1: field answer: with 2 choices"):
        list(tasks.load_tasks(f))


def test_load_samples_adapts_and_requires_an_assistant_turn(tmp_path):
    f = jsonl(tmp_path / "s.jsonl", [
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}], "source": "x"},
        {"prompt": "2+2", "completion": "4"},
        {"question": "q", "answer": "#### 3"},
    ])
    samples = list(tasks.load_samples(f))
    assert samples[0]["source"] == "x"  # other columns are kept
    assert samples[1]["messages"] == [{"role": "user", "content": "2+2"}, {"role": "assistant", "content": "4"}]
    assert samples[2]["messages"][1] == {"role": "assistant", "content": "#### 3"}  # full text trains
    bad = jsonl(tmp_path / "bad.jsonl", [samples[0], {"messages": [{"role": "user", "content": "a"},
                                                                    {"role": "user", "content": "b"}]}])
    with pytest.raises(ACIError, match=rf"{bad}:2: invalid SFT sample: field messages"):
        list(tasks.load_samples(bad))
    task = jsonl(tmp_path / "t.jsonl", [{"id": "a", "type": "qa", "messages": [{"role": "user", "content": "q"}],
                                         "gold": {"answer": "a"}}])
    with pytest.raises(ACIError, match=rf"{task}:1: this is a task record"):
        list(tasks.load_samples(task))


def test_record_texts_for_each_shape(tmp_path):
    assert tasks.record_texts({"question": "What is 2+2?", "answer": "4"}) == {
        "question": "What is 2+2?", "answer": "4", "passage": ""}
    assert tasks.record_texts({"prompt": "P", "completion": "C", "passage": "Long text"}) == {
        "question": "P", "answer": "C", "passage": "Long text"}
    chat = {"messages": [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "U1"},
                         {"role": "assistant", "content": "A1"}, {"role": "user", "content": "U2"},
                         {"role": "assistant", "content": "A2"}]}
    assert tasks.record_texts(chat) == {"question": "U1\nU2", "answer": "A1\nA2", "passage": ""}
    f = jsonl(tmp_path / "g.jsonl", [{"question": "Q?", "answer": "step one\n#### 7", "context": "Ctx."}])
    task = next(tasks.load_tasks(f))
    # the full worked solution is what could leak, not just the number; the passage is not question text
    assert tasks.record_texts(task) == {"question": "Q?", "answer": "step one\n#### 7", "passage": "Ctx."}
    tool_task = {"id": "t", "type": "tool-use", "messages": [{"role": "user", "content": "do"}],
                 "gold": {"tool_calls": [{"name": "f", "arguments": {"x": 1}}]}}
    assert json.loads(tasks.record_texts(tool_task)["answer"]) == [{"name": "f", "arguments": {"x": 1}}]
