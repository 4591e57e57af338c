"""The package's shape, checked from its source: layers that only depend downward, no import circle.

Layers, top to bottom: the surfaces (`server`, `cli`, `commands`) > the tool adapters (`aci/tools/`) >
the tool framework (`registry`, `envelope`) > the domain (everything else: state, rules, progress,
training, evaluation, rollout, ...). Every import counts, also one inside a function (a lazy import is
still an arrow), so a circle cannot hide behind one. So does the package a `from P import x` reads: it runs
P's `__init__` and takes x from it, so `from aci.report import plots` inside `aci/report/html.py`, whose
package imports `html`, is a circle even though `plots` is a module.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "aci"
SURFACES = {"aci.server", "aci.cli", "aci.commands"}
FRAMEWORK = {"aci.registry", "aci.envelope"}
# The registry finds the tool modules by listing the `aci.tools` package (which holds no code), so a new
# tool needs no hand-kept list: the one import that points up, by design.
DISCOVERY = ("aci.registry", "aci.tools")
MAX_LINES = 400
ADAPTER_LINES = 160  # a tool adapter only translates: its input, its output, the calls into the domain
LARGE: set[str] = set()  # modules allowed over the limit while their split is pending


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    out = {}
    for p in package.rglob("*.py"):
        parts = p.relative_to(package.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def imports(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports. `from P import x` counts P (its `__init__` runs and x is
    read from it) and P.x when x is a module."""
    mods = modules(package)
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name in mods}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                found.add(base)
                found |= {f"{base}.{a.name}" for a in node.names}
        graph[name] = {m for m in found if m in mods and m != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def layer(module: str) -> int:
    if module in SURFACES:
        return 3
    if module.startswith("aci.tools"):
        return 2
    return 1 if module in FRAMEWORK else 0


def test_the_graph_sees_imports():
    graph = imports()
    assert {"aci.envelope", "aci.context", "aci.errors"} <= graph["aci.registry"]
    assert "aci.registry" in graph["aci.tools.plan"]
    assert "aci.training.config" in graph["aci.training.run"]  # a function-level import counts


def test_no_import_circle():
    found = circles(imports())
    assert not found, f"import circles: {found}"


def test_a_circle_through_a_package_init_is_seen(tmp_path: Path):
    """The shape `aci/report` had: the package imports its module, and the module imports a sibling through
    the package, so importing the module reads from the half-run `__init__` that imported it."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from pkg.sub.page import render\n")
    (pkg / "sub" / "page.py").write_text("from pkg.sub import plots\n")
    (pkg / "sub" / "plots.py").write_text("")
    assert circles(imports(pkg)) == [["pkg.sub", "pkg.sub.page"]]
    (pkg / "sub" / "page.py").write_text("from pkg.sub.plots import draw\n")
    assert circles(imports(pkg)) == []


def test_nothing_reaches_up():
    graph = imports()
    up = [f"{m} -> {d}" for m, deps in graph.items() for d in deps if layer(d) > layer(m) and (m, d) != DISCOVERY]
    assert not up, "imports of a higher layer:\n" + "\n".join(sorted(up))


def test_modules_stay_small():
    """A module over about 400 lines holds more than one job; split it by concern."""
    big = {str(p.relative_to(PACKAGE.parent)): n for p in PACKAGE.rglob("*.py")
           if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert set(big) <= LARGE, f"modules over {MAX_LINES} lines: {big}"


def test_tool_adapters_stay_thin():
    """What a tool does lives in the domain packages; an adapter that grows is holding logic of its own."""
    big = {p.name: n for p in (PACKAGE / "tools").glob("*.py") if (n := len(p.read_text().splitlines())) > ADAPTER_LINES}
    assert not big, f"tool adapters over {ADAPTER_LINES} lines: {big}"


def test_tool_adapters_do_not_import_each_other():
    graph = imports()
    across = [f"{m} -> {d}" for m, deps in graph.items() if m.startswith("aci.tools.")
              for d in deps if d.startswith("aci.tools.")]
    assert not across, across
