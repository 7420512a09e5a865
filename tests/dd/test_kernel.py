"""Singular systems with a known kernel: pure-Neumann Laplacians and floating elastic bodies.

Checked against independent constructions: dense ranks and eigenvalues of the coarse
matrices and of the preconditioned operator, the true residual of CG, and the kernel
components of the results.
"""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import ddops
from ddops.dd.kernel import check_kernel, coarse_kernel_columns


def neumann_laplacian_2d(n):
    """The 5-point Laplacian with homogeneous Neumann conditions: kernel = constants."""
    T = sp.diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1]).tolil()
    T[0, 0] = T[-1, -1] = 1.0
    T = T.tocsr()
    return (sp.kron(T, sp.identity(n)) + sp.kron(sp.identity(n), T)).tocsr()


def cg_run(A, b, M):
    its = []
    x, info = spla.cg(A, b, rtol=1e-8, M=M, maxiter=400, callback=lambda xk: its.append(1))
    return x, info, len(its)


@pytest.fixture(scope="module")
def neumann():
    A = neumann_laplacian_2d(20)
    d = ddops.Decomposition.from_matrix(A, 6, 1)
    return A, d


def test_the_matrix_is_singular_and_the_message_says_a_not_phi(neumann):
    A, d = neumann
    assert np.abs(A @ np.ones(A.shape[0])).max() == 0.0
    with pytest.raises(ValueError) as exc:
        ddops.TwoLevelSchwarz(A, d, "gdsw")
    text = str(exc.value)
    assert "because A is singular" in text and "kernel=" in text
    assert "remove them" not in text  # not the advice for a rank-deficient Phi


@pytest.mark.parametrize("basis", ["nicolaides", "gdsw", "rgdsw", "agdsw", "geneo"])
@pytest.mark.parametrize("variant", ["additive", "hybrid"])
def test_cg_converges_on_consistent_right_hand_sides(neumann, basis, variant):
    A, d = neumann
    n = A.shape[0]
    M = ddops.TwoLevelSchwarz(A, d, basis, variant=variant, kernel=np.ones(n))
    b = np.random.default_rng(0).standard_normal(n)
    b -= b.mean()  # consistent: orthogonal to the constants
    x, info, its = cg_run(A, b, M)
    assert info == 0 and its <= 40, (basis, its)
    assert np.linalg.norm(b - A @ x) <= 1.1e-8 * np.linalg.norm(b)
    # from x0 = 0 every iterate lies in range(M) = the complement of the kernel
    assert abs(x.mean()) <= 1e-12 * np.abs(x).max()


def test_preconditioner_is_spd_on_the_range_and_annihilates_the_kernel(neumann):
    A, d = neumann
    n = A.shape[0]
    M = ddops.TwoLevelSchwarz(A, d, "gdsw", kernel=np.ones(n))
    Md = M.to_dense()
    np.testing.assert_allclose(Md, Md.T, atol=1e-12 * np.abs(Md).max())
    np.testing.assert_allclose(Md @ np.ones(n), 0.0, atol=1e-12 * np.abs(Md).max())
    # on range(A) = 1^perp: an orthonormal basis V of the complement
    V = np.linalg.qr(np.eye(n)[:, 1:] - 1.0 / n)[0]
    assert np.linalg.eigvalsh(V.T @ Md @ V).min() > 0
    assert M.coarse_stats["kernel_dropped"] == 1


def test_dropped_columns_keep_the_span_modulo_the_kernel(neumann):
    A, d = neumann
    n = A.shape[0]
    Z = np.ones((n, 1))
    for basis in ["nicolaides", "gdsw", "rgdsw"]:
        Phi = ddops.coarse_basis(d, basis, A=A)
        drop = coarse_kernel_columns(Phi, check_kernel(Z, A))
        assert drop.size == 1
        kept = np.delete(Phi.toarray(), drop, axis=1)
        full = Phi.toarray()
        # independent check: the Galerkin matrix of the kept columns is nonsingular, that of
        # all columns is not, and span(kept) + ker A = span(Phi) + ker A = span(Phi)
        assert np.linalg.eigvalsh(kept.T @ (A @ kept)).min() > 1e-10
        assert np.linalg.eigvalsh(full.T @ (A @ full)).min() < 1e-10
        r = np.linalg.matrix_rank
        assert r(np.hstack([kept, Z])) == r(np.hstack([full, Z])) == r(full)
        via = ddops.coarse_basis(d, basis, A=A, kernel=Z)
        np.testing.assert_array_equal(via.toarray(), kept)


