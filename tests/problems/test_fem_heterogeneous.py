"""Per-element coefficients, the 3D problems and the local Neumann matrices of
ddops.problems.fem, against loop-based dense references and the defining properties."""

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

import ddops
from ddops.problems import grid_coordinates, poisson_3d, rigid_body_modes

skfem = pytest.importorskip("skfem")

from ddops.problems import fem  # noqa: E402  (after the skip: the module needs scikit-fem)
from ddops.problems.random_fields import stiff_inclusions  # noqa: E402

# ---------------------------------------------------------------------------
# Dense references: loops over the elements, textbook (Voigt) element matrices.


def simplex_gradients(P):
    """Gradients (d+1, d) of the barycentric functions of the simplex P (d+1, d), and volume."""
    d = P.shape[1]
    T = np.hstack([np.ones((d + 1, 1)), P])
    volume = abs(np.linalg.det(T)) / np.prod(np.arange(1, d + 1))
    return np.linalg.inv(T)[1:].T, volume


def laplace_element(P, c=1.0):
    G, volume = simplex_gradients(P)
    return c * volume * G @ G.T


def elasticity_element(P, E, nu):
    """P1 element stiffness, dofs interleaved (d a + i for component i at vertex a)."""
    d = P.shape[1]
    lam = E * nu / ((1 + nu) * (1 - 2 * nu))
    mu = E / (2 * (1 + nu))
    G, volume = simplex_gradients(P)
    if d == 2:
        D = np.array([[lam + 2 * mu, lam, 0], [lam, lam + 2 * mu, 0], [0, 0, mu]])
        B = np.zeros((3, 6))
        for a, (bx, by) in enumerate(G):
            B[:, 2 * a : 2 * a + 2] = [[bx, 0], [0, by], [by, bx]]
    else:
        D = np.zeros((6, 6))
        D[:3, :3] = lam
        D[np.arange(3), np.arange(3)] += 2 * mu
        D[np.arange(3, 6), np.arange(3, 6)] = mu
        B = np.zeros((6, 12))
        for a, (bx, by, bz) in enumerate(G):
            B[:, 3 * a : 3 * a + 3] = [[bx, 0, 0], [0, by, 0], [0, 0, bz],
                                       [0, bz, by], [bz, 0, bx], [by, bx, 0]]
    return volume * B.T @ D @ B


def element_dofs(tet, block):
    return np.ravel([[block * v + i for i in range(block)] for v in tet])


def dense_global(mesh, block, element_matrix):
    """Loop assembly over all nodes (full interleaved numbering)."""
    K = np.zeros((block * mesh.p.shape[1],) * 2)
    for e, verts in enumerate(mesh.t.T):
        dofs = element_dofs(verts, block)
        K[np.ix_(dofs, dofs)] += element_matrix(mesh.p[:, verts].T, e)
    return K


def dense_neumann(mesh, block, element_matrix, kept_nodes, subdomains):
    """Loop reference of the local Neumann matrices in the unknowns' numbering."""
    unknown = -np.ones(block * mesh.p.shape[1], dtype=int)
    kept = np.ravel([[block * v + i for i in range(block)] for v in kept_nodes])
    unknown[kept] = np.arange(kept.size)
    out = []
    for idx in subdomains:
        local = {int(u): k for k, u in enumerate(idx)}
        N = np.zeros((len(idx), len(idx)))
        for e, verts in enumerate(mesh.t.T):
            us = unknown[element_dofs(verts, block)]
            if not np.any(us >= 0) or not all(int(u) in local for u in us if u >= 0):
                continue
            Ke = element_matrix(mesh.p[:, verts].T, e)
            for a, b in itertools.product(range(us.size), repeat=2):
                if us[a] >= 0 and us[b] >= 0:
                    N[local[int(us[a])], local[int(us[b])]] += Ke[a, b]
        out.append(N)
    return out


def coefficient_values(mesh, seed=0):
    return np.random.default_rng(seed).uniform(0.5, 20.0, mesh.t.shape[1])


# The four problems: (function, extra arguments, block size, coefficient keyword)
PROBLEMS = {
    "poisson_2d": (fem.fem_poisson_2d, {"mesh": "unstructured"}, 1, "coefficient"),
    "elasticity_2d": (fem.fem_elasticity_2d, {"mesh": "unstructured"}, 2, "E"),
    "poisson_3d": (fem.fem_poisson_3d, {}, 1, "coefficient"),
    "elasticity_3d": (fem.fem_elasticity_3d, {}, 3, "E"),
}


