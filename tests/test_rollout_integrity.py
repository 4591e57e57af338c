"""Integrity under the posttrainbench profile (loopback only; the base model or its own checkpoints as the
policy) and the vllm serve helper (a stand-in `vllm` executable, since vLLM cannot run here)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from aci import jobs, registry
from aci.context import Context
from aci.errors import ACIError
from aci.records import CHECKPOINTS, CheckpointEntry
from aci.rollout import serve
from aci.state import State, iso
from tests.openai_stub import OpenAIStub
from tests.rollout_helpers import FIXTURES, lines, run_tool, task, write_tasks

BASE = "Org/Base-1B"


def strict_card(workdir):
    registry.call("plan", {"action": "init", "base_model": BASE, "benchmark": "gsm8k", "profile": "posttrainbench"},
                  Context(workdir=workdir))


def register(workdir, checkpoint: str, path: str, parent: str) -> None:
    (workdir / path).mkdir(parents=True, exist_ok=True)
    entry = CheckpointEntry(type="registered", checkpoint=checkpoint, ts=iso(), path=path, parent=parent, job="train-1")
    with State(workdir / "state").event("train", f"registered {checkpoint}") as w:
        w.append(CHECKPOINTS, entry.model_dump(mode="json", exclude_none=True))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_answers(url: str, timeout: float = 20) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end and not serve.answers(url):
        time.sleep(0.1)
    assert serve.answers(url)


def test_hosted_endpoints_refused_before_connecting(workdir):
    strict_card(workdir)
    tasks = write_tasks(workdir / "t.jsonl", [task("a", "q", "5")])
    for url in ("https://api.openai.com/v1", "http://127.0.0.1.nip.io:8000/v1", "http://10.0.0.5:8000"):
        t0 = time.monotonic()
        with pytest.raises(ACIError) as e:
            run_tool(workdir, tasks=str(tasks), endpoint=url, model=BASE)
        assert e.value.rule == "no-hosted-llm" and time.monotonic() - t0 < 2
    assert not (workdir / "rollouts").exists()
    with pytest.raises(ACIError) as e:  # the background path checks before starting a job
        run_tool(workdir, tasks=str(tasks), endpoint="https://api.openai.com/v1", model=BASE, background=True)
    assert e.value.rule == "no-hosted-llm" and jobs.list_jobs(State(workdir / "state")) == []


def test_policy_must_be_base_or_its_checkpoints(workdir):
    strict_card(workdir)
    register(workdir, "train-1/checkpoint-10", "ckpts/c10", "base")
    register(workdir, "train-1/checkpoint-20", "ckpts/c20", "train-1/checkpoint-10")
    register(workdir, "rogue/checkpoint-1", "ckpts/rogue", "Org/Teacher-70B")
    tasks = write_tasks(workdir / "t.jsonl", [task("a", "q", "5")])

    def refused(model_served: str, **extra) -> None:
        with OpenAIStub(["ANSWER: 5"], model=model_served) as stub, pytest.raises(ACIError) as e:
            run_tool(workdir, tasks=str(tasks), endpoint=stub.url, **extra)
        assert e.value.rule == "no-teacher-distillation", e.value
        assert stub.requests == []  # no chat request reached the teacher

    refused("Org/Teacher-70B")
    refused(BASE, model="Org/Teacher-70B")  # the name sent in requests is checked too
    refused(str(workdir / "ckpts/rogue"))  # registered, but not derived from base
    with pytest.raises(ACIError) as e:
        run_tool(workdir, tasks=str(tasks), hf_model="ckpts/rogue")
    assert e.value.rule == "no-teacher-distillation"

    for served, expect, name in ((BASE.lower(), "base", "base"), (str(workdir / "ckpts/c20"), "train-1/checkpoint-20", "c20")):
        with OpenAIStub(["ANSWER: 5"], model=served) as stub:
            out = run_tool(workdir, tasks=str(tasks), endpoint=stub.url, out=f"r/{name}")
            assert len(stub.requests) == 1
        assert out.policy_checkpoint == expect and out.metrics["pooled"]["task_success_rate"]["value"] == 1.0


def test_default_profile_allows_any_teacher(workdir):
    tasks = write_tasks(workdir / "t.jsonl", [task("a", "q", "5")])
    with OpenAIStub(["ANSWER: 5"], model="Org/Teacher-70B") as stub:
        out = run_tool(workdir, tasks=str(tasks), endpoint=stub.url)
    assert out.policy["model"] == "Org/Teacher-70B" and out.policy_checkpoint is None


def test_teacher_served_under_the_base_name_is_caught_by_root(workdir):
    """vLLM reports the path it loaded as `root`; a teacher served as --served-model-name <base> is refused."""
    strict_card(workdir)
    tasks = write_tasks(workdir / "t.jsonl", [task("a", "q", "5")])
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(FIXTURES / "fake_vllm.py"), "serve", "/models/Teacher-70B",
                             "--served-model-name", BASE, "--host", "127.0.0.1", "--port", str(port)],
                            stdout=subprocess.DEVNULL)
    try:
        wait_answers(serve.base_url(port))
        with pytest.raises(ACIError) as e:
            run_tool(workdir, tasks=str(tasks), endpoint=serve.base_url(port))
        assert e.value.rule == "no-teacher-distillation" and "/models/Teacher-70B" in str(e.value)
    finally:
        proc.terminate()
        proc.wait(10)


def test_serve_without_vllm_is_a_clear_error(workdir, monkeypatch):
    monkeypatch.delenv(serve.VLLM_ENV, raising=False)
    monkeypatch.setenv("PATH", str(workdir))
    tasks = write_tasks(workdir / "t.jsonl", [task("a", "q", "5")])
    for args in ({"action": "serve", "serve_model": BASE}, {"tasks": str(tasks), "serve_model": BASE}):
        with pytest.raises(ACIError, match="vLLM is not installed"):
            run_tool(workdir, **args)
    assert jobs.list_jobs(State(workdir / "state")) == []


def test_serve_job_start_wait_stop(workdir, monkeypatch):
    monkeypatch.setenv(serve.VLLM_ENV, f"{sys.executable} {FIXTURES / 'fake_vllm.py'}")
    strict_card(workdir)
    state = State(workdir / "state")
    tasks = write_tasks(workdir / "t.jsonl", [task("a", "q", "5"), task("b", "q", "6")])
    with pytest.raises(ACIError) as e:  # a teacher is refused before a server starts
        run_tool(workdir, action="serve", serve_model="/models/Teacher-70B", serve_port=free_port())
    assert e.value.rule == "no-teacher-distillation" and jobs.list_jobs(state) == []
    with pytest.raises(ACIError, match="always bound to 127.0.0.1"):
        run_tool(workdir, action="serve", serve_model=BASE, serve_port=free_port(), serve_args=["--host", "0.0.0.0"])

    # serve, use, stop
    served = run_tool(workdir, action="serve", serve_model=BASE, serve_port=free_port(), serve_wait_s=30)
    assert served.job["status"] == "running" and serve.answers(served.base_url)
    job = jobs.view(state, served.job["id"])
    assert "--host" in (job_cmd := State(workdir / "state").read(f"jobs/{job.id}/job.json")["command"])
    assert job_cmd[job_cmd.index("--host") + 1] == "127.0.0.1"
    out = run_tool(workdir, tasks=str(tasks), endpoint=served.base_url, out="r/served")
    assert out.metrics["pooled"]["task_success_rate"]["numerator"] == 1
    stopped = run_tool(workdir, action="stop", job=served.job["id"])
    assert stopped.job["status"] == "stopped" and not serve.answers(served.base_url)

    # --serve-model: started for the run and stopped after it
    port = free_port()
    out = run_tool(workdir, tasks=str(tasks), serve_model=BASE, serve_port=port, serve_wait_s=30, out="r/auto")
    assert out.policy["base_url"] == serve.base_url(port) and out.policy_checkpoint == "base"
    assert out.metrics["pooled"]["tokens_per_success"]["value"] == 10.0  # 2 tasks x 5 tokens / 1 success
    assert not serve.answers(serve.base_url(port))
    assert [j.status for j in jobs.list_jobs(state, kind="serve")] == ["stopped", "stopped"]
    assert len(lines(workdir / "r/auto/trial-1.jsonl")) == 2
