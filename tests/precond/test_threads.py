"""``TwoLevelSchwarz(threads=)``: the set-up and every application run under the limit, the
PARDISO factorisation included (a fresh interpreter, where MKL is loaded only by the set-up)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import ddops
from ddops.precond.schwarz import TwoLevelSchwarz
from tests._optional import need

# Records the thread count of every pool at the PARDISO factorisation and at each
# application, with every pool at 2 threads from the environment.
_SPY = """
import json, sys
import numpy as np
from threadpoolctl import threadpool_info
import ddops
import ddops.linalg.local_solvers as ls
import ddops.precond.corrections as corrections
import ddops.precond.schwarz as schwarz

seen = {"factor": [], "apply": []}
def counts():
    return sorted({int(p["num_threads"]) for p in threadpool_info()})

factorize = corrections.factorize_blocks
def spy_factorize(*args, **kwargs):
    seen["factor"].append(counts())
    return factorize(*args, **kwargs)
corrections.factorize_blocks = spy_factorize
apply = schwarz.TwoLevelSchwarz._apply_unlimited
def spy_apply(self, X, adjoint):
    seen["apply"].append(counts())
    return apply(self, X, adjoint)
schwarz.TwoLevelSchwarz._apply_unlimited = spy_apply

threads = None if sys.argv[1] == "none" else int(sys.argv[1])
A = ddops.poisson_1d(400)
M = schwarz.TwoLevelSchwarz(A, ddops.Decomposition1D(400, 8, overlap=2),
                            local_solver="pardiso", threads=threads)
M @ np.ones(A.shape[0])
seen["after"] = counts()
print(json.dumps(seen))
"""


def _run(threads: str) -> dict:
    env = dict(os.environ, MKL_NUM_THREADS="2", OMP_NUM_THREADS="2",
               OPENBLAS_NUM_THREADS="2")
    done = subprocess.run([sys.executable, "-c", _SPY, threads], capture_output=True,
                          text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_threads_limit_the_pardiso_set_up_and_every_application():
    need("pardiso")
    seen = _run("1")
    assert seen["factor"] == [[1]]  # every pool, MKL (PARDISO's) included, at one thread
    assert seen["apply"] and all(c == [1] for c in seen["apply"])
    assert seen["after"] == [2]  # the limit is given back after each use


def test_without_threads_the_pools_keep_their_setting():
    """The reference of the test above: the environment's 2 threads reach the solvers."""
    need("pardiso")
    seen = _run("none")
    assert seen["factor"] == [[2]]
    assert all(c == [2] for c in seen["apply"])


@pytest.mark.parametrize("threads,error", [(0, ValueError), (1.5, TypeError),
                                           (True, TypeError), ("2", TypeError)])
def test_bad_threads_are_named(threads, error):
    A = ddops.poisson_1d(64)
    with pytest.raises(error, match="threads"):
        TwoLevelSchwarz(A, ddops.Decomposition1D(64, 4), threads=threads)


def test_threads_do_not_change_the_operator():
    A = ddops.poisson_1d(256)
    d = ddops.Decomposition1D(256, 8, overlap=2)
    X = np.random.default_rng(0).standard_normal((A.shape[0], 3))
    Y = TwoLevelSchwarz(A, d, threads=1) @ X
    np.testing.assert_allclose(Y, TwoLevelSchwarz(A, d) @ X, rtol=1e-13, atol=0)
