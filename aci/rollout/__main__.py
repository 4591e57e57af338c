"""Job entry point: `python -m aci.rollout <out>/config.json` runs (or resumes) that rollout.

Started by `run-trajectory --background` through `aci.jobs`, which sets the working directory, ACI_STATE
and ACI_JOB_DIR; progress goes to the job's `progress.json`, the report to stdout (the job's log).
"""

from __future__ import annotations

import sys
from pathlib import Path

from aci.context import Context
from aci.errors import ACIError
from aci.rollout.config import RolloutConfig
from aci.rollout.runner import execute, throttled_progress


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m aci.rollout CONFIG.json", file=sys.stderr)
        return 2
    cfg = RolloutConfig.read(Path(argv[0]))
    if cfg is None:
        print(f"no config at {argv[0]}", file=sys.stderr)
        return 2
    try:
        report = execute(Context(), cfg, progress=throttled_progress())
    except ACIError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(report.model_dump_json(include={"out", "counts", "export"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
