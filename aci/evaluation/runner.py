"""One evaluation of one checkpoint: k trials with one evaluator, recorded as one state event.

A checkpoint other than `base` is first built into a throw-away servable folder (`folder.build`, hard
links where possible), so the evaluation sees exactly what promotion would ship: merged LoRA, the
evaluation's template, the end-of-turn token in `generation_config.json`. The base model is evaluated
as it is, because that is how the benchmark scores the base.

The result is a `CheckpointEntry` line (`type: evaluated`) with evaluator id, limit, samples, seeds,
scores, mean, range and duration; per-sample scores go to `evals/<eval id>/samples.json` and the eval
command's metrics files beside them. A failure is recorded the same way with `error` set, then raised.
"""

from __future__ import annotations

import hashlib
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from aci import disk, records
from aci.context import Context
from aci.errors import ACIError
from aci.evaluation import checkpoints, folder, stats
from aci.evaluation.checkpoints import Checkpoint
from aci.graders import SPEC_HELP
from aci.sampling import MaxNewTokens, Temperature
from aci.state import iso

EVALS = "evals"
WORK = ".aci-scratch"  # throw-away model folders, under the working directory (.aci/ holds the installed bundle)


class EvalSpec(BaseModel):
    """How to evaluate: which evaluator and its settings (shared by the tool and background jobs)."""

    evaluator: Literal["command", "lm-eval", "dev"] = Field(
        "command", description="command: the eval command (run card's or --command); lm-eval: a task; dev: a dev set")
    command: str | None = Field(None, description="eval command with {model_path}, {limit}, {output} and optional "
                                "{seed} (default: the run card's); run without a shell")
    metric_key: str | None = Field(None, description="key of the score in the metrics JSON or lm-eval metric "
                                   "(default: run card's metric_key, else accuracy/score/acc/... or the only number)")
    task: str | None = Field(None, description="lm-eval: task name (built-in, or defined in --task-dir)")
    task_dir: str | None = Field(None, description="lm-eval: folder of local task YAMLs")
    dev_set: str | None = Field(None, description="dev: JSONL of held-out task records (each names its grader)")
    grader: str | None = Field(None, description=f"dev: grader for tasks that name none: {SPEC_HELP}")
    unsafe_grader: bool = Field(False, description="dev: let unit-tests run the model's code as root where no sandbox "
                                                   "can drop root (rule sandbox; journaled as a weakening)")
    limit: int | None = Field(None, ge=-1, description="samples per trial; -1 = every item (the eval command's limit "
                              "option gets the value plan init learnt means all, else -1, which an evaluate.py "
                              "with a --limit option reads as all); without it the eval command's own default "
                              "applies (read it: often a dev subset); refused when the command has no {limit}; "
                              "comparisons need the rules' minimum")
    trials: int = Field(1, ge=1, le=20, description="independent trials (seeds 0..k-1): mean and min-max range")
    seeds: list[int] | None = Field(None, description="explicit seeds (overrides --trials)")
    temperature: Temperature = Field(0.0, description="dev: 0 = greedy; > 0 samples with each trial's seed")
    max_new_tokens: MaxNewTokens = Field(256, description="dev: tokens generated per reply")
    batch_size: int = Field(8, ge=1, description="dev and lm-eval: prompts per forward pass")
    set_template: bool = Field(False, description="build the evaluated (and promoted) folder with the run card's "
                               "template as its tokenizer's chat template even where the checkpoint has its own "
                               "(default: keep the checkpoint's own tokenizer and template files)")
    timeout_s: float = Field(3600, gt=0, allow_inf_nan=False, description="command: seconds per trial before the command is killed")

    @field_validator("limit")
    @classmethod
    def _not_zero(cls, v: int | None) -> int | None:
        if v == 0:
            raise ValueError("--limit 0 scores nothing: give a sample count, or -1 for every item")
        return v

    def seed_list(self) -> list[int]:
        return list(self.seeds) if self.seeds else list(range(self.trials))

    def items(self) -> int | None:
        """The sample limit for evaluators that take a count (lm-eval, dev set): None means every item."""
        return None if self.limit == -1 else self.limit


def _sha8(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:8]


def template_text(ctx: Context) -> str | None:
    """The run card's chat template (the one the evaluation renders), if it names one."""
    rel = ctx.card.template if ctx.card else None
    if not rel:
        return None
    p = ctx.path(rel, must_exist=True, what="template")
    return p.read_text(encoding="utf-8")


