"""The partitioning algorithms behind :mod:`ddops.dd.partition`, on index arrays.

Everything here works on the graph of a matrix (or of a structured grid) and returns
labels and packed index arrays, never a :class:`~ddops.dd.decomposition.Decomposition`:
the decompositions are built from these arrays one level up, in
:mod:`ddops.dd.decomposition` (whose ``from_matrix`` and ``from_grid`` run the pipelines
:func:`matrix_subdomains` and :func:`grid_subdomains`).  :mod:`ddops.dd.partition` is the
public module of both; the functions are documented there.
"""

from __future__ import annotations

import numbers
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from .._validation import as_matrix, check_int, check_no_empty_rows, warn
from ..linalg.local_solvers import node_graph

__all__ = [
    "PARTITIONERS",
    "TARGET_SUBDOMAIN_UNKNOWNS",
    "default_subdomains",
    "grid_graph",
    "grid_partition",
    "grid_subdomains",
    "grow_overlap",
    "matrix_subdomains",
    "partition",
    "split_sizes",
]

#: Names accepted by the ``partitioner`` argument (an integer label array is accepted too).
PARTITIONERS = ("metis", "rcb")

#: Unknowns per non-overlapping part that :func:`default_subdomains` aims at: the total
#: time (set-up and CG) of the GDSW preconditioner with exact local solves was within 10%
#: of its best from about 1000 to 4000 unknowns per part on 2D and 3D Poisson and 3D
#: elasticity (see "Local solvers and subdomain size" in the preconditioning guide).
TARGET_SUBDOMAIN_UNKNOWNS = 2000

# METIS stores the seed as a C integer; keep it portable to 32-bit index builds.
_MAX_SEED = 2**31 - 1


def split_sizes(total: int, parts: int) -> np.ndarray:
    """Split ``total`` items into ``parts`` consecutive sizes differing by at most one.

    The remainder is spread over the first ``total % parts`` parts.
    """
    sizes = np.full(parts, total // parts, dtype=np.int64)
    sizes[: total % parts] += 1
    return sizes


# -- validation --------------------------------------------------------------------------------
def _check_matrix(A: Any) -> sp.csr_matrix | sp.csr_array:
    """``A`` as square CSR of its own dtype (the package's matrix contract,
    :func:`ddops._validation.as_matrix`; the partitioners read only its pattern), or raise
    naming ``A``; an empty row is named by its index."""
    A, _ = as_matrix(A, "A", convert=False)
    check_no_empty_rows(A, "A")
    return A


def _check_block_size(block_size: Any, n: int) -> int:
    b = check_int("block_size", block_size, minimum=1)
    if n % b:
        raise ValueError(f"block_size={b} does not divide the number of unknowns of A (n={n})")
    return b


def _check_parts(name: str, parts: Any, n: int, b: int) -> int:
    parts = check_int(name, parts, minimum=1)
    m = n // b
    if parts > m:
        what = f"unknowns of A (n={n})" if b == 1 else f"nodes (n / block_size = {m})"
        raise ValueError(f"{name}={parts} exceeds the number of {what}; every part needs at "
                         "least one")
    return parts


def _check_labels(name: str, labels: Any, n: int, b: int, parts: int | None,
                  parts_name: str = "parts") -> np.ndarray:
    """Validate labels per unknown (or per node when ``b > 1``) and return node labels.

    ``parts=None`` takes the number of parts from the labels (``max + 1``).
    Every label ``0 .. parts-1`` must be used: an unused one is an empty part.
    """
    if isinstance(labels, (str, bytes)):
        raise TypeError(f"{name} must be an integer label array, got {labels!r}")
    arr = np.asarray(labels)
    m = n // b
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name}: labels must be integers, got dtype {arr.dtype}")
    if arr.ndim != 1 or arr.size not in (n, m):
        lengths = f"n={n}" if b == 1 else f"n={n} (per unknown) or {m} (per node)"
        raise ValueError(f"{name}: a label array must be one-dimensional of length {lengths}, "
                         f"got shape {arr.shape}")
    arr = arr.astype(np.int64)
    low, high = int(arr.min()), int(arr.max())
    if parts is None:
        parts = high + 1
    if low < 0 or high >= parts:
        raise ValueError(f"{name}: labels must lie in [0, {parts}) for {parts_name}={parts}, "
                         f"got [{low}, {high}]")
    if b > 1 and arr.size == n:
        per_node = arr.reshape(m, b)
        mixed = np.flatnonzero(np.any(per_node != per_node[:, :1], axis=1))
        if mixed.size:
            k = int(mixed[0])
            raise ValueError(f"{name}: the unknowns {k * b}..{k * b + b - 1} of node {k} have "
                             f"different labels; with block_size={b} a node belongs to one part")
        arr = per_node[:, 0].copy()
    unused = np.flatnonzero(np.bincount(arr, minlength=parts) == 0)
    if unused.size:
        shown = ", ".join(map(str, unused[:10].tolist())) + (", ..." if unused.size > 10 else "")
        raise ValueError(f"{name}: {unused.size} of the labels 0..{parts - 1} are unused "
                         f"({shown}); every part needs at least one unknown")
    return arr


