import os
import sys

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from hypothesis import assume, given
from hypothesis import strategies as st

from ddops import Decomposition, Decomposition1D, poisson_1d
from ddops.dd.coarse import coarse_basis, column_rank
from ddops.precond.schwarz import VARIANTS, TwoLevelSchwarz, jacobi, solve_with_history
from ddops.testing import decompositions, dottest, general_subdomains

from ..reference import dense_two_level as dense_reference
from ..reference import subdomains_1d

# -- matrices and an independent dense reference -------------------------------------------------


def diffusion_1d(m, seed):
    """Variable-coefficient 1D diffusion: edge coefficients spanning three decades."""
    k = 10.0 ** np.random.default_rng(seed).uniform(-1.5, 1.5, m + 1)
    return sp.diags([-k[1:-1], k[:-1] + k[1:], -k[1:-1]], [-1, 0, 1], format="csr")


def random_spd(m, seed, density=0.2):
    """Random sparse SPD matrix: symmetric pattern, strictly diagonally dominant."""
    rng = np.random.default_rng(seed)
    B = sp.random(m, m, density=density, random_state=rng)
    S = B + B.T
    return (S + sp.diags(abs(S).sum(axis=1).A1 + rng.uniform(0.1, 1.0, m))).tocsr()


def make_matrix(kind, d, seed):
    if kind == "poisson":
        return poisson_1d(d.n, d.kind)
    if kind == "diffusion":
        return diffusion_1d(d.num_dofs, seed)
    return random_spd(d.num_dofs, seed)


