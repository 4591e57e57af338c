"""One definition per tool: input model, function, output model, MCP annotations.

Tool modules live in `aci/tools/` and register themselves with `@tool(...)`; `tools()` imports them all
(they import no heavy library at module level). The MCP server (`aci/server.py`) and the CLI
(`aci/cli.py`) are both built from this registry and only translate: every call goes through `call()`,
which validates input, runs the function, and attaches the run envelope (`aci.envelope`: time left,
deadline, best checkpoint, reminders) to the result. A tool's input is `ToolInput` plus, where the tool
has settings, the domain's request model (`class TrainInput(ToolInput, TrainRequest)`), so each setting
is defined once, beside the code that uses it.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import pkgutil
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from aci.context import Context
from aci.envelope import RunInfo, envelope
from aci.errors import ACIError
from aci.state import gitpython

# One vocabulary across tools: the names in a group mean the same thing wherever they appear, and a tool
# that has one of them takes the others as spellings of it (`aci contamination --source` and
# `aci train --source` both work). Besides these, a list field takes its singular (`--feature`), and a
# tool takes the old names of its renamed fields (`RENAMED`).
SYNONYMS: tuple[tuple[str, ...], ...] = (
    ("sources", "source"),  # where the data came from: checked against the banned datasets
    ("path", "data", "tasks"),  # the data file the tool reads (a name, not structured data)
    ("target", "reference"),  # the benchmark's items a data file is held against
    ("max_new_tokens", "max_tokens"),  # new tokens per reply
    ("note", "notes"),  # free text kept with the record
)


def unwrap_optional(ann: Any) -> Any:
    """`X` for `X | None` (or `Optional[X]`), any other annotation as it is: what a field takes when given.
    A constrained `X` (`Annotated[X, ...]`, e.g. `aci.sampling.Temperature | None`) is `X` too: pydantic
    checks the constraints, the CLI needs only the type."""
    args = [a for a in typing.get_args(ann) if a is not type(None)]
    if typing.get_origin(ann) in (typing.Union, types.UnionType) and len(args) == 1:
        ann = args[0]
    return typing.get_args(ann)[0] if typing.get_origin(ann) is typing.Annotated else ann


def _is_list(field: Any) -> bool:
    return typing.get_origin(unwrap_optional(field.annotation)) is list


@functools.cache
def _spellings(model: type[BaseModel]) -> dict[str, str]:
    fields = model.model_fields
    out: dict[str, str] = dict(getattr(model, "RENAMED", {}))
    for group in SYNONYMS:
        present = [g for g in group if g in fields and typing.get_origin(unwrap_optional(fields[g].annotation)) is not dict]
        if len(present) == 1:
            out.update({g: present[0] for g in group if g not in fields})
    for name, f in fields.items():
        if _is_list(f) and name.endswith("s") and name[:-1] not in fields:
            out.setdefault(name[:-1], name)
    return out


class ToolInput(BaseModel):
    """Base of every tool's input: unknown fields are errors, so typos never pass silently; the other
    spellings of a field (`spellings`) are taken as the field."""

    model_config = ConfigDict(extra="forbid")
    RENAMED: ClassVar[dict[str, str]] = {}  # old name -> field, for a tool whose field was renamed

    @classmethod
    def spellings(cls) -> dict[str, str]:
        """Other spelling -> field name, from `SYNONYMS` and the singular of each list field."""
        return _spellings(cls)

    @classmethod
    def canonical(cls, data: Any) -> Any:
        """`data` with other spellings renamed to their field (a single value becomes a one-item list for a
        list field, a one-item list a single value for a scalar field); unknown keys are named."""
        if not isinstance(data, dict):
            return data
        other, fields = cls.spellings(), cls.model_fields
        unknown = [k for k in data if k not in fields and k not in other]
        if unknown:
            raise ValueError(f"unknown option(s) {', '.join(map(str, unknown))}; known: {', '.join(fields)}")
        if not any(k in other for k in data):
            return data
        out = {k: v for k, v in data.items() if k not in other}
        for k, v in data.items():
            if k not in other:
                continue
            name = other[k]
            if name in data:
                raise ValueError(f"{k} and {name} are the same option: give it once")
            if _is_list(fields[name]) and v is not None and not isinstance(v, list):
                v = [v]
            elif not _is_list(fields[name]) and isinstance(v, list):
                if len(v) != 1:
                    raise ValueError(f"{name} takes one value, got {len(v)} as {k}")
                v = v[0]
            out[name] = v
        return out

    @model_validator(mode="before")
    @classmethod
    def _other_spellings(cls, data: Any) -> Any:
        return cls.canonical(data)


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
    """One tool, importing first the module named after it (`eval-checkpoint`: `aci.tools.eval_checkpoint`),
    so a CLI call does not pay for every tool's imports; the others only when that is not where it is."""
    module = f"aci.tools.{name.replace('-', '_')}"
    if name not in _REGISTRY and name.replace("-", "_").isidentifier() and importlib.util.find_spec(module):
        importlib.import_module(module)
    found = _REGISTRY.get(name) or tools().get(name)
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
    if not t.read_only:
        gitpython()  # a tool that may write state stops here, before it has done anything, when git is missing
    if ctx.card:
        ctx.settle_clock()
    out = t.fn(inp, ctx)
    ctx.forget()
    out.run = envelope(ctx)
    return out
