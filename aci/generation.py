"""Generating text with a local model, the same way wherever the product does it: dev-set evaluation
(`aci.evaluation.devset`) and local-model rollouts (`aci.rollout.hf_policy`, and so rejection sampling
from the base model or its checkpoints). GRPO generates through TRL (vLLM colocated, `aci.training.run`).

Two backends behind one call, `Generator.generate(prompt ids, Sampling) -> [Completion]`:

* vLLM when it is installed, CUDA is present and enough GPU memory is free (a training job may hold the
  GPU: vLLM is given what is free, and below `MIN_VLLM_MEMORY` the transformers path runs instead);
* transformers otherwise (CPU, tests, and the fallback): batched `generate` with left padding.

Both get exactly the same input: prompts rendered by `render` with the evaluation's template and
tokenized by `encode` without special tokens (the template writes them), passed to vLLM as token ids so
it tokenizes nothing itself; the same sampling settings (`vllm_request` and `transformers_kwargs` map
one `Sampling` onto each API); the same stop tokens (the model's `generation_config` eos ids, which
list the end-of-turn token). Callers grade the returned text with the same graders either way.

No heavy import at module level.
"""

from __future__ import annotations

import importlib.metadata
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from aci.errors import ACIError

MIN_VLLM_MEMORY = 0.2  # share of the GPU's memory that must be free for vLLM to be worth starting
VLLM_MEMORY_CAP = 0.9
VLLM_SLEEP_FROM = "0.10.2"  # sleep(level=2) / wake_up(tags=...) as TRL's colocate mode calls them


@dataclass(frozen=True)
class Sampling:
    """How to sample; one value per setting, whichever backend runs."""

    max_new_tokens: int
    temperature: float = 0.0  # 0: greedy
    top_p: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()

    @property
    def greedy(self) -> bool:
        return not self.temperature or self.temperature <= 0


@dataclass
class Completion:
    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # "stop" (an eos or stop string) or "length"


class Generator(Protocol):
    name: str
    tokenizer: Any

    def generate(self, prompts: list[list[int]], sampling: Sampling) -> list[Completion]: ...

    def close(self) -> None: ...


# -- shared: rendering, tokens, settings ------------------------------------------------------------
def render(tokenizer: Any, messages: list[dict], *, tools: list | None = None, template: str | None = None,
           kwargs: dict | None = None) -> str:
    """The prompt text: `messages` rendered with `template` (None: the tokenizer's own) and the generation
    prompt, as the evaluation renders it."""
    return tokenizer.apply_chat_template(messages, tools=tools or None, tokenize=False, add_generation_prompt=True,
                                         chat_template=template, **(kwargs or {}))


def encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids of a rendered prompt: the template wrote every special token, so none is added."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def stop_token_ids(model_path: str | Path, tokenizer: Any) -> list[int]:
    """The eos ids of the model's generation_config.json (the end-of-turn token is listed there by training),
    else the tokenizer's eos."""
    cfg = Path(model_path) / "generation_config.json"
    eos = json.loads(cfg.read_text()).get("eos_token_id") if cfg.is_file() else None
    if eos is None:
        eos = tokenizer.eos_token_id
    return [] if eos is None else [eos] if isinstance(eos, int) else list(eos)


def transformers_kwargs(sampling: Sampling, *, pad_token_id: int, eos_ids: list[int]) -> dict[str, Any]:
    kw: dict[str, Any] = {"max_new_tokens": sampling.max_new_tokens, "do_sample": not sampling.greedy,
                          "pad_token_id": pad_token_id, "eos_token_id": eos_ids or None}
    if not sampling.greedy:
        kw["temperature"] = sampling.temperature
        if sampling.top_p is not None:
            kw["top_p"] = sampling.top_p
    return kw


