"""Overlapping decompositions of a set of unknowns into subdomains.

A decomposition is stored as one flat, sorted index array per subdomain packed
back to back (``indices`` with ``offsets``), so that every operator built on
top of it (restriction, partition-of-unity weights, the stacked and padded
restriction used by the batched operators) is assembled in one vectorised
step, without a Python loop over subdomains.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from .._validation import check_choice, check_int, check_memory
from ..backend import asarray
from ..problems.poisson1d import KINDS, grid_points, mesh_size, num_dofs
from ._partitioning import grid_subdomains, matrix_subdomains, split_sizes

__all__ = ["Decomposition", "Decomposition1D", "split_sizes"]

#: How the rows of the stacked restriction are scaled: ``"none"`` (Boolean
#: R_i), ``"sqrt"`` (D_i^{1/2} R_i, used by Schwarz attention) or ``"full"``
#: (D_i R_i, the partition of unity).
WEIGHTINGS = ("none", "sqrt", "full")


def _packed_bytes(entries: int, num_dofs: int, num_subdomains: int) -> int:
    """Estimated peak memory of building a decomposition with ``entries`` packed indices.

    The packed arrays (indices, subdomain and position of every entry) and
    their temporaries peak at about seven int64 per entry (measured), plus the
    per-unknown multiplicity, coordinates and owner labels (and their
    temporaries) and a dozen per-subdomain arrays.
    """
    return 8 * (7 * entries + 4 * num_dofs + 12 * num_subdomains)


class Decomposition:
    """An overlapping decomposition of ``num_dofs`` unknowns.

    Parameters
    ----------
    subdomains : sequence of integer arrays
        Global indices of the unknowns of each subdomain.  They are sorted and
        must be unique within a subdomain; together they must cover every
        unknown at least once.
    num_dofs : int
        Number of unknowns.
    interface_nodes : array of int, optional
        Unknowns at which the interface hat functions peak (one per interface).
    coordinates : array of float, optional
        Coordinates of the unknowns, shape ``(num_dofs,)`` or
        ``(num_dofs, dim)``; the 1D hat coarse bases read points in (0, 1).
        Default: the uniform 1D grid ``(j + 1) / (num_dofs + 1)``.  Algebraic
        decompositions (:meth:`from_matrix`) built without coordinates hold
        that grid only as a placeholder (``has_coordinates`` is False) and the
        hat bases refuse them.
    h : float, optional
        Mesh width, used by the ``"scaled"`` initialisation (see :attr:`dim`).
        Default: ``1 / (num_dofs + 1)`` for 1D coordinates; for
        ``num_dofs x d`` coordinates with ``d >= 2`` the mean spacing
        ``(V / n_nodes)^{1/d}``, ``V`` the volume of the coordinates' bounding
        box and ``n_nodes = num_dofs / block_size`` (``1/n`` for the ``n^d``
        interior points of a grid, close to its ``h = 1/(n + 1)``, and the
        typical edge length of a quasi-uniform unstructured mesh).
    owner : array of int, optional
        The non-overlapping partition behind the subdomains: one label in
        ``[0, N)`` per unknown, and subdomain ``i`` must contain every unknown
        it owns.  Needed by the GDSW and RGDSW coarse spaces.
    shared_nodes : array of int, optional
        Unknowns shared by several parts of an element-based partition (the
        interface that GDSW classifies); None: GDSW uses the algebraic rule
        (unknowns coupled through ``A`` to another part).
    block_size : int
        Unknowns per node in interleaved vector problems (node ``k`` holds
        unknowns ``k b, ..., k b + b - 1``); coarse spaces keep them together.

    Raises
    ------
    ValueError
        Invalid subdomains (empty, repeated or out-of-range indices, an
        unknown left uncovered), or a decomposition whose arrays would not fit
        in this machine's memory (refused before allocating, with the estimate).

    Notes
    -----
    The multiplicity ``m_j`` counts the subdomains that contain unknown ``j``;
    the weights ``D_i = diag(1 / m_j)`` form the partition of unity
    ``sum_i R_i^T D_i R_i = I``.
    """

    def __init__(
        self,
        subdomains: Sequence[Any],
        num_dofs: int,
        interface_nodes: Any = None,
        coordinates: Any = None,
        h: float | None = None,
        *,
        owner: Any = None,
        shared_nodes: Any = None,
        block_size: int = 1,
    ) -> None:
        num_dofs = check_int("num_dofs", num_dofs, minimum=1)
        if len(subdomains) < 1:
            raise ValueError("subdomains must contain at least one subdomain")
        raw_arrays = [np.asarray(s) for s in subdomains]
        for i, raw in enumerate(raw_arrays):
            if raw.size and raw.dtype.kind not in "iu":
                raise TypeError(f"subdomains: subdomain {i} must hold integer indices, "
                                f"got dtype {raw.dtype}")
        entries = sum(raw.size for raw in raw_arrays)
        check_memory(f"Decomposition of {num_dofs} unknowns into {len(raw_arrays)} subdomains "
                     f"({entries} indices)", _packed_bytes(entries, min(num_dofs, entries),
                                                           len(raw_arrays)))
        arrays = [np.unique(raw.astype(np.int64).ravel()) for raw in raw_arrays]
        sizes = np.array([a.size for a in arrays], dtype=np.int64)
        if np.any(sizes == 0):
            raise ValueError(f"subdomains: subdomain {int(np.argmin(sizes))} is empty")
        for i, (raw, a) in enumerate(zip(subdomains, arrays, strict=False)):
            if np.asarray(raw).size != a.size:
                raise ValueError(f"subdomains: subdomain {i} contains repeated indices")
        indices = np.concatenate(arrays)
        self._init_from_packed(indices, sizes, num_dofs, interface_nodes, coordinates, h,
                               owner=owner, shared_nodes=shared_nodes, block_size=block_size)

    @classmethod
    def from_matrix(cls, A: Any, subdomains: int | None = None, overlap: int = 1, *,
                    partitioner: Any = "metis", coordinates: Any = None, block_size: int = 1,
                    seed: int = 0) -> Decomposition:
        """Algebraic overlapping decomposition of the unknowns of a sparse matrix.

        A non-overlapping partition (``owner``) by METIS on the graph of ``A``,
        by recursive coordinate bisection (``partitioner="rcb"`` with
        ``coordinates``) or from user labels (an integer array), then
        ``overlap`` layers of the graph of ``A`` added to every part at once.
        Without ``subdomains``, parts of about
        :data:`~ddops.dd.partition.TARGET_SUBDOMAIN_UNKNOWNS` unknowns
        (:func:`~ddops.dd.partition.default_subdomains`).
        See :func:`ddops.dd.partition.decomposition_from_matrix`.

        Examples
        --------
        >>> import ddops
        >>> A = ddops.problems.poisson_2d(32)
        >>> d = ddops.Decomposition.from_matrix(A, 16, overlap=1)
        >>> d.num_subdomains, d.owner.shape
        (16, (1024,))
        """
        return decomposition_from_matrix(A, subdomains, overlap, partitioner=partitioner,
                                         coordinates=coordinates, block_size=block_size,
                                         seed=seed)

    @classmethod
    def from_grid(cls, shape: Sequence[int], parts: Sequence[int],
                  overlap: int = 1) -> Decomposition:
        """Box decomposition of a structured 2D/3D grid (lexicographic, x fastest).

        The numbering is that of :func:`ddops.problems.poisson_2d` and
        :func:`~ddops.problems.poisson_3d`; ``overlap`` counts layers of the
        5/7-point stencil graph.  See :func:`ddops.dd.partition.decomposition_from_grid`.
        """
        return decomposition_from_grid(shape, parts, overlap)

    # The packed constructor is shared with Decomposition1D, which builds the
    # index arrays vectorised instead of from a list.
    def _init_from_packed(self, indices, sizes, num_dofs, interface_nodes, coordinates, h, *,
                          owner=None, shared_nodes=None, block_size=1, owner_checked=False,
                          coordinates_known=True):
        #: seconds of the construction by phase (``partition_seconds``, ``overlap_seconds``
        #: for :meth:`from_matrix`; empty otherwise)
        self.setup_stats: dict = {}
        if indices.size and (indices.min() < 0 or indices.max() >= num_dofs):
            raise ValueError(f"subdomains: indices must lie in [0, {num_dofs}), got "
                             f"[{indices.min()}, {indices.max()}]")
        if indices.size < num_dofs:
            # too few indices to cover: name a missing unknown without a num_dofs-sized count
            present = np.unique(indices)
            gaps = np.flatnonzero(present != np.arange(present.size))
            missing = int(gaps[0]) if gaps.size else int(present.size)
            raise ValueError(f"subdomains do not cover every unknown (index {missing} is missing)")
        self.num_dofs = int(num_dofs)
        self.indices = indices
        self.sizes = sizes
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.num_subdomains = int(sizes.size)
        self.multiplicity = np.bincount(indices, minlength=num_dofs).astype(np.int64)
        if np.any(self.multiplicity == 0):
            missing = int(np.flatnonzero(self.multiplicity == 0)[0])
            raise ValueError(f"subdomains do not cover every unknown (index {missing} is missing)")
        if interface_nodes is None:
            interface_nodes = np.empty(0, dtype=np.int64)
        self.interface_nodes = np.asarray(interface_nodes, dtype=np.int64)
        if self.interface_nodes.size and (self.interface_nodes.min() < 0
                                          or self.interface_nodes.max() >= num_dofs):
            raise ValueError(f"interface_nodes must lie in [0, {num_dofs})")
        #: Whether :attr:`coordinates` are the unknowns' points (given, or the documented
        #: uniform 1D grid of the plain constructor); False for an algebraic decomposition
        #: built without coordinates, whose placeholder points the hat bases refuse.
        self.has_coordinates = bool(coordinates_known or coordinates is not None)
        if coordinates is None:
            coordinates = np.arange(1, num_dofs + 1) / (num_dofs + 1)
        self.coordinates = np.asarray(coordinates, dtype=np.float64)
        if (self.coordinates.ndim not in (1, 2) or self.coordinates.shape[0] != num_dofs
                or (self.coordinates.ndim == 2 and self.coordinates.shape[1] < 1)):
            raise ValueError(f"coordinates must have shape ({num_dofs},) or ({num_dofs}, dim), "
                             f"got {self.coordinates.shape}")
        self.block_size = check_int("block_size", block_size, minimum=1)
        if num_dofs % self.block_size:
            raise ValueError(f"block_size={self.block_size} does not divide num_dofs={num_dofs}")
        self.shared_nodes = None if shared_nodes is None else self._check_nodes(
            "shared_nodes", shared_nodes, num_dofs)
        self.h = float(h) if h is not None else self._default_h()
        self._subdomain_of_entry = np.repeat(np.arange(self.num_subdomains), sizes)
        self._position_in_subdomain = np.arange(indices.size) - np.repeat(self.offsets[:-1], sizes)
        self._cache: dict[Any, Any] = {}
        # labels built with the subdomains (Decomposition1D) need no membership check
        self.owner = (None if owner is None
                      else np.asarray(owner, dtype=np.int64) if owner_checked
                      else self._check_owner(owner))

    def _default_h(self) -> float:
        """``1/(n + 1)`` for 1D coordinates; the mean spacing of ``d >= 2`` coordinates."""
        X = self.coordinates
        if X.ndim == 1 or X.shape[1] < 2:
            return 1.0 / (self.num_dofs + 1)
        extent = X.max(axis=0) - X.min(axis=0)
        nodes = self.num_dofs // self.block_size
        volume = float(np.prod(extent))
        if not volume > 0 or nodes < 2:  # degenerate (points on a line): the 1D rule
            return 1.0 / (self.num_dofs + 1)
        return (volume / nodes) ** (1.0 / X.shape[1])

    @property
    def dim(self) -> int:
        """Space dimension ``d`` of the coordinates (1 for a 1-D coordinate array).

        The ``"scaled"`` initialisation uses it with :attr:`h`
        (:func:`ddops.operators.init_scale`): the entries of ``A^{-1}`` for the
        ``h^-2``-scaled finite-difference Laplacian are of order ``h`` in one
        dimension and of order ``h^2`` in two and three.
        """
        return 1 if self.coordinates.ndim == 1 else int(self.coordinates.shape[1])

    @property
    def padding_overhead(self) -> float:
        """``sum_i (p - n_i) / sum_i n_i``: the padded storage of the batched blocks beyond the
        unpadded one (``p`` the largest subdomain size)."""
        return float((self.max_size * self.num_subdomains - self.sizes.sum()) / self.sizes.sum())

    @staticmethod
    def _check_nodes(name: str, nodes: Any, num_dofs: int) -> np.ndarray:
        nodes = np.asarray(nodes)
        if nodes.ndim == 1 and nodes.size == 0:  # [] is float64 to numpy: no shared nodes
            return np.zeros(0, dtype=np.int64)
        if nodes.dtype.kind not in "iu" or nodes.ndim != 1:
            raise TypeError(f"{name} must be a 1-D integer array, got dtype {nodes.dtype} "
                            f"and shape {nodes.shape}")
        nodes = np.unique(nodes.astype(np.int64))
        if nodes.size and (nodes[0] < 0 or nodes[-1] >= num_dofs):
            raise ValueError(f"{name} must lie in [0, {num_dofs})")
        return nodes

    def _check_owner(self, owner: Any) -> np.ndarray:
        """Validate the non-overlapping labels: one per unknown, each inside its subdomain."""
        owner = np.asarray(owner)
        if owner.dtype.kind not in "iu":
            raise TypeError(f"owner must hold integer labels, got dtype {owner.dtype}")
        if owner.shape != (self.num_dofs,):
            raise ValueError(f"owner must have shape ({self.num_dofs},), got {owner.shape}")
        owner = owner.astype(np.int64)
        N = self.num_subdomains
        if owner.size and (owner.min() < 0 or owner.max() >= N):
            raise ValueError(f"owner labels must lie in [0, {N}), got "
                             f"[{owner.min()}, {owner.max()}]")
        # every (owner[j], j) pair must be an entry of the packed subdomains
        entries = self._subdomain_of_entry * self.num_dofs + self.indices
        wanted = owner * self.num_dofs + np.arange(self.num_dofs)
        # the packed entries are strictly increasing (subdomain-major, sorted indices within),
        # so one binary search per unknown replaces a sort-based isin
        at = np.minimum(np.searchsorted(entries, wanted), entries.size - 1)
        outside = entries[at] != wanted
        if np.any(outside):
            j = int(np.flatnonzero(outside)[0])
            raise ValueError(f"owner: unknown {j} is owned by subdomain {owner[j]}, which does "
                             f"not contain it ({int(outside.sum())} such unknowns)")
        return owner

    # -- inspection -----------------------------------------------------------------
    @property
    def subdomains(self) -> list[np.ndarray]:
        """Sorted global indices of each subdomain (views into :attr:`indices`)."""
        return np.split(self.indices, self.offsets[1:-1])

    @property
    def subdomain_of_entry(self) -> np.ndarray:
        """Subdomain of every packed entry (``indices`` order): ``i`` repeated ``sizes[i]``
        times.  Read-only view; shared, do not modify."""
        return self._readonly(self._subdomain_of_entry)

    @property
    def position_in_subdomain(self) -> np.ndarray:
        """Position of every packed entry inside its subdomain (``indices`` order), so that
        entry ``k`` is unknown ``subdomains[subdomain_of_entry[k]][position_in_subdomain[k]]``
        and row ``subdomain_of_entry[k] * max_size + position_in_subdomain[k]`` of the
        padded blocks.  Read-only view."""
        return self._readonly(self._position_in_subdomain)

    @staticmethod
    def _readonly(a: np.ndarray) -> np.ndarray:
        view = a.view()
        view.flags.writeable = False
        return view

    @property
    def max_size(self) -> int:
        """Size of the largest subdomain (the padded block size)."""
        return int(self.sizes.max())

    def _check_subdomain(self, i: int) -> int:
        i = check_int("i", i)
        if not 0 <= i < self.num_subdomains:
            raise ValueError(f"subdomain index i must be in [0, {self.num_subdomains}), got {i}")
        return i

    def restriction(self, i: int) -> sp.csr_matrix:
        """Boolean restriction ``R_i`` (``n_i x num_dofs`` CSR) onto subdomain ``i``."""
        i = self._check_subdomain(i)
        cols = self.indices[self.offsets[i] : self.offsets[i + 1]]
        data = np.ones(cols.size, dtype=bool)
        indptr = np.arange(cols.size + 1)
        return sp.csr_matrix((data, cols, indptr), shape=(cols.size, self.num_dofs))

    def weights(self, i: int) -> np.ndarray:
        """Diagonal of the partition-of-unity weight ``D_i``: ``1 / m_j`` on subdomain ``i``."""
        i = self._check_subdomain(i)
        return 1.0 / self.multiplicity[self.indices[self.offsets[i] : self.offsets[i + 1]]]

    def entry_weights(self, weighting: str = "full") -> np.ndarray:
        """Weights of every packed entry (``indices`` order) for a weighting name."""
        check_choice("weighting", weighting, WEIGHTINGS)
        w = 1.0 / self.multiplicity[self.indices]
        return {"none": np.ones_like(w), "sqrt": np.sqrt(w), "full": w}[weighting]

    # -- batched assembly -------------------------------------------------------------
    def stacked_restriction(
        self,
        weighting: str = "none",
        padded: bool = True,
        dtype: Any = np.float64,
        backend: str = "numpy",
    ):
        """All restrictions stacked into one CSR matrix.

        Row ``i * p + l`` (``p`` the largest subdomain size, when ``padded``)
        or ``offsets[i] + l`` (unpadded) picks the ``l``-th unknown of
        subdomain ``i``, scaled according to ``weighting``.  Padding rows are
        empty, so ``(S @ F).reshape(N, p, B)`` holds every subdomain block and
        the batched products need no Python loop.  The result is cached.

        Parameters
        ----------
        weighting : {"none", "sqrt", "full"}
            Row scaling: 1, ``D_i^{1/2}`` or ``D_i``.
        padded : bool
            Pad every subdomain block to the largest size.
        dtype : numpy dtype
            Type of the stored values.
        backend : {"numpy", "cupy"}
            Where the matrix lives (scipy or cupyx CSR).
        """
        key = ("S", weighting, padded, np.dtype(dtype).str, backend)
        if key not in self._cache:
            values = self.entry_weights(weighting).astype(dtype)
            if padded:
                rows = self._padded_rows()
                num_rows = self.num_subdomains * self.max_size
            else:
                rows = np.arange(self.indices.size)
                num_rows = self.indices.size
            S = sp.csr_matrix((values, (rows, self.indices)), shape=(num_rows, self.num_dofs))
            S.sort_indices()
            self._cache[key] = asarray(S, backend=backend)
        return self._cache[key]

    def padded_gather(self) -> np.ndarray:
        """Row index of every padded position: ``(S F)[k] = w[k] * F[gather[k]]``.

        The stacked restriction has at most one entry per row, so its product
        with a block ``F`` is a row gather by this index array (the CSR's own
        column indices; padding positions read row 0, which the zero weights
        of the padding then cancel).  Length ``N p``; cached.
        """
        key = ("gather",)
        if key not in self._cache:
            gather = np.zeros(self.num_subdomains * self.max_size, dtype=np.intp)
            gather[self._padded_rows()] = self.indices
            self._cache[key] = gather
        return self._cache[key]

    def padded_weights(self, weighting: str = "none") -> np.ndarray:
        """Weight of every padded position (``entry_weights``; 0 on padding), length ``N p``."""
        w = np.zeros(self.num_subdomains * self.max_size)
        w[self._padded_rows()] = self.entry_weights(weighting)
        return w

    def scatter_plan(self) -> tuple[np.ndarray, sp.csr_matrix]:
        """How to apply ``R^T`` (the unweighted sum of the subdomain blocks) by a gather.

        Returns ``first`` and ``extra``: with ``Y`` the ``N p x B`` stacked
        blocks and ``R`` the padded stacked restriction
        (``stacked_restriction("none")``), ``R^T Y = Y[first] + extra @ Y``.
        ``Y[first]`` takes every unknown's first occurrence; ``extra`` (CSR,
        ``num_dofs x N p``, unit entries) adds the second, third, ...
        occurrences, so it holds only the overlap
        (``sum(multiplicity) - num_dofs`` entries).  Cached.
        """
        key = ("scatter",)
        if key not in self._cache:
            order = np.argsort(self.indices, kind="stable")
            source = self._padded_rows()[order]
            dofs = self.indices[order]
            start = np.concatenate([[0], np.cumsum(self.multiplicity)[:-1]])
            repeat = np.ones(order.size, dtype=bool)
            repeat[start] = False
            extra = sp.csr_matrix((np.ones(int(repeat.sum())), (dofs[repeat], source[repeat])),
                                  shape=(self.num_dofs, self.num_subdomains * self.max_size))
            extra.sort_indices()
            self._cache[key] = (source[start], extra)
        return self._cache[key]

    def _padded_rows(self) -> np.ndarray:
        """Padded position ``i * p + l`` of every packed entry."""
        return self._subdomain_of_entry * self.max_size + self._position_in_subdomain

    def padded_blocks(self, A: Any, pad_value: float = 1.0, start: int = 0,
                      stop: int | None = None) -> np.ndarray:
        """Subdomain matrices ``A_i = R_i A R_i^T`` as one ``(stop - start, p, p)`` float64 array.

        Assembled in one sparse product with the padded stacked restriction;
        the padding rows and columns of a smaller subdomain are zero except for
        ``pad_value`` on the diagonal, so batched factorisations and
        eigensolvers can treat all blocks at once.  ``start``/``stop`` select
        the subdomains ``start, ..., stop - 1`` (default all), so that callers
        can work through large decompositions in chunks of bounded memory
        (see :meth:`block_chunks`).
        """
        N, p = self.num_subdomains, self.max_size
        stop = N if stop is None else stop
        if not 0 <= start < stop <= N:
            raise ValueError(f"start and stop must satisfy 0 <= start < stop <= {N}, "
                             f"got {start} and {stop}")
        m = stop - start
        check_memory(f"the {m} padded subdomain matrices of size {p}", 8 * 3 * m * p * p,
                     "use smaller subdomains")
        S = self.stacked_restriction("none", padded=True, dtype=np.float64)[start * p:stop * p]
        C = (S @ sp.csr_matrix(A) @ S.T).tocoo()
        keep = C.row // p == C.col // p  # S A S^T also couples overlapping subdomains
        blocks = np.zeros((m, p, p))
        blocks[C.row[keep] // p, C.row[keep] % p, C.col[keep] % p] = C.data[keep]
        pad_block, pad_pos = np.nonzero(np.arange(p)[None, :] >= self.sizes[start:stop, None])
        blocks[pad_block, pad_pos, pad_pos] = pad_value
        return blocks

    def block_chunks(self, max_bytes: int = 2**28) -> list[tuple[int, int]]:
        """``(start, stop)`` ranges of subdomains whose padded ``(m, p, p)`` blocks (and an
        eigendecomposition's copies, four arrays in all) take at most ``max_bytes``."""
        N, p = self.num_subdomains, self.max_size
        per = max(1, int(max_bytes // (4 * 8 * p * p)))
        return [(a, min(a + per, N)) for a in range(0, N, per)]

    def partition_of_unity(self) -> sp.csr_matrix:
        """``sum_i R_i^T D_i R_i`` assembled as CSR (the identity, up to rounding)."""
        S = self.stacked_restriction("full", padded=False)
        R = self.stacked_restriction("none", padded=False)
        return (R.T @ S).tocsr()

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(num_dofs={self.num_dofs}, "
                f"num_subdomains={self.num_subdomains}, "
                f"sizes={self.sizes.min()}..{self.sizes.max()})")


class Decomposition1D(Decomposition):
    """Overlapping decomposition of the 1D grid of the Poisson model problem.

    Parameters
    ----------
    n : int
        Number of line elements (``kind="element"``) or interior unknowns
        (``kind="dof"``).
    subdomains : int
        Number of subdomains ``N``.
    overlap : int
        ``"element"``: line elements added on each interior side of every
        non-overlapping element block; ``"dof"``: indices added on each side
        of every disjoint index block.
    kind : {"element", "dof"}
        Convention of the newer (element) or the first (dof) paper version.

    Raises
    ------
    ValueError
        Invalid sizes (see the conventions page), or sizes whose arrays would
        not fit in this machine's memory: the peak (about 56 bytes per packed
        index, ``n + N (2 overlap + 1)`` indices) is estimated and refused
        before anything is allocated.

    Notes
    -----
    Element-based: the ``n`` elements are split into ``N`` consecutive blocks
    (sizes differing by at most one), each block is extended by ``overlap``
    elements on each interior side, and a subdomain holds every node of its
    elements except the Dirichlet nodes.  For ``n=256, N=8, overlap=2`` the
    sizes are 34, 37, ..., 37, 34.  Interface ``k`` peaks at the node between
    blocks ``k-1`` and ``k``.

    DOF-based: the ``n`` unknowns are split into ``N`` disjoint consecutive
    blocks, each enlarged by ``overlap`` indices on each side; for ``n=256,
    N=8`` the sizes are 34, 36, ..., 36, 34.  Interface ``k`` peaks at the
    larger of the two indices nearest the centre of the overlap, which is the
    first index of block ``k``.
    """

    def __init__(self, n: int, subdomains: int, overlap: int = 2, kind: str = "element") -> None:
        check_choice("kind", kind, KINDS)
        n = check_int("n", n)
        N = check_int("subdomains", subdomains)
        overlap = check_int("overlap", overlap)
        if N < 1:
            raise ValueError(f"subdomains must be >= 1, got {N}")
        if overlap < 0:
            raise ValueError(f"overlap must be >= 0, got {overlap}")
        minimum_n = 2 if kind == "element" else 1
        if n < max(N, minimum_n):
            raise ValueError(
                f"n must be >= max(subdomains, {minimum_n}) for kind={kind!r}: "
                f"got n={n}, subdomains={N}"
            )
        check_memory(f"Decomposition1D(n={n}, subdomains={N}, overlap={overlap})",
                     _packed_bytes(n + N * (2 * overlap + 1), n, N), "reduce n")
        core = split_sizes(n, N)
        if N > 1 and core.min() < overlap:
            raise ValueError(
                f"overlap={overlap} is larger than the smallest subdomain ({core.min()} "
                f"{'elements' if kind == 'element' else 'unknowns'} for n={n}, subdomains={N}); "
                "reduce overlap or subdomains"
            )
        bounds = np.concatenate([[0], np.cumsum(core)])
        lo = np.maximum(bounds[:-1] - overlap, 0)
        hi = np.minimum(bounds[1:] + overlap, n)
        if kind == "element":
            # nodes lo..hi inclusive, minus the Dirichlet nodes 0 and n; DOF = node - 1
            first = np.maximum(lo, 1) - 1
            last = np.minimum(hi, n - 1) - 1  # inclusive
            stop = last + 1
            interface = bounds[1:-1] - 1
        else:
            first, stop = lo, hi
            interface = bounds[1:-1]
        sizes = (stop - first).astype(np.int64)
        if np.any(sizes < 1):
            raise ValueError(f"n={n} with subdomains={N} leaves a subdomain without unknowns")
        # concatenated aranges, vectorised: first[i] + position within block i
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        indices = np.arange(offsets[-1]) - np.repeat(offsets[:-1] - first, sizes)
        self.n = n
        self.kind = kind
        self.overlap = overlap
        self.core_bounds = bounds
        # owner: the core block of each unknown; an element-based interface node (between
        # blocks k-1 and k) goes to block k, and the interface nodes are the shared nodes
        unknowns = np.arange(1, n) if kind == "element" else np.arange(n)
        owner = np.searchsorted(bounds, unknowns, side="right") - 1
        self._init_from_packed(
            indices.astype(np.int64), sizes, num_dofs(n, kind), interface,
            grid_points(n, kind), mesh_size(n, kind),
            owner=np.minimum(owner, N - 1), owner_checked=True,
            shared_nodes=interface if kind == "element" else None,
        )

    def __repr__(self) -> str:
        return (f"Decomposition1D(n={self.n}, subdomains={self.num_subdomains}, "
                f"overlap={self.overlap}, kind={self.kind!r})")


# -- builders from index arrays ----------------------------------------------------------------
# Public in ddops.dd.partition (and documented there); defined here, next to the class, so
# that Decomposition.from_matrix and from_grid use them without importing that module.
def _decomposition(indices: np.ndarray, sizes: np.ndarray, owner: np.ndarray,
                   points: np.ndarray | None, h: float | None = None,
                   block_size: int = 1) -> Decomposition:
    """A :class:`Decomposition` from packed indices, with the ``owner`` labels attached."""
    d = Decomposition.__new__(Decomposition)
    d._init_from_packed(indices, sizes, owner.shape[0], None, points, h, owner=owner,
                        block_size=block_size, coordinates_known=points is not None)
    return d


def decomposition_from_labels(indices: np.ndarray, sizes: np.ndarray, owner: Any, *,
                              coordinates: Any = None, h: float | None = None,
                              block_size: int = 1) -> Decomposition:
    """A :class:`Decomposition` from the output of :func:`grow_overlap` and its labels.

    The last step of :func:`decomposition_from_matrix`, public so that a caller
    can time the partition and the overlap growth separately.

    Parameters
    ----------
    indices, sizes : arrays of int
        Packed subdomains, as returned by :func:`grow_overlap`.
    owner : array of int
        The non-overlapping labels (one per unknown) the overlap was grown from.
    coordinates : array, optional
        ``n`` or ``n x d`` coordinates of the unknowns.
    h : float, optional
        Mesh width (default ``1 / (n + 1)``).
    block_size : int
        Unknowns per node.
    """
    owner = np.asarray(owner)
    return _decomposition(np.asarray(indices, dtype=np.int64), np.asarray(sizes, dtype=np.int64),
                          owner, coordinates, h, block_size)


def decomposition_from_matrix(A: Any, subdomains: int | None = None, overlap: int = 1, *,
                              partitioner: Any = "metis", coordinates: Any = None,
                              block_size: int = 1, seed: int = 0) -> Decomposition:
    """Algebraic overlapping decomposition of the unknowns of a sparse matrix.

    :func:`partition` into ``subdomains`` parts, then :func:`grow_overlap` by
    ``overlap`` layers of the graph of ``A``.

    Parameters
    ----------
    A : sparse matrix or 2D array
        Square matrix (typically SPD) of the problem.
    subdomains : int, optional
        Number of subdomains ``N``; default :func:`default_subdomains` (parts of about
        :data:`TARGET_SUBDOMAIN_UNKNOWNS` unknowns).
    overlap : int
        Layers of the graph added to every part, ``>= 0``.
    partitioner, coordinates, block_size, seed
        As in :func:`partition`.

    Returns
    -------
    Decomposition
        With the non-overlapping labels as ``owner`` (one per unknown), and
        ``coordinates`` per unknown when given (``n`` or ``n x d``).
    """
    timings: dict = {}
    indices, sizes, owner, points, b = matrix_subdomains(
        A, subdomains, overlap, partitioner=partitioner, coordinates=coordinates,
        block_size=block_size, seed=seed, timings=timings)
    d = _decomposition(indices, sizes, owner, points, block_size=b)
    d.setup_stats = timings
    return d


def decomposition_from_grid(shape: Sequence[int], parts: Sequence[int],
                            overlap: int = 1) -> Decomposition:
    """Overlapping box decomposition of a structured 2D/3D grid.

    The boxes of :func:`grid_partition` grown by ``overlap`` layers of the
    grid graph (:func:`grid_graph`, the 5/7-point stencil), the same as
    :func:`decomposition_from_matrix` on the finite-difference Laplacian with
    the box labels.

    Parameters
    ----------
    shape : sequence of int
        Points per direction; lexicographic numbering, x fastest.
    parts : sequence of int
        Boxes per direction.
    overlap : int
        Grid graph layers added to every box, ``>= 0``.

    Returns
    -------
    Decomposition
        With ``owner`` (the box of every point), ``coordinates`` (``n x d``
        grid points ``(i + 1) / (n_k + 1)`` of the unit square/cube) and ``h``
        the largest mesh width ``1 / (min(shape) + 1)``.
    """
    indices, sizes, owner, points, h = grid_subdomains(shape, parts, overlap)
    return _decomposition(indices, sizes, owner, points, h=h)
