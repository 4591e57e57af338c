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

Where `final_model/` itself cannot be renamed (a mount point, as Harbor mounts it, whose task says not
to delete or rename the folder; or a read-only parent), its contents are swapped instead: the new model
is built and sealed in `final_model/.aci-next-<tag>/`, the old files move into `.aci-prev-<tag>/` (the
old marker first), the new files move up (the new marker last). Each move is one rename inside the
folder, and the folder counts as complete only once its marker is in place, so `recover()` finishes an
interrupted swap from the sealed staging folder (or puts the old files back when none was sealed). A
reader during those renames can see a mixture; after a crash, the next tool call repairs it first.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
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
EXCHANGE_ENV = "ACI_SWAP_EXCHANGE"  # "0" forces the two-rename path, "contents" the contents swap (tests)
NEXT, PREV = ".aci-next-", ".aci-prev-"  # staging folders of a contents swap, inside final_model/
_PINNED_ERRNOS = (errno.EBUSY, errno.EXDEV, errno.EACCES, errno.EPERM, errno.EROFS)
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


def _mount_points() -> set[str]:
    """Mount points of this process's namespace (`/proc/self/mountinfo`'s fifth field, octal escapes read)."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return set()
    return {re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), ln.split()[4]) for ln in lines
            if len(ln.split()) > 4}


def pinned(workdir: Path) -> str | None:
    """Why `final_model/` cannot be renamed (so its contents are swapped instead), or None when it can."""
    final = final_dir(workdir)
    if os.environ.get(EXCHANGE_ENV) == "contents":
        return f"{EXCHANGE_ENV}=contents"
    if final.is_dir() and (os.path.ismount(final) or str(final.resolve()) in _mount_points()):
        return f"{FINAL} is a mount point"
    if final.is_dir() and not os.access(workdir, os.W_OK):
        return f"{workdir} is read-only"
    return None


def _inside(final: Path, prefix: str) -> list[Path]:
    return sorted(p for p in final.glob(f"{prefix}*") if p.is_dir()) if final.is_dir() else []


def _finish_in_place(final: Path, staging: Path, prev: Path) -> None:
    """Move the old files into `prev` (the marker first), then the sealed staging's files up (its marker
    last). Idempotent: after a crash, files already moved up (listed by the staging marker and gone from
    staging) stay, so `recover()` can run it again."""
    new = set((marker(staging) or {}).get("files") or {})
    prev.mkdir(exist_ok=True)
    old = [p for p in final.iterdir() if not p.name.startswith((NEXT, PREV))
           and (p.name not in new or (staging / p.name).exists())]
    for p in sorted(old, key=lambda p: p.name != MARKER):
        target = prev / p.name
        if target.is_dir():
            shutil.rmtree(target)
        os.replace(p, target)
    fsync_dir(final)
    for p in sorted(staging.iterdir()):
        if p.name != MARKER:
            os.replace(p, final / p.name)
    fsync_dir(final)
    os.replace(staging / MARKER, final / MARKER)
    fsync_dir(final)
    shutil.rmtree(staging, ignore_errors=True)
    shutil.rmtree(prev, ignore_errors=True)


def _recover_in_place(final: Path) -> list[str]:
    """An interrupted contents swap: finished from a sealed staging folder, else the old files put back."""
    staged, prevs = _inside(final, NEXT), _inside(final, PREV)
    if not staged and not prevs:
        return []
    if sealed(final):  # the swap completed (or never started): only leftovers to remove
        for p in staged + prevs:
            shutil.rmtree(p, ignore_errors=True)
        return [f"removed leftover {', '.join(p.name for p in staged + prevs)} in {FINAL}"]
    done = [(m.get("built_at", ""), p) for p in staged if (m := sealed(p))]
    if done:
        newest = max(done)[1]
        tag = newest.name[len(NEXT):]
        _finish_in_place(final, newest, final / f"{PREV}{tag}")
        for p in _inside(final, NEXT) + _inside(final, PREV):
            shutil.rmtree(p, ignore_errors=True)
        return [f"finished the interrupted promotion in {FINAL} from {newest.name}"]
    for prev in prevs:  # nothing sealed to finish with: the old files go back, the old marker last
        for p in sorted(prev.iterdir(), key=lambda p: p.name == MARKER):
            os.replace(p, final / p.name)
        shutil.rmtree(prev, ignore_errors=True)
    for p in staged:
        shutil.rmtree(p, ignore_errors=True)
    fsync_dir(final)
    return [f"put back the model in {FINAL} (a promotion was interrupted before its new model was complete)"]


def recover(workdir: Path) -> list[str]:
    """Repair a promotion that was interrupted; returns what was done (empty when nothing was needed).

    Call with the promotion lock held.
    """
    final = final_dir(workdir)
    done = _recover_in_place(final)
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
    why = pinned(workdir)
    if why:
        return _install_in_place(workdir, tag, build, record, why, notes)
    tmp = workdir / f"{FINAL}.tmp-{tag}"
    m = _build_sealed(tmp, build, record, workdir)
    try:
        _swap_names(workdir, final, tmp, tag, notes)
    except OSError as e:  # final_model cannot be renamed after all (a mount `pinned` did not see)
        if e.errno not in _PINNED_ERRNOS or not final.is_dir():
            raise
        return _install_in_place(workdir, tag, build, record, f"renaming {FINAL} failed: {e.strerror}", notes,
                                 built=tmp)
    return m, notes


def _build_sealed(folder: Path, build: Callable[[Path], dict], record: dict, workdir: Path) -> dict:
    """Build the new model into the fresh `folder` and seal it; on any failure the folder is gone and the
    old final_model untouched (a full disk is named as such). Returns the marker."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    try:
        info = build(folder)
        return seal(folder, {**record, **info, "built_at": f"{time.time():.6f}"})
    except BaseException as e:
        shutil.rmtree(folder, ignore_errors=True)
        if disk.is_full_error(e):
            raise disk.full_error(e, workdir, f"building the new {FINAL} (the old one is unchanged)") from None
        raise


