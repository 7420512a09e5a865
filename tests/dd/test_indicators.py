"""AGDSW's contrast indicator (``skip_contrast``): which eigenproblems run.

The indicator is the spread of the diagonal of ``A`` over the closures of the parts around
a component, checked against a construction from explicit sets; the skipped components are
checked against the full AGDSW space: on these problems none of them selects anything in
the full space, and the components that still run give the full space's eigenpairs.
"""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import ddops
from ddops.dd import agdsw
from ddops.dd.adaptive import agdsw_basis
from ddops.dd.gdsw import gdsw_basis, interface_components
from ddops.dd.indicators import component_contrast
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


def reference_contrast(A, comps, block_size=1):
    """The spread of the node diagonals over the closures of the parts around every
    component, from explicit sets (a loop over components and parts)."""
    d = A.diagonal()
    node = np.arange(A.shape[0]) // block_size
    trace = np.bincount(node, weights=d)[node]
    x, comp = comps.interface, comps.component
    part_sets = comps.part_sets()
    out = []
    for c in range(comps.num_components):
        closure = set()
        for p in part_sets[c]:
            closure |= set(np.flatnonzero(comps.owner == p).tolist())
            closure |= {int(x[j]) for j in range(x.size) if p in part_sets[comp[j]]}
        values = trace[sorted(closure)]
        out.append(values.max() / values.min() if values.min() > 0 else np.inf)
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
