"""Spectral helpers on matrices that are not SPD, not symmetric, singular or odd-shaped.

Symmetric indefinite matrices are handled (the best rank-r error of A^{-1}
against numpy's SVD); non-symmetric, singular, complex, non-finite or empty
ones are refused with a ValueError or TypeError naming ``A``.
"""

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given
from hypothesis import strategies as st

from ddops import best_rank_error, poisson_1d
from ddops.learning.spectral import (
    SYMMETRY_RTOL,
    inverse_eigenvalues,
    toeplitz_tridiagonal_eigenvalues,
)


def svd_tail(A, r):
    """The Eckart-Young error of inv(A) from numpy's SVD (no symmetry assumed)."""
    s = np.linalg.svd(np.linalg.inv(np.asarray(A, dtype=float)), compute_uv=False)
    return float(np.sqrt(np.sum(s[r:] ** 2)))


def random_symmetric_indefinite(m, seed):
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((m, m)))
    lam = rng.uniform(0.5, 3.0, m) * rng.choice([-1.0, 1.0], m)
    lam[0], lam[-1] = 2.0, -1.5  # both signs present
    A = (Q * lam) @ Q.T
    return 0.5 * (A + A.T), lam


@given(st.integers(2, 30), st.integers(0, 2**16), st.integers(0, 35), st.booleans())
def test_symmetric_indefinite_matches_svd(m, seed, r, sparse):
    A, lam = random_symmetric_indefinite(m, seed)
    given_A = sp.csr_matrix(A) if sparse else A
    mu = inverse_eigenvalues(given_A)
    # the eigenvalues of A^{-1}, signs kept, ordered by decreasing magnitude
    np.testing.assert_allclose(np.sort(mu), np.sort(1.0 / lam), rtol=1e-10)
    assert np.all(np.diff(np.abs(mu)) <= 1e-12 * np.abs(mu).max())
    assert best_rank_error(given_A, r) == pytest.approx(svd_tail(A, r), rel=1e-9, abs=1e-13)


@pytest.mark.parametrize("a,b,m", [(0.3, 1.0, 9), (-2.0, 1.0, 12), (0.0, 1.0, 10), (5.0, 0.0, 4),
                                   (-3.0, -1.0, 7), (2.0, -1.0, 1)])
