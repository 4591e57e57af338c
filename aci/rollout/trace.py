"""The recorded hierarchy: Trial > Task > Turn > Step.

* A **trial** is one pass over the task set under fixed settings; its tasks go to `trial-<k>.jsonl`,
  one `TaskTrace` per line, appended as each task ends (a kill loses only tasks still running).
* A **task** trace holds the turns, the grade and the task-level outcome.
* A **turn** is one policy call: the exact request it saw (messages, tools, settings), its reply, and
  the steps the reply issued. Tool outputs go back to the policy in the next turn's request.
* A **step** is one atomic action of a reply: a tool call (with its output or error and step marks),
  or the reply's text (`kind="message"`).

The loop builds these models; `metrics` reads them back; `export` turns the last request plus the last
reply into a training sample, so what is trained on is byte for byte what the policy was sent.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

StopReason = Literal["final", "max-turns", "max-tool-calls", "time-limit", "policy-error", "no-environment"]


class Step(BaseModel):
    index: int = Field(description="position within the task (0-based, across turns)")
    kind: Literal["tool_call", "message"]
    text: str | None = Field(None, description="message steps: the reply's text")
    call_id: str | None = None
    name: str | None = Field(None, description="tool name as the policy wrote it")
    arguments_raw: str | None = Field(None, description="arguments exactly as the policy emitted them")
    arguments: dict[str, Any] | None = Field(None, description="parsed arguments (None when not a JSON object)")
    output: str | None = Field(None, description="what the tool returned (sent back to the policy)")
    error: str | None = Field(None, description="tool raised, timed out, unknown tool, bad arguments, limit")
    executed: bool = Field(False, description="the tool was actually invoked")
    duration_s: float = 0.0
    # step marks (None = not computable for this step)
    unknown_tool: bool | None = None
    invalid_arguments: bool | None = None
    invalid_reason: str | None = None
    error_ignored: bool | None = Field(None, description="after this step's error, the policy went on as if it had not happened")
    correct_tool: bool | None = Field(None, description="right tool: a gold call's name, else a tool that was offered")
    correct_arguments: bool | None = Field(None, description="arguments equal a gold call's, else valid against the schema")
    correct: bool | None = Field(None, description="counts for tool-call precision")
    basis: Literal["gold", "schema"] | None = Field(None, description="what correctness was judged against")


class Turn(BaseModel):
    index: int
    request: dict[str, Any] = Field(description="exactly what the policy was sent: messages, tools, settings")
    reply: dict[str, Any] | None = Field(None, description="the assistant message as received (None on failure)")
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    attempts: int = 1
    error: str | None = Field(None, description="the policy call failed (after retries) or timed out")
    retry_errors: list[str] = Field(default_factory=list)
    steps: list[Step] = Field(default_factory=list)


class TaskTrace(BaseModel):
    trial: int
    task_id: str
    task_type: str | None = None
    subtype: str | None = None
    started_at: str
    duration_s: float
    stop_reason: StopReason
    error: str | None = None
    turns: list[Turn] = Field(default_factory=list)
    final_text: str = ""
    tool_calls: list[dict[str, Any]] = Field(default_factory=list, description="parsed calls given to the grader")
    score: float = Field(ge=0, le=1)
    reason: str
    success: bool = Field(description="score >= the run's success threshold")

    def steps(self) -> list[Step]:
        return [s for t in self.turns for s in t.steps]
