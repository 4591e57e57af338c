"""Bench: checking 100,000 training rows against a 1,319-item reference (GSM8K test size), mode simple.

Generates GSM8K-like word problems from templates: the reference (1,319 items with worked solutions)
and the training set (chat samples with a worked answer: half of them on the reference's own problem
shapes with other names and numbers, as a generator matching the benchmark's style writes them, so long
phrases hit the index; half on the set's own shapes in the same vocabulary), with 50 verbatim copies of
reference items (all must be flagged with label `judge`) and 50 near-copies (one number changed, which
must all be flagged or found close). Times
`aci.contamination.check` (indexing + streaming the training file, including reading and tokenising it)
in CPU seconds of this process, and reports the peak memory (max RSS). For comparison it also times
reading the rows alone (JSON and the row's texts: the floor of any check in this process) and reading
plus cl100k tokenisation of every row.

`--judge PATH` (the PostTrainBench judge's `contamination_check.py`, kept outside this project; see
tests/data/contamination_judge/README.md for running it offline) also runs the judge's tool on the same
rows, given as `{"text": ...}` (it cannot read chat rows), and reports its rows per CPU-second (its
process's user + system time) and the ratio, and times our check on that same `{"text": ...}` file too
(a cheaper read than the chat rows the last line counts); `--rows N` changes the size. Both sides are
timed `--repeat` times (default 5), each run from scratch (ours: index, read, check; the judge's: a fresh
process), and the median of each is reported, with every run: CPU time on a shared virtual machine
drifts by 20-40 % from run to run, and the median does not pick a lucky run. With `--judge` the runs
alternate (ours, then the judge's tool), so that both sides meet the same drift, and the median of the
rounds' ratios is reported beside the ratio of the medians. Last line: `rows_per_cpu_s=N` (the median
run).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aci import contamination as C
from aci.tasks import read_rows

ROWS = 100_000
REFS = 1319
PLANTED = 50
STYLE_MATCHED = 0.5  # share of the other rows drawn from the reference's own problem shapes
NAMES = ["Natalia", "Weng", "Betty", "Julie", "James", "Albert", "Ken", "Alexis", "Tina", "Mark", "Randy", "Joy",
         "Carla", "Gerald", "Shiela", "Toula", "Billy", "Greg", "Mandy", "Hasan"]
OBJECTS = ["clips", "apples", "stickers", "marbles", "cupcakes", "books", "pencils", "shells", "cookies", "cards"]
PLACES = ["the market", "school", "the fair", "the library", "her garden", "the bakery", "the zoo", "the park"]
TEMPLATES = [
    "{a} sold {x} {o} to her friends in April, and then she sold {f} as many {o} in May. How many {o} did {a} sell altogether in April and May?",
    "{a} earns ${x} an hour for babysitting. Yesterday, she just did {y} minutes of babysitting. How much did she earn?",
    "{a} is saving money for a new wallet which costs ${x}. {a} has only half of the money she needs. Her parents decided to give her ${y} for that purpose, and her grandparents twice as much as her parents. How much more money does {a} need to buy the wallet?",
    "{a} is reading a {x}-page book. Yesterday, she was able to read {y} pages and today, she read twice as many pages as yesterday. If she wants to read half of the remaining pages tomorrow, how many pages should she read?",
    "{a} writes a {y}-page letter to 2 different friends twice a week. How many pages does {a} write a year if each letter has {x} lines?",
    "{a} has a garden with flowers. He planted plants of three different colors in it. {x} of them are yellow, and there are {y}% more of those in purple. There are only 25% as many green flowers as there are yellow and purple flowers. How many flowers does {a} have in his garden?",
    "{a} buys {x} large pizzas and {y} small pizzas. A large pizza has 16 slices and a small pizza has 8 slices. If he eats it all, how many pieces does he eat that day?",
    "{a} created a care package to send to his brother, who was away at boarding school. {a} placed a box on a scale, and then he poured into the box enough jelly beans to bring the weight to {x} pounds. Then, he added enough brownies to cause the weight to triple. How much did the box weigh at the end?",
    "{a} went to {p} with ${x}. She bought {y} {o} for $3 each and a bag for $5. How much money does {a} have left after shopping at {p}?",
    "At {p}, {a} counted {x} {o} on the first shelf and {y} more {o} on the second shelf than on the first. How many {o} did {a} count on both shelves together?",
    "{a} collects {o}. She had {x} {o} and gave {y} of them to her brother, then bought twice as many as she gave away. How many {o} does {a} have now?",
    "A box holds {x} {o}. {a} fills {y} boxes and then puts the leftover 7 {o} into a bag. How many {o} did {a} have in total?",
    "{a} runs {x} miles every weekday and {y} miles on Saturday. She rests on Sunday. How many miles does {a} run in four weeks?",
    "The price of a ticket to {p} is ${x} for adults and ${y} for children. {a} buys tickets for two adults and three children. How much does {a} pay?",
    "{a} bakes {x} {o} for the class party at {p}. Her friend bakes {y} fewer than she does. If the class eats all but 5 of them, how many {o} were eaten?",
    "{a} has {x} dollars. She spends a quarter of it on {o} and {y} dollars on lunch at {p}. How many dollars are left?",
]
OWN_TEMPLATES = [  # the training set's own problem shapes, in the same style and vocabulary
    "If {a} packs {x} {o} into each of {y} crates before leaving for {p}, how many {o} are packed in all?",
    "{a} paints {x} fences a day for {y} days at {p}. How many fences did {a} paint?",
    "A recipe needs {x} cups of flour per batch. {a} makes {y} batches for {p}. How many cups of flour does {a} use?",
    "{a} scores {x} points in each of {y} games at {p}. What is her total score?",
    "{a} had ${x} and earned ${y} more by selling {o} at {p}. How much money does {a} have now?",
    "There are {x} {o} in a jar. {a} takes out {y} of them and then adds twice as many as she took. How many {o} are in the jar now?",
    "{a} walks {x} meters to {p} and {y} meters back home each day. How many meters does {a} walk in a week?",
    "A shop at {p} sells {o} in packs of {y}. {a} needs {x} {o}. How many packs must {a} buy?",
]


def problem(rng: random.Random, templates: list[str]) -> tuple[str, str]:
    x, y = rng.randrange(6, 400), rng.randrange(2, 90)
    q = rng.choice(templates).format(a=rng.choice(NAMES), o=rng.choice(OBJECTS), p=rng.choice(PLACES), x=x, y=y,
                                     f=rng.choice(["half", "twice", "three times"]))
    total = x * 2 + y
    solution = (f"First find the total: {x} * 2 = {x * 2}. Then add the rest: {x * 2} + {y} = {total}. "
                f"So the answer is {total}.\n#### {total}")
    return q, solution


def generate(folder: Path, rng: random.Random, rows: int = ROWS) -> tuple[Path, Path, set[int], set[int]]:
    ref, train = folder / "test.jsonl", folder / "train.jsonl"
    items = [problem(rng, TEMPLATES) for _ in range(REFS)]
    with open(ref, "w") as f:
        for i, (q, a) in enumerate(items):
            f.write(json.dumps({"id": f"gsm8k-test-{i}", "question": q, "answer": a}) + "\n")
    planted = rng.sample(range(rows), 2 * PLANTED)
    copies, near = set(planted[:PLANTED]), set(planted[PLANTED:])
    with open(train, "w") as f:
        for i in range(rows):
            if i in copies:
                q, a = items[rng.randrange(REFS)]
            elif i in near:
                q, a = items[rng.randrange(REFS)]
                q = re.sub(r"\d+", lambda m: str(int(m.group()) + 1), q, count=1)
            else:
                q, a = problem(rng, TEMPLATES if rng.random() < STYLE_MATCHED else OWN_TEMPLATES)
            f.write(json.dumps({"messages": [{"role": "user", "content": q},
                                             {"role": "assistant", "content": a.replace("#### ", "ANSWER: ")}]}) + "\n")
    return ref, train, {i + 1 for i in copies}, {i + 1 for i in near}  # line numbers of the copies, near-copies


def as_text(train: Path, folder: Path) -> Path:
    """The training rows as `{"text": ...}` (their texts in reading order): what the judge's tool reads."""
    from aci.tasks import row_texts

    texts = folder / "train_text.jsonl"
    with open(texts, "w") as f:
        for _, row in read_rows(train):
            f.write(json.dumps({"text": "\n".join(row_texts(row, str(train)))}) + "\n")
    return texts


