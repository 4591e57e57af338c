"""One rollout run from a config: checks, policy, tools, the loop, then metrics, export and a journal event.

The same `execute()` runs inline (from the tool) and inside a job (`python -m aci.rollout CONFIG`),
so a background run is checked exactly like an inline one. The config is saved as `config.json` in the
output folder with a fingerprint of what makes trajectories comparable (policy, settings, system
prompt, tools); a re-run into the same folder must match it, then it resumes where the last one stopped.
Metrics and exports are recomputed from the trial files at the end of every run.
"""

from __future__ import annotations

import asyncio
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from aci import jobfiles, jobs
from aci.context import Context
from aci.errors import ACIError
from aci.rollout import export as export_mod
from aci.rollout import integrity, metrics
from aci.rollout.config import CONFIG, RolloutConfig
from aci.rollout.loop import Limits, Rollout, RunCounts, read_traces, run
from aci.state import atomic_write_json, read_json

METRICS = "metrics.json"


class RunReport(BaseModel):
    out: str
    counts: dict[str, Any]
    policy: dict[str, Any]
    policy_checkpoint: str | None = Field(None, description="the checkpoint id the policy resolved to (strict rules)")
    tools: dict[str, Any] | None = None
    metrics: metrics.RunMetrics
    export: export_mod.ExportCounts
    sandbox: str | None = Field(None, description="where graded code ran (unit-tests), and what that sandbox lacks")


def load_task_list(cfg: RolloutConfig) -> list[dict]:
    from aci.tasks import load_tasks

    tasks = []
    for t in load_tasks(cfg.tasks):
        if cfg.limit is not None and len(tasks) >= cfg.limit:
            break
        tasks.append(t)
    if not tasks:
        raise ACIError(f"{cfg.tasks} holds no tasks")
    return tasks


async def _endpoint_policy(ctx: Context, cfg: RolloutConfig):
    from aci.rollout.endpoint import EndpointPolicy

    integrity.check_endpoint(ctx, cfg.endpoint)  # before anything connects
    policy = EndpointPolicy(cfg.endpoint, cfg.model or "", timeout_s=cfg.request_timeout_s, retries=cfg.retries,
                            concurrency=cfg.concurrency)
    try:
        served = await policy.served_models()
        if not cfg.model:
            if len(served) != 1:
                names = ", ".join(str(m.get("id")) for m in served) or "none listed"
                raise ACIError(f"give --model: the endpoint serves {names}")
            policy.model = str(served[0]["id"])
        names = [policy.model]
        entry = next((m for m in served if m.get("id") == policy.model), None)
        if entry and entry.get("root") and entry["root"] != policy.model:
            names.append(str(entry["root"]))
        checkpoint = integrity.check_policy(ctx, names)
    except BaseException:
        await policy.aclose()
        raise
    return policy, checkpoint


def _policy_sync(ctx: Context, cfg: RolloutConfig):
    from aci.rollout.hf_policy import HFPolicy

    path = ctx.path(cfg.hf_model, must_exist=True, what="hf model")
    checkpoint = integrity.check_policy(ctx, [str(path)])
    return HFPolicy(path), checkpoint


def tool_source(ctx: Context, cfg: RolloutConfig):
    from aci.rollout.envs import MCPTools, PythonTools

    if cfg.tools and cfg.mcp_command:
        raise ACIError("give --tools (a Python module) or --mcp-command (an MCP server), not both")
    if cfg.tools:
        spec = cfg.tools
        if spec.endswith(".py") or "/" in spec:
            spec = str(ctx.path(spec, must_exist=True, what="tool module"))
        return PythonTools(spec, ctx.workdir)
    if cfg.mcp_command:
        return MCPTools(cfg.mcp_command, ctx.workdir, fresh=cfg.mcp_fresh)
    return None


def check_policy_choice(cfg: RolloutConfig) -> None:
    chosen = [n for n in ("endpoint", "hf_model", "serve_model") if getattr(cfg, n)]
    if len(chosen) != 1:
        raise ACIError("choose exactly one policy: --endpoint URL (with --model), --hf-model PATH, or "
                       "--serve-model PATH (starts vllm serve on 127.0.0.1)")


def _check_resume(cfg: RolloutConfig, fingerprint: dict) -> None:
    saved = read_json(cfg.out_dir / CONFIG)
    if saved and saved.get("fingerprint") and saved["fingerprint"] != fingerprint:
        diff = sorted(k for k in fingerprint if saved["fingerprint"].get(k) != fingerprint[k])
        raise ACIError(f"{cfg.out} holds trajectories rolled with a different {', '.join(diff)}; resuming would mix "
                       f"them: choose another --out")


def _grader(ctx: Context, cfg: RolloutConfig):
    from aci.graders import grade

    def score(task: dict, response: str, tool_calls: list[dict]):
        return grade(task, response, tool_calls, default=cfg.grader, workdir=ctx.workdir,
                     check_host=lambda h: ctx.rules.check_host(h, judge=True), unsafe_grader=cfg.unsafe_grader)

    return score


def summarise(cfg: RolloutConfig) -> tuple[metrics.RunMetrics, export_mod.ExportCounts]:
    """Metrics and exports from what the trial files hold now."""
    traces = read_traces(cfg.out_dir, cfg.trials)
    m = metrics.compute(traces)
    atomic_write_json(cfg.out_dir / METRICS, m.model_dump(mode="json"))
    threshold = cfg.min_reward if cfg.min_reward is not None else cfg.success_threshold
    return m, export_mod.export(traces, cfg.out_dir, threshold, max_per_task=cfg.max_per_task,
                                tasks=load_task_list(cfg) if Path(cfg.tasks).is_file() else None)


