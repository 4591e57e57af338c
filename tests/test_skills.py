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
from tests import bundle_check, bundle_provenance
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
    assert bundle.workflow_names() == ["posttrain", "recover", "self-improvement", "tool-use-synthesis"]
    cards = {p.stem for p in (ROOT / "skills" / "recon" / "references").glob("*.md")}
    assert set(CARDS) <= cards
    for card in cards - {"grader-checklist", "README"}:
        text = (ROOT / "skills" / "recon" / "references" / f"{card}.md").read_text()
        # a public source, the task's own files to confirm against, and the project's defaults
        assert "Sources:" in text and "[P]" in text and "[T]" in text, f"{card}: sources not marked"
        for section in ("What the grader wants", "What to expect", "Data", "Starting recipe"):
            assert f"## {section}" in text, f"{card}: no '{section}' section"


# Six scored benchmarks and the tool-calling card kept for users outside them.
CARDS = ("aime-2025", "arena-hard-writing", "gpqa", "gsm8k", "healthbench", "humaneval", "tool-calling")
SIZES = ("1-2B", "3-4B")  # recipe rows, by base-model size
EVIDENCE = ("measured", "paper", "dataset card", "estimate")


def test_bfcl_is_not_a_scored_benchmark_in_the_entry_skill_or_the_strict_profile():
    """BFCL is no longer scored: the entry skill's recipe list and the recon table name it only as the
    tool-calling card, and the strict profile neither refuses its data nor sets a final evaluation for it."""
    from aci import rules

    recipes = (ROOT / "SKILL.md").read_text().split("## Starting recipes")[1].split("## ")[0]
    assert "bfcl.md" not in recipes and "[tool calling](skills/recon/references/tool-calling.md" in recipes
    strict = rules.load("posttrainbench").profile
    assert not any("bfcl" in p.lower() or "gorilla" in p.lower() for p in strict.forbidden_datasets + strict.forbidden_patterns)
    assert not any(b.match.lower().endswith("bfcl") for b in strict.final_eval.benchmarks)
    assert len(strict.final_eval.benchmarks) == 6


@pytest.mark.parametrize("card", CARDS)
def test_every_benchmark_has_a_recipe_per_model_size_with_its_evidence(card):
    """The recipe answers what the first model needs: data by id and split, the conversion, sizes, minutes
    from tokens and throughput, and per base-model size the settings and the gain to expect with evidence."""
    text = (ROOT / "skills" / "recon" / "references" / f"{card}.md").read_text()
    recipe = text[text.index("## Starting recipe"):]
    for part in ("**Conversion", "**Sizes.**", "--max-length", "Minutes", "tokens/s", "**Traps.**"):
        assert part in recipe, f"{card}: recipe lacks {part!r}"
    assert re.search(r"\d[\d,.]* x [\d,.]+ tokens x \d", recipe), f"{card}: no minutes arithmetic"
    rows = [ln for ln in recipe.splitlines() if ln.startswith("| ") and ln.split("|")[1].strip().startswith(SIZES)]
    assert sorted(ln.split("|")[1].strip().split()[0] for ln in rows) == sorted(SIZES), f"{card}: one row per size"
    for row in rows:
        cells = row.split("|")
        assert re.search(r"LoRA|full SFT|as 1-2B", cells[2]), f"{card}: {cells[1]} says neither LoRA nor full"
        assert any(e in cells[-2] for e in EVIDENCE), f"{card}: {cells[1]}'s expected score names no evidence level"
    readme = (ROOT / "skills" / "recon" / "references" / "README.md").read_text()
    row = next(ln for ln in readme.splitlines() if f"]({card}.md#starting-recipe)" in ln)
    assert any(e in row for e in EVIDENCE), f"README row of {card} names no evidence level"


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


