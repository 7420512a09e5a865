"""Skipping without petsc4py, and running the PETSc worker under ``mpiexec``.

Without petsc4py (or, for the MPI tests, without mpi4py built for the same
MPI, or ``mpiexec``) the tests skip; with ``DDOPS_REQUIRE_PETSC=1`` (as in
CI) they fail instead.  ``mpiexec`` must be the launcher of the MPI that
petsc4py was built with (Debian's PETSc: Open MPI); ``DDOPS_PETSC_MPIEXEC``
names it when the first ``mpiexec`` on ``PATH`` is another one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

#: Seconds one ``mpiexec`` job may take before it is killed (generous: 2 shared cores).
TIMEOUT = 300


def required() -> bool:
    """Whether ``DDOPS_REQUIRE_PETSC`` turns skips into failures."""
    return os.environ.get("DDOPS_REQUIRE_PETSC", "") not in ("", "0")


def _missing(what: str) -> None:
    if required():
        pytest.fail(f"DDOPS_REQUIRE_PETSC is set but {what}")
    pytest.skip(what)


def petsc4py():
    """The ``petsc4py.PETSc`` module, or skip (fail with ``DDOPS_REQUIRE_PETSC``)."""
    try:
        from petsc4py import PETSc
    except ImportError as exc:
        _missing(f"petsc4py cannot be imported ({exc}; see docs/petsc.md)")
    return PETSc


def mpiexec() -> list[str]:
    """The launcher command, with Open MPI's flags for root and for more ranks than cores."""
    petsc4py()
    try:
        import mpi4py  # noqa: F401
    except ImportError as exc:
        _missing(f"mpi4py cannot be imported ({exc})")
    found = os.environ.get("DDOPS_PETSC_MPIEXEC") or shutil.which("mpiexec")
    if not found:
        _missing("mpiexec is not on PATH")
    # Open MPI refuses root even for --version unless told otherwise
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    probe = subprocess.run([found, "--version"], capture_output=True, text=True, env=env,
                           timeout=60)
    open_mpi = "Open MPI" in probe.stdout + probe.stderr or "OpenRTE" in probe.stdout
    flags = ["--allow-run-as-root", "--oversubscribe"] if open_mpi else []
    return [found, *flags]


def run_worker(nprocs: int, out: Path, *args: str, worker: str = "worker.py") -> dict:
    """Run ``worker`` (``worker.py`` or ``worker_native.py``) on ``nprocs`` ranks.

    Returns the JSON rank 0 wrote; fails on a non-zero exit status.
    """
    command = [*mpiexec(), "-n", str(nprocs), sys.executable, str(HERE / worker),
               "--out", str(out), *args]
    # from os.environ, never inherited: once petsc4py is imported here, MPI_Init has set Open
    # MPI's singleton variables in this process's C environment, and a child mpiexec that
    # inherits them exits with status 1 and no message
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT,
                                env=env, cwd=HERE.parents[1])
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{' '.join(command)} did not finish in {TIMEOUT} s (a hang?):\n"
                    f"{exc.stdout}\n{exc.stderr}")
    if result.returncode != 0:
        pytest.fail(f"mpiexec -n {nprocs} {worker} exited with {result.returncode}:\n"
                    f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return json.loads(out.read_text())


def run_example(script: str, *args: str) -> str:
    """Run ``examples/<script>`` on 2 ranks with ``args``; its standard output.

    The environment comes from os.environ (see :func:`run_worker`: a child mpiexec that
    inherits Open MPI's singleton variables exits with status 1 and no message).
    """
    path = HERE.parents[1] / "examples" / script
    command = [*mpiexec(), "-n", "2", sys.executable, str(path), *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT,
                            env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout
