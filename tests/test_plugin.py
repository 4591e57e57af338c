"""The repository as a Claude Code plugin, checked by the real `claude` CLI (tests/agent_clis.py): the
manifest validates, Claude Code loads the entry skill and the six skills, the Stop hook (from
hooks/hooks.json, which it loads by itself: Claude Code 2.0 refused a manifest that declared it again, and
then dropped the plugin's MCP server) and the MCP server; in a session against a recording model API
the model sees the ten tools and the skills, and the Stop hook sends the agent back to work. The hook
command and the server also run here directly, for their decisions and answers."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from aci import bundle, registry
from aci.context import Context
from tests import agent_clis
from tests.agent_clis import RecordingAPI, cli
from tests.eval_helpers import copy_model, eval_command

ROOT = Path(__file__).resolve().parent.parent
BIN = str(Path(sys.executable).parent)
SKILLS = sorted(["posttrain", *bundle.skill_names()])


def load(rel: str) -> dict:
    return json.loads((ROOT / rel).read_text())


def test_claude_plugin_validate_passes(tmp_path):
    r = agent_clis.run([cli("current", "claude"), "plugin", "validate", str(ROOT)], home=tmp_path, cwd=ROOT,
                       lane="current")
    assert r.returncode == 0 and "Validation passed" in r.stdout, r.stdout + r.stderr
    assert "✘" not in r.stdout and "ignored at runtime" not in r.stdout and "drops this server" not in r.stdout
    assert 'hooks: Stop command "aci guard stop"' in r.stdout and "mcpServers: posttrain-aci" in r.stdout
    for name in SKILLS:
        assert f"skills: posttrain-aci:{name}\n" in r.stdout + "\n", name


def test_claude_loads_each_component_once(tmp_path):
    r = agent_clis.run([cli("current", "claude"), "--plugin-dir", str(ROOT), "plugin", "details", "posttrain-aci"],
                       home=tmp_path, cwd=tmp_path, lane="current")
    assert f"Skills ({len(SKILLS)})  {', '.join(SKILLS)}" in r.stdout, r.stdout + r.stderr
    assert "Hooks (1)  Stop" in r.stdout and "MCP servers (1)  posttrain-aci" in r.stdout


def write_timer(workdir: Path, text: str) -> None:
    (workdir / "timer.sh").write_text(f"#!/bin/bash\necho {shlex.quote(text)}\n")


def strict_session(tmp_path: Path) -> tuple[Path, Path]:
    """A work folder with 9 hours on its timer and a posttrainbench run card, and an empty home for the CLI."""
    wd, home = tmp_path / "work", tmp_path / "home"
    wd.mkdir()
    home.mkdir()
    write_timer(wd, "Remaining time (hours:minutes):\n9:00")
    registry.call("plan", {"action": "init", "base_model": "m", "benchmark": "b", "profile": "posttrainbench",
                           "eval_command": eval_command()}, Context(workdir=wd))
    return wd, home


@pytest.mark.parametrize("lane", ["current", "harness"])
def test_a_session_sees_the_tools_and_skills_and_the_stop_hook_keeps_it_working(lane, tmp_path):
    wd, home = strict_session(tmp_path)

    def time_up(n: int) -> None:  # the hook blocked once; now let the session end
        if n == 2:
            write_timer(wd, "Timer expired!")

    with RecordingAPI(replies=2, on_reply=time_up) as api:
        r = agent_clis.run([cli(lane, "claude"), "--debug", "--plugin-dir", str(ROOT), "--print", "--model", "test-model",
                            "hello"], home=home, cwd=wd, lane=lane, timeout=240,
                           ANTHROPIC_BASE_URL=api.url, ANTHROPIC_API_KEY="test-key", PATH=f"{BIN}:{os.environ['PATH']}",
                           **agent_clis.MCP_UP_FRONT)
        turns = api.main_requests("test-model")
    tools = [t["name"] for t in turns[0]["tools"]]
    ours = sorted(t.rsplit("__", 1)[1] for t in tools if "posttrain-aci" in t)
    assert ours == ["contamination", "eval-checkpoint", "finalize", "histogram", "log-state", "plan",
                    "run-trajectory", "status", "train", "verify-task"], (tools, r.stderr[-2000:])
    seen = json.dumps(turns[0])  # the skills list, in a system reminder; the root skill named by its front matter
    for name in ["posttrain", *bundle.skill_names()]:
        assert re.search(rf"posttrain-aci:{re.escape(name)}(\\n|:)", seen), name
    assert len(turns) >= 2 and "Do not stop:" in json.dumps(turns[1]) and "never-stop-early" in json.dumps(turns[1])
    debug = "".join(p.read_text() for p in (home / ".claude" / "debug").glob("*.txt"))
    assert "Loaded hooks from standard location for plugin posttrain-aci" in debug or "Read hooks.json" in debug
    assert "Duplicate hooks file" not in debug and "Plugin loading errors" not in debug  # 2.0 logged both


@pytest.mark.parametrize("lane", ["current", "harness"])
def test_a_session_whose_model_api_keeps_failing_ends_before_the_deadline(lane, tmp_path):
    """After one answer every request fails (HTTP 400). Claude Code 2.1 runs StopFailure hooks instead of Stop
    after an API error, so the session ends at once, after at most BLOCK_CAP blocks (Claude Code 2.0 ended each
    failed turn and ran the Stop hook again, about once a second: the guard's own cap, tests/test_rules_clock.py,
    covers that loop)."""
    from aci import guard
    from aci.state import State

    wd, home = strict_session(tmp_path)
    with RecordingAPI(replies=1) as api:
        r = agent_clis.run([cli(lane, "claude"), "--plugin-dir", str(ROOT), "--print", "--model", "test-model", "hello"],
                           home=home, cwd=wd, lane=lane, timeout=180, ANTHROPIC_BASE_URL=api.url,
                           ANTHROPIC_API_KEY="test-key", PATH=f"{BIN}:{os.environ['PATH']}")
    assert "API Error: 400" in r.stdout, r.stdout + r.stderr[-2000:]
    feedback = [b for b in api.main_requests("test-model") if "Do not stop:" in json.dumps(b["messages"][-1])]
    guarded = [e for e in State(wd / "state").journal() if e["kind"] == "guard"]
    assert 1 <= len(feedback) <= 2 * guard.BLOCK_CAP and guarded == []


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
    assert proc.returncode == 0, proc.stderr
    return proc.returncode, proc.stdout.strip()


def test_stop_hook_blocks_while_time_remains_even_past_a_met_target(tmp_path, tiny_model):
    assert stop_hook(tmp_path) == (0, "")  # no run card: never trap an unrelated session

    write_timer(tmp_path, "Remaining time (hours:minutes):\n9:00")
    copy_model(tiny_model, tmp_path / "base", 0.6)
    ctx = Context(workdir=tmp_path)
    registry.call("plan", {"action": "init", "base_model": "base", "benchmark": "toy", "profile": "posttrainbench",
                           "eval_command": eval_command(), "targets": [{"metric": "accuracy", "value": 0.5}]}, ctx)
    rc, out = stop_hook(tmp_path)
    assert rc == 0
    decision = json.loads(out)
    assert set(decision) == {"decision", "reason"}  # the shape Claude Code acts on (the session test above)
    assert decision["decision"] == "block" and "never-stop-early" in decision["reason"]
    assert "8h" in decision["reason"] and "no final_model" in decision["reason"]

    registry.call("eval-checkpoint", {"action": "evaluate", "checkpoint": "base", "limit": 40}, Context(workdir=tmp_path))
    promoted = registry.call("eval-checkpoint", {"action": "promote", "checkpoint": "base"}, Context(workdir=tmp_path))
    assert promoted.promotion.promoted and promoted.run.best.score >= 0.5
    rc, out = stop_hook(tmp_path)  # the target is met: a milestone, the run goes on to a stretch goal
    assert rc == 0 and json.loads(out)["decision"] == "block" and "a met target is a milestone" in out


def test_stop_hook_asks_for_finalize_in_the_reserve_once_and_passes_when_time_is_up(tmp_path):
    """And once stopping is fine it asks, once, for a last message that says why the run ends."""
    write_timer(tmp_path, "Remaining time (hours:minutes):\n9:00")
    registry.call("plan", {"action": "init", "base_model": "m", "benchmark": "b", "profile": "posttrainbench",
                           "eval_command": eval_command()}, Context(workdir=tmp_path))
    assert json.loads(stop_hook(tmp_path)[1])["decision"] == "block"
    write_timer(tmp_path, "Timer expired!")
    rc, out = stop_hook(tmp_path)  # time is up: once, say why the run ends in the last message
    assert rc == 0 and json.loads(out)["reason"].startswith("Stopping is fine now: the deadline has passed")
    assert stop_hook(tmp_path) == (0, "")
    write_timer(tmp_path, "Remaining time (hours:minutes):\n0:30")  # inside the 45-minute final reserve
    rc, out = stop_hook(tmp_path)  # once more, until aci finalize has passed
    assert rc == 0 and "run aci finalize" in json.loads(out)["reason"]
    again = {"session_id": "s1", "cwd": str(tmp_path), "hook_event_name": "Stop", "stop_hook_active": True}
    assert stop_hook(tmp_path, again) == (0, "")  # it never traps a session it already sent back
