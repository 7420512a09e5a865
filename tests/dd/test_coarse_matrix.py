"""The Galerkin products of ``ddops.dd.coarse_matrix`` against dense products.

``transposed_product`` forms ``P^T Q`` with ``P^T`` in CSR, and ``galerkin_matrix`` forms
``Phi^T A Phi`` either as ``Phi_G^T (A Phi)_G`` or, where ``Phi`` holds many entries per row,
through the interior coupling ``(A_IG Phi_G)^T Phi_I``.  Both ways, each forced, are checked
against the dense products, on random matrices and on the GDSW bases of a scalar and an
elasticity problem.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ddops
import ddops.dd.coarse_matrix as cm
from ddops.dd.coarse_matrix import galerkin_matrix, transposed_product


def random_spd(n, density, seed):
    rng = np.random.default_rng(seed)
    B = sp.random(n, n, density=density, random_state=rng, format="csr")
    return (B @ B.T + sp.identity(n) * n).tocsr()


def canonical(M):
    return (sp.isspmatrix_csr(M) and M.has_sorted_indices
            and not np.any(np.diff(M.indptr) < 0))


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_transposed_product_is_the_dense_product(fmt):
    rng = np.random.default_rng(0)
    P = sp.random(40, 7, density=0.2, random_state=rng, format=fmt)
    Q = sp.random(40, 11, density=0.3, random_state=rng, format=fmt)
    out = transposed_product(P, Q)
    assert sp.isspmatrix_csr(out) and out.shape == (7, 11)
    np.testing.assert_allclose(out.toarray(), P.toarray().T @ Q.toarray(), rtol=0,
                               atol=1e-14)


def test_transposed_product_sums_duplicate_entries():
    # a CSR with a repeated (row, column), P[0, 0] = 1 + 2: both entries count
    P = sp.csr_matrix((np.array([1.0, 2.0, 3.0]), np.array([0, 0, 1]), np.array([0, 2, 3])),
                      shape=(2, 2))
    Q = sp.csr_matrix(np.array([[1.0, 0.0], [0.0, 1.0]]))
    np.testing.assert_allclose(transposed_product(P, Q).toarray(), [[3.0, 0.0], [0.0, 3.0]])


@pytest.mark.parametrize("split", [0.0, np.inf])
def test_galerkin_matrix_is_the_dense_product(monkeypatch, split):
    monkeypatch.setattr(cm, "GALERKIN_SPLIT_MIN", split)
    A = random_spd(60, 0.05, 1)
    Phi = sp.random(60, 9, density=0.3, random_state=np.random.default_rng(2), format="csr")
    dense = Phi.toarray().T @ A.toarray() @ Phi.toarray()
    A0 = galerkin_matrix(A, Phi)
    assert canonical(A0)
    assert (A0 != A0.T).nnz == 0  # exactly symmetric
    np.testing.assert_allclose(A0.toarray(), dense, rtol=0, atol=1e-12 * np.abs(dense).max())
    # with rows: Phi_G^T (A Phi)_G for any Phi (the identity holds for symmetric A)
    rows = np.sort(np.random.default_rng(3).choice(60, 25, replace=False))
    P = Phi.toarray()
    want = P[rows].T @ (A.toarray() @ P)[rows]
    want = 0.5 * (want + want.T)
    A0 = galerkin_matrix(A, Phi, rows)
    assert canonical(A0) and (A0 != A0.T).nnz == 0
    np.testing.assert_allclose(A0.toarray(), want, rtol=0, atol=1e-12 * np.abs(want).max())
    # with A Phi formed by the caller (the hybrid form's): the same products from it
    AP = sp.csr_matrix(A.toarray() @ P)
    A0 = galerkin_matrix(A, Phi, rows, product=AP[rows])
    assert canonical(A0) and (A0 != A0.T).nnz == 0
    np.testing.assert_allclose(A0.toarray(), want, rtol=0, atol=1e-12 * np.abs(want).max())
    A0 = galerkin_matrix(A, Phi, product=AP)
    assert canonical(A0) and (A0 != A0.T).nnz == 0
    np.testing.assert_allclose(A0.toarray(), dense, rtol=0, atol=1e-12 * np.abs(dense).max())


def gdsw_case(problem):
    if problem == "scalar":
        A = ddops.problems.diffusion_2d(ddops.problems.high_contrast_channels(23, 1e6))
        d, Z = ddops.Decomposition.from_matrix(A, 6), None
    else:
        from ._elasticity import stiff_disks

        A, d, Z = stiff_disks(28, 1e6, count=10, radius=0.15)
    M = ddops.TwoLevelSchwarz(A, d, null_space=Z, coarse_basis="gdsw")
    rows = M.coarse_info.harmonic_interface
    assert rows is not None
    return sp.csr_matrix(A), sp.csr_matrix(M.coarse_matrix), rows


@pytest.mark.parametrize("problem", ["scalar", "elasticity"])
def test_both_ways_give_the_galerkin_matrix_of_a_gdsw_basis(monkeypatch, problem):
    A, Phi, rows = gdsw_case(problem)
    P = Phi.toarray()
    dense = P.T @ (A.toarray() @ P)  # the full product: Phi is discrete harmonic
    scale = np.abs(dense).max()
    results = []
    for split in (0.0, np.inf):
        monkeypatch.setattr(cm, "GALERKIN_SPLIT_MIN", split)
        A0 = galerkin_matrix(A, Phi, rows)
        assert canonical(A0) and (A0 != A0.T).nnz == 0
        np.testing.assert_allclose(A0.toarray(), dense, rtol=0, atol=1e-10 * scale)
        results.append(A0.toarray())
    np.testing.assert_allclose(results[0], results[1], rtol=0, atol=1e-13 * scale)
