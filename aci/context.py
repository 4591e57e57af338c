"""What every tool call runs against: the working directory, the state folder, the rules and the clock.

One `Context` is built per call (cheap: files are read lazily and once), by the CLI from its options
and by the MCP server from its start-up options. Paths given by the caller go through `path()`, which
refuses anything outside the context's roots.
"""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path

from aci import records, rules
from aci.clock import Clock, clock_for
from aci.errors import ACIError
from aci.state import State

ROOTS_ENV = "ACI_ROOTS"  # extra allowed roots, os.pathsep-separated (e.g. a shared data or model cache)


class Context:
    def __init__(self, state: Path | str | None = None, workdir: Path | str | None = None):
        self.workdir = Path(workdir or os.getcwd()).resolve()
        self.state = State(state if state is not None else (os.environ.get("ACI_STATE") or self.workdir / "state"))

    @cached_property
    def card(self) -> dict | None:
        return self.state.read(records.RUN_CARD)

    @cached_property
    def rules(self) -> rules.Rules:
        return rules.load((self.card or {}).get("profile", "default"))

    @cached_property
    def clock(self) -> Clock:
        budget_h = (self.card or {}).get("budget_hours") or self.rules.profile.budget_hours
        return clock_for(self.workdir, self.card, self.rules.profile.reserve_min(float(budget_h) * 60))

    def settle_clock(self) -> None:
        """Record the deadline on the run card when timer.sh moved it (see `clock.from_timer`), so every later
        call reads the same deadline. Called before a tool runs, when no state lock is held."""
        clk = self.clock
        if not (clk.to_record and self.card):
            return
        was = self.card.get("deadline")
        deadline = clk.deadline.isoformat(timespec="seconds")
        with self.state.event("clock", f"deadline {deadline} from timer.sh (the run card said {was})", tool="clock",
                              data={"deadline": deadline, "was": was}) as w:
            w.write_json(records.RUN_CARD, {**self.card, "deadline": deadline})
        self.forget()

    @cached_property
    def best(self) -> dict | None:
        return self.state.read(records.BEST)

    def forget(self) -> None:
        """Drop cached reads after a tool changed state, so the result envelope is current."""
        for name in ("card", "rules", "clock", "best"):
            self.__dict__.pop(name, None)

    @cached_property
    def roots(self) -> list[Path]:
        extra = [Path(p).resolve() for p in os.environ.get(ROOTS_ENV, "").split(os.pathsep) if p]
        hf = os.environ.get("HF_HOME")
        return [self.workdir, self.state.root, *extra, *([Path(hf).resolve()] if hf else [])]

    def path(self, value: str | Path, *, must_exist: bool = False, what: str = "path") -> Path:
        """Resolve a caller-given path against the workdir and refuse it outside the roots."""
        p = Path(value).expanduser()
        p = (p if p.is_absolute() else self.workdir / p).resolve()
        if not any(p == r or r in p.parents for r in self.roots):
            allowed = ", ".join(str(r) for r in self.roots)
            raise ACIError(f"{what} {value!r} resolves to {p}, outside the allowed roots ({allowed}); "
                           f"add a root with {ROOTS_ENV} if it is meant to be used")
        if must_exist and not p.exists():
            raise ACIError(f"{what} {value!r} does not exist ({p})")
        return p

    def require_card(self) -> dict:
        if not self.card:
            raise ACIError(f"no run card in {self.state.root}: start with `aci plan init --base-model ... "
                           f"--benchmark ... --eval-command ...`")
        return self.card
