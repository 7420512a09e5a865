"""Mixed-precision local solves of TwoLevelSchwarz (``factor_dtype=np.float32``).

The float32 local factors are compared with independent float64 constructions (dense
inverses of the extracted blocks), CG with them must still reach ``rtol = 1e-8`` in about
the float64 iteration count, and bad ``factor_dtype`` values are refused by name.
"""

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import ddops
from ddops.precond import corrections
from ddops.precond.schwarz import TwoLevelSchwarz, solve_with_history
from ddops.problems import diffusion_2d, high_contrast_channels, poisson_2d, poisson_3d

F32_EPS = float(np.finfo(np.float32).eps)


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def _poisson(m=24, parts=4):
    return poisson_2d(m), ddops.Decomposition.from_grid((m, m), (parts, parts), 1)


def _one_level_dense(A, d):
    """Independent ``sum_i R_i^T A_i^{-1} R_i`` in float64 from dense blocks."""
    A = A.toarray()
    M = np.zeros_like(A)
    for idx in d.subdomains:  # a reference loop on a small problem
        M[np.ix_(idx, idx)] += np.linalg.inv(A[np.ix_(idx, idx)])
    return M


@pytest.mark.parametrize("local_solver", ["sparse", "dense"])
def test_float32_local_solves_agree_with_a_dense_float64_reference(local_solver):
    A, d = _poisson()
    ref = _one_level_dense(A, d)
    X = np.random.default_rng(0).standard_normal((A.shape[0], 3))
    M32 = TwoLevelSchwarz(A, d, coarse=False, local_solver=local_solver,
                          factor_dtype=np.float32)
    M64 = TwoLevelSchwarz(A, d, coarse=False, local_solver=local_solver)
    assert M32.factor_dtype == np.float32 and M64.factor_dtype == np.float64
    err32 = rel(M32.matmat(X), ref @ X)
    err64 = rel(M64.matmat(X), ref @ X)
    assert err64 < 1e-12
    # single precision: far from float64 rounding, within a small multiple of cond * eps32
    assert 1e-3 * F32_EPS < err32 < 1e-5
    assert M32.matmat(X).dtype == np.float64  # the products stay in float64


def test_float32_factors_are_single_precision_and_smaller():
    A, d = _poisson()
    M32 = TwoLevelSchwarz(A, d, coarse_basis="gdsw", local_solver="sparse",
                          factor_dtype="float32")
    M64 = TwoLevelSchwarz(A, d, coarse_basis="gdsw", local_solver="sparse")
    assert all(lu.L.dtype == np.float32 for lu in M32._local_lu)
    assert all(lu.L.dtype == np.float64 for lu in M64._local_lu)
    assert M32.factor_nnz == M64.factor_nnz  # same ordering, same fill
    local = sum(int(lu.nnz) for lu in M64._local_lu)
    assert M64.factor_bytes - M32.factor_bytes == 4 * local
    dense32 = TwoLevelSchwarz(A, d, coarse=False, local_solver="dense",
                              factor_dtype=np.float32)
    assert dense32._local_inv.dtype == np.float32


def test_default_is_the_float64_preconditioner_bitwise():
    A, d = _poisson()
    X = np.random.default_rng(1).standard_normal((A.shape[0], 2))
    plain = TwoLevelSchwarz(A, d, coarse_basis="gdsw", local_solver="sparse")
    explicit = TwoLevelSchwarz(A, d, coarse_basis="gdsw", local_solver="sparse",
                               factor_dtype=np.float64)
    np.testing.assert_array_equal(plain.matmat(X), explicit.matmat(X))


@pytest.mark.parametrize("variant", ["additive", "hybrid"])
def test_float32_two_level_close_to_float64_and_nearly_symmetric(variant):
    A, d = _poisson(32, 4)
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((2, A.shape[0]))
    M32 = TwoLevelSchwarz(A, d, coarse_basis="gdsw", variant=variant, local_solver="sparse",
                          factor_dtype=np.float32)
    M64 = TwoLevelSchwarz(A, d, coarse_basis="gdsw", variant=variant, local_solver="sparse")
    assert 1e-10 < rel(M32 @ x, M64 @ x) < 1e-5
    # cast-solve-cast is symmetric only to single-precision rounding
    asym = abs(y @ (M32 @ x) - x @ (M32 @ y)) / (np.linalg.norm(x) * np.linalg.norm(M32 @ y))
    assert asym < 1e-5


def _iterations(A, d, b, **kw):
    _, info64, _, it64 = solve_with_history(A, b, TwoLevelSchwarz(A, d, **kw), rtol=1e-8)
    x, info32, _, it32 = solve_with_history(
        A, b, TwoLevelSchwarz(A, d, factor_dtype=np.float32, **kw), rtol=1e-8)
    assert info64 == 0 and info32 == 0
    assert np.linalg.norm(b - A @ x) <= 1e-8 * np.linalg.norm(b) * (1 + 1e-6)
    return it64, it32


