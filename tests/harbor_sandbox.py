"""A container-less Harbor environment for the tests (`harbor run --env tests.harbor_sandbox:LocalSandbox`).

Docker is not available where the tests run, and Harbor has no local-process environment, so this one
speaks Harbor's `BaseEnvironment` protocol (start, exec, upload, download, stop) over bubblewrap: every
command runs with a root folder of its own (under the trial's folder) as `/`, the host's system folders,
this checkout and its Python read-only, the network shared (the recording model API listens on
127.0.0.1). The task's `environment/` folder is its image: copied onto that root at start. With
`--ek volume=PATH`, PATH is a separate folder bind-mounted into the root, as a task's mounted volume is
(it cannot be removed or renamed from inside); `--ek host_paths=A:B` binds more host folders read-only
(the venv's base Python, the agent CLIs) and `--ek path=A:B` puts folders first on PATH (the image's
`python` and CLIs). Every command is logged, with its environment, exit status and duration, to
`sandbox-exec.jsonl` in the trial's folder. Runs in Harbor's own environment (`.ci/harbor`).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import time
from pathlib import Path, PurePosixPath

from harbor.environments.base import BaseEnvironment, ExecResult

ROOT = Path(__file__).resolve().parent.parent
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt")
PATH = "/root/.local/bin:/usr/local/bin:/usr/bin:/bin"


class LocalSandbox(BaseEnvironment):
    def __init__(self, *args, volume: str | None = None, host_paths: str = "", path: str = "", **kwargs):
        self.volume = PurePosixPath(volume) if volume else None
        self.host_paths = [p for p in host_paths.split(":") if p]
        self.path = f"{path}:{PATH}" if path else PATH
        super().__init__(*args, **kwargs)
        self.root = Path(self.trial_paths.trial_dir) / "sandbox-root"

    @staticmethod
    def type() -> str:
        return "posttrain-aci-local-sandbox"

    def _validate_definition(self):
        if not self.environment_dir.is_dir():
            raise FileNotFoundError(f"{self.environment_dir} does not exist")

    def host(self, path: str | PurePosixPath) -> Path:
        """Where a sandbox path lies on this machine."""
        inside = PurePosixPath(path)
        if self.volume and inside.is_relative_to(self.volume):
            return self.root.parent / "sandbox-volume" / inside.relative_to(self.volume)
        return self.root / str(inside).lstrip("/")

    async def start(self, force_build: bool) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
        shutil.copytree(self.environment_dir, self.root, symlinks=True)
        for rel in ("root", "tmp", "logs/agent", "logs/verifier", "logs/artifacts", "proc", "dev"):
            (self.root / rel).mkdir(parents=True, exist_ok=True)
        if self.volume:  # a new volume starts with what the image holds at its mount point, as Docker's do
            image_part, volume = self.root / str(self.volume).lstrip("/"), self.host(self.volume)
            shutil.rmtree(volume, ignore_errors=True)
            shutil.copytree(image_part, volume) if image_part.is_dir() else volume.mkdir(parents=True)
            shutil.rmtree(image_part, ignore_errors=True)
            image_part.mkdir(parents=True)

    async def stop(self, delete: bool):
        if delete:
            shutil.rmtree(self.root, ignore_errors=True)

    def _bwrap(self, command: str, cwd: str) -> list[str]:
        args = ["bwrap", "--bind", str(self.root), "/", "--dev", "/dev", "--proc", "/proc", "--die-with-parent"]
        shared = [p for p in SYSTEM if os.path.isdir(p)]
        shared += [str(ROOT), *self.host_paths]
        for path in dict.fromkeys(shared):
            args += ["--ro-bind", path, path]
        if self.volume:
            args += ["--bind", str(self.host(self.volume)), str(self.volume)]
        return [*args, "--chdir", cwd, "bash", "-c", command]

    async def exec(self, command: str, cwd: str | None = None, env: dict[str, str] | None = None,
                   timeout_sec: int | None = None, user: str | int | None = None) -> ExecResult:
        workdir = cwd or self.task_env_config.workdir or "/"
        environ = {"PATH": self.path, "HOME": "/root", "LANG": "C.UTF-8", "TMPDIR": "/tmp",
                   **(self.task_env_config.env or {}), **(self._merge_env(env) or {})}
        started = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            *self._bwrap(command, workdir), env=environ, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True)
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout=timeout_sec)
        except (TimeoutError, asyncio.CancelledError):
            os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            raise
        with open(self.root.parent / "sandbox-exec.jsonl", "a") as log:
            log.write(json.dumps({"command": command, "cwd": workdir, "env": env or {},
                                  "return_code": proc.returncode, "seconds": round(time.monotonic() - started, 1)}) + "\n")
        return ExecResult(stdout=out.decode(errors="replace"), stderr=err.decode(errors="replace"),
                          return_code=proc.returncode)

    async def upload_file(self, source_path: Path | str, target_path: str):
        target = self.host(target_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source_path, target)

    async def upload_dir(self, source_dir: Path | str, target_dir: str):
        shutil.copytree(source_dir, self.host(target_dir), dirs_exist_ok=True, symlinks=True)

    async def download_file(self, source_path: str, target_path: Path | str):
        Path(target_path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(self.host(source_path), target_path)

    async def download_dir(self, source_dir: str, target_dir: Path | str):
        shutil.copytree(self.host(source_dir), target_dir, dirs_exist_ok=True, symlinks=True)
