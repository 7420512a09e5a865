import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from hypothesis import given
from hypothesis import strategies as st

from ddops import (
    Decomposition1D,
    GlobalLowRankOperator,
    SchwarzOperator,
    best_rank_error,
    poisson_1d,
)
from ddops.testing import dottest, schwarz_operators

from .reference import dense_schwarz, dense_schwarz_partition, fd_check, subdomains_1d


def reference_dense(op):
    d = op.decomposition
    subs = subdomains_1d(d.n, d.num_subdomains, d.overlap, d.kind)
    Phi = None if op.coarse_matrix is None else op.coarse_matrix.toarray()
    return dense_schwarz(op.get_params(), subs, d.num_dofs, Phi)


@given(schwarz_operators(dtypes=(np.float64, np.float32)))
def test_to_dense_matches_independent_assembly(op):
    tol = 1e-5 if op.dtype == np.float32 else 1e-12
    ref = reference_dense(op)
    np.testing.assert_allclose(op.to_dense(), ref, rtol=tol, atol=tol * np.abs(ref).max())
    parts = op.to_dense("local") + op.to_dense("coarse")
    np.testing.assert_allclose(parts, ref, rtol=tol, atol=tol * np.abs(ref).max())


@given(schwarz_operators(dtypes=(np.float64, np.float32)), st.integers(1, 5))
def test_adjoint_consistency(op, B):
    dottest(op)
    dottest(op, nblock=B)
    dottest(op.H)
    dense = op.to_dense()
    tol = 1e-5 if op.dtype == np.float32 else 1e-12
    np.testing.assert_allclose(op.H @ np.eye(op.shape[0], dtype=op.dtype), dense.T, rtol=tol,
                               atol=tol * np.abs(dense).max())


@given(schwarz_operators(), st.integers(1, 6))
def test_matmat_equals_stacked_matvec(op, B):
    X = np.random.default_rng(B).standard_normal((op.shape[0], B))
    Y = op.matmat(X)
    np.testing.assert_allclose(Y, np.column_stack([op.matvec(x) for x in X.T]), rtol=1e-12,
                               atol=1e-14 * np.abs(Y).max())
    np.testing.assert_allclose(op @ X, Y)
    np.testing.assert_allclose(op.rmatmat(X), np.column_stack([op.rmatvec(x) for x in X.T]),
                               rtol=1e-12, atol=1e-14 * np.abs(Y).max())


@given(schwarz_operators())
def test_rank_bound(op):
    rank = np.linalg.matrix_rank(reference_dense(op))
    assert rank <= op.rank_bound
    # random factors attain the bound whenever it is at most the dimension and the
    # blocks are generic; the bound itself never exceeds what the structure allows
    if op.rank_bound <= op.shape[0] // 2:
        assert rank == op.rank_bound


@given(schwarz_operators())
def test_num_params_and_roundtrip(op):
    p = op.get_params()
    count = sum(q.size for q in p["Q"]) + sum(k.size for k in p["K"])
    assert op.num_params == count + p["Q0"].size + p["K0"].size
    for q, s in zip(p["Q"], op.decomposition.sizes):
        assert q.shape == (s, op.local_rank)
    p2 = {k: ([a * 2 for a in v] if isinstance(v, list) else v * 2) for k, v in p.items()}
    before = op.to_dense()
    op.set_params(p2)
    np.testing.assert_allclose(op.to_dense(), 4 * before, rtol=1e-12, atol=1e-300)
    np.testing.assert_array_equal(op.unflatten(op.flatten(p2))["Q"][0], p2["Q"][0])


