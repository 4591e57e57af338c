"""The MCP surface: every registered tool, plus the Markdown as resources and the workflows as prompts.

No logic lives here. Each tool becomes an MCP tool whose parameters are the input model's fields and
whose structured result is the output model; `ACIError` becomes a `ToolError` the model can read, and so
does any other exception (a bug), as its type and message.
Blocking tool work runs in a worker thread so the server keeps answering.

Over HTTP the tools start jobs and commands on this machine, so the server binds to loopback (another
address needs `allow_remote`), answers only requests whose Host and Origin name its own address (a web
page that rebinds its DNS name to loopback is refused), and every request must carry a bearer token,
generated at start unless one is given in a file or the environment (any local user can reach a
loopback port).
"""

from __future__ import annotations

import hmac
import inspect
import logging
from typing import TYPE_CHECKING, Annotated, Any

from aci import __version__
from aci.errors import ACIError

if TYPE_CHECKING:
    from aci import registry

log = logging.getLogger("aci.server")

# `aci serve`'s options (aci/commands.py) take their defaults and help from these, so importing this module
# stays cheap: the registry, the tools and the SDK load only when a server is built.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
TOKEN_ENV = "ACI_HTTP_TOKEN"

INSTRUCTIONS = (
    "Post-training tools with a clock and rules. Start with `status`; if there is no run card, call `plan` "
    "with action=init. Read resource skill://posttrain (the entry skill) for the workflow. Every result "
    "carries time left, the best checkpoint and reminders: act on the reminders."
)


def build(state: str | None = None, workdir: str | None = None):
    """The MCP server. Its tools are handed to the SDK's constructor as `Tool`s built here, so nothing reaches
    into the server's private tool manager to adjust them after registration."""
    from mcp.server import MCPServer

    from aci import registry
    from aci.install import SERVER

    tools = [_tool(t, state, workdir) for t in registry.tools().values()]
    server = MCPServer(name=SERVER, version=__version__, instructions=INSTRUCTIONS, tools=tools)
    _add_markdown(server)
    return server


def _tool(t: registry.Tool, state: str | None, workdir: str | None):
    """The SDK's `Tool` for a registered tool: a function whose signature is the input model's fields (the
    SDK derives `inputSchema` from it) and whose return type is the output model (`outputSchema`), with
    the argument handling of `_arguments`."""
    import anyio
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.server.mcpserver.tools import Tool
    from mcp.types import ToolAnnotations

    from aci import registry
    from aci.context import Context

    async def run(**kwargs: Any):
        def work():
            return registry.call(t.name, kwargs, Context(state=state, workdir=workdir))

        try:
            return await anyio.to_thread.run_sync(work)
        except ACIError as e:
            raise ToolError(_readable(str(e))) from None
        except Exception as e:  # a bug: the agent still reads what broke (the traceback goes to the log)
            log.exception("tool %s failed", t.name)
            raise ToolError(_readable(f"{type(e).__name__}: {e} (an unexpected error in aci; the server's "
                                      f"log has the traceback)")) from None

    params = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[field.annotation, field])
        for name, field in t.input.model_fields.items()
    ]
    run.__signature__ = inspect.Signature(params, return_annotation=t.output)
    run.__name__ = t.name.replace("-", "_")
    made = Tool.from_function(
        run,
        name=t.name,
        title=t.title,
        description=t.description,
        annotations=ToolAnnotations(
            title=t.title,
            read_only_hint=t.read_only,
            destructive_hint=t.destructive,
            idempotent_hint=t.idempotent,
            open_world_hint=t.open_world,
        ),
        structured_output=True,
    )
    return made.model_copy(update={"fn_metadata": _arguments(made.fn_metadata, t.input)})


