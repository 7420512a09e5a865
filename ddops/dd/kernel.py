"""Singular systems with a known kernel: pure-Neumann problems, floating bodies.

A symmetric positive semidefinite ``A`` with ``ker A = range(Z)`` (constants for a
pure-Neumann Laplacian, the rigid body modes of a floating elastic body) is solvable
for right-hand sides orthogonal to ``Z``, and CG converges on it when the
preconditioner is symmetric positive definite on ``range(A) = ker(A)^perp``.  Two
things break a two-level Schwarz preconditioner there, and this module mends them the
way PETSc's ``MatNullSpace`` does for its solvers:

- the coarse matrix ``A_0 = Phi^T A Phi`` is singular as soon as ``range(Phi)``
  contains a kernel vector (Nicolaides and GDSW reproduce the null space on purpose).
  :func:`coarse_kernel_columns` finds the coarse kernel ``{c : Phi c in range(Z)}``
  from ``Phi`` and ``Z`` alone and names as many columns of ``Phi`` as it has
  dimensions, chosen by a pivoted QR so that the remaining columns span ``range(Phi)``
  modulo the kernel.  Dropping them "grounds" the coarse problem: ``A_0`` of the rest
  is nonsingular and its coarse correction equals the pseudo-inverse one up to a kernel
  vector;
- results and residuals may carry kernel components: the preconditioner applies
  ``P M P`` with ``P = I - Q Q^T`` the orthogonal projection off the kernel
  (:func:`remove_kernel`), symmetric and positive definite on ``range(A)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from .._validation import as_vectors, warn

__all__ = ["KERNEL_RTOL", "KERNEL_RANGE_RTOL", "KERNEL_RHS_RTOL", "check_kernel",
           "coarse_kernel_columns", "distributed_kernel_columns", "ground_basis",
           "inconsistent_residual", "remove_kernel"]

#: A given kernel vector ``z`` must satisfy ``||A z|| <= KERNEL_RTOL ||A||_1 ||z||``
#: (rounding of an exact kernel vector is about 1e-15 of that).
KERNEL_RTOL = 1e-8

#: A unit kernel vector ``q`` counts as lying in ``range(Phi)`` when its least-squares
#: residual ``||q - Phi c||`` is at most this.
KERNEL_RANGE_RTOL = 1e-6

#: The preconditioner warns when a residual it is applied to has a kernel component
#: above this fraction of the largest residual norm it has seen: the right-hand side is
#: then inconsistent (not orthogonal to the kernel) and CG cannot converge.
KERNEL_RHS_RTOL = 1e-6


def check_kernel(kernel: Any, A: sp.csr_matrix, name: str = "kernel", *,
                 allreduce: Callable[[np.ndarray, str], np.ndarray] | None = None,
                 ) -> np.ndarray:
    """An orthonormal basis ``Q`` (``n x k``) of ``range(kernel)``, checked against ``A``.

    Parameters
    ----------
    kernel : array or sparse matrix, ``(n,)`` or ``(n, k)``
        Vectors spanning the kernel of ``A``.
    A : scipy.sparse.csr_matrix
        The ``n x n`` symmetric matrix (float64), or, with ``allreduce``, this process's
        rows of it (``m x n``, global columns).
    name : str
        The argument's name in messages.
    allreduce : callable, optional
        ``allreduce(values, op)`` with ``op`` ``"sum"`` or ``"max"``: the reduction over
        the processes that hold the other rows of ``A`` (``ddops.distributed``).  The
        test then runs on the rows of every process at once (collective), with
        ``||A||_1`` as the largest absolute row sum (``A`` is symmetric).

    Raises
    ------
    TypeError
        Non-real entries.
    ValueError
        Wrong shape, NaN/inf, linearly dependent columns, or a column that ``A`` does
        not annihilate (the message gives ``||A z|| / (||A||_1 ||z||)``).
    """
    n = A.shape[1]
    Z = as_vectors(kernel, n, name)
    if Z.shape[1] > n:
        raise ValueError(f"{name}: {Z.shape[1]} columns for {n} unknowns are dependent")
    norms = np.linalg.norm(Z, axis=0)
    if not np.all(norms > 0):
        raise ValueError(f"{name}: column {int(np.argmin(norms))} is zero")
    Q, R = np.linalg.qr(Z / norms)
    r = np.abs(np.diagonal(R))
    if r.min() <= 1e-10 * r.max():
        raise ValueError(f"{name}: the columns are linearly dependent (column "
                         f"{int(np.argmin(r))} is a combination of the others)")
    if allreduce is None:
        if not A.nnz:  # no matrix to check against
            return Q
        scale = float(abs(A).sum(axis=0).max())  # ||A||_1 >= ||A||_2 for symmetric A
        defect = np.linalg.norm(A @ (Z / norms), axis=0)
    else:
        sums = abs(A).sum(axis=1)
        scale = float(allreduce(np.array([sums.max() if A.shape[0] else 0.0]), "max")[0])
        if scale == 0:
            return Q
        defect = np.sqrt(allreduce(np.sum((A @ (Z / norms)) ** 2, axis=0), "sum"))
    defect = defect / scale
    worst = int(np.argmax(defect))
    if defect[worst] > KERNEL_RTOL:
        raise ValueError(f"{name}: column {worst} is not in the kernel of A: ||A z|| / "
                         f"(||A||_1 ||z||) = {defect[worst]:.2e} > {KERNEL_RTOL:g}; pass the "
                         "vectors A annihilates (for a near-kernel, e.g. rigid body modes of "
                         "a clamped body, use null_space instead)")
    return Q


def coarse_kernel_columns(Phi: sp.csr_matrix, Q: np.ndarray) -> np.ndarray:
    """Columns of ``Phi`` to drop so that ``Phi^T A Phi`` is nonsingular for ``ker A = range(Q)``.

    The coarse kernel is ``{c : Phi c in range(Q)}`` (for ``A`` positive semidefinite,
    ``c^T Phi^T A Phi c = 0`` exactly when ``Phi c`` is a kernel vector).  Each unit
    kernel vector is fitted by least squares, ``min_c ||q - Phi c||``, with LSMR on ``Phi``
    scaled to unit columns (products with ``Phi`` and ``Phi^T`` only: ``Phi^T Phi``, whose
    condition number is the square of that of ``Phi``, is never formed, and a
    rank-deficient ``Phi`` is no failure); the combinations whose residual is at most
    :data:`KERNEL_RANGE_RTOL` lie in ``range(Phi)`` and span the coarse kernel ``K0``
    (through ``C``).  A QR factorisation of ``K0^T`` with column pivoting picks one coarse
    column per kernel dimension, with ``K0`` well conditioned on them: without those
    columns, ``range(Phi)`` is the same modulo the kernel and ``A_0`` is nonsingular.

    Parameters
    ----------
    Phi : scipy.sparse.csr_matrix
        ``n x n0`` coarse basis.
    Q : numpy.ndarray
        ``n x k`` orthonormal kernel basis (:func:`check_kernel`).

    Returns
    -------
    numpy.ndarray
        Sorted column indices (empty when no kernel vector lies in ``range(Phi)``).

    Warns
    -----
    RuntimeWarning
        When a least-squares fit stops at LSMR's iteration limit (then the residuals
        decide on the last iterate, and the message gives the fit's optimality measure).
    """
    Phi = sp.csr_matrix(Phi)
    n0 = Phi.shape[1]
    if n0 == 0:
        return np.empty(0, dtype=np.int64)
    norms = np.sqrt(np.asarray(Phi.multiply(Phi).sum(axis=0)).ravel())
    inv = np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)
    P = (Phi @ sp.diags(inv)).tocsr()
    k = Q.shape[1]
    C = np.zeros((n0, k))
    limit = max(4 * n0, 400)
    for a in range(k):  # a loop over the few kernel vectors
        x, istop, its, _, _, normar, normA, _ = spla.lsmr(
            P, Q[:, a], atol=1e-14, btol=1e-14, maxiter=limit)[:8]
        if istop == 7:
            normr = float(np.linalg.norm(Q[:, a] - P @ x))
            warn(f"coarse_kernel_columns: the least-squares fit of kernel vector {a} in "
                 f"range(Phi) stopped at {its} LSMR iterations with ||Phi^T r|| / "
                 f"(||Phi|| ||r||) = {normar / max(normA * normr, 1e-300):.1e}; the coarse "
                 "kernel found from it may be incomplete (Phi is ill conditioned)",
                 RuntimeWarning)
        C[:, a] = x * inv
    E = Q - Phi @ C
    return _kernel_columns_from_fit(C, E.T @ E)


def _kernel_columns_from_fit(C: np.ndarray, gram: np.ndarray) -> np.ndarray:
    """The columns to drop from the fits ``C`` (``n0 x k``) of the unit kernel vectors and
    the Gram matrix ``E^T E`` of their residuals ``E = Q - Phi C``."""
    s2, V = np.linalg.eigh(gram)
    inside = s2 <= KERNEL_RANGE_RTOL ** 2
    if not inside.any():
        return np.empty(0, dtype=np.int64)
    K0, _ = np.linalg.qr(C @ V[:, inside])
    _, _, piv = sla.qr(K0.T, mode="economic", pivoting=True)
    return np.sort(piv[:K0.shape[1]]).astype(np.int64)


def distributed_kernel_columns(Phi_rows: sp.csr_matrix, Q_rows: np.ndarray,
                               allreduce: Callable[[np.ndarray, str], np.ndarray],
                               warns: bool = True) -> np.ndarray:
    """:func:`coarse_kernel_columns` for a ``Phi`` and ``Q`` whose rows lie on several
    processes (collective).

    Each process holds its rows of ``Phi`` (``m x n0``) and of the orthonormal kernel
    basis ``Q`` (``m x k``); ``allreduce(values, op)`` sums (``op="sum"``) over the
    processes (``"min"`` too: every process stops the fits together).  ``warns``: whether
    this process says that a fit stopped at its limit (one of them is enough).  The
    least-squares fits run as a block LSQR (Paige and Saunders; one
    recurrence per kernel vector) on the column-scaled ``Phi`` whose inner products of
    long vectors are reduced over the processes: two reductions per iteration, of ``k``
    and of ``n0 x k`` values.  LSQR and LSMR reach the same least-squares solution; the
    columns are then chosen from the fits as in the serial function, so both drop
    columns that span the same coarse kernel.

    Warns
    -----
    RuntimeWarning
        When a fit stops at the iteration limit (as :func:`coarse_kernel_columns`).
    """
    Phi_rows = sp.csr_matrix(Phi_rows)
    n0 = Phi_rows.shape[1]
    if n0 == 0:
        return np.empty(0, dtype=np.int64)
    norms = np.sqrt(allreduce(np.asarray(Phi_rows.multiply(Phi_rows).sum(axis=0)).ravel(),
                              "sum"))
    inv = np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)
    P = (Phi_rows @ sp.diags(inv)).tocsr()
    PT = P.T.tocsr()
    X, its, converged = _block_lsqr(lambda v: P @ v, lambda u: allreduce(PT @ u, "sum"),
                                    np.asarray(Q_rows, dtype=np.float64),
                                    lambda u: allreduce(np.sum(u * u, axis=0), "sum"),
                                    max(4 * n0, 400),
                                    agree=lambda done: allreduce(done.astype(np.float64),
                                                                 "min") > 0)
    for a in np.flatnonzero(~converged) if warns else ():
        warn(f"distributed_kernel_columns: the least-squares fit of kernel vector {a} in "
             f"range(Phi) stopped at {its} LSQR iterations; the coarse kernel found from it "
             "may be incomplete (Phi is ill conditioned)", RuntimeWarning)
    C = X * inv[:, None]
    E = Q_rows - Phi_rows @ C
    return _kernel_columns_from_fit(C, allreduce(E.T @ E, "sum"))


def _block_lsqr(matvec: Callable, rmatvec: Callable, B: np.ndarray, sqnorms: Callable,
                limit: int, rtol: float = 1e-14,
                agree: Callable | None = None) -> tuple[np.ndarray, int, np.ndarray]:
    """``min ||B[:, j] - P x_j||`` for every column by LSQR, all columns in step.

    ``matvec(V)`` is ``P V`` (the rows of this process), ``rmatvec(U)`` is ``P^T U``
    summed over the processes, ``sqnorms(U)`` the squared column norms of ``U`` summed
    over the processes.  A column stops when its estimate of ``||P^T r|| / (||P|| ||r||)``
    or of ``||r|| / ||b||`` falls below ``rtol`` (LSQR's ``atol``/``btol`` tests).
    Returns the solutions (``n0 x k``), the iterations run and which columns converged.
    ``agree(done)``: the stopped columns agreed over the processes (each decides from reduced
    numbers, which MPI only recommends, not requires, to be the same everywhere).
    """
    k = B.shape[1]

    def unit(U: np.ndarray, size: np.ndarray) -> np.ndarray:
        return np.divide(U, size, out=np.zeros_like(U), where=size > 0)

    beta = np.sqrt(sqnorms(B))
    bnorm = beta.copy()
    U = unit(B, beta)
    V = rmatvec(U)
    alpha = np.linalg.norm(V, axis=0)
    V = unit(V, alpha)
    n0 = V.shape[0]
    W = V.copy()
    X = np.zeros((n0, k))
    phibar, rhobar = beta.copy(), alpha.copy()
    anorm2 = np.zeros(k)
    done = (alpha * beta == 0)  # b = 0, or b orthogonal to range(P): x = 0 solves it
    its = 0
    while not done.all() and its < limit:
        its += 1
        U = matvec(V) - alpha * U
        beta = np.sqrt(sqnorms(U))
        U = unit(U, beta)
        anorm2 += alpha ** 2 + beta ** 2
        V = rmatvec(U) - beta * V
        alpha = np.linalg.norm(V, axis=0)
        V = unit(V, alpha)
        rho = np.hypot(rhobar, beta)
        safe = np.where(rho > 0, rho, 1.0)
        c, s = rhobar / safe, beta / safe
        theta = s * alpha
        rhobar = -c * alpha
        phi = c * phibar
        phibar = s * phibar
        live = ~done
        X[:, live] += (phi / safe)[live] * W[:, live]
        W[:, live] = V[:, live] - (theta / safe)[live] * W[:, live]
        # ||P^T r|| = phibar alpha |c|, ||r|| ~ phibar (LSQR's estimates)
        normar = phibar * alpha * np.abs(c)
        done |= (normar <= rtol * np.sqrt(anorm2) * phibar) | (phibar <= rtol * bnorm)
        done |= (alpha == 0) | (beta == 0)
        if agree is not None:
            done = agree(done)
    return X, its, done


def ground_basis(Phi: sp.csr_matrix, Q: np.ndarray) -> tuple[sp.csr_matrix | None, int]:
    """``Phi`` without the columns of :func:`coarse_kernel_columns`, and how many were
    dropped (None when none is left: the coarse space was the kernel only)."""
    drop = coarse_kernel_columns(Phi, Q)
    if not drop.size:
        return Phi, 0
    keep = np.setdiff1d(np.arange(Phi.shape[1]), drop)
    return (sp.csr_matrix(Phi[:, keep]) if keep.size else None), int(drop.size)


def inconsistent_residual(worst: float, norm: float, largest: float) -> tuple[float, str | None]:
    """The test of a residual against the kernel, for the preconditioners' warning.

    ``worst`` is the largest kernel component ``||Q^T r||`` of the residual(s), ``norm``
    their largest norm and ``largest`` the largest norm seen so far.  ``Q^T r = Q^T b`` for
    every residual ``r = b - A x`` of a symmetric ``A``, so a kernel component above
    :data:`KERNEL_RHS_RTOL` of the largest residual seen comes from ``b`` and no iteration
    can remove it.  Returns the new largest norm and the warning's message (None when the
    residual passes).
    """
    largest = max(largest, norm)
    if worst <= KERNEL_RHS_RTOL * largest:
        return largest, None
    return largest, (f"the residual has a component of relative size "
                     f"{worst / max(norm, 1e-300):.2e} along the kernel of A: the right-hand "
                     "side is inconsistent (not orthogonal to the kernel), so a Krylov method "
                     "cannot converge; solve with b = M.remove_kernel(b) (the least-squares "
                     "right-hand side) instead")


def remove_kernel(X: Any, Q: Any) -> Any:
    """``X - Q (Q^T X)``: ``X`` without its components along the orthonormal kernel ``Q``
    (numpy or CuPy arrays alike)."""
    return X - Q @ (Q.T @ X)
