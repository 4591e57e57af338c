"""Shared fixtures: a locally built tiny model, a fresh run workdir, and a real stdio MCP client."""

from __future__ import annotations

import os
import sys
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# No hub access at run time, ever: fail loudly instead of hanging on the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Tiny models on a 2-core box: one BLAS thread per process beats contention between many (child
# processes such as servers and jobs inherit it).
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """A ~150 KB Qwen2-architecture model and BPE tokenizer with a ChatML template, built offline."""
    from aci.embedded import build_model

    return build_model(tmp_path_factory.mktemp("tiny-model"), "test")


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    """An empty run working directory; the state folder defaults to `<workdir>/state`."""
    monkeypatch.delenv("ACI_STATE", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def server_params(workdir: Path, *extra: str, env: dict | None = None):
    from mcp import StdioServerParameters

    return StdioServerParameters(
        command=sys.executable, args=["-m", "aci.cli", *extra, "serve"], cwd=str(workdir),
        env={**os.environ, **(env or {})},
    )


@asynccontextmanager
async def mcp_client(workdir: Path, *extra: str, env: dict | None = None):
    """The real `aci serve` over stdio, driven by the SDK's client."""
    from mcp import Client

    async with Client(server_params(workdir, *extra, env=env)) as client:
        yield client