def test_no_column_dropped_when_no_kernel_vector_lies_in_range_phi(neumann):
    A, d = neumann
    Phi = ddops.coarse_basis(d, "gdsw", A=A)
    Z = np.random.default_rng(2).standard_normal((A.shape[0], 1))  # not in range(Phi)
    assert coarse_kernel_columns(Phi, np.linalg.qr(Z)[0]).size == 0


def test_inconsistent_right_hand_side_warns_once_and_remove_kernel_fixes_it(neumann):
    A, d = neumann
    n = A.shape[0]
    M = ddops.TwoLevelSchwarz(A, d, "gdsw", kernel=np.ones(n))
    b = np.random.default_rng(1).standard_normal(n) + 0.5  # mean 0.5: inconsistent
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, info, _ = cg_run(A, b, M)
    relevant = [w for w in caught if "inconsistent" in str(w.message)]
    assert info != 0 and len(relevant) == 1
    assert "remove_kernel" in str(relevant[0].message)
    bc = M.remove_kernel(b)
    np.testing.assert_allclose(bc, b - b.mean(), atol=1e-13)
    M2 = ddops.TwoLevelSchwarz(A, d, "gdsw", kernel=np.ones(n))
    x, info, _ = cg_run(A, bc, M2)  # no warning: pytest turns RuntimeWarnings into errors
    assert info == 0


def test_floating_elastic_body_with_rigid_body_modes():
    fem = pytest.importorskip("ddops.problems.fem")
    pytest.importorskip("skfem")
    A, X = fem.fem_elasticity_2d(16, dirichlet=None)
    Z = ddops.rigid_body_modes(X)
    d = ddops.Decomposition.from_matrix(A, 8, 1, block_size=2)
    with pytest.raises(ValueError, match="because A is singular"):
        ddops.TwoLevelSchwarz(A, d, "gdsw", null_space=Z)
    M = ddops.TwoLevelSchwarz(A, d, "gdsw", kernel=Z)  # the kernel is also the null space
    assert M.coarse_stats["kernel_dropped"] == 3
    Mn = ddops.TwoLevelSchwarz(A, d, "gdsw", null_space=Z, kernel=Z)
    assert Mn.coarse_dim == M.coarse_dim
    b = M.remove_kernel(np.random.default_rng(0).standard_normal(A.shape[0]))
    x, info, its = cg_run(A, b, M)
    assert info == 0 and its <= 60
    assert np.linalg.norm(b - A @ x) <= 1.1e-8 * np.linalg.norm(b)
    np.testing.assert_allclose(Z.T @ x, 0.0, atol=1e-10 * np.linalg.norm(x))


def test_a_subdomain_holding_a_whole_kernel_vector_is_named(neumann):
    A, _ = neumann
    one = ddops.Decomposition.from_matrix(A, 1, 0)
    with pytest.raises(ValueError, match="subdomain 0.*whole support of a kernel vector"):
        ddops.TwoLevelSchwarz(A, one, coarse=False, kernel=np.ones(A.shape[0]),
                              local_solver="dense")


