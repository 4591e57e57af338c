"""`aci demo`: the whole post-training loop on the embedded model and a toy benchmark, in minutes on a CPU.

It builds a PostTrainBench-shaped task folder (`aci.toybench`) and the embedded "demo" model, then acts
as the agent would: it starts `aci serve` over stdio and calls the tools with the MCP SDK's client, in
the order the workflow asks for: plan, benchmark card, baseline, data (histogram against the benchmark,
quotas, verify-task, contamination), train, evaluate checkpoints with trials, promote, finalize,
summary. Nothing here talks to the tools any other way, so the demo is also an end-to-end check of the
MCP surface. It ends with a table (base vs trained, with ranges; time per phase), `demo-summary.json`
and the run report (`report.html`) in the working directory.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import click

from aci import toybench
from aci.state import STATE_ENV

MARKER = ".aci-demo"
SUMMARY = "demo-summary.json"
V1_MIX = {"copy": 0.5, "reverse": 0.35, "swap": 0.15}  # the first synthetic set: structure off on purpose
NOISE = 0.02  # planted wrong answers, for verify-task to catch


@dataclass(frozen=True)
class Settings:
    """Sizes of one demo run; `quick` keeps every step but trains and evaluates less."""

    v1_rows: int
    steps: int
    save_steps: int
    eval_limit: int
    trials: int
    batch_size: int = 16
    learning_rate: float = 1e-3  # 2e-3 leaves the model on its plateau; 1e-3 learns in ~400 steps


FULL = Settings(v1_rows=3000, steps=1000, save_steps=500, eval_limit=100, trials=3)
QUICK = Settings(v1_rows=1500, steps=500, save_steps=500, eval_limit=64, trials=2)  # ~2500 rows after quotas


class DemoError(click.ClickException):
    """A step of the demo failed; the message says which and why."""


@dataclass
class Run:
    workdir: Path
    settings: Settings
    t0: float = field(default_factory=time.monotonic)
    phases: dict[str, float] = field(default_factory=dict)
    _phase: tuple[str, float] | None = None

    def say(self, step: str, text: str) -> None:
        click.echo(f"[{clock(time.monotonic() - self.t0)}] {step:<13} {text}")

    def phase(self, name: str) -> None:
        """Close the running phase (its wall time goes to the table) and open `name`."""
        t = time.monotonic()
        if self._phase:
            prev, since = self._phase
            self.phases[prev] = self.phases.get(prev, 0.0) + t - since
        self._phase = (name, t) if name else None


class Agent:
    """The MCP client side: one call per tool, structured results, errors as DemoError."""

    def __init__(self, client):
        self.client = client
        self.calls = 0

    async def __call__(self, tool: str, **args: Any) -> dict:
        self.calls += 1
        result = await self.client.call_tool(tool, {k: v for k, v in args.items() if v is not None})
        if result.is_error:
            text = " ".join(getattr(c, "text", "") for c in result.content)
            raise DemoError(f"{tool} failed: {text}")
        return result.structured_content or {}


def server_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != STATE_ENV}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               HF_HUB_DISABLE_PROGRESS_BARS="1", TRANSFORMERS_VERBOSITY="error")
    # One BLAS thread per process: on two cores shared with anything else, more threads spin against each
    # other and a training step gets several times slower (0.16 s vs 0.5-2.8 s measured here).
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def prepare_workdir(workdir: Path) -> None:
    """Create the demo folder; a previous demo's folder (it has the marker) is replaced, anything else kept."""
    if workdir.exists() and any(workdir.iterdir()):
        if not (workdir / MARKER).is_file():
            raise DemoError(f"{workdir} exists and is not an earlier demo's folder: pass a new --workdir")
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    (workdir / MARKER).write_text("made by `aci demo`; deleted and rebuilt by the next `aci demo` here\n")


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def fmt_range(entry: dict) -> str:
    lo, hi = entry.get("range") or (entry["score"], entry["score"])
    return f"{entry['score']:.3f} ({lo:.3f}..{hi:.3f})"


