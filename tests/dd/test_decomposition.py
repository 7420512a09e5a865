import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given
from hypothesis import strategies as st

from ddops import Decomposition, Decomposition1D
from ddops.testing import any_decompositions, decompositions, general_subdomains

from ..reference import reference_subdomains, subdomains_1d


def test_paper_sizes():
    assert Decomposition1D(256, 8, 2).sizes.tolist() == [34] + [37] * 6 + [34]
    assert Decomposition1D(256, 8, 2, kind="dof").sizes.tolist() == [34] + [36] * 6 + [34]


def test_interface_nodes_paper():
    # element: node 32k is unknown 32k - 1; dof: larger index next to the overlap centre
    assert Decomposition1D(256, 8).interface_nodes.tolist() == [32 * k - 1 for k in range(1, 8)]
    d = Decomposition1D(256, 8, kind="dof")
    assert d.interface_nodes.tolist() == [32 * k for k in range(1, 8)]
    for k, node in enumerate(d.interface_nodes):
        overlap = np.intersect1d(d.subdomains[k], d.subdomains[k + 1])
        centre = overlap.mean()
        assert node == int(np.floor(centre)) + 1


@given(decompositions())
def test_subdomains_match_definition(d):
    ref = subdomains_1d(d.n, d.num_subdomains, d.overlap, d.kind)
    assert len(d.subdomains) == len(ref)
    for a, b in zip(d.subdomains, ref):
        np.testing.assert_array_equal(a, b)
    core = d.core_bounds
    assert np.ptp(np.diff(core)) <= 1  # remainder spread: sizes differ by at most one


@given(general_subdomains())
def test_general_decomposition_keeps_the_given_sets(args):
    """Sorted, deduplicated input sets, in order; multiplicities counted from the input."""
    subs, n, interface = args
    d = Decomposition(subs, n, interface_nodes=interface)
    assert d.num_subdomains == len(subs) and d.num_dofs == n
    for got, given_set in zip(d.subdomains, subs):
        np.testing.assert_array_equal(got, np.sort(np.asarray(given_set)))
        assert got.dtype == np.int64
    counts = np.zeros(n, int)
    for given_set in subs:
        counts[np.asarray(given_set)] += 1
    np.testing.assert_array_equal(d.multiplicity, counts)
    np.testing.assert_array_equal(d.sizes, [len(g) for g in subs])
    assert d.max_size == max(len(g) for g in subs)
    np.testing.assert_array_equal(d.interface_nodes, [] if interface is None else interface)


@given(any_decompositions())
def test_partition_of_unity(d):
    total = sum(d.restriction(i).T.astype(float) @ sp.diags(d.weights(i)) @ d.restriction(i)
                for i in range(d.num_subdomains))
    eye = np.eye(d.num_dofs)
    np.testing.assert_allclose(total.toarray(), eye, rtol=0, atol=4 * np.finfo(float).eps)
    np.testing.assert_allclose(d.partition_of_unity().toarray(), eye, rtol=0,
                               atol=4 * np.finfo(float).eps)
    if d.multiplicity.max() <= 4:  # 1/m sums exactly for these m
        np.testing.assert_array_equal(d.partition_of_unity().toarray(), eye)


@given(any_decompositions())
def test_multiplicity_and_restriction(d):
    counts = np.zeros(d.num_dofs, int)
    for i, s in enumerate(reference_subdomains(d)):
        counts[s] += 1
        R = d.restriction(i)
        assert R.dtype == bool and R.format == "csr"
        np.testing.assert_array_equal(R.toarray().nonzero()[1], s)
        np.testing.assert_array_equal(d.weights(i), 1.0 / counts_full(d)[s])
    np.testing.assert_array_equal(d.multiplicity, counts)


def counts_full(d):
    c = np.zeros(d.num_dofs)
    for s in reference_subdomains(d):
        c[s] += 1
    return c


@given(any_decompositions(), st.sampled_from(["none", "sqrt", "full"]), st.booleans())
def test_stacked_restriction_blocks(d, weighting, padded):
    S = d.stacked_restriction(weighting, padded=padded)
    p = d.max_size if padded else None
    power = {"none": 0.0, "sqrt": 0.5, "full": 1.0}[weighting]
    for i, s in enumerate(reference_subdomains(d)):
        start = i * p if padded else d.offsets[i]
        block = S[start : start + len(s)].toarray()
        expected = d.restriction(i).toarray() * (d.weights(i) ** power)[:, None]
        np.testing.assert_allclose(block, expected, rtol=1e-15)
        if padded:
            assert S[start + len(s) : (i + 1) * p].nnz == 0


@pytest.mark.parametrize(
    "args,match",
    [
        ((8, 0), "subdomains must be >= 1"),
        ((8, 9), "n must be >= max"),
        ((8, 2, -1), "overlap must be >= 0"),
        ((16, 8, 3), "overlap=3 is larger than the smallest subdomain"),
        ((1, 1, 0, "element"), "n must be >= max"),
        ((8, 2, 1, "cells"), "kind must be one of"),
    ],
)
def test_invalid_configurations(args, match):
    with pytest.raises(ValueError, match=match):
        Decomposition1D(*args)


