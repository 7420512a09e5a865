"""Fixtures shared by the preconditioner tests."""

import pytest

import ddops
from ddops.precond import corrections
from tests._optional import need


@pytest.fixture
def threaded_problem(monkeypatch):
    """2D Poisson on a 30 x 30 grid in 3 x 3 boxes with PARDISO's local solver threaded at
    this small size too (``THREADED_SOLVE_MIN_ROWS`` 0): ``(A, decomposition)``."""
    need("pardiso")
    monkeypatch.setattr(corrections, "THREADED_SOLVE_MIN_ROWS", 0)
    A = ddops.poisson_2d(30)
    return A, ddops.Decomposition.from_grid((30, 30), (3, 3), 1)
