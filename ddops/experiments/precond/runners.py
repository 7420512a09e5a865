"""The rows of ``ddops precond``: build each preconditioner, solve, time, measure.

:func:`run_precond` validates the settings, checks the output location and runs
the 1D experiment (classical, restricted, paper-trained and learned Schwarz rows,
each solved twice) or the rows of the 2D/3D problems and ``--matrix``: each row's
set-up split into partition, overlap, local factorisation, coarse space and coarse
factorisation, its CG solve and its peak memory (:data:`MEMORY_METHOD`).  A row
whose set-up refuses the matrix (a ValueError) is reported as refused, a pyamg row
(or the dense deflation ceiling) that fails as failed, each with its reason, and
the other rows still run.  The table, JSON file and plots are written by
:mod:`ddops.experiments.precond.report`.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import sys
import tempfile
import time
import tracemalloc
import warnings
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import Any

import numpy as np

from ...dd.decomposition import Decomposition1D
from ...learning.training import Trainer, TrainingConfig
from ...linalg.local_solvers import thread_limit
from ...precond.learned import (
    PreconditionerTraining,
    learned_schwarz_preconditioner,
    train_preconditioner,
)
from ...precond.options import SchwarzOptions, coarse_options_from_dict
from ...precond.schwarz import (
    SingularMatrixError,
    TwoLevelSchwarz,
    jacobi,
    solve_with_history,
)
from ...problems.poisson1d import poisson_1d
from .config import (
    ADAPTIVE_COARSE_SPACES,
    DEFAULT_THRESHOLDS,
    PrecondConfig,
    coarse_list,
    paper_config,
)
from .matrix_files import KERNEL_HINT, block_structure
from .problem_registry import GRID_ASPECT, box_grid, build_problem, decompose
from .report import (
    OUTPUT_SUFFIXES,
    format_iterations,
    machine_info,
    markdown_table,
    markdown_table_nd,
    write_outputs,
)

__all__ = ["METHODS", "UNTRAINED_PAPER_LABEL", "ND_METHODS", "COARSE_LABELS", "MEMORY_METHOD",
           "SUPERLU_BYTES_PER_NONZERO", "run_precond"]

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

#: Names of the coarse spaces in the row labels.
COARSE_LABELS = {"interface_hats": "interface hats", "nicolaides": "Nicolaides",
                  "gdsw": "GDSW", "rgdsw": "RGDSW", "agdsw": "AGDSW", "geneo": "GenEO",
                  "learned": "GDSW + learned", "deflation": "GDSW + exact deflation"}

#: Longest failure reason of a pyamg row, in characters.
_REASON_CHARS = 160

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
    from ..compare import check_output_prefix

    c = config.validated()
    check_output_prefix(c.save_prefix, OUTPUT_SUFFIXES)
    # thread_limit, not a BLAS-only threadpool_limits: it also covers PARDISO's MKL threads
    with thread_limit(c.blas_threads):
        if c.problem == "poisson1d":
            return _run_1d(c, log)
        return _run_nd(c, config, log)


def _solve(A: Any, b: np.ndarray, M: Any, method: str, c: PrecondConfig,
           cap: int) -> dict[str, Any]:
    from threadpoolctl import threadpool_limits

    start, cpu = time.perf_counter(), time.process_time()
    # the Krylov solve on one BLAS thread (its vector operations and the applications):
    # threaded, the BLAS threads spin between calls and take the cores that the local
    # solver's groups need (3D Poisson, GDSW in two groups: 0.84 s against 0.53 s); the
    # dense local solver's products then run on one thread too
    with threadpool_limits(limits=1, user_api="blas"):
        if method == "cg":
            _, info, history, its = solve_with_history(A, b, M, "cg", rtol=c.rtol,
                                                       maxiter=cap)
        else:
            cycles = max(1, math.ceil(cap / c.restart))
            _, info, history, its = solve_with_history(A, b, M, "gmres", rtol=c.rtol,
                                                       maxiter=cycles, restart=c.restart)
    return {"iterations": its, "converged": info == 0, "final_residual": float(history[-1]),
            "solve_seconds": time.perf_counter() - start,
            "solve_cpu_seconds": time.process_time() - cpu, "history": history}


def _paper_label(c: PrecondConfig) -> str:
    """The paper row's label: trained as in the paper, or untrained (``--no-train``)."""
    return METHODS["paper"][1] if c.paper_steps else UNTRAINED_PAPER_LABEL


def _paper_model(c: PrecondConfig) -> tuple[Any, float, dict[str, Any]]:
    """Schwarz attention trained as in the paper; returns (operator, seconds, info)."""
    from .. import compare  # its build_problem, not the 2D/3D one of this package

    ec = paper_config(c)
    prob = compare.build_problem(ec)
    op = compare.build_models(ec, prob.decomposition)["schwarz"]
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


def _coarse_options(c: PrecondConfig, coarse: str) -> dict[str, Any]:
    """``coarse_options`` of :class:`TwoLevelSchwarz` for ``coarse`` (empty: the defaults)."""
    options: dict[str, Any] = {}
    if coarse in ADAPTIVE_COARSE_SPACES and c.threshold is not None:
        options["threshold"] = c.threshold
    if coarse == "agdsw" and c.max_per_component is not None:
        options["max_per_component"] = c.max_per_component
    if coarse in ("agdsw", "geneo") and c.skip_contrast is not None:
        options["skip_contrast"] = c.skip_contrast
    if coarse == "geneo" and c.max_per_subdomain is not None:
        options["max_per_subdomain"] = c.max_per_subdomain
    if coarse == "geneo" and c.oversampling is not None:
        options["oversampling"] = c.oversampling
    if coarse == "geneo" and c.eigen_stop is not None:
        options["eigen_stop"] = c.eigen_stop
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
    names = coarse_list(c)
    out = []
    for name in names:
        key = base if len(names) == 1 else f"{base}_{name}"
        suffix = "" if name == "interface_hats" else f", {COARSE_LABELS[name]}"
        out.append((key, label + suffix, name))
    return out


