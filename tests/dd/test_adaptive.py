"""Adaptive coarse spaces (AGDSW, GenEO) against dense constructions on small problems."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import ddops
from ddops.dd import adaptive, agdsw
from ddops.dd.adaptive import agdsw_basis, geneo_basis
from ddops.dd.gdsw import drop_dependent_columns, gdsw_basis, interface_components
from ddops.precond.schwarz import TwoLevelSchwarz
from ddops.problems import diffusion_2d, diffusion_3d, high_contrast_channels
from tests._optional import need

CONTRASTS = (1.0, 1e2, 1e4, 1e6, 1e8)


def channels(n, contrast, period=4, margin=2):
    return diffusion_2d(high_contrast_channels(n, contrast, margin=margin, period=period))


def schur(M, keep):
    """Dense Schur complement of M onto the index set keep (eliminating the rest)."""
    rest = np.setdiff1d(np.arange(M.shape[0]), keep)
    if rest.size == 0:
        return M[np.ix_(keep, keep)]
    return (M[np.ix_(keep, keep)]
            - M[np.ix_(keep, rest)] @ np.linalg.solve(M[np.ix_(rest, rest)],
                                                      M[np.ix_(rest, keep)]))


def cut_neumann(A, idx):
    """A restricted to idx with the absolute couplings that leave idx taken off the diagonal."""
    Ad = A.toarray()
    out = np.ones(A.shape[0], dtype=bool)
    out[idx] = False
    off = np.abs(Ad[np.ix_(idx, np.flatnonzero(out))]).sum(axis=1)
    return Ad[np.ix_(idx, idx)] - np.diag(off)


def condition(A, M):
    """kappa(M A) from the generalized eigenvalues of (A, M^{-1}), dense."""
    n = A.shape[0]
    Minv = np.linalg.inv(M.matmat(np.eye(n)))
    ev = sla.eigh(A.toarray(), 0.5 * (Minv + Minv.T), eigvals_only=True)
    return ev[-1] / ev[0]


def cg_iterations(A, M, seed=0):
    b = np.random.default_rng(seed).standard_normal(A.shape[0])
    count = [0]

    def callback(xk):
        count[0] += 1

    _, info = spla.cg(A, b, rtol=1e-8, M=M, callback=callback, maxiter=5000)
    assert info == 0
    return count[0]


def in_span(Q_cols, X, tol=1e-8):
    """Every column of X lies in the span of Q_cols (dense, least squares)."""
    Q, _ = np.linalg.qr(Q_cols)
    R = X - Q @ (Q.T @ X)
    return np.linalg.norm(R) <= tol * max(np.linalg.norm(X), 1e-300)


# -- AGDSW -------------------------------------------------------------------------------------
def test_agdsw_eigenproblems_match_dense_schur_complements():
    n = 23
    A = channels(n, 1e4, period=4)
    d = ddops.Decomposition.from_grid((n, n), (3, 3))
    comps = interface_components(A, d.owner)
    x, comp = comps.interface, comps.component
    lam_groups, _, sizes = agdsw._agdsw_eigenpairs(A, d.owner, comps, 2**26,
                                                   np.zeros((x.size, 0)))
    got = {}
    for members, lam in lam_groups.values():
        for m, row in zip(members, lam, strict=True):
            got[int(m)] = np.sort(row)[:sizes[m]]
    Ad = A.toarray()
    interface = np.zeros(A.shape[0], dtype=bool)
    interface[x] = True
    part_sets = comps.part_sets()
    checked = 0
    for c in range(comps.num_components):
        e = x[comp == c]
        if e.size < 2:
            continue
        interior = np.flatnonzero(~interface)
        SD = schur(Ad[np.ix_(np.r_[e, interior], np.r_[e, interior])], np.arange(e.size))
        SN = np.zeros_like(SD)
        for p in part_sets[c]:
            gamma_p = x[[p in part_sets[cc] for cc in comp]]
            closure = np.union1d(np.flatnonzero(~interface & (d.owner == p)), gamma_p)
            Np = cut_neumann(A, closure)
            pos = np.searchsorted(closure, e)
            SN += schur(Np + 1e-13 * np.abs(np.diag(Np)).max() * np.eye(closure.size), pos)
        want = sla.eigh(SN, SD, eigvals_only=True)
        # the shifted inversion of the part's Neumann Schur complement costs about 1e-5
        np.testing.assert_allclose(got[c], want, rtol=1e-4, atol=1e-8)
        checked += 1
    assert checked >= 4


def test_agdsw_contains_gdsw_and_adds_nothing_on_homogeneous_problem():
    n = 47
    A = ddops.poisson_2d(n)
    d = ddops.Decomposition.from_grid((n, n), (4, 4))
    Pg = gdsw_basis(A, d.owner)
    Pa, info = agdsw_basis(A, d.owner, return_info=True)
    assert Pa.shape[1] <= 1.1 * Pg.shape[1]
    assert info.stats["eigen_functions"] == Pa.shape[1] - info.stats["null_space_functions"]
    assert in_span(Pa.toarray(), Pg.toarray())


@pytest.mark.parametrize("contrast", [1e4, 1e8])
def test_agdsw_contains_gdsw_on_high_contrast(contrast):
    n = 31
    A = channels(n, contrast)
    d = ddops.Decomposition.from_grid((n, n), (4, 4))
    Pg = gdsw_basis(A, d.owner, solver="superlu")
    Pa, info = agdsw_basis(A, d.owner, return_info=True, extension_solver="superlu")
    assert Pa.shape[1] > Pg.shape[1]
    assert in_span(Pa.toarray(), Pg.toarray())
    # the null-space columns are GDSW's columns themselves, to rounding (the parts are
    # chunked by their column counts, which differ between the two bases)
    ns = np.flatnonzero(info.column_kind == "null_space")
    assert np.abs(Pa[:, ns] - Pg).max() <= 1e-12 * np.abs(Pg).max()
    Pd = agdsw_basis(A, d.owner)
    assert np.abs(Pd[:, ns] - Pg).max() <= 1e-12 * np.abs(Pg).max()


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_agdsw_selects_one_function_per_channel_crossing_an_interface(k):
    n = 31
    c = np.ones((n + 1, n + 1))
    rows = 3 + 5 * np.arange(k)  # k floating channels along x through all three parts
    c[rows, 3:n - 2] = 1e6
    A = diffusion_2d(c)
    d = ddops.Decomposition.from_grid((n, n), (3, 1))  # three parts side by side
    _, info = agdsw_basis(A, d.owner, return_info=True)
    # two interfaces; GDSW's extension of a channel's values on one of them is cut by the
    # zero values on the other, so each channel crossing gives one function per interface
    assert info.components.num_components == 2
    assert info.selected.tolist() == [k, k]
    assert info.kept.tolist() == [k, k]
    # without the channels nothing is selected
    _, info = agdsw_basis(diffusion_2d(np.ones_like(c)), d.owner, return_info=True)
    assert info.selected.tolist() == [0, 0]


def test_agdsw_condition_number_does_not_grow_with_contrast():
    n = 31
    d = ddops.Decomposition.from_grid((n, n), (4, 4))
    kappa = {c: condition(channels(n, c), TwoLevelSchwarz(channels(n, c), d, "agdsw"))
             for c in (1.0, 1e4, 1e6, 1e8)}
    gdsw = condition(channels(n, 1e6), TwoLevelSchwarz(channels(n, 1e6), d, "gdsw"))
    assert gdsw > 100 * kappa[1.0]  # the classical space is not robust here
    assert max(kappa.values()) <= 1.5 * kappa[1.0]


def test_agdsw_iterations_2d_and_3d():
    n = 63
    A = channels(n, 1e6)
    d = ddops.Decomposition.from_grid((n, n), (4, 4))
    assert cg_iterations(A, TwoLevelSchwarz(A, d, "agdsw")) <= 35
    assert cg_iterations(A, TwoLevelSchwarz(A, d, "agdsw", variant="hybrid")) <= 20
    assert cg_iterations(A, TwoLevelSchwarz(A, d, "gdsw")) >= 100
    n = 17
    coef = ddops.problems.random_inclusions(n, dim=3, count=30, size=(2, 2, 8), contrast=1e6,
                                            seed=3)
    A = diffusion_3d(coef)
    d = ddops.Decomposition.from_grid((n, n, n), (3, 3, 3))
    agdsw = cg_iterations(A, TwoLevelSchwarz(A, d, "agdsw"))
    assert agdsw <= 50
    assert cg_iterations(A, TwoLevelSchwarz(A, d, "gdsw")) >= 2 * agdsw


def test_agdsw_threshold_default_and_cap():
    n = 31
    A = channels(n, 1e6)
    d = ddops.Decomposition.from_grid((n, n), (4, 4))
    default = agdsw_basis(A, d.owner)
    explicit = agdsw_basis(A, d.owner, threshold=0.05)
    assert (default != explicit).nnz == 0
    assert agdsw_basis(A, d.owner, threshold=1e-12).shape[1] < default.shape[1]
    with pytest.warns(RuntimeWarning, match="max_per_component=1"):
        _, info = agdsw_basis(A, d.owner, max_per_component=1, return_info=True)
    assert info.kept.max() <= 1 and info.stats["capped"] > 0
    assert info.stats["capped"] == int((info.selected > 1).sum())


# -- GenEO ------------------------------------------------------------------------------------
@pytest.mark.parametrize("contrast", [1.0, 1e6])
def test_geneo_eigenproblems_match_dense(contrast):
    n = 23
    A = channels(n, contrast)
    d = ddops.Decomposition.from_grid((n, n), (3, 3), overlap=1)
    tau = 0.1
    Phi, info = geneo_basis(A, d, threshold=tau, return_info=True)
    P = Phi.toarray()
    Ad = A.toarray()
    for i, idx in enumerate(d.subdomains):
        Di = np.diag(1.0 / d.multiplicity[idx])
        Ni = cut_neumann(A, idx)
        lam, V = sla.eigh(Ni, Di @ Ad[np.ix_(idx, idx)] @ Di)
        sel = lam < tau
        assert info.selected[i] == sel.sum()
        ref = np.zeros((A.shape[0], int(sel.sum())))
        ref[idx] = Di @ V[:, sel]
        cols = P[:, info.column_group == i]
        assert cols.shape[1] == sel.sum()
        # the subspace iteration stops on settled Ritz values: eigenvalues to about 1e-8,
        # vectors to about the square root
        assert in_span(cols, ref, 1e-3) and in_span(ref, cols, 1e-3)
        if sel.any():
            assert info.eigenvalues[i] == pytest.approx(lam[0], rel=1e-6, abs=1e-9)


def test_geneo_condition_number_below_the_bound_for_every_contrast():
    n = 23
    d = ddops.Decomposition.from_grid((n, n), (3, 3), overlap=1)
    kappas = []
    for contrast in CONTRASTS:
        A = channels(n, contrast)
        M = TwoLevelSchwarz(A, d, "geneo")
        kappa = condition(A, M)
        assert kappa <= M.coarse_stats["bound"]
        kappas.append(kappa)
    # far below the bound and flat at high contrast (GDSW: kappa grows like the contrast)
    assert max(kappas) <= 30
    assert kappas[-1] <= 1.2 * kappas[2]


def test_geneo_bound_constants_are_independent_counts():
    n = 23
    d = ddops.Decomposition.from_grid((n, n), (3, 3), overlap=1)
    _, info = geneo_basis(channels(n, 1.0), d, return_info=True)
    inc = sp.csr_matrix((np.ones(d.indices.size), (np.repeat(np.arange(9), d.sizes),
                                                   d.indices)), shape=(9, n * n))
    meets = ((inc @ inc.T).toarray() > 0).sum(axis=1)
    assert info.stats["k0"] == meets.max() == 9  # the middle box meets all nine
    assert info.stats["k1"] == d.multiplicity.max()
    k0, k1, tau = info.stats["k0"], info.stats["k1"], info.threshold
    assert info.stats["bound"] == (1 + k0) * (2 + k0 * (2 * k0 + 1) * max(1, k1 / tau))


def test_geneo_with_finite_element_neumann_matrices():
    pytest.importorskip("skfem")
    from ddops.problems import (
        element_centroids,
        fem_elasticity_2d,
        fem_poisson_2d,
        rigid_body_modes,
        stiff_inclusions,
        unit_square_mesh,
    )

    # P1 Poisson: both routes, algebraic and finite-element Neumann matrices
    m = unit_square_mesh(23)
    coef = stiff_inclusions(element_centroids(m), count=12, radius=0.08, contrast=1e6, seed=2)
    A, _ = fem_poisson_2d(mesh=m, coefficient=coef)
    d = ddops.Decomposition.from_matrix(A, 9, overlap=1)
    _, _, Ns = fem_poisson_2d(mesh=m, coefficient=coef, neumann=d)
    for options in ({}, {"neumann": Ns}):
        M = TwoLevelSchwarz(A, d, "geneo", coarse_options=options)
        assert condition(A, M) <= M.coarse_stats["bound"]
        assert cg_iterations(A, M) <= 40
    # elasticity: the algebraic route refuses to cut couplings (oversampling=0); oversampled
    # (its default there) it is robust, as the finite-element one
    m = unit_square_mesh(15)
    E = stiff_inclusions(element_centroids(m), count=10, radius=0.08, contrast=1e6, seed=1)
    A, X = fem_elasticity_2d(mesh=m, E=E)
    Z = rigid_body_modes(X)
    d = ddops.Decomposition.from_matrix(A, 8, overlap=1, block_size=2)
    _, _, Ns = fem_elasticity_2d(mesh=m, E=E, neumann=d)
    with pytest.raises(ValueError, match="neumann="):
        geneo_basis(A, d, null_space=Z, oversampling=0)
    gdsw = TwoLevelSchwarz(A, d, "gdsw", null_space=Z)
    for options in ({"neumann": Ns}, {}):
        M = TwoLevelSchwarz(A, d, "geneo", null_space=Z, coarse_options=options)
        assert M.coarse_stats["null_space_functions"] > 0
        assert cg_iterations(A, M) <= 50
        assert cg_iterations(A, gdsw) > 2 * cg_iterations(A, M)


def test_geneo_null_space_functions_come_first_and_are_nicolaides():
    n = 23
    A = channels(n, 1e6)
    d = ddops.Decomposition.from_grid((n, n), (3, 3), overlap=1)
    Phi, info = geneo_basis(A, d, null_space=np.ones(n * n), return_info=True)
    nic = ddops.coarse_basis(d, "nicolaides")
    assert in_span(Phi.toarray(), nic.toarray())
    assert (info.column_kind == "null_space").sum() == d.num_subdomains


def test_geneo_cap_warns():
    n = 23
    A = channels(n, 1e6)
    d = ddops.Decomposition.from_grid((n, n), (3, 3), overlap=1)
    with pytest.warns(RuntimeWarning, match="max_per_subdomain=1"):
        _, info = geneo_basis(A, d, max_per_subdomain=1, return_info=True)
    assert info.kept.max() <= 1
    default = geneo_basis(A, d)
    assert (default != geneo_basis(A, d, threshold=0.25)).nnz == 0
    with warnings.catch_warnings():  # 1 lies in a cluster of eigenvalues (test below)
        warnings.simplefilter("ignore", RuntimeWarning)
        assert geneo_basis(A, d, threshold=1.0).shape[1] > default.shape[1]


# -- dependent functions -------------------------------------------------------------------------
def test_drop_dependent_columns_drops_a_first_rest_pivot_below_rtol():
    # the rest's only column has energy 1e-14 beside the first one (pivot below rtol = 1e-10
    # on the scaled coarse matrix) although it is far from it in the Euclidean inner
    # product: LAPACK's dpstrf takes a first pivot whatever its size, and the Euclidean
    # rescue of pivots near the rounding had kept it (A_0 of condition 1e14)
    A = sp.diags([1.0, 1.0, 1e-14]).tocsr()
    Phi = sp.csr_matrix(np.array([[1.0, 1.0], [0.0, 0.0], [0.0, 1.0]]))
    _, kept = drop_dependent_columns(A, Phi, first=np.array([True, False]))
    np.testing.assert_array_equal(kept, [0])
    # ... and a rest column of energy 1e-6 (pivot above rtol) stays
    A = sp.diags([1.0, 1.0, 1e-6]).tocsr()
    _, kept = drop_dependent_columns(A, Phi, first=np.array([True, False]))
    np.testing.assert_array_equal(kept, [0, 1])


def test_drop_dependent_columns_keeps_the_span():
    rng = np.random.default_rng(5)
    n = 31
    A = channels(n, 1e6)
    d = ddops.Decomposition.from_grid((n, n), (4, 4))
    Phi = gdsw_basis(A, d.owner).toarray()
    for draw in range(3):
        extra = Phi @ rng.standard_normal((Phi.shape[1], 7 + draw))
        both = np.hstack([Phi, extra])
        perm = rng.permutation(both.shape[1])
        mixed = both[:, perm]
        kept_Phi, kept = drop_dependent_columns(A, sp.csr_matrix(mixed))
        assert kept.size == Phi.shape[1]
        assert np.array_equal(kept_Phi.toarray(), mixed[:, kept])
        assert in_span(kept_Phi.toarray(), mixed)
        np.linalg.cholesky((kept_Phi.T @ A @ kept_Phi).toarray())
    # columns marked first are chosen first: a duplicate of one of them is the one dropped
    dup = np.hstack([Phi, Phi[:, :1]])
    _, kept = drop_dependent_columns(A, sp.csr_matrix(dup), first=np.arange(dup.shape[1]) == 0)
    assert 0 in kept and dup.shape[1] - 1 not in kept and kept.size == Phi.shape[1]
    with pytest.raises(ValueError, match="first must be a Boolean mask"):
        drop_dependent_columns(A, sp.csr_matrix(dup), first=np.ones(3, dtype=bool))
    # nothing to drop: the identity selection
    same, kept = drop_dependent_columns(A, sp.csr_matrix(Phi))
    assert np.array_equal(kept, np.arange(Phi.shape[1]))


@pytest.mark.parametrize("pardiso", [True, False])
def test_sparse_dependence_check_drops_the_same_columns_with_either_factorisation(
        pardiso, monkeypatch):
    """The sparse path of ``drop_dependent_columns`` (beyond ``DENSE_DROP_MAX`` columns)
    on PARDISO's ``L D L^T`` pivots and on SuperLU's: GDSW functions of the channels with
    random combinations of them mixed in, so that every combination is dependent; each
    factorisation keeps exactly as many columns as the rank (dense SVD), a set whose span
    is all columns' and whose Galerkin matrix is positive definite."""
    from ddops.dd import coarse_matrix

    if pardiso:
        need("pardiso")
    else:
        monkeypatch.setattr(coarse_matrix, "pardiso_available", lambda: False)
    monkeypatch.setattr(coarse_matrix, "DENSE_DROP_MAX", 1)
    called = []
    original = coarse_matrix.pardiso_pivots
    monkeypatch.setattr(coarse_matrix, "pardiso_pivots",
                        lambda K: called.append(K.shape) or original(K))
    rng = np.random.default_rng(3)
    n = 31
    A = channels(n, 1e2)
    Phi = gdsw_basis(A, ddops.Decomposition.from_grid((n, n), (4, 4)).owner).toarray()
    local = Phi[:, :6] @ rng.standard_normal((6, 4))  # combinations of nearby functions
    mixed = np.hstack([Phi, local])[:, rng.permutation(Phi.shape[1] + 4)]
    rank = np.linalg.matrix_rank(mixed)
    assert rank == Phi.shape[1]
    kept_Phi, kept = coarse_matrix.drop_dependent_columns(A, sp.csr_matrix(mixed))
    assert bool(called) == pardiso
    assert kept.size == rank
    assert in_span(kept_Phi.toarray(), mixed)
    np.linalg.cholesky((kept_Phi.T @ A @ kept_Phi).toarray())


