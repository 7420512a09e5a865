"""Small argument checks shared by the whole package (clear messages, named arguments)."""

from __future__ import annotations

import numbers
import os
from collections.abc import Iterable
from typing import Any

import numpy as np

FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def check_int(name: str, value: Any, minimum: int | None = None) -> int:
    """Return ``value`` as an int, or raise naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def check_positive_float(name: str, value: Any, allow_zero: bool = False) -> float:
    """Return ``value`` as a finite float > 0 (or >= 0), or raise naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    value = float(value)
    if not np.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be finite and {bound}, got {value}")
    return value


def check_choice(name: str, value: Any, choices: Iterable[Any]) -> Any:
    """Raise a ValueError naming ``name`` unless ``value`` is one of ``choices``."""
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value


def check_dtype(dtype: Any, name: str = "dtype") -> np.dtype:
    """Return a float32/float64 numpy dtype, or raise naming ``name``."""
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"{name} must be float32 or float64, got {dtype!r}") from exc
    if dt not in FLOAT_DTYPES:
        raise TypeError(f"{name} must be float32 or float64, got {dt}")
    return dt


def as_matrix(A: Any, name: str = "A", *, convert: bool = True):
    """The one input contract for matrices: a real square sparse matrix or 2-D array as CSR.

    Every entry point that reads the entries of a matrix (decompositions, coarse
    spaces, preconditioners, initialisations) calls this first, so the same
    input gets the same message everywhere.

    Parameters
    ----------
    A : scipy sparse matrix or array, numpy array, or CuPy array
        The matrix.  A :class:`scipy.sparse.linalg.LinearOperator` (or any other
        object without entries) is refused: ``ddops`` builds its subdomain and
        coarse matrices from the entries.
    name : str
        The argument's name in messages.
    convert : bool
        False: keep the caller's dtype and index order (CSR of the same values; what
        a graph partitioner needs), no float64 copy.

    Returns
    -------
    A : scipy.sparse.csr_matrix
        Float64, square, finite, with canonical indices (a new object that may
        share its arrays with the caller's when it was float64 CSR in canonical
        form already; nothing in ``ddops`` writes to them).
    dtype : numpy.dtype
        The caller's dtype.

    Raises
    ------
    TypeError
        Not a matrix (a ``LinearOperator``, a list of lists of strings, ...), or
        complex entries.
    ValueError
        Not 2-D, not square, empty, or NaN/inf entries.
    """
    import scipy.sparse as sp
    from scipy.sparse.linalg import LinearOperator

    from .backend import to_numpy

    if isinstance(A, LinearOperator):
        raise TypeError(f"{name} must be a sparse matrix (scipy.sparse) or a 2-D array, got a "
                        f"{type(A).__name__}: ddops builds its subdomain and coarse matrices "
                        f"from the entries of {name}, so pass the assembled matrix")
    try:
        A = to_numpy(A)
    except Exception:  # noqa: BLE001 - whatever it is, it is not an array
        pass
    if sp.issparse(A):
        dtype = A.dtype
    else:
        if isinstance(A, (str, bytes)) or A is None:
            arr = np.asarray(None)
        else:
            try:
                arr = np.asarray(A)
            except (TypeError, ValueError):
                arr = np.asarray(None)
        if arr.dtype.kind not in "fiubc" or arr.ndim == 0:
            raise TypeError(f"{name} must be a sparse matrix (scipy.sparse) or a 2-D array, "
                            f"got {type(A).__name__}")
        if arr.ndim != 2:
            raise ValueError(f"{name} must be 2-D, got shape {arr.shape}")
        dtype = arr.dtype
        A = sp.csr_matrix(arr)
    if dtype.kind == "c":
        raise TypeError(f"{name} must be real, got dtype {dtype}")
    if dtype.kind not in "fiub":
        raise TypeError(f"{name} must be a real matrix, got dtype {dtype}")
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"{name} must be square, got shape {A.shape}")
    if A.shape[0] < 1:
        raise ValueError(f"{name} must have at least one row, got shape {A.shape}")
    if not convert:
        A = A.tocsr()
    elif not (A.format == "csr" and A.dtype == np.float64 and A.has_canonical_format):
        A = sp.csr_matrix(A, dtype=np.float64, copy=True)  # the caller's matrix stays as it is
        A.sum_duplicates()
    else:
        A = sp.csr_matrix(A)  # a new object sharing the arrays
    check_finite(name, A.data)
    return A, np.dtype(dtype)


def _library_dirs() -> tuple[str, ...]:
    """Directories of ddops and of the libraries that call back into it (scipy's solvers)."""
    import scipy

    return tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep
                 for m in (np, scipy)) + (os.path.dirname(os.path.abspath(__file__)) + os.sep,)


