"""The subdomains' numeric factorisation beside the coarse space (``LOCAL_BESIDE_COARSE``):
on two threads the set-up analyses the local matrices, then factorises them on a thread of
its own while it builds the coarse space; the same preconditioner bit for bit as with the
factorisation first, through updates, with the local failure first and every thread done
before the set-up returns or raises."""

import functools
import os
import threading
import time

import numpy as np
import pytest
import scipy.sparse as sp
from threadpoolctl import threadpool_limits

import ddops
from ddops.linalg.local_solvers import PardisoBlocks, SingularBlockError, factorize_blocks
from ddops.linalg.parallel import Beside, ThreadedBlocks
from ddops.precond import corrections
from ddops.precond.corrections import CoarseCorrection, OverlappingCorrection
from tests._optional import need

two_cpus = pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two CPUs")
DECOMPOSITION = ("partition", "overlap")


@pytest.fixture
def deferred(monkeypatch):
    """Every group's numeric task that ran beside a coarse space: (thread, start, end,
    whether a refactorisation)."""
    runs, state = [], {}
    numeric_beside = OverlappingCorrection._numeric_beside

    def spy(self, solver, K):
        state["refactor"] = K is not None
        return numeric_beside(self, solver, K)

    class Recording(Beside):
        def __init__(self, tasks, on_error=None):
            def recorded(task, refactor=state["refactor"]):
                start = time.perf_counter()
                task()
                runs.append((threading.get_ident(), start, time.perf_counter(), refactor))

            super().__init__([functools.partial(recorded, task) for task in tasks], on_error)

    monkeypatch.setattr(OverlappingCorrection, "_numeric_beside", spy)
    monkeypatch.setattr(corrections, "Beside", Recording)
    return runs


def build(A, d, coarse, threads, **kwargs):
    space = {"geneo": {"geneo": ddops.GenEOOptions(threshold=0.9)}}.get(coarse, {})
    return ddops.TwoLevelSchwarz(A, d, options=ddops.SchwarzOptions(
        coarse=coarse, local_solver="pardiso", threads=threads, **space, **kwargs))


@two_cpus
@pytest.mark.parametrize("coarse", ["gdsw", "agdsw", "geneo"])
@pytest.mark.parametrize("variant", ["additive", "hybrid"])
def test_beside_and_before_give_the_same_preconditioner(
        threaded_problem, deferred, monkeypatch, coarse, variant):
    """On two threads the groups' numeric factorisations run as tasks beside the coarse
    space exactly when the flag is on, and the preconditioner is the same bit for bit,
    applied and adjoint, after a fresh set-up and after an update (refactorised beside)."""
    A, d = threaded_problem
    X = np.random.default_rng(0).standard_normal((A.shape[0], 2))
    A2 = (A + sp.diags(np.linspace(0.0, 1.0, A.shape[0]))).tocsr()
    beside = build(A, d, coarse, 2, variant=variant)
    groups = len(beside.local.solver.parts)
    assert groups == 2 and [run[3] for run in deferred] == [False] * groups
    assert beside.stats["local_beside_seconds"] > 0
    monkeypatch.setattr(corrections, "LOCAL_BESIDE_COARSE", False)
    before = build(A, d, coarse, 2, variant=variant)
    assert len(deferred) == groups and before.stats["local_beside_seconds"] == 0
    assert isinstance(before.local.solver, ThreadedBlocks)
    assert np.array_equal(beside @ X, before @ X)
    assert np.array_equal(beside.rmatmat(X), before.rmatmat(X))
    # an update: the groups refactorised beside (the same solver), then without
    monkeypatch.setattr(corrections, "LOCAL_BESIDE_COARSE", True)
    solver = beside.local.solver
    beside.update(A2)
    assert beside.local.solver is solver and beside.stats["local_beside_seconds"] > 0
    assert [run[3] for run in deferred] == [False] * groups + [True] * groups
    monkeypatch.setattr(corrections, "LOCAL_BESIDE_COARSE", False)
    before.update(A2)
    assert len(deferred) == 2 * groups
    assert np.array_equal(beside @ X, before @ X)
    one = build(A2, d, coarse, 1, variant=variant)
    assert np.abs(beside @ X - one @ X).max() <= 1e-12 * np.abs(one @ X).max()


