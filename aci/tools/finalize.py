"""`finalize`: check `final_model/` as the benchmark will load it, and record the checklist."""

from __future__ import annotations

from pydantic import Field

from aci import runcard
from aci.context import Context
from aci.evaluation import checkpoints, checks, final_scoring, probe, promotion, runner, swap
from aci.evaluation import job as evaljob
from aci.guard import closing_note
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
    scoring: final_scoring.FinalScoring | None = Field(None, description="how the profile's final evaluation "
                                                       "scores final_model (seeds and why); none when the "
                                                       "profile does not say")

    def summary(self) -> str:
        lines = [f"final_model {'PASSED' if self.passed else 'FAILED'}: {self.path}"
                 + (f" ({self.checkpoint})" if self.checkpoint else "")]
        for i in self.items:
            lines.append(f" [{'x' if i.passed else ' '}] {i.name:<12} {i.detail}")
            if i.fix:
                lines.append(f"     fix: {i.fix}")
        lines += [f"note: {n}" for n in self.notes]
        if self.scoring:
            lines.append(f"final evaluation: {self.scoring.reason}")
            lines += [f"warning: {w}" for w in self.scoring.warnings]
        return "\n".join(lines)


def _eval_run(ctx: Context, inp: FinalizeInput):
    """The eval command on final_model with a small limit, as an evaluation job: a smoke test, not recorded."""
    spec = runner.EvalSpec(limit=inp.limit, timeout_s=inp.timeout_s)
    return lambda path: evaljob.smoke(ctx, path, spec)


@tool("finalize", title="Check final_model")
def finalize(inp: FinalizeInput, ctx: Context) -> FinalizeOutput:
    """Check final_model/ as the benchmark will use it and record the checklist in state/finalize.json.

    First repairs an interrupted promotion. Items (each pass/fail with a fix): present; config
    (config.json loads); weights (safetensors, all shards readable, not .bin only); merged (no
    adapter_config.json / adapter_model.*); file-size (no file over the profile's transfer.max_file_bytes:
    the harness's copy of final_model fails on a larger file); tokenizer loads; template (the run card's, else the
    tokenizer's, renders a prompt); end-of-turn (generation_config.json exists and its eos_token_id holds
    the end-of-turn token's id, the same id the tokenizer gives it); sampling (the file read as vLLM
    reads it: loads, and holds the settings promoted with an `<id>@<settings>` checkpoint); processor (files the base model
    has, e.g. Gemma's preprocessor_config.json); promotion (the folder is the one best.json names,
    unedited); eval-files (evaluate.py, evaluation_code/, templates/ unchanged); generates (the model
    loads with transformers, in a child process that exits, and answers the first test item of the
    pinned reference, worded by the benchmark card's `prompt` and rendered with the run card's
    template, in the answer format the benchmark card's `answer_format` or the grader names); with
    --limit N, eval (the eval command scores final_model on N samples, as an evaluation job).
    Promotions wait while it checks, so the record names the folder it checked. The run's `finalized`
    gate needs a pass on the current promotion: run it after every promotion and fix every failed item.
    Beside the checklist it states how the profile's final evaluation will score final_model (one run
    or the mean over several seeds, from the temperature vLLM reads in generation_config.json) and
    warns when do_sample: false stands without a temperature."""
    ctx.require_card()
    # The promotion lock is held from the repair to the record: no promotion can swap final_model while it
    # is checked, so the promotion id recorded is the one of the folder every item looked at.
    with swap.locked(ctx.state.root):
        notes = promotion.sync(ctx)
        final = swap.final_dir(ctx.workdir)
        best = ctx.best.model_dump(mode="json") if ctx.best else None
        promotion_id = (swap.marker(final) or {}).get("promotion_id")
        items = checks.check(final, template=runner.template_text(ctx), base_dir=checkpoints.base(ctx).local,
                             best=best, changed_eval_files=protected_changed(ctx), probe=probe.probe(ctx),
                             max_file_bytes=ctx.rules.profile.transfer.max_file_bytes,
                             evaluate=_eval_run(ctx, inp) if inp.limit else None)
        passed = all(i.passed for i in items)
        final_eval = ctx.rules.profile.final_eval  # a statement beside the checklist, not a check
        scoring = (final_scoring.statement(final_eval, ctx.card.benchmark, final,
                                           runcard.eval_script(ctx, ctx.card.eval_command)) if final_eval else None)
        record = {"passed": passed, "ts": iso(), "path": str(final), "checkpoint": (best or {}).get("checkpoint"),
                  "promotion_id": promotion_id, "items": [i.model_dump() for i in items]}
        failed = [i.name for i in items if not i.passed]
        msg = "final_model passed every check" if passed else f"final_model failed: {', '.join(failed)}"
        with ctx.state.event("finalize", msg, tool="finalize", data={"passed": passed, "failed": failed}) as w:
            w.write_json(FINALIZE, record)
    closing = closing_note(ctx) if passed else None  # in the final reserve: stopping is fine, say why
    return FinalizeOutput(passed=passed, path=str(final), checkpoint=record["checkpoint"], items=items,
                          notes=[*notes, *([closing] if closing else [])], scoring=scoring)
