"""A scipy ``LinearOperator`` whose public products work on numpy or cupy arrays.

scipy's public ``matvec`` converts its input with ``numpy.asanyarray``, which
CuPy refuses.  :class:`BackendLinearOperator` replaces the public products by
validated, backend-aware versions that call one method, ``_apply``, on
``(n, B)`` blocks; scipy's solvers (and cupyx's, which accept any object with
``shape`` and ``matvec``) use it unchanged.  Every square operator of ddops
(Schwarz attention, the global baseline, the classical preconditioners)
derives from it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.sparse.linalg import LinearOperator

from ._validation import check_finite, check_int
from .backend import check_backend, get_array_module, to_numpy

__all__ = ["DENSE_LIMIT_BYTES", "BackendLinearOperator"]

#: Largest dense matrix (in bytes) that ``to_dense`` builds unless the caller
#: raises the limit.
DENSE_LIMIT_BYTES = 2**30


class BackendLinearOperator(LinearOperator):
    """Square operator on the numpy or cupy backend (not instantiated directly).

    Subclasses implement ``_apply(X, adjoint, **options)`` for a C-contiguous
    block ``X`` of shape ``(n, B)`` already on the backend and of the
    operator's dtype.

    Parameters
    ----------
    n : int
        Size of the operator.
    dtype : numpy dtype
        Floating-point type of the products.
    backend : {"numpy", "cupy"}
        Where the arrays live.
    """

    def __init__(self, n: int, dtype: Any, backend: str) -> None:
        self.backend = check_backend(backend)
        self.xp = get_array_module(backend=backend)
        super().__init__(dtype=np.dtype(dtype), shape=(n, n))

    def _apply(self, X: Any, adjoint: bool, **options: Any) -> Any:
        raise NotImplementedError

    def _check_input(self, x: Any, name: str = "x") -> Any:
        """Move ``x`` to the backend and check its type, shape and finiteness."""
        xp = self.xp
        if get_array_module(x) is not xp:
            x = xp.asarray(x)
        if x.dtype.kind not in "fiu":
            raise TypeError(f"{name} must be real, got dtype {x.dtype}")
        if x.ndim not in (1, 2) or x.shape[0] != self.shape[1]:
            raise ValueError(f"{name} must have shape ({self.shape[1]},) or "
                             f"({self.shape[1]}, B), got {x.shape}")
        check_finite(name, x)  # one pass over the input, cheap next to the product
        return xp.ascontiguousarray(x, dtype=self.dtype)

    def _run(self, x: Any, adjoint: bool, **options: Any) -> Any:
        x = self._check_input(x)
        if x.ndim == 1:
            return self._apply(x[:, None], adjoint, **options)[:, 0]
        return self._apply(x, adjoint, **options)

    def matvec(self, x: Any) -> Any:
        """``M x`` for a vector of length ``n`` (numpy or cupy)."""
        return self._run(x, adjoint=False)

    def rmatvec(self, x: Any) -> Any:
        """``M^T x``: the exact adjoint."""
        return self._run(x, adjoint=True)

    def matmat(self, X: Any) -> Any:
        """``M X`` for a block of columns ``X`` of shape ``(n, B)``."""
        return self._run(X, adjoint=False)

    def rmatmat(self, X: Any) -> Any:
        """``M^T X`` for a block of columns."""
        return self._run(X, adjoint=True)

    def dot(self, x: Any) -> Any:
        """``M @ x`` for arrays; composition for operators and scalars, as in scipy."""
        if isinstance(x, LinearOperator) or np.isscalar(x):
            return super().dot(x)
        return self._run(x, adjoint=False)

    __call__ = dot
    __matmul__ = dot

    def _matvec(self, x: Any) -> Any:
        return self._apply(self.xp.asarray(x, dtype=self.dtype).reshape(-1, 1), False)[:, 0]

    def _rmatvec(self, x: Any) -> Any:
        return self._apply(self.xp.asarray(x, dtype=self.dtype).reshape(-1, 1), True)[:, 0]

    def _matmat(self, X: Any) -> Any:
        return self._apply(self.xp.ascontiguousarray(X, dtype=self.dtype), False)

    def _rmatmat(self, X: Any) -> Any:
        return self._apply(self.xp.ascontiguousarray(X, dtype=self.dtype), True)

    def _adjoint(self) -> LinearOperator:
        return _Adjoint(self)

    def aspreconditioner(self) -> BackendLinearOperator:
        """Return ``self``, for use as ``M=`` in a Krylov solver (pyamg style)."""
        return self

    def _dense(self, max_bytes: int | None, **options: Any) -> np.ndarray:
        limit = DENSE_LIMIT_BYTES if max_bytes is None else check_int("max_bytes", max_bytes)
        n = self.shape[0]
        need = n * n * self.dtype.itemsize
        if need > limit:
            raise ValueError(
                f"to_dense: a {n} x {n} dense matrix needs {need / 2**30:.2f} GiB, above the "
                f"limit of {limit / 2**30:.2f} GiB; pass max_bytes= to raise it"
            )
        return to_numpy(self._apply(self.xp.eye(n, dtype=self.dtype), False, **options))

    def to_dense(self, max_bytes: int | None = None) -> np.ndarray:
        """Assemble the operator as a dense numpy array (small sizes, inspection, tests).

        Parameters
        ----------
        max_bytes : int, optional
            Refuse to build a matrix larger than this (default
            :data:`DENSE_LIMIT_BYTES`); raise it to assemble bigger ones.
        """
        return self._dense(max_bytes)


class _Adjoint(LinearOperator):
    """``M^T`` of a :class:`BackendLinearOperator`, backend-aware like its parent."""

    def __init__(self, op: BackendLinearOperator) -> None:
        self.op = op
        super().__init__(dtype=op.dtype, shape=op.shape[::-1])

    def matvec(self, x: Any) -> Any:
        return self.op.rmatvec(x)

    def rmatvec(self, x: Any) -> Any:
        return self.op.matvec(x)

    matmat, rmatmat = matvec, rmatvec

    def _matvec(self, x: Any) -> Any:
        return self.op._rmatvec(x)

    def _rmatvec(self, x: Any) -> Any:
        return self.op._matvec(x)

    def _matmat(self, X: Any) -> Any:
        return self.op._rmatmat(X)

    def _rmatmat(self, X: Any) -> Any:
        return self.op._matmat(X)

    def _adjoint(self) -> LinearOperator:
        return self.op