def test_bad_kernels_are_refused_by_name(neumann):
    A, d = neumann
    n = A.shape[0]
    with pytest.raises(ValueError, match=r"kernel: column 0 is not in the kernel of A"):
        ddops.TwoLevelSchwarz(A, d, "gdsw", kernel=np.arange(n, dtype=float))
    with pytest.raises(ValueError, match="linearly dependent"):
        ddops.TwoLevelSchwarz(A, d, "gdsw", kernel=np.ones((n, 2)))
    with pytest.raises(ValueError, match=r"kernel must have shape"):
        ddops.TwoLevelSchwarz(A, d, "gdsw", kernel=np.ones(n - 1))
    with pytest.raises(ValueError, match="kernel contains NaN"):
        ddops.TwoLevelSchwarz(A, d, "gdsw", kernel=np.full(n, np.nan))
    with pytest.raises(TypeError, match="kernel must be a real array"):
        ddops.TwoLevelSchwarz(A, d, "gdsw", kernel=np.ones(n) * 1j)


def test_the_kernel_and_consistency_tolerances_are_the_documented_ones(neumann):
    from ddops.dd import kernel

    A, d = neumann
    n = A.shape[0]
    # the documented values (the checks below are built from them)
    assert (kernel.KERNEL_RTOL, kernel.KERNEL_RANGE_RTOL, kernel.KERNEL_RHS_RTOL) == \
        (1e-8, 1e-6, 1e-6)
    scale = float(abs(A).sum(axis=0).max())
    e = np.zeros(n)
    e[0] = 1.0
    z = np.ones(n)
    Ae = np.linalg.norm(A @ e)
    # a kernel vector perturbed so that ||A z|| / (||A||_1 ||z||) is 0.5x or 2x KERNEL_RTOL
    for factor, ok in ((0.5, True), (2.0, False)):
        eps = factor * kernel.KERNEL_RTOL * scale * np.linalg.norm(z) / Ae
        if ok:
            check_kernel(z + eps * e, A)
        else:
            with pytest.raises(ValueError, match="not in the kernel"):
                check_kernel(z + eps * e, A)
    # a residual whose kernel part is just below / above KERNEL_RHS_RTOL of its norm
    q = np.ones(n) / np.sqrt(n)
    r = np.random.default_rng(3).standard_normal(n)
    r -= q * (q @ r)
    r /= np.linalg.norm(r)
    for factor, warns in ((0.5, False), (2.0, True)):
        M = ddops.TwoLevelSchwarz(A, d, "gdsw", kernel=np.ones(n))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            M.matvec(r + factor * kernel.KERNEL_RHS_RTOL * q)
        assert any("inconsistent" in str(w.message) for w in caught) == warns, factor


def test_a_kernel_vector_counts_as_in_range_phi_up_to_kernel_range_rtol():
    """``coarse_kernel_columns`` drops a column for a unit kernel vector at distance
    0.5x KERNEL_RANGE_RTOL from range(Phi), and none at 2x."""
    from ddops.dd import kernel

    rng = np.random.default_rng(4)
    n, n0 = 40, 5
    Phi = sp.csr_matrix(rng.standard_normal((n, n0)))
    Qphi, _ = np.linalg.qr(Phi.toarray())
    w = rng.standard_normal(n)
    w -= Qphi @ (Qphi.T @ w)  # orthogonal to range(Phi)
    w /= np.linalg.norm(w)
    u = Qphi @ rng.standard_normal(n0)
    u /= np.linalg.norm(u)
    for factor, dropped in ((0.5, 1), (2.0, 0)):
        eps = factor * kernel.KERNEL_RANGE_RTOL
        q = (np.sqrt(1 - eps**2) * u + eps * w)[:, None]  # unit, distance eps from range(Phi)
        assert kernel.coarse_kernel_columns(Phi, q).size == dropped, factor


def _basis_with_condition(rng, n, n0, cond):
    """A dense ``n x n0`` basis with singular values from 1 down to ``1 / cond``, and ``U``."""
    U, _ = np.linalg.qr(rng.standard_normal((n, n0)))
    W, _ = np.linalg.qr(rng.standard_normal((n0, n0)))
    return U @ np.diag(np.logspace(0, -np.log10(cond), n0)) @ W.T, U