# Each way the Markdown marks a grader name: (file, text naming it, the same text misspelt, the misspelling).
GRADER_MENTIONS = [
    ("skills/data/SKILL.md", "--method B --grader last-number", "--method B --grader last-numbers", "last-numbers"),
    ("skills/data/references/formats.md", '"grader": "last-number"', '"grader": "lastnumber"', "lastnumber"),
    ("skills/recon/references/gpqa.md", "The `choice` grader", "The `choices` grader", "choices"),
    ("skills/recon/references/gpqa.md", "grader `choice`", "grader `mcq`", "mcq"),
    ("skills/recon/references/humaneval.md", "graded by `unit-tests`", "graded by `pytest`", "pytest"),
    ("workflows/self-improvement.md", "| `unit-tests` |", "| `unittest` |", "unittest"),
    ("skills/data/SKILL.md", "`tool-call`, `python:module:function`", "`tool-calls`, `python:module:function`",
     "tool-calls"),
    ("skills/tool-use-synthesis/SKILL.md", 'grader: "tool-call"', 'grader: "tool-use"', "tool-use"),
]


@pytest.mark.parametrize(("rel", "old", "new", "bad"), GRADER_MENTIONS, ids=[m[3] for m in GRADER_MENTIONS])
def test_unknown_grader_in_markdown_fails(copy, rel, old, new, bad):
    edit(copy / rel, old, new)
    n = _line_of(copy / rel, new)
    found = [str(p) for p in bundle_check.check_graders(bundle_check.documents(copy))]
    assert f"{rel}:{n}: names grader {bad!r}, which is not a grader" in "\n".join(found), found


def test_grader_check_is_part_of_the_bundle_check(copy):
    edit(copy / "skills" / "evaluate" / "SKILL.md", "`--grader last-number`", "`--grader last-digit`")
    assert "names grader 'last-digit', which is not a grader" in messages(check(copy))


def test_a_list_of_graders_must_name_every_grader(copy):
    edit(copy / "skills" / "data" / "SKILL.md", "`regex`, `command` or `judge`", "`regex` or `judge`")
    found = messages(bundle_check.check_graders(bundle_check.documents(copy)))
    assert re.search(r"skills/data/SKILL\.md:\d+: a list of graders leaves out command", found), found


def test_grader_renamed_in_registry_fails(monkeypatch):
    from aci import graders

    monkeypatch.setitem(graders.GRADERS, "letter", graders.GRADERS["choice"])
    monkeypatch.delitem(graders.GRADERS, "choice")
    found = messages(bundle_check.check_graders(bundle_check.documents(ROOT)))
    assert "skills/recon/references/gpqa.md" in found and "names grader 'choice'" in found
    assert "leaves out letter" in found


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
    for phase in data["phases"].values():  # the phases name it too; the file would not load otherwise
        phase["rules"] = [r for r in phase["rules"] if r != "no-hosted-llm"]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert "section '### no-hosted-llm' names no rule in rules.yaml" in messages(check(copy))


def test_rule_section_must_name_its_enforcing_tools(copy):
    edit(copy / "rules" / "integrity.md", "**Tools.** `aci run-trajectory` checks every name",
         "**Tools.** It checks every name")
    assert "rule no-teacher-distillation: section does not say what `aci run-trajectory` does" in messages(check(copy))


def test_unknown_command_in_next_actions_fails(copy):
    edit(copy / "rules" / "rules.yaml", "aci eval-checkpoint evaluate --checkpoint base",
         "aci eval-checkpoint evaluate --checkpoint-id base")
    edit(copy / "rules" / "rules.yaml", "(aci train start)", "(aci train begin)")
    out = messages(check(copy))
    assert "rules/rules.yaml:" in out and "aci eval-checkpoint: unknown option --checkpoint-id" in out
    assert "aci train: unknown action 'begin'" in out


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
    edit(copy / "skills" / "recon" / "references" / "gsm8k.md", "66 = max(32, 5 % of 1,319)", "67 = max(32, 5 % of 1,319)")
    out = messages(check(copy))
    assert "skills/data/SKILL.md:" in out and "final reserve of 50 is not any profile's" in out
    assert "minimum samples max(30, 5 %) differs" in out
    assert "max(32, 5 % of 1,319) is 66, not 67" in out


