"""The MCP `tools/list` answer is the product's API: a saved copy catches any change to it.

Names, titles, descriptions, input and output schemas and annotations are compared with
`tests/data/tools-list.json`, as the real server lists them over stdio. A deliberate change (a new
option, a better description) updates the copy on purpose:

    ACI_UPDATE_TOOLS_LIST=1 python -m pytest tests/test_tools_list.py

and the diff of that file is then part of the review.
"""

from __future__ import annotations

import asyncio
import difflib
import json
import os
from pathlib import Path

import pytest

from aci import registry
from aci.errors import ACIError
from aci.registry import ToolInput, ToolOutput, tool
from tests.conftest import mcp_client

SAVED = Path(__file__).resolve().parent / "data" / "tools-list.json"
UPDATE_ENV = "ACI_UPDATE_TOOLS_LIST"
KEYS = ("name", "title", "description", "inputSchema", "outputSchema", "annotations")


def listed(workdir: Path) -> dict[str, dict]:
    async def go():
        async with mcp_client(workdir) as c:
            return (await c.list_tools()).tools

    out = {}
    for t in asyncio.run(go()):
        raw = t.model_dump(mode="json", by_alias=True, exclude_none=True)
        out[t.name] = {k: raw[k] for k in KEYS if k in raw}
    return dict(sorted(out.items()))


def test_tools_list_matches_the_saved_copy(workdir):
    now = listed(workdir)
    text = json.dumps(now, indent=2, sort_keys=True) + "\n"
    if os.environ.get(UPDATE_ENV):
        SAVED.write_text(text)
    saved = SAVED.read_text()
    if text != saved:
        diff = "".join(difflib.unified_diff(saved.splitlines(True), text.splitlines(True), "saved", "served", n=2))
        pytest.fail(f"tools/list changed (set {UPDATE_ENV}=1 to save it on purpose):\n{diff[:6000]}")


def test_registry_refuses_a_duplicate_tool_name():
    registry.tools()
    before = dict(registry._REGISTRY)

    with pytest.raises(ACIError, match="tool 'status' is already registered by aci.tools.journal"):
        tool("status", title="again")(_another_status)
    assert registry._REGISTRY == before


def _another_status(inp: ToolInput, ctx) -> ToolOutput:
    """A second `status` from another module."""