def _pyamg() -> Any:
    try:
        import pyamg
    except ImportError:
        return None
    return pyamg


def _run_1d(c: PrecondConfig, log: Callable[[str], Any]) -> dict[str, Any]:
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
        return lambda: TwoLevelSchwarz(A, d, options=SchwarzOptions(
            coarse=coarse, variant=variant, factor_dtype=np.dtype(c.factor_dtype).name,
            local_solver=c.local_solver,
            **coarse_options_from_dict(coarse, _coarse_options(c, coarse))))

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
        log(f"{label:>36} ({krylov}): {format_iterations(row):>22} iterations, set-up "
            f"{setup:.3f} s, training {train_seconds:.1f} s, solve {row['solve_seconds']:.3f} s")

    title = (f"n = {c.n} ({c.kind}, {n} unknowns), N = {c.subdomains}, overlap {c.overlap}, "
             f"rtol {c.rtol:g}, cap {cap} iterations"
             + ("; float32 local factors" if c.factor_dtype == "float32" else ""))
    payload = {
        "config": asdict(c), "unknowns": n, "iteration_cap": cap,
        "pyamg": getattr(pyamg, "__version__", "installed") if pyamg is not None else None,
        "machine": machine_info(), "rows": rows, "residual_histories": histories,
    }
    short = f"n = {c.n}, N = {c.subdomains}, overlap {c.overlap}"
    return write_outputs(c, payload, markdown_table(rows, title), short, t_start, log)


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
    prob = build_problem(c)
    A, Z, K = prob.A, prob.null_space, prob.kernel
    n = A.shape[0]
    cap = 2 * n if c.maxiter is None else c.maxiter
    b = (np.random.default_rng(c.seed).standard_normal(n) if prob.rhs is None
         else prob.rhs.copy())
    if K is not None:  # consistent: the right-hand side without its kernel components
        from ...dd.kernel import check_kernel, remove_kernel

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
            d, t_part, t_overlap = decompose(c, prob)
            t_outside = 0.0  # coarse-space work done before TwoLevelSchwarz (Neumann, learned)
            extra: dict[str, Any] = {}
            if coarse is None:
                M = TwoLevelSchwarz(A, d, coarse=False, factor_dtype=c.factor_dtype,
                                    local_solver=c.local_solver, kernel=K)
            elif coarse in ("learned", "deflation"):
                from ...precond.learned_coarse import deflation_basis, learned_coarse_basis

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
                M = TwoLevelSchwarz(A, d, coarse_basis=Phi, null_space=Z, variant=c.variant,
                                    factor_dtype=c.factor_dtype, local_solver=c.local_solver,
                                    kernel=K)
            else:
                options = _coarse_options(c, coarse)
                if coarse in ("agdsw", "geneo"):
                    extra["neumann"] = "algebraic"
                    # the finite-element ones of d's subdomains (AGDSW's need the closure of
                    # every part inside its subdomain: overlap >= 1)
                    if prob.neumann is not None and (coarse == "geneo" or c.overlap >= 1):
                        start = time.perf_counter()
                        options["neumann"] = prob.neumann(d)
                        t_outside = time.perf_counter() - start
                        extra.update(neumann="finite element", neumann_seconds=t_outside)
                M = TwoLevelSchwarz(A, d, options=SchwarzOptions(
                    coarse=coarse, null_space=Z, variant=c.variant,
                    factor_dtype=np.dtype(c.factor_dtype).name,
                    local_solver=c.local_solver, kernel=K,
                    **coarse_options_from_dict(coarse, options)))
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
                    "phases": M.stats["phases"],
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
                 for key, label, coarse in _two_level_rows(
                     c, "two_level",
                     ND_METHODS["two_level"][1].replace("additive", c.variant))]
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
            start, cpu = time.perf_counter(), time.process_time()
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
                setup_cpu = time.process_time() - cpu
                if failed is None:
                    try:
                        result = _solve(A, b, M, "cg", c, cap)
                    except Exception as exc:
                        if not tolerant:
                            raise
                        status, failed = "failed", _reason(exc, "solve")
                if failed is not None:
                    result = {"iterations": 0, "converged": False, "final_residual": None,
                              "solve_seconds": time.perf_counter() - start - setup,
                              "solve_cpu_seconds": time.process_time() - cpu - setup_cpu}
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
                   "setup_cpu_seconds": setup_cpu, "setup": split or None,
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
            log(f"{label:>40} (cg): {format_iterations(row):>22} iterations, set-up "
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
    adaptive = [k for k in coarse_list(c) if k in ADAPTIVE_COARSE_SPACES]
    thresholds = "".join(
        f"; {COARSE_LABELS[k]} threshold "
        + (f"{c.threshold:g}" if c.threshold is not None else DEFAULT_THRESHOLDS[k])
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
        "machine": machine_info(), "notes": notes_run, "rows": rows,
        "residual_histories": histories,
    }
    size = (os.path.basename(c.matrix) if c.problem == "matrix"
            else f"{c.problem}, n = {c.n}")
    short = f"{size}, N = {c.subdomains}, overlap {c.overlap}"
    return write_outputs(c, payload, markdown_table_nd(rows, title, c.memory), short, t_start, log)
