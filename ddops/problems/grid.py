"""Finite-difference model problems on the unit square and cube.

Conventions shared by every function here:

- ``n`` interior grid points per direction, mesh width ``h = 1/(n + 1)``, homogeneous
  Dirichlet values on the boundary (the ``kind="dof"`` convention of
  :func:`ddops.problems.poisson1d.poisson_1d`).
- Lexicographic numbering with ``x`` fastest: the unknown at the grid point
  ``((i + 1) h, (j + 1) h, (k + 1) h)`` has index ``i + n j + n^2 k``, so a vector ``u`` of
  unknowns reshapes (C order) to ``u.reshape(n, n)[j, i]`` or ``u.reshape(n, n, n)[k, j, i]``.
- Finite-difference scaling ``h^-2``, as in :func:`ddops.problems.poisson1d.poisson_1d`: the 5-point
  stencil is ``h^-2 (4, -1, -1, -1, -1)``, the 7-point stencil ``h^-2 (6, -1, ..., -1)``.
- Matrices are CSR with sorted indices and no explicit zeros; they are assembled with
  Kronecker products and sparse products, never with a loop over the unknowns.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .._validation import check_dtype, check_int, check_positive_float

__all__ = [
    "grid_coordinates",
    "poisson_2d",
    "poisson_3d",
    "diffusion_2d",
    "diffusion_3d",
    "high_contrast_channels",
]


def _check_n(n) -> int:
    return check_int("n", n, minimum=1)


def _mesh_width(n: int) -> float:
    return 1.0 / (n + 1)


def _inv_h2(n: int) -> float:
    # The same rounding as poisson_1d(kind="dof"): h = 1/(n + 1), then 1/h**2, so that the
    # stencils here agree with Kronecker sums of poisson_1d bit for bit.
    return 1.0 / _mesh_width(n) ** 2


def grid_coordinates(n: int, dim: int) -> np.ndarray:
    """Coordinates of the interior grid points in lexicographic order.

    Parameters
    ----------
    n : int
        Number of interior grid points per direction (``h = 1/(n + 1)``).
    dim : {1, 2, 3}
        Space dimension.

    Returns
    -------
    numpy.ndarray
        ``(n**dim, dim)`` float64 array; row ``i + n j + n^2 k`` is
        ``((i + 1) h, (j + 1) h, (k + 1) h)`` (``x`` fastest).
    """
    n = _check_n(n)
    dim = check_int("dim", dim)
    if dim not in (1, 2, 3):
        raise ValueError(f"dim must be 1, 2 or 3, got {dim}")
    h = _mesh_width(n)
    index = np.arange(n**dim)
    coords = np.empty((n**dim, dim))
    for d in range(dim):  # at most three columns
        coords[:, d] = ((index // n**d) % n + 1) * h
    return coords


def _laplacian_1d(n: int) -> sp.csr_matrix:
    inv_h2 = _inv_h2(n)
    off = np.full(n - 1, -inv_h2)
    return sp.diags([off, np.full(n, 2 * inv_h2), off], [-1, 0, 1], format="csr")


def _kron(A, B) -> sp.csr_matrix:
    # COO then CSR: several times faster than scipy's kron(..., format="csr"), which goes
    # through BSR blocks
    return sp.kron(A, B, format="coo").tocsr()


def _finish(A, dtype, return_coordinates: bool, n: int, dim: int):
    A = sp.csr_matrix(A, dtype=dtype)
    A.sum_duplicates()
    A.eliminate_zeros()
    A.sort_indices()
    if return_coordinates:
        return A, grid_coordinates(n, dim)
    return A


def poisson_2d(n: int, *, dtype=np.float64, return_coordinates: bool = False):
    """The 5-point finite-difference Laplacian on the unit square.

    ``A = I (x) T + T (x) I`` with ``T = h^-2 tridiag(-1, 2, -1)`` of size ``n`` (the
    Kronecker sum; ``x`` is the fast index).

    Parameters
    ----------
    n : int
        Number of interior grid points per direction, ``h = 1/(n + 1)``; ``n**2`` unknowns.
    dtype : numpy dtype
        ``float32`` or ``float64``.
    return_coordinates : bool
        Also return the ``(n**2, 2)`` grid coordinates (see :func:`grid_coordinates`).

    Returns
    -------
    A : scipy.sparse.csr_matrix
        Symmetric positive definite, ``n**2 x n**2``, stencil ``h^-2 (4, -1, -1, -1, -1)``.
    coordinates : numpy.ndarray
        Only with ``return_coordinates=True``.

    Examples
    --------
    >>> from ddops.problems import poisson_2d
    >>> A, xy = poisson_2d(3, return_coordinates=True)
    >>> A.shape, xy[1].tolist()
    ((9, 9), [0.5, 0.25])
    """
    n = _check_n(n)
    dtype = check_dtype(dtype)
    T = _laplacian_1d(n)
    eye = sp.identity(n, format="csr")
    A = _kron(eye, T) + _kron(T, eye)
    return _finish(A, dtype, return_coordinates, n, 2)


def poisson_3d(n: int, *, dtype=np.float64, return_coordinates: bool = False):
    """The 7-point finite-difference Laplacian on the unit cube.

    ``A = I (x) I (x) T + I (x) T (x) I + T (x) I (x) I`` with
    ``T = h^-2 tridiag(-1, 2, -1)`` of size ``n``.

    Parameters
    ----------
    n : int
        Number of interior grid points per direction, ``h = 1/(n + 1)``; ``n**3`` unknowns.
    dtype : numpy dtype
        ``float32`` or ``float64``.
    return_coordinates : bool
        Also return the ``(n**3, 3)`` grid coordinates (see :func:`grid_coordinates`).

    Returns
    -------
    A : scipy.sparse.csr_matrix
        Symmetric positive definite, ``n**3 x n**3``, stencil ``h^-2 (6, -1, ..., -1)``.
    coordinates : numpy.ndarray
        Only with ``return_coordinates=True``.
    """
    n = _check_n(n)
    dtype = check_dtype(dtype)
    T = _laplacian_1d(n)
    eye = sp.identity(n, format="csr")
    eye2 = sp.identity(n * n, format="csr")
    A = _kron(eye2, T) + _kron(_kron(eye, T), eye) + _kron(T, eye2)
    return _finish(A, dtype, return_coordinates, n, 3)


def _check_coefficient(coefficient, dim: int) -> np.ndarray:
    if sp.issparse(coefficient):
        raise TypeError("coefficient must be a dense array of cell values, got a sparse matrix")
    try:
        c = np.asarray(coefficient, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        kind = type(coefficient).__name__
        raise TypeError(f"coefficient must be a real array, got {kind}") from exc
    if c.ndim != dim or len(set(c.shape)) != 1 or c.shape[0] < 2:
        want = " x ".join(["(n + 1)"] * dim)
        raise ValueError(
            f"coefficient must be a {want} array of cell values with n >= 1, got shape {c.shape}"
        )
    if not np.all(np.isfinite(c)):
        raise ValueError("coefficient contains NaN or inf")
    if not np.all(c > 0):
        raise ValueError(f"coefficient must be > 0 in every cell, got minimum {c.min()}")
    return c


def _difference_1d(n: int) -> sp.csr_matrix:
    """The ``(n + 1) x n`` edge-difference matrix ``(D u)_e = u_e - u_{e-1}``, Dirichlet ends."""
    ones = np.ones(n)
    return sp.diags([ones, -ones], [0, -1], shape=(n + 1, n), format="csr")


def _edge_term(D_dir: sp.csr_matrix, eyes: list, axis: int, weights: np.ndarray):
    """``G^T diag(w) G`` for the differences ``G`` along one axis of the grid."""
    # Kronecker factors in C order of the unknowns: slowest axis first.
    factors = [D_dir if a == axis else eyes[a] for a in reversed(range(len(eyes)))]
    G = factors[0]
    for f in factors[1:]:
        G = _kron(G, f)
    return (G.T @ sp.diags(weights.ravel()) @ G).tocsr()


def diffusion_2d(coefficient, *, dtype=np.float64, return_coordinates: bool = False):
    r"""Variable-coefficient diffusion ``-div(c grad u)`` on the unit square.

    Vertex-centred finite volumes on the grid of :func:`poisson_2d` with a coefficient that
    is constant on each of the ``(n + 1)^2`` grid cells.  The flux between two neighbouring
    grid points crosses the dual-cell face that is split between the two grid cells on either
    side of their edge, so the edge carries the **arithmetic mean** of those two cell values:

    .. math::

        (A u)_p = h^{-2} \sum_{q \sim p} \tfrac12 (c_{e,1} + c_{e,2}) (u_p - u_q),

    scaled by ``h^-2`` like :func:`poisson_2d` (the finite-volume matrix divided by the
    dual-cell area ``h^2``).  Equivalently, every cell adds ``c / (2 h^2)`` to each of its
    four edges.  For ``c = 1`` it is :func:`poisson_2d` exactly; for a smooth coefficient
    sampled at the cell centres it is second-order accurate.

    Parameters
    ----------
    coefficient : array_like
        ``(n + 1, n + 1)`` positive cell values, indexed ``coefficient[j, i]`` for the cell
        ``[i h, (i + 1) h] x [j h, (j + 1) h]`` (row = ``y``, column = ``x``; the same C order
        as the unknowns).
    dtype : numpy dtype
        ``float32`` or ``float64``.
    return_coordinates : bool
        Also return the ``(n**2, 2)`` grid coordinates.

    Returns
    -------
    A : scipy.sparse.csr_matrix
        Symmetric positive definite, ``n**2 x n**2``, 5-point pattern.
    coordinates : numpy.ndarray
        Only with ``return_coordinates=True``.

    See Also
    --------
    high_contrast_channels : a high-contrast coefficient for this function.
    """
    c = _check_coefficient(coefficient, 2)
    dtype = check_dtype(dtype)
    n = c.shape[0] - 1
    inv_h2 = _inv_h2(n)
    # x-edges between grid points (i, j) and (i + 1, j): interior rows j = 1..n, edges
    # i = 0..n; the cells below and above are rows j - 1 and j of c.
    wx = 0.5 * (c[:-1, :] + c[1:, :]) * inv_h2  # (n, n + 1)
    # y-edges between (i, j) and (i, j + 1): edges j = 0..n, interior columns i = 1..n.
    wy = 0.5 * (c[:, :-1] + c[:, 1:]) * inv_h2  # (n + 1, n)
    D = _difference_1d(n)
    eye = sp.identity(n, format="csr")
    # The two directions are summed last, as in poisson_2d, so c = 1 gives identical bits.
    A = _edge_term(D, [eye, eye], 0, wx) + _edge_term(D, [eye, eye], 1, wy)
    return _finish(A, dtype, return_coordinates, n, 2)


def diffusion_3d(coefficient, *, dtype=np.float64, return_coordinates: bool = False):
    r"""Variable-coefficient diffusion ``-div(c grad u)`` on the unit cube.

    The 3D analogue of :func:`diffusion_2d`: vertex-centred finite volumes, a coefficient
    constant on each of the ``(n + 1)^3`` cells, and every edge carrying the arithmetic
    mean of the four cells around it (every cell adds ``c / (4 h^2)`` to each of its twelve
    edges).  Scaled by ``h^-2``; for ``c = 1`` it is :func:`poisson_3d` exactly.

    Parameters
    ----------
    coefficient : array_like
        ``(n + 1, n + 1, n + 1)`` positive cell values, indexed ``coefficient[k, j, i]`` for
        the cell ``[i h, (i + 1) h] x [j h, (j + 1) h] x [k h, (k + 1) h]``.
    dtype : numpy dtype
        ``float32`` or ``float64``.
    return_coordinates : bool
        Also return the ``(n**3, 3)`` grid coordinates.

    Returns
    -------
    A : scipy.sparse.csr_matrix
        Symmetric positive definite, ``n**3 x n**3``, 7-point pattern.
    coordinates : numpy.ndarray
        Only with ``return_coordinates=True``.
    """
    c = _check_coefficient(coefficient, 3)
    dtype = check_dtype(dtype)
    n = c.shape[0] - 1
    inv_h2 = _inv_h2(n)

    def mean4(a, axis1, axis2):
        # average over the pairs of cells adjacent along the two axes transverse to the edge
        a = 0.5 * (np.take(a, range(n), axis1) + np.take(a, range(1, n + 1), axis1))
        return 0.5 * (np.take(a, range(n), axis2) + np.take(a, range(1, n + 1), axis2))

    # c[k, j, i]: axis 2 is x, 1 is y, 0 is z.  An x-edge has interior y and z indices.
    wx = mean4(c, 1, 0) * inv_h2  # (n, n, n + 1)
    wy = mean4(c, 2, 0) * inv_h2  # (n, n + 1, n)
    wz = mean4(c, 2, 1) * inv_h2  # (n + 1, n, n)
    D = _difference_1d(n)
    eyes = [sp.identity(n, format="csr")] * 3
    A = _edge_term(D, eyes, 0, wx) + _edge_term(D, eyes, 1, wy) + _edge_term(D, eyes, 2, wz)
    return _finish(A, dtype, return_coordinates, n, 3)


def high_contrast_channels(
    n: int,
    contrast: float = 1e6,
    *,
    dim: int = 2,
    period: int = 8,
    width: int = 1,
    margin: int = 0,
    background: float = 1.0,
) -> np.ndarray:
    """A cell coefficient with thin high-coefficient channels along ``x``.

    Channels of ``width`` cells repeat every ``period`` cells in ``y`` (and, in 3D, in ``z``:
    square tubes) and run along ``x`` through the whole domain, so they cross every
    subdomain boundary normal to ``x`` of a box decomposition.  This is the classical hard
    case for coarse spaces built from a few functions per subdomain (constants, GDSW): the
    near-kernel of the operator holds functions that are nearly constant along each channel.

    Parameters
    ----------
    n : int
        Interior grid points per direction of the problem (the coefficient has ``n + 1``
        cells per direction, for :func:`diffusion_2d` / :func:`diffusion_3d`).
    contrast : float
        Coefficient in the channels divided by ``background`` (``> 0``).
    dim : {2, 3}
        Space dimension.
    period : int
        Distance in cells between the starts of two neighbouring channels (``> width``).
        The first channel starts ``period // 2`` cells above the boundary ``y = 0``.
    width : int
        Channel thickness in cells (``>= 1``).
    margin : int
        Number of cells at each end in ``x`` left at ``background``.  With ``margin = 0`` the
        channels touch the Dirichlet boundaries ``x = 0`` and ``x = 1``; with ``margin >= 1``
        they float inside the domain (the harder case: nothing pins them).
    background : float
        Coefficient outside the channels (``> 0``).

    Returns
    -------
    numpy.ndarray
        ``(n + 1,) * dim`` float64 cell values, indexed like the ``coefficient`` argument of
        :func:`diffusion_2d` (``[j, i]``) or :func:`diffusion_3d` (``[k, j, i]``).

    Examples
    --------
    >>> from ddops.problems import diffusion_2d, high_contrast_channels
    >>> c = high_contrast_channels(31, contrast=1e4)
    >>> A = diffusion_2d(c)
    >>> c.shape, A.shape, sorted(set(c.ravel().tolist()))
    ((32, 32), (961, 961), [1.0, 10000.0])
    """
    n = _check_n(n)
    contrast = check_positive_float("contrast", contrast)
    background = check_positive_float("background", background)
    dim = check_int("dim", dim)
    if dim not in (2, 3):
        raise ValueError(f"dim must be 2 or 3, got {dim}")
    width = check_int("width", width, minimum=1)
    period = check_int("period", period)
    if period <= width:
        raise ValueError(f"period must be > width ({width}), got {period}")
    margin = check_int("margin", margin, minimum=0)
    cells = n + 1
    if 2 * margin >= cells:
        raise ValueError(f"margin must be < (n + 1) / 2 = {cells / 2}, got {margin}")
    in_band = (np.arange(cells) - period // 2) % period < width
    in_band &= np.arange(cells) >= period // 2
    along = np.zeros(cells, dtype=bool)
    along[margin : cells - margin] = True
    if dim == 2:
        mask = in_band[:, None] & along[None, :]
    else:
        mask = in_band[:, None, None] & in_band[None, :, None] & along[None, None, :]
    if not mask.any():
        raise ValueError(
            f"no channel fits: n + 1 = {cells} cells, period={period}, width={width}, "
            f"margin={margin}"
        )
    return np.where(mask, background * contrast, background)
