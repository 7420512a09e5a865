"""GenEO's eigenproblems by the block Krylov method, and by the subspace iteration.

For every problem of ``setup_profile.py`` (the set-up issue's), ``ddops.TwoLevelSchwarz``
with GenEO (the finite-element Neumann matrices on the elasticity problems, assembled once
and not timed) as it is built now, the eigenpairs of the chunks whose counts the inertia
knows from the block Krylov method (``geneo.GENEO_KRYLOV``), against the same set-up with
the subspace iteration there.  The two set-ups alternate in rounds, best of ``--repeat``,
one BLAS/MKL thread, the decomposition built once per problem and not timed.  Prints the
set-up (wall / process CPU seconds), the eigenproblem phase, the columns solved with the
shifted factorisations (summed over the chunks), the coarse dimension and CG's iterations
(rtol 1e-8, the same right-hand side) of each, the largest difference of the subdomains'
smallest eigenvalues relative to the threshold, and pyamg's smoothed aggregation set-up
(rigid body modes on elasticity) timed in the same rounds, the peer the set-up target
names (PETSc GAMG and hypre BoomerAMG: ``setup_profile.py --petsc-python``).  Needs
PARDISO (``ddops[solvers]``): without it there are no counts and both rows are the
subspace iteration.

    python benchmarks/geneo_krylov.py                 # the six problems (a few minutes)
    python benchmarks/geneo_krylov.py --problems 0 1 --repeat 3
    python benchmarks/geneo_krylov.py --quick         # small sizes
    python benchmarks/geneo_krylov.py --compare retire  # the Krylov method with and
        # without retiring settled blocks (geneo.KRYLOV_RETIRE) in place of the two solvers
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from agdsw_indicator import add_round_flags, chosen_problems  # noqa: E402
from common import machine_summary, timed_setup  # noqa: E402
from shared_order import sa_setup  # noqa: E402

#: What ``--compare`` sets against what: (column label, :func:`measure`'s switches) twice.
WAYS = {"solver": (("subspace", {"krylov": False}), ("Krylov", {"krylov": True})),
        "retire": (("to the end", {"retire": False}), ("retiring", {"retire": True}))}


def measure(prob, d, krylov: bool = True, neumann=None, retire: bool = True) -> dict:
    """One GenEO set-up (its eigensolver chosen by ``krylov``; with ``retire`` the Krylov
    method's settled blocks retire, ``geneo.KRYLOV_RETIRE``) and CG solve."""
    import scipy.sparse.linalg as spla

    import ddops
    from ddops.dd import geneo

    geneo.GENEO_KRYLOV, geneo.KRYLOV_RETIRE = krylov, retire
    try:
        options = ddops.SchwarzOptions(coarse="geneo", null_space=prob.null_space,
                                       geneo=ddops.GenEOOptions(neumann=neumann))
        M, setup, setup_cpu = timed_setup(prob, d, options)
    finally:
        geneo.GENEO_KRYLOV = geneo.KRYLOV_RETIRE = True
    columns = M.coarse_stats["solved_columns"]
    A = prob.A.tocsr()
    b = np.random.default_rng(0).standard_normal(A.shape[0])
    its = [0]
    spla.cg(A, b, M=M, rtol=1e-8, maxiter=5000,
            callback=lambda x: its.__setitem__(0, its[0] + 1))
    return {"setup": setup, "setup_cpu": setup_cpu,
            "phase": M.setup_phases["eigenproblems"], "columns": columns,
            "coarse_dim": int(M.coarse_dim), "iterations": its[0],
            "eigenvalues": np.asarray(M.coarse_info.eigenvalues, dtype=float),
            "threshold": float(M.coarse_info.threshold)}


def main(argv=None) -> int:
    from threadpoolctl import threadpool_limits

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_round_flags(parser)
    parser.add_argument("--compare", choices=sorted(WAYS), default="solver",
                        help="solver: the subspace iteration against the Krylov method; "
                             "retire: the Krylov method with every block running to the "
                             "chunk's end against settled blocks retiring (default solver)")
    args = parser.parse_args(argv)
    (a, a_switch), (b, b_switch) = WAYS[args.compare]
    print(machine_summary(memory=True, ddops=True))
    print(f"GenEO, one BLAS/MKL thread; set-up wall / CPU seconds, best of {args.repeat} "
          "alternating rounds; the decomposition is not timed\n")
    print(f"| problem | set-up {a} | set-up {b} | {a} / {b} | eigenproblems s "
          f"({a}, {b}) | columns solved ({a}, {b}) | coarse dim | CG its | "
          f"eigenvalues apart / threshold | pyamg SA set-up | {b} / SA |")
    print("|---|---:|---:|---:|---|---|---|---|---:|---:|---:|")
    out = []
    with threadpool_limits(1):
        for label, prob, d, neumann in chosen_problems(args):
            best: dict = {}
            for _ in range(max(args.repeat, 1)):
                for way, switch in ((a, a_switch), (b, b_switch), ("sa", None)):
                    r = (sa_setup(prob) if way == "sa" else
                         measure(prob, d, neumann=neumann, **switch))
                    if way not in best or r["setup"] < best[way]["setup"]:
                        best[way] = r
            s, k, sa = best[a], best[b], best["sa"]
            es, ek = s.pop("eigenvalues"), k.pop("eigenvalues")
            both = np.isfinite(es) & np.isfinite(ek)
            apart = float(np.abs(es - ek)[both].max() / s["threshold"]) if both.any() else 0.0
            print(f"| {label}, {prob.A.shape[0]:,} unknowns | {s['setup']:.3f} / "
                  f"{s['setup_cpu']:.3f} | {k['setup']:.3f} / {k['setup_cpu']:.3f} | "
                  f"{s['setup'] / k['setup']:.2f} | {s['phase']:.3f}, {k['phase']:.3f} | "
                  f"{s['columns']:,}, {k['columns']:,} | {s['coarse_dim']}, "
                  f"{k['coarse_dim']} | {s['iterations']}, {k['iterations']} | "
                  f"{apart:.1e} | {sa['setup']:.3f} / {sa['setup_cpu']:.3f} | "
                  f"{k['setup'] / sa['setup']:.1f} |", flush=True)
            out.append({"problem": label, a: s, b: k, "apart": apart, "sa": sa})
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
