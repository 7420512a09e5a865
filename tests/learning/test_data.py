"""Tests for ddops.learning.data: the paper's mixed Fourier right-hand sides and exact solutions."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddops.backend import cupy_available
from ddops.learning.data import RHS_MODES, FourierRHS, fourier_modes
from ddops.problems.poisson1d import PoissonSolver, grid_points, num_dofs, poisson_1d

# --------------------------------------------------------------------------- helpers


def normalize_cols(v):
    """The listing's ``normalize_rows`` in the column convention."""
    return v / (np.linalg.norm(v, axis=0, keepdims=True) + 1e-12)


def listing_batch(n, kind, mode, batch_size, seed, modes=16):
    """Direct transcription of the paper's ``sample_mixed_fourier_rhs`` (rows -> columns).

    Built from raw sin/cos loops exactly as in the listing; the random draws use a
    numpy Generator in the order documented by ``FourierRHS.sample_coefficients``.
    """
    x = grid_points(n, kind)
    rng = np.random.default_rng(seed)
    rows = []
    for m in range(1, modes + 1):
        rows.append(np.sin(math.pi * m * x))
        rows.append(np.cos(math.pi * m * x))
    basis = normalize_cols(np.stack(rows, axis=1))
    if mode == "mixed_fourier":
        b1 = batch_size // 2
    else:
        b1 = batch_size if mode == "pure_modes" else 0
    b2 = batch_size - b1
    idx = rng.integers(0, basis.shape[1], size=b1)
    signs = 2.0 * rng.integers(0, 2, size=b1) - 1.0
    pure = signs[None, :] * basis[:, idx]
    z = rng.standard_normal((modes, 2, b2))
    f = np.zeros((x.size, b2))
    for m in range(1, modes + 1):
        scale = 1.0 / (m**1.5)
        a = z[m - 1, 0][None, :] * scale
        b = z[m - 1, 1][None, :] * scale
        f = f + a * np.sin(math.pi * m * x)[:, None]
        f = f + b * np.cos(math.pi * m * x)[:, None]
    f = np.concatenate([pure, f], axis=1)
    if mode == "mixed_fourier":
        f = f[:, rng.permutation(batch_size)]
    return normalize_cols(f)


def dense_poisson(n, kind):
    """``h^-2 tridiag(-1, 2, -1)`` assembled densely from the two conventions' definitions."""
    size, h = (n - 1, 1.0 / n) if kind == "element" else (n, 1.0 / (n + 1))
    return (2.0 * np.eye(size) - np.eye(size, k=1) - np.eye(size, k=-1)) / h**2


def listing_basis(n, kind, modes=16):
    """The listing's normalised sin/cos columns on the grid ``x_j = j h``, ``j = 1, 2, ...``."""
    size, h = (n - 1, 1.0 / n) if kind == "element" else (n, 1.0 / (n + 1))
    x = h * np.arange(1, size + 1)
    cols = [f(math.pi * m * x) for m in range(1, modes + 1) for f in (np.sin, np.cos)]
    return normalize_cols(np.stack(cols, axis=1))


def pure_column_mask(F, basis, tol=1e-10):
    """True for columns that are +- a (normalised) basis vector."""
    G = basis.T @ F  # unit columns: |<phi_k, f>| = 1 iff f = +-phi_k
    best = np.abs(G).max(axis=0)
    k = np.abs(G).argmax(axis=0)
    resid = np.linalg.norm(F - basis[:, k] * np.sign(G[k, np.arange(F.shape[1])]), axis=0)
    return (resid < tol) & (np.abs(best - 1) < tol)


# --------------------------------------------------------------------------- fourier_modes


@pytest.mark.parametrize("kind", ["element", "dof"])
def test_fourier_modes_by_hand(kind):
    n, modes = 12, 3
    phi = fourier_modes(n, kind, modes=modes)
    assert phi.shape == (num_dofs(n, kind), 6)
    h = 1.0 / n if kind == "element" else 1.0 / (n + 1)
    for col, (fun, m) in enumerate([(f, m) for m in (1, 2, 3) for f in (math.sin, math.cos)]):
        raw = np.array([fun(math.pi * m * (j * h)) for j in range(1, phi.shape[0] + 1)])
        np.testing.assert_allclose(
            phi[:, col], raw / (np.sqrt(np.sum(raw**2)) + 1e-12), rtol=1e-13, atol=1e-15
        )
    np.testing.assert_allclose(np.linalg.norm(phi, axis=0), 1.0, rtol=1e-11)


