"""Adaptive spectral coarse spaces: AGDSW and GenEO, built from an assembled sparse matrix.

Both enrich a classical coarse space with the eigenvectors of many small
generalized eigenproblems whose eigenvalues fall below a threshold ``tau``.
The eigenvalues measure how much cheaper a function is in a local
*Neumann* energy (the energy of a neighbourhood with free values on its
boundary) than in the energy the classical method charges for it; the
functions that are much cheaper are the ones a classical coarse space misses
(a value per high-coefficient channel or inclusion crossing an interface),
and the ones that make iteration counts grow with the contrast.

Local Neumann matrices
----------------------
Both methods need a symmetric positive semidefinite local matrix ``N_w`` on
a set of unknowns ``w`` with ``sum_w P_w^T N_w P_w <= k_1 A`` (``P_w`` the
restriction).  Without finite-element data they are computed from ``A``
(Al Daas and Jolivet, SISC 2022): every off-diagonal entry ``a_kl`` is the
2 x 2 positive semidefinite piece ``|a_kl| (e_k - s e_l)(e_k - s e_l)^T``
(``s`` its sign) and the rest of the diagonal, ``a_kk - sum_l |a_kl|``, a
piece of its own, so ``N_w = A_ww - diag(sum_{l not in w} |a_kl|)``: the
couplings that leave ``w`` are cut.  The pieces are positive semidefinite
exactly when ``A`` is weakly diagonally dominant (finite differences and
finite volumes of diffusion, P1 on non-obtuse meshes); then ``k_1`` is the
largest number of sets ``w`` that contain a pair ``(k, l)``.  For other
matrices (elasticity) ``N_w`` can be indefinite: AGDSW then selects more
functions than needed (the set-up warns once), and GenEO refuses and asks
for the finite-element Neumann matrices (``neumann=``).

AGDSW (``"agdsw"``)
-------------------
The GDSW space (one function per interface component and null-space vector,
:func:`ddops.dd.gdsw.gdsw_basis`) plus, on every component ``e``, the
discrete-harmonic extensions of the eigenvectors of

    S_e^N tau = lambda S_e^D tau,    lambda < threshold.

``S_e^D = A_ee - A_eI A_II^{-1} A_Ie`` is the Schur complement of ``A`` on
``e`` with zero values on the rest of the interface: ``tau^T S_e^D tau`` is
the energy of the function GDSW would build from the values ``tau`` on
``e``.  ``S_e^N = sum_{p ~ e} S_{p,e}^N`` sums, over the parts ``p`` that
touch ``e``, the Schur complements on ``e`` of the Neumann matrix of the
closed part ``p`` (its interior and its interface), where the rest of the
part's interface is free: ``tau^T S_e^N tau`` is the smallest energy of any
function with the values ``tau`` on ``e`` (the couplings inside ``e`` count
once per part, so ``lambda`` ranges up to about the number of parts around
``e``).  A small ``lambda`` marks values on ``e`` that extend cheaply when
free (a channel that crosses ``e`` and floats) but expensively with zeros
around ``e`` (GDSW's extension cuts the channel): those enter the coarse
space.  On a homogeneous problem only the constants have small ``lambda``
(and GDSW already holds them), so the space is GDSW's.

With ``v`` the values of ``u`` on ``e`` and ``pi_e`` the projection on the
selected eigenvectors, the interface remainder obeys
``|H_e (v - pi_e v)|_A^2 <= (1 / tau) sum_{p ~ e} |u|_{N_p}^2``; summed over
the components this is the coefficient-robust stable splitting of the
adaptive GDSW theory (Heinlein, Klawonn, Knepper, Rheinbach, Widlund,
ETNA 2019 and SISC 2022), so that ``kappa(M A) <= C (1 + 1 / tau)`` with
``C`` depending on the number of components of a part, of parts around a
component and on the overlap, not on the coefficients.  ``C`` is not
computed here; the tests check that the condition number does not grow
with the contrast.

The Schur complements need ``A_II^{-1} A_I Gamma_p`` for every part ``p``:
one multi-column solve per chunk of parts (as the harmonic extension, with
one column per interface unknown of a part), the dense ``|Gamma_p|``-square
matrices of one chunk at a time, one batched solve with the rest of the part's
interface per batch of its (part, component) pairs (the Schur complement onto the
component), and one batched ``eigh`` per size group of components.

GenEO (``"geneo"``)
-------------------
Spillane, Dolean, Hauret, Nataf, Pechstein, Scheichl (Numer. Math. 2014): on
every overlapping subdomain ``i``,

    N_i v = lambda D_i A_i D_i v,    lambda < threshold,

with ``A_i = R_i A R_i^T``, ``D_i`` the partition-of-unity weights and
``N_i`` the local Neumann matrix (computed from ``A`` as above, or given by
the user, e.g. from a finite-element assembly over the subdomain's elements);
the coarse functions are ``R_i^T D_i v``.  With the additive two-level
method and exact local solves,

    kappa(M A) <= (1 + k_0) (2 + k_0 (2 k_0 + 1) max(1, k_1 / tau))

(Dolean, Jolivet, Nataf, *An Introduction to Domain Decomposition Methods*,
SIAM 2015, chapter 7), ``k_0`` the largest number of subdomains that meet one
subdomain (itself included) and ``k_1`` the multiplicity of the Neumann
matrices (both returned in the info's ``stats``).  The bound does not depend
on the coefficients.  The eigenproblems are solved for all subdomains of a
chunk at once (padded to a size group) by a shift-and-invert subspace iteration:
one SuperLU solve with ``N_i + tau D_i A_i D_i`` per chunk and iteration and one
batched Rayleigh-Ritz step.

Null spaces
-----------
A given null space ``Z`` enters first: AGDSW keeps GDSW's pieces ``Z`` on
every component, GenEO the Nicolaides functions ``R_i^T D_i R_i Z``; the
eigenvectors follow.  Functions that are (numerically) combinations of the
earlier ones of the same component or subdomain are dropped there (the
Gram-Schmidt of :func:`ddops.dd.gdsw.gdsw_basis`) and counted in ``stats``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from .._validation import check_int, check_memory, check_positive_float, warn
from ..linalg.local_solvers import chunk_bounds, superlu_chunk
from ..linalg.local_solvers import superlu_spd as _spd_factor
from .coarse_matrix import drop_dependent_columns
from .extension import EXTENSION_CHUNK_BYTES, FACTOR_CHUNK_ROWS, harmonic_extension
from .groups import DEPENDENCE_RTOL
from .groups import columns_from_groups as _columns_from_groups
from .groups import independent_vectors as _independent_vectors
from .interface import InterfaceComponents
from .interface import classify_interface as _components
from .validation import check_matrix as _check_matrix
from .validation import check_null_space as _check_null_space
from .validation import check_owner as _check_owner

__all__ = [
    "ADAPTIVE_COARSE_BASES",
    "AGDSW_THRESHOLD",
    "GENEO_THRESHOLD",
    "MAX_PER_COMPONENT",
    "MAX_PER_SUBDOMAIN",
    "AdaptiveInfo",
    "agdsw_basis",
    "geneo_basis",
    "local_neumann_matrices",
    "size_groups",
]

#: Names of the adaptive coarse spaces.
ADAPTIVE_COARSE_BASES = ("agdsw", "geneo")

#: Default AGDSW threshold on ``lambda`` of ``S^N tau = lambda S^D tau``.  Channel and
#: inclusion modes have ``lambda`` of the order of the inverse contrast; the smallest
#: ``lambda`` of a homogeneous problem outside the constants is 0.13, 0.10 and 0.08 on 2D boxes
#: of 8, 16 and 32 points a side and 0.16 and 0.11 on 3D boxes of 6 and 10, so 0.05 keeps the
#: first and leaves GDSW unchanged on homogeneous problems; see the preconditioning guide.
AGDSW_THRESHOLD = 0.05

#: Default GenEO threshold on ``lambda`` of ``N_i v = lambda D_i A_i D_i v``.  Measured (CG
#: iterations at 0.1 / 0.25): floating channels of contrast 1e4 on 64 boxes of 32 x 32, 69 /
#: 32; homogeneous 2D Poisson there, 42 / 30 with fewer functions than GDSW (196-288 against
#: 308); 3D inclusions 54 / 46; 2D elasticity with stiff inclusions 59 / 45, for at most
#: 30 % more set-up.  Larger values also give a smaller bound.
GENEO_THRESHOLD = 0.25

#: Default cap on the eigenvectors added per interface component (AGDSW).
MAX_PER_COMPONENT = 32

#: Default cap on the eigenvectors added per subdomain (GenEO): elasticity with stiff
#: inclusions needs about three per inclusion in a subdomain (22 at most on 16 METIS parts of
#: 2D elasticity with 60 inclusions, where a cap of 16 doubled the iteration count).
MAX_PER_SUBDOMAIN = 48

#: GenEO's eigenproblems are solved by a subspace iteration for this many wanted vectors per
#: subdomain plus extra ones, doubled (up to ``max_per_subdomain``) while some subdomain has
#: more eigenvalues below the threshold than that.
GENEO_INITIAL_VECTORS = 12

#: Vectors beyond those wanted: at least this many and a quarter of the wanted ones (they
#: speed up the convergence of the last wanted eigenvalues, whose rate is the ratio of
#: theirs to the first eigenvalue outside the subspace, and tell whether more are below the
#: threshold).
GENEO_EXTRA_VECTORS = 4

#: At most this many subspace iterations; each is one sparse solve with ``N_i + tau D_i A_i
#: D_i`` for all subdomains of a chunk at once and one batched Rayleigh-Ritz step.
GENEO_MAX_ITERATIONS = 60

#: A GenEO Ritz value below half the threshold has converged when one subspace iteration
#: changes it by at most this fraction of the threshold (1e-3 between half the threshold
#: and the threshold; the subspace of the eigenvectors below it, not every single vector,
#: is what the coarse space needs).
GENEO_RESIDUAL_RTOL = 1e-6

#: ... and the first Ritz value above the threshold when the change is at most this
#: fraction of it, or half its distance to the threshold: then no eigenvalue below the
#: threshold is missing.
GENEO_BOUNDARY_RTOL = 1e-2

#: An AGDSW eigenvector whose part S^D-orthogonal to the null space on its component has a
#: relative S^D-norm at most this is a combination of the null-space functions there and is
#: not used (the shifted Neumann solves leave such vectors about 1e-7 away from the span).
EIGEN_DEPENDENCE_RTOL = 1e-4

#: Relative shift of the rest ``S_rr`` of a part's Neumann Schur complement when it is
#: eliminated onto a component ``e`` (``S_ee - S_er S_rr^{-1} S_re``) and found exactly
#: singular: a rounding-size guard (a kernel vector of the part that vanishes on ``e``,
#: e.g. a rotation about a one-node vertex); the constants of a floating part do not vanish
#: on ``e``, so ``S_rr`` is nonsingular there.  A larger shift costs accuracy at high contrast
#: (1e-10 of the largest diagonal entry: 6e-3 relative error in ``S_e^N`` at contrast 1e6).
NEUMANN_SHIFT = 1e-15


@dataclass
class AdaptiveInfo:
    """What :func:`agdsw_basis` or :func:`geneo_basis` built.

    Attributes
    ----------
    method : str
        ``"agdsw"`` or ``"geneo"``.
    threshold : float
        The eigenvalue threshold ``tau``.
    column_group : numpy.ndarray
        The component (AGDSW) or subdomain (GenEO) of every coarse function.
    column_kind : numpy.ndarray
        ``"null_space"`` or ``"eigenvector"`` for every coarse function.
    selected : numpy.ndarray
        Eigenvalues below the threshold per component or subdomain (before the cap and
        the dependence test).
    kept : numpy.ndarray
        Eigenvectors kept as coarse functions per component or subdomain.
    eigenvalues : numpy.ndarray
        The smallest eigenvalue of every component or subdomain outside the null space
        (``inf`` where none).  GenEO's are Ritz values of its subspace iteration: upper
        bounds, accurate to about 1e-8 below the threshold and to a few percent above.
    components : InterfaceComponents or None
        The interface (AGDSW only).
    harmonic_interface : numpy.ndarray or None
        AGDSW with an exact extension: the interface unknowns, off which every column is
        discrete harmonic (see :class:`ddops.dd.gdsw.GDSWInfo`); else None.
    stats : dict
        Counts and timings: ``coarse_dim``, ``null_space_functions``,
        ``eigen_functions``, ``dropped_dependent``, ``capped`` (groups where the
        cap bit), ``kept_per_component`` (AGDSW) or ``kept_per_subdomain``
        (GenEO): the eigenvectors kept in every group, an integer array,
        ``eigenproblems``, ``largest_eigenproblem``, ``eigen_seconds`` (Schur
        complements and eigenproblems), ``extension_seconds``, ``seconds``;
        GenEO adds ``subspace_iterations``, ``k0``, ``k1`` and ``bound`` (the
        condition-number bound of the module notes).
    """

    method: str
    threshold: float
    column_group: np.ndarray
    column_kind: np.ndarray
    selected: np.ndarray
    kept: np.ndarray
    eigenvalues: np.ndarray
    components: InterfaceComponents | None = None
    stats: dict = field(default_factory=dict)
    harmonic_interface: np.ndarray | None = None


# -- helpers -----------------------------------------------------------------------------------
def size_groups(sizes: np.ndarray, ratio: float = 1.25) -> tuple[np.ndarray, np.ndarray]:
    """Padded size of every item: the next value of a geometric ladder, and the ladder.

    Items are batched by padded size (a handful of groups, at most ``ratio^3`` times the
    arithmetic of exact sizes).

    Returns
    -------
    padded : numpy.ndarray
        Padded size of every item (``>= sizes``).
    ladder : numpy.ndarray
        The distinct padded sizes in use, increasing.
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    if sizes.size == 0:
        return sizes.copy(), np.zeros(0, dtype=np.int64)
    top = int(sizes.max())
    steps = [1]
    while steps[-1] < top:
        steps.append(max(steps[-1] + 1, int(np.ceil(steps[-1] * ratio))))
    steps = np.array(steps, dtype=np.int64)
    padded = steps[np.searchsorted(steps, sizes)]
    return padded, np.unique(padded)


