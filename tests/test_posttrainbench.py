"""The PostTrainBench submissions (integrations/posttrainbench/), run the way the harness runs them.

Facts from the harness as it runs today (surelyMersad/PostTrainBench-harbor@e7f226a, branch
harbor-with-v1.1-judges, which merges aisa-group's new_judge_v2 at 217450c): run_task.sh stops without
agents/<name>/api_keys.json (`{"allowed_api_keys": [...]}`), starts the sandbox with a clean environment
holding only those keys (and the benchmark's), PATH with ~/.local/bin first, PROMPT and AGENT_CONFIG;
copies only agents/<name>/solve.sh into it, as ~/agent_solve.sh, and runs it with bash in ~/task
(evaluate.py, templates/, the timer.sh create_timer.sh writes), with ~/.codex/config.toml from its
other_home_data (a trusted /home/, and a shell PATH without ~/.local/bin), and beside the task
~/update_agent_cli.sh (the harness's CLI update: the newest CLI npm-installed into ~/.local), the shared
~/contamination_check.py and the test items ~/test_data.json. Its own solve.sh files run
`update_agent_cli.sh <cli>`, then pipe the prompt into the CLI on stdin. PROMPT comes from get_prompt.py,
which fills a template whose backticks are escaped (tests/fixtures/ptb_prompt_template.txt has its shape,
in our words), adds a non-interactive line for every agent name containing `claude`, and reaches the
container raw or evaluated inside double quotes (Apptainer). The image's Python 3.10 has neither pip nor
the venv module. The judges run afterwards in the same task folder and HOME; the trace parser is picked
by the agent name's substring (src/trace_parsing/parse_trace.py).

The agent CLI here is a stand-in (tests/fixtures/stand_in_agent.py) that records its exact argv and stdin
and, where asked, speaks MCP to the server registered where that agent reads it; tests/test_agent_clis.py
runs the real CLIs. The "container" is this test's interpreter (torch, transformers, trl and all of
posttrain-aci's requirements; pip offline) or, where the test says so, a Python 3.10 without pip, venv
or network.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import agent_clis, ptb_helpers
from tests.ptb_helpers import (
    BENCHMARK,
    LAUNCH,
    MODEL,
    PTB,
    ROOT,
    Run,
    pointer_of,
    render_prompt,
    stack_versions,
)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict:
    return ptb_helpers.build_wheels(tmp_path_factory)


@pytest.fixture(scope="module")
def packed(tmp_path_factory, wheels) -> dict:
    return ptb_helpers.pack_all(tmp_path_factory, wheels)


@pytest.fixture(scope="module")
def python310_container(tmp_path_factory) -> Path:
    return ptb_helpers.python310_container(tmp_path_factory)


# -- the prompt -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("form", ["raw", "evaluated"])
def test_model_and_benchmark_are_read_from_both_prompt_forms(form):
    prompt = render_prompt("Qwen/Qwen3-4B-Base", form=form)
    assert ("\\`" in prompt) == (form == "raw")
    out = subprocess.run(["bash", "-c", f'. "{PTB / "common.sh"}"; aci_parse_prompt "$PROMPT"'], capture_output=True,
                         text=True, env={**os.environ, "PROMPT": prompt}, check=True)
    assert out.stdout.splitlines() == ["Qwen/Qwen3-4B-Base", BENCHMARK]


# -- each agent, as the harness starts it -----------------------------------------------------------------
KEYS = {"claude-code": ["ANTHROPIC_API_KEY"], "codex": ["CODEX_API_KEY"],  # as the harness's own agents name them
        "opencode": ["OPENCODE_API_KEY", "ZAI_API_KEY", "MODEL_API_KEY"]}


@pytest.mark.parametrize("agent", list(LAUNCH))
def test_each_agent_starts_as_the_harness_starts_it_and_finds_the_tools(agent, tmp_path, packed):
    before = stack_versions(sys.executable)
    run = Run(tmp_path, agent)
    prompt = render_prompt(agent=packed[agent].parent.name)
    assert ("non-interactive" in prompt) == (agent == "claude-code")  # get_prompt.py's note, by the folder's name
    proc = run.run(packed[agent], prompt, STAND_IN_MODE="mcp")
    assert proc.returncode == 0, proc.stderr[-4000:]
    rec = run.record

    # The harness's launch line, the harness prompt on stdin plus one line; the CLI the update installed.
    assert rec["argv"] == LAUNCH[agent][1:] and rec["cwd"] == str(run.task)
    assert rec["cli"] == str(run.home / ".local" / "bin" / LAUNCH[agent][0]) and rec["aci_link"]
    assert "updated into" in (run.home / "cli_version.txt").read_text()
    pointer = pointer_of(run, prompt)
    aci = run.home / ".posttrain-aci" / "venv" / "bin" / "aci"
    assert f"by the command {aci} " in pointer and str(run.home / ".posttrain-aci" / "setup.log") in pointer
    env = rec["env"]
    assert json.loads((packed[agent].parent / "api_keys.json").read_text()) == {"allowed_api_keys": KEYS[agent]}
    assert {k for k in ptb_helpers.API_KEYS if env.get(k)} == set(KEYS[agent])  # only what api_keys.json names
    if agent == "claude-code":
        assert env["CLAUDE_CODE_EFFORT_LEVEL"] == "high" and env["BASH_MAX_TIMEOUT_MS"] == "36000000"
    elif agent == "codex":
        assert ".codex/skills/posttrain/SKILL.md" in rec["files"]  # ~/.codex/skills
        assert rec["server_env"]["HF_HOME"] == str(run.home / "hf")  # passed through env_vars
    assert ".aci/SKILL.md" in rec["files"]

    # The registered server is the installed bundle, answers, and plan took its deadline from timer.sh.
    assert Path(rec["server"][0]) == run.home / ".posttrain-aci" / "venv" / "bin" / "python"
    assert {"plan", "status", "train", "eval-checkpoint", "finalize"} <= set(rec["tools"])
    card = rec["plan"]["card"]
    assert rec["plan"]["deadline_source"] == "timer.sh" and 9.9 <= card["budget_hours"] <= 10.0
    assert card["profile"] == "posttrainbench" and card["base_model"] == MODEL and card["benchmark"] == BENCHMARK
    assert card["eval_command"].startswith("python evaluate.py --model-path {model_path}")
    assert rec["status"]["state"]["has_run_card"] and rec["skill"].startswith("---")
    assert "the MCP server answers with 10 tools" in run.log

    # The harness's test items and decontamination tool beside the task: the reference is pinned without
    # being named, and under the strict profile the provided tool's verdict stands beside ours.
    contamination = rec["contamination"]
    assert contamination["reference"] == str(run.home / "test_data.json")
    assert contamination["verdict"] == "fail" and contamination["lines"] == [1]
    assert contamination["shared_tool"]["verdict"] == "fail" and contamination["shared_tool"]["lines"] == [1]

    # Afterwards: the container's ML stack untouched, no instructions left for the judges, state/ kept with
    # a last journal entry that says how the run ended, the harness's files in HOME as they were.
    assert stack_versions(sys.executable) == before
    assert "ML stack unchanged" in run.log
    assert run.leftovers() == []
    assert (run.task / "state" / "run.json").is_file()
    last = run.journal()[-1]
    assert last["kind"] == "end" and last["message"].startswith("Run ended: the agent exited with status 0; 9h")
    assert run.harness_files_intact()
    if agent == "opencode":  # the harness's own settings stay, its providers included
        config = json.loads((run.task / "opencode.json").read_text())
        assert config["permission"] == "allow" and set(config["provider"]) == {"anthropic", "openai", "opencode",
                                                                               "zai", "meta"}
        assert config["provider"]["zai"]["options"]["baseURL"] == "https://api.z.ai/api/paas/v4" and "mcp" not in config
    if agent == "codex":
        assert "shell_environment_policy" in (run.home / ".codex" / "config.toml").read_text()


# -- the acceptance check: the image's Python 3.10, no pip, no venv module, no network -----------------------
@pytest.mark.parametrize("form", ["evaluated", "raw"])
def test_packed_claude_code_in_python310_without_pip_venv_or_network(form, tmp_path, packed, python310_container):
    index = agent_clis.wheelhouse()  # stands in for PyPI: a folder, since there is no network
    run = Run(tmp_path, "claude-code")
    prompt = render_prompt(form=form)
    proc = run.run(packed["claude-code"], prompt, python_bin=python310_container, net=False, STAND_IN_MODE="mcp",
                   PIP_FIND_LINKS=str(index))
    assert proc.returncode == 0, proc.stderr[-4000:]
    rec = run.record
    assert rec["argv"] == LAUNCH["claude-code"][1:]
    pointer_of(run, prompt)
    assert "writing the venv by hand" in run.log  # no venv module
    assert {"plan", "status"} <= set(rec["tools"]) and rec["plan"]["card"]["base_model"] == MODEL
    venv_python = run.home / ".posttrain-aci" / "venv" / "bin" / "python"
    assert subprocess.run([str(venv_python), "-c", "import sys; assert sys.version_info[:2] == (3, 10)"]).returncode == 0
    assert not list((python310_container.parent / "lib" / "python3.10" / "site-packages").iterdir())  # untouched
    assert run.leftovers() == []


# -- whatever fails, the agent starts ---------------------------------------------------------------------
FAILURES = {
    # name: (needs the 3.10 container, packed, pointer expected, text expected in the log)
    "no-venv-module": (False, True, True, "writing the venv by hand"),
    "no-pip-no-uv": (True, False, False, "no pip: none packed into this script"),
    "no-index": (True, True, False, "cannot install posttrain-aci's requirements"),
    "broken-wheel": (False, True, False, "cannot install"),
    "setup-hangs": (False, True, False, "setup stopped after 5s"),
    "unparsable-prompt": (False, True, True, "no model and benchmark in the prompt"),
    "plan-init-fails": (False, True, True, "no run card yet"),
}


@pytest.mark.parametrize("case", list(FAILURES))
def test_whatever_fails_in_setup_the_agent_starts_with_the_harness_prompt(case, tmp_path, packed, wheels, request):
    in_310, is_packed, works, logged = FAILURES[case]
    run = Run(tmp_path, "claude-code", update=False)  # the harness's older branches place no update script
    prompt = "Improve the model on the benchmark." if case == "unparsable-prompt" else render_prompt(form="raw")
    extra: dict = {}
    python_bin = request.getfixturevalue("python310_container") if in_310 else Path(sys.executable).parent
    if case in ("no-venv-module", "setup-hangs"):
        wrapper = tmp_path / "pybin" / "python"
        wrapper.parent.mkdir()
        reaction = "sleep 60" if case == "setup-hangs" else 'echo "No module named venv" >&2; exit 1'
        wrapper.write_text(f'#!/bin/bash\nif [ "$1 $2" = "-m venv" ]; then {reaction}; fi\nexec "{sys.executable}" "$@"\n')
        wrapper.chmod(0o755)
        extra["ACI_PYTHON"] = str(wrapper)
        if case == "setup-hangs":
            extra["ACI_SETUP_TIMEOUT"] = "5"
    if case == "broken-wheel":
        broken = tmp_path / "posttrain_aci-0.1.0-py3-none-any.whl"
        broken.write_bytes(b"not a zip file")
        extra["ACI_PACKAGE"] = str(broken)
    if case == "no-pip-no-uv":
        extra["ACI_PACKAGE"] = str(wheels["aci"])
    if case == "plan-init-fails":  # (an unreadable timer.sh no longer fails it: the run card's clock stands in)
        extra["ACI_STATE"] = "/dev/null/state"  # no state folder can be made there
    script = packed["claude-code"] if is_packed else PTB / "claude-code" / "solve.sh"
    started = time.monotonic()
    proc = run.run(script, prompt, python_bin=python_bin, net=not in_310, **extra)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert run.record["argv"] == LAUNCH["claude-code"][1:]
    assert run.record["cli"] == str(run.bin / "claude")  # no update script: the image's CLI
    if works:
        pointer_of(run, prompt)
    else:
        assert run.record["stdin"] == prompt  # the harness prompt, unchanged
        assert "starting the agent without posttrain-aci" in run.log
    assert logged in run.log, run.log[-2000:]
    assert run.leftovers() == []
    if case == "setup-hangs":
        assert time.monotonic() - started < 60


# -- the judges are not steered ---------------------------------------------------------------------------
def wait_for(path: Path, seconds: float = 120) -> None:
    end = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.2)


def test_term_stops_the_agent_and_takes_the_instructions_out(tmp_path, packed):
    run = Run(tmp_path, "codex")
    proc = run.start(packed["codex"], render_prompt(), STAND_IN_MODE="sleep")
    wait_for(run.record_path)
    assert ".aci/SKILL.md" in run.record["files"] and (run.home / ".codex" / "skills" / "posttrain").is_dir()
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 143
    assert run.record["signal"] == "TERM"
    assert run.leftovers() == [] and run.harness_files_intact()
    assert run.journal()[-1]["message"].startswith("Run ended: the harness sent TERM to solve.sh; ")


def test_agent_still_running_after_the_deadline_is_stopped_before_the_harness_kills_the_container(tmp_path, packed):
    run = Run(tmp_path, "opencode")
    run.write_timer(hours=1, created=int(time.time()) - 3600 + 50)  # the deadline is 50 s away (setup takes ~20)
    started = time.monotonic()
    proc = run.start(packed["opencode"], render_prompt(), STAND_IN_MODE="sleep", ACI_STOP_AFTER_DEADLINE="5")
    out, err = proc.communicate(timeout=300)
    assert run.record["signal"] == "TERM", err[-2000:]
    assert "the timer's deadline passed 5s ago: stopping the agent" in err
    assert 50 <= time.monotonic() - started < 200
    assert "the run ended: solve.sh stopped the agent 5s after the timer's deadline" in err  # in the trace
    assert run.leftovers() == []


def test_instructions_are_taken_out_even_when_the_agent_broke_the_venv(tmp_path, packed):
    run = Run(tmp_path, "claude-code")
    proc = run.run(packed["claude-code"], render_prompt(), STAND_IN_MODE="break-venv")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert ".aci/SKILL.md" in run.record["files"]
    assert "removing the bundle's instruction files by hand" in run.log
    assert run.leftovers(registrations=False) == []  # the judges read no registration; the harness resets theirs


# -- packing ----------------------------------------------------------------------------------------------
def test_pack_writes_one_self_contained_solve_sh_its_api_keys_and_the_trace_parser(tmp_path, wheels, packed):
    script = packed["opencode"]
    text = script.read_text()
    assert "../common.sh" not in text and "aci_setup_steps() {" in text and "aci_packed_files() {" in text
    assert text.index("aci_packed_files() {") < text.index("aci_update_cli opencode") < text.index('aci_setup "')
    assert (script.parent / "human_readable_trace.py").read_bytes() == (PTB / "human_readable_trace.py").read_bytes()
    assert (script.parent / "api_keys.json").read_bytes() == (PTB / "opencode" / "api_keys.json").read_bytes()
    subprocess.run(["bash", "-c", f'eval "$(sed -n "/^aci_packed_files() {{/,/^}}/p" {script})"; aci_packed_files {tmp_path}'],
                   check=True)
    for wheel in wheels.values():
        assert (tmp_path / wheel.name).read_bytes() == wheel.read_bytes()
    usage = subprocess.run(["bash", str(PTB / "pack.sh"), "gemini", str(tmp_path)], capture_output=True, text=True)
    assert usage.returncode == 2 and "usage: pack.sh" in usage.stderr


@pytest.mark.parametrize("agent,name", [("claude-code", "cc_aci"), ("codex", "codex_claude_aci"),
                                        ("opencode", "opencode_gemini")])
def test_pack_refuses_a_folder_name_the_harness_would_misread(agent, name, tmp_path, wheels):
    """The harness picks the trace parser (and the claude note) by substring of the folder's name."""
    out = subprocess.run(["bash", str(PTB / "pack.sh"), agent, str(tmp_path / name), "--wheel", str(wheels["aci"]),
                          "--pip-wheel", str(wheels["pip"])], capture_output=True, text=True)
    assert out.returncode == 2 and f"the folder name '{name}' must contain" in out.stderr
    assert not (tmp_path / name).exists()


