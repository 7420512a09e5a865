"""The benchmark scripts use ddops's public API only.

An :mod:`ast` walk of ``benchmarks/*.py`` (nothing is imported or run) refuses

* imports from a private module (``ddops._validation``, ``ddops.dd._partitioning``);
* ``from M import _name`` where ``M`` is ddops or one of the benchmark scripts (a helper the
  scripts share belongs in ``benchmarks/common.py``, public);
* attribute access ``x._name`` (not dunders) on anything but ``self`` and ``cls``, and the
  same through ``getattr``/``setattr``/``hasattr``/``delattr`` with a literal name.  The
  scripts' objects are nearly all ddops objects, so a private attribute anywhere else is
  read as one; a name that is a module outside ddops whose private attribute is needed
  goes in :data:`OTHER_MODULES`.

:data:`KNOWN` lists the private uses still waiting for a public API, each with what it
needs; an entry that no longer occurs fails the test too, so that it is removed.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"

#: Names bound to modules outside ddops whose private attributes a script may use.
OTHER_MODULES: frozenset[str] = frozenset()

#: ``(file, private name)`` -> what the public replacement needs.
KNOWN: dict[tuple[str, str], str] = {}

_ATTRIBUTE_CALLS = ("getattr", "setattr", "hasattr", "delattr")


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_uses(path: Path, scripts: set[str]) -> list[tuple[int, str, str]]:
    """``(line, private name, what)`` for every private use in one script."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []

    def own(module: str) -> bool:
        head = module.split(".")[0]
        return head in ("ddops", "benchmarks") or module in scripts

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "ddops" and any(map(_private, parts)):
                    found.append((node.lineno, alias.name, f"import {alias.name}"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if not own(node.module):
                continue
            private_module = [p for p in node.module.split(".") if _private(p)]
            if private_module:
                found.append((node.lineno, private_module[0],
                              f"from {node.module} import ... (a private module)"))
            for alias in node.names:
                if _private(alias.name):
                    found.append((node.lineno, alias.name,
                                  f"from {node.module} import {alias.name}"))
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            base = node.value
            if isinstance(base, ast.Name) and base.id in {"self", "cls", *OTHER_MODULES}:
                continue
            found.append((node.lineno, node.attr, f"{ast.unparse(base)}.{node.attr}"))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in _ATTRIBUTE_CALLS and len(node.args) >= 2
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
              and _private(node.args[1].value)):
            base = node.args[0]
            if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                continue
            found.append((node.lineno, node.args[1].value,
                          f"{node.func.id}({ast.unparse(base)}, {node.args[1].value!r})"))
    return found


def all_private_uses(folder: Path = BENCHMARKS) -> dict[tuple[str, str], list[str]]:
    scripts = sorted(folder.glob("*.py"))
    names = {p.stem for p in scripts}
    uses: dict[tuple[str, str], list[str]] = {}
    for path in scripts:
        for line, name, what in private_uses(path, names):
            uses.setdefault((path.name, name), []).append(
                f"benchmarks/{path.name}:{line}: {what}")
    return uses


def test_benchmarks_use_the_public_api_only():
    uses = all_private_uses()
    new = [where for key, found in sorted(uses.items()) if key not in KNOWN for where in found]
    assert not new, ("benchmark scripts use private names (add a public API to ddops or "
                     "benchmarks/common.py and use it):\n  " + "\n  ".join(new))


def test_known_private_uses_still_occur():
    uses = all_private_uses()
    stale = [f"{file}: {name}" for file, name in KNOWN if (file, name) not in uses]
    assert not stale, ("these private uses are gone; remove them from KNOWN in "
                       f"{Path(__file__).name}: " + ", ".join(stale))


def test_checker_finds_private_uses(tmp_path):
    (tmp_path / "helper.py").write_text("def _shared():\n    pass\n")
    (tmp_path / "script.py").write_text(
        "import numpy as np\n"
        "from ddops.dd import adaptive\n"
        "from ddops.precond.schwarz import _sparse_spd_factor\n"
        "from ddops.dd._partitioning import partition\n"
        "from helper import _shared\n"
        "from collections import _private_but_not_ours\n"
        "class Runner:\n"
        "    def run(self, op):\n"
        "        self._cache = {}\n"
        "        n = op.__class__.__name__\n"
        "        w = op._width\n"
        "        return getattr(op, '_notes', None), getattr(self, '_cache')\n")
    uses = {(name, what) for _, name, what in private_uses(tmp_path / "script.py",
                                                           {"helper", "script"})}
    assert uses == {
        ("_sparse_spd_factor", "from ddops.precond.schwarz import _sparse_spd_factor"),
        ("_partitioning", "from ddops.dd._partitioning import ... (a private module)"),
        ("_shared", "from helper import _shared"),
        ("_width", "op._width"),
        ("_notes", "getattr(op, '_notes')"),
    }