def _check_threshold(threshold: Any, default: float) -> float:
    if threshold is None:
        return default
    return check_positive_float("threshold", threshold)


def _check_cap(name: str, value: Any, default: int) -> int:
    return default if value is None else check_int(name, value, minimum=0)


def _outside_coupling(A: sp.csr_matrix, rows: np.ndarray, sets: np.ndarray,
                      num_sets: int) -> np.ndarray:
    """``sum_{l not in w} |a_kl|`` for every pair (unknown ``rows[m]``, set ``sets[m]``).

    The pairs list the memberships of the sets ``w`` (each pair once).  The absolute
    off-diagonal row sum minus the part inside the set: one sparse product.
    """
    absA = abs(A).tocsr()
    absA.setdiag(0.0)
    absA.eliminate_zeros()
    rowsum = np.asarray(absA.sum(axis=1)).ravel()
    M = sp.csr_matrix((np.ones(rows.size), (rows, sets)), shape=(A.shape[0], num_sets))
    inside = (absA @ M).tocsr()
    return rowsum[rows] - np.asarray(inside[rows, sets]).ravel()


def _not_dominant_rows(A: sp.csr_matrix) -> np.ndarray:
    absA = abs(A).tocsr()
    diag = A.diagonal()
    off = np.asarray(absA.sum(axis=1)).ravel() - np.abs(diag)
    scale = np.maximum(np.abs(diag), 1e-300)
    return np.flatnonzero(diag - off < -1e-10 * scale)


