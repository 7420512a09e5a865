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
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator

from .._validation import check_choice, check_dtype, check_finite, check_int, check_memory
from ..backend import asarray, check_backend, spmm, take_rows, to_numpy
from ..dd.coarse import (
    ALL_COARSE_BASES,
    MATRIX_COARSE_BASES,
    column_rank,
    subdomain_blocks,
    validate_coarse_matrix,
)
from ..dd.coarse import coarse_basis as build_coarse_basis
from ..dd.decomposition import Decomposition
from .linop import BackendLinearOperator
from .lowrank import INITS, LowRankOperator, init_scale

__all__ = ["NULL_SPACE_BASES", "PARTITIONS", "SchwarzOperator"]

#: Named coarse bases that take a ``null_space``.
NULL_SPACE_BASES = ("pou", "nicolaides", *MATRIX_COARSE_BASES)

#: Partition-of-unity placements ``name -> (input-side, output-side weighting)``:
#: ``"symmetric"`` is the paper's ``R_i^T D_i^{1/2} Q_i K_i^T D_i^{1/2} R_i``,
#: ``"left"`` puts all of ``D_i`` on the output side (``R_i^T D_i Q_i K_i^T R_i``)
#: and ``"none"`` drops it (``R_i^T Q_i K_i^T R_i``).
PARTITIONS = {"symmetric": ("sqrt", "sqrt"), "left": ("none", "full"), "none": ("none", "none")}



