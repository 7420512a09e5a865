"""The extension's interior problems analysed by the overlapping subdomains' order.

``TwoLevelSchwarz`` factorises the subdomain matrices first and hands PARDISO's elimination
order to the GDSW-type bases (``GDSWAnalysis.share_local_order``): the interior of part
``p`` is factorised in the order in which subdomain ``p`` eliminates those unknowns.
References: a loop over the subdomains (the order), PARDISO's own analysis (the fill of
an order) and the preconditioner built without the shared order (the same to rounding).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ddops
from ddops.dd.analysis import GDSWAnalysis
from ddops.linalg import local_solvers
from ddops.linalg.parallel import ThreadedBlocks
from ddops.precond.corrections import OverlappingCorrection
from tests._optional import need


@pytest.fixture(scope="module")
def channels():
    c = np.ones((30, 30))
    c[9, 2:-2] = c[20, 2:-2] = 1e4
    A = ddops.problems.diffusion_2d(c)
    return A, ddops.Decomposition.from_matrix(A, 6)


def _reference_order(d, positions, rows, parts, blocks):
    """Block by block, its rows sorted by their position in their part's subdomain."""
    at = {}
    for i in range(d.num_subdomains):
        for e in range(int(d.offsets[i]), int(d.offsets[i + 1])):
            at[(i, int(d.indices[e]))] = positions[e]
    order = []
    for b in np.unique(blocks):
        mine = np.flatnonzero(blocks == b)
        order += sorted(mine.tolist(), key=lambda r: at[(int(parts[r]), int(rows[r]))])
    return np.array(order)


def test_local_order_is_each_subdomain_s_order_restricted(channels):
    A, d = channels
    rng = np.random.default_rng(0)
    positions = rng.permutation(d.indices.size)
    kept = GDSWAnalysis()
    kept.share_local_order(d, positions)
    owner = d.owner
    # the interiors of parts 4, 1 and 3 stacked in that order (as the extension's chunks)
    rows = np.concatenate([np.flatnonzero(owner == p)[::2] for p in (4, 1, 3)])
    parts = owner[rows]
    blocks = np.repeat(np.arange(3), [np.count_nonzero(parts == p) for p in (4, 1, 3)])
    order = kept.local_order(rows, parts, blocks)
    np.testing.assert_array_equal(order, _reference_order(d, positions, rows, parts, blocks))
    # every subdomain's own rows (numbered within it) in the order of their positions
    reference = np.concatenate([np.argsort(positions[a:b])
                                for a, b in zip(d.offsets[:-1], d.offsets[1:])])
    np.testing.assert_array_equal(kept.subdomain_orders(), reference)
    kept.share_local_order(d, None)  # forgotten: no order
    assert kept.local_order(rows, parts, blocks) is None
    assert kept.subdomain_orders() is None


def test_no_order_for_an_unknown_outside_its_part_s_subdomain(channels):
    A, d = channels
    kept = GDSWAnalysis()
    kept.share_local_order(d, np.arange(d.indices.size))
    outside = np.setdiff1d(np.arange(A.shape[0]), d.subdomains[0])[:3]
    assert outside.size == 3
    assert kept.local_order(outside, np.zeros(3, dtype=np.int64), np.zeros(3)) is None
    with pytest.raises(ValueError, match="packed entries"):
        kept.share_local_order(d, np.arange(5))


def test_threaded_blocks_order_is_the_elimination_of_its_groups(channels):
    need("pardiso")
    A, d = channels
    S = d.stacked_restriction("none", padded=False)
    K = (S @ A @ S.T).tocsr()
    K = sp.block_diag([K[a:b, a:b] for a, b in zip(d.offsets[:-1], d.offsets[1:])],
                      format="csr")
    solver = ThreadedBlocks(K, d.offsets, groups=3, workers=1)
    order = solver.order
    np.testing.assert_array_equal(np.sort(order), np.arange(K.shape[0]))
    # each group's rows stay in the group, and its piece of the order gives its fill
    b = solver.bounds
    group = np.searchsorted(b, order, side="right") - 1
    assert (np.diff(group) >= 0).all()
    for k, part in enumerate(solver.parts):
        K_k = K[b[k]:b[k + 1], b[k]:b[k + 1]]
        inside = d.offsets[(d.offsets >= b[k]) & (d.offsets <= b[k + 1])] - b[k]
        block = np.repeat(np.arange(inside.size - 1), np.diff(inside))
        again = local_solvers.PardisoBlocks(K_k, inside, block,
                                            order=order[group == k] - b[k])
        assert again.nnz == part.nnz
        again.free()
    solver.free()


@pytest.mark.parametrize("solver", ["pardiso", "superlu"])
def test_elimination_positions_are_a_permutation_of_the_stack(channels, solver):
    need(solver)
    A, d = channels
    local = OverlappingCorrection(A, d, "additive", solver, np.dtype(np.float64),
                                  np.dtype(np.float64), "numpy")
    local.compute(A)
    positions = local.elimination_positions()
    if solver != "pardiso":
        assert positions is None
        return
    np.testing.assert_array_equal(np.sort(positions), np.arange(d.indices.size))
    order = local.solver.order
    np.testing.assert_array_equal(positions[order], np.arange(order.size))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("coarse", ["gdsw", "rgdsw", "agdsw"])
