"""One vocabulary across tools: the same option name for the same thing everywhere, the other spelling
accepted where people type it (`aci contamination --source` was a usage error while `aci train --source`
worked), on the CLI and over MCP, and an unknown option named instead of dropped."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import click
import pytest

from aci import registry
from aci.cli import _tool_command
from aci.context import Context
from aci.errors import ACIError
from tests.conftest import mcp_client


def cli(workdir, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aci.cli", *args], cwd=workdir, capture_output=True, text=True,
                          timeout=120)


def options(tool: str) -> set[str]:
    cmd = _tool_command(tool)
    return {o for p in cmd.params if isinstance(p, click.Option) for o in p.opts}


def test_every_tool_names_a_shared_concept_the_same_way_and_takes_the_other_spellings():
    fields = {name: set(t.input.model_fields) for name, t in registry.tools().items()}
    # where the data came from: `sources` (a list) in every tool that checks it
    assert {t for t, f in fields.items() if {"source", "sources"} & f} == {"contamination", "train"}
    assert all("sources" in fields[t] for t in ("contamination", "train"))
    # the grader for tasks that name none: `grader` everywhere; the items evaluated: `limit` everywhere
    assert not any("default_grader" in f or "eval_limit" in f for f in fields.values())
    for tool in registry.tools():
        opts = options(tool)
        for alias, name in registry.get(tool).input.spellings().items():
            assert "--" + alias.replace("_", "-") in opts, (tool, alias, name)
    assert {"--source", "--sources"} <= options("contamination") and {"--source", "--sources"} <= options("train")
    assert {"--data", "--path"} <= options("histogram") and {"--path", "--data"} <= options("train")
    assert "--path" not in options("log-state")  # its `data` is structured details, not a data file
    assert {"--limit", "--eval-limit"} <= options("finalize") and "--default-grader" in options("eval-checkpoint")


def test_other_spellings_reach_the_field(workdir):
    inp = registry.get("contamination").input
    assert inp.model_validate({"path": "a", "reference": "b", "source": "openai/gsm8k"}).sources == ["openai/gsm8k"]
    assert inp.model_validate({"data": "a", "target": "b"}).path == "a"
    with pytest.raises(ValueError, match="same option"):
        inp.model_validate({"path": "a", "reference": "b", "source": "x", "sources": ["y"]})
    with pytest.raises(ACIError, match="unknown option.*sourcez"):
        registry.call("contamination", {"path": "a", "reference": "b", "sourcez": "x"}, Context(workdir=workdir))


def test_cli_accepts_both_spellings(workdir):
    rows = [{"question": f"What is {i}+1?", "answer": str(i + 1)} for i in range(5)]
    (workdir / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (workdir / "test.jsonl").write_text(json.dumps({"question": "What is 40+2?", "answer": "42"}) + "\n")
    for flag in ("--source", "--sources"):
        r = cli(workdir, "contamination", "--path", "train.jsonl", "--reference", "test.jsonl", flag, "openai/gsm8k",
                "--no-record")
        assert r.returncode == 0, r.stderr
    r = cli(workdir, "histogram", "--data", "train.jsonl", "--feature", "turns", "--no-record")
    assert r.returncode == 0 and "turns" in r.stdout and "prompt_length" not in r.stdout, r.stderr


def test_mcp_takes_other_spellings_and_names_unknown_keys(workdir):
    (workdir / "train.jsonl").write_text(json.dumps({"question": "What is 1+1?", "answer": "2"}) + "\n")

    async def go():
        async with mcp_client(workdir) as c:
            alias = await c.call_tool("histogram", {"data": "train.jsonl", "feature": "turns", "record": False})
            typo = await c.call_tool("histogram", {"path": "train.jsonl", "featurez": ["turns"], "record": False})
            return alias, typo

    alias, typo = asyncio.run(go())
    assert not alias.is_error and list(alias.structured_content["features"]) == ["turns"]
    assert typo.is_error and "unknown option(s) featurez" in typo.content[0].text