def test_copied_figures_follow_a_change_of_rules_yaml(copy):
    """Change the profile's numbers and every hand copy is named, even one split over two lines."""
    path = copy / "rules" / "rules.yaml"
    path.write_text(path.read_text().replace("tolerated_rows: 0", "tolerated_rows: 2", 1)  # posttrainbench's
                    .replace("final_reserve_min: 45", "final_reserve_min: 50"))
    edit(copy / "rules" / "integrity.md", "**What no check can know.**",
         "It fails above 0 contaminated\nrows under posttrainbench.\n**What no check can know.**")
    out = messages(check(copy))
    assert "rules/integrity.md" in out and "the profile-numbers table differs from rules.yaml" in out
    for where in ("skills/submit/SKILL.md", "workflows/posttrain.md", "rules/integrity.md"):
        assert re.search(rf"{where}:\d+: final reserve of 45 is not profile posttrainbench's", out), where
    assert re.search(r"skills/data/SKILL.md:\d+: tolerated contaminated rows of 0 is not profile posttrainbench's", out)
    split = next(n for n, ln in enumerate((copy / "rules" / "integrity.md").read_text().splitlines(), 1)
                 if ln.rstrip().endswith("fails above 0 contaminated"))
    assert f"rules/integrity.md:{split}: tolerated contaminated rows of 0" in out


def test_the_rendered_numbers_can_be_rewritten(copy):
    from tests import bundle_facts

    path = copy / "rules" / "rules.yaml"
    path.write_text(path.read_text().replace("histogram_tolerance_pp: 5.0", "histogram_tolerance_pp: 4.0", 1))
    assert "the profile-numbers table differs" in messages(check(copy))
    assert bundle_facts.write_rendered(copy) is True
    assert "| histogram tolerance, percentage points (`histogram_tolerance_pp`) | 4 | 5 |" in \
        (copy / "rules" / "integrity.md").read_text()
    assert "the profile-numbers table differs" not in messages(check(copy))
    assert bundle_facts.write_rendered(copy) is False


def test_recipe_datasets_must_be_in_the_allowed_table_and_not_banned(copy):
    edit(copy / "skills" / "recon" / "references" / "gsm8k.md", "## Starting recipe\n",
         "## Starting recipe\nAlso `someone/gsm8k-rephrased` and `openai/gsm8k`.\n")
    edit(copy / "skills" / "data" / "references" / "sources.md", "| `allenai/sciq` |", "| `qfq/aime2025_gpqa_mix` |")
    out = messages(check(copy))
    assert "gsm8k.md" in out and "dataset 'someone/gsm8k-rephrased' is neither in the allowed table" in out
    assert "'openai/gsm8k'" not in out
    assert "allowed dataset 'qfq/aime2025_gpqa_mix' is banned by rules.yaml" in out
    assert "dataset 'allenai/sciq' is neither in the allowed table" in out  # the GPQA card still names it


def test_every_allowed_dataset_passes_the_banned_lists_and_recipes_name_many():
    from tests import bundle_facts

    allowed = bundle_facts.allowed_ids(ROOT)
    assert len(allowed) >= 15 and "meta-math/metamathqa" in allowed and "openai/gsm8k" in allowed
    named = set()
    for doc in bundle_check.documents(ROOT):
        if doc.rel.startswith(bundle_facts.RECIPE_DOCS):
            named |= {m.group(1).lower() for m in bundle_facts._DATASET_ID.finditer(doc.text)}
    assert len(named & set(allowed)) >= 15  # the check has something to check


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


def test_train_defaults_the_skill_states_are_read():
    """Guard against a reader that silently finds nothing: the train skill states these defaults."""
    doc = next(d for d in bundle_check.documents(ROOT) if d.rel == "skills/train/SKILL.md")
    seen = {c.what for c in bundle_check.default_claims(doc)}
    assert {"--lora-r", "--lora-alpha", "--lora-dropout", "--num-generations", "--max-length",
            "learning rate (sft, LoRA)", "learning rate (sft)", "learning rate (grpo)"} <= seen


def _line_of(path: Path, text: str) -> int:
    return next(n for n, ln in enumerate(path.read_text().splitlines(), 1) if text in ln)


