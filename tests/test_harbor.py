"""The Harbor integration (integrations/harbor/) with the real `harbor` package from PyPI.

Harbor runs in a venv of its own (`.ci/harbor/venv`, installed by `make test-deps`: it needs Python >= 3.12
and packages of its own). Its agent factory loads each class from the folder `pack.sh harbor` writes, as
`harbor run --agent posttrain_aci_harbor:<Class>` does; their CLI install commands render unchanged
(tests/harbor_render.py). Then `harbor run` itself runs whole trials on a PostTrainBench-shaped task (the
workspace /home/agent/workspace with evaluate.py, templates/ and a timer.sh reading /timer_start, which the
task's healthcheck writes; final_model a mounted volume; ../test_data.json) in a container-less sandbox
(tests/harbor_sandbox.py, bubblewrap: Docker is not available here), with the real agent CLIs of the
current lane against a recording model API, and the task's verifier checks what the agent left behind.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from aci import toybench
from tests import agent_clis, ptb_helpers
from tests.agent_clis import RecordingAPI, tool_names
from tests.ptb_helpers import FIXTURES, POINTER_START, PTB, ROOT, TIMER, render_prompt

HARBOR = ROOT / ".ci" / "harbor" / "venv" / "bin"
WORKSPACE = "/home/agent/workspace"
VOLUME = f"{WORKSPACE}/final_model"
TEST_KEY = "harbor-test-key-4f7c1d"  # Harbor redacts key values in its records: one that matches no word
CLASSES = {  # class, model, the prefix its CLI gives our tools, how Harbor's launch line starts
    "claude-code": ("ClaudeCodeACI", "anthropic/stand-in-model", "mcp__posttrain-aci__", "claude --verbose"),
    "codex": ("CodexACI", "openai/stand-in-model", "mcp__posttrain-aci__", "codex exec"),
    "opencode": ("OpenCodeACI", "openai/stand-in-model", "posttrain-aci_", "opencode --model="),
}
TOOLS = ["contamination", "eval-checkpoint", "finalize", "histogram", "log-state", "plan", "run-trajectory", "status",
         "train", "verify-task"]
TASK_TOML = f"""schema_version = "1.4"

[environment]
workdir = "{WORKSPACE}"
allow_internet = true

[environment.env]
HF_HOME = "/root/hf"

# As PostTrainBench's tasks do: the timer starts when the healthcheck first passes, before the agent's setup.
[environment.healthcheck]
command = "test -f /timer_start || date +%s > /timer_start"
interval_sec = 1
timeout_sec = 5
start_period_sec = 0
start_interval_sec = 1
retries = 3

[agent]
timeout_sec = 600.0

[verifier]
timeout_sec = 60.0

