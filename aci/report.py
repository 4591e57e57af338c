"""`aci report`: one self-contained HTML page of a run, plus the PNG plots it embeds.

Everything comes from the state folder (and the files it names), so a report can be written at any time,
by anyone, after the fact: the run card, the journal (timeline), the phase plan against the time used
(`aci.progress.phases`), every evaluation in `checkpoints.jsonl` with its trial range, the data manifests
(histogram comparisons, verify-task yields, contamination verdicts) and the loss curve of each training
job (from the job's `history.jsonl` when present, else the trainer's `trainer_state.json` of its last
checkpoint, else the `[aci] step` lines of its log).

The page has no external asset and no script: CSS is inline, the timeline is inline SVG, the plots are
PNGs (matplotlib, imported only here) embedded as data URIs and also written beside the page.
"""

from __future__ import annotations

import base64
import html
import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import click

from aci import records
from aci.state import State, iso, parse_ts

PAGE = "report.html"
KIND_COLORS = {"plan": "#6b7280", "benchmark-card": "#0ea5e9", "eval": "#8b5cf6", "data": "#f59e0b",
               "train": "#10b981", "promote": "#ef4444", "finalize": "#111827", "result": "#2563eb",
               "decision": "#db2777", "observation": "#14b8a6", "note": "#9ca3af"}
PHASE_COLORS = ["#e0f2fe", "#ede9fe", "#dcfce7", "#fef3c7", "#fee2e2", "#f3f4f6"]
_STEP_LINE = re.compile(r"\[aci\] step (\d+)/\d+ .*?\bloss=([0-9.eE+-]+)")


@dataclass
class Run:
    """What the page shows, read once from the state folder."""

    state: State
    card: dict
    journal: list[dict]
    evaluations: list[dict]
    best: dict | None
    finalize: dict | None
    phases: list[dict]
    losses: dict[str, list[tuple[int, float]]]
    data: list[dict]
    workdir: Path
    generated: str = field(default_factory=iso)


def collect(state_dir: Path, workdir: Path | None = None) -> Run:
    from aci.context import Context
    from aci.errors import ACIError
    from aci.progress import FINALIZE, phases

    state = State(state_dir)
    card = state.read(records.RUN_CARD)
    if not card:
        raise ACIError(f"no run card in {state.root}: nothing to report (is --state the run's state folder?)")
    if workdir is None:  # the run's own working directory, else the folder holding the state
        workdir = Path(card.get("workdir") or state.root.parent)
        workdir = workdir if workdir.is_dir() else state.root.parent
    ctx = Context(state=state.root, workdir=workdir)
    return Run(
        state=state, card=card, journal=state.journal(),
        evaluations=[e for e in state.lines(records.CHECKPOINTS) if e.get("type") == "evaluated"],
        best=state.read(records.BEST), finalize=state.read(FINALIZE),
        phases=[p.model_dump() for p in phases(ctx)], losses=loss_curves(state), data=data_manifests(state, workdir),
        workdir=workdir,
    )


# -- loss curves ----------------------------------------------------------------------------------
def loss_curves(state: State) -> dict[str, list[tuple[int, float]]]:
    """Per training job, (step, loss) points from the best source the job left."""
    root = state.root / records.JOBS
    out: dict[str, list[tuple[int, float]]] = {}
    for job_dir in sorted(root.iterdir()) if root.is_dir() else []:
        job = state.read(f"{records.JOBS}/{job_dir.name}/job.json") or {}
        if job.get("kind") != "train" or (job.get("config") or {}).get("measure"):
            continue
        points = _history(job_dir) or _trainer_state(job.get("config") or {}) or _log_lines(job_dir / "log")
        if points:
            out[job_dir.name] = points
    return out


def _history(job_dir: Path) -> list[tuple[int, float]]:
    path = job_dir / "history.jsonl"
    if not path.is_file():
        return []
    from aci.state import read_jsonl

    return [(int(r["step"]), float(r["loss"])) for r in read_jsonl(path) if "loss" in r and "step" in r]


def _trainer_state(config: dict) -> list[tuple[int, float]]:
    folder = Path(config.get("output_dir") or "")
    if not config.get("output_dir") or not folder.is_dir():
        return []
    found = []
    for p in folder.glob("checkpoint-*/trainer_state.json"):
        try:
            found.append((int(p.parent.name.split("-")[-1]), p))
        except ValueError:
            continue
    if not found:
        return []
    try:
        history = json.loads(max(found)[1].read_text()).get("log_history", [])
    except (OSError, json.JSONDecodeError):
        return []
    return [(int(h["step"]), float(h["loss"])) for h in history if "loss" in h and "step" in h]


