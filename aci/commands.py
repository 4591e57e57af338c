"""CLI commands that are not tools: serving MCP, installing into agents, and the Stop guard."""

from __future__ import annotations

import json
import sys

import click

from aci.install import AGENTS
from aci.server import DEFAULT_HOST, DEFAULT_PORT, TOKEN_ENV


@click.command()
@click.option("--http", is_flag=True, help="serve streamable HTTP instead of stdio")
@click.option("--host", default=DEFAULT_HOST, show_default=True, help="HTTP bind address (loopback unless given)")
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=int, help="HTTP port")
@click.option("--allow-remote", is_flag=True, help="HTTP: allow a non-loopback --host")
@click.option("--token-file", default=None, help="HTTP: file holding the bearer token every request must carry "
              f"(else {TOKEN_ENV}, else a new one printed on stderr)")
@click.option("--allowed-host", "allowed_hosts", multiple=True,
              help="HTTP: another name clients reach the server by (Host header), beside its bound address")
@click.pass_context
def serve(cctx: click.Context, http: bool, host: str, port: int, allow_remote: bool, token_file: str | None,
          allowed_hosts: tuple[str, ...]) -> None:
    """Serve the tools over MCP (stdio by default; HTTP on loopback with a bearer token unless --allow-remote)."""
    from aci.server import serve as run

    obj = cctx.find_root().obj
    run(obj["state"], obj["workdir"], http=http, host=host, port=port, allow_remote=allow_remote,
        token_file=token_file, allowed_hosts=allowed_hosts)


@click.command()
@click.argument("agent", type=click.Choice(AGENTS))
@click.option("--workdir", "target", default=".", help="the agent's working directory")
@click.option("--global", "global_", is_flag=True, help="codex: write ~/.codex/ (config.toml, skills/) instead of the workdir's")
@click.option("--remove", is_flag=True, help="take out everything install wrote for AGENT (user entries stay)")
@click.pass_context
def install(cctx: click.Context, agent: str, target: str, global_: bool, remove: bool) -> None:
    """Install skills, the MCP registration and a pointer file for AGENT in the working directory."""
    from aci import install as inst

    obj = cctx.find_root().obj
    if remove:
        paths, verb = inst.remove(agent, target, global_config=global_), f"removed {inst.SERVER} from"
    else:
        paths, verb = inst.install(agent, target, global_config=global_, state=obj["state"]), "wrote"
    if obj["json"]:
        click.echo(json.dumps([str(p) for p in paths], indent=2))
    else:
        for p in paths:
            click.echo(f"{verb} {p}")


@click.group()
def guard() -> None:
    """Hooks that keep an agent on task."""


@guard.command("stop")
@click.pass_context
def guard_stop(cctx: click.Context) -> None:
    """Claude Code `Stop` hook: block stopping before the final reserve, target met or not (then until
    finalize passes, once).

    Reads the hook's JSON on stdin (`stop_hook_active`, `session_id`, `transcript_path` and, from Claude
    Code 2.1, `last_assistant_message`), prints a decision JSON.
    """
    from aci.context import Context
    from aci.guard import stop_decision

    obj = cctx.find_root().obj
    try:
        hook = json.loads(sys.stdin.read() or "{}") if not sys.stdin.isatty() else {}
    except json.JSONDecodeError:
        hook = {}
    decision = stop_decision(Context(state=obj["state"], workdir=obj["workdir"]), hook)
    if decision:
        click.echo(json.dumps(decision))


@guard.command("end")
@click.option("--how", required=True, help="what ended the agent, e.g. 'the agent exited with status 0'")
@click.pass_context
def guard_end(cctx: click.Context, how: str) -> None:
    """Journal why the run ended: HOW, the time left and what final_model holds (for the integrations that
    start the agent: the journal's last entry then states the reason). Nothing without a run card."""
    from aci.context import Context
    from aci.guard import end_of_run

    obj = cctx.find_root().obj
    message = end_of_run(Context(state=obj["state"], workdir=obj["workdir"]), how)
    if message:
        click.echo(message)
