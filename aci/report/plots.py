"""The report's PNG plots (matplotlib, imported only when a plot is drawn): scores with their trial ranges,
loss curves, time per phase against the plan, and histogram comparisons."""

from __future__ import annotations

from pathlib import Path

from aci.report.data import Run, latest_evaluations, short_name


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
