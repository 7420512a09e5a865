import numpy as np
import pytest

from ddops import Decomposition1D, PoissonSolver, SchwarzOperator, poisson_1d
from ddops.learning.metrics import operator_fro_error, relative_l2_errors


def test_fro_error_exact_against_dense():
    op = SchwarzOperator(Decomposition1D(100, 4), seed=2)
    solver = PoissonSolver(100)
    exact = np.linalg.norm(op.to_dense() - np.linalg.inv(poisson_1d(100).toarray()))
    err, method = operator_fro_error(op, solver.solve, block=7)
    assert method == "exact"
    assert err == pytest.approx(exact, rel=1e-10)


def test_fro_error_sampled_estimate_is_labelled_and_close():
    op = SchwarzOperator(Decomposition1D(100, 4), seed=2)
    solver = PoissonSolver(100)
    exact, _ = operator_fro_error(op, solver.solve)
    est, method = operator_fro_error(op, solver.solve, exact_limit=10, probes=2000)
    assert method.startswith("sampled")
    assert est == pytest.approx(exact, rel=0.1)


def test_relative_l2():
    U = np.array([[3.0, 1.0], [4.0, 0.0]])
    P = U + np.array([[0.0, 0.5], [0.5, 0.0]])
    np.testing.assert_allclose(relative_l2_errors(P, U), [0.1, 0.5])