@pytest.mark.parametrize("cond", [1e6, 1e7])
def test_a_kernel_vector_in_range_of_an_ill_conditioned_phi_is_found(cond):
    """The least-squares fit does not square the condition number of Phi: at cond(Phi) =
    1e6-1e7 (cond(Phi^T Phi) = 1e12-1e14) a unit vector of range(Phi) still fits to far below
    KERNEL_RANGE_RTOL, and exactly one column is dropped."""
    rng = np.random.default_rng(0)
    Phi, U = _basis_with_condition(rng, 60, 8, cond)
    q = U @ rng.standard_normal(8)
    q /= np.linalg.norm(q)
    # independent: q lies in range(Phi) to rounding (dense SVD)
    assert np.linalg.norm(q - U @ (U.T @ q)) < 1e-14
    drop = coarse_kernel_columns(sp.csr_matrix(Phi), q[:, None])
    assert drop.size == 1
    kept = np.delete(Phi, drop, axis=1)
    # without the dropped column q is no longer in the span (dense least squares)
    c = np.linalg.lstsq(kept, q, rcond=None)[0]
    assert np.linalg.norm(q - kept @ c) > 1e-3


def test_a_rank_deficient_phi_still_gets_its_coarse_kernel():
    """A repeated column makes Phi^T Phi exactly singular: the kernel column is still found
    (it used to come back empty, silently)."""
    rng = np.random.default_rng(1)
    U, _ = np.linalg.qr(rng.standard_normal((50, 3)))
    Phi = sp.csr_matrix(np.hstack([U, U[:, :1]]))
    q = U @ np.array([0.2, 1.0, 0.1])
    q /= np.linalg.norm(q)
    np.testing.assert_array_equal(coarse_kernel_columns(Phi, q[:, None]), [1])


def test_the_grounding_drops_the_column_the_kernel_leans_on_most():
    """Pivoted QR of the coarse kernel: with q = Phi c, the dropped column is the one of
    the largest |c_j| (unit columns), here column 2; with two kernel vectors, the columns of
    the two dominant coefficients."""
    rng = np.random.default_rng(2)
    Phi = rng.standard_normal((40, 5))
    Phi /= np.linalg.norm(Phi, axis=0)
    c = np.array([0.1, -0.2, 3.0, 0.3, 0.1])
    q = Phi @ c
    q /= np.linalg.norm(q)
    np.testing.assert_array_equal(coarse_kernel_columns(sp.csr_matrix(Phi), q[:, None]), [2])
    c2 = np.array([2.0, 0.1, 0.0, 0.2, 0.1])  # a second kernel vector leaning on column 0
    Z = np.stack([Phi @ c, Phi @ c2], axis=1)
    Q, _ = np.linalg.qr(Z)
    np.testing.assert_array_equal(coarse_kernel_columns(sp.csr_matrix(Phi), Q), [0, 2])
    # the rest spans range(Phi) modulo range(Q): dense ranks
    kept = np.delete(Phi, [0, 2], axis=1)
    r = np.linalg.matrix_rank
    assert r(np.hstack([kept, Q])) == r(Phi) == 5


def test_the_kernel_check_scales_by_the_one_norm_of_a():
    """``||A z|| / (||A||_1 ||z||)`` against KERNEL_RTOL, with ||A||_1 the largest absolute
    column sum: on a weighted graph Laplacian (kernel: constants) whose 1-norm differs
    from its 2-norm, max entry and Frobenius norm by more than 25 %, a defect of 0.9x
    passes and 1.1x is refused."""
    from ddops.dd import kernel

    rng = np.random.default_rng(3)
    n = 30
    W = np.triu(rng.uniform(0.1, 5.0, (n, n)) * (rng.random((n, n)) < 0.2), 1)
    W[np.arange(n - 1), np.arange(1, n)] += 1.0  # a path: connected
    W = W + W.T
    A = sp.csr_matrix(np.diag(W.sum(axis=1)) - W)
    Ad = A.toarray()
    one = np.abs(Ad).sum(axis=0).max()
    for other in (np.linalg.norm(Ad, 2), np.abs(Ad).max(), np.linalg.norm(Ad)):
        assert not 0.8 < other / one < 1.25
    z = np.ones(n)
    e = np.zeros(n)
    e[0] = 1.0
    Ae = np.linalg.norm(Ad @ e)
    for factor, ok in ((0.9, True), (1.1, False)):
        eps = factor * kernel.KERNEL_RTOL * one * np.linalg.norm(z) / Ae
        v = z + eps * e
        # the defect is measured for the unit vector: ||A v|| / (||A||_1 ||v||)
        assert np.linalg.norm(Ad @ v) / (one * np.linalg.norm(v)) == pytest.approx(
            factor * kernel.KERNEL_RTOL, rel=1e-6)
        if ok:
            check_kernel(v, A)
        else:
            with pytest.raises(ValueError, match="not in the kernel"):
                check_kernel(v, A)


