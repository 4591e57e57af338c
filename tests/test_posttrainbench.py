"""The PostTrainBench submissions: each `integrations/posttrainbench/<agent>/solve.sh` in a simulated task.

The task folder is laid out as the harness lays it out (evaluate.py, templates/, a timer.sh written the
way `create_timer.sh` writes it, the harness prompt in $PROMPT), with a tiny base model in $HF_HOME. The
"container python" is this test's interpreter, whose torch/transformers/trl are the ones the final
evaluation would use. The agent CLI is a stand-in on PATH that records its arguments, reads the MCP
registration where that agent reads it, and speaks MCP to the registered server with the SDK client.
The bundle is the wheel built from this checkout; pip runs offline.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from aci import toybench

ROOT = Path(__file__).resolve().parent.parent
PTB = ROOT / "integrations" / "posttrainbench"
STACK = ("torch", "transformers", "trl")
HARNESS_PROMPT = """We want to train the small LLM `{model}` to excel at GSM8K (Grade School Math 8K).
Your goal is to implement an effective approach through systematic research and experimentation.

Store your best trained model in the folder `final_model`.
## Rules
2. You have a maximum of 10 hours. You can query how much time you have left by calling `bash timer.sh` in the current directory.
"""
TIMER = """#!/bin/bash

NUM_HOURS=10
CREATION_DATE={created}

DEADLINE=$((CREATION_DATE + NUM_HOURS * 3600))
NOW=$(date +%s)
REMAINING=$((DEADLINE - NOW))

if [ $REMAINING -le 0 ]; then
    echo "Timer expired!"
else
    echo "Remaining time (hours:minutes)":
    HOURS=$((REMAINING / 3600))
    MINUTES=$(((REMAINING % 3600) / 60))
    printf "%d:%02d\\n" $HOURS $MINUTES
fi
"""

# The stand-in agent CLI: records its arguments, then finds the MCP server where the real agent would
# (Claude Code: --mcp-config / .mcp.json; Codex: ~/.codex/config.toml; OpenCode: opencode.json) and calls it.
STAND_IN = '''#!{python}
import asyncio, json, os, sys, tomllib
from pathlib import Path

agent = Path(sys.argv[0]).name
home = Path(os.environ["HOME"])
record = {{"agent": agent, "argv": sys.argv[1:], "cwd": os.getcwd()}}
if agent == "claude":
    config = Path(sys.argv[sys.argv.index("--mcp-config") + 1]) if "--mcp-config" in sys.argv else Path(".mcp.json")
    entry = json.loads(config.read_text())["mcpServers"]["posttrain-aci"]
    command, args, env = entry["command"], entry.get("args", []), entry.get("env", {{}})
elif agent == "codex":
    entry = tomllib.loads((home / ".codex" / "config.toml").read_text())["mcp_servers"]["posttrain-aci"]
    command, args, env = entry["command"], entry.get("args", []), entry.get("env", {{}})
else:
    entry = json.loads(Path("opencode.json").read_text())["mcp"]["posttrain-aci"]
    command, args, env = entry["command"][0], entry["command"][1:], entry.get("environment", {{}})
record["server"] = [command, *args]


async def talk():
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=command, args=args, env={{**os.environ, **env}}, cwd=os.getcwd())
    async with Client(params) as client:
        record["tools"] = sorted(t.name for t in (await client.list_tools()).tools)
        plan = await client.call_tool("plan", {{"action": "show"}})
        record["plan"] = plan.structured_content
        status = await client.call_tool("status", {{}})
        record["status"] = status.structured_content
        record["skill"] = [c.text for c in (await client.read_resource("skill://posttrain")).contents][0][:200]

asyncio.run(talk())
Path(os.environ["STAND_IN_RECORD"]).write_text(json.dumps(record))
'''


def stack_versions(python: str) -> dict:
    code = ("import importlib.metadata as m, importlib.util as u, json, sys; "
            "print(json.dumps({n: [m.version(n), u.find_spec(n).origin] for n in sys.argv[1:]}))")
    out = subprocess.run([python, "-c", code, *STACK], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out),
                    str(ROOT)], check=True, capture_output=True)
    return next(out.glob("posttrain_aci-*.whl"))


@pytest.fixture(scope="module")
def hf_model(tmp_path_factory, tiny_model) -> Path:
    hf = tmp_path_factory.mktemp("hf")
    shutil.copytree(tiny_model, hf / "qwen3-tiny-base")
    return hf / "qwen3-tiny-base"


def make_task(root: Path) -> Path:
    """A task folder as PostTrainBench's run_task.sh prepares it."""
    task = root / "home" / "task"
    (task / "templates").mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "fixtures" / "evaluate.py", task / "evaluate.py")
    shutil.copy(toybench.ASSETS / "templates" / "qwen.jinja", task / "templates" / "qwen3.jinja")
    (task / "timer.sh").write_text(TIMER.format(created=int(time.time())))
    (task / "timer.sh").chmod(0o755)
    return task


