"""The 2D and 3D problems of ``ddops compare``: matrices, decompositions, solver, metrics.

``ddops compare --problem poisson2d|poisson3d|diffusion2d`` runs the paper's
comparison on the finite-difference problems of :mod:`ddops.problems.grid`:
``n`` interior points per direction, ``subdomains`` boxes of the grid
(:meth:`ddops.Decomposition.from_grid`, boxes per direction from the most
balanced factorisation of ``subdomains``), METIS parts of the matrix graph or
parts from recursive coordinate bisection (:meth:`ddops.Decomposition.from_matrix`),
and an algebraic coarse space (GDSW, RGDSW or Nicolaides).

``--problem elasticity2d`` is the P1 plane-strain elasticity of ``ddops precond``
(:func:`ddops.problems.fem.fem_elasticity_2d`: the structured mesh of the unit
square with ``n`` interior points per direction, ``E = 1``, ``nu = 0.3``, clamped
at ``x = 0``): two unknowns per node on a grid of ``(n + 1) x (n + 2)`` nodes,
METIS or RCB parts that keep both unknowns of a node together, and coarse spaces
built with the three rigid body modes as null space.

The exact solutions come from one sparse LU factorisation of ``A``.  The
operator metrics are exact up to a size limit and sampled above it; every
metric names the method that produced it (``*_method`` keys), and
``sampled_metrics`` lists the ones that are randomised estimates.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import splu

from ..backend import to_numpy
from ..operators import LowRankOperator

__all__ = ["PROBLEMS", "GRID_PROBLEMS", "ELASTICITY", "PARTITIONERS", "GRID_COARSE_BASES",
           "DIMENSION", "BLOCK_SIZE", "PROBLEM_DEFAULTS", "ELASTICITY_DEFAULTS",
           "SUBDOMAIN_WIDTH", "SCALING_WIDTH",
           "SCALING_GRID_NS", "grid_parts", "grid_matrix", "problem_defaults",
           "subdomain_width", "node_shape", "elasticity_problem", "vector_fourier_rhs",
           "Factorisation", "poisson_inverse_eigenvalues", "evaluate_grid"]

#: Problems of ``ddops compare``: the paper's 1D problem, the 2D/3D grid problems and
#: 2D P1 elasticity (also a problem of ``ddops precond``).
PROBLEMS = ("poisson1d", "poisson2d", "poisson3d", "diffusion2d", "elasticity2d")
GRID_PROBLEMS = PROBLEMS[1:]
#: The finite-element elasticity problems (scikit-fem; METIS or RCB partitions).
ELASTICITY = ("elasticity2d",)
#: Space dimension of each problem.
DIMENSION = {"poisson1d": 1, "poisson2d": 2, "poisson3d": 3, "diffusion2d": 2,
             "elasticity2d": 2}
#: Unknowns per node (the displacement components of elasticity); 1 for the others.
BLOCK_SIZE = {"elasticity2d": 2}
#: Non-overlapping partitions of the grid problems: boxes of the grid, METIS parts of the
#: graph of A, or recursive coordinate bisection (the values of ``ddops precond``).
PARTITIONERS = ("grid", "metis", "rcb")
#: Coarse spaces of the grid problems (built from ``A`` and the partition).
GRID_COARSE_BASES = ("gdsw", "rgdsw", "nicolaides", "pou")
#: The settings a grid problem starts from where the 1D defaults do not apply: ``n``
#: points per direction, ``subdomains`` boxes, ``overlap`` graph layers.
PROBLEM_DEFAULTS: dict[int, dict[str, Any]] = {
    2: dict(n=64, subdomains=16, overlap=1, coarse_basis="gdsw"),
    3: dict(n=16, subdomains=8, overlap=1, coarse_basis="gdsw"),
}
#: The settings of ``elasticity2d`` that differ from :data:`PROBLEM_DEFAULTS`: two unknowns
#: per node and three coarse functions (rigid body modes) per interface component make a
#: step several times as expensive as ``poisson2d``'s at the same ``n``, so the default is
#: ``n = 32`` (2244 unknowns, 16 METIS parts of about 140); the grid's boxes do not apply.
ELASTICITY_DEFAULTS: dict[str, Any] = dict(n=32, subdomains=16, overlap=1, coarse_basis="gdsw",
                                           partitioner="metis")
#: Points per direction of a subdomain when ``compare`` is given ``--n`` alone:
#: ``subdomains = (n // width) ** dim`` (1D: the paper's ``n / 32``; ``elasticity2d``: 8,
#: two unknowns per node).
SUBDOMAIN_WIDTH = {1: 32, 2: 16, 3: 8}
_PROBLEM_SUBDOMAIN_WIDTH = {"elasticity2d": 8}
#: Points per direction of a subdomain in ``ddops scaling`` (weak scaling).
SCALING_WIDTH = {1: 32, 2: 32, 3: 8}
#: Default sizes (points per direction) of ``ddops scaling`` on the grid problems.
SCALING_GRID_NS = {2: (64, 128, 256), 3: (16, 32)}

#: Largest number of unknowns whose eigenvalues are computed densely (no closed form).
DENSE_EIG_LIMIT = 8192
#: Rademacher probes of the sampled estimates.
PROBES = 64


def _factorisations(N: int, dim: int) -> list[tuple[int, ...]]:
    divisors = [k for k in range(1, N + 1) if N % k == 0]
    return [t for t in itertools.product(divisors, repeat=dim - 1)
            if N % int(np.prod(t)) == 0] if dim > 1 else [()]


def grid_parts(subdomains: int, dim: int, n: int) -> tuple[int, ...]:
    """Boxes per direction: the most balanced factorisation of ``subdomains`` into ``dim`` factors.

    Balanced means the smallest largest factor (then the smallest spread);
    the larger factors go to the first (fastest, ``x``) directions.

    Raises
    ------
    ValueError
        When a factor exceeds the ``n`` points per direction (the message
        names ``subdomains`` and suggests numbers that fit).
    """
    best = None
    for head in _factorisations(subdomains, dim):
        parts = tuple(sorted((*head, subdomains // int(np.prod(head, dtype=np.int64))),
                             reverse=True))
        key = (max(parts), max(parts) - min(parts))
        if best is None or key < best[0]:
            best = (key, parts)
    parts = best[1]
    if max(parts) > n:
        fits = sorted({k ** dim for k in range(1, n + 1)} | {2 ** j for j in range(1, 30)
                                                              if 2 ** j <= n ** dim})
        near = [f for f in fits if f <= n ** dim and max(grid_parts_unchecked(f, dim)) <= n]
        near = sorted(near, key=lambda f: abs(f - subdomains))[:3]
        raise ValueError(
            f"subdomains={subdomains} cannot be boxes of a grid with n={n} points per "
            f"direction: the most balanced split into {dim} factors is "
            f"{' x '.join(map(str, parts))}, and {max(parts)} > {n}; use a number whose "
            f"factors fit (for example {', '.join(map(str, sorted(near)))}) or "
            f"--partitioner metis")
    return parts


def grid_parts_unchecked(subdomains: int, dim: int) -> tuple[int, ...]:
    """The factorisation of :func:`grid_parts` without the size check."""
    return grid_parts(subdomains, dim, subdomains)


def problem_defaults(problem: str) -> dict[str, Any]:
    """The settings a 2D/3D problem starts from where the 1D defaults do not apply."""
    if problem in ELASTICITY:
        return dict(ELASTICITY_DEFAULTS)
    return dict(PROBLEM_DEFAULTS[DIMENSION[problem]])


def subdomain_width(problem: str) -> int:
    """Points per direction of a subdomain when only ``n`` is given (:data:`SUBDOMAIN_WIDTH`)."""
    return _PROBLEM_SUBDOMAIN_WIDTH.get(problem, SUBDOMAIN_WIDTH[DIMENSION[problem]])


def node_shape(problem: str, n: int) -> tuple[int, ...]:
    """Points per direction of the grid that carries a problem's unknowns (``x`` fastest).

    ``(n,) * dim`` for the finite-difference problems; ``(n + 1, n + 2)`` for
    ``elasticity2d``, whose nodes at ``x = 0`` are clamped and removed (each node
    carries :data:`BLOCK_SIZE` unknowns, interleaved).
    """
    if problem == "elasticity2d":
        return (n + 1, n + 2)
    return (n,) * DIMENSION[problem]


def elasticity_problem(n: int) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray]:
    """``elasticity2d``: the matrix, the node coordinates and the rigid body modes.

    The homogeneous problem of ``ddops precond --problem elasticity2d`` (``E = 1``,
    ``nu = 0.3``, clamped at ``x = 0``) on the structured mesh with ``n`` interior
    points per direction.
    """
    from ..problems import fem, rigid_body_modes

    A, X = fem.fem_elasticity_2d(n)
    return A, X, rigid_body_modes(X)


def vector_fourier_rhs(solve: Any, shape: tuple[int, ...], components: int, modes: int,
                       mode: str, dtype: Any) -> Any:
    """Fourier right-hand sides for a vector field: each scalar mode in each component.

    The tensor-product modes of :class:`~ddops.learning.data.GridFourierRHS` on the
    node grid ``shape``, with their combination scales, placed in one displacement
    component at a time (unknowns interleaved per node), so that ``2 k`` functions
    span both components; the exact solutions come from ``solve`` (``A^-1 X``).
    """
    from ..learning.data import BasisRHS, GridFourierRHS

    size = int(np.prod(shape))
    # the scalar modes and their scales; the identity stands in for A, which this
    # sampler never sees
    scalar = GridFourierRHS(sp.identity(size, format="csr"), shape, modes, mode=mode)
    phi = np.asarray(scalar.basis, dtype=np.float64)
    k = phi.shape[1]
    basis = np.zeros((components * size, components * k))
    for j in range(components):
        basis[j::components, j::components] = phi
    scale = np.repeat(scalar.combination_scale, components)
    return BasisRHS(basis, solve(basis), scale, mode=mode, dtype=dtype)


def grid_matrix(problem: str, n: int, contrast: float) -> sp.csr_matrix:
    """The matrix of a grid problem (``n`` interior points per direction)."""
    from ..problems import diffusion_2d, high_contrast_channels, poisson_2d, poisson_3d

    if problem == "poisson2d":
        return poisson_2d(n)
    if problem == "poisson3d":
        return poisson_3d(n)
    if problem == "diffusion2d":
        return diffusion_2d(high_contrast_channels(n, contrast))
    if problem in ELASTICITY:
        return elasticity_problem(n)[0]
    raise ValueError(f"problem must be one of {GRID_PROBLEMS}, got {problem!r}")


class Factorisation:
    """``A^{-1} X`` from one sparse LU factorisation of ``A`` (SuperLU), for blocks of columns."""

    def __init__(self, A: Any) -> None:
        self._lu = splu(sp.csc_matrix(A, dtype=np.float64))
        self.num_dofs = A.shape[0]

    def solve(self, X: Any) -> np.ndarray:
        """``A^{-1} X`` for an ``n`` vector or an ``n x k`` block (float64)."""
        X = np.asarray(to_numpy(X), dtype=np.float64)
        return self._lu.solve(np.ascontiguousarray(X) if X.ndim == 1 else np.asfortranarray(X))


def poisson_inverse_eigenvalues(n: int, dim: int) -> np.ndarray:
    """Eigenvalues of ``A^{-1}`` for the finite-difference Laplacian, in decreasing order.

    ``A``'s eigenvalues are ``sum_k 4 h^-2 sin^2(j_k pi h / 2)``, ``j_k = 1..n``,
    ``h = 1 / (n + 1)`` (the Kronecker sum of the 1D matrices).
    """
    h = 1.0 / (n + 1)
    lam1 = 4.0 / h**2 * np.sin(np.arange(1, n + 1) * np.pi * h / 2) ** 2
    lam = lam1
    for _ in range(dim - 1):
        lam = (lam[:, None] + lam1[None, :]).ravel()
    return np.sort(1.0 / lam)[::-1]


def _sampled_sq_norm(apply: Any, n: int, probes: int, seed: int, block: int = 64) -> float:
    """``E_z ||B z||^2 = ||B||_F^2`` over Rademacher probes ``z`` (``apply(Z) = B Z``)."""
    rng = np.random.default_rng(seed)
    total = 0.0
    for start in range(0, probes, block):
        Z = rng.choice([-1.0, 1.0], size=(n, min(block, probes - start)))
        Y = apply(Z)
        total += float(np.sum(Y * Y))
    return total / probes


def spectrum(problem: str, n: int, A: Any) -> tuple[np.ndarray | None, str | None]:
    """Eigenvalues of ``A^{-1}`` and how they were found, or ``(None, None)``.

    Closed form for Poisson, dense eigenvalues up to :data:`DENSE_EIG_LIMIT`
    unknowns otherwise.
    """
    if problem in ("poisson2d", "poisson3d"):
        return poisson_inverse_eigenvalues(n, DIMENSION[problem]), "closed form"
    if A.shape[0] <= DENSE_EIG_LIMIT:
        from ..learning.spectral import inverse_eigenvalues

        return np.abs(inverse_eigenvalues(A)), "exact (dense eigenvalues)"
    return None, None


def evaluate_grid(op: LowRankOperator, A: Any, solve: Any, validation: tuple[Any, Any],
                  evaluation: tuple[Any, Any], mu: np.ndarray | None,
                  mu_method: str | None = None, loss: str = "wmse",
                  exact_limit: int | None = None) -> dict[str, Any]:
    """The metrics of :func:`ddops.learning.metrics.evaluate` for a grid problem.

    ``mu`` holds the eigenvalues of ``A^{-1}`` when known (closed form or
    dense); without them ``||A^{-1}||_F`` is a sampled estimate and the
    best rank-r error is not computed (``None``).  The keys
    ``operator_error_method``, ``inverse_norm_method`` and
    ``best_rank_error_method`` say how each number was obtained, and
    ``sampled_metrics`` lists the randomised estimates.
    """
    from ..learning.metrics import model_metrics, operator_fro_error

    err, method = operator_fro_error(op, solve, exact_limit, probes=PROBES)
    n = A.shape[0]
    if mu is not None:
        inv_norm = float(np.sqrt(np.sum(mu**2)))
        norm_method = mu_method or "exact"
        r = min(int(op.rank_bound), mu.size)
        best = float(np.sqrt(np.sum(mu[r:][::-1] ** 2)))
        best_method = norm_method
    else:
        inv_norm = float(np.sqrt(_sampled_sq_norm(solve, n, PROBES, seed=1)))
        norm_method = f"sampled ({PROBES} Rademacher probes)"
        best, best_method = None, "not computed (no closed-form spectrum above the dense limit)"
    sampled = [k for k, m in (("operator_fro_error", method),
                              ("operator_rel_fro_error", method),
                              ("operator_rel_fro_error", norm_method))
               if m.startswith("sampled")]
    entry = model_metrics(op, validation, evaluation, loss, {
        "operator_fro_error": err,
        "operator_rel_fro_error": err / inv_norm,
        "operator_error_method": method,
        "inverse_fro_norm": inv_norm,
        "inverse_norm_method": norm_method,
        "best_rank_fro_error": best,
        "best_rank_error_method": best_method,
    })
    entry["sampled_metrics"] = sorted(set(sampled))
    return entry


def global_ranks_for(schwarz: LowRankOperator, n: int) -> tuple[int, int]:
    """The paper's two baselines: the Schwarz model's rank bound and its parameter count.

    The parameter-matched rank is ``round(num_params / (2 n))`` (at least 1),
    the rank of the global ``Q K^T`` with about as many parameters.
    """
    same_params = max(1, int(round(schwarz.num_params / (2 * n))))
    return int(min(schwarz.rank_bound, n)), same_params

