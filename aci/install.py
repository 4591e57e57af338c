"""`aci install <agent>`: put the bundle where each coding agent looks, and register the MCP server.

For every agent the whole bundle (SKILL.md, skills/, workflows/, rules/) is copied to `<workdir>/.aci/`
so its relative links keep working, each skill is copied to the agent's skill folder with links that
leave the skill rewritten to point into `.aci/`, and a short pointer block goes into the file the agent
reads first. Re-running replaces only what this installer wrote: user entries in JSON/TOML configs and
user text in CLAUDE.md / AGENTS.md are kept. `remove` takes all of it out again (the PostTrainBench
submission does so when the agent exits, so the integrity judges that run afterwards in the same folder
read none of it as instructions).

| agent | skills | MCP registration | pointer |
|---|---|---|---|
| claude-code | .claude/skills/ | .mcp.json `mcpServers`, approved in .claude/settings.json (+ Stop hook there) | CLAUDE.md |
| codex | .codex/skills/ (~/.codex/skills with --global) | .codex/config.toml `[mcp_servers]` (~/.codex/config.toml with --global) | AGENTS.md |
| opencode | .opencode/skills/ | opencode.json `mcp` | AGENTS.md |

Where the agents read them, checked with their CLIs (tests/test_agent_clis.py): Claude Code 2.0.55 and
2.1 approve a project `.mcp.json` server listed in `enabledMcpjsonServers` of `.claude/settings.json`
(2.1 once the folder is trusted); Codex 0.144 and 0.171 read skills from `.codex/skills` (also when
CODEX_HOME points elsewhere) and `$CODEX_HOME/skills`, pass an MCP server only the variables named in
`env_vars`, and wait for it before the first turn only when it is `required`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

from aci import DISTRIBUTION, bundle
from aci.errors import ACIError
from aci.state import STATE_ENV, atomic_write_bytes

SERVER = DISTRIBUTION  # the MCP server is named for the package; agents list its tools under this name
ENTRY_SKILL = "posttrain"
AGENTS = ("claude-code", "codex", "opencode")
BEGIN, END = f"<!-- {SERVER}:begin -->", f"<!-- {SERVER}:end -->"
_LINK = re.compile(r"(\]\()([^)#\s]+)(#[^)\s]*)?(\))")
# Codex starts an MCP server with a bare environment (PATH, HOME, SHELL, LANG, TERM) plus these, by name:
# the model cache, the GPU libraries and the harness's settings the training jobs need.
CODEX_ENV_VARS = ("HF_HOME", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN",
                  "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "NUM_GPUS",
                  "PYTHONNOUSERSITE", "VLLM_API_KEY", "TMPDIR")
CODEX_STARTUP_TIMEOUT_S = 60  # the default 10 s is tight for a first start on a busy machine
# `required`: Codex (0.171) starts the first turn before an optional server is up, without its tools.

POINTER = """{begin}
## Post-training with {server}
Read `{entry}` first and follow it: it holds the workflow, the rules that zero a run, and the tools.
The `{server}` MCP server provides the tools; the command {aci} runs the same tools.
Start every session with the `status` tool (or `{aci_cmd} status`): it says how much time is left,
the best model so far and what to do next. Never stop before the final reserve, even once a target
is met: `status` names the next goal.
{end}
"""


def server_command(workdir: Path, state: str | None) -> tuple[str, list[str], dict[str, str]]:
    """The command an agent runs to start our MCP server: this interpreter, so the right venv is used."""
    args = ["-m", "aci.cli", "--workdir", str(workdir), "serve"]
    env = {STATE_ENV: str(Path(state).resolve())} if state else {}
    return sys.executable, args, env


def aci_command() -> str:
    """The `aci` script beside this interpreter (absolute: an agent's shell PATH may not reach it), else `aci`."""
    script = Path(sys.executable).parent / "aci"
    return str(script) if script.is_file() else "aci"


class _Layout:
    """Where one agent reads skills, its MCP registration and its pointer file."""

    def __init__(self, agent: str, wd: Path, global_config: bool):
        if agent not in AGENTS:
            raise ACIError(f"unknown agent {agent!r}: use one of {', '.join(AGENTS)}")
        home = Path(os.environ.get("HOME", "~")).expanduser()
        self.root = home if agent == "codex" and global_config else wd  # what removal never deletes
        codex_root = self.root / ".codex"
        self.skills = {"claude-code": wd / ".claude" / "skills", "codex": codex_root / "skills",
                       "opencode": wd / ".opencode" / "skills"}[agent]
        self.pointer = wd / ("CLAUDE.md" if agent == "claude-code" else "AGENTS.md")
        self.codex_config = codex_root / "config.toml"


def install(agent: str, workdir: str | Path, *, global_config: bool = False, state: str | None = None) -> list[Path]:
    wd = _workdir(workdir)
    where = _Layout(agent, wd, global_config)
    written = [_copy_bundle(wd)]
    written += _install_skills(where.skills, wd)
    if agent == "claude-code":
        written.append(_claude_mcp(wd, state))
        written.append(_claude_settings(wd))
    elif agent == "codex":
        written.append(_codex_mcp(where.codex_config, wd, state))
    else:
        written.append(_opencode_mcp(wd, state))
    written.append(_pointer(where.pointer, wd))
    return written


def remove(agent: str, workdir: str | Path, *, global_config: bool = False) -> list[Path]:
    """Take out everything `install` wrote for AGENT; user entries and text stay. Returns the paths touched."""
    wd = _workdir(workdir)
    where = _Layout(agent, wd, global_config)
    touched = [p for p in [wd / ".aci", *(where.skills / n for n in _skill_names())] if p.exists()]
    for p in touched:
        shutil.rmtree(p)
    _prune(where.skills, stop=where.root)
    if agent == "claude-code":
        touched += _edit_json(wd / ".mcp.json", lambda d: _drop(d, "mcpServers", SERVER))
        touched += _edit_json(wd / ".claude" / "settings.json", _unset_claude_settings)
        _prune(wd / ".claude", stop=wd)
    elif agent == "codex":
        touched += _remove_codex_block(where.codex_config)
    else:
        touched += _edit_json(wd / "opencode.json", lambda d: _drop(d, "mcp", SERVER))
    touched += _remove_pointer(where.pointer)
    return touched


def _workdir(workdir: str | Path) -> Path:
    wd = Path(workdir).expanduser().resolve()
    if not wd.is_dir():
        raise ACIError(f"workdir {wd} does not exist")
    return wd


def _skill_names() -> list[str]:
    return [ENTRY_SKILL, *bundle.skill_names()]


def _prune(folder: Path, *, stop: Path) -> None:
    """Remove `folder` and its parents while they are empty, up to (not including) `stop`."""
    while folder != stop and folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
        folder = folder.parent


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


# -- JSON configs ----------------------------------------------------------------------------------------
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


def _edit_json(path: Path, edit) -> list[Path]:
    """Apply `edit` to the file's object; delete the file when nothing but our scaffolding is left."""
    if not path.exists():
        return []
    data = _load_json(path)
    before = json.dumps(data, sort_keys=True)
    edit(data)
    if json.dumps(data, sort_keys=True) == before:
        return []
    if set(data) <= {"$schema"}:
        path.unlink()
    else:
        _write_json(path, data)
    return [path]


def _drop(data: dict, table: str, key: str) -> None:
    entries = data.get(table)
    if isinstance(entries, dict) and key in entries:
        del entries[key]
        if not entries:
            del data[table]


# -- Claude Code -----------------------------------------------------------------------------------------
def _claude_mcp(wd: Path, state: str | None) -> Path:
    path = wd / ".mcp.json"
    data = _load_json(path)
    cmd, args, env = server_command(wd, state)
    data.setdefault("mcpServers", {})[SERVER] = {"command": cmd, "args": args, "env": env}
    return _write_json(path, data)


def _is_our_stop_hook(group: dict) -> bool:
    return any("aci.cli" in h.get("command", "") and "guard stop" in h.get("command", "") for h in group.get("hooks", []))


def _claude_settings(wd: Path) -> Path:
    """Approve our `.mcp.json` server (Claude Code asks otherwise) and add the Stop hook."""
    path = wd / ".claude" / "settings.json"
    data = _load_json(path)
    approved = data.setdefault("enabledMcpjsonServers", [])
    if SERVER not in approved:
        approved.append(SERVER)
    cmd = f"{sys.executable} -m aci.cli --workdir {wd} guard stop"
    stop = data.setdefault("hooks", {}).setdefault("Stop", [])
    stop[:] = [g for g in stop if not _is_our_stop_hook(g)]
    stop.append({"hooks": [{"type": "command", "command": cmd, "timeout": 30}]})
    return _write_json(path, data)


def _unset_claude_settings(data: dict) -> None:
    approved = data.get("enabledMcpjsonServers")
    if isinstance(approved, list) and SERVER in approved:
        approved.remove(SERVER)
        if not approved:
            del data["enabledMcpjsonServers"]
    hooks = data.get("hooks")
    if isinstance(hooks, dict) and isinstance(hooks.get("Stop"), list):
        hooks["Stop"] = [g for g in hooks["Stop"] if not _is_our_stop_hook(g)]
        if not hooks["Stop"]:
            del hooks["Stop"]
        if not hooks:
            del data["hooks"]


# -- OpenCode --------------------------------------------------------------------------------------------
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


# -- Codex -----------------------------------------------------------------------------------------------
def _toml_str(s: str) -> str:
    return json.dumps(s)  # a JSON string is a valid TOML basic string


def _without_codex_block(path: Path, text: str) -> str:
    """The config text without our `[mcp_servers.<SERVER>]` table (and its sub-tables)."""
    _parse_toml(path, text)
    kept, skipping = [], False
    for line in text.splitlines():
        header = re.match(r"^\s*\[+\s*([^\]]+?)\s*\]+", line)
        if header:
            name = header.group(1).replace('"', "")
            skipping = name == f"mcp_servers.{SERVER}" or name.startswith(f"mcp_servers.{SERVER}.")
        if not skipping:
            kept.append(line)
    return "\n".join(kept).rstrip()


def _codex_mcp(path: Path, wd: Path, state: str | None) -> Path:
    """Replace our `[mcp_servers.<SERVER>]` table in place; keep everything else."""
    cmd, args, env = server_command(wd, state)
    block = [f"[mcp_servers.{SERVER}]", f"command = {_toml_str(cmd)}",
             "args = [" + ", ".join(_toml_str(a) for a in args) + "]",
             "env_vars = [" + ", ".join(_toml_str(v) for v in CODEX_ENV_VARS) + "]",
             f"startup_timeout_sec = {CODEX_STARTUP_TIMEOUT_S}", "required = true"]
    if env:
        block.append("env = { " + ", ".join(f"{k} = {_toml_str(v)}" for k, v in env.items()) + " }")
    body = _without_codex_block(path, path.read_text() if path.exists() else "")
    new = (body + "\n\n" if body else "") + "\n".join(block) + "\n"
    _parse_toml(path, new)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, new.encode())
    return path