def timed_check(ref: Path, train: Path, enc, repeat: int) -> tuple[C.Report, list[float]]:
    """The report of `aci.contamination.check` on `train`, and the CPU seconds of each of `repeat` runs."""
    cpus = []
    for _ in range(repeat):
        t0 = time.process_time()
        report = C.check(C.reference_items(ref), C.training_rows(train), "simple", 0.8, enc=enc)
        cpus.append(time.process_time() - t0)
    return report, cpus


def run_judge(tool: Path, array: Path, texts: Path) -> tuple[float, int]:
    """CPU seconds of one run of the judge's tool on the training rows as `{"text": ...}` against the
    reference as a JSON array, and the rows it flagged."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, str(tool), "--reference", str(array), "--input", str(texts)],
                          capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1) or "Traceback" in done.stderr:
        raise SystemExit(f"the judge's tool failed:\n{done.stderr[-2000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), len(done.stdout.splitlines())


def against_judge(tool: Path, ref: Path, train: Path, folder: Path, enc, repeat: int):
    """`repeat` rounds of our check on the chat rows, our check on the same rows as `{"text": ...}`, and
    the judge's tool on those: the report, and each side's CPU seconds per round."""
    texts = as_text(train, folder)
    array = folder / "test_data.json"
    array.write_text(json.dumps([row for _, row in read_rows(ref)]))
    ours, same, judge, flagged = [], [], [], 0
    for _ in range(repeat):
        report, cpus = timed_check(ref, train, enc, 1)
        same_report, same_cpus = timed_check(ref, texts, enc, 1)
        assert same_report.judge_flagged == report.judge_flagged
        cpu, flagged = run_judge(tool, array, texts)
        ours += cpus
        same += same_cpus
        judge.append(cpu)
    return report, ours, same, judge, flagged


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=ROWS)
    ap.add_argument("--judge", type=Path, help="the judge's contamination_check.py, to time it on the same rows")
    ap.add_argument("--repeat", type=int, default=5, help="runs of each side; the median is reported")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ref, train, copy_lines, near_lines = generate(Path(tmp), random.Random(0), args.rows)
        enc = C.encoding()
        enc.encode_ordinary("warm up")
        t0 = time.process_time()
        for _ in C.training_rows(train):
            pass
        t_read = time.process_time() - t0
        t0 = time.process_time()
        tokens = C.Tokens(enc)
        for r in C.training_rows(train):
            tokens(C.clean(r.text))
        t_tok = time.process_time() - t0
        del tokens
        repeat = max(1, args.repeat)
        if args.judge:
            report, checks, same, judge, judge_flagged = against_judge(args.judge, ref, train, Path(tmp), enc, repeat)
        else:
            report, checks = timed_check(ref, train, enc, repeat)
        t_check = statistics.median(checks)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert report.rows == args.rows
    judged = {r["line"] for r in report.flagged if r["label"] == "judge"}
    missed = copy_lines - judged
    assert not missed, f"verbatim copies not flagged with label judge at lines {sorted(missed)}"
    found = {r["line"] for r in report.flagged + report.close}
    assert near_lines <= found, f"near-copies neither flagged nor close at lines {sorted(near_lines - found)}"
    ours = args.rows / t_check
    print(f"rows={args.rows} references={report.references} indexed={report.indexed}")
    print(f"flagged={len(report.flagged)} judge-labelled={report.judge_flagged} close={len(report.close)} (planted "
          f"{PLANTED} verbatim copies and {PLANTED} near-copies)")
    print(f"read_only_cpu_s={t_read:.2f} ({args.rows / t_read:,.0f} rows/s)")
    print(f"read_and_tokenize_only_cpu_s={t_tok:.2f} ({args.rows / t_tok:,.0f} rows/s)")
    print(f"check_cpu_s={t_check:.2f} (runs: {' '.join(f'{c:.2f}' for c in checks)})")
    print(f"peak_rss_mb={peak_mb:.0f}")
    if args.judge:
        cpu = statistics.median(judge)
        print(f"judge_tool_cpu_s={cpu:.2f} (runs: {' '.join(f'{c:.2f}' for c in judge)}) judge_tool_flagged={judge_flagged} "
              f"judge_tool_rows_per_cpu_s={args.rows / cpu:.0f}")
        rounds = [j / c for j, c in zip(judge, checks, strict=True)]
        print(f"speedup_vs_judge_tool={cpu / t_check:.1f} (rounds: {' '.join(f'{r:.1f}' for r in rounds)}; "
              f"median of the rounds {statistics.median(rounds):.1f})")
        print(f"on the judge's own input ({{\"text\": ...}} rows): check_cpu_s={statistics.median(same):.2f} (runs: "
              f"{' '.join(f'{c:.2f}' for c in same)}), speedup {cpu / statistics.median(same):.1f}")
    print(f"rows_per_cpu_s={ours:.0f}")


if __name__ == "__main__":
    main()
