"""Bench: does `aci contamination` stream? Peak memory of the real CLI on a 40 MB and a 400 MB file.

Why: a check held the whole training file and 1,024 rows of text a batch (989 MB peak for a 200 MB file
of 20 KB rows, 836 MB at 40 MB); its memory should be bounded by the reference index, the longest row and
a batch, whatever the file's size. Builds, in a temporary folder deleted afterwards, the GSM8K-size
reference of bench/contamination.py (1,319 items) and one training file per size of `{"text": ...}` rows
of about 20 KB each (made-up words, with word problems in the reference's names, objects and places among
them, so that the prefilter has candidates to weigh), with a few verbatim copies of reference items
planted: exactly these rows must be flagged. Each run is a fresh `aci contamination` CLI process
(`python -m aci.cli --json contamination`, recording its verdict as the tool does), its peak RSS and CPU
time read from `wait4` for that process alone. The baseline, in the same run: the same command on a one-row file (the
interpreter, the imports and the reference index, which no file size changes). Rounds alternate the sizes,
so that a busy machine meets them alike; each figure is the median of `--runs` rounds. Speed: MB per
second of wall time and per CPU-second at the largest size, and MB per CPU-second between the sizes
(start-up and indexing left out). Last line:

    rss_slope_mb_per_mb=X   (peak RSS growth per MB of input between the smallest and largest size; goal <= 0.1)

    .venv/bin/python bench/contamination_memory.py [--sizes 40 400] [--runs 3] [--row-kb 20]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from itertools import accumulate
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from contamination import OWN_TEMPLATES, REFS, TEMPLATES, problem  # noqa: E402 (the check bench's generator)

PLANTED = 3  # verbatim copies of reference items, one per row, in each file
WORDS = 30_000  # made-up words the rows are drawn from
ACI_CMD = [sys.executable, "-m", "aci.cli", "--json", "contamination"]


def reference(path: Path, rng: random.Random) -> list[tuple[str, str]]:
    items = [problem(rng, TEMPLATES) for _ in range(REFS)]
    with open(path, "w") as f:
        for i, (q, a) in enumerate(items):
            f.write(json.dumps({"id": f"gsm8k-test-{i}", "question": q, "answer": a}) + "\n")
    return items


def training(path: Path, mb: float, row_kb: float, items: list[tuple[str, str]], rng: random.Random) -> set[int]:
    """Rows of about `row_kb` KB up to `mb` MB: sentences of made-up words, a quarter of them word problems
    of the check bench's own shapes in the reference's vocabulary (not its shapes: the stricter checks
    flag those); PLANTED rows hold a reference item verbatim. Returns the planted rows' line numbers."""
    vocab = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 10))) for _ in range(WORDS)]
    cum = list(accumulate(1 / (k + 1) for k in range(WORDS)))  # Zipf-like: a few words common, most rare
    rows = max(1, int(mb * (1 << 20) / (row_kb * 1024)))
    planted = set(rng.sample(range(rows), min(PLANTED, rows)))
    with open(path, "w") as f:
        for i in range(rows):
            parts, size = [], 0
            while size < row_kb * 1024:
                if rng.random() < 0.25:
                    part = problem(rng, OWN_TEMPLATES)[0]
                else:
                    part = " ".join(rng.choices(vocab, cum_weights=cum, k=rng.randint(8, 30))).capitalize() + "."
                parts.append(part)
                size += len(part) + 1
            if i in planted:
                q, a = items[rng.randrange(len(items))]
                parts.insert(len(parts) // 2, f"{q}\n{a}")
            f.write(json.dumps({"text": " ".join(parts)}) + "\n")
    return {i + 1 for i in planted}


def run_check(work: Path, data: Path, ref: Path) -> tuple[dict, float, float, float]:
    """One fresh CLI process checking `data`: its JSON result, peak RSS (MB), wall and CPU seconds."""
    out = work / "out.json"
    actions = [(os.POSIX_SPAWN_OPEN, 1, str(out), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)]
    t0 = time.perf_counter()
    pid = os.posix_spawn(sys.executable, [*ACI_CMD, "--path", str(data), "--reference", str(ref)], dict(os.environ),
                         file_actions=actions)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    text = out.read_text()
    if os.waitstatus_to_exitcode(status) not in (0, 1) or not text.strip():
        raise SystemExit(f"aci contamination failed on {data.name} (status {status}):\n{text[-2000:]}")
    return json.loads(text), usage.ru_maxrss / 1024, wall, usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=float, nargs="+", default=[40, 400], help="training file sizes in MB")
    ap.add_argument("--runs", type=int, default=3, help="rounds over the sizes; medians are reported")
    ap.add_argument("--row-kb", type=float, default=20, help="length of a row in KB")
    args = ap.parse_args()
    sizes = sorted(args.sizes)
    if len(sizes) < 2 or sizes[0] == sizes[-1]:
        raise SystemExit("--sizes needs two different sizes")
    rng = random.Random(0)
    with tempfile.TemporaryDirectory(prefix="aci-contamination-memory-") as tmp:
        work = Path(tmp)
        os.chdir(work)  # the CLI's working directory: its state folder is made here
        items = reference(ref := work / "test.jsonl", rng)
        files = {0.0: (work / "one_row.jsonl", training(work / "one_row.jsonl", 0, args.row_kb, items, rng))}
        for mb in sizes:
            path = work / f"train_{mb:g}mb.jsonl"
            files[mb] = (path, training(path, mb, args.row_kb, items, rng))
        actual = {mb: path.stat().st_size / (1 << 20) for mb, (path, _) in files.items()}
        peaks, walls, cpus = ({mb: [] for mb in files} for _ in range(3))
        for _ in range(max(1, args.runs)):
            for mb, (path, planted) in files.items():
                result, peak, wall, cpu = run_check(work, path, ref)
                flagged = {r["line"] for r in result["contaminated"]}
                assert flagged == planted, f"{path.name}: flagged lines {sorted(flagged)}, planted {sorted(planted)}"
                assert result["rows"] == sum(1 for _ in open(path))
                peaks[mb].append(peak)
                walls[mb].append(wall)
                cpus[mb].append(cpu)
    med = {mb: (statistics.median(peaks[mb]), statistics.median(walls[mb]), statistics.median(cpus[mb]))
           for mb in files}
    base = med[0.0][0]
    print(f"reference: {REFS} items; rows of {args.row_kb:g} KB; {max(1, args.runs)} rounds, medians")
    print(f"baseline (one row: interpreter, imports, reference index): peak_rss_mb={base:.0f}")
    for mb in sizes:
        peak, wall, cpu = med[mb]
        print(f"{actual[mb]:.0f} MB: peak_rss_mb={peak:.0f} (+{peak - base:.0f} over the baseline; runs "
              f"{' '.join(f'{p:.0f}' for p in peaks[mb])}) wall_s={wall:.1f} cpu_s={cpu:.1f}")
    low, high = sizes[0], sizes[-1]
    span = actual[high] - actual[low]
    print(f"mb_per_s={actual[high] / med[high][1]:.1f} mb_per_cpu_s={actual[high] / med[high][2]:.1f} (at "
          f"{actual[high]:.0f} MB; between the sizes, start-up and index left out: "
          f"{span / (med[high][2] - med[low][2]):.1f} MB per CPU-s)")
    print(f"rss_slope_mb_per_mb={(med[high][0] - med[low][0]) / span:.3f}")


if __name__ == "__main__":
    main()
