"""Task records and SFT samples: schemas, streaming loaders, adapters, file:line errors, record texts."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aci import records, tasks
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
    written = records.write_schemas(tmp_path)
    assert {"task.schema.json", "sft-sample.schema.json"} <= {p.name for p in written}
    for p in written:
        committed = ROOT / "state" / "schemas" / p.name
        assert committed.read_text() == p.read_text(), f"regenerate with python -m aci.records ({p.name})"
    for schema in tasks.SCHEMAS.values():
        jsonschema.Draft202012Validator.check_schema(schema)


def test_jsonl_is_streamed_so_rows_before_a_broken_line_arrive(tmp_path):
    f = write(tmp_path / "d.jsonl", '{"question": "a", "answer": "1"}\n\n{"question": "b", "answer": "2"}\n{broken\n')
    rows = tasks.read_rows(f)
    assert next(rows) == (1, {"question": "a", "answer": "1"})
    assert next(rows) == (3, {"question": "b", "answer": "2"})  # blank line 2 skipped, numbering kept
    with pytest.raises(ACIError, match=rf"{f}:4: broken JSON"):
        next(rows)


# Lines the C parser refuses or that only `json` reads, each read as `json.loads` reads the line
ODD_LINES = ['{"x": NaN, "y": -Infinity}', '{"big": 184467440737095516160000, "neg": -9223372036854775809}',
             '{"lone": "\\ud800 half a pair"}', '{"far": 1e400}', '   {"padded": true}   ', '{"crlf": 1}\r',
             '{"dup": 1, "dup": 2}', '{"nested": {"a": [1, 2.5, null, "\\u00e9\\ud83d\\ude00"]}}', "",
             "  \t", '{"unicode": "caf\u00e9 \u2014 \U0001f600"}']


@pytest.mark.parametrize("chunk", [16, 97, 1 << 20])
def test_jsonl_rows_read_as_json_reads_each_line(tmp_path, monkeypatch, chunk):
    """Every line reads as `json.loads` reads it and keeps its number, also where a chunk ends inside a
    row (a chunk of 16 bytes ends inside most rows) and for lines the fast parser refuses."""
    monkeypatch.setattr(tasks.rows, "CHUNK_BYTES", chunk)
    lines = [json.dumps({"id": k, "text": "word " * (k % 7), "n": k * 0.1}) for k in range(40)]
    lines[3:3] = ODD_LINES
    f = write(tmp_path / "d.jsonl", "\n".join(lines))  # the last line without its newline
    want = [(n, json.loads(line)) for n, line in enumerate(lines, 1) if line.strip()]
    got = list(tasks.read_rows(f))
    assert [n for n, _ in got] == [n for n, _ in want]
    assert json.dumps(got) == json.dumps(want)  # NaN and -0.0 compared as written, not by ==
    assert type(got[4][1]["big"]) is int and got[5][1]["lone"] == "\ud800 half a pair"


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10 ** 30), max_value=10 ** 30) | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=5), min_size=1, max_size=6),
       st.booleans())
def test_any_json_rows_read_as_json_reads_them(tmp_path_factory, rows, ascii_only):
    """Whatever the values (floats at any precision, NaN and infinities, integers past 64 bits, any
    Unicode, lone surrogates among it), a row reads as `json.loads` reads its line."""
    lines = [json.dumps(r, ensure_ascii=ascii_only) for r in rows]
    f = tmp_path_factory.mktemp("rows") / "d.jsonl"
    f.write_bytes("\n".join(lines).encode("utf-8", "surrogatepass"))
    if not ascii_only and any("\ud800" <= c <= "\udfff" for line in lines for c in line):
        with pytest.raises(ACIError, match="not valid UTF-8"):  # a surrogate written raw is not UTF-8
            list(tasks.read_rows(f))
        return
    got = [row for _, row in tasks.read_rows(f)]
    assert json.dumps(got) == json.dumps([json.loads(line) for line in lines])


@pytest.mark.parametrize("line,message", [
    ('{"a": 1,\n "b": 2}', "broken JSON"),  # a value spanning lines is broken on its first line
    ('{"a": 1} {"b": 2}', "broken JSON"),  # two objects on one line
    ('\ufeff{"a": 1}', "broken JSON"),  # a BOM is accepted on the first line only
    ('{"a": "\x00"}', "binary data"),
])
def test_jsonl_rows_refuse_what_json_lines_refuse(tmp_path, monkeypatch, line, message):
    monkeypatch.setattr(tasks.rows, "CHUNK_BYTES", 8)
    f = write(tmp_path / "d.jsonl", '{"ok": 1}\n' + line + '\n{"ok": 2}\n')
    rows = tasks.read_rows(f)
    assert next(rows) == (1, {"ok": 1})
    with pytest.raises(ACIError, match=rf"{f}:2: {message}"):
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
        {"problem": "What is the capital of France?", "answer": "Paris", "context": "France is in Europe.",
         "grader": {"type": "final-answer", "normalize": ["strip", "lower"]}},
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
    assert qa["grader"] == {"type": "final-answer", "normalize": ["strip", "lower"]}
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


def _keywords(schema) -> set[str]:
    if isinstance(schema, list):
        return set().union(*(_keywords(s) for s in schema)) if schema else set()
    if not isinstance(schema, dict):
        return set()
    found = set(schema)
    for key, value in schema.items():
        if key == "properties":
            found |= set().union(*(_keywords(v) for v in value.values()))
        elif key in ("items", "contains", "oneOf"):
            found |= _keywords(value)
    return found


def test_fast_validator_covers_every_keyword_the_schemas_use():
    for schema in tasks.SCHEMAS.values():
        assert _keywords(schema) <= tasks.FAST_KEYWORDS


# Valid records, then (in the test) one mutation with a boundary value: near misses are where a hand
# compiled validator and jsonschema could disagree.
_boundary = st.sampled_from(["", "x", "bot", "other", 0, 1, 1.5, True, None, {}, [], "{}", {"type": ""},
                             {"type": "x"}, [{}], ["c"], [1]])
_json = st.recursive(_boundary, lambda inner: st.lists(inner, max_size=2) | st.dictionaries(
    st.sampled_from(["name", "arguments", "type", "x"]), inner, max_size=2), max_leaves=4)
_call = st.fixed_dictionaries({"function": st.fixed_dictionaries(
    {"name": st.just("f"), "arguments": st.sampled_from([{}, "{}", {"a": 1}])})},
    optional={"type": st.just("function"), "id": st.just("c1")})
_message = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "tool", "system"]),
                                  "content": st.sampled_from(["hi", ""])},
                                 optional={"tool_calls": st.lists(_call, max_size=2), "name": st.just("n")})
_tool = st.fixed_dictionaries({"type": st.just("function"), "function": st.fixed_dictionaries(
    {"name": st.just("f")}, optional={"description": st.just("d"), "parameters": st.just({})})})
_gold = st.fixed_dictionaries({}, optional={
    "answer": st.just("42"), "claims": st.lists(st.just("c"), max_size=2), "tests": st.just("assert 1"),
    "tool_calls": st.lists(st.fixed_dictionaries({"name": st.just("f"), "arguments": st.just({"a": 1})}),
                           max_size=2)})
_record = st.fixed_dictionaries(
    {"id": st.just("a"), "type": st.just("qa"), "messages": st.lists(_message, min_size=1, max_size=3), "gold": _gold},
    optional={"subtype": st.sampled_from([None, "s"]), "tools": st.lists(_tool, max_size=2), "meta": st.just({}),
              "grader": st.sampled_from([None, "choice", {"type": "regex", "pattern": "x"}])})

def _paths(value):
    """Every (container, key) position in a JSON value, to mutate one of them."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        yield value, key
        yield from _paths(child)


