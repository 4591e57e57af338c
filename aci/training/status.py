"""What training jobs have done, read from state: their registered checkpoints, the latest job, the
learning-rate sense check of a job's first loss (`aci.training.chance`), and a job's progress in words
(what it prepares, its schedule's forecast, the ranks it runs as, its time to step 1, a learning-rate
probe's results)."""

from __future__ import annotations

from pathlib import Path

from aci import jobfiles, jobs, records
from aci.context import Context
from aci.errors import ACIError
from aci.jobs import JobView
from aci.state import now, parse_ts, read_json
from aci.training import chance, dev
from aci.training.request import default_learning_rate


def registered(ctx: Context) -> dict[str, list[dict]]:
    """Registered checkpoints per job, in order: the registry, not the job's last progress write, says which
    checkpoint is the last (a job stopped while saving may not have written its progress since)."""
    out: dict[str, list[dict]] = {}
    for e in ctx.state.lines(records.CHECKPOINTS):
        if e.get("type") == "registered" and e.get("job"):
            out.setdefault(e["job"], []).append(e)
    return out


def with_last_checkpoint(view: JobView, registered: dict[str, list[dict]]) -> JobView:
    ckpts = registered.get(view.id)
    if not ckpts:
        return view
    return view.model_copy(update={"progress": {**view.progress, "last_checkpoint": ckpts[-1]["checkpoint"]}})


def listed(ctx: Context) -> list[JobView]:
    """Every train job, each with the last checkpoint it registered."""
    jobs.reap(ctx.state)
    found = registered(ctx)
    return [with_last_checkpoint(v, found) for v in jobs.list_jobs(ctx.state, kind="train")]


def job(ctx: Context, job_id: str | None) -> tuple[JobView, list[dict]]:
    """A train job (default the latest) with the checkpoints it registered."""
    jobs.reap(ctx.state)
    if not job_id:
        started = jobs.list_jobs(ctx.state, kind="train")
        if not started:
            raise ACIError("no training jobs yet; start one with `aci train start --data ...`")
        job_id = max(started, key=lambda j: j.started_at).id
    found = registered(ctx)
    return with_last_checkpoint(jobs.view(ctx.state, job_id), found), found.get(job_id, [])


def ranking(views: list[JobView]) -> list[str]:
    """Pilots side by side: the jobs with a dev curve, best first by their score at the largest step they all
    reached (equal steps from the same start are what make short runs comparable)."""
    curves = {v.id: (v.progress.get("dev") or {}) for v in views}
    curves = {k: d for k, d in curves.items() if d.get("curve")}
    if len(curves) < 2:
        return []
    metrics = {d["metric"] for d in curves.values()}
    if len(metrics) > 1:
        return ["pilots: not ranked, their dev curves measure different things (accuracy and loss)"]
    step = min(max(p["step"] for p in d["curve"]) for d in curves.values())
    at = {k: max((p for p in d["curve"] if p["step"] <= step), key=lambda p: p["step"]) for k, d in curves.items()}
    order = sorted(at, key=lambda k: at[k]["score"], reverse=metrics == {"accuracy"})
    line = ", ".join(f"{k} {at[k]['score']:.3g}" + (f" (step {at[k]['step']})" if at[k]["step"] != step else "")
                     for k in order)
    return [f"pilots by dev {metrics.pop()} at step {step}, best first: {line}"]


def rate_advice(view: JobView) -> str | None:
    """What a first loss near chance says about the learning rate, once the job has logged one, until its
    loss has left the plateau (then the advice is spent)."""
    p = view.progress
    if chance.left(p.get("loss"), p.get("vocab_size")):
        return None
    cfg = read_json(Path(view.folder) / jobfiles.CONFIG) or {}
    default = default_learning_rate(cfg["method"], bool(cfg.get("lora"))) if cfg.get("method") else None
    return chance.advice(p.get("first_loss"), p.get("vocab_size"), cfg.get("learning_rate"), default)


