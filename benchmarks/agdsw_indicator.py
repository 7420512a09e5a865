"""AGDSW (or GenEO) with and without its contrast indicator, in one process, interleaved.

For every problem of ``setup_profile.py`` (the set-up issue's), ``ddops.TwoLevelSchwarz``
with GDSW, with AGDSW solving every eigenproblem (``skip_contrast=0``, the full space) and
with AGDSW's default (the indicator skips the components around which the diagonal of
``A`` varies by at most ``AGDSW_SKIP_CONTRAST``), the three set-ups interleaved in rounds,
best of ``--repeat`` by set-up + solve (one BLAS/MKL thread; the decomposition is built
once per problem and is not timed).  CG (scipy) to ``rtol = 1e-8`` from zero, a random
right-hand side.  AGDSW gets the finite-element Neumann matrices on the elasticity
problems (as ``ddops precond``; their assembly is inside the timed set-up).  Prints the
skipped components, the iterations, the coarse dimension and the set-up (wall and process
CPU seconds), and beside them, measured in the same rounds, the set-up + solve of AGDSW's
default and of pyamg's smoothed aggregation (rigid body modes on elasticity) and
Ruge-Stuben AMG, the peers installed here (PETSc GAMG and hypre BoomerAMG are in
``setup_profile.py --petsc-python``).

``--space geneo`` measures GenEO instead: its default solves every eigenproblem (the full
space), and its optional indicator (``skip_contrast=10``: the subdomains around which,
neighbours included, the diagonal varies by at most 10 keep their Nicolaides functions
only) is the other row; it changes the iterations where it skips anything.

    python benchmarks/agdsw_indicator.py              # the five problems (a few minutes)
    python benchmarks/agdsw_indicator.py --space geneo
    python benchmarks/agdsw_indicator.py --quick      # small sizes
    python benchmarks/agdsw_indicator.py --problems 4 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import add_json_flag, add_quick_flag, machine_summary  # noqa: E402
from setup_profile import PROBLEMS  # noqa: E402


def build(flags: list[str]):
    """The problem and decomposition of ``ddops precond`` for these flags."""
    from ddops.experiments.precond.command_line import add_arguments
    from ddops.experiments.precond.config import PrecondConfig
    from ddops.experiments.precond.problem_registry import build_problem, decompose

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    a = parser.parse_args(flags)
    given = dict(problem=a.problem, n=a.n, subdomains=a.subdomains, contrast=a.contrast)
    c = PrecondConfig(**{k: v for k, v in given.items() if v is not None}).validated()
    prob = build_problem(c)
    return prob, decompose(c, prob)[0]


def measure(prob, d, kind: str, skip: float | None, eigen_stop: str | None = None) -> dict:
    """One set-up and CG solve (``kind``: gdsw, agdsw, geneo, sa or rs; ``eigen_stop``:
    GenEO's)."""
    import scipy.sparse.linalg as spla

    import ddops

    A = prob.A.tocsr()
    b = np.random.default_rng(0).standard_normal(A.shape[0])
    wall, cpu = time.perf_counter(), time.process_time()
    if kind in ("sa", "rs"):
        import pyamg

        try:
            ml = (pyamg.smoothed_aggregation_solver(A, B=prob.null_space) if kind == "sa"
                  else pyamg.ruge_stuben_solver(A))
            M = ml.aspreconditioner()
            setup, setup_cpu = time.perf_counter() - wall, time.process_time() - cpu
            its = [0]
            _, info = spla.cg(A, b, rtol=1e-8, M=M, maxiter=5000,
                              callback=lambda _: its.__setitem__(0, its[0] + 1))
        except (ValueError, np.linalg.LinAlgError, FloatingPointError):
            return {"setup": np.inf, "total": np.inf, "iterations": None, "info": -1}
        return {"setup": setup, "setup_cpu": setup_cpu, "iterations": its[0],
                "info": int(info), "total": time.perf_counter() - wall,
                "total_cpu": time.process_time() - cpu}
    if kind == "gdsw":
        options = ddops.SchwarzOptions(coarse="gdsw", null_space=prob.null_space)
    else:
        neumann = prob.neumann(d) if prob.neumann is not None else None
        space = (ddops.AGDSWOptions(neumann=neumann, skip_contrast=skip) if kind == "agdsw"
                 else ddops.GenEOOptions(neumann=neumann, skip_contrast=skip,
                                         eigen_stop=eigen_stop))
        options = ddops.SchwarzOptions(coarse=kind, null_space=prob.null_space,
                                       **{kind: space})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # elasticity: not dominant
        M = ddops.TwoLevelSchwarz(A, d, options=options)
    setup, setup_cpu = time.perf_counter() - wall, time.process_time() - cpu
    its = [0]
    _, info = spla.cg(A, b, rtol=1e-8, M=M, maxiter=5000,
                      callback=lambda _: its.__setitem__(0, its[0] + 1))
    stats = M.coarse_stats or {}
    return {"setup": setup, "setup_cpu": setup_cpu, "iterations": its[0], "info": int(info),
            "total": time.perf_counter() - wall, "total_cpu": time.process_time() - cpu,
            "coarse_dim": int(M.coarse_dim),
            # GenEO: the most solves of a chunk's subspace iteration
            "solves": int(stats.get("subspace_iterations", 0)),
            # AGDSW: components, its indicator's skipped ones; GenEO: subdomains
            "skipped": int(stats.get("skipped_by_contrast",
                                     stats.get("skipped_eigenproblems", 0))),
            "components": int(stats.get("eigenproblems", 0)) + (
                0 if kind == "geneo" else int(stats.get("skipped_eigenproblems", 0)))}


def peer_cell(r: dict) -> str:
    """A peer's set-up + solve seconds and iterations (or that it failed or did not
    converge), for a table cell."""
    if r["iterations"] is None:
        return "failed"
    note = "" if r["info"] == 0 else ", not converged"
    return f"{r['total']:.2f} ({r['iterations']}{note})"


def add_round_flags(parser: argparse.ArgumentParser, repeat: int = 2,
                    repeat_help: str = "interleaved rounds (best of)") -> None:
    """``--quick``, ``--json``, ``--problems`` (of ``setup_profile.py``) and ``--repeat``
    (default ``repeat``): the flags of the scripts that interleave set-ups on those
    problems."""
    add_quick_flag(parser, "small sizes")
    add_json_flag(parser)
    parser.add_argument("--problems", type=int, nargs="*",
                        help="indices into setup_profile.py's problem list (default: all)")
    parser.add_argument("--repeat", type=int, default=repeat, help=repeat_help)


def chosen_problems(args: argparse.Namespace):
    """For every problem of ``setup_profile.py`` chosen by ``args`` (:func:`add_round_flags`):
    ``(label, problem, decomposition, neumann)``, ``neumann`` the finite-element Neumann
    matrices of the elasticity problems (None elsewhere), assembled once."""
    for i in (args.problems if args.problems else range(len(PROBLEMS))):
        label, _, full_flags, quick_flags = PROBLEMS[i]
        prob, d = build(quick_flags if args.quick else full_flags)
        yield label, prob, d, (prob.neumann(d) if prob.neumann is not None else None)


def best_of_rounds(args: argparse.Namespace, runs: dict):
    """For every problem of ``setup_profile.py`` chosen by ``args`` (:func:`add_round_flags`):
    ``(label, problem, {name: best run})``, the runs (``name -> measure``'s keyword
    arguments) interleaved in ``args.repeat`` rounds, the best by set-up + solve."""
    for i in (args.problems if args.problems else range(len(PROBLEMS))):
        label, _, full_flags, quick_flags = PROBLEMS[i]
        prob, d = build(quick_flags if args.quick else full_flags)
        best: dict = {}
        for _ in range(max(args.repeat, 1)):  # interleaved rounds
            for name, kwargs in runs.items():
                r = measure(prob, d, **kwargs)
                if name not in best or r["total"] < best[name]["total"]:
                    best[name] = r
        yield label, prob, best


def main(argv=None) -> int:
    from threadpoolctl import threadpool_limits

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_round_flags(parser)
    parser.add_argument("--space", choices=("agdsw", "geneo"), default="agdsw",
                        help="the adaptive space (default agdsw)")
    args = parser.parse_args(argv)
    space = args.space
    name = {"agdsw": "AGDSW", "geneo": "GenEO"}[space]
    # the full space (every eigenproblem) and the one with the indicator: AGDSW's default,
    # GenEO's option
    indicator = None if space == "agdsw" else 10.0
    units = "components" if space == "agdsw" else "subdomains"
    print(machine_summary(memory=True, ddops=True))
    print("one BLAS/MKL thread; set-up wall / CPU seconds, best of "
          f"{args.repeat} interleaved rounds by set-up + solve; the decomposition is not "
          "timed\n")
    other = "default" if space == "agdsw" else "skip_contrast=10"
    print(f"| problem | skipped / {units} | iterations (full, {other}, GDSW) | coarse dim "
          f"(full, {other}) | {name} full set-up s | {name} {other} set-up s | GDSW set-up s | "
          f"full / {other} | set-up + solve s: {name} full, {name} {other}, pyamg SA, "
          "pyamg RS |")
    print("|---|---:|---|---|---:|---:|---:|---:|---|")
    out = []
    runs = {"full": {"kind": space, "skip": 0.0}, "default": {"kind": space, "skip": indicator},
            **{kind: {"kind": kind, "skip": None} for kind in ("gdsw", "sa", "rs")}}
    with threadpool_limits(1):
        for label, prob, best in best_of_rounds(args, runs):
            f, g, s = best["full"], best["default"], best["gdsw"]

            print(f"| {label}, {prob.A.shape[0]:,} unknowns | {g['skipped']} / "
                  f"{g['components']} | {f['iterations']}, {g['iterations']}, "
                  f"{s['iterations']} | {f['coarse_dim']}, {g['coarse_dim']} | "
                  f"{f['setup']:.2f} / {f['setup_cpu']:.2f} | {g['setup']:.2f} / "
                  f"{g['setup_cpu']:.2f} | {s['setup']:.2f} / {s['setup_cpu']:.2f} | "
                  f"{f['setup'] / g['setup']:.2f} | {f['total']:.2f}, {g['total']:.2f}, "
                  f"{peer_cell(best['sa'])}, {peer_cell(best['rs'])} |", flush=True)
            out.append({"problem": label, **{k: v for k, v in best.items()}})
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
