"""Independent chunks on threads: order, concurrency, thread limits and GenEO's basis; the
block-diagonal PARDISO solver in groups solved side by side."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest
import scipy.sparse as sp
from threadpoolctl import threadpool_info, threadpool_limits

import ddops
from ddops.linalg import parallel
from ddops.linalg.local_solvers import (
    SingularBlockError,
    limit_mkl_threads_here,
    pardiso_available,
    thread_limit,
)
from ddops.linalg.parallel import (
    MAX_CHUNK_WORKERS,
    MIN_SPLIT_ROWS,
    SMALL_DENSE_ROWS,
    ThreadedBlocks,
    chunk_workers,
    map_chunks,
    one_blas_thread_below,
    rows_per_chunk,
)
from tests._optional import need

two_cpus = pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two CPUs")


def blas_limits() -> list[int]:
    return [p["num_threads"] for p in threadpool_info() if p.get("user_api") == "blas"]


def test_one_worker_runs_every_chunk_on_the_calling_thread_in_order():
    seen = []
    out = list(map_chunks(lambda i, x: seen.append((i, threading.get_ident())) or x * 2,
                          [(i, i + 10) for i in range(5)], workers=1))
    assert out == [20, 22, 24, 26, 28]
    assert [i for i, _ in seen] == list(range(5))
    assert {t for _, t in seen} == {threading.get_ident()}


@two_cpus
def test_two_workers_run_concurrently_keep_the_order_and_one_blas_thread_each():
    # both chunks must be inside the function at once: run one after the other, the
    # barrier times out
    barrier = threading.Barrier(2, timeout=20)
    limits = []

    def chunk(i):
        barrier.wait()
        limits.append(blas_limits())
        time.sleep(0.05 * (2 - i))  # the first chunk finishes last
        return i, threading.get_ident()

    out = list(map_chunks(chunk, [(0,), (1,)], workers=2))
    assert [i for i, _ in out] == [0, 1]
    assert len({t for _, t in out}) == 2 and threading.get_ident() not in {t for _, t in out}
    assert all(x == 1 for lim in limits for x in lim)


def test_results_come_one_at_a_time_in_order():
    # the caller folds each result in before the next is computed (one worker): a result
    # is not held until all chunks are done
    done = []
    results = map_chunks(lambda i: done.append(i) or i, [(i,) for i in range(4)], workers=1)
    for i, r in enumerate(results):
        assert r == i and done == list(range(i + 1))


def test_the_first_failing_chunk_raises():
    def chunk(i):
        if i in (1, 3):
            raise ValueError(f"chunk {i}")
        return i

    for workers in (1, 2):
        with pytest.raises(ValueError, match="chunk 1"):
            list(map_chunks(chunk, [(i,) for i in range(5)], workers=workers))


def test_workers_follow_the_blas_limit():
    if not blas_limits():
        pytest.skip("no BLAS library reports a thread count")
    with threadpool_limits(limits=1):
        assert chunk_workers() == 1
    with threadpool_limits(limits=64):
        assert chunk_workers() == min(64, os.cpu_count() or 1, MAX_CHUNK_WORKERS)


@pytest.mark.skipif(not pardiso_available(), reason="needs PARDISO (mkl_rt)")
def test_mkl_limit_reaches_a_new_thread_only_when_set_there():
    from ddops.linalg.local_solvers import _mkl_runtime, thread_limit

    lib = _mkl_runtime()
    got = {}

    def probe(name, limit):
        if limit:
            limit_mkl_threads_here(1)
        got[name] = lib.MKL_Get_Max_Threads()

    with thread_limit(1):
        for name, limit in (("without", False), ("with", True)):
            t = threading.Thread(target=probe, args=(name, limit))
            t.start()
            t.join()
    assert got["with"] == 1
    if (os.cpu_count() or 1) >= 2 and "OMP_NUM_THREADS" not in os.environ \
            and "MKL_NUM_THREADS" not in os.environ:
        assert got["without"] > 1  # why the thread-local limit is needed


def channels(n=47):
    """Floating channels of contrast 1e6 on 4 x 4 boxes with overlap 1: ``A`` and ``d``."""
    from ddops.problems import diffusion_2d, high_contrast_channels

    return (diffusion_2d(high_contrast_channels(n, 1e6)),
            ddops.Decomposition.from_grid((n, n), (4, 4), overlap=1))


def test_geneo_basis_is_the_same_on_one_and_on_two_threads(monkeypatch):
    # chunks of a few subdomains each (a small GENEO_CHUNK_ROWS), so that there are several
    from ddops.dd import geneo

    A, d = channels()
    monkeypatch.setattr(geneo, "GENEO_CHUNK_ROWS", 800)
    threads = []
    solve = geneo._subspace_eigh

    def record(*args):
        threads.append(threading.get_ident())
        return solve(*args)

    monkeypatch.setattr(geneo, "_subspace_eigh", record)
    with threadpool_limits(limits=1):
        one, info = geneo.geneo_basis(A, d, return_info=True)
    assert len(threads) >= 4 and set(threads) == {threading.get_ident()}
    del threads[:]
    monkeypatch.setattr(geneo, "map_chunks",
                        lambda f, chunks: map_chunks(f, chunks, workers=2))
    two, info2 = geneo.geneo_basis(A, d, return_info=True)
    np.testing.assert_array_equal(two.toarray(), one.toarray())
    np.testing.assert_array_equal(info2.selected, info.selected)
    assert threading.get_ident() not in set(threads)


def test_agdsw_basis_is_the_same_on_one_and_on_two_threads(monkeypatch):
    # several chunks of parts (a small FACTOR_CHUNK_ROWS) and several size groups
    from ddops.dd import agdsw

    A, d = channels()
    monkeypatch.setattr(agdsw, "FACTOR_CHUNK_ROWS", 200)
    calls = []
    monkeypatch.setattr(agdsw, "map_chunks",
                        lambda f, chunks: calls.append(len(chunks)) or map_chunks(f, chunks,
                                                                                  workers=1))
    one, info = agdsw.agdsw_basis(A, d.owner, return_info=True)
    assert len(calls) == 2 and min(calls) >= 2  # the part chunks, the size groups
    monkeypatch.setattr(agdsw, "map_chunks",
                        lambda f, chunks: map_chunks(f, chunks, workers=2))
    two, info2 = agdsw.agdsw_basis(A, d.owner, return_info=True)
    np.testing.assert_array_equal(two.toarray(), one.toarray())
    np.testing.assert_array_equal(info2.selected, info.selected)


@pytest.mark.parametrize("kept_analysis", [False, True])
def test_gdsw_extension_is_the_same_on_one_and_on_two_threads(monkeypatch, kept_analysis):
    # several chunks of parts (a small FACTOR_CHUNK_ROWS); with a kept analysis (update)
    # the second build refactorises every chunk on its own analysis
    from ddops.dd import extension
    from ddops.dd.analysis import GDSWAnalysis
    from ddops.dd.gdsw import gdsw_basis

    A, d = channels()
    monkeypatch.setattr(extension, "FACTOR_CHUNK_ROWS", 300)
    chunks = []
    monkeypatch.setattr(extension, "map_chunks",
                        lambda f, c: chunks.append(len(c)) or map_chunks(f, c, workers=1))
    analysis = GDSWAnalysis() if kept_analysis else None
    one = gdsw_basis(A, d.owner, analysis=analysis).toarray()
    assert chunks and chunks[0] >= 3
    monkeypatch.setattr(extension, "map_chunks", lambda f, c: map_chunks(f, c, workers=2))
    np.testing.assert_array_equal(gdsw_basis(A, d.owner, analysis=analysis).toarray(), one)
    if kept_analysis and pardiso_available():
        assert analysis.reused == chunks[0]


def _varied_blocks():
    """Block-diagonal SPD matrix of 7 blocks of different sizes and values, two of them
    empty: the 1D Laplacian of each size, shifted by the block's index."""
    sizes = [13, 0, 20, 7, 0, 31, 16]
    blocks = [sp.diags([-np.ones(m - 1), (2.0 + i) * np.ones(m), -np.ones(m - 1)],
                       [-1, 0, 1]) for i, m in enumerate(sizes) if m]
    return sp.block_diag(blocks, format="csr"), np.concatenate([[0], np.cumsum(sizes)])


