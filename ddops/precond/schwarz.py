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

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from threadpoolctl import ThreadpoolController

from .._validation import (
    as_matrix,
    as_vectors,
    check_choice,
    check_dtype,
    check_finite,
    check_no_empty_rows,
    warn,
)
from ..backend import asarray, check_backend
from ..dd.coarse import MATRIX_COARSE_BASES, resolve_coarse_kind
from ..dd.decomposition import Decomposition
from ..dd.kernel import (
    KERNEL_RTOL,
    check_kernel,
    inconsistent_residual,
    remove_kernel,
)
from ..dd.validation import (
    check_positive_diagonal,
    exactly_symmetric,
    symmetric_part,
    symmetry_defect,
)
from ..linalg.local_solvers import (
    BlockSolver,
    check_threads,
    pardiso_available,
    thread_limit,
)
from ..linalg.spd import SINGULAR_PIVOT_RTOL
from ..operators.linop import DENSE_LIMIT_BYTES, BackendLinearOperator
from . import corrections
from .corrections import (
    COARSE_DENSE_MAX,
    DENSE_LOCAL_LIMIT_BYTES,
    DENSE_LOCAL_MAX_SIZE,
    EXACT_PIVOT_CHECK_ROWS,
    LOCAL_CHUNK_ROWS,
    SINGULAR_HINT,
    CoarseCorrection,
    HybridCorrection,
    OverlappingCorrection,
    SingularMatrixError,
    SumCorrection,
)
from .options import (
    COARSE_SPACES,
    LOCAL_SOLVERS,
    VARIANTS,
    SchwarzOptions,
    coarse_options_from_dict,
)
from .options import FACTOR_DTYPES as _FACTOR_DTYPE_NAMES

__all__ = [
    "VARIANTS",
    "LOCAL_SOLVERS",
    "FACTOR_DTYPES",
    "SOLVERS",
    "DENSE_LOCAL_LIMIT_BYTES",
    "DENSE_LOCAL_MAX_SIZE",
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
    "check_matrix",
    "check_symmetric",
    "symmetrised",
    "resolve_options",
]

#: Precisions of the local solves (``factor_dtype``): float64, or float32 factors applied to
#: the float64 residual (cast in, solve, cast back; the rest stays in float64).
FACTOR_DTYPES = tuple(np.dtype(name) for name in _FACTOR_DTYPE_NAMES)

#: Krylov methods of :func:`solve_with_history`.
SOLVERS = ("cg", "gmres")


# -- validation helpers ----------------------------------------------------------------------
def check_matrix(A: Any, name: str = "A") -> tuple[sp.csr_matrix, np.dtype]:
    """``A`` as float64 CSR (the package's matrix contract, :func:`ddops._validation.as_matrix`)
    without empty rows, and its original dtype."""
    A, original = as_matrix(A, name)
    check_no_empty_rows(A, name)
    return A, original


def check_symmetric(A: sp.csr_matrix, name: str = "A") -> bool:
    """Raise unless ``max |A - A^T| <= sqrt(eps) * max |A|``; True when ``A = A^T`` exactly."""
    scale = float(np.abs(A.data).max()) if A.nnz else 0.0
    asym, exact = symmetry_defect(A)
    _refuse_unsymmetric(asym, scale, name)
    return exact


def symmetrised(A: sp.csr_matrix, name: str = "A") -> sp.csr_matrix:
    """``A`` itself when it equals ``A^T`` exactly, else ``(A + A^T) / 2`` (exactly
    symmetric; one transpose for the check and the sum); the ValueError of
    :func:`check_symmetric` beyond rounding.  ``A``: canonical CSR."""
    scale = float(np.abs(A.data).max()) if A.nnz else 0.0
    asym, exact, T = symmetry_defect(A, return_transpose=True)
    _refuse_unsymmetric(asym, scale, name)
    return A if exact else symmetric_part(A, T)


