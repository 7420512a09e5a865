"""Training data for general problems: tensor-product Fourier modes on grids, low
eigenvectors and smoothed random vectors of any SPD matrix, the factory, and the
trainer on these samplers."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

from ddops.dd.decomposition import Decomposition
from ddops.learning.data import (
    BasisRHS,
    FourierRHS,
    GridFourierRHS,
    MatrixRHS,
    exact_solutions,
    grid_fourier_modes,
    make_rhs_sampler,
)
from ddops.learning.training import Trainer, TrainingConfig
from ddops.operators import SchwarzOperator
from ddops.problems import diffusion_2d, poisson_1d, poisson_2d, poisson_3d


def _direct_grid_basis(shape, modes):
    """Independent construction: one point and one product at a time, then sorted."""
    n = int(np.prod(shape))
    combos = []
    for js in itertools.product(range(2 * modes), repeat=len(shape)):
        ms = [j // 2 + 1 for j in js]
        key = (sum(ms), tuple(ms[::-1]), tuple(j % 2 for j in js[::-1]))
        combos.append((key, js))
    combos.sort()
    cols = []
    for _, js in combos:
        v = np.empty(n)
        for idx in range(n):
            # lexicographic, x fastest: idx = i0 + n0 i1 + n0 n1 i2
            rest, val = idx, 1.0
            for t, size in enumerate(shape):
                i = rest % size
                rest //= size
                x = (i + 1) / (size + 1)
                m = js[t] // 2 + 1
                val *= np.sin(np.pi * m * x) if js[t] % 2 == 0 else np.cos(np.pi * m * x)
            v[idx] = val
        cols.append(v / (np.linalg.norm(v) + 1e-12))
    return np.stack(cols, axis=1)


@pytest.mark.parametrize("shape, modes", [((7, 5), 3), ((4, 5, 3), 2), ((9,), 4)])
def test_grid_modes_against_a_direct_construction(shape, modes):
    np.testing.assert_allclose(grid_fourier_modes(shape, modes), _direct_grid_basis(shape, modes),
                               rtol=0, atol=1e-13)


def test_grid_modes_ordered_by_total_frequency_and_truncated():
    rhs = GridFourierRHS(poisson_2d(10), (10, 10), modes=4, max_functions=20)
    assert rhs.num_functions == 20
    full = grid_fourier_modes((10, 10), 4)
    np.testing.assert_array_equal(rhs.basis, full[:, :20])
    # |m|_1 = 2 (four sin/cos patterns of m = (1, 1)), then |m|_1 = 3 (eight)
    np.testing.assert_allclose(rhs.frequencies[:4], np.sqrt(2))
    np.testing.assert_allclose(rhs.frequencies[4:12], np.sqrt(5))
    # the first mode is sin(pi x) sin(pi y)
    x = np.arange(1, 11) / 11
    v = np.outer(np.sin(np.pi * x), np.sin(np.pi * x)).ravel()
    np.testing.assert_allclose(rhs.basis[:, 0], v / np.linalg.norm(v), atol=1e-14)


@pytest.mark.parametrize("mode", ["mixed_fourier", "pure_modes", "random_combinations"])
@pytest.mark.parametrize("problem", ["poisson2d", "poisson3d", "diffusion2d"])
def test_grid_solutions_solve_and_normalised(problem, mode):
    if problem == "poisson2d":
        A, shape = poisson_2d(12), (12, 12)
    elif problem == "poisson3d":
        A, shape = poisson_3d(6), (6, 6, 6)
    else:
        A, shape = diffusion_2d(np.random.default_rng(0).uniform(1, 100, (13, 13))), (12, 12)
    rhs = GridFourierRHS(A, shape, modes=3, mode=mode)
    F, U = rhs.sample(40, np.random.default_rng(1))
    assert F.shape == U.shape == (A.shape[0], 40)
    np.testing.assert_allclose(np.linalg.norm(F, axis=0), 1.0, rtol=3e-12)  # the 1e-12 eps
    # against an independent dense solve
    np.testing.assert_allclose(U, np.linalg.solve(A.toarray(), F), rtol=0,
                               atol=1e-11 * np.abs(U).max())


def test_grid_1d_is_the_paper_family():
    n = 40
    grid = GridFourierRHS(poisson_1d(n, "dof"), (n,), modes=16)
    paper = FourierRHS(n, "dof", modes=16)
    np.testing.assert_array_equal(grid.basis, paper.basis)
    np.testing.assert_array_equal(grid.combination_scale, paper.combination_scale)
    np.testing.assert_allclose(grid.solved_basis, paper.solved_basis, rtol=1e-11)
    Cg = grid.sample_coefficients(64, np.random.default_rng(3))
    Cp = paper.sample_coefficients(64, np.random.default_rng(3))
    np.testing.assert_allclose(Cg, Cp, rtol=1e-14)


def test_grid_combination_law():
    """Combination coefficients on the raw products: N(0, 1) |m|_2^-decay (decay 2 in 2D)."""
    shape = (16, 16)
    rhs = GridFourierRHS(poisson_2d(16), shape, modes=3, mode="random_combinations")
    assert rhs.decay == 2.0
    raw = _raw_grid(shape, 3)
    freq = np.array([np.sqrt(sum((j // 2 + 1) ** 2 for j in js)) for js in _sorted_combos(2, 3)])
    np.testing.assert_allclose(rhs.frequencies, freq, rtol=1e-15)
    # the documented draw, re-implemented on the raw modes: F = raw (z |m|^-2), normalised
    z = np.random.default_rng(0).standard_normal((36, 50))
    F_raw = raw @ (z * freq[:, None] ** -2.0)
    F_raw /= np.linalg.norm(F_raw, axis=0)
    F, _ = rhs.sample(50, np.random.default_rng(0))
    np.testing.assert_allclose(F, F_raw, atol=1e-10)


def _sorted_combos(d, modes):
    """Sine/cosine index tuples sorted by |m|_1, slower directions' m, sine/cosine pattern."""
    def key(js):
        ms = tuple(j // 2 + 1 for j in js[::-1])
        return (sum(ms), ms, tuple(j % 2 for j in js[::-1]))
    return sorted(itertools.product(range(2 * modes), repeat=d), key=key)


def _raw_grid(shape, modes):
    basis = _direct_grid_basis(shape, modes)
    out = []
    for js in _sorted_combos(len(shape), modes):
        v = np.ones(1)
        for t, size in enumerate(shape):
            x = (np.arange(size) + 1) / (size + 1)
            m = js[t] // 2 + 1
            f = np.sin(np.pi * m * x) if js[t] % 2 == 0 else np.cos(np.pi * m * x)
            v = np.outer(f, v).ravel()
        out.append(v)
    raw = np.stack(out, axis=1)
    assert raw.shape == basis.shape
    return raw


def test_pure_columns_are_signed_basis_vectors_with_their_solutions():
    A = poisson_2d(9)
    rhs = GridFourierRHS(A, (9, 9), modes=2, mode="pure_modes")
    F, U = rhs.sample(300, np.random.default_rng(2))
    G = rhs.basis.T @ F
    k = np.abs(G).argmax(axis=0)
    s = np.sign(G[k, np.arange(300)])
    np.testing.assert_allclose(F, rhs.basis[:, k] * s, atol=1e-14)
    np.testing.assert_allclose(U, rhs.solved_basis[:, k] * s, atol=1e-14)
    assert set(np.unique(k)) == set(range(rhs.num_functions))


def test_mixed_split_and_shuffle_general():
    rhs = MatrixRHS(poisson_2d(10), size=12)
    F, _ = rhs.sample(200, np.random.default_rng(0))
    G = np.abs(rhs.basis.T @ F)
    pure = np.isclose(G.max(axis=0), 1.0, atol=1e-10)
    assert pure.sum() == 100 and not pure[:100].all()


def test_eigen_basis_against_dense_eigh():
    A = diffusion_2d(np.random.default_rng(1).uniform(1, 10, (9, 9)))  # no repeated eigenvalues
    rhs = MatrixRHS(A, size=10)
    lam, V = np.linalg.eigh(A.toarray())
    np.testing.assert_allclose(rhs.eigenvalues, lam[:10], rtol=1e-12)
    np.testing.assert_allclose(np.abs(rhs.basis.T @ V[:, :10]), np.eye(10), atol=1e-8)
    np.testing.assert_allclose(rhs.combination_scale, (lam[:10] / lam[0]) ** -0.75, rtol=1e-10)


def test_eigen_basis_large_path_matches_dense():
    """Above the dense limit, shift-invert Lanczos; the same eigenpairs (no repeats here)."""
    A = diffusion_2d(np.random.default_rng(2).uniform(1, 10, (35, 35)))  # 34^2 > 1000
    assert A.shape[0] > 1000
    rhs = MatrixRHS(A, size=6)
    lam, V = np.linalg.eigh(A.toarray())
    np.testing.assert_allclose(rhs.eigenvalues, lam[:6], rtol=1e-9)
    np.testing.assert_allclose(np.abs(rhs.basis.T @ V[:, :6]), np.eye(6), atol=1e-6)
    F, U = rhs.sample(16, np.random.default_rng(0))
    np.testing.assert_allclose(A @ U, F, atol=1e-10)


def test_smooth_basis_is_orthonormal_smooth_and_solved():
    A = poisson_2d(20)
    rhs = MatrixRHS(A, size=16, basis="smooth", smoothing_steps=10)
    Phi = rhs.basis
    np.testing.assert_allclose(Phi.T @ Phi, np.eye(16), atol=1e-12)
    # Ritz values, ascending, between the extreme eigenvalues, and far below those of
    # unsmoothed random vectors (about the mean eigenvalue 4 / h^2)
    theta = np.diag(Phi.T @ (A @ Phi))
    np.testing.assert_allclose(theta, rhs.eigenvalues, rtol=1e-10)
    assert np.all(np.diff(theta) >= 0)
    rough = np.linalg.qr(np.random.default_rng(0).standard_normal((400, 16)))[0]
    assert theta.max() < 0.5 * np.diag(rough.T @ (A @ rough)).min()
    lam = np.linalg.eigvalsh(A.toarray())
    assert theta.min() >= lam[0] * (1 - 1e-12)
    F, U = rhs.sample(32, np.random.default_rng(1))
    np.testing.assert_allclose(U, np.linalg.solve(A.toarray(), F), atol=1e-12)
    # no smoothing: plain orthonormalised random vectors
    assert MatrixRHS(A, 16, "smooth", smoothing_steps=0).eigenvalues.max() > theta.max()


def test_exact_solutions_and_basis_rhs():
    A = poisson_2d(8)
    Phi = np.random.default_rng(0).standard_normal((64, 5))
    Psi = exact_solutions(A, Phi)
    np.testing.assert_allclose(A @ Psi, Phi, atol=1e-10)
    rhs = BasisRHS(Phi, Psi, combination_scale=np.arange(1, 6) ** -1.0)
    F, U = rhs.sample(10, np.random.default_rng(0))
    np.testing.assert_allclose(A @ U, F, atol=1e-12)
    assert "digest=" in repr(rhs)
    assert repr(rhs) != repr(BasisRHS(Phi, Psi))


def test_factory_picks():
    A = poisson_2d(8)
    assert isinstance(make_rhs_sampler(A, shape=(8, 8)), GridFourierRHS)
    assert make_rhs_sampler(A, shape=(8, 8)).modes == 8
    eig = make_rhs_sampler(A)
    assert isinstance(eig, MatrixRHS) and eig.kind == "eigen" and eig.decay == 1.5
    sm = make_rhs_sampler(A, shape=(8, 8), kind="smooth", size=10)
    assert sm.kind == "smooth" and sm.decay == 2.0 and sm.num_functions == 10
    assert make_rhs_sampler(poisson_3d(5), shape=(5, 5, 5)).modes == 4
    assert make_rhs_sampler(A, shape=(8, 8), size=7).num_functions == 7


@pytest.mark.parametrize("call, exc, name", [
    (lambda: make_rhs_sampler(poisson_2d(4), kind="fourier"), ValueError, "shape"),
    (lambda: make_rhs_sampler(poisson_2d(4), kind="nope"), ValueError, "kind"),
    (lambda: make_rhs_sampler(poisson_2d(4), kind="eigen", modes=3), ValueError, "modes"),
    (lambda: GridFourierRHS(poisson_2d(4), (4, 5)), ValueError, "A has"),
    (lambda: GridFourierRHS(poisson_2d(4), (4, 4), modes=5), ValueError, "modes"),
    (lambda: GridFourierRHS(poisson_2d(4), "x"), TypeError, "shape"),
    (lambda: GridFourierRHS(poisson_2d(4), (4, 4), mode="x"), ValueError, "mode"),
    (lambda: MatrixRHS(poisson_2d(4), size=17), ValueError, "size"),
    (lambda: MatrixRHS(poisson_2d(4), basis="x"), ValueError, "basis"),
    (lambda: MatrixRHS(sp.random(5, 5, 0.5, random_state=0) + sp.eye(5) * 0), ValueError, "A"),
    (lambda: MatrixRHS([[1.0]]), TypeError, "A"),
    (lambda: MatrixRHS(-sp.eye(40), size=4), ValueError, "positive"),
    (lambda: BasisRHS(np.ones((4, 2)), np.ones((4, 3))), ValueError, "solved_basis"),
    (lambda: BasisRHS(np.ones((4, 2)), np.ones((4, 2)), [1.0]), ValueError,
     "combination_scale"),
    (lambda: BasisRHS([[1.0]], np.ones((1, 1))), TypeError, "basis"),
])
def test_invalid_arguments(call, exc, name):
    with pytest.raises(exc, match=name):
        call()


def test_synthesize_checks_rows():
    rhs = MatrixRHS(poisson_2d(6), size=5)
    with pytest.raises(ValueError, match=r"C must have shape \(5, B\)"):
        rhs.synthesize(np.ones((4, 3)))


def _grid_setup(workers=1, steps=6, checkpoint=None):
    n = 12
    A = poisson_2d(n)
    d = Decomposition.from_grid((n, n), (2, 2), overlap=1)
    op = SchwarzOperator(d, local_rank=3, coarse_basis="nicolaides")
    rhs = GridFourierRHS(A, (n, n), modes=3)
    val = rhs.sample(16, np.random.default_rng(9))
    cfg = TrainingConfig(steps=steps, batch_size=32, lr=1e-3, val_every=2, progress=False,
                         workers=workers, checkpoint_every=2 if checkpoint else 0)
    return op, Trainer(op, rhs, cfg, validation=val, checkpoint=checkpoint)


def test_trainer_runs_on_grid_data_and_workers_agree():
    op1, t1 = _grid_setup()
    r1 = t1.run()
    assert r1.status == "finished" and np.all(np.isfinite(r1.history["val"]))
    assert r1.history["train"][-1] < r1.history["train"][0]
    op2, t2 = _grid_setup(workers=2)
    assert t2._blockwise_sampler()
    r2 = t2.run()
    np.testing.assert_allclose(r2.history["train"], r1.history["train"], rtol=1e-10)
    np.testing.assert_allclose(op2.theta, op1.theta, rtol=1e-8, atol=1e-14)


def test_trainer_resume_records_the_sampler(tmp_path):
    path = tmp_path / "ck.npz"
    op, t = _grid_setup(steps=4, checkpoint=path)
    t.run()
    op_full, t_full = _grid_setup(steps=6)
    t_full.run()
    op2, t2 = _grid_setup(steps=6, checkpoint=path)
    t2.load_checkpoint(path)  # a larger total of steps is no changed setting
    t2.run()
    np.testing.assert_array_equal(op2.theta, op_full.theta)
    # another matrix behind the same grid sampler is a different sampler
    _, t3 = _grid_setup(steps=4, checkpoint=path)
    t3.sampler = GridFourierRHS(2 * poisson_2d(12), (12, 12), modes=3)
    with pytest.raises(ValueError, match="sampler"):
        t3.load_checkpoint(path)
