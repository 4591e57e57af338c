"""Everything between a training request and a launched job: the checks, the job's config, the launch.

`checks()` is what `train start` and `train dry-run` share: the rule gates (`aci.training.gates`), then
the data rendered with the evaluation's template and tokenized by the tokenizer that will train, then
the work the run needs against the time left (at a declared, measured or freshly measured rate).
`job_config()` is the one place a request becomes a `TrainConfig`. No heavy import at module level.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import time
from pathlib import Path

from aci import jobfiles, jobs, manifest
from aci.context import Context
from aci.errors import ACIError
from aci.jobs import JobView
from aci.training import batch, chance, datacheck, dev, gates, hardware, tokenized
from aci.training import config as config_mod
from aci.training.config import GrpoSettings, LoraSettings, TrainConfig
from aci.training.launch import command, launch_settings
from aci.training.request import LORA_TARGETS, TrainRequest, default_learning_rate

MEASURE_TIMEOUT_S = 1800
TIMED_SAMPLES = 16  # samples tokenized a second time, warm, to time tokenization


def deepspeed_config(req: TrainRequest, ctx: Context) -> str | None:
    if not req.deepspeed:
        return None
    if importlib.util.find_spec("deepspeed") is None:
        raise ACIError("deepspeed is not installed here: `pip install deepspeed`, "
                       "or train without --deepspeed (LoRA or gradient checkpointing fit one GPU)")
    if req.deepspeed in config_mod.ZERO_CONFIGS:
        path = config_mod.zero_config(req.deepspeed)
    else:
        path = ctx.path(req.deepspeed, must_exist=True, what="DeepSpeed config")
    if req.merge_lora and ("zero3" in req.deepspeed or '"stage": 3' in path.read_text()):
        raise ACIError("merge_lora cannot merge ZeRO-3 sharded weights while training; drop --merge-lora and "
                       "merge the final adapter afterwards")
    return str(path)


def inspect_data(req: TrainRequest, ctx: Context, model_path: str, template_path: Path | None,
                 data_sha256: str) -> tuple[dict, list[str]]:
    """The data check, or an earlier one's result for the same inputs (`datacheck`): a `start` after the
    dry-run of the same request neither imports transformers nor tokenizes again."""
    key = datacheck.key(method=req.method, model_path=model_path, template=template_path, data_sha256=data_sha256,
                        settings={"data": req.data, "max_length": req.max_length, "check_samples": req.check_samples,
                                  "template_kwargs": req.template_kwargs or {}})
    kept = datacheck.recall(ctx.state, key)
    if kept:
        return kept
    report, warnings = check_data(req, ctx, model_path, template_path)
    datacheck.remember(ctx.state, key, report, warnings)
    return dict(report), warnings


def check_data(req: TrainRequest, ctx: Context, model_path: str, template_path: Path | None) -> tuple[dict, list[str]]:
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
    path = Path(req.data)
    kwargs = req.template_kwargs or {}
    warnings: list[str] = []
    def encode(limit: int):
        if req.method == "sft":
            return data.encode_samples(path, tok, template, max_length=req.max_length, kwargs=kwargs, limit=limit)
        return data.grpo_prompts(path, tok, template, kwargs=kwargs, limit=limit)

    try:
        rows, stats = encode(req.check_samples)
        started = time.perf_counter()  # timed warm (the first pass pays imports and caches): the job
        timed = encode(min(req.check_samples, TIMED_SAMPLES))[1].samples  # tokenizes the whole file before step 1
        per_row = (time.perf_counter() - started) / max(1, timed)
    except templates.RenderError as e:
        raise ctx.rules.refuse("eval-template", f"the template does not render the data: {e}") from None
    report = stats.report()
    report["tokenize_s_per_row"] = per_row
    report["end_of_turn"] = eot = templates.end_of_turn(tok, template, kwargs)
    report["example"] = stats.example[:800]
    n = stats.samples
    if n == 0:
        raise ACIError(f"{path} holds no samples")
    if req.method == "sft":
        if stats.assistant_tokens == 0:
            cut = f" (all truncated at max_length={req.max_length})" if stats.truncated else ""
            raise ACIError(f"nothing to train on: none of the first {n} samples has an assistant token after "
                           f"rendering{cut}; samples need assistant turns")
        if stats.truncated == stats.sequences:
            raise ACIError(f"all {n} checked samples exceed max_length={req.max_length} (longest "
                           f"{stats.max_tokens} tokens): raise --max-length or shorten the samples")
        if stats.truncated:
            warnings.append(f"{stats.truncated} of {stats.sequences} checked sequences exceed max_length="
                            f"{req.max_length} and are cut")
        if stats.untrainable:
            warnings.append(f"{stats.untrainable} checked sequences keep no assistant token and are dropped")
    else:
        long = sum(1 for r in rows if len(tok(r["prompt"], add_special_tokens=False)["input_ids"]) > req.max_length)
        if long:
            warnings.append(f"{long} of {n} prompts exceed max_length={req.max_length} and are cut from the left")
        report["graders"] = check_graders(req, ctx, [r["task"] for r in rows])
    if eot is None:
        warnings.append("the template closes assistant turns with no special end-of-turn token: the model may "
                        "not learn to stop")
    return report, warnings


def check_graders(req: TrainRequest, ctx: Context, raw_tasks: list[str]) -> list[str]:
    """Build the grader of every checked task (a broken spec fails now, not in the job); returns their types."""
    from aci import graders

    kinds = set()
    for raw in raw_tasks:
        task = json.loads(raw)
        spec = graders.task_spec(task, req.grader)  # a row's own program grader is refused here, never built
        if spec is None:
            raise ACIError(f"task {task['id']!r} names no grader: pass --grader (e.g. final-answer)")
        kinds.add(graders.grader_for(spec, workdir=ctx.workdir, unsafe_grader=req.unsafe_grader).name)
    return sorted(kinds)


def code_sandbox(req: TrainRequest, ctx: Context, report: dict) -> list[str]:
    """GRPO with unit-tests rewards: the sandbox the completions will run in (refused under rule `sandbox`
    where it keeps root's powers without --unsafe-grader), as the report's `sandbox` and, when it lacks
    something, a warning. Decided from the checked tasks' graders (kept with a cached check) and --grader."""
    from aci.graders import code_sandbox as sandbox_for
    from aci.graders.sandbox import record

    box = sandbox_for([*report.get("graders", []), req.grader], unsafe_grader=req.unsafe_grader)
    if box is None:
        return []
    report["sandbox"] = record(ctx, box, "train")
    return [box.note] if box.note else []


def job_config(req: TrainRequest, ctx: Context, job_id: str, src: gates.Source, template_path: Path | None,
               deepspeed: str | None, rows: int, data_sha256: str, dev_settings=None) -> TrainConfig:
    """The job's config from a checked request: request settings as given, defaults resolved, paths absolute,
    and the hash of the data the gates passed (the job trains only on bytes with that hash)."""
    data = Path(req.data)
    processes, machines = launch_settings(req, ctx)
    stop_at = ctx.clock.deadline - ctx.clock.reserve if ctx.clock.deadline else None
    use_vllm = req.use_vllm if req.use_vllm is not None else importlib.util.find_spec("vllm") is not None and _cuda()
    schedule = req.lr_schedule or ("wsd" if stop_at else "cosine")  # wsd needs a stop time to aim at
    return TrainConfig(
        **{**req.model_dump(include=set(config_mod.Schedule.model_fields)), "lr_schedule": schedule},
        method=req.method, job=job_id, state=str(ctx.state.root), workdir=str(ctx.workdir),
        output_dir=str(ctx.workdir / "checkpoints" / job_id), model_path=src.path, model_adapter=src.adapter,
        parent=src.checkpoint, data=str(data), data_sha256=data_sha256, data_rows=rows,
        template=str(template_path) if template_path else None,
        template_sha256=manifest.file_hash(template_path) if template_path else None,
        template_kwargs=req.template_kwargs or {}, profile=ctx.rules.name,
        lora=LoraSettings(r=req.lora_r, alpha=req.lora_alpha, dropout=req.lora_dropout,
                          target_modules=req.lora_targets or LORA_TARGETS) if req.lora else None,
        merge_lora=req.merge_lora and req.lora, learning_rate=req.rate, deepspeed=deepspeed,
        num_processes=processes, machines=machines,
        grpo=GrpoSettings(num_generations=req.num_generations, max_completion_length=req.max_completion_length,
                          temperature=req.temperature, beta=req.beta, use_vllm=use_vllm, grader=req.grader,
                          unsafe_grader=req.unsafe_grader)
        if req.method == "grpo" else None,
        dev=dev_settings,
        stop_at=stop_at.isoformat(timespec="seconds") if stop_at else None,
    )


def prepare(req: TrainRequest, ctx: Context, job_id: str, action: str) -> tuple[TrainConfig, dict, list[str]]:
    """Every check of `start` but the deadline's; returns the job's config, the check report, and warnings."""
    ctx.require_card()
    gates.check_reserve(ctx)  # cheap gates first: a clock reading and names, before any data is read
    if not req.data:
        raise ACIError(f"{action} needs --data (a JSONL file of {'SFT samples' if req.method == 'sft' else 'tasks'})")
    data_path = ctx.path(req.data, must_exist=True, what="data")
    req = req.model_copy(update={"data": str(data_path)})
    data_sha256 = gates.check_data(ctx, data_path, req.sources)
    src = gates.resolve_model(ctx, req.model)
    template_path = gates.resolve_template(ctx, req.template)
    deepspeed = deepspeed_config(req, ctx)
    processes = launch_settings(req, ctx)[0]
    completions = req.batch_size * req.grad_accum * processes
    if req.method == "grpo" and completions % req.num_generations:
        raise ACIError(f"grpo: batch_size x grad_accum x processes = {completions} completions must be a "
                       f"multiple of num_generations={req.num_generations}")
    dev_settings, dev_warnings = dev.settings(req, ctx)
    report, warnings = inspect_data(req, ctx, src.path, template_path, data_sha256)
    warnings = [*warnings, *code_sandbox(req, ctx, report), *dev_warnings]
    from aci.training.data import count_rows

    rows = count_rows(data_path)
    cfg = job_config(req, ctx, job_id, src, template_path, deepspeed, rows, data_sha256, dev_settings)
    if dev_settings:
        report["dev"] = dev_settings.model_dump(mode="json")
    seq_per_sample = report["sequences"] / report["samples_checked"]
    if req.method == "sft":
        report["work"] = gates.sft_work(rows, seq_per_sample, report["mean_tokens"], packing=_packs(req),
                                        max_length=req.max_length, batch=req.batch_size, grad_accum=req.grad_accum,
                                        processes=processes, epochs=req.epochs, max_steps=req.max_steps)
    else:
        report["work"] = gates.grpo_work(rows, report["mean_tokens"], completion=req.max_completion_length,
                                         generations=req.num_generations, batch=req.batch_size,
                                         grad_accum=req.grad_accum, processes=processes, epochs=req.epochs,
                                         max_steps=req.max_steps)
    report["rows"] = rows
    return cfg, report, warnings


def checks(req: TrainRequest, ctx: Context, job_id: str, action: str) -> tuple[TrainConfig, dict, list[str], JobView | None]:
    """`prepare`, then the deadline check; a dry-run with `measure_steps` measures the rate first (a job),
    and one with `lr_probe` probes learning rates (a job). The config carries the estimate the job plans
    with until it has measured its own steps."""
    cfg, report, warnings = prepare(req, ctx, job_id, action)
    work = report.pop("work")
    probe = None
    rate = gates.Rate(req.tokens_per_s, "declared") if req.tokens_per_s else None
    hit = batch.measured(ctx.state, cfg.model_dump(mode="json")) if req.find_batch else None
    found = {**hit[0], "source": f"measured by job {hit[1]}"} if hit else {}
    if found:
        cfg = split(cfg, found, req)
    if action == "dry-run" and req.measure_steps:  # an earlier measurement's split is reused, its rate is not
        search = req.find_batch and not hit
        tokens_per_s, probe = measure(ctx, cfg, req.measure_steps, find_batch=search)
        rate = gates.Rate(tokens_per_s, f"measured now by job {probe.id}", probe.id,
                          probe.progress.get("updated_at"), load_s=gates.load_s(probe.progress))
        if search:
            found = {**(probe.progress.get("batch") or {}), "source": f"measured now by job {probe.id}"}
            cfg = split(cfg, found, req)
        report["first_loss"] = probe.progress.get("first_loss")
        note = chance.advice(report["first_loss"], probe.progress.get("vocab_size"), cfg.learning_rate,
                             default_learning_rate(req.method, req.lora))
        if note:
            warnings.append(note)
    if found:
        report["batch"] = found
    report["per_step"] = per_step(req, cfg, found)
    if action == "dry-run" and req.lr_probe:
        report["lr_probe"] = probe_rates(ctx, cfg, req)
    rate = rate or gates.measured_rate(ctx, cfg.model_dump(mode="json"))
    per_row = report.pop("tokenize_s_per_row")
    cache_key = tokenized.key(cfg, req.max_length if _packs(req) else None) if req.method == "sft" else None
    if tokenized.cached(ctx.state.root, cache_key):
        tokenize = (0.0, "none: an earlier job's tokenized data is cached for these inputs")
    else:
        tokenize = (per_row * report["rows"], f"measured on {report['samples_checked']} checked samples")
    est = report["estimate"] = gates.check_deadline(ctx, work, rate, tokenize_s=tokenize[0], tokenize_source=tokenize[1],
                                                    lr_schedule=cfg.lr_schedule)
    if est["step_s"]:
        cfg = cfg.model_copy(update={"estimate": {"step_s": est["step_s"], "source": rate.source}})
    if rate.tokens_per_s is None and ctx.clock.deadline is not None:
        warnings.append("no throughput known, so the end time is not checked: the job measures its own rate, "
                        "times its schedule by it, and saves and stops by itself at the final reserve; `train "
                        "dry-run --measure-steps 5` measures it first")
    if est.get("note"):
        warnings.append(est["note"])
    return cfg, report, warnings, probe


def split(cfg: TrainConfig, found: dict, req: TrainRequest) -> TrainConfig:
    """`cfg` with a measured split, when the measurement searched one; the batch per step stays as asked."""
    if not found.get("searched"):
        return cfg
    return cfg.model_copy(update={"batch_size": found["micro_batch"], "grad_accum": found["grad_accum"],
                                  "gradient_checkpointing": found["gradient_checkpointing"]
                                  if req.gradient_checkpointing is None else req.gradient_checkpointing})


def per_step(req: TrainRequest, cfg: TrainConfig, found: dict) -> dict:
    """What one optimizer step holds and why, so that a default gradient accumulation is not silent."""
    default_accum = config_mod.Schedule.model_fields["grad_accum"].default
    samples = cfg.batch_size * cfg.grad_accum * cfg.num_processes
    if found.get("searched") and not found.get("trials"):
        why = f"--batch-size {req.batch_size} x --grad-accum {req.grad_accum} as asked, in one micro-batch ({found['why']})"
    elif found.get("searched"):
        why = (f"--batch-size {req.batch_size} x --grad-accum {req.grad_accum} as asked, split into the largest "
               f"micro-batch that fits (measured)")
    elif req.grad_accum == default_accum:
        why = (f"--grad-accum {default_accum} is the default: --grad-accum 1 makes {default_accum}x as many steps "
               f"of a quarter the samples each, often better for a short run on a small set")
    else:
        why = "as given"
    return {"samples": samples, "micro_batch": cfg.batch_size, "grad_accum": cfg.grad_accum,
            "processes": cfg.num_processes, "why": why}


def _packs(req: TrainRequest) -> bool:
    """Whether the job will pack, as far as the tool can tell (the job decides for real)."""
    return req.method == "sft" and (req.packing if req.packing is not None else hardware.cuda_likely())


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def launch(ctx: Context, cfg: TrainConfig, message: str, exclusive: bool = False) -> JobView:
    """Start the job as a supervised process (`aci.jobs`); `exclusive` refuses it, under the state lock,
    while another train job runs."""
    config_path = jobs.job_dir(ctx.state, cfg.job) / jobfiles.CONFIG
    return jobs.start(ctx.state, "train", command(cfg, config_path), cfg.model_dump(mode="json"), cwd=ctx.workdir,
                      job_id=cfg.job, message=message, exclusive=exclusive)


def measure(ctx: Context, cfg: TrainConfig, steps: int, find_batch: bool = False) -> tuple[float | None, JobView]:
    """Run `steps` steps as a real job (no checkpoints) and return its measured tokens/s; with `find_batch`
    the job first searches the largest micro-batch that fits (its progress `batch` holds the plan)."""
    view = measurement(ctx, cfg, {"max_steps": steps, "find_batch": find_batch},
                       f"throughput measurement ({steps} steps) for {cfg.method} of {cfg.model_path}")
    return view.progress.get("tokens_per_s"), view


def probe_rates(ctx: Context, cfg: TrainConfig, req: TrainRequest) -> dict:
    """`dry-run --lr-probe`: a job trains `lr_probe_steps` steps at each rate of `probe.FACTORS` times the
    run's, from the same start on the same batches at a constant rate; its report (`aci.training.probe`)."""
    from aci.training import probe

    if cfg.method != "sft" or cfg.num_processes > 1:
        raise ACIError("--lr-probe runs SFT on one process (one GPU); drop --method grpo or --processes")
    rates = [cfg.learning_rate * f for f in probe.FACTORS]
    view = measurement(ctx, cfg, {"max_steps": req.lr_probe_steps, "lr_probe": rates, "lr_schedule": "constant",
                                  "warmup_ratio": 0.0, "find_batch": False},
                       f"learning-rate probe ({len(rates)} rates x {req.lr_probe_steps} steps) for {cfg.method} of "
                       f"{cfg.model_path}")
    return {"job": view.id, **view.progress.get("lr_probe", {})}


def measurement(ctx: Context, cfg: TrainConfig, updates: dict, message: str) -> JobView:
    """Run a measurement job (no checkpoints, no stop time, a log line per step) of `cfg` with `updates` and
    wait for it; a measurement that fails is an error that carries its log."""
    job = cfg.model_copy(update={"job": jobs.new_id("train"), "measure": True, "logging_steps": 1, "stop_at": None,
                                 "dev": None, **updates})
    job = job.model_copy(update={"output_dir": str(ctx.workdir / "checkpoints" / job.job)})
    view = launch(ctx, job, message)
    end = time.monotonic() + MEASURE_TIMEOUT_S
    while view.status == "running" and time.monotonic() < end:
        time.sleep(1.0)
        view = jobs.view(ctx.state, view.id)
    if view.status == "running":
        view = jobs.stop(ctx.state, view.id)
    if view.status != "succeeded":
        raise ACIError(f"the measurement job {view.id} {view.status}: {view.reason}\n{view.log_tail or ''}")
    out = Path(job.output_dir)
    if out.is_dir() and not any(out.glob("checkpoint-*")):
        shutil.rmtree(out)  # the trainer creates its output folder even when it saves nothing
    return view
