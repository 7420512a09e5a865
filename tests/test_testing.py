"""The strategies of ddops.testing, checked against independent dense constructions.

Every drawn matrix, decomposition and preconditioner is small, so the checks
are dense: eigenvalues with ``numpy.linalg.eigvalsh``, null spaces and
coarse spaces built from the index lists by hand.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import Phase, find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample
from scipy.sparse.csgraph import connected_components

import ddops
from ddops import Decomposition1D, TwoLevelSchwarz
from ddops.testing import (
    MATRIX_KINDS,
    SYMMETRIC_VARIANTS,
    TWO_LEVEL_KINDS,
    algebraic_decompositions,
    decompositions,
    spd_matrices,
    two_level_configs,
    two_level_schwarz,
)

# -- independent dense references ---------------------------------------------------------------


def private_counts(subdomains, num_dofs):
    """Per subdomain, how many of its unknowns no other subdomain holds (from the lists)."""
    count = np.zeros(num_dofs, dtype=int)
    for s in subdomains:
        count[np.asarray(s)] += 1
    return [int(np.sum(count[np.asarray(s)] == 1)) for s in subdomains]


def nicolaides(subdomains, num_dofs, Z):
    """Dense ``[D_i R_i^T R_i Z]_i`` with the multiplicity weights ``D_i``."""
    count = np.zeros(num_dofs)
    for s in subdomains:
        count[np.asarray(s)] += 1
    columns = []
    for s in subdomains:
        block = np.zeros_like(Z)
        block[s] = Z[s] / count[s, None]
        columns.append(block)
    return np.hstack(columns)


def spectrum(A):
    dense = A.toarray() if sp.issparse(A) else np.asarray(A)
    return np.linalg.eigvalsh(dense)


def assert_spd(dense, rtol=1e-12):
    np.testing.assert_allclose(dense, dense.T, rtol=0, atol=1e-12 * np.abs(dense).max())
    lam = np.linalg.eigvalsh(0.5 * (dense + dense.T))
    assert lam.min() > rtol * lam.max(), (lam.min(), lam.max())


# -- decompositions(): only decompositions with a full-rank Nicolaides space ---------------------


def test_the_old_degenerate_case_is_degenerate():
    """n = 4, N = 2, overlap 1 (element-based): both subdomains hold all unknowns."""
    d = Decomposition1D(4, 2, overlap=1, kind="element")
    assert [s.tolist() for s in d.subdomains] == [[0, 1, 2], [0, 1, 2]]
    Phi = nicolaides(d.subdomains, d.num_dofs, np.ones((d.num_dofs, 1)))
    assert np.linalg.matrix_rank(Phi) == 1 < d.num_subdomains
    with pytest.raises(ValueError, match="singular"):
        TwoLevelSchwarz(ddops.poisson_1d(4), d, coarse_basis="nicolaides")


def test_decompositions_never_draws_the_degenerate_case():
    # the space of max_n = 4 is small enough for hypothesis to search it through
    with pytest.raises(NoSuchExample):
        find(decompositions(max_n=4),
             lambda d: (d.n, d.num_subdomains, d.overlap, d.kind) == (4, 2, 1, "element"),
             settings=settings(max_examples=200, database=None))


@settings(max_examples=60)
@given(decompositions(max_n=24))
def test_drawn_decompositions_have_a_full_rank_nicolaides_space(d):
    assert min(private_counts(d.subdomains, d.num_dofs)) >= 1
    Phi = nicolaides(d.subdomains, d.num_dofs, np.ones((d.num_dofs, 1)))
    assert np.linalg.matrix_rank(Phi) == d.num_subdomains
    A = ddops.poisson_1d(d.n, d.kind)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        TwoLevelSchwarz(A, d, coarse_basis="nicolaides")
        if d.num_subdomains >= 2:
            TwoLevelSchwarz(A, d)  # the default coarse space, interface hats


@given(decompositions(max_n=24, min_subdomains=2))
def test_min_subdomains(d):
    assert d.num_subdomains >= 2


@pytest.mark.parametrize("kind", ["element", "dof"])
def test_the_overlap_bound_is_the_largest_valid_one(kind):
    """Every overlap below the bound is drawable, every one above leaves a subdomain
    without an unknown of its own (so the strategy excludes nothing valid)."""
    from ddops.testing import _max_private_overlap

    for n in range(4, 27):
        for N in range(2, n // 2 + 1):
            bound = _max_private_overlap(n, N, kind)
            for overlap in range(0, n // N + 1):
                try:
                    d = Decomposition1D(n, N, overlap=overlap, kind=kind)
                except ValueError:
                    continue
                valid = min(private_counts(d.subdomains, d.num_dofs)) >= 1
                assert valid == (overlap <= bound), (n, N, overlap)


# -- spd_matrices -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", MATRIX_KINDS)
@settings(max_examples=15)
@given(data=st.data())
def test_spd_matrices_are_spd(kind, data):
    A = data.draw(spd_matrices(kind, max_n=30))
    assert sp.isspmatrix_csr(A) and A.dtype == np.float64 and A.has_sorted_indices
    assert 1 <= A.shape[0] <= 30 and A.shape[0] == A.shape[1]
    assert (A != A.T).nnz == 0  # symmetric to the bit
    lam = spectrum(A)
    assert lam.min() > 1e-10 * lam.max()
    if kind == "elasticity":
        assert A.shape[0] % 2 == 0
    else:  # weakly diagonally dominant with non-positive off-diagonal entries
        dense = A.toarray()
        off = dense - np.diag(np.diag(dense))
        scale = np.abs(dense).max()
        assert off.max() <= 1e-12 * scale
        assert np.all(np.diag(dense) - np.abs(off).sum(axis=1) >= -1e-12 * scale)


@pytest.mark.parametrize("kind", MATRIX_KINDS)
@settings(max_examples=15)
@given(data=st.data())
def test_null_space_matrices_have_exactly_the_given_kernel(kind, data):
    A, Z = data.draw(spd_matrices(kind, max_n=30, null_space=True))
    k = {"graph": 1, "fem": 1, "elasticity": 3}[kind]
    assert Z.shape == (A.shape[0], k) and np.linalg.matrix_rank(Z) == k
    assert (A != A.T).nnz == 0
    dense = A.toarray()
    scale = np.abs(dense).max()
    assert np.abs(dense @ Z).max() <= 1e-12 * scale * np.abs(Z).max()
    lam = spectrum(A)
    zero = np.abs(lam) <= 1e-10 * lam.max()
    assert zero.sum() == k and lam[~zero].min() > 0  # semidefinite, kernel exactly span(Z)


def test_spd_matrices_arguments():
    with pytest.raises(ValueError, match="kinds"):
        spd_matrices("unknown")
    with pytest.raises(ValueError, match="max_n"):
        spd_matrices(max_n=4)


# -- algebraic_decompositions -------------------------------------------------------------------


def rigid_modes(points):
    x = points - points.mean(axis=0)
    Z = np.zeros((2 * len(x), 3))
    Z[0::2, 0] = Z[1::2, 1] = 1.0
    Z[0::2, 2], Z[1::2, 2] = -x[:, 1], x[:, 0]
    return Z


@settings(max_examples=40)
@given(algebraic_decompositions(max_n=30))
def test_algebraic_decompositions_are_valid(case):
    A, d = case
    n = A.shape[0]
    assert d.num_dofs == n and d.owner.shape == (n,)
    b = d.block_size
    subdomains = [np.asarray(s) for s in d.subdomains]
    # every unknown covered, the parts inside their subdomains and connected in the graph of
    # A's stored pattern (a structured P1 mesh stores exact zeros on its diagonal edges) on
    # the nodes (b unknowns each; the two unknowns of an elasticity node may be uncoupled)
    assert np.array_equal(np.unique(np.concatenate(subdomains)), np.arange(n))
    node = sp.csr_matrix((np.ones(n), (np.arange(n), np.arange(n) // b)))
    pattern = sp.csr_matrix((np.ones(A.nnz), A.indices, A.indptr), shape=A.shape)
    G = sp.csr_matrix(node.T @ pattern @ node)
    for i, s in enumerate(subdomains):
        part = np.flatnonzero(d.owner == i)
        assert part.size and np.isin(part, s).all()
        nodes = np.unique(part // b)
        assert connected_components(G[nodes][:, nodes])[0] == 1
    # unknowns of their own: one, two nodes for elasticity
    assert min(private_counts(subdomains, n)) >= (1 if b == 1 else 4)
    Z = np.ones((n, 1)) if b == 1 else rigid_modes(np.asarray(d.coordinates)[::2])
    Phi = nicolaides(subdomains, n, Z)
    assert np.linalg.matrix_rank(Phi) == Phi.shape[1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        TwoLevelSchwarz(A, d, coarse_basis="nicolaides", null_space=None if b == 1 else Z)


@settings(max_examples=15)
@given(algebraic_decompositions(max_n=30, min_subdomains=2))
def test_algebraic_decompositions_min_subdomains(case):
    assert case[1].num_subdomains >= 2


# -- two_level_configs / two_level_schwarz ------------------------------------------------------


@settings(max_examples=40)
@given(two_level_configs(max_n=30))
def test_every_drawn_configuration_constructs_an_spd_preconditioner(config):
    A, d, options = config
    assert set(options) <= {"coarse_basis", "variant", "local_solver", "null_space"}
    assert options["variant"] in SYMMETRIC_VARIANTS
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        M = TwoLevelSchwarz(A, d, **options)
    dense = M @ np.eye(A.shape[0])  # column by column
    assert_spd(dense)
    if options["coarse_basis"] is not None:
        assert M.coarse_dim > 0


@settings(max_examples=10)
@given(two_level_schwarz(kinds="1d", variants=("restricted",), max_n=30))
def test_two_level_schwarz_draws_constructed_preconditioners(case):
    M, A = case
    assert isinstance(M, TwoLevelSchwarz) and M.shape == A.shape
    assert M.variant == "restricted"
    x = np.ones(A.shape[0])
    assert np.all(np.isfinite(M @ x))


@pytest.mark.parametrize("kind", TWO_LEVEL_KINDS)
def test_each_kind_reaches_a_two_level_space(kind):
    A, d, options = find(two_level_configs(kinds=kind),
                         lambda c: c[2]["coarse_basis"] in ("gdsw", "interface_hats"),
                         settings=settings(max_examples=200, database=None,
                                           phases=[Phase.generate]))  # no shrinking
    assert d.num_subdomains >= 2


def test_two_level_configs_arguments():
    with pytest.raises(ValueError, match="no kind supports"):
        two_level_configs(kinds="elasticity", coarse_bases=("geneo", "agdsw"))
    with pytest.raises(ValueError, match="kinds"):
        two_level_configs(kinds=("1d", "unknown"))


@settings(max_examples=30)
@given(two_level_configs(kinds=("1d", "graph", "fem"), coarse_bases=("geneo", "agdsw"),
                         max_n=16))
def test_small_adaptive_configurations_construct(config):
    """Small problems are where GenEO may select nothing and AGDSW may have no interior."""
    A, d, options = config
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        M = TwoLevelSchwarz(A, d, **options)
    assert M.coarse_dim > 0
    assert_spd(M @ np.eye(A.shape[0]))
