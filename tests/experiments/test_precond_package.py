"""The modules of ``ddops.experiments.precond`` share public names only.

What one module of the package needs from another ddops module has a public name
there: no module imports an underscore name (``from .config import _helper``,
``from ddops.experiments.compare import _rescue``) from any other ddops module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ddops.experiments.precond as package

PACKAGE = Path(package.__file__).parent
MODULES = sorted(PACKAGE.rglob("*.py"))  # subpackages too, should there be any


def _module_name(path: Path) -> str:
    """The dotted name of a module file of the package."""
    parts = path.relative_to(PACKAGE.parents[2]).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_module(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    """The absolute name of the module an ``ImportFrom`` node imports from."""
    if node.level == 0:
        return node.module or ""
    # relative: level 1 is the importer's package (the importer itself for __init__.py)
    base = importer.split(".")
    if not is_package:
        base = base[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def private_imports(source: str, importer: str, is_package: bool = False) -> list[str]:
    """``module.name`` of each underscore name that the module ``importer`` (its
    ``source``) imports from another ddops module: relative or absolute, at the top or
    inside a function."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ImportFrom):
            continue
        module = _imported_module(node, importer, is_package)
        if module == importer or (module != "ddops" and not module.startswith("ddops.")):
            continue
        found += [f"{module}.{alias.name}" for alias in node.names
                  if alias.name.startswith("_")]
    return found


def test_the_package_has_its_modules():
    names = {p.stem for p in MODULES}
    assert {"__init__", "config", "problem_registry", "matrix_files", "runners", "report",
            "command_line"} <= names


@pytest.mark.parametrize("path", MODULES, ids=[str(p.relative_to(PACKAGE)) for p in MODULES])
def test_no_module_imports_a_private_name(path):
    assert private_imports(path.read_text(), _module_name(path),
                           is_package=path.name == "__init__.py") == []


def test_the_check_sees_relative_and_absolute_imports():
    source = ("from __future__ import annotations\n"
              "from .config import _check_common, PrecondConfig\n"
              "from ..compare import _rescue\n"
              "from ddops.experiments.cli import _config_from_args\n"
              "from numpy import _globals\n"
              "from .runners import _solve\n"
              "def f():\n"
              "    from ... import _validation\n")
    assert private_imports(source, "ddops.experiments.precond.runners") == [
        "ddops.experiments.precond.config._check_common", "ddops.experiments.compare._rescue",
        "ddops.experiments.cli._config_from_args", "ddops._validation"]
    # in the package's __init__.py, "." is the package itself
    assert private_imports("from .runners import _solve\nfrom . import _x\n",
                           "ddops.experiments.precond", is_package=True) == [
        "ddops.experiments.precond.runners._solve"]


def test_every_public_name_of_the_modules_is_exported_by_the_package():
    import importlib

    for path in MODULES:
        name = _module_name(path)
        if name == package.__name__:
            continue
        module = importlib.import_module(name)
        for public in module.__all__:
            assert getattr(package, public) is getattr(module, public), f"{name}.{public}"
