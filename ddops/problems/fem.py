"""P1 finite elements on triangle and tetrahedral meshes, assembled with scikit-fem.

scikit-fem is an optional dependency (``pip install "ddops[fem]"``); it is imported when a
function here is called, not when :mod:`ddops.problems` is imported.

The meshes of :func:`unit_square_mesh` number their nodes like the finite-difference grids
of :mod:`ddops.problems.grid`, but with the boundary included: the node at ``(i h, j h)``,
``0 <= i, j <= n + 1``, ``h = 1/(n + 1)``, has index ``i + (n + 2) j``; those of
:func:`box_mesh` likewise, ``x`` fastest, then ``y``, then ``z``.  The matrices are the
finite-element stiffness matrices themselves (no ``h^-2`` scaling): on the structured meshes
:func:`fem_poisson_2d` equals ``h^2 poisson_2d(n)`` and :func:`fem_poisson_3d` equals
``h^3 poisson_3d(n)``.

*Coefficients.* The diffusion coefficient of the Poisson problems and Young's modulus of the
elasticity problems may vary from element to element: a scalar, an array with one value per
mesh element (``mesh.t.shape[1]``, in the order of the columns of ``mesh.t``), or a callable
that maps the ``(num_elements, dim)`` element centroids (:func:`element_centroids`) to such
an array, e.g. :func:`ddops.problems.random_fields.stiff_inclusions`.

*Local Neumann matrices.* Every problem function accepts ``neumann``: a
:class:`ddops.Decomposition` of its unknowns, or a list of index arrays, one per subdomain.
It then also returns, last, the list of the subdomains' Neumann matrices ``N_i``, the local
matrices of GenEO-type coarse spaces: ``N_i`` assembles the element stiffness matrices of
exactly the elements all of whose unknowns (Dirichlet nodes excluded) belong to subdomain
``i``, restricted to those unknowns and ordered like the subdomain's indices.  Elements with
no unknown (all nodes on the Dirichlet boundary) belong to no subdomain.  ``N_i`` agrees with
the corresponding rows of ``A`` at the unknowns all of whose elements lie in the subdomain;
at the others it misses the couplings through outside elements.  The element matrices are
computed in closed form (constant gradients of the barycentric coordinates) and scattered
for all (element, subdomain) pairs at once, without a loop over the subdomains.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from .._validation import check_choice, check_dtype, check_int, check_positive_float
from ..linalg.local_solvers import diagonal_block

__all__ = [
    "MESH_KINDS",
    "unit_square_mesh",
    "box_mesh",
    "element_centroids",
    "fem_poisson_2d",
    "fem_elasticity_2d",
    "fem_poisson_3d",
    "fem_elasticity_3d",
    "fem_elasticity_neumann",
]

#: Triangle meshes of :func:`unit_square_mesh`: ``"structured"`` (every grid cell cut by
#: its diagonal from lower left to upper right) and ``"unstructured"`` (the Delaunay
#: triangulation of the grid with randomly displaced interior nodes).
MESH_KINDS = ("structured", "unstructured")

_MESH_KINDS_3D = ("structured",)

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


def box_mesh(n: int, *, length: float = 1.0):
    """A tetrahedral mesh of the box ``[0, length] x [0, 1] x [0, 1]``.

    The grid of mesh width ``h = 1/(n + 1)`` in ``y`` and ``z`` (``n`` interior points) and
    ``cx = max(1, round(length (n + 1)))`` cells of width ``length / cx`` in ``x`` (cubes
    when ``length (n + 1)`` is an integer); every grid cell is cut into the six tetrahedra of
    its Kuhn (Freudenthal) subdivision around the diagonal from the lowest to the highest
    corner, the 3D analogue of the structured :func:`unit_square_mesh`.  The mesh is
    conforming, and its P1 Laplacian is the 7-point stencil (times ``h``) on cubes.

    Parameters
    ----------
    n : int
        Interior grid points in ``y`` and ``z`` (``h = 1/(n + 1)``).
    length : float
        Extent in ``x`` (``> 0``): 1 for the unit cube, more for a beam.

    Returns
    -------
    skfem.MeshTet
        ``6 cx (n + 1)^2`` tetrahedra; node ``i + (cx + 1) j + (cx + 1) (n + 2) k`` starts at
        ``(i length / cx, j h, k h)`` (``x`` fastest).
    """
    skfem = _skfem()
    n = check_int("n", n, minimum=1)
    length = check_positive_float("length", length)
    cx = max(1, round(length * (n + 1)))
    line = np.arange(n + 2) / (n + 1)
    line[-1] = 1.0
    xline = np.arange(cx + 1) * (length / cx)
    xline[-1] = length
    Z, Y, X = np.meshgrid(line, line, xline, indexing="ij")  # [k, j, i]: x fastest
    p = np.stack([X.ravel(), Y.ravel(), Z.ravel()])
    sx, sy, sz = 1, cx + 1, (cx + 1) * (n + 2)  # node index steps along x, y, z
    k, j, i = np.meshgrid(np.arange(n + 1), np.arange(n + 1), np.arange(cx), indexing="ij")
    v = (i * sx + j * sy + k * sz).ravel()
    tets = []
    for a, b, c in ((sx, sy, sz), (sx, sz, sy), (sy, sx, sz), (sy, sz, sx), (sz, sx, sy),
                    (sz, sy, sx)):  # the six monotone paths from the lowest to the highest corner
        tets.append(np.stack([v, v + a, v + a + b, v + a + b + c]))
    return skfem.MeshTet(p, np.concatenate(tets, axis=1))


def element_centroids(mesh) -> np.ndarray:
    """Centroids of the elements of a scikit-fem simplex mesh.

    Parameters
    ----------
    mesh : skfem.MeshTri or skfem.MeshTet
        The mesh (e.g. of :func:`unit_square_mesh` or :func:`box_mesh`).

    Returns
    -------
    numpy.ndarray
        ``(num_elements, dim)`` float64: row ``e`` is the mean of the vertices of element
        ``e`` (column ``e`` of ``mesh.t``), the points at which a callable coefficient is
        evaluated.
    """
    p, t = _mesh_arrays(mesh, "mesh")
    return np.ascontiguousarray(p[:, t].mean(axis=1).T)


def _mesh_arrays(mesh, name):
    p = getattr(mesh, "p", None)
    t = getattr(mesh, "t", None)
    if not (isinstance(p, np.ndarray) and isinstance(t, np.ndarray)):
        raise TypeError(f"{name} must be a scikit-fem mesh, got {type(mesh).__name__}")
    if p.ndim != 2 or p.shape[0] not in (2, 3) or t.ndim != 2 or t.shape[0] != p.shape[0] + 1:
        raise ValueError(f"{name} must be a triangle or tetrahedral mesh, got nodes of shape "
                         f"{p.shape} and elements of shape {t.shape}")
    return np.asarray(p, dtype=np.float64), np.asarray(t, dtype=np.int64)


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


def _mesh_3d(n, mesh, length):
    skfem = _skfem()
    if isinstance(mesh, str):
        check_choice("mesh", mesh, _MESH_KINDS_3D)
        if n is None:
            raise TypeError(f"n is required with mesh={mesh!r}")
        return box_mesh(n, length=length)
    if not isinstance(mesh, skfem.MeshTet):
        raise TypeError(
            f"mesh must be one of {_MESH_KINDS_3D} or a skfem.MeshTet, got {type(mesh).__name__}"
        )
    if n is not None:
        raise TypeError("n must be None when mesh is a skfem.MeshTet")
    return mesh


def _finish(A, keep, dtype):
    A = sp.csr_matrix(A[keep][:, keep], dtype=dtype)
    A.sum_duplicates()
    A.sort_indices()
    return A


def _check_nu(nu) -> float:
    if isinstance(nu, bool) or not isinstance(nu, (int, float, np.floating, np.integer)):
        raise TypeError(f"nu must be a real number, got {type(nu).__name__} {nu!r}")
    if not -1.0 < float(nu) < 0.5:
        raise ValueError(f"nu must be in (-1, 0.5), got {nu}")
    return float(nu)


def _element_values(name, value, mesh):
    """A positive scalar (float) or one positive value per element (float64 array)."""
    num = mesh.t.shape[1]
    what = name
    if callable(value):
        value = value(element_centroids(mesh))
        what = f"the values returned by {name}"
    if sp.issparse(value):
        raise TypeError(f"{what} must be a scalar or a dense array, got a sparse matrix")
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if np.ndim(value) == 0:
        return check_positive_float(name, value)
    try:
        c = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} must be real, got {type(value).__name__}") from exc
    if c.shape != (num,):
        raise ValueError(f"{what} must have one value per element, shape ({num},), got "
                         f"shape {c.shape}")
    if not np.all(np.isfinite(c)):
        raise ValueError(f"{what} contains NaN or inf")
    if not np.all(c > 0):
        raise ValueError(f"{what} must be > 0 on every element, got minimum {c.min()}")
    return c


def _per_quadrature_point(c, basis):
    # one value per element, repeated over the element's quadrature points: the array form
    # of an extra form parameter that scikit-fem's asm accepts as is
    return np.repeat(c[:, None], basis.X.shape[-1], axis=1)


def _fixed_nodes(m, dirichlet):
    if dirichlet == "left":
        x = m.p[0]
        return np.flatnonzero(np.isclose(x, x.min(), rtol=0.0, atol=1e-12 * np.ptp(x)))
    if dirichlet == "boundary":
        return m.boundary_nodes()
    return np.empty(0, dtype=np.int64)


# ---------------------------------------------------------------------------
# Element matrices in closed form and the local Neumann matrices


def _p1_gradients(p, t):
    """Barycentric gradients ``(T, d + 1, d)`` and volumes ``(T,)`` of the mesh's simplices."""
    d = p.shape[0]
    P = p.T[t.T]  # (T, d + 1, d) vertex coordinates
    J = P[:, 1:] - P[:, :1]  # rows: the edges from vertex 0
    # x = P_0 + J^T lambda', so lambda' = J^-T (x - P_0): grad lambda_a is column a - 1 of J^-1
    G = np.empty_like(P)
    G[:, 1:] = np.swapaxes(np.linalg.inv(J), 1, 2)
    G[:, 0] = -G[:, 1:].sum(axis=1)
    volume = np.abs(np.linalg.det(J)) / math.factorial(d)
    return G, volume


