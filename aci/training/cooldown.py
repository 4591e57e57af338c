"""Ending a wsd run early with its decay, instead of cutting it at the peak rate (`train stop --decay`).

A wsd job holds its peak learning rate until the decay its clock times; a checkpoint from that stable
phase scores below what the same run reaches once it has decayed (Hägele et al. 2024, "Scaling Laws and
Compute-Optimal Training Beyond Fixed Training Durations": the loss falls mostly during the cooldown).
So a run that is to end early decays first: the request is a file in the job's folder, which the job
reads after every optimizer step; from then on the steps it may still run are bounded by a decay that
starts at once and is the last `schedule.DECAY_SHARE` of the run (`Wsd.decay_now`), so the job ends,
saves and stops at its planned end as usual. The bound is a count of steps, which the ranks agree on as
they agree on the clock's (`ranks.agree`), so every rank follows the same plan.
"""

from __future__ import annotations

import os
from pathlib import Path

from aci import jobfiles, jobs, records
from aci.errors import ACIError
from aci.jobs import JobView
from aci.state import State, iso


def request(state: State, job_id: str) -> JobView:
    """Ask a running wsd job to decay now; refused, with what to do, for any other job."""
    view = jobs.view(state, job_id)
    if view.status != "running":
        raise ACIError(f"job {job_id} is {view.status}: there is nothing to decay")
    schedule = (state.read(f"{records.JOBS}/{job_id}/{jobfiles.CONFIG}") or {}).get("lr_schedule")
    if schedule != "wsd":
        raise ACIError(f"job {job_id} runs a {schedule} schedule, which decays over its --max-steps by itself: "
                       f"`train stop --job {job_id}` ends it now")
    with state.event("train", f"decay requested for job {job_id}", tool="train", data={"job": job_id}) as w:
        w.write_json(f"{records.JOBS}/{job_id}/{jobfiles.DECAY}", {"requested_at": iso()})
    return jobs.view(state, job_id)


class Requested:
    """The job's side: once the request file appears, the decay's end step, fixed at that moment."""

    def __init__(self, folder: str | Path | None = None):
        folder = folder or os.environ.get(jobs.JOB_DIR_ENV)
        self.path = Path(folder) / jobfiles.DECAY if folder else None
        self.end: int | None = None

    def bound(self, step: int, plan) -> int | None:
        """Steps more the decay allows after `step` (None: not requested)."""
        if self.end is None and self.path is not None and self.path.exists():
            self.end = step + plan.decay_now(step)
        return None if self.end is None else max(0, self.end - step)