def _refuse_unsymmetric(asym: float, scale: float, name: str = "A") -> None:
    """The ValueError of :func:`check_symmetric` when ``max |A - A^T| = asym`` exceeds
    ``sqrt(eps) max |A|``."""
    if asym > np.sqrt(np.finfo(np.float64).eps) * scale:
        raise ValueError(f"{name} is not symmetric: max |{name} - {name}^T| = {asym:.3e} against "
                         f"max |{name}| = {scale:.3e}; the Schwarz preconditioner needs an SPD "
                         "matrix")


# the names the package used before they were public

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


# the keyword arguments of TwoLevelSchwarz that are options, with their defaults
_OPTION_KEYWORDS = {"coarse_basis": "auto", "variant": "additive", "coarse": True,
                    "coarse_size": None, "local_solver": "auto", "null_space": None,
                    "factor_dtype": np.float64, "coarse_options": None, "kernel": None,
                    "threads": None, "extension_reuse": "analysis"}


def _is_default(name: str, value: Any) -> bool:
    default = _OPTION_KEYWORDS[name]
    if name == "factor_dtype":
        try:
            return np.dtype(value) == np.float64
        except TypeError:
            return False
    return value is default or (isinstance(value, str) and value == default)


def resolve_options(options: Any, given: dict, decomposition: Any) -> SchwarzOptions:
    """The options of a TwoLevelSchwarz: ``options=`` or its keyword arguments (not both).

    ``given`` holds the option keywords of :class:`TwoLevelSchwarz` by name (the
    distributed preconditioner passes its own); a keyword with a value other than its
    default beside ``options=`` is refused.
    """
    if options is not None:
        if not isinstance(options, SchwarzOptions):
            raise TypeError(f"options must be a ddops.SchwarzOptions, got "
                            f"{type(options).__name__}")
        both = [k for k, v in given.items() if not _is_default(k, v)]
        if both:
            raise TypeError(f"give the settings either as options= or as keyword arguments, "
                            f"not both: {both} given beside options=")
        return options
    check_choice("variant", given["variant"], VARIANTS)
    check_choice("local_solver", given["local_solver"], LOCAL_SOLVERS)
    coarse, coarse_basis = given["coarse"], given["coarse_basis"]
    if not isinstance(coarse, (bool, np.bool_)):
        raise TypeError(f"coarse must be a bool, got {type(coarse).__name__}")
    coarse_size = given["coarse_size"]
    is_grid = isinstance(coarse_basis, str) and coarse_basis == "grid_hats"
    if coarse_size is not None and not is_grid:
        raise ValueError("coarse_size is only used with coarse_basis='grid_hats'")
    if isinstance(coarse_basis, str) and coarse_basis not in COARSE_SPACES:
        check_choice("coarse_basis", coarse_basis, [c for c in COARSE_SPACES if c != "none"])
    factor_dtype = _check_factor_dtype(given["factor_dtype"]).name
    sub = {}
    if given["coarse_options"] is not None:
        kind = coarse_basis
        if isinstance(kind, str) and isinstance(decomposition, Decomposition):
            kind = resolve_coarse_kind(kind, decomposition, matrix=True)
        sub = coarse_options_from_dict(kind, given["coarse_options"])
        if sub:
            what = ", ".join(f"{k}={type(v).__name__}(...)" for k, v in sub.items())
            warn(f"coarse_options= is deprecated; use options=SchwarzOptions({what}) (or "
                 "the coarse space's options object)", DeprecationWarning)
    if not coarse or coarse_basis is None:
        coarse_basis, coarse_size = "none", None
    return SchwarzOptions(variant=given["variant"], coarse=coarse_basis,
                          coarse_size=coarse_size, local_solver=given["local_solver"],
                          factor_dtype=factor_dtype, null_space=given["null_space"],
                          kernel=given["kernel"], threads=given["threads"],
                          extension_reuse=given.get("extension_reuse", "analysis"), **sub)



