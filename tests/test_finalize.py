"""`finalize` on a correct final_model and on broken copies, each with one planted defect."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path

import pytest

from aci import registry
from aci.evaluation import swap
from aci.progress import FINALIZE, gates
from tests.conftest import mcp_client
from tests.eval_helpers import (
    call,
    copy_model,
    ctx,
    init_run,
    make_lora,
    single_thread,  # noqa: F401 (fixture)
)

pytestmark = pytest.mark.usefixtures("single_thread")


def _promoted(workdir: Path, tiny_model: Path, **card) -> Path:
    """A run whose final_model is a real promotion of a checkpoint that beat the base model."""
    init_run(workdir, tiny_model, **card)
    copy_model(tiny_model, workdir / "ck", 0.6)
    call(workdir, checkpoint="base", limit=40)
    assert call(workdir, checkpoint="ck", parent="base", limit=40, promote=True).promotion.promoted
    return workdir / "final_model"


def finalize(workdir: Path, **args):
    return registry.call("finalize", args, ctx(workdir))


def by_name(out) -> dict:
    return {i.name: i for i in out.items}


def test_finalize_passes_a_correct_final_model_and_opens_the_gate(workdir, tiny_model):
    _promoted(workdir, tiny_model)
    out = finalize(workdir, eval_limit=5)
    assert out.passed, [i for i in out.items if not i.passed]
    items = by_name(out)
    assert list(items) == ["present", "config", "weights", "merged", "tokenizer", "template", "end-of-turn",
                           "sampling", "processor", "promotion", "eval-files", "generates", "eval"]
    assert "no settings chosen" in items["sampling"].detail
    assert "<|im_end|> (id 2)" in items["end-of-turn"].detail and "ck" in items["promotion"].detail
    assert "scored 0.6" in items["eval"].detail and "on 5 samples" in items["eval"].detail
    rec = ctx(workdir).state.read(FINALIZE)
    assert rec["passed"] and rec["checkpoint"] == "ck" and len(rec["items"]) == 13
    assert ctx(workdir).state.journal(1)[0]["kind"] == "finalize"
    assert gates(ctx(workdir))["finalized"].passed
    assert "final_model PASSED" in out.summary()


def _drop(*names):
    def plant(final: Path, base: Path) -> None:
        for n in names:
            (final / n).unlink()
    return plant


def _eos(ids):
    def plant(final: Path, base: Path) -> None:
        gen = json.loads((final / "generation_config.json").read_text())
        (final / "generation_config.json").write_text(json.dumps({**gen, "eos_token_id": ids}))
    return plant


def _gen(extra: dict):
    def plant(final: Path, base: Path) -> None:
        gen = json.loads((final / "generation_config.json").read_text())
        (final / "generation_config.json").write_text(json.dumps({**gen, **extra}))
    return plant


def _lora(final: Path, base: Path) -> None:
    adapter = make_lora(base, final.parent / "adapter")
    for p in adapter.iterdir():
        shutil.copy(p, final / p.name)


def _bin_only(final: Path, base: Path) -> None:
    import torch
    from safetensors.torch import load_file

    torch.save(load_file(final / "model.safetensors"), final / "pytorch_model.bin")
    (final / "model.safetensors").unlink()


def _processor(final: Path, base: Path) -> None:
    (base / "preprocessor_config.json").write_text('{"image_processor_type": "Gemma3ImageProcessor"}')


DEFECTS = {
    "missing-generation-config": (_drop("generation_config.json"), "end-of-turn", "generation_config.json missing"),
    "unmerged-lora": (_lora, "merged", "unmerged LoRA files: adapter_config.json"),
    "missing-tokenizer": (_drop("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"), "tokenizer",
                          "no tokenizer files"),
    "wrong-end-of-turn-id": (_eos([0]), "end-of-turn", "does not include <|im_end|> (id 2)"),
    "bin-only-weights": (_bin_only, "weights", "only pytorch .bin weights"),
    "missing-processor-files": (_processor, "processor", "missing preprocessor_config.json"),
    "generation-config-vllm-cannot-load": (_gen({"max_new_tokens": 0}), "sampling", "vLLM would fail to start"),
}


@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_finalize_catches_each_planted_defect(workdir, tiny_model, defect):
    final = _promoted(workdir, tiny_model)
    plant, item, detail = DEFECTS[defect]
    plant(final, workdir / "base")
    out = finalize(workdir)
    items = by_name(out)
    assert not out.passed and not items[item].passed
    assert detail in items[item].detail and items[item].fix
    assert items["config"].passed and items["present"].passed  # the rest is still checked
    rec = ctx(workdir).state.read(FINALIZE)
    assert rec["passed"] is False and item in ctx(workdir).state.journal(1)[0]["data"]["failed"]
    assert not gates(ctx(workdir))["finalized"].passed


def test_finalize_without_a_final_model_says_how_to_get_one(workdir, tiny_model):
    init_run(workdir, tiny_model)
    out = finalize(workdir)
    assert not out.passed and [i.name for i in out.items] == ["present"]
    assert "eval-checkpoint promote" in out.items[0].fix


def test_finalize_repairs_an_interrupted_swap_first(workdir, tiny_model):
    final = _promoted(workdir, tiny_model)
    final.rename(workdir / "final_model.old-crash")  # killed between the two renames
    out = finalize(workdir)
    assert out.passed and final.is_dir() and any("restored final_model" in n for n in out.notes)


def test_finalize_flags_edited_evaluation_files_and_a_hand_made_folder(workdir, tiny_model):
    (workdir / "evaluate.py").write_text("print('eval')\n")
    final = _promoted(workdir, tiny_model)
    (workdir / "evaluate.py").write_text("print('edited')\n")
    (final / swap.MARKER).unlink()
    items = by_name(finalize(workdir))
    assert not items["eval-files"].passed and "evaluate.py" in items["eval-files"].detail
    assert not items["promotion"].passed and "not made by a promotion" in items["promotion"].detail
    assert items["generates"].passed


def test_finalize_through_the_stdio_mcp_server(workdir, tiny_model):
    final = _promoted(workdir, tiny_model)
    _eos([0])(final, workdir / "base")

    async def go():
        async with mcp_client(workdir, env={"OMP_NUM_THREADS": "1"}) as client:
            r = await client.call_tool("finalize", {})
            assert not r.is_error, r.content
            s = r.structured_content
            assert s["passed"] is False
            assert [i["name"] for i in s["items"] if not i["passed"]] == ["end-of-turn", "promotion"]

    asyncio.run(go())
    assert json.loads((ctx(workdir).state.root / FINALIZE).read_text())["passed"] is False
    assert os.path.isdir(final)