def _log_lines(path: Path) -> list[tuple[int, float]]:
    if not path.is_file():
        return []
    return [(int(m.group(1)), float(m.group(2))) for m in _STEP_LINE.finditer(path.read_text(errors="replace"))]


# -- data manifests -------------------------------------------------------------------------------
def data_manifests(state: State, workdir: Path) -> list[dict]:
    """Each manifest with its histogram (and the target's, when the target's own manifest has one)."""
    root = state.root / records.DATA
    manifests = []
    for m in sorted(root.glob("*/manifest.json")) if root.is_dir() else []:
        try:
            manifest = json.loads(m.read_text())
        except json.JSONDecodeError:
            continue
        side = m.parent / "histogram.json"
        manifest["_histogram"] = json.loads(side.read_text()) if side.is_file() else None
        manifests.append(manifest)
    by_path = {str(Path(x.get("path", "")).resolve()): x for x in manifests}
    for x in manifests:
        target = (x.get("histogram") or {}).get("target")
        if target:
            tpath = Path(target) if Path(target).is_absolute() else workdir / target
            found = by_path.get(str(tpath.resolve()))
            x["_target_histogram"] = (found or {}).get("_histogram")
    manifests.sort(key=lambda x: min((x.get(s) or {}).get("at", "~") for s in ("histogram", "verify", "contamination")))
    return manifests


# -- plots ----------------------------------------------------------------------------------------
def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 9, "axes.spines.top": False, "axes.spines.right": False,
                         "axes.grid": True, "grid.alpha": 0.3})
    return plt


def _save(fig, out: Path) -> Path:
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return out


def latest_evaluations(run: Run) -> list[dict]:
    """The newest successful evaluation per (checkpoint, evaluator, limit), in the order first evaluated."""
    out: dict[tuple, dict] = {}
    for e in run.evaluations:
        if e.get("error") or e.get("score") is None:
            continue
        out[(e["checkpoint"], e.get("evaluator"), e.get("limit"))] = e
    return list(out.values())


def short_name(checkpoint: str) -> str:
    """`train-1129-120402-d7de/checkpoint-500` -> `d7de/ckpt-500` for axis labels."""
    if "/" not in checkpoint:
        return checkpoint
    job, ck = checkpoint.rsplit("/", 1)
    return f"{job.split('-')[-1]}/{ck.replace('checkpoint', 'ckpt')}"


def plot_scores(run: Run, out: Path) -> Path | None:
    evals = latest_evaluations(run)
    if not evals:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(4.5, 1.1 * len(evals) + 2), 3.2))
    best = (run.best or {}).get("checkpoint")
    for i, e in enumerate(evals):
        lo, hi = e.get("range") or (e["score"], e["score"])
        color = "#ef4444" if e["checkpoint"] == best else "#6b7280" if e["checkpoint"] == "base" else "#2563eb"
        ax.errorbar([i], [e["score"]], yerr=[[e["score"] - lo], [hi - e["score"]]], fmt="o", color=color,
                    markersize=7, capsize=8, elinewidth=2)
        ax.annotate(f"{e['score']:.3f}", (i, e["score"]), textcoords="offset points", xytext=(12, -3), fontsize=8)
    ax.set_xticks(range(len(evals)), [short_name(e["checkpoint"]) for e in evals])
    ax.set_xlim(-0.5, len(evals) - 0.5)
    ax.set_ylabel((run.card.get("metric_key") or "score") + " (mean, min-max over trials)")
    ax.set_ylim(bottom=min(0, ax.get_ylim()[0]))
    return _save(fig, out)


