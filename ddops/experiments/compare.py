"""The paper's experiments: model comparison, learning-rate sweep, weak scaling.

Each experiment writes ``<prefix>_metrics.json`` (rewritten atomically after
every finished model, so finished work is never lost), a CSV of the training
histories, the trained operators (``.npz``) and PNG figures.

Every setting and the output location are checked before any training starts
(missing directories are created).  When a write fails later (a full disk, for
example), everything computed so far goes to a fresh directory under the
system's temporary directory and :class:`OutputError` says where.
"""

from __future__ import annotations

import csv
import io
import os
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from .._validation import check_choice, check_int, check_positive_float
from ..backend import to_numpy
from ..dd.coarse import ALL_COARSE_BASES, COARSE_BASES, MATRIX_COARSE_BASES
from ..dd.coarse import coarse_basis as build_coarse_basis
from ..dd.decomposition import Decomposition, Decomposition1D
from ..io import atomic_write_json, atomic_write_text, save_operator
from ..learning.data import RHS_MODES, FourierRHS
from ..learning.initialisation import COARSE_INITS, LOCAL_INITS, LR_SCALINGS, problem_init
from ..learning.metrics import evaluate
from ..learning.training import LOSS_ALIASES, OPTIMIZERS, Trainer, TrainingConfig
from ..operators import INITS, PARTITIONS, GlobalLowRankOperator, LowRankOperator, SchwarzOperator
from ..problems.poisson1d import KINDS, PoissonSolver, grid_points, num_dofs, poisson_1d
from . import grid as _grid
from .grid import (
    DIMENSION,
    ELASTICITY,
    GRID_COARSE_BASES,
    GRID_PROBLEMS,
    PARTITIONERS,
    PROBLEMS,
)

__all__ = ["ExperimentConfig", "OutputError", "PRESETS", "PROBLEMS", "SWEEP_LRS", "SCALING_NS",
           "MIN_SUBDOMAIN_UNKNOWNS", "STEP_COST", "LONG_RUN_SECONDS", "check_output_prefix",
           "earlier_outputs",
           "checkpoint_path", "model_names", "num_unknowns", "unknowns_per_subdomain",
           "estimate_cost", "summary_legend", "run_compare", "run_sweep", "run_scaling",
           "sweep_configs", "scaling_configs"]

#: Losses of the operator-regression experiments (the energy loss needs a weight
#: matrix and belongs to preconditioner training).
REGRESSION_LOSSES = tuple(k for k in LOSS_ALIASES if k != "energy")

#: The learning rates of the paper's sweep (v2, Table 1).
SWEEP_LRS = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2)
#: The problem sizes of the paper's weak-scaling study (v2, Table 2), N = n / 32.
SCALING_NS = (256, 512, 1024, 2048, 4096, 8192)
#: Sine and cosine modes of the training right-hand sides (16 each in the paper); they
#: need at least as many unknowns.
RHS_FOURIER_MODES = 16
#: Sine and cosine modes per direction of the tensor-product right-hand sides of the grid
#: problems (:class:`~ddops.learning.data.GridFourierRHS`: (2 x 8)^2 = 256 functions in 2D,
#: (2 x 4)^3 = 512 in 3D) unless ``rhs_modes`` says otherwise; ``n`` must be at least twice
#: this.  The data cost of a step is two GEMMs with ``(2 modes)^d`` inner dimension.
GRID_FOURIER_MODES = {2: 8, 3: 4}