def make_evaluator(ctx: Context, spec: EvalSpec, out_dir: Path):
    """The evaluator for `spec`, with the id that decides which results are comparable."""
    card = ctx.require_card()
    if spec.evaluator == "command":
        from aci.evaluation.command import CommandEvaluator

        template = spec.command or card.eval_command
        if not template:
            raise ACIError("no eval command: pass --command '<cmd with {model_path} {limit} {output}>' or set the "
                           "run card's (aci plan update --eval-command ...)")
        key = spec.metric_key or card.metric_key
        same = template == card.eval_command and key == card.metric_key
        label = "eval-command" if same else f"command:{_sha8(template, key or '')}"
        mapped = card.eval_options if template == card.eval_command else None
        return CommandEvaluator(template, metric_key=key, limit=spec.limit, timeout_s=spec.timeout_s,
                                cwd=ctx.workdir, out_dir=out_dir, label=label,
                                limit_all=mapped.limit_all if mapped else None,
                                count_key=card.count_key if template == card.eval_command else None)
    if spec.evaluator == "lm-eval":
        from aci.evaluation.lmeval import LMEvalEvaluator

        if not spec.task:
            raise ACIError("lm-eval needs --task (a built-in task name, or one defined in --task-dir)")
        task_dir = ctx.path(spec.task_dir, must_exist=True, what="task folder") if spec.task_dir else None
        label = f"lm-eval:{spec.task}" + (f":{spec.metric_key}" if spec.metric_key else "")
        if task_dir is not None:
            yamls = sorted(task_dir.rglob("*.yaml"))
            label += "@" + _sha8(*(y.read_text(errors="replace") for y in yamls))
        return LMEvalEvaluator(spec.task, task_dir=task_dir, limit=spec.items(), metric_key=spec.metric_key,
                               batch_size=spec.batch_size, label=label)
    from aci.default_grader import card_grader
    from aci.evaluation.devset import DevSetEvaluator
    from aci.manifest import file_hash

    if not spec.dev_set:
        raise ACIError("the dev evaluator needs --dev-set (a JSONL file of task records with graders)")
    path = ctx.path(spec.dev_set, must_exist=True, what="dev set")
    try:
        name = str(path.relative_to(ctx.workdir))
    except ValueError:
        name = path.name
    grader = spec.grader or card_grader(ctx)[0]  # as the training job's dev curve scores tasks without one
    label = f"dev:{name}@" + _sha8(file_hash(path), grader or "", f"{spec.temperature:g}", str(spec.max_new_tokens))
    ev = DevSetEvaluator(path, limit=spec.items(), template=template_text(ctx), default_grader=grader,
                         temperature=spec.temperature, max_new_tokens=spec.max_new_tokens,
                         batch_size=spec.batch_size, workdir=ctx.workdir, out_dir=out_dir,
                         check_host=lambda h: ctx.rules.check_host(h, judge=True), label=label,
                         unsafe_grader=spec.unsafe_grader)
    from aci.graders import code_sandbox
    from aci.graders.sandbox import record

    box = code_sandbox((t.get("grader") or grader for t in ev.tasks), unsafe_grader=spec.unsafe_grader)
    if box is not None:
        record(ctx, box, "eval-checkpoint")
        ev.sandbox_note = box.note
    return ev


