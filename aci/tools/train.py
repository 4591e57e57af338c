"""`train`: start, watch, stop and list TRL training jobs (SFT full or LoRA, GRPO with grader rewards).

An adapter: the options are `aci.training.request.TrainRequest`; every start goes through the same
checks as `dry-run` (`aci.training.prepare`). The job itself is a supervised process (`aci.jobs`) that
registers each checkpoint in state as soon as it is saved and stops by itself at the final reserve.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from aci import jobfiles, jobs
from aci.context import Context
from aci.errors import ACIError
from aci.jobs import JobView
from aci.registry import ToolInput, ToolOutput, tool
from aci.training import cooldown, prepare, status
from aci.training.request import TrainRequest


class TrainInput(ToolInput, TrainRequest):
    RENAMED = {"num_gpus": "processes"}  # GPUs are the usual case of processes (on CPU, several share the cores)
    action: Literal["start", "status", "stop", "list", "dry-run"] = Field(
        "status", description="start a job; status of one (default the latest); stop one; list all; dry-run = "
                              "every check of start without launching")
    job: str | None = Field(None, description="job id (status, stop)")
    concurrent: bool = Field(False, description="start even though another train or eval job holds the GPU")
    grace_s: float = Field(60, ge=0, description="stop: seconds to save a last checkpoint before SIGKILL")
    decay: bool = Field(False, description="stop: a wsd job decays its rate from now over a quarter of the steps "
                                           "it has run, then saves and stops (its stable phase is at the peak rate)")
    log_lines: int = Field(0, ge=0, le=500, description="status: include this many log lines")
    note: str | None = Field(None, description="why this run (kept in the journal)")


class TrainOutput(ToolOutput):
    action: str
    job: JobView | None = None
    jobs: list[JobView] = Field(default_factory=list)
    checkpoints: list[dict] = Field(default_factory=list, description="checkpoints the job registered")
    checks: dict[str, Any] | None = Field(None, description="tokens, assistant share, truncation, estimate")
    config: dict[str, Any] | None = None
    warnings: list[str] = Field(default_factory=list)
    log: str | None = None
    next: list[str] = Field(default_factory=list)

    def summary(self) -> str:
        lines = []
        for j in ([self.job] if self.job else []) + self.jobs:
            p = j.progress
            bits = [f"step {p.get('step')}/{p.get('total_steps')}" if p.get("total_steps") else p.get("phase", "")]
            if j.status == "running" and p.get("phase") == "preparing" and p.get("preparing"):
                bits.append(status.preparing(p["preparing"]))
            bits += [f"{k}={p[k]:.4g}" if isinstance(p[k], float) else f"{k}={p[k]}"
                     for k in ("loss", "learning_rate", "reward", "tokens_per_s", "eta_s", "last_checkpoint")
                     if p.get(k) is not None]
            lines.append(f"{j.id} {j.status} " + " ".join(b for b in bits if b) + (f" ({j.reason})" if j.reason else ""))
            lines += status.describe(p)
        lines += status.describe_checks(self.checks) if self.checks else []
        lines += status.ranking(self.jobs)
        lines += [f"checkpoint {c['checkpoint']} {c.get('path')}" + (
            f" (dev {c['dev']['metric']} {c['dev']['score']}{', best so far' if c['dev']['best'] else ''})"
            if c.get("dev") else "") for c in self.checkpoints]
        lines += [f"warning: {w}" for w in self.warnings]
        if self.log:
            lines += ["log:", self.log]
        lines += [f"next: {n}" for n in self.next]
        return "\n".join(lines)


def _status(inp: TrainInput, ctx: Context) -> TrainOutput:
    view, ckpts = status.job(ctx, inp.job)
    job_id = view.id
    log = jobs.tail(Path(view.folder) / jobfiles.LOG, inp.log_lines) if inp.log_lines else None
    nxt = []
    note = status.rate_advice(view)
    warnings = [note] if note else []
    if ckpts:
        nxt.append(f"eval-checkpoint --checkpoint {ckpts[-1]['checkpoint']}")
    if view.status == "running":
        nxt.append(f"train status --job {job_id} (progress is updated every few seconds)")
    return TrainOutput(action="status", job=view, checkpoints=ckpts, log=log, warnings=warnings, next=nxt)


@tool("train", title="Training jobs (SFT, LoRA, GRPO)", destructive=False)
def train(inp: TrainInput, ctx: Context) -> TrainOutput:
    """Start, watch (status), stop or list TRL training jobs; dry-run runs every check of start without
    launching.

    start --data FILE [--method sft|grpo] [--model base|<job>/checkpoint-<step>] [--lora] ...: renders the
    data with the evaluation's chat template (the run card's `template`; assistant tokens only carry loss,
    for any template), then launches a detached job that survives this server. Checkpoints go to
    <workdir>/checkpoints/<job id>/checkpoint-<step> every --save-steps and at the end, each registered in
    state as '<job id>/checkpoint-<step>' the moment it is saved (LoRA: --merge-lora also saves merged/).
    grpo: --data holds task records; each completion is rewarded by the task's grader (or --grader).

    Refusals name their rule: no-test-data (the data file needs a passing contamination result for its
    current content under the posttrainbench rules), forbidden-datasets (file name or --sources banned),
    base-model-only (the model must be the base or a checkpoint descending from it), eval-template (the
    template must be the run card's and render the data), final-reserve (at measured or declared
    --tokens-per-s a fixed-step run must end before the deadline minus the reserve, the refusal suggests a
    max_steps that fits; a wsd run must reach its first checkpoint). Also refused: data with no assistant
    tokens, every sample truncated, a job while another train or eval job holds the GPU (unless
    --concurrent). With a deadline the schedule is wsd by default: the job measures its step rate as it
    runs and starts the decay so that it ends, saves and stops before the reserve; else it saves and
    stops itself at the reserve.

    status [--job ID]: step, total, loss, learning rate, tokens/s, ETA, checkpoints; the step rate now,
    the planned end and whether the stop time cuts the schedule; time to step 1; a failed job's log
    tail. stop --job ID: saves a last checkpoint, then ends the job; with --decay a wsd job first decays
    its rate over a quarter of the steps it ran, then saves and stops. dry-run [--measure-steps N]: the
    checks' report (token counts, assistant share, truncation, end-of-turn token, time estimate and the
    measurement it uses); with --measure-steps a job first finds the largest micro-batch that fits
    (gradient checkpointing only if needed), then measures tokens/s at it; start uses that split and
    rate. dry-run --lr-probe: short runs at 5 learning rates from the same start, each one's held-out
    loss drop and the rate suggested. With CUDA, SFT packs samples into rows (each attending only to
    itself) unless --no-packing."""
    if inp.action == "list":
        return TrainOutput(action="list", jobs=status.listed(ctx))
    if inp.action == "status":
        return _status(inp, ctx)
    if inp.action == "stop":
        if not inp.job:
            raise ACIError("stop needs --job ID (see `aci train list`)")
        view = cooldown.request(ctx.state, inp.job) if inp.decay else jobs.stop(ctx.state, inp.job, grace_s=inp.grace_s)
        return _status(inp.model_copy(update={"job": view.id}), ctx).model_copy(update={"action": "stop"})
    jobs.reap(ctx.state)
    if inp.action == "start" and not inp.concurrent and jobs.gpu_busy(ctx.state):
        raise ACIError(jobs.gpu_busy(ctx.state))
    job_id = jobs.new_id("train")
    cfg, report, warnings, probe = prepare.checks(inp, ctx, job_id, inp.action)
    if inp.action == "dry-run":
        return TrainOutput(action="dry-run", checks=report, config=cfg.model_dump(mode="json"), warnings=warnings,
                           job=probe, next=[f"train start (same arguments) to launch {report['estimate']['steps']} steps"])
    msg = f"{cfg.method}{' LoRA' if cfg.lora else ''} of {cfg.parent} on {Path(cfg.data).name}" + \
          (f": {inp.note}" if inp.note else "")
    view = prepare.launch(ctx, cfg, msg, exclusive=not inp.concurrent)
    left = ctx.clock.left_for_work()
    nxt = [f"train status --job {view.id}"]
    if left is not None and left < timedelta(minutes=5):
        warnings.append("less than 5 minutes before the final reserve: the job will stop almost at once")
    return TrainOutput(action="start", job=view, checks=report, config=cfg.model_dump(mode="json"),
                       warnings=warnings, next=nxt)
