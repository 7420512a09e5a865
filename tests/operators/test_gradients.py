"""Hand-derived gradients against central finite differences."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddops import Decomposition1D, GlobalLowRankOperator, PoissonSolver, SchwarzOperator
from ddops.operators.losses import loss_and_grad, loss_and_scaled_grad, loss_value
from ddops.problems.poisson1d import poisson_1d
from ddops.testing import BASES, schwarz_operators

from ..reference import batch, dense_operator, fd_check


@settings(max_examples=15)
@given(schwarz_operators(max_n=48), st.integers(1, 4), st.sampled_from(["wmse", "mse"]))
def test_schwarz_gradient_finite_differences(op, B, loss):
    F, U = batch(op, B)
    fd_check(op, F, U, loss)


@settings(max_examples=15)
@given(schwarz_operators(max_n=32, general=True, custom_coarse=True, tied=(False, True),
                         partitions=("symmetric", "left", "none"), bases=BASES),
       st.integers(1, 3), st.sampled_from(["wmse", "mse"]))
def test_gradient_finite_differences_every_kind_of_operator(op, B, loss):
    """General decompositions, user (rank-deficient) bases, tied factors, fixed terms."""
    F, U = batch(op, B, seed=B)
    grad = fd_check(op, F, U, loss, coords=8)
    # the loss the gradient belongs to is the loss of the defined operator
    value, _ = op.value_and_grad_flat(F, U, loss)
    P = dense_operator(op) @ F
    assert float(value) == pytest.approx(float(loss_value(loss, P, U)), rel=1e-10)
    assert grad.shape == op.theta.shape


@given(st.integers(3, 40), st.integers(1, 5), st.sampled_from(["wmse", "mse"]))
def test_global_gradient_finite_differences(n, r, loss):
    op = GlobalLowRankOperator(n, min(r, n), seed=n)
    F, U = batch(op, 3, seed=r)
    fd_check(op, F, U, loss)


def test_local_and_coarse_gradients_separately():
    """The local factors' gradient ignores the coarse part and vice versa."""
    d = Decomposition1D(64, 4)
    op = SchwarzOperator(d, seed=1)
    F, U = batch(op, 5)
    _, g = op.value_and_grad(F, U, "mse")
    # dL/dP = 2 (P - U) / (n B); the coarse gradient is then Phi^T G (K0^T Phi^T F)^T
    P = op.matmat(F)
    G = 2 * (P - U) / P.size
    Phi = op.coarse_matrix.toarray()
    p = op.get_params()
    np.testing.assert_allclose(g["Q0"], Phi.T @ G @ (p["K0"].T @ Phi.T @ F).T, rtol=1e-10)
    np.testing.assert_allclose(g["K0"], Phi.T @ F @ (p["Q0"].T @ Phi.T @ G).T, rtol=1e-10)
    for i, s in enumerate(d.subdomains):
        w = np.sqrt(d.weights(i))[:, None]
        Xi, Gi = w * F[s], w * G[s]
        np.testing.assert_allclose(g["Q"][i], Gi @ (p["K"][i].T @ Xi).T, rtol=1e-10)
        np.testing.assert_allclose(g["K"][i], Xi @ (p["Q"][i].T @ Gi).T, rtol=1e-10)


def test_loss_definitions():
    rng = np.random.default_rng(0)
    P, U = rng.standard_normal((7, 3)), rng.standard_normal((7, 3))
    n, B = P.shape
    w = np.mean([np.sum((P[:, b] - U[:, b]) ** 2) / n / (np.sum(U[:, b] ** 2) / n)
                 for b in range(B)])
    assert float(loss_value("wmse", P, U)) == pytest.approx(w, rel=1e-13)
    assert float(loss_value("mse", P, U)) == pytest.approx(np.mean((P - U) ** 2), rel=1e-13)
    # the eps floor: a zero target column is weighted by 1/eps
    U0 = U.copy()
    U0[:, 0] = 0
    v, g = loss_and_grad("wmse", P.copy(), U0, eps=1e-3)
    assert float(v) == pytest.approx(
        (np.sum(P[:, 0] ** 2) / n / 1e-3 + sum(np.sum((P[:, b] - U[:, b]) ** 2) / n
                                               / (np.sum(U[:, b] ** 2) / n) for b in (1, 2))) / 3)
    with pytest.raises(ValueError, match="loss must be one of"):
        loss_value("l1", P, U)


def test_value_and_grad_validation_and_poisson_batch():
    op = SchwarzOperator(Decomposition1D(32, 2))
    F = np.random.default_rng(0).standard_normal((31, 4))
    U = PoissonSolver(32).solve(F)
    value, grads = op.value_and_grad(F, U)
    assert isinstance(value, float) and set(grads) == {"Q", "K", "Q0", "K0"}
    with pytest.raises(ValueError, match="F and U must both have shape"):
        op.value_and_grad(F, U[:, :2])
    with pytest.raises(ValueError, match=r"F must have shape \(31,"):
        op.value_and_grad(F[:5], U)
    with pytest.raises(ValueError, match="U contains NaN"):
        op.value_and_grad(F, np.full_like(U, np.nan))
    with pytest.raises(ValueError, match="loss must be one of"):
        op.value_and_grad(F, U, loss="huber")


def test_energy_loss_against_definition_and_fd():
    import scipy.sparse as sp

    rng = np.random.default_rng(3)
    P, U = rng.standard_normal((6, 3)), rng.standard_normal((6, 3))
    W = sp.diags([np.full(5, -1.0), np.full(6, 2.5), np.full(5, -1.0)], [-1, 0, 1]).tocsr()
    E = P - U
    value, grad = loss_and_grad("energy", P.copy(), U, weight=W)
    assert float(value) == pytest.approx(np.trace(E.T @ (W @ E)) / E.size, rel=1e-13)
    np.testing.assert_allclose(grad, 2 * (W @ E) / E.size, rtol=1e-13)
    with pytest.raises(ValueError, match="weight"):
        loss_and_grad("energy", P, U)
    op = SchwarzOperator(Decomposition1D(20, 2), seed=4)
    W = sp.identity(19) * 3.0 + sp.eye(19, k=1) + sp.eye(19, k=-1)
    F, U = batch(op, 2, seed=1)
    _, g = op.value_and_grad_flat(F, U, "energy", loss_weight=W.tocsr())
    theta0 = op.theta.copy()
    for j in np.random.default_rng(0).choice(np.flatnonzero(g), 5, replace=False):
        op.theta[j] = theta0[j] + 1e-6
        fp = float(loss_value("energy", op.matmat(F), U, weight=W))
        op.theta[j] = theta0[j] - 1e-6
        fm = float(loss_value("energy", op.matmat(F), U, weight=W))
        op.theta[j] = theta0[j]
        assert g[j] == pytest.approx((fp - fm) / 2e-6, rel=1e-5, abs=1e-10)


@pytest.mark.parametrize("loss", ["wmse", "mse", "energy"])
def test_scaled_gradient_matches_gradient(loss):
    """``loss_and_scaled_grad`` leaves the column scaling apart: ``G * scale = dL/dP``."""
    rng = np.random.default_rng(3)
    P, U = rng.standard_normal((2, 12, 5))
    W = poisson_1d(13) if loss == "energy" else None
    value, grad = loss_and_grad(loss, P.copy(), U, weight=W)
    value2, G, scale = loss_and_scaled_grad(loss, P.copy(), U, weight=W)
    assert float(value2) == float(value)
    np.testing.assert_allclose(G * scale, grad, rtol=1e-15, atol=0)
    assert np.ndim(scale) in (0, 1)
