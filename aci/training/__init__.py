"""Training jobs: SFT and GRPO through TRL, run as supervised jobs (see `aci.jobs`).

`config` is the resolved job configuration (written by the `train` tool, read by the job), `data` turns
samples into token ids and assistant masks with the evaluation's template, `callbacks` report progress
and register checkpoints in state while training runs, `rewards` builds GRPO rewards from the graders,
and `run` is the job's entry point (`python -m aci.training.run <config.json>`).
"""
