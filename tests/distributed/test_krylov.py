"""Distributed CG and GMRES take scipy's iterations with the serial preconditioner."""

from __future__ import annotations

import pytest

RUNS = ("cg/gdsw/additive", "cg/rgdsw/additive", "cg/one-level", "cg/gdsw/hybrid",
        "cg/gdsw/x0-atol",
        "cg/maxiter", "gmres/gdsw/restricted", "gmres/gdsw/restricted/restart5",
        "gmres/one-level/restricted/x0", "gmres/maxiter")


@pytest.mark.parametrize("run", RUNS)
def test_same_iterations_and_info_as_scipy(mpi_results, run):
    r = mpi_results["krylov"][run]
    assert r["iterations"] == r["serial_iterations"]
    assert r["info"] == r["serial_info"]
    # the same iterates up to rounding (a loose atol stops early: rounding grows a little)
    assert r["err_x"] <= (1e-10 if "atol" in run else 1e-12)


def test_iteration_counts_are_those_of_the_preconditioners(mpi_results):
    k = mpi_results["krylov"]
    # 32 x 32 Poisson, 16 boxes, rtol 1e-8: GDSW additive CG 26, RAS-GDSW GMRES 23 (serial)
    assert 15 <= k["cg/gdsw/additive"]["iterations"] <= 40
    assert k["cg/maxiter"]["info"] == 5 and k["gmres/maxiter"]["info"] == 2


def test_gmres_cgs2_converges_like_mgs(mpi_results):
    k = mpi_results["krylov"]
    r = k["gmres/cgs2"]
    assert r["info"] == 0 and r["relres"] <= 1e-8
    assert abs(r["iterations"] - k["gmres/gdsw/restricted"]["iterations"]) <= 1


def test_zero_rhs(mpi_results):
    assert mpi_results["krylov"]["zero_rhs"] == {"info": 0, "max": 0.0}