@pytest.mark.parametrize("groups", [2, 3, 5])
def test_threaded_groups_solve_as_the_dense_inverse(groups):
    """Groups of consecutive blocks, factorised and solved side by side: the groups start at
    block boundaries and cover every row, and the solves (one and several right-hand sides)
    and a refactorisation with new values equal dense solves."""
    need("pardiso")
    K, offsets = _varied_blocks()
    f = ThreadedBlocks(K, offsets, groups=groups)
    assert f.bounds[0] == 0 and f.bounds[-1] == K.shape[0]
    assert np.isin(f.bounds, offsets).all() and np.all(np.diff(f.bounds) > 0)
    assert 2 <= len(f.parts) <= groups  # about equal rows: unequal blocks may merge groups
    assert f.nnz == sum(p.nnz for p in f.parts) > 0
    Kd = K.toarray()
    X = np.random.default_rng(0).standard_normal((K.shape[0], 3))
    assert np.abs(f.solve(X) - np.linalg.solve(Kd, X)).max() <= 1e-12 * np.abs(X).max() * 10
    assert np.abs(f.solve(X[:, 0]) - np.linalg.solve(Kd, X[:, 0])).max() <= 1e-11
    K2 = sp.csr_matrix(K + sp.diags(np.linspace(1.0, 2.0, K.shape[0])))
    assert f.refactor(K2) is f
    assert np.abs(f.solve(X) - np.linalg.solve(K2.toarray(), X)).max() <= 1e-11


