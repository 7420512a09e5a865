"""Fixtures of the distributed tests: the checks of ``mpi_checks.py`` run once per rank count."""

from __future__ import annotations

import pytest

from ._mpi import HERE, run_json

#: Rank counts the checks run with (4 ranks oversubscribe the 2-core CI machine: fine).
RANKS = (2, 4)


@pytest.fixture(scope="session", params=RANKS, ids=lambda p: f"np{p}")
def mpi_results(request, tmp_path_factory) -> dict:
    """The JSON written by rank 0 of ``mpiexec -n P mpi_checks.py`` (one job per ``P``)."""
    out = tmp_path_factory.mktemp(f"mpi{request.param}") / "results.json"
    return run_json(HERE / "mpi_checks.py", request.param, out)
