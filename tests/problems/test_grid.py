"""Finite-difference problems of ddops.problems against independent constructions."""

import itertools

import numpy as np
import pytest
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import ddops.problems
import ddops.problems.poisson1d
from ddops.problems import (
    diffusion_2d,
    diffusion_3d,
    grid_coordinates,
    high_contrast_channels,
    poisson_2d,
    poisson_3d,
)

# ---------------------------------------------------------------------------
# Slow references: explicit index arithmetic, Python loops, dense matrices.


def stencil_dense(n, dim):
    """The 5/7-point stencil h^-2 (2 dim, -1, ...) written point by point."""
    h = 1.0 / (n + 1)
    A = np.zeros((n**dim, n**dim))
    for point in itertools.product(range(n), repeat=dim):  # point = (i, j[, k])
        row = sum(p * n**d for d, p in enumerate(point))
        A[row, row] = 2 * dim / h**2
        for d in range(dim):
            for step in (-1, 1):
                q = list(point)
                q[d] += step
                if 0 <= q[d] < n:
                    A[row, sum(p * n**e for e, p in enumerate(q))] = -1 / h**2
    return A


def cell_assembly_dense(c):
    """Every cell adds c / (2^(dim-1) h^2) to the edge Laplacian of each of its edges.

    ``c`` is indexed [j, i] (2D) or [k, j, i] (3D); the full node grid (boundary included) is
    assembled and the Dirichlet nodes are dropped at the end.
    """
    dim = c.ndim
    n = c.shape[0] - 1
    h = 1.0 / (n + 1)
    full = n + 2

    def node(p):  # p = (i, j[, k]) on the full grid
        return sum(pd * full**d for d, pd in enumerate(p))

    M = np.zeros((full**dim, full**dim))
    for cell in itertools.product(range(n + 1), repeat=dim):  # cell = (i, j[, k])
        w = c[tuple(reversed(cell))] / (2 ** (dim - 1) * h**2)
        for corner in itertools.product((0, 1), repeat=dim):
            for d in range(dim):
                if corner[d] == 0:  # the edge from this corner in direction d
                    a = [ci + o for ci, o in zip(cell, corner)]
                    b = list(a)
                    b[d] += 1
                    p, q = node(a), node(b)
                    M[p, p] += w
                    M[q, q] += w
                    M[p, q] -= w
                    M[q, p] -= w
    # itertools.product varies the last entry fastest: reverse to number x fastest
    interior = [node(tuple(reversed(p))) for p in itertools.product(range(1, n + 1), repeat=dim)]
    return M[np.ix_(interior, interior)]


def eigenvalues_closed_form(n, dim):
    h = 1.0 / (n + 1)
    lam = 4 / h**2 * np.sin(np.arange(1, n + 1) * np.pi * h / 2) ** 2
    grids = np.meshgrid(*([lam] * dim), indexing="ij")
    return np.sort(sum(grids).ravel())


def assert_canonical_csr(A):
    assert A.format == "csr"
    assert A.has_sorted_indices
    assert np.all(A.data != 0)
    assert A.nnz == A.copy().tocoo().tocsr().nnz  # no duplicates


def assert_spd(A):
    D = A.toarray()
    np.testing.assert_array_equal(D, D.T)
    sla.cholesky(D)  # raises LinAlgError unless positive definite


# ---------------------------------------------------------------------------


def test_poisson_1d_reexported():
    assert ddops.problems.poisson_1d is ddops.problems.poisson1d.poisson_1d


@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("n", [1, 2, 5])
def test_grid_coordinates_lexicographic(n, dim):
    h = 1.0 / (n + 1)
    X = grid_coordinates(n, dim)
    assert X.shape == (n**dim, dim)
    for point in itertools.product(range(n), repeat=dim):
        row = sum(p * n**d for d, p in enumerate(point))
        np.testing.assert_allclose(X[row], (np.array(point) + 1) * h, rtol=0, atol=1e-15)


