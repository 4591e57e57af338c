"""A user's own task end to end through the real MCP server (issue 27's acceptance): a task folder unlike
PostTrainBench's (an eval script taking `--checkpoint`, `--n` with 0 for all and `--out`, nested metrics,
its grader reading a `Total: <answer>` line, the tokenizer's own chat template, no `timer.sh`) and a
deadline 40 minutes away given as a clock time: plan, a baseline with a limit, contamination, one
training job on the small embedded model, promotion, finalize.

The items are short ledger entries whose answer is the code they file, in a few wordings; test and
training items draw their codes from disjoint halves of the code space, so no training row holds a test
item's code. A model small enough to train here in a minute learns them. The test set ends with a few
word problems, each with its own names, things and places, so that a generated file can hold close
variants of them: `gen.jsonl` plants copies of short items (too short for the n-gram score), a story
with its name and a number changed, a story's numbers in another story, and template siblings that must
pass.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from aci.state import now
from tests.conftest import mcp_client

LEDGER = Path(__file__).resolve().parent / "fixtures" / "ledger_eval.py"
STEPS = 150


NAMES = ("Ada", "Bo", "Cy", "Di", "Ed", "Flo")
WORDINGS = ("{name} filed code {code} in the ledger. Which code?", "Ledger line by {name}: code {code}. Read it.",
            "The ledger shows code {code}, signed {name}. What code is it?")


def items(n: int, seed: int, half: int) -> list[dict]:
    """`n` ledger items whose codes have `sum of digits % 2 == half` (test: 0, training: 1)."""
    import random

    rng, out = random.Random(seed), []
    while len(out) < n:
        code = f"{rng.randint(0, 9999):04d}"
        if sum(map(int, code)) % 2 == half:
            q = rng.choice(WORDINGS).format(name=rng.choice(NAMES), code=code)
            out.append({"id": f"{'test' if half == 0 else 'syn'}-{len(out)}", "question": q, "answer": code})
    return out


STORY = ("{name} packed {a} boxes of {thing} at the {place} for the {event}, with {b} in each box, and gave {c} "
         "boxes to {friend}. How many {thing} did {name} keep?")
STORY_WORDS = {  # each story's own words: names, things, places, occasions
    "name": ("Marisol", "Teodor", "Ottilie", "Casimir", "Imogen", "Leopold", "Rosalind", "Bertil"),
    "thing": ("lanterns", "seashells", "quills", "thimbles", "teacups", "compasses", "spindles", "lockets"),
    "place": ("harbour", "orchard", "quarry", "greenhouse", "lighthouse", "vineyard", "observatory", "tannery"),
    "event": ("regatta", "harvest", "solstice", "carnival", "jubilee", "pageant", "tournament", "wedding"),
    "friend": ("Sunniva", "Anselm", "Hedda", "Kwame", "Wilhelmina", "Tobias", "Ezra", "Priya"),
}
N_STORIES = len(STORY_WORDS["name"])


def stories(seed: int) -> list[dict]:
    """Word problems of one template, each with its own words and numbers (answer: b * (a - c))."""
    import random

    rng, out = random.Random(seed), []
    for k in range(N_STORIES):
        fill = {slot: words[k] for slot, words in STORY_WORDS.items()}
        fill |= {"a": rng.randint(40, 97), "b": rng.randint(13, 39), "c": rng.randint(3, 12)}
        out.append({"id": f"story-{k}", "question": STORY.format(**fill), "answer": str(fill["b"] * (fill["a"] - fill["c"])),
                    "fill": fill})
    return out


def test_items() -> list[dict]:
    return items(300, 7, 0) + [{k: v for k, v in s.items() if k != "fill"} for s in stories(9)]


def planted() -> list[dict]:
    """Generated rows: two copies of short items (one lower-cased), two close variants of stories, and 30
    template siblings of the stories (other words and numbers) that must pass, in that order."""
    import random

    short, story = items(300, 7, 0)[:2], stories(9)
    renamed = story[0]["fill"] | {"name": "Zebulon", "c": story[0]["fill"]["c"] + 1}
    other = story[1]["fill"]
    rows = [{"prompt": short[0]["question"], "completion": f"Total: {short[0]['answer']}"},
            {"prompt": short[1]["question"].lower(), "completion": f"Total: {short[1]['answer']}"},
            {"prompt": STORY.format(**renamed), "completion": "Total: 1"},
            {"prompt": f"A ferry left with {other['a']} cars; {other['c']} drove off and each of the rest carried "
                       f"{other['b']} people. How many people?", "completion": "Total: 1"}]
    rng = random.Random(4)
    for _ in range(30):
        fill = {slot: rng.choice(("Corwin", "Ines", "spoons", "bricks", "station", "fair", "Dagny")) for slot in STORY_WORDS}
        fill |= {"a": rng.randint(40, 97), "b": rng.randint(13, 39), "c": rng.randint(3, 12)}
        rows.append({"prompt": STORY.format(**fill), "completion": "Total: 1"})
    return rows


def task_folder(workdir: Path) -> str:
    """The user's folder: their script, 308 test items, a training set, a generated file with planted
    variants; returns the command as typed."""
    from aci.embedded import build_model

    (workdir / "data").mkdir()
    (workdir / "data" / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in test_items()))
    (workdir / "gen.jsonl").write_text("".join(json.dumps(r) + "\n" for r in planted()))
    (workdir / "train.jsonl").write_text("".join(json.dumps({"messages": [
        {"role": "user", "content": t["question"]}, {"role": "assistant", "content": f"Total: {t['answer']}"}]})
        + "\n" for t in items(2000, 8, 1)))
    (workdir / "ledger_eval.py").write_text(LEDGER.read_text())
    build_model(workdir / "base_model", "demo")
    return f"{shlex.quote(sys.executable)} ledger_eval.py --checkpoint final_model --n 0 --out results.json"


async def run(workdir: Path, typed: str) -> dict:
    seen: dict = {"t": {}}
    t0 = time.monotonic()
    async with mcp_client(workdir, env={"OMP_NUM_THREADS": "1"}) as c:
        async def call(tool: str, **args) -> dict:
            r = await c.call_tool(tool, args)
            assert not r.is_error, f"{tool}: {r.content[0].text}"
            return r.structured_content

        deadline = (now() + timedelta(minutes=40)).astimezone().strftime("%H:%M:%S")
        seen["plan"] = await call("plan", action="init", base_model="base_model", benchmark="ledger-codes",
                                  eval_command=typed, reference="data/test.jsonl", deadline=deadline)
        await call("log-state", action="append", kind="benchmark-card",
                   message="ledger codes: 300 items; the grader reads the last line 'Total: <code>', exact match; "
                           "greedy; the tokenizer's own chat template",
                   data={"answer_format": "Total: <code>", "decoding": "greedy"})
        seen["base"] = await call("eval-checkpoint", action="evaluate", checkpoint="base", limit=64)
        seen["t"]["baseline"] = time.monotonic() - t0
        seen["contamination"] = await call("contamination", path="train.jsonl", reference="data/test.jsonl")
        seen["planted"] = await call("contamination", path="gen.jsonl")  # the reference plan init pinned
        train = dict(data="train.jsonl", learning_rate=1e-3, batch_size=16, grad_accum=1, max_steps=STEPS,
                     save_steps=STEPS, warmup_ratio=0.05, lr_schedule="linear", logging_steps=25, max_length=96)
        job = (await call("train", action="start", **train))["job"]["id"]
        while (j := (await call("train", action="status", job=job))["job"])["status"] == "running":
            await asyncio.sleep(2)
        assert j["status"] == "succeeded", j
        seen["t"]["trained"] = time.monotonic() - t0
        ckpt = j["progress"]["last_checkpoint"]
        seen["promoted"] = await call("eval-checkpoint", action="evaluate", checkpoint=ckpt, limit=64, promote=True)
        seen["all"] = await call("eval-checkpoint", action="evaluate", checkpoint=ckpt, limit=-1)
        seen["finalize"] = await call("finalize")
        seen["status"] = await call("status")
        seen["t"]["finalized"] = time.monotonic() - t0
    print("any-task e2e times (s):", {k: round(v) for k, v in seen["t"].items()})
    return seen


@pytest.fixture(scope="module")
def seen(tmp_path_factory) -> tuple[Path, dict]:
    workdir = tmp_path_factory.mktemp("ledger")
    typed = task_folder(workdir)
    return workdir, asyncio.run(run(workdir, typed))


def test_plan_maps_the_users_options_and_budgets_the_deadline(seen):
    _, s = seen
    p = s["plan"]
    assert p["card"]["eval_command"].endswith("--checkpoint {model_path} --n {limit} --out {output}")
    assert p["card"]["eval_options"]["limit_all"] == "0" and p["deadline_source"] == "run card deadline"
    assert 39.5 < p["card"]["budget_hours"] * 60 <= 40.05
    submit = next(x for x in p["phases"] if x["name"] == "submit")
    assert 5.9 < submit["allocated_min"] <= 6.01 and abs(sum(x["allocated_min"] for x in p["phases"]) - 40) < 0.6
    assert any("Final reserve starts in 0h3" in r for r in p["run"]["reminders"])


def test_the_baseline_scores_what_the_limit_asked_and_says_so(seen):
    _, s = seen
    e = s["base"]["result"]
    assert (e["limit"], e["samples"], e["metric"]) == (64, 64, "results.ledger.exact_match")
    every = s["all"]["result"]
    assert (every["limit"], every["samples"]) == (-1, 300 + N_STORIES)  # `--n 0`: the script's every item


def test_training_data_passes_contamination(seen):
    _, s = seen
    assert s["contamination"]["verdict"] == "pass", s["contamination"]
    assert s["contamination"]["coverage"] == {"judge": N_STORIES, "short": 300, "close": 300 + N_STORIES,
                                              "unchecked": 0}


def test_planted_short_copies_fail_and_close_variants_are_named(seen):
    _, s = seen
    p = s["planted"]
    assert p["reference"].endswith("data/test.jsonl") and p["verdict"] == "fail", p
    copies = {r["line"]: (r["label"], r["matches"][0]["reference"]) for r in p["contaminated"]}
    assert copies == {1: ("short", "test-0"), 2: ("short", "test-1")}
    close = {r["line"]: r["matches"][0]["reference"] for r in p["close_rows"]}
    assert close == {3: "story-0", 4: "story-1"}  # the siblings on lines 5-34 pass
    assert not p["close_counted"] and p["counted"] == 2  # the default profile reports close rows


def test_promotion_keeps_the_trained_tokenizer_and_lists_its_files(seen):
    workdir, s = seen
    pr = s["promoted"]
    assert pr["promotion"]["promoted"], pr
    assert pr["result"]["score"] > s["base"]["result"]["score"]
    final = workdir / "final_model"
    assert set(pr["promotion"]["files"]) == {p.name for p in final.iterdir()}
    assert "'s own" in pr["promotion"]["files"]["chat_template.jinja"]


def test_finalize_reads_the_answer_as_the_grader_would(seen):
    _, s = seen
    f = s["finalize"]
    items = {i["name"]: i for i in f["items"]}
    assert f["passed"], [i for i in f["items"] if not i["passed"]]
    assert "holds a line `Total: <answer>`" in items["generates"]["detail"]
    assert "the first item of test.jsonl" in items["generates"]["detail"]
    state = s["status"]["state"]
    assert state["has_run_card"] and state["best"]["checkpoint"] == s["promoted"]["result"]["checkpoint"]
    assert state["next_actions"][0].startswith(("No target set", "final_model (")), state["next_actions"]
    print("times (s):", {k: round(v) for k, v in s["t"].items()})
