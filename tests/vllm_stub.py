"""A stand-in for the `vllm` package, which cannot be installed here (it needs CUDA): the offline API the
product calls (`LLM(model=..., ...)`, `LLM.generate(prompts, SamplingParams, use_tqdm=False)` returning
`RequestOutput`-shaped objects), answered by transformers' greedy generation on the same model, and
recording every call so tests can read exactly what vLLM would have been given.

Only greedy sampling is answered (what these tests compare); anything else is refused loudly.
"""

from __future__ import annotations

import importlib.machinery
import sys
import types
from dataclasses import dataclass, field

CALLS: list[dict] = []  # one entry per LLM.generate: {"prompts": [...], "params": {...}}
ENGINES: list[dict] = []  # LLM(...) keyword arguments


class SamplingParams:
    def __init__(self, **kwargs):
        self.kwargs = kwargs


@dataclass
class _Completion:
    text: str
    token_ids: list[int]
    finish_reason: str


@dataclass
class _RequestOutput:
    prompt_token_ids: list[int]
    outputs: list[_Completion] = field(default_factory=list)


class LLM:
    def __init__(self, model: str, **kwargs):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        ENGINES.append({"model": model, **kwargs})
        self.tok = AutoTokenizer.from_pretrained(model)
        self.lm = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()

    def generate(self, prompts, sampling_params, use_tqdm=True):
        import torch

        p = sampling_params.kwargs
        CALLS.append({"prompts": prompts, "params": p})
        if p["temperature"] != 0.0 or p["n"] != 1:
            raise NotImplementedError("the stub answers greedy single completions only")
        stop_ids = p.get("stop_token_ids") or []
        out = []
        for prompt in prompts:
            ids = torch.tensor([prompt["prompt_token_ids"]])
            with torch.no_grad():
                gen = self.lm.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=p["max_tokens"],
                                       do_sample=False, eos_token_id=stop_ids or None,
                                       pad_token_id=self.tok.pad_token_id)[0, ids.shape[1]:].tolist()
            hit = next((k for k, t in enumerate(gen) if t in stop_ids), None)
            token_ids = gen if hit is None else gen[:hit + 1]
            text = self.tok.decode(token_ids, skip_special_tokens=p.get("skip_special_tokens", True))
            reason = "length" if hit is None else "stop"
            for s in p.get("stop") or []:  # vLLM drops the stop string and what follows
                if s in text:
                    text, reason = text.split(s, 1)[0], "stop"
            out.append(_RequestOutput(prompt["prompt_token_ids"], [_Completion(text, token_ids, reason)]))
        return out


def install(monkeypatch) -> None:
    """Make `import vllm` find this stub for the rest of the test."""
    module = types.ModuleType("vllm")
    module.__spec__ = importlib.machinery.ModuleSpec("vllm", None)
    module.LLM, module.SamplingParams = LLM, SamplingParams
    monkeypatch.setitem(sys.modules, "vllm", module)
    CALLS.clear()
    ENGINES.clear()
