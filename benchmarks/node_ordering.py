"""Minimum degree on the node graph against minimum degree on the unknowns' graph.

For the elasticity problems of ``setup_profile.py`` (the set-up issue's; block size 2 and
3) and, with ``--beam N``, the homogeneous 3D elasticity beam of ``cost3d.py``
(``fem_elasticity_3d(N, length=4)``, ``N = 25``: 227,448 unknowns, METIS parts of the
default size), ``ddops.TwoLevelSchwarz`` with GDSW, AGDSW and GenEO (``--coarse``; the
adaptive spaces with the finite-element Neumann matrices, assembled once and not timed, or
with ``--algebraic`` from ``A`` alone, oversampled, whose eigenproblems order their own
chunks) set up twice: with PARDISO's minimum degree on the unknowns' graph
(``ddops.linalg.local_solvers.PARDISO_NODE_MINIMUM_DEGREE`` off, the ordering before) and on
the node graph (on, the default), then CG to ``rtol = 1e-8`` from zero on a random
right-hand side.  The two ways and pyamg's smoothed aggregation (rigid body modes) alternate
in rounds, one BLAS/MKL thread, best of ``--repeat`` by set-up + solve; the decomposition is
built once per problem and not timed.  Prints the set-up and set-up + solve (wall / process
CPU seconds), the iterations, the local factors' nonzeros, and how far apart the two
preconditioners apply (relative to the largest entry).  Needs PARDISO (``ddops[solvers]``);
without it the two ways are the same.

    python benchmarks/node_ordering.py                    # 2D and 3D elasticity (~3 min)
    python benchmarks/node_ordering.py --coarse gdsw --beam 25 --problems
    python benchmarks/node_ordering.py --coarse geneo agdsw --algebraic
    python benchmarks/node_ordering.py --quick            # small sizes
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from agdsw_indicator import add_round_flags, build  # noqa: E402
from common import machine_summary, space_options, timed_sa_setup, timed_setup  # noqa: E402
from setup_profile import PROBLEMS  # noqa: E402

WAYS = ("unknowns", "nodes")
#: the elasticity problems of setup_profile.py (the default of --problems)
ELASTICITY = [i for i, p in enumerate(PROBLEMS) if p[1] == "elasticity"]


def beam(n: int):
    """The homogeneous beam of ``cost3d.py``: ``(label, problem, decomposition, None)``."""
    import scipy.sparse as sp

    import ddops
    from ddops.problems.fem import fem_elasticity_3d

    A, X = fem_elasticity_3d(n, length=4)
    A = sp.csr_matrix(A)
    prob = SimpleNamespace(A=A, null_space=ddops.rigid_body_modes(X))
    return ("3D elasticity beam, homogeneous", prob,
            ddops.Decomposition.from_matrix(A, block_size=3), None)


def problems(args: argparse.Namespace, neumann: bool = True):
    """``(label, problem, decomposition, neumann)`` of every chosen problem (the
    finite-element Neumann matrices where the problem has them and ``neumann``, else None)."""
    for i in (ELASTICITY if args.problems is None else args.problems):
        label, _, full_flags, quick_flags = PROBLEMS[i]
        prob, d = build(quick_flags if args.quick else full_flags)
        yield label, prob, d, (prob.neumann(d) if neumann and prob.neumann is not None
                               else None)
    if args.beam:
        yield beam(6 if args.quick else args.beam)


def add_beam_flag(parser: argparse.ArgumentParser) -> None:
    """``--beam N``: also the homogeneous beam (:func:`beam`)."""
    parser.add_argument("--beam", type=int, default=0, metavar="N",
                        help="also the homogeneous beam fem_elasticity_3d(N, length=4) "
                             "(25: 227,448 unknowns; default 0, not run)")


def solve(A, M, b) -> tuple[int, float, float]:
    """CG to rtol 1e-8 from zero: iterations, wall and CPU seconds."""
    import scipy.sparse.linalg as spla

    its = [0]
    wall, cpu = time.perf_counter(), time.process_time()
    _, info = spla.cg(A, b, rtol=1e-8, M=M, maxiter=5000,
                      callback=lambda _: its.__setitem__(0, its[0] + 1))
    return (its[0] if info == 0 else -1, time.perf_counter() - wall,
            time.process_time() - cpu)


def main(argv=None) -> int:
    from threadpoolctl import threadpool_limits

    from ddops.linalg import local_solvers

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_round_flags(parser)
    parser.set_defaults(problems=None)
    parser.add_argument("--coarse", nargs="*", default=["gdsw", "agdsw", "geneo"],
                        choices=["gdsw", "agdsw", "geneo"],
                        help="the coarse spaces (default: all three)")
    parser.add_argument("--algebraic", action="store_true",
                        help="the adaptive spaces from A alone (oversampled local matrices), "
                             "not the finite-element Neumann matrices")
    add_beam_flag(parser)
    args = parser.parse_args(argv)
    print(machine_summary(memory=True, ddops=True))
    print(f"one BLAS/MKL thread; wall / CPU seconds, best of {args.repeat} alternating rounds "
          "by set-up + solve; the decomposition not timed\n")
    print("| problem | coarse | set-up, unknowns | set-up, nodes | unknowns / nodes | "
          "its | factor nnz (unknowns, nodes) | set-up + solve, unknowns | "
          "set-up + solve, nodes | unknowns / nodes | M apart | pyamg SA set-up + solve "
          "(its) |")
    print("|---|---|---:|---:|---:|---|---|---:|---:|---:|---:|---:|")
    out = []
    with threadpool_limits(1):
        for label, prob, d, neumann in problems(args):
            neumann = None if args.algebraic else neumann
            A = prob.A.tocsr()
            b = np.random.default_rng(0).standard_normal(A.shape[0])
            x = np.random.default_rng(1).standard_normal(A.shape[0])
            for coarse in args.coarse:
                best: dict = {}
                applied = {}
                try:
                    for _ in range(max(args.repeat, 1)):
                        for way in (*WAYS, "sa"):
                            if way == "sa":
                                ml, setup, setup_cpu = timed_sa_setup(prob)
                                M = ml.aspreconditioner()
                                r = {"factor_nnz": 0}
                            else:
                                local_solvers.PARDISO_NODE_MINIMUM_DEGREE = way == "nodes"
                                M, setup, setup_cpu = timed_setup(
                                    prob, d, space_options(prob, coarse, neumann))
                                r = {"factor_nnz": int(M.stats["factor_nnz"])}
                                applied[way] = M @ x
                            its, sw, sc = solve(A, M, b)
                            del M
                            r.update(setup=setup, setup_cpu=setup_cpu, iterations=its,
                                     total=setup + sw, total_cpu=setup_cpu + sc)
                            if way not in best or r["total"] < best[way]["total"]:
                                best[way] = r
                finally:
                    local_solvers.PARDISO_NODE_MINIMUM_DEGREE = True
                u, n, sa = (best[w] for w in (*WAYS, "sa"))
                apart = float(np.abs(applied["unknowns"] - applied["nodes"]).max()
                              / np.abs(applied["unknowns"]).max())
                print(f"| {label}, {A.shape[0]:,} unknowns | {coarse} | "
                      f"{u['setup']:.3f} / {u['setup_cpu']:.3f} | "
                      f"{n['setup']:.3f} / {n['setup_cpu']:.3f} | "
                      f"{u['setup'] / n['setup']:.2f} | {u['iterations']}, {n['iterations']} | "
                      f"{u['factor_nnz']:,}, {n['factor_nnz']:,} | "
                      f"{u['total']:.3f} / {u['total_cpu']:.3f} | "
                      f"{n['total']:.3f} / {n['total_cpu']:.3f} | "
                      f"{u['total'] / n['total']:.2f} | {apart:.1e} | "
                      f"{sa['total']:.3f} / {sa['total_cpu']:.3f} ({sa['iterations']}) |",
                      flush=True)
                out.append({"problem": label, "coarse": coarse, "unknowns": u, "nodes": n,
                            "sa": sa, "apart": apart})
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
