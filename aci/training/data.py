"""Training data as the model will see it: samples rendered with the evaluation's template, tokenized,
masked so that only assistant tokens carry loss, and (when the job packs) packed into rows.

Tokenizing here (rather than letting TRL apply a template) is what makes the loss mask right for
templates without `{% generation %}` markers, and it behaves the same on TRL 0.27 and 1.x: both accept a
dataset that already has `input_ids` and `assistant_masks` columns (0.27 masks labels in its collator,
1.x folds the mask into `labels` while preparing the dataset), and both pack such datasets.

Packing is done here too, not by TRL: samples are binned best-fit-decreasing into rows of at most
`max_length` tokens, each row keeping its samples' lengths (`seq_lengths`), and `PackedCollator` turns
rows into batches whose position ids restart at every sample and which carry no attention mask. That is
what lets the model keep samples apart (see `aci.training.hardware`): FlashAttention through its
variable-length kernels (the batch joined into one row, with cumulative lengths), sdpa and eager through
the block-diagonal mask transformers builds from the position ids (one row per packed row, so attention
costs what it costs unpacked). TRL's own packing joins every batch into one row, which costs sdpa a mask
and attention over the whole batch.

The same functions serve the `train` tool's checks (a few samples) and the job (all of them). The job
reads the data file once (`pinned_content`) and parses those bytes, so what it trains on is exactly what
hashes to the checked file's sha256.
"""

from __future__ import annotations

import bisect
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

from aci import tasks, templates
from aci.errors import ACIError


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


def pinned_content(path: Path, sha256: str, profile: str) -> bytes:
    """The bytes of the data file, refused (rule `no-test-data`) unless they hash to `sha256`, the hash
    the job's checks and the file's contamination verdict were computed over."""
    try:
        content = path.read_bytes()
    except OSError as e:
        raise ACIError(f"cannot read the training data {path}: {e.strerror}") from None
    now = hashlib.sha256(content).hexdigest()
    if now != sha256:
        from aci import rules

        raise rules.load(profile).refuse("no-test-data", f"{path} changed after this job's checks (sha256 "
                                                         f"{sha256[:12]} then, {now[:12]} now): its contamination "
                                                         f"verdict covers the checked bytes, not these; check the "
                                                         f"file again and start a new job")
    return content


def encode_text(tokenizer: Any, text: str, max_length: int | None) -> templates.Encoded:
    """A `text` row: its tokens and an end-of-sequence token, all learned, no chat template."""
    ids = tokenizer(text)["input_ids"]
    eos = getattr(tokenizer, "eos_token_id", None)
    if eos is not None and (not ids or ids[-1] != eos):
        ids.append(eos)
    n = len(ids)
    if max_length and n > max_length:
        ids = ids[:max_length]
    return templates.Encoded(ids, [1] * len(ids), truncated=n > len(ids), length=n, text=text)


def encode_samples(path: Path, tokenizer: Any, template: templates.Template, *, max_length: int,
                   kwargs: dict | None = None, limit: int | None = None, content: bytes | None = None,
                   progress: Callable[[int], None] | None = None) -> tuple[list[templates.Encoded], Stats]:
    """Encode the SFT samples of `path` (the first `limit`; from `content` when given); errors name the
    file and line. `progress(n)` hears the count of samples encoded so far."""
    stats = Stats()
    out: list[templates.Encoded] = []
    for n, row in islice(tasks.read_rows(path, content), limit):
        loc = f"{path}:{n}"
        sample = tasks.to_sample(row, loc)
        try:
            encoded = ([encode_text(tokenizer, sample["text"], max_length)] if "messages" not in sample else
                       templates.encode(tokenizer, template, sample, max_length=max_length, kwargs=kwargs))
        except templates.RenderError as e:
            raise templates.RenderError(f"{loc}: {e}") from None
        stats.samples += 1
        for enc in encoded:
            stats.add(enc)
        out.extend(encoded)
        if progress:
            progress(stats.samples)
    return out, stats


