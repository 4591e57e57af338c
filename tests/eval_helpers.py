"""Shared pieces of the eval-checkpoint, finalize and promotion tests: a run with a base model copied
into the workdir, checkpoints with planted scores (read by `tests/fixtures/evaluate.py`), checkpoints
registered exactly as a training job's callback registers them, and a real LoRA adapter."""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from pathlib import Path

import pytest

from aci import records, registry
from aci.context import Context
from aci.state import iso

FIXTURES = Path(__file__).resolve().parent / "fixtures"
EVALUATE = FIXTURES / "evaluate.py"


def eval_command(*extra: str) -> str:
    """PostTrainBench's eval command line, pointed at the stand-in evaluate.py."""
    return shlex.join([sys.executable, str(EVALUATE)]) + " --model-path {model_path} --limit {limit} " \
        "--json-output-file {output}" + "".join(f" {e}" for e in extra)


def own_eval(default_limit: int, body: str) -> str:
    """A user's own eval script of a few lines: PostTrainBench's three options parsed into `a`, then `body`
    (which writes the metrics JSON to `a.json_output_file`)."""
    return ("import argparse, json, pathlib\np = argparse.ArgumentParser()\np.add_argument('--model-path')\n"
            f"p.add_argument('--limit', type=int, default={default_limit})\n"
            "p.add_argument('--json-output-file')\na = p.parse_args()\n" + body)


def plant(folder: Path, score: float, where: str = "config.json") -> Path:
    path = folder / where
    data = json.loads(path.read_text()) if path.exists() else {}
    data["aci_test_score"] = score
    path.write_text(json.dumps(data, indent=2))
    return folder


def copy_model(src: Path, dst: Path, score: float | None = None) -> Path:
    shutil.copytree(src, dst)
    return plant(dst, score) if score is not None else dst


def ctx(workdir: Path) -> Context:
    return Context(workdir=workdir)


def init_run(workdir: Path, tiny_model: Path, *, base_score: float = 0.2, command: str | None = None,
             **card) -> Context:
    """A run card for a base model copied into `workdir/base` (scored `base_score` by the stand-in)."""
    copy_model(tiny_model, workdir / "base", base_score)
    c = ctx(workdir)
    registry.call("plan", {"action": "init", "base_model": "base", "benchmark": "toy",
                           "eval_command": command or eval_command(), **card}, c)
    return c


def register(workdir: Path, checkpoint: str, path: Path, parent: str | None = "base", adapter: bool = False) -> None:
    """What a training job's callback writes for each checkpoint it saves."""
    c = ctx(workdir)
    job, _, step = checkpoint.partition("/checkpoint-")
    entry = {"type": "registered", "checkpoint": checkpoint, "ts": iso(), "path": str(path), "parent": parent,
             "job": job, "step": int(step) if step else None, "adapter": adapter}
    with c.state.event("train", f"checkpoint {checkpoint} saved", tool="train") as w:
        w.append(records.CHECKPOINTS, entry)


def call(workdir: Path, **args):
    return registry.call("eval-checkpoint", args, ctx(workdir))


def entries(workdir: Path, kind: str = "evaluated") -> list[dict]:
    return [e for e in ctx(workdir).state.lines(records.CHECKPOINTS) if e["type"] == kind]


def make_lora(base: Path, out: Path, seed: int = 0) -> Path:
    """A real LoRA adapter on the tiny base, with non-zero weights so merging changes the model."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    peft = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                            init_lora_weights=False))
    peft.save_pretrained(out)
    return out


@pytest.fixture
def single_thread():
    """Tiny models run fastest on one thread, and a busy 2-core box makes torch's thread pool spin: these
    tests set one intra-op thread for their own duration and restore the setting after."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
