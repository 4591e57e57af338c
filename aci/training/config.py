"""The resolved configuration of one training job: every setting the job uses, written once to
`jobs/<id>/config.json` by the `train` tool and read by the job, so a run can be repeated and audited
from state alone (with the data's hash and the template it was rendered with).

Each default lives once: `Schedule` here for the settings the job uses as given, `aci.training.request`
for the rest of what a caller chooses; `aci.training.prepare.job_config` resolves a request into this
config. No heavy import: the tool imports this module.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from aci.errors import ACIError

ZERO_CONFIGS = {"zero2": "zero2.json", "zero3": "zero3.json"}
# "wsd" is aci's (aci.training.schedule); the others are transformers scheduler names, passed as they are.
Schedules = Literal["wsd", "cosine", "linear", "constant", "constant_with_warmup"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Schedule(_Strict):
    """Settings the caller chooses and the job uses as given: the one definition of their defaults and
    bounds, shared by the request (`aci.training.request.TrainRequest`) and the job's config."""

    max_length: int = Field(2048, ge=8, description="tokens per sequence (longer samples are truncated); "
                                                    "grpo: prompt limit")
    packing: bool | None = Field(None, description="pack samples into rows of max_length, each attending only to "
                                                   "itself (default: on with CUDA where the model supports it)")
    epochs: float = Field(1.0, gt=0, description="passes over the data (max_steps overrides)")
    max_steps: int | None = Field(None, ge=1, description="optimizer steps (overrides epochs)")
    lr_schedule: Schedules | None = Field(None, description=(
        "wsd: warmup, stable, then a decay timed to end by the job's stop time at its measured step rate (the "
        "default when the run has a deadline); cosine (the default without one), linear, constant, "
        "constant_with_warmup: transformers' schedules over a fixed number of steps"))
    warmup_ratio: float = Field(0.03, ge=0, lt=1, description="share of the planned steps over which the learning "
                                                              "rate rises from 0 to its peak")
    batch_size: int = Field(4, ge=1, description="per device (grpo: completions per device)")
    grad_accum: int = Field(4, ge=1, description="micro-batches accumulated into one optimizer step (batch per "
                                                 "step: batch_size x grad_accum x processes)")
    gradient_checkpointing: bool | None = Field(None, description="default: on with CUDA")
    save_steps: int = Field(200, ge=1, description="save and register a checkpoint every N steps (and at the end)")
    keep_checkpoints: int = Field(3, ge=0, description="checkpoints of the job kept on disk: older ones are deleted "
                                                       "as new ones are saved, except a promoted one (0 = keep all)")
    logging_steps: int = Field(10, ge=1, description="log loss, learning rate and throughput every N steps")
    seed: int = Field(0, description="seed of the data order, of new weights (LoRA) and of sampling (grpo)")


class Machines(_Strict):
    """accelerate's settings for a job whose ranks span several machines (`train start` runs on each, the
    same but for `machine_rank`), or its config file: passed to `accelerate launch` as they are
    (`aci.training.launch.command`), so a job runs where a cluster's own launcher (SLURM, a cloud's job
    runner) gives each machine its number and the main one's address."""

    num_machines: int = Field(1, ge=1, description="several machines: how many take part (accelerate's "
                                                   "--num_machines)")
    machine_rank: int = Field(0, ge=0, description="several machines: this one's number, 0 for the main one "
                                                   "(accelerate's --machine_rank)")
    main_process_ip: str | None = Field(None, description="several machines: the main one's address "
                                                          "(accelerate's --main_process_ip)")
    main_process_port: int | None = Field(None, ge=1, le=65535, description="several machines: the main one's "
                                                                           "port (accelerate's --main_process_port)")
    accelerate_config: str | None = Field(None, description="an `accelerate config` file, passed as --config_file: "
                                                            "its settings launch the job; --processes defaults to its "
                                                            "num_processes")