async def plan_and_card(agent: Agent, run: Run, bench: toybench.Bench) -> None:
    run.phase("plan")
    out = await agent("plan", action="init", base_model="base_model", benchmark=toybench.BENCHMARK,
                      eval_command=bench.eval_command, metric_key="accuracy", template="templates/qwen.jinja",
                      benchmark_size=bench.size, profile="posttrainbench",
                      targets=[{"metric": "accuracy", "value": 0.95}])
    run.say("plan", f"run card for {out['card']['base_model']} on {out['card']['benchmark']} (posttrainbench rules); "
                    f"deadline from {out['deadline_source']}, {out['run']['time_left']} left")
    await agent("log-state", action="append", kind="benchmark-card",
                message="lock-codes: 200 items; prompt = story + instruction (copy / reverse / swap the four-digit "
                        "code); graded by the last line 'ANSWER: <code>', exact match; template templates/qwen.jinja; "
                        "greedy decoding; --seed picks a random subset of --limit items",
                data={"subtypes": toybench.TEST_MIX, "answer_format": "ANSWER: <4 digits>"})
    run.say("recon", "benchmark card recorded (format, grader, sub-types)")


async def baseline(agent: Agent, run: Run) -> dict:
    run.phase("baseline")
    s = run.settings
    out = await agent("eval-checkpoint", action="evaluate", checkpoint="base", limit=s.eval_limit, trials=s.trials)
    base = out["result"]
    run.say("baseline", f"base model: {fmt_range(base)} on {base['samples']} samples x {len(base['scores'])} trials")
    return base


async def build_data(agent: Agent, run: Run, bench: toybench.Bench) -> Path:
    """Synthetic tasks -> histogram gate (with quotas) -> verify-task -> SFT samples -> contamination gate."""
    run.phase("data")
    s, wd = run.settings, run.workdir
    source = toybench.load_source(bench.train_source)
    custom = ["subtype=python:train_source.py:subtype"]
    out = await agent("histogram", action="compute", path="data/test.jsonl", role="reference", custom=custom)
    mix = ", ".join(f"{b} {100 * n / out['records']:.0f}%" for b, n in out["features"]["subtype"]["counts"].items())
    run.say("histogram", f"benchmark structure: {out['records']} items, sub-types {mix}")
    v1 = wd / "data" / "synth-v1.jsonl"
    write_jsonl(v1, source.generate(s.v1_rows, 1, V1_MIX, noise=NOISE, prefix="syn1"))
    out = await agent("histogram", action="compare", path=str(v1.relative_to(wd)), target="data/test.jsonl",
                      custom=custom)
    comp = out["comparison"]
    worst = max(comp["features"].items(), key=lambda kv: kv[1]["max_gap_pp"])
    run.say("histogram", f"{v1.name} ({out['records']} tasks) vs benchmark: FAILED at {comp['tolerance_pp']} pp "
                         f"({worst[0]} off by {worst[1]['max_gap_pp']:.0f} pp)" if not out["passed"] else
            f"{v1.name} passed already")
    rows = read_jsonl(v1)
    for i, q in enumerate(q for q in comp["quotas"] if q["feature"] == "subtype"):
        rows += source.generate(q["need"], 100 + i, {q["bin"]: 1.0}, noise=NOISE, prefix=f"syn2{i}")
        run.say("quota", f"add {q['need']} '{q['bin']}' tasks (had {q['have']}, target {q['target_pct']}%)")
    v2 = wd / "data" / "synth-v2.jsonl"
    write_jsonl(v2, rows)
    plots = "plots/histogram" if importlib.util.find_spec("matplotlib") else None
    out = await agent("histogram", action="compare", path=str(v2.relative_to(wd)), target="data/test.jsonl",
                      custom=custom, plot_dir=plots)
    if not out["passed"]:
        raise DemoError(f"the corrected set still fails the histogram gate: {out['comparison']['failed']}")
    tv = max(f["tv"] for f in out["comparison"]["features"].values())
    run.say("histogram", f"{v2.name} ({out['records']} tasks): PASSED, largest total-variation distance {tv:.3f}")

    out = await agent("verify-task", tasks=str(v2.relative_to(wd)), grader="python:train_source.py:check")
    reasons = ", ".join(f"{n} {r}" for r, n in out["reasons"].items()) or "none"
    run.say("verify-task", f"kept {out['kept']}/{out['candidates']}; rejected: {reasons}")

    sft = wd / "data" / "sft.jsonl"
    write_jsonl(sft, [{"messages": [{"role": "user", "content": t["question"]},
                                    {"role": "assistant", "content": f"ANSWER: {t['answer']}"}]}
                      for t in read_jsonl(Path(out["kept_file"]))])
    out = await agent("contamination", path=str(sft.relative_to(wd)), reference="data/test.jsonl")
    run.say("contamination", f"{out['verdict'].upper()}: {out['flagged']} of {out['rows']} rows flagged against "
                             f"{out['indexed']} indexed test items ({out['seconds']:.1f} s)")
    if out["verdict"] != "pass":
        clean = wd / "data" / "sft.clean.jsonl"
        out = await agent("contamination", path=str(sft.relative_to(wd)), reference="data/test.jsonl",
                          clean_output=str(clean.relative_to(wd)), record=False)
        out = await agent("contamination", path=str(clean.relative_to(wd)), reference="data/test.jsonl")
        run.say("contamination", f"clean copy: {out['verdict'].upper()} on {out['rows']} rows")
        if out["verdict"] != "pass":
            raise DemoError("the cleaned training set still fails the contamination gate")
        sft = clean
    return sft


