"""Classical overlapping Schwarz preconditioners for scipy's Krylov solvers.

:class:`TwoLevelSchwarz` is the textbook two-level method built on the same
decompositions and coarse bases as Schwarz attention, with exact local solves
``A_i^{-1}`` (``A_i = R_i A R_i^T``) and a Galerkin coarse solve
``A_0^{-1}`` (``A_0 = Phi^T A Phi``) in place of the learned low-rank blocks::

    additive               M = sum_i R_i^T A_i^{-1} R_i                     + Phi A_0^{-1} Phi^T
    restricted (RAS)       M = sum_i R_i^T D_i A_i^{-1} R_i                 + Phi A_0^{-1} Phi^T
    symmetric_restricted   M = sum_i R_i^T D_i^{1/2} A_i^{-1} D_i^{1/2} R_i + Phi A_0^{-1} Phi^T

Every ``A_i`` is extracted and factorised once, all subdomains together, and
one application is a fixed number of whole-array operations (no Python loop
over subdomains).  With ``S_in`` and ``S_out`` the stacked, weighted
restrictions of :meth:`ddops.Decomposition.stacked_restriction`::

    M X = S_out^T blockdiag(A_i^{-1}) S_in X  +  Phi A_0^{-1} Phi^T X

:func:`jacobi` and :func:`solve_with_history` complete the set needed for
iteration tables (see ``examples/krylov_iterations.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from threadpoolctl import ThreadpoolController

from .._validation import (
    as_matrix,
    as_vectors,
    check_choice,
    check_dtype,
    check_finite,
    check_memory,
    check_no_empty_rows,
    fits_in_memory,
    subdomain_matrix_name,
    warn,
)
from ..backend import asarray, check_backend
from ..dd.coarse import (
    ADAPTIVE_OPTIONS,
    resolve_coarse_kind,
    validate_coarse_matrix,
)
from ..dd.coarse import coarse_basis as build_coarse_basis
from ..dd.decomposition import Decomposition
from ..dd.gdsw import FACTOR_CHUNK_ROWS, symmetry_defect
from ..dd.kernel import (
    KERNEL_RHS_RTOL,
    KERNEL_RTOL,
    check_kernel,
    ground_basis,
    remove_kernel,
)
from ..linalg.local_solvers import (
    SINGULAR_PIVOT_RTOL,
    SPARSE_SOLVERS,
    BlockSolver,
    SingularBlockError,
    _bad_pivots,
    check_threads,
    default_exact_solver,
    factorize_blocks,
    pardiso_available,
    superlu_chunk,
    thread_limit,
)
from ..operators.linop import DENSE_LIMIT_BYTES, BackendLinearOperator

__all__ = [
    "VARIANTS",
    "LOCAL_SOLVERS",
    "FACTOR_DTYPES",
    "SOLVERS",
    "DENSE_LOCAL_LIMIT_BYTES",
    "COARSE_DENSE_MAX",
    "SINGULAR_PIVOT_RTOL",
    "LOCAL_CHUNK_ROWS",
    "EXACT_PIVOT_CHECK_ROWS",
    "DENSE_LIMIT_BYTES",
    "TwoLevelSchwarz",
    "JacobiPreconditioner",
    "jacobi",
    "solve_with_history",
    "zero_energy_defects",
    "SINGULAR_HINT",
    "SingularMatrixError",
]

#: Preconditioner variants: how the partition of unity ``D_i`` enters the local sum, and
#: ``"hybrid"``: the additive local sum with the coarse correction applied multiplicatively,
#: ``M = P_0 + (I - P_0 A) M_1 (I - A P_0)`` with ``P_0 = Phi A_0^{-1} Phi^T`` (symmetric).
VARIANTS = ("additive", "restricted", "symmetric_restricted", "hybrid")

#: Local solvers: ``"dense"`` (batched inverses, one batched GEMM per
#: application), the sparse solvers of :mod:`ddops.linalg.local_solvers` applied to the
#: block-diagonal matrix of all subdomain matrices (``"superlu"``, alias ``"sparse"``;
#: ``"pardiso"``; the inexact ``"amg"``), or ``"auto"``.
LOCAL_SOLVERS = ("auto", "dense", "sparse", *SPARSE_SOLVERS)

#: Precisions of the local solves (``factor_dtype``): float64, or float32 factors applied to
#: the float64 residual (cast in, solve, cast back; the rest stays in float64).
FACTOR_DTYPES = (np.dtype(np.float64), np.dtype(np.float32))

#: Krylov methods of :func:`solve_with_history`.
SOLVERS = ("cg", "gmres")

#: ``local_solver="auto"`` picks the dense solver when the padded inverses
#: ``N * p * p`` (``p`` the largest subdomain size) take at most this many bytes
#: in float64; the set-up peak is about four times this.
DENSE_LOCAL_LIMIT_BYTES = 2**26

#: Largest coarse dimension ``n0`` factorised densely (``scipy.linalg.cho_factor``);
#: above it the sparse Galerkin matrix is factorised with SuperLU.
COARSE_DENSE_MAX = 2000

#: The sparse local solver factorises the block-diagonal matrix of the ``A_i``
#: in chunks of consecutive subdomains of about this many rows (a loop over
#: chunks, each one SuperLU factorisation and one batched solve per
#: application; see :func:`ddops.dd.gdsw.chunk_bounds`).
LOCAL_CHUNK_ROWS = FACTOR_CHUNK_ROWS

#: Up to this many rows in all local blocks, the sparse local solver checks
#: the pivots themselves (reading ``lu.U``, whose CSC copies scipy then keeps:
#: at most a few tens of MiB here); above it, the one-solve test of
#: :func:`ddops.linalg.local_solvers.check_blocks_by_one_solve`, which keeps nothing
#: (310 MiB less at 10^6 unknowns in 2D) but is a necessary condition only.
EXACT_PIVOT_CHECK_ROWS = 2**17




# -- validation helpers ----------------------------------------------------------------------
def _check_matrix(A: Any, name: str = "A") -> tuple[sp.csr_matrix, np.dtype]:
    """``A`` as float64 CSR (the package's matrix contract, :func:`ddops._validation.as_matrix`)
    without empty rows, and its original dtype."""
    A, original = as_matrix(A, name)
    check_no_empty_rows(A, name)
    return A, original


def _check_symmetric(A: sp.csr_matrix, name: str = "A") -> bool:
    """Raise unless ``max |A - A^T| <= sqrt(eps) * max |A|``; True when ``A = A^T`` exactly."""
    scale = float(np.abs(A.data).max()) if A.nnz else 0.0
    asym, exact = symmetry_defect(A)
    if asym > np.sqrt(np.finfo(np.float64).eps) * scale:
        raise ValueError(f"{name} is not symmetric: max |{name} - {name}^T| = {asym:.3e} against "
                         f"max |{name}| = {scale:.3e}; the Schwarz preconditioner needs an SPD "
                         "matrix")
    return exact


def _sparse_spd_factor(K: sp.spmatrix) -> tuple[Any, np.ndarray | None]:
    """SuperLU factorisation of a symmetric matrix with its pivots checked (the coarse matrix).

    Every unknown is its own block of :func:`ddops.linalg.local_solvers.superlu_chunk`, which
    reads the ``LDL^T`` pivots of SuperLU's symmetric mode.

    Returns
    -------
    lu : SuperLU or None
        The factorisation, or None when SuperLU hit an exactly zero pivot.
    bad : array of int or None
        Original indices of non-positive, tiny or off-diagonal pivots (empty when SPD).
    """
    K = sp.csc_matrix(K)
    return superlu_chunk(K, np.arange(K.shape[0]), True, np.float64)


def _check_factor_dtype(factor_dtype: Any) -> np.dtype:
    """``factor_dtype`` as float32 or float64, or a TypeError naming it."""
    if isinstance(factor_dtype, (bool, int, float, complex)) or factor_dtype is None:
        raise TypeError(f"factor_dtype must be numpy.float32 or numpy.float64, got "
                        f"{factor_dtype!r}")
    try:
        dt = np.dtype(factor_dtype)
    except TypeError as exc:
        raise TypeError(f"factor_dtype must be numpy.float32 or numpy.float64, got "
                        f"{factor_dtype!r}") from exc
    if dt not in FACTOR_DTYPES:
        raise TypeError(f"factor_dtype must be numpy.float32 or numpy.float64, got {dt}")
    return dt


def _dense_spd_blocks_ok(blocks: np.ndarray) -> np.ndarray:
    """Which dense blocks are numerically SPD (used only to name a failing block)."""
    ok = np.ones(blocks.shape[0], dtype=bool)
    for i, block in enumerate(blocks):
        try:
            L = np.linalg.cholesky(block)
        except np.linalg.LinAlgError:
            ok[i] = False
            continue
        ok[i] = not _bad_pivots(np.diagonal(L) ** 2, np.diagonal(block)).any()
    return ok


def zero_energy_defects(A: sp.csr_matrix, Z: np.ndarray) -> np.ndarray:
    """The componentwise defect ``max_i |A z|_i / (|A| |z|)_i`` of every column ``z`` of ``Z``.

    At most :data:`ddops.dd.kernel.KERNEL_RTOL` means that ``A`` annihilates ``z`` to
    rounding in every row.  Componentwise, not ``||A z|| / (||A||_1 ||z||)``: a
    nonsingular high-contrast matrix whose Dirichlet rows lie in a low coefficient
    (channels at contrast 1e8) has a tiny normwise defect for the constants, but its
    boundary rows do not annihilate them at all.  A column that passes here also passes
    the normwise test of :func:`ddops.dd.kernel.check_kernel` (``|| |A| |z| || <=
    ||A||_1 ||z||`` for a symmetric ``A``), so it is accepted there as ``kernel=``.  Rows
    where ``(|A| |z|)_i = 0`` (``z`` vanishes on their support) do not count.
    """
    Z = np.asarray(Z, dtype=np.float64)
    if Z.ndim == 1:
        Z = Z[:, None]
    absA = sp.csr_matrix((np.abs(A.data), A.indices, A.indptr), shape=A.shape)
    scale = absA @ np.abs(Z)
    residual = np.abs(A @ Z)
    ratio = np.divide(residual, scale, out=np.zeros_like(residual), where=scale > 0)
    return ratio.max(axis=0) if ratio.shape[0] else np.zeros(Z.shape[1])


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


def _singular_probe(A: sp.csr_matrix, null_space: Any) -> str | None:
    """The zero-energy test of a matrix given without ``kernel=``: which test vector
    (the constants, then the columns of ``null_space``) ``A`` annihilates, or None.

    Cheap (one product with ``A`` per vector) and one-sided: a kernel made of other
    vectors (a floating part of the domain) is found only by the coarse factorisation.
    """
    n = A.shape[0]
    probes, names = [np.ones((n, 1))], ["the constant vector"]
    if null_space is not None:
        Z = as_vectors(null_space, n, "null_space")
        probes.append(Z)
        names += [f"column {j} of null_space" for j in range(Z.shape[1])]
    defects = zero_energy_defects(A, np.hstack(probes))
    hit = np.flatnonzero(defects <= KERNEL_RTOL)
    if not hit.size:
        return None
    j = int(hit[0])
    return (f"{names[j]} (max_i |A z|_i / (|A| |z|)_i = {defects[j]:.1e} <= "
            f"{KERNEL_RTOL:g})")


# -- the two-level Schwarz preconditioner ------------------------------------------------------
class _SingularCoarse:
    """The error of a failed coarse factorisation, naming the dependent columns when it can."""

    def __init__(self, A: sp.csr_matrix, Phi: sp.csr_matrix, n0: int) -> None:
        self.A, self.Phi, self.n0 = A, Phi, n0

    def error(self) -> ValueError:
        from ..dd.gdsw import coarse_matrix_checked

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


class TwoLevelSchwarz(BackendLinearOperator):
    r"""Classical two-level overlapping Schwarz preconditioner ``M ~ A^{-1}``.

    .. math::

        M = \sum_{i=1}^N R_i^T W_i^{out} A_i^{-1} W_i^{in} R_i + \Phi A_0^{-1} \Phi^T,
        \qquad A_i = R_i A R_i^T, \quad A_0 = \Phi^T A \Phi,

    with ``(W_in, W_out) = (I, I)`` (``"additive"``), ``(I, D_i)``
    (``"restricted"``, RAS) or ``(D_i^{1/2}, D_i^{1/2})``
    (``"symmetric_restricted"``).  The coarse term is added in every variant
    except ``"hybrid"``, which applies it multiplicatively around the additive
    local sum ``M_1``: ``M = P_0 + (I - P_0 A) M_1 (I - A P_0)``,
    ``P_0 = Phi A_0^{-1} Phi^T``.
    A :class:`scipy.sparse.linalg.LinearOperator` with a true adjoint, usable
    as ``M=`` in :func:`scipy.sparse.linalg.cg` (symmetric variants) or
    :func:`~scipy.sparse.linalg.gmres` (any variant).

    Parameters
    ----------
    A : sparse matrix or array
        Symmetric positive definite ``num_dofs x num_dofs`` matrix (or positive
        semidefinite with ``kernel=``).  It is symmetrised as ``(A + A^T) / 2``
        after the symmetry check so that both local solvers see the same matrix.
        A :class:`~scipy.sparse.linalg.LinearOperator` is refused: the
        subdomain and coarse matrices are built from the entries.
    decomposition : Decomposition
        Overlapping decomposition (``R_i``, ``D_i``), e.g.
        :class:`~ddops.Decomposition1D`.
    coarse_basis : str, sparse matrix, array or None
        ``"auto"`` (default): the paper's ``"interface_hats"`` on 1D
        decompositions (:class:`~ddops.Decomposition1D`), ``"gdsw"`` on every
        decomposition with a non-overlapping ``owner`` (``from_matrix``,
        ``from_grid``), else ``"nicolaides"`` (:func:`ddops.dd.coarse.auto_coarse_basis`).
        A name from :data:`ddops.dd.coarse.ALL_COARSE_BASES` (the matrix bases
        are built from ``A`` and ``decomposition.owner``, see
        :func:`ddops.coarse_basis`), a user ``num_dofs x n0`` matrix Phi, or
        None for a one-level preconditioner.
    variant : {"additive", "restricted", "symmetric_restricted", "hybrid"}
        See :data:`VARIANTS`.  ``"restricted"`` is not symmetric: use GMRES.
        ``"hybrid"`` is symmetric (for CG) and costs two products with ``A``
        and two coarse solves per application; it usually needs fewer
        iterations than ``"additive"`` with the same coarse space.
    coarse : bool
        False gives the one-level preconditioner whatever ``coarse_basis`` is.
    coarse_size : int, optional
        Number of coarse functions for ``coarse_basis="grid_hats"``.
    null_space : array (num_dofs x k), optional
        Near-null space of the problem (constants by default; rigid body modes
        for elasticity): used by the coarse bases built from one (``"nicolaides"``,
        ``"pou"`` and the matrix bases) and by ``local_solver="amg"``; accepted and
        not used otherwise (also with ``coarse_basis=None``), so a loop over
        coarse spaces passes the same arguments to all.
    kernel : array (num_dofs x k), optional
        The exact kernel of a singular positive semidefinite ``A`` (constants
        for a pure-Neumann Laplacian, the rigid body modes of a floating elastic
        body), as PETSc's ``MatNullSpace``: checked (``A`` must annihilate it,
        :func:`ddops.dd.kernel.check_kernel`), used as ``null_space`` when none
        is given, and the coarse problem is kept nonsingular by dropping one
        coarse column per dimension of ``{c : Phi c in ker A}``
        (:func:`ddops.dd.kernel.coarse_kernel_columns`; the count is
        ``coarse_stats["kernel_dropped"]``).  The preconditioner is then
        ``P M P`` with ``P = I - Q Q^T`` the projection off the kernel:
        symmetric and positive definite on ``range(A)``, so CG converges for
        every consistent right-hand side (orthogonal to the kernel) to the
        solution orthogonal to the kernel (from ``x0 = 0``).  A residual with a
        kernel component (an inconsistent right-hand side, on which a Krylov
        method stalls) gives a ``RuntimeWarning`` once (checked on single vectors,
        as Krylov methods apply ``M``); :meth:`remove_kernel` makes a right-hand
        side consistent.
    dtype : {numpy.float64, numpy.float32}, optional
        Type of the products; default float32 for a float32 ``A``, else
        float64.  The coarse factorisation is always computed in float64, the
        local ones in ``factor_dtype``.
    local_solver : {"auto", "dense", "sparse", "superlu", "pardiso", "amg"}
        ``"dense"``: the padded blocks ``(N, p, p)`` are Cholesky-factorised
        and inverted in one batched call and applied with one batched GEMM.
        The others solve with the block-diagonal matrix ``diag(A_1, ..., A_N)``
        through :func:`ddops.linalg.local_solvers.factorize_blocks`:
        ``"superlu"`` (alias ``"sparse"``) factorises it with SuperLU in chunks of
        consecutive subdomains of about :data:`LOCAL_CHUNK_ROWS` rows (one solve per
        chunk and application); ``"pardiso"`` with MKL PARDISO's supernodal
        Cholesky, all subdomains in one factorisation (extra ``ddops[solvers]``; in
        3D half of SuperLU's fill and a 2-3x faster solve); ``"amg"`` is inexact: one
        aggregation-AMG V-cycle (pyamg, plain aggregation) over all subdomain matrices
        at once with symmetric Gauss-Seidel smoothing, near-null space ``null_space``
        restricted to the subdomains (extra ``ddops[precond]``).  A fixed number of V-cycles
        with a smoother and its adjoint is a fixed SPD operator, so ``M`` stays
        symmetric positive definite for CG (with more iterations than the exact
        solvers).  ``"auto"`` takes ``"dense"`` when ``N p^2`` float64 values fit in
        :data:`DENSE_LOCAL_LIMIT_BYTES` (and its set-up in memory), else
        ``"pardiso"`` when it is installed, else ``"superlu"``.  The exact solvers
        agree to rounding.  An explicit ``"dense"`` whose set-up (about ``4 N p^2``
        float64) would not fit in memory is refused before allocating.
    factor_dtype : {numpy.float64, numpy.float32}
        Precision of the local solves ``A_i^{-1}`` (a mixed-precision local
        solver: single-precision subdomain factorisations inside a
        double-precision Krylov method).  ``float32``: the sparse local factors
        are computed by SuperLU in single precision (``sgstrf``) and the dense
        inverses are stored in single precision; each application casts the
        stacked local residual to float32, solves and casts the result back.
        The restrictions, the coarse solve and the Krylov method stay in
        ``dtype``.  The sparse factors take 8 instead of 12 bytes per stored
        nonzero (the row indices stay 4 bytes) and their triangular solves run
        about 1.2-1.3 x faster on 2D Poisson subdomains (they are bound by
        SuperLU's indexed loops more than by memory traffic).  A float32
        local solve is accurate to about ``cond(A_i) * 6e-8`` instead of
        ``cond(A_i) * 1e-16``, so ``M`` is symmetric and linear only to that
        level: CG took the same iterations (at most 2 more) on Poisson, P1 and
        elasticity and up to 1% more on high contrast (see "Mixed-precision
        local solves" in the preconditioning guide); keep float64 for blocks
        that stay ill-conditioned after diagonal scaling.  Default float64,
        bit-identical to a preconditioner built without the option.  The
        strings ``"float32"`` and ``"float64"`` are accepted.
    backend : {"numpy", "cupy"}
        Where the products run.  With ``"cupy"`` the factorisations are
        computed on the host and the dense local inverses and ``A_0^{-1}``
        are moved to the GPU (dense local solver only); inputs and outputs
        are CuPy arrays, for :mod:`cupyx.scipy.sparse.linalg` solvers.
    coarse_options : dict, optional
        Options of the adaptive coarse bases, passed to
        :func:`ddops.coarse_basis`: ``threshold``, ``max_per_component`` and
        ``neumann`` (one local Neumann matrix per subdomain) for ``"agdsw"``;
        ``threshold``, ``max_per_subdomain`` and ``neumann`` for ``"geneo"``.
    threads : int, optional
        Threads of the set-up and of every application: BLAS (the dense local
        solves and eigenproblems), MKL (PARDISO's factorisations and solves) and
        the OpenMP runtimes, through
        :func:`ddops.linalg.local_solvers.thread_limit`.  SuperLU and pyamg are
        single-threaded.  None (default) leaves the process's settings, including
        a :func:`threadpoolctl.threadpool_limits` the caller entered.

    Attributes
    ----------
    setup_seconds : float
        Wall time of the set-up (validation, extraction, factorisations).
    local_setup_seconds, coarse_setup_seconds : float
        The parts of it spent on the local and on the coarse factorisation.
    num_subdomains : int
        Number of subdomains ``N``.
    coarse_dim : int
        Coarse dimension ``n0`` (0 for one level).
    local_solver : str
        The kind of local solver in use, ``"dense"`` or ``"sparse"``.
    sparse_solver : str or None
        The sparse local solver, ``"superlu"``, ``"pardiso"`` or ``"amg"`` (None for
        ``"dense"``).
    factor_dtype : numpy.dtype
        Precision of the local solves.
    coarse_solver : str or None
        ``"dense"`` or ``"sparse"`` (None for one level).
    coarse_info : AdaptiveInfo, GDSWInfo or None
        What the coarse-basis builder reported (for a basis built here by name).
    coarse_stats : dict
        ``coarse_info.stats`` for the adaptive bases (coarse dimension, functions
        kept and dropped, eigenproblem time, ...), and ``"kernel_dropped"`` (the
        columns dropped for ``kernel=``) for every basis.
    kernel : numpy.ndarray or None
        Orthonormal basis ``Q`` of the given kernel.

    Raises
    ------
    ValueError
        Non-square, non-symmetric or non-finite ``A``; a size different from
        ``decomposition.num_dofs``; a singular (or indefinite) subdomain or
        coarse matrix; an unknown variant, coarse basis or solver name.  With
        the sparse local solver on more than :data:`EXACT_PIVOT_CHECK_ROWS`
        stacked rows, subdomain matrices are checked by a one-solve test (see
        :func:`ddops.linalg.local_solvers.check_blocks_by_one_solve`) that can miss a
        weakly indefinite block.

    Examples
    --------
    >>> import numpy as np
    >>> import scipy.sparse.linalg as spla
    >>> import ddops
    >>> from ddops.precond.schwarz import TwoLevelSchwarz
    >>> A = ddops.poisson_1d(1024)
    >>> M = TwoLevelSchwarz(A, ddops.Decomposition1D(1024, 32, overlap=2))
    >>> x, info = spla.cg(A, A @ np.ones(A.shape[0]), rtol=1e-8, M=M)
    """

    def __init__(
        self,
        A: Any,
        decomposition: Decomposition,
        coarse_basis: Any = "auto",
        variant: str = "additive",
        coarse: bool = True,
        coarse_size: int | None = None,
        dtype: Any = None,
        *,
        local_solver: str = "auto",
        backend: str = "numpy",
        null_space: Any = None,
        factor_dtype: Any = np.float64,
        coarse_options: dict | None = None,
        kernel: Any = None,
        threads: int | None = None,
    ) -> None:
        self.threads = check_threads(threads)
        # the whole set-up (factorisations, eigenproblems, BLAS) under one limit; mkl_rt is
        # loaded first so that PARDISO's threads are covered too
        with thread_limit(self.threads):
            self._setup(A, decomposition, coarse_basis, variant, coarse, coarse_size, dtype,
                        local_solver, backend, null_space, factor_dtype, coarse_options,
                        kernel)
        # every application under the same limit: a controller that found its libraries once
        # costs tens of microseconds per product instead of a scan of the process
        self._thread_pools = None if self.threads is None else ThreadpoolController()

    def _setup(self, A: Any, decomposition: Decomposition, coarse_basis: Any, variant: str,
               coarse: bool, coarse_size: int | None, dtype: Any, local_solver: str,
               backend: str, null_space: Any, factor_dtype: Any, coarse_options: dict | None,
               kernel: Any) -> None:
        start = time.perf_counter()
        if not isinstance(decomposition, Decomposition):
            raise TypeError("decomposition must be a ddops Decomposition, got "
                            f"{type(decomposition).__name__}")
        check_choice("variant", variant, VARIANTS)
        check_choice("local_solver", local_solver, LOCAL_SOLVERS)
        if not isinstance(coarse, (bool, np.bool_)):
            raise TypeError(f"coarse must be a bool, got {type(coarse).__name__}")
        check_backend(backend)
        self.factor_dtype = _check_factor_dtype(factor_dtype)
        A, a_dtype = _check_matrix(A)
        d = decomposition
        if A.shape[0] != d.num_dofs:
            raise ValueError(f"A has size {A.shape[0]} but the decomposition has "
                             f"num_dofs={d.num_dofs}")
        if not _check_symmetric(A):  # (A + A^T) / 2 is A itself when A is exactly symmetric
            A = ((A + A.T) * 0.5).tocsr()
        # a singular A with a known kernel: the kernel is also the coarse space's null space
        # unless another one is given (rigid body modes of a floating body are both)
        Q = None if kernel is None else check_kernel(kernel, A)
        if null_space is None and kernel is not None:
            null_space = kernel
        coarse_basis = resolve_coarse_kind(coarse_basis, d, matrix=True)
        if kernel is None:
            self._check_not_singular(A, coarse and isinstance(coarse_basis, str), null_space)
        if dtype is None:
            dtype = np.float32 if a_dtype == np.float32 else np.float64
        dt = check_dtype(dtype)
        super().__init__(d.num_dofs, dt, backend)

        self.decomposition = d
        self.variant = variant
        self.num_subdomains = d.num_subdomains
        basis_start = time.perf_counter()
        try:
            Phi, self.coarse_info = self._coarse_matrix(d, coarse_basis, coarse, coarse_size, A,
                                                        null_space, coarse_options)
        except ValueError as exc:
            if Q is None:
                raise
            raise ValueError(f"{exc} (A is singular, kernel=: a local problem of the coarse "
                             "space that holds a whole kernel vector is singular too; use more "
                             "subdomains or another coarse space)") from exc
        self.coarse_stats = dict(getattr(self.coarse_info, "stats", None) or {})
        if Phi is not None and Phi.shape[1] == 0:
            # GenEO with no eigenvalue below its threshold: the one-level method meets the
            # bound already
            warn(f"coarse_basis={coarse_basis!r} selected no coarse function (no eigenvalue "
                 "below the threshold in any subdomain); the preconditioner is one-level",
                 RuntimeWarning)
            Phi = None
        self.coarse_stats["kernel_dropped"] = 0
        if Q is not None and Phi is not None:
            # ground the coarse problem: drop one column per dimension of the coarse kernel
            Phi, self.coarse_stats["kernel_dropped"] = ground_basis(Phi, Q)
        self.kernel = Q
        self._kernel = None if Q is None else asarray(Q.astype(dt), backend=backend)
        self._largest_residual = 0.0
        self._warned_inconsistent = False
        self.coarse_basis_seconds = time.perf_counter() - basis_start
        self.coarse_basis_name = None if Phi is None else (
            coarse_basis if isinstance(coarse_basis, str) else "custom")

        # local solver: the memory rule of DENSE_LOCAL_LIMIT_BYTES
        N, p = d.num_subdomains, d.max_size
        sparse_solver = {"sparse": "superlu"}.get(local_solver, local_solver)
        if local_solver == "auto":
            # dense when small (always on the GPU, the only local solver there), and never when
            # its set-up (about 4 N p^2) would not fit in memory
            small = N * p * p * 8 <= DENSE_LOCAL_LIMIT_BYTES or backend == "cupy"
            dense = small and fits_in_memory(4 * N * p * p * 8)
            local_solver = "dense" if dense else "sparse"
            sparse_solver = default_exact_solver()
        elif local_solver != "dense":
            local_solver = "sparse"
        if local_solver == "dense":
            sparse_solver = None
        elif sparse_solver == "amg" and self.factor_dtype != np.float64:
            raise ValueError("factor_dtype=float32 is not available with local_solver='amg' "
                             "(the V-cycle runs in float64)")
        if backend == "cupy" and local_solver != "dense":
            raise ValueError("backend='cupy' supports only local_solver='dense' (the padded "
                             f"inverses need {N * p * p * 8 / 2**20:.1f} MiB)")
        if local_solver == "dense":  # the padded blocks, their factors and inverses
            check_memory(f"TwoLevelSchwarz(local_solver='dense') on {N} subdomains of up to {p} "
                         "unknowns", 4 * N * p * p * 8, "use local_solver='sparse'")
        self.local_solver = local_solver
        self.sparse_solver = sparse_solver
        # the coarse matrix above COARSE_DENSE_MAX: PARDISO when installed, unless SuperLU
        # was asked for by name
        self.coarse_factorization = ("pardiso" if pardiso_available() and sparse_solver
                                     != "superlu" else "superlu")
        padded = local_solver == "dense"

        # S_in / S_out: the weighted stacked restrictions of the chosen variant
        w_in, w_out = {"additive": ("none", "none"), "restricted": ("none", "full"),
                       "symmetric_restricted": ("sqrt", "sqrt"),
                       "hybrid": ("none", "none")}[variant]
        host_in = d.stacked_restriction(w_in, padded=padded, dtype=dt)
        # one matrix when both sides carry the same weights (every symmetric variant)
        host_out = host_in if w_out == w_in else d.stacked_restriction(w_out, padded=padded,
                                                                       dtype=dt)
        self._S_in = asarray(host_in, backend=backend)
        self._S_out = self._S_in if host_out is host_in else asarray(host_out, backend=backend)
        self._S_inT, self._S_outT = self._transposes(host_in, host_out, self._S_in,
                                                     self._S_out)

        local_start = time.perf_counter()
        if padded:
            self._factor_dense(self._local_blocks(A, d, padded), d)
        else:
            unweighted = host_in if (w_in == "none" and dt == np.float64) else None
            self._factor_sparse(A, d, unweighted, null_space)
        self.local_setup_seconds = time.perf_counter() - local_start

        coarse_start = time.perf_counter()
        self._factor_coarse(A, Phi)
        self.coarse_setup_seconds = time.perf_counter() - coarse_start
        self.setup_seconds = time.perf_counter() - start

    # -- set-up ----------------------------------------------------------------------------
    @staticmethod
    def _check_not_singular(A: sp.csr_matrix, named_coarse: bool, null_space: Any) -> None:
        """A singular ``A`` without ``kernel=``: refused before a coarse space by name (it
        holds the constants or the null space, so ``A_0`` would be singular too), a warning
        otherwise (the one-level operator exists, but CG needs a consistent right-hand side
        and stalls on any other)."""
        found = _singular_probe(A, null_space if named_coarse else None)
        if found is None:
            return
        what = f"A is singular: it annihilates {found}"
        if named_coarse:
            detail = (f"it annihilates {found}, so the coarse matrix A_0 = Phi^T A Phi "
                      "would be singular because A is singular")
            raise SingularMatrixError(f"A is singular; {SINGULAR_HINT}: {detail}", detail)
        warn(f"{what}; {SINGULAR_HINT}, which makes the preconditioner project it out "
             "(without it CG converges only for a right-hand side orthogonal to the kernel)",
             RuntimeWarning)

    @staticmethod
    def _coarse_matrix(d: Decomposition, coarse_basis: Any, coarse: bool,
                       coarse_size: int | None, A: sp.csr_matrix, null_space: Any,
                       options: dict | None) -> tuple[sp.csr_matrix | None, Any]:
        is_grid = isinstance(coarse_basis, str) and coarse_basis == "grid_hats"
        if coarse_size is not None and not is_grid:
            raise ValueError("coarse_size is only used with coarse_basis='grid_hats'")
        if options is not None:
            if not isinstance(options, dict):
                raise TypeError("coarse_options must be a dict of keyword arguments of "
                                f"ddops.coarse_basis, got {type(options).__name__}")
            allowed = ADAPTIVE_OPTIONS.get(coarse_basis, ()) if isinstance(
                coarse_basis, str) else ()
            unknown = sorted(set(options) - set(allowed))
            if unknown:
                raise ValueError(f"coarse_options: {unknown} not accepted with coarse_basis="
                                 f"{coarse_basis!r} (accepted: {list(allowed)})")
        if not coarse or coarse_basis is None:
            return None, None
        if isinstance(coarse_basis, str):
            return build_coarse_basis(d, coarse_basis, size=coarse_size, A=A,
                                      null_space=null_space, return_info=True,
                                      **(options or {}))
        return validate_coarse_matrix(coarse_basis, d.num_dofs), None

    def _transposes(self, host_in, host_out, S_in, S_out):
        """``S_in^T`` and ``S_out^T``: transposed views on the host (CSC, no copy; the
        product with a CSC matrix costs the same as with CSR), CSR copies on the GPU."""
        if self.backend == "numpy":
            return S_in.T, S_out.T
        S_inT = asarray(host_in.T.tocsr(), backend=self.backend)
        return S_inT, (S_inT if host_out is host_in else
                       asarray(host_out.T.tocsr(), backend=self.backend))

    @staticmethod
    def _local_blocks(A: sp.csr_matrix, d: Decomposition, padded: bool) -> sp.coo_matrix:
        """All ``A_i`` at once: the diagonal blocks of ``S A S^T`` (``S`` Boolean, stacked)."""
        S = d.stacked_restriction("none", padded=padded, dtype=np.float64)
        C = (S @ A @ S.T).tocoo()
        if padded:
            block_row, block_col = C.row // d.max_size, C.col // d.max_size
        else:
            block_row = d._subdomain_of_entry[C.row]
            block_col = d._subdomain_of_entry[C.col]
        # S A S^T also couples overlapping subdomains; only the diagonal blocks are A_i
        keep = block_row == block_col
        return sp.coo_matrix((C.data[keep], (C.row[keep], C.col[keep])), shape=C.shape)

    def _singular_block_error(self, i: int, d: Decomposition) -> ValueError:
        hint = ("; the Schwarz preconditioner needs a symmetric positive definite A"
                if self.kernel is None else
                ": A is singular (kernel=) and this subdomain holds the whole support of a "
                "kernel vector (one subdomain for everything, or a floating component inside "
                "a subdomain); use more subdomains, or ground the problem")
        # subdomain_matrix_name already names the subdomain; the size follows it once
        return ValueError(f"{subdomain_matrix_name(i)}, with {int(d.sizes[i])} unknowns, is "
                          f"singular or not positive definite{hint}")

    def _factor_dense(self, blocks: sp.coo_matrix, d: Decomposition) -> None:
        N, p = d.num_subdomains, d.max_size
        dense = np.zeros((N, p, p))
        dense[blocks.row // p, blocks.row % p, blocks.col % p] = blocks.data
        # identity on padding rows keeps every padded block nonsingular; S has empty
        # rows there, so the padding never reaches the result
        pad_block, pad_pos = np.nonzero(np.arange(p)[None, :] >= d.sizes[:, None])
        dense[pad_block, pad_pos, pad_pos] = 1.0
        try:
            L = np.linalg.cholesky(dense)
            bad = _bad_pivots(np.diagonal(L, axis1=1, axis2=2) ** 2,
                              np.diagonal(dense, axis1=1, axis2=2)).any(axis=1)
        except np.linalg.LinAlgError:
            bad = ~_dense_spd_blocks_ok(dense)
        if bad.any():
            raise self._singular_block_error(int(np.flatnonzero(bad)[0]), d)
        # explicit inverses A_i^{-1} = L^{-T} L^{-1}: one batched GEMM per application
        Linv = np.linalg.inv(L)
        inv = np.matmul(Linv.transpose(0, 2, 1), Linv)
        inv = 0.5 * (inv + inv.transpose(0, 2, 1))  # exactly symmetric, so M^T = M bitwise
        inv_dtype = np.float32 if self.factor_dtype == np.float32 else self.dtype
        self._local_inv = self.xp.asarray(inv.astype(inv_dtype))
        self._local_lu = self._local_solver = None

    def _factor_sparse(self, A: sp.csr_matrix, d: Decomposition,
                       S: sp.csr_matrix | None = None, null_space: Any = None) -> None:
        """Factorise ``diag(A_1, ..., A_N)`` with the sparse solver ``self.sparse_solver``.

        The blocks are extracted at once (one sparse triple product).  (Extracting them
        chunk by chunk holds less at a time but interleaves many mid-sized temporaries
        with the factors in the heap: at 10^6 unknowns the resident size then stayed
        350 MiB higher.)
        """
        if S is None:
            S = d.stacked_restriction("none", padded=False, dtype=np.float64)
        C = (S @ A @ S.T).tocoo()
        block = d._subdomain_of_entry
        # S A S^T also couples overlapping subdomains; only the diagonal blocks are A_i
        same = block[C.row] == block[C.col]
        K = sp.csr_matrix((C.data[same], (C.row[same], C.col[same])), shape=C.shape)
        del C, same
        near_null = None
        if self.sparse_solver == "amg" and null_space is not None:
            Z = np.asarray(null_space, dtype=np.float64)
            near_null = S @ (Z.reshape(-1, 1) if Z.ndim == 1 else Z)
        try:
            solver = factorize_blocks(K, d.offsets, self.sparse_solver,
                                      dtype=self.factor_dtype,
                                      exact_check=K.shape[0] <= EXACT_PIVOT_CHECK_ROWS,
                                      near_null=near_null, chunk_rows=LOCAL_CHUNK_ROWS)
        except SingularBlockError as exc:
            raise self._singular_block_error(exc.block, d) from None
        self._local_solver = solver
        # the SuperLU factors per chunk, as before (inspected by tests and benchmarks)
        self._local_lu = getattr(solver, "factors", None)
        self._local_bounds = getattr(solver, "bounds", None)
        self._local_inv = None

    def _factor_coarse(self, A: sp.csr_matrix, Phi: sp.csr_matrix | None) -> None:
        self._coarse_matrix_host = Phi
        self.coarse_dim = 0 if Phi is None else int(Phi.shape[1])
        self.coarse_solver = None
        if Phi is None:
            return
        rows = getattr(self.coarse_info, "harmonic_interface", None)
        if rows is not None and np.all(np.diff(rows) > 0):
            # discrete-harmonic columns: A Phi vanishes off the interface up to rounding, so
            # A_0 = Phi_G^T (A Phi)_G, a product with the few interface rows of Phi instead
            # of all of them (3D elasticity: 13 x faster), and A Phi is kept on those rows
            APG = (A[rows] @ Phi).tocsr()
            A0 = (Phi[rows].T @ APG).tocsr()
            counts = np.zeros(Phi.shape[0], dtype=np.int64)
            counts[rows] = np.diff(APG.indptr)
            indptr = np.concatenate([[0], np.cumsum(counts)]).astype(APG.indptr.dtype)
            AP = sp.csr_matrix((APG.data, APG.indices, indptr), shape=Phi.shape)
            del APG
        else:
            AP = (A @ Phi).tocsr()
            A0 = (Phi.T @ AP).tocsr()
        A0 = (A0 + A0.T) * 0.5
        singular = _SingularCoarse(A, Phi, self.coarse_dim)
        self._AP = self._APT = None
        if self.variant == "hybrid":
            # A Phi, kept for the hybrid form in place of A: its two products with A
            # (A X0 = (A Phi) c and Phi^T A Y = (A Phi)^T Y) touch about half the nonzeros
            self._AP = asarray(AP.astype(self.dtype, copy=False), backend=self.backend)
            self._APT = self._AP.T if self.backend == "numpy" else asarray(
                AP.T.tocsr().astype(self.dtype, copy=False), backend=self.backend)
        del AP
        # no copy when Phi already has the product dtype (it is float64 CSR from the basis)
        self._Phi = asarray(Phi.astype(self.dtype, copy=False), backend=self.backend)
        # Phi^T as a transposed view on the host (no copy), a CSR copy on the GPU
        self._PhiT = self._Phi.T if self.backend == "numpy" else asarray(
            Phi.T.tocsr().astype(self.dtype, copy=False), backend=self.backend)
        if self.coarse_dim <= COARSE_DENSE_MAX or self.backend == "cupy":
            A0d = A0.toarray()
            try:
                c, lower = sla.cho_factor(A0d, lower=True, check_finite=False)
            except np.linalg.LinAlgError:
                raise singular.error() from None
            if _bad_pivots(np.diagonal(c) ** 2, np.diagonal(A0d)).any():
                raise singular.error()
            self.coarse_solver = "dense"
            self._coarse_cho = (c, lower)
            if self.backend == "cupy":  # no cho_solve on the GPU: ship A_0^{-1}
                inv = sla.cho_solve((c, lower), np.eye(self.coarse_dim), check_finite=False)
                self._coarse_inv = self.xp.asarray(inv.astype(self.dtype))
        else:
            self.coarse_solver = "sparse"
            if self.coarse_factorization == "pardiso":
                try:
                    self._coarse_lu = factorize_blocks(A0, [0, self.coarse_dim], "pardiso")
                except SingularBlockError:
                    raise singular.error() from None
                return
            lu, bad = _sparse_spd_factor(A0)
            if lu is None or bad.size:
                raise singular.error()
            self._coarse_lu = lu

    @property
    def factor_nnz(self) -> int:
        """Stored nonzeros of the sparse local and coarse factors (SuperLU: ``L`` and ``U``
        together; PARDISO: its ``L``; ``"amg"``: the matrices of the hierarchy).

        0 for the dense solvers, whose padded inverses are ordinary numpy arrays.
        """
        local = 0 if self._local_solver is None else int(self._local_solver.nnz)
        coarse = int(self._coarse_lu.nnz) if self.coarse_solver == "sparse" else 0
        return local + coarse

    def _coarse_factor_bytes(self) -> int:
        """Bytes of the sparse coarse factor (0 for the dense one or one level)."""
        if self.coarse_solver != "sparse":
            return 0
        if isinstance(self._coarse_lu, BlockSolver):  # PARDISO: what it reports
            return int(self._coarse_lu.nbytes)
        return int(self._coarse_lu.nnz) * 12

    @property
    def factor_bytes(self) -> int:
        """Bytes of the sparse factors held outside the Python heap (SuperLU, PARDISO):
        what :mod:`tracemalloc` does not see.  SuperLU: per stored nonzero its value and
        a 4-byte row index (the local factors in ``factor_dtype``, the coarse one in
        float64); PARDISO: the memory it reports for the factorisation.  The ``"amg"``
        hierarchy is numpy and scipy arrays (see :attr:`stats`), 0 here."""
        local = self._local_solver
        local_bytes = 0 if local is None or local.name == "amg" else int(local.nbytes)
        return local_bytes + self._coarse_factor_bytes()

    @property
    def stats(self) -> dict:
        """Where the set-up time and the held memory go.

        Returns
        -------
        dict
            ``local_solver``, ``sparse_solver``, ``coarse_dim``; seconds:
            ``setup_seconds``, ``coarse_basis_seconds``, ``local_setup_seconds``,
            ``coarse_setup_seconds``; bytes held: ``local_factor_bytes`` (the sparse
            local factors, the ``"amg"`` hierarchy or the dense inverses),
            ``coarse_factor_bytes`` (dense Cholesky factor or SuperLU factors of
            ``A_0``), ``coarse_basis_bytes`` (``Phi``, and ``A Phi`` for the hybrid
            variant), ``restriction_bytes`` (the stacked restrictions ``S_in``,
            ``S_out`` and their transposes when they are copies) and
            ``total_bytes``, their sum; ``factor_nnz``.
        """
        def sparse_bytes(M):
            if M is None:
                return 0
            parts = [getattr(M, name, None) for name in ("data", "indices", "indptr")]
            return sum(int(p.nbytes) for p in parts if p is not None)

        if self._local_solver is not None:
            local = int(self._local_solver.nbytes)
        else:
            local = int(self._local_inv.nbytes) if self._local_inv is not None else 0
        if self.coarse_solver == "dense":
            coarse = int(self._coarse_cho[0].nbytes)
            coarse += int(self._coarse_inv.nbytes) if self.backend == "cupy" else 0
        elif self.coarse_solver == "sparse":
            coarse = self._coarse_factor_bytes()
        else:
            coarse = 0
        basis = 0
        if self.coarse_dim:
            basis = sparse_bytes(self._Phi) + (sparse_bytes(self._AP) if self._AP is not None
                                               else 0)
            if self.backend != "numpy":  # the transposed copies on the GPU
                basis += sparse_bytes(self._PhiT) + (sparse_bytes(self._APT)
                                                     if self._APT is not None else 0)
        mats = {id(m): m for m in (self._S_in, self._S_out)}
        if self.backend != "numpy":
            mats.update({id(m): m for m in (self._S_inT, self._S_outT)})
        restriction = sum(sparse_bytes(m) for m in mats.values())
        return {
            "local_solver": self.local_solver, "sparse_solver": self.sparse_solver,
            "coarse_dim": self.coarse_dim, "setup_seconds": self.setup_seconds,
            "coarse_basis_seconds": self.coarse_basis_seconds,
            "local_setup_seconds": self.local_setup_seconds,
            "coarse_setup_seconds": self.coarse_setup_seconds,
            "local_factor_bytes": local, "coarse_factor_bytes": coarse,
            "coarse_basis_bytes": basis, "restriction_bytes": restriction,
            "total_bytes": local + coarse + basis + restriction,
            "factor_nnz": self.factor_nnz,
        }

    # -- application -----------------------------------------------------------------------
    def _apply(self, X: Any, adjoint: bool) -> Any:
        if self._thread_pools is None:
            return self._apply_unlimited(X, adjoint)
        with self._thread_pools.limit(limits=self.threads):
            return self._apply_unlimited(X, adjoint)

    def _apply_unlimited(self, X: Any, adjoint: bool) -> Any:
        if self._kernel is None:
            return self._apply_spd(X, adjoint)
        # P M P with P = I - Q Q^T: symmetric, positive definite on range(A) = ker(A)^perp
        if X.shape[1] == 1:  # a Krylov residual (blocks, e.g. to_dense, are not checked)
            self._check_consistent(X)
        Y = self._apply_spd(remove_kernel(X, self._kernel), adjoint)
        return remove_kernel(Y, self._kernel)

    def _check_consistent(self, X: Any) -> None:
        """Warn once when a residual has a kernel component (an inconsistent right-hand side).

        ``Q^T r = Q^T b`` for every residual ``r = b - A x`` of a symmetric ``A``, so a
        kernel component above :data:`~ddops.dd.kernel.KERNEL_RHS_RTOL` of the largest
        residual seen comes from ``b`` and no iteration can remove it.
        """
        xp = self.xp
        norms = xp.linalg.norm(X, axis=0)
        along = xp.linalg.norm(self._kernel.T @ X, axis=0)
        self._largest_residual = max(self._largest_residual, float(norms.max()))
        worst = float(along.max())
        if not self._warned_inconsistent and worst > KERNEL_RHS_RTOL * self._largest_residual:
            self._warned_inconsistent = True
            warn(
                f"the residual has a component of relative size "
                f"{worst / max(float(norms.max()), 1e-300):.2e} along the kernel of A: the "
                "right-hand side is inconsistent (not orthogonal to the kernel), so a Krylov "
                "method cannot converge; solve with b = M.remove_kernel(b) (the least-squares "
                "right-hand side) instead", RuntimeWarning)

    def remove_kernel(self, b: Any) -> Any:
        """``b`` without its components along the kernel (``kernel=``) of ``A``.

        ``b - Q Q^T b`` with ``Q`` an orthonormal kernel basis: the consistent right-hand
        side closest to ``b``, whose solutions are the least-squares solutions of
        ``A x = b``.  Like PETSc's ``MatNullSpaceRemove``.  ``b`` itself without a kernel.
        """
        if self._kernel is None:
            return b
        xp = self.xp
        B = xp.asarray(b)
        if B.shape[0] != self.shape[0] or B.ndim not in (1, 2):
            raise ValueError(f"b must have shape ({self.shape[0]},) or ({self.shape[0]}, k), "
                             f"got {B.shape}")
        Q = self._kernel.astype(B.dtype) if B.dtype.kind == "f" else self._kernel
        return remove_kernel(B, Q)

    def _apply_spd(self, X: Any, adjoint: bool) -> Any:
        xp = self.xp
        if self.variant == "hybrid" and self.coarse_dim:
            # hybrid: X0 = P0 X;  Y = M1 (X - A X0);  M X = X0 + Y - P0 A Y  (symmetric),
            # with X0 = Phi c1 and P0 A Y = Phi c2:  M X = Y + Phi (c1 - c2), where
            # c1 = A0^{-1} Phi^T X, Y = M1 (X - (A Phi) c1), c2 = A0^{-1} (A Phi)^T Y
            c1 = self._coarse_solve(self._PhiT @ X, adjoint)
            Y = self._local(X - self._AP @ c1, adjoint)
            c2 = self._coarse_solve(self._APT @ Y, adjoint)
            return xp.asarray(Y + self._Phi @ (c1 - c2), dtype=self.dtype)
        out = self._local(X, adjoint)
        if self.coarse_dim:
            out = out + self._coarse(X, adjoint)
        return xp.asarray(out, dtype=self.dtype)

    def _local(self, X: Any, adjoint: bool) -> Any:
        """The one-level sum ``sum_i R_i^T W_out A_i^{-1} W_in R_i X`` (or its adjoint)."""
        xp = self.xp
        S_in, S_outT = (self._S_out, self._S_inT) if adjoint else (self._S_in, self._S_outT)
        Xl = S_in @ X
        if self._local_inv is not None:
            N, p = self.decomposition.num_subdomains, self.decomposition.max_size
            B = X.shape[1]
            # A_i^{-1} is stored exactly symmetric, so the adjoint uses the same blocks
            Xl = Xl.reshape(N, p, B)
            if self._local_inv.dtype != Xl.dtype:  # float32 inverses: cast in, GEMM, cast back
                Xl = Xl.astype(self._local_inv.dtype)
            Yl = xp.matmul(self._local_inv, Xl).reshape(N * p, B)
            Yl = xp.asarray(Yl, dtype=self.dtype)
        else:
            # float32 factors: the solver casts the residual to float32 and returns float64
            Yl = self._local_solver.solve(Xl, trans="T" if adjoint else "N")
            if Yl.dtype != self.dtype:
                Yl = Yl.astype(self.dtype)
        return S_outT @ Yl

    def _coarse(self, X: Any, adjoint: bool) -> Any:
        """The coarse correction ``Phi A_0^{-1} Phi^T X``."""
        return self._Phi @ self._coarse_solve(self._PhiT @ X, adjoint)

    def _coarse_solve(self, C: Any, adjoint: bool) -> Any:
        """``A_0^{-1} C`` (``A_0^{-T}`` for the adjoint) in the product dtype."""
        if self.coarse_solver == "sparse":
            Y0 = self._coarse_lu.solve(np.asarray(C, dtype=np.float64),
                                       trans="T" if adjoint else "N")
        elif self.backend == "cupy":
            Y0 = self._coarse_inv @ C
        else:
            Y0 = sla.cho_solve(self._coarse_cho, np.asarray(C, dtype=np.float64),
                               check_finite=False)
        return self.xp.asarray(Y0, dtype=self.dtype)

    @property
    def coarse_matrix(self) -> sp.csr_matrix | None:
        """The coarse interpolation Phi (scipy CSR, ``num_dofs x n0``), or None."""
        return self._coarse_matrix_host

    def __repr__(self) -> str:
        return (f"TwoLevelSchwarz(n={self.shape[0]}, N={self.num_subdomains}, "
                f"variant={self.variant!r}, coarse_basis={self.coarse_basis_name!r}, "
                f"coarse_dim={self.coarse_dim}, local_solver={self.local_solver!r}, "
                f"dtype={self.dtype}, factor_dtype={self.factor_dtype}, "
                f"backend={self.backend!r})")


# -- Jacobi --------------------------------------------------------------------------------------
class JacobiPreconditioner(BackendLinearOperator):
    """The diagonal preconditioner ``M = diag(A)^{-1}`` (built by :func:`jacobi`)."""

    def __init__(self, inverse_diagonal: np.ndarray, dtype: Any, backend: str = "numpy") -> None:
        super().__init__(inverse_diagonal.size, dtype, backend)
        self.inverse_diagonal = self.xp.asarray(inverse_diagonal, dtype=self.dtype)
        self.setup_seconds = 0.0

    def _apply(self, X: Any, adjoint: bool) -> Any:
        return self.inverse_diagonal[:, None] * X


def jacobi(A: Any, dtype: Any = None, backend: str = "numpy") -> JacobiPreconditioner:
    """Jacobi (diagonal) preconditioner ``diag(A)^{-1}`` as a LinearOperator.

    Parameters
    ----------
    A : sparse matrix or array
        Square matrix with a finite, nonzero diagonal.
    dtype : {numpy.float64, numpy.float32}, optional
        Type of the products; default as in :class:`TwoLevelSchwarz`.
    backend : {"numpy", "cupy"}
        Where the products run.

    Returns
    -------
    JacobiPreconditioner

    Raises
    ------
    ValueError
        Non-square or non-finite ``A``, or a zero diagonal entry.
    """
    start = time.perf_counter()
    A, a_dtype = _check_matrix(A)
    diagonal = A.diagonal()
    zero = np.flatnonzero(diagonal == 0)
    if zero.size:
        raise ValueError(f"A has a zero diagonal entry at index {int(zero[0])}; the Jacobi "
                         "preconditioner needs a nonzero diagonal")
    if dtype is None:
        dtype = np.float32 if a_dtype == np.float32 else np.float64
    op = JacobiPreconditioner(1.0 / diagonal, check_dtype(dtype), backend)
    op.setup_seconds = time.perf_counter() - start
    return op


# -- Krylov solves with a residual history -------------------------------------------------------
def _warn_nonsymmetric_for_cg(M: Any) -> None:
    """Warn when CG gets a preconditioner that is not symmetric (CG's theory needs SPD ``M``)."""
    if isinstance(M, TwoLevelSchwarz) and M.variant == "restricted":
        warn(
            "solve_with_history: method='cg' with TwoLevelSchwarz(variant='restricted'), which is "
            "not symmetric; CG may stagnate or stop early with a wrong count.  Use "
            "method='gmres', or variant='additive' or 'symmetric_restricted' with CG",
            UserWarning)


def solve_with_history(
    A: Any,
    b: Any,
    M: Any = None,
    method: str = "cg",
    rtol: float = 1e-8,
    maxiter: int | None = None,
    x0: Any = None,
    restart: int | None = None,
) -> tuple[np.ndarray, int, list[float], int]:
    """Run scipy's CG or GMRES and record one residual norm per iteration.

    Parameters
    ----------
    A : sparse matrix, array or LinearOperator
        System matrix.
    b : array, shape (n,)
        Right-hand side.
    M : LinearOperator, optional
        Preconditioner (``M ~ A^{-1}``), passed as ``M=`` to scipy.
    method : {"cg", "gmres"}
        Krylov method.
    rtol : float
        Relative tolerance: stop when ``||b - A x|| <= rtol ||b||``.
    maxiter : int, optional
        Passed to scipy; for GMRES it counts restart cycles, as in scipy.
    x0 : array, optional
        Initial guess (default zero).
    restart : int, optional
        GMRES restart length (scipy's default 20); not allowed for CG.

    Returns
    -------
    x : numpy.ndarray
        The approximate solution.
    info : int
        scipy's exit code (0: converged).
    residual_norms : list of float
        Relative residual norms, starting with the initial one (1.0 for a
        zero ``x0``), then one per iteration.  CG: the true residual
        ``||b - A x_k|| / ||b||`` (one extra product with ``A`` per
        iteration).  GMRES: the left-preconditioned residual
        ``||M (b - A x_k)|| / ||M (b - A x_0)||`` tracked by the Arnoldi
        process (``callback_type="pr_norm"``, one call per inner iteration,
        so restarts are counted correctly).
    iterations : int
        Number of iterations, ``len(residual_norms) - 1``.

    Warns
    -----
    UserWarning
        With ``method="cg"`` and a non-symmetric preconditioner,
        :class:`TwoLevelSchwarz` with ``variant="restricted"`` (RAS): use GMRES, or the
        ``"additive"`` or ``"symmetric_restricted"`` variant with CG.
    """
    check_choice("method", method, SOLVERS)
    if restart is not None and method != "gmres":
        raise ValueError("restart is only used with method='gmres'")
    if method == "cg":
        _warn_nonsymmetric_for_cg(M)
    A_op = spla.aslinearoperator(A)
    b = np.asarray(b, dtype=np.float64)
    if b.ndim != 1 or b.shape[0] != A_op.shape[0]:
        raise ValueError(f"b must have shape ({A_op.shape[0]},), got {b.shape}")
    check_finite("b", b)
    bnorm = float(np.linalg.norm(b))
    if bnorm == 0.0:
        return np.zeros_like(b), 0, [0.0], 0
    start = np.zeros_like(b) if x0 is None else np.asarray(x0, dtype=np.float64)
    r0 = b - A_op.matvec(start)
    norms: list[float] = []
    callback: Callable[[Any], None]
    if method == "cg":
        norms.append(float(np.linalg.norm(r0)) / bnorm)

        def callback(xk: np.ndarray) -> None:
            norms.append(float(np.linalg.norm(b - A_op.matvec(xk))) / bnorm)

        x, info = spla.cg(A, b, x0=x0, rtol=rtol, maxiter=maxiter, M=M, callback=callback)
    else:
        # scipy reports ||M r_k|| / ||b||; rescale to the initial preconditioned residual
        pr0 = float(np.linalg.norm(r0 if M is None else spla.aslinearoperator(M).matvec(r0)))
        scale = bnorm / pr0 if pr0 > 0 else 1.0
        norms.append(1.0)

        def callback(pr_norm: float) -> None:
            norms.append(float(pr_norm) * scale)

        x, info = spla.gmres(A, b, x0=x0, rtol=rtol, restart=restart, maxiter=maxiter, M=M,
                             callback=callback, callback_type="pr_norm")
    return x, int(info), norms, len(norms) - 1