def _remove_codex_block(path: Path) -> list[Path]:
    if not path.exists():
        return []
    text = path.read_text()
    body = _without_codex_block(path, text)
    if body == text.rstrip():
        return []
    if body.strip():
        atomic_write_bytes(path, (body + "\n").encode())
    else:
        path.unlink()
        _prune(path.parent, stop=path.parent.parent)
    return [path]


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
    aci = aci_command()
    shown = f"`{aci}` (`aci` in the skills)" if aci != "aci" else "`aci`"
    block = POINTER.format(begin=BEGIN, end=END, server=SERVER, entry=os.path.relpath(wd / ".aci" / "SKILL.md", path.parent),
                           aci=shown, aci_cmd=aci)
    text = path.read_text() if path.exists() else ""
    if BEGIN in text and END in text:
        start, end = text.index(BEGIN), text.index(END) + len(END)
        text = text[:start] + block.rstrip("\n") + text[end:]
    else:
        text = (text.rstrip() + "\n\n" if text.strip() else "") + block
    atomic_write_bytes(path, text.encode())
    return path


def _remove_pointer(path: Path) -> list[Path]:
    text = path.read_text() if path.exists() else ""
    if BEGIN not in text or END not in text:
        return []
    start, end = text.index(BEGIN), text.index(END) + len(END)
    rest = (text[:start].rstrip() + "\n\n" + text[end:].lstrip()).strip()
    if rest:
        atomic_write_bytes(path, (rest + "\n").encode())
    else:
        path.unlink()
    return [path]