class LoraSettings(_Strict):
    """Resolved from the request's `lora_*` fields, where their defaults live."""

    r: int
    alpha: int
    dropout: float
    target_modules: list[str] | str = Field(description='module names, or "all-linear"')


class GrpoSettings(_Strict):
    """Resolved from the request's GRPO fields, where their defaults live."""

    num_generations: int = Field(description="completions per prompt (the group)")
    max_completion_length: int
    temperature: float
    beta: float = Field(description="KL coefficient (0: no reference model)")
    use_vllm: bool
    grader: str | dict | None = Field(None, description="reward grader; default each task's own `grader`")
    unsafe_grader: bool = Field(False, description="unit-tests rewards may run completions as root (--unsafe-grader)")


class DevSettings(_Strict):
    """Resolved from the request's `dev_*` fields (`aci.training.dev.settings`), where their defaults live."""

    path: str
    every: int
    items: int = Field(description="tasks scored at each point (the file's first N)")
    max_new_tokens: int
    grader: str | dict | None = Field(None, description="grader for tasks that name none")
    metric: Literal["accuracy", "loss"] = Field(description="accuracy: graded replies; loss: no grader can score "
                                                            "the tasks, so the loss of their gold answers")
    source: str = Field(description="what scores the tasks, in words")


class TrainConfig(Schedule):
    method: Literal["sft", "grpo"]
    job: str
    state: str
    workdir: str
    output_dir: str = Field(description="<workdir>/checkpoints/<job id>")
    model_path: str = Field(description="what from_pretrained loads: a folder or a hub id")
    model_adapter: bool = Field(False, description="model_path is a LoRA adapter: merged into its base first")
    parent: str = Field(description="checkpoint id this job trains from ('base' or '<job>/checkpoint-N')")
    data: str
    data_sha256: str
    data_rows: int = 0
    template: str | None = Field(None, description=".jinja the evaluation renders; None: the tokenizer's own")
    template_sha256: str | None = None
    template_kwargs: dict[str, Any] = Field(default_factory=dict)
    profile: str = "default"
    lr_schedule: Schedules = Field("cosine", description="resolved: wsd with a stop time, else cosine, unless chosen")
    lora: LoraSettings | None = None
    merge_lora: bool = False
    learning_rate: float = Field(gt=0)
    deepspeed: str | None = Field(None, description="DeepSpeed config file passed as TrainingArguments.deepspeed")
    num_processes: int = Field(1, ge=1, description="ranks over all machines; > 1 (or `machines` given): launched "
                                                    "with `accelerate launch`")
    machines: Machines | None = Field(None, description="accelerate's multi-machine settings or config file")
    grpo: GrpoSettings | None = None
    dev: DevSettings | None = Field(None, description="the dev curve (aci.training.dev), None without --dev-set")
    stop_at: str | None = Field(None, description="ISO time the job saves and stops at (deadline minus reserve)")
    measure: bool = Field(False, description="a throughput measurement: no checkpoints are saved")
    find_batch: bool = Field(False, description="measurement: first find the largest micro-batch that fits "
                                                "(aci.training.batch), keeping batch_size x grad_accum")
    lr_probe: list[float] | None = Field(None, description="measurement: probe these learning rates for max_steps "
                                                           "each from the same start (aci.training.probe)")
    estimate: dict[str, Any] | None = Field(None, description="the start gate's estimate (seconds per step and its "
                                                              "source): the job plans with it until it has measured "
                                                              "its own steps")

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.model_dump(mode="json"), indent=2) + "\n")


def load(path: str | Path) -> TrainConfig:
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ACIError(f"cannot read training config {path}: {e}") from None
    return TrainConfig.model_validate(raw)


def zero_config(name: str) -> Path:
    """The shipped DeepSpeed ZeRO config for `zero2`/`zero3`."""
    return Path(__file__).resolve().parent / ZERO_CONFIGS[name]
