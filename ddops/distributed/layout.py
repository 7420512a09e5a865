"""Distributed layout: which rank owns which subdomains and unknowns, and the halo plan.

Conventions
-----------
* The global :class:`~ddops.Decomposition` is built identically on every
  rank (O(n) integers per rank: owner labels and subdomain index arrays).
  The matrix may be given as this rank's owned rows only; the rows of other
  ranks that a rank needs (its region's ghost rows) come from their owners
  once, at set-up (:meth:`DistributedLayout.ghost_rows`).  The layout keeps
  O(n) integer maps and its own rows and plan, so a later version can build
  it from a distributed partitioner without changing the API below.
* **Subdomains to ranks.**  Rank ``r`` owns a set of subdomains: by default
  contiguous blocks of subdomain indices (sizes differing by at most one,
  :func:`ddops.dd.decomposition.split_sizes`), or any map
  ``subdomain_ranks[i] = r`` given by the user.
* **Unknowns to ranks.**  Unknown ``j`` belongs to the rank of the subdomain
  ``decomposition.owner[j]`` (the non-overlapping partition).  Without
  ``owner`` labels, to the rank of the first subdomain that contains ``j``.
* **Distributed vectors.**  A distributed vector is a plain numpy array on
  every rank holding the rank's *owned* entries in increasing global index
  order: ``x_local = x_global[layout.owned]``.  Blocks of vectors are arrays
  of shape ``(num_owned, k)``.  :meth:`DistributedLayout.scatter` and
  :meth:`DistributedLayout.gather` convert from and to global arrays on small
  problems; on large ones the user fills ``x_local`` from local data at the
  positions ``layout.owned``.
* **Extended (owned + ghost) numbering.**  Local position ``l`` of the
  extended vector is global unknown ``layout.ext_indices[l]``: first the
  owned unknowns, then the ghosts, ordered by owning rank and then by global
  index, so the halo exchange receives straight into the tail of the
  extended vector.  Ghosts are the unknowns of the rank's subdomains
  (overlap included) and the columns of its rows of ``A`` that it does not own.
* **Region.**  ``layout.region`` (sorted global indices) is the union of the
  rank's subdomains; ``layout.region_in_ext`` their extended positions.
  :meth:`DistributedLayout.local_decomposition` is the rank's subdomains as a
  :class:`~ddops.Decomposition` of the region (weights with the *global*
  multiplicity), on which the serial operators run unchanged.

The communication plan (computed once)
--------------------------------------
Each rank counts the ghosts it needs from every other rank, one ``Alltoall``
of those counts and one ``Alltoallv`` of the global indices tell every owner
what to send.  Then per exchange:

* :meth:`~DistributedLayout.update_ghosts` (forward): owners pack
  ``x[send_index]`` into a preallocated buffer, one ``Neighbor_alltoallv`` on
  a distributed-graph communicator (or ``Alltoallv`` on the parent
  communicator, ``exchange="alltoallv"``) delivers it, and the ghosts land in
  the extended vector.
* :meth:`~DistributedLayout.reduce_ghosts` (reverse, sum): the ghost entries
  of an extended vector travel back to their owners, which add them to their
  owned entries (the scatter-add of ``R_i^T``).

Set-up only: :meth:`~DistributedLayout.ghost_rows` sends the CSR rows of the
ghosts a rank asks for (flags back to the owners, then row lengths, column
indices in global numbering and values; four ``Alltoallv``), and
:meth:`~DistributedLayout.allgather_rows` gathers selected rows on every rank
(the interface rows of the GDSW classification).  Their traffic is counted in
the ``setup_*`` keys of :attr:`DistributedLayout.stats`.

Every exchange and every reduction made through the layout is counted in
:attr:`DistributedLayout.stats` (messages sent by this rank, bytes sent,
reductions and their bytes), for the communication model.

API summary
-----------
``DistributedLayout(decomposition, comm=None, A=None, *, subdomain_ranks=None,
exchange="neighbor")``, attributes ``comm, rank, size, num_dofs, decomposition,
subdomain_ranks, local_subdomains, dof_ranks, owned, ghosts, ext_indices,
num_owned, num_ghosts, num_ext, owned_counts, region, region_in_ext,
send_ranks, recv_ranks, send_counts, recv_counts, send_displs, recv_displs, send_index,
stats``;
methods ``update_ghosts(x, out=None)``, ``reduce_ghosts(y_ext, out=None)``,
``ext_positions(global_indices)``, ``local_rows(A)``, ``ghost_rows(A, which)``,
``ext_rows(A, which)``, ``allgather_rows(A, select)``, ``local_decomposition()``,
``scatter(x_global)``, ``gather(x_local, root=None)``, ``allreduce(values)``,
``dot(x, y)``, ``norm(x)``, ``reset_stats()``, ``plan_summary()``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from .._validation import check_choice
from ..dd.decomposition import Decomposition, split_sizes
from .comm import mpi

__all__ = ["EXCHANGES", "DistributedLayout", "RegionDecomposition"]

#: Halo exchange implementations: a neighbourhood collective on a distributed-graph
#: communicator (only neighbours take part) or ``Alltoallv`` on the whole communicator.
EXCHANGES = ("neighbor", "alltoallv")


class RegionDecomposition(Decomposition):
    """A rank's subdomains as a decomposition of its region, weighted by the global multiplicity.

    The partition-of-unity weights ``D_i = diag(1 / m_j)`` must count every
    subdomain containing ``j``, also those on other ranks; the region's own
    multiplicity only counts the local ones.  Everything else is the serial
    :class:`~ddops.Decomposition`.
    """

    def __init__(self, indices, sizes, num_dofs, global_multiplicity, *, coordinates=None,
                 h=None) -> None:
        # packed form (indices sorted inside each subdomain): no per-subdomain arrays
        self._init_from_packed(np.asarray(indices, dtype=np.int64),
                               np.asarray(sizes, dtype=np.int64), int(num_dofs), None,
                               coordinates, h)
        self.global_multiplicity = np.asarray(global_multiplicity, dtype=np.int64)

    def weights(self, i: int) -> np.ndarray:
        """Diagonal of ``D_i``: ``1 / m_j`` with the global multiplicity."""
        i = self._check_subdomain(i)
        return 1.0 / self.global_multiplicity[self.indices[self.offsets[i]:self.offsets[i + 1]]]

    def entry_weights(self, weighting: str = "full") -> np.ndarray:
        """Weights of every packed entry, from the global multiplicity."""
        check_choice("weighting", weighting, ("none", "sqrt", "full"))
        w = 1.0 / self.global_multiplicity[self.indices]
        return {"none": np.ones_like(w), "sqrt": np.sqrt(w), "full": w}[weighting]


def _check_decomposition(decomposition: Any) -> Decomposition:
    if not isinstance(decomposition, Decomposition):
        raise TypeError("decomposition must be a ddops Decomposition, got "
                        f"{type(decomposition).__name__}")
    return decomposition


def _csr(A: Any, name: str = "A") -> sp.csr_matrix:
    if not sp.issparse(A):
        arr = np.asarray(A)
        if arr.ndim != 2 or arr.dtype.kind not in "fiub":
            raise ValueError(f"{name} must be a real 2-D matrix, got dtype {arr.dtype} and "
                             f"shape {arr.shape}")
        A = arr
    A = sp.csr_matrix(A)
    A.sum_duplicates()
    return A


def _members(indices: np.ndarray, n: int) -> np.ndarray:
    """Sorted distinct values of ``indices`` (all in ``[0, n)``) by a mask: O(n + len)."""
    mask = np.zeros(n, dtype=bool)
    mask[indices] = True
    return np.flatnonzero(mask)


class DistributedLayout:
    """Ownership of subdomains and unknowns by MPI ranks and the halo-exchange plan.

    Parameters
    ----------
    decomposition : Decomposition
        The global decomposition, identical on every rank.
    comm : mpi4py communicator, optional
        Default ``MPI.COMM_WORLD``.
    A : sparse matrix, optional
        The global ``n x n`` matrix (identical on every rank) or this rank's
        owned rows (``num_owned x n``, global column indices).  Its columns
        join the ghosts, so that :meth:`local_rows` and the distributed
        matrix-vector product need no other communication.
    subdomain_ranks : array of int, optional
        Rank of every subdomain (length ``N``, values in ``[0, size)``, every
        rank at least one subdomain).  Default: contiguous blocks.
    exchange : {"neighbor", "alltoallv"}
        See :data:`EXCHANGES`.

    Raises
    ------
    ValueError
        More ranks than subdomains, a bad ``subdomain_ranks``, an ``A`` whose
        shape fits neither form.
    """

    def __init__(self, decomposition: Any, comm: Any = None, A: Any = None, *,
                 subdomain_ranks: Any = None, exchange: str = "neighbor") -> None:
        MPI = mpi()
        d = _check_decomposition(decomposition)
        check_choice("exchange", exchange, EXCHANGES)
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.decomposition = d
        self.num_dofs = n = d.num_dofs
        self.exchange = exchange
        N, P = d.num_subdomains, self.size

        # -- subdomains and unknowns to ranks
        if subdomain_ranks is None:
            if P > N:
                raise ValueError(f"{P} ranks but only {N} subdomains: every rank needs at least "
                                 "one subdomain (use more subdomains or fewer ranks)")
            subdomain_ranks = np.repeat(np.arange(P), split_sizes(N, P))
        else:
            subdomain_ranks = np.asarray(subdomain_ranks)
            if subdomain_ranks.dtype.kind not in "iu" or subdomain_ranks.shape != (N,):
                raise ValueError(f"subdomain_ranks must be an integer array of shape ({N},), got "
                                 f"dtype {subdomain_ranks.dtype} and shape {subdomain_ranks.shape}")
            subdomain_ranks = subdomain_ranks.astype(np.int64)
            if subdomain_ranks.min() < 0 or subdomain_ranks.max() >= P:
                raise ValueError(f"subdomain_ranks must lie in [0, {P})")
            empty = np.flatnonzero(np.bincount(subdomain_ranks, minlength=P) == 0)
            if empty.size:
                raise ValueError(f"subdomain_ranks gives rank {int(empty[0])} no subdomain")
        self.subdomain_ranks = subdomain_ranks
        self.local_subdomains = np.flatnonzero(subdomain_ranks == self.rank)
        if d.owner is not None:
            owner = d.owner
        else:  # the first subdomain containing each unknown: the smallest label wins
            owner = np.full(n, d.num_subdomains, dtype=np.int64)
            np.minimum.at(owner, d.indices, d._subdomain_of_entry)
        self.dof_ranks = subdomain_ranks[owner]
        self.owned = np.flatnonzero(self.dof_ranks == self.rank)
        self.num_owned = int(self.owned.size)
        self.owned_counts = np.bincount(self.dof_ranks, minlength=P).astype(np.int64)

        # -- region (union of the local subdomains) and the rows of A
        sel = np.isin(d._subdomain_of_entry, self.local_subdomains)
        self.region = _members(d.indices[sel], n)
        needed = [self.region]
        self._rows = None
        if A is not None:
            rows = self._rows = self._owned_rows(A)
            needed.append(rows.indices)
        candidates = _members(np.concatenate(needed), n)
        ghosts = candidates[self.dof_ranks[candidates] != self.rank]
        # ghosts grouped by owning rank (a stable sort keeps global order inside a rank)
        self.ghosts = ghosts[np.argsort(self.dof_ranks[ghosts], kind="stable")]
        self.num_ghosts = int(self.ghosts.size)
        self.ext_indices = np.concatenate([self.owned, self.ghosts])
        self.num_ext = int(self.ext_indices.size)
        self._ext_sorted = np.argsort(self.ext_indices, kind="stable")
        self.region_in_ext = self.ext_positions(self.region)

        # -- the plan: counts, then the requested indices, once
        self.recv_counts = np.bincount(self.dof_ranks[self.ghosts], minlength=P).astype(np.int64)
        self.send_counts = np.zeros(P, dtype=np.int64)
        self.comm.Alltoall(self.recv_counts, self.send_counts)
        self.recv_displs = np.concatenate([[0], np.cumsum(self.recv_counts)[:-1]]).astype(np.int64)
        self.send_displs = np.concatenate([[0], np.cumsum(self.send_counts)[:-1]]).astype(np.int64)
        requested = np.empty(int(self.send_counts.sum()), dtype=np.int64)
        self.comm.Alltoallv([self.ghosts, (self.recv_counts, self.recv_displs), MPI.INT64_T],
                            [requested, (self.send_counts, self.send_displs), MPI.INT64_T])
        self.send_index = np.searchsorted(self.owned, requested)
        if requested.size and (self.send_index.max() >= self.num_owned
                               or np.any(self.owned[self.send_index] != requested)):
            raise RuntimeError("inconsistent halo plan: a rank asked for an unknown this rank "
                               "does not own (the decomposition differs between ranks)")
        self.send_ranks = np.flatnonzero(self.send_counts)
        self.recv_ranks = np.flatnonzero(self.recv_counts)
        # reverse exchange: owned[send_index[k]] += received[k], as one sparse product
        self._reduce = sp.csr_matrix(
            (np.ones(requested.size), (self.send_index, np.arange(requested.size))),
            shape=(self.num_owned, requested.size))
        self._graph = None
        if exchange == "neighbor":
            self._graph = self.comm.Create_dist_graph_adjacent(
                self.recv_ranks.tolist(), self.send_ranks.tolist(), reorder=False)
        self._buffers: dict[Any, tuple[np.ndarray, np.ndarray]] = {}
        self.reset_stats()

    # -- bookkeeping ------------------------------------------------------------------------
    def reset_stats(self) -> None:
        """Zero the communication counters of :attr:`stats` (per application and set-up)."""
        #: counters of this rank: halo exchanges (forward and reverse), point-to-point
        #: messages sent, bytes sent, global reductions and the bytes each rank contributes;
        #: the ``setup_*`` keys count the one-time matrix-row exchanges and gathers of the
        #: set-up (:meth:`ghost_rows`, :meth:`allgather_rows`), never an application
        self.stats = {"exchanges": 0, "messages": 0, "bytes": 0, "reductions": 0,
                      "reduction_bytes": 0, "setup_exchanges": 0, "setup_messages": 0,
                      "setup_bytes": 0}

    #: keys of :attr:`stats` that count the applications (not the set-up)
    APPLICATION_STATS = ("exchanges", "messages", "bytes", "reductions", "reduction_bytes")

    def plan_summary(self) -> dict[str, int]:
        """Sizes of this rank's part: owned, ghosts, subdomains, neighbours, entries sent."""
        return {"rank": self.rank, "owned": self.num_owned, "ghosts": self.num_ghosts,
                "subdomains": int(self.local_subdomains.size),
                "send_neighbours": int(self.send_ranks.size),
                "recv_neighbours": int(self.recv_ranks.size),
                "send_entries": int(self.send_counts.sum()),
                "recv_entries": int(self.recv_counts.sum())}

    def ext_positions(self, global_indices: Any) -> np.ndarray:
        """Extended local positions of global unknowns (all must be owned or ghosts here)."""
        g = np.asarray(global_indices, dtype=np.int64)
        at = np.searchsorted(self.ext_indices[self._ext_sorted], g)
        at = np.minimum(at, max(self.num_ext - 1, 0))
        pos = self._ext_sorted[at] if self.num_ext else at
        if g.size and (self.num_ext == 0 or np.any(self.ext_indices[pos] != g)):
            bad = g[self.ext_indices[pos] != g] if self.num_ext else g
            raise ValueError(f"global_indices: unknown {int(bad[0])} is neither owned by rank "
                             f"{self.rank} nor one of its ghosts")
        return pos

    def _buffer(self, kind: str, width: int, dtype: np.dtype) -> np.ndarray:
        key = (kind, width, dtype.str)
        if key not in self._buffers:
            size = int(self.send_counts.sum() if kind == "send" else self.recv_counts.sum())
            self._buffers[key] = np.empty((size, width), dtype=dtype)
        return self._buffers[key]

    def _alltoallv(self, send: np.ndarray, scounts: np.ndarray, sdispls: np.ndarray,
                   recv: np.ndarray, rcounts: np.ndarray, rdispls: np.ndarray,
                   sranks: np.ndarray, rranks: np.ndarray) -> None:
        """Send ``send`` rows by destination and receive ``recv`` rows by source."""
        width = send.shape[1]
        self.stats["exchanges"] += 1
        self.stats["messages"] += int(sranks.size)
        self.stats["bytes"] += int(send.nbytes)
        if self._graph is not None:
            sc, rc = scounts[sranks] * width, rcounts[rranks] * width
            self._graph.Neighbor_alltoallv([send, (sc, sdispls[sranks] * width)],
                                           [recv, (rc, rdispls[rranks] * width)])
        else:
            self.comm.Alltoallv([send, (scounts * width, sdispls * width)],
                                [recv, (rcounts * width, rdispls * width)])

    # -- halo exchanges ---------------------------------------------------------------------
    def update_ghosts(self, x: Any, out: np.ndarray | None = None) -> np.ndarray:
        """Forward exchange: the extended vector ``[x_owned, x_ghosts]`` from the owned part.

        Parameters
        ----------
        x : array, shape (num_owned,) or (num_owned, k)
            This rank's owned entries.
        out : array, shape (num_ext,) or (num_ext, k), optional
            Where to write the extended vector (its first ``num_owned`` rows
            are overwritten with ``x``).

        Returns
        -------
        numpy.ndarray
            The extended vector, shape ``(num_ext,)`` or ``(num_ext, k)``.
        """
        x = np.asarray(x)
        if x.shape[:1] != (self.num_owned,) or x.ndim not in (1, 2):
            raise ValueError(f"x must have shape ({self.num_owned},) or ({self.num_owned}, k), "
                             f"got {x.shape}")
        x2 = x.reshape(self.num_owned, -1)
        width = x2.shape[1]
        if out is None:
            out = np.empty((self.num_ext,) + x.shape[1:], dtype=x.dtype)
        out2 = out.reshape(self.num_ext, width)
        out2[: self.num_owned] = x2
        send = self._buffer("send", width, x2.dtype)
        np.take(x2, self.send_index, axis=0, out=send)
        # the ghosts are ordered by source rank: receive straight into the tail
        recv = out2[self.num_owned:]
        if not recv.flags.c_contiguous:  # pragma: no cover - out is contiguous by construction
            recv = self._buffer("recv", width, x2.dtype)
        self._alltoallv(send, self.send_counts, self.send_displs, recv, self.recv_counts,
                        self.recv_displs, self.send_ranks, self.recv_ranks)
        if recv is not out2[self.num_owned:]:  # pragma: no cover
            out2[self.num_owned:] = recv
        return out

    def reduce_ghosts(self, y: Any, out: np.ndarray | None = None) -> np.ndarray:
        """Reverse exchange: owned part of an extended vector plus the ghost parts sent back.

        ``result[j] = y[j] + sum of y[ghost copies of j on other ranks]`` for
        every owned ``j``: the scatter-add that completes ``sum_i R_i^T y_i``
        when the local sums were formed in extended numbering.

        Parameters
        ----------
        y : array, shape (num_ext,) or (num_ext, k)
        out : array, shape (num_owned,) or (num_owned, k), optional

        Returns
        -------
        numpy.ndarray
            Shape ``(num_owned,)`` or ``(num_owned, k)``.
        """
        y = np.asarray(y)
        if y.shape[:1] != (self.num_ext,) or y.ndim not in (1, 2):
            raise ValueError(f"y must have shape ({self.num_ext},) or ({self.num_ext}, k), "
                             f"got {y.shape}")
        y2 = y.reshape(self.num_ext, -1)
        width = y2.shape[1]
        send = np.ascontiguousarray(y2[self.num_owned:])
        recv = self._buffer("send", width, y2.dtype)  # the forward send buffer's shape
        self._alltoallv(send, self.recv_counts, self.recv_displs, recv, self.send_counts,
                        self.send_displs, self.recv_ranks, self.send_ranks)
        result = y2[: self.num_owned] + self._reduce @ recv
        if out is None:
            return result.reshape((self.num_owned,) + y.shape[1:])
        out.reshape(self.num_owned, width)[...] = result
        return out

    # -- rows of A (set-up) -----------------------------------------------------------------
    def _owned_rows(self, A: Any) -> sp.csr_matrix:
        """This rank's rows of ``A`` in global numbering (``num_owned x n``)."""
        if A is None:
            if self._rows is None:
                raise ValueError("A is required: the layout was built without a matrix")
            return self._rows
        A = _csr(A)
        n = self.num_dofs
        if A.shape == (n, n):
            return A[self.owned]
        if A.shape == (self.num_owned, n):
            return A
        raise ValueError(f"A must have shape ({n}, {n}) (global) or ({self.num_owned}, {n}) "
                         f"(this rank's rows), got {A.shape}")

    def _setup_alltoallv(self, send: np.ndarray, scounts: np.ndarray, recv: np.ndarray,
                         rcounts: np.ndarray, mpi_type: Any) -> None:
        """One set-up ``Alltoallv`` of 1-D arrays (counted in the ``setup_*`` keys)."""
        sdispls = np.concatenate([[0], np.cumsum(scounts)[:-1]]).astype(np.int64)
        rdispls = np.concatenate([[0], np.cumsum(rcounts)[:-1]]).astype(np.int64)
        self.comm.Alltoallv([np.ascontiguousarray(send), (scounts, sdispls), mpi_type],
                            [recv, (rcounts, rdispls), mpi_type])
        self.stats["setup_exchanges"] += 1
        self.stats["setup_messages"] += int(np.count_nonzero(scounts))
        self.stats["setup_bytes"] += int(send.nbytes)

    def _setup_counts(self, counts: np.ndarray) -> np.ndarray:
        """How many items every rank sends this one, from how many this one sends each
        (one set-up ``Alltoall``, counted in the ``setup_*`` keys)."""
        self.stats["setup_exchanges"] += 1
        self.stats["setup_messages"] += self.size - 1
        self.stats["setup_bytes"] += int(counts.nbytes)
        return np.array(self.comm.alltoall(counts.tolist()), dtype=np.int64)

    def _send_entries(self, rows: sp.csr_matrix, take: np.ndarray, s_nnz: np.ndarray,
                      r_nnz: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The column indices and values ``take`` of ``rows`` sent ``s_nnz`` to each rank,
        and those received, ``r_nnz`` from each (two set-up ``Alltoallv``)."""
        MPI = mpi()
        cols = np.empty(int(r_nnz.sum()), dtype=np.int64)
        vals = np.empty(int(r_nnz.sum()), dtype=np.float64)
        self._setup_alltoallv(rows.indices[take].astype(np.int64), s_nnz, cols, r_nnz,
                              MPI.INT64_T)
        self._setup_alltoallv(rows.data[take].astype(np.float64), s_nnz, vals, r_nnz,
                              MPI.DOUBLE)
        return cols, vals

    @staticmethod
    def _row_entries(rows: sp.csr_matrix, local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The lengths of the rows ``local`` of ``rows`` and the positions of their entries
        in ``rows.indices`` / ``rows.data``, row after row."""
        lengths = np.diff(rows.indptr)[local].astype(np.int64)
        starts = np.repeat(rows.indptr[local].astype(np.int64), lengths)
        first = np.repeat(np.cumsum(lengths) - lengths, lengths)
        return lengths, starts + np.arange(int(lengths.sum()), dtype=np.int64) - first

    def ghost_rows(self, A: Any = None, which: Any = None) -> sp.csr_matrix:
        """The rows of ``A`` of this rank's ghosts, from their owners (a one-time exchange).

        Each rank sends, along the halo plan's pairs of ranks, the rows it owns
        that a neighbour asked for, as CSR pieces: first the flags of the
        requested ghosts travel to their owners, then the row lengths, then
        the column indices (global numbering, ``int64``) and the values
        (``float64``); four ``Alltoallv`` on the parent communicator in all,
        made once at set-up and counted in the ``setup_*`` keys of
        :attr:`stats`.  Only pairs of the plan carry data.

        Parameters
        ----------
        A : sparse matrix, optional
            This rank's owned rows (``num_owned x n``) or the global matrix;
            default the matrix given to the constructor.
        which : array of bool, shape (num_ghosts,), optional
            The ghosts whose rows are wanted (default: all).

        Returns
        -------
        scipy.sparse.csr_matrix
            ``num_ghosts x n`` in the ghost order of :attr:`ghosts`, global
            column indices; the rows not asked for are empty.
        """
        return self._ghost_rows_of(self._owned_rows(A), which, self.num_dofs)

    def _ghost_rows_of(self, rows: sp.csr_matrix, which: Any, n: int) -> sp.csr_matrix:
        """:meth:`ghost_rows` of any matrix of owned rows (``num_owned x n``, any ``n``)."""
        MPI = mpi()
        G = self.num_ghosts
        want = np.ones(G, dtype=bool) if which is None else np.asarray(which, dtype=bool)
        if want.shape != (G,):
            raise ValueError(f"which must have shape ({G},), got {want.shape}")
        # 1. the flags of the plan's ghosts travel back to their owners
        asked = np.empty(int(self.send_counts.sum()), dtype=np.int8)
        self._setup_alltoallv(want.astype(np.int8), self.recv_counts, asked, self.send_counts,
                              MPI.INT8_T)
        asked = asked.astype(bool)
        sources = np.repeat(np.arange(self.size), self.send_counts)
        send_rows = self.send_index[asked]  # owned positions, grouped by destination
        lengths, take = self._row_entries(rows, send_rows)
        n_rows = np.bincount(sources[asked], minlength=self.size).astype(np.int64)
        r_rows = np.bincount(self.dof_ranks[self.ghosts[want]],
                             minlength=self.size).astype(np.int64)
        # 2. the lengths of the rows
        r_lengths = np.empty(int(r_rows.sum()), dtype=np.int64)
        self._setup_alltoallv(lengths, n_rows, r_lengths, r_rows, MPI.INT64_T)
        # 3. the column indices and values, concatenated row after row
        s_nnz = np.bincount(sources[asked], weights=lengths, minlength=self.size).astype(np.int64)
        ghost_src = self.dof_ranks[self.ghosts[want]]
        r_nnz = np.bincount(ghost_src, weights=r_lengths, minlength=self.size).astype(np.int64)
        cols, vals = self._send_entries(rows, take, s_nnz, r_nnz)
        # the ghosts are grouped by owner, increasing inside each: the received order
        counts = np.zeros(G, dtype=np.int64)
        counts[want] = r_lengths
        indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        out = sp.csr_matrix((vals, cols, indptr), shape=(G, n))
        out.sort_indices()
        return out

    def route_rows(self, rows: np.ndarray, cols: np.ndarray, values: np.ndarray,
                   num_cols: int) -> sp.csr_matrix:
        """The entries ``(rows[m], cols[m], values[m])`` (global row indices, any rank) sent to
        the owners of their rows: this rank's owned rows of the matrix they form,
        ``num_owned x num_cols`` (duplicates summed).  Three ``Alltoallv`` and one
        ``Alltoall`` of the counts (set-up; counted in the ``setup_*`` keys of :attr:`stats`).
        """
        MPI = mpi()
        rows = np.asarray(rows, dtype=np.int64)
        dest = self.dof_ranks[rows]
        order = np.argsort(dest, kind="stable")
        scounts = np.bincount(dest, minlength=self.size).astype(np.int64)
        del dest
        rcounts = self._setup_counts(scounts)
        total = int(rcounts.sum())
        # 32-bit indices where they fit (a coarse basis routes millions of entries: the
        # buffers are the set-up's memory peak of the rank-local AGDSW)
        small = max(self.num_dofs, int(num_cols)) < 2**31
        index, index_type = (np.int32, MPI.INT32_T) if small else (np.int64, MPI.INT64_T)
        r_rows = np.empty(total, dtype=index)
        self._setup_alltoallv(rows[order].astype(index), scounts, r_rows, rcounts, index_type)
        at = np.searchsorted(self.owned, r_rows).astype(index)
        del r_rows
        r_cols = np.empty(total, dtype=index)
        self._setup_alltoallv(np.asarray(cols)[order].astype(index), scounts, r_cols, rcounts,
                              index_type)
        r_vals = np.empty(total, dtype=np.float64)
        self._setup_alltoallv(np.asarray(values, dtype=np.float64)[order], scounts, r_vals,
                              rcounts, MPI.DOUBLE)
        del order
        out = sp.coo_matrix((r_vals, (at, r_cols)), shape=(self.num_owned, int(num_cols)))
        del r_vals, at, r_cols
        out = out.tocsr()  # duplicates summed
        out.sum_duplicates()
        return out

    def fetch_rows(self, A: Any, wanted: np.ndarray) -> sp.csr_matrix:
        """The rows ``wanted`` (sorted global indices, any owners) of ``A``, from their owners.

        Collective (every rank calls it, with its own ``wanted``, possibly empty): the
        indices travel to their owners, which send the rows back as CSR pieces (row
        lengths, column indices in global numbering, values); one ``Alltoall`` of the counts
        and four ``Alltoallv`` (set-up; counted in the ``setup_*`` keys of :attr:`stats`).

        Returns
        -------
        scipy.sparse.csr_matrix
            ``len(wanted) x n``, in the order of ``wanted``.
        """
        MPI = mpi()
        rows = self._owned_rows(A)
        wanted = np.asarray(wanted, dtype=np.int64)
        dest = self.dof_ranks[wanted]
        order = np.argsort(dest, kind="stable")
        ask = np.bincount(dest, minlength=self.size).astype(np.int64)
        asked = self._setup_counts(ask)
        requests = np.empty(int(asked.sum()), dtype=np.int64)
        self._setup_alltoallv(wanted[order], ask, requests, asked, MPI.INT64_T)
        lengths, take = self._row_entries(rows, np.searchsorted(self.owned, requests))
        r_lengths = np.empty(wanted.size, dtype=np.int64)
        self._setup_alltoallv(lengths, asked, r_lengths, ask, MPI.INT64_T)
        source = np.repeat(np.arange(self.size), asked)
        s_nnz = np.bincount(source, weights=lengths, minlength=self.size).astype(np.int64)
        r_nnz = np.bincount(dest[order], weights=r_lengths,
                            minlength=self.size).astype(np.int64)
        cols, vals = self._send_entries(rows, take, s_nnz, r_nnz)
        # received in the order of the sorted destinations: back to the order of wanted
        indptr = np.concatenate([[0], np.cumsum(r_lengths)]).astype(np.int64)
        got = sp.csr_matrix((vals, cols, indptr), shape=(wanted.size, self.num_dofs))
        back = np.empty(wanted.size, dtype=np.int64)
        back[order] = np.arange(wanted.size)
        out = got[back].tocsr()
        out.sort_indices()
        return out

    def ext_rows(self, A: Any = None, which: Any = None) -> sp.csr_matrix:
        """Owned rows stacked on the ghost rows (:meth:`ghost_rows`): ``num_ext x n``."""
        return sp.vstack([self._owned_rows(A), self.ghost_rows(A, which)], format="csr")

    def allgather_rows(self, A: Any = None, select: Any = None) -> sp.csr_matrix:
        """Selected owned rows of every rank, on every rank: an ``n x n`` matrix (set-up).

        Parameters
        ----------
        A : sparse matrix, optional
            Owned rows or the global matrix; default the constructor's.
        select : array of bool, shape (num_owned,), optional
            Which of this rank's rows to contribute (default: all, which
            gathers the whole matrix on every rank).

        Returns
        -------
        scipy.sparse.csr_matrix
            ``n x n`` with the selected rows of all ranks; the other rows empty.
            Three ``Allgatherv`` (rows and lengths, columns, values), counted
            in the ``setup_*`` keys of :attr:`stats`.
        """
        MPI = mpi()
        rows = self._owned_rows(A)
        sel = np.ones(self.num_owned, dtype=bool) if select is None else np.asarray(select, bool)
        mine = rows[np.flatnonzero(sel)]
        ids = self.owned[sel]
        lengths = np.diff(mine.indptr).astype(np.int64)
        header = np.ascontiguousarray(np.stack([ids, lengths], axis=1).ravel())
        counts = np.array(self.comm.allgather(int(header.size)), dtype=np.int64)
        all_header = np.empty(int(counts.sum()), dtype=np.int64)
        self.comm.Allgatherv([header, MPI.INT64_T],
                             [all_header, (counts, np.concatenate([[0], np.cumsum(counts)[:-1]])),
                              MPI.INT64_T])
        nnz = np.array(self.comm.allgather(int(mine.nnz)), dtype=np.int64)
        ndispls = np.concatenate([[0], np.cumsum(nnz)[:-1]])
        cols = np.empty(int(nnz.sum()), dtype=np.int64)
        vals = np.empty(int(nnz.sum()), dtype=np.float64)
        self.comm.Allgatherv([np.ascontiguousarray(mine.indices, dtype=np.int64), MPI.INT64_T],
                             [cols, (nnz, ndispls), MPI.INT64_T])
        self.comm.Allgatherv([np.ascontiguousarray(mine.data, dtype=np.float64), MPI.DOUBLE],
                             [vals, (nnz, ndispls), MPI.DOUBLE])
        self.stats["setup_exchanges"] += 3
        self.stats["setup_messages"] += 3 * (self.size - 1)
        self.stats["setup_bytes"] += int(header.nbytes + 16 * mine.nnz)
        ids_all, len_all = all_header[0::2], all_header[1::2]
        row_of_entry = np.repeat(ids_all, len_all)
        out = sp.csr_matrix((vals, (row_of_entry, cols)), shape=(self.num_dofs, self.num_dofs))
        out.sum_duplicates()
        return out

    # -- reductions -------------------------------------------------------------------------
    def allreduce(self, values: Any) -> np.ndarray:
        """Sum of ``values`` over all ranks (one ``Allreduce``; counted in :attr:`stats`)."""
        MPI = mpi()
        values = np.ascontiguousarray(values)
        result = np.empty_like(values)
        self.comm.Allreduce(values, result, op=MPI.SUM)
        self.stats["reductions"] += 1
        self.stats["reduction_bytes"] += int(values.nbytes)
        return result

    def dot(self, x: Any, y: Any) -> float:
        """Global inner product of two distributed vectors (one ``Allreduce``)."""
        return float(self.allreduce(np.array([np.dot(x, y)]))[0])

    def norm(self, x: Any) -> float:
        """Global 2-norm of a distributed vector (one ``Allreduce``)."""
        return float(np.sqrt(self.dot(x, x)))

    # -- global arrays (small problems) -----------------------------------------------------
    def scatter(self, x_global: Any) -> np.ndarray:
        """This rank's owned entries of a global array present on every rank (no messages)."""
        x = np.asarray(x_global)
        if x.shape[:1] != (self.num_dofs,):
            raise ValueError(f"x_global must have {self.num_dofs} rows, got shape {x.shape}")
        return x[self.owned].copy()

    def gather(self, x_local: Any, root: int | None = None) -> np.ndarray | None:
        """The global array from every rank's owned entries (``Allgatherv`` or ``Gatherv``).

        Parameters
        ----------
        x_local : array, shape (num_owned,) or (num_owned, k)
        root : int, optional
            Only this rank receives the result (the others get None);
            default: every rank.
        """
        x = np.ascontiguousarray(x_local)
        if x.shape[:1] != (self.num_owned,):
            raise ValueError(f"x_local must have {self.num_owned} rows, got shape {x.shape}")
        width = int(np.prod(x.shape[1:], dtype=np.int64))
        counts = self.owned_counts * width
        displs = np.concatenate([[0], np.cumsum(counts)[:-1]])
        stacked = np.empty((self.num_dofs,) + x.shape[1:], dtype=x.dtype)
        if root is None:
            self.comm.Allgatherv(x, [stacked, (counts, displs)])
        else:
            self.comm.Gatherv(x, [stacked, (counts, displs)] if self.rank == root else None,
                              root=root)
            if self.rank != root:
                return None
        # ranks' blocks in rank order: the global indices grouped by rank, in order
        result = np.empty_like(stacked)
        result[np.argsort(self.dof_ranks, kind="stable")] = stacked
        return result

    # -- local pieces for the operators -----------------------------------------------------
    def local_rows(self, A: Any = None) -> sp.csr_matrix:
        """This rank's rows of ``A`` with columns in extended numbering (``num_owned x num_ext``).

        Parameters
        ----------
        A : sparse matrix, optional
            Global matrix or this rank's owned rows (as in the constructor);
            default: the matrix given to the constructor.

        Raises
        ------
        ValueError
            No matrix, or a column that is neither owned nor a ghost (give
            ``A`` to the constructor so that its columns join the ghosts).
        """
        rows = self._owned_rows(A)
        try:
            cols = self.ext_positions(rows.indices)
        except ValueError as exc:
            raise ValueError(f"A: a column of this rank's rows is not in the layout ({exc}); "
                             "build the layout with A=") from None
        # copies: sorting the extended columns in place must not reorder the caller's rows
        local = sp.csr_matrix((rows.data.copy(), cols, rows.indptr.copy()),
                              shape=(self.num_owned, self.num_ext))
        local.sort_indices()
        return local

    def local_decomposition(self) -> RegionDecomposition:
        """The rank's subdomains as a decomposition of :attr:`region` (local numbering).

        Subdomain ``k`` is global subdomain ``local_subdomains[k]``; its
        indices are positions in ``region``; the weights use the global
        multiplicity.  Cached.
        """
        if getattr(self, "_local_decomposition", None) is None:
            d = self.decomposition
            # the local subdomains' packed entries, renumbered in the region (monotone map)
            sel = np.isin(d._subdomain_of_entry, self.local_subdomains)
            self._local_decomposition = RegionDecomposition(
                np.searchsorted(self.region, d.indices[sel]), d.sizes[self.local_subdomains],
                self.region.size, d.multiplicity[self.region],
                coordinates=d.coordinates[self.region], h=d.h)
        return self._local_decomposition

    def __repr__(self) -> str:
        return (f"DistributedLayout(rank={self.rank}/{self.size}, owned={self.num_owned}, "
                f"ghosts={self.num_ghosts}, subdomains={self.local_subdomains.size}, "
                f"exchange={self.exchange!r})")
