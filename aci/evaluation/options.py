"""Which option of an eval command is the model path, the sample limit, the output file and the seed.

A user's eval script has its own option names (`--checkpoint`, `--n`, `--out`), so `plan init` asks the
script: it runs the script's `--help` once (argparse and click print their options there; a short
timeout, no stdin, its own process group, `aci.processes.run_briefly`) and reads each option's names,
whether it takes a value, and its help text. A role is placed on an option by what the user said
(`--limit-option` and the like), else by PostTrainBench's names (`--model-path`, `--limit`,
`--json-output-file`), else by the option's name and help text together (`--n N  number of problems,
0 = all`). A role two options fit equally is not guessed: plan init asks for it. The value that means
"every item" (`0`, `-1`) comes from the limit option's help text, else from the command as typed (a
count of 0 or below can only mean all). `aci.evaluation.translation` rewrites the command with it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from aci.errors import ACIError
from aci.processes import run_briefly

HELP_TIMEOUT_S = 10.0  # a script that imports its stack before argparse answers --help in seconds
ROLES = ("model_path", "limit", "output", "seed")
PLACEHOLDER = {"model_path": "{model_path}", "limit": "{limit}", "output": "{output}", "seed": "{seed}"}
WHAT = {"model_path": "the model path", "limit": "the sample limit", "output": "the metrics output file",
        "seed": "the seed"}
# PostTrainBench's evaluate.py: these names are placed first, and also when its --help cannot be read (it may
# import its whole stack before argparse answers).
KNOWN = {"--model-path": "model_path", "--model_path": "model_path", "--limit": "limit",
         "--json-output-file": "output"}

# Option names (without dashes, `_` as `-`) that say the role by themselves, and words in a help text that do.
_NAMES = {
    "model_path": {"model-path", "model", "checkpoint", "ckpt", "model-dir", "model-name-or-path", "model-name",
                   "pretrained", "model-folder", "checkpoint-path", "checkpoint-dir", "ckpt-path", "model-id"},
    "limit": {"limit", "n", "num-samples", "n-samples", "max-samples", "num-examples", "n-examples", "max-examples",
              "samples", "num", "count", "num-items", "n-items", "max-items", "num-problems", "num-questions",
              "sample-limit", "max-n", "sample", "sample-size", "subsample", "num-sample", "n-sample"},
    "output": {"out", "output", "output-file", "out-file", "output-path", "json-output-file", "json", "json-out",
               "json-output", "results", "results-file", "result-file", "metrics", "metrics-file", "save-path",
               "output-json", "metrics-out", "results-out"},
    "seed": {"seed", "random-seed", "rng-seed", "sampling-seed"},
}
_HELP = {
    "model_path": re.compile(r"(?i)\b(model|checkpoint|weights)\b"),
    "limit": re.compile(r"(?i)\b(number|count|how many|limit|first|at most|max(imum)?)\b.{0,30}\b(samples?|examples?|"
                        r"items?|problems?|questions?|instances?|tasks?|rows?)\b|\b(samples?|examples?|items?|"
                        r"problems?|questions?) to (evaluate|score|use|run)\b"),
    "output": re.compile(r"(?i)\b(output|write|save|results?|metrics|report)\b.{0,40}\b(json|file|path)\b|"
                         r"\bjson\b.{0,30}\b(output|results?|metrics)\b"),
    "seed": re.compile(r"(?i)\bseed\b"),
}
# Words in a name that rule a role out (`--max-tokens` is no sample limit, `--output-dir` no output file).
_NOT = {
    "model_path": re.compile(r"token|revision|type|dtype|len|max|kwargs|args"),
    "limit": re.compile(r"token|len|batch|connection|worker|thread|shot|gpu|proc|epoch|step|seed|beam|retr|context|"
                        r"parallel|concurr"),
    "output": re.compile(r"dir|folder|log"),
    "seed": re.compile(r"^$"),
}
_OPTION_NAME = re.compile(r"-{1,2}[A-Za-z0-9][\w.-]*")  # what a command line's option name looks like
_DIRECTORY = re.compile(r"(?i)\b(directory|folder|dir)\b")
_ALL_WORDS = re.compile(r"(?i)\b(all|every|entire|whole|full|no limit|unlimited)\b")
_DEFAULT_ALL = re.compile(r"(?i)\bdefault\b\W{0,3}(is\s+)?(all|every|the (whole|full|entire))\b")
OMIT = "omit"  # the limit value that means every item is no value: the option is left out
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?![\w.])")


@dataclass(frozen=True)
class HelpOption:
    names: tuple[str, ...]
    takes_value: bool
    help: str = ""

    @property
    def name(self) -> str:
        """The long name when there is one (what the template writes)."""
        return next((n for n in self.names if n.startswith("--")), self.names[0])


@dataclass
class Help:
    """What `--help` said, or why nothing was read."""

    options: list[HelpOption] = field(default_factory=list)
    source: str = ""  # e.g. "`python eval.py --help`"
    problem: str | None = None  # set when the help could not be read

    def find(self, name: str) -> HelpOption | None:
        return next((o for o in self.options if name in o.names), None)

    def names_of(self, name: str) -> tuple[str, ...]:
        """Every name of option `name` (`-n, --limit`), or the name alone when the help does not list it."""
        found = self.find(name)
        return found.names if found else (name,)


def program(parts: list[str]) -> list[str]:
    """The words that start the script (`python eval.py`, `python -m pkg.eval`, `./eval.sh`, `my-eval`)."""
    for k, word in enumerate(parts):
        if word == "-m" and k + 1 < len(parts):
            return parts[:k + 2]
        if k and word.endswith((".py", ".sh", ".js", ".rb", ".pl")):
            return parts[:k + 1]
    first_option = next((k for k, w in enumerate(parts) if k and w.startswith("-")), len(parts))
    return parts[:max(first_option, 1)]


def read_help(parts: list[str], cwd: Path, timeout_s: float | None = None) -> Help:
    """Run the script's `--help` once and parse its options; a script that has none is no error."""
    timeout_s = HELP_TIMEOUT_S if timeout_s is None else timeout_s
    argv = [*program(parts), "--help"]
    source = f"`{' '.join(argv)}`"
    rc, text = run_briefly(argv, cwd, timeout_s)
    options = parse_help(text)  # a script that printed its help and went on running still listed them
    if options:
        return Help(options=options, source=source)
    if rc is None:
        return Help(source=source, problem=f"{source} {text}" if text.startswith("could not start") else
                    f"{source} printed no options within {timeout_s:g} s")
    return Help(source=source, problem=f"{source} exited with code {rc} and listed no options")


