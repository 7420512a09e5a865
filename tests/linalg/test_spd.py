"""The SPD test of ddops.linalg.spd against independent constructions: the eigenvalues of
small dense matrices (numpy), closed-form pivots, and matrices built to make SuperLU pivot
off the diagonal."""

import numpy as np
import pytest
import scipy.sparse as sp

from ddops.linalg import local_solvers
from ddops.linalg.spd import (
    SINGULAR_PIVOT_RTOL,
    bad_pivots,
    dense_spd_blocks_ok,
    dense_spd_cholesky,
    off_diagonal_pivots,
    sparse_spd_factor,
    superlu_pivots,
)


def _accepted(K):
    lu, bad = sparse_spd_factor(sp.csr_matrix(K))
    return lu is not None and bad.size == 0


def _random_spd(n, seed, shift=1.0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, n))
    return X @ X.T + shift * np.eye(n)


def _with_eigenvalues(eigenvalues, seed):
    """``Q diag(eigenvalues) Q^T`` with a random orthogonal ``Q``."""
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((len(eigenvalues), len(eigenvalues))))
    M = Q @ np.diag(eigenvalues) @ Q.T
    return 0.5 * (M + M.T)


def _swapped_pairs(m):
    """Pairs of swapped rows: zero diagonal, eigenvalues +1 and -1."""
    pairs = np.arange(0, m, 2)
    return sp.csr_matrix((np.ones(2 * pairs.size), (np.r_[pairs, pairs + 1],
                                                    np.r_[pairs + 1, pairs])), shape=(m, m))


# -- bad_pivots ----------------------------------------------------------------------------------
def test_bad_pivots_refuses_non_positive_tiny_and_nan_pivots():
    diagonal = np.array([2.0, 2.0, 2.0, 2.0, 2.0, 2.0, -1.0, 0.0])
    pivots = np.array([1.0, 4e-12, 2e-12, 0.0, -1.0, np.nan, 1.0, 1.0])
    np.testing.assert_array_equal(bad_pivots(pivots, diagonal),
                                  [False, False, True, True, True, True, True, True])
    assert SINGULAR_PIVOT_RTOL == 1e-12
    # a looser tolerance refuses more
    assert bad_pivots(np.array([1e-6]), np.array([1.0]), rtol=1e-5).all()
    assert not bad_pivots(np.array([1e-6]), np.array([1.0])).any()


# -- sparse: SuperLU ------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(3))
def test_an_spd_matrix_is_accepted_and_its_factor_solves(seed):
    K = _random_spd(12, seed)
    assert np.linalg.eigvalsh(K).min() > 0
    lu, bad = sparse_spd_factor(sp.csr_matrix(K))
    assert lu is not None and bad.size == 0
    assert off_diagonal_pivots(lu).size == 0
    b = np.arange(12.0)
    np.testing.assert_allclose(lu.solve(b), np.linalg.solve(K, b), rtol=1e-10)
    # the pivots in original order: their product is the determinant
    np.testing.assert_allclose(np.prod(superlu_pivots(lu)), np.linalg.det(K), rtol=1e-8)


@pytest.mark.parametrize("seed", range(3))
def test_an_indefinite_matrix_with_a_positive_diagonal_is_refused(seed):
    M = _with_eigenvalues([3.0, 2.0, 1.5, 1.0, 0.5, -0.4], seed)
    assert np.linalg.eigvalsh(M).min() < 0 and M.diagonal().min() > 0
    lu, bad = sparse_spd_factor(sp.csr_matrix(M))
    assert lu is None or bad.size > 0
    assert not _accepted(M)


def test_the_two_by_two_indefinite_matrix_names_its_bad_pivot():
    K = np.array([[1.0, 2.0], [2.0, 1.0]])  # eigenvalues 3 and -1; pivots 1 and -3
    lu, bad = sparse_spd_factor(sp.csr_matrix(K))
    np.testing.assert_allclose(np.sort(superlu_pivots(lu)), [-3.0, 1.0])
    assert bad.size == 1


def test_exactly_and_numerically_singular_matrices_are_refused():
    exact = np.array([[1.0, 1.0], [1.0, 1.0]])
    lu, bad = sparse_spd_factor(sp.csr_matrix(exact))
    assert lu is None and bad is None
    # the path Laplacian with free ends (the constants are its kernel): exactly singular in
    # integers, and with a random symmetric scaling D T D singular up to rounding, where
    # SuperLU's last pivot comes out a rounding-size positive number
    n = 40
    T = sp.diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1]).tolil()
    T[0, 0] = T[-1, -1] = 1.0
    assert sparse_spd_factor(T.tocsr()) == (None, None)
    D = sp.diags(np.random.default_rng(2).uniform(0.5, 2.0, n))
    K = (D @ T @ D).tocsr()
    assert np.linalg.eigvalsh(K.toarray()).min() < 1e-12 * abs(K).max()
    lu, bad = sparse_spd_factor(K)
    pivots = superlu_pivots(lu)
    assert 0 < pivots.min() < 1e-12 * K.diagonal().max()  # positive: the tolerance refuses it
    np.testing.assert_array_equal(bad, [np.argmin(pivots)])


