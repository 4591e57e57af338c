"""What a tool accepts as a file, checked before anything is opened.

Regular files and folders only: opening a FIFO for reading blocks until some writer opens it (a call
that never returns, holding one of the server's worker threads), and a socket or device is no data
file, so these are refused from a `stat`, which never opens the file.
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

