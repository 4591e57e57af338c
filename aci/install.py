"""`aci install <agent>`: put the bundle where each coding agent looks, and register the MCP server.

For every agent the whole bundle (SKILL.md, skills/, workflows/, rules/) is copied to `<workdir>/.aci/`
so its relative links keep working, each skill is copied to the agent's skill folder with links that
leave the skill rewritten to point into `.aci/`, and a short pointer block goes into the file the agent
reads first. Re-running replaces only what this installer wrote: user entries in JSON/TOML configs and
user text in CLAUDE.md / AGENTS.md are kept.

| agent | skills | MCP registration | pointer |
|---|---|---|---|
| claude-code | .claude/skills/ | .mcp.json `mcpServers` (+ Stop hook in .claude/settings.json) | CLAUDE.md |
| codex | .agents/skills/ (~/.agents/skills with --global) | .codex/config.toml `[mcp_servers]` (~/.codex/config.toml with --global) | AGENTS.md |
| opencode | .opencode/skills/ | opencode.json `mcp` | AGENTS.md |
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

from aci import bundle
from aci.errors import ACIError
from aci.state import atomic_write_bytes

SERVER = "posttrain-aci"
ENTRY_SKILL = "posttrain"
BEGIN, END = "<!-- posttrain-aci:begin -->", "<!-- posttrain-aci:end -->"
_LINK = re.compile(r"(\]\()([^)#\s]+)(#[^)\s]*)?(\))")

POINTER = """{begin}
## Post-training with posttrain-aci
Read `{entry}` first and follow it: it holds the workflow, the rules that zero a run, and the tools.
The `posttrain-aci` MCP server provides the tools (also as the `aci` CLI). Start every session with the
`status` tool (or `aci status`): it says how much time is left, the best model so far and what to do next.
Never stop before the final reserve, even once a target is met: `status` names the next goal.
{end}
"""


def server_command(workdir: Path, state: str | None) -> tuple[str, list[str], dict[str, str]]:
    """The command an agent runs to start our MCP server: this interpreter, so the right venv is used."""
    args = ["-m", "aci.cli", "--workdir", str(workdir), "serve"]
    env = {"ACI_STATE": str(Path(state).resolve())} if state else {}
    return sys.executable, args, env


def install(agent: str, workdir: str | Path, *, global_config: bool = False, state: str | None = None) -> list[Path]:
    wd = Path(workdir).expanduser().resolve()
    if not wd.is_dir():
        raise ACIError(f"workdir {wd} does not exist")
    written = [_copy_bundle(wd)]
    home = Path(os.environ.get("HOME", "~")).expanduser()
    if agent == "claude-code":
        written += _install_skills(wd / ".claude" / "skills", wd)
        written.append(_claude_mcp(wd, state))
        written.append(_claude_stop_hook(wd))
        written.append(_pointer(wd / "CLAUDE.md", wd))
    elif agent == "codex":
        skills = (home / ".agents" / "skills") if global_config else (wd / ".agents" / "skills")
        written += _install_skills(skills, wd)
        written.append(_codex_mcp((home if global_config else wd) / ".codex" / "config.toml", wd, state))
        written.append(_pointer(wd / "AGENTS.md", wd))
    elif agent == "opencode":
        written += _install_skills(wd / ".opencode" / "skills", wd)
        written.append(_opencode_mcp(wd, state))
        written.append(_pointer(wd / "AGENTS.md", wd))
    else:
        raise ACIError(f"unknown agent {agent!r}: use claude-code, codex or opencode")
    return written


# -- the bundle and skills ---------------------------------------------------------------------------
def _copy_bundle(wd: Path) -> Path:
    dest = wd / ".aci"
    src = bundle.root()
    tmp = wd / ".aci.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    shutil.copy2(src / "SKILL.md", tmp / "SKILL.md")
    for name in ("skills", "workflows", "rules"):
        if (src / name).is_dir():
            shutil.copytree(src / name, tmp / name)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest


def _rewrite_links(text: str, src_file: Path, dest_file: Path, src_root: Path, bundle_copy: Path, keep_inside: Path | None) -> str:
    """Point relative links at the bundle copy unless they stay inside `keep_inside` (a copied skill)."""

    def fix(m: re.Match) -> str:
        target = m.group(2)
        if re.match(r"^[a-z]+:", target) or target.startswith("/"):
            return m.group(0)
        resolved = (src_file.parent / target).resolve()
        if keep_inside and (resolved == keep_inside or keep_inside in resolved.parents):
            return m.group(0)
        try:
            inside = resolved.relative_to(src_root)
        except ValueError:
            return m.group(0)
        new = os.path.relpath(bundle_copy / inside, dest_file.parent)
        return f"{m.group(1)}{new}{m.group(3) or ''}{m.group(4)}"

    return _LINK.sub(fix, text)


def _install_skills(skills_dir: Path, wd: Path) -> list[Path]:
    src_root = bundle.root()
    bundle_copy = wd / ".aci"
    out = []
    skills_dir.mkdir(parents=True, exist_ok=True)
    sources = [(ENTRY_SKILL, src_root / "SKILL.md", None)] + [
        (n, src_root / "skills" / n / "SKILL.md", src_root / "skills" / n) for n in bundle.skill_names()
    ]
    for name, src_file, folder in sources:
        dest = skills_dir / name
        shutil.rmtree(dest, ignore_errors=True)
        if folder:
            shutil.copytree(folder, dest)
        else:
            dest.mkdir(parents=True)
        for md in ([src_file] if folder is None else sorted(folder.rglob("*.md"))):
            target = dest / ("SKILL.md" if folder is None else md.relative_to(folder))
            text = _rewrite_links(md.read_text(), md, target, src_root, bundle_copy, folder.resolve() if folder else None)
            if folder is None:
                text = _entry_front_matter(text)
            target.write_text(text)
        out.append(dest)
    return out


def _entry_front_matter(text: str) -> str:
    """The entry skill's folder is `posttrain`, so its front matter `name` must say so."""
    return re.sub(r"(?m)^name:.*$", f"name: {ENTRY_SKILL}", text, count=1) if text.startswith("---") else text


