"""The settings of ``ddops precond``: :class:`PrecondConfig`, its checks and its choices.

:meth:`PrecondConfig.validated` resolves the defaults of the problem (built-in or
``--matrix``), the decomposition and the coarse spaces, and refuses a setting that
the chosen problem does not use, naming the field.  The settings of the
preconditioners use the library's vocabulary (:mod:`ddops.precond.options`): the
library's names are accepted, and one the experiment does not build (a partitioner, a
coarse space) is refused with the names it builds (``PARTITIONER_CHOICES``,
``COARSE_CHOICES``).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..._validation import check_choice, check_int, check_positive_float
from ...dd.adaptive import AGDSW_THRESHOLD, GENEO_THRESHOLD
from ...dd.geneo import GENEO_OVERSAMPLED_THRESHOLD, check_eigen_stop
from ...dd.indicators import check_skip_contrast
from ...dd.partition import default_subdomains
from ...precond import options as library
from ...precond.learned import BASES, OBJECTIVES
from ...problems.poisson1d import KINDS
from .matrix_files import read_matrix_files
from .problem_registry import (
    DEFAULT_CONTRASTS,
    DEFAULT_N,
    DIMENSIONS,
    ELASTICITY,
    GRID_ASPECT,
    PROBLEM_SUBDOMAIN_WIDTH,
    PROBLEMS,
    box_count_near,
    box_grid,
)

__all__ = ["PrecondConfig", "COARSE_SPACES", "ADAPTIVE_COARSE_SPACES", "COARSE_CHOICES",
           "LEARNED_ROWS", "DEFAULT_EXTRA", "DEFAULT_THRESHOLDS", "PARTITIONER_CHOICES",
           "NULL_SPACES", "MATRIX_OPTIONS", "FACTOR_DTYPES", "LOCAL_SOLVER_CHOICES",
           "EXTENSION_SOLVER_CHOICES", "ONE_D_ONLY", "BUILT_COARSE", "coarse_list",
           "paper_config"]

#: Coarse spaces of the two-level rows built from a few fixed functions per subdomain or
#: interface component (``--coarse all``: each, then :data:`ADAPTIVE_COARSE_SPACES`).
COARSE_SPACES = ("nicolaides", "gdsw", "rgdsw")

#: The adaptive (spectral) coarse spaces: adaptive GDSW and GenEO (:mod:`ddops.dd.adaptive`).
ADAPTIVE_COARSE_SPACES = ("agdsw", "geneo")

#: The coarse spaces of :data:`ddops.precond.options.COARSE_SPACES` that the two-level rows
#: build; ``"interface_hats"`` (the 1D default) needs 1D coordinates.
BUILT_COARSE = ("interface_hats", *COARSE_SPACES, *ADAPTIVE_COARSE_SPACES)

#: Values of ``coarse`` that the experiment runs: :data:`BUILT_COARSE`, ``"learned"`` and
#: ``"all"``.  ``--coarse`` accepts every name of the library and refuses the others with
#: these.
COARSE_CHOICES = (*BUILT_COARSE, "learned", "all")

#: The rows of ``--coarse learned`` (2D/3D and ``--matrix``): the learned enrichment
#: (:func:`ddops.precond.learned_coarse.learned_coarse_basis`) beside its GDSW base, the
#: adaptive spaces and the exact-deflation ceiling with the same number of added functions
#: (:func:`ddops.precond.learned_coarse.deflation_basis`, dense: small problems only).
LEARNED_ROWS = ("gdsw", "agdsw", "geneo", "learned", "deflation")

#: Default learned functions per subdomain of ``--coarse learned`` (``--extra``).
DEFAULT_EXTRA = 2

#: The library's default eigenvalue thresholds of the adaptive coarse spaces, as the titles
#: state them (GenEO's depends on its local matrices).
DEFAULT_THRESHOLDS = {"agdsw": f"{AGDSW_THRESHOLD:g}",
                      "geneo": f"{GENEO_THRESHOLD:g} ({GENEO_OVERSAMPLED_THRESHOLD:g} "
                               "oversampled)"}

#: The partitioners of :data:`ddops.precond.options.PARTITIONERS` that the experiment builds:
#: boxes of the grid, METIS, recursive coordinate bisection (``--partitioner`` accepts every
#: name of the library and refuses ``"contiguous"``, the ranks' rows under PETSc, with these).
PARTITIONER_CHOICES = ("grid", "metis", "rcb")

#: Null spaces of ``--null-space`` (elasticity): the three rigid body modes, the two
#: translations, or the constant vector.
NULL_SPACES = ("rbm", "rigid", "translations", "constants")

#: The options that describe a user's matrix (``--matrix`` and what goes with it).
MATRIX_OPTIONS = ("rhs", "coordinates", "block_size", "kernel")

#: ``--factor-dtype``: precision of the Schwarz rows' local factorisations
#: (:data:`ddops.precond.options.FACTOR_DTYPES`; the coarse solve and CG stay in float64).
FACTOR_DTYPES = library.FACTOR_DTYPES

#: ``--local-solver`` choices (:data:`ddops.precond.options.LOCAL_SOLVERS`; ``"sparse"`` is
#: another name of ``"superlu"``).
LOCAL_SOLVER_CHOICES = library.LOCAL_SOLVERS

#: ``--extension-solver`` choices (:data:`ddops.precond.options.EXTENSION_SOLVERS`).
EXTENSION_SOLVER_CHOICES = library.EXTENSION_SOLVERS

#: Schwarz variants of the 2D/3D two-level rows (CG: the symmetric ones).
ND_VARIANTS = ("additive", "hybrid")

#: The settings that only the 1D problem uses (its learned and GMRES rows).
ONE_D_ONLY = ("kind", "restart", "local_rank", "coarse_rank", "train_steps", "lr",
              "batch_size", "check_every", "objective", "learned_base", "paper_steps")


@dataclass
class PrecondConfig:
    """Settings of :func:`~ddops.experiments.precond.runners.run_precond` (the defaults
    of ``ddops precond``).

    Attributes
    ----------
    problem : str
        The matrix, one of :data:`~ddops.experiments.precond.problem_registry.PROBLEMS` (see
        :mod:`ddops.experiments.precond`).
    n : int, optional
        ``poisson1d``: line elements (``kind="element"``) or unknowns (``"dof"``).
        Otherwise interior grid points per direction (``elasticity2d``: the
        structured mesh of :func:`~ddops.problems.fem.unit_square_mesh` with ``n``
        interior points per direction, ``2 (n + 2)(n + 1)`` unknowns;
        ``elasticity3d``: :func:`~ddops.problems.fem.box_mesh`, ``3 (n + 2)^2 (n + 1)``
        unknowns).  Default :data:`~ddops.experiments.precond.problem_registry.DEFAULT_N` of the
        problem.
    subdomains : int, optional
        ``N``; default ``max(2, n // 32)`` in 1D (the two-level methods need an
        interface); ``max(2, (n // w)^dim)`` with ``w`` from
        :data:`~ddops.experiments.precond.problem_registry.PROBLEM_SUBDOMAIN_WIDTH` for the
        problems named there; otherwise parts of about
        :data:`~ddops.dd.partition.TARGET_SUBDOMAIN_UNKNOWNS` unknowns
        (:func:`~ddops.dd.partition.default_subdomains`), on the finite-difference grids
        moved to the nearest count with a grid of boxes within a factor
        :data:`~ddops.experiments.precond.problem_registry.BOX_COUNT_SLACK`
        (:func:`~ddops.experiments.precond.problem_registry.box_count_near`).
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
    skip_contrast : float, optional
        ``"agdsw"`` solves no eigenproblem on a component, ``"geneo"`` none on a subdomain,
        around which the diagonal of ``A`` varies by at most this factor (default: for
        ``"agdsw"`` :data:`ddops.dd.agdsw.AGDSW_SKIP_CONTRAST` with the default threshold or
        a smaller one, else 0; for ``"geneo"`` :data:`ddops.dd.geneo.GENEO_SKIP_CONTRAST`;
        0: every one); only with ``coarse`` ``"agdsw"``, ``"geneo"`` or ``"all"``.
    max_per_subdomain : int, optional
        Cap on the eigenvectors per subdomain of ``"geneo"`` (default
        :data:`ddops.dd.adaptive.MAX_PER_SUBDOMAIN`); only with ``coarse`` ``"geneo"`` or
        ``"all"``.
    oversampling : int, optional
        Layers added to every subdomain for GenEO's local matrices from ``A``
        (:mod:`ddops.dd.oversampling`; default: 0 for a diagonally dominant ``A``, else
        :func:`ddops.dd.oversampling.default_oversampling`); only with ``coarse`` ``"geneo"``
        or ``"all"``.
    eigen_stop : {"settled", "count"}, optional
        When GenEO's eigensolve of a subdomain stops (default
        :data:`ddops.dd.geneo.GENEO_EIGEN_STOP`; ``"count"``: faster, inexact); only with
        ``coarse`` ``"geneo"`` or ``"all"``.
    variant : {"additive", "hybrid"}, optional
        Schwarz variant of the 2D/3D two-level rows (default ``"additive"``): ``"hybrid"``
        applies the coarse correction multiplicatively around the local one (fewer
        iterations, two coarse solves each); ``"restricted"`` is refused, the rows run CG.
        Not with ``poisson1d`` (its rows are set by ``kind`` and the learned models).
    partitioner : {"grid", "metis", "rcb"}, optional
        Non-overlapping partition of the 2D/3D problems (the other names of
        :data:`ddops.precond.options.PARTITIONERS` are refused).  Default ``"grid"`` for the
        finite-difference problems when ``N`` has a box grid
        (:func:`~ddops.experiments.precond.problem_registry.box_grid`), otherwise ``"metis"``;
        ``"metis"`` for elasticity.
    null_space : str, optional
        Null space of the elasticity coarse spaces and of pyamg's aggregation, one of
        :data:`NULL_SPACES` (default ``"rbm"``); with ``matrix``, one of
        :data:`~ddops.experiments.precond.matrix_files.MATRIX_NULL_SPACES` or a ``.npy``
        file (default: constants).
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
        :data:`~ddops.experiments.precond.problem_registry.DEFAULT_CONTRASTS`): max/min of the
        log-normal fields (at least 1), channel or inclusion coefficient over the
        background otherwise.  The elasticity problems are homogeneous without it or
        with 1, and have stiff inclusions
        (:data:`~ddops.experiments.precond.problem_registry.STIFF_INCLUSIONS`) otherwise.
    factor_dtype : {"float64", "float32"}
        Precision of the local factorisations of the one- and two-level Schwarz rows
        (``TwoLevelSchwarz(factor_dtype=...)``); the coarse solve and the Krylov
        method stay in float64.
    local_solver : {"auto", "dense", "sparse", "superlu", "pardiso", "amg"}
        Local solver of the Schwarz rows (``TwoLevelSchwarz(local_solver=...)``).
    extension_solver : {"auto", "superlu", "pardiso", "amg"}
        Interior solver of the harmonic extension of the GDSW, RGDSW and AGDSW rows.
    memory : bool
        Measure the peak memory of every row of the 2D/3D problems (tracemalloc
        hooks slow allocation-heavy set-ups slightly; see
        :data:`~ddops.experiments.precond.runners.MEMORY_METHOD`).
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
        Threads of BLAS, of the set-up's independent chunks and of the PARDISO local
        solver's groups of subdomains (through
        :func:`ddops.linalg.local_solvers.thread_limit`) for the whole run
        (``None``: the library's setting; the Krylov solves run on one BLAS thread: their
        vector operations and the preconditioners' applications, whose threads are the
        local solver's groups, not BLAS's); the
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
    skip_contrast: float | None = None
    max_per_subdomain: int | None = None
    oversampling: int | None = None
    eigen_stop: str | None = None
    variant: str | None = None
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
    factor_dtype: str = library.SchwarzOptions.factor_dtype
    local_solver: str = library.SchwarzOptions.local_solver
    extension_solver: str = library.GDSWOptions.extension_solver
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
    seed: int = library.SchwarzOptions.seed
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
        paper_config(c)  # the paper model's constraints (size, decomposition), before any work
    else:
        c.variant = "additive" if c.variant is None else c.variant
        if c.variant == "restricted":
            raise ValueError("variant: the 2D/3D rows run CG, which needs a symmetric "
                             "preconditioner: 'additive' or 'hybrid', not 'restricted'")
        check_choice("variant", c.variant, ND_VARIANTS)
    return c


