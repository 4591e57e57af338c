"""Rules as data: `rules/rules.yaml`, validated against `rules/rules.schema.json` at load.

The pydantic models below are the one definition of the file's shape; the JSON schema is generated
from them (`python -m aci.rules --schema`) and a test keeps the committed copy in sync. Loading goes
through `jsonschema` first so that a broken file is reported with the path of the offending field.
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
from functools import cache
from pathlib import Path
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from aci import bundle
from aci.errors import ACIError

# The rules profiles, named once: the run card, `plan --profile` and this module take these names, and a
# test holds `rules/rules.yaml` to defining exactly them.
ProfileName = Literal["posttrainbench", "default"]
PROFILES: tuple[str, ...] = get_args(ProfileName)
RULES_ENV = "ACI_RULES"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Rule(_Strict):
    id: str = Field(pattern=r"^[a-z0-9-]+$")
    title: str
    text: str
    enforced_by: list[str] = Field(min_length=1)
    protects: list[str] = Field(default_factory=list, description="files and folders of the working directory "
                                                                  "the rule keeps unchanged (hashed at plan init)")


class MinSamples(_Strict):
    absolute: int = Field(ge=1)
    fraction: float = Field(ge=0, le=1)


class ContaminationRules(_Strict):
    threshold: float = Field(gt=0, le=1)
    tolerated_rows: int = Field(ge=0)
    required_before_training: bool


class Guide(_Strict):
    """What to do next and which rules matter, at one point of a run."""

    next: list[str] = Field(min_length=1, description="next actions, imperative, with the aci commands")
    rules: list[str] = Field(min_length=1, description="ids of the rules that apply")


class PhaseGuide(Guide):
    after_all_gates: bool = Field(False, description="this guidance also applies before the final reserve once "
                                                     "every gate but the reserve phase's has passed (keep improving)")


class Phase(_Strict):
    name: str = Field(description="a phase defined under the top-level `phases`")
    share: float | None = Field(None, gt=0, le=1, description="relative share of the time before the final "
                                                              "reserve; none for the reserve's phase, whose time "
                                                              "is the reserve")
    gate: str


class BenchmarkSeeds(_Strict):
    """One benchmark's seed counts in a profile's final evaluation, where they differ from its default."""

    match: str = Field(description="regular expression matched against the run card's benchmark name")
    seeds: int | None = Field(None, ge=1, description="seeds for a sampled model (default: final_eval.seeds)")
    greedy_seeds: int | None = Field(None, ge=1, description="seeds for a greedy model (default: as sampled)")
    why: str = Field("", description="the reason, in words, when the count does not follow from the decoding")


class FinalEval(_Strict):
    """How the final evaluation scores final_model under this profile: it runs the benchmark once per seed
    and takes the mean, so a sampled model is judged by its mean and a greedy one, where a benchmark
    allows it, by one run. Set by the profile's authors from the task's harness; `finalize` states it."""

    seeds: int = Field(ge=1, description="seeds the final evaluation runs, and averages, for a sampled model")
    greedy_below: float = Field(gt=0, description="a generation_config.json temperature below this decodes "
                                                  "greedily (vLLM's sampling epsilon)")
    default_temperature: float = Field(gt=0, description="the temperature vLLM samples at when "
                                                         "generation_config.json sets none")
    benchmarks: list[BenchmarkSeeds] = Field(default_factory=list)

    def for_benchmark(self, name: str) -> tuple[int, int, str, bool]:
        """(seeds when sampled, seeds when greedy, why, whether the benchmark is listed) for `name`."""
        for b in self.benchmarks:
            if re.search(b.match, name):
                sampled = b.seeds or self.seeds
                return sampled, b.greedy_seeds or sampled, b.why, True
        return self.seeds, self.seeds, "", False


class Transfer(_Strict):
    """How large each of final_model's files may be: a harness copies the folder out file by file, and a
    copy can fail on one large file (transfers of a file over 5 GiB have failed)."""

    shard_bytes: int = Field(ge=1, description="promotion writes the weights in safetensors files of at most "
                                               "this many bytes of tensors (a single larger tensor is a file "
                                               "of its own)")
    max_file_bytes: int = Field(ge=1, description="finalize fails a final_model holding a file over this many "
                                                  "bytes")


class Profile(_Strict):
    description: str
    strict: bool = Field(description="the integrity profile: stricter checks where a tool offers a choice")
    final_reserve_min: float = Field(ge=0, description="time kept for promotion, finalize and checks; the phase "
                                                       "without a share gets it")
    final_reserve_share: float = Field(gt=0, le=1, description="a shorter run keeps this share of its budget "
                                                               "instead, when that is less than final_reserve_min")
    budget_hours: float = Field(gt=0)
    stretch_margin: float = Field(gt=0, le=1, description="once every target is met, the goal is the best score "
                                                          "plus this (scores on a 0-1 scale)")
    min_eval_samples: MinSamples
    histogram_tolerance_pp: float = Field(gt=0, le=100)
    contamination: ContaminationRules
    rollout_hosts: list[str] = Field(description='hosts rollouts may reach; ["*"] allows any')
    teacher: Literal["base-only", "any"]
    judge_hosts: list[str] = Field(description='hosts an LLM judge may reach; ["*"] allows any')
    forbidden_datasets: list[str]
    forbidden_patterns: list[str]
    phases: list[Phase] = Field(min_length=1)
    final_eval: FinalEval | None = Field(None, description="how the final evaluation scores final_model; none "
                                                           "when the profile does not know it")
    transfer: Transfer

    def reserve_min(self, budget_min: float | None = None) -> float:
        """The final reserve of a run of `budget_min` minutes (default: the profile's budget): the smaller of
        `final_reserve_min` and `final_reserve_share` of the budget, so that a 40-minute run keeps 6 minutes,
        not 45 (more than it has). The one place it is computed: the clock, the phase plan and the summary
        all ask here."""
        budget = self.budget_hours * 60 if budget_min is None else budget_min
        return min(self.final_reserve_min, self.final_reserve_share * budget)

    def allocation(self, budget_min: float) -> list[tuple[Phase, float]]:
        """Minutes per phase: the reserve phase gets the reserve, the others split the rest by their shares."""
        reserve = self.reserve_min(budget_min)
        work = max(budget_min - reserve, 0.0)
        total = sum(p.share or 0 for p in self.phases)
        return [(p, reserve if p.share is None else work * p.share / total) for p in self.phases]

    def weakened_in(self, other: Profile) -> list[str]:
        """What `other` allows that this profile does not, in words: a run switching from this profile to
        `other` mid-way weakens its rules by these (journaled by plan, shown by status)."""
        out = []
        if self.strict and not other.strict:
            out.append("strict checks off")
        c, d = self.contamination, other.contamination
        if c.required_before_training and not d.required_before_training:
            out.append("training no longer needs a passing contamination check")
        if d.threshold > c.threshold or d.tolerated_rows > c.tolerated_rows:
            out.append(f"contamination tolerance looser (threshold {c.threshold:g} -> {d.threshold:g}, rows "
                       f"{c.tolerated_rows} -> {d.tolerated_rows})")
        if self.teacher == "base-only" and other.teacher != "base-only":
            out.append("any teacher model allowed (was the base model only)")
        for what, mine, theirs in (("rollout", self.rollout_hosts, other.rollout_hosts),
                                   ("judge", self.judge_hosts, other.judge_hosts)):
            if "*" not in mine and ("*" in theirs or set(theirs) - set(mine)):
                out.append(f"{what} endpoints beyond {', '.join(mine)} allowed")
        dropped = set(self.forbidden_datasets) - set(other.forbidden_datasets)
        if dropped or set(self.forbidden_patterns) - set(other.forbidden_patterns):
            out.append(f"{len(dropped)} banned datasets and their name patterns no longer refused")
        if other.final_reserve_min < self.final_reserve_min:
            out.append(f"final reserve {self.final_reserve_min:g} -> {other.final_reserve_min:g} min")
        a, b = self.min_eval_samples, other.min_eval_samples
        if b.absolute < a.absolute or b.fraction < a.fraction:
            out.append("fewer evaluation samples needed for a comparison")
        return out

    @property
    def reserve_phase(self) -> Phase:
        return next(p for p in self.phases if p.share is None)


class RulesFile(_Strict):
    version: Literal[1]
    rules: list[Rule] = Field(min_length=1)
    before_run_card: Guide
    top_of_scale: Guide = Field(description="next actions once the best model scores the top of the scale and "
                                            "that is confirmed: no failures are left to read")
    phases: dict[str, PhaseGuide] = Field(min_length=1, description="what each phase name means, shared by the "
                                                                    "profiles")
    profiles: dict[str, Profile]


class Rules:
    """The rules in force for one profile, with the checks tools call."""

    def __init__(self, data: RulesFile, profile: str):
        if profile not in data.profiles:
            raise ACIError(f"unknown rules profile {profile!r}; known: {', '.join(sorted(data.profiles))}")
        self.file = data
        self.name = profile
        self.profile = data.profiles[profile]
        self.by_id = {r.id: r for r in data.rules}

    def rule(self, rule_id: str) -> Rule:
        return self.by_id[rule_id]

    def refuse(self, rule_id: str, detail: str) -> ACIError:
        """An error naming the rule, its text, and what was wrong."""
        r = self.by_id[rule_id]
        return ACIError(f"{detail}. {r.title}: {r.text}", rule=rule_id)

    @property
    def strict(self) -> bool:
        return self.profile.strict

    def guide(self, phase: str | None, *, has_card: bool, in_reserve: bool) -> Guide:
        """Next actions and rules for the current phase: before a run card, `before_run_card`; in the final
        reserve, the reserve phase's; once only the reserve phase's gate is left, or none, the guidance
        marked `after_all_gates`."""
        if not has_card:
            return self.file.before_run_card
        reserve = self.profile.reserve_phase.name
        if in_reserve:
            phase = reserve
        elif phase in (None, reserve):
            phase = next(name for name, g in self.file.phases.items() if g.after_all_gates)
        return self.file.phases[phase]

    def protected(self) -> list[str]:
        """What the `no-eval-edits` rule keeps unchanged (hashed at plan init, checked by finalize)."""
        return self.rule("no-eval-edits").protects

    def min_samples(self, benchmark_size: int | None) -> int:
        """max(absolute, fraction x size), capped at the size: a 30-item benchmark needs all 30, not 32."""
        m = self.profile.min_eval_samples
        n = max(m.absolute, math.ceil(m.fraction * benchmark_size) if benchmark_size else 0)
        return min(n, benchmark_size) if benchmark_size else n

    def check_dataset_name(self, name: str) -> None:
        """Refuse a dataset id that the profile lists as the benchmark's test data (or derived from it)."""
        low = name.lower()
        for banned in self.profile.forbidden_datasets:
            if banned.lower() in low:
                raise self.refuse("forbidden-datasets", f"dataset {name!r} matches the banned dataset {banned!r}")
        for pattern in self.profile.forbidden_patterns:
            if re.search(pattern, name):
                raise self.refuse("forbidden-datasets", f"dataset {name!r} matches the banned pattern {pattern!r}")

    def check_host(self, host: str, *, judge: bool = False) -> None:
        """Refuse an endpoint host the profile does not allow (loopback only under posttrainbench)."""
        allowed = self.profile.judge_hosts if judge else self.profile.rollout_hosts
        if "*" in allowed or host in allowed or is_loopback(host) and any(is_loopback(a) for a in allowed):
            return
        raise self.refuse("no-hosted-llm", f"endpoint host {host!r} is not allowed (allowed: {', '.join(allowed)})")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def rules_path() -> Path:
    import os

    return Path(os.environ.get(RULES_ENV) or bundle.path("rules", "rules.yaml"))


def schema_path() -> Path:
    return bundle.path("rules", "rules.schema.json")


def json_schema() -> dict:
    schema = RulesFile.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "aci rules file"
    return schema


@cache
def load_file(path: Path | None = None) -> RulesFile:
    import jsonschema
    import yaml

    path = path or rules_path()
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ACIError(f"rules file not found: {path}") from None
    except yaml.YAMLError as e:
        raise ACIError(f"rules file {path} is not valid YAML: {e}") from None
    schema = json.loads(schema_path().read_text())
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(raw), key=lambda e: list(e.path))
    if errors:
        e = errors[0]
        field = ".".join(str(p) for p in e.path) or "(top level)"
        raise ACIError(f"rules file {path}: field {field}: {e.message}")
    data = RulesFile.model_validate(raw)
    _check_references(data, path)
    return data


