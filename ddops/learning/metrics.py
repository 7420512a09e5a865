"""Accuracy metrics of a learned operator against the exact inverse.

No dense ``n x n`` matrix is ever formed: the Frobenius error is accumulated
over blocks of unit vectors, and above a size limit (which the caller can
raise) it is replaced by a clearly labelled randomised estimate.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import check_int
from ..backend import to_numpy
from ..operators import LowRankOperator
from ..operators.losses import loss_value
from .spectral import best_rank_error, inverse_eigenvalues

__all__ = ["EXACT_FRO_LIMIT", "operator_fro_error", "relative_l2_errors", "evaluate"]

#: Largest ``n`` for which :func:`operator_fro_error` computes the exact error
#: (``O(n^2)`` work, ``O(n * block)`` memory) unless the caller raises it.
EXACT_FRO_LIMIT = 16384


def operator_fro_error(op: LowRankOperator, solve: Any, exact_limit: int | None = None,
                       probes: int = 64, seed: int = 0, block: int = 256) -> tuple[float, str]:
    """``||M - A^{-1}||_F``, exactly up to a size limit, else a sampled estimate.

    Parameters
    ----------
    op : LowRankOperator
        The operator ``M``.
    solve : callable
        ``solve(X) -> A^{-1} X`` for ``n x k`` numpy blocks.
    exact_limit : int, optional
        Largest ``n`` computed exactly (default :data:`EXACT_FRO_LIMIT`).
    probes : int
        Rademacher probes of the estimate ``||E||_F^2 = E_z ||E z||^2``.
    seed : int
        Seed of the probes.
    block : int
        Columns per block.

    Returns
    -------
    error : float
    method : str
        ``"exact"`` or ``"sampled (k Rademacher probes)"``.
    """
    n = op.shape[0]
    limit = EXACT_FRO_LIMIT if exact_limit is None else check_int("exact_limit", exact_limit)
    xp = op.xp
    total = 0.0
    if n <= limit:
        for start in range(0, n, block):
            cols = np.arange(start, min(start + block, n))
            E = np.zeros((n, cols.size))
            E[cols, np.arange(cols.size)] = 1.0
            diff = to_numpy(op._apply(xp.asarray(E, dtype=op.dtype), False)) - solve(E)
            total += float(np.sum(diff * diff))
        return float(np.sqrt(total)), "exact"
    probes = check_int("probes", probes, minimum=1)
    rng = np.random.default_rng(seed)
    for start in range(0, probes, block):
        k = min(block, probes - start)
        Z = rng.choice([-1.0, 1.0], size=(n, k))
        diff = to_numpy(op._apply(xp.asarray(Z, dtype=op.dtype), False)) - solve(Z)
        total += float(np.sum(diff * diff))
    return float(np.sqrt(total / probes)), f"sampled ({probes} Rademacher probes)"


def relative_l2_errors(P: Any, U: Any) -> np.ndarray:
    """Per-column ``||P_b - U_b|| / ||U_b||``."""
    P, U = np.asarray(to_numpy(P)), np.asarray(to_numpy(U))
    return np.linalg.norm(P - U, axis=0) / np.linalg.norm(U, axis=0)


def model_metrics(op: LowRankOperator, validation: tuple[Any, Any],
                  evaluation: tuple[Any, Any], loss: str, errors: dict[str, Any]) -> dict[str, Any]:
    """The metrics dict of one model: sizes, the validation loss, ``errors``, evaluation errors.

    ``errors`` holds the operator-error entries (``operator_fro_error`` ...),
    which depend on how ``A^{-1}`` is known; they are placed between
    ``val_loss`` and the relative errors on the evaluation set.
    """
    xp = op.xp
    Fv, Uv = (xp.asarray(a, dtype=op.dtype) for a in validation)
    Fe, Ue = evaluation
    rel = relative_l2_errors(op._apply(xp.asarray(Fe, dtype=op.dtype), False), Ue)
    return {
        "num_params": int(op.num_params),
        "rank_bound": int(op.rank_bound),
        "val_loss": float(loss_value(loss, op._apply(Fv, False), Uv)),
        **errors,
        "mean_rel_l2": float(rel.mean()),
        "max_rel_l2": float(rel.max()),
    }


def evaluate(op: LowRankOperator, A: Any, solve: Any, validation: tuple[Any, Any],
             evaluation: tuple[Any, Any], loss: str = "wmse",
             exact_limit: int | None = None) -> dict[str, Any]:
    """The metrics reported for one trained model.

    Returns a dict with ``num_params``, ``rank_bound``, ``val_loss``,
    ``operator_fro_error`` (absolute), ``operator_rel_fro_error``,
    ``operator_error_method``, ``best_rank_fro_error`` (rank = the model's rank
    bound), ``mean_rel_l2`` and ``max_rel_l2`` on the evaluation set.
    """
    err, method = operator_fro_error(op, solve, exact_limit)
    inv_norm = float(np.sqrt(np.sum(inverse_eigenvalues(A) ** 2)))
    return model_metrics(op, validation, evaluation, loss, {
        "operator_fro_error": err,
        "operator_rel_fro_error": err / inv_norm,
        "operator_error_method": method,
        "best_rank_fro_error": best_rank_error(A, op.rank_bound),
    })
