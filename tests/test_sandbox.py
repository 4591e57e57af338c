"""The unit-tests grader's sandbox against what a model's code tries (issue 26, row 1), on real machines.

Each attack is a response whose tests pass only if the attack worked, so a score of 1 means it got through.
It runs in every world of `tests/sandbox_worlds.py` (each a fresh process, as the grader's probe decides
once per process): as root and as a spare uid, with bubblewrap, without it (`ACI_BWRAP=""`), and under a
Docker-like seccomp filter where neither bubblewrap nor the harness can make namespaces. Where a partial
sandbox lets an attack through, the score's reason must name the missing guarantee. Worlds run in parallel,
once per session.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests import sandbox_worlds as worlds
from tests.agent_clis import missing

ROOT_USER = os.geteuid() == 0
TOKEN = "hf_sandboxtest0123456789"

# world -> (how to make it, the kind of sandbox the grader must choose, what it must name as missing)
WORLDS = {
    "root": ({"user": False}, "full", ()),
    "root-no-bwrap": ({"user": False, "view": True, "env": {"ACI_BWRAP": ""}}, "partial", ("mount namespace",)),
    "root-docker": ({"user": False, "view": True, "docker": True}, "partial",
                    ("mount namespace", "PID namespace", "network namespace")),
    "user": ({"user": True}, "full", ()),
    "user-no-bwrap": ({"user": True, "env": {"ACI_BWRAP": ""}}, "partial", ("mount namespace",)),
    "user-docker": ({"user": True, "docker": True}, "partial", ("mount namespace", "PID namespace", "network namespace")),
}


def attacks(task: Path, victim: int, holder: int, port: int) -> dict[str, tuple[str, str]]:
    """name -> (response, tests): the tests pass only when the response's attack worked."""
    return {
        "read-0600-file": (f"data = open({str(task / 'secret')!r}).read()\n", "assert data == 's3cret'"),
        "read-etc-shadow": ("data = open('/etc/shadow').read()\n", "assert data"),
        "write-outside-temp": (f"open({str(task / 'pwned')!r}, 'w').write('x')\n", "pass"),
        "append-to-evaluate-py": (f"open({str(task / 'evaluate.py')!r}, 'a').write('# pwned\\n')\n", "pass"),
        "read-other-environ": (f"data = open('/proc/{holder}/environ', 'rb').read()\n", f"assert b{TOKEN!r} in data"),
        "capabilities": ("status = dict(l.split(':\\t') for l in open('/proc/self/status').read().splitlines()"
                         " if ':\\t' in l)\n",
                         "assert (any(int(status[c], 16) for c in ('CapEff', 'CapPrm', 'CapInh', 'CapAmb'))"
                         " or status['NoNewPrivs'].strip() == '0' or status['Uid'].split()[1] == '0')"),
        "loopback-port": (f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2).close()\n", "pass"),
        "kill-unrelated-process": (f"import os, signal\nos.kill({victim}, signal.SIGKILL)\n", "pass"),
        "network-interface": ("import socket\nnames = [n for _, n in socket.if_nameindex() if n != 'lo']\n",
                              "assert names"),
        "see-task-folder-or-home": (f"import os\nseen = os.path.exists({str(task)!r}) or os.path.exists("
                                    f"{os.path.expanduser('~')!r} + '/.bashrc')\n", "assert seen"),
    }


# Which missing guarantee lets an attack through (a partial sandbox may let it pass, and must then say so).
EXCUSED_BY = {"loopback-port": "network namespace", "network-interface": "network namespace",
              "see-task-folder-or-home": "mount namespace"}


def _sleeper(**env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env={**os.environ, **env})


@pytest.fixture(scope="module")
def outcomes():
    """Every world's results, graded in parallel; and the traces the attacks could have left."""
    if shutil.which("bwrap") is None:
        missing("bubblewrap (bwrap; apt-get install bubblewrap)")
    if not worlds.can_filter():
        pytest.skip("the Docker-like seccomp filter is written for x86_64")
    task = Path(tempfile.mkdtemp(prefix="aci-task-", dir="/tmp"))
    task.chmod(0o755)  # like a task folder: others may look, not write
    (task / "secret").write_text("s3cret")
    (task / "secret").chmod(0o600)
    (task / "evaluate.py").write_text("print('eval')\n")
    victim, holder = _sleeper(), _sleeper(HF_TOKEN=TOKEN)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    try:
        plan = attacks(task, victim.pid, holder.pid, server.getsockname()[1])
        listed = [(name, code, tests) for name, (code, tests) in plan.items()]
        chosen = {w: spec for w, spec in WORLDS.items() if ROOT_USER or spec[0]["user"]}
        with ThreadPoolExecutor(len(chosen)) as pool:
            futures = {w: pool.submit(worlds.run_world, listed, **spec[0]) for w, spec in chosen.items()}
            results = {w: f.result() for w, f in futures.items()}
        yield {"worlds": results, "victim_alive": victim.poll() is None, "task": task,
               "evaluate": (task / "evaluate.py").read_text(), "pwned": (task / "pwned").exists()}
    finally:
        server.close()
        for p in (victim, holder):
            p.kill()
            p.wait()
        subprocess.run(["rm", "-rf", str(task)])


