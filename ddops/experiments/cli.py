"""The ``ddops`` command line: the paper's experiments.

``ddops compare`` trains Schwarz attention and global low-rank baselines with
the flags of the paper's ``compare_global_vs_schwarz.py``; ``ddops sweep`` and
``ddops scaling`` reproduce Tables 1 and 2; ``ddops precond`` compares Krylov
preconditioners on the 1D problem (with the learned ones) and on 2D/3D problems.
Plain ``ddops`` prints the help.

Every setting and the output location are checked before any training starts.
Exit status: 0 success; 1 a training run diverged (``sweep`` and ``scaling``
stop there unless ``--keep-going``); 2 invalid input (a bad flag value, an
unusable ``--save-prefix``, a damaged or mismatched checkpoint), as one line on
stderr without a traceback; 3 a result could not be written during the run
(the results computed so far are kept in the directory the message names);
4 ``ddops precond`` ran, but some rows were refused (a coarse space or solver that
does not accept the matrix) or failed: the other rows are in the table and the
JSON file, and one line on stderr names the first; 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import warnings
from dataclasses import fields, replace
from typing import Any

from .._argtypes import int_at_least, positive_float

__all__ = ["main", "build_parser", "EXIT_DIVERGED", "EXIT_USAGE", "EXIT_OUTPUT", "EXIT_ROWS"]

COMMANDS = ("compare", "sweep", "scaling", "precond")

#: Exit status when a training run diverged.
EXIT_DIVERGED = 1
#: Exit status for invalid input (flags, paths, damaged files).
EXIT_USAGE = 2
#: Exit status when writing a result failed during the run (results kept elsewhere).
EXIT_OUTPUT = 3
#: Exit status of ``ddops precond`` when some rows were refused or failed (the others written).
EXIT_ROWS = 4

_EXIT_STATUS = """\
exit status: 0 success, 1 a training run diverged, 2 invalid input (one line on stderr),
3 a result could not be written during the run (the results are kept in the directory
the message names), 4 (precond) some rows were refused or failed (the others are
written), 130 interrupted"""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise _UsageError(f"{self.prog}: error: {message}")


class _UsageError(Exception):
    pass


_positive_int = int_at_least(1)
_nonnegative_int = int_at_least(0)
_positive_float = positive_float


def _defaults(name: str, fmt: Any = str) -> str:
    """``default X`` of an ExperimentConfig field, with every preset's value where it differs."""
    from .compare import PRESETS, ExperimentConfig

    text = f"default {fmt(getattr(ExperimentConfig, name))}"
    for preset, values in PRESETS.items():
        if name in values:
            text += f"; --preset {preset}: {fmt(values[name])}"
    return text


