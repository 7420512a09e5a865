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
from ddops.dd.coarse import coarse_basis
from ddops.testing import BASES, dottest, schwarz_operators

from ..reference import (
    dense_operator,
    dense_schwarz,
    dense_schwarz_partition,
    fd_check,
    reference_subdomains,
    subdomains_1d,
)


def reference_dense(op):
    d = op.decomposition
    subs = subdomains_1d(d.n, d.num_subdomains, d.overlap, d.kind)
    Phi = None if op.coarse_matrix is None else op.coarse_matrix.toarray()
    return dense_schwarz(op.get_params(), subs, d.num_dofs, Phi)


#: Everything an operator can be: general decompositions, user coarse bases (rank-deficient,
#: zero rows), tied factors, every partition, non-symmetric fixed terms, both dtypes.
WIDE = schwarz_operators(max_n=40, dtypes=(np.float64, np.float32), general=True,
                         custom_coarse=True, tied=(False, True),
                         partitions=("symmetric", "left", "none"), bases=BASES)


def _tol(op):
    return 1e-5 if op.dtype == np.float32 else 1e-12


def assert_matches(actual, expected, tol):
    np.testing.assert_allclose(actual, expected, rtol=tol,
                               atol=tol * max(np.abs(expected).max(), 1e-300))


@given(schwarz_operators(dtypes=(np.float64, np.float32)))
def test_to_dense_matches_independent_assembly(op):
    tol = _tol(op)
    ref = reference_dense(op)
    np.testing.assert_allclose(op.to_dense(), ref, rtol=tol, atol=tol * np.abs(ref).max())
    parts = op.to_dense("local") + op.to_dense("coarse")
    np.testing.assert_allclose(parts, ref, rtol=tol, atol=tol * np.abs(ref).max())


@given(WIDE)
def test_every_kind_of_operator_matches_its_definition(op):
    tol = _tol(op)
    ref = dense_operator(op)
    assert_matches(op.to_dense(), ref, tol)
    scale = np.abs(ref).max()
    for part in ("local", "coarse"):
        np.testing.assert_allclose(op.to_dense(part), dense_operator(op, part), rtol=tol,
                                   atol=tol * max(scale, 1e-300))
    np.testing.assert_allclose(op.local_part().to_dense(), dense_operator(op, "local"),
                               rtol=tol, atol=tol * max(scale, 1e-300))


@given(WIDE, st.integers(1, 5))
def test_adjoint_consistency(op, B):
    """The adjoint is the transpose of the definition, non-symmetric parts included."""
    dottest(op)
    dottest(op, nblock=B)
    dottest(op.H)
    dottest(op.H, nblock=B)
    ref = dense_operator(op)
    tol = _tol(op)
    X = np.random.default_rng(B).standard_normal((op.shape[0], B)).astype(op.dtype)
    assert_matches(op.rmatmat(X), ref.T @ X, 10 * tol)
    assert_matches(op.rmatvec(X[:, 0]), ref.T @ X[:, 0], 10 * tol)
    assert_matches(op.H @ np.eye(op.shape[0], dtype=op.dtype), ref.T, tol)
    assert_matches(op.H.H @ X, ref @ X, 10 * tol)


@given(WIDE, st.integers(1, 6))
def test_matmat_equals_stacked_matvec(op, B):
    X = np.random.default_rng(B).standard_normal((op.shape[0], B))
    Y = op.matmat(X)
    scale = max(np.abs(Y).max(), 1e-300)
    tol = _tol(op)
    np.testing.assert_allclose(Y, np.column_stack([op.matvec(x) for x in X.T]), rtol=tol,
                               atol=tol * scale)
    np.testing.assert_allclose(op @ X, Y)
    assert_matches(Y, dense_operator(op) @ X, 10 * tol)
    np.testing.assert_allclose(op.rmatmat(X), np.column_stack([op.rmatvec(x) for x in X.T]),
                               rtol=tol, atol=tol * scale)


@given(schwarz_operators())
def test_rank_bound(op):
    rank = np.linalg.matrix_rank(reference_dense(op))
    assert rank <= op.rank_bound
    # random factors attain the bound whenever it is at most the dimension and the
    # blocks are generic; the bound itself never exceeds what the structure allows
    if op.rank_bound <= op.shape[0] // 2:
        assert rank == op.rank_bound


