"""GenEO's block Krylov eigensolver (where the inertia counts the eigenvalues, PARDISO).

The references are independent: dense ``scipy.linalg.eigh`` of the stacked pencils, and the
subspace iteration (``GENEO_KRYLOV`` off) that it replaces on the same chunks.
"""

import warnings

import numpy as np
import pytest
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import ddops
from ddops.dd import geneo
from ddops.dd.adaptive import geneo_basis
from ddops.linalg.local_solvers import factorize_blocks
from ddops.problems import poisson_2d
from tests._optional import need
from tests.dd.test_adaptive import channels, in_span
from tests.dd.test_geneo_inertia import N, dense_pencils, half_channels


def stacked_pencils(sizes, width, seed=0):
    """Blocks of a 1D Neumann Laplacian with random coefficients (``N_i``, a kernel of the
    constants) and ``D_i A_i D_i`` from random weights (``B_i``), padded to ``width`` rows
    as GenEO pads them (``N = 1``, ``B = 0`` there); the dense pencils of the real rows."""
    rng = np.random.default_rng(seed)
    Ns, Bs, dense = [], [], []
    for s in sizes:
        c = 10.0 ** rng.uniform(-2, 2, s - 1)  # edge coefficients
        L = sp.diags([np.r_[c, 0] + np.r_[0, c], -c, -c], [0, -1, 1]).toarray()
        A = L + np.diag(rng.uniform(0.5, 1.0, s))  # the Dirichlet-like matrix A_i
        D = np.diag(rng.uniform(0.2, 1.0, s))
        Ni, Bi = L, D @ A @ D
        dense.append((Ni, Bi))
        pad = width - s
        Ns.append(sp.block_diag([Ni, sp.identity(pad)]) if pad else sp.csr_matrix(Ni))
        Bs.append(sp.block_diag([Bi, sp.csr_matrix((pad, pad))]) if pad else sp.csr_matrix(Bi))
    real = np.concatenate([np.arange(width) < s for s in sizes])
    return sp.block_diag(Ns, format="csr"), sp.block_diag(Bs, format="csr"), real, dense


def krylov_inputs(sizes, width, tau, seed=0):
    """:func:`stacked_pencils` with what the block Krylov method takes: the stacked
    ``N``, ``B``, real rows, the shifted factorisation and its shift, and the dense
    pencils with their eigenvalues and counts below ``tau``."""
    Ns, Bs, real, dense = stacked_pencils(sizes, width, seed)
    sigma = geneo.GENEO_SHIFT * tau
    shifted = factorize_blocks((Ns + sigma * Bs).tocsr(),
                               np.arange(len(sizes) + 1) * width, "pardiso")
    exact = [sla.eigh(Ni, Bi, eigvals_only=True) for Ni, Bi in dense]
    counts = np.array([int((e < tau).sum()) for e in exact])
    return Ns, Bs, real, shifted, sigma, dense, exact, counts


def test_block_krylov_eigenpairs_match_dense_pencils():
    """On padded stacks of random pencils: every eigenvalue below the threshold to the
    settle tolerance, B-orthonormal Ritz vectors with small residuals, padding rows zero."""
    need("pardiso")
    sizes, width, tau = [40, 33, 37], 40, 0.25
    Ns, Bs, real, shifted, sigma, dense, exact, counts = krylov_inputs(sizes, width, tau)
    m = len(sizes)
    assert counts.min() >= 2  # a problem with something to find
    block = int(geneo._subspace_size(np.int64(counts.max()), 48))
    lam, V, its, drift = geneo._block_krylov_eigh(shifted, Ns, Bs, m, width, block, tau,
                                                  real, 48, counts, sigma)
    assert not drift.any() and its <= geneo.GENEO_MAX_ITERATIONS
    assert_pairs_of_dense_pencils(lam, V.reshape(m, width, block), exact, dense, sizes, tau)


