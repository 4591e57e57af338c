"""Replace `final_model/` so that an interruption at any instant leaves the old model or the new one.

The new folder is built beside the old one (`final_model.tmp-<tag>`), flushed to disk, and sealed with a
marker file (`.aci-promotion.json`: what it is, and the size and sha256 of every file). Only a sealed
folder is ever moved into place:

* where the kernel can exchange two directories atomically (`renameat2(RENAME_EXCHANGE)`, Linux >= 3.15
  on ext4, xfs, btrfs, tmpfs), the new folder and `final_model/` swap names in one step, so
  `final_model/` never stops existing;
* elsewhere the old folder is renamed to `final_model.old-<tag>` and the new one to `final_model`; a
  crash between the two renames leaves no `final_model/` for an instant, and `recover()` (run before
  every promotion and by `finalize`) moves the newest sealed folder back into place.

Leftover `.tmp-`/`.old-` folders are removed by `recover()` once `final_model/` exists. A
`final_model/` without a marker (made by hand) is never deleted: it is set aside as
`final_model.unmanaged-<time>`.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from aci import disk
from aci.errors import ACIError
from aci.evaluation.folder import fsync_tree, read_json
from aci.manifest import file_hash
from aci.state import atomic_write_json, fsync_dir

FINAL = "final_model"
MARKER = ".aci-promotion.json"
LOCK = ".promote.lock"
LOCK_TIMEOUT_S = 3600.0
EXCHANGE_ENV = "ACI_SWAP_EXCHANGE"  # "0" forces the two-rename path (portable filesystems, tests)
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def final_dir(workdir: Path) -> Path:
    return workdir / FINAL


@contextmanager
def locked(state_root: Path):
    """Serialise promotions (and recovery) across processes; separate from the state lock so a
    promotion can write state events while holding it."""
    from filelock import FileLock, Timeout

    state_root.mkdir(parents=True, exist_ok=True)
    try:
        with FileLock(state_root / LOCK, timeout=LOCK_TIMEOUT_S):
            yield
    except Timeout:
        raise ACIError(f"another promotion has held {state_root / LOCK} for over {LOCK_TIMEOUT_S:.0f} s") from None


def marker(folder: Path) -> dict | None:
    try:
        return read_json(folder / MARKER)
    except ACIError:
        return None


def sealed(folder: Path) -> dict | None:
    """The marker of a complete folder: every file it lists is present with its recorded size."""
    m = marker(folder)
    if not m or not isinstance(m.get("files"), dict):
        return None
    for name, info in m["files"].items():
        p = folder / name
        if not p.is_file() or p.stat().st_size != info.get("size"):
            return None
    return m


def verify(folder: Path) -> list[str]:
    """Files whose content differs from the marker (sha256), missing, or not listed in it."""
    m = marker(folder)
    if not m:
        return [f"{MARKER} missing"]
    bad = []
    listed = m.get("files") or {}
    for name, info in listed.items():
        p = folder / name
        if not p.is_file():
            bad.append(f"{name} missing")
        elif file_hash(p) != info.get("sha256"):
            bad.append(f"{name} changed")
    bad += [f"{p.name} not part of the promoted model" for p in folder.iterdir()
            if p.name != MARKER and p.name not in listed]
    return bad


def seal(folder: Path, record: dict) -> dict:
    """Write the marker last: from here on the folder counts as complete."""
    files = {p.name: {"size": p.stat().st_size, "sha256": file_hash(p)}
             for p in sorted(folder.iterdir()) if p.is_file() and p.name != MARKER}
    m = {**record, "files": files}
    atomic_write_json(folder / MARKER, m)
    fsync_tree(folder)
    return m


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap the names of two directories; False when the platform cannot."""
    if os.environ.get(EXCHANGE_ENV) == "0":
        return False
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (22, 38, 95, 18):  # EINVAL, ENOSYS, EOPNOTSUPP, EXDEV: not supported here
        return False
    raise OSError(err, f"renameat2({a}, {b}): {os.strerror(err)}")


def _leftovers(workdir: Path) -> list[Path]:
    return sorted(p for p in workdir.glob(f"{FINAL}.*") if p.is_dir() and p.name.split(".", 1)[1].startswith(("tmp-", "old-")))


def recover(workdir: Path) -> list[str]:
    """Repair a promotion that was interrupted; returns what was done (empty when nothing was needed).

    Call with the promotion lock held.
    """
    final = final_dir(workdir)
    done = []
    if not final.exists():
        complete = [(m.get("built_at", ""), p) for p in _leftovers(workdir) if (m := sealed(p))]
        if complete:
            newest = max(complete)[1]
            os.rename(newest, final)
            fsync_dir(workdir)
            done.append(f"restored {FINAL} from {newest.name} (a promotion was interrupted mid-swap)")
    if final.exists():
        for p in _leftovers(workdir):
            shutil.rmtree(p, ignore_errors=True)
            done.append(f"removed leftover {p.name}")
    return done


def install(workdir: Path, tag: str, build: Callable[[Path], dict], record: dict) -> tuple[dict, list[str]]:
    """Build the new model with `build(folder)`, seal it with `record`, and swap it into place.

    Returns the marker written and notes (an unmanaged folder set aside). Call with the lock held.
    """
    final = final_dir(workdir)
    notes = recover(workdir)
    tmp = workdir / f"{FINAL}.tmp-{tag}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        info = build(tmp)
        m = seal(tmp, {**record, **info, "built_at": f"{time.time():.6f}"})
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if disk.is_full_error(e):
            raise disk.full_error(e, workdir, f"building the new {FINAL} (the old one is unchanged)") from None
        raise
    if final.exists() and marker(final) is None:
        aside = workdir / f"{FINAL}.unmanaged-{time.strftime('%Y%m%d-%H%M%S')}"
        os.rename(final, aside)
        fsync_dir(workdir)
        notes.append(f"{FINAL} was not made by a promotion: kept it as {aside.name}")
    if final.exists() and _exchange(tmp, final):
        fsync_dir(workdir)
        shutil.rmtree(tmp, ignore_errors=True)  # now holds the previous model
    elif final.exists():
        old = workdir / f"{FINAL}.old-{tag}"
        os.rename(final, old)
        fsync_dir(workdir)
        os.rename(tmp, final)
        fsync_dir(workdir)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, final)
        fsync_dir(workdir)
    return m, notes