@dataclass
class ExperimentConfig:
    """Settings of one comparison run; the defaults are the paper's v2 main setting.

    ``coarse_init``, ``local_init`` and ``lr_scaling`` are the problem-scaled
    switches of :mod:`ddops.learning.initialisation` (``PRESETS["improved"]``
    turns all three on with ``lr = 0.1``).  ``coarse_init`` concerns the
    Schwarz model only; ``local_init`` and ``lr_scaling`` also apply to the
    global baselines, with the whole domain as their one block.

    ``problem`` selects the paper's 1D problem (``"poisson1d"``, the default)
    or a grid problem of :mod:`ddops.experiments.grid` (``"poisson2d"``,
    ``"poisson3d"``, ``"diffusion2d"`` with high-contrast channels of
    ``contrast``, ``"elasticity2d"``: P1 plane-strain elasticity, two unknowns
    per node).  On a grid problem ``n`` is the number of interior points
    per direction, ``subdomains`` the number of boxes (``partitioner="grid"``),
    METIS parts (``"metis"``) or parts from recursive coordinate bisection
    (``"rcb"``; elasticity takes these two), ``overlap`` counts layers of the
    matrix graph, ``coarse_basis`` is one of ``"gdsw"``, ``"rgdsw"``,
    ``"nicolaides"`` (with the rigid body modes as null space on elasticity)
    and ``kind`` does not apply; :meth:`for_problem` gives the defaults of a
    problem.  ``global_ranks=None`` picks the paper's two
    baselines from the Schwarz model: its rank bound and its parameter count.
    """

    n: int = 256
    subdomains: int = 8
    overlap: int = 2
    kind: str = "element"
    local_rank: int = 4
    coarse_rank: int | None = None
    global_ranks: tuple[int, ...] = (39, 5)
    rhs_mode: str = "mixed_fourier"
    partition: str = "symmetric"
    loss: str = "wmse"
    steps: int = 2000
    coarse_basis: str = "interface_hats"
    lr: float = 1e-3
    save_prefix: str = "results/compare"
    seed: int = 0
    train_seed: int = 4711
    test_seed: int = 4712
    init: str = "scaled"
    coarse_init: str = "random"
    local_init: str = "random"
    lr_scaling: str = "none"
    batch_size: int = 256
    optimizer: str = "adamw"
    scheduler: bool = True
    val_size: int = 256
    eval_size: int = 16
    dtype: str = "float64"
    plots: bool = True
    progress: bool = True
    checkpoint_every: int = 0
    resume: bool = False
    allow_changed_settings: bool = False
    exact_limit: int | None = None
    val_every: int = 50
    workers: int = 1
    problem: str = "poisson1d"
    partitioner: str = "grid"
    contrast: float = 1e6
    rhs_modes: int | None = None

    @classmethod
    def for_problem(cls, problem: str = "poisson1d", **changes: Any) -> ExperimentConfig:
        """The settings of ``problem`` with its defaults (``n``, ``subdomains``, ``overlap``,
        ``coarse_basis`` and automatic ``global_ranks`` on a grid problem), then ``changes``."""
        check_choice("problem", problem, PROBLEMS)
        base: dict[str, Any] = {}
        if problem != "poisson1d":
            base = dict(_grid.problem_defaults(problem), global_ranks=None)
        return cls(problem=problem, **{**base, **changes})

    def validated(self) -> ExperimentConfig:
        """Check every field and their combinations; raise ``ValueError``/``TypeError`` naming them.

        Everything that would stop a run later (the decomposition's constraints,
        the unknowns the right-hand sides need) is checked here, before any work.
        """
        check_choice("problem", self.problem, PROBLEMS)
        if self.problem != "poisson1d":
            return self._validated_grid()
        if self.partitioner != "grid":
            raise ValueError(f"partitioner={self.partitioner!r} applies to the grid problems "
                             f"{GRID_PROBLEMS}; problem='poisson1d' is split into intervals")
        if self.rhs_modes is not None:
            raise ValueError(f"rhs_modes={self.rhs_modes!r} applies to the grid problems "
                             f"{GRID_PROBLEMS}; problem='poisson1d' uses the paper's "
                             f"{RHS_FOURIER_MODES} sine and cosine modes")
        c = replace(self, global_ranks=None if self.global_ranks is None
                    else tuple(self.global_ranks))
        c._check_common()
        if num_dofs(c.n, c.kind) < RHS_FOURIER_MODES:
            least = RHS_FOURIER_MODES + (c.kind == "element")
            raise ValueError(
                f"n must be >= {least} for kind={c.kind!r}, got {c.n} ({num_dofs(c.n, c.kind)} "
                f"unknowns): the training right-hand sides use {RHS_FOURIER_MODES} sine and "
                f"{RHS_FOURIER_MODES} cosine frequencies, which need {RHS_FOURIER_MODES} "
                f"unknowns")
        Decomposition1D(c.n, c.subdomains, c.overlap, c.kind)  # its own checks, before any work
        if c.coarse_basis == "interface_hats" and c.subdomains < 2:
            raise ValueError(f"coarse_basis='interface_hats' needs at least two subdomains, got "
                             f"subdomains={c.subdomains}; use more subdomains or "
                             f"coarse_basis='pou'")
        return c

    def _validated_grid(self) -> ExperimentConfig:
        """:meth:`validated` for the grid problems."""
        c = replace(self, global_ranks=None if self.global_ranks is None
                    else tuple(self.global_ranks))
        c.contrast = check_positive_float("contrast", c.contrast)
        check_choice("partitioner", c.partitioner, PARTITIONERS)
        c._check_common()
        dim = DIMENSION[c.problem]
        if c.kind != "element":
            raise ValueError(f"kind={c.kind!r} is a convention of the 1D problem; "
                             f"problem={c.problem!r} has n interior points per direction")
        if c.coarse_basis not in GRID_COARSE_BASES:
            raise ValueError(f"coarse_basis={c.coarse_basis!r} needs the 1D problem; "
                             f"problem={c.problem!r} takes one of {GRID_COARSE_BASES[:3]}")
        if c.rhs_modes is not None:
            check_int("rhs_modes", c.rhs_modes, minimum=1)
        modes = grid_rhs_modes(c)
        if c.n < 2 * modes:
            raise ValueError(f"n must be >= {2 * modes} for problem={c.problem!r}, got {c.n}: "
                             f"the training right-hand sides use {modes} sine and {modes} "
                             f"cosine modes per direction")
        if c.problem in ELASTICITY:
            c._check_elasticity()
        elif c.partitioner == "grid":
            _grid.grid_parts(c.subdomains, dim, c.n)
        elif c.subdomains > c.n ** dim:
            raise ValueError(f"subdomains={c.subdomains} exceeds the {c.n ** dim} unknowns of "
                             f"n={c.n} in {dim}D")
        if c.coarse_basis in ("gdsw", "rgdsw") and c.subdomains < 2:
            raise ValueError(f"subdomains={c.subdomains}: coarse_basis={c.coarse_basis!r} "
                             f"needs an interface, so at least two subdomains")
        return c

    def _check_elasticity(self) -> None:
        """The constraints of the elasticity problems (partition of nodes, scikit-fem)."""
        import importlib.util

        c = self
        if c.partitioner == "grid":
            raise ValueError(f"partitioner='grid' is for the finite-difference problems; "
                             f"problem={c.problem!r} takes 'metis' or 'rcb'")
        nodes = int(np.prod(_grid.node_shape(c.problem, c.n)))
        if c.subdomains > nodes:
            raise ValueError(f"subdomains={c.subdomains} exceeds the {nodes} nodes of "
                             f"problem={c.problem!r} with n={c.n}")
        if importlib.util.find_spec("skfem") is None:
            raise ValueError(f"problem={c.problem!r} needs scikit-fem (pip install "
                             f"'ddops[fem]')")

    def _check_common(self) -> None:
        """The checks shared by every problem (fields that mean the same everywhere)."""
        c = self
        for name in ("n", "subdomains", "local_rank", "steps", "batch_size", "val_size",
                     "eval_size", "seed", "train_seed", "test_seed", "workers", "val_every"):
            check_int(name, getattr(c, name), minimum=0 if "seed" in name else 1)
        check_int("overlap", c.overlap, minimum=0)
        check_int("checkpoint_every", c.checkpoint_every, minimum=0)
        check_choice("kind", c.kind, KINDS)
        check_choice("rhs_mode", c.rhs_mode, RHS_MODES)
        check_choice("partition", c.partition, tuple(PARTITIONS))
        check_choice("loss", c.loss, REGRESSION_LOSSES)
        check_choice("init", c.init, INITS)
        check_choice("coarse_init", c.coarse_init, COARSE_INITS)
        check_choice("local_init", c.local_init, LOCAL_INITS)
        check_choice("lr_scaling", c.lr_scaling, LR_SCALINGS)
        check_choice("optimizer", c.optimizer, OPTIMIZERS)
        check_choice("dtype", c.dtype, ("float64", "float32"))
        check_choice("coarse_basis", c.coarse_basis,
                     COARSE_BASES if c.problem == "poisson1d" else ALL_COARSE_BASES)
        for r in c.global_ranks or ():
            check_int("global_rank", r, minimum=1)
        if c.coarse_rank is not None:
            check_int("coarse_rank", c.coarse_rank, minimum=1)
        if c.exact_limit is not None:
            check_int("exact_limit", c.exact_limit, minimum=1)
        if not isinstance(c.save_prefix, (str, os.PathLike)):
            raise TypeError(f"save_prefix must be a string, got {type(c.save_prefix).__name__}")
        c.save_prefix = os.fspath(c.save_prefix)
        if not c.save_prefix:
            raise ValueError("save_prefix must not be empty")
        if c.workers > c.batch_size:
            raise ValueError(f"workers ({c.workers}) must not exceed batch_size ({c.batch_size})")


#: Paper versions' default settings: v2 (newer, the default) and v1 (first version:
#: DOF-based, naive initialisation, global rank 40, requested coarse rank 8, Adam
#: without a scheduler); and "improved", beyond the paper: v2 with the Galerkin
#: coarse initialisation, the problem-scaled local initialisation and the
#: problem-scaled learning rate, at ``lr = 0.1`` (a fraction of every block's
#: natural entry size; chosen on the training loss at n = 256 and 512).
PRESETS: dict[str, dict[str, Any]] = {
    "v2": {},
    "v1": dict(kind="dof", init="naive", global_ranks=(40, 5), coarse_rank=8, optimizer="adam",
               scheduler=False),
    "improved": dict(coarse_init="galerkin", local_init="problem", lr_scaling="problem",
                     lr=0.1),
}


@dataclass
class Problem:
    """Everything shared by the models of one experiment.

    ``shape`` (points per direction of the grid of nodes), ``coarse`` (the
    coarse basis Phi) and ``spectrum`` (eigenvalues of ``A^{-1}`` with how they
    were found, when known) are set for the grid problems only;
    ``block_size`` is the number of unknowns per node (2 on elasticity, whose
    unknowns are interleaved per node).
    """

    decomposition: Decomposition
    A: Any
    solver: Any
    sampler: Any
    validation: tuple[np.ndarray, np.ndarray]
    evaluation: tuple[np.ndarray, np.ndarray]
    x: np.ndarray
    shape: tuple[int, ...] | None = None
    coarse: Any = None
    spectrum: tuple[np.ndarray | None, str | None] = (None, None)
    block_size: int = 1


class _ProblemSampler:
    """A grid problem's training stream, named by its problem in checkpoints.

    A checkpoint records the sampler's ``repr``; prefixing the problem makes a
    resume on another problem (or contrast) a changed setting even where the
    decomposition and the coarse basis would not tell them apart.
    """

    def __init__(self, sampler: Any, name: str) -> None:
        self.inner, self.name = sampler, name
        self.num_dofs = getattr(sampler, "num_dofs", None)
        self.dtype = getattr(sampler, "dtype", None)
        self.backend = getattr(sampler, "backend", "numpy")
        try:
            import inspect

            self._out = "out" in inspect.signature(sampler.sample).parameters
        except (TypeError, ValueError):
            self._out = False

    def __repr__(self) -> str:
        return f"{self.name}: {self.inner!r}"

    def sample(self, batch_size: int, rng: np.random.Generator, out: Any = None) -> Any:
        if out is not None and self._out:
            return self.inner.sample(batch_size, rng, out=out)
        return self.inner.sample(batch_size, rng)


