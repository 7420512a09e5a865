"""GenEO's inertia count (PARDISO): which eigenproblems run, and how many pairs they select.

With PARDISO installed, one symmetric indefinite factorisation of ``N_i - tau B_i`` per chunk
of subdomains counts the eigenvalues below the threshold of every subdomain (Sylvester's
law of inertia).  A subdomain whose count the kernel of ``N_i`` accounts for (the constants
of a floating subdomain, or the given null space) is settled without an eigensolve; the
others iterate until their Ritz values below the threshold are as many as the count.  The
references are dense: ``scipy.linalg.eigh`` of the explicitly formed pencils.
"""

import warnings

import numpy as np
import pytest
import scipy.linalg as sla

import ddops
from ddops.dd import geneo
from ddops.dd.adaptive import geneo_basis
from ddops.problems import diffusion_2d
from tests._optional import need
from tests.dd.test_adaptive import channels, cut_neumann, in_span

N = 31


def half_channels(contrast=1e6):
    """Floating channels (contrast ``contrast``) in the upper half only: the boxes of the
    lower half that touch no boundary float with nothing but the constants below the
    threshold, those of the upper half have a channel mode each."""
    c = np.ones((N + 1, N + 1))
    for row in range(18, N - 2, 3):
        c[row, 3:N - 2] = contrast
    return diffusion_2d(c)


def dense_pencils(A, d):
    """``(N_i, B_i)`` of every subdomain: ``A`` with its outside couplings cut, and
    ``D_i A_i D_i``."""
    Ad = A.toarray()
    out = []
    for idx in d.subdomains:
        Di = np.diag(1.0 / d.multiplicity[idx])
        out.append((cut_neumann(A, idx), Di @ Ad[np.ix_(idx, idx)] @ Di))
    return out


def record_settled(monkeypatch):
    """The subdomains that :func:`geneo._kernel_selection` settles (no eigensolve)."""
    settled = []
    original = geneo._kernel_selection

    def spy(members, *args):
        settled.extend(members.tolist())
        return original(members, *args)

    monkeypatch.setattr(geneo, "_kernel_selection", spy)
    return settled


def test_inertia_settles_exactly_the_subdomains_with_only_their_kernel_below(monkeypatch):
    need("pardiso")
    A = half_channels()
    d = ddops.Decomposition.from_grid((N, N), (4, 4), overlap=1)
    settled = record_settled(monkeypatch)
    Phi, info = geneo_basis(A, d, return_info=True)
    tau = info.threshold
    below = tau * (1 - geneo.THRESHOLD_TIE_RTOL)
    P = Phi.toarray()
    assert info.stats["skipped_eigenproblems"] == len(settled) >= 2
    for i, (Ni, Bi) in enumerate(dense_pencils(A, d)):
        idx = d.subdomains[i]
        lam, V = sla.eigh(Ni, Bi)
        floating = abs(Ni.sum(axis=1)).max() <= 1e-10 * np.abs(Ni).max()
        count = int((lam < below).sum())
        # the count is exact (not an upper bound of it)...
        assert info.selected[i] == count, i
        # ... and a subdomain is settled without an eigensolve exactly when the constants of
        # a floating subdomain (or nothing) are all it has below the threshold
        assert (i in settled) == (count == int(floating)), i
        cols = P[:, info.column_group == i]
        ref = np.zeros((A.shape[0], count))
        ref[idx] = np.diag(1.0 / d.multiplicity[idx]) @ V[:, :count]
        assert cols.shape[1] == count
        assert in_span(cols, ref, 1e-3) and in_span(ref, cols, 1e-3)
        if i in settled:  # not computed above the threshold; 0 for the constants
            assert info.eigenvalues[i] == 0.0 if floating else np.isnan(info.eigenvalues[i])


