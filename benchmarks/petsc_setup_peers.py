"""PETSc's GAMG and hypre's BoomerAMG on a problem of ``ddops precond``: set-up and solve.

The peers' half of ``benchmarks/setup_profile.py --petsc-python PYTHON``: run with the
Python of the PETSc environment of ``docs/petsc.md`` (Debian's petsc4py, ``PETSC_DIR`` set),
it builds the matrix, the near-null space and the right-hand side exactly as
``ddops precond`` does for the same flags (the problem registry; the right-hand side drawn
from ``--seed``), and prints one JSON object: for GAMG (the near-null space attached with
``MatSetNearNullSpace`` when the problem has one, the block size set) and BoomerAMG (default
options; it takes no near-null space), the iterations, the set-up (``KSPSetUp``) and the
solve (``KSPSolve``) in wall and process CPU seconds.  CG to ``--rtol`` on the
unpreconditioned residual from a zero initial guess, as scipy's CG in ``ddops precond``.

    python benchmarks/petsc_setup_peers.py --problem elasticity3d --n 18 --contrast 1e6 \\
        --subdomains 64
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
from threadpoolctl import threadpool_limits

from ddops.experiments.precond import command_line
from ddops.experiments.precond.config import PrecondConfig
from ddops.experiments.precond.problem_registry import build_problem

#: The peers: (name, PCType, options under the peer's prefix, whether the near-null space
#: is given).
PEERS = (
    ("PETSc GAMG", "gamg", {}, True),
    ("hypre BoomerAMG", "hypre", {"pc_hypre_type": "boomeramg"}, False),
)


def peer_row(PETSc, A, b, pc_type, extra, near_null, block_size, rtol, maxiter) -> dict:
    """One KSPCG run with the preconditioner ``pc_type``: iterations and timings."""
    P = PETSc.Mat().createAIJ(size=A.shape, csr=(A.indptr, A.indices, A.data),
                              bsize=block_size)
    P.assemble()
    if near_null is not None:
        vectors = []
        for z in np.linalg.qr(near_null)[0].T:  # orthonormal, as PETSc requires
            v = P.createVecLeft()
            v.setArray(z)
            vectors.append(v)
        P.setNearNullSpace(PETSc.NullSpace().create(constant=False, vectors=vectors))
    ksp = PETSc.KSP().create()
    ksp.setOperators(P)
    ksp.setType("cg")
    ksp.setNormType(PETSc.KSP.NormType.UNPRECONDITIONED)
    ksp.setTolerances(rtol=rtol, atol=0.0, max_it=maxiter)
    prefix = f"peer_{pc_type}_"
    ksp.setOptionsPrefix(prefix)
    ksp.getPC().setType(pc_type)
    options = PETSc.Options()
    for key, value in extra.items():
        options[prefix + key] = value
    ksp.setFromOptions()
    x, rhs = P.createVecs()
    rhs.setArray(b)
    wall, cpu = time.perf_counter(), time.process_time()
    ksp.setUp()
    setup, setup_cpu = time.perf_counter() - wall, time.process_time() - cpu
    wall, cpu = time.perf_counter(), time.process_time()
    ksp.solve(rhs, x)
    solve, solve_cpu = time.perf_counter() - wall, time.process_time() - cpu
    converged = ksp.getConvergedReason() > 0
    row = {"iterations": ksp.getIterationNumber(), "converged": converged,
           "setup_seconds": setup, "setup_cpu_seconds": setup_cpu,
           "solve_seconds": solve, "solve_cpu_seconds": solve_cpu}
    ksp.destroy()
    P.destroy()
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    command_line.add_arguments(parser)  # the flags of ddops precond, the same spellings
    args = parser.parse_args(argv)
    try:
        from petsc4py import PETSc
    except ImportError as exc:
        print(f"petsc_setup_peers.py: petsc4py cannot be imported ({exc}); see docs/petsc.md",
              file=sys.stderr)
        return 2
    c = PrecondConfig(problem=args.problem, n=args.n, subdomains=args.subdomains,
                      contrast=args.contrast, null_space=args.null_space, seed=args.seed,
                      rtol=args.rtol, maxiter=args.maxiter, matrix=args.matrix,
                      block_size=args.block_size, coordinates=args.coordinates,
                      plots=False, progress=False).validated()
    prob = build_problem(c)
    A = prob.A.tocsr().astype(np.float64)
    A.sort_indices()
    n = A.shape[0]
    b = (np.random.default_rng(c.seed).standard_normal(n) if prob.rhs is None
         else prob.rhs.copy())
    maxiter = 2 * n if c.maxiter is None else c.maxiter
    threads = args.blas_threads or 1
    rows = {}
    with threadpool_limits(threads):
        for name, pc_type, extra, near in PEERS:
            rows[name] = peer_row(PETSc, A, b, pc_type, extra,
                                  prob.null_space if near else None,
                                  prob.block_size if near else 1, c.rtol, maxiter)
    near = 0 if prob.null_space is None else int(np.asarray(prob.null_space).shape[1])
    print(json.dumps({"unknowns": n, "petsc": ".".join(map(str, PETSc.Sys.getVersion())),
                      "near_null_space_columns": near, "rows": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
