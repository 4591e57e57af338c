"""The CLI surface: `aci <tool> [action] [--options]`, generated from the tool registry.

Like the MCP server it holds no logic. Each input field becomes an option (`snake_case` -> `--kebab-case`, plus its other spellings,
`ToolInput.spellings`);
an `action` field becomes the first positional argument; list fields repeat; structured fields take
JSON (or `@file.json`). `--json` prints the output model as JSON, otherwise a short human summary.
User errors print on stderr and exit with code 2. A few commands that are not tools (serve, install,
guard, demo, report) live in their own modules and are loaded only when used.
"""

from __future__ import annotations

import json
import sys
import typing
from pathlib import Path
from typing import Any, Literal

import click

from aci import DISTRIBUTION
from aci.errors import ACIError
from aci.state import STATE_ENV

EXTRA_COMMANDS = {
    "serve": "aci.commands:serve",
    "install": "aci.commands:install",
    "guard": "aci.commands:guard",
    "demo": "aci.demo:command",
    "report": "aci.report:command",
}


_SCALARS = {str: click.STRING, int: click.INT, float: click.FLOAT, Path: click.Path()}


def _json_value(value: str) -> Any:
    if value.startswith("@"):
        value = Path(value[1:]).read_text()
    try:
        return json.loads(value)
    except json.JSONDecodeError as e:
        raise click.BadParameter(f"not valid JSON: {e.msg}") from None


def _params_for(model) -> tuple[list[click.Parameter], set[str]]:
    """Click parameters for a tool's input model, and the names that take JSON."""
    from aci.registry import unwrap_optional

    params: list[click.Parameter] = []
    json_fields: set[str] = set()
    others: dict[str, list[str]] = {}
    for alias, name in model.spellings().items():
        others.setdefault(name, []).append("--" + alias.replace("_", "-"))
    for name, field in model.model_fields.items():
        ann = unwrap_optional(field.annotation)
        origin = typing.get_origin(ann)
        required = field.is_required()
        default = None if required else field.get_default(call_default_factory=True)
        help_text = field.description or ""
        if name == "action" and origin is Literal:
            params.append(click.Argument(["action"], type=click.Choice(typing.get_args(ann)), required=required,
                                         default=default))
            continue
        flag = "--" + name.replace("_", "-")
        also = others.get(name, [])  # other spellings of the same option (`--source` for `--sources`)
        if ann is bool:
            params.append(click.Option([f"{flag}/--no-{name.replace('_', '-')}"], default=default, help=help_text))
        elif origin is Literal:
            params.append(click.Option([flag, *also, name], type=click.Choice([str(a) for a in typing.get_args(ann)]),
                                       required=required, default=default, help=help_text, show_default=True))
        elif ann in _SCALARS:
            params.append(click.Option([flag, *also, name], type=_SCALARS[ann], required=required, default=default,
                                       help=help_text, show_default=default not in (None, "")))
        elif origin is list and typing.get_args(ann) and unwrap_optional(typing.get_args(ann)[0]) in _SCALARS:
            inner = _SCALARS[unwrap_optional(typing.get_args(ann)[0])]
            params.append(click.Option([flag, *also, name], type=inner, multiple=True, required=required,
                                       help=(help_text + " (repeatable)").strip()))
        else:
            json_fields.add(name)
            params.append(click.Option([flag, *also, name], type=click.STRING, required=required,
                                       help=(help_text + " (JSON or @file.json)").strip()))
    return params, json_fields


def _tool_command(name: str) -> click.Command:
    from aci import registry

    t = registry.get(name)
    params, json_fields = _params_for(t.input)

    @click.pass_context
    def callback(cctx: click.Context, **kwargs: Any) -> None:
        args = {}
        for k, v in kwargs.items():
            if v is None or (isinstance(v, tuple) and not v and not t.input.model_fields[k].is_required()):
                continue
            args[k] = _json_value(v) if k in json_fields else (list(v) if isinstance(v, tuple) else v)
        obj = cctx.find_root().obj
        from aci.context import Context

        out = registry.call(name, args, Context(state=obj["state"], workdir=obj["workdir"]))
        if obj["json"]:
            click.echo(out.model_dump_json(indent=2))
        else:
            click.echo(out.summary())
            if out.run:
                click.echo(f"\n[time left {out.run.time_left}"
                           + (f", best {out.run.best.checkpoint} = {out.run.best.score:.4g}" if out.run.best else "")
                           + "]")
                for r in out.run.reminders:
                    click.echo(f"! {r}")

    first_line = t.description.splitlines()[0] if t.description else t.title
    return click.Command(name, callback=callback, params=params, help=t.description, short_help=first_line)


class _Group(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        import importlib.util

        from aci import registry

        extras = [n for n, target in EXTRA_COMMANDS.items() if importlib.util.find_spec(target.split(":")[0])]
        return sorted([*registry.tools(), *extras])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in EXTRA_COMMANDS:
            import importlib

            mod, attr = EXTRA_COMMANDS[cmd_name].split(":")
            return getattr(importlib.import_module(mod), attr)
        from aci import registry

        try:
            registry.get(cmd_name)
        except ACIError:
            return None
        return _tool_command(cmd_name)


@click.group(cls=_Group)
@click.option("--state", envvar=STATE_ENV, default=None, help="state folder (default: ./state)")
@click.option("--workdir", default=None, help="working directory of the run (default: current directory)")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON")
@click.version_option(package_name=DISTRIBUTION, prog_name="aci")
@click.pass_context
def cli(ctx: click.Context, state: str | None, workdir: str | None, as_json: bool) -> None:
    """Post-training tools with a clock and rules (the same tools the MCP server serves)."""
    ctx.obj = {"state": state, "workdir": workdir, "json": as_json}


def main(argv: list[str] | None = None) -> None:
    try:
        cli.main(args=argv, prog_name="aci", standalone_mode=False)
    except ACIError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(2)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(1)
    except click.ClickException as e:
        e.show()
        sys.exit(2)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)


if __name__ == "__main__":
    main()
