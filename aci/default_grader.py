"""The grader for tasks that name none when no --grader is given, and where it came from.

Tasks drawn from a generator or a train split rarely name a grader; the run's own files say how replies
are scored: the run card's grader, else the benchmark card's (written at recon), else the grader its
answer format implies, else the eval script's own answer line. Used by `verify-task`'s method B, the dev
curve of `train` and finalize's answer-format probe, so all three grade such tasks alike.
"""

from __future__ import annotations

import re

from aci import runcard
from aci.context import Context

# What recon writes about the answer format (benchmark card `answer_format`) -> the grader that reads it.
_FORMAT_GRADERS = ((re.compile(r"(?i)\banswer\s*:"), "final-answer"), (re.compile(r"(?i)<tool_call>|tool.?call"), "tool-call"),
                   (re.compile(r"(?i)\bletter\b|\([A-J]\)"), "choice"),
                   (re.compile(r"(?i)####|last number|\bnumber\b"), "last-number"))


# An eval script that names the answer line in capitals (a regex or a prompt) reads it: final-answer. Words
# like "number" or "letter" occur in any script, so the script's text implies no other grader.
_SCRIPT_ANSWER_LINE = re.compile(r"ANSWER(\\s\*)?:")


def card_grader(ctx: Context) -> tuple[str | None, str]:
    """(grader, where it came from) for tasks that name none when --grader is not given: the run card's
    `grader`, else the benchmark card's, else the grader its `answer_format` implies (`ANSWER: <code>` ->
    final-answer), else final-answer when the eval script names an `ANSWER:` line."""
    from aci.goal import benchmark_card

    if ctx.card and ctx.card.grader:
        return ctx.card.grader, "the run card's grader"
    card = benchmark_card(ctx)
    if isinstance(card.get("grader"), str) and card["grader"]:
        return card["grader"], "the benchmark card's grader"
    fmt = card.get("answer_format")
    if isinstance(fmt, str):
        for pattern, name in _FORMAT_GRADERS:
            if pattern.search(fmt):
                return name, f"the benchmark card's answer format {fmt!r}"
    script = runcard.eval_script(ctx, ctx.card.eval_command) if ctx.card else None
    try:
        reads_line = script is not None and _SCRIPT_ANSWER_LINE.search(script.read_text(errors="replace"))
    except OSError:
        reads_line = False
    if reads_line:
        return "final-answer", f"{script.name}, which reads an `ANSWER:` line"
    return None, "none"
