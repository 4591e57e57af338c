"""Durable run state: plain files a person can read, written so that no crash can corrupt them.

Layout (see `state/README.md`): `run.json`, `journal.jsonl`, `checkpoints.jsonl`, `best.json`,
`jobs/<id>/`, `data/<name>/manifest.json`. Three properties hold for every write:

* it happens under one file lock (`.lock`), so concurrent processes serialise;
* JSON files are replaced atomically (temporary file, fsync, rename) and JSONL lines are appended whole
  with one `write` call; a torn last line left by a killed writer is cut off by the next append and
  ignored by readers;
* the folder is a git repository and each event is one commit, so `git log` is the run's history.

Callers group their writes in `State.event(...)`, which appends exactly one journal event and makes
exactly one commit when the block succeeds.
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO

from aci.errors import ACIError, where

STATE_ENV = "ACI_STATE"
JOURNAL = "journal.jsonl"
# Every event commits the journal, and git stores each version of a file whole: a journal committed as one
# file made each commit cost the whole journal (one 8 MB event, 6 MB every later commit). So the journal
# is closed into `journal/<n>.jsonl` (committed once, never changed) when it passes SEGMENT_BYTES, and an
# event's data beyond EVENT_DATA_BYTES goes to `events/<event id>.json`: a commit adds about the event.
SEGMENTS = "journal"
SEGMENT_BYTES = 64 << 10
EVENTS = "events"
EVENT_DATA_BYTES = 16 << 10
DATA_FILE = "data_file"  # key of an event's data naming the file that holds its largest values
LOCK_TIMEOUT_S = 120.0
_GITIGNORE = """\
# Written by aci: lock and temporary files, and bulky or fast-changing job output.
.lock
.promote.lock
*.tmp
guard.json
checks/
evals/*/*.log
evals/*/*.responses.jsonl
jobs/*/log
jobs/*/progress.json
jobs/*/exit.reserve
jobs/*/end.pending
"""


def now() -> datetime:
    return datetime.now(timezone.utc)


def gitpython():
    """GitPython, once a git executable answers; else the named error, before anything is written.

    GitPython runs `git version` when it is imported (its GIT_PYTHON_REFRESH check): without a git on PATH
    (or at $GIT_PYTHON_GIT_EXECUTABLE) the import raises an ImportError whose traceback every state-writing
    command printed, and under GIT_PYTHON_REFRESH=quiet or warn it imports with `GIT_OK` false and the
    first commit fails instead. The run's state is a git repository (one commit per event), so `State.event`
    and every tool that may write ask here first."""
    try:
        import git
    except ModuleNotFoundError:  # GitPython itself missing: a broken installation, not the machine's git
        raise
    except ImportError:
        git = None
    if git is None or not git.GIT_OK:
        named = os.environ.get("GIT_PYTHON_GIT_EXECUTABLE")
        found = f"$GIT_PYTHON_GIT_EXECUTABLE ({named}) does not run" if named else "no `git` on PATH"
        raise ACIError(f"git is needed and not found ({found}): the run's state is a git repository, one commit "
                       f"per event, so nothing was written. Install git (`apt-get install git` on Debian or "
                       f"Ubuntu, `dnf install git`, `apk add git`) or set GIT_PYTHON_GIT_EXECUTABLE to its path, "
                       f"then run the command again")
    return git


def iso(t: datetime | None = None) -> str:
    return (t or now()).isoformat(timespec="seconds")


def parse_ts(value: str) -> datetime:
    """Read an ISO time written by us or by pydantic ('Z' suffix), also on Python 3.10; naive means UTC."""
    t = datetime.fromisoformat(value[:-1] + "+00:00" if value.endswith("Z") else value)
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def resolve_root(state: Path | str | None = None, workdir: Path | str | None = None) -> Path:
    """The one rule for where a run's state lives: the folder given, else $ACI_STATE, else `<workdir>/state`
    (workdir: the current directory). The CLI, the MCP server, the jobs and `aci report` all ask here."""
    return Path(state or os.environ.get(STATE_ENV) or Path(workdir or os.getcwd()) / "state").resolve()


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so readers see the old or the new content, never a mix."""
    with atomic_writer(path) as f:
        f.write(data)


