"""The contrast indicators (``skip_contrast``) of AGDSW and GenEO: which eigenproblems run.

AGDSW's is the spread of the diagonal of ``A`` over the closures of the parts around a
component, GenEO's over a subdomain and the subdomains overlapping it; both are checked
against constructions from explicit sets.  AGDSW's skipped components are checked against
the full AGDSW space: on these problems none of them selects anything in the full space,
and the components that still run give the full space's eigenpairs.  GenEO's skipped
subdomains keep their Nicolaides functions, and the others the full space's eigenpairs.
"""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import ddops
from ddops.dd import agdsw
from ddops.dd.adaptive import agdsw_basis, geneo_basis
from ddops.dd.gdsw import gdsw_basis, interface_components
from ddops.dd.indicators import component_contrast, subdomain_contrast
from ddops.problems import diffusion_2d
from tests.dd._elasticity import stiff_disks
from tests.dd.test_adaptive import in_span

N = 31


def half_channels(contrast):
    """Floating channels along x in the upper rows only: the components of the lower boxes
    see a homogeneous coefficient."""
    c = np.ones((N + 1, N + 1))
    for row in range(20, N - 2, 3):
        c[row, 3:N - 2] = contrast
    return diffusion_2d(c)


def node_traces(A, block_size):
    """Every unknown's node diagonal: the trace of its node's diagonal block."""
    node = np.arange(A.shape[0]) // block_size
    return np.bincount(node, weights=A.diagonal())[node]


def spread(values):
    """``max / min``, or inf where an entry is not positive."""
    return values.max() / values.min() if values.min() > 0 else np.inf


def reference_contrast(A, comps, block_size=1):
    """The spread of the node diagonals over the closures of the parts around every
    component, from explicit sets (a loop over components and parts)."""
    trace = node_traces(A, block_size)
    x, comp = comps.interface, comps.component
    part_sets = comps.part_sets()
    out = []
    for c in range(comps.num_components):
        closure = set()
        for p in part_sets[c]:
            closure |= set(np.flatnonzero(comps.owner == p).tolist())
            closure |= {int(x[j]) for j in range(x.size) if p in part_sets[comp[j]]}
        out.append(spread(trace[sorted(closure)]))
    return np.array(out)


@pytest.mark.parametrize("contrast", [1.0, 1e3])
def test_contrast_matches_the_explicit_closures(contrast):
    A = half_channels(contrast)
    d = ddops.Decomposition.from_grid((N, N), (4, 4))
    comps = interface_components(A, d.owner)
    got = component_contrast(A, comps)
    np.testing.assert_allclose(got, reference_contrast(A, comps), rtol=1e-14)
    if contrast == 1.0:
        # a grid Laplacian: the same diagonal everywhere
        np.testing.assert_array_equal(got, 1.0)
    else:
        assert got.max() > 0.1 * contrast and got.min() == 1.0


def test_contrast_of_nodes_uses_the_trace_of_their_blocks():
    A, d, _ = stiff_disks(11, 1e4, count=2, radius=0.1, seed=0, parts=6)
    comps = interface_components(A, d.owner, block_size=2)
    np.testing.assert_allclose(component_contrast(A, comps, 2),
                               reference_contrast(A, comps, 2), rtol=1e-14)


def test_a_zero_diagonal_is_never_homogeneous():
    A = ddops.poisson_2d(8).tolil()
    A[0, 0] = 0.0
    A = A.tocsr()
    owner = (np.arange(64) % 8 >= 4).astype(np.int64)
    comps = interface_components(A, owner)
    got = component_contrast(A, comps)
    assert np.isinf(got).all()  # the part of unknown 0 touches every component