def test_version_check_fails_when_the_stack_changed(tmp_path):
    snapshot = tmp_path / "before.txt"

    def common(*lines: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", f'. "{PTB / "common.sh"}"\n' + "\n".join(lines)], capture_output=True,
                              text=True, timeout=60)

    ok = common(f'aci_versions "{sys.executable}" > {snapshot}', f'(aci_check_versions {snapshot} "{sys.executable}")',
                "echo still-here")
    assert ok.returncode == 0 and "still-here" in ok.stdout
    lines = snapshot.read_text().splitlines()
    assert lines[0].startswith("torch==") and any(x.startswith("trl==") for x in lines)
    snapshot.write_text("\n".join(["torch==0.0.1", *lines[1:]]) + "\n")
    bad = common(f'(aci_check_versions {snapshot} "{sys.executable}") || echo "failed $?"')
    assert "failed 1" in bad.stdout and "ML stack changed" in bad.stderr and "torch==0.0.1" in bad.stderr


# -- the trace parser the harness's main branch runs per agent folder ----------------------------------------
TRACES = {  # recorded stream -> what the transcript must show, in order
    "claude": ["[posttrain-aci] ready", "session start: model claude-opus-4-5", "posttrain-aci (connected)",
               "tool call mcp__posttrain-aci__status [toolu_01]:", "tool result [toolu_01]:", '"time_left": "9h 58m"',
               "tool call Bash [toolu_02]:", "    python evaluate.py --model-path final_model --limit 10",
               "tool result [toolu_02] (error):", "assistant:", "result: success, 3 turns"],
    "codex": ["session start: thread 0199", "reasoning:", "command (exit 0, completed):",
              "    $ bash -lc 'bash timer.sh'", "    9:41", "tool call posttrain-aci.plan (completed):",
              "file change (completed):", "    add train_sft.py", "assistant:", "turn completed"],
    "opencode": ["[posttrain-aci] ready", "step start", "tool call bash (completed):", "    bash timer.sh",
                 "tool call posttrain-aci_status (completed):", "assistant:", "step finish: stop", "error: APIError"],
}


@pytest.mark.parametrize("agent", list(TRACES))
def test_trace_parser_turns_each_agents_stream_into_a_transcript(agent, tmp_path):
    out = tmp_path / "solve_parsed.txt"
    subprocess.run([sys.executable, str(PTB / "human_readable_trace.py"), str(ROOT / "tests" / "data" / "ptb_traces" /
                    f"{agent}.txt"), "-o", str(out)], check=True)
    text = out.read_text()
    position = 0
    for expected in TRACES[agent]:
        found = text.find(expected, position)
        assert found >= 0, f"{expected!r} missing after position {position} in:\n{text}"
        position = found
    assert "{" not in text.splitlines()[0]  # events are formatted, not dumped
