"""`eval-checkpoint`: evaluate checkpoints, compare them with a stated test, promote the better one."""

from __future__ import annotations

import json
from typing import Literal

from pydantic import Field

from aci import jobs, records
from aci.context import Context
from aci.errors import ACIError
from aci.evaluation import checkpoints, devset, final_scoring, promotion, replies, runner
from aci.evaluation import job as evaljob
from aci.evaluation.promotion import Promotion
from aci.evaluation.stats import Comparison
from aci.registry import ToolInput, ToolOutput, tool
from aci.training import hardware


class EvalCheckpointInput(ToolInput, runner.EvalSpec):
    RENAMED = {"default_grader": "grader"}  # `grader`, as in verify-task, run-trajectory and train

    action: Literal["evaluate", "sample", "compare", "promote", "list"] = Field(
        "evaluate", description="evaluate a checkpoint; sample: generate and grade a few --dev-set items to read "
                                "the replies; compare two; promote one to final_model; or list results")
    checkpoint: str | None = Field(None, description="checkpoint id (base, <job>/checkpoint-<step>) or a model folder "
                                   "path; <id>@greedy or <id>@temperature=0.6,top_p=0.95 is that checkpoint decoded "
                                   "with those sampling settings (written to its generation_config.json)")
    against: str | None = Field(None, description="compare: the other checkpoint (default: the current best, else base)")
    parent: str | None = Field(None, description="for a folder path not yet registered: the checkpoint it was trained from")
    background: bool = Field(False, description="evaluate: run as a job and return at once (for anything over a few minutes)")
    promote: bool = Field(False, description="evaluate: promote the checkpoint afterwards if it beats the current best")
    concurrent: bool = Field(False, description="evaluate even while a train, eval or serve job holds the GPU "
                                                "(without a GPU, evaluations always run beside other jobs)")
    last: int = Field(20, ge=1, le=500, description="list: how many recent evaluations")


class EvalCheckpointOutput(ToolOutput):
    action: str
    result: dict | None = Field(None, description="the evaluation recorded in checkpoints.jsonl")
    comparison: Comparison | None = None
    promotion: Promotion | None = None
    job: jobs.JobView | None = None
    evaluations: list[dict] = Field(default_factory=list)
    running: list[jobs.JobView] = Field(default_factory=list)
    replies: list[dict] = Field(default_factory=list, description="replies with their verdicts, failures first: the dev set's, or those the eval command logged")
    warnings: list[str] = Field(default_factory=list)

    def summary(self) -> str:
        lines = []
        if self.result:
            lines += checkpoints.describe(self.result)
        if self.comparison:
            c = self.comparison
            verdict = "beats" if c.beats else "does not beat" if c.decided else "cannot be compared with"
            lines.append(f"{c.a} {verdict} {c.b}: {c.a_score:.4g} vs {c.b_score:.4g} (delta {c.delta:+.4g}, "
                         f"{c.method}): {c.reason}")
        if self.promotion:
            p = self.promotion
            lines.append(f"promoted {p.checkpoint} to {p.path}" if p.promoted else f"not promoted: {p.notes[-1] if p.notes else ''}")
            lines += [f"  {n}" for n in p.notes if p.promoted]
            lines += [f"  wrote {name}: {how}" for name, how in p.files.items()]
        if self.job:
            lines.append(f"job {self.job.id} {self.job.status}: aci status (or eval-checkpoint list) shows its result")
        lines += [checkpoints.listed(e) for e in self.evaluations]
        lines += [f"  running job {j.id}: {j.progress}" for j in self.running]
        lines += [f"  reply {r['id']} scored {r['score']:.3g} ({r.get('reason')}): {json.dumps(r['response'][:240])}"
                  for r in self.replies]
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


SAMPLE_REPLIES = 15  # replies shown (and `sample`'s default --limit): the loop's "read 15 failures"


def _spec(inp: EvalCheckpointInput) -> runner.EvalSpec:
    return runner.EvalSpec.model_validate(inp.model_dump(include=set(runner.EvalSpec.model_fields)))


def _evaluate(inp: EvalCheckpointInput, ctx: Context) -> EvalCheckpointOutput:
    ck = checkpoints.resolve(ctx, inp.checkpoint, inp.parent)
    spec = _spec(inp)
    exclusive = not inp.concurrent and hardware.cuda_likely()  # on a CPU the free cores are shared (aci.cpus)
    if exclusive and (busy := jobs.gpu_busy(ctx.state)):
        raise ACIError(busy)
    if inp.background:
        job = evaljob.start(ctx, ck, spec, promote=inp.promote, exclusive=exclusive)
        return EvalCheckpointOutput(action="evaluate", job=job)
    # a job too, waited for: no model or eval command stays in the server
    entry = evaljob.evaluate(ctx, ck, spec, exclusive=exclusive)
    out = EvalCheckpointOutput(action=inp.action, result=entry, warnings=list(entry.get("warnings", [])))
    if spec.evaluator == "dev" and entry.get("eval_id"):
        out.replies = devset.replies(ctx.state.root / runner.EVALS / entry["eval_id"], SAMPLE_REPLIES)
    elif spec.evaluator == "command":
        out.replies = replies.logged([*entry.get("sample_logs", []), *entry.get("inspect_logs", [])], SAMPLE_REPLIES)
    few = final_scoring.trials_warning(ctx.rules.profile.final_eval, ctx.card.benchmark, ck.sampling, spec.seed_list())
    out.comparison, why_not = promotion.against_best(ctx, ck.id, entry)
    out.warnings += [w for w in (few, why_not) if w]
    if inp.promote:
        out.promotion = promotion.promote_if_better(ctx, ck.id, entry, inp.set_template)
    return out


