"""The discrete harmonic extension of interface values into the interiors of the parts.

Given a non-overlapping partition and values on the interface ``Gamma`` (which separates
the parts), :func:`harmonic_extension` computes ``Phi_I = -A_II^{-1} A_IG Phi_G``: the
extension of the GDSW-type coarse spaces (:mod:`ddops.dd.gdsw`, :mod:`ddops.dd.agdsw`).

The interior matrix ``A_II`` is block diagonal over the parts.  It is
factorised in chunks of consecutive parts, and the extension is computed for
all coarse functions by one multi-column solve per chunk whose columns are
shared between parts: column slot ``s`` holds, on the rows of part ``p``, the right-hand side
of the ``s``-th coarse function adjacent to ``p``, so the number of columns
is the largest number of coarse functions adjacent to one part, not the
coarse dimension (see :func:`harmonic_extension`).  The extension being linear, the
extension of a combination of interface values is the same combination of their
extensions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from .._validation import check_choice, check_int, check_positive_float
from ..linalg.local_solvers import (
    CHUNK_ROWS,
    SPARSE_SOLVERS,
    SingularBlockError,
    chunk_bounds,
    default_exact_solver,
    factorize_blocks,
)
from ..linalg.parallel import map_chunks, rows_per_chunk

if TYPE_CHECKING:
    from .analysis import GDSWAnalysis

__all__ = [
    "EXTENSION_CHUNK_BYTES",
    "EXTENSION_RTOL",
    "EXTENSION_MAXITER",
    "FACTOR_CHUNK_ROWS",
    "harmonic_extension",
]

#: The harmonic extension solves at most this many bytes of right-hand sides at
#: once (float64 ``rows x columns`` blocks, rows those of one chunk of parts).
EXTENSION_CHUNK_BYTES = 2**24

#: Relative residual of every column of the inexact (``solver="amg"``) harmonic extension.
EXTENSION_RTOL = 1e-6

#: Iteration limit of the conjugate gradients of the inexact extension.
EXTENSION_MAXITER = 200

#: Block-diagonal matrices (the interior matrix ``A_II`` here, the local
#: matrices of :class:`ddops.TwoLevelSchwarz`) are factorised in chunks of
#: consecutive blocks of about this many rows (see
#: :func:`ddops.linalg.local_solvers.chunk_bounds`).
FACTOR_CHUNK_ROWS = CHUNK_ROWS


def harmonic_extension(
    A: sp.csr_matrix,
    owner: np.ndarray,
    interface: np.ndarray,
    Phi_interface: sp.spmatrix,
    *,
    chunk_bytes: int = EXTENSION_CHUNK_BYTES,
    chunk_rows: int | None = None,
    solver: str = "auto",
    rtol: float = EXTENSION_RTOL,
    null_space: np.ndarray | None = None,
    analysis: GDSWAnalysis | None = None,
    block_size: int = 1,
) -> sp.csr_matrix:
    """Extend interface values into the interiors: ``Phi_I = -A_II^{-1} A_IG Phi_G``.

    ``A_II`` is block diagonal over the parts (the interface separates them).
    The right-hand sides ``-A_IG Phi_G`` are packed by part: with ``(p, j)``
    the pairs of a part and a coarse function whose right-hand side is
    nonzero on ``p``'s rows, the ``s``-th pair of part ``p`` goes to column
    ``s`` on ``p``'s rows.  One solve per chunk of parts with ``c = max_p |pairs of
    p|`` columns (``p`` in the chunk; in column blocks of at most
    ``chunk_bytes``) then extends every function into every part, and its
    nonzeros are scattered back to the coarse columns.  The parts are ordered by
    their number of pairs before they are cut into chunks, so that a chunk solves
    with about as many columns as its parts need and no more (corner parts of a 3D
    elasticity partition touch a fraction of the functions of central ones).  Each
    chunk's factor is dropped once its extensions are computed.

    Parameters
    ----------
    A : scipy.sparse.csr_matrix
        The SPD matrix (float64, canonical).
    owner : numpy.ndarray
        Part label of every unknown.
    interface : numpy.ndarray
        Sorted interface unknowns; every other unknown is interior.
    Phi_interface : sparse matrix
        ``n x n0`` coarse values, nonzero on interface rows only.
    chunk_bytes : int
        Memory bound of one block of right-hand sides.
    chunk_rows : int, optional
        Target rows of one chunk of parts factorised together (default
        :data:`~ddops.dd.extension.FACTOR_CHUNK_ROWS`, whatever the solver); the result
        does not depend on it beyond rounding.
    solver : {"auto", "superlu", "pardiso", "amg"}
        The interior solver (:func:`ddops.linalg.local_solvers.factorize_blocks`):
        ``"auto"`` is PARDISO when it is installed, else SuperLU.  ``"amg"`` is the
        inexact extension: conjugate gradients on every column, preconditioned by one
        aggregation-AMG V-cycle, stopped when the residual of every coarse function
        in every part is at most ``rtol`` times its right-hand side there
        (``||A_{I_p I_p} x - b_p|| <= rtol ||b_p||``, Euclidean norms; at most
        :data:`~ddops.dd.extension.EXTENSION_MAXITER` iterations).
    rtol : float
        Relative residual of the inexact extension (ignored by the exact solvers).
    null_space : numpy.ndarray, optional
        ``n x k`` near-null space for the aggregation of the ``"amg"`` extension
        (constants by default).
    analysis : ddops.dd.analysis.GDSWAnalysis, optional
        Keep PARDISO's analyses of the chunks there (or their orderings, by its
        ``reuse``), and reuse those it holds for a matrix with the same pattern (the result
        is the same to rounding); a chunk analysed afresh takes the order of the
        overlapping subdomains' factorisation where it shares one
        (:meth:`~ddops.dd.analysis.GDSWAnalysis.share_local_order`).
    block_size : int
        Unknowns per node, consecutive in ``A``'s numbering (the interface holds whole
        nodes): PARDISO's nested dissection then orders the interiors' node graph
        (:func:`~ddops.linalg.local_solvers.node_nested_dissection`).

    Returns
    -------
    scipy.sparse.csr_matrix
        ``n x n0``: the interface values plus their extension (exact zeros
        dropped, so each column lives on its interface support and the
        interiors of the parts adjacent to it).
    """
    check_choice("solver", solver, ("auto", *SPARSE_SOLVERS))
    if solver == "auto":
        solver = default_exact_solver()
    rtol = check_positive_float("rtol", rtol)
    if chunk_rows is None:
        chunk_rows = FACTOR_CHUNK_ROWS
    chunk_rows = check_int("chunk_rows", chunk_rows, minimum=1)
    n = A.shape[0]
    PhiG = sp.csr_matrix(Phi_interface)
    n0 = PhiG.shape[1]
    mask = np.ones(n, dtype=bool)
    mask[interface] = False
    interior = np.flatnonzero(mask)
    if interior.size == 0 or n0 == 0:
        return PhiG
    N = int(owner.max()) + 1
    A_I = A[interior]
    B = (-(A_I[:, interface] @ PhiG[interface])).tocsr()  # the right-hand sides, once
    B.sum_duplicates()
    B.eliminate_zeros()
    # pairs per part decide the part order: chunks of parts with similar column counts
    B_coo = B.tocoo()
    pair_keys = np.unique(owner[interior][B_coo.row] * np.int64(n0) + B_coo.col)
    del B_coo
    width_of = np.bincount(pair_keys // n0, minlength=N)
    rank = np.empty(N, dtype=np.int64)
    rank[np.lexsort((np.arange(N), width_of))] = np.arange(N)
    # grouping the interior by part makes the blocks of A_II contiguous, so it can be
    # factorised chunk by chunk of parts
    perm = np.argsort(rank[owner[interior]], kind="stable")
    interior = interior[perm]
    part = owner[interior]
    A_II = A_I[perm][:, interior].tocsr()
    B = B[perm].tocoo()  # rows sorted (from CSR)
    del A_I
    pairs, which = np.unique(rank[part[B.row]] * np.int64(n0) + B.col, return_inverse=True)
    which = which.ravel()
    pair_rank, pair_col = pairs // n0, pairs % n0
    slot = np.arange(pairs.size) - np.searchsorted(pair_rank, pair_rank)  # rank within part
    width = int(slot.max()) + 1 if pairs.size else 0
    index = np.full((N, max(width, 1)), -1, dtype=np.int64)
    index[pair_rank, slot] = pair_col
    slots_of = np.bincount(pair_rank, minlength=N)  # per rank: its functions' slots
    entry_slot = slot[which]
    part_offsets = np.concatenate([[0], np.cumsum(np.bincount(rank[part], minlength=N))])
    bounds = chunk_bounds(part_offsets, rows_per_chunk(part_offsets[-1], chunk_rows))
    entry_bounds = np.searchsorted(B.row, bounds)
    if analysis is not None:  # the kept analyses of other chunks (another thread limit)
        analysis.retain((c, int(bounds[c]), int(bounds[c + 1])) for c in range(bounds.size - 1))

    def extend_chunk(c: int):
        """Factorise chunk ``c`` of ``A_II``, extend into it, drop the factors: the chunk's
        nonzeros of ``A_II`` and its pieces of Phi, each its first interior row with rows of
        Phi (CSR, one per block of columns; the pieces of one row add up)."""
        r0, r1 = int(bounds[c]), int(bounds[c + 1])
        K = A_II[r0:r1, r0:r1]
        p0, p1 = np.searchsorted(part_offsets, [r0, r1])
        try:
            near = None if null_space is None else null_space[interior[r0:r1]]
            options = dict(exact_check=False, near_null=near, block_size=block_size)
            if analysis is None:
                lu = factorize_blocks(K, part_offsets[p0:p1 + 1] - r0, solver, **options)
            else:
                # the order of the overlapping subdomains' factorisation, where shared
                order = None if solver != "pardiso" else analysis.local_order(
                    interior[r0:r1], part[r0:r1],
                    np.repeat(np.arange(p1 - p0), np.diff(part_offsets[p0:p1 + 1])))
                lu = analysis.factor((c, r0, r1), K, part_offsets[p0:p1 + 1] - r0, solver,
                                     order=order, **options)
        except SingularBlockError as exc:
            # SuperLU and PARDISO report a non-positive (or vanishing) Cholesky pivot: an
            # indefinite block as much as a singular one
            raise ValueError("A is not positive definite: the interior matrix A_II of part "
                             f"{int(np.flatnonzero(rank == p0 + exc.block)[0])} has a "
                             "non-positive or vanishing pivot (it is indefinite or singular); "
                             "A must be symmetric positive definite") from exc
        e0, e1 = int(entry_bounds[c]), int(entry_bounds[c + 1])
        e_row, e_slot, e_val = B.row[e0:e1] - r0, entry_slot[e0:e1], B.data[e0:e1]
        c_width = int(e_slot.max()) + 1 if e1 > e0 else 0
        step = max(1, int(chunk_bytes) // (8 * (r1 - r0)))
        # row r of the chunk carries its part's first functions (slots): the solution's
        # nonzeros are, in memory order, the first slots of every row, whose functions
        # are the part's in increasing order: one CSR piece per block of slots, with no
        # search for the nonzeros (3D elasticity, 23 M of them: the extension 3.0 -> 2.6 s)
        part_slots = slots_of[p0:p1]
        part_rows = np.diff(part_offsets[p0:p1 + 1])
        row_slots = np.repeat(part_slots, part_rows)
        row_part = np.repeat(np.arange(p1 - p0), part_rows)
        pieces = []
        for start in range(0, c_width, step):  # column blocks of the chunk's slots
            stop = min(start + step, c_width)
            sel = (e_slot >= start) & (e_slot < stop)
            rhs = np.zeros((r1 - r0, stop - start), order="F")
            rhs[e_row[sel], e_slot[sel] - start] = e_val[sel]
            X = lu.solve(rhs) if lu.exact else _pcg_columns(
                K, lu, rhs, rtol, part_offsets[p0:p1] - r0)
            del rhs
            X = np.ascontiguousarray(X)  # (the solvers return C order: no copy)
            count = np.clip(row_slots - start, 0, stop - start)  # this block's, per row
            block = np.arange(stop - start)
            data = X[block[None, :] < count[:, None]]
            del X
            indptr = np.zeros(r1 - r0 + 1, dtype=np.int64)
            np.cumsum(count, out=indptr[1:])
            # every part's functions in this block, one list after the other
            part_count = np.clip(part_slots - start, 0, stop - start)
            lists = index[p0:p1, start:stop][block[None, :] < part_count[:, None]]
            first = (np.cumsum(part_count) - part_count)[row_part] - indptr[:-1]
            indices = lists[np.repeat(first, count) + np.arange(int(indptr[-1]))]
            pieces.append((r0, sp.csr_matrix((data, indices.astype(np.int32),
                                              indptr.astype(np.int32)),
                                             shape=(r1 - r0, n0))))
            del data, indices, indptr
        if analysis is not None:
            analysis.done(lu)
        del lu
        return K.nnz, pieces

    # the chunks of parts are independent (threads, ddops.linalg.parallel)
    kept, pieces = 0, []
    for nnz, chunk_pieces in map_chunks(extend_chunk, [(c,) for c in range(bounds.size - 1)]):
        kept += nnz
        pieces += chunk_pieces
    if kept != A_II.nnz:
        raise ValueError("A couples the interiors of different parts (A_II is not block "
                         "diagonal over the parts); the interface must separate the parts")
    return _stack_rows(PhiG, [(interior[r0:r0 + P.shape[0]], P) for r0, P in pieces])


def _stack_rows(first: sp.csr_matrix, pieces: list) -> sp.csr_matrix:
    """``first`` plus every ``(global_rows, P)``: ``P``'s row ``i`` added to row
    ``global_rows[i]``, written once into the final CSR arrays (no triplets of the whole
    result: the extension of 3D elasticity has 23 M nonzeros, and triplets plus their
    conversion took 60 bytes per nonzero at the peak, this 24).  A piece is dropped once
    it is copied."""
    n, n0 = first.shape
    first = sp.csr_matrix(first)
    counts = np.diff(first.indptr).astype(np.int64)
    for rows, P in pieces:
        counts[rows] += np.diff(P.indptr)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    index_dtype = np.int32 if max(int(indptr[-1]), n0) < 2**31 else np.int64
    data = np.empty(int(indptr[-1]), dtype=np.float64)
    indices = np.empty(int(indptr[-1]), dtype=index_dtype)
    used = indptr[:-1].copy()  # next free position of every row

    def place(rows: np.ndarray, P: sp.csr_matrix) -> None:
        lengths = np.diff(P.indptr)
        dest = np.repeat(used[rows] - P.indptr[:-1], lengths) + np.arange(P.nnz)
        data[dest] = P.data
        indices[dest] = P.indices
        used[rows] += lengths

    place(np.arange(n), first)
    while pieces:
        place(*pieces.pop(0))
    Phi = sp.csr_matrix((data, indices, indptr.astype(index_dtype, copy=False)),
                        shape=(n, n0))
    Phi.eliminate_zeros()
    Phi.sort_indices()
    return Phi


def _pcg_columns(K: sp.csr_matrix, M: Any, B: np.ndarray, rtol: float, starts: np.ndarray,
                 maxiter: int | None = None) -> np.ndarray:
    """Conjugate gradients on every column of ``K X = B`` at once, preconditioned by ``M``.

    ``K`` is block diagonal with blocks starting at rows ``starts`` (the parts), and a
    column packs the right-hand sides of different coarse functions on different parts.
    Every column has its own step lengths and runs until, on every part, its residual is
    at most ``rtol`` times its right-hand side there (so every coarse function meets the
    bound on every part it extends into); the columns still running are updated together
    (one product with ``K`` and one application of ``M`` per iteration).  Raises
    ValueError when a column has not converged after ``maxiter``
    (:data:`EXTENSION_MAXITER`) iterations.
    """
    maxiter = EXTENSION_MAXITER if maxiter is None else maxiter
    starts = np.unique(np.asarray(starts, dtype=np.int64))
    starts = starts[starts < B.shape[0]]  # reduceat needs valid, distinct starts

    def part_norms(R: np.ndarray) -> np.ndarray:  # (parts, columns)
        return np.sqrt(np.add.reduceat(R * R, starts, axis=0))

    X = np.zeros(B.shape)
    R = np.array(B, dtype=np.float64)
    goal = rtol * part_norms(R)
    active = np.flatnonzero((part_norms(R) > goal).any(axis=0))
    if active.size == 0:
        return X
    Zc = M.solve(R[:, active])
    P = Zc.copy()
    rz = np.einsum("ij,ij->j", R[:, active], Zc)
    for _ in range(maxiter):
        KP = K @ P
        alpha = rz / np.einsum("ij,ij->j", P, KP)
        X[:, active] += P * alpha
        R[:, active] -= KP * alpha
        still = (part_norms(R[:, active]) > goal[:, active]).any(axis=0)
        if not still.any():
            return X
        active, P, rz = active[still], P[:, still], rz[still]
        Zc = M.solve(R[:, active])
        rz_new = np.einsum("ij,ij->j", R[:, active], Zc)
        P = Zc + P * (rz_new / rz)
        rz = rz_new
    raise ValueError(f"the inexact harmonic extension did not reach rtol={rtol} in {maxiter} "
                     "preconditioned CG iterations; A_II may not be positive definite")
