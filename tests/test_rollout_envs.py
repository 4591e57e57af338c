"""Tool environments and parsing: schemas from type hints and docstrings, explicit TOOLS kept verbatim,
module conventions and their errors, hermes tool-call parsing, malformed endpoint replies."""

from __future__ import annotations

import asyncio
import json

import pytest

from aci.errors import ACIError
from aci.rollout import hermes
from aci.rollout.endpoint import EndpointPolicy
from aci.rollout.envs import PythonTools, parse_docstring
from aci.rollout.policy import PolicyError, Settings
from tests.openai_stub import OpenAIStub

FUNCS = '''
from typing import Literal

__all__ = ["search", "convert"]


def search(query: str, limit: int = 5, kind: Literal["web", "news"] = "web") -> list:
    """Search the index.

    Args:
        query: what to look for,
            in plain words
        limit (int): how many hits
    """
    return [query] * limit


def convert(amount: float, to: str) -> str:
    """Convert money.

    :param amount: the amount
    :param to: ISO currency code
    """
    return f"{amount} {to}"


def helper_not_listed(x: int) -> int:
    return x
'''

EXPLICIT = '''
TOOLS = [{"name": "lookup", "description": "Look up — verbatim.", "parameters": {"type": "object",
          "properties": {"id": {"type": "string", "enum": ["a", "b"], "default": null}}}}]


def lookup(id=None):
    return {"id": id, "found": True}
'''.replace("null", "None")


def test_schemas_from_hints_and_docstrings(workdir):
    (workdir / "pkg_tools").mkdir()
    (workdir / "pkg_tools" / "__init__.py").write_text("")
    (workdir / "pkg_tools" / "mod.py").write_text(FUNCS)
    src = PythonTools("pkg_tools.mod", workdir)  # a dotted module found in the workdir
    by = {t["function"]["name"]: t["function"] for t in src.tools}
    assert list(by) == ["search", "convert"]  # __all__ decides, in its order
    s = by["search"]
    assert s["description"] == "Search the index."
    assert s["parameters"] == {
        "properties": {"query": {"description": "what to look for, in plain words", "type": "string"},
                       "limit": {"default": 5, "description": "how many hits", "type": "integer"},
                       "kind": {"default": "web", "enum": ["web", "news"], "type": "string"}},
        "required": ["query"], "type": "object"}
    assert by["convert"]["parameters"]["properties"]["to"]["description"] == "ISO currency code"

    async def go():
        async with src.trajectory() as env:
            return await env.call("search", {"query": "x", "limit": 2}, 5), await env.call("convert", {"amount": 1}, 5)

    ok, bad = asyncio.run(go())
    assert ok.output == '["x", "x"]' and ok.error is None
    assert bad.error.startswith("tool convert raised TypeError")


def test_explicit_tools_are_sent_verbatim(workdir):
    (workdir / "explicit.py").write_text(EXPLICIT)
    src = PythonTools("explicit.py", workdir)
    assert src.tools == [{"type": "function", "function": {
        "name": "lookup", "description": "Look up — verbatim.",
        "parameters": {"type": "object", "properties": {"id": {"type": "string", "enum": ["a", "b"], "default": None}}}}}]
    assert src.describe()["fresh_per_trajectory"] is False


@pytest.mark.parametrize("source, message", [
    ("TOOLS = [{'name': 'ghost'}]\n", "TOOLS names 'ghost' but no function"),
    ("X = 1\n", "defines no tools"),
    ("def make_env():\n    raise OSError('no db')\n", "make_env() raised OSError: no db"),
    ("import nope_not_a_module\n", "failed to import: ModuleNotFoundError"),
    ("def f(*args) -> int:\n    return 1\n", "*args/**kwargs cannot be described"),
])
def test_bad_tool_modules_are_clear_errors(workdir, source, message):
    (workdir / "bad.py").write_text(source)
    with pytest.raises(ACIError, match=message.replace("(", r"\(").replace(")", r"\)").replace("*", r"\*")):
        PythonTools("bad.py", workdir)
    with pytest.raises(ACIError, match="does not exist"):
        PythonTools("missing.py", workdir)


def test_docstring_sections():
    desc, args = parse_docstring("""Do it.

    More words.

    Args:
        a: first
        b (list[int]): second,
            continued
    Returns:
        nothing
    """)
    assert desc == "Do it.\n\nMore words." and args == {"a": "first", "b": "second, continued"}


def test_hermes_parsing_keeps_malformed_blocks_visible():
    text = ('Let me add. <tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>'
            '<tool_call>{"name": "add", "arguments": "{\\"a\\": 2}"}</tool_call>'
            ' then <tool_call>{oops}</tool_call> and <tool_call>{"arguments": {}}</tool_call><tool_call>{"name": "x"')
    content, calls, bad = hermes.parse(text, "t")
    assert [(c.id, c.name, c.arguments) for c in calls] == [("t_0", "add", {"a": 1}), ("t_1", "add", {"a": 2})]
    assert content.startswith("Let me add.  then <tool_call>{oops}</tool_call>")
    assert [b.split(":")[0] for b in bad] == ["<tool_call> block not valid JSON (Expecting property name enclosed in double quotes at char 1)",
                                              "<tool_call> block without a string name",
                                              "<tool_call> block not closed by </tool_call>"]


def test_settings_per_trial_and_body():
    s = Settings(temperature=0.7, seed=10, extra={"top_k": 20})
    assert s.for_trial(1).seed == 10 and s.for_trial(3).seed == 12
    assert s.body() == {"temperature": 0.7, "seed": 10, "top_k": 20}
    assert Settings().for_trial(2).body() == {}


def test_endpoint_reply_that_is_not_a_chat_completion_is_a_policy_error():
    async def go(url):
        p = EndpointPolicy(url, "m", retries=0)
        try:
            return await p.complete(p.request([{"role": "user", "content": "hi"}], None, Settings()))
        finally:
            await p.aclose()

    with OpenAIStub([{"status": 200, "body": "<html>not json</html>"}]) as stub, pytest.raises(PolicyError) as e:
        asyncio.run(go(stub.url))
    assert "not a chat completion" in str(e.value) and e.value.attempts == 1
    with OpenAIStub([{"status": 400, "body": json.dumps({"error": "bad tools"})}]) as stub, pytest.raises(PolicyError) as e:
        asyncio.run(go(stub.url))
    assert "HTTP 400" in str(e.value) and e.value.attempts == 1  # a 4xx is not retried