def test_cg_iterations_2d_and_3d_poisson():
    b2 = np.random.default_rng(0).standard_normal(48 * 48)
    A, d = _poisson(48, 4)
    it64, it32 = _iterations(A, d, b2, coarse_basis="gdsw", local_solver="sparse")
    assert abs(it32 - it64) <= 1
    A3 = poisson_3d(12)
    d3 = ddops.Decomposition.from_grid((12, 12, 12), (2, 2, 2), 1)
    b3 = np.random.default_rng(0).standard_normal(A3.shape[0])
    it64, it32 = _iterations(A3, d3, b3, coarse_basis="gdsw", local_solver="sparse")
    assert abs(it32 - it64) <= 1


def test_cg_iterations_fem_poisson_and_elasticity():
    pytest.importorskip("skfem")
    from ddops.problems import fem_elasticity_2d, fem_poisson_2d, rigid_body_modes

    A, _ = fem_poisson_2d(40, mesh="unstructured")
    d = ddops.Decomposition.from_matrix(A, 6, 1)
    b = np.random.default_rng(0).standard_normal(A.shape[0])
    it64, it32 = _iterations(A, d, b, coarse_basis="gdsw", local_solver="sparse")
    assert abs(it32 - it64) <= 1
    A, coords = fem_elasticity_2d(24, mesh="unstructured")
    d = ddops.Decomposition.from_matrix(A, 4, 1, block_size=2)
    Z = rigid_body_modes(coords)
    b = np.random.default_rng(0).standard_normal(A.shape[0])
    it64, it32 = _iterations(A, d, b, coarse_basis="gdsw", null_space=Z, local_solver="sparse")
    assert abs(it32 - it64) <= 1


def test_high_contrast_still_converges():
    m = 31
    A = diffusion_2d(high_contrast_channels(m, 1e6, period=8, width=1))
    d = ddops.Decomposition.from_grid((m, m), (2, 2), 1)
    b = np.random.default_rng(0).standard_normal(A.shape[0])
    it64, it32 = _iterations(A, d, b, coarse_basis="gdsw", local_solver="sparse")
    assert it32 <= it64 + 5  # a margin: single-precision local solves lose most here


def test_float32_one_solve_spd_check_and_chunks(monkeypatch):
    # above EXACT_PIVOT_CHECK_ROWS the float32 factors are checked by the one-solve test
    monkeypatch.setattr(corrections, "EXACT_PIVOT_CHECK_ROWS", 0)
    monkeypatch.setattr(corrections, "LOCAL_CHUNK_ROWS", 100)
    A, d = _poisson()
    M32 = TwoLevelSchwarz(A, d, coarse=False, local_solver="sparse", factor_dtype=np.float32)
    assert len(M32._local_lu) > 3
    X = np.random.default_rng(3).standard_normal((A.shape[0], 2))
    assert rel(M32.matmat(X), _one_level_dense(A, d) @ X) < 1e-5
    # an indefinite matrix is still refused in float32, by both checks
    B = (A - 0.2 * A.diagonal().max() * sp.eye(A.shape[0])).tocsr()
    with pytest.raises(ValueError, match="not positive definite"):
        TwoLevelSchwarz(B, d, coarse=False, local_solver="sparse", factor_dtype=np.float32)
    monkeypatch.setattr(corrections, "EXACT_PIVOT_CHECK_ROWS", 10**9)
    with pytest.raises(ValueError, match="not positive definite"):
        TwoLevelSchwarz(B, d, coarse=False, local_solver="sparse", factor_dtype=np.float32)


def test_float32_products_and_float32_factors():
    A, d = _poisson()
    x = np.random.default_rng(4).standard_normal(A.shape[0])
    M = TwoLevelSchwarz(A, d, coarse_basis="gdsw", dtype=np.float32, local_solver="sparse",
                        factor_dtype=np.float32)
    ref = TwoLevelSchwarz(A, d, coarse_basis="gdsw", local_solver="sparse")
    y = M @ x.astype(np.float32)
    assert y.dtype == np.float32 and rel(y, ref @ x) < 1e-5


@pytest.mark.parametrize("bad", [np.int32, np.float16, np.complex128, "half", "f8x", 32, None,
                                 True])
def test_bad_factor_dtype_names_the_argument(bad):
    A, d = _poisson(8, 2)
    with pytest.raises(TypeError, match="factor_dtype"):
        TwoLevelSchwarz(A, d, coarse=False, factor_dtype=bad)


def test_scipy_cg_accepts_the_float32_preconditioner():
    A, d = _poisson(32, 4)
    b = np.random.default_rng(5).standard_normal(A.shape[0])
    M = TwoLevelSchwarz(A, d, coarse_basis="gdsw", factor_dtype=np.float32)
    x, info = spla.cg(A, b, rtol=1e-8, M=M)
    assert info == 0 and np.linalg.norm(b - A @ x) <= 1.0001e-8 * np.linalg.norm(b)
