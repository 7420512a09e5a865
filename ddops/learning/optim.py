"""Optimisers and a learning-rate scheduler with explicit, saveable state.

The classes reproduce the semantics of ``torch.optim.Adam``, ``torch.optim.AdamW``
(single-tensor implementation, ``foreach=False``, no ``amsgrad``/``maximize``) and
``torch.optim.lr_scheduler.ReduceLROnPlateau`` for plain numpy or cupy arrays, so
that a training loop written against this package follows the same trajectory as
the paper's PyTorch scripts.

The parameters are a list of arrays that :meth:`Adam.step` updates **in place**.
All arithmetic is done with in-place ufuncs into preallocated scratch buffers (two
per parameter), in the same floating-point order as PyTorch's CPU kernels::

    t     <- t + 1
    p     <- p * (1 - lr * wd)                     (AdamW only, decoupled decay)
    g     <- g + wd * p                            (Adam only, L2 penalty)
    m     <- m + (1 - beta1) * (g - m)             (torch.lerp; other branch if 1 - beta1 >= 0.5)
    v     <- v * beta2 + ((1 - beta2) * g) * g
    denom <- sqrt(v) / sqrt(1 - beta2^t) + eps
    p     <- p + ((-lr / (1 - beta1^t)) * m) / denom

An optional per-entry multiplier ``lr_scale = s`` of the learning rate gives
every entry its own rate ``lr * s`` (as one PyTorch parameter group per
distinct value of ``s`` would): the decoupled decay becomes
``p * (1 - lr * wd * s)`` and the step ``((-lr / (1 - beta1^t)) * m) * s / denom``.
Without it (the default) the update is exactly the one above.

Bitwise equality with PyTorch is not attainable from numpy: PyTorch's vectorised
CPU kernels fuse some multiply-adds (``lerp``, ``addcmul``, ``add(alpha=)``) into
FMA instructions and its vectorised ``sqrt`` is not always correctly rounded.
Each step therefore agrees to about one unit in the last place; over hundreds of
steps the parameters agree to a few ulps of their magnitude (tested against
``torch.optim`` when torch is installed). Every scalar is cast to the parameter
dtype first, as PyTorch does, so float32 parameters are updated in float32.

The state (:meth:`Adam.state_dict`) is a flat dict of numpy arrays and Python
scalars, suitable for ``np.savez(path, **state)``; :meth:`Adam.load_state_dict`
accepts that dict or the ``NpzFile`` returned by ``np.load``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .._validation import check_choice, check_int, check_positive_float
from ..backend import get_array_module, to_numpy

__all__ = ["Adam", "AdamW", "ReduceLROnPlateau"]


def _as_list(arrays: Any, name: str) -> list[Any]:
    """Accept one array or a sequence of arrays; return a list of arrays."""
    if hasattr(arrays, "shape") and hasattr(arrays, "dtype"):
        return [arrays]
    if isinstance(arrays, (str, bytes)) or not isinstance(arrays, Sequence):
        try:
            arrays = list(arrays)
        except TypeError as exc:
            raise TypeError(
                f"{name} must be an array or a sequence of arrays, got {type(arrays).__name__}"
            ) from exc
    out = list(arrays)
    for i, a in enumerate(out):
        if not (hasattr(a, "shape") and hasattr(a, "dtype")):
            raise TypeError(f"{name}[{i}] must be a numpy or cupy array, got {type(a).__name__}")
    return out


def _check_beta(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    value = float(value)
    if not (0.0 <= value < 1.0):
        raise ValueError(f"{name} must satisfy 0 <= {name} < 1, got {value}")
    return value


def _check_betas(betas: Any) -> tuple[float, float]:
    try:
        b = tuple(betas)
    except TypeError as exc:
        raise TypeError(f"betas must be a pair of floats, got {betas!r}") from exc
    if len(b) != 2:
        raise ValueError(f"betas must be a pair (beta1, beta2), got {len(b)} values")
    return _check_beta("betas[0]", b[0]), _check_beta("betas[1]", b[1])


def _item(state: Mapping[str, Any], key: str) -> Any:
    """Return ``state[key]`` as a Python scalar (0-d arrays from ``np.load`` included)."""
    try:
        value = state[key]
    except KeyError as exc:
        raise ValueError(f"state dict is missing the key {key!r}") from exc
    value = np.asarray(to_numpy(value))
    if value.ndim != 0:
        raise ValueError(f"state dict entry {key!r} must be a scalar, got shape {value.shape}")
    return value.item()


def _adam_update(xp: Any, p: Any, g: Any, m: Any, v: Any, a: Any, b: Any, c: tuple,
                 s: Any = None) -> None:
    """One Adam/AdamW update of ``p, m, v`` (same-shaped views) in torch's order.

    ``a`` and ``b`` are scratch arrays of the same shape; ``c`` holds the
    dtype-cast scalars (see :meth:`Adam.step`); ``s`` is the per-entry
    learning-rate multiplier (same shape) or ``None``.
    """
    decay, l2, small_w, w_minus_1, beta2, one_minus_beta2, bc2_sqrt, eps, neg_step, neg_lr_wd = c
    if decay is not None:  # AdamW: p <- p * (1 - lr wd), with s: p * (1 - lr wd s)
        if s is None:
            p *= decay
        else:
            xp.multiply(s, neg_lr_wd, out=a)
            a += 1
            p *= a
    if l2 is not None:  # Adam: g <- g + wd p (into scratch; the caller's g is untouched)
        xp.multiply(p, l2, out=a)
        xp.add(g, a, out=a)
        g = a
    # m <- lerp(m, g, w): m + w (g - m) for |w| < 0.5, else g + (w - 1)(g - m)
    xp.subtract(g, m, out=b)
    if small_w is not None:
        b *= small_w
        m += b
    else:
        b *= w_minus_1
        xp.add(b, g, out=m)
    # v <- v * beta2 + ((1 - beta2) * g) * g
    v *= beta2
    xp.multiply(g, one_minus_beta2, out=b)
    b *= g
    v += b
    # denom <- sqrt(v) / sqrt(1 - beta2^t) + eps;  p <- p + (-step_size * m) / denom
    xp.sqrt(v, out=b)
    b /= bc2_sqrt
    b += eps
    xp.multiply(m, neg_step, out=a)
    if s is not None:
        a *= s
    a /= b
    p += a


class Adam:
    """Adam (Kingma & Ba) with PyTorch's exact update rule and L2 weight decay.

    Parameters
    ----------
    params : array or sequence of arrays
        Floating-point numpy or cupy arrays, updated in place by :meth:`step`.
        For speed, pass one flat contiguous parameter vector.
    lr : float, default 1e-3
        Learning rate, ``>= 0``. A mutable attribute (schedulers change it).
    betas : (float, float), default (0.9, 0.999)
        Decay rates of the first and second moment, each in ``[0, 1)``.
    eps : float, default 1e-8
        Term added to the bias-corrected root of the second moment, ``>= 0``.
    weight_decay : float, default 0.0
        ``>= 0``. In :class:`Adam` it is an L2 penalty added to the gradient
        (``g + wd * p``); in :class:`AdamW` it is decoupled (``p *= 1 - lr * wd``).
    lr_scale : array or sequence of arrays, optional
        Per-entry multipliers ``s >= 0`` of the learning rate, one finite array
        per parameter of the same shape and array library: entry ``j`` is
        updated with the rate ``lr * s_j`` (decoupled decay included; the L2
        penalty of :class:`Adam` is a gradient term and is not scaled).  A
        scheduler still changes the common ``lr``.  ``None`` (default): the
        plain update.  Saved and restored with the state.

    Attributes
    ----------
    params : list of arrays
        The parameters (the caller's arrays, not copies).
    exp_avg, exp_avg_sq : list of arrays
        First and second moment estimates ``m`` and ``v``, one per parameter.
    step_count : int
        Number of :meth:`step` calls so far (PyTorch's ``state["step"]``).
    lr_scale : list of arrays or None
        The learning-rate multipliers (see :meth:`set_lr_scale`).

    Raises
    ------
    ValueError
        For an empty parameter list or an invalid hyper-parameter (the message
        names the argument).
    TypeError
        For non-array parameters, non-floating dtypes, or non-numeric
        hyper-parameters.
    """

    #: AdamW (decoupled) or Adam (L2) weight decay.
    decoupled_weight_decay: bool = False
    #: Elements per block when a large numpy parameter is updated (cache blocking);
    #: the result does not depend on it.
    chunk_size: int = 16384
    _name = "Adam"

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        lr_scale: Any = None,
    ) -> None:
        params = _as_list(params, "params")
        if not params:
            raise ValueError("params must contain at least one array (got an empty list)")
        for i, p in enumerate(params):
            if not np.issubdtype(np.dtype(p.dtype), np.floating):
                raise TypeError(f"params[{i}] must have a floating dtype, got {p.dtype}")
            if isinstance(p, np.ndarray) and not p.flags.writeable:
                raise ValueError(f"params[{i}] must be writeable (it is updated in place)")
        self.lr = lr
        self.betas = _check_betas(betas)
        self.eps = check_positive_float("eps", eps, allow_zero=True)
        self.weight_decay = check_positive_float("weight_decay", weight_decay, allow_zero=True)
        self.params = params
        self._xps = [get_array_module(p) for p in params]
        self.exp_avg = [xp.zeros_like(p) for xp, p in zip(self._xps, params)]
        self.exp_avg_sq = [xp.zeros_like(p) for xp, p in zip(self._xps, params)]
        # Two scratch buffers per parameter, so the hot path allocates nothing.
        # Large contiguous numpy parameters are processed in cache-sized chunks with
        # two scratch buffers of the chunk size; anything else in one piece.
        self._chunks: list[int | None] = []
        self._scratch = []
        for xp, p in zip(self._xps, params):
            chunked = xp is np and p.size > self.chunk_size and p.flags.c_contiguous
            if chunked:
                self._chunks.append(self.chunk_size)
                self._scratch.append(
                    (np.empty(self.chunk_size, p.dtype), np.empty(self.chunk_size, p.dtype))
                )
            else:
                self._chunks.append(None)
                self._scratch.append((xp.empty_like(p), xp.empty_like(p)))
        self.step_count = 0
        self.lr_scale: list[Any] | None = None
        self.set_lr_scale(lr_scale)

    def set_lr_scale(self, lr_scale: Any) -> None:
        """Set (or with ``None`` remove) the per-entry learning-rate multipliers.

        The arrays are copied into the parameters' array library and dtype.

        Raises
        ------
        TypeError
            For non-arrays, or arrays of another array library than the parameters.
        ValueError
            For a wrong number of arrays, a shape mismatch, or negative or
            non-finite multipliers.
        """
        if lr_scale is None:
            self.lr_scale = None
            return
        scales = _as_list(lr_scale, "lr_scale")
        if len(scales) != len(self.params):
            raise ValueError(f"lr_scale must hold one array per parameter ({len(self.params)}), "
                             f"got {len(scales)}")
        out = []
        for i, (s, p, xp) in enumerate(zip(scales, self.params, self._xps)):
            if s.shape != p.shape:
                raise ValueError(f"lr_scale[{i}] has shape {s.shape}, expected {p.shape}")
            if get_array_module(s) is not xp:
                raise TypeError(f"lr_scale[{i}] is a {type(s).__module__} array but params[{i}] "
                                f"is a {type(p).__module__} array")
            if np.dtype(s.dtype).kind not in "fiu":
                raise TypeError(f"lr_scale[{i}] must be real, got dtype {s.dtype}")
            if not bool(xp.all(xp.isfinite(s))) or bool(xp.any(s < 0)):
                raise ValueError(f"lr_scale[{i}] must be finite and >= 0")
            out.append(xp.array(s, dtype=p.dtype, copy=True))
        self.lr_scale = out

    # ------------------------------------------------------------------ lr
    @property
    def lr(self) -> float:
        """Learning rate (finite, ``>= 0``); may be changed between steps."""
        return self._lr

    @lr.setter
    def lr(self, value: float) -> None:
        self._lr = check_positive_float("lr", value, allow_zero=True)

    def __repr__(self) -> str:
        return (
            f"{self._name}(lr={self._lr!r}, betas={self.betas!r}, eps={self.eps!r}, "
            f"weight_decay={self.weight_decay!r}, num_params={len(self.params)}, "
            f"step_count={self.step_count})"
        )

    # ---------------------------------------------------------------- step
    def _check_grads(self, grads: Any) -> list[Any]:
        grads = _as_list(grads, "grads")
        if len(grads) != len(self.params):
            raise ValueError(f"expected {len(self.params)} gradients, got {len(grads)}")
        for i, (g, p, xp) in enumerate(zip(grads, self.params, self._xps)):
            if g.shape != p.shape:
                raise ValueError(f"grads[{i}] has shape {g.shape}, expected {p.shape}")
            if get_array_module(g) is not xp:
                raise TypeError(
                    f"grads[{i}] is a {type(g).__module__} array but params[{i}] is a "
                    f"{type(p).__module__} array"
                )
        return grads

    def step(self, grads: Any) -> None:
        """Apply one update to every parameter, in place.

        Parameters
        ----------
        grads : array or sequence of arrays
            Gradients, one per parameter, of the same shapes (and the same
            array library). They are not modified.

        Raises
        ------
        ValueError
            If the number of gradients or a shape does not match the parameters.
        """
        grads = self._check_grads(grads)
        self.step_count += 1
        t = self.step_count
        lr = self._lr
        beta1, beta2 = self.betas
        wd = self.weight_decay
        bias_correction1 = 1 - beta1**t
        bias_correction2 = 1 - beta2**t
        step_size = lr / bias_correction1
        bias_correction2_sqrt = bias_correction2**0.5
        weight1 = 1 - beta1  # torch: exp_avg.lerp_(grad, 1 - beta1)
        decoupled = self.decoupled_weight_decay
        for i, (p, g, m, v, (a, b), xp) in enumerate(
            zip(self.params, grads, self.exp_avg, self.exp_avg_sq, self._scratch, self._xps)
        ):
            dt = p.dtype.type  # scalars are cast to the parameter dtype, as in torch
            coeffs = (
                dt(1 - lr * wd) if (wd != 0 and decoupled) else None,
                dt(wd) if (wd != 0 and not decoupled) else None,
                dt(weight1) if abs(weight1) < 0.5 else None,
                dt(weight1) - dt(1),
                dt(beta2),
                dt(1 - beta2),
                dt(bias_correction2_sqrt),
                dt(self.eps),
                dt(-step_size),
                dt(-lr * wd),
            )
            s = None if self.lr_scale is None else self.lr_scale[i]
            chunk = self._chunks[i]
            if chunk is None:
                _adam_update(xp, p, g, m, v, a, b, coeffs, s)
                continue
            # cache blocking: one pass over p, g, m, v instead of a dozen
            pf, gf, mf, vf = p.reshape(-1), g.reshape(-1), m.reshape(-1), v.reshape(-1)
            sf = None if s is None else s.reshape(-1)
            size = pf.shape[0]
            for lo in range(0, size, chunk):
                hi = min(lo + chunk, size)
                k = hi - lo
                _adam_update(xp, pf[lo:hi], gf[lo:hi], mf[lo:hi], vf[lo:hi], a[:k], b[:k], coeffs,
                             None if sf is None else sf[lo:hi])

    # --------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """Return the complete optimiser state as numpy arrays and Python scalars.

        Returns
        -------
        dict
            Keys ``optimizer`` (class name), ``decoupled_weight_decay``, ``lr``,
            ``beta1``, ``beta2``, ``eps``, ``weight_decay``, ``step`` (int),
            ``num_params``, ``lr_scaled`` (bool) and, for each parameter ``i``,
            ``exp_avg_{i}`` and ``exp_avg_sq_{i}`` and, when the learning rate
            is scaled, ``lr_scale_{i}`` (numpy copies). Suitable for ``np.savez``.
        """
        state: dict[str, Any] = {
            "optimizer": self._name,
            "decoupled_weight_decay": bool(self.decoupled_weight_decay),
            "lr": self._lr,
            "beta1": self.betas[0],
            "beta2": self.betas[1],
            "eps": self.eps,
            "weight_decay": self.weight_decay,
            "step": int(self.step_count),
            "num_params": len(self.params),
            "lr_scaled": self.lr_scale is not None,
        }
        for i, (m, v) in enumerate(zip(self.exp_avg, self.exp_avg_sq)):
            state[f"exp_avg_{i}"] = np.array(to_numpy(m), copy=True)
            state[f"exp_avg_sq_{i}"] = np.array(to_numpy(v), copy=True)
            if self.lr_scale is not None:
                state[f"lr_scale_{i}"] = np.array(to_numpy(self.lr_scale[i]), copy=True)
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a state produced by :meth:`state_dict` (or loaded with ``np.load``).

        Hyper-parameters, the step count, the moment estimates and the
        learning-rate multipliers are replaced (as in PyTorch); the parameters
        themselves are not touched.  A state without ``lr_scaled`` (written
        before the multipliers existed) has none. The moments
        are copied into the existing buffers, on the parameters' backend and
        dtype. Everything is validated before anything is changed.

        Raises
        ------
        ValueError
            If a key is missing, the number of parameters, a shape or the weight
            decay flavour (Adam vs AdamW) does not match, or a value is invalid.
        """
        decoupled = bool(_item(state, "decoupled_weight_decay"))
        if decoupled != self.decoupled_weight_decay:
            kind = "decoupled (AdamW)" if decoupled else "L2 (Adam)"
            raise ValueError(f"state dict uses {kind} weight decay, but this is {self._name}")
        lr = check_positive_float("lr", _item(state, "lr"), allow_zero=True)
        betas = _check_betas((_item(state, "beta1"), _item(state, "beta2")))
        eps = check_positive_float("eps", _item(state, "eps"), allow_zero=True)
        wd = check_positive_float("weight_decay", _item(state, "weight_decay"), allow_zero=True)
        step = check_int("step", _item(state, "step"), minimum=0)
        num = check_int("num_params", _item(state, "num_params"), minimum=0)
        if num != len(self.params):
            raise ValueError(
                f"state dict holds {num} parameters, this optimiser {len(self.params)}"
            )
        moments = []
        for i, p in enumerate(self.params):
            pair = []
            for key in (f"exp_avg_{i}", f"exp_avg_sq_{i}"):
                if key not in state:
                    raise ValueError(f"state dict is missing the key {key!r}")
                arr = np.asarray(to_numpy(state[key]))
                if arr.shape != p.shape:
                    raise ValueError(
                        f"state dict entry {key!r} has shape {arr.shape}, expected {p.shape}"
                    )
                if not np.issubdtype(arr.dtype, np.floating):
                    raise ValueError(f"state dict entry {key!r} must be floating, got {arr.dtype}")
                pair.append(arr)
            moments.append(pair)
        scaled = bool(_item(state, "lr_scaled")) if "lr_scaled" in state else False
        scales = None
        if scaled:
            scales = []
            for i, (p, xp) in enumerate(zip(self.params, self._xps)):
                key = f"lr_scale_{i}"
                if key not in state:
                    raise ValueError(f"state dict is missing the key {key!r}")
                arr = np.asarray(to_numpy(state[key]))
                if arr.shape != p.shape or arr.dtype.kind not in "fiu":
                    raise ValueError(f"state dict entry {key!r} must be a real array of shape "
                                     f"{p.shape}, got dtype {arr.dtype} and shape {arr.shape}")
                if not (np.all(np.isfinite(arr)) and np.all(arr >= 0)):
                    raise ValueError(f"state dict entry {key!r} must be finite and >= 0")
                scales.append(xp.asarray(arr, dtype=p.dtype))
        self.lr = lr
        self.betas = betas
        self.eps = eps
        self.weight_decay = wd
        self.step_count = step
        for (m_arr, v_arr), m, v, xp in zip(moments, self.exp_avg, self.exp_avg_sq, self._xps):
            m[...] = xp.asarray(m_arr, dtype=m.dtype)
            v[...] = xp.asarray(v_arr, dtype=v.dtype)
        self.lr_scale = scales


class AdamW(Adam):
    """AdamW (Loshchilov & Hutter): Adam with decoupled weight decay, as in PyTorch.

    Before the moment update each parameter is multiplied by ``1 - lr * wd``;
    the gradient itself is not changed. Other parameters and attributes as in
    :class:`Adam`; note PyTorch's default ``weight_decay=1e-2``.
    """

    decoupled_weight_decay = True
    _name = "AdamW"

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        lr_scale: Any = None,
    ) -> None:
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         lr_scale=lr_scale)


