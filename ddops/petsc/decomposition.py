"""A ddops decomposition from each rank's own rows of a PETSc matrix, following PETSc's ownership.

PETSc gives rank ``r`` the contiguous rows ``[rstart_r, rend_r)``; a
:class:`~ddops.distributed.DistributedLayout` gives unknown ``j`` to the rank
of its non-overlapping part ``owner[j]``.  The two agree when every part lies
inside one rank's rows, so each rank cuts *its own rows* into its own parts:

1. **Partition (rank-local).**  Rank ``r`` partitions the graph of its
   diagonal block ``A[rstart_r:rend_r, rstart_r:rend_r]`` (METIS, contiguous
   blocks, or coordinate bisection) into ``N_r`` parts, numbered after the
   parts of the lower ranks.  No rows of other ranks are needed; couplings to
   them are ignored by the cut (they become the interface).
2. **Overlap (rank-local rows plus fetched rows).**  Layer ``l + 1`` of a
   subdomain adds every node coupled to layer ``l``.  Growing ``overlap``
   layers needs the rows of the nodes at distance ``< overlap`` from the
   rank's rows: the rows of the next ring are fetched from their owners with
   one ``MatCreateSubMatrices`` per layer beyond the first (collective, the
   same number of calls on every rank), then the layers are grown by Boolean
   sparse products as :func:`ddops.dd.partition.grow_overlap` does.  The
   graph is that of the stored rows, so a structurally symmetric matrix gives
   exactly ``grow_overlap``'s subdomains.
3. **Replication.**  The layout keeps the global decomposition on every rank,
   so the owner labels (``n`` integers) and the packed subdomain indices (about
   ``n (1 + overlap fraction)`` integers) are gathered on every rank with
   ``Allgatherv``.  The matrix, its pattern and its values are not gathered.

Then ``layout.owned`` is exactly ``range(rstart_r, rend_r)`` with
``subdomain_ranks`` mapping parts ``N_0 + ... + N_{r-1}`` to
``N_0 + ... + N_r - 1`` to rank ``r``: a PETSc vector's local array is the
layout's distributed vector as it is.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from ..dd.decomposition import Decomposition, split_sizes
from ..dd.partition import decomposition_from_labels, default_subdomains, partition
from ._collective import agree

__all__ = ["RankDecomposition", "local_rows", "rank_decomposition", "rank_decomposition_from_rows"]

#: PETSc matrix types whose rows ``MatGetRow`` returns whole (with global column indices).
ROW_TYPES = ("seqaij", "mpiaij")


class RankDecomposition:
    """The decomposition built by :func:`rank_decomposition` and how it maps to the ranks.

    Attributes
    ----------
    decomposition : Decomposition
        The global decomposition (identical on every rank), with ``owner``.
    subdomain_ranks : numpy.ndarray
        Rank of every subdomain.
    parts_per_rank : numpy.ndarray
        ``N_r`` for every rank.
    row_range : tuple of int
        This rank's PETSc rows ``(rstart, rend)``.
    rows : scipy.sparse.csr_matrix
        This rank's rows of the matrix (``(rend - rstart) x n``, global columns).
    fetched_rows : int
        Rows of other ranks fetched to grow the overlap (0 with ``overlap <= 1``).
    replicated_integers : int
        Integers of the decomposition held on every rank (owner labels, packed
        indices, multiplicity): the O(n) replicated part.
    """

    def __init__(self, decomposition, subdomain_ranks, parts_per_rank, row_range, rows,
                 fetched_rows) -> None:
        self.decomposition = decomposition
        self.subdomain_ranks = subdomain_ranks
        self.parts_per_rank = parts_per_rank
        self.row_range = row_range
        self.rows = rows
        self.fetched_rows = fetched_rows
        d = decomposition
        self.replicated_integers = int(d.owner.size + d.indices.size + d.multiplicity.size)


def local_rows(P: Any) -> sp.csr_matrix:
    """This rank's rows of a PETSc ``AIJ`` matrix as CSR with global column indices.

    Raises
    ------
    TypeError
        A matrix type other than ``seqaij``/``mpiaij``, or complex scalars.
    """
    kind = P.getType()
    if kind not in ROW_TYPES:
        raise TypeError(f"ddops.petsc.SchwarzPC reads the rows of an AIJ matrix "
                        f"({', '.join(ROW_TYPES)}), got type {kind!r}; convert it with "
                        "MatConvert(A, MATAIJ) or -mat_type aij")
    rstart, rend = P.getOwnershipRange()
    n_rows, n_cols = P.getSize()
    if n_rows != n_cols:
        raise ValueError(f"the operator must be square, got {n_rows} x {n_cols}")
    indptr, indices, data = P.getValuesCSR()
    if np.iscomplexobj(data):
        raise TypeError("ddops.petsc.SchwarzPC needs a real PETSc build (PetscScalar is "
                        "complex here)")
    rows = sp.csr_matrix((np.asarray(data, dtype=np.float64), np.asarray(indices, np.int64),
                          np.asarray(indptr, np.int64)), shape=(rend - rstart, n_cols))
    rows.sum_duplicates()  # also sorts the column indices
    return rows


def _fetch_rows(P: Any, wanted: np.ndarray) -> sp.csr_matrix:
    """The rows ``wanted`` (global, sorted) of ``P`` from their owners (collective)."""
    from petsc4py import PETSc

    n = P.getSize()[1]
    isrow = PETSc.IS().createGeneral(wanted.astype(PETSc.IntType), comm=PETSc.COMM_SELF)
    # the identity stride over all columns: PETSc then keeps the global column numbering
    iscol = PETSc.IS().createStride(n, 0, 1, comm=PETSc.COMM_SELF)
    (sub,) = P.createSubMatrices(isrow, iscol)
    indptr, indices, data = sub.getValuesCSR()
    for obj in (sub, isrow, iscol):
        obj.destroy()
    rows = sp.csr_matrix((np.asarray(data, dtype=np.float64), np.asarray(indices, np.int64),
                          np.asarray(indptr, np.int64)), shape=(wanted.size, n))
    rows.sum_duplicates()
    return rows


def _whole_nodes(indices: np.ndarray, b: int) -> np.ndarray:
    """The unknowns of every node that ``indices`` touch, sorted."""
    nodes = np.unique(indices // b)
    return (nodes[:, None] * b + np.arange(b)).ravel() if b > 1 else nodes


def _local_labels(own: sp.csr_matrix, parts: int, partitioner: str, b: int, seed: int,
                  coordinates: Any) -> np.ndarray:
    """Labels ``0 .. parts-1`` of this rank's unknowns (equal over each node)."""
    m = own.shape[0]
    if partitioner == "contiguous":
        return np.repeat(np.repeat(np.arange(parts, dtype=np.int64),
                                   split_sizes(m // b, parts)), b)
    if partitioner == "rcb" and coordinates is None:
        raise ValueError("-ddops_partitioner rcb needs the coordinates of this rank's rows: "
                         "SchwarzPC(coordinates=...)")
    return partition(own, parts, partitioner=partitioner, block_size=b, seed=seed,
                     coordinates=coordinates)


def rank_decomposition(P: Any, comm: Any = None, *, subdomains: int | None = None,
                       overlap: int = 1, partitioner: str = "metis", block_size: int = 1,
                       seed: int = 0, coordinates: Any = None) -> RankDecomposition:
    """Overlapping decomposition of a PETSc matrix whose parts respect its row ownership.

    Collective over ``P``'s communicator (see the module notes for the steps):
    :func:`rank_decomposition_from_rows` on ``P``'s own rows, the rows of other
    ranks fetched from ``P`` where the overlap needs them.

    Parameters
    ----------
    P : petsc4py.PETSc.Mat
        Square ``seqaij`` or ``mpiaij`` matrix, symmetric pattern.
    comm : mpi4py communicator, optional
        ``P``'s communicator as mpi4py; required on more than one rank.
    subdomains, overlap, partitioner, block_size, seed, coordinates
        As in :func:`rank_decomposition_from_rows`.

    Returns
    -------
    RankDecomposition
    """
    return rank_decomposition_from_rows(
        local_rows(P), P.getOwnershipRange(), comm,
        fetch_rows=lambda wanted: _fetch_rows(P, wanted),
        subdomains=subdomains, overlap=overlap, partitioner=partitioner, block_size=block_size,
        seed=seed, coordinates=coordinates)


def rank_decomposition_from_rows(rows: sp.csr_matrix, row_range: tuple[int, int],
                                 comm: Any = None, *, fetch_rows: Any = None,
                                 subdomains: int | None = None, overlap: int = 1,
                                 partitioner: str = "metis", block_size: int = 1, seed: int = 0,
                                 coordinates: Any = None) -> RankDecomposition:
    """The decomposition of :func:`rank_decomposition` from this rank's rows as scipy CSR.

    The same parts without PETSc: what ``ddops.distributed`` needs to run on
    exactly the decomposition a PETSc solve used (the benchmarks compare the two).

    Parameters
    ----------
    rows : scipy.sparse.csr_matrix
        This rank's rows ``[rstart, rend)`` of the matrix, global column indices
        (``(rend - rstart) x n``), symmetric pattern overall.
    row_range : tuple of int
        ``(rstart, rend)``; the ranks' ranges are contiguous and in rank order.
    comm : mpi4py communicator, optional
        The communicator (mpi4py); required on more than one rank.
    fetch_rows : callable, optional
        ``fetch_rows(wanted)``: the rows ``wanted`` (sorted global indices) as CSR,
        collective (every rank calls it, also with nothing wanted); needed for
        ``overlap > 1`` on more than one rank.
    subdomains : int, optional
        Total number of subdomains ``N >= size``; rank ``r`` gets
        ``split_sizes(N, size)[r]`` of them.  Default: every rank
        :func:`~ddops.dd.partition.default_subdomains` of its own rows.
    overlap : int
        Layers of the graph of the matrix added to every part.
    partitioner : {"metis", "contiguous", "rcb"}
        How a rank cuts its rows (see :data:`ddops.petsc.options.PARTITIONERS`).
    block_size : int
        Unknowns per node (interleaved); must divide every rank's row range.
    seed : int
        METIS seed.
    coordinates : array, optional
        Coordinates of this rank's rows (``num_rows x d``), for ``"rcb"``.

    Returns
    -------
    RankDecomposition
    """
    size = 1 if comm is None else comm.Get_size()
    rank = 0 if comm is None else comm.Get_rank()
    b = int(block_size)
    # -- 1. the rank's own parts from its diagonal block (rank-local: a failure on one rank is
    # agreed on before the first collective, so that every rank raises)
    try:
        rows, rstart, rend, parts, labels = _own_parts(rows, row_range, rank, size, subdomains,
                                                       partitioner, b, seed, coordinates)
        error = None
    except Exception as exc:  # noqa: BLE001 - raised again on every rank by agree
        error = exc
    agree(comm, error, "the decomposition")
    parts_per_rank = (np.array([parts], dtype=np.int64) if comm is None
                      else np.array(comm.allgather(parts), dtype=np.int64))
    first = int(parts_per_rank[:rank].sum())

    # -- 2. the rows within distance overlap - 1 of the rank's rows (sorted global indices)
    known = np.arange(rstart, rend, dtype=np.int64)
    known_rows = rows
    fetched = 0
    layers = max(overlap - 1, 0) if size > 1 else 0  # one rank holds every row
    if layers and fetch_rows is None:
        raise ValueError(f"overlap {overlap} on {size} ranks needs the rows of other ranks: "
                         "pass fetch_rows")
    for _ in range(layers):
        ring = np.setdiff1d(_whole_nodes(known_rows.indices, b), known, assume_unique=True)
        # collective: every rank calls, also with no ring
        new_rows = sp.csr_matrix(fetch_rows(ring))
        error = None
        if new_rows.shape[0] != ring.size:
            error = ValueError(f"fetch_rows returned {new_rows.shape[0]} rows for the "
                               f"{ring.size} asked for")
        agree(comm, error, "the decomposition")
        fetched += int(ring.size)
        order = np.argsort(np.concatenate([known, ring]), kind="stable")
        known = np.concatenate([known, ring])[order]
        known_rows = sp.vstack([known_rows, new_rows], format="csr")[order]
    # the nodes in reach: known rows and their columns, whole nodes
    reach = _whole_nodes(np.concatenate([known, known_rows.indices]), b)
    nodes = reach[::b] // b
    # node graph of the known rows plus the identity (a node joins when coupled to a member)
    coo = known_rows.tocoo()
    src = np.searchsorted(nodes, known[coo.row] // b)
    dst = np.searchsorted(nodes, coo.col // b)
    k = nodes.size
    step = sp.csr_matrix((np.ones(src.size + k, dtype=bool),
                          (np.concatenate([src, np.arange(k)]),
                           np.concatenate([dst, np.arange(k)]))), shape=(k, k))
    step.sum_duplicates()
    node_labels = labels[::b]
    own_pos = np.searchsorted(nodes, np.arange(rstart, rend, b) // b)
    order = np.argsort(node_labels, kind="stable")
    indptr = np.concatenate([[0], np.cumsum(np.bincount(node_labels, minlength=parts))])
    M = sp.csr_matrix((np.ones(order.size, dtype=bool), own_pos[order], indptr),
                      shape=(parts, k))
    for _ in range(overlap):
        M = M @ step
    M.sum_duplicates()
    M.sort_indices()
    grown = nodes[M.indices]
    indices = (grown[:, None] * b + np.arange(b)).ravel() if b > 1 else grown
    sizes = np.diff(M.indptr).astype(np.int64) * b
    owner = (labels + first).astype(np.int64)

    # -- 3. replicate the decomposition (the layout keeps it on every rank)
    if comm is not None and size > 1:
        owner = _allgatherv(comm, owner)
        indices = _allgatherv(comm, indices.astype(np.int64))
        sizes = _allgatherv(comm, sizes)
    decomposition = decomposition_from_labels(indices.astype(np.int64), sizes, owner,
                                              block_size=b)
    subdomain_ranks = np.repeat(np.arange(size, dtype=np.int64), parts_per_rank)
    return RankDecomposition(decomposition, subdomain_ranks, parts_per_rank, (rstart, rend),
                             rows, fetched)


def _own_parts(rows: Any, row_range: tuple[int, int], rank: int, size: int,
               subdomains: int | None, partitioner: str, b: int, seed: int,
               coordinates: Any) -> tuple[sp.csr_matrix, int, int, int, np.ndarray]:
    """``(rows, rstart, rend, parts, labels)``: the checks and the partition of this rank's rows."""
    rows = sp.csr_matrix(rows)
    rstart, rend = (int(i) for i in row_range)
    m = rend - rstart
    if rows.shape[0] != m:
        raise ValueError(f"rows has {rows.shape[0]} rows but row_range ({rstart}, {rend}) "
                         f"holds {m}")
    if rstart % b or m % b:
        raise ValueError(f"block size {b} does not divide this rank's rows [{rstart}, {rend}); "
                         "set the block size of the matrix (MatSetBlockSize) or -ddops_block_size")
    if m == 0:
        raise ValueError(f"rank {rank} owns no rows of the matrix; every rank needs at least one "
                         "subdomain")
    if subdomains is None:
        parts = default_subdomains(m, b)
    else:
        if subdomains < size:
            raise ValueError(f"-ddops_subdomains {subdomains} is less than the {size} ranks: "
                             "every rank needs at least one subdomain")
        parts = int(split_sizes(subdomains, size)[rank])
    parts = min(parts, m // b)
    own = rows[:, rstart:rend].tocsr()
    labels = _local_labels(own, parts, partitioner, b, seed, coordinates)
    return rows, rstart, rend, parts, labels


def _allgatherv(comm: Any, local: np.ndarray) -> np.ndarray:
    """Concatenation of every rank's 1-D ``int64`` array in rank order (one ``Allgatherv``)."""
    local = np.ascontiguousarray(local, dtype=np.int64)
    counts = np.array(comm.allgather(int(local.size)), dtype=np.int64)
    out = np.empty(int(counts.sum()), dtype=np.int64)
    displs = np.concatenate([[0], np.cumsum(counts)[:-1]])
    comm.Allgatherv(local, [out, (counts, displs)])
    return out


def check_ownership(decomposition: Decomposition, subdomain_ranks: np.ndarray,
                    row_ranges: Any) -> None:
    """Raise when some unknown's layout rank differs from its PETSc rank (an internal check)."""
    dof_ranks = subdomain_ranks[decomposition.owner]
    expected = np.repeat(np.arange(len(row_ranges) - 1), np.diff(row_ranges))
    if not np.array_equal(dof_ranks, expected):
        bad = int(np.flatnonzero(dof_ranks != expected)[0])
        raise RuntimeError(f"unknown {bad}: the ddops layout would put it on rank "
                           f"{int(dof_ranks[bad])}, PETSc owns it on rank {int(expected[bad])}")
