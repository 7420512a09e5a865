"""Schwarz attention trained as a preconditioner for CG.

The operator regression of the paper fits ``M f ~ A^{-1} f`` on 32 smooth
Fourier modes; outside them ``M`` is arbitrary and not symmetric, which makes
it a poor preconditioner.  This module trains the symmetric (tied) Schwarz
operator on a *preconditioning objective*

.. math::

    J(M) = \\mathbb{E}_z \\, \\|M A z - z\\|^2 / n

with random vectors ``z`` that cover every frequency.  Written as operator
regression with inputs ``F = A Z`` and targets ``U = Z`` it is the plain mean
squared error, so :class:`ddops.learning.training.Trainer` trains it with the operator's
hand-derived gradients (:class:`PreconditionerSampler` supplies the pairs).
The *energy* variant measures the error in the ``A``-norm; with
``z ~ N(0, A^{-1})`` it is ``||A^{1/2} M A^{1/2} - I||_F^2 / n``, the squared
distance of the eigenvalues of ``M A`` from 1, which is what CG sees.

Pieces:

* :class:`PreconditionerSampler` -- ``(A Z, Z)`` batches.
* :func:`learned_schwarz_preconditioner` -- a tied Schwarz operator
  ``M = B + Phi Q0 Q0^T Phi^T + sum_i R_i^T Q_i Q_i^T R_i`` with an SPD
  ``B``, so ``M`` is SPD whatever the factors are.
* :func:`classical_init` -- factors from the classical two-level additive
  preconditioner (one batched eigendecomposition of all ``A_i``).
* :func:`train_preconditioner` -- training with a safeguard that keeps the
  parameters with the fewest CG iterations on a fixed right-hand side.
* :func:`parameter_scale` -- the unit in which learning rates are given.

See ``docs/preconditioning.md`` for the derivation, the choices and measured
iteration counts.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from threadpoolctl import threadpool_limits

from .._validation import (
    check_choice,
    check_dtype,
    check_int,
    check_positive_float,
    subdomain_matrix_name,
)
from ..backend import asarray, check_backend, get_array_module, to_numpy
from ..dd.coarse import MATRIX_COARSE_BASES
from ..dd.decomposition import Decomposition, Decomposition1D
from ..learning.training import Trainer, TrainingConfig
from ..linalg.spd import sparse_spd_factor
from ..operators import PARTITIONS, SchwarzOperator, init_scale
from .schwarz import TwoLevelSchwarz, check_matrix, check_symmetric, solve_with_history

__all__ = [
    "DISTRIBUTIONS",
    "OBJECTIVES",
    "BASES",
    "LEARNED_INITS",
    "PreconditionerSampler",
    "parameter_scale",
    "classical_init",
    "learned_schwarz_preconditioner",
    "preconditioner_objective",
    "cg_iterations",
    "IterationCheck",
    "PreconditionerTraining",
    "train_preconditioner",
]

#: Distributions of the vectors ``z`` of :class:`PreconditionerSampler`.
DISTRIBUTIONS = ("gaussian", "smooth", "mixed", "energy")

#: Training objectives: the error ``M A z - z`` in the Euclidean norm or in the ``A``-norm.
OBJECTIVES = ("energy", "mse")

#: Fixed SPD terms of :func:`learned_schwarz_preconditioner` (besides an operator).
BASES = ("none", "identity", "jacobi", "one_level")

#: Initialisations of :func:`learned_schwarz_preconditioner`.
LEARNED_INITS = ("classical", "scaled")


# -- validation --------------------------------------------------------------------------------
def _check_spd_candidate(A: Any, name: str = "A") -> sp.csr_matrix:
    """Square, finite, symmetric matrix with a positive diagonal, as float64 CSR."""
    A, _ = check_matrix(A, name)
    check_symmetric(A, name)
    diagonal = A.diagonal()
    if np.any(diagonal <= 0):
        k = int(np.flatnonzero(diagonal <= 0)[0])
        raise ValueError(f"{name} has a non-positive diagonal entry {diagonal[k]:g} at index {k}; "
                         "a symmetric positive definite matrix is needed")
    return A


def _check_size(A: sp.csr_matrix, num_dofs: int, what: str) -> None:
    if A.shape[0] != num_dofs:
        raise ValueError(f"A has size {A.shape[0]} but {what} has {num_dofs} unknowns")


def parameter_scale(A: Any) -> float:
    """The unit of the factors of a learned preconditioner: ``mean(diag A)^{-1/2}``.

    ``M ~ A^{-1}`` scales like ``1/c`` with ``c = mean(diag A)``, so its
    factors (``M = Q Q^T``) scale like ``c^{-1/2}``.  Adam moves every
    parameter by about the learning rate per step whatever the size of the
    gradient, so a learning rate only means something relative to this unit:
    Adam with ``lr = eta * parameter_scale(A)`` follows exactly (up to Adam's
    ``eps``) the trajectory of Adam with ``lr = eta`` on the rescaled problem
    ``A / c``, whose factors are of order one.

    Parameters
    ----------
    A : sparse matrix or array
        Square matrix with a positive mean diagonal.

    Returns
    -------
    float
    """
    A, _ = check_matrix(A)
    c = float(A.diagonal().mean())
    if not c > 0:
        raise ValueError(f"A must have a positive mean diagonal, got {c:g}")
    return 1.0 / math.sqrt(c)


# -- the sampler ---------------------------------------------------------------------------------
def _spd_factor(A: sp.csr_matrix) -> tuple[Any, sp.csr_matrix]:
    """Sparse ``A = C C^T`` from SuperLU with symmetric, diagonal-only pivoting.

    Returns the SuperLU object (for solves) and ``C = P^T L D^{1/2}``.
    """
    n = A.shape[0]
    lu, bad = sparse_spd_factor(A)  # the exact solvers' SPD test
    if lu is None:
        raise ValueError("A is singular; the energy distribution needs an SPD matrix")
    if bad.size:
        raise ValueError("A is not positive definite (a non-positive, vanishing or off-diagonal "
                         "pivot in its LDL^T factorisation); the energy distribution needs an "
                         "SPD matrix")
    pivots = lu.U.diagonal()  # in U's (permuted) order, as L's columns
    P = sp.csr_matrix((np.ones(n), (lu.perm_r, np.arange(n))), shape=(n, n))
    C = (P.T @ lu.L @ sp.diags(np.sqrt(pivots))).tocsr()
    return lu, C


class PreconditionerSampler:
    """Training pairs ``(F, U) = (A Z, Z)`` for the preconditioning objective.

    With these pairs the plain mean squared error of
    :func:`ddops.operators.losses.loss_and_grad` is ``||M A Z - Z||_F^2 / (n B)``, so
    ``Trainer(op, PreconditionerSampler(A), TrainingConfig(loss="mse"))``
    minimises the preconditioning objective with the operator's own
    hand-derived gradients.

    Parameters
    ----------
    A : sparse matrix or array
        Square, finite ``n x n`` matrix (nonsingular for ``"smooth"`` and
        ``"mixed"``, SPD for ``"energy"``).
    distribution : {"gaussian", "smooth", "mixed", "energy"}
        ``"gaussian"``: ``z ~ N(0, I)``, every frequency equally, and
        ``E ||M A z - z||^2 = ||M A - I||_F^2``.  ``"smooth"``:
        ``z = A^{-1} g`` with ``g ~ N(0, I)``, i.e. the paper's operator
        regression ``M g ~ A^{-1} g`` on white-noise right-hand sides, which
        weights the low frequencies (large eigenvalues of ``A^{-1}``).
        ``"mixed"``: ``B - round(B * smooth_fraction)`` Gaussian columns
        followed by smooth ones.  ``"energy"``: ``z ~ N(0, A^{-1})``, drawn as
        ``z = A^{-1} C g`` with the sparse factor ``A = C C^T``; with the
        error measured in the ``A``-norm (``loss="energy"`` of
        :func:`ddops.operators.losses.loss_and_grad`) the objective becomes
        ``||A^{1/2} M A^{1/2} - I||_F^2 / n``.
    smooth_fraction : float
        Share of smooth columns for ``"mixed"`` (0 to 1).
    norm : {"l2", "energy"}, optional
        Column normalisation: ``||z|| = sqrt(n)`` (``"l2"``) or
        ``z^T A z = n`` (``"energy"``).  The default is ``"energy"`` for the
        energy distribution and ``"l2"`` otherwise, so that the matching loss
        of ``M = 0`` is exactly 1 (and that of ``M = A^{-1}`` is 0) whatever
        the scaling of ``A``; with ``"l2"``, ``"mse"`` and ``"wmse"`` coincide.
    dtype : {numpy.float64, numpy.float32}
        Type of the returned arrays.
    backend : {"numpy", "cupy"}
        Where the returned arrays live (drawn and multiplied on the host, so
        both backends see the same numbers).

    Raises
    ------
    ValueError
        Non-square or non-finite ``A``; a singular ``A`` for smooth vectors or
        an indefinite one for the energy distribution; an unknown name.

    Examples
    --------
    >>> import numpy as np, ddops
    >>> s = PreconditionerSampler(ddops.poisson_1d(64))
    >>> F, U = s.sample(8, np.random.default_rng(0))
    >>> F.shape, bool(np.allclose((U**2).mean(axis=0), 1.0))
    ((63, 8), True)
    """

    def __init__(self, A: Any, distribution: str = "gaussian", smooth_fraction: float = 0.5,
                 norm: str | None = None, dtype: Any = np.float64,
                 backend: str = "numpy") -> None:
        check_choice("distribution", distribution, DISTRIBUTIONS)
        frac = check_positive_float("smooth_fraction", smooth_fraction, allow_zero=True)
        if frac > 1:
            raise ValueError(f"smooth_fraction must be in [0, 1], got {frac}")
        if norm is None:
            norm = "energy" if distribution == "energy" else "l2"
        check_choice("norm", norm, ("l2", "energy"))
        self.A, _ = check_matrix(A)
        self.num_dofs = self.A.shape[0]
        self.distribution = distribution
        self.smooth_fraction = frac
        self.norm = norm
        self.dtype = check_dtype(dtype)
        self.backend = check_backend(backend)
        self.xp = get_array_module(backend=backend)
        self._lu: Any = None
        self._C: sp.csr_matrix | None = None
        if distribution == "energy":
            check_symmetric(self.A)
            self._lu, self._C = _spd_factor(self.A)
        elif distribution != "gaussian":
            try:
                self._lu = spla.splu(sp.csc_matrix(self.A))
            except RuntimeError as exc:
                raise ValueError(f"A is singular: smooth vectors z = A^-1 g need a "
                                 f"nonsingular A ({exc})") from None

    def num_smooth(self, batch_size: int) -> int:
        """Number of smooth columns in a batch of ``batch_size``."""
        if self.distribution in ("gaussian", "energy"):
            return 0
        if self.distribution == "smooth":
            return batch_size
        return int(round(batch_size * self.smooth_fraction))

    def sample(self, batch_size: int, rng: np.random.Generator) -> tuple[Any, Any]:
        """Draw ``(F, U) = (A Z, Z)``, both ``n x batch_size``.

        Parameters
        ----------
        batch_size : int
            Number of columns ``B``.
        rng : numpy.random.Generator
            Source of the Gaussian draws.

        Returns
        -------
        F, U : arrays on the sampler's backend
        """
        B = check_int("batch_size", batch_size, minimum=1)
        n = self.num_dofs
        G = rng.standard_normal((n, B))
        if self.distribution == "energy":
            F = self._C @ G
            Z = self._lu.solve(F)
        else:
            k = self.num_smooth(B)
            Z = G.copy()
            F = np.empty_like(G)
            if B - k:
                F[:, : B - k] = self.A @ G[:, : B - k]
            if k:
                Z[:, B - k:] = self._lu.solve(G[:, B - k:])
                F[:, B - k:] = G[:, B - k:]
        if self.norm == "l2":
            sq = np.einsum("ij,ij->j", Z, Z)
        else:
            sq = np.einsum("ij,ij->j", Z, F)  # z^T A z
        scale = np.sqrt(n / np.maximum(sq, np.finfo(np.float64).tiny))
        Z *= scale
        F *= scale
        xp = self.xp
        return (xp.asarray(F, dtype=self.dtype), xp.asarray(Z, dtype=self.dtype))

    def __repr__(self) -> str:
        return (f"PreconditionerSampler(n={self.num_dofs}, "
                f"distribution={self.distribution!r}, norm={self.norm!r}, "
                f"backend={self.backend!r})")


# -- objectives ----------------------------------------------------------------------------------
def preconditioner_objective(M: Any, A: Any, Z: Any, objective: str = "mse") -> float:
    """The preconditioning objective on fixed vectors ``Z``.

    ``"mse"``: ``||M A Z - Z||_F^2 / (n B)``; ``"energy"``:
    ``sum_b ||M A z_b - z_b||_A^2 / (n B)``.  On columns drawn by
    :class:`PreconditionerSampler` (with the matching norm) this is the
    training loss, and 1 for ``M = 0``.

    Parameters
    ----------
    M : LinearOperator
        The preconditioner (anything with ``matmat``).
    A : sparse matrix or array
        The system matrix.
    Z : array, shape (n, B)
        Test vectors.
    objective : {"mse", "energy"}
        How the error ``E = M A Z - Z`` is measured.

    Returns
    -------
    float
    """
    check_choice("objective", objective, OBJECTIVES)
    A, _ = check_matrix(A)
    Z = np.asarray(to_numpy(Z), dtype=np.float64)
    if Z.ndim != 2 or Z.shape[0] != A.shape[0]:
        raise ValueError(f"Z must have shape ({A.shape[0]}, B), got {Z.shape}")
    if tuple(M.shape) != A.shape:
        raise ValueError(f"M has shape {tuple(M.shape)} but A has shape {A.shape}")
    E = np.asarray(to_numpy(M.matmat(A @ Z)), dtype=np.float64) - Z
    W = E if objective == "mse" else A @ E
    return float(np.vdot(E, W) / E.size)


# -- classical initialisation --------------------------------------------------------------------
def _local_factors(A: sp.csr_matrix, d: Decomposition, rank: int) -> np.ndarray:
    """Padded ``(N, p, r)`` factors ``V_i diag(mu_i)^{1/2}``, top-``r`` eigenpairs of ``A_i^{-1}``.

    One batched :func:`numpy.linalg.eigh`.  The padding diagonal is set to
    ``-max |diag A|``: padding eigenvalues are then negative and come first in
    the ascending order, strictly separated from the positive spectrum of an
    SPD ``A_i``, so block ``i`` keeps positions ``p - n_i, ..., p - n_i + r - 1``
    (its ``r`` smallest eigenvalues, the largest ``mu = 1 / lambda``).
    """
    N, p = d.num_subdomains, d.max_size
    scale = float(np.abs(A.diagonal()).max())
    k = np.arange(rank)
    Q = np.zeros((N, p, rank))
    # batched eigh, in chunks of bounded memory (several for large subdomains)
    for start, stop in d.block_chunks():
        lam, V = np.linalg.eigh(d.padded_blocks(A, -scale, start, stop))
        sizes = d.sizes[start:stop]
        npad = p - sizes
        first = lam[np.arange(stop - start), npad]  # the smallest eigenvalue of each A_i
        largest = lam[:, -1]
        bad = ~(first > np.finfo(np.float64).eps * 1e4 * np.maximum(largest, 0))
        if bad.any():
            i = start + int(np.flatnonzero(bad)[0])
            raise ValueError(f"{subdomain_matrix_name(i)}, with {int(d.sizes[i])} "
                             "unknowns, is singular or not positive definite (smallest "
                             f"eigenvalue {first[i - start]:.3e}); A must be SPD")
        valid = k[None, :] < sizes[:, None]  # rank above n_i: extra columns stay zero
        idx = np.minimum(npad[:, None] + k[None, :], p - 1)
        lam_sel = np.take_along_axis(lam, idx, axis=1)
        V_sel = np.take_along_axis(V, idx[:, None, :], axis=2)
        root_mu = np.where(valid, 1.0 / np.sqrt(np.where(valid, lam_sel, 1.0)), 0.0)
        block = V_sel * root_mu[:, None, :]
        block[np.arange(p)[None, :] >= sizes[:, None]] = 0.0  # padding rows are exactly zero
        Q[start:stop] = block
    return Q


def _coarse_factor(A: sp.csr_matrix, Phi: sp.csr_matrix, rank: int) -> np.ndarray:
    """``V0 diag(lambda0)^{-1/2}`` for the ``rank`` smallest eigenpairs of ``Phi^T A Phi``."""
    A0 = (Phi.T @ A @ Phi).toarray()
    A0 = 0.5 * (A0 + A0.T)
    lam, V = np.linalg.eigh(A0)
    if not lam[0] > np.finfo(np.float64).eps * 1e4 * max(lam[-1], 0.0):
        raise ValueError(f"coarse matrix A_0 = Phi^T A Phi ({A0.shape[0]} x {A0.shape[0]}) is "
                         f"singular or not positive definite (smallest eigenvalue {lam[0]:.3e}); "
                         "Phi must have full column rank and A must be SPD")
    return V[:, :rank] / np.sqrt(lam[:rank])


def classical_init(op: SchwarzOperator, A: Any, local: bool = True,
                   coarse: bool = True) -> SchwarzOperator:
    """Set the factors from the classical two-level additive Schwarz preconditioner.

    With ``A_i = R_i A R_i^T = V_i diag(lambda_i) V_i^T`` (eigenvalues
    ascending) and the partition weights ``W_in``, ``W_out`` of
    ``op.partition`` (``D_i^{1/2}`` on both sides for ``"symmetric"``, none
    for ``"none"``), the local factors become

    .. math::

        Q_i = W_{out}^{-1} V_{i,r} \\Lambda_{i,r}^{-1/2}, \\qquad
        K_i = W_{in}^{-1} V_{i,r} \\Lambda_{i,r}^{-1/2}

    (``K_i = Q_i`` when tied), so that ``W_out Q_i K_i^T W_in`` is the best
    rank-``r`` approximation of ``A_i^{-1}``; the weights are ``1/m_j > 0``,
    so their inverses exist.  The coarse factor is
    ``Q0 = K0 = V_{0,r0} Lambda_{0,r0}^{-1/2}`` from ``A_0 = Phi^T A Phi``.
    With ``r >= max n_i`` and ``r0 = n0`` the Schwarz part of ``op`` equals
    ``TwoLevelSchwarz(A, d, variant="additive")`` to rounding; any ``base``
    of ``op`` is added on top.

    All local eigendecompositions are one batched :func:`numpy.linalg.eigh`
    on the padded ``(N, p, p)`` blocks (padding eigenpairs are dropped).

    Parameters
    ----------
    op : SchwarzOperator
        Operator to initialise in place (tied or not).
    A : sparse matrix or array
        The SPD system matrix, ``op.shape``.
    local, coarse : bool
        Which factors to set; the others keep their values.

    Returns
    -------
    SchwarzOperator
        ``op``.

    Raises
    ------
    ValueError
        Non-square, non-symmetric or non-finite ``A``; a size mismatch; a
        singular or indefinite subdomain or coarse matrix.
    """
    if not isinstance(op, SchwarzOperator):
        raise TypeError(f"op must be a SchwarzOperator, got {type(op).__name__}")
    A = _check_spd_candidate(A)
    d = op.decomposition
    _check_size(A, d.num_dofs, "the operator")
    xp = op.xp
    if local:
        V = _local_factors(A, d, op.local_rank)  # (N, p, r)
        N, p, _ = V.shape
        w_in, w_out = PARTITIONS[op.partition]
        entries = (d._subdomain_of_entry, d._position_in_subdomain)
        for key, weighting in (("Q", w_out), ("K", w_in)):
            if key not in op.params:
                continue
            w = np.ones((N, p))
            w[entries] = d.entry_weights(weighting)
            factor = (V / w[:, :, None]).astype(op.dtype)
            if op.padding_groups == 1:
                op.params[key][...] = xp.asarray(factor)
            else:  # the grouped storage: the packed entries only (padding stays zero)
                op.set_params({**op.get_params(), key: np.split(
                    factor[entries], d.offsets[1:-1])})
    if coarse and op.coarse_rank > 0:
        Q0 = _coarse_factor(A, sp.csr_matrix(op.coarse_matrix), op.coarse_rank)
        for key in ("Q0", "K0"):
            if key in op.params:
                op.params[key][...] = xp.asarray(Q0.astype(op.dtype))
    return op


# -- the learned symmetric preconditioner --------------------------------------------------------
def _build_base(base: Any, A: sp.csr_matrix, d: Decomposition, dtype: Any, backend: str) -> Any:
    if not isinstance(base, str):
        return base  # validated by SchwarzOperator
    check_choice("base", base, BASES)
    if base == "none":
        return None
    if base == "identity":
        return sp.identity(A.shape[0], format="csr") * (1.0 / float(A.diagonal().mean()))
    if base == "jacobi":
        return sp.diags(1.0 / A.diagonal(), format="csr")
    return TwoLevelSchwarz(A, d, coarse=False, dtype=dtype, backend=backend)


def learned_schwarz_preconditioner(
    A: Any,
    decomposition: Decomposition,
    local_rank: int = 4,
    coarse_rank: int | None = None,
    base: Any = "one_level",
    init: str = "classical",
    *,
    partition: str = "none",
    coarse_basis: Any = "auto",
    null_space: Any = None,
    init_gain: float = 1e-2,
    local_init_scale: float = 0.0,
    seed: int = 0,
    dtype: Any = np.float64,
    backend: str = "numpy",
) -> SchwarzOperator:
    """A symmetric (tied) Schwarz attention operator to train as a CG preconditioner.

    .. math::

        M = B + \\Phi Q_0 Q_0^T \\Phi^T + \\sum_i R_i^T W_i Q_i Q_i^T W_i R_i

    Every learned term is positive semidefinite, so with a symmetric positive
    definite ``B`` the operator is SPD for *any* parameters (before, during
    and after training) and CG can use it.

    Parameters
    ----------
    A : sparse matrix or array
        The SPD system matrix.
    decomposition : Decomposition
        Overlapping decomposition with ``A.shape[0]`` unknowns.
    local_rank : int
        Rank ``r`` of every local block.
    coarse_rank : int, optional
        Rank ``r0`` of the coarse block (default ``n0``).
    base : {"one_level", "jacobi", "identity", "none"} or operator
        The fixed SPD term ``B``: the classical one-level additive Schwarz
        local solves ``sum_i R_i^T A_i^{-1} R_i`` (default, a
        :class:`~ddops.TwoLevelSchwarz` with ``coarse=False``),
        ``diag(A)^{-1}``, ``I / mean(diag A)``, nothing (``M`` is then only
        positive semidefinite, singular unless the ranks are full), or an SPD
        matrix or operator of the right shape.
    init : {"classical", "scaled"}
        ``"classical"``: :func:`classical_init`.  With ``base="one_level"``
        the base already holds the exact local solves, so only the coarse
        factor is set and the local factors are the random draw times
        ``local_init_scale`` (default 0: ``M`` is exactly two-level additive
        Schwarz); otherwise local and coarse factors are set (the rank-``r``
        and rank-``r0`` truncations of ``A_i^{-1}`` and ``A_0^{-1}``).
        ``"scaled"``: random factors, ``N(0, gain / (c r))`` entries with
        ``c = mean(diag A)``, so that every random term has expectation
        ``gain * I / c`` (a fraction ``gain`` of the scaled identity).
    partition : {"none", "symmetric"}
        Partition-of-unity placement (:data:`ddops.operators.PARTITIONS`);
        ``"none"`` mirrors additive Schwarz ``R_i^T A_i^{-1} R_i``.
    coarse_basis : str, matrix or None
        Coarse interpolation Phi, as for :class:`~ddops.SchwarzOperator`
        (``"gdsw"`` and ``"rgdsw"`` are built from ``A``).  ``"auto"``
        (default): the interface hats on a decomposition that has interface
        nodes (the 1D decompositions), else GDSW when it knows its
        non-overlapping parts (``owner``: grid boxes, METIS and RCB
        decompositions), else Nicolaides.
    null_space : array (num_dofs x k), optional
        Null space of the coarse space (rigid body modes for elasticity), for
        ``"nicolaides"``, ``"gdsw"``, ``"rgdsw"`` and their ``"auto"`` choice.
    init_gain : float
        ``gain`` of the random factors (see ``init``).
    local_init_scale : float
        Factor of the random local factors for ``init="classical"`` with
        ``base="one_level"``.  At 0 they stay zero during training, because
        the gradient of ``Q_i Q_i^T`` vanishes at ``Q_i = 0``: only the coarse
        factor is trained.
    seed : int
        Seed of the random factors.
    dtype : {numpy.float64, numpy.float32}
        Type of the parameters and products.
    backend : {"numpy", "cupy"}
        Where the operator lives.

    Returns
    -------
    SchwarzOperator
        ``tied=True``, parameters ``{"Q", "Q0"}``.

    Raises
    ------
    ValueError
        Non-square, non-symmetric or non-finite ``A``; a size mismatch; a
        singular subdomain or coarse matrix; an unknown name.

    Examples
    --------
    >>> import ddops
    >>> A = ddops.poisson_1d(256)
    >>> d = ddops.Decomposition1D(256, 8, overlap=2)
    >>> M = learned_schwarz_preconditioner(A, d)       # two-level Schwarz, trainable coarse
    >>> M.tied, sorted(M.params)
    (True, ['Q', 'Q0'])
    """
    if not isinstance(decomposition, Decomposition):
        raise TypeError("decomposition must be a ddops Decomposition, got "
                        f"{type(decomposition).__name__}")
    A = _check_spd_candidate(A)
    d = decomposition
    _check_size(A, d.num_dofs, "the decomposition")
    check_choice("init", init, LEARNED_INITS)
    check_choice("partition", partition, ("none", "symmetric"))
    gain = check_positive_float("init_gain", init_gain)
    local_init_scale = check_positive_float("local_init_scale", local_init_scale,
                                            allow_zero=True)
    dt = check_dtype(dtype)
    if isinstance(coarse_basis, str) and coarse_basis == "auto":
        hats = isinstance(d, Decomposition1D) or d.interface_nodes.size > 0
        coarse_basis = ("interface_hats" if hats and null_space is None
                        else "gdsw" if d.owner is not None else "nicolaides")
    named = isinstance(coarse_basis, str)
    extra = {"A": A} if named and coarse_basis in MATRIX_COARSE_BASES else {}
    if null_space is not None:
        extra["null_space"] = null_space
    B = _build_base(base, A, d, dt, backend)
    op = SchwarzOperator(d, local_rank, coarse_rank, coarse_basis, init="scaled", seed=seed,
                         dtype=dt, backend=backend, partition=partition, tied=True, base=B,
                         **extra)
    # the operator drew N(0, 1) * init_scale(...); rescale to N(0, gain / (c r))
    c = float(A.diagonal().mean())
    for key, rank in (("Q", op.local_rank), ("Q0", op.coarse_rank)):
        if rank:
            drawn = init_scale("scaled", d.h, rank, d.dim)
            op.params[key][...] *= math.sqrt(gain / (c * rank)) / drawn
    if init == "classical":
        exact_local = isinstance(base, str) and base == "one_level"
        if exact_local:
            op.params["Q"][...] *= local_init_scale
        classical_init(op, A, local=not exact_local, coarse=True)
    op.learned_init = init  # op.init stays the random scheme the factors were drawn with
    return op


# -- Krylov checks and the safeguarded training loop ---------------------------------------------
def cg_iterations(A: Any, M: Any, b: Any, rtol: float = 1e-8,
                  maxiter: int | None = None) -> tuple[int, bool, float]:
    """CG iterations to ``rtol`` with preconditioner ``M`` (via :func:`solve_with_history`).

    scipy's CG runs on the host; a CuPy-backed ``M`` is applied on its device
    and its result copied back.

    Returns
    -------
    iterations : int
        Iterations run (``maxiter`` when not converged).
    converged : bool
    final_residual : float
        Last relative residual norm ``||b - A x_k|| / ||b||``.
    """
    if M is not None and getattr(M, "backend", "numpy") != "numpy":  # scipy's CG runs on the host
        device = M
        M = spla.LinearOperator(device.shape, dtype=np.float64,
                                matvec=lambda x: to_numpy(device.matvec(x)))
    _, info, history, iterations = solve_with_history(A, b, M, "cg", rtol=rtol, maxiter=maxiter)
    return iterations, info == 0, float(history[-1])


@dataclass
class IterationCheck:
    """One safeguard measurement after ``step`` training steps.

    Attributes
    ----------
    step : int
        Training steps done.
    iterations : int
        CG iterations on the fixed right-hand side.
    converged : bool
        Whether CG reached the tolerance within the cap.
    final_residual : float
        Relative residual norm CG stopped at.
    objective : float
        Training objective on the fixed test vectors.
    """

    step: int
    iterations: int
    converged: bool
    final_residual: float
    objective: float

    def key(self) -> tuple[float, float]:
        """Sort key: converged runs by iterations, then by the residual reached."""
        return (self.iterations if self.converged else math.inf, self.final_residual)


@dataclass
class PreconditionerTraining:
    """What :func:`train_preconditioner` returns.

    Attributes
    ----------
    status : {"finished", "diverged"}
        From :class:`~ddops.learning.training.TrainingResult`.
    steps : int
        Training steps run.
    best : IterationCheck
        The check whose parameters ``op`` holds at the end (0 steps: the
        initial operator).
    initial, final : IterationCheck
        Before training and at the last check.
    checks : list of IterationCheck
        Every measurement, in order.
    lr : float
        The absolute learning rate used (``lr * parameter_scale(A)``).
    objective : str
        ``"energy"`` or ``"mse"``.
    history : dict of numpy arrays
        The trainer's history (``step``, ``train`` loss, ``lr``).
    seconds : dict
        ``train`` (optimisation) and ``checks`` (CG runs and objectives).
    """

    status: str
    steps: int
    best: IterationCheck
    initial: IterationCheck
    final: IterationCheck
    checks: list[IterationCheck]
    lr: float
    objective: str
    history: dict[str, np.ndarray] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


def train_preconditioner(
    op: SchwarzOperator,
    A: Any,
    steps: int = 500,
    lr: float = 0.1,
    batch_size: int = 32,
    check_every: int = 50,
    *,
    objective: str = "energy",
    distribution: str | None = None,
    b: Any = None,
    rtol: float = 1e-8,
    maxiter: int | None = None,
    keep_best: bool = True,
    train_seed: int = 4711,
    test_seed: int = 4712,
    test_size: int = 64,
    config: TrainingConfig | None = None,
    progress: bool = False,
) -> PreconditionerTraining:
    """Train ``op`` on a preconditioning objective, keeping the best CG iteration count.

    A thin loop around :meth:`ddops.learning.training.Trainer.run`: every
    ``check_every`` steps it runs CG with ``op`` on the fixed right-hand side
    ``b`` and evaluates the objective on fixed test vectors.  With
    ``keep_best`` the parameters of the check with the fewest iterations
    (ties: the smaller final residual; not converged counts as infinitely
    many) are restored at the end, so the result never needs more CG
    iterations on ``b`` than the initial operator.

    Parameters
    ----------
    op : SchwarzOperator
        The operator (trained in place), normally from
        :func:`learned_schwarz_preconditioner`.
    A : sparse matrix or array
        The SPD system matrix.
    steps : int
        Total optimisation steps.
    lr : float
        Learning rate *relative to* :func:`parameter_scale` ``(A)``.
    batch_size : int
        Vectors ``z`` per step.
    check_every : int
        Steps between two safeguard checks.
    objective : {"energy", "mse"}
        ``"mse"``: ``Trainer`` with ``loss="mse"`` on
        :class:`PreconditionerSampler` pairs, ``E ||M A z - z||^2``.
        ``"energy"``: the error measured in the ``A``-norm,
        ``E ||M A z - z||_A^2`` (``loss="energy"`` of
        :func:`ddops.operators.losses.loss_and_grad`), which with ``z ~ N(0, A^{-1})`` is
        ``||A^{1/2} M A^{1/2} - I||_F^2 / n``.
    distribution : str, optional
        Distribution of ``z`` (:data:`DISTRIBUTIONS`); default ``"energy"``
        for the energy objective and ``"gaussian"`` for the MSE.
    b : array, optional
        Right-hand side of the checks (default: standard normal from ``test_seed``).
    rtol : float
        CG tolerance of the checks.
    maxiter : int, optional
        CG iteration cap of the checks (default ``2 n``).
    keep_best : bool
        Restore the best parameters at the end (else keep the last finite ones).
    train_seed, test_seed : int
        Seeds of the training stream and of ``b`` and the test vectors.
    test_size : int
        Number of fixed test vectors for the objective.
    config : TrainingConfig, optional
        Further optimiser settings (optimiser, betas, scheduler, BLAS
        threads, which also apply to the checks, ...);
        ``steps``, ``lr``, ``batch_size``, ``loss`` and ``progress`` are
        replaced.
    progress : bool
        Show the trainer's progress bar.

    Returns
    -------
    PreconditionerTraining

    Raises
    ------
    ValueError
        Non-square, non-symmetric or non-finite ``A``; a size mismatch; a bad
        ``b`` or setting.
    """
    if not isinstance(op, SchwarzOperator):
        raise TypeError(f"op must be a SchwarzOperator, got {type(op).__name__}")
    A = _check_spd_candidate(A)
    _check_size(A, op.shape[0], "the operator")
    check_choice("objective", objective, OBJECTIVES)
    if distribution is None:
        distribution = "energy" if objective == "energy" else "gaussian"
    check_choice("distribution", distribution, DISTRIBUTIONS)
    steps = check_int("steps", steps, minimum=0)
    rel_lr = check_positive_float("lr", lr)
    check_every = check_int("check_every", check_every, minimum=1)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    test_size = check_int("test_size", test_size, minimum=1)
    rtol = check_positive_float("rtol", rtol)
    n = A.shape[0]
    maxiter = 2 * n if maxiter is None else check_int("maxiter", maxiter, minimum=1)
    test_rng = np.random.default_rng(check_int("test_seed", test_seed, minimum=0))
    if b is None:
        b = test_rng.standard_normal(n)
    b = np.asarray(to_numpy(b), dtype=np.float64)
    if b.shape != (n,):
        raise ValueError(f"b must have shape ({n},), got {b.shape}")
    if not np.all(np.isfinite(b)):
        raise ValueError("b contains NaN or inf")
    norm = "energy" if objective == "energy" else "l2"
    sampler = PreconditionerSampler(A, distribution, norm=norm, dtype=op.dtype,
                                    backend=op.backend)
    Z_test = to_numpy(sampler.sample(test_size, test_rng)[1])

    abs_lr = rel_lr * parameter_scale(A)
    settings = asdict(config) if config is not None else {}
    settings.update(steps=steps, lr=abs_lr, batch_size=batch_size, loss="mse",
                    progress=progress, val_every=max(steps, 1), checkpoint_every=0)
    settings["loss"] = "energy" if objective == "energy" else "mse"
    weight = asarray(A.astype(op.dtype), backend=op.backend) if objective == "energy" else None
    trainer = Trainer(op, sampler, TrainingConfig(**settings), train_seed=train_seed,
                      loss_weight=weight)
    seconds = {"train": 0.0, "checks": 0.0}

    threads = trainer.config.blas_threads

    def check() -> IterationCheck:
        start = time.perf_counter()
        limits = (threadpool_limits(limits=threads, user_api="blas") if threads is not None
                  else contextlib.nullcontext())
        with limits:
            its, ok, res = cg_iterations(A, op, b, rtol, maxiter)
            value = preconditioner_objective(op, A, Z_test, objective)
        seconds["checks"] += time.perf_counter() - start
        return IterationCheck(trainer.step, its, ok, res, value)

    checks = [check()]
    best, best_theta = checks[0], op.xp.array(op.theta, copy=True)
    last_theta = best_theta
    status = "finished"
    while trainer.step < steps:
        result = trainer.run(min(steps, trainer.step + check_every))
        seconds["train"] = trainer.seconds["total"]
        if result.status != "finished":
            status = "diverged"
            break
        checks.append(check())
        last_theta = op.xp.array(op.theta, copy=True)
        if checks[-1].key() <= best.key():
            best, best_theta = checks[-1], last_theta
    if keep_best:
        op.theta[...] = best_theta
    else:
        op.theta[...] = last_theta
        best = checks[-1]
    return PreconditionerTraining(status, trainer.step, best, checks[0], checks[-1], checks,
                                  abs_lr, objective, trainer.history, seconds)
