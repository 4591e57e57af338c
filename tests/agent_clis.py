"""What the PostTrainBench and agent tests need from outside the venv, and a recording model API.

`make test` (and `.ci/run`) installs them: the agent CLIs and the MCP Inspector from npm into
`.ci/clis/current` (current releases, with Node 22 for the Inspector) and `.ci/clis/harness` (the
versions of PostTrainBench's standard image), pinned by the package.json and package-lock.json there;
and `.ci/wheels/py310`, pip's wheel plus Python 3.10 wheels of posttrain-aci's requirements (a local
stand-in for PyPI, for the container test without network). Outside CI a test that needs a missing one
is skipped; with ACI_REQUIRE_EXTERNAL=1 (`.ci/run` sets it) it fails, so no skipped test counts as a
pass in CI.

`RecordingAPI` stands in for the hosted model (Anthropic Messages, OpenAI Responses and Chat
Completions alike): it records each request the real CLI sends and answers 400, so the CLI stops after
showing exactly what the model would have seen (tools, system prompt, skills, the user prompt).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CLIS = Path(os.environ.get("ACI_AGENT_CLIS", ROOT / ".ci" / "clis"))
WHEELS = Path(os.environ.get("ACI_TEST_WHEELS", ROOT / ".ci" / "wheels" / "py310"))
REQUIRED = os.environ.get("ACI_REQUIRE_EXTERNAL") == "1"
# The CLIs must not update themselves, report telemetry or pick up a developer's keys.
QUIET = {"DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
         "DISABLE_ERROR_REPORTING": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1", "NO_COLOR": "1"}
KEYS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "CODEX_API_KEY",
        "OPENCODE_API_KEY", "GEMINI_API_KEY", "ZAI_API_KEY", "CODEX_HOME", "OPENCODE_CONFIG", "ACI_STATE")


def missing(what: str) -> None:
    """Skip (outside CI) or fail (ACI_REQUIRE_EXTERNAL=1) a test whose outside tool is absent."""
    message = f"{what} is not installed (make test installs it)"
    if REQUIRED:
        pytest.fail(message)
    pytest.skip(message)


def bin_dir(lane: str) -> Path:
    """`current` or `harness`: the folder with that lane's claude, codex and opencode."""
    path = CLIS / lane / "node_modules" / ".bin"
    if not (path / "claude").exists():
        missing(f"the {lane} agent CLIs ({CLIS / lane})")
    return path


def cli(lane: str, name: str) -> str:
    path = bin_dir(lane) / name
    if not path.exists():
        missing(f"{name} ({path})")
    return str(path)


def env(home: Path, lane: str | None = None, **extra: str) -> dict:
    """An environment for a CLI: its own HOME, no API keys, Node 22 first on PATH."""
    base = {k: v for k, v in os.environ.items() if k not in KEYS}
    path = base.get("PATH", "/usr/bin:/bin")
    node22 = CLIS / "current" / "node_modules" / ".bin"
    if lane:
        path = f"{bin_dir(lane)}:{node22}:{path}"
    return {**base, **QUIET, "HOME": str(home), "PATH": path, **extra}


def run(args: list[str], *, home: Path, cwd: Path, lane: str | None = None, timeout: int = 120, **extra: str):
    return subprocess.run(args, cwd=cwd, env=env(home, lane, **extra), capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def trust_claude_project(home: Path, project: Path) -> None:
    """What accepting Claude Code's folder-trust dialog writes (~/.claude.json)."""
    path = home / ".claude.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data.setdefault("projects", {}).setdefault(str(project), {})["hasTrustDialogAccepted"] = True
    path.write_text(json.dumps(data))


def python310() -> Path:
    found = os.environ.get("ACI_PYTHON310") or subprocess.run(
        ["bash", "-c", "echo $(pyenv root 2>/dev/null)/versions/3.10.13/bin/python3.10"],
        capture_output=True, text=True).stdout.strip()
    if not found or not Path(found).is_file():
        missing("Python 3.10 (pyenv 3.10.13, or ACI_PYTHON310)")
    return Path(found)


def wheelhouse() -> Path:
    if not list(WHEELS.glob("pip-*.whl")) or not list(WHEELS.glob("mcp-*.whl")):
        missing(f"the Python 3.10 wheelhouse ({WHEELS})")
    return WHEELS


class RecordingAPI:
    """A model API on 127.0.0.1 that records every request and refuses it (HTTP 400)."""

    def __init__(self):
        self.requests: list[dict] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's naming)
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                try:
                    owner.requests.append({"path": self.path, "body": json.loads(body or b"{}")})
                except json.JSONDecodeError:
                    owner.requests.append({"path": self.path, "body": {"raw": body.decode(errors="replace")}})
                reply = json.dumps({"type": "error", "error": {"type": "invalid_request_error",
                                                               "message": "recorded by the test"}}).encode()
                self.send_response(400)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            do_GET = do_POST

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> RecordingAPI:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def main_request(self, model: str) -> dict:
        """The request for `model` that carries the most tools: the agent's real first turn."""
        bodies = [r["body"] for r in self.requests if r["body"].get("model") == model]
        assert bodies, f"no request for model {model}: {[r['path'] for r in self.requests]}"
        return max(bodies, key=lambda b: len(b.get("tools", [])))


def tool_names(request: dict) -> list[str]:
    """Tool names in an Anthropic, Responses or Chat Completions request."""
    return [t.get("name") or (t.get("function") or {}).get("name") or t.get("type") for t in request.get("tools", [])]
