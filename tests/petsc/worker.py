"""Under ``mpiexec -n P``: PETSc CG with ``ddops.petsc.SchwarzPC`` against the serial library.

Every rank builds the test matrix, inserts only its own PETSc rows and runs
PETSc's CG with the PC chosen from the options database
(``-pc_type python -pc_python_type ddops.petsc.SchwarzPC -ddops_*``).  The
global matrix is used only for the serial references: the decomposition
grown by ``Decomposition.from_matrix`` from the owner labels the PC chose,
``TwoLevelSchwarz`` and scipy's CG.  Rank 0 writes one JSON record per case.
"""

from __future__ import annotations

import sys

import petsc4py

petsc4py.init([sys.argv[0]])  # the worker's own arguments are not PETSc options

import _cases  # noqa: E402
import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402
from petsc4py import PETSc  # noqa: E402

import ddops  # noqa: E402

#: The worker's cases (shared with the tests).
CASES = _cases.CASES


def run_case(case: str, k: int, comm, out: str) -> dict:
    name, coarse, overlap, variant, partitioner, null_choice = case.split("/")
    A, Z, b = _cases.problem(name)
    n = A.shape[0]
    P = _cases.petsc_matrix(A, PETSc.COMM_WORLD, b, Z)
    rhs = _cases.rhs(n)
    options = {"ddops_subdomains": _cases.PROBLEMS[name], "ddops_overlap": overlap,
               "ddops_coarse": coarse, "ddops_variant": variant,
               "ddops_partitioner": partitioner, "ddops_null_space": null_choice}
    its, reason, ksp = _cases.petsc_cg(P, rhs, f"c{k}_", options)
    pc = ksp.getPC()
    ctx = pc.getPythonContext()
    d = ctx.parts.decomposition
    rstart, rend = P.getOwnershipRange()
    owned_ok = (ctx.layout is None or (ctx.layout.num_owned == rend - rstart
                                       and np.array_equal(ctx.layout.owned,
                                                          np.arange(rstart, rend))))
    # one application on a random vector, gathered
    x = np.random.default_rng(3).standard_normal(n)
    xv = P.createVecLeft()
    xv.setArray(x[rstart:rend])
    yv = xv.duplicate()
    pc.apply(xv, yv)
    y = np.concatenate(comm.allgather(np.array(yv.getArray(readonly=True))))
    # the same parts from scipy rows, without PETSc (fetching rows from the global matrix)
    from ddops.petsc.decomposition import rank_decomposition_from_rows

    b_size = d.block_size
    again = rank_decomposition_from_rows(
        A[rstart:rend].tocsr(), (rstart, rend), comm if comm.Get_size() > 1 else None,
        fetch_rows=lambda wanted: A[wanted].tocsr(), subdomains=_cases.PROBLEMS[name],
        overlap=int(overlap), partitioner=partitioner, block_size=b_size)
    from_rows_ok = bool(np.array_equal(again.decomposition.owner, d.owner)
                        and np.array_equal(again.decomposition.indices, d.indices)
                        and np.array_equal(again.decomposition.sizes, d.sizes))
    null_space = _null_space_record(ctx, P, A, Z, coarse, comm)
    phi = _gathered_basis(ctx, comm, n)
    record = {"petsc_iterations": its, "petsc_reason": reason, "null_space": null_space,
              "from_rows_equal": bool(comm.allreduce(from_rows_ok, op=MPI.LAND)),
              "owned_equals_petsc_range": bool(comm.allreduce(owned_ok, op=MPI.LAND)),
              "num_subdomains": d.num_subdomains,
              "coarse_dim": int(ctx.preconditioner.coarse_dim),
              "construction": str(getattr(ctx.preconditioner, "coarse_construction", None)),
              "gathered": bool(getattr(ctx.preconditioner, "gathered_matrix", False)),
              "null_space_source": ctx.null_space_source,
              "replicated_integers": ctx.parts.replicated_integers,
              "fetched_rows": int(comm.allreduce(ctx.parts.fetched_rows)),
              "view": ctx.summary()}
    for obj in (xv, yv, ksp, P):
        obj.destroy()
    if comm.Get_rank() == 0:
        # the serial reference: overlap grown by ddops from the PC's owner labels
        ref = ddops.Decomposition.from_matrix(A, d.num_subdomains, int(overlap),
                                              partitioner=d.owner, block_size=b)
        record["same_decomposition"] = bool(
            np.array_equal(ref.sizes, d.sizes) and np.array_equal(ref.indices, d.indices))
        if comm.Get_size() == 1 and partitioner == "metis":  # METIS on the whole matrix
            metis = ddops.Decomposition.from_matrix(A, d.num_subdomains, int(overlap),
                                                    block_size=b)
            record["equals_from_matrix"] = bool(np.array_equal(metis.owner, d.owner)
                                                and np.array_equal(metis.indices, d.indices))
        serial_null = Z if (Z is not None and null_choice != "constant") else None
        s_its, s_info, M = _cases.serial_reference(A, ref, coarse, variant, serial_null, rhs)
        My = M.matvec(x)
        record.update(serial_iterations=s_its, serial_info=s_info,
                      serial_coarse_dim=int(M.coarse_dim),
                      apply_error=float(np.linalg.norm(y - My) / np.linalg.norm(My)))
        if phi is not None:
            ref = M.coarse_matrix.toarray()
            record["basis_gap"] = _cases.basis_gap(phi, ref)
    return record


