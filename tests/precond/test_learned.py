"""The learned symmetric Schwarz preconditioner: objective, gradients, initialisation, safeguard."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ddops
from ddops.learning.training import Trainer, TrainingConfig
from ddops.precond.learned import (
    PreconditionerSampler,
    classical_init,
    learned_schwarz_preconditioner,
    parameter_scale,
    preconditioner_objective,
    train_preconditioner,
)
from ddops.precond.schwarz import TwoLevelSchwarz


def _problem(n: int = 64, N: int = 4, kind: str = "element"):
    return ddops.poisson_1d(n, kind), ddops.Decomposition1D(n, N, overlap=2, kind=kind)


# -- sampler -----------------------------------------------------------------------------------
@pytest.mark.parametrize("distribution", ["gaussian", "smooth", "mixed", "energy"])
def test_sampler_pairs_are_A_z_and_z(distribution):
    A, _ = _problem()
    s = PreconditionerSampler(A, distribution)
    F, U = s.sample(6, np.random.default_rng(1))
    n = A.shape[0]
    assert F.shape == U.shape == (n, 6)
    np.testing.assert_allclose(F, A @ U, rtol=1e-10, atol=1e-10 * np.abs(F).max())
    if distribution == "energy":  # z^T A z = n
        np.testing.assert_allclose(np.einsum("ij,ij->j", U, F), n, rtol=1e-10)
    else:  # ||z|| = sqrt(n): the MSE of M = 0 is exactly 1
        np.testing.assert_allclose(np.einsum("ij,ij->j", U, U), n, rtol=1e-10)
    if distribution == "mixed":
        assert s.num_smooth(6) == 3


def test_sampler_same_stream_same_batch():
    A, _ = _problem()
    s = PreconditionerSampler(A, "mixed")
    a = s.sample(4, np.random.default_rng(7))
    b = s.sample(4, np.random.default_rng(7))
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


def direction_anisotropy(W):
    """``n * max_jk |E[w w^T / ||w||^2] - I / n|_jk`` over the columns of ``W``.

    Zero in expectation for any isotropic distribution (uniform directions), whatever the
    column lengths; about ``4 / sqrt(columns)`` from sampling noise at n = 16.
    """
    n, B = W.shape
    D = W / np.linalg.norm(W, axis=0)
    return n * float(np.abs(D @ D.T / B - np.eye(n) / n).max())


def _dense_poisson(n):
    """The 1-D Poisson matrix (element convention) assembled from its stencil, as an array."""
    m, h = n - 1, 1.0 / n
    return (2 * np.eye(m) - np.eye(m, k=1) - np.eye(m, k=-1)) / h**2


DRAWS = 20000  # columns per statistical check: anisotropy noise 0.02 to 0.03 at n = 16
ISOTROPIC = 0.07  # what a correct sampler stays below (about twice the noise)


@pytest.mark.parametrize("norm", [None, "energy"])
def test_sampler_gaussian_directions_are_isotropic(norm):
    """``z ~ N(0, I)``: the directions of Z are uniform (every frequency equally)."""
    Ad = _dense_poisson(17)
    s = PreconditionerSampler(sp.csr_matrix(Ad), "gaussian", norm=norm)
    F, U = s.sample(DRAWS, np.random.default_rng(3))
    assert direction_anisotropy(U) < ISOTROPIC
    assert np.abs(U.mean(axis=1)).max() < 5 / np.sqrt(DRAWS)  # zero mean (unit-size entries)
    np.testing.assert_allclose(F, Ad @ U, rtol=1e-12, atol=1e-12 * np.abs(F).max())
    lengths = np.einsum("ij,ij->j", U, F if norm == "energy" else U)
    np.testing.assert_allclose(lengths, 16, rtol=1e-12)
    # the statistic tells the distributions apart: A^-1-smoothed vectors are far from isotropic
    smooth = PreconditionerSampler(sp.csr_matrix(Ad), "smooth").sample(2000,
                                                                       np.random.default_rng(4))
    assert direction_anisotropy(smooth[1]) > 10 * ISOTROPIC


def test_sampler_smooth_vectors_are_white_noise_solved():
    """``z = A^-1 g``: ``A z`` has uniform directions and ``z`` solves ``A z = F``."""
    Ad = _dense_poisson(17)
    F, U = PreconditionerSampler(sp.csr_matrix(Ad), "smooth").sample(DRAWS,
                                                                      np.random.default_rng(5))
    assert direction_anisotropy(F) < ISOTROPIC
    np.testing.assert_allclose(U, np.linalg.solve(Ad, F), rtol=1e-10,
                               atol=1e-12 * np.abs(U).max())
    np.testing.assert_allclose(np.einsum("ij,ij->j", U, U), 16, rtol=1e-12)
    # the low frequencies dominate: the mean Rayleigh quotient is near the smallest eigenvalue
    lam = np.linalg.eigvalsh(Ad)
    rayleigh = np.einsum("ij,ij->j", U, F) / np.einsum("ij,ij->j", U, U)
    assert lam[0] <= rayleigh.min() and np.median(rayleigh) < 2 * lam[0]


def test_sampler_energy_vectors_have_covariance_A_inverse():
    """``z ~ N(0, A^-1)``: with any factor ``A = L L^T``, ``L^T z`` has uniform directions."""
    # a 2-D Laplacian: the fill-reducing ordering of the sampler's factor is not the identity
    T = sp.csr_matrix(_dense_poisson(5))
    A = (sp.kron(T, sp.eye(4)) + sp.kron(sp.eye(4), T)).tocsr()
    L = np.linalg.cholesky(A.toarray())
    F, U = PreconditionerSampler(A, "energy").sample(DRAWS, np.random.default_rng(6))
    assert direction_anisotropy(L.T @ U) < ISOTROPIC
    np.testing.assert_allclose(np.einsum("ij,ij->j", U, F), 16, rtol=1e-12)  # z^T A z = n
    np.testing.assert_allclose(F, A @ U, rtol=1e-10, atol=1e-12 * np.abs(F).max())
    # neither the Gaussian nor the smooth distribution, which the statistic would pass
    assert direction_anisotropy(U) > 3 * ISOTROPIC
    assert direction_anisotropy(F) > 3 * ISOTROPIC


@pytest.mark.parametrize("batch_size, fraction", [(7, 0.3), (9, 0.3), (5, 0.5), (9, 0.0),
                                                  (9, 1.0), (101, 0.25)])
def test_sampler_mixed_fraction_and_order(batch_size, fraction):
    """``B - round(B f)`` Gaussian columns, then ``round(B f)`` smooth ones."""
    Ad = _dense_poisson(65)
    s = PreconditionerSampler(sp.csr_matrix(Ad), "mixed", smooth_fraction=fraction)
    k = int(round(batch_size * fraction))
    assert s.num_smooth(batch_size) == k
    F, U = s.sample(batch_size, np.random.default_rng(batch_size))
    # a Gaussian z has a Rayleigh quotient near trace(A) / n = 2 / h^2 (8450), a smooth one
    # near the smallest eigenvalue (about 10): a threshold of 300 separates them
    rayleigh = np.einsum("ij,ij->j", U, F) / np.einsum("ij,ij->j", U, U)
    smooth = rayleigh < 300
    np.testing.assert_array_equal(smooth, np.arange(batch_size) >= batch_size - k)


def test_sampler_mixed_parts_have_their_distributions():
    Ad = _dense_poisson(17)
    B = 2 * DRAWS
    s = PreconditionerSampler(sp.csr_matrix(Ad), "mixed", smooth_fraction=0.5)
    F, U = s.sample(B, np.random.default_rng(8))
    assert direction_anisotropy(U[:, :DRAWS]) < ISOTROPIC  # Gaussian z
    assert direction_anisotropy(F[:, DRAWS:]) < ISOTROPIC  # A z white noise
    assert direction_anisotropy(U[:, DRAWS:]) > 10 * ISOTROPIC


def test_objective_of_zero_and_exact_inverse():
    A, _ = _problem(32, 2)
    Ainv = np.linalg.inv(A.toarray())
    for objective, dist in (("mse", "gaussian"), ("energy", "energy")):
        Z = PreconditionerSampler(A, dist).sample(8, np.random.default_rng(0))[1]
        zero = sp.csr_matrix(A.shape)
        assert preconditioner_objective(sp.linalg.aslinearoperator(zero), A, Z,
                                        objective) == pytest.approx(1.0)
        exact = sp.linalg.aslinearoperator(Ainv)
        assert preconditioner_objective(exact, A, Z, objective) < 1e-20


# -- gradients -----------------------------------------------------------------------------------
def _directional_fd(op, loss_fn, direction, eps=1e-6):
    theta = op.theta.copy()
    op.theta[...] = theta + eps * direction
    plus = float(loss_fn())
    op.theta[...] = theta - eps * direction
    minus = float(loss_fn())
    op.theta[...] = theta
    return (plus - minus) / (2 * eps)


@pytest.mark.parametrize("objective", ["mse", "energy"])
@pytest.mark.parametrize("base", ["jacobi", "one_level"])
def test_objective_gradient_matches_central_differences(objective, base):
    A, d = _problem(48, 3)
    op = learned_schwarz_preconditioner(A, d, local_rank=3, base=base, init="scaled",
                                        init_gain=0.5, seed=3)
    dist = "energy" if objective == "energy" else "gaussian"
    F, U = PreconditionerSampler(A, dist).sample(5, np.random.default_rng(2))
    if objective == "mse":
        _, grad = op.value_and_grad_flat(F, U, "mse")

        def loss():
            return op.value_and_grad_flat(F, U, "mse")[0]
    else:
        _, grad = op.value_and_grad_flat(F, U, "energy", loss_weight=A)

        def loss():
            return op.value_and_grad_flat(F, U, "energy", loss_weight=A)[0]
    rng = np.random.default_rng(5)
    scale = parameter_scale(A)
    for _ in range(3):
        v = rng.standard_normal(op.theta.size)
        fd = _directional_fd(op, loss, v, eps=1e-5 * scale)
        assert np.dot(grad, v) == pytest.approx(fd, rel=1e-6, abs=1e-9 * abs(fd) + 1e-12)


def test_energy_loss_value_is_A_norm_of_error():
    A, d = _problem(32, 2)
    op = learned_schwarz_preconditioner(A, d, base="jacobi", init="classical")
    F, U = PreconditionerSampler(A, "energy").sample(4, np.random.default_rng(0))
    value, _ = op.value_and_grad_flat(F, U, "energy", loss_weight=A)
    E = op.matmat(F) - U
    assert float(value) == pytest.approx(np.einsum("ij,ij->", E, A @ E) / E.size)


# -- classical initialisation ----------------------------------------------------------------------
@pytest.mark.parametrize("partition", ["none", "symmetric"])
@pytest.mark.parametrize("kind,n,N", [("element", 96, 5), ("dof", 80, 3)])
def test_classical_init_full_rank_is_two_level_additive(partition, kind, n, N):
    A, d = _problem(n, N, kind)
    op = ddops.SchwarzOperator(d, local_rank=d.max_size, tied=True, partition=partition)
    classical_init(op, A)
    expected = TwoLevelSchwarz(A, d, variant="additive").to_dense()
    got = op.to_dense()
    assert np.abs(got - expected).max() <= 1e-10 * np.abs(expected).max()
    # padding rows of the stored factors stay zero
    pad = np.arange(d.max_size)[None, :] >= d.sizes[:, None]
    assert np.all(op.params["Q"][pad] == 0)


def test_classical_init_untied_left_partition():
    A, d = _problem(64, 4)
    op = ddops.SchwarzOperator(d, local_rank=d.max_size, partition="left")
    classical_init(op, A)
    expected = TwoLevelSchwarz(A, d).to_dense()
    assert np.abs(op.to_dense() - expected).max() <= 1e-10 * np.abs(expected).max()


def test_classical_init_low_rank_is_best_local_approximation():
    A, d = _problem(64, 4)
    r = 3
    op = ddops.SchwarzOperator(d, local_rank=r, tied=True, partition="symmetric",
                               coarse_basis=None)
    classical_init(op, A)
    p = op.get_params()["Q"]
    for i, R in enumerate(d.subdomains):
        Ai = A[R][:, R].toarray()
        w = np.sqrt(d.weights(i))[:, None]
        block = (w * p[i]) @ (w * p[i]).T
        mu, V = np.linalg.eigh(np.linalg.inv(Ai))
        best = (V[:, -r:] * mu[-r:]) @ V[:, -r:].T
        np.testing.assert_allclose(block, best, atol=1e-12 * np.abs(best).max())


def test_learned_one_level_base_classical_is_two_level():
    A, d = _problem(128, 4)
    op = learned_schwarz_preconditioner(A, d, local_rank=4, base="one_level", init="classical")
    expected = TwoLevelSchwarz(A, d).to_dense()
    assert np.abs(op.to_dense() - expected).max() <= 1e-10 * np.abs(expected).max()


# -- symmetric positive definiteness ---------------------------------------------------------
@pytest.mark.parametrize("base", ["jacobi", "identity", "one_level"])
@pytest.mark.parametrize("init", ["scaled", "classical"])
def test_learned_operator_is_spd(base, init):
    A, d = _problem(64, 4)
    op = learned_schwarz_preconditioner(A, d, local_rank=4, base=base, init=init, seed=1)
    op.theta += np.random.default_rng(0).standard_normal(op.theta.size) * parameter_scale(A)
    M = op.to_dense()
    np.testing.assert_allclose(M, M.T, atol=1e-13 * np.abs(M).max())
    assert np.linalg.eigvalsh(0.5 * (M + M.T)).min() > 0


def test_no_base_low_rank_is_only_semidefinite():
    A, d = _problem(64, 4)
    op = learned_schwarz_preconditioner(A, d, local_rank=2, base="none", init="classical")
    ev = np.linalg.eigvalsh(op.to_dense())
    assert ev.min() > -1e-12 * ev.max() and op.rank_bound < A.shape[0]


# -- training and the safeguard --------------------------------------------------------------
def test_trainer_with_sampler_and_mse_reduces_objective():
    A, d = _problem(64, 4)
    op = learned_schwarz_preconditioner(A, d, base="jacobi", init="scaled", seed=2)
    sampler = PreconditionerSampler(A)
    Z = sampler.sample(64, np.random.default_rng(99))[1]
    before = preconditioner_objective(op, A, Z)
    cfg = TrainingConfig(steps=150, batch_size=16, lr=0.05 * parameter_scale(A), loss="mse",
                         progress=False)
    Trainer(op, sampler, cfg).run()
    assert preconditioner_objective(op, A, Z) < 0.9 * before


@pytest.mark.parametrize("objective", ["energy", "mse"])
def test_train_preconditioner_reduces_objective(objective):
    A, d = _problem(64, 4)
    op = learned_schwarz_preconditioner(A, d, base="jacobi", init="scaled", seed=2)
    t = train_preconditioner(op, A, steps=100, lr=0.05, batch_size=16, check_every=50,
                             objective=objective, keep_best=False)
    assert t.final.objective < 0.9 * t.initial.objective
    assert [c.step for c in t.checks] == [0, 50, 100]
    assert t.history["train"].size == 100 and t.status == "finished"


@pytest.mark.parametrize("init,objective", [("classical", "mse"), ("classical", "energy"),
                                            ("scaled", "energy")])
def test_safeguard_never_worse_than_initial(init, objective):
    A, d = _problem(256, 8)
    op = learned_schwarz_preconditioner(A, d, base="one_level", init=init,
                                        local_init_scale=1e-2)
    b = np.random.default_rng(3).standard_normal(A.shape[0])
    theta0 = op.theta.copy()
    t = train_preconditioner(op, A, steps=60, lr=0.1, batch_size=8, check_every=20,
                             objective=objective, b=b)
    assert t.best.iterations <= t.initial.iterations
    assert t.best.iterations == min(c.iterations for c in t.checks if c.converged)
    its = ddops.precond.learned.cg_iterations(A, op, b)[0]
    assert its == t.best.iterations  # the kept parameters are the measured ones
    if t.best.step == 0:
        np.testing.assert_array_equal(op.theta, theta0)


def test_two_level_init_trained_never_worse_than_two_level():
    A, d = _problem(256, 8)
    b = np.random.default_rng(0).standard_normal(A.shape[0])
    two_level = ddops.precond.learned.cg_iterations(A, TwoLevelSchwarz(A, d), b)[0]
    op = learned_schwarz_preconditioner(A, d, base="one_level", init="classical")
    t = train_preconditioner(op, A, steps=40, lr=0.1, batch_size=8, check_every=20, b=b)
    assert t.initial.iterations == two_level
    assert t.best.iterations <= two_level


# -- bad input -----------------------------------------------------------------------------------
def test_bad_matrices_are_rejected_by_name():
    A, d = _problem(32, 2)
    with pytest.raises(ValueError, match="A must be square"):
        learned_schwarz_preconditioner(sp.random(31, 30, density=0.2, format="csr"), d)
    asym = A.tolil()
    asym[0, 1] = 5.0
    with pytest.raises(ValueError, match="not symmetric"):
        learned_schwarz_preconditioner(asym.tocsr(), d)
    bad = A.copy().astype(float)
    bad.data[0] = np.nan
    with pytest.raises(ValueError, match="A contains NaN"):
        classical_init(ddops.SchwarzOperator(d, tied=True), bad)
    with pytest.raises(ValueError, match="A has size 39 but the decomposition"):
        learned_schwarz_preconditioner(ddops.poisson_1d(40), d)
    with pytest.raises(ValueError, match="base"):
        learned_schwarz_preconditioner(A, d, base="ilu")
    with pytest.raises(ValueError, match="distribution"):
        PreconditionerSampler(A, "uniform")
    with pytest.raises(ValueError, match="not positive definite|non-positive"):
        PreconditionerSampler(-A, "energy")


def test_indefinite_subdomain_is_named():
    A, d = _problem(32, 2)
    B = A.tolil()
    B[3, 3] = 1e-3  # positive diagonal, indefinite block
    with pytest.raises(ValueError, match=r"R_0 A R_0\^T of subdomain 0"):
        classical_init(ddops.SchwarzOperator(d, tied=True), B.tocsr())


def test_singular_subdomain_is_named_once():
    """A singular local matrix names its subdomain once, with its size."""
    A, d = _problem()
    A = A.tolil()
    A[1, 2] = A[2, 1] = -10.0 * A[1, 1]  # an indefinite 2 x 2 block inside subdomain 0
    op = ddops.SchwarzOperator(d, local_rank=4)
    with pytest.raises(ValueError, match="singular or not positive definite") as exc:
        classical_init(op, A.tocsr())
    message = str(exc.value)
    assert message.count("subdomain 0") == 1, message
    assert f"with {int(d.sizes[0])} unknowns" in message
