"""MKL's runtime behind the PARDISO solver: its integer interface, its threads, and whether
it loads at all (each in a fresh interpreter where the process state matters)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

import ddops
from ddops.linalg import local_solvers as ls
from tests._optional import need

_FACTOR_AND_SOLVE = """
import json
import numpy as np, scipy.sparse as sp
from ddops.linalg.local_solvers import factorize_blocks
one = sp.diags([-np.ones(9), 2.0 * np.ones(10), -np.ones(9)], [-1, 0, 1])
K = sp.block_diag([one, 3 * one + sp.identity(10)], format="csr")
b = np.arange(20.0)
x = factorize_blocks(K, [0, 10, 20], "pardiso").solve(b)
print(json.dumps(float(np.abs(x - np.linalg.solve(K.toarray(), b)).max())))
"""


def _run(code: str, **env: str | None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in env}
    environ.update({k: v for k, v in env.items() if v is not None})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=environ, timeout=120)


@pytest.mark.parametrize("layer", [None, "LP64", "ILP64"])
def test_pardiso_factor_and_solve_under_every_interface_layer(layer):
    """MKL_INTERFACE_LAYER=ILP64 makes plain ``pardiso`` read 64-bit integers: the solver
    calls ``pardiso_64`` with 64-bit arrays, so the process lives and solves right."""
    need("pardiso")
    done = _run(_FACTOR_AND_SOLVE, MKL_INTERFACE_LAYER=layer)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert json.loads(done.stdout.strip().splitlines()[-1]) < 1e-12


_THREADS = """
import ctypes, json
import threadpoolctl
from ddops.linalg.local_solvers import thread_limit

def mkl():
    libs = [i for i in threadpoolctl.threadpool_info() if i["internal_api"] == "mkl"]
    return libs, ctypes.CDLL(libs[0]["filepath"]) if libs else None

with thread_limit(1):
    libs, lib = mkl()
    inside = [i["num_threads"] for i in libs]
    inside_max = lib.MKL_Get_Max_Threads() if lib else None
libs, lib = mkl()
print(json.dumps([inside, inside_max, lib.MKL_Get_Max_Threads()]))
"""


def test_thread_limit_covers_mkl_loaded_after_it_was_entered():
    """In a fresh process that has not loaded mkl_rt yet, thread_limit(1) limits MKL (the
    pool PARDISO runs on) to one thread, and gives back the two it had (MKL_NUM_THREADS=2)
    on exit."""
    need("pardiso")
    done = _run(_THREADS, MKL_NUM_THREADS="2", OMP_NUM_THREADS="2")
    assert done.returncode == 0, done.stderr[-2000:]
    inside, inside_max, after = json.loads(done.stdout.strip().splitlines()[-1])
    assert inside == [1] and inside_max == 1
    assert after == 2  # the limit, not the machine, made it 1


@pytest.mark.parametrize("threads,error", [("2", TypeError), (2.0, TypeError),
                                           (True, TypeError), (0, ValueError),
                                           (-3, ValueError)])
def test_thread_limit_refuses_bad_counts(threads, error):
    with pytest.raises(error, match="threads"):
        with ls.thread_limit(threads):
            pass


def test_thread_limit_none_leaves_the_pools_alone_and_an_int_is_passed_on(monkeypatch):
    import contextlib

    import threadpoolctl

    asked = []
    monkeypatch.setattr(threadpoolctl, "threadpool_limits",
                        lambda limits=None, **k: (asked.append(limits),
                                                  contextlib.nullcontext())[1])
    with ls.thread_limit(None):
        pass
    assert asked == []
    with ls.thread_limit(np.int64(3)):  # numpy integers are integers
        pass
    assert asked == [3] and type(asked[0]) is int


@pytest.fixture
def no_mkl_runtime(monkeypatch):
    """MKL's runtime does not load (whether or not pypardiso is importable)."""
    calls = []

    def broken():
        calls.append(1)
        raise OSError("libmkl_rt.so.2: cannot open shared object file")

    for cached in (ls.pardiso_available, ls._mkl_runtime, ls._pardiso_64):
        cached.cache_clear()
    monkeypatch.setattr(ls, "_load_mkl_runtime", broken)
    yield calls
    monkeypatch.undo()
    for cached in (ls.pardiso_available, ls._mkl_runtime, ls._pardiso_64):
        cached.cache_clear()


def test_pardiso_is_unavailable_when_the_runtime_does_not_load(no_mkl_runtime):
    """pardiso_available() loads the runtime (once: the answer is cached); auto picks
    SuperLU, and asking for PARDISO by name says why it cannot be had."""
    assert ls.pardiso_available() is False
    assert ls.pardiso_available() is False
    assert no_mkl_runtime == [1]
    assert ls.default_exact_solver() == "superlu"
    with pytest.raises(ImportError, match=r"ddops\[solvers\].*does not load"):
        ls.factorize_blocks(sp.identity(3, format="csr"), np.array([0, 3]), "pardiso")


def _auto_schwarz(monkeypatch):
    import ddops.precond.corrections as corrections

    monkeypatch.setattr(corrections, "DENSE_LOCAL_LIMIT_BYTES", 0)  # auto: a sparse solver
    A = ddops.poisson_2d(16)
    d = ddops.Decomposition.from_matrix(A, 4, 1)
    return ddops.TwoLevelSchwarz(A, d, "gdsw", local_solver="auto")