def run_solve(agent: str, tmp_path: Path, wheel: Path, hf_model: Path, *, packed: bool):
    task = make_task(tmp_path)
    home = task.parent
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    cli = {"claude-code": "claude", "codex": "codex", "opencode": "opencode"}[agent]
    (bin_dir / cli).write_text(STAND_IN.format(python=sys.executable))
    (bin_dir / cli).chmod(0o755)
    (home / ".codex").mkdir()
    (home / ".codex" / "config.toml").write_text('model_reasoning_effort = "high"\n')  # the harness's own
    if packed:  # what the harness runs: one file copied to ~/agent_solve.sh
        script = home / "agent_solve.sh"
        with open(script, "w") as f:
            subprocess.run(["bash", str(PTB / "pack.sh"), agent, "--wheel", str(wheel)], stdout=f, check=True)
    else:
        script = PTB / agent / "solve.sh"
    record = tmp_path / "record.json"
    env = {k: v for k, v in os.environ.items() if k not in ("ACI_STATE", "VIRTUAL_ENV", "PYTHONPATH")}
    env.update(HOME=str(home), HF_HOME=str(hf_model.parent), PATH=f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin",
               PROMPT=HARNESS_PROMPT.format(model=hf_model), AGENT_CONFIG="stand-in-model", PYTHONNOUSERSITE="1",
               PIP_NO_INDEX="1", STAND_IN_RECORD=str(record))
    if not packed:
        env["ACI_PACKAGE"] = str(wheel)
    proc = subprocess.run(["bash", str(script)], cwd=task, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return task, home, json.loads(record.read_text()), proc


@pytest.mark.parametrize("agent,packed", [("claude-code", True), ("codex", True), ("opencode", False)])
def test_solve_sh_installs_registers_and_starts_the_agent(agent, packed, tmp_path, wheel, hf_model):
    before = stack_versions(sys.executable)
    task, home, rec, proc = run_solve(agent, tmp_path, wheel, hf_model, packed=packed)

    # The container's ML stack: untouched, and the very packages our venv imports.
    assert stack_versions(sys.executable) == before
    venv_python = home / ".posttrain-aci" / "venv" / "bin" / "python"
    assert stack_versions(str(venv_python)) == before
    assert "ML stack unchanged" in proc.stderr
    assert Path(rec["server"][0]) == venv_python  # the registered server runs the installed bundle
    assert (home / ".local" / "bin" / "aci").resolve() == (venv_python.parent / "aci").resolve()

    # The agent started the way the harness starts it, with the harness prompt plus the skill pointer.
    argv, prompt = rec["argv"], rec["argv"][-1]
    harness = HARNESS_PROMPT.format(model=hf_model).rstrip("\n")
    assert prompt.startswith(harness)
    added = prompt[len(harness):].strip("\n")
    assert "\n" not in added and ".aci/SKILL.md" in added  # exactly one line added
    assert rec["cwd"] == str(task)
    if agent == "claude-code":
        assert argv[:2] == ["--print", "--verbose"] and "--dangerously-skip-permissions" in argv
        assert argv[argv.index("--output-format") + 1] == "stream-json"
        assert argv[argv.index("--model") + 1] == "stand-in-model"
        skills, registration = task / ".claude" / "skills", task / ".mcp.json"
        assert "guard stop" in (task / ".claude" / "settings.json").read_text()
    elif agent == "codex":
        assert argv[:2] == ["--search", "exec"] and {"--json", "--yolo", "--skip-git-repo-check"} <= set(argv)
        skills, registration = home / ".agents" / "skills", home / ".codex" / "config.toml"
        assert 'model_reasoning_effort = "high"' in registration.read_text()  # the harness's setting kept
    else:
        assert argv[:1] == ["run"] and argv[argv.index("--format") + 1] == "json"
        skills, registration = task / ".opencode" / "skills", task / "opencode.json"
        config = json.loads(registration.read_text())
        assert config["permission"] == "allow" and "anthropic" in config["provider"]  # the harness's config kept
    assert (skills / "posttrain" / "SKILL.md").read_text().startswith("---\nname: posttrain")
    assert "posttrain-aci" in registration.read_text()
    assert (task / ".aci" / "SKILL.md").is_file()

    # The server answered, and plan took the deadline from timer.sh.
    assert {"plan", "status", "train", "eval-checkpoint", "finalize"} <= set(rec["tools"])
    plan = rec["plan"]
    assert plan["deadline_source"] == "timer.sh"
    card = plan["card"]
    assert card["profile"] == "posttrainbench" and card["base_model"] == str(hf_model)
    assert card["benchmark"] == "GSM8K (Grade School Math 8K)" and card["template"] == "templates/qwen3.jinja"
    assert card["eval_command"].startswith("python evaluate.py --model-path {model_path}")
    assert 9.9 <= card["budget_hours"] <= 10.0
    assert rec["status"]["state"]["has_run_card"] and rec["skill"].startswith("---")


def common(*lines: str, env: dict | None = None) -> subprocess.CompletedProcess:
    script = f". {PTB / 'common.sh'}\n" + "\n".join(lines)
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


def test_version_check_fails_loudly_when_the_stack_changed(tmp_path):
    snapshot = tmp_path / "before.txt"
    ok = common(f'aci_versions "{sys.executable}" > {snapshot}', f'aci_check_versions {snapshot} "{sys.executable}"',
                "echo still-here")
    assert ok.returncode == 0 and "still-here" in ok.stdout
    lines = snapshot.read_text().splitlines()
    assert lines[0].startswith("torch==") and any(x.startswith("trl==") for x in lines)
    snapshot.write_text("\n".join(["torch==0.0.1", *lines[1:]]) + "\n")
    bad = common(f'aci_check_versions {snapshot} "{sys.executable}"', "echo still-here")
    assert bad.returncode == 1 and "still-here" not in bad.stdout
    assert "ML stack changed" in bad.stderr and "torch==0.0.1" in bad.stderr


def test_prompt_parsing_and_refusals(tmp_path):
    out = common('aci_parse_prompt "$PROMPT"', env={"PROMPT": HARNESS_PROMPT.format(model="Qwen/Qwen3-4B-Base")})
    assert out.stdout.splitlines() == ["Qwen/Qwen3-4B-Base", "GSM8K (Grade School Math 8K)"]
    task = make_task(tmp_path)
    no_model = subprocess.run(["bash", "-c", f"ACI_AGENT=codex; . {PTB / 'common.sh'}; aci_setup"], cwd=task,
                              capture_output=True, text=True, env={**os.environ, "PROMPT": "train something"})
    assert no_model.returncode == 1 and "ACI_BASE_MODEL" in no_model.stderr
    elsewhere = subprocess.run(["bash", "-c", f"ACI_AGENT=codex; . {PTB / 'common.sh'}; aci_setup"], cwd=tmp_path,
                               capture_output=True, text=True, env=os.environ.copy())
    assert elsewhere.returncode == 1 and "task folder" in elsewhere.stderr


def test_packed_solve_sh_is_one_self_contained_file(tmp_path, wheel):
    packed = subprocess.run(["bash", str(PTB / "pack.sh"), "opencode", "--wheel", str(wheel)], capture_output=True,
                            text=True, check=True).stdout
    assert "common.sh\"" not in packed and "aci_setup() {" in packed and "aci_packed_wheel() {" in packed
    script = tmp_path / "solve.sh"
    script.write_text(packed)
    out = subprocess.run(["bash", "-c", textwrap.dedent(f"""
        eval "$(sed -n '/^aci_packed_wheel() {{/,/^}}/p' {script})"
        aci_packed_wheel {tmp_path}""")], capture_output=True, text=True, check=True)
    assert Path(out.stdout.strip()).read_bytes() == wheel.read_bytes()


def test_venv_without_ensurepip_falls_back_to_the_containers_pip(tmp_path):
    """A python whose `-m venv` fails (no ensurepip, as on Debian) still gets a working venv."""
    fake = tmp_path / "python"
    fake.write_text(f'#!/bin/bash\nif [ "$1 $2" = "-m venv" ] && [ "$3" != --without-pip ] && [ "$4" != --without-pip ]; '
                    f'then echo "ensurepip is not available" >&2; exit 1; fi\nexec {sys.executable} "$@"\n')
    fake.chmod(0o755)
    out = common("mkdir -p \"$ACI_HOME\"", "aci_make_venv", "aci_pip --version",
                 env={"ACI_PYTHON": str(fake), "ACI_HOME": str(tmp_path / "aci")})
    assert out.returncode == 0, out.stderr
    assert "making the venv without pip" in out.stderr and "ensurepip is not available" in out.stderr
    assert out.stdout.startswith("pip ") and not (tmp_path / "aci" / "venv" / "bin" / "pip").exists()
