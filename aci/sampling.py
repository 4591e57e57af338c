"""Sampling settings as part of the model: a checkpoint id with `@<settings>` is that checkpoint decoded so.

PostTrainBench's `evaluate.py` sets no temperature: inspect_ai starts `vllm serve` on `final_model/` and
sends only `max_tokens`, so vLLM 0.11 takes its default sampling from `final_model/generation_config.json`
(`generation_config="auto"`). It reads the file with transformers (`GenerationConfig.from_pretrained(...)
.to_diff_dict()`: only values that differ from transformers' defaults) and keeps six keys: `temperature`,
`top_p`, `top_k`, `min_p`, `repetition_penalty` and `max_new_tokens` (a server-wide cap on reply tokens).
Without them vLLM samples at temperature 1.0. So the model's own `generation_config.json` decides how the
benchmark decodes it, and choosing those settings on the dev set is legitimate work on the model (rule
`no-eval-edits` covers the evaluation's files, not the model's).

A variant is named by a suffix: `job/checkpoint-200@greedy`, `...@temperature=0.6,top_p=0.95`,
`...@greedy,max_new_tokens=4096`. The settings named are all vLLM will use: `apply` removes the other
sampling keys from the folder's generation config, so vLLM's defaults fill the rest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aci.errors import ACIError

# Each sampling setting's type and range, defined once: the `@<settings>` suffix below, eval-checkpoint's
# --temperature, run-trajectory's --temperature, --top-p and --max-tokens, and train's GRPO --temperature
# all take these, so every tool refuses the same values by the same name. Finite only: no sampler can use
# an infinite or NaN temperature, and JSON (generation_config.json, a request body) cannot even write one.
Temperature = Annotated[float, Field(ge=0, allow_inf_nan=False)]  # 0: greedy
TopP = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]
TopK = Annotated[int, Field(ge=1)]
MinP = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
RepetitionPenalty = Annotated[float, Field(gt=0, allow_inf_nan=False)]
MaxNewTokens = Annotated[int, Field(ge=1)]  # vLLM's `max_tokens`, transformers' `max_new_tokens`


class Values(BaseModel):
    """The keys vLLM takes from generation_config.json (vllm/config/model.py, get_diff_sampling_param), in
    the order a suffix is written; `max_new_tokens` becomes vLLM's `max_tokens`."""

    model_config = ConfigDict(extra="forbid")

    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_k: TopK | None = None
    min_p: MinP | None = None
    repetition_penalty: RepetitionPenalty | None = None
    max_new_tokens: MaxNewTokens | None = None


VLLM_KEYS = tuple(Values.model_fields)
GREEDY = "greedy"


def split(ref: str) -> tuple[str, dict[str, Any] | None]:
    """`<checkpoint>@<settings>` -> (checkpoint, settings); a ref without a settings suffix -> (ref, None)."""
    head, sep, tail = ref.rpartition("@")
    if not sep or not head or not (tail == GREEDY or tail.startswith(GREEDY + ",") or "=" in tail):
        return ref, None
    return head, parse(tail)


def parse(text: str) -> dict[str, Any]:
    """`greedy`, `temperature=0.6,top_p=0.95`, `greedy,max_new_tokens=4096` -> the settings."""
    raw: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",")):
        if part == GREEDY:
            key, value = "temperature", "0"
        else:
            key, eq, value = part.partition("=")
            key = key.strip()
            if not eq or key not in VLLM_KEYS:
                raise ACIError(f"sampling settings {text!r}: {part!r} is not `greedy` or <key>=<value> with a key "
                               f"vLLM reads from generation_config.json ({', '.join(VLLM_KEYS)})")
        if key in raw:
            raise ACIError(f"sampling settings {text!r} set {key} twice")
        raw[key] = value.strip()
    try:
        out = Values.model_validate(raw).model_dump(exclude_none=True)
    except ValidationError as e:
        err = e.errors()[0]
        key = str(err["loc"][0])
        raise ACIError(f"sampling settings {text!r}: {key}={raw[key]}: {err['msg']}") from None
    if out.get("top_k") == 50:  # transformers 4.x drops its own default before vLLM sees it
        raise ACIError("top_k=50 is transformers' default, which vLLM never sees (it reads only values that "
                       "differ from the defaults): use 49 or 51, or leave top_k out")
    if "temperature" not in out:
        raise ACIError(f"sampling settings {text!r} need `greedy` or temperature=<t>")
    if out["temperature"] == 0 and set(out) & {"top_p", "top_k", "min_p"}:
        raise ACIError(f"sampling settings {text!r}: greedy decoding ignores top_p, top_k and min_p; leave them out")
    return {k: out[k] for k in raw}


def name(settings: dict[str, Any]) -> str:
    """The canonical suffix for `settings` (what `parse` reads back)."""
    parts = [GREEDY] if settings.get("temperature") == 0 else []
    parts += [f"{k}={settings[k]:g}" for k in VLLM_KEYS if k in settings
              and not (k == "temperature" and settings[k] == 0)]
    return ",".join(parts)


def apply(gen: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """`gen` (a generation_config.json) with exactly `settings` as its sampling keys; `do_sample` follows the
    temperature so transformers' own generate() decodes the same way."""
    out = {k: v for k, v in gen.items() if k not in VLLM_KEYS and k != "do_sample"}
    out.update(settings)
    out["do_sample"] = settings["temperature"] > 0
    return out


# vLLM's own defaults (SamplingParams): a value equal to one of these changes nothing.
_VLLM_DEFAULTS = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0}


def _effective(params: dict[str, Any]) -> dict[str, Any]:
    """`params` in vLLM's names, without the values that equal vLLM's defaults (top_k -1 is 'off' too)."""
    out = {("max_tokens" if k == "max_new_tokens" else k): v for k, v in params.items()}
    return {k: v for k, v in out.items() if v != _VLLM_DEFAULTS.get(k) and not (k == "top_k" and v == -1)}


def vllm_reads(folder: Path) -> dict[str, Any]:
    """The sampling defaults vLLM derives from `folder`'s generation_config.json, read the way vLLM reads
    it (transformers' GenerationConfig, the values that differ from transformers' defaults, vLLM's six
    keys, `max_new_tokens` as `max_tokens`), less those equal to vLLM's own defaults. Empty means vLLM
    samples at temperature 1.0 with no cap beyond the request's. Raises ACIError when transformers cannot
    load the file, which would stop vLLM from starting."""
    if not (folder / "generation_config.json").is_file():
        return {}
    try:
        from transformers import GenerationConfig

        diff = GenerationConfig.from_pretrained(folder).to_diff_dict()
    except Exception as e:
        raise ACIError(f"transformers cannot load {folder / 'generation_config.json'} ({type(e).__name__}: "
                       f"{str(e).splitlines()[0][:200] if str(e) else ''}); vLLM would fail to start") from None
    return _effective({k: diff[k] for k in VLLM_KEYS if diff.get(k) is not None})


def expected_reads(settings: dict[str, Any]) -> dict[str, Any]:
    """What `vllm_reads` returns for a folder written by `apply(..., settings)`."""
    return _effective(settings)


def describe(reads: dict[str, Any]) -> str:
    """`vllm_reads`' result in words."""
    if not reads:
        return "vLLM's defaults (temperature 1.0, no cap beyond the evaluation's max tokens)"
    return ", ".join(f"{k} {v:g}" for k, v in reads.items())
