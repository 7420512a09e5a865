"""The problem-scaled switches against closed forms and independent constructions.

G (``coarse_init="galerkin"``): the coarse part against ``Phi S^{-1} Phi^T`` and its
truncated eigen-expansion, and ``S^{-1}``'s eigenvalues against the closed form of
uniform hats.  P (``local_init="problem"``): the scales against a per-block numpy
``eigvalsh`` and the 1D closed form, and the draw against the constructor's normals.
R (``lr_scaling="problem"``): the multipliers' layout and the first step of the
training loop.
"""

import numpy as np
import pytest
import scipy.sparse as sp

from ddops import Decomposition, Decomposition1D, GlobalLowRankOperator, SchwarzOperator
from ddops.learning.data import FourierRHS
from ddops.learning.initialisation import (
    coarse_scale,
    galerkin_coarse,
    local_scales,
    lr_scales,
    problem_init,
)
from ddops.learning.training import Trainer, TrainingConfig
from ddops.precond.learned import classical_init
from ddops.problems.poisson1d import poisson_1d


def galerkin_inverse(op, A):
    """``S^{-1}`` by a dense inverse, independently of the module under test."""
    Phi = op.coarse_matrix.toarray()
    return np.linalg.inv(Phi.T @ A.toarray() @ Phi)


def poisson_2d(m):
    """Five-point Laplacian on an m x m grid (not the 1D matrix of the closed forms)."""
    T = sp.diags([-np.ones(m - 1), 2 * np.ones(m), -np.ones(m - 1)], [-1, 0, 1])
    return (sp.kron(T, sp.identity(m)) + sp.kron(sp.identity(m), T)).tocsr() * (m + 1) ** 2


def block_eigenvalues(A, d):
    """Eigenvalues of every ``A_i = R_i A R_i^T`` (ascending), one numpy call per block."""
    dense = A.toarray()
    return [np.linalg.eigvalsh(dense[np.ix_(idx, idx)]) for idx in d.subdomains]


# --------------------------------------------------------------------------- G: coarse_init


@pytest.mark.parametrize("n, N", [(256, 8), (200, 7), (96, 12)])
def test_galerkin_coarse_part_is_the_exact_coarse_inverse(n, N):
    d, A = Decomposition1D(n, N), poisson_1d(n)
    op = problem_init(SchwarzOperator(d, seed=3), A, local=False)
    Phi = op.coarse_matrix.toarray()
    exact = Phi @ galerkin_inverse(op, A) @ Phi.T
    np.testing.assert_allclose(op.coarse_part().to_dense(), exact, rtol=0,
                               atol=1e-12 * np.abs(exact).max())
    assert op.coarse_init == "galerkin" and op.local_init == "random"


@pytest.mark.parametrize("r0", [1, 3, 6])
def test_truncated_galerkin_is_the_truncated_eigen_expansion(r0):
    d, A = Decomposition1D(256, 8), poisson_1d(256)
    op = problem_init(SchwarzOperator(d, coarse_rank=r0), A, local=False)
    lam, V = np.linalg.eigh(galerkin_inverse(op, A))
    lam, V = lam[::-1][:r0], V[:, ::-1][:, :r0]
    Phi = op.coarse_matrix.toarray()
    expected = Phi @ (V * lam) @ V.T @ Phi.T
    np.testing.assert_allclose(op.coarse_part().to_dense(), expected, rtol=0,
                               atol=1e-12 * np.abs(expected).max())
    p = op.get_params()
    np.testing.assert_array_equal(p["Q0"], p["K0"])
    # the best rank-r0 approximation: its error is the first dropped eigenvalue
    S_inv = galerkin_inverse(op, A)
    full = np.sort(np.linalg.eigvalsh(S_inv))[::-1]
    err = np.linalg.norm(p["Q0"] @ p["K0"].T - S_inv, 2)
    assert err == pytest.approx(full[r0], rel=1e-10)


@pytest.mark.parametrize("n, N", [(256, 8), (1024, 32), (8192, 256)])
def test_uniform_hats_eigenvalues_closed_form(n, N):
    """S = (hH)^{-1} tridiag(-1, 2, -1): lambda_k(S^{-1}) = hH / (4 sin^2(k pi / (2N)))."""
    d, A = Decomposition1D(n, N), poisson_1d(n)
    lam, V = galerkin_coarse(SchwarzOperator(d, local_rank=1, coarse_rank=1), A)
    h, H, k = 1.0 / n, 1.0 / N, np.arange(1, N)
    closed = h * H / (4 * np.sin(k * np.pi / (2 * N)) ** 2)
    np.testing.assert_allclose(lam, closed, rtol=1e-10)
    assert np.all(np.diff(lam) < 0)
    np.testing.assert_allclose(V.T @ V, np.eye(N - 1), atol=1e-12)
    # sigma_0 from the same eigenvalues
    op = SchwarzOperator(d, local_rank=1, coarse_rank=N - 1)
    assert coarse_scale(op, A) == pytest.approx(np.sqrt(closed.sum() / (N - 1) ** 2), rel=1e-10)


