"""The user's eval command as an evaluator: PostTrainBench's `evaluate.py` works as it is.

The command is a template with `{model_path}`, `{limit}`, `{output}` and optionally `{seed}`, e.g.
`python evaluate.py --model-path {model_path} --limit {limit} --json-output-file {output}`. It is split
like a shell would (`shlex`) but run without one, placeholders filled per argument (a path with spaces
stays one argument). Without a limit, the `--limit {limit}` pair is dropped, so the script's own default
applies (PostTrainBench's: 150 GSM8K items, 50 GPQA); `--limit -1` is passed through, which
PostTrainBench's scripts read as every item. The process runs in its own session; on timeout the whole group is killed (vLLM servers too).

The metrics JSON is read from `{output}` (or, without that placeholder, from the last JSON object the
command prints). The score is the configured key (dotted for nesting), else the first of `accuracy`,
`score`, `acc`, `exact_match`, `pass@1`, `mean`, else the only numeric value. The sample count comes
from the JSON (`n_examples`, `samples`, ...) when present, else from the inspect_ai log the run wrote
(PostTrainBench's inspect-based tasks), else from a positive limit; otherwise it is unknown.

Users type the command they run by hand (`python evaluate.py --model-path final_model --limit -1`);
`translate` turns it into the template once, at `plan init`, and says what it changed.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from aci.errors import ACIError
from aci.evaluation.stats import Trial
from aci.jobs import tail
from aci.processes import dies_with_parent

PLACEHOLDERS = ("{model_path}", "{limit}", "{output}", "{seed}")
SCORE_KEYS = ("accuracy", "score", "acc", "exact_match", "pass@1", "mean")
COUNT_KEYS = ("n_examples", "n_samples", "num_samples", "samples", "sample_count", "total", "n")
_NOT_SCORES = ("stderr", "std", "count", "total", "n_", "num_", "samples", "time", "seconds")


# Options of the eval commands users type (PostTrainBench's evaluate.py first) whose values `translate`
# turns into placeholders, with the reason it gives for each.
_ROLES = {
    "--model-path": ("{model_path}", "each evaluation points it at the checkpoint it scores"),
    "--model_path": ("{model_path}", "each evaluation points it at the checkpoint it scores"),
    "--limit": ("{limit}", "each evaluation fills it from its own `--limit N` and leaves it out without one (then "
                           "the script's default applies: score the full set with `--limit -1`)"),
    "--json-output-file": ("{output}", "each trial writes its metrics JSON there for the tools to read"),
}
SUBMISSION_DIR = "final_model"  # the folder a PostTrainBench command names as the model
_PLAIN = re.compile(r"[\w@%+=:,./{}-]+")


@dataclass(frozen=True)
class Translation:
    """The template the tools run, and each change made to the command as typed, in words."""

    command: str
    changes: list[str] = field(default_factory=list)


def _join(parts: list[str]) -> str:
    """shlex.join, but placeholders stay readable: `{model_path}`, not `'{model_path}'`."""
    return " ".join(p if _PLAIN.fullmatch(p) else shlex.quote(p) for p in parts)


def _split(command: str) -> list[str]:
    """The command's arguments as a POSIX shell would split them; an unsplittable or empty one is refused."""
    try:
        parts = shlex.split(command)
    except ValueError as e:
        raise ACIError(f"eval command cannot be split into arguments ({e}): {command!r}") from None
    if not parts:
        raise ACIError("eval command is empty")
    return parts