def _problem_name(c: ExperimentConfig) -> str:
    extra = f", contrast={c.contrast:g}" if c.problem == "diffusion2d" else ""
    return f"{c.problem}(n={c.n}{extra})"


def _test_sets(c: ExperimentConfig, sampler: Any) -> tuple[tuple, tuple]:
    """The validation and evaluation sets: two streams spawned from ``test_seed``."""
    val_rng, eval_rng = (np.random.default_rng(s)
                         for s in np.random.SeedSequence(c.test_seed).spawn(2))
    validation = tuple(to_numpy(a) for a in sampler.sample(c.val_size, val_rng))
    evaluation = tuple(to_numpy(a) for a in sampler.sample(c.eval_size, eval_rng))
    return validation, evaluation


def build_problem(c: ExperimentConfig) -> Problem:
    """Decomposition, matrix, solver, training stream and the fixed test sets.

    The validation set (``val_size`` right-hand sides) and the evaluation set
    (``eval_size``) come from two independent streams spawned from ``test_seed``.
    A grid problem also builds its coarse basis here (GDSW and RGDSW need ``A``).
    """
    if c.problem != "poisson1d":
        return _build_grid_problem(c)
    d = Decomposition1D(c.n, c.subdomains, c.overlap, c.kind)
    sampler = FourierRHS(c.n, c.kind, c.rhs_mode, modes=RHS_FOURIER_MODES, dtype=c.dtype)
    validation, evaluation = _test_sets(c, sampler)
    return Problem(d, poisson_1d(c.n, c.kind), PoissonSolver(c.n, c.kind), sampler,
                   validation, evaluation, grid_points(c.n, c.kind))


def _build_grid_problem(c: ExperimentConfig) -> Problem:
    dim = DIMENSION[c.problem]
    shape = _grid.node_shape(c.problem, c.n)
    block = _grid.BLOCK_SIZE.get(c.problem, 1)
    null_space = None  # the constants
    if c.problem in ELASTICITY:
        A, points, null_space = _grid.elasticity_problem(c.n)
    else:
        A = _grid.grid_matrix(c.problem, c.n, c.contrast)
    if c.partitioner == "grid":
        d = Decomposition.from_grid(shape, _grid.grid_parts(c.subdomains, dim, c.n), c.overlap)
    else:
        if c.problem not in ELASTICITY:
            from ..problems import grid_coordinates

            points = grid_coordinates(c.n, dim)
        d = Decomposition.from_matrix(A, c.subdomains, c.overlap, partitioner=c.partitioner,
                                      coordinates=points, block_size=block)
    kind = "nicolaides" if c.coarse_basis == "pou" else c.coarse_basis
    Phi = build_coarse_basis(d, kind, A=A if kind in MATRIX_COARSE_BASES else None,
                             null_space=null_space)
    solver = _grid.Factorisation(A)
    sampler = _ProblemSampler(_grid_sampler(c, A, solver, shape, block), _problem_name(c))
    validation, evaluation = _test_sets(c, sampler)
    return Problem(d, A, solver, sampler, validation, evaluation, d.coordinates, shape=shape,
                   coarse=Phi, spectrum=_grid.spectrum(c.problem, c.n, A), block_size=block)


def _grid_sampler(c: ExperimentConfig, A: Any, solver: Any, shape: tuple[int, ...],
                  block: int) -> Any:
    """Tensor-product Fourier right-hand sides on the grid and their exact solutions.

    On elasticity every mode of the node grid drives one displacement component at a
    time (:func:`ddops.experiments.grid.vector_fourier_rhs`).
    """
    from ..learning.data import make_rhs_sampler

    if block > 1:
        return _grid.vector_fourier_rhs(solver.solve, shape, block, grid_rhs_modes(c),
                                        c.rhs_mode, c.dtype)
    return make_rhs_sampler(A, shape=shape, kind="fourier",
                            modes=grid_rhs_modes(c), mode=c.rhs_mode, dtype=c.dtype)


def grid_rhs_modes(c: ExperimentConfig) -> int:
    """Sine (and cosine) modes per direction of a grid problem's right-hand sides."""
    return GRID_FOURIER_MODES[DIMENSION[c.problem]] if c.rhs_modes is None else c.rhs_modes


def build_models(c: ExperimentConfig, d: Decomposition,
                 A: Any = None, coarse: Any = None) -> dict[str, LowRankOperator]:
    """The Schwarz attention model and one global baseline per requested rank.

    ``A`` (the system matrix) is needed when ``coarse_init`` or ``local_init``
    initialises from the problem (:func:`~ddops.learning.initialisation.problem_init`).
    ``coarse`` is the coarse basis Phi of a grid problem (:attr:`Problem.coarse`);
    without it ``c.coarse_basis`` names a basis built from ``d`` alone.  With
    ``c.global_ranks=None`` the baselines are the Schwarz model's rank bound
    and its parameter-matched rank (:func:`ddops.experiments.grid.global_ranks_for`).
    """
    coarse_init, local = c.coarse_init == "galerkin", c.local_init == "problem"
    if (coarse_init or local) and A is None:
        raise ValueError(f"A is required with coarse_init={c.coarse_init!r} or "
                         f"local_init={c.local_init!r}")
    basis = c.coarse_basis if coarse is None else coarse
    models: dict[str, LowRankOperator] = {
        "schwarz": SchwarzOperator(d, c.local_rank, c.coarse_rank, basis, init=c.init,
                                   seed=c.seed, dtype=c.dtype, partition=c.partition)
    }
    ranks = c.global_ranks
    if ranks is None:
        ranks = tuple(dict.fromkeys(_grid.global_ranks_for(models["schwarz"], d.num_dofs)))
    for r in ranks:
        models[f"global_r{r}"] = GlobalLowRankOperator(d.num_dofs, r, init=c.init, seed=c.seed,
                                                       dtype=c.dtype, h=d.h, dim=d.dim)
    if coarse_init or local:
        for op in models.values():
            problem_init(op, A, coarse=coarse_init, local=local)
    return models


def write_history_csv(path: Path, histories: dict[str, dict[str, np.ndarray]]) -> None:
    """Write the training histories of a comparison as ``<prefix>_history.csv``.

    Parameters
    ----------
    path : Path
        The CSV file (written atomically).
    histories : dict
        Per model, the history of its :class:`~ddops.learning.training.Trainer`
        (``step``, ``train``, ``lr``, ``val_step``, ``val``): one row per training
        step, with the validation loss where one was taken.
    """
    rows = []
    for model, h in histories.items():
        val = dict(zip(h["val_step"].tolist(), h["val"].tolist()))
        for step, loss, lr in zip(h["step"].tolist(), h["train"].tolist(), h["lr"].tolist()):
            v = val.get(step)
            rows.append([model, step, repr(loss), "" if v is None else repr(v), repr(lr)])
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["model", "step", "train_loss", "val_loss", "lr"])
    w.writerows(rows)
    atomic_write_text(path, buf.getvalue())


