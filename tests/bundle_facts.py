"""Figures and dataset names in the Markdown that must agree with `rules/rules.yaml` and the data tables.

An agent acts on the numbers it reads: a final reserve, a tolerance of contaminated rows or a minimum
sample count copied by hand goes stale the day `rules.yaml` changes, and the skills then contradict the
tools. So (part of `tests.bundle_check`):

* `rules/integrity.md` holds one table of every profile's numbers, rendered from `rules.yaml` between two
  marker lines; it must equal a fresh render (`python -m tests.bundle_facts --render [ROOT]` rewrites it);
* any other copy is checked where it stands: a final reserve in minutes, a count of tolerated
  contaminated rows, a minimum `max(A, F %)` and its worked value `M = max(A, F % of N)`; each against
  the profile the sentence names right after it (`... under posttrainbench`, `... under default`), else
  against some profile;
* every dataset id in the allowed table of `skills/data/references/sources.md` passes each profile's
  banned ids and patterns, and every `owner/name` dataset id that a recipe names (the benchmark cards,
  the data skill, the self-improvement workflow) is in that table or refused by the rules.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

from tests.bundle_check import Doc, Problem, _fmt, _rules_file, documents

NUMBERS_DOC = "rules/integrity.md"
BEGIN = "<!-- rendered from rules/rules.yaml by `python -m tests.bundle_facts --render`; do not edit -->"
END = "<!-- end of rendered numbers -->"
SOURCES_DOC = "skills/data/references/sources.md"
ALLOWED_HEADING = "## Allowed datasets"
RECIPE_DOCS = ("skills/recon/references/", "skills/data/", "workflows/self-improvement.md")
_FOLDERS = {"templates", "state", "rollouts", "evaluation_code", "task_context", "skills", "workflows", "rules",
            "references", "logs", "src", "tests", "plots", "final_model", "data"}
_DATASET_ID = re.compile(r"`([A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)`")
_PROFILE_AFTER = re.compile(r"\s*\)?\s*under (\w+)\b")

# A reserve figure: "final reserve is 45 min", "reserve starts (45 min)", "45-min final reserve", and on
# lines near a mention of the reserve, "30 min under default".
_RESERVE = (re.compile(r"(?i)\breserve\b(?: starts| begins| is| of)?[^.;|\n\d]{0,30}?\(?(\d+(?:\.\d+)?)[ -]?min\b"),
            re.compile(r"(?i)\b(\d+(?:\.\d+)?)[ -]?min(?:ute)?s?[ -](?:final[ -])?reserve\b"))
_MIN_UNDER = re.compile(r"\b(\d+(?:\.\d+)?)[ -]?min(?:utes)? under (\w+)\b")
_ROWS = (re.compile(r"(?i)\b(?:at most|up to|above|more than|over)\s+(\d+)\s+(?:accidental\s+)?contaminated\s+"
                    r"(?:rows?|samples?|documents?)"),
         re.compile(r"(?i)\b(\d+)\s+contaminated rows?\s+(?:are\s+)?tolerated"))
_ROWS_UNDER = re.compile(r"(?<![\d.])(\d+) under (\w+)\b")  # "..., 0 under default" just after a _ROWS figure
_MAX = re.compile(r"max\((\d+), ?(\d+(?:\.\d+)?) ?%")
_WORKED = (re.compile(r"\b(?P<m>\d+) = max\((?P<a>\d+), ?(?P<f>\d+(?:\.\d+)?) ?% of (?P<n>[\d,]+)\)"),
           re.compile(r"max\((?P<a>\d+), ?(?P<f>\d+(?:\.\d+)?) ?% of (?P<n>[\d,]+)\) = (?P<m>\d+)\b"))


# -- the rendered table ------------------------------------------------------------------------------------
def render_numbers(data) -> str:
    """The profile-numbers table of `rules/integrity.md`, from the rules file."""
    names = list(data.profiles)
    rows = [
        ("final reserve, minutes (`final_reserve_min`)", lambda p: _fmt(p.final_reserve_min)),
        ("budget, hours (`budget_hours`)", lambda p: _fmt(p.budget_hours)),
        ("contaminated rows tolerated (`contamination.tolerated_rows`)", lambda p: str(p.contamination.tolerated_rows)),
        ("contamination threshold (`contamination.threshold`)", lambda p: _fmt(p.contamination.threshold)),
        ("contamination check required before training", lambda p: "yes" if p.contamination.required_before_training
         else "no"),
        ("minimum samples to compare two models (`min_eval_samples`)",
         lambda p: f"max({p.min_eval_samples.absolute}, {_fmt(p.min_eval_samples.fraction * 100)} % of the items)"),
        ("histogram tolerance, percentage points (`histogram_tolerance_pp`)", lambda p: _fmt(p.histogram_tolerance_pp)),
        ("who may generate rollouts (`teacher`)", lambda p: p.teacher),
    ]
    out = [BEGIN, f"| setting | {' | '.join(names)} |", "|---|" + "---|" * len(names)]
    out += [f"| {label} | {' | '.join(get(data.profiles[n]) for n in names)} |" for label, get in rows]
    return "\n".join([*out, END])


def _rendered_span(text: str) -> tuple[int, int] | None:
    start, end = text.find(BEGIN), text.find(END)
    return (start, end + len(END)) if 0 <= start < end else None


def check_rendered(root: Path) -> list[Problem]:
    path = root / NUMBERS_DOC
    if not path.is_file():
        return []  # check_rules reports the missing file
    text = path.read_text(encoding="utf-8")
    span = _rendered_span(text)
    if span is None:
        return [Problem(NUMBERS_DOC, 1, f"no rendered profile-numbers table (the lines {BEGIN!r} ... {END!r})")]
    if text[span[0]:span[1]] != render_numbers(_rules_file(root)):
        line = text.count("\n", 0, span[0]) + 1
        return [Problem(NUMBERS_DOC, line, "the profile-numbers table differs from rules.yaml: run "
                                           "`python -m tests.bundle_facts --render`")]
    return []


def write_rendered(root: Path) -> bool:
    """Rewrite the rendered table from rules.yaml; True when the file changed."""
    path = root / NUMBERS_DOC
    text = path.read_text(encoding="utf-8")
    span = _rendered_span(text)
    if span is None:
        raise SystemExit(f"{NUMBERS_DOC}: no {BEGIN!r} ... {END!r} block to render into")
    new = text[:span[0]] + render_numbers(_rules_file(root)) + text[span[1]:]
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text


# -- figures copied into prose -------------------------------------------------------------------------------
def _prose_lines(doc: Doc) -> list[tuple[int, str]]:
    """Lines outside fenced code blocks and outside the rendered table."""
    out, fence, rendered = [], False, False
    for n, line in enumerate(doc.lines, 1):
        if re.match(r"^\s*(```|~~~)", line):
            fence = not fence
        elif line.strip() in (BEGIN, END):
            rendered = line.strip() == BEGIN
        elif not fence and not rendered:
            out.append((n, line))
    return out


def _paragraphs(doc: Doc) -> list[tuple[str, list[tuple[int, int]]]]:
    """Prose joined per paragraph (a figure and its profile may sit on two lines), each with the offset
    at which every source line starts. A table row or a heading is a paragraph of its own."""
    out: list[tuple[str, list[tuple[int, int]]]] = []
    text, starts, last = "", [], None
    for n, line in _prose_lines(doc):
        alone = line.lstrip().startswith(("|", "#"))
        if not line.strip() or alone or last is None or n != last + 1:
            if text:
                out.append((text, starts))
            text, starts = "", []
        if line.strip():
            starts.append((len(text) + (1 if text else 0), n))
            text = f"{text} {line.strip()}" if text else line.strip()
            if alone:
                out.append((text, starts))
                text, starts = "", []
        last = n
    if text:
        out.append((text, starts))
    return out


def _line_at(starts: list[tuple[int, int]], offset: int) -> int:
    return [n for at, n in starts if at <= offset][-1]


def _attributed(text: str, end: int) -> str | None:
    m = _PROFILE_AFTER.match(text, end)
    return m.group(1) if m else None


def check_figures(root: Path, docs: list[Doc]) -> list[Problem]:
    data = _rules_file(root)
    reserve = {n: _fmt(p.final_reserve_min) for n, p in data.profiles.items()}
    rows = {n: str(p.contamination.tolerated_rows) for n, p in data.profiles.items()}
    mins = {(p.min_eval_samples.absolute, _fmt(p.min_eval_samples.fraction * 100)) for p in data.profiles.values()}
    problems: set[Problem] = set()

    def judge(rel, starts, at, what, value, profile, allowed, key):
        if profile is not None and profile not in allowed:
            return  # "under <word>" that names no profile: not an attribution
        want = {allowed[profile]} if profile else set(allowed.values())
        if value not in want:
            where = f"profile {profile}'s" if profile else "any profile's"
            problems.add(Problem(rel, _line_at(starts, at), f"{what} of {value} is not {where} (rules.yaml "
                                 f"{key}: {', '.join(f'{k} {v}' for k, v in allowed.items())})"))

    for doc in docs:
        paragraphs = _paragraphs(doc)
        for k, (text, starts) in enumerate(paragraphs):
            near_reserve = any("reserve" in t.lower() for t, _ in paragraphs[max(0, k - 1):k + 1])
            for rx in _RESERVE:
                for m in rx.finditer(text):
                    judge(doc.rel, starts, m.start(), "final reserve", m.group(1), _attributed(text, m.end()), reserve,
                          "final_reserve_min")
            if near_reserve:
                for m in _MIN_UNDER.finditer(text):
                    judge(doc.rel, starts, m.start(), "final reserve", m.group(1), m.group(2), reserve, "final_reserve_min")
            for rx in _ROWS:
                for m in rx.finditer(text):
                    judge(doc.rel, starts, m.start(), "tolerated contaminated rows", m.group(1), _attributed(text, m.end()),
                          rows, "contamination.tolerated_rows")
                    for o in _ROWS_UNDER.finditer(text, m.end(), m.end() + 40):
                        judge(doc.rel, starts, o.start(), "tolerated contaminated rows", o.group(1), o.group(2), rows,
                              "contamination.tolerated_rows")
            for m in _MAX.finditer(text):
                if (int(m.group(1)), m.group(2)) not in mins:
                    problems.add(Problem(doc.rel, _line_at(starts, m.start()), f"minimum samples max({m.group(1)}, "
                                         f"{m.group(2)} %) differs from rules.yaml min_eval_samples"))
            for rx in _WORKED:
                for m in rx.finditer(text):
                    items = int(m.group("n").replace(",", ""))
                    value = max(int(m.group("a")), math.ceil(float(m.group("f")) / 100 * items))
                    if int(m.group("m")) != value:
                        problems.add(Problem(doc.rel, _line_at(starts, m.start()), f"max({m.group('a')}, "
                                             f"{m.group('f')} % of {m.group('n')}) is {value}, not {m.group('m')}"))
    return sorted(problems, key=lambda p: (p.file, p.line, p.message))


# -- dataset ids -----------------------------------------------------------------------------------------------
def allowed_ids(root: Path) -> dict[str, int]:
    """Dataset id (lower case) -> line, from the first column of the allowed table in sources.md."""
    path = root / SOURCES_DOC
    if not path.is_file():
        return {}
    out, inside = {}, False
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("## "):
            inside = line.strip() == ALLOWED_HEADING
        elif inside and line.startswith("|"):
            m = _DATASET_ID.match(line.strip("| ").split("|")[0].strip())
            if m:
                out[m.group(1).lower()] = n
    return out


def _dataset_like(token: str) -> bool:
    first = token.split("/", 1)[0]
    return first not in _FOLDERS and not re.search(r"\.(md|py|jsonl?|jinja|sh|txt|ya?ml|toml|csv|html)$", token)


def check_datasets(root: Path, docs: list[Doc]) -> list[Problem]:
    from aci import rules

    data = _rules_file(root)
    profiles = [rules.Rules(data, name) for name in data.profiles]
    allowed = allowed_ids(root)
    problems = []
    if not allowed and (root / SOURCES_DOC).is_file():
        problems.append(Problem(SOURCES_DOC, 1, f"no allowed table (a '{ALLOWED_HEADING}' section whose rows "
                                                "start with a `dataset/id`)"))

    def refused(name: str) -> str | None:
        for r in profiles:
            try:
                r.check_dataset_name(name)
            except Exception as e:  # ACIError naming the banned id or pattern
                return f"{r.name}: {e}"
        return None

    for name, n in sorted(allowed.items(), key=lambda kv: kv[1]):
        why = refused(name)
        if why:
            problems.append(Problem(SOURCES_DOC, n, f"allowed dataset {name!r} is banned by rules.yaml ({why[:120]})"))
    for doc in docs:
        if not doc.rel.startswith(RECIPE_DOCS):
            continue
        for n, line in _prose_lines(doc):
            for m in _DATASET_ID.finditer(line):
                name = m.group(1)
                if _dataset_like(name) and name.lower() not in allowed and not refused(name):
                    problems.append(Problem(doc.rel, n, f"dataset {name!r} is neither in the allowed table of "
                                                        f"{SOURCES_DOC} nor banned by rules.yaml: add it to one"))
    return problems


def check(root: Path, docs: list[Doc]) -> list[Problem]:
    return check_rendered(root) + check_figures(root, docs) + check_datasets(root, docs)


def main(argv: list[str] | None = None) -> int:
    """`--render [ROOT]` rewrites the rendered table; otherwise print this module's findings."""
    from aci import bundle

    argv = sys.argv[1:] if argv is None else argv
    render = "--render" in argv
    rest = [a for a in argv if a != "--render"]
    root = Path(rest[0]) if rest else Path(bundle.root())
    if render:
        print("rendered" if write_rendered(root) else "unchanged")
        return 0
    problems = check(root, documents(root))
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