class ReduceLROnPlateau:
    """Reduce an optimiser's learning rate when a metric stops improving.

    Exact re-implementation of ``torch.optim.lr_scheduler.ReduceLROnPlateau``
    for one learning rate (one parameter group).

    On each :meth:`step` the metric is compared with the best value so far:
    it is an improvement if ``metric < best * (1 - threshold)`` (``mode="min"``,
    ``threshold_mode="rel"``), ``metric < best - threshold`` (min, abs),
    ``metric > best * (1 + threshold)`` (max, rel) or ``metric > best + threshold``
    (max, abs); the first metric always improves on ``best = +inf`` (min) or
    ``-inf`` (max). A non-improving step increments ``num_bad_epochs``; while
    in cooldown the counter is reset to 0. When ``num_bad_epochs > patience``
    (the ``patience + 1``-th consecutive bad step) the learning rate becomes
    ``max(lr * factor, min_lr)`` if that lowers it by more than ``eps``, the
    cooldown starts and ``num_bad_epochs`` is reset.

    Parameters
    ----------
    optimizer : object with a mutable float attribute ``lr``
        Typically :class:`Adam` or :class:`AdamW`.
    mode : {"min", "max"}, default "min"
    factor : float, default 0.1
        Multiplicative reduction, ``0 <= factor < 1``.
    patience : int, default 10
        Number of bad steps tolerated, ``>= 0``.
    threshold : float, default 1e-4
        Significance threshold, ``>= 0``.
    threshold_mode : {"rel", "abs"}, default "rel"
    cooldown : int, default 0
        Steps after a reduction during which bad steps are not counted, ``>= 0``.
    min_lr : float, default 0.0
        Lower bound for the learning rate, ``>= 0``.
    eps : float, default 1e-8
        Reductions smaller than this are skipped, ``>= 0``.

    Attributes
    ----------
    best : float
        Best metric so far.
    num_bad_epochs, cooldown_counter, last_epoch : int
        Counters, as in PyTorch (``last_epoch`` counts :meth:`step` calls).
    last_lr : float
        The optimiser's learning rate after the latest step (initially its
        current learning rate).
    """

    def __init__(
        self,
        optimizer: Any,
        mode: str = "min",
        factor: float = 0.1,
        patience: int = 10,
        threshold: float = 1e-4,
        threshold_mode: str = "rel",
        cooldown: int = 0,
        min_lr: float = 0.0,
        eps: float = 1e-8,
    ) -> None:
        if not hasattr(optimizer, "lr"):
            raise TypeError(
                "optimizer must have a learning-rate attribute 'lr', "
                f"got {type(optimizer).__name__}"
            )
        self.optimizer = optimizer
        self._set_config(mode, factor, patience, threshold, threshold_mode, cooldown, min_lr, eps)
        self.last_epoch = 0
        self.last_lr = float(optimizer.lr)
        self._reset()

    def _set_config(
        self,
        mode: str,
        factor: float,
        patience: int,
        threshold: float,
        threshold_mode: str,
        cooldown: int,
        min_lr: float,
        eps: float,
    ) -> None:
        mode = check_choice("mode", mode, ("min", "max"))
        factor = check_positive_float("factor", factor, allow_zero=True)
        if factor >= 1.0:
            raise ValueError(f"factor must be < 1, got {factor}")
        patience = check_int("patience", patience, minimum=0)
        threshold = check_positive_float("threshold", threshold, allow_zero=True)
        threshold_mode = check_choice("threshold_mode", threshold_mode, ("rel", "abs"))
        cooldown = check_int("cooldown", cooldown, minimum=0)
        min_lr = check_positive_float("min_lr", min_lr, allow_zero=True)
        eps = check_positive_float("eps", eps, allow_zero=True)
        self.mode = mode
        self.factor = factor
        self.patience = patience
        self.threshold = threshold
        self.threshold_mode = threshold_mode
        self.cooldown = cooldown
        self.min_lr = min_lr
        self.eps = eps
        self.mode_worse = math.inf if mode == "min" else -math.inf

    def _reset(self) -> None:
        self.best = self.mode_worse
        self.cooldown_counter = 0
        self.num_bad_epochs = 0

    def __repr__(self) -> str:
        return (
            f"ReduceLROnPlateau(mode={self.mode!r}, factor={self.factor!r}, "
            f"patience={self.patience}, threshold={self.threshold!r}, "
            f"threshold_mode={self.threshold_mode!r}, cooldown={self.cooldown}, "
            f"min_lr={self.min_lr!r}, eps={self.eps!r}, best={self.best!r}, "
            f"num_bad_epochs={self.num_bad_epochs}, last_lr={self.last_lr!r})"
        )

    @property
    def in_cooldown(self) -> bool:
        """True while the cooldown after a reduction is running."""
        return self.cooldown_counter > 0

    def is_better(self, a: float, best: float) -> bool:
        """PyTorch's ``_is_better``: does ``a`` improve significantly on ``best``?"""
        if self.mode == "min" and self.threshold_mode == "rel":
            return a < best * (1.0 - self.threshold)
        if self.mode == "min":
            return a < best - self.threshold
        if self.threshold_mode == "rel":
            return a > best * (self.threshold + 1.0)
        return a > best + self.threshold

    def step(self, metric: Any) -> None:
        """Record one metric value and reduce the learning rate if it has plateaued.

        Parameters
        ----------
        metric : float
            Any value ``float()`` accepts (a Python or 0-d numpy/cupy scalar).
            NaN never counts as an improvement.
        """
        current = float(metric)
        self.last_epoch += 1
        if self.is_better(current, self.best):
            self.best = current
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.in_cooldown:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0  # ignore any bad epochs in cooldown
        if self.num_bad_epochs > self.patience:
            old_lr = float(self.optimizer.lr)
            new_lr = max(old_lr * self.factor, self.min_lr)
            if old_lr - new_lr > self.eps:
                self.optimizer.lr = new_lr
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self.last_lr = float(self.optimizer.lr)

    _KEYS = (
        "mode",
        "factor",
        "patience",
        "threshold",
        "threshold_mode",
        "cooldown",
        "min_lr",
        "eps",
        "best",
        "num_bad_epochs",
        "cooldown_counter",
        "last_epoch",
        "last_lr",
    )

    def state_dict(self) -> dict[str, Any]:
        """Return the scheduler state (configuration and counters) as Python scalars.

        The optimiser is not included (save its own :meth:`Adam.state_dict`).
        """
        return {key: getattr(self, key) for key in self._KEYS}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a state produced by :meth:`state_dict` (or loaded with ``np.load``).

        The optimiser's learning rate is not changed (restore the optimiser's
        own state for that), as in PyTorch.

        Raises
        ------
        ValueError
            If a key is missing or a value is invalid.
        """
        values = {key: _item(state, key) for key in self._KEYS}
        best = float(values["best"])
        if math.isnan(best):
            raise ValueError("best must not be NaN")
        counters = {
            key: check_int(key, values[key], minimum=0)
            for key in ("num_bad_epochs", "cooldown_counter", "last_epoch")
        }
        last_lr = check_positive_float("last_lr", values["last_lr"], allow_zero=True)
        self._set_config(
            str(values["mode"]),
            values["factor"],
            values["patience"],
            values["threshold"],
            str(values["threshold_mode"]),
            values["cooldown"],
            values["min_lr"],
            values["eps"],
        )
        self.best = best
        self.num_bad_epochs = counters["num_bad_epochs"]
        self.cooldown_counter = counters["cooldown_counter"]
        self.last_epoch = counters["last_epoch"]
        self.last_lr = last_lr
