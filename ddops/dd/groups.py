"""Null-space vectors on groups of unknowns: which are independent there, and the columns.

The GDSW, RGDSW, Nicolaides and adaptive coarse spaces all start from the vectors of a
null space ``Z`` restricted to groups of unknowns (interface components, root supports,
subdomains): a vector that is (numerically) a combination of the earlier ones on a group is
dropped there (:func:`independent_vectors`), and the kept ones become coarse columns
(:func:`columns_from_groups`).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = [
    "DEPENDENCE_RTOL",
    "independent_vectors",
    "columns_from_groups",
]

#: A null-space vector is dropped from a component (or root, or subdomain) when
#: the part of it orthogonal to the earlier kept vectors there has a norm at
#: most this fraction of its own norm there (e.g. a rotation on a one-node
#: vertex in 2D elasticity, which two translations already span).
DEPENDENCE_RTOL = 1e-8


def independent_vectors(group: np.ndarray, values: np.ndarray, num_groups: int,
                        rtol: float) -> np.ndarray:
    """Which vectors to keep in each group, greedily in their order.

    ``values`` (``m x k``) are the entries of the ``k`` vectors on the rows of
    all groups (``group[i]`` is the group of row ``i``).  Vector ``a`` is kept
    in a group when its part orthogonal to the earlier kept vectors there
    (Gram-Schmidt, done twice for stability) has a norm above ``rtol`` times
    its own norm there.  All groups are processed at once by segmented sums.

    Returns
    -------
    numpy.ndarray
        ``num_groups x k`` Boolean.
    """
    m, k = values.shape
    keep = np.zeros((num_groups, k), dtype=bool)
    Q = np.zeros((m, k))

    def seg(x):
        return np.bincount(group, weights=x, minlength=num_groups)

    for a in range(k):
        w = values[:, a].copy()
        norm0 = np.sqrt(seg(w * w))
        for _ in range(2):
            for c in range(a):
                w -= seg(Q[:, c] * w)[group] * Q[:, c]
        norm = np.sqrt(seg(w * w))
        ok = (norm0 > 0) & (norm > rtol * norm0)
        keep[:, a] = ok
        Q[:, a] = w * np.divide(1.0, norm, out=np.zeros_like(norm), where=ok)[group]
    return keep


def columns_from_groups(rows, group, values, keep, n, runs=None):
    """Assemble the kept group vectors as ``n x n0`` columns (group-major, then vector).

    ``rows`` are the unknowns of the ``m`` entries, ``group`` their groups, ``values``
    (``m x k``) the vectors there and ``keep`` (``num_groups x k``) the pairs to assemble,
    as :func:`independent_vectors` returns them.  With ``runs = (run_group, run_vector,
    start, length, run_values)`` the vectors from ``values.shape[1]`` on come as runs
    instead (GenEO's eigenvectors: most groups leave most of those slots empty, which a
    dense ``m x k`` array would hold): run ``r`` is vector ``run_vector[r]`` of group
    ``run_group[r]`` on the ``length[r]`` consecutive entries from ``start[r]`` (rows
    ``rows[start[r]:start[r] + length[r]]``), its values the next ``length[r]`` of
    ``run_values`` (the runs' values one after the other); each (group, vector) pair
    takes at most one run.  A run's column is a slice of ``Phi^T``'s rows, and one
    transposition makes ``Phi``: no sort of the entries (GenEO on 114,444 unknowns, 8.5 M
    entries: see ``docs/adaptive.md``).  Exact zeros are dropped.  Returns the matrix
    (sorted indices) and the ``num_groups x k`` column index of every (group, vector) pair
    (-1 where not kept).
    """
    num_groups, k = keep.shape
    n0 = int(keep.sum())
    column = np.full((num_groups, k), -1, dtype=np.int64)
    column[keep] = np.arange(n0)  # row-major: group-major order
    r_all, c_all, v_all = [], [], []
    for a in range(values.shape[1]):  # loop over the few null-space vectors only
        sel = keep[group, a]
        r_all.append(rows[sel])
        c_all.append(column[group[sel], a])
        v_all.append(values[sel, a])
    Phi = (sp.csr_matrix((np.concatenate(v_all), (np.concatenate(r_all), np.concatenate(c_all))),
                         shape=(n, n0)) if v_all else None)
    if runs is not None:
        runs_Phi = _columns_from_runs(rows, column, n, n0, *runs)
        Phi = runs_Phi if Phi is None else Phi + runs_Phi
    if Phi is None:
        Phi = sp.csr_matrix((n, n0))
    Phi.eliminate_zeros()
    Phi.sort_indices()
    return Phi, column


def _columns_from_runs(rows, column, n, n0, run_group, run_vector, start, length,
                       run_values):
    """:func:`columns_from_groups`' runs as ``n x n0`` CSR, sorted indices: ``Phi^T``'s rows
    one slice per kept run (in column order, a gather with no sort), then transposed."""
    run_group, run_vector, start, length, run_values = (
        np.asarray(x) for x in (run_group, run_vector, start, length, run_values))
    col = column[run_group, run_vector]
    by = np.argsort(col, kind="stable")
    by = by[col[by] >= 0]  # the kept runs in column order
    twice = np.flatnonzero(np.diff(col[by]) == 0)
    if twice.size:
        g, v = run_group[by[twice[0]]], run_vector[by[twice[0]]]
        raise ValueError(f"runs: two runs of group {int(g)}'s vector {int(v)}; each (group, "
                         "vector) pair takes one run")
    counts = np.zeros(n0, dtype=np.int64)
    counts[col[by]] = length[by]
    indptr = np.concatenate([[0], np.cumsum(counts)])
    first = np.cumsum(length) - length  # each run's first value
    out = np.arange(int(indptr[-1]), dtype=np.int64)
    values = run_values[out + np.repeat(first[by] - indptr[col[by]], length[by])]
    entries = out + np.repeat(start[by] - indptr[col[by]], length[by])
    PhiT = sp.csr_matrix((values, np.asarray(rows)[entries], indptr), shape=(n0, n))
    return PhiT.T.tocsr()  # (the transposition sorts each row's columns)
