"""Adaptive GDSW (AGDSW): GDSW enriched with the eigenvectors of interface eigenproblems.

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
matrices of one chunk at a time, one tree of eliminations per part that splits its
interface in halves down to the components (the Schur complements onto all of them for
about the cost of two factorisations of the part's matrix, see ``_schur_onto_blocks``),
and one batched ``eigh`` per size group of components.  The chunks of parts, and the size
groups, are independent and run on up to :func:`ddops.linalg.parallel.chunk_workers`
threads (one with ``threads=1``), one BLAS thread each.

A given null space ``Z`` enters first (GDSW's pieces ``Z`` on every component), the
eigenvectors follow; see :mod:`ddops.dd.adaptive`.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import scipy.sparse as sp

from .._validation import check_int, check_memory, check_positive_float, warn
from ..linalg.local_solvers import (
    EXACT_SOLVERS,
    SingularBlockError,
    chunk_bounds,
    default_exact_solver,
    factorize_blocks,
    pardiso_schur_complement,
)
from ..linalg.parallel import map_chunks, rows_per_chunk
from .analysis import GDSWAnalysis, classify
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
    warn_cap,
)
from .extension import EXTENSION_CHUNK_BYTES, FACTOR_CHUNK_ROWS, harmonic_extension
from .groups import DEPENDENCE_RTOL, columns_from_groups, independent_vectors
from .indicators import check_skip_contrast, component_contrast
from .validation import check_matrix, check_null_space, check_owner

__all__ = [
    "AGDSW_SKIP_CONTRAST",
    "AGDSW_THRESHOLD",
    "MAX_PER_COMPONENT",
    "NEUMANN_SHIFT",
    "agdsw_basis",
]

#: Default AGDSW threshold on ``lambda`` of ``S^N tau = lambda S^D tau``.  Channel and
#: inclusion modes have ``lambda`` of the order of the inverse contrast; the smallest
#: ``lambda`` of a homogeneous problem outside the constants is 0.13, 0.10 and 0.08 on 2D boxes
#: of 8, 16 and 32 points a side and 0.16 and 0.11 on 3D boxes of 6 and 10, so 0.05 keeps the
#: first and leaves GDSW unchanged on homogeneous problems; see the preconditioning guide.
AGDSW_THRESHOLD = 0.05

#: Default of ``skip_contrast`` (with a threshold up to :data:`AGDSW_THRESHOLD`): no
#: eigenproblem on a component around which the diagonal of ``A`` varies by at most this
#: factor (:mod:`ddops.dd.indicators`); 0 runs every eigenproblem (the full AGDSW space).
#: Below the default threshold a homogeneous component selects nothing on boxes (see
#: above), and a jump of 10 in the coefficient is a jump of about 10 in the diagonal.
#: Measured on the five problems of the set-up benchmark (``benchmarks/agdsw_indicator.py``:
#: same process, interleaved, one thread): the same iterations as the full space on each;
#: AGDSW's set-up 9.04 -> 0.82 s on 3D Poisson (GDSW's: 0.81 s), within 3% on the other four
#: (few components skipped, and the parts around them border other components too).
AGDSW_SKIP_CONTRAST = 10.0

#: Default cap on the eigenvectors added per interface component (AGDSW).
MAX_PER_COMPONENT = 32

#: Interface rows per call of PARDISO's partial factorisation for the Neumann Schur
#: complements of the parts (a few parts per call): its dense Schur block costs the square of
#: the rows in memory and more than that in time (3D Poisson, parts of 1,400 interface
#: unknowns: 18 ms a part one or two per call, 27 ms three per call, 190 ms six per call).
SCHUR_ROWS = 1000

#: The widest interface (``|Gamma_p|``) of a chunk of parts from which AGDSW computes the
#: Schur complements by PARDISO's partial factorisations instead of interior solves and the
#: dense tree: two or three sparse factorisations of a part cost more than the dense first
#: level of the tree and the solves on narrow interfaces.  Measured (one thread): 2D Poisson,
#: 128 parts of |Gamma_p| about 380, eigenproblems 2.9 s against 2.4 s (dense wins); 3D
#: Poisson, 62 parts of about 1,400, 8.3 s against 17.8 s; 3D elasticity, 64 parts of about
#: 660 (and 100 interior unknowns), the whole basis 5.3-6.1 s against 5.2-5.6 s with the
#: partial factorisations on every chunk, so no rule on the interior either.
SCHUR_PARDISO_MIN_WIDTH = 600

#: About this many stacks of a batch of a size group's eigenproblems are alive at once
#: (the two pencils, the Cholesky factor, its inverse, a product, the eigenvectors and
#: LAPACK's copies); a batch holds at most ``chunk_bytes`` of them.  The batched ``eigh``
#: loops over the matrices in C, so smaller batches cost no time, and the set-up's peak
#: on the 2D channels was the eigensolve of a whole size group.
EIGEN_STACKS = 8

#: What a part whose interior matrix is not positive definite is told.
_INTERIOR_NOT_SPD = ("A is not positive definite: the interior matrix A_II of {part} has a "
                     "non-positive or vanishing pivot (it is indefinite or singular); A must be "
                     "symmetric positive definite")

#: Relative shift of a block of a part's Neumann Schur complement when it is eliminated
#: on the way to a component ``e`` (a principal block of the rest ``S_rr`` in
#: ``S_ee - S_er S_rr^{-1} S_re``) and found exactly singular: a rounding-size guard (a
#: kernel vector of the part that vanishes on ``e``, e.g. a rotation about a one-node
#: vertex); the constants of a floating part do not vanish on ``e``, so ``S_rr`` is
#: nonsingular there.  A larger shift costs accuracy at high contrast
#: (1e-10 of the largest diagonal entry: 6e-3 relative error in ``S_e^N`` at contrast 1e6).
NEUMANN_SHIFT = 1e-15


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
    analysis: GDSWAnalysis | None = None,
    skip_contrast: float | None = None,
    owned_parts: Any = None,
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
        :data:`~ddops.dd.agdsw.AGDSW_THRESHOLD`); see :mod:`ddops.dd.agdsw` for its
        meaning.
    max_per_component : int, optional
        At most this many eigenvectors per component (the smallest; default
        :data:`~ddops.dd.agdsw.MAX_PER_COMPONENT`); a ``RuntimeWarning`` says where it
        bites.
    neumann : sequence of sparse matrices, optional
        Local Neumann matrices, one per part ``p`` on an index set that holds the
        closure of ``p`` (its unknowns and the interface unknowns around it), e.g.
        from a finite-element assembly on the subdomains of a decomposition with
        overlap 1 (``ddops.problems.fem_elasticity_2d(..., neumann=d)``); default:
        computed from ``A`` (:mod:`ddops.dd.eigen`).  Use them where ``A`` is not diagonally
        dominant.
    neumann_indices : sequence of integer arrays, optional
        The unknowns of every Neumann matrix, in its row order (e.g.
        ``decomposition.subdomains``); required with ``neumann``.
    dependence_rtol : float
        Relative tolerance of the dependent-function removal.
    return_info : bool
        Also return an :class:`~ddops.dd.eigen.AdaptiveInfo`.
    chunk_bytes : int
        Memory bound of one block of right-hand sides in the solves.
    extension_solver : {"auto", "superlu", "pardiso", "amg"}
        Solver of the final harmonic extension (see :func:`ddops.dd.gdsw.harmonic_extension`).
    analysis : GDSWAnalysis, optional
        Keeps the interface components and the final extension's PARDISO analyses (or
        orderings) for a later call on a matrix with the same pattern (see
        :class:`~ddops.dd.analysis.GDSWAnalysis`).
    skip_contrast : float, optional
        No eigenproblem on a component around which the diagonal of ``A`` varies by at most
        this factor (:func:`ddops.dd.indicators.component_contrast`): it keeps GDSW's
        functions only, and the parts around no other component form no Schur complement.
        0 solves every eigenproblem.  Default :data:`AGDSW_SKIP_CONTRAST` with a
        ``threshold`` up to :data:`AGDSW_THRESHOLD`, 0 with a larger one (which selects
        functions where the coefficient is constant too).
    owned_parts : array of bool, optional
        Indexed by part label: only the components whose first (lowest) part is marked
        get functions (GDSW's and their eigenvectors); ``neumann`` may be None for the
        parts around none of them.  A build split over processes
        (:func:`ddops.distributed.precond.rank_local_agdsw`) marks each one's parts.

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
    tau = check_threshold(threshold, AGDSW_THRESHOLD)
    cap = check_cap("max_per_component", max_per_component, MAX_PER_COMPONENT)
    rtol = check_positive_float("dependence_rtol", dependence_rtol)
    if not isinstance(return_info, (bool, np.bool_)):
        raise TypeError(f"return_info must be a bool, got {type(return_info).__name__}")
    chunk_bytes = check_int("chunk_bytes", chunk_bytes, minimum=1)
    # a threshold above the default selects functions on homogeneous components too
    skip = check_skip_contrast(skip_contrast,
                               AGDSW_SKIP_CONTRAST if tau <= AGDSW_THRESHOLD else 0.0)
    A = check_matrix(A)
    n = A.shape[0]
    owner = check_owner(owner, n)
    Z = check_null_space(null_space, n)
    comps = classify(A, owner, interface, block_size, analysis)
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
        entries, given = check_neumann(neumann, sizes_n, allow_none=True)
        user = (entries, np.concatenate(idx), np.concatenate([[0], np.cumsum(sizes_n)]), given)
    elif not_dominant_rows(A).size:
        warn("agdsw: A is not diagonally dominant, so the algebraic local Neumann "
                      "matrices are not positive semidefinite and more functions than needed "
                      "may be selected (GenEO, from A alone with oversampled local "
                      "matrices or with finite-element Neumann matrices, is the "
                      "alternative)", RuntimeWarning)
    # the Schur complements' interior solves: the extension's exact solver (its inexact
    # one, "amg", would perturb the eigenproblems: those keep the exact default)
    schur_solver = (extension_solver if extension_solver in EXACT_SOLVERS
                    else default_exact_solver())
    eig_start = time.perf_counter()
    need = component_contrast(A, comps, block_size) > skip if skip > 0 else None
    if owned_parts is not None:
        marked = np.asarray(owned_parts)
        if marked.dtype != bool or marked.ndim != 1 or marked.size < comps.num_parts:
            raise ValueError("owned_parts must be a Boolean array with an entry per part "
                             f"label (at least {comps.num_parts}), got {marked.dtype} "
                             f"{marked.shape}")
        owned = marked[comps.first_parts()]
        need = owned if need is None else need & owned
    else:
        owned = None
    if user is not None and not user[3].all():
        lacking = comps.parts_around(np.ones(comps.num_components, bool) if need is None
                                     else need) & ~user[3][:comps.num_parts]
        if lacking.any():
            p = int(np.flatnonzero(lacking)[0])
            raise ValueError(f"neumann[{p}] is None, but part {p} borders a component whose "
                             "eigenproblem runs")
    lam_all, vecs, sizes = _agdsw_eigenpairs(A, owner, comps, chunk_bytes, Z[comps.interface],
                                             user, schur_solver, need, keep=(tau, cap))
    x, comp = comps.interface, comps.component
    C, k = comps.num_components, Z.shape[1]
    # select per component (eigenvalues ascending), cap, lay out next to Z
    kmax = max((v.shape[2] for v in vecs.values()), default=0)
    values = np.zeros((x.size, k + min(kmax, cap)))
    values[:, :k] = Z[x]
    selected = np.zeros(C, dtype=np.int64)
    smallest = np.full(C, np.inf if need is None else np.where(need, np.inf, np.nan))
    capped = 0
    # the interface positions grouped by component, and where each component starts there
    rows_of = np.argsort(comp, kind="stable")
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    for batch, (members, lam) in lam_all.items():  # a loop over a few batches
        V = vecs[batch]
        keep, count = select_eigenpairs(lam, tau, cap)
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
    warn_cap(capped, "interface components", "max_per_component", cap)
    eigen_seconds = time.perf_counter() - eig_start
    nonzero = np.zeros((C, values.shape[1]), dtype=bool)
    r, c = np.nonzero(values)
    nonzero[comp[r], c] = True
    # Gram-Schmidt over all the functions of a component: the eigenvectors are
    # S^D-orthogonal to the null space, but on matrices that are not diagonally dominant
    # (elasticity) the projected ones can be nearly parallel, which the global drop below
    # cannot always resolve in the order the coarse factorisation then uses
    if owned is not None:  # the functions of the marked parts' components only
        nonzero &= owned[:, None]
    keep = independent_vectors(comp, values, C, rtol) & nonzero
    ext_start = time.perf_counter()
    PhiG, _ = columns_from_groups(x, comp, values, keep, n)
    Phi = harmonic_extension(A, owner, x, PhiG, chunk_bytes=chunk_bytes, solver=extension_solver,
                             null_space=Z, analysis=analysis, block_size=block_size)
    ext_seconds = time.perf_counter() - ext_start
    # where A Phi vanishes off the interface (an exact extension): A_0 from its rows
    harmonic = None if extension_solver == "amg" else x
    col_group, col_vec = np.nonzero(keep)
    if (col_vec >= k).any():
        # functions of different components can still depend on each other numerically
        Phi, cols, A0 = drop_dependent_columns(A, Phi, first=col_vec < k, rows=harmonic,
                                               return_matrix=True)
    else:
        # GDSW's functions only (every eigenproblem skipped or selecting nothing): those of
        # different components differ on disjoint interface sets, so they are independent
        # and the basis is gdsw_basis's (which checks no more); 0.1 s of 0.4 s on 3D Poisson
        cols = np.arange(Phi.shape[1])
        A0 = None
    dropped = int(nonzero.sum() - cols.size)
    col_group, col_vec = col_group[cols], col_vec[cols]
    if not return_info:
        return Phi
    kept = np.bincount(col_group[col_vec >= k], minlength=C)
    info = AdaptiveInfo(
        method="agdsw", threshold=tau, column_group=col_group,
        column_kind=np.where(col_vec < k, "null_space", "eigenvector"),
        selected=selected, kept=kept, eigenvalues=smallest, components=comps,
        harmonic_interface=harmonic, coarse_matrix=A0,
        stats={"coarse_dim": int(Phi.shape[1]), "null_space_functions": int((col_vec < k).sum()),
               "eigen_functions": int(kept.sum()), "dropped_dependent": dropped,
               "capped": capped, "kept_per_component": kept,
               "eigenproblems": int(C if need is None else need.sum()),
               # (the components of other processes, owned_parts, are not skipped ones)
               "skipped_eigenproblems": int(0 if need is None else
                                            ((True if owned is None else owned) & ~need).sum()),
               "largest_eigenproblem": int(sizes.max() if need is None else
                                           sizes[need].max(initial=0)),
               "eigen_seconds": eigen_seconds,
               "extension_seconds": ext_seconds, "seconds": time.perf_counter() - start})
    return Phi, info


def _schur_onto_blocks(S: np.ndarray, real: np.ndarray, scale: np.ndarray, bp: np.ndarray,
                       sl: np.ndarray, valid: np.ndarray,
                       chunk_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    """Schur complements ``S_ee - S_er S_rr^{-1} S_re`` of padded stacked matrices onto blocks.

    Block ``b`` is the set of slots ``sl[b][valid[b]]`` of the matrix ``S[bp[b]]`` (``real``
    marks its real slots, ``scale`` its largest diagonal entry, ``valid[b]`` is a prefix);
    ``r`` is the rest of that matrix's real slots, and the blocks of a matrix (consecutive
    in ``bp``) partition its real slots.  Returns ``(values, off)``: the ``k x k`` Schur
    complement of block ``b`` (``k = valid[b].sum()``) is
    ``values[off[b]:off[b + 1]].reshape(k, k)``, unpadded.

    All the blocks of a matrix are reached by one tree of eliminations instead of one
    elimination of ``S_rr`` per block (``|Gamma_p|^3`` each): the blocks of a node are split
    into two halves ``L`` and ``R`` of about equal size and the node's matrix ``M`` into its
    two Schur complements ``M_LL - M_LR M_RR^{-1} M_RL`` and ``M_RR - M_RL M_LL^{-1} M_LR``,
    the children, until a node holds one block (the quotient property of Schur complements:
    eliminating ``r`` in two steps gives the same matrix).  A level costs about
    ``(7 / 6) n^3`` on a node of size ``n`` and the sizes halve, so a matrix of width ``w``
    costs about ``1.6 w^3`` whatever its number of blocks, against ``(2 / 3) w^3`` per block.
    Every step eliminates a principal block of ``S_rr`` for some block ``e`` (as the direct
    elimination does, with LU and partial pivoting), so nothing is lost to the near-kernel
    of a floating part at high contrast, unlike the block of an inverse, ``(S^{-1})_ee^{-1}``.
    A batch whose eliminated block is exactly singular is solved again with the
    rounding-size relative shift :data:`NEUMANN_SHIFT` on it.  The matrices go through the
    tree in groups of similar width and memory-bounded batches.
    """
    nb = sl.shape[0]
    sz = valid.sum(axis=1)
    nparts = S.shape[0]
    first = np.searchsorted(bp, np.arange(nparts + 1))  # blocks of matrix p: first[p]:first[p+1]
    tot = np.bincount(bp, weights=sz, minlength=nparts).astype(np.int64)
    # block positions in a global order (the matrices one after the other, blocks in order)
    gend = np.cumsum(sz)
    gstart = gend - sz
    pstart = gstart[np.minimum(first[:-1], nb - 1)]
    # the slot of every position of a matrix: its blocks' slots one after the other
    bi, ri = np.nonzero(valid)
    pos_of = np.zeros(int(gend[-1]), dtype=np.int64)
    pos_of[gstart[bi] + ri] = sl[bi, ri]
    # block b's k x k matrix (k = sz[b]) at values[off[b]:off[b + 1]], row by row: no
    # padding to the widest block (3D elasticity: 1 GB of padded faces, 0.3 s to write)
    off = np.concatenate([[0], np.cumsum(sz * sz)])
    values = np.empty(int(off[-1]))
    padded, ladder = size_groups(np.maximum(tot, 1))
    for width in ladder:  # a loop over a few size groups of matrices
        group = np.flatnonzero((padded == width) & (tot > 0))
        if not group.size:  # only parts without interface (a part A couples to no other)
            continue
        width = int(width)
        per_matrix = 8 * 4 * width * width  # its copy and the first level's blocks
        batch = max(1, int(chunk_bytes) // per_matrix)
        check_memory(f"the AGDSW Schur complements of {int(np.diff(first)[group[:batch]].sum())} "
                     f"(part, component) blocks of up to {int(tot[group].max())} interface "
                     "unknowns",
                     min(batch, group.size) * per_matrix,
                     "more, smaller parts have smaller interfaces")
        for q0 in range(0, group.size, batch):  # a loop over memory-bounded batches
            parts = group[q0:q0 + batch]
            pos = np.arange(width)[None, :]
            inside = pos < tot[parts, None]
            slot = pos_of[np.where(inside, pstart[parts, None] + pos, 0)]
            M = _stacked_gather(S, parts, slot, slot)
            M = np.where(inside[:, :, None] & inside[:, None, :], M, np.eye(width)[None])
            _schur_tree(M, first[parts], first[parts + 1], scale[parts], gstart, gend, sz,
                        off, values)
    return values, off


def _schur_tree(M: np.ndarray, fb: np.ndarray, lb: np.ndarray, scale: np.ndarray,
                gstart: np.ndarray, gend: np.ndarray, sz: np.ndarray, off: np.ndarray,
                values: np.ndarray) -> None:
    """Split the stacked nodes ``M`` (blocks ``fb:lb`` each, positions in block order,
    identity padding) down to single blocks, whose ``sz[b] x sz[b]`` matrices go to
    ``values[off[b]:off[b + 1]]`` (row by row)."""
    while M.shape[0]:  # a loop over the levels of the tree (log2 of the blocks per part)
        leaf = lb - fb == 1
        if leaf.any():
            b = fb[leaf]
            k = sz[b]
            rep = np.repeat(np.arange(b.size), k * k)
            within = np.arange(rep.size) - np.repeat(np.cumsum(k * k) - k * k, k * k)
            values[off[b][rep] + within] = M[np.flatnonzero(leaf)[rep], within // k[rep],
                                             within % k[rep]]
            M, fb, lb, scale = M[~leaf], fb[~leaf], lb[~leaf], scale[~leaf]
            if not M.shape[0]:
                break
        t = gend[lb - 1] - gstart[fb]
        j = _split(fb, lb, gstart, gend)
        a = gend[j] - gstart[fb]  # the size of L
        nl, nr = int(a.max()), int((t - a).max())
        vl = np.arange(nl)[None, :] < a[:, None]
        vr = np.arange(nr)[None, :] < (t - a)[:, None]
        # L is a prefix of every node (a slice); R starts at a, which varies by node
        ir = np.where(vr, a[:, None] + np.arange(nr)[None, :], 0)
        node = np.arange(M.shape[0])
        LL = np.where(vl[:, :, None] & vl[:, None, :], M[:, :nl, :nl], np.eye(nl)[None])
        RR = np.where(vr[:, :, None] & vr[:, None, :], _stacked_gather(M, node, ir, ir),
                      np.eye(nr)[None])
        LR = np.where(vl[:, :, None] & vr[:, None, :],
                      _stacked_gather(M, node, np.broadcast_to(np.arange(nl), (node.size, nl)),
                                      ir), 0.0)
        RL = np.swapaxes(LR, 1, 2)
        del M
        CL = LL - LR @ _solve_shifted(RR, RL, vr, scale)
        CR = RR - RL @ _solve_shifted(LL, LR, vl, scale)
        del LL, RR, LR, RL
        m = max(nl, nr)
        M = np.concatenate([_identity_padded(CL, m), _identity_padded(CR, m)])
        M = 0.5 * (M + np.swapaxes(M, 1, 2))
        fb, lb = np.concatenate([fb, j + 1]), np.concatenate([j + 1, lb])
        scale = np.concatenate([scale, scale])


def _stacked_gather(M: np.ndarray, which: np.ndarray, rows: np.ndarray,
                    cols: np.ndarray) -> np.ndarray:
    """``M[which[k], rows[k, i], cols[k, j]]`` for the stack ``M`` (``(s, p, q)``): one
    ``take`` of flat positions where ``M`` is contiguous, which is 1.6x numpy's gather by
    three broadcast index arrays (measured on the stacks of AGDSW's Schur tree, 60 to 300
    rows), with the same entries."""
    if not M.flags.c_contiguous:  # (a flat view would copy all of M)
        return M[which[:, None, None], rows[:, :, None], cols[:, None, :]]
    _, p, q = M.shape
    flat = ((which.astype(np.int64) * (p * q))[:, None, None]
            + rows.astype(np.int64)[:, :, None] * q + cols[:, None, :])
    return M.reshape(-1).take(flat)


def _split(fb: np.ndarray, lb: np.ndarray, gstart: np.ndarray, gend: np.ndarray) -> np.ndarray:
    """The last block of the left half of every node (blocks ``fb:lb``, at least two): the
    block boundary nearest the middle of the node, a block on each side."""
    middle = gstart[fb] + 0.5 * (gend[lb - 1] - gstart[fb])
    j = np.searchsorted(gend, middle)
    below, above = np.clip(j - 1, fb, lb - 2), np.clip(j, fb, lb - 2)
    return np.where(np.abs(gend[below] - middle) <= np.abs(gend[above] - middle), below, above)


def _solve_shifted(M: np.ndarray, R: np.ndarray, real: np.ndarray,
                   scale: np.ndarray) -> np.ndarray:
    """``M^{-1} R`` for stacks; an exactly singular batch with the rounding-size relative
    shift :data:`NEUMANN_SHIFT` on the real diagonal entries (``real``)."""
    try:
        return np.linalg.solve(M, R)
    except np.linalg.LinAlgError:  # an exactly singular block: the rounding-size shift
        M = M.copy()
        i = np.arange(M.shape[1])
        M[:, i, i] += np.where(real, NEUMANN_SHIFT * scale[:, None], 0.0)
        return np.linalg.solve(M, R)


def _identity_padded(M: np.ndarray, n: int) -> np.ndarray:
    """The stack ``M`` (``k x k`` matrices) inside ``n x n`` identities."""
    k = M.shape[1]
    if k == n:
        return M
    out = np.zeros((M.shape[0], n, n))
    out[:, :k, :k] = M
    i = np.arange(k, n)
    out[:, i, i] = 1.0
    return out


def _interior_schur(A_II, A_IG, g_slot, entry_part, part, part_off, p0, p1, width, solver,
                    chunk_bytes):
    """``W_p = A_{Gamma_p I_p} A_{I_p}^{-1} A_{I_p Gamma_p}`` of the parts ``p0:p1``, padded
    ``(parts, width, width)``: one factorisation of their interiors and multi-column partial
    solves (the reference path, any exact solver)."""
    nparts = p1 - p0
    r0, r1 = int(part_off[p0]), int(part_off[p1])
    Wp = np.zeros((nparts, width, width))
    if r1 == r0:
        return Wp
    # the entries are sorted by part (rows of A_I in part order)
    sel = slice(*np.searchsorted(entry_part, [p0, p1]))
    e_row = A_IG.row[sel] - r0
    e_slot = g_slot[sel]
    e_val = A_IG.data[sel]
    # W_p = B^T A_II^{-1} B with B = A_{I Gamma_p}: the right-hand sides and the rows of the
    # solution that count are the interior rows next to the interface, so PARDISO's partial
    # solves skip the rest of the triangular solves
    near = np.unique(e_row)
    e_near = np.searchsorted(near, e_row)
    try:
        lu = factorize_blocks(A_II[r0:r1, r0:r1], part_off[p0:p1 + 1] - r0, solver,
                              sparse_rows=near)
    except SingularBlockError as exc:
        raise ValueError(_INTERIOR_NOT_SPD.format(part=f"part {p0 + exc.block}")) from None
    # the full-height right-hand sides and PARDISO's solution together within chunk_bytes
    step = max(1, int(chunk_bytes) // (16 * (r1 - r0)))
    # rows (p, slot) of the expanded A_{Gamma I}: one per coupling entry
    exp_row = (part[A_IG.row[sel]] - p0) * width + e_slot
    Aexp = sp.csr_matrix((e_val, (exp_row, e_near)), shape=(nparts * width, near.size))
    for s0 in range(0, width, step):  # column blocks of the slots
        s1 = min(s0 + step, width)
        cs = (e_slot >= s0) & (e_slot < s1)
        rhs = np.zeros((near.size, s1 - s0))
        rhs[e_near[cs], e_slot[cs] - s0] = e_val[cs]
        X = lu.solve_sparse(rhs, rows_only=True)
        del rhs
        if s1 - s0 == width:  # one block: the product is W_p, no copy into a zeroed stack
            return (Aexp @ X).reshape(nparts, width, width)
        Wp[:, :, s0:s1] = (Aexp @ X).reshape(nparts, width, s1 - s0)
    return Wp


def _ragged(starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``concatenate([arange(a, a + k) for a, k in zip(starts, lengths)])`` and the index of
    the range of every element."""
    lengths = np.asarray(lengths, dtype=np.int64)
    owner = np.repeat(np.arange(lengths.size), lengths)
    first = np.cumsum(lengths) - lengths
    return np.asarray(starts, dtype=np.int64)[owner] + np.arange(owner.size) - first[owner], owner