def build(name, n, **kwargs):
    func, extra, block, key = PROBLEMS[name]
    return func(n, **extra, **kwargs)


def mesh_of(name, n):
    if name.endswith("2d"):
        return fem.unit_square_mesh(n, kind="unstructured")
    return fem.box_mesh(n)


def reference_element(name, coefficient, nu=0.3):
    if name.startswith("poisson"):
        return lambda P, e: laplace_element(P, coefficient[e])
    return lambda P, e: elasticity_element(P, coefficient[e], nu)


# ---------------------------------------------------------------------------
# Meshes


@pytest.mark.parametrize("n,length", [(1, 1.0), (3, 1.0), (2, 2.0), (3, 0.5)])
def test_box_mesh_is_a_conforming_tetrahedral_mesh_of_the_box(n, length):
    m = fem.box_mesh(n, length=length)
    h = 1.0 / (n + 1)
    cx = round(length * (n + 1))
    assert m.p.shape == (3, (cx + 1) * (n + 2) ** 2)
    assert m.t.shape == (4, 6 * cx * (n + 1) ** 2)
    # node i + (cx + 1) j + (cx + 1)(n + 2) k at (i length / cx, j h, k h)
    expected = np.array([[i * length / cx, j * h, k * h] for k in range(n + 2)
                         for j in range(n + 2) for i in range(cx + 1)]).T
    np.testing.assert_allclose(m.p, expected, atol=1e-15)
    volumes = np.array([simplex_gradients(m.p[:, tet].T)[1] for tet in m.t.T])
    np.testing.assert_allclose(volumes, length / cx * h * h / 6, rtol=1e-12)
    # conforming: every face is shared by two tetrahedra, or lies on the boundary
    faces = np.sort(np.concatenate([m.t[list(f)] for f in itertools.combinations(range(4), 3)],
                                   axis=1), axis=0)
    _, counts = np.unique(faces, axis=1, return_counts=True)
    assert set(counts.tolist()) <= {1, 2}
    ny = n + 1
    assert np.sum(counts == 1) == 2 * (2 * cx * ny + 2 * cx * ny + 2 * ny * ny)


def test_element_centroids():
    for m in (fem.unit_square_mesh(3, kind="unstructured"), fem.box_mesh(2)):
        X = fem.element_centroids(m)
        assert X.shape == (m.t.shape[1], m.p.shape[0])
        for e in (0, 5, m.t.shape[1] - 1):
            np.testing.assert_allclose(X[e], np.mean([m.p[:, v] for v in m.t[:, e]], axis=0))
    with pytest.raises(TypeError, match="mesh must be a scikit-fem mesh"):
        fem.element_centroids(np.zeros((3, 4)))


# ---------------------------------------------------------------------------
# The 3D problems


@pytest.mark.parametrize("n", [1, 3])
def test_fem_poisson_3d_structured_is_the_seven_point_stencil(n):
    A, X = fem.fem_poisson_3d(n)
    h = 1.0 / (n + 1)
    np.testing.assert_allclose(A.toarray(), h**3 * poisson_3d(n).toarray(), atol=1e-14)
    np.testing.assert_allclose(X, grid_coordinates(n, 3), atol=1e-15)
    assert A.format == "csr" and A.has_sorted_indices


def test_fem_poisson_3d_beam_and_dtype():
    A, X, nodes = fem.fem_poisson_3d(2, length=2.0, return_nodes=True, dtype=np.float32)
    assert A.dtype == np.float32 and A.shape == (5 * 2 * 2,) * 2
    assert np.all((X > 0) & (X < [2, 1, 1]))
    np.linalg.cholesky(A.toarray().astype(np.float64))


def test_fem_elasticity_3d_matches_dense_interleaved_assembly():
    m = fem.box_mesh(1, length=2.0)
    E, nu = 2.5, 0.25
    ref = dense_global(m, 3, lambda P, e: elasticity_element(P, E, nu))
    K, X, nodes = fem.fem_elasticity_3d(mesh=m, E=E, nu=nu, dirichlet=None, return_nodes=True)
    np.testing.assert_array_equal(nodes, np.arange(m.p.shape[1]))
    np.testing.assert_allclose(K.toarray(), ref, atol=1e-13 * np.abs(ref).max())
    Z = rigid_body_modes(X)
    assert np.abs(K @ Z).max() < 1e-12 * np.abs(ref).max() * np.abs(Z).max()
    # clamped at x = 0 by default: the other nodes, still interleaved
    A, X, nodes = fem.fem_elasticity_3d(mesh=m, E=E, nu=nu, return_nodes=True)
    kept = np.flatnonzero(m.p[0] > 1e-12)
    np.testing.assert_array_equal(nodes, kept)
    np.testing.assert_array_equal(X, m.p[:, kept].T)
    dofs = element_dofs(kept, 3)
    np.testing.assert_allclose(A.toarray(), ref[np.ix_(dofs, dofs)], atol=1e-13 * np.abs(ref).max())
    np.linalg.cholesky(A.toarray())
    B = fem.fem_elasticity_3d(2, dirichlet="boundary")[0]
    assert B.shape == (3 * 8, 3 * 8)
    np.linalg.cholesky(B.toarray())


