"""``TwoLevelSchwarz.stats["phases"]``: the set-up split by phase."""

from __future__ import annotations

import time

import numpy as np
import pytest

import ddops
from ddops.precond.schwarz import TwoLevelSchwarz

DECOMPOSITION = ("partition", "overlap")


@pytest.fixture(scope="module")
def problem():
    A = ddops.problems.poisson_3d(12)
    return A, ddops.Decomposition.from_matrix(A, 6)


@pytest.mark.parametrize("coarse", ["gdsw", "agdsw", "geneo", None])
@pytest.mark.parametrize("solver", ["dense", "superlu"])
def test_the_phases_add_up_to_the_set_up(problem, coarse, solver):
    """The phases (all but the decomposition's) add up to setup_seconds within 5 %, for a
    fresh set-up and an update; each coarse space spends time in its own phases only."""
    A, d = problem
    sub = {"geneo": ddops.GenEOOptions(threshold=0.9)} if coarse == "geneo" else {}
    M = TwoLevelSchwarz(A, d, options=ddops.SchwarzOptions(
        coarse=coarse or "none", local_solver=solver, **sub))
    assert M.coarse_dim > 0 or coarse is None
    for _ in range(2):
        phases = M.stats["phases"]
        total = sum(v for k, v in phases.items() if k not in DECOMPOSITION)
        assert abs(total - M.setup_seconds) <= 0.05 * M.setup_seconds, (phases, M.setup_seconds)
        assert all(v >= 0 for v in phases.values())
        M.update((2.0 * A).tocsr())
    phases = M.stats["phases"]
    assert (phases["extension"] > 0) == (coarse in ("gdsw", "agdsw"))
    assert (phases["interface"] > 0) == (coarse == "gdsw")
    assert (phases["eigenproblems"] > 0) == (coarse in ("agdsw", "geneo"))
    assert (phases["coarse_factorization"] > 0) == (coarse is not None)
    assert phases["local_factorization"] > 0 and phases["extraction"] > 0


def test_the_decomposition_phases_are_its_own(problem, monkeypatch):
    """partition and overlap come from Decomposition.from_matrix (not in setup_seconds): a
    partitioner made slower by a known delay (1 s) shows it in partition and nowhere else."""
    A, _ = problem
    import ddops.dd._partitioning as partitioning

    real = partitioning._partition

    def slow(*args, **kwargs):
        time.sleep(1.0)
        return real(*args, **kwargs)
    monkeypatch.setattr(partitioning, "_partition", slow)
    d = ddops.Decomposition.from_matrix(A, 6)
    assert d.setup_stats["partition_seconds"] >= 1.0
    assert d.setup_stats["overlap_seconds"] < 1.0
    M = TwoLevelSchwarz(A, d, coarse_basis="gdsw")
    assert M.stats["phases"]["partition"] == d.setup_stats["partition_seconds"]
    assert M.setup_seconds < 1.0 <= M.stats["phases"]["partition"]  # outside the set-up
    grid = ddops.Decomposition.from_grid((12, 12), (2, 2))
    assert grid.setup_stats == {}
    np.testing.assert_equal(TwoLevelSchwarz(ddops.poisson_2d(12), grid).stats["phases"][
        "partition"], 0.0)
