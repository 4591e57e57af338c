"""The training job: `python -m aci.training.run <config.json>` (or under `accelerate launch`, once per rank:
`aci.training.ranks`).

Reads the resolved config written by the `train` tool, renders the data with the evaluation's template,
and runs TRL's `SFTTrainer` or `GRPOTrainer` with the job callback. Works with TRL 0.27 / transformers
4.57 (the PostTrainBench image) and TRL 1.x / transformers 5: settings are passed by name and the few
that were renamed are translated in `make_args`.
"""

from __future__ import annotations

import dataclasses
import gc
import inspect
import sys
import time
from pathlib import Path

from aci import jobs, processes, templates
from aci.errors import ACIError
from aci.state import iso
from aci.training import config as config_mod
from aci.training import data, hardware, ranks, schedule, tokenized
from aci.training.config import TrainConfig


def make_args(cls, **kw):
    """Build a TRL config, translating settings renamed between versions and naming any it lacks."""
    names = {f.name for f in dataclasses.fields(cls)}
    if "warmup_ratio" in kw and "warmup_ratio" not in names:  # transformers 5: a float warmup_steps is a ratio
        kw["warmup_steps"] = kw.pop("warmup_ratio")
    if "activation_checkpointing" in names:  # transformers 5 renamed gradient checkpointing
        for old, new in (("gradient_checkpointing", "activation_checkpointing"),
                         ("gradient_checkpointing_kwargs", "activation_checkpointing_kwargs")):
            if old in kw:
                kw[new] = kw.pop(old)
    for key in [k for k in kw if k not in names]:
        print(f"[aci] {cls.__name__} in this TRL version has no `{key}`; not set", flush=True)
        kw.pop(key)
    return cls(**kw)


def load_model(cfg: TrainConfig, cuda: bool):
    """The model in bf16 with CUDA (fp32 on CPU), with the fastest attention kernel installed; a model that
    refuses that kernel loads with transformers' default instead."""
    import torch

    kw: dict = {"dtype": torch.bfloat16 if cuda else torch.float32}
    attn = hardware.attention(cuda, torch.cuda.get_device_capability() if cuda else None)
    if attn:
        kw["attn_implementation"] = attn
    try:
        return _from_pretrained(cfg, kw)
    except (ImportError, ValueError) as e:
        if not attn:
            raise
        print(f"[aci] {attn} unavailable for this model ({type(e).__name__}: {e}); loading with the default "
              f"attention", flush=True)
        kw.pop("attn_implementation")
        return _from_pretrained(cfg, kw)


def _from_pretrained(cfg: TrainConfig, kw: dict):
    from transformers import AutoModelForCausalLM

    if cfg.model_adapter:  # a LoRA checkpoint: merge it into its base, then train the result
        from peft import AutoPeftModelForCausalLM

        model = AutoPeftModelForCausalLM.from_pretrained(cfg.model_path, **kw).merge_and_unload()
        model.requires_grad_(True)  # peft froze the base weights; all of them train now (or LoRA refreezes)
        return model
    return AutoModelForCausalLM.from_pretrained(cfg.model_path, **kw)


def set_end_of_turn(model, tokenizer, token: str | None) -> None:
    """List the template's end-of-turn token in generation_config.eos_token_id, so generation stops there."""
    if not token:
        return
    tid = tokenizer.convert_tokens_to_ids(token)
    eos = model.generation_config.eos_token_id
    eos = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    if tid not in eos:
        model.generation_config.eos_token_id = [*eos, tid]