def _readable(text: str) -> str:
    """The text with any lone surrogate (from a file name that is not UTF-8) escaped, since the answer
    must be encodable as UTF-8 JSON."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _arguments(meta, inp: type[registry.ToolInput]):
    """The SDK's argument handling with two changes: unknown keys are named (`_strict`), and a text field
    keeps the text it was given. The SDK parses every string that looks like JSON for a field not typed
    exactly `str`, so a JSON grader spec given to `grader: str | None` arrived as a dict and was refused
    ("Input should be a valid string"); lists and objects given as JSON text still parse as before.

    The one place that leans on the SDK past its public surface: it has no option for either change, so
    this subclasses `FuncMetadata` (the type of `Tool.fn_metadata`) and overrides `pre_parse_json`, which
    its `validate_arguments` calls. `tests/test_server.py` pins both facts against the installed SDK."""
    from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata

    class Arguments(FuncMetadata):
        def pre_parse_json(self, data: dict[str, Any]) -> dict[str, Any]:
            parsed = super().pre_parse_json(data)
            fields = self.arg_model.model_fields
            return {k: data[k] if k in fields and _takes_text(fields[k].annotation) else v for k, v in parsed.items()}

    return Arguments(arg_model=_strict(meta.arg_model, inp), output_schema=meta.output_schema,
                     output_model=meta.output_model, wrap_output=meta.wrap_output)


def _takes_text(annotation: Any) -> bool:
    """Whether a field accepts a plain string (`str`, `str | None`, a union with `str`)."""
    import types
    import typing

    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    return annotation is str or union and str in typing.get_args(annotation)


def _strict(arg_model: type, inp: type[registry.ToolInput]) -> type:
    """The SDK's argument model drops keys it does not know, so a typo or another spelling of an option
    would vanish before the tool saw it: name unknown keys, and rename other spellings to their field."""
    from pydantic import ConfigDict, model_validator

    class Args(arg_model):
        model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

        @model_validator(mode="before")
        @classmethod
        def _one_vocabulary(cls, data: Any) -> Any:
            return inp.canonical(data)

    Args.__name__ = arg_model.__name__
    return Args


def _add_markdown(server) -> None:
    """Serve SKILL.md, each skill with its reference files, the workflows and the integrity rules from the
    files the agents read, each under its own description; the workflows also as prompts with named
    arguments (`aci.prompts`)."""
    from mcp.server.mcpserver.resources import FunctionResource

    from aci import bundle, prompts

    for doc in bundle.documents():
        server.add_resource(FunctionResource(
            uri=doc.uri, name=doc.name, description=doc.description, mime_type="text/markdown",
            fn=(lambda p=doc.path: p.read_text(encoding="utf-8")),
        ))
    for prompt in prompts.workflow_prompts():
        server.add_prompt(prompt)


LOOPBACK = ("127.0.0.1", "localhost", "::1")  # the names a loopback server also answers to
WILDCARDS = ("0.0.0.0", "::", "")


def check_http_host(host: str, allow_remote: bool) -> None:
    """Refuse to serve the tools beyond loopback unless asked to explicitly (a bearer token always guards them)."""
    from aci.rules import is_loopback

    if not is_loopback(host) and not allow_remote:
        raise ACIError(f"--host {host} would let any client that reaches this machine start training jobs and "
                       f"commands; serve on {DEFAULT_HOST}, or pass --allow-remote (every request must then carry the "
                       f"bearer token)")


def http_token(token_file: str | None) -> tuple[str, bool]:
    """The bearer token every HTTP request must carry and whether it was generated here: from `token_file`,
    else the environment's `TOKEN_ENV`, else a new random one. Never an argument, which any local user can read in the
    process list."""
    import os
    import secrets
    from pathlib import Path

    if token_file:
        try:
            given = Path(token_file).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as e:
            raise ACIError(f"--token-file {token_file}: cannot be read ({e})") from None
        if not given:
            raise ACIError(f"--token-file {token_file} is empty")
        return given, False
    if os.environ.get(TOKEN_ENV):
        return os.environ[TOKEN_ENV], False
    return secrets.token_urlsafe(32), True


def transport_security(host: str, port: int, extra_hosts: tuple[str, ...] = ()):
    """Host and Origin headers the server answers: its bound address (with `localhost` when that is
    127.0.0.1 or ::1; the machine's names when bound to every interface) and `extra_hosts`. A page that
    rebinds its own DNS name to this address still sends its own name, and is refused. The SDK sets this
    for 127.0.0.1, localhost and ::1 alone, and for no other address (127.0.0.2 answered any Host)."""
    import socket

    from mcp.server.transport_security import TransportSecuritySettings

    names = [host]
    if host in LOOPBACK:
        names += LOOPBACK
    if host in WILDCARDS:
        names += [socket.gethostname(), socket.getfqdn(), *LOOPBACK]
    names = list(dict.fromkeys(n for n in [*names, *extra_hosts] if n not in WILDCARDS))
    hosts = [f"[{n}]:{port}" if ":" in n else f"{n}:{port}" for n in names]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                     allowed_origins=[f"http://{h}" for h in hosts])


class BearerAuth:
    """ASGI middleware: an HTTP request without `Authorization: Bearer <token>` gets 401."""

    def __init__(self, app, token: str):
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain"), (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": b"missing or wrong bearer token\n"})
                return
        await self.app(scope, receive, send)


def serve(state: str | None, workdir: str | None, http: bool = False, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
          *, allow_remote: bool = False, token_file: str | None = None, allowed_hosts: tuple[str, ...] = ()) -> None:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if not http:
        build(state, workdir).run()
        return
    check_http_host(host, allow_remote)
    token, generated = http_token(token_file)
    import sys

    import uvicorn

    app = build(state, workdir).streamable_http_app(host=host, transport_security=transport_security(
        host, port, allowed_hosts))
    if generated:  # once, on stderr: the one who started the server hands it to the client
        print(f"aci serve: clients must send the header 'Authorization: Bearer {token}' (a new token each start; "
              f"set {TOKEN_ENV} or --token-file to choose one)", file=sys.stderr, flush=True)
    uvicorn.run(BearerAuth(app, token), host=host, port=port, log_level="warning")
