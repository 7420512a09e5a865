"""``TwoLevelSchwarz.update``: the numeric phase again for a matrix with the same pattern.

The reference is always an independent construction: a preconditioner built from
scratch on the new matrix, a dense assembly of the one-level sum, or the Galerkin
matrix of the kept basis formed densely.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ddops
from ddops.precond.schwarz import TwoLevelSchwarz
from tests._optional import need

COARSE = ("nicolaides", "gdsw", "rgdsw", "agdsw", "geneo", None)
SOLVERS = ("dense", "superlu", "pardiso", "amg")


def _channels(n: int, shift: int, contrast: float) -> np.ndarray:
    """A cell coefficient with two horizontal channels of ``contrast`` moved by ``shift``."""
    c = np.ones((n, n))
    for row in (n // 3 + shift, 2 * n // 3 + shift):
        c[row % n, 2:-2] = contrast
    return c


@pytest.fixture(scope="module")
def pair():
    """Two diffusion matrices with one pattern (channels moved by one cell) and a
    METIS decomposition of the first."""
    n = 20
    A1 = ddops.problems.diffusion_2d(_channels(n, 0, 1e3))
    A2 = ddops.problems.diffusion_2d(_channels(n, 1, 1e4))
    assert np.array_equal(A1.indptr, A2.indptr) and np.array_equal(A1.indices, A2.indices)
    d = ddops.Decomposition.from_matrix(A1, 6)
    return A1, A2, d


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


def _kw(coarse: str | None, solver: str) -> dict:
    kw = {"coarse_basis": coarse, "local_solver": solver}
    if coarse == "geneo":  # the finite-difference matrix is diagonally dominant
        kw["null_space"] = None
    return kw


@pytest.mark.parametrize("variant", ["additive", "hybrid"])
@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("coarse", COARSE)
def test_update_equals_a_fresh_build(pair, coarse, solver, variant):
    """M.update(A2) and a preconditioner built on A2 agree on random vectors to 1e-12,
    for every coarse space, local solver and both compositions; update returns M."""
    need(solver)
    A1, A2, d = pair
    kw = dict(_kw(coarse, solver), variant=variant)
    M = TwoLevelSchwarz(A1, d, **kw)
    assert M.update(A2) is M
    fresh = TwoLevelSchwarz(A2, d, **kw)
    X = np.random.default_rng(0).standard_normal((A1.shape[0], 3))
    assert M.coarse_dim == fresh.coarse_dim
    assert _rel(M @ X, fresh @ X) <= 1e-12
    assert _rel(M.rmatmat(X), fresh.rmatmat(X)) <= 1e-12
    # and not the old operator: the update changed something
    old = TwoLevelSchwarz(A1, d, **kw)
    assert _rel(M @ X, old @ X) > 1e-3


@pytest.mark.parametrize("solver", ["dense", "superlu"])
def test_one_level_update_against_the_dense_assembly(pair, solver):
    """sum_i R_i^T (R_i A2 R_i^T)^{-1} R_i assembled densely from the index sets."""
    A1, A2, d = pair
    M = TwoLevelSchwarz(A1, d, coarse_basis=None, local_solver=solver).update(A2)
    n = A1.shape[0]
    dense = A2.toarray()
    ref = np.zeros((n, n))
    for idx in d.subdomains:
        ref[np.ix_(idx, idx)] += np.linalg.inv(dense[np.ix_(idx, idx)])
    assert _rel(M @ np.eye(n), ref) <= 1e-12


@pytest.mark.parametrize("variant", ["additive", "hybrid"])
@pytest.mark.parametrize("coarse", ["gdsw", "agdsw"])
def test_reuse_coarse_keeps_phi_and_recomputes_the_galerkin_matrix(pair, coarse, variant):
    """reuse_coarse=True keeps Phi bit for bit, A_0 is Phi^T A2 Phi (formed densely), and the
    operator equals a fresh build on A2 with that Phi as a user basis."""
    A1, A2, d = pair
    M = TwoLevelSchwarz(A1, d, coarse_basis=coarse, variant=variant)
    Phi = M.coarse_matrix.copy()
    M.update(A2, reuse_coarse=True)
    kept = M.coarse_matrix
    assert all(np.array_equal(getattr(kept, a), getattr(Phi, a))
               for a in ("data", "indices", "indptr"))
    P = Phi.toarray()
    assert _rel(M.coarse.A0.toarray(), P.T @ A2.toarray() @ P) <= 1e-12
    fresh = TwoLevelSchwarz(A2, d, coarse_basis=Phi, variant=variant)
    X = np.random.default_rng(1).standard_normal((A1.shape[0], 2))
    assert _rel(M @ X, fresh @ X) <= 1e-12
    # without reuse, the basis follows the new matrix (GDSW's extension depends on it)
    follows = TwoLevelSchwarz(A1, d, coarse_basis=coarse, variant=variant).update(A2)
    assert _rel(follows.coarse_matrix.toarray(),
                TwoLevelSchwarz(A2, d, coarse_basis=coarse).coarse_matrix.toarray()) <= 1e-12
    if follows.coarse_dim == Phi.shape[1]:
        assert _rel(follows.coarse_matrix.toarray(), P) > 1e-6


def test_a_changed_pattern_is_refused(pair):
    """A matrix with one more (symmetric) pair of entries, or another size, is refused
    with the remedy; the same pattern with an explicit zero value is accepted."""
    A1, A2, d = pair
    M = TwoLevelSchwarz(A1, d)
    B = A2.tolil()
    B[0, 5] = B[5, 0] = -1e-3
    with pytest.raises(ValueError, match="another sparsity pattern.*build a new"):
        M.update(B.tocsr())
    with pytest.raises(ValueError, match="size"):
        M.update(ddops.poisson_2d(21))
    # the stored pattern with one symmetric pair of values set to zero (kept as entries)
    C = A2.tocoo()
    pair_at = np.flatnonzero(((C.row == 0) & (C.col == 1)) | ((C.row == 1) & (C.col == 0)))
    C = A2.copy()
    C.data[pair_at] = 0.0
    assert C.nnz == A2.nnz and C.count_nonzero() == A2.nnz - 2
    X = np.random.default_rng(2).standard_normal(A1.shape[0])
    assert _rel(M.update(C) @ X, TwoLevelSchwarz(C, d) @ X) <= 1e-12


def test_update_checks_the_new_matrix_as_the_constructor_does(pair):
    A1, A2, d = pair
    M = TwoLevelSchwarz(A1, d, local_solver="superlu")
    bad = A2.copy()
    bad.data[3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        M.update(bad)
    skew = A2.copy().tolil()
    skew[0, 1] = skew[0, 1] + 1.0
    with pytest.raises(ValueError, match="not symmetric"):
        M.update(skew.tocsr())
    indefinite = A2.copy()
    indefinite.data[indefinite.indices == np.repeat(np.arange(A2.shape[0]),
                                                    np.diff(A2.indptr))] *= -1
    with pytest.raises(ValueError):
        M.update(indefinite)
    with pytest.raises(TypeError, match="reuse_coarse"):
        M.update(A2, reuse_coarse="yes")


def test_update_with_a_kernel():
    """A pure-Neumann Laplacian with kernel=constants, scaled by a coefficient: update
    equals a fresh build, and a matrix that no longer annihilates the kernel is refused."""
    from tests.dd.test_kernel import neumann_laplacian_2d

    A = neumann_laplacian_2d(12)
    d = ddops.Decomposition.from_matrix(A, 4)
    one = np.ones(A.shape[0])
    M = TwoLevelSchwarz(A, d, kernel=one)
    A2 = (3.0 * A).tocsr()
    M.update(A2)
    fresh = TwoLevelSchwarz(A2, d, kernel=one)
    X = np.random.default_rng(3).standard_normal((A.shape[0], 2))
    assert _rel(M @ X, fresh @ X) <= 1e-12
    grounded = (A2 + sp.diags(np.r_[1.0, np.zeros(A.shape[0] - 1)])).tocsr()
    with pytest.raises(ValueError, match="kernel"):
        M.update(grounded)


def test_pardiso_keeps_its_analysis_across_updates(pair):
    """The PARDISO local solver is refactorised in place (the same solver object, its
    analysis reused) and still equals a fresh build."""
    need("pardiso")
    A1, A2, d = pair
    M = TwoLevelSchwarz(A1, d, local_solver="pardiso")
    solver = M.local.solver
    M.update(A2)
    assert M.local.solver is solver
    X = np.random.default_rng(4).standard_normal((A1.shape[0], 2))
    assert _rel(M @ X, TwoLevelSchwarz(A2, d, local_solver="pardiso") @ X) <= 1e-12


def test_finite_element_neumann_matrices_belong_to_the_values():
    """GenEO with finite-element Neumann matrices: update needs the new matrices (they
    belong to the values), or reuse_coarse=True; with them it equals a fresh build."""
    pytest.importorskip("skfem")
    E1 = lambda c: np.where(np.linalg.norm(c - 0.5, axis=1) < 0.2, 1e3, 1.0)  # noqa: E731
    E2 = lambda c: np.where(np.linalg.norm(c - 0.5, axis=1) < 0.3, 1e3, 1.0)  # noqa: E731
    A1, X = ddops.problems.fem_elasticity_2d(12, E=E1)
    d = ddops.Decomposition.from_matrix(A1, 4, block_size=2)
    A1, _, N1 = ddops.problems.fem_elasticity_2d(12, E=E1, neumann=d)
    A2, _, N2 = ddops.problems.fem_elasticity_2d(12, E=E2, neumann=d)
    Z = ddops.rigid_body_modes(X)
    opts = ddops.SchwarzOptions(coarse="geneo", null_space=Z,
                                geneo=ddops.GenEOOptions(neumann=N1))
    M = TwoLevelSchwarz(A1, d, options=opts)
    with pytest.raises(ValueError, match="pass neumann= for the new matrix"):
        M.update(A2)
    M.update(A2, neumann=N2)
    fresh = TwoLevelSchwarz(A2, d, options=opts.replace(geneo=ddops.GenEOOptions(neumann=N2)))
    V = np.random.default_rng(5).standard_normal((A1.shape[0], 2))
    assert M.coarse_dim == fresh.coarse_dim
    assert _rel(M @ V, fresh @ V) <= 1e-12
    M.update(A1, reuse_coarse=True)  # keeps the coarse space: no Neumann matrices needed
    with pytest.raises(ValueError, match="built with neumann="):
        TwoLevelSchwarz(A1, d, coarse_basis="gdsw", null_space=Z).update(A2, neumann=N2)


@pytest.mark.parametrize("variant", ["additive", "hybrid"])
def test_reuse_coarse_in_a_chain_of_local_and_global_changes(pair, variant, monkeypatch):
    """A_0 and A Phi follow the values through several reuse_coarse updates, local changes
    (channels that move) and a global one (a scaling): each step equals a fresh build with
    the kept Phi, and PARDISO's coarse analysis is kept (the same solver object)."""
    need("pardiso")
    import ddops.precond.corrections as corrections

    monkeypatch.setattr(corrections, "COARSE_DENSE_MAX", 5)  # a sparse coarse factor
    A1, A2, d = pair
    M = TwoLevelSchwarz(A1, d, coarse_basis="gdsw", variant=variant)
    assert M.coarse_solver == "sparse" and M.coarse_factorization == "pardiso"
    Phi = M.coarse_matrix
    coarse_lu = M.coarse._lu
    X = np.random.default_rng(6).standard_normal((A1.shape[0], 2))
    for A in (A2, (3.0 * A2).tocsr(), A1, A2):
        M.update(A, reuse_coarse=True)
        assert M.coarse._lu is coarse_lu
        fresh = TwoLevelSchwarz(A, d, coarse_basis=Phi, variant=variant)
        assert _rel(M @ X, fresh @ X) <= 1e-11
        P = Phi.toarray()
        assert _rel(M.coarse.A0.toarray(), P.T @ A.toarray() @ P) <= 1e-12