def test_fourier_modes_paper_size():
    phi = fourier_modes(256)
    assert phi.shape == (255, 32) and phi.dtype == np.float64
    # the sines are mutually orthogonal on the grid (discrete sine transform)
    G = phi[:, 0::2].T @ phi[:, 0::2]
    np.testing.assert_allclose(G, np.eye(16), atol=1e-12)


@pytest.mark.parametrize(
    "args, exc, name",
    [
        ((2.5,), TypeError, "n"),
        ((1,), ValueError, "n"),
        ((0, "dof"), ValueError, "n"),
        ((32, "cell"), ValueError, "kind"),
        ((32, "element", 0), ValueError, "modes"),
        ((32, "element", 2.0), TypeError, "modes"),
        ((8, "element", 8), ValueError, "modes"),  # 7 unknowns
        ((2, "element", 1), ValueError, "vanishes"),  # cos(pi x) at x = 1/2
    ],
)
def test_fourier_modes_invalid(args, exc, name):
    with pytest.raises(exc, match=name):
        fourier_modes(*args)


# --------------------------------------------------------------------------- the listing


@pytest.mark.parametrize("kind", ["element", "dof"])
@pytest.mark.parametrize("mode", RHS_MODES)
@pytest.mark.parametrize("batch_size", [1, 2, 7, 64])
def test_matches_transcribed_listing(kind, mode, batch_size):
    n = 64
    F, U = FourierRHS(n, kind, mode).sample(batch_size, np.random.default_rng(1234))
    ref = listing_batch(n, kind, mode, batch_size, seed=1234)
    assert F.shape == ref.shape == (num_dofs(n, kind), batch_size)
    np.testing.assert_allclose(F, ref, rtol=0, atol=1e-13)
    # U solves the densely assembled Poisson system with the listing's right-hand side; the
    # residual is at the rounding level of ||A|| ||U|| (||A|| ~ 4 / h^2).
    residual = dense_poisson(n, kind) @ U - ref
    assert np.abs(residual).max() < 1e-13 * 4 * (n + 1) ** 2 * np.abs(U).max()


def test_sample_equals_basis_times_coefficients():
    rhs = FourierRHS(100)
    C = rhs.sample_coefficients(33, np.random.default_rng(9))
    F, U = rhs.sample(33, np.random.default_rng(9))
    assert C.shape == (32, 33)
    np.testing.assert_array_equal(F, rhs.basis @ C)
    np.testing.assert_array_equal(U, rhs.solved_basis @ C)
    assert F.flags.c_contiguous and U.flags.c_contiguous


# --------------------------------------------------------------------------- properties


@pytest.mark.parametrize("kind", ["element", "dof"])
@pytest.mark.parametrize("mode", RHS_MODES)
def test_solutions_solve_and_norms(kind, mode):
    n = 256
    F, U = FourierRHS(n, kind, mode).sample(256, np.random.default_rng(0))
    assert F.shape == U.shape == (num_dofs(n, kind), 256)
    assert F.dtype == U.dtype == np.float64
    np.testing.assert_allclose(np.linalg.norm(F, axis=0), 1.0, rtol=0, atol=1e-11)
    A = poisson_1d(n, kind)
    residual = A @ U - F
    assert np.abs(residual).max() < 1e-9
    # A has norm ~ 4 / h^2: check the residual is small relative to ||A|| ||U|| as well
    assert np.abs(residual).max() < 1e-13 * 4 * n**2 * np.abs(U).max()