def sft_dataset(encoded: list[templates.Encoded], *, pack_to: int | None = None):
    """A `datasets.Dataset` of `input_ids` + `assistant_masks`, dropping sequences with nothing to learn;
    with `pack_to`, packed rows of at most that many tokens with their samples' `seq_lengths`."""
    from datasets import Dataset

    keep = [e for e in encoded if any(e.assistant_masks)]
    if pack_to is None:
        return Dataset.from_dict({"input_ids": [e.input_ids for e in keep],
                                  "assistant_masks": [e.assistant_masks for e in keep]})
    rows = pack([len(e.input_ids) for e in keep], pack_to)
    return Dataset.from_dict({
        "input_ids": [[t for i in row for t in keep[i].input_ids] for row in rows],
        "assistant_masks": [[m for i in row for m in keep[i].assistant_masks] for row in rows],
        "seq_lengths": [[len(keep[i].input_ids) for i in row] for row in rows],
    })


def pack(lengths: list[int], capacity: int) -> list[list[int]]:
    """Best-fit-decreasing bins of sample indices, each bin's lengths summing to at most `capacity`
    (a longer sample gets a bin of its own). Deterministic: ties keep the input order."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    bins: list[list[int]] = []
    free: list[tuple[int, int]] = []  # (space left, bin index), sorted
    for i in order:
        n = lengths[i]
        k = bisect.bisect_left(free, (n, -1))  # the fullest bin that still fits
        if k < len(free):
            space, b = free.pop(k)
            bins[b].append(i)
            if space - n > 0:
                bisect.insort(free, (space - n, b))
        else:
            bins.append([i])
            if capacity - n > 0:
                bisect.insort(free, (capacity - n, len(bins) - 1))
    return bins


@dataclass
class PackedCollator:
    """Batches of packed rows: labels only on assistant tokens, position ids restarting at each sample,
    no attention mask. `flat` joins the batch into one row with cumulative sequence lengths (for
    FlashAttention's variable-length kernels); otherwise rows are right-padded to the longest, and the
    padding continues the last sample's positions (causal: no real token sees it; it carries no loss)."""

    pad_token_id: int
    flat: bool = False

    def __call__(self, rows: list[dict]) -> dict:
        import torch

        ids, labels, pos, lengths = [], [], [], []
        for row in rows:
            n = len(row["input_ids"])
            seq = row.get("seq_lengths") or [n]
            lab = [t if m else -100 for t, m in zip(row["input_ids"], row["assistant_masks"], strict=True)]
            start = 0
            for s in seq:  # a sample's first token is never the target of the sample before it
                lab[start] = -100
                start += s
            ids.append(list(row["input_ids"]))
            labels.append(lab)
            pos.append([p for s in seq for p in range(s)])
            lengths.append(list(seq))
        if self.flat:
            cu = [0]
            for s in (s for seq in lengths for s in seq):
                cu.append(cu[-1] + s)
            cu_t = torch.tensor(cu, dtype=torch.int32)
            return {"input_ids": torch.tensor([sum(ids, [])]), "labels": torch.tensor([sum(labels, [])]),
                    "position_ids": torch.tensor([sum(pos, [])]), "cu_seq_lens_q": cu_t, "cu_seq_lens_k": cu_t,
                    "max_length_q": max(s for seq in lengths for s in seq),
                    "max_length_k": max(s for seq in lengths for s in seq)}
        width = max(len(r) for r in ids)
        for r, lab, p in zip(ids, labels, pos, strict=True):
            extra = width - len(r)
            r += [self.pad_token_id] * extra
            lab += [-100] * extra
            p += list(range(p[-1] + 1, p[-1] + 1 + extra))
        return {"input_ids": torch.tensor(ids), "labels": torch.tensor(labels), "position_ids": torch.tensor(pos)}


def grpo_prompts(path: Path, tokenizer: Any, template: templates.Template, *, kwargs: dict | None = None,
                 limit: int | None = None, content: bytes | None = None) -> tuple[list[dict], Stats]:
    """Task records rendered as prompts (the evaluation's template plus its generation prompt).

    Each row keeps the whole task as JSON, so the reward function grades with the task's own grader and
    gold; the prompt is plain text so TRL applies no template of its own.
    """
    stats = Stats()
    rows = []
    bos = getattr(tokenizer, "bos_token", None)
    adds_bos = bool(bos) and tokenizer("x")["input_ids"][:1] == [tokenizer.bos_token_id]
    for task in islice(tasks.load_tasks(path, content), limit):
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
