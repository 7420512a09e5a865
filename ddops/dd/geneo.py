"""GenEO: the eigenvectors of local generalized eigenproblems on the overlapping subdomains.

GenEO (``"geneo"``)
-------------------
Spillane, Dolean, Hauret, Nataf, Pechstein, Scheichl (Numer. Math. 2014): on
every overlapping subdomain ``i``,

    N_i v = lambda D_i A_i D_i v,    lambda < threshold,

with ``A_i = R_i A R_i^T``, ``D_i`` the partition-of-unity weights and
``N_i`` the local Neumann matrix (computed from ``A`` as above, or given by
the user, e.g. from a finite-element assembly over the subdomain's elements);
the coarse functions are ``R_i^T D_i v``.  Without ``neumann`` and with a matrix that
is not diagonally dominant (elasticity), ``N_i`` is oversampled
(:mod:`ddops.dd.oversampling`): no bound is proven then.  With the additive two-level
method and exact local solves,

    kappa(M A) <= (1 + k_0) (2 + k_0 (2 k_0 + 1) max(1, k_1 / tau))

(Dolean, Jolivet, Nataf, *An Introduction to Domain Decomposition Methods*,
SIAM 2015, chapter 7), ``k_0`` the largest number of subdomains that meet one
subdomain (itself included) and ``k_1`` the multiplicity of the Neumann
matrices (both returned in the info's ``stats``).  The bound does not depend
on the coefficients.  The eigenproblems are solved for all subdomains of a
chunk at once (padded to a size group) by a shift-and-invert subspace iteration:
sparse solves with ``N_i + sigma D_i A_i D_i`` (``sigma`` a tenth of the threshold) per
chunk, a Chebyshev filter of degree 2 in them, and one batched Rayleigh-Ritz step per
filter step.  With PARDISO, the inertia of ``N_i - threshold D_i A_i D_i`` (one symmetric
indefinite factorisation per chunk) first counts each subdomain's eigenvalues below the
threshold exactly: a subdomain whose count its kernel accounts for (a floating
subdomain's constants, or the given null space) needs no eigensolve, and the others
iterate, in chunks of similar counts, until that many Ritz values are below the threshold
(:data:`GENEO_INERTIA`), by a block Krylov method in the same solves instead of the
subspace iteration (:data:`GENEO_KRYLOV`: a third of the columns solved).  The chunks are
independent and run on up to :func:`ddops.linalg.parallel.chunk_workers` threads (the
BLAS thread limit: one with ``threads=1``), one BLAS thread each.

A given null space ``Z`` enters first (the Nicolaides functions ``R_i^T D_i R_i Z``), the
eigenvectors follow; see :mod:`ddops.dd.adaptive`.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import scipy.sparse as sp

from .._validation import check_choice, check_positive_float, warn
from ..linalg import local_solvers
from ..linalg.local_solvers import (
    BlockSolver,
    SingularBlockError,
    default_exact_solver,
    factorize_blocks,
    pardiso_inertia,
)
from ..linalg.parallel import map_chunks
from .coarse_matrix import drop_dependent_columns
from .eigen import (
    AdaptiveInfo,
    check_cap,
    check_neumann,
    check_threshold,
    generalized_eigh,
    not_dominant_rows,
    outside_coupling,
    project_out,
    select_eigenpairs,
    size_groups,
    split_padded_chunks,
    warn_cap,
)
from .extension import FACTOR_CHUNK_ROWS
from .groups import DEPENDENCE_RTOL, columns_from_groups, independent_vectors
from .indicators import check_skip_contrast, subdomain_contrast
from .oversampling import check_oversampling, default_oversampling, oversampled_sets
from .set_entries import entries_within_sets
from .validation import check_matrix, check_null_space

__all__ = [
    "GENEO_THRESHOLD",
    "GENEO_OVERSAMPLED_THRESHOLD",
    "MAX_PER_SUBDOMAIN",
    "MAX_PER_NULL_VECTOR",
    "default_max_per_subdomain",
    "GENEO_INITIAL_VECTORS",
    "GENEO_EXTRA_VECTORS",
    "GENEO_COUNT_SPLIT",
    "GENEO_MAX_ITERATIONS",
    "GENEO_SHIFT",
    "GENEO_FILTER_DEGREE",
    "GENEO_FILTER_CAP",
    "GENEO_RESIDUAL_RTOL",
    "GENEO_BOUNDARY_RTOL",
    "GENEO_INERTIA",
    "GENEO_KRYLOV",
    "GENEO_KRYLOV_MIN_BLOCK",
    "GENEO_KRYLOV_MAX_BLOCK",
    "GENEO_EIGEN_STOP",
    "GENEO_COUNT_SETTLE",
    "EIGEN_STOPS",
    "check_eigen_stop",
    "GENEO_KERNEL_RTOL",
    "geneo_basis",
]

#: Default GenEO threshold on ``lambda`` of ``N_i v = lambda D_i A_i D_i v``.  Measured (CG
#: iterations at 0.1 / 0.25): floating channels of contrast 1e4 on 64 boxes of 32 x 32, 69 /
#: 32; homogeneous 2D Poisson there, 42 / 30 with fewer functions than GDSW (196-288 against
#: 308); 3D inclusions 54 / 46; 2D elasticity with stiff inclusions 59 / 45, for at most
#: 30 % more set-up.  Larger values also give a smaller bound.
GENEO_THRESHOLD = 0.25

#: Default threshold with oversampled local matrices (:mod:`ddops.dd.oversampling`; the
#: default for a matrix that is not diagonally dominant).  Their energy is at least the
#: Neumann energy, so their eigenvalues are larger.  Measured (CG iterations at 0.25 / 0.5):
#: 2D P1 elasticity with stiff disks, 32 METIS parts, contrast 1e6, 62 / 54; 3D with stiff
#: balls, 78 / 54.
GENEO_OVERSAMPLED_THRESHOLD = 0.5

#: Default cap on the eigenvectors added per subdomain (GenEO), at least: elasticity with
#: stiff inclusions needs about three per inclusion in a subdomain in 2D (22 at most on 16
#: METIS parts of 2D elasticity with 60 inclusions, where a cap of 16 doubled the iteration
#: count).  With a null space of ``k`` vectors the default is
#: ``max(MAX_PER_SUBDOMAIN, MAX_PER_NULL_VECTOR * k)`` (:func:`default_max_per_subdomain`).
MAX_PER_SUBDOMAIN = 48

#: Default cap per null-space vector (GenEO; see :data:`MAX_PER_SUBDOMAIN`): a floating stiff
#: inclusion brings one eigenvector per rigid body mode, six in 3D.  Measured on 3D
#: elasticity with 20 clustered stiff balls, contrast 1e6, finite-element Neumann matrices,
#: 114,444 unknowns on 64 METIS parts (one thread): a cap of 48 left 20 subdomains short and
#: CG took 1606 iterations; 96 (16 per vector) 78 iterations, 4 subdomains short; 192 (32
#: per vector) 59 iterations, none short, for a set-up of 20.6 s against 19.1 s.
MAX_PER_NULL_VECTOR = 32


def default_max_per_subdomain(null_vectors: int) -> int:
    """GenEO's default cap per subdomain with ``null_vectors`` null-space vectors:
    ``max(MAX_PER_SUBDOMAIN, MAX_PER_NULL_VECTOR * null_vectors)`` (48 for a scalar problem
    and 2D elasticity's 3 rigid body modes up to 96, 192 for 3D elasticity's 6).

    Examples
    --------
    >>> default_max_per_subdomain(0), default_max_per_subdomain(3), default_max_per_subdomain(6)
    (48, 96, 192)
    """
    return max(MAX_PER_SUBDOMAIN, MAX_PER_NULL_VECTOR * int(null_vectors))


#: GenEO's eigenproblems are solved by a subspace iteration for this many wanted vectors per
#: subdomain plus extra ones, grown (up to ``max_per_subdomain``) to a quarter more than the
#: most eigenvalues below the threshold found in a subdomain while some subdomain has more than
#: wanted; the grown subspace starts from the Ritz vectors so far.  Growing by a quarter more
#: than found instead of doubling: 2D elasticity with stiff disks (128 parts, 27 eigenvalues
#: below the threshold at most) 60 columns -> 41, GenEO's set-up 4.0 -> 2.8 s, the same
#: coarse space; channels, 3D elasticity and 3D Poisson unchanged or slightly faster (with
#: cold restarts the repeated growths had made 3D elasticity slower).
GENEO_INITIAL_VECTORS = 12

#: Vectors beyond those wanted: at least this many and a quarter of the wanted ones (they
#: speed up the convergence of the last wanted eigenvalues, whose rate is the ratio of
#: theirs to the first eigenvalue outside the subspace, and tell whether more are below the
#: threshold).
GENEO_EXTRA_VECTORS = 4

#: After the inertia counts (with PARDISO), the subdomains are chunked again by their
#: counts, and a chunk is split in two where that saves at least this fraction of its
#: subspace columns: every subdomain of a chunk iterates with the subspace of the chunk's
#: largest count, so counts of 14 to 42 in one chunk (3D elasticity) solved 52 columns for
#: all.  1 splits nothing.  Measured (GenEO's set-up, one thread, best of two, in three
#: runs against 1; 1 / 0.25 / 0.15 / 0.1; finite-element Neumann matrices on elasticity):
#: 3D elasticity 2.01 / 1.93 / 1.75 / 1.65 s, 2D elasticity 0.88 / 0.90 / 0.88 / 0.89 s,
#: the channels 0.42 / 0.42 / 0.40 / 0.40 s, the log-normal field, 3D Poisson and the 3D
#: inclusions within 1 %; the same coarse dimensions and CG iterations within one.  0.15
#: gains where counts spread and loses nowhere measurably.
GENEO_COUNT_SPLIT = 0.15

#: Eigenvalues within this fraction of the threshold below it count as equal to it (not
#: selected): GenEO at ``threshold=1`` on the channels of contrast 1e6 has a cluster of 30
#: to 40 eigenvalues 1 per subdomain (vectors on the unknowns of weight 1), which the
#: rounding of their Ritz values would otherwise split at random.
THRESHOLD_TIE_RTOL = 1e-8

#: At most this many subspace iterations, counted in sparse solves with ``N_i + sigma D_i
#: A_i D_i`` for all subdomains of a chunk at once (a step of the Chebyshev filter of
#: :data:`GENEO_FILTER_DEGREE` is that many solves, then one batched Rayleigh-Ritz step);
#: ``stats["subspace_iterations"]`` counts the same.
GENEO_MAX_ITERATIONS = 60

#: The shift of the shift-and-invert iteration, ``sigma``, as a fraction of the threshold.
#: An eigenvalue ``lambda_j`` converges at the rate ``(lambda_j + sigma) / (lambda_{b+1} +
#: sigma)`` per iteration (``b`` the subspace size), so a small shift speeds up the pairs near
#: the threshold; a positive one keeps ``N_i + sigma B_i`` definite on the kernel of a
#: floating ``N_i``.  Measured (process CPU seconds of GenEO from ``A``, one thread, contrast
#: 1e6), shift at the threshold (before) / a tenth of it: 2D P1 elasticity, 50,880
#: unknowns, 128 parts, 35 -> 24 iterations in the largest chunk, 4.3 -> 2.8 s for the whole
#: basis; 3D, 19,494 unknowns, 64 parts, 17.4 -> 13.1 s.  A hundredth gave no further gain.
GENEO_SHIFT = 0.1

#: After the first step, each step of the subspace iteration applies a Chebyshev polynomial
#: of this degree in ``S = (N_i + sigma B_i)^{-1} B_i`` (one solve per degree), which damps
#: the eigenvalues of ``S`` below ``1 / (theta + sigma)`` (``theta`` the subspace's largest
#: Ritz value, at most :data:`GENEO_FILTER_CAP` times the threshold) against the wanted ones
#: better than as many plain steps.  Measured (process CPU seconds of the basis, one
#: thread, contrast 1e6; degree 1 / 2): 2D P1 elasticity, 50,880 unknowns, 128 parts, 2.92
#: -> 2.16; 3D, 19,494 unknowns, 64 parts, 12.4 -> 12.4 (few steps there).  Higher degrees
#: lose the vectors near the threshold to rounding beside the kernel's (degree 4 at this
#: shift stalled, degree 6 selected garbage), or, at a larger shift that keeps them, were
#: no faster.
GENEO_FILTER_DEGREE = 2

#: The filter's cut-off uses at most this many times the threshold (a Ritz value far above
#: it would stretch the polynomial's range without damping anything wanted).
GENEO_FILTER_CAP = 4.0

#: A GenEO Ritz value below half the threshold has converged when one subspace iteration
#: changes it by at most this fraction of the threshold (1e-3 between half the threshold
#: and the threshold; the subspace of the eigenvectors below it, not every single vector,
#: is what the coarse space needs).
GENEO_RESIDUAL_RTOL = 1e-6

#: Where PARDISO is installed, the inertia of ``N - tau B`` on a chunk of subdomains (one
#: symmetric indefinite factorisation) counts its eigenvalues below the threshold exactly.
#: Where the kernel of ``N_i`` (the null space's, or the constants', columns that ``N_i``
#: maps to zero) accounts for a subdomain's whole count, its eigenproblem is not solved;
#: elsewhere the count replaces the extrapolation rule below: the iteration stops when as
#: many Ritz values are below the threshold (Ritz values only decrease to the eigenvalues,
#: so none is missing then), unless a subdomain fills its cap.
GENEO_INERTIA = True

#: The factorisation of ``N + sigma B`` for the subspace iteration takes the fill-reducing
#: ordering of the inertia's factorisation of ``N - tau B`` (the same pattern), each
#: subdomain's own rows in their order there, instead of ordering again and probing two
#: orderings: about half of its analysis.  Measured (the factorisations of GenEO's chunks,
#: 3D elasticity with finite-element Neumann matrices, 22,800 unknowns, 64 parts, one
#: thread): 0.80 s -> 0.52 s, the same factor nonzeros; on the 2D channels 53 -> 43 ms.
GENEO_SHARED_ORDERING = True

#: Where the inertia counts each subdomain's eigenvalues below the threshold (PARDISO), the
#: eigenpairs come from a block Krylov method instead of the subspace iteration: the basis
#: ``X_0, S X_0, S^2 X_0, ...`` (``S = (N + sigma B)^{-1} B``, blocks of
#: :func:`_krylov_block` columns, orthonormal in the inner product of ``N + sigma B``),
#: with one batched Rayleigh-Ritz step after each solve and the stopping rules of the
#: subspace iteration (:data:`KRYLOV_UPPER_RTOL` above half the threshold).  The subspace
#: iteration's vectors after ``j`` solves lie in the Krylov space of degree ``j`` of its
#: start block (its Chebyshev filter is a polynomial in ``S``), so that space contains
#: them; built from narrower blocks, the Krylov method settles in fewer solved columns.
#: Measured (``benchmarks/geneo_krylov.py``, the problems of
#: ``benchmarks/setup_profile.py``, one thread, best of three; subspace iteration /
#: Krylov): 43 to 71 % fewer columns solved, GenEO's set-up 1.04x (3D Poisson) to 1.21x
#: (3D elasticity) faster, the same coarse dimensions and CG iterations.
GENEO_KRYLOV = True

#: The block Krylov method's block: a third of the subspace, at least this many columns ...
GENEO_KRYLOV_MIN_BLOCK = 4

#: ... and at most this many.
GENEO_KRYLOV_MAX_BLOCK = 12

#: When a subdomain's subspace iteration stops (``eigen_stop``):
#:
#: * ``"settled"`` (the default): its Ritz values below the threshold have settled to
#:   :data:`GENEO_RESIDUAL_RTOL` (to ``1e-3`` times the threshold above half of it), and
#:   the inertia's count of eigenvalues below the threshold is reached (without PARDISO, the
#:   first Ritz value above the threshold has settled, :data:`GENEO_BOUNDARY_RTOL`);
#: * ``"count"``: as soon as it holds as many Ritz values below the threshold as the
#:   inertia counts and those below :data:`GENEO_COUNT_SETTLE` times the threshold have
#:   settled, after at least one filter step (where the cap bites the kept ones must all
#:   settle; without PARDISO there is no count and it is ``"settled"``).  Every eigenvalue
#:   below the threshold then has a Ritz vector in the coarse space, those near the
#:   threshold not converged: an inexact shortcut, faster, and no longer the same basis on
#:   other chunks of subdomains (ranks, chunk sizes) to the digits ``"settled"`` gives.
#:
#: Measured: ``docs/adaptive.md``, "When an eigensolve stops" (``python
#: benchmarks/geneo_eigen_stop.py``): 1.11 to 1.19 times faster set-up + solve on the six
#: problems of ``benchmarks/setup_profile.py``, the same coarse dimensions and iterations
#: (3D elasticity 46 -> 49).  Not the default: the dense references of the eigenvalues near
#: the threshold, and the rank-local build of :mod:`ddops.distributed` reproducing the
#: serial basis to 1e-3, hold for the settled iteration only (with ``"count"``: 7e-3 on
#: the channels, 2.4e-2 on elasticity).
GENEO_EIGEN_STOP = "settled"

#: With ``eigen_stop="count"`` the Ritz values below this fraction of the threshold must
#: still settle (to :data:`GENEO_RESIDUAL_RTOL` of the threshold): the eigenvectors far below
#: it carry the high-contrast modes that the coarse space must hold accurately, and they
#: converge fastest.  Measured, 2D elasticity with stiff disks on two thirds of the unknowns
#: (oversampled local matrices), condition number at contrasts 1e3, 1e6 and 1e8: settled
#: 8.1, 8.1, 8.1; count alone (0) 8.1, 8.2, 19.9; count with 0.1 8.1, 8.1, 8.1.  It adds
#: 1-3 % to the count alone's set-up + solve on five of the six problems of
#: :data:`GENEO_EIGEN_STOP`'s measurement and 12 % on the channels (3 -> 5 solves); the 1e-2
#: settle of every Ritz value below the threshold gave back most of the time saved.
GENEO_COUNT_SETTLE = 0.1

#: The accepted values of ``eigen_stop`` (:data:`GENEO_EIGEN_STOP`).
EIGEN_STOPS = ("settled", "count")

#: Rows (padded) per chunk of subdomains of GenEO's eigenproblems: one inertia, one
#: shifted factorisation and one subspace iteration each.  PARDISO's analysis of a stack
#: grows faster than its rows (see :data:`ddops.precond.corrections.LOCAL_GROUP_ROWS`):
#: measured against chunks of four times as many rows (process CPU seconds of the set-up,
#: one thread), 3D elasticity with finite-element Neumann matrices (22,800 unknowns, 64
#: parts) 2.73 / 2.76 -> 2.31 / 2.28 s, from A alone 3.77 / 3.65 -> 3.22 / 3.22 s, the 2D
#: log-normal field 2.09 / 2.17 -> 1.88 / 2.02 s, the channels 0.58 / 0.60 -> 0.54 / 0.56 s;
#: the same coarse dimensions and CG iterations within one (the subspace iteration stops on
#: its tolerance per chunk, so the chunks move the basis within it, as threads do).
GENEO_CHUNK_ROWS = FACTOR_CHUNK_ROWS

#: A candidate kernel column ``z`` of ``N_i`` is in it when ``|N_i z| <= GENEO_KERNEL_RTOL
#: max|diag N_i| |z|``.
GENEO_KERNEL_RTOL = 1e-10

#: ... and the first Ritz value above the threshold when its change is at most this fraction
#: of its distance to the threshold, or when its decrease so far, extrapolated geometrically
#: (the rate of its last two changes, twice what is left), keeps it above the threshold.
#: Ritz values decrease to the eigenvalues, so then no eigenvalue below the threshold is
#: missing, up to the extrapolation, which cannot see an eigenvalue whose vector has not
#: yet entered the subspace.  Against dense eigenproblems on 24 draws of 2D elasticity with
#: small stiff disks (1,300 to 3,444 unknowns, 16 to 32 parts, contrast 1e6) it missed one
#: eigenvalue in 4 draws, at 0.81 to 0.93 times the threshold; the rule it replaces (a
#: change of at most 1e-2 of the Ritz value or half its distance to the threshold) missed
#: in 11 of the 20 draws where both ran, down to 0.75 times the threshold.  On 2D
#: elasticity, 50,880 unknowns, 128 parts, contrast 1e6, the old rule missed 7 of the 943
#: eigenvalues below the threshold and this one none (checked by the inertia of ``N_i - tau
#: D_i A_i D_i`` per subdomain).  A rate from the last three changes instead of two found
#: two of the four misses, for 28 % more eigensolver time on 3D elasticity, and was left.
GENEO_BOUNDARY_RTOL = 1e-2

#: Default of ``skip_contrast``: 0, every subdomain's eigenproblem is solved.  With a
#: factor above 1, a subdomain around which the diagonal of ``A`` varies by at most that
#: factor (over the subdomain and the subdomains overlapping it,
#: :func:`ddops.dd.indicators.subdomain_contrast`) solves none and keeps its Nicolaides
#: functions (``D_i Z``, the constants without a null space) only.  Unlike AGDSW's
#: indicator this is not free: on a homogeneous region GenEO selects geometric modes that
#: Nicolaides lacks.  Measured with 10 (``benchmarks/agdsw_indicator.py --space geneo``,
#: one thread): 3D Poisson 50^3, 62 parts, every subdomain skipped, set-up + solve 2.27 ->
#: 1.25 s for 32 -> 45 iterations; 3D elasticity with stiff balls, one subdomain of 64
#: skipped, the same iterations; none on 2D elasticity, the channels and the log-normal
#: field.  A win on one problem of five, so it is off by default.
GENEO_SKIP_CONTRAST = 0.0


def geneo_basis(
    A: Any,
    decomposition: Any,
    *,
    null_space: Any = None,
    neumann: Any = None,
    threshold: float | None = None,
    max_per_subdomain: int | None = None,
    oversampling: int | None = None,
    dependence_rtol: float = DEPENDENCE_RTOL,
    skip_contrast: float | None = None,
    eigen_stop: str | None = None,
    analysis: Any = None,
    return_info: bool = False,
    _block: tuple[np.ndarray, float] | None = None,
    _contrast: np.ndarray | None = None,
):
    """GenEO coarse basis: eigenvectors of ``N_i v = lambda D_i A_i D_i v`` below a threshold.

    Parameters
    ----------
    A : sparse matrix or array
        Symmetric positive definite ``num_dofs x num_dofs`` matrix.
    decomposition : Decomposition
        The overlapping subdomains and partition-of-unity weights ``D_i``.
    null_space : array, shape (num_dofs, k), optional
        Its Nicolaides functions ``R_i^T D_i R_i Z`` come first (default: none; the
        eigenvectors of a floating subdomain hold the kernel of ``N_i`` anyway).
    neumann : sequence of sparse matrices, optional
        One symmetric positive semidefinite ``n_i x n_i`` matrix per subdomain, in the
        order of the subdomain's unknowns (``decomposition.subdomains[i]``), e.g.
        ``ddops.problems.fem_elasticity_2d(..., neumann=d)``.  Default: computed from
        ``A``, with the couplings that leave the subdomain cut (:mod:`ddops.dd.eigen`) for
        a diagonally dominant ``A``, else oversampled (:mod:`ddops.dd.oversampling`).
    threshold : float, optional
        Keep ``lambda < threshold`` (default :data:`~ddops.dd.geneo.GENEO_THRESHOLD`, or
        :data:`~ddops.dd.geneo.GENEO_OVERSAMPLED_THRESHOLD` with oversampled local
        matrices).
    oversampling : int, optional
        Layers of the graph of ``A`` added to every subdomain (then the stiff growth of
        :func:`~ddops.dd.oversampling.oversampled_sets`) for the local matrices computed
        from ``A``: the Schur complement onto the subdomain of the grown set's matrix.
        Default: 0 (no growth) for a diagonally dominant ``A``, otherwise
        :data:`~ddops.dd.oversampling.OVERSAMPLING_LAYERS` (2), or
        :data:`~ddops.dd.oversampling.OVERSAMPLING_LAYERS_3D` (1) when the decomposition's
        ``block_size`` is at least 3; 0 on a matrix that is not diagonally dominant is
        refused.  Not with ``neumann``.
    max_per_subdomain : int, optional
        At most this many eigenvectors per subdomain, the Ritz vectors of the smallest
        Ritz values, settled to 5 % of the largest kept one: where more eigenvalues than
        the subspace holds cluster far below the threshold, vectors of that cluster rather
        than its smallest eigenvectors (default
        :func:`~ddops.dd.geneo.default_max_per_subdomain` of the null space's ``k``: 48
        without one, 96 with 3 vectors, 192 with 6); a ``RuntimeWarning`` says where it
        bites.
    dependence_rtol : float
        Relative tolerance of the dependent-function removal.
    skip_contrast : float, optional
        No eigenproblem on a subdomain around which the diagonal of ``A`` varies by at most
        this factor (:func:`~ddops.dd.indicators.subdomain_contrast`, the subdomain and its
        overlapping neighbours): it keeps its Nicolaides functions only (``D_i Z``, or
        ``D_i 1`` without a null space).  Default
        :data:`~ddops.dd.geneo.GENEO_SKIP_CONTRAST` (0: every subdomain solves its own).
        An indicator, not part of GenEO's bound: see that constant for what it costs.
    eigen_stop : {"settled", "count"}, optional
        When a subdomain's eigensolve stops: its Ritz values settled (default
        :data:`~ddops.dd.geneo.GENEO_EIGEN_STOP`), or as soon as it holds as many Ritz
        values below the threshold as the inertia of ``N_i - threshold D_i A_i D_i``
        counts, its Ritz values far below it settled (``"count"``: faster, inexact; with
        PARDISO only, see that constant).
    analysis : ddops.dd.analysis.GDSWAnalysis, optional
        The elimination order of the subdomains' own factorisation that it shares
        (:meth:`~ddops.dd.analysis.GDSWAnalysis.share_local_order`, as
        :class:`~ddops.TwoLevelSchwarz` does) orders the factorisations of the
        eigenproblems instead of PARDISO's own ordering step (the same basis to
        rounding).  Ignored with oversampling (the grown sets are not the subdomains).
    return_info : bool
        Also return an :class:`~ddops.dd.eigen.AdaptiveInfo`.
    _block : (numpy.ndarray, float), optional
        Private (the rank-local build of :mod:`ddops.distributed`): ``A`` is the block of a
        larger matrix on a set of unknowns that holds the subdomains, their grown sets and
        the neighbours of those; ``(outside, reference)``: ``outside[j]`` the absolute sum
        of row ``j``'s couplings to the rest of that matrix, which the cut local matrices and
        the dominance test count as well, and ``reference`` the
        :func:`~ddops.dd.oversampling.stiff_reference` of its diagonal (the stiff growth's
        measure).
    _contrast : numpy.ndarray, optional
        Private (the same build): the subdomains' :func:`subdomain_contrast` on the whole
        matrix, which the block cannot give for neighbours on other processes.

    Returns
    -------
    Phi : scipy.sparse.csr_matrix
        ``num_dofs x n0``, ordered by subdomain, then null-space vectors, then
        eigenvectors in increasing ``lambda``.  ``n0 = 0`` when no subdomain has an
        eigenvalue below the threshold (and no null space is given): then the
        one-level method already satisfies the bound.
    info : AdaptiveInfo
        Only with ``return_info=True``.
    """
    start = time.perf_counter()
    d = decomposition
    for name in ("indices", "sizes", "num_subdomains", "num_dofs", "multiplicity"):
        if not hasattr(d, name):
            raise TypeError("decomposition must be a ddops Decomposition, got "
                            f"{type(d).__name__}")
    layers = check_oversampling(oversampling)
    cap = check_cap("max_per_subdomain", max_per_subdomain, -1)  # -1: the default, below
    rtol = check_positive_float("dependence_rtol", dependence_rtol)
    skip = check_skip_contrast(skip_contrast, GENEO_SKIP_CONTRAST)
    stop = check_eigen_stop(eigen_stop)
    if not isinstance(return_info, (bool, np.bool_)):
        raise TypeError(f"return_info must be a bool, got {type(return_info).__name__}")
    A = check_matrix(A)
    n, N = d.num_dofs, d.num_subdomains
    if A.shape[0] != n:
        raise ValueError(f"A must have shape ({n}, {n}) (decomposition.num_dofs), got "
                         f"{A.shape}")
    Z = None if null_space is None else check_null_space(null_space, n)
    k = 0 if Z is None else Z.shape[1]
    if cap < 0:
        cap = default_max_per_subdomain(k)
    sizes = d.sizes.astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    group = np.repeat(np.arange(N), sizes)
    within = np.arange(d.indices.size) - offsets[group]
    w = d.entry_weights("full")  # D_i on the packed entries (a region's: the global weights)
    _outside, _reference = (None, None) if _block is None else _block
    if neumann is None:
        bad = not_dominant_rows(A, _outside)
        dominant = bad.size == 0
        if layers is None:
            layers = 0 if dominant else default_oversampling(int(getattr(d, "block_size", 1)))
        tau = check_threshold(threshold, GENEO_THRESHOLD if dominant and layers == 0
                              else GENEO_OVERSAMPLED_THRESHOLD)
        if layers == 0 and not dominant:
            raise ValueError(f"geneo: A is not diagonally dominant (row {int(bad[0])} and "
                             f"{bad.size - 1} more), so the local matrices with its outside "
                             "couplings cut are not positive semidefinite; use "
                             "oversampling >= 1 (the default), or pass neumann= (one matrix "
                             "per subdomain, e.g. from ddops.problems.fem_elasticity_2d(..., "
                             "neumann=d))")
    else:
        if layers is not None:
            raise ValueError("oversampling is used only without neumann= (it builds the local "
                             "matrices from A)")
        tau = check_threshold(threshold, GENEO_THRESHOLD)
        dominant, layers = True, 0
        user_neumann = check_neumann(neumann, sizes)
    # an eigenvalue equal to tau up to rounding is not below it (a cluster at the threshold
    # would be split by the last digits of its Ritz values)
    below = tau * (1.0 - THRESHOLD_TIE_RTOL)
    # the entries of A inside every (grown) subdomain, one stacked COO; A_i's are those of
    # the subdomain's own rows and columns (first in every grown set)
    ext_sizes, pairs, cut, k1, ring = _local_matrices(A, d, group, within, layers,
                                                      dominant and neumann is None, _outside,
                                                      _reference)
    own = (pairs[1] < sizes[pairs[0]]) & (pairs[2] < sizes[pairs[0]])
    b_sub, b_r, b_c, b_v = (x[own] for x in pairs)
    if neumann is None:
        nm_sub, nm_r, nm_c, nm_v = (np.concatenate([x, y]) for x, y in zip(pairs, cut,
                                                                           strict=True))
    else:
        nm_sub, nm_r, nm_c, nm_v = user_neumann
    del pairs, cut
    # k0: subdomains meeting one subdomain (itself included)
    inc = sp.csr_matrix((np.ones(d.indices.size), (group, d.indices)), shape=(N, n))
    k0 = int(np.diff((inc @ inc.T).tocsr().indptr).max())
    eig_start = time.perf_counter()
    padded, ladder = size_groups(ext_sizes)
    # unknowns per node: where every grown set holds whole nodes, the padded widths are
    # multiples of it too, so that the inertia's own ordering of a chunk can order its
    # node graph (the padding rows, decoupled, make whole nodes of their own)
    node_size = int(getattr(d, "block_size", 1))
    if node_size > 1 and local_solvers.PARDISO_NODE_MINIMUM_DEGREE and not np.any(
            ext_sizes % node_size):
        padded = -(-padded // node_size) * node_size
        ladder = np.unique(padded)
    else:
        node_size = 1
    kept_vals = []  # (subdomains, slots, values on their rows) of the kept eigenvectors
    selected = np.zeros(N, dtype=np.int64)
    smallest = np.full(N, np.inf)
    capped = 0
    largest = 0
    # the subdomains in processing order (by padded size), and the entries sorted by the rank
    # of their subdomain: a chunk gathers its members' runs of them (the chunks cut by the
    # inertia's counts are not contiguous ranks), so the set-up stays linear in the entries
    order = np.argsort(padded, kind="stable")
    rank = np.empty(N, dtype=np.int64)
    rank[order] = np.arange(N)
    ent_order = np.argsort(rank[group], kind="stable")
    ent_off = np.searchsorted(rank[group][ent_order], np.arange(N + 1))
    b_order = np.argsort(rank[b_sub], kind="stable")
    b_off = np.searchsorted(rank[b_sub][b_order], np.arange(N + 1))
    n_order = np.argsort(rank[nm_sub], kind="stable")
    n_off = np.searchsorted(rank[nm_sub][n_order], np.arange(N + 1))
    ring_idx, ring_grp, ring_row = ring
    r_order = np.argsort(rank[ring_grp], kind="stable")
    r_off = np.searchsorted(rank[ring_grp][r_order], np.arange(N + 1))
    # the inertia of N - tau B counts the eigenvalues below the threshold exactly (PARDISO);
    # the null space, or the constants without one, are the candidates for the kernel of N_i
    inertia = GENEO_INERTIA and default_exact_solver() == "pardiso"
    # each subdomain's rows of its grown set in the inertia's elimination order (chunks write
    # their own subdomains' slices; the shifted factorisation reads them back)
    order_off = np.concatenate([[0], np.cumsum(ext_sizes)])
    orders = (np.empty(int(order_off[-1]), dtype=np.int64)
              if inertia and GENEO_SHARED_ORDERING else None)
    # with finite-element Neumann matrices, or from A without oversampling, the grown sets
    # are the subdomains, and N_i and D_i A_i D_i have A_i's graph (the cut couplings go to
    # the diagonal): the subdomains' own factorisation's order serves both factorisations
    # of a chunk, with no ordering step (PCHPDDM shares the subdomain factorisation with
    # its eigensolver likewise)
    shared = (analysis.subdomain_orders() if analysis is not None and layers == 0
              and orders is not None else None)
    preordered = shared is not None and shared.size == orders.size
    if preordered:
        orders[:] = shared
    candidates = Z if k else np.ones((n, 1))
    iterations = 0
    unconverged, worst_drift = [], 0.0  # subdomains whose iteration hit its limit
    missing = []  # (subdomain, eigenvalues below tau that the inertia counts and it missed)
    def assemble(members: np.ndarray, width: int):
        """``N`` and ``B`` of the subdomains ``members`` (of one size group), stacked and
        padded to ``width`` rows; the real rows; the subdomains' packed entries and the
        positions of the subdomains in the stack."""
        m = members.size
        pos = np.full(N, -1, dtype=np.int64)
        pos[members] = np.arange(m)
        ent = _members_entries(ent_order, ent_off, rank[members])
        Dw = np.zeros(m * width)
        Dw[pos[group[ent]] * width + within[ent]] = w[ent]
        e = _members_entries(b_order, b_off, rank[members])
        br, bc = pos[b_sub[e]] * width + b_r[e], pos[b_sub[e]] * width + b_c[e]
        e2 = _members_entries(n_order, n_off, rank[members])
        nr, nc = pos[nm_sub[e2]] * width + nm_r[e2], pos[nm_sub[e2]] * width + nm_c[e2]
        # the rows of the (grown) subdomains; the rest pads the blocks to the same width
        real = (np.arange(width)[None, :] < ext_sizes[members][:, None]).ravel()
        pad_rows = np.flatnonzero(~real)
        shape = (m * width, m * width)
        Bs = sp.csr_matrix((Dw[br] * b_v[e] * Dw[bc], (br, bc)), shape=shape)
        Ns = sp.csr_matrix((np.concatenate([nm_v[e2], np.ones(pad_rows.size)]),
                            (np.concatenate([nr, pad_rows]), np.concatenate([nc, pad_rows]))),
                           shape=shape)
        Bs = ((Bs + Bs.T) * 0.5).tocsr()
        Ns = ((Ns + Ns.T) * 0.5).tocsr()
        return Ns, Bs, real, ent, pos

    def kernel_candidates(members: np.ndarray, width: int, ent: np.ndarray, pos: np.ndarray):
        """The candidate kernel columns on the grown sets of ``members``, stacked."""
        Zg = np.zeros((members.size * width, candidates.shape[1]))
        Zg[pos[group[ent]] * width + within[ent]] = candidates[d.indices[ent]]
        r = _members_entries(r_order, r_off, rank[members])
        Zg[pos[ring_grp[r]] * width + ring_row[r]] = candidates[ring_idx[r]]
        return Zg

    def count_chunk(members: np.ndarray, width: int):
        """The inertia of one chunk: the results of the subdomains whose count the kernel
        of ``N_i`` accounts for (as ``iterate_chunk`` returns them), the other
        subdomains and their counts (None where the inertia is not certain)."""
        Ns, Bs, real, ent, pos = assemble(members, width)
        ext = ext_sizes[members]
        out = _inertia_counts(Ns, Bs, below, members.size, width, None if not preordered else
                              _chunk_order(orders[_member_rows(order_off[members], ext)],
                                           ext, width), node_size)
        if out is None:
            return None, members, None
        counts, order = out
        if orders is not None and not preordered:
            orders[_member_rows(order_off[members], ext)] = _block_orders(order, width, ext)
        Zk, gram, k0 = _kernel_columns(Ns, Bs, kernel_candidates(members, width, ent, pos),
                                       members.size, width)
        known = (counts == k0) & (k0 <= cap)
        return (_kernel_selection(members[known], sizes, Zk[known], gram[known], k0[known], k),
                members[~known], counts[~known])

    def iterate_chunk(members: np.ndarray, width: int, counts: np.ndarray | None):
        """The eigenpairs of one chunk of subdomains padded to ``width`` rows (``counts``
        the eigenvalues below the threshold of each, from the inertia; None where unknown):
        the kept entries, the counts below the threshold, the smallest eigenvalues, the
        solves and the drift of the unconverged."""
        Ns, Bs, real, ent, pos = assemble(members, width)
        m = members.size
        smallest_size = int(sizes[members].min())
        if counts is None:
            wanted = max(1, min(GENEO_INITIAL_VECTORS, cap))
        else:  # as many as the largest count (the cap's worth where it bites)
            wanted = max(1, min(int(counts.max()), cap))
        try:
            # one factorisation of N + sigma B serves every size of the subspace
            shifted = _CountedSolves(_shifted_factor(
                Ns, Bs, GENEO_SHIFT * tau, m, width, None if (
                    orders is None or counts is None) else _chunk_order(
                        orders[_member_rows(order_off[members], ext_sizes[members])],
                        ext_sizes[members], width)))
        except SingularBlockError as exc:
            i = int(members[exc.block])
            raise ValueError(f"neumann: the matrix of subdomain {i} is not positive "
                             "semidefinite (its shifted matrix N_i + sigma D_i A_i D_i has "
                             "a non-positive or an off-diagonal pivot)"
                             if neumann is not None else
                             f"geneo: the local matrices of subdomain {i} are not positive "
                             "definite; A must be symmetric positive definite") from None
        V = None
        while True:  # grow the subspace while a subdomain fills it below tau
            block = min(int(_subspace_size(np.int64(wanted), cap)), smallest_size)
            grow = counts is None and wanted < cap and block < smallest_size
            # a grown subspace starts from the Ritz vectors so far (warm)
            lam, V, its, drift = _subspace_eigh(shifted, Ns, Bs, m, width, block, below,
                                                real, max(cap, 1), grow, wanted, V,
                                                GENEO_SHIFT * tau, counts, stop == "settled")
            found = int((lam < below).sum(axis=1).max())
            if not (grow and found > wanted):
                break
            # a quarter more than found so far (warm, a further growth costs little)
            wanted = min(max(wanted + GENEO_EXTRA_VECTORS, -(-5 * found // 4)), cap)
        solved = shifted.columns
        del shifted
        if neumann is not None:
            neg = lam[:, 0] < -1e-8 * np.maximum(1.0, np.abs(lam[:, :1]))[:, 0]
            if neg.any():
                i = int(members[np.flatnonzero(neg)[0]])
                raise ValueError(f"neumann: the matrix of subdomain {i} is not positive "
                                 "semidefinite (a negative generalized eigenvalue "
                                 f"{lam[np.flatnonzero(neg)[0], 0]:.3e})")
        if counts is not None:  # found fewer than the inertia counts (not where capped)
            short = np.minimum(counts, cap) - np.minimum((lam < below).sum(axis=1), cap)
            missing.extend(zip(members[short > 0].tolist(), short[short > 0].tolist()))
        if k:
            Zg = np.zeros((m * width, k))
            Zg[pos[group[ent]] * width + within[ent]] = Z[d.indices[ent]]
            BV = (Bs @ V.reshape(m * width, -1)).reshape(V.shape)
            BZ = (Bs @ Zg).reshape(m, width, k)
            V, lam = project_out(V, lam, BV, Zg.reshape(m, width, k), BZ)
        keep, count = select_eigenpairs(lam, below, cap)
        slot = np.cumsum(keep, axis=1) - 1
        g, j = np.nonzero(keep)
        kept = (members[g], slot[g, j], _subdomain_rows(np.swapaxes(V, 1, 2)[g, j],
                                                        sizes[members[g]]))
        return kept, count, lam.min(axis=1), its, drift, solved

    # the chunks: size groups in memory-bounded pieces (about 12 arrays of (rows x block)
    # floats and the sparse factors each), independent of one another
    chunks = []
    steps = {}
    # the subdomains whose eigenproblem runs (all but those the indicator skips)
    need = np.ones(N, dtype=bool)
    if skip > 0:
        need = (_contrast if _contrast is not None else subdomain_contrast(
            A.diagonal(), d, int(getattr(d, "block_size", 1)))) > skip
        smallest[~need] = np.nan  # (not computed)
    for width in ladder:
        members_all = np.flatnonzero((padded == width) & need)
        steps[int(width)] = step = max(1, GENEO_CHUNK_ROWS // int(width))
        if not members_all.size:
            continue
        largest = max(largest, int(ext_sizes[members_all].max()))
        chunks += [(members_all[c0:c0 + step], int(width))
                   for c0 in range(0, members_all.size, step)]
    results = []  # (members, their results)
    skipped = 0
    if inertia:
        # first the inertia of every chunk; the subdomains it does not settle are then
        # chunked again by their counts, so that each chunk's subspace fits its own
        # subdomains (a subdomain with many eigenvalues below the threshold no longer
        # widens the subspace of its whole size group)
        rest, rest_counts, uncertain = [], [], []
        for (members, width), (done, others, counts) in zip(
                chunks, map_chunks(count_chunk, chunks), strict=True):
            if counts is None:
                uncertain.append((others, width, None))
                continue
            results.append((members[np.isin(members, others, invert=True)], done))
            skipped += members.size - others.size
            rest.append(others)
            rest_counts.append(counts)
        chunks = uncertain
        if rest:
            rest, rest_counts = np.concatenate(rest), np.concatenate(rest_counts)
            by = np.lexsort((rest_counts, padded[rest]))
            rest, rest_counts = rest[by], rest_counts[by]
            for width in ladder:
                at = np.flatnonzero(padded[rest] == width)
                bounds = _count_chunk_bounds(rest_counts[at], steps[int(width)], cap)
                chunks += [(rest[at[c0:c1]], int(width), rest_counts[at[c0:c1]])
                           for c0, c1 in zip(bounds[:-1], bounds[1:], strict=True)]
    else:
        chunks = [(members, width, None) for members, width in chunks]
    results += [(members, out) for (members, _, _), out in zip(
        chunks, map_chunks(iterate_chunk, chunks), strict=True)]
    if not k and not need.all():
        # the skipped subdomains' constants (their Nicolaides functions; with a null space
        # D_i Z comes below as for every subdomain)
        sub = np.flatnonzero(~need)
        kept_vals.append((sub, np.zeros(sub.size, dtype=np.int64),
                          np.ones(int(sizes[sub].sum()))))
    solved_columns = 0
    for members, (kept, count, low, its, drift, solved) in results:
        solved_columns += solved
        kept_vals.append(kept)
        selected[members] = count
        smallest[members] = low
        capped += int((count > cap).sum())
        iterations = max(iterations, its)
        unconverged.extend(members[np.flatnonzero(drift > 0)].tolist())
        worst_drift = max(worst_drift, float(drift.max()) if drift.size else 0.0)
    warn_cap(capped, "subdomains", "max_per_subdomain", cap)
    if unconverged:  # once for the whole set-up
        shown = ", ".join(str(i) for i in sorted(unconverged)[:10])
        warn(f"geneo: the subspace iteration stopped at its limit of {GENEO_MAX_ITERATIONS} "
             f"solves before its Ritz values settled on {len(unconverged)} subdomain(s) "
             f"({shown}{', ...' if len(unconverged) > 10 else ''}): the last iteration still "
             f"changed them by up to {worst_drift:.1e} times the threshold, so the selected "
             "functions there are unconverged Ritz vectors and may miss eigenvectors below "
             "the threshold (a threshold inside a cluster of eigenvalues converges slowest; "
             "move it away from the cluster)", RuntimeWarning)
    if missing:
        subs, short = (np.array(x) for x in zip(*sorted(missing), strict=True))
        shown = ", ".join(str(i) for i in subs[:10])
        warn(f"geneo: the inertia of N_i - threshold D_i A_i D_i counts {int(short.sum())} "
             f"eigenvalue(s) below the threshold that the subspace iteration did not find, on "
             f"{subs.size} subdomain(s) ({shown}{', ...' if subs.size > 10 else ''}): their "
             "eigenvectors are missing from the coarse space (they lie close below the "
             "threshold, where the iteration converges slowest; a threshold away from them "
             "avoids it)", RuntimeWarning)
    eigen_seconds = time.perf_counter() - eig_start
    # the columns on the packed entries: [D Z, D v_1, D v_2, ...] of every subdomain; the
    # eigenvectors as runs (one per subdomain and slot, on its packed entries), not a dense
    # (entries x slots) array whose slots most subdomains leave empty
    VZ = Z[d.indices] * w[:, None] if k else np.zeros((d.indices.size, 0))
    e_sub = np.concatenate([sub for sub, _, _ in kept_vals] or [[]]).astype(np.int64)
    e_slot = k + np.concatenate([slot for _, slot, _ in kept_vals] or [[]]).astype(np.int64)
    e_len = sizes[e_sub]
    e_first = np.cumsum(e_len) - e_len  # each run's first value
    # D_i on each value's packed entry
    e_val = np.concatenate([val for _, _, val in kept_vals] or [[]]) * w[
        np.arange(int(e_len.sum())) + np.repeat(offsets[e_sub] - e_first, e_len)]
    width = int(e_slot.max()) + 1 if e_slot.size else k
    nonzero = np.zeros((N, width), dtype=bool)
    r, c = np.nonzero(VZ)
    nonzero[group[r], c] = True
    if e_sub.size:  # the runs with a nonzero value (no run is empty: no subdomain is)
        some = np.logical_or.reduceat(e_val != 0, e_first)
        nonzero[e_sub[some], e_slot[some]] = True
    # Gram-Schmidt for the null-space vectors only: the eigenvectors of a subdomain are
    # B-orthonormal and B-orthogonal to them already (independent), and a global check of
    # the whole basis follows
    keep = nonzero.copy()
    if k:
        keep[:, :k] = independent_vectors(group, VZ, N, rtol) & nonzero[:, :k]
    col_group, col_vec = np.nonzero(keep)
    # the Nicolaides functions: D_i Z, and the constants of the subdomains skipped without Z
    nicolaides = (col_vec < k) | ~need[col_group]
    if keep.any():
        # the null-space vectors as runs too (a subdomain's entries are consecutive), ahead
        # of the eigenvectors': one slice of Phi^T per column
        run_sub = np.concatenate([np.tile(np.arange(N), k), e_sub])
        run_slot = np.concatenate([np.repeat(np.arange(k), N), e_slot])
        Phi, _ = columns_from_groups(d.indices, group, VZ[:, :0], keep, n, runs=(
            run_sub, run_slot, offsets[run_sub], sizes[run_sub],
            np.concatenate([VZ.T.ravel(), e_val])))
        Phi, cols, A0 = drop_dependent_columns(A, Phi, first=nicolaides, return_matrix=True)
    else:  # no eigenvalue below the threshold anywhere (and no null space)
        Phi, cols = sp.csr_matrix((n, 0)), np.zeros(0, dtype=np.int64)
        A0 = None
    dropped = int(nonzero.sum() - cols.size)
    col_group, nicolaides = col_group[cols], nicolaides[cols]
    if not return_info:
        return Phi
    kept = np.bincount(col_group[~nicolaides], minlength=N)
    # the bound needs positive semidefinite local matrices whose sum is at most k1 A: not
    # shown for clamped couplings (a matrix that is not diagonally dominant)
    bound = ((1 + k0) * (2 + k0 * (2 * k0 + 1) * max(1.0, k1 / tau)) if dominant
             else float("nan"))
    info = AdaptiveInfo(
        method="geneo", threshold=tau, column_group=col_group,
        column_kind=np.where(nicolaides, "null_space", "eigenvector"),
        selected=selected, kept=kept, eigenvalues=smallest, coarse_matrix=A0,
        stats={"coarse_dim": int(Phi.shape[1]), "null_space_functions": int(nicolaides.sum()),
               "eigen_functions": int(kept.sum()), "dropped_dependent": dropped,
               "capped": capped, "kept_per_subdomain": kept,
               "eigenproblems": int(N), "largest_eigenproblem": largest,
               "eigen_seconds": eigen_seconds, "extension_seconds": 0.0,
               "subspace_iterations": iterations, "solved_columns": solved_columns,
               "shared_ordering": bool(preordered),
               "skipped_eigenproblems": skipped + int((~need).sum()),
               "skipped_by_contrast": int((~need).sum()),
               "k0": k0, "k1": k1, "bound": float(bound),
               "oversampling": layers, "oversampled_size": float(ext_sizes.sum() / sizes.sum()),
               "seconds": time.perf_counter() - start})
    return Phi, info


def check_eigen_stop(value: Any) -> str:
    """``eigen_stop`` checked: one of :data:`EIGEN_STOPS` (None: :data:`GENEO_EIGEN_STOP`)."""
    if value is None:
        return GENEO_EIGEN_STOP
    if not isinstance(value, str):
        raise TypeError(f"eigen_stop must be one of {EIGEN_STOPS} (a str), got "
                        f"{type(value).__name__} {value!r}")
    return check_choice("eigen_stop", value, EIGEN_STOPS)


def _local_matrices(A: sp.csr_matrix, d: Any, group: np.ndarray, within: np.ndarray,
                    layers: int, dominant: bool, outside: np.ndarray | None = None,
                    reference: float | None = None):
    """GenEO's local matrices from ``A``, on the subdomains grown by ``layers`` (and stiffness).

    Every subdomain's unknowns keep their positions; the ring ``w+ \\ w`` of
    :func:`ddops.dd.oversampling.oversampled_sets` follows them.  The entries of ``A`` inside
    each grown set, with the couplings that leave it cut from the diagonal where ``A`` is
    diagonally dominant (:mod:`ddops.dd.eigen`), clamped elsewhere.

    Returns
    -------
    ext_sizes : the sizes of the grown sets; the stacked entries ``(subdomain, row, col,
    value)`` of ``A`` inside them; the diagonal entries of the cut (empty unless
    ``dominant``), stacked alike; ``k1``, the most grown sets that hold one unknown; the
    rings ``(unknown, set, row)``.
    """
    n, N = A.shape[0], d.num_subdomains
    sizes = d.sizes.astype(np.int64)
    ring_idx, ring_grp = oversampled_sets(A, d.indices, group, N, layers,
                                          diagonal_reference=reference)
    ring_count = np.bincount(ring_grp, minlength=N)
    ring_off = np.concatenate([[0], np.cumsum(ring_count)])
    idx = np.concatenate([d.indices, ring_idx]).astype(np.int64)
    grp = np.concatenate([group, ring_grp]).astype(np.int64)
    pos = np.concatenate([within, sizes[ring_grp] + np.arange(ring_idx.size)
                          - ring_off[ring_grp]]).astype(np.int64)
    set_, row, col, source = entries_within_sets(A, idx, grp, pos, N)
    pairs = (set_, row, col, A.data[source])
    del source
    if dominant:  # the couplings that leave the grown set, cut from its diagonal
        leaving = outside_coupling(A, idx, grp, N)
        if outside is not None:  # (and those that leave the block A of a larger matrix)
            leaving = leaving + outside[idx]
        cut = (grp, pos, pos, -leaving)
    else:
        cut = (grp[:0], pos[:0], pos[:0], np.zeros(0))
    k1 = int(np.bincount(idx, minlength=n).max())
    ring = (ring_idx, ring_grp, pos[d.indices.size:])
    return sizes + ring_count, pairs, cut, k1, ring


def _inertia_counts(Ns: sp.csr_matrix, Bs: sp.csr_matrix, below: float, m: int,
                    width: int, order: np.ndarray | None = None, node_size: int = 1
                    ) -> tuple[np.ndarray, np.ndarray] | None:
    """The number of eigenvalues of ``N_i v = lambda B_i v`` below ``below`` for each of the
    ``m`` stacked blocks: the negative eigenvalues of ``N_i - below B_i`` (Sylvester's law
    of inertia, ``B_i`` positive semidefinite) from one symmetric indefinite factorisation
    of the chunk (:func:`~ddops.linalg.local_solvers.pardiso_inertia`), and that
    factorisation's ordering of the chunk's rows: ``order`` where given, else, with
    ``node_size`` above 1 dividing ``width``, the minimum degree of the chunk's node graph
    (:func:`~ddops.linalg.local_solvers.node_minimum_degree`), else PARDISO's own.  None
    when it is not certain (a perturbed or vanishing pivot)."""
    K = (Ns - Bs * below).tocsr()
    if order is None and node_size > 1 and width % node_size == 0:
        order = local_solvers.node_minimum_degree(K, node_size)
    out = pardiso_inertia(K, np.arange(m + 1) * width, return_order=True, order=order)
    return None if out is None else (out[0], out[2])


def _subspace_size(count: Any, cap: int) -> Any:
    """The subspace of a chunk whose largest count is ``count`` (before the smallest block
    size bounds it): the wanted vectors (at least one, at most ``cap``) and
    :data:`GENEO_EXTRA_VECTORS` more, or a quarter of the wanted ones if that is more."""
    wanted = np.maximum(1, np.minimum(count, cap))
    return wanted + np.maximum(GENEO_EXTRA_VECTORS, wanted // 4)


def _count_chunk_bounds(counts: np.ndarray, step: int, cap: int) -> np.ndarray:
    """Chunk boundaries of subdomains sorted by their counts (the eigenvalues below the
    threshold): every ``step`` subdomains, and a chunk split in two where that saves at
    least :data:`GENEO_COUNT_SPLIT` of its subspace columns (every subdomain of a chunk
    iterates with the subspace of the chunk's largest count, see :func:`_subspace_size`)."""
    counts = np.asarray(counts, dtype=np.int64)
    return split_padded_chunks(_subspace_size(counts, cap),
                               np.append(np.arange(0, counts.size, step), counts.size),
                               GENEO_COUNT_SPLIT)


def _members_entries(order: np.ndarray, off: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """The entries ``order[off[r]:off[r + 1]]`` of every rank ``r`` of ``ranks`` in turn (the
    entries sorted by the rank of their subdomain, ``off`` where each rank's run starts)."""
    return order[_member_rows(off[ranks], off[ranks + 1] - off[ranks])]


def _member_rows(first: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The positions ``first[j] + r``, ``r < sizes[j]``, for every ``j`` in turn."""
    start = np.repeat(first - (np.cumsum(sizes) - sizes), sizes)
    return start + np.arange(int(sizes.sum()))


def _block_orders(order: np.ndarray, width: int, sizes: np.ndarray) -> np.ndarray:
    """The elimination order of a stack of blocks of ``width`` rows split per block: block
    ``j``'s real rows (the first ``sizes[j]``), numbered within it, in the order ``order``
    eliminates them, for every block in turn.

    On a block-diagonal matrix the fill of a block depends only on the order of its own rows
    among themselves, so these orders serve any other stack of the same blocks.
    """
    block = order // width
    row = order - block * width
    real = row < sizes[block]
    return row[real][np.argsort(block[real], kind="stable")]


def _chunk_order(local: np.ndarray, sizes: np.ndarray, width: int) -> np.ndarray:
    """The inverse of :func:`_block_orders`: an elimination order of a stack of blocks of
    ``width`` rows that eliminates block ``j``'s real rows in the order given for it in
    ``local`` (the blocks one after the other), then its padding rows (decoupled: no fill)."""
    m = sizes.size
    real = (np.arange(width)[None, :] < sizes[:, None]).ravel()
    order = np.arange(m * width)
    order[real] = local + np.repeat(np.arange(m) * width, sizes)
    return order


def _kernel_columns(Ns: sp.csr_matrix, Bs: sp.csr_matrix, Zg: np.ndarray, m: int,
                    width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The candidate columns ``Zg`` (stacked blocks) that lie in the kernel of each block of
    ``N``, zero elsewhere, ``(m, width, c)``; their ``B``-Gram matrices ``(m, c, c)``; and
    the number of ``B``-independent ones per block: so many eigenvalues 0 each block has
    for sure."""
    c = Zg.shape[1]
    Z3 = Zg.reshape(m, width, c)
    size = np.linalg.norm(Z3, axis=1)
    scale = np.abs(Ns.diagonal()).reshape(m, width).max(axis=1)
    residual = np.linalg.norm((Ns @ Zg).reshape(m, width, c), axis=1)
    inside = (size > 0) & (residual <= GENEO_KERNEL_RTOL * scale[:, None] * size)
    Zk = Z3 * inside[:, None, :]
    gram = np.swapaxes(Zk, 1, 2) @ (Bs @ Zk.reshape(m * width, c)).reshape(m, width, c)
    gram = 0.5 * (gram + np.swapaxes(gram, 1, 2))
    ev = np.linalg.eigvalsh(gram)
    independent = (ev > DEPENDENCE_RTOL * np.maximum(ev[:, -1:], 0.0)) & (ev[:, -1:] > 0)
    return Zk, gram, independent.sum(axis=1)


def _subdomain_rows(X: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The rows of each padded block ``X[c]`` (``(c, width)``) that belong to its subdomain
    (the first ``sizes[c]``), one block after the other."""
    return X[np.arange(X.shape[1])[None, :] < sizes[:, None]]


def _kernel_selection(members: np.ndarray, sizes: np.ndarray, Zk: np.ndarray,
                      gram: np.ndarray, k0: np.ndarray, k: int):
    """The result of :func:`geneo_basis`'s chunk where the inertia shows that every
    eigenvalue below the threshold belongs to the kernel found by :func:`_kernel_columns`:
    with a null space (``k > 0``) nothing beyond its span; without one (the constants, one
    candidate) the constants, ``B``-normalised, with eigenvalue 0.  No eigensolve, no
    iteration; the smallest eigenvalue outside that kernel is only known to be above the
    threshold (nan)."""
    m = members.size
    low = np.full(m, np.nan)
    if k or not k0.any():
        empty = np.zeros(0, dtype=np.int64)
        return ((empty, empty, np.zeros(0)), np.zeros(m, dtype=np.int64), low, 0,
                np.zeros(m), 0)
    g = np.flatnonzero(k0)
    low[g] = 0.0
    kept = (members[g], np.zeros(g.size, dtype=np.int64),
            _subdomain_rows(Zk[g, :, 0] / np.sqrt(gram[g, 0, 0])[:, None], sizes[members[g]]))
    return kept, k0.astype(np.int64), low, 0, np.zeros(m), 0


class _CountedSolves:
    """A chunk's shifted factorisation that counts the columns it solves
    (``stats["solved_columns"]``)."""

    def __init__(self, solver: BlockSolver) -> None:
        self.solver, self.columns = solver, 0

    def solve(self, X: np.ndarray) -> np.ndarray:
        self.columns += 1 if X.ndim == 1 else X.shape[1]
        return self.solver.solve(X)


def _shifted_factor(Ns: sp.csr_matrix, Bs: sp.csr_matrix, sigma: float, m: int,
                    width: int, order: np.ndarray | None = None) -> BlockSolver:
    """The factorisation of ``N + sigma B`` on ``m`` stacked blocks of ``width`` rows
    (PARDISO: by the fill-reducing ``order`` where given, see
    :data:`GENEO_SHARED_ORDERING`).

    By the exact solver of :func:`~ddops.linalg.local_solvers.default_exact_solver`
    (PARDISO when it is installed: on 3D elasticity its multi-column solves, which the
    subspace iteration repeats, take half of SuperLU's time), with the SPD test of the
    local solvers; raises :class:`~ddops.linalg.local_solvers.SingularBlockError` naming
    a block that fails it.
    """
    K = (Ns + Bs * sigma).tocsr()
    return factorize_blocks(K, np.arange(m + 1) * width, default_exact_solver(),
                            chunk_rows=FACTOR_CHUNK_ROWS, order=order)


def _pending(lam: np.ndarray, change: np.ndarray, tau: float, cap: int,
             boundary: np.ndarray, settle: bool, upper: float = 1e-3
             ) -> tuple[np.ndarray, np.ndarray]:
    """The stopping rule of GenEO's eigensolvers: which of the stacked blocks still iterate,
    and the last change of the Ritz values that decide each block's selection, relative to
    ``tau`` (its drift if the iteration stops there).

    ``lam`` are a block's ascending Ritz values, ``change`` their change in the last step,
    ``boundary`` whether nothing more hides below ``tau`` (the inertia's count reached, or
    the first Ritz value above ``tau`` settled), ``settle`` False for
    ``eigen_stop="count"`` (only the Ritz values below :data:`GENEO_COUNT_SETTLE` times
    ``tau`` must settle), ``upper`` the settle of the Ritz values between half of ``tau``
    and ``tau``, a fraction of ``tau`` (:data:`KRYLOV_UPPER_RTOL` for the block Krylov
    method).
    """
    m, block = lam.shape
    need = lam < tau
    first_above = np.minimum(need.sum(axis=1), block - 1)
    capped = lam[:, cap - 1] < tau if cap <= block else np.zeros(m, dtype=bool)
    # pairs close below tau converge slowest and matter least: they are selected whatever
    # their last digits (Ritz values only decrease), so they settle at a looser level
    settled = change <= tau * np.where(lam < 0.5 * tau, GENEO_RESIDUAL_RTOL, upper)
    # where the cap bites, the cap smallest are kept: those must settle (not any cap
    # Ritz values below tau, which after a few iterations can miss the kernel of a
    # floating N_i), and nothing decides at the boundary
    kept = need & (np.arange(block)[None, :] < cap)
    # ... to 5 % of the largest kept one: the kept pairs then lie in a cluster of
    # more eigenvalues than the subspace holds (3D elasticity with finite-element Neumann
    # matrices: 60 Ritz values between 2e-5 and 5e-5 moving by 3e-7 per step for 50
    # steps), whose single pairs converge slowly and need not (measured there: the
    # kernel's, far below the cluster, had settled first; nothing here checks it)
    if cap <= block:
        loose = change <= 5e-2 * np.abs(lam[:, cap - 1:cap])
        settled = np.where(capped[:, None], settled | loose, settled)
    # (eigen_stop="count": the inertia's count, and only the Ritz values far below tau
    # settled, GENEO_COUNT_SETTLE)
    unsettled = (np.any(need & ~settled, axis=1) if settle
                 else np.any((lam < GENEO_COUNT_SETTLE * tau) & ~settled, axis=1))
    pending = np.where(capped, np.any(kept & ~settled, axis=1), unsettled | ~boundary)
    # the last change of the Ritz values that decide the selection, relative to tau
    drift = np.where(kept, change, 0.0).max(axis=1) / tau
    drift = np.where(capped, drift, np.maximum(drift, change[np.arange(m), first_above] / tau))
    return pending, drift


def _krylov_block(block: int) -> int:
    """The block Krylov method's block for a subspace of ``block`` Ritz pairs: a third of
    it, within :data:`GENEO_KRYLOV_MIN_BLOCK` and :data:`GENEO_KRYLOV_MAX_BLOCK` (and at
    most ``block``)."""
    return min(block, max(GENEO_KRYLOV_MIN_BLOCK, min(GENEO_KRYLOV_MAX_BLOCK, -(-block // 3))))


#: A new Krylov direction whose norm after the orthogonalisation against the basis is at
#: most this fraction of its norm before (both in the inner product of ``N + sigma B``) is
#: dependent on the basis (a block's Krylov space exhausted, or an invariant subspace
#: found) and is left out.
KRYLOV_DEPENDENCE_RTOL = 1e-6

#: A block whose whole basis has ``lambda`` below this fraction of the shift ``sigma`` sits
#: under a threshold far above its pencil's spectrum (one that takes every eigenvalue):
#: ``S = K^{-1} B`` is a multiple of the identity to that fraction there, its powers
#: separate nothing, and the subspace iteration's filter takes over the chunk.  Such
#: thresholds give fractions below 1e-4; the ordinary ones of the set-up benchmark's
#: problems 0.19 or more (a subdomain of 3D elasticity whose stiff inclusions float).
KRYLOV_FLAT_SHIFT = 1e-3

#: The block Krylov method's Rayleigh-Ritz step takes its basis as K-orthonormal; where an
#: entry of ``V^T K V - I`` exceeds this (rounding in a pencil of high contrast, or a shift
#: far above a block's eigenvalues) the subspace iteration takes over the chunk.
KRYLOV_ORTHOGONALITY = 1e-6

#: The block Krylov method settles the Ritz values between half the threshold and the
#: threshold to this fraction of the threshold (the subspace iteration: 1e-3; below half of
#: it both take :data:`GENEO_RESIDUAL_RTOL`).  Its Ritz vectors settle no further than their
#: values, and the bases of other chunks of subdomains (the ranks' of
#: :mod:`ddops.distributed` and of the PETSc routes, an ``update``) stay near the serial one
#: only as far as they settle: at 1e-3 they came 3.5e-4 and, on elasticity, 2.2e-2 apart
#: (the tests allow 1e-4 and 2e-2), at 1e-4 at most 2.4e-4 (2D Poisson in METIS parts, the
#: PETSc routes, whose tests allow 1e-3, the serial reproduction the docs state).  1e-5
#: cost 2-9 % more columns and lost the gain on 2D elasticity.
KRYLOV_UPPER_RTOL = 1e-4

#: The block Krylov method's basis holds the subspace and this many blocks before it grows
#: (doubled, a copy of the basis so far): the method stops after 4 to 13 solves on the
#: problems of ``benchmarks/setup_profile.py``, each adding one block; unused capacity is
#: allocated, not written.  Measured against 4 (one thread, GenEO's set-up, best of three
#: to five interleaved rounds, the same basis bit for bit): 2D elasticity 1.03x to 1.10x in
#: three runs (its chunks grew once or twice, 0.06 s of copies), the other problems within
#: this machine's noise (0.95x to 1.03x).
KRYLOV_CAPACITY = 12

#: A block of the block Krylov method whose Ritz values have settled (the same rule as
#: for the whole chunk, :func:`_pending`) retires after at least two solves: its pairs are
#: taken then, and the chunk's later steps do their dense work (the orthogonalisation,
#: the Rayleigh-Ritz step) on the blocks still pending only.  False: every block runs
#: until the chunk's last one has settled (the pairs of the early ones a few steps more
#: converged).
KRYLOV_RETIRE = True

#: The Ritz value given to the slots beyond the basis while it is smaller than the
#: subspace, and to the directions of ``mu = 0`` (the kernel of ``B``, a left-out
#: direction): never below the threshold, never selected.
_LEFT_OUT = np.inf


def _gram_schmidt_twice(Y3: np.ndarray, V: np.ndarray, KVt: np.ndarray,
                        first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """K-orthogonalise the stacked columns ``Y3`` (``(m, rows, p)``) against the stacked
    K-orthonormal bases ``V`` (``(m, rows, k)``; ``KVt`` their ``(K V)^T``): classical
    Gram-Schmidt twice, the first pass with the coefficients ``first`` (``V^T K Y3``,
    known to the caller), the second computed.  Returns the new columns and all the
    coefficients removed (``(m, k, p)``).

    The block Krylov method knows the first pass's coefficients from its Rayleigh quotient
    (:func:`_block_krylov_eigh`), exactly up to the rounding of the solve that made
    ``Y3``; the second pass removes that with the rest, as it does the rounding of a
    computed first pass.  It saves one of the four products with a basis per step.
    """
    Y3 = Y3 - V @ first
    step = KVt @ Y3
    return Y3 - V @ step, first + step


def _block_krylov_eigh(shifted: BlockSolver, Ns: sp.csr_matrix, Bs: sp.csr_matrix, m: int,
                       width: int, block: int, tau: float, real: np.ndarray, cap: int,
                       counts: np.ndarray, sigma: float, settle: bool = True):
    """The ``block`` smallest eigenpairs of ``N v = lambda B v`` on ``m`` stacked blocks of
    ``width`` rows, by a block Krylov method (:data:`GENEO_KRYLOV`).

    The equivalent pencil ``B v = mu K v``, ``K = N + sigma B`` (symmetric positive
    definite: ``sigma`` the shift ``shifted`` factorises), ``mu = 1 / (lambda + sigma)``:
    the basis grows by one block of :func:`_krylov_block` columns per solve, ``S = K^{-1}
    B`` (one multi-column solve with ``shifted``, :func:`_shifted_factor`) applied to the
    newest block, K-orthogonalised against the basis (:func:`_gram_schmidt_twice`,
    batched over the blocks; ``K Y`` then formed afresh) and K-orthonormalised within
    itself, left out where dependent (:data:`KRYLOV_DEPENDENCE_RTOL`); then one batched
    Rayleigh-Ritz step on the whole basis (``V^T B V``, grown by the new block's rows,
    in one product with the new columns of ``V^T K V``, the orthogonality check;
    ``K`` is definite where ``B`` is not, so its entries stay below ``1 / sigma``, with no
    huge ones from directions near the kernel of ``B``).
    Nested bases make the largest Ritz values ``mu`` grow, so ``lambda = 1 / mu - sigma``
    decreases step by step to the eigenvalues, as in the subspace iteration, and the same
    rule stops it (:func:`_pending`, with the inertia's ``counts``), block by block
    (:data:`KRYLOV_RETIRE`); the start block is random (seed 0).  Padding rows (``real``
    False) stay zero.

    Returns what :func:`_subspace_eigh` returns (B-orthonormal Ritz vectors), the number of
    solves counted in blocks; None where the basis loses its K-orthogonality to rounding
    (:data:`KRYLOV_ORTHOGONALITY`: a cluster of eigenvalues at the threshold in a pencil of
    high contrast), or where a block's whole basis lies far below the shift
    (:data:`KRYLOV_FLAT_SHIFT`: a threshold that takes every eigenvalue), and the subspace
    iteration takes over.
    """
    rows = m * width
    p = _krylov_block(block)
    K = (Ns + Bs * sigma).tocsr()
    Y = np.random.default_rng(0).standard_normal((rows, p))
    Y[~real] = 0.0
    size = block + KRYLOV_CAPACITY * p  # the basis' capacity, doubled when it fills
    # the blocks still iterating are the first ``act.size`` of these (their original
    # positions in ``act``): a block whose Ritz values have settled retires, its pairs taken
    # then, and the others move to the front (the dense work of the last steps, where the
    # basis is largest, shrinks with them; the solves, and the sparse products with K and
    # B, stay on all the chunk's rows, the retired blocks' zero)
    Vt, KVt = np.empty((m, size, width)), np.empty((m, size, width))
    Gb = np.zeros((m, size, size))
    act = np.arange(m)
    want = counts
    lam_out, V_out = np.full((m, block), _LEFT_OUT), np.zeros((m, width, block))
    drift_out = np.zeros(m)
    k = its = 0
    previous = None

    # mu is at most 1 / sigma; below this it is the kernel of B to rounding (lambda inf)
    tiny = 1e-14 / sigma

    def ritz(mu):  # lambda of the largest mu, ascending
        mu = mu[:, ::-1][:, :block]
        lam = np.where(mu > tiny, 1.0 / np.where(mu > tiny, mu, 1.0) - sigma, _LEFT_OUT)
        if lam.shape[1] < block:
            lam = np.pad(lam, ((0, 0), (0, block - lam.shape[1])), constant_values=_LEFT_OUT)
        return lam

    def active(X3):  # the active blocks of a stacked (m, width, p) array
        return X3 if act.size == m else X3[act]

    def stacked(X3):  # the active blocks' (act.size, width, p) in all m blocks' rows
        if act.size == m:
            return X3.reshape(rows, -1)
        full = np.zeros((m, width, X3.shape[2]))
        full[act] = X3
        return full.reshape(rows, -1)

    def retire(sel, pending=None, drift=None):
        """Write the Ritz pairs of the active blocks ``sel`` (a slice or positions) into
        ``lam_out`` and ``V_out`` (K-orthonormal Ritz vectors scaled to B-norm 1, ``v^T B v
        = mu``), and into ``drift_out`` ``drift`` where ``pending`` (blocks stopped at the
        iteration limit; zero without)."""
        mu, C = np.linalg.eigh(Gb[sel, :k, :k])
        lam = ritz(mu)
        mu, C = mu[:, ::-1][:, :block], C[:, :, ::-1][:, :, :block]
        scale = np.where(mu > tiny, 1.0 / np.sqrt(np.where(mu > tiny, mu, 1.0)), 0.0)
        to = act[sel]
        lam_out[to] = lam
        V_out[to, :, :C.shape[2]] = (np.swapaxes(Vt[sel, :k], 1, 2) @ C) * scale[:, None, :]
        drift_out[to] = 0.0 if pending is None else np.where(pending, drift, 0.0)

    Y3 = Y.reshape(m, width, p)
    while True:
        ma = act.size
        removed = 0.0  # the squared K-norms of the new columns' parts in the basis
        if k:
            # Y = K^{-1} B v for the newest block v: V^T K Y = V^T B v, the newest columns
            # of the Rayleigh quotient, are the first pass's coefficients
            Y3, c = _gram_schmidt_twice(Y3, np.swapaxes(Vt[:ma, :k], 1, 2), KVt[:ma, :k],
                                        Gb[:ma, :k, k - p:k])
            removed = np.einsum("mij,mij->mj", c, c)
        # K Y after the orthogonalisation, by a sparse product: updating K Y through K V
        # took as many dense products as the orthogonalisation itself
        KY3 = active((K @ stacked(Y3)).reshape(m, width, p))
        G = np.swapaxes(Y3, 1, 2) @ KY3
        # their K-norms before it (the basis is K-orthonormal: |y|^2 = |c|^2 + |y - V c|^2)
        before = removed + np.einsum("mii->mi", G)
        e, U = np.linalg.eigh(0.5 * (G + np.swapaxes(G, 1, 2)))
        good = e > KRYLOV_DEPENDENCE_RTOL**2 * np.maximum(before.max(axis=1), 0.0)[:, None]
        W = np.where(good[:, None, :], U / np.sqrt(np.where(good, e, 1.0))[:, None, :], 0.0)
        Y3, KY3 = Y3 @ W, KY3 @ W
        BY3 = active((Bs @ stacked(Y3)).reshape(m, width, p))
        if k + p > size:
            size *= 2
            # (the active blocks only: the retired ones are never read again)
            Vt, KVt = (np.concatenate([a[:ma, :k], np.empty((ma, size - k, width))], axis=1)
                       for a in (Vt, KVt))
            Gb = np.pad(Gb[:ma, :k, :k], ((0, 0), (0, size - k), (0, size - k)))
        Vt[:ma, k:k + p] = np.swapaxes(Y3, 1, 2)
        KVt[:ma, k:k + p] = np.swapaxes(KY3, 1, 2)
        # V^T B Y and V^T K Y in one product (V read once)
        both = Vt[:ma, :k + p] @ np.concatenate([BY3, KY3], axis=2)
        Gb[:ma, :k + p, k:k + p] = both[:, :, :p]
        Gb[:ma, k:k + p, :k] = np.swapaxes(Gb[:ma, :k, k:k + p], 1, 2)
        # the new columns of V^T K V - I (a left-out direction: a zero column)
        off = both[:, :, p:]
        off[:, k + np.arange(p), np.arange(p)] -= good
        k += p
        if np.abs(off).max() > KRYLOV_ORTHOGONALITY:
            # the basis lost its K-orthogonality to rounding (V^T K V too far from the
            # identity for the Rayleigh-Ritz step that assumes it): a shift far above the
            # block's eigenvalues (S nearly a multiple of the identity, its powers point
            # the same way) or a cluster at the threshold in a pencil of high contrast
            return None
        mu = np.linalg.eigvalsh(Gb[:ma, :k, :k])
        low = np.where(mu > tiny, mu, np.inf).min(axis=1)  # 1 / (sigma + the largest lambda)
        if np.any(np.isfinite(low) & (low > 1.0 / ((1.0 + KRYLOV_FLAT_SHIFT) * sigma))):
            return None
        lam = ritz(mu)
        with np.errstate(invalid="ignore"):  # (inf - inf: a slot still beyond the basis)
            change = (np.nan_to_num(np.abs(lam - previous), nan=0.0, posinf=np.inf)
                      if previous is not None
                      else np.full_like(lam, np.inf))
        previous = lam
        # all the eigenvalues below tau have Ritz values there (the inertia's counts)
        pending, drift = _pending(lam, change, tau, cap, (lam < tau).sum(axis=1) >= want,
                                  settle, KRYLOV_UPPER_RTOL)
        if (its >= 2 and not pending.any()) or its >= GENEO_MAX_ITERATIONS:
            retire(slice(0, ma), pending, drift)
            break
        if its >= 2 and KRYLOV_RETIRE and not pending.all():
            keep = np.flatnonzero(pending)
            retire(np.flatnonzero(~pending))  # (settled: no drift)
            n = keep.size
            Vt[:n, :k] = Vt[keep, :k]
            KVt[:n, :k] = KVt[keep, :k]
            Gb[:n, :k, :k] = Gb[keep, :k, :k]
            act, want, previous, BY3 = act[keep], want[keep], previous[keep], BY3[keep]
        Y = shifted.solve(stacked(BY3))
        Y[~real] = 0.0
        its += 1
        Y3 = active(Y.reshape(m, width, p))
    return lam_out, V_out, its, drift_out


def _subspace_eigh(shifted: BlockSolver, Ns: sp.csr_matrix, Bs: sp.csr_matrix, m: int,
                   width: int, block: int, tau: float, real: np.ndarray, cap: int,
                   can_grow: bool, wanted: int, start: np.ndarray | None, sigma: float,
                   counts: np.ndarray | None = None, settle: bool = True):
    """The smallest eigenpairs of ``N v = lambda B v`` on ``m`` stacked blocks of ``width`` rows.

    With ``counts`` the block Krylov method (:func:`_block_krylov_eigh`, where
    :data:`GENEO_KRYLOV`), unless its basis loses its orthogonality; otherwise
    a shift-and-invert subspace iteration with Rayleigh-Ritz, for all blocks at once:
    ``Y = (N + sigma B)^{-1} B X`` by one multi-column solve with ``shifted``
    (:func:`_shifted_factor`, factorised with the same ``sigma``), after the first step a
    Chebyshev polynomial of degree :data:`GENEO_FILTER_DEGREE` in that operator, then one
    batched ``block x block`` generalized ``eigh``.
    Padding rows (``real`` False) carry ``N = 1``, ``B = 0`` and stay zero.  A block whose ``cap``
    smallest Ritz values are below ``tau`` (the cap bites there) is done when those have
    settled to 5 % of the largest of them: the ``cap`` smallest Ritz pairs are kept, as
    documented (in a cluster of eigenvalues larger than the subspace the single pairs
    converge slowly, and need not).  With ``can_grow``, the iteration stops as soon as a
    block has more Ritz values below ``tau`` than ``wanted`` (then it has at least that
    many eigenvalues there, and the caller grows the subspace).  With ``counts`` (each
    block's eigenvalues below ``tau``, from the inertia) a block has found all of them when
    it holds that many Ritz values below ``tau``, instead of the extrapolation of
    :data:`GENEO_BOUNDARY_RTOL`; with ``settle`` False (``eigen_stop="count"``) that ends
    it once the Ritz values below :data:`GENEO_COUNT_SETTLE` times ``tau`` have settled (all
    the kept ones where the cap bites).

    Returns
    -------
    lam : (m, block) ascending Ritz values; V : (m, width, block) B-orthonormal Ritz
    vectors; the number of solves (iterations, :data:`GENEO_MAX_ITERATIONS` at most).
    """
    if counts is not None and GENEO_KRYLOV:
        out = _block_krylov_eigh(shifted, Ns, Bs, m, width, block, tau, real, cap, counts,
                                 sigma, settle)
        if out is not None:
            return out
    rows = m * width
    rng = np.random.default_rng(0)
    X = rng.standard_normal((rows, block))
    if start is not None:  # the first columns from the previous Ritz vectors
        first = min(start.shape[2], block)
        X[:, :first] = start.reshape(rows, -1)[:, :first]
    X[~real] = 0.0
    lam = np.zeros((m, block))
    previous = None
    last_change = np.full((m, block), np.inf)
    its = 0
    pending = np.zeros(m, dtype=bool)
    drift = np.zeros(m)
    def apply(Z):  # (N + sigma B)^{-1} B Z, zero on the padding rows
        out = shifted.solve(Bs @ Z)
        out[~real] = 0.0
        return out

    while its < GENEO_MAX_ITERATIONS:
        degree = 1 if previous is None else min(GENEO_FILTER_DEGREE, GENEO_MAX_ITERATIONS - its)
        its += degree
        if degree == 1:
            Y = apply(X)
        else:
            # Chebyshev filter on [0, mu_cut] of S = (N + sigma B)^{-1} B, whose eigenvalues
            # are 1 / (lambda + sigma): mu_cut from the block's largest Ritz value (capped)
            top = np.minimum(lam[:, -1], GENEO_FILTER_CAP * tau)
            c = np.repeat(2.0 * (top + sigma), width)[:, None]  # 2 / mu_cut per row
            Y0, Y = X, c * apply(X) - X
            for _ in range(degree - 1):
                Y0, Y = Y, 2.0 * (c * apply(Y) - Y) - Y0
            del Y0
            Y[~real] = 0.0
        NY = (Ns @ Y).reshape(m, width, block)
        BY = (Bs @ Y).reshape(m, width, block)
        Y3 = Y.reshape(m, width, block)
        Gn = np.swapaxes(Y3, 1, 2) @ NY
        Gb = np.swapaxes(Y3, 1, 2) @ BY
        Gn = 0.5 * (Gn + np.swapaxes(Gn, 1, 2))
        Gb = 0.5 * (Gb + np.swapaxes(Gb, 1, 2))
        scale = np.einsum("mii->m", Gb)[:, None, None] / block
        Gb = Gb + 1e-14 * scale * np.eye(block)[None]
        lam, C = generalized_eigh(Gn, Gb)
        X = (Y3 @ C).reshape(rows, block)
        # converged: the Ritz values below tau have settled, and the first one above (if any)
        # has settled enough to know that nothing else hides below the threshold (Ritz values
        # decrease to the eigenvalues; the Euclidean residual is no measure for the pencil of
        # a high-contrast matrix, whose entries span the contrast)
        change = np.abs(lam - previous) if previous is not None else np.full_like(lam, np.inf)
        previous = lam
        need = lam < tau
        first_above = np.minimum(need.sum(axis=1), block - 1)
        at = (np.arange(m), first_above)
        theta = lam[at]
        # the first Ritz value above tau stays above: its decrease so far extrapolated
        # geometrically (the rate from its last two changes, twice what is left for safety)
        # keeps it above tau, or it has settled to GENEO_BOUNDARY_RTOL
        # (without a Ritz value above tau the subspace has settled when its last one has)
        with np.errstate(divide="ignore", invalid="ignore"):
            rate = np.where(np.isfinite(last_change[at]), change[at] / last_change[at], np.nan)
            left = np.where(rate < 1.0, 2.0 * change[at] * rate / (1.0 - rate), np.inf)
        # (or settled as tightly as the pairs far below tau: a Ritz value on the threshold,
        # a cluster there, decides nothing)
        boundary = np.where(theta > tau, (theta - left > tau)
                            | (change[at] <= np.maximum(GENEO_BOUNDARY_RTOL * (theta - tau),
                                                        GENEO_RESIDUAL_RTOL * tau)),
                            change[at] <= GENEO_BOUNDARY_RTOL * theta)
        last_change = change
        if counts is not None:
            # the inertia's counts: all the eigenvalues below tau have Ritz values there
            boundary = need.sum(axis=1) >= counts
        if can_grow and np.any((lam < tau).sum(axis=1) > wanted):
            pending[:] = False  # the caller grows the subspace and iterates again
            break
        pending, drift = _pending(lam, change, tau, cap, boundary, settle or counts is None)
        if its >= 2 and not pending.any():
            break
    drift = np.where(pending, drift, 0.0)
    return lam, X.reshape(m, width, block), its, drift