def test_galerkin_agrees_with_the_classical_coarse_factor_and_when_tied():
    """Another construction of the same product: ddops.precond's classical_init."""
    d, A = Decomposition1D(128, 8), poisson_1d(128)
    ours = problem_init(SchwarzOperator(d), A, local=False)
    classical = classical_init(SchwarzOperator(d), A, local=False)
    np.testing.assert_allclose(ours.coarse_part().to_dense(), classical.coarse_part().to_dense(),
                               atol=1e-14)
    tied = problem_init(SchwarzOperator(d, tied=True), A, local=False)
    np.testing.assert_allclose(tied.coarse_part().to_dense(), ours.coarse_part().to_dense(),
                               atol=1e-14)


def test_galerkin_on_other_coarse_bases():
    """pou / Nicolaides on a 2D problem: the coarse part is Phi S^{-1} Phi^T again."""
    A = poisson_2d(12)
    d = Decomposition.from_matrix(A, 6, overlap=1)
    op = problem_init(SchwarzOperator(d, coarse_basis="nicolaides"), A, local=False)
    Phi = op.coarse_matrix.toarray()
    exact = Phi @ galerkin_inverse(op, A) @ Phi.T
    np.testing.assert_allclose(op.coarse_part().to_dense(), exact, atol=1e-12 * np.abs(exact).max())


# --------------------------------------------------------------------------- P: local_init


@pytest.mark.parametrize("n, N, r", [(256, 8, 4), (200, 7, 3), (4096, 128, 4)])
def test_local_scales_against_eigvalsh_per_block_and_closed_form(n, N, r):
    d, A = Decomposition1D(n, N), poisson_1d(n)
    sigma = local_scales(SchwarzOperator(d, local_rank=r), A)
    reference = [np.sqrt((1.0 / lam[:r]).sum() / (lam.size * r))
                 for lam in block_eigenvalues(A, d)]
    np.testing.assert_allclose(sigma, reference, rtol=1e-10)
    # 1D closed form: mu_k = h^2 / (4 sin^2(k pi / (2 (n_i + 1))))
    h, k = d.h, np.arange(1, r + 1)
    closed = [np.sqrt((h**2 / (4 * np.sin(k * np.pi / (2 * (m + 1))) ** 2)).sum() / (m * r))
              for m in d.sizes]
    np.testing.assert_allclose(sigma, closed, rtol=1e-10)


def test_local_scales_general_decomposition_and_small_subdomains():
    """2D problem, algebraic decomposition, and subdomains smaller than the rank."""
    A = poisson_2d(10)
    d = Decomposition.from_matrix(A, 5, overlap=1)
    r = 6
    sigma = local_scales(SchwarzOperator(d, local_rank=r, coarse_basis="nicolaides"), A)
    reference = [np.sqrt((1.0 / lam[:r]).sum() / (lam.size * r))
                 for lam in block_eigenvalues(A, d)]
    np.testing.assert_allclose(sigma, reference, rtol=1e-10)
    # subdomains of 2, 3 and 5 unknowns with rank 4: only n_i eigenvalues exist
    A1 = poisson_1d(9)
    small = Decomposition([np.arange(0, 2), np.arange(1, 4), np.arange(3, 8)], 8,
                          interface_nodes=np.array([1, 3]), coordinates=np.arange(8) / 9.0,
                          h=1 / 9)
    sigma = local_scales(SchwarzOperator(small, local_rank=4, coarse_basis=None), A1)
    reference = [np.sqrt((1.0 / lam[:4]).sum() / (lam.size * 4))
                 for lam in block_eigenvalues(A1, small)]
    np.testing.assert_allclose(sigma, reference, rtol=1e-10)


@pytest.mark.parametrize("n, r", [(256, 39), (2048, 5)])  # dense and Lanczos paths
def test_global_scale_closed_form(n, r):
    m = n - 1
    op = GlobalLowRankOperator(m, r, h=1.0 / n)
    sigma = local_scales(op, poisson_1d(n))
    k = np.arange(1, r + 1)
    mu = (1.0 / n) ** 2 / (4 * np.sin(k * np.pi / (2 * (m + 1))) ** 2)
    np.testing.assert_allclose(sigma, [np.sqrt(mu.sum() / (m * r))], rtol=1e-9)