def _laplace_elements(p, t, c):
    """Element matrices ``c_e |e| grad(lambda_a) . grad(lambda_b)`` and their dofs (nodes)."""
    G, volume = _p1_gradients(p, t)
    K = np.einsum("tai,tbi->tab", G, G) * (volume * c)[:, None, None]
    return K, t.T


def _elasticity_elements(p, t, E, nu):
    """Element matrices of P1 elasticity, local and global dofs interleaved (node-major)."""
    d = p.shape[0]
    G, volume = _p1_gradients(p, t)
    lam = nu / ((1 + nu) * (1 - 2 * nu))  # the Lame parameters of E = 1
    mu = 1 / (2 * (1 + nu))
    # sigma(phi_a e_i) : eps(phi_b e_j) = lam g_ai g_bj + mu (g_aj g_bi + delta_ij g_a . g_b)
    outer = G[:, :, :, None, None] * G[:, None, None, :, :]  # g_ai g_bj, (t, a, i, b, j)
    K = lam * outer + mu * np.swapaxes(outer, 2, 4)  # g_aj g_bi: i and j swapped
    # the delta_ij term on the diagonal blocks i = j (a dense einsum with the identity
    # multiplied its zeros too: 0.3 s of the 0.33 s on 3D elasticity of 41,000 elements)
    dot = G @ np.swapaxes(G, 1, 2)  # g_a . g_b, (t, a, b)
    for i in range(d):  # a loop over the 2 or 3 axes
        K[:, :, i, :, i] += mu * dot
    K *= (volume * E)[:, None, None, None, None]
    n_local = (d + 1) * d
    dofs = (d * t.T[:, :, None] + np.arange(d)).reshape(-1, n_local)
    return K.reshape(-1, n_local, n_local), dofs


