"""`aci install` and the PostTrainBench submissions against the real agent CLIs, without any API key.

Two lanes (tests/agent_clis.py): `current`, the newest releases (Claude Code 2.1.332, Codex 0.171.0,
OpenCode 1.18.33, the MCP Inspector 2.12.0), and `harness`, the versions PostTrainBench's v1.1 images pin
(Claude Code 2.1.219, Codex 0.144.0, OpenCode 1.17.18). Each CLI is asked what it loaded through its own
commands (`claude mcp`, `codex mcp`, Codex's app-server `skills/list`, `opencode debug`); the packed
solve.sh files run as the harness runs them, the image's CLI updated to the newest by the harness's update
script before the agent starts, against a recording model API, which shows exactly what the model would
see: the MCP tools, the skills, the pointer and the prompt.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from aci import bundle
from tests import agent_clis, ptb_helpers
from tests.agent_clis import RecordingAPI, cli, tool_names
from tests.ptb_helpers import POINTER_START, Run, render_prompt

TOOLS = ["contamination", "eval-checkpoint", "finalize", "histogram", "log-state", "plan", "run-trajectory", "status",
         "train", "verify-task"]
SKILLS = ["posttrain", *bundle.skill_names()]
LANES = ["current", "harness"]


def install(agent: str, wd: Path, home: Path, *extra: str) -> None:
    r = subprocess.run([sys.executable, "-m", "aci.cli", "install", agent, "--workdir", str(wd), *extra],
                       capture_output=True, text=True, env=agent_clis.env(home))
    assert r.returncode == 0, r.stderr


@pytest.fixture
def project(tmp_path) -> tuple[Path, Path]:
    wd, home = tmp_path / "project", tmp_path / "home"
    wd.mkdir()
    home.mkdir()
    return wd, home


# -- Claude Code --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("lane", LANES)
def test_claude_mcp_list_and_get_see_the_approved_server(lane, project):
    wd, home = project
    install("claude-code", wd, home)
    agent_clis.trust_claude_project(home, wd)  # Claude Code 2.1 honours project approvals in trusted folders
    listed = agent_clis.run([cli(lane, "claude"), "mcp", "list"], home=home, cwd=wd, lane=lane)
    line = next((ln for ln in listed.stdout.splitlines() if ln.startswith("posttrain-aci:")), "")
    assert "Connected" in line and "aci.cli" in line, listed.stdout + listed.stderr
    got = agent_clis.run([cli(lane, "claude"), "mcp", "get", "posttrain-aci"], home=home, cwd=wd, lane=lane)
    assert got.returncode == 0 and "Project config" in got.stdout and "Connected" in got.stdout, got.stdout


def test_claude_asks_before_an_unapproved_project_server(project):
    """Why install approves its server: without the entry the current Claude Code leaves it pending."""
    wd, home = project
    install("claude-code", wd, home)
    agent_clis.trust_claude_project(home, wd)
    settings = wd / ".claude" / "settings.json"
    settings.write_text(json.dumps({k: v for k, v in json.loads(settings.read_text()).items()
                                    if k != "enabledMcpjsonServers"}))
    listed = agent_clis.run([cli("current", "claude"), "mcp", "list"], home=home, cwd=wd, lane="current")
    assert "Pending approval" in listed.stdout


# -- Codex ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("lane", LANES)
def test_codex_mcp_list_shows_the_server_project_scoped_and_global(lane, project):
    wd, home = project
    install("codex", wd, home)
    codex = cli(lane, "codex")
    # A project's .codex/config.toml counts once the project is trusted (what Codex's trust prompt
    # writes), or with CODEX_HOME pointing at that folder.
    (home / ".codex").mkdir()
    (home / ".codex" / "config.toml").write_text(f'[projects."{wd}"]\ntrust_level = "trusted"\n')
    for extra in ({}, {"CODEX_HOME": str(wd / ".codex")}):
        listed = agent_clis.run([codex, "mcp", "list"], home=home, cwd=wd, lane=lane, **extra)
        assert "posttrain-aci" in listed.stdout, (extra, listed.stdout + listed.stderr)
    install("codex", wd, home, "--global")
    got = agent_clis.run([codex, "mcp", "get", "posttrain-aci"], home=home, cwd=home, lane=lane, HF_HOME="/hf")
    assert "startup_timeout_sec: 60" in got.stdout and "HF_HOME=" in got.stdout, got.stdout + got.stderr


def test_codex_ignores_an_untrusted_projects_config(project):
    """Codex reads .codex/config.toml only in a trusted project (the README says so)."""
    wd, home = project
    install("codex", wd, home)
    listed = agent_clis.run([cli("current", "codex"), "mcp", "list"], home=home, cwd=wd, lane="current")
    assert "posttrain-aci" not in listed.stdout


def codex_skills(lane: str, wd: Path, home: Path) -> dict[str, str]:
    """Codex's own answer to app-server `skills/list`: skill name -> SKILL.md path."""
    requests = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"clientInfo": {"name": "t", "version": "1"}}},
                {"jsonrpc": "2.0", "method": "initialized"},
                {"jsonrpc": "2.0", "id": 2, "method": "skills/list", "params": {"cwds": [str(wd)]}}]
    proc = subprocess.Popen([cli(lane, "codex"), "app-server"], cwd=wd, env=agent_clis.env(home, lane),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        proc.stdin.write("".join(json.dumps(r) + "\n" for r in requests))
        proc.stdin.flush()
        for line in proc.stdout:
            message = json.loads(line)
            if message.get("id") == 2:
                break
    finally:
        proc.kill()
        proc.wait()
    assert "result" in message, message
    found = {}

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("name"), str) and isinstance(node.get("path"), str):
                found[node["name"]] = node["path"]
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(message["result"])
    return found