def _check_coordinates(coordinates: Any, n: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(node_points, unknown_points)`` from per-unknown or per-node coordinates.

    ``unknown_points`` keeps a one-dimensional input one-dimensional.  A node's
    point is that of its first unknown.
    """
    if isinstance(coordinates, (str, bytes)):
        raise TypeError(f"coordinates must be a numeric array, got {coordinates!r}")
    X = np.asarray(coordinates)
    if X.dtype.kind not in "biuf":
        raise TypeError(f"coordinates must be a real numeric array, got dtype {X.dtype}")
    X = X.astype(np.float64)
    m = n // b
    rows = X.shape[0] if X.ndim else -1
    if X.ndim not in (1, 2) or rows not in (n, m) or (X.ndim == 2 and X.shape[1] < 1):
        lengths = f"n={n}" if b == 1 else f"n={n} (per unknown) or {m} (per node)"
        raise ValueError(f"coordinates must have shape (rows,) or (rows, d) with rows = "
                         f"{lengths}, got {X.shape}")
    bad = ~np.isfinite(X.reshape(rows, -1)).all(axis=1)
    if bad.any():
        raise ValueError(f"coordinates contain NaN or inf (row {int(np.argmax(bad))})")
    points = X.reshape(rows, -1)
    if rows == n:
        return points[::b], X
    return points, np.repeat(X, b, axis=0)


def _check_seed(seed: Any) -> int:
    seed = check_int("seed", seed, minimum=0)
    if seed > _MAX_SEED:
        raise ValueError(f"seed must be <= {_MAX_SEED}, got {seed}")
    return seed


# -- graphs ------------------------------------------------------------------------------------
def _node_graph(A: Any, b: int) -> sp.csr_matrix:
    """Symmetric Boolean node graph of ``A`` (no diagonal, sorted indices), ``n/b x n/b``.

    Warns and symmetrises when the pattern of ``A`` is not symmetric.  For ``b > 1`` a
    symmetric pattern is contracted to the nodes directly (the node graph of ``A + A^T`` is
    that of ``A`` then): 3D elasticity, 227,448 unknowns, 0.43 -> 0.25 s.
    """
    pattern = sp.csr_matrix((np.ones(A.nnz, dtype=bool), A.indices, A.indptr), shape=A.shape)
    if not pattern.has_canonical_format:  # (A in its own index order: convert=False)
        pattern = pattern.copy()
        pattern.sum_duplicates()
    T = pattern.T.tocsr()  # canonical, as the pattern
    if np.array_equal(T.indptr, pattern.indptr) and np.array_equal(T.indices,
                                                                  pattern.indices):
        S = pattern
    else:
        S = (pattern + T).tocsr()
        diagonal = int(np.count_nonzero(pattern.diagonal()))
        P_off, S_off = pattern.nnz - diagonal, S.nnz - int(np.count_nonzero(S.diagonal()))
        warn(
            f"A: the sparsity pattern is not symmetric ({S_off - P_off} of {S_off} "
            "off-diagonal couplings are one-sided); partitioning and overlap use the "
            "symmetrised pattern of A + A^T",
            UserWarning)
    del T
    return node_graph(S, b)


def grid_graph(shape: Sequence[int]) -> sp.csr_matrix:
    """Adjacency of the structured grid ``shape`` (the 3/5/7-point stencil graph).

    Lexicographic numbering with x fastest, ``index = i + nx*j + nx*ny*k``;
    assembled as a Kronecker sum of 1D path graphs.

    Parameters
    ----------
    shape : sequence of int
        Points per direction, ``(nx,)``, ``(nx, ny)`` or ``(nx, ny, nz)``.

    Returns
    -------
    scipy.sparse.csr_matrix
        Boolean ``prod(shape) x prod(shape)``, symmetric, empty diagonal.
    """
    shape = _check_shape(shape)
    G = None
    for axis, size in enumerate(shape):
        left = np.arange(size - 1)
        path = sp.csr_matrix((np.ones(2 * left.size, dtype=bool),
                              (np.r_[left, left + 1], np.r_[left + 1, left])), shape=(size, size))
        # x is the innermost (fastest) factor of the Kronecker product
        inner = sp.identity(int(np.prod(shape[:axis], dtype=np.int64)), dtype=bool,
                            format="csr")
        outer = sp.identity(int(np.prod(shape[axis + 1:], dtype=np.int64)), dtype=bool,
                            format="csr")
        term = sp.kron(outer, sp.kron(path, inner, format="csr"), format="csr")
        G = term if G is None else G + term
    G = G.tocsr().astype(bool)  # kron of an empty factor comes back as float64
    G.sum_duplicates()
    G.sort_indices()
    return G


def _disconnected_parts(G: sp.csr_matrix, labels: np.ndarray, parts: int) -> np.ndarray:
    """Parts whose nodes form more than one connected piece of ``G`` (all parts at once)."""
    m = labels.size
    rows = np.repeat(np.arange(m, dtype=np.int64), np.diff(G.indptr))
    keep = labels[rows] == labels[G.indices]
    inner = sp.csr_matrix((np.ones(int(keep.sum()), dtype=bool),
                           (rows[keep], G.indices[keep])), shape=(m, m))
    # symmetric graph: strong components are the connected pieces (and need no transpose)
    count, component = connected_components(inner, directed=True, connection="strong")
    part_of_component = np.empty(count, dtype=np.int64)
    part_of_component[component] = labels  # every piece lies inside one part
    return np.flatnonzero(np.bincount(part_of_component, minlength=parts) > 1)


def _warn_disconnected(G: sp.csr_matrix, labels: np.ndarray, parts: int,
                       graph_components: int) -> None:
    bad = _disconnected_parts(G, labels, parts)
    if bad.size:
        shown = ", ".join(map(str, bad[:10].tolist())) + (", ..." if bad.size > 10 else "")
        whole = (f"; the graph of A itself has {graph_components} connected components"
                 if graph_components > 1 else "")
        warn(
            f"{bad.size} of {parts} parts are disconnected in the graph of A (parts {shown})"
            f"{whole}; local solves stay exact, but coarse spaces that assume connected "
            "subdomains lose accuracy",
            UserWarning)


# -- partitioners ------------------------------------------------------------------------------
def _metis(G: sp.csr_matrix, parts: int, seed: int, connected: bool) -> np.ndarray:
    """K-way METIS labels of the nodes of ``G``; contiguous parts when ``G`` is connected
    (plain k-way, or METIS's contiguous k-way when a plain part came out in pieces)."""
    import pymetis

    m = G.shape[0]
    if parts == 1:
        return np.zeros(m, dtype=np.int64)
    dtype = pymetis.zero_copy_dtype()
    adjacency = pymetis.CSRAdjacency(G.indptr.astype(dtype), G.indices.astype(dtype))

    def run(contiguous: bool):
        options = pymetis.Options(seed=seed)
        if contiguous:
            options.contig = 1
        return pymetis.part_graph(parts, adjacency, options=options, recursive=False)

    # plain k-way first: METIS's contiguity option doubles its time (3D Poisson 10^6 into
    # 500 parts: 2.9 s against 5.7 s) and plain k-way parts of a mesh graph are nearly always
    # connected already; contiguity is asked for only when a part came out in pieces
    labels = np.asarray(run(False).vertex_part, dtype=np.int64)
    if connected and _disconnected_parts(G, labels, parts).size:
        try:
            labels = np.asarray(run(True).vertex_part, dtype=np.int64)
        except RuntimeError:  # METIS refuses contiguity on some graphs: keep plain k-way
            pass
    return labels


def _rcb(points: np.ndarray, parts: int) -> np.ndarray:
    """Recursive coordinate bisection of ``points`` (``m x d``) into ``parts`` parts.

    A group of nodes assigned parts ``[lo, hi)`` is split along its longest
    extent into parts ``[lo, lo + h)`` and ``[lo + h, hi)``, ``h = (hi - lo) // 2``,
    at the rank that gives the first ``sum(split_sizes(m, parts)[lo:lo + h])``
    nodes (ties broken by index) to the left.  Part ``k`` therefore holds exactly
    ``split_sizes(m, parts)[k]`` nodes.  Every group of one level is split at
    once (one sort over all nodes), so the loop runs over the
    ``ceil(log2(parts))`` levels only.
    """
    m, dim = points.shape
    target = np.concatenate([[0], np.cumsum(split_sizes(m, parts))])
    # rank of every node along every axis, ties by index: one integer sort key per level
    axis_rank = np.empty((m, dim), dtype=np.int64)
    for a in range(dim):
        axis_rank[np.argsort(points[:, a], kind="stable"), a] = np.arange(m)
    lo = np.zeros(m, dtype=np.int64)
    hi = np.full(m, parts, dtype=np.int64)
    perm = np.arange(m)  # nodes sorted by group (lo), kept so between levels
    while np.any(hi - lo > 1):
        group = lo[perm]
        starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
        pts = points[perm]
        extent = (np.maximum.reduceat(pts, starts, axis=0)
                  - np.minimum.reduceat(pts, starts, axis=0))
        axis = np.zeros(parts, dtype=np.int64)
        axis[group[starts]] = np.argmax(extent, axis=1)
        perm = perm[np.argsort(group * m + axis_rank[perm, axis[group]])]  # keys are distinct
        group = lo[perm]  # unchanged groups, now sorted by coordinate inside each
        sizes = np.diff(np.r_[starts, m])
        rank = np.arange(m) - np.repeat(starts, sizes)
        half = (hi[perm] - lo[perm]) // 2
        left = rank < target[group + half] - target[group]
        split = half > 0
        hi[perm[left & split]] = group[left & split] + half[left & split]
        lo[perm[~left & split]] = group[~left & split] + half[~left & split]
    return lo


def _partition(G: sp.csr_matrix, n: int, b: int, parts: Any, partitioner: Any,
               coordinates: Any, seed: Any, parts_name: str):
    """Validate, partition the node graph ``G`` and warn on disconnected parts.

    Returns ``(owner, node_labels, parts, unknown_points)``; ``unknown_points``
    is ``None`` without coordinates.
    """
    parts = _check_parts(parts_name, parts, n, b)
    seed = _check_seed(seed)
    node_points = unknown_points = None
    if coordinates is not None:
        node_points, unknown_points = _check_coordinates(coordinates, n, b)
    graph_components = connected_components(G, directed=True, connection="strong")[0]
    if isinstance(partitioner, str):
        if partitioner not in PARTITIONERS:
            raise ValueError(f"partitioner must be one of {PARTITIONERS} or an integer label "
                             f"array, got {partitioner!r}")
        if partitioner == "metis":
            labels = _metis(G, parts, seed, connected=graph_components == 1)
            empty = np.flatnonzero(np.bincount(labels, minlength=parts) == 0)
            if empty.size:
                raise ValueError(
                    f"{parts_name}={parts}: METIS left {empty.size} of the {parts} parts empty "
                    f"on a graph of {G.shape[0]} nodes; use fewer {parts_name}, "
                    "partitioner='rcb' (with coordinates) or give the labels")
        else:
            if node_points is None:
                raise ValueError("coordinates are required by partitioner='rcb' "
                                 "(n x d array of the unknowns' or nodes' coordinates)")
            labels = _rcb(node_points, parts)
    else:
        labels = _check_labels("partitioner", partitioner, n, b, parts, parts_name)
    _warn_disconnected(G, labels, parts, graph_components)
    return np.repeat(labels, b), labels, parts, unknown_points


def _grow(G: sp.csr_matrix, labels: np.ndarray, parts: int, overlap: int,
          b: int) -> tuple[np.ndarray, np.ndarray]:
    """Packed sorted unknown indices and sizes of the parts grown by ``overlap`` layers of ``G``."""
    m = labels.size
    order = np.argsort(labels, kind="stable")  # node indices sorted inside every part
    indptr = np.concatenate([[0], np.cumsum(np.bincount(labels, minlength=parts))])
    M = sp.csr_matrix((np.ones(m, dtype=bool), order, indptr), shape=(parts, m))
    if overlap:
        step = (G + sp.identity(m, dtype=bool, format="csr")).tocsr()
        for _ in range(overlap):  # Boolean product: a node joins when adjacent to a member
            M = M @ step
        M.sum_duplicates()
        M.sort_indices()
    nodes = M.indices.astype(np.int64)
    sizes = np.diff(M.indptr).astype(np.int64)
    if b == 1:
        return nodes, sizes
    return (nodes[:, None] * b + np.arange(b)).ravel(), sizes * b


# -- public API --------------------------------------------------------------------------------
def partition(A: Any, parts: int, *, partitioner: Any = "metis", coordinates: Any = None,
              block_size: int = 1, seed: int = 0) -> np.ndarray:
    """Non-overlapping partition of the unknowns of a sparse matrix.

    Parameters
    ----------
    A : sparse matrix or 2D array
        Square matrix whose graph (stored pattern without the diagonal,
        symmetrised with a warning when it is not symmetric) is partitioned.
    parts : int
        Number of parts, ``1 <= parts <=`` number of nodes (``n / block_size``).
    partitioner : {"metis", "rcb"} or array of int
        ``"metis"``: k-way METIS (pymetis) on the node graph, contiguous parts
        when the graph is connected.  ``"rcb"``: recursive coordinate bisection
        of ``coordinates`` (part ``k`` holds exactly
        ``split_sizes(n / block_size, parts)[k]`` nodes, so part sizes differ
        by at most one node, for any ``parts``).  An integer array: the labels
        themselves, one per unknown (equal over each node) or, when
        ``block_size > 1``, one per node; each of ``0 .. parts-1`` used.
    coordinates : array of float, optional
        ``n x d`` (or ``n``) coordinates of the unknowns (a node is placed at
        its first unknown), or ``n/block_size x d`` of the nodes; required by
        ``"rcb"``, validated (finite) otherwise.
    block_size : int
        Unknowns per node, interleaved (node ``k`` holds unknowns
        ``k*block_size .. k*block_size + block_size - 1``); a node's unknowns
        get one label.
    seed : int
        Seed of METIS's random number generator: the same seed gives the same
        labels.

    Returns
    -------
    numpy.ndarray
        ``int64`` label of the owning part of every unknown, length ``n``.

    Raises
    ------
    ValueError
        For a non-square ``A``, ``parts`` above the number of nodes,
        ``block_size`` not dividing ``n``, non-finite ``coordinates``, invalid
        labels, or empty parts left by METIS (small graphs with many parts).

    Warns
    -----
    UserWarning
        When the pattern of ``A`` is not symmetric, and when some parts are
        disconnected in the graph of ``A`` (the warning says how many).
    """
    A = _check_matrix(A)
    b = _check_block_size(block_size, A.shape[0])
    G = _node_graph(A, b)
    return _partition(G, A.shape[0], b, parts, partitioner, coordinates, seed, "parts")[0]


def grow_overlap(A: Any, owner: Any, overlap: int, *,
                 block_size: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Grow every part of a partition by ``overlap`` layers of the graph of ``A``.

    Layer ``l + 1`` of a subdomain adds every node adjacent to layer ``l``; all
    subdomains grow together through one Boolean sparse product per layer
    (membership matrix times the node graph plus the identity), so the cost is
    ``O(nnz(A) * overlap)`` for overlaps small against the subdomains, with no
    loop over subdomains or unknowns.

    Parameters
    ----------
    A : sparse matrix or 2D array
        Square matrix whose graph defines the layers (symmetrised with a
        warning when its pattern is not symmetric).
    owner : array of int
        Part of every unknown (or of every node when ``block_size > 1``),
        labels ``0 .. N-1``, each used.
    overlap : int
        Number of layers, ``>= 0`` (0 returns the parts themselves).
    block_size : int
        Unknowns per interleaved node; whole nodes are added.

    Returns
    -------
    indices : numpy.ndarray
        ``int64`` sorted unknown indices of subdomain 0, then 1, ... (packed).
    sizes : numpy.ndarray
        ``int64`` size of every subdomain, length ``N``.
    """
    A = _check_matrix(A)
    n = A.shape[0]
    b = _check_block_size(block_size, n)
    overlap = check_int("overlap", overlap, minimum=0)
    labels = _check_labels("owner", owner, n, b, None)
    G = _node_graph(A, b)
    return _grow(G, labels, int(labels.max()) + 1, overlap, b)


def default_subdomains(num_dofs: int, block_size: int = 1) -> int:
    """The default number of subdomains: parts of about :data:`TARGET_SUBDOMAIN_UNKNOWNS`.

    ``max(2, round(num_dofs / TARGET_SUBDOMAIN_UNKNOWNS))`` (two parts at least, so that a
    two-level method has an interface), and never more than the nodes
    ``num_dofs / block_size``.

    Examples
    --------
    >>> default_subdomains(10**6)
    500
    """
    num_dofs = check_int("num_dofs", num_dofs, minimum=1)
    block_size = check_int("block_size", block_size, minimum=1)
    parts = max(2, int(round(num_dofs / TARGET_SUBDOMAIN_UNKNOWNS)))
    return max(1, min(parts, num_dofs // block_size))


def matrix_subdomains(A: Any, subdomains: int | None = None, overlap: int = 1, *,
                      partitioner: Any = "metis", coordinates: Any = None, block_size: int = 1,
                      seed: int = 0, timings: dict | None = None):
    """The arrays of :func:`~ddops.dd.partition.decomposition_from_matrix`.

    :func:`partition` into ``subdomains`` parts, then :func:`grow_overlap` by ``overlap``
    layers of the graph of ``A`` (arguments as there).  Returns ``(indices, sizes, owner,
    points, block_size)``: the packed subdomains, the owner of every unknown, the
    per-unknown coordinates (None without ``coordinates``) and the validated block size.
    ``timings``, a dict, receives ``partition_seconds`` (checks, the node graph and the
    partition) and ``overlap_seconds``.
    """
    start = time.perf_counter()
    A = _check_matrix(A)
    n = A.shape[0]
    b = _check_block_size(block_size, n)
    overlap = check_int("overlap", overlap, minimum=0)
    if subdomains is None:
        subdomains = default_subdomains(n, b)
    _check_parts("subdomains", subdomains, n, b)
    G = _node_graph(A, b)
    owner, labels, parts, points = _partition(G, n, b, subdomains, partitioner, coordinates,
                                              seed, "subdomains")
    grown = time.perf_counter()
    indices, sizes = _grow(G, labels, parts, overlap, b)
    if timings is not None:
        timings["partition_seconds"] = grown - start
        timings["overlap_seconds"] = time.perf_counter() - grown
    return indices, sizes, owner, points, b


def _check_shape(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, (str, bytes)) or not isinstance(shape, (Sequence, np.ndarray)):
        raise TypeError(f"shape must be a sequence of 1 to 3 integers, got {shape!r}")
    shape = tuple(check_int(f"shape[{k}]", s, minimum=1) for k, s in enumerate(shape))
    if not 1 <= len(shape) <= 3:
        raise ValueError(f"shape must have 1 to 3 entries, got {len(shape)}")
    return shape


def _check_grid_parts(shape: tuple[int, ...], parts: Any) -> tuple[int, ...]:
    if isinstance(parts, numbers.Integral) and not isinstance(parts, bool) and len(shape) == 1:
        parts = (parts,)
    if isinstance(parts, (str, bytes)) or not isinstance(parts, (Sequence, np.ndarray)):
        raise TypeError(f"parts must be a sequence of {len(shape)} integers (boxes per "
                        f"direction), got {parts!r}")
    if len(parts) != len(shape):
        raise ValueError(f"parts must have one entry per direction of shape {shape}, got "
                         f"{len(parts)}")
    parts = tuple(check_int(f"parts[{k}]", p, minimum=1) for k, p in enumerate(parts))
    for k, (points, boxes) in enumerate(zip(shape, parts)):
        if boxes > points:
            raise ValueError(f"parts[{k}]={boxes} exceeds shape[{k}]={points} (points in that "
                             "direction)")
    return parts


def grid_partition(shape: Sequence[int], parts: Sequence[int]) -> np.ndarray:
    """Box partition of a structured grid.

    Direction ``k`` (``n_k`` points) is cut into ``parts[k]`` consecutive
    slabs whose sizes differ by at most one (:func:`~ddops.dd.decomposition.split_sizes`,
    larger slabs first); a box is one slab per direction.

    Parameters
    ----------
    shape : sequence of int
        Points per direction, ``(nx, ny)`` or ``(nx, ny, nz)`` (``(nx,)`` works too).
    parts : sequence of int
        Boxes per direction, ``1 <= parts[k] <= shape[k]``.

    Returns
    -------
    numpy.ndarray
        ``int64`` box of every point, length ``prod(shape)``: point
        ``i + nx*j + nx*ny*k`` lies in box ``bi + px*bj + px*py*bk``.
    """
    shape = _check_shape(shape)
    parts = _check_grid_parts(shape, parts)
    owner = np.zeros(1, dtype=np.int64)
    stride = 1
    for size, p in zip(shape, parts):  # outer index is the slower direction
        slab = np.repeat(np.arange(p, dtype=np.int64), split_sizes(size, p))
        owner = (slab[:, None] * stride + owner[None, :]).ravel()
        stride *= p
    return owner




def grid_subdomains(shape: Sequence[int], parts: Sequence[int], overlap: int = 1):
    """The arrays of :func:`~ddops.dd.partition.decomposition_from_grid`.

    The boxes of :func:`grid_partition` grown by ``overlap`` layers of :func:`grid_graph`.
    Returns ``(indices, sizes, owner, points, h)``: the packed subdomains, the box of every
    point, the ``n x d`` grid points ``(i + 1) / (n_k + 1)`` and the largest mesh width
    ``1 / (min(shape) + 1)``.
    """
    shape = _check_shape(shape)
    parts = _check_grid_parts(shape, parts)
    overlap = check_int("overlap", overlap, minimum=0)
    owner = grid_partition(shape, parts)
    indices, sizes = _grow(grid_graph(shape), owner, int(np.prod(parts)), overlap, 1)
    axes = [np.arange(1, s + 1) / (s + 1) for s in shape]
    points = np.stack([g.ravel() for g in np.meshgrid(*axes[::-1], indexing="ij")[::-1]],
                      axis=1)
    return indices, sizes, owner, points, 1.0 / (min(shape) + 1)