def _schur_blocks_pardiso(A_II, A_IG, g_slot, entry_part, part_off, gg, cut, gsize, p0,
                          bp, sl, valid):
    """The Neumann Schur complements onto the blocks and the blocks of ``W_p`` of the parts
    ``p0:p0 + len(gsize)``, by PARDISO's partial factorisation of their sparse matrices.

    ``gg = (part, row slot, column slot, value)`` are the entries of the closed parts'
    Neumann matrices on ``Gamma_p`` (sorted by part), ``cut = (part, slot, value)`` the
    Neumann cut taken off their diagonal (sorted by part); ``bp``, ``sl``, ``valid`` the
    blocks as for :func:`_schur_onto_blocks` (``bp`` relative to ``p0``).  The sparse matrix
    of every closed part goes to
    :func:`~ddops.linalg.local_solvers.pardiso_schur_complement` two or three times
    ("tasks", block-diagonal with other tasks up to :data:`SCHUR_ROWS` Schur rows per call):
    with a zero block on ``Gamma_p`` onto ``Gamma_p`` (``-W_p``), and with the Neumann block
    onto each half of the part's blocks (the first level of :func:`_schur_tree`, which goes
    on from the halves) or, for a part of one block, onto ``Gamma_p`` (the block itself).
    The first level of the dense tree, about three quarters of its flops, and the
    ``|Gamma_p|`` interior solves of ``W_p`` become sparse partial factorisations: on 3D
    Poisson (62 parts of about 1,400 interior and 1,400 interface unknowns) AGDSW's
    eigenproblems took 8.3 s instead of 17.8 s.

    Returns ``(SB, WB)``: the values of :func:`_schur_onto_blocks`, and ``W_p`` on the
    blocks in the same order.  Raises ``SingularBlockError`` when an eliminated block is not
    positive definite (the caller then takes the dense path).
    """
    nparts = gsize.size
    sz = valid.sum(axis=1)
    gend = np.cumsum(sz)
    gstart = gend - sz
    off = np.concatenate([[0], np.cumsum(sz * sz)])
    SB, WB = np.empty(int(off[-1])), np.empty(int(off[-1]))
    first = np.searchsorted(bp, np.arange(nparts + 1))
    multi = np.diff(first) > 1
    j = np.full(nparts, -1, dtype=np.int64)
    if multi.any():
        j[multi] = _split(first[:-1][multi], first[1:][multi], gstart, gend)
    # the slot of every position in block order (the positions of the tree's nodes)
    bi, ri = np.nonzero(valid)
    order_slot = sl[bi, ri]
    # the tasks, per part: -W_p (kind 0), then the halves (1) or the whole part (2); each
    # is a range [t_a, t_b) of positions in block order
    # (a part without blocks, no interface, has no task)
    has = np.flatnonzero(np.diff(first) > 0)
    nb = max(sl.shape[0], 1)
    pa = gstart[np.minimum(first[:-1], nb - 1)]
    pb = gend[np.maximum(first[1:] - 1, 0)]
    half = np.where(multi, gend[np.maximum(j, 0)], pb)
    t_part = np.concatenate([has, has, np.flatnonzero(multi)])
    t_kind = np.concatenate([np.zeros(has.size, np.int64), np.where(multi[has], 1, 2),
                             np.ones(int(multi.sum()), np.int64)])
    t_a = np.concatenate([pa[has], pa[has], half[multi]])
    t_b = np.concatenate([pb[has], half[has], pb[multi]])
    t_fb = np.concatenate([np.zeros(has.size, np.int64), first[:-1][has], j[multi] + 1])
    t_lb = np.concatenate([np.zeros(has.size, np.int64),
                           np.where(multi, j + 1, first[1:])[has], first[1:][multi]])
    o = np.lexsort((t_kind, t_part))  # a part's tasks together
    t_part, t_kind, t_a, t_b, t_fb, t_lb = (t_part[o], t_kind[o], t_a[o], t_b[o], t_fb[o],
                                            t_lb[o])
    t_k = t_b - t_a
    # the entries of each part, as ranges of the sorted lists
    parts = np.arange(p0, p0 + nparts + 1)
    g_part, g_r, g_c, g_v = gg
    c_part, c_slot, c_v = cut
    g_off, c_off = np.searchsorted(g_part, parts), np.searchsorted(c_part, parts)
    e_off = np.searchsorted(entry_part, parts)
    r_lo = part_off[p0:p0 + nparts].astype(np.int64)
    ni = part_off[p0 + 1:p0 + nparts + 1] - r_lo
    R0 = int(part_off[p0])
    inner = A_II[R0:int(part_off[p0 + nparts]), R0:int(part_off[p0 + nparts])].tocoo()
    i_off = np.searchsorted(inner.row, r_lo - R0)
    i_off = np.append(i_off, inner.nnz)
    ends = np.cumsum(t_k)
    t0 = 0
    while t0 < t_part.size:  # a loop over calls of a few tasks each (SCHUR_ROWS Schur rows)
        done = ends[t0 - 1] if t0 else 0
        t1 = max(t0 + 1, int(np.searchsorted(ends, done + SCHUR_ROWS, side="right")))
        tp, tk, neumann = t_part[t0:t1], t_kind[t0:t1], t_kind[t0:t1] > 0
        size = ni[tp] + gsize[tp]  # each task's matrix: its interior, then its slots
        base = np.cumsum(size) - size
        # interior entries, couplings to the slots, the slots' diagonal, the Neumann block
        e, et = _ragged(i_off[tp], i_off[tp + 1] - i_off[tp])
        rows = [base[et] + inner.row[e] - (r_lo[tp] - R0)[et]]
        cols = [base[et] + inner.col[e] - (r_lo[tp] - R0)[et]]
        vals = [inner.data[e]]
        e, et = _ragged(e_off[tp], e_off[tp + 1] - e_off[tp])
        rows.append(base[et] + A_IG.row[e] - r_lo[tp][et])
        cols.append(base[et] + ni[tp][et] + g_slot[e])
        vals.append(A_IG.data[e])
        e, et = _ragged(np.zeros(tp.size, np.int64), gsize[tp])
        rows.append(base[et] + ni[tp][et] + e)
        cols.append(base[et] + ni[tp][et] + e)
        vals.append(np.zeros(e.size))  # stored diagonal (the zero block of -W_p)
        e, et = _ragged(c_off[tp], (c_off[tp + 1] - c_off[tp]) * neumann)
        rows.append(base[et] + ni[tp][et] + c_slot[e])
        cols.append(base[et] + ni[tp][et] + c_slot[e])
        vals.append(-c_v[e])
        e, et = _ragged(g_off[tp], (g_off[tp + 1] - g_off[tp]) * neumann)
        rows.append(base[et] + ni[tp][et] + g_r[e])
        cols.append(base[et] + ni[tp][et] + g_c[e])
        vals.append(g_v[e])
        K = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                          shape=(int(size.sum()),) * 2)
        # the Schur rows: each task's slots, sorted; where each position lands in S
        pos, pt = _ragged(t_a[t0:t1], t_k[t0:t1])
        slot = order_slot[pos]
        key = (base[pt] + ni[tp][pt] + slot)
        rank = np.empty(key.size, dtype=np.int64)
        rank[np.argsort(key, kind="stable")] = np.arange(key.size)
        S = pardiso_schur_complement(K, np.sort(key))
        del K
        # every task's node matrix in block order, padded with the identity
        m = int(t_k[t0:t1].max())
        at = np.zeros((tp.size, m), dtype=np.int64)
        inside = np.arange(m)[None, :] < t_k[t0:t1, None]
        at[inside] = rank
        N = np.where(inside[:, :, None] & inside[:, None, :],
                     S[at[:, :, None], at[:, None, :]], np.eye(m)[None])
        del S
        # -W_p and the single-block leaves: their blocks' entries, in the order of values
        for kind, out, sign in ((0, WB, -1.0), (2, SB, 1.0)):
            pick = np.flatnonzero(tk == kind)
            if not pick.size:
                continue
            b, bt = _ragged(first[tp[pick]], first[tp[pick] + 1] - first[tp[pick]])
            k = sz[b]
            e, eb = _ragged(off[b], k * k)
            within = e - off[b][eb]
            r = gstart[b][eb] - t_a[t0:t1][pick][bt][eb] + within // k[eb]
            c = gstart[b][eb] - t_a[t0:t1][pick][bt][eb] + within % k[eb]
            out[e] = sign * N[pick[bt][eb], r, c]
        pick = np.flatnonzero(tk == 1)
        if pick.size:  # the halves down the dense tree
            M = N[pick]
            M = 0.5 * (M + np.swapaxes(M, 1, 2))
            fb, lb = t_fb[t0:t1][pick], t_lb[t0:t1][pick]
            real = inside[pick]
            scale = np.where(real, np.abs(np.einsum("nii->ni", M)), 0.0).max(axis=1)
            _schur_tree(M, fb, lb, np.where(scale > 0, scale, 1.0), gstart, gend, sz, off, SB)
        t0 = t1
    return SB, WB


