"""Learned coarse enrichment: objective, gradient, structure, SPD preconditioner, training."""

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import ddops
from ddops.precond.learned_coarse import (
    deflation_objective,
    enrichment,
    learned_coarse_basis,
    near_kernel_vectors,
)
from ddops.problems import diffusion_2d, high_contrast_channels

N_GRID = 15


@pytest.fixture(scope="module")
def problem():
    A = diffusion_2d(high_contrast_channels(N_GRID, 1e3, margin=1))
    d = ddops.Decomposition.from_grid((N_GRID, N_GRID), (2, 2), overlap=1)
    Phi_b = ddops.coarse_basis(d, "gdsw", A=A)
    return A, d, Phi_b


def _dense_W(d, Q):
    """``[R_1^T D_1^{1/2} Q_1, ...]`` from the subdomain index lists, one block at a time.

    ``D_i`` is taken as the multiplicity partition of unity, computed here from the
    subdomains themselves.
    """
    n, k = d.num_dofs, Q.shape[2]
    count = np.zeros(n)
    for s in d.subdomains:
        count[s] += 1
    W = np.zeros((n, d.num_subdomains * k))
    for i, s in enumerate(d.subdomains):
        W[s, i * k:(i + 1) * k] = np.sqrt(1.0 / count[s])[:, None] * Q[i, :len(s)]
    return W


def _random_Q(d, k, seed=0):
    return np.random.default_rng(seed).standard_normal((d.num_subdomains, d.max_size, k))


def test_enrichment_matches_dense_construction(problem):
    _, d, _ = problem
    Q = _random_Q(d, 2)
    np.testing.assert_allclose(enrichment(d, Q).toarray(), _dense_W(d, Q), rtol=0,
                               atol=1e-14)


def test_value_matches_dense_projection(problem):
    A, d, Phi_b = problem
    Q = _random_Q(d, 2, seed=1)
    V = np.random.default_rng(2).standard_normal((d.num_dofs, 5))
    f, _ = deflation_objective(A, d, Phi_b, Q, V, gradient=False)
    Ad = A.toarray()
    Phi = np.hstack([Phi_b.toarray(), _dense_W(d, Q)])
    P = Phi @ np.linalg.solve(Phi.T @ Ad @ Phi, Phi.T @ Ad)
    E = V - P @ V
    expected = sum((E[:, j] @ Ad @ E[:, j]) / (V[:, j] @ Ad @ V[:, j]) for j in range(5))
    assert f == pytest.approx(expected, rel=1e-9)


def test_gradient_matches_central_differences(problem):
    A, d, Phi_b = problem
    Q = _random_Q(d, 2, seed=3)
    V = np.random.default_rng(4).standard_normal((d.num_dofs, 6))
    _, grad = deflation_objective(A, d, Phi_b, Q, V)
    rng = np.random.default_rng(5)
    h = 1e-5
    for _ in range(3):
        D = rng.standard_normal(Q.shape)
        fp, _ = deflation_objective(A, d, Phi_b, Q + h * D, V, gradient=False)
        fm, _ = deflation_objective(A, d, Phi_b, Q - h * D, V, gradient=False)
        fd = (fp - fm) / (2 * h)
        assert abs(np.sum(grad * D) - fd) <= 1e-6 * abs(fd)
    # Padding rows carry no parameter.
    real = np.arange(d.max_size)[None, :] < np.asarray(d.sizes)[:, None]
    assert np.all(grad[~real] == 0)