@st.composite
def preconditioners(draw, variants=VARIANTS):
    """(preconditioner, A, dense reference) over random decompositions and matrices."""
    d = draw(decompositions(max_n=64))
    kind = draw(st.sampled_from(["poisson", "diffusion", "random"]))
    A = make_matrix(kind, d, draw(st.integers(0, 2**16)))
    variant = draw(st.sampled_from(variants))
    choices = [None, "pou", "grid_hats", "custom"]
    if d.num_subdomains > 1:
        choices.append("interface_hats")
    basis = draw(st.sampled_from(choices))
    size = draw(st.integers(1, max(1, min(6, d.num_dofs // 2)))) if basis == "grid_hats" else None
    if basis == "custom":
        k = draw(st.integers(1, min(4, d.num_dofs)))
        basis = np.random.default_rng(k).standard_normal((d.num_dofs, k))
    if isinstance(basis, str):  # tiny cases can give repeated columns: a singular A_0
        Phi = coarse_basis(d, basis, size=size).toarray()
        assume(np.linalg.matrix_rank(Phi) == Phi.shape[1])
    solver = draw(st.sampled_from(["dense", "sparse"]))
    M = TwoLevelSchwarz(A, d, coarse_basis=basis, variant=variant, coarse_size=size,
                        local_solver=solver)
    Phi = None if M.coarse_matrix is None else M.coarse_matrix.toarray()
    subs = subdomains_1d(d.n, d.num_subdomains, d.overlap, d.kind)
    return M, A, dense_reference(A, subs, d.num_dofs, variant, Phi)


def assert_close(actual, expected, rtol=1e-9):
    np.testing.assert_allclose(actual, expected, rtol=rtol,
                               atol=rtol * max(np.abs(expected).max(), 1e-300))


# -- correctness ---------------------------------------------------------------------------------


@given(preconditioners())
def test_matches_independent_dense_construction(case):
    M, _, ref = case
    assert_close(M.to_dense(), ref)


@given(preconditioners(), st.integers(1, 4))
def test_true_adjoint_and_block_products(case, B):
    M, _, ref = case
    dottest(M)
    dottest(M, nblock=B)
    dottest(M.H)
    assert_close(M.H @ np.eye(M.shape[0]), ref.T)
    X = np.random.default_rng(B).standard_normal((M.shape[0], B))
    Y = M.matmat(X)
    assert_close(Y, np.column_stack([M.matvec(x) for x in X.T]))
    assert_close(M @ X, ref @ X)
    assert_close(M.rmatmat(X), ref.T @ X)
    assert M.matvec(X[:, :1]).shape == (M.shape[0], 1)


@given(preconditioners(variants=("additive", "symmetric_restricted")))
def test_symmetric_variants_are_spd(case):
    M, _, _ = case
    dense = M.to_dense()
    assert_close(dense, dense.T, rtol=1e-12)
    assert np.linalg.eigvalsh(0.5 * (dense + dense.T)).min() > 0


@pytest.mark.parametrize("variant", ["additive", "symmetric_restricted"])
def test_dense_local_inverses_are_exactly_symmetric(variant):
    """The adjoint reuses the stored A_i^{-1}: valid only if they are symmetric to the bit."""
    d = Decomposition1D(300, 7, overlap=3, kind="dof")
    M = TwoLevelSchwarz(diffusion_1d(d.num_dofs, 3), d, variant=variant, coarse=False,
                        local_solver="dense")
    dense = M.to_dense()
    np.testing.assert_array_equal(dense, dense.T)
    X = np.random.default_rng(0).standard_normal((d.num_dofs, 4))
    np.testing.assert_array_equal(M.rmatmat(X), M.matmat(X))


def test_restricted_is_not_symmetric():
    d = Decomposition1D(64, 4, overlap=2)
    dense = TwoLevelSchwarz(poisson_1d(64), d, variant="restricted").to_dense()
    assert np.abs(dense - dense.T).max() > 1e-3 * np.abs(dense).max()


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("coarse", [True, False])
def test_dense_and_sparse_local_solvers_agree(variant, coarse):
    d = Decomposition1D(300, 7, overlap=3, kind="dof")
    A = diffusion_1d(d.num_dofs, 3)
    X = np.random.default_rng(0).standard_normal((d.num_dofs, 3))
    Md = TwoLevelSchwarz(A, d, variant=variant, coarse=coarse, local_solver="dense")
    Ms = TwoLevelSchwarz(A, d, variant=variant, coarse=coarse, local_solver="sparse")
    assert (Md.local_solver, Ms.local_solver) == ("dense", "sparse")
    assert_close(Ms.matmat(X), Md.matmat(X), rtol=1e-11)
    assert_close(Ms.rmatmat(X), Md.rmatmat(X), rtol=1e-11)


def test_sparse_coarse_solver_agrees(monkeypatch):
    import ddops.precond.corrections as pre

    d = Decomposition1D(128, 8, overlap=2)
    A = poisson_1d(128)
    dense = TwoLevelSchwarz(A, d, coarse_basis="grid_hats", coarse_size=20)
    monkeypatch.setattr(pre, "COARSE_DENSE_MAX", 10)
    sparse = TwoLevelSchwarz(A, d, coarse_basis="grid_hats", coarse_size=20)
    assert (dense.coarse_solver, sparse.coarse_solver) == ("dense", "sparse")
    assert_close(sparse.to_dense(), dense.to_dense(), rtol=1e-11)


def test_auto_local_solver_follows_memory_rule(monkeypatch):
    import ddops.precond.corrections as pre

    d = Decomposition1D(256, 8, overlap=2)
    assert TwoLevelSchwarz(poisson_1d(256), d).local_solver == "dense"
    monkeypatch.setattr(pre, "DENSE_LOCAL_LIMIT_BYTES", 8 * d.max_size**2 * 8 - 1)
    assert TwoLevelSchwarz(poisson_1d(256), d).local_solver == "sparse"


@given(st.integers(12, 60), st.integers(1, 6), st.integers(0, 2**16), st.booleans())
def test_general_decomposition_and_random_spd(m, N, seed, with_coarse):
    """Random overlapping index sets (not contiguous) and a random sparse SPD matrix."""
    rng = np.random.default_rng(seed)
    owner = rng.integers(0, N, m)
    owner[:N] = np.arange(N)  # no empty subdomain
    subs = [np.union1d(np.flatnonzero(owner == i), rng.choice(m, 3, replace=False))
            for i in range(N)]
    d = Decomposition(subs, m)
    A = random_spd(m, seed)
    Phi = coarse_basis(d, "pou") if with_coarse else None
    # two random subdomains can cover the same unknowns: their Nicolaides functions are then
    # equal, a rank-deficient Phi that TwoLevelSchwarz refuses by design (tested elsewhere)
    assume(Phi is None or column_rank(Phi) == N)
    for variant in VARIANTS:
        M = TwoLevelSchwarz(A, d, coarse_basis="pou" if with_coarse else None, variant=variant)
        ref = dense_reference(A, subs, m, variant, None if Phi is None else Phi.toarray())
        assert_close(M.to_dense(), ref)
        assert M.num_subdomains == N and M.coarse_dim == (N if with_coarse else 0)


@given(general_subdomains(max_dofs=30), st.integers(0, 2**16), st.sampled_from(VARIANTS),
       st.sampled_from([None, "pou", "custom"]), st.sampled_from(["dense", "sparse"]))
def test_general_decompositions_against_the_definition(args, seed, variant, basis, solver):
    """Random overlapping index sets from the library's strategy, user Phi included."""
    subs, n, _ = args
    d = Decomposition(subs, n)
    A = random_spd(n, seed)
    Phi = None
    if basis == "custom":
        Phi = basis = np.random.default_rng(seed).standard_normal((n, min(3, n)))
    elif basis == "pou":
        Phi = coarse_basis(d, "pou").toarray()
    if Phi is not None and np.linalg.matrix_rank(Phi) < Phi.shape[1]:
        with pytest.raises(ValueError, match="coarse matrix A_0 = Phi\\^T A Phi"):
            TwoLevelSchwarz(A, d, coarse_basis=basis, variant=variant, local_solver=solver)
        return
    M = TwoLevelSchwarz(A, d, coarse_basis=basis, variant=variant, local_solver=solver)
    ref = dense_reference(A, [np.asarray(s) for s in subs], n, variant, Phi)
    assert_close(M.to_dense(), ref)
    assert_close(M.rmatmat(np.eye(n)), ref.T)
    dottest(M, nblock=2)


def test_dense_input_matrix_and_custom_phi():
    d = Decomposition1D(40, 4, overlap=2)
    A = poisson_1d(40).toarray()
    Phi = np.random.default_rng(1).standard_normal((d.num_dofs, 3))
    M = TwoLevelSchwarz(A, d, coarse_basis=sp.csr_matrix(Phi))
    subs = subdomains_1d(40, 4, 2, "element")
    assert_close(M.to_dense(), dense_reference(A, subs, d.num_dofs, "additive", Phi))
    assert M.coarse_basis_name == "custom" and M.coarse_dim == 3


def test_one_level_switches():
    d = Decomposition1D(64, 4, overlap=2)
    A = poisson_1d(64)
    # sum_i R_i^T A_i^{-1} R_i assembled densely from the index sets (no coarse term)
    ref = dense_reference(A, subdomains_1d(64, 4, 2, "element"), d.num_dofs, "additive")
    assert_close(TwoLevelSchwarz(A, d, coarse=False).to_dense(), ref, rtol=1e-12)
    assert_close(TwoLevelSchwarz(A, d, coarse_basis=None).to_dense(), ref, rtol=1e-12)
    one = Decomposition1D(64, 1)
    assert TwoLevelSchwarz(A, one, coarse=False).coarse_dim == 0  # no interface needed
    assert_close(TwoLevelSchwarz(A, one, coarse=False).to_dense(), np.linalg.inv(A.toarray()))


def test_float32():
    d = Decomposition1D(128, 4, overlap=2)
    A = poisson_1d(128)
    x = np.random.default_rng(0).standard_normal(d.num_dofs)
    M64 = TwoLevelSchwarz(A, d)
    M32 = TwoLevelSchwarz(A.astype(np.float32), d)
    assert M32.dtype == np.float32 and M64.dtype == np.float64
    y = M32.matvec(x)
    assert y.dtype == np.float32
    assert_close(y, M64.matvec(x), rtol=1e-4)
    assert TwoLevelSchwarz(A, d, dtype=np.float32, local_solver="sparse").matvec(x).dtype \
        == np.float32


def test_attributes_and_scipy_integration():
    n = 512
    A, d = poisson_1d(n), Decomposition1D(n, 16, overlap=2)
    M = TwoLevelSchwarz(A, d)
    assert M.aspreconditioner() is M
    assert M.setup_seconds > 0 and M.num_subdomains == 16 and M.coarse_dim == 15
    assert "TwoLevelSchwarz" in repr(M)
    b = np.ones(d.num_dofs)
    x, info = spla.cg(A, b, rtol=1e-10, M=M)
    assert info == 0 and np.linalg.norm(b - A @ x) <= 1e-9 * np.linalg.norm(b)
    x, info = spla.gmres(A, b, rtol=1e-10, M=TwoLevelSchwarz(A, d, variant="restricted"))
    assert info == 0 and np.linalg.norm(b - A @ x) <= 1e-9 * np.linalg.norm(b)
    assert spla.aslinearoperator(M) is M


# -- iteration counts (the classical scalability result) -----------------------------------------


def cg_iterations(n, **kwargs):
    A = poisson_1d(n)
    M = TwoLevelSchwarz(A, Decomposition1D(n, n // 32, overlap=2), **kwargs)
    b = np.random.default_rng(n).standard_normal(A.shape[0])
    x, info, residuals, iterations = solve_with_history(A, b, M, "cg", rtol=1e-8)
    assert info == 0 and residuals[-1] <= 1e-8
    return iterations


def test_two_level_cg_iterations_are_small_and_flat():
    its = [cg_iterations(n) for n in (256, 1024, 4096, 16384)]
    assert max(its) <= 10, its
    assert max(its) - min(its) <= 3, its


def test_one_level_cg_iterations_grow_with_subdomains():
    small, large = cg_iterations(256, coarse=False), cg_iterations(4096, coarse=False)
    assert large > 3 * small, (small, large)


@pytest.mark.parametrize("n", [1024, 4096])
def test_ras_gmres_converges_in_few_iterations(n):
    A = poisson_1d(n)
    M = TwoLevelSchwarz(A, Decomposition1D(n, n // 32, overlap=2), variant="restricted")
    b = np.random.default_rng(0).standard_normal(A.shape[0])
    x, info, residuals, iterations = solve_with_history(A, b, M, "gmres", rtol=1e-8)
    assert info == 0 and iterations <= 20, iterations
    assert np.linalg.norm(b - A @ x) <= 1e-8 * np.linalg.norm(b)
    assert residuals[0] == 1.0 and len(residuals) == iterations + 1


# -- helpers -------------------------------------------------------------------------------------


def test_solve_with_history_counts_like_scipy():
    A = diffusion_1d(200, 0)
    b = np.random.default_rng(1).standard_normal(200)
    calls = []
    spla.cg(A, b, rtol=1e-8, callback=calls.append)
    x, info, residuals, iterations = solve_with_history(A, b)
    assert info == 0 and iterations == len(calls) == len(residuals) - 1
    assert residuals[0] == 1.0
    assert residuals[-1] == pytest.approx(np.linalg.norm(b - A @ x) / np.linalg.norm(b))
    A = random_spd(200, 0, density=0.05)  # well conditioned: GMRES(10) needs a few cycles
    count = []
    spla.gmres(A, b, rtol=1e-8, restart=10, callback=count.append, callback_type="pr_norm")
    _, info, residuals, iterations = solve_with_history(A, b, method="gmres", restart=10)
    assert info == 0 and iterations == len(count) > 10  # inner iterations across restarts
    zero = solve_with_history(A, np.zeros(200))
    assert zero[1:] == (0, [0.0], 0)


def test_jacobi():
    A = diffusion_1d(50, 2)
    J = jacobi(A)
    x = np.random.default_rng(0).standard_normal(50)
    np.testing.assert_allclose(J.matvec(x), x / A.diagonal())
    np.testing.assert_allclose(J.to_dense(), np.diag(1 / A.diagonal()))
    dottest(J)
    assert J.aspreconditioner() is J
    its_none = solve_with_history(A, x)[3]
    its_jacobi = solve_with_history(A, x, jacobi(A))[3]
    assert its_jacobi < its_none
    with pytest.raises(ValueError, match="zero diagonal entry at index 3"):
        jacobi(sp.diags([1.0, 2.0, 3.0, 0.0]) + sp.csr_matrix(([1.0, 1.0], ([3, 2], [2, 3])),
                                                              shape=(4, 4)))
    with pytest.raises(ValueError, match="A: row 3 is empty"):  # the matrix contract first
        jacobi(sp.diags([1.0, 2.0, 3.0, 0.0]))


# -- bad input -----------------------------------------------------------------------------------


def singular_poisson(n, k):
    """Poisson with row and column k removed (zeroed): symmetric, semidefinite."""
    A = poisson_1d(n).tolil()
    A[k, :] = 0.0
    A[:, k] = 0.0
    return A.tocsr()


def neumann_1d(m):
    A = poisson_1d(m, "dof").tolil()
    A[0, 0] = A[-1, -1] = A[0, 0] / 2
    return A.tocsr()


D64 = Decomposition1D(64, 4, overlap=2)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(A=sp.random(63, 62, density=0.1)), r"A must be square, got shape \(63, 62\)"),
        (dict(A=np.ones(63)), r"A must be 2-D, got shape \(63,\)"),
        (dict(A=poisson_1d(32)), "size 31 but the decomposition has num_dofs=63"),
        (dict(A=poisson_1d(64) + sp.eye(63, k=1)), r"A is not symmetric: max \|A - A\^T\|"),
        (dict(A=poisson_1d(64).toarray() * np.nan), "A contains NaN or inf"),
        (dict(A=sp.diags(np.r_[np.inf, np.ones(62)])), "A contains NaN or inf"),
        (dict(A=singular_poisson(64, 20)), "A: row 20 is empty: A is singular"),
        (dict(A=singular_poisson(64, 20), local_solver="sparse"), "A: row 20 is empty"),
        (dict(A=-poisson_1d(64)), "subdomain 0, .*not positive definite"),
        (dict(A=-poisson_1d(64), local_solver="sparse"), "subdomain 0, .*not positive definite"),
        (dict(coarse_basis=np.ones((63, 2))), "coarse matrix .* singular"),
        (dict(coarse_basis=np.zeros((63, 1))), "coarse matrix .* singular"),
        (dict(coarse_basis="grid_hats", coarse_size=200), "coarse matrix .* singular"),
        (dict(variant="multiplicative"), "variant must be one of"),
        (dict(coarse_basis="spectral"), "coarse_basis must be one of"),
        (dict(coarse_basis="pou", coarse_size=3), "coarse_size is only used"),
        (dict(local_solver="cholmod"), "local_solver must be one of"),
        (dict(coarse_basis=np.ones((10, 2))), r"coarse_basis must have shape \(63"),
        (dict(backend="cupy"), "backend='cupy' requested but CuPy with a GPU is not avail"),
        (dict(backend="gpu"), "backend must be one of"),
        (dict(decomposition=Decomposition([np.arange(40), np.arange(30, 63)], 63),
              coarse_basis="interface_hats"), "'interface_hats' needs interface nodes"),
        (dict(decomposition=Decomposition1D(64, 1), coarse_basis="interface_hats"),
         "'interface_hats' needs interface nodes"),
    ],
)
def test_bad_input_raises(kwargs, match):
    A = kwargs.pop("A", poisson_1d(64))
    d = kwargs.pop("decomposition", D64)
    with pytest.raises(ValueError, match=match):
        TwoLevelSchwarz(A, d, **kwargs)


@pytest.mark.parametrize("solver", ["dense", "sparse"])
def test_numerically_singular_subdomain(solver):
    # one subdomain covering a pure-Neumann Laplacian: singular only up to rounding
    A = neumann_1d(40)
    with pytest.raises(ValueError, match="subdomain 0, .*singular") as exc, \
            pytest.warns(RuntimeWarning, match="A is singular: it annihilates the constant"):
        TwoLevelSchwarz(A, Decomposition1D(40, 1, kind="dof"), coarse=False, local_solver=solver)
    # the subdomain is named once, with its size (it was "subdomain 0 (subdomain 0, ...)")
    assert str(exc.value).count("subdomain 0") == 1
    assert "subdomain 0, with 40 unknowns, is singular" in str(exc.value)


def test_bad_right_hand_sides_and_types():
    M = TwoLevelSchwarz(poisson_1d(64), D64)
    x = np.ones(63)
    x[5] = np.nan
    with pytest.raises(ValueError, match="x contains NaN or inf"):
        M.matvec(x)
    with pytest.raises(ValueError, match="x contains NaN or inf"):
        spla.cg(poisson_1d(64), x, M=M)
    with pytest.raises(ValueError, match=r"x must have shape \(63,\)"):
        M.matvec(np.ones(62))
    with pytest.raises(ValueError, match="pass max_bytes= to raise it"):
        M.to_dense(max_bytes=100)
    with pytest.raises(TypeError, match="decomposition must be a ddops Decomposition"):
        TwoLevelSchwarz(poisson_1d(64), [np.arange(63)])
    with pytest.raises(TypeError, match="dtype must be float32 or float64"):
        TwoLevelSchwarz(poisson_1d(64), D64, dtype=np.int32)
    with pytest.raises(TypeError, match="coarse must be a bool"):
        TwoLevelSchwarz(poisson_1d(64), D64, coarse="yes")
    with pytest.raises(ValueError, match="b must have shape"):
        solve_with_history(poisson_1d(64), np.ones(62))
    with pytest.raises(ValueError, match="method must be one of"):
        solve_with_history(poisson_1d(64), np.ones(63), method="bicg")
    with pytest.raises(ValueError, match="restart is only used with method='gmres'"):
        solve_with_history(poisson_1d(64), np.ones(63), restart=5)


@pytest.mark.parametrize("factor,accepted", [(0.5, True), (0.99, True), (1.01, False),
                                             (2.0, False)])
@pytest.mark.parametrize("solver", ["dense", "sparse"])
def test_symmetrisation_tolerance_from_both_sides(factor, accepted, solver):
    """Asymmetry up to sqrt(eps) max |A| is rounding: accepted and symmetrised; beyond, refused."""
    A = poisson_1d(64).tolil()
    scale = abs(A).max()  # the diagonal, untouched below
    delta = factor * np.sqrt(np.finfo(np.float64).eps) * scale
    A[10, 11] += delta  # one off-diagonal entry: max |A - A^T| = delta
    A = A.tocsr()
    assert abs(A - A.T).max() == pytest.approx(delta, rel=1e-12) and abs(A).max() == scale
    if not accepted:
        with pytest.raises(ValueError, match=r"A is not symmetric: max \|A - A\^T\|"):
            TwoLevelSchwarz(A, D64, local_solver=solver)
        return
    M = TwoLevelSchwarz(A, D64, local_solver=solver)
    S = ((A + A.T) * 0.5).tocsr()
    np.testing.assert_array_equal(M.to_dense(), TwoLevelSchwarz(S, D64, local_solver=solver)
                                  .to_dense())
    ref = dense_reference(S, subdomains_1d(64, 4, 2, "element"), 63, "additive",
                          coarse_basis(D64).toarray())
    assert_close(M.to_dense(), ref)
    dense = M.to_dense()
    assert_close(dense, dense.T, rtol=1e-12)  # symmetric although A was not exactly


# -- a singular A given without kernel= ---------------------------------------------------------


def test_singular_matrix_without_kernel_is_named_before_the_coarse_space(monkeypatch):
    A = neumann_1d(40)  # a pure-Neumann Laplacian: A 1 = 0 by construction
    assert np.abs(A @ np.ones(40)).max() == 0.0
    d = Decomposition1D(40, 4, kind="dof")
    import ddops.precond.corrections as corrections

    built = []
    monkeypatch.setattr(corrections, "build_coarse_basis",
                        lambda *a, **k: built.append(1) or (_ for _ in ()).throw(AssertionError))
    for basis in ("nicolaides", "pou", "interface_hats"):
        with pytest.raises(ValueError, match=r"^A is singular; pass kernel=") as exc:
            TwoLevelSchwarz(A, d, basis)
        assert "annihilates the constant vector" in str(exc.value)
    assert not built  # refused before any coarse work
    monkeypatch.undo()
    # with kernel= it is the documented positive semidefinite case: no warning, no error
    M = TwoLevelSchwarz(A, d, "nicolaides", kernel=np.ones(40))
    assert M.coarse_stats["kernel_dropped"] == 1
    # an SPD matrix passes the test (its A 1 has the boundary rows)
    TwoLevelSchwarz(poisson_1d(41, "element"), d, "nicolaides")


def test_singular_matrix_found_through_the_null_space():
    # A = S L S with L the Neumann Laplacian and S = diag(s): ker A = S^{-1} 1, not the constants
    s = np.linspace(1.0, 3.0, 40)
    A = (sp.diags(s) @ neumann_1d(40) @ sp.diags(s)).tocsr()
    z = 1.0 / s
    assert np.linalg.norm(A @ z) <= 1e-14 * abs(A).sum(axis=0).max() * np.linalg.norm(z)
    assert np.linalg.norm(A @ np.ones(40)) > 1e-3
    d = Decomposition1D(40, 4, kind="dof")
    with pytest.raises(ValueError, match="annihilates column 1 of null_space"):
        TwoLevelSchwarz(A, d, "nicolaides", null_space=np.column_stack([np.ones(40), z]))


def test_one_level_on_a_singular_matrix_warns_at_the_callers_line():
    A = neumann_1d(40)
    d = Decomposition1D(40, 4, kind="dof")
    with pytest.warns(RuntimeWarning, match=r"A is singular: it annihilates the constant "
                      r"vector .*; pass kernel=") as record:
        line = sys._getframe().f_lineno + 1
        TwoLevelSchwarz(A, d, coarse=False)
    assert record[0].filename == __file__ and record[0].lineno == line


def test_the_no_coarse_function_warning_names_the_callers_file():
    # GenEO on 2 x 2 boxes of Poisson selects nothing (tests/dd/test_adaptive.py); called from
    # a frame that counts as the library's, the warning must name the first frame outside it
    # (a fixed stacklevel=2 named that library frame)
    import ddops

    A = ddops.poisson_2d(15)
    d = Decomposition.from_grid((15, 15), (2, 2))
    inside = os.path.join(os.path.dirname(ddops.__file__), "precond", "_caller.py")
    code = compile("M = TwoLevelSchwarz(A, d, 'geneo')", inside, "exec")
    scope = {"TwoLevelSchwarz": TwoLevelSchwarz, "A": A, "d": d}
    with pytest.warns(RuntimeWarning, match="selected no coarse function") as record:
        line = sys._getframe().f_lineno + 1
        exec(code, scope)
    assert record[0].filename == __file__ and record[0].lineno == line
    assert scope["M"].coarse_dim == 0


def test_a_nonsingular_high_contrast_matrix_is_not_called_singular():
    """Dirichlet rows in a soft layer, a stiff interior at contrast 1e8: the constants have a
    tiny normwise defect (||A 1|| / (||A||_1 ||1||) ~ 1e-9) but the boundary rows do not
    annihilate them, so the set-up goes on and CG converges (the matrix is nonsingular)."""
    n = 199  # unknowns; n + 1 elements, two soft ones at each end
    k = np.full(n + 1, 1e8)
    k[:2] = k[-2:] = 1.0
    A = sp.diags([-k[1:-1], k[:-1] + k[1:], -k[1:-1]], [-1, 0, 1], format="csr")
    ones = np.ones(n)
    assert np.linalg.norm(A @ ones) / (abs(A).sum(axis=0).max() * np.linalg.norm(ones)) < 1e-8
    M = TwoLevelSchwarz(A, Decomposition1D(n, 8, overlap=2, kind="dof"))
    b = np.random.default_rng(0).standard_normal(n)
    x, info = spla.cg(A, b, rtol=1e-10, M=M, maxiter=200)
    assert info == 0
    np.testing.assert_allclose(A @ x, b, rtol=0, atol=1e-8 * np.linalg.norm(b) * 1e8)
