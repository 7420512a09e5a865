"""The optional local solvers in tests: skip when their package is missing, fail instead
when ``DDOPS_REQUIRE_SOLVERS`` is set (as in CI, where the ``test`` extra installs them)."""

from __future__ import annotations

import importlib.util
import os

import pytest

#: The package behind each optional solver.
PACKAGES = {"pardiso": "pypardiso", "amg": "pyamg"}


def need(solver: str) -> None:
    """Skip (or fail, with ``DDOPS_REQUIRE_SOLVERS``) when ``solver``'s package is missing."""
    package = PACKAGES.get(solver)
    if package is None or importlib.util.find_spec(package) is not None:
        return
    if os.environ.get("DDOPS_REQUIRE_SOLVERS", "") not in ("", "0"):
        pytest.fail(f"DDOPS_REQUIRE_SOLVERS is set but {package} (local solver {solver!r}) "
                    "is not installed")
    pytest.skip(f"needs {package} (local solver {solver!r})")
