"""What every grader shares: the `Score`, the `Grader` contract, and answer normalisation.

A grader answers three questions about a task: how well does a response score (`score`), what does a
perfect response look like (`gold`), and what does a wrong one look like (`corrupt`). `verify-task`
needs all three: the gold must score 1 and the corruption 0, or the task (or its grader) is broken.

`score` never raises for anything in the response: a malformed response is a wrong response, scored 0
with a reason, so a reward function or an evaluation loop cannot crash on model output. A task that
lacks what the grader needs (no gold answer, no tests) is the caller's data error: `ACIError`.

Every grader has a time limit. A pattern a grader matches runs through `Pattern` (the `regex` package's
`timeout=`, `PATTERN_SECONDS` per call): a pattern such as `(a|aa)+$` takes exponential time on 40 `a`s and
a `!` under `re`, and the default final-answer pattern quadratic time on a long line of spaces. Graders
that run a program or make a request take a `timeout` option, bounded by `time_limit`. A response that
runs past a limit scores 0, the reason naming the limit.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import regex
from pydantic import BaseModel, Field

from aci.errors import ACIError

REASON_CHARS = 300
PATTERN_SECONDS = 1.0  # per match, search or substitution: far beyond a linear pattern on 8 MiB of text
MAX_SECONDS = 600.0  # the most a spec's `timeout` may ask for: a time limit, not a way to turn it off


class Score(BaseModel):
    score: float = Field(ge=0, le=1)
    reason: str

    @classmethod
    def of(cls, value: float, reason: str) -> Score:
        return cls(score=value, reason=short(reason))


def short(text: str, limit: int = REASON_CHARS) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


Response = tuple[str, list[dict] | None]


class GraderTimeout(ACIError):
    """A grader's work ran past its time limit: inside `Grader.score` a score of 0 with this reason; where gold
    or its corruption is rendered (`verify-task`), the task's rejection."""


class Pattern:
    """A regular expression matched under `PATTERN_SECONDS` per call (the `regex` package, `re`'s syntax).

    `pattern` and `flags` are the text and the flags it was compiled from, as `re.Pattern` has them, so a
    caller may build a `re` pattern around the text; every match raises `GraderTimeout` past the limit.
    """

    def __init__(self, pattern: str, what: str, flags: int = 0):
        try:
            self._compiled = regex.compile(pattern, flags)
        except regex.error as e:
            raise ACIError(f"{what}: invalid regular expression {pattern!r}: {e}") from None
        self.pattern, self.flags = pattern, flags
        self.groups, self.groupindex = self._compiled.groups, self._compiled.groupindex

    def _timed(self, text: str, run: Callable[..., Any]) -> Any:
        try:
            return run(timeout=PATTERN_SECONDS)
        except TimeoutError:
            raise GraderTimeout(f"the pattern /{short(self.pattern, 60)}/ ran past its {PATTERN_SECONDS:g} s time "
                                f"limit on a text of {len(text):,} characters") from None

    def search(self, text: str):
        return self._timed(text, lambda **t: self._compiled.search(text, **t))

    def fullmatch(self, text: str):
        return self._timed(text, lambda **t: self._compiled.fullmatch(text, **t))

    def finditer(self, text: str) -> list:
        """Every match, found whole under one time limit (an iterator would run past it unseen)."""
        return self._timed(text, lambda **t: list(self._compiled.finditer(text, **t)))

    def findall(self, text: str) -> list:
        return self._timed(text, lambda **t: self._compiled.findall(text, **t))

    def sub(self, replacement: str, text: str) -> str:
        return self._timed(text, lambda **t: self._compiled.sub(replacement, text, **t))


