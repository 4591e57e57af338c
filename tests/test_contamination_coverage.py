"""`contamination` beyond the judge's algorithm: every test item checked (short items by exact match, the
coverage per rule in the report, unchecked items named in the verdict), close variants of one item and only
them, the task's provided decontamination tool beside the task folder, and the cap on one row's length."""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path

import pytest

from aci import contamination as C
from aci import manifest, registry
from aci.contamination import shared
from aci.context import Context
from aci.errors import ACIError
from aci.tasks import read_rows
from aci.tasks.rows import MAX_ROW_BYTES

FIXTURES = Path(__file__).parent / "fixtures"
NAMES = ["Natalia", "Weng", "Betty", "Julie", "James", "Albert", "Ken", "Alexis", "Tina", "Mark", "Randy", "Joy",
         "Carla", "Gerald", "Toula", "Billy", "Greg", "Mandy", "Hasan", "Priya", "Mateo", "Ingrid", "Kofi", "Yuki"]
OBJECTS = ["apples", "pens", "cards", "shells", "books", "eggs", "cups", "toys", "stamps", "beads"]
SHORT = [  # short arithmetic word problems, under the 20 tokens the judge's algorithm needs
    ("{a} has {x} {o}. {a} buys {y} more. How many {o} does {a} have?", lambda x, y: x + y),
    ("{a} had {x} {o} and gave {y} away. How many are left?", lambda x, y: x - y),
    ("A box holds {x} {o}. How many {o} are in {y} boxes?", lambda x, y: x * y),
    ("{a} reads {x} pages a day. How many pages in {y} days?", lambda x, y: x * y),
    ("{a} earns {x} dollars and spends {y}. What is left?", lambda x, y: x - y),
    ("There are {x} {o} on a shelf and {y} on the floor. How many in all?", lambda x, y: x + y),
    ("{a} bakes {x} {o} for each of {y} friends. How many does {a} bake?", lambda x, y: x * y),
    ("{a} walks {x} miles on Monday and {y} on Tuesday. How far in total?", lambda x, y: x + y),
]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return path


def chat(q: str, a: str) -> dict:
    return {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}


def call(workdir: Path, **args):
    return registry.call("contamination", args, Context(workdir=workdir))


def short_item(rng: random.Random, t: int | None = None, x: int | None = None, y: int | None = None,
               name: str | None = None) -> tuple[str, str, tuple]:
    t = rng.randrange(len(SHORT)) if t is None else t
    x = rng.randrange(10, 99) if x is None else x
    y = rng.randrange(2, x) if y is None else y
    template, op = SHORT[t]
    return template.format(a=name or rng.choice(NAMES), o=rng.choice(OBJECTS), x=x, y=y), str(op(x, y)), (t, x, y)


def short_reference(rng: random.Random, n: int = 300) -> tuple[list[dict], list[tuple]]:
    items, keys = [], []
    while len(items) < n:
        q, a, key = short_item(rng)
        if key not in keys:
            items.append({"question": q, "answer": a})
            keys.append(key)
    return items, keys


# -- every test item checked --------------------------------------------------------------------------
def test_short_test_items_are_checked_and_the_verdict_names_what_was_not(workdir):
    """The reported defect: 300 short arithmetic word problems, a file holding 2 of them verbatim said
    PASS ("14 of 300 items indexed"). Now both are flagged `short`, naming their items; a copy with its
    case and punctuation changed is found too (`normalised`); the report gives the coverage per rule, and
    a pass over a reference with an item no rule can check says so in its verdict."""
    rng = random.Random(27)
    items, keys = short_reference(rng)
    (workdir / "data").mkdir()
    write_jsonl(workdir / "data" / "test.jsonl", items)
    other = [short_item(rng, x=100 + k, y=7) for k in range(40)]  # the same templates, numbers no item has
    rows = [chat(q, a) for q, a, _ in other]
    rows[5] = chat(items[17]["question"], "Let me think.")
    rows[20] = {"prompt": items[230]["question"] + "\n", "completion": items[230]["answer"]}
    rows[30] = chat(re.sub(r"[.?]", "", items[99]["question"]).upper(), "OK")
    write_jsonl(workdir / "gen.jsonl", rows)
    out = call(workdir, path="gen.jsonl", reference="data/test.jsonl")
    assert out.verdict == "fail" and out.short_flagged == 3 and out.flagged == 3
    found = {r["line"]: r["matches"][0] for r in out.contaminated}
    assert {line: (m["item"], m["label"], m["component"]) for line, m in found.items()} == {
        6: (17, "short", "exact"), 21: (230, "short", "exact"), 31: (99, "short", "normalised")}
    c = out.coverage
    assert c["judge"] + c["short"] == 300 and c["short"] > 250 and c["unchecked"] == 0
    assert "not checked by exact" not in out.summary() and "by exact match only" in out.summary()

    write_jsonl(workdir / "data" / "test.jsonl", items + [{"question": "2 + 2?", "answer": "4"}])
    write_jsonl(workdir / "clean.jsonl", [rows[k] for k in range(40) if k not in (5, 20, 30)])
    out = call(workdir, path="clean.jsonl", reference="data/test.jsonl")
    assert out.verdict == "pass" and out.coverage["unchecked"] == 1
    assert out.verdict_text.startswith("pass") and "1 of 301 test items were not checked" in out.verdict_text
    assert out.summary().startswith("PASS: ") and "1 of 301 test items were not checked" in out.summary().split("\n")[0]
    recorded = manifest.current(Context(workdir=workdir).state, workdir / "clean.jsonl")["contamination"]
    assert recorded["verdict_text"] == out.verdict_text and recorded["coverage"] == out.coverage


