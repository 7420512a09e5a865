"""The coarse matrix of discrete-harmonic bases, computed from the interface rows only.

``TwoLevelSchwarz`` forms ``A_0 = Phi_G^T (A Phi)_G`` when the basis builder reports that
its columns are discrete harmonic off the interface (exact extension).  Checked against the
full Galerkin product ``Phi^T A Phi`` computed densely here, on homogeneous and
high-contrast problems; the inexact extension falls back to the full product.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import ddops
from ddops.problems import diffusion_2d, high_contrast_channels
from tests._optional import need


def dense_galerkin(A, Phi):
    P = Phi.toarray()
    return P.T @ (A.toarray() @ P)


@pytest.mark.parametrize("basis", ["gdsw", "rgdsw", "agdsw"])
@pytest.mark.parametrize("contrast", [1.0, 1e6])
def test_interface_rows_give_the_galerkin_matrix(basis, contrast):
    A = diffusion_2d(high_contrast_channels(30, contrast, period=4, margin=2))
    d = ddops.Decomposition.from_matrix(A, 6)
    M = ddops.TwoLevelSchwarz(A, d, coarse_basis=basis)
    assert M.coarse_info.harmonic_interface is not None  # the shortcut was taken
    A0 = dense_galerkin(A, M.coarse_matrix)
    c, lower = M._coarse_cho
    L = np.tril(c) if lower else np.triu(c).T
    assert np.abs(L @ L.T - A0).max() <= 1e-10 * np.abs(A0).max()


def test_interface_rows_match_the_user_matrix_path():
    """The same Phi passed as a matrix (no harmonic information: the full product) gives
    the same preconditioner to rounding."""
    A = ddops.poisson_2d(24)
    d = ddops.Decomposition.from_matrix(A, 5)
    M = ddops.TwoLevelSchwarz(A, d, coarse_basis="gdsw", variant="hybrid")
    U = ddops.TwoLevelSchwarz(A, d, coarse_basis=M.coarse_matrix, variant="hybrid")
    assert U.coarse_info is None
    X = np.random.default_rng(1).standard_normal((A.shape[0], 3))
    assert np.abs(M @ X - U @ X).max() <= 1e-12 * np.abs(U @ X).max()


def test_inexact_extension_uses_the_full_product():
    need("amg")
    A = ddops.poisson_2d(24)
    d = ddops.Decomposition.from_matrix(A, 5)
    M = ddops.TwoLevelSchwarz(A, d, coarse_basis="gdsw",
                              coarse_options={"extension_solver": "amg"})
    assert M.coarse_info.harmonic_interface is None
    A0 = dense_galerkin(A, M.coarse_matrix)
    c, lower = M._coarse_cho
    L = np.tril(c) if lower else np.triu(c).T
    assert np.abs(L @ L.T - A0).max() <= 1e-12 * np.abs(A0).max()


@pytest.mark.parametrize("local", ["auto", "superlu"])
def test_sparse_coarse_factorisation_agrees_with_the_dense_one(monkeypatch, local):
    """Above COARSE_DENSE_MAX the coarse matrix is factorised sparsely: PARDISO when it is
    installed (unless SuperLU was asked for by name), else SuperLU; the same operator."""
    import ddops.precond.corrections as corrections

    A = ddops.poisson_2d(24)
    d = ddops.Decomposition.from_matrix(A, 6)
    dense = ddops.TwoLevelSchwarz(A, d, coarse_basis="gdsw", local_solver=local)
    monkeypatch.setattr(corrections, "COARSE_DENSE_MAX", 5)
    sparse = ddops.TwoLevelSchwarz(A, d, coarse_basis="gdsw", local_solver=local)
    assert (dense.coarse_solver, sparse.coarse_solver) == ("dense", "sparse")
    expected = "pardiso" if (importlib.util.find_spec("pypardiso") and local == "auto") \
        else "superlu"
    assert sparse.coarse_factorization == expected
    assert sparse.stats["coarse_factor_bytes"] > 0
    X = np.random.default_rng(2).standard_normal((A.shape[0], 2))
    assert np.abs(dense @ X - sparse @ X).max() <= 1e-10 * np.abs(dense @ X).max()


def test_pardiso_takes_the_coarse_matrix_from_a_lower_dimension(monkeypatch):
    """With PARDISO the coarse matrix is factorised sparsely above COARSE_DENSE_MAX_PARDISO,
    with SuperLU only above COARSE_DENSE_MAX; both give the dense operator."""
    need("pardiso")
    import ddops.precond.corrections as corrections

    A = ddops.poisson_2d(24)
    d = ddops.Decomposition.from_matrix(A, 6)
    dense = ddops.TwoLevelSchwarz(A, d, coarse_basis="gdsw")
    n0 = dense.coarse_dim
    assert dense.coarse_solver == "dense" and n0 <= corrections.COARSE_DENSE_MAX_PARDISO
    monkeypatch.setattr(corrections, "COARSE_DENSE_MAX_PARDISO", n0 - 1)
    sparse = ddops.TwoLevelSchwarz(A, d, coarse_basis="gdsw")
    assert (sparse.coarse_solver, sparse.coarse_factorization) == ("sparse", "pardiso")
    superlu = ddops.TwoLevelSchwarz(A, d, coarse_basis="gdsw", local_solver="superlu")
    assert superlu.coarse_solver == "dense"  # n0 <= COARSE_DENSE_MAX
    X = np.random.default_rng(3).standard_normal((A.shape[0], 2))
    assert np.abs(dense @ X - sparse @ X).max() <= 1e-10 * np.abs(dense @ X).max()


def test_the_dense_coarse_factor_is_kept_in_lapack_layout():
    """The dense coarse Cholesky factor is stored as LAPACK reads it (Fortran order), so that
    the coarse solve of every application does not copy it (a C-ordered factor of order
    2000 is copied at each ``cho_solve``: 7 ms against 1.5 ms per solve); the coarse solve
    still inverts A_0, checked against a dense solve."""
    A = diffusion_2d(high_contrast_channels(30, 1e4, period=4, margin=2))
    d = ddops.Decomposition.from_matrix(A, 6)
    M = ddops.TwoLevelSchwarz(A, d, coarse_basis="gdsw")
    assert M.coarse.solver == "dense"
    factor, lower = M.coarse._cho
    assert factor.flags.f_contiguous
    A0 = M.coarse.A0.toarray()
    B = np.random.default_rng(0).standard_normal((A0.shape[0], 2))
    np.testing.assert_allclose(M.coarse.solve(B), np.linalg.solve(A0, B), rtol=1e-10)


@pytest.mark.parametrize("variant", ["additive", "hybrid"])
@pytest.mark.parametrize("basis", ["geneo", "agdsw"])
def test_the_dependence_checks_product_goes_to_the_coarse_correction(basis, variant,
                                                                     monkeypatch):
    """GenEO's and AGDSW's dependence check forms ``Phi^T A Phi`` (AGDSW's from the
    interface rows); the coarse correction takes that matrix (marked here by a
    perturbation of 1e-3, which A_0 then carries) instead of forming it again, releases it
    from the info, and without the mark A_0 is the dense Galerkin product."""
    from ddops.dd import agdsw, geneo

    builder = geneo if basis == "geneo" else agdsw
    A = diffusion_2d(high_contrast_channels(30, 1e4, period=4, margin=2))
    d = ddops.Decomposition.from_grid((30, 30), (3, 3), 1)
    M = ddops.TwoLevelSchwarz(A, d, coarse_basis=basis, variant=variant)
    assert M.coarse_info.stats["eigen_functions"] > 0
    A0 = dense_galerkin(A, M.coarse_matrix)
    assert np.abs(M.coarse.A0.toarray() - A0).max() <= 1e-12 * np.abs(A0).max()
    assert M.coarse_info.coarse_matrix is None
    # update(reuse_coarse=True) keeps Phi for a new matrix: A_0 follows that matrix
    M.update((A * 2.0).tocsr(), reuse_coarse=True)
    np.testing.assert_allclose(M.coarse.A0.toarray(), 2.0 * A0, rtol=0,
                               atol=1e-12 * np.abs(A0).max())
    original = builder.drop_dependent_columns

    def marked(*args, **kwargs):
        Phi, kept, B = original(*args, **kwargs)
        return Phi, kept, B * (1 + 1e-3)

    monkeypatch.setattr(builder, "drop_dependent_columns", marked)
    M = ddops.TwoLevelSchwarz(A, d, coarse_basis=basis, variant=variant)
    np.testing.assert_allclose(M.coarse.A0.toarray(), A0 * (1 + 1e-3), rtol=1e-12,
                               atol=1e-12 * np.abs(A0).max())


def test_release_basis_drops_the_handed_matrix_too():
    """A caller that assembles A_0 itself (the distributed preconditioner) releases the
    basis, and the matrix handed with it goes too: nothing of the serial A_0 is held."""
    A = diffusion_2d(high_contrast_channels(30, 1e4, period=4, margin=2))
    d = ddops.Decomposition.from_grid((30, 30), (3, 3), 1)
    M = ddops.TwoLevelSchwarz(A, d, coarse_basis="geneo")
    coarse = M.coarse
    Phi = coarse.build_basis(A)
    assert Phi is not None and coarse._given_A0 is not None
    coarse.release_basis()
    assert coarse.Phi is None and coarse._given_A0 is None


@pytest.mark.parametrize("variant", ["additive", "hybrid"])
def test_rgdsws_dependence_check_hands_its_product_on(variant, monkeypatch):
    """RGDSW with several null-space vectors (2D elasticity, rigid body modes) checks its
    functions for dependence on ``Phi_G^T (A Phi)_G``; the coarse correction takes that
    product (marked by a perturbation), which equals the dense Galerkin matrix, and the
    preconditioner is the one that forms it again, to the last bit."""
    from ddops.dd import gdsw
    from ddops.precond import corrections

    A, X = ddops.problems.fem_elasticity_2d(15)
    Z = ddops.rigid_body_modes(X)
    d = ddops.Decomposition.from_matrix(A, 6, block_size=2)
    M = ddops.TwoLevelSchwarz(A, d, coarse_basis="rgdsw", variant=variant, null_space=Z)
    A0 = dense_galerkin(A, M.coarse_matrix)
    assert np.abs(M.coarse.A0.toarray() - A0).max() <= 1e-12 * np.abs(A0).max()
    assert M.coarse_info.coarse_matrix is None  # released into the coarse correction
    X1 = np.random.default_rng(2).standard_normal((A.shape[0], 2))
    # the same without the handed matrix: formed again, bit for bit the same operator
    original_build = corrections.CoarseCorrection.build_basis

    def without(self, A):
        Phi = original_build(self, A)
        self._given_A0 = None
        return Phi

    with monkeypatch.context() as m:
        m.setattr(corrections.CoarseCorrection, "build_basis", without)
        formed = ddops.TwoLevelSchwarz(A, d, coarse_basis="rgdsw", variant=variant,
                                       null_space=Z)
    assert np.array_equal(M @ X1, formed @ X1)
    original = gdsw.drop_dependent_columns

    def marked(*args, **kwargs):
        Phi, kept, B = original(*args, **kwargs)
        return Phi, kept, B * (1 + 1e-3)

    monkeypatch.setattr(gdsw, "drop_dependent_columns", marked)
    M = ddops.TwoLevelSchwarz(A, d, coarse_basis="rgdsw", variant=variant, null_space=Z)
    np.testing.assert_allclose(M.coarse.A0.toarray(), A0 * (1 + 1e-3), rtol=1e-12,
                               atol=1e-12 * np.abs(A0).max())
