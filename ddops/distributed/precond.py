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
Cholesky up to :data:`ddops.precond.schwarz.COARSE_DENSE_MAX`, else sparse).
Redundant factorisation instead of one rank plus a broadcast: the
``Allreduce`` of ``Phi^T x`` already leaves the coarse right-hand side on
every rank, so every rank solves and no second message (a broadcast of
``A_0^{-1} Phi^T x``) is needed per application; ``n0`` is small, so the
repeated solve is cheap.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp

from .._validation import check_choice, check_finite
from ..dd.coarse import (
    MATRIX_COARSE_BASES,
    resolve_coarse_kind,
    validate_coarse_matrix,
)
from ..dd.coarse import coarse_basis as build_coarse_basis
from ..linalg.spd import bad_pivots as _bad_pivots
from ..linalg.spd import sparse_spd_factor as _sparse_spd_factor
from ..precond.schwarz import (
    COARSE_DENSE_MAX,
    TwoLevelSchwarz,
    _check_matrix,
    _check_symmetric,
)
from .comm import mpi
from .layout import DistributedLayout
from .matrix import DistributedMatrix

#: The coarse bases built from each rank's own rows (GDSW, RGDSW); the adaptive ones (AGDSW,
#: GenEO) are built from the gathered matrix, as their serial construction reads every row.
RANK_LOCAL_BASES = ("gdsw", "rgdsw")

__all__ = ["DISTRIBUTED_VARIANTS", "DistributedTwoLevelSchwarz", "allreduce_sparse",
           "rank_local_gdsw_rows"]

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