@given(schwarz_operators(max_n=40, general=True, custom_coarse=True, tied=(False, True),
                         partitions=("symmetric", "left", "none")))
def test_rank_bound_is_the_documented_formula_and_a_true_bound(op):
    """``rank_bound = min(r0, rank Phi) + sum_i min(r, n_i)``, with rank Phi from numpy.

    Rank-deficient bases (repeated or scaled columns, zero columns, zero rows,
    all zero) must count their true rank; the coarse term attains it.
    """
    subs = reference_subdomains(op.decomposition)
    local = sum(min(op.local_rank, len(s)) for s in subs)
    if op.coarse_matrix is None:
        coarse = 0
    else:
        rank_phi = np.linalg.matrix_rank(op.coarse_matrix.toarray())
        coarse = min(op.coarse_rank, rank_phi)
    assert op.rank_bound == local + coarse
    assert np.linalg.matrix_rank(dense_operator(op)) <= op.rank_bound
    assert np.linalg.matrix_rank(dense_operator(op, "local")) <= local
    # generic factors: Phi Q0 K0^T Phi^T has exactly rank min(r0, rank Phi), counted above
    # the rounding of the product (relative to its factors: with a rank-deficient Phi the
    # largest singular value can itself be small, and numpy's default tolerance, relative to
    # it, then counted a rounding-sized one)
    if op.coarse_matrix is not None:
        C = op.to_dense("coarse")
        Q0 = np.asarray(op.params["Q0"], dtype=np.float64)
        K0 = np.asarray(op.params.get("K0", op.params["Q0"]), dtype=np.float64)
        tol = (max(C.shape) * np.finfo(C.dtype).eps * np.linalg.norm(op.coarse_matrix.toarray(), 2)
               ** 2 * np.linalg.norm(Q0, 2) * np.linalg.norm(K0, 2))
        assert np.linalg.matrix_rank(C, tol=tol) == coarse
    else:
        assert np.linalg.matrix_rank(op.to_dense("coarse")) == 0


