"""The repository as a Claude Code plugin: manifest, MCP registration and Stop hook, checked against the
shapes Claude Code documents (JSON Schemas written for this project in tests/data/), and run for real:
the registered MCP server answers and the Stop hook command blocks or lets the agent stop."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import anyio
import jsonschema
import pytest

from aci import registry
from aci.context import Context
from tests.eval_helpers import copy_model, eval_command

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
BIN = str(Path(sys.executable).parent)


def schema(name: str) -> jsonschema.protocols.Validator:
    s = json.loads((DATA / f"{name}.schema.json").read_text())
    cls = jsonschema.validators.validator_for(s)
    cls.check_schema(s)
    return cls(s, format_checker=cls.FORMAT_CHECKER)


def load(rel: str) -> dict:
    return json.loads((ROOT / rel).read_text())


def errors(validator, doc) -> list[str]:
    return [e.message for e in validator.iter_errors(doc)]


def test_files_have_the_documented_shapes():
    manifest = load(".claude-plugin/plugin.json")
    assert errors(schema("claude-plugin"), manifest) == []
    assert errors(schema("claude-hooks"), load("hooks/hooks.json")) == []
    assert errors(schema("claude-mcp"), load(".mcp.json")) == []
    # Every component path the manifest names exists at the plugin root.
    for key in ("skills", "hooks", "mcpServers"):
        value = manifest[key]
        assert isinstance(value, str) and (ROOT / value).exists(), key
    skills = sorted(p.parent.name for p in (ROOT / manifest["skills"]).glob("*/SKILL.md"))
    assert skills, "the plugin's skills folder holds no skill"
    for name in skills:
        head = (ROOT / manifest["skills"] / name / "SKILL.md").read_text().split("---")[1]
        assert f"name: {name}" in head  # the Agent Skills rule: front matter name == folder name


@pytest.mark.parametrize("name,bad", [
    ("claude-plugin", {"name": "Post Train"}),
    ("claude-plugin", {"name": "x", "version": "1.0"}),
    ("claude-plugin", {"name": "x", "skills": "skills/"}),
    ("claude-plugin", {"name": "x", "hooks": "./../hooks.json"}),
    ("claude-plugin", {"name": "x", "unknown": 1}),
    ("claude-hooks", {"hooks": {"Stopp": [{"hooks": [{"type": "command", "command": "x"}]}]}}),
    ("claude-hooks", {"hooks": {"Stop": [{"hooks": [{"type": "command"}]}]}}),
    ("claude-hooks", {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "x", "timeout": 0}]}]}}),
    ("claude-mcp", {"mcpServers": {"s": {"args": ["serve"]}}}),
    ("claude-mcp", {"mcpServers": {"s": {"command": "aci", "args": "serve"}}}),
    ("claude-stop-hook-output", {"decision": "block"}),
    ("claude-stop-hook-output", {"decision": "stop", "reason": "x"}),
])
def test_schemas_reject_what_claude_code_would_reject(name, bad):
    assert errors(schema(name), bad)


def test_registered_mcp_server_answers(tmp_path):
    from mcp import Client, StdioServerParameters

    entry = load(".mcp.json")["mcpServers"]["posttrain-aci"]
    env = {**os.environ, **entry.get("env", {}), "PATH": f"{BIN}:{os.environ['PATH']}"}
    env.pop("ACI_STATE", None)

    async def talk():
        params = StdioServerParameters(command=entry["command"], args=entry["args"], env=env, cwd=str(tmp_path))
        async with Client(params) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            status = await client.call_tool("status", {})
            return names, status

    names, status = anyio.run(talk)
    assert {"plan", "status", "train", "eval-checkpoint", "finalize", "histogram"} <= names
    assert not status.is_error and status.structured_content["state"]["has_run_card"] is False


def stop_hook(workdir: Path, payload: dict | None = None) -> tuple[int, str]:
    """Run the Stop hook's command as Claude Code does: in a shell, in the project folder, JSON on stdin."""
    groups = load("hooks/hooks.json")["hooks"]["Stop"]
    (command,) = [h["command"] for g in groups for h in g["hooks"]]
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "CLAUDE_PROJECT_DIR": str(workdir)}
    env.pop("ACI_STATE", None)
    hook = payload or {"session_id": "s1", "transcript_path": str(workdir / "t.jsonl"), "cwd": str(workdir),
                       "hook_event_name": "Stop", "stop_hook_active": False}
    proc = subprocess.run(["bash", "-c", command], input=json.dumps(hook), capture_output=True, text=True,
                          cwd=workdir, env=env, timeout=60)
    return proc.returncode, proc.stdout.strip()


def write_timer(workdir: Path, text: str) -> None:
    (workdir / "timer.sh").write_text(f"#!/bin/bash\necho {shlex.quote(text)}\n")


def test_stop_hook_blocks_while_time_remains_and_passes_when_the_target_is_met(tmp_path, tiny_model):
    assert stop_hook(tmp_path) == (0, "")  # no run card: never trap an unrelated session

    write_timer(tmp_path, "Remaining time (hours:minutes):\n9:00")
    copy_model(tiny_model, tmp_path / "base", 0.6)
    ctx = Context(workdir=tmp_path)
    registry.call("plan", {"action": "init", "base_model": "base", "benchmark": "toy", "profile": "posttrainbench",
                           "eval_command": eval_command(), "targets": [{"metric": "accuracy", "value": 0.5}]}, ctx)
    rc, out = stop_hook(tmp_path)
    assert rc == 0
    decision = json.loads(out)
    assert errors(schema("claude-stop-hook-output"), decision) == []
    assert decision["decision"] == "block" and "never-stop-early" in decision["reason"]
    assert "8h" in decision["reason"] and "no final_model" in decision["reason"]

    registry.call("eval-checkpoint", {"action": "evaluate", "checkpoint": "base", "limit": 40}, Context(workdir=tmp_path))
    promoted = registry.call("eval-checkpoint", {"action": "promote", "checkpoint": "base"}, Context(workdir=tmp_path))
    assert promoted.promotion.promoted and promoted.run.best.score >= 0.5
    assert stop_hook(tmp_path) == (0, "")  # the target is met: stopping is fine


def test_stop_hook_passes_once_time_is_up(tmp_path):
    write_timer(tmp_path, "Remaining time (hours:minutes):\n9:00")
    registry.call("plan", {"action": "init", "base_model": "m", "benchmark": "b", "profile": "posttrainbench",
                           "eval_command": eval_command()}, Context(workdir=tmp_path))
    assert json.loads(stop_hook(tmp_path)[1])["decision"] == "block"
    write_timer(tmp_path, "Timer expired!")
    assert stop_hook(tmp_path) == (0, "")
    write_timer(tmp_path, "Remaining time (hours:minutes):\n0:30")  # inside the 45-minute final reserve
    assert stop_hook(tmp_path) == (0, "")
