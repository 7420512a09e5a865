"""The ``ddops`` command line: the paper's experiments.

``ddops compare`` (also plain ``ddops`` and ``python -m ddops``) trains Schwarz
attention and global low-rank baselines with the flags of the paper's
``compare_global_vs_schwarz.py``; ``ddops sweep`` and ``ddops scaling``
reproduce Tables 1 and 2.  Invalid input prints one line and exits with
status 2; no traceback.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields, replace
from typing import Any

from ._argtypes import int_at_least, positive_float

__all__ = ["main", "build_parser"]

COMMANDS = ("compare", "sweep", "scaling", "precond")


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise _UsageError(f"{self.prog}: error: {message}")


class _UsageError(Exception):
    pass


_positive_int = int_at_least(1)
_nonnegative_int = int_at_least(0)
_positive_float = positive_float


def _add_experiment_flags(p: argparse.ArgumentParser) -> None:
    from .data import RHS_MODES
    from .experiments import REGRESSION_LOSSES
    from .operators import INITS, PARTITIONS

    g = p.add_argument_group("problem and models (defaults: the paper's v2 main setting)")
    g.add_argument("--preset", choices=("v2", "v1"), default="v2",
                   help="paper version whose defaults to start from (default v2)")
    g.add_argument("--n", type=_positive_int, help="line elements (element) or unknowns (dof)")
    g.add_argument("--subdomains", type=_positive_int,
                   help="number of subdomains N (default 8; n/32 when only --n is given)")
    g.add_argument("--overlap", type=_nonnegative_int, help="overlap (default 2)")
    g.add_argument("--kind", choices=("element", "dof"), help="discretisation convention")
    g.add_argument("--local-rank", type=_positive_int, help="local rank r_l (default 4)")
    g.add_argument("--coarse-rank", type=_positive_int,
                   help="coarse rank r0 (default n0 = N-1; larger values are truncated)")
    g.add_argument("--global-rank", type=_nonnegative_int, nargs="+",
                   help="ranks of the global baselines (default 39 5; 0 for none)")
    g.add_argument("--coarse-basis", choices=("interface_hats", "pou", "grid_hats"))
    g.add_argument("--partition", choices=tuple(PARTITIONS),
                   help="placement of the partition-of-unity weight (default symmetric)")
    g.add_argument("--init", choices=INITS, help="initialisation (v2 scaled, v1 naive)")
    g.add_argument("--dtype", choices=("float64", "float32"))
    t = p.add_argument_group("training")
    t.add_argument("--rhs-mode", choices=RHS_MODES)
    t.add_argument("--loss", choices=REGRESSION_LOSSES)
    t.add_argument("--steps", type=_nonnegative_int, help="optimisation steps (default 2000)")
    t.add_argument("--lr", type=_positive_float, help="learning rate (default 1e-3)")
    t.add_argument("--batch-size", type=_positive_int, help="batch size (default 256)")
    t.add_argument("--workers", type=_positive_int,
                   help="threads sharing each step on column blocks of the batch (default 1; "
                        "faster for n >= 1024 when cores are free)")
    t.add_argument("--optimizer", choices=("adamw", "adam"))
    t.add_argument("--scheduler", action=argparse.BooleanOptionalAction, default=None,
                   help="ReduceLROnPlateau on the training loss (v2 default: on; v1: off)")
    t.add_argument("--seed", type=_nonnegative_int, help="model initialisation seed (0)")
    t.add_argument("--train-seed", type=_nonnegative_int, help="training stream seed (4711)")
    t.add_argument("--test-seed", type=_nonnegative_int, help="validation/evaluation seed (4712)")
    t.add_argument("--checkpoint-every", type=_nonnegative_int,
                   help="write a checkpoint every k steps (default 0: none)")
    t.add_argument("--resume", action="store_true", default=None,
                   help="continue from existing checkpoints of the same prefix")
    o = p.add_argument_group("output")
    o.add_argument("--save-prefix", help="prefix of every output file")
    o.add_argument("--no-plots", dest="plots", action="store_false", default=None)
    o.add_argument("--no-progress", dest="progress", action="store_false", default=None)
    o.add_argument("--exact-limit", type=_positive_int,
                   help="largest n whose operator error is computed exactly (default 16384)")


_FLAG_TO_FIELD = {"global_rank": "global_ranks"}


def _config_from_args(args: argparse.Namespace, default_prefix: str):
    from .experiments import PRESETS, ExperimentConfig

    c = ExperimentConfig(save_prefix=default_prefix, **PRESETS[args.preset])
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
    if args.subdomains is None and args.n is not None:
        c = replace(c, subdomains=max(1, c.n // 32))
    return c


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for documentation and tests)."""
    parser = _Parser(prog="ddops", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    p = sub.add_parser("compare", help="train Schwarz attention and global baselines")
    _add_experiment_flags(p)
    p = sub.add_parser("sweep", help="learning-rate sweep (Table 1)")
    _add_experiment_flags(p)
    p.add_argument("--lrs", type=_positive_float, nargs="+", help="learning rates")
    p = sub.add_parser("scaling", help="weak scaling with N = n/32 (Table 2)")
    _add_experiment_flags(p)
    p.add_argument("--ns", type=_positive_int, nargs="+", help="problem sizes")
    p = sub.add_parser("precond", help="Krylov iterations with Schwarz preconditioners")
    _add_precond_flags(p)
    return parser


def _add_precond_flags(p: argparse.ArgumentParser) -> None:
    try:
        from .precond_experiment import add_arguments
    except ImportError:  # pragma: no cover - the preconditioning experiment is optional
        return
    add_arguments(p)


def _run(args: argparse.Namespace) -> int:
    from . import experiments

    if args.command == "compare":
        c = _config_from_args(args, "results/compare")
        experiments.run_compare(c)
        print(f"wrote {c.save_prefix}_metrics.json")
    elif args.command == "sweep":
        c = _config_from_args(args, "results/sweep")
        experiments.run_sweep(c, tuple(args.lrs) if args.lrs else experiments.SWEEP_LRS)
        print(f"wrote {c.save_prefix}_sweep.md")
    elif args.command == "scaling":
        c = _config_from_args(args, "results/scaling")
        experiments.run_scaling(c, tuple(args.ns) if args.ns else experiments.SCALING_NS)
        print(f"wrote {c.save_prefix}_scaling.md")
    else:
        from .precond_experiment import run_from_args

        run_from_args(args)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ddops`` console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv.insert(0, "compare")
    try:
        args = build_parser().parse_args(argv)
        return _run(args)
    except _UsageError as exc:
        print(str(exc).splitlines()[0], file=sys.stderr)
        return 2
    except (ValueError, TypeError) as exc:
        print(f"ddops: error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("ddops: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