def describe(p: dict) -> list[str]:
    """A job's schedule forecast (rate now, planned end, whether the stop time cuts it) and its start."""
    out = []
    fc = p.get("schedule") or {}
    if fc.get("note"):
        rate = f"{fc['step_s']:.3g} s/step ({fc.get('step_s_source')})" if fc.get("step_s") else "rate unknown"
        start = fc.get("start_estimate")
        was = f"; the start estimated {start['step_s']:.3g} s/step ({start.get('source')})" if start else ""
        out.append(f"  schedule {fc.get('kind')}: {fc['note']} [rate {rate}{was}]")
    if fc.get("kind") == "wsd" and fc.get("phase") == "stable" and not p.get("decay_requested"):
        out.append(f"  schedule wsd, stable phase: the rate is at its peak until the decay before step "
                   f"{fc.get('end_step')}, and checkpoints score below what the decay reaches; to end the run "
                   f"early, `aci train stop --job {p.get('job')} --decay` (it decays, then saves and stops)")
    for e in p.get("schedule_events") or []:
        out.append(f"  schedule change at step {e['step']} ({e['at']}): {e['what']}")
    out += dev.describe(p.get("dev"))
    procs = p.get("processes") or {}
    if procs.get("world_size", 1) > 1:
        hosts = len({r["host"] for r in procs["ranks"]}) > 1
        where = ", ".join(f"rank {r['rank']} pid {r['pid']}" + (f" on {r['host']}" if hosts else "")
                          for r in procs["ranks"])
        out.append(f"  processes: {procs['world_size']} ranks ({where}); rank 0 saves and registers the checkpoints")
    threads = p.get("cpu_threads") or {}
    if threads.get("why"):
        out.append(f"  cpu threads: {threads['why']}" + (f" ({len(threads['changes']) - 1} changes while running)"
                                                         if len(threads.get("changes", [])) > 1 else ""))
    s = p.get("startup") or {}
    if "to_first_step_s" in s:
        out.append(f"  time to step 1: {s['to_first_step_s']} s (data: {s.get('tokenized')}, {s.get('tokenize_s')} s)")
    return out


def describe_checks(c: dict) -> list[str]:
    """A dry-run's or start's checks in lines: samples, the estimate and what it rests on, the split of a
    step, the dev set, a learning-rate probe."""
    lines = [f"checked {c.get('samples_checked')} samples: {c.get('mean_tokens')} tokens/sequence, "
              f"assistant share {c.get('assistant_token_share')}, truncated {c.get('truncated')}"]
    est = c.get("estimate") or {}
    lines.append(f"estimate: {est.get('steps')} steps, {est.get('tokens')} tokens, {est.get('duration')} "
                 f"({est.get('lr_schedule')} schedule; rate {est.get('rate_source')}; loading "
                 f"{est.get('startup_s')} s, {est.get('startup_source')}; tokenizing {est.get('tokenize_s')} s, "
                 f"{est.get('tokenize_source')}); {est.get('time_left_for_work')} left before the reserve")
    if c.get("per_step"):
        ps = c["per_step"]
        lines.append(f"per step: {ps['samples']} samples = micro-batch {ps['micro_batch']} x accumulation "
                     f"{ps['grad_accum']} x {ps['processes']} process(es) ({ps['why']})")
    if c.get("dev"):
        d = c["dev"]
        lines.append(f"dev set: {d['items']} tasks scored every {d['every']} steps and at the end by "
                     f"{d['metric']} ({d['source']}), {d['max_new_tokens']} new tokens per reply")
    return lines + describe_probe(c.get("lr_probe"))


def describe_probe(probe: dict | None) -> list[str]:
    if not probe:
        return []
    out = [f"learning-rate probe (job {probe.get('job')}, {probe.get('seconds')} s, {probe.get('steps_per_rate')} "
           f"steps per rate, {probe.get('held_out_rows')} held-out rows):"]
    out += [f"  {r['learning_rate']:.3g}: held-out loss {r['loss_before']:.4f} -> {r['loss_after']:.4f} (drop "
            f"{r['drop']:.4f}{', rose' if r.get('rose') else ''}; first loss {r['first_loss']}; {r['seconds']} s)"
            for r in probe.get("results", [])]
    out.append(f"  suggested: {probe.get('suggested')} ({probe.get('why')})")
    return out


def preparing(step: dict) -> str:
    """'tokenizing 3000 samples ...: 1200/3000 (for 14 s)': what a job does before its first step."""
    counts = f": {step['done']}/{step['total']}" if step.get("total") else ""
    since = f" (for {(now() - parse_ts(step['since'])).total_seconds():.0f} s)" if step.get("since") else ""
    return f"{step.get('what')}{counts}{since}"