@contextmanager
def atomic_writer(path: Path) -> Iterator[BinaryIO]:
    """A binary file to write that replaces `path` when the block ends, so readers see the old or the
    new content, never a mix; an exception in the block leaves `path` as it was. Why a stream: a large
    output (a clean copy of a training set) is written as it is made, never held whole in memory."""
    if path.is_dir():  # the rename below would fail only after the data was written
        raise ACIError(f"{path} is a folder; give a file name to write to")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def atomic_write_json(path: Path, data: Any) -> None:
    atomic_write_bytes(path, (json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n").encode())


def fsync_dir(directory: Path) -> None:
    """Make a rename inside `directory` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def append_jsonl(path: Path, record: Any) -> None:
    """Append one JSON line whole. A torn tail from a killed writer is truncated first."""
    data = (json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str) + "\n").encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        _cut_torn_tail(fd)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def _cut_torn_tail(fd: int) -> None:
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    pos = size
    while pos > 0:
        start = max(0, pos - 65536)
        chunk = os.pread(fd, pos - start, start)
        cut = chunk.rfind(b"\n")
        if cut >= 0:
            os.ftruncate(fd, start + cut + 1)
            return
        pos = start
    os.ftruncate(fd, 0)


def read_jsonl(path: Path) -> list[dict]:
    """Every complete line of a JSONL state file; a torn last line (no newline) is not yet a record."""
    if not path.exists():
        return []
    raw = path.read_bytes()
    if raw and not raw.endswith(b"\n"):
        raw = raw[: raw.rfind(b"\n") + 1]
    out = []
    for n, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise ACIError(f"corrupt state line at {where(path, n)}: {e.msg}") from None
    return out


def read_json(path: Path) -> Any:
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ACIError(f"corrupt state file {where(path, e.lineno)}: {e.msg}") from None


class State:
    """One run's state folder. Cheap to construct; touches the disk only when used."""

    def __init__(self, root: Path | str | None = None):
        self.root = resolve_root(root)
        self._repo = None

    # -- reading (no lock: every file is always whole) ------------------------------------------
    def read(self, rel: str) -> Any:
        return read_json(self.root / rel)

    def lines(self, rel: str) -> list[dict]:
        return read_jsonl(self.root / rel)

    def journal(self, last: int | None = None) -> list[dict]:
        """Every event, oldest first: the closed segments, then the open journal (read again should a
        writer close it meanwhile)."""
        while True:
            closed = self._segments()
            events = [e for p in closed for e in read_jsonl(p)] + self.lines(JOURNAL)
            if self._segments() == closed:
                return events[-last:] if last else events

    def _segments(self) -> list[Path]:
        return sorted((self.root / SEGMENTS).glob("*.jsonl"))

    # -- writing ----------------------------------------------------------------------------------
    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the state lock (for read-modify-write sequences that are not themselves an event)."""
        from filelock import FileLock, Timeout

        self.root.mkdir(parents=True, exist_ok=True)
        try:
            with FileLock(self.root / ".lock", timeout=LOCK_TIMEOUT_S):
                yield
        except Timeout:
            raise ACIError(f"state {self.root} is locked by another process for over {LOCK_TIMEOUT_S:.0f} s") from None

    @contextmanager
    def event(self, kind: str, message: str, *, tool: str | None = None, data: dict | None = None) -> Iterator[Writer]:
        """Group writes into one journal event and one git commit.

        The block's writes happen first; if it raises, no event is logged and nothing is committed. A full
        disk is raised as the named condition (`aci.disk`), not as the OSError of whichever write met it.
        """
        from aci import disk

        gitpython()  # before the lock file or any write: without git no event could be committed
        with self.locked():
            try:
                self._ensure_repo()
                w = Writer(self)
                yield w
                event_id = uuid.uuid4().hex[:12]
                record = {
                    "id": event_id,
                    "ts": iso(),
                    "kind": kind,
                    "tool": tool,
                    "message": message,
                    "data": self._bounded({**(data or {}), **w.data}, event_id, w),
                }
                self._close_segment(w)
                append_jsonl(self.root / JOURNAL, record)
                w.touched.add(JOURNAL)
                self._commit(sorted(w.touched), f"{kind}: {message}")
            except OSError as e:
                if disk.is_full_error(e):
                    raise disk.full_error(e, self.root, f"recording '{kind}: {message}' in state") from None
                raise

    def _close_segment(self, w: Writer) -> None:
        """Move a journal past `SEGMENT_BYTES` to the next `journal/<n>.jsonl` (git records a rename of the
        same content, no new copy of it); the event then starts a new journal.jsonl."""
        path = self.root / JOURNAL
        if not path.exists() or path.stat().st_size < SEGMENT_BYTES:
            return
        (self.root / SEGMENTS).mkdir(exist_ok=True)
        rel = f"{SEGMENTS}/{len(self._segments()) + 1:06d}.jsonl"
        os.replace(path, self.root / rel)
        fsync_dir(self.root)
        w.touched.add(rel)

    @staticmethod
    def _bounded(data: dict, event_id: str, w: Writer) -> dict:
        """`data` with its largest values moved to `events/<event_id>.json` when it is over `EVENT_DATA_BYTES`
        as JSON; `data_file` then names that file, the keys it holds and its size."""
        def size(v: Any) -> int:
            return len(json.dumps(v, ensure_ascii=False, default=str).encode())

        total = size(data)
        if total <= EVENT_DATA_BYTES:
            return data
        inline, moved = dict(data), {}
        for key in sorted(data, key=lambda k: size(data[k]), reverse=True):
            if total <= EVENT_DATA_BYTES // 2:
                break
            total -= size(data[key])
            moved[key] = inline.pop(key)
        rel = f"{EVENTS}/{event_id}.json"
        w.write_json(rel, moved)
        return {**inline, DATA_FILE: {"path": rel, "keys": sorted(moved), "bytes": size(moved)}}

    # -- git ----------------------------------------------------------------------------------------
    def _ensure_repo(self) -> None:
        git_dir = self.root / ".git"
        if git_dir.is_dir():
            # We hold the state lock, so no live writer owns a git lock file (index, HEAD, a ref or its
            # reflog): any that exists was left by a writer killed mid-commit and would block every
            # later commit. (objects/ is skipped: git writes objects through temporary files, not locks.)
            for stale in [*git_dir.glob("*.lock"), *(git_dir / "refs").rglob("*.lock"),
                          *(git_dir / "logs").rglob("*.lock")]:
                stale.unlink(missing_ok=True)
            return
        repo = gitpython().Repo.init(self.root)
        (self.root / ".gitignore").write_text(_GITIGNORE)
        repo.index.add([".gitignore"])
        repo.index.commit("state: created", author=_actor(), committer=_actor())

    def _commit(self, paths: list[str], message: str) -> None:
        try:
            self._commit_once(paths, message)
        except OSError:
            # A kept git helper died: `train stop` signals the job's process group, and the `git cat-file`
            # helpers of a trainer registering its last checkpoint are in it. Start them afresh, once.
            if self._repo is not None:
                try:
                    self._repo.git.clear_cache()
                except OSError:
                    pass
                self._repo = None
            self._commit_once(paths, message)

    def _commit_once(self, paths: list[str], message: str) -> None:
        if self._repo is None:  # kept: its git cat-file helpers are reused across events
            self._repo = gitpython().Repo(self.root)
        repo = self._repo
        present = [p for p in paths if (self.root / p).exists()]
        gone = [p for p in paths if not (self.root / p).exists()]
        index = repo.index
        if present:
            index.add(present)
        if gone:
            index.remove(gone, ignore_unmatch=True)
        line = " ".join(message.split())
        index.commit(line[:160], author=_actor(), committer=_actor())

    def history(self) -> list[str]:
        """Commit messages, newest first."""
        if not (self.root / ".git").is_dir():
            return []
        return [c.message.strip() for c in gitpython().Repo(self.root).iter_commits()]


class Writer:
    """The writes of one event; only usable inside `State.event`."""

    def __init__(self, state: State):
        self.state = state
        self.touched: set[str] = set()
        self.data: dict = {}

    def write_json(self, rel: str, data: Any) -> None:
        atomic_write_json(self.state.root / rel, data)
        self.touched.add(rel)

    def append(self, rel: str, record: Any) -> None:
        append_jsonl(self.state.root / rel, record)
        self.touched.add(rel)

    def remove(self, rel: str) -> None:
        (self.state.root / rel).unlink(missing_ok=True)
        self.touched.add(rel)

    def track(self, rel: str) -> None:
        """Commit a file written by other means (e.g. a copied histogram PNG)."""
        self.touched.add(rel)


def _actor():
    return gitpython().Actor("aci", "aci@localhost")
