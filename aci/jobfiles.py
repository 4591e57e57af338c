"""The files of a job's folder, `state/jobs/<id>/`, each named once.

The server's side (`aci.jobs`), the supervisor, the jobs' own code and the bench scripts all read these
files; this module imports nothing, so the supervisor can read `job.json` before the rest of aci loads.
"""

JOB = "job.json"  # command, config and pids: written at launch, the job's own pid added by its supervisor
CONFIG = "config.json"  # the resolved config the job's code reads
LOG = "log"  # the job's stdout and stderr
PROGRESS = "progress.json"  # what the job reports while it runs (`aci.jobs.write_progress`)
STOP = "stop"  # present once a stop was requested
DECAY = "decay"  # present once a wsd job was asked to decay now (`aci.training.cooldown`)
EXIT = "exit.json"  # how it ended, with the CPU time and peak memory used: written by the supervisor
EXIT_RESERVE = "exit.reserve"  # bytes set aside at launch for exit.json, so a full disk cannot keep it unwritten
END_PENDING = "end.pending"  # present until the job's end event is committed to state (see `aci.jobs.reap`)
