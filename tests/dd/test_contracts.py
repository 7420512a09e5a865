"""Contracts of the algebraic decomposition and coarse-space code, each checked against an
independent dense or closed-form construction: documented defaults, documented promises
(exact symmetry) and diagnostics that must name the right culprit."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import ddops
from ddops.dd import adaptive
from ddops.dd import geneo as geneo_mod
from ddops.dd.adaptive import agdsw_basis, geneo_basis
from ddops.dd.coarse import coarse_basis
from ddops.dd.decomposition import Decomposition
from ddops.dd.gdsw import coarse_matrix_checked, gdsw_basis, nicolaides_basis
from ddops.dd.partition import decomposition_from_grid, decomposition_from_matrix
from ddops.problems import diffusion_2d, high_contrast_channels, poisson_2d


def laplacian_2d(n):
    """The 5-point Laplacian (unscaled) on an n x n grid, built here from Kronecker products."""
    T = sp.diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1])
    eye = sp.identity(n)
    return (sp.kron(eye, T) + sp.kron(T, eye)).tocsr()


def dense_overlap(A, owner, layers):
    """Subdomains grown by ``layers`` graph layers, by dense Boolean reachability."""
    G = (A.toarray() != 0) | np.eye(A.shape[0], dtype=bool)
    subs = []
    for p in range(owner.max() + 1):
        member = owner == p
        for _ in range(layers):
            member = G[:, member].any(axis=1)
        subs.append(np.flatnonzero(member))
    return subs


def listed_columns(message):
    """The column indices a ``coarse_matrix_checked`` message names."""
    match = re.search(r"column\(s\) \[([0-9, ]+)(?:, \.\.\.)?\]", message)
    assert match, message
    return np.array([int(s) for s in match.group(1).split(",")])


# -- documented defaults ---------------------------------------------------------------------
def test_from_matrix_default_overlap_is_one():
    A = laplacian_2d(10)
    owner = np.repeat(np.arange(4), 25)  # four horizontal strips of 2.5 rows: labels given
    for build in (Decomposition.from_matrix, decomposition_from_matrix):
        default = build(A, 4, partitioner=owner)
        expected = dense_overlap(A, owner, 1)
        assert len(default.subdomains) == 4
        for got, want in zip(default.subdomains, expected):
            np.testing.assert_array_equal(got, want)
        # and it differs from overlap 0 and 2, so the comparison can tell
        for other in (0, 2):
            subs = dense_overlap(A, owner, other)
            assert any(not np.array_equal(g, w) for g, w in zip(default.subdomains, subs))


def test_default_h_counts_nodes_not_unknowns():
    m, b = 9, 2  # m x m nodes with two unknowns each, interleaved
    axis = np.arange(1, m + 1) / (m + 1)
    X, Y = np.meshgrid(axis, axis, indexing="xy")
    nodes = np.column_stack([X.ravel(), Y.ravel()])
    coords = np.repeat(nodes, b, axis=0)
    n = coords.shape[0]
    extent = (m - 1) / (m + 1)
    expected = np.sqrt(extent**2 / m**2)  # (V / n_nodes)^(1/2)
    half = n // 2
    d = Decomposition([np.arange(half + 4), np.arange(half - 4, n)], n, coordinates=coords,
                      block_size=b)
    assert d.h == pytest.approx(expected, rel=1e-14)
    assert not d.h == pytest.approx(np.sqrt(extent**2 / n), rel=1e-3)  # counting unknowns
    # the algebraic decomposition of a vector problem takes the same default
    A = sp.kron(laplacian_2d(m), sp.identity(b)).tocsr()
    d2 = decomposition_from_matrix(A, 3, partitioner="rcb", coordinates=coords, block_size=b)
    assert d2.h == pytest.approx(expected, rel=1e-14)


def _independent_fraction(u, v):
    """||v - proj_u v|| / ||v||, dense."""
    w = v - (u @ v) / (u @ u) * u
    return np.linalg.norm(w) / np.linalg.norm(v)


@pytest.mark.parametrize("frac, kept", [(1e-6, True), (1e-7, True), (1e-9, False),
                                        (1e-10, False)])
def test_default_dependence_rtol_keeps_and_drops(frac, kept):
    # the second null-space vector is independent of the first by a relative part frac
    # (well above or below the documented 1e-8) on one subdomain / interface component
    d = ddops.Decomposition1D(60, 3, overlap=2)
    n = d.num_dofs
    inside = np.setdiff1d(d.subdomains[1], np.union1d(d.subdomains[0], d.subdomains[2]))
    w = np.zeros(n)
    w[d.subdomains[1]] = 1.0 / d.multiplicity[d.subdomains[1]]
    e = np.zeros(n)
    e[inside[len(inside) // 2]] = 1.0  # a bump where subdomain 1 has weight 1
    m = np.count_nonzero(w)
    eps = frac * np.linalg.norm(w) / np.sqrt(1 - 1 / m)  # first-order size of the bump
    Z = np.column_stack([np.ones(n), np.ones(n) + eps * e])
    measured = _independent_fraction(w * Z[:, 0], w * Z[:, 1])  # dense, on subdomain 1
    assert measured == pytest.approx(frac, rel=0.05)
    Phi = nicolaides_basis(d, Z)
    # subdomains 0 and 2 see two equal vectors: one column each; subdomain 1 two if kept
    assert Phi.shape[1] == 3 + int(kept)
    # GDSW: a 4-node interface on which the second vector differs at one node
    A = laplacian_2d(4)
    owner = np.repeat(np.arange(2), 8)  # two 2 x 4 halves
    iface = np.array([4, 5, 6, 7])
    Z2 = np.ones((16, 2))
    Z2[iface[1], 1] += frac * 2.0 / np.sqrt(0.75)
    measured = _independent_fraction(Z2[iface, 0], Z2[iface, 1])
    assert measured == pytest.approx(frac, rel=0.05)
    assert gdsw_basis(A, owner, null_space=Z2, interface=iface).shape[1] == 1 + int(kept)


# -- documented promises ---------------------------------------------------------------------
def test_coarse_matrix_checked_is_bitwise_symmetric():
    n = 24
    A = diffusion_2d(high_contrast_channels(n, 1e6, margin=2, period=4))
    rng = np.random.default_rng(3)
    Phi = sp.random(n * n, 30, density=0.3, random_state=rng, format="csr")
    Phi.data = rng.standard_normal(Phi.data.size)
    naive = (Phi.T @ A @ Phi).toarray()
    assert not np.array_equal(naive, naive.T)  # rounding breaks the symmetry here
    A0 = coarse_matrix_checked(A, Phi)
    dense = A0.toarray()
    assert np.array_equal(dense, dense.T)
    Pd = Phi.toarray()
    ref = Pd.T @ (A.toarray() @ Pd)
    np.testing.assert_allclose(dense, ref, rtol=1e-10, atol=1e-10 * np.abs(ref).max())


# -- diagnostics that name the culprit -------------------------------------------------------
@pytest.mark.parametrize("seed", range(6))
def test_dependent_columns_named_are_combinations(seed):
    rng = np.random.default_rng(seed)
    A = laplacian_2d(12)
    n = A.shape[0]
    n0 = 40
    # local columns: each a random bump on a random window of unknowns
    cols = []
    for _ in range(n0):
        start = rng.integers(0, n - 20)
        v = np.zeros(n)
        v[start:start + 20] = rng.standard_normal(20)
        cols.append(v)
    P = np.column_stack(cols)
    dependent = rng.choice(n0, size=4, replace=False)
    for j in dependent:  # a combination of two other columns with overlapping support
        others = rng.choice(np.setdiff1d(np.arange(n0), dependent), size=2, replace=False)
        P[:, j] = P[:, others] @ rng.standard_normal(2)
    rank = np.linalg.matrix_rank(P)
    assert rank == n0 - 4
    with pytest.raises(ValueError, match="linearly dependent") as exc:
        coarse_matrix_checked(A, sp.csr_matrix(P))
    named = listed_columns(str(exc.value))
    assert 1 <= named.size <= n0 - rank
    for j in named:  # removing a named column keeps the span: it depends on the rest
        assert np.linalg.matrix_rank(np.delete(P, j, axis=1)) == rank, (j, dependent)


# -- adaptive coarse spaces: defaults ----------------------------------------------------------
def _channels(n, contrast):
    return diffusion_2d(high_contrast_channels(n, contrast, margin=2, period=4))


def test_agdsw_default_threshold():
    assert adaptive.AGDSW_THRESHOLD == 0.05
    n = 12
    owner = decomposition_from_grid((n, n), (2, 2)).owner
    # contrast 110: a channel mode with lambda = 0.0458 (< 0.05) on two edges; contrast 90:
    # lambda = 0.0550 (> 0.05); the other eigenvalues are above 0.78
    for contrast, count in [(110.0, 10), (90.0, 8)]:
        A = _channels(n, contrast)
        default = agdsw_basis(A, owner)
        explicit = agdsw_basis(A, owner, threshold=0.05)
        assert default.shape == explicit.shape == (n * n, count)
        assert (default != explicit).nnz == 0
    assert agdsw_basis(_channels(n, 110.0), owner, threshold=0.04).shape[1] == 8
    assert agdsw_basis(_channels(n, 90.0), owner, threshold=0.06).shape[1] == 10


def test_geneo_default_threshold():
    assert adaptive.GENEO_THRESHOLD == 0.25
    n = 16
    A = _channels(n, 30.0)
    d = decomposition_from_grid((n, n), (2, 2))
    default = geneo_basis(A, d)
    explicit = geneo_basis(A, d, threshold=0.25)
    assert default.shape == explicit.shape == (n * n, 4)
    assert (default != explicit).nnz == 0
    assert geneo_basis(A, d, threshold=0.5).shape[1] == 8
    assert geneo_basis(A, d, threshold=0.125).shape[1] == 0


def test_agdsw_default_cap_per_component():
    assert adaptive.MAX_PER_COMPONENT == 32
    n = 36
    A = laplacian_2d(n)
    owner = np.repeat(np.arange(2), n * n // 2)  # one interface component of 2 x 36 nodes
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        _, info = agdsw_basis(A, owner, threshold=1e3, return_info=True)
        _, info32 = agdsw_basis(A, owner, threshold=1e3, max_per_component=32,
                                return_info=True)
        _, info33 = agdsw_basis(A, owner, threshold=1e3, max_per_component=33,
                                return_info=True)
    assert info.selected.tolist()[0] > 33  # far more eigenvalues than the cap
    for i in (info, info32, info33):
        assert i.stats["dropped_dependent"] == 0
    assert info.kept.tolist() == info32.kept.tolist() == [32]
    assert info33.kept.tolist() == [33]


def test_geneo_default_cap_per_subdomain():
    assert adaptive.MAX_PER_SUBDOMAIN == 48
    n = 12
    A = poisson_2d(n)
    d = decomposition_from_grid((n, n), (2, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        _, info = geneo_basis(A, d, threshold=1e6, return_info=True)
        _, info48 = geneo_basis(A, d, threshold=1e6, max_per_subdomain=48, return_info=True)
        _, info47 = geneo_basis(A, d, threshold=1e6, max_per_subdomain=47, return_info=True)
    assert info.kept.tolist() == info48.kept.tolist() == [48, 48]
    assert info47.kept.tolist() == [47, 47]


@pytest.mark.parametrize("k,cap", [(1, 48), (2, 64), (3, 96)])
def test_geneo_default_cap_grows_with_the_null_space(k, cap):
    """Without max_per_subdomain the cap is max(48, 32 k) for k null-space vectors: every
    eigenvalue below the threshold 1e6, so each subdomain keeps exactly the cap."""
    assert geneo_mod.MAX_PER_NULL_VECTOR == 32
    assert geneo_mod.default_max_per_subdomain(k) == cap
    n = 24
    A = poisson_2d(n)
    d = decomposition_from_grid((n, n), (2, 1))
    x = np.tile(np.linspace(0.0, 1.0, n), n)
    Z = np.stack([np.ones(n * n), x, x ** 2][:k], axis=1)
    with pytest.warns(RuntimeWarning, match=f"max_per_subdomain={cap}"):
        _, info = geneo_basis(A, d, threshold=1e6, null_space=Z, return_info=True)
    assert info.kept.tolist() == [cap, cap]


# -- 1D grids ------------------------------------------------------------------------------
def dense_hats(x, peaks):
    """Hat functions with the given peaks, vanishing at 0 and 1, evaluated point by point."""
    nodes = np.concatenate([[0.0], peaks, [1.0]])
    out = np.zeros((x.size, peaks.size))
    for k in range(peaks.size):
        a, c, b = nodes[k], nodes[k + 1], nodes[k + 2]
        for i, xi in enumerate(x):
            if a < xi <= c:
                out[i, k] = (xi - a) / (c - a)
            elif c < xi < b:
                out[i, k] = (b - xi) / (b - c)
    return out


@pytest.mark.parametrize("build", [decomposition_from_grid, Decomposition.from_grid])
def test_grid_hats_on_1d_grid(build):
    n, N = 31, 4
    d = build((n,), (N,))
    assert d.coordinates.shape == (n, 1)
    x = np.arange(1, n + 1) / (n + 1)
    Phi = coarse_basis(d, "grid_hats")
    np.testing.assert_allclose(Phi.toarray(), dense_hats(x, np.arange(1, N) / N), atol=1e-15)
    Phi5 = coarse_basis(d, "grid_hats", 5)
    np.testing.assert_allclose(Phi5.toarray(), dense_hats(x, np.arange(1, 6) / 6), atol=1e-15)
    # a box partition has no interface nodes: the message says so, not "not 1D"
    with pytest.raises(ValueError, match="needs interface nodes"):
        coarse_basis(d, "interface_hats")


def test_interface_hats_with_column_coordinates():
    n = 29
    x = np.arange(1, n + 1) / (n + 1)
    peaks_at = np.array([9, 19])
    d = Decomposition([np.arange(0, 12), np.arange(8, 22), np.arange(18, n)], n,
                      interface_nodes=peaks_at, coordinates=x[:, None])
    Phi = coarse_basis(d, "interface_hats")
    np.testing.assert_allclose(Phi.toarray(), dense_hats(x, x[peaks_at]), atol=1e-15)
