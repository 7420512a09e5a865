"""Oversampled local matrices: GenEO's local matrix from the assembled matrix alone.

GenEO (:mod:`ddops.dd.geneo`) compares, on every overlapping subdomain ``w``, a local
energy ``N_w`` with the energy the one-level method charges, ``D_w A_w D_w``.  Its algebraic
``N_w`` (:mod:`ddops.dd.eigen`) cuts the couplings that leave ``w``; that is a valid local
energy only for a diagonally dominant ``A``.  On elasticity (no diagonally dominant rows)
the couplings cannot be cut, and clamping them (``N_w = A_w``, zero outside) charges every
function the energy of a wall around ``w``: the rigid motions of a stiff inclusion that
crosses the boundary of ``w`` then look expensive although they cost nothing, and the coarse
space misses them.

Oversampling moves that wall away.  ``w`` is grown into ``w+``: ``layers >= 1`` layers of the
graph of ``A``, then along the *stiff* unknowns (diagonal at least :data:`STIFF_RATIO` times the
median diagonal of the soft ones, :func:`stiff_reference`) for as long as the growth stays
within :data:`MAX_GROWTH` times the size of ``w``, so that a stiff inclusion crossing ``w`` is
taken whole where it fits.  The local matrix is the Schur complement onto ``w`` of the matrix
of ``w+``,

    N_w = B_ww - B_wr B_rr^{-1} B_rw,    B = A(w+, w+) (minus the cut, see below),

``r = w+ \\ w`` the ring: the energy of the cheapest extension of a function on ``w`` into
the ring, zero beyond ``w+``.  When ``A`` is diagonally dominant (every row) the couplings
that leave ``w+`` are cut as in :mod:`ddops.dd.eigen` (so with ``layers=0`` this is
GenEO's algebraic ``N_w``); otherwise they are clamped.  The Schur
complement is never formed: GenEO solves its eigenproblem on ``w+`` with ``D A D`` padded by
zeros on the ring (the minimum over the ring of the Rayleigh quotient is the Schur
complement's).

This is the construction of the transfer eigenproblems of optimal local approximation
spaces (Babuska and Lipton 2011; Heinlein and Smetana, arXiv 2207.05559) and of PETSc's
``-pc_hpddm_harmonic_overlap``, with the stiff growth added.  No contrast-independent bound
is proven for the clamped rows; the iteration counts measured are in ``docs/adaptive.md``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from .._validation import check_int

__all__ = ["OVERSAMPLING_LAYERS", "OVERSAMPLING_LAYERS_3D", "STIFF_RATIO", "STIFF_QUANTILE",
           "MAX_GROWTH", "default_oversampling", "stiff_reference", "coupled_rows",
           "oversampled_sets", "check_oversampling"]

#: Default layers of the graph of ``A`` added to every subdomain before the stiff growth
#: (for a matrix that is not diagonally dominant).  Measured on 2D P1 elasticity with stiff
#: disks (CG iterations of the additive method, contrast 1e6): 32 METIS parts, 2 layers 54,
#: 4 layers 46, and without the stiff growth 8 layers 57 and 12 layers 42 at three times
#: the cost; 128 parts, 1 layer 78, 2 layers 60.
OVERSAMPLING_LAYERS = 2

#: ... and for ``block_size >= 3`` (3D elasticity), where a layer adds more unknowns: on 3D
#: P1 elasticity with 20 stiff balls (64 parts, contrasts 1, 1e3, 1e6) 1 layer gives 49, 87
#: and 186 iterations, 2 layers 48, 89 and 244 for about 1.5 times the set-up; with isolated
#: balls both give 49 and 61.
OVERSAMPLING_LAYERS_3D = 1


def default_oversampling(block_size: int) -> int:
    """The default layers for a matrix that is not diagonally dominant, by its block size."""
    return OVERSAMPLING_LAYERS_3D if block_size >= 3 else OVERSAMPLING_LAYERS

#: An unknown whose diagonal is at least this many times the soft unknowns' median diagonal
#: (:func:`stiff_reference`) is stiff: the growth follows the stiff unknowns beyond the
#: layers.  Scale-free; at contrast 1 the diagonals of a mesh differ by a factor of a few, so
#: nothing grows there.
STIFF_RATIO = 10.0

#: The soft unknowns are those whose diagonal is below :data:`STIFF_RATIO` times the diagonal
#: that this fraction of the (coupled) unknowns lie at or below (:func:`stiff_reference`).
#: The median of the whole diagonal, the measure before, is stiff itself where the stiff
#: material holds most unknowns: on 2D P1 elasticity with 60 stiff disks touching 61 % of
#: the unknowns (1,200 unknowns, 8 parts) nothing was stiff, nothing grew, and the condition
#: number rose with the contrast (1.1e3, 1.1e6, 1.1e8 at 1e3, 1e6, 1e8; 84, 202, 328 CG
#: iterations); measured against the soft unknowns 22, 8.5, 8.5 (29, 29, 31 iterations).
#: A quarter, not less: where a soft minority lies well below the rest (soft inclusions on
#: 15 % of the unknowns) a smaller fraction took the rest for stiff and grew every set to
#: :data:`MAX_GROWTH` (4.2 times the subdomains instead of 0.6, for the same iterations).
#: So the stiff material is found where it holds at most three quarters of the unknowns.
#: Where it holds fewer than half (every problem measured in ``docs/adaptive.md``, at
#: contrasts 1, 1e3 and 1e6) the stiff unknowns are those of the whole median.
STIFF_QUANTILE = 0.25

#: The stiff growth stops where the grown set would exceed this many times the subdomain.
#: Measured on 3D P1 elasticity with 20 clustered stiff balls (28 % of the cube, 64 parts,
#: contrast 1e6, one layer): limit 3, 1443 iterations; 8, 186; 16, 62 (32: the same) for a
#: set-up of 20 s instead of 15 s.  In 2D (60 disks) the growth stops before 8.
MAX_GROWTH = 16


def stiff_reference(diagonal: np.ndarray, stiff_ratio: float = STIFF_RATIO,
                    coupled: np.ndarray | None = None) -> float:
    """The diagonal that the stiff unknowns are measured against (the soft ones' median).

    An unknown is stiff when its diagonal is at least ``stiff_ratio`` times the result.

    Parameters
    ----------
    diagonal : numpy.ndarray
        The diagonal of ``A``.
    stiff_ratio : float
        :data:`STIFF_RATIO`.
    coupled : numpy.ndarray of bool, optional
        The unknowns with a coupling (a nonzero off-diagonal entry in their row); the
        others (rows of an eliminated Dirichlet condition kept as ``a_kk = 1``, say) are no
        material and are left out.  Default: every unknown.

    Returns
    -------
    float
        The median diagonal of the soft unknowns: those (of the coupled ones) whose
        diagonal is below ``stiff_ratio`` times their ``k``-th smallest,
        ``k = floor(STIFF_QUANTILE * (m - 1))`` for ``m`` of them.  On a homogeneous matrix
        every unknown is soft (the whole median); with stiff material on most unknowns
        still the soft ones' median, unless more than ``1 - STIFF_QUANTILE`` of them are
        stiff.  The whole median where no unknown is soft (a diagonal that is not
        positive); 0 for an empty one.

    Examples
    --------
    >>> import numpy as np
    >>> diagonal = np.array([1.0, 1.1, 0.9, 1e6, 2e6, 1e6, 3e6])   # 4 of 7 stiff
    >>> float(np.median(diagonal)), stiff_reference(diagonal)
    (1000000.0, 1.0)
    """
    diagonal = np.asarray(diagonal, dtype=np.float64)
    if coupled is not None and np.any(coupled):
        diagonal = diagonal[np.asarray(coupled, dtype=bool)]
    if diagonal.size == 0:
        return 0.0
    k = int(np.floor(STIFF_QUANTILE * (diagonal.size - 1)))
    low = np.partition(diagonal, k)[k]
    soft = diagonal[diagonal < stiff_ratio * low]
    return float(np.median(soft if soft.size else diagonal))


def coupled_rows(A: sp.csr_matrix, rows: np.ndarray | None = None) -> np.ndarray:
    """The rows of ``A`` with a nonzero off-diagonal entry (Boolean, one per row), for
    :func:`stiff_reference`.  ``rows``: ``A`` holds these rows of a larger matrix (one
    each, global column indices); default ``A`` itself."""
    A = sp.csr_matrix(A)
    row = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    own = row if rows is None else np.asarray(rows)[row]
    off = (A.indices != own) & (A.data != 0)
    return np.bincount(row[off], minlength=A.shape[0]) > 0


def check_oversampling(oversampling: Any) -> int | None:
    """``None`` (the default rule) or a number of layers ``>= 0``."""
    if oversampling is None:
        return None
    return check_int("oversampling", oversampling, minimum=0)


def _neighbours(pattern: sp.csr_matrix, members: sp.csr_matrix) -> sp.csr_matrix:
    """``(pattern @ members) != 0`` as a 0/1 matrix."""
    out = (pattern @ members).tocsr()
    out.data[:] = 1.0
    return out


def oversampled_sets(A: sp.csr_matrix, indices: np.ndarray, group: np.ndarray,
                     num_sets: int, layers: int, *, stiff_ratio: float = STIFF_RATIO,
                     max_growth: float = MAX_GROWTH, diagonal_reference: float | None = None
                     ) -> tuple[np.ndarray, np.ndarray]:
    """The grown sets ``w+`` of the sets ``w`` given as (unknown, set) pairs.

    All sets at once: a layer is one sparse product of the pattern of ``A`` with the newest
    layer's 0/1 matrix (unknowns x sets); the stiff growth goes on the same way, restricted
    to the stiff rows, for each set while it stays within ``max_growth`` times its size.
    ``layers=0`` grows nothing.  ``diagonal_reference``: the diagonal that the stiff rows are
    measured against (default :func:`stiff_reference` of ``A``'s diagonal; that of the whole
    matrix when ``A`` is a block of it holding the rows the growth reaches).

    Returns
    -------
    ring_indices, ring_group : numpy.ndarray
        The unknowns of ``w+ \\ w`` and their set, sorted by set, then unknown.
    """
    n = A.shape[0]
    if layers == 0:  # no oversampling: the sets themselves
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    pattern = sp.csr_matrix((np.ones(A.nnz), A.indices, A.indptr), shape=A.shape)
    inside = sp.csr_matrix((np.ones(indices.size), (indices, group)), shape=(n, num_sets))
    front = inside
    rings = []

    def step(front, allowed_rows=None):
        new = _neighbours(pattern, front)
        if allowed_rows is not None:
            new = sp.diags(allowed_rows.astype(np.float64)) @ new
        new = (new - new.multiply(inside)).tocsr()
        new.eliminate_zeros()
        new.data[:] = 1.0
        return new

    for _ in range(layers):
        front = step(front)
        if front.nnz == 0:
            break
        inside = inside + front
        rings.append(front)
    diag = A.diagonal()
    reference = (stiff_reference(diag, stiff_ratio, coupled_rows(A))
                 if diagonal_reference is None else diagonal_reference)
    stiff = diag >= stiff_ratio * reference
    if stiff.any() and max_growth > 1:
        limit = max_growth * np.bincount(group, minlength=num_sets)
        size = np.asarray(inside.sum(axis=0)).ravel()
        while front.nnz:
            front = step(front, stiff)
            count = np.asarray(front.sum(axis=0)).ravel()
            # a set whose next layer does not fit stops growing (its front is emptied)
            fits = (count > 0) & (size + count <= limit)
            if not fits.any():
                break
            front = (front @ sp.diags(fits.astype(np.float64))).tocsr()
            front.eliminate_zeros()
            size += np.where(fits, count, 0)
            inside = inside + front
            rings.append(front)
    if not rings:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    ring = rings[0]
    for r in rings[1:]:  # disjoint layers
        ring = ring + r
    ring = ring.T.tocoo()
    ring_group, ring_indices = ring.row.astype(np.int64), ring.col.astype(np.int64)
    order = np.lexsort((ring_indices, ring_group))
    return ring_indices[order], ring_group[order]
