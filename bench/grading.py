"""Bench: the unit-tests grader's throughput, the figure a GRPO reward loop or `verify-task` pays per task.

Grades N small code tasks (default 40: a reference solution and its asserts, as in a code benchmark) one
after the other with the real `unit-tests` grader, so each task starts the sandboxed harness once, as a
reward call does. Every task must score 1 (a grader that fails them is not measured). Repeats the pass
R times (default 5) and reports the median. Prints the sandbox it ran in, then `tasks_per_s=X` last
(wall clock: the harness is a child process, so this process's CPU time would not see it).
"""

from __future__ import annotations

import statistics
import sys
import time

from aci.graders import grader_for
from aci.graders.code import sandbox_note

N = int(sys.argv[1]) if len(sys.argv) > 1 else 40
R = int(sys.argv[2]) if len(sys.argv) > 2 else 5


def task(i: int) -> tuple[dict, str]:
    solution = f"def f(x):\n    return sorted(set(x))[:{i % 7 + 1}]\n"
    tests = f"assert f([3, 1, 2, 3]) == [1, 2, 3][:{i % 7 + 1}]\nassert f([]) == []\n"
    return {"id": f"t{i}", "gold": {"answer": solution, "tests": tests}}, f"```python\n{solution}```"


def one_pass(grader, tasks) -> float:
    start = time.monotonic()
    for t, response in tasks:
        s = grader.score(t, response)
        if s.score != 1:
            raise SystemExit(f"task {t['id']} scored {s.score}: {s.reason}")
    return time.monotonic() - start


def main() -> None:
    grader = grader_for("unit-tests")
    tasks = [task(i) for i in range(N)]
    one_pass(grader, tasks[:2])  # warm: the first grade also finds out which sandbox this machine allows
    walls = [one_pass(grader, tasks) for _ in range(R)]
    wall = statistics.median(walls)
    print(f"tasks={N} runs={R} wall_s={','.join(f'{w:.2f}' for w in walls)} median={wall:.2f}s "
          f"sandbox={sandbox_note() or 'full'}")
    print(f"tasks_per_s={N / wall:.1f}")


if __name__ == "__main__":
    main()
