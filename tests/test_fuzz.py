"""Random and malformed arguments to every registered tool, over the real stdio MCP server.

Every call must come back as a structured error or a valid result, and the server must keep serving.
The harness iterates the registry, so each new tool is covered without touching this file.
"""

from __future__ import annotations

import asyncio
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

    def call(self, name, args):
        return asyncio.run_coroutine_threadsafe(self.client.call_tool(name, args), self.loop).result(120)

    def close(self):
        self.loop.call_soon_threadsafe(self.stop.set)
        self.task.result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    wd = tmp_path_factory.mktemp("fuzz")
    s = _Session(wd)
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
        r = session.call(name, args)
        if r.is_error:
            text = r.content[0].text
            # A readable reason follows the prefix; a crash would be the bare "Error executing tool X".
            assert text.startswith(f"Error executing tool {name}: ") and "Traceback" not in text, text
        else:
            assert isinstance(r.structured_content, dict) and "run" in r.structured_content

    check()
    alive = session.call("status", {})
    assert not alive.is_error