def _add_experiment_flags(p: argparse.ArgumentParser, default_prefix: str,
                          exclude: tuple[str, ...] = ()) -> None:
    """The flags of compare, sweep and scaling; ``exclude`` names the ones a command sets itself."""
    from ..dd.coarse import ALL_COARSE_BASES
    from ..learning.data import RHS_MODES
    from ..learning.initialisation import COARSE_INITS, LOCAL_INITS, LR_SCALINGS
    from ..learning.metrics import EXACT_FRO_LIMIT
    from ..learning.training import OPTIMIZERS
    from ..operators import INITS, PARTITIONS
    from ..precond.options import add_deprecated_flag
    from .compare import GRID_FOURIER_MODES, REGRESSION_LOSSES
    from .grid import (
        ELASTICITY_DEFAULTS,
        GRID_COARSE_BASES,
        PARTITIONERS,
        PROBLEM_DEFAULTS,
        PROBLEMS,
        SUBDOMAIN_WIDTH,
        subdomain_width,
    )

    def add(group: Any, flag: str, **kw: Any) -> None:
        if flag not in exclude:
            group.add_argument(flag, **kw)

    def ranks(value: tuple[int, ...]) -> str:
        return " ".join(map(str, value))

    g = p.add_argument_group("problem and models (defaults: the paper's v2 main setting)")
    add(g, "--preset", choices=("v2", "v1", "improved"), default="v2",
        help="settings to start from (default %(default)s, the paper's newer version; v1: dof "
             "convention, naive initialisation, global ranks 40 5, coarse rank 8, Adam "
             "without scheduler; improved, beyond the paper: v2 with --coarse-init galerkin "
             "--local-init problem --lr-scaling problem --lr 0.1)")
    d2, d3, de = PROBLEM_DEFAULTS[2], PROBLEM_DEFAULTS[3], ELASTICITY_DEFAULTS
    add(g, "--problem", choices=PROBLEMS,
        help="the problem: the paper's 1D Poisson problem, finite differences on the unit "
             "square/cube (poisson2d, poisson3d, diffusion2d with high-contrast channels of "
             "--contrast), or P1 plane-strain elasticity clamped at x = 0 (elasticity2d, as "
             "in ddops precond; scikit-fem), with algebraic decompositions; "
             f"{_defaults('problem')}")
    add(g, "--n", type=_positive_int, metavar="N",
        help="problem size: line elements (--kind element, n - 1 unknowns) or unknowns "
             f"(--kind dof); {_defaults('n')}; 2D/3D problems: interior points per direction "
             f"(n^2 or n^3 unknowns, at least {2 * GRID_FOURIER_MODES[2]} / "
             f"{2 * GRID_FOURIER_MODES[3]}), {d2['n']} in 2D and {d3['n']} in 3D; "
             f"elasticity2d: 2 (n + 1)(n + 2) unknowns, {de['n']}")
    add(g, "--subdomains", type=_positive_int,
        help="number of subdomains N (default 8; n/32 when only --n is given); 2D/3D: "
             f"boxes of the grid, split per direction by the most balanced factorisation "
             f"(or parts from --partitioner metis or rcb), {d2['subdomains']} in 2D and "
             f"{d3['subdomains']} in 3D, (n/{SUBDOMAIN_WIDTH[2]})^2 or "
             f"(n/{SUBDOMAIN_WIDTH[3]})^3 when only --n is given; elasticity2d: "
             f"{de['subdomains']}, (n/{subdomain_width('elasticity2d')})^2 when only --n is "
             f"given")
    add(g, "--partitioner", choices=PARTITIONERS,
        help="2D/3D: the non-overlapping partition, boxes of the grid, METIS on the graph "
             f"of A or recursive coordinate bisection (rcb); {_defaults('partitioner')}; "
             f"elasticity2d: {de['partitioner']} or rcb")
    add(g, "--contrast", type=_positive_float,
        help="diffusion2d only: coefficient in the channels over the background; "
             f"{_defaults('contrast', lambda v: f'{v:g}')}")
    add(g, "--overlap", type=_nonnegative_int,
        help="overlap added on each side of a subdomain, in elements (--kind element) or "
             f"unknowns (--kind dof); {_defaults('overlap')}; 2D/3D: layers of the graph of "
             f"A, {d2['overlap']}")
    add(g, "--kind", choices=("element", "dof"),
        help=f"discretisation convention (docs: conventions); {_defaults('kind')}")
    add(g, "--local-rank", type=_positive_int,
        help=f"local rank r_l of each subdomain block; {_defaults('local_rank')}")
    add(g, "--coarse-rank", type=_positive_int,
        help="coarse rank r0 (default n0 = N - 1, the coarse dimension; --preset v1: 8; "
             "values above n0 are truncated with a warning)")
    add(g, "--global-rank", type=_nonnegative_int, nargs="+", metavar="RANK",
        help="ranks of the global Q K^T baselines, one model each (default 39 5; "
             "--preset v1: 40 5; 0 for none; 2D/3D: the Schwarz model's rank bound and its "
             "parameter-matched rank)")
    if "--coarse" not in exclude:  # the preconditioners' name; --coarse-basis still works
        coarse = g.add_argument(
            "--coarse", dest="coarse_basis", choices=ALL_COARSE_BASES,
            help=f"coarse basis Phi of the Schwarz attention operator (ddops.coarse_basis); "
                 f"{_defaults('coarse_basis')}; 2D/3D: {', '.join(GRID_COARSE_BASES[:2])} "
                 f"or {GRID_COARSE_BASES[2]} (built from A and the partition), "
                 f"{d2['coarse_basis']}")
        add_deprecated_flag(g, "--coarse-basis", coarse)
    add(g, "--partition", choices=tuple(PARTITIONS),
        help=f"placement of the partition-of-unity weight; {_defaults('partition')}")
    add(g, "--init", choices=INITS,
        help=f"random initialisation of the factors; {_defaults('init')}")
    add(g, "--coarse-init", choices=COARSE_INITS,
        help="coarse factors: the random draw of --init, or Q0 = K0 = V Lambda^(1/2) from the "
             f"eigenpairs of (Phi^T A Phi)^-1 (Schwarz only); {_defaults('coarse_init')}")
    add(g, "--local-init", choices=LOCAL_INITS,
        help="local factors: the random draw of --init, or the same normal draw with each "
             "subdomain's natural standard deviation from the top eigenvalues of its "
             f"inverse local matrix (global baselines: of A^-1); {_defaults('local_init')}")
    add(g, "--dtype", choices=("float64", "float32"),
        help=f"floating-point type of the models; {_defaults('dtype')}")
    t = p.add_argument_group("training")
    add(t, "--rhs-mode", choices=RHS_MODES,
        help=f"family of training right-hand sides; {_defaults('rhs_mode')}")
    add(t, "--rhs-modes", type=_positive_int, metavar="MODES",
        help="2D/3D: sine and cosine modes per direction of the tensor-product right-hand "
             f"sides, (2 MODES)^d functions (default {GRID_FOURIER_MODES[2]} in 2D, "
             f"{GRID_FOURIER_MODES[3]} in 3D; the 1D problem keeps the paper's 16)")
    add(t, "--loss", choices=REGRESSION_LOSSES,
        help=f"training loss (wmse: weighted MSE of the paper); {_defaults('loss')}")
    add(t, "--steps", type=_positive_int,
        help=f"optimisation steps in total (with --resume: including the steps already "
             f"done); {_defaults('steps')}")
    add(t, "--lr", type=_positive_float,
        help=f"initial learning rate; {_defaults('lr', lambda v: f'{v:g}')}")
    add(t, "--batch-size", type=_positive_int,
        help=f"right-hand sides per step; {_defaults('batch_size')}")
    add(t, "--workers", type=_positive_int,
        help="threads sharing each step on column blocks of the batch (default 1; "
             "faster for n >= 1024 when cores are free)")
    add(t, "--optimizer", choices=OPTIMIZERS, help=f"optimiser; {_defaults('optimizer')}")
    add(t, "--lr-scaling", choices=LR_SCALINGS,
        help="problem: multiply every entry's step by its block's natural entry size, so that "
             f"--lr is relative to it at every n and N; {_defaults('lr_scaling')}")
    add(t, "--scheduler", action=argparse.BooleanOptionalAction, default=None,
        help="ReduceLROnPlateau on the training loss (default on; --preset v1: off)")
    add(t, "--seed", type=_nonnegative_int,
        help=f"model initialisation seed; {_defaults('seed')}")
    add(t, "--train-seed", type=_nonnegative_int,
        help=f"seed of the training stream; {_defaults('train_seed')}")
    add(t, "--test-seed", type=_nonnegative_int,
        help=f"seed of the validation and evaluation sets; {_defaults('test_seed')}")
    add(t, "--checkpoint-every", type=_nonnegative_int, metavar="STEPS",
        help="write <prefix>_<model>_checkpoint.npz every this many steps (default 0: no "
             "checkpoints)")
    add(t, "--resume", action="store_true", default=None,
        help="continue every model from its <prefix>_<model>_checkpoint.npz; a model "
             "without one starts fresh (said on the output); a checkpoint written with other "
             "settings is refused unless --allow-changed-settings (default: train from the start)")
    add(t, "--allow-changed-settings", action="store_true", default=None,
        help="with --resume: accept checkpoints written with other settings (for example "
             "fewer --steps or another --lr) and record the changes in the metrics (default: "
             "refuse them)")
    o = p.add_argument_group("output")
    add(o, "--save-prefix", metavar="PREFIX",
        help="prefix of every output file; missing directories are created, and the "
             f"location is checked before training (default {default_prefix})")
    add(o, "--no-plots", dest="plots", action="store_false", default=None,
        help="write no PNG figures (default: write them)")
    add(o, "--progress", dest="progress", action="store_true", default=None,
        help="show progress bars on standard error (default: only when it is a terminal)")
    add(o, "--no-progress", dest="progress", action="store_false", default=None,
        help="no progress bars (the default when standard error is not a terminal)")
    add(o, "--exact-limit", type=_positive_int, metavar="N",
        help="largest number of unknowns whose operator error is computed exactly, above it "
             f"a sampled estimate (default {EXACT_FRO_LIMIT})")