def local_neumann_matrices(A: Any, decomposition: Any) -> list[sp.csr_matrix]:
    """Algebraic local Neumann matrices ``N_i = A_i - diag(sum_{l not in i} |a_kl|)``.

    One per subdomain of ``decomposition``, in the order of its unknowns: ``A_i = R_i A
    R_i^T`` with the absolute couplings that leave the subdomain taken off its diagonal
    (the couplings are cut, module notes).  When ``A`` is weakly diagonally dominant every
    ``N_i`` is symmetric positive semidefinite, and the constants are in the kernel of the
    ``N_i`` of a floating subdomain (one whose rows all have zero sums, away from any
    Dirichlet boundary).  :func:`geneo_basis` computes the same matrices batched; these
    are for inspection, or to modify and pass back as ``neumann=``.

    Parameters
    ----------
    A : sparse matrix
        Symmetric ``num_dofs x num_dofs``.
    decomposition : Decomposition
        The overlapping subdomains.

    Returns
    -------
    list of scipy.sparse.csr_matrix
        ``N_i``, ``n_i x n_i`` in the order of ``decomposition.subdomains[i]``.

    Raises
    ------
    ValueError
        ``A`` is not square, finite and symmetric, or not positive definite (see
        :func:`ddops.dd.gdsw.gdsw_basis`).
    """
    A = _check_matrix(A)
    d = decomposition
    N = d.num_subdomains
    group = np.repeat(np.arange(N), d.sizes)
    cut = _outside_coupling(A, d.indices, group, N)
    result = []
    for i, idx in enumerate(d.subdomains):  # inspection helper, not a hot path
        Ai = A[idx][:, idx] - sp.diags(cut[d.offsets[i]:d.offsets[i + 1]])
        result.append(sp.csr_matrix(Ai))
    return result


class _NotPositive(ValueError):
    def __init__(self, bad: list[int], what: str) -> None:
        super().__init__(f"{what}: not positive definite")
        self.bad = bad