def test_threaded_groups_name_a_singular_block_in_the_whole_matrix():
    """A singular block in the last group is named by its index in the whole matrix (not in
    its group), at the factorisation and at a refactorisation."""
    need("pardiso")
    K, offsets = _varied_blocks()
    bad = K.tolil()
    s = slice(int(offsets[5]), int(offsets[6]))  # block 5: 31 rows, in the last group
    bad[s, s] = -bad[s, s].toarray()
    with pytest.raises(SingularBlockError) as caught:
        ThreadedBlocks(sp.csr_matrix(bad), offsets, groups=3)
    assert caught.value.block == 5
    f = ThreadedBlocks(K, offsets, groups=3)
    with pytest.raises(SingularBlockError) as caught:
        f.refactor(sp.csr_matrix(bad))
    assert caught.value.block == 5


@pytest.mark.parametrize("where", ["largest", "other"])
def test_a_missing_diagonal_entry_is_a_singular_block_not_a_crash(where):
    """PARDISO's analysis crashes the process on a missing diagonal entry: the ordering probe
    of the largest block and every group check the diagonal first."""
    need("pardiso")
    K, offsets = _varied_blocks()
    sizes = np.diff(offsets)
    nonempty = np.flatnonzero(sizes > 0)
    block = int(np.argmax(sizes)) if where == "largest" else int(
        nonempty[np.argmin(sizes[nonempty])])
    row = int(offsets[block]) + 1
    bad = K.tolil()
    bad[row, row] = 0.0
    bad = sp.csr_matrix(bad)
    bad.eliminate_zeros()
    assert bad[row, row] == 0
    with pytest.raises(SingularBlockError) as caught:
        ThreadedBlocks(bad, offsets, groups=3)
    assert caught.value.block == block
    if where == "largest":
        from ddops.linalg.local_solvers import pardiso_ordering

        with pytest.raises(SingularBlockError) as caught:
            pardiso_ordering(bad, offsets)
        assert caught.value.block == block


def test_offsets_must_cover_a_square_matrix():
    need("pardiso")
    K, offsets = _varied_blocks()
    with pytest.raises(ValueError, match="offsets must end at the"):
        ThreadedBlocks(K, offsets[:-1], groups=2)
    with pytest.raises(ValueError, match="offsets must end at the"):
        ThreadedBlocks(K[:, :-1], offsets, groups=2)


