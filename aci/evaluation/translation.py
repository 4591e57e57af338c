"""The eval command as the user typed it -> the template the tools run, and the mapping plan records.

`plan init` takes the command the user runs by hand (`python eval.py --checkpoint final_model --n 0 --out
results.json`), asks the script which option is which (`aci.evaluation.options`), puts a placeholder in
each role's value (`{model_path}`, `{limit}`, `{output}`, `{seed}`), adds the options the tools need that
the command lacks, and says each change in words. The mapping (which option, how it was placed, the
value meaning every item) goes into the run card (`records.EvalOptions`) and is printed.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from aci.errors import ACIError
from aci.evaluation.options import OMIT, PLACEHOLDER, ROLES, WHAT, Help, all_value, read_help, roles

SUBMISSION_DIR = "final_model"  # the folder a command as typed names as the model
WHY = {
    "model_path": "each evaluation points it at the checkpoint it scores",
    "limit": "each evaluation fills it from its own `--limit N` and leaves it out without one (then the script's "
             "default applies: score the full set with `--limit -1`)",
    "output": "each trial writes its metrics JSON there for the tools to read",
    "seed": "each trial passes its own seed (--trials k: seeds 0..k-1)",
}
_PLAIN = re.compile(r"[\w@%+=:,./{}-]+")


@dataclass(frozen=True)
class Translation:
    """The template the tools run, each change made to the command as typed (in words), and the mapping
    of roles to options that the run card records (`records.EvalOptions`)."""

    command: str
    changes: list[str] = field(default_factory=list)
    options: dict = field(default_factory=dict, compare=False)
    warnings: list[str] = field(default_factory=list, compare=False)


def split(command: str) -> list[str]:
    """The command's arguments as a POSIX shell would split them; an unsplittable or empty one is refused."""
    if "\x00" in command:
        raise ACIError("eval command holds a NUL byte, which no program can receive as an argument")
    try:
        parts = shlex.split(command)
    except ValueError as e:
        raise ACIError(f"eval command cannot be split into arguments ({e}): {command!r}") from None
    if not parts:
        raise ACIError("eval command is empty")
    return parts


def _join(parts: list[str]) -> str:
    """shlex.join, but placeholders stay readable: `{model_path}`, not `'{model_path}'`."""
    return " ".join(p if _PLAIN.fullmatch(p) else shlex.quote(p) for p in parts)


def _is_model_value(part: str) -> bool:
    return part.rstrip("/").removeprefix("./").rsplit("/", 1)[-1] == SUBMISSION_DIR


def translate(typed: str, help: Help | None = None, given: dict[str, str] | None = None) -> Translation:
    """The eval command as typed -> a template with `{model_path}`, `{limit}`, `{output}` and `{seed}`.

    Each role's option (see `roles`) gets its placeholder as value, and is added when the command as typed
    lacks it (a seed only when asked for with --seed-option: the command's runs stay as typed otherwise,
    and the mapping says the seed option exists); a bare `final_model` argument becomes `{model_path}`. Without a readable `--help`, only
    PostTrainBench's option names are placed, and its `evaluate.py` gets `--limit {limit}` and
    `--json-output-file {output}` when missing (its score is read from that file). A template comes back
    as it is, so translating twice changes nothing; an option two roles could take is asked for."""
    parts = split(typed)
    help = help or Help(problem="not read")
    placed, how, ties = roles(parts, help, given or {})
    aliases = {n: role for role, opt in placed.items() for n in help.names_of(opt)}
    out, changes, typed_values = [], [], {}
    k = 0
    while k < len(parts):
        part = parts[k]
        opt, eq, value = part.partition("=")
        role = aliases.get(opt) if part.startswith("-") else None
        if role is None or not eq and k + 1 == len(parts):
            if _is_model_value(part) and "model_path" not in placed:
                changes.append(f"`{part}` -> `{{model_path}}`: {WHY['model_path']}")
                part, how["model_path"] = "{model_path}", "the `final_model` argument"
                placed["model_path"] = out[-1] if out and out[-1].startswith("-") else "(argument)"
            out.append(part)
            k += 1
            continue
        if not eq:
            k += 1
            value = parts[k]
        typed_values[role] = value
        placeholder = PLACEHOLDER[role]
        if placeholder not in value:
            sep = "=" if eq else " "
            changes.append(f"`{opt}{sep}{value}` -> `{opt}{sep}{placeholder}`: {WHY[role]}")
            value = placeholder
        out += [f"{opt}={value}"] if eq else [opt, value]
        k += 1
    if ties:
        role, tie = next(iter(ties.items()))
        raise ACIError(f"{' and '.join(tie)} both fit {WHAT[role]} of the eval command ({help.source}): name the one "
                       f"it is with --{role.split('_')[0]}-option")
    if help.problem and any(p.endswith("evaluate.py") for p in out):  # PostTrainBench's script takes both
        for role, opt in (("limit", "--limit"), ("output", "--json-output-file")):
            placed.setdefault(role, opt)
            how.setdefault(role, "evaluate.py's usual options")
    text = " ".join(out)
    for role in ROLES:
        if role in placed and PLACEHOLDER[role] not in text and placed[role] != "(argument)":
            if role == "seed" and how[role] != "given":  # the tools run without it: changing the run is asked for
                how[role] += "; not in the command, so trials pass no seed (--seed-option adds it)"
                continue
            out += [placed[role], PLACEHOLDER[role]]
            changes.append(f"added `{placed[role]} {PLACEHOLDER[role]}`: {WHY[role]}")
    if "{model_path}" not in " ".join(out):
        raise ACIError(f"cannot tell which argument of the eval command is the model: {typed!r}; write "
                       f"{{model_path}} where the model's folder goes (e.g. --model-path {{model_path}}), or name "
                       f"its option with --model-option")
    options = _record(typed, help, placed, how, typed_values)
    command = _join(out) if changes else typed  # a template stays byte for byte
    return Translation(command, changes, options, _unplaced(help, placed))