def _plot_model(name: str, op: LowRankOperator, prob: Problem, prefix: str,
                dense_limit: int = 2048) -> list[str]:
    """The per-model figures; the matrix figures (dense ``n x n``) only up to ``dense_limit``."""
    from . import plotting

    Fe, Ue = prob.evaluation
    Pe = to_numpy(op.matmat(Fe))
    out = [plotting.plot_solutions(prob.x, Fe, Ue, Pe, f"{prefix}_{name}_solutions.png",
                                   title=f"{name}: evaluation right-hand sides")]
    n = op.shape[0]
    if n > dense_limit:
        return out
    exact = prob.solver.solve(np.eye(n))
    if isinstance(op, SchwarzOperator):
        Phi = op.coarse_matrix
        out.append(plotting.plot_operator_matrices(
            op.to_dense("local"), op.to_dense("coarse") if Phi is not None else None,
            op.to_dense(), exact, Phi, f"{prefix}_{name}_matrices.png", title=name))
        p = op.get_params()
        blocks = [q @ k.T for q, k in zip(p["Q"], p["K"])]
        coarse = p["Q0"] @ p["K0"].T if Phi is not None else None
        out.append(plotting.plot_learned_blocks(blocks, coarse, f"{prefix}_{name}_blocks.png",
                                                title=f"{name}: learned blocks"))
        if Phi is not None:
            out.append(plotting.plot_coarse_basis_transpose(
                Phi, f"{prefix}_{name}_phiT.png", title="coarse basis $\\Phi^T$"))
    else:
        out.append(plotting.plot_operator_matrices(None, None, op.to_dense(), exact, None,
                                                   f"{prefix}_{name}_matrices.png", title=name))
    return out


# -- output locations ---------------------------------------------------------------------------
class OutputError(OSError):
    """A result file could not be written during a run.

    Everything computed so far was written to :attr:`rescue_dir` instead (``None``
    when that failed too); the message says where.
    """

    def __init__(self, message: str, rescue_dir: Path | None) -> None:
        super().__init__(message)
        self.rescue_dir = rescue_dir

    def __str__(self) -> str:
        return str(self.args[0])


def check_output_prefix(prefix: str | os.PathLike, suffixes: Iterable[str] = (),
                        name: str = "save_prefix") -> Path:
    """Make sure the files ``prefix + suffix`` can be written, before any work starts.

    Missing directories are created.  The directory is probed by creating and
    removing a temporary file whose name is as long as the longest output's
    temporary name (what the atomic writers of :mod:`ddops.io` create).

    Parameters
    ----------
    prefix : str or path-like
        The output prefix (``"results/compare"`` writes ``results/compare_*``).
    suffixes : iterable of str
        The names the run appends to ``prefix``.
    name : str
        The argument's name in error messages.

    Returns
    -------
    pathlib.Path
        The output directory.

    Raises
    ------
    ValueError
        For an empty prefix, a parent that is a file, a directory that cannot
        be created or written, or an output name that is a directory.
    """
    if not isinstance(prefix, (str, os.PathLike)):
        raise TypeError(f"{name} must be a string, got {type(prefix).__name__}")
    prefix = os.fspath(prefix)
    if not prefix:
        raise ValueError(f"{name} must not be empty")
    directory = Path(prefix + "_").parent
    for parent in (directory, *directory.parents):
        if parent.exists() or parent.is_symlink():
            if not parent.is_dir():
                raise ValueError(f"{name}={prefix!r}: {str(parent)!r} is not a directory")
            break
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"{name}={prefix!r}: cannot create the directory {str(directory)!r}: "
                         f"{exc.strerror or exc}") from None
    names = [Path(prefix + s).name for s in suffixes] or [Path(prefix + "_").name]
    for file in names:
        if (directory / file).is_dir():
            raise ValueError(f"{name}={prefix!r}: the output {str(directory / file)!r} is a "
                             f"directory")
    try:  # the same kind of name as the atomic writers' temporary files
        fd, probe = tempfile.mkstemp(dir=directory, prefix=max(names, key=len) + ".",
                                     suffix=".tmp")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ValueError(f"{name}={prefix!r}: cannot write in {str(directory)!r}: "
                         f"{exc.strerror or exc}") from None
    return directory


def rescue_outputs(prefix: str, exc: OSError, write: Callable[[str], Any]) -> OutputError:
    """Write what was computed with ``write(new_prefix)`` into a fresh temporary directory.

    Parameters
    ----------
    prefix : str
        The output prefix whose write failed.
    exc : OSError
        The failure.
    write : callable
        Writes everything computed so far under the prefix it is given.

    Returns
    -------
    OutputError
        The error to raise: it names the directory the results went to, or says that
        they are lost when that write failed too.
    """
    what = exc.filename if getattr(exc, "filename", None) else str(Path(prefix + "_").parent)
    failed = f"cannot write {what}: {exc.strerror or exc}"
    base = Path(prefix + "_").name[:-1] or "ddops"
    try:
        folder = Path(tempfile.mkdtemp(prefix="ddops-rescue-"))
        write(str(folder / base))
    except OSError as again:
        return OutputError(f"{failed}; keeping the results under {tempfile.gettempdir()} failed "
                           f"too ({again.strerror or again}), so they are lost", None)
    return OutputError(f"{failed}; the results computed so far were saved in {folder} instead",
                       folder)


def model_names(c: ExperimentConfig) -> list[str]:
    """The model names of a comparison (the keys of :func:`build_models`).

    With automatic ranks (``global_ranks=None``) the ranks are known only once
    the Schwarz model is built; the names then hold the largest possible rank
    (for the checks of the output names, whose longest name matters).
    """
    if c.global_ranks is None:
        largest = "9" * len(str(num_unknowns(c)))
        return ["schwarz", f"global_r{largest}", f"global_r{largest}"]
    return ["schwarz", *(f"global_r{r}" for r in c.global_ranks)]


def num_unknowns(c: ExperimentConfig) -> int:
    """The number of unknowns of a comparison's problem (rows of ``A``)."""
    if c.problem == "poisson1d":
        return num_dofs(c.n, c.kind)
    shape = _grid.node_shape(c.problem, c.n)
    return int(np.prod(shape)) * _grid.BLOCK_SIZE.get(c.problem, 1)


def compare_suffixes(c: ExperimentConfig) -> list[str]:
    """Every name a comparison may append to its prefix.

    Parameters
    ----------
    c : ExperimentConfig
        The validated settings of the comparison.

    Returns
    -------
    list of str
        The suffixes of its metrics, history, figures, operators and checkpoints.
    """
    out = ["_metrics.json", "_history.csv", "_training_curves.png", "_schwarz_blocks.png",
           "_schwarz_phiT.png", "_schwarz_coarse.png"]
    for m in model_names(c):
        out += [f"_{m}.npz", f"_{m}_checkpoint.npz", f"_{m}_solutions.png",
                f"_{m}_matrices.png", f"_{m}_rows.png"]
    return out


def earlier_outputs(config: ExperimentConfig) -> list[Path]:
    """The files of an earlier comparison that a run of ``config`` would replace (metrics,
    history, operators, checkpoints, figures at its ``save_prefix``), in output order."""
    c = config.validated()
    return [Path(c.save_prefix + s) for s in compare_suffixes(c)
            if Path(c.save_prefix + s).is_file()]


def checkpoint_path(prefix: str, model: str) -> Path:
    """Where a comparison keeps the checkpoint of ``model`` (read by ``resume``)."""
    return Path(f"{prefix}_{model}_checkpoint.npz")


def _finite(op: LowRankOperator) -> bool:
    return bool(np.all(np.isfinite(to_numpy(op.theta))))


