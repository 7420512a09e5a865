"""Problem-scaled initialisation and learning-rate scaling of the trainable operators.

The paper's random initialisation and Adam's step (about ``lr`` for every
entry, whatever its gradient) do not scale with the number of subdomains
``N`` and the mesh width ``h``: the natural entry size of the factors of
``A^{-1}`` shrinks like ``h`` at fixed ``H/h``, so at ``n = 8192`` one step
at ``lr = 1e-3`` is several times larger than the entries themselves (the
analysis is in the reproduction page, "Beyond the paper").  The three
switches here take the sizes from the problem matrix ``A``; with
``S = Phi^T A Phi`` (the Galerkin coarse operator), ``A_i = R_i A R_i^T``,
local rank ``r`` and coarse rank ``r0``:

``coarse_init="galerkin"``
    ``Q0 = K0 = V_{r0} Lambda_{r0}^{1/2}`` with ``S^{-1} = V Lambda V^T``
    (eigenvalues descending): ``Q0 K0^T`` is the best rank-``r0``
    approximation of ``S^{-1}``, and at ``r0 = n0`` the coarse part is
    exactly ``Phi S^{-1} Phi^T``.
``local_init="problem"``
    the random factors ``Q_i, K_i`` get the standard deviation
    ``sigma_i = (sum_{k<=r} mu_{i,k} / (n_i r))^{1/2}``, ``mu_{i,k}`` the
    ``r`` largest eigenvalues of ``A_i^{-1}``: the RMS entry of the balanced
    rank-``r`` factor ``V Mu^{1/2}`` of ``A_i^{-1}``.
``lr_scaling="problem"``
    Adam's step of every entry of block ``b`` is multiplied by the block's
    natural size, ``sigma_i`` for ``Q_i, K_i`` and
    ``sigma_0 = (sum_{k<=r0} lambda_k(S^{-1}) / (n0 r0))^{1/2}`` for
    ``Q0, K0`` (:func:`lr_scales`, used through ``Adam(lr_scale=...)``), so
    that a learning rate means a fraction of the entries' size at every
    ``N`` and ``h``.

For :class:`~ddops.operators.GlobalLowRankOperator` the whole domain is one
block without a coarse space: ``local_init`` and ``lr_scaling`` use
``sigma = (sum_{k<=r} mu_k(A^{-1}) / (n r))^{1/2}``; ``coarse_init`` does
not apply.  Everything is batched: one ``eigvalsh`` of the padded
``(N, p, p)`` subdomain matrices (in chunks of at most 256 MiB,
:meth:`ddops.Decomposition.block_chunks`), one dense ``eigh`` of ``S``
(``n0 x n0``).

Nothing here depends on the dimension or on the kind of decomposition or
coarse space: the sizes come from ``A``, ``R_i`` and ``Phi`` alone, so the
switches apply unchanged to 2D/3D grids, METIS parts of unstructured meshes
and the GDSW, RGDSW and Nicolaides coarse spaces (for any scaling of ``A``,
unlike the ``"scaled"`` random draw, which knows only ``h``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.linalg
import scipy.sparse as sp
import scipy.sparse.linalg

from .._validation import as_matrix, check_memory, subdomain_matrix_name
from ..operators import GlobalLowRankOperator, LowRankOperator, SchwarzOperator

__all__ = ["COARSE_INITS", "LOCAL_INITS", "LR_SCALINGS", "coarse_scale", "galerkin_coarse",
           "local_scales", "lr_scales", "problem_init"]

#: Coarse-factor initialisations: the random draw of ``init``, or the Galerkin one.
COARSE_INITS = ("random", "galerkin")
#: Local-factor initialisations: the random draw of ``init`` (``"scaled"`` or
#: ``"naive"``), or the same normal draw with the problem's standard deviations.
LOCAL_INITS = ("random", "problem")
#: Learning-rate scalings: none (every entry at ``lr``) or by the blocks' natural sizes.
LR_SCALINGS = ("none", "problem")

#: Above this size the top eigenvalues of ``A^{-1}`` (global operator) come from
#: shift-invert Lanczos instead of a dense ``eigvalsh``.
_DENSE_EIGEN_LIMIT = 1024


def _check_op(op: Any, schwarz_only: bool = False) -> None:
    kinds = (SchwarzOperator,) if schwarz_only else (SchwarzOperator, GlobalLowRankOperator)
    if not isinstance(op, kinds):
        names = " or ".join(k.__name__ for k in kinds)
        raise TypeError(f"op must be a {names}, got {type(op).__name__}")


def _check_matrix(A: Any, n: int) -> sp.csr_matrix:
    """``A`` as float64 CSR: square, of the operator's size, finite and symmetric."""
    A, _ = as_matrix(A, "A")
    if A.shape != (n, n):
        raise ValueError(f"A must have shape ({n}, {n}) like the operator, got {A.shape}")
    scale = abs(A).max() if A.nnz else 0.0
    diff = abs(A - A.T)
    if diff.nnz and diff.max() > 1e-12 * scale:
        raise ValueError(f"A must be symmetric (max |A - A^T| = {diff.max():.3g})")
    return A