async def train(agent: Agent, run: Run, sft: Path) -> list[str]:
    import anyio

    run.phase("train")
    s = run.settings
    out = await agent("train", action="start", data=str(sft.relative_to(run.workdir)), learning_rate=s.learning_rate,
                      batch_size=s.batch_size, grad_accum=1, max_steps=s.steps, save_steps=s.save_steps,
                      warmup_ratio=0.05, lr_schedule="linear", logging_steps=25, max_length=256,
                      note="first SFT run on the gated synthetic set")
    job = out["job"]["id"]
    checks = out.get("checks") or {}
    run.say("train", f"job {job}: SFT of base, {s.steps} steps x {s.batch_size} samples, lr {s.learning_rate}; "
                     f"{checks.get('mean_tokens')} tokens/sample, assistant share {checks.get('assistant_token_share')}")
    last_print = 0.0
    while True:
        await anyio.sleep(3)
        out = await agent("train", action="status", job=job)
        j = out["job"]
        p = j.get("progress") or {}
        if j["status"] != "running":
            break
        if time.monotonic() - last_print >= 20 and p.get("step"):
            last_print = time.monotonic()
            loss = f"loss {p['loss']:.3f}" if isinstance(p.get("loss"), (int, float)) else ""
            run.say("train", f"step {p['step']}/{p.get('total_steps')} {loss} "
                             f"{p.get('tokens_per_s', '-')} tokens/s, eta {p.get('eta_s', '-')} s")
    if j["status"] != "succeeded":
        raise DemoError(f"training job {job} {j['status']}: {j.get('reason')}\n{j.get('log_tail') or ''}")
    loss = p.get("loss")
    run.say("train", f"job {job} succeeded: final loss {loss:.3f}; checkpoints "
                     + ", ".join(c["checkpoint"].split("/")[-1] for c in out["checkpoints"]))
    return [c["checkpoint"] for c in out["checkpoints"]]


async def evaluate(agent: Agent, run: Run, checkpoints: list[str]) -> list[dict]:
    run.phase("evaluate")
    s = run.settings
    results = []
    for ck in checkpoints:
        out = await agent("eval-checkpoint", action="evaluate", checkpoint=ck, limit=s.eval_limit, trials=s.trials,
                          promote=True)
        r = out["result"]
        results.append(r)
        c, p = out.get("comparison"), out.get("promotion") or {}
        verdict = (f"{'beats' if c['beats'] else 'does not beat'} {c['b']} ({c['method']})" if c else "")
        run.say("eval", f"{ck}: {fmt_range(r)}; {verdict}; " + ("promoted to final_model" if p.get("promoted")
                                                                  else "not promoted"))
    return results


async def finish(agent: Agent, run: Run) -> dict:
    run.phase("finalize")
    out = await agent("finalize")
    failed = [i["name"] for i in out["items"] if not i["passed"]]
    run.say("finalize", f"final_model ({out.get('checkpoint')}): " + ("PASSED all " + str(len(out["items"])) +
                                                                   " checks" if out["passed"] else f"FAILED {failed}"))
    if not out["passed"]:
        raise DemoError(f"finalize failed: {failed}")
    best = out["run"]["best"]
    await agent("log-state", action="append", kind="result",
                message=f"demo finished: final_model is {best['checkpoint']} at {best['score']:.3f}",
                data={"best": best})
    summary = (await agent("log-state", action="summary", last=5))["state"]
    run.say("summary", f"phase {summary['current_phase'] or 'none (every gate passed)'}, {summary['time_left']} left; next: "
                       f"{(summary['next_actions'] or ['-'])[0]}")
    return summary


async def drive(run: Run, bench: toybench.Bench) -> dict:
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=["-m", "aci.cli", "serve"], cwd=str(run.workdir),
                                   env=server_env())
    error: DemoError | None = None
    async with Client(params) as client:
        try:
            return await loop(Agent(client), run, bench)
        except DemoError as e:  # raised outside the client's task group, so it is not wrapped in a group
            error = e
    raise error