def _rank_local_gdsw(layout: DistributedLayout, A: sp.csr_matrix,
                     kind: str) -> tuple[sp.csr_matrix, tuple[np.ndarray, np.ndarray]]:
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
    from ..dd.gdsw import harmonic_extension, interface_components

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
    pieces = harmonic_extension(A, d.owner, np.flatnonzero(~mine | on_interface), E)
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
                         null_space: Any = None, rows_ext: sp.csr_matrix | None = None):
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

    Returns
    -------
    Phi_ext : scipy.sparse.csr_matrix
        ``num_ext x n0``, correct on the owned rows and the interface ghosts.
    masks : tuple of numpy.ndarray
        ``(known_ext, on_interface_owned)``: the extended rows where ``Phi_ext``
        is correct, and the owned unknowns on the interface.
    """
    from ..dd.gdsw import (
        DEPENDENCE_RTOL,
        _check_null_space,
        _columns_from_groups,
        _independent_vectors,
        harmonic_extension,
        interface_components,
    )

    # an adaptive kind here would silently get the RGDSW-like construction below
    check_choice("kind", kind, RANK_LOCAL_BASES)
    d = layout.decomposition
    n = d.num_dofs
    Z = _check_null_space(null_space, n)
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
    pieces_G, piece_of = _columns_from_groups(np.arange(x.size), comps.component, values,
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
                                (pick @ pieces_G).tocsr())
    if kind == "gdsw":
        keep = _independent_vectors(comps.component, values, C, DEPENDENCE_RTOL)
        Phi = pieces[:, piece_of[keep]]
    else:  # as gdsw_basis: piece (c, a) enters column (r, a) with weight W[c, r]
        W = comps.root_weights().tocoo()
        E = sp.csr_matrix((np.ones(x.size), (np.arange(x.size), comps.component)),
                          shape=(x.size, C))
        XW = (E @ W.tocsr()).tocoo()
        keep = _independent_vectors(XW.col, XW.data[:, None] * Z[x[XW.row]],
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
    first = Phi_own.T @ (K @ Phi_ext)
    del K
    # owned rows not on the interface: their couplings to unknowns owned elsewhere are the
    # pairs those owners cannot form
    interior = ~on_interface_owned
    foreign = (rows.col >= n_own) & interior[rows.row]
    F = sp.csr_matrix((rows.data[foreign], (rows.row[foreign], rows.col[foreign])),
                      shape=rows.shape)
    del rows, foreign
    second = Phi_own.T @ (F @ Phi_ext)
    return (first + second.T).tocsr()


class DistributedTwoLevelSchwarz:
    """Two-level overlapping Schwarz preconditioner with subdomains on MPI ranks.

    Equal, to rounding, to the serial :class:`ddops.TwoLevelSchwarz` with the
    same decomposition, coarse basis and variant; vectors follow the layout's
    convention (each rank's owned entries, increasing global order).

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
        From owned rows the ghost rows are exchanged once at set-up (module
        notes); on one rank both forms coincide.
    coarse_basis : str, sparse matrix or None
        A name of :data:`ddops.dd.coarse.ALL_COARSE_BASES` or ``"auto"``
        (:func:`ddops.dd.coarse.auto_coarse_basis`, as in the serial preconditioner), a
        global ``n x n0`` matrix Phi (identical on every rank), or None (one level).
    variant : {"additive", "restricted", "symmetric_restricted", "hybrid"}
        As in the serial preconditioner; ``"restricted"`` is not symmetric
        (GMRES).  ``"hybrid"`` (``P_0 + (I - P_0 A) M_1 (I - A P_0)``) costs
        two products with ``A`` and two coarse reductions more per application.
    null_space : array (n x k), optional
        Passed to a named coarse basis; accepted and not used otherwise (also with
        ``coarse_basis=None``), as by the serial preconditioner.
    local_solver : {"auto", "dense", "sparse", "superlu", "pardiso", "amg"}
        Local solver of the rank's serial one-level preconditioner (see
        :class:`ddops.TwoLevelSchwarz`).
    local_basis : bool
        Build GDSW/RGDSW with the constant null space rank-locally (the
        harmonic extension into this rank's parts only); False: the serial
        basis on every rank.  Both give the same Phi to rounding.

    Attributes
    ----------
    local : TwoLevelSchwarz
        The rank's one-level preconditioner on its region.
    coarse_dim : int
        ``n0`` (0 for one level).
    coarse_construction : {"rank-local", "serial"} or None
        How Phi was built (None for one level).
    matrix_input : {"global", "local rows"}
        Which form of ``A`` was given.
    gathered_matrix : bool
        True when the owned rows of all ranks were gathered for the serial
        GDSW/RGDSW code (local rows with ``local_basis=False`` or no owner
        labels).
    setup_seconds, coarse_basis_seconds, coarse_matrix_seconds : float
        Wall times of this rank's set-up and of its coarse-basis and
        coarse-matrix parts.

    Raises
    ------
    ValueError
        A different size than the layout, owned rows of the wrong shape (or
        ``A=None`` with a layout built without a matrix), a non-symmetric
        ``A``, an unknown variant or coarse basis, a singular coarse matrix.
    """

    def __init__(self, layout: DistributedLayout, A: Any = None, coarse_basis: Any = "gdsw",
                 variant: str = "additive", *, null_space: Any = None,
                 local_solver: str = "auto", local_basis: bool = True) -> None:
        start = time.perf_counter()
        if not isinstance(layout, DistributedLayout):
            raise TypeError(f"layout must be a DistributedLayout, got {type(layout).__name__}")
        check_choice("variant", variant, DISTRIBUTED_VARIANTS)
        if not isinstance(local_basis, (bool, np.bool_)):
            raise TypeError(f"local_basis must be a bool, got {type(local_basis).__name__}")
        # as TwoLevelSchwarz: the matrix is always known here
        coarse_basis = resolve_coarse_kind(coarse_basis, layout.decomposition, matrix=True)
        n = layout.num_dofs
        self.layout = layout
        self.variant = variant
        self.shape = (n, n)
        self.dtype = np.dtype(np.float64)
        self.gathered_matrix = False
        shape = tuple(getattr(A, "shape", ()))
        # owned rows: n columns but not n rows (with one rank both forms are the same matrix)
        if A is None or (len(shape) == 2 and shape[1] == n and shape[0] != n):
            self.matrix_input = "local rows"
            self._setup_local_rows(layout, A, coarse_basis, null_space, local_solver,
                                   local_basis)
        else:
            self.matrix_input = "global"
            self._setup_global(layout, A, coarse_basis, null_space, local_solver, local_basis)
        self.setup_seconds = time.perf_counter() - start

    # -- set-up ----------------------------------------------------------------------------
    def _local_part(self, layout: DistributedLayout, A_region: sp.csr_matrix,
                    local_solver: str) -> None:
        """The serial one-level preconditioner on the rank's region."""
        # hybrid: the additive local sum, the coarse correction applied multiplicatively
        local_variant = "additive" if self.variant == "hybrid" else self.variant
        self.local = TwoLevelSchwarz(A_region, layout.local_decomposition(), coarse_basis=None,
                                     variant=local_variant, coarse=False,
                                     local_solver=local_solver)
        self._region_in_ext = layout.region_in_ext
        self._y_ext = np.zeros(layout.num_ext)

    def _setup_global(self, layout: DistributedLayout, A: Any, coarse_basis: Any,
                      null_space: Any, local_solver: str, local_basis: bool) -> None:
        """Set-up from the global matrix, identical on every rank."""
        A, _ = _check_matrix(A)
        n = layout.num_dofs
        if A.shape[0] != n:
            raise ValueError(f"A has size {A.shape[0]} but the layout has num_dofs={n}")
        _check_symmetric(A)
        A = ((A + A.T) * 0.5).tocsr()  # as the serial preconditioner does
        region = layout.region
        self._local_part(layout, A[region][:, region], local_solver)
        self._A = DistributedMatrix(layout, A) if self.variant == "hybrid" else None
        basis_start = time.perf_counter()
        Phi, known = self._basis(layout, A, coarse_basis, null_space, local_basis)
        self.coarse_basis_seconds = time.perf_counter() - basis_start
        matrix_start = time.perf_counter()
        if Phi is None:
            self._factor_coarse(layout, None, None, None, None)
        else:
            Phi = sp.csr_matrix(Phi, dtype=np.float64)
            if known is not None:
                known = (known[0][layout.ext_indices], known[1][layout.owned])
            self._factor_coarse(layout, layout.local_rows(A), Phi[layout.owned],
                                Phi[layout.ext_indices], known)
        self.coarse_matrix_seconds = time.perf_counter() - matrix_start

    def _setup_local_rows(self, layout: DistributedLayout, A: Any, coarse_basis: Any,
                          null_space: Any, local_solver: str, local_basis: bool) -> None:
        """Set-up from this rank's owned rows of ``A`` and the ghost rows of its region."""
        rows = layout._owned_rows(A)  # its ValueError names A and the shapes expected
        rows = sp.csr_matrix(rows, dtype=np.float64)
        rows.sum_duplicates()
        check_finite("A", rows.data)
        # the region's ghost rows, once (counted in the setup_* keys of layout.stats)
        region = layout.region
        at = np.minimum(np.searchsorted(region, layout.ghosts), max(region.size - 1, 0))
        in_region = region[at] == layout.ghosts if region.size else np.zeros(0, bool)
        R = layout.ext_rows(rows, which=in_region)[layout.region_in_ext].tocoo()
        pos = np.minimum(np.searchsorted(region, R.col), region.size - 1)
        keep = region[pos] == R.col
        A_region = sp.csr_matrix((R.data[keep], (R.row[keep], pos[keep])),
                                 shape=(region.size, region.size))
        del R, pos, keep  # the set-up's peak memory: no copy of A outlives its use
        A_region.sum_duplicates()
        _check_symmetric(A_region, "A")  # the region's block: the part this rank can see
        # the same values as the serial sym(A)[region][:, region]
        A_region = ((A_region + A_region.T) * 0.5).tocsr()
        self._A = DistributedMatrix(layout, rows) if self.variant == "hybrid" else None
        basis_start = time.perf_counter()
        Phi_owned = Phi_ext = known = None
        self.coarse_construction = None
        d = layout.decomposition
        rows_ext = None  # the owned rows in extended numbering, built once where needed
        # null_space is problem data: accepted whatever the coarse basis (as by the serial
        # preconditioner), used where a named basis is built from it
        if coarse_basis is None:
            pass
        elif (local_basis and isinstance(coarse_basis, str)
                and coarse_basis in RANK_LOCAL_BASES and d.owner is not None):
            self.coarse_construction = "rank-local"
            rows_ext = layout.local_rows(rows)
            Phi_ext, known = rank_local_gdsw_rows(layout, rows, coarse_basis, null_space,
                                                  rows_ext=rows_ext)
            Phi_owned = Phi_ext[: layout.num_owned]
        else:
            self.coarse_construction = "serial"
            if isinstance(coarse_basis, str) and coarse_basis in MATRIX_COARSE_BASES:
                # the serial GDSW code needs the whole matrix: gathered on every rank
                self.gathered_matrix = True
                A_full = layout.allgather_rows(rows)
                _check_symmetric(A_full)
                A_full = ((A_full + A_full.T) * 0.5).tocsr()
                Phi = build_coarse_basis(d, coarse_basis, A=A_full, null_space=null_space)
                del A_full
            elif isinstance(coarse_basis, str):
                Phi = build_coarse_basis(d, coarse_basis, A=None, null_space=null_space)
            else:
                Phi = validate_coarse_matrix(coarse_basis, d.num_dofs)
            Phi = sp.csr_matrix(Phi, dtype=np.float64)
            Phi_owned, Phi_ext = Phi[layout.owned], Phi[layout.ext_indices]
            rows_ext = layout.local_rows(rows)  # after the gathered matrix is gone
        self.coarse_basis_seconds = time.perf_counter() - basis_start
        matrix_start = time.perf_counter()
        self._factor_coarse(layout, rows_ext, Phi_owned, Phi_ext, known)
        self.coarse_matrix_seconds = time.perf_counter() - matrix_start
        # the local factorisations last: the coarse set-up's temporaries are gone by then, so
        # they do not add to the factors in the set-up's peak memory (2D Poisson 10^6 on 2
        # ranks: about 150 MB less per rank)
        del rows, rows_ext, Phi_owned, Phi_ext, known
        self._local_part(layout, A_region, local_solver)

    def _basis(self, layout: DistributedLayout, A: sp.csr_matrix, coarse_basis: Any,
               null_space: Any, local_basis: bool) -> tuple[sp.csr_matrix | None, Any]:
        """``(Phi, known)``: Phi with correct rows where ``known`` (None: every row)."""
        self.coarse_construction = None
        if coarse_basis is None:
            return None, None
        d = layout.decomposition
        if (local_basis and null_space is None and isinstance(coarse_basis, str)
                and coarse_basis in RANK_LOCAL_BASES and d.owner is not None):
            self.coarse_construction = "rank-local"
            return _rank_local_gdsw(layout, A, coarse_basis)
        self.coarse_construction = "serial"
        if isinstance(coarse_basis, str):
            return build_coarse_basis(d, coarse_basis, A=A, null_space=null_space), None
        return validate_coarse_matrix(coarse_basis, d.num_dofs), None

    def _factor_coarse(self, layout: DistributedLayout, rows: sp.csr_matrix | None,
                       Phi_owned: sp.csr_matrix | None, Phi_ext: sp.csr_matrix | None,
                       known: Any) -> None:
        """Assemble ``A_0`` from every rank's contribution and factorise it on every rank.

        ``rows`` are the owned rows in extended numbering, ``Phi_owned`` and
        ``Phi_ext`` the owned and extended rows of Phi, ``known`` None (Phi
        correct on every extended row) or ``(known_ext, on_interface_owned)``.
        """
        self.coarse_dim = 0 if Phi_owned is None else int(Phi_owned.shape[1])
        self.coarse_solver = None
        if Phi_owned is None:
            return
        self._Phi = sp.csr_matrix(Phi_owned, dtype=np.float64)
        self._PhiT = self._Phi.T  # a CSC view, as the serial preconditioner: Phi is stored once
        Phi_ext = sp.csr_matrix(Phi_ext, dtype=np.float64)
        # this rank's contribution Phi_owned^T (A_owned Phi_ext), summed over the ranks
        if known is None:
            contribution = self._PhiT @ (rows @ Phi_ext)
        else:  # the pairs whose Phi rows this rank lacks come from their owners, transposed
            contribution = _coarse_contribution(layout, rows, Phi_ext, *known)
        A0 = allreduce_sparse(layout, contribution)
        A0 = ((A0 + A0.T) * 0.5).tocsr()
        singular = ValueError(
            f"coarse matrix A_0 = Phi^T A Phi ({self.coarse_dim} x {self.coarse_dim}) is "
            "singular or not positive definite; the coarse basis Phi must have full column "
            "rank and A must be SPD")
        if self.coarse_dim <= COARSE_DENSE_MAX:
            A0d = A0.toarray()
            try:
                c, lower = sla.cho_factor(A0d, lower=True, check_finite=False)
            except np.linalg.LinAlgError:
                raise singular from None
            if _bad_pivots(np.diagonal(c) ** 2, np.diagonal(A0d)).any():
                raise singular
            self.coarse_solver = "dense"
            self._coarse_cho = (c, lower)
        else:
            lu, bad = _sparse_spd_factor(A0)
            if lu is None or bad.size:
                raise singular
            self.coarse_solver = "sparse"
            self._coarse_lu = lu
        self.coarse_matrix = A0

    # -- application -----------------------------------------------------------------------
    def _coarse_solve(self, c: np.ndarray, adjoint: bool) -> np.ndarray:
        if self.coarse_solver == "dense":
            return sla.cho_solve(self._coarse_cho, c, check_finite=False)
        return self._coarse_lu.solve(c, trans="T" if adjoint else "N")

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
        return self._Phi @ self._coarse_solve(c, adjoint)

    def _apply(self, x: Any, adjoint: bool) -> np.ndarray:
        layout = self.layout
        x = np.asarray(x, dtype=np.float64)
        if x.shape != (layout.num_owned,):
            raise ValueError(f"x must have shape ({layout.num_owned},), got {x.shape}")
        if self.variant == "hybrid" and self.coarse_dim:
            # x0 = P0 x;  y = M1 (x - A x0);  M x = x0 + y - P0 A y  (as the serial form)
            x0 = self._coarse(x, adjoint)
            y, _ = self._one_level(x - self._A.matvec(x0), adjoint)
            return x0 + y - self._coarse(self._A.matvec(y), adjoint)
        if not self.coarse_dim:
            return self._one_level(x, adjoint)[0]
        y, c = self._one_level(x, adjoint, self._PhiT @ x)
        return y + self._Phi @ self._coarse_solve(c, adjoint)

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