def _subdomain_entries(neumann, num_unknowns):
    """Packed indices and offsets of the subdomains of ``neumann``.

    A :class:`ddops.Decomposition` is recognised by its packed arrays (``num_dofs``,
    ``indices``, ``offsets``), not by its class: the problems sit below the decompositions
    and do not import them.
    """
    if all(hasattr(neumann, name) for name in ("num_dofs", "indices", "offsets")):
        if neumann.num_dofs != num_unknowns:
            raise ValueError(f"neumann: the decomposition has {neumann.num_dofs} unknowns, the "
                             f"problem {num_unknowns}")
        return neumann.indices, neumann.offsets
    if isinstance(neumann, (str, bytes, np.ndarray)) or not hasattr(neumann, "__len__"):
        raise TypeError(f"neumann must be a Decomposition or a list of index arrays, got "
                        f"{type(neumann).__name__}")
    arrays = []
    for i, s in enumerate(neumann):
        a = np.asarray(s)
        if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
            raise TypeError(f"neumann: subdomain {i} must be a 1-D integer array, got dtype "
                            f"{a.dtype} and shape {a.shape}")
        a = a.astype(np.int64)
        if a.size and (a.min() < 0 or a.max() >= num_unknowns):
            raise ValueError(f"neumann: the indices of subdomain {i} must lie in "
                             f"[0, {num_unknowns})")
        if np.unique(a).size != a.size:
            raise ValueError(f"neumann: subdomain {i} contains repeated indices")
        arrays.append(a)
    if not arrays:
        raise ValueError("neumann must contain at least one subdomain")
    sizes = np.array([a.size for a in arrays], dtype=np.int64)
    return np.concatenate(arrays), np.concatenate([[0], np.cumsum(sizes)])


