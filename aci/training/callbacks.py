"""The trainer callback that ties a TRL run to the run's state.

* progress (step, total, loss and the first loss, learning rate, tokens/s, ETA, the model's vocabulary
  size) goes to the job's `progress.json`, at every log and at most every `PROGRESS_EVERY_S` seconds in
  between, so `train status` is current but a fast loop is not slowed by disk writes;
* each checkpoint is registered in `checkpoints.jsonl` the moment the trainer has written it (and, for
  LoRA, optionally saved merged first), so `eval-checkpoint` can pick it up while training goes on;
* the job saves and stops by itself at `stop_at` (deadline minus the final reserve), and on SIGTERM
  (`train stop`) it saves a last checkpoint at the end of the current step before exiting.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

from transformers import TrainerCallback

from aci import jobs, records
from aci.evaluation import identity
from aci.state import State, iso, now, parse_ts
from aci.training.config import TrainConfig

PROGRESS_EVERY_S = 2.0
SAVE_MARGIN_S = 60.0  # time kept for the last save before stop_at


class JobCallback(TrainerCallback):
    def __init__(self, cfg: TrainConfig):
        self.cfg = cfg
        self.state = State(cfg.state)
        self.stop_at = parse_ts(cfg.stop_at) if cfg.stop_at else None
        self.progress: dict = {"phase": "preparing", "step": 0, "job": cfg.job}
        self.t0: float | None = None
        self.written = 0.0
        self.stop_reason: str | None = None
        self.training = False
        signal.signal(signal.SIGTERM, self._on_sigterm)

    # -- progress ------------------------------------------------------------------------------
    def write(self, force: bool = False, **fields) -> None:
        self.progress.update(fields)
        t = time.monotonic()
        if force or t - self.written >= PROGRESS_EVERY_S:
            self.written = t
            jobs.write_progress(self.progress)

    def preparing(self, what: str, done: int | None = None, total: int | None = None) -> None:
        """A step before training starts (loading the model, tokenizing N samples), so that `train status`
        says what a job is doing before its first step, with counts where there are any."""
        known = self.progress.get("preparing") or {}
        step = {"what": what, "since": known.get("since") if known.get("what") == what else iso()}
        if total:
            step.update(done=done or 0, total=total)
        self.write(force=known.get("what") != what, phase="preparing", preparing=step)

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.t0 = time.monotonic()
        self.training = True
        self.progress.pop("preparing", None)
        if state.is_world_process_zero:
            vocab = getattr(getattr(model, "config", None), "vocab_size", None)  # the span of the softmax
            self.write(force=True, phase="training", total_steps=state.max_steps, started_training_at=iso(),
                       **({"vocab_size": vocab} if isinstance(vocab, int) else {}))

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs or self.t0 is None:
            return
        elapsed = time.monotonic() - self.t0
        fields = {k: logs[k] for k in ("loss", "learning_rate", "reward", "grad_norm") if k in logs}
        # the trainer's own count when the job asks for it (packed rows: TRL counts one row per batch)
        tokens = getattr(state, "num_input_tokens_seen", 0) or logs.get("num_tokens") or 0
        if tokens and elapsed > 0:
            fields.update(tokens=int(tokens), tokens_per_s=round(tokens / elapsed, 1))
        if not fields or "train_loss" in logs:  # the closing summary (train_runtime is in every log counting tokens)
            return
        if "loss" in fields and "first_loss" not in self.progress:  # `aci.training.chance` reads it
            fields.update(first_loss=fields["loss"], first_loss_step=state.global_step)
        self.write(force=True, **fields, **self._timing(state, elapsed))
        print(f"[aci] step {state.global_step}/{state.max_steps} " +
              " ".join(f"{k}={v}" for k, v in fields.items()), flush=True)

    def on_step_end(self, args, state, control, **kwargs):
        if self.t0 is None:
            return
        elapsed = time.monotonic() - self.t0
        if state.is_world_process_zero:
            self.write(**self._timing(state, elapsed))
        if self.stop_reason is None and self.stop_at is not None and state.global_step:
            step_s = elapsed / state.global_step
            if (self.stop_at - now()).total_seconds() < 2 * step_s + SAVE_MARGIN_S:
                self.stop_reason = f"reached the final reserve (stop_at {self.cfg.stop_at})"
        if self.stop_reason:
            control.should_save = not self.cfg.measure
            control.should_training_stop = True
            if state.is_world_process_zero:
                self.write(force=True, stop_reason=self.stop_reason)

    def _timing(self, state, elapsed: float) -> dict:
        step, total = state.global_step, state.max_steps
        out = {"step": step, "total_steps": total, "epoch": round(state.epoch or 0.0, 3), "elapsed_s": round(elapsed, 1)}
        if step:
            eta = (total - step) * elapsed / step
            out.update(eta_s=round(eta, 1), steps_per_s=round(step / elapsed, 4) if elapsed else None)
        return out

    def on_train_end(self, args, state, control, **kwargs):
        self.training = False
        if state.is_world_process_zero:
            self.write(force=True, phase="finished", step=state.global_step, eta_s=0)

    def _on_sigterm(self, signum, frame):
        if not self.training:  # nothing to save yet: end now
            raise SystemExit(128 + signum)
        self.stop_reason = "stop requested"

    # -- checkpoints -----------------------------------------------------------------------------
    def on_save(self, args, state, control, model=None, **kwargs):
        if not state.is_world_process_zero or self.cfg.measure:
            return
        step = state.global_step
        folder = Path(args.output_dir) / f"checkpoint-{step}"
        tokenizer = kwargs.get("processing_class") or kwargs.get("tokenizer")
        self.write(force=True, phase="saving")
        adapter = self.cfg.lora is not None
        merged = None
        if adapter and self.cfg.merge_lora and model is not None:
            merged = folder / "merged"
            save_merged(model, tokenizer, merged)
        entry = records.CheckpointEntry(
            type="registered", checkpoint=f"{self.cfg.job}/checkpoint-{step}", ts=now(), path=str(folder),
            parent=self.cfg.parent, job=self.cfg.job, step=step, adapter=adapter, **identity.pin(folder),
        ).model_dump(mode="json", exclude_none=True)
        entry.update(method=self.cfg.method, loss=self.progress.get("loss"), **({"merged": str(merged)} if merged else {}))
        with self.state.event("train", f"checkpoint {entry['checkpoint']} saved", tool="train",
                              data={"job": self.cfg.job, "checkpoint": entry["checkpoint"]}) as w:
            w.append(records.CHECKPOINTS, entry)
        self.write(force=True, phase="training", last_checkpoint=entry["checkpoint"])


def save_merged(model, tokenizer, out: Path) -> None:
    """Save a LoRA model merged into its base (a plain model folder vLLM can serve), leaving training as is."""
    import copy

    merged = copy.deepcopy(model).merge_and_unload()
    merged.save_pretrained(out, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(out)
    del merged
