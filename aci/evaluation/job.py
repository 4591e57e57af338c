"""Every evaluation runs as a supervised job (`python -m aci.evaluation.job` inside `aci.jobs`), also a
foreground one: the tool starts the job and waits for it (`wait`).

So the models a dev-set or lm-eval evaluation loads live in the job's process, which exits when the
evaluation ends, never in the long-lived MCP server (whose GPU memory a later full fine-tune needs); and
the eval command's processes (a vLLM server among them) are the job's children: listed by `status`,
still recorded if the server dies, and ended at the job's stop time (SIGTERM: the evaluation is recorded
as stopped and the eval command's whole session is killed).

`config.json` holds `task` ("evaluate" or "smoke") and `workdir`; "evaluate": `checkpoint`, `spec`,
`promote` (the same `runner.evaluate`, then `promotion.promote`, as the tool); "smoke": `path` and `spec`,
one unrecorded run of the eval command on a folder (`finalize --eval-limit`). The job reports the trial
it is on, then the result (`eval_id`, or `detail`) or the `error`, in `progress.json`.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from aci import jobfiles, jobs, processes, records
from aci.context import Context
from aci.errors import ACIError
from aci.evaluation import checkpoints, promotion, runner
from aci.evaluation.checkpoints import Checkpoint

KIND = "eval"
POLL_S = 0.1


def start(ctx: Context, ck: Checkpoint, spec: runner.EvalSpec, *, promote: bool, exclusive: bool = True) -> jobs.JobView:
    """Register `ck` if it is new, then start the evaluation job (`exclusive`: not while another GPU job runs)."""
    if ck.new:
        with ctx.state.event("eval", f"registered {ck.id} (parent {ck.parent})", tool="eval-checkpoint") as w:
            w.append(records.CHECKPOINTS, ck.registration())
        ck.new = False
    config = {"task": "evaluate", "checkpoint": ck.id, "spec": spec.model_dump(mode="json"), "promote": promote,
              "workdir": str(ctx.workdir)}
    return jobs.start(ctx.state, KIND, [sys.executable, "-m", "aci.evaluation.job"], config, cwd=ctx.workdir,
                      message=f"evaluate {ck.id} with {spec.evaluator}" + (" then promote" if promote else ""),
                      exclusive=exclusive)


def wait(ctx: Context, view: jobs.JobView) -> dict:
    """Block until the job ends; its progress record (`eval_id` ... or `detail`), or ACIError with its error."""
    view = jobs.wait(ctx.state, view.id, POLL_S)
    ctx.forget()
    if view.progress.get("error"):
        raise ACIError(view.progress["error"])
    if view.status != "succeeded" or not view.progress.get("done"):
        raise ACIError(f"evaluation job {view.id} {view.status}: {view.reason}\n{view.log_tail or ''}".strip())
    return view.progress


def evaluate(ctx: Context, ck: Checkpoint, spec: runner.EvalSpec, *, exclusive: bool = True) -> dict:
    """A foreground evaluation: the job, waited for; the entry it recorded in checkpoints.jsonl."""
    done = wait(ctx, start(ctx, ck, spec, promote=False, exclusive=exclusive))
    return next(e for e in reversed(ctx.state.lines(records.CHECKPOINTS)) if e.get("eval_id") == done["eval_id"])


def smoke(ctx: Context, path: Path, spec: runner.EvalSpec) -> str:
    """One unrecorded run of the eval command on `path`, as a job, waited for; a one-line result."""
    config = {"task": "smoke", "path": str(path), "spec": spec.model_dump(mode="json"), "workdir": str(ctx.workdir)}
    view = jobs.start(ctx.state, KIND, [sys.executable, "-m", "aci.evaluation.job"], config, cwd=ctx.workdir,
                      message=f"check {path.name} with the eval command (limit {spec.limit})")
    return wait(ctx, view)["detail"]


def _stopped(signum, frame):
    raise ACIError("stopped at the job's stop time (the final reserve starts): the evaluation did not finish")


def _run(ctx: Context, cfg: dict, folder: Path) -> dict:
    spec = runner.EvalSpec.model_validate(cfg["spec"])
    if cfg.get("task") == "smoke":
        from aci.state import iso

        out_dir = ctx.state.root / runner.EVALS / f"smoke-{iso().replace(':', '')}"
        ev = runner.make_evaluator(ctx, spec, out_dir)
        t = ev.run(cfg["path"], 0)
        return {"detail": f"{ev.id} scored {t.score:.4g} ({t.details.get('metric')}) on {t.samples or 'an unknown number of'} samples"}
    ck = checkpoints.resolve(ctx, cfg["checkpoint"])
    entry = runner.evaluate(ctx, ck, spec, job=folder.name, progress=lambda p: jobs.write_progress(p, folder))
    print(f"{ck.id}: {entry['score']:.4g} on {entry.get('samples') or 'unknown'} samples ({entry['eval_id']})",
          flush=True)
    done = {"eval_id": entry["eval_id"], "score": entry["score"], "range": entry["range"],
            "samples": entry.get("samples")}
    if cfg.get("promote"):
        jobs.write_progress(done, folder)
        result = promotion.promote(ctx, ck.id, prefer=entry, set_template=spec.set_template)
        print(f"promoted {result.checkpoint} to {result.path}", flush=True)
    return done


def main() -> int:
    folder = Path(os.environ[jobs.JOB_DIR_ENV])
    cfg = json.loads((folder / jobfiles.CONFIG).read_text())
    ctx = Context(workdir=cfg["workdir"])  # the state folder: $ACI_STATE, which aci.jobs sets
    signal.signal(signal.SIGTERM, _stopped)
    try:
        done = _run(ctx, cfg, folder)
    except ACIError as e:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        jobs.write_progress({"error": str(e)}, folder)
        print(str(e), file=sys.stderr, flush=True)
        print(f"error: {str(e).splitlines()[0][:500]}", file=sys.stderr, flush=True)  # the exit record's reason
        return 1
    jobs.write_progress({**done, "done": True}, folder)
    return 0


if __name__ == "__main__":
    processes.exit_without_teardown(main())