def _add_keep_going(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--keep-going", action="store_true",
                   help=f"continue the {what} past runs that diverge (recorded as 'diverged' "
                        "in the table and metrics, exit status 0); default: stop there, exit "
                        "status 1")


_FLAG_TO_FIELD = {"global_rank": "global_ranks"}


def config_from_args(args: argparse.Namespace, default_prefix: str):
    """The :class:`~ddops.experiments.compare.ExperimentConfig` of parsed flags.

    Parameters
    ----------
    args : argparse.Namespace
        Flags of ``ddops compare``, ``sweep`` or ``scaling``.
    default_prefix : str
        The output prefix when ``--save-prefix`` is not given.

    Returns
    -------
    ExperimentConfig
        The preset's settings, then the problem's defaults, then every flag given (not
        validated).
    """
    from .compare import PRESETS, ExperimentConfig
    from .grid import DIMENSION, problem_defaults, subdomain_width

    problem = getattr(args, "problem", None) or "poisson1d"
    if getattr(args, "contrast", None) is not None and problem != "diffusion2d":
        raise ValueError(f"contrast: only used with problem='diffusion2d', not with "
                         f"problem={problem!r}")
    c = ExperimentConfig(save_prefix=default_prefix, **PRESETS[args.preset])
    if problem != "poisson1d":  # the grid problem's own defaults; kind is a 1D convention
        c = replace(c, problem=problem, kind="element", global_ranks=None,
                    **problem_defaults(problem))
    names = {f.name for f in fields(ExperimentConfig)}
    updates: dict[str, Any] = {}
    for key, value in vars(args).items():
        key = _FLAG_TO_FIELD.get(key, key)
        if value is None or key not in names:
            continue
        updates[key] = value
    if "global_ranks" in updates:
        updates["global_ranks"] = tuple(r for r in updates["global_ranks"] if r > 0)
    c = replace(c, **updates)
    if getattr(args, "subdomains", None) is None and getattr(args, "n", None) is not None:
        dim = DIMENSION[c.problem]
        c = replace(c, subdomains=max(1, c.n // subdomain_width(c.problem)) ** dim)
    return c


def _stderr_is_terminal() -> bool:
    """Whether standard error is a terminal (progress bars go there): the one rule of the
    commands and of :class:`~ddops.learning.training.TrainingConfig`'s default."""
    from ..learning.training import stderr_is_terminal

    return stderr_is_terminal()


#: What the per-model lines of compare, sweep and scaling say (their help's "output:").
_OUTPUT_LINES = """output: one line per trained model, then every file written (sweep and scaling:
their own by name, their comparisons' as a count per directory); the model lines:
  params   trainable parameters; rank<= the operator's rank bound r
  train    final training loss; val: loss on 256 validation right-hand sides
  fro      ||M - A^-1||_F, the operator error (exact up to --exact-limit unknowns,
           above that an estimate from 64 random probes)
  best     the smallest fro of any operator of rank <= r (Eckart-Young, from the
           eigenvalues of A^-1; '-' where they are unknown)
  time     training seconds"""


def _command(sub: Any, name: str, summary: str, description: str,
             examples: str, output: str = "") -> argparse.ArgumentParser:
    output = f"{output}\n\n" if output else ""
    return sub.add_parser(name, help=summary, description=description, allow_abbrev=False,
                          formatter_class=argparse.RawDescriptionHelpFormatter,
                          epilog=f"examples:\n{examples}\n\n{output}{_EXIT_STATUS}")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for documentation and tests)."""
    from .. import __version__

    parser = _Parser(prog="ddops", description="Sparse operators from overlapping domain "
                     "decomposition: the paper's experiments.", allow_abbrev=False,
                     formatter_class=argparse.RawDescriptionHelpFormatter,
                     epilog="examples:\n  ddops compare\n  ddops compare --help\n\n"
                            + _EXIT_STATUS)
    parser.add_argument("--version", action="version", version=f"ddops {__version__}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser, title="commands")
    p = _command(sub, "compare", "train Schwarz attention and global baselines",
                 "Train the Schwarz attention operator and the global low-rank baselines on "
                 "the same\nstream of right-hand sides; write <prefix>_metrics.json, "
                 "<prefix>_history.csv,\nthe trained operators (<prefix>_<model>.npz) and the "
                 "paper's figures.",
                 "  ddops compare                                     # the paper's main "
                 "setting (about 30 seconds)\n"
                 "  ddops compare --n 64 --steps 200 --no-plots --save-prefix results/small\n"
                 "  ddops compare --checkpoint-every 100 --save-prefix results/run   # then "
                 "add --resume\n"
                 "  ddops compare --problem poisson2d --n 64 --subdomains 16 --coarse gdsw "
                 "--preset improved\n"
                 "  ddops compare --problem diffusion2d --n 32 --subdomains 4 --contrast 1e4 "
                 "--steps 200", _OUTPUT_LINES)
    _add_experiment_flags(p, "results/compare")
    p = _command(sub, "sweep", "learning-rate sweep (Table 1)",
                 "The comparison at every learning rate (Table 1 of the paper); writes "
                 "<prefix>_sweep.md,\n<prefix>_sweep_metrics.json, <prefix>_sweep.png and "
                 "each rate's comparison files\n<prefix>_lr<rate>_*.",
                 "  ddops sweep --save-prefix results/v2\n"
                 "  ddops sweep --lrs 1e-3 1e-2 --n 64 --steps 100 --keep-going",
                 _OUTPUT_LINES)
    _add_experiment_flags(p, "results/sweep", exclude=("--lr",))
    p.add_argument("--lrs", type=_positive_float, nargs="+", metavar="LR",
                   help="learning rates (default: the paper's 1e-4 3e-4 1e-3 3e-3 1e-2 3e-2)")
    _add_keep_going(p, "sweep")
    p = _command(sub, "scaling", "weak scaling with N = n/32 (Table 2)",
                 "Schwarz attention for growing n with N = n/32 subdomains (Table 2 of the "
                 "paper);\nwrites <prefix>_scaling.md, <prefix>_scaling_metrics.json, "
                 "<prefix>_scaling.png and\neach size's comparison files <prefix>_n<n>_*.",
                 "  ddops scaling --save-prefix results/v2\n"
                 "  ddops scaling --ns 64 128 256 --steps 200 --no-plots\n"
                 "  ddops scaling --problem poisson2d --ns 64 128 256 --preset improved   "
                 "# N = 4, 16, 64", _OUTPUT_LINES)
    _add_experiment_flags(p, "results/scaling",
                          exclude=("--n", "--subdomains", "--global-rank"))
    p.add_argument("--ns", type=int_at_least(2), nargs="+", metavar="N",
                   help="problem sizes n, in elements (--kind element) or unknowns (--kind "
                        "dof); N = n/32 subdomains each (default: the paper's 256 512 1024 "
                        "2048 4096 8192); 2D/3D: points per direction, N = (n/width)^d boxes "
                        "(default 64 128 256 in 2D, 16 32 in 3D)")
    p.add_argument("--subdomain-width", type=_positive_int, metavar="POINTS",
                   help="points per direction of a subdomain, fixed over the study (default "
                        "32; 3D: 8)")
    _add_keep_going(p, "study")
    p = _command(sub, "precond", "Krylov iterations with Schwarz preconditioners",
                 "Solve one system with CG (1D also GMRES) and classical Schwarz preconditioners "
                 "(and pyamg\nwhen installed): the 1D Poisson problem with paper-trained and "
                 "learned symmetric\nSchwarz preconditioners (--problem poisson1d, the "
                 "default), or 2D/3D Poisson, high-contrast\ndiffusion and P1 elasticity with "
                 "algebraic decompositions and Nicolaides, GDSW or RGDSW\ncoarse spaces, the "
                 "set-up split into its steps and the peak memory; writes\n"
                 "<prefix>_table.md, <prefix>_results.json and the residual plots.",
                 "  ddops precond --n 1024 --save-prefix results/precond_n1024\n"
                 "  ddops precond --n 256 --no-train --no-plots\n"
                 "  ddops precond --problem poisson2d --n 128 --subdomains 16 --coarse all\n"
                 "  ddops precond --problem elasticity2d --n 64 --null-space translations")
    _add_precond_flags(p)
    return parser


def _add_precond_flags(p: argparse.ArgumentParser) -> None:
    try:
        from .precond import add_arguments
    except ImportError:  # pragma: no cover - the preconditioning experiment is optional
        return
    add_arguments(p)


def _progress(args: argparse.Namespace) -> bool:
    """Progress bars as tqdm users expect: on a terminal only, unless a flag says otherwise."""
    flag = getattr(args, "progress", None)
    return _stderr_is_terminal() if flag is None else bool(flag)


def _flag_words(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Map the settings' names (``batch_size``) to the flags of ``parser`` (``--batch-size``);
    a setting stored under another name (``coarse_basis`` by ``--coarse``) maps to its flag,
    not to an old spelling."""
    out: dict[str, str] = {}
    for action in parser._actions:
        for flag in action.option_strings:
            if flag.startswith("--") and flag not in ("--help", "--version"):
                out[flag[2:].replace("-", "_")] = flag
    for action in parser._actions:
        if action.help != argparse.SUPPRESS and action.nargs != 0 and action.option_strings:
            out[action.dest] = action.option_strings[0]
    if "global_rank" in out:  # the field behind --global-rank
        out["global_ranks"] = out["global_rank"]
    return out


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``parser.parse_args(argv)``; an old spelling of a flag or of a value prints one line
    on stderr that names the new one (a DeprecationWarning)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DeprecationWarning)
        args = parser.parse_args(argv)
    for w in caught:
        if issubclass(w.category, DeprecationWarning):
            print(f"ddops {args.command}: DeprecationWarning: {w.message}", file=sys.stderr)
        else:  # not ours: as it would have been shown
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return args


