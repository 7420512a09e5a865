"""Set-ups with the subdomains' elimination order shared, and without.

For every problem of ``setup_profile.py`` (the set-up issue's), ``ddops.TwoLevelSchwarz``
with GDSW (``--coarse`` for AGDSW or RGDSW) as it is built now, the local factorisation
first and its elimination order handed to the extension's interior problems
(``GDSWAnalysis.share_local_order``: the interior of part ``p`` eliminated in the order of
subdomain ``p``, no ordering step of its own), against the same set-up with every chunk of
interiors ordered by PARDISO itself (``OverlappingCorrection.elimination_positions``
patched to give no order). The two set-ups alternate in rounds, best of ``--repeat``, one
BLAS/MKL thread, the decomposition built once per problem and not timed. Prints the set-up
(wall / process CPU seconds), the extension phase, the interiors' factor nonzeros
(PARDISO's count over the chunks), the largest difference of the two bases relative to the
largest entry, and pyamg's smoothed aggregation set-up (rigid body modes on elasticity)
timed in the same rounds, the peer the set-up target names (PETSc GAMG and hypre
BoomerAMG: ``setup_profile.py --petsc-python``). ``--coarse geneo``: GenEO with the
finite-element Neumann matrices on the elasticity problems, whose eigenproblems'
factorisations take the subdomains' order instead of ordering (the eigenproblem phase
instead of the extension; nothing is shared on the scalar problems, where GenEO grows its
sets). On elasticity the subdomains' order is minimum degree on the node graph
(``PARDISO_NODE_MINIMUM_DEGREE``) and GenEO's own PARDISO's on the unknowns' graph: the
eigenvectors of the rigid modes' multiple eigenvalue then rotate, and its bases differ by
O(1) where the preconditioners agree to rounding (``node_ordering.py``). Needs PARDISO
(``ddops[solvers]``): without it nothing is shared and the two rows are the same.

    python benchmarks/shared_order.py                 # the six problems (about a minute)
    python benchmarks/shared_order.py --coarse agdsw --problems 0 3
    python benchmarks/shared_order.py --coarse geneo --problems 0 1
    python benchmarks/shared_order.py --quick         # small sizes
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from agdsw_indicator import add_round_flags, build  # noqa: E402
from common import machine_summary, timed_sa_setup, timed_setup  # noqa: E402
from setup_profile import PROBLEMS  # noqa: E402

WAYS = ("own", "shared")


def measure(prob, d, coarse: str, shared: bool, nnz: list, neumann=None) -> dict:
    """One set-up; ``nnz`` collects the interiors' factor nonzeros of its chunks (GDSW
    types); ``neumann``: GenEO's finite-element Neumann matrices."""
    import ddops
    from ddops.precond.corrections import OverlappingCorrection

    original = OverlappingCorrection.elimination_positions
    if not shared:
        OverlappingCorrection.elimination_positions = lambda self: None
    nnz.clear()
    try:
        space = ({"geneo": ddops.GenEOOptions(neumann=neumann)} if coarse == "geneo"
                 else {})
        options = ddops.SchwarzOptions(coarse=coarse, null_space=prob.null_space, **space)
        M, setup, setup_cpu = timed_setup(prob, d, options)
    finally:
        OverlappingCorrection.elimination_positions = original
    # GenEO: whether its eigenproblems took the order (one count), else the extension's
    # chunks that did
    chunks = (int(M.coarse_stats.get("shared_ordering", False)) if coarse == "geneo"
              else int(M.coarse.analysis.shared))
    phase = "eigenproblems" if coarse == "geneo" else "extension"
    return {"setup": setup, "setup_cpu": setup_cpu, "phase": M.setup_phases[phase],
            "factor_nnz": int(sum(nnz)), "shared_chunks": chunks, "Phi": M.coarse.Phi}


def sa_setup(prob) -> dict:
    """pyamg's smoothed aggregation set-up (rigid body modes on elasticity), the peer."""
    _, wall, cpu = timed_sa_setup(prob)
    return {"setup": wall, "setup_cpu": cpu}


def main(argv=None) -> int:
    from threadpoolctl import threadpool_limits

    from ddops.dd import analysis

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_round_flags(parser)
    parser.add_argument("--coarse", choices=("gdsw", "rgdsw", "agdsw", "geneo"),
                        default="gdsw",
                        help="the coarse space (default gdsw; geneo: with the "
                             "finite-element Neumann matrices where the problem has them, "
                             "assembled once and not timed)")
    args = parser.parse_args(argv)
    print(machine_summary(memory=True, ddops=True))
    print(f"{args.coarse}, one BLAS/MKL thread; set-up wall / CPU seconds, best of "
          f"{args.repeat} alternating rounds; the decomposition is not timed\n")
    phase = "eigenproblems" if args.coarse == "geneo" else "extension"
    print(f"| problem | set-up own | set-up shared | own / shared | {phase} s (own, shared) | "
          "interiors' factor nnz (own, shared) | shared chunks | bases apart | pyamg SA set-up | "
          "shared / SA |")
    print("|---|---:|---:|---:|---|---|---:|---:|---:|---:|")
    # the interiors' factor nonzeros, counted where the analysis factorises a chunk
    nnz: list = []
    factorize = analysis.factorize_blocks

    def counted(*a, **k):
        lu = factorize(*a, **k)
        nnz.append(getattr(lu, "nnz", 0))
        return lu

    analysis.factorize_blocks = counted
    out = []
    try:
        with threadpool_limits(1):
            for i in (args.problems if args.problems else range(len(PROBLEMS))):
                label, _, full_flags, quick_flags = PROBLEMS[i]
                prob, d = build(quick_flags if args.quick else full_flags)
                neumann = (prob.neumann(d) if args.coarse == "geneo"
                           and prob.neumann is not None else None)
                best: dict = {}
                for _ in range(max(args.repeat, 1)):
                    for way in (*WAYS, "sa"):
                        r = (sa_setup(prob) if way == "sa" else
                             measure(prob, d, args.coarse, way == "shared", nnz, neumann))
                        if way not in best or r["setup"] < best[way]["setup"]:
                            best[way] = r
                o, s = best["own"], best["shared"]
                P, Q = o.pop("Phi"), s.pop("Phi")
                apart = float(abs(P - Q).max() / abs(P).max()) if P.nnz else 0.0
                print(f"| {label}, {prob.A.shape[0]:,} unknowns | {o['setup']:.3f} / "
                      f"{o['setup_cpu']:.3f} | {s['setup']:.3f} / {s['setup_cpu']:.3f} | "
                      f"{o['setup'] / s['setup']:.2f} | {o['phase']:.3f}, "
                      f"{s['phase']:.3f} | {o['factor_nnz']:,}, {s['factor_nnz']:,} | "
                      f"{s['shared_chunks']} | {apart:.1e} | {best['sa']['setup']:.3f} / "
                      f"{best['sa']['setup_cpu']:.3f} | {s['setup'] / best['sa']['setup']:.1f} |",
                      flush=True)
                out.append({"problem": label, "own": o, "shared": s, "apart": apart,
                            "sa": best["sa"]})
    finally:
        analysis.factorize_blocks = factorize
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