def test_pure_modes_are_signed_basis_vectors():
    rhs = FourierRHS(256, mode="pure_modes")
    F, U = rhs.sample(3200, np.random.default_rng(2))
    phi = fourier_modes(256)
    assert pure_column_mask(F, phi).all()
    G = phi.T @ F
    k = np.abs(G).argmax(axis=0)
    signs = np.sign(G[k, np.arange(F.shape[1])])
    counts = np.bincount(k, minlength=32)
    assert counts.min() > 60 and counts.max() < 145  # 100 expected per mode
    assert 1400 < np.sum(signs > 0) < 1800
    # exact solutions: signed columns of A^-1 phi
    psi = PoissonSolver(256).solve(phi)
    np.testing.assert_allclose(U, psi[:, k] * signs, rtol=0, atol=1e-14)


@pytest.mark.parametrize("batch_size", [1, 2, 5, 256])
def test_mixed_split_and_shuffle(batch_size):
    rhs = FourierRHS(128)
    F, _ = rhs.sample(batch_size, np.random.default_rng(batch_size))
    mask = pure_column_mask(F, fourier_modes(128))
    assert mask.sum() == batch_size // 2
    assert rhs.split(batch_size) == (batch_size // 2, batch_size - batch_size // 2)
    if batch_size == 256:  # shuffled: the pure columns are not the leading block
        assert not mask[:128].all()
        assert 0 < mask[:128].sum() < 128


def test_random_combinations_have_no_pure_columns():
    F, _ = FourierRHS(128, mode="random_combinations").sample(200, np.random.default_rng(4))
    assert not pure_column_mask(F, fourier_modes(128), tol=1e-6).any()


@pytest.mark.parametrize("kind", ["element", "dof"])
def test_combination_scale_closed_form(kind):
    # raw norms: sum sin^2 = N/2 and sum cos^2 = N/2 - 1 over the N - 1 grid points j/N
    n = 200
    N = n if kind == "element" else n + 1
    m = np.arange(1, 17)
    expected = np.empty(32)
    expected[0::2] = m**-1.5 * (math.sqrt(N / 2) + 1e-12)
    expected[1::2] = m**-1.5 * (math.sqrt(N / 2 - 1) + 1e-12)
    rhs = FourierRHS(n, kind, mode="random_combinations")
    np.testing.assert_allclose(rhs.combination_scale, expected, rtol=1e-13)


def test_combination_coefficient_statistics():
    rhs = FourierRHS(256, mode="random_combinations")
    C = rhs.sample_coefficients(4000, np.random.default_rng(5))
    # C = z * scale / ||Phi (z * scale)||: removing the scale leaves z up to a positive
    # per-column factor, so w = z / ||z|| is uniform on the sphere: E[w_k^2] = 1/32.
    w = C / rhs.combination_scale[:, None]
    w /= np.linalg.norm(w, axis=0)
    np.testing.assert_allclose(np.mean(w**2, axis=1), 1 / 32, atol=0.004)
    # and the decay itself: the median of log|c_k / c_1| is log(scale_k / scale_1)
    med = np.median(np.log(np.abs(C / C[0])), axis=1)
    np.testing.assert_allclose(
        med, np.log(rhs.combination_scale / rhs.combination_scale[0]), atol=0.2
    )
    # scale ~ m^-1.5 sqrt(n/2): mode 16 is 64 times smaller than mode 1
    assert rhs.combination_scale[30] / rhs.combination_scale[0] == pytest.approx(1 / 64)
    # symmetric: as many positive as negative coefficients
    assert abs(np.mean(C > 0) - 0.5) < 0.01


# --------------------------------------------------------------------------- distributions
# Checked on F itself, against raw sin/cos modes built here from the grid definition, so
# neither the sampler's coefficients nor its scale attributes enter the expected values.


def raw_modes_by_hand(n, kind, modes):
    """``sin(pi m x_j), cos(pi m x_j)`` interleaved, ``x_j = j h`` on the interior points."""
    h, count = (1.0 / n, n - 1) if kind == "element" else (1.0 / (n + 1), n)
    x = h * np.arange(1, count + 1)
    cols = [f(math.pi * m * x) for m in range(1, modes + 1) for f in (np.sin, np.cos)]
    return np.stack(cols, axis=1)


def raw_coefficients(F, n, kind, modes):
    """``a`` with ``F = raw a`` (least squares), after checking that F lies in the span."""
    raw = raw_modes_by_hand(n, kind, modes)
    a = np.linalg.lstsq(raw, F, rcond=None)[0]
    np.testing.assert_allclose(raw @ a, F, rtol=0, atol=1e-12)
    return a


def anisotropy(W):
    """``d * max_jk |E[w w^T / ||w||^2] - I / d|``: 0 in expectation for uniform directions."""
    d, B = W.shape
    D = W / np.linalg.norm(W, axis=0)
    return d * float(np.abs(D @ D.T / B - np.eye(d) / d).max())


@pytest.mark.parametrize("kind", ["element", "dof"])
def test_combination_law_on_the_raw_modes(kind):
    """``f ~ sum_m m^-1.5 (a_m sin + b_m cos)``, ``a_m, b_m`` iid N(0, 1), then normalised."""
    # n = 12 and 4 modes: the raw sine and cosine norms differ by about 10 %, so a scale taken
    # on the normalised modes instead of the raw ones moves the sine/cosine balance
    n, modes, B = 12, 4, 20000
    F, _ = FourierRHS(n, kind, "random_combinations", modes=modes).sample(
        B, np.random.default_rng(11))
    a = raw_coefficients(F, n, kind, modes)
    m = np.repeat(np.arange(1, modes + 1), 2)
    # undoing the damping leaves iid normals up to a per-column factor: uniform directions
    # (noise about 0.02 here; a damping exponent off by 0.25 gives about 0.15)
    assert anisotropy(a * m[:, None] ** 1.5) < 0.06
    # the damping law: E log|a_m| = -1.5 log m + const, for the sines and the cosines alike
    mean_log = np.log(np.abs(a)).mean(axis=1)
    for part in (0, 1):
        slope, _ = np.polyfit(np.log(m[part::2]), mean_log[part::2], 1)
        assert slope == pytest.approx(-1.5, abs=0.04)
    # the same N(0, 1) scale on the raw sine and cosine (noise about 0.006)
    assert abs(np.mean(mean_log[0::2] - mean_log[1::2])) < 0.03
    assert abs(np.mean(a > 0) - 0.5) < 0.01
    # unit columns up to the listing's 1e-12 in f / (||f|| + 1e-12)
    np.testing.assert_allclose(np.linalg.norm(F, axis=0), 1.0, rtol=0, atol=1e-11)


def test_mixed_batches_pure_fraction_shuffle_and_modes():
    """B // 2 pure columns per batch at uniform positions; uniform mode index and sign."""
    n, modes, B, batches = 12, 4, 7, 3000
    rhs = FourierRHS(n, modes=modes)
    rng = np.random.default_rng(12)
    raw = raw_modes_by_hand(n, "element", modes)
    unit = raw / np.linalg.norm(raw, axis=0)
    pure_at = np.zeros(B)
    index_counts, positive = np.zeros(2 * modes), 0
    combos = []
    for _ in range(batches):
        F, _ = rhs.sample(B, rng)
        G = unit.T @ F
        k = np.abs(G).argmax(axis=0)
        cols = np.arange(B)
        pure = np.linalg.norm(F - unit[:, k] * np.sign(G[k, cols]), axis=0) < 1e-10
        assert pure.sum() == B // 2
        pure_at += pure
        np.add.at(index_counts, k[pure], 1)
        positive += int(np.sum(G[k[pure], cols[pure]] > 0))
        combos.append(F[:, ~pure])
    total = batches * (B // 2)
    # every position is pure with probability 3/7 (the shuffle); 5 standard deviations
    p = (B // 2) / B
    np.testing.assert_allclose(pure_at / batches, p, atol=5 * math.sqrt(p * (1 - p) / batches))
    expected = total / (2 * modes)
    assert np.abs(index_counts - expected).max() < 5 * math.sqrt(expected)
    assert abs(positive - total / 2) < 5 * math.sqrt(total / 4)
    # the combination half follows the damping law (see the test above)
    a = raw_coefficients(np.concatenate(combos, axis=1), n, "element", modes)
    m = np.repeat(np.arange(1, modes + 1), 2)
    assert anisotropy(a * m[:, None] ** 1.5) < 0.06


@pytest.mark.parametrize("kind", ["element", "dof"])
@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-12), (np.float32, 2e-6)])
def test_solutions_against_an_independent_dense_solve(kind, dtype, tol):
    n = 40
    h, count = (1.0 / n, n - 1) if kind == "element" else (1.0 / (n + 1), n)
    A = (2 * np.eye(count) - np.eye(count, k=1) - np.eye(count, k=-1)) / h**2
    F, U = FourierRHS(n, kind, dtype=dtype).sample(24, np.random.default_rng(13))
    assert F.dtype == U.dtype == dtype
    U_ref = np.linalg.solve(A, F.astype(np.float64))
    np.testing.assert_allclose(U, U_ref, rtol=0, atol=tol * np.abs(U_ref).max())