# -- the comparison ----------------------------------------------------------------------------
def run_compare(config: ExperimentConfig, log: Any = print, *,
                trainer_factory: Callable[..., Trainer] | None = None,
                write_results: bool = True, written: list[str] | None = None,
                explain: bool = True) -> dict[str, dict[str, Any]]:
    """Train the Schwarz model and the global baselines on the same stream; write results.

    The settings, the output location and, with ``resume``, every checkpoint
    are checked before the first step.  A model whose training diverges is
    recorded with ``status="diverged"`` and its message; the others still run.

    Returns the metrics per model (also written to ``<save_prefix>_metrics.json``).

    Parameters
    ----------
    config : ExperimentConfig
        The settings.
    log : callable
        Receives one line per event.
    trainer_factory : callable, optional
        Called with :class:`~ddops.learning.training.Trainer`'s arguments
        instead of ``Trainer`` (for example a data-parallel trainer).
    write_results : bool
        ``False`` computes everything but writes no file (no output check, no
        operators, metrics, history or figures): for processes that share a
        run with another one that writes.
    written : list of str, optional
        Receives the path of every file the run writes (operators, metrics,
        history, checkpoints, figures), each once, in the order first written.
    explain : bool
        Log :func:`summary_legend` (what the columns of the per-model lines
        mean) before the first model trains.

    Raises
    ------
    ValueError
        For invalid settings, an unusable output location, or a damaged
        checkpoint or one written with other settings (unless
        ``allow_changed_settings``).
    OutputError
        When writing a result failed during the run; the results computed so
        far are in ``OutputError.rescue_dir``.
    """
    c = config.validated()
    prefix = c.save_prefix
    if write_results:
        check_output_prefix(prefix, compare_suffixes(c))
    metrics_path = Path(prefix + "_metrics.json")
    prob = build_problem(c)
    models = build_models(c, prob.decomposition, prob.A, coarse=prob.coarse)
    make_trainer = Trainer if trainer_factory is None else trainer_factory
    summary = None if c.problem == "poisson1d" else _problem_summary(c, prob)
    tcfg = TrainingConfig(steps=c.steps, batch_size=c.batch_size, lr=c.lr, loss=c.loss,
                          optimizer=c.optimizer, scheduler=c.scheduler, progress=c.progress,
                          checkpoint_every=c.checkpoint_every, val_every=c.val_every,
                          workers=c.workers, lr_scaling=c.lr_scaling)
    # every checkpoint is read before the first step: a damaged one or one with other
    # settings stops the run before any training time is spent
    trainers: dict[str, Trainer] = {}
    resumed: dict[str, tuple[int, dict[str, Any]]] = {}
    for name, op in models.items():
        ckpt = checkpoint_path(prefix, name)
        trainer = make_trainer(op, prob.sampler, tcfg, train_seed=c.train_seed,
                          validation=prob.validation,
                          checkpoint=ckpt if c.checkpoint_every else None,
                          A=prob.A if c.lr_scaling == "problem" else None)
        if c.resume:
            if ckpt.exists():
                changed = trainer.load_checkpoint(ckpt,
                                                  allow_changes=c.allow_changed_settings) or {}
                resumed[name] = (trainer.step, dict(changed))
                note = "".join(f"; {k} changed from {old!r} to {new!r}"
                               for k, (old, new) in changed.items())
                log(f"{name}: resumed from {ckpt} at step {trainer.step}{note}")
            else:
                log(f"{name}: no checkpoint {ckpt}, starting fresh")
        trainers[name] = trainer

    metrics: dict[str, dict[str, Any]] = {}
    histories: dict[str, dict[str, np.ndarray]] = {}
    files = [] if written is None else written

    def wrote(*paths: Any) -> None:
        for path in map(str, paths):
            if path not in files:
                files.append(path)

    if explain:
        log(summary_legend(c))

    def write_all(new_prefix: str, interrupted: tuple[str, Trainer] | None = None) -> None:
        for name in metrics:
            if _finite(models[name]):
                save_operator(models[name], f"{new_prefix}_{name}.npz")
        if metrics:
            write_metrics(Path(new_prefix + "_metrics.json"), c, metrics, rescued_from=prefix,
                          problem=summary)
            write_history_csv(Path(new_prefix + "_history.csv"), histories)
        if interrupted is not None:
            trainer = interrupted[1]
            trainer.save_checkpoint(checkpoint_path(new_prefix, interrupted[0]))

    for name, trainer in trainers.items():
        op = trainer.op
        try:
            result = trainer.run()
        except OSError as exc:  # a checkpoint could not be written
            raise rescue_outputs(prefix, exc,
                                 lambda p, it=(name, trainer): write_all(p, it)) from exc
        finally:
            ckpt = trainer.checkpoint_path
            if write_results and ckpt is not None and ckpt.exists():
                wrote(ckpt)
        histories[name] = result.history
        entry = _evaluate(c, op, prob)
        train = result.history["train"]
        start, changed = resumed.get(name, (None, {}))
        entry.update(
            status=result.status,
            message=result.message,
            steps=result.steps,
            resumed_from_step=start,
            changed_settings=changed,
            final_train_loss=float(train[-1]) if train.size else float("nan"),
            final_train_wmse=float(train[-1]) if train.size and tcfg.loss == "wmse" else None,
            val_wmse=entry.pop("val_loss"),
            train_seconds=result.seconds["total"],
            data_seconds=result.seconds["data"],
            lr=c.lr,
        )
        metrics[name] = entry
        log(_summary_line(name, entry))
        if result.status != "finished":
            log(result.message)
        if not write_results:
            continue
        try:
            if _finite(op):  # load_operator refuses non-finite parameters
                save_operator(op, f"{prefix}_{name}.npz")
                wrote(f"{prefix}_{name}.npz")
            write_metrics(metrics_path, c, metrics, problem=summary)
            wrote(metrics_path)
            write_history_csv(Path(prefix + "_history.csv"), histories)
            wrote(prefix + "_history.csv")
        except OSError as exc:
            raise rescue_outputs(prefix, exc, write_all) from exc
    if c.plots and write_results:
        try:
            _plot_compare(c, prob, models, histories, metrics, prefix, wrote)
        except OSError as exc:
            raise rescue_outputs(prefix, exc, write_all) from exc
    return metrics


def _evaluate(c: ExperimentConfig, op: LowRankOperator, prob: Problem) -> dict[str, Any]:
    """The metrics of one trained model (:func:`~ddops.learning.metrics.evaluate` in 1D)."""
    if c.problem == "poisson1d":
        return evaluate(op, prob.A, prob.solver.solve, prob.validation, prob.evaluation,
                        exact_limit=c.exact_limit)
    mu, method = prob.spectrum
    return _grid.evaluate_grid(op, prob.A, prob.solver.solve, prob.validation,
                               prob.evaluation, mu, method, exact_limit=c.exact_limit)


def _problem_summary(c: ExperimentConfig, prob: Problem) -> dict[str, Any]:
    """What the metrics record about a grid problem beyond the settings."""
    d = prob.decomposition
    sizes = d.sizes
    return {"problem": c.problem, "shape": list(prob.shape), "unknowns": int(d.num_dofs),
            "unknowns_per_node": prob.block_size,
            "nonzeros": int(prob.A.nnz), "subdomains": int(d.num_subdomains),
            "parts_per_direction": (list(_grid.grid_parts(c.subdomains, len(prob.shape), c.n))
                                    if c.partitioner == "grid" else None),
            "partitioner": c.partitioner, "coarse_basis": c.coarse_basis,
            "coarse_dim": int(prob.coarse.shape[1]),
            "subdomain_sizes": {"min": int(sizes.min()), "max": int(sizes.max()),
                                "mean": float(sizes.mean())},
            "spectrum": prob.spectrum[1] or "unknown (above the dense limit)"}


