"""Where a run stands, derived from state: gates, phases, next actions, the rules that apply now.

Nothing here is stored: every figure is recomputed from the state files on each call, so it cannot
drift from what really happened. `status` and `log-state summary` return the long form (`summarise`);
`aci.envelope` attaches the short form to every tool result.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from aci import clock, jobs, manifest, records
from aci.context import Context
from aci.goal import BENCHMARK_CARD, Goal, goal, unconfirmed
from aci.rules import Guide
from aci.state import iso, now, parse_ts

FINALIZE = "finalize.json"
PROFILE_CHANGE = "profile_change"  # key of a plan event's data when init --force changed the rules profile
BASE_MODEL_CHANGE = "base_model_change"  # key of a plan event's data when init --force changed the base model
DEADLINE_CHANGE = "deadline_change"  # key of a plan event's data when a strict run's deadline moved later
SANDBOX = "sandbox"  # key of a sandbox event's data: graded model code ran in a partial or unsafe sandbox


class PhaseStatus(BaseModel):
    name: str
    gate: str
    allocated_min: float
    spent_min: float
    status: str = Field(description="done, current, pending, or missed (the final reserve began before its gate passed)")
    gate_passed_at: str | None = None


class Gate(BaseModel):
    name: str
    passed: bool
    at: str | None = None
    evidence: str = ""


def uncounted_evidence(entry: dict, minimum: int) -> str:
    """What blocks a gate when the base was evaluated but the number of items it scored cannot be read: a
    limit is a request the script may cap, so it is not taken as the count."""
    limit = f" (asked for --limit {entry['limit']})" if entry.get("limit") is not None else ""
    return (f"the base model was evaluated{limit} but the eval command's output holds no sample count the tools "
            f"can read, so it cannot count toward the {minimum} samples needed: name the key that holds the count "
            f"with `aci plan update --count-key <dotted key>` (its numbers are in the metrics JSON of "
            f"evals/{entry.get('eval_id')}/), or make the script write one (n, num_samples), then evaluate again")


def gates(ctx: Context) -> dict[str, Gate]:
    st, card, best = ctx.state, ctx.card, ctx.best
    journal = st.journal() if card else []
    out: dict[str, Gate] = {}

    cards = [e for e in journal if e.get("kind") == BENCHMARK_CARD]
    has_command = bool(card and card.eval_command)
    ok = has_command and bool(cards)
    out["run-card"] = Gate(
        name="run-card", passed=ok, at=cards[0]["ts"] if ok else None,
        evidence="eval command set and benchmark card recorded" if ok else
        ("no benchmark card in the journal" if has_command else "run card has no eval command"),
    )

    minimum = ctx.rules.min_samples(card.benchmark_size) if card else 0
    base = [
        e for e in st.lines(records.CHECKPOINTS)
        if e.get("type") == "evaluated" and e.get("checkpoint") == "base" and not e.get("error")
        and (e.get("samples") or 0) >= minimum
    ] if card else []
    uncounted = [e for e in st.lines(records.CHECKPOINTS) if e.get("type") == "evaluated" and
                 e.get("checkpoint") == "base" and not e.get("error") and not e.get("samples")] if card else []
    out["baseline"] = Gate(
        name="baseline", passed=bool(base), at=base[0]["ts"] if base else None,
        evidence=f"base model scored {base[0].get('score')} on {base[0].get('samples')} samples" if base
        else uncounted_evidence(uncounted[-1], minimum) if uncounted
        else f"no evaluation of the base model on >= {minimum} samples",
    )

    # Promoting the base model as a floor keeps a submittable final_model but is not a trained model yet.
    trained = best is not None and best.checkpoint != "base"
    promotes = [e for e in journal if e.get("kind") == "promote" and (e.get("data") or {}).get("checkpoint") != "base"]
    out["first-promoted"] = Gate(
        name="first-promoted", passed=trained,
        at=(promotes[0]["ts"] if promotes else iso(best.promoted_at)) if trained else None,
        evidence=f"final_model is {best.checkpoint} ({best.score})" if trained
        else "final_model is the base model: promote a trained checkpoint" if best else "no final_model promoted yet",
    )

    met = [t for t in (card.targets if card else []) if best and best.score >= t.value]
    out["target-met"] = Gate(
        name="target-met", passed=bool(met), at=iso(best.promoted_at) if met else None,
        evidence=f"target {met[-1].metric} >= {met[-1].value} met by {best.checkpoint} ({best.score}); the run "
                 f"goes on to a stretch goal" if met else "no target met",
    )

    fin = st.read(FINALIZE)
    # Pinned to the promotion: a later promotion makes an earlier passing finalize stale.
    fresh = bool(fin and fin.get("passed") and (not best or fin.get("promotion_id") == best.promotion_id))
    out["finalized"] = Gate(
        name="finalized", passed=fresh, at=fin.get("ts") if fresh else None,
        evidence="finalize passed on the current final_model" if fresh else "finalize has not passed on the current final_model",
    )
    return out


def phases(ctx: Context, gate_map: dict[str, Gate] | None = None) -> list[PhaseStatus]:
    """The phase plan with its state. The first phase whose gate has not passed is current; once only the
    reserve's phase is left, the phase that keeps improving (`after_all_gates` in rules.yaml: iterate) stays
    current until the final reserve, even with its gate (a target) passed: meeting a target never moves a
    run to `submit` early. In the reserve, its phase is current and earlier ones are done or missed."""
    card = ctx.card
    if not card:
        return []
    gate_map = gate_map or gates(ctx)
    start = card.started_at
    t = now()
    clk = ctx.clock
    in_reserve = clk.in_reserve()
    reserve_start = clk.deadline - clk.reserve if clk.deadline else t
    reserve_phase = ctx.rules.profile.reserve_phase.name
    keep = next(name for name, g in ctx.rules.file.phases.items() if g.after_all_gates)
    out, current_found = [], False
    prev_end = start
    for ph, allocated in ctx.rules.profile.allocation(card.budget_hours * 60):
        g = gate_map.get(ph.gate)
        passed_at = parse_ts(g.at) if g and g.passed and g.at else None
        if ph.name == reserve_phase:
            status, end = ("current", t) if in_reserve else ("pending", prev_end)
            if in_reserve:
                prev_end = max(prev_end, reserve_start)
        elif current_found:
            status, end = "pending", prev_end
        elif passed_at and ph.name != keep:
            status, end = "done", max(passed_at, prev_end)
        elif in_reserve:
            status, end = ("done" if passed_at else "missed"), max(reserve_start, prev_end)
        else:
            status, end, current_found = "current", t, True
        spent = max((end - prev_end).total_seconds() / 60, 0) if status != "pending" else 0.0
        out.append(PhaseStatus(
            name=ph.name, gate=ph.gate, allocated_min=round(allocated, 1), spent_min=round(spent, 1),
            status=status, gate_passed_at=g.at if g and g.passed else None,
        ))
        if status != "pending":
            prev_end = end
    return out


def guide(ctx: Context, phase_list: list[PhaseStatus] | None = None) -> Guide:
    """The next actions and rules of where the run stands (defined per phase in rules/rules.yaml)."""
    if not ctx.card:
        return ctx.rules.guide(None, has_card=False, in_reserve=False)
    phase_list = phase_list if phase_list is not None else phases(ctx)
    current = next((p.name for p in phase_list if p.status == "current"), None)
    return ctx.rules.guide(current, has_card=True, in_reserve=ctx.clock.in_reserve())


def next_actions(ctx: Context, phase_list: list[PhaseStatus] | None = None, the_goal: Goal | None = None) -> list[str]:
    """The phase's next actions (rules.yaml), led by what the goal asks once a model is promoted."""
    base = guide(ctx, phase_list).next
    best = ctx.best
    if not ctx.card or not best or ctx.clock.in_reserve():
        return base
    g = the_goal or goal(ctx)
    if g.source == "top of the scale":  # no failures left to read: confirm the score, then what is worth doing
        missing = unconfirmed(ctx)
        said = f"final_model ({best.checkpoint}) scores {best.score:.4g} on {best.samples or 'an unknown number of'} " \
               f"samples"
        if missing:
            return [f"{said}: {' and '.join(missing)}; read any failures that shows.",
                    *ctx.rules.file.top_of_scale.next]
        return [f"{said}, on every item: nothing scores above it.", *ctx.rules.file.top_of_scale.next]
    elif g.stretch:
        lead = (f"{'Target met' if g.met else 'No target set'}: keep improving until the final reserve. Next goal "
                f"{g.value:.4g} ({g.source}): one hypothesis per iteration, compared with aci eval-checkpoint compare.")
    else:
        return base
    return [lead, *base]


