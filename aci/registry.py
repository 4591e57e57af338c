"""One definition per tool: input model, function, output model, MCP annotations.

Tool modules live in `aci/tools/` and register themselves with `@tool(...)`; `tools()` imports them all
(they import no heavy library at module level). The MCP server (`aci/server.py`) and the CLI
(`aci/cli.py`) are both built from this registry and only translate: every call goes through `call()`,
which validates input, runs the function, and attaches the run envelope (time left, deadline, best
checkpoint, reminders) to the result.
"""

from __future__ import annotations

import importlib
import pkgutil
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aci.context import Context
from aci.envelope import RunInfo, envelope
from aci.errors import ACIError


class ToolInput(BaseModel):
    """Base of every tool's input: unknown fields are errors, so typos never pass silently."""

    model_config = ConfigDict(extra="forbid")


class ToolOutput(BaseModel):
    """Base of every tool's output."""

    run: RunInfo | None = Field(None, description="time left, deadline, best checkpoint, reminders")

    def summary(self) -> str:
        """A few lines for a person reading the CLI; tools override it where a table reads better."""
        import yaml

        body = self.model_dump(mode="json", exclude={"run"}, exclude_none=True)
        return yaml.safe_dump(body, sort_keys=False, allow_unicode=True, width=100).rstrip()


@dataclass(frozen=True)
class Tool:
    name: str
    title: str
    description: str
    input: type[ToolInput]
    output: type[ToolOutput]
    fn: Callable[[Any, Context], ToolOutput]
    read_only: bool
    destructive: bool
    idempotent: bool
    open_world: bool
    action_field: str | None  # a Literal field the CLI takes as a positional argument


_REGISTRY: dict[str, Tool] = {}


def tool(
    name: str,
    *,
    title: str,
    read_only: bool = False,
    destructive: bool = False,
    idempotent: bool = False,
    open_world: bool = False,
) -> Callable:
    """Register `fn(inp: SomeInput, ctx: Context) -> SomeOutput` as the tool `name`."""

    def deco(fn: Callable) -> Callable:
        hints = typing.get_type_hints(fn)
        params = list(hints)
        inp, out = hints[params[0]], hints["return"]
        if not (issubclass(inp, ToolInput) and issubclass(out, ToolOutput)):
            raise TypeError(f"tool {name}: input must subclass ToolInput and output ToolOutput")
        action = "action" if "action" in inp.model_fields else None
        known = _REGISTRY.get(name)
        if known and (known.fn.__module__, known.fn.__qualname__) != (fn.__module__, fn.__qualname__):
            raise ACIError(f"tool {name!r} is already registered by {known.fn.__module__}.{known.fn.__qualname__}; "
                           f"{fn.__module__}.{fn.__qualname__} needs another name")
        _REGISTRY[name] = Tool(
            name=name,
            title=title,
            description=(fn.__doc__ or "").strip(),
            input=inp,
            output=out,
            fn=fn,
            read_only=read_only,
            destructive=destructive,
            idempotent=idempotent,
            open_world=open_world,
            action_field=action,
        )
        return fn

    return deco


def tools() -> dict[str, Tool]:
    """All registered tools, importing every module of `aci.tools` once."""
    import aci.tools as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"aci.tools.{mod.name}")
    return dict(sorted(_REGISTRY.items()))


def get(name: str) -> Tool:
    found = tools().get(name)
    if found is None:
        raise ACIError(f"unknown tool {name!r}; tools: {', '.join(tools())}")
    return found


def validation_message(tool_name: str, err: ValidationError) -> str:
    parts = []
    for e in err.errors()[:5]:
        loc = ".".join(str(p) for p in e["loc"]) or "(input)"
        parts.append(f"{loc}: {e['msg']}")
    more = f" (+{err.error_count() - 5} more)" if err.error_count() > 5 else ""
    return f"invalid arguments for {tool_name}: " + "; ".join(parts) + more


def call(name: str, args: dict[str, Any], ctx: Context) -> ToolOutput:
    """Validate, run, and wrap one tool call. Raises ACIError for anything the caller can fix."""
    t = get(name)
    try:
        inp = t.input.model_validate(args)
    except ValidationError as e:
        raise ACIError(validation_message(name, e)) from None
    out = t.fn(inp, ctx)
    ctx.forget()
    out.run = envelope(ctx)
    return out
