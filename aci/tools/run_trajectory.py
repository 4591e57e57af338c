"""`run-trajectory`: roll a policy over tasks with tools, grade, measure, export SFT data."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from aci import jobs
from aci.context import Context
from aci.errors import ACIError
from aci.registry import ToolInput, ToolOutput, tool
from aci.rollout.config import RolloutRequest, config, saved

AUTO_BACKGROUND = 32  # task trajectories above which a run goes to a job unless told otherwise


class RunTrajectoryInput(ToolInput, RolloutRequest):
    action: Literal["run", "status", "export", "serve", "stop"] = Field(
        "run", description="run (or resume) a rollout; status of an output folder or job; export again with "
                           "another --min-reward; serve a model with vLLM on 127.0.0.1; stop a job")
    background: bool | None = Field(None, description=f"run as a job (default: when over {AUTO_BACKGROUND} "
                                                      f"trajectories)")
    job: str | None = Field(None, description="job id (status, stop)")


class RunTrajectoryOutput(ToolOutput):
    action: str
    out: str | None = None
    job: dict[str, Any] | None = None
    base_url: str | None = None
    counts: dict[str, Any] | None = None
    policy: dict[str, Any] | None = None
    policy_checkpoint: str | None = None
    metrics: dict[str, Any] | None = None
    export: dict[str, Any] | None = None
    sandbox: str | None = Field(None, description="where graded code ran (unit-tests), and what that sandbox lacks")
    next: list[str] = Field(default_factory=list)

    def summary(self) -> str:
        lines = [f"{self.action}: {self.out or self.base_url or ''}".rstrip()]
        if self.job:
            lines.append(f"job {self.job['id']} {self.job['status']} {self.job.get('progress') or ''}".rstrip())
        c = self.counts or {}
        if "ran" in c:
            lines.append(f"ran {c['ran']} trajectories ({c['skipped_done']} already done, "
                         f"{c['not_started']} not started) in {c['wall_s']} s")
        elif "done" in c:
            lines.append(f"{c['done']} trajectories written so far")
        if self.metrics:
            lines += _metric_lines(self.metrics)
        if self.export:
            e = self.export
            capped = f" ({e['capped']} over --max-per-task {e['max_per_task']} left out)" if e.get("capped") else ""
            lines.append(f"export (reward >= {e['min_reward']}): {e['kept']} kept{capped} -> {e['kept_file']}, "
                         f"{e['failed']} failed -> {e['failed_file']}")
            if e.get("unsolved_file"):
                lines.append(f"{e['unsolved']} tasks without a kept sample -> {e['unsolved_file']} (roll them again)")
        if self.sandbox:
            lines.append(self.sandbox)
        lines += [f"next: {n}" for n in self.next]
        return "\n".join(lines)


def _fmt(fig: dict) -> str:
    v = fig["value"]
    return "n/a" if v is None else f"{v:.3f} ({fig['numerator']:g}/{fig['denominator']:g}, {fig['level']})"


def _metric_lines(m: dict) -> list[str]:
    lines = []
    for t in m["trials"]:
        f = t["figures"]
        lines.append(f"trial {t['trial']}: success {_fmt(f['task_success_rate'])}  precision "
                     f"{_fmt(f['tool_call_precision'])}  args {_fmt(f['argument_accuracy'])}")
    p, c = m["pooled"], m["consistency"]
    lines.append(f"over trials: success mean {_fmt(m['success_rate_mean'])}, range {c['min']}-{c['max']} "
                 f"(spread {c['spread']}, trial level)")
    for name in ("tool_call_precision", "argument_accuracy", "steps_per_success", "tokens_per_success",
                 "seconds_per_success", "errors_ignored"):
        lines.append(f"  {name.replace('_', ' ')}: {_fmt(p[name])}")
    return lines


def _run(inp: RunTrajectoryInput, ctx: Context) -> RunTrajectoryOutput:
    from aci.rollout import runner

    cfg = config(inp, ctx)
    runner.check_policy_choice(cfg)
    background = inp.background if inp.background is not None else cfg.trajectories() > AUTO_BACKGROUND
    if background:
        view = runner.start_job(ctx, cfg)
        return RunTrajectoryOutput(action="run", out=cfg.out, job=view.model_dump(mode="json"),
                                   next=[f"run-trajectory status --job {view.id} --out {cfg.out}"])
    report = runner.execute(ctx, cfg)
    return RunTrajectoryOutput(
        action="run", out=report.out, counts=report.counts, policy=report.policy,
        policy_checkpoint=report.policy_checkpoint, metrics=report.metrics.model_dump(mode="json"),
        export=report.export.model_dump(mode="json"), sandbox=report.sandbox,
        next=[f"train on {report.export.kept_file} (SFT) once it holds enough samples"] if report.export.kept else [],
    )


@tool("run-trajectory", title="Roll out, grade and export trajectories", open_world=True)
def run_trajectory(inp: RunTrajectoryInput, ctx: Context) -> RunTrajectoryOutput:
    """Roll a policy over tasks with tools, grade every task, measure, and export training data.

    Policy: --endpoint (OpenAI-compatible, e.g. a local vLLM; --model names the model), --hf-model PATH
    (transformers, slow), or --serve-model PATH (starts `vllm serve` on 127.0.0.1 and stops it after).
    Tools: --tools (Python module: typed, documented functions, or make_env() returning a fresh object
    per trajectory, or explicit TOOLS schemas) or --mcp-command (an MCP server over stdio). Tasks with
    their own `tools` are offered those, byte for byte. Limits per task: --max-turns, --max-tool-calls,
    --time-limit-s; --concurrency tasks at once; --trials k passes.

    Writes <out>/trial-<k>.jsonl (one line per task: every turn's exact request, reply, tool calls and
    outputs, step marks, grade), metrics.json (task success rate, consistency as the range over trials,
    tool-call precision, argument accuracy, steps and cost per success; each names its level),
    sft.jsonl (trajectories scoring >= --min-reward, tools and system prompt as sent) and failed.jsonl.
    Re-running into the same --out resumes: done tasks are skipped. Over 32 trajectories it runs as a
    job (status with action=status). Under the posttrainbench rules the endpoint must be on loopback
    (no-hosted-llm) and the policy must be the base model or its own checkpoints (no-teacher-distillation).
    """
    from aci.rollout import runner, serve

    if inp.action == "run":
        return _run(inp, ctx)
    if inp.action == "stop":
        if not inp.job:
            raise ACIError("stop needs --job ID")
        return RunTrajectoryOutput(action="stop", job=jobs.stop(ctx.state, inp.job).model_dump(mode="json"))
    if inp.action == "serve":
        if not inp.serve_model:
            raise ACIError("serve needs --serve-model PATH")
        from aci.rollout import integrity

        integrity.check_policy(ctx, [inp.serve_model])
        view, url = serve.start(ctx, inp.serve_model, inp.serve_port, inp.serve_args, inp.serve_wait_s)
        return RunTrajectoryOutput(action="serve", base_url=url, job=view.model_dump(mode="json"),
                                   next=[f"run-trajectory run --endpoint {url} --tasks ...",
                                         f"run-trajectory stop --job {view.id} when done"])
    job = jobs.view(ctx.state, inp.job).model_dump(mode="json") if inp.job else None
    if inp.action == "status" and not inp.out:
        if job is None:
            raise ACIError("status needs --out (an output folder) or --job ID")
        return RunTrajectoryOutput(action="status", job=job)
    cfg = saved(ctx, inp.out, inp.action)
    if inp.action == "export":
        cfg = cfg.model_copy(update={"min_reward": inp.min_reward, "max_per_task": inp.max_per_task})
        m, exported = runner.summarise(cfg)
        return RunTrajectoryOutput(action="export", out=cfg.out, job=job, metrics=m.model_dump(mode="json"),
                                   export=exported.model_dump(mode="json"))
    from aci.rollout import metrics
    from aci.rollout.loop import read_traces

    m = metrics.compute(read_traces(cfg.out_dir, cfg.trials))
    done = sum(t.counts.tasks for t in m.trials)
    return RunTrajectoryOutput(action="status", out=cfg.out, job=job, metrics=m.model_dump(mode="json"),
                               counts={"done": done})
