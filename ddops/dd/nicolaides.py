"""The Nicolaides coarse space: the null space cut into subdomains by the partition of unity.

One coarse function ``R_i^T D_i R_i Z[:, a]`` per overlapping subdomain ``i`` and null-space
vector ``a``; it needs the decomposition only, no matrix.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from .._validation import check_positive_float
from .groups import DEPENDENCE_RTOL, columns_from_groups, independent_vectors
from .validation import check_null_space

__all__ = ["nicolaides_basis"]


def nicolaides_basis(
    decomposition: Any,
    null_space: Any = None,
    *,
    dependence_rtol: float = DEPENDENCE_RTOL,
) -> sp.csr_matrix:
    """Partition-of-unity (Nicolaides) coarse basis ``R_i^T D_i R_i Z`` for a null space.

    One column per subdomain ``i`` and null-space vector ``a``:
    ``R_i^T D_i R_i Z[:, a]``, so the columns of one vector sum to it
    (``sum_i R_i^T D_i R_i = I``).  With constants this is
    ``coarse_basis(d, "pou")``.  Vectors dependent on a subdomain (after the
    weighting) are dropped there, as in :func:`ddops.dd.gdsw.gdsw_basis`.

    Parameters
    ----------
    decomposition : Decomposition
        The overlapping decomposition (``R_i``, ``D_i``).
    null_space : array, shape (num_dofs, k) or (num_dofs,), optional
        Default: constants.
    dependence_rtol : float
        See :data:`~ddops.dd.groups.DEPENDENCE_RTOL`.

    Returns
    -------
    scipy.sparse.csr_matrix
        ``num_dofs x n0`` (``n0 = N k`` when nothing is dependent), ordered
        by subdomain, then vector.
    """
    d = decomposition
    for name in ("indices", "sizes", "num_subdomains", "num_dofs", "entry_weights"):
        if not hasattr(d, name):
            raise TypeError("decomposition must be a ddops Decomposition, got "
                            f"{type(d).__name__}")
    rtol = check_positive_float("dependence_rtol", dependence_rtol)
    Z = check_null_space(null_space, d.num_dofs)
    group = np.repeat(np.arange(d.num_subdomains), d.sizes)
    values = d.entry_weights("full")[:, None] * Z[d.indices]
    keep = independent_vectors(group, values, d.num_subdomains, rtol)
    Phi, _ = columns_from_groups(d.indices, group, values, keep, d.num_dofs)
    return Phi