_QUOTED = re.compile(r"('[^']*'|\"[^\"]*\")")


def _with_flags(message: str, words: dict[str, str]) -> str:
    """Name flags instead of settings: ``n must be`` -> ``--n must be``, ``lr=1`` -> ``--lr=1``.

    Only a setting's name followed by ``=``, ``:``, `` (`` or `` must`` is
    replaced, and nothing inside quotes (file names).
    """
    if not words:
        return message
    names = "|".join(sorted(map(re.escape, words), key=len, reverse=True))
    pattern = re.compile(rf"(?<![\w.-])({names})(?==|:| \(| must)")
    parts = _QUOTED.split(message)
    return "".join(p if i % 2 else pattern.sub(lambda m: words[m.group(1)], p)
                   for i, p in enumerate(parts))


def _diverged_line(diverged: list[tuple[str, dict[str, Any]]], where: str) -> str:
    name, entry = diverged[0]
    more = f" (and {len(diverged) - 1} more)" if len(diverged) > 1 else ""
    message = (entry.get("message") or "").splitlines()
    return (f"training of {name}{where} diverged{more}: {message[0] if message else 'stopped'}")


def _launcher_value(names: tuple[str, ...], default: int) -> int:
    """An integer an MPI launcher announces in the environment (read before mpi4py is
    imported): the first of ``names`` set (MPICH's, then Open MPI's), else ``default``."""
    for name in names:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return default


