"""How a training job of several processes is launched: the command (`command`, with accelerate's own
settings for several machines passed through, `launch_settings`), and the launcher it runs,
`python -m aci.training.launch <accelerate launch arguments>` (`main`): accelerate's launcher, with its
own parser and code, that says in one line how a job of several ranks ended.

Under `accelerate launch --multi_gpu` torchrun starts the ranks, and when one fails it stops the others
and raises `ChildFailedError`: its report names each rank's exit, but its last line is a rule of `=`,
which is what the job's supervisor would quote as the reason. Here the report is printed as it is and
then, last, the rank that failed first and how, so the job's reason says it. A stop (SIGTERM from `train
stop` or at the stop time) is forwarded by torchrun to every rank, which saves and ends; accelerate then
exits with 128 + the signal.

torchrun waits `TORCH_ELASTIC_SHUTDOWN_TIMEOUT` seconds for the ranks it stops before it kills them
(30 s by default): set here, unless given, to the grace a training job gets at its stop time
(`aci.jobs.DEADLINE_GRACE_S`), so a last save is not cut short by the launcher. torchrun also sets
`OMP_NUM_THREADS=1` for ranks when the caller set none; that is marked (`cpus.LAUNCHER_SET_ENV`), so on a
CPU each rank still chooses its threads from the free cores instead of taking 1 for the user's choice.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from aci import cpus
from aci.context import Context
from aci.errors import ACIError
from aci.training.config import Machines, TrainConfig
from aci.training.request import TrainRequest

SHUTDOWN_ENV = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"


def launch_settings(req: TrainRequest, ctx: Context) -> tuple[int, Machines | None]:
    """The job's ranks over all machines, and accelerate's settings to pass on (None: one machine, no config
    file). Refused here, before a launch, what accelerate would get wrong later: a count that does not split
    evenly over the machines (it starts `processes // num_machines` on each), a machine number past the
    count, several machines without the main one's address, machine settings for a single process. With a
    config file, what the request does not set is the file's, as accelerate reads it."""
    given = Machines(**req.model_dump(include=set(Machines.model_fields)))
    processes, machines = req.processes, given.num_machines
    if given.accelerate_config:
        path = ctx.path(given.accelerate_config, must_exist=True, what="accelerate config")
        given = given.model_copy(update={"accelerate_config": str(path)})
        file = _accelerate_config(path)
        if "processes" not in req.model_fields_set and isinstance(file.num_processes, int) and file.num_processes > 0:
            processes = file.num_processes
        if "num_machines" not in req.model_fields_set:
            machines = file.num_machines or 1
    elif machines > 1 and not given.main_process_ip:
        raise ACIError(f"--num-machines {machines} needs --main-process-ip, the address of machine 0 (or an "
                       f"--accelerate-config file that names it)")
    elif given != Machines() and processes == 1:
        raise ACIError("--machine-rank, --main-process-ip and --main-process-port take effect with several "
                       "processes: pass --processes N (the total over all machines) or drop them")
    if given.machine_rank >= machines:
        raise ACIError(f"--machine-rank {given.machine_rank} is not a machine of {machines} (they are numbered "
                       f"from 0)")
    if processes % machines:
        raise ACIError(f"--processes {processes} is the total over all machines and must be a multiple of the "
                       f"{machines} machines: accelerate starts processes / num_machines on each")
    return processes, None if given == Machines() else given


def _accelerate_config(path: Path):
    """An accelerate config file, as accelerate reads it."""
    from accelerate.commands.config.config_args import load_config_from_file

    try:
        return load_config_from_file(str(path))
    except Exception as e:  # noqa: BLE001 - accelerate's reader raises whatever the YAML or its fields give
        raise ACIError(f"cannot read the accelerate config {path}: {type(e).__name__}: {e}") from None


def command(cfg: TrainConfig, config_path: Path) -> list[str]:
    """`python -m aci.training.run CONFIG`, for several processes under `accelerate launch` with the arguments
    of `launch_args` (through `aci.training.launch`, accelerate's launcher as it is; DeepSpeed, when asked,
    is set up by the trainer from the config's `deepspeed` file)."""
    job = ["-m", "aci.training.run", str(config_path)]
    if cfg.num_processes == 1 and cfg.machines is None:
        return [sys.executable, *job]
    return [sys.executable, "-m", "aci.training.launch", *launch_args(cfg), *job]


def launch_args(cfg: TrainConfig) -> list[str]:
    """`accelerate launch`'s arguments: `--multi_gpu` (torchrun starts the ranks: NCCL between GPUs, gloo on
    CPU; without it, or a config file that names a distributed type, accelerate starts a single process
    where it sees fewer than two GPUs, whatever `--num_processes` says), the rank count over all machines,
    and each multi-machine setting given, as given. On one machine with no port given, port 0: accelerate
    picks a free one, so two jobs starting at once do not both bind its default 29500 (one failed so)."""
    m = cfg.machines or Machines()
    out = ["--config_file", m.accelerate_config] if m.accelerate_config else ["--multi_gpu"]
    out += ["--num_processes", str(cfg.num_processes)]
    if m.num_machines == 1 and m.main_process_port is None and not m.accelerate_config:
        out += ["--main_process_port", "0"]
    for name, field in Machines.model_fields.items():
        value = getattr(m, name)
        if name != "accelerate_config" and value != field.default:
            out += [f"--{name}", str(value)]
    return out



def main(argv: list[str]) -> int:
    from accelerate.commands.launch import launch_command, launch_command_parser
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    from aci.jobs import DEADLINE_GRACE_S

    os.environ.setdefault(SHUTDOWN_ENV, str(int(DEADLINE_GRACE_S["train"])))
    if not os.environ.get("OMP_NUM_THREADS"):
        os.environ[cpus.LAUNCHER_SET_ENV] = "1"
    args = launch_command_parser().parse_args(argv)
    try:
        launch_command(args)
    except ChildFailedError as e:
        rank, failure = e.get_first_failure()
        how = f"killed by {failure.signal_name()}" if failure.exitcode < 0 else f"exited with code {failure.exitcode}"
        print(e.format_msg(), flush=True)
        print(f"[aci] rank {rank} (pid {failure.pid}) failed first: {how}; the launcher stopped the other "
              f"ranks and the job failed (that rank's last lines are above)", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