def time_limit(spec: dict[str, Any], default: float, what: str) -> float:
    """A spec's `timeout` (seconds), refused where it is not a number in (0, MAX_SECONDS]: a task row may set
    it, and `inf` or `1e9` would be no limit at all."""
    value = spec.get("timeout", default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_SECONDS:
        raise ACIError(f"{what}: timeout must be a number of seconds in (0, {MAX_SECONDS:g}], got {value!r}")
    return float(value)


class Grader:
    """Base class: subclasses implement `_score`, `gold` and `corrupt`; `score` adds the never-raise guard.

    The class attributes are what the rest of the product knows about a grader, read from the registry
    (`aci.graders.GRADERS`) rather than listed by hand: help texts, the Markdown check, where a rollout
    grades.
    """

    name = "grader"  # the spec's `type`
    # How a spec string writes it, where that is more than `name` (`python:module:function`).
    written: str | None = None
    # True where scoring only reads the response (no code run, no command, no request): cheaper than a
    # thread hop, so the rollout loop grades on its event loop. False, the default for a new grader, grades
    # in a worker thread, where a slow grader cannot stall the other trajectories.
    inline = False
    # The smallest spec, with the options the grader cannot do without, where its name (as `written`)
    # alone is refused; None where it alone is a spec.
    minimal_spec: dict[str, Any] | None = None
    # True where a task row may name it. A row is data, often downloaded: only graders that read the response,
    # run the row's own code in the sandbox (unit-tests) or ask a judge the rules let it reach may be named
    # there. False, the default for a new grader, leaves it to the caller (--grader, the run card's grader).
    from_rows = False
    # options a task row may not set even where it may name the grader: they reach beyond the row
    # (an environment variable's secret), so only the caller's spec may hold them
    caller_options: tuple[str, ...] = ()
    # True where scoring runs a program (the response's code, or the grader's own) in the sandbox of
    # `aci.graders.sandbox`: a caller says where that sandbox falls short (`aci.graders.code_sandbox`).
    sandboxed = False

    def __init__(self, spec: dict[str, Any]):
        self.spec = spec

    @classmethod
    def build(cls, spec: dict[str, Any], *, workdir: Path | None, check_host: Callable[[str], None] | None,
              unsafe_grader: bool) -> Grader:
        """The grader for `spec`, given what `grader_for` knows; each subclass takes the part it needs."""
        return cls(spec)

    def score(self, task: dict, response: str, tool_calls: list[dict] | None = None) -> Score:
        if not isinstance(response, str):
            return Score.of(0, f"response is {type(response).__name__}, not text")
        try:
            return self._score(task, response, tool_calls)
        except GraderTimeout as e:  # before ACIError: a response that takes too long is a wrong response
            return Score.of(0, f"{self.name}: {e}")
        except ACIError:
            raise
        except Exception as e:  # a response the grader cannot read is a wrong response
            return Score.of(0, f"{self.name}: could not grade the response ({type(e).__name__}: {e})")

    def _score(self, task: dict, response: str, tool_calls: list[dict] | None) -> Score:
        raise NotImplementedError

    def gold(self, task: dict) -> Response:
        """The task's gold rendered as a response that must score 1."""
        return gold_answer(task, self.name), None

    def corrupt(self, task: dict) -> Response:
        """A plausible wrong response that must score 0."""
        return wrong_answer(gold_answer(task, self.name)), None

    def option(self, key: str, default: Any = None) -> Any:
        return self.spec.get(key, default)


# -- gold access ------------------------------------------------------------------------------------
def gold(task: dict) -> dict:
    g = task.get("gold")
    return g if isinstance(g, dict) else {}


def gold_answer(task: dict, grader: str) -> str:
    answer = gold(task).get("answer")
    if not isinstance(answer, str) or not answer.strip():
        raise ACIError(f"task {task.get('id')!r}: grader {grader} needs gold.answer (a non-empty string)")
    return answer


# -- normalisation ------------------------------------------------------------------------------------
NORMALISE_STEPS = ("strip", "lower", "commas", "dollar", "period", "spaces", "numeric")
DEFAULT_NORMALISE = ("strip", "lower", "commas", "dollar", "period", "spaces", "numeric")
# `\d+(?:\.\d*)?`, not `\d+\.?\d*`: the same numbers, without the split between two runs of digits that took
# 20 s to refuse 20,000 digits and an `x`
_NUMBER = Pattern(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?", "number pattern")
_INTEGER = Pattern(r"[-+]?\d+", "integer pattern")


def normaliser(steps: Any) -> tuple[str, ...]:
    """Validate a `normalize` option: a list of step names, or true/false for all/none."""
    if steps is None or steps is True:
        return DEFAULT_NORMALISE
    if steps is False:
        return ()
    if isinstance(steps, str):
        steps = [steps]
    bad = [s for s in steps if s not in NORMALISE_STEPS]
    if bad:
        raise ACIError(f"unknown normalize step(s) {bad}; known: {', '.join(NORMALISE_STEPS)}")
    return tuple(steps)


def normalise(text: str, steps: tuple[str, ...]) -> str:
    """Apply the checker's normalisation (e.g. lower-case, strip commas and `$`) before comparing."""
    if "strip" in steps:
        text = text.strip()
    if "lower" in steps:
        text = text.lower()
    if "commas" in steps:
        text = text.replace(",", "")
    if "dollar" in steps:
        text = text.replace("$", "")
    if "spaces" in steps:
        text = " ".join(text.split())
    if "period" in steps:
        text = text.rstrip().removesuffix(".").rstrip()
    if "strip" in steps:
        text = text.strip()
    return text


def as_number(text: str) -> float | None:
    """The number a whole string spells (`42`, `-3.5`, `1e3`), else None."""
    text = text.strip()
    if not _NUMBER.fullmatch(text):
        return None
    value = float(text)
    return value if math.isfinite(value) else None


def same_answer(got: str, want: str, steps: tuple[str, ...]) -> bool:
    got, want = normalise(got, steps), normalise(want, steps)
    if got == want:
        return True
    if "numeric" in steps:
        a, b = as_number(got), as_number(want)
        return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return False


def wrong_number(text: str) -> str | None:
    """`text` with its number changed (41 -> 42, 0.5 -> 1.5, 1,234 -> 1,235), else None."""
    clean = text.strip().replace(",", "").replace("$", "")
    value = as_number(clean)
    if value is None:
        return None
    if _INTEGER.fullmatch(clean):
        return str(int(clean) + 1)
    decimals = len(clean.split(".")[1]) if "." in clean and "e" not in clean.lower() else 0
    return f"{value + 1:.{decimals}f}" if decimals else repr(value + 1)


_WRONG_TEXTS = ("I don't know.", "none", "N/A", "zzz")


def wrong_answer(answer: str) -> str:
    """A different answer of the same kind: a number off by one, or a non-answer that shares no text with
    the gold (so even a grader that only checks `gold in response` must reject it)."""
    number = wrong_number(answer)
    if number is not None:
        return number
    gold = answer.strip().lower()
    return next((w for w in _WRONG_TEXTS if gold not in w.lower() and w.lower() not in gold), "no answer given")