def test_inertia_with_a_null_space_adds_nothing_where_the_kernel_is_all(monkeypatch):
    """With the constants as null space, a settled subdomain adds no eigenvector (its
    Nicolaides function is there already), and the basis is that of the iteration without
    the inertia, to the iteration's accuracy."""
    need("pardiso")
    A = half_channels()
    d = ddops.Decomposition.from_grid((N, N), (4, 4), overlap=1)
    Z = np.ones((A.shape[0], 1))
    settled = record_settled(monkeypatch)
    Phi, info = geneo_basis(A, d, null_space=Z, return_info=True)
    assert len(settled) >= 2
    assert np.all(info.kept[settled] == 0)
    monkeypatch.setattr(geneo, "GENEO_INERTIA", False)
    Ref, ref = geneo_basis(A, d, null_space=Z, return_info=True)
    np.testing.assert_array_equal(info.selected, ref.selected)
    assert Phi.shape == Ref.shape
    P, R = Phi.toarray(), Ref.toarray()
    assert in_span(P, R, 1e-4) and in_span(R, P, 1e-4)


def test_inertia_says_what_the_iteration_misses_inside_a_cluster(monkeypatch):
    """At ``threshold=1`` the channels' pencils have a cluster of eigenvalues just below and
    at 1, where the subspace iteration stalls: the warning counts the eigenvalues that the
    inertia finds below the threshold and the iteration does not (dense reference)."""
    need("pardiso")
    monkeypatch.setattr(geneo, "GENEO_KRYLOV", False)  # (the block Krylov method stalls less)
    n = 23
    A = channels(n, 1e6)
    d = ddops.Decomposition.from_grid((n, n), (3, 3), overlap=1)
    with pytest.warns(RuntimeWarning) as caught:  # (and the iteration's limit)
        _, info = geneo_basis(A, d, threshold=1.0, return_info=True)
    below = 1.0 - geneo.THRESHOLD_TIE_RTOL
    exact = np.array([int((sla.eigh(Ni, Bi, eigvals_only=True) < below).sum())
                      for Ni, Bi in dense_pencils(A, d)])
    missing = int((exact - info.selected).sum())
    assert missing > 0 and np.all(info.selected <= exact)
    message = next(str(w.message) for w in caught if "inertia" in str(w.message))
    assert f"counts {missing} eigenvalue(s)" in message


@pytest.mark.parametrize("inertia,stop", [(False, "settled"), (True, "settled"),
                                          (True, "count")])
def test_inertia_and_threads_give_the_same_basis(inertia, stop, monkeypatch):
    """The regrouped chunks are independent: one and two threads, the same basis bitwise
    (also where each chunk stops at the inertia's count: the chunks do not depend on the
    threads)."""
    if inertia:
        need("pardiso")
    monkeypatch.setattr(geneo, "GENEO_INERTIA", inertia)
    A = half_channels()
    d = ddops.Decomposition.from_grid((N, N), (4, 4), overlap=1)
    from threadpoolctl import threadpool_limits

    bases = []
    for threads in (1, 2):
        with threadpool_limits(threads), warnings.catch_warnings():
            warnings.simplefilter("error")
            bases.append(geneo_basis(A, d, eigen_stop=stop).toarray())
    np.testing.assert_array_equal(bases[0], bases[1])


