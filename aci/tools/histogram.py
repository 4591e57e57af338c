"""`histogram`: structural features of a task/sample set, and the comparison with a target that gates it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from aci.context import Context
from aci.errors import ACIError
from aci.histogram import build, compare, features
from aci.registry import ToolInput, ToolOutput, tool


class HistogramInput(ToolInput):
    action: Literal["compute", "compare"] = Field(
        "compute", description="compute the histogram of `path`, or compare it with `target`")
    path: str = Field(description="data file: task records or SFT samples (JSONL or a JSON array)")
    target: str | None = Field(None, description="compare: the target set (records file, e.g. the benchmark's "
                                                 "items) or a histogram saved with --save")
    feature_set: Literal["auto", "chat", "tool-use"] = Field(
        "auto", description="auto: tool-use when the first records have tools or tool calls, else chat")
    features: list[str] = Field(default_factory=list, description="keep only these features (default: all)")
    custom: list[str] = Field(default_factory=list, description="extra features: [name=]python:module:function, "
                                                                "called with each record; returns a bin label, "
                                                                "bool, int, list of labels, or None")
    tokenizer: str | None = Field(None, description="local tokenizer folder: lengths in its tokens instead of characters")
    tool_kinds: dict[str, Literal["read", "write"]] | None = Field(
        None, description='read/write class per tool name, e.g. {"cancel_pending_order": "write"}; '
                          'otherwise the verbs in the name decide')
    tolerance_pp: float | None = Field(None, gt=0, le=100, description="compare: a feature fails when any bin's "
                                                                      "|gap| exceeds this (default: the rules profile)")
    size: int | None = Field(None, ge=1, description="compare: final size N the quotas fill to (default: the "
                                                     "smallest N reachable by adding samples only)")
    save: str | None = Field(None, description="write the histogram of `path` as JSON here (a target for later)")
    plot_dir: str | None = Field(None, description="write one PNG per feature (target vs candidate) into this folder")
    role: Literal["train", "reference"] = Field(
        "train", description="role recorded in the data manifest: train data, or a reference/benchmark set")
    record: bool = Field(True, description="record the result in the file's data manifest in state")


class HistogramOutput(ToolOutput):
    action: str
    path: str
    records: int
    feature_set: str
    unit: str
    features: dict[str, Any] = Field(description="per feature: kind, counts per bin, records counted, mean")
    comparison: dict[str, Any] | None = Field(None, description="compare: per feature gaps (pp), tv, passed; quotas; "
                                                                "skipped: features not compared, with the reason")
    passed: bool | None = None
    unclassified_tools: list[str] = Field(default_factory=list, description="tools counted as reads for want of a "
                                                                            "verb; pass tool_kinds to classify them")
    saved: str | None = None
    manifest: str | None = None
    plots: list[str] = Field(default_factory=list)

    def summary(self) -> str:
        lines = [f"{self.path}: {self.records} records, {self.feature_set} features, lengths in {self.unit}"]
        comp = self.comparison
        for name, f in self.features.items():
            total = sum(f["counts"].values()) or 1
            mean = f" (mean {f['mean']})" if f.get("mean") is not None else ""
            if comp and name in comp["features"]:
                c = comp["features"][name]
                mark = "ok  " if c["passed"] else "FAIL"
                extra = f" mean {c['mean']['candidate']} vs {c['mean']['target']}" if "mean" in c else ""
                lines.append(f"{mark} {name}: tv {c['tv']:.3f}, max gap {c['max_gap_pp']:.1f} pp{extra}")
                lines += [f"       {b['bin']:<14} {b['candidate_pct']:6.1f}% vs {b['target_pct']:6.1f}%  "
                          f"({b['gap_pp']:+.1f} pp)" for b in c["bins"]]
            else:
                bins = ", ".join(f"{b} {100 * c / total:.0f}%" for b, c in list(f["counts"].items())[:8])
                lines.append(f"{'skip ' if comp else ''}{name}{mean}: {bins or 'no value in any record'}")
        if comp:
            lines.append(("PASSED" if comp["passed"] else "FAILED") + f" at {comp['tolerance_pp']} pp"
                         + (f" (failing: {', '.join(comp['failed'])})" if comp["failed"] else ""))
            if comp["skipped"]:
                lines.append("skipped (not compared, no quotas):")
                lines += [f"  {x['feature']}: {x['reason']}" for x in comp["skipped"]]
            if comp["quotas"]:
                lines.append(f"quotas to reach N={comp['size']} (scarcest first):")
                lines += [f"  add {q['need']:>6} with {q['feature']} = {q['bin']} (have {q['have']}, target "
                          f"{q['target_pct']}%)" for q in comp["quotas"][:15]]
        if self.unclassified_tools:
            lines.append(f"unclassified tools (counted as reads): {', '.join(self.unclassified_tools[:10])}")
        lines += [f"saved: {self.saved}"] * bool(self.saved) + [f"plots: {', '.join(self.plots)}"] * bool(self.plots)
        return "\n".join(lines)


def _extractor_factory(inp: HistogramInput, ctx: Context):
    kinds = features.check_tool_kinds(inp.tool_kinds)
    custom = [features.load_function(spec, ctx.workdir) for spec in inp.custom]
    length = features.token_length(ctx.path(inp.tokenizer, must_exist=True, what="tokenizer")) if inp.tokenizer else None
    unit = "tokens" if inp.tokenizer else "chars"

    def make(feature_set: str) -> features.Extractor:
        return features.Extractor(feature_set, length=length, unit=unit, tool_kinds=kinds, custom=custom)

    return make


@tool("histogram", title="Structural histogram and target comparison", idempotent=True)
def histogram(inp: HistogramInput, ctx: Context) -> HistogramOutput:
    """Structural histogram of a task or SFT-sample set, optionally compared with a target (the
    benchmark's items, or a histogram saved earlier with --save). Feature sets: chat/QA (turns, system
    prompt, prompt and answer length buckets in characters or tokens of --tokenizer, answer format, sub-type
    mix) and tool-use (tool calls, distinct tools, writes per task with read/write from --tool-kinds or the
    verbs in the tool name, share with >= 2 writes, share returning information, tool mix, sub-type mix),
    plus --custom python:module:function features. The sub-type is the records' own label (`subtype`, or a
    sample's `meta.subtype`). Compare covers only the features both sides carry and measure alike (a task's
    answer is its gold answer, a sample's the whole response); the rest are listed as skipped, with the
    reason, and get no quotas. Per compared feature: gaps per bin in percentage points, the total-variation
    distance, pass/fail (a feature fails when any bin's |gap| exceeds the tolerance, default from the rules
    profile), numeric means, and quotas: how many samples of each bin to add to reach the target's
    distribution at final size N, scarcest first. Records the result in the file's data manifest in state.
    Match the benchmark's structure down to sub-types before training."""
    path = ctx.path(inp.path, must_exist=True, what="data file")
    make = _extractor_factory(inp, ctx)
    target = None
    feature_set = inp.feature_set
    if inp.action == "compare":
        if not inp.target:
            raise ACIError("histogram compare needs --target (a records file or a saved histogram JSON)")
        tpath = ctx.path(inp.target, must_exist=True, what="target")
        target = build.read_saved(tpath)
        if target is None:
            target = build.histogram_of(build.records(tpath), feature_set, make, source=str(tpath))
        if feature_set not in ("auto", target["feature_set"]):
            raise ACIError(f"the target uses the {target['feature_set']} feature set, not {feature_set}")
        feature_set = target["feature_set"]
        target = build.restrict(target, inp.features)
    hist = build.restrict(build.histogram_of(build.records(path), feature_set, make, source=str(path)), inp.features)
    tolerance = inp.tolerance_pp or ctx.rules.profile.histogram_tolerance_pp
    comparison = compare.compare(target, hist, tolerance, inp.size) if target else None
    unclassified = sorted(set(hist["unclassified_tools"]) | set((target or {}).get("unclassified_tools", [])))

    saved = None
    if inp.save:
        out = ctx.path(inp.save, what="save path", kind="file")
        build.save(hist, out)
        saved = str(out)
    plots = []
    if inp.plot_dir:
        folder = ctx.path(inp.plot_dir, what="plot folder", kind="folder")
        for name, entry in hist["features"].items():
            tentry = target["features"].get(name) if target else None
            plots.append(str(compare.plot(name, tentry, entry, folder / f"{name}.png")))

    mpath = build.record(ctx.state, path, hist, comparison, target=inp.target, tolerance=tolerance,
                         role=inp.role) if inp.record else None
    return HistogramOutput(action=inp.action, path=str(path), records=hist["records"],
                           feature_set=hist["feature_set"], unit=hist["unit"], features=hist["features"],
                           comparison=comparison, passed=comparison["passed"] if comparison else None,
                           unclassified_tools=unclassified, saved=saved, manifest=mpath, plots=plots)

