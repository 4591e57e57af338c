"""Chat templates: load the one the evaluation renders, render samples with it, and mark the tokens the
model must learn (the assistant spans) for any template, with or without `{% generation %}` markers.

Why this exists: PostTrainBench renders every prompt with `templates/<model>.jinja` and ignores the
tokenizer's own template, so training data must be rendered with that file. Those files have no
generation markers, so TRL's `assistant_only_loss` cannot use them. Instead, spans are found by rendering
prefixes, which needs nothing from the template:

* for assistant turn i, the rendering of `messages[:i]` with the generation prompt is what the model is
  shown at inference, and the rendering of `messages[:i+1]` continues it with what the model must write
  (content, tool calls, end-of-turn token). Whitespace after the turn (the newline between turns) is not
  trained: inference stops at the end-of-turn token.
* when the whole conversation does not start with a turn's rendering (templates that render history
  differently from the newest turn, such as Qwen3 dropping thinking blocks), that turn becomes a sequence
  of its own, rendered exactly as at inference, so nothing is trained in a form the model never sees.

Tokens are marked by character offsets (fast tokenizers), a token counting as assistant when it overlaps
a span, the same rule transformers applies to `{% generation %}` blocks.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aci.errors import ACIError


class RenderError(ACIError):
    """The template failed on a conversation (a template or data problem, not a usage error)."""


@dataclass(frozen=True)
class Template:
    text: str
    source: str  # the .jinja path, or "tokenizer"


@dataclass
class Encoded:
    """One training sequence: token ids and the assistant mask (1 = the model learns this token)."""

    input_ids: list[int]
    assistant_masks: list[int]
    truncated: bool = False
    length: int = 0  # tokens before truncation
    text: str = field(default="", repr=False)


def load_tokenizer(model: str | Path) -> Any:
    """The model's tokenizer, built as `AutoTokenizer` builds it.

    When the folder's `tokenizer_config.json` names its class, that class is used directly (the fast
    variant first, as AutoTokenizer does): this skips AutoConfig, whose import pulls in torch and costs
    seconds in the tool process. Anything else (hub ids, no class named) goes through AutoTokenizer.
    """
    import json

    import transformers

    cfg = Path(model) / "tokenizer_config.json"
    name = json.loads(cfg.read_text()).get("tokenizer_class") if cfg.is_file() else None
    for candidate in ([f"{name}Fast", name] if name and not name.endswith("Fast") else [name] if name else []):
        cls = getattr(transformers, candidate, None)
        if cls is not None:
            return cls.from_pretrained(model)
    return transformers.AutoTokenizer.from_pretrained(model)


def load(template: str | Path | None, tokenizer: Any = None) -> Template:
    """The template in a `.jinja` file, or the tokenizer's own when `template` is None."""
    if template:
        path = Path(template)
        if not path.is_file():
            raise ACIError(f"chat template {path} does not exist")
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise ACIError(f"chat template {path} is not UTF-8 text") from None
        if not text.strip():
            raise ACIError(f"chat template {path} is empty")
        return Template(text, str(path))
    own = getattr(tokenizer, "chat_template", None)
    if isinstance(own, dict):  # several named templates: the default one is what inference uses
        own = own.get("default")
    if not own:
        raise ACIError("the tokenizer has no chat template; pass the evaluation's template (.jinja file)")
    return Template(own, "tokenizer")


def render(tokenizer: Any, template: Template, messages: list[dict], *, tools: list | None = None,
           add_generation_prompt: bool = False, kwargs: dict | None = None) -> str:
    """Render `messages` with `template` exactly as transformers (and so vLLM) would."""
    try:
        out = tokenizer.apply_chat_template(
            messages, tools=tools or None, chat_template=template.text, tokenize=False,
            add_generation_prompt=add_generation_prompt, **(kwargs or {}),
        )
    except Exception as e:  # jinja errors, raise_exception() in the template, bad message shapes
        raise RenderError(f"chat template {template.source} failed to render: {type(e).__name__}: {e}") from None
    return out if isinstance(out, str) else out[0]


def spans(tokenizer: Any, template: Template, messages: list[dict], *, tools: list | None = None,
          kwargs: dict | None = None) -> list[tuple[str, list[tuple[int, int]]]]:
    """Texts to train on, each with the character spans of its assistant turns (see the module doc)."""
    full = render(tokenizer, template, messages, tools=tools, kwargs=kwargs)
    main: list[tuple[int, int]] = []
    out: list[tuple[str, list[tuple[int, int]]]] = []
    for i, m in enumerate(messages):
        if m.get("role") != "assistant":
            continue
        history = render(tokenizer, template, messages[:i], tools=tools, kwargs=kwargs) if i else ""
        prompt = render(tokenizer, template, messages[:i], tools=tools, add_generation_prompt=True, kwargs=kwargs) if i else ""
        upto = render(tokenizer, template, messages[: i + 1], tools=tools, kwargs=kwargs)
        if not upto.startswith(history):
            raise RenderError(f"chat template {template.source} renders the conversation before assistant turn {i} "
                              f"differently once that turn is added, so the turn's tokens cannot be located")
        # the generation prompt may differ from how the turn opens (e.g. it pre-fills a thinking block)
        start = max(len(history), len(os.path.commonprefix([prompt, upto])))
        end = len(upto.rstrip())
        if end <= start:
            continue  # the template renders nothing for this turn
        if full.startswith(upto):
            main.append((start, end))
        else:
            out.append((upto, [(start, end)]))
    return ([(full, main)] if main else []) + out


def mask_tokens(tokenizer: Any, text: str, char_spans: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
    """Token ids of `text` and a 0/1 mask of the tokens overlapping any span."""
    if not getattr(tokenizer, "is_fast", False):
        raise ACIError(f"{type(tokenizer).__name__} is a slow tokenizer: assistant masking needs a fast "
                       f"tokenizer (tokenizer.json); save the model's tokenizer with a fast class")
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    mask = [int(any(s < e_span and e > s_span for s_span, e_span in char_spans)) if e > s else 0
            for s, e in enc["offset_mapping"]]
    return list(enc["input_ids"]), mask


def encode(tokenizer: Any, template: Template, sample: dict, *, max_length: int | None = None,
           kwargs: dict | None = None) -> list[Encoded]:
    """Training sequences of one SFT sample (`messages`, optional `tools`), truncated to `max_length`."""
    out = []
    for text, char_spans in spans(tokenizer, template, sample["messages"], tools=sample.get("tools"), kwargs=kwargs):
        ids, mask = mask_tokens(tokenizer, text, char_spans)
        n = len(ids)
        if max_length and n > max_length:
            ids, mask = ids[:max_length], mask[:max_length]
        out.append(Encoded(ids, mask, truncated=n > len(ids), length=n, text=text))
    return out


def end_of_turn(tokenizer: Any, template: Template, kwargs: dict | None = None) -> str | None:
    """The special token that closes assistant turns (e.g. `<|im_end|>`), or None if the template has none.

    Found from a probe conversation: the last assistant token, if it is a special (added) token.
    """
    probe = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    enc = encode(tokenizer, template, {"messages": probe}, kwargs=kwargs)
    if not enc or not any(enc[-1].assistant_masks):
        return None
    last = max(k for k, bit in enumerate(enc[-1].assistant_masks) if bit)
    token = tokenizer.convert_ids_to_tokens(enc[-1].input_ids[last])
    special = set(getattr(tokenizer, "all_special_tokens", []) or [])
    special |= {str(t) for t in (getattr(tokenizer, "added_tokens_encoder", {}) or {})}
    return token if token in special else None