# -- the two-level Schwarz preconditioner ------------------------------------------------------
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
        solvers).  ``"auto"`` takes ``"dense"`` for subdomains of at most
        :data:`DENSE_LOCAL_MAX_SIZE` unknowns whose ``N p^2`` float64 values fit in
        :data:`DENSE_LOCAL_LIMIT_BYTES` (and its set-up in memory; always on the GPU),
        else ``"pardiso"`` when it is installed, else ``"superlu"``.  The exact solvers
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
        solves and eigenproblems) and the OpenMP runtimes, through
        :func:`ddops.linalg.local_solvers.thread_limit`.  SuperLU, pyamg and each
        PARDISO factorisation are single-threaded.  The independent chunks of the
        set-up (the harmonic extension, AGDSW's and GenEO's eigenproblems) run on as
        many threads (at most the CPUs and 8), one BLAS thread each, and a PARDISO
        local solver of at least
        :data:`~ddops.precond.corrections.THREADED_SOLVE_MIN_ROWS` rows is factorised
        and solved on as many, in groups of subdomains of about
        :data:`~ddops.precond.corrections.LOCAL_GROUP_ROWS` rows (a multiple of the
        threads; groups on one thread too, :mod:`ddops.linalg.parallel`); with more
        than one thread, their numeric factorisation runs beside the coarse space
        (:data:`~ddops.precond.corrections.LOCAL_BESIDE_COARSE`).  None
        (default) leaves the process's settings, including a
        :func:`threadpoolctl.threadpool_limits` the caller entered (the chunks then
        take the BLAS limit in force).
    extension_reuse : {"analysis", "ordering"}
        What a GDSW, RGDSW or AGDSW coarse space keeps of the PARDISO factorisations of
        its extension's interior problems for :meth:`update`
        (:class:`~ddops.dd.analysis.GDSWAnalysis`): ``"analysis"`` (default), the
        symbolic factorisations, so that :meth:`update` runs PARDISO's numeric phase
        alone; ``"ordering"``, only their fill-reducing orderings (with the chunks'
        patterns they are for: integers, about 4 bytes per nonzero of the interiors)
        instead of MKL's analyses (about 280 MiB on the 227,448-unknown 3D elasticity
        beam of ``docs/preconditioning.md``), for an :meth:`update` that analyses again
        with them (12-20 % slower on 2D and 3D Poisson).  The preconditioner is the same
        either way.  Other coarse spaces and solvers keep nothing of the kind.

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
        extension_reuse: str = "analysis",
        options: SchwarzOptions | None = None,
    ) -> None:
        given = {"coarse_basis": coarse_basis, "variant": variant, "coarse": coarse,
                 "coarse_size": coarse_size, "local_solver": local_solver,
                 "null_space": null_space, "factor_dtype": factor_dtype,
                 "coarse_options": coarse_options, "kernel": kernel, "threads": threads,
                 "extension_reuse": extension_reuse}
        self.options = opts = resolve_options(options, given, decomposition)
        self._failed = None
        self.threads = check_threads(opts.threads)
        # the whole set-up (factorisations, eigenproblems, BLAS) under one limit; mkl_rt is
        # loaded first so that PARDISO's threads are covered too
        with thread_limit(self.threads):
            start = time.perf_counter()
            A = self._symbolic(A, decomposition, opts, dtype, backend)
            self.symbolic_seconds = time.perf_counter() - start
            self._numeric(A, reuse_coarse=False)
            self.setup_seconds = time.perf_counter() - start
        # every application under the same limit: a controller that found its libraries once
        # costs tens of microseconds per product instead of a scan of the process
        self._thread_pools = None if self.threads is None else ThreadpoolController()

    # -- set-up: the symbolic phase -------------------------------------------------------------
    def _symbolic(self, A: Any, decomposition: Decomposition, opts: SchwarzOptions,
                  dtype: Any, backend: str) -> sp.csr_matrix:
        """Everything that depends on the pattern of ``A`` and the options only; returns
        ``A`` checked, symmetrised and canonical."""
        if not isinstance(decomposition, Decomposition):
            raise TypeError("decomposition must be a ddops Decomposition, got "
                            f"{type(decomposition).__name__}")
        check_backend(backend)
        self.factor_dtype = np.dtype(opts.factor_dtype)
        d = decomposition
        A, a_dtype = self._checked_matrix(A, d.num_dofs)
        # the pattern that update() must see again (A canonical: sorted, no duplicates)
        self._pattern = (A.indptr.copy(), A.indices.copy())
        null_space, kernel = opts.null_space, opts.kernel
        if isinstance(kernel, str):  # "constants"
            kernel = np.ones(d.num_dofs)
        if isinstance(null_space, str):
            null_space = np.ones(d.num_dofs)
        # a singular A with a known kernel: the kernel is also the coarse space's null space
        # unless another one is given (rigid body modes of a floating body are both)
        Q = None if kernel is None else check_kernel(kernel, A)
        if null_space is None and kernel is not None:
            null_space = kernel
        self._null_space = null_space
        coarse_basis = opts.coarse
        if isinstance(coarse_basis, str):
            coarse_basis = None if coarse_basis == "none" else resolve_coarse_kind(
                coarse_basis, d, matrix=True)
        self._named_coarse = isinstance(coarse_basis, str)
        if kernel is None:
            self._check_not_singular(A, self._named_coarse, null_space)
        if dtype is None:
            dtype = np.float32 if a_dtype == np.float32 else np.float64
        dt = check_dtype(dtype)
        super().__init__(d.num_dofs, dt, backend)

        self.decomposition = d
        self.variant = opts.variant
        self.num_subdomains = d.num_subdomains
        self.kernel = Q
        self._kernel = None if Q is None else asarray(Q.astype(dt), backend=backend)
        self._largest_residual = 0.0
        self._warned_inconsistent = False
        hint = ("; the Schwarz preconditioner needs a symmetric positive definite A"
                if Q is None else
                ": A is singular (kernel=) and this subdomain holds the whole support of a "
                "kernel vector (one subdomain for everything, or a floating component inside "
                "a subdomain); use more subdomains, or ground the problem")
        self.local = OverlappingCorrection(A, d, opts.variant, opts.local_solver,
                                           self.factor_dtype, dt, backend, null_space, hint)
        self.local_solver = self.local.local_solver
        self.sparse_solver = self.local.sparse_solver
        # the coarse matrix above COARSE_DENSE_MAX_PARDISO: PARDISO when installed, unless
        # SuperLU was asked for by name (then above COARSE_DENSE_MAX)
        self.coarse_factorization = ("pardiso" if pardiso_available() and self.sparse_solver
                                     != "superlu" else "superlu")
        self.coarse = None
        if coarse_basis is not None:
            self.coarse = CoarseCorrection(
                d, coarse_basis, opts.coarse_size, null_space, Q,
                opts.coarse_keywords(coarse_basis) if self._named_coarse else {},
                opts.variant == "hybrid", dt, backend, self.coarse_factorization,
                extension_reuse=opts.extension_reuse)
        self._coarse_basis_requested = coarse_basis
        return A

    @staticmethod
    def _checked_matrix(A: Any, num_dofs: int) -> tuple[sp.csr_matrix, np.dtype]:
        """``A`` as canonical float64 CSR, checked and symmetrised, and its dtype."""
        A, a_dtype = check_matrix(A)
        if A.shape[0] != num_dofs:
            raise ValueError(f"A has size {A.shape[0]} but the decomposition has "
                             f"num_dofs={num_dofs}")
        A = symmetrised(A)
        if not A.has_canonical_format:
            A = A.copy()
            A.sum_duplicates()
            A.sort_indices()
        return A, a_dtype

    # -- set-up: the numeric phase ----------------------------------------------------------------
    def _numeric(self, A: sp.csr_matrix, reuse_coarse: bool) -> None:
        """Everything that depends on the values of ``A``: the local factors, the coarse
        basis (unless kept), ``A_0`` and its factor.

        The local factors come first: a GDSW-type basis analyses its interior problems by
        their elimination order (:meth:`~ddops.dd.analysis.GDSWAnalysis.share_local_order`).
        On two threads or more only their analysis does, and their numeric factorisation
        runs beside the coarse space (:data:`~ddops.precond.corrections.LOCAL_BESIDE_COARSE`).
        """
        numeric_start = time.perf_counter()
        builds_basis = self.coarse is not None and not reuse_coarse
        if (builds_basis and self.coarse._user_basis is None
                and self.coarse.kind in MATRIX_COARSE_BASES):
            # the first check of these bases, before the local factors fail on -A less
            # clearly
            check_positive_diagonal(A)
        local_start = time.perf_counter()
        self.local_beside_seconds = 0.0
        # on two threads or more, only the analysis here and the numeric factorisation
        # beside the coarse space (LOCAL_BESIDE_COARSE), finished at the join
        beside = self.local.compute(
            A, defer=corrections.LOCAL_BESIDE_COARSE and self.coarse is not None)
        self.local_setup_seconds = time.perf_counter() - local_start
        try:
            self._coarse_numeric(A, reuse_coarse, builds_basis)
        finally:
            # the factors done (or failed) before anything returns or raises; a failure of
            # the local factorisation first, as without the thread
            if beside is not None:
                waited = beside.join()
                self.local.factorization_seconds += waited
                self.local_setup_seconds += waited
                self.local_beside_seconds = beside.seconds
        self.numeric_seconds = time.perf_counter() - numeric_start

    def _coarse_numeric(self, A: sp.csr_matrix, reuse_coarse: bool,
                        builds_basis: bool) -> None:
        """The coarse basis (unless kept), ``A_0`` and its factor, and the composition."""
        basis_start = time.perf_counter()
        if builds_basis:
            analysis = self.coarse.analysis
            if analysis is not None:
                analysis.share_local_order(self.decomposition,
                                           self.local.elimination_positions())
            try:
                with exactly_symmetric(A):  # (by _checked_matrix): not transposed again
                    self.coarse.build_basis(A)
            finally:
                if analysis is not None:
                    analysis.share_local_order(self.decomposition, None)
        self.coarse_basis_seconds = time.perf_counter() - basis_start
        if self.coarse is not None:
            self.coarse_info, self.coarse_stats = self.coarse.info, self.coarse.stats
        else:
            self.coarse_info, self.coarse_stats = None, {"kernel_dropped": 0}
        # the basis's own phases, when it was built in this set-up
        self._basis_stats = {} if reuse_coarse else self.coarse_stats
        Phi = None if self.coarse is None else self.coarse.Phi
        self.coarse_basis_name = None if Phi is None else self.coarse.kind

        coarse_start = time.perf_counter()
        if self.coarse is not None:
            self.coarse.compute(A, basis_of_A=not reuse_coarse)
        self.coarse_dim = 0 if self.coarse is None else self.coarse.dim
        self.coarse_solver = None if self.coarse is None else self.coarse.solver
        self.coarse_setup_seconds = time.perf_counter() - coarse_start
        if self.variant == "hybrid" and self.coarse_dim:
            self._composition = HybridCorrection(self.coarse, self.local)
        elif self.coarse_dim:
            self._composition = SumCorrection(self.local, self.coarse)
        else:
            self._composition = self.local

    def update(self, A: Any, *, reuse_coarse: bool = False,
               neumann: Any = None) -> TwoLevelSchwarz:
        """Rebuild the numeric phase for a new matrix with the same sparsity pattern.

        The decomposition, the stacked restrictions, the choice of solvers and the map
        from the entries of ``A`` to the subdomain matrices are kept (the symbolic
        phase); the local factorisations, the coarse basis, ``A_0 = Phi^T A Phi`` and its
        factorisation are recomputed.  The result equals a preconditioner built from
        scratch on the new matrix with the same arguments (to rounding).  Like PETSc's
        ``SAME_NONZERO_PATTERN`` and FROSch's ``resetMatrix``: for time steps, Newton
        iterations and parameter sweeps.

        Parameters
        ----------
        A : sparse matrix
            The new matrix: symmetric, with exactly the stored pattern of the matrix the
            preconditioner was built with (explicit zeros count as entries).
        reuse_coarse : bool
            Keep the coarse basis ``Phi`` (bit for bit) and recompute only ``A_0``, the
            local factors and the coarse factor: the cheap path for slowly varying
            coefficients.  The coarse space is then the old one, as good as it still is
            for the new matrix.
        neumann : sequence of sparse matrices, optional
            The local Neumann matrices of the new matrix, for an adaptive coarse space
            built with ``neumann=`` (they belong to the values of ``A``): required then,
            unless ``reuse_coarse=True``.

        Returns
        -------
        TwoLevelSchwarz
            ``self``, updated (chainable).

        Raises
        ------
        ValueError
            ``A`` has another sparsity pattern (build a new preconditioner), or fails the
            checks of the constructor (not symmetric, not finite, singular blocks, ...).
            The checks of the matrix and its pattern come first and leave ``M`` as it was;
            a failure later (a singular block, a singular coarse matrix) leaves ``M``
            unusable until an update with a valid matrix succeeds (applying it raises a
            RuntimeError that says so).
        """
        if not isinstance(reuse_coarse, (bool, np.bool_)):
            raise TypeError(f"reuse_coarse must be a bool, got {type(reuse_coarse).__name__}")
        coarse = self.coarse
        built_with = coarse is not None and coarse.options.get("neumann") is not None
        if neumann is not None and not built_with:
            raise ValueError("update: neumann= is for a coarse space built with neumann= "
                             "(AGDSW or GenEO with finite-element Neumann matrices)")
        if neumann is not None and reuse_coarse:
            raise ValueError("update: neumann= builds a new coarse space; reuse_coarse=True "
                             "keeps the old one (give one or the other)")
        if built_with and neumann is None and not reuse_coarse:
            raise ValueError("update: the coarse space was built with neumann= (local "
                             "Neumann matrices of the old values); pass neumann= for the new "
                             "matrix, or reuse_coarse=True to keep the coarse space")
        with thread_limit(self.threads):
            start = time.perf_counter()
            A, _ = self._checked_matrix(A, self.shape[0])
            indptr, indices = self._pattern
            if not (np.array_equal(A.indptr, indptr) and np.array_equal(A.indices, indices)):
                raise ValueError(
                    f"update: A has another sparsity pattern ({A.nnz} stored entries against "
                    f"{indices.size}, or the same count elsewhere) than the matrix this "
                    "preconditioner was built for; build a new TwoLevelSchwarz for it")
            if self.kernel is not None:
                check_kernel(self.kernel, A)
            else:
                self._check_not_singular(A, self._named_coarse, self._null_space)
            if neumann is not None:
                coarse.options = dict(coarse.options, neumann=neumann)
                space = "agdsw" if coarse.kind == "agdsw" else "geneo"
                self.options = self.options.replace(**{space: dataclasses.replace(
                    getattr(self.options, space), neumann=neumann)})
            # what is left of the symbolic phase: checking the matrix and its pattern
            self.symbolic_seconds = time.perf_counter() - start
            try:
                self._numeric(A, reuse_coarse=reuse_coarse)
            except Exception as exc:
                # the parts are half updated: refuse to apply until a good update
                self._failed = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
                raise
            self._failed = None
            self._largest_residual = 0.0
            self._warned_inconsistent = False
            self.setup_seconds = time.perf_counter() - start
        return self

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

    # -- what the parts hold, under the names of the single-block implementation ------------------
    @property
    def _local_solver(self) -> BlockSolver | None:
        return self.local.solver

    @property
    def _local_inv(self) -> Any:
        return self.local.inverses

    @property
    def _local_lu(self) -> Any:
        """The SuperLU factors per chunk (inspected by tests)."""
        return getattr(self.local.solver, "factors", None)

    @property
    def _coarse_cho(self) -> Any:
        return None if self.coarse is None else self.coarse._cho

    @property
    def _AP(self) -> Any:
        return None if self.coarse is None else self.coarse._AP

    @property
    def factor_nnz(self) -> int:
        """Stored nonzeros of the sparse local and coarse factors (SuperLU: ``L`` and ``U``
        together; PARDISO: its ``L``; ``"amg"``: the matrices of the hierarchy).

        0 for the dense solvers, whose padded inverses are ordinary numpy arrays.
        """
        local = 0 if self.local.solver is None else int(self.local.solver.nnz)
        coarse = int(self.coarse._lu.nnz) if self.coarse_solver == "sparse" else 0
        return local + coarse

    @property
    def factor_bytes(self) -> int:
        """Bytes of the sparse factors held outside the Python heap (SuperLU, PARDISO):
        what :mod:`tracemalloc` does not see.  SuperLU: per stored nonzero its value and
        a 4-byte row index (the local factors in ``factor_dtype``, the coarse one in
        float64); PARDISO: the memory it reports for the factorisation.  The ``"amg"``
        hierarchy is numpy and scipy arrays (see :attr:`stats`), 0 here."""
        local = self.local.solver
        local_bytes = 0 if local is None or local.name == "amg" else int(local.nbytes)
        coarse = self.coarse.factor_bytes if self.coarse_solver == "sparse" else 0
        return local_bytes + coarse

    @property
    def stats(self) -> dict:
        """Where the set-up time and the held memory go.

        Returns
        -------
        dict
            ``local_solver``, ``sparse_solver``, ``coarse_dim``; seconds:
            ``setup_seconds`` (the last set-up: the constructor's, or the last
            :meth:`update`), ``symbolic_seconds`` and ``numeric_seconds`` (its two
            phases; after an update, symbolic is the check of the matrix and its
            pattern), ``coarse_basis_seconds``,
            ``local_setup_seconds``, ``coarse_setup_seconds`` (the parts of the numeric
            phase; with the numeric local factorisation beside the coarse space,
            :data:`~ddops.precond.corrections.LOCAL_BESIDE_COARSE`, the local part is its
            analysis and the wait for it), ``local_beside_seconds`` (the wall time of
            that numeric factorisation on its thread; 0 without it), ``phases``
            (:attr:`setup_phases`, the finer split); bytes held:
            ``local_factor_bytes`` (the sparse local factors, the ``"amg"`` hierarchy or
            the dense inverses),
            ``coarse_factor_bytes`` (dense Cholesky factor or SuperLU factors of
            ``A_0``), ``coarse_basis_bytes`` (``Phi``, and ``A Phi`` for the hybrid
            variant), ``restriction_bytes`` (the stacked restrictions ``S_in``,
            ``S_out`` and their transposes when they are copies), ``symbolic_bytes``
            (the map from ``A`` to the subdomain matrices kept for :meth:`update`, and the
            GDSW-type basis' :class:`~ddops.dd.analysis.GDSWAnalysis`),
            ``reuse_coarse_bytes`` (the values of ``A`` kept for
            ``update(reuse_coarse=True)``) and ``total_bytes``, their sum; ``factor_nnz``.
        """
        def sparse_bytes(M):
            if M is None:
                return 0
            parts = [getattr(M, name, None) for name in ("data", "indices", "indptr")]
            return sum(int(p.nbytes) for p in parts if p is not None)

        local = self.local.nbytes
        coarse = self.coarse.factor_bytes if self.coarse_dim else 0
        basis = 0
        if self.coarse_dim:
            c = self.coarse
            basis = sparse_bytes(c._Phi) + sparse_bytes(c._AP)
            if self.backend != "numpy":  # the transposed copies on the GPU
                basis += sparse_bytes(c._PhiT) + sparse_bytes(c._APT)
        loc = self.local
        mats = {id(m): m for m in (loc.S_in, loc.S_out)}
        if self.backend != "numpy":
            mats.update({id(m): m for m in (loc.S_inT, loc.S_outT)})
        restriction = sum(sparse_bytes(m) for m in mats.values())
        symbolic = loc.symbolic_bytes + sum(int(a.nbytes) for a in self._pattern)
        if self.coarse is not None and self.coarse.analysis is not None:
            symbolic += self.coarse.analysis.nbytes
        reuse = 0 if self.coarse is None else self.coarse.kept_bytes
        return {
            "phases": self.setup_phases,
            "local_solver": self.local_solver, "sparse_solver": self.sparse_solver,
            "coarse_dim": self.coarse_dim, "setup_seconds": self.setup_seconds,
            "symbolic_seconds": self.symbolic_seconds, "numeric_seconds": self.numeric_seconds,
            "coarse_basis_seconds": self.coarse_basis_seconds,
            "local_setup_seconds": self.local_setup_seconds,
            "local_beside_seconds": self.local_beside_seconds,
            "coarse_setup_seconds": self.coarse_setup_seconds,
            "local_factor_bytes": local, "coarse_factor_bytes": coarse,
            "coarse_basis_bytes": basis, "restriction_bytes": restriction,
            "symbolic_bytes": symbolic, "reuse_coarse_bytes": reuse,
            "total_bytes": local + coarse + basis + restriction + symbolic + reuse,
            "factor_nnz": self.factor_nnz,
        }

    @property
    def setup_phases(self) -> dict:
        """Seconds of the last set-up by phase (wall time).

        ``partition`` and ``overlap`` (the decomposition's, when it was built by
        :meth:`~ddops.Decomposition.from_matrix`; not part of :attr:`setup_seconds`),
        ``symbolic`` (checks of ``A``, the restrictions, the map from ``A`` to the
        subdomain matrices; after :meth:`update`, the check of the new matrix and its
        pattern), ``interface`` (the interface and its
        components), ``extension`` (the harmonic extension), ``eigenproblems`` (the
        adaptive spaces' eigenproblems, AGDSW's Schur complements included),
        ``coarse_basis_other`` (the rest of the coarse basis: null-space pieces, grounding,
        checks), ``extraction`` (the subdomain matrices), ``local_factorization``,
        ``coarse_assembly`` (``A_0 = Phi^T A Phi``) and ``coarse_factorization``.  All but
        the first two add up to :attr:`setup_seconds` (to the bookkeeping between them).
        Where the numeric local factorisation ran beside the coarse space
        (:data:`~ddops.precond.corrections.LOCAL_BESIDE_COARSE`), ``local_factorization``
        is its analysis and the time the set-up waited for the rest
        (``stats()["local_beside_seconds"]``: its own wall time).
        """
        d_stats = getattr(self.decomposition, "setup_stats", {}) or {}
        info = self._basis_stats
        interface = float(info.get("interface_seconds", 0.0))
        extension = float(info.get("extension_seconds", 0.0))
        eigen = float(info.get("eigen_seconds", 0.0))
        coarse = self.coarse
        return {
            "partition": float(d_stats.get("partition_seconds", 0.0)),
            "overlap": float(d_stats.get("overlap_seconds", 0.0)),
            "symbolic": self.symbolic_seconds,
            "interface": interface,
            "extension": extension,
            "eigenproblems": eigen,
            "coarse_basis_other": max(self.coarse_basis_seconds - interface - extension
                                      - eigen, 0.0),
            "extraction": self.local.extraction_seconds,
            "local_factorization": self.local.factorization_seconds,
            "coarse_assembly": 0.0 if coarse is None else coarse.assembly_seconds,
            "coarse_factorization": 0.0 if coarse is None else coarse.factorization_seconds,
        }

    # -- application -----------------------------------------------------------------------
    def _apply(self, X: Any, adjoint: bool) -> Any:
        if self._failed is not None:
            raise RuntimeError(f"the last update of this preconditioner failed ({self._failed}); "
                               "call update again with a valid matrix, or build a new one")
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
        self._largest_residual, message = inconsistent_residual(
            float(along.max()), float(norms.max()), self._largest_residual)
        if message is not None and not self._warned_inconsistent:
            self._warned_inconsistent = True
            warn(message, RuntimeWarning)

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
        return self.xp.asarray(self._composition.apply(X, adjoint), dtype=self.dtype)

    @property
    def coarse_matrix(self) -> sp.csr_matrix | None:
        """The coarse interpolation Phi (scipy CSR, ``num_dofs x n0``), or None."""
        return None if self.coarse is None else self.coarse.Phi

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
    A, a_dtype = check_matrix(A)
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