def _schwarz_bytes(N: int, p: int, entries: int, r: int, n0: int, r0: int, factors: int,
                   itemsize: int) -> int:
    """Estimated peak memory of building a :class:`SchwarzOperator` (coarse blocks aside).

    The flat parameter vector, the float64 draws of every factor before they
    are written, the padded gather index and weights, and the scatter plan.
    The coarse blocks are checked where they are built
    (:func:`ddops.dd.coarse.subdomain_blocks`).
    """
    theta = itemsize * factors * (N * p * r + n0 * r0)
    draws = 8 * factors * (entries * r + n0 * r0)
    padded = N * p * (8 + 2 * itemsize)
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
        A name from :data:`ddops.dd.coarse.ALL_COARSE_BASES` (``"gdsw"`` and
        ``"rgdsw"`` are built from the matrix: pass ``A``), a user-supplied
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
    A : sparse matrix, optional
        The SPD matrix that ``coarse_basis="gdsw"``/``"rgdsw"`` are built from
        (:func:`ddops.dd.coarse.coarse_basis`); only used there.  It is not
        kept: the operator stores the built basis (and saves it).
    null_space : array (num_dofs x k), optional
        Null space for ``coarse_basis`` in ``"nicolaides"``, ``"pou"``,
        ``"gdsw"``, ``"rgdsw"`` (constants by default; rigid body modes for
        elasticity).

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
        coarse_basis: Any = "interface_hats",
        coarse_size: int | None = None,
        init: str = "scaled",
        seed: int = 0,
        dtype: Any = np.float64,
        backend: str = "numpy",
        partition: str = "symmetric",
        tied: bool = False,
        base: Any = None,
        *,
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
            warnings.warn(f"local_rank={self.local_rank} exceeds the largest subdomain size "
                          f"p={d.max_size}; truncated to {d.max_size}", stacklevel=2)
            self.local_rank = d.max_size
        check_choice("init", init, INITS)
        seed = check_int("seed", seed, minimum=0)
        check_backend(backend)
        dt = check_dtype(dtype)

        # coarse space
        if coarse_size is not None and not (isinstance(coarse_basis, str)
                                            and coarse_basis == "grid_hats"):
            raise ValueError("coarse_size is only used with coarse_basis='grid_hats'")
        named = isinstance(coarse_basis, str)
        if A is not None and not (named and coarse_basis in MATRIX_COARSE_BASES):
            raise ValueError(f"A is only used with coarse_basis in {MATRIX_COARSE_BASES}, "
                             f"not {coarse_basis!r}")
        if null_space is not None and not (named and coarse_basis in NULL_SPACE_BASES):
            raise ValueError(f"null_space is only used with coarse_basis in {NULL_SPACE_BASES}, "
                             f"not {coarse_basis!r}")
        if coarse_basis is None:
            Phi = None
        elif named:
            check_choice("coarse_basis", coarse_basis, ALL_COARSE_BASES)
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
            not named or coarse_basis in MATRIX_COARSE_BASES or null_space is not None)
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
                warnings.warn(f"coarse_rank={r0} exceeds the coarse dimension n0={n0}; "
                              f"truncated to {n0}", stacklevel=2)
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
        self._layout = {"Q": (N, p, r), "Q0": (n0, r0)} if tied else {
            "Q": (N, p, r), "K": (N, p, r), "Q0": (n0, r0), "K0": (n0, r0)}
        check_memory(f"SchwarzOperator(local_rank={r}, coarse_rank={r0}) on {N} subdomains of "
                     f"up to {p} unknowns with n0={n0}",
                     _schwarz_bytes(N, p, int(d.indices.size), r, n0, r0, 1 if tied else 2,
                                    dt.itemsize), "reduce local_rank or coarse_rank")
        super().__init__(d.num_dofs, dt, backend)

        # Restriction and scatter by row gathers (the stacked CSR has one entry per
        # row); the weights multiply the (N, p, r) factors, not the n x B blocks.
        self.partition = partition
        w_in, w_out = PARTITIONS[partition]
        xp = self.xp
        self._gather = xp.asarray(d.padded_gather())
        first, extra = d.scatter_plan()
        self._first = xp.asarray(first)
        self._extra = asarray(extra, backend=backend, dtype=dt)
        self._w = {side: xp.asarray(d.padded_weights(w).reshape(N, p, 1), dtype=dt)
                   for side, w in (("in", w_in), ("out", w_out))}
        # The coarse space goes through the same blocks: the rows of Phi owned by each
        # subdomain become c extra columns of its factors (Phi^T F = sum_i Phi_i^T R_i F),
        # so restriction and interpolation cost no pass over the n x B block of their own.
        self._width = r
        if self.coarse_rank > 0:
            blocks, index, collect = subdomain_blocks(d, Phi, extra_columns=r)
            self._coarse_block = xp.asarray(blocks, dtype=dt)
            self._coarse_index = xp.asarray(index.reshape(-1))
            self._coarse_collect = asarray(collect, backend=backend, dtype=dt)
            self._width = r + blocks.shape[2]

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

    def _pad_rows(self) -> tuple[np.ndarray, np.ndarray]:
        d = self.decomposition
        return d._subdomain_of_entry, d._position_in_subdomain

    def _write_packed(self, views: dict[str, Any], packed: dict[str, np.ndarray]) -> None:
        """Write unpadded stacked ``(sum n_i, r)`` Q/K blocks and the coarse factors."""
        sub, pos = self._pad_rows()
        xp = self.xp
        if xp is not np:  # device index arrays: one scatter per factor on the GPU
            sub, pos = xp.asarray(sub), xp.asarray(pos)
        for key in self._keys(local=True):
            views[key][...] = 0
            views[key][sub, pos] = xp.asarray(packed[key], dtype=self.dtype)
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
        sub, pos = self._pad_rows()
        offsets = self.decomposition.offsets[1:-1]
        out: dict[str, Any] = {}
        for key in self._keys(local=True):
            stacked = to_numpy(views[key])[sub, pos]
            out[key] = np.split(stacked, offsets)
        for key in self._keys(local=False):
            out[key] = to_numpy(views[key]).copy()
        return out

    def get_params(self) -> dict[str, Any]:
        return self.unflatten(self.theta)

    def set_params(self, params: dict[str, Any]) -> None:
        self._write(self.params, self._validate_params(params))

    @property
    def num_params(self) -> int:
        d = self.decomposition
        factors = 1 if self.tied else 2
        local = self.local_rank * d.indices.size
        return int(factors * (local + self.coarse_dim * self.coarse_rank))

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
            N, p, r = self._layout["Q"]
            n0, r0, e = self.coarse_dim, self.coarse_rank, self._width
            shapes = {"X": (N * p, B), "Y": (N * p, B), "out": (self.shape[0], B),
                      "Z": (N, e, B), "H": (N, e, B), "A_in": (N, p, e), "A_out": (N, p, e)}
            if r0 > 0:
                shapes.update(C=(n0, B), Yc=(n0, B), T0=(r0, B), H0=(r0, B),
                              Yl=(N * (e - r), B))
            check_memory(f"the training buffers for a batch of {B} columns",
                         dt.itemsize * sum(int(np.prod(v)) for v in shapes.values()),
                         "use a smaller batch")
            ws = {k: xp.empty(v, dtype=dt) for k, v in shapes.items()}
            if r0 > 0:  # the coarse columns of the extended factors never change
                ws["A_in"][:, :, r:] = self._coarse_block
                ws["A_out"][:, :, r:] = self._coarse_block
            self._ws[slot] = ws
        return ws

    def _extended(self, factor: Any, weight: Any, out: Any = None) -> Any:
        """``[W factor | coarse blocks]``, the ``(N, p, r + c)`` factor of one side."""
        N, p, r = self._layout["Q"]
        if out is None:
            out = self.xp.empty((N, p, self._width), dtype=self.dtype)
            if self._width > r:
                out[:, :, r:] = self._coarse_block
        self.xp.multiply(weight, factor, out=out[:, :, :r])
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
        N, p, r = self._layout["Q"]
        e = self._width
        B = X.shape[1]
        ws = self._workspace(B, cache["slot"]) if cache is not None else {}
        out = ws["out"] if cache is not None else xp.empty((self.shape[0], B), dtype=self.dtype)
        A_in = self._extended(Bf, wB, ws.get("A_in"))
        A_out = self._extended(A, wA, ws.get("A_out"))
        Xl = take_rows(X, self._gather, ws.get("X")).reshape(N, p, B)    # every subdomain
        # rows :r are T_i = (W K_i)^T X_i, rows r: the coarse pieces Phi_i^T X_i
        Z = xp.matmul(A_in.transpose(0, 2, 1), Xl, out=ws.get("Z"))       # (N, r + c, B)
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
        Y = xp.matmul(A_out, Z, out=ws["Y"].reshape(N, p, B) if ws else None)
        self._scatter(Y.reshape(N * p, B), out)                      # ... and one scatter back
        if cache is not None:
            cache.update(Xl=Xl, Z=Z, A_out=A_out)
        if part == "full" and self.base is not None:
            fixed = self.base.rmatmat(X) if adjoint else self.base.matmat(X)
            out = xp.add(out, fixed, out=out)
        return out

    def _backward(self, G, scale, cache: dict, grad: dict) -> None:
        xp = self.xp
        N, p, r = self._layout["Q"]
        e = self._width
        B = G.shape[1]
        ws = self._workspace(B, cache["slot"])
        w_in, w_out = self._w["in"], self._w["out"]
        # the forward's Y buffer is free again: reuse it for the restricted gradient
        Gl = take_rows(G, self._gather, ws["Y"]).reshape(N, p, B)
        T = cache["Z"][:, :r]
        T *= scale                                                           # T_i diag(s)
        dQ = xp.matmul(Gl, T.transpose(0, 2, 1), out=grad["Q"])             # G_i T_i^T
        dQ *= w_out
        # rows :r are H_i = (W Q_i)^T G_i, rows r: the coarse pieces Phi_i^T G_i
        Hx = xp.matmul(cache["A_out"].transpose(0, 2, 1), Gl, out=ws["H"])
        H = Hx[:, :r]
        H *= scale
        dK = xp.matmul(cache["Xl"], H.transpose(0, 2, 1), out=None if self.tied else grad["K"])
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
