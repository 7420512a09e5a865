"""Partitions and overlapping decompositions from sparse matrices and structured grids.

The references here are built independently of the code under test: adjacency
sets read entry by entry from the matrix, breadth-first search per subdomain,
recursive coordinate bisection written as a plain recursion, grid boxes from
``np.array_split`` and overlaps from the L1 distance to a box.
"""

import re
import warnings
from collections import deque

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import assume, given
from hypothesis import strategies as st

import ddops.dd._partitioning as algorithms
import ddops.dd.partition as dd
from ddops.dd.decomposition import Decomposition, split_sizes
from tests.reference import scrambled_csr

EPS = np.finfo(float).eps


# -- random sparse SPD matrices -------------------------------------------------------------
def _laplacian(num_nodes, edges):
    """Graph Laplacian (PSD) of an edge list; duplicates and self-loops are ignored."""
    L = np.zeros((num_nodes, num_nodes))
    for a, c in {(min(a, c), max(a, c)) for a, c in edges if a != c}:
        L[a, c] = L[c, a] = -1.0
        L[a, a] += 1.0
        L[c, c] += 1.0
    return L


def _expand(L, b, full_blocks):
    """SPD unknown-level matrix on the node graph of ``L``: ``L (x) C + I (x) D``."""
    C = np.ones((b, b)) if full_blocks else np.eye(b)  # PSD either way
    D = (b + 1) * np.eye(b) + np.ones((b, b))  # SPD
    return sp.csr_matrix(np.kron(L, C) + np.kron(np.eye(L.shape[0]), D))


@st.composite
def random_graph_problems(draw, max_nodes=18):
    """``(A, b)``: SPD matrix on a random graph of nodes with ``b`` unknowns each."""
    b = draw(st.integers(1, 3))
    m = draw(st.integers(1, max_nodes))
    edges = draw(st.lists(st.tuples(st.integers(0, m - 1), st.integers(0, m - 1)),
                          max_size=2 * m))
    return _expand(_laplacian(m, edges), b, draw(st.booleans())), b


@st.composite
def fem_like_problems(draw):
    """``(A, b)``: a 2D grid of cells, each with none, one or the other diagonal (P1-like)."""
    b = draw(st.integers(1, 3))
    nx, ny = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    diagonals = draw(st.lists(st.integers(0, 2), min_size=(nx - 1) * (ny - 1),
                              max_size=(nx - 1) * (ny - 1)))
    node = np.arange(nx * ny).reshape(ny, nx)
    edges = [(node[j, i], node[j, i + 1]) for j in range(ny) for i in range(nx - 1)]
    edges += [(node[j, i], node[j + 1, i]) for j in range(ny - 1) for i in range(nx)]
    for cell, kind in enumerate(diagonals):
        j, i = divmod(cell, nx - 1)
        if kind == 1:
            edges.append((node[j, i], node[j + 1, i + 1]))
        elif kind == 2:
            edges.append((node[j, i + 1], node[j + 1, i]))
    return _expand(_laplacian(nx * ny, edges), b, draw(st.booleans())), b


problems = st.one_of(random_graph_problems(), fem_like_problems())


@st.composite
def labelled_problems(draw):
    """``(A, b, node_labels, parts)`` with every label ``0..parts-1`` used."""
    A, b = draw(problems)
    m = A.shape[0] // b
    parts = draw(st.integers(1, m))
    labels = list(range(parts)) + draw(st.lists(st.integers(0, parts - 1), min_size=m - parts,
                                                max_size=m - parts))
    return A, b, np.array(draw(st.permutations(labels)), dtype=np.int64), parts


