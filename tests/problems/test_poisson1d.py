import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ddops import PoissonSolver, poisson_1d
from ddops.problems.poisson1d import grid_points, mesh_size, num_dofs

from ..reference import poisson_dense


@given(n=st.integers(2, 80), kind=st.sampled_from(["element", "dof"]))
def test_poisson_matches_dense_definition(n, kind):
    A = poisson_1d(n, kind)
    assert A.format == "csr"
    np.testing.assert_array_equal(A.toarray(), poisson_dense(n, kind))
    assert A.shape[0] == num_dofs(n, kind)


def test_conventions():
    assert num_dofs(256, "element") == 255 and mesh_size(256, "element") == 1 / 256
    assert num_dofs(256, "dof") == 256 and mesh_size(256, "dof") == 1 / 257
    x = grid_points(4, "element")
    np.testing.assert_allclose(x, [0.25, 0.5, 0.75])


@given(n=st.integers(2, 200), kind=st.sampled_from(["element", "dof"]), B=st.integers(1, 5))
def test_solver_against_dense_solve(n, kind, B):
    rng = np.random.default_rng(n)
    F = rng.standard_normal((num_dofs(n, kind), B))
    U = PoissonSolver(n, kind).solve(F)
    ref = np.linalg.solve(poisson_dense(n, kind), F)
    np.testing.assert_allclose(U, ref, rtol=1e-9, atol=1e-12 * np.abs(ref).max())


def test_solver_vector_and_large():
    s = PoissonSolver(100000)
    f = np.ones(99999)
    u = s(f)
    x = grid_points(100000)
    np.testing.assert_allclose(u, x * (1 - x) / 2, rtol=1e-6)  # -u'' = 1 exactly on the grid


@pytest.mark.parametrize("bad,exc,match", [
    (1, ValueError, "n must be >= 2 for kind='element'"),
    (0, ValueError, "n must be >= 2 for kind='element'"),
    (2.5, TypeError, "n must be an integer"),
    (True, TypeError, "n must be an integer"),
])
def test_poisson_rejects_bad_n(bad, exc, match):
    with pytest.raises(exc, match=match):
        poisson_1d(bad)
    with pytest.raises(exc, match=match):
        PoissonSolver(bad)


def test_bad_kind_and_rhs():
    with pytest.raises(ValueError, match="kind must be one of"):
        poisson_1d(8, kind="fem")
    with pytest.raises(ValueError, match="n must be >= 1 for kind='dof'"):
        poisson_1d(0, kind="dof")
    s = PoissonSolver(8)
    with pytest.raises(ValueError, match=r"F must have shape \(7,\)"):
        s.solve(np.ones(8))
    with pytest.raises(ValueError, match="F contains NaN or inf"):
        s.solve(np.full(7, np.nan))
