"""Spectral facts about the model problem: eigenvalues and best low-rank errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from ._validation import check_int

__all__ = ["toeplitz_tridiagonal_eigenvalues", "inverse_eigenvalues", "best_rank_error"]

#: Largest matrix whose eigenvalues :func:`inverse_eigenvalues` computes densely
#: when no closed form applies.
DENSE_EIG_LIMIT = 8192


def toeplitz_tridiagonal_eigenvalues(A: Any) -> np.ndarray | None:
    """Closed-form eigenvalues of a symmetric tridiagonal Toeplitz matrix, else None.

    For ``A = tridiag(b, a, b)`` of size ``m`` the eigenvalues are
    ``a + 2 b cos(k pi / (m + 1))``, ``k = 1..m`` (the 1D Poisson matrix is of
    this form).
    """
    A = sp.csr_matrix(A)
    m = A.shape[0]
    dia = sp.dia_matrix(A)
    offsets = set(int(o) for o in dia.offsets if np.any(A.diagonal(int(o)) != 0))
    if not offsets <= {-1, 0, 1}:
        return None
    a = A.diagonal(0)
    b = A.diagonal(1) if m > 1 else np.zeros(0)
    c = A.diagonal(-1) if m > 1 else np.zeros(0)
    if np.any(a != a[0]) or (m > 1 and (np.any(b != b[0]) or np.any(c != b[0]))):
        return None
    bb = b[0] if m > 1 else 0.0
    k = np.arange(1, m + 1)
    return a[0] + 2.0 * bb * np.cos(k * np.pi / (m + 1))


def inverse_eigenvalues(A: Any) -> np.ndarray:
    """Eigenvalues of ``A^{-1}`` for a symmetric nonsingular ``A``, in decreasing magnitude."""
    if not sp.issparse(A) and not isinstance(A, np.ndarray):
        raise TypeError(f"A must be a sparse matrix or an array, got {type(A).__name__}")
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"A must be square, got shape {A.shape}")
    lam = toeplitz_tridiagonal_eigenvalues(A)
    if lam is None:
        if A.shape[0] > DENSE_EIG_LIMIT:
            raise ValueError(
                f"A of size {A.shape[0]} has no closed-form spectrum and is above the dense "
                f"eigenvalue limit {DENSE_EIG_LIMIT}"
            )
        dense = A.toarray() if sp.issparse(A) else np.asarray(A)
        if not np.allclose(dense, dense.T, rtol=1e-12, atol=0):
            raise ValueError("A must be symmetric")
        lam = np.linalg.eigvalsh(dense)
    if np.any(lam == 0) or not np.all(np.isfinite(lam)):
        raise ValueError("A must be nonsingular with finite entries")
    mu = 1.0 / lam
    return mu[np.argsort(-np.abs(mu), kind="stable")]


def best_rank_error(A: Any, r: int) -> float:
    """Frobenius error of the best rank-``r`` approximation of ``A^{-1}``.

    By Eckart-Young (the paper's Theorem 1) it is the 2-norm of the discarded
    eigenvalues of the symmetric ``A^{-1}``: ``(sum_{k > r} mu_k^2)^{1/2}`` with
    ``|mu_1| >= |mu_2| >= ...``.  Closed form for the 1D Poisson matrix,
    dense eigenvalues otherwise.

    Parameters
    ----------
    A : sparse matrix or array
        Symmetric nonsingular matrix.
    r : int
        Rank, ``0 <= r``.
    """
    r = check_int("r", r, minimum=0)
    mu = inverse_eigenvalues(A)
    tail = mu[r:]
    return float(np.sqrt(np.sum(tail[::-1] ** 2)))
