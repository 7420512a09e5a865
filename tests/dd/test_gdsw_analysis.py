"""``GDSWAnalysis``: the symbolic part of the GDSW-type bases kept for one pattern.

A basis built with a kept analysis must equal the basis built from scratch (the reference:
``gdsw_basis``/``agdsw_basis`` without one) for a matrix with the kept pattern (values
changed), and for one with another pattern (then nothing kept may be used), bit for bit on
the interface and to rounding in the interiors.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ddops
from ddops.dd import analysis as analysis_module
from ddops.dd.agdsw import agdsw_basis
from ddops.dd.analysis import GDSWAnalysis
from ddops.dd.gdsw import gdsw_basis
from ddops.linalg import local_solvers
from tests._optional import need

N = 24


def _channels(shift: int, contrast: float) -> sp.csr_matrix:
    c = np.ones((N, N))
    for row in (N // 3 + shift, 2 * N // 3 + shift):
        c[row % N, 2:-2] = contrast
    return ddops.problems.diffusion_2d(c)


@pytest.fixture(scope="module")
def problem():
    A1, A2 = _channels(0, 1e3), _channels(1, 1e5)
    owner = ddops.Decomposition.from_matrix(A1, 7).owner
    return A1, A2, owner


def _close(P: sp.csr_matrix, Q: sp.csr_matrix) -> None:
    assert P.shape == Q.shape
    assert np.abs(P - Q).max() <= 1e-12 * np.abs(Q).max()


@pytest.mark.parametrize("reuse", ["analysis", "ordering"])
@pytest.mark.parametrize("solver", ["pardiso", "superlu"])
@pytest.mark.parametrize("variant", ["gdsw", "rgdsw"])
def test_a_kept_analysis_gives_the_basis_of_a_fresh_build(problem, solver, variant, reuse):
    need(solver)
    A1, A2, owner = problem
    kept = GDSWAnalysis(reuse)
    _close(gdsw_basis(A1, owner, variant=variant, solver=solver, analysis=kept),
           gdsw_basis(A1, owner, variant=variant, solver=solver))
    P2 = gdsw_basis(A2, owner, variant=variant, solver=solver, analysis=kept)
    _close(P2, gdsw_basis(A2, owner, variant=variant, solver=solver))
    # PARDISO's chunks were refactorised on their kept analyses; other solvers keep none
    assert (kept.reused > 0) == (solver == "pardiso")


def test_the_interface_is_classified_once_per_pattern(problem, monkeypatch):
    A1, A2, owner = problem
    other = ddops.Decomposition.from_matrix(A1, 5).owner
    n = A2.shape[0]
    A3 = A2.tolil()
    A3[0, n - 1] = A3[n - 1, 0] = -1e-3  # a coupling across the domain
    A3 = A3.tocsr()
    A3.setdiag(A3.diagonal() + 1e-3)
    fresh2, fresh3 = gdsw_basis(A2, other), gdsw_basis(A3, other)  # the references
    calls = []
    classify = analysis_module.classify_interface
    monkeypatch.setattr(analysis_module, "classify_interface",
                        lambda *a: calls.append(1) or classify(*a))
    kept = GDSWAnalysis()
    gdsw_basis(A1, owner, analysis=kept)
    gdsw_basis(A2, owner, analysis=kept)  # new values, same pattern and partition
    assert len(calls) == 1
    # another partition, and another pattern: classified again, and the right basis
    _close(gdsw_basis(A2, other, analysis=kept), fresh2)
    assert len(calls) == 2
    _close(gdsw_basis(A3, other, analysis=kept), fresh3)
    assert len(calls) == 3


@pytest.mark.parametrize("reuse", ["analysis", "ordering"])
def test_another_pattern_is_analysed_afresh(problem, reuse):
    """Every kept chunk analysis (or ordering) is for the old pattern: none may be
    used."""
    need("pardiso")
    A1, A2, owner = problem
    kept = GDSWAnalysis(reuse)
    gdsw_basis(A1, owner, analysis=kept)
    n, m = A2.shape[0], N - 1  # m x m interior points
    A3 = A2.tolil()
    for i in range(0, n - m - 1, 7):  # new diagonal couplings, mostly inside the interiors
        A3[i, i + m + 1] = A3[i + m + 1, i] = -1e-2
    A3 = A3.tocsr()
    A3.setdiag(A3.diagonal() + 2e-2)
    before = kept.reused
    _close(gdsw_basis(A3, owner, analysis=kept), gdsw_basis(A3, owner))
    assert kept.reused == before


@pytest.mark.parametrize("reuse", ["analysis", "ordering"])
def test_agdsw_with_a_kept_analysis(problem, reuse):
    """The chunks of AGDSW's extension follow its selection: the channels moved (other
    functions), nothing kept fits; the same channels at another contrast (the same
    selection), every chunk is refactorised."""
    need("pardiso")
    A1, A2, owner = problem
    kept = GDSWAnalysis(reuse)
    agdsw_basis(A1, owner, analysis=kept)
    _close(agdsw_basis(A2, owner, analysis=kept), agdsw_basis(A2, owner))
    A3 = _channels(1, 1e6)
    _close(agdsw_basis(A3, owner, analysis=kept), agdsw_basis(A3, owner))
    assert kept.reused > 0
    assert kept.nbytes > 0
    kept.free()
    assert kept.nbytes == 0


@pytest.mark.parametrize("reuse", ["analysis", "ordering"])
def test_update_keeps_the_analysis_of_the_gdsw_basis(problem, reuse):
    need("pardiso")
    A1, A2, owner = problem
    d = ddops.Decomposition.from_matrix(A1, 7)
    M = ddops.TwoLevelSchwarz(A1, d, coarse_basis="gdsw", extension_reuse=reuse)
    assert M.coarse.analysis.reuse == reuse
    M.update(A2)
    assert M.coarse.analysis.reused > 0
    X = np.random.default_rng(0).standard_normal((A1.shape[0], 2))
    fresh = ddops.TwoLevelSchwarz(A2, d, coarse_basis="gdsw")
    assert np.abs(M @ X - fresh @ X).max() <= 1e-12 * np.abs(fresh @ X).max()


def test_the_kept_analysis_is_counted_in_the_symbolic_bytes(problem):
    need("pardiso")
    A1, _, _ = problem
    d = ddops.Decomposition.from_matrix(A1, 7)
    M = ddops.TwoLevelSchwarz(A1, d, coarse_basis="gdsw")
    kept = M.coarse.analysis.nbytes
    assert kept > 0
    before = M.stats["symbolic_bytes"]
    M.coarse.analysis.free()
    assert before - M.stats["symbolic_bytes"] == kept


def test_released_pardiso_factors_refuse_to_solve_until_refactorised():
    need("pardiso")
    K = ddops.poisson_2d(12).tocsr()
    offsets = np.array([0, K.shape[0]])
    f = local_solvers.factorize_blocks(K, offsets, "pardiso", sparse_rows=[0, 5])
    b = np.ones(K.shape[0])
    x = f.solve(b)
    f.release_factors()
    assert f.analysis_bytes > 0
    with pytest.raises(RuntimeError, match="released"):
        f.solve(b)
    with pytest.raises(RuntimeError, match="released"):
        f.solve_sparse(np.ones((2, 1)))
    f.refactor(K * 2.0)
    np.testing.assert_allclose(2.0 * f.solve(b), x, rtol=1e-12)


def test_the_kept_orderings_replace_the_ordering_and_hold_no_factorisation(problem,
                                                                           monkeypatch):
    """``reuse="ordering"`` keeps per chunk its pattern and a permutation (no PARDISO
    handle: MKL's analyses of large 3D interiors held hundreds of MiB); a second build of
    a matrix with that pattern orders nothing (the probe and the node nested dissection
    would fail here) and equals the fresh build."""
    need("pardiso")
    A1, A2, owner = problem
    kept = GDSWAnalysis("ordering")
    gdsw_basis(A1, owner, analysis=kept)
    records = list(kept._chunks.values())
    assert records
    for indptr, _, order in records:
        assert np.array_equal(np.sort(order), np.arange(indptr.size - 1))
    assert kept.nbytes == sum(a.nbytes for r in records for a in r) + sum(
        k.nbytes for k in kept._components[:-1] if isinstance(k, np.ndarray))
    analysed = GDSWAnalysis("analysis")
    gdsw_basis(A1, owner, analysis=analysed)
    assert analysed.nbytes > kept.nbytes  # (MKL's analyses against the orderings)

    def no_ordering(*args, **kwargs):
        raise AssertionError("a kept ordering was not used")

    monkeypatch.setattr(local_solvers, "_probe_orderings", no_ordering)
    monkeypatch.setattr(local_solvers, "node_nested_dissection", no_ordering)
    _close(gdsw_basis(A2, owner, analysis=kept), gdsw_basis(A2, owner, solver="superlu"))
    assert kept.reused == len(records)


@pytest.mark.parametrize("bad", ["orderings", "", None, 1])
def test_an_unknown_reuse_is_refused_by_name(problem, bad):
    with pytest.raises(ValueError if isinstance(bad, str) else TypeError,
                       match="reuse must be one of"):
        GDSWAnalysis(bad)
    A1, _, _ = problem
    d = ddops.Decomposition.from_matrix(A1, 7)
    with pytest.raises((ValueError, TypeError), match="extension_reuse"):
        ddops.TwoLevelSchwarz(A1, d, coarse_basis="gdsw", extension_reuse=bad)
    with pytest.raises((ValueError, TypeError), match="extension_reuse"):
        ddops.SchwarzOptions(extension_reuse=bad)


def test_update_with_kept_orderings_equals_update_with_kept_analyses(problem):
    """The two choices give the same preconditioner after update() (the same orderings,
    the same factorisations), and the orderings hold less."""
    need("pardiso")
    A1, A2, owner = problem
    d = ddops.Decomposition.from_matrix(A1, 7)
    X = np.random.default_rng(1).standard_normal((A1.shape[0], 2))
    out, held = {}, {}
    for reuse in ("analysis", "ordering"):
        M = ddops.TwoLevelSchwarz(A1, d, coarse_basis="rgdsw", variant="hybrid",
                                  extension_reuse=reuse)
        held[reuse] = M.coarse.analysis.nbytes
        out[reuse] = M.update(A2) @ X
        assert M.coarse.analysis.reused > 0
    assert np.array_equal(out["analysis"], out["ordering"])
    assert held["ordering"] < held["analysis"]


def test_the_default_keeps_the_analyses(problem):
    """The documented default, by keyword and by options object: PARDISO's analyses are
    kept (the fastest update), not only the orderings."""
    need("pardiso")
    A1, _, _ = problem
    d = ddops.Decomposition.from_matrix(A1, 7)
    for M in (ddops.TwoLevelSchwarz(A1, d, coarse_basis="gdsw"),
              ddops.TwoLevelSchwarz(A1, d, options=ddops.SchwarzOptions(coarse="gdsw"))):
        kept = list(M.coarse.analysis._chunks.values())
        assert M.options.extension_reuse == M.coarse.analysis.reuse == "analysis"
        assert kept and all(hasattr(k, "refactor") for k in kept)