@pytest.mark.parametrize("contrast", [1e2, 1e4, 1e6, 1e8])
def test_skipped_components_select_nothing_in_the_full_space(contrast):
    """Half the boxes see the channels: the indicator skips the components around the
    others, where the full space selects nothing, and the space is the full one."""
    A = half_channels(contrast)
    d = ddops.Decomposition.from_grid((N, N), (4, 4))
    full, info = agdsw_basis(A, d.owner, return_info=True, skip_contrast=0)
    assert info.stats["skipped_eigenproblems"] == 0
    Phi, skip = agdsw_basis(A, d.owner, return_info=True, skip_contrast=10)
    skipped = np.isnan(skip.eigenvalues)
    assert 0 < skipped.sum() == skip.stats["skipped_eigenproblems"] < skipped.size
    assert skip.stats["eigenproblems"] == (~skipped).sum()
    # nothing the skipped components would have selected, and the rest as the full space
    assert (info.selected[skipped] == 0).all()
    np.testing.assert_array_equal(skip.selected, info.selected)
    np.testing.assert_array_equal(skip.kept, info.kept)
    np.testing.assert_allclose(skip.eigenvalues[~skipped], info.eigenvalues[~skipped],
                               rtol=1e-9, atol=1e-13)
    assert Phi.shape == full.shape
    assert in_span(Phi.toarray(), full.toarray()) and in_span(full.toarray(), Phi.toarray())
    if contrast >= 1e4:  # the channels' functions are there (GDSW's are not enough)
        assert skip.kept.sum() > 0


@pytest.mark.parametrize("k", [1, 2, 3])
def test_channels_crossing_an_interface_are_never_skipped(k):
    """The closed form of the full space's test: ``k`` channels through three parts give
    ``k`` functions per interface, with the indicator on."""
    c = np.ones((N + 1, N + 1))
    c[3 + 5 * np.arange(k), 3:N - 2] = 1e6
    A = diffusion_2d(c)
    d = ddops.Decomposition.from_grid((N, N), (3, 1))
    _, info = agdsw_basis(A, d.owner, return_info=True, skip_contrast=10)
    assert info.stats["skipped_eigenproblems"] == 0
    assert info.kept.tolist() == [k, k]


def test_a_homogeneous_problem_is_gdsw_without_any_schur_complement(monkeypatch):
    A = ddops.poisson_2d(N)
    d = ddops.Decomposition.from_grid((N, N), (4, 4))

    def refuse(*args, **kwargs):
        raise AssertionError("a Schur complement was formed")

    monkeypatch.setattr(agdsw, "_interior_schur", refuse)
    monkeypatch.setattr(agdsw, "_schur_blocks_pardiso", refuse)
    Phi, info = agdsw_basis(A, d.owner, return_info=True, skip_contrast=10)
    assert info.stats["eigenproblems"] == 0 and np.isnan(info.eigenvalues).all()
    G = gdsw_basis(A, d.owner)
    assert Phi.shape == G.shape
    np.testing.assert_allclose(Phi.toarray(), G.toarray(), atol=1e-12 * abs(G).max())


def test_only_the_parts_around_needed_components_form_schur_complements(monkeypatch):
    A = half_channels(1e6)
    d = ddops.Decomposition.from_grid((N, N), (4, 4))
    comps = interface_components(A, d.owner)
    need = component_contrast(A, comps) > 10
    around = np.unique(sp.csr_matrix(comps.parts)[np.flatnonzero(need)].indices)
    assert 0 < around.size < comps.num_parts
    spans = []
    original = agdsw._interior_schur

    def record(A_II, A_IG, g_slot, entry_part, part, part_off, p0, p1, *rest):
        spans.append((p0, p1))
        return original(A_II, A_IG, g_slot, entry_part, part, part_off, p0, p1, *rest)

    monkeypatch.setattr(agdsw, "_interior_schur", record)
    monkeypatch.setattr(agdsw, "SCHUR_PARDISO_MIN_WIDTH", 10**9)
    agdsw_basis(A, d.owner, skip_contrast=10)
    assert sum(p1 - p0 for p0, p1 in spans) == around.size


