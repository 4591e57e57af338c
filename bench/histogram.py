"""Bench: structural features of 200,000 tool-use task records vs only parsing the same file.

Generates a JSONL file of tau2-retail-like task records (system policy, user request, four tool
definitions, 1-4 gold calls of which 0-3 writes, an answer on a third of them), then times, in the same
run and on the same file: (a) reading it line by line with `json.loads` and nothing else; (b) the
`histogram` computation (`aci.histogram.build.records` + the tool-use feature set). Target: ratio b/a <= 3.
Last line: `ratio=X`.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import time
from pathlib import Path

from aci.histogram import build
from aci.histogram.features import Extractor

N = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
READS = ["get_order_details", "get_user_details", "get_product_details", "find_user_id_by_email", "list_all_product_types"]
WRITES = ["cancel_pending_order", "modify_pending_order_items", "return_delivered_order_items",
          "exchange_delivered_order_items", "modify_user_address"]
SUBTYPES = ["cancel", "modify", "return", "exchange", "info-amount-sum", "info-item-count", "address"]


def tool_def(name: str) -> dict:
    return {"type": "function", "function": {
        "name": name, "description": f"{name.replace('_', ' ').capitalize()} for the given order or user.",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string", "description": "like #W0000000"}},
                       "required": ["order_id"]}}}


def generate(path: Path, n: int, rng: random.Random) -> None:
    tools = [tool_def(t) for t in READS[:2] + WRITES[:2]]
    with open(path, "w") as f:
        for i in range(n):
            order = f"#W{rng.randrange(10**7):07d}"
            calls = [{"name": rng.choice(READS), "arguments": {"order_id": order}}]
            calls += [{"name": rng.choice(WRITES), "arguments": {"order_id": order, "reason": "no longer needed"}}
                      for _ in range(rng.choice((0, 1, 1, 2, 3)))]
            rec = {
                "id": f"retail-{i}", "type": "tool-use", "subtype": rng.choice(SUBTYPES),
                "messages": [{"role": "system", "content": "You are a retail support agent. Follow the policy."},
                             {"role": "user", "content": f"Hi, I need help with order {order}. "
                                                         f"My email is user{i}@example.com."}],
                "tools": tools,
                "gold": {"answer": str(rng.randrange(1000)) if i % 3 == 0 else "", "tool_calls": calls},
                "grader": "tool-call", "meta": {"seed": i},
            }
            f.write(json.dumps(rec) + "\n")


def parse_only(path: Path) -> int:
    n = 0
    with open(path, "rb") as f:
        for line in f:
            json.loads(line)
            n += 1
    return n


def features(path: Path) -> dict:
    return build.histogram_of(build.records(path), "tool-use", Extractor, source=str(path))


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tasks.jsonl"
        generate(path, N, random.Random(0))
        size_mb = path.stat().st_size / 1e6
        parse_only(path)  # warm the page cache so both timings read from memory
        t0 = time.perf_counter()
        parsed = parse_only(path)
        t_parse = time.perf_counter() - t0
        t0 = time.perf_counter()
        hist = features(path)
        t_feat = time.perf_counter() - t0
    assert parsed == hist["records"] == N
    print(f"records={N} file_mb={size_mb:.1f}")
    print(f"parse_only_s={t_parse:.2f} ({N / t_parse:,.0f} records/s)")
    print(f"histogram_s={t_feat:.2f} ({N / t_feat:,.0f} records/s)")
    print(f"mean_writes={hist['features']['writes']['mean']}")
    print(f"ratio={t_feat / t_parse:.2f}")


if __name__ == "__main__":
    main()