@pytest.mark.parametrize("sizes,width,capacity", [
    ([40, 33, 37], 40, None),  # blocks retire
    ([40, 33, 37], 40, 1),  # the basis outgrows its capacity
    ([8, 6, 7], 8, 1),  # the basis fills small blocks: dependent columns left out
])
def test_the_first_gram_schmidt_pass_takes_the_projections_from_the_rayleigh_quotient(
        monkeypatch, sizes, width, capacity):
    """The coefficients the block Krylov method hands to the first Gram-Schmidt pass (its
    Rayleigh quotient's newest columns, ``V^T B v``) are the projections ``(K V)^T Y`` of
    the new columns computed afresh, to rounding (what a wrong first pass would leave, the
    second removes, so the eigenpairs alone would not show it)."""
    need("pardiso")
    if capacity is not None:
        monkeypatch.setattr(geneo, "KRYLOV_CAPACITY", capacity)
    tau = 0.25
    Ns, Bs, real, shifted, sigma, dense, exact, counts = krylov_inputs(sizes, width, tau)
    passes, zero_columns = [], []
    original = geneo._gram_schmidt_twice

    def checked(Y3, V, KVt, first):
        passes.append(np.linalg.norm(first - KVt @ Y3) / np.linalg.norm(KVt @ Y3))
        zero_columns.append(bool((np.abs(V).max(axis=1) == 0).any()))
        return original(Y3, V, KVt, first)

    monkeypatch.setattr(geneo, "_gram_schmidt_twice", checked)
    block = int(geneo._subspace_size(np.int64(counts.max()), 48))
    block = min(block, min(sizes))
    lam, V, _, _ = geneo._block_krylov_eigh(shifted, Ns, Bs, len(sizes), width, block, tau,
                                            real, 48, counts, sigma)
    assert len(passes) >= 2 and max(passes) < 1e-10
    if width == 8:
        assert any(zero_columns)  # (the case reaches left-out columns)
    assert_pairs_of_dense_pencils(lam, V.reshape(len(sizes), width, block), exact, dense,
                                  sizes, tau)


def test_gram_schmidt_twice_against_a_dense_projection():
    """:func:`_gram_schmidt_twice` on a stack of K-orthonormal bases: the new columns are
    K-orthogonal to the basis, equal to ``(I - V V^T K) Y`` and the coefficients are
    ``V^T K Y``, also with a first pass given wrong (the second corrects it)."""
    rng = np.random.default_rng(1)
    m, rows, k, p = 3, 30, 6, 4
    K = np.stack([(lambda X: X @ X.T + rows * np.eye(rows))(rng.standard_normal((rows, rows)))
                  for _ in range(m)])
    V = np.stack([np.linalg.solve(np.linalg.cholesky(Ki).T, sla.qr(
        rng.standard_normal((rows, k)), mode="economic")[0]) for Ki in K])
    np.testing.assert_allclose(np.swapaxes(V, 1, 2) @ K @ V, np.broadcast_to(np.eye(k),
                                                                         (m, k, k)), atol=1e-12)
    Y = rng.standard_normal((m, rows, p))
    KVt = np.swapaxes(K @ V, 1, 2)
    exact = KVt @ Y
    for first in (exact, exact + 1e-6 * rng.standard_normal(exact.shape)):
        out, c = geneo._gram_schmidt_twice(Y, V, KVt, first)
        np.testing.assert_allclose(c, exact, rtol=1e-10, atol=1e-10 * np.abs(exact).max())
        np.testing.assert_allclose(out, Y - V @ exact, atol=1e-10 * np.abs(Y).max())
        assert np.abs(KVt @ out).max() < 1e-10 * np.abs(exact).max()


def assert_pairs_of_dense_pencils(lam, V, exact, dense, sizes, tau):
    """Every block's eigenvalues below ``tau`` (``exact``, of its ``dense`` pencil) found,
    to the settle tolerance; its Ritz vectors B-orthonormal with small residuals, zero on
    the padding rows."""
    for j, (e, (Ni, Bi)) in enumerate(zip(exact, dense, strict=True)):
        c, s = int((e < tau).sum()), sizes[j]
        assert (lam[j] < tau).sum() == c
        # below half the threshold to GENEO_RESIDUAL_RTOL of it, above to 1e-3 of it (the
        # settle rule; Ritz values are upper bounds)
        tol = np.where(e[:c] < 0.5 * tau, 10 * geneo.GENEO_RESIDUAL_RTOL, 1e-2) * tau
        assert np.all(lam[j, :c] >= e[:c] - 1e-12) and np.all(lam[j, :c] - e[:c] <= tol)
        assert not V[j, s:].any()
        X = V[j, :s, :c]
        np.testing.assert_allclose(X.T @ Bi @ X, np.eye(c), atol=1e-8)
        residual = np.linalg.norm(Ni @ X - Bi @ X * lam[j, :c], axis=0)
        assert residual.max() <= 1e-2 * np.linalg.norm(Bi, 2)