def _generalized_eigh(Anum: np.ndarray, B: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``Anum v = lambda B v`` for stacks, ``B`` SPD: ascending eigenvalues, B-orthonormal V."""
    L = np.linalg.cholesky(B)
    eye = np.broadcast_to(np.eye(B.shape[-1]), B.shape)
    Linv = np.linalg.solve(L, eye)
    C = Linv @ Anum @ np.swapaxes(Linv, -1, -2)
    C = 0.5 * (C + np.swapaxes(C, -1, -2))
    lam, Y = np.linalg.eigh(C)
    return lam, np.swapaxes(Linv, -1, -2) @ Y


def _project_out(V: np.ndarray, lam: np.ndarray, BV: np.ndarray, Zg: np.ndarray,
                 BZ: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The same span with ``V`` B-orthogonal to the columns of ``Zg`` (stacks).

    ``BV`` and ``BZ`` are the stacks of products ``B V`` and ``B Zg``.  Eigenvectors whose
    part B-orthogonal to ``span(Zg)`` has a relative B-norm at most
    :data:`EIGEN_DEPENDENCE_RTOL` are combinations of the null-space functions: their
    eigenvalue becomes ``inf`` (never selected).  ``V`` is B-orthonormal on entry.
    """
    if Zg.shape[2] == 0:
        return V, lam
    Gz = np.swapaxes(Zg, 1, 2) @ BZ
    Gz = 0.5 * (Gz + np.swapaxes(Gz, 1, 2))
    ev, U = np.linalg.eigh(Gz)
    good = ev > EIGEN_DEPENDENCE_RTOL**2 * np.maximum(ev[:, -1:], 1e-300)
    inv = np.where(good, 1.0 / np.where(good, ev, 1.0), 0.0)
    coef = ((U * inv[:, None, :]) @ np.swapaxes(U, 1, 2)) @ (np.swapaxes(BZ, 1, 2) @ V)
    V = V - Zg @ coef
    BV = BV - BZ @ coef
    rest = np.sqrt(np.maximum(np.einsum("mij,mij->mj", V, BV), 0.0))
    return V, np.where(rest > EIGEN_DEPENDENCE_RTOL, lam, np.inf)


def _subspace_eigh(Ns: sp.csr_matrix, Bs: sp.csr_matrix, m: int, width: int, block: int,
                   tau: float, real: np.ndarray, cap: int, can_grow: bool, wanted: int):
    """The smallest eigenpairs of ``N v = lambda B v`` on ``m`` stacked blocks of ``width`` rows.

    A shift-and-invert subspace iteration with Rayleigh-Ritz, for all blocks at once:
    ``Y = (N + tau B)^{-1} B X`` by one SuperLU solve per chunk of blocks (block-diagonal
    factors), then one batched ``block x block`` generalized ``eigh``.  Padding rows
    (``real`` False) carry ``N = 1``, ``B = 0`` and stay zero.  A block whose ``cap``
    smallest Ritz values are below ``tau`` (the cap bites there) is done when those have
    settled: the smallest ``cap`` eigenpairs are kept, as documented (the Ritz values of a
    cluster of eigenvalues larger than the subspace settle although its single vectors
    would converge slowly, and need not).  With ``can_grow``, the iteration stops as soon as a
    block has more Ritz values below ``tau`` than ``wanted`` (then it has at least that
    many eigenvalues there, and the caller doubles the subspace).

    Returns
    -------
    lam : (m, block) ascending Ritz values; V : (m, width, block) B-orthonormal Ritz
    vectors; the number of iterations.
    """
    rows = m * width
    K = (Ns + Bs * tau).tocsr()
    bounds = chunk_bounds(np.arange(m + 1) * width, FACTOR_CHUNK_ROWS)
    factors = []
    for c in range(bounds.size - 1):  # a loop over chunks of blocks
        r0, r1 = int(bounds[c]), int(bounds[c + 1])
        # the local solvers' SPD test: diagonal pivots only (an off-diagonal one, perm_r !=
        # perm_c, marks an indefinite block whose U can still have a positive diagonal) and
        # Cholesky pivots safely positive against their diagonal
        labels = np.arange(r0, r1) // width
        lu, bad = superlu_chunk(K[r0:r1, r0:r1], labels, True, np.float64)
        if lu is None:  # exactly singular: find the blocks one by one (the error path only)
            bad = [int(b) for b in np.unique(labels) if _not_spd(K, int(b) * width, width)]
            bad = bad or [int(labels[0])]
        if len(bad):
            raise _NotPositive([int(b) for b in bad], "N + tau B")
        factors.append((r0, r1, lu))
    rng = np.random.default_rng(0)
    X = rng.standard_normal((rows, block))
    X[~real] = 0.0
    lam = np.zeros((m, block))
    previous = None
    its = 0
    pending = np.zeros(m, dtype=bool)
    drift = np.zeros(m)
    while its < GENEO_MAX_ITERATIONS:
        its += 1
        BX = Bs @ X
        Y = np.empty_like(X)
        for r0, r1, lu in factors:
            Y[r0:r1] = lu.solve(np.asfortranarray(BX[r0:r1]))
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
        lam, C = _generalized_eigh(Gn, Gb)
        X = (Y3 @ C).reshape(rows, block)
        # converged: the Ritz values below tau have settled, and the first one above (if any)
        # has settled enough to know that nothing else hides below the threshold (Ritz values
        # decrease to the eigenvalues; the Euclidean residual is no measure for the pencil of
        # a high-contrast matrix, whose entries span the contrast)
        change = np.abs(lam - previous) if previous is not None else np.full_like(lam, np.inf)
        previous = lam
        need = lam < tau
        first_above = np.minimum(need.sum(axis=1), block - 1)
        theta = lam[np.arange(m), first_above]
        boundary = change[np.arange(m), first_above] <= np.maximum(
            GENEO_BOUNDARY_RTOL * theta, 0.5 * (theta - tau))
        if can_grow and np.any((lam < tau).sum(axis=1) > wanted):
            pending[:] = False  # the caller grows the subspace and iterates again
            break
        capped = lam[:, cap - 1] < tau if cap <= block else np.zeros(m, dtype=bool)
        # pairs close below tau converge slowest and matter least: they are selected whatever
        # their last digits (Ritz values only decrease), so they settle at a looser level
        settled = change <= tau * np.where(lam < 0.5 * tau, GENEO_RESIDUAL_RTOL, 1e-3)
        # where the cap bites, the cap smallest are kept: those must settle (not any cap
        # Ritz values below tau, which after a few iterations can miss the kernel of a
        # floating N_i), and nothing decides at the boundary
        kept = need & (np.arange(block)[None, :] < cap)
        pending = np.where(capped, np.any(kept & ~settled, axis=1),
                           np.any(need & ~settled, axis=1) | ~boundary)
        if its >= 2 and not pending.any():
            break
        # the last change of the Ritz values that decide the selection, relative to tau
        drift = np.where(kept, change, 0.0).max(axis=1) / tau
        drift = np.where(capped, drift, np.maximum(drift, change[np.arange(m), first_above] / tau))
    drift = np.where(pending, drift, 0.0)
    return lam, X.reshape(m, width, block), its, drift


def _not_spd(K: sp.csr_matrix, r0: int, width: int) -> bool:
    """Whether the diagonal block of ``K`` at rows ``r0:r0 + width`` fails the SPD test."""
    Kb = K[r0:r0 + width, r0:r0 + width]
    lu, bad = superlu_chunk(Kb, np.zeros(width, dtype=np.int64), True, np.float64)
    return lu is None or bool(bad.size)


def _select(lam: np.ndarray, threshold: float, cap: int) -> tuple[np.ndarray, np.ndarray]:
    """Which eigenpairs to keep (ascending ``lam`` per row) and how many were below threshold."""
    below = lam < threshold
    count = below.sum(axis=1)
    rank = np.cumsum(below, axis=1)
    return below & (rank <= cap), count


def _warn_cap(capped: int, what: str, cap_name: str, cap: int) -> None:
    if capped:
        warn(f"{capped} {what} had more eigenvalues below the threshold than "
                      f"{cap_name}={cap}; only the {cap} smallest were kept there (raise "
                      f"{cap_name} or lower the threshold)", RuntimeWarning)


# -- AGDSW ---------------------------------------------------------------------------------------
def agdsw_basis(
    A: Any,
    owner: Any,
    *,
    null_space: Any = None,
    interface: Any = None,
    block_size: int = 1,
    threshold: float | None = None,
    max_per_component: int | None = None,
    neumann: Any = None,
    neumann_indices: Any = None,
    dependence_rtol: float = DEPENDENCE_RTOL,
    return_info: bool = False,
    chunk_bytes: int = EXTENSION_CHUNK_BYTES,
    extension_solver: str = "auto",
):
    """Adaptive GDSW coarse basis from a matrix and a non-overlapping partition.

    Parameters
    ----------
    A : sparse matrix or array
        Symmetric positive definite ``n x n`` matrix.
    owner : array of int, shape (n,)
        Non-overlapping part label of every unknown.
    null_space : array, shape (n, k) or (n,), optional
        Near null space (default: constants); its GDSW functions are always kept.
    interface : None, Boolean mask, index array or incidence matrix, optional
        The interface rule, see :func:`ddops.dd.gdsw.interface_components`.
    block_size : int
        Unknowns per node classified together.
    threshold : float, optional
        Keep the eigenvectors with ``lambda < threshold`` (default
        :data:`AGDSW_THRESHOLD`); see the module notes for its meaning.
    max_per_component : int, optional
        At most this many eigenvectors per component (the smallest; default
        :data:`MAX_PER_COMPONENT`); a ``RuntimeWarning`` says where it bites.
    neumann : sequence of sparse matrices, optional
        Local Neumann matrices, one per part ``p`` on an index set that holds the
        closure of ``p`` (its unknowns and the interface unknowns around it), e.g.
        from a finite-element assembly on the subdomains of a decomposition with
        overlap 1 (``ddops.problems.fem_elasticity_2d(..., neumann=d)``); default:
        computed from ``A`` (module notes).  Use them where ``A`` is not diagonally
        dominant.
    neumann_indices : sequence of integer arrays, optional
        The unknowns of every Neumann matrix, in its row order (e.g.
        ``decomposition.subdomains``); required with ``neumann``.
    dependence_rtol : float
        Relative tolerance of the dependent-function removal.
    return_info : bool
        Also return an :class:`AdaptiveInfo`.
    chunk_bytes : int
        Memory bound of one block of right-hand sides in the solves.
    extension_solver : {"auto", "superlu", "pardiso", "amg"}
        Solver of the final harmonic extension (see :func:`ddops.dd.gdsw.harmonic_extension`).

    Returns
    -------
    Phi : scipy.sparse.csr_matrix
        ``n x n0``, ordered by component, then the null-space vectors, then the
        eigenvectors in increasing ``lambda``.  The null-space columns are exactly
        the columns of :func:`ddops.dd.gdsw.gdsw_basis`.
    info : AdaptiveInfo
        Only with ``return_info=True``.
    """
    start = time.perf_counter()
    tau = _check_threshold(threshold, AGDSW_THRESHOLD)
    cap = _check_cap("max_per_component", max_per_component, MAX_PER_COMPONENT)
    rtol = check_positive_float("dependence_rtol", dependence_rtol)
    if not isinstance(return_info, (bool, np.bool_)):
        raise TypeError(f"return_info must be a bool, got {type(return_info).__name__}")
    chunk_bytes = check_int("chunk_bytes", chunk_bytes, minimum=1)
    A = _check_matrix(A)
    n = A.shape[0]
    owner = _check_owner(owner, n)
    Z = _check_null_space(null_space, n)
    comps = _components(A, owner, interface, block_size)
    if comps.interface.size == 0:
        raise ValueError("owner: the partition has a single part (or parts A does not couple), "
                         "so there is no interface and no AGDSW coarse function")
    user = None
    if neumann is not None:
        if neumann_indices is None:
            raise ValueError("neumann_indices (the unknowns of every subdomain, e.g. "
                             "decomposition.subdomains) must come with neumann")
        idx = [np.asarray(i, dtype=np.int64).ravel() for i in neumann_indices]
        if len(idx) != comps.num_parts:
            raise ValueError(f"neumann must hold one matrix per part ({comps.num_parts}), got "
                             f"{len(idx)} index arrays")
        sizes_n = np.array([i.size for i in idx], dtype=np.int64)
        user = (_check_neumann(neumann, sizes_n), np.concatenate(idx),
                np.concatenate([[0], np.cumsum(sizes_n)]))
    elif _not_dominant_rows(A).size:
        warn("agdsw: A is not diagonally dominant, so the algebraic local Neumann "
                      "matrices are not positive semidefinite and more functions than needed "
                      "may be selected (GenEO with finite-element Neumann matrices is the "
                      "rigorous alternative)", RuntimeWarning)
    eig_start = time.perf_counter()
    lam_all, vecs, sizes = _agdsw_eigenpairs(A, owner, comps, chunk_bytes, Z[comps.interface],
                                             user)
    x, comp = comps.interface, comps.component
    C, k = comps.num_components, Z.shape[1]
    # select per component (eigenvalues ascending), cap, lay out next to Z
    kmax = max((v.shape[2] for v in vecs.values()), default=0)
    values = np.zeros((x.size, k + min(kmax, cap)))
    values[:, :k] = Z[x]
    selected = np.zeros(C, dtype=np.int64)
    smallest = np.full(C, np.inf)
    capped = 0
    # position of every interface unknown within its component
    order = np.argsort(comp, kind="stable")
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    local = np.empty(x.size, dtype=np.int64)
    local[order] = np.arange(x.size) - offsets[comp[order]]
    rows_of = order  # interface positions grouped by component
    for width, (members, lam) in lam_all.items():  # a loop over a few size groups
        V = vecs[width]
        keep, count = _select(lam, tau, cap)
        selected[members] = count
        smallest[members] = lam.min(axis=1) if lam.shape[1] else np.inf
        capped += int((count > cap).sum())
        slot = np.cumsum(keep, axis=1) - 1  # eigenvector slot in the component's columns
        g, j = np.nonzero(keep)
        # scatter the kept eigenvectors' real rows into values
        sz = sizes[members[g]]
        rep = np.repeat(np.arange(g.size), sz)
        within = np.arange(rep.size) - np.repeat(np.cumsum(sz) - sz, sz)
        pos = rows_of[offsets[members[g]][rep] + within]
        values[pos, k + slot[g, j][rep]] = V[g[rep], within, j[rep]]
    _warn_cap(capped, "interface components", "max_per_component", cap)
    eigen_seconds = time.perf_counter() - eig_start
    nonzero = np.zeros((C, values.shape[1]), dtype=bool)
    r, c = np.nonzero(values)
    nonzero[comp[r], c] = True
    # Gram-Schmidt over all the functions of a component: the eigenvectors are
    # S^D-orthogonal to the null space, but on matrices that are not diagonally dominant
    # (elasticity) the projected ones can be nearly parallel, which the global drop below
    # cannot always resolve in the order the coarse factorisation then uses
    keep = _independent_vectors(comp, values, C, rtol) & nonzero
    ext_start = time.perf_counter()
    PhiG, _ = _columns_from_groups(x, comp, values, keep, n)
    Phi = harmonic_extension(A, owner, x, PhiG, chunk_bytes=chunk_bytes, solver=extension_solver,
                             null_space=Z)
    ext_seconds = time.perf_counter() - ext_start
    col_group, col_vec = np.nonzero(keep)
    # functions of different components can still depend on each other numerically
    Phi, cols = drop_dependent_columns(A, Phi, first=col_vec < k)
    dropped = int(nonzero.sum() - cols.size)
    col_group, col_vec = col_group[cols], col_vec[cols]
    if not return_info:
        return Phi
    kept = np.bincount(col_group[col_vec >= k], minlength=C)
    info = AdaptiveInfo(
        method="agdsw", threshold=tau, column_group=col_group,
        column_kind=np.where(col_vec < k, "null_space", "eigenvector"),
        selected=selected, kept=kept, eigenvalues=smallest, components=comps,
        harmonic_interface=None if extension_solver == "amg" else x,
        stats={"coarse_dim": int(Phi.shape[1]), "null_space_functions": int((col_vec < k).sum()),
               "eigen_functions": int(kept.sum()), "dropped_dependent": dropped,
               "capped": capped, "kept_per_component": kept, "eigenproblems": int(C),
               "largest_eigenproblem": int(sizes.max()), "eigen_seconds": eigen_seconds,
               "extension_seconds": ext_seconds, "seconds": time.perf_counter() - start})
    return Phi, info


def _schur_onto_blocks(S: np.ndarray, real: np.ndarray, scale: np.ndarray, bp: np.ndarray,
                       sl: np.ndarray, valid: np.ndarray, chunk_bytes: int) -> np.ndarray:
    """Schur complements ``S_ee - S_er S_rr^{-1} S_re`` of padded stacked matrices onto blocks.

    Block ``b`` is the set of slots ``sl[b][valid[b]]`` of the matrix ``S[bp[b]]`` (``real``
    marks its real slots, ``scale`` its largest diagonal entry); ``r`` is the rest of that
    matrix's real slots.  One batched solve with ``S_rr`` (the other slots made identity)
    and ``|e|`` right-hand sides per batch of blocks, instead of the inverse of the block
    of an inverse, ``(S^{-1})_ee^{-1}``, which at high contrast loses about as many digits as
    the contrast has (the shifted floating ``S`` is nearly singular).  A batch whose
    ``S_rr`` is exactly singular is solved again with the rounding-size relative shift
    :data:`NEUMANN_SHIFT` on it.  Padding rows and columns of the result are the identity.
    """
    nb, bw = sl.shape
    width = S.shape[1]
    in_e = np.zeros((nb, width), dtype=bool)
    bi, ri = np.nonzero(valid)
    in_e[bi, sl[bi, ri]] = True
    out = in_e | ~real[bp]  # rows and columns outside r
    per_block = 8 * (3 * width * width + 3 * width * bw)
    batch = max(1, int(chunk_bytes) // per_block)
    check_memory(f"the AGDSW Schur complements of {min(batch, nb)} (part, component) blocks "
                 f"of up to {width} interface unknowns", min(batch, nb) * per_block,
                 "more, smaller parts have smaller interfaces")
    SB = np.empty((nb, bw, bw))
    idx = np.arange(width)
    both = valid[:, :, None] & valid[:, None, :]
    for q0 in range(0, nb, batch):  # a loop over memory-bounded batches of blocks
        q = slice(q0, min(q0 + batch, nb))
        o = out[q]
        M = S[bp[q]]  # a copy (fancy index)
        M[o[:, :, None] | o[:, None, :]] = 0.0
        d = np.einsum("bii->bi", M)
        M[:, idx, idx] = np.where(o, 1.0, d)
        Se = S[bp[q][:, None, None], idx[None, :, None], sl[q][:, None, :]]  # (b, width, bw)
        Se = np.where(valid[q][:, None, :], Se, 0.0)  # the columns of e
        R = np.where(o[:, :, None], 0.0, Se)  # S_re on the rows of r
        try:
            X = np.linalg.solve(M, R)
        except np.linalg.LinAlgError:  # an exactly singular S_rr: the rounding-size shift
            M[:, idx, idx] += np.where(o, 0.0, NEUMANN_SHIFT * scale[bp[q], None])
            X = np.linalg.solve(M, R)
        See = np.take_along_axis(Se, sl[q][:, :, None], axis=1)  # S_ee: rows e of columns e
        SB[q] = np.where(both[q], See - np.swapaxes(R, 1, 2) @ X, np.eye(bw)[None])
    return SB


def _agdsw_eigenpairs(A, owner, comps, chunk_bytes, Zx, neumann=None):
    """Eigenpairs of ``S_e^N tau = lambda S_e^D tau`` for every component, batched by size.

    Returns ``({width: (components, eigenvalues)}, {width: eigenvectors}, sizes)`` with
    the eigenvectors padded to ``width`` rows (zero on padding rows).
    """
    n = A.shape[0]
    x, comp = comps.interface, comps.component
    C, N = comps.num_components, comps.num_parts
    nx = x.size
    sizes = np.bincount(comp, minlength=C)
    # (interface unknown, part) pairs: Gamma_p, sorted by part then unknown
    P = comps.parts.tocsr()
    cnt = np.diff(P.indptr)[comp]
    pair_x = np.repeat(np.arange(nx), cnt)
    starts = P.indptr[comp]
    pair_p = P.indices[np.repeat(starts, cnt) + np.arange(pair_x.size)
                       - np.repeat(np.cumsum(cnt) - cnt, cnt)]
    o = np.lexsort((pair_x, pair_p))
    pair_x, pair_p = pair_x[o], pair_p[o]
    gsize = np.bincount(pair_p, minlength=N)
    goff = np.concatenate([[0], np.cumsum(gsize)])
    pair_slot = np.arange(pair_x.size) - goff[pair_p]
    # slot of (unknown, part) as a sparse lookup (value slot + 1)
    slot_of = sp.csr_matrix((pair_slot + 1, (x[pair_x], pair_p)), shape=(n, N))
    # the interior, grouped by part (A_II is block diagonal over the parts)
    mask = np.ones(n, dtype=bool)
    mask[x] = False
    interior = np.flatnonzero(mask)
    interior = interior[np.argsort(owner[interior], kind="stable")]
    part = owner[interior]
    part_off = np.concatenate([[0], np.cumsum(np.bincount(part, minlength=N))])
    A_I = A[interior].tocsr()
    A_II = A_I[:, interior].tocsr()
    A_IG = A_I[:, x].tocoo()  # rows: interior positions, cols: interface positions
    del A_I
    # slot of every coupling (interior k of part p, interface j): j must touch p
    # (no coupling at all when every unknown is on the interface: the fancy index of a
    # sparse matrix with empty arrays is a 1 x 0 matrix, not an empty array)
    s = (np.asarray(slot_of[x[A_IG.col], part[A_IG.row]]).ravel() if A_IG.nnz
         else np.empty(0, dtype=np.int64))
    if np.any(s == 0):
        raise ValueError("agdsw: an interior unknown is coupled to an interface unknown whose "
                         "part-set does not contain its part")
    g_slot = s - 1
    # A_{Gamma_p Gamma_p}: entries of A between interface unknowns of the same part
    A_GG = A[x][:, x].tocoo()
    if neumann is None:
        # Neumann cut of the closed parts: sum_{l not in closure p} |a_gl| for g in Gamma_p
        closure_rows = np.concatenate([interior, x[pair_x]])
        closure_sets = np.concatenate([part, pair_p])
        pair_cut = _outside_coupling(A, closure_rows, closure_sets, N)[interior.size:]
        # expand every entry (g, h) over the parts of g, keep those where h is in the part
        cg = np.diff(P.indptr)[comp[A_GG.row]]
        e_idx = np.repeat(np.arange(A_GG.nnz), cg)
        e_part = P.indices[np.repeat(P.indptr[comp[A_GG.row]], cg) + np.arange(e_idx.size)
                           - np.repeat(np.cumsum(cg) - cg, cg)]
        sg = np.asarray(slot_of[x[A_GG.row[e_idx]], e_part]).ravel()
        sh = np.asarray(slot_of[x[A_GG.col[e_idx]], e_part]).ravel()
        ok = (sg > 0) & (sh > 0)
        gg_part, gg_r, gg_c = e_part[ok], sg[ok] - 1, sh[ok] - 1
        gg_v = A_GG.data[e_idx[ok]]
    else:
        # the user's Neumann matrix of subdomain p (which holds the closure of part p) on
        # Gamma_p; its rows on the interior of p are those of A
        (n_sub, n_r, n_c, n_v), indices, offsets = neumann
        member = sp.csr_matrix((np.ones(indices.size), (indices, np.repeat(
            np.arange(N), np.diff(offsets)))), shape=(n, N))
        missing = np.asarray(member[x[pair_x], pair_p]).ravel() == 0
        if missing.any():
            p = int(pair_p[np.flatnonzero(missing)[0]])
            raise ValueError(f"neumann: subdomain {p} does not contain every interface unknown "
                             f"around part {p} (its closure); build the decomposition with "
                             "overlap >= 1")
        g_r, g_c = indices[offsets[n_sub] + n_r], indices[offsets[n_sub] + n_c]
        sg = np.asarray(slot_of[g_r, n_sub]).ravel()
        sh = np.asarray(slot_of[g_c, n_sub]).ravel()
        ok = (sg > 0) & (sh > 0)
        gg_part, gg_r, gg_c, gg_v = n_sub[ok], sg[ok] - 1, sh[ok] - 1, n_v[ok]
        pair_cut = np.zeros(pair_x.size)
    gg_order = np.argsort(gg_part, kind="stable")
    gg_part, gg_r, gg_c, gg_v = gg_part[gg_order], gg_r[gg_order], gg_c[gg_order], gg_v[gg_order]
    gg_off = np.searchsorted(gg_part, np.arange(N + 1))
    # (part, component) pairs: the components inside Gamma_p, with the slots of their unknowns
    pc_key = np.unique(pair_p * np.int64(C) + comp[pair_x])
    pc_part, pc_comp = pc_key // C, pc_key % C
    pc_off = np.searchsorted(pc_part, np.arange(N + 1))
    # accumulators on the components: dense |e| x |e| blocks, flattened
    sq = sizes * sizes
    sq_off = np.concatenate([[0], np.cumsum(sq)])
    W_acc = np.zeros(int(sq_off[-1]))   # sum_p A_eI_p A_I_p^-1 A_I_p e
    SN_acc = np.zeros(int(sq_off[-1]))  # sum_p Schur of the Neumann matrix of p on e
    # local row of every interface unknown inside its component
    corder = np.argsort(comp, kind="stable")
    coff = np.concatenate([[0], np.cumsum(sizes)])
    in_comp = np.empty(nx, dtype=np.int64)
    in_comp[corder] = np.arange(nx) - coff[comp[corder]]
    # slots of each (part, component) block: pair indices of part p whose unknown is in e
    pair_pc = np.searchsorted(pc_key, pair_p * np.int64(C) + comp[pair_x])

    bounds = chunk_bounds(part_off, FACTOR_CHUNK_ROWS)
    # parts with an empty interior still have an interface: give them their own handling by
    # treating part ranges, not interior rows
    part_bounds = np.searchsorted(part_off, bounds, side="left")
    part_bounds[-1] = N
    part_bounds = np.unique(np.concatenate([[0], part_bounds, [N]]))
    entry_part = part[A_IG.row]
    for c in range(part_bounds.size - 1):  # a loop over chunks of parts
        p0, p1 = int(part_bounds[c]), int(part_bounds[c + 1])
        r0, r1 = int(part_off[p0]), int(part_off[p1])
        width = int(gsize[p0:p1].max()) if p1 > p0 else 0
        if width == 0:
            continue
        nparts = p1 - p0
        # W_p and the Neumann Schur complement, dense, and a temporary of their size
        check_memory(f"the AGDSW Schur complements of {nparts} parts of up to {width} "
                     "interface unknowns", 3 * nparts * width * width * 8,
                     "more, smaller parts have smaller interfaces")
        # W_p = A_{Gamma_p I_p} A_{I_p}^{-1} A_{I_p Gamma_p}, padded (nparts, width, width)
        Wp = np.zeros((nparts, width, width))
        if r1 > r0:
            # the entries are sorted by part (rows of A_I in part order)
            sel = slice(*np.searchsorted(entry_part, [p0, p1]))
            e_row = A_IG.row[sel] - r0
            e_slot = g_slot[sel]
            e_val = A_IG.data[sel]
            lu = _spd_factor(A_II[r0:r1, r0:r1])
            step = max(1, int(chunk_bytes) // (8 * (r1 - r0)))
            # rows (p, slot) of the expanded A_{Gamma I}: one per coupling entry
            exp_row = (part[A_IG.row[sel]] - p0) * width + e_slot
            Aexp = sp.csr_matrix((e_val, (exp_row, e_row)), shape=(nparts * width, r1 - r0))
            for s0 in range(0, width, step):  # column blocks of the slots
                s1 = min(s0 + step, width)
                cs = (e_slot >= s0) & (e_slot < s1)
                rhs = np.zeros((r1 - r0, s1 - s0), order="F")
                rhs[e_row[cs], e_slot[cs] - s0] = e_val[cs]
                X = lu.solve(rhs)
                Wp[:, :, s0:s1] = (Aexp @ X).reshape(nparts, width, s1 - s0)
            del lu
        # Neumann Schur complement of each part on Gamma_p: A_GG - cut - W_p
        SN = -Wp
        q0, q1 = int(gg_off[p0]), int(gg_off[p1])
        np.add.at(SN, (gg_part[q0:q1] - p0, gg_r[q0:q1], gg_c[q0:q1]), gg_v[q0:q1])
        ps = slice(int(goff[p0]), int(goff[p1]))
        SN[pair_p[ps] - p0, pair_slot[ps], pair_slot[ps]] -= pair_cut[ps]
        SN = 0.5 * (SN + np.swapaxes(SN, 1, 2))
        # pad to identity; the shift goes on the rest of the interface only (below)
        real = np.arange(width)[None, :] < gsize[p0:p1, None]
        diag = np.einsum("pii->pi", SN)
        scale = np.where(real, np.abs(diag), 0.0).max(axis=1)
        scale = np.where(scale > 0, scale, 1.0)
        idx = np.arange(width)
        SN[:, idx, idx] = np.where(real, diag, 1.0)
        # (part, component) blocks: the Schur complement of S_p onto e and W_p[e, e]
        b0, b1 = int(pc_off[p0]), int(pc_off[p1])
        if b1 == b0:
            continue
        bsz = sizes[pc_comp[b0:b1]]
        bw = int(bsz.max())
        # slots of the unknowns of each block, padded with -1
        pp = pair_pc[ps]
        blk = pp - b0
        rank = in_comp[pair_x[ps]]
        slots = np.full((b1 - b0, bw), -1, dtype=np.int64)
        slots[blk, rank] = pair_slot[ps]
        valid = slots >= 0
        sl = np.where(valid, slots, 0)
        bp = pc_part[b0:b1] - p0
        WB = Wp[bp[:, None, None], sl[:, :, None], sl[:, None, :]]
        both = valid[:, :, None] & valid[:, None, :]
        SB = _schur_onto_blocks(SN, real, scale, bp, sl, valid, chunk_bytes)
        # accumulate on the components (real entries only)
        bi, ri, ci = np.nonzero(both)
        comp_b = pc_comp[b0:b1][bi]
        flat = sq_off[comp_b] + ri * sizes[comp_b] + ci
        np.add.at(SN_acc, flat, SB[bi, ri, ci])
        np.add.at(W_acc, flat, WB[bi, ri, ci])
    # S^D_e = A_ee - W_e; eigenproblems by size group
    A_ee_flat = np.zeros(int(sq_off[-1]))
    same = comp[A_GG.row] == comp[A_GG.col]
    ce = comp[A_GG.row[same]]
    np.add.at(A_ee_flat, sq_off[ce] + in_comp[A_GG.row[same]] * sizes[ce]
              + in_comp[A_GG.col[same]], A_GG.data[same])
    SD_flat = A_ee_flat - W_acc
    padded, ladder = size_groups(sizes)
    lam_out, vec_out = {}, {}
    for w in ladder:  # a loop over the size groups
        members = np.flatnonzero(padded == w)
        w = int(w)
        check_memory(f"the AGDSW eigenproblems of {members.size} components of up to {w} "
                     "unknowns", 4 * members.size * w * w * 8)
        SD = np.zeros((members.size, w, w))
        SNm = np.zeros((members.size, w, w))
        sz = sizes[members]
        rep = np.repeat(np.arange(members.size), sz * sz)
        within = np.arange(rep.size) - np.repeat(np.cumsum(sz * sz) - sz * sz, sz * sz)
        rr, cc = within // sz[rep], within % sz[rep]
        src = sq_off[members][rep] + within
        SD[rep, rr, cc] = SD_flat[src]
        SNm[rep, rr, cc] = SN_acc[src]
        pad = np.arange(w)[None, :] >= sz[:, None]
        gi, gj = np.nonzero(pad)
        SD[gi, gj, gj] = 1.0
        SNm[gi, gj, gj] = 10.0  # lambda = 10 on padding: never selected
        SD = 0.5 * (SD + np.swapaxes(SD, 1, 2))
        SNm = 0.5 * (SNm + np.swapaxes(SNm, 1, 2))
        try:
            lam, V = _generalized_eigh(SNm, SD)
        except np.linalg.LinAlgError:
            raise ValueError("agdsw: a Dirichlet Schur complement on an interface component is "
                             "not positive definite; A must be symmetric positive "
                             "definite") from None
        V[pad] = 0.0
        lam_out[w] = (members, lam)
        vec_out[w] = V
        if Zx.shape[1] == 0:
            continue
        # the same span with the eigenvectors S^D-orthogonal to the null space on the
        # component; those (numerically) inside it get lambda = inf (never selected)
        Zg = np.zeros((members.size, w, Zx.shape[1]))
        rep1 = np.repeat(np.arange(members.size), sz)
        row1 = np.arange(rep1.size) - np.repeat(np.cumsum(sz) - sz, sz)
        Zg[rep1, row1] = Zx[corder[coff[members][rep1] + row1]]
        V, lam = _project_out(V, lam, SD @ V, Zg, SD @ Zg)
        lam_out[w] = (members, lam)
        vec_out[w] = V
    return lam_out, vec_out, sizes


# -- GenEO -----------------------------------------------------------------------------------------
def geneo_basis(
    A: Any,
    decomposition: Any,
    *,
    null_space: Any = None,
    neumann: Any = None,
    threshold: float | None = None,
    max_per_subdomain: int | None = None,
    dependence_rtol: float = DEPENDENCE_RTOL,
    return_info: bool = False,
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
        ``A`` (module notes; needs a diagonally dominant ``A``).
    threshold : float, optional
        Keep ``lambda < threshold`` (default :data:`GENEO_THRESHOLD`).
    max_per_subdomain : int, optional
        At most this many eigenvectors per subdomain, those of the smallest eigenvalues
        (default :data:`MAX_PER_SUBDOMAIN`); a ``RuntimeWarning`` says where it bites.
    dependence_rtol : float
        Relative tolerance of the dependent-function removal.
    return_info : bool
        Also return an :class:`AdaptiveInfo`.

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
    tau = _check_threshold(threshold, GENEO_THRESHOLD)
    cap = _check_cap("max_per_subdomain", max_per_subdomain, MAX_PER_SUBDOMAIN)
    rtol = check_positive_float("dependence_rtol", dependence_rtol)
    if not isinstance(return_info, (bool, np.bool_)):
        raise TypeError(f"return_info must be a bool, got {type(return_info).__name__}")
    A = _check_matrix(A)
    n, N = d.num_dofs, d.num_subdomains
    if A.shape[0] != n:
        raise ValueError(f"A must have shape ({n}, {n}) (decomposition.num_dofs), got "
                         f"{A.shape}")
    Z = None if null_space is None else _check_null_space(null_space, n)
    k = 0 if Z is None else Z.shape[1]
    sizes = d.sizes.astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    group = np.repeat(np.arange(N), sizes)
    within = np.arange(d.indices.size) - offsets[group]
    w = 1.0 / d.multiplicity[d.indices]  # D_i on the packed entries
    # the local matrices as one block-diagonal COO: entries (i, r, c)
    S = sp.csr_matrix((np.ones(d.indices.size), (np.arange(d.indices.size), d.indices)),
                      shape=(d.indices.size, n))
    blocks = (S @ A @ S.T).tocoo()  # stacked rows x stacked cols; keep same-subdomain pairs
    same = group[blocks.row] == group[blocks.col]
    b_sub = group[blocks.row[same]]
    b_r, b_c = within[blocks.row[same]], within[blocks.col[same]]
    b_v = blocks.data[same]
    del blocks
    if neumann is None:
        bad = _not_dominant_rows(A)
        if bad.size:
            raise ValueError(f"geneo: A is not diagonally dominant (row {int(bad[0])} and "
                             f"{bad.size - 1} more), so its algebraic local Neumann matrices "
                             "are not positive semidefinite; pass neumann= (one matrix per "
                             "subdomain, e.g. from ddops.problems.fem_elasticity_2d(..., "
                             "neumann=d)) or use coarse_basis='agdsw'")
        n_cut = _outside_coupling(A, d.indices, group, N)
        nm_sub, nm_r, nm_c, nm_v = b_sub, b_r, b_c, b_v
        k1 = int(d.multiplicity.max())
    else:
        n_cut = np.zeros(d.indices.size)
        nm_sub, nm_r, nm_c, nm_v = _check_neumann(neumann, sizes)
        k1 = int(d.multiplicity.max())
    # k0: subdomains meeting one subdomain (itself included)
    inc = sp.csr_matrix((np.ones(d.indices.size), (group, d.indices)), shape=(N, n))
    k0 = int(np.diff((inc @ inc.T).tocsr().indptr).max())
    eig_start = time.perf_counter()
    padded, ladder = size_groups(sizes)
    kept_vals = []  # (subdomain, local row, slot, value) of kept eigenvectors
    selected = np.zeros(N, dtype=np.int64)
    smallest = np.full(N, np.inf)
    capped = 0
    largest = 0
    # the subdomains in processing order (by padded size): every chunk below is a contiguous
    # range of it, and the entries sorted by the rank of their subdomain are sliced, not
    # searched, so the set-up stays linear in the number of entries
    order = np.argsort(padded, kind="stable")
    rank = np.empty(N, dtype=np.int64)
    rank[order] = np.arange(N)
    ent_order = np.argsort(rank[group], kind="stable")
    ent_off = np.searchsorted(rank[group][ent_order], np.arange(N + 1))
    b_order = np.argsort(rank[b_sub], kind="stable")
    b_off = np.searchsorted(rank[b_sub][b_order], np.arange(N + 1))
    n_order = np.argsort(rank[nm_sub], kind="stable")
    n_off = np.searchsorted(rank[nm_sub][n_order], np.arange(N + 1))
    iterations = 0
    unconverged, worst_drift = [], 0.0  # subdomains whose iteration hit its limit
    for width in ladder:  # a loop over size groups, each in memory-bounded chunks
        members_all = np.flatnonzero(padded == width)
        width = int(width)
        largest = max(largest, int(sizes[members_all].max()))
        # about 12 arrays of (rows x block) floats and the sparse factors per chunk
        step = max(1, FACTOR_CHUNK_ROWS * 4 // width)
        for c0 in range(0, members_all.size, step):
            members = members_all[c0:c0 + step]
            m = members.size
            pos = np.full(N, -1, dtype=np.int64)
            pos[members] = np.arange(m)
            lo, hi = int(rank[members[0]]), int(rank[members[-1]]) + 1
            ent = ent_order[ent_off[lo]:ent_off[hi]]
            Dw = np.zeros(m * width)
            Dw[pos[group[ent]] * width + within[ent]] = w[ent]
            e = b_order[b_off[lo]:b_off[hi]]
            br, bc = pos[b_sub[e]] * width + b_r[e], pos[b_sub[e]] * width + b_c[e]
            e2 = n_order[n_off[lo]:n_off[hi]]
            nr, nc = pos[nm_sub[e2]] * width + nm_r[e2], pos[nm_sub[e2]] * width + nm_c[e2]
            real = np.zeros(m * width, dtype=bool)
            real[pos[group[ent]] * width + within[ent]] = True
            pad_rows = np.flatnonzero(~real)
            shape = (m * width, m * width)
            Bs = sp.csr_matrix((Dw[br] * b_v[e] * Dw[bc], (br, bc)), shape=shape)
            Ns = sp.csr_matrix((np.concatenate([nm_v[e2], np.ones(pad_rows.size)]),
                                (np.concatenate([nr, pad_rows]), np.concatenate([nc, pad_rows]))),
                               shape=shape)
            if neumann is None:
                Ns = Ns - sp.csr_matrix((n_cut[ent], (pos[group[ent]] * width + within[ent],
                                                      pos[group[ent]] * width + within[ent])),
                                        shape=shape)
            Bs = ((Bs + Bs.T) * 0.5).tocsr()
            Ns = ((Ns + Ns.T) * 0.5).tocsr()
            smallest_size = int(sizes[members].min())
            wanted = max(1, min(GENEO_INITIAL_VECTORS, cap))
            try:
                while True:  # grow the subspace while a subdomain fills it below tau
                    block = min(wanted + max(GENEO_EXTRA_VECTORS, wanted // 4), smallest_size)
                    grow = wanted < cap and block < smallest_size
                    lam, V, its, drift = _subspace_eigh(Ns, Bs, m, width, block, tau, real,
                                                        max(cap, 1), grow, wanted)
                    if not (grow and np.any((lam < tau).sum(axis=1) > wanted)):
                        break
                    wanted = min(2 * wanted, cap)
            except _NotPositive as exc:
                i = int(members[exc.bad[0]])
                raise ValueError(f"neumann: the matrix of subdomain {i} is not positive "
                                 "semidefinite (its shifted matrix N_i + tau D_i A_i D_i has "
                                 "a non-positive or an off-diagonal pivot)"
                                 if neumann is not None else
                                 f"geneo: the local matrices of subdomain {i} are not positive "
                                 "definite; A must be symmetric positive definite") from None
            iterations = max(iterations, its)
            stalled = np.flatnonzero(drift > 0)
            unconverged.extend(members[stalled].tolist())
            worst_drift = max(worst_drift, float(drift.max()) if drift.size else 0.0)
            if neumann is not None:
                neg = lam[:, 0] < -1e-8 * np.maximum(1.0, np.abs(lam[:, :1]))[:, 0]
                if neg.any():
                    i = int(members[np.flatnonzero(neg)[0]])
                    raise ValueError(f"neumann: the matrix of subdomain {i} is not positive "
                                     "semidefinite (a negative generalized eigenvalue "
                                     f"{lam[np.flatnonzero(neg)[0], 0]:.3e})")
            if k:
                Zg = np.zeros((m * width, k))
                Zg[pos[group[ent]] * width + within[ent]] = Z[d.indices[ent]]
                BV = (Bs @ V.reshape(m * width, -1)).reshape(V.shape)
                BZ = (Bs @ Zg).reshape(m, width, k)
                V, lam = _project_out(V, lam, BV, Zg.reshape(m, width, k), BZ)
            keep, count = _select(lam, tau, cap)
            selected[members] = count
            smallest[members] = lam.min(axis=1)
            capped += int((count > cap).sum())
            slot = np.cumsum(keep, axis=1) - 1
            g, j = np.nonzero(keep)
            sz = sizes[members[g]]
            rep = np.repeat(np.arange(g.size), sz)
            row = np.arange(rep.size) - np.repeat(np.cumsum(sz) - sz, sz)
            kept_vals.append((members[g][rep], row, slot[g, j][rep], V[g[rep], row, j[rep]]))
    _warn_cap(capped, "subdomains", "max_per_subdomain", cap)
    if unconverged:  # once for the whole set-up
        shown = ", ".join(str(i) for i in sorted(unconverged)[:10])
        warn(f"geneo: the subspace iteration stopped at its limit of {GENEO_MAX_ITERATIONS} "
             f"iterations before its Ritz values settled on {len(unconverged)} subdomain(s) "
             f"({shown}{', ...' if len(unconverged) > 10 else ''}): the last iteration still "
             f"changed them by up to {worst_drift:.1e} times the threshold, so the selected "
             "functions there are unconverged Ritz vectors and may miss eigenvectors below "
             "the threshold (a threshold inside a cluster of eigenvalues converges slowest; "
             "move it away from the cluster)", RuntimeWarning)
    eigen_seconds = time.perf_counter() - eig_start
    # values on the packed entries: [D Z, D v_1, D v_2, ...]
    extra = max((int(s.max()) + 1 for _, _, s, _ in kept_vals if s.size), default=0)
    values = np.zeros((d.indices.size, k + extra))
    if k:
        values[:, :k] = Z[d.indices]
    for sub, row, slot, val in kept_vals:
        values[offsets[sub] + row, k + slot] = val
    values *= w[:, None]
    nonzero = np.zeros((N, values.shape[1]), dtype=bool)
    r, c = np.nonzero(values)
    nonzero[group[r], c] = True
    # Gram-Schmidt for the null-space vectors only: the eigenvectors of a subdomain are
    # B-orthonormal and B-orthogonal to them already (independent), and a global check of
    # the whole basis follows
    keep = nonzero.copy()
    if k:
        keep[:, :k] = _independent_vectors(group, values[:, :k], N, rtol) & nonzero[:, :k]
    col_group, col_vec = np.nonzero(keep)
    if keep.any():
        Phi, _ = _columns_from_groups(d.indices, group, values, keep, n)
        Phi, cols = drop_dependent_columns(A, Phi, first=col_vec < k)
    else:  # no eigenvalue below the threshold anywhere (and no null space)
        Phi, cols = sp.csr_matrix((n, 0)), np.zeros(0, dtype=np.int64)
    dropped = int(nonzero.sum() - cols.size)
    col_group, col_vec = col_group[cols], col_vec[cols]
    if not return_info:
        return Phi
    kept = np.bincount(col_group[col_vec >= k], minlength=N)
    bound = (1 + k0) * (2 + k0 * (2 * k0 + 1) * max(1.0, k1 / tau))
    info = AdaptiveInfo(
        method="geneo", threshold=tau, column_group=col_group,
        column_kind=np.where(col_vec < k, "null_space", "eigenvector"),
        selected=selected, kept=kept, eigenvalues=smallest,
        stats={"coarse_dim": int(Phi.shape[1]), "null_space_functions": int((col_vec < k).sum()),
               "eigen_functions": int(kept.sum()), "dropped_dependent": dropped,
               "capped": capped, "kept_per_subdomain": kept,
               "eigenproblems": int(N), "largest_eigenproblem": largest,
               "eigen_seconds": eigen_seconds, "extension_seconds": 0.0,
               "subspace_iterations": iterations, "k0": k0, "k1": k1, "bound": float(bound),
               "seconds": time.perf_counter() - start})
    return Phi, info


def _check_neumann(neumann: Any, sizes: np.ndarray):
    """User Neumann matrices as the stacked entries ``(subdomain, row, col, value)``."""
    if sp.issparse(neumann) or isinstance(neumann, np.ndarray) and neumann.ndim == 2:
        raise TypeError("neumann must be a sequence of matrices, one per subdomain")
    try:
        mats = list(neumann)
    except TypeError:
        raise TypeError("neumann must be a sequence of matrices, one per subdomain, got "
                        f"{type(neumann).__name__}") from None
    if len(mats) != sizes.size:
        raise ValueError(f"neumann must hold one matrix per subdomain ({sizes.size}), got "
                         f"{len(mats)}")
    subs, rows, cols, vals = [], [], [], []
    for i, M in enumerate(mats):  # validation and stacking of the user's list
        Mi = sp.coo_matrix(M, dtype=np.float64) if sp.issparse(M) else sp.coo_matrix(
            np.asarray(M, dtype=np.float64))
        if Mi.shape != (sizes[i], sizes[i]):
            raise ValueError(f"neumann[{i}] must have shape ({sizes[i]}, {sizes[i]}) (the "
                             f"size of subdomain {i}), got {Mi.shape}")
        if not np.all(np.isfinite(Mi.data)):
            raise ValueError(f"neumann[{i}] contains NaN or inf")
        subs.append(np.full(Mi.nnz, i, dtype=np.int64))
        rows.append(Mi.row.astype(np.int64))
        cols.append(Mi.col.astype(np.int64))
        vals.append(Mi.data)
    return (np.concatenate(subs), np.concatenate(rows), np.concatenate(cols),
            np.concatenate(vals))
