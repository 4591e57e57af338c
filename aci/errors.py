"""The one user-facing error type.

A tool raises `ACIError` for anything the caller can fix (bad input, a refused action, a rule). The MCP
server turns it into a `ToolError` whose text the model reads; the CLI prints it on stderr and exits 2.
Anything else is a bug and surfaces as such.
"""

from __future__ import annotations


class ACIError(Exception):
    """A user error with a message written for the agent that will read it.

    `rule` names the rule id when the refusal comes from `rules/rules.yaml`, so callers and tests can
    check which rule fired without parsing prose.
    """

    def __init__(self, message: str, *, rule: str | None = None):
        self.rule = rule
        super().__init__(f"[rule {rule}] {message}" if rule else message)


def where(path: object, line: int | None = None) -> str:
    """Format a file (and line) location for error messages: `data.jsonl:12`."""
    return f"{path}:{line}" if line is not None else str(path)
