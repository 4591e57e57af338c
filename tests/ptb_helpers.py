"""Running the PostTrainBench submissions the way the harness runs them (tests/test_posttrainbench.py,
tests/test_agent_clis.py, tests/test_harbor.py): the harness's prompt in both forms, its task folder and
HOME (with ../test_data.json, ../contamination_check.py and ../update_agent_cli.sh beside the task), the
API keys the agent folder's api_keys.json allows and no others, packed solve.sh files, and a Python 3.10
container without pip, venv or network. See test_posttrainbench.py for the harness facts this follows.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from aci import toybench
from tests import agent_clis

ROOT = Path(__file__).resolve().parent.parent
PTB = ROOT / "integrations" / "posttrainbench"
FIXTURES = ROOT / "tests" / "fixtures"
STACK = ("torch", "transformers", "trl")
MODEL, BENCHMARK = "Qwen/Qwen3-1.7B-Base", "GSM8K (Grade School Math 8K)"
POINTER_START = "Before anything else, read .aci/SKILL.md and follow it"
LAUNCH = {  # the harness's own launch lines, AGENT_CONFIG=stand-in-model; the prompt comes on stdin
    "claude-code": ["claude", "--print", "--verbose", "--model", "stand-in-model", "--output-format", "stream-json",
                    "--thinking-display", "summarized", "--dangerously-skip-permissions"],
    "codex": ["codex", "--search", "exec", "--json", "-c", "model_reasoning_summary=detailed",
              "--skip-git-repo-check", "--yolo", "--model", "stand-in-model"],
    "opencode": ["opencode", "run", "--model", "stand-in-model", "--format", "json"],
}
# Every key the harness may hold; the sandbox gets only those the agent folder's api_keys.json names.
API_KEYS = ("ANTHROPIC_API_KEY", "CODEX_API_KEY", "GEMINI_API_KEY", "OPENAI_API_KEY", "OPENCODE_API_KEY", "ZAI_API_KEY",
            "MODEL_API_KEY")
TEST_ITEMS = [{"question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in "
                           "May. How many clips did Natalia sell altogether in April and May?", "answer": "72"}]
# The harness's CLI update, standing in for npm: it puts the "newest" CLI $1 into ~/.local/bin, replacing
# that folder, and records it, as update_agent_cli.sh records what it installed.
UPDATE_CLI = """#!/bin/bash
rm -rf "$HOME/.local/bin" && mkdir -p "$HOME/.local/bin"
printf '#!/bin/sh\nexec %s "$@"\n' "$UPDATED_CLIS/$1" > "$HOME/.local/bin/$1"
chmod +x "$HOME/.local/bin/$1"
echo "binary: $1 (updated into $HOME/.local/bin)" > "$HOME/cli_version.txt"
"""
# The shared contamination checker the harness places beside the task (its stand-in comes with the
# contamination tests); solve.sh must leave it and the test items in place.
CONTAMINATION_TOOL = FIXTURES / "contamination_check.py"
TIMER = """#!/bin/bash

NUM_HOURS={hours}
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


def render_prompt(model: str = MODEL, *, agent: str = "claude-code_aci", form: str = "evaluated") -> str:
    """PROMPT as the container gets it: get_prompt.py's substitutions, `$(...)` cutting trailing newlines,
    then (form `evaluated`, Apptainer) evaluated inside double quotes, or passed on raw."""
    text = (FIXTURES / "ptb_prompt_template.txt").read_text()
    for key, value in {"{model}": model, "{benchmark}": BENCHMARK, "{num_hours}": "10", "{setup_other}": "",
                       "{gpu_info}": "- One Nvidia H100 GPU.", "{datetime}": "Mon Nov 30 12:00:00 UTC 2026"}.items():
        text = text.replace(key, value)
    decontamination = ("\n## Checking training data\n- \\`../contamination_check.py\\` compares a JSONL file with the "
                       f"{BENCHMARK} test items in \\`../test_data.json\\`: \\`python ../contamination_check.py "
                       "--reference ../test_data.json --input data.jsonl\\`. They are there for this check only.\n")
    text = text.replace("{decontamination_tool}", decontamination)
    if "claude" in agent:  # get_prompt.py's rule: any agent folder whose name contains `claude`
        text += "\nThis is a non-interactive run: let every process finish before your last message.\n"
    text = text.rstrip("\n")
    if form == "evaluated":
        text = subprocess.run(["bash", "-c", 'eval "out=\\"$1\\""; printf %s "$out"', "_", text],
                              capture_output=True, text=True, check=True).stdout
    return text