# ---------------------------------------------------------------------------
# Per-element coefficients


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_per_element_coefficient_matches_dense_assembly(name):
    func, extra, block, key = PROBLEMS[name]
    m = mesh_of(name, 2)
    c = coefficient_values(m, seed=1)
    A, X, nodes = func(mesh=m, return_nodes=True, **{key: c})
    ref = dense_global(m, block, reference_element(name, c))
    dofs = element_dofs(nodes, block)
    np.testing.assert_allclose(A.toarray(), ref[np.ix_(dofs, dofs)], rtol=0,
                               atol=1e-13 * np.abs(ref).max())


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_constant_per_element_coefficient_reproduces_the_scalar(name):
    func, extra, block, key = PROBLEMS[name]
    A1 = build(name, 3)[0]
    num = mesh_of(name, 3).t.shape[1]
    for value in (1.0, 2.5):
        A = build(name, 3, **{key: np.full(num, value)})[0]
        S = build(name, 3, **{key: value})[0]
        np.testing.assert_allclose(A.toarray(), value * A1.toarray(), rtol=0, atol=1e-13 * value)
        np.testing.assert_allclose(S.toarray(), A.toarray(), rtol=0, atol=1e-13 * value)
        # a callable of the centroids gives the same
        C = build(name, 3, **{key: lambda X, v=value: np.full(X.shape[0], v)})[0]
        np.testing.assert_allclose(C.toarray(), A.toarray(), rtol=0, atol=1e-13 * value)