def _gathered_basis(ctx, comm, n: int) -> np.ndarray | None:
    """The PC's coarse basis, every rank's own rows gathered (dense; None without one).

    On one rank the PC holds a serial ``TwoLevelSchwarz``: the comparison then checks that
    the options database reaches it (the same space, options and null space)."""
    M = ctx.preconditioner
    if getattr(M, "coarse_dim", 0) == 0:
        return None
    if ctx.layout is None:  # one rank: the serial preconditioner on the whole matrix
        return M.coarse_matrix.toarray()
    mine = M._Phi_ext[: ctx.layout.num_owned].tocoo()
    pieces = comm.allgather((ctx.layout.owned[mine.row], mine.col, mine.data))
    r, c, v = (np.concatenate(x) for x in zip(*pieces, strict=True))
    out = np.zeros((n, M.coarse_dim))
    out[r, c] = v
    return out


def _null_space_record(ctx, P, A, Z, coarse: str, comm) -> dict:
    """The rows of the near-null space each rank holds, against the global arrays.

    ``rows``: how many on every rank (``ctx.null_space_rows``); ``covers``: they
    include the rank's own rows and the interface of the PC's partition, found
    by ``interface_components`` on the global matrix; ``values``: the fetched
    rows equal the global null space, the others are zero.
    """
    from ddops.dd.gdsw import interface_components
    from ddops.petsc.pc import near_null_space, null_space_rows

    record = {"rows": comm.allgather(int(ctx.null_space_rows)), "n": int(A.shape[0])}
    if Z is None or comm.Get_size() == 1 or coarse == "none":
        return record
    d = ctx.parts.decomposition
    rows = null_space_rows(ctx.parts, comm, coarse)
    held = None if rows is None else np.zeros(A.shape[0], dtype=bool)
    covers = values = True
    if rows is not None:
        held[rows] = True
        rstart, rend = P.getOwnershipRange()
        interface = interface_components(A, d.owner, block_size=d.block_size).interface
        covers = bool(held[rstart:rend].all() and held[interface].all()
                      and rows.size == ctx.null_space_rows)
        got, _ = near_null_space(P, comm, "auto", rows)
        values = bool(np.allclose(got[held], Z[held], rtol=1e-14, atol=0.0)
                      and not got[~held].any())
    record.update(covers=bool(comm.allreduce(covers, op=MPI.LAND)),
                  values=bool(comm.allreduce(values, op=MPI.LAND)))
    return record


if __name__ == "__main__":
    _cases.worker_main(CASES, run_case)
