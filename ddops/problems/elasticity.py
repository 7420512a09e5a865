"""Null spaces of linear elasticity: the rigid body modes."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .._validation import check_dtype

__all__ = ["rigid_body_modes"]


def rigid_body_modes(coordinates, *, center: bool = True, dtype=np.float64) -> np.ndarray:
    r"""The rigid body modes of linear elasticity at the given nodes.

    In 2D: the translations in ``x`` and ``y`` and the rotation ``(-y, x)``; in 3D: the three
    translations and the rotations about the ``x``, ``y`` and ``z`` axes, ``(0, -z, y)``,
    ``(z, 0, -x)`` and ``(-y, x, 0)``.  They span the null space of the stiffness matrix of
    a body without Dirichlet conditions (pure traction problem) for any discretisation whose
    displacement space contains the linear functions (P1, Q1, ...).

    Parameters
    ----------
    coordinates : array_like
        ``(m, d)`` node coordinates, ``d`` = 2 or 3.
    center : bool
        Rotate about the centroid of the nodes instead of the origin.  The span is the same;
        centring makes the rotations nearly orthogonal to the translations, which keeps
        coarse matrices built from the modes better conditioned far from the origin.
    dtype : numpy dtype
        ``float32`` or ``float64``.

    Returns
    -------
    numpy.ndarray
        ``(d m, 3)`` in 2D, ``(d m, 6)`` in 3D, in interleaved (node-major) dof order: rows
        ``d k, ..., d k + d - 1`` are the displacement components of node ``k``, the order of
        :func:`ddops.problems.fem.fem_elasticity_2d` and of pyamg's gallery.  Columns:
        translations first, then rotations.

    Examples
    --------
    >>> import numpy as np
    >>> from ddops.problems import rigid_body_modes
    >>> Z = rigid_body_modes(np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]]), center=False)
    >>> Z.shape, Z[1::2, 2].tolist()  # y-displacement of the rotation (-y, x): x
    ((6, 3), [0.0, 1.0, 0.0])
    """
    if sp.issparse(coordinates):
        raise TypeError("coordinates must be a dense (m, d) array, got a sparse matrix")
    dtype = check_dtype(dtype)
    try:
        x = np.asarray(coordinates, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"coordinates must be a real (m, d) array, got {type(coordinates).__name__}"
        ) from exc
    if x.ndim != 2 or x.shape[1] not in (2, 3) or x.shape[0] < 1:
        raise ValueError(f"coordinates must have shape (m, 2) or (m, 3) with m >= 1, got {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("coordinates contain NaN or inf")
    if center:
        x = x - x.mean(axis=0)
    m, d = x.shape
    if d == 2:
        # Z[node, component, mode]
        Z = np.zeros((m, 2, 3))
        Z[:, 0, 0] = 1.0
        Z[:, 1, 1] = 1.0
        Z[:, 0, 2] = -x[:, 1]
        Z[:, 1, 2] = x[:, 0]
    else:
        Z = np.zeros((m, 3, 6))
        Z[:, 0, 0] = Z[:, 1, 1] = Z[:, 2, 2] = 1.0
        Z[:, 1, 3], Z[:, 2, 3] = -x[:, 2], x[:, 1]  # about x
        Z[:, 0, 4], Z[:, 2, 4] = x[:, 2], -x[:, 0]  # about y
        Z[:, 0, 5], Z[:, 1, 5] = -x[:, 1], x[:, 0]  # about z
    return Z.reshape(m * d, -1).astype(dtype, copy=False)
