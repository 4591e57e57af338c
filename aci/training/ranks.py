"""The processes of one training job launched by `accelerate launch` (one rank per GPU, or several on a
CPU): who each one is, and what they decide together.

Every rank trains (data parallel: each its share of every batch, the gradients averaged), so every rank
must take the same steps at the same learning rate and stop after the same step; a rank that stops
alone leaves the others waiting in the next gradient exchange. So a decision that depends on a clock or
a signal is taken once and read by all: rank 0's count of the steps that still fit before the stop time
(its step times decide the WSD decay and the stop), and a stop request any rank received (SIGTERM from
`train stop` reaches every rank through the launcher, but not at the same instant), travel in one
all-reduce after every optimizer step (`agree`). Checkpoints, their registration and the journal are
rank 0's alone (the weights are the same on every rank after a step); each machine's first rank writes
its machine's job progress (`reports`), where `train status` on that machine reads it.

The ranks' identities come from the launcher's environment (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`: torchrun
sets them before the process starts), so they are known before torch is imported; a job run without a
launcher is rank 0 of 1. `torch` is imported only by `agree` and `members`.
"""

from __future__ import annotations

import os
import signal
import socket

from aci.processes import PR_SET_PDEATHSIG

NONE = -1.0  # `agree`: rank 0 has no count (no stop time, or no step measured yet)
ABSENT = -2.0  # `agree`: the count of a rank other than 0, below any count rank 0 sends


def rank() -> int:
    return int(os.environ.get("RANK") or 0)


def world() -> int:
    return int(os.environ.get("WORLD_SIZE") or 1)


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK") or 0)


def is_main() -> bool:
    """Rank 0: the one that saves and registers checkpoints and writes the journal."""
    return rank() == 0


def reports() -> bool:
    """Each machine's first rank: the one that writes its machine's job progress and log lines."""
    return local_rank() == 0


def agree(stop: bool, count: int | None) -> tuple[bool, int | None]:
    """(whether any rank asks to stop, rank 0's `count`), the same on every rank: one all-reduce (MAX)
    of two numbers, on the device the ranks exchange gradients on (gloo: CPU; NCCL: the rank's GPU).
    Alone, the values as given."""
    if world() == 1:
        return stop, count
    import torch
    import torch.distributed as dist
    from accelerate import PartialState

    mine = (NONE if count is None else float(count)) if is_main() else ABSENT
    both = torch.tensor([float(stop), mine], dtype=torch.float64, device=PartialState().device)
    dist.all_reduce(both, op=dist.ReduceOp.MAX)
    agreed = float(both[1])
    return bool(both[0] > 0), None if agreed < 0 else int(agreed)


def members() -> list[dict]:
    """Every rank's number, host and pid, gathered from all (a collective: every rank calls it), so that
    `train status` names the processes the job runs as."""
    me = {"rank": rank(), "host": socket.gethostname(), "pid": os.getpid()}
    if world() == 1:
        return [me]
    import torch.distributed as dist

    out: list = [None] * world()
    dist.all_gather_object(out, me)
    return out


def die_with_launcher() -> None:
    """Under a launcher, have the kernel SIGKILL this rank when the launcher dies (Linux's parent-death
    signal): torchrun starts each rank in a session of its own, so a signal to the job's process group
    reaches the launcher alone, and a launcher killed outright (SIGKILL after a stop's grace, its
    supervisor gone) would leave the ranks training unwatched. A parent that is already gone, or is not
    this job's (it carries no `ACI_JOB_DIR` of ours), means the launcher died first: this rank ends now.
    No-op alone or where there is no `prctl`."""
    if world() == 1:
        return
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (AttributeError, OSError):
        return
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if not _of_this_job(os.getppid()):
        os.kill(os.getpid(), signal.SIGKILL)


def _of_this_job(pid: int) -> bool:
    from aci.jobs import JOB_DIR_ENV

    if pid <= 1 or JOB_DIR_ENV not in os.environ:  # outside a job: any live parent is the launcher
        return pid > 1
    entry = f"{JOB_DIR_ENV}={os.environ[JOB_DIR_ENV]}".encode()
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return entry in f.read().split(b"\0")
    except OSError:  # no /proc (not Linux): trust that the parent is alive
        return True
