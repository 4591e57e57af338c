"""The micro-batch a training job runs with: the largest that fits, found by trying, not guessed.

A measurement job (`train dry-run --measure-steps N`) builds the real trainer and, before its N steps,
tries full training steps (forward, backward, optimizer step: activations, gradients and optimizer state
all allocated) on the longest rows of the real data:

* sizes are the divisors of the batch per optimizer step (`batch_size x grad_accum`, which stays what the
  agent asked for, so only the split between micro-batch and accumulation changes);
* growing: each size that fits is followed by the next one at least twice as large; on an out-of-memory
  error the search bisects between the last size that fit and the one that did not;
* gradient checkpointing stays off unless not even one row fits without it (it costs about a third more
  compute); then it goes on and the search runs again;
* the chosen size is timed over a few steps (tokens/s), and every trial is kept for the report.

The job then runs its N steps with the chosen split; its progress carries the plan (`batch`) and the
measured tokens/s, from which the `train` tool sizes the run to the deadline. `train start` uses the split
of the latest measurement of the same run shape (`shape_key`).

`largest_fitting` is plain logic; `TrainerProbe` runs the steps (torch imported lazily).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

TIMED_STEPS = 2
SHAPE_KEYS = ("method", "model_path", "max_length", "packing", "num_processes", "deepspeed")


@dataclass
class Trial:
    micro_batch: int
    gradient_checkpointing: bool
    fits: bool
    tokens: int = 0
    seconds: float | None = None
    peak_memory_gb: float | None = None
    error: str | None = None

    @property
    def tokens_per_s(self) -> float | None:
        return round(self.tokens / self.seconds, 1) if self.fits and self.seconds else None


@dataclass
class Plan:
    micro_batch: int
    grad_accum: int
    gradient_checkpointing: bool
    tokens_per_s: float | None
    trials: list[Trial] = field(default_factory=list)

    def report(self) -> dict[str, Any]:
        return {"micro_batch": self.micro_batch, "grad_accum": self.grad_accum,
                "gradient_checkpointing": self.gradient_checkpointing, "tokens_per_s": self.tokens_per_s,
                "trials": [{**asdict(t), "tokens_per_s": t.tokens_per_s} for t in self.trials]}


class DoesNotFit(Exception):
    """Not even one row fits, with gradient checkpointing."""


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def largest_fitting(sizes: list[int], fits: Callable[[int], bool]) -> int | None:
    """The largest of the ascending `sizes` for which `fits` holds, assuming a size fits when a larger one
    does: grow (next size at least double) until a size fails, then bisect. None: not even the first."""
    lo, hi, i = -1, len(sizes), 0  # sizes[lo] fits, sizes[hi] does not
    while True:
        if not fits(sizes[i]):
            hi = i
            break
        lo = i
        if i == len(sizes) - 1:
            break
        i = next((k for k in range(i + 1, len(sizes)) if sizes[k] >= 2 * sizes[i]), len(sizes) - 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(sizes[mid]):
            lo = mid
        else:
            hi = mid
    return sizes[lo] if lo >= 0 else None


def search(total: int, probe: Callable[[int, bool], Trial], gradient_checkpointing: bool | None) -> Plan:
    """The plan for `total` rows per optimizer step; `gradient_checkpointing` None: off unless needed."""
    trials: list[Trial] = []
    sizes = divisors(total)

    def fits_with(gc_on: bool) -> Callable[[int], bool]:
        def fits(n: int) -> bool:
            trials.append(probe(n, gc_on))
            return trials[-1].fits
        return fits

    options = [gradient_checkpointing] if gradient_checkpointing is not None else [False, True]
    for gc_on in options:
        best = largest_fitting(sizes, fits_with(gc_on))
        if best is not None:
            timed = next(t for t in reversed(trials) if t.micro_batch == best and t.gradient_checkpointing == gc_on)
            return Plan(best, total // best, gc_on, timed.tokens_per_s, trials)
    tried = "even with" if True in options else "without (it was turned off)"
    raise DoesNotFit(f"one row of the longest data does not fit in memory {tried} gradient checkpointing "
                     f"(trials: {[asdict(t) for t in trials]}): train LoRA, shorten --max-length, or shard with "
                     f"--deepspeed zero3 over several GPUs")


def shape_key(cfg: dict) -> dict:
    """What a measured split depends on, besides the batch per step."""
    return {"lora": bool(cfg.get("lora")), **{k: cfg.get(k) for k in SHAPE_KEYS}}


def measured(state: Any, cfg: dict) -> tuple[dict, str] | None:
    """(plan, job id) of the latest measurement that searched the batch for a run of `cfg`'s shape and batch
    per optimizer step, or None."""
    from aci import jobfiles, jobs, records

    key, total = shape_key(cfg), cfg["batch_size"] * cfg["grad_accum"]
    for job in sorted(jobs.list_jobs(state, kind="train"), key=lambda j: j.started_at, reverse=True):
        plan = job.progress.get("batch") or {}
        if not plan.get("searched") or job.status != "succeeded":
            continue
        probe = state.read(f"{records.JOBS}/{job.id}/{jobfiles.CONFIG}") or {}
        if shape_key(probe) == key and probe.get("batch_size", 0) * probe.get("grad_accum", 0) == total:
            return plan, job.id
    return None


def is_oom(e: BaseException) -> bool:
    """An allocation failure on the accelerator (torch raises several types for it)."""
    import torch

    if isinstance(e, torch.OutOfMemoryError):
        return True
    text = str(e)
    return isinstance(e, RuntimeError) and ("out of memory" in text.lower() or "CUBLAS_STATUS_ALLOC_FAILED" in text)


class TrainerProbe:
    """One trial = `TIMED_STEPS + 1` training steps of the trainer's own model, optimizer and collator on
    the `n` longest rows of its dataset (the first step warms up and allocates the optimizer state)."""

    def __init__(self, trainer: Any):
        self.trainer = trainer
        rows = list(trainer.train_dataset)
        self.rows = sorted(rows, key=lambda r: -len(r["input_ids"]))

    def _batch(self, n: int) -> tuple[dict, int]:
        rows = [self.rows[i % len(self.rows)] for i in range(n)]
        return self.trainer.data_collator(rows), sum(len(r["input_ids"]) for r in rows)

    def __call__(self, n: int, gradient_checkpointing: bool) -> Trial:
        import torch

        t, model = self.trainer, self.trainer.model
        cuda = torch.cuda.is_available()
        if gradient_checkpointing and not getattr(model, "is_gradient_checkpointing", False):
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            if hasattr(model, "enable_input_require_grads"):
                model.enable_input_require_grads()  # LoRA: frozen embeddings still pass gradients on
        if t.optimizer is None:
            t.create_optimizer()
        if not hasattr(t, "current_gradient_accumulation_steps"):  # set by the training loop, read by the step
            t.current_gradient_accumulation_steps = 1
        trial = Trial(micro_batch=n, gradient_checkpointing=gradient_checkpointing, fits=False)
        error = None
        try:
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            batch, tokens = self._batch(n)
            inputs = t._prepare_inputs(batch)
            for step in range(TIMED_STEPS + 1):
                if step == 1:
                    if cuda:
                        torch.cuda.synchronize()
                    t0 = time.perf_counter()
                t.training_step(model, inputs)
                t.optimizer.step()
                t.optimizer.zero_grad(set_to_none=True)
            if cuda:
                torch.cuda.synchronize()
            trial.fits, trial.tokens = True, tokens * TIMED_STEPS
            trial.seconds = round(time.perf_counter() - t0, 4)
        except Exception as e:  # noqa: BLE001 - only out-of-memory is a result; anything else is re-raised
            if not is_oom(e):
                raise
            error = f"{type(e).__name__}: {str(e)[:160]}"
        inputs = batch = None  # drop every reference (and the exception's frames) before freeing memory
        t.optimizer.zero_grad(set_to_none=True)
        gc.collect()
        if cuda:
            trial.peak_memory_gb = round(torch.cuda.max_memory_allocated() / 2**30, 2)
            torch.cuda.empty_cache()
        trial.error = error
        print(f"[aci] batch trial: {n} rows, gradient checkpointing {gradient_checkpointing}: "
              f"{'fits, ' + str(trial.tokens_per_s) + ' tokens/s' if trial.fits else 'out of memory'}", flush=True)
        return trial


def release(trainer: Any) -> None:
    """Free what a probed trainer holds (optimizer state, gradients) before the real one is built."""
    import torch

    trainer.optimizer = None
    trainer.model.zero_grad(set_to_none=True)
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
