"""Agent-facing text states only what an agent may read during a run (part of `tests.bundle_check`).

A benchmark that forbids looking it up during a run ("the benchmark, its leaderboard, or related
materials") counts a write-up about it that the agent reads as such a lookup, so the skills and every
message a tool prints may state only the task's own files and the agent's prompt, public sources that
are not about the benchmark (papers, dataset cards, library documentation, cited by name), and this
project's own measurements. Each pattern below catches one kind of passage that breaks that rule:

* `agent-score`: a frontier model or coding agent named beside a score, or agents beside a score;
* `leaderboard`: a leaderboard (a dataset id that contains the word is a name, not a passage);
* `run-record`: run records, and what earlier, other or most agents or runs did;
* `traces`: published traces or trajectories of runs;
* `benchmark-source`: the benchmark named in prose (its lower-case profile id `posttrainbench` is a
  name and stays), its site, repository, paper, issues and harness files, and citations of the
  project's knowledge files, which were read from them;
* `judge-internals`: the benchmark's integrity judges, their prompts, lists and tools;
* `weights`: the benchmark's weighting of its tasks in an overall score.

Scanned: the shipped Markdown (`SKILL.md`, `skills/`, `workflows/`, `rules/`), `rules/rules.yaml`
(rule texts, next actions, profile descriptions and comments), and every string literal in the `aci`
package that can reach an agent: messages, field descriptions, tool docstrings (they become tool
descriptions) and the docstrings of classes with a base (a pydantic model's becomes its schema's
description); module docstrings and those of other functions and classes are developer documentation and
are skipped, as is `aci/assets/` (the demo's toy task).
Developer documents (README, `docs/`, tests) may state benchmark facts and are not scanned.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

from tests.bundle_check import SHIPPED, Doc, Problem

# Frontier models and coding agents, as a passage names them beside a score. "Claude Code", "Gemini CLI"
# and the Codex CLI are tools this product installs into, not scores, so they are left out.
_AGENT = (r"(?:\bGPT-?\d+(?:\.\d+)?(?:[- ][A-Za-z]+)*|\bClaude(?! Code)|\bOpus\b|\bSonnet\b|\bHaiku\b"
          r"|\bGemini(?! CLI)|\bKimi\b|\bMiniMax\b|\bGLM-?\d|\bGrok\b|\bDeepSeek-V\d|\bQwen3[ -]Max\b|\bFable\b"
          r"|\bAstra\b|\bLocus\b|\bAutoTrainess\b|\bbest agents?\b|\bagents?'? (?:means?|averages?|averaged|score[sd]?)\b)")
# A score: a percentage, or a decimal that is not part of a version number or a duration.
_SCORE = (r"(?:(?<![\w.])\d{1,3}(?:\.\d+)?\s?%|(?<![\w.])\d{1,2}\.\d{1,2}(?![\d.])"
          r"(?!\s?(?:h|min|s|GB|GiB|B|M|k|x)\b))")
_GAP = r"(?:[^.;\n|]|\.(?=\d)){0,60}?"  # within one clause: a period only inside a number
_PRIOR = r"(?:earlier|previous|prior|past|other|most|many|best|top|winning|strongest|flagged|disputed)"

PATTERNS: dict[str, tuple[re.Pattern, ...]] = {
    "agent-score": (
        re.compile(_AGENT + _GAP + _SCORE),
        re.compile(_SCORE + r"(?:[^.;\n|]|\.(?=\d)){0,30}?\b(?:by|for|from) " + _AGENT),
    ),
    "leaderboard": (re.compile(r"(?i)leaderboards?"),),
    "run-record": (
        re.compile(r"(?i)\brun[- ]records?\b|\brecorded runs?\b|\brecord(?:ed)? (?:of )?(?:a |one )?run\b"),
        re.compile(rf"(?i)\b{_PRIOR} (?:agents?|runs|submissions|attempts by agents)\b"),
        re.compile(r"(?i)\bagents' (?:runs|scores|data|choices|recipes|settings)\b"
                   r"|\b(?:an?|one|another|some|several|most) agents? (?:used|trained|spent|stopped|stop|quit|reached|"
                   r"scored|averaged|hard-coded|built|relabell?ed|mined|repeated|copied)\b"),
    ),
    "traces": (
        re.compile(r"(?i)\b(?:published|past|earlier|previous|their|its|the benchmark's|runs'|agents') "
                   r"(?:traces|trajectories)\b|\b(?:traces|trajectories) of (?:past|earlier|previous|other|"
                   r"published|the benchmark's|its) (?:runs|agents)\b|\bfrom (?:the|its|their) traces\b"),
    ),
    "benchmark-source": (
        re.compile(r"(?i)post[- ]?train[- ]?bench"),  # the lower-case profile id is let through below
        re.compile(r"(?i)\baisa-group\b|posttrainbench\.(?:com|org|ai)|\b2603\.08640\b|\bissues? #\d+"),
        re.compile(r"(?i)\bthe benchmark's (?:paper|website|site|repository|repo|issues?|blog|authors)\b"),
        re.compile(r"\[K[\]:]|\[J\]|(?i:\bknowledge files?\b)"),
        re.compile(r"\b(?:new_judge_v2|disallowed_usage_judge|judge_tools|run_task\.sh|run_final_eval|"
                   r"evaluate_final_eval|get_prompt\.py|ptb_collect|judge_lib)\b"),
    ),
    "judge-internals": (
        re.compile(r"(?i)\b(?:integrity|lookup|contamination|disallowed[- ]usage|api[- ]usage) judges?\b"
                   r"|\bthe judges\b|\bjudges'|\bjudge's (?:own )?(?:prompt|lists?|text|tool|algorithm|criteria|"
                   r"verdicts?|checker)\b"),
    ),
    "weights": (
        re.compile(r"(?i)\bweights? in the (?:overall )?score\b|\boverall score\b|\bbenchmark weights?\b"
                   r"|\bweighted (?:sum|mean|average) over (?:the )?benchmarks\b"),
    ),
}
PROFILE_ID = "posttrainbench"  # a name, written lower case: what `--profile` takes
_DATASET_TOKEN = re.compile(r"[\w.-]+/[\w.-]+")


def _exempt(kind: str, text: str, m: re.Match) -> bool:
    """A match that is a name, not a passage: the profile id, or a word inside a dataset id."""
    if kind == "benchmark-source" and m.group(0) == PROFILE_ID:
        return True
    if kind == "leaderboard":
        start = text.rfind(" ", 0, m.start()) + 1
        end = next((i for i in (text.find(c, m.end()) for c in " `)") if i >= 0), len(text))
        token = text[start:end].strip("`'\"(,.;")
        return bool(_DATASET_TOKEN.fullmatch(token)) and "://" not in token
    return False


def findings(text: str) -> list[tuple[int, str, str]]:
    """(offset, kind, passage) for every forbidden passage in `text`; overlapping matches of one kind are
    one passage."""
    flat = text.replace("\n", " ")  # a passage may wrap; offsets stay those of `text`
    out = []
    for kind, patterns in PATTERNS.items():
        spans = sorted((m.start(), m.end()) for rx in patterns for m in rx.finditer(flat) if not _exempt(kind, flat, m))
        merged: list[list[int]] = []
        for start, end in spans:
            if merged and start < merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        out += [(start, kind, flat[start:end]) for start, end in merged]
    return sorted(out)


def _problems(rel: str, text: str, first_line: int = 1) -> list[Problem]:
    return [Problem(rel, first_line + text.count("\n", 0, at), f"provenance ({kind}): {passage.strip()!r} is "
                                                               "not for agent-facing text")
            for at, kind, passage in findings(text)]


# -- the aci package's string literals ------------------------------------------------------------------
def _skipped_docstrings(tree: ast.Module) -> set[int]:
    """ids of the docstring nodes no agent reads: the module's, those of functions that are not tools, and
    those of classes without a base (no pydantic model among them)."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.bases:
            continue
        if not isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        first = node.body[0] if node.body else None
        if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)):
            continue
        decorators = getattr(node, "decorator_list", [])
        is_tool = any(isinstance(d, ast.Call) and getattr(d.func, "id", None) == "tool" for d in decorators)
        if not is_tool:
            skipped.add(id(first.value))
    return skipped


