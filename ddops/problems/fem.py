"""P1 finite elements on triangle meshes of the unit square, assembled with scikit-fem.

scikit-fem is an optional dependency (``pip install "ddops[fem]"``); it is imported when a
function here is called, not when :mod:`ddops.problems` is imported.

The meshes of :func:`unit_square_mesh` number their nodes like the finite-difference grids
of :mod:`ddops.problems.grid`, but with the boundary included: the node at ``(i h, j h)``,
``0 <= i, j <= n + 1``, ``h = 1/(n + 1)``, has index ``i + (n + 2) j``.  The matrices are the
finite-element stiffness matrices themselves (no ``h^-2`` scaling): on the structured mesh
:func:`fem_poisson_2d` equals ``h^2 poisson_2d(n)``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .._validation import check_choice, check_dtype, check_int, check_positive_float

__all__ = ["MESH_KINDS", "unit_square_mesh", "fem_poisson_2d", "fem_elasticity_2d"]

#: Triangle meshes of :func:`unit_square_mesh`: ``"structured"`` (every grid cell cut by
#: its diagonal from lower left to upper right) and ``"unstructured"`` (the Delaunay
#: triangulation of the grid with randomly displaced interior nodes).
MESH_KINDS = ("structured", "unstructured")

_DIRICHLET = ("left", "boundary", None)


def _skfem():
    try:
        import skfem
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "scikit-fem is required for ddops.problems.fem; install ddops[fem] "
            '(pip install "ddops[fem]")'
        ) from exc
    return skfem


def unit_square_mesh(n: int, *, kind: str = "structured", jitter: float = 0.3, seed=0):
    """A triangle mesh of the unit square on the grid of ``n`` interior points per direction.

    Parameters
    ----------
    n : int
        Interior grid points per direction (``(n + 2)^2`` nodes, ``h = 1/(n + 1)``).
    kind : {"structured", "unstructured"}
        ``"structured"``: each grid cell is cut by its diagonal from lower left to upper right
        (``2 (n + 1)^2`` right triangles).  ``"unstructured"``: every interior node is moved by
        a uniform random offset of at most ``jitter * h`` in each coordinate and the nodes are
        triangulated by Delaunay (``scipy.spatial.Delaunay``), so the connectivity varies
        from node to node; boundary nodes stay on the boundary grid.
    jitter : float
        Largest displacement of an interior node in units of ``h``, in ``(0, 0.45]`` (only
        for ``"unstructured"``).
    seed : int or numpy.random.Generator
        Random state of the displacements (only for ``"unstructured"``).

    Returns
    -------
    skfem.MeshTri
        The mesh; node ``i + (n + 2) j`` starts at ``(i h, j h)`` (``x`` fastest).
    """
    skfem = _skfem()
    n = check_int("n", n, minimum=1)
    check_choice("kind", kind, MESH_KINDS)
    h = 1.0 / (n + 1)
    line = np.arange(n + 2) * h
    line[-1] = 1.0
    X, Y = np.meshgrid(line, line)  # X[j, i] = x_i: x fastest after ravel
    p = np.stack([X.ravel(), Y.ravel()])
    if kind == "structured":
        i, j = np.meshgrid(np.arange(n + 1), np.arange(n + 1))
        v00 = (i + (n + 2) * j).ravel()
        v10, v01, v11 = v00 + 1, v00 + n + 2, v00 + n + 3
        t = np.concatenate([np.stack([v00, v10, v11]), np.stack([v00, v11, v01])], axis=1)
        return skfem.MeshTri(p, t)
    jitter = check_positive_float("jitter", jitter)
    if jitter > 0.45:
        # jitter 0 leaves the lattice co-circular (no unique Delaunay triangulation); beyond
        # about h/2 neighbouring nodes may swap places
        raise ValueError(f"jitter must be in (0, 0.45], got {jitter}")
    from scipy.spatial import Delaunay

    rng = np.random.default_rng(seed)
    interior = np.all((p > 0) & (p < 1), axis=0)
    p[:, interior] += rng.uniform(-jitter, jitter, size=(2, int(interior.sum()))) * h
    tri = Delaunay(p.T)
    t = tri.simplices.T
    if np.unique(t).size != p.shape[1]:  # pragma: no cover - safeguard against Qhull dropping nodes
        raise RuntimeError("Delaunay triangulation dropped nodes; use a smaller jitter")
    return skfem.MeshTri(p, np.ascontiguousarray(t))


def _mesh(n, mesh, jitter, seed):
    skfem = _skfem()
    if isinstance(mesh, str):
        check_choice("mesh", mesh, MESH_KINDS)
        if n is None:
            raise TypeError(f"n is required with mesh={mesh!r}")
        return unit_square_mesh(n, kind=mesh, jitter=jitter, seed=seed)
    if not isinstance(mesh, skfem.MeshTri):
        raise TypeError(
            f"mesh must be one of {MESH_KINDS} or a skfem.MeshTri, got {type(mesh).__name__}"
        )
    if n is not None:
        raise TypeError("n must be None when mesh is a skfem.MeshTri")
    return mesh


def _finish(A, keep, dtype):
    A = sp.csr_matrix(A[keep][:, keep], dtype=dtype)
    A.sum_duplicates()
    A.sort_indices()
    return A


def fem_poisson_2d(
    n: int | None = None,
    *,
    mesh="structured",
    jitter: float = 0.3,
    seed=0,
    dtype=np.float64,
    return_nodes: bool = False,
):
    """P1 finite-element Laplacian on a triangle mesh, Dirichlet boundary removed.

    The stiffness matrix ``A_pq = int grad phi_p . grad phi_q`` over the interior nodes
    (homogeneous Dirichlet conditions on the whole boundary, boundary rows and columns
    removed).  On the structured mesh it equals the 5-point stencil ``(4, -1, -1, -1, -1)``,
    i.e. ``h^2 poisson_2d(n)``, in the same numbering.

    Parameters
    ----------
    n : int, optional
        Interior grid points per direction, for a ``mesh`` given by name.
    mesh : {"structured", "unstructured"} or skfem.MeshTri
        Mesh kind for :func:`unit_square_mesh`, or a mesh of your own (then ``n`` is None).
    jitter, seed
        Passed to :func:`unit_square_mesh` for ``mesh="unstructured"``.
    dtype : numpy dtype
        ``float32`` or ``float64``.
    return_nodes : bool
        Also return the mesh node of every unknown.

    Returns
    -------
    A : scipy.sparse.csr_matrix
        Symmetric positive definite, one row per interior node, in increasing node order.
    coordinates : numpy.ndarray
        ``(m, 2)`` coordinates of the unknowns.
    nodes : numpy.ndarray
        Only with ``return_nodes=True``: mesh node indices of the unknowns (ascending).
    """
    skfem = _skfem()
    from skfem.models.poisson import laplace

    dtype = check_dtype(dtype)
    m = _mesh(n, mesh, jitter, seed)
    basis = skfem.Basis(m, skfem.ElementTriP1())
    K = skfem.asm(laplace, basis).tocsr()
    nodes = np.setdiff1d(np.arange(m.p.shape[1]), m.boundary_nodes())
    keep = basis.nodal_dofs[0, nodes]  # node -> dof (the identity for P1, checked here anyway)
    A = _finish(K, keep, dtype)
    coordinates = np.ascontiguousarray(m.p[:, nodes].T)
    if return_nodes:
        return A, coordinates, nodes
    return A, coordinates


def fem_elasticity_2d(
    n: int | None = None,
    *,
    mesh="structured",
    jitter: float = 0.3,
    seed=0,
    E: float = 1.0,
    nu: float = 0.3,
    dirichlet: str | None = "left",
    dtype=np.float64,
    return_nodes: bool = False,
):
    r"""P1 linear elasticity (plane strain) on a triangle mesh, interleaved dofs.

    The stiffness matrix of :math:`\int \sigma(u) : \varepsilon(v)` with
    :math:`\sigma = 2 \mu \varepsilon + \lambda \operatorname{tr}(\varepsilon) I` and the Lamé
    parameters of ``E`` and ``nu`` (``lambda = E nu / ((1 + nu)(1 - 2 nu))``,
    ``mu = E / (2 (1 + nu))``).  The dofs are interleaved (node-major): rows ``2 k`` and
    ``2 k + 1`` are the ``x`` and ``y`` displacement of the ``k``-th kept node, whatever
    order scikit-fem uses internally, the order of :func:`ddops.problems.rigid_body_modes`.

    Parameters
    ----------
    n : int, optional
        Interior grid points per direction, for a ``mesh`` given by name.
    mesh : {"structured", "unstructured"} or skfem.MeshTri
        Mesh kind for :func:`unit_square_mesh`, or a mesh of your own (then ``n`` is None).
    jitter, seed
        Passed to :func:`unit_square_mesh` for ``mesh="unstructured"``.
    E : float
        Young's modulus (``> 0``).
    nu : float
        Poisson ratio, in ``(-1, 0.5)``.
    dirichlet : {"left", "boundary", None}
        Nodes whose two displacements are fixed to zero and removed: those on the side of
        smallest ``x`` (a clamped cantilever), all boundary nodes, or none (the pure traction
        problem: singular, with the rigid body modes as null space).
    dtype : numpy dtype
        ``float32`` or ``float64``.
    return_nodes : bool
        Also return the mesh node of every kept node.

    Returns
    -------
    A : scipy.sparse.csr_matrix
        Symmetric, ``2 m x 2 m`` for ``m`` kept nodes; positive definite unless
        ``dirichlet=None``.
    coordinates : numpy.ndarray
        ``(m, 2)`` coordinates of the kept nodes (in increasing node order); pass them to
        :func:`ddops.problems.rigid_body_modes`.
    nodes : numpy.ndarray
        Only with ``return_nodes=True``: mesh node indices of the kept nodes (ascending).
    """
    skfem = _skfem()
    from skfem.models.elasticity import lame_parameters, linear_elasticity

    dtype = check_dtype(dtype)
    E = check_positive_float("E", E)
    if isinstance(nu, bool) or not isinstance(nu, (int, float, np.floating, np.integer)):
        raise TypeError(f"nu must be a real number, got {type(nu).__name__} {nu!r}")
    if not -1.0 < float(nu) < 0.5:
        raise ValueError(f"nu must be in (-1, 0.5), got {nu}")
    check_choice("dirichlet", dirichlet, _DIRICHLET)
    m = _mesh(n, mesh, jitter, seed)
    basis = skfem.Basis(m, skfem.ElementVector(skfem.ElementTriP1()))
    lam, mu = lame_parameters(float(E), float(nu))
    K = skfem.asm(linear_elasticity(lam, mu), basis).tocsr()
    num_nodes = m.p.shape[1]
    if dirichlet == "left":
        x = m.p[0]
        fixed = np.flatnonzero(np.isclose(x, x.min(), rtol=0.0, atol=1e-12 * np.ptp(x)))
    elif dirichlet == "boundary":
        fixed = m.boundary_nodes()
    else:
        fixed = np.empty(0, dtype=np.int64)
    nodes = np.setdiff1d(np.arange(num_nodes), fixed)
    # nodal_dofs[c, k] is scikit-fem's dof of component c at node k; read row 2 k + c from it.
    keep = basis.nodal_dofs[:, nodes].T.ravel()
    A = _finish(K, keep, dtype)
    coordinates = np.ascontiguousarray(m.p[:, nodes].T)
    if return_nodes:
        return A, coordinates, nodes
    return A, coordinates
