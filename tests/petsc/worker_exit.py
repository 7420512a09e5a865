"""A plain petsc4py script: the ddops PC from the command line, every object left to the GC.

Run as ``mpiexec -n P python worker_exit.py -pc_type python -pc_python_type
ddops.petsc.SchwarzPC ...`` (all arguments are PETSc options).  It destroys
nothing, the usual style of petsc4py scripts: the KSP, its PC and the Python
context meet ``PetscFinalize`` at the interpreter's exit.  Rank 0 prints
``iterations <its> reason <reason>``; the test checks that and the exit status.
"""

import sys

import petsc4py

petsc4py.init(sys.argv)

import numpy as np  # noqa: E402
from petsc4py import PETSc  # noqa: E402

import ddops  # noqa: E402

n = PETSc.Options().getInt("grid", 48)
A = ddops.poisson_2d(n).tocsr()
P = PETSc.Mat().createAIJ([n * n, n * n], comm=PETSc.COMM_WORLD)
P.setUp()
rstart, rend = P.getOwnershipRange()
rows = A[rstart:rend]
P.setPreallocationCSR((rows.indptr.astype(PETSc.IntType), rows.indices.astype(PETSc.IntType),
                       rows.data))
P.assemble()
ksp = PETSc.KSP().create(comm=PETSc.COMM_WORLD)
ksp.setOperators(P)
ksp.setFromOptions()
b = P.createVecLeft()
b.setArray(np.ones(rend - rstart))
x = b.duplicate()
ksp.solve(b, x)
PETSc.Sys.Print(f"iterations {ksp.getIterationNumber()} reason {ksp.getConvergedReason()}")