def plot_losses(run: Run, out: Path) -> Path | None:
    if not run.losses:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 3.2))
    for job, points in run.losses.items():
        ax.plot([s for s, _ in points], [v for _, v in points], marker=".", label=job)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("training loss (assistant tokens)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7)
    return _save(fig, out)


def plot_phases(run: Run, out: Path) -> Path | None:
    if not run.phases:
        return None
    plt = _plt()
    names = [p["name"] for p in run.phases][::-1]
    alloc = [p["allocated_min"] for p in run.phases][::-1]
    spent = [p["spent_min"] for p in run.phases][::-1]
    fig, ax = plt.subplots(figsize=(6.5, 0.45 * len(names) + 1.0))
    ys = range(len(names))
    ax.barh([y + 0.18 for y in ys], alloc, height=0.34, color="#cbd5e1", label="allocated")
    ax.barh([y - 0.18 for y in ys], spent, height=0.34, color="#2563eb", label="used")
    ax.set_yticks(list(ys), names)
    ax.set_xlabel("minutes")
    ax.legend(fontsize=7, loc="lower right")
    return _save(fig, out)


def plot_histograms(run: Run, folder: Path) -> list[tuple[str, Path]]:
    """One figure per feature that differed anywhere: the target's shares beside each compared set's.

    Sets are grouped by their comparison target; a feature is drawn when some set's total-variation
    distance to the target exceeded 0.005 (the others matched and say nothing)."""
    groups: dict[str, list[dict]] = {}
    for m in run.data:
        h = m.get("histogram") or {}
        if h.get("target") and m.get("_histogram"):
            groups.setdefault(h["target"], []).append(m)
    made = []
    for target, sets in groups.items():
        features = [f for f in sets[0]["_histogram"]["features"]
                    if any((m["histogram"].get("tv") or {}).get(f, 0) > 0.005 for m in sets)]
        tfeats = (sets[0].get("_target_histogram") or {}).get("features", {})
        for feature in features:
            series = ([(f"{Path(target).name} (target)", tfeats[feature])] if feature in tfeats else [])
            series += [(Path(m["path"]).name, m["_histogram"]["features"][feature]) for m in sets
                       if feature in m["_histogram"]["features"]]
            png = folder / f"histogram-{Path(target).stem}-{feature}.png"
            made.append((f"{feature} vs {Path(target).name}", _bars(feature, series, png)))
    return made


def _bars(feature: str, series: list[tuple[str, dict]], out: Path) -> Path:
    plt = _plt()
    bins = list(dict.fromkeys(b for _, entry in series for b in entry["counts"]))
    fig, ax = plt.subplots(figsize=(max(4.5, 0.9 * len(bins) * len(series) / 2 + 2.5), 3.0))
    width = 0.8 / len(series)
    colors = ["#94a3b8", "#f59e0b", "#2563eb", "#10b981", "#8b5cf6"]
    for k, (label, entry) in enumerate(series):
        total = sum(entry["counts"].values()) or 1
        xs = [i - 0.4 + width * (k + 0.5) for i in range(len(bins))]
        ax.bar(xs, [100 * entry["counts"].get(b, 0) / total for b in bins], width, label=label,
               color=colors[k % len(colors)])
    ax.set_xticks(range(len(bins)), bins)
    ax.set_ylabel("% of records")
    ax.set_title(feature)
    ax.legend(fontsize=7)
    return _save(fig, out)


# -- HTML -----------------------------------------------------------------------------------------
CSS = """
:root { --ink:#111827; --muted:#6b7280; --line:#e5e7eb; --ok:#15803d; --bad:#b91c1c; --accent:#2563eb; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink);
       background: #f8fafc; }
header { background: #0f172a; color: #f8fafc; padding: 22px 32px; }
header h1 { margin: 0 0 4px; font-size: 22px; font-weight: 600; }
header p { margin: 0; color: #cbd5e1; }
main { max-width: 1120px; margin: 0 auto; padding: 20px 24px 48px; }
section { background: #fff; border: 1px solid var(--line); border-radius: 10px; padding: 16px 20px; margin: 16px 0; }
h2 { font-size: 16px; margin: 0 0 12px; }
h3 { font-size: 14px; margin: 14px 0 6px; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(150px, 1fr)); gap: 12px; }
.card { background: #fff; border: 1px solid var(--line); border-radius: 10px; padding: 12px 14px; }
.card .label { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .04em; }
.card .value { font-size: 20px; font-weight: 600; margin-top: 2px; }
.card .sub { color: var(--muted); font-size: 12px; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { text-align: left; padding: 6px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
th { color: var(--muted); font-weight: 600; font-size: 12px; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.best td { background: #fef2f2; }
.badge { display: inline-block; padding: 0 7px; border-radius: 999px; font-size: 12px; font-weight: 600; }
.pass { background: #dcfce7; color: var(--ok); } .fail { background: #fee2e2; color: var(--bad); }
.muted { color: var(--muted); }
.plots { display: flex; flex-wrap: wrap; gap: 12px; }
.plots img { max-width: 100%; border: 1px solid var(--line); border-radius: 6px; background: #fff; }
.kind { display: inline-block; width: 9px; height: 9px; border-radius: 50%; margin-right: 6px; }
details summary { cursor: pointer; color: var(--accent); }
code { font-size: 12px; background: #f1f5f9; padding: 1px 4px; border-radius: 4px; }
footer { color: var(--muted); font-size: 12px; text-align: center; margin-top: 24px; }
"""


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def img(path: Path | None, alt: str) -> str:
    if not path:
        return ""
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img src="data:image/png;base64,{data}" alt="{esc(alt)}">'


def badge(ok: bool | None, yes: str = "pass", no: str = "fail") -> str:
    if ok is None:
        return '<span class="muted">-</span>'
    return f'<span class="badge {"pass" if ok else "fail"}">{yes if ok else no}</span>'


def fmt_range(e: dict) -> str:
    lo, hi = e.get("range") or (e["score"], e["score"])
    return f"{lo:.3f} &ndash; {hi:.3f}"


def _minutes(a: datetime, b: datetime) -> float:
    return (b - a).total_seconds() / 60


def section_overview(run: Run) -> str:
    c, best, fin = run.card, run.best, run.finalize
    base = next((e for e in reversed(latest_evaluations(run)) if e["checkpoint"] == "base"), None)
    start = parse_ts(c["started_at"])
    last = parse_ts(run.journal[-1]["ts"]) if run.journal else start
    cards = [
        ("base model", esc(Path(c["base_model"]).name), esc(c.get("profile", "default")) + " rules"),
        ("base score", f"{base['score']:.3f}" if base else "&ndash;", fmt_range(base) if base else "no baseline"),
        ("best", f"{best['score']:.3f}" if best else "&ndash;",
         esc(short_name(best["checkpoint"])) if best else "nothing promoted"),
        ("final_model", badge(fin.get("passed"), "finalized", "checks failed") if fin else badge(None),
         esc(short_name(fin.get("checkpoint") or "")) if fin else "finalize not run"),
        ("time used", f"{_minutes(start, last):.1f} min", f"of {float(c['budget_hours']) * 60:.0f} min budget"),
        ("events", str(len(run.journal)), f"{len(run.evaluations)} evaluations"),
    ]
    items = "".join(f'<div class="card"><div class="label">{a}</div><div class="value">{b}</div>'
                    f'<div class="sub">{s}</div></div>' for a, b, s in cards)
    eval_cmd = f"<p class=\"muted\">eval command: <code>{esc(c.get('eval_command') or '-')}</code></p>"
    return f'<section><h2>Run</h2><div class="cards">{items}</div>{eval_cmd}</section>'


def section_scores(run: Run, png: Path | None) -> str:
    evals = latest_evaluations(run)
    if not evals:
        return '<section id="scores"><h2>Scores</h2><p class="muted">No evaluation yet.</p></section>'
    best = (run.best or {}).get("checkpoint")
    rows = []
    for e in evals:
        mark = ' <span class="badge pass">final_model</span>' if e["checkpoint"] == best else ""
        rows.append(
            f'<tr class="{"best" if e["checkpoint"] == best else ""}"><td>{esc(e["checkpoint"])}{mark}</td>'
            f'<td>{esc(e.get("evaluator"))}</td><td class="num">{e["score"]:.3f}</td>'
            f'<td class="num">{fmt_range(e)}</td><td class="num">{esc(e.get("samples"))}</td>'
            f'<td class="num">{len(e.get("scores") or [])}</td><td class="num">{e.get("duration_s") or 0:.0f} s</td></tr>')
    failed = [e for e in run.evaluations if e.get("error")]
    fail_note = (f'<p class="muted">{len(failed)} failed evaluation(s), e.g. {esc(failed[-1]["checkpoint"])}: '
                 f'{esc(failed[-1]["error"][:200])}</p>') if failed else ""
    return (f'<section id="scores"><h2>Scores</h2><div class="plots">{img(png, "scores with trial ranges")}</div>'
            '<table><thead><tr><th>checkpoint</th><th>evaluator</th><th class="num">score</th>'
            '<th class="num">range (trials)</th><th class="num">samples</th><th class="num">trials</th>'
            f'<th class="num">time</th></tr></thead><tbody>{"".join(rows)}</tbody></table>{fail_note}</section>')


def section_phases(run: Run, png: Path | None) -> str:
    if not run.phases:
        return ""
    rows = "".join(
        f'<tr><td>{esc(p["name"])}</td><td>{esc(p["status"])}</td><td class="num">{p["spent_min"]:.1f}</td>'
        f'<td class="num">{p["allocated_min"]:.1f}</td><td>{esc(p["gate"])}</td>'
        f'<td>{badge(True, "passed") if p.get("gate_passed_at") else badge(None)}</td></tr>' for p in run.phases)
    return (f'<section id="phases"><h2>Time per phase against the plan</h2><div class="plots">'
            f'{img(png, "time per phase")}</div><table><thead><tr><th>phase</th><th>status</th>'
            '<th class="num">used (min)</th><th class="num">allocated (min)</th><th>gate</th><th></th></tr>'
            f'</thead><tbody>{rows}</tbody></table></section>')


def timeline_svg(run: Run) -> str:
    """Phase bands and one tick per journal event, on one time axis (inline SVG, no script)."""
    if not run.journal:
        return ""
    start = parse_ts(run.card["started_at"])
    end = max(parse_ts(e["ts"]) for e in run.journal)
    span = max(_minutes(start, end), 0.5)
    width, left, right, top = 1040, 10, 10, 22
    x = lambda minutes: left + (width - left - right) * max(0.0, minutes) / span  # noqa: E731
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} 96" width="100%" role="img" '
             f'aria-label="timeline">']
    t = 0.0
    for i, p in enumerate(run.phases):
        if p["status"] == "pending" or p["spent_min"] <= 0:
            continue
        x0, x1 = x(t), x(min(t + p["spent_min"], span))
        parts.append(f'<rect x="{x0:.1f}" y="{top}" width="{max(x1 - x0, 1):.1f}" height="40" '
                     f'fill="{PHASE_COLORS[i % len(PHASE_COLORS)]}"><title>{esc(p["name"])}: '
                     f'{p["spent_min"]:.1f} min</title></rect>')
        if x1 - x0 > 40:
            parts.append(f'<text x="{x0 + 4:.1f}" y="{top - 6}" font-size="11" fill="#475569">{esc(p["name"])}</text>')
        t += p["spent_min"]
    for e in run.journal:
        xe = x(_minutes(start, parse_ts(e["ts"])))
        color = KIND_COLORS.get(e["kind"], "#9ca3af")
        parts.append(f'<line x1="{xe:.1f}" x2="{xe:.1f}" y1="{top + 4}" y2="{top + 36}" stroke="{color}" '
                     f'stroke-width="2"><title>{esc(e["ts"])} {esc(e["kind"])}: {esc(e["message"])}</title></line>')
    parts.append(f'<line x1="{left}" x2="{width - right}" y1="{top + 46}" y2="{top + 46}" stroke="#cbd5e1"/>')
    for k in range(6):
        m = span * k / 5
        parts.append(f'<text x="{x(m):.1f}" y="{top + 62}" font-size="11" fill="#64748b" '
                     f'text-anchor="{"start" if k == 0 else "end" if k == 5 else "middle"}">{m:.1f} min</text>')
    parts.append("</svg>")
    return "".join(parts)


