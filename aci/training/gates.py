"""The checks a training run must pass before it is launched; each refusal names the rule it enforces.

* `base-model-only`: the model is the run card's base model or a registered checkpoint whose `parent`
  chain ends at `base` and whose folder still has the content it was registered with;
* `forbidden-datasets`: neither the data file nor its declared source is on the profile's banned list;
* `no-test-data`: under a profile that requires it, the data file has a passing contamination result in
  state *for its current content* (the manifest is pinned to the hash of the bytes scanned), in mode
  `simple`, against the run card's pinned reference with at least one item checked; the job then
  trains only on bytes with that hash (`aci.training.data.pinned_content`);
* `eval-template`: the template is the one the evaluation renders (the run card's) and renders the data;
* `final-reserve`: the run, at measured or declared throughput, ends before the deadline minus reserve (a
  `wsd` run: its first checkpoint does, since its decay is timed to the stop time).

No heavy import here: the tool imports this module.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from aci import clock, jobfiles, jobs, manifest, records
from aci.context import Context
from aci.errors import ACIError
from aci.evaluation import identity
from aci.state import now, parse_ts
from aci.training import pace

STARTUP_S = 60.0  # loading the model before the first step (tokenizing the data is measured, see check_deadline)


@dataclass
class Source:
    """The model a job trains from."""

    checkpoint: str  # "base" or "<job>/checkpoint-N"
    path: str  # folder or hub id that from_pretrained loads
    adapter: bool  # path is a LoRA adapter (merged into its base by the job)


def resolve_model(ctx: Context, model: str) -> Source:
    """`base`, a registered checkpoint id, or a path to either; anything else is refused."""
    base = ctx.require_card().base_model
    base_path = ctx.workdir / base
    base_ref = str(base_path.resolve()) if base_path.exists() else base
    registered = {e["checkpoint"]: e for e in ctx.state.lines(records.CHECKPOINTS) if e.get("type") == "registered"}
    if model in ("base", base, base_ref):
        return Source("base", base_ref, False)
    if model not in registered:  # perhaps a path to the base model, a checkpoint, or its merged/ copy
        p = Path(model) if Path(model).is_absolute() else ctx.workdir / model
        if p.exists():
            p = p.resolve()
            if str(p) == base_ref:
                return Source("base", base_ref, False)
            model = next((cid for cid, e in registered.items() if e.get("path") and Path(e["path"]).resolve() in
                          (p, p.parent)), model)
    entry = registered.get(model)
    if entry is None:
        known = ", ".join(["base", *list(registered)[-5:]])
        raise ctx.rules.refuse("base-model-only", f"model {model!r} is neither the run card's base model ({base}) nor "
                                                  f"a registered checkpoint (known: {known})")
    chain, cur = [model], entry.get("parent")
    while cur != "base":
        if cur is None or cur not in registered or cur in chain:
            raise ctx.rules.refuse("base-model-only", f"checkpoint {model!r} does not descend from the base model "
                                                      f"(its ancestry {' <- '.join(chain)} breaks at {cur!r})")
        chain.append(cur)
        cur = registered[cur].get("parent")
    merged = entry.get("merged")
    path = merged if merged and Path(merged).is_dir() else entry.get("path")
    if not path or not Path(path).exists():
        raise ACIError(f"checkpoint {model!r} is registered but its folder {path} is gone")
    identity.verify(ctx, entry, (ctx.workdir / entry["path"]).resolve())
    return Source(model, path, bool(entry.get("adapter")) and path != merged)


def check_data(ctx: Context, path: Path, sources: list[str]) -> str:
    """Banned names first (the file's name and declared sources, not the folders above it), then the
    contamination result for the file's current bytes. Returns the sha256 the job must train on."""
    for name in filter(None, [*sources, path.name]):
        ctx.rules.check_dataset_name(name)
    recorded = manifest.read(ctx.state, path)
    for name in filter(None, [(recorded or {}).get(k) for k in ("source", "dataset")]):
        ctx.rules.check_dataset_name(str(name))
    digest = manifest.file_hash(path)
    if not ctx.rules.profile.contamination.required_before_training:
        return digest
    current = recorded if recorded and recorded.get("sha256") == digest else None
    if current is None and recorded and recorded.get("contamination"):
        detail = f"{path.name} changed since its contamination check (hash differs)"
    else:
        closed = contamination_gate(ctx, (current or {}).get("contamination"))
        if closed is None:
            return digest
        detail = f"{path.name} {closed}"
    raise ctx.rules.refuse("no-test-data", f"{detail}; run `aci contamination` on this exact file and train "
                                           f"only on data that passes")


def contamination_gate(ctx: Context, result: dict | None) -> str | None:
    """Why a contamination result (`aci.contamination.verdict.Record`, as the manifest holds it) does not let
    its file be trained on (None: it does). Only a pass of the SIMPLE n-gram check (mode simple), against
    the run card's pinned reference with items checked, counts: a pass against anything else proves
    nothing about the benchmark. The pass already counts the task's provided tool's flags."""
    if not result or not result.get("verdict"):
        return "has no contamination result in state"
    if result["verdict"] != "pass":
        return (f"failed its contamination check ({result.get('counted', result.get('flagged', '?'))} rows counted, "
                f"{result.get('tolerated_rows', '?')} tolerated)")
    if result.get("mode") != "simple":
        return f"passed in mode {result.get('mode')}, not the SIMPLE n-gram check (mode simple)"
    coverage = result.get("coverage") or {}
    if not coverage.get("judge", 0) + coverage.get("short", 0):
        return "passed against a reference of which no item could be checked (0 checked)"
    pin = ctx.card.reference if ctx.card else None
    if not pin:
        return "was checked, but no benchmark reference is pinned in the run card (`aci plan update --reference`)"
    if result.get("reference_sha256") != pin["sha256"]:
        return (f"passed against {result.get('reference')}, not the run card's pinned reference {pin['path']} "
                f"(sha256 {pin['sha256'][:12]})")
    return None


def reference_path(ctx: Context, given: str) -> Path:
    """A reference path: inside the roots, or the task's provided test items beside the task folder
    (`aci.contamination.shared`), which are outside them by design."""
    from aci.contamination import shared

    provided = shared.beside(ctx.workdir, shared.ITEMS)
    p = Path(given).expanduser()
    if provided and (p if p.is_absolute() else ctx.workdir / p).resolve() == provided.resolve():
        return provided.resolve()
    return ctx.path(given, must_exist=True, what="reference")


def pin_at_first_check(ctx: Context, path: Path, sha256: str) -> dict | None:
    """The run card's pinned reference; a run card without one pins `path` (the first check's)."""
    card = ctx.card
    if not card or card.reference:
        return card.reference if card else None
    pin = {"path": str(path), "sha256": sha256}
    model = card.model_copy(update={"reference": pin})
    with ctx.state.event("plan", f"reference pinned at the first contamination check: {path} (sha256 "
                                 f"{sha256[:12]})", tool="contamination") as w:
        w.write_json(records.RUN_CARD, model.model_dump(mode="json", exclude_none=True))
    ctx.forget()
    return pin


def pin_reference(ctx: Context, given: str, old: dict | None) -> dict:
    """The run card's `reference` entry ({path, sha256}) for the benchmark's test items. A pinned
    reference (`old`) is not replaced under a strict profile: every contamination verdict is judged
    against it."""
    path = reference_path(ctx, given)
    pin = {"path": str(path), "sha256": manifest.file_hash(path)}
    if old and old != pin and ctx.rules.strict:
        raise ctx.rules.refuse("no-test-data", f"the run card already pins the reference {old['path']} (sha256 "
                                               f"{old['sha256'][:12]}); it cannot be replaced under these rules")
    return pin


def resolve_template(ctx: Context, given: str | None) -> Path | None:
    """The template to render with: the run card's unless told otherwise (refused under a strict profile)."""
    card_template = ctx.card.template if ctx.card else None
    card_path = ctx.path(card_template, what="template") if card_template else None
    if given:
        p = ctx.path(given, what="template")
        if not p.is_file():
            raise ctx.rules.refuse("eval-template", f"template {given!r} does not exist ({p})")
        if card_path and p != card_path and ctx.rules.strict:
            raise ctx.rules.refuse("eval-template", f"the evaluation renders {card_template}, not {given}; train with "
                                                    f"the run card's template")
        return p
    if card_path:
        if not card_path.is_file():
            raise ctx.rules.refuse("eval-template", f"the run card's template {card_template} does not exist")
        return card_path
    if ctx.rules.strict:
        raise ctx.rules.refuse("eval-template", "the run card names no template; set it with `aci plan update "
                                                "--template templates/<model>.jinja`")
    return None


@dataclass
class Work:
    """How much a run will process: optimizer steps and tokens."""

    steps: int
    tokens: float
    tokens_per_step: float


def sft_work(rows: int, seq_per_sample: float, mean_tokens: float, *, packing: bool, max_length: int,
             batch: int, grad_accum: int, processes: int, epochs: float, max_steps: int | None) -> Work:
    seqs = rows * seq_per_sample
    tokens_epoch = seqs * mean_tokens
    per_epoch_rows = math.ceil(tokens_epoch / max_length) if packing else math.ceil(seqs)
    steps_epoch = max(1, math.ceil(per_epoch_rows / (batch * grad_accum * processes)))
    per_step = tokens_epoch / steps_epoch
    steps = max_steps or max(1, math.ceil(epochs * steps_epoch))
    return Work(steps, per_step * steps, per_step)


def grpo_work(rows: int, mean_prompt: float, *, completion: int, generations: int, batch: int, grad_accum: int,
              processes: int, epochs: float, max_steps: int | None) -> Work:
    completions_per_step = batch * grad_accum * processes
    steps_epoch = max(1, math.ceil(rows * generations / completions_per_step))
    per_step = completions_per_step * (mean_prompt + completion)
    steps = max_steps or max(1, math.ceil(epochs * steps_epoch))
    return Work(steps, per_step * steps, per_step)


@dataclass
class Rate:
    """The throughput a start estimate uses, and where it comes from."""

    tokens_per_s: float | None
    source: str
    job: str | None = None
    measured_at: str | None = None
    differs: list[str] = field(default_factory=list)
    load_s: float | None = None  # that job's time from launch to a ready trainer, tokenizing left out


# what a measurement shares with the run at best, besides the method
MATCHED = ("model_path", "lora", "max_length", "num_processes")


def measured_rate(ctx: Context, cfg: dict) -> Rate:
    """Tokens/s of the latest earlier job of the same method that shares the most with `cfg` (model first,
    then LoRA setting, max_length and process count): which job, how long ago, and what differs."""
    def shown(c: dict, k: str):
        return bool(c.get(k)) if k == "lora" else c.get(k, 1) if k == "num_processes" else c.get(k)

    best: tuple | None = None
    for job in sorted(jobs.list_jobs(ctx.state, kind="train"), key=lambda j: j.started_at, reverse=True):
        rate = job.progress.get("tokens_per_s")
        jc = ctx.state.read(f"{records.JOBS}/{job.id}/{jobfiles.CONFIG}") or {}
        if not rate or jc.get("method") != cfg["method"] or jc.get("lr_probe"):  # a probe trains several times
            continue
        differs = [k for k in MATCHED if shown(jc, k) != shown(cfg, k)]
        score = ("model_path" in differs, len(differs))
        if best is None or score < best[0]:
            best = (score, job, rate, jc, differs)
        if not differs:
            break
    if best is None:
        return Rate(None, "no measurement")
    _, job, rate, jc, differs = best
    at = job.progress.get("updated_at")
    age = f" {pace.span((now() - parse_ts(at)).total_seconds())} ago" if at else ""
    said = {"model_path": lambda c: f"model {c.get('model_path')}", "lora": lambda c: "LoRA" if c.get("lora") else
            "full weights", "max_length": lambda c: f"max_length {c.get('max_length')}",
            "num_processes": lambda c: f"{shown(c, 'num_processes')} process(es)"}
    what = (f"; differs: {', '.join(f'{said[k](jc)} (this run: {said[k](cfg)})' for k in differs)}" if differs else
            " (same model, method, LoRA setting, max_length and process count)")
    return Rate(rate, f"measured by job {job.id}{age}{what}", job.id, at, differs, load_s(job.progress))


def load_s(progress: dict) -> float | None:
    """A job's seconds from launch to a ready trainer, less its tokenizing (None: not measured)."""
    startup = progress.get("startup") or {}
    return startup["ready_s"] - startup.get("tokenize_s", 0.0) if "ready_s" in startup else None


def check_reserve(ctx: Context) -> None:
    """Refuse any training once the final reserve has started: a clock reading, checked before the data is
    read or a tokenizer loaded (a dry run refused after 21.7 s of such work taught this)."""
    left = ctx.clock.left_for_work()
    if left is not None and left <= timedelta(0):
        raise ctx.rules.refuse("final-reserve", f"the final reserve has started ({clock.fmt(ctx.clock.left())} left, "
                                                f"reserve {clock.fmt(ctx.clock.reserve)}); no new training")


def check_deadline(ctx: Context, work: Work, rate: Rate, *, tokenize_s: float = 0.0, tokenize_source: str = "",
                   lr_schedule: str = "cosine") -> dict:
    """Refuse a run that cannot end before the final reserve; return the estimate either way.

    The estimate is loading (measured by the job the rate comes from, else `STARTUP_S`) plus `tokenize_s`
    (the job renders and tokenizes the whole data file before step 1 unless an earlier job's tokenized
    data is cached; the checks measure it on their samples) plus the tokens at the rate. A `wsd` run that
    does not fit is not refused: its decay is timed to end by the stop time (`aci.training.schedule`),
    so it is refused only when not one step, and so no checkpoint, would end before the reserve.
    """
    check_reserve(ctx)
    left = ctx.clock.left_for_work()
    load_s, load_source = (rate.load_s, f"measured by job {rate.job}") if rate.load_s is not None else \
        (STARTUP_S, "assumed: no earlier job measured it")
    startup = load_s + tokenize_s
    r = rate.tokens_per_s
    duration = clock.estimate(work.tokens, r, startup)
    step_s = work.tokens_per_step / r if r and work.tokens_per_step else None
    info = {"steps": work.steps, "tokens": int(work.tokens), "tokens_per_s": r, "rate_source": rate.source,
            "rate_job": rate.job, "rate_measured_at": rate.measured_at, "rate_differs": rate.differs,
            "step_s": step_s, "duration": clock.fmt(duration), "duration_s": duration.total_seconds() if duration
            else None, "startup_s": round(load_s, 1), "startup_source": load_source, "tokenize_s": round(tokenize_s, 1),
            "tokenize_source": tokenize_source, "lr_schedule": lr_schedule, "time_left_for_work": clock.fmt(left),
            "deadline_source": ctx.clock.source}
    if left is None or duration is None or duration <= left:
        return info
    usable = left.total_seconds() - startup
    fit = int(usable / step_s) if usable > 0 and step_s else 0
    prep = f", after ~{load_s:,.0f} s loading ({load_source}) and ~{tokenize_s:,.0f} s tokenizing the data"
    if fit < 1:
        raise ctx.rules.refuse("final-reserve", f"no run of even one step fits, so no checkpoint would be saved "
                                                f"before the final reserve: {clock.fmt(left)} is left, and a step "
                                                f"takes ~{step_s or 0:,.1f} s at {r:,.0f} tokens/s ({rate.source}){prep}")
    if lr_schedule == "wsd":
        info.update(cut=True, steps_that_fit=fit, note=(
            f"the stop time comes before the {work.steps} planned steps: at this rate the job reaches about step "
            f"{fit}, and its wsd decay is timed to end there (re-planned as the job measures its own rate)"))
        return info
    raise ctx.rules.refuse("final-reserve", f"this run of {work.steps} steps (~{int(work.tokens):,} tokens at "
                                            f"{r:,.0f} tokens/s, {rate.source}{prep}) would take "
                                            f"{clock.fmt(duration)} but only {clock.fmt(left)} is left before the "
                                            f"final reserve; max_steps={fit} would fit, or --lr-schedule wsd, "
                                            f"which decays to end by the stop time")
