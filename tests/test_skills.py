"""The Markdown half of the product, tested like code.

The checker (`tests/bundle_check.py`, a development module) must pass on the real bundle, and must fail
on each kind of defect it exists to catch: planted in a temporary copy of the Markdown, or made by
renaming a tool, an action or an option in the live registry. The entry skill's first five commands are run through the real CLI in
a simulated PostTrainBench task folder, and the MCP server is checked to serve the same Markdown and
the same tool names and arguments the Markdown uses.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import typing
from pathlib import Path

import pytest
import yaml
from pydantic import Field, create_model

from aci import bundle, registry
from tests import bundle_check
from tests.bundle_check import Doc, check, check_command, vocabulary

ROOT = bundle.root()
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def messages(problems) -> str:
    return "\n".join(str(p) for p in problems)


@pytest.fixture
def copy(tmp_path) -> Path:
    """A writable copy of the Markdown bundle (and state/README.md) to plant defects in."""
    dest = tmp_path / "bundle"
    dest.mkdir()
    for name in (*bundle_check.SHIPPED, *bundle_check.EXTRA_DOCS):
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name)
        elif src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def edit(path: Path, old: str, new: str, count: int = 1) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, count))


# -- the real bundle --------------------------------------------------------------------------------------
def test_bundle_agrees_with_tools_and_rules():
    problems = check()
    assert not problems, "\n" + messages(problems)


def test_bundle_is_complete():
    assert bundle.skill_names() == sorted(["recon", "data", "tool-use-synthesis", "train", "evaluate", "submit"])
    assert bundle.workflow_names() == ["posttrain", "recover", "tool-use-synthesis"]
    cards = {p.stem for p in (ROOT / "skills" / "recon" / "references").glob("*.md")}
    assert {"aime-2025", "arena-hard-writing", "bfcl", "gpqa", "gsm8k", "healthbench", "humaneval"} <= cards
    for card in cards - {"grader-checklist"}:
        text = (ROOT / "skills" / "recon" / "references" / f"{card}.md").read_text()
        assert "Sources:" in text and "[K]" in text and "[R]" in text, f"{card}: sources not marked"
        for section in ("What the grader wants", "Scores", "Data"):
            assert f"## {section}" in text, f"{card}: no '{section}' section"


def test_every_tool_is_named_in_the_entry_skill():
    text = (ROOT / "SKILL.md").read_text()
    for name in registry.tools():
        assert f"`aci {name}`" in text, f"SKILL.md does not list the tool {name}"


def test_the_checker_reads_many_commands():
    """Guard against a parser that silently finds nothing: the bundle names every tool with options."""
    seen: dict[str, set[str]] = {}
    for doc in bundle_check.documents(ROOT):
        code, _ = bundle_check.code_regions(doc)
        for _, snippet in code:
            for inv in bundle_check._invocations(bundle_check._split(snippet)):
                if inv and not inv[0].startswith("-"):
                    seen.setdefault(inv[0], set()).update(t for t in inv if t.startswith("--"))
    assert set(registry.tools()) <= set(seen)
    assert sum(len(v) for v in seen.values()) >= 40


@pytest.mark.parametrize("profile", ["posttrainbench", "default"])
def test_workflow_stages_are_what_plan_reports(tmp_path, profile):
    from aci.context import Context

    ctx = Context(state=tmp_path / "state", workdir=tmp_path)
    out = registry.call("plan", {"action": "init", "base_model": "m", "benchmark": "b", "profile": profile,
                                 "budget_hours": 10, "eval_command": "python e.py --model-path {model_path}"}, ctx)
    reported = [(p.name, p.gate, p.allocated_min) for p in out.phases]
    text = (ROOT / "workflows" / "posttrain.md").read_text()
    stages = [(m.group(2), m.group(3)) for m in map(bundle_check.STAGE_RE.match, text.splitlines()) if m]
    assert stages == [(name, gate) for name, gate, _ in reported]
    col = 2 if profile == "posttrainbench" else 3
    for name, _, minutes in reported:
        row = next(ln for ln in text.splitlines() if ln.startswith(f"| `{name}` |"))
        assert f"({minutes:g} min)" in row.split("|")[col + 1], (name, row)


# -- the command parser ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def vocab():
    return vocabulary()


@pytest.mark.parametrize("line, bad", [
    ("aci plan init --base-model m --benchmark b", None),
    ("aci --state /tmp/s --json status --last 5", None),
    ("aci plan init --eval-command='python x {model_path}'", None),
    ("aci plan init --force --benchmark b", None),
    ("aci plan init --no-force", None),
    ("aci log-state append --kind result --message 'a --fake in a value' | head", None),
    ("aci plan <action> --notes x", None),
    ("aci install codex --global", None),
    ("aci guard stop", None),
    ("aci plan iinit", "unknown action 'iinit'"),
    ("aci plan init --base-modle m", "unknown option --base-modle"),
    ("aci statuz", "unknown aci command 'statuz'"),
    ("aci --stat x status", "unknown global option --stat"),
    ("aci guard go", "unknown subcommand 'go'"),
    ("aci status --json", "unknown option --json"),
])
def test_check_command(vocab, line, bad):
    glob, commands = vocab
    problems = check_command(shlex.split(line)[1:], glob, commands)
    if bad is None:
        assert problems == []
    else:
        assert len(problems) == 1 and bad in problems[0]


def test_code_regions_fold_continuations_and_skip_prose(tmp_path):
    p = tmp_path / "x.md"
    p.write_text("Run `aci status` now.\n```bash\naci plan init \\\n  --bench x\n```\nthe aci tools\n")
    code, prose = bundle_check.code_regions(Doc(p, "x.md", p.read_text()))
    assert (1, "aci status") in code
    assert any(n == 3 and s.split() == ["aci", "plan", "init", "--bench", "x"] for n, s in code)
    assert any("the aci tools" in line for _, line in prose)
    assert not any("aci status" in line for _, line in prose)


# -- planted defects in a copy of the Markdown -------------------------------------------------------------
def test_renamed_tool_in_markdown_fails(copy):
    edit(copy / "SKILL.md", "aci status\n", "aci statuz\n")
    assert "unknown aci command 'statuz'" in messages(check(copy))


def test_renamed_option_in_markdown_fails(copy):
    edit(copy / "workflows" / "tool-use-synthesis.md", "--feature-set tool-use", "--features-set tool-use")
    assert "aci histogram: unknown option --features-set" in messages(check(copy))


def test_renamed_action_in_markdown_fails(copy):
    edit(copy / "skills" / "recon" / "SKILL.md", "aci plan update --targets", "aci plan upgrade --targets")
    assert "aci plan: unknown action 'upgrade'" in messages(check(copy))


def test_unknown_action_in_tools_table_fails(copy):
    edit(copy / "SKILL.md", "| `aci plan` | `init`, `show`, `update`", "| `aci plan` | `init`, `view`, `update`")
    assert "aci plan: table names unknown action 'view'" in messages(check(copy))


def test_unknown_command_in_prose_fails(copy):
    edit(copy / "workflows" / "recover.md", "Everything you need", "Run aci resume. Everything you need")
    assert "prose names unknown aci command 'resume'" in messages(check(copy))


def test_standalone_option_must_exist(copy):
    edit(copy / "skills" / "data" / "SKILL.md", "`--tokenizer <model dir>`", "`--tokeniser <model dir>`")
    assert "option --tokeniser is not an option of any aci command" in messages(check(copy))


def test_broken_link_fails(copy):
    (copy / "skills" / "recon" / "references" / "gpqa.md").unlink()
    out = messages(check(copy))
    assert "skills/recon/SKILL.md" in out and "broken link 'references/gpqa.md'" in out


def test_broken_anchor_fails(copy):
    edit(copy / "workflows" / "posttrain.md", "## Stage 4: submit (gate: finalized)", "## Stage 4: ship (gate: finalized)")
    out = messages(check(copy))
    assert "no heading #stage-4-submit-gate-finalized in posttrain.md" in out
    assert "stage headings" in out  # and the stage no longer matches the rules' phase


def test_link_leaving_the_bundle_fails(copy):
    edit(copy / "SKILL.md", "## The loop\n", "## The loop\nSee [state](state/README.md).\n")
    assert "leaves the shipped bundle" in messages(check(copy))


def test_missing_skill_reference_fails(copy):
    edit(copy / "SKILL.md", "## The loop\n", "## The loop\nThen open skills/finetune for more.\n")
    assert "skills/finetune does not exist" in messages(check(copy))


def test_rule_missing_from_integrity_md_fails(copy):
    path = copy / "rules" / "integrity.md"
    text = path.read_text()
    start = text.index("### keep-best")
    path.write_text(text[:start] + text[text.index("### end-of-turn"):])
    out = messages(check(copy))
    assert "rule 'keep-best' of rules.yaml has no '### keep-best' section" in out
    assert "#keep-best" in out  # SKILL.md's link to the section breaks too


def test_rule_missing_from_rules_yaml_fails(copy):
    path = copy / "rules" / "rules.yaml"
    data = yaml.safe_load(path.read_text())
    data["rules"] = [r for r in data["rules"] if r["id"] != "no-hosted-llm"]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert "section '### no-hosted-llm' names no rule in rules.yaml" in messages(check(copy))


def test_rule_section_must_name_its_enforcing_tools(copy):
    edit(copy / "rules" / "integrity.md", "**Tools.** `aci run-trajectory` checks every name",
         "**Tools.** It checks every name")
    assert "rule no-teacher-distillation: section does not say what `aci run-trajectory` does" in messages(check(copy))


def test_phase_share_drift_fails(copy):
    path = copy / "rules" / "rules.yaml"
    text = path.read_text()
    text = text.replace("{name: first-model, share: 0.20, gate: first-promoted}\n      - {name: iterate, share: 0.625",
                        "{name: first-model, share: 0.25, gate: first-promoted}\n      - {name: iterate, share: 0.575", 1)
    path.write_text(text)
    assert "phase first-model, profile posttrainbench: table says '20 % (120 min)', rules.yaml gives '25 % (150 min)'" \
        in messages(check(copy))


def test_reserve_and_minimum_figures_must_match_rules(copy):
    edit(copy / "skills" / "data" / "SKILL.md", "## 7. Size the set", "The final reserve is 50 min.\n\n## 7. Size the set")
    edit(copy / "rules" / "integrity.md", "at least max(32, 5 % of the benchmark)", "at least max(30, 5 % of the benchmark)")
    out = messages(check(copy))
    assert "final reserve of 50 min is in no profile" in out
    assert "minimum samples max(30, 5 %) differs" in out


@pytest.mark.parametrize("old, new, expect", [
    ("name: recon\n", "name: reconnaissance\n", "must equal the skill folder 'recon'"),
    ("name: recon\n", "name: Recon_Skill\n", "must be 1-64 characters"),
    ("description: Read a benchmark", "description: Read a <benchmark>", "must not contain < or >"),
    ("description: Read a benchmark", "description: " + "x" * 1100 + " Read a benchmark", "characters (max 1024)"),
    ("name: recon\n", "name: recon\nversion: 2\n", "front matter key 'version'"),
    ("---\nname: recon", "name: recon", "no front matter"),
])
def test_front_matter_defects_fail(copy, old, new, expect):
    edit(copy / "skills" / "recon" / "SKILL.md", old, new)
    assert expect in messages(check(copy))


def test_length_limits(copy):
    with open(copy / "SKILL.md", "a") as f:
        f.write("\n" * 120)
    with open(copy / "skills" / "train" / "SKILL.md", "a") as f:
        f.write("filler\n" * 500)
    out = messages(check(copy))
    assert "SKILL.md:" in out and "(must stay under 200)" in out
    assert "skills/train/SKILL.md" in out and "(must stay under 500)" in out


# -- renames in the live registry: the Markdown must notice -------------------------------------------------
def _replace_input(monkeypatch, tool_name: str, **changes):
    """Swap a registered tool's input model for a copy with fields renamed ({old: new}) or an action's
    choices replaced (action=(...))."""
    t = registry.tools()[tool_name]
    fields = {}
    for name, f in t.input.model_fields.items():
        ann = f.annotation
        if name == "action" and "action" in changes:
            ann = typing.Literal[changes["action"]]
            f = Field(changes["action"][0], description=f.description)
        fields[changes.get("rename", {}).get(name, name)] = (ann, f)
    model = create_model(f"Renamed{t.input.__name__}", __base__=registry.ToolInput, **fields)
    monkeypatch.setitem(registry._REGISTRY, tool_name, dataclasses.replace(t, input=model))


def test_tool_renamed_in_registry_fails(monkeypatch):
    t = registry.tools()["status"]
    monkeypatch.delitem(registry._REGISTRY, "status")
    monkeypatch.setitem(registry._REGISTRY, "run-status", dataclasses.replace(t, name="run-status"))
    out = messages(check())
    assert "unknown aci command 'status'" in out and "SKILL.md" in out


def test_option_renamed_in_registry_fails(monkeypatch):
    _replace_input(monkeypatch, "plan", rename={"eval_command": "eval_cmd"})
    out = messages(check())
    assert "aci plan: unknown option --eval-command" in out


def test_action_renamed_in_registry_fails(monkeypatch):
    _replace_input(monkeypatch, "log-state", action=("add", "summary"))
    assert "aci log-state: unknown action 'append'" in messages(check())


# -- installed copies keep working links ----------------------------------------------------------------------
def test_installed_bundle_links_resolve(tmp_path, monkeypatch):
    from aci.install import install

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    wd = tmp_path / "work"
    wd.mkdir()
    install("claude-code", wd)
    docs = sorted((wd / ".claude" / "skills").rglob("*.md")) + sorted((wd / ".aci").rglob("*.md"))
    assert (wd / ".claude" / "skills" / "posttrain" / "SKILL.md") in docs
    broken = []
    for p in docs:
        broken += [f"{p.relative_to(wd)}:{n}: {m}" for n, m in bundle_check.broken_links(Doc(p, p.name, p.read_text()))]
    assert not broken, "\n".join(broken)


# -- the first five commands, as a new user would run them ------------------------------------------------
def first_five_commands() -> list[str]:
    text = (ROOT / "SKILL.md").read_text()
    section = text[text.index("## The first five minutes"):]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [ln.strip() for ln in block.splitlines() if ln.strip() and not ln.strip().startswith("#")]


def test_entry_skill_gives_five_commands_for_gsm8k():
    cmds = first_five_commands()
    assert len(cmds) == 5
    assert cmds[0].startswith("aci plan init") and "--eval-command" in cmds[0]
    assert "python evaluate.py --model-path {model_path} --limit {limit} --json-output-file {output}" in cmds[0]
    assert cmds[1] == "aci status"
    assert "evaluate.py" in cmds[2]
    assert cmds[3].startswith("aci log-state append --kind benchmark-card")
    assert cmds[4].startswith("aci eval-checkpoint") and "--checkpoint base" in cmds[4]


@pytest.fixture
def ptb_task(tmp_path, tiny_model) -> Path:
    """A PostTrainBench-like task folder: evaluate.py with the benchmark's command line, templates/,
    timer.sh, and the base model inside the folder (as the harness's HF cache would be a root)."""
    from aci.embedded import CHATML_TEMPLATE

    task = tmp_path / "task"
    (task / "templates").mkdir(parents=True)
    shutil.copy(FIXTURES / "ptb_evaluate.py", task / "evaluate.py")
    (task / "templates" / "qwen3.jinja").write_text(CHATML_TEMPLATE)
    (task / "timer.sh").write_text('#!/bin/bash\necho "Remaining time (hours:minutes):"\necho "9:58"\n')
    shutil.copytree(tiny_model, task / "Qwen3-1.7B-Base")
    return task


def run_line(line: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    if line.startswith("aci "):
        argv = [sys.executable, "-m", "aci.cli", *shlex.split(line)[1:]]
        return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def test_first_five_commands_work_in_a_simulated_task(ptb_task):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("ACI_STATE", None)
    model = str(ptb_task / "Qwen3-1.7B-Base")
    for k, line in enumerate(first_five_commands(), 1):
        line = line.replace("<base-model>", shlex.quote(model))
        done = run_line(line, ptb_task, env)
        assert done.returncode == 0, f"command {k} failed: {line}\n{done.stdout}\n{done.stderr}"
        if k == 1:
            card = json.loads((ptb_task / "state" / "run.json").read_text())
            assert card["profile"] == "posttrainbench" and card["template"] == "templates/qwen3.jinja"
            assert card["benchmark_size"] == 1319
        if k == 3:
            assert done.stdout.strip(), "the grep finds nothing in evaluate.py"
    status = run_line("aci --json status", ptb_task, env)
    gates = {g["name"]: g["passed"] for g in json.loads(status.stdout)["state"]["gates"]}
    assert gates["run-card"] and gates["baseline"], status.stdout


# -- the MCP surface serves the same Markdown and the same names ----------------------------------------------
def test_mcp_serves_the_bundle_and_the_same_tool_arguments(tmp_path):
    from tests.conftest import mcp_client

    async def go():
        async with mcp_client(tmp_path) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            resources = {str(r.uri) for r in (await client.list_resources()).resources}
            skill = await client.read_resource("skill://posttrain")
            prompts = {p.name for p in (await client.list_prompts()).prompts}
            return tools, resources, skill, prompts

    tools, resources, skill, prompts = asyncio.run(go())
    glob, commands = vocabulary()
    for name, t in tools.items():
        assert name in commands, f"MCP tool {name} is not a CLI command"
        cli_opts = {o for o in commands[name].options if o.startswith("--") and not o.startswith("--no-")} - {"--help"}
        mcp_args = {"--" + p.replace("_", "-") for p in t.input_schema["properties"] if p != "action"}
        assert cli_opts == mcp_args, name
    assert set(registry.tools()) == set(tools)
    assert {f"skill://{n}" for n in bundle.skill_names()} | {"skill://posttrain", "rules://integrity"} <= resources
    assert {f"workflow://{n}" for n in bundle.workflow_names()} <= resources
    assert {f"workflow-{n}" for n in bundle.workflow_names()} <= prompts
    assert skill.contents[0].text == (ROOT / "SKILL.md").read_text()
