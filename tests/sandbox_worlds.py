"""Machines for the sandbox tests: the real unit-tests grader run in a fresh process as root or as a spare uid,
with or without bubblewrap, and under a seccomp filter like Docker's default profile.

A world is one `python -c CHILD` process that grades a list of responses with `grader_for("unit-tests")` and
prints what it saw (the sandbox the grader chose and each score) as JSON. Around it, where needed:
- a view (an outer `bwrap --dev-bind / /` as root) in which the folders that hold this Python, the venv and the
  repository can be traversed by any uid, so that a spare uid can start this Python at all (CI keeps it under
  /root, mode 0700); nothing else changes;
- `setpriv` to SPARE_UID, for an unprivileged user;
- `DOCKER_LIKE`: a seccomp program that refuses what Docker's default profile refuses a container without
  CAP_SYS_ADMIN (new namespaces: unshare, setns, clone with CLONE_NEW* flags, clone3; mount), so bubblewrap
  and the harness's own namespaces fail there for real;
- `ACI_BWRAP=""`, the grader's documented switch for "no bwrap installed".
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPARE_UID = 4242  # no account on Debian or Ubuntu images

CHILD = r"""
import json, sys
from aci.errors import ACIError
from aci.graders import grader_for
from aci.graders.code import sandbox
job = json.load(sys.stdin)
out = {"kind": None, "note": None, "refused": None, "results": {}}
try:
    g = grader_for("unit-tests", unsafe_grader=job["unsafe"])
except ACIError as e:
    out["refused"] = e.rule
    g = grader_for("unit-tests", unsafe_grader=True) if job["then_unsafe"] else None
box = sandbox()
out["kind"], out["note"] = box.kind, box.note
for name, code, tests in job["attacks"] if g else []:
    s = g.score({"id": name, "gold": {"answer": "x", "tests": tests}}, code)
    out["results"][name] = {"score": s.score, "reason": s.reason}
print(json.dumps(out))
"""


def docker_like_seccomp() -> bytes:
    """The BPF program (struct sock_filter[]) for bwrap --seccomp; x86_64 only (other arches pass through)."""
    ld, jeq, jset, ret = 0x20, 0x15, 0x45, 0x06
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
    namespaces = 0x7E020000  # CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
    prog = [
        (ld, 0, 0, 4), (jeq, 1, 0, 0xC000003E), (ret, 0, 0, allow),  # 0-2: not x86_64: allow
        (ld, 0, 0, 0),  # 3: the syscall number
        (jeq, 0, 1, 435), (ret, 0, 0, enosys),  # 4-5: clone3 -> ENOSYS (libc falls back to clone)
        (jeq, 6, 0, 272), (jeq, 5, 0, 165), (jeq, 4, 0, 308),  # 6-8: unshare, mount, setns -> EPERM (13)
        (jeq, 0, 2, 56), (ld, 0, 0, 16), (jset, 1, 0, namespaces),  # 9-11: clone with a CLONE_NEW* flag -> 13
        (ret, 0, 0, allow), (ret, 0, 0, eperm),  # 12-13
    ]
    return b"".join(struct.pack("<HBBI", *p) for p in prog)


def can_filter() -> bool:
    return platform.machine() == "x86_64"


def _view() -> list[str]:
    """Outer bwrap arguments: the host as it is, except that the folders on the way to this Python, the venv and
    the repository are traversable (a 0755 tmpfs over the first closed one, holding just those paths)."""
    needed = []
    for p in sorted({os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, ROOT)}):
        if not any(p.startswith(n + "/") for n in needed):
            needed.append(p)
    covers, dirs, binds = [], [], []
    for p in needed:
        parts = p.strip("/").split("/")
        chain = ["/" + "/".join(parts[:i]) for i in range(1, len(parts))]
        closed = next((c for c in chain if not os.stat(c).st_mode & 0o001), None)
        if closed is None:
            continue
        if closed not in covers:
            covers.append(closed)
        dirs += [c for c in chain[chain.index(closed) + 1:] if c not in dirs]
        binds.append(p)
    args = ["--dev-bind", "/", "/"]
    for c in covers:
        args += ["--perms", "0755", "--tmpfs", c]
    for d in dirs:
        args += ["--perms", "0755", "--dir", d]
    for b in binds:
        args += ["--bind", b, b]
    return args


def run_world(attacks: list[tuple[str, str, str]], *, user: bool, view: bool = False, docker: bool = False,
              env: dict | None = None, unsafe: bool = False, then_unsafe: bool = False,
              timeout: float = 120) -> dict:
    """Grade `attacks` (name, response, tests) in one world; what CHILD printed."""
    root = os.geteuid() == 0
    command = [sys.executable, "-c", CHILD]
    if user and root:
        command = [shutil.which("setpriv"), f"--reuid={SPARE_UID}", f"--regid={SPARE_UID}", "--clear-groups", "--",
                   *command]
    fds, keep = [], None
    if (view or user) and root or docker:
        outer = [shutil.which("bwrap"), "--die-with-parent", *(_view() if root else ["--dev-bind", "/", "/"])]
        if docker:
            keep = tempfile.TemporaryFile()
            keep.write(docker_like_seccomp())
            keep.seek(0)
            fds.append(keep.fileno())
            outer += ["--seccomp", str(keep.fileno())]
        command = [*outer, "--", *command]
    try:
        proc = subprocess.run(command, input=json.dumps({"attacks": attacks, "unsafe": unsafe,
                                                         "then_unsafe": then_unsafe}),
                              capture_output=True, text=True, timeout=timeout, pass_fds=fds, cwd="/",
                              env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
    finally:
        if keep is not None:
            keep.close()
    if proc.returncode != 0:
        raise AssertionError(f"world failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.splitlines()[-1])
