"""Distributed two-level Schwarz preconditioner on a :class:`~ddops.distributed.DistributedLayout`.

Each rank factorises the subdomain matrices ``A_i`` of its own subdomains by
running the serial one-level :class:`ddops.TwoLevelSchwarz` (``coarse=False``)
on its region (the union of its subdomains, see
:meth:`DistributedLayout.local_decomposition`, whose partition-of-unity
weights use the global multiplicity), so the batched local factorisation and
solve are exactly the serial ones.  One application of

.. math::

    M x = \\sum_i R_i^T W_i^{out} A_i^{-1} W_i^{in} R_i x + \\Phi A_0^{-1} \\Phi^T x

costs one forward halo exchange (the region values of ``x``), one reverse
exchange (the overlap parts of the local results go back to their owners and
are summed) and one ``Allreduce`` of ``n0`` values (``Phi^T x``), started
non-blocking before the local solves so that it overlaps them.  The
``"hybrid"`` variant adds two products with ``A`` (one halo exchange each) and
a second coarse reduction.

Set-up phases and update
------------------------
As the serial preconditioner, the set-up is a symbolic phase (the options, the
form and pattern of ``A``, the coarse construction and the solvers) and a
numeric phase (the ghost rows, the coarse basis, ``A_0`` and the local and
coarse factors).  :meth:`DistributedTwoLevelSchwarz.update` runs the numeric
phase again for a matrix with the same pattern on every rank (collectively
checked: a changed pattern on any rank raises on all of them), with
``reuse_coarse=True`` keeping Phi.  The options are those of
:class:`ddops.SchwarzOptions` (``options=`` or the keywords).

A singular ``A`` (``kernel=``)
------------------------------
As the serial preconditioner: the coarse space is grounded (one column of Phi
dropped per dimension of the coarse kernel) and the application is ``P M P``
with ``P = I - Q Q^T``.  The kernel is given as a global ``n x k`` array on
every rank, like ``null_space``; each rank keeps its owned rows of the
orthonormal ``Q``.  Checking it against the owned rows of ``A`` costs a
maximum of one value and a sum of ``k``; grounding a rank-local Phi runs the least-squares
fits of the kernel vectors in ``range(Phi)`` as a block LSQR over the ranks'
rows (:func:`ddops.dd.kernel.distributed_kernel_columns`), so no rank holds
all of Phi; a Phi built by the serial code is grounded by it.  Each
application adds two reductions of ``k + 1`` and ``k`` values (``Q^T x`` with
the residual norm that the inconsistent-right-hand-side warning compares it
with, and ``Q^T y``).

The coarse space
----------------
GDSW and RGDSW with the default (constant) null space are built rank-locally:
every rank classifies the interface components (the same global
classification as :func:`ddops.dd.gdsw.gdsw_basis`, repeated on every rank)
and runs the discrete harmonic extension into *its own parts only*, so the
expensive part of the basis set-up (factorising and solving the interiors) is
divided over the ranks.  Each rank then knows Phi on the interface and on its
interiors, which covers its owned rows and the columns of its rows of ``A``;
the only pairs it cannot form (an interface row owned here, coupled to an
interior unknown of another rank, under the shared-node rule) are added,
transposed, by the owner of that interior unknown.  Every other coarse basis
(a given null space, Nicolaides, a user Phi, ``local_basis=False``) is built
by the serial code from the global decomposition and matrix, identically on
every rank.

From the rank's own rows of A
-----------------------------
Given this rank's owned rows (``num_owned x n``, global columns) or
``A=None`` (the rows the layout was built with), no rank ever holds the
global matrix:

* the rows of the region's unknowns that the rank does not own come once, at
  set-up, from their owners through the halo plan
  (:meth:`DistributedLayout.ghost_rows`, counted in the ``setup_*`` keys of
  ``layout.stats``); the region block ``A[region][:, region]`` is cut from the
  owned and ghost rows and symmetrised as the serial code does;
* GDSW/RGDSW (the constants or a given null space, which is then a global
  ``n x k`` array on every rank): the interface is classified from the
  pattern of the *interface rows* only, gathered on every rank by one
  :meth:`DistributedLayout.allgather_rows` (the rows that may lie on the
  interface: a column in another part, or a shared node); the pieces of the
  null space on the components, the dependent-vector removal and the RGDSW
  weights are computed on the replicated interface as the serial code does;
  the harmonic extension and the coarse-matrix contribution use the owned
  rows;
* GenEO: each rank solves the eigenproblems of its own subdomains from the
  rows they read (:func:`rank_local_geneo`): the region's with the absolute
  couplings that leave it (the cut local matrices of a diagonally dominant
  ``A``, or the rank's own subdomains' matrices of ``neumann=``), and where
  oversampled sets leave the region the rows they reach, fetched from their
  owners; the entries of its columns
  go to the owners of their rows and the ghosts' rows come from there, so
  every rank holds Phi on its extended rows.  Dependent functions are dropped
  within each rank's columns.  The basis equals the serial one to the
  accuracy of the eigensolver (other chunks of subdomains);
* AGDSW: each rank computes the components whose first
  part is one of its own, on the block of the closed parts around them and
  two layers of rows beyond (so that their unknowns are classified as in the
  whole matrix), with the serial code, solving the eigenproblems of those
  components only (and the Schur complements of the parts around them), and
  keeps those components' functions (:func:`rank_local_agdsw`); with
  ``neumann=`` the matrices of the parts around them come from their ranks; the
  preconditioner is the serial one to rounding where the dependent functions dropped
  are the same (each rank drops them among its own columns: with many nearly
  dependent ones, AGDSW from ``A`` alone on large elasticity problems, the choice can
  differ, see the distributed guide);
* bases without the matrix (Nicolaides, partition of unity, hats, a user
  Phi) are built from the replicated decomposition as before;
* GDSW/RGDSW with ``local_basis=False`` or a decomposition without owner
  labels still need the serial basis code on the whole matrix: the owned
  rows of all ranks are gathered on every rank for that set-up step
  (``gathered_matrix`` is then True) and dropped after it.

A is then assumed symmetric: it is checked (and symmetrised) on the region
block the rank holds, and the owned rows enter the coarse matrix and the
``"hybrid"`` products as they are.

The coarse matrix is assembled the distributed way: every rank forms its
contribution ``Phi_owned^T (A_owned Phi_ext)``, one ``Allgatherv`` of the sparse
triplets sums them, and every rank factorises ``A_0`` redundantly (dense
Cholesky up to :data:`ddops.precond.corrections.COARSE_DENSE_MAX_PARDISO` with PARDISO,
:data:`ddops.precond.corrections.COARSE_DENSE_MAX` with SuperLU, else sparse).
Redundant factorisation instead of one rank plus a broadcast: the
``Allreduce`` of ``Phi^T x`` already leaves the coarse right-hand side on
every rank, so every rank solves and no second message (a broadcast of
``A_0^{-1} Phi^T x``) is needed per application; ``n0`` is small, so the
repeated solve is cheap.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import numpy as np
import scipy.sparse as sp
from threadpoolctl import ThreadpoolController

from .._validation import check_choice, check_finite, warn
from ..dd.coarse import MATRIX_COARSE_BASES, resolve_coarse_kind
from ..dd.coarse_matrix import transposed_product
from ..dd.eigen import not_dominant_rows
from ..dd.kernel import check_kernel, distributed_kernel_columns, inconsistent_residual
from ..linalg.local_solvers import check_threads, pardiso_available, thread_limit
from ..precond.corrections import CoarseCorrection
from ..precond.options import SchwarzOptions
from ..precond.schwarz import (
    TwoLevelSchwarz,
    check_matrix,
    resolve_options,
    symmetrised,
)
from .comm import mpi
from .layout import DistributedLayout
from .matrix import DistributedMatrix

#: The coarse bases built from each rank's own rows with the owner labels (GDSW, RGDSW); GenEO
#: (:func:`rank_local_geneo`) and AGDSW (:func:`rank_local_agdsw`) are too.
RANK_LOCAL_BASES = ("gdsw", "rgdsw")

__all__ = ["DISTRIBUTED_VARIANTS", "DistributedTwoLevelSchwarz",
           "allreduce_sparse", "rank_local_gdsw_rows", "rank_local_geneo", "region_block",
           "rows_diagonally_dominant"]

#: Variants of :class:`DistributedTwoLevelSchwarz`: all of the serial preconditioner's.
DISTRIBUTED_VARIANTS = ("additive", "restricted", "symmetric_restricted", "hybrid")


def allreduce_sparse(layout: DistributedLayout, C: sp.spmatrix) -> sp.csr_matrix:
    """Sum of one sparse matrix per rank, on every rank (``Allgatherv`` of the triplets).

    Counted as one reduction in ``layout.stats``.
    """
    C = sp.coo_matrix(C)
    comm = layout.comm
    counts = np.array(comm.allgather(int(C.nnz)), dtype=np.int64)
    displs = np.concatenate([[0], np.cumsum(counts)[:-1]])
    total = int(counts.sum())
    parts = []
    for local, dtype in ((C.row, np.int64), (C.col, np.int64), (C.data, np.float64)):
        out = np.empty(total, dtype=dtype)
        comm.Allgatherv(np.ascontiguousarray(local, dtype=dtype), [out, (counts, displs)])
        parts.append(out)
    layout.stats["reductions"] += 1
    layout.stats["reduction_bytes"] += 24 * int(C.nnz)
    S = sp.coo_matrix((parts[2], (parts[0], parts[1])), shape=C.shape).tocsr()
    S.sum_duplicates()
    return S


def _rank_local_gdsw(layout: DistributedLayout, A: sp.csr_matrix, kind: str,
                     extension_solver: str = "auto",
                     ) -> tuple[sp.csr_matrix, tuple[np.ndarray, np.ndarray]]:
    """GDSW/RGDSW (constant null space) rows of this rank: the extension into its parts only.

    The interface components are classified on every rank (the same global
    classification as :func:`ddops.dd.gdsw.gdsw_basis`); the discrete harmonic
    extension :func:`ddops.dd.gdsw.harmonic_extension` then runs with every
    unknown outside this rank's parts treated as (zero) interface, so it
    factorises and solves only this rank's interiors.  With the constants as
    null space no vector is ever dropped, so the columns are the components
    (GDSW) or the roots with their option-1 weights (RGDSW), in the serial
    order.  Returns Phi (correct on the interface and this rank's interiors,
    zero elsewhere) and the masks of those rows and of the interface.
    """
    from ..dd.extension import harmonic_extension
    from ..dd.interface import interface_components

    check_choice("kind", kind, RANK_LOCAL_BASES)
    d = layout.decomposition
    n = d.num_dofs
    comps = interface_components(A, d.owner, interface=d.shared_nodes,
                                 block_size=d.block_size)
    x = comps.interface
    if x.size == 0:
        raise ValueError("owner: the partition has a single part (or parts A does not couple), "
                         "so there is no interface and no GDSW coarse function")
    E = sp.csr_matrix((np.ones(x.size), (x, comps.component)),
                      shape=(n, comps.num_components))
    on_interface = np.zeros(n, dtype=bool)
    on_interface[x] = True
    mine = layout.dof_ranks == layout.rank
    known = mine | on_interface
    pieces = harmonic_extension(A, d.owner, np.flatnonzero(~mine | on_interface), E,
                                solver=extension_solver)
    Phi = pieces if kind == "gdsw" else pieces @ comps.root_weights().tocsr()
    Phi = sp.csr_matrix(Phi)
    Phi.eliminate_zeros()
    Phi.sort_indices()
    return Phi, (known, on_interface)


def _interface_rows(layout: DistributedLayout, rows: sp.csr_matrix) -> sp.csr_matrix:
    """The pattern of ``A`` on the interface rows, replicated: ``n x n``, symmetric, ones.

    Every rank contributes its owned rows that may lie on the interface (a
    column owned by another part, or a shared node), whole nodes at a time,
    through one :meth:`DistributedLayout.allgather_rows`; the pattern plus
    its transpose then gives :func:`ddops.dd.gdsw.interface_components` the
    same interface, part-sets and components as the global matrix (the rows
    left out couple only to their own part, so their part-set is their own
    part either way).
    """
    d = layout.decomposition
    n, b = d.num_dofs, d.block_size
    rows = rows.copy()
    rows.eliminate_zeros()  # as the serial classification (explicit zeros are no coupling)
    owner_own = d.owner[layout.owned]
    row_of = np.repeat(np.arange(layout.num_owned), np.diff(rows.indptr))
    cross = np.bincount(row_of[d.owner[rows.indices] != owner_own[row_of]],
                        minlength=layout.num_owned) > 0
    if d.shared_nodes is not None:
        shared = np.zeros(n, dtype=bool)
        shared[np.asarray(d.shared_nodes, dtype=np.int64)] = True
        cross |= shared[layout.owned]
    if b > 1:  # whole nodes (a node's unknowns share the owner, hence the rank)
        node = layout.owned // b
        cross = np.bincount(node[cross], minlength=n // b)[node] > 0
    S = layout.allgather_rows(rows, select=cross)
    S.data[:] = 1.0
    S = (S + S.T).tocsr()
    S.data[:] = 1.0
    return S


def rank_local_gdsw_rows(layout: DistributedLayout, rows: sp.csr_matrix, kind: str,
                         null_space: Any = None, rows_ext: sp.csr_matrix | None = None,
                         extension_solver: str = "auto"):
    """GDSW/RGDSW from this rank's owned rows of ``A`` only (any null space).

    Collective.  The interface components come from the replicated interface
    pattern (the owned rows that touch another part, gathered once); the
    pieces ``Z[:, a]`` on every component, the dependent-vector removal and
    the RGDSW weights are computed on the (replicated) interface exactly as
    :func:`ddops.dd.gdsw.gdsw_basis` does; only the harmonic extension is
    rank-local: it runs in the extended numbering on the owned rows, every
    ghost treated as (zero) interface.  :class:`DistributedTwoLevelSchwarz`
    and the native PETSc route (:func:`ddops.petsc.setup_native`) build their
    rows of Phi with it.

    Parameters
    ----------
    layout : DistributedLayout
        The layout, built with ``A=`` (its ghosts hold the rows' columns) and a
        decomposition with ``owner``.
    rows : scipy.sparse.csr_matrix
        This rank's owned rows of ``A`` (global columns).
    kind : {"gdsw", "rgdsw"}
        The coarse space.
    null_space : array, optional
        Global ``n x k`` null space (default: the constants per component).
    rows_ext : scipy.sparse.csr_matrix, optional
        ``layout.local_rows(rows)`` when the caller has it already.
    extension_solver : {"auto", "superlu", "pardiso", "amg"}
        Solver of the interior problems of the harmonic extension
        (:class:`ddops.GDSWOptions`).

    Returns
    -------
    Phi_ext : scipy.sparse.csr_matrix
        ``num_ext x n0``, correct on the owned rows and the interface ghosts.
    masks : tuple of numpy.ndarray
        ``(known_ext, on_interface_owned)``: the extended rows where ``Phi_ext``
        is correct, and the owned unknowns on the interface.
    """
    from ..dd.extension import harmonic_extension
    from ..dd.groups import DEPENDENCE_RTOL, columns_from_groups, independent_vectors
    from ..dd.interface import interface_components
    from ..dd.validation import check_null_space

    # an adaptive kind here would silently get the RGDSW-like construction below
    check_choice("kind", kind, RANK_LOCAL_BASES)
    d = layout.decomposition
    n = d.num_dofs
    Z = check_null_space(null_space, n)
    comps = interface_components(_interface_rows(layout, rows), d.owner,
                                 interface=d.shared_nodes, block_size=d.block_size)
    x = comps.interface
    if x.size == 0:
        raise ValueError("owner: the partition has a single part (or parts A does not couple), "
                         "so there is no interface and no GDSW coarse function")
    C, k = comps.num_components, Z.shape[1]
    values = Z[x]
    nonzero = np.zeros((C, k), dtype=bool)
    nz_row, nz_col = np.nonzero(values)
    nonzero[comps.component[nz_row], nz_col] = True
    # the interface pieces in interface numbering, then on this rank's extended rows
    pieces_G, piece_of = columns_from_groups(np.arange(x.size), comps.component, values,
                                              nonzero, x.size)
    ext, m = layout.ext_indices, layout.num_ext
    at = np.minimum(np.searchsorted(x, ext), x.size - 1)
    on_ext = x[at] == ext
    pick = sp.csr_matrix((np.ones(int(on_ext.sum())), (np.flatnonzero(on_ext), at[on_ext])),
                         shape=(m, x.size))
    mine = np.arange(m) < layout.num_owned
    if rows_ext is None:
        rows_ext = layout.local_rows(rows)
    A_ext = sp.vstack([rows_ext, sp.csr_matrix((layout.num_ghosts, m))], format="csr")
    A_ext.sort_indices()
    pieces = harmonic_extension(A_ext, d.owner[ext], np.flatnonzero(~mine | on_ext),
                                (pick @ pieces_G).tocsr(), solver=extension_solver)
    if kind == "gdsw":
        keep = independent_vectors(comps.component, values, C, DEPENDENCE_RTOL)
        Phi = pieces[:, piece_of[keep]]
    else:  # as gdsw_basis: piece (c, a) enters column (r, a) with weight W[c, r]
        W = comps.root_weights().tocoo()
        E = sp.csr_matrix((np.ones(x.size), (np.arange(x.size), comps.component)),
                          shape=(x.size, C))
        XW = (E @ W.tocsr()).tocoo()
        keep = independent_vectors(XW.col, XW.data[:, None] * Z[x[XW.row]],
                                    comps.roots().size, DEPENDENCE_RTOL)
        column = np.full(keep.shape, -1, dtype=np.int64)
        column[keep] = np.arange(int(keep.sum()))
        c_idx, r_idx = np.repeat(W.row, k), np.repeat(W.col, k)
        a_idx, w_val = np.tile(np.arange(k), W.nnz), np.repeat(W.data, k)
        ok = (piece_of[c_idx, a_idx] >= 0) & (column[r_idx, a_idx] >= 0)
        combine = sp.csr_matrix((w_val[ok], (piece_of[c_idx[ok], a_idx[ok]],
                                             column[r_idx[ok], a_idx[ok]])),
                                shape=(pieces.shape[1], int(keep.sum())))
        Phi = pieces @ combine
    Phi = sp.csr_matrix(Phi)
    Phi.eliminate_zeros()
    Phi.sort_indices()
    return Phi, (mine | on_ext, on_ext[: layout.num_owned])


def _cut(full: sp.csr_matrix, known: np.ndarray) -> tuple[sp.csr_matrix, np.ndarray]:
    """The block of the rows ``full`` (global columns) on the sorted unknowns ``known`` (the
    rows' own), and the absolute sums of each row's couplings outside ``known``."""
    R = full.tocoo()
    pos = np.minimum(np.searchsorted(known, R.col), max(known.size - 1, 0))
    keep = known[pos] == R.col if known.size else np.zeros(R.nnz, dtype=bool)
    outside = np.bincount(R.row[~keep], weights=np.abs(R.data[~keep]), minlength=known.size)
    block = sp.csr_matrix((R.data[keep], (R.row[keep], pos[keep])),
                          shape=(known.size, known.size))
    del R, pos, keep  # the set-up's peak memory: no copy of A outlives its use
    block.sum_duplicates()
    # the same values as the serial sym(A)[known][:, known]
    return symmetrised(block), outside


def _region_rows(layout: DistributedLayout, rows: sp.csr_matrix) -> sp.csr_matrix:
    """The rows of the region (global columns) from the owned rows and the region's ghost
    rows (one :meth:`DistributedLayout.ext_rows` exchange)."""
    region = layout.region
    at = np.minimum(np.searchsorted(region, layout.ghosts), max(region.size - 1, 0))
    in_region = region[at] == layout.ghosts if region.size else np.zeros(0, bool)
    # (counted in the setup_* keys of layout.stats)
    return layout.ext_rows(rows, which=in_region)[layout.region_in_ext].tocsr()


def region_block(layout: DistributedLayout, rows: sp.csr_matrix) -> sp.csr_matrix:
    """``sym(A)[region][:, region]`` from this rank's owned rows and the region's ghost rows:
    the part of ``A`` this rank's subdomains see."""
    return _cut(_region_rows(layout, rows), layout.region)[0]


def rows_diagonally_dominant(layout: DistributedLayout, rows: sp.csr_matrix) -> bool:
    """Whether ``A`` is weakly diagonally dominant (1e-10 relative slack, as
    :func:`ddops.dd.eigen.not_dominant_rows`), from every rank's owned rows (collective)."""
    rows = sp.csr_matrix(rows)
    diagonal = np.asarray(rows[np.arange(layout.num_owned), layout.owned]).ravel()
    mine = not_dominant_rows(rows, diagonal=diagonal).size == 0
    return bool(layout.comm.allreduce(mine, op=mpi().LAND)) if layout.size > 1 else mine


def _null_space_rows(null_space: Any, known: np.ndarray) -> np.ndarray | None:
    """The rows ``known`` of a global null space (``n x k``, or ``n`` for one vector)."""
    if null_space is None:
        return None
    Z = np.asarray(null_space, dtype=np.float64)
    return (Z[:, None] if Z.ndim == 1 else Z)[known]


def _routed_columns(layout: DistributedLayout, known: np.ndarray,
                    Phi: sp.coo_matrix) -> sp.csr_matrix | None:
    """Every rank's columns ``Phi`` (rows ``known``, global) as one basis: rank ``r``'s
    columns after those of the ranks before it, the entries sent to the owners of their
    rows, the ghosts' rows from there; ``num_ext x n0`` (None when ``n0 = 0``).
    Collective."""
    counts = np.array(layout.comm.allgather(int(Phi.shape[1])), dtype=np.int64)
    n0 = int(counts.sum())
    if n0 == 0:
        return None
    owned = layout.route_rows(known[Phi.row], int(counts[:layout.rank].sum()) + Phi.col,
                              Phi.data, n0)
    return sp.vstack([owned, layout._ghost_rows_of(owned, None, n0)], format="csr")


def _with_rows(layout: DistributedLayout, rows: sp.csr_matrix, known: np.ndarray,
               full: sp.csr_matrix, missing: np.ndarray) -> tuple[np.ndarray, sp.csr_matrix]:
    """``known`` and its rows ``full`` with the rows ``missing`` fetched from their owners
    (collective: every rank calls it, ``missing`` possibly empty)."""
    order = np.argsort(np.concatenate([known, missing]), kind="stable")
    full = sp.vstack([full, layout.fetch_rows(rows, missing)], format="csr")[order]
    return np.concatenate([known, missing])[order], full


def _prefetch_growth(layout: DistributedLayout, rows: sp.csr_matrix, known: np.ndarray,
                     full: sp.csr_matrix, members: np.ndarray, layers: int,
                     stiff: np.ndarray, budget: int) -> tuple[np.ndarray, sp.csr_matrix]:
    """The rows that the grown sets of this rank's subdomains reach, fetched layer by layer
    without growing the sets: ``layers`` layers of the graph around all of them, then the
    stiff unknowns (``stiff``, global flags) next to anything reached, while the reached
    unknowns number at most ``budget`` (no grown set holds more than its share of it), and
    the neighbours of everything reached.  Every round fetches only the new rows; one exact
    growth on the rows known then checks (a superset unless the budget cut it short).
    Collective: the rounds go on while any rank has new rows to fetch."""
    comm = layout.comm
    reach = np.unique(members)
    front = reach
    plain = layers
    while True:  # a loop over the layers of the prefetch (collective rounds)
        rows_of = full[np.searchsorted(known, front)]
        new = np.setdiff1d(rows_of.indices, reach)
        if plain <= 0:
            new = new[stiff[new]]
            if reach.size + new.size > budget:
                new = new[:0]
        plain -= 1
        reach = np.union1d(reach, new)
        front = new
        missing = np.setdiff1d(front, known)
        if not comm.allreduce(bool(front.size), op=mpi().LOR):
            break
        known, full = _with_rows(layout, rows, known, full, missing)
    # the neighbours of everything reached: the candidates the growth looks at
    missing = np.setdiff1d(full[np.searchsorted(known, reach)].indices, known)
    return _with_rows(layout, rows, known, full, missing)


def rank_local_agdsw(layout: DistributedLayout, rows: sp.csr_matrix, null_space: Any,
                     keywords: dict) -> tuple[sp.csr_matrix | None, Any]:
    """AGDSW's basis from the parts around this rank's interface components: Phi's rows in
    extended numbering.

    The interface components come from the replicated interface pattern (as for the
    rank-local GDSW); a component belongs to the rank of the first part around it.  Its
    coarse functions (GDSW's and the eigenvectors of ``S_e^N tau = lambda S_e^D tau``)
    read only the closed parts around it (their interiors and interfaces) and the rows of
    their interface unknowns, whose neighbours lie one layer further.  So each rank
    fetches the rows of the closed parts around its components and of two layers around
    them (the first layer classifies the closures' unknowns as the whole matrix does,
    the second the first), runs the serial AGDSW on that block with the global owner
    labels, and keeps the functions of its own components, which equal the serial ones.
    The entries go to the owners of their rows, the ghosts' rows come from there.  The
    parts of several ranks' components are computed on each of those ranks.  Collective.

    Returns
    -------
    (Phi_ext or None, info)
        ``num_ext x n0`` (None when no rank has a function), and the block's
        :class:`~ddops.dd.eigen.AdaptiveInfo` on this rank.
    """
    from ..dd.agdsw import agdsw_basis
    from ..dd.interface import interface_components

    d = layout.decomposition
    b = d.block_size
    comps = interface_components(_interface_rows(layout, rows), d.owner,
                                 interface=d.shared_nodes, block_size=b)
    P = comps.parts.tocsr()
    mine = layout.subdomain_ranks[comps.first_parts()] == layout.rank
    needed = comps.parts_around(mine)
    # the closed parts: their own unknowns and the interface unknowns around them
    at_part = needed[d.owner]
    x = comps.interface
    around = np.asarray((P[comps.component].multiply(needed[None, :])).sum(axis=1)).ravel() > 0
    at_part[x[around]] = True
    core = np.flatnonzero(at_part)
    known = layout.region
    full = _region_rows(layout, rows)
    for _ in range(2):  # the closures' rows, then the first layer's (two layers reached)
        missing = np.setdiff1d(core, known)
        known, full = _with_rows(layout, rows, known, full, missing)
        core = np.union1d(core, full[np.searchsorted(known, core)].indices)
        if b > 1:  # whole nodes
            core = np.unique((core // b)[:, None] * b + np.arange(b)[None, :])
    known, full = _with_rows(layout, rows, known, full, np.setdiff1d(core, known))
    # the block on core (its rows are known)
    keep = np.isin(known, core)
    block = _cut(full[np.flatnonzero(keep)], known[keep])[0]
    known = known[keep]
    del full, keep  # (the rows with global columns: not held through the basis's set-up)
    Z = _null_space_rows(null_space, known)
    shared = None
    if d.shared_nodes is not None:
        nodes = np.asarray(d.shared_nodes, dtype=np.int64)
        at = np.minimum(np.searchsorted(known, nodes), known.size - 1)
        shared = np.searchsorted(known, nodes[known[at] == nodes])
    own_parts = np.asarray(layout.subdomain_ranks) == layout.rank
    neumann = _neumann_of_parts(layout, keywords.get("neumann"), needed, own_parts, known)
    info = None
    Phi = sp.coo_matrix((known.size, 0))
    cols = np.zeros(0, dtype=np.int64)
    if mine.any():  # (a rank without components still takes part in the exchanges below)
        with warnings.catch_warnings():
            if layout.rank != 0:  # the warnings of the serial code, once
                warnings.simplefilter("ignore")
            # the eigenproblems of this rank's components only, from the parts around them
            Phi, info = agdsw_basis(block, d.owner[known], null_space=Z, interface=shared,
                                    block_size=b, threshold=keywords.get("threshold"),
                                    max_per_component=keywords.get("max_per_component"),
                                    extension_solver=keywords.get("extension_solver", "auto"),
                                    skip_contrast=keywords.get("skip_contrast"),
                                    owned_parts=own_parts & needed, return_info=True,
                                    **({} if neumann is None else
                                       dict(neumann=neumann[0], neumann_indices=neumann[1])))
        # the block's components that are this rank's: by their first unknown, and whole
        bc = info.components
        order = np.argsort(bc.component, kind="stable")
        start = np.searchsorted(bc.component[order], np.arange(bc.num_components))
        first_unknown = known[bc.interface[order][start]]
        at = np.minimum(np.searchsorted(x, first_unknown), x.size - 1)
        g = comps.component[at]
        sizes_b = np.bincount(bc.component, minlength=bc.num_components)
        sizes_g = np.bincount(comps.component, minlength=comps.num_components)
        own = (x[at] == first_unknown) & mine[g] & (sizes_b == sizes_g[g])
        cols = np.flatnonzero(own[info.column_group])
        Phi = sp.csr_matrix(Phi)[:, cols].tocoo()
    if info is not None:
        info.coarse_matrix = None  # the block's Phi^T A Phi, not the global A_0's
    return _routed_columns(layout, known, Phi), info


def _check_neumann_length(neumann: Any, num_subdomains: int) -> None:
    """``neumann=`` under MPI: one entry per subdomain (other ranks' may be None)."""
    if len(neumann) != num_subdomains:
        raise ValueError(f"neumann must hold one matrix per subdomain ({num_subdomains}; "
                         f"other ranks' entries may be None), got {len(neumann)}")


def _neumann_of_parts(layout: DistributedLayout, neumann: Any, needed: np.ndarray,
                      own_parts: np.ndarray, known: np.ndarray) -> tuple[list, list] | None:
    """The user's Neumann matrices of the parts ``needed`` (this rank's, and the others'
    fetched from their ranks), cut to the block's unknowns ``known`` and in its numbering:
    ``(matrices, indices)`` with None and an empty index set for the other parts; None
    without ``neumann``.  Collective.

    Each rank holds the matrices of its own subdomains (``neumann[i]`` of another rank's
    subdomain may be None).  Only the entries between the block's unknowns are kept: AGDSW
    reads a part's Neumann matrix on the interface around the part, which the block holds.
    The owners check the matrices asked of them before they are sent, and every rank raises
    the first problem found on any rank (no rank is left waiting in a later exchange).
    """
    if neumann is None:
        return None
    d = layout.decomposition
    _check_neumann_length(neumann, d.num_subdomains)
    ranks = np.asarray(layout.subdomain_ranks)
    wanted = np.flatnonzero(needed & ~own_parts)
    outgoing = [wanted[ranks[wanted] == r] for r in range(layout.size)]
    asks = layout.comm.alltoall(outgoing)
    # the matrices this rank provides (its own needed ones and those asked of it): checked
    # here, the verdict agreed by every rank
    provided = np.union1d(np.flatnonzero(needed & own_parts),
                          np.concatenate([np.zeros(0, dtype=np.int64), *asks]))
    problem = None
    for p in provided:  # a loop over this rank's subdomains that some rank needs
        M, size = neumann[int(p)], int(d.sizes[p])
        if M is None:
            problem = f"neumann[{p}] is None on the rank that owns subdomain {p}"
        elif getattr(M, "shape", None) != (size, size):
            problem = (f"neumann[{p}] must have shape ({size}, {size}) (the size of "
                       f"subdomain {p}), got {getattr(M, 'shape', type(M).__name__)}")
        if problem:
            break
    problems = [x for x in layout.comm.allgather(problem) if x]
    if problems:
        raise ValueError(problems[0])
    replies = layout.comm.alltoall([[neumann[int(p)] for p in ask] for ask in asks])
    mats: dict[int, Any] = {int(p): neumann[int(p)] for p in np.flatnonzero(needed & own_parts)}
    for ask, got in zip(outgoing, replies, strict=True):  # a loop over ranks
        mats.update({int(p): m for p, m in zip(ask, got, strict=True)})
    parts = int(d.owner[known].max()) + 1 if known.size else 0
    matrices: list = [None] * parts
    indices: list = [np.zeros(0, dtype=np.int64)] * parts
    for p, M in mats.items():  # a loop over the parts around this rank's components
        idx = np.asarray(d.subdomains[p], dtype=np.int64)
        at = np.minimum(np.searchsorted(known, idx), max(known.size - 1, 0))
        inside = known[at] == idx
        Mc = sp.csr_matrix(M, dtype=np.float64)
        keep = np.flatnonzero(inside)
        matrices[p] = Mc[keep][:, keep]
        indices[p] = at[keep]
    return matrices, indices


class _BlockSubdomains:
    """A rank's subdomains as :func:`ddops.dd.geneo.geneo_basis` reads them, on a block of
    ``A`` whose unknowns they need not cover (the grown sets' rows beyond the region): the
    packed indices in the block's numbering, the sizes, the global multiplicity and the
    unknowns per node (the decomposition's: the block's unknowns are whole nodes, so that
    GenEO orders its chunks' node graph as the serial build does)."""

    def __init__(self, indices: np.ndarray, sizes: np.ndarray, multiplicity: np.ndarray,
                 block_size: int = 1):
        self.block_size = int(block_size)
        self.indices = np.asarray(indices, dtype=np.int64)
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.num_subdomains = int(self.sizes.size)
        self.multiplicity = np.asarray(multiplicity)
        self.num_dofs = int(self.multiplicity.size)

    def entry_weights(self, weighting: str = "full") -> np.ndarray:
        """The partition-of-unity weights ``1 / m_j`` of the packed entries (global ``m``)."""
        check_choice("weighting", weighting, ("full",))
        return 1.0 / self.multiplicity[self.indices]


def rank_local_geneo(layout: DistributedLayout, rows: sp.csr_matrix, null_space: Any,
                     keywords: dict) -> tuple[sp.csr_matrix | None, Any]:
    """GenEO's basis from this rank's subdomains alone: Phi's rows in extended numbering.

    Every subdomain's eigenproblem needs the rows of ``A`` that its local matrices read: on
    a diagonally dominant ``A`` (the cut local matrices), or with the user's matrices of
    ``neumann=`` (only this rank's subdomains' entries are read; the others may be None),
    the subdomain's own rows, which the region holds; with oversampled local matrices
    (``A`` not diagonally dominant, or ``oversampling`` given) the rows of the grown sets
    (:func:`ddops.dd.oversampling.oversampled_sets`) and of their neighbours, which may
    reach beyond the region.  Starting from the region's rows (the owned rows and the
    region's ghost rows), the sets are grown on the rows known; the rows they reach that
    are not known come from their owners (:meth:`DistributedLayout.fetch_rows`), and the
    growth is repeated until it reaches nothing new on any rank.  Its stiff rows are
    measured against the soft unknowns' median of the whole diagonal
    (:func:`~ddops.dd.oversampling.stiff_reference`; the diagonal replicated for that, ``n``
    floats).  The block of ``A`` on the known rows, the absolute couplings that leave it
    and the global partition-of-unity weights then give each subdomain the serial local
    matrices.  The columns of rank ``r`` follow those of the ranks before it; their entries
    go to the owners of their rows (:meth:`DistributedLayout.route_rows`), and the ghosts'
    rows come from there.  Dependent functions are dropped among each rank's own (by the
    energy of its block, exact for functions supported in the region), not across ranks.
    Collective.

    Returns
    -------
    (Phi_ext or None, info)
        ``num_ext x n0`` (None when no rank selected a function; a ``RuntimeWarning``
        on rank 0), and this rank's :class:`~ddops.dd.eigen.AdaptiveInfo` (its
        subdomains only).
    """
    from ..dd.geneo import GENEO_SKIP_CONTRAST, geneo_basis
    from ..dd.indicators import check_skip_contrast, subdomain_contrast
    from ..dd.oversampling import (
        MAX_GROWTH,
        STIFF_RATIO,
        coupled_rows,
        default_oversampling,
        oversampled_sets,
        stiff_reference,
    )

    d = layout.decomposition
    owned_rows = layout._owned_rows(rows)
    neumann = keywords.get("neumann")
    mine = layout.local_subdomains
    if neumann is not None:  # the user's local matrices, of this rank's subdomains only
        _check_neumann_length(neumann, d.num_subdomains)
        neumann = [neumann[i] for i in mine]
    dominant = rows_diagonally_dominant(layout, owned_rows)
    oversampling = keywords.get("oversampling")
    layers = (oversampling if oversampling is not None
              else 0 if dominant or neumann is not None
              else default_oversampling(int(d.block_size)))
    members = d.indices[np.isin(d._subdomain_of_entry, mine)]
    sizes = d.sizes[mine]
    group = np.repeat(np.arange(mine.size), sizes)
    known, full = layout.region, _region_rows(layout, rows)
    reference = contrast = None
    skip = check_skip_contrast(keywords.get("skip_contrast"), GENEO_SKIP_CONTRAST)
    if layers or skip > 0:
        # the whole diagonal, replicated (n floats): the stiff growth's measure is its
        # soft unknowns' median, and the indicator reads it around every subdomain,
        # neighbours on other ranks included
        diagonal = np.concatenate(layout.comm.allgather(
            np.asarray(owned_rows[np.arange(layout.num_owned), layout.owned]).ravel()))
        order = np.argsort(np.concatenate(layout.comm.allgather(layout.owned)))
        diagonal = diagonal[order]
        if skip > 0:
            contrast = subdomain_contrast(diagonal, d, int(d.block_size))[mine]
    if layers:
        # (and which rows are coupled, n Booleans: the serial measure leaves the others out)
        coupled = np.concatenate(layout.comm.allgather(
            coupled_rows(owned_rows, layout.owned)))[order]
        reference = stiff_reference(diagonal, coupled=coupled)
        stiff = diagonal >= STIFF_RATIO * reference
        known, full = _prefetch_growth(layout, rows, known, full, members, layers, stiff,
                                       int(MAX_GROWTH * sizes.sum()))
    while True:  # the exact growth on the rows known; more rows while it reaches beyond them
        block, outside = _cut(full, known)
        if not layers:
            break
        local = np.searchsorted(known, members)
        ring, _ = oversampled_sets(block, local, group, mine.size, layers,
                                   diagonal_reference=reference)
        reached = np.union1d(local, ring)
        missing = np.setdiff1d(np.union1d(known[reached], full[reached].indices), known)
        if not layout.comm.allreduce(bool(missing.size), op=mpi().LOR):
            break
        known, full = _with_rows(layout, rows, known, full, missing)
    region_d = _BlockSubdomains(np.searchsorted(known, members), sizes,
                                d.multiplicity[known], int(d.block_size))
    Z = _null_space_rows(null_space, known)
    Phi, info = geneo_basis(block, region_d, null_space=Z, threshold=keywords.get("threshold"),
                            max_per_subdomain=keywords.get("max_per_subdomain"),
                            neumann=neumann,
                            oversampling=(None if (dominant or neumann is not None)
                                          and not layers else layers),
                            skip_contrast=skip, eigen_stop=keywords.get("eigen_stop"),
                            return_info=True, _block=(outside, reference),
                            _contrast=contrast)
    info.coarse_matrix = None  # the block's Phi^T A Phi, not the global A_0's
    Phi_ext = _routed_columns(layout, known, Phi.tocoo())
    if Phi_ext is None and layout.rank == 0:
        warn("coarse_basis='geneo' selected no coarse function (no eigenvalue below the "
             "threshold in any subdomain); the preconditioner is one-level", RuntimeWarning)
    return Phi_ext, info


def _coarse_contribution(layout: DistributedLayout, rows: sp.csr_matrix, Phi_ext: sp.csr_matrix,
                         known_ext: np.ndarray, on_interface_owned: np.ndarray) -> sp.csr_matrix:
    """This rank's share of ``Phi^T A Phi`` when it knows Phi only on ``known_ext`` rows.

    Every ordered pair ``(i, j)`` with ``A_ij != 0`` is counted once: by the
    owner of ``i`` when it knows row ``j`` of Phi, else (``j`` an interior
    unknown of another rank, ``i`` then on the interface) by the owner of
    ``j``, which adds the transpose of its pair ``(j, i)``.  The masks are in
    extended numbering (``known_ext``) and over the owned unknowns.
    """
    rows = rows.tocoo()
    n_own = layout.num_owned
    Phi_own = Phi_ext[:n_own]
    keep = known_ext[rows.col]
    K = sp.csr_matrix((rows.data[keep], (rows.row[keep], rows.col[keep])), shape=rows.shape)
    del keep
    first = transposed_product(Phi_own, K @ Phi_ext)
    del K
    # owned rows not on the interface: their couplings to unknowns owned elsewhere are the
    # pairs those owners cannot form
    interior = ~on_interface_owned
    foreign = (rows.col >= n_own) & interior[rows.row]
    F = sp.csr_matrix((rows.data[foreign], (rows.row[foreign], rows.col[foreign])),
                      shape=rows.shape)
    del rows, foreign
    second = transposed_product(Phi_own, F @ Phi_ext)
    return (first + second.T).tocsr()


def _agree(comm: Any, error: BaseException | None, what: str) -> None:
    """Raise on every rank when ``error`` is set on any (collective: call on every rank).

    The rank that failed raises its own exception; the others one of the same kind
    (TypeError, else ValueError) naming the lowest failing rank and its message.  An
    ``allgather`` suffices here: every rank reaches it from the same point, with no
    collective in between (unlike the set-up of ``ddops.petsc``, whose agreement is
    point-to-point for that reason).
    """
    mine = None if error is None else (isinstance(error, TypeError), str(error))
    verdicts = comm.allgather(mine) if comm.Get_size() > 1 else [mine]
    if error is not None:
        raise error
    failed = [(r, v) for r, v in enumerate(verdicts) if v is not None]
    if failed:
        rank, (is_type, message) = failed[0]
        cls = TypeError if is_type else ValueError
        raise cls(f"{what} failed on rank {rank} of {comm.Get_size()}: {message}")


def _canonical_rows(rows: Any) -> sp.csr_matrix:
    """``rows`` as float64 CSR with sorted, summed indices (the pattern ``update`` compares)."""
    rows = sp.csr_matrix(rows, dtype=np.float64)
    if not rows.has_canonical_format:
        rows = rows.copy()
        rows.sum_duplicates()
    return rows


class DistributedTwoLevelSchwarz:
    """Two-level overlapping Schwarz preconditioner with subdomains on MPI ranks.

    Equal, to rounding, to the serial :class:`ddops.TwoLevelSchwarz` with the
    same decomposition, coarse basis and options; vectors follow the layout's
    convention (each rank's owned entries, increasing global order).

    The set-up has the serial preconditioner's two phases.  The **symbolic**
    phase (the constructor, once) checks the options, the form of ``A`` and its
    pattern, and chooses the coarse construction and solvers; the **numeric**
    phase (the constructor, then every :meth:`update`) exchanges the region's
    ghost rows, builds the coarse basis (unless kept), sums and factorises
    ``A_0`` and factorises the subdomain matrices, through the serial parts
    (:class:`~ddops.precond.corrections.CoarseCorrection` for ``A_0``, a
    one-level :class:`ddops.TwoLevelSchwarz` on the rank's region, whose
    ``update`` reuses its map from the entries of ``A`` to the subdomain
    matrices).

    Parameters
    ----------
    layout : DistributedLayout
        The layout; its ghosts must include the rank's region (always) and,
        for the coarse matrix, the columns of its rows (build it with ``A=``).
    A : sparse matrix or None
        The global SPD matrix, identical on every rank (the region's rows of
        ``A`` give the subdomain matrices), or this rank's owned rows only
        (``num_owned x n``, global column indices, rows in the order of
        ``layout.owned``), or None: the owned rows the layout was built with.
        From owned rows the ghost rows are exchanged at every set-up (module
        notes); on one rank both forms coincide.
    coarse_basis : str, sparse matrix or None
        A name of :data:`ddops.dd.coarse.ALL_COARSE_BASES` or ``"auto"``
        (:func:`ddops.dd.coarse.auto_coarse_basis`, as in the serial preconditioner), a
        global ``n x n0`` matrix Phi (identical on every rank), or None (one level).
        Default ``"gdsw"`` (with ``options=``: the options' ``coarse``).
    variant : {"additive", "restricted", "symmetric_restricted", "hybrid"}
        As in the serial preconditioner; ``"restricted"`` is not symmetric
        (GMRES).  ``"hybrid"`` (``P_0 + (I - P_0 A) M_1 (I - A P_0)``) costs
        two products with ``A`` and two coarse reductions more per application.
    null_space : array (n x k) or "constants", optional
        Passed to a named coarse basis (and restricted to the region for
        ``local_solver="amg"``); accepted and not used otherwise (also with
        ``coarse_basis=None``), as by the serial preconditioner.
    local_solver : {"auto", "dense", "sparse", "superlu", "pardiso", "amg"}
        Local solver of the rank's serial one-level preconditioner (see
        :class:`ddops.TwoLevelSchwarz`).
    local_basis : bool
        Build GDSW/RGDSW rank-locally (the harmonic extension into this rank's
        parts only); False: the serial basis on every rank.  Both give the same
        Phi to rounding.  Distributed only (not a field of :class:`ddops.SchwarzOptions`).
    coarse, coarse_size, factor_dtype, coarse_options, threads
        As in :class:`ddops.TwoLevelSchwarz` (``coarse_options`` is deprecated there
        too: use ``options=``).
    kernel : array (n x k) or "constants", optional
        The exact kernel of a singular positive semidefinite ``A``, global and
        identical on every rank, as for :class:`ddops.TwoLevelSchwarz` (the null
        space when none is given; the coarse space grounded; the application
        ``P M P``); module notes, "A singular A".  Use :meth:`remove_kernel` for
        an inconsistent right-hand side.
    options : ddops.SchwarzOptions, optional
        All the settings in one object, instead of the keyword arguments (not both),
        as for :class:`ddops.TwoLevelSchwarz`; its decomposition fields are not used
        (the layout has the decomposition).

    Attributes
    ----------
    options : ddops.SchwarzOptions
        The settings in force.
    local : TwoLevelSchwarz
        The rank's one-level preconditioner on its region.
    coarse : CoarseCorrection or None
        The coarse part: the basis built by the serial code and the factor of ``A_0``.
    coarse_dim : int
        ``n0`` (0 for one level).
    coarse_construction : {"rank-local", "serial"} or None
        How Phi was built (None for one level).
    matrix_input : {"global", "local rows"}
        Which form of ``A`` was given.
    kernel : numpy.ndarray or None
        This rank's owned rows of the orthonormal kernel basis ``Q`` (``kernel=``).
    coarse_stats : dict
        The coarse basis's statistics, with ``"kernel_dropped"`` (the columns dropped
        for ``kernel=``).
    gathered_matrix : bool
        True when the owned rows of all ranks were gathered for the serial
        matrix-based coarse code (local rows with ``local_basis=False``, or no
        owner labels).
    setup_seconds, coarse_basis_seconds, coarse_matrix_seconds : float
        Wall times of this rank's last set-up (the constructor's or the last
        :meth:`update`) and of its coarse-basis and coarse-matrix parts.
    symbolic_seconds, numeric_seconds : float
        The two phases of the last set-up (0 symbolic after an update).
    updates : int
        How many times :meth:`update` ran.

    Raises
    ------
    ValueError
        A different size than the layout, owned rows of the wrong shape (or
        ``A=None`` with a layout built without a matrix), a non-symmetric
        ``A``, an unknown variant or coarse basis, a singular coarse matrix, a
        ``kernel`` that ``A`` does not annihilate.
    """

    def __init__(self, layout: DistributedLayout, A: Any = None, coarse_basis: Any = "gdsw",
                 variant: str = "additive", *, null_space: Any = None,
                 local_solver: str = "auto", local_basis: bool = True, coarse: bool = True,
                 coarse_size: int | None = None, factor_dtype: Any = np.float64,
                 coarse_options: dict | None = None, kernel: Any = None,
                 threads: int | None = None, options: SchwarzOptions | None = None) -> None:
        start = time.perf_counter()
        if not isinstance(layout, DistributedLayout):
            raise TypeError(f"layout must be a DistributedLayout, got {type(layout).__name__}")
        if not isinstance(local_basis, (bool, np.bool_)):
            raise TypeError(f"local_basis must be a bool, got {type(local_basis).__name__}")
        given = {"coarse_basis": coarse_basis, "variant": variant, "coarse": coarse,
                 "coarse_size": coarse_size, "local_solver": local_solver,
                 "null_space": null_space, "factor_dtype": factor_dtype,
                 "coarse_options": coarse_options, "kernel": kernel, "threads": threads}
        if options is not None and isinstance(coarse_basis, str) and coarse_basis == "gdsw":
            given["coarse_basis"] = "auto"  # this class's default: not a setting beside options=
        self.options = opts = resolve_options(options, given, layout.decomposition)
        check_choice("variant", opts.variant, DISTRIBUTED_VARIANTS)
        self.threads = check_threads(opts.threads)
        self.layout = layout
        self.local_basis = bool(local_basis)
        self.updates = 0
        with thread_limit(self.threads):
            matrix = self._symbolic(layout, A, opts)
            self.symbolic_seconds = time.perf_counter() - start
            self._numeric(matrix, reuse_coarse=False)
        del matrix
        self.setup_seconds = time.perf_counter() - start
        self._thread_pools = None if self.threads is None else ThreadpoolController()

    # -- set-up: the symbolic phase ----------------------------------------------------------
    def _symbolic(self, layout: DistributedLayout, A: Any, opts: SchwarzOptions) -> Any:
        """The options, the form and pattern of ``A``, the coarse construction and solvers;
        returns the checked matrix for the numeric phase."""
        d = layout.decomposition
        n = layout.num_dofs
        self.variant = opts.variant
        self.shape = (n, n)
        self.dtype = np.dtype(np.float64)
        self.factor_dtype = np.dtype(opts.factor_dtype)
        shape = tuple(getattr(A, "shape", ()))
        # owned rows: n columns but not n rows (with one rank both forms are the same matrix);
        # decided together (a rank owning every row has n of them)
        local_rows = A is None or (len(shape) == 2 and shape[1] == n and shape[0] != n)
        if layout.size > 1:
            local_rows = bool(layout.comm.allreduce(bool(local_rows), op=mpi().LOR))
        self.matrix_input = "local rows" if local_rows else "global"
        matrix, pattern = self._checked_input(A)
        # the pattern that update() must see again (canonical: sorted, no duplicates)
        self._pattern = (pattern[0].copy(), pattern[1].copy())
        null_space, kernel = opts.null_space, opts.kernel
        if isinstance(null_space, str):  # "constants"
            null_space = np.ones(n)
        if isinstance(kernel, str):
            kernel = np.ones(n)
        Q = None
        if kernel is not None:  # collective for owned rows (the same verdict on every rank)
            Q = (check_kernel(kernel, matrix, allreduce=self._allreduce)
                 if self.matrix_input == "local rows" else check_kernel(kernel, matrix))
            # the kernel is also the coarse space's null space unless another one is given
            if null_space is None:
                null_space = kernel
        self._null_space = null_space
        self._kernel_vectors = kernel  # update() checks the new matrix against them
        self.kernel = None if Q is None else np.ascontiguousarray(Q[layout.owned])
        self._largest_residual = 0.0
        self._warned_inconsistent = False
        kind = opts.coarse
        if isinstance(kind, str):  # as TwoLevelSchwarz: the matrix is always known here
            kind = None if kind == "none" else resolve_coarse_kind(kind, d, matrix=True)
        named = isinstance(kind, str)
        self._coarse_keywords = opts.coarse_keywords(kind) if named else {}
        self.coarse_construction = None
        if kind is not None:
            rank_local = (self.local_basis and named and kind in RANK_LOCAL_BASES
                          and d.owner is not None and (local_rows or null_space is None))
            # GenEO: from the rows its subdomains' (grown) sets reach (and the rank's own
            # subdomains' matrices of neumann=)
            rank_local = rank_local or (self.local_basis and named and kind == "geneo")
            # AGDSW: from the closed parts around the rank's components (owner labels; the
            # finite-element matrices of neumann= of those parts fetched from their ranks).
            # On one rank the serial construction, which classifies the interface once
            # (4.0 s against 3.3 s on the channels of benchmarks/distributed_geneo.py)
            rank_local = rank_local or (self.local_basis and named and kind == "agdsw"
                                        and d.owner is not None and layout.size > 1)
            self.coarse_construction = "rank-local" if rank_local else "serial"
        self.gathered_matrix = (local_rows and self.coarse_construction == "serial"
                                and named and kind in MATRIX_COARSE_BASES)
        self.coarse = None
        self.coarse_info, self.coarse_stats = None, {"kernel_dropped": 0}
        if kind is not None:
            # the coarse matrix above COARSE_DENSE_MAX as the serial preconditioner: PARDISO
            # when installed, unless SuperLU was asked for by name
            superlu = opts.local_solver in ("superlu", "sparse") or not pardiso_available()
            # a Phi of the serial code is grounded there; a rank-local one in _build_basis
            serial_kernel = Q if self.coarse_construction == "serial" else None
            self.coarse = CoarseCorrection(d, kind, opts.coarse_size, null_space, serial_kernel,
                                           self._coarse_keywords, False, self.dtype, "numpy",
                                           "superlu" if superlu else "pardiso",
                                           extension_reuse=opts.extension_reuse)
        self.local = None
        self._Phi_ext = self._known = None
        return matrix

    def _allreduce(self, values: Any, op: str = "sum") -> np.ndarray:
        """Sum (``op="sum"``), maximum (``"max"``) or minimum (``"min"``) of ``values`` over
        the ranks (counted in ``layout.stats``)."""
        if op == "sum":
            return self.layout.allreduce(np.asarray(values, dtype=np.float64))
        values = np.ascontiguousarray(values, dtype=np.float64)
        result = np.empty_like(values)
        self.layout.comm.Allreduce(values, result, op=mpi().MAX if op == "max" else mpi().MIN)
        self.layout.stats["reductions"] += 1
        self.layout.stats["reduction_bytes"] += int(values.nbytes)
        return result

    def _checked_input(self, A: Any) -> tuple[sp.csr_matrix, tuple[np.ndarray, np.ndarray]]:
        """``A`` in the form the preconditioner was built with, checked and canonical, and
        the pattern of what was given (``indptr``, ``indices``), which :meth:`update`
        compares."""
        layout = self.layout
        n = layout.num_dofs
        if self.matrix_input == "local rows":
            rows = _canonical_rows(layout._owned_rows(A))  # its ValueError names the shapes
            check_finite("A", rows.data)
            pattern = (rows.indptr, rows.indices)
            matrix = rows
        else:
            A, _ = check_matrix(A)
            if A.shape[0] != n:
                raise ValueError(f"A has size {A.shape[0]} but the layout has num_dofs={n}")
            A = _canonical_rows(A)
            pattern = (A.indptr, A.indices)
            A = symmetrised(A)  # (A + A^T) / 2 is A itself when A is exactly symmetric
            matrix = A
        return matrix, pattern

    # -- set-up: the numeric phase -----------------------------------------------------------
    def _numeric(self, matrix: sp.csr_matrix, reuse_coarse: bool) -> None:
        """Everything that depends on the values: the region block (ghost rows exchanged),
        the coarse basis (unless kept), ``A_0`` and its factor, the local factors."""
        start = time.perf_counter()
        layout = self.layout
        if self.matrix_input == "local rows":
            rows = matrix
            A_region = self._region_block(rows)
        else:
            rows = matrix  # the global matrix: every consumer takes its owned rows
            region = layout.region
            A_region = matrix[region][:, region]
        self._A = DistributedMatrix(layout, rows) if self.variant == "hybrid" else None
        basis_start = time.perf_counter()
        rows_ext = None
        if self.coarse is not None and not reuse_coarse:
            rows_ext = self._build_basis(rows)
        self.coarse_basis_seconds = time.perf_counter() - basis_start
        matrix_start = time.perf_counter()
        if rows_ext is None and self._Phi_ext is not None:
            rows_ext = layout.local_rows(rows)
        self._factor_coarse(rows_ext)
        self.coarse_matrix_seconds = time.perf_counter() - matrix_start
        # the local factorisations last: the coarse set-up's temporaries are gone by then, so
        # they do not add to the factors in the set-up's peak memory (2D Poisson 10^6 on 2
        # ranks: about 150 MB less per rank)
        del rows, rows_ext, matrix
        self._local_part(layout, A_region)
        self.numeric_seconds = time.perf_counter() - start

    def _region_block(self, rows: sp.csr_matrix) -> sp.csr_matrix:
        """``sym(A)[region][:, region]`` from the owned rows and the region's ghost rows
        (:func:`region_block`)."""
        return region_block(self.layout, rows)

    def _local_part(self, layout: DistributedLayout, A_region: sp.csr_matrix) -> None:
        """The serial one-level preconditioner on the rank's region (built, or updated)."""
        if self.local is not None:
            with warnings.catch_warnings():
                if self.kernel is not None:
                    warnings.filterwarnings("ignore", "A is singular", RuntimeWarning)
                self.local.update(A_region)
            return
        # hybrid: the additive local sum, the coarse correction applied multiplicatively
        local_variant = "additive" if self.variant == "hybrid" else self.variant
        opts = self.options
        near = None
        if opts.local_solver == "amg" and self._null_space is not None:
            near = np.asarray(self._null_space, dtype=np.float64)[layout.region]
        with warnings.catch_warnings():
            if self.kernel is not None:  # the region of one rank is all of the singular A
                warnings.filterwarnings("ignore", "A is singular", RuntimeWarning)
            self.local = TwoLevelSchwarz(A_region, layout.local_decomposition(),
                                         coarse_basis=None, variant=local_variant,
                                         coarse=False, local_solver=opts.local_solver,
                                         null_space=near, factor_dtype=self.factor_dtype)
        self._region_in_ext = layout.region_in_ext
        self._y_ext = np.zeros(layout.num_ext)

    def _build_basis(self, matrix: sp.csr_matrix) -> sp.csr_matrix | None:
        """Phi's owned and extended rows (and where they are correct); returns the owned
        rows in extended numbering when it built them."""
        layout = self.layout
        kind = self.coarse.kind
        solver = self._coarse_keywords.get("extension_solver", "auto")
        rows_ext = known = None
        if self.coarse_construction == "rank-local" and kind in ("geneo", "agdsw"):
            build = rank_local_geneo if kind == "geneo" else rank_local_agdsw
            Phi_ext, info = build(layout, matrix, self._null_space, self._coarse_keywords)
            self._Phi_ext = None if Phi_ext is None else sp.csr_matrix(Phi_ext)
            self._known = None
            self.coarse_info = info
            self.coarse_stats = dict(getattr(info, "stats", None) or {}, kernel_dropped=0)
            self.coarse.release_basis()
            self._ground_rank_local()
            return None
        if self.matrix_input == "local rows":
            rows = matrix
            if self.coarse_construction == "rank-local":
                rows_ext = layout.local_rows(rows)
                Phi_ext, known = rank_local_gdsw_rows(layout, rows, kind, self._null_space,
                                                      rows_ext=rows_ext,
                                                      extension_solver=solver)
            else:
                if self.gathered_matrix:
                    # the serial matrix-based code needs the whole matrix: gathered on every rank
                    A_full = layout.allgather_rows(rows)
                    A_full = symmetrised(A_full)
                    Phi = self.coarse.build_basis(A_full)
                    del A_full
                else:
                    Phi = self.coarse.build_basis(None)
                Phi_ext = None if Phi is None else sp.csr_matrix(Phi[layout.ext_indices])
        else:
            A = matrix
            if self.coarse_construction == "rank-local":
                Phi, known = _rank_local_gdsw(layout, A, kind, solver)
                known = (known[0][layout.ext_indices], known[1][layout.owned])
            else:
                Phi = self.coarse.build_basis(A)
            Phi_ext = None if Phi is None else sp.csr_matrix(Phi, dtype=np.float64)[
                layout.ext_indices]
        self.coarse.release_basis()  # the global Phi is not kept: each rank holds its rows
        self.coarse_info = self.coarse.info
        self.coarse_stats = dict(self.coarse.stats)
        self._Phi_ext = None if Phi_ext is None else sp.csr_matrix(Phi_ext, dtype=np.float64)
        self._known = known
        if self.coarse_construction == "rank-local":
            self._ground_rank_local()
        return rows_ext

    def _ground_rank_local(self) -> None:
        """Drop one column of a rank-local Phi per dimension of the coarse kernel
        (``kernel=``), over the ranks' rows of Phi."""
        self.coarse_stats["kernel_dropped"] = 0
        Phi_ext = self._Phi_ext
        if self.kernel is None or Phi_ext is None:
            return
        layout = self.layout
        drop = distributed_kernel_columns(Phi_ext[: layout.num_owned], self.kernel,
                                          self._allreduce, warns=layout.rank == 0)
        if drop.size:
            keep = np.setdiff1d(np.arange(Phi_ext.shape[1]), drop)
            self._Phi_ext = sp.csr_matrix(Phi_ext[:, keep])
        self.coarse_stats["kernel_dropped"] = int(drop.size)

    def _factor_coarse(self, rows_ext: sp.csr_matrix | None) -> None:
        """Assemble ``A_0`` from every rank's contribution and factorise it on every rank.

        ``rows_ext`` are the owned rows in extended numbering; ``self._known`` None (Phi
        correct on every extended row) or ``(known_ext, on_interface_owned)``.
        """
        layout = self.layout
        Phi_ext = self._Phi_ext
        self.coarse_dim = 0
        self.coarse_solver = None
        self._Phi = self._PhiT = None
        if Phi_ext is None or Phi_ext.shape[1] == 0:
            return
        self._Phi = Phi_ext[: layout.num_owned]
        self._PhiT = self._Phi.T  # a CSC view, as the serial preconditioner: Phi is stored once
        # this rank's contribution Phi_owned^T (A_owned Phi_ext), summed over the ranks
        if self._known is None:
            contribution = transposed_product(self._Phi, rows_ext @ Phi_ext)
        else:  # the pairs whose Phi rows this rank lacks come from their owners, transposed
            contribution = _coarse_contribution(layout, rows_ext, Phi_ext, *self._known)
        A0 = allreduce_sparse(layout, contribution)
        A0 = ((A0 + A0.T) * 0.5).tocsr()
        self.coarse.factor(A0)  # the serial factorisation, redundantly on every rank
        self.coarse_dim = self.coarse.dim
        self.coarse_solver = self.coarse.solver
        self.coarse_matrix = A0

    # -- update ------------------------------------------------------------------------------
    def update(self, A: Any = None, *, reuse_coarse: bool = False
               ) -> DistributedTwoLevelSchwarz:
        """Rebuild the numeric phase for a new matrix with the same sparsity pattern.

        Collective (call it on every rank).  The form of ``A`` (global or this rank's
        rows), the decomposition, the coarse construction, the solvers and the map from
        the entries of ``A`` to the subdomain matrices are kept; the ghost rows are
        exchanged again and the coarse basis, ``A_0`` and the local and coarse factors
        are recomputed.  The result equals a preconditioner built from scratch on the
        new matrix (to rounding), like :meth:`ddops.TwoLevelSchwarz.update`.

        Parameters
        ----------
        A : sparse matrix, optional
            The new matrix, in the form the preconditioner was built with (this rank's
            owned rows, or the global matrix), with exactly the stored pattern of the
            old one on every rank (explicit zeros count as entries).  None: the owned
            rows held by the layout (their values changed in place).
        reuse_coarse : bool
            Keep the coarse basis Phi (bit for bit) and recompute only ``A_0``, the
            local factors and the coarse factor.

        Returns
        -------
        DistributedTwoLevelSchwarz
            ``self``, updated.

        Raises
        ------
        ValueError
            On every rank when the pattern differs on any rank (build a new
            preconditioner), or the checks of the constructor fail.
        """
        if not isinstance(reuse_coarse, (bool, np.bool_)):
            raise TypeError(f"reuse_coarse must be a bool, got {type(reuse_coarse).__name__}")
        comm = self.layout.comm
        with thread_limit(self.threads):
            start = time.perf_counter()
            error = matrix = None
            try:
                matrix, got = self._checked_input(A)
                indptr, indices = self._pattern
                if not (np.array_equal(got[0], indptr) and np.array_equal(got[1], indices)):
                    raise ValueError(
                        f"update: A has another sparsity pattern on rank {self.layout.rank} "
                        f"({got[1].size} stored entries against {indices.size}, or the same "
                        "count elsewhere) than the matrix this preconditioner was built for; "
                        "build a new DistributedTwoLevelSchwarz for it")
            except (ValueError, TypeError) as exc:
                error = exc
            _agree(comm, error, "DistributedTwoLevelSchwarz.update")
            if self.kernel is not None:  # the same verdict on every rank (reduced norms)
                if self.matrix_input == "local rows":
                    check_kernel(self._kernel_vectors, matrix, allreduce=self._allreduce)
                else:
                    check_kernel(self._kernel_vectors, matrix)
            error = None
            try:
                self._numeric(matrix, reuse_coarse=bool(reuse_coarse))
            except (ValueError, TypeError) as exc:  # a subdomain of one rank, singular
                error = exc
            _agree(comm, error, "DistributedTwoLevelSchwarz.update")
            self.symbolic_seconds = 0.0
            self.setup_seconds = time.perf_counter() - start
        self._largest_residual = 0.0  # a new matrix: the residuals are those of its system
        self._warned_inconsistent = False
        self.updates += 1
        return self

    @property
    def coarse_basis_rows(self) -> sp.csr_matrix | None:
        """This rank's owned rows of the coarse basis Phi (``num_owned x n0``), or None."""
        return self._Phi

    # -- application -----------------------------------------------------------------------
    def coarse_solve(self, c: Any, adjoint: bool = False) -> np.ndarray:
        """``A_0^{-1} c`` (``A_0^{-T} c`` for the adjoint) on this rank: no communication.

        Every rank holds the factor of ``A_0``; ``c`` is a coarse vector (``n0``) or
        block (``n0 x k``), e.g. the summed ``Phi^T x``.
        """
        if not self.coarse_dim:
            raise ValueError("coarse_solve: this preconditioner has no coarse space")
        c = np.asarray(c, dtype=np.float64)
        if c.shape[:1] != (self.coarse_dim,) or c.ndim not in (1, 2):
            raise ValueError(f"c must have shape ({self.coarse_dim},) or ({self.coarse_dim}, "
                             f"k), got {c.shape}")
        Y = self.coarse.solve(c[:, None] if c.ndim == 1 else c, adjoint)
        return np.asarray(Y[:, 0] if c.ndim == 1 else Y)

    def _one_level(self, x: np.ndarray, adjoint: bool, c_local: np.ndarray | None = None):
        """The local sum (forward exchange, local solves, reverse exchange).

        With ``c_local`` the coarse reduction of it is started before the local
        solves and completed after them; returns ``(y, c)`` then.
        """
        layout = self.layout
        ext = layout.update_ghosts(x)
        request = c = None
        if c_local is not None:  # the coarse reduction overlaps the local solves
            c = np.empty_like(c_local)
            request = layout.comm.Iallreduce(c_local, c, op=mpi().SUM)
            layout.stats["reductions"] += 1
            layout.stats["reduction_bytes"] += int(c_local.nbytes)
        local = self.local.rmatvec if adjoint else self.local.matvec
        y_ext = self._y_ext
        y_ext[:] = 0.0
        y_ext[self._region_in_ext] = local(ext[self._region_in_ext])
        y = layout.reduce_ghosts(y_ext)
        if request is not None:
            request.Wait()
        return y, c

    def _coarse(self, x: np.ndarray, adjoint: bool) -> np.ndarray:
        """``(Phi A_0^{-1} Phi^T x)_owned``: one ``Allreduce`` of ``n0`` values."""
        c = self.layout.allreduce(self._PhiT @ x)
        return self._Phi @ self.coarse_solve(c, adjoint)

    def _apply(self, x: Any, adjoint: bool) -> np.ndarray:
        if self._thread_pools is None:
            return self._apply_unlimited(x, adjoint)
        with self._thread_pools.limit(limits=self.threads):
            return self._apply_unlimited(x, adjoint)

    def _apply_unlimited(self, x: Any, adjoint: bool) -> np.ndarray:
        layout = self.layout
        x = np.asarray(x, dtype=np.float64)
        if x.shape != (layout.num_owned,):
            raise ValueError(f"x must have shape ({layout.num_owned},), got {x.shape}")
        if self.kernel is None:
            return self._apply_spd(x, adjoint)
        # P M P with P = I - Q Q^T, as the serial preconditioner; the residual's norm rides
        # along with Q^T x in one reduction
        Q = self.kernel
        reduced = layout.allreduce(np.append(Q.T @ x, x @ x))
        self._check_consistent(reduced[:-1], float(np.sqrt(max(reduced[-1], 0.0))))
        y = self._apply_spd(x - Q @ reduced[:-1], adjoint)
        return y - Q @ layout.allreduce(Q.T @ y)

    def _check_consistent(self, along: np.ndarray, norm: float) -> None:
        """Warn once when a residual has a kernel component (an inconsistent right-hand
        side), as :meth:`ddops.TwoLevelSchwarz._check_consistent` (the same verdict on
        every rank: the numbers are reduced)."""
        self._largest_residual, message = inconsistent_residual(
            float(np.linalg.norm(along)), norm, self._largest_residual)
        if message is not None and not self._warned_inconsistent:
            self._warned_inconsistent = True
            if self.layout.rank == 0:
                warn(message, RuntimeWarning)

    def remove_kernel(self, b: Any) -> np.ndarray:
        """``b_owned`` without its components along the kernel (``kernel=``) of ``A``.

        Collective (one reduction of ``k`` values): ``b - Q Q^T b``, the consistent
        right-hand side closest to ``b``, as :meth:`ddops.TwoLevelSchwarz.remove_kernel`.
        ``b`` itself without a kernel.
        """
        b = np.asarray(b, dtype=np.float64)
        if b.shape != (self.layout.num_owned,):
            raise ValueError(f"b must have shape ({self.layout.num_owned},), got {b.shape}")
        if self.kernel is None:
            return b
        return b - self.kernel @ self.layout.allreduce(self.kernel.T @ b)

    def _apply_spd(self, x: np.ndarray, adjoint: bool) -> np.ndarray:
        if self.variant == "hybrid" and self.coarse_dim:
            # x0 = P0 x;  y = M1 (x - A x0);  M x = x0 + y - P0 A y  (as the serial form)
            x0 = self._coarse(x, adjoint)
            y, _ = self._one_level(x - self._A.matvec(x0), adjoint)
            return x0 + y - self._coarse(self._A.matvec(y), adjoint)
        if not self.coarse_dim:
            return self._one_level(x, adjoint)[0]
        y, c = self._one_level(x, adjoint, self._PhiT @ x)
        return y + self._Phi @ self.coarse_solve(c, adjoint)

    def matvec(self, x: Any) -> np.ndarray:
        """``(M x)_owned`` from ``x_owned``: two halo exchanges and one reduction."""
        return self._apply(x, adjoint=False)

    def rmatvec(self, x: Any) -> np.ndarray:
        """``(M^T x)_owned`` (the same communication as :meth:`matvec`)."""
        return self._apply(x, adjoint=True)

    __matmul__ = matvec

    def __repr__(self) -> str:
        return (f"DistributedTwoLevelSchwarz(rank={self.layout.rank}/{self.layout.size}, "
                f"variant={self.variant!r}, coarse_dim={self.coarse_dim}, "
                f"local_solver={self.local.local_solver!r})")