def _mpi_ranks() -> int:
    """Ranks announced by an MPI launcher (1 outside one)."""
    return max(_launcher_value(("PMI_SIZE", "OMPI_COMM_WORLD_SIZE"), 1), 1)


def _distributed(name: str) -> Any:
    """``ddops.distributed.<name>``, or one line naming the ``mpi`` extra when mpi4py is missing."""
    import importlib

    try:
        return importlib.import_module(f"ddops.distributed.{name}")
    except ImportError as exc:
        raise ValueError(str(exc).splitlines()[0]) from None


def _run(args: argparse.Namespace) -> int:
    from . import compare as experiments

    ranks = _mpi_ranks()
    if ranks > 1 and args.command in ("sweep", "scaling"):
        # every rank would run the whole sweep and write the same files
        raise ValueError(f"ddops {args.command} runs in one process; under mpiexec "
                         f"({ranks} ranks) use 'ddops compare' or 'ddops precond'")
    if args.command == "compare":
        c = replace(config_from_args(args, "results/compare"), progress=_progress(args))
        _check_run_size("compare", [c.validated()], ranks)
        _warn_overwrite(c)
        written: list[str] = []
        if ranks > 1:  # mpiexec -n P ddops compare: data-parallel training, rank 0 writes
            metrics = _distributed("training").run_compare(c, written=written)
        else:
            metrics = experiments.run_compare(c, written=written)
        for path in written:
            print(f"wrote {path}")
        diverged = [(k, e) for k, e in metrics.items() if e.get("status") == "diverged"]
        if diverged:
            raise _Diverged(_diverged_line(diverged, "") + f"; see {c.save_prefix}_metrics.json")
    elif args.command in ("sweep", "scaling"):
        sweep = args.command == "sweep"
        c = replace(config_from_args(args, f"results/{args.command}"),
                    progress=_progress(args))
        if sweep:
            parts = experiments.sweep_configs(c, tuple(args.lrs) if args.lrs
                                              else experiments.SWEEP_LRS)
        else:
            parts = experiments.scaling_configs(c, tuple(args.ns) if args.ns else None,
                                                args.subdomain_width)
        _check_run_size(args.command, parts, ranks)
        written = []
        if sweep:
            rows = experiments.run_sweep(c, tuple(args.lrs) if args.lrs
                                         else experiments.SWEEP_LRS, keep_going=args.keep_going,
                                         written=written)
        else:
            rows = experiments.run_scaling(c, tuple(args.ns) if args.ns else None,
                                           keep_going=args.keep_going,
                                           width=args.subdomain_width, written=written)
        table = f"{c.save_prefix}_{args.command}.md"
        _print_study_files(c.save_prefix, args.command, written)
        diverged = [(r.get("model", "schwarz"), r) for r in rows if r.get("status") == "diverged"]
        if diverged:
            r = diverged[0][1]
            where = f" at lr={r['lr']:g}" if sweep else f" at n={r['n']}"
            line = _diverged_line(diverged, where)
            if not args.keep_going:
                raise _Diverged(f"{line}; stopped there (--keep-going continues), see {table}")
            print(f"{len(diverged)} diverged run(s), marked in {table}: {line}")
    elif ranks > 1:  # mpiexec -n P ddops precond: the distributed preconditioners
        args.progress = _progress(args)
        _distributed("cli").run_precond(args)
    else:
        args.progress = _progress(args)
        from .precond import run_from_args

        payload = run_from_args(args)
        bad = [r for r in payload["rows"] if r.get("status", "ok") != "ok"]
        if bad:  # the table and the JSON file are written; the status says some rows are not
            more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
            raise _RowsFailed(f"{bad[0]['label']}: {bad[0]['status']}{more}: "
                              f"{bad[0]['failed']}; see {payload['files']['results']}")
    return 0


