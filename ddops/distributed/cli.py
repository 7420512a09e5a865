"""``mpiexec -n P ddops precond ...``: the preconditioner experiment on ``P`` ranks.

:func:`run_precond` is called by the ``ddops`` command line when an MPI
launcher started it with more than one rank.  It builds the same problem and
decomposition as the serial ``ddops precond`` (through
:mod:`ddops.experiments.precond`, identically on every rank), places the
subdomains on the ranks (:class:`~ddops.distributed.DistributedLayout`); each
rank then keeps only its own rows of ``A`` (the global matrix is deleted before
any preconditioner is built: the subdomain matrices and the GDSW/RGDSW basis
come from the owned rows and the ghost rows exchanged once at set-up) and
solves with the distributed one-level and two-level Schwarz preconditioners:
CG with the additive variant for every coarse space asked for, and GMRES with
the restricted variant (RAS) and the first coarse space.  Rank 0 prints the
table and writes ``<save-prefix>_distributed.md`` and
``<save-prefix>_distributed.json``.

Flags read from the ``ddops precond`` namespace: ``problem``, ``n``,
``subdomains``, ``overlap``, ``kind``, ``coarse``, ``partitioner``,
``null_space``, ``contrast``, ``rtol``, ``maxiter``, ``seed``,
``blas_threads``, ``save_prefix``, and for ``--coarse geneo`` / ``agdsw``
``threshold``, ``max_per_subdomain``, ``max_per_component``, ``skip_contrast``,
``oversampling`` and ``eigen_stop``.  The learned preconditioners of the 1D experiment, pyamg,
Jacobi and the memory and plot options are serial only and are ignored here
(the table says so).  GenEO and AGDSW run from the ranks' own rows (their local
matrices from ``A``: the serial experiment's finite-element Neumann matrices of
the elasticity problems are not used here); ``--coarse all`` runs Nicolaides,
GDSW and RGDSW.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import numpy as np

from .comm import guard, world
from .krylov import cg, gmres
from .layout import DistributedLayout
from .matrix import DistributedMatrix
from .precond import DistributedTwoLevelSchwarz

__all__ = ["run_precond"]


def _config(args: argparse.Namespace):
    """The validated :class:`~ddops.experiments.precond.PrecondConfig` of the flags."""
    from ..experiments.precond import PrecondConfig

    c = PrecondConfig(
        problem=args.problem, n=args.n, subdomains=args.subdomains, overlap=args.overlap,
        kind=getattr(args, "kind", PrecondConfig.kind), coarse=args.coarse,
        partitioner=args.partitioner, null_space=args.null_space, contrast=args.contrast,
        rtol=args.rtol, maxiter=args.maxiter, seed=args.seed,
        blas_threads=getattr(args, "blas_threads", 1) or None, save_prefix=args.save_prefix,
        memory=False, plots=False, progress=False,
        **{flag: getattr(args, flag) for flag in ("threshold", "max_per_subdomain",
                                                  "max_per_component", "skip_contrast",
                                                  "oversampling", "eigen_stop")
           if getattr(args, flag, None) is not None},
    ).validated()
    # the adaptive spaces are built from the ranks' rows; --coarse all leaves them out
    if c.coarse == "all" and c.threshold is not None:
        raise ValueError("threshold: under MPI, --coarse all runs no adaptive space; give "
                         "--coarse geneo or agdsw")
    return c


def _problem(c: Any) -> tuple[Any, Any, Any]:
    """``(A, decomposition, null_space)`` exactly as the serial experiment builds them."""
    if c.problem == "poisson1d":
        from ..dd.decomposition import Decomposition1D
        from ..problems.poisson1d import poisson_1d

        return poisson_1d(c.n, c.kind), Decomposition1D(c.n, c.subdomains, c.overlap,
                                                        c.kind), None
    from ..experiments.precond import build_problem, decompose

    prob = build_problem(c)
    d, _, _ = decompose(c, prob)
    return prob.A, d, prob.null_space


def _coarse_spaces(c: Any) -> tuple[str, ...]:
    from ..experiments.precond import COARSE_SPACES

    if c.coarse != "all":
        return (c.coarse,)
    return (("interface_hats",) if c.problem == "poisson1d" else ()) + COARSE_SPACES


def _row(layout: DistributedLayout, b: np.ndarray, Ad: DistributedMatrix, c: Any,
         method: str, variant: str, coarse: str | None, null_space: Any,
         cap: int) -> dict[str, Any]:
    comm = layout.comm
    comm.Barrier()
    start = time.perf_counter()
    # A=None: the layout's rows (this rank's own rows of A, the global matrix is gone)
    from ..experiments.precond.runners import _coarse_options
    from ..precond.options import SchwarzOptions, coarse_options_from_dict

    options = SchwarzOptions(
        coarse="none" if coarse is None else coarse, variant=variant,
        null_space=null_space if coarse in ("nicolaides", "gdsw", "rgdsw", "geneo",
                                            "agdsw") else None,
        **coarse_options_from_dict(coarse, _coarse_options(c, coarse)))
    M = DistributedTwoLevelSchwarz(layout, None, options=options)
    setup = comm.allreduce(time.perf_counter() - start, op=_max())
    layout.reset_stats()
    M.matvec(b)
    per_apply = dict(layout.stats)
    layout.reset_stats()
    iterations = [0]

    def count(_: Any) -> None:
        iterations[0] += 1

    comm.Barrier()
    start = time.perf_counter()
    solver = cg if method == "cg" else gmres
    x, info = solver(Ad, b, rtol=c.rtol, maxiter=cap if method == "cg" else max(1, cap // 20),
                     M=M, callback=count)
    solve = comm.allreduce(time.perf_counter() - start, op=_max())
    residual = layout.norm(b - Ad.matvec(x)) / layout.norm(b)
    return {"method": method, "variant": variant, "coarse": coarse or "none",
            "coarse_dim": M.coarse_dim, "iterations": iterations[0], "info": int(info),
            "relative_residual": residual, "setup_seconds": setup, "solve_seconds": solve,
            "coarse_basis_seconds": comm.allreduce(M.coarse_basis_seconds, op=_max()),
            "per_application": {
                "messages": int(comm.allreduce(per_apply["messages"])),
                "bytes": int(comm.allreduce(per_apply["bytes"])),
                "reductions": per_apply["reductions"],
                "reduction_bytes": per_apply["reduction_bytes"]},
            "solve_communication": {k: int(comm.allreduce(layout.stats[k]))
                                    for k in layout.APPLICATION_STATS}}


def _max():
    from .comm import mpi

    return mpi().MAX


def _markdown(rows: list[dict[str, Any]], title: str) -> str:
    lines = [f"# {title}", "",
             "| method | variant | coarse | n0 | iterations | set-up (s) | solve (s) | "
             "messages / apply | bytes / apply | reductions / apply |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        p = r["per_application"]
        its = r["iterations"] if r["info"] == 0 else f"{r['iterations']} (not converged)"
        lines.append(f"| {r['method'].upper()} | {r['variant']} | {r['coarse']} | "
                     f"{r['coarse_dim']} | {its} | {r['setup_seconds']:.3f} | "
                     f"{r['solve_seconds']:.3f} | {p['messages']} | {p['bytes']} | "
                     f"{p['reductions']} |")
    lines += ["", "Messages and bytes are summed over the ranks; set-up and solve times are "
              "the slowest rank's.  Serial-only rows (no preconditioner, Jacobi, pyamg, the "
              "learned preconditioners) are not run under MPI."]
    return "\n".join(lines) + "\n"


def run_precond(args: argparse.Namespace, comm: Any = None) -> dict[str, Any]:
    """Run ``ddops precond`` on every rank of ``comm`` (default ``MPI.COMM_WORLD``).

    Parameters
    ----------
    args : argparse.Namespace
        The parsed ``ddops precond`` flags (those listed in the module docstring).
    comm : mpi4py communicator, optional

    Returns
    -------
    dict
        ``{"rows": [...], "ranks": P, ...}`` on every rank.

    Raises
    ------
    ValueError, TypeError
        A bad setting, raised on every rank alike before any communication
        (the command line prints it as one line and exits non-zero; the
        ranks other than 0 have their stderr silenced first, so the line
        appears once).
    """
    comm = world() if comm is None else comm
    rank, size = comm.Get_rank(), comm.Get_size()
    try:  # every rank validates the same flags: all raise or none does
        c = _config(args)
        if c.subdomains < size:
            raise ValueError(f"subdomains must be at least the number of ranks ({size}), got "
                             f"{c.subdomains}")
    except (ValueError, TypeError):
        if rank != 0:  # the command line prints the error: once, from rank 0
            sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - until the process exits
        raise
    if c.blas_threads is not None:
        from ..linalg.local_solvers import thread_limit

        limiter = thread_limit(c.blas_threads)  # BLAS, the set-up chunks, the solver groups
        limiter.__enter__()
    else:
        limiter = None
    try:
        with guard(comm):
            if rank == 0:
                os.makedirs(os.path.dirname(c.save_prefix) or ".", exist_ok=True)
            A, d, Z = _problem(c)
            # every rank keeps only its own rows of A: the preconditioner is built from them
            # and the ghost rows its subdomains need (exchanged once at set-up)
            rows = A[DistributedLayout(d, comm).owned].tocsr()
            del A
            layout = DistributedLayout(d, comm, A=rows)
            Ad = DistributedMatrix(layout)
            n = d.num_dofs
            cap = 2 * n if c.maxiter is None else c.maxiter
            b = layout.scatter(np.random.default_rng(c.seed).standard_normal(n))
            spaces = _coarse_spaces(c)
            runs = [("cg", "additive", None)] + [("cg", "additive", s) for s in spaces]
            runs.append(("gmres", "restricted", "gdsw" if "gdsw" in spaces else spaces[0]))
            rows = []
            title = (f"ddops precond on {size} MPI ranks: {c.problem}, n = {c.n}, {n} unknowns, "
                     f"{d.num_subdomains} subdomains, overlap {c.overlap}, rtol {c.rtol:g}")
            if rank == 0:
                print(title, flush=True)
            for method, variant, coarse in runs:
                row = _row(layout, b, Ad, c, method, variant, coarse, Z, cap)
                rows.append(row)
                if rank == 0:
                    print(f"  {method.upper()} {variant} {row['coarse']}: {row['iterations']} "
                          f"iterations, set-up {row['setup_seconds']:.3f} s, solve "
                          f"{row['solve_seconds']:.3f} s", flush=True)
            payload = {"title": title, "ranks": size, "num_dofs": n,
                       "subdomains": d.num_subdomains, "rows": rows,
                       "plan": comm.gather(layout.plan_summary(), root=0)}
            if rank == 0:
                table = _markdown(rows, title)
                print(table, end="")
                with open(f"{c.save_prefix}_distributed.md", "w") as fh:
                    fh.write(table)
                with open(f"{c.save_prefix}_distributed.json", "w") as fh:
                    json.dump(payload, fh, indent=1)
                print(f"wrote {c.save_prefix}_distributed.md and {c.save_prefix}_distributed.json")
    finally:
        if limiter is not None:
            limiter.__exit__(None, None, None)
    return payload
