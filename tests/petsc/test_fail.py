"""A set-up that fails on one rank raises on every rank (or aborts the job), never hangs.

``worker_fail.py`` runs on 2 ranks with matrices whose rank-1 part alone is
bad (see its notes).  The subprocesses have a timeout: a hang, the behaviour
before the agreement on failures, fails the test instead of CI.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from ._petsc import HERE, mpiexec

#: Seconds a 2-rank run may take here (a few seconds when nothing hangs).
HANG = 120

#: The expected message of rank 1 in every case (rank 0 names rank 1 and repeats it).
MESSAGES = {
    "block": "block size 3 does not divide this rank's rows [6, 11)",
    "local": "subdomain 0, with 20 unknowns, is singular or not positive definite",
    "symmetric": "A is not symmetric: max |A - A^T| = 5.000e-01",
}


def _run(*args: str) -> subprocess.CompletedProcess:
    command = [*mpiexec(), "-n", "2", sys.executable, str(HERE / "worker_fail.py"), *args]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    # a session of its own: after a hang the whole job (mpiexec and the ranks) is killed
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=env, cwd=HERE.parents[1], start_new_session=True)
    try:
        stdout, stderr = job.communicate(timeout=HANG)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        stdout, stderr = job.communicate()
        pytest.fail(f"the 2-rank run did not finish in {HANG} s: a rank waits in a collective "
                    f"after another one failed\n{stdout[-2000:]}\n{stderr[-2000:]}")
    return subprocess.CompletedProcess(command, job.returncode, stdout, stderr)


@pytest.fixture(scope="module")
def records() -> dict:
    result = _run("--cases", ",".join(MESSAGES))
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    found = {}
    for line in result.stdout.splitlines():
        if "RESULT " in line:
            record = json.loads(line.split("RESULT ", 1)[1])
            found[record["case"], record["rank"]] = record
    return found


@pytest.mark.parametrize("case", list(MESSAGES))
def test_every_rank_raises_with_the_failing_ranks_message(records, case):
    failing, other = records[case, 1], records[case, 0]
    assert failing["type"] == "ValueError" and MESSAGES[case] in failing["message"]
    assert other["type"] == "ValueError"
    assert "failed on rank 1 of 2" in other["message"]
    assert MESSAGES[case] in other["message"]


def test_failure_between_collectives_aborts_with_the_message():
    """Rank 1 fails where rank 0 is already in the next collective (GDSW's interface gather):
    after the agreement's wait rank 1 aborts the job, and says why."""
    result = _run("--cases", "abort", "--agree-seconds", "3")
    assert result.returncode != 0
    assert "rank 1 of 2 failed in SchwarzPC.setUp" in result.stderr
    assert "aborting: ValueError: A is not symmetric" in result.stderr
