"""Overhead of `aci train` against a plain TRL script doing the same SFT run, in the same session.

Both sides train the embedded "demo" model on the same samples with the same settings (steps, batch,
max length, learning rate and schedule, checkpoints, CPU fp32), rendered with the same ChatML template.
The settings are `CHOSEN` here and `aci train`'s own defaults for the rest (`aci.training.request`),
which the plain side reads from the same request model, so the two cannot drift apart:

* aci: `aci train start` as a fresh CLI process (imports, gates, one git commit, job launch) until the
  job's `exit.json` exists (checkpoints registered in state, progress written); the
  next run (and the temporary folder's removal) then waits for the supervisor's last commit, which
  follows `exit.json` (removing the folder under it crashed with `Directory not empty: 'objects'`);
* plain: `python <this file> --plain` running `SFTTrainer(assistant_only_loss=True)` with the template's
  generation markers, the way a hand-written script would, from process start to exit.

The two alternate `--repeat` times (at least 5) and the median of each side counts (a best-of-3 hid the
spread: 0.98 to 1.20 on one afternoon); each pair's ratio is printed too. The last line printed is
`ratio=X` (median aci / median plain; target <= 1.10).

Either way one untimed `train dry-run` of the same request comes first, as the train skill has it: it
renders and tokenizes the data, and `start` reuses that check (`aci.training.datacheck`) instead of
importing transformers again. `--cold` skips it, so each start checks the data itself. `--via mcp`
starts `train` through one running `aci serve` instead (how an agent calls it); it times wall only (the
server's CPU is not this process's child until it exits).

    .venv/bin/python bench/train_overhead.py [--steps 400] [--repeat 5] [--metric wall|cpu] [--via cli|mcp] [--cold]

`aci train` adds a fixed cost (the CLI's start, gates and one git commit; the job supervisor; an event
per checkpoint), so the ratio falls as the run grows; `overhead_s` prints it (negative where aci ends
first: its job exits without the interpreter's teardown, which the plain script pays, about 2 s with
torch, transformers and TRL imported).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aci import jobfiles
from aci.processes import alive  # a zombie is not alive: through MCP the supervisor is the server's child
from aci.state import STATE_ENV
from aci.training.request import TrainRequest

ROOT = Path(__file__).resolve().parent.parent
ACI = [sys.executable, "-m", "aci.cli"]


# What this bench chooses; every other setting is `aci train`'s default on both sides. cosine: a fixed-step
# schedule plain TRL has (aci's default with a deadline, wsd, is aci's own).
CHOSEN = {"max_length": 128, "batch_size": 4, "grad_accum": 1, "learning_rate": 1e-4, "lr_schedule": "cosine"}


def settings(steps: int) -> dict:
    """The settings both sides pass: the chosen ones, the run's length, and the request's defaults for the rest."""
    req = TrainRequest(**CHOSEN, max_steps=steps, save_steps=max(1, steps // 2))
    return {**CHOSEN, "max_steps": steps, "save_steps": req.save_steps, "warmup_ratio": req.warmup_ratio,
            "logging_steps": req.logging_steps, "seed": req.seed}


def samples(n: int = 256) -> list[dict]:
    return [{"messages": [{"role": "user", "content": f"What is {i} plus {i + 7}? Answer with the sum."},
                          {"role": "assistant", "content": f"{i} plus {i + 7} is {2 * i + 7}.\nANSWER: {2 * i + 7}"}]}
            for i in range(n)]


def plain(model: str, data: str, out: str, steps: int) -> None:
    """The baseline: TRL's own conversational pipeline with assistant-only loss."""
    from datasets import load_dataset
    from trl import SFTConfig, SFTTrainer

    s = settings(steps)
    ds = load_dataset("json", data_files=data, split="train")
    fields = {f.name for f in dataclasses.fields(SFTConfig)}  # transformers 5 folds warmup_ratio into warmup_steps
    warmup = {"warmup_ratio" if "warmup_ratio" in fields else "warmup_steps": s["warmup_ratio"]}
    args = SFTConfig(
        output_dir=out, max_length=s["max_length"], per_device_train_batch_size=s["batch_size"],
        gradient_accumulation_steps=s["grad_accum"], max_steps=steps, learning_rate=s["learning_rate"],
        lr_scheduler_type=s["lr_schedule"], save_steps=s["save_steps"], save_only_model=True,
        logging_steps=s["logging_steps"], seed=s["seed"], report_to="none", use_cpu=True, bf16=False,
        gradient_checkpointing=False,  # TRL's default is on; `aci train` turns it on only with CUDA
        assistant_only_loss=True, disable_tqdm=True, **warmup,
    )
    SFTTrainer(model=model, args=args, train_dataset=ds).train()


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def cli_args(steps: int) -> list[str]:
    return [f"--{k.replace('_', '-')}={v}" for k, v in settings(steps).items()]


def run_aci(work: Path, steps: int) -> tuple[float, float]:
    """Wall and CPU seconds: the CLI process, then the detached job (its supervisor reports its CPU)."""
    args = cli_args(steps)
    t0, c0 = time.perf_counter(), children_cpu()
    out = subprocess.run([*ACI, "--json", "train", "start", "--data", "data.jsonl", *args, "--concurrent"],
                         cwd=work, capture_output=True, text=True, check=True)
    cli_cpu = children_cpu() - c0
    return _until_job_ends(work, json.loads(out.stdout)["job"]["id"], t0, cli_cpu)


