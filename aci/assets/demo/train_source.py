"""Training data source of the demo's toy benchmark ("lock codes"): items of the same family as the
benchmark, never the benchmark's own.

Each item is a short story about a lock with a four-digit code and one instruction: read the code
(`copy`), read it backwards (`reverse`), or read it with its two halves swapped (`swap`). The answer is
the last line `ANSWER: <digits>`. The item space is split once by a hash of the question: the benchmark's
test items come from one part, this source only ever draws from the other, so the two are disjoint
without this file reading the test set.

    python train_source.py --n 600 --seed 1 [--mix copy=1,reverse=1,swap=1] [--noise 0.02] --out FILE

writes task records (`id`, `subtype`, `question`, `answer`). `--noise` plants that share of
wrong answers, as a careless real source would; `check` (a grader: `python:train_source:check`)
recomputes the answer from the question, so `aci verify-task` rejects them. `subtype` is a histogram
feature (`--custom subtype=python:train_source:subtype`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
from pathlib import Path

SUBTYPES = ("copy", "reverse", "swap")
NAMES = ["Mia", "Kai", "Ana", "Ben", "Zoe", "Eli", "Ivy", "Leo", "Nia", "Omar", "Rosa", "Sam", "Tara", "Hugo",
         "Lena", "Ravi", "Cleo", "Dan", "Yuki", "Finn"]
COLORS = ["red", "blue", "green", "old", "small", "heavy", "rusty", "bright"]
THINGS = ["shed", "locker", "bike", "safe", "gate", "trunk", "cabinet", "mailbox", "suitcase", "drawer"]
ASK = {
    "copy": ["What is the code?", "Which code opens it?", "Tell me the code."],
    "reverse": ["What is the code read backwards?", "Write the code in reverse order.",
                "Give the code with its digits reversed."],
    "swap": ["What is the code with its two halves swapped?", "Swap the first two digits with the last two.",
             "Give the code with the halves exchanged."],
}
FORMAT = "End with the line ANSWER: <code>."
_CODE = re.compile(r"\bcode is (\d{4})\b")


def solve(subtype: str, code: str) -> str:
    if subtype == "copy":
        return code
    if subtype == "reverse":
        return code[::-1]
    if subtype == "swap":
        return code[2:] + code[:2]
    raise ValueError(f"unknown subtype {subtype!r}")


def is_test(question: str) -> bool:
    """The benchmark owns the items whose question hashes into this eighth of the space."""
    return hashlib.sha256(question.encode()).digest()[0] % 8 == 0


def make_item(rng: random.Random, subtype: str) -> tuple[str, str]:
    code = f"{rng.randint(0, 9999):04d}"
    story = f"{rng.choice(NAMES)} keeps the {rng.choice(COLORS)} {rng.choice(THINGS)} shut with a lock."
    return f"{story} {rng.choice(ASK[subtype])} {FORMAT}\nThe code is {code}.", solve(subtype, code)


def generate(n: int, seed: int, mix: dict[str, float], *, split: str = "train", noise: float = 0.0,
             prefix: str = "item") -> list[dict]:
    """`n` distinct items of `split` ("train" or "test") with subtype shares `mix`, deterministic in `seed`."""
    rng = random.Random(seed)
    total = sum(mix.values())
    counts = {s: int(n * w / total) for s, w in mix.items()}
    for s in sorted(mix, key=lambda s: -mix[s])[: n - sum(counts.values())]:
        counts[s] += 1
    order = [s for s, c in counts.items() for _ in range(c)]
    rng.shuffle(order)
    seen, out = set(), []
    for i, sub in enumerate(order):
        while True:
            question, answer = make_item(rng, sub)
            if question not in seen and is_test(question) == (split == "test"):
                break
        seen.add(question)
        if noise and rng.random() < noise:
            answer = f"{(int(answer) + rng.randint(1, 9)) % 10000:04d}"
        out.append({"id": f"{prefix}-{i:05d}", "subtype": sub, "question": question, "answer": answer})
    return out


def check(task: dict, response: str) -> tuple[float, str]:
    """Grader that ignores the stored gold: the code is read from the question and solved again.

    The response is the last `ANSWER:` line's value, or the whole response when it has none (how
    verify-task renders a task's gold for a python grader)."""
    prompt = " ".join(m["content"] for m in task.get("messages", []) if m.get("role") == "user")
    code = _CODE.search(prompt)
    if not code:
        return 0.0, "no four-digit code in the question"
    want = solve(task.get("subtype") or "", code.group(1))
    lines = re.findall(r"(?m)^\s*ANSWER:\s*(\S+)\s*$", response)
    got = lines[-1] if lines else response.strip()  # a bare answer (a task's gold as is) counts too
    return (1.0, "correct") if got == want else (0.0, f"answer {got!r} != {want}")


def subtype(record: dict) -> str | None:
    """Histogram feature: the item's subtype."""
    return record.get("subtype")


def parse_mix(text: str) -> dict[str, float]:
    mix = {}
    for part in text.split(","):
        name, _, weight = part.partition("=")
        if name.strip() not in SUBTYPES:
            raise SystemExit(f"unknown subtype {name!r}; known: {', '.join(SUBTYPES)}")
        mix[name.strip()] = float(weight or 1)
    return mix


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--mix", default="copy=1,reverse=1,swap=1", help="subtype weights")
    p.add_argument("--noise", type=float, default=0.0, help="share of planted wrong answers")
    p.add_argument("--prefix", default="train")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    rows = generate(a.n, a.seed, parse_mix(a.mix), noise=a.noise, prefix=a.prefix)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"wrote {len(rows)} items to {a.out}")


if __name__ == "__main__":
    main()
