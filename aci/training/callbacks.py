"""The trainer callback that ties a TRL run to the run's state.

* progress (step, total, loss and the first loss, learning rate, tokens/s at the step rate measured now,
  ETA, time to step 1, the model's vocabulary size) goes to the job's `progress.json`, at every log and
  at most every `PROGRESS_EVERY_S` seconds in between, so `train status` is current but a fast loop is
  not slowed by disk writes;
* each checkpoint is registered in `checkpoints.jsonl` the moment the trainer has written it (and, for
  LoRA, optionally saved merged first), pinned by its content hash, so `eval-checkpoint` can pick it up
  while training goes on;
* only the newest `keep_checkpoints` (default 3) of the job stay on disk: older ones are deleted as new
  ones are saved (never the promoted one, nor one an evaluation job is reading), so a long run does not
  fill the disk; the event that registers a checkpoint names those removed;
* the step time is measured as the job runs (`aci.training.pace`) and, under the `wsd` schedule, the
  learning-rate plan re-decided after every step (`aci.training.schedule`): the decay starts so that it
  ends, and the job saves and stops, before `stop_at`; the forecast (rate now, planned end, whether the
  stop time cuts the schedule, and what the job did about it) is in the progress as `schedule`;
* with a dev set (`aci.training.dev`) the job scores generated replies every `dev.every` steps, logs the
  curve in the progress as `dev`, and saves a checkpoint at each new best, which rotation keeps;
* the job saves and stops by itself at `stop_at` (deadline minus the final reserve) when its schedule
  does not end first, and on SIGTERM (`train stop`) it saves a last checkpoint at the end of the current
  step before exiting;
* with several ranks (`aci.training.ranks`) every rank runs this callback: rank 0's count of the steps
  that fit before `stop_at` and any rank's stop request are agreed after every optimizer step, so all
  ranks follow the same learning-rate plan and stop after the same step, and so is a dev point's new
  best (a save is every rank's step under DeepSpeed); each machine's first rank writes the progress (a
  job's `train status` on every machine), rank 0 alone saves, registers checkpoints and scores the dev
  set. The progress names the ranks (`processes`).
"""

from __future__ import annotations

import shutil
import signal
import time
from pathlib import Path

from transformers import TrainerCallback

from aci import cpus, jobfiles, jobs, records
from aci.evaluation import identity
from aci.state import State, iso, now, parse_ts
from aci.training import cooldown, dev, pace, ranks, schedule
from aci.training.config import TrainConfig

PROGRESS_EVERY_S = 2.0
STOP_REQUESTED = "stop requested"