def stack_versions(python: str) -> dict:
    code = ("import importlib.metadata as m, importlib.util as u, json, sys; "
            "print(json.dumps({n: [m.version(n), u.find_spec(n).origin] for n in sys.argv[1:]}))")
    out = subprocess.run([python, "-c", code, *STACK], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def build_wheels(tmp_path_factory) -> dict:
    """posttrain-aci's wheel built from this checkout, and pip's (the wheelhouse's, else from PyPI)."""
    out = tmp_path_factory.mktemp("wheels")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out),
                    str(ROOT)], check=True, capture_output=True)
    pip_wheel = next(iter(sorted(agent_clis.WHEELS.glob("pip-*.whl"))), None)
    if pip_wheel is None:
        got = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d",
                              str(out), "pip"], capture_output=True, text=True)
        pip_wheel = next(iter(out.glob("pip-*.whl")), None)
        if pip_wheel is None:
            agent_clis.missing(f"pip's wheel (no wheelhouse, and PyPI failed: {got.stderr[-300:]})")
    return {"aci": next(out.glob("posttrain_aci-*.whl")), "pip": pip_wheel}


def pack(agent: str, wheels: dict, out: Path) -> Path:
    subprocess.run(["bash", str(PTB / "pack.sh"), agent, str(out), "--wheel", str(wheels["aci"]),
                    "--pip-wheel", str(wheels["pip"])], check=True, capture_output=True)
    return out / "solve.sh"


def pack_all(tmp_path_factory, wheels: dict) -> dict:
    """Each agent's packed folder, named as agents/ holds it: `<agent>_aci`."""
    root = tmp_path_factory.mktemp("packed")
    return {agent: pack(agent, wheels, root / f"{agent}_aci") for agent in LAUNCH}


def python310_container(tmp_path_factory) -> Path:
    """A Python 3.10 like the image's: the interpreter and its standard library without ensurepip and
    venv, and an empty site-packages (so no pip). Returns its bin folder (python, python3)."""
    real = agent_clis.python310()
    prefix = tmp_path_factory.mktemp("container310")
    stdlib = real.parent.parent / "lib" / "python3.10"
    (prefix / "bin").mkdir()
    (prefix / "lib" / "python3.10" / "site-packages").mkdir(parents=True)
    shutil.copy2(real, prefix / "bin" / "python3.10")  # a copy: the prefix is found from where the binary is
    for entry in stdlib.iterdir():
        if entry.name not in ("ensurepip", "venv", "site-packages"):
            (prefix / "lib" / "python3.10" / entry.name).symlink_to(entry)
    for name in ("python", "python3"):
        (prefix / "bin" / name).symlink_to("python3.10")
    python = prefix / "bin" / "python"
    for module in ("pip", "venv", "ensurepip"):
        probe = subprocess.run([str(python), "-c", f"import {module}"], capture_output=True)
        assert probe.returncode != 0, f"the test container's python must not have {module}"
    return prefix / "bin"


