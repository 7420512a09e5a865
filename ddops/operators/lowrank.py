"""The trainable low-rank operator base: one flat parameter vector, batched products,
hand-derived gradients.

Every trainable factor of a :class:`LowRankOperator` is a view into one flat
parameter vector (:attr:`LowRankOperator.theta`), so an optimiser step is one
update of that vector however many subdomains there are.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import check_choice, check_dtype, check_finite, check_int
from ..backend import to_numpy
from .linop import BackendLinearOperator
from .losses import loss_and_scaled_grad

__all__ = ["INITS", "LowRankOperator", "init_scale"]

#: Random initialisations: ``"naive"`` (N(0,1) x 0.02, paper v1) and
#: ``"scaled"`` (N(0,1) x (h/4)^{1/2} r^{-1/4}, paper v2, in 1D; see :func:`init_scale`).
INITS = ("scaled", "naive")


def init_scale(init: str, h: float, rank: int, dim: int = 1) -> float:
    """Standard deviation of the random factors for an initialisation name.

    ``"naive"``: 0.02.  ``"scaled"``: ``(tau / 4)^{1/2} r^{-1/4}``, so that an
    entry of ``Q K^T`` (a sum of ``r`` products) has the standard deviation
    ``tau / 4``, with ``tau = h`` in one dimension (the paper's v2 rule) and
    ``tau = h^2`` in ``dim >= 2``: the entries of the inverse of the
    ``h^-2``-scaled finite-difference Laplacian ``A = h^-2 L`` are
    ``h^2 (L^{-1})_{jk}``, and ``L^{-1}`` has entries of order ``1/h`` in 1D
    (``x(1 - x)/h`` at most) but of order one in 2D (``log(1/h) / 2 pi``) and
    3D (about 1/4).  ``h`` is the decomposition's mesh width
    (:attr:`ddops.Decomposition.h`; for unstructured problems the mean
    spacing of the coordinates).  The rule knows only ``h``, not ``A``: for a
    matrix scaled otherwise (the P1 stiffness matrix of the unit square is
    ``h^2`` times the finite-difference one, so its inverse is ``h^-2`` times
    larger) use the problem-scaled initialisation,
    :func:`ddops.learning.initialisation.problem_init`, which reads the sizes
    from ``A``.
    """
    check_choice("init", init, INITS)
    if init == "naive":
        return 0.02
    tau = h if dim == 1 else h * h
    return float(np.sqrt(tau / 4.0) * rank ** -0.25)


class LowRankOperator(BackendLinearOperator):
    """Common machinery of the trainable operators (not instantiated directly).

    Subclasses describe their factors with ``_layout`` (name -> shape of the
    stored, possibly padded, array) and implement ``_apply`` (forward or
    adjoint, optionally recording what the backward pass needs) and
    ``_backward``.
    """

    _layout: dict[str, tuple[int, ...]]
    #: How the coarse and the local factors were initialised: ``"random"`` (the
    #: draw of ``init``) unless :func:`ddops.learning.initialisation.problem_init`
    #: set them from the problem (``"galerkin"``, ``"problem"``).
    coarse_init: str = "random"
    local_init: str = "random"

    def __init__(self, num_dofs: int, dtype: Any, backend: str) -> None:
        dt = check_dtype(dtype)
        super().__init__(num_dofs, dt, backend)
        sizes = [int(np.prod(s)) for s in self._layout.values()]
        self._slices = {}
        start = 0
        for name, size in zip(self._layout, sizes, strict=False):
            self._slices[name] = slice(start, start + size)
            start += size
        self.theta = self.xp.zeros(start, dtype=dt)
        self._ws: dict[int, dict[str, Any]] = {}
        self.params = self._views(self.theta)

    def _views(self, flat: Any) -> dict[str, Any]:
        """Views of a flat vector laid out like :attr:`theta`."""
        return {k: flat[s].reshape(self._layout[k]) for k, s in self._slices.items()}

    def _apply(self, X, adjoint: bool, part: str = "full", cache: dict | None = None):
        raise NotImplementedError

    def _backward(self, G, scale, cache: dict, grad: dict) -> None:
        """Write the gradient for ``dL/dP = G * scale`` (scale: scalar or per column)."""
        raise NotImplementedError

    # -- dense views -------------------------------------------------------------------
    def to_dense(self, part: str = "full", max_bytes: int | None = None) -> np.ndarray:
        """Assemble the operator (or one of its parts) as a dense numpy array.

        Parameters
        ----------
        part : str
            ``"full"``, or a part name accepted by the subclass.
        max_bytes : int, optional
            Refuse to build a matrix larger than this (default
            :data:`~ddops.operators.linop.DENSE_LIMIT_BYTES`); raise it to assemble bigger ones.
        """
        return self._dense(max_bytes, part=part)

    # -- parameters --------------------------------------------------------------------
    @property
    def num_params(self) -> int:
        """Number of trainable scalars (padding excluded)."""
        raise NotImplementedError

    def get_params(self) -> dict[str, Any]:
        """Copies of the factors as numpy arrays."""
        return self.unflatten(self.theta)

    def set_params(self, params: dict[str, Any]) -> None:
        """Replace the factors (same structure as :meth:`get_params`), validated."""
        self._write(self.params, self._validate_params(params))

    def flatten(self, params: dict[str, Any]) -> Any:
        """Pack a :meth:`get_params`-structured dict into a flat vector like :attr:`theta`."""
        flat = self.xp.zeros_like(self.theta)
        self._write(self._views(flat), self._validate_params(params))
        return flat

    def unflatten(self, flat: Any) -> dict[str, Any]:
        """Unpack a flat vector (for example a gradient) into the :meth:`get_params` structure."""
        raise NotImplementedError

    def _validate_params(self, params: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(params, dict):
            raise TypeError(f"params must be a dict, got {type(params).__name__}")
        expected = set(self._param_shapes())
        if set(params) != expected:
            raise ValueError(f"params must have exactly the keys {sorted(expected)}, "
                             f"got {sorted(params)}")
        out = {}
        for key, shape in self._param_shapes().items():
            value = params[key]
            if isinstance(shape, list):
                if not isinstance(value, (list, tuple)) or len(value) != len(shape):
                    raise ValueError(f"params[{key!r}] must be a list of {len(shape)} arrays")
                out[key] = [self._check_array(f"params[{key!r}][{i}]", v, s)
                            for i, (v, s) in enumerate(zip(value, shape, strict=False))]
            else:
                out[key] = self._check_array(f"params[{key!r}]", value, shape)
        return out

    @staticmethod
    def _check_array(name: str, value: Any, shape: tuple[int, ...]) -> np.ndarray:
        arr = np.asarray(to_numpy(value))
        if arr.dtype.kind not in "fiu":
            raise TypeError(f"{name} must be a real array, got dtype {arr.dtype}")
        if arr.shape != tuple(shape):
            raise ValueError(f"{name} must have shape {tuple(shape)}, got {arr.shape}")
        check_finite(name, arr)
        return arr

    def _param_shapes(self) -> dict[str, Any]:
        raise NotImplementedError

    def _write(self, views: dict[str, Any], params: dict[str, Any]) -> None:
        raise NotImplementedError

    # -- training ----------------------------------------------------------------------
    def value_and_grad_flat(self, F: Any, U: Any, loss: str = "wmse", out: Any = None,
                            check: bool = True, loss_weight: Any = None, slot: int = 0):
        """Loss and its gradient as a flat vector laid out like :attr:`theta`.

        Parameters
        ----------
        F, U : array, shape (n, B)
            Right-hand sides and exact solutions, one per column.
        loss : {"wmse", "mse", "energy"}
            See :func:`ddops.operators.losses.loss_and_grad`.
        out : array, optional
            Buffer for the flat gradient.
        check : bool
            Validate ``F`` and ``U`` (shape, dtype, finiteness).
        loss_weight : sparse matrix or array, optional
            The SPD weight of ``loss="energy"``.
        slot : int
            Which set of reused work buffers to use.  Calls that run at the
            same time in different threads (on column blocks of one batch)
            must use different slots; the parameters are only read.

        Returns
        -------
        value : 0-d array
            The loss, left on the device.
        grad : array
            Flat gradient.
        """
        if check:
            check_int("slot", slot, minimum=0)
            F = self._check_input(F, "F")
            U = self._check_input(U, "U")
            if F.ndim != 2 or U.shape != F.shape:
                raise ValueError(f"F and U must both have shape (n, B); got {F.shape}, {U.shape}")
        cache: dict[str, Any] = {"slot": slot}
        P = self._apply(F, False, "full", cache)
        # dL/dP = G * scale; the column scale goes onto the small intermediates
        value, G, scale = loss_and_scaled_grad(loss, P, U, out=P, weight=loss_weight)
        grad = self.xp.empty_like(self.theta) if out is None else out
        self._backward(G, scale, cache, self._views(grad))
        return value, grad

    def value_and_grad(self, F: Any, U: Any, loss: str = "wmse",
                       loss_weight: Any = None) -> tuple[float, dict[str, Any]]:
        """Loss and gradient for every parameter, in the :meth:`get_params` structure.

        One batched computation over all subdomains; no dense ``n x n`` matrix.
        """
        value, grad = self.value_and_grad_flat(F, U, loss, loss_weight=loss_weight)
        return float(value), self.unflatten(grad)

    def _draw(self, rng: np.random.Generator, shape: tuple[int, ...], scale: float) -> np.ndarray:
        """N(0, 1) x scale in float64 on the host (the same stream for every dtype and backend)."""
        values = rng.standard_normal(shape)
        values *= scale
        return values