class JobCallback(TrainerCallback):
    def __init__(self, cfg: TrainConfig, launched: float | None = None):
        self.cfg = cfg
        self.state = State(cfg.state)
        self.stop_at = parse_ts(cfg.stop_at) if cfg.stop_at else None
        self.progress: dict = {"phase": "preparing", "step": 0, "job": cfg.job}
        self.launched = launched if launched is not None else time.monotonic()  # when the job's process began
        self.t0: float | None = None
        self.written = 0.0
        self.stop_reason: str | None = None
        self.requested = False  # SIGTERM reached this rank (the ranks act on it once agreed)
        self.reports = ranks.reports()  # this machine's progress and log lines
        self.training = False
        self.plan = schedule.Wsd() if cfg.lr_schedule == "wsd" else None  # read by the trainer's scheduler
        self.decay = cooldown.Requested() if self.plan else None  # `train stop --decay`
        self.pace = pace.Pace(cfg.estimate, exit_s=pace.RANKS_EXIT_S if ranks.world() > 1 else 0.0)
        self.applied_lr: float | None = None  # the learning rate of the last optimizer step
        self.more: int | None = None  # steps that still end, and save, before stop_at (None: unknown)
        self.changed: str | None = None  # what the last re-plan did, in words
        self.dev = None if cfg.dev is None or cfg.measure else dev.DevCurve(
            cfg.dev, workdir=cfg.workdir, template=None, kwargs=cfg.template_kwargs)  # the tokenizer's = the eval's
        # on CPU: threads from the cores other processes leave free, the first window while the job prepares
        self.cpus: cpus.Governor | None = None if _cuda() else cpus.Governor()
        signal.signal(signal.SIGTERM, self._on_sigterm)

    # -- progress ------------------------------------------------------------------------------
    def write(self, force: bool = False, **fields) -> None:
        self.progress.update(fields)
        if not self.reports:
            return
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
        self.pace.started(self.t0)
        self.training = True
        self.progress.pop("preparing", None)
        if self.cpus:
            self._threads(force=True)
        if model is not None:
            self.pace.save_bytes = checkpoint_bytes(model, adapter=self.cfg.lora is not None, merged=self.cfg.merge_lora)
        members = ranks.members()  # every rank: a collective
        vocab = getattr(getattr(model, "config", None), "vocab_size", None)  # the span of the softmax
        self.write(force=True, phase="training", total_steps=state.max_steps, started_training_at=iso(),
                   processes={"world_size": len(members), "ranks": members},
                   **({"vocab_size": vocab} if isinstance(vocab, int) else {}))

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not self.reports or not logs or self.t0 is None:
            return
        elapsed = time.monotonic() - self.t0
        fields = {k: logs[k] for k in ("loss", "learning_rate", "reward", "grad_norm") if k in logs}
        # the trainer's own count when the job asks for it (packed rows: TRL counts one row per batch)
        tokens = getattr(state, "num_input_tokens_seen", 0) or logs.get("num_tokens") or 0
        if tokens and elapsed > 0 and state.global_step:  # at the step rate measured now (the first step's
            step_s = self.pace.measured() or elapsed / state.global_step  # warm-up left out), else on average
            fields.update(tokens=int(tokens), tokens_per_s=round(tokens / state.global_step / step_s, 1))
        if not fields or "train_loss" in logs:  # the closing summary (train_runtime is in every log counting tokens)
            return
        if "loss" in fields and "first_loss" not in self.progress:  # `aci.training.chance` reads it
            fields.update(first_loss=fields["loss"], first_loss_step=state.global_step)
        self.write(force=True, **fields, **self._timing(state, elapsed))
        print(f"[aci] step {state.global_step}/{state.max_steps} " +
              " ".join(f"{k}={v}" for k, v in fields.items()), flush=True)

    def on_optimizer_step(self, args, state, control, optimizer=None, **kwargs):
        """Between the optimizer's step and the scheduler's: measure the step, agree with the other ranks
        (rank 0's count of the steps left, any rank's stop request), re-plan, so the scheduler sets the next
        step's rate from the plan as it stands now, the same on every rank."""
        if self.t0 is None:
            return
        if optimizer is not None and optimizer.param_groups:
            self.applied_lr = optimizer.param_groups[0]["lr"]
        self.pace.step_ended(time.monotonic())
        step = state.global_step + 1  # the trainer counts the step once the scheduler has stepped
        more = self.pace.more_steps((self.stop_at - now()).total_seconds()) if self.stop_at else None
        asked = self.decay.end if self.decay else None
        cap = self.decay.bound(step, self.plan) if self.decay else None
        if cap is not None:
            more = cap if more is None else min(more, cap)
        stop, self.more = ranks.agree(self.requested, more)
        if stop and self.stop_reason is None:
            self.stop_reason = STOP_REQUESTED
        self.changed = self.plan.follow(step, self.more) if self.plan else None
        if cap is not None and asked is None:
            self.progress["decay_requested"] = {"after_step": step, "end_step": self.decay.end}
            self.changed = (f"decay requested (train stop --decay) after step {step}: the rate reaches its floor, "
                            f"and the job saves and stops, at step {self.plan.end}")

    def on_step_end(self, args, state, control, **kwargs):
        if self.t0 is None:
            return
        t = time.monotonic()
        step, at, more, changed = state.global_step, now(), self.more, self.changed
        self.changed = None
        if step == 1:
            self.progress.setdefault("startup", {})["to_first_step_s"] = round(t - self.launched, 1)
        end = self.plan.end if self.plan else state.max_steps
        if self.stop_reason is None and step < state.max_steps:
            if self.plan and step >= end:
                self.stop_reason = f"planned end: the wsd decay reached its floor at step {step}"
            elif more is not None and more < 1:
                cut = f", before the wsd decay reached its floor (planned for step {end})" if self.plan else ""
                self.stop_reason = f"reached the final reserve (stop_at {self.cfg.stop_at}){cut}"
        if self.cpus:
            self._threads()
        if self.dev and self.dev.due(step, last=bool(self.stop_reason) or step >= state.max_steps):
            best = self._dev_point(step, kwargs) if state.is_world_process_zero else None
            if ranks.agree(False, best)[1]:  # a new best: every rank saves (rank 0 writes it)
                control.should_save = True
        fields = self._timing(state, t - self.t0)
        fields["schedule"] = {**pace.forecast(self.pace, step=step, end=end, total=state.max_steps, at=at,
                                              kind=self.cfg.lr_schedule, stop_at=self.stop_at),
                              **(self.plan.report(step) if self.plan else {})}
        if changed:
            fields["schedule"]["changed"] = changed
            self.progress["schedule_events"] = [*self.progress.get("schedule_events", [])[-4:],
                                                {"step": step, "at": iso(at), "what": changed}]
            if self.reports:
                print(f"[aci] schedule: {changed}", flush=True)
        self.write(force=bool(changed), **fields)
        if self.stop_reason:
            control.should_save = not self.cfg.measure
            control.should_training_stop = True
            self.write(force=True, stop_reason=self.stop_reason)

    def _threads(self, force: bool = False) -> None:
        """Re-measure the free cores when due and compute with that many threads (`aci.cpus`)."""
        changed = self.cpus.apply(force=force)
        if changed:
            self.progress["cpu_threads"] = self.cpus.report()
            print(f"[aci] cpu threads: {changed.why}", flush=True)

    def _dev_point(self, step: int, kwargs) -> int:
        """Score the dev set now; returns 1 at a new best, which is saved (and so registered) at this step."""
        self.write(force=True, phase="scoring the dev set")
        point = self.dev.measure(kwargs["model"], kwargs.get("processing_class") or kwargs.get("tokenizer"), step)
        self.pace.evaluated(time.monotonic(), self.dev.dev.every)
        self.write(force=True, phase="training", dev=self.dev.report())
        print(f"[aci] dev {self.dev.dev.metric} at step {step}: {point['score']} on {point['items']} items "
              f"({point['s']} s){', the best so far' if point['best'] else ''}", flush=True)
        return int(bool(point["best"]))

    def _timing(self, state, elapsed: float) -> dict:
        step, total = state.global_step, state.max_steps
        end = self.plan.end if self.plan else total
        out = {"step": step, "total_steps": total, "epoch": round(state.epoch or 0.0, 3), "elapsed_s": round(elapsed, 1)}
        if step:
            step_s = self.pace.step_s()[0] or elapsed / step
            out.update(eta_s=round(max(0, end - step) * step_s, 1), steps_per_s=round(step / elapsed, 4) if elapsed else None)
        return out

    def on_train_end(self, args, state, control, **kwargs):
        self.training = False
        self.write(force=True, phase="finished", step=state.global_step, eta_s=0)

    def _on_sigterm(self, signum, frame):
        if not self.training:  # nothing to save yet: end now
            raise SystemExit(128 + signum)
        self.requested = True
        if ranks.world() == 1:  # alone: save at the end of this step; ranks, at the step they agree on
            self.stop_reason = STOP_REQUESTED

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
        entry.update(method=self.cfg.method, loss=self.progress.get("loss"), learning_rate=self.applied_lr,
                     **({"merged": str(merged)} if merged else {}), **self._dev_entry(step, entry["checkpoint"]))
        removed = self._rotate(Path(args.output_dir), step)
        gone = f"; removed {', '.join(removed)} (keep_checkpoints={self.cfg.keep_checkpoints})" if removed else ""
        with self.state.event("train", f"checkpoint {entry['checkpoint']} saved{gone}", tool="train",
                              data={"job": self.cfg.job, "checkpoint": entry["checkpoint"], "removed": removed}) as w:
            w.append(records.CHECKPOINTS, entry)
        self.pace.saved(time.monotonic())
        self.write(force=True, phase="training", last_checkpoint=entry["checkpoint"])

    def _dev_entry(self, step: int, checkpoint: str) -> dict:
        """The dev score of the checkpoint saved at `step`, when the dev set was scored there."""
        point = next((p for p in self.dev.curve if p["step"] == step), None) if self.dev else None
        if point is None:
            return {}
        if point["best"]:
            self.dev.best["checkpoint"] = checkpoint
            self.progress["dev"] = self.dev.report()
        return {"dev": {"metric": self.dev.dev.metric, "score": point["score"], "items": point["items"],
                        "best": point["best"]}}

    def _rotate(self, output_dir: Path, step: int) -> list[str]:
        """Delete this job's oldest checkpoints beyond `keep_checkpoints`, except the one in final_model (its
        source) and any a running evaluation job reads; returns the ids removed."""
        keep = self.cfg.keep_checkpoints
        if not keep:
            return []
        saved = sorted((int(p.name.split("-")[1]), p) for p in output_dir.glob("checkpoint-*")
                       if p.name.split("-")[1].isdigit() and int(p.name.split("-")[1]) <= step)
        best = (self.dev.best or {}).get("checkpoint") if self.dev else None  # the best by dev stays
        busy = {f"{self.cfg.job}/checkpoint-{n}" for n, _ in saved} & (_in_use(self.state) | {best})
        removed = []
        for n, folder in saved[:-keep]:
            cid = f"{self.cfg.job}/checkpoint-{n}"
            if cid not in busy:
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(cid)
        return removed


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _in_use(state: State) -> set[str]:
    """Checkpoint ids that must stay on disk: the promoted one, and those running evaluation jobs read."""
    used = {(state.read(records.BEST) or {}).get("checkpoint")}
    for j in jobs.active(state):
        if j.kind == "eval":
            used.add((state.read(f"{records.JOBS}/{j.id}/{jobfiles.CONFIG}") or {}).get("checkpoint"))
    return {u for u in used if u}


def checkpoint_bytes(model, *, adapter: bool, merged: bool) -> int:
    """What a checkpoint of `model` writes: its weights (a LoRA adapter's alone), plus the merged copy."""
    params = list(model.parameters())
    full = sum(p.numel() * p.element_size() for p in params)
    if not adapter:
        return full
    return sum(p.numel() * p.element_size() for p in params if p.requires_grad) + (full if merged else 0)


def save_merged(model, tokenizer, out: Path) -> None:
    """Save a LoRA model merged into its base (a plain model folder vLLM can serve), leaving training as is."""
    import copy

    merged = copy.deepcopy(model).merge_and_unload()
    merged.save_pretrained(out, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(out)
    del merged
