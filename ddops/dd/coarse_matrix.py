"""The Galerkin coarse matrix ``Phi^T A Phi``: checked for full rank, and cleaned of dependence.

A coarse basis ``Phi`` whose columns are (numerically) linearly dependent gives a singular
coarse matrix.  :func:`coarse_matrix_checked` forms ``A_0 = Phi^T A Phi`` and refuses such a
``Phi``, naming the dependent columns; :func:`drop_dependent_columns` removes them instead
(the coarse-space builders call it where functions of different components or subdomains
can depend on each other).  Both measure a column by its pivot in a Cholesky factorisation
of the unit-diagonal scaled coarse matrix: the squared sine of its ``A``-angle to the
columns eliminated before it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp

from .._validation import check_finite, check_memory, check_positive_float
from ..backend import spgemm
from ..linalg.local_solvers import (
    SingularBlockError,
    pardiso_available,
    pardiso_pivots,
    pardiso_schur_complement,
)
from ..linalg.parallel import chunk_workers, one_blas_thread_below
from ..linalg.spd import bad_pivots, off_diagonal_pivots, sparse_spd_factor, superlu_pivots
from .validation import as_csr, check_matrix

__all__ = [
    "SINGULAR_PIVOT_RTOL",
    "DROP_PIVOT_RTOL",
    "DENSE_DROP_MAX",
    "GALERKIN_SPLIT_MIN",
    "SCHUR_BY_SOLVES_MAX",
    "coarse_matrix_checked",
    "drop_dependent_columns",
    "galerkin_matrix",
    "transposed_product",
]

#: :func:`coarse_matrix_checked` flags a column of Phi as dependent when its
#: pivot in the Cholesky factorisation of the unit-diagonal scaled coarse
#: matrix, the squared sine of its A-angle to the columns eliminated before
#: it, is at most this.
SINGULAR_PIVOT_RTOL = 1e-12

#: :func:`drop_dependent_columns` drops a column of Phi whose pivot (the squared sine of its
#: A-angle to the columns eliminated before it) is at most this: 100 times the tolerance of
#: :func:`coarse_matrix_checked`, so that what is kept always passes that check.
DROP_PIVOT_RTOL = 1e-10

#: :func:`drop_dependent_columns` chooses the columns after ``first`` on a Schur complement
#: whose rounding is about ``eps cond(K_kk)`` (``K_kk`` the kept first columns' scaled
#: Galerkin matrix, its condition estimated by the ratio of their pivots): it drops those
#: whose pivot is below this many times that, when that is above ``rtol``.
SCHUR_ROUNDING = 10.0

#: ... unless, where its pivot lies between ``rtol`` and that rounding, the column is
#: independent of the others in the Euclidean inner product: squared sine of its angle to
#: them above this.
EUCLIDEAN_DROP_RTOL = 1e-8

#: :func:`galerkin_matrix` of discrete-harmonic columns forms ``(A Phi)_G`` only where ``Phi``
#: has fewer than this many times ``A``'s entries, else the interior coupling's product (see
#: there).  Measured (``benchmarks/galerkin_product.py``, one thread): the 3D elasticity beam
#: (Phi 2.8 times A's entries) 0.60 -> 0.49 s, in its set-up 1.0-1.7 s -> 0.6 s; 2D and 3D
#: elasticity with stiff inclusions (1.8 and 1.1 times) the same time either way; the scalar
#: problems of the set-up benchmark (0.4-0.7 times) 4-5 ms -> 7-12 ms, and small problems
#: lose the slicing's fixed cost.
GALERKIN_SPLIT_MIN = 2.0

#: :func:`drop_dependent_columns` uses a dense pivoted Cholesky factorisation up to this many
#: coarse functions (about 3 s at 4000 on one core), a sparse one beyond.
DENSE_DROP_MAX = 4000

#: With PARDISO, the Euclidean check of at most this many candidate columns solves with
#: one factorisation of the base columns' Gram matrix instead of forming the Schur
#: complement by PARDISO's partial factorisation (whose fixed cost is larger; a solve per
#: candidate is cheap beside it).
SCHUR_BY_SOLVES_MAX = 32


def transposed_product(P: sp.spmatrix, Q: sp.spmatrix) -> sp.csr_matrix:
    """``P^T Q`` as CSR, with ``P^T`` formed in CSR.

    scipy multiplies ``P.T`` (a CSC view) by a CSR ``Q`` by converting ``Q`` to CSC first: a
    copy of the larger factor (``A Phi``, with a row per unknown and a column per coarse
    function touching it) where transposing ``P`` (``Phi``, or its interface rows) is
    cheaper.  GDSW's ``A_0`` (``benchmarks/galerkin_product.py``, one thread): the
    227,448-unknown 3D elasticity beam 0.75 -> 0.60 s, without the 230 MB CSC copy of
    ``(A Phi)_G``; 1.03-1.28x on the problems of the set-up benchmark.  The product itself
    is :func:`~ddops.backend.spgemm` (scipy's kernel without its count of the entries), on
    the threads the thread limit allows (:func:`~ddops.linalg.parallel.chunk_workers`).
    """
    return spgemm(sp.csr_matrix(P).T.tocsr(), Q, workers=chunk_workers)


def galerkin_matrix(A: sp.spmatrix, Phi: sp.spmatrix, rows: np.ndarray | None = None,
                    product: sp.spmatrix | None = None) -> sp.csr_matrix:
    """``Phi^T A Phi``, symmetrised (exactly symmetric), CSR with sorted indices.

    ``product`` is ``A Phi`` (on ``rows`` where given) where the caller has formed it (the
    hybrid form keeps it): the matrix is then ``Phi^T`` (on those rows) times it.

    With ``rows`` (increasing; where ``A Phi`` can be nonzero: the interface ``G`` of
    discrete-harmonic columns) as ``Phi_G^T (A Phi)_G``, a product with those rows only.  Where
    ``Phi`` has at least :data:`GALERKIN_SPLIT_MIN` times ``A``'s entries (vector problems:
    rigid-body modes on every component), ``(A Phi)_G = A_GG Phi_G + A_GI Phi_I`` is not
    formed: the second term enters as ``(A_IG Phi_G)^T Phi_I`` on the interior rows next to
    the interface (``A`` symmetric), whose left factor holds a few entries per row where
    ``(A Phi)_G`` holds every function of the parts around (the 227,448-unknown 3D
    elasticity beam, GDSW: a 19 M-entry product not formed; ``A_0`` 0.60 -> 0.49 s alone,
    the set-up's coarse assembly 1.0-1.7 s -> 0.6 s).
    """
    A = sp.csr_matrix(A)
    Phi = sp.csr_matrix(Phi)
    if product is not None:
        A0 = transposed_product(Phi if rows is None else Phi[rows], product)
    elif rows is None:
        A0 = transposed_product(Phi, A @ Phi)
    elif Phi.nnz < GALERKIN_SPLIT_MIN * A.nnz:
        A0 = transposed_product(Phi[rows], A[rows] @ Phi)
    else:
        inner = np.ones(A.shape[0], dtype=bool)
        inner[rows] = False
        interior = np.flatnonzero(inner)
        PG = Phi[rows]
        AIG = A[interior][:, rows]
        near = np.flatnonzero(np.diff(AIG.indptr))  # interior rows coupled to G
        A0 = (transposed_product(AIG[near] @ PG, Phi[interior[near]])
              + transposed_product(PG, A[rows][:, rows] @ PG))
    A0 = ((A0 + A0.T) * 0.5).tocsr()
    A0.sum_duplicates()
    A0.sort_indices()
    return A0


def coarse_matrix_checked(A: Any, Phi: Any, *, rtol: float = SINGULAR_PIVOT_RTOL) -> sp.csr_matrix:
    """The Galerkin matrix ``A_0 = Phi^T A Phi`` (sparse), refusing a rank-deficient Phi.

    ``A_0`` is scaled to unit diagonal and factorised by SuperLU with a
    symmetric ordering and diagonal pivots
    (:func:`ddops.linalg.spd.sparse_spd_factor`; shifted by ``rtol / 100`` so an
    exactly dependent column gives a tiny pivot instead of a failure).  The
    pivot of column ``j`` is the squared sine of the A-angle between
    ``phi_j`` and the columns eliminated before it; a pivot at most ``rtol``
    marks ``phi_j`` as a combination of them.

    Parameters
    ----------
    A : sparse matrix or array
        SPD ``n x n``.
    Phi : sparse matrix or array
        ``n x n0`` coarse basis.
    rtol : float
        See :data:`~ddops.dd.coarse_matrix.SINGULAR_PIVOT_RTOL`.

    Returns
    -------
    scipy.sparse.csr_matrix
        ``A_0`` (``n0 x n0``, exactly symmetric).

    Raises
    ------
    ValueError
        Zero columns, or columns that are (numerically) linear combinations of
        others; the message lists them.
    """
    rtol = check_positive_float("rtol", rtol)
    A = check_matrix(A)
    Phi = as_csr("Phi", Phi)
    if Phi.shape[0] != A.shape[0] or Phi.shape[1] < 1:
        raise ValueError(f"Phi must have shape ({A.shape[0]}, n0 >= 1), got {Phi.shape}")
    check_finite("Phi", Phi.data)
    A0 = galerkin_matrix(A, Phi)
    diag = A0.diagonal()
    zero = np.flatnonzero(~(diag > 0))
    if zero.size:
        raise ValueError(f"Phi: column(s) {_listing(zero)} have zero energy phi^T A phi (zero "
                         "columns, or A is not positive definite)")
    s = sp.diags(1.0 / np.sqrt(diag))
    K = (s @ A0 @ s + sp.identity(A0.shape[0]) * (rtol * 1e-2)).tocsc()
    # the pivot of column j against K's diagonal (1 plus the shift): its squared sine
    lu, bad = sparse_spd_factor(K, rtol=rtol)
    if lu is None:  # pragma: no cover - the shift keeps K positive definite
        raise ValueError("Phi: the coarse matrix Phi^T A Phi is singular")
    if off_diagonal_pivots(lu).size:
        raise ValueError("Phi: the coarse matrix Phi^T A Phi is not positive definite")
    if bad.size:
        raise ValueError(f"Phi has linearly dependent columns: column(s) {_listing(bad)} are "
                         f"(up to a squared A-angle of {rtol:g}) combinations of the other "
                         "columns; remove them")
    return A0


def _scaled_coarse(A: sp.csr_matrix, Phi: sp.csr_matrix, rows: np.ndarray | None = None
                   ) -> tuple[sp.csr_matrix, np.ndarray, sp.csr_matrix]:
    """``Phi^T A Phi`` scaled to unit diagonal (zero-energy columns: a unit diagonal), the
    mask of the columns of positive energy and the unscaled (symmetrised) ``Phi^T A Phi``;
    with ``rows`` (where ``A Phi`` can be nonzero) as ``Phi_rows^T (A Phi)_rows``."""
    A0 = galerkin_matrix(A, Phi, rows)
    diag = A0.diagonal()
    pos = diag > 0
    s = sp.diags(np.where(pos, 1.0 / np.sqrt(np.where(pos, diag, 1.0)), 0.0))
    return (s @ A0 @ s + sp.diags((~pos).astype(np.float64))).tocsr(), pos, A0


def _dense_block(K: sp.csr_matrix, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """``K[rows][:, cols]`` as a dense array."""
    return K[rows][:, cols].toarray()


def _schur_on(K: sp.csr_matrix, kept: np.ndarray, rest: np.ndarray) -> np.ndarray | None:
    """The dense Schur complement ``K_rr - K_rk K_kk^{-1} K_kr`` by a Cholesky elimination of
    ``kept`` (symmetrised), or None when ``K_kk`` fails it.

    An elimination, not the product ``K_rk (K_kk^{-1} K_kr)``: positive semidefinite up to
    rounding by construction; either way the rounding grows as ``eps cond(K_kk)``, which
    :func:`drop_dependent_columns` allows for (:data:`SCHUR_ROUNDING`).  With PARDISO it is
    its partial factorisation of the sparse ``K[kept + rest]`` (a coarse function couples
    only with the functions of nearby components and subdomains), without it a dense
    Cholesky factorisation of ``K_kk`` and a triangular solve up to :data:`DENSE_DROP_MAX`
    kept columns, and beyond SuperLU's sparse factorisation of ``K_kk`` (which must pass
    its SPD test) and solves with the rest's columns, ``K_rr - K_rk (K_kk^{-1} K_kr)``
    symmetrised.  The dense blocks are checked against the memory first.
    """
    sparse = not pardiso_available() and kept.size > DENSE_DROP_MAX
    dense = 0 if pardiso_available() else (kept.size if sparse else 2 * kept.size)
    check_memory(f"the Schur complement of {rest.size} coarse columns on {kept.size} others",
                 8 * (dense + rest.size) * rest.size)
    try:
        if not kept.size:
            S = _dense_block(K, rest, rest)
        elif pardiso_available():
            sub = np.concatenate([kept, rest])
            S = pardiso_schur_complement(K[sub][:, sub], np.arange(kept.size, sub.size))
        elif sparse:
            rows = K[kept]
            lu, bad = sparse_spd_factor(rows[:, kept].tocsc())
            if lu is None or bad.size:
                return None
            K_kr = rows[:, rest]
            S = _dense_block(K, rest, rest) - K_kr.T @ lu.solve(K_kr.toarray())
        else:
            rows = K[kept]
            L = sla.cholesky(rows[:, kept].toarray(), lower=True, check_finite=False)
            Y = sla.solve_triangular(L, rows[:, rest].toarray(), lower=True,
                                     check_finite=False)
            S = _dense_block(K, rest, rest) - Y.T @ Y
    except (SingularBlockError, np.linalg.LinAlgError):
        return None  # nearly dependent first columns at the factorisation's limit
    return 0.5 * (S + S.T)


def drop_dependent_columns(A: Any, Phi: Any, *, rtol: float = DROP_PIVOT_RTOL,
                           first: Any = None, rows: Any = None, return_matrix: bool = False
                           ) -> tuple:
    """Phi without its (numerically) linearly dependent columns, and the kept column indices.

    The Galerkin matrix ``Phi^T A Phi`` is scaled to unit diagonal and factorised by a
    Cholesky factorisation with complete (diagonal) pivoting, LAPACK ``dpstrf``: every
    step eliminates the column with the largest remaining pivot, the squared sine of its
    A-angle to the columns already chosen, and the factorisation stops when that is at
    most ``rtol``; the columns not chosen are dropped (zero-energy columns too).  The
    span is unchanged up to that tolerance.  Unlike the pivots of a factorisation in a
    fixed order, which can all stay well above the smallest eigenvalue (a dependence
    spread over many columns), complete pivoting reveals the rank.  With ``first``, the
    first columns are chosen so (or, beyond :data:`DENSE_DROP_MAX` of them, by the pivots of
    a sparse factorisation in its own order), then the rest on
    their Schur complement by complete pivoting, above :data:`SCHUR_ROUNDING` times its
    rounding when that exceeds ``rtol``.  When the columns to choose densely are more than
    :data:`DENSE_DROP_MAX` (all of them without ``first``, or the rest), or the Schur
    complement cannot be formed, all columns are chosen by the sparse factorisation's
    pivots in its own order, which need not reveal the rank.  The builders of the coarse
    spaces call it where functions of different components or subdomains can depend on
    each other (RGDSW with several null-space vectors, the adaptive spaces).

    Parameters
    ----------
    A : sparse matrix
        SPD ``n x n``.
    Phi : sparse matrix
        ``n x n0``.
    rtol : float
        See :data:`~ddops.dd.coarse_matrix.DROP_PIVOT_RTOL`.
    first : array of bool, optional
        Columns to choose before all others (the null-space columns of the adaptive
        spaces, so that they stay whenever they are independent among themselves): the
        others are then chosen on the Schur complement of these.
    rows : array of int, optional
        The row indices outside which ``A Phi`` vanishes up to rounding (the
        interface of discrete-harmonic columns, ``harmonic_interface`` of the builders):
        ``Phi^T A Phi`` is then formed as ``Phi_rows^T (A Phi)_rows``, as
        :class:`~ddops.precond.corrections.CoarseCorrection` forms ``A_0``, a product
        with those rows only.
    return_matrix : bool
        Also return ``Phi^T A Phi`` of the kept columns, the product this check forms
        anyway (the coarse matrix, which the caller then need not form again).

    Returns
    -------
    Phi : scipy.sparse.csr_matrix
        The kept columns, in their order.
    kept : numpy.ndarray
        Their indices in the given Phi (increasing).
    A0 : scipy.sparse.csr_matrix
        With ``return_matrix``: ``Phi^T A Phi`` of the kept columns, symmetrised, sorted
        indices.
    """

    rtol = check_positive_float("rtol", rtol)
    A = check_matrix(A)
    Phi = as_csr("Phi", Phi)
    if Phi.shape[0] != A.shape[0]:
        raise ValueError(f"Phi must have {A.shape[0]} rows, got shape {Phi.shape}")
    n0 = Phi.shape[1]
    if rows is not None:
        rows = np.asarray(rows)
        if rows.ndim != 1 or (rows.size and (rows.dtype.kind not in "iu" or rows.min() < 0
                                             or rows.max() >= A.shape[0])):
            raise ValueError(f"rows must be row indices of A (0 to {A.shape[0] - 1})")
        rows = np.unique(rows)
    if not isinstance(return_matrix, (bool, np.bool_)):
        raise TypeError(f"return_matrix must be a bool, got {type(return_matrix).__name__}")
    if n0 == 0:
        none = np.zeros(0, dtype=np.int64)
        return (Phi, none, sp.csr_matrix((0, 0))) if return_matrix else (Phi, none)
    K, pos, A0 = _scaled_coarse(A, Phi, rows)
    if not return_matrix:
        A0 = None  # (not held through the rest)
    order = np.arange(n0)
    if first is not None:
        first = np.asarray(first, dtype=bool)
        if first.shape != (n0,):
            raise ValueError(f"first must be a Boolean mask of shape ({n0},), got "
                             f"{first.shape}")
        order = np.concatenate([np.flatnonzero(first), np.flatnonzero(~first)])
    m = int(first.sum()) if first is not None else n0
    rest = order[m:]
    if rest.size > DENSE_DROP_MAX or (m > DENSE_DROP_MAX and not rest.size):
        # too many columns to choose among densely: the sparse factorisation's pivots in
        # its own order
        kept, _ = _sparse_independent(K, np.arange(n0), rtol)
    else:
        # the first columns (all of them without first=), then the rest on their Schur
        # complement by complete pivoting, which reveals the rank among the rest however
        # many first columns there are (3D elasticity, AGDSW with finite-element Neumann
        # matrices: 4,443 columns, of which the eigenvectors' dependences slipped through the
        # sparse pivots and left A_0 singular)
        if m <= DENSE_DROP_MAX:
            K1 = _dense_block(K, order[:m], order[:m])
            at, pivots = _pivoted_cholesky(K1, rtol)
            del K1
            kept = order[:m][at]
        else:
            kept, pivots = _sparse_independent(K, order[:m], rtol)
        if rest.size:
            # the rest on the Schur complement of the kept first columns; its rounding grows
            # as eps cond(K_kk) (the largest over the smallest pivot estimates it), and no
            # pivot below that can be trusted: at contrast 1e6 the null-space columns of
            # the adaptive spaces reach cond(K_kk) = 1e8 and Schur complements 1e-8 off,
            # which kept exactly dependent columns at the tolerance 1e-10 and left A_0
            # singular (3D elasticity, AGDSW with finite-element Neumann matrices)
            tol = _schur_rounding(pivots, rtol)
            S = _schur_on(K, kept, rest)
            if S is None:  # the kept first block failed its factorisation: all sparse
                kept, _ = _sparse_independent(K, np.arange(n0), rtol)
            else:
                at, rest_pivots = _pivoted_cholesky(S, rtol)
                del S
                chosen = rest[at]
                sure = rest_pivots > tol
                if not sure.all():
                    # pivots between rtol and the rounding of the Schur complement: a column
                    # that is a combination of the others in exact arithmetic is one in the
                    # Euclidean inner product too, where the Gram matrix does not carry the
                    # contrast; a function of small but real energy (a stiff inclusion's
                    # motion at contrast 1e8) is not
                    base = np.concatenate([kept, chosen[sure]])
                    chosen = np.concatenate([chosen[sure], _euclidean_independent(
                        Phi, base, chosen[~sure])])
                kept = np.concatenate([kept, chosen])
    kept = np.sort(kept)
    kept = kept[pos[kept]]
    if kept.size < n0:
        Phi = Phi[:, kept].tocsr()
    Phi.sort_indices()
    if not return_matrix:
        return Phi, kept.astype(np.int64)
    if kept.size < n0:
        A0 = A0[kept][:, kept].tocsr()
    A0.sum_duplicates()
    A0.sort_indices()
    return Phi, kept.astype(np.int64), A0


def _schur_rounding(pivots: np.ndarray, floor: float) -> float:
    """The tolerance on a Schur complement's pivots: its rounding, :data:`SCHUR_ROUNDING`
    times ``eps cond`` of the eliminated block (its pivots' ratio), or ``floor`` if larger."""
    cond = float(pivots.max() / pivots.min()) if pivots.size else 1.0
    return max(floor, SCHUR_ROUNDING * np.finfo(np.float64).eps * cond)


def _euclidean_independent(Phi: sp.csr_matrix, base: np.ndarray,
                           candidates: np.ndarray) -> np.ndarray:
    """The ``candidates`` columns of Phi that are independent of the ``base`` columns (and of
    each other, by complete pivoting) in the Euclidean inner product: squared sine of the
    angle above :data:`EUCLIDEAN_DROP_RTOL`, or above the rounding of the Schur complement."""
    cols = np.concatenate([base, candidates])
    G = (Phi[:, cols].T @ Phi[:, cols]).tocsr()
    d = np.sqrt(G.diagonal())
    G = (sp.diags(1.0 / d) @ G @ sp.diags(1.0 / d)).tocsr()
    nb = base.size
    if nb == 0:  # nothing chosen before them: their own complete pivoting
        return candidates[_pivoted_cholesky(G.toarray(), EUCLIDEAN_DROP_RTOL)[0]]
    if pardiso_available() and candidates.size <= SCHUR_BY_SOLVES_MAX:
        # few candidates (after AGDSW on 3D elasticity: 1 to 6 beside 4,000 to 7,000 base
        # columns): one factorisation of the base block gives its pivots and the solves,
        # where PARDISO's Schur complement and a second factorisation for the pivots took
        # 2.6x as long (7,299 base columns, 1 candidate: 0.84 -> 0.32 s)
        Gb = G[:nb, :nb]
        Gbc = G[:nb, nb:].toarray()
        out = pardiso_pivots(Gb, rhs=Gbc)
        if out is not None:
            pivots, Y = out
            S = G[nb:, nb:].toarray() - Gbc.T @ Y.reshape(nb, -1)
            pivots = pivots[~bad_pivots(pivots, Gb.diagonal(), EUCLIDEAN_DROP_RTOL)]
            tol = _schur_rounding(pivots, EUCLIDEAN_DROP_RTOL)
            return candidates[_pivoted_cholesky(0.5 * (S + S.T), tol)[0]]
    S = _schur_on(G, np.arange(nb), np.arange(nb, cols.size))
    if S is None:
        return candidates[:0]
    # the base block's condition from the pivots of its sparse factorisation (a dense
    # pivoted one of thousands of null-space columns cost seconds)
    tol = _schur_rounding(_sparse_independent(G, np.arange(nb), EUCLIDEAN_DROP_RTOL)[1],
                          EUCLIDEAN_DROP_RTOL)
    return candidates[_pivoted_cholesky(S, tol)[0]]


def _pivoted_cholesky(S: np.ndarray, tol: float) -> tuple[np.ndarray, np.ndarray]:
    """Cholesky with complete pivoting of the dense SPSD ``S`` (LAPACK ``dpstrf``): the
    positions of the pivots above ``tol``, in pivot order, and those pivots.

    ``dpstrf`` compares only the pivots after the first with ``tol`` and takes the first
    whatever its size (a column of energy 1e-14 beside a kept one was kept), so every
    pivot is checked here.
    """
    from scipy.linalg import lapack

    with one_blas_thread_below(S.shape[0]):
        L, piv, rank, _ = lapack.dpstrf(S, lower=1, tol=tol)
    pivots = np.diagonal(L)[:rank] ** 2
    above = pivots > tol
    return piv[:rank][above] - 1, pivots[above]


def _sparse_independent(K: sp.csr_matrix, cols: np.ndarray,
                        rtol: float) -> tuple[np.ndarray, np.ndarray]:
    """The columns ``cols`` of the scaled ``K`` whose pivot in the sparse factorisation of
    ``K[cols][:, cols]`` (shifted by ``rtol / 100``) is above ``rtol``, and where SuperLU
    kept to the diagonal; and their pivots.

    With PARDISO, its ``L D L^T`` pivots (:func:`~ddops.linalg.local_solvers.pardiso_pivots`,
    symmetric pivoting only): the same test for a third to a half of SuperLU's time on
    the coarse matrices of thousands of columns (AGDSW on 3D elasticity: 4,151 null-space
    columns 0.20 -> 0.11 s, 7,299 Gram columns 0.85 -> 0.33 s).  SuperLU where PARDISO
    perturbed a pivot (then it is not the elimination's).
    """
    Kc = (K[cols][:, cols] + sp.identity(cols.size) * (rtol * 1e-2)).tocsr()
    if pardiso_available():
        pivots = pardiso_pivots(Kc)
        if pivots is not None:
            good = ~bad_pivots(pivots, Kc.diagonal(), rtol)
            return cols[good], pivots[good]
    lu, bad = sparse_spd_factor(Kc.tocsc(), rtol=rtol)
    if lu is None:  # pragma: no cover - the shift keeps K positive definite
        raise ValueError("Phi: the coarse matrix Phi^T A Phi is singular")
    good = np.ones(cols.size, dtype=bool)
    good[bad] = False  # dependent columns, or where SuperLU left the diagonal
    return cols[good], superlu_pivots(lu)[good]


def _listing(idx: np.ndarray, limit: int = 20) -> str:
    shown = ", ".join(str(int(i)) for i in idx[:limit])
    return f"[{shown}{', ...' if idx.size > limit else ''}] ({idx.size} in all)"