def test_an_unfinished_least_squares_fit_warns(monkeypatch):
    """Never silent: a fit that stops at LSMR's iteration limit says so."""
    from ddops.dd import kernel

    real = kernel.spla.lsmr
    monkeypatch.setattr(kernel.spla, "lsmr", lambda *a, **k: real(*a, **{**k, "maxiter": 1}))
    rng = np.random.default_rng(5)
    Phi, U = _basis_with_condition(rng, 40, 6, 1e4)
    with pytest.warns(RuntimeWarning, match="stopped at 1 LSMR iterations"):
        coarse_kernel_columns(sp.csr_matrix(Phi), U[:, :1])


class _ThreadRanks:
    """Processes simulated by threads: ``allreduce(values, op)`` sums (or takes the maximum)
    over the threads at a barrier, the way an ``MPI_Allreduce`` does over ranks."""

    def __init__(self, size):
        import threading

        self.size, self.slots = size, [None] * size
        self.barrier = threading.Barrier(size)

    def allreduce_of(self, rank):
        def allreduce(values, op):
            self.slots[rank] = np.array(values, dtype=np.float64)
            self.barrier.wait()
            stack = np.stack(self.slots)
            out = {"sum": stack.sum, "max": stack.max, "min": stack.min}[op](axis=0)
            self.barrier.wait()  # nobody overwrites a slot before every thread has read it
            return out

        return allreduce

    def run(self, work):
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(self.size) as pool:
            return list(pool.map(work, range(self.size)))


@pytest.mark.parametrize("basis", ["nicolaides", "gdsw", "rgdsw"])
def test_distributed_grounding_over_row_blocks_keeps_the_span_modulo_the_kernel(neumann, basis):
    """``distributed_kernel_columns`` on three row blocks of Phi and Q (threads as ranks,
    uneven blocks, one without a nonzero of some columns): every block gets the same
    columns, as many as the serial function drops, and they ground the coarse problem (the
    independent dense checks of the serial test)."""
    from ddops.dd.kernel import distributed_kernel_columns

    A, d = neumann
    n = A.shape[0]
    Z = np.ones((n, 1))
    Q = check_kernel(Z, A)
    Phi = ddops.coarse_basis(d, basis, A=A)
    cuts = np.array([0, 37, 250, n])
    ranks = _ThreadRanks(3)
    drops = ranks.run(lambda r: distributed_kernel_columns(
        Phi[cuts[r]:cuts[r + 1]], Q[cuts[r]:cuts[r + 1]], ranks.allreduce_of(r)))
    assert all(np.array_equal(drop, drops[0]) for drop in drops)
    assert drops[0].size == coarse_kernel_columns(Phi, Q).size == 1
    full = Phi.toarray()
    kept = np.delete(full, drops[0], axis=1)
    assert np.linalg.eigvalsh(kept.T @ (A @ kept)).min() > 1e-10
    r = np.linalg.matrix_rank
    assert r(np.hstack([kept, Z])) == r(full)