# -- close variants, and only them --------------------------------------------------------------------
def vocabulary() -> list[str]:
    """Real English words to build unique stories from: the cl100k tokens that are a space and 5-10 letters."""
    enc = C.encoding()
    out = []
    for t in range(100_000):
        try:
            s = enc.decode([t])
        except (KeyError, ValueError):
            continue
        if re.fullmatch(r" [a-z]{5,10}", s):
            out.append(s[1:])
    return sorted(out)


STORY = ("{n} keeps {a} {w0} in the {w1} near the {w2}. Every {w3} she {w4} {b} more {w0} and gives {c} of them "
         "to her {w5}, who {w6} them with {w7}. After the {w8}, the {w9} {w10} half of the {w11}. How many {w0} "
         "does {n} have in the {w12} {w13} at the end?")


def story(words: list[str], name: str, a: int, b: int, c: int) -> tuple[str, str]:
    q = STORY.format(n=name, a=a, b=b, c=c, **{f"w{k}": w for k, w in enumerate(words)})
    return q, (f"{name} has {a} + {b} = {a + b} {words[0]}. Giving away {c} leaves {a + b} - {c} = {a + b - c}."
               f"\n#### {a + b - c}")


def test_close_variants_of_one_item_and_only_them(workdir):
    """Planted close variants of both kinds are flagged `close`, naming their item: the same story with
    its names and numbers (or some wording) changed, a story's numbers and operation in another story,
    and a template item's numbers under other names. Two instances of one template with other numbers
    pass, and so do other stories in the same style: at most 1 % of 600 of each is flagged."""
    rng = random.Random(5)
    vocab = vocabulary()
    stories = [(rng.sample(vocab, 14), rng.choice(NAMES), rng.randrange(100, 900), rng.randrange(11, 60),
                rng.randrange(3, 10)) for _ in range(400)]
    templates, keys = short_reference(rng, 200)
    items = [dict(zip(("question", "answer"), story(*s), strict=True)) for s in stories] + templates
    write_jsonl(workdir / "test.jsonl", items)

    def other(name: str) -> str:
        return rng.choice([n for n in NAMES if n != name])

    planted = {}  # row -> the item it varies
    rows = []
    for _ in range(20):  # kind 1: its names and numbers changed, and two of its words
        i = rng.randrange(400)
        words, name, *_ = stories[i]
        words = list(words)
        for j in rng.sample(range(1, 14), 2):
            words[j] = rng.choice(vocab)
        planted[len(rows)] = i
        rows.append(chat(*story(words, other(name), rng.randrange(100, 900), rng.randrange(11, 60), 3)))
    for _ in range(20):  # kind 2: its numbers and operation in another story
        i = rng.randrange(400)
        planted[len(rows)] = i
        rows.append(chat(*story(rng.sample(vocab, 14), other(stories[i][1]), *stories[i][2:])))
    for _ in range(20):  # a template item's numbers under other names, with its result
        i = rng.randrange(200)
        t, x, y = keys[i]
        planted[len(rows)] = 400 + i
        q, a, _ = short_item(rng, t, x, y, other(""))
        rows.append(chat(q, a))
    unrelated, siblings = [], []
    while len(unrelated) < 600:
        unrelated.append(len(rows))
        rows.append(chat(*story(rng.sample(vocab, 14), rng.choice(NAMES), rng.randrange(100, 900),
                                rng.randrange(11, 60), rng.randrange(3, 10))))
    while len(siblings) < 600:
        q, a, key = short_item(rng)
        if key[1:] not in {k[1:] for k in keys}:  # other numbers than any test item's
            siblings.append(len(rows))
            rows.append(chat(q, a))
    write_jsonl(workdir / "train.jsonl", rows)
    out = call(workdir, path="train.jsonl", reference="test.jsonl", show=1000)
    close = {r["row"]: r for r in out.close_rows}
    assert out.flagged == 0 and out.close == len(close)
    assert {k: close[k]["matches"][0]["item"] for k in planted if k in close} == planted  # all, each its item
    assert {close[k]["matches"][0]["component"] for k in range(20)} == {"story"}
    assert {close[k]["matches"][0]["component"] for k in range(20, 40)} == {"numbers"}
    assert {close[k]["matches"][0]["component"] for k in range(40, 60)} == {"template"}
    assert all(close[k]["label"] == "close" for k in planted)
    assert sum(k in close for k in unrelated) <= 6 and sum(k in close for k in siblings) <= 6
    assert out.verdict == "pass" and not out.close_counted and "close variants reported" in out.verdict_text
    assert out.coverage["close"] == 600 and "[close]: test item #" in out.summary()


