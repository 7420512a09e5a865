"""Rigid body modes and the scikit-fem problems of ddops.problems against independent references."""

import subprocess
import sys

import numpy as np
import pytest
import scipy.linalg as sla

from ddops.problems import grid_coordinates, poisson_2d, rigid_body_modes


def skfem_or_skip():
    return pytest.importorskip("skfem")


# ---------------------------------------------------------------------------
# Dense references: loops over the triangles of a mesh, no scikit-fem.


def _p1_gradients(P):
    """Gradients (3 x 2) of the barycentric functions of the triangle with vertices P (3 x 2)."""
    T = np.array([[1.0, *P[0]], [1.0, *P[1]], [1.0, *P[2]]])
    area = abs(np.linalg.det(T)) / 2
    return np.linalg.inv(T)[1:].T, area


def p1_laplace_dense(p, t):
    K = np.zeros((p.shape[1],) * 2)
    for tri in t.T:
        G, area = _p1_gradients(p[:, tri].T)
        K[np.ix_(tri, tri)] += area * G @ G.T
    return K


def p1_elasticity_dense(p, t, E, nu):
    """Plane-strain P1 stiffness, dofs interleaved (2 k, 2 k + 1 at node k)."""
    lam = E * nu / ((1 + nu) * (1 - 2 * nu))
    mu = E / (2 * (1 + nu))
    D = np.array([[lam + 2 * mu, lam, 0], [lam, lam + 2 * mu, 0], [0, 0, mu]])
    K = np.zeros((2 * p.shape[1],) * 2)
    for tri in t.T:
        G, area = _p1_gradients(p[:, tri].T)
        B = np.zeros((3, 6))  # rows: eps_xx, eps_yy, gamma_xy
        for a in range(3):
            bx, by = G[a]
            B[:, 2 * a : 2 * a + 2] = [[bx, 0], [0, by], [by, bx]]
        dofs = np.ravel([[2 * v, 2 * v + 1] for v in tri])
        K[np.ix_(dofs, dofs)] += area * B.T @ D @ B
    return K


def assert_spd(A):
    D = A.toarray()
    np.testing.assert_allclose(D, D.T, rtol=0, atol=1e-14 * np.abs(D).max())
    sla.cholesky(D)


# ---------------------------------------------------------------------------
# Rigid body modes (numpy only)


@pytest.mark.parametrize("dim", [2, 3])
@pytest.mark.parametrize("center", [True, False])
def test_rigid_body_modes_are_infinitesimal_rigid_motions(dim, center):
    # each mode is a displacement field u(x) = a + B x with B skew (zero strain), and
    # together they span all such fields: d translations and d (d - 1) / 2 rotations
    rng = np.random.default_rng(dim)
    X = rng.uniform(-2, 3, size=(40, dim))
    Z = rigid_body_modes(X, center=center)
    modes = 3 if dim == 2 else 6
    assert Z.shape == (dim * 40, modes) and Z.dtype == np.float64
    affine = np.hstack([np.ones((40, 1)), X])
    for col in range(modes):
        U = Z[:, col].reshape(40, dim)  # interleaved: row k = node k
        coef, *_ = np.linalg.lstsq(affine, U, rcond=None)
        np.testing.assert_allclose(affine @ coef, U, atol=1e-12)  # affine in x
        B = coef[1:].T
        np.testing.assert_allclose(B + B.T, 0, atol=1e-12)  # zero strain
    assert np.linalg.matrix_rank(Z) == modes


def test_rigid_body_modes_interleaved_order_2d():
    X = np.array([[0.0, 0.0], [2.0, 0.0], [0.0, 3.0]])
    Z = rigid_body_modes(X, center=False)
    np.testing.assert_array_equal(Z[:, 0], [1, 0, 1, 0, 1, 0])  # x-translation
    np.testing.assert_array_equal(Z[:, 1], [0, 1, 0, 1, 0, 1])  # y-translation
    np.testing.assert_array_equal(Z[:, 2], [0, 0, 0, 2, -3, 0])  # (-y, x)
    Zc = rigid_body_modes(X)
    centroid = X.mean(axis=0)
    np.testing.assert_allclose(Zc[0::2, 2], -(X[:, 1] - centroid[1]))
    np.testing.assert_allclose(Zc[1::2, 2], X[:, 0] - centroid[0])