@pytest.mark.parametrize("mode", RHS_MODES)
def test_reproducible_and_seed_dependent(mode):
    rhs = FourierRHS(64, "dof", mode)
    F1, U1 = rhs.sample(16, np.random.default_rng(42))
    F2, U2 = FourierRHS(64, "dof", mode).sample(16, np.random.default_rng(42))
    np.testing.assert_array_equal(F1, F2)
    np.testing.assert_array_equal(U1, U2)
    F3, _ = rhs.sample(16, np.random.default_rng(43))
    assert not np.array_equal(F1, F3)
    rng = np.random.default_rng(42)
    Fa, _ = rhs.sample(16, rng)
    Fb, _ = rhs.sample(16, rng)
    np.testing.assert_array_equal(Fa, F1)
    assert not np.array_equal(Fa, Fb)


def test_float32():
    rhs32 = FourierRHS(256, dtype=np.float32)
    F32, U32 = rhs32.sample(64, np.random.default_rng(3))
    F64, U64 = FourierRHS(256).sample(64, np.random.default_rng(3))
    assert F32.dtype == U32.dtype == np.float32
    assert rhs32.basis.dtype == np.float32
    np.testing.assert_allclose(F32, F64, rtol=0, atol=1e-6)
    np.testing.assert_allclose(U32, U64, rtol=0, atol=1e-6 * np.abs(U64).max())