@pytest.mark.parametrize("n", [1, 2, 3, 6])
def test_poisson_2d_matches_pointwise_stencil(n):
    A, X = poisson_2d(n, return_coordinates=True)
    assert_canonical_csr(A)
    np.testing.assert_array_equal(A.toarray(), stencil_dense(n, 2))
    np.testing.assert_array_equal(X, grid_coordinates(n, 2))
    assert A.nnz == 5 * n * n - 4 * n


@pytest.mark.parametrize("n", [1, 2, 4])
def test_poisson_3d_matches_pointwise_stencil(n):
    A, X = poisson_3d(n, return_coordinates=True)
    assert_canonical_csr(A)
    np.testing.assert_array_equal(A.toarray(), stencil_dense(n, 3))
    np.testing.assert_array_equal(X, grid_coordinates(n, 3))


@pytest.mark.parametrize("dim,n", [(2, 7), (3, 5)])
def test_poisson_eigenvalues_closed_form(dim, n):
    A = (poisson_2d if dim == 2 else poisson_3d)(n)
    np.testing.assert_allclose(
        np.linalg.eigvalsh(A.toarray()), eigenvalues_closed_form(n, dim), rtol=1e-11
    )


def test_poisson_matches_pyamg_gallery():
    gallery = pytest.importorskip("pyamg.gallery")
    for n in (3, 8):
        h = 1.0 / (n + 1)
        np.testing.assert_allclose(
            (h**2 * poisson_2d(n)).toarray(), gallery.poisson((n, n)).toarray(), atol=1e-13
        )
        np.testing.assert_allclose(
            (h**2 * poisson_3d(n)).toarray(), gallery.poisson((n, n, n)).toarray(), atol=1e-13
        )


@pytest.mark.parametrize("dim", [2, 3])
def test_poisson_is_kronecker_sum_of_poisson_1d(dim):
    n = 9
    T = ddops.problems.poisson1d.poisson_1d(n, "dof")
    eye = sp.identity(n)
    if dim == 2:
        K = sp.kron(eye, T) + sp.kron(T, eye)
        A = poisson_2d(n)
    else:
        K = sp.kron(sp.identity(n * n), T) + sp.kron(sp.kron(eye, T), eye)
        K = K + sp.kron(T, sp.identity(n * n))
        A = poisson_3d(n)
    assert abs(A - K).max() == 0


def _max_error(A, X, u, f):
    U = spla.spsolve(A.tocsc(), f(X))
    return np.abs(U - u(X)).max()


@pytest.mark.parametrize("dim", [2, 3])
def test_poisson_manufactured_solution_second_order(dim):
    def u(X):
        return np.prod(np.sin(np.pi * X), axis=1)

    def f(X):
        return dim * np.pi**2 * u(X)

    build = poisson_2d if dim == 2 else poisson_3d
    ns = (7, 15, 31) if dim == 2 else (5, 11, 23)  # h halves each time
    errors = [_max_error(*build(n, return_coordinates=True), u, f) for n in ns]
    rates = np.log2(np.array(errors[:-1]) / np.array(errors[1:]))
    assert np.all((rates > 1.85) & (rates < 2.15)), rates


# ---------------------------------------------------------------------------
# Variable coefficients


@pytest.mark.parametrize("n", [1, 3, 10])
def test_diffusion_constant_coefficient_equals_poisson_exactly(n):
    A2 = diffusion_2d(np.ones((n + 1, n + 1)))
    A3 = diffusion_3d(np.ones((n + 1,) * 3))
    assert_canonical_csr(A2)
    assert_canonical_csr(A3)
    P2, P3 = poisson_2d(n), poisson_3d(n)
    assert abs(A2 - P2).max() == 0 and A2.nnz == P2.nnz
    assert abs(A3 - P3).max() == 0 and A3.nnz == P3.nnz
    np.testing.assert_allclose(
        diffusion_2d(np.full((n + 1, n + 1), 2.5)).toarray(), 2.5 * P2.toarray(), rtol=1e-15
    )


