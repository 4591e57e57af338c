"""What a tool accepts as a file or a model folder, checked before anything is opened.

* Regular files and folders only: opening a FIFO for reading blocks until some writer opens it (a call
  that never returns, holding one of the server's worker threads), and a socket or device is no data
  file, so these are refused from a `stat`, which never opens the file.
* A model folder's symbolic links must resolve inside the allowed roots: a promotion copies what a link
  points to into `final_model/`, so a link to a file elsewhere (another user's secret, a downloaded
  model's weights) would ship that file under the checkpoint's name.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from aci.errors import ACIError

_KINDS = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"))


def regular_only(path: Path, what: str = "file") -> None:
    """Refuse `path` when it exists as anything but a regular file or a folder (links followed)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # absent (or unreadable): the caller says so where it opens the file
    for test, name in _KINDS:
        if test(mode):
            raise ACIError(f"{what} {path} is {name}, not a regular file: reading it could block forever or read "
                           f"no data; give a regular file (copy the data into one)")


def inside(path: Path, roots: list[Path]) -> bool:
    return any(path == r or r in path.parents for r in roots)


def links_outside(folder: Path, roots: list[Path]) -> list[tuple[str, Path]]:
    """The symbolic links under `folder` (followed into linked folders inside the roots, each folder once)
    that resolve outside `roots`, as (name relative to `folder`, target)."""
    out, seen = [], set()
    for top, dirs, files in os.walk(folder, followlinks=True):
        real = os.path.realpath(top)
        if real in seen:  # a link back to a folder already walked (a cycle)
            dirs[:] = []
            continue
        seen.add(real)
        for name in [*dirs, *files]:
            p = Path(top) / name
            if p.is_symlink():
                target = Path(os.path.realpath(p))  # never raises, a loop of links included
                if not inside(target, roots):
                    out.append((p.relative_to(folder).as_posix(), target))
        dirs[:] = [d for d in dirs if inside(Path(os.path.realpath(Path(top) / d)), roots)]
    return out
