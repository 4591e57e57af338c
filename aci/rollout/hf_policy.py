"""A local Hugging Face model as a policy: render with its chat template, generate, parse hermes calls.

Slow (one generation at a time, no batching): for small runs, tests and machines without an inference
server. At scale, serve the model with vLLM (`run-trajectory serve`) and use the endpoint policy.
The recorded request carries the rendered prompt text as well as the messages and tools, because that
string is exactly what the model saw.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from aci.errors import ACIError
from aci.rollout import daemon, hermes
from aci.rollout.policy import PolicyError, Reply, Settings, assistant_message

DEFAULT_MAX_TOKENS = 256


class HFPolicy:
    kind = "hf"

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.model = str(self.path)
        if not (self.path / "config.json").is_file():
            raise ACIError(f"{self.path} is not a Hugging Face model folder (no config.json)")
        self._tok = None
        self._lm = None
        self._lock = asyncio.Lock()
        self._calls = 0

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "model": self.model}

    def _load(self) -> None:
        if self._lm is not None:
            return
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self._tok = AutoTokenizer.from_pretrained(self.path)
        if not getattr(self._tok, "chat_template", None):
            raise ACIError(f"{self.path}: the tokenizer has no chat template; a policy needs one to render turns")
        device = "cuda" if torch.cuda.is_available() else "cpu"
        self._lm = AutoModelForCausalLM.from_pretrained(self.path).to(device).eval()

    def _render(self, messages: list[dict], tools: list[dict] | None) -> str:
        return self._tok.apply_chat_template(messages, tools=tools or None, add_generation_prompt=True,
                                             tokenize=False)

    def request(self, messages: list[dict], tools: list[dict] | None, settings: Settings) -> dict[str, Any]:
        self._load()
        req: dict[str, Any] = {"model": self.model, "messages": messages}
        if tools:
            req["tools"] = tools
        return {**req, **settings.body(), "prompt": self._render(messages, tools)}

    def _generate(self, request: dict[str, Any]) -> tuple[str, int, int, str]:
        import torch

        tok, lm = self._tok, self._lm
        ids = tok(request["prompt"], return_tensors="pt", add_special_tokens=False).to(lm.device)
        temperature = request.get("temperature")
        sample = bool(temperature) and temperature > 0
        kwargs: dict[str, Any] = {"max_new_tokens": request.get("max_tokens") or DEFAULT_MAX_TOKENS,
                                  "do_sample": sample, "pad_token_id": tok.pad_token_id or tok.eos_token_id}
        if sample:
            kwargs["temperature"] = temperature
            if request.get("top_p"):
                kwargs["top_p"] = request["top_p"]
        if request.get("seed") is not None:
            torch.manual_seed(int(request["seed"]))
        with torch.no_grad():
            out = lm.generate(**ids, **kwargs)
        new = out[0, ids["input_ids"].shape[1]:]
        text = tok.decode(new, skip_special_tokens=True)
        for stop in request.get("stop") or []:
            text = text.split(stop, 1)[0]
        eos = lm.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        finish = "stop" if len(new) and int(new[-1]) in eos_ids else "length"
        return text, int(ids["input_ids"].shape[1]), int(len(new)), finish

    async def complete(self, request: dict[str, Any]) -> Reply:
        async with self._lock:  # one model, one generation at a time
            try:
                text, n_in, n_out, finish = await daemon.call(self._generate, request)
            except ACIError:
                raise
            except Exception as e:
                raise PolicyError(f"generation failed: {type(e).__name__}: {e}") from e
        self._calls += 1
        content, calls, malformed = hermes.parse(text, id_prefix=f"call{self._calls}")
        return Reply(message=assistant_message(content, calls), calls=calls, malformed=malformed,
                     finish_reason=finish, prompt_tokens=n_in, completion_tokens=n_out)

    async def aclose(self) -> None:
        self._lm = None
        self._tok = None
