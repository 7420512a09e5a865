"""The parts of a two-level Schwarz preconditioner and how they are combined.

In the manner of FROSch's ``OverlappingOperator``, ``CoarseOperator``,
``SumOperator`` and ``MultiplicativeOperator``:

- :class:`OverlappingCorrection`: the one-level sum
  ``sum_i R_i^T W_out A_i^{-1} W_in R_i``;
- :class:`CoarseCorrection`: ``Phi A_0^{-1} Phi^T`` with ``A_0 = Phi^T A Phi``;
- :class:`SumCorrection` (additive) and :class:`HybridCorrection` (the coarse
  correction applied multiplicatively around the local one).

Each part has a **symbolic** phase, its constructor, that depends only on the
sparsity pattern of ``A`` and the options (solver choice, stacked restrictions,
the map from the entries of ``A`` to the entries of the subdomain matrices), and a
**numeric** phase, :meth:`compute`, that depends on the values (factorisations,
the coarse basis, ``A_0``).  A new matrix with the same pattern needs only the
numeric phase (:meth:`~ddops.precond.schwarz.TwoLevelSchwarz.update`).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp

from .._validation import check_memory, fits_in_memory, subdomain_matrix_name, warn
from ..backend import asarray
from ..dd.analysis import GDSWAnalysis
from ..dd.coarse import coarse_basis as build_coarse_basis
from ..dd.coarse import validate_coarse_matrix
from ..dd.coarse_matrix import coarse_matrix_checked, galerkin_matrix, transposed_product
from ..dd.decomposition import Decomposition
from ..dd.extension import FACTOR_CHUNK_ROWS
from ..dd.kernel import ground_basis
from ..dd.set_entries import entries_within_sets
from ..linalg.local_solvers import (
    BlockSolver,
    SingularBlockError,
    default_exact_solver,
    factorize_blocks,
)
from ..linalg.parallel import Beside, ThreadedBlocks, chunk_workers, one_blas_thread_below
from ..linalg.spd import dense_spd_cholesky, sparse_spd_factor

__all__ = [
    "DENSE_LOCAL_LIMIT_BYTES",
    "DENSE_LOCAL_MAX_SIZE",
    "COARSE_DENSE_MAX",
    "COARSE_DENSE_MAX_PARDISO",
    "LOCAL_CHUNK_ROWS",
    "EXACT_PIVOT_CHECK_ROWS",
    "LOCAL_BESIDE_COARSE",
    "SINGULAR_HINT",
    "SingularMatrixError",
    "entry_map",
    "OverlappingCorrection",
    "CoarseCorrection",
    "SumCorrection",
    "HybridCorrection",
]

#: ``local_solver="auto"`` picks the dense solver only when the padded inverses
#: ``N * p * p`` (``p`` the largest subdomain size) take at most this many bytes
#: in float64 (the set-up peak is about four times this), and on the CPU only for
#: subdomains of at most :data:`DENSE_LOCAL_MAX_SIZE` unknowns.
DENSE_LOCAL_LIMIT_BYTES = 2**26

#: Largest subdomain for which ``local_solver="auto"`` takes the dense solver on the CPU.
#: The dense set-up costs ``N p^3`` flops against a sparse factorisation's few milliseconds:
#: measured (one thread; set-up and one application of GDSW, dense against PARDISO), 2D
#: Poisson 64^2 in 16 parts (p = 327): 78 ms / 0.27 ms against 15 ms / 0.16 ms; 3D Poisson
#: 15^3 in 8 parts (p = 617): 193 ms / 0.63 ms against 22 ms / 0.19 ms; 1D, p = 18: 5.4 ms
#: / 0.04 ms against 5.0 ms / 0.06 ms, where the one batched product still applies faster.
DENSE_LOCAL_MAX_SIZE = 64

#: Largest coarse dimension ``n0`` factorised densely (``scipy.linalg.cho_factor``);
#: above it the sparse Galerkin matrix is factorised with PARDISO or SuperLU.
COARSE_DENSE_MAX = 2000

#: The same limit when the sparse factorisation is PARDISO's: its solves cost a fraction of
#: a dense triangular solve of the same order (``A_0`` of 2D elasticity, ``n0 = 1613``:
#: 0.1 ms against 1.4 ms per coarse solve, and 0.012 s against 0.044 s to factorise; of
#: 3D Poisson, ``n0 = 906``: 0.06 ms against 0.45 ms), and the coarse solve is paid at
#: every application.  Below a few hundred both are negligible.
COARSE_DENSE_MAX_PARDISO = 500

#: The sparse local solver factorises the block-diagonal matrix of the ``A_i``
#: in chunks of consecutive subdomains of about this many rows (a loop over
#: chunks, each one SuperLU factorisation and one batched solve per
#: application; see :func:`ddops.linalg.local_solvers.chunk_bounds`).
LOCAL_CHUNK_ROWS = FACTOR_CHUNK_ROWS

#: A PARDISO local solver of at least this many rows in all blocks is factorised and
#: solved on as many threads as the set-up has (:func:`ddops.linalg.parallel.chunk_workers`:
#: ``threads=1`` keeps one), in groups of consecutive subdomains side by side
#: (:class:`~ddops.linalg.parallel.ThreadedBlocks`).  Below it a solve takes tenths of a
#: millisecond and handing half of it to another thread costs about as much as it saves.
THREADED_SOLVE_MIN_ROWS = 20_000

#: A PARDISO local solver has a factorisation per group of consecutive subdomains of about
#: this many rows, on one thread too: PARDISO's analysis of a stack of blocks grows faster
#: than its rows, and its ordering of a long stack factorises more slowly.  Measured, one
#: thread, analysis and factorisation of the subdomain matrices (CPU seconds): 2D log-normal
#: (256 boxes, 291,781 rows) 0.85 -> 0.31 s in 16 groups; 3D Poisson (62 METIS parts,
#: 170,828 rows) 0.94 -> 0.53 s in 8 or 16; the same factor nonzeros within 0.3 % and the
#: same solve time.  (One analysis per block, a Python loop, is no faster than groups of
#: up to 8 blocks.)
LOCAL_GROUP_ROWS = FACTOR_CHUNK_ROWS

#: Up to this many rows in all local blocks, the sparse local solver checks
#: the pivots themselves (reading ``lu.U``, whose CSC copies scipy then keeps:
#: at most a few tens of MiB here); above it, the one-solve test of
#: :func:`ddops.linalg.local_solvers.check_blocks_by_one_solve`, which keeps nothing
#: (310 MiB less at 10^6 unknowns in 2D) but is a necessary condition only.
EXACT_PIVOT_CHECK_ROWS = 2**17

#: ``update(reuse_coarse=True)`` forms ``A_0`` as the old one plus ``Phi^T (A - A_old) Phi``
#: while the largest entry met since the last full product is at most this many times the
#: largest entry of ``A`` (the cancellation then costs at most about three digits) and for
#: at most :data:`INCREMENT_STEPS` updates in a row; else the full product again.
INCREMENT_RANGE = 1e3
INCREMENT_STEPS = 16

# the stacked restrictions S_in / S_out of each variant: the weights of the rows
_WEIGHTS = {"additive": ("none", "none"), "restricted": ("none", "full"),
            "symmetric_restricted": ("sqrt", "sqrt"), "hybrid": ("none", "none")}


def entry_map(A: sp.csr_matrix, S: sp.csr_matrix, block_of_row: np.ndarray) -> sp.coo_matrix:
    """Where every entry of the subdomain matrices comes from in ``A.data``.

    The diagonal blocks of ``S A S^T`` (``S`` a stacked 0/1 restriction with at most one 1
    per row, ``block_of_row`` the block of each of its rows) as a COO matrix whose values
    are positions in ``A.data``: every entry of a diagonal block is exactly one entry of
    ``A``.  Found by :func:`~ddops.dd.set_entries.entries_within_sets` (the blocks are the
    sets, a row's position is its stacked row), without forming the couplings between
    different blocks that the product forms (3D elasticity, 64 parts with overlap: 0.067 s
    -> 0.03 s).  The symbolic part of the extraction: the values of any matrix with the
    pattern of ``A`` are then ``A.data[positions]``.
    """
    S = sp.coo_matrix(S)
    blocks = int(block_of_row.max()) + 1 if block_of_row.size else 0
    _, row, col, source = entries_within_sets(A, S.col, block_of_row[S.row], S.row, blocks)
    index = np.int32 if A.nnz < 2**31 - 1 else np.int64
    return sp.coo_matrix((source.astype(index), (row, col)), shape=(S.shape[0], S.shape[0]))


class OverlappingCorrection:
    """The one-level (overlapping) correction ``sum_i R_i^T W_out A_i^{-1} W_in R_i``.

    The constructor is the symbolic phase: it chooses the local solver, builds the
    stacked restrictions of the variant and the map from ``A.data`` to the subdomain
    matrices (:func:`entry_map`).  :meth:`compute` factorises the subdomain matrices of
    a matrix with the pattern of ``A``.  See
    :class:`~ddops.precond.schwarz.TwoLevelSchwarz` for the parameters.

    Attributes
    ----------
    local_solver : str
        ``"dense"`` or ``"sparse"``.
    sparse_solver : str or None
        ``"superlu"``, ``"pardiso"`` or ``"amg"`` (None for ``"dense"``).
    solver : BlockSolver or None
        The sparse local solver (after :meth:`compute`).
    inverses : array or None
        The dense padded inverses ``(N, p, p)`` (after :meth:`compute`).
    """

    def __init__(self, A: sp.csr_matrix, decomposition: Decomposition, variant: str,
                 local_solver: str, factor_dtype: np.dtype, dtype: np.dtype, backend: str,
                 null_space: Any = None, singular_hint: str = "") -> None:
        d = self.decomposition = decomposition
        self.variant, self.factor_dtype, self.dtype, self.backend = (
            variant, factor_dtype, dtype, backend)
        self._singular_hint = singular_hint
        N, p = d.num_subdomains, d.max_size
        sparse_solver = {"sparse": "superlu"}.get(local_solver, local_solver)
        if local_solver == "auto":
            # dense for small subdomains (always on the GPU, the only local solver there),
            # and never when its set-up (about 4 N p^2) would not fit in memory
            small = backend == "cupy" or (p <= DENSE_LOCAL_MAX_SIZE
                                          and N * p * p * 8 <= DENSE_LOCAL_LIMIT_BYTES)
            dense = small and fits_in_memory(4 * N * p * p * 8)
            local_solver = "dense" if dense else "sparse"
            sparse_solver = default_exact_solver()
        elif local_solver != "dense":
            local_solver = "sparse"
        if local_solver == "dense":
            sparse_solver = None
        elif sparse_solver == "amg" and factor_dtype != np.float64:
            raise ValueError("factor_dtype=float32 is not available with local_solver='amg' "
                             "(the V-cycle runs in float64)")
        if backend == "cupy" and local_solver != "dense":
            raise ValueError("backend='cupy' supports only local_solver='dense' (the padded "
                             f"inverses need {N * p * p * 8 / 2**20:.1f} MiB)")
        if local_solver == "dense":  # the padded blocks, their factors and inverses
            check_memory(f"TwoLevelSchwarz(local_solver='dense') on {N} subdomains of up to {p} "
                         "unknowns", 4 * N * p * p * 8, "use local_solver='sparse'")
        self.local_solver, self.sparse_solver = local_solver, sparse_solver
        padded = local_solver == "dense"

        w_in, w_out = _WEIGHTS[variant]
        host_in = d.stacked_restriction(w_in, padded=padded, dtype=dtype)
        # one matrix when both sides carry the same weights (every symmetric variant)
        host_out = host_in if w_out == w_in else d.stacked_restriction(w_out, padded=padded,
                                                                       dtype=dtype)
        self.S_in = asarray(host_in, backend=backend)
        self.S_out = self.S_in if host_out is host_in else asarray(host_out, backend=backend)
        if backend == "numpy":  # transposed views (CSC, no copy), CSR copies on the GPU
            self.S_inT, self.S_outT = self.S_in.T, self.S_out.T
        else:
            self.S_inT = asarray(host_in.T.tocsr(), backend=backend)
            self.S_outT = self.S_inT if host_out is host_in else asarray(
                host_out.T.tocsr(), backend=backend)

        # the entries of the subdomain matrices as positions in A.data (symbolic)
        S = (host_in if (w_in == "none" and np.dtype(dtype) == np.float64) else
             d.stacked_restriction("none", padded=padded, dtype=np.float64))
        if padded:
            block_of_row = np.arange(S.shape[0]) // p
        else:
            block_of_row = d._subdomain_of_entry
        emap = entry_map(A, S, block_of_row)
        if padded:
            self._dense_at = (emap.row // p, emap.row % p, emap.col % p)
            self._source = emap.data
            pad_block, pad_pos = np.nonzero(np.arange(p)[None, :] >= d.sizes[:, None])
            self._padding = (pad_block, pad_pos)
        else:
            K = emap.tocsr()  # canonical: sorted, no duplicates (there are none)
            self._K_pattern = (K.indices, K.indptr, K.shape)
            self._source = K.data
        self._near_null = None
        if sparse_solver == "amg" and null_space is not None:
            Z = np.asarray(null_space, dtype=np.float64)
            self._near_null = S @ (Z.reshape(-1, 1) if Z.ndim == 1 else Z)
        self.solver: BlockSolver | None = None
        self.inverses = None

    @property
    def symbolic_bytes(self) -> int:
        """Bytes of the symbolic data kept for :meth:`compute` (the entry map and pattern)."""
        parts = [self._source]
        parts += list(self._dense_at) if self.local_solver == "dense" else list(
            self._K_pattern[:2])
        return sum(int(a.nbytes) for a in parts)

    def subdomain_matrices(self, A: sp.csr_matrix) -> sp.csr_matrix:
        """``diag(A_1, ..., A_N)`` of a matrix with the pattern of ``A`` (sparse solvers)."""
        indices, indptr, shape = self._K_pattern
        return sp.csr_matrix((A.data[self._source], indices, indptr), shape=shape)

    def compute(self, A: sp.csr_matrix, defer: bool = False) -> Beside | None:
        """The numeric phase: factorise the subdomain matrices of ``A``.

        PARDISO keeps its analysis (ordering and symbolic factorisation) from the first
        call and repeats only its numeric factorisation; the other solvers start again.

        With ``defer`` and PARDISO's threaded groups (:meth:`can_defer`), only the
        analysis runs here (a first call; :meth:`elimination_positions` is then known) and
        the numeric factorisation of the groups starts on a thread of its own: the
        returned :class:`~ddops.linalg.parallel.Beside`, whose ``join()`` (the caller's
        other work done) has the caller factorise the groups left, waits for the rest and
        raises what :meth:`compute` would raise (the solver then discarded).  Until then
        the solver cannot solve.  Returns None where nothing is deferred.
        """
        start = time.perf_counter()
        reusable = getattr(self.solver, "refactor", None)
        defer = bool(defer) and self.can_defer()
        # the solver refactorised beside keeps its analysis; otherwise release the old
        # factors first: they are not needed for the new ones
        solver = self.solver if defer and reusable is not None else None
        self.solver = self.inverses = None
        beside = None
        if self.local_solver == "dense":
            blocks = self._dense_blocks(A)
            self.extraction_seconds = time.perf_counter() - start
            self._factor_dense(blocks)
        else:
            K = self.subdomain_matrices(A)
            self.extraction_seconds = time.perf_counter() - start
            try:
                if defer:
                    if solver is None:
                        solver = self._factor_sparse(K, numeric=False)
                    self.solver = solver
                    beside = self._numeric_beside(solver, None if reusable is None else K)
                else:
                    self.solver = (reusable(K) if reusable is not None
                                   else self._factor_sparse(K))
            except SingularBlockError as exc:
                raise self._singular_block_error(exc.block) from None
        # (with the thread's start, which holds the GIL a while)
        self.factorization_seconds = time.perf_counter() - start - self.extraction_seconds
        return beside

    def _numeric_beside(self, solver: ThreadedBlocks, K: sp.csr_matrix | None) -> Beside:
        """The groups' numeric factorisation (``K``: refactorisation) started beside."""
        def named(task: Callable[[], None]) -> None:
            try:
                task()
            except SingularBlockError as exc:
                raise self._singular_block_error(exc.block) from None

        def failed() -> None:  # the other groups' factors, and no half-made solver kept
            solver.free()
            self.solver = None

        return Beside([functools.partial(named, task) for task in solver.numeric_tasks(K)],
                      on_error=failed)

    def can_defer(self) -> bool:
        """Whether :meth:`compute` can defer the numeric factorisation now: PARDISO's groups
        on more than one thread (:class:`~ddops.linalg.parallel.ThreadedBlocks`), to be
        built or refactorised, under the thread limit in force."""
        if self.local_solver == "dense" or self.sparse_solver != "pardiso":
            return False
        if getattr(self.solver, "refactor", None) is not None:
            return isinstance(self.solver, ThreadedBlocks) and chunk_workers() > 1
        groups, workers = self._threaded_groups(int(self.decomposition.offsets[-1]))
        return groups > 1 and workers > 1

    def elimination_positions(self) -> np.ndarray | None:
        """Where PARDISO's factorisation of the subdomain matrices eliminates every row of
        the stack (the packed entries of the decomposition, subdomain after subdomain), or
        None for the other solvers.  Within one subdomain these positions are a
        fill-reducing order of its unknowns, which serves the factorisations of its
        submatrices too (:meth:`~ddops.dd.analysis.GDSWAnalysis.share_local_order`)."""
        order = getattr(self.solver, "order", None) if self.sparse_solver == "pardiso" else None
        if order is None:
            return None
        positions = np.empty(order.size, dtype=np.int64)
        positions[order] = np.arange(order.size)
        return positions

    def _singular_block_error(self, i: int) -> ValueError:
        # subdomain_matrix_name already names the subdomain; the size follows it once
        return ValueError(f"{subdomain_matrix_name(i)}, with "
                          f"{int(self.decomposition.sizes[i])} unknowns, is singular or not "
                          f"positive definite{self._singular_hint}")

    def _dense_blocks(self, A: sp.csr_matrix) -> np.ndarray:
        """The padded subdomain matrices ``(N, p, p)`` of ``A`` (dense solver)."""
        d = self.decomposition
        N, p = d.num_subdomains, d.max_size
        dense = np.zeros((N, p, p))
        dense[self._dense_at] = A.data[self._source]
        # identity on padding rows keeps every padded block nonsingular; S has empty
        # rows there, so the padding never reaches the result
        dense[self._padding[0], self._padding[1], self._padding[1]] = 1.0
        return dense

    def _factor_dense(self, dense: np.ndarray) -> None:
        L, ok = dense_spd_cholesky(dense)
        bad = ~ok
        if bad.any():
            raise self._singular_block_error(int(np.flatnonzero(bad)[0]))
        # explicit inverses A_i^{-1} = L^{-T} L^{-1}: one batched GEMM per application
        Linv = np.linalg.inv(L)
        inv = np.matmul(Linv.transpose(0, 2, 1), Linv)
        inv = 0.5 * (inv + inv.transpose(0, 2, 1))  # exactly symmetric, so M^T = M bitwise
        inv_dtype = np.float32 if self.factor_dtype == np.float32 else self.dtype
        xp = np if self.backend == "numpy" else _cupy()
        self.inverses = xp.asarray(inv.astype(inv_dtype))

    def _threaded_groups(self, rows: int) -> tuple[int, int]:
        """PARDISO's groups and their threads for ``rows`` rows of subdomain matrices."""
        workers = chunk_workers() if rows >= THREADED_SOLVE_MIN_ROWS else 1
        # a multiple of the threads, so that each solves as many rows
        per_worker = -(-int(rows) // (LOCAL_GROUP_ROWS * workers))
        offsets = self.decomposition.offsets
        return min(workers * per_worker, int(np.count_nonzero(np.diff(offsets)))), workers

    def _factor_sparse(self, K: sp.csr_matrix, numeric: bool = True) -> BlockSolver:
        """Factorise ``K = diag(A_1, ..., A_N)`` with the sparse solver (``numeric`` False:
        PARDISO's threaded groups analysed only, see :meth:`compute`)."""
        offsets = self.decomposition.offsets
        block_size = int(getattr(self.decomposition, "block_size", 1))
        if self.sparse_solver == "pardiso":
            groups, workers = self._threaded_groups(K.shape[0])
            if groups > 1:
                return ThreadedBlocks(K, offsets, groups=groups, workers=workers,
                                      dtype=self.factor_dtype, block_size=block_size,
                                      numeric=numeric)
        return factorize_blocks(K, offsets, self.sparse_solver, dtype=self.factor_dtype,
                                exact_check=K.shape[0] <= EXACT_PIVOT_CHECK_ROWS,
                                near_null=self._near_null, chunk_rows=LOCAL_CHUNK_ROWS,
                                block_size=block_size)

    @property
    def nbytes(self) -> int:
        """Bytes of the local factors (sparse solver) or of the dense inverses."""
        if self.solver is not None:
            return int(self.solver.nbytes)
        return 0 if self.inverses is None else int(self.inverses.nbytes)

    @property
    def threaded(self) -> bool:
        """Whether :meth:`apply` solves on several threads (a PARDISO solver in groups,
        :class:`~ddops.linalg.parallel.ThreadedBlocks`), so that :meth:`apply_beside` runs
        its other task among the solves."""
        return (self.backend == "numpy" and isinstance(self.solver, ThreadedBlocks)
                and self.solver.workers > 1)

    def apply(self, X: Any, adjoint: bool = False) -> Any:
        """``sum_i R_i^T W_out A_i^{-1} W_in R_i X`` (or its adjoint) in the product dtype."""
        return self.apply_beside(X, None, adjoint)[0]

    def apply_beside(self, X: Any, beside: Any, adjoint: bool = False) -> tuple[Any, Any]:
        """:meth:`apply`, and ``beside()`` (None: nothing) run by the threads of the local
        solves as one more task where :attr:`threaded`
        (:meth:`~ddops.linalg.parallel.ThreadedBlocks.solve_beside`), after the solves
        elsewhere.  Returns both results."""
        xp = np if self.backend == "numpy" else _cupy()
        S_in, S_outT = (self.S_out, self.S_inT) if adjoint else (self.S_in, self.S_outT)
        Xl = S_in @ X
        extra, pending = None, beside is not None
        if self.inverses is not None:
            N, p = self.decomposition.num_subdomains, self.decomposition.max_size
            B = X.shape[1]
            # A_i^{-1} is stored exactly symmetric, so the adjoint uses the same blocks
            Xl = Xl.reshape(N, p, B)
            if self.inverses.dtype != Xl.dtype:  # float32 inverses: cast in, GEMM, cast back
                Xl = Xl.astype(self.inverses.dtype)
            Yl = xp.matmul(self.inverses, Xl).reshape(N * p, B)
            Yl = xp.asarray(Yl, dtype=self.dtype)
        else:
            # float32 factors: the solver casts the residual to float32 and returns float64
            if self.threaded:  # (symmetric blocks: the adjoint's solve is the same)
                Yl, extra = self.solver.solve_beside(Xl, beside)
                pending = False
            else:
                Yl = self.solver.solve(Xl, trans="T" if adjoint else "N")
            if Yl.dtype != self.dtype:
                Yl = Yl.astype(self.dtype)
        if pending:
            extra = beside()
        return S_outT @ Yl, extra


def _cupy():
    import cupy

    return cupy


class SingularMatrixError(ValueError):
    """``A`` is singular and no ``kernel=`` was given (a ValueError).

    ``detail`` says how it was found, without the advice (which names the Python
    argument ``kernel=``; the command line names its own flag instead).
    """

    def __init__(self, message: str, detail: str) -> None:
        super().__init__(message)
        self.detail = detail


#: What the library says to do about a singular ``A`` without ``kernel=``.
SINGULAR_HINT = ("pass kernel= (the vectors A annihilates: kernel=np.ones(n) for a "
                 "pure-Neumann Laplacian, the rigid body modes of a floating elastic body, "
                 "ddops.problems.rigid_body_modes)")


class _SingularCoarse:
    """The error of a failed coarse factorisation, naming the dependent columns when it can."""

    def __init__(self, A: sp.csr_matrix, Phi: sp.csr_matrix, n0: int) -> None:
        self.A, self.Phi, self.n0 = A, Phi, n0

    def error(self) -> ValueError:
        try:  # a rank-revealing pass: its message lists the dependent or zero columns
            coarse_matrix_checked(self.A, self.Phi)
        except ValueError as exc:
            try:  # the same pass in the Euclidean inner product: is Phi itself rank deficient?
                coarse_matrix_checked(sp.identity(self.A.shape[0], format="csr"), self.Phi)
            except ValueError:
                return ValueError(f"coarse matrix A_0 = Phi^T A Phi ({self.n0} x {self.n0}) "
                                  f"is singular: {exc}")
            detail = (f"the coarse matrix A_0 = Phi^T A Phi ({self.n0} x {self.n0}) is "
                      "singular because A is singular: Phi has independent columns, but A "
                      "annihilates a combination of them (a pure-Neumann problem, a floating "
                      "body, ...)")
            return SingularMatrixError(f"{detail[4:]}; {SINGULAR_HINT}", detail)
        return ValueError(
            f"coarse matrix A_0 = Phi^T A Phi ({self.n0} x {self.n0}) is singular or not "
            "positive definite; the coarse basis Phi must have full column rank (no zero or "
            "repeated columns) and A must be SPD")


class CoarseCorrection:
    """The coarse correction ``Phi A_0^{-1} Phi^T`` with ``A_0 = Phi^T A Phi``.

    The constructor records what the coarse space is (a name with its options, or a
    user basis); :meth:`compute` builds ``Phi`` from a matrix (unless it is kept),
    ``A_0`` and its factorisation.

    Parameters
    ----------
    decomposition : Decomposition
        The decomposition the basis is built on.
    coarse_basis : str or sparse matrix
        A resolved coarse-space name or a user basis ``Phi``.
    coarse_size : int or None
        Number of functions of ``"grid_hats"``.
    null_space, kernel : array or None
        The near-null space, and the orthonormal kernel basis ``Q`` of a singular ``A``.
    options : dict
        Keyword arguments of :func:`ddops.coarse_basis` for the named space.
    hybrid : bool
        Keep ``A Phi`` for the hybrid composition.
    dtype, backend
        Product dtype and backend.
    factorization : {"pardiso", "superlu"}
        The sparse factorisation of ``A_0`` above :data:`COARSE_DENSE_MAX`.
    extension_reuse : {"analysis", "ordering"}
        What the GDSW-type spaces keep for :meth:`build_basis` on a new matrix
        (:class:`~ddops.dd.analysis.GDSWAnalysis`).

    Attributes
    ----------
    Phi : scipy CSR or None
        The coarse basis (host), None for none (after :meth:`compute`).
    info : AdaptiveInfo, GDSWInfo or None
        What the builder of a named basis reported.
    stats : dict
        ``info.stats`` and ``"kernel_dropped"``.
    solver : {"dense", "sparse"} or None
        How ``A_0`` is factorised.
    """

    def __init__(self, decomposition: Decomposition, coarse_basis: Any, coarse_size: Any,
                 null_space: Any, kernel: np.ndarray | None, options: dict, hybrid: bool,
                 dtype: np.dtype, backend: str, factorization: str, *,
                 extension_reuse: str = "analysis") -> None:
        self.decomposition = decomposition
        self.kind = coarse_basis if isinstance(coarse_basis, str) else "custom"
        self._user_basis = None if isinstance(coarse_basis, str) else validate_coarse_matrix(
            coarse_basis, decomposition.num_dofs)
        self.coarse_size, self.null_space, self.kernel = coarse_size, null_space, kernel
        self.options, self.hybrid = options, hybrid
        self.dtype, self.backend, self.factorization = dtype, backend, factorization
        self.Phi = self.info = None
        # the symbolic part of the GDSW-type extensions, kept for update()
        # (GenEO's: the subdomains' elimination order that it shares, nothing kept)
        self.analysis = (GDSWAnalysis(extension_reuse)
                         if self.kind in ("auto", "gdsw", "rgdsw", "agdsw", "geneo") else None)
        self._kept = self._previous_lu = None
        self._given_A0 = None  # Phi^T A Phi that the basis's builder formed (GenEO, AGDSW)
        self.stats: dict = {}
        self.dim = 0
        self.solver = None
        self._cho = self._lu = self._inv = None
        self._Phi = self._PhiT = self._AP = self._APT = None

    @property
    def xp(self):
        return np if self.backend == "numpy" else _cupy()

    def build_basis(self, A: sp.csr_matrix) -> sp.csr_matrix | None:
        """The numeric phase of the basis: ``Phi`` of ``A`` (grounded for ``kernel``)."""
        if self._user_basis is not None:
            Phi, self.info = self._user_basis, None
        else:
            try:
                Phi, self.info = build_coarse_basis(
                    self.decomposition, self.kind, size=self.coarse_size, A=A,
                    null_space=self.null_space, return_info=True,
                    analysis=self.analysis, **self.options)
            except ValueError as exc:
                if self.kernel is None:
                    raise
                raise ValueError(f"{exc} (A is singular, kernel=: a local problem of the "
                                 "coarse space that holds a whole kernel vector is singular "
                                 "too; use more subdomains or another coarse space)") from exc
        self.stats = dict(getattr(self.info, "stats", None) or {})
        # A_0 of this Phi where the builder formed it (taken from the info, not held twice)
        self._given_A0 = getattr(self.info, "coarse_matrix", None)
        if self._given_A0 is not None:
            self.info.coarse_matrix = None
        if Phi is not None and Phi.shape[1] == 0:
            # GenEO with no eigenvalue below its threshold: the one-level method meets the
            # bound already
            warn(f"coarse_basis={self.kind!r} selected no coarse function (no eigenvalue "
                 "below the threshold in any subdomain); the preconditioner is one-level",
                 RuntimeWarning)
            Phi = None
        self.stats["kernel_dropped"] = 0
        if self.kernel is not None and Phi is not None:
            # ground the coarse problem: drop one column per dimension of the coarse kernel
            Phi, self.stats["kernel_dropped"] = ground_basis(Phi, self.kernel)
            self._given_A0 = None  # (of the columns before grounding)
        self.Phi = Phi
        self._kept = None  # A_0 of another basis: no incremental update from it
        return Phi

    def release_basis(self) -> None:
        """Drop ``Phi`` and what came with it, for a caller that assembles ``A_0`` itself
        (the distributed preconditioner keeps each rank's rows of Phi instead)."""
        self.Phi = self._given_A0 = None

    def compute(self, A: sp.csr_matrix, basis_of_A: bool = True) -> None:
        """The numeric phase of the coarse problem: ``A_0 = Phi^T A Phi`` and its factor.

        ``basis_of_A``: ``Phi`` was built from this ``A`` by :meth:`build_basis` (False for
        a basis kept from another matrix, whose columns are not discrete harmonic for
        ``A``: ``A_0`` then takes the full product).
        """
        start = time.perf_counter()
        self.assembly_seconds = self.factorization_seconds = 0.0
        try:
            self._compute(A, basis_of_A, start)
        finally:
            if self.assembly_seconds:
                self.factorization_seconds = time.perf_counter() - start - self.assembly_seconds

    def _compute(self, A: sp.csr_matrix, basis_of_A: bool, start: float) -> None:
        Phi = self.Phi
        kept, self._kept = self._kept, None
        given, self._given_A0 = self._given_A0, None
        # PARDISO's analysis, if A_0 keeps its pattern (other factors are dropped here)
        self._previous_lu = self._lu if getattr(self._lu, "refactor", None) else None
        self.A0 = None
        self.dim = 0 if Phi is None else int(Phi.shape[1])
        if not basis_of_A or given is None or given.shape != (self.dim, self.dim):
            given = None  # (another matrix, or another basis: A_0 is formed here)
        self.solver = None
        self._cho = self._lu = self._inv = None
        self._Phi = self._PhiT = self._AP = self._APT = None
        if Phi is None:
            self._drop_previous()
            return
        rows = getattr(self.info, "harmonic_interface", None) if basis_of_A else None
        scale = float(np.abs(A.data).max()) if A.nnz else 0.0
        if kept is not None and (kept[0].shape != A.data.shape or kept[3] > INCREMENT_RANGE
                                 * scale or kept[4] >= INCREMENT_STEPS):
            kept = None  # cancellation would cost digits: the full product again
        if not basis_of_A and kept is not None:
            # the same Phi and a matrix with the same pattern: A_0 changes by
            # Phi^T (A - A_old) Phi, a product with the rows where the values changed only
            # (coefficients that move or grow locally change few rows)
            values, A0_old, AP_old, old_scale, steps = kept
            # (A's index arrays may be the caller's: nothing here writes into them)
            delta = A.data - values
            entry_row = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
            changed = np.unique(entry_row[delta != 0])
            dA = sp.csr_matrix((delta, A.indices, A.indptr), shape=A.shape)
            dAP = _rows_to_full((dA[changed] @ Phi).tocsr(), changed, Phi.shape)
            dA0 = transposed_product(Phi[changed], dAP[changed])
            A0 = (A0_old + (dA0 + dA0.T) * 0.5).tocsr()
            AP = None if not self.hybrid else (
                (A @ Phi).tocsr() if AP_old is None else (AP_old + dAP).tocsr())
        elif rows is not None and np.all(np.diff(rows) > 0):
            # discrete-harmonic columns: A Phi vanishes off the interface up to rounding, so
            # A_0 = Phi_G^T (A Phi)_G, a product with the few interface rows of Phi instead
            # of all of them (3D elasticity: 13 x faster), and A Phi is kept on those rows;
            # A_0 as the builder's dependence check formed it, where it did (AGDSW)
            APG = (A[rows] @ Phi).tocsr() if self.hybrid else None
            A0 = given if given is not None else galerkin_matrix(A, Phi, rows, product=APG)
            AP = None if APG is None else _rows_to_full(APG, rows, Phi.shape)
            del APG
        elif given is not None:
            # the builder's dependence check formed Phi^T A Phi already (GenEO): 0.15 s of
            # a 2.3 s set-up on 3D elasticity; A Phi only for the hybrid form
            A0 = given
            AP = (A @ Phi).tocsr() if self.hybrid else None
        else:
            AP = (A @ Phi).tocsr()
            A0 = galerkin_matrix(A, Phi, product=AP)
        A0.sum_duplicates()
        A0.sort_indices()
        # what a later compute with the same Phi starts from (update(reuse_coarse=True)):
        # the values, A_0, A Phi, the largest entry met since the last full product (the
        # size of the terms that cancel) and the increments since
        incremental = not basis_of_A and kept is not None
        self._kept = (A.data.copy(), A0, AP if self.hybrid else None,
                      max(scale, kept[3]) if incremental else scale,
                      kept[4] + 1 if incremental else 0)
        self.assembly_seconds = time.perf_counter() - start
        singular = _SingularCoarse(A, Phi, self.dim)
        dt, backend = self.dtype, self.backend
        if self.hybrid:
            # A Phi, kept for the hybrid form in place of A: its two products with A
            # (A X0 = (A Phi) c and Phi^T A Y = (A Phi)^T Y) touch about half the nonzeros
            self._AP = asarray(AP.astype(dt, copy=False), backend=backend)
            self._APT = self._AP.T if backend == "numpy" else asarray(
                AP.T.tocsr().astype(dt, copy=False), backend=backend)
        del AP
        # no copy when Phi already has the product dtype (it is float64 CSR from the basis)
        self._Phi = asarray(Phi.astype(dt, copy=False), backend=backend)
        # Phi^T as a transposed view on the host (no copy), a CSR copy on the GPU
        self._PhiT = self._Phi.T if backend == "numpy" else asarray(
            Phi.T.tocsr().astype(dt, copy=False), backend=backend)
        self.factor(A0, singular.error)

    def factor(self, A0: sp.spmatrix, singular: Any = None) -> None:
        """Factorise the coarse matrix ``A_0``: the last step of :meth:`compute`.

        Public for a coarse matrix assembled elsewhere (the distributed preconditioner sums
        ``A_0`` over the ranks and factorises it on every rank).  Dense Cholesky up to
        :data:`COARSE_DENSE_MAX` (:data:`COARSE_DENSE_MAX_PARDISO` when ``factorization``
        is PARDISO; always on the GPU), else the sparse factorisation of
        ``factorization``.

        Parameters
        ----------
        A0 : sparse matrix
            The symmetric ``n0 x n0`` coarse matrix.
        singular : callable, optional
            Returns the exception raised when ``A_0`` is singular or not positive definite
            (default: a ValueError that says so).
        """
        if singular is None:
            def singular() -> ValueError:
                return ValueError(f"coarse matrix A_0 = Phi^T A Phi ({A0.shape[0]} x "
                                  f"{A0.shape[0]}) is singular or not positive definite; "
                                  "the coarse basis Phi must have full column rank and A "
                                  "must be SPD")
        A0 = sp.csr_matrix(A0)
        self.A0 = A0
        self.dim = int(A0.shape[0])
        self.solver = None
        self._cho = self._lu = self._inv = None
        dt, backend = self.dtype, self.backend
        previous, self._previous_lu = self._previous_lu, None
        dense_max = (min(COARSE_DENSE_MAX, COARSE_DENSE_MAX_PARDISO)
                     if self.factorization == "pardiso" else COARSE_DENSE_MAX)
        if self.dim > dense_max and backend != "cupy" and self.factorization == \
                "pardiso" and previous is not None:
            try:  # the kept basis: the same pattern of A_0, PARDISO's analysis reused
                self._lu = previous.refactor(A0)
                self.solver = "sparse"
                return
            except SingularBlockError:
                raise singular() from None
            except ValueError:  # another pattern after all
                previous.free()
        elif previous is not None:
            previous.free()
        if self.dim <= dense_max or backend == "cupy":
            with one_blas_thread_below(self.dim):
                c, ok = dense_spd_cholesky(A0.toarray())
            if not ok:
                raise singular()
            lower = True
            self.solver = "dense"
            # L^T, upper: LAPACK's layout of numpy's lower factor (no copy), where cho_solve
            # would copy the C-ordered L at every application (n0 = 2000: 7.2 ms against
            # 1.5 ms per coarse solve)
            self._cho = (c.T, False)
            if backend == "cupy":  # no cho_solve on the GPU: ship A_0^{-1}
                inv = sla.cho_solve((c, lower), np.eye(self.dim), check_finite=False)
                self._inv = self.xp.asarray(inv.astype(dt))
            return
        self.solver = "sparse"
        if self.factorization == "pardiso":
            try:
                self._lu = factorize_blocks(A0, [0, self.dim], "pardiso")
            except SingularBlockError:
                raise singular() from None
            return
        lu, bad = sparse_spd_factor(A0)
        if lu is None or bad.size:
            raise singular()
        self._lu = lu

    def _drop_previous(self) -> None:
        previous, self._previous_lu = self._previous_lu, None
        if previous is not None:
            previous.free()

    @property
    def kept_bytes(self) -> int:
        """Bytes kept for a later :meth:`compute` with the same basis: the values of the
        last ``A`` (``A_0`` and ``A Phi`` are held anyway)."""
        if self._kept is None:
            return 0
        AP = self._kept[2]
        own_AP = AP is not None and AP is not self._AP  # a float64 host copy of A Phi
        return int(self._kept[0].nbytes) + (sum(int(a.nbytes) for a in (
            AP.data, AP.indices, AP.indptr)) if own_AP else 0)

    @property
    def factor_bytes(self) -> int:
        """Bytes of the coarse factor (the dense Cholesky factor, and ``A_0^{-1}`` on the GPU;
        what PARDISO reports; 12 per SuperLU nonzero)."""
        if self.solver == "dense":
            return int(self._cho[0].nbytes) + (int(self._inv.nbytes) if self._inv is not None
                                               else 0)
        if self.solver == "sparse":
            if isinstance(self._lu, BlockSolver):
                return int(self._lu.nbytes)
            return int(self._lu.nnz) * 12
        return 0

    def solve(self, C: Any, adjoint: bool = False) -> Any:
        """``A_0^{-1} C`` (``A_0^{-T}`` for the adjoint) in the product dtype."""
        if self.solver == "sparse":
            Y0 = self._lu.solve(np.asarray(C, dtype=np.float64), trans="T" if adjoint else "N")
        elif self.backend == "cupy":
            Y0 = self._inv @ C
        else:
            Y0 = sla.cho_solve(self._cho, np.asarray(C, dtype=np.float64), check_finite=False)
        return self.xp.asarray(Y0, dtype=self.dtype)

    def apply(self, X: Any, adjoint: bool = False) -> Any:
        """``Phi A_0^{-1} Phi^T X``."""
        return self._Phi @ self.solve(self._PhiT @ X, adjoint)


def _rows_to_full(rows_matrix: sp.csr_matrix, rows: np.ndarray, shape: tuple) -> sp.csr_matrix:
    """The CSR matrix of ``shape`` whose rows ``rows`` (increasing) are those of
    ``rows_matrix`` and whose other rows are empty (no copy of the values)."""
    counts = np.zeros(shape[0], dtype=np.int64)
    counts[rows] = np.diff(rows_matrix.indptr)
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(rows_matrix.indptr.dtype)
    return sp.csr_matrix((rows_matrix.data, rows_matrix.indices, indptr), shape=shape)


#: In a set-up on two threads or more whose local solver is PARDISO's threaded groups
#: (:meth:`OverlappingCorrection.can_defer`), the subdomains' numeric factorisation runs on
#: a thread of its own beside the coarse space (basis, ``A_0`` and its factorisation), which
#: needs only their analysis (the elimination order GDSW's extension shares): the coarse
#: space's serial steps (the assembly and factorisation of ``A_0``, the dependent-column
#: check) then leave no core idle.  The groups are tasks the thread takes in turn; the
#: set-up takes those left once the coarse space is done
#: (:class:`~ddops.linalg.parallel.Beside`).  The same factors bit for bit.  Measured
#: (``benchmarks/local_beside.py``): see ``docs/preconditioning.md``, "The local
#: factorisation beside the coarse space".
LOCAL_BESIDE_COARSE = True


#: In an additive two-level application whose local solves run on several threads
#: (:attr:`OverlappingCorrection.threaded`), the coarse correction runs as one more task
#: among them (:meth:`OverlappingCorrection.apply_beside`) instead of after them: it is
#: independent of the local one, and on the coarse space of elasticity it takes as long as
#: the local solves of a thread.  The same sum bit for bit.  Measured
#: (``benchmarks/coarse_beside.py``, two threads, one application of GDSW): see
#: ``docs/preconditioning.md``, "The coarse correction beside the local solves".
COARSE_BESIDE = True


class SumCorrection:
    """The additive composition ``M X = sum_k M_k X`` of corrections (FROSch's
    ``SumOperator``); a part of dimension 0 (no coarse function) is skipped.  A threaded
    local correction first runs the parts after it among its solves
    (:data:`COARSE_BESIDE`)."""

    def __init__(self, *parts: Any) -> None:
        self.parts = parts

    def apply(self, X: Any, adjoint: bool = False) -> Any:
        active = [p for p in self.parts if getattr(p, "dim", 1)]
        first, rest = active[0], active[1:]
        if rest and COARSE_BESIDE and getattr(first, "threaded", False):
            out, others = first.apply_beside(
                X, lambda: [part.apply(X, adjoint) for part in rest], adjoint)
        else:
            out, others = first.apply(X, adjoint), None
        for k, part in enumerate(rest):  # the same sum, in the same order, either way
            out = out + (part.apply(X, adjoint) if others is None else others[k])
        return out


class HybridCorrection:
    """The coarse correction applied multiplicatively around a local one (FROSch's
    ``MultiplicativeOperator``, symmetric form):
    ``M = P_0 + (I - P_0 A) M_1 (I - A P_0)``, ``P_0 = Phi A_0^{-1} Phi^T``.

    With ``X0 = Phi c1`` and ``P_0 A Y = Phi c2``: ``M X = Y + Phi (c1 - c2)``, where
    ``c1 = A_0^{-1} Phi^T X``, ``Y = M_1 (X - (A Phi) c1)``, ``c2 = A_0^{-1} (A Phi)^T Y``:
    two coarse solves and the products with ``A Phi`` instead of ``A``.
    """

    def __init__(self, coarse: CoarseCorrection, local: OverlappingCorrection) -> None:
        self.coarse, self.local = coarse, local

    def apply(self, X: Any, adjoint: bool = False) -> Any:
        coarse = self.coarse
        if not coarse.dim:
            return self.local.apply(X, adjoint)
        c1 = coarse.solve(coarse._PhiT @ X, adjoint)
        Y = self.local.apply(X - coarse._AP @ c1, adjoint)
        c2 = coarse.solve(coarse._APT @ Y, adjoint)
        return Y + coarse._Phi @ (c1 - c2)
