"""The entries of a matrix inside sets of its unknowns, against dense submatrices."""

import numpy as np
import pytest
import scipy.sparse as sp

from ddops.dd import set_entries
from ddops.dd.set_entries import entries_within_sets


def random_sets(rng, n, num_sets):
    """Overlapping random sets of unknowns, each member at a random distinct position."""
    members, set_of, position = [], [], []
    for s in range(num_sets):
        size = int(rng.integers(0, n + 1))
        u = rng.choice(n, size=size, replace=False)
        members.append(u)
        set_of.append(np.full(size, s))
        position.append(rng.permutation(size) + int(rng.integers(0, 3)))  # gaps allowed
    return (np.concatenate(members), np.concatenate(set_of), np.concatenate(position))


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("table", [None, 1, 2])
def test_entries_within_sets_are_the_dense_submatrices(seed, table, monkeypatch):
    """Every set's matrix assembled from the returned entries equals ``A[w][:, w]`` of the
    dense matrix, placed at the members' positions; each stored entry is named by its index
    in ``A.data``; tables of one or two sets at a time (a large matrix's chunks) give the
    same entries."""
    rng = np.random.default_rng(seed)
    n, num_sets = 30, 5
    A = sp.random(n, n, density=0.15, random_state=seed, format="csr") + sp.eye(n)
    A = sp.csr_matrix(A)
    A.sum_duplicates()
    A.data = np.arange(1.0, A.nnz + 1.0)  # values that name their positions
    if table is not None:
        monkeypatch.setattr(set_entries, "LOOKUP_TABLE_ENTRIES", table * n)
    members, set_of, position = random_sets(rng, n, num_sets)
    got_set, row, col, source = entries_within_sets(A, members, set_of, position, num_sets)
    assert all(x.dtype == np.int32 for x in (got_set, row, col, source))  # they fit
    np.testing.assert_array_equal(A.data[source], source + 1.0)
    dense = A.toarray()
    for s in range(num_sets):
        mine = set_of == s
        u, p = members[mine], position[mine]
        width = int(p.max()) + 1 if p.size else 0
        expected = np.zeros((width, width))
        expected[np.ix_(p, p)] = dense[np.ix_(u, u)]
        at = got_set == s
        got = np.zeros((width, width))
        np.add.at(got, (row[at], col[at]), A.data[source[at]])
        np.testing.assert_array_equal(got, expected)
        assert at.sum() == np.count_nonzero(dense[np.ix_(u, u)])


def test_entries_within_sets_of_no_set():
    A = sp.identity(4, format="csr")
    out = entries_within_sets(A, np.zeros(0, int), np.zeros(0, int), np.zeros(0, int), 0)
    assert all(x.size == 0 for x in out)


def test_entries_within_sets_refuses_bad_input():
    A = sp.identity(4, format="csr")
    ok = np.array([0, 1])
    with pytest.raises(TypeError, match="CSR"):
        entries_within_sets(A.tocoo(), ok, ok, ok, 2)
    with pytest.raises(ValueError, match="members must be a 1-D array"):
        entries_within_sets(A, np.array([0.0, 1.0]), ok, ok, 2)
    with pytest.raises(ValueError, match="position must be a 1-D array"):
        entries_within_sets(A, ok, ok, np.array([-1, 0]), 2)
    with pytest.raises(ValueError, match="one shape"):
        entries_within_sets(A, ok, ok, np.array([0]), 2)
    with pytest.raises(ValueError, match="below num_sets"):
        entries_within_sets(A, ok, np.array([0, 2]), ok, 2)
    with pytest.raises(ValueError, match="below 4"):
        entries_within_sets(A, np.array([0, 4]), ok, ok, 2)
