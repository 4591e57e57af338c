"""An OpenAI-compatible `/v1/chat/completions` endpoint as a policy (vLLM, SGLang, llama.cpp, TGI, ...).

One pooled async HTTP client per run. Each request has its own timeout; 5xx answers, 429 and
connection errors are retried with exponential backoff, a bounded number of times, and every failed
attempt is kept for the trace. Other 4xx answers are not retried: they will not get better.

The host check (`integrity.check_endpoint`) runs before this object is made, so a refused host is
never connected to. Proxies from the environment are ignored (`trust_env=False`): a loopback URL must
stay on loopback.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
from typing import Any

from aci.errors import ACIError
from aci.rollout.policy import Call, PolicyError, Reply, Settings, assistant_message, parse_arguments

RETRY_STATUS = {429, 500, 502, 503, 504}
POOL_SIZE = 4  # connections per HTTP pool
BACKOFF_CAP_S = 8.0


def http():
    """The HTTP client module: `httpx2` (what mcp 2.x depends on), else `httpx` (same API)."""
    try:
        import httpx2 as module
    except ImportError:
        try:
            import httpx as module
        except ImportError:
            raise ACIError("neither httpx2 nor httpx is installed; `pip install httpx`") from None
    return module


def normal_base_url(url: str) -> str:
    """`http://host:port` or `.../v1` (with or without a trailing slash) -> `http://host:port/v1`."""
    url = url.strip().rstrip("/")
    if url.endswith("/chat/completions"):
        url = url[: -len("/chat/completions")]
    if not url.startswith(("http://", "https://")):
        raise ACIError(f"endpoint {url!r} must start with http:// or https://, e.g. http://127.0.0.1:8000/v1")
    return url if url.endswith("/v1") else url + "/v1"


class EndpointPolicy:
    kind = "endpoint"

    def __init__(self, base_url: str, model: str, *, timeout_s: float = 120.0, retries: int = 3,
                 backoff_s: float = 0.5, concurrency: int = 8, api_key: str | None = None):
        httpx = http()
        self.base_url = normal_base_url(base_url)
        self.model = model
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._errors = (httpx.TransportError,)
        # httpcore probes every idle connection of a pool on each request, so one pool of N connections costs
        # O(N) per request; small pools, each request on the least busy one, keep that cost flat.
        shards = max(1, math.ceil(concurrency / POOL_SIZE))
        verify = httpx.create_ssl_context() if self.base_url.startswith("https:") else False  # built once: ~60 ms
        self._clients = [httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s, connect=min(10.0, timeout_s)), trust_env=False, headers=headers,
            verify=verify,
            limits=httpx.Limits(max_connections=POOL_SIZE + 1, max_keepalive_connections=POOL_SIZE + 1),
        ) for _ in range(shards)]
        self._busy = [0] * shards

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "model": self.model, "base_url": self.base_url, "timeout_s": self.timeout_s,
                "retries": self.retries}

    def request(self, messages: list[dict], tools: list[dict] | None, settings: Settings) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if tools:
            body["tools"] = tools
        return {**body, **settings.body()}

    async def complete(self, request: dict[str, Any]) -> Reply:
        errors: list[str] = []
        for attempt in range(1, self.retries + 2):
            shard = self._busy.index(min(self._busy))
            self._busy[shard] += 1
            try:
                resp = await self._clients[shard].post(f"{self.base_url}/chat/completions", json=request)
            except self._errors as e:
                errors.append(f"attempt {attempt}: {type(e).__name__}: {e}".rstrip(": "))
            else:
                if resp.status_code == 200:
                    return self._reply(resp, attempt, errors)
                text = resp.text[:300]
                errors.append(f"attempt {attempt}: HTTP {resp.status_code}: {text}")
                if resp.status_code not in RETRY_STATUS:
                    raise PolicyError(f"endpoint answered HTTP {resp.status_code}: {text}", attempt, errors)
            finally:
                self._busy[shard] -= 1
            if attempt <= self.retries:
                delay = min(BACKOFF_CAP_S, self.backoff_s * 2 ** (attempt - 1))
                await asyncio.sleep(delay * random.uniform(0.5, 1.0))
        raise PolicyError(f"endpoint failed after {self.retries + 1} attempts: {errors[-1]}", self.retries + 1, errors)

    def _reply(self, resp, attempt: int, errors: list[str]) -> Reply:
        try:
            data = resp.json()
            choice = data["choices"][0]
            msg = choice["message"]
        except (json.JSONDecodeError, KeyError, IndexError, TypeError) as e:
            raise PolicyError(f"endpoint reply is not a chat completion ({type(e).__name__}: {e}): "
                              f"{resp.text[:300]}", attempt, errors) from None
        calls = []
        for i, tc in enumerate(msg.get("tool_calls") or []):
            fn = tc.get("function") or {}
            raw, args, why = parse_arguments(fn.get("arguments", ""))
            calls.append(Call(id=tc.get("id") or f"call_{i}", name=str(fn.get("name") or ""),
                              arguments_raw=raw, arguments=args, parse_error=why))
        usage = data.get("usage") or {}
        return Reply(
            message=assistant_message(msg.get("content"), calls), calls=calls,
            finish_reason=choice.get("finish_reason"), prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0), attempts=attempt, retry_errors=errors,
        )

    async def served_models(self) -> list[dict[str, Any]]:
        """`GET /v1/models` entries (vLLM reports `id` = served name and `root` = the path it loaded)."""
        try:
            resp = await self._clients[0].get(f"{self.base_url}/models", timeout=min(10.0, self.timeout_s))
            resp.raise_for_status()
            return list(resp.json().get("data") or [])
        except Exception:  # an endpoint without /v1/models: the caller falls back to the given name
            return []

    async def aclose(self) -> None:
        for client in self._clients:
            await client.aclose()
