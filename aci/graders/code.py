"""The unit-test grader: the response's code, then the task's tests, in a sandboxed subprocess.

A pass needs proof that every test ran, not exit status 0: `aci/graders/harness.py` writes a per-run
random token to a private pipe after the last test statement returned (see its docstring for what the
response can and cannot patch). The harness runs in the strongest sandbox this machine allows
(`aci/graders/sandbox.py`: bubblewrap with an unprivileged uid, no capabilities and private mount, PID and
network namespaces; else a partial one, named in every score's reason; as root with no way to drop root,
a refusal under rule `sandbox` unless the caller passed `--unsafe-grader`). The process group is killed
at the wall-clock limit (`while True: pass`), and the harness sets CPU-time, address-space, file-size (an
endless `print` ends at the limit) and process-count limits. Output goes to files, so a flood costs
bounded disk, not memory.
"""

from __future__ import annotations

import ast
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

from aci.errors import ACIError
from aci.graders.base import REASON_CHARS, Grader, Response, Score, gold, gold_answer, short, time_limit
from aci.graders.sandbox import BWRAP_ENV, Sandbox, candidates

_FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)```", re.S | re.I)
HARNESS = Path(__file__).with_name("harness.py")
HARNESS_NAME = "aci_harness.py"  # its copy in the work folder (the sandbox shows nothing of the package)
HARNESS_FILES = ("solution.py", "tests.py", HARNESS_NAME)  # the names it needs in the work folder
Files = dict[str, tuple[bytes, int]]  # more files for the work folder: relative path -> (content, mode)
OUTPUT_MB = 16  # per file the code writes, stdout and stderr included
MAX_PROCESSES = 64
PATH = "/usr/local/bin:/usr/bin:/bin"
# What the probe grades in each candidate sandbox: a definition, a test, and an import after the switch to
# the sandbox's uid (a Python that uid cannot read fails here, not in the first real task).
PROBE = ("def f():\n    return 1\n", "import decimal, json\nassert f() == 1\n")


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
    """The tests in gold.tests pass on the response's python code, proven by the harness (see the module).

    Options: `timeout` (seconds of wall-clock time, default 10), `memory_mb` (address-space limit,
    default 1024; 0 = none), `max_processes` (default 64). The gold is gold.answer (a reference
    solution); the corruption is that solution with every function stubbed to `return None`, so tests
    that check nothing let it pass.
    """

    name = "unit-tests"
    from_rows = True  # the row's code runs only in the sandbox
    sandboxed = True

    @classmethod
    def build(cls, spec, *, workdir, check_host, unsafe_grader):
        return cls(spec, unsafe_grader=unsafe_grader)

    def __init__(self, spec, *, unsafe_grader: bool = False):
        super().__init__(spec)
        self.unsafe_grader = unsafe_grader
        admit(unsafe_grader)
        self.timeout = time_limit(spec, 10, "unit-tests grader")
        self.memory_mb = int(self.option("memory_mb", 1024))
        self.max_processes = int(self.option("max_processes", MAX_PROCESSES))
        if self.memory_mb < 0 or self.max_processes < 1:
            raise ACIError("unit-tests grader: memory_mb must be >= 0 and max_processes >= 1")

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
        return run_tests(code, tests, self.timeout, self.memory_mb, self.max_processes, unsafe_grader=self.unsafe_grader)

    def gold(self, task) -> Response:
        self._tests(task)
        return f"```python\n{extract_code(gold_answer(task, self.name)).strip()}\n```", None

    def corrupt(self, task) -> Response:
        self._tests(task)
        stub = stub_functions(extract_code(gold_answer(task, self.name)))
        return f"```python\n{stub if stub is not None else 'pass'}\n```", None


def sandbox() -> Sandbox:
    """The sandbox graded code runs in here: the first candidate whose probe task scores 1 (the last one when
    none does), found once per process and per switch (`ACI_BWRAP`, PATH: where bwrap and setpriv are found)."""
    return _found(os.geteuid(), os.environ.get(BWRAP_ENV), os.environ.get("PATH"))


@cache
def _found(*_key) -> Sandbox:
    options = candidates()
    failed: list[str] = []  # why each stronger candidate did not work here
    for i, box in enumerate(options):
        score, said, err = _run(box, *PROBE, timeout=10, memory_mb=1024, max_processes=MAX_PROCESSES)
        if score.score == 1 or i == len(options) - 1:
            if box.kind == "full":
                return box
            return replace(box, why="; ".join([*([box.why] if box.why else []), *failed])).with_isolation(
                b"isolated" in said)
        what = "bwrap" if box.kind == "full" else f"the harness as uid {box.uid}"
        said_last = err.splitlines()[-1].removeprefix("bwrap: ") if err else score.reason
        failed.append(f"{what} failed here: {short(said_last.split(', likely')[0], 80)}")
    raise AssertionError("candidates() is never empty")


def sandbox_note() -> str:
    """What every result that graded code must say about the sandbox ('' when it is the full one)."""
    return sandbox().note


def admit(unsafe_grader: bool) -> Sandbox:
    """The sandbox, or the `sandbox` rule's refusal where the code would keep root's powers and the caller did
    not pass --unsafe-grader."""
    from aci import rules

    box = sandbox()
    if box.kind == "unsafe" and not unsafe_grader:
        raise rules.load("default").refuse(
            "sandbox", f"model code would run as root without isolation here ({box.note}); install bubblewrap "
                       f"(Debian/Ubuntu: apt-get install bubblewrap), or pass --unsafe-grader to run it anyway, "
                       f"which the journal records as a weakening")
    return box


def _process_budget(uid: int, extra: int) -> int:
    """RLIMIT_NPROC for the harness: the kernel counts every process of the uid the code runs as, so the
    budget is those it has now plus `extra`."""
    mine = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                mine += entry.stat().st_uid == uid
            except OSError:
                continue
    return mine + extra


def run_tests(code: str, tests: str, timeout: float, memory_mb: int, max_processes: int = MAX_PROCESSES, *,
              unsafe_grader: bool = False) -> Score:
    """Run `code` then `tests` in the harness; 1 only when the harness proves the last test returned. A sandbox
    short of the full one is named at the end of the reason."""
    box = admit(unsafe_grader)
    return noted(_run(box, code, tests, timeout, memory_mb, max_processes)[0], box)


def noted(score: Score, box: Sandbox) -> Score:
    """`score` with what `box` lacks at the end of its reason (unchanged in the full sandbox)."""
    if not box.note:
        return score
    return Score.of(score.score, f"{short(score.reason, REASON_CHARS - len(box.note) - 2)}; {box.note}")


@cache
def _harness_source() -> bytes:
    return HARNESS.read_bytes()


@dataclass(frozen=True)
class Ran:
    """What one harness run did: its exit status (None: killed at the time limit), whether the harness proved
    that the last test returned, what it said on its pipe, the tails of its output, and how long it took."""

    rc: int | None
    proven: bool
    said: bytes
    stdout: str
    stderr: str
    elapsed: float


def work_folder(box: Sandbox, code: str, tests: str, files: Files | None = None) -> Path:
    """A fresh folder whose `work/` holds the harness, `code` as solution.py, `tests` as tests.py and `files`,
    handed to the sandbox's uid; the caller removes it (`shutil.rmtree`)."""
    folder = Path(tempfile.mkdtemp(prefix="aci-grade-"))
    try:
        work = folder / "work"  # the only folder the code may write (the sandbox's /tmp); its output stays outside
        work.mkdir()
        for rel, (data, mode) in (files or {}).items():
            path = work / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            path.chmod(mode)
        (work / "solution.py").write_text(code, encoding="utf-8")
        (work / "tests.py").write_text(tests, encoding="utf-8")
        (work / HARNESS_NAME).write_bytes(_harness_source())
        if box.uid != os.geteuid():  # root hands the work folder to the sandbox's uid, which may pass through tmp
            os.chown(work, box.uid, box.uid)
            folder.chmod(0o711)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder


def start(box: Sandbox, folder: Path, *, memory_mb: int, cpu_s: int, max_processes: int, stdin, stdout,
          stderr) -> tuple[subprocess.Popen, bytes, int]:
    """Start the harness of `work_folder`'s `folder` in `box`: (the process, its token, the read end of the pipe
    it proves the tests on), which the caller closes."""
    work = folder / "work"
    token = secrets.token_hex(16).encode()
    env = {"PATH": PATH, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0", "HOME": box.home(work)}
    token_r, token_w = os.pipe()
    done_r, done_w = os.pipe()
    try:
        os.write(token_w, token)
    finally:
        os.close(token_w)
    args = [str(token_r), str(done_w), str(memory_mb << 20), str(cpu_s), str(OUTPUT_MB << 20),
            str(_process_budget(box.uid, max_processes)), str(int(box.isolate))]
    try:
        proc = subprocess.Popen(box.command(work, [sys.executable, "-I", HARNESS_NAME, *args]), cwd=work,
                                stdin=stdin, stdout=stdout, stderr=stderr, env=env, start_new_session=True,
                                pass_fds=(token_r, done_w))
    except BaseException:
        os.close(done_r)
        raise
    finally:
        os.close(token_r)
        os.close(done_w)
    return proc, token, done_r


def tail_of(path: Path, size: int) -> str:
    with open(path, "rb") as f:
        f.seek(max(0, path.stat().st_size - size))
        return f.read().decode("utf-8", "replace").strip()


def run_harness(box: Sandbox, code: str, tests: str, timeout: float, memory_mb: int, max_processes: int, *,
                files: Files | None = None, stdin: bytes | None = None) -> Ran:
    """One run of the harness in `box`, killed with everything it started at `timeout` seconds; `stdin`, where
    given, is what it reads (else nothing)."""
    folder = work_folder(box, code, tests, files)
    try:
        if stdin is not None:
            (folder / "stdin").write_bytes(stdin)
        with open(folder / "stdin", "rb") if stdin is not None else open(os.devnull, "rb") as inp, \
                open(folder / "stdout", "wb") as out, open(folder / "stderr", "wb") as err:
            began = time.monotonic()
            proc, token, done_r = start(box, folder, memory_mb=memory_mb, cpu_s=max(1, int(timeout) + 1),
                                        max_processes=max_processes, stdin=inp, stdout=out, stderr=err)
            try:
                try:
                    rc = proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    rc = None
                finally:
                    kill_group(proc)  # children it left behind (the PID namespace takes the rest)
                os.set_blocking(done_r, False)
                try:
                    said = os.read(done_r, 4096) if rc is not None else b""
                except BlockingIOError:
                    said = b""
            finally:
                os.close(done_r)
        elapsed = time.monotonic() - began
        return Ran(rc, token + b" done" in said.splitlines(), said, tail_of(folder / "stdout", 1 << 16),
                   tail_of(folder / "stderr", 4000), elapsed)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _run(box: Sandbox, code: str, tests: str, timeout: float, memory_mb: int,
         max_processes: int) -> tuple[Score, bytes, str]:
    """(score, what the harness said on its pipe, the tail of stderr) of one run of the tests in `box`."""
    ran = run_harness(box, code, tests, timeout, memory_mb, max_processes)
    if ran.rc is None:
        return Score.of(0, f"timeout: killed after {timeout:g} s time limit"), b"", ""
    if ran.rc == 0 and ran.proven:
        return Score.of(1, f"tests passed in {ran.elapsed:.2f} s"), ran.said, ran.stderr
    return Score.of(0, _failure(ran.rc, ran.stderr, timeout, ran.elapsed, memory_mb)), ran.said, ran.stderr


def _failure(rc: int, tail: str, timeout: float, elapsed: float, memory_mb: int) -> str:
    last = tail.splitlines()[-1] if tail else ""
    sig = -rc if rc < 0 else rc - 128 if rc > 128 else None
    if rc == 0:
        return ("the program ended before the harness confirmed that every test ran (exit status 0 without the "
                "completion token: an early sys.exit, os._exit or exit hook)")
    if sig == signal.SIGXFSZ or "File too large" in last:
        return f"output limit {OUTPUT_MB} MB per file exceeded: killed"
    if sig == signal.SIGXCPU or sig == signal.SIGKILL and elapsed < timeout:
        return f"killed at the CPU-time limit ({rc}): {short(last, 120)}"
    if "MemoryError" in last:
        return f"memory limit {memory_mb} MB exceeded: {short(last, 120)}"
    return f"tests failed (exit {rc}): {short(last, 200) or 'no error output'}"


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
