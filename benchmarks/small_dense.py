"""Small dense factorisations of a two-thread set-up on one BLAS thread, and on two.

numpy and scipy load an OpenBLAS copy each, and an OpenBLAS worker spins for about 0.1 s
after a threaded call before it sleeps.  On two cores a threaded call of one copy can then
wait for the core that the other copy's worker spins on, and the worker left spinning by
a set-up's last threaded call takes CPU from whatever follows.  ``ddops`` runs the dense
factorisations of at most ``ddops.linalg.parallel.SMALL_DENSE_ROWS`` rows outside the
set-up's chunks (the coarse Cholesky, the dependence check's pivoted Cholesky) on one BLAS
thread; this script compares that with the same factorisations on two threads (the bound
set to 0) on the problems of ``setup_profile.py``, ``threads=2``: set-up, then CG (rtol
1e-8, a random right-hand side, CG's vector operations on one BLAS thread), the two ways
alternating in ``--repeat`` rounds in one process, with pyamg's smoothed aggregation (the
peer; serial, rigid body modes on elasticity) set up and solved the same way in each round.
Medians, not minima, since the wait comes in some set-ups only; the largest
``coarse_factorization`` phase shows it, and the CPU seconds of the process's native
(non-Python) threads during CG show the spinning workers (Linux, from ``/proc``; ``-``
elsewhere); set-up + CG also in process CPU seconds.  The operators of both ways agree to
rounding (``apart``).

    python benchmarks/small_dense.py                          # the six problems, GenEO
    python benchmarks/small_dense.py --problems 2 5 --coarse geneo agdsw --repeat 8
    python benchmarks/small_dense.py --quick
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from agdsw_indicator import add_round_flags, chosen_problems  # noqa: E402
from common import machine_summary, space_options, timed_sa_setup, timed_setup  # noqa: E402

WAYS = ("two BLAS threads", "one below the bound")


def native_thread_cpu() -> dict[int, float] | None:
    """CPU seconds of every thread of this process by its id (Linux), None elsewhere."""
    tasks = Path("/proc/self/task")
    if not tasks.is_dir():
        return None
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for task in tasks.iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # (a thread that ended meanwhile)
            continue
        out[int(task.name)] = (int(fields[11]) + int(fields[12])) / tick
    return out


def spun(before: dict | None, after: dict | None) -> float | None:
    """CPU seconds of the native threads (no Python thread's) between two readings."""
    if before is None or after is None:
        return None
    python = {t.native_id for t in threading.enumerate()}
    return sum(after[k] - before.get(k, 0.0) for k in after if k not in python)


def solved(prob, b, M, wall: float, cpu: float) -> dict:
    """CG with the preconditioner ``M`` set up in ``wall`` / ``cpu`` seconds (its vector
    operations on one BLAS thread): the times, iterations and the spinning threads' CPU."""
    from scipy.sparse.linalg import cg
    from threadpoolctl import threadpool_limits

    its = [0]
    with threadpool_limits(limits=1, user_api="blas"):
        before, start, start_cpu = native_thread_cpu(), time.perf_counter(), time.process_time()
        _, info = cg(prob.A.tocsr(), b, M=M, rtol=1e-8, maxiter=20_000,
                     callback=lambda _: its.__setitem__(0, its[0] + 1))
        solve, solve_cpu = time.perf_counter() - start, time.process_time() - start_cpu
        after = native_thread_cpu()
    return {"setup": wall, "setup_cpu": cpu, "solve": solve, "total": wall + solve,
            "total_cpu": cpu + solve_cpu, "spun": spun(before, after), "iterations": its[0],
            "converged": info == 0}


def one_run(prob, d, coarse, neumann, b) -> tuple[dict, np.ndarray]:
    """``ddops`` on two threads: set-up, then CG."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(2):
        M, wall, cpu = timed_setup(prob, d, space_options(prob, coarse, neumann, 2))
    row = solved(prob, b, M, wall, cpu)
    row.update(coarse_factorization=float(M.stats["phases"]["coarse_factorization"]),
               coarse_dim=int(M.coarse_dim))
    return row, M @ b


def peer_run(prob, b) -> dict:
    """pyamg's smoothed aggregation (rigid body modes on elasticity; serial, one BLAS
    thread): set-up, then CG, the same right-hand side."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        ml, wall, cpu = timed_sa_setup(prob)
    return solved(prob, b, ml.aspreconditioner(), wall, cpu)


