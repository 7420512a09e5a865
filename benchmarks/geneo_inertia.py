"""GenEO's eigensolve with and without the inertia count, on the set-up issue's problems.

With PARDISO installed, GenEO factorises ``N_i - tau D_i A_i D_i`` once per chunk of
subdomains (symmetric indefinite) and counts every subdomain's eigenvalues below the
threshold (``ddops.dd.geneo.GENEO_INERTIA``): subdomains whose count the kernel of ``N_i``
accounts for skip their eigensolve, the others iterate until they hold that many Ritz values
below the threshold, in chunks regrouped by their counts.  Without it the iteration stops
by the extrapolation rule of ``GENEO_BOUNDARY_RTOL``, a heuristic.

For every problem this script builds GenEO's basis both ways in interleaved rounds (one BLAS
thread unless ``--threads``) and prints the wall and process CPU seconds of the basis, the
ratio, the solves of the largest chunk, the eigenproblems skipped and the functions
selected (more with the inertia: eigenvalues below the threshold that the heuristic
missed).  The problems are those of ``benchmarks/setup_profile.py`` (``ddops precond``'s
registry: GenEO from ``A``, with the null space of the problem) and, for elasticity, GenEO
with the finite-element Neumann matrices (floating subdomains then have an exact kernel).

    python benchmarks/geneo_inertia.py            # the issue's sizes (a few minutes)
    python benchmarks/geneo_inertia.py --quick    # small sizes (seconds)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    add_json_flag,
    add_quick_flag,
    add_threads_flag,
    machine_summary,
)
from setup_profile import PROBLEMS as PROFILE_PROBLEMS  # noqa: E402

#: The problem's own flags of ``ddops precond`` and their types.
PROBLEM_FLAGS = {"--problem": str, "--n": int, "--contrast": float, "--subdomains": int}


def settings(flags: list[str]) -> dict:
    """The :class:`PrecondConfig` settings of a problem of ``setup_profile.py``'s list (its
    ``ddops precond`` flags; the solver's, such as ``--maxiter``, left out)."""
    pairs = dict(zip(flags[::2], flags[1::2], strict=True))
    return {flag[2:]: kind(pairs[flag]) for flag, kind in PROBLEM_FLAGS.items()
            if flag in pairs}


#: (label, settings at the issue's sizes, at --quick sizes, with the finite-element
#: Neumann matrices too): setup_profile.py's problems
PROBLEMS = [(label, settings(full), settings(quick), label.startswith(("2D elasticity",
                                                                       "3D elasticity")))
            for label, _, full, quick in PROFILE_PROBLEMS]

def build(settings: dict):
    """The problem, its decomposition and (elasticity) its finite-element Neumann matrices."""
    from ddops.experiments.precond.config import PrecondConfig
    from ddops.experiments.precond.problem_registry import build_problem, decompose

    c = PrecondConfig(**settings).validated()
    prob = build_problem(c)
    d, _, _ = decompose(c, prob)
    return prob, d


def one_basis(prob, d, inertia: bool, neumann) -> dict:
    """GenEO's basis with the inertia on or off: seconds and counts."""
    from ddops.dd import geneo

    geneo.GENEO_INERTIA = inertia
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        wall, cpu = time.perf_counter(), time.process_time()
        Phi, info = geneo.geneo_basis(prob.A, d, null_space=prob.null_space, neumann=neumann,
                                      return_info=True)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"wall": wall, "cpu": cpu, "dim": int(Phi.shape[1]),
            "selected": int(info.selected.sum()),
            "solves": int(info.stats["subspace_iterations"]),
            "skipped": int(info.stats["skipped_eigenproblems"]),
            "warnings": sorted({str(w.message).split(":")[0] for w in caught})}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_quick_flag(p)
    add_threads_flag(p)
    add_json_flag(p)
    p.add_argument("--rounds", type=int, default=2, help="interleaved rounds (default 2)")
    args = p.parse_args(argv)
    from threadpoolctl import threadpool_limits

    from ddops.linalg.local_solvers import default_exact_solver

    print(machine_summary(ddops=True))
    if default_exact_solver() != "pardiso":
        print("PARDISO is not installed: GenEO has no inertia count here")
        return 1
    rows = []
    with threadpool_limits(args.threads):
        for label, full, quick, fe in PROBLEMS:
            prob, d = build(quick if args.quick else full)
            routes = [("from A", None)]
            if fe and prob.neumann is not None:
                routes.append(("FE Neumann", prob.neumann(d)))
            for route, neumann in routes:
                runs = {False: [], True: []}
                for _ in range(args.rounds):
                    for inertia in (False, True):
                        runs[inertia].append(one_basis(prob, d, inertia, neumann))
                best = {k: min(v, key=lambda r: r["wall"]) for k, v in runs.items()}
                row = {"problem": label, "route": route, "unknowns": int(prob.A.shape[0]),
                       "without": best[False], "with": best[True],
                       "ratio": best[False]["wall"] / best[True]["wall"]}
                rows.append(row)
                print(f"\n{label}, GenEO {route} ({row['unknowns']:,} unknowns, "
                      f"{d.num_subdomains} subdomains)")
                for name, r in (("heuristic stop", best[False]), ("inertia count", best[True])):
                    print(f"  {name:15s} basis {r['wall']:6.2f} s (CPU {r['cpu']:6.2f} s), "
                          f"{r['solves']:2d} solves in the largest chunk, {r['skipped']:4d} "
                          f"skipped, {r['selected']:5d} selected, dim {r['dim']}"
                          + (f"; warned: {'; '.join(r['warnings'])}" if r["warnings"] else ""))
                print(f"  without / with the inertia: {row['ratio']:.2f}x "
                      f"(best of {args.rounds} interleaved rounds, {args.threads} thread(s))")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