def _neumann_matrices(K, dofs, unknown_of_dof, num_unknowns, neumann, dtype):
    """The local Neumann matrices of the subdomains of ``neumann`` (see the module notes).

    ``K`` holds the element matrices ``(T, l, l)``, ``dofs`` their global dofs ``(T, l)`` and
    ``unknown_of_dof`` the unknown of every global dof (-1 on the Dirichlet boundary).
    """
    indices, offsets = _subdomain_entries(neumann, num_unknowns)
    num_sub = offsets.size - 1
    total = int(offsets[-1])
    sub_of_entry = np.repeat(np.arange(num_sub), np.diff(offsets))
    U = unknown_of_dof[dofs]  # (T, l) the unknowns of each element, -1 if fixed
    kept = U >= 0
    # elements x unknowns times unknowns x subdomains: the element's unknowns in each subdomain
    e, a = np.nonzero(kept)
    incidence = sp.csr_matrix((np.ones(e.size), (e, U[e, a])), shape=(K.shape[0], num_unknowns))
    member = sp.csr_matrix((np.ones(indices.size), (indices, sub_of_entry)),
                           shape=(num_unknowns, num_sub))
    counts = (incidence @ member).tocoo()
    inside = counts.data == kept.sum(axis=1)[counts.row]  # all of its unknowns (at least one)
    pair_e, pair_s = counts.row[inside], counts.col[inside]
    # packed position of (subdomain, unknown): binary search in the sorted entry keys
    keys = sub_of_entry * num_unknowns + indices
    order = np.argsort(keys, kind="stable")
    U_pairs = np.where(kept[pair_e], U[pair_e], 0)
    wanted = pair_s[:, None] * num_unknowns + U_pairs
    position = order[np.searchsorted(keys[order], wanted)]  # (pairs, l)
    # every pair scatters its whole l x l element matrix (no Boolean compaction of the
    # entries): on the Dirichlet boundary a fixed unknown's row and column take the
    # position of a kept unknown of the element and zeros, which add nothing to entries
    # that the element has anyway (3D elasticity, 22,800 unknowns, 64 parts: 0.37 -> 0.26 s
    # with the int32 indices below)
    data = K[pair_e]
    partial = np.flatnonzero(~kept[pair_e].all(axis=1))
    if partial.size:
        kq = kept[pair_e[partial]]
        data[partial] *= kq[:, :, None] & kq[:, None, :]
        fallback = position[partial, np.argmax(kq, axis=1)]
        position[partial] = np.where(kq, position[partial], fallback[:, None])
    # (int32 where they fit: scipy's conversion takes them as they are)
    index = np.int32 if total < np.iinfo(np.int32).max else np.int64
    position = position.astype(index)
    shape3 = data.shape
    rows = np.broadcast_to(position[:, :, None], shape3).ravel()
    cols = np.broadcast_to(position[:, None, :], shape3).ravel()
    B = sp.csr_matrix((data.ravel(), (rows, cols)), shape=(total, total))
    B.sum_duplicates()
    B.sort_indices()
    # B is block diagonal: cut it into the subdomain blocks by row and column offsets
    # (slicing only; the assembly above is one scatter)
    return [diagonal_block(B, int(offsets[i]), int(offsets[i + 1])).astype(dtype)
            for i in range(num_sub)]


