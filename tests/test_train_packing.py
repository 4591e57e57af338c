"""Packing keeps samples apart, on the tiny model with the real trainer the job builds (CPU, fp32):

* the packed rows the job trains on give every assistant token the same loss as TRL's own unpacked
  batches of the same samples (within 1e-4), and the trainer's loss on the batch is the same, with sdpa
  and with eager attention, in rows (sdpa/eager) and joined into one row (the FlashAttention layout);
* changing one sample's tokens changes no other sample's logits, while the same change with the
  position ids of one long sequence does (the check can fail);
* what the job runs with is chosen from what is installed and supported (`aci.training.hardware`).

Run in both lanes: transformers 5 / TRL 1 (the shared venv) and transformers 4.57 / TRL 0.27 (compat).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from aci import templates
from aci.training import data, hardware, run
from aci.training.config import TrainConfig
from tests.train_helpers import DATA, no_stray_jobs, sft_rows, write_jsonl  # noqa: F401 (fixture)

torch = pytest.importorskip("torch")

KEY = 16  # the first tokens of a sample name it (they hold the question's numbers)


def _rows(n: int) -> list[dict]:
    rows = sft_rows(n)
    for i, r in enumerate(rows):  # lengths that differ, so packing has something to fit
        r["messages"][1]["content"] += " Check:" + " ok" * (i % 5)
    return rows


def _trainer(tmp_path: Path, model: Path, *, packing: bool, n: int = 12):
    data_path = write_jsonl(tmp_path / "sft.jsonl", _rows(n))
    cfg = TrainConfig(method="sft", job="t", state=str(tmp_path / "state"), workdir=str(tmp_path),
                      output_dir=str(tmp_path / f"out-{packing}"), model_path=str(model), parent="base",
                      data=str(data_path), data_sha256="0" * 64, template=str(DATA / "qwen3_like.jinja"),
                      learning_rate=1e-4, max_length=160, batch_size=n, grad_accum=1, packing=packing)
    tok = templates.load_tokenizer(model)
    tok.pad_token = tok.pad_token or tok.eos_token
    template = templates.load(cfg.template, tok)
    from transformers import TrainerCallback

    class Callback(TrainerCallback):  # the job's callback without its job folder: progress goes nowhere
        progress: dict = {}
        plan = None  # the trainer's own (cosine) schedule

        def preparing(self, what, done=None, total=None):
            pass

    trainer, speed = run.build_trainer(cfg, tok, template, Callback(), cuda=False,
                                       content=data_path.read_bytes())
    trainer.model.eval()
    return trainer, speed


def _batches(trainer) -> list[dict]:
    return [trainer._prepare_inputs(b) for b in trainer.get_train_dataloader()]


def _logits(model, batch: dict):
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    with torch.no_grad():
        return model(**inputs, use_cache=False).logits


def _samples(batch: dict) -> list[tuple[int, int, int]]:
    """(row, start, end) of every sample: position resets (packed) or the attention mask (unpacked)."""
    out = []
    for r in range(batch["input_ids"].shape[0]):
        if "position_ids" in batch:
            pos = batch["position_ids"][r].tolist()
            starts = [i for i, p in enumerate(pos) if p == 0] + [len(pos)]
            out += [(r, a, b) for a, b in zip(starts, starts[1:], strict=False)]
        else:
            out.append((r, 0, int(batch["attention_mask"][r].sum())))
    return out


def _per_token(model, batch: dict) -> dict[tuple, float]:
    """{(sample, position in sample): loss} for every token that carries loss."""
    logp = _logits(model, batch).float().log_softmax(-1)
    ids, labels = batch["input_ids"], batch["labels"]
    out = {}
    for r, a, b in _samples(batch):
        key = tuple(ids[r, a:a + KEY].tolist())
        for t in range(a, b - 1):
            if labels[r, t + 1] != -100:
                out[(key, t + 1 - a)] = -logp[r, t, labels[r, t + 1]].item()
    return out


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_packed_rows_give_the_same_per_token_loss_as_unpacked_batches(tmp_path, tiny_model, monkeypatch, attention):
    monkeypatch.setattr(hardware, "attention", lambda cuda, capability=None: attention)
    unpacked, _ = _trainer(tmp_path, tiny_model, packing=False)
    packed, speed = _trainer(tmp_path, tiny_model, packing=True)
    assert speed.packing and not speed.packing_flat and speed.attention == attention, speed
    assert packed.model.config._attn_implementation == attention
    assert len(packed.train_dataset) < len(unpacked.train_dataset) == 12  # rows hold several samples

    [plain] = _batches(unpacked)
    [rows] = _batches(packed)
    assert "attention_mask" not in rows and rows["input_ids"].shape[0] == len(packed.train_dataset)
    reference = _per_token(unpacked.model, plain)
    assert len({k for k, _ in reference}) == 12 and len(reference) > 12 * 5
    flat = data.PackedCollator(packed.processing_class.pad_token_id, flat=True)(list(packed.train_dataset))
    assert flat["input_ids"].shape[0] == 1 and flat["cu_seq_lens_q"][-1] == flat["input_ids"].shape[1]
    for batch in (rows, flat):
        got = _per_token(packed.model, batch)
        assert got.keys() == reference.keys()  # the same tokens carry loss: assistant tokens only
        worst = max(abs(got[k] - reference[k]) for k in reference)
        assert worst < 1e-4, worst

    # the trainer's loss on the whole batch: the same, packed or not
    loss_plain = unpacked.compute_loss(unpacked.model, dict(plain)).item()
    loss_rows = packed.compute_loss(packed.model, dict(rows)).item()
    assert abs(loss_plain - loss_rows) < 1e-4, (loss_plain, loss_rows)
    assert abs(loss_plain - sum(reference.values()) / len(reference)) < 1e-4


def test_no_sample_attends_across_a_boundary(tmp_path, tiny_model):
    packed, _ = _trainer(tmp_path, tiny_model, packing=True)
    [rows] = _batches(packed)
    r = max(range(rows["input_ids"].shape[0]), key=lambda i: int((rows["position_ids"][i] == 0).sum()))
    batch = {k: v[r:r + 1] for k, v in rows.items()}
    (_, a0, b0), (_, a1, _b1), *_ = _samples(batch)
    assert a0 == 0 and a1 == b0  # at least two samples in this row

    def changed(position_ids) -> tuple[float, float]:
        """Largest logit change inside the first sample, and after it, when the first sample's tokens change."""
        base = {**batch, "position_ids": position_ids}
        other = {**base, "input_ids": base["input_ids"].clone()}
        other["input_ids"][0, 1:b0] = (other["input_ids"][0, 1:b0] + 7) % packed.model.config.vocab_size
        d = (_logits(packed.model, base) - _logits(packed.model, other)).abs()
        return d[0, :b0].max().item(), d[0, b0:].max().item()

    inside, after = changed(batch["position_ids"])
    assert inside > 1e-3 and after < 1e-5, (inside, after)
    inside, after = changed(torch.arange(batch["input_ids"].shape[1])[None])  # one long sequence: leaks
    assert after > 1e-3, after