def test_more_groups_than_blocks_give_at_most_one_group_per_nonempty_block():
    need("pardiso")
    K, offsets = _varied_blocks()
    f = ThreadedBlocks(K, offsets, groups=40)
    assert 2 <= len(f.parts) <= 5 and all(p.shape[0] > 0 for p in f.parts)
    b = np.random.default_rng(2).standard_normal(K.shape[0])
    assert np.abs(f.solve(b) - np.linalg.solve(K.toarray(), b)).max() <= 1e-11


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_fewer_workers_than_groups_solve_every_group_once(workers, monkeypatch):
    """``workers`` threads take the groups in turn (one thread: in order, on the calling
    thread): every row is solved once, as the dense inverse solves it."""
    need("pardiso")
    K, offsets = _varied_blocks()
    f = ThreadedBlocks(K, offsets, groups=5, workers=workers)
    assert f.workers == min(workers, len(f.parts)) and len(f.parts) == 5
    calls = []
    for part in f.parts:
        solve = part.solve
        monkeypatch.setattr(part, "solve", lambda X, solve=solve: calls.append(1) or solve(X))
    X = np.random.default_rng(1).standard_normal((K.shape[0], 2))
    assert np.abs(f.solve(X) - np.linalg.solve(K.toarray(), X)).max() <= 1e-11
    assert len(calls) == 5


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_threaded_groups_refuse_a_bad_worker_count(bad):
    need("pardiso")
    K, offsets = _varied_blocks()
    with pytest.raises(ValueError, match="workers must be None or an int >= 1"):
        ThreadedBlocks(K, offsets, groups=2, workers=bad)


def test_auto_ordering_is_probed_once_for_every_group(monkeypatch):
    """``ordering="auto"`` probes the largest block of the whole matrix once
    (:func:`pardiso_ordering`), not each group's own largest block, and every group takes
    that choice: nested dissection, which the largest block (3D Poisson, 8,000 rows) wins,
    also for the groups of small chains, where a probe of their own would take minimum
    degree."""
    need("pardiso")
    from ddops.linalg import local_solvers

    big = ddops.poisson_3d(20)
    chains = [sp.diags([-np.ones(m - 1), 2.0 * np.ones(m), -np.ones(m - 1)], [-1, 0, 1])
              for m in (50, 60, 70, 80)]
    K = sp.block_diag([*chains[:2], big, *chains[2:]], format="csr")
    offsets = np.concatenate([[0], np.cumsum([50, 60, big.shape[0], 70, 80])])
    ordering, flops = local_solvers.pardiso_ordering(K, offsets)
    assert ordering == "nd" and flops["md"] > flops["nd"]
    assert local_solvers.pardiso_ordering(K[:110, :110], offsets[:3])[0] == "md"
    whole = local_solvers.PardisoBlocks(K, offsets, np.repeat(np.arange(5), np.diff(offsets)))
    assert (whole.ordering, whole.ordering_flops) == (ordering, flops)
    probes = []
    original = local_solvers.PardisoBlocks._cheaper_ordering
    monkeypatch.setattr(local_solvers.PardisoBlocks, "_cheaper_ordering",
                        lambda self, *a: probes.append(1) or original(self, *a))
    f = ThreadedBlocks(K, offsets, groups=5, workers=1)
    assert len(f.parts) >= 3 and not probes
    assert f.ordering == "nd" and f.ordering_flops == flops
    assert all(part.ordering == "nd" for part in f.parts)
    b = np.random.default_rng(3).standard_normal(K.shape[0])
    x = sp.linalg.spsolve(K.tocsc(), b)
    assert np.abs(f.solve(b) - x).max() <= 1e-10 * np.abs(x).max()