def _unknown_of_dof(num_dofs, keep):
    unknown = np.full(num_dofs, -1, dtype=np.int64)
    unknown[keep] = np.arange(keep.size)
    return unknown


def _returns(A, coordinates, nodes, return_nodes, neumann_matrices):
    out = (A, coordinates)
    if return_nodes:
        out += (nodes,)
    if neumann_matrices is not None:
        out += (neumann_matrices,)
    return out


# ---------------------------------------------------------------------------
# The problems


def _poisson(skfem, m, element, coefficient, dtype, return_nodes, neumann):
    from skfem.helpers import dot, grad
    from skfem.models.poisson import laplace

    dtype = check_dtype(dtype)
    c = 1.0 if coefficient is None else _element_values("coefficient", coefficient, m)
    basis = skfem.Basis(m, element)
    if np.ndim(c) == 0:
        K = skfem.asm(laplace, basis).tocsr()
        if c != 1.0:
            K = K * c
    else:

        @skfem.BilinearForm
        def weighted_laplace(u, v, w):
            return w.c * dot(grad(u), grad(v))

        K = skfem.asm(weighted_laplace, basis, c=_per_quadrature_point(c, basis)).tocsr()
    nodes = np.setdiff1d(np.arange(m.p.shape[1]), m.boundary_nodes())
    keep = basis.nodal_dofs[0, nodes]  # node -> dof (the identity for P1, checked here anyway)
    A = _finish(K, keep, dtype)
    coordinates = np.ascontiguousarray(m.p[:, nodes].T)
    local = None
    if neumann is not None:
        p, t = _mesh_arrays(m, "mesh")
        Ke, dofs = _laplace_elements(p, t, np.broadcast_to(c, t.shape[1]))
        unknown = _unknown_of_dof(p.shape[1], nodes)
        local = _neumann_matrices(Ke, dofs, unknown, nodes.size, neumann, dtype)
    return _returns(A, coordinates, nodes, return_nodes, local)


def _elasticity(skfem, m, element, E, nu, dirichlet, dtype, return_nodes, neumann):
    from skfem.helpers import ddot, sym_grad
    from skfem.models.elasticity import lame_parameters, linear_elasticity, linear_stress

    dtype = check_dtype(dtype)
    E = _element_values("E", E, m)
    nu = _check_nu(nu)
    check_choice("dirichlet", dirichlet, _DIRICHLET)
    basis = skfem.Basis(m, skfem.ElementVector(element))
    if np.ndim(E) == 0:
        lam, mu = lame_parameters(float(E), nu)
        K = skfem.asm(linear_elasticity(lam, mu), basis).tocsr()
    else:
        stress = linear_stress(*lame_parameters(1.0, nu))

        @skfem.BilinearForm
        def weighted_elasticity(u, v, w):
            return w.E * ddot(stress(sym_grad(u)), sym_grad(v))

        K = skfem.asm(weighted_elasticity, basis, E=_per_quadrature_point(E, basis)).tocsr()
    nodes = np.setdiff1d(np.arange(m.p.shape[1]), _fixed_nodes(m, dirichlet))
    # nodal_dofs[c, k] is scikit-fem's dof of component c at node k; read row d k + c from it
    # (d the dimension).
    keep = basis.nodal_dofs[:, nodes].T.ravel()
    A = _finish(K, keep, dtype)
    coordinates = np.ascontiguousarray(m.p[:, nodes].T)
    local = None
    if neumann is not None:
        local = _elasticity_neumann(m, E, nu, nodes, neumann, dtype)
    return _returns(A, coordinates, nodes, return_nodes, local)


