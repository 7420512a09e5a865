"""Under ``mpiexec -n P``: PETSc CG with the native route against the serial library.

The native route (:func:`ddops.petsc.native.setup_native`): PCMG with two
levels, PCASM (basic, LU) on the ddops subdomains, interpolation Phi as a
distributed Mat, Galerkin coarse operator, ``-pc_mg_type additive``; the
coarse solver from the options database.  The ``deflation`` cases use
``-ddops_variant hybrid`` (PCDEFLATION with Phi and PCASM) against the
serial ``hybrid`` variant.  Every rank inserts only its own
rows; rank 0 compares with the serial ``TwoLevelSchwarz(variant="additive")``
on the decomposition grown by ``Decomposition.from_matrix`` from the owner
labels the route chose, and writes one JSON record per case.
"""

from __future__ import annotations

import sys

import petsc4py

petsc4py.init([sys.argv[0]])  # the worker's own arguments are not PETSc options

import _cases  # noqa: E402
import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
from mpi4py import MPI  # noqa: E402
from petsc4py import PETSc  # noqa: E402

import ddops  # noqa: E402


def coarse_view(ksp, path: str, comm) -> str:
    """``-ksp_view`` of the KSP as text (read on rank 0; empty on the others)."""
    viewer = PETSc.Viewer().createASCII(path, comm=PETSc.COMM_WORLD)
    ksp.view(viewer)
    viewer.destroy()
    comm.Barrier()
    if comm.Get_rank() != 0:
        return ""
    with open(path) as f:
        return f.read()


def run_case(case: str, k: int, comm, out: str) -> dict:
    name, coarse, overlap, solver = case.split("/")
    A, Z, b = _cases.problem(name)
    n = A.shape[0]
    P = _cases.petsc_matrix(A, PETSc.COMM_WORLD, b, Z)
    rhs = _cases.rhs(n)
    variant = "hybrid" if solver.startswith("deflation") else "additive"
    ddops_options = {"subdomains": _cases.PROBLEMS[name], "overlap": overlap, "coarse": coarse,
                     "variant": variant}
    its, reason, ksp, native = _cases.native_cg(
        P, rhs, f"n{k}_", ddops_options, _cases.coarse_solver_options(solver, comm.Get_size()))
    pc = ksp.getPC()
    d = native.parts.decomposition
    rstart, rend = P.getOwnershipRange()
    # the rows of Phi this rank holds are its PETSc rows
    phi_rows_ok = native.Phi is None or native.Phi.getOwnershipRange() == (rstart, rend)
    x = np.random.default_rng(3).standard_normal(n)
    xv = P.createVecLeft()
    xv.setArray(x[rstart:rend])
    yv = xv.duplicate()
    pc.apply(xv, yv)
    y = np.concatenate(comm.allgather(np.array(yv.getArray(readonly=True))))
    record = {"petsc_iterations": its, "petsc_reason": reason, "pc_type": pc.getType(),
              "coarse_dim": native.coarse_dim, "null_space_source": native.null_space_source,
              "phi_rows_ok": bool(comm.allreduce(phi_rows_ok, op=MPI.LAND)),
              "local_subdomains": comm.allgather(len(native.subdomains)),
              "summary": native.summary()}
    if native.Phi is not None and variant == "additive":
        coarse_pc = pc.getMGCoarseSolve().getPC()
        record["coarse_pc_type"] = coarse_pc.getType()
        if solver.startswith("telescope"):
            record["view"] = coarse_view(ksp, f"{out}.view{k}", comm)
    phi = None
    if native.Phi is not None:  # its rows on every rank, gathered (dense, for the comparison)
        indptr, indices, values = native.Phi.getValuesCSR()
        local = sp.csr_matrix((values, indices, indptr), shape=(rend - rstart, native.coarse_dim))
        phi = np.vstack(comm.allgather(local.toarray()))
    for obj in (xv, yv, ksp, P):
        obj.destroy()
    native.destroy()
    if comm.Get_rank() == 0:
        ref = ddops.Decomposition.from_matrix(A, d.num_subdomains, int(overlap),
                                              partitioner=d.owner, block_size=b)
        serial_null = Z if Z is not None else None
        s_its, s_info, M = _cases.serial_reference(A, ref, coarse, variant, serial_null, rhs)
        My = M.matvec(x)
        record.update(serial_iterations=s_its, serial_info=s_info,
                      serial_coarse_dim=int(M.coarse_dim),
                      # PCDEFLATION applies (I - Q A) M (its initial guess adds Q b): not the
                      # hybrid operator, only the same iterations
                      apply_error=(float(np.linalg.norm(y - My) / np.linalg.norm(My))
                                   if variant == "additive" else None))
        if phi is not None:
            record["basis_gap"] = _cases.basis_gap(phi, M.coarse_matrix.toarray())
    return record


if __name__ == "__main__":
    _cases.worker_main(_cases.NATIVE_CASES, run_case)
