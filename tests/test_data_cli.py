"""Malformed data through the CLI surface of the data tools: exit code 2 and file:line on stderr."""

from __future__ import annotations

import subprocess
import sys

import pytest

GOOD = '{"question": "What is 2 + 3?", "answer": "5"}\n'


@pytest.mark.parametrize("args", [
    ["histogram", "compute", "--path", "bad.jsonl"],
    ["contamination", "--path", "bad.jsonl", "--reference", "ref.jsonl"],
    ["contamination", "--path", "ref.jsonl", "--reference", "bad.jsonl"],
    ["verify-task", "--tasks", "bad.jsonl"],
])
def test_broken_line_is_reported_with_file_and_line(workdir, args):
    (workdir / "bad.jsonl").write_text(GOOD + '{"question": "broken\n')
    (workdir / "ref.jsonl").write_text(GOOD * 3)
    r = subprocess.run([sys.executable, "-m", "aci.cli", *args], capture_output=True, text=True, cwd=workdir)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "bad.jsonl:2" in r.stderr and "Traceback" not in r.stderr


def test_paths_outside_the_roots_are_refused(workdir, tmp_path_factory):
    outside = tmp_path_factory.mktemp("elsewhere") / "data.jsonl"
    outside.write_text(GOOD)
    r = subprocess.run([sys.executable, "-m", "aci.cli", "histogram", "compute", "--path", str(outside)],
                       capture_output=True, text=True, cwd=workdir)
    assert r.returncode == 2 and "outside the allowed roots" in r.stderr
