"""No import cycles between the modules of ddops.

The graph is built from the source with :mod:`ast`, without importing anything:

* every ``ddops/**/*.py`` is a node; a package is its ``__init__`` (``ddops.dd``);
* ``import a.b`` is an edge to ``a.b``; ``from a import x`` is an edge to ``a.x`` when that is
  a module, else to ``a``; relative imports are resolved against the importing module;
* imports anywhere in a module count, also inside functions and ``try`` blocks: an import
  moved into a function to dodge a cycle is still a cycle in the design.  Only imports under
  ``if TYPE_CHECKING:`` are left out (they never run);
* importing ``a.b.c`` runs the ``__init__`` of ``a`` and ``a.b`` too, but that is no edge: a
  package that imports its own submodules (``ddops/__init__.py`` re-exporting them) is no
  cycle, unless one of those submodules imports the package back, which is an edge like any
  other.

Besides the module graph, the subpackages (``ddops.dd``, ``ddops.problems``, ...) must not
import each other in a circle either: :func:`test_no_cycles_between_subpackages`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "ddops"


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    path: str  # file of the importing module, relative to the repository
    line: int
    local: bool  # inside a function or method

    def __str__(self) -> str:
        where = "function-local import" if self.local else "import"
        return f"{self.source} -> {self.target}  ({where} at {self.path}:{self.line})"


def module_files(root: Path = ROOT, package: str = PACKAGE) -> dict[str, Path]:
    """Dotted module name -> file, for every module and package of ``package``."""
    modules = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _imports(tree: ast.AST):
    """``(node, local)`` for every import statement outside ``if TYPE_CHECKING:`` blocks."""
    def visit(node, local):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, local
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                for branch in child.orelse:  # the else branch does run
                    yield from visit(ast.Module(body=[branch], type_ignores=[]), local)
            else:
                inner = local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                    ast.Lambda))
                yield from visit(child, inner)

    yield from visit(tree, False)


def _resolve_base(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    # the package the relative import starts from: the module's own package, or the
    # package itself for an __init__
    parts = module.split(".") if is_package else module.split(".")[:-1]
    if node.level > 1:
        parts = parts[: len(parts) - (node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


def import_edges(root: Path = ROOT, package: str = PACKAGE) -> list[Edge]:
    """Every import of a ``package`` module by a ``package`` module."""
    modules = module_files(root, package)
    edges = []
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        rel = path.relative_to(root).as_posix()
        for node, local in _imports(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = _resolve_base(name, is_package, node)
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
            for target in dict.fromkeys(targets):
                if target in modules and target != name:
                    edges.append(Edge(name, target, rel, node.lineno, local))
    return edges


def find_cycles(edges: list[Edge]) -> list[list[Edge]]:
    """One shortest cycle per strongly connected component of more than one node (Tarjan's
    algorithm, then a breadth-first search inside the component), with every other edge
    inside that component after it: fixing the one cycle may leave another."""
    graph: dict[str, list[Edge]] = {}
    for e in edges:
        graph.setdefault(e.source, []).append(e)
        graph.setdefault(e.target, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []

    def strongconnect(v):  # recursion depth is bounded by the number of modules
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for e in graph[v]:
            w = e.target
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)

    cycles = []
    for component in components:
        start = min(component)
        # shortest path from start back to start inside the component
        previous: dict[str, Edge] = {}
        frontier = [start]
        seen = {start}
        found = None
        while frontier and found is None:
            nxt = []
            for v in frontier:
                for e in sorted(graph[v], key=lambda e: e.target):
                    if e.target not in component:
                        continue
                    if e.target == start:
                        found = e
                        break
                    if e.target not in seen:
                        seen.add(e.target)
                        previous[e.target] = e
                        nxt.append(e.target)
                if found is not None:
                    break
            frontier = nxt
        cycle = [found]
        while cycle[0].source != start:
            cycle.insert(0, previous[cycle[0].source])
        rest = [e for v in sorted(component) for e in graph[v]
                if e.target in component and e not in cycle]
        cycles.append(cycle + rest)
    return cycles


def _closed(edges: list[Edge]) -> int:
    """Length of the leading cycle of a :func:`find_cycles` entry."""
    for k, e in enumerate(edges):
        if e.target == edges[0].source:
            return k + 1
    raise AssertionError("no cycle")


def format_cycles(cycles: list[list[Edge]], what: str) -> str:
    lines = [f"{len(cycles)} group(s) of {what} that import each other in a cycle:"]
    for k, edges in enumerate(cycles, 1):
        m = _closed(edges)
        members = sorted({e.source for e in edges})
        lines.append(f"  group {k}: {', '.join(members)}")
        chain = " -> ".join([e.source for e in edges[:m]] + [edges[0].source])
        lines.append(f"    cycle: {chain}")
        lines.extend(f"      {e}" for e in edges[:m])
        if edges[m:]:
            lines.append("    other imports inside the group:")
            lines.extend(f"      {e}" for e in edges[m:])
    return "\n".join(lines)


def subpackage(module: str, package: str = PACKAGE) -> str:
    """``ddops.dd.coarse`` -> ``ddops.dd``; top-level modules (``ddops.io``) are their own."""
    parts = module.split(".")
    return ".".join(parts[:2])


def subpackage_edges(edges: list[Edge], package: str = PACKAGE) -> list[Edge]:
    """The module edges between different subpackages, named by subpackage.

    The top-level ``ddops/__init__.py`` is left out: it re-exports from every layer.
    """
    out = []
    for e in edges:
        if package in (e.source, e.target):
            continue
        a, b = subpackage(e.source), subpackage(e.target)
        if a != b:
            out.append(Edge(a, b, e.path, e.line, e.local))
    return out


# -- the tests -----------------------------------------------------------------------------
def test_no_cycles_between_modules():
    cycles = find_cycles(import_edges())
    assert not cycles, format_cycles(cycles, "modules")


def test_no_cycles_between_subpackages():
    cycles = find_cycles(subpackage_edges(import_edges()))
    assert not cycles, format_cycles(cycles, "subpackages (each edge is one of the imports)")


# -- the checker itself --------------------------------------------------------------------
def _package(tmp_path, files):
    for name, text in files.items():
        path = tmp_path / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return import_edges(tmp_path, "pkg")


def test_checker_resolves_imports(tmp_path):
    edges = _package(tmp_path, {
        "__init__.py": "from . import a\nfrom .sub import b as _b\n",
        "a.py": "import pkg.sub.b\nfrom .sub import helper\n",
        "sub/__init__.py": "",
        "sub/b.py": "from ..a import thing\nfrom .. import a\n",
        "sub/c.py": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .. import a\n"
                     "def f():\n    from . import b\n"),
    })
    got = {(e.source, e.target, e.local) for e in edges}
    assert got == {
        ("pkg", "pkg.a", False), ("pkg", "pkg.sub.b", False),
        ("pkg.a", "pkg.sub.b", False), ("pkg.a", "pkg.sub", False),
        ("pkg.sub.b", "pkg.a", False),
        ("pkg.sub.c", "pkg.sub.b", True),
    }


def test_checker_finds_cycles(tmp_path):
    edges = _package(tmp_path, {
        "__init__.py": "from .a import x\n",  # a package importing its module: no cycle
        "a.py": "from .b import y\nx = 1\n",
        "b.py": "def f():\n    from .a import x\n",  # a function-local import counts
        "c.py": "import pkg\n",  # imports the package back ...
        "d.py": "",
    })
    cycles = find_cycles(edges)
    assert [[e.source for e in c] for c in cycles] == [["pkg.a", "pkg.b"]]
    message = format_cycles(cycles, "modules")
    assert "group 1: pkg.a, pkg.b" in message
    assert "cycle: pkg.a -> pkg.b -> pkg.a" in message
    assert "function-local import at pkg/b.py:2" in message
    # ... which is a cycle only once the package imports it
    edges = _package(tmp_path, {"__init__.py": "from .a import x\nfrom . import c\n"})
    cycles = find_cycles(edges)
    assert sorted(c[0].source for c in cycles) == ["pkg", "pkg.a"]