@pytest.mark.parametrize("pardiso", [True, False])
def test_many_first_columns_then_the_rest_on_their_schur_complement(pardiso, monkeypatch):
    """Beyond ``DENSE_DROP_MAX`` first columns the rest is still chosen on their Schur
    complement by complete pivoting, with PARDISO (its partial factorisation) and without
    (SuperLU's factors of the first block and solves; before, everything fell back to the
    pivots of one factorisation in a fixed order, which left the coarse matrix of AGDSW on
    114,444 unknowns of 3D elasticity singular).  GDSW functions of the channels as the
    first columns, combinations of them and independent columns as the rest: every first
    column stays, exactly the rank is kept (dense SVD), the span is all columns', and the
    Galerkin matrix is positive definite."""
    from ddops.dd import coarse_matrix

    if pardiso:
        need("pardiso")
    else:
        monkeypatch.setattr(coarse_matrix, "pardiso_available", lambda: False)
    monkeypatch.setattr(coarse_matrix, "DENSE_DROP_MAX", 5)  # the rest's 5, not the first
    sparse_calls, schur_calls = [], []
    for name, calls in (("_sparse_independent", sparse_calls), ("_schur_on", schur_calls)):
        original = getattr(coarse_matrix, name)
        monkeypatch.setattr(coarse_matrix, name, (lambda f, c: lambda *a: c.append(
            len(a[1])) or f(*a))(original, calls))
    rng = np.random.default_rng(6)
    n = 31
    A = channels(n, 1e2)
    d = ddops.Decomposition.from_grid((n, n), (4, 4))
    first = gdsw_basis(A, d.owner).toarray()
    combos = first[:, :8] @ rng.standard_normal((8, 3))  # dependent on the first columns
    fresh = np.zeros((A.shape[0], 2))  # independent: bumps inside two subdomains
    fresh[d.owner == 0, 0] = rng.random((d.owner == 0).sum())
    fresh[d.owner == 5, 1] = rng.random((d.owner == 5).sum())
    rest = np.hstack([combos, fresh])[:, rng.permutation(5)]
    Phi = np.hstack([first, rest])
    mask = np.r_[np.ones(first.shape[1], dtype=bool), np.zeros(5, dtype=bool)]
    rank = np.linalg.matrix_rank(Phi)
    assert rank == first.shape[1] + 2
    kept_Phi, kept = coarse_matrix.drop_dependent_columns(A, sp.csr_matrix(Phi), first=mask)
    assert sparse_calls == [first.shape[1]] and schur_calls == [first.shape[1]]
    assert kept.size == rank and np.all(mask[kept[:first.shape[1]]])
    assert in_span(kept_Phi.toarray(), Phi)
    np.linalg.cholesky((kept_Phi.T @ A @ kept_Phi).toarray())