def _deficient_bases(d):
    hats = coarse_basis(d).toarray()                 # full column rank
    dup = np.column_stack([hats, hats[:, 1], -3.0 * hats[:, 2]])
    zero_rows = dup.copy()
    zero_rows[: d.num_dofs // 3] = 0.0
    zero_col = np.column_stack([hats, np.zeros(d.num_dofs)])
    return {"duplicated": (dup, hats.shape[1]), "zero_rows": (zero_rows, np.linalg.matrix_rank(
        zero_rows)), "zero_column": (zero_col, hats.shape[1]),
        "all_zero": (np.zeros((d.num_dofs, 3)), 0)}


@pytest.mark.parametrize("name", ["duplicated", "zero_rows", "zero_column", "all_zero"])
@pytest.mark.parametrize("fmt", ["dense", "csr"])
def test_rank_bound_with_rank_deficient_coarse_basis(name, fmt):
    d = Decomposition1D(96, 4, overlap=2)
    Phi, rank_phi = _deficient_bases(d)[name]
    op = SchwarzOperator(d, local_rank=3, coarse_basis=Phi if fmt == "dense"
                         else sp.csr_matrix(Phi), seed=4)
    assert op.coarse_dim == Phi.shape[1] and op.coarse_rank == Phi.shape[1]
    expected = 3 * 4 + rank_phi
    assert op.rank_bound == expected
    dense = op.to_dense()
    np.testing.assert_allclose(dense, dense_operator(op), rtol=1e-12,
                               atol=1e-12 * np.abs(dense).max())
    assert np.linalg.matrix_rank(dense) == expected  # tight: 15 <= 95 / 2, generic factors
    dottest(op, nblock=3)
    if name == "all_zero":
        assert not op.to_dense("coarse").any()
    F = np.random.default_rng(0).standard_normal((d.num_dofs, 3))
    fd_check(op, F, F * 0.5, "mse", coords=8)


@pytest.mark.parametrize("kind", ["sparse", "dense", "operator"])
@pytest.mark.parametrize("tied", [False, True])
def test_non_symmetric_base_and_user_phi(kind, tied):
    """A non-symmetric fixed term and a user Phi: products, adjoint and gradient by definition."""
    d = Decomposition1D(30, 3, overlap=1)
    rng = np.random.default_rng(7)
    Phi = sp.random(d.num_dofs, 4, density=0.4, random_state=rng, format="csr")
    B = rng.standard_normal((d.num_dofs, d.num_dofs))
    assert np.abs(B - B.T).max() > 1.0
    base = {"sparse": sp.csr_matrix(B), "dense": B, "operator": spla.aslinearoperator(B)}[kind]
    op = SchwarzOperator(d, local_rank=2, coarse_basis=Phi, seed=1, tied=tied, base=base)
    no_base = SchwarzOperator(d, local_rank=2, coarse_basis=Phi, seed=1, tied=tied)
    ref = dense_operator(no_base) + B
    dense = op.to_dense()
    np.testing.assert_allclose(dense, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())
    np.testing.assert_allclose(op.H @ np.eye(d.num_dofs), ref.T, rtol=1e-12,
                               atol=1e-12 * np.abs(ref).max())
    X = rng.standard_normal((d.num_dofs, 3))
    np.testing.assert_allclose(op.rmatmat(X), ref.T @ X, rtol=1e-11)
    np.testing.assert_allclose(op.rmatvec(X[:, 1]), ref.T @ X[:, 1], rtol=1e-11)
    # the parts exclude the fixed term
    np.testing.assert_allclose(op.to_dense("local") + op.to_dense("coarse"),
                               dense_operator(no_base), rtol=1e-12, atol=1e-14)
    dottest(op, nblock=2)
    fd_check(op, X, X[::-1] * 0.3, "wmse", coords=8)


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
    with pytest.warns(UserWarning, match="coarse_rank=8 exceeds the coarse dimension n0=7; "
                                         "truncated to 7"):
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
    with pytest.raises(ValueError, match="pass max_bytes= to raise it"):
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
        (dict(local_rank=0), ValueError, "local_rank must be >= 1"),
        (dict(local_rank=2.0), TypeError, "local_rank must be an integer"),
        (dict(coarse_rank=0), ValueError, "coarse_rank must be >= 1"),
        (dict(coarse_rank=1.5), TypeError, "coarse_rank must be an integer"),
        (dict(coarse_basis=None, coarse_rank=2), ValueError, "coarse_rank must be None or 0"),
        (dict(coarse_basis="wavelets"), ValueError, "coarse_basis must be one of"),
        (dict(coarse_basis=np.ones((5, 2))), ValueError, r"coarse_basis must have shape \(63"),
        (dict(coarse_basis=np.ones(63)), ValueError, "coarse_basis must be 2-D"),
        (dict(coarse_basis=np.full((63, 2), "a")), TypeError, "coarse_basis must be a real"),
        (dict(coarse_basis=np.full((63, 2), np.nan)), ValueError, "coarse_basis contains NaN"),
        (dict(init="xavier"), ValueError, "init must be one of"),
        (dict(dtype=np.int32), TypeError, "dtype must be float32 or float64"),
        (dict(dtype=np.complex128), TypeError, "dtype must be float32 or float64"),
        (dict(backend="torch"), ValueError, "backend must be one of"),
        (dict(seed=-1), ValueError, "seed must be >= 0"),
        (dict(coarse_size=3), ValueError, "coarse_size is only used with"),
        (dict(partition="right"), ValueError, "partition must be one of"),
    ]
    for kwargs, exc, match in cases:
        with pytest.raises(exc, match=match):
            SchwarzOperator(d, **kwargs)
    with pytest.raises(TypeError, match="decomposition must be a ddops Decomposition"):
        SchwarzOperator("not a decomposition")
    with pytest.raises(ValueError, match="rank must be >= 1"):
        GlobalLowRankOperator(10, 0)
    with pytest.raises(ValueError, match="num_dofs must be >= 1"):
        GlobalLowRankOperator(0, 1)


