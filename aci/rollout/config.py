"""What a caller asks of a rollout (`RolloutRequest`) and what a run executes (`RolloutConfig`), defined once.

Both share `RolloutOptions` (policy, tools, limits, thresholds: each default and bound written here only)
and the generation settings of `aci.rollout.policy.Sampling`. The `run-trajectory` tool's input is
`ToolInput` plus the request; `config()` resolves a request into the config that `aci.rollout.runner`
runs inline or as a job and saves as `<out>/config.json`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from aci.context import Context
from aci.errors import ACIError
from aci.rollout.policy import Sampling, Settings
from aci.state import read_json

CONFIG = "config.json"


class RolloutOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    endpoint: str | None = Field(None, description="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1")
    model: str | None = Field(None, description="model name sent to the endpoint (default: the one it serves)")
    hf_model: str | None = Field(None, description="local Hugging Face model folder (slow; small runs)")
    serve_model: str | None = Field(None, description="start `vllm serve` for this model for the run, stop it after")
    serve_port: int = Field(8000, ge=1024, le=65535, description="port for vllm serve on 127.0.0.1")
    serve_args: list[str] = Field(default_factory=list, description="extra `vllm serve` arguments (no --host)")
    serve_wait_s: float = Field(900, gt=0, description="how long to wait for vllm to answer")
    tools: str | None = Field(None, description="Python tool module (pkg.module or path/tools.py)")
    mcp_command: str | None = Field(None, description="command starting an MCP tool server over stdio")
    mcp_fresh: bool = Field(False, description="start a new MCP server per trajectory (servers that keep state)")
    system_prompt: str | None = Field(None, description="system prompt for tasks without one (sent and exported verbatim)")
    trials: int = Field(1, ge=1, le=20, description="independent passes over the tasks (3-5 give a range)")
    concurrency: int = Field(8, ge=1, le=512, description="tasks in flight at once")
    limit: int | None = Field(None, ge=1, description="use only the first N tasks")
    max_turns: int = Field(8, ge=1, le=100, description="policy calls per task")
    max_tool_calls: int = Field(16, ge=0, le=1000, description="tool calls per task")
    time_limit_s: float = Field(300, gt=0, description="seconds per task (policy and tools)")
    tool_timeout_s: float = Field(60, gt=0, description="seconds per tool call")
    request_timeout_s: float = Field(120, gt=0, description="seconds per endpoint request attempt")
    retries: int = Field(3, ge=0, le=10, description="endpoint retries on 5xx, 429 and connection errors")
    success_threshold: float = Field(1.0, ge=0, le=1, description="score that counts as a successful task")
    min_reward: float | None = Field(None, ge=0, le=1, description="export threshold (default: success threshold)")
    max_per_task: int | None = Field(None, ge=1, description="export at most N kept samples per task (easy tasks "
                                     "solved in every trial would otherwise dominate)")
    unsafe_grader: bool = Field(False, description="let unit-tests run the policy's code as root where no sandbox can "
                                                   "drop root (rule sandbox; journaled as a weakening)")


class RolloutRequest(RolloutOptions, Sampling):
    tasks: str | None = Field(None, description="task file (JSONL or JSON array of task records, chat rows, "
                                                 "question/answer rows)")
    grader: str | None = Field(None, description="grader for tasks that name none (e.g. final-answer, tool-call)")
    settings: dict[str, Any] | None = Field(None, description="more generation fields passed to the endpoint as is")
    out: str | None = Field(None, description="output folder (default rollouts/<tasks file stem>)")


class RolloutConfig(RolloutOptions):
    """Everything a run needs, resolved (absolute paths), as saved in `<out>/config.json`."""

    tasks: str
    out: str
    grader: str | dict | None = None
    settings: Settings = Field(default_factory=Settings)

    @property
    def out_dir(self) -> Path:
        return Path(self.out)

    def fingerprint(self, policy: dict[str, Any], tools: dict[str, Any] | None) -> dict[str, Any]:
        return {"policy": {"kind": policy["kind"], "model": policy["model"]},
                "settings": self.settings.model_dump(mode="json"), "system_prompt": self.system_prompt,
                "tools": tools, "grader": self.grader}

    def trajectories(self) -> int:
        """Task trajectories the run rolls: tasks (up to `limit`) times trials."""
        from aci.tasks import read_rows

        n = sum(1 for _ in read_rows(self.tasks))
        return min(n, self.limit or n) * self.trials

    @classmethod
    def read(cls, path: Path) -> RolloutConfig | None:
        """A saved config (the fields beside it, such as the fingerprint, are left out); None if absent."""
        raw = read_json(path)
        return None if raw is None else cls.model_validate({k: v for k, v in raw.items() if k in cls.model_fields})


def config(req: RolloutRequest, ctx: Context) -> RolloutConfig:
    """The run's config from a request: paths resolved inside the roots, sampling fields gathered."""
    if not req.tasks:
        raise ACIError("run needs --tasks FILE")
    tasks = ctx.path(req.tasks, must_exist=True, what="tasks file")
    out = ctx.path(req.out or f"rollouts/{tasks.stem}", what="output folder", kind="folder")
    settings = Settings(**req.model_dump(include=set(Sampling.model_fields)), extra=req.settings or {})
    return RolloutConfig(**req.model_dump(include=set(RolloutOptions.model_fields)), tasks=str(tasks), out=str(out),
                         grader=req.grader, settings=settings)


def saved(ctx: Context, out: str | None, action: str) -> RolloutConfig:
    """The config of an existing output folder (for status and export)."""
    if not out:
        raise ACIError(f"{action} needs --out (the rollout's output folder)")
    folder = ctx.path(out, must_exist=True, what="output folder")
    cfg = RolloutConfig.read(folder / CONFIG)
    if cfg is None:
        raise ACIError(f"{folder} has no {CONFIG}: not a run-trajectory output folder")
    return cfg.model_copy(update={"out": str(folder)})
