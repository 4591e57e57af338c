"""Rollout throughput: 256 tasks x 2 turns against a local endpoint that answers after a fixed 100 ms.

With concurrency C the ideal wall time is tasks x turns x latency / C (the endpoint's latency is the only
cost); efficiency = ideal / measured, target >= 0.8. What is measured is the real loop: the endpoint
policy over HTTP, the Python tool environment (fresh per task), the final-answer grader, and one fsynced
JSONL line per task. The endpoint is a minimal HTTP/1.1 keep-alive server on asyncio in its own process,
so it is not the bottleneck. The rollout runs `--repeat` times (fresh output folder each time) and the
best wall time counts: other processes on a shared machine only ever add time, so the fastest run is
the loop's own cost (the first run also pays one-time imports). The last line printed is `efficiency=X`.

    .venv/bin/python bench/rollout.py [--tasks 256] [--concurrency 32] [--latency 0.1] [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TOOLS = '''
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: first addend
        b: second addend
    """
    return a + b
'''


# -- the endpoint ------------------------------------------------------------------------------------
# Replies are built from two byte searches instead of parsing the body, so the server stays far below
# the client's cost. Turn 1: call add(n, 1) for the task's number n; turn 2: answer with the tool output.
_TOOL_OUTPUT = re.compile(rb'"role":\s*"tool",\s*"tool_call_id":\s*"c1",\s*"content":\s*"(\d+)"')
_QUESTION = re.compile(rb"What is (\d+) \+ 1\?")


def _reply(body: bytes) -> dict:
    out = _TOOL_OUTPUT.search(body)
    if out:
        message = {"role": "assistant", "content": f"ANSWER: {out.group(1).decode()}"}
    else:
        n = int(_QUESTION.search(body).group(1))
        message = {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": json.dumps({"a": n, "b": 1})}}]}
    return {"id": "x", "object": "chat.completion", "created": 0, "model": "bench-model",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


def _response(payload: dict) -> bytes:
    data = json.dumps(payload).encode()
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: keep-alive\r\n"
            b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)


async def _serve(port: int, latency: float) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                m = re.search(rb"(?i)content-length:\s*(\d+)", head)
                body = await reader.readexactly(int(m.group(1))) if m else b""
                if head.startswith(b"GET"):
                    writer.write(_response({"object": "list", "data": [{"id": "bench-model", "object": "model"}]}))
                else:
                    await asyncio.sleep(latency)
                    writer.write(_response(_reply(body)))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=1024)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


# -- the client --------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _roll(url: str, n_tasks: int, concurrency: int, folder: Path):
    from aci.rollout.endpoint import EndpointPolicy
    from aci.rollout.envs import PythonTools
    from aci.rollout.loop import Limits, Rollout, run

    (folder / "bench_tools.py").write_text(TOOLS)
    tasks = [{"id": f"t{i}", "type": "math", "messages": [{"role": "user", "content": f"What is {i} + 1?"}],
              "gold": {"answer": str(i + 1)}, "grader": "final-answer", "meta": {}} for i in range(n_tasks)]
    policy = EndpointPolicy(url, "bench-model", concurrency=concurrency, retries=0)
    tools = PythonTools(str(folder / "bench_tools.py"), folder)
    r = Rollout(tasks=tasks, policy=policy, out=folder / "out", tools=tools, concurrency=concurrency,
                limits=Limits(max_turns=4))
    await policy.served_models()  # warm the import and the first connection, as a real run's check does
    t0 = time.perf_counter()
    counts = await run(r)
    wall = time.perf_counter() - t0
    await policy.aclose()
    return counts, wall


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=256)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--latency", type=float, default=0.1)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        asyncio.run(_serve(args.serve, args.latency))
        return
    port = _free_port()
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port), "--latency", str(args.latency)],
                              stdout=subprocess.PIPE, text=True)
    walls = []
    try:
        assert server.stdout.readline().strip() == "ready"
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as tmp:
                counts, wall = asyncio.run(_roll(f"http://127.0.0.1:{port}/v1", args.tasks, args.concurrency, Path(tmp)))
                written = sum(1 for _ in open(Path(tmp) / "out" / "trial-1.jsonl"))
            assert counts.ran == written == args.tasks, (counts, written)
            assert counts.successes == args.tasks, f"only {counts.successes} of {args.tasks} tasks succeeded"
            walls.append(wall)
    finally:
        server.terminate()
        server.wait(10)
    turns = 2
    ideal = args.tasks * turns * args.latency / args.concurrency
    print(f"tasks={args.tasks} turns={turns} latency_s={args.latency} concurrency={args.concurrency}")
    print(f"ideal_s={ideal:.3f} wall_s={' '.join(f'{w:.3f}' for w in walls)} (best {min(walls):.3f})")
    print(f"efficiency={ideal / min(walls):.3f}")


if __name__ == "__main__":
    main()