# -- independent references -----------------------------------------------------------------
def node_adjacency(A, b):
    """Symmetrised node adjacency sets read entry by entry from ``A``."""
    adj = [set() for _ in range(A.shape[0] // b)]
    coo = A.tocoo()
    for r, c in zip(coo.row.tolist(), coo.col.tolist()):
        if r // b != c // b:
            adj[r // b].add(c // b)
            adj[c // b].add(r // b)
    return adj


def bfs_layers(adj, seeds, depth):
    """Nodes within graph distance ``depth`` of ``seeds`` (plain breadth-first search)."""
    dist = {s: 0 for s in seeds}
    queue = deque(seeds)
    while queue:
        u = queue.popleft()
        if dist[u] == depth:
            continue
        for v in adj[u]:
            if v not in dist:
                dist[v] = dist[u] + 1
                queue.append(v)
    return sorted(dist)


def reference_subdomains(A, b, node_labels, parts, overlap):
    adj = node_adjacency(A, b)
    out = []
    for p in range(parts):
        nodes = bfs_layers(adj, np.flatnonzero(node_labels == p).tolist(), overlap)
        out.append(np.array([k * b + c for k in nodes for c in range(b)], dtype=np.int64))
    return out


def count_disconnected(adj, node_labels, parts):
    """Parts whose nodes do not form one connected piece (BFS inside each part)."""
    bad = 0
    for p in range(parts):
        members = set(np.flatnonzero(node_labels == p).tolist())
        start = next(iter(members))
        seen, queue = {start}, deque([start])
        while queue:
            u = queue.popleft()
            for v in adj[u]:
                if v in members and v not in seen:
                    seen.add(v)
                    queue.append(v)
        bad += seen != members
    return bad


def rcb_reference(points, parts):
    """Recursive coordinate bisection, one group at a time."""
    m = points.shape[0]
    target = np.concatenate([[0], np.cumsum(split_sizes(m, parts))])
    labels = np.full(m, -1)

    def split(idx, lo, hi):
        if hi - lo == 1:
            labels[idx] = lo
            return
        pts = points[idx]
        axis = int(np.argmax(pts.max(axis=0) - pts.min(axis=0)))
        idx = sorted(idx, key=lambda k: (points[k, axis], k))
        half = (hi - lo) // 2
        cut = target[lo + half] - target[lo]
        split(idx[:cut], lo, lo + half)
        split(idx[cut:], lo + half, hi)

    split(list(range(m)), 0, parts)
    return labels


def assert_partition_of_unity(d):
    """``sum_i R_i^T D_i R_i = I`` assembled densely from the restrictions and weights."""
    total = np.zeros((d.num_dofs, d.num_dofs))
    for i in range(d.num_subdomains):
        R = d.restriction(i).toarray().astype(float)
        total += R.T @ np.diag(d.weights(i)) @ R
    off = total - np.diag(np.diag(total))
    assert np.all(off == 0)
    np.testing.assert_allclose(np.diag(total), 1.0, rtol=0, atol=8 * EPS)


def quiet(fn, *args, **kwargs):
    """Call ``fn`` ignoring the disconnected-parts warning (random labels often are)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*parts are disconnected")
        return fn(*args, **kwargs)


def fd_laplacian(shape):
    """Finite-difference Laplacian pattern, neighbours listed point by point."""
    n = int(np.prod(shape))
    strides = np.cumprod((1,) + tuple(shape[:-1]))
    rows, cols = [], []
    for idx in range(n):
        coord = [(idx // s) % size for s, size in zip(strides, shape)]
        rows.append(idx)
        cols.append(idx)
        for k, size in enumerate(shape):
            for step in (-1, 1):
                if 0 <= coord[k] + step < size:
                    rows.append(idx)
                    cols.append(idx + step * int(strides[k]))
    vals = [2.0 * len(shape) if r == c else -1.0 for r, c in zip(rows, cols)]
    return sp.csr_matrix((vals, (rows, cols)), shape=(n, n))


# -- overlap growth -------------------------------------------------------------------------
@given(labelled_problems(), st.integers(0, 3))
def test_overlap_layers_match_breadth_first_search(problem, overlap):
    A, b, labels, parts = problem
    owner = np.repeat(labels, b)
    ref = reference_subdomains(A, b, labels, parts, overlap)
    indices, sizes = dd.grow_overlap(A, owner, overlap, block_size=b)
    assert sizes.tolist() == [r.size for r in ref]
    np.testing.assert_array_equal(indices, np.concatenate(ref))
    d = quiet(dd.decomposition_from_matrix, A, parts, overlap, partitioner=owner, block_size=b)
    for got, want in zip(d.subdomains, ref):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(d.owner, owner)


@given(problems, st.integers(0, 3), st.sampled_from(["labels", "metis", "rcb"]), st.data())
def test_cover_owner_and_partition_of_unity(problem, overlap, method, data):
    A, b = problem
    n = A.shape[0]
    m = n // b
    parts = data.draw(st.integers(1, m))
    kwargs = {"block_size": b}
    if method == "labels":
        extra = data.draw(st.lists(st.integers(0, parts - 1), min_size=m - parts,
                                   max_size=m - parts))
        labels = np.array(data.draw(st.permutations(list(range(parts)) + extra)))
        kwargs["partitioner"] = np.repeat(labels, b)
    elif method == "rcb":
        kwargs["partitioner"] = "rcb"
        values = data.draw(st.lists(st.integers(0, 4), min_size=2 * m, max_size=2 * m))
        kwargs["coordinates"] = np.reshape(np.array(values, dtype=float), (m, 2))
    try:
        d = quiet(dd.decomposition_from_matrix, A, parts, overlap, **kwargs)
    except ValueError as exc:  # METIS may leave parts empty on tiny graphs; nothing else may fail
        assert method == "metis" and "empty" in str(exc)
        assume(False)
    subs = d.subdomains
    assert len(subs) == parts
    np.testing.assert_array_equal(np.unique(np.concatenate(subs)), np.arange(n))
    owner = d.owner
    assert owner.shape == (n,) and owner.min() >= 0 and owner.max() < parts
    for i, s in enumerate(subs):  # each subdomain contains what it owns
        assert set(np.flatnonzero(owner == i)) <= set(s.tolist())
        assert np.all(np.diff(s) > 0)
    base = quiet(dd.decomposition_from_matrix, A, parts, 0, **kwargs)
    for i, s in enumerate(base.subdomains):  # overlap 0: the owner classes, disjoint
        np.testing.assert_array_equal(s, np.flatnonzero(owner == i))
    assert base.sizes.sum() == n
    assert_partition_of_unity(d)
    # block_size keeps nodes together: whole nodes in every subdomain, one owner per node
    for s in subs:
        assert np.all(np.bincount(s // b, minlength=m)[np.unique(s // b)] == b)
    assert np.all(owner.reshape(m, b) == owner.reshape(m, b)[:, :1])


@given(labelled_problems())
def test_disconnected_parts_warning_counts_parts(problem):
    A, b, labels, parts = problem
    expected = count_disconnected(node_adjacency(A, b), labels, parts)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        owner = dd.partition(A, parts, partitioner=labels, block_size=b)
    np.testing.assert_array_equal(owner, np.repeat(labels, b))
    messages = [str(w.message) for w in caught if "disconnected" in str(w.message)]
    if expected:
        assert len(messages) == 1
        assert messages[0].startswith(f"{expected} of {parts} parts are disconnected")
    else:
        assert messages == []


def test_disconnected_warning_example():
    path = fd_laplacian((4,))  # 0 - 1 - 2 - 3
    with pytest.warns(UserWarning, match=r"1 of 2 parts are disconnected .*parts 0\)"):
        dd.partition(path, 2, partitioner=np.array([0, 1, 1, 0]))
    two = sp.block_diag([path, path]).tocsr()  # the graph itself has two pieces
    with pytest.warns(UserWarning, match="graph of A itself has 2 connected components"):
        dd.partition(two, 1)


def test_nonsymmetric_pattern_warns_and_uses_symmetrised_pattern():
    A = sp.lil_matrix(np.eye(5) * 3)
    A[0, 1] = A[1, 2] = A[2, 3] = A[3, 4] = -1.0  # upper bidiagonal: one-sided couplings
    A = A.tocsr()
    with pytest.warns(UserWarning, match="pattern is not symmetric"):
        indices, sizes = dd.grow_overlap(A, np.array([0, 0, 1, 1, 1]), 1)
    sym = (A + A.T).tocsr()
    ref = reference_subdomains(sym, 1, np.array([0, 0, 1, 1, 1]), 2, 1)
    np.testing.assert_array_equal(indices, np.concatenate(ref))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dd.grow_overlap(sym, np.array([0, 0, 1, 1, 1]), 1)  # symmetric: no warning


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("b", [1, 2, 3])
@pytest.mark.parametrize("canonical", [True, False])
def test_node_graph_against_the_dense_pattern(symmetric, b, canonical):
    """The partitioners' graph: nodes i != j adjacent when any entry of the b x b blocks
    (i, j) or (j, i) is stored (zeros included), built here from the dense pattern; the
    warning exactly when the unknowns' pattern is not symmetric; the same with unsorted,
    duplicated entries (the partitioners keep A's own index order)."""
    rng = np.random.default_rng(b + 3 * symmetric)
    n = 7 * b
    R = sp.random(n, n, density=0.15, random_state=rng, format="csr")
    A = (R + R.T if symmetric else R) + sp.identity(n)
    A = sp.csr_matrix(A)
    A.data[::5] = 0.0  # stored zeros are couplings too
    stored = A.toarray() != 0
    stored[np.repeat(np.arange(n), np.diff(A.indptr)), A.indices] = True
    if not canonical:  # the same pattern, entries reversed within rows and one duplicated
        A = scrambled_csr(A)
    either = stored | stored.T
    m = n // b
    expected = either.reshape(m, b, m, b).any(axis=(1, 3)) & ~np.eye(m, dtype=bool)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        G = algorithms._node_graph(A, b)
    np.testing.assert_array_equal(G.toarray(), expected)
    assert G.has_sorted_indices and G.dtype == bool
    one_sided = int((stored.T & ~stored).sum())  # the couplings A^T adds
    messages = [str(w.message) for w in caught if "pattern is not symmetric" in str(w.message)]
    assert len(messages) == (0 if symmetric else 1)
    if not symmetric:
        assert f"({one_sided} of {int((either & ~np.eye(n, dtype=bool)).sum())} " in messages[0]


def test_explicit_zeros_are_edges():
    A = fd_laplacian((3,))
    A.data[A.indices != np.repeat(np.arange(3), np.diff(A.indptr))] = 0.0  # stored zeros
    indices, sizes = dd.grow_overlap(A, np.array([0, 1, 1]), 1)
    assert sizes.tolist() == [2, 3]


# -- partitioners ---------------------------------------------------------------------------
@given(st.integers(1, 40), st.integers(1, 3), st.data())
def test_rcb_balanced_and_matches_recursive_reference(m, dim, data):
    parts = data.draw(st.integers(1, m))
    # small integer coordinates: many ties and duplicate points
    points = np.array(data.draw(st.lists(st.integers(-3, 3), min_size=m * dim,
                                         max_size=m * dim)), dtype=float).reshape(m, dim)
    b = data.draw(st.integers(1, 3))
    A = sp.identity(m * b, format="csr")
    owner = quiet(dd.partition, A, parts, partitioner="rcb", coordinates=points, block_size=b)
    labels = owner[::b]
    np.testing.assert_array_equal(labels, rcb_reference(points, parts))
    # guarantee: part k holds exactly split_sizes(m, parts)[k] nodes (sizes differ by <= 1)
    np.testing.assert_array_equal(np.bincount(labels, minlength=parts), split_sizes(m, parts))
    # per-unknown coordinates give the labels of the nodes' first unknowns
    per_unknown = np.repeat(points, b, axis=0)
    per_unknown[np.arange(m * b) % b != 0] = data.draw(st.sampled_from([-7.0, 9.0]))
    np.testing.assert_array_equal(
        quiet(dd.partition, A, parts, partitioner="rcb", coordinates=per_unknown, block_size=b),
        owner)


def test_rcb_cuts_along_the_longest_extent():
    x, y = np.meshgrid(np.arange(8.0), np.arange(3.0), indexing="xy")
    points = np.column_stack([x.ravel(), y.ravel()])  # 8 wide, 3 high
    labels = quiet(dd.partition, sp.identity(24, format="csr"), 2, partitioner="rcb",
                   coordinates=points)
    assert points[labels == 0, 0].max() < points[labels == 1, 0].min()


@given(fem_like_problems(), st.integers(0, 2 ** 31 - 1), st.data())
def test_metis_deterministic_for_a_seed_and_valid(problem, seed, data):
    A, b = problem
    m = A.shape[0] // b
    parts = data.draw(st.integers(1, m))
    try:
        first = quiet(dd.partition, A, parts, block_size=b, seed=seed)
    except ValueError as exc:
        assert "empty" in str(exc)
        assume(False)
    second = quiet(dd.partition, A, parts, block_size=b, seed=seed)
    np.testing.assert_array_equal(first, second)
    assert first.dtype == np.int64 and first.shape == (A.shape[0],)
    np.testing.assert_array_equal(np.unique(first), np.arange(parts))
    assert np.all(first.reshape(m, b) == first.reshape(m, b)[:, :1])
    # these graphs are connected, so METIS is asked for contiguous parts (plain k-way METIS
    # leaves disconnected parts on most small grids)
    assert count_disconnected(node_adjacency(A, b), first[::b], parts) == 0


def test_metis_seed_is_used_and_parts_are_contiguous():
    A = fd_laplacian((30, 30))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # connected graph: contiguous parts, no warning
        labels = [dd.partition(A, 7, seed=s) for s in range(10)]
    assert len({lab.tobytes() for lab in labels}) > 1
    sizes = np.bincount(labels[0])
    assert sizes.max() <= 1.1 * A.shape[0] / 7  # METIS balances the parts


def _fake_metis(monkeypatch, plain_labels, contiguous):
    """pymetis.part_graph returning ``plain_labels`` for plain k-way and raising (None) or
    returning ``contiguous`` for contiguous k-way; records the contig options."""
    import types

    import pymetis

    calls = []

    def part_graph(parts, adjacency, *, options, recursive):
        calls.append(options.contig)
        if options.contig == 1:
            if contiguous is None:
                raise RuntimeError("METIS Error: contiguous partition failed")
            return types.SimpleNamespace(vertex_part=list(contiguous))
        return types.SimpleNamespace(vertex_part=list(plain_labels))

    monkeypatch.setattr(pymetis, "part_graph", part_graph)
    return calls


def test_metis_asks_for_contiguity_only_when_a_part_is_in_pieces(monkeypatch):
    A = fd_laplacian((6, 6))
    halves = np.repeat([0, 1], 18)  # two connected halves of the 6 x 6 grid
    calls = _fake_metis(monkeypatch, halves, None)
    np.testing.assert_array_equal(dd.partition(A, 2), halves)
    assert calls == [-1]  # plain k-way only
    stripes = np.tile([0, 1], 18)  # alternating unknowns: both parts in pieces
    calls = _fake_metis(monkeypatch, stripes, halves)
    np.testing.assert_array_equal(dd.partition(A, 2), halves)
    assert calls == [-1, 1]  # plain, then contiguous


def test_metis_keeps_plain_k_way_when_contiguity_fails(monkeypatch):
    A = fd_laplacian((6, 6))
    stripes = np.tile([0, 1], 18)
    calls = _fake_metis(monkeypatch, stripes, None)
    labels = quiet(dd.partition, A, 2)  # warns: disconnected parts
    assert calls == [-1, 1]
    np.testing.assert_array_equal(labels, stripes)


def test_metis_empty_parts_are_refused(monkeypatch):
    monkeypatch.setattr(algorithms, "_metis", lambda G, parts, seed, connected: np.arange(
        G.shape[0]) % (parts - 1))
    with pytest.raises(ValueError, match="subdomains=4: METIS left 1 of the 4 parts empty"):
        dd.decomposition_from_matrix(fd_laplacian((6,)), 4)
    with pytest.raises(ValueError, match="parts=4: METIS left 1"):
        dd.partition(fd_laplacian((6,)), 4)


def test_one_part_is_everything():
    A = fd_laplacian((3, 2))
    d = dd.decomposition_from_matrix(A, 1, 2)
    np.testing.assert_array_equal(d.subdomains[0], np.arange(6))
    np.testing.assert_array_equal(d.owner, 0)


# -- structured grids -----------------------------------------------------------------------
shapes = st.one_of(st.tuples(st.integers(1, 7), st.integers(1, 7)),
                   st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4)))


@st.composite
def grids(draw):
    shape = draw(shapes)
    parts = tuple(draw(st.integers(1, s)) for s in shape)
    return shape, parts, draw(st.integers(0, 3))


def box_bounds(size, p):
    """``[lo, hi)`` of each slab (np.array_split: the first ``size % p`` slabs are longer)."""
    pieces = np.array_split(np.arange(size), p)
    return [(int(q[0]), int(q[-1]) + 1) for q in pieces]


@given(grids())
def test_grid_boxes_and_overlap_match_l1_distance(grid):
    shape, parts, overlap = grid
    n = int(np.prod(shape))
    strides = np.cumprod((1,) + shape[:-1])
    coords = np.array([[(idx // s) % size for s, size in zip(strides, shape)]
                       for idx in range(n)]).reshape(n, len(shape))
    bounds = [box_bounds(size, p) for size, p in zip(shape, parts)]
    box_strides = np.cumprod((1,) + parts[:-1])
    owner = dd.grid_partition(shape, parts)
    d = dd.decomposition_from_grid(shape, parts, overlap)
    assert d.num_subdomains == int(np.prod(parts))
    for box in range(int(np.prod(parts))):
        slab = [(box // s) % p for s, p in zip(box_strides, parts)]
        lo = np.array([bounds[k][slab[k]][0] for k in range(len(shape))])
        hi = np.array([bounds[k][slab[k]][1] for k in range(len(shape))])
        dist = (np.maximum(lo - coords, 0) + np.maximum(coords - (hi - 1), 0)).sum(axis=1)
        np.testing.assert_array_equal(np.flatnonzero(owner == box), np.flatnonzero(dist == 0))
        np.testing.assert_array_equal(d.subdomains[box], np.flatnonzero(dist <= overlap))
    np.testing.assert_array_equal(d.owner, owner)
    np.testing.assert_allclose(d.coordinates, (coords + 1) / (np.array(shape) + 1))
    assert d.h == 1.0 / (min(shape) + 1)
    assert_partition_of_unity(d)
    # the same as the algebraic construction on the finite-difference Laplacian
    m = dd.decomposition_from_matrix(fd_laplacian(shape), d.num_subdomains, overlap,
                                     partitioner=owner)
    np.testing.assert_array_equal(m.indices, d.indices)
    np.testing.assert_array_equal(m.sizes, d.sizes)


@pytest.mark.parametrize("dim, n, parts", [(2, 7, (3, 2)), (3, 4, (2, 1, 2))])
def test_grid_decomposition_in_the_numbering_of_the_grid_problems(dim, n, parts):
    from ddops.problems.grid import poisson_2d, poisson_3d

    A, coords = (poisson_2d if dim == 2 else poisson_3d)(n, return_coordinates=True)
    d = dd.decomposition_from_grid((n,) * dim, parts, 2)
    np.testing.assert_allclose(d.coordinates, coords, rtol=0, atol=4 * EPS)
    m = dd.decomposition_from_matrix(A, d.num_subdomains, 2, partitioner=d.owner)
    np.testing.assert_array_equal(m.indices, d.indices)
    np.testing.assert_array_equal(m.sizes, d.sizes)


@given(shapes)
def test_grid_graph_is_the_finite_difference_stencil(shape):
    G = dd.grid_graph(shape)
    L = fd_laplacian(shape)
    L.setdiag(0)
    L.eliminate_zeros()
    assert G.dtype == bool
    np.testing.assert_array_equal(G.toarray(), L.toarray() != 0)


# -- the resulting Decomposition -------------------------------------------------------------
def test_decomposition_coordinates_are_kept():
    A = fd_laplacian((4, 3))
    pts = dd.decomposition_from_grid((4, 3), (1, 1), 0).coordinates
    d = dd.decomposition_from_matrix(A, 3, 1, partitioner="rcb", coordinates=pts)
    assert isinstance(d, Decomposition)
    np.testing.assert_array_equal(d.coordinates, pts)
    line = np.linspace(0.1, 0.9, 12)
    d = dd.decomposition_from_matrix(A, 3, 1, partitioner="rcb", coordinates=line)
    np.testing.assert_array_equal(d.coordinates, line)
    # node coordinates with block_size: one row per node, repeated for its unknowns
    B = sp.kron(A, np.ones((2, 2))).tocsr() + sp.identity(24)
    d = dd.decomposition_from_matrix(B, 3, 1, partitioner="rcb", coordinates=pts, block_size=2)
    np.testing.assert_array_equal(d.coordinates, np.repeat(pts, 2, axis=0))
    np.testing.assert_array_equal(d.owner, np.repeat(dd.partition(
        A, 3, partitioner="rcb", coordinates=pts), 2))


def test_dense_and_sparse_array_inputs():
    A = fd_laplacian((3, 3))
    labels = np.array([0, 0, 1, 0, 0, 1, 2, 2, 2])
    ref = dd.grow_overlap(A, labels, 1)
    for other in (A.toarray(), sp.csr_array(A), sp.coo_matrix(A), A.tocsc()):
        got = dd.grow_overlap(other, labels, 1)
        np.testing.assert_array_equal(got[0], ref[0])
        np.testing.assert_array_equal(got[1], ref[1])


# -- errors name the argument ----------------------------------------------------------------
def test_bad_matrix():
    with pytest.raises(ValueError, match="A must be square"):
        dd.decomposition_from_matrix(sp.random(4, 5, density=0.5, format="csr"), 2)
    with pytest.raises(TypeError, match=r"A must be a sparse matrix \(scipy.sparse\) or a 2-D"):
        dd.partition("matrix", 2)
    with pytest.raises(ValueError, match=r"A must be 2-D, got shape \(4,\)"):
        dd.partition(np.ones(4), 2)


def test_bad_counts():
    A = fd_laplacian((4,))
    with pytest.raises(ValueError, match=r"subdomains=5 exceeds the number of unknowns of A"):
        dd.decomposition_from_matrix(A, 5)
    with pytest.raises(ValueError, match=r"parts=5 exceeds"):
        dd.partition(A, 5)
    with pytest.raises(ValueError, match=r"subdomains=3 exceeds the number of nodes"):
        dd.decomposition_from_matrix(A, 3, block_size=2)
    with pytest.raises(ValueError, match="subdomains must be >= 1"):
        dd.decomposition_from_matrix(A, 0)
    with pytest.raises(TypeError, match="subdomains must be an integer"):
        dd.decomposition_from_matrix(A, 2.0)
    with pytest.raises(ValueError, match="overlap must be >= 0"):
        dd.decomposition_from_matrix(A, 2, -1)
    with pytest.raises(ValueError, match="overlap must be >= 0"):
        dd.grow_overlap(A, np.array([0, 0, 1, 1]), -1)
    with pytest.raises(ValueError, match="block_size=3 does not divide"):
        dd.decomposition_from_matrix(A, 1, block_size=3)
    with pytest.raises(ValueError, match="block_size must be >= 1"):
        dd.partition(A, 1, block_size=0)
    with pytest.raises(ValueError, match="seed must be >= 0"):
        dd.partition(A, 2, seed=-1)
    with pytest.raises(ValueError, match="seed must be <="):
        dd.partition(A, 2, seed=2 ** 40)


def test_bad_partitioner_and_labels():
    A = fd_laplacian((4,))
    with pytest.raises(ValueError, match="partitioner must be one of"):
        dd.partition(A, 2, partitioner="scotch")
    with pytest.raises(ValueError, match="partitioner: a label array must be one-dimensional "
                                         "of length n=4"):
        dd.partition(A, 2, partitioner=np.array([0, 1, 1]))
    with pytest.raises(ValueError, match=re.escape("partitioner: labels must lie in [0, 2) for "
                                                   "subdomains=2, got [0, 2]")):
        dd.decomposition_from_matrix(A, 2, partitioner=np.array([0, 1, 2, 1]))
    with pytest.raises(ValueError, match=r"partitioner: 1 of the labels 0\.\.2 are unused \(1\)"):
        dd.partition(A, 3, partitioner=np.array([0, 0, 2, 2]))
    with pytest.raises(TypeError, match="partitioner: labels must be integers"):
        dd.partition(A, 2, partitioner=np.array([0.0, 0.0, 1.0, 1.0]))
    with pytest.raises(ValueError, match="partitioner: the unknowns 2..3 of node 1 have "
                                         "different labels"):
        dd.partition(A, 2, partitioner=np.array([0, 0, 1, 0]), block_size=2)
    with pytest.raises(ValueError, match="owner: 1 of the labels 0..2 are unused"):
        dd.grow_overlap(A, np.array([0, 0, 2, 2]), 1)
    with pytest.raises(ValueError, match=r"owner: labels must lie in \[0, 3\)"):
        dd.grow_overlap(A, np.array([0, -1, 2, 1]), 1)


def test_bad_coordinates():
    A = fd_laplacian((4,))
    with pytest.raises(ValueError, match="coordinates are required by partitioner='rcb'"):
        dd.partition(A, 2, partitioner="rcb")
    with pytest.raises(ValueError, match=r"coordinates contain NaN or inf \(row 2\)"):
        dd.partition(A, 2, partitioner="rcb", coordinates=np.array([0.0, 1.0, np.nan, 3.0]))
    with pytest.raises(ValueError, match=r"coordinates contain NaN or inf"):
        dd.decomposition_from_matrix(A, 2, coordinates=np.full((4, 2), np.inf))
    with pytest.raises(ValueError, match="coordinates must have shape"):
        dd.partition(A, 2, partitioner="rcb", coordinates=np.zeros((3, 2)))
    with pytest.raises(ValueError, match="coordinates must have shape"):
        dd.partition(A, 2, partitioner="rcb", coordinates=np.zeros((4, 2, 1)))
    with pytest.raises(TypeError, match="coordinates must be a real numeric array"):
        dd.partition(A, 2, partitioner="rcb", coordinates=np.array(["a", "b", "c", "d"]))


def test_bad_grids():
    with pytest.raises(ValueError, match=r"parts\[1\]=4 exceeds shape\[1\]=3"):
        dd.grid_partition((4, 3), (2, 4))
    with pytest.raises(ValueError, match="parts must have one entry per direction"):
        dd.decomposition_from_grid((4, 3), (2,))
    with pytest.raises(TypeError, match="parts must be a sequence"):
        dd.decomposition_from_grid((4, 3), 2)
    with pytest.raises(ValueError, match="shape must have 1 to 3 entries"):
        dd.grid_partition((2, 2, 2, 2), (1, 1, 1, 1))
    with pytest.raises(ValueError, match=r"shape\[0\] must be >= 1"):
        dd.grid_graph((0, 3))
    with pytest.raises(TypeError, match="shape must be a sequence"):
        dd.grid_graph(5)
    with pytest.raises(ValueError, match="overlap must be >= 0"):
        dd.decomposition_from_grid((4, 3), (2, 1), -2)