@pytest.mark.parametrize("dim,n", [(2, 1), (2, 2), (2, 5), (3, 1), (3, 3)])
def test_diffusion_matches_cell_by_cell_assembly(dim, n):
    rng = np.random.default_rng(10 * dim + n)
    c = np.exp(rng.uniform(-3, 3, size=(n + 1,) * dim))
    A, X = (diffusion_2d if dim == 2 else diffusion_3d)(c, return_coordinates=True)
    ref = cell_assembly_dense(c)
    np.testing.assert_allclose(A.toarray(), ref, rtol=1e-13, atol=1e-13 * np.abs(ref).max())
    np.testing.assert_array_equal(X, grid_coordinates(n, dim))
    assert_spd(A)


def test_diffusion_2d_orientation_of_the_coefficient():
    # One cell of high coefficient: the x-edge below it (cells (j-1, j) = (0, 1) around node
    # row j = 1) couples the grid points (1, 1) and (2, 1), i.e. unknowns 0 and 1.
    n = 3
    c = np.ones((n + 1, n + 1))
    c[1, 1] = 101.0  # cell [h, 2h] x [h, 2h], indexed [j, i]
    A = diffusion_2d(c) * (1.0 / (n + 1)) ** 2
    assert A[0, 1] == pytest.approx(-(1 + 101) / 2)  # x-edge (1,1)-(2,1): cells below/above
    assert A[0, n] == pytest.approx(-(1 + 101) / 2)  # y-edge (1,1)-(1,2): cells left/right
    assert A[1, 2] == pytest.approx(-1.0)  # x-edge (2,1)-(3,1): untouched cells


@pytest.mark.parametrize("dim", [2, 3])
def test_diffusion_manufactured_solution_second_order(dim):
    # A non-symmetric coefficient: swapping the x and y (or z) axes of the cell array
    # gives an O(1) error instead of second-order convergence.
    if dim == 2:

        def a(X):
            return 1 + X[:, 0] + 2 * X[:, 1] ** 2

        def grad_a(X):
            return np.stack([np.ones(len(X)), 4 * X[:, 1]], axis=1)

    else:

        def a(X):
            return 1 + X[:, 0] + 2 * X[:, 1] ** 2 + 3 * X[:, 2] ** 3

        def grad_a(X):
            return np.stack([np.ones(len(X)), 4 * X[:, 1], 9 * X[:, 2] ** 2], axis=1)

    k = np.array([1, 2, 1][:dim])  # u = prod sin(k_d pi x_d)

    def u(X):
        return np.prod(np.sin(k * np.pi * X), axis=1)

    def grad_u(X):
        s, co = np.sin(k * np.pi * X), np.cos(k * np.pi * X)
        return np.stack(
            [
                k[d] * np.pi * co[:, d] * np.prod(np.delete(s, d, axis=1), axis=1)
                for d in range(dim)
            ],
            axis=1,
        )

    def f(X):  # -div(a grad u) = -grad a . grad u + a |k|^2 pi^2 u
        return -np.sum(grad_a(X) * grad_u(X), axis=1) + a(X) * np.sum(k**2) * np.pi**2 * u(X)

    def cell_coefficient(n):
        h = 1.0 / (n + 1)
        centres = (np.arange(n + 1) + 0.5) * h
        grids = np.meshgrid(*([centres] * dim), indexing="ij")  # grids[d][i, j, (k)]
        C = np.stack([g.ravel() for g in grids], axis=1)
        # meshgrid "ij" puts x slowest; the coefficient array wants x as the last axis
        return a(C).reshape((n + 1,) * dim).transpose()

    build = diffusion_2d if dim == 2 else diffusion_3d
    ns = (7, 15, 31) if dim == 2 else (5, 11, 23)
    errors = [_max_error(*build(cell_coefficient(n), return_coordinates=True), u, f) for n in ns]
    rates = np.log2(np.array(errors[:-1]) / np.array(errors[1:]))
    assert np.all((rates > 1.8) & (rates < 2.2)), rates


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dtype(dtype):
    assert poisson_2d(4, dtype=dtype).dtype == dtype
    assert poisson_3d(3, dtype=dtype).dtype == dtype
    assert diffusion_2d(np.ones((5, 5)), dtype=dtype).dtype == dtype
    assert diffusion_3d(np.ones((4, 4, 4)), dtype=dtype).dtype == dtype