def test_block_krylov_selects_what_the_subspace_iteration_selects(monkeypatch):
    """Floating channels in half the domain: the same counts (those of the dense pencils),
    the smallest eigenvalues to the settle tolerance, the same space to the vectors' tolerance
    and the same CG iterations, for fewer columns solved."""
    need("pardiso")
    A = half_channels()
    d = ddops.Decomposition.from_grid((N, N), (4, 4), overlap=1)
    solved = []
    factor = geneo._shifted_factor

    class Counted:  # the shifted factorisation, counting the columns it solves
        def __init__(self, solver):
            self.solver = solver

        def solve(self, B):
            solved.append(B.shape[1])
            return self.solver.solve(B)

    monkeypatch.setattr(geneo, "_shifted_factor", lambda *a, **k: Counted(factor(*a, **k)))
    runs, columns = {}, {}
    for krylov in (False, True):
        monkeypatch.setattr(geneo, "GENEO_KRYLOV", krylov)
        solved.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            runs[krylov] = geneo_basis(A, d, return_info=True)
        columns[krylov] = sum(solved)
        assert runs[krylov][1].stats["solved_columns"] == columns[krylov]
    (P0, i0), (P1, i1) = runs[False], runs[True]
    tau = i0.threshold
    exact = np.array([int((sla.eigh(Ni, Bi, eigvals_only=True) < tau).sum())
                      for Ni, Bi in dense_pencils(A, d)])
    np.testing.assert_array_equal(i1.selected, exact)
    np.testing.assert_array_equal(i1.selected, i0.selected)
    np.testing.assert_allclose(i1.eigenvalues, i0.eigenvalues, rtol=0, equal_nan=True,
                               atol=2 * geneo.GENEO_RESIDUAL_RTOL * tau)
    assert P1.shape == P0.shape and in_span(P0.toarray(), P1.toarray(), tol=1e-3)
    assert 0 < columns[True] < 0.7 * columns[False]
    b = np.random.default_rng(0).standard_normal(A.shape[0])
    its = []
    for P in (P0, P1):
        M = ddops.TwoLevelSchwarz(A, d, coarse_basis=P)
        count = [0]
        spla.cg(A, b, M=M, rtol=1e-8,
                callback=lambda x, count=count: count.__setitem__(0, count[0] + 1))
        its.append(count[0])
    assert abs(its[0] - its[1]) <= 1