def section_timeline(run: Run) -> str:
    start = parse_ts(run.card["started_at"])
    kinds = sorted({e["kind"] for e in run.journal})
    legend = " ".join(f'<span class="muted"><span class="kind" style="background:{KIND_COLORS.get(k, "#9ca3af")}">'
                      f'</span>{esc(k)}</span>' for k in kinds)
    rows = "".join(
        f'<tr><td class="num">{_minutes(start, parse_ts(e["ts"])):.1f}</td><td><span class="kind" '
        f'style="background:{KIND_COLORS.get(e["kind"], "#9ca3af")}"></span>{esc(e["kind"])}</td>'
        f'<td>{esc(e.get("tool") or "")}</td><td>{esc(e["message"])}</td></tr>' for e in run.journal)
    return (f'<section id="timeline"><h2>Timeline</h2>{timeline_svg(run)}<p>{legend}</p>'
            f'<details><summary>{len(run.journal)} journal events</summary><table><thead><tr>'
            '<th class="num">min</th><th>kind</th><th>tool</th><th>message</th></tr></thead>'
            f'<tbody>{rows}</tbody></table></details></section>')


def section_training(run: Run, png: Path | None) -> str:
    if not run.losses:
        return '<section id="training"><h2>Training</h2><p class="muted">No training job yet.</p></section>'
    rows = "".join(f"<tr><td>{esc(job)}</td><td class=\"num\">{pts[-1][0]}</td><td class=\"num\">{pts[0][1]:.3f}</td>"
                   f"<td class=\"num\">{pts[-1][1]:.3f}</td></tr>" for job, pts in run.losses.items())
    return (f'<section id="training"><h2>Training loss</h2><div class="plots">{img(png, "loss curves")}</div>'
            '<table><thead><tr><th>job</th><th class="num">last step</th><th class="num">first loss</th>'
            f'<th class="num">last loss</th></tr></thead><tbody>{rows}</tbody></table></section>')


