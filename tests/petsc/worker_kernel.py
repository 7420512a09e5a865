"""Under ``mpiexec -n P``: ``-ddops_kernel constants`` on a pure-Neumann Laplacian.

PETSc CG with ``ddops.petsc.SchwarzPC`` (the python route: on several ranks a
``DistributedTwoLevelSchwarz``) and a consistent right-hand side, against scipy's CG
with the serial ``TwoLevelSchwarz(kernel=ones)`` on the decomposition the PC built.
Rank 0 writes one JSON record per coarse space.
"""

from __future__ import annotations

import sys

import petsc4py

petsc4py.init([sys.argv[0]])  # the worker's own arguments are not PETSc options

import _cases  # noqa: E402
import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import scipy.sparse.linalg as spla  # noqa: E402
from petsc4py import PETSc  # noqa: E402

import ddops  # noqa: E402

#: The coarse spaces run (GDSW rank-local, Nicolaides by the serial code).
CASES = ["gdsw", "nicolaides"]


def neumann_laplacian_2d(m: int) -> sp.csr_matrix:
    """The 5-point Laplacian with homogeneous Neumann conditions: kernel = constants."""
    T = sp.diags([-np.ones(m - 1), 2 * np.ones(m), -np.ones(m - 1)], [-1, 0, 1]).tolil()
    T[0, 0] = T[-1, -1] = 1.0
    T = T.tocsr()
    return (sp.kron(T, sp.identity(m)) + sp.kron(sp.identity(m), T)).tocsr()


def run_case(case: str, k: int, comm, out: str) -> dict:
    A = neumann_laplacian_2d(24)
    n = A.shape[0]
    b = _cases.rhs(n)
    b -= b.mean()  # consistent: orthogonal to the kernel
    P = _cases.petsc_matrix(A, PETSc.COMM_WORLD)
    its, reason, ksp = _cases.petsc_cg(P, b, f"k{k}_", {
        "ddops_subdomains": 8, "ddops_coarse": case, "ddops_kernel": "constants"})
    ctx = ksp.getPC().getPythonContext()
    d = ctx.parts.decomposition
    record = {"petsc_iterations": its, "petsc_reason": reason,
              "kind": type(ctx.preconditioner).__name__,
              "dropped": int(ctx.preconditioner.coarse_stats["kernel_dropped"]),
              "coarse_dim": int(ctx.preconditioner.coarse_dim)}
    ksp.destroy()
    P.destroy()
    if comm.Get_rank() == 0:
        M = ddops.TwoLevelSchwarz(A, d, case, kernel=np.ones(n))
        count = [0]
        _, info = spla.cg(A, b, rtol=_cases.RTOL, atol=0.0, maxiter=1000, M=M,
                          callback=lambda _: count.__setitem__(0, count[0] + 1))
        record.update(serial_iterations=count[0], serial_info=int(info),
                      serial_coarse_dim=int(M.coarse_dim),
                      serial_dropped=int(M.coarse_stats["kernel_dropped"]))
    return record


if __name__ == "__main__":
    _cases.worker_main(CASES, run_case)
