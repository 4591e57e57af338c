"""A full disk as a named condition: free-space checks before big writes, and ENOSPC turned into an error
that says which disk, how full, and what to delete.

A 10-hour run saves checkpoints of several GB each; the disk fills, and the first symptom used to be a
crash far from the cause (a failed git commit, a job "killed: SIGKILL/OOM?"). Promotion and evaluation
folders check `require_free` before copying; jobs keep a bounded number of checkpoints
(`keep_checkpoints`); the job supervisor names a full disk in a failed job's reason (`full_note`).
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

from aci.errors import ACIError

MARGIN_BYTES = 64 << 20  # left free beyond what a write needs (state commits, logs), at most 2 % of the disk
FULL_BYTES = 16 << 20  # this little free space left (at most 1 % of the disk): the disk is called full


def _usage(path: Path):
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    return shutil.disk_usage(p)


def free_bytes(path: Path) -> int:
    """Free bytes on the filesystem holding `path` (or its nearest existing parent)."""
    return _usage(path).free


def gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def _advice(where: Path) -> str:
    return (f"free space on the disk holding {where}: delete checkpoints you will not evaluate or promote "
            f"(rm -r checkpoints/<job>/checkpoint-<step>; train keeps the last --keep-checkpoints of a job), and "
            f"scratch folders (.aci-scratch)")


def require_free(where: Path, needed: int, what: str) -> None:
    """Refuse before writing `needed` bytes under `where` when the disk cannot hold them (plus a margin)."""
    usage = _usage(where)
    margin = min(MARGIN_BYTES, usage.total // 50)
    if usage.free < needed + margin:
        raise ACIError(f"disk full: {what} needs about {gb(needed)} on the disk holding {where}, and "
                       f"{gb(usage.free)} is free (a {gb(margin)} margin is kept); nothing was changed. "
                       f"{_advice(where)}")


def is_full_error(e: BaseException) -> bool:
    return isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)


def full_error(e: OSError, where: Path, what: str) -> ACIError:
    """The named condition for an ENOSPC met while writing `what` under `where`."""
    return ACIError(f"disk full while {what} ({e.strerror}; {gb(free_bytes(where))} free on the disk holding "
                    f"{where}). {_advice(where)}")


def full_note(*paths: Path) -> str | None:
    """`the disk holding X is full (N free)` for the first of `paths` whose disk is (nearly) full."""
    for p in paths:
        try:
            usage = _usage(p)
        except OSError:
            continue
        if usage.free < min(FULL_BYTES, usage.total // 100):
            return f"the disk holding {p} is full ({gb(usage.free)} free: No space left on device)"
    return None