def _check_references(data: RulesFile, path: Path) -> None:
    """What the schema cannot say: names that refer to each other, and one reserve phase per profile."""
    ids = {r.id for r in data.rules}

    def fail(field: str, message: str) -> ACIError:
        return ACIError(f"rules file {path}: field {field}: {message}")

    for field, guide in [("before_run_card", data.before_run_card), ("top_of_scale", data.top_of_scale),
                         *((f"phases.{n}", g) for n, g in data.phases.items())]:
        unknown = [r for r in guide.rules if r not in ids]
        if unknown:
            raise fail(f"{field}.rules", f"unknown rule {unknown[0]!r}")
    if sum(g.after_all_gates for g in data.phases.values()) != 1:
        raise fail("phases", "exactly one phase must have after_all_gates: true")
    if "no-eval-edits" not in ids:
        raise fail("rules", "the rule no-eval-edits (what it protects) is missing")
    for name, prof in data.profiles.items():
        field = f"profiles.{name}.phases"
        for p in prof.phases:
            if p.name not in data.phases:
                raise fail(field, f"phase {p.name!r} is not defined under phases")
        if sum(p.share is None for p in prof.phases) != 1:
            raise fail(field, "exactly one phase, the final reserve's, must have no share")
        if prof.transfer.shard_bytes > prof.transfer.max_file_bytes:
            raise fail(f"profiles.{name}.transfer", "shard_bytes is over max_file_bytes: promotion would write "
                                                    "files that finalize fails")


def load(profile: str = "default", path: Path | None = None) -> Rules:
    return Rules(load_file(path or rules_path()), profile)  # cached per file, so ACI_RULES is read every time


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--schema"]:
        print(json.dumps(json_schema(), indent=2))
