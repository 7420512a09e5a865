"""GenEO's chunks after the inertia: subdomains sorted by their counts, cut every ``step``,
and a chunk split in two where that saves ``GENEO_COUNT_SPLIT`` of its subspace columns.
References: a brute-force search over the split points, and the basis built without
splitting (``GENEO_COUNT_SPLIT = 1``)."""

import numpy as np
import pytest
import scipy.sparse.linalg as spla
from hypothesis import given, settings
from hypothesis import strategies as st

import ddops
from ddops.dd import geneo
from tests._optional import need


def subspace(count, cap):
    """The rule stated in GENEO_EXTRA_VECTORS' comment, written out again."""
    wanted = max(1, min(int(count), cap))
    return wanted + max(geneo.GENEO_EXTRA_VECTORS, wanted // 4)


def columns(counts, a, b, cap):
    """The subspace columns of chunk ``a:b`` (every subdomain at the largest count's)."""
    return (b - a) * subspace(counts[b - 1], cap)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 80), min_size=0, max_size=60), st.integers(1, 25),
       st.integers(1, 96))
def test_chunks_cover_stay_in_their_step_and_leave_no_profitable_split(raw, step, cap):
    counts = np.sort(np.array(raw, dtype=np.int64))
    bounds = geneo._count_chunk_bounds(counts, step, cap)
    n = counts.size
    assert bounds[0] == 0 and bounds[-1] == n
    assert np.all(np.diff(bounds) > 0) or n == 0
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        assert a // step == (b - 1) // step  # within one window of `step` subdomains
        whole = columns(counts, a, b, cap)
        best = min((columns(counts, a, j, cap) + columns(counts, j, b, cap)
                    for j in range(a + 1, b)), default=whole)
        assert best > (1.0 - geneo.GENEO_COUNT_SPLIT) * whole


@given(st.lists(st.integers(0, 80), min_size=1, max_size=60), st.integers(1, 25))
def test_no_split_is_the_plain_cut_every_step(raw, step):
    counts = np.sort(np.array(raw, dtype=np.int64))
    saved = geneo.GENEO_COUNT_SPLIT
    geneo.GENEO_COUNT_SPLIT = 1.0
    try:
        bounds = geneo._count_chunk_bounds(counts, step, 48)
    finally:
        geneo.GENEO_COUNT_SPLIT = saved
    assert bounds.tolist() == list(range(0, counts.size, step)) + [counts.size]


def test_the_iteration_uses_the_rule_the_chunks_are_cut_by():
    for count in (0, 1, 5, 16, 17, 60, 200):
        assert int(geneo._subspace_size(np.int64(count), 48)) == subspace(count, 48)


def test_split_chunks_select_the_same_functions(monkeypatch):
    """Channels in the upper half only: counts of 1 and of 4-5 in one chunk, which the split
    separates (a smaller subspace for the low counts); the same functions per subdomain,
    eigenvalues to the solver's tolerance and the same CG iterations as without it."""
    need("pardiso")
    c = np.ones((48, 48))  # cell coefficients: 47 x 47 nodes
    for r in range(26, 46, 3):
        c[r, 2:-2] = 1e4
    A = ddops.problems.diffusion_2d(c)
    d = ddops.Decomposition.from_grid((47, 47), (4, 4))
    seen = []
    iterate = geneo._subspace_eigh
    monkeypatch.setattr(geneo, "_subspace_eigh",
                        lambda *a, **k: seen.append((a[3], a[5])) or iterate(*a, **k))
    runs = {}
    for split in (1.0, geneo.GENEO_COUNT_SPLIT):
        monkeypatch.setattr(geneo, "GENEO_COUNT_SPLIT", split)
        seen.clear()
        runs[split] = (*geneo.geneo_basis(A, d, return_info=True), list(seen))
    (P1, i1, chunks1), (P2, i2, chunks2) = runs[1.0], runs[geneo.GENEO_COUNT_SPLIT]
    assert len(chunks2) > len(chunks1)
    assert min(block for _, block in chunks2) < min(block for _, block in chunks1)
    assert np.array_equal(i1.stats["kept_per_subdomain"], i2.stats["kept_per_subdomain"])
    assert P1.shape == P2.shape
    e1, e2 = i1.eigenvalues, i2.eigenvalues
    assert np.allclose(e1, e2, rtol=1e-4, atol=1e-6, equal_nan=True)
    b = np.random.default_rng(0).standard_normal(A.shape[0])
    its = []
    for P in (P1, P2):
        M = ddops.TwoLevelSchwarz(A, d, coarse_basis=P)
        count = [0]
        _, info = spla.cg(A, b, M=M, rtol=1e-8,
                          callback=lambda x, count=count: count.__setitem__(0, count[0] + 1))
        assert info == 0
        its.append(count[0])
    assert abs(its[0] - its[1]) <= 1


@pytest.mark.parametrize("split", [0.0, 0.5])
def test_any_split_fraction_keeps_the_chunks_valid(split, monkeypatch):
    monkeypatch.setattr(geneo, "GENEO_COUNT_SPLIT", split)
    counts = np.array([0, 0, 1, 1, 2, 3, 8, 8, 20, 40, 41, 60])
    bounds = geneo._count_chunk_bounds(counts, 5, 48)
    assert bounds[0] == 0 and bounds[-1] == counts.size and np.all(np.diff(bounds) > 0)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=0, max_size=80), st.data())
def test_a_chunk_gathers_exactly_its_members_entries(owners, data):
    """The entries of a chunk's members, gathered from the entries sorted by rank, are those
    a filter over every entry finds, subdomain by subdomain in the members' order (the
    chunks cut by the counts are not contiguous ranks)."""
    N = 10
    sub = np.array(owners, dtype=np.int64)
    rank = np.array(data.draw(st.permutations(range(N))), dtype=np.int64)
    order = np.argsort(rank[sub], kind="stable")
    off = np.searchsorted(rank[sub][order], np.arange(N + 1))
    members = np.array(data.draw(st.lists(st.integers(0, N - 1), unique=True, max_size=N)),
                       dtype=np.int64)
    got = geneo._members_entries(order, off, rank[members])
    expected = [e for m in members for e in np.flatnonzero(sub == m)]
    assert got.tolist() == expected