def translate(typed: str) -> Translation:
    """The eval command as typed -> a template with `{model_path}`, `{limit}` and `{output}`.

    The value of `--model-path` (or a bare `final_model` argument) becomes `{model_path}`; the value of
    `--limit` (`-1` for all, or `N`) becomes `{limit}`; the value of `--json-output-file` becomes
    `{output}`. PostTrainBench's `evaluate.py` also gets `--limit {limit}` and `--json-output-file
    {output}` when they are missing, since its score is read from that file. A template comes back as it
    is, so translating twice changes nothing."""
    parts = _split(typed)
    out: list[str] = []
    changes: list[str] = []
    k = 0
    while k < len(parts):
        part = parts[k]
        opt, eq, value = part.partition("=")
        role = _ROLES.get(opt) if part.startswith("--") else None
        if role is None or not eq and k + 1 == len(parts):
            if part.rstrip("/").removeprefix("./") == SUBMISSION_DIR:
                changes.append(f"`{part}` -> `{{model_path}}`: {_ROLES['--model-path'][1]}")
                part = "{model_path}"
            out.append(part)
            k += 1
            continue
        if not eq:
            k += 1
            value = parts[k]
        placeholder, why = role
        if placeholder not in value:
            sep = "=" if eq else " "
            changes.append(f"`{opt}{sep}{value}` -> `{opt}{sep}{placeholder}`: {why}")
            value = placeholder
        out += [f"{opt}={value}"] if eq else [opt, value]
        k += 1
    if "{model_path}" not in " ".join(out):
        raise ACIError(f"cannot tell which argument of the eval command is the model: {typed!r}; write "
                       f"{{model_path}} where the model's folder goes (e.g. --model-path {{model_path}})")
    if any(p.endswith("evaluate.py") for p in out):  # PostTrainBench's script takes both options
        for opt, placeholder in (("--limit", "{limit}"), ("--json-output-file", "{output}")):
            if placeholder not in " ".join(out):
                out += [opt, placeholder]
                changes.append(f"added `{opt} {placeholder}`: {_ROLES[opt][1]}")
    return Translation(_join(out) if changes else typed, changes)  # a template stays byte for byte


def argv(template: str, *, model_path: str, limit: int | None, output: Path, seed: int) -> list[str]:
    """The command's argument list for one run."""
    parts = _split(template)
    if "{model_path}" not in template:
        raise ACIError(f"eval command has no {{model_path}} placeholder: {template!r}")
    values = {"{model_path}": model_path, "{output}": str(output), "{seed}": str(seed)}
    out: list[str] = []
    for part in parts:
        if "{limit}" in part and limit is None:
            if part == "{limit}" and out and out[-1].startswith("-"):
                out.pop()  # `--limit {limit}`: drop the option, so the script's own default applies
            continue
        if "{limit}" in part:
            part = part.replace("{limit}", str(limit))
        for k, v in values.items():
            part = part.replace(k, v)
        out.append(part)
    return out


def _numeric(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def pick_score(metrics: dict, key: str | None, source: str) -> tuple[str, float]:
    """The metric `key` (dotted path into nested objects), or the first usual score key."""
    if key:
        cur = metrics
        for part in key.split("."):
            if not isinstance(cur, dict) or part not in cur:
                raise ACIError(f"metric key {key!r} is not in {source} (top-level keys: "
                               f"{', '.join(sorted(metrics)[:12]) or 'none'}); set the right one with --metric-key")
            cur = cur[part]
        if not _numeric(cur):
            raise ACIError(f"metric {key!r} in {source} is {json.dumps(cur)[:80]}, not a number")
        return key, float(cur)
    for k in SCORE_KEYS:
        if _numeric(metrics.get(k)):
            return k, float(metrics[k])
    nums = [k for k, v in metrics.items() if _numeric(v) and not any(s in k.lower() for s in _NOT_SCORES)]
    if len(nums) == 1:
        return nums[0], float(metrics[nums[0]])
    raise ACIError(f"cannot tell which value in {source} is the score (numeric keys: {', '.join(nums) or 'none'}); "
                   f"name it with --metric-key (or the run card's metric_key)")


def sample_count(metrics: dict) -> int | None:
    for k in COUNT_KEYS:
        v = metrics.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


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
                 cwd: Path, out_dir: Path, label: str):
        self.template = template
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
        cmd = argv(self.template, model_path=model_path, limit=self.limit, output=output, seed=seed)
        started, since = time.monotonic(), time.time()
        with open(log_path, "wb") as log:
            try:
                proc = subprocess.Popen(cmd, cwd=self.cwd, stdin=subprocess.DEVNULL, stdout=log,
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
            raise ACIError(f"eval command exited with code {rc}: {shlex.join(cmd)}; last output:\n{text}")
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
        logged = inspect_log(self.cwd, since, model_path)
        samples = sample_count(metrics) or (logged[0] if logged else None) or \
            (self.limit if self.limit and self.limit > 0 else None)
        details = {"metric": name, "metrics_file": output.name if output.is_file() else None,
                   "command": shlex.join(cmd), "seconds": round(time.monotonic() - started, 2)}
        if logged:
            details["inspect_log"] = logged[1]
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