def prepare(ctx: Context, ck: Checkpoint, out: Path, *, link: bool, set_template: bool = False) -> dict:
    """Build `ck` as the benchmark would load it into `out` (see `folder.build`). A folder to ship (not
    `link`: promotion) keeps each weights file within the profile's `transfer.shard_bytes`; a throw-away
    evaluation folder links the checkpoint's files as they are (the same weights, cut differently)."""
    if ck.local is None:
        raise ACIError(f"checkpoint {ck.id} has no local folder ({ck.path})")
    scratch = out.parent / f"{out.name}.parents"
    plain = checkpoints.resolve(ctx, ck.parent) if ck.sampling is not None else ck  # a variant's own files
    if ck.adapter:  # merged in full (other files are hard-linked, or copied and small)
        disk.require_free(out.parent, folder.weights_bytes(checkpoints.base(ctx).local or Path(ck.path)),
                          f"merging the LoRA checkpoint {ck.id}")
    try:
        onto = _trained_on(ctx, plain, scratch, {plain.id}) if ck.adapter else None
        if ck.adapter and onto is None:
            raise ACIError(f"{ck.id} is a LoRA adapter but the model it was trained on has no local folder "
                           f"(parent chain {' -> '.join(checkpoints.ancestry(ctx, ck))})")
        return folder.build(ck.local, out, base_dir=checkpoints.base(ctx).local, merge_onto=onto,
                            template=template_text(ctx), set_template=set_template, link=link, sampling=ck.sampling,
                            shard_bytes=None if link else ctx.rules.profile.transfer.shard_bytes)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _trained_on(ctx: Context, ck: Checkpoint, scratch: Path, seen: set[str]) -> Path | None:
    """The full model a LoRA checkpoint was trained on: its parent, itself merged first when it is a LoRA
    too (a job training from a LoRA checkpoint merges it, then trains a new adapter on the result)."""
    if ck.parent is None or ck.parent in seen:
        declared = (folder.read_json(Path(ck.path) / "adapter_config.json") or {}).get("base_model_name_or_path")
        return folder.local_dir(declared, ctx.workdir) if declared else None
    parent = checkpoints.resolve(ctx, ck.parent)
    if not parent.adapter:
        return parent.local
    out = scratch / f"{len(seen)}"
    onto = _trained_on(ctx, parent, scratch, seen | {parent.id})
    if onto is None or parent.local is None:
        return None
    folder.build(parent.local, out, base_dir=checkpoints.base(ctx).local, merge_onto=onto, link=True)
    return out


def warnings_for(ctx: Context, spec: EvalSpec, evaluator, samples: int | None) -> list[str]:
    out = []
    minimum = checkpoints.min_samples(ctx)
    if samples is None:
        out.append("the evaluator reported no sample count (no count in its metrics JSON, no inspect log, no "
                   "per-sample JSONL log), so the number of items scored is unknown, whatever --limit asked for: "
                   "this result cannot pass the baseline gate or justify a promotion (rule min-eval-samples); make "
                   "the command write a count (e.g. `n` beside the score)")
    elif samples < minimum:
        out.append(f"{samples} samples is under the minimum of {minimum} for comparisons (rule min-eval-samples): "
                   f"this result cannot pass the baseline gate or justify a promotion; use --limit {minimum} or more")
    n = len(spec.seed_list())
    if n > 1 and spec.evaluator == "command" and not evaluator.seeded:
        out.append("the eval command has no {seed} placeholder: trials differ only by the evaluator's own sampling")
    if n > 1 and spec.evaluator == "dev" and spec.temperature == 0:
        out.append("greedy decoding makes every trial identical: use --temperature > 0 for a meaningful range")
    if getattr(evaluator, "sandbox_note", ""):
        out.append(evaluator.sandbox_note)
    return out


def evaluate(ctx: Context, ck: Checkpoint, spec: EvalSpec, *, job: str | None = None,
             progress: Callable[[dict], None] | None = None) -> dict:
    """Run the trials, record the entry (one event), and return it; raise ACIError after recording a failure."""
    if ck.sampling is not None and spec.evaluator != "command":
        raise ACIError(f"{ck.id}: sampling settings are measured with the eval command, whose vLLM reads them from "
                       f"generation_config.json; the {spec.evaluator} evaluator decodes with its own settings")
    eval_id = f"ev-{time.strftime('%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"
    rel_dir = f"{EVALS}/{eval_id}"
    out_dir = ctx.state.root / rel_dir
    started = time.monotonic()
    trials: list[stats.Trial] = []
    seeds = spec.seed_list()
    evaluator, error, work = None, None, None
    try:
        evaluator = make_evaluator(ctx, spec, out_dir)
        model_path = ck.path
        if ck.id != checkpoints.BASE:
            work = ctx.workdir / WORK / eval_id
            prepare(ctx, ck, work, link=True, set_template=spec.set_template)
            model_path = str(work)
        for i, seed in enumerate(seeds):
            if progress:
                progress({"eval_id": eval_id, "trial": i + 1, "trials": len(seeds), "seed": seed})
            trials.append(evaluator.run(model_path, seed))
        ck.verify(ctx)  # the folder did not change while it was evaluated
    except ACIError as e:
        error = str(e)
    except OSError as e:
        if not disk.is_full_error(e):
            raise
        error = str(disk.full_error(e, ctx.workdir, f"preparing {ck.id} for evaluation"))
    finally:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
    entry = _entry(ctx, ck, spec, evaluator, trials, seeds, eval_id, time.monotonic() - started, error, job)
    _record(ctx, ck, entry, trials, rel_dir)
    if error:
        raise ACIError(f"evaluation {eval_id} of {ck.id} failed (recorded in {records.CHECKPOINTS}): {error}")
    return entry


