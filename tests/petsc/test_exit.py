"""A plain petsc4py script that leaves its KSP to the garbage collector exits cleanly.

petsc4py 3.18 destroys such a KSP inside ``PetscFinalize``, after the
interpreter is gone; a Python PC then crashed the exit (SEGV, ``MPI_ABORT``)
after a correct solve.  ``worker_exit.py`` destroys nothing; it runs on 1 and
2 ranks with both ddops PCs, and the iterations are those of the serial
library (scipy's CG with ``TwoLevelSchwarz`` on the same contiguous parts).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse.linalg as spla

import ddops

from . import _cases
from ._petsc import HERE, TIMEOUT, mpiexec

GRID, SUBDOMAINS = 48, 8


@pytest.fixture(scope="module")
def serial_iterations() -> int:
    """scipy CG with the serial library on the parts ``-ddops_partitioner contiguous`` cuts.

    On 1 and 2 ranks (2304 rows, 8 parts) they are 8 blocks of 288 consecutive rows.
    """
    A = ddops.poisson_2d(GRID).tocsr()
    labels = np.repeat(np.arange(SUBDOMAINS), A.shape[0] // SUBDOMAINS)
    d = ddops.Decomposition.from_matrix(A, SUBDOMAINS, 1, partitioner=labels)
    M = ddops.TwoLevelSchwarz(A, d, coarse_basis="gdsw")
    count = [0]
    _, info = spla.cg(A, np.ones(A.shape[0]), rtol=_cases.RTOL, atol=0.0, M=M,
                      callback=lambda _: count.__setitem__(0, count[0] + 1))
    assert info == 0
    return count[0]


@pytest.mark.parametrize("nprocs", [1, 2])
@pytest.mark.parametrize("pc", ["SchwarzPC", "NativePC"])
def test_script_without_destroy_exits_cleanly(pc, nprocs, serial_iterations):
    command = [*mpiexec(), "-n", str(nprocs), sys.executable, str(HERE / "worker_exit.py"),
               "-grid", str(GRID), "-ksp_type", "cg", "-ksp_norm_type", "unpreconditioned",
               "-ksp_rtol", str(_cases.RTOL), "-ksp_atol", "0", "-pc_type", "python",
               "-pc_python_type", f"ddops.petsc.{pc}", "-ddops_coarse", "gdsw",
               "-ddops_subdomains", str(SUBDOMAINS), "-ddops_partitioner", "contiguous"]
    # the environment from os.environ (see _petsc.run_worker)
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    result = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT, env=env,
                            cwd=HERE.parents[1])
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "SEGV" not in output and "MPI_ABORT" not in output
    found = re.search(r"iterations (\d+) reason (-?\d+)", result.stdout)
    assert found, output[-4000:]
    assert int(found.group(2)) > 0
    assert abs(int(found.group(1)) - serial_iterations) <= 1


def test_context_records_its_pc_until_destroyed():
    """The PC is recorded from ``setPythonContext`` until PETSc destroys the context (here by a
    change of type, as the exit hook does, and by ``PCDestroy``)."""
    from ._petsc import petsc4py

    PETSc = petsc4py()
    from ddops.petsc import NativePC, SchwarzPC
    from ddops.petsc._lifetime import live_handles

    for context in (SchwarzPC(), NativePC()):
        pc = PETSc.PC().create(comm=PETSc.COMM_SELF)
        pc.setType(PETSc.PC.Type.PYTHON)
        pc.setPythonContext(context)
        assert pc.handle in live_handles()
        pc.setType(PETSc.PC.Type.NONE)  # PETSc destroys the Python part
        assert pc.handle not in live_handles()
        pc.setType(PETSc.PC.Type.PYTHON)
        pc.setPythonContext(context)
        handle = pc.handle
        assert handle in live_handles()
        pc.destroy()
        assert handle not in live_handles()