def _world(outcomes, name: str) -> dict:
    if name not in outcomes["worlds"]:
        pytest.skip("a root world: this test runs as root in CI")
    return outcomes["worlds"][name]


@pytest.mark.parametrize("world", sorted(WORLDS))
def test_the_grader_chooses_the_strongest_sandbox_and_names_what_it_lacks(outcomes, world):
    got = _world(outcomes, world)
    _, kind, lacking = WORLDS[world]
    assert got["kind"] == kind, got
    for m in lacking:
        assert f"no {m}" in got["note"], got["note"]
    for r in got["results"].values():  # every result that graded code names what its sandbox lacks
        assert ("sandbox:" not in r["reason"]) if kind == "full" else (got["note"] in r["reason"]), r


@pytest.mark.parametrize("attack", sorted(attacks(Path("/x"), 1, 1, 1)))
@pytest.mark.parametrize("world", sorted(WORLDS))
def test_model_code_cannot(outcomes, world, attack):
    got = _world(outcomes, world)
    r = got["results"][attack]
    excuse = EXCUSED_BY.get(attack)
    if r["score"] == 1:
        assert excuse and f"no {excuse}" in got["note"], f"{attack} got through in {world}: {r}"
    else:
        assert "Error" in r["reason"] or "assert" in r["reason"].lower(), r  # stopped by the sandbox, not by a typo


def test_nothing_outside_was_touched(outcomes):
    assert outcomes["victim_alive"], "an unrelated process was killed by graded code"
    assert outcomes["evaluate"] == "print('eval')\n"
    assert not outcomes["pwned"]


