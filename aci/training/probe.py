"""The learning-rate probe (`aci train dry-run --lr-probe`): which rate lowers the loss fastest on this
model and data, measured instead of guessed.

For a model and task without a recipe the learning rate is the setting that matters most and the one no
default gets right everywhere. The probe job trains `max_steps` steps at each rate (`FACTORS` times the
run's) with TRL's own loop (`trainer.train()`), each from the same weights (restored in place), with a
fresh optimizer, on the same batches (the seed is set again before each), at a constant rate, and
measures the loss on held-out rows of the same data (the last `HELD_OUT`, which no probe trains on)
before and after. Suggested is the smallest rate whose held-out drop is within `CLOSE` of the largest:
a few steps favour larger rates than a long run tolerates (Wu et al. 2018, "Understanding Short-Horizon
Bias in Stochastic Meta-Optimization"), so where two rates do about as well the lower is the safer. The
report says when the suggestion is at the edge of the range (the best may lie beyond it) and marks a
rate whose loss rose or became NaN.
Each probe's first loss is the loss of the same weights on the same first batch, so equal first losses
show the probes started alike.
"""

from __future__ import annotations

import math
import time

FACTORS = (0.1, 0.3, 1.0, 3.0, 10.0)
HELD_OUT = 64
CLOSE = 0.1  # a drop within 10 % of the largest counts as about as good


def run(trainer, cfg, callback) -> None:
    """Probe `cfg.lr_probe` with `trainer` (built for the job); the report goes to the progress, `lr_probe`."""
    import torch
    from transformers import set_seed

    started = time.monotonic()
    rows = trainer.train_dataset
    held_n = min(HELD_OUT, max(1, len(rows) // 4))
    held = rows.select(range(len(rows) - held_n, len(rows)))
    trainer.train_dataset = rows.select(range(len(rows) - held_n))
    model = trainer.model
    start = {n: p.detach().to("cpu", copy=True) for n, p in model.named_parameters() if p.requires_grad}
    before = trainer.evaluate(eval_dataset=held)["eval_loss"]
    results: list[dict] = []
    for rate in cfg.lr_probe:
        t = time.monotonic()
        with torch.no_grad():
            for n, p in model.named_parameters():
                if n in start:
                    p.copy_(start[n])
        trainer.optimizer = trainer.lr_scheduler = None  # a fresh optimizer and schedule for each rate
        trainer.args.learning_rate = rate
        set_seed(cfg.seed)
        trainer.train()
        after = trainer.evaluate(eval_dataset=held)["eval_loss"]
        losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
        results.append({"learning_rate": rate, "first_loss": losses[0] if losses else None, "loss_before": before,
                        "loss_after": after, "drop": before - after, "seconds": round(time.monotonic() - t, 1)})
        print(f"[aci] lr probe: {rate:.3g}: held-out loss {before:.4f} -> {after:.4f}", flush=True)
        callback.write(force=True, lr_probe={"results": results})
    report = summarize(results, steps=cfg.max_steps, held_out=held_n)
    report["seconds"] = round(time.monotonic() - started, 1)
    callback.write(force=True, lr_probe=report)


def summarize(results: list[dict], *, steps: int, held_out: int) -> dict:
    """The suggestion from the probes' held-out drops, and why, in words."""
    for r in results:
        r["rose"] = not math.isfinite(r["loss_after"]) or r["drop"] < 0  # the loss rose, or became NaN
    usable = [r for r in results if not r["rose"]]
    out = {"steps_per_rate": steps, "held_out_rows": held_out, "results": results}
    if not usable:
        return {**out, "suggested": None, "why": f"no probed rate lowered the held-out loss in {steps} steps: probe "
                                                 f"more steps (--lr-probe-steps) or check the data"}
    best = max(r["drop"] for r in usable)
    pick = min((r for r in usable if r["drop"] >= (1 - CLOSE) * best), key=lambda r: r["learning_rate"])
    rates = [r["learning_rate"] for r in results]
    rate = pick["learning_rate"]
    edge = (" (the largest probed: a larger rate may do better; probe again from it)" if rate == max(rates) else
            " (the smallest probed: probe again from it)" if rate == min(rates) else "")
    return {**out, "suggested": rate,
            "why": f"the smallest rate within {CLOSE:.0%} of the largest held-out loss drop in {steps} steps "
                   f"({pick['drop']:.4f} against {best:.4f}){edge}"}