def test_invalid_inputs_and_params():
    op = SchwarzOperator(Decomposition1D(32, 2))
    with pytest.raises(ValueError, match=r"x must have shape \(31,\)"):
        op.matvec(np.ones(5))
    with pytest.raises(ValueError, match="x contains NaN"):
        op.matvec(np.full(31, np.nan))
    with pytest.raises(TypeError, match="x must be real"):
        op.matvec(np.ones(31, dtype=complex))
    p = op.get_params()
    bad = dict(p, Q0=p["Q0"][:, :0])
    with pytest.raises(ValueError, match=r"params\['Q0'\] must have shape"):
        op.set_params(bad)
    bad = dict(p, Q=p["Q"][:1])
    with pytest.raises(ValueError, match=r"params\['Q'\] must be a list of 2 arrays"):
        op.set_params(bad)
    bad = dict(p, K=[np.full_like(k, np.inf) for k in p["K"]])
    with pytest.raises(ValueError, match=r"params\['K'\]\[0\] contains NaN or inf"):
        op.set_params(bad)
    with pytest.raises(ValueError, match="params must have exactly the keys"):
        op.set_params({"Q": p["Q"]})
    with pytest.raises(TypeError, match="params must be a dict"):
        op.set_params([p["Q"]])
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
    with pytest.raises(ValueError, match="tied=True needs a symmetric partition"):
        SchwarzOperator(d, tied=True, partition="left")
    with pytest.raises(TypeError, match="tied must be a bool"):
        SchwarzOperator(d, tied=1)
    with pytest.raises(ValueError, match=r"base must have shape \(31, 31\), got \(5, 5\)"):
        SchwarzOperator(d, base=sp.identity(5))
    with pytest.raises(ValueError, match=r"base must have shape \(31, 31\), got \(5, 5\)"):
        SchwarzOperator(d, base=spla.aslinearoperator(np.eye(5)))
    with pytest.raises(TypeError, match="base must be a LinearOperator or a matrix"):
        SchwarzOperator(d, base="identity")
    with pytest.raises(ValueError, match="base contains NaN or inf"):
        SchwarzOperator(d, base=np.full((31, 31), np.inf))
    op = SchwarzOperator(d, base=spla.aslinearoperator(sp.identity(31)))
    x = np.ones(31)
    np.testing.assert_allclose(op.matvec(x), x + op.local_part().matvec(x)
                               + op.coarse_part().matvec(x))


@pytest.mark.parametrize("kind,n,N,overlap", [("element", 40, 3, 1), ("dof", 50, 4, 2),
                                              ("element", 6, 1, 0)])
def test_local_rank_above_the_largest_subdomain_is_truncated(kind, n, N, overlap):
    """Capped at p = max n_i with a warning (as coarse_rank is); every block then full rank."""
    d = Decomposition1D(n, N, overlap=overlap, kind=kind)
    subs = subdomains_1d(n, N, overlap, kind)
    p = max(len(s) for s in subs)  # counted from the definition
    for asked in (p + 1, 10 * p, 10**12):
        with pytest.warns(UserWarning, match=rf"local_rank={asked} exceeds the largest "
                                             rf"subdomain size p={p}; truncated to {p}"):
            op = SchwarzOperator(d, local_rank=asked, seed=3, coarse_basis="pou")
        assert (op.local_rank, op.requested_local_rank) == (p, asked)
        assert all(q.shape == (len(s), p) for q, s in zip(op.get_params()["Q"], subs))
        n0 = N
        assert op.num_params == 2 * (p * sum(len(s) for s in subs) + n0 * n0)
        assert op.theta.size == 2 * (N * p * p + n0 * n0)
        assert op.rank_bound == sum(len(s) for s in subs) + n0
        np.testing.assert_allclose(op.to_dense(), reference_dense(op), rtol=1e-12,
                                   atol=1e-14 * np.abs(op.to_dense()).max())
    # at the limit nothing is truncated, and the result is the same operator
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        exact = SchwarzOperator(d, local_rank=p, seed=3, coarse_basis="pou")
    np.testing.assert_array_equal(exact.theta, op.theta)


def test_global_rank_above_n_is_truncated():
    with pytest.warns(UserWarning, match="rank=15 exceeds num_dofs=10; truncated to 10"):
        op = GlobalLowRankOperator(10, 15, seed=1)
    assert (op.rank, op.requested_rank, op.num_params, op.rank_bound) == (10, 15, 200, 10)
    p = op.get_params()
    assert p["Q"].shape == (10, 10)
    np.testing.assert_allclose(op.to_dense(), p["Q"] @ p["K"].T, rtol=1e-13)
    assert np.linalg.matrix_rank(op.to_dense()) == 10
    for asked in (11, 10**12):
        with pytest.warns(UserWarning, match=f"rank={asked} exceeds num_dofs=10"):
            assert GlobalLowRankOperator(10, asked).theta.size == 200
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert GlobalLowRankOperator(10, 10).rank == 10
