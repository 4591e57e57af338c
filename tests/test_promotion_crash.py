"""SIGKILL during promotion, again and again: `final_model/` is always the old model or the new one.

A subprocess promotes two checkpoints in turn, forever (the real build, seal, swap and state writes,
without the keep-best decision, which would stop the ping-pong). It is killed at a random instant,
twenty times; after each kill the folder must load (config and weights), every file must belong to
the one version its marker names, and after the recovery any later promotion runs first, `best.json`
must name that same version and no half-built folder may remain. Half the runs use the portable
two-rename swap instead of the atomic directory exchange.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aci.evaluation import promotion, swap
from aci.manifest import file_hash
from tests.eval_helpers import copy_model, ctx, init_run, register

KILLS = 20
LOOP = """
import sys
from pathlib import Path
from aci.context import Context
from aci.evaluation import checkpoints, promotion, swap

ctx = Context(workdir=Path(sys.argv[1]))
ids = sys.argv[2:]
evaluation = {"score": 0.5, "evaluator": "crash-test", "limit": None, "samples": 40, "range": [0.5, 0.5]}
print("ready", flush=True)
i = 0
while True:
    ck = checkpoints.resolve(ctx, ids[i % len(ids)])
    with swap.locked(ctx.state.root):
        promotion.sync(ctx)
        promotion.install(ctx, ck, evaluation, None, None)
    i += 1
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
    proc = subprocess.run([sys.executable, "-c", LOOP.replace("while True", "while i < 1"), str(workdir),
                           "job/checkpoint-1"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rng = random.Random(4)
    seen, missing_before_recovery, repaired = set(), 0, 0
    for k in range(KILLS):
        env = None if k % 2 == 0 else {**os.environ, swap.EXCHANGE_ENV: "0"}
        p = subprocess.Popen([sys.executable, "-c", LOOP, str(workdir), "job/checkpoint-2", "job/checkpoint-1"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        assert p.stdout.readline().strip() == "ready", p.stderr.read()
        time.sleep(rng.uniform(0.0, 1.2))
        p.kill()
        p.wait()
        final = workdir / "final_model"
        if k % 2 == 0:  # the atomic exchange never leaves the name empty, not even for an instant
            assert final.is_dir()
            _check_one_version(workdir, versions)
        elif not final.exists():
            missing_before_recovery += 1
        cx = ctx(workdir)
        with swap.locked(cx.state.root):
            repaired += bool(promotion.sync(cx))
        seen.add(_check_one_version(workdir, versions))
        assert cx.best.promotion_id == swap.marker(final)["promotion_id"]
        assert not [p.name for p in workdir.glob("final_model.*")]
        assert cx.state.journal()  # the state journal is still readable
    assert seen == set(versions), "the kills never let a promotion finish: the test did not exercise swaps"
    print(f"{KILLS} kills: versions seen {sorted(seen)}, final_model missing before recovery "
          f"{missing_before_recovery}x, repairs {repaired}x")
    assert c.state.history()[0]  # git history of the state folder intact


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