def test_one_thread_defers_nothing(threaded_problem, deferred):
    """With one thread (and with one level: nothing to run beside) the factorisation runs
    first, as before."""
    A, d = threaded_problem
    for M in (build(A, d, "gdsw", 1), build(A, d, "none", 2)):
        assert M.stats["local_beside_seconds"] == 0
    assert deferred == []


@two_cpus
def test_an_update_under_one_thread_refactorises_on_the_calling_thread(
        threaded_problem, monkeypatch):
    """``threads=None`` follows the caller's limit at every set-up: built under two threads
    (beside), updated under one (no second thread)."""
    A, d = threaded_problem
    threads = []
    refactor = ThreadedBlocks.refactor
    monkeypatch.setattr(ThreadedBlocks, "refactor", lambda self, K: (
        threads.append(threading.get_ident()), refactor(self, K))[1])
    with threadpool_limits(2):
        M = build(A, d, "gdsw", None)
    assert M.stats["local_beside_seconds"] > 0
    with threadpool_limits(1):
        M.update((2.0 * A).tocsr())
    assert threads == [threading.get_ident()] and M.stats["local_beside_seconds"] == 0


@two_cpus
def test_the_numeric_factorisation_runs_while_the_coarse_space_is_built(
        threaded_problem, monkeypatch):
    """The coarse basis waits until a group's deferred factorisation has started and every
    group's factorisation until the basis has (run one after the other, they would time
    out)."""
    A, d = threaded_problem
    basis_started, factor_started, waited = threading.Event(), threading.Event(), []
    factor_deferred, build_basis = PardisoBlocks.factor_deferred, CoarseCorrection.build_basis

    def factor(self):
        factor_started.set()
        waited.append(basis_started.wait(timeout=10))
        return factor_deferred(self)

    def basis(self, A):
        basis_started.set()
        waited.append(factor_started.wait(timeout=10))
        return build_basis(self, A)

    monkeypatch.setattr(PardisoBlocks, "factor_deferred", factor)
    monkeypatch.setattr(CoarseCorrection, "build_basis", basis)
    M = build(A, d, "gdsw", 2)
    assert waited == [True] * 3  # the basis and the two groups
    dense = ddops.TwoLevelSchwarz(A, d, "gdsw", local_solver="dense")
    X = np.random.default_rng(1).standard_normal((A.shape[0], 2))
    assert np.abs(M @ X - dense @ X).max() <= 1e-10 * np.abs(dense @ X).max()


@two_cpus
def test_the_phases_add_up_with_the_factorisation_beside(threaded_problem):
    """local_factorization is the analysis and the wait: the phases still add up to the
    set-up within 5 %, fresh and updated."""
    A, d = threaded_problem
    M = build(A, d, "gdsw", 2)
    for _ in range(2):
        phases = M.stats["phases"]
        assert M.stats["local_beside_seconds"] > 0
        total = sum(v for k, v in phases.items() if k not in DECOMPOSITION)
        assert abs(total - M.setup_seconds) <= 0.05 * M.setup_seconds, (phases, M.setup_seconds)
        assert all(v >= 0 for v in phases.values())
        M.update((2.0 * A).tocsr())


@two_cpus
def test_a_failing_deferred_factorisation_is_raised_with_its_subdomain(threaded_problem):
    """A subdomain that fails only in the numeric phase (positive diagonal, indefinite) is
    named as without the thread, ahead of whatever the coarse space met."""
    A, d = threaded_problem
    last = d.subdomains[-1]
    i, j = int(last[-1]), int(last[-2])
    bad = A.tolil()
    bad[i, j] = bad[j, i] = 10.0 * A[i, i]  # a 2 x 2 minor below zero, the diagonal positive
    with pytest.raises(ValueError, match=f"subdomain {d.num_subdomains - 1}\\b"):
        build(sp.csr_matrix(bad), d, "gdsw", 2)