def test_packing_falls_back_when_the_model_cannot_keep_samples_apart(tmp_path, tiny_model, monkeypatch):
    unpacked, _ = _trainer(tmp_path, tiny_model, packing=False)
    model = unpacked.model
    assert hardware.packing_blocker(model) is None  # sdpa with masking utilities that detect packing
    from transformers import masking_utils

    monkeypatch.delattr(masking_utils, "find_packed_sequence_indices")
    assert "does not detect packed sequences" in hardware.packing_blocker(model)
    speed = hardware.decide(model, cuda=True, packing=None, gradient_checkpointing=None)
    assert not speed.packing and "packing off" in speed.note
    assert not hardware.decide(model, cuda=True, packing=None, gradient_checkpointing=None, method="grpo").packing


def _stub(tmp_path: Path, monkeypatch, *names: str) -> None:
    """Importable stand-ins for GPU-only packages (flash-attn, liger-kernel need CUDA to build or run, so
    they cannot be installed here): only their presence matters to the choice."""
    for name in names:
        (tmp_path / "stubs" / name).mkdir(parents=True)
        (tmp_path / "stubs" / name / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "stubs"))


def test_kernels_are_chosen_from_what_is_installed(tmp_path, monkeypatch, tiny_model):
    for name in ("flash_attn", "flash_attn_interface", "liger_kernel"):
        assert not hardware.installed(name), f"{name} is installed here; this test assumes a CPU machine"
    assert hardware.attention(cuda=True, capability=(9, 0)) is None  # sdpa: transformers' default
    assert not hardware.liger(cuda=True)
    _stub(tmp_path, monkeypatch, "flash_attn", "liger_kernel")
    assert hardware.attention(cuda=True, capability=(9, 0)) == "flash_attention_2"
    assert hardware.attention(cuda=False) is None  # no CUDA, no FlashAttention
    assert hardware.liger(cuda=True) and not hardware.liger(cuda=False)
    _stub(tmp_path / "fa3", monkeypatch, "flash_attn_interface")
    assert hardware.attention(cuda=True, capability=(9, 0)) == "flash_attention_3"  # Hopper
    assert hardware.attention(cuda=True, capability=(8, 0)) == "flash_attention_2"  # Ampere

    unpacked, _ = _trainer(tmp_path, tiny_model, packing=False)
    model = unpacked.model
    on_gpu = hardware.decide(model, cuda=True, packing=None, gradient_checkpointing=None)
    assert on_gpu.packing and on_gpu.bf16 and on_gpu.liger and on_gpu.gradient_checkpointing
    on_cpu = hardware.decide(model, cuda=False, packing=None, gradient_checkpointing=None)
    assert not on_cpu.packing and not on_cpu.bf16 and not on_cpu.liger and not on_cpu.gradient_checkpointing
    model.config._attn_implementation = "flash_attention_2"
    assert hardware.decide(model, cuda=True, packing=None, gradient_checkpointing=False).packing_flat