def test_the_judge_fixtures_unrelated_rows_are_rarely_close(tmp_path):
    """The judge-verdict fixture's 600 unrelated rows and the issue-11 table's 2,000 reuse the reference's
    own small pools of names, phrases, dates and number formulas; at most 1 % of them are close (those
    that are share a test item's date, or its numbers and their sum)."""
    import importlib.util

    judge = Path(__file__).parent / "data" / "contamination_judge"
    cases = [json.loads(line) for line in (judge / "cases.jsonl").read_text().splitlines()]
    spec = importlib.util.spec_from_file_location("contamination_judge_cases", judge / "generate.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    refs, table = gen.table()
    write_jsonl(tmp_path / "table_ref.jsonl", refs)
    for ref, rows in ((judge / "reference.json", cases), (tmp_path / "table_ref.jsonl", table)):
        report = C.check(C.reference_items(ref), C.training_rows(write_jsonl(tmp_path / "rows.jsonl",
                                                                             [c["row"] for c in rows])))
        unrelated = {k for k, c in enumerate(rows) if c["kind"] == "unrelated"}
        close = {r["row"] for r in report.close}
        assert len(unrelated) >= 600 and len(close & unrelated) <= 0.01 * len(unrelated)


def test_a_long_story_with_its_numbers_changed_is_close(workdir):
    """A long test item (a passage-like question of 120 words) with every number changed keeps what is
    specific to it, and is flagged; under the strict profile a close variant fails the file."""
    rng = random.Random(9)
    vocab = vocabulary()
    long = " ".join(f"On day {d} the {' '.join(rng.sample(vocab, 5))} carried {rng.randrange(10, 99)} crates."
                    for d in range(1, 13))
    items = [{"question": long + " How many crates in all?", "answer": "It is the sum."}]
    items += [{"question": " ".join(rng.sample(vocab, 30)) + "?", "answer": "Yes."} for _ in range(50)]
    write_jsonl(workdir / "test.jsonl", items)
    changed = re.sub(r"\d+", lambda m: str(int(m.group()) + 3), long)
    write_jsonl(workdir / "train.jsonl", [chat(changed + " How many crates are there?", "Add them up.")])
    registry.call("plan", {"action": "init", "base_model": "base", "benchmark": "gsm8k", "profile": "posttrainbench",
                           "eval_command": "python evaluate.py --model-path {model_path}", "reference": "test.jsonl"},
                  Context(workdir=workdir))
    out = call(workdir, path="train.jsonl")
    assert [(r["label"], r["matches"][0]["item"], r["matches"][0]["component"]) for r in out.close_rows] == [
        ("close", 0, "story")]
    assert out.close_counted and out.counted == 1 and out.verdict == "fail" and not out.opens_train_gate


# -- the task's provided tool -------------------------------------------------------------------------
@pytest.fixture
def harness(tmp_path, monkeypatch) -> Path:
    """A task folder with the test items and the decontamination tool (the stand-in) beside it."""
    task = tmp_path / "task"
    task.mkdir()
    monkeypatch.delenv("ACI_STATE", raising=False)
    monkeypatch.chdir(task)
    rng = random.Random(22)
    items, _ = short_reference(rng, 60)
    items += [{"question": f"A farmer keeps {n} goats in a barn by the river and sells a third of them every "
                           f"spring at the county market; how many goats are left after two springs?",
               "answer": f"Two thirds twice leave four ninths: {n} * 4 / 9 goats remain in the barn."}
              for n in (135, 270, 405, 540, 675, 810, 945, 1080)]
    (tmp_path / shared.ITEMS).write_text(json.dumps(items, indent=1))
    shutil.copy(FIXTURES / "contamination_check.py", tmp_path / shared.TOOL)
    return task


def strict_init(workdir: Path):
    return registry.call("plan", {"action": "init", "base_model": "base", "benchmark": "gsm8k",
                                  "profile": "posttrainbench",
                                  "eval_command": "python evaluate.py --model-path {model_path}"},
                         Context(workdir=workdir))


def test_the_tasks_provided_items_are_pinned_and_its_tool_is_run(harness, monkeypatch):
    """plan init pins ../test_data.json by itself; under posttrainbench `aci contamination` runs the provided
    ../contamination_check.py on the same rows as `{"text": prompt + completion}` and records its verdict
    beside ours; a row only it flags keeps the train gate closed."""
    from aci.training import gates

    out = strict_init(harness)
    items = json.loads((harness.parent / shared.ITEMS).read_text())
    assert out.card["reference"]["path"] == str(harness.parent / shared.ITEMS)
    assert any("pinned the task's provided test items" in w for w in out.warnings)
    log = harness / "seen.jsonl"
    monkeypatch.setenv("STANDIN_LOG", str(log))
    write_jsonl(harness / "train.jsonl", [{"prompt": "Tell me a joke.", "completion": "Why did the goat cross?"},
                                          chat("What colour is the sky?", "Blue.")])
    ok = call(harness, path="train.jsonl")
    assert ok.reference == str(harness.parent / shared.ITEMS) and ok.verdict == "pass" and ok.opens_train_gate
    assert ok.shared_tool.verdict == "pass" and "the task's provided tool: pass" in ok.verdict_text
    assert [json.loads(line)["text"] for line in log.read_text().splitlines()] == [
        "Tell me a joke.\nWhy did the goat cross?", "What colour is the sky?\nBlue."]
    answer = items[61]["answer"]  # a worked answer alone, which only the stand-in's cruder rule flags
    write_jsonl(harness / "train.jsonl", [chat("Explain this step.", answer), chat("Hi", "Hello")])
    out = call(harness, path="train.jsonl")
    assert out.flagged == 0 and out.close == 0 and out.shared_tool.verdict == "fail"
    assert out.shared_tool.lines == [1] and out.counted == 1 and out.verdict == "fail" and not out.opens_train_gate
    assert "the task's provided tool flagged 1" in out.verdict_text
    with pytest.raises(ACIError) as e:
        gates.check_data(Context(workdir=harness), harness / "train.jsonl", [])
    assert e.value.rule == "no-test-data"
    assert manifest.current(Context(workdir=harness).state, harness / "train.jsonl")["contamination"][
        "shared_tool"]["verdict"] == "fail"


@pytest.mark.parametrize("body,reason", [
    ("raise SystemExit('cannot load its vocabulary')", "exited with status 1 and 0 flagged rows"),
    ("import time\ntime.sleep(30)", "did not finish within"),
    ("print('not json')\nraise SystemExit(3)", "exited with status 3"),
])
def test_a_provided_tool_that_fails_is_not_checked_never_a_pass(harness, monkeypatch, body, reason):
    (harness.parent / shared.TOOL).write_text(body + "\n")
    monkeypatch.setattr(shared, "TIMEOUT_S", 1.0)
    strict_init(harness)
    write_jsonl(harness / "train.jsonl", [chat("What colour is the sky?", "Blue.")])
    out = call(harness, path="train.jsonl")
    assert out.shared_tool.verdict == "not-checked" and reason in out.shared_tool.reason
    assert "not checked by the task's provided tool" in out.verdict_text and "tool: pass" not in out.verdict_text
    assert any("not checked by the task's provided contamination_check.py" in w for w in out.warnings)


# -- one row's length ----------------------------------------------------------------------------------
@pytest.mark.parametrize("array", [False, True])
def test_a_row_longer_than_the_cap_is_refused_with_its_line(workdir, array):
    """A 9 MiB row would take the check hundreds of MB; it is refused naming file:line, unread in JSONL."""
    write_jsonl(workdir / "ref.jsonl", [{"question": "A question long enough about many apples and pears?",
                                         "answer": "3"}])
    big = {"text": "word " * ((MAX_ROW_BYTES + (1 << 20)) // 5)}
    path = workdir / ("train.json" if array else "train.jsonl")
    if array:
        path.write_text(f'[\n{json.dumps({"text": "fine"})},\n{json.dumps(big)}\n]\n')
    else:
        write_jsonl(path, [{"text": "fine"}, big, {"text": "fine"}])
    where = f"{path.name}:{3 if array else 2}"
    with pytest.raises(ACIError, match=re.escape(where) + rf": .*\b{MAX_ROW_BYTES >> 20} MiB"):
        call(workdir, path=path.name, reference="ref.jsonl")
    with pytest.raises(ACIError, match=re.escape(where)):
        list(read_rows(path))
