"""Hermes-style tool calls in text: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`.

The one reader of this format, used by the tool-call grader, the rollout's local policy and the
histogram's tool-call counts. Each caller decides what a broken block means for it (an error, a
recorded malformed call, an `<unparsed>` bin), so this module only finds and decodes the blocks.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)


@dataclass(frozen=True)
class Block:
    start: int
    end: int
    body: str  # stripped
    closed: bool  # False when the text ends before </tool_call>
    value: Any = None  # the decoded JSON, when `error` is None
    error: json.JSONDecodeError | None = None


def blocks(text: str) -> Iterator[Block]:
    """Every `<tool_call>` block in order, decoded where its body is valid JSON."""
    for m in _BLOCK.finditer(text):
        body = m.group(1).strip()
        try:
            value, error = json.loads(body), None
        except json.JSONDecodeError as e:
            value, error = None, e
        yield Block(m.start(), m.end(), body, m.group(0).endswith("</tool_call>"), value, error)


def render(calls: list[dict]) -> str:
    return "\n".join(f"<tool_call>\n{json.dumps(c, ensure_ascii=False)}\n</tool_call>" for c in calls)
