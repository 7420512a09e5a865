"""The native route (PCMG + PCASM on the ddops subdomains + Phi) against the serial library.

``worker_native.py`` runs under ``mpiexec -n P`` on 1, 2 and 4 ranks: PETSc's
CG with ``-pc_mg_type additive`` (PCASM basic, LU on the subdomains) and an
exact coarse solve takes the serial ``TwoLevelSchwarz(variant="additive")``
iterations with scipy's CG, and one application equals the serial operator
to rounding.  The in-process tests check the options and the messages.
"""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

import ddops

from . import _cases
from ._petsc import petsc4py, run_worker

#: Rank counts (4 ranks oversubscribe a 2-core machine: fine).
RANKS = (1, 2, 4)

CASES = _cases.NATIVE_CASES

_prefixes = itertools.count()


@pytest.fixture(scope="module", params=RANKS, ids=lambda p: f"np{p}")
def results(request, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp(f"native{request.param}") / "results.json"
    data = run_worker(request.param, out, worker="worker_native.py")
    assert data["size"] == request.param
    return data


@pytest.mark.parametrize("case", CASES)
def test_cg_iterations_equal_serial(results, case):
    r = results["cases"][case]
    assert r["petsc_reason"] > 0 and r["serial_info"] == 0  # both converged
    assert r["coarse_dim"] == r["serial_coarse_dim"]
    assert r["phi_rows_ok"]  # each rank holds its own PETSc rows of Phi
    assert sum(r["local_subdomains"]) == _cases.PROBLEMS[case.split("/")[0]]
    solver = case.split("/")[3]
    if solver in _cases.EXACT_COARSE:
        assert abs(r["petsc_iterations"] - r["serial_iterations"]) <= 1
        # PCDEFLATION's operator is not the hybrid one (the same CG iterates)
        if not solver.startswith("deflation"):
            eigen = results["size"] > 1 and case.startswith(_cases.RANK_LOCAL_EIGEN)
            assert r["apply_error"] <= (1e-3 if eigen else 1e-10)
    else:  # one GAMG V-cycle on the coarse problem: inexact, a few iterations more at most
        assert r["petsc_iterations"] <= r["serial_iterations"] + 5
    expected = ("asm" if case.split("/")[1] == "none" else "deflation"
                if solver.startswith("deflation") else "mg")
    assert r["pc_type"] == expected


@pytest.mark.parametrize("case", [c for c in CASES if "/none/" not in c])
def test_same_coarse_basis(results, case):
    """The route's Phi (a PETSc matrix, every rank's own rows, gathered) spans the serial
    library's basis and nothing else, up to column order, sign and scale: exactly for the
    bases without eigenproblems and on one rank; GenEO's (from the rows its grown sets
    reach, no rank holding the matrix) on several ranks to its subspace iteration's
    accuracy."""
    r = results["cases"][case]
    eigen = results["size"] > 1 and case.startswith(_cases.RANK_LOCAL_EIGEN)
    assert r["basis_gap"] <= ((2e-2 if "elasticity" in case else 1e-3) if eigen else 1e-12)


def test_coarse_problem_on_fewer_ranks(results):
    size = results["size"]
    for solver, ranks in (("telescope", 1), ("telescope_half", max(size // 2, 1))):
        r = results["cases"][f"poisson2d/gdsw/1/{solver}"]
        assert r["coarse_pc_type"] == "telescope"
        found = re.search(r"\(n\d+_mg_coarse_telescope_\) (\d+) MPI process", r["view"])
        assert found and int(found.group(1)) == ranks, r["view"][-2000:]
    assert results["cases"]["poisson2d/gdsw/1/gamg"]["coarse_pc_type"] == "gamg"


def test_near_null_space_reaches_the_coarse_space(results):
    r = results["cases"]["elasticity2d/gdsw/1/default"]
    assert "3 vectors" in r["null_space_source"]


# -- in this process (one rank) ---------------------------------------------------------------

@pytest.fixture(scope="module")
def PETSc():
    return petsc4py()


@pytest.fixture(scope="module")
def poisson(PETSc):
    A, _, _ = _cases.problem("poisson2d")
    P = _cases.petsc_matrix(A, PETSc.COMM_SELF)
    yield A, P
    P.destroy()


def _solve(P, ddops_options, petsc_options):
    prefix = f"nt{next(_prefixes)}_"
    its, reason, ksp, native = _cases.native_cg(P, _cases.rhs(P.getSize()[0]), prefix,
                                                ddops_options, petsc_options)
    return its, reason, ksp, native


def test_database_overrides_the_defaults(poisson):
    A, P = poisson
    its, reason, ksp, native = _solve(P, {"subdomains": 8, "coarse": "rgdsw"},
                                      {"mg_levels_sub_pc_type": "icc",
                                       "pc_mg_type": "multiplicative",
                                       # the undamped ASM sum is no convergent smoother (the
                                       # V-cycle would not be SPD): damped
                                       "mg_levels_ksp_richardson_scale": 0.3})
    pc = ksp.getPC()
    try:
        assert reason > 0
        assert pc.getMGType() == petsc4py().PC.MGType.MULTIPLICATIVE
        (sub,) = pc.getMGSmoother(1).getPC().getASMSubKSP()[:1]
        assert sub.getPC().getType() == "icc"
        assert native.options.coarse == "rgdsw" and native.coarse_dim == 6
        assert "coarse space: rgdsw, dimension 6" in "\n".join(native.summary())
    finally:
        ksp.destroy()
        native.destroy()


def test_keywords_and_restricted_variant(poisson, PETSc):
    from ddops.petsc.native import setup_native

    A, P = poisson
    ksp = PETSc.KSP().create(comm=PETSc.COMM_SELF)
    ksp.setOptionsPrefix(f"nt{next(_prefixes)}_")
    ksp.setOperators(P)
    ksp.setType("gmres")
    ksp.setTolerances(rtol=1e-8)
    native = setup_native(ksp, subdomains=8, coarse="gdsw", variant="restricted")
    try:
        ksp.setFromOptions()
        b = P.createVecLeft()
        b.setArray(_cases.rhs(A.shape[0]))
        x = b.duplicate()
        ksp.solve(b, x)
        assert ksp.getConvergedReason() > 0
        smoother = ksp.getPC().getMGSmoother(1).getPC()
        assert smoother.getType() == "asm"
        # every owned unknown in exactly one non-overlapping part
        local = np.concatenate([s.getIndices() for s in native.subdomains_local])
        assert np.array_equal(np.sort(local), np.arange(A.shape[0]))
        d = ddops.Decomposition.from_matrix(A, 8, 1)
        assert [s.getSize() for s in native.subdomains] == list(d.sizes)
        b.destroy()
        x.destroy()
    finally:
        ksp.destroy()
        native.destroy()


def test_errors(poisson, PETSc):
    from ddops.petsc.native import setup_native

    A, P = poisson
    ksp = PETSc.KSP().create(comm=PETSc.COMM_SELF)
    ksp.setOptionsPrefix(f"nt{next(_prefixes)}_")
    try:
        with pytest.raises(TypeError, match="unknown options"):
            setup_native(ksp, coarsee="gdsw")
        ksp.setOperators(P)
        with pytest.raises(ValueError, match="native route has"):
            setup_native(ksp, variant="symmetric_restricted")
        with pytest.raises(ValueError, match="ddops_coarse must be one of"):
            PETSc.Options().setValue(f"{ksp.getOptionsPrefix()}ddops_coarse", "foo")
            try:
                setup_native(ksp)
            finally:
                PETSc.Options().delValue(f"{ksp.getOptionsPrefix()}ddops_coarse")
    finally:
        ksp.destroy()


def test_native_example_runs_as_documented():
    """``examples/petsc_native.py`` with the coarse problem telescoped to one rank (small grid)."""
    from ._petsc import run_example

    stdout = run_example("petsc_native.py", "-n", "48", "-ksp_monitor", "-mg_coarse_pc_type",
                         "telescope", "-mg_coarse_pc_telescope_reduction_factor", "2",
                         "-mg_coarse_telescope_pc_type", "lu")
    assert "coarse space: gdsw" in stdout
    found = re.search(r"2304 unknowns on 2 ranks, coarse solver telescope: (\d+) iterations "
                      r"\(converged reason (\d+), (\w+)\), \|b - A x\| / \|b\| = (\S+),",
                      stdout)
    assert found, stdout[-2000:]
    assert int(found.group(2)) > 0 and found.group(3).startswith("CONVERGED_")
    assert float(found.group(4)) <= 1e-8


def test_native_pc_from_the_options_database(poisson, PETSc):
    """``-pc_type python -pc_python_type ddops.petsc.NativePC`` equals setup_native from code,
    and a new matrix with the same pattern runs its numeric set-up."""
    A, P = poisson
    b_global = _cases.rhs(A.shape[0])
    its_code, reason, ksp, native = _solve(P, {"subdomains": 8, "coarse": "gdsw"}, {})
    ksp.destroy()
    native.destroy()
    prefix = f"nt{next(_prefixes)}_"
    db = PETSc.Options()
    settings = {"ksp_type": "cg", "ksp_norm_type": "unpreconditioned", "ksp_rtol": _cases.RTOL,
                "ksp_atol": 0.0, "pc_type": "python",
                "pc_python_type": "ddops.petsc.NativePC", "ddops_subdomains": 8,
                "ddops_coarse": "gdsw"}
    for key, value in settings.items():
        db.setValue(f"{prefix}{key}", value)
    ksp = PETSc.KSP().create(comm=PETSc.COMM_SELF)
    ksp.setOptionsPrefix(prefix)
    ksp.setOperators(P)
    ksp.setFromOptions()
    try:
        _cases._solve(ksp, P, b_global)
        ctx = ksp.getPC().getPythonContext()
        assert ksp.getConvergedReason() > 0
        assert ksp.getIterationNumber() == its_code
        assert ctx.setups == 1 and ctx.native.pc.getType() == "mg"
        assert ctx.native.coarse_dim == native.coarse_dim
        # the database's -pc_type python is the outer PC's only, and is kept
        assert db.getString(f"{prefix}pc_type") == "python"
        # a new matrix: twice A (the same iterations from twice the right-hand side)
        P2 = _cases.petsc_matrix(2.0 * A, PETSc.COMM_SELF)
        ksp.setOperators(P2)
        _cases._solve(ksp, P2, 2.0 * b_global)
        # the same pattern: the numeric set-up (the decomposition kept, Phi and the inner PC
        # built again)
        assert (ctx.setups, ctx.updates, ctx.last_setup) == (1, 1, "numeric")
        assert ksp.getIterationNumber() == its_code
        assert abs(ctx.native.pc.getOperators()[1].norm() - 2.0 * P.norm()) < 1e-9 * P.norm()
        P2.destroy()
    finally:
        ksp.destroy()
        for key in settings:
            db.delValue(f"{prefix}{key}")


def test_native_pc_rejects_bad_keywords(PETSc):
    from ddops.petsc import NativePC

    with pytest.raises(TypeError, match="NativePC got unknown options"):
        NativePC(coarsee="gdsw")
    with pytest.raises(ValueError, match="overlap"):
        NativePC(overlap=-1)
    with pytest.raises(ValueError, match="'symmetric_restricted': the native route has"):
        NativePC(variant="symmetric_restricted")
