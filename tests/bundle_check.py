"""Check that the Markdown half of the product agrees with the tools and the rules.

The skills tell an agent what to type. A command, action or option that the CLI does not accept, a link
that leads nowhere, or a rule that exists on one side only sends a strong agent down a wrong path with
full confidence, so these are checked like code:

* front matter of every `SKILL.md` follows the agentskills.io specification (`name` = folder, a
  `description` of at most 1024 characters without angle brackets);
* length limits (the entry `SKILL.md` < 200 lines, every other file < 500);
* every relative link (and `#anchor`) resolves, inside the files that ship with the bundle;
* every `aci <command> [action] --option` written in code (and `aci <command>` in prose, and each
  `action` a tools-table row names beside its `aci <tool>`) exists in the CLI generated from the
  registry (MCP tool names and fields are the same);
* every `skills/<name>` and `workflows/<name>.md` mentioned exists;
* every grader named is one of `aci.graders.GRADERS`, read as a spec is parsed: the value of `--grader`
  and of a `grader` key in code, a backticked name beside the word grader in prose (the `choice`
  grader, grader `choice`, graded by `choice`, and the rest of a list begun there), the backticked cells
  of a `grader` table column; a list of three or more names names every grader;
* `rules/integrity.md` has one `### <rule-id>` section per rule in `rules/rules.yaml` and no other, and
  each section names the tools that enforce it; the next actions in `rules/rules.yaml` name real
  commands, actions and options;
* `workflows/posttrain.md` names the phases and gates of every rules profile, in order, with the time
  shares the profile sets; minimum-sample and final-reserve figures match the profiles;
* every default of `aci train` a text states (a figure marked [D]: LoRA r, alpha, dropout, learning
  rates, generations, `--option ... default N`) is the default of the live tool's request model;
* figures copied from `rules.yaml` (final reserve, tolerated contaminated rows, minimum samples) match
  the profiles, the rendered table in `rules/integrity.md` is current, and every dataset id a recipe
  names is in the allowed table or banned (`tests/bundle_facts.py`);
* agent-facing text (the shipped Markdown, `rules.yaml`, the `aci` package's messages and descriptions)
  carries no scores of agents or models on the benchmark, no leaderboard, no run records or what earlier
  runs did, nothing from the benchmark's site, repository, judges or traces (`tests/bundle_provenance.py`).

A development module, not part of the runtime package: `python -m tests.bundle_check [ROOT]` (from the
repository root) prints one `file:line: problem` per finding and exits 1 on any.
"""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from aci import bundle

ENTRY = "SKILL.md"
ENTRY_NAME = "posttrain"  # the folder the installers give the entry skill (aci/install.py ENTRY_SKILL)
SHIPPED = ("SKILL.md", "skills", "workflows", "rules")  # what the wheel and `aci install` copy
EXTRA_DOCS = ("state/README.md",)  # repository docs checked too, not shipped
MAX_LINES_ENTRY, MAX_LINES = 200, 500
FRONT_MATTER_KEYS = {"name", "description", "license", "compatibility", "metadata", "allowed-tools"}
NAME_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
# Options of PostTrainBench's evaluate.py (posttrainbench.md), which the Markdown may show on their own.
EVALUATE_PY_OPTIONS = {"--model-path", "--limit", "--max-tokens", "--max-connections", "--json-output-file"}
SHELL_BREAKS = {"|", "||", "&&", ";", "&", ">", ">>", "2>&1", "2>", "<"}
STAGE_RE = re.compile(r"^## Stage (\d+): ([a-z0-9-]+) \(gate: ([a-z0-9-]+)\)\s*$")


@dataclass(frozen=True)
class Problem:
    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


# -- the command vocabulary, from the real CLI ---------------------------------------------------------
@dataclass
class Command:
    name: str
    options: dict[str, bool]  # option -> takes a value
    choices: tuple[str, ...] | None  # the action argument's choices, if any
    subcommands: dict[str, Command]


def _command(cmd, ctx) -> Command:
    import click

    options: dict[str, bool] = {"--help": False}
    choices = None
    for p in cmd.params:
        if isinstance(p, click.Option):
            takes = not (p.is_flag or p.count)
            for o in [*p.opts, *p.secondary_opts]:
                options[o] = takes
        elif isinstance(p, click.Argument) and isinstance(p.type, click.Choice):
            choices = tuple(p.type.choices)
    subs = {}
    if isinstance(cmd, click.Group):
        subs = {n: _command(cmd.get_command(ctx, n), ctx) for n in cmd.list_commands(ctx)}
    return Command(cmd.name, options, choices, subs)