def _elasticity_neumann(m, E, nu, nodes, neumann, dtype):
    """The local Neumann matrices of P1 elasticity (checked ``E`` and ``nu``; ``nodes``: the
    kept mesh nodes)."""
    p, t = _mesh_arrays(m, "mesh")
    d = p.shape[0]
    Ke, dofs = _elasticity_elements(p, t, np.broadcast_to(E, t.shape[1]), nu)
    kept_dofs = (d * nodes[:, None] + np.arange(d)).ravel()
    unknown = _unknown_of_dof(d * p.shape[1], kept_dofs)
    return _neumann_matrices(Ke, dofs, unknown, kept_dofs.size, neumann, dtype)


def fem_elasticity_neumann(mesh, neumann, *, E=1.0, nu: float = 0.3,
                           dirichlet: str | None = "left", dtype=np.float64) -> list:
    """The local Neumann matrices of :func:`fem_elasticity_2d` or :func:`fem_elasticity_3d`
    alone, without assembling ``A`` again.

    ``fem_elasticity_neumann(mesh, d, E=E)`` is the last output of
    ``fem_elasticity_2d(mesh=mesh, E=E, neumann=d)`` (or of the 3D function for a
    tetrahedral mesh): the matrices of the subdomains of ``d`` for a matrix ``A`` that was
    assembled before, on the same mesh with the same ``E``, ``nu`` and ``dirichlet``.  A
    decomposition is usually built from ``A``, so a set-up that needs these matrices would
    otherwise assemble ``A`` twice (on 3D elasticity with 22,800 unknowns, 1.0 s of the 1.7 s
    that the call with ``neumann=`` takes).

    Parameters
    ----------
    mesh : skfem.MeshTri or skfem.MeshTet
        The mesh of ``A``.
    neumann : ddops.Decomposition or sequence of integer arrays
        Subdomains of the unknowns (rows of ``A``).
    E, nu, dirichlet, dtype
        As given to the function that assembled ``A``.

    Returns
    -------
    list of scipy.sparse.csr_matrix
        One ``N_i`` per subdomain, as in :func:`fem_elasticity_2d`.
    """
    skfem = _skfem()
    if not isinstance(mesh, (skfem.MeshTri, skfem.MeshTet)):
        raise TypeError(f"mesh must be a skfem.MeshTri or skfem.MeshTet, got "
                        f"{type(mesh).__name__}")
    dtype = check_dtype(dtype)
    E = _element_values("E", E, mesh)
    nu = _check_nu(nu)
    check_choice("dirichlet", dirichlet, _DIRICHLET)
    nodes = np.setdiff1d(np.arange(mesh.p.shape[1]), _fixed_nodes(mesh, dirichlet))
    return _elasticity_neumann(mesh, E, nu, nodes, neumann, dtype)


def fem_poisson_2d(
    n: int | None = None,
    *,
    mesh="structured",
    jitter: float = 0.3,
    seed=0,
    coefficient=None,
    dtype=np.float64,
    return_nodes: bool = False,
    neumann=None,
):
    """P1 finite-element diffusion ``-div(c grad u)`` on a triangle mesh, Dirichlet removed.

    The stiffness matrix ``A_pq = int c grad phi_p . grad phi_q`` over the interior nodes
    (homogeneous Dirichlet conditions on the whole boundary, boundary rows and columns
    removed).  With ``c = 1`` on the structured mesh it equals the 5-point stencil
    ``(4, -1, -1, -1, -1)``, i.e. ``h^2 poisson_2d(n)``, in the same numbering.

    Parameters
    ----------
    n : int, optional
        Interior grid points per direction, for a ``mesh`` given by name.
    mesh : {"structured", "unstructured"} or skfem.MeshTri
        Mesh kind for :func:`unit_square_mesh`, or a mesh of your own (then ``n`` is None).
    jitter, seed
        Passed to :func:`unit_square_mesh` for ``mesh="unstructured"``.
    coefficient : float, array_like or callable, optional
        The diffusion coefficient ``c > 0``, constant on each triangle: a scalar, one value
        per triangle (``mesh.t.shape[1]``, in the order of ``mesh.t``'s columns), or a
        callable mapping the ``(num_triangles, 2)`` centroids (:func:`element_centroids`)
        to such values.  Default 1.
    dtype : numpy dtype
        ``float32`` or ``float64``.
    return_nodes : bool
        Also return the mesh node of every unknown.
    neumann : ddops.Decomposition or sequence of integer arrays, optional
        Subdomains of the unknowns (a decomposition of ``A``'s rows, or one array of
        unknown indices per subdomain, without repeats): also return their local Neumann
        matrices (see the module notes).

    Returns
    -------
    A : scipy.sparse.csr_matrix
        Symmetric positive definite, one row per interior node, in increasing node order.
    coordinates : numpy.ndarray
        ``(m, 2)`` coordinates of the unknowns.
    nodes : numpy.ndarray
        Only with ``return_nodes=True``: mesh node indices of the unknowns (ascending).
    neumann_matrices : list of scipy.sparse.csr_matrix
        Only with ``neumann``, always last: ``N_i`` of shape ``(len(idx_i), len(idx_i))``
        for the unknowns ``idx_i`` of subdomain ``i`` (``d.subdomains[i]`` of a
        decomposition), rows and columns in the order of ``idx_i``; symmetric positive
        semi-definite, singular (constants in the kernel) for a subdomain that touches no
        Dirichlet node.
    """
    skfem = _skfem()
    m = _mesh(n, mesh, jitter, seed)
    return _poisson(skfem, m, skfem.ElementTriP1(), coefficient, dtype, return_nodes, neumann)


