"""A rank that raises stops every rank with its message (no hang), and the import rules."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ._mpi import HERE, launch


@pytest.mark.parametrize("nprocs,failing", [(2, 1), (4, 2)])
def test_raising_rank_aborts_the_job_with_its_message(nprocs, failing):
    result = launch(HERE / "raising_rank.py", nprocs, str(failing), timeout=60)
    assert result.returncode != 0
    assert (f"rank {failing} of {nprocs} failed: ValueError: deliberate failure on rank "
            f"{failing}") in result.stderr
    assert "unreachable" not in result.stdout


def test_import_ddops_does_not_import_mpi4py():
    code = "import sys, ddops; assert 'mpi4py' not in sys.modules, 'mpi4py imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_missing_mpi4py_names_the_extra():
    # a None entry in sys.modules makes "from mpi4py import MPI" raise ImportError
    code = ("import sys; sys.modules['mpi4py'] = None\n"
            "try:\n    import ddops.distributed\nexcept ImportError as exc:\n"
            "    print(exc)\nelse:\n    raise SystemExit('no ImportError')\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, check=True)
    assert "ddops[mpi]" in result.stdout and "'mpi' extra" in result.stdout