def test_basis_contains_base_and_has_subdomain_support(problem):
    A, d, Phi_b = problem
    Phi, info = learned_coarse_basis(A, d, extra=2, steps=3, num_vectors=8,
                                     near_kernel_steps=4, return_info=True)
    nb = Phi_b.shape[1]
    assert info.base_dim == nb
    assert (Phi[:, :nb] != Phi_b).nnz == 0
    W = Phi[:, nb:].toarray()
    cols = info.kept[info.kept >= nb] - nb
    assert W.shape[1] == cols.size > 0
    for c, col in zip(cols, W.T):
        inside = np.zeros(d.num_dofs, dtype=bool)
        inside[d.subdomains[c // 2]] = True
        assert np.all(col[~inside] == 0)
        assert np.any(col[inside] != 0)
    np.testing.assert_allclose(W, _dense_W(d, info.Q)[:, cols], atol=1e-14)


@pytest.mark.parametrize("seed", [0, 1])
def test_two_level_schwarz_is_spd_for_any_Q(problem, seed):
    A, d, _ = problem
    Q = _random_Q(d, 2, seed=seed)
    Phi = learned_coarse_basis(A, d, extra=2, steps=0, num_vectors=4, near_kernel_steps=2,
                               init=Q)
    M = ddops.TwoLevelSchwarz(A, d, coarse_basis=Phi)
    Md = M @ np.eye(d.num_dofs)
    np.testing.assert_allclose(Md, Md.T, atol=1e-10 * np.abs(Md).max())
    assert np.linalg.eigvalsh(0.5 * (Md + Md.T)).min() > 0
    G = (Phi.T @ A @ Phi).toarray()
    assert np.linalg.eigvalsh(G).min() > 0


def test_dependent_columns_are_dropped(problem):
    A, d, Phi_b = problem
    Q = _random_Q(d, 2)
    Q[:, :, 1] = 3.0 * Q[:, :, 0]  # second function of every subdomain repeats the first
    Phi, info = learned_coarse_basis(A, d, extra=2, steps=0, num_vectors=4,
                                     near_kernel_steps=2, init=Q, return_info=True)
    assert Phi.shape[1] == Phi_b.shape[1] + d.num_subdomains
    assert np.linalg.eigvalsh((Phi.T @ A @ Phi).toarray()).min() > 0


def test_training_lowers_objective(problem):
    A, d, _ = problem
    _, info = learned_coarse_basis(A, d, extra=1, steps=30, num_vectors=12,
                                   initialisation="random", near_kernel_steps=6,
                                   return_info=True)
    assert len(info.objective) == 31
    assert info.objective[-1] < 0.97 * info.objective[0]
    assert min(info.objective) < info.objective[0]


def test_deterministic_and_warm_start_reproduces(problem):
    A, d, _ = problem
    kw = dict(extra=1, num_vectors=8, near_kernel_steps=4, seed=3)
    Phi1, info1 = learned_coarse_basis(A, d, steps=5, return_info=True, **kw)
    Phi2 = learned_coarse_basis(A, d, steps=5, **kw)
    assert (Phi1 != Phi2).nnz == 0
    # Zero further steps from the trained Q give the same basis and objective.
    Phi3, info3 = learned_coarse_basis(A, d, steps=0, init=info1.Q, return_info=True, **kw)
    np.testing.assert_allclose(Phi3.toarray(), Phi1.toarray(), rtol=0, atol=1e-13)
    assert info3.objective[0] == pytest.approx(info1.objective[-1], rel=1e-10)


def test_near_kernel_vectors_find_small_eigenvalues():
    # Two boxes of 16 x 16 cut floating channels: GDSW leaves two eigenvalues ~3e-5.
    A = diffusion_2d(high_contrast_channels(31, 1e6, margin=1))
    d = ddops.Decomposition.from_grid((31, 31), (2, 2), overlap=1)
    M = ddops.TwoLevelSchwarz(A, d, coarse_basis="gdsw")
    lam = np.sort(np.linalg.eigvals(M @ A.toarray()).real)
    assert lam[1] < 1e-3 < lam[2]
    V, theta = near_kernel_vectors(A, M, 4, steps=30)
    # Ritz values are upper bounds; the filtered block reaches the two small eigenvalues.
    assert np.all(lam[:2] * (1 - 1e-6) <= theta[:2])
    np.testing.assert_allclose(theta[:2], lam[:2], rtol=1e-2)
    Ad = A.toarray()
    np.testing.assert_allclose(V.T @ Ad @ V, np.eye(4), atol=1e-8)


@pytest.mark.parametrize("kwargs, error, name", [
    (dict(extra=0), ValueError, "extra"),
    (dict(extra=1.5), TypeError, "extra"),
    (dict(base="bogus"), ValueError, "base"),
    (dict(base=3), ValueError, "base"),
    (dict(steps=-1), ValueError, "steps"),
    (dict(lr=0.0), ValueError, "lr"),
    (dict(near_kernel="lanczos"), ValueError, "near_kernel"),
    (dict(initialisation="zeros"), ValueError, "initialisation"),
    (dict(init=np.zeros((2, 3, 1))), ValueError, "init"),
    (dict(extra=2, init=np.zeros((4, 80, 1))), ValueError, "init"),
    (dict(near_kernel_start=np.zeros((5, 2))), ValueError, "near_kernel_start"),
    (dict(return_info="yes"), TypeError, "return_info"),
])
def test_bad_arguments_name_the_argument(problem, kwargs, error, name):
    A, d, _ = problem
    with pytest.raises(error, match=name):
        learned_coarse_basis(A, d, **kwargs)


def test_bad_matrix_and_shapes(problem):
    A, d, Phi_b = problem
    with pytest.raises(TypeError, match="A must be a sparse matrix"):  # the matrix contract
        learned_coarse_basis(spla.aslinearoperator(A), d)
    with pytest.raises(ValueError, match="A"):
        learned_coarse_basis(sp.identity(4, format="csr"), d)
    with pytest.raises(TypeError, match="d"):
        learned_coarse_basis(A, "boxes")
    Q = _random_Q(d, 1)
    with pytest.raises(ValueError, match="Q"):
        deflation_objective(A, d, Phi_b, Q[:, :5], np.ones((d.num_dofs, 1)))
    with pytest.raises(ValueError, match="V"):
        deflation_objective(A, d, Phi_b, Q, np.ones((3, 1)))
    with pytest.raises(ValueError, match="Phi_base"):
        deflation_objective(A, d, Phi_b[:5], Q, np.ones((d.num_dofs, 1)))


def test_deflation_basis_adds_the_lowest_eigenvectors_of_the_preconditioned_operator(problem):
    from ddops.precond.learned_coarse import DEFLATION_MAX_UNKNOWNS, deflation_basis

    A, d, Phi_b = problem
    count = 3
    P = deflation_basis(A, d, count)
    np.testing.assert_array_equal(P[:, :Phi_b.shape[1]].toarray(), Phi_b.toarray())
    U = P[:, Phi_b.shape[1]:].toarray()
    assert U.shape[1] == count
    # independent: the eigenvalues of M_gdsw A from a dense non-symmetric eigensolver
    MA = ddops.TwoLevelSchwarz(A, d, Phi_b).to_dense() @ A.toarray()
    lam = np.sort(np.linalg.eigvals(MA).real)
    for j in range(count):
        u = U[:, j]
        rayleigh = u @ (A @ (MA @ u)) / (u @ (A @ u))  # M A u = lambda u, A-inner product
        np.testing.assert_allclose(MA @ u, rayleigh * u, atol=1e-8 * np.abs(u).max())
        assert rayleigh <= lam[count - 1] * (1 + 1e-8)
    # the largest problems are refused before any dense work
    big = ddops.poisson_2d(65)
    with pytest.raises(ValueError, match=f"limited to {DEFLATION_MAX_UNKNOWNS} unknowns"):
        deflation_basis(big, ddops.Decomposition.from_grid((65, 65), (2, 2)), 2)


def test_the_learned_basis_is_accepted_unchanged_by_every_consumer(problem):
    """TwoLevelSchwarz, SchwarzOperator and the distributed preconditioner (one rank here;
    the MPI tests cover user bases on several ranks) take the returned matrix as it is."""
    pytest.importorskip("mpi4py")
    from ddops.distributed import DistributedLayout, DistributedTwoLevelSchwarz

    A, d, _ = problem
    Phi = learned_coarse_basis(A, d, extra=1)
    M = ddops.TwoLevelSchwarz(A, d, coarse_basis=Phi)
    assert M.coarse_dim == Phi.shape[1]
    layout = DistributedLayout(d)
    P = DistributedTwoLevelSchwarz(layout, A, coarse_basis=Phi)
    x = np.random.default_rng(0).standard_normal(A.shape[0])
    np.testing.assert_allclose(P.matvec(layout.scatter(x)), M.matvec(x)[layout.owned],
                               rtol=1e-12, atol=1e-14)
    op = ddops.SchwarzOperator(d, coarse_basis=Phi, seed=0)
    np.testing.assert_array_equal(op.coarse_matrix.toarray(), Phi.toarray())


def test_pod_start_lr_scale_and_vector_count_are_the_documented_ones(problem):
    """Defaults and scalings of the docstring, against dense constructions:

    * ``num_vectors`` defaults to ``2 N k`` near-kernel vectors;
    * with ``steps=0`` each ``Q_i`` spans the ``k`` leading left singular vectors of
      ``D_i^{1/2} R_i (I - P_base) V`` (``P_base`` the A-orthogonal projector on the base);
    * ``lr`` is relative to the RMS entry of the initial ``Q``: Adam's first step moves every
      entry with a nonzero gradient by ``lr * RMS(Q_0)``.
    """
    import scipy.linalg as sla

    A, d, Phi_b = problem
    k = 1
    _, info = learned_coarse_basis(A, d, extra=k, return_info=True)
    V = info.near_kernel_vectors
    assert V.shape == (d.num_dofs, 2 * d.num_subdomains * k)
    Ad, P = A.toarray(), Phi_b.toarray()
    E0 = V - P @ np.linalg.solve(P.T @ Ad @ P, P.T @ Ad @ V)
    count = np.zeros(d.num_dofs)
    for s in d.subdomains:
        count[s] += 1
    for i, s in enumerate(d.subdomains):
        U, sv, _ = np.linalg.svd(np.sqrt(1.0 / count[s])[:, None] * E0[s], full_matrices=False)
        assert sv[k - 1] > 1.01 * sv[k]  # a well-defined leading subspace
        angles = sla.subspace_angles(info.Q[i, :len(s)], U[:, :k])
        assert angles.max() < 1e-6, (i, angles)
    lr = 0.05
    _, one = learned_coarse_basis(A, d, extra=k, steps=1, lr=lr, return_info=True)
    Q0 = info.Q
    mask = np.zeros_like(Q0, dtype=bool)
    for i, s in enumerate(d.subdomains):
        mask[i, :len(s)] = True
    rms = np.sqrt(np.mean(Q0[mask] ** 2))
    step = np.abs(one.Q - Q0)
    np.testing.assert_allclose(step.max(), lr * rms, rtol=1e-5)
    assert np.all(step[~mask] == 0.0)


def test_near_kernel_vectors_by_richardson_reach_the_small_eigenvalues():
    A = diffusion_2d(high_contrast_channels(31, 1e6, margin=1))
    d = ddops.Decomposition.from_grid((31, 31), (2, 2), overlap=1)
    M = ddops.TwoLevelSchwarz(A, d, coarse_basis="gdsw")
    lam = np.sort(np.linalg.eigvals(M @ A.toarray()).real)
    # omega = 1/5, the colouring bound (4 boxes + coarse), against lambda_max = 4.45
    V, theta = near_kernel_vectors(A, M, 4, method="richardson", steps=80)
    assert np.all(lam[:2] * (1 - 1e-6) <= theta[:2])  # Ritz values: upper bounds
    np.testing.assert_allclose(theta[:2], lam[:2], rtol=1e-2)
    np.testing.assert_allclose(V.T @ A.toarray() @ V, np.eye(4), atol=1e-8)


# -- the Gram ridge and the largest eigenvalue of the filter -------------------------------------

def test_singular_gram_solve_uses_the_documented_relative_ridge():
    from ddops.precond import learned_coarse

    # G = D^{1/2} [[1, 1], [1, 1]] D^{1/2} is singular: Cholesky fails and the solve is
    # (G + 1e-12 diag(G)) x = B.  For B = D^{1/2} (1, -1), along the null direction, the
    # closed form is x = D^{-1/2} (1, -1) / 1e-12; an absolute ridge 1e-12 I, or another
    # value, gives another x.
    diag = np.array([4.0, 100.0])
    G = np.sqrt(np.outer(diag, diag))
    B = np.sqrt(diag) * np.array([1.0, -1.0])
    x = learned_coarse._spd_solve(G, B[:, None])[:, 0]
    np.testing.assert_allclose(x * 1e-12, np.array([1.0, -1.0]) / np.sqrt(diag), rtol=1e-3)
    assert learned_coarse.RIDGE == 1e-12  # the value the docstrings state


def _old_power_estimate(A, M, x, iterations=12):
    """1.1 times the power-iteration quotient from ``x``: the former ``lambda_max``."""
    for _ in range(iterations):
        Ax = A @ x
        y = M @ Ax
        lam = (y @ (A @ y)) / (y @ Ax)
        x = y / np.linalg.norm(y)
    return 1.1 * lam


def test_eigenvalue_bound_holds_where_power_iteration_falls_short():
    from ddops.precond.learned_coarse import _schwarz_eigenvalue_bound

    # Diagonal A: each P_i is the coordinate projection onto subdomain i, so M A (one level)
    # is the diagonal of multiplicities: 9 on every unknown and 10 on one.  A random start
    # barely sees that unknown and the gap is 10%, so 12 power steps stay near 9.
    n = 600
    A = sp.diags(np.linspace(1.0, 2.0, n), format="csr")
    d = ddops.Decomposition([np.arange(n)] * 9 + [np.array([n // 2])], n)
    M = ddops.TwoLevelSchwarz(A, d, coarse_basis=None, local_solver="sparse")
    lam_max = np.linalg.eigvals(M.to_dense() @ A.toarray()).real.max()
    np.testing.assert_allclose(lam_max, 10.0, rtol=1e-12)
    x = np.random.default_rng(0).standard_normal(n)
    assert _old_power_estimate(A, M, x) < lam_max
    bound = _schwarz_eigenvalue_bound(A, M)
    assert bound >= lam_max * (1 - 1e-12)


@pytest.mark.parametrize("parts, coarse, colours", [
    ((2, 2), "gdsw", 4), ((3, 3), None, 4), ((3, 3), "gdsw", 4), ((1, 4), "gdsw", 2)])
def test_eigenvalue_bound_is_the_colour_count_and_bounds_the_spectrum(parts, coarse, colours):
    from ddops.precond.learned_coarse import _schwarz_eigenvalue_bound

    A = diffusion_2d(high_contrast_channels(N_GRID, 1e3, margin=1))
    d = ddops.Decomposition.from_grid((N_GRID, N_GRID), parts, overlap=1)
    M = ddops.TwoLevelSchwarz(A, d, coarse_basis=coarse)
    lam_max = np.linalg.eigvals(M.to_dense() @ A.toarray()).real.max()
    bound = _schwarz_eigenvalue_bound(A, M)
    # Boxes touching at a corner are coupled: 4 colours in 2D, 2 along a strip; +1 coarse.
    assert bound == colours + (coarse is not None)
    assert lam_max <= bound


@pytest.mark.parametrize("kwargs", [dict(variant="symmetric_restricted"), dict(variant="hybrid"),
                                    dict(local_solver="amg")])
def test_no_eigenvalue_bound_for_other_preconditioners(problem, kwargs):
    from ddops.precond.learned_coarse import _schwarz_eigenvalue_bound

    A, d, Phi_b = problem
    M = ddops.TwoLevelSchwarz(A, d, coarse_basis=Phi_b, **kwargs)
    assert _schwarz_eigenvalue_bound(sp.csr_matrix(A), M) is None


@pytest.mark.parametrize("make, ordered_rounds", [
    (lambda A: ddops.Decomposition.from_matrix(A, 12), 64),
    (lambda A: ddops.Decomposition.from_grid((12, 12), (4, 3), overlap=2), 64),
    (lambda A: ddops.Decomposition.from_grid((12, 12), (6, 6), overlap=1), 3)])  # random phase
def test_subdomain_colouring_separates_coupled_subdomains(make, ordered_rounds):
    from ddops.precond.learned_coarse import _subdomain_colours

    A = ddops.poisson_2d(12).tocsr()
    d = make(A)
    colour = _subdomain_colours(A, d, ordered_rounds=ordered_rounds)
    Ad = A.toarray()
    subs = d.subdomains
    for i in range(d.num_subdomains):
        for j in range(i):
            if np.any(Ad[np.ix_(subs[i], subs[j])] != 0):  # R_i A R_j^T != 0
                assert colour[i] != colour[j], (i, j)
    assert set(colour.tolist()) == set(range(colour.max() + 1))