def fem_poisson_3d(
    n: int | None = None,
    *,
    mesh="structured",
    length: float = 1.0,
    coefficient=None,
    dtype=np.float64,
    return_nodes: bool = False,
    neumann=None,
):
    """P1 finite-element diffusion ``-div(c grad u)`` on a tetrahedral mesh, Dirichlet removed.

    The 3D analogue of :func:`fem_poisson_2d`: homogeneous Dirichlet conditions on the
    whole boundary, one unknown per interior node.  With ``c = 1`` on the structured unit
    cube (``length=1``) it equals the 7-point stencil ``(6, -1, ..., -1)`` times ``h``, i.e.
    ``h^3 poisson_3d(n)``, in the same numbering.

    Parameters
    ----------
    n : int, optional
        Interior grid points in ``y`` and ``z``, for ``mesh="structured"`` (see
        :func:`box_mesh`).
    mesh : {"structured"} or skfem.MeshTet
        :func:`box_mesh` of ``n`` and ``length``, or a mesh of your own (then ``n`` is None).
    length : float
        Extent of the box in ``x`` for ``mesh="structured"``.
    coefficient : float, array_like or callable, optional
        As in :func:`fem_poisson_2d`, one value per tetrahedron (the callable receives
        ``(num_tetrahedra, 3)`` centroids).  Default 1.
    dtype : numpy dtype
        ``float32`` or ``float64``.
    return_nodes : bool
        Also return the mesh node of every unknown.
    neumann : ddops.Decomposition or sequence of integer arrays, optional
        As in :func:`fem_poisson_2d`.

    Returns
    -------
    A : scipy.sparse.csr_matrix
        Symmetric positive definite, one row per interior node, in increasing node order.
    coordinates : numpy.ndarray
        ``(m, 3)`` coordinates of the unknowns.
    nodes : numpy.ndarray
        Only with ``return_nodes=True``: mesh node indices of the unknowns (ascending).
    neumann_matrices : list of scipy.sparse.csr_matrix
        Only with ``neumann``, always last; as in :func:`fem_poisson_2d`.
    """
    skfem = _skfem()
    m = _mesh_3d(n, mesh, length)
    return _poisson(skfem, m, skfem.ElementTetP1(), coefficient, dtype, return_nodes, neumann)


