"""The hybrid two-level Schwarz preconditioner: multiplicative coarse, additive local parts."""

import numpy as np
import pytest
import scipy.sparse.linalg as spla

import ddops


def _dense_hybrid(A, d, Phi):
    """P0 + (I - P0 A) M1 (I - A P0), assembled densely from its definition."""
    A = A.toarray()
    n = A.shape[0]
    M1 = np.zeros((n, n))
    for s in d.subdomains:
        M1[np.ix_(s, s)] += np.linalg.inv(A[np.ix_(s, s)])
    Phi = Phi.toarray()
    P0 = Phi @ np.linalg.solve(Phi.T @ A @ Phi, Phi.T)
    eye = np.eye(n)
    return P0 + (eye - P0 @ A) @ M1 @ (eye - A @ P0)


@pytest.mark.parametrize("overlap", [0, 1])
@pytest.mark.parametrize("local_solver", ["dense", "sparse"])
@pytest.mark.parametrize("basis", ["gdsw", "rgdsw", "nicolaides"])
def test_hybrid_equals_its_definition_and_is_spd(basis, local_solver, overlap):
    A = ddops.poisson_2d(10)
    d = ddops.Decomposition.from_grid((10, 10), (2, 3), overlap)
    M = ddops.TwoLevelSchwarz(A, d, coarse_basis=basis, variant="hybrid",
                              local_solver=local_solver)
    Phi = ddops.coarse_basis(d, basis, A=A if basis != "nicolaides" else None)
    dense = M.to_dense()
    np.testing.assert_allclose(dense, _dense_hybrid(A, d, Phi), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(dense, dense.T, rtol=0, atol=1e-12 * np.abs(dense).max())
    assert np.linalg.eigvalsh(0.5 * (dense + dense.T)).min() > 0
    ddops.testing.dottest(M)


def test_hybrid_without_coarse_space_is_one_level_additive():
    A = ddops.poisson_2d(8)
    d = ddops.Decomposition.from_grid((8, 8), (2, 2), 1)
    hybrid = ddops.TwoLevelSchwarz(A, d, coarse_basis=None, variant="hybrid")
    additive = ddops.TwoLevelSchwarz(A, d, coarse_basis=None, variant="additive")
    np.testing.assert_allclose(hybrid.to_dense(), additive.to_dense(), rtol=0, atol=0)


def test_hybrid_needs_fewer_cg_iterations_than_additive():
    A = ddops.poisson_2d(64)
    d = ddops.Decomposition.from_grid((64, 64), (4, 4), 1)
    b = np.ones(A.shape[0])
    counts = {}
    for variant in ("additive", "hybrid"):
        M = ddops.TwoLevelSchwarz(A, d, coarse_basis="gdsw", variant=variant)
        it = []
        x, info = spla.cg(A, b, M=M, rtol=1e-8, callback=lambda xk, it=it: it.append(1))
        assert info == 0
        assert np.linalg.norm(b - A @ x) <= 1e-8 * np.linalg.norm(b) * 1.01
        counts[variant] = len(it)
    assert counts["hybrid"] < counts["additive"]


@pytest.mark.parametrize("basis", ["gdsw", "rgdsw"])
def test_hybrid_on_the_parts_solves_for_the_constants_in_one_step(basis):
    """Why a benchmark with the right-hand side ``A 1`` measures nothing for this form: the
    GDSW-type basis reproduces the constants on the interface, so after the coarse step
    the error of ``x = 1`` lives in the parts' interiors, where exact solves on the
    non-overlapping parts (overlap 0) remove it: ``M A 1 = 1`` to rounding.  With overlap
    (the rows next to a part overlap its neighbours) the same is not exact."""
    A = ddops.poisson_2d(12)
    ones = np.ones(A.shape[0])
    errors = {}
    for overlap in (0, 1):
        d = ddops.Decomposition.from_grid((12, 12), (3, 3), overlap)
        M = ddops.TwoLevelSchwarz(A, d, coarse_basis=basis, variant="hybrid",
                                  local_solver="sparse")
        errors[overlap] = np.abs(M @ (A @ ones) - ones).max()
    assert errors[0] <= 1e-12
    assert errors[1] > 1e-6
