"""The flags of ``ddops precond``: :func:`add_arguments` and :func:`run_from_args`.

:func:`add_arguments` adds the flags to the subcommand's parser (the defaults are
those of :class:`~ddops.experiments.precond.config.PrecondConfig`).  The flags of the
preconditioners' settings (``--subdomains``, ``--partitioner``, ``--coarse``,
``--local-solver``, ``--threshold``, ...) are generated from the library's vocabulary,
:func:`ddops.precond.options.add_cli_arguments`: their names, choices and defaults are
those of :class:`ddops.SchwarzOptions` and of the coarse spaces' options objects;
:func:`run_from_args` turns the parsed flags into a configuration, refusing a
1D-only flag given with a 2D/3D problem or ``--matrix``, and runs it.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..._argtypes import int_at_least, positive_float
from ...dd.agdsw import AGDSW_SKIP_CONTRAST
from ...dd.geneo import (
    GENEO_EIGEN_STOP,
    GENEO_SKIP_CONTRAST,
    MAX_PER_NULL_VECTOR,
    MAX_PER_SUBDOMAIN,
)
from ...dd.partition import TARGET_SUBDOMAIN_UNKNOWNS
from ...precond.learned import OBJECTIVES
from ...precond.options import add_cli_arguments
from ...problems.poisson1d import KINDS
from .config import (
    BUILT_COARSE,
    DEFAULT_EXTRA,
    NULL_SPACES,
    ONE_D_ONLY,
    PARTITIONER_CHOICES,
    PrecondConfig,
)
from .problem_registry import (
    BOX_COUNT_SLACK,
    DEFAULT_CONTRASTS,
    DEFAULT_N,
    GRID_ASPECT,
    PROBLEM_SUBDOMAIN_WIDTH,
    PROBLEMS,
)
from .runners import run_precond

__all__ = ["add_arguments", "run_from_args"]

class _Given(argparse.Action):
    """Store a flag's value and remember that it was given (1D-only flags are refused)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        given = set(getattr(namespace, "precond_given", ()))
        given.add(self.dest)
        namespace.precond_given = given


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the flags of ``ddops precond`` to ``parser``.

    Parameters
    ----------
    parser : argparse.ArgumentParser
        The subcommand's parser; the flags come in groups (problem, your own matrix,
        decomposition and coarse space, solvers, learned preconditioners, output), with
        the defaults of :class:`~ddops.experiments.precond.config.PrecondConfig`.
    """
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
    add_cli_arguments(
        g, ["subdomains", "overlap"], defaults={"subdomains": None, "overlap": None},
        notes={"overlap": "poisson1d: elements (--kind element) or unknowns (--kind dof) "
                          "added on each side of a subdomain"},
        default_help={"subdomains": f"n/32 in 1D, at least 2; otherwise parts of about "
                                    f"{TARGET_SUBDOMAIN_UNKNOWNS} unknowns, at least 2 (on "
                                    "the finite-difference grids the nearest count within "
                                    f"{BOX_COUNT_SLACK}x that makes a grid of boxes), but "
                                    f"(n/width)^dim with these widths: {widths}",
                      "overlap": "2 in 1D, otherwise 1"})
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
    add_cli_arguments(
        u, ["block_size", "kernel"], defaults={"block_size": None},
        notes={"block_size": "interleaved (node k holds unknowns k*b .. k*b+b-1)",
               "kernel": "for a pure Neumann problem or a floating body; the file is a "
                         ".npy or .mtx; the right-hand side is projected off it and the "
                         "Schwarz preconditioners get kernel="},
        default_help={"block_size": "1", "kernel": "none, A nonsingular"})
    add_cli_arguments(g, ["seed"], notes={
        "seed": "here also of the right-hand sides, the initialisations and the random "
                "coefficients"})
    g.add_argument("--blas-threads", type=nonneg, default=d.blas_threads,
                   help="threads of BLAS, of the set-up's independent chunks and of the "
                        "PARDISO local solver's groups of subdomains (the Krylov solves, "
                        "vector operations and applications, run on one BLAS thread); 0 "
                        "leaves the library's setting; default %(default)s")
    dd = parser.add_argument_group("decomposition and coarse space")
    built = ", ".join(PARTITIONER_CHOICES)
    add_cli_arguments(
        dd, ["partitioner", "coarse"], defaults={"partitioner": None, "coarse": None},
        extra_choices={"coarse": ("learned", "all")},
        notes={"partitioner": f"2D/3D: {built} (boxes of the grid, Decomposition.from_grid; "
                              "METIS or recursive coordinate bisection, "
                              "Decomposition.from_matrix); the others are refused",
               "coarse": f"ddops precond builds {', '.join(BUILT_COARSE)} (interface_hats: "
                         "1D only) and learned, or all of them "
                         "(nicolaides, gdsw, rgdsw, then the adaptive agdsw and geneo; 1D: "
                         "first interface_hats).  agdsw and geneo take the finite-element "
                         "Neumann matrices of the subdomains on elasticity, the algebraic "
                         "ones otherwise.  learned (2D/3D): GDSW enriched by --extra learned "
                         "functions per subdomain, in one table with gdsw, agdsw, geneo and "
                         "the exact-deflation ceiling (dense, small problems only)"},
        default_help={"partitioner": "grid for the finite-difference problems when N has a "
                                     f"box grid with at most {GRID_ASPECT}:1 box counts, else "
                                     "metis; metis for elasticity",
                      "coarse": "interface_hats for poisson1d, gdsw otherwise"})
    add_cli_arguments(
        dd, ["variant"], defaults={"variant": None},
        notes={"variant": "of the 2D/3D two-level rows, which run CG: additive or hybrid "
                          "(the coarse correction multiplicative around the local one: "
                          "fewer iterations, two coarse solves each); poisson1d: see --kind"},
        default_help={"variant": "additive"})
    dd.add_argument("--extra", type=pos,
                    help="--coarse learned: learned functions per subdomain, and the deflation "
                         f"row's eigenvectors per subdomain (default {DEFAULT_EXTRA}); "
                         "--train-steps sets its Adam steps (default 0: the initialisation, "
                         "which measured best)")
    bites = "a warning in the table says where it bites"
    add_cli_arguments(
        dd, ["threshold", "max_per_component", "skip_contrast", "max_per_subdomain",
             "oversampling", "eigen_stop", "null_space"],
        defaults={"threshold": None, "max_per_component": None, "skip_contrast": None,
                  "max_per_subdomain": None, "oversampling": None, "eigen_stop": None},
        extra_names={"null_space": tuple(n for n in NULL_SPACES if n != "constants")},
        notes={"threshold": "with --coarse all both take it",
               "max_per_component": bites, "max_per_subdomain": bites,
               "null_space": "also of pyamg's smoothed aggregation: elasticity: rigid body "
                             "modes (rbm or rigid), translations or constants; --matrix: "
                             "constants, rigid (needs --coordinates and --block-size 2 or 3) "
                             "or a .npy/.mtx file with one column per vector"},
        default_help={"null_space": "rbm for elasticity, constants with --matrix",
                      "eigen_stop": GENEO_EIGEN_STOP,
                      "max_per_subdomain": f"{MAX_PER_SUBDOMAIN}, or {MAX_PER_NULL_VECTOR} "
                                           "per null-space vector if more (192 for 3D "
                                           "elasticity)",
                      "skip_contrast": f"agdsw: {AGDSW_SKIP_CONTRAST:g} with the default "
                                       "threshold or a smaller one, else 0; geneo: "
                                       f"{GENEO_SKIP_CONTRAST:g}"})
    s = parser.add_argument_group("solvers")
    add_cli_arguments(
        s, ["factor_dtype", "local_solver", "extension_solver"],
        notes={"factor_dtype": "float32 factors are applied to the float64 residual (the "
                               "coarse solve and CG stay in float64)",
               "local_solver": "dense inverses, SuperLU (sparse is another name of superlu), "
                               "MKL PARDISO (extra ddops[solvers]) or one aggregation-AMG "
                               "V-cycle (inexact); auto: dense when small, else pardiso when "
                               "installed, else superlu",
               "extension_solver": "amg runs CG with a V-cycle to rtol 1e-6; auto: pardiso "
                                   "when installed, else superlu"})
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
    """Run ``ddops precond`` from parsed arguments (see :func:`add_arguments`).

    Parameters
    ----------
    args : argparse.Namespace
        The parsed flags.

    Returns
    -------
    dict
        The payload of ``<prefix>_results.json``
        (:func:`~ddops.experiments.precond.runners.run_precond`).

    Raises
    ------
    ValueError
        A setting that the problem does not use (a 1D-only flag given with a 2D/3D
        problem or ``--matrix``) or that :meth:`PrecondConfig.validated
        <ddops.experiments.precond.config.PrecondConfig.validated>` refuses.
    """
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
        skip_contrast=args.skip_contrast,
        max_per_subdomain=args.max_per_subdomain, oversampling=args.oversampling,
        eigen_stop=args.eigen_stop, variant=args.variant, partitioner=args.partitioner,
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
