"""The coarse correction beside the local solves, and after them, on two threads.

For every problem of ``setup_profile.py`` (the set-up issue's), ``ddops.TwoLevelSchwarz``
(GDSW, additive; ``--coarse`` for another space) built once with ``threads=1`` and once with
``threads=2`` (the local solves in groups on two threads), and on two threads applied with
the coarse correction as one more task among the local solves
(``ddops.precond.corrections.COARSE_BESIDE``) and after them.  The three alternate in
rounds, best of ``--repeat``; the set-ups are not timed.  Prints one application (wall
milliseconds, best of 30 per round) and scipy's CG solve to rtol 1e-8 with the same
right-hand side (wall / process CPU seconds, its iterations) of each, the speed-ups, and
pyamg's smoothed aggregation set-up + solve (one thread; rigid body modes on elasticity)
timed in the same rounds.  CG's own vector operations run on one BLAS thread
(``threadpool_limits(1)``), as in ``setup_profile.py --both-cores``.  Needs PARDISO
(``ddops[solvers]``) and two cores: elsewhere the local solves are not threaded and the
rows are the same.

    python benchmarks/coarse_beside.py                  # the six problems (about a minute)
    python benchmarks/coarse_beside.py --problems 0 1 --repeat 3
    python benchmarks/coarse_beside.py --quick          # small sizes
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from agdsw_indicator import add_round_flags, build, measure  # noqa: E402
from common import machine_summary, timed_setup  # noqa: E402
from setup_profile import PROBLEMS  # noqa: E402

WAYS = ("one thread", "two, after", "two, beside")


def cg_solve(A, M, b) -> dict:
    """scipy's CG with ``M`` to rtol 1e-8: wall and process CPU seconds, iterations."""
    import scipy.sparse.linalg as spla

    its = [0]
    wall, cpu = time.perf_counter(), time.process_time()
    spla.cg(A, b, M=M, rtol=1e-8, maxiter=5000,
            callback=lambda x: its.__setitem__(0, its[0] + 1))
    return {"solve": time.perf_counter() - wall, "solve_cpu": time.process_time() - cpu,
            "iterations": its[0]}


def apply_ms(M, x, times: int = 30) -> float:
    """One application of ``M``, best of ``times``, wall milliseconds."""
    best = np.inf
    for _ in range(times):
        start = time.perf_counter()
        M @ x
        best = min(best, time.perf_counter() - start)
    return 1e3 * best


def main(argv=None) -> int:
    from threadpoolctl import threadpool_limits

    import ddops
    from ddops.precond import corrections

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_round_flags(parser)
    parser.add_argument("--coarse", default="gdsw", help="the coarse space (default gdsw)")
    args = parser.parse_args(argv)
    print(machine_summary(memory=True, ddops=True))
    print(f"{args.coarse}, additive; one application (ms, best of 30) and CG's solve "
          f"(wall / CPU s), best of {args.repeat} alternating rounds; set-ups not timed\n")
    print("| problem | coarse dim | threaded | apply ms (one thread, two after, two "
          "beside) | after / beside | CG solve s (one, two after, two beside) | its | "
          "solve: after / beside | pyamg SA set-up + solve s |")
    print("|---|---:|---|---|---:|---|---:|---:|---:|")
    out = []
    for i in (args.problems if args.problems else range(len(PROBLEMS))):
        label, _, full_flags, quick_flags = PROBLEMS[i]
        prob, d = build(quick_flags if args.quick else full_flags)
        A = prob.A.tocsr()
        b = np.random.default_rng(0).standard_normal(A.shape[0])
        built = {threads: timed_setup(prob, d, ddops.SchwarzOptions(
            coarse=args.coarse, null_space=prob.null_space, threads=threads))[0]
            for threads in (1, 2)}
        best: dict = {}
        try:
            with threadpool_limits(1):
                for _ in range(max(args.repeat, 1)):
                    for way in (*WAYS, "sa"):
                        if way == "sa":
                            r = measure(prob, d, "sa", None)  # (the same b)
                            if way not in best or r["total"] < best[way]["total"]:
                                best[way] = r
                            continue
                        corrections.COARSE_BESIDE = way == "two, beside"
                        M = built[1 if way == "one thread" else 2]
                        r = {"apply_ms": apply_ms(M, b), **cg_solve(A, M, b)}
                        if way not in best or r["solve"] < best[way]["solve"]:
                            best[way] = {**r, "apply_ms": min(
                                r["apply_ms"], best.get(way, r)["apply_ms"])}
        finally:
            corrections.COARSE_BESIDE = True
        one, after, beside, sa = (best[w] for w in (*WAYS, "sa"))
        threaded = bool(built[2].local.threaded)
        print(f"| {label}, {A.shape[0]:,} unknowns | {built[2].coarse_dim} | "
              f"{'yes' if threaded else 'no'} | {one['apply_ms']:.2f}, "
              f"{after['apply_ms']:.2f}, {beside['apply_ms']:.2f} | "
              f"{after['apply_ms'] / beside['apply_ms']:.2f} | "
              f"{one['solve']:.3f} / {one['solve_cpu']:.3f}, {after['solve']:.3f} / "
              f"{after['solve_cpu']:.3f}, {beside['solve']:.3f} / {beside['solve_cpu']:.3f} | "
              f"{one['iterations']}, {after['iterations']}, {beside['iterations']} | "
              f"{after['solve'] / beside['solve']:.2f} | {sa['total']:.3f} / "
              f"{sa['total_cpu']:.3f} |", flush=True)
        out.append({"problem": label, "coarse_dim": int(built[2].coarse_dim),
                    "threaded": threaded, "one": one, "after": after, "beside": beside,
                    "sa": sa})
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
