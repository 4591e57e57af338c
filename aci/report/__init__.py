"""`aci report`: one self-contained HTML page of a run, plus the PNG plots it embeds.

Everything comes from the state folder (and the files it names), so a report can be written at any time,
by anyone, after the fact: the run card, the journal (timeline), the phase plan against the time used
(`aci.progress.phases`), every evaluation in `checkpoints.jsonl` with its trial range, the data manifests
(histogram comparisons, verify-task yields, contamination verdicts) and the loss curve of each training
job (from the job's `history.jsonl` when present, else the trainer's `trainer_state.json` of its last
checkpoint, else the `[aci] step` lines of its log).

Modules: `data` (what the page shows, read once), `plots` (the PNGs; matplotlib is imported only
there), `html` (the page: no external asset and no script). Here: `write()` and the `aci report` command.
"""

from __future__ import annotations

from pathlib import Path

import click

from aci.report.data import collect
from aci.report.html import render
from aci.state import STATE_ENV


def write(state_dir: Path, out: Path | None = None, workdir: Path | None = None) -> Path:
    run = collect(state_dir, workdir)
    return render(run, out or run.workdir / "report")


@click.command()
@click.option("--state", "state_dir", type=click.Path(file_okay=False), default=None,
              help=f"the run's state folder (default: aci --state, ${STATE_ENV}, else <aci --workdir>/state)")
@click.option("--out", "out", type=click.Path(file_okay=False), default=None,
              help="folder for report.html and the PNG plots (default: <workdir>/report)")
@click.pass_context
def command(cctx: click.Context, state_dir: str | None, out: str | None) -> None:
    """Write a self-contained HTML report of a run (timeline, phases, scores, data gates, loss curves)."""
    from aci.state import resolve_root

    root = cctx.find_root().obj or {}
    workdir = Path(root["workdir"]).resolve() if root.get("workdir") else None
    page = write(resolve_root(state_dir or root.get("state"), workdir), Path(out).resolve() if out else None, workdir)
    click.echo(f"wrote {page}")