def test_wrong_default_in_markdown_fails(copy):
    edit(copy / "skills" / "train" / "SKILL.md", "(r 16, alpha 32", "(r 8, alpha 32")
    edit(copy / "skills" / "train" / "SKILL.md", "lr 1e-6 full / 1e-5 LoRA [D]", "lr 1e-6 full / 3e-5 LoRA [D]")
    out = messages(check(copy))
    n = _line_of(copy / "skills" / "train" / "SKILL.md", "(r 8, alpha 32")
    assert f"skills/train/SKILL.md:{n}: --lora-r: the text says 8 [D], but aci train's default is 16" in out
    assert "learning rate (grpo, LoRA): the text says 3e-05 [D], but aci train's default is 1e-05" in out


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


def test_default_changed_in_registry_fails(monkeypatch):
    t = registry.tools()["train"]
    fields = {name: (f.annotation, Field(8, ge=1, description=f.description) if name == "lora_r" else f)
              for name, f in t.input.model_fields.items()}
    model = create_model("ChangedTrainInput", __base__=registry.ToolInput, **fields)
    monkeypatch.setitem(registry._REGISTRY, "train", dataclasses.replace(t, input=model))
    n = _line_of(ROOT / "skills" / "train" / "SKILL.md", "(r 16, alpha 32")
    assert f"skills/train/SKILL.md:{n}: --lora-r: the text says 16 [D], but aci train's default is 8" in messages(check())


def test_action_renamed_in_registry_fails(monkeypatch):
    _replace_input(monkeypatch, "log-state", action=("add", "summary"))
    assert "aci log-state: unknown action 'append'" in messages(check())


# -- provenance: what an agent may read during a run ------------------------------------------------------
# One passage per kind that a benchmark's lookup rule counts as reading about the benchmark.
PLANTED = [
    ("agent-score", "agent", "Best agents averaged 55.9 % over the four models."),
    ("agent-score", "model", "GPT-5.2 reached 55.9 on this benchmark, Opus 4.5 54.4."),
    ("leaderboard", "leaderboard", "The leaderboard's top entry trained on 20k samples."),
    ("run-record", "run record", "One run record of 91 % used exactly this mix."),
    ("run-record", "earlier runs", "Earlier runs used a rate of 2e-5 and a cosine schedule."),
    ("run-record", "other agents", "Most agents stop after 2-3 of their 10 hours."),
    ("traces", "traces", "Published traces of past runs show the GRPO settings that won."),
    ("benchmark-source", "site", "The rules are on posttrainbench.com."),
    ("benchmark-source", "repository", "Read aisa-group/PostTrainBench for the harness."),
    ("benchmark-source", "knowledge files", "Sources: [K] the project's knowledge files."),
    ("judge-internals", "judges", "The integrity judge's prompt excuses up to 3 rows."),
    ("weights", "weights", "Its weight in the overall score is .2265, the largest."),
]


@pytest.mark.parametrize("kind, _what, passage", PLANTED, ids=[w for _, w, _ in PLANTED])
def test_a_planted_passage_about_the_benchmark_fails(copy, kind, _what, passage):
    path = copy / "skills" / "train" / "SKILL.md"
    edit(path, "## Recipes\n", f"## Recipes\n{passage}\n")
    n = _line_of(path, passage)
    found = [p for p in bundle_provenance.check(copy, bundle_check.documents(copy)) if p.file == "skills/train/SKILL.md"]
    assert found and all(p.line == n for p in found), messages(found)
    assert any(p.message.startswith(f"provenance ({kind})") for p in found), messages(found)


def test_provenance_problems_are_part_of_the_bundle_check_and_cover_rules_yaml(copy):
    edit(copy / "rules" / "rules.yaml", "Start the run card: aci plan init",
         "Start the run card as the best agents did: aci plan init")
    edit(copy / "workflows" / "recover.md", "Everything you need", "What other agents did is in the traces. Everything you need")
    out = messages(check(copy))
    assert re.search(r"rules/rules.yaml:\d+: provenance \(run-record\): 'best agents'", out), out
    assert re.search(r"workflows/recover.md:\d+: provenance \(run-record\): 'other agents'", out), out


