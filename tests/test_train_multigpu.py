"""`--num-gpus N` launches the job under `accelerate launch`, and the shipped DeepSpeed ZeRO-2/3 configs are
ones transformers' DeepSpeed integration completes from the job's settings (no GPU here: the command is
read back with accelerate's own parser, the configs filled by transformers' own code; DeepSpeed itself
is not installed here or in the PostTrainBench image, so transformers' filling methods run on accelerate's
config class, which is their base where DeepSpeed is installed)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from aci.training import config as cfg_mod
from aci.training.config import TrainConfig
from aci.training.prepare import command


def _cfg(tmp_path: Path, model: Path, **kw) -> TrainConfig:
    return TrainConfig(method="sft", job="train-x", state=str(tmp_path / "state"), workdir=str(tmp_path),
                       output_dir=str(tmp_path / "out"), model_path=str(model), parent="base",
                       data=str(tmp_path / "d.jsonl"), data_sha256="0" * 64, learning_rate=2e-5, **kw)


def test_num_gpus_runs_under_accelerate_launch(tmp_path, tiny_model):
    from accelerate.commands.launch import launch_command_parser

    one = command(_cfg(tmp_path, tiny_model), Path("c.json"))
    assert one == [sys.executable, "-m", "aci.training.run", "c.json"]
    cmd = command(_cfg(tmp_path, tiny_model, num_processes=4, deepspeed=str(cfg_mod.zero_config("zero3"))),
                   Path("c.json"))
    assert cmd[:3] == [sys.executable, "-m", "accelerate.commands.launch"]
    args = launch_command_parser().parse_args(cmd[3:])
    assert args.num_processes == 4 and args.module and args.training_script == "aci.training.run"
    assert args.training_script_args == ["c.json"]


@pytest.mark.parametrize("name,stage", [("zero2", 2), ("zero3", 3)])
def test_shipped_zero_configs_are_completed_by_transformers(tmp_path, tiny_model, monkeypatch, name, stage):
    from accelerate.utils.deepspeed import HfDeepSpeedConfig
    from transformers import AutoModelForCausalLM, TrainingArguments
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    methods = {k: v for k, v in vars(HfTrainerDeepSpeedConfig).items() if not k.startswith("__")}
    path = cfg_mod.zero_config(name)
    assert json.loads(path.read_text())["zero_optimization"]["stage"] == stage
    hf = type("TrainerConfig", (HfDeepSpeedConfig,), methods)(str(path))
    hf._dtype, hf.mismatches = None, []
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=2, gradient_accumulation_steps=8,
                             learning_rate=2e-5, max_grad_norm=1.0, use_cpu=True, report_to="none")
    hf.trainer_config_process(args)
    hf.trainer_config_finalize(args, AutoModelForCausalLM.from_pretrained(tiny_model), num_training_steps=10)
    filled = hf.config
    assert "auto" not in json.dumps(filled), filled
    assert (filled["train_micro_batch_size_per_gpu"], filled["gradient_accumulation_steps"],
            filled["train_batch_size"], filled["gradient_clipping"]) == (2, 8, 16, 1.0)
    assert hf.get_value("zero_optimization.stage") == stage and hf.is_zero3() == (stage == 3)
