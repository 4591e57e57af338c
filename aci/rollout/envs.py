"""Tool environments: where a policy's tool calls are executed.

A *source* lives for the whole run (`running()`), and hands each trajectory an *environment*
(`trajectory()`): the tools' JSON schemas as sent to the policy, and `call(name, arguments, timeout)`.

* `PythonTools("pkg.module" | "path/tools.py")`: the module's tools are either module-level functions
  (those in `__all__`, else every public function defined in the module) or the public methods of the
  object its `make_env()` returns. `make_env()` is called once per trajectory, so tools that change
  state (a database, a file system, a cart) start fresh for every task and trial; the object's
  `close()`, if any, is called at the end. Schemas come from type hints and the docstring (Google-style
  `Args:` or `:param x:` lines), or verbatim from a module-level `TOOLS` list of function definitions
  (then they are sent byte for byte as written).
* `MCPTools(command)`: an MCP server started by command over stdio through the SDK's client. One server
  serves the run (calls may run concurrently); `fresh=True` starts one per trajectory instead, for
  servers that keep state.

Sync Python tools run in daemon threads (`daemon.call`), so a hanging tool times out without blocking
the run or its exit.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import inspect
import json
import re
import shlex
import sys
import typing
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from aci.errors import ACIError
from aci.rollout import daemon


@dataclass
class ToolResult:
    output: str
    error: str | None = None


class ToolEnv(Protocol):
    tools: list[dict]

    def has(self, name: str) -> bool: ...

    async def call(self, name: str, arguments: dict, timeout_s: float) -> ToolResult: ...


class ToolSource(Protocol):
    def describe(self) -> dict[str, Any]: ...

    def running(self) -> typing.AsyncContextManager[None]: ...

    def trajectory(self) -> typing.AsyncContextManager[ToolEnv]: ...


def render_output(value: Any) -> str:
    """A tool's return value as the text the policy reads."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False, default=str)