def vocabulary() -> tuple[dict[str, bool], dict[str, Command]]:
    """Global options and every command the `aci` CLI accepts (tools from the registry + extra commands)."""
    import click

    from aci.cli import cli

    ctx = click.Context(cli)
    glob = _command(cli, ctx).options
    commands = {}
    for name in cli.list_commands(ctx):
        cmd = cli.get_command(ctx, name)
        if cmd is not None:
            commands[name] = _command(cmd, ctx)
    return glob, commands


# -- reading Markdown -------------------------------------------------------------------------------------
@dataclass
class Doc:
    path: Path
    rel: str
    text: str

    @property
    def lines(self) -> list[str]:
        return self.text.splitlines()


def documents(root: Path) -> list[Doc]:
    paths: list[Path] = []
    for name in SHIPPED + EXTRA_DOCS:
        p = root / name
        if p.is_file():
            paths.append(p)
        elif p.is_dir():
            paths += sorted(p.rglob("*.md"))
    return [Doc(p, p.relative_to(root).as_posix(), p.read_text(encoding="utf-8")) for p in paths]


def code_regions(doc: Doc) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(code snippets, prose lines), each with its 1-based line number. Fenced blocks are joined per
    shell line (backslash continuations folded); inline spans are taken from the prose lines."""
    code: list[tuple[int, str]] = []
    prose: list[tuple[int, str]] = []
    fence = None
    pending, pending_line = "", 0
    for n, line in enumerate(doc.lines, 1):
        marker = re.match(r"^\s*(```+|~~~+)", line)
        if marker and (fence is None or marker.group(1).startswith(fence)):
            fence = None if fence else marker.group(1)[:3]
            continue
        if fence:
            if not pending:
                pending_line = n
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            code.append((pending_line, pending + line))
            pending = ""
            continue
        for m in re.finditer(r"(`+)(.+?)\1", line):
            code.append((n, m.group(2).strip()))
        prose.append((n, re.sub(r"(`+)(.+?)\1", " ", line)))
    return code, prose


def _split(snippet: str) -> list[str]:
    try:
        return shlex.split(snippet, comments=True)
    except ValueError:  # unbalanced quotes in an illustrative snippet: fall back to whitespace
        return snippet.split()


def _placeholder(token: str) -> bool:
    return token.startswith(("<", "{", "$", "...")) or token in ("...", "…")


def check_command(tokens: list[str], glob: dict[str, bool], commands: dict[str, Command]) -> list[str]:
    """Problems with one `aci ...` invocation (tokens after `aci`)."""
    i = 0
    while i < len(tokens) and tokens[i].startswith("--"):
        opt = tokens[i].split("=", 1)[0]
        if opt not in glob:
            return [f"aci: unknown global option {opt}"]
        i += 2 if glob[opt] and "=" not in tokens[i] else 1
    if i >= len(tokens) or _placeholder(tokens[i]):
        return []
    name = tokens[i]
    cmd = commands.get(name)
    if cmd is None:
        return [f"unknown aci command {name!r} (commands: {', '.join(sorted(commands))})"]
    i += 1
    label = f"aci {name}"
    if cmd.subcommands and i < len(tokens) and not tokens[i].startswith("-") and not _placeholder(tokens[i]):
        sub = cmd.subcommands.get(tokens[i])
        if sub is None:
            return [f"{label}: unknown subcommand {tokens[i]!r} (has: {', '.join(sorted(cmd.subcommands))})"]
        cmd, label, i = sub, f"{label} {tokens[i]}", i + 1
    problems: list[str] = []
    action_seen = False
    while i < len(tokens):
        tok = tokens[i]
        if tok in SHELL_BREAKS:
            break
        if tok.startswith("--"):
            opt = tok.split("=", 1)[0]
            if opt not in cmd.options:
                problems.append(f"{label}: unknown option {opt}")
                i += 1
                continue
            i += 2 if cmd.options[opt] and "=" not in tok else 1
            continue
        if not action_seen and not tok.startswith("-"):
            action_seen = True  # the first positional: the action, when the command has a choice of them
            if cmd.choices is not None and not _placeholder(tok) and tok not in cmd.choices:
                problems.append(f"{label}: unknown action {tok!r} (actions: {', '.join(cmd.choices)})")
        i += 1
    return problems


_ACI_PROSE = re.compile(r"(?<![\w./`-])aci ([a-z][a-z0-9-]*)")
_TOOL_ROW = re.compile(r"^\|\s*`aci ([a-z0-9-]+)`\s*\|(.*)$")


def _invocations(tokens: list[str]) -> list[list[str]]:
    out = []
    for k, tok in enumerate(tokens):
        if tok == "aci" or tok.endswith("/aci"):
            out.append(tokens[k + 1:])
        elif tok == "aci.cli" and k > 0 and tokens[k - 1] == "-m":
            out.append(tokens[k + 1:])
    return out


def check_commands(docs: list[Doc]) -> list[Problem]:
    glob, commands = vocabulary()
    all_options = set(glob) | {o for c in commands.values() for o in c.options} | {
        o for c in commands.values() for s in c.subcommands.values() for o in s.options}
    problems = []
    for doc in docs:
        code, prose = code_regions(doc)
        for n, snippet in code:
            tokens = _split(snippet)
            for inv in _invocations(tokens):
                problems += [Problem(doc.rel, n, m) for m in check_command(inv, glob, commands)]
            if tokens and tokens[0].startswith("--") and not _invocations(tokens):  # e.g. `--limit 150`
                for opt in (t.split("=", 1)[0] for t in tokens if t.startswith("--")):
                    if opt not in all_options and opt not in EVALUATE_PY_OPTIONS:
                        problems.append(Problem(doc.rel, n, f"option {opt} is not an option of any aci command"))
        for n, line in enumerate(doc.lines, 1):  # a tools table row: `aci X` | `action`, ...
            row = _TOOL_ROW.match(line)
            cmd = commands.get(row.group(1)) if row else None
            if cmd is not None and cmd.choices:
                for word in re.findall(r"`([a-z][a-z-]*)`", row.group(2)):
                    if word not in cmd.choices:
                        problems.append(Problem(doc.rel, n, f"aci {row.group(1)}: table names unknown action "
                                                            f"{word!r} (actions: {', '.join(cmd.choices)})"))
        for n, line in prose:
            for m in _ACI_PROSE.finditer(line):
                if m.group(1) not in commands:
                    problems.append(Problem(doc.rel, n, f"prose names unknown aci command {m.group(1)!r}"))
    return problems


# -- grader names, from the registry ----------------------------------------------------------------------
_ITEM = r"`([^`\n]+)`"
_LIST_SEP = r"(?:\s*,\s*(?:or\s+|and\s+)?|\s+(?:or|and)\s+)"
_GRADER_AFTER = re.compile(rf"\bgraders?`?:?\s+{_ITEM}((?:{_LIST_SEP}{_ITEM})*)")  # grader `x`, `y` or `z`
_GRADER_BEFORE = re.compile(rf"{_ITEM}\s+graders?\b|\bgraded (?:by|with)\s+{_ITEM}")  # the `x` grader, graded by `x`
_GRADER_KEY = re.compile(r'"?\bgrader"?\s*:\s*("[^"\n]*"|\{[^{}\n]*\})')  # "grader": "x" / {"type": "x", ...}


def grader_type(spelling: str) -> str:
    """The grader `type` a spelling names, parsed as `aci verify-task --grader` parses it; an illustrative
    JSON object that does not parse (`{"type": "regex", ...}`) is read for its `type`."""
    from aci.errors import ACIError
    from aci.graders import parse_spec

    try:
        return parse_spec(spelling)["type"]
    except ACIError:
        m = re.search(r'"type"\s*:\s*"([^"]+)"', spelling)
        return m.group(1) if m else spelling.strip()


def _grader_mentions(doc: Doc) -> tuple[list[tuple[int, str]], list[tuple[int, list[str]]]]:
    """(line, spelling) of every grader the document names, and (line, names) of each list of them."""
    code, _ = code_regions(doc)
    found: list[tuple[int, str]] = []
    for n, snippet in code:
        tokens = _split(snippet)
        for k, tok in enumerate(tokens):
            if tok == "--grader" and k + 1 < len(tokens):
                found.append((n, tokens[k + 1]))
            elif tok.startswith("--grader="):
                found.append((n, tok.split("=", 1)[1]))
        found += [(n, m.group(1).strip('"')) for m in _GRADER_KEY.finditer(snippet)]
    fence, lines = None, []
    for line in doc.lines:  # prose with the fenced blocks blanked, so a list can wrap onto the next line
        marker = re.match(r"^\s*(```+|~~~+)", line)
        if marker and (fence is None or marker.group(1).startswith(fence)):
            fence = None if fence else marker.group(1)[:3]
            lines.append("")
        else:
            lines.append("" if fence else line)
    prose = "\n".join(lines)

    def line_of(pos: int) -> int:
        return prose.count("\n", 0, pos) + 1

    lists = []
    for m in _GRADER_AFTER.finditer(prose):
        items = [(m.start(1), m.group(1))] + [(m.start(2) + i.start(1), i.group(1))
                                               for i in re.finditer(_ITEM, m.group(2))]
        found += [(line_of(pos), name) for pos, name in items]
        if len(items) >= 3:
            lists.append((line_of(m.start()), [name for _, name in items]))
    found += [(line_of(m.start()), m.group(1) or m.group(2)) for m in _GRADER_BEFORE.finditer(prose)]
    for k, line in enumerate(lines[:-1]):  # a table with a `grader` column
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if line.lstrip().startswith("|") and "grader" in cells and re.match(r"^\s*\|[\s:|-]+\|\s*$", lines[k + 1]):
            col = cells.index("grader")
            for n in range(k + 2, len(lines)):
                if not lines[n].lstrip().startswith("|"):
                    break
                row = lines[n].strip().strip("|").split("|")
                found += [(n + 1, name) for name in re.findall(_ITEM, row[col] if col < len(row) else "")]
    return found, lists


def check_graders(docs: list[Doc]) -> list[Problem]:
    """Every grader the Markdown names exists, and a list of graders names them all."""
    from aci.graders import GRADERS, NAMES

    problems = []
    for doc in docs:
        found, lists = _grader_mentions(doc)
        for n, spelling in found:
            if not _placeholder(spelling) and grader_type(spelling) not in GRADERS:
                problems.append(Problem(doc.rel, n, f"names grader {spelling!r}, which is not a grader "
                                                    f"(graders: {', '.join(NAMES)})"))
        for n, names in lists:
            missing = [g for g, cls in GRADERS.items() if g not in {grader_type(x) for x in names}]
            if missing:
                problems.append(Problem(doc.rel, n, f"a list of graders leaves out {', '.join(missing)} "
                                                    f"(aci.graders.GRADERS)"))
    return problems


# -- front matter and lengths -----------------------------------------------------------------------------
def front_matter(text: str) -> tuple[dict | None, str]:
    import yaml

    if not text.startswith("---\n"):
        return None, "no front matter (the file must start with a --- line)"
    end = text.find("\n---", 4)
    if end < 0:
        return None, "front matter is not closed by a --- line"
    try:
        data = yaml.safe_load(text[4:end])
    except yaml.YAMLError as e:
        return None, f"front matter is not valid YAML: {e}"
    if not isinstance(data, dict):
        return None, "front matter is not a mapping"
    return data, ""


def check_skill_files(root: Path, docs: list[Doc]) -> list[Problem]:
    problems = []
    skills = [(root / ENTRY, ENTRY_NAME)] + [
        (p, p.parent.name) for p in sorted((root / "skills").glob("*/SKILL.md"))]
    for path, expected in skills:
        rel = path.relative_to(root).as_posix()
        if not path.is_file():
            problems.append(Problem(rel, 1, "missing"))
            continue
        data, err = front_matter(path.read_text(encoding="utf-8"))
        if data is None:
            problems.append(Problem(rel, 1, err))
            continue
        for key in sorted(set(data) - FRONT_MATTER_KEYS):
            problems.append(Problem(rel, 1, f"front matter key {key!r} is not in the specification"))
        name, desc = data.get("name"), data.get("description")
        if not isinstance(name, str) or not (1 <= len(name) <= 64) or not NAME_RE.match(name):
            problems.append(Problem(rel, 1, f"name {name!r} must be 1-64 characters of a-z, 0-9 and single hyphens"))
        elif name != expected:
            problems.append(Problem(rel, 1, f"name {name!r} must equal the skill folder {expected!r}"))
        if not isinstance(desc, str) or not desc.strip():
            problems.append(Problem(rel, 1, "description is missing or empty"))
        else:
            if len(desc) > 1024:
                problems.append(Problem(rel, 1, f"description has {len(desc)} characters (max 1024)"))
            if "<" in desc or ">" in desc:
                problems.append(Problem(rel, 1, "description must not contain < or >"))
    for d in docs:
        limit = MAX_LINES_ENTRY if d.rel == ENTRY else MAX_LINES
        if len(d.lines) >= limit:
            problems.append(Problem(d.rel, len(d.lines), f"{len(d.lines)} lines (must stay under {limit})"))
    return problems


# -- links and references ---------------------------------------------------------------------------------
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    s = re.sub(r"[`*_~]|\[|\]\([^)]*\)", "", heading.strip().lower())
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(text: str) -> set[str]:
    out, seen = set(), {}
    fence = False
    for line in text.splitlines():
        if re.match(r"^\s*(```|~~~)", line):
            fence = not fence
        m = None if fence else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            k = seen.get(base, 0)
            out.add(base if k == 0 else f"{base}-{k}")
            seen[base] = k + 1
    return out


def _shipped(root: Path, p: Path) -> bool:
    try:
        rel = p.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return rel.parts[0] in SHIPPED if rel.parts else False


def links(doc: Doc) -> list[tuple[int, str, Path, str]]:
    """(line, target, resolved file, anchor) of every relative link outside code."""
    out = []
    _, prose = code_regions(doc)
    for n, line in prose:
        for m in _LINK.finditer(line):
            target = m.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue  # http:, mailto:, skill:// ...
            file_part, _, anchor = target.partition("#")
            out.append((n, target, (doc.path.parent / file_part).resolve() if file_part else doc.path, anchor))
    return out


def broken_links(doc: Doc) -> list[tuple[int, str]]:
    """(line, message) for every relative link whose file or `#anchor` does not exist."""
    out = []
    for n, target, dest, anchor in links(doc):
        if not dest.exists():
            out.append((n, f"broken link {target!r}"))
        elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest.read_text(encoding="utf-8"))):
            out.append((n, f"link {target!r}: no heading #{anchor} in {dest.name}"))
    return out


def check_links(root: Path, docs: list[Doc]) -> list[Problem]:
    problems = []
    for doc in docs:
        problems += [Problem(doc.rel, n, msg) for n, msg in broken_links(doc)]
        if _shipped(root, doc.path):
            for n, target, dest, _ in links(doc):
                if dest.exists() and not _shipped(root, dest):
                    problems.append(Problem(doc.rel, n, f"link {target!r} leaves the shipped bundle "
                                                        f"({', '.join(SHIPPED)}); installed copies would break"))
    return problems


def check_references(root: Path, docs: list[Doc]) -> list[Problem]:
    problems = []
    for doc in docs:
        for n, line in enumerate(doc.lines, 1):
            for m in re.finditer(r"(?<![\w.-])skills/([a-z0-9-]+)", line):
                if not (root / "skills" / m.group(1) / "SKILL.md").is_file():
                    problems.append(Problem(doc.rel, n, f"skills/{m.group(1)} does not exist"))
            for m in re.finditer(r"(?<![\w.-])workflows/([a-z0-9-]+)\.md", line):
                if not (root / "workflows" / f"{m.group(1)}.md").is_file():
                    problems.append(Problem(doc.rel, n, f"workflows/{m.group(1)}.md does not exist"))
    return problems


# -- rules and phases -------------------------------------------------------------------------------------
def _rules_file(root: Path):
    from aci import rules

    rules.load_file.cache_clear()
    return rules.load_file(root / "rules" / "rules.yaml")


def check_rules(root: Path) -> list[Problem]:
    from aci import registry

    rel = "rules/integrity.md"
    path = root / rel
    if not path.is_file():
        return [Problem(rel, 1, "missing")]
    data = _rules_file(root)
    yaml_ids = [r.id for r in data.rules]
    sections: dict[str, tuple[int, list[str]]] = {}
    current = None
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = re.match(r"^###\s+(\S+)\s*$", line)
        if m:
            current = m.group(1).strip("`")
            sections[current] = (n, [])
        elif re.match(r"^#{1,2}\s", line):
            current = None
        elif current:
            sections[current][1].append(line)
    problems = []
    for rid in yaml_ids:
        if rid not in sections:
            problems.append(Problem(rel, 1, f"rule {rid!r} of rules.yaml has no '### {rid}' section"))
    for rid, (n, _) in sections.items():
        if rid not in yaml_ids:
            problems.append(Problem(rel, n, f"section '### {rid}' names no rule in rules.yaml"))
    tools = registry.tools()
    for r in data.rules:
        for t in r.enforced_by:
            if t not in tools:
                problems.append(Problem("rules/rules.yaml", 1, f"rule {r.id}: enforced_by names unknown tool {t!r}"))
        if r.id in sections:
            n, body = sections[r.id]
            named = set(re.findall(r"`aci ([a-z0-9-]+)", "\n".join(body)))
            for t in r.enforced_by:
                if t not in named:
                    problems.append(Problem(rel, n, f"rule {r.id}: section does not say what `aci {t}` does "
                                                    f"(rules.yaml enforced_by)"))
    return problems


def check_guidance(root: Path) -> list[Problem]:
    """The next actions in rules.yaml are read by agents like the Markdown: their aci commands must exist."""
    rel = "rules/rules.yaml"
    data = _rules_file(root)
    lines = (root / rel).read_text(encoding="utf-8").splitlines()
    glob, commands = vocabulary()
    problems = []
    for guide in [data.before_run_card, *data.phases.values()]:
        for action in guide.next:
            n = next((k for k, line in enumerate(lines, 1) if action[:40] in line), 1)
            for inv in _invocations(_split(action.replace("(", " "))):
                tokens = []
                for tok in inv:  # an invocation in a sentence ends at its punctuation or the next `aci`
                    word = tok.rstrip(",;.)")
                    if tok == "aci" or not word:
                        break
                    tokens.append(word)
                    if word != tok:
                        break
                problems += [Problem(rel, n, m) for m in check_command(tokens, glob, commands)]
    return problems


def _fmt(x: float) -> str:
    return f"{x:g}"


def check_phases(root: Path, docs: list[Doc]) -> list[Problem]:
    rel = "workflows/posttrain.md"
    path = root / rel
    if not path.is_file():
        return [Problem(rel, 1, "missing")]
    data = _rules_file(root)
    lines = path.read_text(encoding="utf-8").splitlines()
    stages = [(n, STAGE_RE.match(line)) for n, line in enumerate(lines, 1)]
    stages = [(n, m) for n, m in stages if m]
    problems = []
    found = [(m.group(2), m.group(3)) for _, m in stages]
    numbers = [int(m.group(1)) for _, m in stages]
    if numbers != list(range(len(numbers))):
        problems.append(Problem(rel, stages[0][0] if stages else 1, f"stages must be numbered 0..N in order, got {numbers}"))
    table = {}
    for n, line in enumerate(lines, 1):
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 + len(data.profiles) and cells[0] in {p for p, _ in found}:
            table[cells[0]] = (n, cells)
    for pname, prof in data.profiles.items():
        want = [(p.name, p.gate) for p in prof.phases]
        if found != want:
            problems.append(Problem(rel, 1, f"stage headings {found} differ from profile {pname}'s phases {want} "
                                            "(format: '## Stage N: <phase> (gate: <gate>)')"))
    header = next((line for line in lines if line.startswith("| phase |")), None)
    if header is None:
        problems.append(Problem(rel, 1, "no time-share table (a row starting '| phase |')"))
        return problems
    cols = [c.strip() for c in header.strip().strip("|").split("|")]
    for pname, prof in data.profiles.items():
        col = next((k for k, c in enumerate(cols) if pname in c), None)
        if col is None:
            problems.append(Problem(rel, 1, f"time-share table has no column for profile {pname}"))
            continue
        budget = prof.budget_hours * 60
        for ph, minutes in prof.allocation(budget):
            row = table.get(ph.name)
            if row is None:
                problems.append(Problem(rel, 1, f"time-share table has no row for phase {ph.name}"))
                continue
            n, cells = row
            expect = f"{_fmt(round(minutes / budget * 100, 3))} % ({_fmt(round(minutes, 1))} min)"
            if col >= len(cells) or cells[col] != expect:
                got = cells[col] if col < len(cells) else ""
                problems.append(Problem(rel, n, f"phase {ph.name}, profile {pname}: table says {got!r}, "
                                                f"rules.yaml gives {expect!r}"))
    return problems


# -- defaults the Markdown states: a figure marked [D] is a default of `aci train` --------------------------
DEFAULT_MARK = re.compile(r"\[D\]")
SOURCE_MARK = re.compile(r"\[[A-Z]\]")
# "<label> <value>" inside a [D] claim -> the `aci train` option whose default it states
LABELLED = {
    r"\br (\d+)\b": "lora_r",
    r"\balpha (\d+)\b": "lora_alpha",
    r"\bdropout (\d*\.?\d+)\b": "lora_dropout",
    r"\b(\d+) generations\b": "num_generations",
    r"\b(\d*\.?\d+) epochs?\b": "epochs",
}


@dataclass(frozen=True)
class Claim:
    line: int
    what: str
    stated: float | str
    actual: float | str


def _option(field: str) -> str:
    return "--" + field.replace("_", "-")


def _claims_in(text: str) -> list[str]:
    """The text each [D] marks: back to the table cell's start or the previous source marker."""
    out = []
    for m in DEFAULT_MARK.finditer(text):
        start = text.rfind("|", 0, m.start()) + 1
        for prev in SOURCE_MARK.finditer(text, 0, m.start()):
            start = max(start, prev.end())
        out.append(text[start:m.start()])
    return out