def section_data(run: Run, plots: list[tuple[str, Path]]) -> str:
    if not run.data:
        return '<section id="data"><h2>Data gates</h2><p class="muted">No data checked yet.</p></section>'
    rows = []
    for m in run.data:
        h, v, c = m.get("histogram") or {}, m.get("verify") or {}, m.get("contamination") or {}
        hist = (badge(h.get("passed")) + f' <span class="muted">vs {esc(Path(h["target"]).name)}, max tv '
                f'{max((h.get("tv") or {0: 0}).values()):.3f}</span>') if h.get("target") else \
            (f'<span class="muted">{h.get("records")} records</span>' if h else badge(None))
        ver = (f'{v.get("kept")}/{v.get("candidates")} kept' if v else badge(None))
        con = (badge(c.get("verdict") == "pass") + f' <span class="muted">{c.get("flagged")} of {c.get("rows")} '
               f'rows flagged</span>') if c else badge(None)
        rows.append(f'<tr><td>{esc(Path(m.get("path", "?")).name)}</td><td>{esc(m.get("role", ""))}</td>'
                    f'<td>{hist}</td><td>{ver}</td><td>{con}</td></tr>')
    figures = "".join(img(p, label) for label, p in plots)
    return ('<section id="data"><h2>Data gates</h2><table><thead><tr><th>file</th><th>role</th>'
            '<th>histogram vs benchmark</th><th>verify-task</th><th>contamination</th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>'
            + (f'<h3>Structure against the benchmark (features that differed)</h3><div class="plots">{figures}</div>'
               if figures else "")
            + "</section>")


