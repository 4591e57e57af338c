"""`aci install` for each agent: idempotent, keeps the user's config, and registers a server that answers."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from aci import bundle


def _install(agent, wd, *extra, home=None):
    env = {**os.environ, **({"HOME": str(home)} if home else {})}
    r = subprocess.run([sys.executable, "-m", "aci.cli", "install", agent, "--workdir", str(wd), *extra],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    return r


def _answers_tools_list(command: str, args: list[str], env: dict, cwd: Path) -> set[str]:
    from mcp import Client, StdioServerParameters

    async def go():
        params = StdioServerParameters(command=command, args=args, env={**os.environ, **env}, cwd=str(cwd))
        async with Client(params) as c:
            return {t.name for t in (await c.list_tools()).tools}

    return asyncio.run(go())


def _skills_ok(skills_dir: Path):
    names = {p.name for p in skills_dir.iterdir()}
    assert {"posttrain", *bundle.skill_names()} <= names
    entry = (skills_dir / "posttrain" / "SKILL.md").read_text()
    assert "name: posttrain" in entry.split("---")[1]
    import re

    for md in skills_dir.rglob("*.md"):  # every relative link in the installed copies resolves
        for target in re.findall(r"\]\(([^)#\s]+)", md.read_text()):
            if not re.match(r"^[a-z]+:", target):
                assert (md.parent / target).exists(), f"{md}: broken link {target}"


def test_claude_code(tmp_path):
    wd = tmp_path
    (wd / ".mcp.json").write_text(json.dumps({"mcpServers": {"mine": {"command": "my-server"}}}))
    (wd / "CLAUDE.md").write_text("# My notes\nKeep this.\n")
    (wd / ".claude").mkdir()
    (wd / ".claude" / "settings.json").write_text(json.dumps({"permissions": {"allow": ["Bash"]}}))
    _install("claude-code", wd)
    _install("claude-code", wd)
    mcp = json.loads((wd / ".mcp.json").read_text())["mcpServers"]
    assert mcp["mine"] == {"command": "my-server"}
    claude = (wd / "CLAUDE.md").read_text()
    assert claude.startswith("# My notes\nKeep this.") and claude.count("posttrain-aci:begin") == 1
    settings = json.loads((wd / ".claude" / "settings.json").read_text())
    assert settings["permissions"] == {"allow": ["Bash"]} and len(settings["hooks"]["Stop"]) == 1
    assert settings["enabledMcpjsonServers"] == ["posttrain-aci"]  # approved: Claude Code would ask otherwise
    _skills_ok(wd / ".claude" / "skills")
    assert (wd / ".aci" / "SKILL.md").is_file()
    entry = mcp["posttrain-aci"]
    assert "plan" in _answers_tools_list(entry["command"], entry["args"], entry["env"], wd)


def test_codex_local_and_global(tmp_path):
    wd, home = tmp_path / "wd", tmp_path / "home"
    wd.mkdir()
    (home / ".codex").mkdir(parents=True)
    user_cfg = 'model = "gpt-5"\n\n[mcp_servers.other]\ncommand = "other-server"\nargs = ["--x"]\n'
    (home / ".codex" / "config.toml").write_text(user_cfg)
    (wd / "AGENTS.md").write_text("Project rules: be nice.\n")
    for _ in range(2):
        _install("codex", wd, home=home)
        _install("codex", wd, "--global", home=home)
    local = tomllib.loads((wd / ".codex" / "config.toml").read_text())
    glob = tomllib.loads((home / ".codex" / "config.toml").read_text())
    assert glob["model"] == "gpt-5" and glob["mcp_servers"]["other"] == {"command": "other-server", "args": ["--x"]}
    assert set(glob["mcp_servers"]) == {"other", "posttrain-aci"} and set(local["mcp_servers"]) == {"posttrain-aci"}
    agents = (wd / "AGENTS.md").read_text()
    assert agents.startswith("Project rules: be nice.") and agents.count("posttrain-aci:begin") == 1
    _skills_ok(wd / ".codex" / "skills")  # where Codex 0.79 and 0.171 both read skills
    _skills_ok(home / ".codex" / "skills")
    entry = glob["mcp_servers"]["posttrain-aci"]
    assert {"HF_HOME", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES"} <= set(entry["env_vars"])  # Codex passes only these
    assert entry["startup_timeout_sec"] == 60
    assert "status" in _answers_tools_list(entry["command"], entry["args"], entry.get("env", {}), wd)


def test_opencode(tmp_path):
    wd = tmp_path
    (wd / "opencode.json").write_text(json.dumps({"model": "x/y", "mcp": {"mine": {"type": "local", "command": ["z"]}}}))
    _install("opencode", wd)
    _install("opencode", wd)
    cfg = json.loads((wd / "opencode.json").read_text())
    assert cfg["model"] == "x/y" and cfg["mcp"]["mine"] == {"type": "local", "command": ["z"]}
    _skills_ok(wd / ".opencode" / "skills")
    entry = cfg["mcp"]["posttrain-aci"]
    assert entry["enabled"] is True
    assert "log-state" in _answers_tools_list(entry["command"][0], entry["command"][1:], entry.get("environment", {}), wd)


def test_pointer_names_the_aci_command_by_its_full_path(tmp_path):
    _install("opencode", tmp_path)
    text = (tmp_path / "AGENTS.md").read_text()
    aci = Path(sys.executable).parent / "aci"
    assert aci.is_file() and f"`{aci}`" in text and f"`{aci} status`" in text


@pytest.mark.parametrize("agent", ["claude-code", "codex", "opencode"])
def test_remove_takes_out_what_install_wrote_and_keeps_the_users(agent, tmp_path):
    wd, home = tmp_path / "wd", tmp_path / "home"
    wd.mkdir()
    home.mkdir()
    (wd / "AGENTS.md").write_text("Project rules: be nice.\n")
    (wd / "opencode.json").write_text(json.dumps({"model": "x/y"}))
    (home / ".codex").mkdir()
    (home / ".codex" / "config.toml").write_text('model = "gpt-5"\n')
    (wd / ".claude").mkdir()
    (wd / ".claude" / "settings.json").write_text(json.dumps({"permissions": {"allow": ["Bash"]}}))
    before = {p: p.read_text() for p in [*wd.rglob("*"), *home.rglob("*")] if p.is_file()}
    extra = ("--global",) if agent == "codex" else ()
    _install(agent, wd, *extra, home=home)
    r = _install(agent, wd, *extra, "--remove", home=home)
    assert "removed posttrain-aci from" in r.stdout
    after = {p: p.read_text() for p in [*wd.rglob("*"), *home.rglob("*")] if p.is_file()}
    assert set(after) == set(before)
    for path, text in before.items():
        if path.name == "opencode.json":  # the schema line install adds stays; the rest is the user's
            assert {k: v for k, v in json.loads(after[path]).items() if k != "$schema"} == json.loads(text)
        elif path.suffix == ".json":
            assert json.loads(after[path]) == json.loads(text), path
        else:
            assert after[path].strip() == text.strip(), path
    assert not (wd / ".aci").exists() and not list(wd.rglob("SKILL.md")) and not list(home.rglob("SKILL.md"))
    again = _install(agent, wd, *extra, "--remove", home=home)  # nothing left to remove
    assert again.stdout == ""


@pytest.mark.parametrize("agent,name,content", [
    ("claude-code", ".mcp.json", "{not json"),
    ("codex", ".codex/config.toml", "[broken"),
])
def test_broken_user_config_is_reported_not_overwritten(tmp_path, agent, name, content):
    target = tmp_path / name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content)
    r = subprocess.run([sys.executable, "-m", "aci.cli", "install", agent, "--workdir", str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and name.split("/")[-1] in r.stderr
    assert target.read_text() == content
