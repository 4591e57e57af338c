"""Close variants of short test items (`short_close`): a short item's numbers under other names, or with its
answer in other wording, are `close`; its template's siblings with other numbers are not. On two task
families unlike each other (`tests/short_families.py`), through the real tool; and the report says what
matched."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from aci import contamination as C
from aci import registry
from aci.context import Context
from tests.short_families import FAMILIES, WORD_PROBLEMS


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return path


def chat(q: str, a: str) -> dict:
    return {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_short_items_variants_are_close_and_its_templates_siblings_are_not(workdir, family):
    """300 short items of one family (all too short for the judge's score). Planted: 10 rows with an item's
    template and numbers under another name and object (half with its answer, half without), and 10 with
    its numbers and answer in another wording of its operation: at least 9 of each are `close`, naming
    their item, with its numbers among what matched. 2,000 rows from the family's generator, the same
    templates with numbers no item's question has: at most 20 are flagged at all."""
    fam, rng = FAMILIES[family], random.Random(34)
    keys = fam.reference(rng)
    write_jsonl(workdir / "test.jsonl", [dict(zip(("question", "answer"), fam.item(*k), strict=True)) for k in keys])
    rows, planted = [], {}  # row -> (kind, item)
    for kind in ("renamed", "reworded"):
        for n in range(10):
            i = rng.randrange(len(keys))
            q, a = getattr(fam, kind)(rng, keys[i])
            answer = a if n % 2 else f"The answer is {a}."
            planted[len(rows)] = kind, i
            rows.append(chat(q, "Let me count." if kind == "renamed" and n < 5 else answer))
    used = {k[1] for k in keys}
    siblings = []
    while len(siblings) < 2000:
        t, nums, name, obj = fam.draw(rng)
        if nums not in used:
            siblings.append(len(rows))
            rows.append(chat(*fam.item(t, nums, name, obj)))
    write_jsonl(workdir / "train.jsonl", rows)
    out = registry.call("contamination", {"path": "train.jsonl", "reference": "test.jsonl", "show": 1000},
                        Context(workdir=workdir))
    assert out.coverage["judge"] == 0 and out.coverage["short"] == 300 and out.coverage["close"] == 300
    close = {r["row"]: r["matches"][0] for r in out.close_rows}
    assert out.close == len(close)
    for kind, component in (("renamed", "template"), ("reworded", "reworded")):
        mine = [k for k, (c, _) in planted.items() if c == kind]
        caught = [k for k in mine if k in close and close[k]["item"] == planted[k][1]
                  and close[k]["component"] == component]
        assert len(caught) >= 9, (kind, [rows[k] for k in mine if k not in caught])
        for k in caught:
            t, nums, _, _ = keys[planted[k][1]]
            assert close[k]["matched"]["numbers"][:len(nums)] == [str(x) for x in nums]
    assert sum(k in close for k in siblings) + out.flagged <= 20
    shown = next(line for line in out.summary().splitlines() if "[close]" in line and "(template," in line)
    assert "(matched numbers: " in shown and "; words: " in shown


def test_a_short_items_numbers_in_another_role_are_not_close(workdir):
    """What sets an item apart from its siblings is its numbers in their places and its result: a sibling
    holding the same three numbers with another one as the answer (72 - 67 = 5 beside 72 - 5 = 67, the
    numbers rule alone flagged it), and a worked answer whose last number is not the item's result (its
    numbers and result met on the way, 50 - 30 = 20 beside 30 + 20 = 50), are not close; the item's own
    numbers and result are, in either wording."""
    items = [("Mateo owns 72 cups and sells 5. How many remain?", "67"),
             ("A shelf holds 30 cups and a box 20. How many in all?", "50")]
    rng = random.Random(3)
    keys = WORD_PROBLEMS.reference(rng, 298)
    filler = [WORD_PROBLEMS.item(*k) for k in keys if not {72, 30} & set(k[1])]
    write_jsonl(workdir / "test.jsonl", [{"question": q, "answer": a} for q, a in items + filler])
    rows = [chat("Randy owns 72 stamps and sells 67. How many remain?", "5"),
            chat("Joy had 50 pens but lost 30. How many are left?", "50 - 30 = 20, and 30 + 20 = 50 checks it. "
                                                                      "ANSWER: 20"),
            chat("Tina owns 72 kites and sells 5. How many remain?", "67"),
            chat("If Ken puts 30 pens and another 20 pens together, how many pens are there?", "30 + 20 = 50")]
    write_jsonl(workdir / "train.jsonl", rows)
    report = C.check(C.reference_items(workdir / "test.jsonl"), C.training_rows(workdir / "train.jsonl"))
    assert not report.flagged
    assert {r["row"]: (r["matches"][0]["item"], r["matches"][0]["component"]) for r in report.close} == {
        2: (0, "template"), 3: (1, "reworded")}


MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]
DATE_STYLES = (lambda y, m, d: f"{MONTHS[m - 1]} {d}, {y}", lambda y, m, d: f"{d} {MONTHS[m - 1]} {y}",
               lambda y, m, d: f"{MONTHS[m - 1][:3]} {d} {y}")
DATE_PHRASES = ("Write {s} as a date in the form YYYY-MM-DD.", "Convert the date {s} to YYYY-MM-DD.",
                "The meeting is on {s}. Give that date as YYYY-MM-DD.")


def test_a_date_templates_siblings_sharing_a_day_and_year_are_not_close(workdir):
    """Items long enough for the judge's score whose numbers are a date's (day and year in the question,
    the month's number too in the answer): a sibling on another month of the same day and year holds all
    of the question's numbers by chance. Rewordings of an item's own date, its answer included, are
    `close`; of 2,000 generator rows on other dates at most 20 (1 %) are flagged."""
    rng = random.Random(3)

    def draw():
        return rng.randrange(1950, 2030), rng.randrange(1, 13), rng.randrange(1, 29)

    def ask(date, style, phrase):
        y, m, d = date
        return DATE_PHRASES[phrase].format(s=DATE_STYLES[style](y, m, d)) + \
            " End your reply with a last line of the form ANSWER: <date>.", f"ANSWER: {y:04d}-{m:02d}-{d:02d}"

    dates = list(dict.fromkeys(draw() for _ in range(400)))[:300]
    shapes = [(rng.randrange(3), rng.randrange(3)) for _ in dates]
    write_jsonl(workdir / "test.jsonl", [dict(zip(("question", "answer"), ask(d, *s), strict=True))
                                         for d, s in zip(dates, shapes, strict=True)])
    rows = []
    for i in rng.sample(range(len(dates)), 10):  # the item's date in another style and phrase
        style, phrase = shapes[i]
        rows.append(chat(*ask(dates[i], (style + 1) % 3, (phrase + 1) % 3)))
    taken = set(dates)
    while len(rows) < 2010:
        date = draw()
        if date not in taken:
            rows.append(chat(*ask(date, rng.randrange(3), rng.randrange(3))))
    write_jsonl(workdir / "train.jsonl", rows)
    out = registry.call("contamination", {"path": "train.jsonl", "reference": "test.jsonl", "show": 1000},
                        Context(workdir=workdir))
    flagged = {r["row"] for r in out.close_rows}
    assert len(flagged & set(range(10))) >= 9, out.close_rows[:3]
    assert len(flagged - set(range(10))) <= 20, len(flagged - set(range(10)))