async def loop(agent: Agent, run: Run, bench: toybench.Bench) -> dict:
    tools = (await agent.client.list_tools()).tools
    run.say("mcp", f"aci serve over stdio: {len(tools)} tools")
    await plan_and_card(agent, run, bench)
    base = await baseline(agent, run)
    sft = await build_data(agent, run, bench)
    checkpoints = await train(agent, run, sft)
    results = await evaluate(agent, run, checkpoints)
    summary = await finish(agent, run)
    run.phase("")
    return {"base": base, "checkpoints": results, "best": summary["best"], "calls": agent.calls}


def clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 60:2d}:{s % 60:02d}"


def table(run: Run, outcome: dict) -> list[str]:
    best = outcome["best"]
    rows = [("base", outcome["base"])] + [(r["checkpoint"], r) for r in outcome["checkpoints"]]
    width = max(len(n) for n, _ in rows)
    lines = [f"{'model':<{width}}  score  range          samples x trials", "-" * (width + 40)]
    for name, r in rows:
        lo, hi = r["range"]
        mark = "  <- final_model" if name == best["checkpoint"] else ""
        lines.append(f"{name:<{width}}  {r['score']:.3f}  {lo:.3f}..{hi:.3f}   {r['samples']} x {len(r['scores'])}{mark}")
    lines += ["", "phase          wall time"]
    lines += [f"{name:<14} {clock(sec)}" for name, sec in run.phases.items()]
    lines.append(f"{'total':<14} {clock(sum(run.phases.values()))}")
    return lines


def verdict(outcome: dict) -> dict:
    base, best = outcome["base"], outcome["best"]
    trained = next(r for r in outcome["checkpoints"] if r["checkpoint"] == best["checkpoint"]) \
        if best["checkpoint"] != "base" else base
    return {"base": {"score": base["score"], "range": base["range"]},
            "trained": {"checkpoint": best["checkpoint"], "score": trained["score"], "range": trained["range"]},
            "above": trained["range"][0] > base["range"][1]}


def demo(workdir: Path, quick: bool) -> dict:
    import anyio

    os.environ.update({k: v for k, v in server_env().items() if k.startswith(("HF_", "TRANSFORMERS_"))})
    run = Run(workdir=workdir, settings=QUICK if quick else FULL)
    run.phase("build")
    prepare_workdir(workdir)
    bench = toybench.build(workdir, python=sys.executable)
    run.say("build", f"task folder {workdir}: {bench.size} test items, evaluate.py, templates/, timer.sh, "
                     f"train_source.py; embedded model in base_model/")
    outcome = anyio.run(drive, run, bench)
    run.phase("report")
    from aci.report import write

    page = write(workdir / "state", workdir / "report")
    run.say("report", f"{page}")
    run.phase("")
    result = verdict(outcome)
    click.echo("")
    for line in table(run, outcome):
        click.echo(line)
    summary = {**result, "quick": quick, "settings": asdict(run.settings), "workdir": str(workdir),
               "phases_s": {k: round(v, 1) for k, v in run.phases.items()},
               "total_s": round(time.monotonic() - run.t0, 1), "mcp_calls": outcome["calls"],
               "checkpoints": [{k: r.get(k) for k in ("checkpoint", "score", "range", "samples", "scores")}
                               for r in [outcome["base"], *outcome["checkpoints"]]]}
    summary["report"] = str(page)
    (workdir / SUMMARY).write_text(json.dumps(summary, indent=2) + "\n")
    return summary


@click.command()
@click.option("--workdir", "workdir", type=click.Path(file_okay=False), default="aci-demo", show_default=True,
              help="folder for the toy task, the state and the models (an earlier demo's folder is replaced)")
@click.option("--quick", is_flag=True, help="shorter training and evaluation (~3 min): the same loop, smaller")
def command(workdir: str, quick: bool) -> None:
    """Run the whole post-training loop on an embedded model and a toy benchmark, through the MCP server."""
    summary = demo(Path(workdir).resolve(), quick)
    b, t = summary["base"], summary["trained"]
    click.echo(f"\nbase {b['score']:.3f} -> trained {t['score']:.3f} ({t['checkpoint']}) in "
               f"{summary['total_s'] / 60:.1f} min; summary in {Path(workdir) / SUMMARY}")
    if not summary["above"]:
        raise DemoError("the trained model's range does not lie above the base model's")