def _plot_compare(c: ExperimentConfig, prob: Problem, models: dict[str, LowRankOperator],
                  histories: dict[str, dict[str, np.ndarray]],
                  metrics: dict[str, dict[str, Any]], prefix: str,
                  wrote: Callable[..., None]) -> None:
    """The figures of a comparison; ``wrote`` receives each file's path once it is written."""
    from . import plotting

    wrote(plotting.plot_training_curves(  # a diverged run's curve is marked
        {k: {**h, "status": metrics[k]["status"]} for k, h in histories.items()},
        prefix + "_training_curves.png",
        title=f"n={c.n}, N={c.subdomains}, lr={c.lr:g}",
        ylabel="wMSE" if c.loss == "wmse" else "MSE"))
    for name, op in models.items():
        if _finite(op):
            if c.problem == "poisson1d":
                wrote(*_plot_model(name, op, prob, prefix))
            else:
                wrote(*_plot_grid_model(name, op, prob, prefix))


def _grid_points_of_interest(prob: Problem) -> np.ndarray:
    """Three unknowns whose rows are drawn: the centre, a box corner, one near the boundary.

    On elasticity the ``x`` displacement of those nodes.
    """
    d, b = prob.decomposition, prob.block_size
    shape = np.array(prob.shape)
    stride = np.concatenate([[1], np.cumprod(shape[:-1])])
    middle = (shape - 1) // 2
    centre = int(middle @ stride)
    near = int(stride[0] + middle[1:] @ stride[1:])
    # an unknown of the largest multiplicity (a cross point of the overlapping subdomains)
    corner = int(np.argmax(d.multiplicity)) // b
    return b * np.array(list(dict.fromkeys([centre, corner, near])))


def _plot_grid_model(name: str, op: LowRankOperator, prob: Problem, prefix: str) -> list[str]:
    """The figures of a grid problem: solutions and rows of M against A^{-1} on the grid.

    On elasticity (two unknowns per node) the fields drawn are one displacement
    component on the grid of nodes: of the solutions the larger one, otherwise ``x``.
    """
    from . import plotting

    b = prob.block_size
    Fe, Ue = prob.evaluation
    k = min(2, Fe.shape[1])
    Pe = to_numpy(op.matmat(Fe[:, :k]))
    j = int(np.argmax([np.linalg.norm(Ue[i::b, :k]) for i in range(b)]))
    what = "" if b == 1 else f", {'xyz'[j]}-displacement"
    out = [plotting.plot_grid_solutions(prob.shape, Fe[j::b, :k], Ue[j::b, :k], Pe[j::b],
                                        f"{prefix}_{name}_solutions.png",
                                        title=f"{name}: evaluation right-hand sides{what}")]
    points = _grid_points_of_interest(prob)
    E = np.zeros((op.shape[0], points.size))
    E[points, np.arange(points.size)] = 1.0
    rows = to_numpy(op.rmatmat(E))          # rows of M, as columns M^T e_i
    exact = prob.solver.solve(E)              # rows of A^{-1} (symmetric)
    what = "" if b == 1 else " (x-displacement at the x-unknown of a node)"
    out.append(plotting.plot_grid_rows(prob.shape, points // b, rows[::b], exact[::b],
                                       f"{prefix}_{name}_rows.png",
                                       title=f"{name}: rows of M and of A^-1{what}"))
    if isinstance(op, SchwarzOperator):
        p = op.get_params()
        blocks = [q @ kk.T for q, kk in zip(p["Q"], p["K"])]
        Phi = op.coarse_matrix
        coarse = p["Q0"] @ p["K0"].T if Phi is not None else None
        out.append(plotting.plot_learned_blocks(blocks, coarse, f"{prefix}_{name}_blocks.png",
                                                title=f"{name}: learned blocks"))
        if Phi is not None:
            cols = np.unique(np.linspace(0, Phi.shape[1] - 1, min(4, Phi.shape[1])).astype(int))
            what = "" if b == 1 else " (x-displacement)"
            out.append(plotting.plot_grid_fields(
                prob.shape, [Phi[::b, j].toarray().ravel() for j in cols],
                [f"coarse function {j}" for j in cols], f"{prefix}_{name}_coarse.png",
                title=f"coarse basis functions{what}", diverging=False))
    return out


def write_metrics(path: Path, c: ExperimentConfig, metrics: dict[str, Any],
                  rescued_from: str | None = None,
                  problem: dict[str, Any] | None = None) -> None:
    """Write a comparison's ``<prefix>_metrics.json`` (atomically).

    Parameters
    ----------
    path : Path
        The JSON file.
    c : ExperimentConfig
        The settings, stored under ``config``.
    metrics : dict
        The metrics of every finished model, stored under ``models``.
    rescued_from : str, optional
        The prefix whose write failed, when the results are rescued elsewhere.
    problem : dict, optional
        The summary of a 2D problem (also adds ``sampled_metrics``).
    """
    payload: dict[str, Any] = {"config": asdict(c), "models": metrics}
    if problem is not None:
        payload["problem"] = problem
        payload["sampled_metrics"] = {k: e.get("sampled_metrics", []) for k, e in metrics.items()}
    if rescued_from is not None:
        payload["rescued_from"] = rescued_from
    atomic_write_json(path, payload)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3e}"


def summary_legend(c: ExperimentConfig) -> str:
    """What the columns of the per-model summary lines of a comparison mean (three lines).

    ``fro`` is the operator error ``||M - A^-1||_F``; ``best`` is the smallest
    error any operator of the model's rank bound ``r`` can reach (Eckart-Young:
    the Frobenius norm of all but the ``r`` largest eigenvalues of ``A^-1``).
    """
    from ..learning.metrics import EXACT_FRO_LIMIT

    limit = EXACT_FRO_LIMIT if c.exact_limit is None else c.exact_limit
    loss = {"wmse": "weighted MSE", "mse": "MSE"}.get(LOSS_ALIASES.get(c.loss, c.loss), c.loss)
    return (f"per model: params = trainable parameters, rank<= = its rank bound r, "
            f"train/val = final training/validation loss ({loss}), time = training seconds;\n"
            f"  fro = ||M - A^-1||_F, the operator error (exact up to {limit} unknowns, "
            f"above that an estimate from random probes);\n"
            f"  best = the smallest fro of any operator of rank <= r (Eckart-Young, from "
            f"the eigenvalues of A^-1; '-' where they are unknown)")


def _summary_line(name: str, e: dict[str, Any]) -> str:
    return (f"{name:>12}: params={e['num_params']:>7d} rank<={e['rank_bound']:>5d} "
            f"train={e['final_train_loss']:.3e} val={e['val_wmse']:.3e} "
            f"fro={e['operator_fro_error']:.3e} best={_fmt(e['best_rank_fro_error'])} "
            f"time={e['train_seconds']:.1f}s" + ("" if e["status"] == "finished"
                                                 else f" [{e['status']}]"))


def markdown_table(rows: list[dict[str, Any]], columns: list[tuple[str, str, str]]) -> str:
    """A Markdown table from dict rows; ``columns`` are ``(key, header, format)``."""
    head = "| " + " | ".join(h for _, h, _ in columns) + " |"
    sep = "|" + "|".join("---" for _ in columns) + "|"
    body = []
    for r in rows:
        cells = []
        for key, _, fmt in columns:
            v = r.get(key)
            cells.append("-" if v is None else format(v, fmt))
        body.append("| " + " | ".join(cells) + " |")
    return "\n".join([head, sep, *body]) + "\n"


# -- the cost of a run, before it starts ----------------------------------------------------------
#: Fewest unknowns per subdomain, on average and before the overlap, that the command line
#: accepts.  GDSW has about six coarse functions per 2D box (a cross point is a cluster of
#: four, and two edges), so smaller subdomains make the coarse space, and with it the
#: global baseline of the same rank bound, as large as the problem: the cost of dense
#: inverses without the structure of a decomposition (64 x 64 points in 1000 boxes:
#: 3648 coarse functions for 4096 unknowns, hours of training).
MIN_SUBDOMAIN_UNKNOWNS = 6

