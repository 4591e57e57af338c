"""`aci.cpus`: threads from the cores other processes leave free, measured with real busy processes."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from aci import cpus


def _window(seconds: float, work=None) -> tuple[cpus.Sample, cpus.Sample]:
    a = cpus.sample()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if work:
            work()
        else:
            time.sleep(0.05)
    return a, cpus.sample()


@pytest.mark.skipif(cpus.sample() is None, reason="needs /proc/stat (Linux)")
def test_busy_neighbours_take_cores_and_this_process_is_not_counted(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    n = cpus.cores()
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        time.sleep(0.3)
        a, b = _window(1.0)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert cpus.others_busy(a, b) > n - 0.6
    choice = cpus.choose(a, b)
    assert choice.threads == 1 and f"1 of {n} cores: other processes kept" in choice.why

    def spin():  # this process's own computing is not someone else's load
        sum(range(20_000))

    quiet = cpus.others_busy(*_window(1.0))  # whatever else runs on the machine now
    assert cpus.others_busy(*_window(1.0, spin)) < quiet + 0.5  # this process's spinning adds nothing


def test_the_callers_thread_count_is_kept_and_unreadable_load_uses_every_core(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert cpus.choose(None, None) == cpus.Choice(3, "OMP_NUM_THREADS=3 (set by the caller)")
    monkeypatch.setenv(cpus.LAUNCHER_SET_ENV, "1")  # a launcher's, not the caller's: measured instead
    assert cpus.choose(None, None).threads == cpus.cores()
    monkeypatch.delenv(cpus.LAUNCHER_SET_ENV)
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert cpus.choose(None, None).threads == cpus.cores()
    assert "cannot be read" in cpus.choose(None, None).why


THREADS_EVAL = """import argparse, json, os
p = argparse.ArgumentParser()
p.add_argument("--model-path")
p.add_argument("--json-output-file")
a = p.parse_args()
json.dump({"accuracy": 1.0, "threads": int(os.environ["OMP_NUM_THREADS"])}, open(a.json_output_file, "w"))
"""


@pytest.mark.skipif(cpus.sample() is None, reason="needs /proc/stat (Linux)")
def test_an_eval_command_beside_busy_processes_gets_the_free_cores(tmp_path, monkeypatch):
    from aci.evaluation.command import CommandEvaluator

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    (tmp_path / "ev.py").write_text(THREADS_EVAL)
    ev = CommandEvaluator(f"{sys.executable} ev.py --model-path {{model_path}} --json-output-file {{output}}",
                          metric_key="accuracy", limit=None, timeout_s=60, cwd=tmp_path, out_dir=tmp_path / "out",
                          label="t")
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cpus.cores())]
    try:
        time.sleep(0.3)
        trial = ev.run("model", seed=0)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert trial.details["beside"] == {"threads": 1}
    assert "other processes kept" in trial.details["cpu_threads"]
