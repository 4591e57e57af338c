"""The report page: one self-contained HTML file. No external asset and no script: CSS is inline, the
timeline is inline SVG, the plots are PNGs embedded as data URIs and also written beside the page."""

from __future__ import annotations

import base64
import html
from datetime import datetime
from pathlib import Path

from aci import DISTRIBUTION
from aci.report.data import Run, latest_evaluations, short_name
from aci.report.plots import plot_histograms, plot_losses, plot_phases, plot_scores
from aci.state import parse_ts

PAGE = "report.html"
KIND_COLORS = {"plan": "#6b7280", "benchmark-card": "#0ea5e9", "eval": "#8b5cf6", "data": "#f59e0b",
               "train": "#10b981", "promote": "#ef4444", "finalize": "#111827", "result": "#2563eb",
               "decision": "#db2777", "observation": "#14b8a6", "note": "#9ca3af"}
PHASE_COLORS = ["#e0f2fe", "#ede9fe", "#dcfce7", "#fef3c7", "#fee2e2", "#f3f4f6"]

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


def section_data(run: Run, figures: list[tuple[str, Path]]) -> str:
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
    shown = "".join(img(p, label) for label, p in figures)
    return ('<section id="data"><h2>Data gates</h2><table><thead><tr><th>file</th><th>role</th>'
            '<th>histogram vs benchmark</th><th>verify-task</th><th>contamination</th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>'
            + (f'<h3>Structure against the benchmark (features that differed)</h3><div class="plots">{shown}</div>'
               if shown else "")
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
                f'(<code>pip install "{DISTRIBUTION}[plots]"</code>).</p>')
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


