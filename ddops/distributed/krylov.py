"""Distributed CG and restarted GMRES with scipy's stopping rule.

Vectors are distributed by the layout's convention (each rank's owned
entries); the only communication besides the products with ``A`` and ``M``
is global inner products, one ``Allreduce`` each (fused where the algorithm
allows).  Both solvers follow :func:`scipy.sparse.linalg.cg` and
:func:`~scipy.sparse.linalg.gmres` step by step (scipy 1.12+), so with the
same operators they take the same iterations and return the same ``info``:

* stop when ``||r|| <= max(rtol ||b||, atol)`` (CG tests ``<``, as scipy);
* ``maxiter`` defaults to ``10 n`` (``n`` global); for GMRES it counts
  restart cycles, and the inner loop works on the preconditioned residual
  with scipy's tolerance control;
* ``b = 0`` returns ``(b, 0)``; the result is ``(x, info)`` with ``info = 0``
  on convergence, else ``maxiter``.

CG fuses ``||r||^2`` and ``r^T z`` into one reduction (it applies ``M``
before the convergence test, so a converged solve makes one extra
application), hence two reductions per iteration.  GMRES uses modified
Gram-Schmidt as scipy (``k + 3`` reductions in inner iteration ``k``) or,
with ``orthogonalization="cgs2"``, classical Gram-Schmidt applied twice (three
reductions per inner iteration, whatever ``k``; not bitwise scipy's iterates).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from scipy.linalg import get_lapack_funcs

from .._validation import check_choice
from .layout import DistributedLayout

__all__ = ["ORTHOGONALIZATIONS", "cg", "gmres"]

#: Gram-Schmidt variants of :func:`gmres`.
ORTHOGONALIZATIONS = ("mgs", "cgs2")


def _apply(op: Any) -> Callable[[np.ndarray], np.ndarray]:
    if op is None:
        return lambda v: v.copy()
    if hasattr(op, "matvec"):
        return op.matvec
    if callable(op):
        return op
    raise TypeError(f"expected an operator with matvec or a callable, got {type(op).__name__}")


def _setup(A: Any, b: Any, x0: Any, layout: DistributedLayout | None, rtol: float, atol: float,
           maxiter: int | None):
    layout = getattr(A, "layout", None) if layout is None else layout
    if not isinstance(layout, DistributedLayout):
        raise TypeError("layout is required (a DistributedLayout), or an A with a .layout")
    b = np.asarray(b, dtype=np.float64)
    if b.shape != (layout.num_owned,):
        raise ValueError(f"b must have shape ({layout.num_owned},) (this rank's owned entries), "
                         f"got {b.shape}")
    x = (np.zeros_like(b) if x0 is None else np.array(x0, dtype=np.float64))
    if x.shape != b.shape:
        raise ValueError(f"x0 must have shape {b.shape}, got {x.shape}")
    if atol is None or atol < 0 or rtol is None or rtol < 0:
        raise ValueError(f"rtol and atol must be non-negative numbers, got rtol={rtol}, "
                         f"atol={atol}")
    bnrm2 = layout.norm(b)
    atol = max(float(atol), float(rtol) * bnrm2)
    maxiter = 10 * layout.num_dofs if maxiter is None else int(maxiter)
    return layout, b, x, bnrm2, atol, maxiter


def cg(A: Any, b: Any, x0: Any = None, *, rtol: float = 1e-5, atol: float = 0.0,
       maxiter: int | None = None, M: Any = None, callback: Callable | None = None,
       layout: DistributedLayout | None = None) -> tuple[np.ndarray, int]:
    """Preconditioned conjugate gradients on distributed vectors.

    Parameters
    ----------
    A : DistributedMatrix or operator
        SPD operator on owned vectors (``matvec`` or a callable).
    b : array, shape (num_owned,)
        This rank's owned entries of the right-hand side.
    x0 : array, shape (num_owned,), optional
        Initial guess (default zero).
    rtol, atol : float
        Stop when ``||r|| < max(rtol ||b||, atol)``.
    maxiter : int, optional
        Default ``10 n``.
    M : operator, optional
        SPD preconditioner on owned vectors (e.g. a
        :class:`~ddops.distributed.precond.DistributedTwoLevelSchwarz`).
    callback : callable, optional
        ``callback(x)`` with the owned part of the iterate after each iteration.
    layout : DistributedLayout, optional
        Default ``A.layout``.

    Returns
    -------
    x : numpy.ndarray
        Owned entries of the solution.
    info : int
        0 on convergence, else ``maxiter``.
    """
    layout, b, x, bnrm2, atol, maxiter = _setup(A, b, x0, layout, rtol, atol, maxiter)
    if bnrm2 == 0:
        return b, 0
    matvec, psolve = _apply(A), _apply(M)
    r = b - matvec(x) if x0 is not None else b.copy()
    rho_prev, p = None, None
    for iteration in range(maxiter):
        z = psolve(r)
        rr, rho_cur = layout.allreduce(np.array([np.dot(r, r), np.dot(r, z)]))
        if np.sqrt(rr) < atol:
            return x, 0
        if iteration > 0:
            beta = rho_cur / rho_prev
            p *= beta
            p += z
        else:
            p = z.copy()
        q = matvec(p)
        alpha = rho_cur / layout.dot(p, q)
        x += alpha * p
        r -= alpha * q
        rho_prev = rho_cur
        if callback is not None:
            callback(x)
    return x, maxiter


def gmres(A: Any, b: Any, x0: Any = None, *, rtol: float = 1e-5, atol: float = 0.0,
          restart: int | None = None, maxiter: int | None = None, M: Any = None,
          callback: Callable | None = None, callback_type: str = "pr_norm",
          orthogonalization: str = "mgs",
          layout: DistributedLayout | None = None) -> tuple[np.ndarray, int]:
    """Restarted GMRES (left preconditioning, as scipy) on distributed vectors.

    Parameters
    ----------
    A, b, x0, rtol, atol, M, layout
        As in :func:`cg`; ``M`` may be non-symmetric (restricted Schwarz).
    restart : int, optional
        Krylov dimension per cycle (default 20, at most ``n``).
    maxiter : int, optional
        Number of restart cycles (default ``10 n``).
    callback : callable, optional
        ``callback(pr_norm)`` with ``||M r|| / ||b||`` after every inner
        iteration (``callback_type="pr_norm"``), or ``callback(x)`` with the
        owned iterate after every cycle (``"x"``).
    callback_type : {"pr_norm", "x"}
    orthogonalization : {"mgs", "cgs2"}
        See :data:`ORTHOGONALIZATIONS`; ``"mgs"`` reproduces scipy.

    Returns
    -------
    x : numpy.ndarray
    info : int
        0 on convergence, else ``maxiter``.
    """
    check_choice("callback_type", callback_type, ("pr_norm", "x"))
    check_choice("orthogonalization", orthogonalization, ORTHOGONALIZATIONS)
    layout, b, x, bnrm2, atol, maxiter = _setup(A, b, x0, layout, rtol, atol, maxiter)
    if bnrm2 == 0:
        return b, 0
    matvec, psolve = _apply(A), _apply(M)
    n_owned, eps = b.size, np.finfo(np.float64).eps
    restart = min(20 if restart is None else int(restart), layout.num_dofs)
    Mb_nrm2 = layout.norm(psolve(b))
    # scipy's tolerance control (gh-8400) of the inner, preconditioned residual
    ptol_max_factor = 1.0
    ptol = Mb_nrm2 * min(ptol_max_factor, atol / bnrm2)
    presid = 0.0
    lartg = get_lapack_funcs("lartg", dtype=np.float64)
    v = np.empty((restart + 1, n_owned))
    h = np.zeros((restart, restart + 1))
    givens = np.zeros((restart, 2))
    rnorm = np.inf
    for iteration in range(maxiter):
        if iteration == 0:
            r = b - matvec(x) if x0 is not None else b.copy()
            if layout.norm(r) < atol:
                return x, 0
        v[0] = psolve(r)
        tmp = layout.norm(v[0])
        v[0] *= 1 / tmp
        S = np.zeros(restart + 1)
        S[0] = tmp
        breakdown = False
        for col in range(restart):
            w = psolve(matvec(v[col]))
            if orthogonalization == "mgs":
                h0 = layout.norm(w)
                for k in range(col + 1):
                    tmp = layout.dot(v[k], w)
                    h[col, k] = tmp
                    w -= tmp * v[k]
                h1 = layout.norm(w)
            else:  # two passes of classical Gram-Schmidt, one reduction each
                V = v[: col + 1]
                first = layout.allreduce(np.append(V @ w, np.dot(w, w)))
                h0 = np.sqrt(first[-1])
                w -= first[:-1] @ V
                second = layout.allreduce(V @ w)
                w -= second @ V
                h[col, : col + 1] = first[:-1] + second
                h1 = layout.norm(w)
            h[col, col + 1] = h1
            v[col + 1] = w
            if h1 <= eps * h0:  # exact solution indicator
                h[col, col + 1] = 0
                breakdown = True
            else:
                v[col + 1] *= 1 / h1
            for k in range(col):  # past Givens rotations on the new column
                c, s = givens[k, 0], givens[k, 1]
                n0, n1 = h[col, [k, k + 1]]
                h[col, [k, k + 1]] = [c * n0 + s * n1, -s * n0 + c * n1]
            c, s, mag = lartg(h[col, col], h[col, col + 1])
            givens[col] = [c, s]
            h[col, [col, col + 1]] = mag, 0
            tmp = -s * S[col]
            S[[col, col + 1]] = [c * S[col], tmp]
            presid = abs(tmp)
            if callback is not None and callback_type == "pr_norm":
                callback(presid / bnrm2)
            if presid <= ptol or breakdown:
                break
        if h[col, col] == 0:
            S[col] = 0
        y = np.zeros(col + 1)
        y[:] = S[: col + 1]
        for k in range(col, 0, -1):  # back substitution, as scipy
            if y[k] != 0:
                y[k] /= h[k, k]
                y[:k] -= y[k] * h[k, :k]
        if y[0] != 0:
            y[0] /= h[0, 0]
        x += y @ v[: col + 1]
        r = b - matvec(x)
        rnorm = layout.norm(r)
        if callback is not None and callback_type == "x":
            callback(x)
        if rnorm <= atol or breakdown:
            break
        if presid <= ptol:
            ptol_max_factor = max(eps, 0.25 * ptol_max_factor)
        else:
            ptol_max_factor = min(1.0, 1.5 * ptol_max_factor)
        ptol = presid * min(ptol_max_factor, atol / rnorm)
    return x, 0 if rnorm <= atol else maxiter
