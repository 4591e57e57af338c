"""Dev-set accuracy while a job trains: the measure that tells a learnable reply from a learned format.

A short run's loss falls as soon as the model learns the reply's format; whether it learns the content
shows only in what it generates. With `--dev-set FILE --dev-every N` the job generates a reply to each
held-out task greedily (with the model as it trains, the evaluation's template, `--dev-max-new-tokens`)
every N steps and at the end, grades it with the task's grader (else `--grader`, else the run card's),
and logs the curve in its progress. A point that beats every earlier one is saved as a checkpoint at
that step and registered with its dev score, and rotation keeps it, so the best-by-dev checkpoint is
there to evaluate and promote. Where no grader can score the tasks, the curve is the mean loss of each
task's reference answer (`gold.answer`) instead, and says so.

Two halves: `settings` runs in the tool (no heavy import: it checks the file and resolves the grader
before a job starts); `DevCurve` runs in the job.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any

from aci.context import Context
from aci.errors import ACIError
from aci.training.config import DevSettings
from aci.training.request import TrainRequest

BATCH = 16  # prompts per generate call: small enough for a CPU, large enough to keep a GPU busy
KEEP_REPLIES = 5  # replies kept per point (the first failures, then passes), for reading in `train status`


def settings(req: TrainRequest, ctx: Context) -> tuple[DevSettings | None, list[str]]:
    """The job's dev settings from `--dev-set` (None without one), and what the caller should know: the
    grader each task is scored by is built now, so a broken spec fails before the job starts."""
    if not req.dev_set:
        return None, []
    from aci import graders
    from aci.default_grader import card_grader
    from aci.evaluation import devset

    path = ctx.path(req.dev_set, must_exist=True, what="dev set")
    tasks = devset.load(path, req.dev_items)
    default, source = (req.grader, "--grader") if req.grader else card_grader(ctx)
    unscored = [t["id"] for t in tasks if not (t.get("grader") or default)]
    warnings = []
    if unscored:
        no_answer = [t["id"] for t in tasks if not isinstance((t.get("gold") or {}).get("answer"), str)]
        if no_answer:
            raise ACIError(f"dev set {path.name}: task {unscored[0]!r} names no grader and there is no --grader or "
                           f"run card grader; without one the curve is the loss of each task's gold.answer, which "
                           f"task {no_answer[0]!r} lacks. Pass --grader (e.g. final-answer) or add gold answers")
        metric, source = "loss", "no grader can score these tasks"
        warnings.append(f"dev set: {len(unscored)} of {len(tasks)} tasks name no grader and neither --grader nor "
                        f"the run card gives one, so the dev curve is the loss of each task's gold.answer, not "
                        f"accuracy: a falling loss can mean the format is learned while the answers stay wrong")
    else:
        metric = "accuracy"
        for t in tasks:
            graders.grader_for(t.get("grader") or default, workdir=ctx.workdir)
        if any(not t.get("grader") for t in tasks):
            source = f"{default} ({source}) for tasks that name none"
        else:
            source = "each task's own grader"
    if req.max_steps and req.dev_every > req.max_steps:
        warnings.append(f"--dev-every {req.dev_every} is more than --max-steps {req.max_steps}: the dev set is "
                        f"scored once, at the end")
    return DevSettings(path=str(path), every=req.dev_every, items=len(tasks), max_new_tokens=req.dev_max_new_tokens,
                       grader=default if metric == "accuracy" else None, metric=metric, source=source), warnings


def better(metric: str, score: float, best: float | None) -> bool:
    return best is None or (score > best if metric == "accuracy" else score < best)


class DevCurve:
    """The job's side: scores the model as it trains, keeps the curve and the best point."""

    def __init__(self, dev: DevSettings, *, workdir: str, template: str | None, kwargs: dict | None):
        from aci.evaluation import devset

        self.dev = dev
        self.workdir = Path(workdir)
        self.template = template
        self.kwargs = kwargs or {}
        self.tasks = devset.load(Path(dev.path), dev.items)
        self.curve: list[dict] = []
        self.best: dict | None = None
        self.seconds: float | None = None  # the last point's evaluation time
        self.replies: dict | None = None  # the last point's lowest-scored replies

    def due(self, step: int, last: bool) -> bool:
        return step > 0 and (step % self.dev.every == 0 or last) and not any(p["step"] == step for p in self.curve)

    def measure(self, model, tokenizer, step: int) -> dict:
        """Score the model at `step`; returns the point (with `best` true when it beats every earlier one)."""
        import torch

        started = time.monotonic()
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                score, kept = (self._accuracy if self.dev.metric == "accuracy" else self._loss)(model, tokenizer)
        finally:
            model.train(was_training)
        self.seconds = round(time.monotonic() - started, 2)
        point = {"step": step, "score": round(score, 4), "items": len(self.tasks), "s": self.seconds}
        point["best"] = better(self.dev.metric, score, self.best["score"] if self.best else None)
        self.curve.append(point)
        if point["best"]:
            self.best = {"step": step, "score": point["score"]}
        if kept:
            self.replies = {"step": step, "replies": kept}
        return point

    def report(self) -> dict[str, Any]:
        out = {"metric": self.dev.metric, "items": len(self.tasks), "every": self.dev.every,
               "scored_by": self.dev.source, "curve": self.curve[-50:], "best": self.best}
        if self.replies:
            out["replies"] = self.replies
        return out

    def _prompts(self, tokenizer) -> list[list[int]]:
        from aci import generation

        return [generation.encode(tokenizer, generation.render(tokenizer, t["messages"], tools=t.get("tools"),
                                                               template=self.template, kwargs=self.kwargs))
                for t in self.tasks]

    def _accuracy(self, model, tokenizer) -> tuple[float, list[dict]]:
        from aci import generation
        from aci.graders import grade

        left = copy.copy(tokenizer)  # generation pads on the left; the trainer's tokenizer stays as it is
        left.padding_side = "left"
        eos = model.generation_config.eos_token_id
        gen = generation.TransformersGenerator.around(model, left, eos_ids=[] if eos is None else
                                                      [eos] if isinstance(eos, int) else list(eos), batch_size=BATCH)
        replies = gen.generate(self._prompts(left), generation.Sampling(max_new_tokens=self.dev.max_new_tokens))
        rows = []
        for task, reply in zip(self.tasks, replies, strict=True):
            s = grade(task, reply.text, default=self.dev.grader, workdir=self.workdir)
            rows.append({"id": task["id"], "score": s.score, "reason": s.reason, "reply": reply.text[:500],
                         "finish": reply.finish_reason})
        kept = sorted(rows, key=lambda r: r["score"])[:KEEP_REPLIES]
        return sum(r["score"] for r in rows) / len(rows), kept

    def _loss(self, model, tokenizer) -> tuple[float, list[dict]]:
        """Mean loss of each task's gold answer as its assistant turn: rendered and masked as training
        renders a sample (`aci.templates.encode`), so it is the loss training would report on it."""
        import torch

        from aci import templates

        template = templates.Template(self.template, "run card") if self.template else templates.load(None, tokenizer)
        total, n = 0.0, 0
        for task in self.tasks:
            sample = {"messages": [*task["messages"], {"role": "assistant", "content": task["gold"]["answer"]}],
                      "tools": task.get("tools")}
            for enc in templates.encode(tokenizer, template, sample, kwargs=self.kwargs):
                if not any(enc.assistant_masks):
                    continue
                x = torch.tensor([enc.input_ids], device=model.device)
                labels = torch.tensor([[t if m else -100 for t, m in zip(enc.input_ids, enc.assistant_masks,
                                                                           strict=True)]], device=model.device)
                total, n = total + float(model(input_ids=x, labels=labels).loss), n + 1
        return total / max(n, 1), []


def describe(dev: dict | None) -> list[str]:
    """The curve in words for `train status`: each point, the best, and replies of the last point."""
    if not dev or not dev.get("curve"):
        return [f"  dev set: {dev['items']} items every {dev['every']} steps, {dev['metric']}, no point yet"] if dev else []
    pts = ", ".join(f"{p['step']}: {p['score']:.3g}" for p in dev["curve"][-12:])
    best = dev.get("best") or {}
    where = f" ({best['checkpoint']})" if best.get("checkpoint") else ""
    out = [f"  dev {dev['metric']} on {dev['items']} items ({dev['scored_by']}) by step: {pts}",
           f"  best by dev: {best.get('score')} at step {best.get('step')}{where}"]
    for r in (dev.get("replies") or {}).get("replies", [])[:3]:
        out.append(f"  dev reply at step {dev['replies']['step']}, {r['id']} scored {r['score']} ({r['reason']}): "
                   f"{json.dumps(r['reply'][:160])}")
    return out
