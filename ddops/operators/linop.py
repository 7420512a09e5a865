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
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator

from .._validation import check_finite, check_int
from ..backend import _is_cupy_object, check_backend, get_array_module, to_numpy

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

    def _check_input(self, x: Any, name: str = "x", shape: str = "any") -> Any:
        """Move ``x`` to the backend and check its type, shape and finiteness.

        ``x`` may be anything :func:`numpy.asarray` accepts (lists, tuples,
        ``np.matrix``, objects with ``__array__``), a numpy or cupy array, or
        a scipy or cupyx sparse matrix, which is densified: the product of an
        ``n x B`` block is a dense ``n x B`` block anyway.  Integers and
        booleans are cast to the operator's dtype; complex values are refused
        (the operators are real).

        Parameters
        ----------
        shape : {"any", "vector", "block"}
            Accepted shapes: ``(n,)`` or ``(n, B)``; ``(n,)`` or ``(n, 1)``
            (``matvec``, as in scipy); ``(n, B)`` (``matmat``).
        """
        xp, n = self.xp, self.shape[1]
        if sp.issparse(x) or (_is_cupy_object(x) and hasattr(x, "toarray")):
            x = x.toarray()
        if not isinstance(x, xp.ndarray) or isinstance(x, np.matrix):
            x = to_numpy(x)  # a device array for a host operator comes to the host
            try:
                x = np.asarray(x)
            except (TypeError, ValueError) as exc:  # ragged lists, non-numeric objects
                raise TypeError(f"{name} must be an array of real numbers: {exc}") from None
            if x.dtype.kind in "fiub":
                x = xp.asarray(x)
        if x.dtype.kind not in "fiub":
            raise TypeError(f"{name} must be real, got dtype {x.dtype}")
        expected = {"any": f"({n},) or ({n}, B)", "vector": f"({n},) or ({n}, 1)",
                    "block": f"({n}, B)"}[shape]
        ndims = {"any": (1, 2), "vector": (1, 2), "block": (2,)}[shape]
        if (x.ndim not in ndims or x.shape[0] != n
                or (shape == "vector" and x.ndim == 2 and x.shape[1] != 1)):
            raise ValueError(f"{name} must have shape {expected}, got {x.shape}")
        check_finite(name, x)  # one pass over the input, cheap next to the product
        return xp.ascontiguousarray(x, dtype=self.dtype)

    def _run(self, x: Any, adjoint: bool, name: str = "x", shape: str = "any",
             keep_matrix: bool = True, **options: Any) -> Any:
        # scipy returns an np.matrix for an np.matrix from matvec/matmat (not from dot)
        matrix = keep_matrix and isinstance(x, np.matrix)
        x = self._check_input(x, name, shape)
        if x.ndim == 1:
            y = self._apply(x[:, None], adjoint, **options)[:, 0]
        else:
            y = self._apply(x, adjoint, **options)
        return np.asmatrix(y) if matrix and isinstance(y, np.ndarray) else y

    def matvec(self, x: Any) -> Any:
        """``M x`` for ``x`` of shape ``(n,)`` or ``(n, 1)``; the result has the same shape.

        Accepts what :meth:`scipy.sparse.linalg.LinearOperator.matvec` accepts
        (lists, any array-like, ``np.matrix``, which gives an ``np.matrix``
        back) plus numpy or cupy arrays on either backend and sparse vectors
        (densified).  The result lives on the operator's backend and has its
        dtype.

        Raises
        ------
        TypeError
            ``x`` is not real (complex, object or string data).
        ValueError
            Wrong shape, or NaN or inf in ``x``.
        """
        return self._run(x, adjoint=False, shape="vector")

    def rmatvec(self, x: Any) -> Any:
        """``M^T x``: the exact adjoint; inputs and shapes as in :meth:`matvec`."""
        return self._run(x, adjoint=True, shape="vector")

    def matmat(self, X: Any) -> Any:
        """``M X`` for a block ``X`` of shape ``(n, B)``, returned as ``(n, B)``.

        Accepts what :meth:`scipy.sparse.linalg.LinearOperator.matmat` accepts
        (nested lists, any 2-D array-like, ``np.matrix``, which gives an
        ``np.matrix`` back); a scipy or cupyx sparse ``X`` is densified first
        (the product is a dense block anyway).  See :meth:`matvec`.
        """
        return self._run(X, adjoint=False, name="X", shape="block")

    def rmatmat(self, X: Any) -> Any:
        """``M^T X`` for a block of columns; inputs as in :meth:`matmat`."""
        return self._run(X, adjoint=True, name="X", shape="block")

    def dot(self, x: Any) -> Any:
        """``M @ x`` for arrays; composition for operators and scalars, as in scipy."""
        if isinstance(x, LinearOperator) or np.isscalar(x):
            return super().dot(x)
        return self._run(x, adjoint=False, keep_matrix=False)

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

    def matmat(self, X: Any) -> Any:
        return self.op.rmatmat(X)

    def rmatmat(self, X: Any) -> Any:
        return self.op.matmat(X)

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