def _rms_scale(top: np.ndarray, valid: np.ndarray, rows: np.ndarray, rank: int) -> np.ndarray:
    """``(sum of the valid top eigenvalues / (rows * rank))^{1/2}`` per block."""
    return np.sqrt(np.where(valid, top, 0.0).sum(axis=-1) / (rows * rank))


def local_scales(op: LowRankOperator, A: Any) -> np.ndarray:
    """Natural standard deviation ``sigma_i`` of the local factors of every block.

    ``sigma_i = (sum_{k <= min(r, n_i)} mu_{i,k} / (n_i r))^{1/2}`` with
    ``mu_{i,k}`` the largest eigenvalues of ``A_i^{-1}``, ``A_i = R_i A R_i^T``:
    the RMS entry of the balanced rank-``r`` factor ``V_i Mu_i^{1/2}`` of
    ``A_i^{-1}`` (a subdomain smaller than ``r`` has only ``n_i`` nonzero
    columns).  One batched :func:`numpy.linalg.eigvalsh` on the padded
    ``(N, p, p)`` matrices; the padding diagonal is twice the largest
    absolute row sum of ``A`` (a Gershgorin bound of every ``A_i``), so the
    padding eigenvalues come last and never among the ``r`` smallest.

    For a :class:`~ddops.operators.GlobalLowRankOperator` the whole matrix is
    the one block (``n_i = n``, rank ``r`` of the operator); its ``r``
    smallest eigenvalues come from a dense ``eigvalsh`` up to
    ``n = 1024`` and from shift-invert Lanczos above.

    Parameters
    ----------
    op : SchwarzOperator or GlobalLowRankOperator
    A : sparse matrix or array
        The symmetric positive definite system matrix, ``op.shape``.

    Returns
    -------
    numpy.ndarray
        Shape ``(N,)`` for a Schwarz operator, ``(1,)`` for a global one.

    Raises
    ------
    ValueError
        For an ``A`` of the wrong size, non-symmetric or non-finite, or a
        subdomain matrix that is not positive definite.
    """
    _check_op(op)
    A = _check_matrix(A, op.shape[0])
    if isinstance(op, GlobalLowRankOperator):
        n, r = op.shape[0], op.rank
        if n <= _DENSE_EIGEN_LIMIT or r >= n - 1:
            lam = scipy.linalg.eigvalsh(A.toarray(), subset_by_index=(0, r - 1))
        else:  # the r eigenvalues nearest 0 are the smallest of an SPD matrix
            lam = np.sort(scipy.sparse.linalg.eigsh(A.tocsc(), k=r, sigma=0.0, which="LM",
                                                    return_eigenvectors=False))
        if not lam[0] > 0:
            raise ValueError(f"A must be positive definite (smallest eigenvalue {lam[0]:.3e})")
        return _rms_scale(1.0 / lam[None, :], np.ones((1, r), bool), np.array([n]), r)
    d, r = op.decomposition, op.local_rank
    N, p = d.num_subdomains, d.max_size
    bound = float(abs(A).sum(axis=1).max())
    k = np.arange(min(r, p))
    low = np.empty((N, k.size))
    largest = np.empty(N)
    # batched eigvalsh, in chunks of bounded memory (a few for large subdomains)
    for start, stop in d.block_chunks():
        lam = np.linalg.eigvalsh(d.padded_blocks(A, 2.0 * bound + 1.0, start, stop))
        low[start:stop] = lam[:, : k.size]  # ascending
        largest[start:stop] = lam[np.arange(stop - start), d.sizes[start:stop] - 1]
    valid = k[None, :] < d.sizes[:, None]
    first = low[:, 0]
    bad = ~(first > np.finfo(np.float64).eps * 1e4 * np.maximum(largest, 0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{subdomain_matrix_name(i)} ({int(d.sizes[i])} unknowns) "
                         f"is singular or not positive definite (smallest eigenvalue "
                         f"{first[i]:.3e}); A must be SPD")
    top = 1.0 / np.where(valid, low, 1.0)
    return _rms_scale(top, valid, d.sizes.astype(np.float64), r)


def galerkin_coarse(op: SchwarzOperator, A: Any) -> tuple[np.ndarray, np.ndarray]:
    """Eigenpairs of the inverse Galerkin coarse operator ``S^{-1}``, ``S = Phi^T A Phi``.

    Parameters
    ----------
    op : SchwarzOperator
        An operator with a coarse space (``n0 > 0``).
    A : sparse matrix or array
        The symmetric positive definite system matrix.

    Returns
    -------
    eigenvalues : numpy.ndarray, shape (n0,)
        ``lambda_k(S^{-1})``, descending.
    eigenvectors : numpy.ndarray, shape (n0, n0)
        Orthonormal columns in the same order.

    Raises
    ------
    ValueError
        Without a coarse space, or when ``S`` is not positive definite
        (``Phi`` without full column rank, ``A`` not SPD), or for an invalid ``A``.
    """
    _check_op(op, schwarz_only=True)
    if op.coarse_rank == 0:
        raise ValueError("op has no coarse space (coarse_basis=None): there is no coarse "
                         "operator to initialise from")
    A = _check_matrix(A, op.shape[0])
    Phi = sp.csr_matrix(op.coarse_matrix, dtype=np.float64)
    n0 = Phi.shape[1]
    check_memory(f"the dense {n0} x {n0} Galerkin coarse operator", 8 * 3 * n0 * n0,
                 "use fewer coarse functions")
    S = (Phi.T @ A @ Phi).toarray()
    s, V = np.linalg.eigh(0.5 * (S + S.T))  # ascending: S^{-1}'s eigenvalues descend
    if not s[0] > np.finfo(np.float64).eps * 1e4 * max(s[-1], 0.0):
        raise ValueError(f"the coarse matrix Phi^T A Phi ({n0} x {n0}) is singular or not "
                         f"positive definite (smallest eigenvalue {s[0]:.3e}); Phi must have "
                         f"full column rank and A must be SPD")
    return 1.0 / s, V


def coarse_scale(op: SchwarzOperator, A: Any) -> float:
    """Natural standard deviation of the coarse factors: ``(sum_{k<=r0} lambda_k / (n0 r0))^{1/2}``.

    ``lambda_k`` the largest eigenvalues of ``S^{-1}`` (:func:`galerkin_coarse`),
    ``r0`` the operator's coarse rank: the RMS entry of ``V_{r0} Lambda_{r0}^{1/2}``.
    """
    lam, _ = galerkin_coarse(op, A)
    r0 = op.coarse_rank
    return float(np.sqrt(lam[:r0].sum() / (lam.size * r0)))


def _normal_draws(op: LowRankOperator) -> dict[str, np.ndarray]:
    """The constructor's N(0, 1) draws of the local (or global) factors, in its order.

    The generator is seeded with the operator's seed again and the local
    factors come first in the constructor's stream, so these are exactly
    the normals behind its random initialisation.
    """
    rng = np.random.default_rng(op.seed)
    if isinstance(op, GlobalLowRankOperator):
        return {key: rng.standard_normal((op.shape[0], op.rank)) for key in ("Q", "K")}
    rows = op.decomposition.indices.size
    return {key: rng.standard_normal((rows, op.local_rank)) for key in op._keys(local=True)}


def problem_init(op: LowRankOperator, A: Any, coarse: bool = True,
                 local: bool = True) -> LowRankOperator:
    """Initialise the factors from the problem, in place (``coarse_init``/``local_init``).

    ``coarse``: ``Q0 = K0 = V_{r0} Lambda_{r0}^{1/2}`` from the eigenpairs of
    ``S^{-1}`` (:func:`galerkin_coarse`; ``K0 = Q0`` when tied), so that the
    coarse part is the best rank-``r0`` approximation of
    ``Phi S^{-1} Phi^T`` (exactly it at ``r0 = n0``).  Ignored for operators
    without a coarse space.

    ``local``: the local factors become ``sigma_i Z`` with ``Z`` the
    constructor's standard normal draws (the operator's seed; the paper's
    ``init="scaled"`` draw is ``s Z`` with one ``s`` for all subdomains) and
    ``sigma_i`` from :func:`local_scales`.  For a global operator ``Q`` and
    ``K`` are rescaled in the same way with its single ``sigma``.

    Factors that are not switched keep their values.  The operator's
    attributes ``coarse_init`` and ``local_init`` record what was done
    (training checkpoints compare them).

    Parameters
    ----------
    op : SchwarzOperator or GlobalLowRankOperator
        Operator to initialise in place.
    A : sparse matrix or array
        The symmetric positive definite system matrix, ``op.shape``.
    coarse, local : bool
        Which factors to set.

    Returns
    -------
    LowRankOperator
        ``op``.
    """
    _check_op(op)
    for name, value in (("coarse", coarse), ("local", local)):
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    A = _check_matrix(A, op.shape[0])
    xp = op.xp
    if local:
        sigma = local_scales(op, A)
        draws = _normal_draws(op)
        if isinstance(op, GlobalLowRankOperator):
            op.set_params({k: v * sigma[0] for k, v in draws.items()})
        else:
            where = op._pad_rows()  # the packed entries in the stored (padded) factors
            rows = sigma[op.decomposition._subdomain_of_entry][:, None]
            if xp is not np:
                where = tuple(xp.asarray(a) for a in where)
            for key, Z in draws.items():
                view = op.params[key]
                view[...] = 0
                view[where] = xp.asarray(Z * rows, dtype=op.dtype)
        op.local_init = "problem"
    if coarse and isinstance(op, SchwarzOperator) and op.coarse_rank > 0:
        lam, V = galerkin_coarse(op, A)
        r0 = op.coarse_rank
        F0 = V[:, :r0] * np.sqrt(lam[:r0])
        for key in op._keys(local=False):
            op.params[key][...] = xp.asarray(F0, dtype=op.dtype)
        op.coarse_init = "galerkin"
    return op


def lr_scales(op: LowRankOperator, A: Any) -> Any:
    """Learning-rate multipliers laid out like ``op.theta`` (``lr_scaling="problem"``).

    ``sigma_i`` (:func:`local_scales`) for every stored entry of ``Q_i`` and
    ``K_i`` (padding included: its gradient is zero, so it never moves) and
    ``sigma_0`` (:func:`coarse_scale`) for ``Q0`` and ``K0``; for a global
    operator its single ``sigma`` everywhere.  Pass the result to
    ``Adam(..., lr_scale=...)`` (:class:`~ddops.learning.training.Trainer`
    does with ``lr_scaling="problem"``).

    Returns
    -------
    array
        On the operator's backend, in its dtype, shape ``op.theta.shape``.
    """
    _check_op(op)
    A = _check_matrix(A, op.shape[0])
    sigma = local_scales(op, A)
    xp = op.xp
    if isinstance(op, GlobalLowRankOperator):
        return xp.full(op.theta.shape, sigma[0], dtype=op.dtype)
    flat = np.empty(op.theta.shape, dtype=np.float64)
    views = op._views(flat)
    for key in op._keys(local=True):
        views[key][...] = op.padded_subdomain_scale(sigma)
    if op.coarse_rank > 0:
        s0 = coarse_scale(op, A)
        for key in op._keys(local=False):
            views[key][...] = s0
    return xp.asarray(flat, dtype=op.dtype)
