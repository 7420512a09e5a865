"""The PARDISO local solver in groups of subdomains, factorised and solved side by side on
the set-up's threads (``ThreadedBlocks``): the same operator as one factorisation and as
the dense local solver, through updates, and one group when one thread is asked for."""

import numpy as np
import pytest
import scipy.sparse as sp
from threadpoolctl import threadpool_limits

import ddops
from ddops.linalg.local_solvers import PardisoBlocks
from ddops.linalg.parallel import ThreadedBlocks
from ddops.precond import corrections


def rel(a, b):
    return np.abs(a - b).max() / np.abs(b).max()


@pytest.mark.parametrize("variant", ["additive", "restricted", "hybrid"])
def test_groups_give_the_operator_of_one_factorisation(threaded_problem, variant):
    A, d = threaded_problem
    X = np.random.default_rng(0).standard_normal((A.shape[0], 2))
    two = ddops.TwoLevelSchwarz(A, d, "gdsw", variant=variant, local_solver="pardiso",
                                threads=2)
    one = ddops.TwoLevelSchwarz(A, d, "gdsw", variant=variant, local_solver="pardiso",
                                threads=1)
    dense = ddops.TwoLevelSchwarz(A, d, "gdsw", variant=variant, local_solver="dense")
    assert isinstance(two._local_solver, ThreadedBlocks) and len(two._local_solver.parts) == 2
    assert isinstance(one._local_solver, PardisoBlocks)  # threads=1: one group
    assert rel(two @ X, one @ X) <= 1e-12
    assert rel(two @ X, dense @ X) <= 1e-10
    assert rel(two.rmatmat(X), dense.rmatmat(X)) <= 1e-10
    assert two.stats["local_factor_bytes"] == two._local_solver.nbytes > 0
    assert two._local_solver.nnz == sum(p.nnz for p in two._local_solver.parts) > 0


@pytest.mark.parametrize("variant", ["additive", "restricted"])
def test_the_coarse_correction_beside_the_local_solves_gives_the_same_sum(
        threaded_problem, monkeypatch, variant):
    """An additive two-level application with threaded local solves runs the coarse
    correction as one more task among them: the same operator bit for bit as the coarse
    correction after them (``COARSE_BESIDE`` off), applied and adjoint, and the coarse
    correction runs once per application."""
    A, d = threaded_problem
    M = ddops.TwoLevelSchwarz(A, d, "gdsw", variant=variant, local_solver="pardiso",
                              threads=2)
    assert M.local.threaded
    X = np.random.default_rng(2).standard_normal((A.shape[0], 3))
    tasks = []
    solve_beside = ThreadedBlocks.solve_beside
    monkeypatch.setattr(ThreadedBlocks, "solve_beside", lambda self, X, beside=None: (
        tasks.append(beside is not None), solve_beside(self, X, beside))[1])
    beside, beside_adjoint = M @ X, M.rmatmat(X)
    assert tasks == [True, True]
    monkeypatch.setattr(corrections, "COARSE_BESIDE", False)
    assert np.array_equal(M @ X, beside) and np.array_equal(M.rmatmat(X), beside_adjoint)
    assert tasks == [True, True, False, False]
    one = ddops.TwoLevelSchwarz(A, d, "gdsw", variant=variant, local_solver="pardiso",
                                threads=1)
    assert not one.local.threaded
    assert rel(beside, one @ X) <= 1e-12


def test_groups_follow_a_callers_thread_limit(threaded_problem):
    A, d = threaded_problem
    with threadpool_limits(limits=1):
        M = ddops.TwoLevelSchwarz(A, d, "gdsw", local_solver="pardiso")
    assert isinstance(M._local_solver, PardisoBlocks)


def test_an_update_refactorises_every_group_in_place(threaded_problem):
    A, d = threaded_problem
    A2 = (A + sp.diags(np.linspace(0.0, 1.0, A.shape[0]))).tocsr()
    M = ddops.TwoLevelSchwarz(A, d, "gdsw", local_solver="pardiso", threads=2)
    solver = M.local.solver
    M.update(A2)
    assert M.local.solver is solver and isinstance(solver, ThreadedBlocks)
    X = np.random.default_rng(1).standard_normal((A.shape[0], 2))
    fresh = ddops.TwoLevelSchwarz(A2, d, "gdsw", local_solver="dense")
    assert rel(M @ X, fresh @ X) <= 1e-10


def test_a_singular_subdomain_in_a_later_group_is_named(threaded_problem):
    A, d = threaded_problem
    last = d.subdomains[-1]
    bad = A.tolil()
    bad[last[-1], last[-1]] = -1.0  # a corner of the last subdomain only (the last group)
    with pytest.raises(ValueError, match=f"subdomain {d.num_subdomains - 1}\\b"):
        ddops.TwoLevelSchwarz(sp.csr_matrix(bad), d, coarse=False, local_solver="pardiso",
                              threads=2)


@pytest.mark.parametrize("threads", [1, 2])
def test_long_stacks_are_factorised_in_groups_of_about_the_group_rows(
        threaded_problem, monkeypatch, threads):
    """Above ``LOCAL_GROUP_ROWS`` rows the subdomains are factorised in groups of about
    that many rows, on one thread too (in turn); the groups are a multiple of the threads,
    and the operator is the one of a single factorisation and of the dense solver."""
    A, d = threaded_problem
    one = ddops.TwoLevelSchwarz(A, d, "gdsw", local_solver="pardiso", threads=1)
    assert isinstance(one._local_solver, PardisoBlocks)  # 1,140 rows: one group
    rows = int(d.offsets[-1])
    monkeypatch.setattr(corrections, "LOCAL_GROUP_ROWS", 300)
    M = ddops.TwoLevelSchwarz(A, d, "gdsw", local_solver="pardiso", threads=threads)
    solver = M._local_solver
    assert isinstance(solver, ThreadedBlocks) and solver.workers == threads
    wanted = threads * -(-rows // (300 * threads))
    assert len(solver.parts) == wanted and np.diff(solver.bounds).max() <= 2 * 300
    dense = ddops.TwoLevelSchwarz(A, d, "gdsw", local_solver="dense")
    X = np.random.default_rng(2).standard_normal((A.shape[0], 2))
    assert rel(M @ X, one @ X) <= 1e-12
    assert rel(M @ X, dense @ X) <= 1e-10
    # an update refactorises the same groups in place
    A2 = (A + sp.diags(np.linspace(0.0, 1.0, A.shape[0]))).tocsr()
    M.update(A2)
    assert M._local_solver is solver and len(solver.parts) == wanted
    assert rel(M @ X, ddops.TwoLevelSchwarz(A2, d, "gdsw", local_solver="dense") @ X) <= 1e-10
