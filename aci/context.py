"""What every tool call runs against: the working directory, the state folder, the rules and the clock.

One `Context` is built per call (cheap: files are read lazily and once), by the CLI from its options
and by the MCP server from its start-up options. Paths given by the caller go through `path()`, which
refuses anything outside the context's roots.
"""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from aci import records, rules
from aci.clock import Clock, clock_for
from aci.errors import ACIError
from aci.files import inside, links_outside, regular_only
from aci.state import State, iso, resolve_root

ROOTS_ENV = "ACI_ROOTS"  # extra allowed roots, os.pathsep-separated (e.g. a shared data or model cache)


class Context:
    def __init__(self, state: Path | str | None = None, workdir: Path | str | None = None):
        self.workdir = Path(workdir or os.getcwd()).resolve()
        self.state = State(resolve_root(state, self.workdir))

    @cached_property
    def card(self) -> records.RunCard | None:
        return self._record(records.RUN_CARD, records.RunCard)

    @cached_property
    def rules(self) -> rules.Rules:
        return rules.load(self.card.profile if self.card else "default")

    @cached_property
    def clock(self) -> Clock:
        budget_h = self.card.budget_hours if self.card else self.rules.profile.budget_hours
        return clock_for(self.workdir, self.card, self.rules.profile.reserve_min(budget_h * 60))

    def settle_clock(self) -> None:
        """Record the deadline on the run card when timer.sh moved it (see `clock.from_timer`), so every later
        call reads the same deadline. Called before a tool runs, when no state lock is held."""
        clk, card = self.clock, self.card
        if not (clk.to_record and card):
            return
        was = iso(card.deadline) if card.deadline else None
        deadline = iso(clk.deadline)
        with self.state.event("clock", f"deadline {deadline} from timer.sh (the run card said {was})", tool="clock",
                              data={"deadline": deadline, "was": was}) as w:
            w.write_json(records.RUN_CARD, card.model_copy(update={"deadline": clk.deadline}).model_dump(
                mode="json", exclude_none=True))
        self.forget()

    @cached_property
    def best(self) -> records.Best | None:
        return self._record(records.BEST, records.Best)

    def _record(self, rel: str, model: type[records.Record]):
        raw = self.state.read(rel)
        if raw is None:
            return None
        try:
            return model.model_validate(raw)
        except ValidationError as e:
            err = e.errors()[0]
            field = ".".join(str(p) for p in err["loc"]) or "(top level)"
            raise ACIError(f"state file {self.state.root / rel}: field {field}: {err['msg']}") from None

    def forget(self) -> None:
        """Drop cached reads after a tool changed state, so the result envelope is current."""
        for name in ("card", "rules", "clock", "best"):
            self.__dict__.pop(name, None)

    @cached_property
    def roots(self) -> list[Path]:
        extra = [Path(p).resolve() for p in os.environ.get(ROOTS_ENV, "").split(os.pathsep) if p]
        hf = os.environ.get("HF_HOME")
        return [self.workdir, self.state.root, *extra, *([Path(hf).resolve()] if hf else [])]

    def path(self, value: str | Path, *, must_exist: bool = False, what: str = "path",
             kind: Literal["file", "folder"] | None = None) -> Path:
        """Resolve a caller-given path against the workdir and refuse it outside the roots, and refuse what
        no tool can read or write whole: a name with a NUL byte or not valid UTF-8 (state and answers are
        UTF-8 JSON), and a FIFO, socket or device (reading a FIFO blocks until a writer comes). `kind`
        ("file" or "folder"): what an existing path must be (an output written as a file over a folder
        fails only once the data is written)."""
        text = str(value)
        if "\0" in text:
            raise ACIError(f"{what} {value!r} contains a NUL byte, which no file name can hold")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise ACIError(f"{what} {value!r} is not valid UTF-8 (a lone surrogate, or the bytes of a name in "
                           f"another encoding); rename the file to a UTF-8 name") from None
        p = Path(value).expanduser()
        try:
            p = (p if p.is_absolute() else self.workdir / p).resolve()
            looped = p.is_symlink()  # resolved, yet a link: a loop (Python 3.13 and later)
        except RuntimeError:  # a loop of links, before Python 3.13
            looped = True
        except OSError as e:  # a name or path too long, a folder that cannot be read
            raise ACIError(f"{what} {value!r} cannot be used: {e.strerror}") from None
        if looped:
            raise ACIError(f"{what} {value!r} is a loop of symbolic links (each points on to the next, back to the "
                           f"first)")
        if not inside(p, self.roots):
            allowed = ", ".join(str(r) for r in self.roots)
            raise ACIError(f"{what} {value!r} resolves to {p}, outside the allowed roots ({allowed}); "
                           f"add a root with {ROOTS_ENV} if it is meant to be used")
        if must_exist and not p.exists():
            raise ACIError(f"{what} {value!r} does not exist ({p})")
        regular_only(p, what)
        if kind == "file" and p.is_dir() or kind == "folder" and p.exists() and not p.is_dir():
            raise ACIError(f"{what} {value!r} is {'a folder' if p.is_dir() else 'a file'} ({p}); a {kind} is needed "
                           f"here")
        return p

    def check_links(self, folder: Path, what: str) -> None:
        """Refuse a model folder holding a symbolic link that resolves outside the roots (`aci.files`)."""
        found = links_outside(folder, self.roots)
        if found:
            name, target = found[0]
            more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
            raise ACIError(f"{what} {folder}: {name} is a symbolic link to {target}, outside the allowed roots "
                           f"({', '.join(str(r) for r in self.roots)}){more}; a model folder's files must lie "
                           f"inside them: copy the file in instead of linking it, or add a root with {ROOTS_ENV}")

    def require_card(self) -> records.RunCard:
        if not self.card:
            raise ACIError(f"no run card in {self.state.root}: start with `aci plan init --base-model ... "
                           f"--benchmark ... --eval-command ...`")
        return self.card