def test_large_n_scales():
    n = 2**15
    rhs = FourierRHS(n)
    F, U = rhs.sample(8, np.random.default_rng(0))
    np.testing.assert_allclose(np.linalg.norm(F, axis=0), 1.0, atol=1e-11)
    residual = poisson_1d(n) @ U - F
    assert np.abs(residual).max() < 1e-13 * 4 * n**2 * np.abs(U).max()


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(17, 300),
    kind=st.sampled_from(["element", "dof"]),
    mode=st.sampled_from(RHS_MODES),
    batch_size=st.integers(1, 24),
    seed=st.integers(0, 2**32 - 1),
)
def test_property_batches(n, kind, mode, batch_size, seed):
    rhs = FourierRHS(n, kind, mode)
    F, U = rhs.sample(batch_size, np.random.default_rng(seed))
    assert F.shape == U.shape == (num_dofs(n, kind), batch_size)
    assert np.all(np.isfinite(F)) and np.all(np.isfinite(U))
    np.testing.assert_allclose(np.linalg.norm(F, axis=0), 1.0, atol=1e-11)
    residual = dense_poisson(n, kind) @ U - F
    assert np.abs(residual).max() < 1e-12 * 4 * (n + 1) ** 2 * max(np.abs(U).max(), 1e-3)
    # the listing's split: half of the batch pure modes, all of it, or none
    expected = {"mixed_fourier": batch_size // 2, "pure_modes": batch_size}.get(mode, 0)
    assert pure_column_mask(F, listing_basis(n, kind)).sum() == expected


# --------------------------------------------------------------------------- arguments


@pytest.mark.parametrize(
    "kwargs, exc, name",
    [
        ({"n": 64.0}, TypeError, "n"),
        ({"n": 1}, ValueError, "n"),
        ({"kind": "cells"}, ValueError, "kind"),
        ({"mode": "mixed"}, ValueError, "mode"),
        ({"modes": 0}, ValueError, "modes"),
        ({"modes": 100}, ValueError, "modes"),
        ({"dtype": np.int32}, TypeError, "dtype"),
        ({"dtype": "float16"}, TypeError, "dtype"),
        ({"backend": "torch"}, ValueError, "backend"),
    ],
)
def test_invalid_constructor_arguments(kwargs, exc, name):
    args = {"n": 64, **kwargs}
    with pytest.raises(exc, match=name):
        FourierRHS(**args)


def test_invalid_sample_arguments():
    rhs = FourierRHS(32)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="batch_size"):
        rhs.sample(0, rng)
    with pytest.raises(TypeError, match="batch_size"):
        rhs.sample(4.0, rng)
    with pytest.raises(TypeError, match="rng"):
        rhs.sample(4, 0)
    with pytest.raises(TypeError, match="rng"):
        rhs.sample(4, np.random.RandomState(0))


