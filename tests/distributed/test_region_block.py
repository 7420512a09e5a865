"""The block of a rank's region (``_cut``): ``sym(A)`` on the region, from rows alone."""

import numpy as np
import pytest
import scipy.sparse as sp

from ddops.distributed.precond import _cut
from ddops.problems import poisson_2d


def test_the_region_block_is_the_symmetric_part_on_the_region():
    """Rows of a matrix unsymmetric by rounding: the block equals the dense
    ``((A + A^T) / 2)[known][:, known]`` and is exactly symmetric; the outside sums are
    those of the rows' couplings that leave ``known``; a truly unsymmetric block is
    refused."""
    A = poisson_2d(10).tocsr()
    A.data = A.data * (1.0 + 1e-15 * np.random.default_rng(0).standard_normal(A.nnz))
    known = np.arange(20, 70)
    block, outside = _cut(A[known], known)
    dense = A.toarray()
    sym = (dense + dense.T) / 2
    np.testing.assert_array_equal(block.toarray(), sym[np.ix_(known, known)])
    assert (block != block.T).nnz == 0
    mask = np.ones(A.shape[0], dtype=bool)
    mask[known] = False
    np.testing.assert_allclose(outside, np.abs(dense[np.ix_(known, mask)]).sum(axis=1))
    skewed = A.tolil()
    skewed[25, 26] = 5.0
    with pytest.raises(ValueError, match="not symmetric"):
        _cut(sp.csr_matrix(skewed)[known], known)
