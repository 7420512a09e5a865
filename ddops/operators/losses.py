"""Regression losses on blocks of solutions and their gradients.

Each loss takes a prediction ``P`` and a target ``U`` of shape ``(n, B)`` (one
sample per column) and returns the value and ``dL/dP``.  The gradient is
written into a buffer that may alias the caller's scratch space, so one
training step allocates no more than it must.
"""

from __future__ import annotations

from typing import Any

from .._validation import check_choice
from ..backend import get_array_module

__all__ = ["LOSSES", "WMSE_EPS", "loss_and_grad", "loss_and_scaled_grad", "loss_value"]

#: Losses known to :func:`loss_and_grad`: the paper's weighted MSE (section 5.1),
#: the plain mean squared error and the energy error ``(P - U)^T W (P - U)`` for
#: an SPD weight ``W`` (the ``A``-norm of the error when ``W = A``).
LOSSES = ("wmse", "mse", "energy")

#: Floor of the weight denominator of the weighted MSE (the paper's epsilon).
WMSE_EPS = 1e-30


def _column_sq_norms(xp, X):
    return xp.einsum("ij,ij->j", X, X)


def loss_and_grad(name: str, P: Any, U: Any, out: Any = None, eps: float = WMSE_EPS,
                  weight: Any = None):
    """Loss value and its gradient with respect to the prediction.

    Parameters
    ----------
    name : {"wmse", "mse", "energy"}
        ``"wmse"``: ``(1/B) sum_b (||P_b - U_b||^2 / n) / max(||U_b||^2 / n, eps)``,
        the per-sample relative error of the paper.  ``"mse"``: the mean of
        ``(P - U)^2`` over all entries (PyTorch's ``MSELoss``).  ``"energy"``:
        ``sum_b (P_b - U_b)^T W (P_b - U_b) / (n B)``.
    P, U : array, shape (n, B)
        Prediction and exact solutions.
    out : array, optional
        Buffer for the gradient (same shape and dtype as ``P``); may be ``P``.
    eps : float
        Denominator floor of the weighted MSE.
    weight : sparse matrix or array, optional
        The symmetric weight ``W`` of ``"energy"`` (required there, on the
        backend of ``P``).

    Returns
    -------
    value : 0-d array
        The loss (left on the device; convert with ``float`` when needed).
    grad : array, shape (n, B)
        ``dL/dP``.
    """
    value, G, scale = loss_and_scaled_grad(name, P, U, out=out, eps=eps, weight=weight)
    grad = G if out is None else out
    get_array_module(P).multiply(G, scale, out=grad)
    return value, grad


def loss_and_scaled_grad(name: str, P: Any, U: Any, out: Any = None, eps: float = WMSE_EPS,
                         weight: Any = None):
    """Loss value and its gradient as ``G * scale``, with the column scaling left apart.

    Every loss here has a gradient ``G diag(s)``: ``G = P - U`` (``W (P - U)``
    for ``"energy"``) times a per-column factor ``s`` (a scalar for ``"mse"``
    and ``"energy"``).  A backward pass multiplies ``G`` by restrictions and
    factors; applying ``s`` afterwards to the ``r x B`` intermediates instead
    of the ``n x B`` block saves a full pass over the batch.

    Parameters
    ----------
    name, P, U, out, eps, weight
        As in :func:`loss_and_grad`.

    Returns
    -------
    value : 0-d array
        The loss.
    G : array, shape (n, B)
        The unscaled gradient (written into ``out`` except for ``"energy"``).
    scale : float or array, shape (B,)
        ``dL/dP = G * scale`` (broadcast over rows).
    """
    check_choice("loss", name, LOSSES)
    xp = get_array_module(P)
    n, B = P.shape
    diff = xp.subtract(P, U, out=out)
    if name == "mse":
        return xp.vdot(diff.ravel(), diff.ravel()) / (n * B), diff, 2.0 / (n * B)
    if name == "energy":
        if weight is None:
            raise ValueError("loss='energy' needs the weight matrix (weight=)")
        Wd = weight @ diff  # d/dP of the quadratic form, W symmetric
        return xp.vdot(diff.ravel(), Wd.ravel()) / (n * B), Wd, 2.0 / (n * B)
    err = _column_sq_norms(xp, diff) / n
    denom = xp.maximum(_column_sq_norms(xp, U) / n, eps)
    value = xp.sum(err / denom) / B
    # d/dP_b of ||P_b - U_b||^2 / (n B denom_b) = 2 (P_b - U_b) / (n B denom_b)
    return value, diff, (2.0 / (n * B) / denom).astype(diff.dtype)


def loss_value(name: str, P: Any, U: Any, eps: float = WMSE_EPS, weight: Any = None):
    """The loss of :func:`loss_and_grad` without the gradient (no input is modified)."""
    return loss_and_grad(name, P, U, eps=eps, weight=weight)[0]