@pytest.mark.skipif(not ROOT_USER, reason="root's refusal: runs as root (CI does)")
def test_root_without_any_way_to_drop_root_is_refused_unless_unsafe(tmp_path):
    """No bwrap and a setpriv that cannot switch uid (a container that maps only root): the code would keep
    root's powers, so building the grader is refused under rule `sandbox`; --unsafe-grader runs it, named."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "setpriv").write_text("#!/bin/sh\necho 'setpriv: setresuid failed: Invalid argument' >&2\nexit 1\n")
    (fake / "setpriv").chmod(0o755)
    env = {"ACI_BWRAP": "", "PATH": f"{fake}:{os.environ['PATH']}"}
    secret = tmp_path / "secret"
    secret.write_text("s3cret")
    secret.chmod(0o600)
    attack = [("read-0600-file", f"data = open({str(secret)!r}).read()\n", "assert data == 's3cret'")]
    got = worlds.run_world(attack, user=False, env=env, then_unsafe=True)
    assert got["refused"] == "sandbox"
    assert got["kind"] == "unsafe" and "no non-root uid" in got["note"], got
    r = got["results"]["read-0600-file"]
    assert r["score"] == 1 and "sandbox: unsafe, no non-root uid" in r["reason"], r


def test_a_timeout_leaves_no_process_behind_in_bubblewrap():
    """The wall-clock kill takes the sandbox down with everything in it (bwrap --die-with-parent, PID namespace)."""
    from aci.graders import grader_for
    from aci.graders.code import sandbox

    if sandbox().kind != "full":
        missing("bubblewrap (bwrap; apt-get install bubblewrap)")
    code = textwrap.dedent("""
        import os, time
        if os.fork() == 0:
            os.setsid()
            time.sleep(30)
        while True:
            pass
    """)
    s = grader_for({"type": "unit-tests", "timeout": 0.5}).score({"id": "t", "gold": {"answer": "x", "tests": "pass"}},
                                                                 code)
    assert s.score == 0 and "timeout" in s.reason
    deadline = time.monotonic() + 2  # the namespace's processes get their SIGKILL as bwrap goes
    while (left := _harness_processes()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, left


def test_a_python_installed_under_tmp_keeps_the_full_sandbox():
    """A checkout in /tmp has its venv there, where the sandbox mounts the work folder: the venv must stay
    visible inside (bound after the work folder), or every grade falls back to the partial sandbox."""
    from aci.graders.code import sandbox

    if sandbox().kind != "full":
        missing("bubblewrap (bwrap; apt-get install bubblewrap)")
    import site

    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        paths = os.pathsep.join([str(Path(__file__).resolve().parent.parent), *site.getsitepackages()])
        code = ("import sys; from aci.graders import grader_for; from aci.graders.code import sandbox\n"
                "assert sys.prefix.startswith('/tmp/'), sys.prefix\n"
                "s = grader_for('unit-tests').score({'id': 't', 'gold': {'answer': 'x', 'tests': 'assert f() == 1'}},"
                " 'def f():\\n    return 1\\n')\n"
                "print(sandbox().kind, s.score, s.reason)")
        done = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": paths}, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[:2] == ["full", "1.0"], done.stdout


def _harness_processes() -> list[str]:
    left = []
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and b"aci_harness.py" in (p / "cmdline").read_bytes():
                left.append(p.name)
        except OSError:
            continue
    return left


# -- the tools: refusal under rule `sandbox`, --unsafe-grader as a journaled weakening, a partial sandbox named --
CODE_TASK = {"id": "add", "type": "code", "messages": [{"role": "user", "content": "Write add(a, b)."}],
             "gold": {"answer": "def add(a, b):\n    return a + b\n", "tests": "assert add(2, 3) == 5"},
             "grader": "unit-tests"}


def _no_way_to_drop_root(folder: Path) -> dict:
    """Switches for a root without bwrap whose setpriv cannot switch uid (a container that maps only root)."""
    fake = folder / "fakebin"
    fake.mkdir(exist_ok=True)
    (fake / "setpriv").write_text("#!/bin/sh\necho 'setpriv: setresuid failed: Invalid argument' >&2\nexit 1\n")
    (fake / "setpriv").chmod(0o755)
    return {"ACI_BWRAP": "", "PATH": f"{fake}:{os.environ['PATH']}"}


@pytest.mark.skipif(not ROOT_USER, reason="root's refusal: runs as root (CI does)")
def test_verify_task_refuses_root_then_journals_unsafe_grader_as_a_weakening(workdir):
    import asyncio
    import json

    from tests.conftest import mcp_client

    (workdir / "tasks.jsonl").write_text(json.dumps(CODE_TASK) + "\n")

    async def go():
        async with mcp_client(workdir, env=_no_way_to_drop_root(workdir)) as c:
            await c.call_tool("plan", {"action": "init", "base_model": "base", "benchmark": "toy"})
            refused = await c.call_tool("verify-task", {"tasks": "tasks.jsonl"})
            allowed = [await c.call_tool("verify-task", {"tasks": "tasks.jsonl", "unsafe_grader": True})
                       for _ in range(2)]
            return refused, allowed, await c.call_tool("status", {})

    refused, allowed, status = asyncio.run(go())
    assert refused.is_error and "[rule sandbox]" in refused.content[0].text and "--unsafe-grader" in refused.content[0].text
    report = json.loads(allowed[0].content[0].text)
    assert report["kept"] == 1 and report["sandbox"].startswith("sandbox: unsafe, no non-root uid"), report
    events = [json.loads(line) for line in (workdir / "state" / "journal.jsonl").read_text().splitlines()]
    assert [e["kind"] for e in events].count("sandbox") == 1  # once, however often it graded
    assert any("--unsafe-grader ran model code as root" in w for w in json.loads(status.content[0].text)["state"]["rules_weakened"])


@pytest.mark.skipif(not ROOT_USER, reason="root's refusal: runs as root (CI does)")
def test_rollouts_and_grpo_refuse_before_anything_runs(workdir, tiny_model, monkeypatch):
    from aci.errors import ACIError
    from tests.openai_stub import OpenAIStub
    from tests.rollout_helpers import run_tool
    from tests.train_helpers import FAST, call, make_run, write_jsonl

    for k, v in _no_way_to_drop_root(workdir).items():
        monkeypatch.setenv(k, v)
    (workdir / "tasks.jsonl").write_text(__import__("json").dumps(CODE_TASK) + "\n")
    with OpenAIStub(lambda body: "```python\ndef add(a, b):\n    return a + b\n```") as stub:
        with pytest.raises(ACIError) as e:
            run_tool(workdir, tasks="tasks.jsonl", endpoint=stub.url, model="m", out="rollouts/code")
        asked = [r for r in stub.requests if r.get("messages")]
    assert e.value.rule == "sandbox" and not asked  # refused before any trajectory
    grpo = workdir / "grpo"
    grpo.mkdir()
    make_run(grpo, tiny_model, profile="default", contamination=None)
    write_jsonl(grpo / "code.jsonl", [{**CODE_TASK, "id": f"add-{i}"} for i in range(4)])
    args = {"action": "dry-run", "method": "grpo", "data": "code.jsonl", **FAST, "batch_size": 2, "num_generations": 2}
    with pytest.raises(ACIError) as e:
        call(grpo, **args)
    assert e.value.rule == "sandbox"
    out = call(grpo, **args, unsafe_grader=True)
    assert out.config["grpo"]["unsafe_grader"] is True and out.checks["sandbox"].startswith("sandbox: unsafe")
    assert any(w.startswith("sandbox: unsafe") for w in out.warnings)


def test_a_partial_sandbox_is_journaled_once(workdir):
    from aci.context import Context
    from aci.graders.sandbox import Sandbox, record

    ctx = Context(workdir=workdir)
    box = Sandbox("partial", ("mount namespace", "PID namespace", "network namespace"), why="no bwrap on PATH")
    said = [record(ctx, box, "verify-task") for _ in range(3)]
    assert said == [box.note] * 3 and box.note.startswith("sandbox: partial, no mount namespace, no PID namespace")
    assert [e["message"] for e in ctx.state.journal() if e["kind"] == "sandbox"] == [box.note]
    assert record(ctx, Sandbox("full"), "train").startswith("sandbox: full (bubblewrap")
