"""Spectral facts about the model problem: eigenvalues and best low-rank errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from .._validation import as_matrix, check_finite, check_int

__all__ = ["toeplitz_tridiagonal_eigenvalues", "inverse_eigenvalues", "best_rank_error"]

#: Largest matrix whose eigenvalues :func:`inverse_eigenvalues` computes densely
#: when no closed form applies.
DENSE_EIG_LIMIT = 8192

#: ``A`` counts as symmetric when ``|A_ij - A_ji| <= SYMMETRY_RTOL |A_ji|`` for
#: every entry (:func:`numpy.allclose` without absolute tolerance); it is then
#: symmetrised as ``(A + A^T) / 2`` before the eigenvalues are computed.
SYMMETRY_RTOL = 1e-12


def _check_matrix(A: Any, name: str = "A") -> Any:
    """Raise unless ``A`` meets the package's matrix contract
    (:func:`ddops._validation.as_matrix`: real, finite, nonempty, square); ``A`` itself is
    returned (a dense array stays dense for the eigensolvers)."""
    if sp.issparse(A) or isinstance(A, np.ndarray):
        if A.ndim == 2 and A.shape[0] == A.shape[1] and A.shape[0] > 0 \
                and A.dtype.kind in "fiub":
            check_finite(name, A.data if sp.issparse(A) else A)
            return A
    return as_matrix(A, name)[0]  # the package's message for whatever is wrong, or CSR


def toeplitz_tridiagonal_eigenvalues(A: Any) -> np.ndarray | None:
    """Closed-form eigenvalues of a symmetric tridiagonal Toeplitz matrix, else None.

    For ``A = tridiag(b, a, b)`` of size ``m`` the eigenvalues are
    ``a + 2 b cos(k pi / (m + 1))``, ``k = 1..m`` (the 1D Poisson matrix is of
    this form).  Any other matrix, a non-symmetric ``tridiag(c, a, b)``
    included, gives None.

    Raises
    ------
    TypeError, ValueError
        ``A`` is not a real, finite, nonempty square matrix.
    """
    A = _check_matrix(A)
    m = A.shape[0]
    # the diagonals that hold nonzeros, from the entries themselves (a DIA copy of a
    # matrix with scattered entries would hold one length-m array per diagonal)
    coo = sp.coo_matrix(A)
    nonzero = coo.data != 0
    offsets = np.unique(coo.col[nonzero] - coo.row[nonzero])
    if np.any(np.abs(offsets) > 1):
        return None
    A = sp.csr_matrix(A)
    a = A.diagonal(0)
    b = A.diagonal(1)
    c = A.diagonal(-1)
    if np.any(a != a[0]) or (m > 1 and (np.any(b != b[0]) or np.any(c != b[0]))):
        return None
    bb = float(b[0]) if m > 1 else 0.0
    k = np.arange(1, m + 1)
    return float(a[0]) + 2.0 * bb * np.cos(k * np.pi / (m + 1))


def inverse_eigenvalues(A: Any) -> np.ndarray:
    """Eigenvalues of ``A^{-1}`` for a symmetric nonsingular ``A``, in decreasing magnitude.

    ``A`` may be indefinite.  A non-symmetric ``A`` (beyond
    :data:`SYMMETRY_RTOL`) is refused: its inverse's singular values are not
    the magnitudes of its eigenvalues.

    Raises
    ------
    TypeError
        ``A`` is not an array or sparse matrix, or not real.
    ValueError
        ``A`` is not square, empty, not finite, not symmetric, numerically
        singular (an eigenvalue within rounding of zero: ``m eps max |lambda|``
        for dense eigenvalues, a few ``eps (|a| + 2 |b|)`` for the closed
        form), or without closed form and above :data:`DENSE_EIG_LIMIT`.
    """
    A = _check_matrix(A)
    m = A.shape[0]
    eps = np.finfo(np.float64).eps
    lam = toeplitz_tridiagonal_eigenvalues(A)
    if lam is not None:
        # a + 2 b cos(.) is accurate to a few eps (|a| + 2 |b|) whatever the size
        csr = sp.csr_matrix(A)
        b = float(csr.diagonal(1)[0]) if m > 1 else 0.0
        tol = 8 * eps * (abs(float(csr.diagonal(0)[0])) + 2 * abs(b))
    else:
        if m > DENSE_EIG_LIMIT:
            raise ValueError(
                f"A of size {m} has no closed-form spectrum and is above the dense "
                f"eigenvalue limit {DENSE_EIG_LIMIT}"
            )
        dense = A.toarray() if sp.issparse(A) else np.asarray(A)
        dense = dense.astype(np.float64)
        if not np.allclose(dense, dense.T, rtol=SYMMETRY_RTOL, atol=0):
            asym = float(np.abs(dense - dense.T).max())
            raise ValueError(f"A must be symmetric, got max |A - A^T| = {asym:.3e} "
                             f"(max |A| = {float(np.abs(dense).max()):.3e})")
        lam = np.linalg.eigvalsh(0.5 * (dense + dense.T))
        tol = m * eps * float(np.abs(lam).max())  # the rank tolerance of numpy.linalg.matrix_rank
    scale = float(np.abs(lam).max())
    if scale == 0 or np.any(np.abs(lam) <= tol):
        low = float(np.abs(lam).min())
        raise ValueError(f"A must be nonsingular, got an eigenvalue of magnitude {low:.3e} "
                         f"against max {scale:.3e}")
    mu = 1.0 / lam
    return mu[np.argsort(-np.abs(mu), kind="stable")]


def best_rank_error(A: Any, r: int) -> float:
    """Frobenius error of the best rank-``r`` approximation of ``A^{-1}``.

    By Eckart-Young (the paper's Theorem 1) it is the 2-norm of the discarded
    singular values of ``A^{-1}``, which for a symmetric ``A`` are the
    magnitudes of its eigenvalues: ``(sum_{k > r} mu_k^2)^{1/2}`` with
    ``|mu_1| >= |mu_2| >= ...``.  Closed form for the 1D Poisson matrix,
    dense eigenvalues otherwise.

    Parameters
    ----------
    A : sparse matrix or array
        Symmetric nonsingular matrix (positive definite or not).
    r : int
        Rank, ``0 <= r``; ranks above the size give 0.

    Raises
    ------
    ValueError
        See :func:`inverse_eigenvalues`; ``r`` negative.
    """
    r = check_int("r", r, minimum=0)
    mu = inverse_eigenvalues(A)
    tail = mu[r:]
    return float(np.sqrt(np.sum(tail[::-1] ** 2)))
