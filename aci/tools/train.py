"""`train`: start, watch, stop and list TRL training jobs (SFT full or LoRA, GRPO with grader rewards).

Every start goes through the same checks as `dry-run`: rule gates (see `aci.training.gates`), then the
data rendered with the evaluation's template and tokenized by the tokenizer that will train, then the
time the run needs against the time left. The job itself is a supervised process (`aci.jobs`) that
registers each checkpoint in state as soon as it is saved and stops by itself at the final reserve.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from aci import jobs, manifest, records
from aci.context import Context
from aci.errors import ACIError
from aci.jobs import JobView
from aci.registry import ToolInput, ToolOutput, tool
from aci.training import config as cfg_mod
from aci.training import gates, hardware
from aci.training.config import GrpoSettings, LoraSettings, TrainConfig

MEASURE_TIMEOUT_S = 1800


class TrainInput(ToolInput):
    action: Literal["start", "status", "stop", "list", "dry-run"] = Field(
        "status", description="start a job; status of one (default the latest); stop one; list all; dry-run = "
                              "every check of start without launching")
    job: str | None = Field(None, description="job id (status, stop)")
    method: Literal["sft", "grpo"] = Field("sft", description="sft: samples with assistant turns; grpo: task "
                                                              "records rewarded by their grader")
    data: str | None = Field(None, description="JSONL/JSON file: SFT samples (messages, prompt/completion, "
                                               "question/answer) or, for grpo, task records")
    source: str | None = Field(None, description="where the data came from (hub id or URL), checked against "
                                                 "the banned datasets")
    model: str = Field("base", description="checkpoint to train from: 'base' or a registered id "
                                           "'<job>/checkpoint-<step>' (or a path to either)")
    template: str | None = Field(None, description="chat template .jinja (default: the run card's; else the "
                                                   "tokenizer's own)")
    template_kwargs: dict[str, Any] | None = Field(None, description='extra template variables, e.g. '
                                                                     '{"enable_thinking": false}')
    lora: bool = Field(False, description="train a LoRA adapter instead of all weights")
    lora_r: int = Field(16, ge=1, le=1024)
    lora_alpha: int = Field(32, ge=1)
    lora_dropout: float = Field(0.05, ge=0, lt=1)
    lora_targets: list[str] | None = Field(None, description='modules to adapt (default "all-linear")')
    merge_lora: bool = Field(False, description="also save each LoRA checkpoint merged (<checkpoint>/merged/)")
    max_length: int = Field(2048, ge=8, description="tokens per sequence (longer samples are truncated); "
                                                    "grpo: prompt limit")
    packing: bool | None = Field(None, description="pack samples into rows of max_length, each sample attending only "
                                                   "to itself (default: on with CUDA where the model supports it)")
    epochs: float = Field(1.0, gt=0)
    max_steps: int | None = Field(None, ge=1, description="optimizer steps (overrides epochs)")
    learning_rate: float | None = Field(None, gt=0, description="default 2e-5 full / 2e-4 LoRA; "
                                                                "grpo 1e-6 / 1e-5")
    lr_scheduler: str = Field("cosine", description="transformers scheduler name: cosine, linear, constant, ...")
    warmup_ratio: float = Field(0.03, ge=0, lt=1)
    batch_size: int = Field(4, ge=1, description="per device (grpo: completions per device)")
    grad_accum: int = Field(4, ge=1)
    gradient_checkpointing: bool | None = Field(None, description="default: on with CUDA")
    save_steps: int = Field(200, ge=1, description="save and register a checkpoint every N steps (and at the end)")
    logging_steps: int = Field(10, ge=1)
    seed: int = 0
    num_generations: int = Field(8, ge=2, description="grpo: completions per prompt")
    max_completion_length: int = Field(512, ge=1, description="grpo: new tokens per completion")
    temperature: float = Field(1.0, gt=0, description="grpo: sampling temperature")
    beta: float = Field(0.0, ge=0, description="grpo: KL coefficient")
    use_vllm: bool | None = Field(None, description="grpo: generate with vLLM (default: when vllm is installed "
                                                    "and CUDA present)")
    grader: str | None = Field(None, description="grpo: grader for tasks that name none (e.g. final-answer)")
    deepspeed: str | None = Field(None, description="zero2, zero3 (shipped configs) or a DeepSpeed JSON file")
    num_gpus: int = Field(1, ge=1, description="> 1: launch with `accelerate launch --num_processes N`")
    tokens_per_s: float | None = Field(None, gt=0, description="declared throughput for the deadline check "
                                                               "(default: measured by earlier jobs)")
    measure_steps: int = Field(0, ge=0, le=100, description="dry-run: run this many steps as a job to measure "
                                                            "throughput (recorded for later estimates)")
    check_samples: int = Field(64, ge=1, le=5000, description="samples rendered and tokenized by the checks")
    concurrent: bool = Field(False, description="start even though another train job is running")
    grace_s: float = Field(60, ge=0, description="stop: seconds to save a last checkpoint before SIGKILL")
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
            bits += [f"{k}={p[k]:.4g}" if isinstance(p[k], float) else f"{k}={p[k]}"
                     for k in ("loss", "reward", "tokens_per_s", "eta_s", "last_checkpoint") if p.get(k) is not None]
            lines.append(f"{j.id} {j.status} " + " ".join(b for b in bits if b) + (f" ({j.reason})" if j.reason else ""))
        if self.checks:
            c = self.checks
            lines.append(f"checked {c.get('samples_checked')} samples: {c.get('mean_tokens')} tokens/sequence, "
                         f"assistant share {c.get('assistant_token_share')}, truncated {c.get('truncated')}")
            est = c.get("estimate") or {}
            lines.append(f"estimate: {est.get('steps')} steps, {est.get('tokens')} tokens, {est.get('duration')} "
                         f"({est.get('rate_source')}); {est.get('time_left_for_work')} left before the reserve")
        lines += [f"checkpoint {c['checkpoint']} {c.get('path')}" for c in self.checkpoints]
        lines += [f"warning: {w}" for w in self.warnings]
        if self.log:
            lines += ["log:", self.log]
        lines += [f"next: {n}" for n in self.next]
        return "\n".join(lines)


def _deepspeed(inp: TrainInput, ctx: Context) -> str | None:
    if not inp.deepspeed:
        return None
    if importlib.util.find_spec("deepspeed") is None:
        raise ACIError("deepspeed is not installed (the PostTrainBench image has none): `pip install deepspeed`, "
                       "or train without --deepspeed (LoRA or gradient checkpointing fit one GPU)")
    if inp.deepspeed in cfg_mod.ZERO_CONFIGS:
        path = cfg_mod.zero_config(inp.deepspeed)
    else:
        path = ctx.path(inp.deepspeed, must_exist=True, what="DeepSpeed config")
    if inp.merge_lora and ("zero3" in inp.deepspeed or '"stage": 3' in path.read_text()):
        raise ACIError("merge_lora cannot merge ZeRO-3 sharded weights while training; drop --merge-lora and "
                       "merge the final adapter afterwards")
    return str(path)


def _inspect(inp: TrainInput, ctx: Context, model_path: str, template_path: Path | None) -> tuple[dict, list[str]]:
    """Load the tokenizer, render and tokenize the first samples; refuse data that cannot train anything."""
    from aci import templates
    from aci.training import data

    try:
        tok = templates.load_tokenizer(model_path)
    except Exception as e:
        raise ACIError(f"cannot load the tokenizer of {model_path}: {type(e).__name__}: {e}") from None
    try:
        template = templates.load(template_path, tok)
    except ACIError as e:
        raise ctx.rules.refuse("eval-template", str(e)) from None
    path = Path(inp.data)
    kwargs = inp.template_kwargs or {}
    warnings: list[str] = []
    try:
        if inp.method == "sft":
            _, stats = data.encode_samples(path, tok, template, max_length=inp.max_length, kwargs=kwargs,
                                           limit=inp.check_samples)
        else:
            rows, stats = data.grpo_prompts(path, tok, template, kwargs=kwargs, limit=inp.check_samples)
    except templates.RenderError as e:
        raise ctx.rules.refuse("eval-template", f"the template does not render the data: {e}") from None
    report = stats.report()
    report["end_of_turn"] = eot = templates.end_of_turn(tok, template, kwargs)
    report["example"] = stats.example[:800]
    n = stats.samples
    if n == 0:
        raise ACIError(f"{path} holds no samples")
    if inp.method == "sft":
        if stats.assistant_tokens == 0:
            cut = f" (all truncated at max_length={inp.max_length})" if stats.truncated else ""
            raise ACIError(f"nothing to train on: none of the first {n} samples has an assistant token after "
                           f"rendering{cut}; samples need assistant turns")
        if stats.truncated == stats.sequences:
            raise ACIError(f"all {n} checked samples exceed max_length={inp.max_length} (longest "
                           f"{stats.max_tokens} tokens): raise --max-length or shorten the samples")
        if stats.truncated:
            warnings.append(f"{stats.truncated} of {stats.sequences} checked sequences exceed max_length="
                            f"{inp.max_length} and are cut")
        if stats.untrainable:
            warnings.append(f"{stats.untrainable} checked sequences keep no assistant token and are dropped")
    else:
        long = sum(1 for r in rows if len(tok(r["prompt"], add_special_tokens=False)["input_ids"]) > inp.max_length)
        if long:
            warnings.append(f"{long} of {n} prompts exceed max_length={inp.max_length} and are cut from the left")
        _check_graders(inp, ctx, [r["task"] for r in rows])
    if eot is None:
        warnings.append("the template closes assistant turns with no special end-of-turn token: the model may "
                        "not learn to stop")
    return report, warnings


def _check_graders(inp: TrainInput, ctx: Context, raw_tasks: list[str]) -> None:
    import json

    from aci import graders

    for raw in raw_tasks:
        task = json.loads(raw)
        spec = task.get("grader") or inp.grader
        if spec is None:
            raise ACIError(f"task {task['id']!r} names no grader: pass --grader (e.g. final-answer)")
        graders.grader_for(spec, workdir=ctx.workdir)


def _prepare(inp: TrainInput, ctx: Context, job_id: str) -> tuple[TrainConfig, dict, list[str]]:
    """Every check of `start`; returns the resolved config, the check report, and warnings."""
    ctx.require_card()
    if not inp.data:
        raise ACIError(f"{inp.action} needs --data (a JSONL file of {'SFT samples' if inp.method == 'sft' else 'tasks'})")
    data_path = ctx.path(inp.data, must_exist=True, what="data")
    inp = inp.model_copy(update={"data": str(data_path)})
    gates.check_data(ctx, data_path, inp.source)
    src = gates.resolve_model(ctx, inp.model)
    template_path = gates.resolve_template(ctx, inp.template)
    deepspeed = _deepspeed(inp, ctx)
    if inp.method == "grpo" and (inp.batch_size * inp.grad_accum * inp.num_gpus) % inp.num_generations:
        raise ACIError(f"grpo: batch_size x grad_accum x num_gpus = {inp.batch_size * inp.grad_accum * inp.num_gpus} "
                       f"completions must be a multiple of num_generations={inp.num_generations}")
    report, warnings = _inspect(inp, ctx, src.path, template_path)
    from aci.training.data import count_rows

    rows = count_rows(data_path)
    use_vllm = inp.use_vllm if inp.use_vllm is not None else importlib.util.find_spec("vllm") is not None and _cuda()
    stop_at = ctx.clock.deadline - ctx.clock.reserve if ctx.clock.deadline else None
    cfg = TrainConfig(
        method=inp.method, job=job_id, state=str(ctx.state.root), workdir=str(ctx.workdir),
        output_dir=str(ctx.workdir / "checkpoints" / job_id), model_path=src.path, model_adapter=src.adapter,
        parent=src.checkpoint, data=str(data_path), data_sha256=manifest.file_hash(data_path), data_rows=rows,
        template=str(template_path) if template_path else None,
        template_sha256=manifest.file_hash(template_path) if template_path else None,
        template_kwargs=inp.template_kwargs or {}, profile=ctx.rules.name,
        lora=LoraSettings(r=inp.lora_r, alpha=inp.lora_alpha, dropout=inp.lora_dropout,
                          target_modules=inp.lora_targets or "all-linear") if inp.lora else None,
        merge_lora=inp.merge_lora and inp.lora, max_length=inp.max_length, packing=inp.packing, epochs=inp.epochs,
        max_steps=inp.max_steps, learning_rate=inp.learning_rate or cfg_mod.default_learning_rate(inp.method, inp.lora),
        lr_scheduler=inp.lr_scheduler, warmup_ratio=inp.warmup_ratio, batch_size=inp.batch_size,
        grad_accum=inp.grad_accum, gradient_checkpointing=inp.gradient_checkpointing, save_steps=inp.save_steps,
        logging_steps=inp.logging_steps, seed=inp.seed, deepspeed=deepspeed, num_processes=inp.num_gpus,
        grpo=GrpoSettings(num_generations=inp.num_generations, max_completion_length=inp.max_completion_length,
                          temperature=inp.temperature, beta=inp.beta, use_vllm=use_vllm, grader=inp.grader)
        if inp.method == "grpo" else None,
        stop_at=stop_at.isoformat(timespec="seconds") if stop_at else None,
    )
    seq_per_sample = report["sequences"] / report["samples_checked"]
    if inp.method == "sft":
        packing = inp.packing if inp.packing is not None else hardware.cuda_likely()  # the job decides for real
        report["work"] = gates.sft_work(rows, seq_per_sample, report["mean_tokens"], packing=packing,
                                        max_length=inp.max_length, batch=inp.batch_size, grad_accum=inp.grad_accum,
                                        processes=inp.num_gpus, epochs=inp.epochs, max_steps=inp.max_steps)
    else:
        report["work"] = gates.grpo_work(rows, report["mean_tokens"], completion=inp.max_completion_length,
                                         generations=inp.num_generations, batch=inp.batch_size,
                                         grad_accum=inp.grad_accum, processes=inp.num_gpus, epochs=inp.epochs,
                                         max_steps=inp.max_steps)
    report["rows"] = rows
    return cfg, report, warnings


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _command(cfg: TrainConfig, config_path: Path) -> list[str]:
    if cfg.num_processes > 1:
        return [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", str(cfg.num_processes),
                "-m", "aci.training.run", str(config_path)]
    return [sys.executable, "-m", "aci.training.run", str(config_path)]


def _launch(ctx: Context, cfg: TrainConfig, message: str) -> JobView:
    config_path = jobs.job_dir(ctx.state, cfg.job) / "config.json"
    return jobs.start(ctx.state, "train", _command(cfg, config_path), cfg.model_dump(mode="json"), cwd=ctx.workdir,
                      job_id=cfg.job, message=message)


def _measure(ctx: Context, cfg: TrainConfig, steps: int) -> tuple[float | None, JobView]:
    """Run `steps` steps as a real job (no checkpoints) and return its measured tokens/s."""
    probe = cfg.model_copy(update={"job": jobs.new_id("train"), "measure": True, "max_steps": steps,
                                   "logging_steps": 1, "stop_at": None})
    probe = probe.model_copy(update={"output_dir": str(ctx.workdir / "checkpoints" / probe.job)})
    view = _launch(ctx, probe, f"throughput measurement ({steps} steps) for {cfg.method} of {cfg.model_path}")
    end = time.monotonic() + MEASURE_TIMEOUT_S
    while view.status == "running" and time.monotonic() < end:
        time.sleep(1.0)
        view = jobs.view(ctx.state, view.id)
    if view.status == "running":
        view = jobs.stop(ctx.state, view.id)
    if view.status != "succeeded":
        raise ACIError(f"the measurement job {view.id} {view.status}: {view.reason}\n{view.log_tail or ''}")
    out = Path(probe.output_dir)
    if out.is_dir() and not any(out.glob("checkpoint-*")):
        shutil.rmtree(out)  # the trainer creates its output folder even when it saves nothing
    return view.progress.get("tokens_per_s"), view


def _checks(inp: TrainInput, ctx: Context, job_id: str) -> tuple[TrainConfig, dict, list[str], JobView | None]:
    cfg, report, warnings = _prepare(inp, ctx, job_id)
    work = report.pop("work")
    probe = None
    rate, source = (inp.tokens_per_s, "declared") if inp.tokens_per_s else (None, "")
    if inp.action == "dry-run" and inp.measure_steps:
        rate, probe = _measure(ctx, cfg, inp.measure_steps)
        source = f"measured now by job {probe.id}"
    if rate is None:
        rate, source = gates.measured_rate(ctx, cfg.method, cfg.model_path, cfg.lora is not None)
    report["estimate"] = gates.check_deadline(ctx, work, rate, source)
    if rate is None and ctx.clock.deadline is not None:
        warnings.append("no throughput known, so the end time is not checked: the job saves and stops by itself at "
                        "the final reserve; `train dry-run --measure-steps 5` measures it")
    return cfg, report, warnings, probe


def _status(inp: TrainInput, ctx: Context) -> TrainOutput:
    jobs.reap(ctx.state)
    job_id = inp.job
    if not job_id:
        listed = jobs.list_jobs(ctx.state, kind="train")
        if not listed:
            raise ACIError("no training jobs yet; start one with `aci train start --data ...`")
        job_id = max(listed, key=lambda j: j.started_at).id
    view = jobs.view(ctx.state, job_id)
    ckpts = [e for e in ctx.state.lines(records.CHECKPOINTS) if e.get("type") == "registered" and e.get("job") == job_id]
    log = jobs.tail(Path(view.folder) / "log", inp.log_lines) if inp.log_lines else None
    nxt = []
    if ckpts:
        nxt.append(f"eval-checkpoint --checkpoint {ckpts[-1]['checkpoint']}")
    if view.status == "running":
        nxt.append(f"train status --job {job_id} (progress is updated every few seconds)")
    return TrainOutput(action="status", job=view, checkpoints=ckpts, log=log, next=nxt)


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
    current content under the posttrainbench rules), forbidden-datasets (file name or --source banned),
    base-model-only (the model must be the base or a checkpoint descending from it), eval-template (the
    template must be the run card's and render the data), final-reserve (at measured or declared
    --tokens-per-s the run must end before the deadline minus the reserve; the refusal suggests a
    max_steps that fits). Also refused: data with no assistant tokens, every sample truncated, a second
    concurrent train job (unless --concurrent). A running job saves and stops itself at the reserve.

    status [--job ID]: step, total, loss, learning rate, tokens/s, ETA, checkpoints; a failed job's log
    tail. stop --job ID: saves a last checkpoint, then ends the job. dry-run [--measure-steps N]: the
    checks' report (token counts, assistant share, truncation, end-of-turn token, time estimate)."""
    if inp.action == "list":
        jobs.reap(ctx.state)
        return TrainOutput(action="list", jobs=jobs.list_jobs(ctx.state, kind="train"))
    if inp.action == "status":
        return _status(inp, ctx)
    if inp.action == "stop":
        if not inp.job:
            raise ACIError("stop needs --job ID (see `aci train list`)")
        view = jobs.stop(ctx.state, inp.job, grace_s=inp.grace_s)
        return _status(inp.model_copy(update={"job": view.id}), ctx).model_copy(update={"action": "stop"})
    jobs.reap(ctx.state)
    if inp.action == "start" and not inp.concurrent:
        running = [j.id for j in jobs.active(ctx.state) if j.kind == "train"]
        if running:
            raise ACIError(f"train job {running[0]} is still running: `aci train stop --job {running[0]}`, wait "
                           f"for it, or pass --concurrent (two jobs share the GPU)")
    job_id = jobs.new_id("train")
    cfg, report, warnings, probe = _checks(inp, ctx, job_id)
    if inp.action == "dry-run":
        return TrainOutput(action="dry-run", checks=report, config=cfg.model_dump(mode="json"), warnings=warnings,
                           job=probe, next=[f"train start (same arguments) to launch {report['estimate']['steps']} steps"])
    msg = f"{cfg.method}{' LoRA' if cfg.lora else ''} of {cfg.parent} on {Path(cfg.data).name}" + \
          (f": {inp.note}" if inp.note else "")
    view = _launch(ctx, cfg, msg)
    left = ctx.clock.left_for_work()
    nxt = [f"train status --job {view.id}"]
    if left is not None and left < timedelta(minutes=5):
        warnings.append("less than 5 minutes before the final reserve: the job will stop almost at once")
    return TrainOutput(action="start", job=view, checks=report, config=cfg.model_dump(mode="json"),
                       warnings=warnings, next=nxt)
