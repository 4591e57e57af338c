"""Rules as data, the clock, the schemas generated from the records, and the Stop guard."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from aci import records, rules
from aci.clock import Clock, clock_for, parse_timer_output
from aci.context import Context
from aci.errors import ACIError
from aci.guard import stop_decision

ROOT = Path(__file__).resolve().parent.parent


def test_committed_schemas_match_the_models(tmp_path):
    assert json.loads((ROOT / "rules" / "rules.schema.json").read_text()) == rules.json_schema()
    for p in records.write_schemas(tmp_path):
        assert json.loads(p.read_text()) == json.loads((ROOT / "state" / "schemas" / p.name).read_text()), p.name


def test_rules_yaml_defines_exactly_the_profile_names():
    """`rules.ProfileName` is what the run card and `plan --profile` accept: a profile the file adds could
    never be chosen, and one it lacks would fail at plan init."""
    assert sorted(rules.load_file(rules.rules_path()).profiles) == sorted(rules.PROFILES)
    assert records.RunCard.model_fields["profile"].annotation is rules.ProfileName


def test_profiles_load_and_the_phase_plan_fills_the_budget():
    for name in rules.PROFILES:
        prof = rules.load(name).profile
        for budget in (600, 90):
            assert abs(sum(m for _, m in prof.allocation(budget)) - budget) < 1e-9
    assert rules.load("posttrainbench").strict and not rules.load("default").strict
    strict = rules.load("posttrainbench")
    assert strict.min_samples(1319) == 66 and strict.min_samples(30) == 30 and strict.min_samples(None) == 32
    strict.check_host("127.0.0.1")
    strict.check_host("localhost")
    with pytest.raises(ACIError) as e:
        strict.check_host("api.openai.com")
    assert e.value.rule == "no-hosted-llm"
    with pytest.raises(ACIError) as e:
        strict.check_dataset_name("openai/openai_humaneval")
    assert e.value.rule == "forbidden-datasets"
    strict.check_dataset_name("openai/gsm8k")
    rules.load("default").check_host("api.example.com")


@pytest.mark.parametrize("mutate,field", [
    (lambda d: d["profiles"]["posttrainbench"].pop("final_reserve_min"), "profiles.posttrainbench"),
    (lambda d: d["profiles"]["default"].__setitem__("final_reserve_min", "soon"), "profiles.default.final_reserve_min"),
    (lambda d: d["rules"][0].__setitem__("id", "Bad Id"), "rules.0.id"),
    (lambda d: d["profiles"]["default"]["phases"][0].__setitem__("share", 0), "profiles.default.phases.0.share"),
    (lambda d: d["profiles"]["default"]["phases"][4].__setitem__("share", 0.05), "profiles.default.phases"),
    (lambda d: d["profiles"]["default"]["phases"][0].__setitem__("name", "scouting"), "profiles.default.phases"),
    (lambda d: d["profiles"]["default"].pop("strict"), "profiles.default"),
    (lambda d: d["phases"]["baseline"]["rules"].append("no-such-rule"), "phases.baseline.rules"),
    (lambda d: d["phases"]["recon"].pop("next"), "phases.recon"),
    (lambda d: d["phases"]["iterate"].pop("after_all_gates"), "phases"),
])
def test_broken_rules_file_names_the_field(tmp_path, mutate, field):
    data = yaml.safe_load((ROOT / "rules" / "rules.yaml").read_text())
    mutate(data)
    bad = tmp_path / "rules.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(ACIError, match=f"field {field}"):
        rules.load_file(bad)


def test_broken_rules_file_through_the_cli(tmp_path):
    bad = tmp_path / "rules.yaml"
    data = yaml.safe_load((ROOT / "rules" / "rules.yaml").read_text())
    bad.write_text(yaml.safe_dump({**data, "rules": []}))
    r = subprocess.run([sys.executable, "-m", "aci.cli", "status"], capture_output=True, text=True, cwd=tmp_path,
                       env={**__import__("os").environ, "ACI_RULES": str(bad)})
    assert r.returncode == 2 and "field rules" in r.stderr


def test_phase_plan_gives_the_reserve_phase_the_reserve():
    prof = rules.load("posttrainbench").profile
    at_budget = [(p.name, round(m, 6)) for p, m in prof.allocation(600)]
    assert at_budget == [("recon", 30), ("baseline", 30), ("first-model", 120), ("iterate", 375), ("submit", 45)]
    long = dict((p.name, m) for p, m in prof.allocation(360))  # 6 hours: 15 % would be 54 min, so 45 still
    assert long["submit"] == 45 and abs(sum(long.values()) - 360) < 1e-9
    short = dict((p.name, m) for p, m in prof.allocation(120))  # 2 hours: 15 % of the budget, work split by share
    assert short["submit"] == 18 and abs(sum(short.values()) - 120) < 1e-9
    assert abs(short["first-model"] / short["recon"] - 4) < 1e-9
    # the run: 43 minutes left at init kept a 45-minute reserve, more than the whole run
    assert prof.reserve_min(43) == pytest.approx(6.45) and prof.reserve_min() == 45


def test_guidance_and_protected_files_come_from_the_rules_file(tmp_path, workdir, monkeypatch):
    data = yaml.safe_load((ROOT / "rules" / "rules.yaml").read_text())
    data["phases"]["baseline"]["next"] = ["Score the base model: aci eval-checkpoint evaluate --checkpoint base."]
    data["phases"]["baseline"]["rules"] = ["keep-best"]
    next(r for r in data["rules"] if r["id"] == "no-eval-edits")["protects"] = ["grader.py"]
    data["profiles"]["default"]["strict"] = True
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    monkeypatch.setenv("ACI_RULES", str(path))
    (workdir / "grader.py").write_text("print('grade')\n")
    (workdir / "evaluate.py").write_text("print('eval')\n")
    out = _init(workdir)
    assert set(out.card["protected"]) == {"grader.py"}
    assert out.next_actions == ["Read the eval command's grader and templates/; note answer format, sample count "
                                "and time per eval.", "Record it: aci log-state append --kind benchmark-card "
                                "--message '<format, grader, pitfalls>'."]
    from aci import registry

    registry.call("log-state", {"kind": "benchmark-card", "message": "last number"}, Context(workdir=workdir))
    state = registry.call("status", {}, Context(workdir=workdir)).state
    assert state.current_phase == "baseline"
    assert state.next_actions == data["phases"]["baseline"]["next"]
    assert [r.split(":")[0] for r in state.rules_now] == ["keep-best"]
    assert Context(workdir=workdir).rules.strict


@pytest.mark.parametrize("text,minutes", [
    ("Remaining time (hours:minutes):\n9:58\n", 598),
    ("Remaining time (hours:minutes): 0:07", 7),
    ("Timer expired!\n", 0),
])
def test_timer_output(text, minutes):
    assert parse_timer_output(text) == timedelta(minutes=minutes)


def test_unreadable_timer_is_an_error():
    with pytest.raises(ACIError, match="timer.sh"):
        parse_timer_output("hello")


def test_deadline_from_timer_beats_the_card(workdir):
    (workdir / "timer.sh").write_text('echo "Remaining time (hours:minutes):"\necho "2:30"\n')
    card = records.RunCard(base_model="m", benchmark="b", workdir=str(workdir), budget_hours=10,
                           started_at="2020-01-01T00:00:00+00:00")
    clk = clock_for(workdir, card, 45)
    assert clk.source == "timer.sh"
    assert timedelta(minutes=149) < clk.left() <= timedelta(minutes=150)
    assert timedelta(minutes=104) < clk.left_for_work() <= timedelta(minutes=105)
    assert clk.fits(timedelta(minutes=100)) and not clk.fits(timedelta(minutes=110))
    (workdir / "timer.sh").unlink()
    assert clock_for(workdir, card, 45).left() == timedelta(0)  # the 2020 budget is long over


def test_reserve():
    from aci.state import now

    clk = Clock(now() + timedelta(minutes=30), timedelta(minutes=45), "test")
    assert clk.in_reserve() and clk.left_for_work() == timedelta(0)


def test_a_job_started_in_a_short_reserve_gets_time_and_a_past_stop_is_refused(tmp_path):
    """A 30-minute budget's reserve (4.5 min) is shorter than the last margin (5 min): an evaluation started
    in it had a stop time before its start, was killed at once and said nothing. It now runs until halfway
    through the reserve; a job whose stop time has passed is refused before anything is written."""
    from aci import jobs
    from aci.clock import LAST_MARGIN
    from aci.state import State, now

    deadline = now() + timedelta(minutes=3)
    short = Clock(deadline, timedelta(minutes=4.5), "test")
    assert short.in_reserve() and short.job_stop() == deadline - timedelta(minutes=2.25) > now()
    long = Clock(deadline, timedelta(minutes=45), "test")
    assert long.job_stop() == deadline - LAST_MARGIN
    state = State(tmp_path / "state")
    with pytest.raises(ACIError, match=r"^no time is left for another eval job: its stop time .* has passed"):
        jobs.start(state, "eval", [sys.executable, "-c", "pass"], {}, cwd=tmp_path, message="late",
                   stop_at=now() - timedelta(seconds=1))
    assert not (state.root / "jobs").exists() or not any((state.root / "jobs").iterdir())


def _init(wd, **extra):
    from aci import registry

    args = {"action": "init", "base_model": "base", "benchmark": "toy",
            "eval_command": "python evaluate.py --model-path {model_path} --json-output-file {output}", **extra}
    return registry.call("plan", args, Context(workdir=wd))


def test_stop_guard_blocks_until_the_final_reserve_target_met_or_not(workdir):
    assert stop_decision(Context(workdir=workdir)) is None  # no run: never trap a session
    _init(workdir, targets=[{"metric": "accuracy", "value": 0.5}])
    d = stop_decision(Context(workdir=workdir))
    assert d["decision"] == "block" and "never-stop-early" in d["reason"] and "left" in d["reason"]
    assert "no target is met" in d["reason"]
    from aci.state import State, iso

    with State(workdir / "state").event("promote", "promoted x") as w:
        w.write_json("best.json", {"checkpoint": "x", "path": "final_model", "score": 0.7, "evaluator": "cmd",
                                   "promoted_at": iso()})
    # a met target is a milestone: the guard still blocks, and names the stretch goal
    d = stop_decision(Context(workdir=workdir))
    assert d["decision"] == "block" and "target 0.5 met" in d["reason"] and "next goal 0.72" in d["reason"]
    r = subprocess.run([sys.executable, "-m", "aci.cli", "guard", "stop"], input="{}", capture_output=True,
                       text=True, cwd=workdir)
    assert r.returncode == 0 and json.loads(r.stdout)["decision"] == "block"


def test_stop_guard_in_final_reserve_asks_for_finalize_once(workdir):
    (workdir / "timer.sh").write_text('echo "Remaining time (hours:minutes):"; echo "0:30"\n')
    _init(workdir, profile="posttrainbench", budget_hours=10)  # a 10-hour run with 30 minutes left: reserve 45
    d = stop_decision(Context(workdir=workdir))
    assert d["decision"] == "block" and "aci finalize" in d["reason"]
    # Sent back already: never trapped, but told once to say why the run ends, and the reason journaled.
    d = stop_decision(Context(workdir=workdir), {"stop_hook_active": True})
    assert d["decision"] == "block" and d["reason"].startswith("Stopping is fine now: the final reserve has begun")
    assert "no final_model has been promoted" in d["reason"] and "last message" in d["reason"]
    from aci.state import State

    last = State(workdir / "state").journal()[-1]
    assert last["kind"] == "end" and "Stop guard: stopping is fine" in last["message"]
    assert stop_decision(Context(workdir=workdir), {"stop_hook_active": True}) is None


def test_stop_guard_once_finalize_passed_asks_for_a_last_message_that_says_why(workdir):
    (workdir / "timer.sh").write_text('echo "Remaining time (hours:minutes):"; echo "0:30"\n')
    _init(workdir, profile="posttrainbench", budget_hours=10)
    from aci.state import State, iso

    with State(workdir / "state").event("finalize", "finalize passed") as w:
        w.write_json("finalize.json", {"passed": True, "ts": iso()})
    d = stop_decision(Context(workdir=workdir))
    assert d["decision"] == "block" and "m left); no final_model has been promoted" in d["reason"]
    assert stop_decision(Context(workdir=workdir)) is None  # said once: the stop goes through
    r = subprocess.run([sys.executable, "-m", "aci.cli", "guard", "end", "--how", "the agent exited with status 0"],
                       capture_output=True, text=True, cwd=workdir)
    assert r.returncode == 0, r.stderr
    last = State(workdir / "state").journal()[-1]
    assert last["kind"] == "end" and last["message"] == r.stdout.strip()
    assert last["message"].startswith("Run ended: the agent exited with status 0; the final reserve has begun")


def test_guard_end_without_a_run_card_journals_nothing(workdir):
    r = subprocess.run([sys.executable, "-m", "aci.cli", "guard", "end", "--how", "exited"], capture_output=True,
                       text=True, cwd=workdir)
    assert r.returncode == 0 and r.stdout == "" and not (workdir / "state" / "journal.jsonl").exists()


def test_stop_guard_lets_a_session_stuck_in_failing_turns_stop(workdir):
    """Claude Code 2.0 after an API error: the turn ends, Stop runs again with stop_hook_active set, and
    the transcript gains only the error message (its own line format, as recorded from 2.0.55)."""
    from aci import guard
    from aci.state import State, iso, parse_ts

    _init(workdir, targets=[{"metric": "accuracy", "value": 0.5}])
    transcript = workdir / "session.jsonl"
    transcript.write_text('{"type":"user","message":{"role":"user","content":"hello"}}\n')

    def turn(entry: dict | None = None, *, session: str = "s1", active: bool = True):
        if entry:
            with transcript.open("a") as f:
                f.write(json.dumps(entry, separators=(",", ":")) + "\n")
        return stop_decision(Context(workdir=workdir), {"session_id": session, "transcript_path": str(transcript),
                                                        "hook_event_name": "Stop", "stop_hook_active": active})

    error = {"type": "assistant", "isApiErrorMessage": True, "error": "unknown", "message": {"role": "assistant",
             "content": [{"type": "text", "text": "API Error: 400 invalid_request_error"}]}}
    tool = {"type": "assistant", "message": {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "aci status"}}]}}
    assert turn(active=False)["decision"] == "block"  # the first stop of the session
    for _ in range(guard.BLOCK_CAP - 2):
        assert turn(error)["decision"] == "block"
    assert turn(tool)["decision"] == "block"  # a tool call is work: the count starts again
    for _ in range(guard.BLOCK_CAP - 1):
        assert turn(error)["decision"] == "block"
    assert turn(session="s2")["decision"] == "block"  # another session starts its own count
    for _ in range(guard.BLOCK_CAP - 2):
        assert turn(error, session="s2")["decision"] == "block"
    with State(workdir / "state").event("observation", "the agent logged something"):
        pass  # a state change is work too
    for _ in range(guard.BLOCK_CAP):
        assert turn(error, session="s2")["decision"] == "block"
    record = json.loads((workdir / "state" / guard.RECORD).read_text())  # blocks spread wider than the window
    record["blocks"][0] = iso(parse_ts(record["blocks"][0]) - guard.BLOCK_WINDOW - timedelta(seconds=1))
    (workdir / "state" / guard.RECORD).write_text(json.dumps(record))
    assert turn(error, session="s2")["decision"] == "block"
    assert turn(error, session="s2") is None  # BLOCK_CAP blocks in the window with nothing done: let it stop
    event = State(workdir / "state").journal()[-1]
    assert event["kind"] == "guard" and f"{guard.BLOCK_CAP} times" in event["message"]
    assert "API Error: 400" in event["message"] and not (workdir / "state" / guard.RECORD).exists()
    assert turn(active=False)["decision"] == "block"  # a later stop starts afresh


# The shape of PostTrainBench's template choice in evaluate.py: BFCL names the tool-calling Gemma template.
_PICK = """def template_for(kind):
    if kind == 'qwen':
        name = 'qwen3.jinja'
    elif kind == 'gemma':
        name = '{gemma}'
    return name
