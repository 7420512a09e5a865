"""PARDISO's solves with several right-hand sides, one call or one column at a time
(``PARDISO_COLUMN_SOLVES``)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ddops
from ddops.linalg import local_solvers
from ddops.linalg.local_solvers import factorize_blocks
from tests._optional import need


def _blocks() -> tuple[sp.csr_matrix, np.ndarray]:
    """Three shifted 2D Poisson blocks (12 x 12 grids) with different scales."""
    B = ddops.poisson_2d(12)
    n = B.shape[0]
    K = sp.block_diag([s * (B + 0.05 * sp.identity(n)) for s in (1.0, 3.0, 0.2)],
                      format="csr")
    return K, np.arange(4) * n


def _count_solve_calls(monkeypatch) -> list:
    """Record the number of right-hand sides of every call of PARDISO's solve phase."""
    calls: list = []
    real = local_solvers._PardisoHandle.call

    def call(self, phase, B=None, partial=0):
        if phase == 33:
            calls.append(1 if B.ndim == 1 else B.shape[1])
        return real(self, phase, B, partial)

    monkeypatch.setattr(local_solvers._PardisoHandle, "call", call)
    return calls


@pytest.mark.parametrize("columns", (2, 5))
@pytest.mark.parametrize("limit", (0, 10**9))
def test_columns_one_by_one_and_in_one_call_give_the_dense_solution(monkeypatch, columns,
                                                                    limit):
    need("pardiso")
    K, offsets = _blocks()
    f = factorize_blocks(K, offsets, "pardiso")
    monkeypatch.setattr(local_solvers, "PARDISO_COLUMN_SOLVES", limit)
    calls = _count_solve_calls(monkeypatch)
    X = np.random.default_rng(1).standard_normal((K.shape[0], columns))
    Y = f.solve(X)
    expected = np.linalg.solve(K.toarray(), X)  # an independent dense solve
    assert Y.shape == X.shape and Y.flags.c_contiguous
    assert np.abs(Y - expected).max() <= 1e-12 * np.abs(expected).max()
    # limit 0: one call with every column; a huge limit: one call per column
    assert calls == ([columns] if limit == 0 else [1] * columns)
    # the transposed solve (K symmetric) and a column of the block alike
    assert np.abs(f.solve(X, trans="T") - expected).max() <= 1e-12 * np.abs(expected).max()


def test_the_rule_splits_narrow_blocks_of_columns_only(monkeypatch):
    need("pardiso")
    K, offsets = _blocks()
    f = factorize_blocks(K, offsets, "pardiso")
    m = K.shape[0]
    # the widest block the rule still splits, and one column more
    p = -(-local_solvers.PARDISO_COLUMN_SOLVES * m // f.nnz) - 1
    assert p > 1  # a 2D factor: a few nonzeros per row
    calls = _count_solve_calls(monkeypatch)
    rng = np.random.default_rng(2)
    f.solve(rng.standard_normal((m, p)))
    f.solve(rng.standard_normal((m, p + 1)))
    f.solve(rng.standard_normal(m))  # one column: one call, as always
    assert calls == [1] * p + [p + 1, 1]


def test_partial_solves_keep_one_call(monkeypatch):
    """The pruned solves of ``solve_sparse`` (PARDISO's partial solve) are not split."""
    need("pardiso")
    K, offsets = _blocks()
    rows = np.arange(0, K.shape[0], 7)
    f = factorize_blocks(K, offsets, "pardiso", sparse_rows=rows)
    monkeypatch.setattr(local_solvers, "PARDISO_COLUMN_SOLVES", 10**9)
    calls = _count_solve_calls(monkeypatch)
    B = np.random.default_rng(3).standard_normal((rows.size, 3))
    X = f.solve_sparse(B)
    full = np.zeros((K.shape[0], 3))
    full[rows] = B
    expected = np.linalg.solve(K.toarray(), full)
    assert np.abs(X - expected).max() <= 1e-12 * np.abs(expected).max()
    assert calls == [3]


def test_the_default_splits_a_2d_factor_and_keeps_a_3d_one_whole(monkeypatch):
    """The two regimes measured for the default: 4 columns of a 2D factor (about 10 factor
    nonzeros per row) go one by one, 12 columns of a 3D one (about 70) in one call."""
    need("pardiso")
    n = 14
    T = sp.diags([-np.ones(n - 1), 2.01 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1])
    I = sp.identity(n)
    K3 = (sp.kron(sp.kron(T, I), I) + sp.kron(sp.kron(I, T), I)
          + sp.kron(sp.kron(I, I), T)).tocsr()
    K2, offsets2 = _blocks()
    f2 = factorize_blocks(K2, offsets2, "pardiso")
    f3 = factorize_blocks(K3, [0, K3.shape[0]], "pardiso")
    calls = _count_solve_calls(monkeypatch)
    rng = np.random.default_rng(4)
    f2.solve(rng.standard_normal((K2.shape[0], 4)))
    assert calls == [1, 1, 1, 1]
    calls.clear()
    X = rng.standard_normal((K3.shape[0], 12))
    Y = f3.solve(X)
    assert calls == [12]
    assert np.abs(K3 @ Y - X).max() <= 1e-10 * np.abs(X).max()