@pytest.mark.parametrize("total,chunk,workers,expected", [
    (20_000, 16_384, 2, 10_000),   # split so that both threads get a chunk
    (20_000, 16_384, 1, 16_384),   # one thread: the memory bound alone
    (5_000, 16_384, 2, MIN_SPLIT_ROWS),  # no chunk below the minimum
    (100_000, 16_384, 2, 16_384),  # enough chunks already
    (30_001, 100_000, 3, 10_001),  # rounded up: three chunks, not four
])
def test_rows_per_chunk(total, chunk, workers, expected):
    assert rows_per_chunk(total, chunk, workers) == expected


def test_a_single_chunk_runs_on_the_calling_thread_on_one_blas_thread():
    """With several workers and one chunk, the chunk runs here, with the BLAS pools on one
    thread (small batched dense kernels are slower on BLAS's threads); with one worker,
    under the caller's limits."""
    seen = []

    def chunk():
        seen.append((threading.get_ident(), blas_limits()))
        return 1

    with threadpool_limits(limits=2):
        caller = blas_limits()
        assert list(map_chunks(chunk, [()], workers=2)) == [1]
        assert list(map_chunks(chunk, [()], workers=1)) == [1]
        assert blas_limits() == caller
    (t1, limits1), (t2, limits2) = seen
    assert t1 == t2 == threading.get_ident()
    assert set(limits1) == {1}
    assert limits2 == caller
    assert list(map_chunks(chunk, [], workers=2)) == []



def fresh_blas_pools(monkeypatch) -> None:
    """Every BLAS pool loaded (MKL's too, where PARDISO is installed), and the helper's
    cached selection of them made again, so that it holds all of them."""
    with thread_limit(1):  # (loads mkl_rt, as a set-up with PARDISO does)
        pass
    monkeypatch.setattr(parallel, "_blas_pools", None)


def test_a_small_dense_factorisation_runs_on_one_blas_thread(monkeypatch):
    fresh_blas_pools(monkeypatch)
    with threadpool_limits(limits=2):
        caller = blas_limits()
        with one_blas_thread_below(SMALL_DENSE_ROWS):
            at_the_bound = blas_limits()
        with one_blas_thread_below(SMALL_DENSE_ROWS + 1):
            above = blas_limits()
        after = blas_limits()
    assert set(caller) == {2}
    assert set(at_the_bound) == {1}
    assert above == caller and after == caller  # large ones keep the threads; restored
    with threadpool_limits(limits=1), one_blas_thread_below(10):
        assert set(blas_limits()) == {1}  # (already one: nothing to change)


def test_the_set_up_factorises_small_dense_matrices_on_one_blas_thread(monkeypatch):
    """GenEO on two threads: its dependence check's pivoted Cholesky (scipy's LAPACK) and
    the coarse Cholesky (numpy's) of its few hundred columns run on one BLAS thread, where a
    threaded call could wait for a core that the other OpenBLAS copy's worker spins on."""
    import scipy.linalg

    from ddops.precond import corrections

    fresh_blas_pools(monkeypatch)
    seen = {"dpstrf": [], "cholesky": []}
    dpstrf, cholesky = scipy.linalg.lapack.dpstrf, corrections.dense_spd_cholesky

    def spy_dpstrf(S, **kw):
        seen["dpstrf"].append((S.shape[0], set(blas_limits())))
        return dpstrf(S, **kw)

    def spy_cholesky(M):
        seen["cholesky"].append((M.shape[-1], set(blas_limits())))
        return cholesky(M)

    monkeypatch.setattr(scipy.linalg.lapack, "dpstrf", spy_dpstrf)
    monkeypatch.setattr(corrections, "dense_spd_cholesky", spy_cholesky)
    A, d = channels()
    with threadpool_limits(limits=1):
        M1 = ddops.TwoLevelSchwarz(A, d, options=ddops.SchwarzOptions(coarse="geneo",
                                                                      threads=1))
    one = {k: list(v) for k, v in seen.items()}
    seen = {"dpstrf": [], "cholesky": []}
    M2 = ddops.TwoLevelSchwarz(A, d, options=ddops.SchwarzOptions(coarse="geneo", threads=2))
    assert one["dpstrf"] and one["cholesky"]
    for name, calls in seen.items():
        assert [n for n, _ in calls] == [n for n, _ in one[name]]
        assert all(n <= SMALL_DENSE_ROWS and limits == {1} for n, limits in calls), name
    # the same factors as on one thread, so the same operator
    x = np.random.default_rng(0).standard_normal(A.shape[0])
    np.testing.assert_allclose(M2 @ x, M1 @ x, rtol=1e-12, atol=0)