_BOX = re.compile(r"^[\s│┃|]+|[\s│┃|]+$")  # typer/rich draw boxes around the options


def parse_help(text: str) -> list[HelpOption]:
    """The options an argparse, click or typer help text lists: names, whether a value follows, help text."""
    out: list[tuple[list[str], bool, list[str]]] = []
    current = None
    for raw in text.splitlines():
        line = _BOX.sub("", raw.expandtabs())
        indented = raw[:1].isspace() or raw[:1] in "│┃|"
        if line.startswith("-"):
            m = re.match(r"(\S.*?)(?:\s{2,}(.*))?$", line)
            names, takes = _spec(m.group(1))
            if names:
                current = (names, takes, [m.group(2).strip()] if m.group(2) else [])
                out.append(current)
                continue
        if current is not None and indented and line:
            current[2].append(line)  # the help text goes on
        else:
            current = None  # a blank line or a section heading ends it
    seen, options = set(), []
    for names, takes, words in out:
        if names[0] not in seen:
            seen.update(names)
            options.append(HelpOption(tuple(names), takes, " ".join(words)))
    return options


def _spec(spec: str) -> tuple[list[str], bool]:
    """`-n N, --num N` -> (["-n", "--num"], True); `--verbose / --no-verbose` -> (["--verbose"], False)."""
    names, takes = [], False
    for part in spec.split(","):
        words = part.strip().split("/")[0].split()
        if not words:
            continue
        head, _, inline = words[0].partition("=")
        if not _OPTION_NAME.fullmatch(head):
            return [], False
        names.append(head)
        takes = takes or bool(inline) or len(words) > 1
    return names, takes