def _resolve_matrix(c: PrecondConfig) -> None:
    """Defaults and checks of ``matrix=FILE``: the files are read and checked here, before
    any work (they are read once;
    :func:`~ddops.experiments.precond.problem_registry.build_problem` reuses them)."""
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
    files = read_matrix_files(c)
    n, b = files["A"].shape[0], c.block_size
    _resolve_parts_and_coarse(c, n // b, default_subdomains(n, b), "the matrix")
    c.partitioner = c.partitioner or "metis"
    _check_built("partitioner", c.partitioner, ("metis", "rcb"), library.PARTITIONERS,
                 "with matrix=FILE")
    if c.partitioner == "rcb" and files["X"] is None:
        raise ValueError("partitioner: 'rcb' needs coordinates=FILE (--coordinates)")


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
    if c.coarse == "interface_hats":
        raise ValueError("coarse: 'interface_hats' needs 1D coordinates (problem='poisson1d'); "
                         f"use one of {(*COARSE_SPACES, *ADAPTIVE_COARSE_SPACES, 'all')}")
    _check_built("coarse", c.coarse, tuple(k for k in COARSE_CHOICES if k != "interface_hats"),
                 library.COARSE_SPACES)


def _check_adaptive_options(c: PrecondConfig) -> None:
    """The options of the adaptive coarse spaces: only with a row that uses them."""
    rows = coarse_list(c)
    for name in ("threshold", "max_per_component", "skip_contrast", "max_per_subdomain",
                 "oversampling", "eigen_stop"):
        if getattr(c, name) is None:
            continue
        users = library.coarse_option_users(name)  # the spaces whose options have it
        if not set(users) & set(rows):
            choices = [repr(u) for u in (*users, "all")]
            raise ValueError(f"{name}: only used with coarse={', '.join(choices[:-1])} or "
                             f"{choices[-1]}, not with coarse={c.coarse!r}")
    if c.threshold is not None:
        c.threshold = check_positive_float("threshold", c.threshold)
    if c.skip_contrast is not None:
        c.skip_contrast = check_skip_contrast(c.skip_contrast, None)
    if c.eigen_stop is not None:
        c.eigen_stop = check_eigen_stop(c.eigen_stop)
    for name in ("max_per_component", "max_per_subdomain", "oversampling"):
        if getattr(c, name) is not None:
            setattr(c, name, check_int(name, getattr(c, name), minimum=0))


def _check_built(name: str, value: Any, built: tuple[str, ...], names: tuple[str, ...],
                 where: str = "in ddops precond") -> None:
    """``value`` is one of ``built``; a name of the library's ``names`` that the experiment
    does not build is refused with the ones it builds."""
    if isinstance(value, str) and value in names and value not in built:
        listed = [repr(b) for b in built]
        raise ValueError(f"{name}: {value!r} is not available {where}; it takes "
                         f"{', '.join(listed[:-1])} or {listed[-1]}")
    check_choice(name, value, built)


def _resolve_1d(c: PrecondConfig) -> None:
    """Defaults and checks of ``problem="poisson1d"`` (today's 1D experiment)."""
    for name, what in (("partitioner", "the 2D/3D problems (poisson1d uses Decomposition1D)"),
                       ("variant", "the 2D/3D problems (poisson1d's rows are set by kind)"),
                       ("null_space", f"problem in {ELASTICITY}"),
                       ("contrast", f"problem in {(*DEFAULT_CONTRASTS, *ELASTICITY)}")):
        if getattr(c, name) is not None:
            raise ValueError(f"{name}: only used with {what}, not with problem='poisson1d'")
    c.n = check_int("n", DEFAULT_N["poisson1d"] if c.n is None else c.n, minimum=2)
    _check_subdomains(c, max(2, c.n // 32))
    c.overlap = check_int("overlap", 2 if c.overlap is None else c.overlap, minimum=0)
    check_choice("kind", c.kind, KINDS)
    c.coarse = "interface_hats" if c.coarse is None else c.coarse
    _check_built("coarse", c.coarse, COARSE_CHOICES, library.COARSE_SPACES)
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
    else:  # parts of about TARGET_SUBDOMAIN_UNKNOWNS unknowns (boxes where near)
        block = dim if elasticity else 1
        default = default_subdomains(nodes * block, block)
        if not elasticity:
            default = box_count_near(default, dim, c.n)
    _resolve_parts_and_coarse(c, nodes, default, f"problem={c.problem!r} with n={c.n}")
    if c.partitioner is not None:
        _check_built("partitioner", c.partitioner, PARTITIONER_CHOICES, library.PARTITIONERS)
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


def coarse_list(c: PrecondConfig) -> tuple[str, ...]:
    """The coarse spaces of the two-level rows, in table order.

    Parameters
    ----------
    c : PrecondConfig
        Settings with ``coarse`` resolved.

    Returns
    -------
    tuple of str
        ``(c.coarse,)``; :data:`LEARNED_ROWS` for ``"learned"``; for ``"all"``,
        :data:`COARSE_SPACES` then :data:`ADAPTIVE_COARSE_SPACES` (in 1D after
        ``"interface_hats"``).
    """
    if c.coarse == "learned":
        return LEARNED_ROWS
    if c.coarse != "all":
        return (c.coarse,)
    return ((("interface_hats",) if c.problem == "poisson1d" else ()) + COARSE_SPACES
            + ADAPTIVE_COARSE_SPACES)


def paper_config(c: PrecondConfig) -> Any:
    """The validated experiment settings of the paper-trained Schwarz attention.

    Parameters
    ----------
    c : PrecondConfig
        Settings of ``problem="poisson1d"``.

    Returns
    -------
    ExperimentConfig
        The settings of :mod:`ddops.experiments.compare` for the paper row: the same
        problem and decomposition, ``paper_steps`` steps (at least 1) at ``lr = 1e-3``
        with the weighted MSE.

    Raises
    ------
    ValueError
        When the paper's model does not fit the problem or the decomposition.
    """
    from ..compare import ExperimentConfig

    return ExperimentConfig(n=c.n, subdomains=c.subdomains, overlap=c.overlap, kind=c.kind,
                            local_rank=c.local_rank, coarse_rank=c.coarse_rank, global_ranks=(),
                            steps=max(1, c.paper_steps), lr=1e-3, loss="wmse", seed=c.seed,
                            progress=c.progress, save_prefix=c.save_prefix).validated()
