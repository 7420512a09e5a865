"""The interface of a non-overlapping partition and its components, from the graph of ``A``.

The GDSW-type coarse spaces (:mod:`ddops.dd.gdsw`, :mod:`ddops.dd.agdsw`) attach their
functions to the components of the interface found here from a symmetric matrix ``A``
(only its pattern) and a non-overlapping partition ``owner`` (one part label per unknown);
no coordinates or mesh.

The interface
-------------
One of three rules decides which unknowns form the interface ``Gamma`` and
which parts each interface unknown *touches* (its part-set):

* **Algebraic rule** (``interface=None``).  Unknown ``j`` is on the
  interface when ``A`` couples it (a stored off-diagonal nonzero of ``A`` or
  ``A^T``) to an unknown of another part.  It touches its own part and the
  parts of all its neighbours in the graph of ``A``.  The interface is two
  layers thick (both sides of every cut), and with a 5-point stencil a cross
  point of four boxes gives four one-node components touching three parts
  each, where a 9-point stencil gives one component touching all four.
* **Shared-node rule** (``interface`` given as a mask or index array, e.g. the
  nodes shared by the parts of an element-based partition).  The unknowns not
  in ``interface`` are the interiors of their parts, and ``A`` must not couple
  interiors of different parts.  An interface unknown touches every part
  whose *interior* it is coupled to; one coupled to no interior unknown at all
  (the cross point of a 5-point stencil) touches the union of what its
  interface neighbours touch (or, failing that, its own part).  The owner
  label of an interface unknown, an arbitrary tie-break in an element-based
  partition, is not used otherwise.
* ``interface`` may also be an ``n x N`` Boolean incidence matrix (sparse or
  dense): row ``j`` lists the parts unknown ``j`` touches, e.g. the nodes x
  elements incidence times the elements x parts partition of a mesh.  Rows
  with two or more parts are the interface; a row with one part must name
  ``owner[j]``.

Interface components
--------------------
Interface unknowns with the same part-set that are connected in the graph of
``A`` through unknowns of that same part-set form one *component* (vertices,
edges and faces of a geometric partition, found without geometry).
Components are numbered by their smallest unknown.  With ``block_size = b >
1`` (interleaved vector problems) the ``b`` unknowns ``b m, ..., b m + b - 1``
of node ``m`` are classified together: a node is on the interface when any of
its unknowns is, and touches the union of their parts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp
import scipy.sparse.csgraph as csgraph

from .._validation import check_int
from ..linalg.local_solvers import node_graph
from .validation import check_matrix, check_owner, known_exactly_symmetric

__all__ = [
    "InterfaceComponents",
    "interface_components",
    "classify_interface",
]


def _incidence(labels: np.ndarray, num_parts: int) -> sp.csr_matrix:
    """Boolean ``len(labels) x num_parts`` matrix with one entry per row."""
    m = labels.size
    return sp.csr_matrix((np.ones(m, dtype=bool), labels, np.arange(m + 1)),
                         shape=(m, num_parts))


def _graph(A: sp.csr_matrix) -> sp.csr_matrix:
    """Boolean symmetric adjacency of ``A`` (stored nonzeros of ``A`` or ``A^T``), no diagonal:
    :func:`~ddops.linalg.local_solvers.node_graph` of ``A``'s pattern, or of ``|A| + |A^T|``
    where that pattern is not symmetric."""
    # inside a set-up that made A exactly symmetric its pattern is, without a transpose
    # (8 M nonzeros of 3D elasticity: 0.1-0.2 s)
    if not (known_exactly_symmetric(A) and A.has_canonical_format):
        T = A.T.tocsr()
        if not (np.array_equal(A.indptr, T.indptr) and np.array_equal(A.indices, T.indices)):
            A = (abs(A) + abs(T)).tocsr()  # absolute values: no cancellation in the union
    return node_graph(A, 1)


@dataclass
class InterfaceComponents:
    """The interface of a non-overlapping partition split into components.

    Attributes
    ----------
    num_dofs : int
        Number of unknowns ``n``.
    num_parts : int
        Number of part labels ``N`` (``owner.max() + 1``).
    owner : numpy.ndarray
        The part label of every unknown.
    interface : numpy.ndarray
        Sorted interface unknowns.
    component : numpy.ndarray
        Component of every interface unknown (same length as ``interface``).
    parts : scipy.sparse.csr_matrix
        ``num_components x N`` Boolean part-sets of the components.
    rule : str
        ``"algebraic"``, ``"shared"`` or ``"incidence"``: how the interface
        was found (see the module notes).
    block_size : int
        Unknowns per node classified together.
    """

    num_dofs: int
    num_parts: int
    owner: np.ndarray
    interface: np.ndarray
    component: np.ndarray
    parts: sp.csr_matrix
    rule: str
    block_size: int = 1
    _cache: dict = field(default_factory=dict, repr=False)

    @property
    def num_components(self) -> int:
        """Number of interface components."""
        return int(self.parts.shape[0])

    @property
    def sizes(self) -> np.ndarray:
        """Number of unknowns of every component."""
        return np.bincount(self.component, minlength=self.num_components)

    @property
    def multiplicity(self) -> np.ndarray:
        """Number of parts every component touches (2: edge/face, more: vertex-like)."""
        return np.diff(self.parts.indptr)

    @property
    def interior(self) -> np.ndarray:
        """Sorted unknowns that are not on the interface."""
        mask = np.ones(self.num_dofs, dtype=bool)
        mask[self.interface] = False
        return np.flatnonzero(mask)

    def first_parts(self) -> np.ndarray:
        """The lowest part label around every component (a component has at least one part;
        a distributed build gives the component to the rank of this part)."""
        P = self.parts.tocsr()
        return np.minimum.reduceat(P.indices, P.indptr[:-1])

    def parts_around(self, components: np.ndarray) -> np.ndarray:
        """Boolean per part: the parts around the components of the Boolean mask
        ``components``."""
        around = np.zeros(self.num_parts, dtype=bool)
        around[self.parts.tocsr()[np.flatnonzero(components)].indices] = True
        return around

    def part_sets(self) -> list[tuple[int, ...]]:
        """The part-set of every component as a tuple (for inspection and tests)."""
        P = self.parts
        return [tuple(int(p) for p in P.indices[P.indptr[c]:P.indptr[c + 1]])
                for c in range(self.num_components)]

    def ancestors(self) -> sp.csr_matrix:
        """Boolean ``C x C``: ``[c, a]`` when the parts of ``c`` are a strict subset of ``a``'s.

        One sparse product ``P P^T`` counts the common parts of every pair of
        components that share one.
        """
        if "ancestors" not in self._cache:
            P = self.parts.astype(np.int64)
            common = (P @ P.T).tocoo()
            size = self.multiplicity
            keep = (common.data == size[common.row]) & (size[common.col] > size[common.row])
            C = self.num_components
            anc = sp.csr_matrix((np.ones(int(keep.sum()), dtype=bool),
                                 (common.row[keep], common.col[keep])), shape=(C, C))
            anc.sort_indices()
            self._cache["ancestors"] = anc
        return self._cache["ancestors"]

    def roots(self) -> np.ndarray:
        """Components with no ancestor (the RGDSW coarse nodes), in component order."""
        return np.flatnonzero(np.diff(self.ancestors().indptr) == 0)

    def root_weights(self) -> sp.csr_matrix:
        """``C x R`` option-1 weights: ``1 / |roots(c)|`` from every root above ``c`` (or itself).

        Every row sums to one: every non-root component has a root among its
        ancestors (a maximal one), so the weights form a partition of unity.
        """
        roots = self.roots()
        C, R = self.num_components, roots.size
        position = np.full(C, -1, dtype=np.int64)
        position[roots] = np.arange(R)
        anc = self.ancestors().tocoo()
        is_root = position[anc.col] >= 0
        rows = np.concatenate([anc.row[is_root], roots])
        cols = np.concatenate([position[anc.col[is_root]], np.arange(R)])
        count = np.bincount(rows, minlength=C)
        W = sp.csr_matrix((1.0 / count[rows], (rows, cols)), shape=(C, R))
        W.sort_indices()
        return W


def _interface_incidence(A, G, owner, num_parts, interface):
    """Part-sets of all unknowns as an ``n x N`` Boolean matrix, the interface mask and the rule."""
    n = owner.size
    O = _incidence(owner, num_parts)
    if interface is None:
        T = ((G @ O) + O).astype(bool).tocsr()
        return T, np.diff(T.indptr) > 1, "algebraic"
    if sp.issparse(interface) or np.ndim(interface) == 2:
        T = sp.csr_matrix(interface, dtype=bool)
        T.eliminate_zeros()
        if T.shape[0] != n:
            raise ValueError(f"interface as an incidence matrix must have {n} rows (one per "
                             f"unknown), got shape {T.shape}")
        if T.shape[1] < num_parts:
            T = sp.csr_matrix((T.data, T.indices, T.indptr), shape=(n, num_parts))
        counts = np.diff(T.indptr)
        if np.any(counts == 0):
            raise ValueError(f"interface: unknown {int(np.argmin(counts))} touches no part")
        single = np.flatnonzero(counts == 1)
        wrong = single[T.indices[T.indptr[single]] != owner[single]]
        if wrong.size:
            j = int(wrong[0])
            raise ValueError(f"interface: unknown {j} touches only part "
                             f"{int(T.indices[T.indptr[j]])} but owner[{j}] = {owner[j]}")
        gamma = counts > 1
        _check_separation(G, owner, gamma)
        return T, gamma, "incidence"
    idx = np.asarray(interface)
    gamma = np.zeros(n, dtype=bool)
    if idx.dtype == bool:
        if idx.shape != (n,):
            raise ValueError(f"interface as a Boolean mask must have shape ({n},), got "
                             f"{idx.shape}")
        gamma = idx.copy()
    else:
        if idx.size and idx.dtype.kind not in "iu":
            raise TypeError(f"interface must be a Boolean mask, an index array or an incidence "
                            f"matrix, got dtype {idx.dtype}")
        idx = idx.astype(np.int64).ravel()
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise ValueError(f"interface indices must lie in [0, {n}), got "
                             f"[{idx.min()}, {idx.max()}]")
        gamma[idx] = True
    _check_separation(G, owner, gamma)
    inner = (~gamma).astype(np.float64)
    # parts of the interior neighbours; interior rows touch only their own part
    on = sp.diags(gamma.astype(np.float64))
    off = sp.diags(inner)
    T = ((on @ G @ off @ O) + (off @ O)).astype(bool).tocsr()
    empty = gamma & (np.diff(T.indptr) == 0)
    if empty.any():
        # e.g. a 5-point cross point: all its neighbours are interface unknowns
        borrowed = sp.diags(empty.astype(np.float64)) @ G @ on @ T
        T = (T + borrowed).astype(bool).tocsr()
        still = empty & (np.diff(T.indptr) == 0)
        if still.any():
            T = (T + sp.diags(still.astype(np.float64)) @ O).astype(bool).tocsr()
    return T, gamma, "shared"


def _check_separation(G, owner, gamma):
    inner = np.flatnonzero(~gamma)
    sub = G[inner][:, inner].tocoo()
    bad = owner[inner[sub.row]] != owner[inner[sub.col]]
    if bad.any():
        i, j = int(inner[sub.row[bad][0]]), int(inner[sub.col[bad][0]])
        raise ValueError(f"interface does not separate the parts: the interior unknowns {i} "
                         f"(part {owner[i]}) and {j} (part {owner[j]}) are coupled by A; add "
                         "one of them to the interface")


def interface_components(
    A: Any,
    owner: Any,
    *,
    interface: Any = None,
    block_size: int = 1,
) -> InterfaceComponents:
    """Classify the interface of a non-overlapping partition into components.

    Parameters
    ----------
    A : sparse matrix or array
        Symmetric ``n x n`` matrix; only its pattern is used here.
    owner : array of int, shape (n,)
        Part label of every unknown (labels ``0 .. N-1``).
    interface : None, Boolean mask, index array or ``n x N`` incidence matrix
        None: the algebraic rule; a mask or index array: the shared-node rule;
        an incidence matrix: the part-sets themselves (module notes).
    block_size : int
        Classify the unknowns of each node (``block_size`` consecutive
        unknowns) together.

    Returns
    -------
    InterfaceComponents

    Raises
    ------
    ValueError
        Bad shapes, labels or block size, or a given interface that does not
        separate the interiors of different parts.
    """
    A = check_matrix(A, rows=False)
    return classify_interface(A, check_owner(owner, A.shape[0]), interface, block_size)


def classify_interface(A: sp.csr_matrix, owner: np.ndarray, interface: Any,
                       block_size: int) -> InterfaceComponents:
    """:func:`interface_components` of a matrix and partition that are already checked.

    ``A`` as :func:`ddops.dd.validation.check_matrix` returns it and ``owner`` as
    :func:`ddops.dd.validation.check_owner` does; the coarse-space builders check them once
    and classify without checking again.
    """
    n = A.shape[0]
    b = check_int("block_size", block_size, minimum=1)
    if n % b:
        raise ValueError(f"block_size={b} does not divide the number of unknowns {n}")
    if b > 1 and np.any(owner.reshape(-1, b) != owner[::b, None]):
        raise ValueError(f"owner must give the same part to the block_size={b} unknowns of a "
                         "node")
    N = int(owner.max()) + 1 if n else 0
    G = _graph(A)
    T, gamma, rule = _interface_incidence(A, G, owner, N, interface)
    if b > 1:  # node level: union over the unknowns of each node
        agg = sp.csr_matrix((np.ones(n, dtype=bool), np.arange(n), np.arange(0, n + 1, b)),
                            shape=(n // b, n))
        T = (agg @ T).astype(bool).tocsr()
        G = (agg @ G @ agg.T).astype(bool).tocsr()
        G.setdiag(False)
        G.eliminate_zeros()
        gamma = (agg @ gamma.astype(np.int64)) > 0
    nodes = np.flatnonzero(gamma)
    key = _part_set_keys(T[nodes])
    sub = G[nodes][:, nodes].tocoo()
    same = key[sub.row] == key[sub.col]
    graph = sp.csr_matrix((np.ones(int(same.sum())), (sub.row[same], sub.col[same])),
                          shape=(nodes.size, nodes.size))
    count, label = csgraph.connected_components(graph, directed=False)
    # number components by their smallest unknown (nodes are sorted)
    first = np.full(count, nodes.size, dtype=np.int64)
    np.minimum.at(first, label, np.arange(nodes.size))
    order = np.argsort(first, kind="stable")
    renumber = np.empty(count, dtype=np.int64)
    renumber[order] = np.arange(count)
    label = renumber[label]
    parts = T[nodes[first[order]]].astype(bool).tocsr()
    parts.sort_indices()
    if b > 1:
        dofs = (nodes[:, None] * b + np.arange(b)).ravel()
        label = np.repeat(label, b)
        nodes = dofs
    return InterfaceComponents(num_dofs=n, num_parts=N, owner=owner, interface=nodes,
                               component=label, parts=parts, rule=rule, block_size=b)


def _part_set_keys(T: sp.csr_matrix) -> np.ndarray:
    """Integer key of every row's set of columns: equal keys iff equal sets.

    Rows are padded to the longest with -1 and made unique lexicographically,
    exactly and without a Python loop.
    """
    T = sp.csr_matrix(T)
    T.sort_indices()
    counts = np.diff(T.indptr)
    if T.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    width = max(int(counts.max()), 1)
    padded = np.full((T.shape[0], width), -1, dtype=np.int64)
    row = np.repeat(np.arange(T.shape[0]), counts)
    padded[row, np.arange(T.indices.size) - T.indptr[row]] = T.indices
    _, key = np.unique(padded, axis=0, return_inverse=True)
    return key.ravel().astype(np.int64)