@pytest.mark.parametrize("cond", [1e6, 1e7])
def test_distributed_grounding_finds_the_kernel_of_an_ill_conditioned_phi(cond):
    """The block LSQR of the distributed grounding does not square the condition number
    either: the same ill-conditioned bases as the serial test, on two row blocks."""
    from ddops.dd.kernel import distributed_kernel_columns

    rng = np.random.default_rng(0)
    Phi, U = _basis_with_condition(rng, 60, 8, cond)
    q = U @ rng.standard_normal(8)
    q = (q / np.linalg.norm(q))[:, None]
    ranks = _ThreadRanks(2)
    drops = ranks.run(lambda r: distributed_kernel_columns(
        sp.csr_matrix(Phi[r * 30:(r + 1) * 30]), q[r * 30:(r + 1) * 30],
        ranks.allreduce_of(r)))
    assert np.array_equal(drops[0], drops[1]) and drops[0].size == 1
    kept = np.delete(Phi, drops[0], axis=1)
    c = np.linalg.lstsq(kept, q[:, 0], rcond=None)[0]
    assert np.linalg.norm(q[:, 0] - kept @ c) > 1e-3
    # a vector off range(Phi) (twice the tolerance away) drops nothing
    w = rng.standard_normal(60)
    w -= U @ (U.T @ w)
    far = np.sqrt(1 - 4e-12) * q[:, 0] + 2e-6 * w / np.linalg.norm(w)
    ranks = _ThreadRanks(2)
    drops = ranks.run(lambda r: distributed_kernel_columns(
        sp.csr_matrix(Phi[r * 30:(r + 1) * 30]), far[r * 30:(r + 1) * 30, None],
        ranks.allreduce_of(r)))
    assert drops[0].size == drops[1].size == 0


def test_the_kernel_check_over_row_blocks_is_the_serial_check(neumann):
    """``check_kernel`` with ``allreduce=`` on row blocks: the same ``Q`` and the same
    refusal (with the same measured defect) as on the whole matrix."""
    A, _ = neumann
    n = A.shape[0]
    cuts = np.array([0, 150, n])
    ranks = _ThreadRanks(2)
    Qs = ranks.run(lambda r: check_kernel(np.ones(n), A[cuts[r]:cuts[r + 1]],
                                          allreduce=ranks.allreduce_of(r)))
    np.testing.assert_array_equal(Qs[0], check_kernel(np.ones(n), A))
    bad = np.ones(n)
    bad[-1] = 1.0 + 1e-4
    with pytest.raises(ValueError) as serial:
        check_kernel(bad, A)
    ranks = _ThreadRanks(2)

    def attempt(r):
        try:
            check_kernel(bad, A[cuts[r]:cuts[r + 1]], allreduce=ranks.allreduce_of(r))
        except ValueError as exc:
            return str(exc)

    assert ranks.run(attempt) == [str(serial.value)] * 2


@pytest.mark.parametrize("drop", [False, True])
@pytest.mark.parametrize("basis", ["rgdsw", "geneo"])
def test_a_grounded_basis_reports_no_galerkin_matrix_of_dropped_columns(basis, drop,
                                                                        monkeypatch):
    """``coarse_basis(..., kernel=, return_info=True)`` grounds the basis.  The dependence
    checks of RGDSW and GenEO already drop the kernel's directions (zero energy), so
    grounding finds nothing and the builder's ``Phi^T A Phi`` is that of the returned
    basis (checked densely); where grounding drops a column (forced here) it would describe
    the columns before that, and is not reported."""
    from ddops.dd import coarse, kernel

    A, X = ddops.problems.fem_elasticity_2d(9, dirichlet=None)
    Z = ddops.rigid_body_modes(X)
    d = ddops.Decomposition.from_matrix(A, 4, block_size=2)
    if drop:
        def drop_last(Phi, Q):
            return sp.csr_matrix(Phi[:, :-1]), 1
        monkeypatch.setattr(kernel, "ground_basis", drop_last)
    Phi, info = coarse.coarse_basis(d, basis, A=A, kernel=Z, return_info=True)
    if drop:
        assert info.coarse_matrix is None
    else:
        P = Phi.toarray()
        A0 = P.T @ (A.toarray() @ P)
        assert np.abs(info.coarse_matrix.toarray() - A0).max() <= 1e-10 * np.abs(A0).max()