def test_two_valued_coefficient_changes_one_hand_built_element():
    # structured mesh, n = 3, h = 1/4: the triangle (1, 1)-(2, 1)-(2, 2) in grid units has the
    # interior vertices 5, 6, 10 of the 5 x 5 node grid; its Laplace element matrix is
    # (1/2) [[1, -1, 0], [-1, 2, -1], [0, -1, 1]] for every h
    n = 3
    m = fem.unit_square_mesh(n)
    verts = [1 + 5 * 1, 2 + 5 * 1, 2 + 5 * 2]
    e = int(np.flatnonzero(np.all(np.sort(m.t, axis=0) == np.array(verts)[:, None], axis=0))[0])
    c = np.ones(m.t.shape[1])
    c[e] = 1e6
    A = fem.fem_poisson_2d(mesh=m, coefficient=c)[0].toarray()
    A1 = fem.fem_poisson_2d(mesh=m)[0].toarray()
    unknowns = [(v % 5 - 1) + n * (v // 5 - 1) for v in verts]  # interior numbering
    expected = np.zeros_like(A)
    expected[np.ix_(unknowns, unknowns)] = (1e6 - 1) * 0.5 * np.array([[1, -1, 0], [-1, 2, -1],
                                                                       [0, -1, 1]])
    np.testing.assert_allclose(A - A1, expected, rtol=0, atol=1e-8)
    # elasticity: the same element with E = 1e6 adds (1e6 - 1) times its Voigt element matrix
    E = fem.fem_elasticity_2d(mesh=m, E=c, nu=0.2, dirichlet=None)[0].toarray()
    E1 = fem.fem_elasticity_2d(mesh=m, nu=0.2, dirichlet=None)[0].toarray()
    expected = np.zeros_like(E)
    dofs = element_dofs(verts, 2)
    expected[np.ix_(dofs, dofs)] = (1e6 - 1) * elasticity_element(m.p[:, verts].T, 1.0, 0.2)
    np.testing.assert_allclose(E - E1, expected, rtol=0, atol=1e-7)


def test_callable_coefficient_is_evaluated_at_the_centroids():
    m = fem.unit_square_mesh(4, kind="unstructured", seed=3)
    X = fem.element_centroids(m)
    seen = []

    def coefficient(points):
        seen.append(points.copy())
        return stiff_inclusions(points, count=5, radius=0.2, contrast=1e4)

    A = fem.fem_poisson_2d(mesh=m, coefficient=coefficient)[0]
    np.testing.assert_array_equal(seen[0], X)
    B = fem.fem_poisson_2d(mesh=m, coefficient=stiff_inclusions(X, count=5, radius=0.2,
                                                                contrast=1e4))[0]
    np.testing.assert_array_equal(A.toarray(), B.toarray())
    assert np.abs(A).max() > 1e3


# ---------------------------------------------------------------------------
# Local Neumann matrices


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_neumann_matches_a_loop_reference_for_arbitrary_subdomains(name):
    func, extra, block, key = PROBLEMS[name]
    m = mesh_of(name, 2)
    c = coefficient_values(m, seed=2)
    A, X, nodes = func(mesh=m, return_nodes=True, **{key: c})
    num = A.shape[0]
    rng = np.random.default_rng(0)
    # overlapping, unsorted subdomains of whole nodes, one of single unknowns, one empty
    subdomains = [rng.permutation(num)[: num // 2], rng.permutation(num)[: 2 * num // 3],
                  np.arange(num)[::-1], rng.permutation(num)[: max(1, num // 5)],
                  np.array([], dtype=int)]
    ref = dense_neumann(m, block, reference_element(name, c), nodes, subdomains)
    A2, X2, nodes2, N = func(mesh=m, return_nodes=True, neumann=subdomains, **{key: c})
    np.testing.assert_array_equal(A2.toarray(), A.toarray())
    assert len(N) == len(subdomains)
    scale = np.abs(A).max()
    for Ni, Ri, idx in zip(N, ref, subdomains, strict=True):
        assert sp.isspmatrix_csr(Ni) and Ni.shape == (idx.size, idx.size)
        assert Ni.dtype == np.float64 and Ni.has_sorted_indices
        np.testing.assert_allclose(Ni.toarray(), Ri, rtol=0, atol=1e-13 * scale)
    # the whole set of unknowns as one subdomain: all elements, i.e. A itself (scikit-fem's
    # assembly against the closed-form element matrices)
    np.testing.assert_allclose(N[2].toarray(), A.toarray()[::-1, ::-1], rtol=0,
                               atol=1e-13 * scale)


def neighbouring_elements_inside(mesh, nodes, block, idx):
    """Unknowns of idx all of whose elements have all their unknowns in idx (test-side loop)."""
    unknown_node = np.repeat(nodes, block)  # node of each unknown
    in_idx = np.zeros(unknown_node.size, dtype=bool)
    in_idx[idx] = True
    node_unknowns = {v: np.flatnonzero(unknown_node == v) for v in nodes}
    good = []
    for u in idx:
        elements = np.flatnonzero(np.any(mesh.t == unknown_node[u], axis=0))
        ok = all(in_idx[node_unknowns[v]].all() for e in elements for v in mesh.t[:, e]
                 if v in node_unknowns)
        if ok:
            good.append(u)
    return np.array(good, dtype=int)


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_neumann_of_a_decomposition(name):
    func, extra, block, key = PROBLEMS[name]
    n = 5 if name.endswith("2d") else 3
    m = mesh_of(name, n)
    c = coefficient_values(m, seed=4)
    A, X, nodes = func(mesh=m, return_nodes=True, **{key: c})
    d = ddops.Decomposition.from_matrix(A, 3, overlap=1, block_size=block)
    A2, X2, N = func(mesh=m, neumann=d, **{key: c})
    Ad = A.toarray()
    scale = np.abs(Ad).max()
    differs = False
    for i, (Ni, idx) in enumerate(zip(N, d.subdomains, strict=True)):
        assert Ni.shape == (d.sizes[i],) * 2
        D = Ni.toarray()
        # (a) symmetric positive semi-definite
        np.testing.assert_allclose(D, D.T, rtol=0, atol=1e-14 * scale)
        lam = np.linalg.eigvalsh(D)
        assert lam[0] >= -1e-10 * lam[-1]
        # (b) rows of unknowns whose elements all lie inside are A's rows (restricted, and A
        # has nothing outside idx there)
        good = neighbouring_elements_inside(m, nodes, block, idx)
        assert good.size > 0
        rows = np.searchsorted(idx, good)
        np.testing.assert_allclose(D[rows], Ad[np.ix_(good, idx)], rtol=0, atol=1e-13 * scale)
        outside = np.setdiff1d(np.arange(A.shape[0]), idx)
        assert np.all(Ad[np.ix_(good, outside)] == 0)
        differs |= not np.allclose(D, Ad[np.ix_(idx, idx)], rtol=0, atol=1e-10 * scale)
    assert differs  # not just the restriction of A
    # the decomposition and the list of its subdomains give the same matrices
    N_list = func(mesh=m, neumann=d.subdomains, **{key: c})[-1]
    for a, b in zip(N, N_list, strict=True):
        assert (a != b).nnz == 0


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_floating_subdomain_has_the_null_space_in_its_kernel(name):
    func, extra, block, key = PROBLEMS[name]
    n = 7 if name.endswith("2d") else 4
    m = mesh_of(name, n)
    c = coefficient_values(m, seed=5)
    A, X, nodes = func(mesh=m, return_nodes=True, **{key: c})
    # the nodes of a box in the middle: no Dirichlet node, so the subdomain floats ...
    box = np.flatnonzero(np.all((X > 0.3) & (X < 0.8), axis=1))
    floating = element_dofs(box, block)
    # ... and one touching the clamped side / boundary is anchored
    corner = element_dofs(np.flatnonzero(np.all(X < 0.45, axis=1)), block)
    *_, (Nf, Nc) = func(mesh=m, neumann=[floating, corner], **{key: c})
    if block == 1:
        Z = np.ones((floating.size, 1))
    else:
        Z = rigid_body_modes(X[box])
    kernel = Z.shape[1]
    D = Nf.toarray()
    scale = np.abs(D).max()
    np.testing.assert_allclose(D @ Z, 0, atol=1e-11 * scale * np.abs(Z).max())
    lam = np.linalg.eigvalsh(D)
    assert np.all(np.abs(lam[:kernel]) < 1e-11 * lam[-1])
    assert lam[kernel] > 1e-8 * lam[-1]  # and nothing else
    lam_c = np.linalg.eigvalsh(Nc.toarray())
    assert lam_c[0] > 1e-8 * lam_c[-1]


@pytest.mark.parametrize("name", ["elasticity_2d", "elasticity_3d"])
@pytest.mark.parametrize("dirichlet", ["left", "boundary", None])
def test_neumann_alone_equals_the_loop_reference(name, dirichlet):
    """``fem_elasticity_neumann`` (without assembling A) against the loop reference, for the
    kept nodes of every Dirichlet choice, and equal to the matrices returned with A."""
    func, extra, block, key = PROBLEMS[name]
    m = mesh_of(name, 2)
    c = coefficient_values(m, seed=6)
    A, X, nodes = func(mesh=m, return_nodes=True, dirichlet=dirichlet, E=c)
    num = A.shape[0]
    rng = np.random.default_rng(1)
    subdomains = [rng.permutation(num)[: num // 2], np.arange(num)[::-1],
                  rng.permutation(num)[: max(1, num // 5)]]
    ref = dense_neumann(m, block, reference_element(name, c), nodes, subdomains)
    N = fem.fem_elasticity_neumann(m, subdomains, E=c, dirichlet=dirichlet)
    scale = np.abs(A).max()
    assert len(N) == len(subdomains)
    for Ni, Ri in zip(N, ref, strict=True):
        np.testing.assert_allclose(Ni.toarray(), Ri, rtol=0, atol=1e-13 * scale)
    with_A = func(mesh=m, dirichlet=dirichlet, E=c, neumann=subdomains)[-1]
    for a, b in zip(N, with_A, strict=True):
        assert (a != b).nnz == 0
    N32 = fem.fem_elasticity_neumann(m, subdomains[:1], E=c, dirichlet=dirichlet,
                                     dtype=np.float32)
    assert N32[0].dtype == np.float32


def test_neumann_alone_refuses_what_the_assembly_refuses():
    m = fem.unit_square_mesh(3)
    with pytest.raises(TypeError, match="mesh must be a skfem.MeshTri or skfem.MeshTet"):
        fem.fem_elasticity_neumann("structured", [np.arange(4)])
    with pytest.raises(ValueError, match="nu"):
        fem.fem_elasticity_neumann(m, [np.arange(4)], nu=0.5)
    with pytest.raises(ValueError, match="dirichlet"):
        fem.fem_elasticity_neumann(m, [np.arange(4)], dirichlet="top")
    with pytest.raises(ValueError, match="E"):
        fem.fem_elasticity_neumann(m, [np.arange(4)], E=np.ones(3))


def test_neumann_return_order_and_dtype():
    A, X, nodes, N = fem.fem_poisson_2d(4, return_nodes=True, dtype=np.float32,
                                        neumann=[np.arange(5)])
    assert A.dtype == np.float32 and N[0].dtype == np.float32 and N[0].shape == (5, 5)
    assert nodes.shape == (16,)
    out = fem.fem_elasticity_3d(1, neumann=[np.arange(6)])
    assert len(out) == 3 and isinstance(out[2], list)


# ---------------------------------------------------------------------------
# Bad input


@pytest.mark.parametrize(
    "call,error,match",
    [
        (lambda: fem.fem_poisson_2d(3, coefficient=np.ones(5)), ValueError,
         r"coefficient must have one value per element, shape \(32,\)"),
        (lambda: fem.fem_poisson_2d(3, coefficient=-1.0), ValueError,
         "coefficient must be finite and > 0"),
        (lambda: fem.fem_poisson_2d(3, coefficient=np.r_[0.0, np.ones(31)]), ValueError,
         "coefficient must be > 0 on every element"),
        (lambda: fem.fem_poisson_2d(3, coefficient=np.full(32, np.nan)), ValueError,
         "coefficient contains NaN"),
        (lambda: fem.fem_poisson_2d(3, coefficient="a"), TypeError, "coefficient must be a real"),
        (lambda: fem.fem_poisson_2d(3, coefficient=sp.eye(32)), TypeError, "sparse"),
        (lambda: fem.fem_poisson_2d(3, coefficient=lambda X: np.ones(3)), ValueError,
         "the values returned by coefficient must have one value per element"),
        (lambda: fem.fem_elasticity_2d(3, E=np.ones((32, 2))), ValueError,
         "E must have one value per element"),
        (lambda: fem.fem_elasticity_3d(1, E=lambda X: -np.ones(len(X))), ValueError,
         "the values returned by E must be > 0"),
        (lambda: fem.fem_elasticity_3d(1, nu=0.5), ValueError, "nu must be in"),
        (lambda: fem.fem_elasticity_3d(1, dirichlet="top"), ValueError, "dirichlet must be"),
        (lambda: fem.fem_poisson_3d(), TypeError, "n is required"),
        (lambda: fem.fem_poisson_3d(2, mesh="unstructured"), ValueError, "mesh must be one of"),
        (lambda: fem.fem_poisson_3d(mesh=fem.unit_square_mesh(2)), TypeError,
         "mesh must be one of .* or a skfem.MeshTet"),
        (lambda: fem.fem_poisson_3d(2, mesh=fem.box_mesh(2)), TypeError, "n must be None"),
        (lambda: fem.fem_poisson_2d(mesh=fem.box_mesh(2)), TypeError, "skfem.MeshTri"),
        (lambda: fem.fem_poisson_3d(2, length=0.0), ValueError, "length must be finite"),
        (lambda: fem.box_mesh(0), ValueError, "n must be >= 1"),
        (lambda: fem.fem_poisson_2d(3, neumann="abc"), TypeError, "neumann must be a"),
        (lambda: fem.fem_poisson_2d(3, neumann=np.arange(4)), TypeError, "neumann must be a"),
        (lambda: fem.fem_poisson_2d(3, neumann=5), TypeError, "neumann must be a"),
        (lambda: fem.fem_poisson_2d(3, neumann=[]), ValueError, "at least one subdomain"),
        (lambda: fem.fem_poisson_2d(3, neumann=[np.arange(9) + 1]), ValueError,
         r"neumann: the indices of subdomain 0 must lie in \[0, 9\)"),
        (lambda: fem.fem_poisson_2d(3, neumann=[[0, 1], [2, 2]]), ValueError,
         "neumann: subdomain 1 contains repeated"),
        (lambda: fem.fem_poisson_2d(3, neumann=[[0.0, 1.0]]), TypeError,
         "neumann: subdomain 0 must be a 1-D integer array"),
        (lambda: fem.fem_poisson_2d(3, neumann=[np.zeros((2, 2), dtype=int)]), TypeError,
         "neumann: subdomain 0 must be a 1-D integer array"),
        (lambda: fem.fem_poisson_2d(3, neumann=ddops.Decomposition([np.arange(10)], 10)),
         ValueError, "neumann: the decomposition has 10 unknowns, the problem 9"),
    ],
)
def test_rejects_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_new_functions_are_exported_lazily():
    import ddops.problems as P

    for name in ("fem_poisson_3d", "fem_elasticity_3d", "box_mesh", "element_centroids"):
        assert name in P.__all__ and getattr(P, name) is getattr(fem, name)