@cache
def _literals(path: Path, mtime: float) -> tuple[tuple[int, str], ...]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    skipped = _skipped_docstrings(tree)
    return tuple((node.lineno, node.value) for node in ast.walk(tree)
                 if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped)


def package_dir(root: Path) -> Path:
    """The `aci` sources beside the bundle at `root` (a checkout or a test's copy), else the imported ones."""
    import aci

    return root / "aci" if (root / "aci" / "__init__.py").is_file() else Path(aci.__file__).resolve().parent


def check_package(root: Path) -> list[Problem]:
    pkg = package_dir(root)
    problems = []
    for path in sorted(pkg.rglob("*.py")):
        rel_parts = path.relative_to(pkg).parts
        if rel_parts[0] == "assets":
            continue
        rel = "aci/" + "/".join(rel_parts)
        for line, value in _literals(path, path.stat().st_mtime):
            problems += _problems(rel, value, line)
    return problems


def check(root: Path, docs: list[Doc]) -> list[Problem]:
    problems = []
    for doc in docs:
        if doc.rel.split("/", 1)[0] in SHIPPED:
            problems += _problems(doc.rel, doc.text)
    rules = root / "rules" / "rules.yaml"
    if rules.is_file():
        problems += _problems("rules/rules.yaml", rules.read_text(encoding="utf-8"))
    return problems + check_package(root)