def fem_elasticity_2d(
    n: int | None = None,
    *,
    mesh="structured",
    jitter: float = 0.3,
    seed=0,
    E=1.0,
    nu: float = 0.3,
    dirichlet: str | None = "left",
    dtype=np.float64,
    return_nodes: bool = False,
    neumann=None,
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
    E : float, array_like or callable
        Young's modulus (``> 0``), constant on each triangle: a scalar, one value per
        triangle (``mesh.t.shape[1]``, in the order of ``mesh.t``'s columns), or a callable
        mapping the ``(num_triangles, 2)`` centroids (:func:`element_centroids`) to such
        values.
    nu : float
        Poisson ratio, in ``(-1, 0.5)`` (the same everywhere).
    dirichlet : {"left", "boundary", None}
        Nodes whose two displacements are fixed to zero and removed: those on the side of
        smallest ``x`` (a clamped cantilever), all boundary nodes, or none (the pure traction
        problem: singular, with the rigid body modes as null space).
    dtype : numpy dtype
        ``float32`` or ``float64``.
    return_nodes : bool
        Also return the mesh node of every kept node.
    neumann : ddops.Decomposition or sequence of integer arrays, optional
        Subdomains of the unknowns (rows of ``A``; a decomposition typically with
        ``block_size=2``): also return their local Neumann matrices (see the module notes).

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
    neumann_matrices : list of scipy.sparse.csr_matrix
        Only with ``neumann``, always last: ``N_i`` of shape ``(len(idx_i), len(idx_i))``
        for the unknowns ``idx_i`` of subdomain ``i``, in the order of ``idx_i``; symmetric
        positive semi-definite, with the rigid body modes of its nodes in the kernel when the
        subdomain holds both displacements of its nodes and touches no Dirichlet node.
    """
    skfem = _skfem()
    m = _mesh(n, mesh, jitter, seed)
    return _elasticity(skfem, m, skfem.ElementTriP1(), E, nu, dirichlet, dtype, return_nodes,
                       neumann)


def fem_elasticity_3d(
    n: int | None = None,
    *,
    mesh="structured",
    length: float = 1.0,
    E=1.0,
    nu: float = 0.3,
    dirichlet: str | None = "left",
    dtype=np.float64,
    return_nodes: bool = False,
    neumann=None,
):
    r"""P1 linear elasticity on a tetrahedral mesh, interleaved dofs.

    The 3D analogue of :func:`fem_elasticity_2d`: the stiffness matrix of
    :math:`\int \sigma(u) : \varepsilon(v)` with the Lamé parameters of ``E`` and ``nu``, rows
    ``3 k``, ``3 k + 1``, ``3 k + 2`` the ``x``, ``y`` and ``z`` displacement of the ``k``-th
    kept node (the order of :func:`ddops.problems.rigid_body_modes`).  By default the unit
    cube clamped at ``x = 0``; ``length > 1`` gives a cantilever beam.

    Parameters
    ----------
    n : int, optional
        Interior grid points in ``y`` and ``z``, for ``mesh="structured"`` (see
        :func:`box_mesh`; ``n + 1`` cells per unit length in every direction).
    mesh : {"structured"} or skfem.MeshTet
        :func:`box_mesh` of ``n`` and ``length``, or a mesh of your own (then ``n`` is None).
    length : float
        Extent of the box in ``x`` for ``mesh="structured"``.
    E : float, array_like or callable
        Young's modulus (``> 0``), constant on each tetrahedron: as in
        :func:`fem_elasticity_2d`, the callable receiving ``(num_tetrahedra, 3)`` centroids.
    nu : float
        Poisson ratio, in ``(-1, 0.5)``.
    dirichlet : {"left", "boundary", None}
        Nodes whose three displacements are fixed to zero and removed: those on the face of
        smallest ``x``, all boundary nodes, or none (singular, with the six rigid body modes
        as null space).
    dtype : numpy dtype
        ``float32`` or ``float64``.
    return_nodes : bool
        Also return the mesh node of every kept node.
    neumann : ddops.Decomposition or sequence of integer arrays, optional
        As in :func:`fem_elasticity_2d` (a decomposition typically with ``block_size=3``).

    Returns
    -------
    A : scipy.sparse.csr_matrix
        Symmetric, ``3 m x 3 m`` for ``m`` kept nodes; positive definite unless
        ``dirichlet=None``.
    coordinates : numpy.ndarray
        ``(m, 3)`` coordinates of the kept nodes (in increasing node order).
    nodes : numpy.ndarray
        Only with ``return_nodes=True``: mesh node indices of the kept nodes (ascending).
    neumann_matrices : list of scipy.sparse.csr_matrix
        Only with ``neumann``, always last; as in :func:`fem_elasticity_2d`.
    """
    skfem = _skfem()
    m = _mesh_3d(n, mesh, length)
    return _elasticity(skfem, m, skfem.ElementTetP1(), E, nu, dirichlet, dtype, return_nodes,
                       neumann)