"""


@pytest.mark.parametrize("gemma", ["gemma3.jinja", "gemma3_tool_calling.jinja"])
def test_plan_takes_the_template_the_evaluation_script_names(workdir, gemma):
    (workdir / "evaluate.py").write_text(_PICK.format(gemma=gemma))
    (workdir / "templates").mkdir()
    for name in ("qwen3.jinja", "gemma3.jinja", "gemma3_tool_calling.jinja"):
        (workdir / "templates" / name).write_text("{{ messages }}")
    assert _init(workdir, base_model="google/gemma-3-4b-pt").card["template"] == f"templates/{gemma}"


def test_plan_falls_back_to_the_family_template_without_a_script(workdir):
    (workdir / "templates").mkdir()
    for name in ("gemma3.jinja", "gemma3_tool_calling.jinja"):
        (workdir / "templates" / name).write_text("{{ messages }}")
    assert _init(workdir, base_model="google/gemma-3-4b-pt").card["template"] == "templates/gemma3.jinja"


def test_plan_records_eval_file_hashes_and_flags_edits(workdir):
    (workdir / "evaluate.py").write_text("print('eval')\n")
    (workdir / "templates").mkdir()
    (workdir / "templates" / "qwen3.jinja").write_text("{{ messages }}")
    out = _init(workdir, base_model="Qwen/Qwen3-1.7B-Base")
    assert out.card["template"] == "templates/qwen3.jinja"
    assert set(out.card["protected"]) == {"evaluate.py", "templates/qwen3.jinja"}
    (workdir / "evaluate.py").write_text("print('hacked')\n")
    from aci import registry

    status = registry.call("status", {}, Context(workdir=workdir))
    assert any("no-eval-edits" in r for r in status.run.reminders)


def test_a_deadline_without_time_zone_is_local_time_and_said_so(workdir):
    """Through the MCP server running in UTC+05:30: 18:00 typed there means 18:00+05:30, not 18:00 UTC."""
    import asyncio

    from tests.conftest import mcp_client

    async def go():
        async with mcp_client(workdir, env={"TZ": "Asia/Kolkata"}) as c:
            r = await c.call_tool("plan", {"action": "init", "base_model": "base", "benchmark": "toy",
                                           "deadline": "2031-01-01T18:00:00"})
            assert not r.is_error, r.content
            return r.structured_content

    out = asyncio.run(go())
    assert out["card"]["deadline"] == "2031-01-01T18:00:00+05:30"
    assert any("no time zone" in w and "local time" in w for w in out["warnings"])
    aware = _init(workdir, force=True, deadline="2031-01-01T18:00:00Z")
    assert aware.card["deadline"] in ("2031-01-01T18:00:00Z", "2031-01-01T18:00:00+00:00") and not aware.warnings
    with pytest.raises(ACIError, match="not an ISO date-time"):
        _init(workdir, force=True, deadline="tomorrow at six")
