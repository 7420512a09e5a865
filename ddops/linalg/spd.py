"""Whether a symmetric matrix is positive definite, read from its Cholesky-type factorisation.

Every exact solver of ddops factorises a matrix it needs to be symmetric positive definite
(SPD): the local and interior blocks, the coarse matrix, the GenEO pencils.  A
factorisation that succeeds is not yet a proof: SuperLU pivots off the diagonal when a
diagonal entry is too small, and then the diagonal of its ``U`` can be positive for an
indefinite matrix; and a positive pivot can be a rounding-size remainder of a singular
matrix.  The checks here are the one rule all of them apply:

* a sparse matrix is factorised by SuperLU with a symmetric ordering and diagonal pivots
  (:func:`superlu_spd`: an ``LDL^T`` factorisation in effect), and it is accepted as SPD
  only if SuperLU kept the pivots on the diagonal (``perm_r == perm_c``) and every pivot
  ``d_k`` passes :func:`bad_pivots`;
* a dense matrix (or a stack of them) is factorised by Cholesky (numpy), and accepted when
  the factorisation succeeds and every squared diagonal entry of ``L`` passes
  :func:`bad_pivots`.

:func:`bad_pivots` refuses a pivot that is not positive, or not larger than
:data:`SINGULAR_PIVOT_RTOL` times its diagonal entry (the diagonally scaled matrix would
have a condition number above about ``1e12``), and a non-positive diagonal entry.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

__all__ = [
    "SINGULAR_PIVOT_RTOL",
    "SUPERLU_PANEL_SIZE",
    "bad_pivots",
    "superlu_spd",
    "off_diagonal_pivots",
    "superlu_pivots",
    "sparse_spd_factor",
    "dense_spd_cholesky",
    "dense_spd_blocks_ok",
]

#: A Cholesky pivot below this fraction of its diagonal entry marks a block as
#: numerically singular (condition number of the diagonally scaled block above 1e12).
SINGULAR_PIVOT_RTOL = 1e-12

#: SuperLU's panel size (its default is 10): 15-25% faster on Poisson subdomains.
SUPERLU_PANEL_SIZE = 4


def bad_pivots(pivots: np.ndarray, diagonal: np.ndarray,
               rtol: float = SINGULAR_PIVOT_RTOL) -> np.ndarray:
    """Mask of Cholesky pivots that are not safely positive relative to their diagonal.

    Pivot ``d_k`` (of ``LDL^T``, or ``L_kk^2`` of ``L L^T``) is bad when it is not positive
    (NaN included), when the diagonal entry ``a_kk`` is not positive, or when
    ``d_k / a_kk <= rtol``.  Works elementwise on arrays of any shape.
    """
    pivots = np.asarray(pivots, dtype=np.float64)
    diagonal = np.asarray(diagonal, dtype=np.float64)
    ok = (pivots > 0) & (diagonal > 0)
    ratio = np.divide(pivots, diagonal, out=np.zeros(np.broadcast(pivots, diagonal).shape),
                      where=ok)
    return ~ok | (ratio <= rtol)


def superlu_spd(K: sp.spmatrix, dtype: Any = np.float64):
    """SuperLU of an SPD matrix: symmetric ordering, diagonal pivots (a Cholesky in effect).

    ``MMD_AT_PLUS_A`` (minimum degree on ``A + A^T``) is the ordering: on the local
    matrices of 2D Poisson at 10^6 unknowns it gives 26 M nonzeros in ``L + U``
    against 42 M for ``COLAMD`` (and a METIS nested dissection of each chunk 30 M).
    Raises RuntimeError ("Factor is exactly singular") as ``scipy.sparse.linalg.splu``.
    Nothing is checked here: see :func:`ddops.linalg.spd.sparse_spd_factor`.
    """
    return spla.splu(sp.csc_matrix(K).astype(dtype, copy=False), permc_spec="MMD_AT_PLUS_A",
                     diag_pivot_thresh=0.0, panel_size=SUPERLU_PANEL_SIZE,
                     options={"SymmetricMode": True})


def off_diagonal_pivots(lu: Any) -> np.ndarray:
    """Original indices ``k`` whose row and column SuperLU moved apart (``perm_r[k] != perm_c[k]``).

    Empty when SuperLU pivoted on the diagonal only; any entry means it had to pivot off
    the diagonal, which a symmetric positive definite matrix never needs.
    """
    return np.flatnonzero(lu.perm_r != lu.perm_c)


def superlu_pivots(lu: Any) -> np.ndarray:
    """The ``LDL^T`` pivots of a diagonally pivoted SuperLU factor, in the original order.

    The pivot of original index ``k`` sits at position ``perm_c[k]`` of ``U``'s diagonal.
    Reading ``lu.U`` makes scipy keep CSC copies of the factors for the lifetime of ``lu``.
    """
    return lu.U.diagonal()[lu.perm_c].astype(np.float64)


def sparse_spd_factor(K: sp.spmatrix, dtype: Any = np.float64, *, check_pivots: bool = True,
                      rtol: float = SINGULAR_PIVOT_RTOL):
    """SuperLU of a symmetric matrix and the indices where it fails the SPD test.

    Parameters
    ----------
    K : sparse matrix
        Square and symmetric.
    dtype : {numpy.float64, numpy.float32}
        Precision of the factors.
    check_pivots : bool
        Read the pivots (:func:`superlu_pivots`) and test them by :func:`bad_pivots`
        against ``K``'s diagonal.  With False only the pivoting is checked (no copies of
        the factors; the caller tests the factor some other way).
    rtol : float
        See :func:`bad_pivots`.

    Returns
    -------
    lu : scipy.sparse.linalg.SuperLU or None
        The factorisation (:func:`superlu_spd`), or None when SuperLU met an exactly zero
        pivot (then ``bad`` is None too).
    bad : numpy.ndarray or None
        Sorted original indices: those of :func:`off_diagonal_pivots` when SuperLU pivoted
        off the diagonal (the pivots are then not ``K``'s), else those of the bad pivots
        (``check_pivots``; empty otherwise).  Empty exactly when ``K`` passed.
    """
    try:
        lu = superlu_spd(K, dtype)
    except RuntimeError:  # "Factor is exactly singular"
        return None, None
    off = off_diagonal_pivots(lu)
    if off.size or not check_pivots:
        return lu, off
    diagonal = np.asarray(sp.csr_matrix(K).diagonal(), dtype=np.float64)
    return lu, np.flatnonzero(bad_pivots(superlu_pivots(lu), diagonal, rtol))


def dense_spd_cholesky(M: np.ndarray, rtol: float = SINGULAR_PIVOT_RTOL):
    """Cholesky factors of a dense matrix or a stack of them, and which ones are SPD.

    One batched ``numpy.linalg.cholesky``; only when it fails (some matrix is not
    positive definite) are the matrices factorised one by one to tell which.  A matrix
    is accepted when its factorisation succeeds and every squared diagonal entry of ``L``
    passes :func:`bad_pivots` against the matrix's diagonal.  Like numpy, only the lower
    triangle is read: symmetry is the caller's to check.

    Parameters
    ----------
    M : numpy.ndarray
        ``(..., p, p)``.
    rtol : float
        See :func:`bad_pivots`.

    Returns
    -------
    L : numpy.ndarray
        ``(..., p, p)`` lower-triangular factors; NaN for a matrix whose factorisation
        failed.
    ok : numpy.ndarray of bool
        Shape ``M.shape[:-2]`` (a 0-d array for a single matrix).
    """
    M = np.asarray(M, dtype=np.float64)
    try:
        L = np.linalg.cholesky(M)
    except np.linalg.LinAlgError:
        stack = M.reshape(-1, *M.shape[-2:])
        L = np.full(stack.shape, np.nan)
        for i, block in enumerate(stack):  # the error path only: which ones fail
            try:
                L[i] = np.linalg.cholesky(block)
            except np.linalg.LinAlgError:
                pass
        L = L.reshape(M.shape)
    pivots = np.diagonal(L, axis1=-2, axis2=-1) ** 2
    ok = ~bad_pivots(pivots, np.diagonal(M, axis1=-2, axis2=-1), rtol).any(axis=-1)
    return L, np.asarray(ok)


def dense_spd_blocks_ok(blocks: np.ndarray, rtol: float = SINGULAR_PIVOT_RTOL) -> np.ndarray:
    """Which matrices of a ``(N, p, p)`` stack are numerically SPD (:func:`dense_spd_cholesky`)."""
    return dense_spd_cholesky(blocks, rtol)[1]
