"""A user's problem from files: the matrix, right-hand side, coordinates and null spaces.

The formats people already have, read without pickle:

- matrices: Matrix Market (``.mtx``, :func:`scipy.io.mmread`), scipy sparse ``.npz``
  (:func:`scipy.sparse.save_npz`) and dense ``.npy``;
- vectors and blocks of vectors (right-hand side, coordinates, null space, kernel):
  ``.npy``, or ``.mtx`` holding a dense array.

Every failure (a missing file, an unknown extension, a damaged or wrongly shaped file) is a
``ValueError`` that names the option and the file.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import scipy.io
import scipy.sparse as sp

__all__ = ["MATRIX_FORMATS", "ARRAY_FORMATS", "load_matrix", "load_array"]

#: File extensions :func:`load_matrix` reads.
MATRIX_FORMATS = (".mtx", ".npz", ".npy")

#: File extensions :func:`load_array` reads.
ARRAY_FORMATS = (".npy", ".mtx")

# The largest magnitude up to which every integer is a float64.
_EXACT_INT = 2**53


def _path(path: str | os.PathLike, what: str, formats: tuple[str, ...]) -> Path:
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in formats:
        raise ValueError(f"{what}: {str(p)!r} has extension {suffix or '(none)'!r}; "
                         f"expected one of {formats}")
    if not p.is_file():
        raise ValueError(f"{what}: no such file {str(p)!r}")
    return p


def load_matrix(path: str | os.PathLike, what: str = "matrix") -> sp.csr_matrix:
    """Read a square sparse matrix from ``.mtx``, scipy ``.npz`` or dense ``.npy``.

    Parameters
    ----------
    path : path-like
        The file.
    what : str
        Its name in messages (the command line passes ``"--matrix"``).

    Returns
    -------
    scipy.sparse.csr_matrix
        As stored (the callers check symmetry, finiteness and the dtype).

    Raises
    ------
    ValueError
        A missing file, an unknown extension, a file that is not a matrix of that format,
        or a matrix that is not square and 2-D.
    """
    p = _path(path, what, MATRIX_FORMATS)
    try:
        if p.suffix.lower() == ".mtx":
            M = scipy.io.mmread(p)
        elif p.suffix.lower() == ".npz":
            M = sp.load_npz(p)
        else:
            M = np.load(p, allow_pickle=False)
    except Exception as exc:  # noqa: BLE001 - every reader has its own errors
        raise ValueError(f"{what}: cannot read {str(p)!r}: {type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")) from None
    if not sp.issparse(M):
        M = np.asarray(M)
        if M.ndim != 2:
            raise ValueError(f"{what}: {str(p)!r} holds an array of shape {M.shape}, not a "
                             "matrix")
    if M.shape[0] != M.shape[1] or M.shape[0] < 1:
        raise ValueError(f"{what}: {str(p)!r} holds a {M.shape[0]} x {M.shape[1]} matrix; a "
                         "square one is needed")
    if M.dtype.kind not in "fiub":
        raise ValueError(f"{what}: {str(p)!r} holds {M.dtype} entries; a real matrix is needed")
    return sp.csr_matrix(M)


def load_array(path: str | os.PathLike, what: str, rows: int | None = None,
               ndim: tuple[int, ...] = (1, 2)) -> np.ndarray:
    """Read a vector or a block of vectors (``.npy``, or a dense ``.mtx`` array) as float64.

    Every real dtype is accepted and converted to float64: floating point as is, integers
    (signed or unsigned, e.g. an ``.mtx`` with the ``integer`` field) exactly, which needs
    ``|value| <= 2**53``, and booleans as 0.0 and 1.0 (an indicator vector of a null
    space).  Complex and other dtypes are refused.

    Parameters
    ----------
    path : path-like
        The file.
    what : str
        Its name in messages (``"--rhs"``, ``"--coordinates"``, ...).
    rows : int, optional
        The number of rows it must have (with ``None``, any).
    ndim : tuple of int
        The dimensions allowed.

    Returns
    -------
    numpy.ndarray
        float64, whatever the stored real dtype; an ``(n, 1)`` column is returned as a
        vector when only vectors are allowed.

    Raises
    ------
    ValueError
        A missing or unreadable file, an unknown extension, a wrong shape, NaN/inf, a
        non-real dtype, or an integer beyond ``2**53`` in magnitude (float64 would round
        it).
    """
    p = _path(path, what, ARRAY_FORMATS)
    try:
        if p.suffix.lower() == ".npy":
            X = np.load(p, allow_pickle=False)
        else:
            X = scipy.io.mmread(p)
            X = X.toarray() if sp.issparse(X) else np.asarray(X)
    except Exception as exc:  # noqa: BLE001
        raise ValueError(f"{what}: cannot read {str(p)!r}: {type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")) from None
    X = np.asarray(X)
    if X.dtype.kind not in "fiub":
        raise ValueError(f"{what}: {str(p)!r} holds {X.dtype} values; real numbers are needed")
    if X.ndim == 2 and 1 in ndim and X.shape[1] == 1 and 2 not in ndim:
        X = X[:, 0]
    if X.ndim not in ndim:
        raise ValueError(f"{what}: {str(p)!r} holds an array of shape {X.shape}; expected "
                         f"{' or '.join(f'{k}-D' for k in ndim)}")
    if rows is not None and X.shape[0] != rows:
        raise ValueError(f"{what}: {str(p)!r} has {X.shape[0]} rows; the matrix has {rows}")
    if X.dtype.kind in "iu" and X.size and (X.max() > _EXACT_INT or X.min() < -_EXACT_INT):
        raise ValueError(f"{what}: {str(p)!r} holds integers beyond 2**53 in magnitude, "
                         "which float64 cannot represent exactly")
    X = X.astype(np.float64)
    if not np.all(np.isfinite(X)):
        raise ValueError(f"{what}: {str(p)!r} contains NaN or inf")
    return X

