"""Seeded cases for the differential test of `aci contamination` against the PostTrainBench judge's tool.

`differential()` builds a reference (GSM8K-, BFCL-, AIME-, reading- and Arena-style items, some under
the judge's other field names, some too short, some repeated by fingerprint) and training rows in every
shape the project reads (text, prompt/completion, question/answer, chat messages single- and multi-turn,
task records): verbatim copies, 1-6 word edits, short questions with long answers, answers after 0-100
tokens of filler, passages, case/punctuation/whitespace/Unicode variants, prefixes, a question or a worked
answer alone, and unrelated rows in the same style. `table()` builds the issue-11 table: 300 GSM8K-style
and 200 BFCL-style items, 27 verbatim copies, 26 late answers, 2,000 unrelated rows.

The judge's verdicts are facts computed once by running its own tool (never part of this project):

    python tests/data/contamination_judge/generate.py --judge /tmp/judge/contamination_check.py

runs it on each case set twice, on the rows file as it is and on `{"text": <the row's texts in
order>}`, and writes `reference.json`, `cases.jsonl` and `table.json` here. See README.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

NAMES = ["Natalia", "Weng", "Betty", "Julie", "James", "Albert", "Ken", "Alexis", "Tina", "Mark", "Randy", "Joy",
         "Carla", "Gerald", "Sheila", "Toula", "Billy", "Greg", "Mandy", "Hasan", "Priya", "Mateo", "Ingrid", "Kofi",
         "Yuki", "Olga", "Tariq", "Fern", "Lucia", "Dmitri"]
OBJECTS = ["clips", "apples", "stickers", "marbles", "cupcakes", "books", "pencils", "shells", "cookies", "cards",
           "tomatoes", "bottles", "candles", "puzzles", "kites", "lemons"]
PLACES = ["the market", "school", "the fair", "the library", "her garden", "the bakery", "the zoo", "the park",
          "the harbour", "the museum", "the farm", "the station"]
GSM = [
    "{a} sold {o} to {x} of her friends in April, and then she sold {f} as many {o} in May. How many {o} did {a} "
    "sell altogether in April and May?",
    "{a} earns ${x} an hour for babysitting. Yesterday, she just did {y} minutes of babysitting at {p}. How much did "
    "she earn?",
    "{a} is saving money for a new wallet which costs ${x}. {a} has only half of the money she needs. Her parents "
    "decided to give her ${y} for that purpose, and her grandparents twice as much as her parents. How much more "
    "money does {a} need to buy the wallet?",
    "{a} is reading a {x}-page book. Yesterday, she was able to read {y} pages and today, she read twice as many "
    "pages as yesterday. If she wants to read half of the remaining pages tomorrow, how many pages should she read?",
    "{a} buys {x} large boxes of {o} and {y} small boxes. A large box holds 16 {o} and a small box holds 8. If "
    "{a} gives away a quarter of them at {p}, how many {o} are left?",
    "At {p}, {a} counted {x} {o} on the first shelf and {y} more {o} on the second shelf than on the first. Then "
    "a worker removed 9 {o} from each shelf. How many {o} remained on both shelves together?",
    "The price of a ticket to {p} is ${x} for adults and ${y} for children. {a} buys tickets for two adults and "
    "three children, and pays with a hundred-dollar bill twice. How much change does {a} receive?",
    "{a} runs {x} meters every weekday morning and {y} meters on Saturday afternoon near {p}. She rests on Sunday. "
    "How many meters does {a} run in four weeks?",
]
OWN = [  # the training set's own shapes, in the same style and vocabulary
    "If {a} packs {x} {o} into each of {y} crates before leaving for {p}, how many {o} are packed in all?",
    "{a} paints {x} fences a day for {y} days at {p}. How many fences did {a} paint in total this month?",
    "A recipe needs {x} cups of flour per batch. {a} makes {y} batches of {o} for {p}. How many cups of flour "
    "does {a} use?",
    "{a} scores {x} points in each of {y} games at {p}. What is her total score, and how many more points does "
    "she need to reach one thousand?",
    "{a} had ${x} and earned ${y} more by selling {o} at {p}. She then spent a third of it. How much money does "
    "{a} have now?",
    "There are {x} {o} in a jar at {p}. {a} takes out {y} of them and then adds twice as many as she took. How "
    "many {o} are in the jar now?",
]
FUNCS = [
    ("get_weather", "What's the weather like in {c} today, in {u}?", {"city": "{c}", "unit": "{u}"}),
    ("calc_binomial_probability", "Calculate the probability of getting {k} successes in {n} trials with "
                                  "probability {q} each.", {"n": "{n}", "k": "{k}", "p": "{q}"}),
    ("find_restaurants", "Find me {cu} restaurants near {c} open after {h} pm.",
     {"location": "{c}", "cuisine": "{cu}", "open_after": "{h}"}),
    ("convert_currency", "How much is {n} {cur} in euros if I convert it at today's exchange rate?",
     {"amount": "{n}", "from": "{cur}", "to": "EUR"}),
    ("book_flight", "Book a flight from {c} to {c2} on {d}.", {"origin": "{c}", "destination": "{c2}", "date": "{d}"}),
    ("get_stock_price", "What's the current stock price of {t} on the {ex}?", {"ticker": "{t}", "exchange": "{ex}"}),
    ("calculate_bmi", "Calculate the BMI of a person weighing {w} kg who is {ht} cm tall.",
     {"weight_kg": "{w}", "height_cm": "{ht}"}),
    ("translate_text", "Translate the phrase '{ph}' from English into {lang} for my travel notes.",
     {"text": "{ph}", "target_language": "{lang}"}),
]
OWN_FUNCS = [  # the training set's own tools, in the same style
    ("get_air_quality", "How clean is the air in {c} right now, on the {u} scale?", {"city": "{c}", "scale": "{u}"}),
    ("order_taxi", "Order a taxi from {c} airport to the {cu} quarter at {h} pm.",
     {"pickup": "{c} airport", "dropoff": "{cu} quarter", "time": "{h}pm"}),
    ("count_words", "Count the words in the sentence '{ph}' and tell me the total.", {"sentence": "{ph}"}),
    ("get_exchange_hours", "When does the {ex} open tomorrow for trading in {t} shares?",
     {"exchange": "{ex}", "ticker": "{t}"}),
]
CITIES = ["Boston", "Lagos", "Osaka", "Lima", "Oslo", "Perth", "Quito", "Tunis", "Hanoi", "Zurich", "Denver",
          "Cairo", "Seville", "Kraków", "Montréal"]
CUISINES = ["Thai", "Ethiopian", "Peruvian", "Korean", "Lebanese", "Sicilian"]
CURRENCIES = ["dollars", "yen", "pesos", "rupees", "kronor"]
TICKERS = ["AAPL", "TSLA", "NVDA", "SAP", "TM", "BABA"]
EXCHANGES = ["NASDAQ", "NYSE", "XETRA", "TSE"]
LANGS = ["French", "Swahili", "Japanese", "Portuguese", "Finnish"]
PHRASES = ["good morning, my friend", "where is the train station", "the soup is too salty", "see you next summer"]
TOPICS = ["glaciers", "honeybees", "lighthouses", "the printing press", "coral reefs", "volcanoes", "the silk road",
          "bridges", "comets", "tea plantations"]
SENTENCES = [
    "Scholars have long argued about how {t} shaped the towns around them.",
    "In {y} a survey counted {x} examples of {t} across the northern provinces.",
    "Most accounts agree that {t} changed slowly until the middle of the century.",
    "{a} wrote that {t} were misunderstood by nearly every visitor who came to {c}.",
    "By {y} the study of {t} had become a field of its own, with journals and societies.",
    "Local records from {c} mention {t} only twice, both times in connection with trade.",
]
FILLER = ("Let us think about this carefully and write out every step so that nothing is missed along the way "
          "before we give the final result to the reader who asked the question in the first place today").split()
CHAT = ["Can you help me plan a small birthday party for my sister?", "Sure! How many guests are you expecting?",
        "About twelve, mostly her friends from the choir.", "Great, then a buffet with finger food works well.",
        "Write a haiku about the first snow of the winter.", "Quiet white blanket / settling on the sleeping town / "
        "footsteps tell the tale", "Explain the difference between a list and a tuple in Python.",
        "A list is mutable and a tuple is immutable; both keep their order."]


def gsm_item(rng: random.Random, templates: list[str]) -> tuple[str, str]:
    x, y = rng.randrange(6, 400), rng.randrange(2, 90)
    q = rng.choice(templates).format(a=rng.choice(NAMES), o=rng.choice(OBJECTS), p=rng.choice(PLACES), x=x, y=y,
                                     f=rng.choice(["half", "twice", "three times"]))
    total = x * 2 + y
    if templates is OWN:  # the training set's own solutions: the same numbers never give the same text
        return q, f"Doubling {x} gives {x * 2}, and adding {y} makes {total} in all.\n#### {total}"
    answer = (f"First find the total: {x} * 2 = <<{x}*2={x * 2}>>{x * 2}. Then add the rest: {x * 2} + {y} = "
              f"<<{x * 2}+{y}={total}>>{total}. So the answer is {total}.\n#### {total}")
    return q, answer


def bfcl_item(rng: random.Random, funcs: list[tuple] = FUNCS) -> tuple[str, str]:
    name, q, args = rng.choice(funcs)
    v = {"c": rng.choice(CITIES), "c2": rng.choice(CITIES), "u": rng.choice(["celsius", "fahrenheit"]),
         "n": str(rng.randrange(5, 900)), "k": str(rng.randrange(1, 5)), "q": f"0.{rng.randrange(1, 9)}",
         "cu": rng.choice(CUISINES), "h": str(rng.randrange(6, 11)), "cur": rng.choice(CURRENCIES),
         "d": f"2025-0{rng.randrange(1, 9)}-{rng.randrange(10, 28)}", "t": rng.choice(TICKERS),
         "ex": rng.choice(EXCHANGES), "w": str(rng.randrange(45, 120)), "ht": str(rng.randrange(150, 200)),
         "lang": rng.choice(LANGS), "ph": rng.choice(PHRASES)}
    call = {name: {k: [val.format(**v)] for k, val in args.items()}}
    return q.format(**v), json.dumps([call])


def passage(rng: random.Random, n: int) -> str:
    t = rng.choice(TOPICS)
    return " ".join(rng.choice(SENTENCES).format(t=t, y=rng.randrange(1700, 1990), x=rng.randrange(3, 400),
                                                 a=rng.choice(NAMES), c=rng.choice(CITIES)) for _ in range(n))


def edit(rng: random.Random, text: str, n: int) -> str:
    """`n` word edits: replace, insert or delete a word."""
    words = text.split(" ")
    for _ in range(n):
        k = rng.randrange(len(words))
        op = rng.choice(["replace", "insert", "delete"]) if len(words) > 3 else "insert"
        if op == "replace":
            words[k] = rng.choice(["really", "perhaps", "exactly", "seven", "blue", "then"])
        elif op == "insert":
            words.insert(k, rng.choice(["quite", "also", "only", "nearly", "still"]))
        else:
            del words[k]
    return " ".join(words)


def variant(rng: random.Random, text: str) -> tuple[str, str]:
    kind = rng.choice(["upper", "lower", "title", "no-punct", "extra-space", "newlines", "smart-quotes", "nbsp",
                       "fullwidth-digits", "accents", "zero-width", "emoji", "ellipsis", "tabs"])
    if kind == "upper":
        return kind, text.upper()
    if kind == "lower":
        return kind, text.lower()
    if kind == "title":
        return kind, text.title()
    if kind == "no-punct":
        return kind, "".join(ch for ch in text if ch not in ",.?!$'\"")
    if kind == "extra-space":
        return kind, text.replace(" ", "   ")
    if kind == "newlines":
        return kind, text.replace(". ", ".\n\n")
    if kind == "smart-quotes":
        return kind, text.replace("'", "\u2019").replace('"', "\u201d")
    if kind == "nbsp":
        return kind, text.replace(" ", "\u00a0", 5)
    if kind == "fullwidth-digits":
        return kind, text.translate(str.maketrans("0123456789", "０１２３４５６７８９"))
    if kind == "accents":
        return kind, text.replace("e", "é", 3).replace("a", "à", 2)
    if kind == "zero-width":
        words = text.split(" ")
        return kind, " ".join(w + "\u200b" if i % 4 == 0 else w for i, w in enumerate(words))
    if kind == "emoji":
        return kind, text.replace("?", "? 🤔", 1) + " ✅"
    if kind == "ellipsis":
        return kind, text.replace(". ", "\u2026 ")
    return kind, text.replace(" ", "\t", 4)


def shaped(rng: random.Random, q: str, a: str, shape: str | None = None, extra_turns: bool = False,
           system: str | None = None) -> tuple[str, dict]:
    """One training row holding question `q` and answer `a` in a shape drawn at random (or `shape`)."""
    shape = shape or rng.choice(["text", "prompt-completion", "prompt-completion-chat", "question-answer",
                                 "messages", "messages-multi", "task"])
    if shape == "text":
        return shape, {"text": f"{q}\n{a}"}
    if shape == "prompt-completion":
        return shape, {"prompt": q, "completion": a}
    if shape == "prompt-completion-chat":
        return shape, {"prompt": [{"role": "user", "content": q}], "completion": [{"role": "assistant", "content": a}]}
    if shape == "question-answer":
        return shape, {"question": q, "answer": a}
    if shape == "task":
        return shape, {"id": f"t{rng.randrange(10 ** 6)}", "type": "qa", "messages": [{"role": "user", "content": q}],
                       "gold": {"answer": a}}
    msgs = [{"role": "system", "content": system}] if system else []
    if shape == "messages-multi" or extra_turns:
        k = rng.randrange(0, len(CHAT) // 2) * 2
        msgs += [{"role": "user", "content": CHAT[k]}, {"role": "assistant", "content": CHAT[k + 1]}]
    msgs += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    if shape == "messages-multi" and rng.random() < 0.5:
        msgs += [{"role": "user", "content": "Thanks! Can you double-check it?"},
                 {"role": "assistant", "content": "Yes, I checked every step again and it holds."}]
    return shape, {"messages": msgs}


def differential(seed: int = 11) -> tuple[list[dict], list[dict]]:
    """(reference rows, cases); a case is {"kind", "shape", "item" (reference index or None), "row"}."""
    rng = random.Random(seed)
    ref: list[dict] = []
    kinds: list[str] = []

    def add(kind: str, row: dict) -> None:
        ref.append(row)
        kinds.append(kind)

    for _ in range(160):
        q, a = gsm_item(rng, GSM)
        add("gsm8k", {"question": q, "answer": a})
    for _ in range(120):
        q, a = bfcl_item(rng)
        add("bfcl", {"question": q, "answer": a})
    for _ in range(40):
        add("reading", {"context": passage(rng, rng.randrange(3, 7)),
                        "question": f"According to the passage, what did {rng.choice(NAMES)} write about "
                                    f"{rng.choice(TOPICS)} in {rng.choice(CITIES)}?",
                        "answer": rng.choice(["They were misunderstood.", "It changed slowly", "trade",
                                              "Twice, in connection with trade and travel across the region."])})
    for _ in range(25):
        q, _ = gsm_item(rng, GSM)
        add("aime", {"question": q, "answer": str(rng.randrange(0, 1000))})
    for _ in range(20):
        add("arena", {"question": f"Write a short essay about {rng.choice(TOPICS)} for a school magazine in "
                                  f"{rng.choice(CITIES)}, mentioning {rng.choice(NAMES)} and at least "
                                  f"{rng.randrange(2, 9)} facts, in a friendly tone.", "answer": ""})
    for keys in (("input", "output"), ("prompt", "response"), ("text", "target"), ("content", "answer")):
        for _ in range(6):
            q, a = gsm_item(rng, GSM)
            add(f"fields-{keys[0]}", {keys[0]: q, keys[1]: a})
    for _ in range(8):
        add("short", {"question": f"What is {rng.randrange(2, 99)} times {rng.randrange(2, 99)}?",
                      "answer": str(rng.randrange(4, 9999))})
    for k in range(4):  # a fingerprint repeated: the judge keeps the first
        q, a = gsm_item(rng, GSM)
        add("fingerprint", {"question": q, "answer": a, "eval_key": "gsm", "fingerprint": f"fp{k}"})
        q2, a2 = gsm_item(rng, GSM)
        add("fingerprint-repeat", {"question": q2, "answer": a2, "eval_key": "gsm", "fingerprint": f"fp{k}"})

    cases: list[dict] = []

    def case(kind: str, item: int | None, row: tuple[str, dict]) -> None:
        cases.append({"kind": kind, "shape": row[0], "item": item, "row": row[1]})

    def pick(*allowed: str) -> int:
        while True:
            i = rng.randrange(len(ref))
            if kinds[i] in allowed:
                return i

    def qa(i: int) -> tuple[str, str]:
        r = ref[i]
        q = next(r[k] for k in ("question", "input", "prompt", "text", "content") if k in r)
        a = next((r[k] for k in ("answer", "output", "response", "target") if k in r), "")
        return q, a

    every = set(kinds)
    for _ in range(220):  # verbatim copies, every item kind, every shape
        i = pick(*every)
        q, a = qa(i)
        row = shaped(rng, q, a)
        if kinds[i] == "reading":
            row = ("question-answer", {"context": ref[i]["context"], "question": q, "answer": a})
        case("verbatim", i, row)
    for _ in range(200):  # 1-6 word edits of the question, the answer or both
        i = pick("gsm8k", "bfcl", "aime", "arena", "fields-input", "fields-prompt")
        q, a = qa(i)
        n = rng.randrange(1, 7)
        where = rng.choice(["question", "answer", "both"])
        q2 = edit(rng, q, n) if where != "answer" else q
        a2 = edit(rng, a, n) if where != "question" and a else a
        case(f"edit-{n}-{where}", i, shaped(rng, q2, a2))
    for _ in range(120):  # the answer after 0-100 tokens of filler
        i = pick("gsm8k", "bfcl", "aime")
        q, a = qa(i)
        filler = " ".join(rng.choice(FILLER) for _ in range(rng.randrange(0, 101)))
        case("late-answer", i, shaped(rng, q, f"{filler}\n{a}", rng.choice(["text", "messages", "question-answer"])))
    for _ in range(60):  # passages: whole, partial, missing, or after the question
        i = pick("reading")
        q, a = qa(i)
        ctx = ref[i]["context"]
        how = rng.choice(["whole", "half", "none", "after"])
        if how == "half":
            ctx = ctx[: len(ctx) // 2]
        text = {"whole": f"{ctx}\n{q}\n{a}", "half": f"{ctx}\n{q}\n{a}", "none": f"{q}\n{a}",
                "after": f"{q}\n{a}\n{ctx}"}[how]
        case(f"passage-{how}", i, ("text", {"text": text}))
    for _ in range(160):  # case, punctuation, whitespace and Unicode variants
        i = pick("gsm8k", "bfcl", "aime", "arena", "reading")
        q, a = qa(i)
        kind, q2 = variant(rng, q)
        a2 = variant(rng, a)[1] if rng.random() < 0.5 else a
        case(f"variant-{kind}", i, shaped(rng, q2, a2))
    for _ in range(80):  # multi-turn chats and system prompts around the item
        i = pick("gsm8k", "bfcl", "aime", "arena")
        q, a = qa(i)
        system = rng.choice([None, "You are a careful assistant. Think step by step and answer precisely."])
        case("multi-turn", i, shaped(rng, q, a, "messages", extra_turns=True, system=system))
    for _ in range(60):  # prefixes that shift the judge's sampled positions
        i = pick("gsm8k", "bfcl", "aime")
        q, a = qa(i)
        prefix = rng.choice(["User:", "Question:", "### Instruction:\n", "Q: " * rng.randrange(1, 4),
                             " ".join(rng.choice(FILLER) for _ in range(rng.randrange(1, 9)))])
        case("prefix", i, ("text", {"text": f"{prefix} {q}\nAssistant: {a}"}))
    for _ in range(50):  # the question alone, or the worked answer alone
        i = pick("gsm8k", "arena", "bfcl")
        q, a = qa(i)
        alone = rng.choice(["question", "answer"]) if a else "question"
        row = shaped(rng, q, "I am not sure, sorry.") if alone == "question" else shaped(rng, "Solve it.", a)
        case(f"{alone}-alone", i, row)
    for _ in range(20):  # a chat about something else, the item in a side field the judge's tool reads
        i = pick("gsm8k", "bfcl", "arena")
        q, a = qa(i)
        k = rng.randrange(0, len(CHAT) // 2) * 2
        case("side-field", i, ("messages", {"messages": [{"role": "user", "content": CHAT[k]},
                                                         {"role": "assistant", "content": CHAT[k + 1]}],
                                            "source_note": f"{q}\n{a}"}))
    for _ in range(600):  # unrelated rows in the same style and vocabulary
        style = rng.random()
        if style < 0.45:
            q, a = gsm_item(rng, OWN)
        elif style < 0.7:
            q, a = bfcl_item(rng)
            q = rng.choice(["Please ", "Could you ", "I need you to ", "Quick one: "]) + q[0].lower() + q[1:]
            call = json.loads(a)[0]
            name = next(iter(call))
            a = json.dumps([{name + "_v2": {k: v for k, v in list(call[name].items())[::-1]}}])
        elif style < 0.85:
            q, a = f"Summarize this: {passage(rng, rng.randrange(2, 5))}", "A short summary of the text."
        else:
            k = rng.randrange(0, len(CHAT) // 2) * 2
            q, a = CHAT[k], CHAT[k + 1]
        case("unrelated", None, shaped(rng, q, a))
    return ref, cases


def table(seed: int = 111) -> tuple[list[dict], list[dict]]:
    """The issue-11 table: (reference rows, cases) with 27 verbatim copies, 26 late answers, 2,000 unrelated."""
    rng = random.Random(seed)
    ref = [dict(zip(("question", "answer"), gsm_item(rng, GSM), strict=True)) for _ in range(300)]
    while len(ref) < 500:
        q, a = bfcl_item(rng)
        if all(r["question"] != q for r in ref[300:]):
            ref.append({"question": q, "answer": a})
    cases = []
    for k in range(27):
        i = rng.randrange(300) if k < 10 else 300 + rng.randrange(200)
        cases.append({"kind": "verbatim", "item": i, "row": {"text": f"{ref[i]['question']}\n{ref[i]['answer']}"}})
    for k in range(26):
        i = rng.randrange(300) if k < 10 else 300 + rng.randrange(200)
        filler = " ".join(rng.choice(FILLER) for _ in range(rng.randrange(20, 30)))
        cases.append({"kind": "late-answer", "item": i, "row": {"messages": [
            {"role": "user", "content": ref[i]["question"]},
            {"role": "assistant", "content": f"{filler}\n{ref[i]['answer']}"}]}})
    for _ in range(2000):
        q, a = gsm_item(rng, OWN) if rng.random() < 0.6 else bfcl_item(rng, OWN_FUNCS)
        if rng.random() < 0.4:
            q = "Please answer: " + q
        cases.append({"kind": "unrelated", "item": None, "row": {"messages": [
            {"role": "user", "content": q}, {"role": "assistant", "content": a.replace("####", "ANSWER:")}]}})
    rng.shuffle(cases)
    return ref, cases


def digest(ref: list[dict], cases: list[dict]) -> str:
    return hashlib.sha256(json.dumps([ref, cases], sort_keys=True).encode()).hexdigest()


def readable(row: dict) -> bool:
    """Whether the judge's tool can read this JSONL row (the field it takes is a string, or absent)."""
    value = row.get("text")
    if value is None:
        value = next((row[k] for k in ("text", "content", "input", "prompt", "question") if k in row), None)
    return value is None or isinstance(value, str)


