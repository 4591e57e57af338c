"""A local HTTP server on 127.0.0.1 speaking the OpenAI chat-completions API, for tests.

It stands in for what cannot run here (a hosted or GPU-served model) while speaking the real protocol:
`POST /v1/chat/completions` and `GET /v1/models`. Replies are scripted: a list consumed in order (the
last one repeats), or a function of the request body. A reply is the assistant's text, a message dict
(`{"content": ..., "tool_calls": [...]}`), or `{"status": 500, "body": "..."}` for an HTTP error. Every
request body is recorded in `requests`.

    with OpenAIStub(['{"score": 1, "reason": "ok"}']) as stub:
        stub.url  # http://127.0.0.1:<port>/v1
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = str | dict


class OpenAIStub:
    def __init__(self, replies: list[Reply] | Callable[[dict], Reply] | None = None, model: str = "stub-model"):
        self.replies = replies if replies is not None else ["ok"]
        self.model = model
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "start the stub first"
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def _next(self, body: dict) -> Reply:
        with self._lock:
            self.requests.append(body)
            if callable(self.replies):
                return self.replies(body)
            index = min(len(self.requests), len(self.replies)) - 1
            return self.replies[index]

    def __enter__(self) -> OpenAIStub:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def _send(self, status: int, payload: Any) -> None:
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": stub.model, "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                length = int(self.headers.get("Content-Length", 0))
                try:
                    body = json.loads(self.rfile.read(length))
                except json.JSONDecodeError:
                    self._send(400, {"error": {"message": "body is not JSON"}})
                    return
                reply = stub._next(body)
                if isinstance(reply, dict) and "status" in reply:
                    body_out = reply.get("body", "")
                    self._send(reply["status"], body_out.encode() if isinstance(body_out, str) else body_out)
                    return
                message = {"role": "assistant", "content": reply} if isinstance(reply, str) else \
                    {"role": "assistant", "content": None, **reply}
                finish = "tool_calls" if message.get("tool_calls") else "stop"
                self._send(200, {
                    "id": f"chatcmpl-{len(stub.requests)}", "object": "chat.completion", "created": int(time.time()),
                    "model": body.get("model", stub.model),
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
                })

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
