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
and one batched ``eigh`` per size group of components.

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
)
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
from .validation import check_matrix, check_null_space, check_owner

__all__ = [
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

#: Default cap on the eigenvectors added per interface component (AGDSW).
MAX_PER_COMPONENT = 32

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
        Keeps the interface components and the final extension's PARDISO analyses for a
        later call on a matrix with the same pattern (see
        :class:`~ddops.dd.analysis.GDSWAnalysis`).

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
        user = (check_neumann(neumann, sizes_n), np.concatenate(idx),
                np.concatenate([[0], np.cumsum(sizes_n)]))
    elif not_dominant_rows(A).size:
        warn("agdsw: A is not diagonally dominant, so the algebraic local Neumann "
                      "matrices are not positive semidefinite and more functions than needed "
                      "may be selected (GenEO with finite-element Neumann matrices is the "
                      "rigorous alternative)", RuntimeWarning)
    # the Schur complements' interior solves: the extension's exact solver (its inexact
    # one, "amg", would perturb the eigenproblems: those keep the exact default)
    schur_solver = (extension_solver if extension_solver in EXACT_SOLVERS
                    else default_exact_solver())
    eig_start = time.perf_counter()
    lam_all, vecs, sizes = _agdsw_eigenpairs(A, owner, comps, chunk_bytes, Z[comps.interface],
                                             user, schur_solver)
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
    keep = independent_vectors(comp, values, C, rtol) & nonzero
    ext_start = time.perf_counter()
    PhiG, _ = columns_from_groups(x, comp, values, keep, n)
    Phi = harmonic_extension(A, owner, x, PhiG, chunk_bytes=chunk_bytes, solver=extension_solver,
                             null_space=Z, analysis=analysis)
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
            M = S[parts[:, None, None], slot[:, :, None], slot[:, None, :]]
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
        # the block boundary nearest the middle of every node, a block on each side
        t = gend[lb - 1] - gstart[fb]
        middle = gstart[fb] + 0.5 * t
        j = np.searchsorted(gend, middle)
        below, above = np.clip(j - 1, fb, lb - 2), np.clip(j, fb, lb - 2)
        j = np.where(np.abs(gend[below] - middle) <= np.abs(gend[above] - middle), below, above)
        a = gend[j] - gstart[fb]  # the size of L
        nl, nr = int(a.max()), int((t - a).max())
        vl = np.arange(nl)[None, :] < a[:, None]
        vr = np.arange(nr)[None, :] < (t - a)[:, None]
        il = np.where(vl, np.arange(nl)[None, :], 0)
        ir = np.where(vr, a[:, None] + np.arange(nr)[None, :], 0)
        node = np.arange(M.shape[0])[:, None, None]
        LL = np.where(vl[:, :, None] & vl[:, None, :], M[node, il[:, :, None], il[:, None, :]],
                      np.eye(nl)[None])
        RR = np.where(vr[:, :, None] & vr[:, None, :], M[node, ir[:, :, None], ir[:, None, :]],
                      np.eye(nr)[None])
        LR = np.where(vl[:, :, None] & vr[:, None, :], M[node, il[:, :, None], ir[:, None, :]],
                      0.0)
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


def _agdsw_eigenpairs(A, owner, comps, chunk_bytes, Zx, neumann=None, solver=None):
    """Eigenpairs of ``S_e^N tau = lambda S_e^D tau`` for every component, batched by size.

    Returns ``({width: (components, eigenvalues)}, {width: eigenvectors}, sizes)`` with
    the eigenvectors padded to ``width`` rows (zero on padding rows).  ``solver`` factorises
    the interiors (an exact one; default :func:`default_exact_solver`).
    """
    solver = default_exact_solver() if solver is None else solver
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
            # W_p = B^T A_II^{-1} B with B = A_{I Gamma_p}: the right-hand sides and the
            # rows of the solution that count are the interior rows next to the interface,
            # so PARDISO's partial solves skip the rest of the triangular solves
            near = np.unique(e_row)
            e_near = np.searchsorted(near, e_row)
            try:
                lu = factorize_blocks(A_II[r0:r1, r0:r1], part_off[p0:p1 + 1] - r0, solver,
                                      sparse_rows=near)
            except SingularBlockError as exc:
                raise ValueError("A is not positive definite: the interior matrix A_II of "
                                 f"part {p0 + exc.block} has a non-positive or vanishing "
                                 "pivot (it is indefinite or singular); A must be symmetric "
                                 "positive definite") from None
            step = max(1, int(chunk_bytes) // (8 * (r1 - r0)))
            # rows (p, slot) of the expanded A_{Gamma I}: one per coupling entry
            exp_row = (part[A_IG.row[sel]] - p0) * width + e_slot
            Aexp = sp.csr_matrix((e_val, (exp_row, e_near)), shape=(nparts * width, near.size))
            for s0 in range(0, width, step):  # column blocks of the slots
                s1 = min(s0 + step, width)
                cs = (e_slot >= s0) & (e_slot < s1)
                rhs = np.zeros((near.size, s1 - s0))
                rhs[e_near[cs], e_slot[cs] - s0] = e_val[cs]
                X = lu.solve_sparse(rhs, rows_only=True)
                Wp[:, :, s0:s1] = (Aexp @ X).reshape(nparts, width, s1 - s0)
            del lu
        # (part, component) blocks: W_p[e, e] and the Schur complement of S_p onto e
        b0, b1 = int(pc_off[p0]), int(pc_off[p1])
        if b1 == b0:
            continue
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
        WB = Wp[bp[bi], sl[bi, ri], sl[bi, ci]]
        # Neumann Schur complement of each part on Gamma_p, A_GG - cut - W_p, in the place of
        # W_p (each pass over these stacks costs about as much as a level of the tree below;
        # it symmetrises the matrices it forms, so SN is not symmetrised here)
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
        # accumulate on the components
        comp_b = pc_comp[b0:b1][bi]
        flat = sq_off[comp_b] + ri * sizes[comp_b] + ci
        SN_acc += np.bincount(flat, weights=SB, minlength=SN_acc.size)
        W_acc += np.bincount(flat, weights=WB, minlength=W_acc.size)
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
            lam, V = generalized_eigh(SNm, SD)
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
        V, lam = project_out(V, lam, SD @ V, Zg, SD @ Zg)
        lam_out[w] = (members, lam)
        vec_out[w] = V
    return lam_out, vec_out, sizes
