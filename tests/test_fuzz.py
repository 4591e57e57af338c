"""Random and malformed arguments to every registered tool, over the real stdio MCP server.

Every call must come back, soon, as a structured error with a reason or a valid result; no call may crash
(an error the server answers as unexpected), and the server must keep serving. The harness iterates the
registry, so each new tool is covered without touching this file.

Hostile paths (`test_tool_survives_hostile_paths`) go to every field that takes text: NUL bytes, characters
beyond the BMP (surrogate pairs in the JSON), very long names, a FIFO, links leading outside the roots or
in a loop, a file whose one line is megabytes long, a folder holding a file whose name is not UTF-8, and
system paths. A lone surrogate cannot be sent: the SDK's client refuses to encode one, and the server's
transport drops a message holding one as invalid JSON before any tool sees it.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import typing

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aci import registry
from tests.conftest import mcp_client

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8,
)


def _arguments(t: registry.Tool):
    fields = {}
    for name, f in t.input.model_fields.items():
        values = json_values
        if typing.get_origin(f.annotation) is typing.Literal:
            values = st.sampled_from(typing.get_args(f.annotation)) | json_values
        fields[name] = values
    known = st.fixed_dictionaries({}, optional=fields)
    junk = st.dictionaries(st.text(min_size=1, max_size=10), json_values, max_size=3)
    return st.one_of(known, st.builds(lambda a, b: {**b, **a}, known, junk))


def _takes_text(annotation) -> bool:
    return annotation is str or str in typing.get_args(annotation)


SECRET = "fuzz-secret-outside-the-roots"
HOSTILE = ("fifo.jsonl", "link-out.jsonl", "loop.jsonl", "dangling.jsonl", "huge-line.jsonl", "checkpoint-linked",
           "odd-names", "odd-names/", "state/journal.jsonl", "state", "/etc/shadow", "/proc/self/environ", "/dev/zero",
           "../outside.jsonl", "~/.ssh/id_rsa", "a" * 300, "a/" * 200, "", ".", "/")


SWEEP = ("fifo.jsonl", "link-out.jsonl", "loop.jsonl", "dangling.jsonl", "huge-line.jsonl", "checkpoint-linked",
         "odd-names", ".", "/etc/shadow", "a" * 300)  # what `_sweep` tries in every text field


def _hostile_files(workdir, outside) -> None:
    """What the hostile paths name, laid out in the fuzz server's working directory."""
    (outside / "secret.json").write_text(json.dumps({"prompt": SECRET, "completion": SECRET}) + "\n")
    os.mkfifo(workdir / "fifo.jsonl")
    (workdir / "link-out.jsonl").symlink_to(outside / "secret.json")
    (workdir / "loop.jsonl").symlink_to(workdir / "loop2.jsonl")
    (workdir / "loop2.jsonl").symlink_to(workdir / "loop.jsonl")
    (workdir / "dangling.jsonl").symlink_to(workdir / "missing.jsonl")
    (workdir / "huge-line.jsonl").write_text(json.dumps({"prompt": "p " * (1 << 19), "completion": "c"}))  # no newline
    ck = workdir / "checkpoint-linked"
    ck.mkdir()
    (ck / "config.json").write_text(json.dumps({"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}))
    (ck / "tokenizer.json").symlink_to(outside / "secret.json")
    (workdir / "plain.jsonl").write_text('{"prompt": "q", "completion": "a"}\n')
    odd = workdir / "odd-names"
    odd.mkdir()
    (odd / "data.jsonl").write_text('{"prompt": "q", "completion": "a"}\n')
    with open(os.path.join(os.fsencode(odd), b"bad-\xff.jsonl"), "w") as f:
        f.write('{"prompt": "q", "completion": "a"}\n')


def _paths():
    names = st.sampled_from(HOSTILE)
    astral = st.text(st.characters(min_codepoint=0x10000, max_codepoint=0x10FFFF), min_size=1, max_size=6)
    return st.one_of(
        names,
        st.builds(lambda a, b: f"{a}\0{b}", st.text(max_size=6), st.text(max_size=6)),
        astral,
        st.builds(lambda n, tail: os.path.join(n, tail), names, st.text(max_size=8) | astral),
        st.builds(lambda n: f"{n}.jsonl", astral),
    )


def _path_arguments(t: registry.Tool):
    """Arguments whose text fields hold hostile paths (lists of them for list fields); the fields a tool
    requires are always there, so the call gets past validation to the paths."""
    required, optional = {}, {}
    for name, f in t.input.model_fields.items():
        if typing.get_origin(f.annotation) is typing.Literal:
            values = st.sampled_from(typing.get_args(f.annotation))
        elif _takes_text(f.annotation):
            values = _paths() if typing.get_origin(f.annotation) is not list else st.lists(_paths(), max_size=2)
        else:
            continue
        (required if f.is_required() else optional)[name] = values
    return st.fixed_dictionaries(required, optional=optional)


def _sweep(t: registry.Tool) -> list[dict]:
    """Each hostile name in each text field in turn (the tool's actions taken in rotation; a field the tool
    requires holds a plain data file meanwhile): the cases a random draw may miss."""
    model = t.input.model_fields
    actions = typing.get_args(model["action"].annotation) if "action" in model else (None,)
    texts = [n for n, f in model.items() if _takes_text(f.annotation)]
    plain = {n: "plain.jsonl" for n in texts if model[n].is_required()}
    out = []
    for i, field in enumerate(texts):
        for j, name in enumerate(SWEEP):
            action = actions[(i + j) % len(actions)]
            value = [name] if typing.get_origin(model[field].annotation) is list else name
            out.append({**plain, **({"action": action} if action else {}), field: value})
    return out


def _check_answer(name: str, r) -> None:
    if r.is_error:
        text = r.content[0].text
        # A readable reason follows the prefix; a crash would be the bare "Error executing tool X", or an
        # error the server answers as unexpected (a bug in aci, with its type).
        assert text.startswith(f"Error executing tool {name}: ") and "Traceback" not in text, text
        assert "an unexpected error in aci" not in text, text
    else:
        assert isinstance(r.structured_content, dict) and "run" in r.structured_content


class _Session:
    """One server for the whole test, driven from a background event loop."""

    def __init__(self, workdir):
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.stop = None
        self.client = None
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.task = asyncio.run_coroutine_threadsafe(self._hold(workdir), self.loop)
        assert self.ready.wait(60), "server did not start"

    async def _hold(self, workdir):
        self.stop = asyncio.Event()
        async with mcp_client(workdir, env={"ACI_ROOTS": ""}) as c:
            self.client = c
            self.ready.set()
            await self.stop.wait()

    def call(self, name, args, timeout: float = 120):
        return asyncio.run_coroutine_threadsafe(self.client.call_tool(name, args), self.loop).result(timeout)

    def close(self):
        self.loop.call_soon_threadsafe(self.stop.set)
        self.task.result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    wd = tmp_path_factory.mktemp("fuzz")
    _hostile_files(wd, tmp_path_factory.mktemp("fuzz-outside"))
    s = _Session(wd)
    s.workdir = wd
    # A strict run card, so nothing random can reach a non-loopback host.
    r = s.call("plan", {"action": "init", "base_model": "base", "benchmark": "toy", "profile": "posttrainbench",
                        "eval_command": "python evaluate.py --model-path {model_path} --json-output-file {output}"})
    assert not r.is_error, r.content
    yield s
    s.close()


@pytest.mark.parametrize("name", sorted(registry.tools()))
def test_tool_survives_random_arguments(session, name):
    t = registry.get(name)

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(args=_arguments(t))
    def check(args):
        _check_answer(name, session.call(name, args))

    check()
    alive = session.call("status", {})
    assert not alive.is_error


@pytest.mark.parametrize("name", sorted(registry.tools()))
def test_tool_survives_hostile_paths(session, name):
    """Every text field given hostile paths: an answer within 30 s (a FIFO opened for reading never
    answered), with a reason, and nothing from outside the roots copied into the working directory."""
    t = registry.get(name)

    @settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(args=_path_arguments(t))
    def check(args):
        _check_answer(name, session.call(name, args, timeout=30))

    for args in _sweep(t):
        _check_answer(name, session.call(name, args, timeout=30))
    check()
    assert not session.call("status", {}).is_error
    for p in session.workdir.rglob("*"):
        if p.is_file() and not p.is_symlink() and p.stat().st_size < (1 << 20):
            assert SECRET.encode() not in p.read_bytes(), f"{p} holds a file from outside the roots"