def test_the_shared_order_gives_the_same_preconditioner(channels, coarse, threads,
                                                        monkeypatch):
    need("pardiso")
    A, d = channels
    options = ddops.SchwarzOptions(coarse=coarse, local_solver="pardiso", threads=threads)
    shared = ddops.TwoLevelSchwarz(A, d, options=options)
    assert shared.coarse.analysis.shared > 0
    monkeypatch.setattr(OverlappingCorrection, "elimination_positions", lambda self: None)
    own = ddops.TwoLevelSchwarz(A, d, options=options)
    assert own.coarse.analysis.shared == 0
    X = np.random.default_rng(1).standard_normal((A.shape[0], 3))
    Y, Z = shared.matmat(X), own.matmat(X)
    assert np.abs(Y - Z).max() <= 1e-10 * np.abs(Z).max()
    P, Q = shared.coarse.Phi, own.coarse.Phi
    assert P.shape == Q.shape and np.abs(P - Q).max() <= 1e-12 * np.abs(Q).max()


@pytest.mark.parametrize("reuse", ["analysis", "ordering"])
def test_an_update_refactorises_and_shares_nothing_new(channels, reuse):
    need("pardiso")
    A, d = channels
    options = ddops.SchwarzOptions(coarse="gdsw", local_solver="pardiso",
                                   extension_reuse=reuse)
    M = ddops.TwoLevelSchwarz(A, d, options=options)
    shared = M.coarse.analysis.shared
    c = np.ones((30, 30))
    c[12, 2:-2] = 1e2  # other values, the same pattern
    A2 = ddops.problems.diffusion_2d(c)
    M.update(A2)
    # the kept analyses (or orderings) of the chunks serve the update
    assert M.coarse.analysis.shared == shared
    assert M.coarse.analysis.reused > 0
    fresh = ddops.TwoLevelSchwarz(A2, d, options=options)
    X = np.random.default_rng(3).standard_normal((A.shape[0], 2))
    assert np.abs(M.matmat(X) - fresh.matmat(X)).max() <= 1e-10 * np.abs(
        fresh.matmat(X)).max()


def test_geneo_with_neumann_matrices_takes_the_shared_order(monkeypatch):
    """GenEO with finite-element Neumann matrices factorises its eigenproblems in the
    subdomains' own elimination order (no ordering step): the same basis and
    preconditioner to rounding as with PARDISO's own ordering; without Neumann matrices
    (grown sets) nothing is shared."""
    need("pardiso")
    skfem = pytest.importorskip("skfem")
    from ddops.problems.fem import fem_elasticity_2d

    mesh = skfem.MeshTri.init_sqsymmetric().refined(3)
    E = np.where(mesh.p[0, mesh.t].mean(axis=0) > 0.5, 1e4, 1.0)
    A, X = fem_elasticity_2d(mesh=mesh, E=E)
    A = A.tocsr()
    Z = ddops.rigid_body_modes(X)
    d = ddops.Decomposition.from_matrix(A, 6, block_size=2)
    neumann = ddops.problems.fem_elasticity_neumann(mesh, d, E=E)

    def build(neumann):
        return ddops.TwoLevelSchwarz(A, d, options=ddops.SchwarzOptions(
            coarse="geneo", null_space=Z, local_solver="pardiso",
            geneo=ddops.GenEOOptions(neumann=neumann)))

    from ddops.dd import geneo

    given = []  # whether each inertia's factorisation was given its order
    inertia = geneo.pardiso_inertia
    monkeypatch.setattr(geneo, "pardiso_inertia",
                        lambda *a, **k: given.append(k.get("order") is not None)
                        or inertia(*a, **k))
    shared = build(neumann)
    assert shared.coarse_stats["shared_ordering"]
    assert given and all(given)
    assert not build(None).coarse_stats["shared_ordering"]
    monkeypatch.setattr(OverlappingCorrection, "elimination_positions", lambda self: None)
    own = build(neumann)
    assert not own.coarse_stats["shared_ordering"]
    assert shared.coarse_dim == own.coarse_dim > 0
    X = np.random.default_rng(5).standard_normal((A.shape[0], 2))
    Y, W = shared.matmat(X), own.matmat(X)
    assert np.abs(Y - W).max() <= 1e-10 * np.abs(W).max()


def test_geneo_from_a_alone_takes_the_shared_order(channels, monkeypatch):
    """GenEO's local matrices from ``A`` without oversampling live on the subdomains and
    have ``A_i``'s graph: its eigenproblems take the shared order too (the same
    preconditioner to rounding as with PARDISO's own ordering); oversampled (grown) sets
    take none."""
    need("pardiso")
    A, d = channels
    from ddops.dd import geneo

    given = []  # whether each inertia's factorisation was given its order
    inertia = geneo.pardiso_inertia
    monkeypatch.setattr(geneo, "pardiso_inertia",
                        lambda *a, **k: given.append(k.get("order") is not None)
                        or inertia(*a, **k))

    def build(**options):
        return ddops.TwoLevelSchwarz(A, d, options=ddops.SchwarzOptions(
            coarse="geneo", local_solver="pardiso", geneo=ddops.GenEOOptions(**options)))

    shared = build()
    assert shared.coarse_stats["shared_ordering"]
    assert given and all(given)
    given.clear()
    assert not build(oversampling=1).coarse_stats["shared_ordering"]
    assert given and not any(given)
    monkeypatch.setattr(OverlappingCorrection, "elimination_positions", lambda self: None)
    own = build()
    assert not own.coarse_stats["shared_ordering"]
    assert shared.coarse_dim == own.coarse_dim > 0
    X = np.random.default_rng(6).standard_normal((A.shape[0], 2))
    Y, W = shared.matmat(X), own.matmat(X)
    assert np.abs(Y - W).max() <= 1e-10 * np.abs(W).max()