def finalized_at(gate_map: dict[str, Gate]) -> str | None:
    g = gate_map.get("finalized")
    return g.at if g and g.passed else None


def rules_weakened(ctx: Context) -> list[str]:
    """Each switch that weakened the rules (`plan init --force` with another profile or base model), each later
    deadline a strict run gave itself with no timer.sh to hold it (`runcard.deadline_change`), and each
    grading of model code as root that `--unsafe-grader` allowed, from the journal: the run card then no
    longer says what the run started under."""
    out = []
    for e in ctx.state.journal() if ctx.card else []:
        data = e.get("data") or {}
        for key, what in ((PROFILE_CHANGE, "rules profile"), (BASE_MODEL_CHANGE, "base model"),
                          (DEADLINE_CHANGE, "deadline")):
            change = data.get(key)
            if change and change.get("weakened"):
                out.append(f"{e['ts']}: {what} {change['from']} -> {change['to']}, weaker: "
                           + "; ".join(change["weakened"]))
        box = data.get(SANDBOX)
        if box and box.get("kind") == "unsafe":
            out.append(f"{e['ts']}: {e.get('tool')} --unsafe-grader ran model code as root ({box.get('note')})")
    return out


def plainly(ctx: Context, gate_map: dict[str, Gate], the_goal: Goal, weakened: list[str]) -> list[str]:
    """Where the run stands, in a few plain sentences: what is done, what the goal is, what time is left."""
    clk, best = ctx.clock, ctx.best
    left, work = clock.fmt(clk.left()), clock.fmt(clk.left_for_work())
    model = f"final_model ({best.checkpoint}, {best.score:.4g})" if best else None
    done_at = finalized_at(gate_map)
    out = []
    if clk.in_reserve():
        if model and done_at:
            out.append(f"Final reserve ({left} left). {model} passed finalize at {done_at}: the run is complete; "
                       f"stopping now is fine.")
        elif model:
            out.append(f"Final reserve ({left} left): start no training. Run aci finalize on {model} and fix what "
                       f"it flags.")
        else:
            out.append(f"Final reserve ({left} left) and no final_model: promote the best evaluated checkpoint (the "
                       f"base model if nothing beat it) and run aci finalize.")
    else:
        if model and done_at:
            out.append(f"Done so far: {model} passed finalize at {done_at}; it is ready to be scored as it is.")
        elif model:
            out.append(f"final_model is {best.checkpoint} ({best.score:.4g}); aci finalize has not passed on it yet.")
        out.append(f"{the_goal.text[:1].upper()}{the_goal.text[1:]}. {work} left before the final reserve"
                   + (": keep improving until then." if the_goal.stretch else "."))
    out += [f"Rules weakened mid-run ({w})." for w in weakened]
    return out


