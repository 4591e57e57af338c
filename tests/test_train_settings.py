"""Every training setting reaches what it sets: each field of the `train` request, set to a value other
than its default, is found in the TRL config (or PEFT's `LoraConfig`) the job builds from it, or is named
in `NOT_TRL` with the reason it maps to no TRL argument. A field added to the request and forgotten in
`aci/training/run.py` fails here instead of being accepted and silently ignored."""

from __future__ import annotations

import dataclasses

import pytest

from aci.training import config as config_mod
from aci.training import gates, hardware, prepare, run
from aci.training.request import TrainRequest
from tests.train_helpers import make_run

NOT_TRL = {
    "method": "chooses the trainer class (SFTTrainer or GRPOTrainer)",
    "data": "rendered and tokenized by aci (aci.training.data); TRL gets the dataset",
    "sources": "checked against the banned datasets before launch (aci.training.gates)",
    "model": "resolved to the folder the job loads; TRL gets the model",
    "template": "aci renders the data with it; checkpoints carry it as the tokenizer's chat template",
    "template_kwargs": "aci renders the data with them",
    "merge_lora": "aci saves each LoRA checkpoint merged as well (aci.training.callbacks)",
    "keep_checkpoints": "aci deletes old checkpoints itself, sparing a promoted one and one being evaluated",
    "grader": "the GRPO reward function aci builds (aci.training.rewards) and the dev curve's grader",
    "unsafe_grader": "the sandbox of that reward function's unit-tests grader (aci.graders.sandbox)",
    "processes": "the processes `accelerate launch` starts (aci.training.launch.command)",
    **{k: "passed to `accelerate launch` as given (aci.training.launch.launch_args)"
       for k in config_mod.Machines.model_fields},
    "tokens_per_s": "the start gate's estimate",
    "measure_steps": "a dry-run's measurement job",
    "check_samples": "the start gate's data check",
    "find_batch": "the micro-batch search of a measurement job (aci.training.batch)",
    "lr_probe": "a dry-run's probe job (aci.training.probe)",
    "lr_probe_steps": "a dry-run's probe job (aci.training.probe)",
    **{f"dev_{k}": "the dev curve aci scores between steps (aci.training.dev; tests/test_train_dev.py)"
       for k in ("set", "every", "items", "max_new_tokens")},
}

# Every other field, at a value other than its default.
SET = dict(max_length=96, packing=True, epochs=2.5, max_steps=7, lr_schedule="linear", warmup_ratio=0.125,
           batch_size=8, grad_accum=3, gradient_checkpointing=True, save_steps=5, logging_steps=2, seed=11, lora=True,
           lora_r=4, lora_alpha=8, lora_dropout=0.25, lora_targets=["q_proj", "v_proj"], learning_rate=3e-4,
           num_generations=4, max_completion_length=24, temperature=0.7, beta=0.04, use_vllm=True,
           deepspeed="zero2")


def _get(args, *names):
    """The first of `names` the TRL config has (transformers 5 renamed some)."""
    fields = {f.name for f in dataclasses.fields(args)}
    return getattr(args, next(n for n in names if n in fields))


SFT = {
    "max_length": lambda a, lo, c: a.max_length,
    "packing": lambda a, lo, c: a.dataset_kwargs == {"skip_prepare_dataset": True},  # aci's packed rows as they are
    "epochs": lambda a, lo, c: a.num_train_epochs,
    "max_steps": lambda a, lo, c: a.max_steps,
    "lr_schedule": lambda a, lo, c: str(getattr(a.lr_scheduler_type, "value", a.lr_scheduler_type)),
    "warmup_ratio": lambda a, lo, c: _get(a, "warmup_ratio", "warmup_steps"),
    "batch_size": lambda a, lo, c: a.per_device_train_batch_size,
    "grad_accum": lambda a, lo, c: a.gradient_accumulation_steps,
    "gradient_checkpointing": lambda a, lo, c: _get(a, "gradient_checkpointing", "activation_checkpointing"),
    "save_steps": lambda a, lo, c: a.save_steps,
    "logging_steps": lambda a, lo, c: a.logging_steps,
    "seed": lambda a, lo, c: a.seed,
    "learning_rate": lambda a, lo, c: a.learning_rate,
    "lora": lambda a, lo, c: lo is not None,
    "lora_r": lambda a, lo, c: lo.r,
    "lora_alpha": lambda a, lo, c: lo.lora_alpha,
    "lora_dropout": lambda a, lo, c: lo.lora_dropout,
    "lora_targets": lambda a, lo, c: sorted(lo.target_modules),
    # TrainingArguments imports DeepSpeed when this is set, and DeepSpeed is not installed here: the
    # settings the TRL config is built from carry it (test_train_multigpu.py checks the shipped configs)
    "deepspeed": lambda a, lo, c: c["deepspeed"] == str(config_mod.zero_config("zero2")),
}
GRPO = {
    "num_generations": lambda a: a.num_generations,
    "max_completion_length": lambda a: a.max_completion_length,
    "temperature": lambda a: a.temperature,
    "beta": lambda a: a.beta,
    "use_vllm": lambda a: a.use_vllm,
}
EXPECTED = {**SET, "packing": True, "lora": True, "lora_targets": ["q_proj", "v_proj"], "deepspeed": True}


def test_every_request_field_is_mapped_or_named_with_its_reason():
    fields = set(TrainRequest.model_fields)
    assert fields == set(SFT) | set(GRPO) | set(NOT_TRL), (fields - set(SFT) - set(GRPO) - set(NOT_TRL),
                                                           (set(SFT) | set(GRPO) | set(NOT_TRL)) - fields)
    assert set(SET) == set(SFT) | set(GRPO)
    for name, value in SET.items():
        assert value != TrainRequest.model_fields[name].default, name  # else its arrival proves nothing
    assert all(TrainRequest.model_fields[f].description for f in fields)  # and every field says what it does


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_model):
    from transformers import AutoModelForCausalLM

    wd = tmp_path_factory.mktemp("settings")
    ctx = make_run(wd, tiny_model, profile="default", contamination=None)
    model = AutoModelForCausalLM.from_pretrained(tiny_model)

    def build(method: str):
        req = TrainRequest(method=method, data=str(wd / "sft.jsonl"), **SET)
        src = gates.Source("base", str(tiny_model), False)
        cfg = prepare.job_config(req, ctx, f"train-{method}", src, None, str(config_mod.zero_config("zero2")),
                                 rows=16, data_sha256="0" * 64)
        speed = hardware.decide(model, cuda=False, packing=cfg.packing, method=method,
                                gradient_checkpointing=cfg.gradient_checkpointing)
        common = run.common_args(cfg, False, speed)
        without_ds = cfg.model_copy(update={"deepspeed": None})
        args = (run.sft_args if method == "sft" else run.grpo_args)(without_ds, False, speed)
        return args, run.lora_config(cfg), common

    return build


def test_every_setting_reaches_the_trl_config(built):
    args, lora, common = built("sft")
    got = {name: read(args, lora, common) for name, read in SFT.items()}
    assert got == {name: EXPECTED[name] for name in SFT}


def test_every_grpo_setting_reaches_the_grpo_config(built):
    args, _, _ = built("grpo")
    assert {name: read(args) for name, read in GRPO.items()} == {name: SET[name] for name in GRPO}
    fields = {f.name for f in dataclasses.fields(args)}
    if "max_prompt_length" in fields:  # TRL 0.27 truncates prompts to max_length; TRL 1.x has no such setting
        assert args.max_prompt_length == SET["max_length"]
