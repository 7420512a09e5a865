"""``PardisoBlocks.refactor``: PARDISO's numeric phase on new values, its analysis reused."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ddops
from ddops.linalg.local_solvers import SingularBlockError, factorize_blocks
from tests._optional import need


def _blocks(scale: np.ndarray) -> tuple[sp.csr_matrix, np.ndarray]:
    """Three 2D Poisson blocks (10 x 10 grids), block i scaled by scale[i] and shifted."""
    B = ddops.poisson_2d(10)
    n = B.shape[0]
    K = sp.block_diag([s * B + sp.identity(n) * s * 0.1 for s in scale], format="csr")
    return K, np.arange(len(scale) + 1) * n


def test_refactor_equals_a_fresh_factorisation():
    need("pardiso")
    K1, offsets = _blocks(np.array([1.0, 2.0, 3.0]))
    K2, _ = _blocks(np.array([5.0, 0.5, 7.0]))
    f = factorize_blocks(K1, offsets, "pardiso")
    assert f.refactor(K2) is f
    X = np.random.default_rng(0).standard_normal((K1.shape[0], 2))
    expected = np.linalg.solve(K2.toarray(), X)  # an independent dense solve
    assert np.abs(f.solve(X) - expected).max() <= 1e-12 * np.abs(expected).max()
    fresh = factorize_blocks(K2, offsets, "pardiso")
    assert f.nnz == fresh.nnz


def test_refactor_refuses_another_pattern_and_names_a_bad_block():
    need("pardiso")
    K1, offsets = _blocks(np.array([1.0, 2.0, 3.0]))
    f = factorize_blocks(K1, offsets, "pardiso")
    wider = K1.tolil()
    wider[0, 5] = wider[5, 0] = -0.01
    with pytest.raises(ValueError, match="another sparsity pattern"):
        f.refactor(wider.tocsr())
    bad, _ = _blocks(np.array([1.0, -2.0, 3.0]))  # block 1 negative definite
    with pytest.raises(SingularBlockError) as info:
        f.refactor(bad)
    assert info.value.block == 1