[[artifacts]]
source = "{WORKSPACE}"
destination = "workspace"
exclude = ["final_model"]
"""
# The verifier: reward 1 when nothing of the bundle's instructions is left in the workspace (state/, the
# run's history, may stay) and the final_model volume still holds what it was given.
VERIFIER = f"""#!/bin/bash
mkdir -p /logs/verifier
cd {WORKSPACE}
left="$(find . -path ./state -prune -o \\( -name SKILL.md -o -name .aci \\) -print
grep -rl posttrain-aci --exclude-dir=state . 2>/dev/null)"
printf '%s\\n' "$left" > /logs/verifier/leftovers.txt
if [ -z "$left" ] && [ "$(cat final_model/weights.txt)" = "given" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
"""
TIMER_FROM_START = TIMER.replace("CREATION_DATE={created}", 'CREATION_DATE="$(cat /timer_start)"').replace(
    "NUM_HOURS={hours}", "NUM_HOURS=10")


def harbor() -> Path:
    if not (HARBOR / "harbor").exists():
        agent_clis.missing(f"Harbor ({HARBOR.parent})")
    if not shutil.which("bwrap"):
        agent_clis.missing("bubblewrap (bwrap), the Harbor test's sandbox")
    return HARBOR


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> Path:
    harbor()
    wheels = ptb_helpers.build_wheels(tmp_path_factory)
    out = tmp_path_factory.mktemp("harbor") / "agents"
    subprocess.run(["bash", str(PTB / "pack.sh"), "harbor", str(out), "--wheel", str(wheels["aci"]), "--pip-wheel",
                    str(wheels["pip"])], check=True, capture_output=True)
    return out


def harbor_env(packed: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in agent_clis.KEYS and k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    return {**env, "PYTHONPATH": f"{ROOT}:{packed}", "LITELLM_LOCAL_MODEL_COST_MAP": "True", **extra}


def make_task(root: Path) -> Path:
    """A Harbor task shaped like PostTrainBench's: the instruction names the model and benchmark (backticks
    escaped, as in its instruction.md) and says final_model is a mounted volume to write into."""
    task, ws = root / "task", root / "task" / "environment" / WORKSPACE.lstrip("/")
    (ws / "templates").mkdir(parents=True)
    (ws / "final_model").mkdir()
    (ws / "final_model" / "weights.txt").write_text("given")  # the volume's content (the sandbox mounts it)
    shutil.copy(FIXTURES / "evaluate.py", ws / "evaluate.py")
    shutil.copy(toybench.ASSETS / "templates" / "qwen.jinja", ws / "templates" / "qwen3.jinja")
    (ws / "timer.sh").write_text(TIMER_FROM_START)
    (ws / "timer.sh").chmod(0o755)
    (ws.parent / "test_data.json").write_text(json.dumps([{"question": "What is 2 + 3?", "answer": "5"}]))
    (task / "tests").mkdir()
    (task / "tests" / "test.sh").write_text(VERIFIER)
    (task / "task.toml").write_text(TASK_TOML)
    (task / "instruction.md").write_text(render_prompt(form="raw") + "\n\nNote: `final_model` is a mounted volume "
                                         "that exists already: write the model into it, keep the folder itself.\n")
    return task


def run_trial(tmp_path: Path, packed: Path, agent: str, api: RecordingAPI) -> Path:
    """`harbor run` of one trial with the current lane's real CLI; returns the trial's folder."""
    cls, model = CLASSES[agent][:2]
    lane = agent_clis.bin_dir("current")
    agent_env = {**agent_clis.QUIET, **agent_clis.MCP_UP_FRONT}
    if agent == "claude-code":
        agent_env["ANTHROPIC_BASE_URL"] = api.url
    command = [str(harbor() / "harbor"), "run", "--path", str(make_task(tmp_path)), "--agent",
               f"posttrain_aci_harbor:{cls}", "--model", model, "--ak", "skip_install=true",
               *(["--base-url", f"{api.url}/v1"] if agent != "claude-code" else []),
               *[arg for k, v in agent_env.items() for arg in ("--ae", f"{k}={v}")],
               "--env", "tests.harbor_sandbox:LocalSandbox", "--ek", f"volume={VOLUME}",
               "--ek", f"host_paths={sys.base_prefix}", "--ek", f"path={lane}:{agent_clis.NODE22}:{Path(sys.executable).parent}",
               "-o", str(tmp_path / "jobs"), "-y"]
    key = {"ANTHROPIC_API_KEY": TEST_KEY} if agent == "claude-code" else {"OPENAI_API_KEY": TEST_KEY}
    proc = subprocess.run(command, cwd=ROOT, env=harbor_env(packed, **key), capture_output=True, text=True, timeout=540)
    trials = [p.parent for p in (tmp_path / "jobs").glob("*/*/result.json")]
    assert len(trials) == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    return trials[0]


def sandbox_commands(trial: Path) -> list[dict]:
    return [json.loads(line) for line in (trial / "sandbox-exec.jsonl").read_text().splitlines()]


# -- loading and rendering ----------------------------------------------------------------------------------
def ours(entries: list[dict]) -> list[list[str]]:
    """Our sandbox.sh calls, as [action, agent, rest...]."""
    return [shlex.split(e["command"])[2:] for e in entries if "/tmp/posttrain_aci_bundle/sandbox.sh" in e.get("command", "")]


def launch_of(entries: list[dict], agent: str) -> dict:
    return next(e for e in entries if CLASSES[agent][3] in e.get("command", ""))


def given(launch: dict) -> str:
    """Where Harbor's launch carries the instruction: its command line or (Claude Code) an environment variable."""
    return "\n".join([launch["command"], *launch["env"].values()])


