"""What a policy is to the loop: build the exact request, answer it with a `Reply`.

Two steps rather than one so the loop can record the request *before* sending it: a call that fails
(500s, timeouts) still leaves the request it failed on in the trace. Both policies (`endpoint`,
`hf_policy`) produce the same `Reply`: the assistant message to append to the history (content a
string, tool calls OpenAI-style with their arguments exactly as emitted), plus parsed calls and usage.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from aci.sampling import MaxNewTokens, Temperature, TopP


class Sampling(BaseModel):
    """The sampling fields a caller sets (`run-trajectory --temperature ...`), defined once; their ranges
    are `aci.sampling`'s, as for every tool that samples."""

    model_config = ConfigDict(extra="forbid")

    temperature: Temperature | None = Field(None, description="sampling temperature (0 = greedy)")
    top_p: TopP | None = None
    max_tokens: MaxNewTokens | None = Field(None, description="new tokens per reply")
    seed: int | None = Field(None, description="seed of trial 1 (trial k uses seed + k - 1)")


class Settings(Sampling):
    """Generation settings, recorded with each trial and sent with each request."""

    stop: list[str] | None = None
    extra: dict[str, Any] = Field(default_factory=dict, description="passed through to the endpoint body as is")

    def for_trial(self, trial: int) -> Settings:
        """The settings of trial `trial` (1-based): the same, except the seed, which moves on by one."""
        return self if self.seed is None else self.model_copy(update={"seed": self.seed + trial - 1})

    def body(self) -> dict[str, Any]:
        """The settings as chat-completions body fields (unset ones omitted, so server defaults apply)."""
        out = self.model_dump(exclude={"extra"}, exclude_none=True)
        return {**out, **self.extra}


@dataclass
class Call:
    """One tool call as the policy emitted it; `arguments` is None when the raw text is not a JSON object."""

    id: str
    name: str
    arguments_raw: str
    arguments: dict[str, Any] | None
    parse_error: str | None = None


@dataclass
class Reply:
    message: dict[str, Any]
    calls: list[Call]
    malformed: list[str] = field(default_factory=list)  # tool-call blocks that could not be read
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    attempts: int = 1
    retry_errors: list[str] = field(default_factory=list)

    @property
    def content(self) -> str:
        return self.message.get("content") or ""


class PolicyError(Exception):
    """The policy gave no usable reply (after bounded retries); the trace records why and how often."""

    def __init__(self, message: str, attempts: int = 1, retry_errors: list[str] | None = None):
        super().__init__(message)
        self.attempts = attempts
        self.retry_errors = retry_errors or []


class Policy(Protocol):
    kind: str
    model: str

    def describe(self) -> dict[str, Any]: ...

    def request(self, messages: list[dict], tools: list[dict] | None, settings: Settings) -> dict[str, Any]: ...

    async def complete(self, request: dict[str, Any]) -> Reply: ...

    async def aclose(self) -> None: ...


def parse_arguments(raw: Any) -> tuple[str, dict[str, Any] | None, str | None]:
    """(raw text, parsed object or None, why not) for arguments given as a JSON string or an object."""
    if isinstance(raw, dict):
        return json.dumps(raw, ensure_ascii=False), raw, None
    if not isinstance(raw, str):
        return json.dumps(raw), None, f"arguments must be a JSON object, got {type(raw).__name__}"
    try:
        value = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as e:
        return raw, None, f"arguments are not valid JSON: {e.msg} at char {e.pos}"
    if not isinstance(value, dict):
        return raw, None, f"arguments must be a JSON object, got {type(value).__name__}"
    return raw, value, None


def assistant_message(content: str | None, calls: list[Call]) -> dict[str, Any]:
    """The assistant turn as it goes back into the history (and, later, into an SFT sample)."""
    msg: dict[str, Any] = {"role": "assistant", "content": content or ""}
    if calls:
        msg["tool_calls"] = [{"id": c.id, "type": "function",
                              "function": {"name": c.name, "arguments": c.arguments_raw}} for c in calls]
    return msg
