"""The user's eval command as an evaluator: PostTrainBench's `evaluate.py` works as it is.

The command is a template with `{model_path}`, `{limit}`, `{output}` and optionally `{seed}`, e.g.
`python evaluate.py --model-path {model_path} --limit {limit} --json-output-file {output}`. It is split
like a shell would (`shlex`) but run without one, placeholders filled per argument (a path with spaces
stays one argument). Without a limit, the `--limit {limit}` pair is dropped, so the script's own default
applies (PostTrainBench's: 150 GSM8K items, 50 GPQA); `--limit -1` is passed through, which
PostTrainBench's scripts read as every item. The process runs in its own session; on timeout the whole group is killed (vLLM servers too).

The metrics JSON is read from `{output}` (or, without that placeholder, from the last JSON object the
command prints). The score is the configured key (dotted for nesting), else the first of `accuracy`,
`score`, `acc`, `exact_match`, `pass@1`, `mean` at the top, else the one score-like leaf of nested JSON
(`results.ledger.exact_match`), else the only numeric value. The sample count is what the command
scored: the JSON's (`n_examples`, `n`, `samples`, a list of per-sample records; beside the score or
above it), else the inspect_ai log the run wrote (PostTrainBench's inspect-based tasks), else the lines
of the one per-sample JSONL log it wrote; otherwise it is unknown, never the limit asked for. A limit
the command has no `{limit}` for is refused rather than reported as applied.

Users type the command they run by hand (`python evaluate.py --model-path final_model --limit -1`);
`translation.translate` turns it into the template once, at `plan init`, and says what it changed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from aci import cpus
from aci.errors import ACIError
from aci.evaluation.options import OMIT
from aci.evaluation.stats import Trial
from aci.evaluation.translation import split
from aci.jobs import tail
from aci.processes import dies_with_parent

PLACEHOLDERS = ("{model_path}", "{limit}", "{output}", "{seed}")
SCORE_KEYS = ("accuracy", "score", "acc", "exact_match", "pass@1", "mean")
COUNT_KEYS = ("n_examples", "num_examples", "n_samples", "num_samples", "samples", "sample_count", "count", "total",
              "n")
_NOT_SCORES = ("stderr", "std", "count", "total", "n_", "num_", "samples", "time", "seconds")
PER_SAMPLE_KEYS = ("samples", "predictions", "records", "items", "per_sample")


def argv(template: str, *, model_path: str, limit: int | None, output: Path, seed: int,
         limit_all: str | None = None) -> list[str]:
    """The command's argument list for one run; `--limit -1` reaches the command as `limit_all`, the value
    its own option reads as every item (`0` for a `--n` whose help says so), when plan init learnt one."""
    parts = split(template)
    if "{model_path}" not in template:
        raise ACIError(f"eval command has no {{model_path}} placeholder: {template!r}")
    values = {"{model_path}": model_path, "{output}": str(output), "{seed}": str(seed)}
    out: list[str] = []
    if limit == -1 and limit_all == OMIT:  # its option's absence means every item
        limit = None
    for part in parts:
        if "{limit}" in part and limit is None:
            if part == "{limit}" and out and out[-1].startswith("-"):
                out.pop()  # `--limit {limit}`: drop the option, so the script's own default applies
            continue
        if "{limit}" in part:
            part = part.replace("{limit}", limit_all if limit == -1 and limit_all is not None else str(limit))
        for k, v in values.items():
            part = part.replace(k, v)
        out.append(part)
    return out


def _numeric(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def leaves(metrics: dict, prefix: str = "", depth: int = 6) -> list[tuple[str, object]]:
    """Every (dotted path, value) under nested objects (lists are values, not walked)."""
    out = []
    for k, v in metrics.items():
        path = f"{prefix}{k}"
        if isinstance(v, dict) and depth > 0:
            out += leaves(v, f"{path}.", depth - 1)
        else:
            out.append((path, v))
    return out


def _last(path: str) -> str:
    return path.rsplit(".", 1)[-1].lower()


def pick_score(metrics: dict, key: str | None, source: str) -> tuple[str, float]:
    """The metric `key` (dotted path into nested objects), else the first usual score key at the top, else
    the one score-like leaf anywhere (`results.ledger.exact_match`), else the one numeric leaf that is no
    count or time."""
    if key:
        cur = metrics
        for part in key.split("."):
            if not isinstance(cur, dict) or part not in cur:
                raise ACIError(f"metric key {key!r} is not in {source} (its numeric values: "
                               f"{', '.join(p for p, v in leaves(metrics) if _numeric(v))[:300] or 'none'}); set "
                               f"the right one with --metric-key")
            cur = cur[part]
        if not _numeric(cur):
            raise ACIError(f"metric {key!r} in {source} is {json.dumps(cur)[:80]}, not a number")
        return key, float(cur)
    for k in SCORE_KEYS:
        if _numeric(metrics.get(k)):
            return k, float(metrics[k])
    nums = [(p, v) for p, v in leaves(metrics) if _numeric(v)]
    scores = [(p, v) for p, v in nums if _last(p) in SCORE_KEYS]
    if len(scores) != 1:
        scores = [(p, v) for p, v in nums if not any(s in _last(p) for s in _NOT_SCORES)
                  and _last(p) not in COUNT_KEYS]
    if len(scores) == 1:
        return scores[0][0], float(scores[0][1])
    raise ACIError(f"cannot tell which value in {source} is the score (numeric values: "
                   f"{', '.join(p for p, _ in nums[:12]) or 'none'}); name it with --metric-key (a dotted path "
                   f"for nested JSON, e.g. results.task.exact_match)")


def _count(obj: dict) -> int | None:
    """A sample count held by one object: a count key, or the length of a list of per-sample records."""
    for k in COUNT_KEYS:
        v = obj.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    for k in PER_SAMPLE_KEYS:
        v = obj.get(k)
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            return len(v)
    return None


def beside(metrics: dict, metric: str, limit: int = 600) -> dict | None:
    """The values next to the score in its object (`by_kind` beside `accuracy`): a breakdown the user's
    script computed is the first thing to read, so it is kept, cut to about `limit` characters."""
    obj: object = metrics
    *parents, leaf = metric.split(".")
    for part in parents:
        obj = obj.get(part) if isinstance(obj, dict) else None
    if not isinstance(obj, dict):
        return None
    out, used = {}, 0
    for k, v in obj.items():
        if k == leaf:
            continue
        text = json.dumps(v, default=str)
        if used + len(text) > limit:
            out[k] = text[:max(0, limit - used)] + "..." if not out else "..."
            break
        out[k], used = v, used + len(text)
    return out or None


def sample_count(metrics: dict, metric: str | None = None, count_key: str | None = None) -> int | None:
    """The number of items scored, as the metrics JSON says: at `count_key` (the run card's) when given,
    beside the score (`results.ledger.n` for `results.ledger.exact_match`) or in an object above it, else
    the one count the whole JSON holds."""
    if count_key:
        found = dict(leaves(metrics)).get(count_key)
        if isinstance(found, int) and not isinstance(found, bool) and found > 0:
            return found
        raise ACIError(f"the run card's count_key {count_key!r} is not a positive whole number in the metrics "
                       f"(numbers: {', '.join(p for p, v in leaves(metrics) if _numeric(v))[:300]})")
    path = (metric or "").split(".")[:-1]
    for depth in range(len(path), -1, -1):
        obj = metrics
        for part in path[:depth]:
            obj = obj.get(part) if isinstance(obj, dict) else None
        n = _count(obj) if isinstance(obj, dict) else None
        if n:
            return n
    found = {n for obj in _objects(metrics) if (n := _count(obj))}
    return found.pop() if len(found) == 1 else None


def _objects(obj: dict, depth: int = 6):
    yield obj
    for v in obj.values():
        if isinstance(v, dict) and depth > 0:
            yield from _objects(v, depth - 1)


def sample_log(folders: list[Path], since: float, exclude: set[Path]) -> tuple[int, str] | None:
    """Lines of the one JSONL file the run wrote into `folders` (its per-sample log), and the file; None
    when it wrote none or several (which one counts would be a guess)."""
    found = []
    for folder in folders:
        try:
            found += [p for p in folder.glob("*.jsonl") if p.stat().st_mtime >= since and p not in exclude]
        except OSError:
            continue
    if len(found) != 1:
        return None
    try:
        with open(found[0], "rb") as f:
            n = sum(1 for line in f if line.strip())
    except OSError:
        return None
    return (n, str(found[0])) if n else None


_LOG_HEAD = 4 << 20  # inspect writes `eval` and `results` before the samples: the head holds both
_LOG_MODEL = re.compile(r'"model":\s*"((?:[^"\\]|\\.)*)"')
_LOG_COUNT = re.compile(r'"(completed_samples|total_samples)":\s*(\d+)')


def inspect_log(cwd: Path, since: float, model_path: str) -> tuple[int, str] | None:
    """The sample count in the inspect_ai log that a run on `model_path` wrote after `since`, and the log.

    PostTrainBench's inspect-based `evaluate.py` writes only the score and its stderr to the metrics JSON,
    but inspect logs the run to `./logs` (or `$INSPECT_LOG_DIR`) as JSON whose `results` hold the number
    of samples scored: the real count, whatever `--limit` or the script's own default was."""
    log_dir = Path(os.environ.get("INSPECT_LOG_DIR") or "logs")
    log_dir = log_dir if log_dir.is_absolute() else cwd / log_dir
    try:
        logs = sorted((p for p in log_dir.glob("*.json") if p.stat().st_mtime >= since),
                      key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return None
    for log in logs:
        try:
            with open(log, encoding="utf-8", errors="replace") as f:
                head = f.read(_LOG_HEAD)
        except OSError:
            continue
        model = _LOG_MODEL.search(head)
        counts = dict((k, int(v)) for k, v in _LOG_COUNT.findall(head))
        n = counts.get("completed_samples") or counts.get("total_samples")
        if model and model.group(1).endswith(model_path) and n:
            return n, str(log)
    return None


def _last_json(text: str) -> dict | None:
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                return obj
    return None


class CommandEvaluator:
    """Runs the eval command once per trial and reads its metrics JSON."""

    def __init__(self, template: str, *, metric_key: str | None, limit: int | None, timeout_s: float,
                 cwd: Path, out_dir: Path, label: str, limit_all: str | None = None, count_key: str | None = None):
        if limit is not None and "{limit}" not in template:
            raise ACIError(f"--limit {limit} cannot reach the eval command: it has no {{limit}} placeholder, so it "
                           f"would score what it scores by default while the result claimed {limit}: {template!r}. "
                           f"Evaluate without --limit, or name the option that takes the sample count: aci plan "
                           f"update --eval-command '<as typed>' --limit-option <option> [--limit-all <value>]")
        self.template = template
        self.limit_all = limit_all
        self.count_key = count_key
        self.metric_key = metric_key
        self.limit = limit
        self.timeout_s = timeout_s
        self.cwd = cwd
        self.out_dir = out_dir
        self.id = label  # evaluator id recorded with the result; set by the caller (see runner.evaluator_id)

    @property
    def seeded(self) -> bool:
        return "{seed}" in self.template

    def run(self, model_path: str, seed: int) -> Trial:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        output = self.out_dir / f"seed-{seed}.metrics.json"
        log_path = self.out_dir / f"seed-{seed}.log"
        output.unlink(missing_ok=True)
        cmd = argv(self.template, model_path=model_path, limit=self.limit, output=output, seed=seed,
                   limit_all=self.limit_all)
        threads = cpus.measure()  # a training job beside it keeps its cores: the command computes on the rest
        env = {**os.environ, "OMP_NUM_THREADS": str(threads.threads)}
        started, since = time.monotonic(), time.time()
        with open(log_path, "wb") as log:
            try:
                proc = subprocess.Popen(cmd, cwd=self.cwd, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                        stderr=subprocess.STDOUT, start_new_session=True,
                                        preexec_fn=dies_with_parent())  # a killed job takes it along
            except OSError as e:
                raise ACIError(f"eval command could not start ({e.strerror}): {shlex.join(cmd)}") from None
            try:
                rc = proc.wait(timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                raise ACIError(f"eval command timed out after {self.timeout_s:.0f} s (raise --timeout-s or lower "
                               f"--limit): {shlex.join(cmd)}; log {log_path}") from None
            finally:  # timed out, or interrupted (the job's stop time): its whole session goes, vLLM too
                if proc.poll() is None:
                    _kill_group(proc)
        text = tail(log_path, 15)
        if rc != 0:
            raise ACIError(f"eval command exited with code {rc}: {shlex.join(cmd)}; last output:\n{text}"
                           + missing_module(cmd, text))
        if "{output}" in self.template:
            if not output.is_file() or not output.stat().st_size:
                raise ACIError(f"eval command succeeded but wrote no metrics JSON to {output}: {shlex.join(cmd)}; "
                               f"last output:\n{text}")
            try:
                metrics = json.loads(output.read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise ACIError(f"the metrics file {output} is not valid JSON ({e})") from None
            source = str(output)
        else:
            metrics = _last_json(log_path.read_text(errors="replace"))
            if metrics is None:
                raise ACIError(f"eval command printed no JSON object and has no {{output}} placeholder: "
                               f"{shlex.join(cmd)}; add `--json-output-file {{output}}` to the command")
            source = f"the output of {cmd[0]}"
        if not isinstance(metrics, dict):
            raise ACIError(f"the metrics in {source} are {type(metrics).__name__}, not a JSON object")
        name, score = pick_score(metrics, self.metric_key, source)
        # What the command scored, never what was asked: the JSON's count, else the inspect log's, else the
        # lines of the per-sample log it wrote; otherwise unknown (a limit is a request the script may cap).
        details = {"metric": name, "metrics_file": output.name if output.is_file() else None,
                   "command": shlex.join(cmd), "seconds": round(time.monotonic() - started, 2),
                   "beside": beside(metrics, name), "cpu_threads": threads.why}
        samples = sample_count(metrics, name, self.count_key)
        if samples:
            details["samples_from"] = source
        logged = inspect_log(self.cwd, since, model_path)
        if logged:
            details["inspect_log"] = logged[1]
            samples = samples or logged[0]
        counted = sample_log([self.out_dir, self.cwd / "logs"], since, {output, log_path})
        if counted:
            details["sample_log"] = counted[1]  # its replies are read back for failure reading
            if not samples:
                samples, details["samples_from"] = counted
        return Trial(seed=seed, score=score, samples=samples, details=details)


def _kill_group(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=5)
            return
        except subprocess.TimeoutExpired:
            continue


def missing_module(cmd: list[str], output: str) -> str:
    """For a command whose interpreter lacks a module it imports, which interpreter that was and one that
    has the module (this tool's own), so the fix is named rather than left to the traceback."""
    found = re.findall(r"ModuleNotFoundError: No module named '([\w.]+)'", output)
    if not found:
        return ""
    module = found[-1].split(".")[0]
    where = shutil.which(cmd[0]) or cmd[0]
    fix = (f"; {sys.executable} has it: put that interpreter in the command's place (`plan update --eval-command "
           f"...`, or `eval-checkpoint evaluate --command ...` for one call)"
           if importlib.util.find_spec(module) else "")
    return f"\nthe command's interpreter `{cmd[0]}` ({where}) has no module {module!r}{fix}"