def _record(typed: str, help: Help, placed: dict, how: dict, typed_values: dict) -> dict:
    """The mapping as the run card records it (`records.EvalOptions`)."""
    record = {"typed": typed, "help": help.source or None, "help_problem": help.problem if help.source else None,
              **{role: placed.get(role) for role in ROLES}, "placed_by": how}
    if "limit" in placed:
        opt = help.find(placed["limit"])
        value, where = all_value(opt.help if opt else "", typed_values.get("limit"))
        if value is not None:
            record["limit_all"], record["placed_by"] = value, {**how, "limit_all": where}
    return {k: v for k, v in record.items() if v is not None}


def learn(typed: str, cwd: Path, given: dict[str, str], limit_all: str | None = None) -> Translation:
    """`translate` with what the script's own `--help` says (run once, here); `limit_all` as given wins."""
    t = translate(typed, read_help(split(typed), cwd), given)
    if limit_all is not None:
        if "limit" not in t.options:
            raise ACIError("--limit-all needs a sample-limit option: name it with --limit-option")
        if not re.fullmatch(r"-?\d+", limit_all.strip()):
            raise ACIError(f"--limit-all {limit_all!r} is not a whole number (the value that means every item, "
                           f"e.g. 0 or -1)")
        t.options["limit_all"] = limit_all.strip()
        t.options["placed_by"] = {**t.options.get("placed_by", {}), "limit_all": "given"}
    return t


def for_card(card, eval_command: str | None, given: dict[str, str], limit_all: str | None,
             cwd: Path) -> Translation | None:
    """What `plan` records for an eval command: the one given, else (when only option names are given) the
    run card's command as first typed, learnt again with them; None when neither is asked for."""
    typed = eval_command
    if typed is None and (given or limit_all is not None):
        typed = card.eval_options.typed if card and card.eval_options else None
        if typed is None:
            raise ACIError("--model-option, --limit-option, --limit-all, --output-option and --seed-option say how "
                           "to read an eval command: give it with --eval-command")
    return learn(typed, cwd, given, limit_all) if typed else None


def describe(options: dict) -> list[str]:
    """The mapping in words, one line per role (what plan prints)."""
    how = options.get("placed_by") or {}
    lines = []
    for role in ROLES:
        opt = options.get(role)
        if opt is None:
            lines.append(f"{WHAT[role]}: none placed")
            continue
        extra = ""
        if role == "limit" and options.get("limit_all") == OMIT:
            extra = f", every item = the option left out (from {how.get('limit_all')})"
        elif role == "limit" and options.get("limit_all") is not None:
            extra = f", every item = {options['limit_all']} (from {how.get('limit_all')})"
        elif role == "limit":
            extra = ", no every-item value known (--limit -1 is passed on as -1)"
        lines.append(f"{WHAT[role]}: {opt} ({how.get(role, 'placed')}){extra}")
    return lines


def _unplaced(help: Help, placed: dict) -> list[str]:
    """What plan init asks about: roles without an option (the model path is an error, not a question)."""
    out = []
    if not help.source or all(r in placed for r in ("model_path", "limit", "output")):
        return out  # no --help was asked for, or nothing is left to ask
    if help.problem:
        out.append(f"could not read the eval command's options ({help.problem}): only the usual option names "
                   f"(--model-path, --limit, --json-output-file) and a `final_model` argument were placed; name the others with --limit-option, "
                   f"--output-option, --seed-option")
        return out
    if "limit" not in placed:
        out.append(f"{help.source} lists no sample-limit option: an evaluation's --limit cannot reach the command, "
                   f"so it is refused; if the command has one, name it with --limit-option (and its every-item "
                   f"value with --limit-all)")
    return out  # no output option: check_fields says where the score is read from instead
