"""Cheap indicators that decide which local eigenproblems of an adaptive coarse space run.

The adaptive spaces add the functions a classical coarse space misses because the
coefficient varies across an interface component (a channel or an inclusion that
crosses it).  Where the coefficient hardly varies around a component, its eigenproblem
selects what the geometry of the parts selects, not what the contrast does, and GDSW's
functions on that component are already stable with a constant that depends on that
variation only.  :func:`component_contrast` measures the variation from the matrix
alone, before any Schur complement is formed; :func:`subdomain_contrast` measures it over
an overlapping subdomain and its neighbours, for GenEO's optional indicator.

The measure is the spread of the diagonal of ``A`` (per node, the trace of its
``block_size x block_size`` diagonal block, which does not depend on the axes) over the
closures of the parts around a component (their unknowns and the interface unknowns
around them).  For a diffusion or elasticity matrix ``a_ii`` is the coefficient
integrated over the support of unknown ``i``'s basis function, scaled by the mesh: on a
homogeneous problem the spread is that of the mesh (1 on a grid, below 10 on the
tetrahedral meshes of the tests), and any channel, inclusion or jump of ratio ``r`` in
the closure makes it at least about ``r`` (a node inside the stiff region against a
node outside it).  It is an indicator, not a bound: a component it skips keeps GDSW's
functions only (see :data:`ddops.dd.agdsw.AGDSW_SKIP_CONTRAST`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from .._validation import check_positive_float
from .interface import InterfaceComponents

__all__ = ["check_skip_contrast", "component_contrast", "subdomain_contrast"]


def check_skip_contrast(value: Any, default: float) -> float:
    """The contrast below which an eigenproblem is skipped: ``default`` for None, else a
    float ``>= 0`` (0: skip none)."""
    if value is None:
        return default
    return check_positive_float("skip_contrast", value, allow_zero=True)


def _node_diagonal(diagonal: np.ndarray, block_size: int) -> np.ndarray:
    """Per unknown, its node's diagonal (the trace of the node's diagonal block), with a
    non-positive value (not SPD, or a zero row) as 0, which never counts as homogeneous."""
    d = np.asarray(diagonal, dtype=np.float64)
    if block_size > 1:
        d = np.repeat(d.reshape(-1, block_size).sum(axis=1), block_size)
    return np.where(d > 0, d, 0.0)


def _extremes(label: np.ndarray, high: np.ndarray, low: np.ndarray,
              count: int) -> tuple[np.ndarray, np.ndarray]:
    """The largest of ``high`` and the smallest of ``low`` per label (``count`` labels)."""
    top = np.zeros(count)
    bottom = np.full(count, np.inf)
    np.maximum.at(top, label, high)
    np.minimum.at(bottom, label, low)
    return top, bottom


def _spread(top: np.ndarray, bottom: np.ndarray) -> np.ndarray:
    """``top / bottom``, ``inf`` where ``bottom`` is not positive."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(bottom > 0, top / bottom, np.inf)


def component_contrast(A, comps: InterfaceComponents, block_size: int = 1) -> np.ndarray:
    """The spread of the diagonal of ``A`` around every interface component.

    Parameters
    ----------
    A : scipy.sparse matrix
        The ``n x n`` matrix of the partition.
    comps : InterfaceComponents
        The interface components of a non-overlapping partition
        (:func:`ddops.dd.interface.classify_interface`).
    block_size : int
        Unknowns per node: the diagonal of a node is the trace of its diagonal block.

    Returns
    -------
    numpy.ndarray
        ``max / min`` of the node diagonals over the closures (the part's unknowns and the
        interface unknowns of its components) of the parts that touch each component,
        one entry per component; ``inf`` where a diagonal entry there is not positive.
    """
    d = _node_diagonal(A.diagonal(), block_size)
    N = comps.num_parts
    P = comps.parts.tocsr()
    # the closure of part p: the unknowns it owns and the interface unknowns of its components
    around = P[comps.component].tocoo()  # (interface position, part) pairs
    part = np.concatenate([comps.owner, around.col])
    value = np.concatenate([d, d[comps.interface[around.row]]])
    high, low = _extremes(part, value, value, N)
    pairs = P.tocoo()  # (component, part) pairs
    return _spread(*_extremes(pairs.row, high[pairs.col], low[pairs.col], P.shape[0]))


def subdomain_contrast(diagonal: np.ndarray, decomposition, block_size: int = 1) -> np.ndarray:
    """The spread of the diagonal of ``A`` around every (overlapping) subdomain.

    The spread (``max / min`` of the node diagonals, as :func:`component_contrast`) over
    the subdomain and every subdomain that overlaps it: a subdomain inside a homogeneous
    region whose neighbour has another coefficient (a jump along its boundary, or a smooth
    field that changes from one subdomain to the next) is not homogeneous for the
    coarse space, whose functions on it must match those of its neighbours.

    Parameters
    ----------
    diagonal : numpy.ndarray
        The diagonal of ``A`` (``n`` entries).
    decomposition : Decomposition
        Its overlapping subdomains (``indices``, ``sizes``).
    block_size : int
        Unknowns per node: the diagonal of a node is the trace of its diagonal block.

    Returns
    -------
    numpy.ndarray
        One entry per subdomain; ``inf`` where a diagonal entry there is not positive.
    """
    d = _node_diagonal(diagonal, block_size)
    sizes = np.asarray(decomposition.sizes, dtype=np.int64)
    N = sizes.size
    group = np.repeat(np.arange(N), sizes)
    values = d[decomposition.indices]
    top, bottom = _extremes(group, values, values, N)
    # over the overlapping neighbours (and itself, on the diagonal of inc inc^T)
    inc = sp.csr_matrix((np.ones(group.size), (group, decomposition.indices)),
                        shape=(N, d.size))
    adj = (inc @ inc.T).tocoo()
    return _spread(*_extremes(adj.row, top[adj.col], bottom[adj.col], N))