class Run:
    """One solve.sh run in a task folder laid out as run_task.sh lays it out: HOME holds the task folder,
    the test items, the shared contamination checker and (unless `update=False`, as on the harness's
    older branches) the CLI update script. The agent CLI is the stand-in, or the real one from `cli_bin`;
    the update script puts the same CLI, "updated", first on PATH in ~/.local/bin."""

    def __init__(self, root: Path, agent: str, cli_bin: Path | None = None, *, update: bool = True):
        self.agent, self.home = agent, root / "home"
        self.task, self.bin, self.record_path = self.home / "task", root / "bin", root / "record.json"
        (self.task / "templates").mkdir(parents=True)
        shutil.copy(FIXTURES / "evaluate.py", self.task / "evaluate.py")
        shutil.copy(toybench.ASSETS / "templates" / "qwen.jinja", self.task / "templates" / "qwen3.jinja")
        self.write_timer(hours=10, created=int(time.time()))
        (self.home / ".codex").mkdir()
        (self.home / ".codex" / "config.toml").write_text(  # the harness's, for Codex and its judge
            f'[projects."/home/"]\ntrust_level = "trusted"\n\n[shell_environment_policy]\ninherit = "all"\n'
            f'set = {{ PATH = "/usr/local/bin:/usr/bin:/bin", HOME = "{self.home}" }}\n')
        (self.home / "test_data.json").write_text(json.dumps(TEST_ITEMS))
        if CONTAMINATION_TOOL.exists():
            shutil.copy(CONTAMINATION_TOOL, self.home / "contamination_check.py")
        if update:
            (self.home / "update_agent_cli.sh").write_text(UPDATE_CLI)
        self.harness_files = {p.name: p.read_bytes() for p in self.home.iterdir() if p.is_file()}
        if cli_bin:
            self.bin = cli_bin
            return
        self.bin.mkdir()
        cli = LAUNCH[agent][0]
        (self.bin / cli).write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FIXTURES / "stand_in_agent.py"}" {cli} "$@"\n')
        (self.bin / cli).chmod(0o755)

    def write_timer(self, *, hours: int, created: int, text: str | None = None) -> None:
        (self.task / "timer.sh").write_text(text or TIMER.format(hours=hours, created=created))
        (self.task / "timer.sh").chmod(0o755)

    def env(self, script: Path, prompt: str, python_bin: Path, **extra: str) -> dict:
        """The sandbox's environment: run_task.sh's PATH (~/.local/bin first), PROMPT, AGENT_CONFIG, and only
        the API keys the agent folder's api_keys.json allows (run_task.sh stops without that file)."""
        allowed = json.loads((script.parent / "api_keys.json").read_text())["allowed_api_keys"]
        env = {k: v for k, v in os.environ.items() if k not in ("ACI_STATE", "VIRTUAL_ENV", "PYTHONPATH", *API_KEYS)}
        env.update(HOME=str(self.home), PATH=f"{self.home / '.local' / 'bin'}:{self.bin}:{python_bin}:/usr/bin:/bin:"
                   f"{agent_clis.NODE22}", PROMPT=prompt, AGENT_CONFIG="stand-in-model", PYTHONNOUSERSITE="1",
                   PIP_NO_INDEX="1", HF_HOME=str(self.home / "hf"), STAND_IN_RECORD=str(self.record_path),
                   UPDATED_CLIS=str(self.bin), **{k: f"{k.lower()}-value" for k in allowed})
        env.update(extra)
        return env

    def start(self, script: Path, prompt: str, *, python_bin: Path = Path(sys.executable).parent, net: bool = True,
              **extra: str) -> subprocess.Popen:
        env = self.env(script, prompt, python_bin, **extra)
        if script.parent != PTB / self.agent:
            shutil.copy(script, self.home / "agent_solve.sh")
            script = self.home / "agent_solve.sh"
        command = ["bash", str(script)]
        if not net:
            if shutil.which("unshare") and subprocess.run(["unshare", "-n", "true"]).returncode == 0:
                command = ["unshare", "-n", *command]
            else:
                extra.setdefault("PIP_INDEX_URL", "http://127.0.0.1:9/")  # nothing listens there
        return subprocess.Popen(command, cwd=self.task, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)

    def run(self, script: Path, prompt: str, **kw) -> subprocess.CompletedProcess:
        proc = self.start(script, prompt, **kw)
        out, err = proc.communicate(timeout=600)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    @property
    def record(self) -> dict:
        return json.loads(self.record_path.read_text())

    @property
    def log(self) -> str:
        return (self.home / ".posttrain-aci" / "setup.log").read_text()

    def leftovers(self, *, registrations: bool = True) -> list[str]:
        """What a judge would read as our instructions (pointer text, skills, the bundle) and, unless told
        otherwise, the MCP registrations and hook we added: anywhere in the task folder but state/, and
        where the agents look in HOME (not the agents' own session records)."""
        configs = {".mcp.json", "settings.json", "opencode.json", "config.toml"}
        places = [self.task, *(self.home / p for p in (".codex/config.toml", ".codex/skills", ".codex/AGENTS.md",
                  ".agents", ".config/opencode", ".claude/skills", ".claude/settings.json", ".claude/CLAUDE.md",
                  ".local/bin/aci", "CLAUDE.md", "AGENTS.md"))]
        found = []
        for place in places:
            for p in ([place] if place.is_file() or place.is_symlink() else place.rglob("*")):
                rel = p.relative_to(self.home)
                if rel.parts[:2] == ("task", "state") or ".system" in rel.parts:  # Codex's own skills
                    continue
                if p.is_symlink() or p.is_dir():
                    if p.name in (".aci", "aci"):
                        found.append(str(rel))
                    continue
                if p.name == "SKILL.md" or ("posttrain-aci" in p.read_text(errors="replace")
                                            and (registrations or p.name not in configs)):
                    found.append(str(rel))
        return sorted(set(found))


    def journal(self) -> list[dict]:
        return [json.loads(line) for line in (self.task / "state" / "journal.jsonl").read_text().splitlines()]

    def harness_files_intact(self) -> bool:
        """The files the harness put into HOME are still there, unchanged."""
        return all((self.home / name).read_bytes() == data for name, data in self.harness_files.items())


def pointer_of(run: Run, prompt: str) -> str:
    """The one line added to the prompt when the bundle works; the prompt came on the CLI's stdin."""
    given = run.record["stdin"]
    assert given.startswith(prompt + "\n\n"), given[-600:]
    added = given[len(prompt) + 2:]
    assert "\n" not in added and added.startswith(POINTER_START)
    return added
