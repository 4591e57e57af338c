"""Graders that read one answer out of free text: final-answer line, last number, choice letter, regex.

Every pattern they match, their own and a spec's, is a `Pattern` (`aci.graders.base`): a time limit per match.
"""

from __future__ import annotations

import json
import re

from aci.errors import ACIError
from aci.graders.base import (
    Grader,
    Pattern,
    Response,
    Score,
    as_number,
    gold_answer,
    normalise,
    normaliser,
    same_answer,
    short,
    wrong_answer,
    wrong_number,
)


class FinalAnswer(Grader):
    """The last `ANSWER: X` line (or a custom `pattern` whose first group is the answer) equals gold.

    Options: `pattern` (regex, group 1 or group `answer` is the answer), `template` (how the gold is
    rendered, default `ANSWER: {answer}`), `normalize` (steps, default strip, lower, commas, dollar,
    period, spaces, numeric so that `$1,234.0` == `1234`).
    """

    name = "final-answer"
    inline = True
    from_rows = True
    DEFAULT_PATTERN = r"(?im)^[ \t]*\**ANSWER\**[ \t]*:[ \t]*(.*?)[ \t]*$"

    def __init__(self, spec):
        super().__init__(spec)
        self.pattern = Pattern(self.option("pattern", self.DEFAULT_PATTERN), "final-answer pattern")
        if self.pattern.groups < 1:
            raise ACIError("final-answer pattern needs a capturing group around the answer")
        self.template = self.option("template", "ANSWER: {answer}")
        if "{answer}" not in self.template:
            raise ACIError("final-answer template must contain {answer}")
        self.steps = normaliser(self.option("normalize"))

    def extract(self, response: str) -> str | None:
        matches = self.pattern.finditer(response)
        if not matches:
            return None
        m = matches[-1]
        return m.group("answer") if "answer" in self.pattern.groupindex else m.group(1)

    def _score(self, task, response, tool_calls):
        want = gold_answer(task, self.name)
        got = self.extract(response)
        if got is None or not got.strip():
            return Score.of(0, "no final answer line found (expected e.g. 'ANSWER: 42')")
        if same_answer(got, want, self.steps):
            return Score.of(1, f"final answer {short(got, 60)!r} matches")
        return Score.of(0, f"final answer {short(got, 60)!r} != gold {short(want, 60)!r}")

    def gold(self, task) -> Response:
        return self.template.replace("{answer}", gold_answer(task, self.name).strip()), None

    def corrupt(self, task) -> Response:
        return self.template.replace("{answer}", wrong_answer(gold_answer(task, self.name))), None


_LAST_NUMBER = Pattern(r"[-+]?\$?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+",
                       "last-number pattern")


class LastNumber(Grader):
    """The last number in the response (commas and `$` ignored) equals the numeric gold answer."""

    name = "last-number"
    inline = True
    from_rows = True

    def _want(self, task) -> float:
        want = as_number(normalise(gold_answer(task, self.name), ("strip", "commas", "dollar", "period")))
        if want is None:
            raise ACIError(f"task {task.get('id')!r}: grader last-number needs a numeric gold.answer, "
                           f"got {gold_answer(task, self.name)!r}")
        return want

    def _score(self, task, response, tool_calls):
        want = self._want(task)
        found = _LAST_NUMBER.findall(response)
        if not found:
            return Score.of(0, "no number in the response")
        got = as_number(found[-1].replace(",", "").replace("$", ""))
        if got is not None and abs(got - want) <= 1e-9 * max(1.0, abs(want)):
            return Score.of(1, f"last number {found[-1]} matches")
        return Score.of(0, f"last number {found[-1]} != gold {gold_answer(task, self.name).strip()}")

    def gold(self, task) -> Response:
        self._want(task)
        return gold_answer(task, self.name).strip(), None

    def corrupt(self, task) -> Response:
        self._want(task)
        return wrong_number(gold_answer(task, self.name)) or "", None