@tool("eval-checkpoint", title="Evaluate, compare and promote checkpoints", destructive=True)
def eval_checkpoint(inp: EvalCheckpointInput, ctx: Context) -> EvalCheckpointOutput:
    """Evaluate a checkpoint, compare two, or promote one to final_model.

    evaluate: run --trials k (seeds 0..k-1) of one evaluator on --checkpoint (`base`, a registered id
    like <job>/checkpoint-<step>, or a model folder path with --parent; `<id>@greedy` or
    `<id>@temperature=T,top_p=P[,max_new_tokens=N]` is that checkpoint with those sampling settings in its
    generation_config.json, which the eval command's vLLM reads): `command` = the run card's eval
    command (e.g. `python evaluate.py --model-path {model_path} --limit {limit}
    --json-output-file {output}`; score from --metric-key, else accuracy/score/...), `lm-eval` = --task
    (built-in or in --task-dir), `dev` = --dev-set task records scored by their graders. Every result
    (or failure) is recorded in checkpoints.jsonl with evaluator, limit, samples, seeds, scores, mean,
    min-max range and duration, and compared with the current best (else base). A result under the
    rules' minimum sample count is flagged (rule min-eval-samples). --limit -1 scores every item
    (without --limit the eval command's own default applies, often a dev subset; a command without
    {limit} refuses --limit); the sample count recorded is the one the command reports, its inspect
    log holds or its per-sample log counts, else unknown. Checkpoints
    other than base are evaluated as they would be shipped (LoRA merged, run card template, end-of-turn
    token, sampling settings). Refused while a train, eval or serve job holds the GPU, unless --concurrent
    (on a machine without one it runs beside them, on the free cores). --background runs it as a job;
    --promote promotes afterwards when it wins.
    compare: does --checkpoint beat --against (default: best, else base) on their latest evaluations
    with the same evaluator and limit? Non-overlapping trial ranges, a paired bootstrap over per-sample
    scores, or a two-proportion z-test (one-sided 5 %); says by how much.
    promote: make the checkpoint final_model only if it derives from the base model and beats the
    current best (before any promotion: base) on a comparable evaluation; LoRA merged, the checkpoint's
    own tokenizer and chat template kept (the run card's template is written only where it has none,
    or with --set-template), processor files and generation_config end-of-turn written, every file
    written listed; folder swapped atomically (its contents, when final_model is a mount point that
    cannot be renamed), best.json updated. Base itself may be promoted first as a floor.
    sample: --dev-set items (--limit, default 15) rendered with the run card's template, generated by the
    checkpoint and graded, recorded like any dev evaluation; the output holds the replies with their
    verdicts, failures first, for reading failures (so does a dev evaluation's, and an eval command's
    that logs each sample: a JSONL log or an inspect_ai log).
    list: recent evaluations (or those of --checkpoint) and running evaluation jobs."""
    if inp.action == "list":
        ctx.require_card()
        found = [e for e in ctx.state.lines(records.CHECKPOINTS) if e.get("type") == "evaluated"
                 and (inp.checkpoint is None or e.get("checkpoint") == inp.checkpoint)]
        return EvalCheckpointOutput(action="list", evaluations=found[-inp.last:],
                                    running=[j for j in jobs.active(ctx.state) if j.kind == evaljob.KIND])
    if not inp.checkpoint:
        raise ACIError(f"eval-checkpoint {inp.action} needs --checkpoint (base, a registered id, or a model folder)")
    ctx.require_card()
    if inp.action == "evaluate":
        return _evaluate(inp, ctx)
    if inp.action == "sample":
        if not inp.dev_set:
            raise ACIError("sample needs --dev-set: task records drawn from the training source (never test items), "
                           "rendered with the run card's template, generated and graded")
        return _evaluate(inp.model_copy(update={"evaluator": "dev", "limit": inp.limit or SAMPLE_REPLIES,
                                                "background": False, "promote": False}), ctx)
    if inp.action == "compare":
        return EvalCheckpointOutput(action="compare", comparison=promotion.compare(ctx, inp.checkpoint, inp.against))
    result = promotion.promote(ctx, inp.checkpoint, parent=inp.parent, set_template=inp.set_template)
    return EvalCheckpointOutput(action="promote", promotion=result, comparison=result.comparison)
