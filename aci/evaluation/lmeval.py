"""An lm-evaluation-harness task as an evaluator, through its Python API (`lm_eval.simple_evaluate`).

Built-in tasks by name, or tasks from a local folder of task YAMLs (then only that folder is indexed,
which saves the ~10 s lm-eval spends indexing its own catalogue). The model is loaded with the `hf`
backend: float32 on CPU, the checkpoint's own dtype on a GPU. Per-sample scores are kept (by doc id) so
two checkpoints can be compared item by item.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from aci.errors import ACIError
from aci.evaluation.stats import Trial

PREFERRED = ("acc", "exact_match", "acc_norm", "pass@1", "f1", "bleu")


def pick_metric(results: dict, key: str | None, task: str) -> tuple[str, str]:
    """(`metric,filter` result key, bare metric name) for the requested or the usual metric."""
    numeric = {k: v for k, v in results.items()
               if "," in k and "_stderr" not in k and isinstance(v, (int, float)) and not isinstance(v, bool)}
    if key:
        found = [k for k in numeric if k == key or k.split(",")[0] == key]
        if not found:
            raise ACIError(f"lm-eval task {task} has no metric {key!r}; it reports: {', '.join(sorted(numeric)) or 'none'}")
        return found[0], found[0].split(",")[0]
    for name in PREFERRED:
        for k in numeric:
            if k.split(",")[0] == name:
                return k, name
    if len(numeric) == 1:
        k = next(iter(numeric))
        return k, k.split(",")[0]
    raise ACIError(f"lm-eval task {task} reports several metrics ({', '.join(sorted(numeric))}); choose one with --metric-key")


class LMEvalEvaluator:
    """Runs one lm-eval task per trial, seeded with the trial's seed, and keeps per-document scores."""

    def __init__(self, task: str, *, task_dir: Path | None, limit: int | None, metric_key: str | None,
                 batch_size: int, label: str):
        self.task = task
        self.task_dir = task_dir
        self.limit = limit
        self.metric_key = metric_key
        self.batch_size = batch_size
        self.id = label
        self._manager = None

    def _task_manager(self):
        from lm_eval.tasks import TaskManager

        if self._manager is None:
            if self.task_dir is not None:
                self._manager = TaskManager(include_path=str(self.task_dir), include_defaults=False)
                if self.task not in self._manager.all_tasks:
                    self._manager = TaskManager(include_path=str(self.task_dir))
            else:
                self._manager = TaskManager()
            if self.task not in self._manager.all_tasks:
                where = f" in {self.task_dir} or" if self.task_dir else ""
                raise ACIError(f"lm-eval has no task {self.task!r}{where} among its built-in tasks")
        return self._manager

    def run(self, model_path: str, seed: int) -> Trial:
        import lm_eval
        import torch

        gpu = torch.cuda.is_available()
        model_args = f"pretrained={model_path},dtype={'auto' if gpu else 'float32'}"
        with contextlib.redirect_stdout(sys.stderr):  # lm-eval prints tables; stdout may be the MCP channel
            try:
                out = lm_eval.simple_evaluate(
                    model="hf", model_args=model_args, tasks=[self.task], limit=self.limit,
                    task_manager=self._task_manager(), log_samples=True, device="cuda" if gpu else "cpu",
                    batch_size=self.batch_size, random_seed=seed, numpy_random_seed=seed, torch_random_seed=seed,
                    fewshot_random_seed=seed, bootstrap_iters=0,
                )
            except ACIError:
                raise
            except Exception as e:
                raise ACIError(f"lm-eval failed on task {self.task}: {type(e).__name__}: {e}") from None
        if not out or self.task not in out.get("results", {}):
            raise ACIError(f"lm-eval returned no results for task {self.task} (is it a group? name one of its tasks)")
        full, name = pick_metric(out["results"][self.task], self.metric_key, self.task)
        per_sample = {}
        for s in (out.get("samples") or {}).get(self.task, []):
            v = s.get(name)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                per_sample[str(s.get("doc_id"))] = float(v)
        n = ((out.get("n-samples") or {}).get(self.task) or {}).get("effective") or len(per_sample) or None
        return Trial(seed=seed, score=float(out["results"][self.task][full]), samples=n,
                     per_sample=per_sample or None, details={"metric": full})
