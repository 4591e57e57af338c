"""A local model as a policy: render with its chat template, generate, parse hermes calls.

Generation goes through `aci.generation`: vLLM where it can run (CUDA, installed, memory free), so the
requests of the trajectories rolling at the same time are answered in one batch; transformers otherwise
(CPU, tests), one request at a time so each seeded request samples the same whatever else is running.
The recorded request carries the rendered prompt text as well as the messages and tools, because that
string is exactly what the model saw (both backends are given its token ids).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from aci import generation
from aci.errors import ACIError
from aci.rollout import daemon, hermes
from aci.rollout.policy import PolicyError, Reply, Settings, assistant_message

DEFAULT_MAX_TOKENS = 256
BATCH_WINDOW_S = 0.01  # how long the vLLM path waits for the other trajectories' requests before generating


class HFPolicy:
    kind = "hf"

    def __init__(self, path: Path | str, backend: str = "auto"):
        self.path = Path(path)
        self.model = str(self.path)
        if not (self.path / "config.json").is_file():
            raise ACIError(f"{self.path} is not a Hugging Face model folder (no config.json)")
        self.backend = backend
        self._gen: generation.Generator | None = None
        self._lock = asyncio.Lock()
        self._pending: list[tuple[list[int], generation.Sampling, asyncio.Future]] = []
        self._drainer: asyncio.Task | None = None
        self._calls = 0

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "model": self.model}

    def _load(self) -> generation.Generator:
        if self._gen is None:
            gen = generation.load(self.path, backend=self.backend)
            if not getattr(gen.tokenizer, "chat_template", None):
                gen.close()
                raise ACIError(f"{self.path}: the tokenizer has no chat template; a policy needs one to render turns")
            self._gen = gen
        return self._gen

    def request(self, messages: list[dict], tools: list[dict] | None, settings: Settings) -> dict[str, Any]:
        tok = self._load().tokenizer
        req: dict[str, Any] = {"model": self.model, "messages": messages}
        if tools:
            req["tools"] = tools
        return {**req, **settings.body(), "prompt": generation.render(tok, messages, tools=tools)}

    @staticmethod
    def sampling(request: dict[str, Any]) -> generation.Sampling:
        """The request's settings as `aci.generation` takes them (unset: greedy, DEFAULT_MAX_TOKENS)."""
        seed = request.get("seed")
        return generation.Sampling(max_new_tokens=request.get("max_tokens") or DEFAULT_MAX_TOKENS,
                                   temperature=request.get("temperature") or 0.0, top_p=request.get("top_p"),
                                   seed=None if seed is None else int(seed), stop=tuple(request.get("stop") or ()))

    async def _generate(self, request: dict[str, Any]) -> generation.Completion:
        gen = self._load()
        ids = generation.encode(gen.tokenizer, request["prompt"])
        sampling = self.sampling(request)
        if gen.name != "vllm":
            async with self._lock:  # one model, one generation at a time
                return (await daemon.call(gen.generate, [ids], sampling))[0]
        fut = asyncio.get_running_loop().create_future()
        self._pending.append((ids, sampling, fut))
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.create_task(self._drain(gen))
        return await fut

    async def _drain(self, gen: generation.Generator) -> None:
        """Answer the queued requests in batches, one per distinct sampling setting."""
        while self._pending:
            await asyncio.sleep(BATCH_WINDOW_S)
            batch, self._pending = self._pending, []
            groups: dict[generation.Sampling, list[tuple[list[int], asyncio.Future]]] = {}
            for ids, sampling, fut in batch:
                groups.setdefault(sampling, []).append((ids, fut))
            for sampling, items in groups.items():
                try:
                    outs = await daemon.call(gen.generate, [ids for ids, _ in items], sampling)
                except Exception as e:  # noqa: BLE001 - every waiting request gets the error
                    for _, fut in items:
                        if not fut.done():
                            fut.set_exception(e)
                    continue
                for (_, fut), out in zip(items, outs, strict=True):
                    if not fut.done():
                        fut.set_result(out)

    async def complete(self, request: dict[str, Any]) -> Reply:
        try:
            out = await self._generate(request)
        except ACIError:
            raise
        except Exception as e:
            raise PolicyError(f"generation failed: {type(e).__name__}: {e}") from e
        self._calls += 1
        content, calls, malformed = hermes.parse(out.text, id_prefix=f"call{self._calls}")
        return Reply(message=assistant_message(content, calls), calls=calls, malformed=malformed,
                     finish_reason=out.finish_reason, prompt_tokens=out.prompt_tokens,
                     completion_tokens=out.completion_tokens)

    async def aclose(self) -> None:
        if self._gen is not None:
            self._gen.close()
        self._gen = None
