"""`--processes N` (or `--num-gpus N`) launches the job under `accelerate launch`, with the multi-machine
settings passed through, and the shipped DeepSpeed ZeRO-2/3 configs are
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
from aci.training.launch import command


def _cfg(tmp_path: Path, model: Path, **kw) -> TrainConfig:
    return TrainConfig(method="sft", job="train-x", state=str(tmp_path / "state"), workdir=str(tmp_path),
                       output_dir=str(tmp_path / "out"), model_path=str(model), parent="base",
                       data=str(tmp_path / "d.jsonl"), data_sha256="0" * 64, learning_rate=2e-5, **kw)


def test_several_processes_run_under_accelerate_launch(tmp_path, tiny_model):
    from accelerate.commands.launch import launch_command_parser

    one = command(_cfg(tmp_path, tiny_model), Path("c.json"))
    assert one == [sys.executable, "-m", "aci.training.run", "c.json"]
    cmd = command(_cfg(tmp_path, tiny_model, num_processes=4, deepspeed=str(cfg_mod.zero_config("zero3"))),
                   Path("c.json"))
    assert cmd[:3] == [sys.executable, "-m", "aci.training.launch"]  # accelerate's launcher and parser
    args = launch_command_parser().parse_args(cmd[3:])
    assert args.num_processes == 4 and args.multi_gpu and args.module and args.training_script == "aci.training.run"
    assert args.training_script_args == ["c.json"] and args.main_process_port == 0  # a free port, not 29500


def test_num_gpus_is_the_processes_option():
    from aci.tools.train import TrainInput

    assert TrainInput.model_validate({"num_gpus": 2}).processes == 2


def test_multi_machine_settings_pass_through_to_accelerate(tmp_path, tiny_model):
    """Each machine's `train start` renders accelerate's own settings, as given, read back by accelerate's
    parser; a config file goes as --config_file and names the processes unless --processes does."""
    from accelerate.commands.launch import launch_command_parser

    from aci.errors import ACIError
    from aci.training.launch import launch_settings
    from aci.training.request import TrainRequest
    from tests.train_helpers import ctx_for

    ctx = ctx_for(tmp_path)
    given = dict(processes=16, num_machines=2, machine_rank=1, main_process_ip="10.0.0.1", main_process_port=29501)
    processes, machines = launch_settings(TrainRequest(**given), ctx)
    cmd = command(_cfg(tmp_path, tiny_model, num_processes=processes, machines=machines), Path("c.json"))
    args = launch_command_parser().parse_args(cmd[3:])
    assert (args.num_processes, args.num_machines, args.machine_rank, args.main_process_ip, args.main_process_port,
            args.multi_gpu, args.config_file) == (16, 2, 1, "10.0.0.1", 29501, True, None)

    (tmp_path / "cluster.yaml").write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\n"
                                           "num_machines: 2\nnum_processes: 8\nmachine_rank: 0\n"
                                           "main_process_ip: 10.0.0.1\nmain_process_port: 29500\n")
    processes, machines = launch_settings(TrainRequest(accelerate_config="cluster.yaml", machine_rank=1), ctx)
    assert processes == 8  # the file's
    args = launch_command_parser().parse_args(command(_cfg(tmp_path, tiny_model, num_processes=processes,
                                                           machines=machines), Path("c.json"))[3:])
    assert (args.config_file, args.num_processes, args.machine_rank, args.multi_gpu, args.main_process_ip) == \
        (str(tmp_path / "cluster.yaml"), 8, 1, False, None)  # the rest is the file's, as accelerate reads it
    assert launch_settings(TrainRequest(accelerate_config="cluster.yaml", processes=4), ctx)[0] == 4

    for bad, says in ((dict(processes=3, num_machines=2, main_process_ip="h"), "must be a multiple of the 2 machines"),
                      (dict(processes=4, num_machines=2), "needs --main-process-ip"),
                      (dict(processes=4, num_machines=2, machine_rank=2, main_process_ip="h"), "is not a machine of"),
                      (dict(main_process_port=29501), "take effect with several processes"),
                      (dict(accelerate_config="missing.yaml"), "missing.yaml")):
        with pytest.raises(ACIError, match=says):
            launch_settings(TrainRequest(**bad), ctx)


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
