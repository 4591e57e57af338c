"""`finalize`: check `final_model/` as the benchmark will load it, and record the checklist."""

from __future__ import annotations

from pydantic import Field

from aci.context import Context
from aci.evaluation import checkpoints, checks, promotion, runner, swap
from aci.progress import FINALIZE, protected_changed
from aci.registry import ToolInput, ToolOutput, tool
from aci.state import iso


class FinalizeInput(ToolInput):
    RENAMED = {"eval_limit": "limit"}  # `limit`, as in eval-checkpoint

    limit: int | None = Field(None, ge=1, description="also run the eval command on final_model with this --limit")
    timeout_s: float = Field(1800, gt=0, description="seconds the optional eval run may take")


class FinalizeOutput(ToolOutput):
    passed: bool
    path: str
    checkpoint: str | None = Field(None, description="the promoted checkpoint in final_model")
    items: list[checks.CheckItem]
    notes: list[str] = Field(default_factory=list)

    def summary(self) -> str:
        lines = [f"final_model {'PASSED' if self.passed else 'FAILED'}: {self.path}"
                 + (f" ({self.checkpoint})" if self.checkpoint else "")]
        for i in self.items:
            lines.append(f" [{'x' if i.passed else ' '}] {i.name:<12} {i.detail}")
            if i.fix:
                lines.append(f"     fix: {i.fix}")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def _eval_run(ctx: Context, inp: FinalizeInput):
    """The eval command on final_model with a small limit: a smoke test, not a comparison (not recorded)."""
    spec = runner.EvalSpec(limit=inp.limit, timeout_s=inp.timeout_s)
    out_dir = ctx.state.root / runner.EVALS / f"finalize-{iso().replace(':', '')}"

    def run(path) -> str:
        ev = runner.make_evaluator(ctx, spec, out_dir)
        t = ev.run(str(path), 0)
        return f"{ev.id} scored {t.score:.4g} ({t.details.get('metric')}) on {t.samples} samples"

    return run


@tool("finalize", title="Check final_model")
def finalize(inp: FinalizeInput, ctx: Context) -> FinalizeOutput:
    """Check final_model/ as the benchmark will use it and record the checklist in state/finalize.json.

    First repairs an interrupted promotion. Items (each pass/fail with a fix): present; config
    (config.json loads); weights (safetensors, all shards readable, not .bin only); merged (no
    adapter_config.json / adapter_model.*); tokenizer loads; template (the run card's, else the
    tokenizer's, renders a prompt); end-of-turn (generation_config.json exists and its eos_token_id holds
    the end-of-turn token's id, the same id the tokenizer gives it); sampling (the file read as vLLM
    reads it: loads, and holds the settings promoted with an `<id>@<settings>` checkpoint); processor (files the base model
    has, e.g. Gemma's preprocessor_config.json); promotion (the folder is the one best.json names,
    unedited); eval-files (evaluate.py, evaluation_code/, templates/ unchanged); generates (the model
    loads with transformers and writes a short reply to a rendered prompt); with --limit N, eval
    (the eval command scores final_model on N samples). The run's `finalized` gate needs a pass newer
    than the last promotion: run it after every promotion and fix every failed item."""
    ctx.require_card()
    with swap.locked(ctx.state.root):
        notes = promotion.sync(ctx)
    final = swap.final_dir(ctx.workdir)
    best = ctx.best.model_dump(mode="json") if ctx.best else None
    items = checks.check(final, template=runner.template_text(ctx), base_dir=checkpoints.base(ctx).local, best=best,
                         changed_eval_files=protected_changed(ctx),
                         evaluate=_eval_run(ctx, inp) if inp.limit else None)
    passed = all(i.passed for i in items)
    record = {"passed": passed, "ts": iso(), "path": str(final), "checkpoint": (best or {}).get("checkpoint"),
              "promotion_id": (swap.marker(final) or {}).get("promotion_id"),
              "items": [i.model_dump() for i in items]}
    failed = [i.name for i in items if not i.passed]
    msg = "final_model passed every check" if passed else f"final_model failed: {', '.join(failed)}"
    with ctx.state.event("finalize", msg, tool="finalize", data={"passed": passed, "failed": failed}) as w:
        w.write_json(FINALIZE, record)
    return FinalizeOutput(passed=passed, path=str(final), checkpoint=record["checkpoint"], items=items, notes=notes)