def _agdsw_eigenpairs(A, owner, comps, chunk_bytes, Zx, neumann=None, solver=None, need=None,
                      keep=None):
    """Eigenpairs of ``S_e^N tau = lambda S_e^D tau`` for every component, batched by size.

    Returns ``({batch: (components, eigenvalues)}, {batch: eigenvectors}, sizes)``, one
    batch per ``(width, first member)`` of a size group (at most ``chunk_bytes`` of stacks
    at once), with the eigenvectors padded to ``width`` rows (zero on padding rows).
    ``keep`` (``(threshold, cap)``) keeps only the leading eigenvectors that
    :func:`select_eigenpairs` can select in each batch (all of them by default).
    ``solver`` (an exact one; default :func:`default_exact_solver`) computes the Schur
    complements: SuperLU factorises the interiors and solves; PARDISO does so on narrow
    interfaces and takes the partial factorisations of :func:`_schur_blocks_pardiso` on
    wide ones.  ``need`` (a Boolean per component, default all) limits the eigenproblems to
    those components, and the Schur complements to the parts around them.
    """
    solver = default_exact_solver() if solver is None else solver
    n = A.shape[0]
    x, comp = comps.interface, comps.component
    C, N = comps.num_components, comps.num_parts
    nx = x.size
    sizes = np.bincount(comp, minlength=C)
    P = comps.parts.tocsr()
    # the parts around the needed components first (the chunks run over them only), each
    # group by the width of its interface |Gamma_p|: a chunk's interior solves take its
    # widest part's columns for every part, and its dense stacks that width (3D
    # inclusions, boxes of 1 to 6 neighbours: 6 % of AGDSW's set-up)
    if need is not None and not need.any():
        return {}, {}, sizes
    around = (np.ones(N, dtype=bool) if need is None or need.all()
              else comps.parts_around(need))
    width_of = np.bincount(P.indices, weights=np.repeat(sizes, np.diff(P.indptr)),
                           minlength=N)
    order = np.lexsort((width_of, ~around))
    relabel = np.empty(N, dtype=np.int64)
    relabel[order] = np.arange(N)
    owner = relabel[owner]
    P = P[:, order].tocsr()
    used = int(around.sum())
    # (interface unknown, part) pairs: Gamma_p, sorted by part then unknown
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
    # its entries within a component with an eigenproblem: A_ee of S^D_e = A_ee - W_e
    same = comp[A_GG.row] == comp[A_GG.col]
    if need is not None:
        same &= need[comp[A_GG.row]]
    ee_r, ee_c, ee_v = A_GG.row[same], A_GG.col[same], A_GG.data[same]
    if neumann is None:
        # Neumann cut of the closed parts: sum_{l not in closure p} |a_gl| for g in Gamma_p
        closure_rows = np.concatenate([interior, x[pair_x]])
        closure_sets = np.concatenate([part, pair_p])
        pair_cut = outside_coupling(A, closure_rows, closure_sets, N)[interior.size:]
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
        del cg, e_idx, e_part, sg, sh, ok  # (the set-up's peak comes later)
    else:
        # the user's Neumann matrix of subdomain p (which holds the closure of part p) on
        # Gamma_p; its rows on the interior of p are those of A
        (n_sub, n_r, n_c, n_v), indices, offsets = neumann[:3]
        labels = relabel
        member = sp.csr_matrix((np.ones(indices.size), (indices, np.repeat(
            labels, np.diff(offsets)))), shape=(n, N))
        # (the parts around no needed component, beyond `used`, need no Neumann matrix)
        missing = (np.asarray(member[x[pair_x], pair_p]).ravel() == 0) & (pair_p < used)
        if missing.any():
            p = int(np.argsort(labels)[pair_p[np.flatnonzero(missing)[0]]])
            raise ValueError(f"neumann: subdomain {p} does not contain every interface unknown "
                             f"around part {p} (its closure); build the decomposition with "
                             "overlap >= 1")
        g_r, g_c = indices[offsets[n_sub] + n_r], indices[offsets[n_sub] + n_c]
        n_sub = labels[n_sub]
        sg = np.asarray(slot_of[g_r, n_sub]).ravel()
        sh = np.asarray(slot_of[g_c, n_sub]).ravel()
        ok = (sg > 0) & (sh > 0)
        gg_part, gg_r, gg_c, gg_v = n_sub[ok], sg[ok] - 1, sh[ok] - 1, n_v[ok]
        pair_cut = np.zeros(pair_x.size)
        del member, g_r, g_c, sg, sh, ok
    del A_GG, slot_of
    gg_order = np.argsort(gg_part, kind="stable")
    gg_part, gg_r, gg_c, gg_v = gg_part[gg_order], gg_r[gg_order], gg_c[gg_order], gg_v[gg_order]
    del gg_order
    gg_off = np.searchsorted(gg_part, np.arange(N + 1))
    # (part, component) pairs: the components inside Gamma_p, with the slots of their unknowns
    pc_key = np.unique(pair_p * np.int64(C) + comp[pair_x])
    pc_part, pc_comp = pc_key // C, pc_key % C
    pc_off = np.searchsorted(pc_part, np.arange(N + 1))
    # accumulators on the components: dense |e| x |e| blocks, flattened; none for the
    # components without an eigenproblem (the skipped ones, other processes' ones)
    sq = sizes * sizes if need is None else np.where(need, sizes * sizes, 0)
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

    gg = (gg_part, gg_r, gg_c, gg_v)
    cut = (pair_p, pair_slot, pair_cut)
    bounds = chunk_bounds(part_off[:used + 1], rows_per_chunk(part_off[used], FACTOR_CHUNK_ROWS))
    # parts with an empty interior still have an interface: give them their own handling by
    # treating part ranges, not interior rows
    part_bounds = np.searchsorted(part_off[:used + 1], bounds, side="left")
    part_bounds[-1] = used
    part_bounds = np.unique(np.concatenate([[0], part_bounds, [used]]))
    entry_part = part[A_IG.row]

    def part_chunk(p0: int, p1: int):
        """The Schur blocks of the parts ``p0:p1``: their places in the
        accumulators and the values of ``S^N_p`` and ``W_p`` on each (part, component)
        block; None when the parts have no interface."""
        width = int(gsize[p0:p1].max()) if p1 > p0 else 0
        if width == 0:
            return None
        nparts = p1 - p0
        # W_p and the Neumann Schur complement, dense, and a temporary of their size
        check_memory(f"the AGDSW Schur complements of {nparts} parts of up to {width} "
                     "interface unknowns", 3 * nparts * width * width * 8,
                     "more, smaller parts have smaller interfaces")
        # (part, component) blocks: W_p[e, e] and the Schur complement of S_p onto e
        b0, b1 = int(pc_off[p0]), int(pc_off[p1])
        if b1 == b0:
            return None
        ps = slice(int(goff[p0]), int(goff[p1]))
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
        # the real entries of every block, block by block and row by row (the order of
        # _schur_onto_blocks' values), without a cube padded to the widest block
        kb = valid.sum(axis=1)
        bi = np.repeat(np.arange(kb.size), kb * kb)
        within = np.arange(bi.size) - np.repeat(np.cumsum(kb * kb) - kb * kb, kb * kb)
        ri, ci = within // kb[bi], within % kb[bi]
        del within
        SB = None
        if solver == "pardiso" and width >= SCHUR_PARDISO_MIN_WIDTH:
            # the closed parts' sparse matrices through PARDISO's partial factorisation
            try:
                SB, WB = _schur_blocks_pardiso(
                    A_II, A_IG, g_slot, entry_part, part_off, gg, cut, gsize[p0:p1], p0, bp, sl,
                    valid)
            except SingularBlockError:  # an eliminated block not positive definite: dense
                SB = None
        if SB is None:
            # the reference path: W_p by interior solves, SN_p = G_p - W_p dense, the tree
            Wp = _interior_schur(A_II, A_IG, g_slot, entry_part, part, part_off, p0, p1,
                                 width, solver, chunk_bytes)
            WB = Wp[bp[bi], sl[bi, ri], sl[bi, ci]]
            # SN = G_p - W_p in the place of W_p, with G_p the closed part's Neumann matrix on
            # Gamma_p (each pass over these stacks costs about as much as a level of the
            # tree below; it symmetrises the matrices it forms, so SN is not symmetrised here)
            SN = np.negative(Wp, out=Wp)
            del Wp
            q0, q1 = int(gg_off[p0]), int(gg_off[p1])
            np.add.at(SN, (gg_part[q0:q1] - p0, gg_r[q0:q1], gg_c[q0:q1]), gg_v[q0:q1])
            SN[pair_p[ps] - p0, pair_slot[ps], pair_slot[ps]] -= pair_cut[ps]
            # pad to identity; the shift of an exactly singular block goes on its real entries
            real = np.arange(width)[None, :] < gsize[p0:p1, None]
            diag = np.einsum("pii->pi", SN)
            scale = np.where(real, np.abs(diag), 0.0).max(axis=1)
            scale = np.where(scale > 0, scale, 1.0)
            idx = np.arange(width)
            SN[:, idx, idx] = np.where(real, diag, 1.0)
            SB, _ = _schur_onto_blocks(SN, real, scale, bp, sl, valid, chunk_bytes)
            del SN
        comp_b = pc_comp[b0:b1][bi]
        if need is not None:  # the blocks of the other components only eliminate
            wanted = need[comp_b]
            comp_b, ri, ci, SB, WB = (comp_b[wanted], ri[wanted], ci[wanted], SB[wanted],
                                      WB[wanted])
        return sq_off[comp_b] + ri * sizes[comp_b] + ci, SB, WB

    # the chunks of parts are independent (threads, ddops.linalg.parallel); their blocks
    # accumulate on the components in chunk order
    spans = [(int(part_bounds[c]), int(part_bounds[c + 1]))
             for c in range(part_bounds.size - 1)]
    for out in map_chunks(part_chunk, spans):
        if out is None:
            continue
        flat, SB, WB = out
        SN_acc += np.bincount(flat, weights=SB, minlength=SN_acc.size)
        W_acc += np.bincount(flat, weights=WB, minlength=W_acc.size)
    # S^D_e = A_ee - W_e; eigenproblems by size group
    A_ee_flat = np.zeros(int(sq_off[-1]))
    ce = comp[ee_r]
    np.add.at(A_ee_flat, sq_off[ce] + in_comp[ee_r] * sizes[ce] + in_comp[ee_c], ee_v)
    SD_flat = np.subtract(A_ee_flat, W_acc, out=A_ee_flat)
    del W_acc
    padded, ladder = size_groups(sizes)
    if need is not None:
        padded = np.where(need, padded, 0)  # no eigenproblem (and no group) where not needed
        ladder = ladder[np.isin(ladder, padded)]

    def group_eigenpairs(w: int, i0: int, i1: int):
        """The eigenpairs of the components ``i0:i1`` of those padded to ``w`` unknowns."""
        members = group_members[w][i0:i1]
        check_memory(f"the AGDSW eigenproblems of {members.size} components of up to {w} "
                     "unknowns", EIGEN_STACKS * members.size * w * w * 8)
        sz = sizes[members]
        rep = np.repeat(np.arange(members.size), sz * sz)
        within = np.arange(rep.size) - np.repeat(np.cumsum(sz * sz) - sz * sz, sz * sz)
        src = sq_off[members][rep] + within
        # the flat positions in the padded stacks; these index arrays are as large as the
        # stacks, so they go before the eigensolve (the set-up's peak on the channels)
        within = rep * (w * w) + (within // sz[rep]) * w + within % sz[rep]
        del rep
        SD = np.zeros((members.size, w, w))
        SNm = np.zeros((members.size, w, w))
        SD.reshape(-1)[within] = SD_flat[src]
        SNm.reshape(-1)[within] = SN_acc[src]
        del within, src
        pad = np.arange(w)[None, :] >= sz[:, None]
        gi, gj = np.nonzero(pad)
        SD[gi, gj, gj] = 1.0
        SNm[gi, gj, gj] = 10.0  # lambda = 10 on padding: never selected
        SD = 0.5 * (SD + np.swapaxes(SD, 1, 2))
        SNm = 0.5 * (SNm + np.swapaxes(SNm, 1, 2))
        try:
            lam, V = generalized_eigh(SNm, SD)
        except np.linalg.LinAlgError:
            raise ValueError("agdsw: a Dirichlet Schur complement on an interface component is "
                             "not positive definite; A must be symmetric positive "
                             "definite") from None
        V[pad] = 0.0
        if Zx.shape[1] == 0:
            return members, lam, leading(lam, V)
        # the same span with the eigenvectors S^D-orthogonal to the null space on the
        # component; those (numerically) inside it get lambda = inf (never selected)
        Zg = np.zeros((members.size, w, Zx.shape[1]))
        rep1 = np.repeat(np.arange(members.size), sz)
        row1 = np.arange(rep1.size) - np.repeat(np.cumsum(sz) - sz, sz)
        Zg[rep1, row1] = Zx[corder[coff[members][rep1] + row1]]
        V, lam = project_out(V, lam, SD @ V, Zg, SD @ Zg)
        return members, lam, leading(lam, V)

    def leading(lam: np.ndarray, V: np.ndarray) -> np.ndarray:
        """The eigenvectors up to the last one that the selection can keep: a few of ``w``
        where the threshold is small, so the batches' vectors are not all held at once."""
        if keep is None:
            return V
        cols = np.flatnonzero(select_eigenpairs(lam, *keep)[0].any(axis=0))
        return V[:, :, :cols[-1] + 1 if cols.size else 0].copy()

    # the batches of the size groups are independent (threads, ddops.linalg.parallel); a
    # batch's stacks (about EIGEN_STACKS of them alive at once) fit in chunk_bytes
    group_members = {int(w): np.flatnonzero(padded == w) for w in ladder}
    tasks = []
    for w, members in group_members.items():
        per = max(1, int(chunk_bytes) // (EIGEN_STACKS * 8 * w * w))
        tasks += [(w, i0, min(i0 + per, members.size)) for i0 in range(0, members.size, per)]
    lam_out, vec_out = {}, {}
    for (w, i0, _), (members, lam, V) in zip(tasks, map_chunks(group_eigenpairs, tasks),
                                             strict=True):
        lam_out[w, i0] = (members, lam)
        vec_out[w, i0] = V
    return lam_out, vec_out, sizes