def test_harbor_loads_each_class_by_import_path_and_renders_what_it_runs(tmp_path, packed):
    out = tmp_path / "render.json"
    subprocess.run([str(harbor() / "python"), "-m", "tests.harbor_render", str(packed), str(out)], cwd=ROOT,
                   env=harbor_env(packed), check=True, capture_output=True, timeout=120)
    found = json.loads(out.read_text())
    instruction, pointer = found["instruction"], found["pointer"]
    bases = {"ClaudeCodeACI": "harbor.agents.installed.claude_code:ClaudeCode",
             "CodexACI": "harbor.agents.installed.codex:Codex", "OpenCodeACI": "harbor.agents.installed.opencode:OpenCode"}
    for agent, (cls, *_) in CLASSES.items():
        got = found[cls]
        assert got["mro"][0] == f"posttrain_aci_harbor:{cls}" and bases[cls] in got["mro"], got["mro"]
        assert got["name"] == agent and got["setup_timeout"] >= 1000  # our setup has 900 s of its own
        installs = " ".join(got["install"])
        package = {"claude-code": "claude-code", "codex": "@openai/codex", "opencode": "opencode"}[agent]
        assert package in installs and "posttrain" not in installs  # Harbor's own CLI install, untouched
        # configure: the bundle uploaded and set up; run: the run card, Harbor's launch with the pointer, the end
        sandbox = got["sandbox"]
        uploads = [e["upload"] for e in sandbox if "upload" in e and e["upload"].startswith("/tmp/posttrain_aci_bundle/")]
        assert sorted(Path(u).name for u in uploads) == sorted(p.name for p in (packed / "posttrain_aci_bundle").iterdir())
        assert ours(sandbox) == [["setup", agent], ["plan", agent], ["end", agent, "the agent exited"]]
        plan = next(e for e in sandbox if "sandbox.sh plan" in e.get("command", ""))
        assert plan["env"] == {"PROMPT": instruction}
        launch = launch_of(sandbox, agent)
        assert sandbox.index(plan) < sandbox.index(launch)
        assert f"{instruction}\n\n{pointer}" in given(launch)  # the instruction, with the pointer line
    claude = launch_of(found["ClaudeCodeACI"]["sandbox"], "claude-code")["command"]
    assert "--thinking-display summarized" in claude and "--effort high" in claude
    config = next(e["text"] for e in found["CodexACI"]["sandbox"] if e.get("upload", "").endswith("codex-home/config.toml"))
    assert '[mcp_servers.posttrain-aci]' in config and "required = true" in config and '"HF_HOME"' in config

    # Setup failed: the agent runs with the instruction unchanged; the end still takes out what setup left.
    failing = found["setup-fails"]["sandbox"]
    assert ours(failing) == [["setup", "claude-code"], ["end", "claude-code", "the agent exited"]]
    assert pointer not in given(launch_of(failing, "claude-code")) and instruction in given(launch_of(failing, "claude-code"))
    assert "pack.sh harbor DIR" in found["no-bundle"]