def test_the_phases_of_a_reuse_update_have_no_basis(pair):
    """After update(reuse_coarse=True) no basis phase is reported (the basis was kept)."""
    A1, A2, d = pair
    M = TwoLevelSchwarz(A1, d, coarse_basis="gdsw")
    assert M.stats["phases"]["extension"] > 0
    M.update(A2, reuse_coarse=True)
    phases = M.stats["phases"]
    assert phases["extension"] == phases["interface"] == phases["eigenproblems"] == 0.0


@pytest.mark.parametrize("reuse", [False, True])
def test_update_leaves_the_callers_matrix_alone(pair, reuse):
    """update reads the new matrix and never writes into its arrays (they may be shared
    with the checked copy)."""
    A1, A2, d = pair
    B = A2.copy()
    before = [a.copy() for a in (B.data, B.indices, B.indptr)]
    M = TwoLevelSchwarz(A1, d, coarse_basis="gdsw", variant="hybrid")
    M.update(B, reuse_coarse=reuse)
    M.update(A1, reuse_coarse=reuse)
    assert all(np.array_equal(a, b) for a, b in zip((B.data, B.indices, B.indptr), before))


@pytest.mark.parametrize("variant", ["additive", "hybrid"])
def test_a_failed_update_is_not_applied_and_a_good_one_repairs_it(pair, variant):
    """A matrix that passes the checks but has a singular subdomain block: update raises,
    the half-updated preconditioner refuses to be applied (it names the failure), and the
    next updates (also with reuse_coarse=True, whose A_0 must then be that of the current
    Phi, not of the one before the failure) equal fresh builds."""
    A1, A2, d = pair
    bad = A2.tolil()
    for i, j in ((7, 8), (8, 7)):
        bad[i, j] = 4.0 * max(bad[i, i], bad[j, j])  # symmetric, positive diagonal, indefinite
    B = bad.tocsr()
    assert np.array_equal(B.indices, A1.indices)  # (7, 8) is a stored pair: same pattern
    M = TwoLevelSchwarz(A1, d, coarse_basis="gdsw", local_solver="superlu", variant=variant)
    with pytest.raises(ValueError, match="not positive definite"):
        M.update(B)
    X = np.random.default_rng(7).standard_normal((A1.shape[0], 2))
    with pytest.raises(RuntimeError, match="last update of this preconditioner failed"):
        M @ X
    A = (1.01 * A1).tocsr()
    M.update(A, reuse_coarse=True)
    fresh = TwoLevelSchwarz(A, d, coarse_basis=M.coarse_matrix, local_solver="superlu",
                            variant=variant)
    assert _rel(M @ X, fresh @ X) <= 1e-11
    M.update(A2)
    assert _rel(M @ X, TwoLevelSchwarz(A2, d, coarse_basis="gdsw", local_solver="superlu",
                                       variant=variant) @ X) <= 1e-12


