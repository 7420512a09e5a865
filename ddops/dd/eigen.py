"""What the adaptive coarse spaces share: local Neumann matrices and small eigenproblems.

AGDSW (:mod:`ddops.dd.agdsw`) and GenEO (:mod:`ddops.dd.geneo`) enrich a classical coarse
space with the eigenvectors of many small generalized eigenproblems whose eigenvalues fall
below a threshold (see :mod:`ddops.dd.adaptive`).  This module holds what both use: the
algebraic local Neumann matrices, batched dense generalized eigensolvers, the selection of
the eigenpairs below the threshold under a cap, the checks of their options and the
information object they return.

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
functions than needed (the set-up warns once), and GenEO oversamples
instead (:mod:`ddops.dd.oversampling`: the couplings are clamped at a wall
moved a few layers, and along stiff unknowns, away from ``w``), or takes the
finite-element Neumann matrices (``neumann=``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from .._validation import check_int, check_positive_float, warn
from .interface import InterfaceComponents
from .validation import check_matrix

__all__ = [
    "EIGEN_DEPENDENCE_RTOL",
    "AdaptiveInfo",
    "size_groups",
    "split_padded_chunks",
    "local_neumann_matrices",
    "check_threshold",
    "check_cap",
    "check_neumann",
    "outside_coupling",
    "not_dominant_rows",
    "generalized_eigh",
    "project_out",
    "select_eigenpairs",
    "warn_cap",
]

#: An AGDSW eigenvector whose part S^D-orthogonal to the null space on its component has a
#: relative S^D-norm at most this is a combination of the null-space functions there and is
#: not used (the shifted Neumann solves leave such vectors about 1e-7 away from the span).
EIGEN_DEPENDENCE_RTOL = 1e-4


@dataclass
class AdaptiveInfo:
    """What :func:`~ddops.dd.agdsw.agdsw_basis` or :func:`~ddops.dd.geneo.geneo_basis` built.

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
        bounds, accurate to about 1e-8 below the threshold and to a few percent above;
        ``nan`` where GenEO's inertia count settled the subdomain without an eigensolve
        and nothing outside the kernel is below the threshold (the eigenvalue is then only
        known to be above it), 0 where the constants were that kernel; AGDSW: ``nan`` on
        the components whose eigenproblem its contrast indicator skipped
        (``skip_contrast``) or that another process computes (``owned_parts``).
    components : InterfaceComponents or None
        The interface (AGDSW only).
    harmonic_interface : numpy.ndarray or None
        AGDSW with an exact extension: the interface unknowns, off which every column is
        discrete harmonic (see :class:`ddops.dd.gdsw.GDSWInfo`); else None.
    coarse_matrix : scipy.sparse.csr_matrix or None
        ``Phi^T A Phi`` of the returned basis where the dependence check formed it
        (:func:`~ddops.dd.coarse_matrix.drop_dependent_columns`: GenEO, and AGDSW when it
        has eigenvectors); the coarse correction takes it (and releases it here) instead
        of forming it again.  None otherwise.
    stats : dict
        Counts and timings: ``coarse_dim``, ``null_space_functions``,
        ``eigen_functions``, ``dropped_dependent``, ``capped`` (groups where the
        cap bit), ``kept_per_component`` (AGDSW) or ``kept_per_subdomain``
        (GenEO): the eigenvectors kept in every group, an integer array,
        ``eigenproblems``, ``largest_eigenproblem``, ``eigen_seconds`` (Schur
        complements and eigenproblems), ``extension_seconds``, ``seconds``;
        ``skipped_eigenproblems``: AGDSW's components whose eigenproblem the contrast
        indicator skipped (:mod:`ddops.dd.indicators`), GenEO's subdomains settled by the
        inertia count alone (:data:`ddops.dd.geneo.GENEO_INERTIA`); GenEO adds
        ``subspace_iterations`` (the most solves of a chunk), ``solved_columns`` (the
        columns solved with the chunks' shifted factorisations, summed), ``k0``,
        ``k1``, ``bound`` (the condition-number bound
        of :mod:`ddops.dd.geneo`) and ``shared_ordering`` (whether its factorisations
        took the subdomains' shared elimination order, ``analysis=``).
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
    coarse_matrix: Any = None


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


def split_padded_chunks(width: np.ndarray, bounds: np.ndarray, saving: float) -> np.ndarray:
    """Chunks of items split where that saves padded columns.

    ``bounds`` (from 0 to the number of items, increasing) cuts items whose ``width`` does
    not decrease within a chunk; each chunk is split in two, again and again, where that
    saves at least the fraction ``saving`` of its padded columns (a batched chunk pads every
    item to its widest: ``(b - a) * width[b - 1]`` columns for the items ``a:b``).
    ``saving >= 1`` splits nothing.  Returns the new boundaries."""
    width = np.asarray(width, dtype=np.int64)
    work = [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]
    starts = []
    while work:  # a loop over chunks (a few per size group), not over items
        a, b = work.pop()
        j = np.arange(1, b - a)  # split after j items: j of them, then b - a - j
        cost = j * width[a + j - 1] + (b - a - j) * width[b - 1]
        at = int(np.argmin(cost)) if j.size else 0
        if j.size and cost[at] <= (1.0 - saving) * (b - a) * width[b - 1]:
            work += [(a, a + int(j[at])), (a + int(j[at]), b)]
        else:
            starts.append(a)
    return np.array(sorted(starts) + [width.size], dtype=np.int64)


def check_threshold(threshold: Any, default: float) -> float:
    """The eigenvalue threshold: ``default`` for None, else a positive float (or an error)."""
    if threshold is None:
        return default
    return check_positive_float("threshold", threshold)


def check_cap(name: str, value: Any, default: int) -> int:
    """A cap on the eigenvectors per group: ``default`` for None, else an int >= 0."""
    return default if value is None else check_int(name, value, minimum=0)


def outside_coupling(A: sp.csr_matrix, rows: np.ndarray, sets: np.ndarray,
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


def not_dominant_rows(A: sp.csr_matrix, outside: np.ndarray | None = None,
                      diagonal: np.ndarray | None = None) -> np.ndarray:
    """The rows where ``A`` is not weakly diagonally dominant (beyond a 1e-10 relative slack);
    ``outside`` adds to each row's absolute off-diagonal sum (the couplings of a block of a
    larger matrix to the rest of it); ``diagonal``: the rows' diagonal entries where ``A``
    is a set of rows of a larger matrix (default ``A.diagonal()``)."""
    absA = abs(A).tocsr()
    diag = A.diagonal() if diagonal is None else np.asarray(diagonal)
    off = np.asarray(absA.sum(axis=1)).ravel() - np.abs(diag)
    if outside is not None:
        off = off + outside
    scale = np.maximum(np.abs(diag), 1e-300)
    return np.flatnonzero(diag - off < -1e-10 * scale)


def local_neumann_matrices(A: Any, decomposition: Any) -> list[sp.csr_matrix]:
    """Algebraic local Neumann matrices ``N_i = A_i - diag(sum_{l not in i} |a_kl|)``.

    One per subdomain of ``decomposition``, in the order of its unknowns: ``A_i = R_i A
    R_i^T`` with the absolute couplings that leave the subdomain taken off its diagonal
    (the couplings are cut, module notes).  When ``A`` is weakly diagonally dominant every
    ``N_i`` is symmetric positive semidefinite, and the constants are in the kernel of the
    ``N_i`` of a floating subdomain (one whose rows all have zero sums, away from any
    Dirichlet boundary).  :func:`ddops.dd.geneo.geneo_basis` computes the same matrices
    batched; these are for inspection, or to modify and pass back as ``neumann=``.

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
    A = check_matrix(A)
    d = decomposition
    N = d.num_subdomains
    group = np.repeat(np.arange(N), d.sizes)
    cut = outside_coupling(A, d.indices, group, N)
    result = []
    for i, idx in enumerate(d.subdomains):  # inspection helper, not a hot path
        Ai = A[idx][:, idx] - sp.diags(cut[d.offsets[i]:d.offsets[i + 1]])
        result.append(sp.csr_matrix(Ai))
    return result


def generalized_eigh(Anum: np.ndarray, B: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``Anum v = lambda B v`` for stacks, ``B`` SPD: ascending eigenvalues, B-orthonormal V."""
    L = np.linalg.cholesky(B)
    eye = np.broadcast_to(np.eye(B.shape[-1]), B.shape)
    Linv = np.linalg.solve(L, eye)
    C = Linv @ Anum @ np.swapaxes(Linv, -1, -2)
    C = 0.5 * (C + np.swapaxes(C, -1, -2))
    lam, Y = np.linalg.eigh(C)
    return lam, np.swapaxes(Linv, -1, -2) @ Y


def project_out(V: np.ndarray, lam: np.ndarray, BV: np.ndarray, Zg: np.ndarray,
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


def select_eigenpairs(lam: np.ndarray, threshold: float, cap: int) -> tuple[np.ndarray, np.ndarray]:
    """Which eigenpairs to keep (ascending ``lam`` per row) and how many were below threshold."""
    below = lam < threshold
    count = below.sum(axis=1)
    rank = np.cumsum(below, axis=1)
    return below & (rank <= cap), count


def warn_cap(capped: int, what: str, cap_name: str, cap: int) -> None:
    """Warn once (RuntimeWarning) that the cap ``cap_name`` bit on ``capped`` groups."""
    if capped:
        warn(f"{capped} {what} had more eigenvalues below the threshold than "
             f"{cap_name}={cap}; only the {cap} smallest were kept there (raise "
             f"{cap_name} or lower the threshold)", RuntimeWarning)


def check_neumann(neumann: Any, sizes: np.ndarray, allow_none: bool = False):
    """User Neumann matrices as the stacked entries ``(subdomain, row, col, value)``
    (``allow_none``: a None entry is a subdomain without one, no entries; then also a
    Boolean array, the subdomains that have one)."""
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
    ids, rows, cols, vals = [], [], [], []
    for i, M in enumerate(mats):  # validation and stacking of the user's list
        if M is None:
            if allow_none:
                continue
            raise ValueError(f"neumann[{i}] is None: every subdomain needs its matrix")
        if not sp.issparse(M):
            M = sp.coo_matrix(np.asarray(M, dtype=np.float64))
        if M.shape != (sizes[i], sizes[i]):
            raise ValueError(f"neumann[{i}] must have shape ({sizes[i]}, {sizes[i]}) (the "
                             f"size of subdomain {i}), got {M.shape}")
        if M.format in ("csr", "csc"):
            # the rows (columns) of CSR (CSC) from its pointers: no COO copy, no check of
            # its format per matrix (128 subdomains: 25-40 ms -> 5-6 ms)
            end = int(M.indptr[-1])  # (arrays longer than that: the rest is no entry)
            major = np.repeat(np.arange(M.indptr.size - 1, dtype=np.int64), np.diff(M.indptr))
            minor = M.indices[:end].astype(np.int64)
            r, c = (major, minor) if M.format == "csr" else (minor, major)
            v = M.data[:end]
        else:
            Mi = sp.coo_matrix(M)
            r, c, v = Mi.row.astype(np.int64), Mi.col.astype(np.int64), Mi.data
        v = np.asarray(v, dtype=np.float64)
        if not np.all(np.isfinite(v)):
            raise ValueError(f"neumann[{i}] contains NaN or inf")
        ids.append(i)
        rows.append(r)
        cols.append(c)
        vals.append(v)
    if ids:
        entries = (np.repeat(np.array(ids, dtype=np.int64), [v.size for v in vals]),
                   np.concatenate(rows), np.concatenate(cols), np.concatenate(vals))
    else:
        empty = np.zeros(0, dtype=np.int64)
        entries = empty, empty, empty, np.zeros(0)
    if allow_none:
        return entries, np.array([M is not None for M in mats], dtype=bool)
    return entries