@pytest.mark.parametrize("lane", LANES)
@pytest.mark.parametrize("scope", ["project", "global"])
def test_codex_lists_every_skill_where_install_put_it(lane, scope, project):
    wd, home = project
    install("codex", wd, home, *(["--global"] if scope == "global" else []))
    skills = codex_skills(lane, wd, home)
    root = (home if scope == "global" else wd) / ".codex" / "skills"
    for name in SKILLS:
        assert skills.get(name) == str(root / name / "SKILL.md"), (name, skills)


# -- OpenCode -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("lane", LANES)
def test_opencode_reads_its_config_skills_and_server(lane, project):
    wd, home = project
    install("opencode", wd, home)
    opencode = cli(lane, "opencode")
    config = agent_clis.run([opencode, "debug", "config"], home=home, cwd=wd, lane=lane)
    entry = json.loads(config.stdout[config.stdout.index("{"):])["mcp"]["posttrain-aci"]
    assert entry["type"] == "local" and entry["command"][1:3] == ["-m", "aci.cli"]
    skills = agent_clis.run([opencode, "debug", "skill"], home=home, cwd=wd, lane=lane)
    listed = {s["name"]: s["location"] for s in json.loads(skills.stdout[skills.stdout.index("["):])}
    for name in SKILLS:
        assert listed.get(name) == str(wd / ".opencode" / "skills" / name / "SKILL.md"), (name, listed)
    servers = agent_clis.run([opencode, "mcp", "list"], home=home, cwd=wd, lane=lane)
    assert "posttrain-aci" in servers.stdout and "connected" in servers.stdout, servers.stdout + servers.stderr


# -- the MCP Inspector ------------------------------------------------------------------------------------------
def test_inspector_lists_the_tools_calls_status_and_lists_resources_and_prompts(project):
    wd, home = project
    inspector = [cli("current", "inspector"), "--cli", sys.executable, "-m", "aci.cli", "--workdir", str(wd), "serve"]

    def call(*args: str) -> dict:
        r = agent_clis.run([*inspector, *args], home=home, cwd=wd, lane="current")
        assert r.returncode == 0, r.stdout + r.stderr
        return json.loads(r.stdout)

    assert sorted(t["name"] for t in call("--method", "tools/list")["tools"]) == TOOLS
    status = call("--method", "tools/call", "--tool-name", "status")
    assert not status.get("isError") and json.loads(status["content"][0]["text"])["state"]["has_run_card"] is False
    resources = {r["uri"] for r in call("--method", "resources/list")["resources"]}
    assert {f"skill://{name}" for name in SKILLS} <= resources
    prompts = {p["name"] for p in call("--method", "prompts/list")["prompts"]}
    assert "workflow-posttrain" in prompts


