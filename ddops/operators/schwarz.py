"""Schwarz attention and the global low-rank baseline as linear operators.

Both operators keep every trainable factor in one flat parameter vector
(:attr:`LowRankOperator.theta`); the factors are views into it.  The
optimisers update that single vector in place, so a training step is a
handful of large array operations however many subdomains there are.

The local blocks of :class:`SchwarzOperator` are stored padded to the largest
subdomain size ``p`` as ``(N, p, r)`` arrays.  The stacked restriction
``S = [R_1; ...; R_N]`` (CSR, padding rows empty) has one entry per row, so
``S F`` is a row gather by its index array, and the partition-of-unity
weights ``W_in, W_out`` (``D^{1/2}``, ``D`` or ``1``, zero on padding) are
applied to the ``(N, p, r)`` factors instead of the ``n x B`` blocks.  The
coarse basis enters the same blocks: every unknown is owned by one
subdomain, and the owned rows of ``Phi`` (``c`` nonzero columns per
subdomain, see :func:`ddops.dd.coarse.subdomain_blocks`) extend the factors to
``r + c`` columns.  One application is::

    X = F[gather].reshape(N, p, B)                  # every subdomain at once
    Z = [W_in K, Phi_loc]^T @ X                     # (N, r + c, B): T and Phi^T F pieces
    C = collect @ Z;  Yc = Q0 (K0^T C)              # coarse space, n0 x B
    Y = [W_out Q, Phi_loc] @ [Z[:, :r]; Yc[index]]  # batched GEMMs
    M F = S^T Y = Y[first] + overlap @ Y            # one gather back

Padding rows have zero weight, so they contribute nothing and receive zero
gradient.

Subdomains of very different sizes (many small METIS parts) would waste
memory in one padded block: above a padding overhead of
:data:`PADDING_LIMIT` the subdomains are stored in a few groups of similar
size (:func:`padding_groups`, at most :data:`MAX_PADDING_GROUPS`), each padded
to its own largest size; the factors are then ``(sum_g N_g p_g, r)`` arrays
and every batched product above runs once per group (a loop over a handful
of groups, not over subdomains).  One group is exactly the layout above.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator

from .._validation import check_choice, check_dtype, check_finite, check_int, check_memory, warn
from ..backend import asarray, check_backend, spmm, take_rows, to_numpy
from ..dd.coarse import (
    MATRIX_COARSE_BASES,
    column_rank,
    resolve_coarse_kind,
    subdomain_blocks,
    validate_coarse_matrix,
)
from ..dd.coarse import coarse_basis as build_coarse_basis
from ..dd.decomposition import Decomposition
from .linop import BackendLinearOperator
from .lowrank import INITS, LowRankOperator, init_scale

__all__ = ["MAX_PADDING_GROUPS", "NULL_SPACE_BASES", "PADDING_LIMIT", "PADDING_TARGET",
           "PARTITIONS", "SchwarzOperator", "padding_groups"]

#: Named coarse bases that take a ``null_space``.
NULL_SPACE_BASES = ("pou", "nicolaides", *MATRIX_COARSE_BASES)

#: Partition-of-unity placements ``name -> (input-side, output-side weighting)``:
#: ``"symmetric"`` is the paper's ``R_i^T D_i^{1/2} Q_i K_i^T D_i^{1/2} R_i``,
#: ``"left"`` puts all of ``D_i`` on the output side (``R_i^T D_i Q_i K_i^T R_i``)
#: and ``"none"`` drops it (``R_i^T Q_i K_i^T R_i``).
PARTITIONS = {"symmetric": ("sqrt", "sqrt"), "left": ("none", "full"), "none": ("none", "none")}



#: ``padding_groups="auto"`` keeps one padded group up to this padding overhead.
PADDING_LIMIT = 0.25
#: ... and otherwise takes the fewest groups that bring it to this overhead ...
PADDING_TARGET = 0.10
#: ... with at most this many groups.
MAX_PADDING_GROUPS = 4


def padding_groups(sizes: Any, groups: int) -> list[np.ndarray]:
    """Split subdomains into at most ``groups`` groups of consecutive sizes, minimising padding.

    Each group is padded to its largest size, so the padded storage is
    ``sum_g N_g p_g``; the split that minimises it over the sorted sizes is
    found by dynamic programming over the ``m`` distinct sizes
    (``O(groups m^2)`` operations, ``O(m)`` memory; set-up only).

    Parameters
    ----------
    sizes : array of int
        Subdomain sizes ``n_i``.
    groups : int
        Largest number of groups (fewer when fewer suffice or there are fewer
        distinct sizes).

    Returns
    -------
    list of numpy.ndarray
        The subdomain indices of each group, increasing within a group; the
        groups by increasing size.
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    values, counts = np.unique(sizes, return_counts=True)
    m = values.size
    G = max(1, min(int(groups), m))
    below = np.concatenate([[0], np.cumsum(counts)])  # subdomains with a size below values[j]
    # best[i]: least padded size of the values 0..i in the groups allowed so far
    best = below[1:] * values.astype(np.float64)
    choice = []
    for _ in range(1, G):
        new, start = best.copy(), np.full(m, -1)
        for i in range(1, m):  # the last group holds the values j..i, j >= 1
            total = best[: i] + (below[i + 1] - below[1: i + 1]) * values[i]
            j = int(np.argmin(total))
            if total[j] < new[i]:
                new[i], start[i] = total[j], j + 1
        choice.append(start)
        best = new
    bounds, i = [], m - 1
    for level in range(G - 2, -2, -1):  # walk back; level -1 is the first group
        j = 0 if level < 0 else int(choice[level][i])
        if j < 0:
            continue  # this level added no group for the values 0..i
        bounds.append((j, i))
        i = j - 1
        if i < 0:
            break
    return [np.flatnonzero((sizes >= values[j]) & (sizes <= values[i]))
            for j, i in sorted(bounds)]


