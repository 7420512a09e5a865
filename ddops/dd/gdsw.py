"""Algebraic GDSW and RGDSW coarse spaces built from an assembled sparse matrix.

Everything here works from a symmetric positive definite matrix ``A`` (CSR), a
non-overlapping partition ``owner`` (one part label per unknown) and a
null space ``Z`` (``n x k``, constants by default); no coordinates or mesh.
The interface and its components come from :mod:`ddops.dd.interface` (one of three
rules, see there), the discrete harmonic extension from :mod:`ddops.dd.extension`.

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
:data:`~ddops.dd.groups.DEPENDENCE_RTOL`); the kept ones span the same space there.

Both variants extend the same pieces, ``Z[:, a]`` on one component: they are the GDSW
functions, and, the extension being linear, an RGDSW function is the weighted sum of the
extended pieces of its root and offspring (one sparse product).

This module also re-exports, under their old names, what used to be defined here: the
interface classification, the harmonic extension, the Nicolaides space
(:mod:`ddops.dd.nicolaides`), the coarse-matrix checks (:mod:`ddops.dd.coarse_matrix`) and
:func:`~ddops.dd.validation.symmetry_defect`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from .._validation import check_choice, check_int, check_positive_float
from ..linalg import spd
from ..linalg.local_solvers import chunk_bounds
from . import coarse_matrix, extension, groups
from .analysis import GDSWAnalysis, classify
from .coarse_matrix import coarse_matrix_checked, drop_dependent_columns
from .extension import harmonic_extension
from .groups import columns_from_groups, independent_vectors
from .interface import InterfaceComponents, interface_components
from .nicolaides import nicolaides_basis
from .validation import check_matrix, check_null_space, check_owner, symmetry_defect

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

# The constants below are defined (and read) in the modules named; the values here are
# copies for reading, so changing them here changes nothing.

#: :data:`ddops.dd.groups.DEPENDENCE_RTOL`: the default relative tolerance of the
#: dependent-vector removal.
DEPENDENCE_RTOL = groups.DEPENDENCE_RTOL

#: :data:`ddops.dd.coarse_matrix.SINGULAR_PIVOT_RTOL`.
SINGULAR_PIVOT_RTOL = coarse_matrix.SINGULAR_PIVOT_RTOL

#: :data:`ddops.dd.coarse_matrix.DROP_PIVOT_RTOL`.
DROP_PIVOT_RTOL = coarse_matrix.DROP_PIVOT_RTOL

#: :data:`ddops.dd.coarse_matrix.DENSE_DROP_MAX`.
DENSE_DROP_MAX = coarse_matrix.DENSE_DROP_MAX

#: :data:`ddops.dd.extension.EXTENSION_CHUNK_BYTES`.
EXTENSION_CHUNK_BYTES = extension.EXTENSION_CHUNK_BYTES

#: :data:`ddops.dd.extension.EXTENSION_RTOL`.
EXTENSION_RTOL = extension.EXTENSION_RTOL

#: :data:`ddops.dd.extension.EXTENSION_MAXITER`.
EXTENSION_MAXITER = extension.EXTENSION_MAXITER

#: :data:`ddops.dd.extension.FACTOR_CHUNK_ROWS`.
FACTOR_CHUNK_ROWS = extension.FACTOR_CHUNK_ROWS

#: :data:`ddops.linalg.spd.SUPERLU_PANEL_SIZE`.
SUPERLU_PANEL_SIZE = spd.SUPERLU_PANEL_SIZE


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
    stats : dict
        Seconds by phase: ``interface_seconds`` (the interface and its components),
        ``extension_seconds`` (the harmonic extension) and ``seconds`` (all).
    coarse_matrix : scipy.sparse.csr_matrix or None
        ``Phi^T A Phi`` of the returned basis where the dependence check formed it (RGDSW
        with several null-space vectors, :func:`drop_dependent_columns`); the coarse
        correction takes it (and releases it here) instead of forming it again.  None
        otherwise.
    """

    variant: str
    components: InterfaceComponents
    column_component: np.ndarray
    column_vector: np.ndarray
    dropped: int
    seconds: float
    harmonic_interface: np.ndarray | None = None
    stats: dict = field(default_factory=dict)
    coarse_matrix: Any = None


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
    analysis: GDSWAnalysis | None = None,
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
        :data:`~ddops.dd.groups.DEPENDENCE_RTOL`): where the vectors of ``Z`` are linearly
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
    analysis : GDSWAnalysis, optional
        Keeps the interface components and the extension's PARDISO analyses (or
        orderings) for a later call on a matrix with the same pattern, and reuses those it
        holds (see
        :class:`~ddops.dd.analysis.GDSWAnalysis`).

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
    A = check_matrix(A)
    n = A.shape[0]
    owner = check_owner(owner, n)
    Z = check_null_space(null_space, n)
    comps = classify(A, owner, interface, block_size, analysis)
    interface_seconds = time.perf_counter() - start
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
    pieces_G, piece_of = columns_from_groups(x, comps.component, values, nonzero, n)
    if variant == "gdsw":
        keep = independent_vectors(comps.component, values, C, rtol)
        group_component = np.arange(C)
        Phi_G = pieces_G[:, piece_of[keep]].tocsr()
    else:
        W = comps.root_weights().tocoo()  # C x R option-1 weights
        group_component = comps.roots()
        # the interface values of each (root, vector): weight * Z on the root and its offspring
        E = sp.csr_matrix((np.ones(x.size), (np.arange(x.size), comps.component)),
                          shape=(x.size, C))
        XW = (E @ W.tocsr()).tocoo()
        keep = independent_vectors(XW.col, XW.data[:, None] * Z[x[XW.row]],
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
    extension_start = time.perf_counter()
    Phi = harmonic_extension(A, owner, x, Phi_G, chunk_bytes=chunk_bytes, solver=solver,
                             rtol=extension_rtol, null_space=Z, analysis=analysis,
                             block_size=block_size)
    extension_seconds = time.perf_counter() - extension_start
    harmonic = None if solver == "amg" else x  # A Phi vanishes off x (an exact extension)
    Phi.eliminate_zeros()
    Phi.sort_indices()
    col_group, col_vector = np.nonzero(keep)
    dropped = int(keep.size - keep.sum())
    A0 = None
    if variant == "rgdsw" and k > 1:
        # weighted pieces of several vectors on overlapping root supports can depend on the
        # functions of other roots (3D elasticity on METIS parts): drop those globally; the
        # check forms Phi^T A Phi, which the coarse correction takes instead of forming it
        Phi, kept, *rest = drop_dependent_columns(A, Phi, rows=harmonic,
                                                  return_matrix=return_info)
        A0 = rest[0] if rest else None
        dropped += col_group.size - kept.size
        col_group, col_vector = col_group[kept], col_vector[kept]
    if not return_info:
        return Phi
    info = GDSWInfo(variant=variant, components=comps,
                    column_component=group_component[col_group], column_vector=col_vector,
                    dropped=dropped, seconds=time.perf_counter() - start,
                    harmonic_interface=harmonic, coarse_matrix=A0,
                    stats={"interface_seconds": interface_seconds,
                           "extension_seconds": extension_seconds})
    info.stats["seconds"] = info.seconds
    return Phi, info
