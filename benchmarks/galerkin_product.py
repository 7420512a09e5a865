"""The coarse matrix ``A_0 = Phi^T A Phi`` of a GDSW basis: three ways to form the product.

For the problems of ``setup_profile.py`` (and, with ``--beam N``, the homogeneous 3D
elasticity beam of ``cost3d.py``), GDSW's basis ``Phi`` and its interface rows ``G`` (outside
which ``A Phi`` vanishes: the columns are discrete harmonic) are built once, untimed, and
``A_0`` is formed, one BLAS thread, in rounds that alternate

* ``scipy``: ``Phi_G.T @ (A_G Phi)``, scipy's product of a transposed (CSC) matrix with a
  CSR one, which converts the larger factor ``(A Phi)_G`` to CSC first (how the set-up
  formed it before :func:`ddops.dd.coarse_matrix.galerkin_matrix`);
* ``interface``: ``galerkin_matrix`` forming ``(A Phi)_G`` with ``Phi_G^T`` in CSR;
* ``interior``: ``galerkin_matrix`` through the interior coupling, ``Phi_G^T A_GG Phi_G +
  (A_IG Phi_G)^T Phi_I`` (no ``(A Phi)_G``).

Prints the best wall and process CPU seconds of ``--repeat`` rounds, the peak of the
product's temporaries (tracemalloc, in a separate untimed run), which way the library's
rule (:data:`~ddops.dd.coarse_matrix.GALERKIN_SPLIT_MIN`) takes, and how far the results
are apart (relative to the largest entry of ``A_0``).  Beside them, once per problem before the
rounds: GDSW's whole set-up with the library's way (wall / CPU seconds, its coarse assembly
phase in brackets) and pyamg's smoothed aggregation set-up (rigid body modes on elasticity),
the peer.

    python benchmarks/galerkin_product.py                   # the six problems (~2 min)
    python benchmarks/galerkin_product.py --problems 1 --beam 25
    python benchmarks/galerkin_product.py --quick
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    add_json_flag,
    add_quick_flag,
    machine_summary,
    timed_sa_setup,
    timed_setup,
)
from node_ordering import add_beam_flag, problems  # noqa: E402
from setup_profile import PROBLEMS  # noqa: E402

WAYS = ("scipy", "interface", "interior")


def product(way: str, A, Phi, rows):
    """``A_0`` formed the way ``way``."""
    import ddops.dd.coarse_matrix as cm

    if way == "scipy":
        A0 = (Phi[rows].T @ (A[rows] @ Phi)).tocsr()
        return ((A0 + A0.T) * 0.5).tocsr()
    saved = cm.GALERKIN_SPLIT_MIN
    cm.GALERKIN_SPLIT_MIN = np.inf if way == "interface" else 0.0
    try:
        return cm.galerkin_matrix(A, Phi, rows)
    finally:
        cm.GALERKIN_SPLIT_MIN = saved


def main(argv=None) -> int:
    import warnings

    import scipy.sparse as sp
    from threadpoolctl import threadpool_limits

    import ddops
    import ddops.dd.coarse_matrix as cm

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_quick_flag(parser, "small sizes")
    add_json_flag(parser)
    parser.add_argument("--repeat", type=int, default=5, help="rounds (default 5)")
    parser.add_argument("--problems", type=int, nargs="*", default=None,
                        help="indices into setup_profile.py's problems (default: all; "
                             "none with --problems alone)")
    add_beam_flag(parser)
    args = parser.parse_args(argv)
    if args.problems is None:
        args.problems = list(range(len(PROBLEMS)))
    print(machine_summary(memory=True, ddops=True))
    print(f"one BLAS thread; best of {args.repeat} alternating rounds, wall / CPU seconds; "
          "peak MiB of the product's temporaries (tracemalloc)\n")
    print("| problem | unknowns | coarse dim | nnz(Phi) / nnz(A) | library's way | "
          + " | ".join(f"{w} s" for w in WAYS) + " | scipy / library | "
          + " | ".join(f"{w} MiB" for w in WAYS) + " | apart | GDSW set-up s (its coarse "
          "assembly) | pyamg SA set-up s |")
    print("|---|---:|---:|---:|---|" + "---:|" * (2 * len(WAYS) + 4))
    out = []
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for label, prob, d, _ in problems(args, neumann=False):
            A = sp.csr_matrix(prob.A)
            M, setup, setup_cpu = timed_setup(prob, d, ddops.SchwarzOptions(
                coarse="gdsw", null_space=prob.null_space))
            assembly = float(M.stats["phases"]["coarse_assembly"])
            Phi, rows = sp.csr_matrix(M.coarse_matrix), M.coarse_info.harmonic_interface
            del M
            _, sa, sa_cpu = timed_sa_setup(prob)
            best = {w: (np.inf, np.inf) for w in WAYS}
            results = {}
            for _ in range(max(args.repeat, 1)):
                for way in WAYS:
                    wall, cpu = time.perf_counter(), time.process_time()
                    results[way] = product(way, A, Phi, rows)
                    t = (time.perf_counter() - wall, time.process_time() - cpu)
                    best[way] = min(best[way], t)
            peak = {}
            for way in WAYS:
                tracemalloc.start()
                product(way, A, Phi, rows)
                peak[way] = tracemalloc.get_traced_memory()[1] / 2**20
                tracemalloc.stop()
            scale = abs(results["scipy"]).max()
            apart = max(abs(results[w] - results["scipy"]).max() for w in WAYS[1:]) / scale
            ratio = Phi.nnz / A.nnz
            library = "interior" if ratio >= cm.GALERKIN_SPLIT_MIN else "interface"
            print(f"| {label} | {A.shape[0]:,} | {Phi.shape[1]:,} | {ratio:.2f} | {library} | "
                  + " | ".join(f"{best[w][0]:.4f} / {best[w][1]:.4f}" for w in WAYS)
                  + f" | {best['scipy'][0] / best[library][0]:.2f} | "
                  + " | ".join(f"{peak[w]:.0f}" for w in WAYS) + f" | {apart:.1e} | "
                  f"{setup:.3f} / {setup_cpu:.3f} ({assembly:.3f}) | {sa:.3f} / {sa_cpu:.3f} |")
            out.append({"problem": label, "unknowns": int(A.shape[0]),
                        "coarse_dim": int(Phi.shape[1]), "phi_to_a": ratio,
                        "library": library,
                        "seconds": {w: best[w][0] for w in WAYS},
                        "cpu_seconds": {w: best[w][1] for w in WAYS},
                        "peak_mib": peak, "apart": apart,
                        "setup": {"gdsw": setup, "gdsw_cpu": setup_cpu,
                                  "coarse_assembly": assembly, "sa": sa, "sa_cpu": sa_cpu}})
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