#: The cost model of one training step of one model (seconds) in :func:`estimate_cost`: a
#: fixed part, a part per entry of the ``n x batch`` blocks (loss, residual, copies) and of
#: the stacked subdomain blocks (the batched local products of Schwarz attention), a part
#: per parameter (AdamW) and the dense products (global factors, coarse factors, the
#: right-hand sides) at an effective rate.  Fitted to the step times of
#: ``docs/performance.md`` (1D, n = 256 to 131072) and ``docs/beyond-1d.md`` (2D, 256 x 256)
#: on two cores; the steps of the 2D/3D defaults and of models of 27 million parameters,
#: measured under load, agree within the load's factor.
STEP_COST = {"fixed": 5e-4, "per_entry": 5e-9, "per_param": 3e-9,
             "flops_per_second": 5e10}

#: Estimated seconds of training above which the command line warns before a run starts:
#: sixty times the default comparison (about 30 seconds) and above every documented command
#: (the longest, ``ddops scaling --problem poisson2d``, about 20 minutes).
LONG_RUN_SECONDS = 1800.0


def unknowns_per_subdomain(c: ExperimentConfig) -> float:
    """The mean number of unknowns a subdomain owns (before the overlap)."""
    return num_unknowns(c) / c.subdomains


def _coarse_dimension(c: ExperimentConfig, parts: tuple[int, ...]) -> int:
    """The coarse dimension ``n0`` of a box decomposition with ``parts`` boxes per direction.

    Exact in 1D; on the grid problems the count of GDSW's interface components on the
    box grid (every cross point a cluster of ``2^d`` singletons, every edge of a 3D box
    ``2^(d-1)``, every face one; RGDSW: the cross points), times the null space's
    dimension: exact for boxes of a few points per direction and more, an estimate for
    METIS and RCB parts (within a factor 1.3 on the defaults).
    """
    N = c.subdomains
    if c.problem == "poisson1d":
        return N - 1 if c.coarse_basis in ("interface_hats", "grid_hats") else N
    null = 3 if c.problem in ELASTICITY else 1  # the rigid body modes of 2D elasticity
    if c.coarse_basis not in ("gdsw", "rgdsw"):
        return null * N
    p = np.array(parts)
    dim = p.size
    vertices = 2**dim * int(np.prod(p - 1))
    # interface pieces of codimension 1 and 2: each direction's cut planes, and their lines
    faces = sum(int(np.prod(p)) // p[t] * (p[t] - 1) for t in range(dim))
    lines = (2 * sum(int(p[t] * np.prod(np.delete(p - 1, t))) for t in range(dim))
             if dim == 3 else 0)
    pieces = vertices if c.coarse_basis == "rgdsw" and vertices else vertices + faces + lines
    return null * max(1, pieces)


def estimate_cost(c: ExperimentConfig) -> dict[str, Any]:
    """The size of a comparison and an estimate of its training time, before anything is built.

    From the settings alone: the stacked subdomain sizes and the coarse dimension of a
    box decomposition (exact in 1D, estimated for the grid problems), hence every
    model's parameters, and :data:`STEP_COST` per step and model.  Data, validation and
    the final evaluation are included; building the problem and drawing the figures are
    not.  A rough guide (within a factor of about two on two cores), meant to tell a run
    of minutes from one of hours.

    Returns
    -------
    dict
        ``unknowns``, ``unknowns_per_subdomain``, ``params`` (per model), ``step_seconds``
        (all models together) and ``seconds`` (``steps`` of them).
    """
    c = c.validated()
    n, N, r = num_unknowns(c), c.subdomains, c.local_rank
    if c.problem == "poisson1d":
        parts: tuple[int, ...] = (N,)
        stacked = int(Decomposition1D(c.n, N, c.overlap, c.kind).indices.size)
        functions = 2 * RHS_FOURIER_MODES
    else:
        dim = DIMENSION[c.problem]
        parts = _grid.grid_parts_unchecked(N, dim)
        shape = np.array(_grid.node_shape(c.problem, c.n), dtype=float)
        block = _grid.BLOCK_SIZE.get(c.problem, 1)
        # every box grows by the overlap on each side that is not the boundary
        width = shape / np.array(sorted(parts, reverse=True)[:dim])
        grown = width + 2 * c.overlap * (1 - 1 / np.array(parts))
        stacked = int(block * N * np.prod(np.minimum(grown, shape)))
        functions = block * (2 * grid_rhs_modes(c)) ** dim
    n0 = _coarse_dimension(c, parts)
    r0 = n0 if c.coarse_rank is None else min(c.coarse_rank, n0)
    schwarz = 2 * (r * stacked + n0 * r0)
    ranks = c.global_ranks
    if ranks is None:  # the rank bound and the parameter-matched rank (global_ranks_for)
        ranks = tuple(dict.fromkeys((min(r * N + r0, n), max(1, round(schwarz / (2 * n))))))
    params = {"schwarz": schwarz, **{f"global_r{k}": 2 * n * k for k in ranks}}
    B, cost = c.batch_size, STEP_COST
    data = 4 * n * functions * B  # two products with the basis: F and A^-1 F
    steps = {}
    for name, count in params.items():
        dense = count if name != "schwarz" else 2 * n0 * r0
        entries = n * B + (stacked * B if name == "schwarz" else 0)
        steps[name] = (cost["fixed"] + cost["per_entry"] * entries + cost["per_param"] * count
                       + (6 * dense * B + data) / cost["flops_per_second"])
    step = float(sum(steps.values()))
    # validation every val_every steps (one forward product) and the exact operator error
    # (n columns) at the end
    extra = sum(steps.values()) * (c.val_size / B / 3 * c.steps / c.val_every + n / B / 3)
    return {"unknowns": n, "unknowns_per_subdomain": n / N, "params": params,
            "step_seconds": step, "seconds": c.steps * step + extra}


# -- sweep and scaling -------------------------------------------------------------------------
def _lr_tag(lr: float) -> str:
    return f"{lr:.0e}".replace("-0", "m").replace("+0", "")


def sweep_configs(config: ExperimentConfig,
                  lrs: Iterable[float] = SWEEP_LRS) -> list[ExperimentConfig]:
    """The validated comparison of every learning rate of a sweep (``<prefix>_lr<tag>``)."""
    lrs = tuple(lrs)
    if not lrs:
        raise ValueError("lrs must not be empty")
    tags: dict[str, float] = {}
    for lr in lrs:
        lr = check_positive_float("lrs", lr)
        tag = _lr_tag(lr)
        if tag in tags:
            raise ValueError(f"lrs: {tags[tag]:g} and {lr:g} would write the same files "
                             f"(tag lr{tag}); give learning rates that differ in the first digit "
                             f"or the exponent")
        tags[tag] = lr
    return [replace(config, lr=lr, save_prefix=f"{config.save_prefix}_lr{tag}").validated()
            for tag, lr in tags.items()]


def scaling_ns(config: ExperimentConfig) -> tuple[int, ...]:
    """The default sizes of a scaling study of ``config.problem``."""
    if config.problem == "poisson1d":
        return SCALING_NS
    return _grid.SCALING_GRID_NS[DIMENSION[config.problem]]


def scaling_configs(config: ExperimentConfig, ns: Iterable[int] | None = None,
                    width: int | None = None) -> list[ExperimentConfig]:
    """The validated Schwarz-only comparison of every size of a scaling study.

    Weak scaling: subdomains of ``width`` points per direction, so ``N = n /
    width`` in 1D (the paper's ``n / 32``) and ``N = (n / width)^d`` boxes
    on a ``d``-dimensional grid problem (``width`` 32 in 2D, 8 in 3D by
    default, :data:`ddops.experiments.grid.SCALING_WIDTH`).
    """
    ns = tuple(scaling_ns(config) if ns is None else ns)
    if not ns:
        raise ValueError("ns must not be empty")
    dim = DIMENSION.get(config.problem, 1)
    width = _grid.SCALING_WIDTH[dim] if width is None else check_int("width", width, minimum=1)
    out = []
    for n in ns:
        check_int("ns", n, minimum=2)
        if ns.count(n) > 1:
            raise ValueError(f"ns={n} is listed twice")
        if dim > 1:
            per = max(1, n // width)
            N = per ** dim
            try:
                out.append(replace(config, n=n, subdomains=N, global_ranks=(),
                                   save_prefix=f"{config.save_prefix}_n{n}").validated())
            except ValueError as exc:
                raise ValueError(f"ns={n} (N = (n/{width})^{dim} = {N}): {exc}") from exc
            continue
        N = max(1, n // width)
        if N < 2 and config.coarse_basis == "interface_hats":
            raise ValueError(f"ns={n} gives N = n/32 = {N} subdomain, and "
                             f"coarse_basis='interface_hats' needs at least two; use n >= 64 or "
                             f"coarse_basis='pou'")
        try:
            out.append(replace(config, n=n, subdomains=N, global_ranks=(),
                               save_prefix=f"{config.save_prefix}_n{n}").validated())
        except ValueError as exc:
            raise ValueError(f"ns={n} (N = n/32 = {N}): {exc}") from exc
    return out


def _diverged(metrics: dict[str, dict[str, Any]]) -> list[str]:
    return [name for name, e in metrics.items() if e.get("status") == "diverged"]


def run_sweep(config: ExperimentConfig, lrs: tuple[float, ...] = SWEEP_LRS,
              log: Any = print, keep_going: bool = False,
              written: list[str] | None = None) -> list[dict[str, Any]]:
    """Table 1: the comparison at every learning rate; Markdown table and figure.

    Every learning rate's settings and the output location are checked first.
    A learning rate whose training diverges stops the sweep after its
    comparison (the table then ends there) unless ``keep_going``; either way
    its rows carry ``status="diverged"``.  ``written`` receives the path of
    every file written (see :func:`run_compare`), the sweep's own last.
    """
    configs = sweep_configs(config, lrs)
    check_output_prefix(config.save_prefix,
                        [f"_lr{_lr_tag(c.lr)}{s}" for c in configs for s in compare_suffixes(c)]
                        + ["_sweep.md", "_sweep_metrics.json", "_sweep.png"])
    rows: list[dict[str, Any]] = []
    extra = {"lrs": [c.lr for c in configs], "keep_going": keep_going}
    for k, c in enumerate(configs):
        log(f"--- lr = {c.lr:g}")
        metrics = _run_part(c, log, config, rows, "sweep", extra, written, explain=k == 0)
        rows += [{"lr": c.lr, "model": name, **e} for name, e in metrics.items()]
        if _diverged(metrics) and not keep_going:
            log(f"lr = {c.lr:g}: training diverged; the sweep stops here (keep going past "
                f"diverged runs with keep_going / --keep-going)")
            break
    _write_table(config, rows, [("lr", "lr", "g"), ("model", "model", "s"),
                                ("status", "status", "s"),
                                ("final_train_loss", "train loss", ".3e"),
                                ("val_wmse", "val wMSE", ".3e"),
                                ("operator_fro_error", "Fro error", ".3g"),
                                ("best_rank_fro_error", "best rank-r", ".3e"),
                                ("train_seconds", "seconds", ".1f")], "sweep", extra,
                 written=written)
    return rows


def run_scaling(config: ExperimentConfig, ns: tuple[int, ...] | None = None,
                log: Any = print, keep_going: bool = False,
                width: int | None = None,
                written: list[str] | None = None) -> list[dict[str, Any]]:
    """Table 2: Schwarz attention for growing n with N = n / 32; table and figure.

    On a grid problem ``n`` counts points per direction and ``N = (n /
    width)^d`` (see :func:`scaling_configs`); ``ns=None`` takes the
    problem's default sizes (:func:`scaling_ns`).

    Every size's settings and the output location are checked first; a
    diverged run stops the study unless ``keep_going``; ``written`` receives
    the path of every file written (see :func:`run_sweep`).
    """
    configs = scaling_configs(config, ns, width)
    check_output_prefix(config.save_prefix,
                        [f"_n{c.n}{s}" for c in configs for s in compare_suffixes(c)]
                        + ["_scaling.md", "_scaling_metrics.json", "_scaling.png"])
    rows: list[dict[str, Any]] = []
    extra = {"ns": [c.n for c in configs], "keep_going": keep_going}
    for k, c in enumerate(configs):
        log(f"--- n = {c.n}, N = {c.subdomains}")
        metrics = _run_part(c, log, config, rows, "scaling", extra, written, explain=k == 0)
        size = {} if c.problem == "poisson1d" else {"unknowns": num_unknowns(c)}
        rows.append({"n": c.n, "N": c.subdomains, **size, **metrics["schwarz"]})
        if _diverged(metrics) and not keep_going:
            log(f"n = {c.n}: training diverged; the study stops here (keep going past "
                f"diverged runs with keep_going / --keep-going)")
            break
    grid_cols = [] if config.problem == "poisson1d" else [("unknowns", "unknowns", "d")]
    _write_table(config, rows, [("n", "n", "d"), ("N", "N", "d"), *grid_cols,
                                ("status", "status", "s"),
                                ("num_params", "#params", "d"),
                                ("val_wmse", "val wMSE", ".3e"),
                                ("operator_fro_error", "Fro error", ".3e"),
                                ("best_rank_fro_error", "best rank-r", ".3e"),
                                ("rank_bound", "rank bound", "d"),
                                ("train_seconds", "seconds", ".1f")], "scaling", extra,
                 written=written)
    return rows


def _run_part(c: ExperimentConfig, log: Any, config: ExperimentConfig,
              rows: list[dict[str, Any]], what: str, extra: dict[str, Any],
              written: list[str] | None, explain: bool) -> dict[str, dict[str, Any]]:
    """One comparison of a sweep or scaling study; a late write failure keeps the rows too."""
    try:
        return run_compare(c, log, written=written, explain=explain)
    except OutputError as exc:
        if exc.rescue_dir is not None and rows:
            base = Path(config.save_prefix + "_").name[:-1] or "ddops"
            with_rows = replace(config, save_prefix=str(exc.rescue_dir / base))
            try:
                _write_table(with_rows, rows, [], what, extra, plots=False)
            except OSError:
                pass  # the message already names the rescue directory with the run's files
        raise


def _write_table(config: ExperimentConfig, rows: list[dict[str, Any]],
                 columns: list[tuple[str, str, str]], what: str, extra: dict[str, Any],
                 plots: bool | None = None, written: list[str] | None = None) -> None:
    """``<prefix>_<what>.md``, ``<prefix>_<what>_metrics.json`` and the figure ``plot_<what>``.

    With no ``columns`` only the JSON is written.  ``written`` receives the paths.
    """
    prefix = config.save_prefix
    files = [] if written is None else written

    def write(prefix: str) -> None:
        atomic_write_json(Path(f"{prefix}_{what}_metrics.json"),
                          {"config": asdict(config), **extra, "rows": rows})
        if columns:
            atomic_write_text(Path(f"{prefix}_{what}.md"), markdown_table(rows, columns))

    try:
        write(prefix)
        files += [f"{prefix}_{what}.md"] * bool(columns) + [f"{prefix}_{what}_metrics.json"]
        if (config.plots if plots is None else plots) and rows:
            from . import plotting

            getattr(plotting, f"plot_{what}")(rows, f"{prefix}_{what}.png")
            files.append(f"{prefix}_{what}.png")
    except OSError as exc:
        if not columns:
            raise
        raise rescue_outputs(prefix, exc, write) from exc
