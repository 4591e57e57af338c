"""Load the posttrain-aci agent classes through Harbor's own agent factory and render what they run in a
sandbox, without a sandbox: the CLI install (which fetches the CLI from the internet), our setup, Harbor's
launch line and our end. Runs in Harbor's environment: `python -m tests.harbor_render BUNDLE_PARENT OUT.json`
(tests/test_harbor.py); tests/harbor_sandbox.py runs the same for real.

The environment here only records. Each command gets exit status 0 and no output, except: Codex's uid
probe gets root's ids, as in the PostTrainBench image; `sandbox.sh setup` prints a pointer line (or fails,
for the case `setup-fails`); `cat .codex/config.toml` shows the entry `aci install codex` writes.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

from harbor.agents.factory import AgentFactory
from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.models.agent.context import AgentContext
from harbor.models.task.config import EnvironmentConfig
from harbor.models.trial.config import AgentConfig
from harbor.models.trial.paths import TrialPaths

CLASSES = {"ClaudeCodeACI": "anthropic/claude-opus-4-5", "CodexACI": "openai/gpt-5", "OpenCodeACI": "openai/gpt-5"}
INSTRUCTION = "We want to train the small LLM \\`Qwen/Qwen3-1.7B-Base\\` to excel at GSM8K."
POINTER = "Before anything else, read .aci/SKILL.md and follow it (rendered)."
CODEX_ENTRY = ('[mcp_servers.posttrain-aci]\ncommand = "/root/.posttrain-aci/venv/bin/python"\n'
               'args = ["-m", "aci.cli", "--workdir", "/home/agent/workspace", "serve"]\nenv_vars = ["HF_HOME"]\n'
               'startup_timeout_sec = 60\nrequired = true\n')


class Recorder(BaseEnvironment):
    log: list[dict]
    setup_status: int

    @staticmethod
    def type() -> str:
        return "recorder"

    def _validate_definition(self):
        pass

    async def start(self, force_build: bool) -> None:
        pass

    async def stop(self, delete: bool):
        pass

    async def exec(self, command, cwd=None, env=None, timeout_sec=None, user=None) -> ExecResult:
        self.log.append({"command": command, "env": env or {}})
        status, stdout = 0, ""
        if "CODEX_RUNTIME_ID" in command:
            stdout = "\nCODEX_RUNTIME_ID 0 0\n"
        elif "sandbox.sh setup" in command:
            status, stdout = self.setup_status, POINTER if self.setup_status == 0 else ""
        elif command == "cat .codex/config.toml":
            stdout = CODEX_ENTRY
        return ExecResult(stdout=stdout, stderr="", return_code=status)

    async def upload_file(self, source_path, target_path):
        text = Path(source_path).read_text() if str(target_path).endswith(".toml") else None
        self.log.append({"upload": str(target_path), "text": text})

    async def upload_dir(self, source_dir, target_dir):
        self.log.append({"upload": f"{target_dir}/"})

    async def download_file(self, source_path, target_path):
        pass

    async def download_dir(self, source_dir, target_dir):
        pass


def recorder(work: Path, name: str, setup_status: int = 0) -> Recorder:
    env = Recorder(environment_dir=work, environment_name=name, session_id=name, trial_paths=TrialPaths(work / name),
                   task_env_config=EnvironmentConfig())
    env.log, env.setup_status = [], setup_status
    return env


async def render(name: str, model: str, work: Path, setup_status: int = 0) -> dict:
    config = AgentConfig(name=f"posttrain_aci_harbor:{name}", model_name=model)
    agent = AgentFactory.create_agent_from_config(config, logs_dir=work / name)
    install, env = recorder(work, name), recorder(work, name, setup_status)
    await agent.install(install)
    await agent.configure(env)
    await agent.run(INSTRUCTION, env, AgentContext())
    return {"mro": [f"{c.__module__}:{c.__qualname__}" for c in type(agent).__mro__], "name": agent.name(),
            "setup_timeout": type(agent).DEFAULT_SETUP_TIMEOUT_SEC, "install": [e["command"] for e in install.log],
            "sandbox": env.log}


async def main(out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        found = {name: await render(name, model, work) for name, model in CLASSES.items()}
        found["setup-fails"] = await render("ClaudeCodeACI", CLASSES["ClaudeCodeACI"], work / "failing", 1)
        try:
            AgentFactory.create_agent_from_config(AgentConfig(name="posttrain_aci_harbor:ClaudeCodeACI",
                                                              kwargs={"bundle": tmp}), logs_dir=work)
        except FileNotFoundError as e:
            found["no-bundle"] = str(e)
    found["instruction"], found["pointer"] = INSTRUCTION, POINTER
    out.write_text(json.dumps(found, indent=2))


if __name__ == "__main__":
    sys.path.insert(0, sys.argv[1])
    asyncio.run(main(Path(sys.argv[2])))