def _norm(name: str) -> str:
    return name.lstrip("-").lower().replace("_", "-")


def _score(role: str, opt: HelpOption) -> int:
    """How well `opt` fits `role`: 2 for a telling name, 1 for a name that contains it, 1 for telling help."""
    if not opt.takes_value:
        return 0
    names = [_norm(n) for n in opt.names]
    if any(_NOT[role].search(n) for n in names) or (role == "output" and _DIRECTORY.search(opt.help)
                                                     and not re.search(r"(?i)\bfile\b", opt.help)):
        return 0
    score = 2 if any(n in _NAMES[role] for n in names) else \
        1 if any(w in n.split("-") for n in names for w in _NAMES[role] if len(w) > 2) else 0
    return score + (1 if _HELP[role].search(opt.help) else 0)


def place(role: str, help: Help, taken: set[str]) -> tuple[str | None, list[str]]:
    """The option `role` is placed on from the help text, and the other options that fit as well (a tie)."""
    scored = sorted(((_score(role, o), o.name) for o in help.options if not taken & set(o.names)), reverse=True)
    scored = [(s, n) for s, n in scored if s >= 2]
    if not scored:
        return None, []
    best = scored[0][0]
    ties = sorted(n for s, n in scored if s == best)
    return (ties[0], []) if len(ties) == 1 else (None, ties)


def all_value(help_text: str, typed: str | None) -> tuple[str | None, str | None]:
    """The limit value that means every item, and where it was read: the limit option's help (`0 = all`,
    `-1 for all`), else the value as typed when it is 0 or below (no count of items)."""
    found = set()
    numbers = list(_NUMBER.finditer(help_text))
    for word in _ALL_WORDS.finditer(help_text):  # the number nearest each "all" ("default 150, -1 for all": -1)
        near = [(min(abs(m.start() - word.end()), abs(word.start() - m.end())), m.group()) for m in numbers]
        near = [(d, n) for d, n in near if d <= 25]
        if near:
            found.add(min(near)[1])
    if len(found) == 1:
        return found.pop(), "its help text"
    if not found and _DEFAULT_ALL.search(help_text):
        return OMIT, "its help text: without the option it scores every item"
    if typed is not None and re.fullmatch(r"-?\d+", typed) and int(typed) <= 0:
        return typed, "the command as typed"
    return None, None


def roles(parts: list[str], help: Help, given: dict[str, str]) -> tuple[dict[str, str], dict[str, str], dict]:
    """(role -> option, role -> how it was placed, role -> options that tie for it)."""
    placed, how, ties = {}, {}, {}
    for role, opt in given.items():
        if not _OPTION_NAME.fullmatch(opt or ""):
            raise ACIError(f"{WHAT[role]} option {opt!r} is not an option name (e.g. --n)")
        placed[role], how[role] = opt, "given"
    typed = {p.partition("=")[0] for p in parts if p.startswith("-")}
    for name, role in KNOWN.items():
        if role not in placed and (name in typed or help.find(name)):
            placed[role], how[role] = name, "the usual option name"
    for role in ROLES:
        if role in placed or not help.options:
            continue
        taken = {n for o in placed.values() for n in help.names_of(o)}
        name, tie = place(role, help, taken)
        if name:
            placed[role], how[role] = name, f"its name and help in {help.source}"
        elif tie:
            ties[role] = tie
    return placed, how, ties