# -- whole trials ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("agent", list(CLASSES))
def test_harbor_trial_gives_the_cli_the_tools_and_takes_the_bundle_out_before_the_verifier(agent, tmp_path, packed):
    model, prefix = CLASSES[agent][1:3]
    trial_holder: list[Path] = []

    def time_up(n: int) -> None:  # Claude Code's Stop hook sent it back once; now the deadline passes
        if n == 2:
            roots = list((tmp_path / "jobs").glob("*/*/sandbox-root"))
            (roots[0] / "timer_start").write_text("1000000000\n")

    with RecordingAPI(replies=3 if agent == "claude-code" else 0, on_reply=time_up) as api:
        trial_holder.append(run_trial(tmp_path, packed, agent, api))
        turns = api.main_requests(model.split("/")[1])
    trial = trial_holder[0]
    result = json.loads((trial / "result.json").read_text())
    seen = json.dumps(turns[0])
    names = [t for t in tool_names(turns[0]) if t.startswith(prefix)]
    if agent == "codex":  # Codex groups a server's tools in one namespace entry, `-` spelled `_`
        names = [prefix + t["name"].replace("_", "-") for e in turns[0]["tools"] if e.get("name") == "mcp__posttrain_aci"
                 for t in e["tools"]]
    assert names == [prefix + t for t in TOOLS], seen[:2000]
    assert POINTER_START in seen and "Post-training with posttrain-aci" in seen  # the prompt's line, the pointer

    # The commands, in order: the bundle's setup in the workspace, the run card, Harbor's launch, the end.
    ran = sandbox_commands(trial)
    steps = [c for c in ran if "/tmp/posttrain_aci_bundle/sandbox.sh" in c["command"]]
    assert [s[:2] for s in ours(ran)] == [["setup", agent], ["plan", agent], ["end", agent]]
    assert all(c["cwd"] == WORKSPACE and c["return_code"] == 0 for c in steps), steps
    assert ran.index(steps[1]) < ran.index(launch_of(ran, agent)) < ran.index(steps[2])

    # What the verifier and the judges get: the workspace without the bundle, final_model's volume as given,
    # state/ with the run card (deadline from timer.sh) and a last journal entry that says how the run ended.
    assert (trial / "verifier" / "leftovers.txt").read_text().strip() == ""
    assert result["verifier_result"]["rewards"]["reward"] == 1.0
    workspace = trial / "artifacts" / "workspace"
    made = {p.relative_to(workspace).as_posix() for p in workspace.rglob("*") if p.is_file() and "state" not in p.parts}
    # The task's files; OpenCode adds a .gitignore of its own to the .opencode/ folder it finds.
    assert made - {".opencode/.gitignore"} == {"evaluate.py", "templates/qwen3.jinja", "timer.sh"}, made
    card = json.loads((workspace / "state" / "run.json").read_text())
    assert card["profile"] == "posttrainbench" and card["base_model"] == "Qwen/Qwen3-1.7B-Base"
    assert 9.9 <= card["budget_hours"] <= 10.0  # timer.sh's 10 hours from /timer_start, just written
    journal = [json.loads(line) for line in (workspace / "state" / "journal.jsonl").read_text().splitlines()]
    last = journal[-1]
    assert last["kind"] == "end" and last["message"].startswith("Run ended: ")
    if agent == "claude-code":
        # The Stop hook kept it working, then, with the deadline passed, asked once for a last message that
        # says why the run ends; the agent stopped and the trial ended cleanly.
        assert len(turns) == 3 and "Do not stop:" in json.dumps(turns[1]["messages"][-1])
        assert "Stopping is fine now: the deadline has passed" in json.dumps(turns[2]["messages"][-1])
        assert result["exception_info"] is None
        assert last["message"] == ("Run ended: the agent exited; the deadline has passed; no final_model has been "
                                   "promoted")
        assert journal[-2]["kind"] == "end" and journal[-2]["message"].startswith("Stop guard: stopping is fine")
    else:  # the recorder refuses every request: the CLI fails, and the bundle still comes out
        assert result["exception_info"] is not None
        assert "the agent exited with an error" in last["message"]
