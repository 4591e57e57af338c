"""The exact tool-call grader: the calls made equal gold.tool_calls (names and arguments).

Calls come either as structured `tool_calls` (OpenAI-style `{"function": {"name", "arguments"}}`, with
arguments as an object or a JSON string, or plain `{"name", "arguments"}`), or, when none are given,
parsed from hermes-format text: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`.
Arguments compare as JSON values with `1 == 1.0` but `true != 1`.
"""

from __future__ import annotations

import json
from typing import Any

from aci import hermes
from aci.errors import ACIError
from aci.graders.base import Grader, Response, Score, gold, short, wrong_number


def parse_hermes(text: str) -> list[dict]:
    """Tool calls written as hermes `<tool_call>` JSON blocks; raises ValueError on a broken block."""
    calls = []
    for n, block in enumerate(hermes.blocks(text), 1):
        if block.error:
            raise ValueError(f"tool call {n} is not valid JSON ({block.error.msg}): {short(block.body, 80)}")
        if not isinstance(block.value, dict):
            raise ValueError(f"tool call {n} is not a JSON object")
        calls.append(block.value)
    return calls


def openai_calls(calls: list[dict]) -> list[dict]:
    return [{"type": "function", "function": {"name": c["name"], "arguments": json.dumps(c["arguments"],
                                                                                         ensure_ascii=False)}}
            for c in calls]


def same_value(a: Any, b: Any) -> bool:
    """JSON equality where bools are not numbers and 1 == 1.0."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def broken_value(value: Any) -> Any:
    """A different value of the same JSON type (the 'broken first argument')."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        bumped = value + 1
        return bumped if bumped != value else -value
    if isinstance(value, str):
        return wrong_number(value) or (value + "_x" if value else "x")
    if isinstance(value, list):
        return [*value, broken_value(value[-1]) if value else "x"]
    if isinstance(value, dict):
        return {**value, "_x": 1}
    return "x"


class ToolCall(Grader):
    """The response's tool calls equal gold.tool_calls: same count, names and arguments.

    Options: `ordered` (default true; false compares as a multiset, for parallel calls).
    """

    name = "tool-call"
    inline = True
    from_rows = True

    def _gold(self, task) -> list[dict]:
        from aci.tasks import plain_tool_calls  # here, not at import: the registry is read at server start

        calls = gold(task).get("tool_calls")
        if not isinstance(calls, list) or not calls:
            raise ACIError(f"task {task.get('id')!r}: grader tool-call needs gold.tool_calls")
        return plain_tool_calls(calls, f"task {task.get('id')!r}: gold.tool_calls")

    def _score(self, task, response, tool_calls):
        from aci.tasks import plain_tool_calls

        want = self._gold(task)
        try:
            got = plain_tool_calls(tool_calls if tool_calls else parse_hermes(response), "response")
        except (ValueError, ACIError) as e:
            return Score.of(0, f"malformed tool call: {e}")
        if not got:
            return Score.of(0, f"no tool call; expected {want[0]['name']}")
        if len(got) != len(want):
            return Score.of(0, f"{len(got)} tool call(s), expected {len(want)}")
        if self.option("ordered", True):
            for i, (g, w) in enumerate(zip(got, want, strict=True), 1):
                if g["name"] != w["name"]:
                    return Score.of(0, f"call {i}: tool {g['name']!r}, expected {w['name']!r}")
                if not same_value(g["arguments"], w["arguments"]):
                    return Score.of(0, f"call {i} ({w['name']}): arguments {short(json.dumps(g['arguments']), 80)} "
                                       f"!= gold {short(json.dumps(w['arguments']), 80)}")
        else:
            rest = list(want)
            for g in got:
                match = next((w for w in rest if w["name"] == g["name"]
                              and same_value(g["arguments"], w["arguments"])), None)
                if match is None:
                    return Score.of(0, f"call {g['name']}({short(json.dumps(g['arguments']), 80)}) matches no gold call")
                rest.remove(match)
        return Score.of(1, f"{len(want)} tool call(s) match")

    def gold(self, task) -> Response:
        calls = self._gold(task)
        return hermes.render(calls), openai_calls(calls)

    def corrupt(self, task) -> Response:
        calls = [dict(c) for c in self._gold(task)]
        first = calls[0]
        if first["arguments"]:
            key = next(iter(first["arguments"]))
            first["arguments"] = {**first["arguments"], key: broken_value(first["arguments"][key])}
        else:
            first["name"] = first["name"] + "_x"
        return hermes.render(calls), openai_calls(calls)