async def _prepare(ctx: Context, cfg: RolloutConfig):
    """Every check a run needs, in order, before any trajectory: host, policy lineage, tools, tasks, the sandbox
    of graded code (rule sandbox), resume."""
    from aci.graders import code_sandbox
    from aci.graders.sandbox import record

    if cfg.endpoint:
        policy, checkpoint = await _endpoint_policy(ctx, cfg)
    else:
        policy, checkpoint = _policy_sync(ctx, cfg)
    try:
        tools = tool_source(ctx, cfg)
        tasks = load_task_list(cfg)
        box = code_sandbox((t.get("grader") or cfg.grader for t in tasks), unsafe_grader=cfg.unsafe_grader)
        fingerprint = cfg.fingerprint(policy.describe(), tools.describe() if tools else None)
        _check_resume(cfg, fingerprint)
    except BaseException:
        await policy.aclose()
        raise
    return policy, checkpoint, tools, tasks, fingerprint, record(ctx, box, "run-trajectory") if box else None


def check(ctx: Context, cfg: RolloutConfig) -> None:
    """Run the checks only (the tool calls this before starting a background job, so refusals come back now)."""
    check_policy_choice(cfg)
    if cfg.serve_model:
        from aci.rollout import serve

        integrity.check_policy(ctx, [cfg.serve_model])
        serve.vllm_executable()
        return

    async def go() -> None:
        policy, *_ = await _prepare(ctx, cfg)
        await policy.aclose()

    asyncio.run(go())


async def _execute(ctx: Context, cfg: RolloutConfig, progress) -> RunReport:
    policy, checkpoint, tools, tasks, fingerprint, sandbox = await _prepare(ctx, cfg)
    try:
        cfg.out_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_json(cfg.out_dir / CONFIG, {**cfg.model_dump(mode="json"), "fingerprint": fingerprint,
                                                 "policy": policy.describe(), "policy_checkpoint": checkpoint,
                                                 "trial_settings": {k: cfg.settings.for_trial(k).model_dump(mode="json")
                                                                    for k in range(1, cfg.trials + 1)}})
        work_left = ctx.clock.left_for_work
        rollout = Rollout(
            tasks=tasks, policy=policy, out=cfg.out_dir, tools=tools, trials=cfg.trials, concurrency=cfg.concurrency,
            limits=Limits(cfg.max_turns, cfg.max_tool_calls, cfg.time_limit_s, cfg.tool_timeout_s),
            settings=cfg.settings, system_prompt=cfg.system_prompt, success_threshold=cfg.success_threshold,
            grade=_grader(ctx, cfg), default_grader=cfg.grader, progress=progress,
            should_stop=lambda: (w := work_left()) is not None and w.total_seconds() <= 0,
        )
        counts: RunCounts = await run(rollout)
    finally:
        await policy.aclose()
    m, exported = summarise(cfg)
    return RunReport(out=cfg.out, counts=vars(counts), policy=policy.describe(), policy_checkpoint=checkpoint,
                     tools=tools.describe() if tools else None, metrics=m, export=exported, sandbox=sandbox)


def execute(ctx: Context, cfg: RolloutConfig, progress=None) -> RunReport:
    """Run (or resume) the rollout described by `cfg`; starts and stops vLLM when `serve_model` is set."""
    check_policy_choice(cfg)
    with ExitStack() as stack:
        if cfg.serve_model:
            from aci.rollout import serve

            integrity.check_policy(ctx, [cfg.serve_model])
            url = stack.enter_context(serve.serving(ctx, cfg.serve_model, cfg.serve_port, cfg.serve_args,
                                                    cfg.serve_wait_s))
            cfg = cfg.model_copy(update={"endpoint": url, "model": cfg.model or cfg.serve_model})
        report = asyncio.run(_execute(ctx, cfg, progress))
    f = report.metrics.pooled
    with ctx.state.event("rollout", f"rolled {report.counts['ran']} task trajectories into {cfg.out}: success "
                         f"{f.task_success_rate.value}, kept {report.export.kept}", tool="run-trajectory",
                         data={"out": cfg.out, "success_rate": f.task_success_rate.value,
                               "consistency": report.metrics.consistency.spread, "kept": report.export.kept}):
        pass
    return report


def start_job(ctx: Context, cfg: RolloutConfig):
    """Check now (so refusals come back to the caller), then run as a job: `python -m aci.rollout CONFIG`."""
    check(ctx, cfg)
    job_id = jobs.new_id("rollout")
    config_path = jobs.job_dir(ctx.state, job_id) / jobfiles.CONFIG
    return jobs.start(ctx.state, "rollout", [sys.executable, "-m", "aci.rollout", str(config_path)],
                      cfg.model_dump(mode="json"), cwd=ctx.workdir, job_id=job_id,
                      message=f"rollout of {cfg.tasks} x {cfg.trials} into {cfg.out}")


def throttled_progress(min_interval_s: float = 1.0):
    """A progress callback for jobs: `progress.json` at most once a second, and always the last one."""
    last = [0.0]

    def report(fields: dict) -> None:
        now = time.monotonic()
        if now - last[0] >= min_interval_s or fields.get("done") == fields.get("total"):
            last[0] = now
            jobs.write_progress(fields)

    return report
