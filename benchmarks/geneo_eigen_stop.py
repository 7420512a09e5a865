"""GenEO with its eigensolves settled (the default) and stopped at the inertia's count.

For every problem of ``setup_profile.py`` (the set-up issue's), ``ddops.TwoLevelSchwarz``
with GenEO at ``eigen_stop="settled"`` and ``"count"`` (``ddops.dd.geneo.GENEO_EIGEN_STOP``:
the subspace iteration of a subdomain stops as soon as it holds as many Ritz values below
the threshold as the inertia of ``N_i - tau D_i A_i D_i`` counts, settled or not), the two
set-ups interleaved in rounds, best of ``--repeat`` by set-up + solve, one BLAS/MKL thread,
the decomposition built once per problem and not timed; the finite-element Neumann
matrices on the elasticity problems (their assembly inside the timed set-up, as in
``agdsw_indicator.py``).  CG (scipy) to ``rtol = 1e-8`` from zero, a random right-hand
side.  Prints the iterations (the inexact stop's cost), the coarse dimensions, the most
solves of a chunk's iteration, the set-up (wall / process CPU seconds) and the set-up +
solve of both, beside pyamg's smoothed aggregation (rigid body modes on elasticity) and
Ruge-Stuben AMG measured in the same rounds (PETSc GAMG and hypre BoomerAMG:
``setup_profile.py --petsc-python``).  Needs PARDISO (``ddops[solvers]``): without its
inertia there is no count, and the two rows are the same.

    python benchmarks/geneo_eigen_stop.py              # the six problems (a few minutes)
    python benchmarks/geneo_eigen_stop.py --quick      # small sizes
    python benchmarks/geneo_eigen_stop.py --problems 1 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from agdsw_indicator import add_round_flags, best_of_rounds, peer_cell  # noqa: E402
from common import machine_summary  # noqa: E402

STOPS = ("settled", "count")


def main(argv=None) -> int:
    from threadpoolctl import threadpool_limits

    from ddops.linalg.local_solvers import default_exact_solver

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_round_flags(parser)
    args = parser.parse_args(argv)
    print(machine_summary(memory=True, ddops=True))
    if default_exact_solver() != "pardiso":
        print("PARDISO is not installed: no inertia counts, both stops settle\n")
    print("one BLAS/MKL thread; set-up wall / CPU seconds, best of "
          f"{args.repeat} interleaved rounds by set-up + solve; the decomposition is not "
          "timed\n")
    print("| problem | iterations (settled, count) | coarse dim (settled, count) | most solves "
          "of a chunk (settled, count) | set-up s settled | set-up s count | set-up + "
          "solve s (settled, count) | settled / count, set-up + solve | set-up + solve s "
          "(its), pyamg SA, Ruge-Stuben |")
    print("|---|---|---|---|---:|---:|---|---:|---|")
    out = []
    # the installed peers in the same rounds (PETSc GAMG and hypre BoomerAMG:
    # setup_profile.py --petsc-python)
    runs = {**{stop: {"kind": "geneo", "skip": None, "eigen_stop": stop} for stop in STOPS},
            **{kind: {"kind": kind, "skip": None} for kind in ("sa", "rs")}}
    with threadpool_limits(1):
        for label, prob, best in best_of_rounds(args, runs):
            s, c = best["settled"], best["count"]
            print(f"| {label}, {prob.A.shape[0]:,} unknowns | {s['iterations']}, "
                  f"{c['iterations']} | {s['coarse_dim']}, {c['coarse_dim']} | "
                  f"{s['solves']}, {c['solves']} | {s['setup']:.2f} / {s['setup_cpu']:.2f} | "
                  f"{c['setup']:.2f} / {c['setup_cpu']:.2f} | {s['total']:.2f}, "
                  f"{c['total']:.2f} | {s['total'] / c['total']:.2f} | "
                  f"{peer_cell(best['sa'])}, {peer_cell(best['rs'])} |", flush=True)
            out.append({"problem": label, **best})
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
