"""The unit-test grader: run the response's code plus the task's tests in a limited subprocess.

The program runs in a fresh temporary folder under a wall-clock limit (the whole process group is
killed when it runs out, so `while True: pass` or a forked child cannot hang the caller), a CPU-time
limit and an address-space limit (`resource.setrlimit`, set inside the child by a small runner so no
`preexec_fn` is needed in a threaded server). Output goes to files, so a flood of prints costs disk,
not memory.
"""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aci.errors import ACIError
from aci.graders.base import Grader, Response, Score, gold, gold_answer, short

_FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)```", re.S | re.I)

_RUNNER = """\
import resource, runpy, sys
mem = int(sys.argv[2])
if mem > 0:
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
cpu = int(sys.argv[3])
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
sys.argv = [sys.argv[1]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def extract_code(response: str) -> str:
    """The python code in a response: its fenced blocks joined, or the whole text when unfenced."""
    blocks = _FENCE.findall(response)
    return "\n\n".join(b.strip("\n") for b in blocks) if blocks else response


def stub_functions(code: str) -> str | None:
    """`code` with every function body replaced by `return None` (a solution that does nothing)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    changed = False
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.body = [ast.Return(value=ast.Constant(value=None))]
            changed = True
    return ast.unparse(tree) if changed else None


class UnitTests(Grader):
    """The response's python code followed by gold.tests runs without error (exit 0) within the limits.

    Options: `timeout` (seconds of wall-clock time, default 10), `memory_mb` (address-space limit,
    default 1024; 0 = none). The gold is gold.answer (a reference solution); the corruption is that
    solution with every function stubbed to `return None`, so tests that check nothing let it pass.
    """

    name = "unit-tests"

    def __init__(self, spec):
        super().__init__(spec)
        self.timeout = float(self.option("timeout", 10))
        self.memory_mb = int(self.option("memory_mb", 1024))
        if self.timeout <= 0 or self.memory_mb < 0:
            raise ACIError("unit-tests grader: timeout must be > 0 and memory_mb >= 0")

    def _tests(self, task) -> str:
        tests = gold(task).get("tests")
        if not isinstance(tests, str) or not tests.strip():
            raise ACIError(f"task {task.get('id')!r}: grader unit-tests needs gold.tests (python code)")
        return tests

    def _score(self, task, response, tool_calls):
        tests = self._tests(task)
        code = extract_code(response)
        if not code.strip():
            return Score.of(0, "no code in the response")
        return run_python(code + "\n\n" + tests, self.timeout, self.memory_mb)

    def gold(self, task) -> Response:
        self._tests(task)
        return f"```python\n{extract_code(gold_answer(task, self.name)).strip()}\n```", None

    def corrupt(self, task) -> Response:
        self._tests(task)
        stub = stub_functions(extract_code(gold_answer(task, self.name)))
        return f"```python\n{stub if stub is not None else 'pass'}\n```", None


def run_python(program: str, timeout: float, memory_mb: int) -> Score:
    """Run `program` under the limits; exit 0 scores 1, anything else 0 with the error's last line."""
    with tempfile.TemporaryDirectory(prefix="aci-grade-") as tmp:
        folder = Path(tmp)
        (folder / "runner.py").write_text(_RUNNER)
        (folder / "program.py").write_text(program)
        cpu = max(1, int(timeout) + 1)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONDONTWRITEBYTECODE": "1",
               "PYTHONHASHSEED": "0", "HOME": tmp}
        start = time.monotonic()
        with open(folder / "stdout", "wb") as out, open(folder / "stderr", "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-I", "runner.py", "program.py", str(memory_mb << 20), str(cpu)],
                cwd=folder, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env, start_new_session=True,
            )
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                return Score.of(0, f"timeout: killed after {timeout:g} s time limit")
            finally:
                _kill_group(proc)  # children it left behind
        elapsed = time.monotonic() - start
        tail = (folder / "stderr").read_bytes()[-4000:].decode("utf-8", "replace").strip()
    if rc == 0:
        return Score.of(1, f"tests passed in {elapsed:.2f} s")
    last = tail.splitlines()[-1] if tail else ""
    if rc == -signal.SIGXCPU or rc == -signal.SIGKILL and elapsed < timeout:
        return Score.of(0, f"killed at the CPU-time limit ({rc}): {short(last, 120)}")
    if "MemoryError" in last:
        return Score.of(0, f"memory limit {memory_mb} MB exceeded: {short(last, 120)}")
    return Score.of(0, f"tests failed (exit {rc}): {short(last, 200) or 'no error output'}")


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