def test_the_job_falls_back_to_default_attention_when_the_kernel_is_refused(tmp_path, tiny_model, monkeypatch,
                                                                          capsys):
    monkeypatch.setattr(hardware, "attention", lambda cuda, capability=None: "flash_attention_2")
    trainer, speed = _trainer(tmp_path, tiny_model, packing=True)  # flash_attn is not installed: refused
    assert "flash_attention_2 unavailable" in capsys.readouterr().out
    assert speed.attention in ("sdpa", "eager") and speed.packing and not speed.packing_flat
    assert "flash_attn" not in sys.modules


@pytest.mark.usefixtures("no_stray_jobs")
def test_a_packed_job_trains_and_counts_every_token(tmp_path, tiny_model, monkeypatch):
    from tests.train_helpers import FAST, call, make_run, wait

    monkeypatch.delenv("ACI_STATE", raising=False)
    make_run(tmp_path, tiny_model)
    start = call(tmp_path, action="start", data="sft.jsonl", **{**FAST, "max_length": 256}, packing=True,
                 max_steps=2)
    assert start.config["packing"] is True
    view = wait(tmp_path, start.job.id).job
    assert view.status == "succeeded", view.log_tail
    p = view.progress
    assert p["speed"]["packing"] and p["speed"]["attention"] == "sdpa" and not p["speed"]["bf16"]
    # 16 samples of ~55 tokens in rows of 256: 2 rows a step hold ~8 samples, all counted
    assert 2 * 4 * 40 < p["tokens"] <= 2 * 2 * 256, p
