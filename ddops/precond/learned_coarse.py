"""Learned enrichment of a coarse space by A-norm deflation of near-kernel vectors.

A classical coarse space ``Phi_base`` (GDSW by default) is enriched with ``k`` functions
per subdomain, each supported in its subdomain,

.. math::

    \\Phi = [\\Phi_{base}, W], \\qquad
    W = [R_1^T D_1^{1/2} Q_1, \\; \\dots, \\; R_N^T D_N^{1/2} Q_N],

with ``Q_i`` (``|Omega_i| x k``) trained so that ``range(Phi)`` captures the near kernel of
the base-preconditioned operator ``M_base A``: the vectors CG converges on slowly.  The
objective is the ``A``-norm deflation error of near-kernel vectors ``v_1, ..., v_m``,

.. math::

    f(Q) = \\sum_j \\frac{\\|(I - P) v_j\\|_A^2}{\\|v_j\\|_A^2},
    \\qquad P = \\Phi (\\Phi^T A \\Phi)^{-1} \\Phi^T A,

the quantity a coarse space has to make small in the Schwarz stable-splitting bound.  The
result is a plain sparse ``Phi`` that :class:`ddops.TwoLevelSchwarz` takes unchanged as
``coarse_basis=``; the sparsity is that of Schwarz attention (block ``i`` of ``W`` lives in
subdomain ``i``).

Pieces:

* :func:`near_kernel_vectors` -- a cheap near kernel of ``M_base A``: a Chebyshev (or
  Richardson) filter applied to a random block, then Rayleigh-Ritz.
* :func:`deflation_objective` -- ``f`` and its hand-derived gradient with respect to every
  ``Q_i`` at once (one sparse product with the stacked restriction and one batched matmul).
* :func:`enrichment` -- the sparse ``W`` of given ``Q``.
* :func:`learned_coarse_basis` -- the whole method: base basis, near-kernel vectors,
  initialisation, Adam, removal of dependent columns.

See ``docs/learned-coarse.md`` for the derivation, the ablation and measured iteration
counts against AGDSW and GenEO.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp

from .._validation import as_matrix, check_choice, check_int, check_positive_float
from ..dd.coarse import coarse_basis as _coarse_basis
from ..dd.decomposition import Decomposition
from ..dd.gdsw import drop_dependent_columns

__all__ = ["BASES", "NEAR_KERNEL_METHODS", "INITS", "DEFLATION_MAX_UNKNOWNS", "RIDGE",
           "LearnedCoarseInfo", "deflation_basis", "deflation_objective", "enrichment",
           "learned_coarse_basis", "near_kernel_vectors"]

#: Coarse bases that can serve as ``base``.
BASES = ("gdsw", "rgdsw", "nicolaides", "agdsw", "geneo")

#: Largest ``n`` for :func:`deflation_basis`, which solves a dense ``n x n`` generalized
#: eigenproblem (about 10 s and 0.5 GiB at 4096 unknowns).
DEFLATION_MAX_UNKNOWNS = 4096
#: Near-kernel methods of :func:`near_kernel_vectors`.
NEAR_KERNEL_METHODS = ("chebyshev", "richardson")
#: Initialisations of ``Q``.
INITS = ("pod", "random")
#: Relative ridge of the Gram solves of :func:`deflation_objective` when ``Phi^T A Phi`` is
#: numerically singular: ``G + RIDGE diag(G)`` is factored instead of ``G``.
RIDGE = 1e-12


@dataclass
class LearnedCoarseInfo:
    """What :func:`learned_coarse_basis` reports.

    Attributes
    ----------
    Q : numpy.ndarray
        ``(N, p, k)`` trained local factors (``p = d.max_size``; rows past a subdomain's size
        are zero).  Pass as ``init=`` to warm-start on a related matrix.
    base_dim : int
        Columns of ``Phi_base`` (all kept, first in ``Phi``).
    kept : numpy.ndarray
        Indices of the columns of ``[Phi_base, W]`` kept by the dependence check.
    objective : list of float
        ``f / m`` before training and after every Adam step (the last entry is the
        returned basis's value).
    near_kernel_vectors : numpy.ndarray
        The ``n x m`` training vectors (A-normalised Ritz vectors).
    ritz_values : numpy.ndarray
        Their Rayleigh quotients for ``M_base A``.
    base_seconds, near_kernel_seconds, training_seconds : float
        Wall time of the base basis, of the near-kernel vectors and of the initialisation
        plus Adam plus dependence check.
    """

    Q: np.ndarray
    base_dim: int
    kept: np.ndarray
    objective: list = field(default_factory=list)
    near_kernel_vectors: np.ndarray | None = None
    ritz_values: np.ndarray | None = None
    base_seconds: float = 0.0
    near_kernel_seconds: float = 0.0
    training_seconds: float = 0.0


# ----------------------------------------------------------------------------- checks

def _check_A(A: Any, d: Any) -> sp.csr_matrix:
    """``A`` under the package's matrix contract, of the decomposition's size."""
    if not isinstance(d, Decomposition):
        raise TypeError(f"d must be a ddops Decomposition, got {type(d).__name__}")
    A, _ = as_matrix(A, "A")
    if A.shape != (d.num_dofs, d.num_dofs):
        raise ValueError(f"A must have shape ({d.num_dofs}, {d.num_dofs}) to match d, "
                         f"got {A.shape}")
    return A


def _check_Q(Q: Any, d: Decomposition, name: str = "Q") -> np.ndarray:
    Q = np.asarray(Q)
    if Q.dtype.kind not in "fiu":
        raise TypeError(f"{name} must be a real array, got dtype {Q.dtype}")
    if Q.ndim != 3 or Q.shape[:2] != (d.num_subdomains, d.max_size) or Q.shape[2] < 1:
        raise ValueError(f"{name} must have shape ({d.num_subdomains}, {d.max_size}, k) with "
                         f"k >= 1, got {Q.shape}")
    return np.ascontiguousarray(Q, dtype=np.float64)


def _check_block(name: str, X: Any, n: int) -> np.ndarray:
    X = np.asarray(X)
    if X.dtype.kind not in "fiu":
        raise TypeError(f"{name} must be a real array, got dtype {X.dtype}")
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2 or X.shape[0] != n or X.shape[1] < 1:
        raise ValueError(f"{name} must have shape ({n}, m) with m >= 1, got {X.shape}")
    return np.asarray(X, dtype=np.float64)


# ----------------------------------------------------------------------------- enrichment

def _padding_mask(d: Decomposition) -> np.ndarray:
    """``(N, p, 1)`` mask of the real (non-padding) rows of the padded blocks."""
    sizes = np.asarray(d.sizes)
    return (np.arange(d.max_size)[None, :] < sizes[:, None])[:, :, None]


def enrichment(d: Decomposition, Q: Any) -> sp.csr_matrix:
    """The sparse enrichment ``W = [R_1^T D_1^{1/2} Q_1, ..., R_N^T D_N^{1/2} Q_N]``.

    Parameters
    ----------
    d : Decomposition
    Q : array ``(N, p, k)``
        Local factors on the padded subdomain blocks (``p = d.max_size``); padding rows are
        ignored.

    Returns
    -------
    scipy.sparse.csr_matrix
        ``num_dofs x N k``; column ``i k + j`` is supported in subdomain ``i``.
    """
    Q = _check_Q(Q, d)
    N, p, k = Q.shape
    gather = d.padded_gather()
    weight = d.padded_weights("sqrt")
    real = _padding_mask(d).ravel()
    # One COO triplet per (real padded row, column): no loop over subdomains.
    rows = np.repeat(gather[real], k)
    cols = (np.repeat(np.arange(N), p)[real][:, None] * k + np.arange(k)[None, :]).ravel()
    vals = (weight[real][:, None] * Q.reshape(N * p, k)[real]).ravel()
    W = sp.csr_matrix((vals, (rows, cols)), shape=(d.num_dofs, N * k))
    W.sort_indices()
    return W


class _Deflation:
    """Precomputed pieces of ``f`` for fixed ``A``, ``Phi_base`` and ``V``."""

    def __init__(self, A: sp.csr_matrix, d: Decomposition, Phi_base: sp.csr_matrix,
                 V: np.ndarray) -> None:
        self.A, self.d = A, d
        self.Phi_b = sp.csr_matrix(Phi_base, dtype=np.float64)
        AV = A @ V
        # A-normalise the targets: f is then m - tr(B^T C).
        norms = np.sqrt(np.maximum(np.einsum("ij,ij->j", V, AV), np.finfo(float).tiny))
        self.V, self.AV = V / norms, AV / norms
        self.m = V.shape[1]
        self.APhi_b = sp.csr_matrix(A @ self.Phi_b)
        self.G_bb = (self.Phi_b.T @ self.APhi_b).toarray()
        self.G_bb = 0.5 * (self.G_bb + self.G_bb.T)
        self.B_b = np.asarray(self.Phi_b.T @ self.AV)
        # G_bb is fixed: factor it once (Jacobi-scaled) and eliminate it by a Schur
        # complement, so a step factors only the N k x N k block of the enrichment.
        self.s_b = 1.0 / np.sqrt(np.maximum(np.diag(self.G_bb), np.finfo(float).tiny))
        self.chol_bb = sla.cho_factor(self.G_bb * self.s_b[:, None] * self.s_b[None, :],
                                      lower=True, check_finite=False)
        self.C_b0 = self.solve_bb(self.B_b)
        self.S = d.stacked_restriction("sqrt", padded=True)
        N, p = d.num_subdomains, d.max_size
        # D_i^{1/2} R_i A V for every subdomain, reused by B_W = Q_i^T (.) each step.
        self.SAV = np.asarray(self.S @ self.AV).reshape(N, p, self.m)

    def solve_bb(self, X: np.ndarray) -> np.ndarray:
        return self.s_b[:, None] * sla.cho_solve(self.chol_bb, self.s_b[:, None] * X,
                                                 check_finite=False)

    def evaluate(self, Q: np.ndarray, gradient: bool = True):
        N, p, k = Q.shape
        W = enrichment(self.d, Q)
        AW = sp.csr_matrix(self.A @ W)
        G_bw = np.asarray((self.APhi_b.T @ W).toarray())
        G_ww = (W.T @ AW).toarray()
        B_w = np.matmul(Q.transpose(0, 2, 1), self.SAV).reshape(N * k, self.m)
        # Block elimination of C = G^{-1} B with G = [[G_bb, G_bw], [G_bw^T, G_ww]].
        X = self.solve_bb(G_bw)
        schur = G_ww - G_bw.T @ X
        C_w = _spd_solve(0.5 * (schur + schur.T), B_w - G_bw.T @ self.C_b0)
        C_b = self.C_b0 - X @ C_w
        f = self.m - float(np.einsum("ij,ij->", self.B_b, C_b) + np.einsum("ij,ij->", B_w, C_w))
        if not gradient:
            return f, None
        # df/dPhi = -2 A E C^T with E = V - Phi C; only the W block is needed.
        AE = self.AV - self.APhi_b @ C_b - AW @ C_w
        Y = np.asarray(self.S @ AE).reshape(N, p, self.m)
        grad = -2.0 * np.matmul(Y, C_w.reshape(N, k, self.m).transpose(0, 2, 1))
        return f, grad


def _spd_solve(G: np.ndarray, B: np.ndarray) -> np.ndarray:
    """``G^{-1} B`` for SPD ``G`` with Jacobi scaling (columns of Phi differ in energy).

    When the Cholesky factorisation of the scaled ``G`` fails (enrichment columns that
    became numerically dependent during training), the solve is with
    ``G + RIDGE diag(G)`` instead: :data:`RIDGE` is relative to the diagonal of ``G``
    (an identity added to the unit-diagonal scaled matrix), so it does not depend on the
    scale of ``A`` or of the columns.  Only the training objective sees the ridge; the
    returned basis is cleaned by :func:`ddops.dd.gdsw.drop_dependent_columns`.
    """
    s = 1.0 / np.sqrt(np.maximum(np.diag(G), np.finfo(float).tiny))
    Gs = G * s[:, None] * s[None, :]
    try:
        c = sla.cho_factor(Gs, lower=True, check_finite=False)
    except np.linalg.LinAlgError:
        c = sla.cho_factor(Gs + RIDGE * np.eye(G.shape[0]), lower=True, check_finite=False)
    return s[:, None] * sla.cho_solve(c, s[:, None] * B, check_finite=False)


def deflation_objective(A: Any, d: Decomposition, Phi_base: Any, Q: Any, V: Any, *,
                        gradient: bool = True):
    """A-norm deflation objective of the enriched coarse space and its gradient in ``Q``.

    .. math::

        f(Q) = \\sum_j \\|(I - P) v_j\\|_A^2 / \\|v_j\\|_A^2, \\qquad
        P = \\Phi G^{-1} \\Phi^T A, \\quad \\Phi = [\\Phi_{base}, W(Q)], \\quad
        G = \\Phi^T A \\Phi.

    With ``V`` A-normalised, ``B = Phi^T A V`` and ``C = G^{-1} B``: ``f = m - tr(B^T C)``
    and ``df/dPhi = -2 A E C^T``, ``E = V - Phi C``, so
    ``df/dQ_i = -2 D_i^{1/2} R_i (A E) C_{W,i}^T`` (``C_{W,i}`` the rows of ``C`` of
    subdomain ``i``'s columns), computed for all subdomains by one product with the
    stacked restriction and one batched matmul.

    Parameters
    ----------
    A : sparse matrix
        SPD ``n x n``.
    d : Decomposition
    Phi_base : sparse matrix or array
        ``n x n_b`` base coarse basis.
    Q : array ``(N, p, k)``
        Local factors (``p = d.max_size``).
    V : array ``(n, m)``
        Near-kernel vectors (any scaling; each is A-normalised).
    gradient : bool
        Also return the gradient.

    Returns
    -------
    f : float
    grad : numpy.ndarray ``(N, p, k)`` or None
        Zero on the padding rows.
    """
    A = _check_A(A, d)
    if not (sp.issparse(Phi_base) or isinstance(Phi_base, np.ndarray)):
        raise TypeError(f"Phi_base must be a sparse matrix or array, got "
                        f"{type(Phi_base).__name__}")
    if Phi_base.ndim != 2 or Phi_base.shape[0] != d.num_dofs:
        raise ValueError(f"Phi_base must have {d.num_dofs} rows, got shape {Phi_base.shape}")
    Q = _check_Q(Q, d)
    V = _check_block("V", V, d.num_dofs)
    return _Deflation(A, d, sp.csr_matrix(Phi_base), V).evaluate(Q, gradient=gradient)


# ----------------------------------------------------------------------------- near kernel

def _rayleigh_ritz(A: sp.csr_matrix, M: Any, X: np.ndarray):
    """Ritz vectors of ``M A`` in the A-inner product on ``range(X)``, ascending."""
    # An orthonormal basis first: a filtered block is nearly rank deficient.
    X, _ = np.linalg.qr(X)
    AX = A @ X
    K = X.T @ AX
    H = AX.T @ np.asarray(M @ AX)  # X^T A M A X
    K, H = 0.5 * (K + K.T), 0.5 * (H + H.T)
    # Drop directions X has (numerically) lost; the filter makes the block ill-conditioned.
    w, U = np.linalg.eigh(K)
    keep = w > w[-1] * 1e-13
    T = U[:, keep] / np.sqrt(w[keep])
    theta, Y = np.linalg.eigh(T.T @ H @ T)
    return X @ (T @ Y), theta


def _subdomain_colours(A: sp.csr_matrix, d: Decomposition,
                       ordered_rounds: int = 64) -> np.ndarray:
    """A greedy colouring (colour ``0, 1, ...`` per subdomain) of the subdomain coupling graph.

    Subdomains ``i != j`` are coupled when ``R_i A R_j^T != 0`` (they share an unknown, as
    ``A`` has a positive diagonal, or an entry of ``A`` joins them).  Jones-Plassmann
    rounds: a subdomain whose coupled subdomains of higher priority are all coloured takes
    the smallest colour none of its coloured neighbours has; two such subdomains are never
    coupled, so a round colours all of them at once.  The priority is the subdomain order
    first, which is the sequential greedy colouring (4 colours on 2D boxes, 8 on 3D boxes);
    what is left after ``ordered_rounds`` rounds (a long chain of subdomains) gets random
    priorities, which need few rounds.
    """
    N = d.num_subdomains
    incidence = sp.csr_matrix((np.ones(d.indices.size), d.indices, d.offsets),
                              shape=(N, d.num_dofs))
    pattern = sp.csr_matrix((np.ones(A.nnz), A.indices, A.indptr), shape=A.shape)
    E = sp.coo_matrix(incidence @ pattern @ incidence.T)
    E = sp.coo_matrix(E + E.T)  # symmetric even for a pattern that is not
    off = E.row != E.col
    r, c = E.row[off].astype(np.int64), E.col[off].astype(np.int64)
    width = int(np.bincount(r, minlength=N).max(initial=0)) + 1
    priority = np.arange(N, 0, -1)
    colour = np.full(N, -1, dtype=np.int64)
    rounds = 0
    while np.any(colour < 0):
        if rounds == ordered_rounds:
            priority = np.random.default_rng(0).permutation(N)
        rounds += 1
        blocked = (colour[c] < 0) & (priority[c] > priority[r])
        ready = np.flatnonzero((colour < 0) & (np.bincount(r[blocked], minlength=N) == 0))
        pos = np.full(N, -1, dtype=np.int64)
        pos[ready] = np.arange(ready.size)
        e = (pos[r] >= 0) & (colour[c] >= 0)
        used = np.zeros((ready.size, width), dtype=bool)
        used[pos[r[e]], colour[c[e]]] = True
        colour[ready] = np.argmin(used, axis=1)  # first free colour; one always is
    return colour


def _schwarz_eigenvalue_bound(A: sp.csr_matrix, M: Any) -> float | None:
    """A guaranteed upper bound of ``lambda_max(M A)`` for additive Schwarz, else None.

    For ``M`` the additive :class:`ddops.TwoLevelSchwarz` of ``A`` with exact float64 local
    solves and no kernel, ``M A = P_0 + sum_i P_i`` with ``P_i = R_i^T A_i^{-1} R_i A``
    the A-orthogonal projection onto ``range(R_i^T)``.  The projections of one colour of
    the coupling graph (:func:`_subdomain_colours`) project onto mutually A-orthogonal
    subspaces, so their sum is a projection, of A-norm at most 1; with ``c`` colours
    ``lambda_max(M A) = ||M A||_A <= c + 1`` (``c`` without a coarse level): the colouring
    argument of the abstract Schwarz theory (Toselli and Widlund, Domain Decomposition
    Methods, Ch. 2).  ``M`` must have been built from this ``A``.  A bound needs this
    structure: no matrix-free method certifies the largest eigenvalue of a general
    operator with fewer than ``n`` products (a start vector can miss an eigenvector), so
    for any other ``M`` the caller falls back to :func:`_largest_eigenvalue_estimate`.
    """
    from .schwarz import TwoLevelSchwarz

    if not (isinstance(M, TwoLevelSchwarz) and M.variant == "additive"
            and M.sparse_solver != "amg" and M.factor_dtype == np.float64
            and M.kernel is None and M.shape == A.shape):
        return None
    colours = int(_subdomain_colours(A, M.decomposition).max()) + 1
    return float(colours + (1 if M.coarse_dim else 0))


def _largest_eigenvalue_estimate(A: sp.csr_matrix, M: Any, rng: np.random.Generator,
                                 iterations: int = 12) -> float:
    """An estimate of ``lambda_max(M A)``, not a bound: 1.1 times a lower bound.

    ``iterations`` power steps in the A-inner product from a random vector; the quotient
    ``||M A x||_A^2 / (x, M A x)_A`` is a Rayleigh quotient of ``M A`` (in the inner
    product ``(M A ., .)_A``) and so at most ``lambda_max``.  The factor 1.1 covers the
    usual shortfall; a start vector nearly orthogonal to the top eigenvectors with a
    close second eigenvalue leaves the estimate below ``lambda_max``.
    """
    x = rng.standard_normal(A.shape[0])
    lam = 1.0
    for _ in range(iterations):
        Ax = A @ x
        y = np.asarray(M @ Ax).ravel()
        lam = float(y @ (A @ y)) / float(y @ Ax)
        x = y / np.linalg.norm(y)
    return 1.1 * lam


def near_kernel_vectors(A: Any, M: Any, num_vectors: int, *, method: str = "chebyshev",
                        steps: int = 8, seed: int = 0, start: Any = None,
                        lower: float = 0.1):
    """Approximate eigenvectors of the smallest eigenvalues of ``M A`` (``M`` SPD).

    Parameters
    ----------
    A : sparse matrix
        SPD ``n x n``.
    M : LinearOperator
        The base preconditioner (e.g. :class:`ddops.TwoLevelSchwarz`), applied to blocks.
    num_vectors : int
        ``m``.
    method : {"chebyshev", "richardson"}
        ``"richardson"``: ``(I - omega M A)^steps`` on a random block, ``omega =
        1/lambda_max``.  ``"chebyshev"``: the Chebyshev polynomial of degree ``steps`` that
        is small on ``[lower lambda_max, lambda_max]`` and 1 at 0 (same cost, much stronger
        damping of the well-conditioned part).  Both end with Rayleigh-Ritz in the
        A-inner product (``M A`` is A-self-adjoint).  ``lambda_max`` is an upper bound
        of the largest eigenvalue of ``M A`` when ``M`` is an additive
        :class:`ddops.TwoLevelSchwarz` of ``A`` with exact float64 local solves and no
        kernel: the number of colours of the subdomain coupling graph, plus one for the
        coarse level.  For any other ``M`` it is an estimate, 1.1 times the quotient of
        12 power steps (a lower bound); it can fall below the largest eigenvalue, which
        the Chebyshev filter then amplifies above ``(1 + lower) lambda_max``.
    steps : int
        Filter degree (each step costs one block application of ``M A``).
    seed : int
        Seed of the random start block.
    start : array ``(n, m)``, optional
        Start block instead of a random one (the previous matrix's vectors in a sequence).
    lower : float
        Relative lower end of the damped interval of ``"chebyshev"``.

    Returns
    -------
    V : numpy.ndarray ``(n, m)``
        A-orthonormal Ritz vectors, ascending Ritz values.
    theta : numpy.ndarray ``(m,)``
        Their Ritz values.
    """
    if not sp.issparse(A):
        raise TypeError(f"A must be a scipy sparse matrix, got {type(A).__name__}")
    A = sp.csr_matrix(A, dtype=np.float64)
    n = A.shape[0]
    m = check_int("num_vectors", num_vectors, 1)
    if m > n:
        raise ValueError(f"num_vectors must be <= {n}, got {m}")
    method = check_choice("method", method, NEAR_KERNEL_METHODS)
    steps = check_int("steps", steps, 0)
    lower = check_positive_float("lower", lower)
    rng = np.random.default_rng(seed)
    if start is None:
        X = rng.standard_normal((n, m))
    else:
        X = _check_block("start", start, n)
        if X.shape[1] != m:
            raise ValueError(f"start must have {m} columns (num_vectors), got {X.shape[1]}")
        X = X.copy()
    lam_max = _schwarz_eigenvalue_bound(A, M)
    if lam_max is None:
        lam_max = _largest_eigenvalue_estimate(A, M, rng)
    if method == "richardson" or steps == 0:
        omega = 1.0 / lam_max
        for _ in range(steps):
            X = X - omega * np.asarray(M @ (A @ X))
            X /= np.linalg.norm(X, axis=0)
        return _rayleigh_ritz(A, M, X)
    # Chebyshev filter p(t) = T_s((c - t)/h) / T_s(c/h) on [a, b]: the three-term
    # recurrence of the scaled polynomials (Saad, Numerical Methods for Large Eigenvalue
    # Problems, Alg. 7.3), each step one block product with M A.
    a, b = lower * lam_max, lam_max
    c, h = 0.5 * (b + a), 0.5 * (b - a)
    sigma1 = h / c
    sigma = sigma1
    Y = X - np.asarray(M @ (A @ X)) / c
    X_prev = X
    for _ in range(1, steps):
        sigma_new = 1.0 / (2.0 / sigma1 - sigma)
        Z = 2.0 * sigma_new / h * (c * Y - np.asarray(M @ (A @ Y))) \
            - sigma * sigma_new * X_prev
        X_prev, Y, sigma = Y, Z, sigma_new
        # Same scaling for every column of both iterates: the recurrence stays exact.
        scale = np.linalg.norm(Y, axis=0)
        X_prev, Y = X_prev / scale, Y / scale
    return _rayleigh_ritz(A, M, Y)


# ----------------------------------------------------------------------------- the basis

def _pod_init(d: Decomposition, residual: np.ndarray, k: int, rng) -> np.ndarray:
    """Leading ``k`` left singular vectors of every ``D_i^{1/2} R_i E`` (one batched SVD)."""
    N, p = d.num_subdomains, d.max_size
    S = d.stacked_restriction("sqrt", padded=True)
    Y = np.asarray(S @ residual).reshape(N, p, residual.shape[1])
    U, _, _ = np.linalg.svd(Y, full_matrices=False)
    Q = np.zeros((N, p, k))
    kk = min(k, U.shape[2])
    Q[:, :, :kk] = U[:, :, :kk]
    if kk < k:
        Q[:, :, kk:] = rng.standard_normal((N, p, k - kk)) / np.sqrt(p)
    return Q * _padding_mask(d)


def learned_coarse_basis(
    A: Any,
    d: Decomposition,
    *,
    base: str = "gdsw",
    extra: int = 1,
    null_space: Any = None,
    steps: int = 0,
    lr: float = 0.02,
    near_kernel: str = "chebyshev",
    num_vectors: int | None = None,
    near_kernel_steps: int = 30,
    near_kernel_start: Any = None,
    initialisation: str = "pod",
    seed: int = 0,
    return_info: bool = False,
    init: Any = None,
):
    """A coarse basis ``[Phi_base, W]`` with ``extra`` learned functions per subdomain.

    ``W = [R_1^T D_1^{1/2} Q_1, ..., R_N^T D_N^{1/2} Q_N]`` minimises the A-norm deflation
    error :func:`deflation_objective` of near-kernel vectors of ``M_base A``, ``M_base`` the
    additive two-level Schwarz preconditioner with ``Phi_base``.  Training is ``steps`` Adam
    steps (:class:`ddops.learning.optim.Adam`) on ``Q``; deterministic given ``seed``.

    Parameters
    ----------
    A : sparse matrix
        SPD ``n x n``.
    d : Decomposition
        The overlapping decomposition (``R_i``, ``D_i``; ``d.owner`` for GDSW).
    base : {"gdsw", "rgdsw", "nicolaides", "agdsw", "geneo"}
        The base coarse space, kept whole and first.
    extra : int
        ``k >= 1`` functions per subdomain.
    null_space : array (n x q), optional
        Passed to the base basis (constants by default).
    steps : int
        Adam steps (0: the initialisation only).
    lr : float
        Adam learning rate, relative to the root-mean-square entry of the initial ``Q``
        (so it does not depend on the subdomain size).
    near_kernel : {"chebyshev", "richardson"}
        How the near-kernel vectors are computed (:func:`near_kernel_vectors`).
    num_vectors : int, optional
        Their number ``m``; default ``2 N k``.
    near_kernel_steps : int
        Filter degree.
    near_kernel_start : array (n x m), optional
        Start block of the near-kernel computation (e.g. ``info.near_kernel_vectors`` of a
        related matrix).
    initialisation : {"pod", "random"}
        ``"pod"``: ``Q_i`` = leading left singular vectors of ``D_i^{1/2} R_i (I - P_base)
        V``, the local part of what the base space misses; ``"random"``: Gaussian columns
        of unit norm.  Ignored when ``init`` is given.
    seed : int
        Seed of the random vectors and of the random initialisation.
    return_info : bool
        Also return a :class:`LearnedCoarseInfo`.
    init : array ``(N, p, k)``, optional
        Starting ``Q`` (``info.Q`` of a previous call): a warm start.

    Returns
    -------
    Phi : scipy.sparse.csr_matrix
        ``n x n0``, the base columns first; numerically dependent enrichment columns are
        dropped (:func:`ddops.dd.gdsw.drop_dependent_columns`) so ``Phi^T A Phi`` is SPD.
    info : LearnedCoarseInfo
        Only with ``return_info=True``.

    Raises
    ------
    TypeError, ValueError
        For an argument of the wrong type or value (the message names it).
    """
    from ..learning.optim import Adam
    from .schwarz import TwoLevelSchwarz

    A = _check_A(A, d)
    base = check_choice("base", base, BASES)
    k = check_int("extra", extra, 1)
    steps = check_int("steps", steps, 0)
    lr = check_positive_float("lr", lr)
    near_kernel = check_choice("near_kernel", near_kernel, NEAR_KERNEL_METHODS)
    m = 2 * d.num_subdomains * k if num_vectors is None else check_int("num_vectors",
                                                                           num_vectors, 1)
    near_kernel_steps = check_int("near_kernel_steps", near_kernel_steps, 0)
    initialisation = check_choice("initialisation", initialisation, INITS)
    check_int("seed", seed, 0)
    if not isinstance(return_info, (bool, np.bool_)):
        raise TypeError(f"return_info must be a bool, got {type(return_info).__name__}")
    if init is not None:
        init = _check_Q(init, d, name="init")
        if init.shape[2] != k:
            raise ValueError(f"init must have {k} columns per subdomain (extra), got "
                             f"{init.shape[2]}")
    if near_kernel_start is not None:
        near_kernel_start = _check_block("near_kernel_start", near_kernel_start, d.num_dofs)
        m = near_kernel_start.shape[1] if num_vectors is None else m

    t0 = time.perf_counter()
    Phi_b = sp.csr_matrix(_coarse_basis(d, base, A=A, null_space=null_space))
    t1 = time.perf_counter()
    M_base = TwoLevelSchwarz(A, d, coarse_basis=Phi_b)
    V, theta = near_kernel_vectors(A, M_base, min(m, d.num_dofs), method=near_kernel,
                                   steps=near_kernel_steps, seed=seed,
                                   start=near_kernel_start)
    t2 = time.perf_counter()

    problem = _Deflation(A, d, Phi_b, V)
    rng = np.random.default_rng(seed + 1)
    mask = _padding_mask(d)
    if init is not None:
        Q = init * mask
    elif initialisation == "pod":
        # What the base space leaves of each vector, E0 = (I - P_base) V.
        C0 = problem.C_b0  # G_bb^{-1} B_b, solved once by the deflation problem
        Q = _pod_init(d, problem.V - Phi_b @ C0, k, rng)
    else:
        Q = rng.standard_normal((d.num_subdomains, d.max_size, k)) * mask
        Q /= np.linalg.norm(Q, axis=1, keepdims=True)
    Q = np.ascontiguousarray(Q)
    # Adam's step is an absolute size per entry: measure it in units of Q's entries.
    scale = float(np.sqrt(np.sum(Q * Q) / max(np.sum(mask) * k, 1)))
    flat = Q.reshape(-1)
    opt = Adam([flat], lr=lr * scale)
    history = []
    f, grad = problem.evaluate(Q)
    history.append(f / problem.m)
    for _ in range(steps):
        opt.step([grad.reshape(-1)])
        f, grad = problem.evaluate(Q, gradient=True)
        history.append(f / problem.m)

    W = enrichment(d, Q)
    Phi = sp.hstack([Phi_b, W], format="csr")
    first = np.zeros(Phi.shape[1], dtype=bool)
    first[:Phi_b.shape[1]] = True
    Phi, kept = drop_dependent_columns(A, Phi, first=first)
    t3 = time.perf_counter()
    if not return_info:
        return Phi
    info = LearnedCoarseInfo(Q=Q.copy(), base_dim=Phi_b.shape[1], kept=kept,
                             objective=history, near_kernel_vectors=problem.V,
                             ritz_values=theta, base_seconds=t1 - t0,
                             near_kernel_seconds=t2 - t1, training_seconds=t3 - t2)
    return Phi, info


def deflation_basis(A: Any, d: Decomposition, count: int, *, base: str = "gdsw",
                    null_space: Any = None) -> sp.csr_matrix:
    """The exact-deflation ceiling: ``Phi_base`` plus the ``count`` lowest eigenvectors of
    ``M_base A``.

    A global, dense enrichment that no local method with ``count`` added functions can
    beat: it removes exactly the ``count`` smallest eigenvalues of the base-preconditioned
    operator.  The eigenvectors solve the pencil ``(A M_base A) u = lambda A u`` (whose
    eigenvalues are those of ``M_base A``) densely, so ``n`` is limited to
    :data:`DEFLATION_MAX_UNKNOWNS`; it is a yardstick for comparisons, not a method.

    Parameters
    ----------
    A : sparse matrix
        SPD ``n x n``, ``n <= DEFLATION_MAX_UNKNOWNS``.
    d : Decomposition
        The decomposition of the base preconditioner.
    count : int
        Eigenvectors added (``>= 1``).
    base : str
        The base coarse space (:data:`BASES`).
    null_space : array, optional
        Passed to the base space.

    Returns
    -------
    scipy.sparse.csr_matrix
        ``[Phi_base, U]`` with dependent columns dropped.
    """
    from .schwarz import TwoLevelSchwarz

    A = _check_A(A, d)
    count = check_int("count", count, 1)
    base = check_choice("base", base, BASES)
    n = A.shape[0]
    if n > DEFLATION_MAX_UNKNOWNS:
        raise ValueError(f"deflation_basis: the dense ceiling is limited to "
                         f"{DEFLATION_MAX_UNKNOWNS} unknowns, got {n}")
    count = min(count, n - 1)
    Phi_b = sp.csr_matrix(_coarse_basis(d, base, A=A, null_space=null_space))
    M = TwoLevelSchwarz(A, d, coarse_basis=Phi_b)
    Ad = A.toarray()
    H = Ad @ M.matmat(Ad)
    _, U = sla.eigh(0.5 * (H + H.T), Ad, subset_by_index=[0, count - 1])
    Phi = sp.hstack([Phi_b, sp.csr_matrix(U)], format="csr")
    first = np.zeros(Phi.shape[1], dtype=bool)
    first[:Phi_b.shape[1]] = True
    return drop_dependent_columns(A, Phi, first=first)[0]