def median(runs: list[dict], key: str) -> float:
    return float(np.median([r[key] for r in runs]))


def columns(runs: list[dict]) -> str:
    """The CG, spun, set-up + CG (CPU) and iterations cells of a row."""
    spins = [r["spun"] for r in runs]
    spin = "-" if None in spins else f"{np.median(spins):.2f}"
    its = "/".join(map(str, sorted({r["iterations"] for r in runs})))
    if not all(r["converged"] for r in runs):
        its += " (not converged)"
    return (f"{median(runs, 'solve'):.3f} | {spin} | {median(runs, 'total'):.3f} "
            f"({median(runs, 'total_cpu'):.3f}) | {its}")


def main(argv=None) -> int:
    from ddops.linalg import parallel

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_round_flags(parser, repeat=6, repeat_help="alternating rounds (medians; default 6)")
    parser.add_argument("--coarse", nargs="*", default=["geneo"],
                        choices=["gdsw", "agdsw", "geneo"],
                        help="the coarse spaces (default: GenEO)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat must be >= 1, got {args.repeat}")
    bound = parallel.SMALL_DENSE_ROWS
    print(machine_summary(memory=True, ddops=True))
    print(f"ddops on threads=2, pyamg SA serial; medians of {args.repeat} alternating rounds; "
          "wall s (set-up + CG also process CPU s); spun: CPU s of native threads during CG\n")
    print("| problem | method | way | set-up | coarse factorisation (largest) | CG | spun | "
          "set-up + CG (CPU) | its | apart |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    out = []
    for label, prob, d, neumann in chosen_problems(args):
        b = np.random.default_rng(0).standard_normal(prob.A.shape[0])
        name = f"{label}, {prob.A.shape[0]:,} unknowns"
        for coarse in args.coarse:
            runs: dict = {way: [] for way in (*WAYS, "sa")}
            applied = {}
            try:
                for r in range(args.repeat):
                    for way in ((*WAYS, "sa") if r % 2 == 0 else ("sa", *WAYS[::-1])):
                        if way == "sa":
                            runs[way].append(peer_run(prob, b))
                            continue
                        parallel.SMALL_DENSE_ROWS = 0 if way == WAYS[0] else bound
                        row, applied[way] = one_run(prob, d, coarse, neumann, b)
                        runs[way].append(row)
            finally:
                parallel.SMALL_DENSE_ROWS = bound
            apart = float(np.abs(applied[WAYS[0]] - applied[WAYS[1]]).max()
                          / np.abs(applied[WAYS[0]]).max())
            for way in WAYS:
                rs = runs[way]
                print(f"| {name} | {coarse} ({rs[0]['coarse_dim']}) | {way} | "
                      f"{median(rs, 'setup'):.3f} | {median(rs, 'coarse_factorization'):.3f} "
                      f"({max(r['coarse_factorization'] for r in rs):.3f}) | "
                      f"{columns(rs)} | {apart:.1e} |", flush=True)
            print(f"| {name} | pyamg SA | one thread | {median(runs['sa'], 'setup'):.3f} | - | "
                  f"{columns(runs['sa'])} | |", flush=True)
            out.append({"problem": label, "coarse": coarse, "bound": bound, "apart": apart,
                        "runs": {way: runs[way] for way in WAYS}, "sa": runs["sa"]})
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
