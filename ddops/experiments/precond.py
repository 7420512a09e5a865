"""``ddops precond``: Krylov iterations with classical and learned Schwarz preconditioners.

``--problem poisson1d`` (the default), the 1D Poisson matrix with ``n``
elements, ``N = n / 32`` subdomains and an overlap of 2: one random
right-hand side ``b`` is solved to ``rtol`` with

* CG and no preconditioner, Jacobi, one-level and two-level additive Schwarz;
* GMRES and two-level restricted additive Schwarz (RAS);
* GMRES and Schwarz attention trained as in the paper (operator regression on
  32 Fourier modes, weighted MSE, ``lr = 1e-3``);
* CG and the learned symmetric Schwarz preconditioner
  (:mod:`ddops.precond.learned`) from a random initialisation and from
  two-level Schwarz, trained with the iteration safeguard;
* CG and pyamg's smoothed aggregation, when pyamg is installed.

The 2D/3D problems (``n`` interior grid points per direction):

* ``poisson2d``, ``poisson3d``: finite-difference Poisson;
* ``diffusion2d``: high-contrast channels along ``x`` that touch the Dirichlet
  sides (:func:`~ddops.problems.high_contrast_channels`);
* ``channels2d``: the same channels kept one cell away from the sides
  (``margin = 1``), so that they float inside the domain;
* ``lognormal2d``, ``lognormal3d``: a log-normal random coefficient
  (:func:`~ddops.problems.lognormal_field`, correlation length 0.1);
* ``inclusions3d``: random box-shaped inclusions
  (:func:`~ddops.problems.random_inclusions`, about one per 600 cells);
* ``elasticity2d``, ``elasticity3d``: P1 linear elasticity (plane strain in 2D,
  :func:`~ddops.problems.fem.fem_elasticity_2d` on the structured unit square,
  :func:`~ddops.problems.fem.fem_elasticity_3d` on
  :func:`~ddops.problems.fem.box_mesh`), clamped at ``x = 0``, homogeneous
  (``E = 1``) or, with ``contrast`` other than 1, with round stiff inclusions
  (:func:`~ddops.problems.stiff_inclusions`); rigid-body, translation or
  constant null space.

``contrast`` is the ratio of the largest to the smallest value of the
log-normal fields and the ratio of the inclusion (channel) coefficient to the
background otherwise; the random coefficients are drawn with ``seed``.  One
random right-hand side is solved with CG and no preconditioner, Jacobi,
one-level and two-level additive Schwarz (Nicolaides, GDSW, RGDSW, adaptive
GDSW or GenEO coarse spaces, or all five) on a box
(``Decomposition.from_grid``), METIS or RCB decomposition grown by ``overlap``
layers of the graph of ``A``, and pyamg's smoothed aggregation (with the null
space as near null space on elasticity) and classical (Ruge-Stuben) AMG.  The
adaptive coarse spaces take ``threshold`` and the caps on their eigenvectors;
GenEO uses the finite-element Neumann matrices of the subdomains on the
elasticity problems and the algebraic ones of :mod:`ddops.dd.adaptive`
otherwise.  Every row reports its set-up split into partition, overlap, local
factorisation, coarse space (of which the eigenproblems of the adaptive
spaces) and coarse factorisation, its solve time and its peak memory (see
:data:`MEMORY_METHOD`); a row whose set-up refuses the matrix (a ValueError: GenEO on a
matrix that is not diagonally dominant, a singular coarse matrix) is reported as
refused, and a pyamg row that fails as failed, each with its reason, and the other rows
still run (``ddops precond`` then exits with status 4).

``--matrix FILE`` runs the same rows on a user's matrix (Matrix Market ``.mtx``, scipy
``.npz`` or dense ``.npy``; :mod:`ddops.problems.files`) with a METIS (or, with
``--coordinates``, RCB) decomposition: ``--rhs`` (default: random), ``--coordinates``
(one row per node or per unknown), ``--block-size`` (unknowns per node, interleaved),
``--null-space constants|rigid|FILE`` (``rigid``: the rigid body modes of the
coordinates) and ``--kernel constants|FILE`` for a singular matrix (the right-hand side
is then projected off the kernel, and the Schwarz rows get ``kernel=``).  The matrix is
checked once, before any row (finite, symmetric to rounding, a positive diagonal, and,
without ``--kernel``, not annihilating the constants or the null space); a matrix whose
rows come in groups of 2 or 3 coupling the same nodes, given without ``--block-size``,
gets a one-line hint (:func:`block_structure`).

It prints and writes ``<prefix>_table.md``, ``<prefix>_results.json``, a
residual-history plot ``<prefix>_residuals.png`` and, when some methods need
many more iterations than others, ``<prefix>_residuals_zoom.png`` with the
fast ones only.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import math
import os
import platform
import sys
import tempfile
import time
import tracemalloc
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from .._validation import check_choice, check_int, check_positive_float
from ..dd.adaptive import (
    AGDSW_THRESHOLD,
    GENEO_THRESHOLD,
    MAX_PER_COMPONENT,
    MAX_PER_SUBDOMAIN,
)
from ..dd.decomposition import Decomposition, Decomposition1D
from ..dd.partition import TARGET_SUBDOMAIN_UNKNOWNS, default_subdomains
from ..io import atomic_write_json, atomic_write_text
from ..learning.training import Trainer, TrainingConfig
from ..linalg.local_solvers import thread_limit
from ..precond.learned import (
    BASES,
    OBJECTIVES,
    PreconditionerTraining,
    learned_schwarz_preconditioner,
    train_preconditioner,
)
from ..precond.schwarz import (
    SingularMatrixError,
    TwoLevelSchwarz,
    jacobi,
    solve_with_history,
)
from ..problems.poisson1d import KINDS, poisson_1d
from ._argtypes import int_at_least, positive_float

__all__ = ["PrecondConfig", "METHODS", "ND_METHODS", "PROBLEMS", "COARSE_SPACES",
           "ADAPTIVE_COARSE_SPACES", "COARSE_CHOICES", "PARTITIONER_CHOICES", "NULL_SPACES",
           "FACTOR_DTYPES", "MEMORY_METHOD", "box_grid", "block_structure", "add_arguments",
           "run_from_args", "run_precond"]

#: Method keys in table order: ``key -> (Krylov method, label)`` (``--problem poisson1d``;
#: the rows of the 2D/3D problems are :data:`ND_METHODS`).
METHODS: dict[str, tuple[str, str]] = {
    "none": ("cg", "no preconditioner"),
    "jacobi": ("cg", "Jacobi"),
    "one_level": ("cg", "one-level additive Schwarz"),
    "two_level": ("cg", "two-level additive Schwarz"),
    "ras": ("gmres", "two-level RAS"),
    "paper": ("gmres", "Schwarz attention, paper training"),
    "learned_random": ("cg", "learned symmetric, random init"),
    "learned_two_level": ("cg", "learned symmetric, two-level init"),
    "pyamg": ("cg", "pyamg smoothed aggregation"),
}

#: The label of the paper row without training (``--no-train``, ``paper_steps=0``).
UNTRAINED_PAPER_LABEL = "Schwarz attention, untrained (initialisation)"

#: Method keys of the 2D/3D problems in table order (the two-level rows take ``--coarse``;
#: the pyamg rows need pyamg).
ND_METHODS: dict[str, tuple[str, str]] = {
    **{k: METHODS[k] for k in ("none", "jacobi", "one_level", "two_level", "pyamg")},
    "pyamg_rs": ("cg", "pyamg classical AMG (Ruge-Stuben)"),
}

#: Problems of ``--problem``.
PROBLEMS = ("poisson1d", "poisson2d", "poisson3d", "diffusion2d", "channels2d", "lognormal2d",
            "lognormal3d", "inclusions3d", "elasticity2d", "elasticity3d")

#: Space dimension of each problem.
DIMENSIONS = {"poisson1d": 1, "poisson2d": 2, "poisson3d": 3, "diffusion2d": 2,
              "channels2d": 2, "lognormal2d": 2, "lognormal3d": 3, "inclusions3d": 3,
              "elasticity2d": 2, "elasticity3d": 3}

#: The finite-element elasticity problems (scikit-fem; METIS or RCB partitions).
ELASTICITY = ("elasticity2d", "elasticity3d")

#: Default ``n`` of each problem: 1D elements, otherwise interior points per direction.
DEFAULT_N = {"poisson1d": 1024, "poisson2d": 128, "poisson3d": 20, "diffusion2d": 128,
             "channels2d": 96, "lognormal2d": 128, "lognormal3d": 20, "inclusions3d": 20,
             "elasticity2d": 64, "elasticity3d": 11}

#: Subdomain width in points per direction (about 32 x 32 in 2D, 10 x 10 x 10 in 3D) of the
#: structured subdomains named in the help text; the default number of subdomains of the
#: problems without a :data:`PROBLEM_SUBDOMAIN_WIDTH` is
#: :func:`ddops.dd.partition.default_subdomains` of the number of unknowns.
SUBDOMAIN_WIDTH = {2: 32, 3: 10}

#: Problems whose default subdomains are narrower than :data:`SUBDOMAIN_WIDTH`: the
#: high-contrast problems made for the adaptive coarse spaces, whose local eigenproblems
#: grow with the subdomains (``channels2d``: 36 subdomains of 16 x 16 points at ``n = 96``;
#: ``lognormal2d``: 64 at ``n = 128``; ``lognormal3d`` and ``inclusions3d``: 27 of about 7^3
#: at ``n = 20``; ``elasticity3d``: 8 at ``n = 11``).
PROBLEM_SUBDOMAIN_WIDTH = {"channels2d": 16, "lognormal2d": 16, "lognormal3d": 6,
                           "inclusions3d": 6, "elasticity3d": 5}

#: Coarse spaces of the two-level rows built from a few fixed functions per subdomain or
#: interface component (``--coarse all``: each, then :data:`ADAPTIVE_COARSE_SPACES`).
COARSE_SPACES = ("nicolaides", "gdsw", "rgdsw")

#: The adaptive (spectral) coarse spaces: adaptive GDSW and GenEO (:mod:`ddops.dd.adaptive`).
ADAPTIVE_COARSE_SPACES = ("agdsw", "geneo")

#: Values of ``--coarse``; ``"interface_hats"`` (the 1D default) needs 1D coordinates.
COARSE_CHOICES = ("interface_hats", *COARSE_SPACES, *ADAPTIVE_COARSE_SPACES, "learned", "all")

#: The rows of ``--coarse learned`` (2D/3D and ``--matrix``): the learned enrichment
#: (:func:`ddops.precond.learned_coarse.learned_coarse_basis`) beside its GDSW base, the
#: adaptive spaces and the exact-deflation ceiling with the same number of added functions
#: (:func:`ddops.precond.learned_coarse.deflation_basis`, dense: small problems only).
LEARNED_ROWS = ("gdsw", "agdsw", "geneo", "learned", "deflation")

#: Default learned functions per subdomain of ``--coarse learned`` (``--extra``).
DEFAULT_EXTRA = 2

#: Names of the coarse spaces in the row labels.
_COARSE_LABELS = {"interface_hats": "interface hats", "nicolaides": "Nicolaides",
                  "gdsw": "GDSW", "rgdsw": "RGDSW", "agdsw": "AGDSW", "geneo": "GenEO",
                  "learned": "GDSW + learned", "deflation": "GDSW + exact deflation"}

#: The library's default eigenvalue thresholds of the adaptive coarse spaces.
DEFAULT_THRESHOLDS = {"agdsw": AGDSW_THRESHOLD, "geneo": GENEO_THRESHOLD}

#: Values of ``--partitioner``: boxes of the grid, METIS, recursive coordinate bisection.
PARTITIONER_CHOICES = ("grid", "metis", "rcb")

#: Largest ratio of box counts between two directions that the default box grid accepts;
#: otherwise the finite-difference problems fall back to METIS.
GRID_ASPECT = 2

#: Null spaces of ``--null-space`` (elasticity): the three rigid body modes, the two
#: translations, or the constant vector.
NULL_SPACES = ("rbm", "rigid", "translations", "constants")

#: Named null spaces of ``--null-space`` with ``--matrix`` (or a ``.npy`` file): ``rigid``
#: (alias ``rbm``) needs ``--coordinates`` and ``--block-size`` 2 or 3.
MATRIX_NULL_SPACES = ("constants", "rigid", "rbm")

#: Named kernels of ``--kernel`` (or a ``.npy`` file); ``constants``: a pure-Neumann
#: problem (``block_size`` constant vectors, one per component).
MATRIX_KERNELS = ("constants",)

#: The options that describe a user's matrix (``--matrix`` and what goes with it).
MATRIX_OPTIONS = ("rhs", "coordinates", "block_size", "kernel")

#: ``--factor-dtype``: precision of the Schwarz rows' local factorisations
#: (``TwoLevelSchwarz(factor_dtype=...)``; the coarse solve and CG stay in float64).
FACTOR_DTYPES = ("float64", "float32")

#: ``--local-solver`` choices (:data:`ddops.precond.schwarz.LOCAL_SOLVERS` without the alias).
LOCAL_SOLVER_CHOICES = ("auto", "dense", "superlu", "pardiso", "amg")

#: ``--extension-solver`` choices (:func:`ddops.dd.gdsw.harmonic_extension`).
EXTENSION_SOLVER_CHOICES = ("auto", "superlu", "pardiso", "amg")

#: Default contrast of ``--problem diffusion2d``.
DEFAULT_CONTRAST = 1e6

#: Default ``--contrast`` of the problems with a heterogeneous coefficient: the channel or
#: inclusion coefficient over the background, the ratio max/min of the log-normal fields.
#: The elasticity problems are homogeneous unless ``--contrast`` is given.
DEFAULT_CONTRASTS = {"diffusion2d": DEFAULT_CONTRAST, "channels2d": 1e6, "lognormal2d": 1e4,
                     "lognormal3d": 1e4, "inclusions3d": 1e6}

#: Cells at each end in ``x`` of the channels of ``channels2d`` left at the background value.
CHANNEL_MARGIN = 1

#: Correlation length of the log-normal fields, in units of the domain's side.
LOGNORMAL_CORRELATION = 0.1

#: ``inclusions3d``: one box of 3 x 3 x 8 cells per this many cells (about 12% of the volume).
CELLS_PER_INCLUSION = 600

#: Stiff inclusions of the elasticity problems with ``--contrast``: ``(count, radius)`` per
#: space dimension (:func:`~ddops.problems.stiff_inclusions`; about 36% of the triangles in
#: 2D, 9% of the tetrahedra in 3D, whatever ``n``).
STIFF_INCLUSIONS = {2: (60, 0.05), 3: (8, 0.15)}

#: Longest failure reason of a pyamg row, in characters.
_REASON_CHARS = 160

#: The settings that only the 1D problem uses (its learned and GMRES rows).
ONE_D_ONLY = ("kind", "restart", "local_rank", "coarse_rank", "train_steps", "lr",
              "batch_size", "check_every", "objective", "learned_base", "paper_steps")

#: How the peak memory of a row of the 2D/3D problems is measured (also in the JSON file).
MEMORY_METHOD = (
    "tracemalloc peak of the row's set-up and solve (numpy and scipy arrays, pyamg's "
    "hierarchy; allocated after the matrix and right-hand side) plus the sparse factors, "
    "which tracemalloc does not see (superlu_factor_bytes, TwoLevelSchwarz.factor_bytes): "
    "for SuperLU an estimate of 12 bytes (value and index) per stored nonzero of L and U, "
    "for MKL PARDISO the memory it reports for its factors.  Not counted: the solvers' and "
    "METIS's temporary work space and other C/C++ allocations outside Python's allocator "
    "hooks.")

#: Bytes per stored nonzero of a SuperLU factor in :data:`MEMORY_METHOD`.
SUPERLU_BYTES_PER_NONZERO = 12

#: The names a run appends to its prefix.
_OUTPUTS = ("_table.md", "_results.json", "_residuals.png", "_residuals_zoom.png")

#: Resolution of the residual plots.
PLOT_DPI = 100

#: The zoomed plot ``<prefix>_residuals_zoom.png`` shows the methods that stop
#: within this many iterations.
ZOOM_ITERATIONS = 100


def box_grid(subdomains: int, dim: int, points: int) -> tuple[int, ...] | None:
    """The most nearly square (cubic) grid of ``subdomains`` boxes, or None.

    Parameters
    ----------
    subdomains : int
        Number of boxes ``N``.
    dim : {2, 3}
        Space dimension.
    points : int
        Grid points per direction; no direction gets more boxes than points.

    Returns
    -------
    tuple of int or None
        Boxes per direction, non-increasing (x first), whose product is ``N`` and
        whose largest and smallest entries differ by at most a factor
        :data:`GRID_ASPECT`; None when no such grid exists (for example a prime ``N``
        above ``GRID_ASPECT``).
    """
    def splits(total: int, k: int, most: int):
        if k == 1:
            if total <= most:
                yield (total,)
            return
        for f in range(min(total, most), 0, -1):
            if total % f == 0:
                for rest in splits(total // f, k - 1, f):
                    yield (f, *rest)

    best = min(splits(subdomains, dim, min(points, subdomains)),
               key=lambda parts: parts[0] / parts[-1], default=None)
    if best is None or best[0] > GRID_ASPECT * best[-1]:
        return None
    return best


@dataclass
class PrecondConfig:
    """Settings of :func:`run_precond` (the defaults of ``ddops precond``).

    Attributes
    ----------
    problem : str
        The matrix, one of :data:`PROBLEMS` (see the module docstring).
    n : int, optional
        ``poisson1d``: line elements (``kind="element"``) or unknowns (``"dof"``).
        Otherwise interior grid points per direction (``elasticity2d``: the
        structured mesh of :func:`~ddops.problems.fem.unit_square_mesh` with ``n``
        interior points per direction, ``2 (n + 2)(n + 1)`` unknowns;
        ``elasticity3d``: :func:`~ddops.problems.fem.box_mesh`, ``3 (n + 2)^2 (n + 1)``
        unknowns).  Default :data:`DEFAULT_N` of the problem.
    subdomains : int, optional
        ``N``; default ``max(2, n // 32)`` in 1D (the two-level methods need an
        interface), ``max(2, (n // w)^dim)`` with ``w`` from
        :data:`PROBLEM_SUBDOMAIN_WIDTH` or else :data:`SUBDOMAIN_WIDTH` otherwise.
    overlap : int, optional
        Overlap of the decomposition: elements or unknowns added on each side in 1D
        (default 2), layers of the graph of ``A`` otherwise (default 1).
    kind : {"element", "dof"}
        Discretisation convention (1D only).
    coarse : str, optional
        Coarse space of the two-level rows, one of :data:`COARSE_CHOICES`; default
        ``"interface_hats"`` in 1D, ``"gdsw"`` otherwise; ``"all"`` gives one row per
        coarse space (:data:`COARSE_SPACES`, then :data:`ADAPTIVE_COARSE_SPACES`).
    threshold : float, optional
        Eigenvalue threshold of the adaptive coarse spaces (``"agdsw"``, ``"geneo"``;
        default :data:`DEFAULT_THRESHOLDS`); only with one of them or ``"all"``.
    max_per_component : int, optional
        Cap on the eigenvectors per interface component of ``"agdsw"`` (default
        :data:`ddops.dd.adaptive.MAX_PER_COMPONENT`); only with ``coarse`` ``"agdsw"`` or
        ``"all"``.
    max_per_subdomain : int, optional
        Cap on the eigenvectors per subdomain of ``"geneo"`` (default
        :data:`ddops.dd.adaptive.MAX_PER_SUBDOMAIN`); only with ``coarse`` ``"geneo"`` or
        ``"all"``.
    partitioner : {"grid", "metis", "rcb"}, optional
        Non-overlapping partition of the 2D/3D problems.  Default ``"grid"`` for the
        finite-difference problems when ``N`` has a box grid (:func:`box_grid`),
        otherwise ``"metis"``; ``"metis"`` for elasticity.
    null_space : str, optional
        Null space of the elasticity coarse spaces and of pyamg's aggregation, one of
        :data:`NULL_SPACES` (default ``"rbm"``); with ``matrix``, one of
        :data:`MATRIX_NULL_SPACES` or a ``.npy`` file (default: constants).
    matrix : str, optional
        A user's matrix file (``.mtx``, ``.npz``, ``.npy``): ``problem`` becomes
        ``"matrix"`` and the 2D/3D rows run on it (METIS parts by default).
    rhs : str, optional
        With ``matrix``: the right-hand side (``.npy`` or ``.mtx``; default random).
    coordinates : str, optional
        With ``matrix``: ``.npy`` coordinates, one row per node or per unknown (for
        ``partitioner="rcb"`` and ``null_space="rigid"``).
    block_size : int, optional
        With ``matrix``: unknowns per node, interleaved (default 1).
    kernel : str, optional
        With ``matrix``: the kernel of a singular matrix, ``"constants"`` or a ``.npy``
        file; the right-hand side is projected off it and the Schwarz rows get
        ``kernel=`` (:class:`~ddops.precond.schwarz.TwoLevelSchwarz`).
    extra : int, optional
        ``coarse="learned"``: learned functions per subdomain (default
        :data:`DEFAULT_EXTRA`); the deflation row adds ``extra * N`` eigenvectors.
    coarse_train_steps : int, optional
        ``coarse="learned"``: Adam steps of the learned enrichment (default 0: its
        initialisation, which is what measured best; see ``docs/learned-coarse.md``).
    contrast : float, optional
        The coefficient contrast of the heterogeneous problems (default
        :data:`DEFAULT_CONTRASTS`): max/min of the log-normal fields (at least 1),
        channel or inclusion coefficient over the background otherwise.  The elasticity
        problems are homogeneous without it or with 1, and have stiff inclusions
        (:data:`STIFF_INCLUSIONS`) otherwise.
    factor_dtype : {"float64", "float32"}
        Precision of the local factorisations of the one- and two-level Schwarz rows
        (``TwoLevelSchwarz(factor_dtype=...)``); the coarse solve and the Krylov
        method stay in float64.
    local_solver : {"auto", "dense", "superlu", "pardiso", "amg"}
        Local solver of the Schwarz rows (``TwoLevelSchwarz(local_solver=...)``).
    extension_solver : {"auto", "superlu", "pardiso", "amg"}
        Interior solver of the harmonic extension of the GDSW, RGDSW and AGDSW rows.
    memory : bool
        Measure the peak memory of every row of the 2D/3D problems (tracemalloc
        hooks slow allocation-heavy set-ups slightly; see :data:`MEMORY_METHOD`).
    local_rank, coarse_rank : int
        Ranks of the learned operators (``coarse_rank=None``: ``n0 = N - 1``); 1D only.
    rtol : float
        Relative residual tolerance of every solve.
    maxiter : int, optional
        Iteration cap of every solve (default ``2 n``; GMRES counts inner iterations).
    restart : int
        GMRES restart length (1D only).
    train_steps : int
        Training steps of each learned symmetric preconditioner (1D only, as the
        other learned settings below).
    lr : float
        Their learning rate, relative to
        :func:`~ddops.precond.learned.parameter_scale`.
    batch_size : int
        Their batch size.
    check_every : int
        Steps between two CG safeguard checks.
    objective : {"energy", "mse"}
        Their training objective.
    learned_base : {"one_level", "jacobi", "identity"}
        Their fixed SPD term.
    paper_steps : int
        Training steps of the paper-trained Schwarz attention.
    seed : int
        Seed of the right-hand sides, of the model initialisations, of METIS and of the
        random coefficients.
    blas_threads : int or None
        Threads of BLAS and of the local solvers (PARDISO's MKL threads, through
        :func:`ddops.linalg.local_solvers.thread_limit`) for the whole run
        (``None``: the library's setting); the
        products are small, and on a few shared cores one thread is fastest
        (see :class:`~ddops.learning.training.TrainingConfig`).
    save_prefix : str
        Prefix of the output files.
    plots : bool
        Write the residual-history plot.
    progress : bool
        Show progress bars while training.
    """

    problem: str = "poisson1d"
    n: int | None = None
    subdomains: int | None = None
    overlap: int | None = None
    kind: str = "element"
    coarse: str | None = None
    threshold: float | None = None
    max_per_component: int | None = None
    max_per_subdomain: int | None = None
    partitioner: str | None = None
    null_space: str | None = None
    contrast: float | None = None
    matrix: str | None = None
    rhs: str | None = None
    coordinates: str | None = None
    block_size: int | None = None
    kernel: str | None = None
    extra: int | None = None
    coarse_train_steps: int | None = None
    factor_dtype: str = "float64"
    local_solver: str = "auto"
    extension_solver: str = "auto"
    memory: bool = True
    local_rank: int = 4
    coarse_rank: int | None = None
    rtol: float = 1e-8
    maxiter: int | None = None
    restart: int = 20
    train_steps: int = 500
    lr: float = 0.1
    batch_size: int = 32
    check_every: int = 50
    objective: str = "energy"
    learned_base: str = "one_level"
    paper_steps: int = 2000
    seed: int = 0
    blas_threads: int | None = 1
    save_prefix: str = "results/precond"
    plots: bool = True
    progress: bool = True

    def validated(self) -> PrecondConfig:
        """A checked copy with the defaults resolved; ValueError/TypeError name the field."""
        c = replace(self)
        if c.matrix is not None or c.problem == "matrix":
            _resolve_matrix(c)
        else:
            for name in MATRIX_OPTIONS:
                if getattr(c, name) is not None:
                    raise ValueError(f"{name}: only used with matrix=FILE (--matrix), not with "
                                     f"problem={c.problem!r}")
            _check_problem(c)
        _check_adaptive_options(c)
        _check_learned_options(c)
        return _check_common(c)


def _check_learned_options(c: PrecondConfig) -> None:
    """``extra`` and ``coarse_train_steps``: only with ``coarse="learned"``, 2D/3D."""
    if c.coarse == "learned" and c.problem == "poisson1d":
        raise ValueError("coarse: 'learned' is for the 2D/3D problems and --matrix (its base "
                         "is GDSW)")
    if c.coarse == "learned" and c.kernel is not None:
        raise ValueError("coarse: 'learned' is not available with kernel= (a singular matrix): "
                         "its near-kernel vectors and its deflation ceiling assume an SPD A")
    for name in ("extra", "coarse_train_steps"):
        if getattr(c, name) is not None and c.coarse != "learned":
            raise ValueError(f"{name}: only used with coarse='learned', not with "
                             f"coarse={c.coarse!r}")
    if c.coarse == "learned":
        c.extra = check_int("extra", DEFAULT_EXTRA if c.extra is None else c.extra, minimum=1)
        c.coarse_train_steps = check_int(
            "coarse_train_steps", 0 if c.coarse_train_steps is None else c.coarse_train_steps,
            minimum=0)


def _check_problem(c: PrecondConfig) -> None:
    """Defaults and checks of the built-in problems."""
    check_choice("problem", c.problem, PROBLEMS)
    if c.problem == "poisson1d":
        _resolve_1d(c)
    else:
        _resolve_nd(c)


def _check_common(c: PrecondConfig) -> PrecondConfig:
    """The checks shared by every problem (solvers, tolerances, training, output)."""
    check_choice("factor_dtype", c.factor_dtype, FACTOR_DTYPES)
    check_choice("local_solver", c.local_solver, LOCAL_SOLVER_CHOICES)
    check_choice("extension_solver", c.extension_solver, EXTENSION_SOLVER_CHOICES)
    c.rtol = check_positive_float("rtol", c.rtol)
    if c.rtol >= 1:
        raise ValueError(f"rtol must be below 1, got {c.rtol:g}")
    if c.maxiter is not None:
        c.maxiter = check_int("maxiter", c.maxiter, minimum=1)
    c.restart = check_int("restart", c.restart, minimum=1)
    for name in ("train_steps", "paper_steps", "seed"):
        setattr(c, name, check_int(name, getattr(c, name), minimum=0))
    if c.blas_threads is not None:
        c.blas_threads = check_int("blas_threads", c.blas_threads, minimum=1)
    c.lr = check_positive_float("lr", c.lr)
    c.batch_size = check_int("batch_size", c.batch_size, minimum=1)
    c.check_every = check_int("check_every", c.check_every, minimum=1)
    check_choice("objective", c.objective, OBJECTIVES)
    check_choice("learned_base", c.learned_base, tuple(b for b in BASES if b != "none"))
    for name in ("memory", "plots", "progress"):
        if not isinstance(getattr(c, name), (bool, np.bool_)):
            raise TypeError(f"{name} must be a bool, got {type(getattr(c, name)).__name__}")
    if not isinstance(c.save_prefix, str):
        raise TypeError(f"save_prefix must be a string, got {type(c.save_prefix).__name__}")
    if not c.save_prefix:
        raise ValueError("save_prefix must not be empty")
    if c.problem == "poisson1d":
        _paper_config(c)  # the paper model's constraints (size, decomposition), before any work
    return c


def _resolve_matrix(c: PrecondConfig) -> None:
    """Defaults and checks of ``matrix=FILE``: the files are read and checked here, before
    any work (they are read once; :func:`_user_problem` reuses them)."""
    if c.problem not in ("poisson1d", "matrix"):  # poisson1d: the default, not a choice
        raise ValueError(f"problem: not used with matrix=FILE (the matrix is the problem), "
                         f"got problem={c.problem!r}")
    if c.matrix is None:
        raise ValueError("problem='matrix' needs matrix=FILE (--matrix)")
    c.problem = "matrix"
    for name in ONE_D_ONLY:
        if getattr(c, name) != getattr(PrecondConfig, name):
            raise ValueError(f"{name}: only used with problem='poisson1d' (the learned "
                             "preconditioners and the GMRES rows are 1D only), not with "
                             "matrix=FILE")
    for name in ("n", "contrast"):
        if getattr(c, name) is not None:
            raise ValueError(f"{name}: not used with matrix=FILE (the file sets the problem)")
    files = _user_files(c)
    n, b = files["A"].shape[0], c.block_size
    _resolve_parts_and_coarse(c, n // b, default_subdomains(n, b), "the matrix")
    c.partitioner = c.partitioner or "metis"
    check_choice("partitioner", c.partitioner, ("metis", "rcb"))
    if c.partitioner == "rcb" and files["X"] is None:
        raise ValueError("partitioner: 'rcb' needs coordinates=FILE (--coordinates)")


_USER_FILES: dict[tuple, dict[str, Any]] = {}


def _user_files(c: PrecondConfig) -> dict[str, Any]:
    """Read and check the files of ``matrix=FILE`` (cached for the run that follows)."""
    from .. import problems

    c.block_size = 1 if c.block_size is None else check_int("block_size", c.block_size,
                                                              minimum=1)
    key = tuple(getattr(c, k) for k in ("matrix", "rhs", "coordinates", "block_size",
                                        "null_space", "kernel"))
    stamp = tuple(os.stat(p).st_mtime_ns if isinstance(p, str) and os.path.isfile(p) else None
                  for p in key)
    if _USER_FILES.get("key") == (key, stamp):
        return _USER_FILES["files"]
    A = _checked_matrix(problems.load_matrix(c.matrix, "matrix"), c.matrix)
    n = A.shape[0]
    b = c.block_size
    if n % b:
        raise ValueError(f"block_size={b} does not divide the {n} unknowns of the matrix")
    rhs = None if c.rhs is None else problems.load_array(c.rhs, "rhs", rows=n, ndim=(1,))
    X = None
    if c.coordinates is not None:
        X = problems.load_array(c.coordinates, "coordinates", ndim=(1, 2))
        X = X[:, None] if X.ndim == 1 else X
        if X.shape[0] == n and b > 1:
            X = X[::b]  # one row per unknown: the node's row
        if X.shape[0] != n // b:
            raise ValueError(f"coordinates: {X.shape[0]} rows; the matrix has {n // b} nodes "
                             f"({n} unknowns, block_size {b})")
    Z = _named_vectors(c.null_space, "null_space", MATRIX_NULL_SPACES, n, b, X)
    K = _named_vectors(c.kernel, "kernel", MATRIX_KERNELS, n, b, X)
    if K is None:
        _check_not_singular(A, b, Z)
    files = {"A": A, "rhs": rhs, "X": X, "Z": Z, "K": K}
    _USER_FILES.clear()
    _USER_FILES.update(key=(key, stamp), files=files)
    return files


#: What ``ddops precond`` says to do about a singular matrix (the flag, not ``kernel=``).
KERNEL_HINT = "pass --kernel constants|FILE (the vectors the matrix annihilates)"


def _checked_matrix(A: Any, path: str) -> Any:
    """The file's matrix checked once, up front, naming ``--matrix`` (``matrix:``): finite,
    symmetric to rounding (the tolerance of :class:`~ddops.precond.schwarz.TwoLevelSchwarz`),
    a positive diagonal.  Found later, the same defects were blamed on the first row that
    met them (``Jacobi: A contains NaN or inf``) after other rows had run."""
    import scipy.sparse as sp

    from ..dd.gdsw import symmetry_defect

    name = f"matrix: {os.path.basename(path)!r}"
    A = sp.csr_matrix(A, dtype=np.float64, copy=True)
    A.sum_duplicates()
    bad = ~np.isfinite(A.data)
    if bad.any():
        rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))[bad]
        more = f" (and {bad.sum() - 1} more)" if bad.sum() > 1 else ""
        raise ValueError(f"{name} contains NaN or inf (row {int(rows[0])}{more})")
    scale = float(np.abs(A.data).max()) if A.nnz else 0.0
    asym, _ = symmetry_defect(A)
    if asym > np.sqrt(np.finfo(np.float64).eps) * scale:
        raise ValueError(f"{name} is not symmetric: max |A - A^T| = {asym:.3e} against "
                         f"max |A| = {scale:.3e}; the Schwarz preconditioners and CG need a "
                         "symmetric positive (semi)definite matrix")
    low = np.flatnonzero(A.diagonal() <= 0)
    if low.size:
        more = f" (and {low.size - 1} more)" if low.size > 1 else ""
        raise ValueError(f"{name}: diagonal entry {int(low[0])} is "
                         f"{A[int(low[0]), int(low[0])]:g}{more}; a symmetric positive "
                         "(semi)definite matrix has a positive diagonal (an empty row or a "
                         "negative-definite sign convention: pass the matrix of -A)")
    return A


def _check_not_singular(A: Any, b: int, Z: np.ndarray | None) -> None:
    """Refuse a matrix without ``--kernel`` that annihilates the constants (one per
    component) or a column of the null space: every row would run to the iteration cap
    (a random right-hand side is inconsistent) and the two-level rows would stop at a
    singular coarse matrix."""
    from ..dd.kernel import KERNEL_RTOL
    from ..precond.schwarz import zero_energy_defects

    n = A.shape[0]
    probes = [np.kron(np.ones((n // b, 1)), np.eye(b))]
    names = ["the constant vector" if b == 1 else f"constant component {j}" for j in range(b)]
    if Z is not None:
        probes.append(Z)
        names += [f"column {j} of the null space" for j in range(Z.shape[1])]
    defects = zero_energy_defects(A, np.hstack(probes))
    hit = np.flatnonzero(defects <= KERNEL_RTOL)
    if hit.size:
        j = int(hit[0])
        raise ValueError(f"matrix: A is singular: it annihilates {names[j]} "
                         f"(max_i |A z|_i / (|A| |z|)_i = {defects[j]:.1e}); {KERNEL_HINT}")


def block_structure(A: Any, sizes: tuple[int, ...] = (2, 3)) -> int | None:
    """The unknowns per node of a vector problem stored without ``--block-size``, or None.

    With ``b`` unknowns per node, interleaved, the rows ``b g, ..., b g + b - 1`` of node
    ``g`` couple with the same nodes (columns ``j`` read as nodes ``j // b``; exact zeros,
    such as the cancelled couplings of P1 elasticity, make the entry patterns differ);
    the largest such ``b`` of ``sizes``.  Whole-array comparisons, no loop over rows.
    """
    import scipy.sparse as sp

    n = A.shape[0]
    row = np.repeat(np.arange(n), np.diff(A.indptr))
    found = None
    for b in sizes:
        if n % b or n // b < 2:
            continue
        # the nodes each row couples with: a pattern (n x n/b), sorted, duplicates merged
        P = sp.csr_matrix((np.ones(A.nnz), (row, A.indices // b)), shape=(n, n // b))
        P.sum_duplicates()
        counts = np.diff(P.indptr)
        groups = counts.reshape(-1, b)
        if not np.all(groups == groups[:, :1]) or np.all(counts == n // b):
            continue  # different node counts within a group, or every node everywhere
        prow = np.repeat(np.arange(n), counts)
        first = P.indptr[(prow // b) * b] + np.arange(P.nnz) - P.indptr[prow]
        if np.array_equal(P.indices, P.indices[first]):
            found = b
    return found


def _named_vectors(value: str | None, name: str, named: tuple[str, ...], n: int, b: int,
                   X: np.ndarray | None) -> np.ndarray | None:
    """``--null-space`` / ``--kernel``: a name of ``named`` or a ``.npy``/``.mtx`` file."""
    from .. import problems

    if value is None:
        return None
    if value == "constants":
        return np.kron(np.ones((n // b, 1)), np.eye(b))
    if value in ("rigid", "rbm") and value in named:
        if X is None or b not in (2, 3) or X.shape[1] != b:
            raise ValueError(f"{name}: 'rigid' needs coordinates=FILE with {b if b > 1 else 2} "
                             "or 3 columns and block_size equal to the dimension (2 or 3)")
        return problems.rigid_body_modes(X)
    if not value.lower().endswith((".npy", ".mtx")):
        raise ValueError(f"{name} must be one of {named} or a .npy/.mtx file, got {value!r}")
    Z = problems.load_array(value, name, rows=n, ndim=(1, 2))
    return Z[:, None] if Z.ndim == 1 else Z


def _check_subdomains(c: PrecondConfig, default: int) -> None:
    if c.subdomains is None:
        c.subdomains = default
    c.subdomains = check_int("subdomains", c.subdomains, minimum=1)
    if c.subdomains < 2:
        raise ValueError(f"subdomains must be >= 2 (the two-level methods need an "
                         f"interface), got {c.subdomains}")


def _resolve_parts_and_coarse(c: PrecondConfig, nodes: int, default: int, what: str) -> None:
    """Subdomains (at most one per node), overlap and coarse space of the 2D/3D rows."""
    _check_subdomains(c, default)
    if c.subdomains > nodes:
        raise ValueError(f"subdomains must be <= the {nodes} nodes of {what}, got "
                         f"{c.subdomains}")
    c.overlap = check_int("overlap", 1 if c.overlap is None else c.overlap, minimum=0)
    c.coarse = "gdsw" if c.coarse is None else c.coarse
    check_choice("coarse", c.coarse, COARSE_CHOICES)
    if c.coarse == "interface_hats":
        raise ValueError("coarse: 'interface_hats' needs 1D coordinates (problem='poisson1d'); "
                         f"use one of {(*COARSE_SPACES, *ADAPTIVE_COARSE_SPACES, 'all')}")


def _check_adaptive_options(c: PrecondConfig) -> None:
    """The options of the adaptive coarse spaces: only with a row that uses them."""
    rows = _coarse_list(c)
    for name, users in (("threshold", ADAPTIVE_COARSE_SPACES),
                        ("max_per_component", ("agdsw",)),
                        ("max_per_subdomain", ("geneo",))):
        if getattr(c, name) is None:
            continue
        if not set(users) & set(rows):
            choices = [repr(u) for u in (*users, "all")]
            raise ValueError(f"{name}: only used with coarse={', '.join(choices[:-1])} or "
                             f"{choices[-1]}, not with coarse={c.coarse!r}")
    if c.threshold is not None:
        c.threshold = check_positive_float("threshold", c.threshold)
    for name in ("max_per_component", "max_per_subdomain"):
        if getattr(c, name) is not None:
            setattr(c, name, check_int(name, getattr(c, name), minimum=0))


def _resolve_1d(c: PrecondConfig) -> None:
    """Defaults and checks of ``problem="poisson1d"`` (today's 1D experiment)."""
    for name, what in (("partitioner", "the 2D/3D problems (poisson1d uses Decomposition1D)"),
                       ("null_space", f"problem in {ELASTICITY}"),
                       ("contrast", f"problem in {(*DEFAULT_CONTRASTS, *ELASTICITY)}")):
        if getattr(c, name) is not None:
            raise ValueError(f"{name}: only used with {what}, not with problem='poisson1d'")
    c.n = check_int("n", DEFAULT_N["poisson1d"] if c.n is None else c.n, minimum=2)
    _check_subdomains(c, max(2, c.n // 32))
    c.overlap = check_int("overlap", 2 if c.overlap is None else c.overlap, minimum=0)
    check_choice("kind", c.kind, KINDS)
    c.coarse = "interface_hats" if c.coarse is None else c.coarse
    check_choice("coarse", c.coarse, COARSE_CHOICES)
    c.local_rank = check_int("local_rank", c.local_rank, minimum=1)
    if c.coarse_rank is not None:
        c.coarse_rank = check_int("coarse_rank", c.coarse_rank, minimum=1)


def _resolve_nd(c: PrecondConfig) -> None:
    """Defaults and checks of the 2D/3D problems."""
    for name in ONE_D_ONLY:  # the learned and GMRES rows exist for the 1D problem only
        default = getattr(PrecondConfig, name)
        if getattr(c, name) != default:
            raise ValueError(f"{name}: only used with problem='poisson1d' (the learned "
                             f"preconditioners and the GMRES rows are 1D only), not with "
                             f"problem={c.problem!r}")
    dim = DIMENSIONS[c.problem]
    c.n = check_int("n", DEFAULT_N[c.problem] if c.n is None else c.n, minimum=2)
    elasticity = c.problem in ELASTICITY
    if c.problem == "elasticity2d":
        nodes = (c.n + 2) * (c.n + 1)
    elif c.problem == "elasticity3d":
        nodes = (c.n + 2) ** 2 * (c.n + 1)
    else:
        nodes = c.n ** dim
    if c.problem in PROBLEM_SUBDOMAIN_WIDTH:
        default = max(2, (c.n // PROBLEM_SUBDOMAIN_WIDTH[c.problem]) ** dim)
    else:  # parts of about TARGET_SUBDOMAIN_UNKNOWNS unknowns
        block = dim if elasticity else 1
        default = default_subdomains(nodes * block, block)
    _resolve_parts_and_coarse(c, nodes, default, f"problem={c.problem!r} with n={c.n}")
    if c.partitioner is not None:
        check_choice("partitioner", c.partitioner, PARTITIONER_CHOICES)
    if elasticity:
        if c.partitioner == "grid":
            raise ValueError("partitioner: 'grid' is for the finite-difference problems; "
                             f"problem={c.problem!r} takes 'metis' or 'rcb'")
        c.partitioner = c.partitioner or "metis"
        c.null_space = "rbm" if c.null_space in (None, "rigid") else c.null_space
        check_choice("null_space", c.null_space, NULL_SPACES)
        if importlib.util.find_spec("skfem") is None:
            raise ValueError(f"problem: {c.problem!r} needs scikit-fem (pip install "
                             "'ddops[fem]')")
    else:
        if c.null_space is not None:
            raise ValueError(f"null_space: only used with problem in {ELASTICITY}, not with "
                             f"problem={c.problem!r}")
        boxes = box_grid(c.subdomains, dim, c.n)
        if c.partitioner == "grid" and boxes is None:
            raise ValueError(
                f"partitioner: 'grid' needs subdomains = a product of {dim} box counts, each "
                f"at most n = {c.n} and within a factor {GRID_ASPECT} of each other; "
                f"{c.subdomains} is not (use 'metis' or 'rcb')")
        c.partitioner = c.partitioner or ("grid" if boxes is not None else "metis")
    if c.problem in DEFAULT_CONTRASTS:
        c.contrast = check_positive_float(
            "contrast", DEFAULT_CONTRASTS[c.problem] if c.contrast is None else c.contrast)
        if c.problem.startswith("lognormal") and c.contrast < 1:
            raise ValueError(f"contrast must be >= 1 for problem={c.problem!r} (the ratio "
                             f"max/min of the field), got {c.contrast:g}")
    elif elasticity:
        if c.contrast is not None:
            c.contrast = check_positive_float("contrast", c.contrast)
    elif c.contrast is not None:
        raise ValueError(f"contrast: only used with problem in "
                         f"{(*DEFAULT_CONTRASTS, *ELASTICITY)}, not with problem={c.problem!r}")


# -- command line ------------------------------------------------------------------------------
class _Given(argparse.Action):
    """Store a flag's value and remember that it was given (1D-only flags are refused)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        given = set(getattr(namespace, "precond_given", ()))
        given.add(self.dest)
        namespace.precond_given = given


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the flags of ``ddops precond`` to ``parser``."""
    d = PrecondConfig()
    pos, nonneg = int_at_least(1), int_at_least(0)
    sizes = ", ".join(f"{k} {v}" for k, v in DEFAULT_N.items())
    g = parser.add_argument_group("problem")
    g.add_argument("--problem", choices=PROBLEMS, default=d.problem,
                   help="the matrix: 1D Poisson (the paper's problem, with the learned "
                        "preconditioners); 2D/3D finite-difference Poisson; 2D diffusion "
                        "with high-contrast channels along x that touch the Dirichlet sides "
                        "(diffusion2d) or float one cell away from them (channels2d); "
                        "diffusion with a log-normal random coefficient (lognormal2d, "
                        "lognormal3d; correlation length 0.1) or random box inclusions "
                        "(inclusions3d); P1 elasticity clamped at x = 0 (elasticity2d, "
                        "elasticity3d; scikit-fem), homogeneous or with stiff inclusions "
                        "(--contrast); default %(default)s")
    g.add_argument("--n", type=int_at_least(2), metavar="N",
                   help="problem size: poisson1d line elements (--kind element, n - 1 "
                        "unknowns) or unknowns (--kind dof); otherwise interior grid points "
                        f"per direction (defaults: {sizes})")
    widths = ", ".join(f"{k} {v}" for k, v in PROBLEM_SUBDOMAIN_WIDTH.items())
    g.add_argument("--subdomains", type=pos,
                   help="number of subdomains N (default: n/32 in 1D, at least 2; otherwise "
                        f"parts of about {TARGET_SUBDOMAIN_UNKNOWNS} unknowns, at least 2, "
                        f"but (n/width)^dim with these widths: {widths})")
    g.add_argument("--overlap", type=nonneg,
                   help="poisson1d: elements (--kind element) or unknowns (--kind dof) added "
                        "on each side of a subdomain (default 2); otherwise layers of the "
                        "graph of A (default 1)")
    g.add_argument("--kind", choices=KINDS, default=d.kind, action=_Given,
                   help="discretisation convention of poisson1d; default %(default)s")
    contrasts = ", ".join(f"{k} {v:.0e}".replace("e+0", "e")
                          for k, v in DEFAULT_CONTRASTS.items())
    g.add_argument("--contrast", type=positive_float,
                   help="coefficient contrast: max/min of the log-normal fields (at least "
                        "1), the channel or inclusion coefficient over the background "
                        f"otherwise (defaults: {contrasts}); elasticity2d/3d: stiff "
                        "inclusions with this Young's modulus over the background's "
                        "(default: none, homogeneous; 1 is homogeneous too)")
    u = parser.add_argument_group("your own matrix (instead of --problem)")
    u.add_argument("--matrix", metavar="FILE",
                   help="run the 2D/3D rows on this matrix: Matrix Market .mtx, scipy .npz "
                        "(scipy.sparse.save_npz) or dense .npy, METIS parts of about "
                        f"{TARGET_SUBDOMAIN_UNKNOWNS} unknowns (default: none, --problem)")
    u.add_argument("--rhs", metavar="FILE",
                   help="right-hand side (.npy or .mtx; default: random with --seed)")
    u.add_argument("--coordinates", metavar="FILE",
                   help=".npy coordinates, one row per node or per unknown (for "
                        "--partitioner rcb and --null-space rigid; default: none)")
    u.add_argument("--block-size", type=pos,
                   help="unknowns per node, interleaved (node k holds unknowns k*b .. "
                        "k*b+b-1); default 1")
    u.add_argument("--kernel", metavar="{constants,FILE}",
                   help="kernel of a singular matrix (pure Neumann, floating body): "
                        "constants or a .npy/.mtx file; the right-hand side is projected off "
                        "it and the Schwarz preconditioners get kernel= (default: none, A "
                        "nonsingular)")
    g.add_argument("--seed", type=nonneg, default=d.seed,
                   help="seed of the right-hand sides, initialisations, METIS and the "
                        "random coefficients; default %(default)s")
    g.add_argument("--blas-threads", type=nonneg, default=d.blas_threads,
                   help="threads of BLAS and of the local solvers (PARDISO's MKL threads); "
                        "0 leaves the library's setting; default %(default)s")
    dd = parser.add_argument_group("decomposition and coarse space")
    dd.add_argument("--partitioner", choices=PARTITIONER_CHOICES,
                    help="2D/3D: boxes of the grid (Decomposition.from_grid), METIS or "
                         "recursive coordinate bisection (Decomposition.from_matrix); default "
                         "grid for the finite-difference problems when N has a box grid "
                         f"with at most {GRID_ASPECT}:1 box counts, else metis; metis for "
                         "elasticity")
    dd.add_argument("--coarse", choices=COARSE_CHOICES,
                    help="coarse space of the two-level rows, or all of them (nicolaides, "
                         "gdsw, rgdsw, then the adaptive agdsw and geneo; 1D: first "
                         "interface_hats); default interface_hats for poisson1d, gdsw "
                         "otherwise.  geneo takes the finite-element Neumann matrices of the "
                         "subdomains on elasticity, the algebraic ones otherwise.  learned "
                         "(2D/3D): GDSW enriched by --extra learned functions per subdomain, "
                         "in one table with gdsw, agdsw, geneo and the exact-deflation "
                         "ceiling (dense, small problems only)")
    dd.add_argument("--extra", type=pos,
                    help="--coarse learned: learned functions per subdomain, and the deflation "
                         f"row's eigenvectors per subdomain (default {DEFAULT_EXTRA}); "
                         "--train-steps sets its Adam steps (default 0: the initialisation, "
                         "which measured best)")
    dd.add_argument("--threshold", type=positive_float,
                    help="eigenvalue threshold of the adaptive coarse spaces (agdsw, geneo; "
                         "with --coarse all both take it): a larger one keeps more "
                         f"eigenvectors (default: agdsw {AGDSW_THRESHOLD:g}, geneo "
                         f"{GENEO_THRESHOLD:g})")
    dd.add_argument("--max-per-component", type=nonneg,
                    help="agdsw: at most this many eigenvectors per interface component "
                         f"(default {MAX_PER_COMPONENT}); a warning in the table says where "
                         "it bites")
    dd.add_argument("--max-per-subdomain", type=nonneg,
                    help="geneo: at most this many eigenvectors per subdomain (default "
                         f"{MAX_PER_SUBDOMAIN}); a warning in the table says where it bites")
    dd.add_argument("--null-space", metavar="{rbm,rigid,translations,constants,FILE}",
                    help="null space of the coarse spaces and of pyamg's smoothed "
                         "aggregation: elasticity: rigid body modes (rbm or rigid), "
                         "translations or constants (default rbm); --matrix: constants "
                         "(default), rigid (needs --coordinates and --block-size 2 or 3) or a "
                         ".npy/.mtx file with one column per vector")
    s = parser.add_argument_group("solvers")
    s.add_argument("--factor-dtype", choices=FACTOR_DTYPES, default=d.factor_dtype,
                   help="precision of the Schwarz rows' local factorisations: float32 "
                        "factors are applied to the float64 residual (the coarse solve and "
                        "CG stay in float64); default %(default)s")
    s.add_argument("--local-solver", choices=LOCAL_SOLVER_CHOICES, default=d.local_solver,
                   help="local solver of the Schwarz rows: dense inverses, SuperLU, MKL "
                        "PARDISO (extra ddops[solvers]) or one aggregation-AMG V-cycle "
                        "(inexact); auto: dense when small, else pardiso when installed, else "
                        "superlu; default %(default)s")
    s.add_argument("--extension-solver", choices=EXTENSION_SOLVER_CHOICES,
                   default=d.extension_solver,
                   help="interior solver of the harmonic extension of gdsw, rgdsw and agdsw "
                        "(amg: inexact, CG with a V-cycle to rtol 1e-6); auto: pardiso when "
                        "installed, else superlu; default %(default)s")
    s.add_argument("--rtol", type=positive_float, default=d.rtol,
                   help="relative residual tolerance of every solve, below 1; "
                        "default %(default)g")
    s.add_argument("--maxiter", type=pos,
                   help="iteration cap of every solve (GMRES: inner iterations); default 2 "
                        "times the number of unknowns")
    s.add_argument("--restart", type=pos, default=d.restart, action=_Given,
                   help="GMRES restart length in iterations (poisson1d); default %(default)s")
    t = parser.add_argument_group("learned preconditioners (poisson1d only)")
    t.add_argument("--local-rank", type=pos, default=d.local_rank, action=_Given,
                   help="local rank of the learned operators; default %(default)s")
    t.add_argument("--coarse-rank", type=pos, action=_Given,
                   help="coarse rank of the learned operators (default n0 = N - 1)")
    t.add_argument("--train-steps", type=nonneg, default=d.train_steps, action=_Given,
                   help="training steps of each learned symmetric preconditioner; "
                        "default %(default)s")
    t.add_argument("--lr", type=positive_float, default=d.lr, action=_Given,
                   help="their learning rate, relative to mean(diag A)^-1/2; "
                        "default %(default)s")
    t.add_argument("--batch-size", type=pos, default=d.batch_size, action=_Given,
                   help="their right-hand sides per step; default %(default)s")
    t.add_argument("--check-every", type=pos, default=d.check_every, action=_Given,
                   help="steps between two CG safeguard checks; default %(default)s")
    t.add_argument("--objective", choices=OBJECTIVES, default=d.objective, action=_Given,
                   help="training objective: error in the A-norm (energy) or Euclidean (mse); "
                        "default %(default)s")
    t.add_argument("--learned-base", choices=("one_level", "jacobi", "identity"),
                   default=d.learned_base, action=_Given,
                   help="fixed SPD term of the learned preconditioners; default %(default)s")
    t.add_argument("--paper-steps", type=nonneg, default=d.paper_steps, action=_Given,
                   help="training steps of the paper-trained Schwarz attention (learning rate "
                        "1e-3, batch 256); default %(default)s")
    t.add_argument("--no-train", dest="train", action="store_false",
                   help="no training at all: learned models are reported at initialisation "
                        "(default: train)")
    o = parser.add_argument_group("output")
    o.add_argument("--save-prefix", default=d.save_prefix, metavar="PREFIX",
                   help="prefix of the output files; missing directories are created, and "
                        "the location is checked first; default %(default)s")
    o.add_argument("--no-plots", dest="plots", action="store_false",
                   help="write no residual plots (default: write them)")
    o.add_argument("--no-memory", dest="memory", action="store_false", default=None,
                   help="2D/3D: do not measure peak memory (tracemalloc's hooks slow "
                        "allocation-heavy set-ups slightly; default: measure it)")
    o.add_argument("--progress", dest="progress", action="store_true", default=None,
                   help="show progress bars on standard error (default: only when it is a "
                        "terminal)")
    o.add_argument("--no-progress", dest="progress", action="store_false", default=None,
                   help="no progress bars (the default when standard error is not a "
                        "terminal)")


def run_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """Run ``ddops precond`` from parsed arguments (see :func:`add_arguments`)."""
    coarse_steps = None
    learned = dict(kind=args.kind, local_rank=args.local_rank, coarse_rank=args.coarse_rank,
                   restart=args.restart, train_steps=args.train_steps if args.train else 0,
                   lr=args.lr, batch_size=args.batch_size, check_every=args.check_every,
                   objective=args.objective, learned_base=args.learned_base,
                   paper_steps=args.paper_steps if args.train else 0)
    if args.problem != "poisson1d" or args.matrix is not None:
        # the 1D-only flags keep their defaults; one given explicitly is refused
        given = sorted(getattr(args, "precond_given", set()) & set(ONE_D_ONLY))
        if "train_steps" in given and args.coarse == "learned":
            # 2D/3D: --train-steps are the Adam steps of the learned coarse enrichment
            given.remove("train_steps")
            coarse_steps = args.train_steps
        if given:
            what = "--matrix" if args.matrix is not None else f"problem={args.problem!r}"
            raise ValueError(f"{given[0]}: only used with problem='poisson1d' (the learned "
                             f"preconditioners and the GMRES rows are 1D only), not with "
                             f"{what}")
        learned = {}
    c = PrecondConfig(
        problem=args.problem, n=args.n, subdomains=args.subdomains, overlap=args.overlap,
        coarse=args.coarse, threshold=args.threshold, max_per_component=args.max_per_component,
        max_per_subdomain=args.max_per_subdomain, partitioner=args.partitioner,
        null_space=args.null_space, matrix=args.matrix, rhs=args.rhs,
        coordinates=args.coordinates, block_size=args.block_size, kernel=args.kernel,
        extra=args.extra, coarse_train_steps=coarse_steps,
        contrast=args.contrast, factor_dtype=args.factor_dtype,
        local_solver=args.local_solver, extension_solver=args.extension_solver,
        memory=args.memory is not False, rtol=args.rtol,
        maxiter=args.maxiter, seed=args.seed, blas_threads=args.blas_threads or None,
        save_prefix=args.save_prefix, plots=args.plots, progress=args.progress is not False,
        **learned)
    return run_precond(c)


# -- the experiment ----------------------------------------------------------------------------
def _solve(A: Any, b: np.ndarray, M: Any, method: str, c: PrecondConfig,
           cap: int) -> dict[str, Any]:
    start = time.perf_counter()
    if method == "cg":
        _, info, history, its = solve_with_history(A, b, M, "cg", rtol=c.rtol, maxiter=cap)
    else:
        cycles = max(1, math.ceil(cap / c.restart))
        _, info, history, its = solve_with_history(A, b, M, "gmres", rtol=c.rtol,
                                                   maxiter=cycles, restart=c.restart)
    return {"iterations": its, "converged": info == 0, "final_residual": float(history[-1]),
            "solve_seconds": time.perf_counter() - start, "history": history}


def _paper_label(c: PrecondConfig) -> str:
    """The paper row's label: trained as in the paper, or untrained (``--no-train``)."""
    return METHODS["paper"][1] if c.paper_steps else UNTRAINED_PAPER_LABEL


def _paper_config(c: PrecondConfig) -> Any:
    """The validated experiment settings of the paper-trained Schwarz attention."""
    from .compare import ExperimentConfig

    return ExperimentConfig(n=c.n, subdomains=c.subdomains, overlap=c.overlap, kind=c.kind,
                            local_rank=c.local_rank, coarse_rank=c.coarse_rank, global_ranks=(),
                            steps=max(1, c.paper_steps), lr=1e-3, loss="wmse", seed=c.seed,
                            progress=c.progress, save_prefix=c.save_prefix).validated()


def _paper_model(c: PrecondConfig) -> tuple[Any, float, dict[str, Any]]:
    """Schwarz attention trained as in the paper; returns (operator, seconds, info)."""
    from .compare import build_models, build_problem

    ec = _paper_config(c)
    prob = build_problem(ec)
    op = build_models(ec, prob.decomposition)["schwarz"]
    cfg = TrainingConfig(steps=ec.steps, batch_size=ec.batch_size, lr=ec.lr, loss=ec.loss,
                         optimizer=ec.optimizer, scheduler=ec.scheduler, progress=ec.progress,
                         val_every=ec.val_every)
    result = Trainer(op, prob.sampler, cfg, train_seed=ec.train_seed,
                     validation=prob.validation).run(c.paper_steps)
    train = result.history["train"]
    info = {"steps": result.steps, "status": result.status, "loss": "wmse", "lr": ec.lr,
            "batch_size": ec.batch_size,
            "final_train_wmse": float(train[-1]) if train.size else None,
            "val_wmse": float(result.history["val"][-1]) if result.history["val"].size
            else None}
    return op, result.seconds["total"], info


def _training_info(t: PreconditionerTraining) -> dict[str, Any]:
    return {
        "objective": t.objective, "steps": t.steps, "status": t.status, "lr_absolute": t.lr,
        "best_step": t.best.step, "initial_iterations": t.initial.iterations,
        "initial_converged": t.initial.converged, "best_iterations": t.best.iterations,
        "final_iterations": t.final.iterations, "initial_objective": t.initial.objective,
        "best_objective": t.best.objective, "final_objective": t.final.objective,
        "checks": [asdict(k) for k in t.checks],
        "train_seconds": t.seconds["train"], "check_seconds": t.seconds["checks"],
    }


def _format_iterations(r: dict[str, Any]) -> str:
    if r.get("failed"):
        return f"{r.get('status', 'failed')}: " + r["failed"].replace("|", "/")
    if r["converged"]:
        return str(r["iterations"])
    return f"not converged ({r['iterations']})"


def _markdown(rows: list[dict[str, Any]], title: str) -> str:
    head = ("| method | Krylov | iterations | iterations, 2nd b | set-up [s] | training [s] "
            "| solve [s] | trained params |")
    lines = [title, "", head, "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        params = "-" if r.get("num_params") is None else str(r["num_params"])
        lines.append(
            f"| {r['label']} | {r['krylov'].upper()} | {_format_iterations(r)} | "
            f"{_format_iterations(r['second'])} | {r['setup_seconds']:.3f} | "
            f"{r['train_seconds']:.1f} | {r['solve_seconds']:.3f} | {params} |")
    return "\n".join(lines) + "\n"


def run_precond(config: PrecondConfig, log: Callable[[str], Any] = print) -> dict[str, Any]:
    """Build, train and compare the preconditioners; write the table, JSON and plot.

    Parameters
    ----------
    config : PrecondConfig
        Settings (validated here).
    log : callable
        Receives one progress line per method and the final table.

    Returns
    -------
    dict
        The payload of ``<prefix>_results.json``: ``config``, ``rows`` (one
        per method, with iterations, convergence, timings and, in 1D, training
        details; for the 2D/3D problems the set-up split, coarse dimension and
        peak memory), ``residual_histories`` and ``files``.
    """
    from .compare import check_output_prefix

    c = config.validated()
    check_output_prefix(c.save_prefix, _OUTPUTS)
    # thread_limit, not a BLAS-only threadpool_limits: it also covers PARDISO's MKL threads
    with thread_limit(c.blas_threads):
        if c.problem == "poisson1d":
            return _run(c, log)
        return _run_nd(c, config, log)


def _coarse_list(c: PrecondConfig) -> tuple[str, ...]:
    if c.coarse == "learned":
        return LEARNED_ROWS
    if c.coarse != "all":
        return (c.coarse,)
    return ((("interface_hats",) if c.problem == "poisson1d" else ()) + COARSE_SPACES
            + ADAPTIVE_COARSE_SPACES)


def _coarse_options(c: PrecondConfig, coarse: str) -> dict[str, Any]:
    """``coarse_options`` of :class:`TwoLevelSchwarz` for ``coarse`` (empty: the defaults)."""
    options: dict[str, Any] = {}
    if coarse in ADAPTIVE_COARSE_SPACES and c.threshold is not None:
        options["threshold"] = c.threshold
    if coarse == "agdsw" and c.max_per_component is not None:
        options["max_per_component"] = c.max_per_component
    if coarse == "geneo" and c.max_per_subdomain is not None:
        options["max_per_subdomain"] = c.max_per_subdomain
    if coarse in ("gdsw", "rgdsw", "agdsw") and c.extension_solver != "auto":
        options["extension_solver"] = c.extension_solver
    return options


def _json_stats(stats: dict[str, Any]) -> dict[str, Any]:
    """``coarse_stats`` with numpy values as JSON numbers and lists."""
    out: dict[str, Any] = {}
    for key, value in stats.items():
        if isinstance(value, np.ndarray):
            value = value.tolist()
        elif isinstance(value, np.generic):
            value = value.item()
        out[key] = value
    return out


def _coarse_row_info(M: Any, coarse: str | None) -> dict[str, Any]:
    """The JSON fields of a Schwarz row's coarse space (None where there is none)."""
    two_level = isinstance(M, TwoLevelSchwarz) and coarse is not None
    adaptive = two_level and coarse in ADAPTIVE_COARSE_SPACES
    stats = dict(M.coarse_stats) if adaptive else {}
    return {"eigen_seconds": float(stats.get("eigen_seconds", 0.0)) if two_level else None,
            "threshold": float(M.coarse_info.threshold) if adaptive else None,
            "coarse_stats": _json_stats(stats) if adaptive else None}


def _two_level_rows(c: PrecondConfig, base: str, label: str) -> list[tuple[str, str, str]]:
    """``(key, label, coarse)`` of the two-level rows: ``two_level`` or ``two_level_<coarse>``."""
    names = _coarse_list(c)
    out = []
    for name in names:
        key = base if len(names) == 1 else f"{base}_{name}"
        suffix = "" if name == "interface_hats" else f", {_COARSE_LABELS[name]}"
        out.append((key, label + suffix, name))
    return out


def _pyamg() -> Any:
    try:
        import pyamg
    except ImportError:
        return None
    return pyamg


def _run(c: PrecondConfig, log: Callable[[str], Any]) -> dict[str, Any]:
    t_start = time.perf_counter()
    d = Decomposition1D(c.n, c.subdomains, c.overlap, c.kind)
    A = poisson_1d(c.n, c.kind)
    n = A.shape[0]
    cap = 2 * n if c.maxiter is None else c.maxiter
    b, b2 = np.random.default_rng(c.seed).standard_normal((2, n))

    def learned(init: str) -> Callable[[], tuple[Any, float, dict[str, Any]]]:
        def build() -> tuple[Any, float, dict[str, Any]]:
            op = learned_schwarz_preconditioner(A, d, c.local_rank, c.coarse_rank,
                                                base=c.learned_base, init=init, seed=c.seed)
            return op, 0.0, {}
        return build

    def classical(factory: Callable[[], Any]) -> Callable[[], tuple[Any, float, dict]]:
        return lambda: (factory(), 0.0, {})

    def schwarz(coarse: str, variant: str) -> Callable[[], Any]:
        return lambda: TwoLevelSchwarz(A, d, coarse_basis=coarse, variant=variant,
                                       factor_dtype=c.factor_dtype, local_solver=c.local_solver,
                                       coarse_options=_coarse_options(c, coarse) or None)

    # (key, Krylov, label, builder) in table order; the two-level rows take --coarse
    builders: list[tuple[str, str, str, Callable[[], tuple[Any, float, dict[str, Any]]]]] = [
        ("none", *METHODS["none"], classical(lambda: None)),
        ("jacobi", *METHODS["jacobi"], classical(lambda: jacobi(A))),
        ("one_level", *METHODS["one_level"],
         classical(lambda: TwoLevelSchwarz(A, d, coarse=False, local_solver=c.local_solver,
                                           factor_dtype=c.factor_dtype))),
    ]
    two_level = _two_level_rows(c, "two_level", METHODS["two_level"][1])
    builders += [(key, "cg", label, classical(schwarz(coarse, "additive")))
                 for key, label, coarse in two_level]
    _, ras_label, ras_coarse = _two_level_rows(replace(c, coarse=two_level[0][2]), "ras",
                                               METHODS["ras"][1])[0]
    builders += [
        ("ras", "gmres", ras_label, classical(schwarz(ras_coarse, "restricted"))),
        ("paper", METHODS["paper"][0], _paper_label(c), lambda: _paper_model(c)),
        ("learned_random", *METHODS["learned_random"], learned("scaled")),
        ("learned_two_level", *METHODS["learned_two_level"], learned("classical")),
    ]
    pyamg = _pyamg()
    if pyamg is not None:
        builders.append(("pyamg", *METHODS["pyamg"], classical(
            lambda: pyamg.smoothed_aggregation_solver(A).aspreconditioner())))

    rows: list[dict[str, Any]] = []
    histories: dict[str, list[float]] = {}
    for key, krylov, label, build in builders:
        start = time.perf_counter()
        M, train_seconds, info = build()
        setup = time.perf_counter() - start - train_seconds
        if key.startswith("learned"):
            t = train_preconditioner(M, A, c.train_steps, c.lr, c.batch_size, c.check_every,
                                     objective=c.objective, b=b, rtol=c.rtol, maxiter=cap,
                                     train_seed=c.seed + 4711, test_seed=c.seed + 4712,
                                     progress=c.progress)
            train_seconds = t.seconds["train"] + t.seconds["checks"]
            info = _training_info(t)
            info.update(base=c.learned_base, init=M.init)
        first = _solve(A, b, M, krylov, c, cap)
        second = _solve(A, b2, M, krylov, c, cap)
        histories[label] = first.pop("history")
        second.pop("history")
        row = {"method": key, "label": label, "krylov": krylov, **first, "second": second,
               "setup_seconds": setup, "train_seconds": train_seconds,
               "coarse_basis": getattr(M, "coarse_basis_name", None)
               if isinstance(M, TwoLevelSchwarz) else None,
               "coarse_dim": getattr(M, "coarse_dim", None)
               if isinstance(M, TwoLevelSchwarz) else None,
               **_coarse_row_info(M, getattr(M, "coarse_basis_name", None)
                                  if key.startswith(("two_level", "ras")) else None),
               "num_params": getattr(M, "num_params", None) if key in (
                   "paper", "learned_random", "learned_two_level") else None,
               "training": info or None}
        rows.append(row)
        log(f"{label:>36} ({krylov}): {_format_iterations(row):>22} iterations, set-up "
            f"{setup:.3f} s, training {train_seconds:.1f} s, solve {row['solve_seconds']:.3f} s")

    title = (f"n = {c.n} ({c.kind}, {n} unknowns), N = {c.subdomains}, overlap {c.overlap}, "
             f"rtol {c.rtol:g}, cap {cap} iterations"
             + ("; float32 local factors" if c.factor_dtype == "float32" else ""))
    payload = {
        "config": asdict(c), "unknowns": n, "iteration_cap": cap,
        "pyamg": getattr(pyamg, "__version__", "installed") if pyamg is not None else None,
        "machine": _machine(), "rows": rows, "residual_histories": histories,
    }
    short = f"n = {c.n}, N = {c.subdomains}, overlap {c.overlap}"
    return _write_outputs(c, payload, _markdown(rows, title), short, t_start, log)


def _machine() -> dict[str, Any]:
    return {"python": platform.python_version(), "processor": platform.machine(),
            "numpy": np.__version__}


def _write_outputs(c: PrecondConfig, payload: dict[str, Any], table: str, short: str,
                   t_start: float, log: Callable[[str], Any]) -> dict[str, Any]:
    """Write the table, the JSON file and the residual plots; log the table."""
    prefix = c.save_prefix
    rows, histories = payload["rows"], payload["residual_histories"]
    files = {"table": prefix + "_table.md", "results": prefix + "_results.json"}
    payload["files"] = files

    def write(prefix: str) -> None:
        payload["total_seconds"] = time.perf_counter() - t_start
        atomic_write_text(prefix + "_table.md", table)
        atomic_write_json(prefix + "_results.json", payload, indent=1)

    try:  # the results first: a failing plot must not cost them
        write(prefix)
        if c.plots:
            from .plotting import plot_residual_histories

            converged = {r["label"]: r["converged"] for r in rows  # others are marked
                         if r["label"] in histories}  # a failed row has none
            files["plot"] = str(plot_residual_histories(histories, prefix + "_residuals.png",
                                                        title=short, dpi=PLOT_DPI,
                                                        converged=converged))
            fast = {k: h for k, h in histories.items() if len(h) - 1 <= ZOOM_ITERATIONS}
            if fast and len(fast) < len(histories):
                files["plot_zoom"] = str(plot_residual_histories(
                    fast, prefix + "_residuals_zoom.png", dpi=PLOT_DPI,
                    title=f"{short}: within {ZOOM_ITERATIONS} iterations",
                    converged={k: converged[k] for k in fast}))
            write(prefix)  # again, with the figures' names
    except OSError as exc:
        from .compare import rescue_outputs

        raise rescue_outputs(prefix, exc, write) from exc
    log("")
    log(table)
    for path in files.values():
        log(f"wrote {path}")
    return payload


# -- the 2D/3D problems --------------------------------------------------------------------------
@dataclass
class _Problem:
    """A 2D/3D problem of ``ddops precond``: the matrix and what the decompositions need."""

    A: Any
    coordinates: np.ndarray  # one row per node (per unknown when block_size is 1)
    block_size: int
    null_space: np.ndarray | None  # None: the constants
    grid_shape: tuple[int, ...] | None  # points per direction of the grid problems
    description: str
    # the finite-element Neumann matrices of a decomposition's subdomains (elasticity)
    neumann: Callable[[Decomposition], list] | None = None
    rhs: np.ndarray | None = None  # None: a random one
    kernel: np.ndarray | None = None  # the kernel of a singular matrix


def _inclusion_count(n: int, dim: int = 3) -> int:
    """Boxes of ``inclusions3d``: one per :data:`CELLS_PER_INCLUSION` cells, at least one."""
    return max(1, round((n + 1) ** dim / CELLS_PER_INCLUSION))


def _elasticity_problem(c: PrecondConfig, dim: int) -> _Problem:
    from .. import problems
    from ..problems import fem

    mesh = fem.unit_square_mesh(c.n) if dim == 2 else fem.box_mesh(c.n)
    assemble = fem.fem_elasticity_2d if dim == 2 else fem.fem_elasticity_3d
    if c.contrast is None or c.contrast == 1:
        E: Any = 1.0
        material = "E = 1"
    else:
        count, radius = STIFF_INCLUSIONS[dim]
        E = problems.stiff_inclusions(fem.element_centroids(mesh), count=count, radius=radius,
                                      contrast=c.contrast, seed=c.seed)
        material = (f"{count} stiff inclusions of radius {radius:.3g}, E = {c.contrast:g} "
                    f"in them and 1 outside, {np.mean(E != 1.0):.1%} of the elements")
    A, X = assemble(mesh=mesh, E=E)
    Z = problems.rigid_body_modes(X)
    Z = {"rbm": Z, "translations": Z[:, :dim], "constants": None}[c.null_space]

    def neumann(d: Decomposition) -> list:
        return assemble(mesh=mesh, E=E, neumann=d)[-1]

    kind = "plane-strain elasticity" if dim == 2 else "elasticity on tetrahedra"
    where = "x = 0" if dim == 2 else "the face x = 0"
    return _Problem(A, X, dim, Z, None,
                    f"P1 {kind} ({material}, nu = 0.3, clamped at {where}) on the structured "
                    f"mesh with {c.n} interior points per direction, null space {c.null_space}",
                    neumann)


def _user_problem(c: PrecondConfig) -> _Problem:
    """The problem of ``matrix=FILE`` (files read by :func:`_user_files`)."""
    f = _user_files(c)
    A, b = f["A"], c.block_size
    parts = [f"the matrix of {os.path.basename(c.matrix)}"]
    if b > 1:
        parts.append(f"block size {b}")
    parts.append(f"null space {c.null_space or 'constants'}")
    if c.kernel is not None:
        parts.append(f"kernel {c.kernel} ({f['K'].shape[1]} vectors)")
    parts.append(f"right-hand side {'from ' + os.path.basename(c.rhs) if c.rhs else 'random'}")
    return _Problem(A, f["X"], b, f["Z"], None, ", ".join(parts), rhs=f["rhs"], kernel=f["K"])


def _build_problem(c: PrecondConfig) -> _Problem:
    from .. import problems

    if c.problem == "matrix":
        return _user_problem(c)
    dim = DIMENSIONS[c.problem]
    if c.problem in ELASTICITY:
        return _elasticity_problem(c, dim)
    if c.problem == "diffusion2d":
        coefficient = problems.high_contrast_channels(c.n, c.contrast)
        what = f"high-contrast diffusion (contrast {c.contrast:g}, channels along x)"
    elif c.problem == "channels2d":
        coefficient = problems.high_contrast_channels(c.n, c.contrast, margin=CHANNEL_MARGIN)
        what = (f"high-contrast diffusion (contrast {c.contrast:g}, floating channels along x, "
                f"{CHANNEL_MARGIN} background cell at each end)")
    elif c.problem in ("lognormal2d", "lognormal3d"):
        coefficient = problems.lognormal_field(c.n, dim=dim,
                                               correlation_length=LOGNORMAL_CORRELATION,
                                               contrast=c.contrast, seed=c.seed)
        what = (f"{dim}D diffusion with a log-normal coefficient (contrast {c.contrast:g}, "
                f"correlation length {LOGNORMAL_CORRELATION:g}, seed {c.seed})")
    elif c.problem == "inclusions3d":
        count = _inclusion_count(c.n)
        coefficient = problems.random_inclusions(c.n, dim=3, count=count, contrast=c.contrast,
                                                 seed=c.seed)
        what = (f"3D diffusion with {count} random 3 x 3 x 8-cell inclusions (contrast "
                f"{c.contrast:g}, {np.mean(coefficient != 1.0):.1%} of the "
                f"cells, seed {c.seed})")
    else:
        build = problems.poisson_2d if dim == 2 else problems.poisson_3d
        A, X = build(c.n, return_coordinates=True)
        return _Problem(A, X, 1, None, (c.n,) * dim,
                        f"{dim}D Poisson (finite differences), {c.n}^{dim} interior points")
    diffusion = problems.diffusion_2d if dim == 2 else problems.diffusion_3d
    A, X = diffusion(coefficient, return_coordinates=True)
    return _Problem(A, X, 1, None, (c.n,) * dim, f"{what}, {c.n}^{dim} interior points")


def _decompose(c: PrecondConfig, prob: _Problem) -> tuple[Decomposition, float, float]:
    """The overlapping decomposition, with the seconds of the partition and of the overlap.

    The two steps of :meth:`Decomposition.from_grid` / :meth:`Decomposition.from_matrix`,
    timed separately: :func:`~ddops.dd.partition.grid_partition` or
    :func:`~ddops.dd.partition.partition`, then :func:`~ddops.dd.partition.grow_overlap`
    (the overlap time includes packing the subdomains into the decomposition).
    """
    from ..dd.partition import decomposition_from_labels, grid_partition, grow_overlap, partition

    A, b = prob.A, prob.block_size
    start = time.perf_counter()
    if c.partitioner == "grid":
        parts = box_grid(c.subdomains, len(prob.grid_shape), c.n)
        owner = grid_partition(prob.grid_shape, parts)
    else:
        owner = partition(A, c.subdomains, partitioner=c.partitioner,
                          coordinates=prob.coordinates, block_size=b, seed=c.seed)
    partition_seconds = time.perf_counter() - start
    start = time.perf_counter()
    indices, sizes = grow_overlap(A, owner, c.overlap, block_size=b)
    points = (None if prob.coordinates is None else prob.coordinates if b == 1
              else np.repeat(prob.coordinates, b, axis=0))
    h = 1.0 / (c.n + 1) if prob.grid_shape is not None else None
    d = decomposition_from_labels(indices, sizes, owner, coordinates=points, h=h, block_size=b)
    return d, partition_seconds, time.perf_counter() - start


class _PeakMemory:
    """tracemalloc's peak of one row at a time (see :data:`MEMORY_METHOD`)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._started = False
        self._base = 0

    def __enter__(self) -> _PeakMemory:
        if self.enabled and not tracemalloc.is_tracing():
            tracemalloc.start()
            self._started = True
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._started:
            tracemalloc.stop()

    def start_row(self) -> None:
        if self.enabled:
            gc.collect()  # the previous row's objects are gone before the baseline is read
            tracemalloc.reset_peak()
            self._base = tracemalloc.get_traced_memory()[0]

    def peak(self) -> int | None:
        return tracemalloc.get_traced_memory()[1] - self._base if self.enabled else None


def _superlu_bytes(M: Any) -> int:
    """Bytes of the sparse (SuperLU, PARDISO) factors of a TwoLevelSchwarz (invisible to
    tracemalloc; the key keeps its name from when SuperLU was the only one)."""
    if not isinstance(M, TwoLevelSchwarz):
        return 0
    return M.factor_bytes  # SUPERLU_BYTES_PER_NONZERO per float64 nonzero, 8 per float32 one


_SPLIT = ("partition", "overlap", "local_factorisation", "coarse_space", "coarse_factorisation",
          "other")


@contextlib.contextmanager
def _captured_c_output(lines: list[str]):
    """Capture what compiled code writes to the standard output (file descriptor 1).

    pyamg's C++ core prints notes such as "Inner denominator was zero." straight to the
    descriptor; they are collected in ``lines`` (distinct, in order) instead.  Where the
    descriptor cannot be redirected nothing is captured.
    """
    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError, AttributeError):
        yield
        return
    libc = None
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL(None)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 1)
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                if libc is not None:
                    libc.fflush(None)  # C stdio's buffer, before the descriptor goes back
            os.dup2(saved, 1)
            os.close(saved)
            tmp.seek(0)
            for line in tmp.read().decode(errors="replace").splitlines():
                if line.strip() and line.strip() not in lines:
                    lines.append(line.strip())


def _first_line(exc: BaseException) -> str:
    """The first line of an exception's message (a refused row's reason, in full)."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _reason(exc: BaseException, where: str) -> str:
    """One line: where a row failed and why."""
    text = str(exc).strip().splitlines()
    reason = f"{where}: {type(exc).__name__}" + (f": {text[0]}" if text else "")
    return reason if len(reason) <= _REASON_CHARS else reason[:_REASON_CHARS - 3] + "..."


def _run_nd(c: PrecondConfig, config: PrecondConfig,
            log: Callable[[str], Any]) -> dict[str, Any]:
    t_start = time.perf_counter()
    prob = _build_problem(c)
    A, Z, K = prob.A, prob.null_space, prob.kernel
    n = A.shape[0]
    cap = 2 * n if c.maxiter is None else c.maxiter
    b = (np.random.default_rng(c.seed).standard_normal(n) if prob.rhs is None
         else prob.rhs.copy())
    if K is not None:  # consistent: the right-hand side without its kernel components
        from ..dd.kernel import check_kernel, remove_kernel

        Q = check_kernel(K, A.tocsr().astype(np.float64), "kernel")
        along = float(np.linalg.norm(Q.T @ b)) / max(float(np.linalg.norm(b)), 1e-300)
        b = remove_kernel(b, Q)
        log(f"right-hand side projected off the kernel (its kernel part was {along:.2e} of it)")
    notes_run: list[str] = []
    if c.problem == "matrix" and config.block_size is None:
        blocks = block_structure(A)
        if blocks is not None:  # said once: GDSW on elasticity took 58 iterations, not 44
            notes_run.append(
                f"the rows of the matrix come in groups of {blocks} with identical patterns, "
                f"as in a vector problem with {blocks} unknowns per node; if it is one, pass "
                f"--block-size {blocks} (and --null-space) for the coarse spaces and METIS")
            log(f"note: {notes_run[-1]}")
    pyamg = _pyamg()
    if c.partitioner == "metis":  # imported now: the first row's partition time is METIS's
        import pymetis  # noqa: F401

    def schwarz(coarse: str | None) -> Callable[[], tuple[Any, dict[str, float], dict]]:
        def build() -> tuple[Any, dict[str, float], dict[str, Any]]:
            d, t_part, t_overlap = _decompose(c, prob)
            t_outside = 0.0  # coarse-space work done before TwoLevelSchwarz (Neumann, learned)
            extra: dict[str, Any] = {}
            if coarse is None:
                M = TwoLevelSchwarz(A, d, coarse=False, factor_dtype=c.factor_dtype,
                                    local_solver=c.local_solver, kernel=K)
            elif coarse in ("learned", "deflation"):
                from ..precond.learned_coarse import deflation_basis, learned_coarse_basis

                start = time.perf_counter()
                if coarse == "learned":
                    Phi, learned = learned_coarse_basis(
                        A, d, extra=c.extra, steps=c.coarse_train_steps, null_space=Z,
                        seed=c.seed, return_info=True)
                    extra.update(extra_per_subdomain=c.extra,
                                 train_steps=c.coarse_train_steps,
                                 near_kernel_seconds=learned.near_kernel_seconds,
                                 training_seconds=learned.training_seconds)
                else:
                    Phi = deflation_basis(A, d, c.extra * c.subdomains, null_space=Z)
                t_outside = time.perf_counter() - start  # the basis, built before TwoLevelSchwarz
                M = TwoLevelSchwarz(A, d, coarse_basis=Phi, null_space=Z,
                                    factor_dtype=c.factor_dtype, local_solver=c.local_solver,
                                    kernel=K)
            else:
                options = _coarse_options(c, coarse)
                if coarse == "geneo":
                    extra["neumann"] = "algebraic"
                    if prob.neumann is not None:  # the finite-element ones of d's subdomains
                        start = time.perf_counter()
                        options["neumann"] = prob.neumann(d)
                        t_outside = time.perf_counter() - start
                        extra.update(neumann="finite element", neumann_seconds=t_outside)
                M = TwoLevelSchwarz(A, d, coarse_basis=coarse, null_space=Z,
                                    factor_dtype=c.factor_dtype, coarse_options=options or None,
                                    local_solver=c.local_solver, kernel=K)
            split = {"partition": t_part, "overlap": t_overlap,
                     "local_factorisation": M.local_setup_seconds,
                     "coarse_space": M.coarse_basis_seconds + t_outside,
                     "coarse_factorisation": M.coarse_setup_seconds}
            split["other"] = max(0.0, M.setup_seconds - M.local_setup_seconds
                                 - M.coarse_basis_seconds - M.coarse_setup_seconds)
            info = {"coarse_basis": coarse if coarse in ("learned", "deflation")
                    else M.coarse_basis_name, "coarse_dim": M.coarse_dim,
                    **_coarse_row_info(M, coarse), **extra,
                    "local_solver": M.local_solver, "sparse_solver": M.sparse_solver,
                    "coarse_solver": M.coarse_solver,
                    "memory_held": {k: v for k, v in M.stats.items() if k.endswith("_bytes")},
                    "factor_dtype": str(M.factor_dtype),
                    "subdomain_sizes": {"min": int(d.sizes.min()), "mean": float(d.sizes.mean()),
                                        "max": int(d.sizes.max())}}
            return M, split, info
        return build

    def amg(kind: str) -> Callable[[], tuple[Any, dict[str, float], dict[str, Any]]]:
        def build() -> tuple[Any, dict[str, float], dict[str, Any]]:
            if kind == "sa":
                ml = pyamg.smoothed_aggregation_solver(A, B=Z)
            else:
                ml = pyamg.ruge_stuben_solver(A)
            info = {"levels": len(ml.levels), "coarsest": int(ml.levels[-1].A.shape[0]),
                    "operator_complexity": float(ml.operator_complexity())}
            if kind == "sa":
                info["near_null_space"] = c.null_space or "constants"
            return ml.aspreconditioner(), {}, info
        return build

    # (key, label, builder, whether a failure is reported in the row instead of raised)
    builders: list[tuple[str, str, Callable[[], tuple[Any, dict[str, float], dict]], bool]] = [
        ("none", ND_METHODS["none"][1], lambda: (None, {}, {}), False),
        ("jacobi", ND_METHODS["jacobi"][1], lambda: (jacobi(A), {}, {}), False),
        ("one_level", ND_METHODS["one_level"][1], schwarz(None), False),
    ]
    # the dense deflation ceiling fails in its row (too large) instead of ending the run
    builders += [(key, label, schwarz(coarse), coarse == "deflation")
                 for key, label, coarse in _two_level_rows(c, "two_level",
                                                           ND_METHODS["two_level"][1])]
    if pyamg is not None:
        builders += [("pyamg", ND_METHODS["pyamg"][1], amg("sa"), True),
                     ("pyamg_rs", ND_METHODS["pyamg_rs"][1], amg("rs"), True)]

    rows: list[dict[str, Any]] = []
    histories: dict[str, list[float]] = {}
    logged: set[str] = set()
    with _PeakMemory(c.memory) as memory:
        for key, label, build, tolerant in builders:
            memory.start_row()
            notes: list[str] = []
            status, failed = "ok", None
            M, split, info = None, {}, {}
            start = time.perf_counter()
            with warnings.catch_warnings(record=True) as caught, \
                    (_captured_c_output(notes) if tolerant else contextlib.nullcontext()):
                warnings.simplefilter("always")
                try:
                    M, split, info = build()
                except SingularMatrixError as exc:  # the flag, not the library's kernel=
                    status, failed = "refused", f"A is singular: {exc.detail}; {KERNEL_HINT}"
                except ValueError as exc:  # the space refuses this matrix: the run goes on
                    status, failed = "refused", _first_line(exc)
                except Exception as exc:  # pyamg's own errors: the row fails, the run goes on
                    if not tolerant:
                        raise
                    status, failed = "failed", _reason(exc, "set-up")
                setup = time.perf_counter() - start
                if failed is None:
                    try:
                        result = _solve(A, b, M, "cg", c, cap)
                    except Exception as exc:
                        if not tolerant:
                            raise
                        status, failed = "failed", _reason(exc, "solve")
                if failed is not None:
                    result = {"iterations": 0, "converged": False, "final_residual": None,
                              "solve_seconds": time.perf_counter() - start - setup}
            for w in caught:
                text = str(w.message).strip().splitlines()
                if text and text[0] not in notes:
                    notes.append(text[0])
            traced = memory.peak()
            superlu = _superlu_bytes(M)
            del M
            if failed is None:
                histories[label] = result.pop("history")
            two_level = key.startswith("two_level")
            row = {"method": key, "label": label, "krylov": "cg", **result,
                   "status": status, "failed": failed, "setup_seconds": setup,
                   "setup": split or None,
                   "coarse_basis": info.pop("coarse_basis", None),
                   "coarse_dim": info.pop("coarse_dim", None),
                   "eigen_seconds": info.pop("eigen_seconds", 0.0 if two_level else None),
                   "traced_peak_bytes": traced,
                   "superlu_factor_bytes": superlu if c.memory else None,
                   "peak_memory_bytes": traced + superlu if c.memory else None,
                   "warnings": notes, **info}
            rows.append(row)
            mem = (f", peak {row['peak_memory_bytes'] / 2**20:.1f} MiB" if c.memory else "")
            dim = f", coarse dim {row['coarse_dim']}" if two_level else ""
            log(f"{label:>40} (cg): {_format_iterations(row):>22} iterations, set-up "
                f"{setup:.3f} s, solve {row['solve_seconds']:.3f} s{dim}{mem}")
            for note in notes:
                if note not in logged:  # each warning once per run, all of them in the JSON
                    logged.add(note)
                    log(f"{'':>40}  warning: {note}")

    sizes = next((r["subdomain_sizes"] for r in rows if "subdomain_sizes" in r), None)
    fallback = (config.partitioner is None and c.partitioner == "metis"
                and prob.grid_shape is not None)
    decomposition = {
        "partitioner": c.partitioner,
        "boxes": box_grid(c.subdomains, len(prob.grid_shape), c.n)
        if c.partitioner == "grid" else None,
        "fallback_to_metis": fallback, "subdomains": c.subdomains, "overlap": c.overlap,
        "block_size": prob.block_size, "subdomain_sizes": sizes,
    }
    if fallback:
        log(f"N = {c.subdomains} has no box grid with at most {GRID_ASPECT}:1 box counts: "
            "partitioned by METIS")
    boxes = decomposition["boxes"]
    parts = (f"{' x '.join(map(str, boxes))} boxes" if boxes else c.partitioner)
    adaptive = [k for k in _coarse_list(c) if k in ADAPTIVE_COARSE_SPACES]
    thresholds = "".join(
        f"; {_COARSE_LABELS[k]} threshold "
        f"{(c.threshold if c.threshold is not None else DEFAULT_THRESHOLDS[k]):g}"
        for k in adaptive)
    title = (f"{prob.description}: {n} unknowns, {A.nnz} nonzeros; N = {c.subdomains} "
             f"({parts}), overlap {c.overlap}; CG to rtol {c.rtol:g}, cap {cap} iterations"
             + thresholds
             + ("; float32 local factors" if c.factor_dtype == "float32" else ""))
    payload = {
        "config": asdict(c), "problem": prob.description, "unknowns": n, "nonzeros": int(A.nnz),
        "iteration_cap": cap, "decomposition": decomposition,
        "memory": {"measured": c.memory, "method": MEMORY_METHOD,
                   "superlu_bytes_per_nonzero": SUPERLU_BYTES_PER_NONZERO},
        "pyamg": getattr(pyamg, "__version__", "installed") if pyamg is not None else None,
        "machine": _machine(), "notes": notes_run, "rows": rows,
        "residual_histories": histories,
    }
    size = (os.path.basename(c.matrix) if c.problem == "matrix"
            else f"{c.problem}, n = {c.n}")
    short = f"{size}, N = {c.subdomains}, overlap {c.overlap}"
    return _write_outputs(c, payload, _markdown_nd(rows, title, c.memory), short, t_start, log)


def _seconds(split: dict[str, float] | None, key: str) -> str:
    return "-" if not split else f"{split[key]:.3f}"


def _markdown_nd(rows: list[dict[str, Any]], title: str, memory: bool) -> str:
    head = ("| method | iterations | converged | coarse dim | partition [s] | overlap [s] "
            "| local fact. [s] | coarse space [s] | eigenproblems [s] | coarse fact. [s] "
            "| set-up [s] | solve [s] | peak memory [MiB] |")
    lines = [title, "", head, "|---|---:|---|---:|" + "---:|" * 9]
    for r in rows:
        dim = "-" if r["coarse_dim"] is None else str(r["coarse_dim"])
        eigen = "-" if r.get("eigen_seconds") is None else f"{r['eigen_seconds']:.3f}"
        mem = "-" if not memory else f"{r['peak_memory_bytes'] / 2**20:.1f}"
        split = r["setup"]
        parts = [_seconds(split, k) for k in _SPLIT[:-1]]
        parts.insert(4, eigen)  # after the coarse space, of which it is a part
        lines.append(
            f"| {r['label']} | {_format_iterations(r)} | {'yes' if r['converged'] else 'no'} "
            f"| {dim} | " + " | ".join(parts)
            + f" | {r['setup_seconds']:.3f} | {r['solve_seconds']:.3f} | {mem} |")
    notes = ("set-up = partition + overlap + local and coarse factorisation + coarse space + "
             "checks and restrictions; eigenproblems: the part of the coarse space spent on "
             "the local eigenproblems of the adaptive spaces (AGDSW: with the Schur "
             "complements); GenEO's coarse space on elasticity includes assembling the "
             "finite-element Neumann matrices of the subdomains; peak memory: tracemalloc "
             "peak of set-up and solve plus the SuperLU factors (12 bytes per nonzero)")
    warned = [f"- {r['label']}: {w}" for r in rows for w in r.get("warnings", ())]
    extra = ("\n\nwarnings:\n" + "\n".join(warned)) if warned else ""
    return "\n".join(lines) + "\n\n" + notes + extra + "\n"
