"""Load the posttrain-aci agent classes through Harbor's own agent factory and render the commands their CLI
install runs, without running them (the install fetches the CLI from the internet). Runs in Harbor's
environment: `python -m tests.harbor_render BUNDLE_PARENT OUT.json` (tests/test_harbor.py).

The environment here only records: each command gets exit status 0 and no output, except Codex's uid probe,
which gets root's ids, as in the PostTrainBench image.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

from harbor.agents.factory import AgentFactory
from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.models.task.config import EnvironmentConfig
from harbor.models.trial.config import AgentConfig
from harbor.models.trial.paths import TrialPaths

CLASSES = {"ClaudeCodeACI": "anthropic/claude-opus-4-5", "CodexACI": "openai/gpt-5", "OpenCodeACI": "openai/gpt-5"}


class Recorder(BaseEnvironment):
    commands: list[str]

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
        self.commands.append(command)
        stdout = "\nCODEX_RUNTIME_ID 0 0\n" if "CODEX_RUNTIME_ID" in command else ""
        return ExecResult(stdout=stdout, stderr="", return_code=0)

    async def upload_file(self, source_path, target_path):
        self.commands.append(f"<upload {target_path}>")

    async def upload_dir(self, source_dir, target_dir):
        self.commands.append(f"<upload {target_dir}/>")

    async def download_file(self, source_path, target_path):
        pass

    async def download_dir(self, source_dir, target_dir):
        pass


async def render(name: str, model: str, work: Path) -> dict:
    config = AgentConfig(name=f"posttrain_aci_harbor:{name}", model_name=model)
    agent = AgentFactory.create_agent_from_config(config, logs_dir=work / name)
    env = Recorder(environment_dir=work, environment_name=name, session_id=name, trial_paths=TrialPaths(work / name),
                   task_env_config=EnvironmentConfig())
    env.commands = []
    await agent.install(env)
    return {"mro": [f"{c.__module__}:{c.__qualname__}" for c in type(agent).__mro__], "name": agent.name(),
            "install": env.commands, "setup_timeout": type(agent).DEFAULT_SETUP_TIMEOUT_SEC}


async def main(out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        found = {name: await render(name, model, Path(tmp)) for name, model in CLASSES.items()}
        try:
            AgentFactory.create_agent_from_config(AgentConfig(name="posttrain_aci_harbor:ClaudeCodeACI",
                                                              kwargs={"bundle": tmp}), logs_dir=Path(tmp))
        except FileNotFoundError as e:
            found["no_bundle"] = str(e)
    out.write_text(json.dumps(found, indent=2))


if __name__ == "__main__":
    sys.path.insert(0, sys.argv[1])
    asyncio.run(main(Path(sys.argv[2])))