def test_a_threshold_above_every_eigenvalue_falls_back_to_the_subspace_iteration(
        monkeypatch):
    """A threshold of 1e6 on Poisson takes every eigenvalue (the cap bites): the shift is
    far above the pencils' eigenvalues, ``S`` nearly a multiple of the identity, and the
    Krylov basis loses its K-orthogonality; the subspace iteration takes over, and the
    basis is the one it gives alone, bit for bit."""
    need("pardiso")
    n = 12
    A = poisson_2d(n)
    d = ddops.Decomposition.from_grid((n, n), (2, 1))
    outcomes = []
    krylov = geneo._block_krylov_eigh
    monkeypatch.setattr(geneo, "_block_krylov_eigh",
                        lambda *a: outcomes.append(krylov(*a)) or outcomes[-1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (the cap bites)
        P, info = geneo_basis(A, d, threshold=1e6, return_info=True)
        assert outcomes and all(o is None for o in outcomes)
        monkeypatch.setattr(geneo, "GENEO_KRYLOV", False)
        Q, ref = geneo_basis(A, d, threshold=1e6, return_info=True)
    assert info.kept.tolist() == [48, 48]
    np.testing.assert_array_equal(P.toarray(), Q.toarray())


@pytest.mark.parametrize("block,expected", [(1, 1), (3, 3), (5, 4), (12, 4), (13, 5),
                                            (30, 10), (36, 12), (60, 12)])
def test_krylov_block_is_a_third_of_the_subspace_within_its_bounds(block, expected):
    assert geneo._krylov_block(block) == expected
    assert geneo.GENEO_KRYLOV_MIN_BLOCK == 4 and geneo.GENEO_KRYLOV_MAX_BLOCK == 12


def test_channels_with_inertia_take_the_krylov_method(monkeypatch):
    """Where the inertia counts (PARDISO), every chunk that iterates runs the block Krylov
    method, and none falls back on an ordinary problem."""
    need("pardiso")
    outcomes = []
    krylov = geneo._block_krylov_eigh
    monkeypatch.setattr(geneo, "_block_krylov_eigh",
                        lambda *a: outcomes.append(krylov(*a)) or outcomes[-1])
    A = channels(31, 1e6)
    d = ddops.Decomposition.from_grid((31, 31), (3, 3), overlap=1)
    geneo_basis(A, d)
    assert outcomes and all(o is not None for o in outcomes)


def test_a_cluster_at_the_threshold_selects_no_more_than_the_dense_pencils():
    """At ``threshold=1`` the channels of contrast 1e6 have a cluster of eigenvalues at the
    threshold, where a basis that is not K-orthonormal would give Ritz values below the
    eigenvalues in the Rayleigh-Ritz step that assumes it (more selected than the dense
    pencils have below the threshold): ``K Y`` is formed afresh after the
    orthogonalisation, and the orthogonality check hands over what still drifts."""
    need("pardiso")
    n = 23
    A = channels(n, 1e6)
    d = ddops.Decomposition.from_grid((n, n), (3, 3), overlap=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (a subspace iteration may stall)
        _, info = geneo_basis(A, d, threshold=1.0, return_info=True)
    below = 1.0 - geneo.THRESHOLD_TIE_RTOL
    exact = np.array([int((sla.eigh(Ni, Bi, eigvals_only=True) < below).sum())
                      for Ni, Bi in dense_pencils(A, d)])
    assert np.all(info.selected <= exact)


def test_a_basis_that_loses_its_orthogonality_hands_over_to_the_subspace_iteration(
        monkeypatch):
    """With no tolerance on ``V^T K V - I`` every basis fails the check: every chunk's
    Krylov method gives up, and the basis is the subspace iteration's alone, bit for bit."""
    need("pardiso")
    n = 23
    A = channels(n, 1e6)
    d = ddops.Decomposition.from_grid((n, n), (3, 3), overlap=1)
    outcomes = []
    krylov = geneo._block_krylov_eigh
    monkeypatch.setattr(geneo, "_block_krylov_eigh",
                        lambda *a: outcomes.append(krylov(*a)) or outcomes[-1])
    monkeypatch.setattr(geneo, "KRYLOV_ORTHOGONALITY", 0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        P = geneo_basis(A, d)
        assert outcomes and all(o is None for o in outcomes)
        monkeypatch.setattr(geneo, "GENEO_KRYLOV", False)
        Q = geneo_basis(A, d)
    np.testing.assert_array_equal(P.toarray(), Q.toarray())


@pytest.mark.parametrize("capacity", [0, 1])
def test_a_basis_that_outgrows_its_capacity_is_the_same_bit_for_bit(monkeypatch, capacity):
    """The basis grows (doubling its capacity, a copy) past :data:`KRYLOV_CAPACITY` blocks:
    the same Ritz values, vectors and solves bit for bit as with room for every block."""
    need("pardiso")
    sizes, width, tau = [40, 33, 37], 40, 0.25
    Ns, Bs, real, shifted, sigma, _, _, counts = krylov_inputs(sizes, width, tau, seed=3)
    m = len(sizes)
    block = int(geneo._subspace_size(np.int64(counts.max()), 48))

    def run():
        return geneo._block_krylov_eigh(shifted, Ns, Bs, m, width, block, tau, real, 48,
                                        counts, sigma)

    roomy, p, room = run(), geneo._krylov_block(block), geneo.KRYLOV_CAPACITY
    monkeypatch.setattr(geneo, "KRYLOV_CAPACITY", capacity)
    grown = run()
    columns = (roomy[2] + 1) * p  # the basis: the start block and one per solve
    assert block + capacity * p < columns <= block + room * p  # grew here only
    for a, b in zip(roomy, grown, strict=True):
        assert np.array_equal(a, b)


def test_settled_blocks_retire_with_the_pairs_of_the_dense_pencils(monkeypatch):
    """Blocks that settle before the chunk's last retire (the later steps' Rayleigh-Ritz
    steps see fewer blocks): each block's eigenvalues below the threshold still match its
    dense pencil to the settle tolerance, in its own slot of the results (B-orthonormal
    Ritz vectors, padding rows zero), with the counts of every block running to the end."""
    need("pardiso")
    sizes, width, tau = [40, 30, 37, 26, 40], 40, 0.25
    Ns, Bs, real, shifted, sigma, dense, exact, counts = krylov_inputs(sizes, width, tau,
                                                                       seed=5)
    m = len(sizes)
    block = min(int(geneo._subspace_size(np.int64(counts.max()), 48)), min(sizes))
    assert block >= counts.max()  # every block can find all its eigenvalues
    assert geneo.KRYLOV_RETIRE is True  # the documented default retires
    active = []  # the blocks the stopping rule sees at each step
    rule = geneo._pending
    monkeypatch.setattr(geneo, "_pending", lambda lam, *a, **k: (
        active.append(lam.shape[0]), rule(lam, *a, **k))[1])

    def run(retire):
        monkeypatch.setattr(geneo, "KRYLOV_RETIRE", retire)
        active.clear()
        out = geneo._block_krylov_eigh(shifted, Ns, Bs, m, width, block, tau, real, 48,
                                       counts, sigma)
        return out, list(active)

    (lam, V, its, drift), seen = run(True)
    assert seen[0] == m and min(seen) < m  # some retired before the last
    assert its < geneo.GENEO_MAX_ITERATIONS  # stopped by the rule, not the limit
    (lam0, _, its0, _), seen0 = run(False)
    assert set(seen0) == {m} and its == its0  # without: all to the end, as many solves
    assert not drift.any()
    np.testing.assert_array_equal((lam < tau).sum(axis=1), (lam0 < tau).sum(axis=1))
    assert_pairs_of_dense_pencils(lam, V, exact, dense, sizes, tau)