def common_args(cfg: TrainConfig, cuda: bool, speed: hardware.Speed) -> dict:
    """The settings SFT and GRPO share. `wsd` is not a transformers schedule: the trainer's scheduler is
    replaced by the plan's (`aci.training.schedule.planned`), so the arguments name a constant one."""
    gc = speed.gradient_checkpointing
    return dict(
        output_dir=cfg.output_dir, num_train_epochs=cfg.epochs, max_steps=cfg.max_steps or -1,
        learning_rate=cfg.learning_rate, warmup_ratio=cfg.warmup_ratio,
        lr_scheduler_type="constant" if cfg.lr_schedule == "wsd" else cfg.lr_schedule,
        per_device_train_batch_size=cfg.batch_size, gradient_accumulation_steps=cfg.grad_accum,
        gradient_checkpointing=gc, gradient_checkpointing_kwargs={"use_reentrant": False} if gc else None,
        bf16=speed.bf16, use_cpu=not cuda, use_liger_kernel=speed.liger,
        save_strategy="no" if cfg.measure else "steps", save_steps=cfg.save_steps,
        save_only_model=True, logging_steps=cfg.logging_steps, report_to="none", seed=cfg.seed,
        deepspeed=cfg.deepspeed, disable_tqdm=True,
    )


def sft_args(cfg: TrainConfig, cuda: bool, speed: hardware.Speed):
    """TRL's `SFTConfig` for the job: rows packed and collated here (aci.training.data) are used as they are."""
    from trl import SFTConfig

    packed = {}
    if speed.packing:
        packed = dict(dataset_kwargs={"skip_prepare_dataset": True}, remove_unused_columns=False,
                      include_num_input_tokens_seen="non_padding")
    return make_args(SFTConfig, **common_args(cfg, cuda, speed), max_length=cfg.max_length, packing=False, **packed)


def grpo_args(cfg: TrainConfig, cuda: bool, speed: hardware.Speed):
    from trl import GRPOConfig

    g = cfg.grpo
    return make_args(
        GRPOConfig, **common_args(cfg, cuda, speed), num_generations=g.num_generations,
        max_completion_length=g.max_completion_length, temperature=g.temperature, beta=g.beta,
        use_vllm=g.use_vllm, **(vllm_settings() if g.use_vllm else {}),
        max_prompt_length=cfg.max_length,  # TRL 0.27 truncates prompts to this; 1.x has no such setting
    )


def lora_config(cfg: TrainConfig):
    if cfg.lora is None:
        return None
    from peft import LoraConfig

    return LoraConfig(r=cfg.lora.r, lora_alpha=cfg.lora.alpha, lora_dropout=cfg.lora.dropout,
                      target_modules=cfg.lora.target_modules, task_type="CAUSAL_LM")


def sft_data(cfg: TrainConfig, tokenizer, template, callback, content: bytes, pack_to: int | None):
    """The SFT dataset: an earlier job's from the same inputs (`aci.training.tokenized`), else rendered and
    tokenized now, then kept for the next job. Its progress says which, and how long it took."""
    started = time.monotonic()
    cache_key = tokenized.key(cfg, pack_to)
    hit = tokenized.load(cfg.state, cache_key)
    if hit:
        dataset, report = hit
        how = "cached by an earlier job"
    else:
        what = f"tokenizing {cfg.data_rows} samples with the evaluation's template"
        encoded, stats = data.encode_samples(Path(cfg.data), tokenizer, template, max_length=cfg.max_length,
                                             kwargs=cfg.template_kwargs, content=content,
                                             progress=lambda n: callback.preparing(what, n, cfg.data_rows))
        dataset, report = data.sft_dataset(encoded, pack_to=pack_to), stats.report()
        how = "tokenized now, " + tokenized.save(cfg.state, cache_key, dataset, report)
    took = round(time.monotonic() - started, 2)
    startup = callback.progress.setdefault("startup", {})
    if "tokenize_s" not in startup:  # the first build's (a batch search builds again, from the cache)
        startup.update(tokenize_s=took, tokenized=how)
    print(f"[aci] data: {report}" + (f", packed into {len(dataset)} rows" if pack_to else "") +
          f" ({how}, {took} s)", flush=True)
    return dataset


