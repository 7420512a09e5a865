"""``ddops precond --matrix``: a user's matrix and the files that go with it.

:func:`read_matrix_files` reads the matrix, the right-hand side, the coordinates,
the null space and the kernel once, while the configuration is validated, checks
them (finite, symmetric to rounding, a positive diagonal and, without ``--kernel``,
not singular) and keeps them for the run that follows;
:func:`block_structure` spots a vector problem given without ``--block-size``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

from ..._validation import check_int

if TYPE_CHECKING:
    from .config import PrecondConfig

__all__ = ["MATRIX_NULL_SPACES", "MATRIX_KERNELS", "KERNEL_HINT", "read_matrix_files",
           "block_structure"]

#: Named null spaces of ``--null-space`` with ``--matrix`` (or a ``.npy`` file): ``rigid``
#: (alias ``rbm``) needs ``--coordinates`` and ``--block-size`` 2 or 3.
MATRIX_NULL_SPACES = ("constants", "rigid", "rbm")

#: Named kernels of ``--kernel`` (or a ``.npy`` file); ``constants``: a pure-Neumann
#: problem (``block_size`` constant vectors, one per component).
MATRIX_KERNELS = ("constants",)

#: What ``ddops precond`` says to do about a singular matrix (the flag, not ``kernel=``).
KERNEL_HINT = "pass --kernel constants|FILE (the vectors the matrix annihilates)"

_USER_FILES: dict[tuple, dict[str, Any]] = {}


def read_matrix_files(c: PrecondConfig) -> dict[str, Any]:
    """Read and check the files of ``matrix=FILE`` (cached for the run that follows).

    Parameters
    ----------
    c : PrecondConfig
        Settings being validated: ``matrix``, ``rhs``, ``coordinates``, ``block_size``
        (set to 1 here when None), ``null_space`` and ``kernel``.

    Returns
    -------
    dict
        ``A`` (the checked matrix, CSR float64), ``rhs``, ``X`` (coordinates, one row per
        node), ``Z`` (null space) and ``K`` (kernel), None where not given.  A second
        call with the same files, unchanged on disk, returns the same dictionary.

    Raises
    ------
    ValueError
        A file that cannot be read, or a matrix that is not finite, symmetric to rounding,
        with a positive diagonal, or (without ``kernel``) not singular.
    """
    from ... import problems

    c.block_size = 1 if c.block_size is None else check_int("block_size", c.block_size,
                                                              minimum=1)
    key = tuple(getattr(c, k) for k in ("matrix", "rhs", "coordinates", "block_size",
                                        "null_space", "kernel"))
    stamp = tuple(os.stat(p).st_mtime_ns if isinstance(p, str) and os.path.isfile(p) else None
                  for p in key)
    if _USER_FILES.get("key") == (key, stamp):
        return _USER_FILES["files"]
    A = _checked_matrix(problems.load_matrix(c.matrix, "matrix"), c.matrix)
    n = A.shape[0]
    b = c.block_size
    if n % b:
        raise ValueError(f"block_size={b} does not divide the {n} unknowns of the matrix")
    rhs = None if c.rhs is None else problems.load_array(c.rhs, "rhs", rows=n, ndim=(1,))
    X = None
    if c.coordinates is not None:
        X = problems.load_array(c.coordinates, "coordinates", ndim=(1, 2))
        X = X[:, None] if X.ndim == 1 else X
        if X.shape[0] == n and b > 1:
            X = X[::b]  # one row per unknown: the node's row
        if X.shape[0] != n // b:
            raise ValueError(f"coordinates: {X.shape[0]} rows; the matrix has {n // b} nodes "
                             f"({n} unknowns, block_size {b})")
    Z = _named_vectors(c.null_space, "null_space", MATRIX_NULL_SPACES, n, b, X)
    K = _named_vectors(c.kernel, "kernel", MATRIX_KERNELS, n, b, X)
    if K is None:
        _check_not_singular(A, b, Z)
    files = {"A": A, "rhs": rhs, "X": X, "Z": Z, "K": K}
    _USER_FILES.clear()
    _USER_FILES.update(key=(key, stamp), files=files)
    return files


def _checked_matrix(A: Any, path: str) -> Any:
    """The file's matrix checked once, up front, naming ``--matrix`` (``matrix:``): finite,
    symmetric to rounding (the tolerance of :class:`~ddops.precond.schwarz.TwoLevelSchwarz`),
    a positive diagonal.  Found later, the same defects were blamed on the first row that
    met them (``Jacobi: A contains NaN or inf``) after other rows had run."""
    import scipy.sparse as sp

    from ...dd.gdsw import symmetry_defect

    name = f"matrix: {os.path.basename(path)!r}"
    A = sp.csr_matrix(A, dtype=np.float64, copy=True)
    A.sum_duplicates()
    bad = ~np.isfinite(A.data)
    if bad.any():
        rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))[bad]
        more = f" (and {bad.sum() - 1} more)" if bad.sum() > 1 else ""
        raise ValueError(f"{name} contains NaN or inf (row {int(rows[0])}{more})")
    scale = float(np.abs(A.data).max()) if A.nnz else 0.0
    asym, _ = symmetry_defect(A)
    if asym > np.sqrt(np.finfo(np.float64).eps) * scale:
        raise ValueError(f"{name} is not symmetric: max |A - A^T| = {asym:.3e} against "
                         f"max |A| = {scale:.3e}; the Schwarz preconditioners and CG need a "
                         "symmetric positive (semi)definite matrix")
    low = np.flatnonzero(A.diagonal() <= 0)
    if low.size:
        more = f" (and {low.size - 1} more)" if low.size > 1 else ""
        raise ValueError(f"{name}: diagonal entry {int(low[0])} is "
                         f"{A[int(low[0]), int(low[0])]:g}{more}; a symmetric positive "
                         "(semi)definite matrix has a positive diagonal (an empty row or a "
                         "negative-definite sign convention: pass the matrix of -A)")
    return A


def _check_not_singular(A: Any, b: int, Z: np.ndarray | None) -> None:
    """Refuse a matrix without ``--kernel`` that annihilates the constants (one per
    component) or a column of the null space: every row would run to the iteration cap
    (a random right-hand side is inconsistent) and the two-level rows would stop at a
    singular coarse matrix."""
    from ...dd.kernel import KERNEL_RTOL
    from ...precond.schwarz import zero_energy_defects

    n = A.shape[0]
    probes = [np.kron(np.ones((n // b, 1)), np.eye(b))]
    names = ["the constant vector" if b == 1 else f"constant component {j}" for j in range(b)]
    if Z is not None:
        probes.append(Z)
        names += [f"column {j} of the null space" for j in range(Z.shape[1])]
    defects = zero_energy_defects(A, np.hstack(probes))
    hit = np.flatnonzero(defects <= KERNEL_RTOL)
    if hit.size:
        j = int(hit[0])
        raise ValueError(f"matrix: A is singular: it annihilates {names[j]} "
                         f"(max_i |A z|_i / (|A| |z|)_i = {defects[j]:.1e}); {KERNEL_HINT}")


def block_structure(A: Any, sizes: tuple[int, ...] = (2, 3)) -> int | None:
    """The unknowns per node of a vector problem stored without ``--block-size``, or None.

    With ``b`` unknowns per node, interleaved, the rows ``b g, ..., b g + b - 1`` of node
    ``g`` couple with the same nodes (columns ``j`` read as nodes ``j // b``; exact zeros,
    such as the cancelled couplings of P1 elasticity, make the entry patterns differ);
    the largest such ``b`` of ``sizes``.  Whole-array comparisons, no loop over rows.

    Parameters
    ----------
    A : scipy.sparse.csr_matrix
        The matrix.
    sizes : tuple of int
        The block sizes tried.

    Returns
    -------
    int or None
        The largest block size of ``sizes`` whose row groups couple with the same nodes,
        or None.
    """
    import scipy.sparse as sp

    n = A.shape[0]
    row = np.repeat(np.arange(n), np.diff(A.indptr))
    found = None
    for b in sizes:
        if n % b or n // b < 2:
            continue
        # the nodes each row couples with: a pattern (n x n/b), sorted, duplicates merged
        P = sp.csr_matrix((np.ones(A.nnz), (row, A.indices // b)), shape=(n, n // b))
        P.sum_duplicates()
        counts = np.diff(P.indptr)
        groups = counts.reshape(-1, b)
        if not np.all(groups == groups[:, :1]) or np.all(counts == n // b):
            continue  # different node counts within a group, or every node everywhere
        prow = np.repeat(np.arange(n), counts)
        first = P.indptr[(prow // b) * b] + np.arange(P.nnz) - P.indptr[prow]
        if np.array_equal(P.indices, P.indices[first]):
            found = b
    return found


def _named_vectors(value: str | None, name: str, named: tuple[str, ...], n: int, b: int,
                   X: np.ndarray | None) -> np.ndarray | None:
    """``--null-space`` / ``--kernel``: a name of ``named`` or a ``.npy``/``.mtx`` file."""
    from ... import problems

    if value is None:
        return None
    if value == "constants":
        return np.kron(np.ones((n // b, 1)), np.eye(b))
    if value in ("rigid", "rbm") and value in named:
        if X is None or b not in (2, 3) or X.shape[1] != b:
            raise ValueError(f"{name}: 'rigid' needs coordinates=FILE with {b if b > 1 else 2} "
                             "or 3 columns and block_size equal to the dimension (2 or 3)")
        return problems.rigid_body_modes(X)
    if not value.lower().endswith((".npy", ".mtx")):
        raise ValueError(f"{name} must be one of {named} or a .npy/.mtx file, got {value!r}")
    Z = problems.load_array(value, name, rows=n, ndim=(1, 2))
    return Z[:, None] if Z.ndim == 1 else Z
