"""Array-module selection: numpy/scipy on the CPU, cupy/cupyx on a GPU.

Everything that depends on the array library goes through this module, so the
rest of the package is written once against the numpy API.  The CuPy import is
guarded: a missing or broken CuPy installation never breaks the CPU path.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np
import scipy.sparse as sp

__all__ = [
    "BACKENDS",
    "cupy_available",
    "get_array_module",
    "get_sparse_module",
    "to_numpy",
    "asarray",
    "check_backend",
    "spmm",
    "take_rows",
]

#: Backend names accepted wherever a ``backend=`` argument is taken.
BACKENDS = ("numpy", "cupy")

try:  # pragma: no cover - exercised only where CuPy is installed
    import cupy as _cp
    import cupyx.scipy.sparse as _cpsp

    try:
        _CUPY_OK = _cp.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no driver, no device
        _CUPY_OK = False
except Exception:  # ImportError, or a broken CUDA installation
    _cp = None
    _cpsp = None
    _CUPY_OK = False


try:  # scipy's C kernel behind ``csr @ dense``, called directly to write into a buffer
    from scipy.sparse._sparsetools import csr_matvecs as _csr_matvecs
except ImportError:  # pragma: no cover - a future scipy may move it; fall back to ``@``
    _csr_matvecs = None


def spmm(A: Any, X: Any, out: Any = None, accumulate: bool = False) -> Any:
    """Sparse (CSR) times dense block, optionally into a preallocated ``out``.

    On the CPU, writing into a reused buffer avoids allocating (and page
    faulting) a fresh output every call, which dominates small products.  On
    the GPU (cuSPARSE) and whenever the fast path does not apply, this is
    ``A @ X`` (copied into ``out`` when one is given).

    Parameters
    ----------
    A : scipy or cupyx CSR matrix
        ``m x k``.
    X : array
        ``k x B`` dense block, C-contiguous.
    out : array, optional
        ``m x B`` C-contiguous buffer of the result type.
    accumulate : bool
        Add the product to ``out`` instead of overwriting it.
    """
    if A.nnz == 0:  # e.g. no overlap: skip the sparse kernel (and cuSPARSE's empty case)
        if out is None:
            return get_array_module(X).zeros((A.shape[0], X.shape[1]),
                                              dtype=np.result_type(A.dtype, X.dtype))
        if not accumulate:
            out.fill(0)
        return out
    if (out is not None and _csr_matvecs is not None and sp.isspmatrix_csr(A)
            and isinstance(X, np.ndarray) and X.flags.c_contiguous and out.flags.c_contiguous
            and X.dtype == A.dtype == out.dtype and X.ndim == 2):
        if not accumulate:
            out.fill(0)
        _csr_matvecs(A.shape[0], A.shape[1], X.shape[1], A.indptr, A.indices, A.data,
                     X.ravel(), out.ravel())
        return out
    result = A @ X
    if out is None:
        return result
    if accumulate:
        out += result
    else:
        out[...] = result
    return out


def take_rows(A: Any, index: Any, out: Any = None) -> Any:
    """``A[index]`` along the first axis, written into ``out`` when given.

    numpy's ``take`` buffers its output when ``mode="raise"`` (the default)
    and ``out`` is given; the indices here are built in range, so ``"clip"``
    writes straight into ``out`` (2-3x faster for large blocks).
    """
    if isinstance(A, np.ndarray):
        return np.take(A, index, axis=0, out=out, mode="clip")
    return get_array_module(A).take(A, index, axis=0, out=out)


def cupy_available() -> bool:
    """Return True when CuPy imports and sees at least one GPU."""
    return _CUPY_OK


def check_backend(backend: str) -> str:
    """Validate a backend name and return it.

    Raises
    ------
    ValueError
        If ``backend`` is not one of :data:`BACKENDS`, or is ``"cupy"`` while
        CuPy or a GPU is unavailable.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "cupy" and not _CUPY_OK:
        raise ValueError("backend='cupy' requested but CuPy with a GPU is not available")
    return backend


def get_array_module(x: Any = None, backend: str | None = None) -> ModuleType:
    """Return ``numpy`` or ``cupy``.

    Parameters
    ----------
    x : array, optional
        If given, the module that owns this array.
    backend : {"numpy", "cupy"}, optional
        If given (and ``x`` is not), the module for this backend name.
    """
    if backend is not None:
        return _cp if check_backend(backend) == "cupy" else np
    if _cp is not None and x is not None and isinstance(x, _cp.ndarray):
        return _cp
    return np


def get_sparse_module(backend: str = "numpy") -> ModuleType:
    """Return ``scipy.sparse`` or ``cupyx.scipy.sparse`` for a backend name."""
    return _cpsp if check_backend(backend) == "cupy" else sp


def asarray(x: Any, backend: str = "numpy", dtype: Any = None) -> Any:
    """Move ``x`` (dense or scipy CSR) to ``backend``; a no-op when already there."""
    xp = get_array_module(backend=backend)
    if sp.issparse(x):
        x = x.tocsr()
        if dtype is not None:
            x = x.astype(dtype)
        return _cpsp.csr_matrix(x) if backend == "cupy" else x
    return xp.asarray(x, dtype=dtype)


def to_numpy(x: Any) -> Any:
    """Return a numpy array (or scipy sparse matrix) for a numpy or cupy object."""
    if _cp is not None:
        if isinstance(x, _cp.ndarray):
            return _cp.asnumpy(x)
        if _cpsp is not None and _cpsp.issparse(x):
            return x.get()
    return x