def test_finite_element_neumann_matrices_with_skipped_parts():
    """The user's Neumann matrices follow the parts' new order: the components that run
    give the full space's eigenvalues and selection."""
    pytest.importorskip("skfem")
    from ddops.problems import (
        element_centroids,
        fem_elasticity_2d,
        rigid_body_modes,
        unit_square_mesh,
    )

    m = unit_square_mesh(15)

    def E(centroids):  # one stiff disk in a corner
        return np.where(np.linalg.norm(centroids - 0.2, axis=1) < 0.12, 1e6, 1.0)

    A, X = fem_elasticity_2d(mesh=m, E=E(element_centroids(m)))
    d = ddops.Decomposition.from_matrix(A, 8, overlap=1, block_size=2)
    _, _, Ns = fem_elasticity_2d(mesh=m, E=E(element_centroids(m)), neumann=d)
    Z = rigid_body_modes(X)
    kw = dict(null_space=Z, block_size=2, neumann=Ns, neumann_indices=d.subdomains,
              return_info=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        _, full = agdsw_basis(A, d.owner, skip_contrast=0, **kw)
        _, skip = agdsw_basis(A, d.owner, skip_contrast=10, **kw)
    ran = ~np.isnan(skip.eigenvalues)
    assert 0 < ran.sum() < ran.size
    np.testing.assert_allclose(skip.eigenvalues[ran], full.eigenvalues[ran], rtol=1e-8,
                               atol=1e-14)
    np.testing.assert_array_equal(skip.kept[ran], full.kept[ran])
    assert skip.kept[ran].sum() > 0


@pytest.mark.parametrize("bad, error", [(-1.0, ValueError), (np.inf, ValueError),
                                        ("10", TypeError), (True, TypeError)])
def test_bad_skip_contrast_names_the_argument(bad, error):
    A = ddops.poisson_2d(8)
    owner = (np.arange(64) % 8 >= 4).astype(np.int64)
    with pytest.raises(error, match="skip_contrast"):
        agdsw_basis(A, owner, skip_contrast=bad)
    with pytest.raises(error, match="skip_contrast"):
        ddops.AGDSWOptions(skip_contrast=bad)


# -- GenEO's indicator ----------------------------------------------------------------------
def reference_subdomain_contrast(A, d, block_size=1):
    """The spread of the node diagonals over every subdomain and the subdomains sharing an
    unknown with it, from explicit sets (a loop over pairs of subdomains)."""
    trace = node_traces(A, block_size)
    sets = [set(s.tolist()) for s in d.subdomains]
    return np.array([spread(trace[sorted(set().union(*(other for other in sets
                                                        if other & own)))])
                     for own in sets])


@pytest.mark.parametrize("contrast", [1.0, 1e3])
def test_subdomain_contrast_matches_the_explicit_neighbourhoods(contrast):
    A = half_channels(contrast)
    d = ddops.Decomposition.from_grid((N, N), (4, 4), overlap=1)
    got = subdomain_contrast(A.diagonal(), d)
    np.testing.assert_allclose(got, reference_subdomain_contrast(A, d), rtol=1e-14)
    if contrast == 1.0:
        np.testing.assert_array_equal(got, 1.0)
    else:  # the lower boxes are homogeneous with their neighbours, the rest are not
        assert got.max() > 0.1 * contrast and got.min() == 1.0
    E, de, _ = stiff_disks(11, 1e4, count=2, radius=0.1, seed=0, parts=6)
    np.testing.assert_allclose(subdomain_contrast(E.diagonal(), de, 2),
                               reference_subdomain_contrast(E, de, 2), rtol=1e-14)


@pytest.mark.parametrize("null_space", [False, True])
def test_geneo_skipped_subdomains_keep_their_nicolaides_functions(null_space):
    """Half the boxes see the channels: the indicator skips the others (their eigenvalues
    unknown, nan, no eigenvector kept), which keep ``D_i 1`` (the constants are the null
    space here, given or not); the subdomains that still run keep the full space's
    eigenpairs, and the skipped subdomains' Nicolaides functions with them span the basis."""
    A = half_channels(1e6)
    d = ddops.Decomposition.from_grid((N, N), (4, 4), overlap=1)
    Z = np.ones((N * N, 1)) if null_space else None
    full, info = geneo_basis(A, d, null_space=Z, return_info=True)
    Phi, skip = geneo_basis(A, d, null_space=Z, return_info=True, skip_contrast=10)
    skipped = reference_subdomain_contrast(A, d) <= 10
    assert 0 < skipped.sum() == skip.stats["skipped_by_contrast"] < skipped.size
    assert info.stats["skipped_by_contrast"] == 0
    assert np.isnan(skip.eigenvalues[skipped]).all()  # not computed
    ran = ~skipped
    np.testing.assert_array_equal(skip.selected[ran], info.selected[ran])
    np.testing.assert_array_equal(skip.kept[ran], info.kept[ran])
    # (the chunks hold other subdomains, and a subdomain's Ritz pairs are taken when they
    # settle: the smallest, near 1e-6 here, agree to about 1e-10 of the threshold)
    np.testing.assert_allclose(skip.eigenvalues[ran], info.eigenvalues[ran], rtol=1e-6,
                               atol=1e-10 * info.threshold)
    assert skip.kept[skipped].sum() == 0 and skip.kept[ran].sum() > 0
    # the span: the full space's functions of the subdomains that ran, D_i 1 of the rest
    # (dense, from the decomposition's weights)
    weights = 1.0 / d.multiplicity  # the "full" partition of unity
    nic = np.zeros((N * N, int(skipped.sum())))
    for c, i in enumerate(np.flatnonzero(skipped)):
        nic[d.subdomains[i], c] = weights[d.subdomains[i]]
    ran_cols = np.isin(info.column_group, np.flatnonzero(ran))
    expected = np.hstack([full.toarray()[:, ran_cols], nic])
    assert Phi.shape[1] == np.linalg.matrix_rank(expected)
    # (to the subspace iteration's accuracy: the chunks hold other subdomains, measured 1e-6)
    assert in_span(Phi.toarray(), expected, 1e-5) and in_span(expected, Phi.toarray(), 1e-5)
    kinds = skip.column_kind[np.isin(skip.column_group, np.flatnonzero(skipped))]
    assert kinds.size == skipped.sum() and set(kinds.tolist()) == {"null_space"}


@pytest.mark.parametrize("k", [1, 2, 3])
def test_geneo_never_skips_subdomains_with_channels(k):
    """``k`` channels through three boxes: every subdomain sees them, none is skipped, and
    the basis is the full space's (``k`` functions per subdomain or more)."""
    c = np.ones((N + 1, N + 1))
    c[3 + 5 * np.arange(k), 3:N - 2] = 1e6
    A = diffusion_2d(c)
    d = ddops.Decomposition.from_grid((N, N), (3, 1), overlap=1)
    full, info = geneo_basis(A, d, return_info=True)
    Phi, skip = geneo_basis(A, d, return_info=True, skip_contrast=10)
    assert skip.stats["skipped_by_contrast"] == 0
    np.testing.assert_array_equal(skip.kept, info.kept)
    assert (skip.kept >= k).all()
    assert (Phi != full).nnz == 0


def test_geneo_on_a_homogeneous_problem_skips_everything_into_nicolaides(monkeypatch):
    """3 x 3 boxes of the Laplacian: no eigenproblem at all (no chunk is factorised), and
    the basis spans the Nicolaides space of the same decomposition."""
    A = ddops.poisson_2d(N)
    d = ddops.Decomposition.from_grid((N, N), (3, 3), overlap=1)
    from ddops.dd import geneo

    def no_solve(*args, **kwargs):
        raise AssertionError("an eigenproblem ran")

    monkeypatch.setattr(geneo, "_shifted_factor", no_solve)
    monkeypatch.setattr(geneo, "_inertia_counts", no_solve)
    Phi = geneo_basis(A, d, skip_contrast=10).toarray()
    nic = ddops.dd.coarse.coarse_basis(d, "nicolaides").toarray()
    assert Phi.shape == nic.shape
    assert in_span(Phi, nic) and in_span(nic, Phi)


@pytest.mark.parametrize("bad, error", [(-1.0, ValueError), (np.inf, ValueError),
                                        ("10", TypeError), (True, TypeError)])
def test_bad_geneo_skip_contrast_names_the_argument(bad, error):
    A = ddops.poisson_2d(8)
    d = ddops.Decomposition.from_grid((8, 8), (2, 2), overlap=1)
    with pytest.raises(error, match="skip_contrast"):
        geneo_basis(A, d, skip_contrast=bad)
    with pytest.raises(error, match="skip_contrast"):
        ddops.GenEOOptions(skip_contrast=bad)