def _entry(ctx, ck, spec, evaluator, trials, seeds, eval_id, duration, error, job) -> dict:
    label = evaluator.id if evaluator else spec.evaluator
    fields = dict(type="evaluated", checkpoint=ck.id, ts=iso(), path=ck.path, evaluator=label, limit=spec.limit,
                  seeds=seeds[:len(trials)] if error else seeds, scores=[t.score for t in trials],
                  duration_s=round(duration, 2), error=error, eval_id=eval_id, job=job)
    extra: dict = {"kind": spec.evaluator}
    if spec.evaluator == "command" and evaluator is not None and not evaluator.seeded:
        extra["seeds_passed"] = False  # the seeds label the trials; the command never received them
    if trials:
        fields["metric"] = trials[0].details.get("metric")
        extra["inspect_logs"] = [t.details["inspect_log"] for t in trials if t.details.get("inspect_log")]
        extra["sample_logs"] = [t.details["sample_log"] for t in trials if t.details.get("sample_log")]
        extra["beside"] = trials[0].details.get("beside")  # the first trial's breakdown, as the script wrote it
        extra["cpu_threads"] = trials[0].details.get("cpu_threads")  # what the command was given, and why
        # What the evaluator reported, else the explicit limit; never the benchmark's size, which an eval
        # command need not score whole (PostTrainBench's evaluate.py scores 150 GSM8K items without --limit).
        # unknown if any trial's count is: a known count must cover every trial it is claimed for
        samples = None if any(not t.samples for t in trials) else min(t.samples for t in trials)
        fields["samples"] = samples
        if not error:
            score, rng = stats.aggregate(trials)
            fields.update(score=score, range=rng)
            extra["warnings"] = warnings_for(ctx, spec, evaluator, samples)
    entry = records.CheckpointEntry(**fields).model_dump(mode="json")
    return {**entry, **{k: v for k, v in extra.items() if v not in (None, [])}}


def _record(ctx: Context, ck: Checkpoint, entry: dict, trials: list[stats.Trial], rel_dir: str) -> None:
    if entry.get("error"):
        msg = f"evaluation of {ck.id} failed: {entry['error'].splitlines()[0][:200]}"
    else:
        lo, hi = entry["range"]
        spread = f" (range {lo:.4g}..{hi:.4g})" if len(trials) > 1 else ""
        msg = f"{ck.id} scored {entry['score']:.4g}{spread} on {entry.get('samples') or 'an unknown number of'} " \
              f"samples by {entry['evaluator']}"
    with ctx.state.event("eval", msg, tool="eval-checkpoint", data={"eval_id": entry["eval_id"], "checkpoint": ck.id}) as w:
        if ck.new:
            w.append(records.CHECKPOINTS, ck.registration())
            ck.new = False
        if any(t.per_sample for t in trials):
            w.write_json(f"{rel_dir}/samples.json", {
                "eval_id": entry["eval_id"], "checkpoint": ck.id,
                "trials": [{"seed": t.seed, "score": t.score, "per_sample": t.per_sample} for t in trials],
            })
        for t in trials:
            name = t.details.get("metrics_file")
            if name and (ctx.state.root / rel_dir / name).is_file():
                w.track(f"{rel_dir}/{name}")
        w.append(records.CHECKPOINTS, entry)


def per_sample(ctx: Context, entry: dict) -> dict[str, float] | None:
    """An evaluation's per-item scores averaged over its trials, when it kept them."""
    data = ctx.state.read(f"{EVALS}/{entry.get('eval_id')}/samples.json") if entry.get("eval_id") else None
    if not data:
        return None
    return stats.mean_per_sample([stats.Trial(seed=t["seed"], score=t["score"], samples=None,
                                              per_sample=t.get("per_sample")) for t in data["trials"]])
