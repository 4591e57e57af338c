"""State durability: concurrent writers serialise, killed writers leave nothing half-written."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aci.errors import ACIError
from aci.state import State, append_jsonl, read_jsonl

WRITER = r"""
import sys
from aci.state import State
root, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = State(root)
for i in range(n):
    with s.event("note", f"{name} {i}", data={"i": i}) as w:
        if i % 10 == 0:
            w.write_json("best.json", {"writer": name, "i": i, "pad": "x" * 2000})
"""

CRASHER = r"""
import sys
from aci.state import State
s = State(sys.argv[1])
print("ready", flush=True)
i = 0
while True:
    with s.event("note", f"event {i}", data={"blob": "y" * (i % 5000)}) as w:
        w.write_json("run.json", {"i": i, "pad": "z" * (i % 20000)})
        w.write_json("best.json", {"i": i, "score": i / 1000})
    i += 1
"""


def _env():
    return {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}


def test_concurrent_writers_lose_nothing(tmp_path):
    root = tmp_path / "state"
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(root), f"w{k}", "250"], env=_env()) for k in range(8)]
    assert [p.wait(timeout=600) for p in procs] == [0] * 8
    raw = (root / "journal.jsonl").read_bytes()
    lines = raw.splitlines()
    assert raw.endswith(b"\n") and len(lines) == 2000
    events = [json.loads(line) for line in lines]
    for k in range(8):  # each writer's events are all there, in its own order
        assert [e["data"]["i"] for e in events if e["message"].startswith(f"w{k} ")] == list(range(250))
    history = State(root).history()
    assert len(history) == 2001 and history[-1] == "state: created"
    assert sorted(history[:-1]) == sorted(f"note: {e['message']}" for e in events)
    assert json.loads((root / "best.json").read_text())["pad"] == "x" * 2000


def _wait_for_journal_lines(root: Path, count: int, writer: subprocess.Popen) -> None:
    """Return once the journal has `count` whole lines (read again only when its size changes)."""
    path, size, give_up = root / "journal.jsonl", -1, time.monotonic() + 120
    while True:
        grown = path.stat().st_size if path.exists() else 0
        if grown != size and (size := grown) and path.read_bytes().count(b"\n") >= count:
            return
        assert writer.poll() is None and time.monotonic() < give_up, "the writer made no progress"
        time.sleep(0.002)


def test_sigkilled_writer_never_corrupts(tmp_path):
    """100 writers SIGKILLed at random points of their writes. Each is killed after its own k-th journal line
    (k random, 1-4) plus a random part of an event's time: waiting for the writer's progress, not a fixed
    time, so a loaded machine cannot turn every kill into one before the first write."""
    root = tmp_path / "state"
    rng = random.Random(1234)
    for _ in range(100):
        lines = (root / "journal.jsonl").read_bytes().count(b"\n") if (root / "journal.jsonl").exists() else 0
        p = subprocess.Popen([sys.executable, "-c", CRASHER, str(root)], stdout=subprocess.PIPE, env=_env())
        assert p.stdout.readline().strip() == b"ready"
        _wait_for_journal_lines(root, lines + rng.randint(1, 4), p)
        time.sleep(rng.uniform(0.0, 0.05))
        p.send_signal(signal.SIGKILL)
        p.wait()
        raw = (root / "journal.jsonl").read_bytes() if (root / "journal.jsonl").exists() else b""
        assert not raw or raw.endswith(b"\n"), "partial journal line"
        for line in raw.splitlines():
            json.loads(line)
        for name in ("run.json", "best.json"):
            if (root / name).exists():
                json.loads((root / name).read_text())
    s = State(root)
    with s.event("note", "after the crashes"):  # a stale git lock from a killed commit is recovered
        pass
    assert s.history()[0] == "note: after the crashes"
    assert len(s.journal()) >= len(s.history()) - 1 > 1
    assert len(s.journal()) > 100  # every writer got at least one whole event in before its kill


def test_torn_tail_is_cut_and_ignored(tmp_path):
    p = tmp_path / "x.jsonl"
    append_jsonl(p, {"a": 1})
    with open(p, "ab") as f:
        f.write(b'{"half": ')
    assert read_jsonl(p) == [{"a": 1}]
    append_jsonl(p, {"b": 2})
    assert p.read_bytes() == b'{"a":1}\n{"b":2}\n'


def test_corrupt_middle_line_names_file_and_line(tmp_path):
    p = tmp_path / "journal.jsonl"
    p.write_bytes(b'{"a":1}\nnot json\n{"b":2}\n')
    with pytest.raises(ACIError, match=r"journal.jsonl:2"):
        read_jsonl(p)


def test_failed_block_writes_no_event(tmp_path):
    s = State(tmp_path / "state")
    with pytest.raises(RuntimeError):
        with s.event("note", "never"):
            raise RuntimeError("boom")
    assert s.journal() == []


def test_stale_git_locks_from_a_killed_commit_are_cleared(tmp_path):
    s = State(tmp_path / "state")
    with s.event("note", "first"):
        pass
    git_dir = s.root / ".git"
    branch = next(p for p in (git_dir / "refs" / "heads").iterdir())
    reflog = git_dir / "logs" / "refs" / "heads" / f"{branch.name}.lock"
    for lock in (git_dir / "index.lock", git_dir / "HEAD.lock", branch.with_name(branch.name + ".lock"), reflog):
        lock.write_text("left by a killed writer")
    with State(s.root).event("note", "second"):
        pass
    assert State(s.root).history()[:2] == ["note: second", "note: first"]
