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
alternating in ``--repeat`` rounds in one process.  Medians, not minima, since the wait
comes in some set-ups only; the largest ``coarse_factorization`` phase shows it, and the
CPU seconds of the process's native (non-Python) threads during CG show the spinning
workers (Linux, from ``/proc``; ``-`` elsewhere).  The operators of both ways agree to
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

from agdsw_indicator import chosen_problems  # noqa: E402
from common import (  # noqa: E402
    add_json_flag,
    add_quick_flag,
    machine_summary,
    space_options,
    timed_setup,
)

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


def one_run(prob, d, coarse, neumann, b) -> tuple[dict, np.ndarray]:
    from scipy.sparse.linalg import cg
    from threadpoolctl import threadpool_limits

    with threadpool_limits(2):
        M, wall, cpu = timed_setup(prob, d, space_options(prob, coarse, neumann, 2))
    its = [0]
    with threadpool_limits(limits=1, user_api="blas"):
        before, start = native_thread_cpu(), time.perf_counter()
        _, info = cg(prob.A.tocsr(), b, M=M, rtol=1e-8, maxiter=20_000,
                     callback=lambda _: its.__setitem__(0, its[0] + 1))
        solve, after = time.perf_counter() - start, native_thread_cpu()
    row = {"setup": wall, "setup_cpu": cpu, "solve": solve, "total": wall + solve,
           "coarse_factorization": float(M.stats["phases"]["coarse_factorization"]),
           "spun": spun(before, after), "iterations": its[0], "converged": info == 0,
           "coarse_dim": int(M.coarse_dim)}
    return row, M @ b


def median(runs: list[dict], key: str) -> float:
    return float(np.median([r[key] for r in runs]))


def main(argv=None) -> int:
    from ddops.linalg import parallel

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_quick_flag(parser, "small sizes")
    add_json_flag(parser)
    parser.add_argument("--problems", type=int, nargs="*",
                        help="indices into setup_profile.py's problem list (default: all)")
    parser.add_argument("--repeat", type=int, default=6,
                        help="alternating rounds (medians; default 6)")
    parser.add_argument("--coarse", nargs="*", default=["geneo"],
                        choices=["gdsw", "agdsw", "geneo"],
                        help="the coarse spaces (default: GenEO)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat must be >= 1, got {args.repeat}")
    bound = parallel.SMALL_DENSE_ROWS
    print(machine_summary(memory=True, ddops=True))
    print(f"threads=2; medians of {args.repeat} alternating rounds; wall s; spun: CPU s of "
          "native threads during CG\n")
    print("| problem | coarse | way | set-up | coarse factorisation (largest) | CG | spun | "
          "set-up + CG | its | apart |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    out = []
    for label, prob, d, neumann in chosen_problems(args):
        b = np.random.default_rng(0).standard_normal(prob.A.shape[0])
        for coarse in args.coarse:
            runs: dict = {way: [] for way in WAYS}
            applied = {}
            try:
                for r in range(args.repeat):
                    for way in (WAYS if r % 2 == 0 else WAYS[::-1]):
                        parallel.SMALL_DENSE_ROWS = 0 if way == WAYS[0] else bound
                        row, applied[way] = one_run(prob, d, coarse, neumann, b)
                        runs[way].append(row)
            finally:
                parallel.SMALL_DENSE_ROWS = bound
            apart = float(np.abs(applied[WAYS[0]] - applied[WAYS[1]]).max()
                          / np.abs(applied[WAYS[0]]).max())
            for way in WAYS:
                rs = runs[way]
                spins = [r["spun"] for r in rs]
                spin = "-" if None in spins else f"{np.median(spins):.2f}"
                its = sorted({r["iterations"] for r in rs})
                print(f"| {label}, {prob.A.shape[0]:,} unknowns | {coarse} ({rs[0]['coarse_dim']}) "
                      f"| {way} | {median(rs, 'setup'):.3f} | "
                      f"{median(rs, 'coarse_factorization'):.3f} "
                      f"({max(r['coarse_factorization'] for r in rs):.3f}) | "
                      f"{median(rs, 'solve'):.3f} | {spin} | {median(rs, 'total'):.3f} | "
                      f"{'/'.join(map(str, its))} | {apart:.1e} |", flush=True)
            out.append({"problem": label, "coarse": coarse, "bound": bound, "apart": apart,
                        "runs": runs})
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
