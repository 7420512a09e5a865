"""Independent chunks of a set-up on several threads, each on one BLAS thread.

The batched set-up phases work on memory-bounded chunks of subdomains (a block-diagonal
factorisation and its solves per chunk).  Chunks do not depend on one another, and their
large calls (PARDISO through ctypes, BLAS, scipy's sparse kernels) release the GIL, so
they can run side by side on threads.  One thread per chunk with one BLAS thread each
avoids the many small threaded BLAS calls whose barriers cost more than they gain on a
shared machine (``docs/preconditioning.md``, "Where the set-up goes").

The number of workers follows the BLAS thread limit of the calling thread, as
:mod:`threadpoolctl` reports it: ``threads=1`` of the preconditioners (which set that
limit with :func:`~ddops.linalg.local_solvers.thread_limit`) or a user's
``threadpool_limits(1)`` keeps every chunk on the calling thread, in order.

The same holds for the applications: :class:`ThreadedBlocks` splits a block-diagonal
PARDISO factorisation into groups of consecutive blocks solved side by side.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

import numpy as np
import scipy.sparse as sp

from .local_solvers import (
    BlockSolver,
    PardisoBlocks,
    SingularBlockError,
    diagonal_block,
    limit_mkl_threads_here,
    pardiso_ordering,
    thread_limit,
)

__all__ = ["MAX_CHUNK_WORKERS", "MIN_SPLIT_ROWS", "SMALL_DENSE_ROWS", "Beside", "ThreadedBlocks",
           "chunk_workers", "map_chunks", "one_blas_thread_below", "rows_per_chunk",
           "solve_pool"]

#: At most this many chunks in flight: each holds its factors and a few dense blocks of up to
#: a few hundred MB (``ddops.dd.extension.FACTOR_CHUNK_ROWS`` rows times the subspace).
MAX_CHUNK_WORKERS = 8


def chunk_workers() -> int:
    """Threads for independent chunks: the smallest BLAS thread limit now in force.

    Read from :func:`threadpoolctl.threadpool_info` (the BLAS libraries loaded in the
    process), at most the CPU count and :data:`MAX_CHUNK_WORKERS`; 1 when no BLAS library
    reports a limit.
    """
    from threadpoolctl import threadpool_info

    limits = [int(p["num_threads"]) for p in threadpool_info()
              if p.get("user_api") == "blas" and p.get("num_threads")]
    if not limits:
        return 1
    return max(1, min(min(limits), os.cpu_count() or 1, MAX_CHUNK_WORKERS))


#: :func:`one_blas_thread_below` keeps a dense factorisation of at most this many rows on one
#: BLAS thread.  Two threads gain little there (numpy's Cholesky on one core / two: 1,000
#: rows 15.1 / 14.6 ms, 2,000 rows 81 / 65 ms, 3,000 rows 247 / 175 ms), and a threaded call
#: can wait for a core that the idle worker of the *other* OpenBLAS copy (numpy and scipy
#: load one each) still spins on after a call of its own, for about 0.1 s (its timeout of
#: 2^28 cycles): GenEO's coarse Cholesky of 448 rows on the 2D channels took 54-112 ms
#: instead of 2 ms in three set-ups of eight on two threads, right after its dependence
#: check's pivoted Cholesky (scipy's), and the worker left spinning by the last threaded call
#: of a set-up took 0.10-0.13 s of CPU from the CG that followed it.
SMALL_DENSE_ROWS = 2000

_blas_pools: Any = None


def one_blas_thread_below(rows: int) -> contextlib.AbstractContextManager:
    """One BLAS thread for a dense factorisation of at most :data:`SMALL_DENSE_ROWS` rows
    (a no-op above that, or where BLAS already runs on one thread).

    The same factor as on one thread, whatever the set-up's ``threads``, and no wait on a
    core that a spinning BLAS worker holds (see the constant).  The limit is
    process-wide (:mod:`threadpoolctl`): for the calling thread of a set-up, not for its
    chunks (which run on one BLAS thread already).  It covers the BLAS libraries loaded at
    its first call (numpy's and scipy's, which ``ddops`` loads on import).
    """
    global _blas_pools
    if rows > SMALL_DENSE_ROWS:
        return contextlib.nullcontext()
    if _blas_pools is None:  # (cached: a new controller scans the loaded libraries, ~2 ms)
        from threadpoolctl import ThreadpoolController

        _blas_pools = ThreadpoolController().select(user_api="blas")
    if all(pool.num_threads <= 1 for pool in _blas_pools.lib_controllers):
        return contextlib.nullcontext()
    return _blas_pools.limit(limits=1)


#: :func:`rows_per_chunk` splits no chunk below this many rows: such a chunk's work takes
#: milliseconds, and its solvers stay those of one chunk (an AMG hierarchy of one level is
#: an exact solve).
MIN_SPLIT_ROWS = 4096


def rows_per_chunk(total_rows: int, chunk_rows: int, workers: int | None = None) -> int:
    """Rows per chunk for :func:`~ddops.linalg.local_solvers.chunk_bounds`: ``chunk_rows``
    (the memory bound), or fewer, down to :data:`MIN_SPLIT_ROWS`, so that each of
    ``workers`` threads (default :func:`chunk_workers`) gets a chunk.

    One chunk of 20,000 rows on the calling thread leaves the other cores idle, and its
    batched dense kernels on BLAS's threads are slower than on one (AGDSW's Schur
    complements on 3D elasticity: 1.3 s on one thread, 5.2 s on two).
    """
    workers = chunk_workers() if workers is None else max(int(workers), 1)
    share = max(-(-int(total_rows) // workers), MIN_SPLIT_ROWS)
    return max(1, min(int(chunk_rows), share))


def map_chunks(function: Callable[..., Any], chunks: Sequence[tuple],
               workers: int | None = None) -> Iterator[Any]:
    """``function(*chunk) for chunk in chunks``, on up to ``workers`` threads.

    Parameters
    ----------
    function : callable
        Called once per chunk with the chunk's items as arguments.  It must not depend on
        the order in which chunks run (each reads shared inputs and returns its result).
    chunks : sequence of tuples
        The chunks' arguments.
    workers : int, optional
        Threads (default :func:`chunk_workers`).  With one, every call runs on the
        calling thread in order, under the caller's limits; with more, a single chunk runs
        on the calling thread and several on a thread pool, with the BLAS and MKL pools
        limited to one thread while they run (small batched dense kernels are slower on
        BLAS's threads than on one) (MKL's also in each worker,
        :func:`~ddops.linalg.local_solvers.limit_mkl_threads_here`; an OpenMP limit set by
        threadpoolctl holds in the calling thread only).

    Yields
    ------
    object
        The results in the order of ``chunks``, each as soon as it and those before it are
        done (a caller that folds them in keeps about one result per worker, not all); the
        first chunk (in that order) whose call raised re-raises its exception there.

    Notes
    -----
    The limits of the threaded path are process-wide (:mod:`threadpoolctl`) while the
    results are consumed: other threads of the process run their BLAS calls on one thread
    meanwhile, and two set-ups started at once from two threads may restore each other's
    limits in the wrong order.
    """
    workers = chunk_workers() if workers is None else int(workers)
    if workers <= 1 or not chunks:
        for chunk in chunks:
            yield function(*chunk)
        return
    if len(chunks) == 1:  # on the calling thread, but on one BLAS thread as every chunk
        with thread_limit(1):
            yield function(*chunks[0])
        return
    # one thread per pool for the whole process (BLAS, MKL), and MKL's thread-local limit in
    # every worker, which the global one does not reach
    with thread_limit(1), ThreadPoolExecutor(max_workers=min(workers, len(chunks)),
                                             initializer=limit_mkl_threads_here,
                                             initargs=(1,)) as pool:
        yield from pool.map(lambda chunk: function(*chunk), chunks)


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
_in_pool = threading.local()  # flag set on the pool's own threads


def _mark_pool_thread() -> None:
    _in_pool.flag = True


def solve_pool() -> ThreadPoolExecutor:
    """The process's pool for the groups of a threaded solve (created on first use).

    One pool of :data:`MAX_CHUNK_WORKERS` threads shared by every
    :class:`ThreadedBlocks`, so that many preconditioners do
    not hold many idle threads.  Its tasks are leaves (one PARDISO solve of a group, one
    MKL thread each); a :class:`ThreadedBlocks` solved on one of its threads solves its
    groups in turn instead of waiting on the pool, so sharing it cannot deadlock.  A forked
    child starts a pool of its own.
    """
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=MAX_CHUNK_WORKERS,
                                       thread_name_prefix="ddops-solve",
                                       initializer=_mark_pool_thread)
        return _pool


def _forget_pool_in_child() -> None:  # the parent's threads do not exist in a forked child
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_in_child)


class Beside:
    """Tasks run on a thread of its own, started at once, beside the caller's work; at
    :meth:`join` the caller takes the tasks still left.

    The thread takes the tasks in turn while the caller does other work (one core each);
    once the caller is done it joins and takes the next tasks too, so that both cores
    finish them (the subdomains' numeric factorisations of a set-up, one task per group,
    beside its coarse space: :meth:`ThreadedBlocks.numeric_tasks`).  For tasks that set no
    process-wide thread limit (:mod:`threadpoolctl`'s limits are process-wide, and two
    threads entering and leaving them restore each other's in the wrong order): PARDISO
    takes its one MKL thread per call.

    Parameters
    ----------
    tasks : sequence of callables
        Independent tasks, each called once with no argument (in any order, on either
        thread).
    on_error : callable, optional
        Called once every task has finished when one of them raised, before :meth:`join`
        raises (to release what the others made).

    Attributes
    ----------
    seconds : float
        The wall time from the start to the end of the last task (after :meth:`join`).
    """

    def __init__(self, tasks: Sequence[Callable[[], Any]],
                 on_error: Callable[[], Any] | None = None) -> None:
        self._tasks = list(tasks)
        self._taken = iter(range(len(self._tasks)))  # next() is atomic under the GIL
        self._errors: dict[int, BaseException] = {}
        self._on_error = on_error
        self._start = self._end = time.perf_counter()
        self.seconds = 0.0
        self._thread = threading.Thread(target=self._work, name="ddops-beside", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        """Tasks in turn until none is left; their errors are kept for :meth:`join`."""
        for j in self._taken:
            try:
                self._tasks[j]()
            except BaseException as exc:  # handed to the caller by join()
                self._errors[j] = exc
            self._end = max(self._end, time.perf_counter())

    def join(self) -> float:
        """Take the tasks left, wait for the thread; returns the seconds this took, or
        raises the error of the first task (in the given order) that raised, once every
        task has finished (``on_error`` called first)."""
        start = time.perf_counter()
        self._work()
        self._thread.join()
        waited = time.perf_counter() - start
        self.seconds = self._end - self._start
        if self._errors:
            error = self._errors[min(self._errors)]
            self._errors = {}
            if self._on_error is not None:
                self._on_error()
            raise error
        return waited


class ThreadedBlocks(BlockSolver):
    """Groups of consecutive blocks, each with its own PARDISO factorisation, factorised
    and solved side by side on threads.

    PARDISO runs on one MKL thread (see :class:`~ddops.linalg.local_solvers.PardisoBlocks`;
    its solve phase is no faster on more), so an application of a one-level Schwarz operator
    with one factorisation uses one core however many there are.  The blocks being
    independent, ``groups`` factorisations of consecutive blocks of about equal rows give
    ``groups`` solves that run at once: the calling thread and the threads of
    :func:`solve_pool` take the groups in turn (ctypes releases the GIL).  Measured on
    two cores, one application of GDSW's local solver: 3D elasticity, 64 parts of 750
    unknowns, 7.5 -> 4.4 ms; 3D Poisson, 62 parts of 2,750, 15.5 -> 9.5 ms.  The
    factorisations run side by side too (:func:`map_chunks`): 0.22 -> 0.13 s and
    0.50 -> 0.25 s.

    In a Krylov loop whose vector operations use a threaded BLAS (numpy's default), the BLAS
    threads spin between calls and take the other cores: there the solves gain little
    (scipy's CG, 3D Poisson: 0.79 s with one group, 0.84 s with two), while under
    ``threadpool_limits(1)`` around the Krylov call they gain what the application gains
    (0.53 s).

    Parameters
    ----------
    K, offsets, dtype, ordering, block_size
        As for :func:`~ddops.linalg.local_solvers.factorize_blocks`.
    groups : int
        At least 1: group ``k`` starts at the block boundary nearest to row
        ``k m / groups`` (about equal rows; blocks larger than ``m / groups`` can leave
        two cuts on one boundary, so there may be fewer groups).
    numeric : bool
        False: the groups are analysed only, and :meth:`factor_deferred` or
        :meth:`numeric_tasks` factorises them later (see
        :class:`~ddops.linalg.local_solvers.PardisoBlocks`).
    workers : int, optional
        Threads that factorise and solve the groups (default: one per group).  With one,
        the groups are factorised and solved in turn on the calling thread: more groups
        than threads still pay, since PARDISO's analysis of a stack of blocks grows faster
        than its rows (see :data:`~ddops.precond.corrections.LOCAL_GROUP_ROWS`).  With
        ``1 < workers < groups`` each thread takes the next group as it finishes one.

    Attributes
    ----------
    parts : list of PardisoBlocks
        One solver per group.
    bounds : numpy.ndarray
        ``len(parts) + 1`` row offsets of the groups.
    ordering : str
        The groups' ordering (``"auto"`` probes the largest block of all once, see
        :func:`~ddops.linalg.local_solvers.pardiso_ordering`, and every group takes its
        choice).
    ordering_flops : dict
        That probe's flops (see :class:`~ddops.linalg.local_solvers.PardisoBlocks`).
    workers : int
        The threads that factorise and solve the groups.
    """

    name = "pardiso"

    def __init__(self, K: sp.spmatrix, offsets: np.ndarray, *, groups: int,
                 workers: int | None = None, dtype: Any = np.float64,
                 ordering: str = "auto", block_size: int = 1, numeric: bool = True) -> None:
        K = sp.csr_matrix(K)
        offsets = np.asarray(offsets, dtype=np.int64)
        if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
            raise ValueError(f"groups must be an int >= 1, got {groups!r}")
        if workers is not None and (isinstance(workers, bool)
                                    or not isinstance(workers, (int, np.integer))
                                    or workers < 1):
            raise ValueError(f"workers must be None or an int >= 1, got {workers!r}")
        if K.shape[0] == 0:
            raise ValueError("ThreadedBlocks needs a nonempty matrix")
        block = np.repeat(np.arange(offsets.size - 1), np.diff(offsets))
        if offsets[-1] != K.shape[0] or (K.shape[0] != K.shape[1]):
            raise ValueError(f"offsets must end at the {K.shape[0]} rows of a square K, got "
                             f"{int(offsets[-1])} for shape {K.shape}")
        self.shape, self.dtype = K.shape, np.dtype(dtype)
        self.parts: list[PardisoBlocks] = []
        m = K.shape[0]
        # group k starts at the block boundary nearest to k m / groups
        target = m * np.arange(groups) // groups
        after = np.minimum(np.searchsorted(offsets, target), offsets.size - 1)
        before = np.maximum(after - 1, 0)
        nearer = np.abs(offsets[before] - target) < np.abs(offsets[after] - target)
        cuts = np.where(nearer, offsets[before], offsets[after])
        self.bounds = np.unique(np.concatenate([[0], cuts[cuts < m], [m]])).astype(np.int64)
        self._first_block = np.searchsorted(offsets, self.bounds[:-1])
        count = self.bounds.size - 1
        self.workers = count if workers is None else min(int(workers), count)

        self.ordering_flops: dict = {}
        if ordering == "auto" and count > 1:
            # one probe of the largest block for every group, instead of one per group
            ordering, self.ordering_flops = pardiso_ordering(K, offsets, dtype, block_size)
        self.parts = self._on_groups(lambda k, a, b: PardisoBlocks(
            diagonal_block(K, a, b), offsets[(offsets >= a) & (offsets <= b)] - a,
            block[a:b] - self._first_block[k], dtype=dtype, ordering=ordering,
            block_size=block_size, numeric=numeric))
        self.ordering = self.parts[0].ordering
        if not self.ordering_flops:
            self.ordering_flops = self.parts[0].ordering_flops

    @property
    def nnz(self) -> int:
        return sum(int(p.nnz) for p in self.parts)

    @property
    def order(self) -> np.ndarray | None:
        """The elimination order of all rows: each group's
        :attr:`~ddops.linalg.local_solvers.PardisoBlocks.order`, in the whole matrix's
        numbering, one group after the other (None when a group keeps its order inside
        PARDISO)."""
        orders = [p.order for p in self.parts]
        if any(o is None for o in orders):
            return None
        return np.concatenate([o + b for o, b in zip(orders, self.bounds[:-1], strict=True)])

    @property
    def nbytes(self) -> int:
        return sum(int(p.nbytes) for p in self.parts)

    def solve(self, X: np.ndarray, trans: str = "N") -> np.ndarray:
        return self.solve_beside(X)[0]

    def solve_beside(self, X: np.ndarray, beside: Callable[[], Any] | None = None
                     ) -> tuple[np.ndarray, Any]:
        """:meth:`solve`, and ``beside()`` run as one more task among the groups' solves.

        The workers (the calling thread and ``workers - 1`` threads of :func:`solve_pool`)
        take the tasks in turn as they finish one, ``beside`` first: a task of another
        operator that does not depend on this solve (the coarse correction of an additive
        two-level preconditioner, :class:`~ddops.precond.corrections.SumCorrection`) then
        fills the time a worker would wait for the others, instead of running after all of
        them.  Each group writes its own rows, so the solution is the same bit for bit in
        any order.  Returns the solution and what ``beside`` returned (None without it);
        an exception of any task is raised once every task has finished.
        """
        X = np.asarray(X)
        if X.ndim not in (1, 2) or X.shape[0] != self.shape[0]:
            raise ValueError(f"X must have {self.shape[0]} rows (1-D or 2-D), got shape "
                             f"{X.shape}")
        extra = [None]
        if X.ndim == 2 and X.shape[1] == 0:
            if beside is not None:
                extra[0] = beside()
            return np.zeros(X.shape), extra[0]
        b, out = self.bounds, np.empty(X.shape)
        tasks = ([-1] if beside is not None else []) + list(range(len(self.parts)))
        taken = iter(range(len(tasks)))  # next() of a range iterator is atomic under the GIL

        def work() -> None:  # tasks in turn until none is left
            for j in taken:
                k = tasks[j]
                if k < 0:
                    extra[0] = beside()
                else:
                    out[b[k]:b[k + 1]] = self.parts[k].solve(X[b[k]:b[k + 1]])

        # on a pool thread (waiting on the pool could deadlock) or with one worker: in turn
        if self.workers <= 1 or getattr(_in_pool, "flag", False):
            work()
            return out, extra[0]
        pool = solve_pool()
        rest = [pool.submit(work) for _ in range(self.workers - 1)]
        try:
            work()
            for future in rest:
                future.result()
        finally:  # no task still running once this returns or raises
            wait(rest)
        return out, extra[0]

    def refactor(self, K: sp.csr_matrix) -> ThreadedBlocks:
        """Every group's numeric phase on the values of ``K`` (the pattern of the first
        matrix; a ValueError otherwise), side by side; returns ``self``.

        Each group checks its rows' pattern (its own copy, none of the whole matrix is
        kept): an entry outside the groups' diagonal blocks changes some group's rows.
        """
        self._side_by_side(self.numeric_tasks(K))
        return self

    def factor_deferred(self) -> ThreadedBlocks:
        """Every group's numeric factorisation left out by ``numeric=False``, side by side
        (:meth:`numeric_tasks` for threads of the caller's own); returns ``self``."""
        self._side_by_side(self.numeric_tasks())
        return self

    def numeric_tasks(self, K: sp.csr_matrix | None = None) -> list[Callable[[], None]]:
        """One callable per group: its numeric factorisation left out by ``numeric=False``
        (:meth:`factor_deferred`), or with ``K`` its refactorisation on the values of ``K``
        (:meth:`refactor`), a singular block named in the whole matrix's numbering.  For a
        caller that runs them on threads of its own (:class:`Beside`); a failing group
        frees its own factors only (free the others once all are done)."""
        if K is not None:
            K = sp.csr_matrix(K)
            if K.shape != self.shape:
                raise ValueError(f"refactor: K has shape {K.shape}, not {self.shape}")

        def task(k: int) -> None:
            a, b = int(self.bounds[k]), int(self.bounds[k + 1])
            try:
                if K is None:
                    self.parts[k].factor_deferred()
                else:
                    self.parts[k].refactor(diagonal_block(K, a, b))
            except SingularBlockError as exc:
                raise SingularBlockError(exc.block + int(self._first_block[k])) from None

        return [functools.partial(task, k) for k in range(self.bounds.size - 1)]

    def _side_by_side(self, tasks: list[Callable[[], None]]) -> None:
        """The groups' ``tasks`` on :attr:`workers` threads; a failure frees every group."""
        try:
            list(map_chunks(lambda task: task(), [(task,) for task in tasks],
                            workers=self.workers))
        except BaseException:
            self.free()
            raise

    def _on_groups(self, call: Callable[[int, int, int], Any]) -> list:
        """``call(k, a, b)`` for every group ``k`` of rows ``a:b``, side by side; a singular
        block is named in the whole matrix's numbering, and a failure frees every group."""
        def one(k: int) -> Any:
            try:
                return call(k, int(self.bounds[k]), int(self.bounds[k + 1]))
            except SingularBlockError as exc:
                raise SingularBlockError(exc.block + int(self._first_block[k])) from None

        groups = self.bounds.size - 1
        try:
            return list(map_chunks(one, [(k,) for k in range(groups)], workers=self.workers))
        except BaseException:
            self.free()
            raise

    def free(self) -> None:
        """Release every group's factors (see :meth:`PardisoBlocks.free`)."""
        for part in getattr(self, "parts", []):
            part.free()

