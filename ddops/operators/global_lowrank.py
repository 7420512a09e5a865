"""The global low-rank baseline ``M = Q K^T`` of the paper."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import check_choice, check_dtype, check_int, check_memory, warn
from ..backend import to_numpy
from .lowrank import INITS, LowRankOperator, init_scale

__all__ = ["GlobalLowRankOperator"]


class GlobalLowRankOperator(LowRankOperator):
    """The global attention baseline ``M = Q K^T`` with ``Q, K`` of size ``n x r``.

    Parameters
    ----------
    num_dofs : int
        Size ``n`` of the operator.
    rank : int
        Inner dimension ``r``.  A value above ``n`` is truncated to ``n``
        with a warning (``Q K^T`` has rank at most ``n``);
        :attr:`requested_rank` keeps the value asked for.
    init : {"scaled", "naive"}
        Random initialisation, see :data:`INITS`.
    seed : int
        Seed of the numpy generator that draws the factors.
    dtype : {numpy.float64, numpy.float32}
        Floating-point type.
    backend : {"numpy", "cupy"}
        Where the arrays live.
    h : float, optional
        Mesh width for the scaled initialisation; default ``1 / (n + 1)``,
        which is the mesh width of both conventions of the 1D problem.
    dim : int, default 1
        Space dimension for the scaled initialisation
        (:func:`~ddops.operators.init_scale`; pass the decomposition's
        ``h`` and ``dim`` to compare with a Schwarz operator on a 2D/3D problem).
    """

    PARTS = ("full",)

    def __init__(self, num_dofs: int, rank: int, init: str = "scaled", seed: int = 0,
                 dtype: Any = np.float64, backend: str = "numpy", h: float | None = None,
                 dim: int = 1) -> None:
        n = check_int("num_dofs", num_dofs, minimum=1)
        self.requested_rank = check_int("rank", rank, minimum=1)
        self.rank = self.requested_rank
        if self.rank > n:
            warn(f"rank={self.rank} exceeds num_dofs={n}; truncated to {n}")
            self.rank = n
        check_choice("init", init, INITS)
        seed = check_int("seed", seed, minimum=0)
        dt = check_dtype(dtype)
        # the parameters and the float64 draws of both factors
        check_memory(f"GlobalLowRankOperator(num_dofs={n}, rank={self.rank})",
                     2 * n * self.rank * (dt.itemsize + 8), "reduce rank")
        self._layout = {"Q": (n, self.rank), "K": (n, self.rank)}
        super().__init__(n, dtype, backend)
        self.h = 1.0 / (n + 1) if h is None else float(h)
        self.dim = check_int("dim", dim, minimum=1)
        rng = np.random.default_rng(seed)
        scale = init_scale(init, self.h, self.rank, self.dim)
        self._write(self.params, {"Q": self._draw(rng, (n, self.rank), scale),
                                  "K": self._draw(rng, (n, self.rank), scale)})
        self.init, self.seed = init, seed

    def _param_shapes(self) -> dict[str, Any]:
        return dict(self._layout)

    def _write(self, views, params) -> None:
        for key in ("Q", "K"):
            views[key][...] = self.xp.asarray(np.asarray(params[key], dtype=self.dtype))

    def unflatten(self, flat: Any) -> dict[str, Any]:
        return {k: to_numpy(v).copy() for k, v in self._views(flat).items()}

    @property
    def num_params(self) -> int:
        return 2 * self.shape[0] * self.rank

    @property
    def rank_bound(self) -> int:
        """``min(r, n)`` (a rank above ``n`` is truncated on construction, so ``r``)."""
        return min(self.rank, self.shape[0])

    def _apply(self, X, adjoint: bool, part: str = "full", cache: dict | None = None):
        check_choice("part", part, self.PARTS)
        A, Bf = (self.params["K"], self.params["Q"]) if adjoint else (
            self.params["Q"], self.params["K"])
        T = Bf.T @ X
        if cache is not None:
            cache.update(X=X, T=T)
        return A @ T

    def _backward(self, G, scale, cache: dict, grad: dict) -> None:
        xp = self.xp
        T = xp.multiply(cache["T"], scale, out=cache["T"])
        xp.matmul(G, T.T, out=grad["Q"])
        H = self.params["Q"].T @ G
        H *= scale
        xp.matmul(cache["X"], H.T, out=grad["K"])

    def __repr__(self) -> str:
        return (f"GlobalLowRankOperator(n={self.shape[0]}, rank={self.rank}, "
                f"dtype={self.dtype}, backend={self.backend!r})")