def test_names_are_not_passages(copy):
    """The profile id, a dataset id with the word in it and a paper's result on another model pass."""
    edit(copy / "skills" / "train" / "SKILL.md", "## Recipes\n", "## Recipes\nUnder posttrainbench, never train on "
         "gorilla-llm/Berkeley-Function-Calling-Leaderboard; MetaMathQA took Llama-2-7B from 14.6 % to 66.5 % "
         "(MetaMath). Claude Code 2.1 reads `.claude/skills/`.\n")
    assert bundle_provenance.check(copy, bundle_check.documents(copy)) == []


def test_tool_messages_are_scanned_but_developer_docstrings_are_not(copy):
    """String literals of the aci package: a message template or a field description an agent reads
    fails; a module docstring or a plain function's docstring (developer documentation) does not."""
    pkg = copy / "aci"
    (pkg / "tools").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "tools" / "planted.py").write_text(
        '"""PostTrainBench\'s evaluate.py scores 150 GSM8K items without --limit (developer note)."""\n'
        "from pydantic import BaseModel, Field\n\n\n"
        "def helper():\n    \"\"\"As the integrity judges' prompt says (developer note).\"\"\"\n\n\n"
        "class PlantedInput(BaseModel):\n"
        '    limit: int = Field(1, description="without it, PostTrainBench\'s default applies")\n\n\n'
        "def reminder(n):\n"
        '    return f"Most agents stop after {n} hours: keep going."\n')
    found = sorted(str(p) for p in bundle_provenance.check_package(copy))
    assert len(found) == 2, found
    assert found[0].startswith("aci/tools/planted.py:10: provenance (benchmark-source): 'PostTrainBench'")
    assert found[1].startswith("aci/tools/planted.py:14: provenance (run-record): 'Most agents stop'")


def test_what_a_new_user_s_agent_reads_carries_no_passage_about_the_benchmark(ptb_task, shell_env):
    """As a new user would: `aci install claude-code` into a task folder, `plan init --profile
    posttrainbench`, `status`, `plan show`; every file the installer wrote, every output, and the served
    tools/list (descriptions assembled at run time) are free of the passages bundle_provenance catches."""
    model = shlex.quote(str(ptb_task / "Qwen3-1.7B-Base"))
    lines = ["aci install claude-code --workdir .",
             f"aci plan init --profile posttrainbench --base-model {model} --benchmark gsm8k --benchmark-size 1319 "
             f"--eval-command '{TYPED}' --metric-key accuracy", "aci status", "aci plan show"]
    read = {}
    for line in lines:
        done = run_line(line, ptb_task, shell_env)
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
        read[line] = done.stdout + done.stderr
    for p in [ptb_task / "CLAUDE.md", *(ptb_task / ".claude").rglob("*"), *(ptb_task / ".aci").rglob("*")]:
        if p.is_file():
            read[str(p.relative_to(ptb_task))] = p.read_text()
    read["tools/list"] = (Path(__file__).parent / "data" / "tools-list.json").read_text()
    assert ".claude/skills/posttrain/SKILL.md" in read and len(read) > 30
    found = {where: bundle_provenance.findings(text) for where, text in read.items()}
    assert not any(found.values()), {w: f for w, f in found.items() if f}


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


# -- the first five minutes, as a new user would run them --------------------------------------------------
TYPED = "python evaluate.py --model-path final_model --limit -1"  # the user's eval command, as typed
TEMPLATE = "python evaluate.py --model-path {model_path} --limit {limit} --json-output-file {output}"


def first_minutes_commands() -> list[str]:
    text = (ROOT / "SKILL.md").read_text()
    section = text[text.index("## The first five minutes"):]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [ln.strip() for ln in block.splitlines() if ln.strip() and not ln.strip().startswith("#")]


