"""Distributed TwoLevelSchwarz against the serial one (under mpiexec -n 2 and -n 4)."""

from __future__ import annotations

import itertools

import pytest

CASES = [f"{m}/{b}/{v}" for m, b, v in itertools.product(
    ("grid", "metis", "1d-element"), ("gdsw", "rgdsw", "nicolaides", "None"),
    ("additive", "restricted", "symmetric_restricted", "hybrid"))]


@pytest.mark.parametrize("case", CASES)
def test_apply_equals_serial(mpi_results, case):
    r = mpi_results["precond"][case]
    assert r["coarse_dim"] == r["serial_coarse_dim"]
    # Phi's rows of this rank and the assembled coarse matrix, then the application
    assert r["err_phi"] <= 1e-12 and r["err_A0"] <= 1e-12
    expected = {"gdsw": "rank-local", "rgdsw": "rank-local", "None": "None"}
    assert r["construction"] == expected.get(case.split("/")[1], "serial")
    assert r["err"] <= 1e-12
    assert r["err_adjoint"] <= 1e-12


@pytest.mark.parametrize("case", CASES)
def test_one_application_communicates_once_each_way(mpi_results, case):
    r = mpi_results["precond"][case]
    # hybrid with a coarse space: two more products with A and a second coarse solve
    extra = 1 if case.endswith("hybrid") and r["coarse_dim"] else 0
    assert r["exchanges"] == 2 + 2 * extra  # the forward halo exchange and the reverse sum
    # one reduction of the n0 coarse right-hand side values (none for one level)
    assert r["reductions"] == (1 + extra if r["coarse_dim"] else 0)
    assert r["reduction_bytes"] == 8 * r["coarse_dim"] * (1 + extra)


def test_rank_local_and_serial_coarse_constructions(mpi_results):
    r = mpi_results["coarse_constructions"]
    for key, v in r.items():
        # the rank-local extension only for the default (constant) null space
        local = key.endswith("local/constants")
        assert v["construction"] == ("rank-local" if local else "serial"), key
        assert v["err_phi"] <= 1e-12 and v["err_A0"] <= 1e-12, key