def test_rigid_body_modes_interleaved_order_3d():
    X = np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 0.0]])
    Z = rigid_body_modes(X, center=False)
    assert Z.shape == (6, 6)
    for k, (x, y, z) in enumerate(X):
        rows = Z[3 * k : 3 * k + 3]
        np.testing.assert_array_equal(rows[:, :3], np.eye(3))
        np.testing.assert_array_equal(rows[:, 3], [0, -z, y])
        np.testing.assert_array_equal(rows[:, 4], [z, 0, -x])
        np.testing.assert_array_equal(rows[:, 5], [-y, x, 0])


def test_rigid_body_modes_dtype():
    assert rigid_body_modes(np.zeros((3, 2)), dtype=np.float32).dtype == np.float32


@pytest.mark.parametrize(
    "coordinates,error,match",
    [
        (np.zeros(4), ValueError, "coordinates must have shape"),
        (np.zeros((4, 1)), ValueError, "coordinates must have shape"),
        (np.zeros((4, 4)), ValueError, "coordinates must have shape"),
        (np.zeros((0, 2)), ValueError, "coordinates must have shape"),
        (np.full((2, 2), np.inf), ValueError, "coordinates contain NaN"),
        ([["a", "b"]], TypeError, "coordinates must be a real"),
    ],
)
def test_rigid_body_modes_rejects_bad_coordinates(coordinates, error, match):
    with pytest.raises(error, match=match):
        rigid_body_modes(coordinates)


# ---------------------------------------------------------------------------
# Rigid body modes span the null space of pure-traction elasticity (scikit-fem)


def _smallest_eigenvalues(K, k):
    return np.linalg.eigvalsh(K.toarray())[:k]


@pytest.mark.parametrize("mesh", ["structured", "unstructured"])
def test_rigid_body_modes_span_null_space_of_p1_elasticity_2d(mesh):
    skfem_or_skip()
    from ddops.problems.fem import fem_elasticity_2d

    K, X = fem_elasticity_2d(5, mesh=mesh, dirichlet=None)
    Z = rigid_body_modes(X)
    scale = sla.norm(K.toarray(), 2) * np.linalg.norm(Z, axis=0)
    assert np.all(np.linalg.norm(K @ Z, axis=0) <= 1e-12 * scale)
    assert np.linalg.matrix_rank(Z) == 3
    # ... and nothing else: exactly three zero eigenvalues
    lam = _smallest_eigenvalues(K, 4)
    assert np.all(np.abs(lam[:3]) < 1e-12 * lam[3]) and lam[3] > 1e-6


def test_rigid_body_modes_span_null_space_of_p1_elasticity_3d():
    skfem = skfem_or_skip()
    from skfem.models.elasticity import linear_elasticity

    g = np.linspace(0, 1, 4)
    mesh = skfem.MeshTet.init_tensor(g, g, 0.5 * g)
    basis = skfem.Basis(mesh, skfem.ElementVector(skfem.ElementTetP1()))
    K = skfem.asm(linear_elasticity(1.0, 0.7), basis).tocsr()
    perm = basis.nodal_dofs.T.ravel()  # to interleaved order, whatever scikit-fem uses
    K = K[perm][:, perm]
    Z = rigid_body_modes(mesh.p.T)
    scale = sla.norm(K.toarray(), 2) * np.linalg.norm(Z, axis=0)
    assert np.all(np.linalg.norm(K @ Z, axis=0) <= 1e-12 * scale)
    assert np.linalg.matrix_rank(Z) == 6
    lam = _smallest_eigenvalues(K, 7)
    assert np.all(np.abs(lam[:6]) < 1e-12 * lam[6]) and lam[6] > 1e-6


# ---------------------------------------------------------------------------
# Meshes


