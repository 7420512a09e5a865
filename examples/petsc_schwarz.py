"""2D Poisson solved by PETSc's CG with the ddops two-level Schwarz preconditioner.

Every rank assembles only its own rows of the 5-point Laplacian on an
``n x n`` grid (no rank ever holds the whole matrix), then the KSP is set up
from the command line, for example::

    mpiexec -n 4 python examples/petsc_schwarz.py -ksp_monitor \\
        -pc_type python -pc_python_type ddops.petsc.SchwarzPC -ddops_coarse gdsw

Options of this script: ``-n`` (grid points per direction, default 256).
Without ``-pc_type`` the ddops PC is set from code (``pc.setPythonContext``);
``-pc_type gamg`` or ``-pc_type asm`` compare it with PETSc's own.  Add
``-ksp_view`` to print what the PC built, ``-ddops_subdomains``,
``-ddops_overlap``, ``-ddops_coarse rgdsw`` ... to change it (see the PETSc
page of the documentation).  The ddops PC needs petsc4py (and, on more than
one rank, mpi4py built for the same MPI).
"""

import sys

import petsc4py

petsc4py.init(sys.argv)

import numpy as np  # noqa: E402
from petsc4py import PETSc  # noqa: E402

from ddops.petsc import SchwarzPC  # noqa: E402


def laplacian_rows(n: int, rstart: int, rend: int):
    """CSR arrays of rows ``rstart .. rend - 1`` of the 5-point Laplacian (x fastest)."""
    rows = np.arange(rstart, rend)
    ix, iy = rows % n, rows // n
    cols = [rows, rows - 1, rows + 1, rows - n, rows + n]
    vals = [np.full(rows.size, 4.0)] + [np.full(rows.size, -1.0)] * 4
    keep = [np.ones(rows.size, bool), ix > 0, ix < n - 1, iy > 0, iy < n - 1]
    entries = [(r, c[k], v[k]) for c, v, k in zip(cols, vals, keep) for r in [rows[k]]]
    r = np.concatenate([e[0] for e in entries])
    c = np.concatenate([e[1] for e in entries])
    v = np.concatenate([e[2] for e in entries])
    order = np.lexsort((c, r))
    r, c, v = r[order], c[order], v[order]
    indptr = np.concatenate([[0], np.cumsum(np.bincount(r - rstart, minlength=rows.size))])
    return indptr.astype(PETSc.IntType), c.astype(PETSc.IntType), v


def poisson_cg(comm):
    """``(n, A, ksp)``: the Laplacian of ``-n`` (each rank its own rows) and a CG KSP on it
    stopping at ``||b - A x|| <= 1e-8 ||b||``."""
    n = PETSc.Options().getInt("n", 256)
    A = PETSc.Mat().createAIJ([n * n, n * n], comm=comm)
    A.setUp()
    rstart, rend = A.getOwnershipRange()
    A.setPreallocationCSR(laplacian_rows(n, rstart, rend))  # this rank's rows only
    A.assemble()
    ksp = PETSc.KSP().create(comm=comm)
    ksp.setOperators(A)
    ksp.setType(PETSc.KSP.Type.CG)
    ksp.setNormType(PETSc.KSP.NormType.UNPRECONDITIONED)
    ksp.setTolerances(rtol=1e-8)
    return n, A, ksp


def reason_name(ksp) -> str:
    """``KSPGetConvergedReason`` with its name: ``"converged reason 2, CONVERGED_RTOL"``."""
    reason = int(ksp.getConvergedReason())
    names = [k for k, v in vars(PETSc.KSP.ConvergedReason).items()
             if not k.startswith("_") and v == reason and k != "ITERATING"]
    return f"converged reason {reason}, {names[0] if names else 'unknown'}"


def main() -> None:
    comm = PETSc.COMM_WORLD
    n, A, ksp = poisson_cg(comm)
    pc = ksp.getPC()
    pc.setType(PETSc.PC.Type.PYTHON)
    pc.setPythonContext(SchwarzPC(coarse="gdsw"))  # the command line may override all of it
    ksp.setFromOptions()

    b = A.createVecLeft()
    b.set(1.0)
    x = b.duplicate()
    start = PETSc.Log.getTime()
    ksp.solve(b, x)
    seconds = PETSc.Log.getTime() - start
    r = b.duplicate()
    A.mult(x, r)
    r.aypx(-1.0, b)
    PETSc.Sys.Print(f"{n * n} unknowns on {comm.getSize()} ranks: {ksp.getIterationNumber()} "
                    f"iterations ({reason_name(ksp)}), |b - A x| / |b| = "
                    f"{r.norm() / b.norm():.2e}, set-up + solve {seconds:.2f} s")
    # destroyed here rather than left to the garbage collector: PETSc frees them now, not in
    # PetscFinalize at the interpreter's exit
    for obj in (ksp, A, b, x, r):
        obj.destroy()


if __name__ == "__main__":
    main()
