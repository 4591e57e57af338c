"""Candidate against target: per-bin gaps, total-variation distance, pass/fail at a tolerance, the quotas
that close the gaps at a final size N, and a bar plot per feature (see the package docstring)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from aci.errors import ACIError
from aci.histogram.build import bin_key


def _shares(entry: dict) -> dict[str, float]:
    total = sum(entry["counts"].values())
    return {b: c / total for b, c in entry["counts"].items()} if total else {}


def _ceil_share(target_count: int, target_total: int, size: int) -> int:
    return -(-target_count * size // target_total)


def comparable(target: dict, candidate: dict) -> tuple[list[str], list[dict]]:
    """(features to compare, skipped features with the reason): a feature is compared only when both
    sides carry a value for it and measured the same thing (gold answers vs responses)."""
    names, skipped = [], []
    tfeats, cfeats = target["features"], candidate["features"]
    for name in [*tfeats, *(k for k in cfeats if k not in tfeats)]:
        t, c = tfeats.get(name), cfeats.get(name)
        if not t or not t["records"]:
            reason = "no value in the target"
        elif not c or not c["records"]:
            reason = "no value in the candidate" + (
                " (tasks carry `subtype`, samples `meta.subtype`)" if name == "subtype" else
                " (samples carry `meta.returns_info` or `meta.gold`)" if name == "returns_info" else "")
        elif t.get("measures") and c.get("measures") and t["measures"] != c["measures"]:
            reason = (f"the target measures {t['measures']}, the candidate {c['measures']}: not the same thing "
                      f"(compare like with like: tasks with tasks, samples with samples)")
        else:
            names.append(name)
            continue
        if c and c["records"] or t and t["records"]:  # a feature neither side has is not worth a line
            skipped.append({"feature": name, "reason": reason})
    return names, skipped


def min_size(target: dict, candidate: dict, names: Iterable[str] | None = None) -> int:
    """The smallest N at which adding samples alone can reach the target in every compared per-record
    feature (`names`, default: those `comparable` returns)."""
    n = candidate["records"]
    for name in comparable(target, candidate)[0] if names is None else names:
        t, c = target["features"][name], candidate["features"][name]
        if t["kind"] == "mix":
            continue
        tt = sum(t["counts"].values())
        for b, have in c["counts"].items():
            want = t["counts"].get(b, 0)
            if want:
                n = max(n, -(-have * tt // want))
    return n


def compare(target: dict, candidate: dict, tolerance_pp: float, size: int | None = None) -> dict:
    """Gaps, TV distance, pass/fail and quotas of `candidate` against `target` (both histogram dicts), over
    the features both carry and measure alike; the others are listed under `skipped` with the reason."""
    if target.get("unit") != candidate.get("unit"):
        raise ACIError(f"the target's lengths are in {target.get('unit')} and the candidate's in "
                       f"{candidate.get('unit')}: pass the same --tokenizer as the target was computed with "
                       f"(or none for characters)")
    n = candidate["records"]
    if size is not None and size < n:
        raise ACIError(f"size {size} is below the candidate's {n} records; quotas only add samples")
    names, skipped = comparable(target, candidate)
    size = size or min_size(target, candidate, names)
    features, quotas = {}, []
    for name in names:
        t, c = target["features"][name], candidate["features"][name]
        ts, cs = _shares(t), _shares(c)
        order = list(t["counts"]) + [b for b in c["counts"] if b not in t["counts"]]
        order.sort(key=lambda b: bin_key(tuple(t.get("order", ())))((b, t["counts"].get(b, 0))))
        bins = []
        for b in order:
            gap = 100 * (cs.get(b, 0.0) - ts.get(b, 0.0))
            bins.append({"bin": b, "target_pct": round(100 * ts.get(b, 0.0), 2),
                         "candidate_pct": round(100 * cs.get(b, 0.0), 2), "gap_pp": round(gap, 2),
                         "target": t["counts"].get(b, 0), "candidate": c["counts"].get(b, 0)})
        tv = 0.5 * sum(abs(cs.get(b, 0.0) - ts.get(b, 0.0)) for b in order)
        worst = max((abs(x["gap_pp"]) for x in bins), default=0.0)
        entry: dict[str, Any] = {"passed": worst <= tolerance_pp, "tv": round(tv, 4), "max_gap_pp": round(worst, 2),
                                 "bins": bins}
        if c["records"] < n:  # counted over the records that carry it
            entry["coverage"] = {"candidate": c["records"], "of": n}
        if t.get("mean") is not None and c.get("mean") is not None:
            entry["mean"] = {"target": t["mean"], "candidate": c["mean"]}
        if t["kind"] != "mix":
            q, after = _quotas(name, t, c, size)
            quotas += q if not entry["passed"] else []  # a passing feature's "quota" is only the growth to N
            entry["max_gap_after_quotas_pp"] = after
            excess = [b["bin"] for b in bins if b["target"] == 0 and b["candidate"] > 0]
            if excess:
                entry["excess_bins"] = excess
        features[name] = entry
    quotas.sort(key=lambda q: (-q["relative_deficit"], -q["need"], q["feature"], q["bin"]))
    return {"tolerance_pp": tolerance_pp, "passed": bool(features) and all(f["passed"] for f in features.values()),
            "failed": [k for k, f in features.items() if not f["passed"]], "skipped": skipped,
            "size": size, "candidate_records": n, "features": features, "quotas": quotas}


def _quotas(name: str, t: dict, c: dict, size: int) -> tuple[list[dict], float]:
    tt = sum(t["counts"].values())
    out, after = [], {}
    for b, want_count in t["counts"].items():
        have = c["counts"].get(b, 0)
        want = _ceil_share(want_count, tt, size)
        need = max(0, want - have)
        after[b] = have + need
        if need:
            out.append({"feature": name, "bin": b, "have": have, "target_pct": round(100 * want_count / tt, 2),
                        "need": need, "relative_deficit": round(need / want, 4)})
    for b, have in c["counts"].items():
        after.setdefault(b, have)
    total = sum(after.values())
    worst = max(abs(after[b] / total - t["counts"].get(b, 0) / tt) for b in after) if total else 0.0
    return out, round(100 * worst, 2)


def plot(name: str, target: dict | None, candidate: dict, out: Path) -> Path:
    """Bars of target vs candidate shares for one feature (matplotlib, Agg, imported here)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cs = _shares(candidate)
    ts = _shares(target) if target else {}
    bins = list(dict.fromkeys([*(target or {}).get("counts", {}), *candidate["counts"]]))
    fig, ax = plt.subplots(figsize=(max(4.0, 0.6 * len(bins) + 2), 3.2))
    xs = range(len(bins))
    width = 0.4 if target else 0.8
    if target:
        ax.bar([x - width / 2 for x in xs], [100 * ts.get(b, 0) for b in bins], width, label="target")
    ax.bar([x + (width / 2 if target else 0) for x in xs], [100 * cs.get(b, 0) for b in bins], width,
           label="candidate")
    ax.set_xticks(list(xs), bins, rotation=30 if len(bins) > 6 else 0, ha="right" if len(bins) > 6 else "center")
    ax.set_ylabel("% of records" if candidate["kind"] != "mix" else "% of calls")
    ax.set_title(name)
    ax.legend()
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=80)
    plt.close(fig)
    return out


