"""The adaptive coarse spaces against PETSc's algebraic multigrid (hypre BoomerAMG, GAMG).

Run in the PETSc environment of ``docs/petsc.md`` (Debian's petsc4py, with PETSC_DIR set)::

    python benchmarks/petsc_peers.py            # about 6 minutes on two cores
    python benchmarks/petsc_peers.py --sections elasticity --dims 3 --mesh-3d 32 \
        --methods geneo_fe agdsw_fe sa gamg boomeramg   # 114,444 unknowns, ~6 min

On the high-contrast problems of the adaptive-coarse-space measurements (floating channels
2D, contrast 1e6, 64 boxes of 32 x 32 points; random bar inclusions 3D, contrast 1e6, 216
boxes of 6^3 points; log-normal 2D, contrast 1e8, 64 boxes of 16 x 16 points), one process
and one BLAS thread: CG to ``rtol = 1e-8`` (unpreconditioned residual norm, zero initial
guess, the same random right-hand side) with

* ddops GDSW, AGDSW and GenEO (additive two-level Schwarz, scipy's CG);
* PETSc KSPCG with ``-pc_type hypre -pc_hypre_type boomeramg`` (default options) and with
  ``-pc_type gamg`` (default options).

and on the elasticity problems with stiff inclusions of ``benchmarks/adaptive.py``
(contrast 1e6; 2D: 60 disks, 128 METIS parts; 3D: 20 balls, 64 parts), ddops GDSW, AGDSW
and GenEO with the finite-element Neumann matrices (their assembly counted in the set-up),
GenEO from the assembled matrix alone (oversampled local matrices), pyamg's smoothed
aggregation with the rigid body modes as ``B``, and GAMG with the rigid body modes as
near-null space (``MatSetNearNullSpace``) and BoomerAMG (scalar, default
options; it knows no near-null space).

``--sections`` picks the scalar or the elasticity problems, ``--dims`` the elasticity
dimensions, ``--mesh-3d`` the 3D mesh size (default 17: 19,494 unknowns; 32: 114,444,
the same 20 balls and 64 parts) and ``--methods`` the elasticity rows (default all:
``gdsw agdsw_fe geneo_fe geneo sa gamg boomeramg``).

Set-up is the preconditioner's construction (the decomposition excluded for ddops, as in
``benchmarks/adaptive.py``); solve is the Krylov iteration.  The table is printed as markdown.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import scipy.sparse.linalg as spla
from adaptive import elasticity_problem  # the same elasticity problems (benchmarks/)
from common import machine_summary
from petsc_setup_peers import peer_row  # one KSPCG run of a PETSc peer (benchmarks/)
from threadpoolctl import threadpool_limits

import ddops
from ddops.precond.options import coarse_options_from_dict
from ddops.problems import (
    diffusion_2d,
    diffusion_3d,
    high_contrast_channels,
    lognormal_field,
    random_inclusions,
)

RTOL = 1e-8
MAXITER = 2000


def problems():
    """``(name, A, decomposition)`` of the three high-contrast problems."""
    n = 255
    yield ("channels 2D 1e6", diffusion_2d(high_contrast_channels(n, 1e6, margin=1)),
           ddops.Decomposition.from_grid((n, n), (8, 8)))
    n = 35
    count = max(1, round((n + 1) ** 3 / 600))
    yield ("inclusions 3D 1e6", diffusion_3d(random_inclusions(n, dim=3, count=count,
                                                               contrast=1e6, seed=0)),
           ddops.Decomposition.from_grid((n, n, n), (6, 6, 6)))
    n = 127
    yield ("log-normal 2D 1e8", diffusion_2d(lognormal_field(n, correlation_length=0.8 / 8,
                                                             contrast=1e8, seed=0)),
           ddops.Decomposition.from_grid((n, n), (8, 8)))


def ddops_row(A, d, b, coarse, null_space=None, options=None, extra_setup=0.0):
    start = time.perf_counter()
    M = ddops.TwoLevelSchwarz(A, d, options=ddops.SchwarzOptions(
        coarse=coarse, null_space=null_space, **coarse_options_from_dict(coarse, options or {})))
    setup = time.perf_counter() - start
    its = [0]
    start = time.perf_counter()
    _, info = spla.cg(A, b, rtol=RTOL, maxiter=MAXITER, M=M,
                      callback=lambda _: its.__setitem__(0, its[0] + 1))
    solve = time.perf_counter() - start
    return its[0] if info == 0 else f">{MAXITER}", setup + extra_setup, solve


def pyamg_row(A, b, B):
    import pyamg

    start = time.perf_counter()
    M = pyamg.smoothed_aggregation_solver(A, B=B).aspreconditioner()
    setup = time.perf_counter() - start
    its = [0]
    start = time.perf_counter()
    _, info = spla.cg(A, b, rtol=RTOL, maxiter=MAXITER, M=M,
                      callback=lambda _: its.__setitem__(0, its[0] + 1))
    return its[0] if info == 0 else f">{MAXITER}", setup, time.perf_counter() - start


def petsc_row(PETSc, A, b, pc_type, extra, near_null=None, block_size=1):
    """``(iterations, set-up s, solve s)`` of KSPCG with ``pc_type`` (``petsc_setup_peers``)."""
    r = peer_row(PETSc, A, b, pc_type, extra, near_null, block_size, RTOL, MAXITER)
    its = r["iterations"] if r["converged"] else f">{MAXITER}"
    return its, r["setup_seconds"], r["solve_seconds"]


#: The elasticity rows: key -> label.
ELASTICITY_METHODS = {
    "gdsw": "ddops GDSW", "agdsw_fe": "ddops AGDSW, FE Neumann",
    "geneo_fe": "ddops GenEO, FE Neumann", "geneo": "ddops GenEO from A (oversampled)",
    "sa": "pyamg SA, B = rigid body modes",
    "gamg": "PETSc GAMG, near-null space = rigid body modes",
    "boomeramg": "PETSc hypre BoomerAMG"}


def elasticity_rows(PETSc, methods, A, d, b, Z, Ns, info, dim):
    """``(label, (iterations, set-up s, solve s))`` of the chosen elasticity methods."""
    fe = {"neumann": Ns}
    run = {"gdsw": lambda: ddops_row(A, d, b, "gdsw", Z),
           "agdsw_fe": lambda: ddops_row(A, d, b, "agdsw", Z, fe, info["neumann_s"]),
           "geneo_fe": lambda: ddops_row(A, d, b, "geneo", Z, fe, info["neumann_s"]),
           "geneo": lambda: ddops_row(A, d, b, "geneo", Z),
           "sa": lambda: pyamg_row(A, b, Z),
           "gamg": lambda: petsc_row(PETSc, A, b, "gamg", {}, near_null=Z, block_size=dim),
           "boomeramg": lambda: petsc_row(PETSc, A, b, "hypre",
                                          {"pc_hypre_type": "boomeramg"})}
    for key in methods:
        try:
            yield ELASTICITY_METHODS[key], run[key]()
        except Exception as exc:  # a failed row says so; the others still run
            yield ELASTICITY_METHODS[key], (f"failed: {type(exc).__name__}: {exc}", 0.0, 0.0)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sections", nargs="+", default=["scalar", "elasticity"],
                   choices=["scalar", "elasticity"])
    p.add_argument("--dims", nargs="+", type=int, default=[2, 3], choices=[2, 3])
    p.add_argument("--mesh-3d", type=int, default=17,
                   help="3D mesh size (17: 19,494 unknowns; 32: 114,444)")
    p.add_argument("--methods", nargs="+", default=list(ELASTICITY_METHODS),
                   choices=list(ELASTICITY_METHODS), help="the elasticity rows")
    args = p.parse_args(argv)
    if args.mesh_3d < 2:
        p.error("--mesh-3d must be >= 2")
    from petsc4py import PETSc

    print(machine_summary(memory=True, pyamg=True, ddops=True))
    print("| problem | method | CG iterations | set-up [s] | solve [s] | total [s] |")
    print("|---|---|---:|---:|---:|---:|")
    with threadpool_limits(limits=1, user_api="blas"):
        for name, A, d in problems() if "scalar" in args.sections else ():
            A = A.tocsr()
            b = np.random.default_rng(0).standard_normal(A.shape[0])
            rows = [(f"ddops {c.upper() if c != 'geneo' else 'GenEO'}",
                     ddops_row(A, d, b, c)) for c in ("gdsw", "agdsw", "geneo")]
            rows.append(("PETSc hypre BoomerAMG",
                         petsc_row(PETSc, A, b, "hypre", {"pc_hypre_type": "boomeramg"})))
            rows.append(("PETSc GAMG", petsc_row(PETSc, A, b, "gamg", {})))
            for method, (its, setup, solve) in rows:
                print(f"| {name} ({A.shape[0]} unknowns) | {method} | {its} | {setup:.2f} | "
                      f"{solve:.2f} | {setup + solve:.2f} |", flush=True)
        cases = (("elasticity 2D 1e6", 2, 158, 128, 60, 0.035),
                 ("elasticity 3D 1e6", 3, args.mesh_3d, 64, 20, 0.15))
        for name, dim, size, N, count, radius in cases:
            if "elasticity" not in args.sections or dim not in args.dims:
                continue
            A, d, Z, Ns, info = elasticity_problem(dim, size, N, 1e6, count, radius)
            A = A.tocsr()
            b = np.random.default_rng(0).standard_normal(A.shape[0])
            for method, (its, setup, solve) in elasticity_rows(PETSc, args.methods, A, d, b,
                                                               Z, Ns, info, dim):
                print(f"| {name} ({A.shape[0]} unknowns) | {method} | {its} | {setup:.2f} | "
                      f"{solve:.2f} | {setup + solve:.2f} |", flush=True)


if __name__ == "__main__":
    main()
