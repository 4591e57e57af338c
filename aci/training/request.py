"""What a caller asks of a training run: every choice, with its default, bounds and description, once.

The `train` tool's input is `ToolInput` plus this model (its MCP and CLI options are these fields);
`aci.training.prepare.job_config` turns a checked request into the job's `TrainConfig`. The settings the
job uses as given come from `config.Schedule`; the LoRA and GRPO ones are flat here (`--lora-r`,
`--num-generations`) and nested in the config, and so are the launch settings for several machines
(`config.Machines`). No heavy import: the tool imports this module.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from aci.sampling import MaxNewTokens, Temperature
from aci.training.config import Machines, Schedule

LORA_TARGETS = "all-linear"  # what PEFT adapts when no module names are given
# Common starting points: LoRA tolerates ~10x the full fine-tuning rate; RL wants far smaller steps.
LEARNING_RATES = {("sft", False): 2e-5, ("sft", True): 2e-4, ("grpo", False): 1e-6, ("grpo", True): 1e-5}


def default_learning_rate(method: str, lora: bool) -> float:
    return LEARNING_RATES[(method, lora)]


def _e(x: float) -> str:
    return f"{x:.0e}".replace("e-0", "e-")  # 2e-5, as the Markdown writes it


class TrainRequest(Schedule, Machines):
    method: Literal["sft", "grpo"] = Field("sft", description="sft: samples with assistant turns; grpo: task "
                                                              "records rewarded by their grader")
    data: str | None = Field(None, description="JSONL/JSON file: SFT samples (messages, prompt/completion, "
                                               "question/answer) or, for grpo, task records")
    sources: list[str] = Field(default_factory=list, description="where the data came from (hub ids or URLs), "
                                                                "checked against the banned datasets")
    model: str = Field("base", description="checkpoint to train from: 'base' or a registered id "
                                           "'<job>/checkpoint-<step>' (or a path to either)")
    template: str | None = Field(None, description="chat template .jinja (default: the run card's; else the "
                                                   "tokenizer's own)")
    template_kwargs: dict[str, Any] | None = Field(None, description='extra template variables, e.g. '
                                                                     '{"enable_thinking": false}')
    lora: bool = Field(False, description="train a LoRA adapter instead of all weights")
    lora_r: int = Field(16, ge=1, le=1024, description="LoRA rank: the width of each adapter's update")
    lora_alpha: int = Field(32, ge=1, description="LoRA scale: the update is multiplied by alpha / r")
    lora_dropout: float = Field(0.05, ge=0, lt=1, description="dropout on the adapters' input while training")
    lora_targets: list[str] | None = Field(None, description=f'modules to adapt (default "{LORA_TARGETS}")')
    merge_lora: bool = Field(False, description="also save each LoRA checkpoint merged (<checkpoint>/merged/)")
    learning_rate: float | None = Field(None, gt=0, description=(
        f"default {_e(LEARNING_RATES['sft', False])} full / {_e(LEARNING_RATES['sft', True])} LoRA; "
        f"grpo {_e(LEARNING_RATES['grpo', False])} / {_e(LEARNING_RATES['grpo', True])}"))
    num_generations: int = Field(8, ge=2, description="grpo: completions per prompt")
    max_completion_length: MaxNewTokens = Field(512, description="grpo: new tokens per completion")
    temperature: Temperature = Field(1.0, gt=0, description="grpo: sampling temperature (above 0: a group of "
                                                            "identical greedy completions has no advantage to learn)")
    beta: float = Field(0.0, ge=0, description="grpo: KL coefficient")
    use_vllm: bool | None = Field(None, description="grpo: generate with vLLM (default: when vllm is installed "
                                                    "and CUDA present)")
    grader: str | None = Field(None, description="grpo rewards and the dev set: grader for tasks that name none "
                                                 "(e.g. final-answer; the dev set's default: the run card's)")
    unsafe_grader: bool = Field(False, description="grpo: let unit-tests rewards run completions as root where no "
                                                   "sandbox can drop root (rule sandbox; journaled as a weakening)")
    dev_set: str | None = Field(None, description=(
        "JSONL of held-out task records drawn from the training source, never test items: every --dev-every steps "
        "and at the end the job generates a greedy reply to each and grades it; the best point is saved and "
        "registered as a checkpoint (the best by dev), and `train status` shows the curve"))
    dev_every: int = Field(100, ge=1, description="--dev-set: score it every N steps")
    dev_items: int = Field(64, ge=1, le=2000, description="--dev-set: tasks scored at each point (the file's first N)")
    dev_max_new_tokens: MaxNewTokens = Field(256, le=8192, description="--dev-set: new tokens per reply (set the "
                                                                       "evaluation's limit)")
    deepspeed: str | None = Field(None, description="zero2, zero3 (shipped configs) or a DeepSpeed JSON file")
    processes: int = Field(1, ge=1, description=(
        "training processes, each with its share of every batch: one per GPU (on CPU, several share the cores); "
        "> 1 launches `accelerate launch --multi_gpu --num_processes N` (the total over all machines)"))
    tokens_per_s: float | None = Field(None, gt=0, description="declared throughput for the deadline check "
                                                               "(default: measured by earlier jobs)")
    measure_steps: int = Field(0, ge=0, le=100, description="dry-run: run this many steps as a job to measure "
                                                            "throughput (recorded for later estimates)")
    lr_probe: bool = Field(False, description="dry-run: train lr_probe_steps steps at each of 5 learning rates "
                                              "(0.1x to 10x the run's) from the same start on the same batches; "
                                              "report each rate's held-out loss drop and the rate it suggests (sft)")
    lr_probe_steps: int = Field(10, ge=1, le=200, description="dry-run --lr-probe: steps per rate")
    check_samples: int = Field(64, ge=1, le=5000, description="samples rendered and tokenized by the checks")
    find_batch: bool = Field(True, description="run the largest micro-batch that fits, as measured by `dry-run "
                                               "--measure-steps` (batch_size x grad_accum per step stays)")

    @property
    def rate(self) -> float:
        """The learning rate the job uses: the one given, else the default for the method."""
        return self.learning_rate or default_learning_rate(self.method, self.lora)
