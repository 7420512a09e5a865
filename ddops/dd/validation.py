"""Checks of the inputs shared by the coarse-space builders of ``ddops.dd``.

The matrix ``A`` (square, finite, symmetric, a positive diagonal), the partition
``owner`` (one integer part label per unknown) and the null space ``Z`` are checked
and converted once where they enter a construction (:func:`ddops.dd.gdsw.gdsw_basis`,
:func:`ddops.dd.interface.interface_components`, the adaptive spaces, the coarse-matrix
checks), by the functions here, so that every builder refuses the same inputs with the
same messages.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

import numpy as np
import scipy.sparse as sp

from .._validation import as_matrix, as_vectors, check_no_empty_rows

__all__ = [
    "as_csr",
    "symmetry_defect",
    "symmetric_part",
    "check_matrix",
    "check_positive_diagonal",
    "checked_once",
    "exactly_symmetric",
    "known_exactly_symmetric",
    "check_owner",
    "check_null_space",
]


def as_csr(name: str, M: Any) -> sp.csr_matrix:
    """A real 2-D sparse matrix or array as float64 CSR, or a ValueError naming it.

    A float64 CSR matrix in canonical form (sorted indices, no duplicates) is
    returned as it is (nothing here modifies it); anything else is copied.
    """
    if sp.issparse(M):
        if M.format == "csr" and M.dtype == np.float64 and M.has_canonical_format:
            return sp.csr_matrix(M)  # a new object sharing the arrays: no copy
        return sp.csr_matrix(M, dtype=np.float64, copy=True)
    arr = np.asarray(M)
    if arr.dtype.kind not in "fiub" or arr.ndim != 2:
        raise ValueError(f"{name} must be a real 2-D matrix, got dtype {arr.dtype} and shape "
                         f"{arr.shape}")
    return sp.csr_matrix(arr.astype(np.float64))


def symmetry_defect(A: sp.csr_matrix, *, return_transpose: bool = False):
    """``max |A - A^T|`` of a canonical CSR matrix, and whether ``A`` equals ``A^T`` exactly.

    One transpose (a CSR-to-CSC conversion, whose indices come out sorted);
    when the patterns agree the defect is read from the aligned values, the
    usual case, without forming ``A - A^T`` (about ten times faster at 5 M
    nonzeros).  With ``return_transpose``, ``A^T`` (canonical CSR) comes third, for
    :func:`symmetric_part`.
    """
    T = A.T.tocsr()
    if np.array_equal(A.indptr, T.indptr) and np.array_equal(A.indices, T.indices):
        asym = float(np.abs(A.data - T.data).max()) if A.nnz else 0.0
        out = asym, asym == 0.0
    else:
        diff = abs(A - T)
        out = (float(diff.max()) if diff.nnz else 0.0), False
    return (*out, T) if return_transpose else out


def symmetric_part(A: sp.csr_matrix, T: sp.csr_matrix) -> sp.csr_matrix:
    """``(A + A^T) / 2`` of a canonical CSR ``A`` and its transpose ``T`` (canonical CSR,
    from :func:`symmetry_defect`): on ``A``'s pattern without a sparse sum where the
    patterns agree (an assembled finite-element matrix, unsymmetric by rounding only);
    exactly symmetric either way."""
    if np.array_equal(A.indptr, T.indptr) and np.array_equal(A.indices, T.indices):
        # (a + b) / 2 and (b + a) / 2 are the same float: exactly symmetric
        # (A's index arrays shared: nothing in ddops writes to them, see as_matrix)
        return sp.csr_matrix(((A.data + T.data) * 0.5, A.indices, A.indptr), shape=A.shape)
    return ((A + T) * 0.5).tocsr()


#: While a block of :func:`checked_once` or :func:`exactly_symmetric` runs: its matrix,
#: where its arrays lie, whether :func:`check_matrix` passed it and whether it is known to
#: be exactly symmetric (pattern included); None outside.
_CHECKED: contextvars.ContextVar = contextvars.ContextVar("ddops_checked_matrix",
                                                          default=None)


def _memory(A: sp.csr_matrix) -> tuple:
    """Where the arrays of ``A`` lie (address, length and dtype of each): the same for every
    wrapper of the same arrays (``csr_matrix(A)`` holds views of them, not the objects)."""
    return tuple((a.__array_interface__["data"][0], a.size, a.dtype.str)
                 for a in (A.data, A.indices, A.indptr))


def _vouched(A: sp.csr_matrix) -> bool | None:
    """True: ``A`` has the arrays of the matrix of the enclosing :func:`checked_once`;
    False: of :func:`exactly_symmetric` only; None: neither."""
    held = _CHECKED.get()
    if held is None or held[1] != _memory(A):
        return None
    return held[2]


def known_exactly_symmetric(A: sp.csr_matrix) -> bool:
    """Whether ``A`` has the arrays of the matrix of an enclosing :func:`exactly_symmetric`
    (also inside a :func:`checked_once` of it): ``A = A^T`` exactly, pattern included, so
    a caller that needs its symmetric pattern need not transpose it to find out."""
    held = _CHECKED.get()
    return held is not None and held[1] == _memory(A) and held[3]


@contextlib.contextmanager
def _holding(A: sp.csr_matrix, checked: bool, symmetric: bool) -> Iterator[sp.csr_matrix]:
    # (the matrix itself is held too: its memory cannot be reused by another one meanwhile)
    token = _CHECKED.set((A, _memory(A), checked, symmetric))
    try:
        yield A
    finally:
        _CHECKED.reset(token)


@contextlib.contextmanager
def checked_once(A: Any) -> Iterator[sp.csr_matrix]:
    """Check ``A`` once (:func:`check_matrix`) for a whole construction.

    Yields the checked matrix; inside the block, :func:`check_matrix` of a matrix with
    the same arrays (the builders pass it on to one another, rewrapped) returns it without
    checking it again: a GDSW set-up of 3D elasticity (227,448 unknowns) checked the
    symmetry of ``A`` three times, a transpose of 8 M nonzeros each (0.36 s of 4.9 s).
    Nothing may write to the arrays inside the block.
    """
    A = check_matrix(A)
    with _holding(A, True, known_exactly_symmetric(A)) as checked:
        yield checked


@contextlib.contextmanager
def exactly_symmetric(A: sp.csr_matrix) -> Iterator[sp.csr_matrix]:
    """Inside the block, :func:`check_matrix` of a matrix with the arrays of ``A`` (float64
    CSR, canonical) skips its symmetry test: the caller has made ``A`` exactly symmetric
    (:func:`symmetric_part`, or checked ``A == A^T``).  The other checks still run, unless
    an enclosing :func:`checked_once` of the same matrix passed them already.  The pattern
    is then known to be symmetric too (:func:`known_exactly_symmetric`)."""
    with _holding(A, _vouched(A) is True, True) as held:
        yield held


def check_matrix(A: Any, rows: bool = True) -> sp.csr_matrix:
    """Square, finite, symmetric ``A`` as float64 CSR with canonical indices and no zeros.

    With ``rows``, also no empty row and a positive diagonal (``interface_components``
    passes ``rows=False``: it also classifies the rows a rank owns of a matrix whose other
    rows are empty).  Raises ValueError naming what is wrong.  Inside
    :func:`checked_once` the matrix it checked passes at once; inside
    :func:`exactly_symmetric` its matrix skips the symmetry test.
    """
    A, _ = as_matrix(A, "A")
    vouched = _vouched(A)
    if vouched:
        return A
    if rows:
        check_no_empty_rows(A, "A")
        check_positive_diagonal(A)
    if A.nnz and not np.all(A.data):  # explicit zeros: dropped on a copy (A may share arrays)
        A = A.copy()
        A.eliminate_zeros()
    if vouched is False:  # exactly symmetric, and A has no explicit zero (the same arrays)
        return A
    scale = float(np.abs(A.data).max()) if A.nnz else 0.0
    asym, _ = symmetry_defect(A)
    if asym > np.sqrt(np.finfo(np.float64).eps) * scale:
        raise ValueError(f"A is not symmetric: max |A - A^T| = {asym:.3e} against max |A| = "
                         f"{scale:.3e}; the GDSW coarse spaces need an SPD matrix")
    return A


def check_positive_diagonal(A: sp.csr_matrix) -> None:
    """Refuse a non-positive diagonal entry: ``A`` is then not positive (semi)definite.

    The one-line test where ``A`` enters the coarse-space construction (and
    :class:`~ddops.TwoLevelSchwarz`'s set-up of one, before its local factors), so that
    ``-A`` is named as not positive definite instead of as a singular interior or
    subdomain matrix later (a zero diagonal of a positive semidefinite matrix means an
    empty row, refused before).
    """
    diag = A.diagonal()
    bad = np.flatnonzero(~(diag > 0))
    if bad.size:
        i = int(bad[0])
        more = f" (and {bad.size - 1} more)" if bad.size > 1 else ""
        raise ValueError(f"A is not positive definite: its diagonal entry A[{i}, {i}] = "
                         f"{diag[i]:.3e} is not positive{more}; the coarse spaces need a "
                         "symmetric positive definite A")


def check_owner(owner: Any, n: int) -> np.ndarray:
    """``owner`` as ``n`` non-negative int64 part labels, or a ValueError/TypeError naming it."""
    owner = np.asarray(owner)
    if owner.ndim != 1 or owner.shape[0] != n:
        raise ValueError(f"owner must have shape ({n},) (one part label per unknown), got "
                         f"shape {owner.shape}")
    if owner.size and owner.dtype.kind not in "iu":
        raise TypeError(f"owner must hold integer part labels, got dtype {owner.dtype}")
    owner = owner.astype(np.int64)
    if owner.size and owner.min() < 0:
        raise ValueError(f"owner labels must be >= 0, got {owner.min()}")
    return owner


def check_null_space(null_space: Any, n: int) -> np.ndarray:
    """The null space as ``n x k`` float64; the constants (``n x 1`` ones) for None."""
    return np.ones((n, 1)) if null_space is None else as_vectors(null_space, n, "null_space")