def _mpi_rank() -> int:
    """This process's rank as announced by an MPI launcher (0 outside one)."""
    return _launcher_value(("PMI_RANK", "OMPI_COMM_WORLD_RANK"), 0)


def _duration(seconds: float) -> str:
    if seconds >= 5400:
        return f"{seconds / 3600:.1f} hours"
    return f"{seconds / 60:.0f} minutes"


def _check_run_size(command: str, configs: list[Any], ranks: int) -> None:
    """Refuse subdomains of a few unknowns; warn in one line before a run of hours.

    Both are judged from the settings alone, before anything is built
    (:func:`~ddops.experiments.compare.estimate_cost`); the warning compares the
    estimate with the documented run times (the default comparison takes about 30
    seconds, the longest documented command about 20 minutes) and lets the run go on.
    """
    from .compare import (
        LONG_RUN_SECONDS,
        MIN_SUBDOMAIN_UNKNOWNS,
        estimate_cost,
        num_unknowns,
        unknowns_per_subdomain,
    )

    least = MIN_SUBDOMAIN_UNKNOWNS
    for c in configs:
        per = unknowns_per_subdomain(c)
        if per >= least:
            continue
        u = num_unknowns(c)
        if command == "scaling":
            raise ValueError(f"ns={c.n}: N = {c.subdomains} subdomains leave {per:.1f} unknowns "
                             f"each (of {u}); at least {least} per subdomain are needed, so a "
                             f"larger --subdomain-width")
        raise ValueError(f"subdomains={c.subdomains} leaves {per:.1f} unknowns per subdomain "
                         f"(of the {u} unknowns of n={c.n}); at least {least} per subdomain are "
                         f"needed, so at most {u // least} subdomains")
    costs = [estimate_cost(c) for c in configs]
    seconds = sum(e["seconds"] for e in costs) / ranks
    if seconds <= LONG_RUN_SECONDS or _mpi_rank() != 0:
        return
    step = max(e["step_seconds"] for e in costs) / ranks
    models = len(costs[0]["params"])
    what = (f"{configs[0].steps} steps of {models} model{'s' * (models > 1)}, about "
            f"{step:.2g} s per step" if len(configs) == 1 else
            f"{len(configs)} comparisons of {configs[0].steps} steps, up to {step:.2g} s per "
            f"step")
    print(f"ddops {command}: warning: estimated {_duration(seconds)} of training on two cores "
          f"({what}), far above the documented run times (the default comparison: about 30 "
          f"seconds, the longest documented command: about 20 minutes); fewer --steps or a "
          f"smaller problem shorten it", file=sys.stderr)


