"""`aci train dry-run --lr-probe`: short runs at several learning rates from the same start on the same
batches, each rate's held-out loss drop, and the rate suggested from them."""

from __future__ import annotations

import pytest

from aci.errors import ACIError
from aci.training import probe
from tests.train_helpers import FAST, call, make_run, no_stray_jobs  # noqa: F401 (fixture)


@pytest.mark.usefixtures("no_stray_jobs")
def test_the_lr_probe_compares_rates_from_the_same_start(tmp_path, tiny_model, monkeypatch):
    monkeypatch.delenv("ACI_STATE", raising=False)
    make_run(tmp_path, tiny_model, profile="default", contamination=None)
    out = call(tmp_path, action="dry-run", data="sft.jsonl", **FAST, max_steps=50, learning_rate=1e-3, lr_probe=True,
               lr_probe_steps=3)
    report = out.checks["lr_probe"]
    results = report["results"]
    assert [r["learning_rate"] for r in results] == pytest.approx([1e-3 * f for f in probe.FACTORS])
    assert len({r["first_loss"] for r in results}) == 1  # the same weights on the same first batch
    assert len({r["loss_before"] for r in results}) == 1 and all(r["seconds"] > 0 for r in results)
    best = max(r["drop"] for r in results if not r["rose"])
    close = [r["learning_rate"] for r in results if not r["rose"] and r["drop"] >= (1 - probe.CLOSE) * best]
    assert report["suggested"] == min(close) and report["held_out_rows"] == 4
    assert report["steps_per_rate"] == 3 and report["seconds"] >= sum(r["seconds"] for r in results) - 0.1 * len(results)
    assert "suggested: " in out.summary() and f"job {report['job']}" in out.summary()
    with pytest.raises(ACIError, match="^--lr-probe .*--method grpo"):
        call(tmp_path, action="dry-run", method="grpo", data="tasks.jsonl", **{**FAST, "batch_size": 4},
             num_generations=2, max_steps=2, lr_probe=True)


def test_the_probe_suggests_the_lowest_rate_about_as_good_as_the_best():
    def probed(*drops):
        return [{"learning_rate": 10.0 ** (k - 4), "loss_before": 5.0, "loss_after": 5.0 - d, "drop": d}
                for k, d in enumerate(drops)]

    report = probe.summarize(probed(0.1, 0.5, 1.9, 2.0, float("-inf")), steps=10, held_out=8)
    assert report["suggested"] == 1e-2 and [r["rose"] for r in report["results"]] == [False] * 4 + [True]
    assert "within 10% of the largest" in report["why"] and "probe again" not in report["why"]
    assert "the largest probed" in probe.summarize(probed(0.1, 0.2, 0.3), steps=10, held_out=8)["why"]
    none = probe.summarize(probed(-0.1, -0.2), steps=10, held_out=8)
    assert none["suggested"] is None and "no probed rate lowered the held-out loss" in none["why"]
