"""A real run for the `train` tests: run card, evaluation template, SFT samples and tasks, and helpers
to drive the tool through the registry and wait for jobs."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from aci import jobs, manifest, registry
from aci.context import Context
from aci.state import State

DATA = Path(__file__).parent / "data"
# Small enough for 2-core CI: a few tiny steps per job.
FAST = {"max_length": 64, "batch_size": 2, "grad_accum": 1, "logging_steps": 1, "check_samples": 16}


def sft_rows(n: int = 16) -> list[dict]:
    return [{"messages": [{"role": "user", "content": f"What is {i} plus {i}?"},
                          {"role": "assistant", "content": f"{i} plus {i} is {2 * i}.\nANSWER: {2 * i}"}]}
            for i in range(n)]


def task_rows(n: int = 8, grader: dict | str = "last-number") -> list[dict]:
    return [{"id": f"add-{i}", "type": "math", "messages": [{"role": "user", "content": f"What is {i} plus {i}?"}],
             "gold": {"answer": str(2 * i)}, "grader": grader} for i in range(n)]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def ctx_for(workdir: Path) -> Context:
    return Context(state=workdir / "state", workdir=workdir)


def call(workdir: Path, **args):
    return registry.call("train", args, ctx_for(workdir))


def bench_items(n: int = 6) -> list[dict]:
    """The toy benchmark's test items: the reference the run card pins for contamination checks."""
    return [{"question": f"A toy benchmark question number {i}: Mia has 40 marbles and loses {i} of them on the way "
                         f"home from school. How many marbles does she have left?", "answer": str(40 - i)}
            for i in range(n)]


def make_run(workdir: Path, model: Path, *, profile: str = "posttrainbench", template: str = "qwen3_like",
             contamination: str | None = "pass", **card) -> Context:
    """Run card with the evaluation's template (no generation markers) and pinned test items, data files,
    contamination verdicts (`pass`: the real check against the pinned items)."""
    (workdir / "templates").mkdir(parents=True, exist_ok=True)
    shutil.copy(DATA / f"{template}.jinja", workdir / "templates" / "model.jinja")
    write_jsonl(workdir / "bench_items.jsonl", bench_items())
    ctx = ctx_for(workdir)
    registry.call("plan", {"action": "init", "base_model": str(model), "benchmark": "toy-add", "profile": profile,
                           "eval_command": "python evaluate.py --model-path {model_path} --limit {limit}",
                           "template": "templates/model.jinja", "reference": "bench_items.jsonl", **card}, ctx)
    for name, rows in (("sft.jsonl", sft_rows()), ("tasks.jsonl", task_rows(grader={"type": "regex", "pattern": "[a-z]"}))):
        path = write_jsonl(workdir / name, rows)
        if contamination == "pass":
            assert registry.call("contamination", {"path": name}, ctx).opens_train_gate
        elif contamination:
            manifest.update(ctx.state, path, "contamination", {"verdict": contamination}, message=f"checked {name}",
                            tool="contamination")
    return ctx_for(workdir)


def wait(workdir: Path, job: str, *, until=lambda v: v.status != "running", timeout: float = 300.0):
    """Poll the job's status through the tool until `until(view)` holds."""
    end = time.monotonic() + timeout
    while True:
        out = call(workdir, action="status", job=job)
        if until(out.job) or time.monotonic() > end:
            return out
        time.sleep(0.5)


@pytest.fixture
def no_stray_jobs(tmp_path):
    """Whatever a test leaves running in `<tmp_path>/state` is killed when it ends, pass or fail."""
    yield
    state = State(tmp_path / "state")
    for job in jobs.active(state):
        jobs.stop(state, job.id, grace_s=0)