def vllm_request(prompts: list[list[int]], sampling: Sampling, *, eos_ids: list[int]) -> tuple[list[dict], dict]:
    """What vLLM is given: token-id prompts (vLLM tokenizes nothing) and `SamplingParams` keyword arguments."""
    params: dict[str, Any] = {"n": 1, "max_tokens": sampling.max_new_tokens,
                              "temperature": 0.0 if sampling.greedy else sampling.temperature,
                              "top_p": 1.0 if sampling.greedy or sampling.top_p is None else sampling.top_p,
                              "seed": sampling.seed, "stop": list(sampling.stop) or None,
                              "stop_token_ids": list(eos_ids) or None, "skip_special_tokens": True}
    return [{"prompt_token_ids": list(p)} for p in prompts], params


def cut_at_stop(text: str, stop: tuple[str, ...]) -> tuple[str, bool]:
    """`text` up to the first stop string (as vLLM returns it: the stop string itself excluded)."""
    cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


# -- choosing ------------------------------------------------------------------------------------------
def vllm_installed() -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):
        return False


def vllm_sleeps() -> bool:
    """Whether the installed vLLM has the sleep mode TRL's colocated GRPO uses."""
    from packaging.version import Version

    try:
        return Version(importlib.metadata.version("vllm")) >= Version(VLLM_SLEEP_FROM)
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return False


def choose(requested: str, *, cuda: bool, vllm: bool, free_fraction: float | None) -> tuple[str, str]:
    """(backend, why): `requested` is auto, vllm or transformers."""
    if requested == "transformers":
        return "transformers", "asked for"
    if requested not in ("auto", "vllm"):
        raise ACIError(f"unknown generation backend {requested!r}: auto, vllm or transformers")
    blocker = ("vllm is not installed" if not vllm else "no CUDA device" if not cuda
               else f"only {free_fraction:.0%} of GPU memory is free" if (free_fraction or 0) < MIN_VLLM_MEMORY
               else None)
    if blocker is None:
        return "vllm", "installed, CUDA present, memory free"
    if requested == "vllm":
        raise ACIError(f"vLLM generation was asked for but {blocker}")
    return "transformers", blocker


def gpu_free_fraction() -> float:
    """The share of the first visible GPU's memory that is free. Read through NVML (installed with vLLM) so
    this process creates no CUDA context: vLLM's engine processes then start the usual way."""
    import os

    try:
        import pynvml

        pynvml.nvmlInit()
        first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
        handle = (pynvml.nvmlDeviceGetHandleByIndex(int(first)) if first.isdigit()
                  else pynvml.nvmlDeviceGetHandleByUUID(first))
        info = pynvml.nvmlDeviceGetMemoryInfo(handle)
        return info.free / info.total
    except Exception:  # noqa: BLE001 - no NVML: ask torch (which then holds a context)
        import torch

        free, total = torch.cuda.mem_get_info()
        return free / total


def vllm_memory(free_fraction: float) -> float:
    """The share of GPU memory vLLM may take: what is free, less a margin, at most `VLLM_MEMORY_CAP`."""
    return round(min(VLLM_MEMORY_CAP, free_fraction - 0.05), 3)


def load(model_path: str | Path, *, backend: str = "auto", batch_size: int = 16,
         max_model_len: int | None = None) -> Generator:
    """The generator for `model_path`: vLLM where it can run (see `choose`), else transformers."""
    import torch

    cuda = torch.cuda.is_available()  # creates no CUDA context
    free = gpu_free_fraction() if cuda else None
    name, why = choose(backend, cuda=cuda, vllm=vllm_installed(), free_fraction=free)
    if name == "vllm":
        try:
            memory = vllm_memory(free) if free is not None else VLLM_MEMORY_CAP
            return VLLMGenerator(model_path, memory=memory, max_model_len=max_model_len)
        except Exception as e:
            if backend == "vllm":
                raise ACIError(f"vLLM failed to load {model_path}: {type(e).__name__}: {e}") from None
            why = f"vLLM failed to load the model ({type(e).__name__}: {e})"
    gen = TransformersGenerator(model_path, batch_size=batch_size)
    gen.why = why
    return gen


