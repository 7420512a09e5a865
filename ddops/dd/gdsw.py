"""Algebraic GDSW, RGDSW and Nicolaides coarse spaces built from an assembled sparse matrix.

Everything here works from a symmetric positive definite matrix ``A`` (CSR), a
non-overlapping partition ``owner`` (one part label per unknown) and a
null space ``Z`` (``n x k``, constants by default); no coordinates or mesh.

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

The coarse spaces
-----------------
``"gdsw"`` (Dohrmann, Klawonn, Widlund): one function per component and
null-space vector, equal to the vector on the component and zero on the rest
of the interface, extended into the interiors by the discrete harmonic
extension ``-A_II^{-1} A_IG``.  ``"rgdsw"`` (Dohrmann, Widlund, option 1):
functions only for the *root* components, those whose part-set is not
strictly contained in the part-set of any other component; every interface
unknown in a component ``c`` gets the weight ``1 / |roots(c)|`` from each root
whose part-set contains that of ``c`` (weight 1 from itself on a root), so
the interface values of the functions of one null-space vector sum to that
vector: a partition of unity of the null space on the interface.  The
harmonic extension is the same.  The roots above ``c`` are sought among all
components, adjacent to ``c`` or not (a part-set inclusion only).

Where the vectors of ``Z`` are linearly dependent on a component (GDSW) or on
a root's interface support (RGDSW), such as the rotation on a one-node
vertex of 2D elasticity, the later vectors are dropped there (Gram-Schmidt in
the order of the columns of ``Z``, relative tolerance
:data:`DEPENDENCE_RTOL`); the kept ones span the same space there.

The interior matrix ``A_II`` is block diagonal over the parts.  It is
factorised in chunks of consecutive parts, and the extension is computed for
all coarse functions by one multi-column solve per chunk whose columns are
shared between parts: column slot ``s`` holds, on the rows of part ``p``, the right-hand side
of the ``s``-th coarse function adjacent to ``p``, so the number of columns
is the largest number of coarse functions adjacent to one part, not the
coarse dimension (see :func:`harmonic_extension`).  Both variants extend the
same pieces, ``Z[:, a]`` on one component: they are the GDSW functions, and,
the extension being linear, an RGDSW function is the weighted sum of the
extended pieces of its root and offspring (one sparse product).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.csgraph as csgraph

from .._validation import (
    as_matrix,
    as_vectors,
    check_choice,
    check_finite,
    check_int,
    check_no_empty_rows,
    check_positive_float,
)
from ..linalg.local_solvers import (
    CHUNK_ROWS,
    SPARSE_SOLVERS,
    SUPERLU_PANEL_SIZE,
    SingularBlockError,
    chunk_bounds,
    default_exact_solver,
    factorize_blocks,
    superlu_spd,
)

__all__ = [
    "GDSW_VARIANTS",
    "DEPENDENCE_RTOL",
    "SINGULAR_PIVOT_RTOL",
    "EXTENSION_CHUNK_BYTES",
    "FACTOR_CHUNK_ROWS",
    "EXTENSION_RTOL",
    "EXTENSION_MAXITER",
    "SUPERLU_PANEL_SIZE",
    "chunk_bounds",
    "InterfaceComponents",
    "GDSWInfo",
    "interface_components",
    "gdsw_basis",
    "harmonic_extension",
    "nicolaides_basis",
    "coarse_matrix_checked",
    "drop_dependent_columns",
    "DROP_PIVOT_RTOL",
    "DENSE_DROP_MAX",
    "symmetry_defect",
]

#: Names accepted by ``gdsw_basis(..., variant=)``.
GDSW_VARIANTS = ("gdsw", "rgdsw")

#: A null-space vector is dropped from a component (or root, or subdomain) when
#: the part of it orthogonal to the earlier kept vectors there has a norm at
#: most this fraction of its own norm there (e.g. a rotation on a one-node
#: vertex in 2D elasticity, which two translations already span).
DEPENDENCE_RTOL = 1e-8

#: :func:`coarse_matrix_checked` flags a column of Phi as dependent when its
#: pivot in the Cholesky factorisation of the unit-diagonal scaled coarse
#: matrix, the squared sine of its A-angle to the columns eliminated before
#: it, is at most this.
SINGULAR_PIVOT_RTOL = 1e-12

#: :func:`drop_dependent_columns` drops a column of Phi whose pivot (the squared sine of its
#: A-angle to the columns eliminated before it) is at most this: 100 times the tolerance of
#: :func:`coarse_matrix_checked`, so that what is kept always passes that check.
DROP_PIVOT_RTOL = 1e-10

#: :func:`drop_dependent_columns` uses a dense pivoted Cholesky factorisation up to this many
#: coarse functions (about 3 s at 4000 on one core), a sparse one beyond.
DENSE_DROP_MAX = 4000

#: The harmonic extension solves at most this many bytes of right-hand sides at
#: once (float64 ``rows x columns`` blocks, rows those of one chunk of parts).
EXTENSION_CHUNK_BYTES = 2**24

#: Relative residual of every column of the inexact (``solver="amg"``) harmonic extension.
EXTENSION_RTOL = 1e-6

#: Iteration limit of the conjugate gradients of the inexact extension.
EXTENSION_MAXITER = 200

#: Block-diagonal matrices (the interior matrix ``A_II`` here, the local
#: matrices of :class:`ddops.TwoLevelSchwarz`) are factorised in chunks of
#: consecutive blocks of about this many rows (see :func:`chunk_bounds`).
FACTOR_CHUNK_ROWS = CHUNK_ROWS



# -- validation ------------------------------------------------------------------------------
def _as_csr(name: str, M: Any) -> sp.csr_matrix:
    """A real 2-D sparse matrix or array as float64 CSR, or a ValueError naming it.

    A float64 CSR matrix in canonical form (sorted indices, no duplicates) is
    returned as it is (nothing here modifies it); anything else is copied.
    """
    if sp.issparse(M):
        if M.format == "csr" and M.dtype == np.float64 and M.has_canonical_format:
            return sp.csr_matrix(M)  # a new object sharing the arrays: no copy
        return sp.csr_matrix(M, dtype=np.float64, copy=True)
    arr = np.asarray(M)
    if arr.dtype.kind not in "fiub" or arr.ndim != 2:
        raise ValueError(f"{name} must be a real 2-D matrix, got dtype {arr.dtype} and shape "
                         f"{arr.shape}")
    return sp.csr_matrix(arr.astype(np.float64))


def symmetry_defect(A: sp.csr_matrix) -> tuple[float, bool]:
    """``max |A - A^T|`` of a canonical CSR matrix, and whether ``A`` equals ``A^T`` exactly.

    One transpose (a CSR-to-CSC conversion, whose indices come out sorted);
    when the patterns agree the defect is read from the aligned values, the
    usual case, without forming ``A - A^T`` (about ten times faster at 5 M
    nonzeros).
    """
    T = A.T.tocsr()
    if np.array_equal(A.indptr, T.indptr) and np.array_equal(A.indices, T.indices):
        asym = float(np.abs(A.data - T.data).max()) if A.nnz else 0.0
        return asym, asym == 0.0
    diff = abs(A - T)
    return (float(diff.max()) if diff.nnz else 0.0), False


def _check_matrix(A: Any, rows: bool = True) -> sp.csr_matrix:
    """Square, finite, symmetric ``A`` as float64 CSR with canonical indices, no zeros; with
    ``rows``, no empty row (``interface_components`` also classifies the rows a rank owns of
    a matrix whose other rows are empty)."""
    A, _ = as_matrix(A, "A")
    if rows:
        check_no_empty_rows(A, "A")
        _check_positive_diagonal(A)
    if A.nnz and not np.all(A.data):  # explicit zeros: dropped on a copy (A may share arrays)
        A = A.copy()
        A.eliminate_zeros()
    scale = float(np.abs(A.data).max()) if A.nnz else 0.0
    asym, _ = symmetry_defect(A)
    if asym > np.sqrt(np.finfo(np.float64).eps) * scale:
        raise ValueError(f"A is not symmetric: max |A - A^T| = {asym:.3e} against max |A| = "
                         f"{scale:.3e}; the GDSW coarse spaces need an SPD matrix")
    return A


def _check_positive_diagonal(A: sp.csr_matrix) -> None:
    """Refuse a non-positive diagonal entry: ``A`` is then not positive (semi)definite.

    The one-line test where ``A`` enters the coarse-space construction, so that ``-A``
    is named as not positive definite instead of as a singular interior matrix later
    (a zero diagonal of a positive semidefinite matrix means an empty row, refused before).
    """
    diag = A.diagonal()
    bad = np.flatnonzero(~(diag > 0))
    if bad.size:
        i = int(bad[0])
        more = f" (and {bad.size - 1} more)" if bad.size > 1 else ""
        raise ValueError(f"A is not positive definite: its diagonal entry A[{i}, {i}] = "
                         f"{diag[i]:.3e} is not positive{more}; the coarse spaces need a "
                         "symmetric positive definite A")


def _check_owner(owner: Any, n: int) -> np.ndarray:
    owner = np.asarray(owner)
    if owner.ndim != 1 or owner.shape[0] != n:
        raise ValueError(f"owner must have shape ({n},) (one part label per unknown), got "
                         f"shape {owner.shape}")
    if owner.size and owner.dtype.kind not in "iu":
        raise TypeError(f"owner must hold integer part labels, got dtype {owner.dtype}")
    owner = owner.astype(np.int64)
    if owner.size and owner.min() < 0:
        raise ValueError(f"owner labels must be >= 0, got {owner.min()}")
    return owner


def _check_null_space(null_space: Any, n: int) -> np.ndarray:
    """The null space as ``n x k`` float64; the constants (``n x 1`` ones) for None."""
    return np.ones((n, 1)) if null_space is None else as_vectors(null_space, n, "null_space")


def _incidence(labels: np.ndarray, num_parts: int) -> sp.csr_matrix:
    """Boolean ``len(labels) x num_parts`` matrix with one entry per row."""
    m = labels.size
    return sp.csr_matrix((np.ones(m, dtype=bool), labels, np.arange(m + 1)),
                         shape=(m, num_parts))


def _graph(A: sp.csr_matrix) -> sp.csr_matrix:
    """Boolean symmetric adjacency of ``A`` (stored nonzeros of ``A`` or ``A^T``), no diagonal."""
    n = A.shape[0]
    T = A.T.tocsr()
    if np.array_equal(A.indptr, T.indptr) and np.array_equal(A.indices, T.indices):
        # a symmetric pattern (the usual case): the off-diagonal entries of A, kept in order
        rows = np.repeat(np.arange(n), np.diff(A.indptr))
        off = A.indices != rows
        indptr = np.concatenate([[0], np.cumsum(np.bincount(rows[off], minlength=n))])
        return sp.csr_matrix((np.ones(int(off.sum()), dtype=bool), A.indices[off], indptr),
                             shape=A.shape)
    C = (abs(A) + abs(T)).tocoo()  # absolute values: no cancellation in the union
    off = C.row != C.col
    G = sp.csr_matrix((np.ones(int(off.sum()), dtype=bool), (C.row[off], C.col[off])),
                      shape=A.shape)
    G.sort_indices()
    return G


# -- interface components ------------------------------------------------------------------------
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
    A = _check_matrix(A, rows=False)
    return _components(A, _check_owner(owner, A.shape[0]), interface, block_size)


def _components(A: sp.csr_matrix, owner: np.ndarray, interface: Any,
                block_size: int) -> InterfaceComponents:
    """:func:`interface_components` on a checked matrix and partition."""
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


# -- independent null-space vectors per group ------------------------------------------------------
def _independent_vectors(group: np.ndarray, values: np.ndarray, num_groups: int,
                         rtol: float) -> np.ndarray:
    """Which vectors to keep in each group, greedily in their order.

    ``values`` (``m x k``) are the entries of the ``k`` vectors on the rows of
    all groups (``group[i]`` is the group of row ``i``).  Vector ``a`` is kept
    in a group when its part orthogonal to the earlier kept vectors there
    (Gram-Schmidt, done twice for stability) has a norm above ``rtol`` times
    its own norm there.  All groups are processed at once by segmented sums.

    Returns
    -------
    numpy.ndarray
        ``num_groups x k`` Boolean.
    """
    m, k = values.shape
    keep = np.zeros((num_groups, k), dtype=bool)
    Q = np.zeros((m, k))

    def seg(x):
        return np.bincount(group, weights=x, minlength=num_groups)

    for a in range(k):
        w = values[:, a].copy()
        norm0 = np.sqrt(seg(w * w))
        for _ in range(2):
            for c in range(a):
                w -= seg(Q[:, c] * w)[group] * Q[:, c]
        norm = np.sqrt(seg(w * w))
        ok = (norm0 > 0) & (norm > rtol * norm0)
        keep[:, a] = ok
        Q[:, a] = w * np.divide(1.0, norm, out=np.zeros_like(norm), where=ok)[group]
    return keep


def _columns_from_groups(rows, group, values, keep, n):
    """Assemble the kept group vectors as ``n x n0`` columns (group-major, then vector).

    Returns the matrix and the ``num_groups x k`` column index of every
    (group, vector) pair (-1 where not kept).
    """
    num_groups, k = keep.shape
    column = np.full((num_groups, k), -1, dtype=np.int64)
    column[keep] = np.arange(int(keep.sum()))  # row-major: group-major order
    r_all, c_all, v_all = [], [], []
    for a in range(k):  # loop over the few null-space vectors only
        sel = keep[group, a]
        r_all.append(rows[sel])
        c_all.append(column[group[sel], a])
        v_all.append(values[sel, a])
    Phi = sp.csr_matrix((np.concatenate(v_all), (np.concatenate(r_all), np.concatenate(c_all))),
                        shape=(n, int(keep.sum())))
    Phi.eliminate_zeros()
    Phi.sort_indices()
    return Phi, column


# -- harmonic extension ---------------------------------------------------------------------------
def _spd_factor(K: sp.spmatrix):
    """SuperLU of an SPD matrix (see :func:`ddops.linalg.local_solvers.superlu_spd`)."""
    return superlu_spd(K)


def harmonic_extension(
    A: sp.csr_matrix,
    owner: np.ndarray,
    interface: np.ndarray,
    Phi_interface: sp.spmatrix,
    *,
    chunk_bytes: int = EXTENSION_CHUNK_BYTES,
    chunk_rows: int | None = None,
    solver: str = "auto",
    rtol: float = EXTENSION_RTOL,
    null_space: np.ndarray | None = None,
) -> sp.csr_matrix:
    """Extend interface values into the interiors: ``Phi_I = -A_II^{-1} A_IG Phi_G``.

    ``A_II`` is block diagonal over the parts (the interface separates them).
    The right-hand sides ``-A_IG Phi_G`` are packed by part: with ``(p, j)``
    the pairs of a part and a coarse function whose right-hand side is
    nonzero on ``p``'s rows, the ``s``-th pair of part ``p`` goes to column
    ``s`` on ``p``'s rows.  One solve per chunk of parts with ``c = max_p |pairs of
    p|`` columns (``p`` in the chunk; in column blocks of at most
    ``chunk_bytes``) then extends every function into every part, and its
    nonzeros are scattered back to the coarse columns.  The parts are ordered by
    their number of pairs before they are cut into chunks, so that a chunk solves
    with about as many columns as its parts need and no more (corner parts of a 3D
    elasticity partition touch a fraction of the functions of central ones).  Each
    chunk's factor is dropped once its extensions are computed.

    Parameters
    ----------
    A : scipy.sparse.csr_matrix
        The SPD matrix (float64, canonical).
    owner : numpy.ndarray
        Part label of every unknown.
    interface : numpy.ndarray
        Sorted interface unknowns; every other unknown is interior.
    Phi_interface : sparse matrix
        ``n x n0`` coarse values, nonzero on interface rows only.
    chunk_bytes : int
        Memory bound of one block of right-hand sides.
    chunk_rows : int, optional
        Target rows of one chunk of parts factorised together (default
        :data:`FACTOR_CHUNK_ROWS`, whatever the solver); the result does not depend on it
        beyond rounding.
    solver : {"auto", "superlu", "pardiso", "amg"}
        The interior solver (:func:`ddops.linalg.local_solvers.factorize_blocks`):
        ``"auto"`` is PARDISO when it is installed, else SuperLU.  ``"amg"`` is the
        inexact extension: conjugate gradients on every column, preconditioned by one
        aggregation-AMG V-cycle, stopped when the residual of every coarse function
        in every part is at most ``rtol`` times its right-hand side there
        (``||A_{I_p I_p} x - b_p|| <= rtol ||b_p||``, Euclidean norms; at most
        :data:`EXTENSION_MAXITER` iterations).
    rtol : float
        Relative residual of the inexact extension (ignored by the exact solvers).
    null_space : numpy.ndarray, optional
        ``n x k`` near-null space for the aggregation of the ``"amg"`` extension
        (constants by default).

    Returns
    -------
    scipy.sparse.csr_matrix
        ``n x n0``: the interface values plus their extension (exact zeros
        dropped, so each column lives on its interface support and the
        interiors of the parts adjacent to it).
    """
    check_choice("solver", solver, ("auto", *SPARSE_SOLVERS))
    if solver == "auto":
        solver = default_exact_solver()
    rtol = check_positive_float("rtol", rtol)
    if chunk_rows is None:
        chunk_rows = FACTOR_CHUNK_ROWS
    chunk_rows = check_int("chunk_rows", chunk_rows, minimum=1)
    n = A.shape[0]
    PhiG = sp.csr_matrix(Phi_interface)
    n0 = PhiG.shape[1]
    mask = np.ones(n, dtype=bool)
    mask[interface] = False
    interior = np.flatnonzero(mask)
    if interior.size == 0 or n0 == 0:
        return PhiG
    N = int(owner.max()) + 1
    A_I = A[interior]
    B = (-(A_I[:, interface] @ PhiG[interface])).tocsr()  # the right-hand sides, once
    B.sum_duplicates()
    B.eliminate_zeros()
    # pairs per part decide the part order: chunks of parts with similar column counts
    B_coo = B.tocoo()
    pair_keys = np.unique(owner[interior][B_coo.row] * np.int64(n0) + B_coo.col)
    del B_coo
    width_of = np.bincount(pair_keys // n0, minlength=N)
    rank = np.empty(N, dtype=np.int64)
    rank[np.lexsort((np.arange(N), width_of))] = np.arange(N)
    # grouping the interior by part makes the blocks of A_II contiguous, so it can be
    # factorised chunk by chunk of parts
    perm = np.argsort(rank[owner[interior]], kind="stable")
    interior = interior[perm]
    part = owner[interior]
    A_II = A_I[perm][:, interior].tocsr()
    B = B[perm].tocoo()  # rows sorted (from CSR)
    del A_I
    pairs, which = np.unique(rank[part[B.row]] * np.int64(n0) + B.col, return_inverse=True)
    which = which.ravel()
    pair_rank, pair_col = pairs // n0, pairs % n0
    slot = np.arange(pairs.size) - np.searchsorted(pair_rank, pair_rank)  # rank within part
    width = int(slot.max()) + 1 if pairs.size else 0
    index = np.full((N, max(width, 1)), -1, dtype=np.int64)
    index[pair_rank, slot] = pair_col
    entry_slot = slot[which]
    part_offsets = np.concatenate([[0], np.cumsum(np.bincount(rank[part], minlength=N))])
    bounds = chunk_bounds(part_offsets, chunk_rows)
    entry_bounds = np.searchsorted(B.row, bounds)
    pieces = []  # per chunk: its first and last interior row and its rows of Phi (CSR)
    kept = 0
    # a loop over chunks of parts: factorise one chunk of A_II, extend into it, drop it
    for c in range(bounds.size - 1):
        r0, r1 = int(bounds[c]), int(bounds[c + 1])
        K = A_II[r0:r1, r0:r1]
        kept += K.nnz
        p0, p1 = np.searchsorted(part_offsets, [r0, r1])
        try:
            near = None if null_space is None else null_space[interior[r0:r1]]
            lu = factorize_blocks(K, part_offsets[p0:p1 + 1] - r0, solver,
                                  exact_check=False, near_null=near)
        except SingularBlockError as exc:
            # SuperLU and PARDISO report a non-positive (or vanishing) Cholesky pivot: an
            # indefinite block as much as a singular one
            raise ValueError("A is not positive definite: the interior matrix A_II of part "
                             f"{int(np.flatnonzero(rank == p0 + exc.block)[0])} has a "
                             "non-positive or vanishing pivot (it is indefinite or singular); "
                             "A must be symmetric positive definite") from exc
        e0, e1 = int(entry_bounds[c]), int(entry_bounds[c + 1])
        e_row, e_slot, e_val = B.row[e0:e1] - r0, entry_slot[e0:e1], B.data[e0:e1]
        c_width = int(e_slot.max()) + 1 if e1 > e0 else 0
        step = max(1, int(chunk_bytes) // (8 * (r1 - r0)))
        rows, cols, vals = [], [], []
        for start in range(0, c_width, step):  # column blocks of the chunk's slots
            stop = min(start + step, c_width)
            sel = (e_slot >= start) & (e_slot < stop)
            rhs = np.zeros((r1 - r0, stop - start), order="F")
            rhs[e_row[sel], e_slot[sel] - start] = e_val[sel]
            X = lu.solve(rhs) if lu.exact else _pcg_columns(
                K, lu, rhs, rtol, part_offsets[p0:p1] - r0)
            del rhs
            r, s = np.nonzero(X)
            col = index[rank[part[r + r0]], s + start]
            ok = col >= 0  # slots beyond a part's own pairs carry no function
            rows.append(r[ok].astype(np.int32))
            cols.append(col[ok].astype(np.int32))
            vals.append(X[r[ok], s[ok]])
            del X, r, s, col, ok
        del lu
        if rows:
            pieces.append((r0, sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows),
                                                                      np.concatenate(cols))),
                                             shape=(r1 - r0, n0))))
        del rows, cols, vals
    if kept != A_II.nnz:
        raise ValueError("A couples the interiors of different parts (A_II is not block "
                         "diagonal over the parts); the interface must separate the parts")
    return _stack_rows(PhiG, [(interior[r0:r0 + P.shape[0]], P) for r0, P in pieces])


def _stack_rows(first: sp.csr_matrix, pieces: list) -> sp.csr_matrix:
    """``first`` plus every ``(global_rows, P)``: ``P``'s row ``i`` added to row
    ``global_rows[i]``, written once into the final CSR arrays (no triplets of the whole
    result: the extension of 3D elasticity has 23 M nonzeros, and triplets plus their
    conversion took 60 bytes per nonzero at the peak, this 24).  A piece is dropped once
    it is copied."""
    n, n0 = first.shape
    first = sp.csr_matrix(first)
    counts = np.diff(first.indptr).astype(np.int64)
    for rows, P in pieces:
        counts[rows] += np.diff(P.indptr)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    index_dtype = np.int32 if max(int(indptr[-1]), n0) < 2**31 else np.int64
    data = np.empty(int(indptr[-1]), dtype=np.float64)
    indices = np.empty(int(indptr[-1]), dtype=index_dtype)
    used = indptr[:-1].copy()  # next free position of every row

    def place(rows: np.ndarray, P: sp.csr_matrix) -> None:
        lengths = np.diff(P.indptr)
        dest = np.repeat(used[rows] - P.indptr[:-1], lengths) + np.arange(P.nnz)
        data[dest] = P.data
        indices[dest] = P.indices
        used[rows] += lengths

    place(np.arange(n), first)
    while pieces:
        place(*pieces.pop(0))
    Phi = sp.csr_matrix((data, indices, indptr.astype(index_dtype, copy=False)),
                        shape=(n, n0))
    Phi.eliminate_zeros()
    Phi.sort_indices()
    return Phi


def _pcg_columns(K: sp.csr_matrix, M: Any, B: np.ndarray, rtol: float, starts: np.ndarray,
                 maxiter: int | None = None) -> np.ndarray:
    """Conjugate gradients on every column of ``K X = B`` at once, preconditioned by ``M``.

    ``K`` is block diagonal with blocks starting at rows ``starts`` (the parts), and a
    column packs the right-hand sides of different coarse functions on different parts.
    Every column has its own step lengths and runs until, on every part, its residual is
    at most ``rtol`` times its right-hand side there (so every coarse function meets the
    bound on every part it extends into); the columns still running are updated together
    (one product with ``K`` and one application of ``M`` per iteration).  Raises
    ValueError when a column has not converged after ``maxiter``
    (:data:`EXTENSION_MAXITER`) iterations.
    """
    maxiter = EXTENSION_MAXITER if maxiter is None else maxiter
    starts = np.unique(np.asarray(starts, dtype=np.int64))
    starts = starts[starts < B.shape[0]]  # reduceat needs valid, distinct starts

    def part_norms(R: np.ndarray) -> np.ndarray:  # (parts, columns)
        return np.sqrt(np.add.reduceat(R * R, starts, axis=0))

    X = np.zeros(B.shape)
    R = np.array(B, dtype=np.float64)
    goal = rtol * part_norms(R)
    active = np.flatnonzero((part_norms(R) > goal).any(axis=0))
    if active.size == 0:
        return X
    Zc = M.solve(R[:, active])
    P = Zc.copy()
    rz = np.einsum("ij,ij->j", R[:, active], Zc)
    for _ in range(maxiter):
        KP = K @ P
        alpha = rz / np.einsum("ij,ij->j", P, KP)
        X[:, active] += P * alpha
        R[:, active] -= KP * alpha
        still = (part_norms(R[:, active]) > goal[:, active]).any(axis=0)
        if not still.any():
            return X
        active, P, rz = active[still], P[:, still], rz[still]
        Zc = M.solve(R[:, active])
        rz_new = np.einsum("ij,ij->j", R[:, active], Zc)
        P = Zc + P * (rz_new / rz)
        rz = rz_new
    raise ValueError(f"the inexact harmonic extension did not reach rtol={rtol} in {maxiter} "
                     "preconditioned CG iterations; A_II may not be positive definite")


# -- GDSW / RGDSW ----------------------------------------------------------------------------------
@dataclass
class GDSWInfo:
    """What :func:`gdsw_basis` built.

    Attributes
    ----------
    variant : str
        ``"gdsw"`` or ``"rgdsw"``.
    components : InterfaceComponents
        The interface and its components.
    column_component : numpy.ndarray
        The component every coarse function is attached to (for RGDSW: its
        root component).
    column_vector : numpy.ndarray
        The null-space vector (column of ``Z``) of every coarse function.
    dropped : int
        Number of (component or root, vector) pairs without a function: the
        vector is zero there or dependent on the earlier ones there.
    seconds : float
        Wall time of the construction.
    harmonic_interface : numpy.ndarray or None
        The interface unknowns when every column is exactly discrete harmonic off them
        (an exact extension: ``A Phi`` vanishes on the other rows up to rounding, so
        ``Phi^T A Phi = Phi_G^T (A Phi)_G``); None after the inexact extension.
    """

    variant: str
    components: InterfaceComponents
    column_component: np.ndarray
    column_vector: np.ndarray
    dropped: int
    seconds: float
    harmonic_interface: np.ndarray | None = None


def gdsw_basis(
    A: Any,
    owner: Any,
    *,
    null_space: Any = None,
    interface: Any = None,
    variant: str = "gdsw",
    block_size: int = 1,
    dependence_rtol: float = DEPENDENCE_RTOL,
    return_info: bool = False,
    chunk_bytes: int = EXTENSION_CHUNK_BYTES,
    solver: str = "auto",
    extension_rtol: float = EXTENSION_RTOL,
):
    """GDSW or RGDSW coarse basis Phi from a matrix and a non-overlapping partition.

    Parameters
    ----------
    A : sparse matrix or array
        Symmetric positive definite ``n x n`` matrix.
    owner : array of int, shape (n,)
        Non-overlapping part label of every unknown.
    null_space : array, shape (n, k) or (n,), optional
        Near null space ``Z`` to reproduce (default: constants).  For
        elasticity the rigid body modes.
    interface : None, Boolean mask, index array or incidence matrix, optional
        The interface rule, see :func:`interface_components`.
    variant : {"gdsw", "rgdsw"}
        One function per component and vector, or per root component and
        vector with the option-1 interface partition of unity.
    block_size : int
        Unknowns per node classified together (interleaved vector problems).
    dependence_rtol : float
        Relative tolerance of the dependent-vector removal (see
        :data:`DEPENDENCE_RTOL`): where the vectors of ``Z`` are linearly
        dependent on a component (GDSW) or on a root's interface support
        (RGDSW), the later ones are dropped there; the kept ones still span
        ``Z`` on it.
    return_info : bool
        Also return a :class:`GDSWInfo`.
    chunk_bytes : int
        Memory bound of one block of right-hand sides in the extension.
    solver : {"auto", "superlu", "pardiso", "amg"}
        Solver of the interior problems of the extension (see :func:`harmonic_extension`).
    extension_rtol : float
        Relative residual of the inexact (``"amg"``) extension.

    Returns
    -------
    Phi : scipy.sparse.csr_matrix
        ``n x n0``; columns ordered by component (or root), then vector.
    info : GDSWInfo
        Only with ``return_info=True``.

    Raises
    ------
    ValueError
        Bad arguments, a single part (no interface), or an ``A`` that is not positive
        definite (a non-positive diagonal entry, or a non-positive pivot of ``A_II``).

    Notes
    -----
    On the interface, the GDSW columns of one vector sum to that vector
    wherever it was not dropped, and the RGDSW columns sum to it wherever no
    root dropped it; ``(A Phi)`` vanishes on the interior rows.
    """
    start = time.perf_counter()
    check_choice("variant", variant, GDSW_VARIANTS)
    rtol = check_positive_float("dependence_rtol", dependence_rtol)
    if not isinstance(return_info, (bool, np.bool_)):
        raise TypeError(f"return_info must be a bool, got {type(return_info).__name__}")
    chunk_bytes = check_int("chunk_bytes", chunk_bytes, minimum=1)
    A = _check_matrix(A)
    n = A.shape[0]
    owner = _check_owner(owner, n)
    Z = _check_null_space(null_space, n)
    comps = _components(A, owner, interface, block_size)
    if comps.interface.size == 0:
        raise ValueError("owner: the partition has a single part (or parts A does not couple), "
                         "so there is no interface and no GDSW coarse function")
    x = comps.interface
    C, k = comps.num_components, Z.shape[1]
    # every (component, vector) piece Z[:, a] on component c, extended harmonically: the GDSW
    # functions, and the building blocks of RGDSW (the extension is linear, so a root's
    # function is the weighted sum of the extended pieces of its offspring)
    values = Z[x]
    nonzero = np.zeros((C, k), dtype=bool)
    nonzero[comps.component[np.nonzero(values)[0]], np.nonzero(values)[1]] = True
    pieces_G, piece_of = _columns_from_groups(x, comps.component, values, nonzero, n)
    if variant == "gdsw":
        keep = _independent_vectors(comps.component, values, C, rtol)
        group_component = np.arange(C)
        Phi_G = pieces_G[:, piece_of[keep]].tocsr()
    else:
        W = comps.root_weights().tocoo()  # C x R option-1 weights
        group_component = comps.roots()
        # the interface values of each (root, vector): weight * Z on the root and its offspring
        E = sp.csr_matrix((np.ones(x.size), (np.arange(x.size), comps.component)),
                          shape=(x.size, C))
        XW = (E @ W.tocsr()).tocoo()
        keep = _independent_vectors(XW.col, XW.data[:, None] * Z[x[XW.row]],
                                    group_component.size, rtol)
        column = np.full(keep.shape, -1, dtype=np.int64)
        column[keep] = np.arange(int(keep.sum()))
        # combine: piece (c, a) enters column (r, a) with weight W[c, r]
        c_idx = np.repeat(W.row, k)
        r_idx = np.repeat(W.col, k)
        a_idx = np.tile(np.arange(k), W.nnz)
        w_val = np.repeat(W.data, k)
        ok = (piece_of[c_idx, a_idx] >= 0) & (column[r_idx, a_idx] >= 0)
        combine = sp.csr_matrix((w_val[ok], (piece_of[c_idx[ok], a_idx[ok]],
                                             column[r_idx[ok], a_idx[ok]])),
                                shape=(pieces_G.shape[1], int(keep.sum())))
        Phi_G = (pieces_G @ combine).tocsr()
    # the extension is linear: extending the kept (GDSW) or combined (RGDSW) interface
    # values solves with as few columns as there are functions next to a part
    Phi = harmonic_extension(A, owner, x, Phi_G, chunk_bytes=chunk_bytes, solver=solver,
                             rtol=extension_rtol, null_space=Z)
    Phi.eliminate_zeros()
    Phi.sort_indices()
    col_group, col_vector = np.nonzero(keep)
    dropped = int(keep.size - keep.sum())
    if variant == "rgdsw" and k > 1:
        # weighted pieces of several vectors on overlapping root supports can depend on the
        # functions of other roots (3D elasticity on METIS parts): drop those globally
        Phi, kept = drop_dependent_columns(A, Phi)
        dropped += col_group.size - kept.size
        col_group, col_vector = col_group[kept], col_vector[kept]
    if not return_info:
        return Phi
    info = GDSWInfo(variant=variant, components=comps,
                    column_component=group_component[col_group], column_vector=col_vector,
                    dropped=dropped, seconds=time.perf_counter() - start,
                    harmonic_interface=None if solver == "amg" else x)
    return Phi, info


# -- Nicolaides ------------------------------------------------------------------------------------
def nicolaides_basis(
    decomposition: Any,
    null_space: Any = None,
    *,
    dependence_rtol: float = DEPENDENCE_RTOL,
) -> sp.csr_matrix:
    """Partition-of-unity (Nicolaides) coarse basis ``R_i^T D_i R_i Z`` for a null space.

    One column per subdomain ``i`` and null-space vector ``a``:
    ``R_i^T D_i R_i Z[:, a]``, so the columns of one vector sum to it
    (``sum_i R_i^T D_i R_i = I``).  With constants this is
    ``coarse_basis(d, "pou")``.  Vectors dependent on a subdomain (after the
    weighting) are dropped there, as in :func:`gdsw_basis`.

    Parameters
    ----------
    decomposition : Decomposition
        The overlapping decomposition (``R_i``, ``D_i``).
    null_space : array, shape (num_dofs, k) or (num_dofs,), optional
        Default: constants.
    dependence_rtol : float
        See :data:`DEPENDENCE_RTOL`.

    Returns
    -------
    scipy.sparse.csr_matrix
        ``num_dofs x n0`` (``n0 = N k`` when nothing is dependent), ordered
        by subdomain, then vector.
    """
    d = decomposition
    for name in ("indices", "sizes", "num_subdomains", "num_dofs", "entry_weights"):
        if not hasattr(d, name):
            raise TypeError("decomposition must be a ddops Decomposition, got "
                            f"{type(d).__name__}")
    rtol = check_positive_float("dependence_rtol", dependence_rtol)
    Z = _check_null_space(null_space, d.num_dofs)
    group = np.repeat(np.arange(d.num_subdomains), d.sizes)
    values = d.entry_weights("full")[:, None] * Z[d.indices]
    keep = _independent_vectors(group, values, d.num_subdomains, rtol)
    Phi, _ = _columns_from_groups(d.indices, group, values, keep, d.num_dofs)
    return Phi


# -- the checked coarse matrix ---------------------------------------------------------------------
def coarse_matrix_checked(A: Any, Phi: Any, *, rtol: float = SINGULAR_PIVOT_RTOL) -> sp.csr_matrix:
    """The Galerkin matrix ``A_0 = Phi^T A Phi`` (sparse), refusing a rank-deficient Phi.

    ``A_0`` is scaled to unit diagonal and factorised by SuperLU with a
    symmetric ordering and diagonal pivots (shifted by ``rtol / 100`` so an
    exactly dependent column gives a tiny pivot instead of a failure).  The
    pivot of column ``j`` is the squared sine of the A-angle between
    ``phi_j`` and the columns eliminated before it; a pivot at most ``rtol``
    marks ``phi_j`` as a combination of them.

    Parameters
    ----------
    A : sparse matrix or array
        SPD ``n x n``.
    Phi : sparse matrix or array
        ``n x n0`` coarse basis.
    rtol : float
        See :data:`SINGULAR_PIVOT_RTOL`.

    Returns
    -------
    scipy.sparse.csr_matrix
        ``A_0`` (``n0 x n0``, exactly symmetric).

    Raises
    ------
    ValueError
        Zero columns, or columns that are (numerically) linear combinations of
        others; the message lists them.
    """
    rtol = check_positive_float("rtol", rtol)
    A = _check_matrix(A)
    Phi = _as_csr("Phi", Phi)
    if Phi.shape[0] != A.shape[0] or Phi.shape[1] < 1:
        raise ValueError(f"Phi must have shape ({A.shape[0]}, n0 >= 1), got {Phi.shape}")
    check_finite("Phi", Phi.data)
    A0 = (Phi.T @ A @ Phi).tocsr()
    A0 = ((A0 + A0.T) * 0.5).tocsr()
    A0.sort_indices()
    diag = A0.diagonal()
    zero = np.flatnonzero(~(diag > 0))
    if zero.size:
        raise ValueError(f"Phi: column(s) {_listing(zero)} have zero energy phi^T A phi (zero "
                         "columns, or A is not positive definite)")
    s = sp.diags(1.0 / np.sqrt(diag))
    K = (s @ A0 @ s + sp.identity(A0.shape[0]) * (rtol * 1e-2)).tocsc()
    try:
        lu = _spd_factor(K)
    except RuntimeError:  # pragma: no cover - the shift keeps K positive definite
        raise ValueError("Phi: the coarse matrix Phi^T A Phi is singular") from None
    if not np.array_equal(lu.perm_r, lu.perm_c):
        raise ValueError("Phi: the coarse matrix Phi^T A Phi is not positive definite")
    pivots = lu.U.diagonal()[lu.perm_c]  # the pivot of original column j sits at perm_c[j]
    bad = np.flatnonzero(~(pivots > rtol))
    if bad.size:
        raise ValueError(f"Phi has linearly dependent columns: column(s) {_listing(bad)} are "
                         f"(up to a squared A-angle of {rtol:g}) combinations of the other "
                         "columns; remove them")
    return A0


def _scaled_coarse(A: sp.csr_matrix, Phi: sp.csr_matrix) -> tuple[sp.csr_matrix, np.ndarray]:
    """``Phi^T A Phi`` scaled to unit diagonal (zero-energy columns: a unit diagonal), and
    the mask of the columns of positive energy."""
    A0 = (Phi.T @ A @ Phi).tocsr()
    A0 = ((A0 + A0.T) * 0.5).tocsr()
    diag = A0.diagonal()
    pos = diag > 0
    s = sp.diags(np.where(pos, 1.0 / np.sqrt(np.where(pos, diag, 1.0)), 0.0))
    return (s @ A0 @ s + sp.diags((~pos).astype(np.float64))).tocsr(), pos


def drop_dependent_columns(A: Any, Phi: Any, *, rtol: float = DROP_PIVOT_RTOL,
                           first: Any = None) -> tuple[sp.csr_matrix, np.ndarray]:
    """Phi without its (numerically) linearly dependent columns, and the kept column indices.

    The Galerkin matrix ``Phi^T A Phi`` is scaled to unit diagonal and factorised by a
    Cholesky factorisation with complete (diagonal) pivoting, LAPACK ``dpstrf``: every
    step eliminates the column with the largest remaining pivot, the squared sine of its
    A-angle to the columns already chosen, and the factorisation stops when that is at
    most ``rtol``; the columns not chosen are dropped (zero-energy columns too).  The
    span is unchanged up to that tolerance.  Unlike the pivots of a factorisation in a
    fixed order, which can all stay well above the smallest eigenvalue (a dependence
    spread over many columns), complete pivoting reveals the rank.  Coarse matrices of
    more than :data:`DENSE_DROP_MAX` columns use the sparse factorisation of
    :func:`coarse_matrix_checked` in its own order instead.  The builders of the coarse
    spaces call it where functions of different components or subdomains can depend on
    each other (RGDSW with several null-space vectors, the adaptive spaces).

    Parameters
    ----------
    A : sparse matrix
        SPD ``n x n``.
    Phi : sparse matrix
        ``n x n0``.
    rtol : float
        See :data:`DROP_PIVOT_RTOL`.
    first : array of bool, optional
        Columns to choose before all others (the null-space columns of the adaptive
        spaces, so that they stay whenever they are independent among themselves): the
        others are then chosen on the Schur complement of these.

    Returns
    -------
    Phi : scipy.sparse.csr_matrix
        The kept columns, in their order.
    kept : numpy.ndarray
        Their indices in the given Phi (increasing).
    """
    from scipy.linalg import lapack

    rtol = check_positive_float("rtol", rtol)
    A = _check_matrix(A)
    Phi = _as_csr("Phi", Phi)
    if Phi.shape[0] != A.shape[0]:
        raise ValueError(f"Phi must have {A.shape[0]} rows, got shape {Phi.shape}")
    n0 = Phi.shape[1]
    if n0 == 0:
        return Phi, np.zeros(0, dtype=np.int64)
    K, pos = _scaled_coarse(A, Phi)
    if n0 <= DENSE_DROP_MAX:
        Kd = K.toarray()
        order = np.arange(n0)
        if first is not None:
            first = np.asarray(first, dtype=bool)
            if first.shape != (n0,):
                raise ValueError(f"first must be a Boolean mask of shape ({n0},), got "
                                 f"{first.shape}")
            order = np.concatenate([np.flatnonzero(first), np.flatnonzero(~first)])
        m = int(first.sum()) if first is not None else n0
        K1 = Kd[np.ix_(order[:m], order[:m])]
        _, piv, rank, _ = lapack.dpstrf(K1, lower=1, tol=rtol)
        kept = order[:m][piv[:rank] - 1]
        if m < n0:
            rest = order[m:]
            C = Kd[np.ix_(kept, rest)]
            L = np.linalg.cholesky(Kd[np.ix_(kept, kept)]) if kept.size else None
            W = sla.solve_triangular(L, C, lower=True) if kept.size else C[:0]
            S = Kd[np.ix_(rest, rest)] - W.T @ W
            _, piv, rank, _ = lapack.dpstrf(0.5 * (S + S.T), lower=1, tol=rtol)
            kept = np.concatenate([kept, rest[piv[:rank] - 1]])
        kept = np.sort(kept)
        kept = kept[pos[kept]]
    else:
        lu = _spd_factor((K + sp.identity(n0) * (rtol * 1e-2)).tocsc())
        pivots = lu.U.diagonal()[lu.perm_c]
        kept = np.flatnonzero((pivots > rtol) & pos)
    if kept.size < n0:
        Phi = Phi[:, kept].tocsr()
    Phi.sort_indices()
    return Phi, kept.astype(np.int64)


def _listing(idx: np.ndarray, limit: int = 20) -> str:
    shown = ", ".join(str(int(i)) for i in idx[:limit])
    return f"[{shown}{', ...' if idx.size > limit else ''}] ({idx.size} in all)"