def test_entry_skill_gives_the_first_commands_for_gsm8k():
    cmds = first_minutes_commands()
    assert len(cmds) == 6
    assert cmds[0] == "command -v aci"
    assert cmds[1] == "aci status"
    assert cmds[2].startswith("aci plan init --profile posttrainbench")
    assert f"--eval-command '{TYPED}'" in cmds[2], "the user's command goes in as typed"
    assert "--metric-key accuracy" in cmds[2] and "--targets" not in cmds[2]  # set after the baseline
    assert cmds[3].startswith("grep") and "evaluate.py" in cmds[3]
    assert cmds[4].startswith("aci log-state append --kind benchmark-card")
    assert cmds[5].startswith("aci eval-checkpoint evaluate") and "--checkpoint base" in cmds[5]
    assert f"`{TYPED}`" in (ROOT / "SKILL.md").read_text()  # the example speaks the user's words


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


@pytest.fixture
def shell_env(tmp_path) -> dict:
    """The shell an agent types into: `aci` on PATH (as solve.sh links it), no state folder preset."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "aci"
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m aci.cli "$@"\n')
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("ACI_STATE", None)
    return env


def run_line(line: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("card_made_by_solve_sh", [False, True], ids=["fresh", "card-from-solve-sh"])
def test_the_first_minutes_run_as_written_in_a_simulated_task(ptb_task, shell_env, card_made_by_solve_sh):
    """SKILL.md's block, line by line in bash, with the user's literal eval command: it ends with a
    baseline recorded, whether or not PostTrainBench's solve.sh made the run card first."""
    model = shlex.quote(str(ptb_task / "Qwen3-1.7B-Base"))
    if card_made_by_solve_sh:  # what integrations/posttrainbench/common.sh runs before the agent starts
        done = run_line(f"aci plan init --profile posttrainbench --base-model {model} "
                        f"--benchmark 'GSM8K (Grade School Math 8K)' --eval-command '{TEMPLATE}'", ptb_task, shell_env)
        assert done.returncode == 0, done.stderr
    for k, line in enumerate(first_minutes_commands()):
        done = run_line(line.replace("<base-model>", model), ptb_task, shell_env)
        assert done.returncode == 0, f"command {k} failed: {line}\n{done.stdout}\n{done.stderr}"
        if k == 2:
            card = json.loads((ptb_task / "state" / "run.json").read_text())
            assert card["profile"] == "posttrainbench" and card["template"] == "templates/qwen3.jinja"
            assert (card["eval_command"], card["metric_key"], card["benchmark_size"]) == (TEMPLATE, "accuracy", 1319)
            assert card["targets"] == [] and card["deadline"]
            assert "deadline source: timer.sh" in done.stdout
            assert "`--limit -1` -> `--limit {limit}`" in done.stdout
            assert ("already existed" in done.stdout) is card_made_by_solve_sh
            event = json.loads((ptb_task / "state" / "journal.jsonl").read_text().splitlines()[-1])
            assert event["data"]["eval_command_typed"] == TYPED and len(event["data"]["translation"]) == 3
        if k == 3:
            assert done.stdout.strip(), "the grep finds nothing in evaluate.py"
    status = run_line("aci --json status", ptb_task, shell_env)
    gates = {g["name"]: g["passed"] for g in json.loads(status.stdout)["state"]["gates"]}
    assert gates["run-card"] and gates["baseline"], status.stdout
    (base,) = [json.loads(ln) for ln in (ptb_task / "state" / "checkpoints.jsonl").read_text().splitlines()]
    assert (base["checkpoint"], base["limit"], base["samples"], base["error"]) == ("base", 150, 150, None)


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
        spellings = {"--" + a.replace("_", "-") for a in registry.get(name).input.spellings()}  # taken by both
        assert cli_opts == mcp_args | spellings, name
    assert set(registry.tools()) == set(tools)
    assert {f"skill://{n}" for n in bundle.skill_names()} | {"skill://posttrain", "rules://integrity"} <= resources
    assert {f"workflow://{n}" for n in bundle.workflow_names()} <= resources
    assert {f"workflow-{n}" for n in bundle.workflow_names()} <= prompts
    assert skill.contents[0].text == (ROOT / "SKILL.md").read_text()