def build_trainer(cfg: TrainConfig, tokenizer, template, callback, cuda: bool, content: bytes):
    """The TRL trainer for `cfg`, and the speed settings it runs with."""
    callback.preparing(f"loading the model from {cfg.model_path}")
    model = load_model(cfg, cuda)
    if "token_type_ids" not in inspect.signature(model.forward).parameters:  # e.g. a generic fast tokenizer
        tokenizer.model_input_names = [n for n in tokenizer.model_input_names if n != "token_type_ids"]
    speed = hardware.decide(model, cuda=cuda, packing=cfg.packing, gradient_checkpointing=cfg.gradient_checkpointing,
                            method=cfg.method)
    print(f"[aci] speed: {speed.report()}", flush=True)
    if cfg.method == "sft":
        from trl import SFTTrainer

        dataset = sft_data(cfg, tokenizer, template, callback, content, cfg.max_length if speed.packing else None)
        collator = data.PackedCollator(tokenizer.pad_token_id, flat=speed.packing_flat) if speed.packing else None
        callback.preparing("building the TRL trainer")
        trainer = schedule.planned(SFTTrainer, callback.plan)(
            model=model, args=sft_args(cfg, cuda, speed), train_dataset=dataset, processing_class=tokenizer,
            data_collator=collator, peft_config=lora_config(cfg), callbacks=[callback])
        return trainer, speed
    from datasets import Dataset
    from trl import GRPOTrainer

    from aci.training.rewards import grader_reward

    callback.preparing(f"rendering the prompts of {cfg.data_rows} tasks")
    rows, stats = data.grpo_prompts(Path(cfg.data), tokenizer, template, kwargs=cfg.template_kwargs, content=content)
    print(f"[aci] prompts: {stats.report()}", flush=True)
    reward = grader_reward(cfg.grpo.grader, workdir=Path(cfg.workdir), profile=cfg.profile,
                          unsafe_grader=cfg.grpo.unsafe_grader)
    args = grpo_args(cfg, cuda, speed)
    callback.preparing("building the TRL trainer")
    trainer = schedule.planned(GRPOTrainer, callback.plan)(
        model=model, reward_funcs=[reward], args=args, train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer, peft_config=lora_config(cfg), callbacks=[callback])
    return trainer, speed


def vllm_settings() -> dict:
    """GRPO's vLLM in colocate mode (it shares the training GPU); asleep between generations (weights and KV
    cache released for the optimizer step) where the installed vLLM has sleep mode."""
    from aci import generation

    return {"vllm_mode": "colocate", "vllm_enable_sleep_mode": generation.vllm_sleeps()}


def unsearched(cfg: TrainConfig, cuda: bool, callback) -> TrainConfig | None:
    """The config of a measurement that decides its split without trials, the split and why recorded in
    its progress; None: it searches by trials (SFT on one CUDA process). On CPU the trials would cost a
    third of a measurement's steps and a second model load, and choose the whole batch anyway."""
    why = ("grpo: generation dominates its memory" if cfg.method != "sft" else
           "several processes or DeepSpeed: a single-process trial does not measure their memory"
           if cfg.num_processes > 1 or cfg.deepspeed else None)
    if why:
        callback.progress["batch"] = {"searched": False, "why": why}
        return cfg
    if cuda:
        return None
    total = cfg.batch_size * cfg.grad_accum
    why = ("CPU: the whole batch per step runs as one micro-batch, untried (running out of host memory kills "
           "the process rather than failing a trial, so every size a trial could run fits)")
    callback.progress["batch"] = {"searched": True, "micro_batch": total, "grad_accum": 1, "trials": [],
                                  "gradient_checkpointing": cfg.gradient_checkpointing, "tokens_per_s": None,
                                  "why": why}
    print(f"[aci] batch: micro-batch {total} x 1 accumulation ({why})", flush=True)
    return cfg.model_copy(update={"batch_size": total, "grad_accum": 1})