@two_cpus
@pytest.mark.parametrize("threads,expected", [(1, 1), (2, 2)])
def test_agdsw_and_the_extension_make_a_chunk_per_thread(monkeypatch, threads, expected):
    """Below FACTOR_CHUNK_ROWS the parts are still split into a chunk per thread (of at
    least MIN_SPLIT_ROWS rows): one chunk would leave the second core idle."""
    from ddops.dd import agdsw, extension

    A, d = channels(95)  # 9,025 unknowns: one chunk by the memory bound, two by the threads
    counts = {}
    for module in (agdsw, extension):
        monkeypatch.setattr(module, "map_chunks", lambda f, c, name=module.__name__: (
            counts.setdefault(name, len(c)), map_chunks(f, c, workers=1))[1])
    with threadpool_limits(limits=threads):
        agdsw.agdsw_basis(A, d.owner)
    assert counts == {agdsw.__name__: expected, extension.__name__: expected}


def test_groups_are_cut_at_the_nearest_block_boundary():
    """Blocks of 5 and 7 rows in two groups: the cut at row 6 goes to the boundary at 5
    (the next one, 12, would leave one group)."""
    need("pardiso")
    K = sp.block_diag([sp.diags(np.full(5, 2.0)), sp.diags(np.full(7, 3.0))], format="csr")
    f = ThreadedBlocks(K, [0, 5, 12], groups=2)
    np.testing.assert_array_equal(f.bounds, [0, 5, 12])
    np.testing.assert_allclose(f.solve(np.ones(12)), np.r_[np.full(5, 0.5), np.full(7, 1 / 3)])


def test_threaded_blocks_refuse_bad_input():
    need("pardiso")
    K, offsets = _varied_blocks()
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="groups"):
            ThreadedBlocks(K, offsets, groups=bad)
    f = ThreadedBlocks(K, offsets, groups=2)
    with pytest.raises(ValueError, match="rows"):
        f.solve(np.ones(K.shape[0] + 1))


def test_a_solve_on_the_pool_threads_does_not_deadlock():
    """Solves started on every thread of the shared pool at once (each would wait on the
    pool for its other groups) finish: there the groups are solved in turn."""
    need("pardiso")
    from ddops.linalg.parallel import solve_pool

    K, offsets = _varied_blocks()
    f = ThreadedBlocks(K, offsets, groups=3)
    b = np.random.default_rng(3).standard_normal(K.shape[0])
    ref = np.linalg.solve(K.toarray(), b)
    futures = [solve_pool().submit(f.solve, b) for _ in range(2 * MAX_CHUNK_WORKERS)]
    for future in futures:
        np.testing.assert_allclose(future.result(timeout=60), ref, rtol=1e-10, atol=1e-12)


def test_a_kept_analysis_holds_only_the_chunks_of_the_last_call(monkeypatch):
    """The extension's chunks follow the threads; an update under another limit drops the
    kept analyses of the old chunks instead of keeping them beside the new ones."""
    need("pardiso")
    from ddops.dd import extension
    from ddops.dd.analysis import GDSWAnalysis
    from ddops.dd.gdsw import gdsw_basis

    A, d = channels(95)
    analysis = GDSWAnalysis()
    with threadpool_limits(limits=1):
        one = gdsw_basis(A, d.owner, analysis=analysis).toarray()
    first = set(analysis._chunks)
    monkeypatch.setattr(extension, "rows_per_chunk", lambda total, rows: 3000)  # other chunks
    two = gdsw_basis(A, d.owner, analysis=analysis).toarray()
    assert len(first) == 1 and len(analysis._chunks) > 1
    assert not first & set(analysis._chunks)
    np.testing.assert_allclose(two, one, atol=1e-12)