@two_cpus
def test_a_failing_coarse_space_returns_once_the_factorisation_is_done(
        threaded_problem, deferred, monkeypatch):
    A, d = threaded_problem

    def failing(self, A):
        raise RuntimeError("the coarse basis failed")

    monkeypatch.setattr(CoarseCorrection, "build_basis", failing)
    with pytest.raises(RuntimeError, match="coarse basis failed"):
        build(A, d, "gdsw", 2)
    raised = time.perf_counter()
    assert len(deferred) == 2 and max(run[2] for run in deferred) <= raised


@two_cpus
def test_a_failed_update_beside_leaves_the_preconditioner_updatable(threaded_problem):
    """An update whose numeric factorisation fails beside the coarse space raises with the
    subdomain, refuses to apply, and a later update with a good matrix works (no half-freed
    solver kept)."""
    A, d = threaded_problem
    last = d.subdomains[-1]
    i, j = int(last[-1]), int(last[-2])
    bad = A.tolil()
    bad[i, j] = bad[j, i] = 10.0 * A[i, i]
    bad = sp.csr_matrix(bad)
    good = A.copy()
    good[i, j] = good[j, i] = 0.0  # the bad matrix's pattern (an explicit zero), A's values
    M = build(good, d, "gdsw", 2)
    with pytest.raises(ValueError, match=f"subdomain {d.num_subdomains - 1}\\b"):
        M.update(bad)
    X = np.random.default_rng(4).standard_normal((A.shape[0], 2))
    with pytest.raises(RuntimeError, match="last update"):
        M @ X
    M.update((2.0 * good).tocsr())
    fresh = build((2.0 * good).tocsr(), d, "gdsw", 1)
    assert np.abs(M @ X - fresh @ X).max() <= 1e-12 * np.abs(fresh @ X).max()


def blocks(count: int = 9, bad: int | None = None):
    """``count`` shifted 2D Laplacians of 16 rows, block ``bad`` indefinite (its diagonal
    positive), and their offsets."""
    one = (ddops.poisson_2d(4) + sp.identity(16)).tolil()
    worse = one.copy()
    worse[0, 1] = worse[1, 0] = 10.0 * one[0, 0]
    K = sp.block_diag([worse if k == bad else one * (1.0 + k) for k in range(count)],
                      format="csr")
    return K, np.arange(0, 16 * count + 1, 16)


def test_a_deferred_pardiso_factorisation_solves_as_the_direct_one():
    need("pardiso")
    K, offsets = blocks()
    direct = factorize_blocks(K, offsets, "pardiso")
    later = factorize_blocks(K, offsets, "pardiso", numeric=False)
    assert isinstance(later, PardisoBlocks) and np.array_equal(later.order, direct.order)
    x = np.random.default_rng(2).standard_normal((144, 3))
    with pytest.raises(RuntimeError, match="factor_deferred"):
        later.solve(x)
    assert later.factor_deferred() is later
    assert np.array_equal(later.solve(x), direct.solve(x)) and later.nnz == direct.nnz
    with pytest.raises(RuntimeError, match="no deferred"):
        later.factor_deferred()
    with pytest.raises(ValueError, match="numeric=False needs solver='pardiso'"):
        factorize_blocks(K, offsets, "superlu", numeric=False)


@pytest.mark.parametrize("workers", [1, 2])
def test_deferred_groups_factorise_as_the_direct_ones(workers):
    """ThreadedBlocks(numeric=False).factor_deferred(): the same solves bit for bit."""
    need("pardiso")
    K, offsets = blocks()
    direct = ThreadedBlocks(K, offsets, groups=3, workers=workers)
    later = ThreadedBlocks(K, offsets, groups=3, workers=workers, numeric=False)
    x = np.random.default_rng(3).standard_normal(144)
    with pytest.raises(RuntimeError, match="factor_deferred"):
        later.solve(x)
    assert later.factor_deferred() is later
    assert np.array_equal(later.solve(x), direct.solve(x))