# -- the packed submissions with the harness's CLIs --------------------------------------------------------------
@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> dict:
    return ptb_helpers.pack_all(tmp_path_factory, ptb_helpers.build_wheels(tmp_path_factory))


@pytest.mark.parametrize("agent", ["claude-code", "codex", "opencode"])
def test_packed_solve_sh_gives_the_updated_cli_the_tools_skills_and_pointer(agent, tmp_path, packed):
    """The image's CLI (the harness lane) is on PATH; the harness's update script puts the newest (the current
    lane) first, into ~/.local/bin, before setup: that one runs, with the prompt on stdin."""
    run = Run(tmp_path, agent, cli_bin=agent_clis.bin_dir("harness"))
    prompt = render_prompt(agent=packed[agent].parent.name)

    def time_up(n: int) -> None:  # Claude Code: the Stop hook blocked once; now let it stop
        if n == 2:
            run.write_timer(hours=0, created=0, text="#!/bin/bash\necho 'Timer expired!'\n")

    with RecordingAPI(replies=3 if agent == "claude-code" else 0, on_reply=time_up) as api:
        extra = {**agent_clis.QUIET, **agent_clis.MCP_UP_FRONT, "UPDATED_CLIS": str(agent_clis.bin_dir("current"))}
        if agent == "claude-code":
            extra["ANTHROPIC_BASE_URL"] = api.url
        elif agent == "codex":  # the harness's config, with the model served by the recorder
            config = run.home / ".codex" / "config.toml"
            config.write_text(f'model_provider = "recorder"\n\n{config.read_text()}\n[model_providers.recorder]\n'
                              f'name = "recorder"\nbase_url = "{api.url}/v1"\nwire_api = "responses"\n')
        else:
            (tmp_path / "recorder.json").write_text(json.dumps({"provider": {"openai": {"options": {"baseURL": f"{api.url}/v1"}}}}))
            extra.update(OPENCODE_CONFIG=str(tmp_path / "recorder.json"), AGENT_CONFIG="openai/gpt-5")
        proc = run.run(packed[agent], prompt, **extra)
        model = "openai/gpt-5".split("/")[1] if agent == "opencode" else "stand-in-model"
        turns = api.main_requests(model)
    assert "updated into" in (run.home / "cli_version.txt").read_text()
    seen = json.dumps(turns[0])
    prefix = {"claude-code": "mcp__posttrain-aci__", "codex": "mcp__posttrain-aci__", "opencode": "posttrain-aci_"}[agent]
    names = [t for t in tool_names(turns[0]) if t.startswith(prefix)]
    if agent == "codex":  # Codex groups a server's tools in one namespace entry, `-` spelled `_`
        names = [prefix + t["name"].replace("_", "-") for e in turns[0]["tools"] if e.get("name") == "mcp__posttrain_aci"
                 for t in e["tools"]]
    assert names == [prefix + t for t in TOOLS], proc.stderr[-3000:]
    assert POINTER_START in seen and prompt.split("\n")[0] in seen  # the prompt from stdin, with the pointer line
    assert "Post-training with posttrain-aci" in seen  # the CLAUDE.md / AGENTS.md pointer
    for name in SKILLS:  # the skill list the CLI gives the model (Codex 0.171 names a skill's folder by alias)
        listed = {"claude-code": name, "codex": f"- {name}: ",
                  "opencode": str(run.task / ".opencode" / "skills" / name / "SKILL.md")}[agent]
        assert listed in seen, name
    if agent == "claude-code":
        # The Stop hook aci install added kept the agent working; with the time up it asked once for a last
        # message that says why the run ends, then let it stop.
        assert len(turns) == 3 and "Do not stop:" in json.dumps(turns[1]) and "never-stop-early" in json.dumps(turns[1])
        assert "Stopping is fine now: the deadline has passed" in json.dumps(turns[2]["messages"][-1])
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert run.leftovers() == [] and run.harness_files_intact()
    assert run.journal()[-1]["message"].startswith("Run ended: the agent exited with status ")