def test_closed_form_for_indefinite_toeplitz(a, b, m):
    A = sp.diags([np.full(m - 1, b), np.full(m, a), np.full(m - 1, b)], [-1, 0, 1])
    lam = toeplitz_tridiagonal_eigenvalues(A)
    np.testing.assert_allclose(np.sort(lam), np.linalg.eigvalsh(A.toarray()), rtol=1e-12,
                               atol=1e-12 * (abs(a) + 2 * abs(b)))
    for r in (0, 1, m // 2, m):
        assert best_rank_error(A, r) == pytest.approx(svd_tail(A.toarray(), r), rel=1e-9,
                                                      abs=1e-14)


def test_negative_definite_and_integer_matrices():
    A = -poisson_1d(20)
    assert best_rank_error(A, 3) == pytest.approx(svd_tail(A.toarray(), 3), rel=1e-10)
    T = sp.diags([-np.ones(9, int), 2 * np.ones(10, int), -np.ones(9, int)], [-1, 0, 1],
                 dtype=np.int64)
    assert T.dtype.kind == "i"
    assert best_rank_error(T, 2) == pytest.approx(svd_tail(T.toarray(), 2), rel=1e-10)
    D = np.array([[2, 1, 0], [1, -3, 1], [0, 1, 4]])
    assert best_rank_error(D, 1) == pytest.approx(svd_tail(D, 1), rel=1e-10)


@pytest.mark.parametrize("A", [
    np.array([[2.0, 1.0], [0.0, 3.0]]),                                 # triangular
    sp.diags([np.ones(5), np.full(6, 4.0), np.full(5, 2.0)], [-1, 0, 1]),  # Toeplitz, b != c
    sp.random(12, 12, density=0.4, random_state=0) + sp.identity(12),
    poisson_1d(16) + sp.csr_matrix(([1e-3], ([0], [5])), shape=(15, 15)),
], ids=["triangular", "toeplitz_b_ne_c", "random_sparse", "poisson_plus_one_entry"])
def test_non_symmetric_is_refused(A):
    assert toeplitz_tridiagonal_eigenvalues(A) is None
    with pytest.raises(ValueError, match="A must be symmetric"):
        inverse_eigenvalues(A)
    with pytest.raises(ValueError, match="A must be symmetric"):
        best_rank_error(A, 1)


@pytest.mark.parametrize("factor,accepted", [(0.5, True), (2.0, False)])
def test_symmetry_tolerance_from_both_sides(factor, accepted):
    A, _ = random_symmetric_indefinite(8, 3)
    B = A.copy()
    B[2, 5] = A[5, 2] * (1 + factor * SYMMETRY_RTOL)
    if not accepted:
        with pytest.raises(ValueError, match="A must be symmetric"):
            inverse_eigenvalues(B)
        return
    # accepted, and computed from the symmetric part (not from one triangle)
    sym = 0.5 * (B + B.T)
    np.testing.assert_allclose(np.sort(inverse_eigenvalues(B)),
                               np.sort(1.0 / np.linalg.eigvalsh(sym)), rtol=1e-13)


@pytest.mark.parametrize("A", [
    np.zeros((3, 3)),
    np.array([[1.0, 1.0], [1.0, 1.0]]),
    (lambda B: B @ B.T)(np.random.default_rng(0).standard_normal((6, 3))),  # rank 3 of 6
    sp.diags([np.ones(4), np.zeros(5), np.ones(4)], [-1, 0, 1]),  # closed form, eigenvalue 0
], ids=["zero", "ones", "low_rank", "toeplitz_zero_eigenvalue"])
def test_singular_is_refused(A):
    with pytest.raises(ValueError, match="A must be nonsingular"):
        inverse_eigenvalues(A)


@pytest.mark.parametrize("A,exc,match", [
    ("[[1, 0], [0, 1]]", TypeError, r"A must be a sparse matrix \(scipy.sparse\) or a 2-D"),
    (np.ones((2, 3)), ValueError, "A must be square"),
    (np.ones(4), ValueError, "A must be 2-D"),
    (np.zeros((0, 0)), ValueError, "A must have at least one row"),
    (np.eye(3) * 1j, TypeError, "A must be real"),
    (np.array([[1.0, np.nan], [np.nan, 1.0]]), ValueError, "A contains NaN or inf"),
    (sp.diags([np.inf, 1.0]), ValueError, "A contains NaN or inf"),
    (np.eye(3).astype(object), TypeError, r"A must be a sparse matrix \(scipy.sparse\)"),
])
def test_bad_matrices_name_the_argument(A, exc, match):
    with pytest.raises(exc, match=match):
        inverse_eigenvalues(A)
    if not isinstance(A, list):
        with pytest.raises(exc, match=match):
            toeplitz_tridiagonal_eigenvalues(A)


def test_bad_rank_names_r():
    with pytest.raises(ValueError, match="r must be >= 0"):
        best_rank_error(poisson_1d(8), -1)
    with pytest.raises(TypeError, match="r must be an integer"):
        best_rank_error(poisson_1d(8), 1.5)
    assert best_rank_error(poisson_1d(8), 100) == 0.0  # every eigenvalue kept


def test_explicit_zeros_on_far_diagonals_keep_the_closed_form():
    P = poisson_1d(12).tocoo()
    A = sp.csr_matrix((np.r_[P.data, 0.0, 0.0], (np.r_[P.row, 0, 9], np.r_[P.col, 7, 1])),
                      shape=P.shape)
    assert A.nnz == P.nnz + 2  # the explicit zeros are stored
    lam = toeplitz_tridiagonal_eigenvalues(A)
    np.testing.assert_allclose(np.sort(lam), np.linalg.eigvalsh(A.toarray()), rtol=1e-12)


def test_scattered_diagonals_are_not_expanded():
    """Finding the diagonals must not build a DIA copy (one length-m array per diagonal)."""
    m, k = 20000, 1000
    rng = np.random.default_rng(0)
    rows = rng.integers(0, m // 2, k)
    offsets = rng.choice(np.arange(2, m // 2), size=k, replace=False)
    A = sp.csr_matrix((np.ones(k), (rows, rows + offsets)), shape=(m, m)) + sp.identity(m)
    tracemalloc.start()
    try:
        assert toeplitz_tridiagonal_eigenvalues(A) is None
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * m * 8, peak  # a few length-m arrays, not k of them
    with pytest.raises(ValueError, match="above the dense eigenvalue limit"):
        best_rank_error(A + A.T, 3)
