"""Array-module selection: numpy/scipy on the CPU, cupy/cupyx on a GPU.

Everything that depends on the array library goes through this module, so the
rest of the package is written once against the numpy API.  CuPy is imported
lazily, on the first use of the CuPy backend (``backend="cupy"``,
:func:`cupy_available`, or a CuPy array handed to a product), never by
``import ddops``: a missing, broken or hanging CuPy installation cannot break
or slow down the CPU path.  When the import fails, the reason (the original
exception text) is kept and repeated in the "not available" error.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Any

import numpy as np
import scipy.sparse as sp

__all__ = [
    "BACKENDS",
    "SPGEMM_BLOCK_ENTRIES",
    "cupy_available",
    "cupy_unavailable_reason",
    "get_array_module",
    "get_sparse_module",
    "row_bounds",
    "to_numpy",
    "asarray",
    "check_backend",
    "spgemm",
    "spmm",
    "take_rows",
]

#: Backend names accepted wherever a ``backend=`` argument is taken.
BACKENDS = ("numpy", "cupy")

# Filled in by _load_cupy() on first use; never touched by ``import ddops``.
_cp: Any = None
_cpsp: Any = None
_CUPY_OK = False
_CUPY_REASON: str | None = None  # why CuPy is unusable (None: not tried yet, or usable)
_CUPY_TRIED = False
_CUPY_LOCK = threading.Lock()


def _load_cupy() -> ModuleType | None:
    """Import CuPy once and query the GPUs; return the module, or None if it failed.

    Any exception of the import (ImportError, or whatever a broken CUDA
    installation raises) is caught and its text kept for
    :func:`cupy_unavailable_reason`.
    """
    global _cp, _cpsp, _CUPY_OK, _CUPY_REASON, _CUPY_TRIED
    if _CUPY_TRIED:
        return _cp
    with _CUPY_LOCK:
        if _CUPY_TRIED:
            return _cp
        try:
            import cupy
            import cupyx.scipy.sparse
        except Exception as exc:  # a broken installation may raise anything
            _CUPY_REASON = f"importing cupy failed: {type(exc).__name__}: {exc}"
        else:
            _cp, _cpsp = cupy, cupyx.scipy.sparse
            try:
                count = int(cupy.cuda.runtime.getDeviceCount())
            except Exception as exc:  # no driver, no device
                _CUPY_REASON = (f"cupy imported but querying the GPUs failed: "
                                f"{type(exc).__name__}: {exc}")
            else:
                _CUPY_OK = count > 0
                if not _CUPY_OK:
                    _CUPY_REASON = "cupy imported but sees no GPU"
        _CUPY_TRIED = True
    return _cp


def _is_cupy_object(x: Any) -> bool:
    """Whether ``x`` is a CuPy array or cupyx sparse matrix, without importing CuPy.

    A CuPy object can only exist once CuPy has been imported, so a look at the
    module of its type suffices.
    """
    return type(x).__module__.split(".", 1)[0] in ("cupy", "cupyx")


try:  # scipy's C kernels behind ``csr @ dense`` and ``csr @ csr``, called directly (to write
    # into a buffer; to skip the count of the product's entries)
    from scipy.sparse._sparsetools import csr_matmat as _csr_matmat
    from scipy.sparse._sparsetools import csr_matvecs as _csr_matvecs
except ImportError:  # pragma: no cover - a future scipy may move them; fall back to ``@``
    _csr_matmat = _csr_matvecs = None


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


#: :func:`spgemm` allocates the product's rows in blocks of at most this many entries of
#: their bound (or one row where a row's bound is more): each block's buffer (12 MiB of
#: float64 values and 32-bit indices) lives until its entries are copied out
SPGEMM_BLOCK_ENTRIES = 1 << 20


def row_bounds(P: sp.csr_matrix, Q: sp.csr_matrix) -> np.ndarray:
    """An upper bound on the entries of each row of ``P @ Q`` (CSR ``P`` and ``Q``): the
    row's multiplications (the lengths of ``Q``'s rows at ``P``'s columns, duplicates
    counted) and at most ``Q``'s columns; int64."""
    nonempty = np.flatnonzero(np.diff(P.indptr))
    bound = np.zeros(P.shape[0], dtype=np.int64)
    if nonempty.size:  # (reduceat's segments end where the next nonempty row starts)
        bound[nonempty] = np.add.reduceat(np.diff(Q.indptr)[P.indices[:P.indptr[-1]]],
                                          P.indptr[nonempty], dtype=np.int64)
    return np.minimum(bound, Q.shape[1], out=bound)