# -- Python modules --------------------------------------------------------------------------------
_SECTION = re.compile(r"^(Args|Arguments|Parameters|Returns|Return|Raises|Yields|Examples?|Notes?):\s*$")
_ARG_LINE = re.compile(r"^\s*(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SPHINX = re.compile(r"^\s*:param\s+(?:[\w\[\], ]+\s+)?(\w+)\s*:\s*(.*)$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """(description, {argument: description}) from a Google-style or Sphinx-style docstring."""
    lines = inspect.cleandoc(doc or "").splitlines()
    desc: list[str] = []
    args: dict[str, str] = {}
    section, current = None, None
    for line in lines:
        head = _SECTION.match(line.strip()) if not line.startswith((" ", "\t")) else None
        sphinx = _SPHINX.match(line)
        if head:
            section, current = head.group(1), None
        elif sphinx:
            current = sphinx.group(1)
            args[current] = sphinx.group(2).strip()
            section = "sphinx"
        elif section in ("Args", "Arguments", "Parameters"):
            m = _ARG_LINE.match(line)
            indent = len(line) - len(line.lstrip())
            if m and indent <= 4:
                current = m.group(1).lstrip("*")
                args[current] = m.group(2).strip()
            elif current and line.strip():
                args[current] = f"{args[current]} {line.strip()}".strip()
        elif section == "sphinx" and current and line.strip() and not line.lstrip().startswith(":"):
            args[current] = f"{args[current]} {line.strip()}".strip()
        elif section is None:
            desc.append(line)
    return "\n".join(desc).strip(), args


def _drop_titles(schema: Any) -> Any:
    """pydantic adds a `title` to every schema; tool schemas read better (and shorter) without them."""
    if isinstance(schema, dict):
        out = {}
        for k, v in schema.items():
            if k == "title" and isinstance(v, str):
                continue
            if k in ("properties", "$defs") and isinstance(v, dict):
                out[k] = {name: _drop_titles(sub) for name, sub in v.items()}
            else:
                out[k] = _drop_titles(v)
        return out
    if isinstance(schema, list):
        return [_drop_titles(v) for v in schema]
    return schema


def function_schema(name: str, fn: Callable) -> dict[str, Any]:
    """An OpenAI function definition from a function's signature, type hints and docstring."""
    from pydantic import Field, create_model

    sig = inspect.signature(fn)
    hints = typing.get_type_hints(fn)
    description, arg_docs = parse_docstring(fn.__doc__)
    fields: dict[str, Any] = {}
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise ACIError(f"tool {name}: *args/**kwargs cannot be described as a JSON schema; name each argument")
        default = ... if p.default is p.empty else p.default
        fields[p.name] = (hints.get(p.name, Any), Field(default, description=arg_docs.get(p.name)))
    model = create_model(f"{name}_arguments", **fields)
    params = _drop_titles(model.model_json_schema())
    params.setdefault("properties", {})
    return {"type": "function", "function": {"name": name, "description": description, "parameters": params}}


def load_module(spec: str, base: Path):
    """Import `pkg.module` (from the workdir or the installed packages) or a `.py` file (relative to `base`)."""
    if spec.endswith(".py") or "/" in spec or "\\" in spec:
        path = Path(spec)
        path = path if path.is_absolute() else base / path
        if not path.is_file():
            raise ACIError(f"tool module file {path} does not exist")
        name = f"aci_tools_{abs(hash(str(path.resolve())))}"
        mod_spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(mod_spec)
        sys.modules[name] = module
        try:
            mod_spec.loader.exec_module(module)
        except Exception as e:
            sys.modules.pop(name, None)
            raise ACIError(f"tool module {path} failed to import: {type(e).__name__}: {e}") from None
        return module
    if str(base) not in sys.path:  # `pkg.module` is looked up in the workdir too, as `python -m` would
        sys.path.insert(0, str(base))
    try:
        return importlib.import_module(spec)
    except ImportError as e:
        raise ACIError(f"cannot import tool module {spec!r}: {e}") from None


class _PythonEnv:
    def __init__(self, tools: list[dict], fns: dict[str, Callable]):
        self.tools = tools
        self._fns = fns

    def has(self, name: str) -> bool:
        return name in self._fns

    async def call(self, name: str, arguments: dict, timeout_s: float) -> ToolResult:
        fn = self._fns[name]
        try:
            if inspect.iscoroutinefunction(fn):
                value = await asyncio.wait_for(fn(**arguments), timeout_s)
            else:
                value = await asyncio.wait_for(daemon.call(fn, **arguments), timeout_s)
        except asyncio.TimeoutError:
            return ToolResult("", f"tool {name} timed out after {timeout_s:.3g} s")
        except Exception as e:
            return ToolResult("", f"tool {name} raised {type(e).__name__}: {e}")
        return ToolResult(render_output(value))


class PythonTools:
    """Tools defined by a Python module (see the module docstring for the conventions)."""

    def __init__(self, spec: str, base: Path):
        self.spec = spec
        self.module = load_module(spec, base)
        self.factory = getattr(self.module, "make_env", None)
        probe = self._instance()
        fns = self._functions(probe)
        explicit = getattr(self.module, "TOOLS", None)
        if explicit is not None:
            self.tools = self._explicit(explicit, fns)
        else:
            self.tools = [function_schema(name, fn) for name, fn in fns.items()]
        self._close(probe)
        if not self.tools:
            raise ACIError(f"tool module {spec!r} defines no tools: add functions with type hints and "
                           f"docstrings, list them in __all__, or return an object from make_env()")

    def _instance(self) -> Any:
        if self.factory is None:
            return None
        try:
            return self.factory()
        except Exception as e:
            raise ACIError(f"tool module {self.spec!r}: make_env() raised {type(e).__name__}: {e}") from None

    def _functions(self, instance: Any) -> dict[str, Callable]:
        if instance is None:
            names = getattr(self.module, "__all__", None)
            if names is None:
                names = [n for n, f in vars(self.module).items() if inspect.isfunction(f) and not n.startswith("_")
                         and f.__module__ == self.module.__name__ and n != "make_env"]
            return {n: getattr(self.module, n) for n in names if callable(getattr(self.module, n, None))}
        if isinstance(instance, dict):
            return {str(k): v for k, v in instance.items() if callable(v)}
        names = dict.fromkeys(n for cls in reversed(type(instance).__mro__) for n in vars(cls))  # definition order
        return {n: getattr(instance, n) for n in names
                if not n.startswith("_") and n != "close" and callable(getattr(instance, n))}

    def _explicit(self, tools: Any, fns: dict[str, Callable]) -> list[dict]:
        if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
            raise ACIError(f"tool module {self.spec!r}: TOOLS must be a list of function definitions")
        out = []
        for t in tools:
            name = (t.get("function") or t).get("name")
            if name not in fns:
                raise ACIError(f"tool module {self.spec!r}: TOOLS names {name!r} but no function or method has "
                               f"that name (have: {', '.join(sorted(fns)) or 'none'})")
            out.append(t if "function" in t else {"type": "function", "function": t})
        return out

    @staticmethod
    def _close(instance: Any) -> None:
        close = getattr(instance, "close", None)
        if instance is not None and not isinstance(instance, dict) and callable(close):
            close()

    def describe(self) -> dict[str, Any]:
        return {"kind": "python", "module": self.spec, "fresh_per_trajectory": self.factory is not None,
                "tools": [t["function"]["name"] for t in self.tools]}

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        yield

    @asynccontextmanager
    async def trajectory(self) -> AsyncIterator[ToolEnv]:
        instance = self._instance()
        try:
            yield _PythonEnv(self.tools, self._functions(instance))
        finally:
            self._close(instance)


# -- MCP servers -----------------------------------------------------------------------------------
def mcp_tool_def(tool: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": tool.name, "description": tool.description or "",
                                             "parameters": tool.input_schema or {"type": "object", "properties": {}}}}