@pytest.mark.parametrize(
    "n,expected",
    [(256, 2418), (512, 5138), (1024, 11346), (2048, 26834), (4096, 70098), (8192, 205778)],
)
def test_paper_parameter_counts_element(n, expected):
    op = SchwarzOperator(Decomposition1D(n, n // 32), local_rank=4, coarse_rank=n // 32 - 1)
    assert op.num_params == expected
    assert op.rank_bound == 4 * (n // 32) + n // 32 - 1


def test_paper_parameter_counts_dof_and_global():
    with pytest.warns(UserWarning, match="truncated"):
        op = SchwarzOperator(Decomposition1D(256, 8, kind="dof"), coarse_rank=8, init="naive")
    assert op.num_params == 2370 and op.coarse_rank == 7
    assert GlobalLowRankOperator(255, 39).num_params == 19890
    assert GlobalLowRankOperator(256, 40).num_params == 20480
    assert GlobalLowRankOperator(255, 5).num_params == 2550


def test_best_rank_errors_paper():
    A = poisson_1d(256)
    assert best_rank_error(A, 39) == pytest.approx(2.488e-4, rel=5e-4)
    assert best_rank_error(A, 5) == pytest.approx(4.504e-3, rel=5e-4)
    assert best_rank_error(poisson_1d(8192), 1279) == pytest.approx(1.351e-6, rel=5e-4)


@given(n=st.integers(3, 60), r=st.integers(0, 10), kind=st.sampled_from(["element", "dof"]))
def test_best_rank_error_against_svd(n, r, kind):
    A = poisson_1d(n, kind)
    Ainv = np.linalg.inv(A.toarray())
    U, s, Vt = np.linalg.svd(Ainv)
    r = min(r, len(s))
    approx = (U[:, :r] * s[:r]) @ Vt[:r]
    expected = np.linalg.norm(Ainv - approx)
    assert best_rank_error(A, r) == pytest.approx(expected, rel=1e-8, abs=1e-14)
    # a perturbed (non-Toeplitz) matrix takes the eigenvalue path
    A2 = A + sp.diags(np.linspace(0, 1, A.shape[0]))
    s2 = np.linalg.svd(np.linalg.inv(A2.toarray()), compute_uv=False)
    assert best_rank_error(A2, r) == pytest.approx(np.sqrt(np.sum(s2[r:] ** 2)), rel=1e-8,
                                                   abs=1e-14)


def test_initialisations():
    d = Decomposition1D(256, 8)
    naive = SchwarzOperator(d, init="naive", seed=1)
    scaled = SchwarzOperator(d, init="scaled", seed=1)
    q_naive = np.concatenate(naive.get_params()["Q"])
    q_scaled = np.concatenate(scaled.get_params()["Q"])
    np.testing.assert_allclose(q_scaled / q_naive, np.sqrt(1 / 256 / 4) * 4**-0.25 / 0.02)
    np.testing.assert_allclose(scaled.get_params()["Q0"] / naive.get_params()["Q0"],
                               np.sqrt(1 / 256 / 4) * 7**-0.25 / 0.02)
    assert abs(q_naive.std() - 0.02) < 0.002
    again = SchwarzOperator(d, init="scaled", seed=1)
    np.testing.assert_array_equal(again.theta, scaled.theta)
    assert not np.array_equal(SchwarzOperator(d, seed=2).theta, scaled.theta)


def test_padding_rows_stay_zero():
    op = SchwarzOperator(Decomposition1D(40, 3))
    Q = op.params["Q"]
    sizes = op.decomposition.sizes
    for i, s in enumerate(sizes):
        assert not Q[i, s:].any()


def test_global_operator():
    op = GlobalLowRankOperator(30, 4, seed=3)
    p = op.get_params()
    np.testing.assert_allclose(op.to_dense(), p["Q"] @ p["K"].T, rtol=1e-13)
    dottest(op)
    dottest(op, nblock=3)
    assert op.rank_bound == 4 and np.linalg.matrix_rank(op.to_dense()) == 4


def identity_plus_coarse(n, N):
    """Full local rank with Q_i = K_i = I gives sum_i R_i^T D_i R_i = I; add Phi Q0 Q0^T Phi^T."""
    d = Decomposition1D(n, N)
    r = d.max_size
    op = SchwarzOperator(d, local_rank=r)
    p = op.get_params()
    eye = [np.eye(s, r) for s in d.sizes]
    q0 = 1e-3 * np.random.default_rng(0).standard_normal(p["Q0"].shape)
    op.set_params({"Q": eye, "K": eye, "Q0": q0, "K0": q0})
    return op, op.coarse_matrix.toarray() @ q0


def test_krylov_drop_in():
    n = 128
    op, phq = identity_plus_coarse(n, 4)
    np.testing.assert_allclose(op.to_dense(), np.eye(n - 1) + phq @ phq.T, atol=1e-14)
    A = poisson_1d(n)
    b = np.ones(n - 1)
    for solver in (spla.gmres, spla.cg):
        x, info = solver(A, b, M=op, rtol=1e-10, maxiter=2000)
        assert info == 0
        assert np.linalg.norm(A @ x - b) <= 1e-8 * np.linalg.norm(b)
    # and as the system operator itself
    x, info = spla.cg(op, b, rtol=1e-12)
    assert info == 0
    np.testing.assert_allclose(op.matvec(x), b, rtol=1e-9)
    lo = spla.aslinearoperator(op)
    np.testing.assert_allclose(lo.matvec(b), op.matvec(b))


def test_to_dense_limit():
    op = SchwarzOperator(Decomposition1D(64, 2))
    with pytest.raises(ValueError, match="max_bytes"):
        op.to_dense(max_bytes=1000)
    assert op.to_dense(max_bytes=10**6).shape == (63, 63)


def test_local_and_coarse_parts():
    op = SchwarzOperator(Decomposition1D(64, 4), seed=5)
    x = np.random.default_rng(0).standard_normal(63)
    np.testing.assert_allclose(op.local_part().matvec(x) + op.coarse_part().matvec(x),
                               op.matvec(x), rtol=1e-12)
    np.testing.assert_allclose(op.local_part().to_dense(), op.to_dense("local"))


def test_invalid_arguments():
    d = Decomposition1D(64, 4)
    cases = [
        (dict(local_rank=0), ValueError, "local_rank"),
        (dict(local_rank=2.0), TypeError, "local_rank"),
        (dict(coarse_rank=0), ValueError, "coarse_rank"),
        (dict(coarse_basis="wavelets"), ValueError, "coarse_basis"),
        (dict(coarse_basis=np.ones((5, 2))), ValueError, "coarse_basis"),
        (dict(coarse_basis=np.full((63, 2), np.nan)), ValueError, "coarse_basis"),
        (dict(init="xavier"), ValueError, "init"),
        (dict(dtype=np.int32), TypeError, "dtype"),
        (dict(dtype=np.complex128), TypeError, "dtype"),
        (dict(backend="torch"), ValueError, "backend"),
        (dict(seed=-1), ValueError, "seed"),
        (dict(coarse_size=3), ValueError, "coarse_size"),
    ]
    for kwargs, exc, match in cases:
        with pytest.raises(exc, match=match):
            SchwarzOperator(d, **kwargs)
    with pytest.raises(TypeError, match="decomposition"):
        SchwarzOperator("not a decomposition")
    with pytest.raises(ValueError, match="rank"):
        GlobalLowRankOperator(10, 0)


def test_invalid_inputs_and_params():
    op = SchwarzOperator(Decomposition1D(32, 2))
    with pytest.raises(ValueError, match="shape"):
        op.matvec(np.ones(5))
    with pytest.raises(ValueError, match="NaN"):
        op.matvec(np.full(31, np.nan))
    with pytest.raises(TypeError, match="real"):
        op.matvec(np.ones(31, dtype=complex))
    p = op.get_params()
    bad = dict(p, Q0=p["Q0"][:, :0])
    with pytest.raises(ValueError, match="Q0"):
        op.set_params(bad)
    bad = dict(p, Q=p["Q"][:1])
    with pytest.raises(ValueError, match="Q"):
        op.set_params(bad)
    bad = dict(p, K=[np.full_like(k, np.inf) for k in p["K"]])
    with pytest.raises(ValueError, match="NaN or inf"):
        op.set_params(bad)
    with pytest.raises(ValueError, match="keys"):
        op.set_params({"Q": p["Q"]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        op.set_params(p)  # a valid round trip warns about nothing


@given(schwarz_operators(max_n=40), st.sampled_from(["left", "none"]))
def test_partition_variants(op0, partition):
    d = op0.decomposition
    grid = op0.coarse_basis_name == "grid_hats"
    op = SchwarzOperator(d, local_rank=op0.local_rank, coarse_rank=op0.coarse_rank or None,
                         coarse_basis=op0.coarse_basis_name,
                         coarse_size=op0.coarse_dim if grid else None,
                         partition=partition, seed=op0.seed)
    subs = subdomains_1d(d.n, d.num_subdomains, d.overlap, d.kind)
    Phi = None if op.coarse_matrix is None else op.coarse_matrix.toarray()
    ref = dense_schwarz_partition(op.get_params(), subs, d.num_dofs, partition, Phi)
    np.testing.assert_allclose(op.to_dense(), ref, rtol=1e-12, atol=1e-14 * np.abs(ref).max())
    dottest(op, nblock=3)
    F = np.random.default_rng(1).standard_normal((d.num_dofs, 3))
    fd_check(op, F, np.zeros_like(F) + 1.0, "wmse", coords=6)


@given(schwarz_operators(max_n=40), st.booleans())
def test_tied_symmetric_variant(op0, with_base):
    d = op0.decomposition
    grid = op0.coarse_basis_name == "grid_hats"
    base = sp.identity(d.num_dofs) * 0.5 if with_base else None
    op = SchwarzOperator(d, local_rank=op0.local_rank, coarse_rank=op0.coarse_rank or None,
                         coarse_basis=op0.coarse_basis_name,
                         coarse_size=op0.coarse_dim if grid else None, seed=op0.seed, tied=True,
                         base=base)
    p = op.get_params()
    assert set(p) == {"Q", "Q0"}
    assert op.num_params == sum(q.size for q in p["Q"]) + p["Q0"].size
    subs = subdomains_1d(d.n, d.num_subdomains, d.overlap, d.kind)
    Phi = None if op.coarse_matrix is None else op.coarse_matrix.toarray()
    ref = dense_schwarz({"Q": p["Q"], "K": p["Q"], "Q0": p["Q0"], "K0": p["Q0"]}, subs,
                        d.num_dofs, Phi)
    if with_base:
        ref = ref + 0.5 * np.eye(d.num_dofs)
    dense = op.to_dense()
    np.testing.assert_allclose(dense, ref, rtol=1e-12, atol=1e-14 * np.abs(ref).max())
    np.testing.assert_allclose(dense, dense.T, rtol=1e-12, atol=1e-15)
    eig = np.linalg.eigvalsh(dense)
    assert eig.min() >= (0.5 if with_base else 0.0) - 1e-10 * max(1.0, eig.max())
    dottest(op, nblock=2)
    F = np.random.default_rng(2).standard_normal((d.num_dofs, 3))
    fd_check(op, F, F * 0.1, "mse", coords=6)


def test_tied_and_base_validation():
    d = Decomposition1D(32, 2)
    with pytest.raises(ValueError, match="tied"):
        SchwarzOperator(d, tied=True, partition="left")
    with pytest.raises(TypeError, match="tied"):
        SchwarzOperator(d, tied=1)
    with pytest.raises(ValueError, match="base"):
        SchwarzOperator(d, base=sp.identity(5))
    with pytest.raises(TypeError, match="base"):
        SchwarzOperator(d, base="identity")
    with pytest.raises(ValueError, match="base"):
        SchwarzOperator(d, base=np.full((31, 31), np.inf))
    op = SchwarzOperator(d, base=spla.aslinearoperator(sp.identity(31)))
    x = np.ones(31)
    np.testing.assert_allclose(op.matvec(x), x + op.local_part().matvec(x)
                               + op.coarse_part().matvec(x))
