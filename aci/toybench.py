"""The demo's toy benchmark, laid out like a PostTrainBench task folder.

`aci demo` needs a benchmark that a model small enough for a laptop CPU can learn in minutes, that is
graded by a rule (no judge, nothing downloaded), and that looks to the tools exactly like a real task:

    evaluate.py            same command line as PostTrainBench's (--model-path, --limit, --max-tokens,
                           --json-output-file), transformers + greedy decoding + the `ANSWER: X` rule
    templates/qwen.jinja   the chat template the evaluation forces (chosen from the model's type)
    timer.sh, .deadline    prints `Remaining time (hours:minutes):` then `H:MM`
    data/test.jsonl        the benchmark's test items (never trained on)
    train_source.py        a generator of the same task family with disjoint items (the training source)
    task_context/README.md what the agent is told about the task
    base_model/            the embedded "demo" model (random init: scores 0)

The task ("lock codes"): read a four-digit code from a one-line story, as is, backwards, or with its
halves swapped, and end with `ANSWER: <code>`. All of it comes from files in `aci/assets/demo/`.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

ASSETS = Path(__file__).resolve().parent / "assets" / "demo"
TEST_MIX = {"copy": 0.3, "reverse": 0.4, "swap": 0.3}
TEST_ITEMS = 200
TEST_SEED = 2026
BENCHMARK = "lock-codes"

README = """# Task: lock codes

Post-train the model in `base_model/` so that it does well on the lock-codes benchmark.
Each item is a one-line story about a lock with a four-digit code and one instruction: give the code,
give it backwards, or give it with its two halves swapped. The grader reads the last line
`ANSWER: <code>` and compares it with the gold code exactly.

- Evaluate: `python evaluate.py --model-path <model> --limit <n> --json-output-file metrics.json`
- The evaluation renders prompts with `templates/qwen.jinja`; do not edit `evaluate.py` or `templates/`.
- `data/test.jsonl` holds the {n} test items: never train on them.
- `train_source.py` generates training items of the same family (`python train_source.py --help`).
- Time left: `bash timer.sh`. Store the best model in `final_model/`.
"""


@dataclass(frozen=True)
class Bench:
    workdir: Path
    base_model: Path
    test: Path
    template: Path
    train_source: Path
    eval_command: str
    size: int


def load_source(path: Path | None = None) -> ModuleType:
    """Import the task family's generator (`train_source.py`) from the assets or a task folder."""
    path = path or ASSETS / "train_source.py"
    spec = importlib.util.spec_from_file_location("aci_demo_train_source", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_deadline(workdir: Path, seconds: float) -> None:
    (workdir / ".deadline").write_text(f"{int(time.time() + seconds)}\n")


def build(workdir: Path, *, python: str, deadline_s: float = 5400, model: bool = True) -> Bench:
    """Write the task folder into `workdir` (created if needed) and return where everything is."""
    workdir = Path(workdir).resolve()
    (workdir / "data").mkdir(parents=True, exist_ok=True)
    (workdir / "templates").mkdir(exist_ok=True)
    (workdir / "task_context").mkdir(exist_ok=True)
    for name in ("evaluate.py", "train_source.py", "timer.sh", "templates/qwen.jinja"):
        shutil.copyfile(ASSETS / name, workdir / name)
    (workdir / "timer.sh").chmod(0o755)
    write_deadline(workdir, deadline_s)
    source = load_source(workdir / "train_source.py")
    items = source.generate(TEST_ITEMS, TEST_SEED, TEST_MIX, split="test", prefix="test")
    test = workdir / "data" / "test.jsonl"
    test.write_text("".join(json.dumps(r) + "\n" for r in items))
    (workdir / "task_context" / "README.md").write_text(README.format(n=len(items)))
    base = workdir / "base_model"
    if model and not (base / "config.json").is_file():
        from aci.embedded import build_model

        build_model(base, "demo")
    command = f"{python} evaluate.py --model-path {{model_path}} --limit {{limit}} --json-output-file {{output}} " \
              f"--seed {{seed}}"
    return Bench(workdir=workdir, base_model=base, test=test, template=workdir / "templates" / "qwen.jinja",
                 train_source=workdir / "train_source.py", eval_command=command, size=len(items))