def mcp_output(result: Any) -> str:
    texts = []
    for block in result.content or []:
        text = getattr(block, "text", None)
        texts.append(text if isinstance(text, str) else json.dumps(block.model_dump(mode="json", exclude_none=True)))
    if not texts and result.structured_content is not None:
        texts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(texts)


class _MCPEnv:
    def __init__(self, client: Any, tools: list[dict]):
        self._client = client
        self.tools = tools
        self._names = {t["function"]["name"] for t in tools}

    def has(self, name: str) -> bool:
        return name in self._names

    async def call(self, name: str, arguments: dict, timeout_s: float) -> ToolResult:
        try:
            result = await asyncio.wait_for(
                self._client.call_tool(name, arguments, read_timeout_seconds=timeout_s), timeout_s + 1)
        except asyncio.TimeoutError:
            return ToolResult("", f"tool {name} timed out after {timeout_s:.3g} s")
        except Exception as e:
            return ToolResult("", f"tool {name} failed: {type(e).__name__}: {e}")
        text = mcp_output(result)
        return ToolResult("", text or f"tool {name} reported an error") if result.is_error else ToolResult(text)


class MCPTools:
    """Tools of an MCP server started by `command` (a list, or a string split like a shell would)."""

    def __init__(self, command: list[str] | str, cwd: Path, *, fresh: bool = False, env: dict | None = None):
        argv = shlex.split(command) if isinstance(command, str) else list(command)
        if not argv:
            raise ACIError("mcp command is empty; give the server's command line, e.g. 'python server.py'")
        self.argv = argv
        self.cwd = cwd
        self.fresh = fresh
        self.env = env
        self._shared: _MCPEnv | None = None

    def describe(self) -> dict[str, Any]:
        return {"kind": "mcp", "command": self.argv, "fresh_per_trajectory": self.fresh}

    @asynccontextmanager
    async def _connect(self) -> AsyncIterator[_MCPEnv]:
        from mcp import Client, StdioServerParameters

        params = StdioServerParameters(command=self.argv[0], args=self.argv[1:], cwd=str(self.cwd), env=self.env)
        async with AsyncExitStack() as stack:
            try:
                client = await stack.enter_async_context(Client(params))
            except Exception as e:
                raise ACIError(f"could not start the MCP server `{shlex.join(self.argv)}`: "
                               f"{type(e).__name__}: {e}") from None
            tools, cursor = [], None
            while True:
                listing = await client.list_tools(cursor=cursor)
                tools += [mcp_tool_def(t) for t in listing.tools]
                cursor = listing.next_cursor
                if not cursor:
                    break
            yield _MCPEnv(client, tools)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        if self.fresh:
            yield
            return
        async with self._connect() as env:
            self._shared = env
            try:
                yield
            finally:
                self._shared = None

    @asynccontextmanager
    async def trajectory(self) -> AsyncIterator[ToolEnv]:
        if self._shared is not None:
            yield self._shared
            return
        async with self._connect() as env:
            yield env