def test_numeric_tasks_enter_no_process_wide_thread_limit(monkeypatch):
    """The groups' tasks call PARDISO directly (its one MKL thread per call): no
    threadpoolctl limit, which a thread beside a set-up must not enter (the set-up's own
    chunks set and restore the process's limits)."""
    need("pardiso")
    from ddops.linalg import local_solvers, parallel

    limits = []
    for module in (parallel, local_solvers):
        thread_limit = module.thread_limit
        monkeypatch.setattr(module, "thread_limit", lambda n, f=thread_limit: (
            limits.append(n), f(n))[1])
    K, offsets = blocks()
    later = ThreadedBlocks(K, offsets, groups=3, workers=2, numeric=False)
    limits.clear()
    Beside(later.numeric_tasks()).join()
    assert limits == []
    other = ThreadedBlocks(K, offsets, groups=3, workers=2, numeric=False)
    limits.clear()
    other.factor_deferred()  # (the solver's own way, map_chunks, enters them)
    assert limits == [1]


def test_a_singular_deferred_group_is_named_in_the_whole_matrix():
    need("pardiso")
    K, offsets = blocks(bad=7)
    later = ThreadedBlocks(K, offsets, groups=3, numeric=False)
    with pytest.raises(SingularBlockError) as info:
        later.factor_deferred()
    assert info.value.block == 7
    tasks = ThreadedBlocks(K, offsets, groups=3, numeric=False).numeric_tasks()
    tasks[0]()
    with pytest.raises(SingularBlockError) as info:
        tasks[2]()
    assert info.value.block == 7


def test_numeric_tasks_factorise_and_refactorise_as_the_solver_does():
    """The groups' tasks, run in any order, give the factors of ``factor_deferred`` and, with
    ``K``, of ``refactor`` (bit for bit)."""
    need("pardiso")
    K, offsets = blocks()
    x = np.random.default_rng(5).standard_normal(144)
    direct = ThreadedBlocks(K, offsets, groups=3)
    later = ThreadedBlocks(K, offsets, groups=3, numeric=False)
    for task in later.numeric_tasks()[::-1]:
        task()
    assert np.array_equal(later.solve(x), direct.solve(x))
    K2 = (K + sp.diags(np.linspace(0.0, 1.0, 144))).tocsr()
    for task in later.numeric_tasks(K2):
        task()
    assert np.array_equal(later.solve(x), direct.refactor(K2).solve(x))
    with pytest.raises(ValueError, match="shape"):
        later.numeric_tasks(K2[:100, :100])


def test_beside_runs_every_task_once_and_the_caller_helps_at_the_join():
    """The thread takes the first task; the caller, at the join, takes the second, which
    the first waits for (were the caller only waiting, the first would time out)."""
    second_ran, ran = threading.Event(), []

    def first():
        ran.append(("first", threading.get_ident(), second_ran.wait(timeout=10)))

    def second():
        ran.append(("second", threading.get_ident()))
        second_ran.set()

    started = threading.Event()
    beside = Beside([lambda: (started.set(), first()), second])
    assert started.wait(timeout=10)  # the thread holds the first task
    assert beside.join() >= 0
    assert sorted(r[0] for r in ran) == ["first", "second"]
    caller = threading.get_ident()
    assert dict((r[0], r[1]) for r in ran) == {"first": ran[1][1], "second": caller} and (
        ran[1][1] != caller and ran[1][2])
    assert beside.seconds > 0


def test_beside_raises_the_first_failing_task_once_all_are_done():
    done, cleaned = [], []

    def failing(name):
        def task():
            time.sleep(0.05)
            done.append(name)
            raise KeyError(name)
        return task

    beside = Beside([failing("a"), lambda: done.append("ok"), failing("b")],
                    on_error=lambda: cleaned.append(sorted(done)))
    with pytest.raises(KeyError, match="a"):
        beside.join()
    assert sorted(done) == ["a", "b", "ok"] and cleaned == [["a", "b", "ok"]]
    assert Beside([]).join() >= 0
