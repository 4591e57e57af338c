"""The records kept in the state folder, defined once.

`state/schemas/*.schema.json` are generated from these models and the task schemas of `aci.tasks`
(`python -m aci.records`, the one writer of that folder), and a test keeps them in sync, so a person
or another program can validate the files without reading Python.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PlainSerializer

from aci.rules import ProfileName
from aci.state import iso

RUN_CARD = "run.json"
BEST = "best.json"
CHECKPOINTS = "checkpoints.jsonl"
JOBS = "jobs"
DATA = "data"


# Every time in state is written one way, `state.iso` (seconds, with the offset): the finalized gate and
# the report compare and parse these strings, so a record dumped to JSON must not use pydantic's own form.
# A time without an offset is read as UTC, as `state.parse_ts` reads it.
Timestamp = Annotated[datetime, AfterValidator(lambda t: t if t.tzinfo else t.replace(tzinfo=timezone.utc)),
                      PlainSerializer(iso, return_type=str, when_used="json")]


class Record(BaseModel):
    model_config = ConfigDict(extra="allow")


class Target(Record):
    metric: str = Field(description="metric name, e.g. the eval command's metric key")
    value: float = Field(description="stop iterating once the promoted model reaches this score")


class EvalOptions(Record):
    """Which option of the eval command as typed takes each value (`aci.evaluation.options`), and how each
    was found, so a wrong placement can be seen and corrected (`plan update --limit-option ...`)."""

    typed: str = Field(description="the eval command as the user typed it")
    help: str | None = Field(None, description="the --help command that was read, when one was")
    help_problem: str | None = Field(None, description="why nothing could be read from it")
    model_path: str | None = Field(None, description="option (or '(argument)') that takes the model folder")
    limit: str | None = Field(None, description="option that takes the sample count")
    limit_all: str | None = Field(None, description="value of the limit option that means every item")
    output: str | None = Field(None, description="option that takes the metrics JSON file")
    seed: str | None = Field(None, description="option that takes the seed")
    placed_by: dict[str, str] = Field(default_factory=dict, description="role -> how it was placed")


class RunCard(Record):
    """`run.json`: what is being post-trained, against what, until when."""

    profile: ProfileName = "default"
    base_model: str = Field(description="path or hub id of the one model that may be trained")
    benchmark: str
    eval_command: str | None = Field(None, description="with {model_path}, {limit}, {output} placeholders")
    eval_options: EvalOptions | None = Field(None, description="the eval command's options, as plan init placed them")
    metric_key: str | None = Field(None, description="key of the score in the eval command's JSON (dotted for "
                                   "nested objects)")
    count_key: str | None = Field(None, description="key of the number of items scored in the eval command's JSON")
    template: str | None = Field(None, description="chat template (.jinja) the evaluation renders")
    grader: str | None = Field(None, description="grader spec (a name, python:mod:fn or JSON) for tasks that name "
                                                 "none: what the evaluation scores with")
    benchmark_size: int | None = Field(None, ge=1, description="items in the full benchmark")
    budget_hours: float = Field(gt=0)
    started_at: Timestamp
    deadline: Timestamp | None = Field(None, description="fixed deadline; else from timer.sh or the budget")
    workdir: str
    targets: list[Target] = Field(default_factory=list)
    protected: dict[str, str] = Field(
        default_factory=dict, description="sha256 of evaluation files (evaluate.py, templates/) at init"
    )
    reference: dict[str, str] | None = Field(
        None, description="the benchmark's test items contamination checks count against: {path, sha256}, "
                          "pinned at init or at the first check"
    )
    notes: str = ""


# The kinds of event an agent journals with `log-state` (the tools journal their own: plan, train, eval, ...).
# `aci.goal.BENCHMARK_CARD` is one of them: the card that closes recon.
AgentKind = Literal["decision", "observation", "result", "benchmark-card", "note"]


class JournalEvent(Record):
    """One line of `journal.jsonl`; each is one git commit in the state folder."""

    id: str
    ts: Timestamp
    kind: str = Field(description="decision, observation, result, plan, data, train, eval, promote, ...")
    tool: str | None
    message: str
    data: dict[str, Any] = Field(default_factory=dict)


class CheckpointEntry(Record):
    """One line of `checkpoints.jsonl`: a checkpoint registered, or an evaluation of one."""

    type: Literal["registered", "evaluated"]
    checkpoint: str = Field(description="checkpoint id: 'base' for the base model, else a job-derived id")
    ts: Timestamp
    path: str | None = None
    parent: str | None = Field(None, description="checkpoint id this one was trained from")
    job: str | None = None
    step: int | None = None
    adapter: bool = Field(False, description="a LoRA adapter (needs merging before it can be final_model)")
    content_hash: str | None = Field(None, description="registered: the folder's content hash at registration "
                                     "(aci.evaluation.identity); evaluation, training and promotion refuse it once "
                                     "it differs")
    files: dict[str, str] | None = Field(None, description="registered: each file's size and digest prefix, "
                                         "'<bytes>:<hex>', to name what changed")
    evaluator: str | None = None
    limit: int | None = None
    samples: int | None = None
    seeds: list[int] = Field(default_factory=list)
    scores: list[float] = Field(default_factory=list)
    score: float | None = None
    range: tuple[float, float] | None = None
    duration_s: float | None = None
    error: str | None = None
    eval_id: str | None = Field(None, description="evaluations: folder evals/<eval_id>/ in state (metrics, per-sample scores)")
    metric: str | None = Field(None, description="evaluations: the metric the score was read from")


class Best(Record):
    """`best.json`: the checkpoint currently in `final_model/` and the evaluation that put it there."""

    checkpoint: str
    path: str = Field(description="the final_model folder")
    source: str | None = Field(None, description="the checkpoint's own folder")
    score: float
    range: tuple[float, float] | None = None
    evaluator: str
    limit: int | None = None
    samples: int | None = None
    promoted_at: Timestamp
    promotion_id: str | None = Field(None, description="the id sealed in final_model/.aci-promotion.json")
    eval_id: str | None = Field(None, description="the evaluation that justified the promotion")


class JobRecord(Record):
    """`jobs/<id>/job.json`: a detached, supervised process."""

    id: str
    kind: str = Field(description="train, eval, rollout, serve, ...")
    command: list[str]
    pid: int | None = None
    started_at: Timestamp
    config: dict[str, Any] = Field(default_factory=dict)


class JobExit(Record):
    """`jobs/<id>/exit.json`: written once when the job's process ends."""

    returncode: int | None
    status: Literal["succeeded", "failed", "stopped"]
    ended_at: Timestamp
    reason: str | None = None
    cpu_s: float | None = Field(None, description="CPU seconds used by the job's processes (user + system)")
    max_rss_mb: float | None = Field(None, description="peak resident memory of the job's largest process")


SCHEMAS: dict[str, type[BaseModel]] = {
    "run": RunCard,
    "journal-event": JournalEvent,
    "checkpoint-entry": CheckpointEntry,
    "best": Best,
    "job": JobRecord,
    "job-exit": JobExit,
}


def write_schemas(folder: Path) -> list[Path]:
    """Write every `state/schemas/<name>.schema.json`: these records' and the task record and SFT sample
    schemas of `aci.tasks` (generated copies that tests keep in sync with the code)."""
    from aci.tasks import SCHEMAS as TASK_SCHEMAS

    schemas = {name: {"$schema": "https://json-schema.org/draft/2020-12/schema", **model.model_json_schema()}
               for name, model in SCHEMAS.items()}
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for name, schema in {**schemas, **TASK_SCHEMAS}.items():
        p = folder / f"{name}.schema.json"
        p.write_text(json.dumps(schema, indent=2) + "\n")
        out.append(p)
    return out


if __name__ == "__main__":
    for p in write_schemas(Path(__file__).resolve().parent.parent / "state" / "schemas"):
        print(p)