def _until_job_ends(work: Path, job: str, t0: float, cli_cpu: float) -> tuple[float, float]:
    exit_file = work / "state" / "jobs" / job / jobfiles.EXIT
    while not exit_file.exists():
        time.sleep(0.02)
    wall = time.perf_counter() - t0
    supervisor = json.loads((exit_file.parent / jobfiles.JOB).read_text())["supervisor_pid"]
    while alive(supervisor):  # it commits the job's end after exit.json: nothing writes to state after this
        time.sleep(0.02)
    ex = json.loads(exit_file.read_text())
    if ex["status"] != "succeeded":
        raise SystemExit(f"aci job {job} {ex['status']}: see {exit_file.parent / 'log'}")
    return wall, cli_cpu + ex["cpu_s"]


async def series_via_mcp(work: Path, steps: int, repeat: int, cold: bool) -> tuple[list, list]:
    """The runs with `train start` called through one `aci serve` (stdio, the SDK's client)."""
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=["-m", "aci.cli", "serve"], cwd=str(work),
                                   env=dict(os.environ))
    async with Client(params) as client:
        async def train(args: dict) -> dict:
            r = await client.call_tool("train", {"data": "data.jsonl", **settings(steps), **args})
            if r.is_error:
                raise SystemExit(f"train {args['action']} through MCP failed: {r.content}")
            return r.structured_content

        if not cold:
            await train({"action": "dry-run"})
        aci, base = [], []
        for k in range(repeat):
            base.append(run_plain(work, steps, k))
            t0 = time.perf_counter()
            job = (await train({"action": "start", "concurrent": True}))["job"]["id"]
            aci.append(_until_job_ends(work, job, t0, 0.0))  # CPU: the job's alone
            say(k, aci, base)
    return aci, base


@contextlib.contextmanager
def demo_run():
    """A temporary working directory with the demo model, the samples and a run card (default rules),
    offline; removed afterwards."""
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    os.environ.pop(STATE_ENV, None)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        from aci.embedded import build_model

        build_model(work / "model", "demo")
        (work / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in samples()))
        subprocess.run([*ACI, "plan", "init", "--base-model", str(work / "model"), "--benchmark", "bench",
                        "--profile", "default"], cwd=work, check=True, capture_output=True)
        yield work


def run_plain(work: Path, steps: int, k: int) -> tuple[float, float]:
    t0, c0 = time.perf_counter(), children_cpu()
    subprocess.run([sys.executable, __file__, "--plain", str(work / "model"), str(work / "data.jsonl"),
                    str(work / f"plain-{k}"), str(steps)], check=True, capture_output=True)
    return time.perf_counter() - t0, children_cpu() - c0


def say(k: int, aci: list, base: list) -> None:
    print(f"run {k + 1}: aci {aci[-1][0]:.2f} s wall {aci[-1][1]:.2f} s CPU, "
          f"plain TRL {base[-1][0]:.2f} s wall {base[-1][1]:.2f} s CPU", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=400, help="~30 s of plain TRL on an idle 2-core machine")
    ap.add_argument("--repeat", type=int, default=5, help="runs per side (at least 5: the median counts)")
    ap.add_argument("--metric", choices=["wall", "cpu"], default="wall",
                    help="what ratio= reports; cpu is steadier on a machine shared with other work")
    ap.add_argument("--via", choices=["cli", "mcp"], default="cli", help="how `train start` is called")
    ap.add_argument("--cold", action="store_true", help="no dry-run first: every start checks the data itself")
    a = ap.parse_args()
    if a.via == "mcp" and a.metric == "cpu":
        ap.error("--via mcp measures wall time only")
    if a.repeat < 5:
        ap.error("--repeat: at least 5 runs per side, so the median means something")
    with demo_run() as work:
        if a.via == "mcp":
            aci, base = asyncio.run(series_via_mcp(work, a.steps, a.repeat, a.cold))
        else:
            if not a.cold:
                subprocess.run([*ACI, "train", "dry-run", "--data", "data.jsonl", *cli_args(a.steps)], cwd=work,
                               check=True, capture_output=True)
            aci, base = [], []
            for k in range(a.repeat):
                base.append(run_plain(work, a.steps, k))
                aci.append(run_aci(work, a.steps))
                say(k, aci, base)
    med = {side: (statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs))
           for side, runs in (("aci", aci), ("plain", base))}
    wall, cpu = med["aci"][0] / med["plain"][0], med["aci"][1] / med["plain"][1]
    pairs = ", ".join(f"{x[0] / y[0]:.2f}" for x, y in zip(aci, base, strict=True))
    print(f"median of {a.repeat}: aci {med['aci'][0]:.2f} s wall {med['aci'][1]:.2f} s CPU; plain TRL "
          f"{med['plain'][0]:.2f} s wall {med['plain'][1]:.2f} s CPU ({a.steps} steps, demo model, "
          f"{'no dry-run first' if a.cold else 'after a dry-run'}); wall ratio of each pair: {pairs}")
    cpu_note = f" cpu_ratio={cpu:.3f}" if a.via == "cli" else " (the job's CPU alone: no cpu_ratio)"
    print(f"overhead_s={med['aci'][0] - med['plain'][0]:.2f} wall_ratio={wall:.3f}{cpu_note}")
    print(f"ratio={wall if a.metric == 'wall' else cpu:.3f}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--plain"]:
        plain(*sys.argv[2:5], int(sys.argv[5]))
    else:
        main()