_FULL_TASK = {
    "id": "a", "type": "tool-use", "subtype": "s",
    "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "u", "name": "n"},
                 {"role": "assistant", "content": "", "tool_calls": [
                     {"type": "function", "id": "c1", "function": {"name": "f", "arguments": "{}"}}]},
                 {"role": "tool", "content": "out", "tool_call_id": "c1"}],
    "tools": [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {}}}],
    "gold": {"answer": "42", "claims": ["c"], "tests": "assert 1",
             "tool_calls": [{"name": "f", "arguments": {"a": 1}}]},
    "grader": {"type": "regex", "pattern": "x"}, "meta": {"k": 1},
}


def test_fast_validator_agrees_with_jsonschema_on_every_single_mutation():
    """Each position of full records, replaced by each boundary value, removed, or given an extra key."""
    values = ["", "x", "bot", "function", "other", 0, 1, 1.5, True, None, {}, [], "{}", {"type": ""}, {"type": "x"},
              [{}], ["c"], [1]]
    sample = {"messages": _FULL_TASK["messages"], "tools": _FULL_TASK["tools"]}
    checked = 0
    for name, base in [("task", _FULL_TASK), ("sft-sample", sample), ("task", {**_FULL_TASK, "grader": "choice"})]:
        fast, slow = tasks.compile_schema(tasks.SCHEMAS[name]), jsonschema.Draft202012Validator(tasks.SCHEMAS[name])
        assert fast(base) and slow.is_valid(base)
        for index in range(len(list(_paths(base)))):
            for change in [*values, "remove", "add"]:
                record = copy.deepcopy(base)
                container, key = list(_paths(record))[index]
                if change == "remove" and isinstance(container, dict):
                    del container[key]
                elif change == "add":
                    target = container[key] if isinstance(container[key], dict) else container
                    if not isinstance(target, dict):
                        continue
                    target["typo"] = 1
                else:
                    container[key] = change
                assert fast(record) == slow.is_valid(record), (name, record)
                checked += 1
    assert checked > 1000


