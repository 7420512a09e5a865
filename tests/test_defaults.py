"""The defaults users rely on, against closed forms and independent constructions.

Mesh widths follow the conventions page: ``h = 1/n`` for ``kind="element"``,
``1/(n + 1)`` for ``kind="dof"`` and ``1/(num_dofs + 1)`` for a general
decomposition; the scaled initialisation draws ``N(0, 1) (h/4)^{1/2} r^{-1/4}``
in the order Q, K, Q0, K0 from ``numpy.random.default_rng(seed)``.
"""

import numpy as np
import pytest
import scipy.sparse.linalg as spla

from ddops import (
    Decomposition,
    Decomposition1D,
    GlobalLowRankOperator,
    SchwarzOperator,
    TwoLevelSchwarz,
    coarse_basis,
    poisson_1d,
)
from ddops.testing import dottest

from .reference import (
    dense_schwarz,
    dense_two_level,
    hat,
    poisson_dense,
    subdomains_1d,
)

SIZES = [(2, 1), (7, 3), (64, 4), (256, 8), (1000, 7)]


@pytest.mark.parametrize("n,N", SIZES)
@pytest.mark.parametrize("kind", ["element", "dof"])
def test_mesh_width_and_coordinates(n, N, kind):
    d = Decomposition1D(n, N, overlap=0, kind=kind)
    h = 1 / n if kind == "element" else 1 / (n + 1)
    assert d.h == h
    m = n - 1 if kind == "element" else n
    assert d.num_dofs == m
    np.testing.assert_allclose(d.coordinates, np.arange(1, m + 1) * h, rtol=1e-15)