# ---------------------------------------------------------------------------
# High-contrast channels


def test_high_contrast_channels_2d_layout():
    n, contrast = 31, 1e6
    c = high_contrast_channels(n, contrast, period=8, width=2, margin=3)
    assert c.shape == (32, 32)
    rows = {4, 5, 12, 13, 20, 21, 28, 29}  # channels start at period // 2, every period
    for j, i in itertools.product(range(32), repeat=2):
        high = j in rows and 3 <= i <= 28
        assert c[j, i] == (contrast if high else 1.0), (j, i)


def test_high_contrast_channels_3d_tubes_and_background():
    c = high_contrast_channels(15, 100.0, dim=3, period=8, width=1, background=2.0)
    assert c.shape == (16, 16, 16)
    for k, j, i in itertools.product(range(16), repeat=3):
        high = j in (4, 12) and k in (4, 12)
        assert c[k, j, i] == (200.0 if high else 2.0)


def test_high_contrast_diffusion_spd_and_channel_coupling():
    n = 15
    c = high_contrast_channels(n, 1e6, period=8, width=1)
    A = diffusion_2d(c)
    assert_spd(A)
    h2 = (1.0 / (n + 1)) ** 2
    # the x-edges on node rows j = 4 and 5 (full grid) border the channel cells of row 4
    row = 3 * n  # first unknown of node row j = 4
    assert A[row, row + 1] * h2 == pytest.approx(-(1 + 1e6) / 2)
    assert A[row - n, row - n + 1] * h2 == pytest.approx(-1.0)


# ---------------------------------------------------------------------------
# Bad input


@pytest.mark.parametrize("build", [poisson_2d, poisson_3d])
def test_poisson_rejects_bad_n_and_dtype(build):
    with pytest.raises(ValueError, match="n must be >= 1"):
        build(0)
    with pytest.raises(TypeError, match="n must be an integer"):
        build(2.5)
    with pytest.raises(TypeError, match="dtype must be float32 or float64"):
        build(3, dtype=np.int64)


def test_grid_coordinates_rejects_bad_dim():
    with pytest.raises(ValueError, match="dim must be 1, 2 or 3"):
        grid_coordinates(3, 4)


@pytest.mark.parametrize(
    "coefficient,error,match",
    [
        (np.ones((3, 4)), ValueError, "coefficient must be a"),
        (np.ones(4), ValueError, "coefficient must be a"),
        (np.ones((1, 1)), ValueError, "coefficient must be a"),
        (-np.ones((3, 3)), ValueError, "coefficient must be > 0"),
        (np.zeros((3, 3)), ValueError, "coefficient must be > 0"),
        (np.full((3, 3), np.nan), ValueError, "coefficient contains NaN"),
        (sp.identity(3, format="csr"), TypeError, "coefficient must be a dense array"),
        ([["a", "b"], ["c", "d"]], TypeError, "coefficient must be a real array"),
    ],
)
def test_diffusion_2d_rejects_bad_coefficient(coefficient, error, match):
    with pytest.raises(error, match=match):
        diffusion_2d(coefficient)


def test_diffusion_3d_rejects_2d_coefficient():
    with pytest.raises(ValueError, match="coefficient must be a"):
        diffusion_3d(np.ones((4, 4)))


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"contrast": 0.0}, "contrast must be finite and > 0"),
        ({"background": -1.0}, "background must be finite and > 0"),
        ({"dim": 1}, "dim must be 2 or 3"),
        ({"width": 0}, "width must be >= 1"),
        ({"period": 2, "width": 2}, "period must be > width"),
        ({"margin": 8}, "margin must be <"),
        ({"period": 40}, "no channel fits"),
    ],
)
def test_high_contrast_channels_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        high_contrast_channels(15, **kwargs)
