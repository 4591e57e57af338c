#!/usr/bin/env python3
"""Turn an agent's raw PostTrainBench output (solve_out.txt) into a transcript a judge can read.

The harness's main branch runs `python agents/<name>/human_readable_trace.py solve_out.txt -o
solve_parsed.txt` when that file exists (else it copies the raw output), and the integrity judges read
solve_parsed.txt to reconstruct how final_model was made. pack.sh puts this file beside each solve.sh.

It reads the three JSON streams our solve.sh files produce, recognising each event by its shape:
Claude Code `--output-format stream-json`, Codex `exec --json` and OpenCode `run --format json`. Lines
may carry the harness's `[YYYY-MM-DDTHH:MM:SSZ] ` prefix; lines that are not JSON events (the setup log,
errors) are kept as they are. Tool inputs and outputs are kept whole: the judges need them.
Standard library only, Python >= 3.8.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any, Dict, List, Optional

STAMP = re.compile(r"^\[(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z)\] ?")
CLAUDE_TYPES = {"system", "assistant", "user", "result"}
OPENCODE_TYPES = {"step_start", "step_finish", "text", "reasoning", "tool_use"}


def compact(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def block(title: str, body: str = "") -> List[str]:
    lines = [title]
    if body.strip():
        lines += ["    " + ln for ln in body.rstrip("\n").split("\n")]
    return lines


def result_text(content: Any) -> str:
    """Claude tool results: a string, or a list of text (and image) blocks."""
    if isinstance(content, list):
        return "\n".join(c.get("text", f"[{c.get('type', 'block')}]") if isinstance(c, dict) else str(c)
                         for c in content)
    return compact(content) if content is not None else ""


def claude(event: Dict[str, Any]) -> List[str]:
    kind = event["type"]
    if kind == "system":
        if event.get("subtype") == "init":
            servers = ", ".join(f"{s.get('name')} ({s.get('status')})" for s in event.get("mcp_servers", []))
            return block(f"session start: model {event.get('model')}, cwd {event.get('cwd')}",
                         f"tools: {len(event.get('tools', []))}; MCP servers: {servers or 'none'}")
        return block(f"system: {event.get('subtype')}", compact({k: v for k, v in event.items() if k != "type"}))
    if kind == "result":
        head = (f"result: {event.get('subtype')}{' (error)' if event.get('is_error') else ''}, "
                f"{event.get('num_turns')} turns, {event.get('duration_ms')} ms, ${event.get('total_cost_usd')}")
        return block(head, compact(event.get("result", "")))
    out: List[str] = []
    content = (event.get("message") or {}).get("content", [])
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    for part in content:
        ptype = part.get("type")
        if ptype == "text":
            out += block(f"{kind}:", part.get("text", ""))
        elif ptype == "thinking":
            out += block("thinking:", part.get("thinking", ""))
        elif ptype == "tool_use":
            args = part.get("input", {})
            shown = args["command"] if isinstance(args, dict) and isinstance(args.get("command"), str) else compact(args)
            out += block(f"tool call {part.get('name')} [{part.get('id')}]:", shown)
        elif ptype == "tool_result":
            error = " (error)" if part.get("is_error") else ""
            out += block(f"tool result [{part.get('tool_use_id')}]{error}:", result_text(part.get("content")))
        else:
            out += block(f"{kind} {ptype}:", compact(part))
    return out


def codex(event: Dict[str, Any]) -> List[str]:
    kind = event["type"]
    if kind == "thread.started":
        return [f"session start: thread {event.get('thread_id')}"]
    if kind == "turn.started":
        return ["turn started"]
    if kind == "turn.completed":
        return block("turn completed", f"usage: {compact(event.get('usage', {}))}")
    if kind == "turn.failed":
        err = event.get("error") or {}
        return block("turn failed:", compact(err.get("message", err) if isinstance(err, dict) else err))
    if kind == "error":
        return block("error:", compact(event.get("message", "")))
    if not kind.startswith("item."):
        return block(f"{kind}:", compact(event))
    if kind != "item.completed":
        return []  # started/updated: the completed item repeats them with the outcome
    item = event.get("item") or {}
    itype = item.get("type")
    if itype == "agent_message":
        return block("assistant:", item.get("text", ""))
    if itype == "reasoning":
        return block("reasoning:", item.get("text", ""))
    if itype == "command_execution":
        return block(f"command (exit {item.get('exit_code')}, {item.get('status')}):",
                     f"$ {item.get('command')}\n{item.get('aggregated_output', '')}")
    if itype == "mcp_tool_call":
        body = f"arguments: {compact(item.get('arguments', {}))}"
        if item.get("result") is not None:
            body += f"\nresult: {compact(item['result'])}"
        if item.get("error"):
            body += f"\nerror: {compact(item['error'])}"
        return block(f"tool call {item.get('server')}.{item.get('tool')} ({item.get('status')}):", body)
    if itype == "file_change":
        changes = "\n".join(f"{c.get('kind')} {c.get('path')}" for c in item.get("changes", []))
        return block(f"file change ({item.get('status')}):", changes)
    if itype == "web_search":
        return [f"web search: {item.get('query')}"]
    if itype == "todo_list":
        return block("plan:", "\n".join(f"[{'x' if t.get('completed') else ' '}] {t.get('text')}"
                                         for t in item.get("items", [])))
    if itype == "error":
        return block("error:", item.get("message", ""))
    return block(f"item {itype}:", compact(item))


def opencode(event: Dict[str, Any]) -> List[str]:
    kind, part = event["type"], event.get("part") or {}
    if kind == "step_start":
        return ["step start"]
    if kind == "step_finish":
        return [f"step finish: {part.get('reason')}, tokens {compact(part.get('tokens', {}))}, cost {part.get('cost')}"]
    if kind == "text":
        return block("assistant:", part.get("text", ""))
    if kind == "reasoning":
        return block("reasoning:", part.get("text", ""))
    if kind == "tool_use":
        state = part.get("state") or {}
        args = state.get("input", {})
        shown = args["command"] if isinstance(args, dict) and isinstance(args.get("command"), str) else compact(args)
        body = f"{shown}\n{state.get('output', '')}" if "output" in state else shown
        if state.get("error"):
            body += f"\nerror: {compact(state['error'])}"
        return block(f"tool call {part.get('tool')} ({state.get('status')}):", body)
    err = event.get("error") or {}
    message = (err.get("data") or {}).get("message") if isinstance(err, dict) else None
    return block(f"error: {err.get('name') if isinstance(err, dict) else err}", compact(message or err))


def dispatch(event: Dict[str, Any]) -> Optional[List[str]]:
    kind = event.get("type")
    if not isinstance(kind, str):
        return None
    if kind in CLAUDE_TYPES and ("message" in event or "subtype" in event or "session_id" in event):
        return claude(event)
    if kind in OPENCODE_TYPES or (kind == "error" and "part" in event) or "sessionID" in event:
        return opencode(event)
    if kind.startswith(("thread.", "turn.", "item.")) or kind == "error":
        return codex(event)
    return None


def format_trace(lines: List[str]) -> str:
    out: List[str] = []
    for raw in lines:
        line = raw.rstrip("\n")
        m = STAMP.match(line)
        stamp, body = (m.group(1) + " ", line[m.end():]) if m else ("", line)
        formatted = None
        if body.lstrip().startswith("{"):
            try:
                event = json.loads(body)
            except json.JSONDecodeError:
                event = None
            if isinstance(event, dict):
                formatted = dispatch(event)
                if formatted is None:
                    formatted = [compact(event)]
        if formatted is None:
            formatted = [body]
        if formatted:
            out.append(stamp + formatted[0])
            out += formatted[1:]
    return "\n".join(out) + "\n"


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("input", help="the raw output (solve_out.txt); - for stdin")
    parser.add_argument("-o", "--output", help="where to write the transcript (default: stdout)")
    args = parser.parse_args(argv)
    source = sys.stdin if args.input == "-" else open(args.input, encoding="utf-8", errors="replace")
    with source:
        text = format_trace(source.readlines())
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
