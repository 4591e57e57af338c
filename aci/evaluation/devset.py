"""A held-out dev set of task records as an evaluator: generate with transformers, score with the grader.

Tasks come from `aci.tasks.load_tasks` (JSONL or a JSON array, any shape it adapts) and each is scored
by its own grader (`aci.graders.grade`, with `default_grader` for tasks that name none). Prompts are
rendered with the evaluation's chat template (the run card's) or the tokenizer's own, generated in
batches (left padding), greedily or sampled with the trial's seed, and stopped at the end-of-turn token
of `generation_config.json`. Every response is kept beside the result for failure reading.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

from aci.errors import ACIError
from aci.evaluation.stats import Trial


def load(path: Path, limit: int | None) -> list[dict]:
    from aci.tasks import load_tasks

    tasks = []
    for task in load_tasks(path):
        tasks.append(task)
        if limit is not None and len(tasks) >= limit:
            break
    if not tasks:
        raise ACIError(f"dev set {path} has no tasks")
    return tasks


class DevSetEvaluator:
    """Generates a reply to every task per trial and scores it with the task's grader."""

    def __init__(self, path: Path, *, limit: int | None, template: str | None, default_grader: str | None,
                 temperature: float, max_new_tokens: int, batch_size: int, workdir: Path, out_dir: Path,
                 check_host, label: str):
        self.tasks = load(path, limit)
        self.template = template
        self.default_grader = default_grader
        self.temperature = temperature
        self.max_new_tokens = max_new_tokens
        self.batch_size = batch_size
        self.workdir = workdir
        self.out_dir = out_dir
        self.check_host = check_host
        self.id = label
        self._loaded: tuple[str, object, object] | None = None

    def _model(self, model_path: str):
        if self._loaded is None or self._loaded[0] != model_path:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer

            gpu = torch.cuda.is_available()
            tok = AutoTokenizer.from_pretrained(model_path)
            tok.padding_side = "left"
            if tok.pad_token_id is None:
                tok.pad_token = tok.eos_token
            lm = AutoModelForCausalLM.from_pretrained(model_path, dtype="auto" if gpu else torch.float32)
            self._loaded = (model_path, tok, lm.to("cuda" if gpu else "cpu").eval())
        return self._loaded[1], self._loaded[2]

    def _prompt(self, tok, task: dict) -> str:
        try:
            return tok.apply_chat_template(task["messages"], tools=task.get("tools") or None, tokenize=False,
                                           add_generation_prompt=True, chat_template=self.template)
        except Exception as e:
            src = "the run card's template" if self.template else "the tokenizer's chat template"
            raise ACIError(f"{src} failed to render task {task['id']!r}: {type(e).__name__}: {e}") from None

    def generate(self, model_path: str, seed: int) -> list[str]:
        import torch

        tok, lm = self._model(model_path)
        if self.template is None and not getattr(tok, "chat_template", None):
            raise ACIError(f"{model_path} has no chat template and the run card names none; set one with "
                           f"aci plan update --template <file.jinja>")
        torch.manual_seed(seed)
        sample = self.temperature > 0
        kwargs = dict(max_new_tokens=self.max_new_tokens, do_sample=sample, pad_token_id=tok.pad_token_id)
        if sample:
            kwargs["temperature"] = self.temperature
        replies = []
        prompts = [self._prompt(tok, t) for t in self.tasks]
        for i in range(0, len(prompts), self.batch_size):
            enc = tok(prompts[i:i + self.batch_size], return_tensors="pt", padding=True, add_special_tokens=False)
            enc = {k: v.to(lm.device) for k, v in enc.items()}
            with torch.no_grad():
                out = lm.generate(**enc, **kwargs)
            new = out[:, enc["input_ids"].shape[1]:]
            replies += tok.batch_decode(new, skip_special_tokens=True)
        return replies

    def run(self, model_path: str, seed: int) -> Trial:
        from aci.graders import grade

        with contextlib.redirect_stdout(sys.stderr):
            try:
                replies = self.generate(model_path, seed)
            except ACIError:
                raise
            except Exception as e:
                raise ACIError(f"generation with {model_path} failed: {type(e).__name__}: {e}") from None
        per_sample, rows = {}, []
        for task, reply in zip(self.tasks, replies, strict=True):
            s = grade(task, reply, default=self.default_grader, workdir=self.workdir, check_host=self.check_host)
            per_sample[task["id"]] = s.score
            rows.append({"id": task["id"], "seed": seed, "score": s.score, "reason": s.reason, "response": reply})
        self.out_dir.mkdir(parents=True, exist_ok=True)
        with open(self.out_dir / f"seed-{seed}.responses.jsonl", "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        return Trial(seed=seed, score=sum(per_sample.values()) / len(per_sample), samples=len(per_sample),
                     per_sample=per_sample, details={"responses_file": f"seed-{seed}.responses.jsonl"})