def test_invalid_types():
    with pytest.raises(TypeError, match="subdomains must be an integer"):
        Decomposition1D(16, 2.0)
    with pytest.raises(TypeError, match="overlap must be an integer"):
        Decomposition1D(16, 2, overlap=1.5)
    with pytest.raises(TypeError, match="n must be an integer"):
        Decomposition1D(16.0, 2)


def test_general_decomposition():
    d = Decomposition([[0, 1, 2], [2, 3, 4], [4, 5]], 6)
    assert d.multiplicity.tolist() == [1, 1, 2, 1, 2, 1]
    np.testing.assert_array_equal(d.partition_of_unity().toarray(), np.eye(6))
    with pytest.raises(ValueError, match=r"subdomains do not cover every unknown \(index 2"):
        Decomposition([[0, 1], [3]], 4)
    with pytest.raises(ValueError, match=r"subdomains do not cover every unknown \(index 2"):
        Decomposition([[0, 1], [0, 3], [1, 4]], 5)  # as many indices as unknowns, one gap
    with pytest.raises(ValueError, match=r"subdomains: indices must lie in \[0, 4\)"):
        Decomposition([[0, 7]], 4)
    with pytest.raises(ValueError, match="subdomains: subdomain 0 contains repeated indices"):
        Decomposition([[0, 0, 1]], 2)
    with pytest.raises(ValueError, match="subdomains: subdomain 1 is empty"):
        Decomposition([[0, 1], []], 2)
    with pytest.raises(ValueError, match="subdomains must contain at least one subdomain"):
        Decomposition([], 2)
    with pytest.raises(ValueError, match="num_dofs must be >= 1"):
        Decomposition([[0]], 0)
    with pytest.raises(ValueError, match="subdomain index i"):
        d.restriction(3)


def test_general_decomposition_rejects_bad_indices():
    with pytest.raises(TypeError, match="subdomains: subdomain 0 must hold integer indices"):
        Decomposition([[0.5, 1.7], [1, 2]], 3)
    with pytest.raises(ValueError, match="interface_nodes"):
        Decomposition([[0, 1], [1, 2]], 3, interface_nodes=[-1])


def _random_general_decomposition(rng):
    """Subdomains of random sizes and positions, multiplicities up to about 5."""
    n = int(rng.integers(3, 40))
    subs = [rng.choice(n, size=int(rng.integers(1, n + 1)), replace=False)
            for _ in range(int(rng.integers(1, 6)))]
    subs.append(np.arange(n))  # cover every unknown
    rng.shuffle(subs)
    return Decomposition(subs, n)


def _gather_cases():
    rng = np.random.default_rng(11)
    return [Decomposition1D(64, 4, 3), Decomposition1D(31, 5, 1, kind="dof")] + [
        _random_general_decomposition(rng) for _ in range(6)]


@pytest.mark.parametrize("d", _gather_cases(), ids=repr)
@pytest.mark.parametrize("weighting", ["none", "sqrt", "full"])
def test_gather_and_scatter_plan_match_restrictions(d, weighting):
    """``S F = w * F[gather]`` and ``S^T Y = Y[first] + extra @ Y``, against per-subdomain R_i."""
    rng = np.random.default_rng(0)
    N, p = d.num_subdomains, d.max_size
    F = rng.standard_normal((d.num_dofs, 3))
    Y = rng.standard_normal((N * p, 3))
    gather, w = d.padded_gather(), d.padded_weights(weighting)
    first, extra = d.scatter_plan()
    SF = w[:, None] * F[gather]
    StY = Y[first] + extra @ Y
    ref_StY = np.zeros_like(F)
    power = {"none": 0.0, "sqrt": 0.5, "full": 1.0}[weighting]
    for i in range(N):
        R = d.restriction(i).toarray()
        block = SF[i * p:(i + 1) * p]
        ni = R.shape[0]
        np.testing.assert_array_equal(block[:ni], (d.weights(i) ** power)[:, None] * (R @ F))
        np.testing.assert_array_equal(block[ni:], 0.0)
        ref_StY += R.T @ Y[i * p:i * p + ni]
    np.testing.assert_allclose(StY, ref_StY, rtol=0, atol=1e-13)
    # the overlap part holds exactly the repeated occurrences
    assert extra.nnz == int(d.multiplicity.sum()) - d.num_dofs


def test_padded_blocks_are_the_subdomain_matrices():
    import ddops

    A = ddops.poisson_2d(9)
    d = ddops.Decomposition.from_matrix(A, 5, overlap=1, seed=1)  # subdomains of unequal size
    blocks = d.padded_blocks(A, pad_value=7.0)
    dense = A.toarray()
    assert blocks.shape == (d.num_subdomains, d.max_size, d.max_size)
    for i, s in enumerate(d.subdomains):
        k = s.size
        np.testing.assert_array_equal(blocks[i, :k, :k], dense[np.ix_(s, s)])
        pad = blocks[i, k:, :].copy()
        np.testing.assert_array_equal(blocks[i, :k, k:], 0.0)
        np.fill_diagonal(pad[:, k:], 0.0)
        np.testing.assert_array_equal(pad, 0.0)
        np.testing.assert_array_equal(np.diagonal(blocks[i])[k:], 7.0)