def protected_changed(ctx: Context) -> list[str]:
    changed = []
    for rel, digest in (ctx.card.protected if ctx.card else {}).items():
        p = ctx.workdir / rel
        if not p.is_file() or manifest.file_hash(p) != digest:
            changed.append(rel)
    return changed


def unchecked_datasets(ctx: Context) -> list[str]:
    data = ctx.state.root / records.DATA
    if not data.is_dir():
        return []
    out = []
    for m in sorted(data.glob("*/manifest.json")):
        manifest = ctx.state.read(str(m.relative_to(ctx.state.root))) or {}
        if manifest.get("role", "train") == "train" and not (manifest.get("contamination") or {}).get("verdict"):
            out.append(m.parent.name)
    return out


class Summary(BaseModel):
    """What a fresh context needs to continue a run."""

    has_run_card: bool
    profile: str | None = None
    base_model: str | None = None
    benchmark: str | None = None
    eval_command: str | None = None
    deadline: str | None = None
    deadline_source: str
    time_left: str
    final_reserve_min: float
    current_phase: str | None = None
    phases: list[PhaseStatus] = Field(default_factory=list)
    gates: list[Gate] = Field(default_factory=list)
    best: dict | None = None
    last_events: list[dict] = Field(default_factory=list)
    running_jobs: list[dict] = Field(default_factory=list)
    next_actions: list[str] = Field(default_factory=list)
    rules_now: list[str] = Field(default_factory=list, description="the rules that apply at this point")
    goal: Goal | None = Field(None, description="what the run aims at now: a target, or a stretch goal once met")
    plainly: list[str] = Field(default_factory=list, description="where the run stands, in plain sentences")
    rules_weakened: list[str] = Field(default_factory=list, description="profile or base-model switches that weakened the rules")


def summarise(ctx: Context, last: int = 10) -> Summary:
    card = ctx.card
    gate_map = gates(ctx) if card else {}
    phase_list = phases(ctx, gate_map)
    current = next((p.name for p in phase_list if p.status == "current"), None)
    clk = ctx.clock
    now_guide = guide(ctx, phase_list)
    the_goal = goal(ctx) if card else None
    weakened = rules_weakened(ctx)
    return Summary(
        has_run_card=card is not None,
        profile=card.profile if card else None,
        base_model=card.base_model if card else None,
        benchmark=card.benchmark if card else None,
        eval_command=card.eval_command if card else None,
        deadline=clk.deadline.isoformat(timespec="seconds") if clk.deadline else None,
        deadline_source=clk.source,
        time_left=clock.fmt(clk.left()),
        final_reserve_min=clk.reserve.total_seconds() / 60,
        current_phase=current,
        phases=phase_list,
        gates=list(gate_map.values()),
        best=ctx.best.model_dump(mode="json") if ctx.best else None,
        last_events=ctx.state.journal(last) if card else [],
        running_jobs=[j.model_dump(mode="json") for j in jobs.active(ctx.state)],
        next_actions=next_actions(ctx, phase_list, the_goal) if card else now_guide.next,
        rules_now=[f"{i}: {ctx.rules.rule(i).text}" for i in now_guide.rules],
        goal=the_goal,
        plainly=plainly(ctx, gate_map, the_goal, weakened) if card else [],
        rules_weakened=weakened,
    )