@pytest.mark.skipif(not cupy_available(), reason="needs CuPy and a GPU")
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_cupy_matches_numpy(dtype):  # pragma: no cover - GPU only
    import cupy as cp

    F, U = FourierRHS(256, dtype=dtype).sample(64, np.random.default_rng(8))
    Fd, Ud = FourierRHS(256, dtype=dtype, backend="cupy").sample(64, np.random.default_rng(8))
    assert isinstance(Fd, cp.ndarray) and Fd.dtype == dtype
    tol = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(cp.asnumpy(Fd), F, atol=tol)
    np.testing.assert_allclose(cp.asnumpy(Ud), U, atol=tol * np.abs(U).max())


def test_sample_into_preallocated_buffers():
    rhs = FourierRHS(64, "dof")
    F0, U0 = rhs.sample(10, np.random.default_rng(6))
    F, U = np.full((64, 10), np.nan), np.full((64, 10), np.nan)
    rng = np.random.default_rng(6)
    Fr, Ur = rhs.sample(10, rng, out=(F, U))
    assert Fr is F and Ur is U
    np.testing.assert_array_equal(F, F0)
    np.testing.assert_array_equal(U, U0)
    state = rng.bit_generator.state
    with pytest.raises(ValueError, match=r"out\[0\]"):
        rhs.sample(10, rng, out=(np.empty((64, 9)), U))
    with pytest.raises(ValueError, match=r"out\[1\]"):
        rhs.sample(10, rng, out=(F, np.empty((64, 10), dtype=np.float32)))
    with pytest.raises(ValueError, match=r"out\[1\]"):
        rhs.sample(10, rng, out=(F, np.empty((10, 64)).T))
    with pytest.raises(ValueError, match="share memory"):
        rhs.sample(10, rng, out=(F, F))
    with pytest.raises(TypeError, match="out"):
        rhs.sample(10, rng, out=F)
    with pytest.raises(TypeError, match=r"out\[0\]"):
        rhs.sample(10, rng, out=([[0.0]], U))
    assert rng.bit_generator.state == state  # rejected calls draw nothing


def test_synthesize_column_blocks_and_validation():
    rhs = FourierRHS(64)
    C = rhs.sample_coefficients(12, np.random.default_rng(3))
    F, U = rhs.synthesize(C)
    np.testing.assert_array_equal(F, rhs.basis @ C)
    np.testing.assert_array_equal(U, rhs.solved_basis @ C)
    # a column slice of the coefficients gives the same columns of the batch
    Fb, Ub = rhs.synthesize(C[:, 5:9], out=(np.empty((63, 4)), np.empty((63, 4))))
    np.testing.assert_allclose(Fb, F[:, 5:9], rtol=1e-15, atol=1e-16)
    np.testing.assert_allclose(Ub, U[:, 5:9], rtol=1e-15, atol=1e-16)
    with pytest.raises(ValueError, match="C must have shape"):
        rhs.synthesize(C[:-1])
    with pytest.raises(TypeError, match="C must be"):
        rhs.synthesize(C.tolist())
    with pytest.raises(TypeError, match="C must be"):
        rhs.synthesize(C.astype(np.int64))
    with pytest.raises(ValueError, match=r"out\[0\]"):
        rhs.synthesize(C, out=(np.empty((63, 11)), np.empty((63, 12))))
