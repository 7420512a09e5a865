"""The problem-scaled initialisation, the learning-rate scales and the learned
preconditioner on 2D decompositions with GDSW, RGDSW and Nicolaides coarse spaces."""

from __future__ import annotations

import numpy as np
import pytest

import ddops
from ddops import Decomposition, SchwarzOperator, TwoLevelSchwarz
from ddops.learning.data import GridFourierRHS
from ddops.learning.initialisation import (
    coarse_scale,
    galerkin_coarse,
    local_scales,
    lr_scales,
    problem_init,
)
from ddops.learning.training import Trainer, TrainingConfig
from ddops.precond.learned import (
    cg_iterations,
    classical_init,
    learned_schwarz_preconditioner,
    train_preconditioner,
)
from ddops.problems import diffusion_2d, high_contrast_channels, poisson_2d

BASES = ["gdsw", "rgdsw", "nicolaides"]


def _problem(kind="boxes"):
    n = 12
    A = poisson_2d(n)
    if kind == "boxes":
        return A, Decomposition.from_grid((n, n), (3, 3), 1)
    return A, Decomposition.from_matrix(A, 6, 1)  # uneven METIS parts


@pytest.mark.parametrize("kind", ["boxes", "metis"])
@pytest.mark.parametrize("basis", BASES)
def test_galerkin_coarse_part_is_the_exact_coarse_inverse_2d(kind, basis):
    A, d = _problem(kind)
    op = SchwarzOperator(d, local_rank=2, coarse_basis=basis, A=A if basis != "nicolaides"
                         else None)
    problem_init(op, A)
    Phi = op.coarse_matrix.toarray()
    expected = Phi @ np.linalg.inv(Phi.T @ A.toarray() @ Phi) @ Phi.T
    np.testing.assert_allclose(op.to_dense("coarse"), expected,
                               atol=1e-10 * np.abs(expected).max())
    assert op.coarse_init == "galerkin" and op.local_init == "problem"


@pytest.mark.parametrize("kind", ["boxes", "metis"])
def test_local_scales_per_block_2d(kind):
    A, d = _problem(kind)
    r = 3
    op = SchwarzOperator(d, local_rank=r, coarse_basis="gdsw", A=A)
    sigma = local_scales(op, A)
    for i, s in enumerate(d.subdomains):  # by definition, one subdomain at a time
        mu = 1.0 / np.linalg.eigvalsh(A[s][:, s].toarray())[:r]
        assert sigma[i] == pytest.approx(np.sqrt(mu.sum() / (s.size * r)), rel=1e-10)
    # the chunked path (several chunks) gives the same
    d.block_chunks = lambda max_bytes=0: [(a, min(a + 2, d.num_subdomains))
                                          for a in range(0, d.num_subdomains, 2)]
    np.testing.assert_array_equal(local_scales(op, A), sigma)


def test_lr_scales_layout_2d():
    A, d = _problem("metis")
    op = SchwarzOperator(d, local_rank=2, coarse_basis="rgdsw", A=A)
    scales = op._views(lr_scales(op, A))
    sigma = local_scales(op, A)
    np.testing.assert_allclose(scales["Q"], np.broadcast_to(sigma[:, None, None],
                                                            scales["Q"].shape))
    np.testing.assert_allclose(scales["Q0"], coarse_scale(op, A))
    lam, _ = galerkin_coarse(op, A)
    assert coarse_scale(op, A) == pytest.approx(np.sqrt(lam[:op.coarse_rank].sum()
                                                        / (lam.size * op.coarse_rank)))


def test_improved_training_on_2d_grid_data():
    """G+P+R on 2D Poisson with GDSW and grid Fourier data: trains and improves."""
    A, d = _problem("boxes")
    rhs = GridFourierRHS(A, (12, 12), modes=3)
    val = rhs.sample(64, np.random.default_rng(1))
    op = problem_init(SchwarzOperator(d, local_rank=3, coarse_basis="gdsw", A=A), A)
    cfg = TrainingConfig(steps=60, batch_size=64, lr=0.1, lr_scaling="problem", val_every=20,
                         progress=False)
    t = Trainer(op, rhs, cfg, validation=val, A=A)
    first = t.validation_loss()
    result = t.run()
    assert result.status == "finished"
    assert result.history["val"][-1] < first


@pytest.mark.parametrize("kind", ["boxes", "metis"])
@pytest.mark.parametrize("basis", BASES)
def test_classical_init_full_rank_is_two_level_additive_2d(kind, basis):
    A, d = _problem(kind)
    op = SchwarzOperator(d, local_rank=d.max_size, tied=True, partition="none",
                         coarse_basis=basis, A=A if basis != "nicolaides" else None)
    classical_init(op, A)
    expected = TwoLevelSchwarz(A, d, coarse_basis=basis, variant="additive").to_dense()
    np.testing.assert_allclose(op.to_dense(), expected, atol=1e-10 * np.abs(expected).max())


def test_auto_coarse_basis():
    A, d = _problem("metis")
    assert learned_schwarz_preconditioner(A, d).coarse_basis_name == "gdsw"
    one_d = ddops.Decomposition1D(64, 4)
    assert learned_schwarz_preconditioner(ddops.poisson_1d(64), one_d).coarse_basis_name == \
        "interface_hats"
    no_owner = Decomposition(d.subdomains, d.num_dofs)
    assert learned_schwarz_preconditioner(A, no_owner).coarse_basis_name == "nicolaides"


@pytest.mark.parametrize("basis", BASES)
def test_learned_one_level_base_classical_is_two_level_2d(basis):
    A, d = _problem("metis")
    op = learned_schwarz_preconditioner(A, d, local_rank=4, coarse_basis=basis)
    expected = TwoLevelSchwarz(A, d, coarse_basis=basis).to_dense()
    np.testing.assert_allclose(op.to_dense(), expected, atol=1e-10 * np.abs(expected).max())
    M = op.to_dense()
    assert np.linalg.eigvalsh(0.5 * (M + M.T)).min() > 0


def test_scaled_learned_init_has_the_documented_variance_2d():
    A, d = _problem("boxes")
    op = learned_schwarz_preconditioner(A, d, local_rank=4, base="jacobi", init="scaled",
                                        init_gain=0.01, seed=2)
    c = A.diagonal().mean()
    Q = np.concatenate(op.get_params()["Q"])
    assert Q.std() == pytest.approx(np.sqrt(0.01 / (c * 4)), rel=0.1)


@pytest.mark.parametrize("problem", ["poisson", "contrast"])
def test_train_from_two_level_never_worse_than_gdsw(problem):
    if problem == "poisson":
        A, d = _problem("metis")
    else:
        A = diffusion_2d(high_contrast_channels(12, contrast=1e4))
        d = Decomposition.from_matrix(A, 6, 1)
    b = np.random.default_rng(0).standard_normal(A.shape[0])
    two_level = cg_iterations(A, TwoLevelSchwarz(A, d, coarse_basis="gdsw"), b)[0]
    op = learned_schwarz_preconditioner(A, d, coarse_basis="gdsw")
    t = train_preconditioner(op, A, steps=20, lr=0.1, batch_size=8, check_every=10, b=b)
    assert t.initial.iterations == two_level
    assert t.best.iterations <= two_level
    assert t.status == "finished"