def test_reuse_coarse_after_a_large_excursion_takes_the_full_product(pair):
    """Up by 1e14 and back: the incremental A_0 would cancel eight digits; the kept-values
    bookkeeping falls back to the full product, so A_0 is Phi^T A Phi to rounding."""
    A1, _, d = pair
    M = TwoLevelSchwarz(A1, d, coarse_basis="gdsw")
    high = (A1 + 1e14 * sp.diags(np.r_[np.ones(20), np.zeros(A1.shape[0] - 20)])).tocsr()
    assert np.array_equal(high.indices, A1.indices)  # the diagonal is stored: same pattern
    M.update(high, reuse_coarse=True)
    M.update(A1, reuse_coarse=True)
    P = M.coarse_matrix.toarray()
    assert _rel(M.coarse.A0.toarray(), P.T @ A1.toarray() @ P) <= 1e-12


def test_neumann_and_reuse_coarse_are_exclusive_and_the_options_follow(pair):
    pytest.importorskip("skfem")
    E = lambda c: np.where(np.linalg.norm(c - 0.5, axis=1) < 0.2, 1e3, 1.0)  # noqa: E731
    A1, X = ddops.problems.fem_elasticity_2d(10, E=E)
    d = ddops.Decomposition.from_matrix(A1, 4, block_size=2)
    A1, _, N1 = ddops.problems.fem_elasticity_2d(10, E=E, neumann=d)
    A2, _, N2 = ddops.problems.fem_elasticity_2d(10, E=lambda c: 2 * E(c), neumann=d)
    opts = ddops.SchwarzOptions(coarse="geneo", null_space=ddops.rigid_body_modes(X),
                                geneo=ddops.GenEOOptions(neumann=N1))
    M = TwoLevelSchwarz(A1, d, options=opts)
    with pytest.raises(ValueError, match="give one or the other"):
        M.update(A2, neumann=N2, reuse_coarse=True)
    M.update(A2, neumann=N2)
    assert M.options.geneo.neumann is N2  # the options describe the preconditioner
    V = np.random.default_rng(8).standard_normal((A1.shape[0], 2))
    assert _rel(M @ V, TwoLevelSchwarz(A2, d, options=M.options) @ V) <= 1e-12