def test_a_refactorisation_refuses_another_pattern():
    """An entry coupling two groups, or one more inside a group, is another pattern."""
    need("pardiso")
    K, offsets = _varied_blocks()
    f = ThreadedBlocks(K, offsets, groups=2)
    a = int(f.bounds[1])
    for i, j in ((a - 1, a), (0, 12)):  # across the groups' cut; inside the first block
        other = K.tolil()
        other[i, j] = other[j, i] = -0.01
        with pytest.raises(ValueError, match="pattern"):
            ThreadedBlocks(K, offsets, groups=2).refactor(sp.csr_matrix(other))
    with pytest.raises(ValueError, match="shape"):
        f.refactor(K[:-1, :-1])


def test_a_failing_group_returns_only_when_the_other_groups_are_done():
    """A group's error is raised once no other group is still solving (a caller may free
    the factors next)."""
    need("pardiso")
    K, offsets = _varied_blocks()
    f = ThreadedBlocks(K, offsets, groups=2)
    done = []

    def slow(X, trans="N"):
        time.sleep(0.3)
        done.append(True)
        return np.zeros(X.shape)

    def failing(X, trans="N"):
        raise RuntimeError("group 0 failed")

    f.parts[0].solve, f.parts[1].solve = failing, slow
    with pytest.raises(RuntimeError, match="group 0"):
        f.solve(np.ones(K.shape[0]))
    assert done == [True]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_task_beside_the_groups_runs_once_and_leaves_the_solve_unchanged(workers):
    """``solve_beside`` returns :meth:`solve`'s solution bit for bit and what the task
    returned, having run it exactly once (with one worker too, on the calling thread)."""
    need("pardiso")
    K, offsets = _varied_blocks()
    f = ThreadedBlocks(K, offsets, groups=3, workers=workers)
    X = np.random.default_rng(4).standard_normal((K.shape[0], 2))
    runs = []
    out, extra = f.solve_beside(X, lambda: runs.append(threading.get_ident()) or "coarse")
    assert extra == "coarse" and len(runs) == 1
    assert np.array_equal(out, f.solve(X))
    assert np.array_equal(f.solve_beside(X)[0], out) and f.solve_beside(X)[1] is None
    if workers == 1:
        assert runs == [threading.get_ident()]


@two_cpus
def test_a_task_beside_the_groups_runs_while_they_solve(monkeypatch):
    """With two workers the task runs beside the groups, not after them: every group's solve
    waits until the task has started (run in turn after the solves, they would time out),
    and the task waits until a group has started."""
    need("pardiso")
    K, offsets = _varied_blocks()
    f = ThreadedBlocks(K, offsets, groups=3, workers=2)
    task_started, group_started, waited = threading.Event(), threading.Event(), []
    for part in f.parts:
        solve = part.solve

        def waiting(X, trans="N", solve=solve):
            group_started.set()
            waited.append(task_started.wait(timeout=10))
            return solve(X)

        monkeypatch.setattr(part, "solve", waiting)

    def task():
        task_started.set()
        return group_started.wait(timeout=10)

    X = np.random.default_rng(5).standard_normal(K.shape[0])
    out, saw_a_group = f.solve_beside(X, task)
    assert saw_a_group and waited == [True] * 3
    assert np.abs(out - np.linalg.solve(K.toarray(), X)).max() <= 1e-11


def test_a_failing_task_beside_the_groups_raises_once_they_are_done():
    """The task's error is raised once every group has been solved."""
    need("pardiso")
    K, offsets = _varied_blocks()
    f = ThreadedBlocks(K, offsets, groups=2, workers=2)
    done = []
    for part in f.parts:
        part.solve = lambda X, trans="N": time.sleep(0.2) or done.append(1) or np.zeros(X.shape)

    def failing():
        raise RuntimeError("the coarse task failed")

    with pytest.raises(RuntimeError, match="coarse task"):
        f.solve_beside(np.ones(K.shape[0]), failing)
    assert done == [1, 1]