@pytest.mark.parametrize("eps,accepted", [(1e-14, False), (1e-9, True)])
def test_the_relative_pivot_tolerance(eps, accepted):
    """``Q diag(1, eps) Q^T`` with Q the 45-degree rotation has the diagonal ``(1 + eps) / 2``
    and the second pivot ``2 eps / (1 + eps)``: their ratio ``4 eps / (1 + eps)^2`` is below
    1e-12 for eps = 1e-14 (refused although positive definite) and above for 1e-9."""
    c = np.sqrt(0.5)
    Q = np.array([[c, -c], [c, c]])
    K = Q @ np.diag([1.0, eps]) @ Q.T
    K = 0.5 * (K + K.T)
    assert np.linalg.eigvalsh(K).min() > 0
    assert _accepted(K) is accepted
    assert bool(dense_spd_cholesky(K)[1]) is accepted


def test_a_matrix_superlu_pivots_off_the_diagonal_is_refused_by_its_pivoting():
    """Swapped pairs of rows: SuperLU must leave the (zero) diagonal, and its U then has a
    positive diagonal, so pivots alone would accept this indefinite matrix."""
    J = _swapped_pairs(6)
    assert np.linalg.eigvalsh(J.toarray()).min() == pytest.approx(-1.0)
    lu, bad = sparse_spd_factor(J)
    assert lu is not None
    off = off_diagonal_pivots(lu)
    assert off.size > 0
    np.testing.assert_array_equal(bad, off)
    assert np.all(lu.U.diagonal() > 0)  # what a pivot-only test would see
    # without reading the pivots the pivoting alone refuses it
    assert sparse_spd_factor(J, check_pivots=False)[1].size > 0


def test_superlu_chunk_names_only_the_bad_block():
    """A block-diagonal matrix of three SPD blocks and one indefinite one with a positive
    diagonal: only the indefinite block's label comes back, on both tests of a chunk."""
    good = [_random_spd(5, s) for s in range(3)]
    bad_block = _with_eigenvalues([2.0, 1.0, 1.0, 0.5, -0.3], 7)
    assert bad_block.diagonal().min() > 0
    K = sp.block_diag([good[0], good[1], bad_block, good[2]], format="csr")
    labels = np.repeat(np.arange(4), 5)
    for exact in (True, False):
        lu, bad = local_solvers.superlu_chunk(K, labels, exact, np.float64)
        assert lu is not None
        np.testing.assert_array_equal(bad, [2])
    lu, bad = local_solvers.superlu_chunk(sp.block_diag(good, format="csr"),
                                          np.repeat(np.arange(3), 5), True, np.float64)
    assert bad.size == 0


# -- dense: Cholesky ------------------------------------------------------------------------------
def test_dense_blocks():
    c = np.sqrt(0.5)
    Q = np.array([[c, -c], [c, c]])
    blocks = np.stack([
        _random_spd(2, 0),                              # SPD
        np.array([[1.0, 2.0], [2.0, 1.0]]),             # indefinite, positive diagonal
        np.array([[1.0, 1.0], [1.0, 1.0]]),             # singular
        Q @ np.diag([1.0, 1e-15]) @ Q.T,                # numerically singular
        _random_spd(2, 1),                              # SPD
    ])
    expected = np.linalg.eigvalsh(blocks).min(axis=1) > 1e-10 * np.abs(blocks).max(axis=(1, 2))
    np.testing.assert_array_equal(expected, [True, False, False, False, True])
    np.testing.assert_array_equal(dense_spd_blocks_ok(blocks), expected)
    L, ok = dense_spd_cholesky(blocks)
    np.testing.assert_array_equal(ok, expected)
    for i in np.flatnonzero(expected):
        np.testing.assert_allclose(L[i] @ L[i].T, blocks[i], rtol=1e-12, atol=1e-14)
    assert np.isnan(L[1]).all()  # a failed factorisation is not returned as a factor
    # all SPD: one batched factorisation, the same factors
    L2, ok2 = dense_spd_cholesky(blocks[[0, 4]])
    assert ok2.all()
    np.testing.assert_allclose(L2, L[[0, 4]])


def test_dense_single_matrix():
    K = _random_spd(6, 3)
    L, ok = dense_spd_cholesky(K)
    assert ok.shape == () and bool(ok)
    np.testing.assert_allclose(L, np.linalg.cholesky(K))
    M = _with_eigenvalues([1.0, 1.0, 1.0, 1.0, 1.0, -0.5], 4)
    assert M.diagonal().min() > 0
    assert not bool(dense_spd_cholesky(M)[1])
