"""The 1D Poisson model problem and a fast exact solver for many right-hand sides."""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp

from .._validation import check_choice, check_int

__all__ = ["KINDS", "num_dofs", "mesh_size", "grid_points", "poisson_1d", "PoissonSolver"]

#: The two discretisation conventions: ``"element"`` (paper v2: ``n`` line
#: elements, ``n - 1`` unknowns, ``h = 1/n``) and ``"dof"`` (paper v1: ``n``
#: interior unknowns, ``h = 1/(n + 1)``).
KINDS = ("element", "dof")


def num_dofs(n: int, kind: str = "element") -> int:
    """Number of unknowns for ``n`` in the given convention."""
    check_choice("kind", kind, KINDS)
    return n - 1 if kind == "element" else n


def mesh_size(n: int, kind: str = "element") -> float:
    """Mesh width ``h``: ``1/n`` (element) or ``1/(n + 1)`` (dof)."""
    check_choice("kind", kind, KINDS)
    return 1.0 / n if kind == "element" else 1.0 / (n + 1)


def grid_points(n: int, kind: str = "element") -> np.ndarray:
    """Coordinates of the unknowns in (0, 1): ``x_j = (j + 1) h``."""
    h = mesh_size(n, kind)
    return h * np.arange(1, num_dofs(n, kind) + 1)


def _check_n(n: int, kind: str) -> int:
    n = check_int("n", n)
    low = 2 if kind == "element" else 1
    if n < low:
        raise ValueError(f"n must be >= {low} for kind={kind!r} (at least one unknown), got {n}")
    return n


def poisson_1d(n: int, kind: str = "element", dtype=np.float64) -> sp.csr_matrix:
    """The finite-difference Poisson matrix ``A = h^-2 tridiag(-1, 2, -1)``.

    Parameters
    ----------
    n : int
        Number of line elements (``kind="element"``) or of interior unknowns
        (``kind="dof"``).
    kind : {"element", "dof"}
        Discretisation convention, see :data:`KINDS`.
    dtype : numpy dtype
        Floating-point type of the entries.

    Returns
    -------
    scipy.sparse.csr_matrix
        Symmetric positive definite matrix of size ``num_dofs(n, kind)``.
    """
    check_choice("kind", kind, KINDS)
    n = _check_n(n, kind)
    m = num_dofs(n, kind)
    h = mesh_size(n, kind)
    main = np.full(m, 2.0 / h**2)
    off = np.full(m - 1, -1.0 / h**2)
    return sp.diags([off, main, off], [-1, 0, 1], format="csr", dtype=dtype)


class PoissonSolver:
    """Exact solves with the 1D Poisson matrix for blocks of right-hand sides.

    A banded Cholesky factorisation (LAPACK ``pbtrf``) is computed once; each
    call runs one ``pbtrs`` over all columns, O(n B) work and no dense inverse.

    Parameters
    ----------
    n : int
        Problem size, as in :func:`poisson_1d`.
    kind : {"element", "dof"}
        Discretisation convention.
    """

    def __init__(self, n: int, kind: str = "element") -> None:
        check_choice("kind", kind, KINDS)
        self.n = _check_n(n, kind)
        self.kind = kind
        self.num_dofs = num_dofs(n, kind)
        h = mesh_size(n, kind)
        ab = np.empty((2, self.num_dofs))
        ab[0, 0] = 0.0
        ab[0, 1:] = -1.0 / h**2
        ab[1, :] = 2.0 / h**2
        # upper-banded storage, as expected by cholesky_banded / cho_solve_banded
        self._cb = sla.cholesky_banded(ab, lower=False)

    def solve(self, F: np.ndarray) -> np.ndarray:
        """Return ``A^{-1} F`` for a vector or an ``num_dofs x B`` block."""
        F = np.asarray(F)
        if F.ndim not in (1, 2) or F.shape[0] != self.num_dofs:
            raise ValueError(
                f"F must have shape ({self.num_dofs},) or ({self.num_dofs}, B), got {F.shape}"
            )
        if not np.all(np.isfinite(F)):
            raise ValueError("F contains NaN or inf")
        out = sla.cho_solve_banded((self._cb, False), F.astype(np.float64, copy=False))
        return out.astype(np.result_type(F.dtype, np.float32), copy=False)

    __call__ = solve
