"""Bench: the unit-tests grader's throughput, the figure a GRPO reward loop or `verify-task` pays per task.

Grades N small code tasks (default 40: a reference solution and its asserts, as in a code benchmark) one
after the other with the real `unit-tests` grader, so each task starts the sandboxed harness once, as a
reward call does. Every task must score 1 (a grader that fails them is not measured). The baseline, in
the same run, is the same grader with bubblewrap switched off (`ACI_BWRAP=""`: the partial sandbox, a
uid switch and limits only), so the ratio is what the full sandbox costs. The sandbox is chosen once per
process, so each pass runs in a fresh process of its own, the two sides alternating, R passes each
(default 5); the medians are reported. Prints each side's sandbox and passes, then `tasks_per_s=X` last
(the full sandbox's; wall clock: the harness is a child process, so this process's CPU time would not
see it).

    .venv/bin/python bench/grading.py [N] [R]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

from aci.graders.sandbox import BWRAP_ENV

N = int(sys.argv[1]) if len(sys.argv) > 1 else 40
R = int(sys.argv[2]) if len(sys.argv) > 2 else 5
SIDES = {"bwrap": {}, "no_bwrap": {BWRAP_ENV: ""}}  # side -> what its process's environment changes


def task(i: int) -> tuple[dict, str]:
    solution = f"def f(x):\n    return sorted(set(x))[:{i % 7 + 1}]\n"
    tests = f"assert f([3, 1, 2, 3]) == [1, 2, 3][:{i % 7 + 1}]\nassert f([]) == []\n"
    return {"id": f"t{i}", "gold": {"answer": solution, "tests": tests}}, f"```python\n{solution}```"


def one_pass() -> None:
    """In a child process: grade the N tasks once after a warm-up, and print the wall time and the sandbox."""
    from aci.graders import grader_for
    from aci.graders.code import sandbox_note

    grader = grader_for("unit-tests")
    tasks = [task(i) for i in range(N)]
    grader.score(*tasks[0])  # warm: the first grade also finds out which sandbox this machine allows
    start = time.monotonic()
    for t, response in tasks:
        s = grader.score(t, response)
        if s.score != 1:
            raise SystemExit(f"task {t['id']} scored {s.score}: {s.reason}")
    print(json.dumps({"wall": time.monotonic() - start, "sandbox": sandbox_note() or "sandbox: full"}))


def main() -> None:
    walls: dict[str, list[float]] = {side: [] for side in SIDES}
    kinds: dict[str, str] = {}
    for _ in range(R):
        for side, env in SIDES.items():
            done = subprocess.run([sys.executable, __file__, str(N), str(R), "--pass"], env={**os.environ, **env},
                                  capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(f"{side}: {done.stderr[-2000:] or done.stdout[-2000:]}")
            out = json.loads(done.stdout.splitlines()[-1])
            walls[side].append(out["wall"])
            kinds[side] = out["sandbox"]
    median = {side: statistics.median(w) for side, w in walls.items()}
    for side, w in walls.items():
        print(f"{side}: tasks={N} wall_s={','.join(f'{x:.2f}' for x in w)} median={median[side]:.2f}s "
              f"tasks_per_s={N / median[side]:.1f} ({kinds[side]})")
    print(f"bwrap_over_no_bwrap_wall={median['bwrap'] / median['no_bwrap']:.2f}")
    print(f"tasks_per_s={N / median['bwrap']:.1f}")


if __name__ == "__main__":
    one_pass() if "--pass" in sys.argv else main()