def spgemm(P: sp.spmatrix, Q: sp.spmatrix,
           workers: int | Callable[[], int] = 1) -> sp.csr_matrix:
    """``P @ Q`` of two scipy sparse matrices without scipy's count of the entries: the CSR
    matrix ``csr_matrix(P) @ csr_matrix(Q)``, bit for bit.

    scipy counts the product's entries in a first pass over every multiplication, to
    allocate the result exactly, and multiplies in a second.  Here each row's entries are
    bounded instead (:func:`row_bounds`), and the same scipy kernel multiplies block by
    block of rows (:data:`SPGEMM_BLOCK_ENTRIES` entries of the bound each) into a buffer of
    that bound, each block's entries then copied out: the same entries in the same order,
    without the first pass.  The copies and their concatenation hold the product's entries
    twice at the end, beside one buffer per thread.  The kernel releases the GIL, so with
    ``workers`` above one the blocks run side by side on that many threads (the same
    matrix).  Where scipy's kernels cannot be imported, scipy's ``@``.

    Parameters
    ----------
    P, Q : scipy sparse matrices
        ``m x k`` and ``k x n``.
    workers : int or callable
        Threads for the blocks, or a function that returns them, called only where there
        is more than one block (the set-up passes
        :func:`~ddops.linalg.parallel.chunk_workers`, its thread limit, which takes a
        millisecond to read).

    Returns
    -------
    scipy.sparse.csr_matrix
        ``m x n`` (column indices not necessarily sorted, as scipy's).
    """
    P, Q = sp.csr_matrix(P), sp.csr_matrix(Q)
    if P.shape[1] != Q.shape[0]:
        raise ValueError(f"spgemm: P is {P.shape} and Q is {Q.shape}; P's columns must be "
                         "Q's rows")
    m, n = P.shape[0], Q.shape[1]
    if _csr_matmat is None or P.nnz == 0 or Q.nnz == 0:
        return sp.csr_matrix(P @ Q)
    bound = row_bounds(P, Q)
    idx_dtype = (np.int32 if max(int(bound.sum()), m, n, P.shape[1], P.nnz, Q.nnz)
                 <= np.iinfo(np.int32).max else np.int64)
    dtype = np.result_type(P.dtype, Q.dtype)
    Pp, Pj, Px = (P.indptr.astype(idx_dtype, copy=False),
                  P.indices.astype(idx_dtype, copy=False), P.data.astype(dtype, copy=False))
    Qp, Qj, Qx = (Q.indptr.astype(idx_dtype, copy=False),
                  Q.indices.astype(idx_dtype, copy=False), Q.data.astype(dtype, copy=False))
    ends = np.concatenate(([0], np.cumsum(bound)))
    blocks = []  # (first row, row after the last) of each block
    start = 0
    while start < m:  # the rows whose bound fits the block (one row at least)
        stop = max(int(np.searchsorted(ends, ends[start] + SPGEMM_BLOCK_ENTRIES,
                                       side="right")) - 1, start + 1)
        blocks.append((start, stop))
        start = stop

    def multiply(start: int, stop: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        size = int(ends[stop] - ends[start])
        Cp = np.empty(stop - start + 1, dtype=idx_dtype)
        Cj, Cx = np.empty(size, dtype=idx_dtype), np.empty(size, dtype=dtype)
        # (P's pointers of these rows are offsets into all of P's indices: no copy)
        _csr_matmat(stop - start, n, Pp[start:stop + 1], Pj, Px, Qp, Qj, Qx, Cp, Cj, Cx)
        return Cp, Cj[:Cp[-1]].copy(), Cx[:Cp[-1]].copy()

    threads = 1 if len(blocks) == 1 else int(workers() if callable(workers) else workers)
    if threads > 1:
        with ThreadPoolExecutor(max_workers=min(threads, len(blocks))) as pool:
            parts = list(pool.map(lambda block: multiply(*block), blocks))
    else:
        parts = [multiply(*block) for block in blocks]
    indptr = np.zeros(m + 1, dtype=idx_dtype)
    for (start, stop), (Cp, _, _) in zip(blocks, parts):
        indptr[start + 1:stop + 1] = Cp[1:] + indptr[start]
    return sp.csr_matrix((np.concatenate([part[2] for part in parts]),
                          np.concatenate([part[1] for part in parts]), indptr), shape=(m, n))


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
    """Return True when CuPy imports and sees at least one GPU.

    The first call imports CuPy (see the module notes); later calls reuse the answer.
    """
    _load_cupy()
    return _CUPY_OK


def cupy_unavailable_reason() -> str | None:
    """Why the CuPy backend is unusable (the import or device error), or None if it works."""
    _load_cupy()
    return None if _CUPY_OK else _CUPY_REASON


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
    if backend == "cupy" and not cupy_available():
        raise ValueError("backend='cupy' requested but CuPy with a GPU is not available: "
                         f"{_CUPY_REASON}")
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
    if x is not None and _is_cupy_object(x):
        cp = _load_cupy()
        if cp is not None and isinstance(x, cp.ndarray):
            return cp
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
    if _is_cupy_object(x) and _load_cupy() is not None:
        if isinstance(x, _cp.ndarray):
            return _cp.asnumpy(x)
        if _cpsp.issparse(x):
            return x.get()
    return x