def find_batch(cfg: TrainConfig, trainer, callback) -> TrainConfig:
    """The measurement's search for the largest micro-batch that fits (`aci.training.batch`): the config
    with the split found (the probed trainer's optimizer state is released; the caller rebuilds)."""
    from aci.training import batch

    callback.write(force=True, phase="sizing")
    plan = batch.search(cfg.batch_size * cfg.grad_accum, batch.TrainerProbe(trainer), cfg.gradient_checkpointing)
    print(f"[aci] batch: micro-batch {plan.micro_batch} x {plan.grad_accum} accumulation, gradient checkpointing "
          f"{plan.gradient_checkpointing}, {plan.tokens_per_s} tokens/s in the trial", flush=True)
    batch.release(trainer)
    callback.progress["batch"] = {"searched": True, **plan.report()}
    return cfg.model_copy(update={"batch_size": plan.micro_batch, "grad_accum": plan.grad_accum,
                                  "gradient_checkpointing": plan.gradient_checkpointing})


def prepare(cfg: TrainConfig, launched: float):
    """The job's trainer, with its callback (`JobCallback`), ready to train; `launched`: the monotonic time
    the job's process began, for its time to step 1. Raises ACIError when the data is not the checked data."""
    content = data.pinned_content(Path(cfg.data), cfg.data_sha256, cfg.profile)
    import datasets
    import torch
    import transformers
    from transformers import set_seed

    from aci.training.callbacks import JobCallback

    datasets.disable_progress_bars()  # the log is for people and `train status`, not for progress bars
    transformers.utils.logging.disable_progress_bar()
    set_seed(cfg.seed)
    cuda = torch.cuda.is_available()
    callback = JobCallback(cfg, launched)
    callback.preparing("loading the tokenizer and the evaluation's template")
    tokenizer = templates.load_tokenizer(cfg.model_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    template = templates.load(cfg.template, tokenizer)
    tokenizer.chat_template = template.text  # checkpoints carry the template the evaluation renders
    eot = templates.end_of_turn(tokenizer, template, cfg.template_kwargs)
    if eot and cfg.method == "grpo":  # completions end at the end-of-turn token, as at evaluation
        tokenizer.eos_token = eot
    decided = unsearched(cfg, cuda, callback) if cfg.find_batch else cfg
    search = decided is None
    if search and cfg.gradient_checkpointing is None:
        cfg = cfg.model_copy(update={"gradient_checkpointing": False})  # the search turns it on if needed
    cfg = decided or cfg
    trainer, speed = build_trainer(cfg, tokenizer, template, callback, cuda, content)
    callback.progress.setdefault("startup", {})["ready_s"] = round(time.monotonic() - launched, 2)
    if search:  # the model loads again, for a trainer built for the split found
        cfg = find_batch(cfg, trainer, callback)
        trainer = None
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
        trainer, speed = build_trainer(cfg, tokenizer, template, callback, cuda, content)
    callback.progress["speed"] = speed.report()
    set_end_of_turn(trainer.model, tokenizer, eot)
    return trainer, callback


def main(argv: list[str]) -> int:
    launched = time.monotonic()
    ranks.die_with_launcher()
    cfg = config_mod.load(argv[0])
    if ranks.reports():
        jobs.write_progress({"phase": "preparing", "step": 0, "job": cfg.job,
                             "preparing": {"what": "importing torch, transformers and TRL", "since": iso()}})
    try:
        if ranks.world() != cfg.num_processes:
            raise ACIError(f"the job asked for {cfg.num_processes} processes but the launcher started "
                           f"{ranks.world()} (its arguments, or an accelerate config file, decide how many)")
        trainer, callback = prepare(cfg, launched)
    except ACIError as e:
        print(f"[aci] refused: {e}", flush=True)
        return 2
    if cfg.lr_probe:
        from aci.training import probe

        probe.run(trainer, cfg, callback)
    else:
        trainer.train()
    return 0


if __name__ == "__main__":
    processes.exit_without_teardown(main(sys.argv[1:]))