def test_problem_draw_is_the_constructors_normals_times_sigma():
    d, A = Decomposition1D(1024, 32), poisson_1d(1024)
    random = SchwarzOperator(d, seed=5)
    s_init = np.sqrt(d.h / 4) * 4 ** -0.25  # the paper's scaled draw: N(0, 1) x s_init
    op = problem_init(SchwarzOperator(d, seed=5), A, coarse=False)
    sigma = local_scales(op, A)
    p, q = op.get_params(), random.get_params()
    for key in ("Q", "K"):
        for i in range(d.num_subdomains):
            np.testing.assert_allclose(p[key][i] / sigma[i], q[key][i] / s_init, rtol=1e-12)
    # the empirical RMS: pooled over all blocks (9472 entries per factor) within 3 %
    z = np.concatenate([np.concatenate(p[k]) / np.repeat(sigma, d.sizes)[:, None]
                        for k in ("Q", "K")])
    assert np.sqrt(np.mean(z**2)) == pytest.approx(1.0, abs=0.03)
    assert abs(z.mean()) < 0.03
    rms = np.array([np.sqrt(np.mean(np.square(b))) for b in p["Q"]])
    assert np.median(rms / sigma) == pytest.approx(1.0, abs=0.1)
    # the coarse factors are untouched without coarse=True
    np.testing.assert_array_equal(p["Q0"], q["Q0"])
    assert op.local_init == "problem" and op.coarse_init == "random"
    # padding stays zero (it must never contribute)
    N, pmax, r = op._layout["Q"]
    mask = np.arange(pmax)[None, :] >= d.sizes[:, None]
    assert not np.any(op.params["Q"][mask])


def test_global_problem_draw():
    n = 256
    random = GlobalLowRankOperator(n - 1, 5, seed=2, h=1.0 / n)
    op = problem_init(GlobalLowRankOperator(n - 1, 5, seed=2, h=1.0 / n), poisson_1d(n))
    sigma = local_scales(op, poisson_1d(n))[0]
    s_init = np.sqrt((1.0 / n) / 4) * 5 ** -0.25
    np.testing.assert_allclose(op.params["Q"] / sigma, random.params["Q"] / s_init, rtol=1e-12)
    assert op.coarse_init == "random" and op.local_init == "problem"


# --------------------------------------------------------------------------- R: lr_scaling


def test_lr_scales_layout():
    d, A = Decomposition1D(256, 8), poisson_1d(256)
    op = SchwarzOperator(d)
    s = lr_scales(op, A)
    assert s.shape == op.theta.shape and s.dtype == op.theta.dtype
    sigma, s0 = local_scales(op, A), coarse_scale(op, A)
    views = op._views(s)
    for key in ("Q", "K"):
        np.testing.assert_array_equal(views[key], np.broadcast_to(sigma[:, None, None],
                                                                  views[key].shape))
    for key in ("Q0", "K0"):
        assert np.all(views[key] == s0)
    g = GlobalLowRankOperator(255, 5, h=1 / 256, dtype=np.float32)
    sg = lr_scales(g, A)
    assert sg.dtype == np.float32 and np.all(sg == np.float32(local_scales(g, A)[0]))


@pytest.mark.parametrize("optimizer", ["adamw", "adam"])
def test_first_training_step_is_minus_lr_sigma_sign(optimizer):
    """From a fresh state the first step is -lr sigma_b g / (|g| + eps) in every entry."""
    d, A = Decomposition1D(128, 4), poisson_1d(128)
    sampler = FourierRHS(128, modes=16)
    cfg = TrainingConfig(steps=1, batch_size=32, lr=0.1, lr_scaling="problem", progress=False,
                         optimizer=optimizer, eps=1e-8)
    op = SchwarzOperator(d, seed=1)
    theta0 = op.theta.copy()
    # the same batch, drawn independently of the trainer
    F, U = sampler.sample(32, np.random.default_rng(4711))
    _, g = op.value_and_grad_flat(F, U)
    Trainer(op, sampler, cfg, train_seed=4711, A=A).run()
    s = lr_scales(op, A)
    expected = -0.1 * s * g / (np.abs(g) + 1e-8)
    np.testing.assert_allclose(op.theta - theta0, expected, rtol=1e-12, atol=1e-300)
    moved = np.abs(op.theta - theta0)
    assert moved.max() <= 0.1 * s.max() * (1 + 1e-12)


def test_invalid_input():
    d, A = Decomposition1D(64, 4), poisson_1d(64)
    op = SchwarzOperator(d)
    with pytest.raises(ValueError, match="A must have shape"):
        problem_init(op, poisson_1d(32))
    with pytest.raises(ValueError, match="A must be symmetric"):
        local_scales(op, A + sp.eye(63, k=1, format="csr"))
    with pytest.raises(ValueError, match="not positive definite"):
        local_scales(op, -A)
    with pytest.raises(ValueError, match="coarse matrix Phi"):
        galerkin_coarse(op, A - 1e6 * sp.identity(63, format="csr"))
    with pytest.raises(ValueError, match="no coarse space"):
        galerkin_coarse(SchwarzOperator(d, coarse_basis=None), A)
    with pytest.raises(TypeError, match="op must be"):
        problem_init("op", A)
    with pytest.raises(TypeError, match="coarse must be a bool"):
        problem_init(op, A, coarse="yes")
    with pytest.raises(TypeError, match="A must be"):
        local_scales(op, "A")
    with pytest.raises(ValueError, match="A is required with lr_scaling"):
        Trainer(op, FourierRHS(64, modes=8), TrainingConfig(lr_scaling="problem"))
    with pytest.raises(ValueError, match="A is required with lr_scaling"):
        Trainer(op, FourierRHS(64, modes=8), TrainingConfig(), A=A)
    with pytest.raises(ValueError, match="lr_scaling must be one of"):
        TrainingConfig(lr_scaling="yes").validated()
