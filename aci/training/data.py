"""Training data as the model will see it: samples rendered with the evaluation's template, tokenized, and
masked so that only assistant tokens carry loss.

Tokenizing here (rather than letting TRL apply a template) is what makes the loss mask right for
templates without `{% generation %}` markers, and it behaves the same on TRL 0.27 and 1.x: both accept a
dataset that already has `input_ids` and `assistant_masks` columns (0.27 masks labels in its collator,
1.x folds the mask into `labels` while preparing the dataset), and both pack such datasets.

The same functions serve the `train` tool's checks (a few samples) and the job (all of them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

from aci import tasks, templates


@dataclass
class Stats:
    """What the checks report about the rendered data."""

    samples: int = 0
    sequences: int = 0
    tokens: int = 0
    assistant_tokens: int = 0
    max_tokens: int = 0
    truncated: int = 0
    untrainable: int = 0  # sequences with no assistant token left after truncation
    example: str = field(default="", repr=False)

    def add(self, enc: templates.Encoded) -> None:
        self.sequences += 1
        self.tokens += len(enc.input_ids)
        self.assistant_tokens += sum(enc.assistant_masks)
        self.max_tokens = max(self.max_tokens, enc.length)
        self.truncated += enc.truncated
        self.untrainable += not any(enc.assistant_masks)
        if not self.example:
            self.example = enc.text

    def report(self) -> dict[str, Any]:
        per = self.tokens / self.sequences if self.sequences else 0.0
        return {
            "samples_checked": self.samples,
            "sequences": self.sequences,
            "tokens": self.tokens,
            "mean_tokens": round(per, 1),
            "max_tokens_before_truncation": self.max_tokens,
            "assistant_token_share": round(self.assistant_tokens / self.tokens, 4) if self.tokens else 0.0,
            "truncated": self.truncated,
            "untrainable": self.untrainable,
        }


def encode_samples(path: Path, tokenizer: Any, template: templates.Template, *, max_length: int,
                   kwargs: dict | None = None, limit: int | None = None) -> tuple[list[templates.Encoded], Stats]:
    """Encode the SFT samples of `path` (the first `limit`); errors name the file and line."""
    stats = Stats()
    out: list[templates.Encoded] = []
    for n, row in islice(tasks.read_rows(path), limit):
        loc = f"{path}:{n}"
        sample = tasks.to_sample(row, loc)
        try:
            encoded = templates.encode(tokenizer, template, sample, max_length=max_length, kwargs=kwargs)
        except templates.RenderError as e:
            raise templates.RenderError(f"{loc}: {e}") from None
        stats.samples += 1
        for enc in encoded:
            stats.add(enc)
        out.extend(encoded)
    return out, stats


def sft_dataset(encoded: list[templates.Encoded]):
    """A `datasets.Dataset` of `input_ids` + `assistant_masks`, dropping sequences with nothing to learn."""
    from datasets import Dataset

    keep = [e for e in encoded if any(e.assistant_masks)]
    return Dataset.from_dict({"input_ids": [e.input_ids for e in keep],
                              "assistant_masks": [e.assistant_masks for e in keep]})


def grpo_prompts(path: Path, tokenizer: Any, template: templates.Template, *, kwargs: dict | None = None,
                 limit: int | None = None) -> tuple[list[dict], Stats]:
    """Task records rendered as prompts (the evaluation's template plus its generation prompt).

    Each row keeps the whole task as JSON, so the reward function grades with the task's own grader and
    gold; the prompt is plain text so TRL applies no template of its own.
    """
    stats = Stats()
    rows = []
    bos = getattr(tokenizer, "bos_token", None)
    adds_bos = bool(bos) and tokenizer("x")["input_ids"][:1] == [tokenizer.bos_token_id]
    for task in islice(tasks.load_tasks(path), limit):
        try:
            text = templates.render(tokenizer, template, task["messages"], tools=task.get("tools"),
                                    add_generation_prompt=True, kwargs=kwargs)
        except templates.RenderError as e:
            raise templates.RenderError(f"{path} task {task['id']}: {e}") from None
        if adds_bos and text.startswith(bos):  # TRL tokenizes prompts with special tokens: no double BOS
            text = text[len(bos):]
        n = len(tokenizer(text, add_special_tokens=False)["input_ids"])
        stats.samples += 1
        stats.sequences += 1
        stats.tokens += n
        stats.max_tokens = max(stats.max_tokens, n)
        stats.example = stats.example or text
        rows.append({"prompt": text, "task": json.dumps(task, ensure_ascii=False)})
    return rows, stats


def count_rows(path: Path) -> int:
    return sum(1 for _ in tasks.read_rows(path))
