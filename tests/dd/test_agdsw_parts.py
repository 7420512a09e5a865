"""AGDSW on a subset of the components (``owned_parts``), as each rank of a distributed
build computes it: the marked components' functions are the whole basis's, and the parts
around no marked component need no Neumann matrix."""

import warnings

import numpy as np
import pytest

import ddops
from ddops.dd.adaptive import agdsw_basis
from ddops.problems import diffusion_2d, high_contrast_channels
from tests.dd._elasticity import stiff_disks

N = 31


@pytest.fixture(scope="module")
def channels():
    A = diffusion_2d(high_contrast_channels(N, 1e4, margin=2, period=3))
    d = ddops.Decomposition.from_grid((N, N), (4, 4), overlap=1)
    return A, d


def first_parts(info):
    """The lowest part of every component, from the explicit part-sets."""
    return np.array([min(ps) for ps in info.components.part_sets()])


def test_first_parts_and_parts_around_match_the_part_sets(channels):
    A, d = channels
    _, info = agdsw_basis(A, d.owner, return_info=True)
    comps = info.components
    np.testing.assert_array_equal(comps.first_parts(), first_parts(info))
    mask = np.arange(comps.num_components) % 3 == 0
    expected = sorted({p for c in np.flatnonzero(mask) for p in comps.part_sets()[c]})
    np.testing.assert_array_equal(np.flatnonzero(comps.parts_around(mask)), expected)


def test_marked_components_get_the_whole_basis_functions(channels):
    A, d = channels
    full, info = agdsw_basis(A, d.owner, return_info=True)
    marked = np.zeros(d.num_subdomains, dtype=bool)
    marked[[0, 5, 6, 10]] = True
    part, sub = agdsw_basis(A, d.owner, return_info=True, owned_parts=marked)
    mine = marked[first_parts(info)]
    assert 0 < mine.sum() < mine.size
    # the eigenproblems of the marked components only, with the whole basis's eigenvalues
    assert sub.stats["eigenproblems"] == mine.sum()
    np.testing.assert_allclose(sub.eigenvalues[mine], info.eigenvalues[mine], rtol=1e-10)
    # exactly the whole basis's columns of those components
    cols = np.flatnonzero(mine[info.column_group])
    assert part.shape[1] == cols.size and mine[sub.column_group].all()
    np.testing.assert_allclose(part.toarray(), full[:, cols].toarray(),
                               atol=1e-12 * abs(full).max())


def test_neumann_only_for_the_parts_around_marked_components():
    from ddops.problems import fem_elasticity_2d

    A, d, Z, m, E = stiff_disks(15, 1e6, count=6, radius=0.08, seed=1, parts=8, mesh=True)
    _, _, Ns = fem_elasticity_2d(mesh=m, E=E, neumann=d)
    kw = dict(null_space=Z, block_size=2, neumann_indices=d.subdomains,
              return_info=True, skip_contrast=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        full, info = agdsw_basis(A, d.owner, neumann=Ns, **kw)
        P = info.components.parts.tocsr()
        marked = np.zeros(d.num_subdomains, dtype=bool)
        marked[0] = True
        mine = marked[first_parts(info)]
        around = np.unique(P[np.flatnonzero(mine)].indices)
        assert around.size < d.num_subdomains
        only = [N if i in around else None for i, N in enumerate(Ns)]
        part, sub = agdsw_basis(A, d.owner, neumann=only, owned_parts=marked, **kw)
        cols = np.flatnonzero(mine[info.column_group])
        np.testing.assert_allclose(part.toarray(), full[:, cols].toarray(),
                                   atol=1e-8 * abs(full).max())
        # a part around a marked component without its matrix
        missing = list(only)
        missing[int(around[-1])] = None
        with pytest.raises(ValueError, match=rf"neumann\[{int(around[-1])}\] is None"):
            agdsw_basis(A, d.owner, neumann=missing, owned_parts=marked, **kw)


@pytest.mark.parametrize("bad", [np.ones(3, dtype=bool), np.ones(16), np.ones((16, 1), bool)])
def test_bad_owned_parts(channels, bad):
    A, d = channels
    with pytest.raises(ValueError, match="owned_parts"):
        agdsw_basis(A, d.owner, owned_parts=bad)


def test_owned_parts_counts_only_this_builds_components(channels):
    A, d = channels
    marked = np.zeros(d.num_subdomains, dtype=bool)
    marked[[0, 5]] = True
    _, info = agdsw_basis(A, d.owner, return_info=True, owned_parts=marked, skip_contrast=0)
    mine = marked[first_parts(info)]
    # the others' components are neither solved nor "skipped", nor dropped functions
    assert info.stats["eigenproblems"] == mine.sum()
    assert info.stats["skipped_eigenproblems"] == 0
    assert info.stats["dropped_dependent"] == 0
    assert info.stats["largest_eigenproblem"] == np.bincount(
        info.components.component)[mine].max()


def test_neumann_may_be_any_iterable():
    pytest.importorskip("skfem")
    from ddops.problems import element_centroids, fem_poisson_2d, stiff_inclusions, unit_square_mesh

    m = unit_square_mesh(11)
    coef = stiff_inclusions(element_centroids(m), count=3, radius=0.1, contrast=1e4, seed=0)
    A, _ = fem_poisson_2d(mesh=m, coefficient=coef)
    d = ddops.Decomposition.from_matrix(A, 4, overlap=1)
    _, _, Ns = fem_poisson_2d(mesh=m, coefficient=coef, neumann=d)
    kw = dict(neumann_indices=d.subdomains, skip_contrast=0)
    P = agdsw_basis(A, d.owner, neumann=Ns, **kw)
    Q = agdsw_basis(A, d.owner, neumann=iter(Ns), **kw)
    np.testing.assert_array_equal(P.toarray(), Q.toarray())
    with pytest.raises(TypeError, match="neumann"):
        agdsw_basis(A, d.owner, neumann=3, **kw)


def test_chunks_run_over_parts_sorted_by_interface_width(channels, monkeypatch):
    """The chunks of the Schur complements take the parts by increasing ``|Gamma_p|`` (a
    chunk pads its parts to its widest; corner, edge and inner boxes have 2, 3 and 4
    neighbours), and the basis is that of chunks in any order: one part per chunk against
    the default chunks, the same to rounding."""
    from ddops.dd import agdsw

    A, d = channels
    default = agdsw_basis(A, d.owner, skip_contrast=0)
    widths = []
    schur = agdsw._interior_schur
    monkeypatch.setattr(agdsw, "_interior_schur",
                        lambda *a: widths.append((a[6], a[8])) or schur(*a))
    monkeypatch.setattr(agdsw, "FACTOR_CHUNK_ROWS", 1)  # one part per chunk
    single = agdsw_basis(A, d.owner, skip_contrast=0)
    assert len(widths) == d.num_subdomains
    widths = [w for _, w in sorted(widths)]  # in part order (the chunks may run on threads)
    assert np.all(np.diff(widths) >= 0) and widths[0] < widths[-1]
    assert single.shape == default.shape
    assert abs(single - default).max() <= 1e-10 * abs(default).max()
