"""A long evaluation as a supervised job: `python -m aci.evaluation.job` inside `aci.jobs`.

`jobs.start` writes the job's `config.json` (`checkpoint`, `spec`, `promote`, `workdir`); this runs the
same `runner.evaluate` (and `promotion.promote`) as the inline tool, reports the trial it is on in
`progress.json`, and exits non-zero with the reason on its last log line when anything fails, so the
job's exit record says why.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from aci import jobs
from aci.context import Context
from aci.errors import ACIError
from aci.evaluation import checkpoints, promotion, runner


def main() -> int:
    folder = Path(os.environ["ACI_JOB_DIR"])
    cfg = json.loads((folder / "config.json").read_text())
    ctx = Context(workdir=cfg["workdir"])  # the state folder: $ACI_STATE, which aci.jobs sets
    try:
        ck = checkpoints.resolve(ctx, cfg["checkpoint"])
        entry = runner.evaluate(ctx, ck, runner.EvalSpec.model_validate(cfg["spec"]), job=folder.name,
                                progress=lambda p: jobs.write_progress(p, folder))
        jobs.write_progress({"eval_id": entry["eval_id"], "score": entry["score"], "range": entry["range"],
                             "samples": entry.get("samples"), "done": True}, folder)
        print(f"{ck.id}: {entry['score']:.4g} on {entry.get('samples')} samples ({entry['eval_id']})", flush=True)
        if cfg.get("promote"):
            result = promotion.promote(ctx, ck.id, prefer=entry)
            print(f"promoted {result.checkpoint} to {result.path}", flush=True)
    except ACIError as e:
        print(str(e), file=sys.stderr, flush=True)
        print(f"error: {str(e).splitlines()[0][:500]}", file=sys.stderr, flush=True)  # the exit record's reason
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
