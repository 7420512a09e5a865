"""Running a script under ``mpiexec`` from an ordinary pytest process.

The distributed tests do not run pytest on every rank: each test module
launches ``mpiexec -n P python <script>`` in a subprocess with a timeout, so a
hang kills the job instead of the test run, and reads back what rank 0 wrote
(a JSON file of measured numbers that the test then asserts on).

Without mpi4py or ``mpiexec`` the tests skip; with ``DDOPS_REQUIRE_MPI`` set
(as in CI) they fail instead.
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
TIMEOUT = 180


def _required() -> bool:
    return os.environ.get("DDOPS_REQUIRE_MPI", "") not in ("", "0")


def mpiexec() -> str:
    """Path of ``mpiexec`` (next to the interpreter first: the mpich wheel installs it there)."""
    try:
        import mpi4py  # noqa: F401
    except ImportError as exc:
        if _required():
            pytest.fail(f"DDOPS_REQUIRE_MPI is set but mpi4py cannot be imported: {exc}")
        pytest.skip("mpi4py is not installed (the 'mpi' extra)")
    local = Path(sys.executable).parent / "mpiexec"
    found = str(local) if local.exists() else shutil.which("mpiexec")
    if found is None:
        if _required():
            pytest.fail("DDOPS_REQUIRE_MPI is set but mpiexec is not on PATH")
        pytest.skip("mpiexec is not available")
    return found


def launch(script: str | Path, nprocs: int, *args: str, timeout: float = TIMEOUT,
           env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``mpiexec -n nprocs python script args...``; return the completed process.

    One BLAS thread per rank (the ranks share two cores).  A job that outlives
    ``timeout`` fails the calling test with its output so far.
    """
    environment = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
                       MKL_NUM_THREADS="1", PYTHONHASHSEED="0")
    environment.update(env or {})
    command = [mpiexec(), "-n", str(nprocs), sys.executable, str(script), *map(str, args)]
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              env=environment, cwd=HERE.parents[1])
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{' '.join(command)} did not finish in {timeout} s (a hang?):\n"
                    f"{exc.stdout}\n{exc.stderr}")


def run_json(script: str | Path, nprocs: int, out: Path, *args: str) -> dict:
    """Launch ``script`` with ``--out out`` and return the JSON it wrote (fails on rc != 0)."""
    result = launch(script, nprocs, "--out", str(out), *args)
    if result.returncode != 0:
        pytest.fail(f"mpiexec -n {nprocs} {Path(script).name} exited with {result.returncode}:\n"
                    f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return json.loads(out.read_text())
