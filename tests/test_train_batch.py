"""The micro-batch is found, not guessed (`aci.training.batch`): the search over the divisors of the batch
per step, and real training steps of the job's trainer on the tiny model with a simulated out-of-memory
error (a GPU cannot exist here: a forward hook raises torch's own `OutOfMemoryError` above a token budget,
where a GPU would), from which the search backs off, frees memory and goes on."""

from __future__ import annotations

import pytest

from aci.training import batch
from tests.test_train_packing import _trainer
from tests.train_helpers import no_stray_jobs  # noqa: F401 (fixture)

torch = pytest.importorskip("torch")


def _tried(limit: int, sizes: list[int]) -> tuple[int | None, list[int]]:
    tried: list[int] = []

    def fits(n: int) -> bool:
        tried.append(n)
        return n <= limit

    return batch.largest_fitting(sizes, fits), tried


def test_the_search_grows_then_bisects():
    assert batch.divisors(16) == [1, 2, 4, 8, 16] and batch.divisors(24) == [1, 2, 3, 4, 6, 8, 12, 24]
    assert _tried(5, batch.divisors(16)) == (4, [1, 2, 4, 8])
    assert _tried(100, batch.divisors(16)) == (16, [1, 2, 4, 8, 16])
    assert _tried(7, batch.divisors(24)) == (6, [1, 2, 4, 8, 6])  # 8 failed: back to 6, between 4 and 8
    assert _tried(20, batch.divisors(24)) == (12, [1, 2, 4, 8, 24, 12])
    assert _tried(0, batch.divisors(16)) == (None, [1])


def test_gradient_checkpointing_only_when_memory_needs_it():
    def probe(budget_off: int, budget_on: int):
        def run(n: int, gc: bool) -> batch.Trial:
            fits = n <= (budget_on if gc else budget_off)
            return batch.Trial(n, gc, fits, tokens=100 * n if fits else 0, seconds=1.0 if fits else None)
        return run

    plan = batch.search(16, probe(4, 16), None)
    assert (plan.micro_batch, plan.grad_accum, plan.gradient_checkpointing, plan.tokens_per_s) == (4, 4, False, 400)
    plan = batch.search(16, probe(0, 8), None)  # not one row without it
    assert (plan.micro_batch, plan.grad_accum, plan.gradient_checkpointing) == (8, 2, True)
    assert [(t.micro_batch, t.gradient_checkpointing) for t in plan.trials] == [(1, False), (1, True), (2, True),
                                                                                (4, True), (8, True), (16, True)]
    with pytest.raises(batch.DoesNotFit, match="even with gradient checkpointing"):
        batch.search(16, probe(0, 0), None)
    with pytest.raises(batch.DoesNotFit, match="without .*gradient checkpointing") as e:
        batch.search(16, probe(0, 8), False)  # checkpointing refused by the agent: nothing fits
    assert "'gradient_checkpointing': True" not in str(e.value)  # the trials named are the ones run


def _oom_above(model, tokens: int, *, unless_checkpointing: bool = False):
    def hook(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if unless_checkpointing and module.is_gradient_checkpointing:
            return
        if ids is not None and ids.numel() > tokens:
            raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {ids.numel()} tokens (simulated)")

    return model.register_forward_pre_hook(hook, with_kwargs=True)


def test_real_steps_back_off_from_a_simulated_out_of_memory_error(tmp_path, tiny_model):
    trainer, _ = _trainer(tmp_path, tiny_model, packing=True)
    rows = len(trainer.train_dataset)
    longest = max(len(r["input_ids"]) for r in trainer.train_dataset)
    handle = _oom_above(trainer.model, 3 * longest)  # three of the longest rows fit, four do not
    plan = batch.search(8, batch.TrainerProbe(trainer), None)
    handle.remove()
    assert rows >= 3
    assert (plan.micro_batch, plan.grad_accum, plan.gradient_checkpointing) == (2, 4, False)
    tried = [(t.micro_batch, t.fits) for t in plan.trials]
    assert tried == [(1, True), (2, True), (4, False)]
    oom = plan.trials[-1]
    assert "OutOfMemoryError" in oom.error and oom.tokens_per_s is None
    two_longest = sum(sorted((len(r["input_ids"]) for r in trainer.train_dataset), reverse=True)[:2])
    assert plan.tokens_per_s and plan.tokens_per_s > 0 and plan.trials[1].tokens == batch.TIMED_STEPS * two_longest
    # after the failure nothing is left behind: no gradients, and the trainer trains on
    assert all(p.grad is None for p in trainer.model.parameters())
    assert batch.TrainerProbe(trainer)(2, False).fits
    report = plan.report()
    assert report["trials"][2]["fits"] is False and report["micro_batch"] == 2


def test_checkpointing_turns_on_when_not_one_row_fits_without_it(tmp_path, tiny_model):
    trainer, _ = _trainer(tmp_path, tiny_model, packing=True)
    handle = _oom_above(trainer.model, 0, unless_checkpointing=True)
    plan = batch.search(4, batch.TrainerProbe(trainer), None)
    handle.remove()
    assert plan.gradient_checkpointing and plan.micro_batch == 4 and plan.trials[0].error
    assert trainer.model.is_gradient_checkpointing


def test_other_errors_are_not_mistaken_for_memory(tmp_path, tiny_model):
    trainer, _ = _trainer(tmp_path, tiny_model, packing=True)

    def broken(module, args, kwargs):
        raise RuntimeError("shape mismatch")

    trainer.model.register_forward_pre_hook(broken, with_kwargs=True)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        batch.search(4, batch.TrainerProbe(trainer), None)
    assert batch.is_oom(RuntimeError("CUDA error: out of memory")) and not batch.is_oom(ValueError("out of memory"))


@pytest.mark.usefixtures("no_stray_jobs")
def test_dry_run_finds_the_batch_and_start_uses_it(tmp_path, tiny_model, monkeypatch):
    from tests.train_helpers import FAST, call, make_run, wait

    monkeypatch.delenv("ACI_STATE", raising=False)
    make_run(tmp_path, tiny_model)
    asked = {**FAST, "batch_size": 2, "grad_accum": 2, "max_steps": 20}
    dry = call(tmp_path, action="dry-run", data="sft.jsonl", **asked, measure_steps=2)
    found = dry.checks["batch"]
    assert found["searched"] and found["source"] == f"measured now by job {dry.job.id}"
    assert found["trials"] == [] and found["why"].startswith("CPU")  # no trial steps on a CPU
    log = (tmp_path / "state" / "jobs" / dry.job.id / "log").read_text()
    assert log.count("[aci] speed:") == 1, log  # the model loaded once
    assert (dry.config["batch_size"], dry.config["grad_accum"]) == (4, 1)
    assert dry.checks["per_step"]["why"] == f"--batch-size 2 x --grad-accum 2 as asked, in one micro-batch ({found['why']})"
    est = dry.checks["estimate"]
    assert est["rate_source"] == f"measured now by job {dry.job.id}" and est["tokens_per_s"] > 0
    assert dry.job.progress["batch"]["micro_batch"] == 4 and dry.job.progress["step"] == 2

    again = call(tmp_path, action="dry-run", data="sft.jsonl", **asked, measure_steps=2)  # the split is reused
    assert again.checks["batch"]["source"] == f"measured by job {dry.job.id}"
    assert again.checks["estimate"]["rate_source"] == f"measured now by job {again.job.id}"
    assert "[aci] batch:" not in (tmp_path / "state" / "jobs" / again.job.id / "log").read_text()

    start = call(tmp_path, action="start", data="sft.jsonl", **{**asked, "max_steps": 1})
    assert start.checks["batch"]["source"] == f"measured by job {dry.job.id}"
    assert (start.config["batch_size"], start.config["grad_accum"]) == (4, 1)
    assert wait(tmp_path, start.job.id).job.status == "succeeded"
    as_asked = call(tmp_path, action="dry-run", data="sft.jsonl", **asked, find_batch=False)
    assert (as_asked.config["batch_size"], as_asked.config["grad_accum"]) == (2, 2) and "batch" not in as_asked.checks
    other = call(tmp_path, action="dry-run", data="sft.jsonl", **{**asked, "max_length": 48})  # another shape
    assert (other.config["batch_size"], other.config["grad_accum"]) == (2, 2)