def default_claims(doc: Doc) -> list[Claim]:
    """Every `aci train` default a document states with [D], beside the default the live tool has."""
    from aci import registry
    from aci.training.request import LEARNING_RATES, LORA_TARGETS

    fields = registry.get("train").input.model_fields
    out = []
    for n, line in enumerate(doc.lines, 1):
        for claim in _claims_in(line):
            for pattern, name in LABELLED.items():
                for m in re.finditer(pattern, claim):
                    out.append(Claim(n, _option(name), float(m.group(1)), float(fields[name].default)))
            for m in re.finditer(r"`--([a-z-]+)`[^`]*?\bdefault (\d*\.?\d+)", claim):
                name = m.group(1).replace("-", "_")
                if name in fields:
                    out.append(Claim(n, _option(name), float(m.group(2)), float(fields[name].default)))
            method = "grpo" if "grpo" in claim else "sft"
            for m in re.finditer(r"\blr (\S+?)(?: full / (\S+?) LoRA)?(?=[\s,;)]|$)", claim):
                pairs = [(False, m.group(1)), (True, m.group(2))] if m.group(2) else [(bool(re.search(r"--lora|\bLoRA\b", claim)), m.group(1))]
                out += [Claim(n, f"learning rate ({method}{', LoRA' if lora else ''})", float(v),
                              LEARNING_RATES[method, lora]) for lora, v in pairs]
            for m in re.finditer(r"\b(\d+)x the full fine-tuning rate", claim):
                out.append(Claim(n, "LoRA / full learning rate", float(m.group(1)),
                                 LEARNING_RATES["sft", True] / LEARNING_RATES["sft", False]))
            if "all linear layers" in claim:
                out.append(Claim(n, "LoRA target modules", "all-linear", LORA_TARGETS))
    return out


