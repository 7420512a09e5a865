"""check_neumann: the user's Neumann matrices stacked, against a dense reconstruction."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from ddops.dd.eigen import check_neumann

FORMATS = {
    "csr": sp.csr_matrix, "csc": sp.csc_matrix, "coo": sp.coo_matrix, "lil": sp.lil_matrix,
    "csr_array": sp.csr_array, "dense": lambda X: X, "list": lambda X: X.tolist(),
    "int csr": lambda X: sp.csr_matrix(np.round(X).astype(np.int64)),
}


def random_matrices(sizes, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for s in sizes:
        # not symmetric: a transposed CSC would show
        out.append(rng.standard_normal((s, s)) * (rng.random((s, s)) < 0.5))
    return out


def rebuilt(entries, sizes):
    """Each subdomain's matrix summed back from the stacked entries (duplicates add)."""
    sub, row, col, val = entries
    out = [np.zeros((s, s)) for s in sizes]
    for i, r, c, v in zip(sub, row, col, val, strict=True):
        out[i][r, c] += v
    return out


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_every_format_stacks_its_entries(fmt):
    sizes = np.array([3, 5, 1, 4])
    dense = random_matrices(sizes)
    given = [FORMATS[fmt](X) for X in dense]
    entries = check_neumann(given, sizes)
    expected = [np.round(X) if fmt == "int csr" else X for X in dense]
    for got, X in zip(rebuilt(entries, sizes), expected, strict=True):
        np.testing.assert_array_equal(got, X)
    sub, row, col, val = entries
    assert all(a.dtype == np.int64 for a in (sub, row, col)) and val.dtype == np.float64
    assert np.all(np.diff(sub) >= 0)  # subdomain by subdomain


def test_duplicate_entries_are_kept_for_the_sum():
    M = sp.csr_matrix((np.array([1.0, 2.0]), np.array([0, 0]), np.array([0, 2, 2])),
                      shape=(2, 2))  # two entries at (0, 0)
    entries = check_neumann([M], np.array([2]))
    np.testing.assert_array_equal(rebuilt(entries, [2])[0], [[3.0, 0.0], [0.0, 0.0]])


def test_subdomains_without_a_matrix():
    sizes = np.array([2, 3, 2])
    dense = random_matrices(sizes)
    entries, given = check_neumann([sp.csr_matrix(dense[0]), None, dense[2]], sizes,
                                   allow_none=True)
    np.testing.assert_array_equal(given, [True, False, True])
    got = rebuilt(entries, sizes)
    np.testing.assert_array_equal(got[0], dense[0])
    np.testing.assert_array_equal(got[1], np.zeros((3, 3)))
    np.testing.assert_array_equal(got[2], dense[2])


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "dense"])
def test_a_nan_names_its_matrix(fmt):
    sizes = np.array([2, 2, 3])
    dense = random_matrices(sizes)
    dense[2][1, 1] = np.nan
    with pytest.raises(ValueError, match=r"neumann\[2\] contains NaN or inf"):
        check_neumann([FORMATS[fmt](X) for X in dense], sizes)


@pytest.mark.parametrize("fmt", ["csr", "coo", "dense"])
def test_a_wrong_shape_names_its_matrix(fmt):
    sizes = np.array([2, 3])
    dense = random_matrices([2, 2])
    with pytest.raises(ValueError, match=r"neumann\[1\] must have shape \(3, 3\) \(the size "
                                         r"of subdomain 1\), got \(2, 2\)"):
        check_neumann([FORMATS[fmt](X) for X in dense], sizes)


def test_a_missing_matrix_names_its_subdomain():
    sizes = np.array([2, 2])
    with pytest.raises(ValueError, match=r"neumann\[1\] is None"):
        check_neumann([np.eye(2), None], sizes)


def test_arrays_longer_than_the_pointers_say_hold_no_entries():
    """A CSR matrix whose ``data`` and ``indices`` run past ``indptr[-1]`` (arrays changed
    after the matrix was built): only the first ``indptr[-1]`` are entries."""
    M = sp.csr_matrix(np.array([[1.0, 2.0], [0.0, 3.0]]))
    M.data = np.concatenate([M.data, [7.0]])
    M.indices = np.concatenate([M.indices, [0]])
    entries = check_neumann([M], np.array([2]))
    assert all(a.size == 3 for a in entries)
    np.testing.assert_array_equal(rebuilt(entries, [2])[0], [[1.0, 2.0], [0.0, 3.0]])
