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
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .local_solvers import limit_mkl_threads_here, thread_limit

__all__ = ["MAX_CHUNK_WORKERS", "chunk_workers", "map_chunks"]

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
        Threads (default :func:`chunk_workers`).  With one, or one chunk, every call runs
        on the calling thread in order; otherwise on a thread pool, with the BLAS and MKL
        pools limited to one thread while it runs (MKL's also in each worker,
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
    workers = min(workers, len(chunks))
    if workers <= 1:
        for chunk in chunks:
            yield function(*chunk)
        return
    # one thread per pool for the whole process (BLAS, MKL), and MKL's thread-local limit in
    # every worker, which the global one does not reach
    with thread_limit(1), ThreadPoolExecutor(
            max_workers=workers, initializer=limit_mkl_threads_here, initargs=(1,)) as pool:
        yield from pool.map(lambda chunk: function(*chunk), chunks)