def _aside(workdir: Path) -> Path:
    """Where a `final_model/` that no promotion made is kept, so that nothing the user put there is lost."""
    return workdir / f"{FINAL}.unmanaged-{time.strftime('%Y%m%d-%H%M%S')}"


def _swap_names(workdir: Path, final: Path, tmp: Path, tag: str, notes: list[str]) -> None:
    if final.exists() and marker(final) is None:
        aside = _aside(workdir)
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


def _install_in_place(workdir: Path, tag: str, build: Callable[[Path], dict], record: dict, why: str,
                      notes: list[str], built: Path | None = None) -> tuple[dict, list[str]]:
    """`install` for a `final_model/` that cannot be renamed: build and seal inside it (or move the sealed
    `built` folder there), then swap the contents."""
    final = final_dir(workdir)
    final.mkdir(exist_ok=True)
    if marker(final) is None and any(not p.name.startswith((NEXT, PREV)) for p in final.iterdir()):
        if not os.access(workdir, os.W_OK):
            raise ACIError(f"{FINAL} holds files not made by a promotion and cannot be renamed ({why}), nor can "
                           f"they be set aside beside it: move them out of {final}, then promote again")
        aside = _aside(workdir)
        aside.mkdir()
        for p in list(final.iterdir()):
            shutil.move(str(p), str(aside / p.name))  # a copy where the mount is another filesystem
        notes.append(f"{FINAL} was not made by a promotion: kept its files in {aside.name}")
    staging = final / f"{NEXT}{tag}"
    shutil.rmtree(staging, ignore_errors=True)
    if built is not None:
        shutil.move(str(built), str(staging))
        fsync_tree(staging)
        m = marker(staging) or {}
    else:
        m = _build_sealed(staging, build, record, workdir)
    _finish_in_place(final, staging, final / f"{PREV}{tag}")
    notes.append(f"swapped the contents of {FINAL}, not the folder ({why})")
    return m, notes