def _tokenizer(model_path: str | Path, padding_side: str) -> Any:
    from aci import templates

    tok = templates.load_tokenizer(model_path)
    tok.padding_side = padding_side
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


# -- backends --------------------------------------------------------------------------------------------
class TransformersGenerator:
    """`model.generate` in batches of `batch_size` prompts (left padding); the RNG is seeded once per call."""

    name = "transformers"

    def __init__(self, model_path: str | Path, *, batch_size: int = 16):
        import torch
        from transformers import AutoModelForCausalLM

        self.path = str(model_path)
        self.batch_size = batch_size
        self.why = ""
        self.tokenizer = _tokenizer(model_path, "left")
        gpu = torch.cuda.is_available()
        lm = AutoModelForCausalLM.from_pretrained(model_path, dtype="auto" if gpu else torch.float32)
        self.model = lm.to("cuda" if gpu else "cpu").eval()
        self.eos_ids = stop_token_ids(model_path, self.tokenizer)

    @classmethod
    def around(cls, model: Any, tokenizer: Any, *, eos_ids: list[int], batch_size: int = 16) -> TransformersGenerator:
        """A generator over a model already in memory (a training job's, for its dev curve): `tokenizer`
        must pad on the left."""
        gen = cls.__new__(cls)
        gen.path, gen.batch_size, gen.why = None, batch_size, "the model as it trains"
        gen.tokenizer, gen.model, gen.eos_ids = tokenizer, model, eos_ids
        return gen

    def generate(self, prompts: list[list[int]], sampling: Sampling) -> list[Completion]:
        import torch

        tok = self.tokenizer
        kwargs = transformers_kwargs(sampling, pad_token_id=tok.pad_token_id, eos_ids=self.eos_ids)
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        out: list[Completion] = []
        for i in range(0, len(prompts), self.batch_size):
            chunk = prompts[i:i + self.batch_size]
            enc = tok.pad({"input_ids": chunk}, return_tensors="pt").to(self.model.device)
            with torch.no_grad():
                gen = self.model.generate(**enc, **kwargs)
            width = enc["input_ids"].shape[1]
            for ids, row in zip(chunk, gen[:, width:].tolist(), strict=True):
                n = next((k + 1 for k, t in enumerate(row) if t in self.eos_ids), None)  # up to the first eos
                new = row[:n] if n else [t for t in row if t != tok.pad_token_id]
                text, stopped = cut_at_stop(tok.decode(new, skip_special_tokens=True), sampling.stop)
                out.append(Completion(text=text, prompt_tokens=len(ids), completion_tokens=len(new),
                                      finish_reason="stop" if n or stopped else "length"))
        return out

    def close(self) -> None:
        self.model = None


class VLLMGenerator:
    """vLLM's offline engine on token-id prompts, all of one call in one batch (continuous batching)."""

    name = "vllm"

    def __init__(self, model_path: str | Path, *, memory: float, max_model_len: int | None = None):
        from vllm import LLM

        self.path = str(model_path)
        self.why = "installed, CUDA present, memory free"
        self.tokenizer = _tokenizer(model_path, "left")
        self.eos_ids = stop_token_ids(model_path, self.tokenizer)
        self.llm = LLM(model=self.path, gpu_memory_utilization=memory, max_model_len=max_model_len,
                       dtype="auto", seed=0)

    def generate(self, prompts: list[list[int]], sampling: Sampling) -> list[Completion]:
        from vllm import SamplingParams

        inputs, params = vllm_request(prompts, sampling, eos_ids=self.eos_ids)
        outs = self.llm.generate(inputs, SamplingParams(**params), use_tqdm=False)
        return [Completion(text=o.outputs[0].text, prompt_tokens=len(o.prompt_token_ids or p),
                           completion_tokens=len(o.outputs[0].token_ids),
                           finish_reason="length" if o.outputs[0].finish_reason == "length" else "stop")
                for o, p in zip(outs, prompts, strict=True)]

    def close(self) -> None:
        self.llm = None
