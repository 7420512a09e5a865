"""Solvers for block-diagonal symmetric positive definite matrices.

The local solves of :class:`ddops.TwoLevelSchwarz` (``diag(A_1, ..., A_N)``, one block
per overlapping subdomain) and the interior solves of the GDSW harmonic extension
(``A_II``, one block per part) are solves with a block-diagonal SPD matrix ``K``.
:func:`factorize_blocks` builds one of three solvers for all blocks at once:

``"superlu"``
    SuperLU (scipy) with a symmetric minimum-degree ordering and diagonal pivots, in
    chunks of consecutive blocks of about :data:`CHUNK_ROWS` rows.  Always available;
    the reference path.
``"pardiso"``
    MKL PARDISO's supernodal Cholesky factorisation (matrix type 2, nested-dissection
    ordering from METIS, on one MKL thread) of the whole block-diagonal matrix, through the
    ``mkl_rt`` library that the optional ``pypardiso`` package locates (extra
    ``ddops[solvers]``), called by its 64-bit-integer entry point ``pardiso_64`` (right
    under either MKL interface layer, LP64 or ILP64).  In 3D it has a fraction of
    SuperLU's fill (an upper triangle, and nested dissection instead of minimum degree)
    and factorises several times faster.
``"amg"``
    Inexact: ``cycles`` aggregation-AMG V-cycles (pyamg's aggregation hierarchy of ``K``
    with plain aggregation, :data:`AMG_OPTIONS`; extra ``ddops[precond]``) with
    symmetric Gauss-Seidel before and after the coarse correction and an exact coarsest
    solve.  Aggregates never cross blocks (``K`` has no
    coupling between them), so this is one V-cycle per block, computed for all blocks
    at once.  A fixed number of cycles from a zero initial guess with a smoother and
    its adjoint is a fixed linear operator ``B`` that is symmetric and, for SPD ``K``,
    positive definite (each V-cycle is an A-norm contraction), so a Schwarz
    preconditioner built on it stays SPD and CG applies.

Every solver checks what it factorised and raises :class:`SingularBlockError` naming a
block that is singular or not positive definite.  :func:`thread_limit` limits the threads
of all of them (PARDISO's MKL threads included) in a ``with`` block.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import glob
import importlib.util
import numbers
import os
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import scipy.linalg
import scipy.sparse as sp

from . import spd
from .spd import sparse_spd_factor, superlu_spd

__all__ = [
    "SPARSE_SOLVERS",
    "EXACT_SOLVERS",
    "CHUNK_ROWS",
    "AMG_CYCLES",
    "AMG_OPTIONS",
    "PARDISO_ND_FLOPS_PER_ENTRY",
    "PARDISO_NODE_MINIMUM_DEGREE",
    "PARDISO_ORDERINGS",
    "PARDISO_ERRORS",
    "SINGULAR_PIVOT_RTOL",
    "SUPERLU_PANEL_SIZE",
    "SingularBlockError",
    "BlockSolver",
    "pardiso_schur_complement",
    "pardiso_inertia",
    "pardiso_pivots",
    "pardiso_ordering",
    "node_graph",
    "node_nested_dissection",
    "node_minimum_degree",
    "SuperLUBlocks",
    "PardisoBlocks",
    "AMGBlocks",
    "factorize_blocks",
    "pardiso_available",
    "amg_available",
    "check_threads",
    "thread_limit",
    "limit_mkl_threads_here",
    "default_exact_solver",
    "chunk_bounds",
    "diagonal_block",
    "check_blocks_by_one_solve",
    "superlu_spd",
    "superlu_chunk",
]

#: Sparse solvers of :func:`factorize_blocks`.
SPARSE_SOLVERS = ("superlu", "pardiso", "amg")

#: The exact ones among them.
EXACT_SOLVERS = ("superlu", "pardiso")

#: SuperLU factorises block-diagonal matrices in chunks of consecutive blocks of about
#: this many rows (its time per block grows with the number of blocks in one matrix).
CHUNK_ROWS = 2**14

#: V-cycles per application of the ``"amg"`` solver.
AMG_CYCLES = 1

#: :data:`ddops.linalg.spd.SINGULAR_PIVOT_RTOL` (defined and read there): a Cholesky pivot
#: below this fraction of its diagonal entry marks a block as numerically singular.
SINGULAR_PIVOT_RTOL = spd.SINGULAR_PIVOT_RTOL

#: :data:`ddops.linalg.spd.SUPERLU_PANEL_SIZE` (defined and read there).
SUPERLU_PANEL_SIZE = spd.SUPERLU_PANEL_SIZE

#: Relative slack of the Cauchy-Schwarz test of :func:`check_blocks_by_one_solve`.
CAUCHY_SCHWARZ_SLACK = 1e-6

#: Options of pyamg's ``smoothed_aggregation_solver`` for the ``"amg"`` solver besides the
#: symmetric smoothers: plain (unsmoothed) aggregation, which also draws no random numbers
#: (smoothed prolongation estimates a spectral radius from numpy's global generator).
#: Against smoothed prolongation it halves the set-up and the hierarchy's memory for a
#: few more Schwarz iterations, and less time in all (one BLAS thread; 3D elasticity,
#: 227k unknowns: local set-up 7.8 -> 3.4 s, hierarchy 397 -> 221 MiB, 47 -> 50 CG
#: iterations; 3D Poisson 60^3: 43 -> 47 iterations, set-up + solve 8.1 -> 5.5 s; 2D
#: Poisson 500^2: 51 -> 62, 5.4 -> 4.6 s).
AMG_OPTIONS = {"smooth": None}

#: With a block size above 1 (:class:`PardisoBlocks`), minimum degree orders the node graph
#: (:func:`node_minimum_degree`) instead of the unknowns' graph.  Measured (the subdomain
#: matrices, one thread, ordering, analysis and factorisation): 3D elasticity with stiff
#: inclusions, 64 subdomains of about 750 unknowns, 0.33 s -> 0.27 s and 5.5 M -> 4.4 M factor
#: nonzeros; the homogeneous 227,448-unknown beam, 12 subdomains of about 3,100, 0.76 s ->
#: 0.41-0.58 s and 10.8 M -> 7.4 M; 2D elasticity, 40 subdomains of about 500, the same
#: time and 0.53 M -> 0.47 M.  GenEO's inertia orders its chunks' node graph likewise
#: where nothing is shared (:mod:`ddops.dd.geneo`).  Off: PARDISO's minimum degree on the
#: unknowns' graph.
PARDISO_NODE_MINIMUM_DEGREE = True

#: Fill-reducing orderings of :class:`PardisoBlocks`.
PARDISO_ORDERINGS = ("auto", "nd", "md")

#: Factorisation flops that nested dissection must save per stored entry of the upper
#: triangle to be chosen by ``ordering="auto"``: its analysis costs about 0.5 us per entry
#: more than minimum degree's (METIS against AMD inside PARDISO), and the numeric phase runs
#: at about 10 GFlop/s on one core, so 0.5e-6 s x 1e10 flop/s.  Measured, one thread, the
#: whole block-diagonal matrix (analysis + factorisation, nd against md): 3D Poisson,
#: 62 parts of 3,000 unknowns, 0.74 s against 0.67 s (nd saves 7 MFlop on the largest block,
#: the rule asks 52); 3D elasticity, 64 parts of 900, 0.35 s against 0.20 s; 3D elasticity,
#: 8 parts of 4,300, 0.27 s against 0.28 s (nd saves 560 MFlop, the rule asks 450).
PARDISO_ND_FLOPS_PER_ENTRY = 5000

#: A full solve with ``p > 1`` right-hand sides goes to PARDISO one column at a time when
#: ``p * nnz(L) < PARDISO_COLUMN_SOLVES * rows``.  PARDISO's solve with several right-hand
#: sides (its classic factorisation, the one used here) costs about 0.6 us per row more
#: than as many single-column solves, which cost about 3.5 ns per factor nonzero each
#: (MKL 2026.2, one thread, block-diagonal Laplacians of about 15,000 rows: 2D, 13 factor
#: nonzeros per row, 2 columns 10.5 ms against 2.0 ms one by one, 32 columns 38 ms against
#: 31 ms; 3D, 70 per row, 4 columns 17.8 ms against 12.0 ms, 8 columns alike, 32 columns
#: 64 ms against 109 ms).  The columns are then solved one by one while their triangular
#: work stays below about that overhead (the crossover of both measurements; over the 602
#: multi-column solves of GDSW's, AGDSW's and GenEO's set-ups on the problems of
#: ``benchmarks/setup_profile.py``, thresholds 300 to 600 all take the faster way but for
#: 0.3 %: ``benchmarks/pardiso_columns.py --calls``, 4.53 s in one call each, 2.45 s so).  GenEO's
#: block Krylov method solves 4 to 12 columns at a time on every chunk, and the harmonic
#: extension a few on the 2D problems.  (PARDISO's two-level factorisation, ``iparm[23] =
#: 10``, solves several columns without the overhead, but factorised 3D elasticity's
#: subdomains twice as slowly and reports no inertia.)
PARDISO_COLUMN_SOLVES = 400

#: Up to this many eliminated rows :func:`pardiso_schur_complement` eliminates them densely.
#: MKL's partial factorisation reads memory it never wrote when it eliminates none or one
#: row (its ordering stage copies an uninitialised count of entries: the process dies or
#: not depending on what the heap held before, which glibc's ``MALLOC_PERTURB_`` makes
#: certain); a few rows cost the dense update of ``s`` either way.
SCHUR_DENSE_ELIMINATED = 8

#: PARDISO's error codes and their meaning (oneMKL reference, ``pardiso``).
PARDISO_ERRORS = {
    -1: "input inconsistent",
    -2: "not enough memory",
    -3: "reordering problem",
    -4: "zero pivot, numerical factorization or iterative refinement problem",
    -5: "unclassified (internal) error",
    -6: "reordering failed",
    -7: "diagonal matrix is singular",
    -8: "32-bit integer overflow problem",
    -9: "not enough memory for out-of-core",
    -10: "error opening out-of-core files",
    -11: "read/write error with out-of-core files",
}

#: The codes that mean a singular or not positive definite matrix: only these start the
#: block-by-block search for the bad block.
_PARDISO_SINGULAR = (-4, -7)

#: The codes that mean a failed allocation (raised as MemoryError).
_PARDISO_NO_MEMORY = (-2, -9)


class SingularBlockError(ValueError):
    """A diagonal block of ``K`` is singular or not positive definite.

    Attributes
    ----------
    block : int
        The label of (one of) the bad blocks.
    """

    def __init__(self, block: int, message: str | None = None) -> None:
        self.block = int(block)
        super().__init__(message or f"diagonal block {self.block} is singular or not "
                         "positive definite")


_SOLVERS_EXTRA = "local_solver='pardiso' needs pypardiso and MKL: pip install 'ddops[solvers]'"


def _load_mkl_runtime() -> ctypes.CDLL:
    """Load ``mkl_rt``: where the ``mkl`` wheel puts it, else wherever ``pypardiso`` finds
    it.  (Importing ``pypardiso`` builds a solver that walks the whole installation for the
    library, 0.3-0.9 s, so it is imported only when the library is not where the wheel
    puts it.)  Raises ImportError or OSError when there is none that loads."""
    if importlib.util.find_spec("pypardiso") is None:
        raise ImportError(_SOLVERS_EXTRA)
    for path in sorted(glob.glob(os.path.join(sys.prefix, "lib", "libmkl_rt.so*"))
                       + glob.glob(os.path.join(sys.prefix, "Library", "bin", "mkl_rt*.dll"))):
        try:
            return ctypes.CDLL(path)
        except OSError:  # pragma: no cover - a broken file: let pypardiso search
            pass
    import pypardiso  # pragma: no cover - other layouts

    return pypardiso.PyPardisoSolver().libmkl  # pragma: no cover


@functools.lru_cache(maxsize=1)
def _mkl_runtime() -> ctypes.CDLL:
    """The loaded ``mkl_rt`` with the 64-bit-integer ``pardiso_64`` entry point (cached;
    a failure raises ImportError naming the extra and is not cached)."""
    try:
        lib = _load_mkl_runtime()
    except ImportError:
        raise
    except Exception as exc:  # pypardiso or the loader found no library that loads
        raise ImportError(f"{_SOLVERS_EXTRA} (MKL's runtime does not load: {exc})") from exc
    if not hasattr(lib, "pardiso_64"):
        raise ImportError(f"{_SOLVERS_EXTRA} (this MKL has no pardiso_64)")
    return lib


@functools.lru_cache(maxsize=1)
def pardiso_available() -> bool:
    """Whether ``pypardiso`` is installed and MKL's runtime ``mkl_rt`` loads (cached).

    Decides what ``local_solver="auto"`` and the coarse factorisation of
    :class:`ddops.TwoLevelSchwarz` use, so an installed ``pypardiso`` whose MKL does not
    load falls back to SuperLU instead of failing later.
    """
    try:
        _mkl_runtime()
    except ImportError:
        return False
    return True


def check_threads(threads: Any) -> int | None:
    """``threads`` as an int >= 1 or None, or a TypeError/ValueError naming it."""
    if threads is None:
        return None
    if isinstance(threads, bool) or not isinstance(threads, numbers.Integral):
        raise TypeError(f"threads must be an int >= 1 or None, got {type(threads).__name__}")
    if threads < 1:
        raise ValueError(f"threads must be >= 1 or None, got {threads}")
    return int(threads)


@contextlib.contextmanager
def thread_limit(threads: int | None = None) -> Iterator[None]:
    """Limit the threads of every local and coarse solver inside a ``with`` block.

    The dense solves run on BLAS's threads (PARDISO on one MKL thread per call, SuperLU's
    and pyamg's kernels are single-threaded; the set-up's chunks and the groups of the
    local solver follow the BLAS limit in force at the set-up,
    :mod:`ddops.linalg.parallel`).  ``mkl_rt`` is loaded lazily, at the first PARDISO
    factorisation, so a :func:`threadpoolctl.threadpool_limits` entered before that does
    not see it.  This
    context manager loads ``mkl_rt`` first (when PARDISO is available) and then applies
    ``threadpool_limits(threads)`` to every thread pool loaded in the process: BLAS
    (OpenBLAS or MKL), MKL and
    the OpenMP runtimes.  The limits hold for calls made from the calling thread and are
    restored on exit.

    Parameters
    ----------
    threads : int or None
        Threads per pool, at least 1; None leaves every pool as it is.

    Yields
    ------
    None

    Raises
    ------
    TypeError
        ``threads`` is not an integer (or None).
    ValueError
        ``threads`` is below 1.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> from ddops.linalg.local_solvers import factorize_blocks, thread_limit
    >>> with thread_limit(1):
    ...     f = factorize_blocks(sp.identity(4, format="csr"), np.array([0, 2, 4]))
    """
    threads = check_threads(threads)
    if threads is None:
        yield
        return
    if pardiso_available():  # load mkl_rt, so that the limit covers it, and ask it for its
        # thread count, which loads its threading layer (libiomp5) for the limit to see too
        _mkl_runtime().MKL_Get_Max_Threads()
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=threads):
        yield


def limit_mkl_threads_here(threads: int) -> None:
    """Keep MKL (PARDISO) on ``threads`` threads for calls from the calling thread.

    MKL's global limit (:func:`thread_limit`'s) does not reach PARDISO called from a thread
    started afterwards, whose OpenMP default is every core: measured, two threads each
    factorising and solving with PARDISO took 4.8 s against 5.3 s one after the other,
    and 3.5 s with this thread-local limit (``mkl_set_num_threads_local``).  Does nothing
    without PARDISO.
    """
    threads = check_threads(threads)
    if threads is not None and pardiso_available():
        _mkl_runtime().MKL_Set_Num_Threads_Local(ctypes.c_int(threads))


def amg_available() -> bool:
    """Whether ``pyamg`` is installed (for the ``"amg"`` solver)."""
    return importlib.util.find_spec("pyamg") is not None


def default_exact_solver() -> str:
    """``"pardiso"`` when it is installed, else ``"superlu"``."""
    return "pardiso" if pardiso_available() else "superlu"


def chunk_bounds(offsets: np.ndarray, chunk_rows: int) -> np.ndarray:
    """Split consecutive diagonal blocks into chunks of about ``chunk_rows`` rows.

    SuperLU's time per diagonal block grows with the number of blocks in one
    matrix (a block-diagonal matrix of 961 subdomains of 1156 unknowns takes
    2.5 s, the same blocks factorised 16 at a time 0.9 s, with the same fill),
    so block-diagonal matrices are factorised chunk by chunk: a loop over a few
    dozen chunks, each one sparse factorisation and one solve per application.

    Parameters
    ----------
    offsets : numpy.ndarray
        ``N + 1`` nondecreasing row offsets of the blocks (``offsets[0] = 0``).
    chunk_rows : int
        Target rows per chunk; block ``i`` joins chunk ``offsets[i] // chunk_rows``,
        so a chunk has fewer than ``chunk_rows`` plus one block's rows.

    Returns
    -------
    numpy.ndarray
        Row offsets of the chunks, from 0 to ``offsets[-1]``, strictly increasing
        (empty blocks never make a chunk of their own).
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    starts = offsets[:-1][np.diff(offsets) > 0]
    if starts.size == 0:
        return np.array([0, int(offsets[-1])], dtype=np.int64)
    first = np.flatnonzero(np.diff(starts // max(int(chunk_rows), 1), prepend=-1))
    return np.concatenate([starts[first], [offsets[-1]]]).astype(np.int64)


def diagonal_block(K: sp.csr_matrix, a: int, b: int) -> sp.csr_matrix:
    """The diagonal block ``K[a:b, a:b]`` of a block-diagonal CSR matrix whose blocks do
    not cross rows ``a`` and ``b`` (rows ``a:b`` hold no other columns): slices of ``K``'s
    arrays, without the row-and-column indexing of ``K[a:b, a:b]``."""
    start, stop = int(K.indptr[a]), int(K.indptr[b])
    return sp.csr_matrix((K.data[start:stop], K.indices[start:stop] - a,
                          K.indptr[a:b + 1] - start), shape=(b - a, b - a))


def check_order(order: Any, m: int) -> np.ndarray:
    """``order`` as an int64 array, checked to be a permutation of ``range(m)``."""
    o = np.asarray(order)
    if o.shape != (m,) or (m and o.dtype.kind not in "iu"):
        raise ValueError(f"order must be an integer array of shape ({m},), got "
                         f"{o.dtype} of shape {o.shape}")
    o = o.astype(np.int64)
    if m and (o.min() < 0 or o.max() >= m or np.bincount(o, minlength=m).max() > 1):
        raise ValueError(f"order must be a permutation of range({m})")
    return o


def node_graph(pattern: sp.spmatrix, block_size: int) -> sp.csr_matrix:
    """The Boolean node graph of a (symmetric) sparsity pattern, ``m/b x m/b``.

    Node ``j`` is rows ``j b : (j + 1) b`` (``b = block_size``, dividing the rows); two
    nodes are adjacent when any of their entries couple.  No diagonal (couplings inside a
    node are not edges), duplicates summed, sorted indices.
    """
    S = sp.csr_matrix(pattern)
    m, b = S.shape[0], int(block_size)
    if b == 1 and S.has_canonical_format:  # the pattern less its diagonal, no sorting
        return _off_diagonal(S.indptr, S.indices)
    if b > 1 and m % b == 0:
        # the block pattern of the b x b blocks (scipy's CSR-to-BSR conversion, one pass
        # with a marker per block row: no triplets, no sort), less its diagonal; 3D
        # elasticity, 227,448 unknowns: 0.11 -> 0.05 s, 0.3-0.9 s on a cold process
        B = sp.csr_matrix((np.ones(S.nnz, dtype=bool), S.indices, S.indptr),
                          shape=S.shape).tobsr(blocksize=(b, b))
        G = _off_diagonal(B.indptr, B.indices)
        G.sort_indices()  # (block columns come in the order met: sorted for full blocks)
        return G
    rows = np.repeat(np.arange(m, dtype=np.int64), np.diff(S.indptr)) // b
    cols = S.indices.astype(np.int64) // b
    off = rows != cols
    G = sp.csr_matrix((np.ones(int(off.sum()), dtype=bool), (rows[off], cols[off])),
                      shape=(m // b, m // b))
    G.sum_duplicates()
    return G


def _off_diagonal(indptr: np.ndarray, indices: np.ndarray) -> sp.csr_matrix:
    """The Boolean square pattern of (``indptr``, ``indices``) less its diagonal, the entries
    of each row in their order."""
    m = indptr.size - 1
    rows = np.repeat(np.arange(m, dtype=np.int64), np.diff(indptr))
    off = rows != indices
    out = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows[off], minlength=m), out=out[1:])
    return sp.csr_matrix((np.ones(int(out[-1]), dtype=bool), indices[off], out), shape=(m, m))


def node_nested_dissection(K: sp.spmatrix, block_size: int) -> np.ndarray:
    """A nested-dissection ordering of ``K`` computed by METIS on its node graph.

    Node ``j`` is rows ``j b : (j + 1) b`` (``b = block_size``, which must divide the
    rows); two nodes are adjacent when any of their entries couple.  METIS orders the
    ``m / b`` nodes and every node's rows stay together, in order.  On the stiffness matrix
    of 3D elasticity (``b = 3``) this is PARDISO's own nested dissection at a fraction of
    its analysis (a graph with 3 times fewer vertices and 9 times fewer edges) and with no
    more fill: a block-diagonal chunk of five 3,100-unknown subdomains analysed and
    factorised in 0.09 s against 0.13 s, 2.70 M factor nonzeros against 2.79 M.

    Returns
    -------
    numpy.ndarray
        ``order``: position ``i`` of the factorisation eliminates row ``order[i]`` (as
        the ``order`` argument of :func:`factorize_blocks`).
    """
    import pymetis

    K = sp.csr_matrix(K)
    m, b = K.shape[0], int(block_size)
    if b < 1 or m % b:
        raise ValueError(f"block_size {block_size} must divide the {m} rows of K")
    G = node_graph(K, b)  # (METIS takes no self-loops)
    dtype = pymetis.zero_copy_dtype()
    adjacency = pymetis.CSRAdjacency(G.indptr.astype(dtype), G.indices.astype(dtype))
    perm = np.asarray(pymetis.nested_dissection(adjacency=adjacency)[0], dtype=np.int64)
    return (perm[:, None] * b + np.arange(b)).ravel()


def node_minimum_degree(K: sp.spmatrix, block_size: int) -> np.ndarray:
    """A minimum-degree ordering of ``K`` computed by PARDISO on its node graph.

    Node ``j`` is rows ``j b : (j + 1) b`` (``b = block_size``, which must divide the
    rows); two nodes are adjacent when any of their entries couple.  PARDISO's minimum
    degree orders the ``m / b`` nodes (an analysis of the node graph's pattern, no
    factorisation) and every node's rows stay together, in order.  The graph of the
    unknowns has ``b`` times more vertices and about ``b^2`` times more edges, and a
    minimum degree on it splits nodes: on the subdomain matrices of 3D elasticity
    (``b = 3``) the node graph's ordering costs a quarter to a seventh of the unknowns'
    analysis, and the factors have a fifth to a third fewer nonzeros (64 subdomains of
    about 750 unknowns, 5.5 M -> 4.4 M; 12 of about 3,100, 10.8 M -> 7.4 M).

    Returns
    -------
    numpy.ndarray
        ``order``: position ``i`` of the factorisation eliminates row ``order[i]`` (as
        the ``order`` argument of :func:`factorize_blocks`).
    """
    m, b = K.shape[0], int(block_size)
    if b < 1 or m % b:
        raise ValueError(f"block_size {block_size} must divide the {m} rows of K")
    G = node_graph(K, b)
    nodes = G.shape[0]
    # the analysis reads the pattern only; a diagonally dominant matrix on it all the same
    degree = G.getnnz(axis=1).astype(np.float64)
    upper = (sp.triu(G, k=1, format="csr").astype(np.float64) * -1.0
             + sp.diags(degree + 1.0)).tocsr()
    upper.sum_duplicates()
    upper.sort_indices()
    handle = _PardisoHandle(upper, np.dtype(np.float64), "md")
    try:
        handle.use_order(None)
        error = handle.call(11)[1]
        if error != 0:
            raise _pardiso_error("analysis of the node graph", error)
        perm = handle.order.copy()
    finally:
        handle.free()
    if nodes and not np.array_equal(np.sort(perm), np.arange(nodes)):  # pragma: no cover
        raise RuntimeError("PARDISO returned no permutation of the node graph")
    return (perm[:, None] * b + np.arange(b)).ravel()


def check_blocks_by_one_solve(K: sp.spmatrix, block: np.ndarray, x: np.ndarray,
                              z: np.ndarray) -> np.ndarray:
    """Labels of the blocks of ``K`` that fail the one-solve SPD test, sorted.

    With ``z = K^{-1} x`` (``x`` random), ``D = diag(K)``, block ``i`` is flagged when a
    diagonal entry is not positive, ``z`` is not finite, or its energy
    ``e_i = x_i^T z_i`` is not in ``(0, s_i / SINGULAR_PIVOT_RTOL]`` with
    ``s_i = x_i^T D_i^{-1} x_i``.  For an SPD block ``e_i / s_i`` lies between
    ``1 / lambda_max`` and ``1 / lambda_min`` of the diagonally scaled block
    (``lambda_max >= 1``), so only blocks with a condition number above ``1e12`` are
    flagged by the upper bound, as by the pivot rule.  An indefinite block is flagged
    when ``e_i <= 0`` or when ``(x_i^T x_i)^2 > e_i x_i^T A_i x_i`` (Cauchy-Schwarz in the
    ``A_i`` inner product, which holds for every SPD block).  Necessary conditions tested
    on one vector, not a proof: a block with one negative eigenvalue as small as its
    smallest positive ones can pass.

    Parameters
    ----------
    K : sparse matrix
        The block-diagonal matrix.
    block : numpy.ndarray
        Block label of every row, nondecreasing.
    x, z : numpy.ndarray
        The test vector and ``K^{-1} x`` as the factorisation computed it (float64).
    """
    diagonal = K.diagonal()
    labels, start = np.unique(block, return_index=True)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        energy = np.add.reduceat(x * z, start)  # x_i^T A_i^{-1} x_i
        scale = np.add.reduceat(x * x / np.where(diagonal > 0, diagonal, np.inf), start)
        forward = np.add.reduceat(x * (K @ x), start)  # x_i^T A_i x_i
        squares = np.add.reduceat(x * x, start)
        bad = ~(np.isfinite(energy) & (energy > 0) & (energy * spd.SINGULAR_PIVOT_RTOL <= scale)
                & (squares**2 <= energy * forward * (1 + CAUCHY_SCHWARZ_SLACK)))
    bad |= np.add.reduceat((diagonal <= 0).astype(np.int64), start) > 0
    return labels[bad]


def _test_vector(m: int, dtype: Any) -> np.ndarray:
    """The fixed random test vector (seed 0), representable in ``dtype``."""
    return np.random.default_rng(0).standard_normal(m).astype(dtype).astype(np.float64)


def superlu_chunk(K: sp.spmatrix, block: np.ndarray, exact: bool, dtype: Any):
    """SuperLU of one chunk and the labels of its bad blocks (None: exactly singular).

    The SPD test of :func:`ddops.linalg.spd.sparse_spd_factor` (diagonal pivots only), with
    ``exact=True`` on the pivots themselves (``lu.U``, which makes scipy keep CSC copies of
    the factors for their lifetime); ``exact=False`` uses :func:`check_blocks_by_one_solve`
    instead of the pivots.
    """
    lu, bad = sparse_spd_factor(K, dtype, check_pivots=exact)
    if lu is None:
        return None, None
    if bad.size or exact:
        return lu, np.unique(block[bad])
    x = _test_vector(K.shape[0], dtype)
    z = lu.solve(x.astype(dtype)).astype(np.float64, copy=False)
    return lu, check_blocks_by_one_solve(K, block, x, z)


def _locate_bad_block(K: sp.csr_matrix, offsets: np.ndarray, labels: np.ndarray,
                      default: int | None = -1) -> int | None:
    """Factorise the blocks one by one (the error path) and return the first bad one, or
    ``default`` when every block passes alone (-1: the first label)."""
    for i in labels:
        s = slice(int(offsets[i]), int(offsets[i + 1]))
        lu, bad = superlu_chunk(K[s, s], np.zeros(s.stop - s.start, int), True, np.float64)
        if lu is None or bad.size:
            return int(i)
    return int(labels[0]) if default == -1 else default


class BlockSolver:
    """Applies ``K^{-1}`` (exact solvers) or an SPD approximation of it (``"amg"``).

    Attributes
    ----------
    name : str
        ``"superlu"``, ``"pardiso"`` or ``"amg"``.
    exact : bool
        Whether :meth:`solve` is ``K^{-1}`` to rounding.
    shape : tuple of int
        Shape of ``K``.
    dtype : numpy.dtype
        Precision of the factors (float64 or float32).
    nnz : int
        Stored nonzeros of the factors (``"amg"``: of the hierarchy's matrices).
    nbytes : int
        Bytes held by the factors (or the hierarchy), outside the Python heap for
        SuperLU and PARDISO.
    """

    name = ""
    exact = True

    #: Rows where the right-hand sides of :meth:`solve_sparse` may be nonzero (sorted;
    #: None: every row).
    sparse_rows: np.ndarray | None = None

    def solve(self, X: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        """``K^{-1} X`` for ``X`` of shape ``(m,)`` or ``(m, k)``, float64 result."""
        raise NotImplementedError

    def solve_sparse(self, B: np.ndarray, rows_only: bool = False) -> np.ndarray:
        """``K^{-1} X`` for right-hand sides ``X`` that vanish outside :attr:`sparse_rows`.

        Parameters
        ----------
        B : numpy.ndarray
            ``(r, k)``: the rows :attr:`sparse_rows` of ``X`` (``r`` of them).
        rows_only : bool
            Return only those rows of the solution (``(r, k)``) instead of all of it
            (``(m, k)``).  ``B^T K^{-1} B``-type products need no more.

        Notes
        -----
        This generic form scatters ``B`` into ``X`` and solves in full; PARDISO's
        override skips the work that the sparsity of ``X`` (and, with ``rows_only``,
        of the wanted solution) makes unnecessary.
        """
        rows = self._checked_sparse(B)
        X = np.zeros((self.shape[0], B.shape[1]))
        X[rows] = B
        Y = self.solve(X)
        return Y[rows] if rows_only else Y

    def _checked_sparse(self, B: np.ndarray) -> np.ndarray:
        rows = (np.arange(self.shape[0]) if self.sparse_rows is None else self.sparse_rows)
        if B.ndim != 2 or B.shape[0] != rows.size:
            raise ValueError(f"B must have shape ({rows.size}, k) (one row per sparse row), "
                             f"got {B.shape}")
        return rows

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(shape={self.shape}, dtype={self.dtype}, "
                f"nnz={self.nnz})")


class SuperLUBlocks(BlockSolver):
    """SuperLU factorisations of chunks of consecutive blocks (see :func:`chunk_bounds`)."""

    name = "superlu"

    def __init__(self, K: sp.csr_matrix, offsets: np.ndarray, block: np.ndarray, *,
                 dtype: Any = np.float64, exact_check: bool = True,
                 chunk_rows: int = CHUNK_ROWS) -> None:
        self.shape = K.shape
        self.dtype = np.dtype(dtype)
        self.bounds = chunk_bounds(offsets, chunk_rows)
        self.factors = []
        for c in range(self.bounds.size - 1):  # a loop over chunks of blocks
            r0, r1 = int(self.bounds[c]), int(self.bounds[c + 1])
            K_c = K[r0:r1, r0:r1]
            lu, bad = superlu_chunk(K_c, block[r0:r1], exact_check, self.dtype)
            if lu is None:
                raise SingularBlockError(_locate_bad_block(K, offsets, np.unique(block[r0:r1])))
            if bad.size:
                raise SingularBlockError(int(bad[0]))
            self.factors.append(lu)
        self.nnz = sum(int(f.nnz) for f in self.factors)
        # per stored nonzero its value and a 4-byte row index
        self.nbytes = self.nnz * (self.dtype.itemsize + 4)

    def solve(self, X: np.ndarray, trans: str = "N") -> np.ndarray:
        X = np.asarray(X, dtype=self.dtype)
        Y = np.empty(X.shape, dtype=np.float64)
        for c, lu in enumerate(self.factors):  # one batched solve per chunk
            rows = slice(int(self.bounds[c]), int(self.bounds[c + 1]))
            Y[rows] = lu.solve(X[rows], trans=trans)
        return Y


_I64P = ctypes.POINTER(ctypes.c_int64)


@functools.lru_cache(maxsize=1)
def _pardiso_64():
    """MKL's ``pardiso_64`` with its prototype declared.

    ``pardiso_64`` takes 64-bit integers whatever MKL's interface layer: plain
    ``pardiso`` takes 32-bit ones under LP64 and 64-bit ones under ILP64 (chosen by
    ``MKL_INTERFACE_LAYER`` or by whoever loaded MKL first), so int32 arrays handed to it
    under ILP64 are read past their end and the process dies.  Switching the layer with
    ``MKL_Set_Interface_Layer`` instead would change it for every other MKL user in the
    process, and fails once MKL has been called.  The price is 8-byte indices: 4 bytes more
    per stored nonzero of the upper triangle, a few percent of the factor.
    """
    if not pardiso_available():
        _mkl_runtime()  # raises the reason
        raise ImportError(_SOLVERS_EXTRA)
    fn = _mkl_runtime().pardiso_64
    # pt, maxfct, mnum, mtype, phase, n, a, ia, ja, perm, nrhs, iparm, msglvl, b, x, error
    fn.argtypes = [_I64P, _I64P, _I64P, _I64P, _I64P, _I64P, ctypes.c_void_p, _I64P, _I64P,
                   _I64P, _I64P, _I64P, _I64P, ctypes.c_void_p, ctypes.c_void_p, _I64P]
    fn.restype = None
    return fn


@contextlib.contextmanager
def _one_mkl_thread() -> Iterator[None]:
    """PARDISO's calls on one MKL thread (a thread-local limit, the caller's restored)."""
    previous = _mkl_runtime().MKL_Set_Num_Threads_Local(1)
    try:
        yield
    finally:  # back to the caller's thread-local setting (0: MKL's global one)
        _mkl_runtime().MKL_Set_Num_Threads_Local(previous)


def _pardiso_error(what: str, code: int) -> Exception:
    """The exception of a PARDISO error that names no block."""
    message = (f"PARDISO {what} failed with error {code} "
               f"({PARDISO_ERRORS.get(code, 'unknown error code')})")
    return MemoryError(message) if code in _PARDISO_NO_MEMORY else RuntimeError(message)


class _PardisoHandle:
    """One PARDISO instance (real SPD, matrix type 2) of the upper triangle ``upper``.

    Holds the matrix in 64-bit zero-based CSR for as long as the factors live: every
    phase, the solve included, takes the matrix (MKL reads it there for iterative
    refinement), so the arrays are released together with the factors, by :meth:`free`,
    and no call is made with a stand-in array.
    """

    def __init__(self, upper: sp.csr_matrix, dtype: np.dtype, ordering: str) -> None:
        self.fn = _pardiso_64()
        self.dtype = dtype
        self.m = int(upper.shape[0])
        self.pt = np.zeros(64, dtype=np.int64)  # PARDISO's 64 opaque pointers
        self.indptr = upper.indptr.astype(np.int64)
        self.indices = upper.indices.astype(np.int64)
        self.data = upper.data.astype(dtype)
        self.iparm = iparm = np.zeros(64, dtype=np.int64)
        iparm[0] = 1    # no solver defaults
        iparm[1] = 3 if ordering == "nd" else 0  # METIS (parallel) or minimum degree
        iparm[7] = 0    # no iterative refinement
        iparm[9] = 13   # pivot perturbation (unused for SPD)
        iparm[17] = -1  # report the factor's nonzeros
        iparm[26] = 0   # no matrix checker (the CSR is canonical)
        iparm[27] = 1 if dtype == np.float32 else 0  # single-precision factors
        iparm[34] = 1   # zero-based indices
        self.perm = None  # rows of sparse right-hand sides (mark_sparse)
        self.order = None  # a given or returned fill-reducing ordering (use_order)
        self.mtype = 2  # real symmetric positive definite (-2: symmetric indefinite)
        self.live = False

    @property
    def nbytes(self) -> int:
        """The matrix arrays held for PARDISO (0 once freed)."""
        return sum(0 if a is None else int(a.nbytes)
                   for a in (self.data, self.indptr, self.indices))

    def mark_sparse(self, rows: np.ndarray) -> None:
        """Declare, before the analysis, the rows where right-hand sides may be nonzero
        (PARDISO's ``perm`` with ``iparm[30]``, which the analysis must see)."""
        self.perm = np.zeros(self.m, dtype=np.int64)
        self.perm[rows] = 1
        self.iparm[30] = 1

    def use_order(self, order: np.ndarray | None) -> None:
        """Before the analysis: take ``order`` as the fill-reducing ordering (position ``i``
        of the factorisation eliminates row ``order[i]``; PARDISO's ``perm`` with
        ``iparm[4] = 1``), or, with None, have the analysis return the ordering it computes
        in :attr:`order` (``iparm[4] = 2``)."""
        if self.perm is not None:
            raise RuntimeError("a given ordering and the rows of sparse right-hand sides "
                               "share PARDISO's perm argument")
        self.iparm[4] = 2 if order is None else 1
        self.order = (np.zeros(self.m, dtype=np.int64) if order is None
                      else np.array(order, dtype=np.int64))

    def call(self, phase: int, B: np.ndarray | None = None,
             partial: int = 0) -> tuple[np.ndarray | None, int]:
        """Run ``phase``; ``B`` (solve phases only) is ``(m,)`` or ``(m, k)``.

        ``partial`` (solves only, after :meth:`mark_sparse`): 0 a full solve, 1 ``B``
        vanishes outside the marked rows and only those rows of the solution are
        computed, 2 ``B`` vanishes there and the whole solution is computed.
        """
        if self.data is None:
            raise RuntimeError("the PARDISO factors were freed")
        if partial and self.perm is None:
            raise RuntimeError("a partial solve needs the rows marked before the analysis")
        if self.perm is not None and phase == 33:
            self.iparm[30] = partial
        X = b = x = None
        nrhs = 1
        if B is not None:
            B = np.asfortranarray(B, dtype=self.dtype)
            X = np.zeros_like(B)
            nrhs = 1 if B.ndim == 1 else B.shape[1]
            b, x = B.ctypes.data, X.ctypes.data
        error = ctypes.c_int64(0)

        def i64(value: int) -> Any:
            return ctypes.byref(ctypes.c_int64(value))

        perm = self.perm if self.perm is not None else self.order
        self.live = phase != -1  # after any other phase pt may hold MKL's memory
        # every phase on one MKL thread, whatever the caller's limits.  PARDISO's solves are
        # no faster on two threads (3D Poisson blocks, 1 to 64 right-hand sides), and the
        # OpenMP threads they wake spin beside the caller's BLAS threads between solves (CG
        # on the 2D channels, every library on its default of all cores: 4.5 s against
        # 1.4 s).  And a solve on another thread count than the factorisation's makes the
        # next numeric factorisation of the same handle crash the process, so the count is
        # the same for all phases.  Parallelism comes from several handles side by side
        # (ThreadedBlocks, the set-up's chunks).
        with _one_mkl_thread():
            self.fn(self.pt.ctypes.data_as(_I64P), i64(1), i64(1), i64(self.mtype),
                    i64(phase), i64(self.m),
                    self.data.ctypes.data, self.indptr.ctypes.data_as(_I64P),
                    self.indices.ctypes.data_as(_I64P),
                    None if perm is None else perm.ctypes.data_as(_I64P), i64(nrhs),
                    self.iparm.ctypes.data_as(_I64P), i64(0), b, x, ctypes.byref(error))
        return X, int(error.value)

    def free(self) -> None:
        """Release MKL's memory (phase -1, with the matrix still valid), then the matrix."""
        if self.live and self.data is not None:
            self.live = False
            try:
                self.call(-1)
            except Exception:  # pragma: no cover - interpreter shutdown
                pass
        self.data = self.indptr = self.indices = self.perm = self.order = None

    def __del__(self) -> None:
        self.free()


class PardisoBlocks(BlockSolver):
    """MKL PARDISO's sparse Cholesky factorisation of the whole block-diagonal matrix.

    The upper triangle of ``K`` in zero-based CSR with 64-bit indices is handed to
    ``pardiso_64`` (matrix type 2, real SPD; no iterative refinement), factorised in one
    analysis-and-factorisation call and solved with all columns at once.  The
    fill-reducing ordering is METIS nested dissection (``ordering="nd"``) or minimum
    degree (``"md"``).  ``"auto"`` analyses the largest block by minimum degree, and by
    nested dissection too where that could pay, and takes nested dissection only when the
    flops it saves in the factorisation pay for its dearer analysis
    (:data:`PARDISO_ND_FLOPS_PER_ENTRY` per stored entry of the block's upper triangle).
    Nested dissection wins on large 3D subdomains (3D elasticity: 70 M factor nonzeros
    against 110 M, a 1.4 s against 3.0 s factorisation); on 2D subdomains and on 3D ones
    of a few thousand unknowns minimum degree costs less in all, its analysis being 2-3x
    cheaper than METIS' for a similar fill (3D Poisson, 62 parts: a GDSW set-up of 1.4 s
    against 1.1-1.3 s, the same iterations).  A matrix of one block (a coarse matrix)
    keeps the winning probe's analysis instead of analysing again.  A zero or
    negative pivot makes PARDISO stop with error -4 (or -7); only then is the bad block
    searched, by factorising the blocks one by one.  Every other
    error is raised as what it is: MemoryError for -2 and -9, RuntimeError otherwise,
    with PARDISO's code and its meaning (:data:`PARDISO_ERRORS`).  A factorisation that
    succeeds is checked by :func:`check_blocks_by_one_solve` (tiny pivots).  Every phase
    runs on one MKL thread, whatever the caller's limits: the solves are no faster on more,
    the OpenMP threads they wake spin beside the caller's BLAS threads, and a solve on
    another thread count than the factorisation's makes the next refactorisation crash;
    :class:`~ddops.linalg.parallel.ThreadedBlocks` runs several factorisations side by
    side instead.  A full solve of a few columns goes to PARDISO one column at a time
    (:data:`PARDISO_COLUMN_SOLVES`).  The factors
    live in MKL's memory, and the matrix PARDISO points to in ours, until :meth:`free`
    or the object is collected.

    With ``sparse_rows`` the analysis is told where right-hand sides may be nonzero
    (PARDISO's partial solve, ``iparm[30]``), and :meth:`solve_sparse` prunes the
    triangular solves to the part of the elimination tree that such right-hand sides (and,
    with ``rows_only``, the wanted rows of the solution) reach: the solves of the AGDSW
    Schur complements, whose right-hand sides and wanted rows lie next to the interface,
    cost a fraction of full solves (2D channels, 16,000 rows and 126 columns: 5 ms against
    24 ms for a full solve and 47 ms for SuperLU's).  Such an analysis takes PARDISO's own
    nested-dissection ordering whatever ``ordering`` says (about twice the fill of a plain
    analysis and four times its time on the 2D channels), so it is not probed; the
    harmonic extension, whose solutions are wanted everywhere, keeps plain analyses.
    :meth:`solve` stays a full solve.

    With ``order`` (a permutation of the rows: position ``i`` of the factorisation
    eliminates row ``order[i]``) the analysis takes that ordering instead of computing one,
    and nothing is probed: a caller that factorised a matrix of the same pattern already
    (GenEO's inertia of ``N - tau B`` before its factorisation of ``N + sigma B``, see
    :func:`pardiso_inertia`) saves the ordering and the probes, about half of the analysis.

    With ``numeric=False`` the constructor stops after the analysis (:attr:`order` is
    known, there are no factors yet) and :meth:`factor_deferred` runs the numeric phase
    later: the set-up of a two-level preconditioner on two threads or more factorises the
    subdomains beside its coarse space (:data:`~ddops.precond.corrections.LOCAL_BESIDE_COARSE`).

    With ``block_size = b > 1`` (every block of whole nodes of ``b`` consecutive rows),
    both orderings, probed or chosen, order the node graph and are handed to PARDISO as the
    ordering, instead of PARDISO's own on the unknowns' graph: nested dissection is METIS's
    (:func:`node_nested_dissection`; on the unknowns' graph it cost about three times the
    numeric factorisation on 3D elasticity, a set-up of the 227,448-unknown beam: 3.6 s of
    analyses for 1.3 s of factorisations), minimum degree PARDISO's on the node graph
    (:func:`node_minimum_degree`: on the subdomains of that beam the ordering and analysis
    0.26-0.31 s -> 0.14-0.16 s and a third fewer factor nonzeros, 12 subdomains of
    37,062 unknowns).  Not with ``sparse_rows``.

    Attributes
    ----------
    block_size : int
        ``block_size``, or 1 where it does not divide every offset.
    ordering : str
        The ordering used, ``"nd"``, ``"md"`` or ``"given"`` (``order``).
    order : numpy.ndarray or None
        The elimination order of the analysis (as the ``order`` argument): given, the node
        graph's, or PARDISO's own, read back; None with ``sparse_rows``.
        Another matrix with ``K``'s pattern analysed with it needs no ordering step.
    ordering_flops : dict
        ``"auto"`` only: the factorisation's flops of the largest block under each
        ordering (PARDISO's estimate) and ``"entries"``, the stored entries of that block's
        upper triangle; empty otherwise.
    """

    name = "pardiso"

    def __init__(self, K: sp.csr_matrix, offsets: np.ndarray, block: np.ndarray, *,
                 dtype: Any = np.float64, ordering: str = "auto",
                 sparse_rows: np.ndarray | None = None,
                 order: np.ndarray | None = None, block_size: int = 1,
                 numeric: bool = True) -> None:
        if ordering not in PARDISO_ORDERINGS:
            raise ValueError(f"ordering must be one of {PARDISO_ORDERINGS}, got {ordering!r}")
        if order is not None:
            if sparse_rows is not None:
                raise ValueError("order and sparse_rows cannot be combined (PARDISO's "
                                 "partial-solve analysis computes its own ordering)")
            order = check_order(order, K.shape[0])
        self.shape = K.shape
        self.dtype = np.dtype(dtype)
        self._handle = None
        self._released = False
        self._deferred = None  # the matrix of a numeric phase left to factor_deferred()
        _pardiso_64()  # ImportError naming the extra before any work
        diagonal = K.diagonal()
        if (diagonal <= 0).any():  # not SPD, and PARDISO fails on a missing diagonal entry
            raise SingularBlockError(int(block[np.argmax(diagonal <= 0)]))
        self.ordering_flops: dict = {}
        analysed = None
        if sparse_rows is not None:
            # the partial-solve analysis orders by nested dissection whatever iparm[1] says
            # (2D channels, 14,701 rows: the same 386,232 factor nonzeros asked for either,
            # against 183,110 and 220,813 in plain analyses): no probe, the name it has
            if ordering not in ("auto", "nd"):
                raise ValueError(f"ordering={ordering!r} with sparse_rows: PARDISO's "
                                 "partial-solve analysis orders by nested dissection "
                                 "(use 'auto' or 'nd')")
            ordering = "nd"
        self.block_size = _node_block_size(block_size, offsets)
        if order is not None:
            ordering = "given"
        elif ordering == "auto":
            # one block (a coarse matrix): the winning probe is the analysis itself
            ordering, analysed = self._cheaper_ordering(K, offsets)
        if ordering in ("nd", "md") and self.block_size > 1 and sparse_rows is None \
                and analysed is None:
            # the node graph's ordering instead of PARDISO's on the unknowns' graph
            node_order = _node_ordering(ordering)
            if node_order is not None:
                order = node_order(K, self.block_size)
        self.ordering = ordering
        # the elimination order of the analysis (a later one of a matrix with this pattern
        # takes it as ``order``, with no ordering step); None where PARDISO keeps it
        self.order = None
        # where the upper triangle's values sit in K.data, for refactor(): the same
        # triangle of a matrix with K's pattern, without forming it again
        self._offsets, self._block = offsets, block
        self._pattern = (K.indptr.copy(), K.indices.copy())
        if analysed is not None:
            self._handle = analysed
            self.order = analysed.order
            self._numeric_now_or_later(K, numeric)
            return
        upper = sp.triu(K, format="csr")
        upper.sum_duplicates()
        upper.sort_indices()
        self._handle = handle = _PardisoHandle(upper, self.dtype, ordering)
        del upper
        if order is not None:
            handle.use_order(order)
        elif sparse_rows is None:
            handle.use_order(None)  # PARDISO's ordering comes back (self.order)
        if sparse_rows is not None:
            self.sparse_rows = np.unique(np.asarray(sparse_rows, dtype=np.int64))
            if self.sparse_rows.size and not (0 <= self.sparse_rows[0]
                                              and self.sparse_rows[-1] < K.shape[0]):
                self.free()
                raise ValueError("sparse_rows must be row indices of K")
            handle.mark_sparse(self.sparse_rows)
        # the analysis (ordering, symbolic factorisation) once; refactor() repeats only
        # the numeric factorisation
        error = handle.call(11)[1]
        if error != 0:
            self.free()
            raise _pardiso_error("analysis", error)
        self.order = handle.order
        self._numeric_now_or_later(K, numeric)

    def _numeric_now_or_later(self, K: sp.csr_matrix, numeric: bool) -> None:
        """The numeric phase after the analysis, or (``numeric`` False) no factors until
        :meth:`factor_deferred`."""
        if numeric:
            self._factor(K)
        else:
            self._deferred, self._released = K, True

    def factor_deferred(self) -> PardisoBlocks:
        """The numeric factorisation that the constructor left out (``numeric=False``),
        with its checks: a caller that needs only the analysis first (its :attr:`order`)
        runs the numeric phase later, beside other work.  Returns ``self``."""
        K, self._deferred = self._deferred, None
        if K is None or self._handle is None:
            raise RuntimeError("no deferred numeric factorisation (numeric=True, done, or "
                               "freed)")
        self._released = False
        self._factor(K)
        return self

    def _factor(self, K: sp.csr_matrix) -> None:
        """PARDISO's numeric phase on the values in the handle, checked."""
        handle, offsets, block = self._handle, self._offsets, self._block
        error = handle.call(22)[1]
        if error != 0:
            self.free()
            if error not in _PARDISO_SINGULAR:
                raise _pardiso_error("factorisation", error)
            bad = _locate_bad_block(K, offsets, np.unique(block), default=None)
            # every block passing alone (SuperLU's pivot rule is the stricter one): the
            # first, as PARDISO names none
            raise SingularBlockError(int(bad if bad is not None else block[0]))
        self.nnz = int(handle.iparm[17])
        # permanent memory of the analysis + memory of the factorisation and solve (KiB),
        # and the matrix kept for PARDISO
        self.nbytes = int(handle.iparm[15] + handle.iparm[16]) * 1024 + handle.nbytes
        x = _test_vector(K.shape[0], self.dtype)
        bad = check_blocks_by_one_solve(K, block, x, self.solve(x))
        if bad.size:
            self.free()
            raise SingularBlockError(int(bad[0]))

    def refactor(self, K: sp.csr_matrix) -> PardisoBlocks:
        """Factorise a matrix with the pattern of the first one, reusing its analysis
        (the fill-reducing ordering and the symbolic factorisation): PARDISO's numeric
        phase only.  ``K`` must have exactly the stored pattern (indptr and indices) of the
        matrix given to the constructor (a ValueError otherwise).  Returns ``self``."""
        if self._handle is None:
            raise RuntimeError("the PARDISO factors were freed")
        K = sp.csr_matrix(K)
        if not (np.array_equal(K.indptr, self._pattern[0])
                and np.array_equal(K.indices, self._pattern[1])):
            raise ValueError("refactor: K has another sparsity pattern than the matrix the "
                             "analysis was made for")
        diagonal = K.diagonal()
        if (diagonal <= 0).any():
            bad = int(self._block[np.argmax(diagonal <= 0)])
            self.free()
            raise SingularBlockError(bad)
        upper = sp.triu(K, format="csr")
        upper.sum_duplicates()
        upper.sort_indices()
        self._handle.data[:] = upper.data.astype(self.dtype, copy=False)
        self._released, self._deferred = False, None
        self._factor(K)
        return self

    @property
    def analysis_bytes(self) -> int:
        """Bytes that the analysis holds (MKL's permanent memory and the matrix kept for
        :meth:`refactor`), 0 once freed."""
        if self._handle is None:
            return 0
        return int(self._handle.iparm[15]) * 1024 + self._handle.nbytes

    def release_factors(self) -> None:
        """Release the numeric factors (PARDISO's phase 0) and keep the analysis: a later
        :meth:`refactor` factorises again without ordering again, and :meth:`solve` raises
        RuntimeError until then."""
        if self._handle is None:
            raise RuntimeError("the PARDISO factors were freed")
        error = self._handle.call(0)[1]
        if error != 0:  # pragma: no cover - phase 0 of a valid handle
            raise _pardiso_error("release", error)
        self._released = True

    def _cheaper_ordering(self, K: sp.csr_matrix,
                          offsets: np.ndarray) -> tuple[str, _PardisoHandle | None]:
        """:func:`pardiso_ordering` of ``K``; also returns, when the largest block is all of
        ``K``, the winner's analysed handle (else None), and sets ``ordering_flops``."""
        best, kept, self.ordering_flops = _probe_orderings(K, offsets, self.dtype, keep=True,
                                                           block_size=self.block_size)
        return best, kept

    def solve(self, X: np.ndarray, trans: str = "N") -> np.ndarray:
        # K is symmetric: the transposed solve is the same solve
        X = np.asarray(X)
        if X.shape[0] == 0 or (X.ndim == 2 and X.shape[1] == 0):
            return np.zeros(X.shape)
        return self._solve_phase(X, 0)

    def solve_sparse(self, B: np.ndarray, rows_only: bool = False) -> np.ndarray:
        rows = self._checked_sparse(B)
        if self.sparse_rows is None or B.shape[1] == 0 or rows.size == 0:
            return super().solve_sparse(B, rows_only)
        X = np.zeros((self.shape[0], B.shape[1]), order="F")
        X[rows] = B
        return self._solve_phase(X, 1 if rows_only else 2, rows if rows_only else None)

    def _solve_phase(self, X: np.ndarray, partial: int,
                     rows: np.ndarray | None = None) -> np.ndarray:
        """PARDISO's solve phase on live factors (``partial``: see ``_PardisoHandle.call``);
        only the ``rows`` of the solution when given (picked before the C-order copy: no
        third full-height array beside ``X`` and PARDISO's output)."""
        if self._handle is None:
            raise RuntimeError("the PARDISO factors were freed")
        if self._released:
            raise RuntimeError("the PARDISO factors were released (release_factors), or "
                               "not made yet (numeric=False); refactor or factor_deferred "
                               "first")
        if (partial == 0 and X.ndim == 2 and X.shape[1] > 1
                and X.shape[1] * self.nnz < PARDISO_COLUMN_SOLVES * X.shape[0]):
            # one column at a time: cheaper than one call with all of them (see the constant)
            Y = np.empty(X.shape, dtype=np.float64)
            for j in range(X.shape[1]):  # a loop over a few columns, not over blocks
                Y[:, j] = self._solve_phase(np.ascontiguousarray(X[:, j]), 0)
            return Y
        Y, error = self._handle.call(33, X, partial=partial)
        if error != 0:  # pragma: no cover - a solve after a good factorisation
            raise _pardiso_error("solve", error)
        return np.ascontiguousarray(Y if rows is None else Y[rows], dtype=np.float64)

    def free(self) -> None:
        """Release the factors held by MKL and the matrix held for it (also done when the
        object is collected); a later :meth:`solve` raises RuntimeError."""
        handle = getattr(self, "_handle", None)
        self._handle = self._deferred = None
        self._pattern = self._block = None  # what refactor() needs, gone with the factors
        if handle is not None:
            handle.free()

    def __del__(self) -> None:
        self.free()


class AMGBlocks(BlockSolver):
    """``cycles`` aggregation-AMG V-cycles (pyamg, plain aggregation), all blocks at once.

    Parameters
    ----------
    K : scipy.sparse.csr_matrix
        The block-diagonal SPD matrix.
    near_null : numpy.ndarray, optional
        ``m x k`` near-null space of ``K`` for the aggregation (the null space of the
        problem restricted to the stacked rows; constants by default).
    cycles : int
        V-cycles per application, from a zero initial guess.
    """

    name = "amg"
    exact = False

    def __init__(self, K: sp.csr_matrix, offsets: np.ndarray, block: np.ndarray, *,
                 dtype: Any = np.float64, near_null: np.ndarray | None = None,
                 cycles: int = AMG_CYCLES) -> None:
        try:
            import pyamg
        except ImportError as exc:
            raise ImportError("local_solver='amg' needs pyamg: pip install "
                              "'ddops[precond]'") from exc
        self.shape = K.shape
        self.dtype = np.dtype(np.float64)
        self.cycles = int(cycles)
        diagonal = K.diagonal()
        if (diagonal <= 0).any():  # the SPD check an inexact solver can afford exactly
            raise SingularBlockError(int(block[np.argmax(diagonal <= 0)]))
        smoother = ("gauss_seidel", {"sweep": "symmetric"})
        B = None if near_null is None else np.asarray(near_null, dtype=np.float64)
        # pyamg draws random vectors (from numpy's global generator, which it offers no way
        # to replace) only for spectral-radius estimates: Jacobi-smoothed prolongation and
        # Jacobi/Richardson smoothers.  Plain aggregation, its symmetric strength measure
        # and Gauss-Seidel draw nothing, so the hierarchy is a function of K alone and the
        # global generator is neither read nor reseeded (reseeding it is not thread-safe).
        self.hierarchy = pyamg.smoothed_aggregation_solver(
            sp.csr_matrix(K, dtype=np.float64), B=B, symmetry="symmetric",
            presmoother=smoother, postsmoother=smoother, coarse_solver="splu",
            max_coarse=max(500, 2 * int(np.unique(block).size)), **AMG_OPTIONS)
        levels = self.hierarchy.levels
        self.nnz = sum(int(lv.A.nnz) for lv in levels) + sum(
            int(lv.P.nnz) + int(lv.R.nnz) for lv in levels[:-1])
        self.nbytes = 12 * self.nnz
        # an indefinite block can still pass the diagonal test: the energy of one
        # application must be positive on every block (a necessary condition)
        x = _test_vector(K.shape[0], np.float64)
        energy = np.add.reduceat(x * self.solve(x), np.unique(block, return_index=True)[1])
        bad = ~(np.isfinite(energy) & (energy > 0))
        if bad.any():
            raise SingularBlockError(int(np.unique(block)[np.argmax(bad)]))

    def _vcycle(self, level: int, b: np.ndarray) -> np.ndarray:
        levels = self.hierarchy.levels
        lv = levels[level]
        if level == len(levels) - 1:
            return np.asarray(self.hierarchy.coarse_solver(lv.A, b), dtype=np.float64)
        x = np.zeros_like(b)
        lv.presmoother(lv.A, x, b)
        x += lv.P @ self._vcycle(level + 1, lv.R @ (b - lv.A @ x))
        lv.postsmoother(lv.A, x, b)
        return x

    def _apply(self, b: np.ndarray) -> np.ndarray:
        A = self.hierarchy.levels[0].A
        x = self._vcycle(0, b)
        for _ in range(self.cycles - 1):  # x += B (b - A x)
            x += self._vcycle(0, b - A @ x)
        return x

    def solve(self, X: np.ndarray, trans: str = "N") -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        if X.ndim == 1:
            return self._apply(np.ascontiguousarray(X))
        # the smoothers take one vector at a time: a loop over columns, not subdomains
        return np.stack([self._apply(np.ascontiguousarray(X[:, j]))
                         for j in range(X.shape[1])], axis=1) if X.shape[1] else \
            np.zeros(X.shape)


def pardiso_schur_complement(K: sp.spmatrix, rows: np.ndarray) -> np.ndarray:
    """The dense Schur complement ``K_ss - K_so K_oo^{-1} K_os`` of the symmetric ``K`` onto
    the sorted ``rows`` ``s`` (``o`` the others), by PARDISO's partial factorisation.

    PARDISO eliminates ``o`` (sparse Cholesky, minimum-degree ordering) with ``s`` ordered
    last and returns the remaining dense block (``iparm[35] = 1``): the Schur complement for
    the cost of a sparse factorisation plus the dense update of ``s``, instead of one solve
    per row of ``s``.  ``K_oo`` must be positive definite; ``K_ss`` is not factorised, so
    the result may be singular or indefinite.  Costs grow with ``|s|^2`` in memory and
    faster than that in time: keep ``|s|`` to a few thousand per call.  Up to
    :data:`SCHUR_DENSE_ELIMINATED` eliminated rows the elimination is dense instead (MKL's
    partial factorisation is unsafe when it eliminates none or one).

    Parameters
    ----------
    K : sparse matrix
        Symmetric, ``m x m``, every diagonal entry stored (only the upper triangle is read).
    rows : numpy.ndarray
        Sorted, distinct row indices ``s``.

    Returns
    -------
    numpy.ndarray
        ``|s| x |s|``, in the order of ``rows``.

    Raises
    ------
    SingularBlockError
        ``K_oo`` is not positive definite (block 0: PARDISO names no row).
    """
    rows = np.asarray(rows, dtype=np.int64)
    if rows.ndim != 1 or np.any(np.diff(rows) <= 0) or (rows.size and not (
            0 <= rows[0] and rows[-1] < K.shape[0])):
        raise ValueError("rows must be sorted, distinct row indices of K (the Schur "
                         "complement comes back in that order)")
    upper = sp.triu(sp.csr_matrix(K), format="csr")
    upper.sum_duplicates()
    upper.sort_indices()
    m, k = int(upper.shape[0]), int(rows.size)
    if m - k <= SCHUR_DENSE_ELIMINATED:
        return _dense_schur_complement(upper, rows)
    handle = _PardisoHandle(upper, np.dtype(np.float64), "md")
    del upper
    try:
        handle.perm = np.zeros(m, dtype=np.int64)
        handle.perm[rows] = 1
        handle.iparm[35] = 1  # the Schur complement, dense, in the solution array
        S = np.zeros(k * k)
        error = ctypes.c_int64(0)

        def i64(value: int) -> Any:
            return ctypes.byref(ctypes.c_int64(value))

        rhs = np.zeros(m)
        handle.live = True
        with _one_mkl_thread():  # as every PARDISO call (_PardisoHandle.call)
            handle.fn(handle.pt.ctypes.data_as(_I64P), i64(1), i64(1), i64(2), i64(12), i64(m),
                      handle.data.ctypes.data, handle.indptr.ctypes.data_as(_I64P),
                      handle.indices.ctypes.data_as(_I64P), handle.perm.ctypes.data_as(_I64P),
                      i64(1), handle.iparm.ctypes.data_as(_I64P), i64(0), rhs.ctypes.data,
                      S.ctypes.data, ctypes.byref(error))
        if error.value in _PARDISO_SINGULAR:
            raise SingularBlockError(0)
        if error.value != 0:
            raise _pardiso_error("Schur complement", int(error.value))
    finally:
        handle.free()
    return S.reshape(k, k)


def _dense_schur_complement(upper: sp.csr_matrix, rows: np.ndarray) -> np.ndarray:
    """:func:`pardiso_schur_complement` for few eliminated rows ``o``: ``K_ss - K_so
    K_oo^{-1} K_os`` from the upper triangle ``upper``, ``K_oo`` by dense Cholesky
    (:class:`SingularBlockError` where it is not positive definite)."""
    K = upper + sp.triu(upper, k=1, format="csr").T
    others = np.ones(K.shape[0], dtype=bool)
    others[rows] = False
    S = K[rows][:, rows].toarray()
    if not others.any():
        return S
    K_os = K[others][:, rows].toarray()
    try:
        factor = scipy.linalg.cho_factor(K[others][:, others].toarray(), check_finite=False)
    except np.linalg.LinAlgError:
        raise SingularBlockError(0) from None
    S -= K_os.T @ scipy.linalg.cho_solve(factor, K_os, check_finite=False)
    return S


def _ldl_handle(K: sp.spmatrix, perturb: int) -> _PardisoHandle:
    """A PARDISO handle for ``K = P L D L^T P^T`` (matrix type -2, minimum degree, 1 x 1
    pivots only, so that ``D`` is diagonal; no scaling or matching), pivots below
    ``10^-perturb`` of the largest entry perturbed (counted in ``iparm[13]``)."""
    upper = sp.triu(sp.csr_matrix(K), format="csr")
    upper.sum_duplicates()
    upper.sort_indices()
    handle = _PardisoHandle(upper, np.dtype(np.float64), "md")
    handle.mtype = -2
    iparm = handle.iparm
    iparm[9] = perturb
    iparm[10] = 0   # no scaling and no matching: ...
    iparm[12] = 0
    iparm[20] = 0   # ... 1 x 1 pivots only, D diagonal
    return handle


def _ldl_factorised(handle: _PardisoHandle) -> bool:
    """Analyse and factorise (phases 1 and 2); False where a pivot vanished or was
    perturbed (then ``D`` is not ``K``'s), an error otherwise raised."""
    _, error = handle.call(12)
    if error in _PARDISO_SINGULAR:
        return False
    if error != 0:
        raise _pardiso_error("symmetric indefinite factorisation", error)
    return int(handle.iparm[13]) == 0


def _ldl_inverse_diagonal(handle: _PardisoHandle) -> np.ndarray:
    """``D^{-1}`` in the matrix's own numbering: the diagonal substitution alone (phase 332)
    on a vector of ones."""
    inverse, error = handle.call(332, np.ones(handle.m))
    if error != 0:
        raise _pardiso_error("diagonal substitution", error)
    return inverse


def pardiso_pivots(K: sp.spmatrix, rhs: np.ndarray | None = None) -> Any:
    """The pivots of a symmetric ``L D L^T`` factorisation of ``K``, in ``K``'s numbering,
    by PARDISO, or None when PARDISO perturbed a pivot or failed.

    ``K = P L D L^T P^T`` (matrix type -2, minimum-degree ordering, 1 x 1 pivots only, so
    that ``D`` is diagonal), with pivots below ``1e-20`` of the largest entry perturbed;
    ``D`` comes from the diagonal substitution alone (phase 332 on a vector of ones), in
    ``K``'s own numbering.  Within a supernode PARDISO may pivot (symmetrically: its
    supernode pivoting, 1 x 1 only), so ``P`` need not be the fill-reducing ordering (the
    test checks the pivots at their rows, not an order); the pivots are still
    those of an elimination of ``K`` in some symmetric order, each at the row it
    eliminated: what :func:`ddops.linalg.spd.superlu_pivots` gives of SuperLU's factor.
    Several times faster than SuperLU on a coarse matrix of thousands of rows.

    Parameters
    ----------
    K : sparse matrix
        Symmetric, ``m x m``, every diagonal entry stored (only the upper triangle is read).
    rhs : numpy.ndarray, optional
        ``(m,)`` or ``(m, k)``: also solve ``K X = rhs`` with the same factorisation.

    Returns
    -------
    numpy.ndarray or (numpy.ndarray, numpy.ndarray) or None
        ``(m,)``: the pivot that eliminated each row; with ``rhs`` also ``X``.
    """
    handle = _ldl_handle(K, perturb=20)  # only pivots below 1e-20 of the largest entry
    try:
        if not _ldl_factorised(handle):
            return None
        inverse = _ldl_inverse_diagonal(handle)
        if rhs is not None:
            X, error = handle.call(33, rhs)
            if error != 0:
                raise _pardiso_error("solve", error)
    finally:
        handle.free()
    with np.errstate(divide="ignore"):
        pivots = 1.0 / inverse
    if not np.all(np.isfinite(pivots)):
        return None
    return pivots if rhs is None else (pivots, X)


def pardiso_inertia(K: sp.spmatrix, offsets: np.ndarray | None = None, *,
                    return_order: bool = False, order: np.ndarray | None = None
                    ) -> tuple | None:
    """The number of negative eigenvalues of the symmetric ``K``, or of each of its diagonal
    blocks, from PARDISO's symmetric indefinite factorisation.

    ``K = P L D L^T P^T`` (matrix type -2, minimum-degree ordering, 1 x 1 pivots only, so
    that ``D`` is diagonal), and by Sylvester's law of inertia ``D`` has as many negative
    entries as ``K`` has negative eigenvalues.  The entries' signs, in ``K``'s own
    numbering, come from the diagonal substitution alone (PARDISO's phase 332 on a vector
    of ones); on a block-diagonal ``K`` the ordering keeps the blocks apart, so each block
    counts its own.  PARDISO replaces a pivot smaller than ``1e-8`` of the largest entry by
    that size (a perturbed pivot), whose sign is arbitrary: then, or when the signs
    disagree with PARDISO's own count, the inertia is not certain and None is returned.

    Parameters
    ----------
    K : sparse matrix
        Symmetric, ``m x m``, every diagonal entry stored (only the upper triangle is read).
    offsets : numpy.ndarray, optional
        Block boundaries ``0 = o_0 < ... < o_b = m`` of a block-diagonal ``K`` (default:
        one block).
    return_order : bool
        Also return the fill-reducing ordering of the factorisation (position ``i``
        eliminates row ``order[i]``; the ``order`` of :class:`PardisoBlocks`, which a matrix of
        the same pattern can then be factorised with, without ordering again).
    order : numpy.ndarray, optional
        The fill-reducing ordering to factorise by (the same convention), instead of
        PARDISO's minimum degree: no ordering step.  The block boundaries must stay whole
        under it (a blockwise order), so that each block counts its own.

    Returns
    -------
    (negative, perturbed) or (negative, perturbed, order) or None
        The negative eigenvalues of every block (an integer array), the perturbed pivots
        (0) and, with ``return_order``, the ordering; None where not certain.
    """
    m = int(K.shape[0])
    offsets = np.array([0, m] if offsets is None else offsets, dtype=np.int64)
    handle = _ldl_handle(K, perturb=8)  # pivots below 1e-8 of the largest entry
    if order is not None:
        handle.use_order(check_order(order, m))
    elif return_order:
        handle.use_order(None)
    iparm = handle.iparm
    try:
        if not _ldl_factorised(handle) or iparm[21] + iparm[22] != m:
            return None
        signs = _ldl_inverse_diagonal(handle)
        order = handle.order
    finally:
        handle.free()
    negative = signs < 0
    if not np.all(np.isfinite(signs)) or int(negative.sum()) != int(iparm[22]):
        return None
    block = np.repeat(np.arange(offsets.size - 1), np.diff(offsets))
    counts = np.bincount(block[negative], minlength=offsets.size - 1)
    return (counts, 0, order) if return_order else (counts, 0)


def pardiso_ordering(K: sp.spmatrix, offsets: np.ndarray,
                     dtype: Any = np.float64, block_size: int = 1) -> tuple[str, dict]:
    """The fill-reducing ordering ``ordering="auto"`` takes for the block-diagonal ``K``.

    Nested dissection when it saves :data:`PARDISO_ND_FLOPS_PER_ENTRY` flops per stored
    entry on the largest block, else minimum degree (one or two analyses of one block: a
    few milliseconds).  Minimum degree is analysed first: when its flops are at most that
    many per entry, nested dissection cannot save them and is not analysed (the same choice
    for less: the coarse matrix of GDSW on 3D elasticity, 4,151 functions, 170 -> 76 ms for
    its factorisation, of which the nested-dissection analysis was 95 ms).

    Returns
    -------
    ordering : {"md", "nd"}
    flops : dict
        The factorisation's flops of the largest block under each ordering analysed
        (PARDISO's estimate; no ``"nd"`` when it was not analysed) and ``"entries"``, the
        stored entries of that block's upper triangle; empty for blocks of one row.

    Raises
    ------
    SingularBlockError
        The largest block has a non-positive or missing diagonal entry (not SPD; PARDISO's
        analysis would crash on it).
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    best, _, flops = _probe_orderings(sp.csr_matrix(K), offsets, np.dtype(dtype), keep=False,
                                      block_size=_node_block_size(block_size, offsets))
    return best, flops


def _node_block_size(block_size: int, offsets: np.ndarray) -> int:
    """``block_size`` when every block holds whole nodes (its offsets are multiples), else 1
    (the unknowns' own graph)."""
    b = int(block_size)
    return b if b > 1 and not np.any(np.asarray(offsets) % b) else 1


def _node_ordering(ordering: str) -> Any:
    """The node graph's ordering of a block size above 1: nested dissection (``"nd"``,
    METIS) or minimum degree (``"md"``, PARDISO; None where
    :data:`PARDISO_NODE_MINIMUM_DEGREE` is off: PARDISO's on the unknowns' graph)."""
    if ordering == "nd":
        return node_nested_dissection
    return node_minimum_degree if PARDISO_NODE_MINIMUM_DEGREE else None


def _probe_orderings(K: sp.csr_matrix, offsets: np.ndarray, dtype: np.dtype,
                     keep: bool, block_size: int = 1) -> tuple[str, _PardisoHandle | None, dict]:
    """:func:`pardiso_ordering`, and with ``keep`` the winner's analysed handle when the
    largest block is all of ``K`` (else None)."""
    sizes = np.diff(offsets)
    i = int(np.argmax(sizes))
    if sizes[i] < 2:
        return "md", None, {}
    whole = int(sizes[i]) == K.shape[0]
    s = slice(int(offsets[i]), int(offsets[i + 1]))
    if (K.diagonal()[s] <= 0).any():  # (PARDISO's analysis crashes on a missing diagonal)
        raise SingularBlockError(i)
    upper = sp.triu(K if whole else K[s, s], format="csr")
    upper.sum_duplicates()
    upper.sort_indices()
    flops = {"entries": int(upper.nnz)}
    probes = {}
    try:
        limit = PARDISO_ND_FLOPS_PER_ENTRY * flops["entries"]
        for ordering in ("md", "nd"):
            if ordering == "nd" and not flops["md"] > limit:
                break  # (nested dissection's flops are not negative)
            probes[ordering] = probe = _PardisoHandle(upper, dtype, ordering)
            node_order = _node_ordering(ordering) if block_size > 1 else None
            if node_order is not None:
                probe.use_order(node_order(K if whole else K[s, s], block_size))
            elif keep and whole:
                probe.use_order(None)  # (the kept analysis's order comes back)
            probe.iparm[18] = -1  # report the factorisation's MFlop
            error = probe.call(11)[1]
            flops[ordering] = 1e6 * float(probe.iparm[18]) if error == 0 else np.inf
        best = "nd" if "nd" in flops and flops["md"] - flops["nd"] > limit else "md"
        kept = probes.pop(best) if keep and whole and np.isfinite(flops[best]) else None
    finally:
        for probe in probes.values():
            probe.free()
    return best, kept, flops


def factorize_blocks(K: sp.spmatrix, offsets: np.ndarray, solver: str = "superlu", *,
                     dtype: Any = np.float64, exact_check: bool = True,
                     near_null: np.ndarray | None = None, cycles: int = AMG_CYCLES,
                     chunk_rows: int = CHUNK_ROWS, ordering: str = "auto",
                     sparse_rows: np.ndarray | None = None,
                     order: np.ndarray | None = None, block_size: int = 1,
                     numeric: bool = True) -> BlockSolver:
    """A solver for the block-diagonal SPD matrix ``K`` with blocks at ``offsets``.

    Parameters
    ----------
    K : sparse matrix
        ``m x m``, symmetric, block diagonal: block ``i`` is rows and columns
        ``offsets[i]:offsets[i + 1]``.
    offsets : numpy.ndarray
        ``N + 1`` nondecreasing block offsets, ``offsets[-1] = m``.
    solver : {"superlu", "pardiso", "amg"}
        See the module notes.
    dtype : {numpy.float64, numpy.float32}
        Precision of the factors (exact solvers).
    exact_check : bool
        SuperLU: check the pivots themselves (keeps CSC copies of the factors) instead
        of the one-solve test.
    near_null : numpy.ndarray, optional
        ``"amg"``: near-null space of ``K`` (``m x k``).
    cycles : int
        ``"amg"``: V-cycles per application.
    chunk_rows : int
        SuperLU: rows per chunk of blocks.
    ordering : {"auto", "nd", "md"}
        PARDISO: the fill-reducing ordering (see :class:`PardisoBlocks`); with
        ``sparse_rows`` always nested dissection (``"md"`` is refused).
    sparse_rows : numpy.ndarray, optional
        The rows where the right-hand sides of :meth:`BlockSolver.solve_sparse` may be
        nonzero (PARDISO prunes its solves to them; the other solvers solve in full).
    order : numpy.ndarray, optional
        PARDISO: a fill-reducing ordering of the rows to use instead of computing one (see
        :class:`PardisoBlocks`); the other solvers order by themselves.
    block_size : int
        PARDISO: unknowns per node (rows ``j b : (j + 1) b`` of every block are one
        node); both orderings then order the node graph (:func:`node_nested_dissection`,
        :func:`node_minimum_degree`).  Ignored unless it divides every offset.

    Raises
    ------
    SingularBlockError
        A block is singular or not positive definite (its label in ``.block``).
    ImportError
        The optional package of ``solver`` is missing.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    K = sp.csr_matrix(K)
    block = np.repeat(np.arange(offsets.size - 1), np.diff(offsets))
    if not numeric and not (solver == "pardiso" and K.shape[0] > 0):
        raise ValueError(f"numeric=False needs solver='pardiso' and a nonempty matrix, got "
                         f"solver={solver!r} with {K.shape[0]} rows")
    if solver == "pardiso" and K.shape[0] > 0:  # (PARDISO refuses an empty matrix)
        return PardisoBlocks(K, offsets, block, dtype=dtype, ordering=ordering,
                             sparse_rows=sparse_rows, order=order, block_size=block_size,
                             numeric=numeric)
    if solver in ("superlu", "pardiso"):
        out = SuperLUBlocks(K, offsets, block, dtype=dtype, exact_check=exact_check,
                            chunk_rows=chunk_rows)
    elif solver == "amg":
        out = AMGBlocks(K, offsets, block, near_null=near_null, cycles=cycles)
    else:
        raise ValueError(f"solver must be one of {SPARSE_SOLVERS}, got {solver!r}")
    if sparse_rows is not None:
        out.sparse_rows = np.unique(np.asarray(sparse_rows, dtype=np.int64))
    return out
