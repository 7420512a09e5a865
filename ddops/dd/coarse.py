"""Coarse spaces: the interpolation matrix Phi (``num_dofs x n0``, CSR)."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from .._validation import check_choice, check_finite, check_int, check_memory, warn
from .decomposition import Decomposition
from .validation import checked_once

__all__ = ["ADAPTIVE_OPTIONS", "ALL_COARSE_BASES", "COARSE_BASES", "MATRIX_COARSE_BASES",
           "auto_coarse_basis", "coarse_basis", "column_rank",
           "hat_functions", "subdomain_blocks"]

#: Coarse bases built from the decomposition alone (also by :class:`~ddops.SchwarzOperator`).
COARSE_BASES = ("interface_hats", "pou", "nicolaides", "grid_hats")

#: Coarse bases that also need the matrix ``A`` (discrete harmonic extensions, and the
#: adaptive spectral spaces of :mod:`ddops.dd.adaptive`).
MATRIX_COARSE_BASES = ("gdsw", "rgdsw", "agdsw", "geneo")

#: Options of the matrix coarse bases (keyword arguments of :func:`coarse_basis`).
ADAPTIVE_OPTIONS = {
    "agdsw": ("threshold", "max_per_component", "neumann", "extension_solver", "skip_contrast"),
    "geneo": ("threshold", "max_per_subdomain", "neumann", "oversampling", "skip_contrast",
              "eigen_stop"),
    "gdsw": ("extension_solver",), "rgdsw": ("extension_solver",)}

#: Every name accepted by :func:`coarse_basis` (and ``"auto"``, see :func:`auto_coarse_basis`).
ALL_COARSE_BASES = COARSE_BASES + MATRIX_COARSE_BASES

# The bases that fall back to constants without a null space (GenEO takes a given one but
# needs none): the null-space warnings of check_null_space_layout are theirs.
_CONSTANTS_BASES = ("pou", "nicolaides", "gdsw", "rgdsw", "agdsw")


def hats_apply(decomposition: Decomposition) -> bool:
    """Whether the 1D hat bases apply: real 1D coordinates and interface nodes."""
    d = decomposition
    x = d.coordinates
    one_d = x.ndim == 1 or (x.ndim == 2 and x.shape[1] == 1)
    return bool(d.has_coordinates and one_d and d.interface_nodes.size)


def resolve_coarse_kind(kind: Any, decomposition: Decomposition, matrix: bool,
                        name: str = "coarse_basis") -> Any:
    """A coarse-space name checked, with ``"auto"`` replaced by :func:`auto_coarse_basis`.

    Anything but a string (None, a matrix) is returned as it is: the one place where every
    entry point (:func:`coarse_basis`, :class:`~ddops.TwoLevelSchwarz`,
    :class:`~ddops.SchwarzOperator`, the distributed preconditioner) resolves the default.
    """
    if not isinstance(kind, str):
        return kind
    check_choice(name, kind, ("auto", *ALL_COARSE_BASES))
    return auto_coarse_basis(decomposition, matrix) if kind == "auto" else kind


def auto_coarse_basis(decomposition: Decomposition, matrix: bool) -> str:
    """The coarse basis that ``coarse_basis="auto"`` stands for on a decomposition.

    ``"interface_hats"`` (the paper's basis) where the hats apply (a 1D decomposition
    with interface nodes and real coordinates, e.g. :class:`~ddops.Decomposition1D`);
    else ``"gdsw"`` when the matrix is known (``matrix=True``) and the decomposition
    has its non-overlapping partition ``owner`` (``from_matrix``, ``from_grid``); else
    ``"nicolaides"``, which needs the decomposition only.
    """
    if hats_apply(decomposition):
        return "interface_hats"
    if matrix and decomposition.owner is not None:
        return "gdsw"
    return "nicolaides"


def hat_functions(x: np.ndarray, peaks: np.ndarray, left: float = 0.0, right: float = 1.0):
    """Piecewise-linear hat functions sampled at the points ``x``.

    Hat ``k`` is 1 at ``peaks[k]`` and falls linearly to 0 at the neighbouring
    peaks, or at ``left``/``right`` (the Dirichlet boundary) for the first and
    last hat.  Every point lies in one interval between consecutive nodes and
    so touches at most two hats; the matrix is assembled in one vectorised step.

    Parameters
    ----------
    x : array of float
        Sorted sample points (the unknowns' coordinates).
    peaks : array of float
        Strictly increasing peak positions inside ``(left, right)``.
    left, right : float
        Positions where the first and the last hat vanish.

    Returns
    -------
    scipy.sparse.csr_matrix
        ``len(x) x len(peaks)`` interpolation matrix.
    """
    x = np.asarray(x, dtype=np.float64)
    peaks = np.asarray(peaks, dtype=np.float64)
    nodes = np.concatenate([[left], peaks, [right]])
    if np.any(np.diff(nodes) <= 0):
        raise ValueError("peaks must be strictly increasing and inside (left, right)")
    # interval j = [nodes[j], nodes[j+1]); hats j-1 (falling) and j (rising) live on it
    j = np.clip(np.searchsorted(nodes, x, side="right") - 1, 0, len(nodes) - 2)
    t = (x - nodes[j]) / (nodes[j + 1] - nodes[j])
    rows = np.concatenate([np.arange(x.size), np.arange(x.size)])
    cols = np.concatenate([j - 1, j])
    vals = np.concatenate([1.0 - t, t])
    keep = (cols >= 0) & (cols < peaks.size) & (vals != 0.0)
    Phi = sp.csr_matrix((vals[keep], (rows[keep], cols[keep])), shape=(x.size, peaks.size))
    Phi.sort_indices()
    return Phi


def coarse_basis(
    decomposition: Decomposition,
    kind: str = "auto",
    size: int | None = None,
    *,
    A: Any = None,
    null_space: Any = None,
    kernel: Any = None,
    threshold: float | None = None,
    max_per_component: int | None = None,
    max_per_subdomain: int | None = None,
    neumann: Any = None,
    oversampling: int | None = None,
    extension_solver: str | None = None,
    skip_contrast: float | None = None,
    eigen_stop: str | None = None,
    analysis: Any = None,
    return_info: bool = False,
):
    """Coarse interpolation matrix Phi for a decomposition.

    Parameters
    ----------
    decomposition : Decomposition
        The overlapping decomposition.
    kind : {"auto", "interface_hats", "pou", "nicolaides", "grid_hats", "gdsw", "rgdsw", \
"agdsw", "geneo"}
        ``"auto"`` (default): :func:`auto_coarse_basis`, the paper's interface hats on
        1D decompositions, GDSW when ``A`` is given and the decomposition has an
        ``owner``, else Nicolaides.
        ``"interface_hats"``: one hat per interface, 1 at the interface node
        and linear down to 0 at the neighbouring interface nodes or the
        Dirichlet boundary (``n0 = N - 1``; 1D coordinates, shape ``(n,)`` or
        ``(n, 1)``).
        ``"nicolaides"`` (alias ``"pou"``): the partition-of-unity restriction
        ``R_i^T D_i R_i z`` of each null-space vector ``z`` to each subdomain
        (constants by default: ``n0 = N``).  ``"grid_hats"``: ``size`` hats on a
        uniform coarse grid of (0, 1), independent of the decomposition (1D
        coordinates).  ``"gdsw"``: one function per interface component
        (vertex, edge, face of the non-overlapping partition
        ``decomposition.owner``) and null-space vector, equal to the vector on
        the component, zero on the rest of the interface and discrete-harmonic
        (``-A_II^{-1} A_IG``) inside the parts.  ``"rgdsw"``: the reduced
        variant, functions on the vertex-like components only with the
        option-1 interface partition of unity.  See :mod:`ddops.dd.gdsw`.
        ``"agdsw"``: adaptive GDSW, the GDSW space plus the harmonic extensions
        of the eigenvectors of an interface eigenproblem per component whose
        eigenvalues fall below ``threshold``.  ``"geneo"``: GenEO, the
        eigenvectors of a generalized eigenproblem per overlapping subdomain.
        Both keep the iteration count flat under high-contrast coefficients;
        see :mod:`ddops.dd.adaptive`.
    size : int, optional
        Number of hats for ``"grid_hats"`` (default ``N - 1``); not allowed for
        the other kinds.
    A : sparse matrix, optional
        The SPD matrix; required by the matrix bases (``"gdsw"``, ``"rgdsw"``,
        ``"agdsw"``, ``"geneo"``), accepted and not used by the others.
    null_space : array (num_dofs x k), optional
        Null space of the unassembled operator (constants by default; rigid
        body modes for elasticity, :func:`ddops.problems.rigid_body_modes`);
        used by ``"nicolaides"``, ``"pou"`` and the matrix bases, accepted and
        not used by the hat bases.  Problem data (``A``, ``null_space``,
        ``kernel``) is accepted by every kind, so a loop over kinds needs no
        special cases; the options of one method (``size``, ``threshold``,
        ``max_per_component``, ``max_per_subdomain``, ``neumann``,
        ``extension_solver``) are refused by the kinds that do not have them.
        A decomposition with ``block_size > 1`` and no null space warns (the
        constants per component leave out the rotations of elasticity), and so
        does a null space that has lower rank on most parts than in all (a
        field-major null space for an interleaved ``block_size`` ordering).
    kernel : array (num_dofs x k), optional
        The kernel of a singular positive semidefinite ``A`` (constants for a
        pure-Neumann problem, rigid body modes of a floating body): it is the
        null space when ``null_space`` is not given, and the columns of the
        built basis that make ``Phi^T A Phi`` singular are dropped (one per
        dimension of ``{c : Phi c in range(kernel)}``, see
        :func:`ddops.dd.kernel.coarse_kernel_columns`).  Checked against ``A``
        when ``A`` is given.
    threshold : float, optional
        Eigenvalue threshold of ``"agdsw"`` and ``"geneo"`` (defaults
        :data:`ddops.dd.adaptive.AGDSW_THRESHOLD` and
        :data:`ddops.dd.adaptive.GENEO_THRESHOLD`).
    max_per_component : int, optional
        Cap on the eigenvectors per interface component (``"agdsw"``).
    max_per_subdomain : int, optional
        Cap on the eigenvectors per subdomain (``"geneo"``).
    neumann : sequence of sparse matrices, optional
        Local Neumann matrices, one per subdomain in the order of its unknowns
        (``"geneo"``, and ``"agdsw"`` on a decomposition with overlap >= 1 whose
        subdomain ``i`` grows part ``i``; default: computed from ``A``).
    oversampling : int, optional
        Layers added to every subdomain for the local matrices that ``"geneo"`` computes
        from ``A`` (:mod:`ddops.dd.oversampling`; default: 0 for a diagonally dominant
        ``A``, otherwise 2, or 1 for ``block_size >= 3``:
        :func:`~ddops.dd.oversampling.default_oversampling`).
    extension_solver : {"auto", "superlu", "pardiso", "amg"}, optional
        Solver of the interior problems of the harmonic extension (``"gdsw"``,
        ``"rgdsw"``, ``"agdsw"``; see :func:`ddops.dd.gdsw.harmonic_extension`).  Default
        ``"auto"``: PARDISO when installed, else SuperLU; ``"amg"`` is inexact.
    skip_contrast : float, optional
        ``"agdsw"``: no eigenproblem on the components around which the diagonal of ``A``
        varies by at most this factor (see :func:`ddops.dd.agdsw.agdsw_basis`);
        ``"geneo"``: none on such subdomains (see :func:`ddops.dd.geneo.geneo_basis`).
    eigen_stop : {"settled", "count"}, optional
        ``"geneo"``: when a subdomain's eigensolve stops (default ``"settled"``;
        ``"count"`` is faster and inexact: :data:`ddops.dd.geneo.GENEO_EIGEN_STOP`).
    analysis : ddops.dd.analysis.GDSWAnalysis, optional
        ``"gdsw"``, ``"rgdsw"``, ``"agdsw"``: keeps the interface components and the
        extension's PARDISO analyses (or orderings) for a later call on a matrix with the
        same pattern, and
        reuses those it holds (what :meth:`ddops.TwoLevelSchwarz.update` does).
        ``"geneo"`` with ``neumann``: its factorisations take the subdomains' elimination
        order it shares (:meth:`~ddops.dd.analysis.GDSWAnalysis.share_local_order`).
        Ignored by the other kinds.
    return_info : bool
        Also return what the builder reports: a
        :class:`~ddops.dd.adaptive.AdaptiveInfo` for ``"agdsw"``/``"geneo"``, a
        :class:`~ddops.dd.gdsw.GDSWInfo` for ``"gdsw"``/``"rgdsw"``, None otherwise.

    Returns
    -------
    scipy.sparse.csr_matrix
        ``num_dofs x n0``.
    info
        Only with ``return_info=True``.

    Notes
    -----
    The interface that GDSW classifies is ``decomposition.shared_nodes`` when
    the decomposition knows shared nodes (element-based partitions such as
    ``Decomposition1D(kind="element")``, whose GDSW basis is exactly the
    interface hats); otherwise it follows the algebraic rule: the unknowns that
    ``A`` couples to an unknown of another part.
    """
    check_choice("kind", kind, ("auto", *ALL_COARSE_BASES))
    if not isinstance(return_info, (bool, np.bool_)):
        raise TypeError(f"return_info must be a bool, got {type(return_info).__name__}")
    if not isinstance(decomposition, Decomposition):
        raise TypeError("decomposition must be a ddops Decomposition, got "
                        f"{type(decomposition).__name__}")
    kind = resolve_coarse_kind(kind, decomposition, matrix=A is not None, name="kind")
    if kernel is not None:
        Phi, info = _grounded_basis(decomposition, kind, size, A, null_space, kernel,
                                    dict(threshold=threshold,
                                         max_per_component=max_per_component,
                                         max_per_subdomain=max_per_subdomain,
                                         neumann=neumann, extension_solver=extension_solver,
                                         oversampling=oversampling,
                                         skip_contrast=skip_contrast, eigen_stop=eigen_stop,
                                         analysis=analysis))
        return (Phi, info) if return_info else Phi
    given = {"threshold": threshold, "max_per_component": max_per_component,
             "max_per_subdomain": max_per_subdomain, "neumann": neumann,
             "extension_solver": extension_solver, "oversampling": oversampling,
             "skip_contrast": skip_contrast, "eigen_stop": eigen_stop}
    for name, value in given.items():
        if value is not None and name not in ADAPTIVE_OPTIONS.get(kind, ()):
            users = [k for k, v in ADAPTIVE_OPTIONS.items() if name in v]
            raise ValueError(f"{name} is only used with kind in {tuple(users)}, not {kind!r}")
    if return_info and kind not in MATRIX_COARSE_BASES:
        return coarse_basis(decomposition, kind, size, A=A, null_space=null_space), None
    if size is not None and kind != "grid_hats":
        raise ValueError(f"size is only used with kind='grid_hats', not {kind!r}")
    d = decomposition
    if kind in _CONSTANTS_BASES:
        check_null_space_layout(d, null_space)
    x = d.coordinates
    if x.ndim == 2 and x.shape[1] == 1:  # n x 1 points (a 1D grid decomposition) are 1D
        x = x.ravel()
    if kind in ("interface_hats", "grid_hats"):
        if not d.has_coordinates:
            raise ValueError(f"coarse_basis: {kind!r} needs the unknowns' coordinates, and this "
                             "decomposition has none (Decomposition.from_matrix without "
                             "coordinates=); use 'gdsw' (with A), 'nicolaides' or 'auto'")
        if x.ndim != 1:
            raise ValueError(f"coarse_basis: {kind!r} needs 1D coordinates; this decomposition "
                             f"has {x.shape[1]}-D points (use 'nicolaides', 'gdsw' or 'rgdsw')")
    if kind == "interface_hats":
        if d.interface_nodes.size == 0:
            raise ValueError(
                "coarse_basis: 'interface_hats' needs interface nodes (a Decomposition1D with "
                "at least two subdomains, or Decomposition(..., interface_nodes=...)); use "
                "'auto', 'nicolaides', 'gdsw' (with A) or a matrix Phi")
        return hat_functions(x, x[d.interface_nodes])
    if kind in ("pou", "nicolaides"):
        if null_space is not None:
            from .gdsw import nicolaides_basis

            return nicolaides_basis(d, null_space)
        S = d.stacked_restriction("full", padded=False)
        cols = np.repeat(np.arange(d.num_subdomains), d.sizes)
        Phi = sp.csr_matrix((S.data, (d.indices, cols)), shape=(d.num_dofs, d.num_subdomains))
        Phi.sort_indices()
        return Phi
    if kind in MATRIX_COARSE_BASES:
        options = {k: v for k, v in given.items() if v is not None}
        if analysis is not None:
            options["analysis"] = analysis
        return _matrix_basis(d, kind, A, null_space, options, return_info)
    n0 = d.num_subdomains - 1 if size is None else check_int("size", size, minimum=1)
    if n0 < 1:
        raise ValueError("coarse_basis: 'grid_hats' needs size >= 1")
    return hat_functions(x, np.arange(1, n0 + 1) / (n0 + 1))


def _grounded_basis(d: Decomposition, kind: str, size: int | None, A: Any, null_space: Any,
                    kernel: Any, options: dict) -> tuple[sp.csr_matrix, Any]:
    """The basis of ``kind`` (null space: ``kernel`` unless given) without the columns that
    make its coarse matrix singular for ``ker A = range(kernel)``."""
    from .kernel import check_kernel, ground_basis

    Q = check_kernel(kernel, _kernel_reference(A, d.num_dofs))
    options = {k: v for k, v in options.items() if v is not None}
    Phi, info = coarse_basis(d, kind, size, A=A,
                             null_space=kernel if null_space is None else null_space,
                             return_info=True, **options)
    grounded, dropped = ground_basis(Phi, Q)
    if dropped and getattr(info, "coarse_matrix", None) is not None:
        info.coarse_matrix = None  # Phi^T A Phi of the columns before grounding
    return (Phi[:, :0].tocsr() if grounded is None else grounded), info


def _kernel_reference(A: Any, n: int) -> sp.csr_matrix:
    """``A`` as float64 CSR to check a kernel against (the zero matrix when not given:
    every vector is then accepted)."""
    if A is None:
        return sp.csr_matrix((n, n))
    from .._validation import as_matrix

    return as_matrix(A, "A")[0]


def check_null_space_layout(d: Decomposition, null_space: Any) -> None:
    """Warn when a vector problem has no null space, or one that does not fit ``block_size``.

    With ``block_size = b > 1`` and no null space, the bases use ``b`` constant vectors
    (one per component): the rotations of elasticity are missing (iterations about
    double).  A null space of rank ``k`` restricted to a part of the non-overlapping
    partition has rank ``min(k, unknowns)`` when it is ordered like the unknowns; a
    field-major null space read as interleaved (or any other misordering) loses rank on
    many parts (every part inside one half of the numbering): one ``k x k`` Gram matrix per
    part, ``O(n k^2)``, tells; the warning needs a quarter of the parts deficient.
    """
    b = d.block_size
    if null_space is None:
        if b > 1:
            warn(
                f"the decomposition has block_size={b} but no null_space was given: the coarse "
                f"space uses {b} constant vectors (one per component), which leaves out the "
                "rotations of elasticity; pass null_space= (for elasticity the rigid body "
                "modes, ddops.problems.rigid_body_modes)", RuntimeWarning)
        return
    Z = null_space.toarray() if sp.issparse(null_space) else np.asarray(null_space)
    if Z.ndim == 1:
        Z = Z[:, None]
    if Z.ndim != 2 or Z.shape[0] != d.num_dofs or Z.dtype.kind not in "fiub" or Z.shape[1] < 2:
        return  # one vector cannot lose rank; shape and type errors come from the builder
    if not np.all(np.isfinite(Z)):
        return
    k = Z.shape[1]
    labels = d.owner
    if labels is None:
        return
    parts = int(labels.max()) + 1
    Zs = Z / np.maximum(np.linalg.norm(Z, axis=0), 1e-300)
    G = np.empty((parts, k, k))
    for a in range(k):  # k (k + 1) / 2 passes over the rows, no n x k^2 array
        for c in range(a, k):
            G[:, a, c] = G[:, c, a] = np.bincount(labels, weights=Zs[:, a] * Zs[:, c],
                                                  minlength=parts)
    counts = np.bincount(labels, minlength=parts)
    ev = np.linalg.eigvalsh(G)
    rank = (ev > 1e-10 * np.maximum(ev[:, -1:], 1e-300)).sum(axis=1)
    full = np.linalg.matrix_rank(Zs)
    deficient = rank < np.minimum(full, counts)
    # ordered like the unknowns, only degenerate parts lose rank (all nodes on one line in
    # 3D); a misordered null space loses it on every part inside one half of the numbering
    if parts >= 2 and deficient.sum() * 4 >= parts:
        warn(
            f"null_space has rank {full} but lower rank on {int(deficient.sum())} of {parts} "
            f"parts: its rows are probably not ordered like the unknowns (block_size={b} "
            "means interleaved components, node k holding unknowns k*b .. k*b+b-1; a "
            "field-major null space must be reordered)", RuntimeWarning)


def _matrix_basis(d: Decomposition, kind: str, A: Any, null_space: Any, options: dict,
                  return_info: bool):
    """The coarse bases built from ``A`` (GDSW family and the adaptive ones)."""
    if A is None:
        raise ValueError(f"coarse_basis: {kind!r} needs the matrix A (coarse_basis(d, "
                         f"{kind!r}, A=A))")
    if d.owner is None:
        raise ValueError(f"coarse_basis: {kind!r} needs the non-overlapping partition "
                         "decomposition.owner (build the decomposition with "
                         "Decomposition.from_matrix or from_grid, or pass owner=)")
    from .._validation import as_matrix

    A, _ = as_matrix(A, "A")  # the package's matrix contract first, then the size
    shape = A.shape
    if shape != (d.num_dofs, d.num_dofs):
        raise ValueError(f"coarse_basis: A must have shape ({d.num_dofs}, {d.num_dofs}) "
                         f"(decomposition.num_dofs), got {shape}")
    # checked once here, not again by each builder it passes through
    with checked_once(A) as A:
        return _build_from_matrix(d, kind, A, null_space, options, return_info)


def _build_from_matrix(d: Decomposition, kind: str, A: sp.csr_matrix, null_space: Any,
                       options: dict, return_info: bool):
    if kind == "geneo":
        from .adaptive import geneo_basis

        return geneo_basis(A, d, null_space=null_space, return_info=return_info,
                           **options)
    if kind == "agdsw":
        from .adaptive import agdsw_basis

        if options.get("neumann") is not None:
            options = dict(options, neumann_indices=d.subdomains)
        return agdsw_basis(A, d.owner, null_space=null_space, interface=d.shared_nodes,
                           block_size=d.block_size, return_info=return_info, **options)
    from .gdsw import gdsw_basis

    return gdsw_basis(A, d.owner, null_space=null_space, interface=d.shared_nodes,
                      variant=kind, block_size=d.block_size, return_info=return_info,
                      solver=options.get("extension_solver", "auto"),
                      analysis=options.get("analysis"))


def validate_coarse_matrix(Phi: Any, num_dofs: int) -> sp.csr_matrix:
    """Check a user-supplied coarse basis and return it as float64 CSR."""
    if sp.issparse(Phi):  # a copy: the canonicalisation below must not touch the user's matrix
        Phi = sp.csr_matrix(Phi, dtype=np.float64, copy=True)
    else:
        arr = np.asarray(Phi)
        if arr.dtype.kind not in "fiub":
            raise TypeError(f"coarse_basis must be a real matrix, got dtype {arr.dtype}")
        if arr.ndim != 2:
            raise ValueError(f"coarse_basis must be 2-D (num_dofs x n0), got shape {arr.shape}")
        Phi = sp.csr_matrix(arr.astype(np.float64))
    if Phi.shape[0] != num_dofs or Phi.shape[1] < 1:
        raise ValueError(f"coarse_basis must have shape ({num_dofs}, n0 >= 1), got {Phi.shape}")
    check_finite("coarse_basis", Phi.data)
    Phi.sort_indices()
    return Phi


def column_rank(Phi: sp.spmatrix) -> int:
    """Rank of a sparse tall matrix.

    Cheap exact answer when every column owns a row where it is the only
    nonzero (true for hats and for partitions of unity with private
    unknowns); otherwise the rank of the ``n0 x n0`` Gram matrix.
    """
    Phi = sp.csr_matrix(Phi, copy=True)  # never modify the caller's matrix
    Phi.eliminate_zeros()
    single = np.diff(Phi.indptr) == 1
    owned = np.unique(Phi.indices[Phi.indptr[:-1][single]])
    if owned.size == Phi.shape[1]:
        return int(Phi.shape[1])
    gram = (Phi.T @ Phi).toarray()
    return int(np.linalg.matrix_rank(gram))


def subdomain_blocks(decomposition: Decomposition, Phi: Any, extra_columns: int = 0):
    """Split a coarse basis over the subdomains that own its rows.

    Every unknown ``j`` is owned by one subdomain (its first occurrence in
    :meth:`~ddops.dd.decomposition.Decomposition.scatter_plan`).  With ``O_i``
    the 0/1 diagonal of the rows subdomain ``i`` owns, ``sum_i R_i^T O_i R_i
    = I`` exactly, so the coarse restriction and interpolation pass through
    the subdomain blocks::

        Phi^T F = sum_i (O_i R_i Phi)^T (R_i F)
        Phi Y   = sum_i R_i^T (O_i R_i Phi) Y

    and need no product with the whole ``n x B`` block of their own.  Block
    ``i`` keeps only the ``c_i`` columns of ``O_i R_i Phi`` that are not
    identically zero (two or three for hats), padded with zero columns to
    ``c = max c_i``.

    Parameters
    ----------
    decomposition : Decomposition
        The subdomains (padded to ``p = max_size`` rows).
    Phi : sparse matrix or array
        ``num_dofs x n0`` coarse basis.
    extra_columns : int
        Offset of the coarse columns in the stacked ``(N, ., B)`` arrays the
        returned ``collect`` matrix reads (the local rank ``r`` when the coarse
        columns follow ``r`` local ones).

    Returns
    -------
    blocks : numpy.ndarray
        ``(N, p, c)`` float64, block ``i`` is ``O_i R_i Phi`` on its ``c``
        columns (zero on padding rows and padding columns).
    index : numpy.ndarray
        ``(N, c)`` coarse index of every block column (0 on padding columns).
    collect : scipy.sparse.csr_matrix
        ``n0 x N (extra_columns + c)`` 0/1 matrix that sums the coarse pieces
        ``Z[i, extra_columns + s]`` of a stacked ``(N, extra_columns + c, B)``
        array into the rows ``index[i, s]`` (padding columns left out).
    """
    d = decomposition
    N, p = d.num_subdomains, d.max_size
    Phi = sp.csr_matrix(Phi, copy=True)  # never modify the caller's matrix
    Phi.sum_duplicates()
    Phi.eliminate_zeros()
    n0 = Phi.shape[1]
    coo = Phi.tocoo()
    first, _ = d.scatter_plan()
    position = first[coo.row]                          # padded row of the owning subdomain
    sub = position // p
    pairs, which = np.unique(sub * n0 + coo.col, return_inverse=True)
    pair_sub, pair_col = pairs // n0, pairs % n0
    slot = np.arange(pairs.size) - np.searchsorted(pair_sub, pair_sub)  # rank within subdomain
    c = max(int(slot.max()) + 1 if pairs.size else 0, 1)
    # a dense Phi gives c = n0 columns in every padded block: check before allocating
    check_memory(f"the coarse blocks of Phi ({n0} columns, up to {c} per subdomain, on {N} "
                 f"subdomains of up to {p} unknowns)", 8 * N * p * c * 2,
                 "use a sparser coarse basis")
    blocks = np.zeros((N * p, c))
    blocks[position, slot[which]] = coo.data
    index = np.zeros((N, c), dtype=np.intp)
    index[pair_sub, slot] = pair_col
    width = extra_columns + c
    collect = sp.csr_matrix((np.ones(pairs.size), (pair_col, pair_sub * width + extra_columns
                                                    + slot)), shape=(n0, N * width))
    collect.sort_indices()
    return blocks.reshape(N, p, c), index, collect
