"""Where the unit-tests grader runs model code: bubblewrap where it works, else the most this machine allows.

- **full** (bubblewrap, the `bwrap` of the distribution): the code runs as an unprivileged uid (as root, uid
  65534, switched to by `setpriv` inside the sandbox; as any other user, that user's own uid in a new user
  namespace) with no capability in any set and `no_new_privs`, in new mount, PID, network, IPC and UTS
  namespaces. It sees `/usr`, `/etc`, the `/bin`- and `/lib`-style links and the Python installation
  (the base interpreter and the venv) read-only, a fresh `/proc` and `/dev`, and its own work folder as
  `/tmp`, its working directory and HOME; nothing else: no task folder, no HOME, no other process, no network
  interface but a down loopback. When the grader ends it, everything it started dies with it.
- **partial** (no bwrap, or bwrap cannot make its namespaces here, as under Docker's default seccomp profile
  or in a container without user namespaces): still a non-root uid (root switches to 65534 with `setpriv`),
  a scrubbed environment, a temp work folder, `no_new_privs` and the limits, and new PID and network
  namespaces where the harness can make them (user namespaces allowed). Every score's reason names what is
  missing (`sandbox: partial, no mount namespace`).
- **unsafe** (root where uid 65534 cannot run this Python, e.g. it lives under a home only root may read,
  or `setpriv` is missing): the code would keep root's powers, so the grader refuses (rule `sandbox`)
  unless the caller passed `--unsafe-grader`; then it runs as root with the limits, named in every reason.

Which one applies is found once per process (`aci.graders.code.sandbox`) by grading a probe task each way
in turn, and cached. `ACI_BWRAP` names the bwrap binary to use (empty: as if none were installed, a switch
for tests).
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, replace
from pathlib import Path

SANDBOX_UID = 65534  # nobody/nogroup on Debian and Ubuntu
BWRAP_ENV = "ACI_BWRAP"
SYSTEM_DIRS = ("/usr", "/etc")
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")  # symlinks into /usr on merged-/usr systems
INSIDE = "/tmp"  # the work folder's path inside bubblewrap
# What root keeps inside bubblewrap until setpriv has switched to SANDBOX_UID (and dropped every capability).
SWITCH_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP")


@dataclass(frozen=True)
class Sandbox:
    """One way to start the harness, and what it guarantees (`missing` names what it does not)."""

    kind: str  # full, partial or unsafe
    missing: tuple[str, ...] = ()
    bwrap: str | None = None
    setpriv: str | None = None  # root: switch to SANDBOX_UID with this
    isolate: bool = False  # the harness makes its own PID and network namespaces
    why: str = ""  # why the stronger kinds could not be had here

    @property
    def uid(self) -> int:
        """The uid the code runs as, outside any user namespace (the kernel counts its processes)."""
        return SANDBOX_UID if self.setpriv else os.geteuid()

    @property
    def note(self) -> str:
        """Empty when full, else what every result that graded code with it must say: `sandbox: partial, no ...`."""
        if self.kind == "full":
            return ""
        return f"sandbox: {self.kind}, " + ", ".join(f"no {m}" for m in self.missing) + (f" ({self.why})" if self.why else "")

    def describe(self) -> str:
        return self.note or "sandbox: full (bubblewrap: unprivileged uid, no capabilities, private mount, PID and " \
                            "network namespaces)"

    def home(self, work: Path) -> str:
        return INSIDE if self.bwrap else str(work)

    def command(self, work: Path, harness: list[str]) -> list[str]:
        """The command line that starts `harness` (python and its arguments) in this sandbox, in `work`."""
        drop = [self.setpriv, f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}", "--clear-groups",
                "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"] if self.setpriv else []
        if not self.bwrap:
            return [*drop, *harness]
        return [self.bwrap, *_bwrap_args(work, root=bool(self.setpriv)), "--", *drop, *harness]

    def with_isolation(self, isolated: bool) -> Sandbox:
        """A partial sandbox as the probe found it: without its own namespaces, it has no PID or network one."""
        if isolated:
            return self
        return replace(self, isolate=False, missing=(*self.missing, "PID namespace", "network namespace"))


def record(ctx, box: Sandbox, tool: str) -> str:
    """What a tool's result says about the sandbox its graded code ran in; a partial one (an observation) or an
    unsafe one (a weakening, which `status` and the reminders then show) is journaled once per run."""
    from aci.progress import SANDBOX

    if box.kind != "full" and not any((e.get("data") or {}).get(SANDBOX, {}).get("note") == box.note
                                      for e in ctx.state.journal()):
        with ctx.state.event("sandbox", box.note, tool=tool,
                             data={SANDBOX: {"kind": box.kind, "missing": list(box.missing), "note": box.note}}):
            pass
    return box.describe()


def _python_dirs() -> list[str]:
    """The Python installation the harness needs inside: the base interpreter's prefix and the venv's."""
    found = []
    for prefix in (sys.base_prefix, sys.base_exec_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable))):
        real = os.path.realpath(prefix)
        if real != "/" and not any(real == d or real.startswith(d + "/") for d in (*SYSTEM_DIRS, *found)):
            found.append(real)
    return found


def _bwrap_args(work: Path, *, root: bool) -> list[str]:
    args = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if root:
        args += [a for cap in SWITCH_CAPS for a in ("--cap-add", cap)]
    else:
        args.append("--unshare-user")
    for d in SYSTEM_DIRS:
        args += ["--ro-bind", d, d]
    for link in SYSTEM_LINKS:
        if os.path.islink(link):
            args += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            args += ["--ro-bind", link, link]
    # The work folder first: a Python installation under /tmp (a venv in a checkout there) is bound on top of
    # it, where binding the work folder last would hide it
    args += ["--bind", str(work), INSIDE]
    made: set[str] = {INSIDE}
    for prefix in _python_dirs():
        parts = prefix.strip("/").split("/")
        for i in range(1, len(parts)):  # traversable parents (bwrap makes them 0700), e.g. /root of /root/.pyenv
            parent = "/" + "/".join(parts[:i])
            if parent not in made:
                made.add(parent)
                inside = parent.startswith(INSIDE + "/")  # a folder in the work folder: made there, as it is
                args += ["--dir", parent] if inside else ["--perms", "0755", "--dir", parent]
        args += ["--ro-bind", prefix, prefix]
    return [*args, "--proc", "/proc", "--dev", "/dev", "--chdir", INSIDE]


def bwrap_binary() -> str | None:
    named = os.environ.get(BWRAP_ENV)
    if named is not None:
        return (shutil.which(named) or None) if named else None
    return shutil.which("bwrap")


def candidates() -> list[Sandbox]:
    """The ways to run the harness here, strongest first; the last needs no probe (it is what remains)."""
    root = os.geteuid() == 0
    setpriv = shutil.which("setpriv") if root else None
    bwrap = bwrap_binary()
    out = []
    if bwrap and (setpriv or not root):
        out.append(Sandbox("full", bwrap=bwrap, setpriv=setpriv))
    why = ", ".join([*(["no bwrap on PATH"] if not bwrap else []), *(["no setpriv"] if root and not setpriv else [])])
    if setpriv or not root:
        out.append(Sandbox("partial", ("mount namespace",), setpriv=setpriv, isolate=True, why=why))
    if root:
        out.append(Sandbox("unsafe", ("non-root uid", "mount namespace", "process limit"), isolate=True, why=why))
    return out