def _warn_overwrite(c: Any) -> None:
    """One line on stderr, before training, when the prefix holds an earlier comparison's
    files that this run replaces (``--resume`` continues that run instead).

    A warning rather than a refusal: re-running a command into its default prefix is
    the common case, and scripts that do it keep working; the line says how to keep
    the old results before any of them is replaced.
    """
    from .compare import earlier_outputs

    if c.resume or _mpi_rank() != 0:
        return
    old = earlier_outputs(c)
    if old:
        more = f" and {len(old) - 1} more" if len(old) > 1 else ""
        print(f"ddops compare: warning: --save-prefix {c.save_prefix} holds the results of "
              f"an earlier run ({old[0]}{more}); this run replaces them (another "
              f"--save-prefix keeps them, --resume continues that run)", file=sys.stderr)


def _print_study_files(prefix: str, command: str, written: list[str]) -> None:
    """The files of a sweep or scaling study: its own by name, its comparisons' by count."""
    own = [p for p in written if p.startswith(f"{prefix}_{command}")]
    for path in own:
        print(f"wrote {path}")
    parts = [p for p in written if p not in own]
    if parts:
        where = os.path.dirname(prefix) or "."
        each = "_lr<rate>_*" if command == "sweep" else "_n<n>_*"
        print(f"wrote {len(parts)} files of the comparisons in {where}/ "
              f"({os.path.basename(prefix)}{each})")


