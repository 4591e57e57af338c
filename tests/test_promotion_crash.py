"""SIGKILL during promotion, again and again: `final_model/` is always the old model or the new one.

A process promotes two checkpoints in turn, forever (the real build, seal, swap and state writes,
without the keep-best decision, which would stop the ping-pong). It is killed at a random instant,
a hundred times; after each kill the folder must load (config and weights), every file must belong to
the one version its marker names, and after the recovery any later promotion runs first, `best.json`
must name that same version and no half-built folder may remain. A third of the runs use the portable
two-rename swap instead of the atomic directory exchange, and a third the contents swap used where
final_model cannot be renamed (a mount point). The promoting processes are forked from one
that imported everything once, so the kills land inside promotions, not inside Python's start-up.
"""

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

from aci.evaluation import promotion, swap
from aci.manifest import file_hash
from tests.eval_helpers import copy_model, ctx, init_run, register

KILLS = 100
# Reads `<runs> <exchange>` lines: forks a child that promotes the ids in turn (`runs` times, 0 = until
# killed) with the directory exchange on ("1") or off ("0"), prints its pid, then `reaped <status>` once
# it has ended (the test kills it).
ZYGOTE = """
import os, sys
from pathlib import Path
import filelock, git, tokenizers  # imported once, before the forks
from aci.context import Context
from aci.evaluation import checkpoints, promotion, swap

workdir, ids = Path(sys.argv[1]), sys.argv[2:]
evaluation = {"score": 0.5, "evaluator": "crash-test", "limit": None, "samples": 40, "range": [0.5, 0.5]}
print("ready", flush=True)
for line in sys.stdin:
    runs, exchange = line.split()
    pid = os.fork()
    if pid == 0:
        os.environ[swap.EXCHANGE_ENV] = exchange
        ctx = Context(workdir=workdir)
        i = 0
        while int(runs) == 0 or i < int(runs):
            ck = checkpoints.resolve(ctx, ids[i % len(ids)])
            with swap.locked(ctx.state.root):
                promotion.sync(ctx)
                promotion.install(ctx, ck, evaluation, None, None)
            i += 1
        os._exit(0)
    print(pid, flush=True)
    print("reaped", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""


def _perturbed(src: Path, dst: Path, score: float) -> Path:
    from safetensors.torch import load_file, save_file

    copy_model(src, dst, score)
    weights = load_file(dst / "model.safetensors")
    name = sorted(weights)[0]
    weights[name] = weights[name] + 1.0
    save_file(weights, dst / "model.safetensors", metadata={"format": "pt"})
    return dst


def _check_one_version(workdir: Path, versions: dict[str, tuple[str, float]]) -> str:
    from safetensors.torch import load_file
    from transformers import AutoConfig

    final = workdir / "final_model"
    m = swap.marker(final)
    assert m is not None and m["checkpoint"] in versions
    assert swap.verify(final) == []  # every file is the one sealed with this version
    digest, score = versions[m["checkpoint"]]
    assert file_hash(final / "model.safetensors") == digest
    assert json.loads((final / "config.json").read_text())["aci_test_score"] == score
    AutoConfig.from_pretrained(final)
    assert load_file(final / "model.safetensors")
    return m["checkpoint"]


def test_sigkill_during_promotion_always_leaves_a_loadable_final_model(workdir, tiny_model):
    c = init_run(workdir, tiny_model)
    a = copy_model(tiny_model, workdir / "runs" / "checkpoint-1", 0.3)
    b = _perturbed(tiny_model, workdir / "runs" / "checkpoint-2", 0.7)
    register(workdir, "job/checkpoint-1", a)
    register(workdir, "job/checkpoint-2", b)
    versions = {"job/checkpoint-1": (file_hash(a / "model.safetensors"), 0.3),
                "job/checkpoint-2": (file_hash(b / "model.safetensors"), 0.7)}
    assert versions["job/checkpoint-1"][0] != versions["job/checkpoint-2"][0]
    zygote = subprocess.Popen([sys.executable, "-c", ZYGOTE, str(workdir), "job/checkpoint-1", "job/checkpoint-2"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def fork(runs: int, exchange: str) -> int:
        zygote.stdin.write(f"{runs} {exchange}\n")
        zygote.stdin.flush()
        return int(zygote.stdout.readline())

    def reaped() -> int:
        line = zygote.stdout.readline().split()
        assert line[:1] == ["reaped"], (line, zygote.stderr.read() if zygote.poll() is not None else "")
        return int(line[1])

    assert zygote.stdout.readline().strip() == "ready", zygote.stderr.read()
    fork(1, "1")
    assert reaped() == 0  # a first promotion, so every kill below replaces a model
    rng = random.Random(4)
    seen, missing_before_recovery, repaired, in_place = set(), 0, 0, 0
    for k in range(KILLS):
        exchange = ("1", "0", "contents")[k % 3]
        pid = fork(0, exchange)
        time.sleep(rng.uniform(0.0, 1.2))
        os.kill(pid, signal.SIGKILL)
        assert reaped() == -signal.SIGKILL
        final = workdir / "final_model"
        if exchange == "1":  # the atomic exchange never leaves the name empty, not even for an instant
            assert final.is_dir()
            _check_one_version(workdir, versions)
        elif exchange == "0" and not final.exists():
            missing_before_recovery += 1
        elif exchange == "contents":
            assert final.is_dir()  # the folder itself never moves
        cx = ctx(workdir)
        with swap.locked(cx.state.root):
            notes = promotion.sync(cx)
            repaired += bool(notes)
            in_place += any(n.startswith(("finished the interrupted", "put back", "removed leftover .aci-")) for n in notes)
        seen.add(_check_one_version(workdir, versions))
        assert cx.best.promotion_id == swap.marker(final)["promotion_id"]
        assert not [p.name for p in workdir.glob("final_model.*")]
        assert cx.state.journal()  # the state journal is still readable
    assert seen == set(versions), "the kills never let a promotion finish: the test did not exercise swaps"
    print(f"{KILLS} kills: versions seen {sorted(seen)}, final_model missing before recovery "
          f"{missing_before_recovery}x, repairs {repaired}x ({in_place}x inside a mounted-style final_model)")
    assert c.state.history()[0]  # git history of the state folder intact
    zygote.stdin.close()
    assert zygote.wait(timeout=60) == 0


def _writes(name: str, text: str):
    """A build function that writes one file (for the swap mechanics alone)."""

    def build(out: Path) -> dict:
        (out / name).write_text(text)
        return {}

    return build


def test_recover_restores_the_newest_sealed_folder_and_removes_half_built_ones(workdir, tiny_model):
    init_run(workdir, tiny_model)
    a = copy_model(tiny_model, workdir / "a", 0.3)
    c = ctx(workdir)
    register(workdir, "j/checkpoint-1", a)
    from aci.evaluation import checkpoints

    ck = checkpoints.resolve(c, "j/checkpoint-1")
    with swap.locked(c.state.root):
        promotion.install(c, ck, {"score": 0.3, "evaluator": "t", "samples": 40}, None, None)
    final = workdir / "final_model"
    # the state of a two-rename swap killed between its renames, plus a half-built folder
    final.rename(workdir / "final_model.old-x")
    half = workdir / "final_model.tmp-y"
    half.mkdir()
    (half / "config.json").write_text("{}")
    with swap.locked(c.state.root):
        notes = promotion.sync(c)
    assert final.is_dir() and swap.verify(final) == []
    assert any("restored final_model from final_model.old-x" in n for n in notes)
    assert not half.exists() and not (workdir / "final_model.old-x").exists()
    # a folder made by hand is never deleted by a promotion: it is set aside
    (final / "config.json").write_text((final / "config.json").read_text())
    (final / swap.MARKER).unlink()
    with swap.locked(c.state.root):
        marker, notes = swap.install(workdir, "z", _writes("f", "x"), {"checkpoint": "hand"})
    aside = [p for p in workdir.glob("final_model.unmanaged-*")]
    assert len(aside) == 1 and (aside[0] / "config.json").is_file() and "kept it as" in notes[-1]
    assert (final / "f").read_text() == "x" and marker["files"]["f"]["size"] == 1


@pytest.mark.parametrize("exchange", ["1", "0"])
def test_swap_paths_replace_the_folder_whole(workdir, monkeypatch, exchange):
    monkeypatch.setenv(swap.EXCHANGE_ENV, exchange)
    for version in ("old", "new"):
        with swap.locked(workdir / "state"):
            swap.install(workdir, version, _writes("v.txt", version), {"checkpoint": version})
    final = workdir / "final_model"
    assert (final / "v.txt").read_text() == "new" and swap.verify(final) == []
    assert sorted(p.name for p in workdir.iterdir()) == ["final_model", "state"]