@pytest.mark.parametrize("seed", range(6))
def test_block_orders_carry_every_blocks_own_order_to_another_stack(seed):
    """GenEO's shifted factorisation reuses the inertia's ordering on another stack of the
    same blocks: split per block (``_block_orders``) and put together for a new stack
    (``_chunk_order``), every block's real rows keep their order among themselves (all a
    block-diagonal factorisation's fill depends on), checked row by row against the
    original order."""
    rng = np.random.default_rng(seed)
    width, m = 7, 5
    sizes = rng.integers(1, width + 1, size=m)
    order = rng.permutation(m * width)
    local = geneo._block_orders(order, width, sizes)
    expected = [r % width for j in range(m) for r in order
                if r // width == j and r % width < sizes[j]]
    assert local.tolist() == expected
    per_block = np.split(local, np.cumsum(sizes)[:-1])
    pick = rng.permutation(m)[:3]
    stacked = geneo._chunk_order(np.concatenate([per_block[j] for j in pick]), sizes[pick],
                                 width)
    assert sorted(stacked.tolist()) == list(range(3 * width))
    for q, j in enumerate(pick):
        rows = [r - q * width for r in stacked if r // width == q and r % width < sizes[j]]
        assert rows == per_block[j].tolist()
    # within a block the padding rows follow the real ones
    assert all(stacked[q * width + r] == q * width + r
               for q, j in enumerate(pick) for r in range(sizes[j], width))


def test_the_shifted_factorisation_takes_the_inertia_ordering(monkeypatch):
    """Every factorisation of ``N + sigma B`` after an inertia count uses the ordering of
    that count (``GENEO_SHARED_ORDERING``), and the basis is the one with orderings of its
    own: the same eigenvalues to rounding and the same span."""
    need("pardiso")
    A = half_channels()
    d = ddops.Decomposition.from_grid((N, N), (4, 4), overlap=1)
    with monkeypatch.context() as m:
        m.setattr(geneo, "GENEO_SHARED_ORDERING", False)
        reference, ref_info = geneo_basis(A, d, return_info=True)
    # (the default, not set here)
    orderings = []
    factorize = geneo.factorize_blocks

    def spy(*args, **kwargs):
        out = factorize(*args, **kwargs)
        orderings.append(out.ordering)
        return out

    monkeypatch.setattr(geneo, "factorize_blocks", spy)
    shared, info = geneo_basis(A, d, return_info=True)
    assert orderings and set(orderings) == {"given"}
    assert shared.shape == reference.shape
    np.testing.assert_array_equal(info.selected, ref_info.selected)
    known = np.isfinite(ref_info.eigenvalues)
    np.testing.assert_array_equal(np.isfinite(info.eigenvalues), known)
    np.testing.assert_allclose(info.eigenvalues[known], ref_info.eigenvalues[known],
                               rtol=1e-10, atol=1e-12 * info.threshold)
    assert in_span(reference.toarray(), shared.toarray(), tol=1e-8)
    assert in_span(shared.toarray(), reference.toarray(), tol=1e-8)
    # the same coarse space to 1e-10: the orthogonal projectors onto the two spans (dense)
    R, S = reference.toarray(), shared.toarray()
    np.testing.assert_allclose(S @ np.linalg.pinv(S), R @ np.linalg.pinv(R), atol=1e-10)


def test_the_eigenproblems_run_in_chunks_of_at_most_the_chunk_rows(monkeypatch):
    """Every shifted factorisation (one per chunk of subdomains) holds at most
    ``GENEO_CHUNK_ROWS`` padded rows, or one subdomain where a subdomain is wider; smaller
    chunks give the same selection and the same space to the eigensolver's accuracy."""
    A = half_channels()
    d = ddops.Decomposition.from_grid((N, N), (4, 4), overlap=1)
    reference, ref_info = geneo_basis(A, d, return_info=True)
    rows = []
    shifted = geneo._shifted_factor

    def spy(Ns, Bs, sigma, m, width, *args):
        rows.append((m, width))
        return shifted(Ns, Bs, sigma, m, width, *args)

    monkeypatch.setattr(geneo, "_shifted_factor", spy)
    for limit in (geneo.GENEO_CHUNK_ROWS, 200):
        monkeypatch.setattr(geneo, "GENEO_CHUNK_ROWS", limit)
        rows.clear()
        Phi, info = geneo_basis(A, d, return_info=True)
        assert rows and all(m * width <= max(limit, width) for m, width in rows)
        np.testing.assert_array_equal(info.selected, ref_info.selected)
        assert Phi.shape == reference.shape
        # (the Ritz vectors settle with their values, to GENEO_RESIDUAL_RTOL of the
        # threshold below half of it and to 1e-3 of it above: 1.6e-4 apart here with 200
        # rows, by the block Krylov method; the default is the reference's chunks)
        assert in_span(reference.toarray(), Phi.toarray(), tol=1e-3)
    assert len(rows) > 2  # 200 rows: several chunks where the default has one or two


def test_inertia_orders_the_node_graph_of_oversampled_elasticity(monkeypatch):
    """2D elasticity from ``A`` alone (oversampled local matrices, block size 2): the padded
    widths of the chunks are even, every chunk's inertia orders its node graph (whole nodes,
    :func:`~ddops.linalg.local_solvers.node_minimum_degree`), and the space is the one with
    PARDISO's ordering of the unknowns (``PARDISO_NODE_MINIMUM_DEGREE`` off): the same
    counts and functions, each space in the other's span to GenEO's tolerance."""
    need("pardiso")
    from ddops.linalg import local_solvers
    from tests.dd._elasticity import stiff_disks

    # (size groups of 232, 290 and 363 rows: an odd one, rounded up to 364)
    A, d, Z = stiff_disks(12, 1e4, count=6, radius=0.12, parts=3)
    widths = []
    original = local_solvers.node_minimum_degree

    def recorded(K, block_size):
        order = original(K, block_size)
        pairs = order.reshape(-1, 2)
        assert block_size == 2 and np.all(pairs[:, 0] % 2 == 0)
        assert np.all(pairs[:, 1] == pairs[:, 0] + 1)
        widths.append(K.shape[0])
        return order

    monkeypatch.setattr(local_solvers, "node_minimum_degree", recorded)
    chunks = []
    counts = geneo._inertia_counts

    def spy(Ns, Bs, below, m, width, order=None, node_size=1):
        chunks.append((m, width, node_size, order is None))
        return counts(Ns, Bs, below, m, width, order, node_size)

    monkeypatch.setattr(geneo, "_inertia_counts", spy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # not diagonally dominant
        nodes, info = geneo_basis(A, d, null_space=Z, return_info=True)
        assert chunks and all(w % 2 == 0 and s == 2 and own for _, w, s, own in chunks)
        assert sorted(widths) == sorted(m * w for m, w, _, _ in chunks)
        monkeypatch.setattr(local_solvers, "PARDISO_NODE_MINIMUM_DEGREE", False)
        chunks.clear()
        ordered = len(widths)
        unknowns, info_off = geneo_basis(A, d, null_space=Z, return_info=True)
    # off: no node graph, the widths as the size groups give them
    assert chunks and all(s == 1 for _, _, s, _ in chunks) and len(widths) == ordered
    assert info.stats["coarse_dim"] == info_off.stats["coarse_dim"] > Z.shape[1]
    P, Q = nodes.toarray(), unknowns.toarray()
    assert in_span(P, Q, 1e-5) and in_span(Q, P, 1e-5)


def test_inertia_keeps_its_own_ordering_where_a_set_splits_nodes(monkeypatch):
    """With ``block_size = 2`` on a matrix whose subdomains hold whole nodes, the chunks'
    inertia orders the node graph; where one subdomain has an odd size (a split node) it
    does not, and the padded widths stay as the size groups give them."""
    need("pardiso")
    A = ddops.poisson_2d(12).tocsr()
    seen = []
    counts = geneo._inertia_counts

    def spy(Ns, Bs, below, m, width, order=None, node_size=1):
        seen.append((width, node_size))
        return counts(Ns, Bs, below, m, width, order, node_size)

    monkeypatch.setattr(geneo, "_inertia_counts", spy)
    for last, expected in ((80, 2), (79, 1)):
        seen.clear()
        d = ddops.Decomposition([np.arange(64, 144), np.arange(0, last)], 144, block_size=2)
        geneo_basis(A, d)
        assert seen and all(size == expected for _, size in seen)
        if expected == 2:
            assert all(width % 2 == 0 for width, _ in seen)