class _Diverged(Exception):
    pass


class _RowsFailed(Exception):
    pass


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ddops`` console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser()
        if not argv:
            parser.print_help()
            return 0
        if argv[0] not in COMMANDS and argv[0] not in ("-h", "--help", "--version"):
            raise _UsageError(f"ddops: error: the first argument must be a command "
                              f"({', '.join(COMMANDS)}), got {argv[0]!r}; for example "
                              f"'ddops compare {argv[0]} ...'")
        args = _parse(parser, argv)
        words = _flag_words(parser._subparsers._group_actions[0].choices[args.command])
        from ..learning.training import ChangedSettingsError

        try:
            return _run(args)
        except (ValueError, TypeError) as exc:
            text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if isinstance(exc, ChangedSettingsError):  # the flag, not the Python argument
                text = (f"{exc.differences}; --allow-changed-settings continues anyway and "
                        "records the changes")
            raise _UsageError(f"ddops {args.command}: error: {_with_flags(text, words)}") from exc
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else 0
    except _UsageError as exc:
        print(str(exc).splitlines()[0], file=sys.stderr)
        return EXIT_USAGE
    except _Diverged as exc:
        print(f"ddops: {exc}", file=sys.stderr)
        return EXIT_DIVERGED
    except _RowsFailed as exc:
        print(f"ddops precond: {str(exc).splitlines()[0]}", file=sys.stderr)
        return EXIT_ROWS
    except KeyboardInterrupt:
        print("ddops: interrupted", file=sys.stderr)
        return 130
    except OSError as exc:
        from .compare import OutputError

        if not isinstance(exc, OutputError):
            raise
        print(f"ddops: error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return EXIT_OUTPUT


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