@pytest.mark.parametrize("kind", ["structured", "unstructured"])
def test_unit_square_mesh(kind):
    skfem_or_skip()
    from ddops.problems.fem import unit_square_mesh

    n = 6
    m = unit_square_mesh(n, kind=kind, jitter=0.4, seed=3)
    h = 1.0 / (n + 1)
    assert m.p.shape == (2, (n + 2) ** 2)
    assert m.t.shape[1] == 2 * (n + 1) ** 2  # Euler: every triangulation of these nodes
    a = m.p[:, m.t]  # (2, 3, T)
    area = 0.5 * np.abs(
        (a[0, 1] - a[0, 0]) * (a[1, 2] - a[1, 0]) - (a[0, 2] - a[0, 0]) * (a[1, 1] - a[1, 0])
    )
    assert area.min() > 0.05 * h**2
    assert area.sum() == pytest.approx(1.0, rel=1e-12)
    lattice = np.array([[i * h, j * h] for j in range(n + 2) for i in range(n + 2)]).T
    boundary = np.any((lattice < 1e-12) | (lattice > 1 - 1e-12), axis=0)
    np.testing.assert_allclose(m.p[:, boundary], lattice[:, boundary], atol=1e-15)
    offset = np.abs(m.p - lattice).max()
    assert offset == 0 if kind == "structured" else 0.2 * h < offset <= 0.4 * h


def test_unstructured_mesh_depends_on_seed():
    skfem_or_skip()
    from ddops.problems.fem import unit_square_mesh

    p0 = unit_square_mesh(5, kind="unstructured", seed=0).p
    np.testing.assert_array_equal(p0, unit_square_mesh(5, kind="unstructured", seed=0).p)
    assert np.abs(p0 - unit_square_mesh(5, kind="unstructured", seed=1).p).max() > 0


# ---------------------------------------------------------------------------
# P1 Poisson


@pytest.mark.parametrize("n", [1, 3, 8])
def test_fem_poisson_structured_is_the_five_point_stencil(n):
    skfem_or_skip()
    from ddops.problems.fem import fem_poisson_2d

    A, X = fem_poisson_2d(n)
    h = 1.0 / (n + 1)
    np.testing.assert_allclose(A.toarray(), h**2 * poisson_2d(n).toarray(), atol=1e-13)
    np.testing.assert_allclose(X, grid_coordinates(n, 2), atol=1e-15)
    gallery = pytest.importorskip("pyamg.gallery")
    np.testing.assert_allclose(A.toarray(), gallery.poisson((n, n)).toarray(), atol=1e-13)


def test_fem_poisson_unstructured_matches_dense_assembly():
    skfem_or_skip()
    from ddops.problems.fem import fem_poisson_2d, unit_square_mesh

    mesh = unit_square_mesh(5, kind="unstructured", seed=7)
    A, X, nodes = fem_poisson_2d(mesh=mesh, return_nodes=True)
    p = mesh.p
    interior = np.flatnonzero(np.all((p > 1e-12) & (p < 1 - 1e-12), axis=0))
    np.testing.assert_array_equal(nodes, interior)
    np.testing.assert_array_equal(X, p[:, interior].T)
    ref = p1_laplace_dense(p, mesh.t)[np.ix_(interior, interior)]
    np.testing.assert_allclose(A.toarray(), ref, atol=1e-13)
    assert A.format == "csr" and A.has_sorted_indices
    assert_spd(A)


def test_fem_poisson_dtype():
    skfem_or_skip()
    from ddops.problems.fem import fem_poisson_2d

    assert fem_poisson_2d(3, dtype=np.float32)[0].dtype == np.float32


# ---------------------------------------------------------------------------
# P1 elasticity