@pytest.mark.parametrize("solves", [True, False])
def test_euclidean_check_keeps_exactly_the_independent_candidates(solves, monkeypatch):
    """The Euclidean rescue of ``drop_dependent_columns`` by one factorisation of the base
    columns' Gram matrix and solves (few candidates, PARDISO) and by the Schur complement
    (otherwise): against closed forms, a candidate that is a combination of base columns
    (also one off by 1e-7 of its norm, a squared sine of 1e-14) is dropped, one with a
    component outside their span of 1e-2 is kept, and of two equal independent candidates
    one is kept."""
    from ddops.dd import coarse_matrix

    if solves:
        need("pardiso")
        called = []
        original = coarse_matrix.pardiso_pivots
        monkeypatch.setattr(coarse_matrix, "pardiso_pivots",
                            lambda K, rhs=None: called.append(rhs is not None) or original(K, rhs))
    else:
        monkeypatch.setattr(coarse_matrix, "SCHUR_BY_SOLVES_MAX", -1)
    rng = np.random.default_rng(4)
    n, nb = 400, 60
    base = sp.vstack([sp.random(n // 2, nb, density=0.05, random_state=5) + sp.eye(n // 2, nb),
                      sp.csr_matrix((n // 2, nb))], format="csr")  # on the first half
    outside, other = np.zeros(n), np.zeros(n)  # on the second half, where no base column is
    outside[n // 2:n // 2 + 40] = rng.standard_normal(40)
    other[n // 2 + 50:n // 2 + 90] = rng.standard_normal(40)
    combo = base @ rng.standard_normal(nb)
    near = combo + 1e-7 * np.linalg.norm(combo) * outside / np.linalg.norm(outside)
    kept_one = combo + 1e-2 * np.linalg.norm(combo) * outside / np.linalg.norm(outside)
    twin = base[:, :5] @ rng.standard_normal(5) + other
    cand = np.column_stack([combo, near, kept_one, twin, twin])
    Phi = sp.hstack([base, sp.csr_matrix(cand)], format="csr")
    chosen = coarse_matrix._euclidean_independent(Phi, np.arange(nb), nb + np.arange(5))
    assert sorted(chosen.tolist())[:1] == [nb + 2] and len(chosen) == 2
    assert {nb + 3, nb + 4} & set(chosen.tolist())
    if solves:
        assert called == [True]
    # no base columns: the candidates among themselves (one of combo and near, one twin)
    alone = set(coarse_matrix._euclidean_independent(Phi, nb + np.arange(0),
                                                     nb + np.arange(5)).tolist())
    assert len(alone) == 3 and nb + 2 in alone
    assert len(alone & {nb, nb + 1}) == 1 and len(alone & {nb + 3, nb + 4}) == 1


def test_drop_dependent_columns_returns_the_coarse_matrix_of_the_kept_columns():
    """``return_matrix=True`` also returns ``Phi^T A Phi`` of the kept columns (the product
    the check forms), against the dense product of the kept columns; nothing else changes."""
    rng = np.random.default_rng(7)
    n = 31
    A = channels(n, 1e6)
    d = ddops.Decomposition.from_grid((n, n), (4, 4))
    G = gdsw_basis(A, d.owner).toarray()
    mixed = sp.csr_matrix(np.hstack([G, G @ rng.standard_normal((G.shape[1], 6))]))
    first = np.arange(mixed.shape[1]) < G.shape[1]
    Phi, kept = drop_dependent_columns(A, mixed, first=first)
    Phi2, kept2, A0 = drop_dependent_columns(A, mixed, first=first, return_matrix=True)
    np.testing.assert_array_equal(kept2, kept)
    assert kept.size < mixed.shape[1] and (Phi2 != Phi).nnz == 0
    dense = Phi.toarray().T @ A.toarray() @ Phi.toarray()
    assert sp.isspmatrix_csr(A0) and A0.has_sorted_indices and A0.shape == dense.shape
    assert abs(A0 - A0.T).max() == 0.0
    np.testing.assert_allclose(A0.toarray(), dense, rtol=0, atol=1e-12 * np.abs(dense).max())
    empty = drop_dependent_columns(A, sp.csr_matrix((n * n, 0)), return_matrix=True)
    assert empty[0].shape == (n * n, 0) and empty[1].size == 0 and empty[2].shape == (0, 0)
    with pytest.raises(TypeError, match="return_matrix must be a bool"):
        drop_dependent_columns(A, mixed, return_matrix=1)


def test_drop_dependent_columns_from_the_interface_rows():
    """Discrete-harmonic columns (GDSW's, and combinations of them) have ``A Phi = 0`` off
    the interface, so ``rows=`` the interface forms the same scaled coarse matrix (to
    rounding, against the full product) and keeps the same columns; the rows are what the
    product uses (none: every column has zero energy, none is kept)."""
    from ddops.dd import coarse_matrix

    rng = np.random.default_rng(3)
    n = 31
    A = channels(n, 1e6)
    d = ddops.Decomposition.from_grid((n, n), (4, 4))
    G, info = gdsw_basis(A, d.owner, return_info=True)
    rows = info.harmonic_interface
    assert 0 < rows.size < n * n
    G = G.toarray()
    Phi = sp.csr_matrix(np.hstack([G, G @ rng.standard_normal((G.shape[1], 5))]))
    first = np.arange(Phi.shape[1]) < G.shape[1]
    K_full, _, _ = coarse_matrix._scaled_coarse(A, Phi)
    K_rows, _, _ = coarse_matrix._scaled_coarse(A, Phi, rows)
    assert abs(K_full - K_rows).max() <= 1e-13
    _, kept_full = drop_dependent_columns(A, Phi, first=first)
    _, kept_rows = drop_dependent_columns(A, Phi, first=first, rows=rows[::-1])
    np.testing.assert_array_equal(kept_rows, kept_full)
    assert kept_rows.size == G.shape[1]
    _, none = drop_dependent_columns(A, Phi, rows=np.zeros(0, dtype=np.int64))
    assert none.size == 0
    for bad in (np.array([-1, 2]), np.array([0, n * n]), np.array([0.0, 1.0])):
        with pytest.raises(ValueError, match="rows must be row indices"):
            drop_dependent_columns(A, Phi, rows=bad)


@pytest.mark.parametrize("extension_solver", ["auto", "amg"])
def test_agdsw_checks_its_columns_on_the_interface_rows_of_an_exact_extension(
        monkeypatch, extension_solver):
    """AGDSW hands its dependence check the interface rows when its extension is exact
    (the rows of its harmonic_interface) and all rows after the inexact one (None)."""
    if extension_solver == "amg":
        need("amg")
    n = 23
    A = channels(n, 1e4, period=4)
    d = ddops.Decomposition.from_grid((n, n), (3, 3))
    seen = []
    original = agdsw.drop_dependent_columns

    def spy(*args, **kwargs):
        seen.append(kwargs.get("rows"))
        return original(*args, **kwargs)

    monkeypatch.setattr(agdsw, "drop_dependent_columns", spy)
    _, info = agdsw_basis(A, d.owner, return_info=True, extension_solver=extension_solver)
    assert info.stats["eigen_functions"] > 0 and len(seen) == 1
    if extension_solver == "amg":
        assert seen[0] is None and info.harmonic_interface is None
    else:
        np.testing.assert_array_equal(seen[0], info.harmonic_interface)
        np.testing.assert_array_equal(seen[0], info.components.interface)


@pytest.mark.parametrize("pardiso", [True, False])
def test_drop_dependent_columns_with_first_columns_matches_the_dense_reference(pardiso,
                                                                              monkeypatch):
    """With ``first`` columns, the rest is chosen on the Schur complement of the kept first
    columns (PARDISO's partial factorisation, or without PARDISO a dense Cholesky
    elimination): the same columns as a dense reference (pivoted Cholesky of the scaled
    first block, then of the dense Schur complement), and the Schur complement itself equal
    to the dense formula."""
    from scipy.linalg import lapack

    from ddops.dd import coarse_matrix
    from ddops.linalg.local_solvers import pardiso_available

    if pardiso and not pardiso_available():
        pytest.skip("PARDISO is not installed")
    monkeypatch.setattr(coarse_matrix, "pardiso_available", lambda: pardiso)

    rng = np.random.default_rng(11)
    n = 31
    A = channels(n, 1e4)
    d = ddops.Decomposition.from_grid((n, n), (4, 4))
    G = gdsw_basis(A, d.owner).toarray()
    # the rest: local combinations of the first columns (dependent) and new local functions
    wide = np.flatnonzero((G != 0).sum(axis=0) >= 50)[:6]  # not the one-point vertex functions
    local = np.where(G[:, wide] != 0, rng.standard_normal((G.shape[0], 6)), 0.0)
    rest = np.hstack([G[:, :4] @ rng.standard_normal((4, 3)), local])
    Phi = np.hstack([G, G[:, :1], rest])  # one duplicate of a first column among them
    first = np.arange(Phi.shape[1]) < G.shape[1]
    _, kept = drop_dependent_columns(A, sp.csr_matrix(Phi), first=first)
    # the dense reference
    K = Phi.T @ A.toarray() @ Phi
    s = 1.0 / np.sqrt(np.diag(K))
    K = s[:, None] * K * s[None, :]
    f, r = np.flatnonzero(first), np.flatnonzero(~first)
    _, piv, rank, _ = lapack.dpstrf(K[np.ix_(f, f)], lower=1, tol=coarse_matrix.DROP_PIVOT_RTOL)
    k = f[piv[:rank] - 1]
    S = K[np.ix_(r, r)] - K[np.ix_(r, k)] @ np.linalg.solve(K[np.ix_(k, k)], K[np.ix_(k, r)])
    ours = coarse_matrix._schur_on(sp.csr_matrix(K), k, r)
    np.testing.assert_allclose(ours, 0.5 * (S + S.T), atol=1e-10)
    _, piv, rank, _ = lapack.dpstrf(0.5 * (S + S.T), lower=1, tol=coarse_matrix.DROP_PIVOT_RTOL)
    expected = np.sort(np.concatenate([k, r[piv[:rank] - 1]]))
    np.testing.assert_array_equal(kept, expected)
    assert kept.size == G.shape[1] + 6  # the duplicate and the 3 combinations dropped


@pytest.mark.parametrize("seed", range(12))
def test_drop_dependent_columns_after_nearly_dependent_first_columns(seed):
    """First columns nearly dependent (``u``, ``u + 1e-5 v``, ``u + 1e-5 w``: a scaled
    Galerkin block of condition about 1e10, as the null-space columns at high contrast) and
    rest columns that are exactly combinations of them: the Schur complement of the rest is
    1e-10 off, so the rest is chosen above ``eps cond`` of the first block, not above the
    tolerance alone, and the kept columns' Galerkin matrix is nonsingular (with the
    tolerance alone, 4 of these 12 draws kept an exactly dependent column)."""

    rng = np.random.default_rng(seed)
    n = 60
    u, v, w = rng.standard_normal((3, n))
    F = np.column_stack([u, u + 1e-5 * v, u + 1e-5 * w, rng.standard_normal((n, 3))])
    R = np.column_stack([F[:, 1] - F[:, 0] + 1e-3 * F[:, 3], F[:, 2] - F[:, 0] + 1e-3 * F[:, 4],
                         rng.standard_normal(n)])
    Phi = np.hstack([F, R])
    first = np.arange(9) < 6
    _, kept = drop_dependent_columns(sp.identity(n, format="csr"), sp.csr_matrix(Phi),
                                     first=first)
    # independent: the kept columns' scaled Galerkin matrix, densely
    P = Phi[:, kept] / np.linalg.norm(Phi[:, kept], axis=0)
    assert np.linalg.eigvalsh(P.T @ P)[0] > 1e-13
    assert 8 in kept and kept.size >= 6  # the independent random column stays
    # the span up to the first block's near-dependence: every column within 1e-4 of it
    Q = np.linalg.qr(P)[0]
    assert np.linalg.norm(Phi - Q @ (Q.T @ Phi), axis=0).max() <= 1e-4 * np.abs(Phi).max()


def test_rgdsw_with_rigid_body_modes_on_3d_elasticity_metis_parts():
    pytest.importorskip("skfem")
    from ddops.problems import fem_elasticity_3d, rigid_body_modes

    A, X = fem_elasticity_3d(5)
    Z = rigid_body_modes(X)
    d = ddops.Decomposition.from_matrix(A, 12, overlap=1, block_size=3)
    Phi, info = ddops.coarse_basis(d, "rgdsw", A=A, null_space=Z, return_info=True)
    np.linalg.cholesky((Phi.T @ A @ Phi).toarray())
    M = TwoLevelSchwarz(A, d, "rgdsw", null_space=Z)
    assert cg_iterations(A, M) <= 60


# -- arguments ---------------------------------------------------------------------------------
def test_bad_arguments():
    n = 15
    A = channels(n, 1e2)
    d = ddops.Decomposition.from_grid((n, n), (2, 2))
    with pytest.raises(ValueError, match="threshold"):
        agdsw_basis(A, d.owner, threshold=-1.0)
    with pytest.raises(ValueError, match="threshold"):
        geneo_basis(A, d, threshold=0.0)
    with pytest.raises(ValueError, match="max_per_component"):
        agdsw_basis(A, d.owner, max_per_component=-1)
    with pytest.raises(ValueError, match="neumann must hold one matrix per subdomain"):
        geneo_basis(A, d, neumann=[sp.identity(3)])
    with pytest.raises(ValueError, match=r"neumann\[0\] must have shape"):
        geneo_basis(A, d, neumann=[sp.identity(3)] * 4)
    with pytest.raises(TypeError, match="neumann must be a sequence"):
        geneo_basis(A, d, neumann=sp.identity(n * n))
    Ns = adaptive.local_neumann_matrices(A, d)
    for i in (0, 2, 3):
        bad = list(Ns)
        bad[i] = Ns[i] - sp.identity(d.sizes[i]) * 1e3
        with pytest.raises(ValueError, match=f"subdomain {i} is not positive semidefinite"):
            geneo_basis(A, d, neumann=bad)
    with pytest.raises(ValueError, match="threshold is only used with kind in"):
        ddops.coarse_basis(d, "gdsw", A=A, threshold=0.1)
    with pytest.raises(ValueError, match="neumann is only used with kind in"):
        ddops.coarse_basis(d, "gdsw", A=A, neumann=[])
    with pytest.raises(ValueError, match="coarse_options"):
        TwoLevelSchwarz(A, d, "agdsw", coarse_options={"max_per_subdomain": 3})
    with pytest.raises(TypeError, match="coarse_options"):
        TwoLevelSchwarz(A, d, "agdsw", coarse_options=[("threshold", 0.1)])


def test_adaptive_bases_by_name_through_coarse_basis_and_schwarz():
    n = 31
    A = channels(n, 1e6)
    d = ddops.Decomposition.from_grid((n, n), (4, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for kind, builder in (("agdsw", lambda: agdsw_basis(A, d.owner)),
                              ("geneo", lambda: geneo_basis(A, d))):
            Phi = ddops.coarse_basis(d, kind, A=A)
            assert (Phi != builder()).nnz == 0
            M = TwoLevelSchwarz(A, d, kind)
            assert M.coarse_dim == Phi.shape[1]
            assert M.coarse_stats["coarse_dim"] == Phi.shape[1]
            assert M.coarse_info.method == kind


def test_default_caps():
    # 40 floating channels crossing two interfaces: more than AGDSW's default cap of 32
    n = 95
    c = np.ones((n + 1, n + 1))
    c[3 + 2 * np.arange(40), 3:n - 2] = 1e6
    A = diffusion_2d(c)
    d = ddops.Decomposition.from_grid((n, n), (3, 1))
    with pytest.warns(RuntimeWarning, match="max_per_component=32"):
        _, info = agdsw_basis(A, d.owner, return_info=True)
    assert info.selected.tolist() == [40, 40]
    assert info.kept.tolist() == [32, 32]
    assert info.stats["kept_per_component"].tolist() == [32, 32]
    # ... and 60 channels in every subdomain: more than GenEO's default cap of 48 (the
    # subspace grows from 16 vectors to the cap)
    n = 127
    c = np.ones((n + 1, n + 1))
    c[2 + 2 * np.arange(60), 2:n - 1] = 1e6
    A = diffusion_2d(c)
    d = ddops.Decomposition.from_grid((n, n), (2, 1))
    with pytest.warns(RuntimeWarning, match="max_per_subdomain=48"):
        _, info = geneo_basis(A, d, return_info=True)
    assert info.selected.min() > 48
    assert info.kept.max() == 48
    assert info.stats["kept_per_subdomain"].max() == 48


@pytest.mark.parametrize("inertia", [False, True])
def test_geneo_without_any_small_eigenvalue_is_one_level(inertia, monkeypatch):
    # 2 x 2 boxes of homogeneous Poisson: every subdomain touches the Dirichlet boundary and
    # no eigenvalue of N_i v = lambda D_i A_i D_i v is below the default threshold 0.25
    from ddops.dd import geneo

    if inertia:
        need("pardiso")
    monkeypatch.setattr(geneo, "GENEO_INERTIA", inertia)
    n = 15
    A = ddops.poisson_2d(n)
    d = ddops.Decomposition.from_grid((n, n), (2, 2))
    Phi, info = geneo_basis(A, d, return_info=True)
    assert Phi.shape == (n * n, 0)
    assert info.selected.tolist() == [0, 0, 0, 0]
    # the inertia of N_i - tau B_i shows that nothing is below the threshold: no eigensolve
    assert info.stats["skipped_eigenproblems"] == (4 if inertia else 0)
    for i, idx in enumerate(d.subdomains):
        Di = np.diag(1.0 / d.multiplicity[idx])
        lam = sla.eigh(cut_neumann(A, idx), Di @ A.toarray()[np.ix_(idx, idx)] @ Di,
                       eigvals_only=True)
        assert lam[0] > 0.25
        if inertia:  # not computed: known to be above the threshold
            assert np.isnan(info.eigenvalues[i])
        else:  # above the threshold only settled to within a fraction: an upper bound, close
            assert lam[0] - 1e-12 <= info.eigenvalues[i] <= 1.1 * lam[0]
    with pytest.warns(RuntimeWarning, match="selected no coarse function"):
        M = TwoLevelSchwarz(A, d, "geneo")
    one = TwoLevelSchwarz(A, d, None)
    assert M.coarse_dim == 0
    x = np.random.default_rng(1).standard_normal(n * n)
    np.testing.assert_array_equal(M @ x, one @ x)


def test_agdsw_when_every_unknown_is_on_the_interface():
    # no interior unknown at all: no coupling to slice (it raised on an empty sparse index)
    A = sp.diags([-np.ones(3), 2.5 * np.ones(4), -np.ones(3)], [-1, 0, 1]).tocsr()
    d = ddops.Decomposition([np.array([0, 1, 2]), np.array([1, 2, 3])], 4,
                            owner=np.array([0, 0, 1, 1]))
    P = ddops.coarse_basis(d, "agdsw", A=A).toarray()
    G = ddops.coarse_basis(d, "gdsw", A=A).toarray()
    # the space contains GDSW's, and the preconditioner is SPD
    assert np.linalg.matrix_rank(np.hstack([P, G])) == np.linalg.matrix_rank(P)
    M = ddops.TwoLevelSchwarz(A, d, "agdsw").to_dense()
    assert np.linalg.eigvalsh((M + M.T) / 2).min() > 0


def test_geneo_capped_subdomains_settle_without_the_iteration_limit():
    """13-14 channels per subdomain at contrast 1e6 and a cap of 4: the kept pairs lie in a
    cluster larger than the subspace, whose single Ritz values move slowly; they settle to
    5 % of the largest kept one instead of running the iteration to its limit (60 solves and
    a warning before).  The kept pairs are then Ritz pairs of that cluster, not its smallest
    eigenpairs: each subdomain's smallest Ritz value lies within the dense cluster (eigenvalues
    below 1e-3 tau), not below it."""
    import warnings

    from ddops.dd import geneo
    from ddops.problems import diffusion_2d, high_contrast_channels

    n = 63
    A = diffusion_2d(high_contrast_channels(n, 1e6, margin=2, period=3))
    d = ddops.Decomposition.from_grid((n, n), (2, 2), overlap=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, info = geneo_basis(A, d, max_per_subdomain=4, return_info=True)
    messages = [str(w.message) for w in caught]
    assert any("max_per_subdomain=4" in m for m in messages)
    assert not any("stopped at its limit" in m for m in messages)
    assert info.stats["subspace_iterations"] < geneo.GENEO_MAX_ITERATIONS
    np.testing.assert_array_equal(info.kept, 4)
    for i, idx in enumerate(d.subdomains):
        mult = d.multiplicity[idx].astype(float)
        K = A[idx][:, idx].toarray() / np.outer(mult, mult)
        lam = sla.eigh(cut_neumann(A, idx), K, eigvals_only=True)
        cluster = lam[lam < 1e-3 * info.threshold]
        assert cluster.size > 4
        assert cluster[0] - 1e-12 <= info.eigenvalues[i] <= cluster[-1]


def test_geneo_grown_subspace_starts_warm_and_selects_as_a_cold_start(monkeypatch):
    """13-14 channels per subdomain exceed the 12 vectors GenEO starts with: the grown
    subspace starts from the Ritz vectors so far, and selects the same functions (the same
    counts, eigenvalues and span) as a cold start from random vectors."""
    from ddops.dd import geneo
    from ddops.problems import diffusion_2d, high_contrast_channels

    n = 63
    A = diffusion_2d(high_contrast_channels(n, 1e6, margin=2, period=3))
    d = ddops.Decomposition.from_grid((n, n), (2, 2), overlap=1)
    # the subspace grows where the counts below the threshold are not known beforehand
    monkeypatch.setattr(geneo, "GENEO_INERTIA", False)
    starts = []
    solve = geneo._subspace_eigh

    blocks = []

    def record(*args):
        starts.append(args[11] is not None)
        blocks.append(args[5])
        return solve(*args)

    monkeypatch.setattr(geneo, "_subspace_eigh", record)
    Phi, info = geneo_basis(A, d, return_info=True)
    assert starts == [False, True]  # grown once, warm
    # to a quarter more than found (13-14), not doubled (24 wanted + 6 extra = 30)
    assert blocks[0] == 16 and blocks[1] < 30
    monkeypatch.setattr(geneo, "_subspace_eigh", lambda *args: solve(*args[:11], None, args[12]))
    Ref, ref = geneo_basis(A, d, return_info=True)
    np.testing.assert_array_equal(info.selected, ref.selected)
    assert info.selected.min() >= 13
    # settled to GENEO_RESIDUAL_RTOL of the threshold, each
    np.testing.assert_allclose(info.eigenvalues, ref.eigenvalues, rtol=0,
                               atol=2 * geneo.GENEO_RESIDUAL_RTOL * geneo.GENEO_THRESHOLD)
    P, R = Phi.toarray(), Ref.toarray()
    Q = sla.orth(R)
    assert P.shape == R.shape
    assert np.linalg.norm(P - Q @ (Q.T @ P)) <= 1e-4 * np.linalg.norm(P)


def test_drop_dependent_columns_when_the_first_block_fails_its_factorisation(monkeypatch):
    """The kept first columns' block failing its factorisation (nearly dependent columns at
    the factorisation's limit): every column is then chosen by the sparse pivots, and what
    is kept is still independent."""
    from ddops.dd import coarse_matrix
    from ddops.linalg.local_solvers import SingularBlockError

    def refuse(*args, **kwargs):
        raise SingularBlockError(0)

    rng = np.random.default_rng(5)
    n = 40
    F = rng.standard_normal((n, 5))
    Phi = np.hstack([F, F[:, :2] @ rng.standard_normal((2, 2)), rng.standard_normal((n, 1))])
    first = np.arange(8) < 5
    monkeypatch.setattr(coarse_matrix, "pardiso_schur_complement", refuse)
    monkeypatch.setattr(coarse_matrix.sla, "cholesky", refuse)
    assert coarse_matrix._schur_on(sp.csr_matrix(np.eye(8)), np.arange(5), np.arange(5, 8)) \
        is None
    _, kept = drop_dependent_columns(sp.identity(n, format="csr"), sp.csr_matrix(Phi),
                                     first=first)
    P = Phi[:, kept] / np.linalg.norm(Phi[:, kept], axis=0)
    assert kept.size == 6 and np.linalg.eigvalsh(P.T @ P)[0] > 1e-10