def render(run: Run, out: Path) -> Path:
    """Write the PNG plots and the page into `out`; return the page's path."""
    out.mkdir(parents=True, exist_ok=True)
    try:
        import matplotlib  # noqa: F401  (the plots need it; the page does not)
    except ImportError:
        scores = losses = phase_png = None
        hists = []
        note = ('<p class="muted">No plots: matplotlib is not installed '
                '(<code>pip install "posttrain-aci[plots]"</code>).</p>')
    else:
        scores = plot_scores(run, out / "scores.png")
        losses = plot_losses(run, out / "loss.png")
        phase_png = plot_phases(run, out / "phases.png")
        hists = plot_histograms(run, out)
        note = ""
    c = run.card
    title = f"{Path(c['base_model']).name} on {c['benchmark']}"
    body = note + "".join([
        section_overview(run), section_scores(run, scores), section_phases(run, phase_png),
        section_training(run, losses), section_data(run, hists), section_timeline(run),
    ])
    page = (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<link rel="icon" href="data:,"><title>aci report: {esc(title)}</title><style>{CSS}</style></head><body>'
        f'<header><h1>Post-training run: {esc(title)}</h1><p>started {esc(c["started_at"])}, '
        f'deadline {esc(c.get("deadline") or "-")} &middot; state {esc(run.state.root)}</p></header>'
        f'<main>{body}<footer>written by aci report at {esc(run.generated)} from the state folder; '
        'every figure is recomputed from its files.</footer></main></body></html>'
    )
    path = out / PAGE
    path.write_text(page, encoding="utf-8")
    return path


def write(state_dir: Path, out: Path | None = None, workdir: Path | None = None) -> Path:
    run = collect(state_dir, workdir)
    return render(run, out or run.workdir / "report")


@click.command()
@click.option("--state", "state_dir", type=click.Path(file_okay=False), default=None,
              help="the run's state folder (default: aci --state, $ACI_STATE, else <aci --workdir>/state)")
@click.option("--out", "out", type=click.Path(file_okay=False), default=None,
              help="folder for report.html and the PNG plots (default: <workdir>/report)")
@click.pass_context
def command(cctx: click.Context, state_dir: str | None, out: str | None) -> None:
    """Write a self-contained HTML report of a run (timeline, phases, scores, data gates, loss curves)."""
    from aci.state import resolve_root

    root = cctx.find_root().obj or {}
    workdir = Path(root["workdir"]).resolve() if root.get("workdir") else None
    page = write(resolve_root(state_dir or root.get("state"), workdir), Path(out).resolve() if out else None, workdir)
    click.echo(f"wrote {page}")