@pytest.mark.parametrize("n,N", SIZES[1:])
def test_default_overlap_and_kind(n, N):
    d = Decomposition1D(n, N)
    assert (d.overlap, d.kind) == (2, "element")
    for got, want in zip(d.subdomains, subdomains_1d(n, N, 2, "element")):
        np.testing.assert_array_equal(got, want)
    # element interface k sits at the node between blocks, x = (first k blocks' elements) / n
    blocks = [n // N + (1 if i < n % N else 0) for i in range(N)]
    np.testing.assert_allclose(d.coordinates[d.interface_nodes], np.cumsum(blocks)[:-1] / n,
                               rtol=1e-15)


def test_general_decomposition_defaults():
    d = Decomposition([[0, 1, 2], [2, 3, 4, 5, 6]], 7)
    assert d.h == 1 / 8
    np.testing.assert_allclose(d.coordinates, np.arange(1, 8) / 8, rtol=1e-15)
    assert d.interface_nodes.size == 0
    assert Decomposition([[0, 1], [1, 2]], 3, h=0.25).h == 0.25


def _expected_draws(seed, entries, r, n0, r0, h):
    """The documented initial factors, drawn here in the documented order."""
    rng = np.random.default_rng(seed)
    s, s0 = np.sqrt(h / 4) * r ** -0.25, np.sqrt(h / 4) * max(r0, 1) ** -0.25
    Q = rng.standard_normal((entries, r)) * s
    K = rng.standard_normal((entries, r)) * s
    Q0 = rng.standard_normal((n0, r0)) * s0
    K0 = rng.standard_normal((n0, r0)) * s0
    return Q, K, Q0, K0


@pytest.mark.parametrize("kind", ["element", "dof"])
@pytest.mark.parametrize("n,N", [(64, 4), (100, 3)])
def test_schwarz_operator_defaults(kind, n, N):
    d = Decomposition1D(n, N, kind=kind)
    op = SchwarzOperator(d)
    assert (op.local_rank, op.coarse_rank, op.coarse_dim) == (4, N - 1, N - 1)
    assert (op.coarse_basis_name, op.init, op.seed, op.partition, op.tied, op.base,
            op.dtype, op.backend) == ("interface_hats", "scaled", 0, "symmetric", False, None,
                                      np.float64, "numpy")
    h = 1 / n if kind == "element" else 1 / (n + 1)
    Q, K, Q0, K0 = _expected_draws(0, int(d.sizes.sum()), 4, N - 1, N - 1, h)
    p = op.get_params()
    np.testing.assert_allclose(np.concatenate(p["Q"]), Q, rtol=1e-15)
    np.testing.assert_allclose(np.concatenate(p["K"]), K, rtol=1e-15)
    np.testing.assert_allclose(p["Q0"], Q0, rtol=1e-15)
    np.testing.assert_allclose(p["K0"], K0, rtol=1e-15)
    # the default coarse basis: the interface hats, pointwise
    x = d.coordinates
    peaks = np.concatenate([[0.0], x[d.interface_nodes], [1.0]])
    hats = np.array([[hat(xi, peaks[k - 1], peaks[k], peaks[k + 1]) for k in range(1, N)]
                     for xi in x])
    np.testing.assert_allclose(op.coarse_matrix.toarray(), hats, atol=1e-14)
    # the default partition: D_i^{1/2} on both sides
    ref = dense_schwarz(p, subdomains_1d(n, N, 2, kind), d.num_dofs, hats)
    np.testing.assert_allclose(op.to_dense(), ref, rtol=1e-12, atol=1e-14 * np.abs(ref).max())


def test_schwarz_operator_on_a_general_decomposition_uses_its_h():
    d = Decomposition([[0, 1, 2, 3], [3, 4, 5], [5, 6, 7, 8]], 9, interface_nodes=[3, 5])
    op = SchwarzOperator(d, local_rank=2, seed=5)
    Q, K, Q0, K0 = _expected_draws(5, 11, 2, 2, 2, 1 / 10)
    p = op.get_params()
    np.testing.assert_allclose(np.concatenate(p["Q"]), Q, rtol=1e-15)
    np.testing.assert_allclose(p["K0"], K0, rtol=1e-15)
    custom = Decomposition([[0, 1, 2, 3], [3, 4, 5], [5, 6, 7, 8]], 9, interface_nodes=[3, 5],
                           h=0.5)
    Q, *_ = _expected_draws(5, 11, 2, 2, 2, 0.5)
    np.testing.assert_allclose(np.concatenate(SchwarzOperator(custom, local_rank=2,
                                                              seed=5).get_params()["Q"]), Q)


@pytest.mark.parametrize("n,r", [(10, 3), (255, 39)])
def test_global_operator_defaults(n, r):
    op = GlobalLowRankOperator(n, r)
    assert op.h == 1 / (n + 1) and (op.init, op.seed, op.dtype) == ("scaled", 0, np.float64)
    rng = np.random.default_rng(0)
    s = np.sqrt(1 / (n + 1) / 4) * r ** -0.25
    Q, K = rng.standard_normal((n, r)) * s, rng.standard_normal((n, r)) * s
    np.testing.assert_allclose(op.get_params()["Q"], Q, rtol=1e-15)
    np.testing.assert_allclose(op.get_params()["K"], K, rtol=1e-15)
    assert GlobalLowRankOperator(n, r, h=0.5).h == 0.5


def test_naive_init_is_independent_of_h():
    d = Decomposition1D(64, 4)
    Q, K, Q0, _ = _expected_draws(1, int(d.sizes.sum()), 4, 3, 3, 1.0)
    p = SchwarzOperator(d, init="naive", seed=1).get_params()
    scale = 0.02 / (np.sqrt(1 / 4) * 4 ** -0.25)
    np.testing.assert_allclose(np.concatenate(p["Q"]), Q * scale, rtol=1e-14)


@pytest.mark.parametrize("n,N", [(64, 4), (96, 3)])
def test_grid_hats_default_size(n, N):
    d = Decomposition1D(n, N)
    Phi = coarse_basis(d, "grid_hats")
    assert Phi.shape == (n - 1, N - 1)
    # peaks at k / N: value 1 on the unknown at x = k / N when that is a grid point
    for k in range(1, N):
        j = int(round(k * n / N)) - 1
        if abs(d.coordinates[j] - k / N) < 1e-12:
            assert Phi[j, k - 1] == pytest.approx(1.0)


@pytest.mark.parametrize("n", [16, 65])
def test_poisson_default_kind(n):
    np.testing.assert_array_equal(poisson_1d(n).toarray(), poisson_dense(n, "element"))


def test_two_level_schwarz_defaults():
    n, N = 96, 4
    A, d = poisson_1d(n), Decomposition1D(n, N)
    M = TwoLevelSchwarz(A, d)
    assert (M.variant, M.coarse_basis_name, M.coarse_dim, M.local_solver, M.dtype) == (
        "additive", "interface_hats", N - 1, "dense", np.float64)
    ref = dense_two_level(A, subdomains_1d(n, N, 2, "element"), n - 1, "additive",
                          coarse_basis(d).toarray())
    np.testing.assert_allclose(M.to_dense(), ref, rtol=1e-10, atol=1e-10 * np.abs(ref).max())


class _Skewed(spla.LinearOperator):
    """A matrix whose rmatvec is wrong by a relative ``defect``."""

    def __init__(self, A, defect, dtype):
        self.A, self.defect = A, defect
        super().__init__(dtype=np.dtype(dtype), shape=A.shape)

    def _matvec(self, x):
        return self.A @ x

    def _rmatvec(self, x):
        return self.A.T @ x * (1 + self.defect)


@pytest.mark.parametrize("dtype,defect,passes", [
    (np.float64, 1e-12, True), (np.float64, 1e-8, False),
    (np.float32, 1e-6, True), (np.float32, 1e-2, False),
])
def test_dottest_default_tolerance(dtype, defect, passes):
    """Default rtol: 1e-10 in float64, 1e-4 in float32; a wrong adjoint fails."""
    A = np.random.default_rng(0).standard_normal((9, 9))
    op = _Skewed(A, defect, dtype)
    assert dottest(op, raise_error=False) is passes
    if not passes:
        with pytest.raises(AssertionError, match="dot test failed"):
            dottest(op)