def run_judge(tool: Path, ref: list[dict], rows: list[dict]) -> dict[int, list[int]]:
    """0-based row -> reference indices the judge's tool flags it for."""
    with tempfile.TemporaryDirectory() as tmp:
        rpath, ipath = Path(tmp) / "test_data.json", Path(tmp) / "rows.jsonl"
        rpath.write_text(json.dumps(ref, indent=2, ensure_ascii=False))
        # a row whose field the tool reads is not a string would stop it: a blank line keeps the numbering
        ipath.write_text("".join((json.dumps(r, ensure_ascii=False) if readable(r) else "") + "\n" for r in rows))
        done = subprocess.run([sys.executable, str(tool), "--reference", str(rpath), "--input", str(ipath)],
                              capture_output=True, text=True, env=os.environ)
    if done.returncode not in (0, 1) or "Traceback" in done.stderr:
        raise SystemExit(f"the judge's tool failed:\n{done.stderr[-2000:]}")
    out = {}
    for line in done.stdout.splitlines():
        hit = json.loads(line)
        out[int(hit["source"].split(":")[1]) - 1] = sorted(m["ref_index"] for m in hit["matches"])
    return out


def judged(tool: Path, ref: list[dict], cases: list[dict]) -> list[dict]:
    """Each case with the judge's verdicts: on the row as it is (`file`) and on its texts in order (`text`)."""
    texts = [t for _, t in texts_of(cases)]
    on_file = run_judge(tool, ref, [c["row"] for c in cases])
    on_text = run_judge(tool, ref, [{"text": t} for t in texts])
    return [{**c, "text_sha1": hashlib.sha1(t.encode()).hexdigest(),
             "judge": {"file": on_file.get(k, []), "text": on_text.get(k, [])}} for k, (c, t) in enumerate(texts_of(cases))]


def texts_of(cases: list[dict]) -> list[tuple[dict, str]]:
    """Each case with its row's texts in reading order, as `aci.tasks.row_texts` gives them."""
    from aci.tasks import row_texts

    return [(c, "\n".join(row_texts(c["row"], f"case {k}"))) for k, c in enumerate(cases)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--judge", type=Path, required=True, help="the judge's contamination_check.py, outside this project")
    args = ap.parse_args()
    ref, cases = differential()
    (HERE / "reference.json").write_text(json.dumps(ref, indent=1, ensure_ascii=False) + "\n")
    with open(HERE / "cases.jsonl", "w") as f:
        for c in judged(args.judge, ref, cases):
            f.write(json.dumps(c, ensure_ascii=False) + "\n")
    t_ref, t_cases = table()
    flagged = run_judge(args.judge, t_ref, [{"text": t} for _, t in texts_of(t_cases)])
    (HERE / "table.json").write_text(json.dumps({"digest": digest(t_ref, t_cases), "judge_flagged": sorted(flagged)},
                                                indent=1) + "\n")



if __name__ == "__main__":
    main()