# -- MCP registrations ---------------------------------------------------------------------------------
def _load_json(path: Path) -> dict:
    if not path.exists() or not path.read_text().strip():
        return {}
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ACIError(f"{path}:{e.lineno}: not valid JSON ({e.msg}); fix it, then re-run aci install") from None
    if not isinstance(data, dict):
        raise ACIError(f"{path}: expected a JSON object")
    return data


def _write_json(path: Path, data: dict) -> Path:
    atomic_write_bytes(path, (json.dumps(data, indent=2) + "\n").encode())
    return path


def _claude_mcp(wd: Path, state: str | None) -> Path:
    path = wd / ".mcp.json"
    data = _load_json(path)
    cmd, args, env = server_command(wd, state)
    data.setdefault("mcpServers", {})[SERVER] = {"command": cmd, "args": args, "env": env}
    return _write_json(path, data)


def _claude_stop_hook(wd: Path) -> Path:
    path = wd / ".claude" / "settings.json"
    data = _load_json(path)
    cmd = f"{sys.executable} -m aci.cli --workdir {wd} guard stop"
    stop = data.setdefault("hooks", {}).setdefault("Stop", [])
    stop[:] = [g for g in stop if not any("aci.cli" in h.get("command", "") and "guard stop" in h.get("command", "")
                                          for h in g.get("hooks", []))]
    stop.append({"hooks": [{"type": "command", "command": cmd, "timeout": 30}]})
    return _write_json(path, data)


def _opencode_mcp(wd: Path, state: str | None) -> Path:
    path = wd / "opencode.json"
    data = _load_json(path)
    cmd, args, env = server_command(wd, state)
    data.setdefault("$schema", "https://opencode.ai/config.json")
    entry = {"type": "local", "command": [cmd, *args], "enabled": True}
    if env:
        entry["environment"] = env
    data.setdefault("mcp", {})[SERVER] = entry
    return _write_json(path, data)


def _toml_str(s: str) -> str:
    return json.dumps(s)  # a JSON string is a valid TOML basic string


def _codex_mcp(path: Path, wd: Path, state: str | None) -> Path:
    """Replace our `[mcp_servers.posttrain-aci]` table (and its sub-tables) in place; keep everything else."""
    cmd, args, env = server_command(wd, state)
    block = [f"[mcp_servers.{SERVER}]", f"command = {_toml_str(cmd)}",
             "args = [" + ", ".join(_toml_str(a) for a in args) + "]"]
    if env:
        block.append("env = { " + ", ".join(f"{k} = {_toml_str(v)}" for k, v in env.items()) + " }")
    text = path.read_text() if path.exists() else ""
    _parse_toml(path, text)
    kept, skipping = [], False
    for line in text.splitlines():
        header = re.match(r"^\s*\[+\s*([^\]]+?)\s*\]+", line)
        if header:
            name = header.group(1).replace('"', "")
            skipping = name == f"mcp_servers.{SERVER}" or name.startswith(f"mcp_servers.{SERVER}.")
        if not skipping:
            kept.append(line)
    body = "\n".join(kept).rstrip()
    new = (body + "\n\n" if body else "") + "\n".join(block) + "\n"
    _parse_toml(path, new)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, new.encode())
    return path


def _parse_toml(path: Path, text: str) -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ACIError(f"{path}: not valid TOML ({e}); fix it, then re-run aci install") from None


# -- pointer files ---------------------------------------------------------------------------------------
def _pointer(path: Path, wd: Path) -> Path:
    block = POINTER.format(begin=BEGIN, end=END, entry=os.path.relpath(wd / ".aci" / "SKILL.md", path.parent))
    text = path.read_text() if path.exists() else ""
    if BEGIN in text and END in text:
        start, end = text.index(BEGIN), text.index(END) + len(END)
        text = text[:start] + block.rstrip("\n") + text[end:]
    else:
        text = (text.rstrip() + "\n\n" if text.strip() else "") + block
    atomic_write_bytes(path, text.encode())
    return path