def warn(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` attributed to the user's line: the first frame outside ddops.

    The warnings of the set-up and of ``matvec`` are raised at varying depths inside the
    library (and, under ``scipy.sparse.linalg.cg``, below scipy's frames); a fixed
    ``stacklevel`` points into ddops or scipy from some entry points.
    """
    import sys
    import warnings

    skip = _library_dirs()
    frame, level = sys._getframe(1), 2  # level 2: warn's caller
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(skip):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)


def as_vectors(X: Any, n: int, name: str) -> np.ndarray:
    """``X`` (``n``, or ``n x k`` with ``k >= 1``; dense or sparse) as a finite float64 ``n x k``.

    Raises
    ------
    TypeError
        Non-real entries.
    ValueError
        Another shape, or NaN/inf.
    """
    import scipy.sparse as sp

    Z = X.toarray() if sp.issparse(X) else np.asarray(X)
    if Z.dtype.kind not in "fiub":
        raise TypeError(f"{name} must be a real array, got dtype {Z.dtype}")
    if Z.ndim == 1:
        Z = Z[:, None]
    if Z.ndim != 2 or Z.shape[0] != n or Z.shape[1] < 1:
        raise ValueError(f"{name} must have shape ({n},) or ({n}, k) with k >= 1, got "
                         f"{np.shape(X)}")
    Z = Z.astype(np.float64)
    check_finite(name, Z)
    return Z


def check_no_empty_rows(A: Any, name: str = "A") -> None:
    """Raise naming the first row of ``A`` (CSR) without a nonzero entry.

    An empty row (an unknown coupled to nothing) makes ``A`` singular; the factorisations
    would report it only as a singular subdomain or coarse matrix.  ``O(n)``: reads the
    diagonal, and the stored values only of rows whose diagonal is zero.
    """
    zero = np.flatnonzero(A.diagonal() == 0)
    if not zero.size:
        return
    # stored nonzeros per row, read only where the diagonal is zero (no Python loop)
    counts = np.diff(A.indptr)[zero]
    rows = np.repeat(np.arange(zero.size), counts)
    starts = np.repeat(A.indptr[zero], counts)
    within = np.arange(rows.size) - np.repeat(np.cumsum(counts) - counts, counts)
    nonzero = np.bincount(rows[A.data[starts + within] != 0], minlength=zero.size)
    empty = zero[nonzero == 0].tolist()
    if empty:
        more = f" (and {len(empty) - 1} more)" if len(empty) > 1 else ""
        raise ValueError(f"{name}: row {empty[0]} is empty{more}: {name} is singular (an "
                         "unknown coupled to nothing); remove the unknown or give it an "
                         "equation")


def subdomain_matrix_name(i: int) -> str:
    """How messages name the matrix of subdomain ``i`` (``A_0`` is the coarse matrix)."""
    return f"the matrix R_{i} A R_{i}^T of subdomain {i}"


def check_finite(name: str, x: Any) -> None:
    """Raise a ValueError naming ``name`` if ``x`` holds NaN or inf."""
    xp = _xp(x)
    if not bool(xp.all(xp.isfinite(x))):
        raise ValueError(f"{name} contains NaN or inf")


# Where the kernel states the memory limit of this process's control group (v2, then v1).
_CGROUP_LIMIT_FILES = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def memory_limit_bytes() -> int | None:
    """Most memory this process can have: physical memory, or a smaller cgroup limit.

    Returns None where neither can be read (then :func:`check_memory` refuses
    nothing).
    """
    limits = []
    try:
        limits.append(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):  # not a POSIX system
        pass
    for path in _CGROUP_LIMIT_FILES:
        try:
            with open(path) as fh:
                text = fh.read().strip()
        except OSError:
            continue
        if text.isdigit():  # "max" means no limit
            limits.append(int(text))
    limits = [v for v in limits if v > 0]
    return min(limits) if limits else None


def format_bytes(nbytes: float) -> str:
    """``nbytes`` in binary units, e.g. ``"1.50 GiB"``."""
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024 or unit == "PiB":
            return f"{value:.0f} B" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def fits_in_memory(nbytes: float) -> bool:
    """Whether ``nbytes`` is at most :func:`memory_limit_bytes` (True when that is unknown)."""
    limit = memory_limit_bytes()
    return limit is None or nbytes <= limit


def check_memory(what: str, nbytes: float, hint: str = "") -> None:
    """Refuse, before allocating, arrays that cannot fit in this machine's memory.

    Parameters
    ----------
    what : str
        The object being built, with the arguments that set its size (for the message).
    nbytes : float
        Estimated peak memory of building it.
    hint : str
        What to reduce, appended to the message.

    Raises
    ------
    ValueError
        If ``nbytes`` exceeds :func:`memory_limit_bytes`.
    """
    limit = memory_limit_bytes()
    if limit is not None and nbytes > limit:
        raise ValueError(f"{what} would need about {format_bytes(nbytes)} of memory, more than "
                         f"the {format_bytes(limit)} this machine has{'; ' + hint if hint else ''}")


def _xp(x: Any):
    from .backend import get_array_module

    return get_array_module(x)