def check_defaults(docs: list[Doc]) -> list[Problem]:
    """A default the Markdown states must be the tool's: the skill is checked against the request model."""
    problems = []
    for doc in docs:
        for c in default_claims(doc):
            same = c.stated == c.actual if isinstance(c.stated, str) else abs(c.stated - c.actual) <= 1e-9 * abs(c.actual)
            if not same:
                stated = c.stated if isinstance(c.stated, str) else _fmt(c.stated)
                actual = c.actual if isinstance(c.actual, str) else _fmt(c.actual)
                problems.append(Problem(doc.rel, c.line, f"{c.what}: the text says {stated} [D], but aci train's "
                                                         f"default is {actual}"))
    return problems


def check(root: Path | None = None) -> list[Problem]:
    """Every disagreement between the Markdown at `root` (default: the bundle) and the tools and rules."""
    root = Path(root or bundle.root())
    docs = documents(root)
    # figures and dataset ids, provenance: both import this module
    from tests import bundle_facts, bundle_provenance

    return (check_skill_files(root, docs) + check_links(root, docs) + check_references(root, docs)
            + check_commands(docs) + check_graders(docs) + check_rules(root) + check_guidance(root) + check_phases(root, docs)
            + check_defaults(docs) + bundle_facts.check(root, docs) + bundle_provenance.check(root, docs))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    problems = check(Path(argv[0]) if argv else None)
    for p in problems:
        print(p)
    print(f"{len(problems)} problem(s)", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
