"""Under ``mpiexec -n 2``: a set-up that fails on rank 1 only raises on both ranks.

Each case builds a matrix whose rank-1 part alone is bad and runs PETSc's CG
with ``ddops.petsc.SchwarzPC`` (``_cases.petsc_cg``); every rank prints one
line ``RESULT {"case", "rank", "type", "message"}`` (``type`` None when the
solve went through).  Before the agreement on failures, rank 0 went on into
the solve and waited in its first halo exchange for ever.

* ``block``: 11 rows split 6 + 5 with ``-ddops_block_size 3``: rank 1's rows
  ``[6, 11)`` are no whole blocks (the decomposition's rank-local checks);
* ``local``: ``diag(T, -T)`` (``T`` the 1D Laplacian, one subdomain per rank,
  one level): rank 1's subdomain matrix is negative definite (its local
  factorisation, the set-up's last step);
* ``symmetric``: the 1D Laplacian with ``A[25, 26]`` changed (rank 1's rows):
  rank 1's region block is not symmetric (one level: no collective after it);
* ``abort`` (alone, with ``--agree-seconds``): the same matrix with GDSW, whose
  interface is gathered after that check, so rank 0 waits in a collective
  that rank 1 left: rank 1 aborts the job with its message after the wait.
"""

from __future__ import annotations

import argparse
import json
import sys

import petsc4py

petsc4py.init([sys.argv[0]])  # the worker's own arguments are not PETSc options

import _cases  # noqa: E402
import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
from petsc4py import PETSc  # noqa: E402

import ddops.petsc._collective as collective  # noqa: E402


def laplacian_1d(n: int) -> sp.csr_matrix:
    return sp.diags([-np.ones(n - 1), 2.0 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1]).tocsr()


def matrix(A: sp.csr_matrix, local_rows: int):
    """``A`` as an mpiaij matrix with ``local_rows`` rows on this rank."""
    n = A.shape[0]
    P = PETSc.Mat().createAIJ(((local_rows, n), (local_rows, n)), comm=PETSc.COMM_WORLD)
    P.setUp()
    rstart, rend = P.getOwnershipRange()
    rows = A[rstart:rend]
    P.setPreallocationCSR((rows.indptr.astype(PETSc.IntType),
                           rows.indices.astype(PETSc.IntType), rows.data))
    P.assemble()
    return P


def problem(case: str, rank: int):
    """``(A, rows of this rank, -ddops_* options)``."""
    if case == "block":
        return laplacian_1d(11), (6, 5)[rank], {"ddops_block_size": 3, "ddops_subdomains": 2,
                                                "ddops_coarse": "none"}
    if case == "local":
        T = laplacian_1d(20)
        return sp.block_diag([T, -T]).tocsr(), 20, {"ddops_subdomains": 2,
                                                    "ddops_coarse": "none"}
    A = laplacian_1d(40).tolil()
    A[25, 26] += 0.5  # rank 1's rows 20..39: its region block is not symmetric
    coarse = "gdsw" if case == "abort" else "none"
    return A.tocsr(), 20, {"ddops_subdomains": 2, "ddops_coarse": coarse}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", default="block,local,symmetric")
    parser.add_argument("--agree-seconds", type=float, default=None)
    args = parser.parse_args()
    if args.agree_seconds is not None:
        collective.AGREE_SECONDS = args.agree_seconds
    rank = PETSc.COMM_WORLD.getRank()
    for k, case in enumerate(args.cases.split(",")):
        A, local_rows, options = problem(case, rank)
        P = matrix(A, local_rows)
        record = {"case": case, "rank": rank, "type": None, "message": ""}
        try:
            _, _, ksp = _cases.petsc_cg(P, np.ones(A.shape[0]), f"f{k}_",
                                        {"ddops_partitioner": "contiguous", **options})
            ksp.destroy()
        except Exception as exc:  # noqa: BLE001 - reported to the test
            record.update(type=type(exc).__name__, message=str(exc))
        P.destroy()
        print("RESULT " + json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
