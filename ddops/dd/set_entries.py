"""The entries of a sparse matrix inside sets of its unknowns, for all the sets at once.

The subdomain matrices ``A(w_i, w_i)`` of the local solvers and GenEO's matrices on the
grown subdomains are the entries of ``A`` whose row and column both lie in one set.  For
every member row of every set, the row's entries whose column is a member of the same set
are found by one gather of the rows and one lookup in a table of ``(set, unknown) ->
position + 1``, filled for a chunk of sets at a time: work linear in the entries met,
without the couplings between different sets that the product ``S A S^T`` of a stacked
restriction forms and then throws away, and without sorting every pair.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["LOOKUP_TABLE_ENTRIES", "entries_within_sets"]

#: The lookup table of :func:`entries_within_sets` holds at most this many entries (8 bytes
#: each, 8 MiB): ``max(1, LOOKUP_TABLE_ENTRIES // n)`` sets are looked up at a time.  A
#: table that stays in the cache: the subdomain matrices' entry map of 3D Poisson (125,000
#: unknowns, 62 parts, overlap 1) took 62 ms with one table of all the sets (62 MB), 26 ms
#: with this one and 20 ms with a quarter of it (39 ms by the product ``S A S^T``).
LOOKUP_TABLE_ENTRIES = 1 << 20


def entries_within_sets(A: sp.csr_matrix, members: np.ndarray, set_of: np.ndarray,
                        position: np.ndarray, num_sets: int
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The entries of ``A`` whose row and column lie in the same set.

    Parameters
    ----------
    A : scipy.sparse.csr_matrix
        ``n x n``, canonical (sorted indices, no duplicates).
    members, set_of, position : numpy.ndarray
        One entry per (set, member): the member unknown, its set (``0 .. num_sets - 1``)
        and its position there (distinct within a set).  An unknown may lie in several sets.
    num_sets : int
        The number of sets.

    Returns
    -------
    set, row, col, source : numpy.ndarray
        One entry per stored entry ``A[u, v]`` with ``u`` and ``v`` members of one set:
        that set, the positions of ``u`` and ``v`` there, and the entry's index in
        ``A.data``.  Sets in chunks of increasing set numbers, rows in the order of the
        members within a set.  32-bit integers where every value fits, else 64-bit.
    """
    if not sp.issparse(A) or A.format != "csr" or A.shape[0] != A.shape[1]:
        raise TypeError("A must be a square scipy.sparse CSR matrix")
    n = A.shape[0]
    members, set_of, position = (_indices(name, x) for name, x in (
        ("members", members), ("set_of", set_of), ("position", position)))
    if not members.shape == set_of.shape == position.shape:
        raise ValueError("members, set_of and position must have one shape, got "
                         f"{members.shape}, {set_of.shape} and {position.shape}")
    if members.size and (members.max() >= n or set_of.max() >= num_sets):
        raise ValueError(f"members must be below {n} (A's size) and set_of below "
                         f"num_sets={num_sets}")
    by_set = np.argsort(set_of, kind="stable")
    set_off = np.searchsorted(set_of[by_set], np.arange(num_sets + 1))
    step = max(1, min(num_sets, LOOKUP_TABLE_ENTRIES // max(n, 1)))
    table = np.zeros(step * n, dtype=np.int64)
    indptr = A.indptr.astype(np.int64, copy=False)
    # the results in 32-bit integers where they fit (half the memory of the entries kept)
    small = max(num_sets, int(position.max(initial=0)) + 1, A.nnz) < 2**31 - 1
    kind = np.int32 if small else np.int64
    out: tuple[list, list, list, list] = ([], [], [], [])
    for g0 in range(0, num_sets, step):  # a loop over chunks of sets, not over sets
        e = by_set[set_off[g0]:set_off[min(g0 + step, num_sets)]]
        key = (set_of[e] - g0) * n + members[e]
        table[key] = position[e] + 1
        start = indptr[members[e]]
        counts = indptr[members[e] + 1] - start
        rep = np.repeat(np.arange(e.size), counts)
        source = start[rep] + (np.arange(rep.size) - np.repeat(np.cumsum(counts) - counts,
                                                                counts))
        at = table[(set_of[e] - g0)[rep] * n + A.indices[source]]
        found = at > 0
        rep = e[rep[found]]
        for field, values in zip(out, (set_of[rep], position[rep], at[found] - 1,
                                       source[found]), strict=True):
            field.append(values.astype(kind))
        table[key] = 0
    del table
    result = []
    for field in out:  # one field at a time, its chunks released as it is joined
        result.append(np.concatenate(field) if field else np.zeros(0, dtype=kind))
        field.clear()
    return tuple(result)


def _indices(name: str, x) -> np.ndarray:
    """``x`` as a 1-D int64 array of nonnegative integers (a ValueError naming ``name``)."""
    a = np.asarray(x)
    if a.ndim != 1 or (a.size and (a.dtype.kind not in "iu" or a.min() < 0)):
        raise ValueError(f"{name} must be a 1-D array of nonnegative integers")
    return a.astype(np.int64, copy=False)
