"""One grader concept for the whole product: score a response to a task in [0, 1] with a short reason.

The same graders serve `verify-task` (gold must score 1, its corruption 0), rollouts (rewards), GRPO
reward functions and dev-set evaluation. A spec is a name or `{"type": name, ...options}`:

| name | scores 1 when | corruption |
|---|---|---|
| `final-answer` | the last `ANSWER: X` line equals gold.answer after normalisation | the number plus one / `I don't know.` |
| `last-number` | the last number in the response equals gold.answer | the number plus one |
| `choice` | the chosen letter equals gold.answer | the next letter |
| `unit-tests` | the response's code + gold.tests exits 0 within time and memory limits | functions stubbed out |
| `tool-call` | the calls equal gold.tool_calls (names and arguments) | first argument broken |
| `regex` | the response matches `pattern` | the example with the matches removed |
| `python:mod:fn` | `fn(task, response, tool_calls)` returns 1 | as final answer / tool call |
| `command` | the command prints 1 for the JSON on its stdin | as final answer / tool call |
| `judge` | an LLM judge with a rubric returns 1 | as final answer |

`GRADERS` is the one list of them: every name, help text and check elsewhere is derived from it and from
the classes' attributes (`Grader.written`, `inline`, `minimal_spec`, `from_rows`, `sandboxed`).

A task row's own `grader` is data, often downloaded: it may name only the graders of `ROW_GRADERS`
(`task_spec`); `python:` and `command` run programs, so they come only from the caller (--grader, the run
card's grader), and even then run in the unit-tests sandbox with a time limit (`aci.graders.program`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from aci.errors import ACIError
from aci.graders.answers import Choice, FinalAnswer, LastNumber, Regex
from aci.graders.base import Grader, Score
from aci.graders.code import UnitTests, admit
from aci.graders.external import Command, PythonFunction
from aci.graders.judge import Judge
from aci.graders.sandbox import Sandbox
from aci.graders.toolcall import ToolCall

__all__ = ["Grader", "Score", "grader_for", "grade", "parse_spec", "check_spec", "code_sandbox", "runs_inline",
           "task_spec", "GRADERS", "NAMES", "ROW_GRADERS", "SPEC_HELP"]

GRADERS: dict[str, type[Grader]] = {g.name: g for g in (
    FinalAnswer, LastNumber, Choice, UnitTests, ToolCall, Regex, PythonFunction, Command, Judge)}
NAMES = tuple(g.written or g.name for g in GRADERS.values())  # as a spec string writes each
ROW_GRADERS = tuple(g.name for g in GRADERS.values() if g.from_rows)  # what a task row may name


def _and(words: list[str]) -> str:
    return ", ".join(words[:-1]) + f" and {words[-1]}" if len(words) > 1 else "".join(words)


def _spec_help() -> str:
    alone = [g.written or g.name for g in GRADERS.values() if g.minimal_spec is None]
    needing = [g for g in GRADERS.values() if g.minimal_spec is not None]
    shape = {k: v if k == "type" else "..." for k, v in needing[0].minimal_spec.items()}
    return (f"a name ({', '.join(alone)}) or a JSON object with options ({_and([g.name for g in needing])} need "
            f"one), e.g. {json.dumps(shape)}")


SPEC_HELP = _spec_help()  # how a grader spec is written, for the description of every `grader` option
_CACHE: dict[tuple, Grader] = {}


def parse_spec(spec: str | dict | None) -> dict[str, Any]:
    """A grader spec as `{"type": name, ...}`; a string may be a name, `python:mod:fn`, or a JSON object."""
    if isinstance(spec, str):
        text = spec.strip()
        if text.startswith("{"):
            try:
                spec = json.loads(text)
            except json.JSONDecodeError as e:
                raise ACIError(f"grader spec is not valid JSON: {e.msg}") from None
        else:
            spec = {"type": text}
    if not isinstance(spec, dict) or not isinstance(spec.get("type"), str) or not spec["type"]:
        raise ACIError(f"grader spec must be a name or an object with `type`, got {spec!r}; names: {', '.join(NAMES)}")
    if spec["type"].startswith("python:"):
        spec = {**spec, "type": "python", "function": spec["type"][len("python:"):]}
    return spec


def check_spec(spec: str | dict) -> dict[str, Any]:
    """`parse_spec`, refusing a grader type that does not exist (without building the grader)."""
    spec = parse_spec(spec)
    if spec["type"] not in GRADERS:
        raise ACIError(f"unknown grader {spec['type']!r}; known: {', '.join(NAMES)}")
    return spec


def task_spec(task: dict, default: str | dict | None = None) -> str | dict | None:
    """The spec `task` is graded by: its own `grader`, else `default` (the caller's), else None.

    The task's own is refused (ACIError naming the task and why) where it names a grader that runs a program
    (`Grader.from_rows` False): a row of a downloaded dataset must not run code on this machine. A spec that
    does not parse is returned as it is, for the grading to report."""
    own = task.get("grader")
    if not own:
        return default
    try:
        spec = parse_spec(own)
    except ACIError:
        return own
    kind = spec["type"]
    if kind in GRADERS and not GRADERS[kind].from_rows:
        raise ACIError(f"task {task.get('id')!r} names the grader {kind!r}, which runs a program; a task row may "
                       f"name only {', '.join(ROW_GRADERS)}, so that a dataset cannot run code here. Drop the row's "
                       f"grader and pass it as --grader (or the run card's grader) if it is yours")
    reaching = [k for k in GRADERS[kind].caller_options if k in spec] if kind in GRADERS else []
    if reaching:
        raise ACIError(f"task {task.get('id')!r} sets {', '.join(reaching)} in its {kind} grader, which only "
                       f"--grader or the run card's grader may set (a row must not reach your environment's "
                       f"secrets): drop it from the row")
    return own


def code_sandbox(specs: Iterable[str | dict | None], *, unsafe_grader: bool) -> Sandbox | None:
    """The sandbox code will run in when any of these grader specs runs some (`Grader.sandboxed`: unit-tests,
    python, command), else None. Where that sandbox would leave the code root's powers and `unsafe_grader` is
    False: the `sandbox` rule's refusal, before anything runs. A spec that does not parse is left to the
    grading to report."""
    for spec in specs:
        try:
            runs_code = spec is not None and getattr(GRADERS.get(parse_spec(spec)["type"]), "sandboxed", False)
        except ACIError:
            continue
        if runs_code:
            return admit(unsafe_grader)
    return None


def runs_inline(spec: str | dict | None) -> bool:
    """Whether the grader of `spec` only reads the response (`Grader.inline`), so a caller on an event loop
    may grade there; False for one that does more, and for a spec that does not parse (the grading will
    report it)."""
    try:
        grader = GRADERS.get(parse_spec(spec)["type"]) if spec is not None else None
    except ACIError:
        return False
    return grader is not None and grader.inline


def grader_for(spec: str | dict, *, workdir: Path | None = None,
               check_host: Callable[[str], None] | None = None, unsafe_grader: bool = False) -> Grader:
    """Build (or reuse) the grader for `spec`.

    `workdir` is where `python:` modules and `command`s are found and run; `check_host(host)` is
    called with a judge endpoint's host before use (pass `lambda h: ctx.rules.check_host(h, judge=True)`).
    `unsafe_grader` lets `unit-tests` run model code as root where no sandbox can drop root (the caller's
    `--unsafe-grader`, never a spec option: a task's own spec must not grant it); otherwise building it
    there is the `sandbox` rule's refusal.
    """
    spec = check_spec(spec)
    # `check_host` matters to a judge only: a caller that passes a new function per call (the rollout's) must
    # still get the same python grader, whose worker stays up between scores
    key = (json.dumps(spec, sort_keys=True, default=str), str(workdir),
           check_host if spec["type"] == Judge.name else None, unsafe_grader)
    found = _CACHE.get(key)
    if found is not None:
        return found
    try:
        grader = GRADERS[spec["type"]].build(spec, workdir=workdir, check_host=check_host,
                                             unsafe_grader=unsafe_grader)
    except (TypeError, ValueError) as e:  # an option of the wrong kind (`"memory_mb": "lots"`), often from a row
        raise ACIError(f"grader {spec['type']}: an option is not of the kind it needs ({e})") from None
    if len(_CACHE) >= 64:
        _CACHE.clear()
    _CACHE[key] = grader
    return grader


def grade(task: dict, response: str, tool_calls: list[dict] | None = None, default: str | dict | None = None,
          *, workdir: Path | None = None, check_host: Callable[[str], None] | None = None,
          unsafe_grader: bool = False) -> Score:
    """Score `response` to `task` with the task's own grader, else `default` (`task_spec`)."""
    spec = task_spec(task, default)
    if spec is None:
        raise ACIError(f"task {task.get('id')!r} names no grader and no default was given")
    return grader_for(spec, workdir=workdir, check_host=check_host, unsafe_grader=unsafe_grader).score(
        task, response, tool_calls)