@pytest.mark.parametrize("mesh_kind", ["structured", "unstructured"])
def test_fem_elasticity_matches_dense_interleaved_assembly(mesh_kind):
    skfem_or_skip()
    from ddops.problems.fem import fem_elasticity_2d, unit_square_mesh

    mesh = unit_square_mesh(3, kind=mesh_kind, seed=2)
    E, nu = 2.5, 0.35
    ref = p1_elasticity_dense(mesh.p, mesh.t, E, nu)
    K, X, nodes = fem_elasticity_2d(mesh=mesh, E=E, nu=nu, dirichlet=None, return_nodes=True)
    np.testing.assert_array_equal(nodes, np.arange(mesh.p.shape[1]))
    np.testing.assert_allclose(K.toarray(), ref, atol=1e-13 * np.abs(ref).max())
    # clamped on the left side: the rows and columns of the other nodes, still interleaved
    A, X, nodes = fem_elasticity_2d(mesh=mesh, E=E, nu=nu, return_nodes=True)
    kept = np.flatnonzero(mesh.p[0] > 1e-12)
    np.testing.assert_array_equal(nodes, kept)
    np.testing.assert_array_equal(X, mesh.p[:, kept].T)
    dofs = np.ravel([[2 * k, 2 * k + 1] for k in kept])
    np.testing.assert_allclose(A.toarray(), ref[np.ix_(dofs, dofs)], atol=1e-13 * np.abs(ref).max())


@pytest.mark.parametrize("dirichlet", ["left", "boundary"])
def test_fem_elasticity_constrained_is_spd(dirichlet):
    skfem_or_skip()
    from ddops.problems.fem import fem_elasticity_2d

    n = 4
    A, X = fem_elasticity_2d(n, mesh="unstructured", dirichlet=dirichlet)
    kept = (n + 2) * (n + 1) if dirichlet == "left" else n * n
    assert A.shape == (2 * kept, 2 * kept) and X.shape == (kept, 2)
    assert_spd(A)


# ---------------------------------------------------------------------------
# Bad input and the optional dependency


@pytest.mark.parametrize(
    "call,error,match",
    [
        (lambda f: f.fem_poisson_2d(3, mesh="hexagonal"), ValueError, "mesh must be one of"),
        (lambda f: f.fem_poisson_2d(mesh="structured"), TypeError, "n is required"),
        (lambda f: f.fem_poisson_2d(3, mesh=f.unit_square_mesh(3)), TypeError, "n must be None"),
        (lambda f: f.fem_poisson_2d(mesh=np.eye(3)), TypeError, "mesh must be one of"),
        (lambda f: f.fem_poisson_2d(0), ValueError, "n must be >= 1"),
        (lambda f: f.fem_poisson_2d(3, dtype=int), TypeError, "dtype must be float32"),
        (lambda f: f.unit_square_mesh(3, kind="x"), ValueError, "kind must be one of"),
        (lambda f: f.unit_square_mesh(3, kind="unstructured", jitter=0.5), ValueError, "jitter"),
        (lambda f: f.unit_square_mesh(3, kind="unstructured", jitter=0), ValueError, "jitter"),
        (lambda f: f.fem_elasticity_2d(3, nu=0.5), ValueError, "nu must be in"),
        (lambda f: f.fem_elasticity_2d(3, nu="a"), TypeError, "nu must be a real"),
        (lambda f: f.fem_elasticity_2d(3, E=0.0), ValueError, "E must be finite and > 0"),
        (lambda f: f.fem_elasticity_2d(3, dirichlet="top"), ValueError, "dirichlet must be"),
    ],
)
def test_fem_rejects_bad_input(call, error, match):
    skfem_or_skip()
    from ddops.problems import fem

    with pytest.raises(error, match=match):
        call(fem)


def test_fem_without_scikit_fem_names_the_extra(monkeypatch):
    from ddops.problems import fem

    monkeypatch.setitem(sys.modules, "skfem", None)  # makes `import skfem` raise ImportError
    with pytest.raises(ImportError, match=r"install ddops\[fem\]"):
        fem.fem_poisson_2d(3)


def test_importing_problems_does_not_import_scikit_fem():
    code = (
        "import sys, ddops.problems as P\n"
        "assert 'skfem' not in sys.modules\n"
        "assert callable(P.fem_poisson_2d) and 'skfem' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
