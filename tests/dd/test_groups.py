"""columns_from_groups: the group vectors as coarse columns, against a dense loop assembly."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddops.dd.groups import columns_from_groups


def dense_columns(rows, group, values, keep, n, runs=None):
    """The same columns, one entry at a time into a dense array (the reference)."""
    num_groups, k = keep.shape
    column = -np.ones((num_groups, k), dtype=np.int64)
    at = 0
    for g in range(num_groups):  # group-major, then vector
        for v in range(k):
            if keep[g, v]:
                column[g, v] = at
                at += 1
    Phi = np.zeros((n, at))
    for e in range(rows.size):
        for v in range(values.shape[1]):
            if keep[group[e], v]:
                Phi[rows[e], column[group[e], v]] = values[e, v]
    if runs is not None:
        run_group, run_vector, start, length, run_values = runs
        taken = 0
        for g, v, s, m in zip(run_group, run_vector, start, length, strict=True):
            if keep[g, v]:
                Phi[rows[s:s + m], column[g, v]] = run_values[taken:taken + m]
            taken += m
    return Phi, column


@st.composite
def grouped_vectors(draw, dense=False):
    """Groups of consecutive entries (an unknown in at most one entry per group), ``k``
    dense vectors on them, and runs of further vectors (each (group, vector) pair at most
    once, in any order), with exact zeros among the values; ``dense``: at least one dense
    vector (drawn so, not filtered: two thirds of the draws have none)."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    n = draw(st.integers(1, 12))
    num_groups = draw(st.integers(1, 5))
    sizes = [int(rng.integers(1, n + 1)) for _ in range(num_groups)]
    rows = np.concatenate([rng.choice(n, s, replace=False) for s in sizes])
    group = np.repeat(np.arange(num_groups), sizes)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    k = draw(st.integers(1 if dense else 0, 2))
    slots = draw(st.integers(0, 3))
    # as GenEO calls it: every vector as runs, no dense ones
    all_runs = False if dense else draw(st.booleans())

    def sparse_values(size):
        x = rng.standard_normal(size)
        x[rng.random(size) < 0.3] = 0.0
        return x

    values = sparse_values(rows.size * k).reshape(rows.size, k)
    keep = rng.random((num_groups, k + slots)) < 0.7
    first = 0 if all_runs else k  # the first vector given as runs
    if all_runs:
        values = values[:, :0]
    pairs = [(g, first + s) for g in range(num_groups) for s in range(k + slots - first)
             if rng.random() < 0.8]
    pairs = [pairs[i] for i in rng.permutation(len(pairs))]
    run_group = np.array([g for g, _ in pairs], dtype=np.int64)
    run_vector = np.array([v for _, v in pairs], dtype=np.int64)
    length = np.array([sizes[g] for g in run_group], dtype=np.int64)
    runs = (run_group, run_vector, offsets[run_group], length,
            sparse_values(int(length.sum())))
    return rows, group, values, keep, n, runs


@settings(max_examples=60, deadline=None)
@given(grouped_vectors())
def test_runs_give_the_dense_assembly(case):
    rows, group, values, keep, n, runs = case
    Phi, column = columns_from_groups(rows, group, values, keep, n, runs=runs)
    reference, ref_column = dense_columns(rows, group, values, keep, n, runs)
    np.testing.assert_array_equal(column, ref_column)
    assert Phi.shape == reference.shape
    np.testing.assert_array_equal(Phi.toarray(), reference)  # the same values, bit for bit
    assert Phi.has_sorted_indices
    assert np.all(Phi.data != 0)  # exact zeros dropped


@settings(max_examples=30, deadline=None)
@given(grouped_vectors(dense=True))
def test_dense_vectors_alone_give_the_dense_assembly(case):
    rows, group, values, keep, n, _ = case
    assert values.shape[1] > 0
    keep = keep[:, :values.shape[1]]
    Phi, column = columns_from_groups(rows, group, values, keep, n)
    reference, ref_column = dense_columns(rows, group, values, keep, n)
    np.testing.assert_array_equal(column, ref_column)
    np.testing.assert_array_equal(Phi.toarray(), reference)
    assert Phi.has_sorted_indices


def test_runs_out_of_column_order_land_in_their_columns():
    """Two groups of two entries; the runs given last column first, the second group's
    run skipped by ``keep``: each value where its (group, vector) pair's column is."""
    rows = np.array([3, 0, 0, 2])
    group = np.array([0, 0, 1, 1])
    keep = np.array([[True, True], [True, False]])
    runs = (np.array([1, 0, 0, 1]), np.array([1, 1, 0, 0]), np.array([2, 0, 0, 2]),
            np.array([2, 2, 2, 2]), np.array([9.0, 9.0, 5.0, 6.0, 1.0, 2.0, 7.0, 8.0]))
    Phi, column = columns_from_groups(rows, group, np.zeros((4, 0)), keep, 4, runs=runs)
    # columns: (0, 0) -> 0, (0, 1) -> 1, (1, 0) -> 2; group 1's vector 1 not kept
    np.testing.assert_array_equal(column, [[0, 1], [2, -1]])
    expected = np.zeros((4, 3))
    expected[[3, 0], 1] = [5.0, 6.0]
    expected[[3, 0], 0] = [1.0, 2.0]
    expected[[0, 2], 2] = [7.0, 8.0]
    np.testing.assert_array_equal(Phi.toarray(), expected)


@pytest.mark.parametrize("k", [0, 2])
def test_no_kept_pair_gives_an_empty_matrix(k):
    rows, group = np.array([0, 1]), np.array([0, 0])
    keep = np.zeros((1, k + 1), dtype=bool)
    runs = (np.array([0]), np.array([k]), np.array([0]), np.array([2]), np.ones(2))
    Phi, column = columns_from_groups(rows, group, np.ones((2, k)), keep, 3, runs=runs)
    assert Phi.shape == (3, 0) and Phi.nnz == 0
    assert np.all(column == -1)


def test_two_runs_of_one_pair_are_refused():
    rows, group = np.array([0, 1]), np.array([0, 0])
    keep = np.ones((1, 1), dtype=bool)
    runs = (np.array([0, 0]), np.array([0, 0]), np.array([0, 0]), np.array([2, 2]),
            np.ones(4))
    with pytest.raises(ValueError, match="two runs of group 0's vector 0"):
        columns_from_groups(rows, group, np.zeros((2, 0)), keep, 2, runs=runs)
