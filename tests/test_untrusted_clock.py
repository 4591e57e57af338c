"""Issue 33, items 4 to 6: the clock reads only sane times, a strict run cannot give itself time unseen, and a
machine without git gets one clear error.

Each test is one row of the issue's table, through the real `aci` CLI or the tool registry, with real
`timer.sh` scripts, real processes and real git."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from aci import clock, registry
from aci.context import Context
from aci.errors import ACIError
from aci.processes import alive, run_briefly
from aci.state import now

HEADER = "Remaining time (hours:minutes):"


@pytest.fixture(autouse=True)
def no_remembered_timer_failures():
    """A timer.sh failure is remembered for a minute per script version: none may leak between tests."""
    clock._failures.clear()
    yield
    clock._failures.clear()


def timer(workdir: Path, body: str) -> None:
    (workdir / clock.TIMER).write_text(body)


def cli(workdir: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aci.cli", "--json", *args], cwd=workdir, capture_output=True,
                          text=True, timeout=120, env=env or os.environ.copy())


def plan(workdir: Path, action: str = "init", **args):
    base = {"base_model": "base", "benchmark": "ledger"} if action == "init" else {}
    return registry.call("plan", {"action": action, **base, **args}, Context(workdir=workdir))


def status(workdir: Path):
    return registry.call("status", {}, Context(workdir=workdir))


# -- item 4: the clock reads only sane times -------------------------------------------------------------------
@pytest.mark.parametrize("text,says", [
    (f"{HEADER} 99999999999:00", "more than the 365 days"),
    (f"{HEADER}\n-0:30\n", "a negative time"),
    (f"{HEADER}\n9:75\n", "minutes past 59"),
    (f"{HEADER}\n{clock.TIMER_MAX.days * 24}:01\n", "more than the 365 days"),
    ("12:34:56", "cannot read"),  # a clock time, not H:MM left: its tail 34:56 is no reading
    ("x-0:30", "cannot read"),
])
def test_insane_timer_output_is_a_named_error(text, says):
    with pytest.raises(ACIError, match=says):
        clock.parse_timer_output(text)


def test_the_longest_sane_timer_reading_is_read():
    assert clock.parse_timer_output(f"{HEADER}\n{clock.TIMER_MAX.days * 24}:00\n") == clock.TIMER_MAX


def test_an_enormous_timer_reading_keeps_the_recorded_deadline_through_the_cli(workdir):
    """Row: `99999999999:00` made every tool exit 1 with OverflowError and a traceback."""
    timer(workdir, f'echo "{HEADER}"\necho "5:00"\n')
    recorded = plan(workdir, profile="posttrainbench").card["deadline"]
    timer(workdir, f'echo "{HEADER}"\necho "99999999999:00"\n')
    r = cli(workdir, "status")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    out = json.loads(r.stdout)
    assert out["state"]["deadline"] == recorded and out["state"]["deadline_source"] == "run card deadline"
    assert any("clock.TIMER_MAX" in n and "the deadline is the run card's" in n for n in out["run"]["reminders"])


def test_a_negative_timer_reading_gains_no_time(workdir):
    """Row: `-0:30` was read as 0h29m left; it keeps the recorded deadline (here 2 h away) and says why."""
    deadline = (now() + timedelta(hours=2)).isoformat(timespec="seconds")
    plan(workdir, deadline=deadline)
    timer(workdir, f'echo "{HEADER}"\necho "-0:30"\n')
    s = status(workdir)
    assert s.state.deadline == deadline and s.state.deadline_source == "run card deadline"
    assert any("a negative time" in r for r in s.run.reminders)


def test_plan_init_with_an_insane_timer_takes_the_deadline_given(workdir):
    timer(workdir, f'echo "{HEADER}"\necho "-0:30"\n')
    deadline = (now() + timedelta(hours=3)).isoformat(timespec="seconds")
    out = plan(workdir, deadline=deadline)
    assert out.card["deadline"] == deadline
    assert any("a negative time" in w and "--deadline" in w for w in out.warnings)


def test_a_timer_whose_child_keeps_stdout_open_answers_at_once(workdir):
    """Row: a timer.sh that left `sleep` in the background holding its stdout cost the full 3 s limit on every
    read (7-10 s a call). Its answer is what it printed when it exited, and the child dies with its group."""
    pidfile = workdir / "child.pid"
    timer(workdir, f'echo "{HEADER}"\necho "5:00"\nsleep 60 &\necho $! > {pidfile}\n')
    started = time.monotonic()
    assert clock.read_timer(workdir) == timedelta(hours=5)
    assert time.monotonic() - started < 1.0
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 2
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not alive(child)
    plan(workdir)
    started = time.monotonic()
    assert status(workdir).state.deadline_source == "timer.sh"
    assert time.monotonic() - started < clock.TIMER_TIMEOUT_S


def test_helper_commands_answer_when_they_exit(tmp_path):
    """The shared runner of timer.sh and a script's --help: the exit code of a command that exited leaving a
    child on its pipe; a command still running at the limit is still cut off (None)."""
    started = time.monotonic()
    assert run_briefly(["bash", "-c", "echo done; sleep 30 & exit 4"], tmp_path, 3.0) == (4, "done\n")
    assert time.monotonic() - started < 1.0
    assert run_briefly(["bash", "-c", "echo 1:00; sleep 30 & sleep 30"], tmp_path, 0.5) == (None, "1:00\n")


def test_a_child_holding_the_pipes_does_not_hold_a_longer_running_helper(tmp_path):
    """The model-loading child (`aci.evaluation.isolated`) and the task's own contamination tool waited on
    their pipes: a worker left behind holding stderr kept the call up to its limit (an hour for a merge).
    `run_to_exit` answers when the command exits, and the worker goes with its session."""
    from aci.evaluation import isolated
    from aci.processes import run_to_exit

    started = time.monotonic()
    left = tmp_path / "left.pid"
    rc, out, err = run_to_exit(["bash", "-c", f"cat; echo oops >&2; sleep 60 & echo $! > {left}; exit 3"],
                               timeout_s=30, stdin_text="asked\n")
    assert (rc, out, err) == (3, "asked\n", "oops\n") and time.monotonic() - started < 5
    pid = int(left.read_text())
    deadline = time.monotonic() + 5
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid)
    assert run_to_exit(["sleep", "30"], timeout_s=0.5)[0] is None and time.monotonic() - started < 10
    started = time.monotonic()
    assert isolated.run(_leaves_a_worker, timeout_s=60) == {"ok": True} and time.monotonic() - started < 20


def _leaves_a_worker() -> dict:
    import subprocess

    subprocess.Popen(["sleep", "60"], start_new_session=False)  # inherits the child's stdout and stderr
    return {"ok": True}


# -- item 5: a strict run's later deadline is refused or journaled ---------------------------------------------
def _strict_hour(workdir: Path):
    out = plan(workdir, profile="posttrainbench", budget_hours=1)
    assert timedelta(minutes=58) < Context(workdir=workdir).clock.left() <= timedelta(hours=1)
    return out


@pytest.mark.parametrize("change", [{"budget_hours": 20}, {"deadline": "+30h"}], ids=["budget", "deadline"])
def test_a_strict_run_without_a_timer_journals_a_later_deadline_as_a_weakening(workdir, change):
    """Row: `plan update --budget-hours 20` or a deadline 30 h on grew time left from 0h59m to 19h59m / 29h59m
    with nothing journaled."""
    _strict_hour(workdir)
    if "deadline" in change:
        change = {"deadline": (now() + timedelta(hours=30)).isoformat(timespec="seconds")}
    out = plan(workdir, "update", **change)
    assert any("moved later" in w and "weakening" in w for w in out.warnings)
    s = status(workdir)
    assert len(s.state.rules_weakened) == 1 and ": deadline " in s.state.rules_weakened[0]
    assert "more than its card allowed" in s.state.rules_weakened[0]
    assert any("Rules weakened mid-run" in p for p in s.state.plainly)
    assert any("Rules weakened mid-run" in r for r in s.run.reminders)


def test_a_strict_run_that_reinits_with_more_time_journals_it(workdir):
    _strict_hour(workdir)
    plan(workdir, profile="posttrainbench", budget_hours=20, force=True)
    assert any(": deadline " in w for w in status(workdir).state.rules_weakened)


def test_an_earlier_deadline_or_a_default_run_is_no_weakening(workdir, tmp_path_factory):
    _strict_hour(workdir)
    plan(workdir, "update", budget_hours=0.5)
    plan(workdir, "update", deadline=(now() + timedelta(minutes=20)).isoformat(timespec="seconds"))
    assert status(workdir).state.rules_weakened == []
    other = tmp_path_factory.mktemp("default-run")
    plan(other, budget_hours=1)
    plan(other, "update", budget_hours=20)
    assert status(other).state.rules_weakened == []


def test_a_strict_run_with_a_timer_cannot_move_its_deadline_later(workdir):
    """With timer.sh the card's deadline is the timer's (and what every tool falls back to when it fails): a
    later one is refused, a larger budget leaves it where it is, less time is always allowed."""
    timer(workdir, f'echo "{HEADER}"\necho "1:00"\n')
    before = _strict_hour(workdir).card
    later = {"deadline": (now() + timedelta(hours=30)).isoformat(timespec="seconds")}
    with pytest.raises(ACIError, match="cannot move later .* while timer.sh exists"):
        plan(workdir, "update", **later)
    ctx = Context(workdir=workdir)
    assert ctx.card.budget_hours == before["budget_hours"]
    assert not any(e["message"].startswith("run card updated") for e in ctx.state.journal())
    plan(workdir, "update", budget_hours=20)
    assert Context(workdir=workdir).clock.left() <= timedelta(hours=1)
    timer(workdir, "exit 1\n")  # a failing timer: the card's deadline stands in, so it is held all the same
    assert Context(workdir=workdir).clock.left() <= timedelta(hours=1)
    with pytest.raises(ACIError, match="while timer.sh exists"):
        plan(workdir, "update", **later)
    plan(workdir, "update", deadline=(now() + timedelta(minutes=30)).isoformat(timespec="seconds"))
    assert status(workdir).state.rules_weakened == []


# -- item 6: no git, one clear error ---------------------------------------------------------------------------
def _without_git(tmp_path: Path, **extra: str) -> dict:
    """The environment with a PATH on which there is no git (an empty folder), and no pointer to one."""
    empty = tmp_path / "no-git-bin"
    empty.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_PYTHON_GIT_EXECUTABLE", "GIT_PYTHON_REFRESH")}
    return {**env, "PATH": str(empty), **extra}


def _says_install_git(r: subprocess.CompletedProcess) -> None:
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "git is needed and not found" in r.stderr and "apt-get install git" in r.stderr, r.stderr


@pytest.mark.parametrize("refresh", [None, "quiet"], ids=["import-raises", "refresh-quiet"])
def test_no_git_fails_the_first_command_with_nothing_written(workdir, tmp_path, refresh):
    """Row: with no git on PATH every state-writing command failed with GitPython's import traceback (its
    GIT_PYTHON_REFRESH check raises at import; set to quiet it imports and the commit fails)."""
    env = _without_git(tmp_path, **({"GIT_PYTHON_REFRESH": refresh} if refresh else {}))
    _says_install_git(cli(workdir, "plan", "init", "--base-model", "base", "--benchmark", "ledger", env=env))
    assert not (workdir / "state").exists()


def test_no_git_mid_run_leaves_the_state_as_it_was(workdir, tmp_path):
    plan(workdir, profile="posttrainbench")
    state = workdir / "state"
    before = {p: p.read_bytes() for p in state.rglob("*") if p.is_file() and ".git" not in p.parts}
    head = subprocess.run(["git", "-C", str(state), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    env = _without_git(tmp_path)
    _says_install_git(cli(workdir, "plan", "update", "--notes", "changed", env=env))
    _says_install_git(cli(workdir, "log-state", "append", "--kind", "decision", "--message", "m", env=env))
    assert {p: p.read_bytes() for p in state.rglob("*") if p.is_file() and ".git" not in p.parts} == before
    assert subprocess.run(["git", "-C", str(state), "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout == head
    assert cli(workdir, "status", env=env).returncode == 0  # reading the run needs no git
