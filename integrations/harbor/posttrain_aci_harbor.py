"""posttrain-aci as Harbor agents: `harbor run --agent posttrain_aci_harbor:ClaudeCodeACI` (or CodexACI, OpenCodeACI).

PostTrainBench v1.2 runs on Harbor, which has no solve.sh: a bundle plugs in as a custom agent class. Each
class here subclasses Harbor's own installed agent for its CLI, so the CLI is installed, authenticated and
launched exactly as Harbor's built-in agent does it, and adds the bundle around that launch:

- setup (`configure`, which Harbor runs after installing the CLI, also with `skip_install`): uploads the
  bundle packed beside this module (`pack.sh harbor DIR`: common.sh, sandbox.sh, the posttrain-aci and pip
  wheels) and runs `sandbox.sh setup` in the task's workspace: the same venv, install and `aci install` steps
  as the PostTrainBench solve.sh files, which never change the image's ML stack. A failed setup is logged
  and the agent runs without the bundle, with the task's instruction unchanged;
- run: `aci plan init` with the model and benchmark read from the instruction and the deadline from the
  task's timer.sh (which reads /timer_start, written by the task's healthcheck before setup); the pointer
  line added to the instruction; then Harbor's own run; finally, also when the run failed or Harbor
  cancelled it at its time limit, `sandbox.sh end`: the journal's last entry says how the run ended, and
  what setup installed (skills, pointer, .aci/, registrations) is taken out before Harbor collects the
  workspace for the verifier, whose judges would read it as instructions. final_model (a mounted volume in
  the PostTrainBench tasks) and state/ are never touched.

Where each CLI reads the registration under Harbor's launch: Claude Code and OpenCode read the workspace's
`.mcp.json` (approved in `.claude/settings.json`) and `opencode.json`, which `aci install` writes; Harbor's
Codex runs with a CODEX_HOME of its own whose config.toml it writes just before the launch, so CodexACI
merges the server entry `aci install codex` wrote (with the variables Codex must pass it) into that file,
and Codex reads the skills from the workspace's `.codex/skills`.

The module needs only Harbor and the standard library: Harbor imports it in its own environment (Python
3.12 or newer), where posttrain-aci is not installed; put the folder pack.sh wrote on PYTHONPATH.
"""

from __future__ import annotations

import asyncio
import shlex
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

import tomllib
from harbor.agents.installed.claude_code import ClaudeCode
from harbor.agents.installed.codex import Codex
from harbor.agents.installed.opencode import OpenCode
from harbor.environments.base import BaseEnvironment
from harbor.models.agent.context import AgentContext

BUNDLE = Path(__file__).resolve().with_name("posttrain_aci_bundle")
REMOTE_BUNDLE = PurePosixPath("/tmp/posttrain_aci_bundle")
SERVER = "posttrain-aci"
SETUP_TIMEOUT_S = 1000  # sandbox.sh stops its own setup after ACI_SETUP_TIMEOUT (900 s) and still answers
END_TIMEOUT_S = 120