def test_auto_picks_pardiso_when_it_is_installed(monkeypatch):
    need("pardiso")
    M = _auto_schwarz(monkeypatch)
    assert (M.local_solver, M.sparse_solver, M.coarse_factorization) == (
        "sparse", "pardiso", "pardiso")
    assert isinstance(M._local_solver, ls.PardisoBlocks)


def test_auto_falls_back_to_superlu_when_the_runtime_does_not_load(monkeypatch,
                                                                  no_mkl_runtime):
    M = _auto_schwarz(monkeypatch)
    assert (M.sparse_solver, M.coarse_factorization) == ("superlu", "superlu")
    assert isinstance(M._local_solver, ls.SuperLUBlocks)



_ONE_THREAD = """
import json
import numpy as np, scipy.sparse as sp
from ddops.linalg.local_solvers import _mkl_runtime, factorize_blocks
lib = _mkl_runtime()
lib.MKL_Set_Num_Threads(2)
one = sp.diags([-np.ones(29), 2.0 * np.ones(30), -np.ones(29)], [-1, 0, 1])
K = sp.block_diag([one, one], format="csr")
solver = factorize_blocks(K, [0, 30, 60], "pardiso")
handle = solver._handle
seen = []
inner = handle.fn
def recording(*args):
    seen.append(lib.MKL_Get_Max_Threads())
    return inner(*args)
handle.fn = recording
solver.solve(np.ones(60))
solver.refactor(K)  # the numeric phase and its check solve
lib.MKL_Set_Num_Threads_Local(3)  # a caller's own thread-local setting, kept
solver.solve(np.ones((60, 3)))
print(json.dumps([seen, lib.MKL_Get_Max_Threads()]))
"""


def test_pardiso_runs_on_one_thread_and_restores_the_callers_setting():
    """Every PARDISO phase runs under a thread-local limit of one MKL thread, whatever
    MKL's global limit, and the caller's own setting is back afterwards."""
    need("pardiso")
    out = subprocess.run([sys.executable, "-c", _ONE_THREAD], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    seen, after = json.loads(out.stdout.strip().splitlines()[-1])
    # solve, refactor, check solve, and the last solve's three columns one at a time (a
    # factor of 2 nonzeros per row: PARDISO_COLUMN_SOLVES)
    assert len(seen) == 6 and set(seen) == {1}
    assert after == 3


_SOLVE_ON_FEWER_THREADS_THEN_REFACTOR = """
import numpy as np, scipy.sparse as sp
from ddops.linalg.local_solvers import _mkl_runtime, factorize_blocks
lib = _mkl_runtime()
lib.MKL_Set_Num_Threads(2)
one = sp.diags([-np.ones(399), 4.0 * np.ones(400), -np.ones(399)], [-1, 0, 1])
K = sp.block_diag([one, one, one], format="csr")
solver = factorize_blocks(K, [0, 400, 800, 1200], "pardiso", ordering="md")
lib.MKL_Set_Num_Threads_Local(1)  # e.g. a caller's threadpool_limits(1) around a solve
x = solver.solve(np.ones(1200))
lib.MKL_Set_Num_Threads_Local(0)
solver.refactor(2 * K)
y = solver.solve(np.ones(1200))
print(float(np.abs(2 * y - x).max()))
"""


def test_a_solve_under_another_thread_limit_does_not_break_a_refactorisation():
    """PARDISO crashes the process in a numeric factorisation after a solve on another
    number of threads than the factorisation's; one thread for every phase avoids it."""
    need("pardiso")
    out = subprocess.run([sys.executable, "-c", _SOLVE_ON_FEWER_THREADS_THEN_REFACTOR],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert float(out.stdout.strip().splitlines()[-1]) <= 1e-12


_SCHUR_ON_A_DIRTY_HEAP = """
import json
import numpy as np, scipy.sparse as sp
from ddops.linalg.local_solvers import SCHUR_DENSE_ELIMINATED, pardiso_schur_complement
m = 40
K = (sp.diags([-np.ones(m - 1), 4.0 * np.ones(m), -np.ones(m - 1)], [-1, 0, 1])
     + sp.csr_matrix(np.full((m, m), 0.01))).tocsr()
D = K.toarray()
errors = []
for eliminated in (0, 1, 2, SCHUR_DENSE_ELIMINATED + 1):
    rows = np.arange(eliminated, m)
    o = np.arange(eliminated)
    exact = D[np.ix_(rows, rows)] - D[np.ix_(rows, o)] @ np.linalg.solve(
        D[np.ix_(o, o)], D[np.ix_(o, rows)]) if eliminated else D[np.ix_(rows, rows)]
    errors.append(float(np.abs(pardiso_schur_complement(K, rows) - exact).max()))
print(json.dumps(errors))
"""


def test_the_schur_complement_survives_a_heap_of_garbage():
    """MKL's partial factorisation that eliminates none or one row reads memory it never
    wrote (and dies where the heap held garbage, which glibc's ``MALLOC_PERTURB_`` makes
    certain); those cases are eliminated densely, and the sparse path past
    ``SCHUR_DENSE_ELIMINATED`` rows survives the same heap."""
    need("pardiso")
    out = _run(_SCHUR_ON_A_DIRTY_HEAP, MALLOC_PERTURB_="165")
    assert out.returncode == 0, out.stderr[-2000:]
    errors = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(errors) == 4 and max(errors) <= 1e-12
