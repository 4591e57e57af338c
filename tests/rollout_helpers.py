"""Shared pieces of the rollout tests: task files, scripted-policy helpers, tool fixtures copied into a
workdir (paths outside the workdir are refused by `ctx.path`, as in a real run)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from aci import registry
from aci.context import Context

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def call(name: str, args: dict | str, cid: str) -> dict:
    """An OpenAI tool call; a str `args` is sent verbatim (malformed JSON included)."""
    raw = args if isinstance(args, str) else json.dumps(args)
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": raw}}


def calls(*items: dict) -> dict:
    return {"tool_calls": list(items)}


def task(tid: str, question: str, answer: str | None = None, **extra) -> dict:
    row = {"id": tid, "messages": [{"role": "user", "content": f"[{tid}] {question}"}],
           "gold": {"answer": answer} if answer is not None else {}, "grader": "final-answer"}
    return {**row, **extra}


def write_tasks(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def marker(body: dict) -> str:
    user = next(m["content"] for m in body["messages"] if m["role"] == "user")
    return re.match(r"\[([\w-]+)\]", user).group(1)


def turn(body: dict) -> int:
    """How many replies the policy already gave in this trajectory."""
    return sum(1 for m in body["messages"] if m["role"] == "assistant")


def last_tool(body: dict) -> str:
    return [m for m in body["messages"] if m["role"] == "tool"][-1]["content"]


def copy_fixture(name: str, workdir: Path) -> Path:
    return Path(shutil.copy(FIXTURES / name, workdir / name))


def run_tool(workdir: Path, **args):
    return registry.call("run-trajectory", args, Context(workdir=workdir))


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