def _schwarz_bytes(rows: int, entries: int, r: int, n0: int, r0: int, factors: int,
                   itemsize: int) -> int:
    """Estimated peak memory of building a :class:`SchwarzOperator` (coarse blocks aside).

    The flat parameter vector, the float64 draws of every factor before they
    are written, the padded gather index and weights, and the scatter plan
    (``rows`` padded rows in all).  The coarse blocks are checked where they
    are built (:func:`ddops.dd.coarse.subdomain_blocks`).
    """
    theta = itemsize * factors * (rows * r + n0 * r0)
    draws = 8 * factors * (entries * r + n0 * r0)
    padded = rows * (8 + 2 * itemsize)
    plan = 8 * 8 * entries
    return theta + draws + padded + plan


class SchwarzOperator(LowRankOperator):
    r"""Two-level overlapping Schwarz attention.

    .. math::

        M = \Phi Q_0 K_0^T \Phi^T
            + \sum_{i=1}^N R_i^T D_i^{1/2} Q_i K_i^T D_i^{1/2} R_i

    Parameters
    ----------
    decomposition : Decomposition
        Overlapping decomposition of the unknowns (``R_i``, ``D_i``).
    local_rank : int
        Rank ``r`` of every local block ``Q_i K_i^T`` (``Q_i, K_i`` are
        ``n_i x r``).  A value above the largest subdomain size
        ``p = max n_i`` is truncated to ``p`` with a warning, like
        ``coarse_rank``: ``Q_i K_i^T`` has rank at most ``n_i``, so further
        columns would only add redundant parameters (and memory).
        :attr:`requested_local_rank` keeps the value asked for.
    coarse_rank : int, optional
        Rank ``r0`` of the coarse block; ``None`` means ``n0``.  A value above
        ``n0`` is truncated to ``n0`` with a warning, as in the paper.
    coarse_basis : str, sparse matrix, array or None
        ``"auto"`` (default, :func:`ddops.dd.coarse.auto_coarse_basis`: the paper's
        interface hats on 1D decompositions, GDSW when ``A`` is given and the
        decomposition has an ``owner``, else Nicolaides), a name from
        :data:`ddops.dd.coarse.ALL_COARSE_BASES` (the matrix bases are built from
        the matrix: pass ``A``), a user-supplied
        ``num_dofs x n0`` matrix Phi (for example
        ``ddops.coarse_basis(d, "gdsw", A=A)``), or ``None`` for a one-level
        operator.  Any decomposition works (1D, grid boxes, METIS parts of
        unstructured meshes); the hat bases need 1D coordinates, GDSW and
        RGDSW the non-overlapping ``decomposition.owner``.
    coarse_size : int, optional
        Number of coarse functions for ``coarse_basis="grid_hats"``.
    init : {"scaled", "naive"}
        Random initialisation, see :data:`INITS`.
    seed : int
        Seed of the numpy generator that draws the factors (drawn on the
        host, so both backends start from identical parameters).
    dtype : {numpy.float64, numpy.float32}
        Floating-point type of parameters and products.
    backend : {"numpy", "cupy"}
        Where arrays and sparse matrices live.
    partition : {"symmetric", "left", "none"}
        Where the partition-of-unity weight goes, see :data:`PARTITIONS`.
    tied : bool
        Symmetric variant with ``K_i = Q_i`` and ``K0 = Q0``: every term is
        positive semidefinite and the parameters are ``{"Q", "Q0"}`` only.
        Needs a symmetric ``partition``.
    base : LinearOperator or sparse matrix, optional
        A fixed (not trained) operator added to ``M``, for example an SPD
        matrix that makes a tied operator positive definite.  It must accept
        ``matmat``/``rmatmat`` (or ``@``) on the operator's backend.
    padding_groups : "auto" or int
        The local blocks are stored padded to a common size, in a few groups
        of subdomains of similar size (each group padded to its own largest
        size ``p_g``; the batched products loop over the groups, never over
        subdomains).  ``"auto"`` (default): one group (the layout of earlier
        releases) when the padding overhead ``sum_i (p - n_i) / sum_i n_i``
        (:attr:`ddops.Decomposition.padding_overhead`) is at most
        :data:`PADDING_LIMIT`, else the fewest groups, at most
        :data:`MAX_PADDING_GROUPS`, whose overhead is at most
        :data:`PADDING_TARGET` (or the best four).  An integer asks for that
        many groups (chosen to minimise the padded size ``sum_g N_g p_g``).
    A : sparse matrix, optional
        The SPD matrix that the matrix coarse bases (``"gdsw"``, ``"rgdsw"``,
        ``"agdsw"``, ``"geneo"``) are built from (:func:`ddops.dd.coarse.coarse_basis`);
        accepted and not used with the other bases.  It is not kept: the operator
        stores the built basis (and saves it).
    null_space : array (num_dofs x k), optional
        Null space for ``coarse_basis`` in ``"nicolaides"``, ``"pou"`` and the
        matrix bases (constants by default; rigid body modes for elasticity);
        accepted and not used with the hat bases.

    Raises
    ------
    ValueError
        Invalid arguments, or parameters whose arrays would not fit in this
        machine's memory (estimated from ``N``, ``p``, ``r``, ``n0`` and
        ``r0`` and refused before anything is allocated; a large coarse space
        with the default ``coarse_rank = n0`` costs ``O(n0^2)``).
    """

    PARTS = ("full", "local", "coarse")

    def __init__(
        self,
        decomposition: Decomposition,
        local_rank: int = 4,
        coarse_rank: int | None = None,
        coarse_basis: Any = "auto",
        coarse_size: int | None = None,
        init: str = "scaled",
        seed: int = 0,
        dtype: Any = np.float64,
        backend: str = "numpy",
        partition: str = "symmetric",
        tied: bool = False,
        base: Any = None,
        *,
        padding_groups: Any = "auto",
        A: Any = None,
        null_space: Any = None,
    ) -> None:
        if not isinstance(decomposition, Decomposition):
            raise TypeError("decomposition must be a ddops Decomposition, got "
                            f"{type(decomposition).__name__}")
        d = self.decomposition = decomposition
        self.requested_local_rank = check_int("local_rank", local_rank, minimum=1)
        self.local_rank = self.requested_local_rank
        if self.local_rank > d.max_size:
            warn(f"local_rank={self.local_rank} exceeds the largest subdomain size "
                 f"p={d.max_size}; truncated to {d.max_size}")
            self.local_rank = d.max_size
        check_choice("init", init, INITS)
        seed = check_int("seed", seed, minimum=0)
        if isinstance(padding_groups, str):
            check_choice("padding_groups", padding_groups, ("auto",))
        else:
            check_int("padding_groups", padding_groups, minimum=1)
        check_backend(backend)
        dt = check_dtype(dtype)

        # coarse space
        if coarse_size is not None and not (isinstance(coarse_basis, str)
                                            and coarse_basis == "grid_hats"):
            raise ValueError("coarse_size is only used with coarse_basis='grid_hats'")
        named = isinstance(coarse_basis, str)
        # A and null_space are problem data: accepted whatever the coarse basis, used where
        # it is built from them (as by ddops.coarse_basis)
        coarse_basis = resolve_coarse_kind(coarse_basis, d, matrix=A is not None)
        if coarse_basis is None:
            Phi = None
        elif named:
            if coarse_basis in MATRIX_COARSE_BASES and A is None:
                raise ValueError(
                    f"coarse_basis={coarse_basis!r} is built from the matrix A: pass A=A, or the "
                    f"built basis, coarse_basis=ddops.coarse_basis(d, {coarse_basis!r}, A=A)")
            Phi = build_coarse_basis(d, coarse_basis, size=coarse_size, A=A,
                                     null_space=null_space)
        else:
            Phi = validate_coarse_matrix(coarse_basis, d.num_dofs)
        #: Whether the coarse basis is more than its name (user matrix, built from ``A``, or
        #: with a null space): then it is saved with the operator.
        self.stores_coarse_matrix = Phi is not None and (
            not named or coarse_basis in MATRIX_COARSE_BASES
            or (null_space is not None and coarse_basis in NULL_SPACE_BASES))
        self.coarse_basis_name = coarse_basis if isinstance(coarse_basis, str) else (
            None if coarse_basis is None else "custom")
        n0 = 0 if Phi is None else Phi.shape[1]
        if Phi is None:
            if coarse_rank not in (None, 0):
                raise ValueError("coarse_rank must be None or 0 without a coarse basis")
            r0 = 0
        elif coarse_rank is None:
            r0 = n0
        else:
            r0 = check_int("coarse_rank", coarse_rank, minimum=1)
            if r0 > n0:
                warn(f"coarse_rank={r0} exceeds the coarse dimension n0={n0}; "
                     f"truncated to {n0}")
                r0 = n0
        self.requested_coarse_rank = coarse_rank
        self.coarse_rank = r0
        self.coarse_dim = n0
        self._phi_host = Phi

        check_choice("partition", partition, PARTITIONS)
        if not isinstance(tied, bool):
            raise TypeError(f"tied must be a bool, got {type(tied).__name__}")
        if tied and partition == "left":
            raise ValueError("tied=True needs a symmetric partition ('symmetric' or 'none')")
        self.tied = tied
        self.base = _check_base(base, d.num_dofs, backend, check_dtype(dtype))
        N, p, r = d.num_subdomains, d.max_size, self.local_rank
        self._plan_groups(padding_groups)
        rows = self._rows
        local = (N, p, r) if self.padding_groups == 1 else (rows, r)
        self._layout = {"Q": local, "Q0": (n0, r0)} if tied else {
            "Q": local, "K": local, "Q0": (n0, r0), "K0": (n0, r0)}
        check_memory(f"SchwarzOperator(local_rank={r}, coarse_rank={r0}) on {N} subdomains of "
                     f"up to {p} unknowns with n0={n0}",
                     _schwarz_bytes(rows, int(d.indices.size), r, n0, r0, 1 if tied else 2,
                                    dt.itemsize), "reduce local_rank or coarse_rank")
        super().__init__(d.num_dofs, dt, backend)

        # Restriction and scatter by row gathers (the stacked CSR has one entry per
        # row); the weights multiply the padded factors, not the n x B blocks.
        self.partition = partition
        w_in, w_out = PARTITIONS[partition]
        xp = self.xp
        grouped = self.padding_groups > 1
        self._gather = xp.asarray(self._padded_gather() if grouped else d.padded_gather())
        first, extra = self._scatter_plan() if grouped else d.scatter_plan()
        self._first = xp.asarray(first)
        self._extra = asarray(extra, backend=backend, dtype=dt)
        self._w = {side: xp.asarray(self._padded_weights(w).reshape(self._padded_shape(1)),
                                    dtype=dt)
                   for side, w in (("in", w_in), ("out", w_out))}
        # The coarse space goes through the same blocks: the rows of Phi owned by each
        # subdomain become c extra columns of its factors (Phi^T F = sum_i Phi_i^T R_i F),
        # so restriction and interpolation cost no pass over the n x B block of their own.
        self._width = r
        if self.coarse_rank > 0:
            blocks, index, collect = subdomain_blocks(d, Phi, extra_columns=r)
            c = blocks.shape[2]
            if grouped:  # the padded rows and the subdomain order of the groups
                flat = np.zeros((rows, c))
                flat[self._entry_rows] = blocks[d._subdomain_of_entry, d._position_in_subdomain]
                blocks, index = flat, index[self._order]
                width = r + c
                columns = (self._order[:, None] * width + np.arange(width)).reshape(-1)
                collect = sp.csr_matrix(collect[:, columns])
            self._coarse_block = xp.asarray(blocks, dtype=dt)
            self._coarse_index = xp.asarray(index.reshape(-1))
            self._coarse_collect = asarray(collect, backend=backend, dtype=dt)
            self._width = r + c

        self._draw_initial_factors(init, seed)
        self.init = init
        self.seed = seed

    def _draw_initial_factors(self, init: str, seed: int) -> None:
        """Draw the factors: unpadded entries in the order Q, K, Q0, K0 (K, K0 untied)."""
        d, r = self.decomposition, self.local_rank
        n0, r0 = self.coarse_dim, self.coarse_rank
        rng = np.random.default_rng(seed)
        s_loc = init_scale(init, d.h, r, d.dim)
        s0 = init_scale(init, d.h, max(r0, 1), d.dim)
        params = {}
        for key in self._keys(local=True):
            params[key] = self._draw(rng, (d.indices.size, r), s_loc)
        for key in self._keys(local=False):
            view = self.params[key]
            if self.xp is np and self.dtype == np.float64:  # O(N^2) at r0 = N - 1: in place
                rng.standard_normal(out=view)
                view *= s0
                params[key] = view
            else:
                params[key] = self._draw(rng, (n0, r0), s0)
        self._write_packed(self.params, params)

    # -- padded groups -----------------------------------------------------------------
    def _plan_groups(self, requested: Any) -> None:
        """Choose the padded groups and the padded row of every packed entry.

        One group is the layout of earlier releases (row ``i p + l``); with
        several, the subdomains are stored group by group (:attr:`_order`)
        and group ``g`` occupies rows ``[start_g, start_g + N_g p_g)``.
        """
        d = self.decomposition
        N, p = d.num_subdomains, d.max_size
        if isinstance(requested, str):
            check_choice("padding_groups", requested, ("auto",))
            groups = [np.arange(N)]
            if d.padding_overhead > PADDING_LIMIT:
                for G in range(2, MAX_PADDING_GROUPS + 1):
                    groups = padding_groups(d.sizes, G)
                    rows = sum(len(g) * int(d.sizes[g].max()) for g in groups)
                    if rows <= (1 + PADDING_TARGET) * d.sizes.sum():
                        break
        else:
            groups = padding_groups(d.sizes, check_int("padding_groups", requested, minimum=1))
        self.requested_padding_groups = requested
        #: Number of padded groups of subdomains (1: one ``(N, p, r)`` block).
        self.padding_groups = len(groups)
        if self.padding_groups == 1:
            self._order = np.arange(N)
            self._groups = [(0, N * p, 0, N, p)]
            self._rows = N * p
            self._entry_rows = d._padded_rows()
            return
        self._order = np.concatenate(groups)
        plan, row, first = [], 0, 0
        start_of = np.empty(N, dtype=np.int64)  # first padded row of every subdomain
        for g in groups:
            pg = int(d.sizes[g].max())
            plan.append((row, row + len(g) * pg, first, first + len(g), pg))
            start_of[g] = row + pg * np.arange(len(g))
            row += len(g) * pg
            first += len(g)
        self._groups = plan
        self._rows = row
        self._entry_rows = start_of[d._subdomain_of_entry] + d._position_in_subdomain
        # the subdomain of every padded row (padding too), for per-subdomain scales
        self._row_subdomain = np.concatenate(
            [np.repeat(g, int(d.sizes[g].max())) for g in groups])

    @property
    def entry_rows(self) -> np.ndarray:
        """Row of every packed entry (``decomposition.indices`` order) in the flat local
        storage ``params["Q"].reshape(-1, local_rank)`` (padding rows hold zeros)."""
        return self._entry_rows

    @property
    def padded_rows(self) -> int:
        """Rows of the padded local storage: ``sum_g N_g p_g`` (``N p`` for one group)."""
        return self._rows

    def _padded_shape(self, width: int) -> tuple[int, ...]:
        """Shape of a padded per-row array: ``(N, p, width)`` for one group, else flat."""
        if self.padding_groups == 1:
            d = self.decomposition
            return (d.num_subdomains, d.max_size, width)
        return (self._rows, width)

    def _padded_gather(self) -> np.ndarray:
        gather = np.zeros(self._rows, dtype=np.intp)
        gather[self._entry_rows] = self.decomposition.indices
        return gather

    def _padded_weights(self, weighting: str) -> np.ndarray:
        if self.padding_groups == 1:
            return self.decomposition.padded_weights(weighting)
        w = np.zeros(self._rows)
        w[self._entry_rows] = self.decomposition.entry_weights(weighting)
        return w

    def _scatter_plan(self) -> tuple[np.ndarray, sp.csr_matrix]:
        """:meth:`ddops.Decomposition.scatter_plan` for the grouped padded rows."""
        d = self.decomposition
        order = np.argsort(d.indices, kind="stable")
        source = self._entry_rows[order]
        dofs = d.indices[order]
        start = np.concatenate([[0], np.cumsum(d.multiplicity)[:-1]])
        repeat = np.ones(order.size, dtype=bool)
        repeat[start] = False
        extra = sp.csr_matrix((np.ones(int(repeat.sum())), (dofs[repeat], source[repeat])),
                              shape=(d.num_dofs, self._rows))
        extra.sort_indices()
        return source[start], extra

    def _group_views(self, X: Any, width: int | None = None) -> list[Any]:
        """``(N_g, p_g, .)`` views of a padded array (rows first) for every group."""
        if self.padding_groups == 1:
            return [X.reshape(self._padded_shape(X.shape[-1] if width is None else width))]
        flat = X.reshape(self._rows, -1)
        return [flat[a:b].reshape(m1 - m0, pg, flat.shape[1])
                for a, b, m0, m1, pg in self._groups]

    def _bmm(self, left: list[Any], right: list[Any], out: Any, transpose: bool = False,
             rows: bool = True) -> Any:
        """Batched products group by group, into ``out`` (padded rows or ``(N, ., B)``)."""
        xp = self.xp
        if self.padding_groups == 1:
            a = left[0].transpose(0, 2, 1) if transpose else left[0]
            return xp.matmul(a, right[0], out=out)
        for k, (_, _, m0, m1, _) in enumerate(self._groups):
            a = left[k].transpose(0, 2, 1) if transpose else left[k]
            target = self._group_views(out)[k] if rows else out[m0:m1]
            xp.matmul(a, right[k], out=target)
        return out

    # -- layout helpers ----------------------------------------------------------------
    def _keys(self, local: bool) -> tuple[str, ...]:
        """Names of the stored local (or coarse) factors."""
        names = ("Q", "K") if local else ("Q0", "K0")
        return names[:1] if self.tied else names

    def _factors(self) -> dict[str, Any]:
        """Views of Q, K, Q0, K0 (K is Q and K0 is Q0 when tied)."""
        v = self.params
        if self.tied:
            return {"Q": v["Q"], "K": v["Q"], "Q0": v["Q0"], "K0": v["Q0"]}
        return v

    def _pad_rows(self) -> tuple[np.ndarray, ...]:
        """Index of the packed entries (``indices`` order) in a stored local factor.

        ``(subdomain, position)`` for one group (``Q[sub, pos]``), ``(row,)``
        into the ``(rows, r)`` storage of several.
        """
        d = self.decomposition
        if self.padding_groups == 1:
            return d._subdomain_of_entry, d._position_in_subdomain
        return (self._entry_rows,)

    def padded_subdomain_scale(self, values: Any) -> np.ndarray:
        """Broadcast one value per subdomain to the stored local layout (padding included).

        Returns a host array of shape ``(N, p, 1)`` for one group, ``(rows, 1)``
        for several; the value of a padding row is its subdomain's.
        """
        values = np.asarray(values, dtype=np.float64)
        if self.padding_groups == 1:
            return values[:, None, None] * np.ones((1, self.decomposition.max_size, 1))
        return values[self._row_subdomain][:, None]

    def _write_packed(self, views: dict[str, Any], packed: dict[str, np.ndarray]) -> None:
        """Write unpadded stacked ``(sum n_i, r)`` Q/K blocks and the coarse factors."""
        where = self._pad_rows()
        xp = self.xp
        if xp is not np:  # device index arrays: one scatter per factor on the GPU
            where = tuple(xp.asarray(a) for a in where)
        for key in self._keys(local=True):
            views[key][...] = 0
            views[key][where] = xp.asarray(packed[key], dtype=self.dtype)
        for key in self._keys(local=False):
            if packed[key] is not views[key]:
                views[key][...] = xp.asarray(packed[key], dtype=self.dtype)

    def _param_shapes(self) -> dict[str, Any]:
        sizes = self.decomposition.sizes
        r, n0, r0 = self.local_rank, self.coarse_dim, self.coarse_rank
        shapes: dict[str, Any] = {k: [(int(s), r) for s in sizes] for k in self._keys(True)}
        shapes.update({k: (n0, r0) for k in self._keys(False)})
        return shapes

    def _write(self, views: dict[str, Any], params: dict[str, Any]) -> None:
        packed = {k: (np.concatenate(params[k]) if k in self._keys(True) else params[k])
                  for k in params}
        self._write_packed(views, packed)

    def unflatten(self, flat: Any) -> dict[str, Any]:
        views = self._views(flat)
        where = self._pad_rows()
        offsets = self.decomposition.offsets[1:-1]
        out: dict[str, Any] = {}
        for key in self._keys(local=True):
            stacked = to_numpy(views[key])[where]
            out[key] = np.split(stacked, offsets)
        for key in self._keys(local=False):
            out[key] = to_numpy(views[key]).copy()
        return out

    @property
    def num_params(self) -> int:
        d = self.decomposition
        factors = 1 if self.tied else 2
        local = self.local_rank * d.indices.size
        return int(factors * (local + self.coarse_dim * self.coarse_rank))

    @property
    def width(self) -> int:
        """Columns of each subdomain's extended factor ``[W K_i | Phi_i]``: ``local_rank``
        plus the coarse columns ``c``, the most coarse functions that touch one subdomain
        (``local_rank`` alone without a coarse term).  Restriction and interpolation of the
        coarse space ride on these ``c`` extra columns of the batched local products."""
        return self._width

    @property
    def coarse_collect(self) -> Any:
        """The sparse ``n0 x (N * width)`` matrix that sums the per-subdomain coarse pieces
        ``Phi_i^T R_i X`` (rows ``local_rank:`` of every subdomain's ``width x B`` product)
        into ``Phi^T X``; CSR on the operator's backend, or None without a coarse term."""
        return self._coarse_collect if self.coarse_rank > 0 else None

    @property
    def rank_bound(self) -> int:
        """Theorem 2: ``min(r0, rank Phi) + sum_i min(r, n_i)`` (without any ``base``)."""
        local = int(np.minimum(self.local_rank, self.decomposition.sizes).sum())
        if self._phi_host is None:
            return local
        return local + min(self.coarse_rank, column_rank(self._phi_host))

    # -- application ---------------------------------------------------------------------
    def _workspace(self, B: int, slot: int = 0) -> dict[str, Any]:
        """Buffers of the training path for ``B`` columns (per slot, kept for the last ``B``).

        Reusing them avoids allocating and page-faulting the large blocks on
        every step.  Only :meth:`value_and_grad_flat` uses them: public
        products always return fresh arrays.
        """
        ws = self._ws.get(slot)
        if ws is None or ws["out"].shape[1] != B:
            xp, dt = self.xp, self.dtype
            N, r = self.decomposition.num_subdomains, self.local_rank
            n0, r0, e = self.coarse_dim, self.coarse_rank, self._width
            rows = self._rows
            shapes = {"X": (rows, B), "Y": (rows, B), "out": (self.shape[0], B),
                      "Z": (N, e, B), "H": (N, e, B), "A_in": self._padded_shape(e),
                      "A_out": self._padded_shape(e)}
            if r0 > 0:
                shapes.update(C=(n0, B), Yc=(n0, B), T0=(r0, B), H0=(r0, B),
                              Yl=(N * (e - r), B))
            check_memory(f"the training buffers for a batch of {B} columns",
                         dt.itemsize * sum(int(np.prod(v)) for v in shapes.values()),
                         "use a smaller batch")
            ws = {k: xp.empty(v, dtype=dt) for k, v in shapes.items()}
            if r0 > 0:  # the coarse columns of the extended factors never change
                ws["A_in"][..., r:] = self._coarse_block
                ws["A_out"][..., r:] = self._coarse_block
            self._ws[slot] = ws
        return ws

    def _extended(self, factor: Any, weight: Any, out: Any = None) -> Any:
        """``[W factor | coarse blocks]``, the padded ``r + c`` columns of one side."""
        r = self.local_rank
        if out is None:
            out = self.xp.empty(self._padded_shape(self._width), dtype=self.dtype)
            if self._width > r:
                out[..., r:] = self._coarse_block
        self.xp.multiply(weight, factor, out=out[..., :r])
        return out

    def _scatter(self, Y, out):
        """``out = S^T Y`` for stacked blocks ``Y`` (``N p x B``): a gather plus the overlap."""
        take_rows(Y, self._first, out)
        return spmm(self._extra, Y, out, accumulate=True)

    def _apply(self, X, adjoint: bool, part: str = "full", cache: dict | None = None):
        check_choice("part", part, self.PARTS)
        xp = self.xp
        f = self._factors()
        # M = S^T W_out Q K^T W_in S (+ coarse); the adjoint swaps the roles
        (A, wA), (Bf, wB) = (((f["K"], self._w["in"]), (f["Q"], self._w["out"])) if adjoint
                             else ((f["Q"], self._w["out"]), (f["K"], self._w["in"])))
        A0, B0 = (f["K0"], f["Q0"]) if adjoint else (f["Q0"], f["K0"])
        N, r = self.decomposition.num_subdomains, self.local_rank
        e = self._width
        B = X.shape[1]
        ws = self._workspace(B, cache["slot"]) if cache is not None else {}
        out = ws["out"] if cache is not None else xp.empty((self.shape[0], B), dtype=self.dtype)
        A_in = self._extended(Bf, wB, ws.get("A_in"))
        A_out = self._extended(A, wA, ws.get("A_out"))
        Xl = take_rows(X, self._gather, ws.get("X"))                      # every subdomain
        Xg = self._group_views(Xl, B)
        # rows :r are T_i = (W K_i)^T X_i, rows r: the coarse pieces Phi_i^T X_i
        Z = ws.get("Z")
        if Z is None and self.padding_groups > 1:
            Z = xp.empty((N, e, B), dtype=self.dtype)
        Z = self._bmm(self._group_views(A_in), Xg, Z, transpose=True, rows=False)  # (N, e, B)
        if self.coarse_rank > 0:
            if part != "local":
                C = spmm(self._coarse_collect, Z.reshape(N * e, B), ws.get("C"))  # Phi^T X
                T0 = xp.matmul(B0.T, C, out=ws.get("T0"))                     # (r0, B)
                Yc = xp.matmul(A0, T0, out=ws.get("Yc"))
                Yl = take_rows(Yc, self._coarse_index, ws.get("Yl"))           # per block
                Z[:, r:] = Yl.reshape(N, e - r, B)
                if cache is not None:
                    cache.update(C=C, T0=T0)
            else:
                Z[:, r:] = 0
        if part == "coarse":
            Z[:, :r] = 0
        Zg = [Z[m0:m1] for _, _, m0, m1, _ in self._groups]
        if ws:
            Y = ws["Y"] if self.padding_groups > 1 else ws["Y"].reshape(Xg[0].shape)
        else:
            Y = None if self.padding_groups == 1 else xp.empty((self._rows, B), dtype=self.dtype)
        Y = self._bmm(self._group_views(A_out), Zg, Y)
        self._scatter(Y.reshape(self._rows, B), out)                 # ... and one scatter back
        if cache is not None:
            cache.update(Xl=Xg, Z=Z, A_out=A_out)
        if part == "full" and self.base is not None:
            fixed = self.base.rmatmat(X) if adjoint else self.base.matmat(X)
            out = xp.add(out, fixed, out=out)
        return out

    def _backward(self, G, scale, cache: dict, grad: dict) -> None:
        xp = self.xp
        N, r = self.decomposition.num_subdomains, self.local_rank
        e = self._width
        B = G.shape[1]
        ws = self._workspace(B, cache["slot"])
        w_in, w_out = self._w["in"], self._w["out"]
        # the forward's Y buffer is free again: reuse it for the restricted gradient
        Gl = self._group_views(take_rows(G, self._gather, ws["Y"]), B)
        T = cache["Z"][:, :r]
        T *= scale                                                           # T_i diag(s)
        Tt = [T[m0:m1].transpose(0, 2, 1) for _, _, m0, m1, _ in self._groups]
        dQ = self._bmm(Gl, Tt, grad["Q"])                                    # G_i T_i^T
        dQ *= w_out
        # rows :r are H_i = (W Q_i)^T G_i, rows r: the coarse pieces Phi_i^T G_i
        Hx = self._bmm(self._group_views(cache["A_out"]), Gl, ws["H"], transpose=True,
                       rows=False)
        H = Hx[:, :r]
        H *= scale
        Ht = [H[m0:m1].transpose(0, 2, 1) for _, _, m0, m1, _ in self._groups]
        target = grad["K"] if not self.tied else (
            None if self.padding_groups == 1 else xp.empty_like(grad["Q"]))
        dK = self._bmm(cache["Xl"], Ht, target)
        dK *= w_in
        if self.tied:  # K_i = Q_i: both roles contribute
            dQ += dK
        if self.coarse_rank > 0:
            G0 = spmm(self._coarse_collect, Hx.reshape(N * e, B), ws["Yc"])  # Phi^T G
            G0 *= scale
            xp.matmul(G0, cache["T0"].T, out=grad["Q0"])
            H0 = xp.matmul(self._factors()["Q0"].T, G0, out=ws["H0"])
            dK0 = xp.matmul(cache["C"], H0.T, out=None if self.tied else grad["K0"])
            if self.tied:
                grad["Q0"] += dK0

    def local_part(self) -> LinearOperator:
        """The local sum ``sum_i R_i^T D_i^{1/2} Q_i K_i^T D_i^{1/2} R_i`` as an operator."""
        return _PartOperator(self, "local")

    def coarse_part(self) -> LinearOperator:
        """The coarse term ``Phi Q0 K0^T Phi^T`` as an operator."""
        return _PartOperator(self, "coarse")

    @property
    def coarse_matrix(self):
        """The coarse interpolation Phi (scipy CSR, ``num_dofs x n0``), or None."""
        return self._phi_host

    def __repr__(self) -> str:
        return (f"SchwarzOperator(n={self.shape[0]}, N={self.decomposition.num_subdomains}, "
                f"local_rank={self.local_rank}, coarse_rank={self.coarse_rank}, "
                f"coarse_basis={self.coarse_basis_name!r}, dtype={self.dtype}, "
                f"backend={self.backend!r})")


