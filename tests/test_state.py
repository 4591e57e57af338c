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


def _journal_files(root: Path) -> list[Path]:
    """The closed journal segments, then the open journal (see `State.journal`)."""
    return [*sorted((root / "journal").glob("*.jsonl")), *[p for p in [root / "journal.jsonl"] if p.exists()]]


def _journal_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in _journal_files(root))


def _env():
    return {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}


def test_concurrent_writers_lose_nothing(tmp_path):
    root = tmp_path / "state"
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(root), f"w{k}", "250"], env=_env()) for k in range(8)]
    assert [p.wait(timeout=600) for p in procs] == [0] * 8
    raw = _journal_bytes(root)
    lines = raw.splitlines()
    assert all(p.read_bytes().endswith(b"\n") for p in _journal_files(root)) and len(lines) == 2000
    assert len(_journal_files(root)) > 2 and State(root).journal() == [json.loads(line) for line in lines]
    events = [json.loads(line) for line in lines]
    for k in range(8):  # each writer's events are all there, in its own order
        assert [e["data"]["i"] for e in events if e["message"].startswith(f"w{k} ")] == list(range(250))
    history = State(root).history()
    assert len(history) == 2001 and history[-1] == "state: created"
    assert sorted(history[:-1]) == sorted(f"note: {e['message']}" for e in events)
    assert json.loads((root / "best.json").read_text())["pad"] == "x" * 2000


def _wait_for_journal_lines(root: Path, count: int, writer: subprocess.Popen) -> None:
    """Return once the journal has `count` whole lines (read again only when its size changes)."""
    size, give_up = -1, time.monotonic() + 120
    while True:
        grown = sum(p.stat().st_size for p in _journal_files(root))
        if grown != size and (size := grown) and _journal_bytes(root).count(b"\n") >= count:
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
        lines = _journal_bytes(root).count(b"\n")
        p = subprocess.Popen([sys.executable, "-c", CRASHER, str(root)], stdout=subprocess.PIPE, env=_env())
        assert p.stdout.readline().strip() == b"ready"
        _wait_for_journal_lines(root, lines + rng.randint(1, 4), p)
        time.sleep(rng.uniform(0.0, 0.05))
        p.send_signal(signal.SIGKILL)
        p.wait()
        for part in _journal_files(root):
            raw = part.read_bytes()
            assert not raw or raw.endswith(b"\n"), f"partial journal line in {part.name}"
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


def _git_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in (root / ".git").rglob("*") if p.is_file())


def test_an_event_costs_the_state_history_about_its_own_size(workdir):
    """One 8 MB `log-state` value once made every later commit add ~6 MB to state/.git (git keeps each
    version of the journal whole). The value now goes to a side file, committed once, and the journal is
    closed into segments, so a later event adds about itself however long the run has been."""
    import base64

    from aci import registry, state
    from aci.context import Context

    registry.call("plan", {"action": "init", "base_model": "b", "benchmark": "toy"}, Context(workdir=workdir))
    root = workdir / "state"
    blob = base64.b64encode(os.urandom(6 << 20)).decode()  # 8 MB that does not compress
    before = _git_bytes(root)
    out = registry.call("log-state", {"kind": "benchmark-card", "message": "raw items",
                                      "data": {"items": blob, "targets": [{"value": 0.5}]}}, Context(workdir=workdir))
    assert 6 << 20 < _git_bytes(root) - before < 7 << 20  # the value itself, once
    ref = out.event["data"][state.DATA_FILE]
    assert ref["keys"] == ["items"] and out.event["data"]["targets"] == [{"value": 0.5}]
    assert json.loads((root / ref["path"]).read_text())["items"] == blob
    assert len((root / "journal.jsonl").read_bytes()) < 4 * state.EVENT_DATA_BYTES
    for i in range(3):
        before = _git_bytes(root)
        registry.call("log-state", {"message": f"small {i}", "data": {"i": i}}, Context(workdir=workdir))
        assert _git_bytes(root) - before < 16 << 10

    s = State(root)  # a long run: the open journal is closed into segments as it grows
    for i in range(3 * state.SEGMENT_BYTES // 3000):
        with s.event("note", f"filler {i}", data={"pad": "p" * 3000}):
            pass
    closed = sorted((root / "journal").glob("*.jsonl"))
    assert len(closed) >= 2 and all(p.stat().st_size >= state.SEGMENT_BYTES for p in closed)
    assert (root / "journal.jsonl").stat().st_size < state.SEGMENT_BYTES
    events = s.journal()
    assert [e["message"] for e in events[:2]] == ["run card: b on toy", "raw items"]
    assert [e["message"] for e in events][-1] == f"filler {3 * state.SEGMENT_BYTES // 3000 - 1}"
    before = _git_bytes(root)
    registry.call("log-state", {"message": "late", "data": {"i": 1}}, Context(workdir=workdir))
    assert _git_bytes(root) - before < 16 << 10
    assert subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True).stdout == ""


def test_the_benchmark_card_that_closes_recon_is_a_kind_an_agent_can_journal():
    """`log-state --kind` takes `records.AgentKind`; recon closes on `goal.BENCHMARK_CARD`. Typed apart, they
    must stay one name, or the card an agent writes never closes recon."""
    from typing import get_args

    from aci.goal import BENCHMARK_CARD
    from aci.records import AgentKind
    from aci.tools.journal import LogStateInput

    assert BENCHMARK_CARD in get_args(AgentKind)
    assert LogStateInput(kind=BENCHMARK_CARD).kind == BENCHMARK_CARD
