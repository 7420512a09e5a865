"""GenEO from each rank's own rows: set-up time and peak memory, 1 rank against P ranks.

The problem: the 2D floating channels of ``ddops precond`` (contrast ``--contrast``,
``n^2`` unknowns, ``parts x parts`` boxes, overlap 1; diagonally dominant: GenEO's cut local
matrices) or, with ``--problem elasticity2d``, its 2D elasticity with stiff inclusions
(``parts^2`` METIS parts, the rigid body modes; oversampled local matrices).
:class:`ddops.distributed.DistributedTwoLevelSchwarz` builds GenEO rank-locally: each rank
solves its own subdomains' eigenproblems from the rows they reach; no rank gathers the
matrix.  Each run is one ``mpiexec -n P`` job of this script (``--worker``); every rank
builds the matrix, keeps its own rows and drops the rest before the set-up.  Reported per
rank: the set-up's wall seconds and its peak of Python-visible memory (``tracemalloc``:
numpy arrays and scipy matrices, not MKL's PARDISO factors), the coarse dimension, the
construction and whether the matrix was gathered, and CG iterations (``rtol = 1e-8``).
The target of the issue: on 2 ranks no rank's set-up peak above 0.6 times the serial one.
``--gathered`` builds the serial space on the gathered matrix instead (``local_basis=False``,
the construction before the rank-local one), for comparison; ``--coarse agdsw`` measures
AGDSW instead of GenEO.

    OMP_NUM_THREADS=1 python benchmarks/distributed_geneo.py --n 511 --parts 16 --ranks 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

TARGET = 0.6


def worker(args: argparse.Namespace) -> None:
    import numpy as np
    from threadpoolctl import threadpool_limits

    import ddops
    from ddops.distributed import DistributedLayout, DistributedMatrix, guard, world
    from ddops.distributed.krylov import cg
    from ddops.distributed.precond import DistributedTwoLevelSchwarz
    from ddops.problems import diffusion_2d, high_contrast_channels

    comm = world()
    with guard(comm), threadpool_limits(1):
        n = args.n
        Z = None
        if args.problem == "channels":
            A = diffusion_2d(high_contrast_channels(n, args.contrast, margin=2))
            d = ddops.Decomposition.from_grid((n, n), (args.parts, args.parts), overlap=1)
        else:  # ddops precond's 2D elasticity with stiff inclusions (rigid body modes)
            from ddops.experiments.precond import PrecondConfig, build_problem, decompose

            c = PrecondConfig(problem="elasticity2d", n=n, contrast=args.contrast,
                              subdomains=args.parts ** 2).validated()
            prob = build_problem(c)
            d, _, _ = decompose(c, prob)
            A, Z = prob.A.tocsr(), prob.null_space
        owned = DistributedLayout(d, comm).owned
        rows = A[owned].tocsr()
        del A
        L = DistributedLayout(d, comm, A=rows)
        tracemalloc.start()
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        start = time.perf_counter()
        M = DistributedTwoLevelSchwarz(L, rows, args.coarse, null_space=Z,
                                       local_basis=not args.gathered)
        seconds = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1] - base
        tracemalloc.stop()
        b = np.random.default_rng(3).standard_normal(d.num_dofs)[L.owned]
        its = [0]
        _, info = cg(DistributedMatrix(L), b, rtol=1e-8, M=M,
                     callback=lambda _: its.__setitem__(0, its[0] + 1))
        record = {"seconds": seconds, "peak_bytes": peak, "coarse_dim": M.coarse_dim,
                  "construction": M.coarse_construction, "gathered": M.gathered_matrix,
                  "iterations": its[0], "info": info}
        records = comm.gather(record, root=0)
        if comm.Get_rank() == 0:
            Path(args.out).write_text(json.dumps(records))


def run(ranks: int, args: argparse.Namespace) -> list[dict]:
    out = Path(tempfile.mkdtemp()) / "r.json"
    launcher = Path(sys.executable).parent / "mpiexec"
    command = [str(launcher) if launcher.exists() else "mpiexec", "-n", str(ranks),
               sys.executable, __file__, "--worker", "--out", str(out), "--n", str(args.n),
               "--parts", str(args.parts), "--contrast", str(args.contrast),
               "--problem", args.problem, "--coarse", args.coarse]
    if args.gathered:
        command.append("--gathered")
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    subprocess.run(command, check=True, env=env)
    return json.loads(out.read_text())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=511)
    p.add_argument("--parts", type=int, default=16)
    p.add_argument("--contrast", type=float, default=1e6)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--problem", choices=("channels", "elasticity2d"), default="channels",
                   help="channels (diagonally dominant: the cut local matrices) or "
                        "elasticity2d (ddops precond's, --parts^2 METIS parts: oversampled)")
    p.add_argument("--coarse", choices=("geneo", "agdsw"), default="geneo",
                   help="the adaptive space (default geneo)")
    p.add_argument("--gathered", action="store_true",
                   help="local_basis=False: the serial GenEO on the gathered matrix (as before "
                        "the rank-local build), for comparison")
    p.add_argument("--json")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args)
        return 0
    serial, parallel = run(1, args), run(args.ranks, args)
    what = "2D floating channels" if args.problem == "channels" else "2D elasticity"
    print(f"{what}, contrast {args.contrast:g}, n = {args.n}, {args.parts ** 2} subdomains; "
          f"{args.coarse}, one BLAS thread per rank")
    for label, records in (("1 rank", serial), (f"{args.ranks} ranks", parallel)):
        for r, rec in enumerate(records):
            print(f"  {label}, rank {r}: set-up {rec['seconds']:.2f} s, peak "
                  f"{rec['peak_bytes'] / 2**20:.1f} MiB, coarse dim {rec['coarse_dim']}, "
                  f"{rec['construction']}{', gathered' if rec['gathered'] else ''}, "
                  f"{rec['iterations']} CG iterations")
    ratio = max(r["peak_bytes"] for r in parallel) / serial[0]["peak_bytes"]
    print(f"largest rank's set-up peak / serial set-up peak: {ratio:.2f} "
          f"({'PASS' if ratio <= TARGET else 'MISS'} <= {TARGET})")
    if args.json:
        Path(args.json).write_text(json.dumps({"serial": serial, "parallel": parallel,
                                               "ratio": ratio}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
