"""Training jobs: SFT and GRPO through TRL, run as supervised jobs (see `aci.jobs`).

`request` is what a caller asks and `config` the resolved job configuration (written by the `train`
tool, read by the job); `gates` and `prepare` check a request and launch it; `data` turns samples into
token ids and assistant masks with the evaluation's template, `tokenized` keeps them for the next job;
`callbacks` report progress and register checkpoints in state while training runs, `pace` measures the
step rate and `schedule` times the wsd decay to the stop time by it; `probe` compares learning rates;
`rewards` builds GRPO rewards from the graders; `run` is the job's entry point (`python -m
aci.training.run <config.json>`), under `launch` (accelerate's launcher) for several processes, whose
`ranks` agree on when to stop.
"""
