"""The symbolic extraction of the subdomain matrices (``entry_map``) against the product
``S A S^T`` of the stacked restriction (a short gold reference)."""

import numpy as np
import pytest
import scipy.sparse as sp

import ddops
from ddops.precond.corrections import entry_map


def product_map(A, S, block_of_row):
    """The diagonal blocks of ``S P S^T``, ``P`` the pattern of ``A`` with the positions
    ``1 .. nnz`` as values: each entry of a block is one entry of ``A``."""
    P = sp.csr_matrix((np.arange(1, A.nnz + 1, dtype=np.float64), A.indices, A.indptr),
                      shape=A.shape)
    C = (S @ P @ S.T).tocoo()
    keep = block_of_row[C.row] == block_of_row[C.col]
    return sp.coo_matrix((C.data[keep] - 1, (C.row[keep], C.col[keep])), shape=C.shape)


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("overlap", [0, 1, 2])
def test_entry_map_equals_the_diagonal_blocks_of_the_restricted_product(padded, overlap):
    A = ddops.problems.poisson_2d(14).tocsr()
    d = ddops.Decomposition.from_matrix(A, 6, overlap=overlap)
    S = d.stacked_restriction("none", padded=padded, dtype=np.float64)
    p = d.max_size
    block_of_row = (np.arange(S.shape[0]) // p) if padded else d._subdomain_of_entry
    ours = entry_map(A, S, block_of_row).tocsr()
    reference = product_map(A, S, block_of_row).tocsr()
    ours.sort_indices()
    reference.sort_indices()
    np.testing.assert_array_equal(ours.indptr, reference.indptr)
    np.testing.assert_array_equal(ours.indices, reference.indices)
    np.testing.assert_array_equal(ours.data, reference.data)
    # and the values they pick are the subdomain matrices themselves
    K = sp.csr_matrix((A.data[ours.data], ours.indices, ours.indptr), shape=ours.shape)
    for i, idx in enumerate(d.subdomains):
        rows = np.arange(i * p, i * p + idx.size) if padded else d.offsets[i] + np.arange(idx.size)
        np.testing.assert_array_equal(K[rows][:, rows].toarray(),
                                      A[idx][:, idx].toarray())