# How the evaluation reads a letter (inspect_ai's `multiple_choice` solver, which PostTrainBench's GPQA
# uses; checked against inspect_ai 0.3.150, tests/data/inspect_choice_cases.json): the first line that
# starts `ANSWER:` and holds only letters, digits, spaces and commas up to its end or a period; else the
# first `answer:` anywhere followed by such a run. The run, stripped, must be one allowed letter.
_ANSWER_LINE = Pattern(r"^answer\s*:\s*([a-z\d ,]+)\s*(?:$|\.)", "choice pattern", re.IGNORECASE | re.MULTILINE)
_ANSWER_ANYWHERE = Pattern(r"answer\s*:\s*([a-z\d ,]+)(?:\W|$)", "choice pattern", re.IGNORECASE)


class Choice(Grader):
    """A multiple-choice letter, read as the evaluation reads it: the first `ANSWER: X` line.

    Exactly the rule of inspect_ai's `multiple_choice` scorer (`choice`), so a reply scores
    here what it scores there: `ANSWER: C` counts, `ANSWER: c`, `ANSWER: (C)`, `ANSWER: C is right`,
    `The answer is (C)` and a lone `C` do not, and a second `ANSWER:` line never overrides the first.
    Options: `letters` (allowed letters, default A-D, widened to reach the gold letter).
    """

    name = "choice"
    inline = True
    from_rows = True

    def _letters(self, task) -> str:
        letters = str(self.option("letters", "ABCD")).upper()
        want = self._want(task, letters)
        if want not in letters:
            letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[: ord(want) - ord("A") + 1]
        return letters

    def _want(self, task, letters: str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ") -> str:
        raw = gold_answer(task, self.name).strip().strip("().").upper()
        if len(raw) != 1 or not ("A" <= raw <= "Z"):
            raise ACIError(f"task {task.get('id')!r}: grader choice needs a letter as gold.answer, got {raw!r}")
        return raw

    @staticmethod
    def extract(response: str, letters: str) -> str | None:
        """The letter the evaluation reads (see `_ANSWER_LINE`), None when it reads none."""
        found = _ANSWER_LINE.search(response) or _ANSWER_ANYWHERE.search(response)
        if found is None:
            return None
        run = found.group(1).strip()
        return run if len(run) == 1 and run in letters else None

    def _score(self, task, response, tool_calls):
        letters = self._letters(task)
        want = self._want(task)
        got = self.extract(response, letters)
        if got is None:
            return Score.of(0, f"no choice letter ({letters[0]}-{letters[-1]}) found")
        if got == want:
            return Score.of(1, f"choice {got} matches")
        return Score.of(0, f"choice {got} != gold {want}")

    def gold(self, task) -> Response:
        self._letters(task)
        return f"ANSWER: {self._want(task)}", None

    def corrupt(self, task) -> Response:
        letters = self._letters(task)
        want = self._want(task)
        other = letters[(letters.index(want) + 1) % len(letters)] if len(letters) > 1 else "Z"
        return f"ANSWER: {other}", None


class Regex(Grader):
    """The response matches `pattern` (search, or the whole stripped response with `fullmatch: true`).

    Options: `pattern` (required), `ignorecase`, `fullmatch`, `example` (a response that must match;
    default gold.answer). The corruption is the example with every match of the pattern removed.
    """

    name = "regex"
    inline = True
    from_rows = True
    minimal_spec = {"type": "regex", "pattern": r"\b42\b"}

    def __init__(self, spec):
        super().__init__(spec)
        if not isinstance(self.option("pattern"), str):
            raise ACIError(f"regex grader needs a `pattern` option, e.g. {json.dumps(self.minimal_spec)}")
        flags = re.IGNORECASE if self.option("ignorecase") else 0
        self.pattern = Pattern(self.spec["pattern"], "regex grader pattern", flags)
        self.full = bool(self.option("fullmatch"))

    def _score(self, task, response, tool_calls):
        hit = self.pattern.fullmatch(response.strip()) if self.full else self.pattern.search(response)
        if hit:
            return Score.of(1, f"matches /{short(self.pattern.pattern, 60)}/")
        return Score.of(0, f"does not match /{short(self.pattern.pattern, 60)}/")

    def _example(self, task) -> str:
        example = self.option("example")
        return example if isinstance(example, str) else gold_answer(task, self.name)

    def gold(self, task) -> Response:
        return self._example(task), None

    def corrupt(self, task) -> Response:
        return self.pattern.sub("", self._example(task)), None
