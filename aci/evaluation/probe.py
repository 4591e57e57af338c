"""What `finalize` asks the final model, and what its reply must hold for the grader to read an answer.

A model that emits garbage must fail the generation check, so the check asks what the evaluation asks:
a test-like item (the first item of the run card's pinned reference, the benchmark's test set; else
the benchmark card's `example`), worded as the evaluation words it (the benchmark card's `prompt`, with
`{question}` where the item goes, and its `system` message), rendered later through the run card's
template. The reply is checked against the answer format the benchmark card names (`answer_format`:
`ANSWER: <x>`, `Total: <n>`, `#### <n>`, a code block, a tool call, a letter, a number), else the one the
grader reads (final-answer, last-number, choice, tool-call, unit-tests). Where neither names one, the
check says the format was not checked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from aci.context import Context
from aci.errors import ACIError

FALLBACK = [{"role": "user", "content": "What is 2 + 3? Answer with a number."}]
MAX_NEW_TOKENS = 256
_NUMBER = re.compile(r"[-+]?\$?\d[\d,]*(?:\.\d+)?")


@dataclass(frozen=True)
class Format:
    """An answer format: what a reply must contain (`pattern`), in words, and who names it."""

    what: str
    source: str
    pattern: re.Pattern

    def found(self, reply: str) -> bool:
        return bool(self.pattern.search(reply))


@dataclass(frozen=True)
class Probe:
    messages: list[dict]
    item: str  # where the question came from, in words
    format: Format | None
    max_new_tokens: int = MAX_NEW_TOKENS


def _label(text: str) -> str | None:
    """`ANSWER` of "last line 'ANSWER: <code>'", `Total` of "Total: <n>": the word before `: <placeholder>`."""
    m = re.search(r"([A-Za-z][A-Za-z_-]*)\s*:\s*[<{\[]", text)
    return m.group(1) if m else None


def from_text(fmt: str, source: str) -> Format | None:
    """The format a benchmark card's `answer_format` describes, or None when it names none it can check."""
    if re.search(r"(?i)<tool_call>|tool.?call|function.?call", fmt):
        return Format("a tool call", source, re.compile(r"<tool_call>|\{\s*\"name\"\s*:"))
    if re.search(r"(?i)```|code block|fenced", fmt):
        return Format("a fenced code block", source, re.compile(r"```"))
    if "####" in fmt:
        return Format("a line `#### <answer>`", source, re.compile(r"(?m)^\s*####\s*\S"))
    label = _label(fmt)
    if label:
        return Format(f"a line `{label}: <answer>`", source,
                      re.compile(rf"(?im)^[ \t*_]*{re.escape(label)}[*_]*[ \t]*:[ \t]*\S"))
    if re.search(r"(?i)\bletter\b|\([A-J]\)|multiple.choice", fmt):
        return Format("a choice letter on an `ANSWER:` line", source, re.compile(r"(?im)^answer\s*:\s*[A-J]\b"))
    if re.search(r"(?i)\bnumber\b|numeric|integer", fmt):
        return Format("a number", source, _NUMBER)
    return None


def from_grader(spec: str, source: str) -> Format | None:
    """The format the grader reads an answer in, for the graders that read one out of free text."""
    from aci.graders import parse_spec

    kind = parse_spec(spec)["type"]
    if kind == "final-answer":
        from aci.graders.answers import FinalAnswer

        return Format("a final-answer line (`ANSWER: <answer>`)", source, FinalAnswer(parse_spec(spec)).pattern)
    if kind == "last-number":
        return Format("a number", source, _NUMBER)
    if kind == "choice":
        return from_text("letter", source)
    if kind == "tool-call":
        return from_text("tool call", source)
    if kind == "unit-tests":
        return Format("code (a fenced block or a def)", source, re.compile(r"```|^\s*def ", re.M))
    if kind == "regex":  # the grader's own pattern: a reply it cannot match scores 0
        from aci.graders import grader_for

        grader = grader_for(spec)
        pattern = re.compile(rf"\A\s*(?:{grader.pattern.pattern})\s*\Z", grader.pattern.flags) if grader.full \
            else grader.pattern
        return Format(f"a match of /{grader.pattern.pattern[:60]}/", source, pattern)
    return None


def answer_format(ctx: Context, card: dict) -> Format | None:
    """The answer format the benchmark card (`card`) names, else the one its grader implies."""
    from aci.default_grader import card_grader

    fmt = card.get("answer_format")
    if isinstance(fmt, str) and fmt.strip():
        found = from_text(fmt, f"the benchmark card's answer format {fmt!r}")
        if found:
            return found
    grader, where = card_grader(ctx)
    return from_grader(grader, f"the grader {grader} ({where})") if grader else None


def _item(ctx: Context, card: dict) -> tuple[str | None, str]:
    """The first test item's question and where it came from (None: no reference and no example on the
    benchmark card, `card`)."""
    ref = ctx.card.reference if ctx.card else None
    if ref:
        from aci.tasks import load_tasks

        try:
            task = next(load_tasks(Path(ref["path"])))
            users = [m["content"] for m in task["messages"] if m.get("role") == "user" and isinstance(
                m.get("content"), str)]
            if users:
                return users[-1], f"the first item of {Path(ref['path']).name}"
        except (ACIError, StopIteration, OSError, KeyError):
            pass
    example = card.get("example")
    if isinstance(example, str) and example.strip():
        return example, "the benchmark card's example"
    return None, "a fixed arithmetic question (no reference items or benchmark card example)"


def probe(ctx: Context) -> Probe:
    from aci.goal import benchmark_card

    card = benchmark_card(ctx)  # one read of the journal for the item, its wording and its format
    question, item = _item(ctx, card)
    if question is None:
        return Probe(FALLBACK, item, answer_format(ctx, card))
    prompt, system = card.get("prompt"), card.get("system")
    content = prompt.replace("{question}", question) if isinstance(prompt, str) and "{question}" in prompt \
        else question
    if content != question:
        item += ", worded by the benchmark card's prompt"
    messages = ([{"role": "system", "content": system}] if isinstance(system, str) and system else []) + \
        [{"role": "user", "content": content}]
    tokens = card.get("max_tokens")
    return Probe(messages, item, answer_format(ctx, card),
                 tokens if isinstance(tokens, int) and 0 < tokens <= 4096 else MAX_NEW_TOKENS)