class _MatrixBase:
    """A fixed matrix term on a backend: ``matmat`` and ``rmatmat`` by sparse/dense products."""

    def __init__(self, matrix: Any, backend: str, dtype: Any) -> None:
        self.matrix = matrix  # as given (host), for saving
        self.shape = matrix.shape
        if sp.issparse(matrix):
            self._M = asarray(sp.csr_matrix(matrix, dtype=dtype), backend=backend)
            self._MT = asarray(sp.csr_matrix(matrix.T, dtype=dtype), backend=backend)
        else:
            self._M = asarray(np.asarray(matrix, dtype=dtype), backend=backend)
            self._MT = self._M.T

    def matmat(self, X: Any) -> Any:
        return self._M @ X

    def rmatmat(self, X: Any) -> Any:
        return self._MT @ X


def _check_base(base: Any, n: int, backend: str, dtype: Any) -> Any:
    """Validate the fixed additive term of a Schwarz operator."""
    if base is None:
        return None
    if sp.issparse(base) or isinstance(base, np.ndarray):
        if base.shape != (n, n):
            raise ValueError(f"base must have shape ({n}, {n}), got {base.shape}")
        check_finite("base", base.data if sp.issparse(base) else base)
        return _MatrixBase(base, backend, dtype)
    if not (hasattr(base, "shape") and hasattr(base, "matmat")):
        raise TypeError(f"base must be a LinearOperator or a matrix, got {type(base).__name__}")
    if tuple(base.shape) != (n, n):
        raise ValueError(f"base must have shape ({n}, {n}), got {tuple(base.shape)}")
    return base


class _PartOperator(BackendLinearOperator):
    """One part (local or coarse) of a :class:`SchwarzOperator`, for inspection."""

    def __init__(self, op: SchwarzOperator, part: str) -> None:
        self.op, self.part = op, part
        super().__init__(op.shape[0], op.dtype, op.backend)

    def _apply(self, X: Any, adjoint: bool, **options: Any) -> Any:
        return self.op._apply(X, adjoint, self.part)

    def to_dense(self, max_bytes: int | None = None) -> np.ndarray:
        """Dense matrix of this part (same size limit as the parent's ``to_dense``)."""
        return self.op.to_dense(self.part, max_bytes)