_FAST: dict = {}


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_fast_validator_agrees_with_jsonschema(data):
    """Valid records and records one mutation away from valid (changed, removed or added field)."""
    record = copy.deepcopy(data.draw(_record))  # drawn values may be shared `just` objects: never mutate them
    sample = copy.deepcopy({"messages": [*record["messages"], {"role": "assistant", "content": "ok"}], "tools": []})
    for value in (record, sample):
        spots = list(_paths(value))
        action = data.draw(st.sampled_from(["none", "change", "remove", "add"]))
        if action != "none" and spots:
            container, key = data.draw(st.sampled_from(spots))
            if action == "change":
                container[key] = data.draw(_boundary | _json)
            elif action == "remove" and isinstance(container, dict):
                del container[key]
            elif isinstance(container, dict):
                container[data.draw(st.sampled_from(["typo", "name", "x"]))] = data.draw(_json)
        for name, schema in tasks.SCHEMAS.items():
            fast = tasks.compile_schema(schema) if name not in _FAST else _FAST[name]
            _FAST[name] = fast
            assert fast(value) == jsonschema.Draft202012Validator(schema).is_valid(value), (name, value)


def test_row_shapes_and_their_texts_in_reading_order():
    chat = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "U1"},
                         {"role": "assistant", "content": "A1"}, {"role": "user", "content": "U2"},
                         {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]}]}
    rows = {
        "text": ({"text": "Plain text."}, ["Plain text."]),
        "messages": (chat, ["Be brief.", "U1", "A1", "U2", '[{"function": {"name": "f", "arguments": "{}"}}]']),
        "prompt-completion": ({"prompt": [{"role": "user", "content": "P"}], "completion": "C"}, ["P", "C"]),
        "question-answer": ({"context": "Ctx.", "question": "Q?", "choices": ["x", "y"], "answer": 1},
                            ["Ctx.", "Q?", "x", "y", "1"]),
        "task": ({"id": "t", "messages": [{"role": "user", "content": "Q?"}], "gold": {"answer": "7"},
                  "meta": {"solution": "3 + 4 = 7"}}, ["Q?", "7", "3 + 4 = 7"]),
    }
    for shape, (row, texts) in rows.items():
        assert tasks.row_shape(row, "f:1") == shape
        assert tasks.row_texts(row, "f:1") == texts
    assert tasks.to_sample({"text": "Plain text."}, "f:1") == {"text": "Plain text."}
    for bad, message in (({"text": ""}, "field text: expected non-empty text"), ({"foo": 1}, "no known record shape"),
                         ({"messages": "hi"}, "field messages: expected an array")):
        with pytest.raises(ACIError, match=f"f:3: {message}"):
            tasks.row_texts(bad, "f:3")
    with pytest.raises(ACIError, match="f:2: a `text` row is plain text"):
        tasks.to_task({"text": "Plain text."}, "f:2", "x")


def test_a_chat_row_alone_reads_as_the_general_reading_has_it():
    """`row_texts` takes a chat row (with an `id` or not) in one pass, and the contamination reader one
    holding only `messages`; a key beside it that changes nothing (an empty `meta`, `n`) sends the same
    turns down the general path, which must agree."""
    from aci.contamination.inputs import tool_text

    tool_call = [{"function": {"name": "f", "arguments": "{}"}}]
    for turns in ([{"role": "user", "content": "Q?"}, {"role": "assistant", "content": "A."}],
                  [{"role": "user", "content": ""}, {"role": "assistant", "content": "A."}],
                  [{"role": "assistant", "content": "", "tool_calls": tool_call}],
                  [{"role": "user", "content": [{"type": "text", "text": "part"}, {"type": "image"}]}],
                  [{"role": "user", "content": None}, "not a turn", {"role": "user", "content": "Q?", "name": "x"}],
                  []):
        alone, general = {"messages": turns}, {"messages": turns, "n": 1}
        assert tasks.row_texts(alone, "f:1") == tasks.row_texts({"messages": turns, "meta": {}}, "f:1"), turns
        assert tasks.row_texts({"id": "r1", **alone}, "f:1") == tasks.row_texts(alone, "f:1"), turns
        assert tool_text(alone) == tool_text(general) is None, turns
    solved = {"messages": [{"role": "user", "content": "Q?"}], "meta": {"solution": "S."}}
    assert tasks.row_texts(solved, "f:1") == ["Q?", "S."]
    assert tasks.row_texts({**solved, "gold": {"answer": "7"}}, "f:1") == ["Q?", "7", "S."]
