"""Locate the Markdown half of the product (SKILL.md, skills/, workflows/, rules/).

In a source checkout these sit beside the `aci` package; in an installed wheel they are shipped as
`aci/_bundle/` (see `pyproject.toml`). Everything that reads them goes through `root()`.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


@cache
def root() -> Path:
    """The folder holding SKILL.md, skills/, workflows/ and rules/."""
    checkout = _PACKAGE.parent
    if (checkout / "rules" / "rules.yaml").is_file():
        return checkout
    return _PACKAGE / "_bundle"


def path(*parts: str) -> Path:
    return root().joinpath(*parts)


def skill_names() -> list[str]:
    skills = path("skills")
    return sorted(p.name for p in skills.iterdir() if (p / "SKILL.md").is_file()) if skills.is_dir() else []


def workflow_names() -> list[str]:
    wf = path("workflows")
    return sorted(p.stem for p in wf.glob("*.md")) if wf.is_dir() else []
