"""Locate the Markdown half of the product (SKILL.md, skills/, workflows/, rules/).

In a source checkout these sit beside the `aci` package; in an installed wheel they are shipped as
`aci/_bundle/` (see `pyproject.toml`). Everything that reads them goes through `root()`.
"""

from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True)
class Document:
    """One Markdown file as the MCP server offers it: a resource URI, a short name and what it is for."""

    uri: str
    name: str
    description: str
    path: Path


def description(text: str) -> str:
    """What a Markdown file is for: its front matter's `description` (skills), else its first heading."""
    if text.startswith("---\n"):
        end = text.find("\n---", 4)
        if end > 0:
            import yaml

            meta = yaml.safe_load(text[4:end])
            if isinstance(meta, dict) and isinstance(meta.get("description"), str):
                return meta["description"].strip()
    for line in text.splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return ""


def documents() -> list[Document]:
    """Every Markdown file of the bundle an agent may need, each with its own description: the entry
    skill, each skill and the reference files beside it, the workflows and the integrity rules."""
    found: list[tuple[str, Path]] = [("skill://posttrain", path("SKILL.md"))]
    for name in skill_names():
        found.append((f"skill://{name}", path("skills", name, "SKILL.md")))
        refs = path("skills", name, "references")
        found += [(f"skill://{name}/references/{p.name}", p) for p in sorted(refs.glob("*.md"))]
    found += [(f"workflow://{n}", path("workflows", f"{n}.md")) for n in workflow_names()]
    found.append(("rules://integrity", path("rules", "integrity.md")))
    return [Document(uri, uri.split("://", 1)[1], description(p.read_text(encoding="utf-8")), p)
            for uri, p in found if p.is_file()]
