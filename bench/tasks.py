"""Bench: loading and validating task records vs only parsing the same file with `json`.

Generates N tool-use task records (default 200,000), then times, in the same run and on the same file:
(a) `json.loads` on each line and nothing else; (b) `aci.tasks.read_rows` (UTF-8/NUL checks, line
numbers); (c) `aci.tasks.load_tasks` (adapters + schema validation + duplicate ids). Target: c/a <= 3.
Last line: `ratio=X` (c/a), in CPU seconds.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from aci import tasks

N = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
TOOL = {"type": "function", "function": {"name": "cancel_pending_order", "description": "Cancel a pending order.",
                                         "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}}}}


def generate(path: Path, n: int) -> None:
    with open(path, "w") as f:
        for i in range(n):
            order = f"#W{i:07d}"
            f.write(json.dumps({
                "id": f"t{i}", "type": "tool-use", "subtype": "cancel",
                "messages": [{"role": "system", "content": "You are a retail support agent. Follow the policy."},
                             {"role": "user", "content": f"Please cancel order {order}, it is late."}],
                "tools": [TOOL],
                "gold": {"tool_calls": [{"name": "cancel_pending_order", "arguments": {"order_id": order}}]},
                "grader": "tool-call", "meta": {"seed": i},
            }) + "\n")


def timed(fn) -> float:
    """CPU seconds of this process: steadier than wall time on a shared machine."""
    start = time.process_time()
    fn()
    return time.process_time() - start


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tasks.jsonl"
        generate(path, N)

        def parse() -> None:
            with open(path, "rb") as f:
                for line in f:
                    json.loads(line)

        runs = {"json": [], "rows": [], "load": []}
        for _ in range(3):  # interleaved, best of three each
            runs["json"].append(timed(parse))
            runs["rows"].append(timed(lambda: sum(1 for _ in tasks.read_rows(path))))
            runs["load"].append(timed(lambda: sum(1 for _ in tasks.load_tasks(path))))
        t_json, t_rows, t_load = (min(runs[k]) for k in ("json", "rows", "load"))
    print(f"records={N} json={t_json:.2f}s read_rows={t_rows:.2f}s ({t_rows / t_json:.2f}x) "
          f"load_tasks={t_load:.2f}s ({N / t_load:,.0f} records/s)")
    print(f"ratio={t_load / t_json:.2f}")


if __name__ == "__main__":
    main()
