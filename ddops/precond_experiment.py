"""``ddops precond``: Krylov iterations with classical and learned Schwarz preconditioners.

For the 1D Poisson matrix with ``n`` elements, ``N = n / 32`` subdomains and an
overlap of 2, one random right-hand side ``b`` is solved to ``rtol`` with

* CG and no preconditioner, Jacobi, one-level and two-level additive Schwarz;
* GMRES and two-level restricted additive Schwarz (RAS);
* GMRES and Schwarz attention trained as in the paper (operator regression on
  32 Fourier modes, weighted MSE, ``lr = 1e-3``);
* CG and the learned symmetric Schwarz preconditioner
  (:mod:`ddops.learned_preconditioner`) from a random initialisation and from
  two-level Schwarz, trained with the iteration safeguard;
* CG and pyamg's smoothed aggregation, when pyamg is installed.

It prints and writes ``<prefix>_table.md``, ``<prefix>_results.json``, a
residual-history plot ``<prefix>_residuals.png`` and, when some methods need
many more iterations than others, ``<prefix>_residuals_zoom.png`` with the
fast ones only.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from ._argtypes import int_at_least, positive_float
from ._validation import check_choice, check_int, check_positive_float
from .decomposition import Decomposition1D
from .io import atomic_write_json, atomic_write_text
from .learned_preconditioner import (
    BASES,
    OBJECTIVES,
    PreconditionerTraining,
    learned_schwarz_preconditioner,
    train_preconditioner,
)
from .preconditioners import TwoLevelSchwarz, jacobi, solve_with_history
from .problem import KINDS, poisson_1d
from .training import Trainer, TrainingConfig

__all__ = ["PrecondConfig", "METHODS", "add_arguments", "run_from_args", "run_precond"]

#: Method keys in table order: ``key -> (Krylov method, label)``.
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


#: The names a run appends to its prefix.
_OUTPUTS = ("_table.md", "_results.json", "_residuals.png", "_residuals_zoom.png")

#: Resolution of the residual plots.
PLOT_DPI = 100

#: The zoomed plot ``<prefix>_residuals_zoom.png`` shows the methods that stop
#: within this many iterations.
ZOOM_ITERATIONS = 100


@dataclass
class PrecondConfig:
    """Settings of :func:`run_precond` (the defaults of ``ddops precond``).

    Attributes
    ----------
    n : int
        Line elements (``kind="element"``) or unknowns (``"dof"``).
    subdomains : int, optional
        ``N``; default ``max(2, n // 32)`` (the two-level methods need an interface).
    overlap : int
        Overlap of the decomposition.
    kind : {"element", "dof"}
        Discretisation convention.
    local_rank, coarse_rank : int
        Ranks of the learned operators (``coarse_rank=None``: ``n0 = N - 1``).
    rtol : float
        Relative residual tolerance of every solve.
    maxiter : int, optional
        Iteration cap of every solve (default ``2 n``; GMRES counts inner iterations).
    restart : int
        GMRES restart length.
    train_steps : int
        Training steps of each learned symmetric preconditioner.
    lr : float
        Their learning rate, relative to
        :func:`~ddops.learned_preconditioner.parameter_scale`.
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
        Seed of the right-hand sides and of the model initialisations.
    blas_threads : int or None
        BLAS threads for the whole run (``None``: the library's setting); the
        products are small, and on a few shared cores one thread is fastest
        (see :class:`~ddops.training.TrainingConfig`).
    save_prefix : str
        Prefix of the output files.
    plots : bool
        Write the residual-history plot.
    progress : bool
        Show progress bars while training.
    """

    n: int = 1024
    subdomains: int | None = None
    overlap: int = 2
    kind: str = "element"
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
        c.n = check_int("n", c.n, minimum=2)
        if c.subdomains is None:
            c.subdomains = max(2, c.n // 32)
        c.subdomains = check_int("subdomains", c.subdomains, minimum=1)
        if c.subdomains < 2:
            raise ValueError(f"subdomains must be >= 2 (the two-level methods need an "
                             f"interface), got {c.subdomains}")
        c.overlap = check_int("overlap", c.overlap, minimum=0)
        check_choice("kind", c.kind, KINDS)
        c.local_rank = check_int("local_rank", c.local_rank, minimum=1)
        if c.coarse_rank is not None:
            c.coarse_rank = check_int("coarse_rank", c.coarse_rank, minimum=1)
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
        if not isinstance(c.save_prefix, str):
            raise TypeError(f"save_prefix must be a string, got {type(c.save_prefix).__name__}")
        if not c.save_prefix:
            raise ValueError("save_prefix must not be empty")
        _paper_config(c)  # the paper model's constraints (size, decomposition), before any work
        return c


# -- command line ------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the flags of ``ddops precond`` to ``parser``."""
    d = PrecondConfig()
    pos, nonneg = int_at_least(1), int_at_least(0)
    g = parser.add_argument_group("problem")
    g.add_argument("--n", type=int_at_least(2), default=d.n, metavar="N_ELEMENTS",
                   help="problem size: line elements (--kind element, n - 1 unknowns) or "
                        "unknowns (--kind dof); default %(default)s")
    g.add_argument("--subdomains", type=pos,
                   help="number of subdomains N (default n/32, at least 2)")
    g.add_argument("--overlap", type=nonneg, default=d.overlap,
                   help="overlap added on each side of a subdomain, in elements (--kind "
                        "element) or unknowns (--kind dof); default %(default)s")
    g.add_argument("--kind", choices=KINDS, default=d.kind,
                   help="discretisation convention; default %(default)s")
    g.add_argument("--seed", type=nonneg, default=d.seed,
                   help="seed of the right-hand sides and initialisations; default %(default)s")
    g.add_argument("--blas-threads", type=nonneg, default=d.blas_threads,
                   help="BLAS threads; 0 leaves the library's setting; default %(default)s")
    s = parser.add_argument_group("solvers")
    s.add_argument("--rtol", type=positive_float, default=d.rtol,
                   help="relative residual tolerance of every solve, below 1; "
                        "default %(default)g")
    s.add_argument("--maxiter", type=pos,
                   help="iteration cap of every solve (GMRES: inner iterations); default 2 "
                        "times the number of unknowns")
    s.add_argument("--restart", type=pos, default=d.restart,
                   help="GMRES restart length in iterations; default %(default)s")
    t = parser.add_argument_group("learned preconditioners")
    t.add_argument("--local-rank", type=pos, default=d.local_rank,
                   help="local rank of the learned operators; default %(default)s")
    t.add_argument("--coarse-rank", type=pos,
                   help="coarse rank of the learned operators (default n0 = N - 1)")
    t.add_argument("--train-steps", type=nonneg, default=d.train_steps,
                   help="training steps of each learned symmetric preconditioner; "
                        "default %(default)s")
    t.add_argument("--lr", type=positive_float, default=d.lr,
                   help="their learning rate, relative to mean(diag A)^-1/2; "
                        "default %(default)s")
    t.add_argument("--batch-size", type=pos, default=d.batch_size,
                   help="their right-hand sides per step; default %(default)s")
    t.add_argument("--check-every", type=pos, default=d.check_every,
                   help="steps between two CG safeguard checks; default %(default)s")
    t.add_argument("--objective", choices=OBJECTIVES, default=d.objective,
                   help="training objective: error in the A-norm (energy) or Euclidean (mse); "
                        "default %(default)s")
    t.add_argument("--learned-base", choices=("one_level", "jacobi", "identity"),
                   default=d.learned_base,
                   help="fixed SPD term of the learned preconditioners; default %(default)s")
    t.add_argument("--paper-steps", type=nonneg, default=d.paper_steps,
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
    o.add_argument("--no-progress", dest="progress", action="store_false",
                   help="no progress bars (default: show them)")


def run_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """Run ``ddops precond`` from parsed arguments (see :func:`add_arguments`)."""
    c = PrecondConfig(
        n=args.n, subdomains=args.subdomains, overlap=args.overlap, kind=args.kind,
        local_rank=args.local_rank, coarse_rank=args.coarse_rank, rtol=args.rtol,
        maxiter=args.maxiter, restart=args.restart,
        train_steps=args.train_steps if args.train else 0, lr=args.lr,
        batch_size=args.batch_size, check_every=args.check_every, objective=args.objective,
        learned_base=args.learned_base, paper_steps=args.paper_steps if args.train else 0,
        seed=args.seed, blas_threads=args.blas_threads or None,
        save_prefix=args.save_prefix, plots=args.plots, progress=args.progress)
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


def _paper_config(c: PrecondConfig) -> Any:
    """The validated experiment settings of the paper-trained Schwarz attention."""
    from .experiments import ExperimentConfig

    return ExperimentConfig(n=c.n, subdomains=c.subdomains, overlap=c.overlap, kind=c.kind,
                            local_rank=c.local_rank, coarse_rank=c.coarse_rank, global_ranks=(),
                            steps=max(1, c.paper_steps), lr=1e-3, loss="wmse", seed=c.seed,
                            progress=c.progress, save_prefix=c.save_prefix).validated()


def _paper_model(c: PrecondConfig) -> tuple[Any, float, dict[str, Any]]:
    """Schwarz attention trained as in the paper; returns (operator, seconds, info)."""
    from .experiments import build_models, build_problem

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
        per method, with iterations, convergence, timings and training
        details), ``residual_histories`` and ``files``.
    """
    from .experiments import check_output_prefix

    c = config.validated()
    check_output_prefix(c.save_prefix, _OUTPUTS)
    limits = (threadpool_limits(limits=c.blas_threads, user_api="blas")
              if c.blas_threads is not None else contextlib.nullcontext())
    with limits:
        return _run(c, log)


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

    builders: dict[str, Callable[[], tuple[Any, float, dict[str, Any]]]] = {
        "none": classical(lambda: None),
        "jacobi": classical(lambda: jacobi(A)),
        "one_level": classical(lambda: TwoLevelSchwarz(A, d, coarse=False)),
        "two_level": classical(lambda: TwoLevelSchwarz(A, d)),
        "ras": classical(lambda: TwoLevelSchwarz(A, d, variant="restricted")),
        "paper": lambda: _paper_model(c),
        "learned_random": learned("scaled"),
        "learned_two_level": learned("classical"),
    }
    try:
        import pyamg
    except ImportError:
        pyamg = None
    if pyamg is not None:
        builders["pyamg"] = classical(
            lambda: pyamg.smoothed_aggregation_solver(A).aspreconditioner())

    rows: list[dict[str, Any]] = []
    histories: dict[str, list[float]] = {}
    for key, build in builders.items():
        krylov, label = METHODS[key]
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
               "num_params": getattr(M, "num_params", None) if key in (
                   "paper", "learned_random", "learned_two_level") else None,
               "training": info or None}
        rows.append(row)
        log(f"{label:>36} ({krylov}): {_format_iterations(row):>22} iterations, set-up "
            f"{setup:.3f} s, training {train_seconds:.1f} s, solve {row['solve_seconds']:.3f} s")

    prefix = c.save_prefix
    title = (f"n = {c.n} ({c.kind}, {n} unknowns), N = {c.subdomains}, overlap {c.overlap}, "
             f"rtol {c.rtol:g}, cap {cap} iterations")
    table = _markdown(rows, title)
    files = {"table": prefix + "_table.md", "results": prefix + "_results.json"}
    payload = {
        "config": asdict(c), "unknowns": n, "iteration_cap": cap,
        "pyamg": getattr(pyamg, "__version__", "installed") if pyamg is not None else None,
        "machine": {"python": platform.python_version(), "processor": platform.machine(),
                    "numpy": np.__version__},
        "rows": rows, "residual_histories": histories, "files": files,
    }

    def write(prefix: str) -> None:
        payload["total_seconds"] = time.perf_counter() - t_start
        atomic_write_text(prefix + "_table.md", table)
        atomic_write_json(prefix + "_results.json", payload, indent=1)

    try:  # the results first: a failing plot must not cost them
        write(prefix)
        if c.plots:
            from .plotting import plot_residual_histories

            short = f"n = {c.n}, N = {c.subdomains}, overlap {c.overlap}"
            converged = {r["label"]: r["converged"] for r in rows}  # others are marked
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
        from .experiments import _rescue

        raise _rescue(prefix, exc, write) from exc
    log("")
    log(table)
    for path in files.values():
        log(f"wrote {path}")
    return payload

