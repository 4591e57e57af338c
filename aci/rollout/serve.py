"""`vllm serve` as a supervised job on loopback: start, wait until it answers, stop.

Rollouts at scale belong on an inference engine, not on `transformers.generate`. The server is a job
(`aci.jobs`), so it shows in `status`, survives the MCP server restarting, and is stopped by id. It is
always bound to 127.0.0.1: a `--host` among the extra arguments is refused. The executable is `vllm`
next to the running Python or on PATH (`ACI_VLLM` names another one, e.g. a wrapper script).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from aci import jobs
from aci.context import Context
from aci.errors import ACIError

VLLM_ENV = "ACI_VLLM"
HOST = "127.0.0.1"


def vllm_executable() -> list[str]:
    if os.environ.get(VLLM_ENV):
        return shlex.split(os.environ[VLLM_ENV])
    found = shutil.which("vllm", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if not found:
        raise ACIError("vLLM is not installed here (no `vllm` executable next to this Python or on PATH). "
                       f"Install it where a GPU is available (`pip install vllm`), set {VLLM_ENV} to its command, "
                       "or roll out with the local Hugging Face policy (--hf-model PATH) for small runs")
    return [found]


def base_url(port: int) -> str:
    return f"http://{HOST}:{port}/v1"


def command(model: str, port: int, extra: list[str]) -> list[str]:
    if any(a == "--host" or a.startswith("--host=") for a in extra):
        raise ACIError("vllm serve is always bound to 127.0.0.1 by run-trajectory; remove --host from the arguments")
    return [*vllm_executable(), "serve", model, "--host", HOST, "--port", str(port), *extra]


def answers(url: str, timeout_s: float = 2.0) -> bool:
    from aci.rollout.endpoint import http

    try:
        return http().get(f"{url}/models", timeout=timeout_s, trust_env=False).status_code == 200
    except Exception:
        return False


def start(ctx: Context, model: str, port: int, extra: list[str], wait_s: float) -> tuple[jobs.JobView, str]:
    """Start the server job and return once `/v1/models` answers (or raise with the log's tail)."""
    url = base_url(port)
    if answers(url):
        raise ACIError(f"something already answers on {url}; stop it or choose another --serve-port")
    cmd = command(model, port, extra)
    job = jobs.start(ctx.state, "serve", cmd, {"model": model, "port": port, "base_url": url, "args": extra},
                     cwd=ctx.workdir, message=f"vllm serve {model} on {url}")
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if answers(url):
            return jobs.view(ctx.state, job.id), url
        view = jobs.view(ctx.state, job.id)
        if view.status != "running":
            raise ACIError(f"vllm serve job {job.id} ended before answering ({view.reason}); log tail:\n"
                           f"{jobs.tail(Path(view.folder) / 'log', 15)}")
        time.sleep(1.0)
    jobs.stop(ctx.state, job.id)
    raise ACIError(f"vllm serve job {job.id} did not answer on {url} within {wait_s:g} s; stopped it. "
                   f"Log: {Path(job.folder) / 'log'}")


@contextmanager
def serving(ctx: Context, model: str, port: int, extra: list[str], wait_s: float) -> Iterator[str]:
    """A server for the duration of a block; stopped afterwards whatever happens."""
    job, url = start(ctx, model, port, extra, wait_s)
    try:
        yield url
    finally:
        jobs.stop(ctx.state, job.id)
