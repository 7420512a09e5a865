"""2D Poisson with PETSc's CG and PCMG built from the ddops decomposition (the native route).

Every rank assembles only its own rows of the 5-point Laplacian on an
``n x n`` grid; :func:`ddops.petsc.native.setup_native` cuts them into the
ddops subdomains (PCASM) and assembles its own rows of the GDSW coarse basis
Phi (the PCMG interpolation).  All solves are PETSc's, so the coarse solver
is chosen on the command line, for example on a subset of the ranks::

    mpiexec -n 4 python examples/petsc_native.py -ksp_monitor \\
        -mg_coarse_pc_type telescope -mg_coarse_pc_telescope_reduction_factor 4 \\
        -mg_coarse_telescope_pc_type lu

Options of this script: ``-n`` (grid points per direction, default 256).
``-ddops_coarse``, ``-ddops_subdomains``, ``-ddops_overlap`` ... change the
decomposition and the coarse space (see the PETSc page of the documentation);
``-ksp_view`` prints the PCMG that PETSc runs.
"""

import sys

import petsc4py

petsc4py.init(sys.argv)

from petsc4py import PETSc  # noqa: E402
from petsc_schwarz import poisson_cg, reason_name  # noqa: E402  (the script's folder is on sys.path)

from ddops.petsc import setup_native  # noqa: E402


def main() -> None:
    comm = PETSc.COMM_WORLD
    n, A, ksp = poisson_cg(comm)  # the same problem and CG as examples/petsc_schwarz.py
    start = PETSc.Log.getTime()
    native = setup_native(ksp, coarse="gdsw")  # -ddops_* override the keywords
    ksp.setFromOptions()  # -mg_coarse_*, -pc_mg_type, -mg_levels_* ...

    b = A.createVecLeft()
    b.set(1.0)
    x = b.duplicate()
    ksp.solve(b, x)
    seconds = PETSc.Log.getTime() - start
    r = b.duplicate()
    A.mult(x, r)
    r.aypx(-1.0, b)
    for line in native.summary():
        PETSc.Sys.Print(line)
    coarse = ksp.getPC().getMGCoarseSolve().getPC().getType() if native.coarse_dim else "none"
    PETSc.Sys.Print(f"{n * n} unknowns on {comm.getSize()} ranks, coarse solver {coarse}: "
                    f"{ksp.getIterationNumber()} iterations ({reason_name(ksp)}), "
                    f"|b - A x| / |b| = {r.norm() / b.norm():.2e}, set-up + solve "
                    f"{seconds:.2f} s")
    for obj in (ksp, A, b, x, r):
        obj.destroy()
    native.destroy()


if __name__ == "__main__":
    main()
