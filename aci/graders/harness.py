"""The unit-test grader's harness process: `python -I harness.py TOKEN_FD DONE_FD MEM CPU FSIZE NPROC ISOLATE`.

Started by `aci.graders.code` in a fresh work folder holding `solution.py` (the response's code) and
`tests.py` (the task's tests), inside the sandbox `aci.graders.sandbox` chose (bubblewrap where it works);
standard library only, never imported by `aci`. A pass is proven by the line `<token> done` on the DONE_FD
pipe, which this file writes only after the last test statement returned. The token arrives on TOKEN_FD
(read and closed before any response code runs) and never touches a file, an argument or the environment,
so exiting early (`sys.exit(0)`, `os._exit(0)`, an `atexit` hook that raises `SystemExit`, a signal)
proves nothing: exit status 0 alone is not a pass.

Before the tests run, what the response could have patched is put back: the `builtins` module's
names, trace and profile hooks, `sys.stdout`/`stderr`/`excepthook`. The tests run in their own
namespace holding the response's definitions, minus any that shadow a builtin (`abs = lambda x: 0`).
Both files are read and the tests compiled before the response runs, so deleting or editing
`tests.py` changes nothing.

Limits: address space (MEM bytes, 0 = none), CPU seconds, bytes per written file (FSIZE: an endless
`print` dies at the limit), processes (NPROC, counted by the kernel against this uid). `no_new_privs` is
always set. With ISOLATE=1 (the grader found no bubblewrap, which makes these namespaces itself) the harness
makes new user, PID and network namespaces where the kernel allows it: the code sees no network interface,
every process it started dies with the namespace's init, and the capabilities the new user namespace gives
are dropped before the code runs; where it managed, the line `<token> isolated` goes to DONE_FD first, so
the grader's probe learns what this machine allows.

What stays possible: code written to search this process's memory for the token and write it to the
pipe. No reward-hacking policy stumbles on that; the trace shows it.
"""

import builtins
import ctypes
import os
import resource
import sys

CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 24, 38


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def isolate() -> bool:
    """New user, PID and network namespaces for the children of this process; False where not permitted."""
    return _libc().unshare(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET) == 0


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities() -> None:
    """Give up the capabilities a new user namespace grants (over its own objects only, but none is needed):
    the bounding set first (that needs CAP_SETPCAP), then every set, so nothing can be regained."""
    libc = _libc()
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    for cap in range(last + 1):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    header, data = _CapHeader(0x20080522, 0), (_CapData * 2)()
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def limit(mem: int, cpu: int, fsize: int, nproc: int) -> None:
    if mem > 0:
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))


def run(token: bytes, done_fd: int, solution: str, tests: str) -> None:
    """Run the response, restore what it may have patched, run the tests, and prove it; never returns."""
    write, exit_ = os.write, os._exit
    tests_code = compile(tests, "tests.py", "exec")
    names = builtins.__dict__
    pristine = dict(names)
    streams = (sys.stdout, sys.stderr, sys.__excepthook__)
    ns = {"__name__": "__main__", "__file__": "solution.py", "__builtins__": builtins}
    exec(compile(solution, "solution.py", "exec"), ns)
    sys.settrace(None)
    sys.setprofile(None)
    threading = sys.modules.get("threading")
    if threading is not None:
        threading.settrace(None)
        threading.setprofile(None)
    monitoring = getattr(sys, "monitoring", None)
    for tool in range(6) if monitoring is not None else ():
        if monitoring.get_tool(tool) is not None:
            monitoring.free_tool_id(tool)
    names.clear()  # in place: every module's `__builtins__` is this one dict
    names.update(pristine)
    sys.stdout, sys.stderr, sys.excepthook = streams
    test_ns = {k: v for k, v in ns.items() if k not in pristine}
    test_ns.update(__name__="__main__", __file__="tests.py", __builtins__=builtins)
    exec(tests_code, test_ns)
    sys.stdout.flush()
    write(done_fd, token + b" done\n")
    exit_(0)


def _status(raw: int) -> int:
    code = os.waitstatus_to_exitcode(raw)
    return code if code >= 0 else 128 - code


def main() -> None:
    token_fd, done_fd, mem, cpu, fsize, nproc, wanted = (int(a) for a in sys.argv[1:8])
    token = os.read(token_fd, 256).strip()
    os.close(token_fd)
    with open("solution.py", encoding="utf-8") as f:
        solution = f.read()
    with open("tests.py", encoding="utf-8") as f:
        tests = f.read()
    if _libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if not (wanted and isolate()):
        limit(mem, cpu, fsize, nproc)
        run(token, done_fd, solution, tests)
    os.write(done_fd, token + b" isolated\n")
    # This process stays outside the namespaces; its first child is the PID namespace's init, which waits for
    # the worker: when the init ends, the kernel kills whatever the worker left behind.
    init = os.fork()
    if init == 0:
        worker = os.fork()
        if worker == 0:
            drop_capabilities()
            limit(mem, cpu, fsize, nproc)
            run(token, done_fd, solution, tests)
        os.close(done_fd)
        os._exit(_status(os.waitpid(worker, 0)[1]))
    os.close(done_fd)
    os._exit(_status(os.waitpid(init, 0)[1]))


if __name__ == "__main__":
    main()