class _PosttrainACI:
    """What the three agent classes share; the CLI's own behaviour comes from Harbor's class after it."""

    ACI_AGENT: ClassVar[str]
    DEFAULT_SETUP_TIMEOUT_SEC: ClassVar[float] = 1200.0  # the CLI's install plus our setup's own limit

    def __init__(self, *args: Any, bundle: str | None = None, **kwargs: Any):
        self.aci_bundle = Path(bundle).expanduser().resolve() if bundle else BUNDLE
        wheels = sorted(p.name for p in self.aci_bundle.glob("*.whl")) if self.aci_bundle.is_dir() else []
        if not any(w.startswith("posttrain_aci-") for w in wheels) or not (self.aci_bundle / "sandbox.sh").is_file():
            raise FileNotFoundError(
                f"no posttrain-aci bundle in {self.aci_bundle}: write one with "
                "`bash integrations/posttrainbench/pack.sh harbor DIR` and put DIR on PYTHONPATH "
                "(or pass --ak bundle=DIR/posttrain_aci_bundle)")
        self.aci_pointer: str | None = None  # set once the bundle works
        self.aci_uploaded = False  # then `end` runs after the agent, whatever setup left behind
        super().__init__(*args, **kwargs)

    async def _aci(self, environment: BaseEnvironment, action: str, *rest: str, env: dict[str, str] | None = None,
                   timeout_sec: int = END_TIMEOUT_S):
        """`sandbox.sh ACTION AGENT ...` in the sandbox, from the task's working directory."""
        command = shlex.join(["bash", str(REMOTE_BUNDLE / "sandbox.sh"), action, self.ACI_AGENT, *rest])
        return await environment.exec(command=command, env=env, timeout_sec=timeout_sec)

    async def configure(self, environment: BaseEnvironment) -> None:
        await super().configure(environment)
        await environment.exec(command=f"mkdir -p {REMOTE_BUNDLE}")
        for path in sorted(self.aci_bundle.iterdir()):
            await environment.upload_file(path, str(REMOTE_BUNDLE / path.name))
        self.aci_uploaded = True
        result = await self._aci(environment, "setup", timeout_sec=SETUP_TIMEOUT_S)
        lines = (result.stdout or "").strip().splitlines()
        if result.return_code == 0 and lines:
            self.aci_pointer = lines[-1]
            await self.aci_registered(environment)
        else:
            self.logger.warning("posttrain-aci setup failed (status %s): the agent runs without it. %s",
                                result.return_code, (result.stderr or "")[-2000:])

    async def aci_registered(self, environment: BaseEnvironment) -> None:
        """After setup: pick up what `aci install` wrote that Harbor's launch would not see."""

    async def run(self, instruction: str, environment: BaseEnvironment, context: AgentContext) -> None:
        if self.aci_pointer:
            await self._aci(environment, "plan", env={"PROMPT": instruction})
            instruction = f"{instruction}\n\n{self.aci_pointer}"
        how = "the agent exited"
        try:
            await super().run(instruction, environment, context)
        except asyncio.CancelledError:
            how = "Harbor stopped the agent (its time limit ran out, or the trial was cancelled)"
            raise
        except Exception as e:
            how = f"the agent exited with an error ({type(e).__name__})"
            raise
        finally:
            if self.aci_uploaded:
                try:
                    result = await self._aci(environment, "end", how)
                    failed = result.stderr if result.return_code != 0 else None
                except Exception as e:  # the sandbox may be gone; the trial's own outcome stands
                    failed = repr(e)
                if failed is not None:
                    self.logger.warning("posttrain-aci cleanup failed: %s", (failed or "")[-2000:])


class ClaudeCodeACI(_PosttrainACI, ClaudeCode):
    """Harbor's Claude Code with the bundle; summarised thinking and high effort unless told otherwise (as
    the PostTrainBench solve.sh runs Claude Code), and its 10-hour Bash timeout."""

    ACI_AGENT = "claude-code"

    def __init__(self, *args: Any, extra_env: dict[str, str] | None = None, **kwargs: Any):
        kwargs.setdefault("thinking_display", "summarized")
        kwargs.setdefault("reasoning_effort", "high")
        super().__init__(*args, extra_env={"BASH_MAX_TIMEOUT_MS": "36000000", **(extra_env or {})}, **kwargs)


class CodexACI(_PosttrainACI, Codex):
    """Harbor's Codex with the bundle; the MCP server joins the config.toml Harbor writes into its CODEX_HOME."""

    ACI_AGENT = "codex"
    aci_server: dict[str, Any] | None = None

    async def aci_registered(self, environment: BaseEnvironment) -> None:
        result = await environment.exec(command="cat .codex/config.toml")
        if result.return_code == 0:
            self.aci_server = tomllib.loads(result.stdout or "").get("mcp_servers", {}).get(SERVER)

    def _build_effective_config(self, openai_base_url: str | None) -> dict[str, Any]:
        config = super()._build_effective_config(openai_base_url)
        if self.aci_server:
            config.setdefault("mcp_servers", {})[SERVER] = self.aci_server
        return config


class OpenCodeACI(_PosttrainACI, OpenCode):
    """Harbor's OpenCode with the bundle (it reads the workspace's opencode.json beside Harbor's own)."""

    ACI_AGENT = "opencode"
