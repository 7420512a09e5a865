"""Test utilities for users of ddops: a dot test and hypothesis strategies.

``dottest`` needs only numpy.  The strategies need the ``hypothesis`` package
(installed with the ``test`` extra) and are imported lazily.  The guide
"Testing with ddops" (``docs/testing.md``) walks through a property test of an
operator built with ddops.

Strategies for matrices and preconditioners:

- :func:`spd_matrices`: small sparse SPD matrices (random graphs, P1 diffusion
  and P1 elasticity), or singular ones with their exact null space;
- :func:`algebraic_decompositions`: :meth:`ddops.Decomposition.from_matrix` on
  such matrices;
- :func:`two_level_configs` and :func:`two_level_schwarz`: arguments of
  :class:`ddops.TwoLevelSchwarz` that always construct, and the preconditioners.

Strategies for decompositions and Schwarz attention operators:
:func:`decompositions`, :func:`general_subdomains`,
:func:`general_decompositions`, :func:`any_decompositions`,
:func:`coarse_matrices` and :func:`schwarz_operators`.
"""

from __future__ import annotations

import warnings
from typing import Any, NamedTuple

import numpy as np

from .backend import get_array_module, to_numpy

__all__ = ["MATRIX_KINDS", "TWO_LEVEL_KINDS", "SYMMETRIC_VARIANTS",
           "dottest", "decompositions", "general_subdomains", "general_decompositions",
           "any_decompositions", "coarse_matrices", "schwarz_operators",
           "spd_matrices", "algebraic_decompositions", "TWO_LEVEL_COARSE_BASES",
           "two_level_configs", "two_level_schwarz"]


def dottest(op: Any, nblock: int | None = None, rtol: float | None = None, seed: int = 0,
            raise_error: bool = True) -> bool:
    """Check ``<M x, y> = <x, M^T y>`` with random vectors (or blocks of columns).

    Parameters
    ----------
    op : LinearOperator
        Operator with ``matvec``/``rmatvec`` (and ``matmat``/``rmatmat`` when
        ``nblock`` is given).
    nblock : int, optional
        Test ``matmat``/``rmatmat`` with this many columns instead of vectors.
    rtol : float, optional
        Relative tolerance; default ``1e-4`` for float32 and ``1e-10`` otherwise.
    seed : int
        Seed of the random vectors.
    raise_error : bool
        Raise an ``AssertionError`` on failure instead of returning False.

    Returns
    -------
    bool
        Whether the two inner products agree.
    """
    rng = np.random.default_rng(seed)
    m, n = op.shape
    dtype = np.dtype(getattr(op, "dtype", np.float64))
    if rtol is None:
        rtol = 1e-4 if dtype == np.float32 else 1e-10
    shape_x = (n,) if nblock is None else (n, nblock)
    shape_y = (m,) if nblock is None else (m, nblock)
    x = rng.standard_normal(shape_x).astype(dtype)
    y = rng.standard_normal(shape_y).astype(dtype)
    xp = get_array_module(backend=getattr(op, "backend", "numpy"))
    xd, yd = xp.asarray(x), xp.asarray(y)
    if nblock is None:
        Mx, MTy = op.matvec(xd), op.rmatvec(yd)
    else:
        Mx, MTy = op.matmat(xd), op.rmatmat(yd)
    Mx, MTy = np.asarray(to_numpy(Mx), np.float64), np.asarray(to_numpy(MTy), np.float64)
    lhs = float(np.sum(Mx * y))
    rhs = float(np.sum(x * MTy))
    scale = max(np.linalg.norm(Mx) * np.linalg.norm(y), np.linalg.norm(x) * np.linalg.norm(MTy))
    ok = abs(lhs - rhs) <= rtol * max(scale, np.finfo(np.float64).tiny)
    if not ok and raise_error:
        raise AssertionError(f"dot test failed: <Mx, y> = {lhs!r}, <x, M^T y> = {rhs!r}")
    return bool(ok)


def _max_private_overlap(n: int, N: int, kind: str) -> int:
    """Largest overlap of ``Decomposition1D(n, N, overlap, kind)`` that leaves every
    subdomain an unknown no other subdomain holds.

    A core block of ``c`` elements (unknowns) keeps, element-based,
    ``c - 2 overlap - 1`` nodes of its own inside the line and
    ``c - overlap - 1`` at an end; DOF-based, ``c - 2 overlap`` and ``c - overlap``.
    """
    from .dd.decomposition import split_sizes

    if N == 1:
        return 4  # a single subdomain holds every unknown whatever the overlap
    lost = 1 if kind == "element" else 0  # the node shared by two element blocks
    room = split_sizes(n, N) - 1 - lost
    return int(min(room[0], room[-1], *(room[1:-1] // 2)))


def decompositions(max_n: int = 96, kinds: tuple[str, ...] = ("element", "dof"),
                   min_subdomains: int = 1):
    """Hypothesis strategy for valid :class:`~ddops.Decomposition1D` objects.

    Draws the kind, ``n``, the number of subdomains ``N`` and an overlap small
    enough that every subdomain keeps at least one unknown that no other
    subdomain holds.  So no two subdomains coincide and the Nicolaides coarse
    space (``"nicolaides"``/``"pou"``, one column per subdomain) has full
    rank: :class:`~ddops.TwoLevelSchwarz` constructs with it on every drawn
    decomposition, and with its default coarse space (``"interface_hats"``,
    which needs an interface) whenever ``N >= 2``.

    Parameters
    ----------
    max_n : int
        Largest ``n`` (elements or unknowns); the smallest is 4.
    kinds : tuple of str
        Conventions to draw from, ``"element"`` and/or ``"dof"``.
    min_subdomains : int
        Smallest ``N``; 2 leaves out the single-subdomain decompositions
        (which have no interface, so no interface hats and no GDSW space).

    Returns
    -------
    hypothesis.strategies.SearchStrategy
        Of :class:`~ddops.Decomposition1D`.

    Notes
    -----
    Overlaps as large as the smallest core block are valid arguments of
    :class:`~ddops.Decomposition1D` but are not drawn when they leave a
    subdomain without an unknown of its own: for ``n = 4, N = 2, overlap = 1``
    (element-based) both subdomains hold all three unknowns, the two
    Nicolaides columns coincide and the coarse matrix is singular.
    """
    from hypothesis import strategies as st

    from .dd.decomposition import Decomposition1D

    if not 1 <= min_subdomains <= max(1, max_n // 2) or max_n < 4:
        raise ValueError(f"need 4 <= max_n and 1 <= min_subdomains <= max_n // 2, got "
                         f"max_n={max_n}, min_subdomains={min_subdomains}")

    @st.composite
    def _build(draw):
        kind = draw(st.sampled_from(kinds))
        n = draw(st.integers(max(4, 2 * min_subdomains), max_n))
        N = draw(st.integers(min_subdomains, max(min_subdomains, min(12, n // 2))))
        overlap = draw(st.integers(0, min(4, _max_private_overlap(n, N, kind))))
        return Decomposition1D(n, N, overlap=overlap, kind=kind)

    return _build()


def general_subdomains(max_dofs: int = 40, max_subdomains: int = 6):
    """Hypothesis strategy for the arguments of a general :class:`~ddops.Decomposition`.

    Draws ``(subdomains, num_dofs, interface_nodes)``: every unknown gets an
    owner subdomain (so all are covered and none is empty), then every
    subdomain takes a random extra set of unknowns anywhere (overlaps that are
    neither contiguous nor nested, multiplicities up to ``N``).  The index
    arrays come unsorted, as int32 or int64.  ``interface_nodes`` is None or
    a sorted set of unknowns (which makes the ``"interface_hats"`` basis
    available).
    """
    from hypothesis import strategies as st

    @st.composite
    def _build(draw):
        n = draw(st.integers(1, max_dofs))
        N = draw(st.integers(1, min(max_subdomains, n)))
        owner = np.asarray(draw(st.lists(st.integers(0, N - 1), min_size=n, max_size=n)))
        owner[draw(st.permutations(range(n)))[:N]] = np.arange(N)  # no empty subdomain
        extras = draw(st.lists(st.sets(st.integers(0, n - 1), max_size=max(1, n // 2)),
                               min_size=N, max_size=N))
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        dtype = draw(st.sampled_from([np.int64, np.int32]))
        subdomains = [rng.permutation(np.union1d(np.flatnonzero(owner == i),
                                                 np.fromiter(extras[i], int, len(extras[i]))))
                      .astype(dtype) for i in range(N)]
        interface = None
        if draw(st.booleans()):
            interface = sorted(draw(st.sets(st.integers(0, n - 1), min_size=1,
                                            max_size=min(n, 5))))
        return subdomains, n, interface

    return _build()


def general_decompositions(max_dofs: int = 40, max_subdomains: int = 6):
    """Hypothesis strategy for general :class:`~ddops.Decomposition` objects.

    Built from :func:`general_subdomains`: random overlapping index sets
    covering every unknown, not only the contiguous blocks of
    :class:`~ddops.Decomposition1D`.
    """
    from .dd.decomposition import Decomposition

    return general_subdomains(max_dofs, max_subdomains).map(
        lambda args: Decomposition(args[0], args[1], interface_nodes=args[2]))


def any_decompositions(max_n: int = 96):
    """Hypothesis strategy mixing :func:`decompositions` and :func:`general_decompositions`."""
    from hypothesis import strategies as st

    return st.one_of(decompositions(max_n), general_decompositions(min(max_n, 40)))


#: Defects :func:`coarse_matrices` can build into a user coarse basis.
COARSE_DEFECTS = ("none", "duplicate_column", "scaled_duplicate", "zero_column", "zero_rows",
                  "all_zero")


def coarse_matrices(num_dofs: int, max_columns: int = 6, defects=COARSE_DEFECTS):
    """Hypothesis strategy for user coarse bases Phi (``num_dofs x n0``).

    Random sparse or dense values in one of the formats a user may pass
    (dense array, CSR, CSC, COO), with ``defects`` drawn from
    :data:`COARSE_DEFECTS`: repeated or scaled-repeated columns (rank
    deficient), zero columns, zero rows (unknowns outside the coarse space)
    or an all-zero basis.
    """
    import scipy.sparse as sp
    from hypothesis import strategies as st

    @st.composite
    def _build(draw):
        n0 = draw(st.integers(1, max_columns))
        density = draw(st.sampled_from([0.15, 0.5, 1.0]))
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        Phi = rng.standard_normal((num_dofs, n0)) * (rng.random((num_dofs, n0)) < density)
        defect = draw(st.sampled_from(defects))
        if defect in ("duplicate_column", "scaled_duplicate") and n0 > 1:
            Phi[:, -1] = Phi[:, 0] * (1.0 if defect == "duplicate_column" else -2.5)
        elif defect == "zero_column":
            Phi[:, rng.integers(n0)] = 0.0
        elif defect == "zero_rows":
            Phi[rng.random(num_dofs) < 0.5] = 0.0
        elif defect == "all_zero":
            Phi[...] = 0.0
        fmt = draw(st.sampled_from(["dense", "csr", "csc", "coo"]))
        return Phi if fmt == "dense" else getattr(sp, f"{fmt}_matrix")(Phi)

    return _build()


#: Fixed terms :func:`schwarz_operators` can add (all non-symmetric).
BASES = ("none", "sparse", "dense", "operator")


def _random_base(kind: str, n: int, rng: np.random.Generator):
    """A non-symmetric ``n x n`` fixed term of the given kind (see :data:`BASES`)."""
    import scipy.sparse as sp
    import scipy.sparse.linalg as spla

    if kind == "none":
        return None
    dense = rng.standard_normal((n, n)) * (rng.random((n, n)) < 0.3) + np.diag(np.full(n, 0.5))
    if kind == "sparse":
        return sp.csr_matrix(dense)
    return dense if kind == "dense" else spla.aslinearoperator(dense)


def schwarz_operators(max_n: int = 96, dtypes: tuple[Any, ...] = (np.float64,),
                      general: bool = False, custom_coarse: bool = False,
                      tied: tuple[bool, ...] = (False,),
                      partitions: tuple[str, ...] = ("symmetric",),
                      bases: tuple[str, ...] = ("none",)):
    """Hypothesis strategy for random :class:`~ddops.SchwarzOperator` objects.

    Covers decompositions, local ranks up to the largest subdomain (so above
    the smaller subdomains' sizes), coarse ranks, every named coarse basis
    and one-level operators.  The options widen the search:

    Parameters
    ----------
    max_n : int
        Largest ``n`` of the 1D decompositions.
    dtypes : tuple of dtypes
        Floating-point types to draw from.
    general : bool
        Also draw general decompositions (:func:`general_decompositions`).
    custom_coarse : bool
        Also draw user coarse bases (:func:`coarse_matrices`, rank-deficient
        ones and zero rows included).
    tied : tuple of bool
        Tied (``K = Q``) and/or untied operators.
    partitions : tuple of str
        Partition-of-unity placements to draw from (``"left"`` is skipped
        for tied operators).
    bases : tuple of str
        Fixed terms to draw from :data:`BASES`: none, or a random
        non-symmetric sparse matrix, dense array or ``LinearOperator``.
    """
    from hypothesis import strategies as st

    from .operators import SchwarzOperator

    @st.composite
    def _build(draw):
        d = draw(any_decompositions(max_n) if general else decompositions(max_n))
        choices: list[Any] = ["pou", "grid_hats", None]
        if d.interface_nodes.size:
            choices.append("interface_hats")
        if custom_coarse:
            choices.append("custom")
        basis = draw(st.sampled_from(choices))
        size = draw(st.integers(1, 6)) if basis == "grid_hats" else None
        if basis == "custom":
            basis = draw(coarse_matrices(d.num_dofs))
            n0 = basis.shape[1]
        else:
            n0 = {"pou": d.num_subdomains, "grid_hats": size, None: 0,
                  "interface_hats": d.interface_nodes.size}[basis]
        coarse_rank = None if basis is None else draw(st.one_of(st.none(), st.integers(1, n0)))
        is_tied = draw(st.sampled_from(tied))
        partition = draw(st.sampled_from([p for p in partitions
                                          if not (is_tied and p == "left")] or ["symmetric"]))
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        return SchwarzOperator(
            d,
            local_rank=draw(st.integers(1, min(6, d.max_size))),
            coarse_rank=coarse_rank,
            coarse_basis=basis,
            coarse_size=size,
            init=draw(st.sampled_from(["scaled", "naive"])),
            seed=draw(st.integers(0, 2**16)),
            dtype=draw(st.sampled_from(dtypes)),
            partition=partition,
            tied=is_tied,
            base=_random_base(draw(st.sampled_from(bases)), d.num_dofs, rng),
        )

    return _build()


# -- SPD matrices, algebraic decompositions and two-level preconditioners -----------------------

#: Kinds of :func:`spd_matrices`: the weighted Laplacian of a random connected
#: graph, P1 diffusion on a triangulated rectangle, P1 plane-strain elasticity
#: on the same meshes (two unknowns per node).
MATRIX_KINDS = ("graph", "fem", "elasticity")

#: Kinds of :func:`two_level_configs`: a 1D decomposition
#: (:func:`decompositions`) of a random 1D diffusion matrix, or an algebraic
#: one (:func:`algebraic_decompositions`) of a matrix of :data:`MATRIX_KINDS`.
TWO_LEVEL_KINDS = ("1d",) + MATRIX_KINDS

#: Variants of :class:`~ddops.TwoLevelSchwarz` that give a symmetric positive
#: definite preconditioner (``"restricted"`` is not symmetric).
SYMMETRIC_VARIANTS = ("additive", "symmetric_restricted", "hybrid")


class _Problem(NamedTuple):
    """A drawn matrix with what the strategies built it from."""

    A: Any                  # scipy.sparse.csr_matrix
    null_space: np.ndarray  # exact kernel (singular A) or near-null space (SPD A)
    block_size: int         # unknowns per node
    coordinates: Any        # node coordinates (nodes x 2), None for graphs
    kind: str


def _kinds(kinds, allowed, what):
    kinds = (kinds,) if isinstance(kinds, str) else tuple(kinds)
    bad = [k for k in kinds if k not in allowed]
    if not kinds or bad:
        raise ValueError(f"{what} must be a non-empty selection of {allowed}, got {kinds!r}")
    return kinds


def _symmetric_csr(rows, cols, vals, n):
    """Summed COO entries as a CSR matrix that is symmetric to the bit."""
    import scipy.sparse as sp

    A = sp.coo_matrix((vals, (rows, cols)), shape=(n, n)).tocsr()
    A = ((A + A.T) * 0.5).tocsr()  # the two sums of a pair may round differently
    A.sort_indices()
    return A


def _log_uniform(rng, size, decades=1.0):
    """Positive values spread evenly over ``10^-decades .. 10^decades``."""
    return 10.0 ** rng.uniform(-decades, decades, size)


def _graph_laplacian(n: int, rng: np.random.Generator):
    """Weighted Laplacian of a random connected graph on ``n`` nodes (kernel: constants)."""
    perm = rng.permutation(n)
    # a random spanning tree (connected), then random extra edges
    child = perm[1:]
    parent = perm[rng.integers(0, np.arange(1, n))] if n > 1 else perm[:0]
    extra = rng.integers(0, n, size=(2, rng.integers(0, n + 1)))
    extra = extra[:, extra[0] != extra[1]]
    i = np.concatenate([child, extra[0]])
    j = np.concatenate([parent, extra[1]])
    w = _log_uniform(rng, i.size)
    rows = np.concatenate([i, j, i, j])
    cols = np.concatenate([j, i, i, j])
    vals = np.concatenate([-w, -w, w, w])
    return _symmetric_csr(rows, cols, vals, n)


def _rectangle_mesh(nx: int, ny: int, rng: np.random.Generator):
    """Nodes and triangles of ``[0, 1]^2`` cut into ``nx x ny`` cells, each cell by a
    randomly chosen diagonal (node ``i + (nx + 1) j`` at ``(i / nx, j / ny)``)."""
    xs, ys = np.meshgrid(np.arange(nx + 1) / nx, np.arange(ny + 1) / ny)
    points = np.column_stack([xs.ravel(), ys.ravel()])
    i, j = (a.ravel() for a in np.meshgrid(np.arange(nx), np.arange(ny)))
    v00 = i + (nx + 1) * j
    v10, v01, v11 = v00 + 1, v00 + nx + 1, v00 + nx + 2
    flip = rng.random(v00.size) < 0.5
    first = np.where(flip[:, None], np.column_stack([v00, v10, v01]),
                     np.column_stack([v00, v10, v11]))
    second = np.where(flip[:, None], np.column_stack([v10, v11, v01]),
                      np.column_stack([v00, v11, v01]))
    return points, np.concatenate([first, second])


def _p1_gradients(points, triangles):
    """Areas ``(T,)`` and gradients ``(T, 3, 2)`` of the P1 basis functions."""
    corners = points[triangles]                                    # (T, 3, 2)
    T = np.concatenate([np.ones(corners.shape[:2] + (1,)), corners], axis=2)
    area = 0.5 * np.abs(np.linalg.det(T))
    grads = np.linalg.inv(T)[:, 1:, :].transpose(0, 2, 1)          # (T, 3, 2)
    return area, grads


def _p1_diffusion(points, triangles, rng):
    """Neumann stiffness of ``-div(c grad u)`` with a random ``c`` per triangle."""
    area, G = _p1_gradients(points, triangles)
    c = _log_uniform(rng, area.size)
    Ke = (c * area)[:, None, None] * G @ G.transpose(0, 2, 1)       # (T, 3, 3)
    rows = np.repeat(triangles, 3, axis=1).ravel()
    cols = np.tile(triangles, (1, 3)).ravel()
    return _symmetric_csr(rows, cols, Ke.ravel(), points.shape[0])


def _p1_elasticity(points, triangles, rng):
    """Neumann stiffness of plane-strain elasticity, random ``E`` per triangle, node-major
    unknowns ``(u_x, u_y)``."""
    area, G = _p1_gradients(points, triangles)
    E = _log_uniform(rng, area.size)
    nu = rng.uniform(0.1, 0.4)
    D = np.array([[1 - nu, nu, 0.0], [nu, 1 - nu, 0.0], [0.0, 0.0, 0.5 - nu]])
    D /= (1 + nu) * (1 - 2 * nu)
    B = np.zeros((area.size, 3, 6))               # strains (xx, yy, xy) of the 6 unknowns
    B[:, 0, 0::2] = G[:, :, 0]
    B[:, 1, 1::2] = G[:, :, 1]
    B[:, 2, 0::2] = G[:, :, 1]
    B[:, 2, 1::2] = G[:, :, 0]
    Ke = (E * area)[:, None, None] * B.transpose(0, 2, 1) @ D @ B  # (T, 6, 6)
    dofs = np.stack([2 * triangles, 2 * triangles + 1], axis=2).reshape(-1, 6)
    rows = np.repeat(dofs, 6, axis=1).ravel()
    cols = np.tile(dofs, (1, 6)).ravel()
    return _symmetric_csr(rows, cols, Ke.ravel(), 2 * points.shape[0])


def _problems(kinds, max_n: int, singular: bool, min_nodes: int = 1):
    """Strategy of :class:`_Problem`: SPD matrices, or singular ones with their kernel.

    ``min_nodes`` up to 2 draws every size; above 2 at least four nodes (and at
    least two columns of kept nodes on the meshes, for :func:`_two_connected_parts`).
    """
    from hypothesis import strategies as st

    kinds = _kinds(kinds, MATRIX_KINDS, "kinds")
    smallest = 8 if min_nodes <= 2 else 16  # elasticity on 2 x 1 cells (two kept columns)
    if max_n < smallest:
        raise ValueError(f"max_n must be >= {smallest}, got {max_n}")

    @st.composite
    def _build(draw):
        kind = draw(st.sampled_from(kinds))
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        if kind == "graph":
            n = draw(st.integers(max(2, min_nodes), max_n))
            A = _graph_laplacian(n, rng)
            Z = np.ones((n, 1))
            if not singular:  # a positive shift on some nodes (Robin / Dirichlet rows)
                fixed = rng.choice(n, size=draw(st.integers(1, max(1, n // 4))), replace=False)
                shift = np.zeros(n)
                shift[fixed] = _log_uniform(rng, fixed.size) * A.diagonal().mean()
                A = (A + _diagonal(shift)).tocsr()
            return _Problem(A, Z, 1, None, kind)
        b = 2 if kind == "elasticity" else 1
        # (nx + 1) (ny + 1) nodes, nx (ny + 1) of them kept with Dirichlet nodes
        nx = draw(st.integers(1 if min_nodes <= 2 else 2, max_n // (2 * b) - 1))
        ny = draw(st.integers(1, max(1, max_n // (b * (nx + 1)) - 1)))
        points, triangles = _rectangle_mesh(nx, ny, rng)
        if kind == "fem":
            A, Z = _p1_diffusion(points, triangles, rng), np.ones((points.shape[0], 1))
        else:
            from .problems.elasticity import rigid_body_modes

            A, Z = _p1_elasticity(points, triangles, rng), rigid_body_modes(points)
        if not singular:  # Dirichlet (clamped) nodes on the side x = 0, removed
            keep_nodes = np.flatnonzero(points[:, 0] > 0)
            keep = (keep_nodes[:, None] * b + np.arange(b)).ravel()
            A = A[keep][:, keep].tocsr()
            A.sort_indices()
            Z, points = Z[keep], points[keep_nodes]
        return _Problem(A, Z, b, points, kind)

    return _build()


def _diagonal(values):
    import scipy.sparse as sp

    return sp.diags(values, format="csr")


def spd_matrices(kinds: str | tuple[str, ...] = MATRIX_KINDS, max_n: int = 40,
                 null_space: bool = False):
    """Hypothesis strategy for small sparse symmetric positive (semi)definite matrices.

    Parameters
    ----------
    kinds : str or tuple of str
        Kinds to draw from (see :data:`MATRIX_KINDS`).

        - ``"graph"``: the weighted Laplacian of a random connected graph (a
          random spanning tree plus random extra edges, weights between 0.1
          and 10), plus a positive diagonal shift on a random set of nodes.
        - ``"fem"``: P1 finite elements of ``-div(c grad u)`` on the unit
          square cut into ``nx x ny`` cells, each cell into two right
          triangles along a randomly chosen diagonal, ``c`` between 0.1 and
          10 per triangle; the nodes on the side ``x = 0`` are Dirichlet
          nodes (removed).
        - ``"elasticity"``: P1 plane-strain elasticity on the same meshes,
          Young's modulus between 0.1 and 10 per triangle, one Poisson ratio
          in ``[0.1, 0.4]``, two unknowns per node (node-major), clamped on
          the side ``x = 0``.

        All are weakly diagonally dominant M-matrices except elasticity.
    max_n : int
        Largest number of rows, ``>= 8`` (dense eigenvalue checks stay cheap).
    null_space : bool
        False: draw symmetric positive definite matrices.  True: draw the
        singular matrices without the shift or the Dirichlet nodes (the graph
        Laplacian, the pure Neumann and the pure traction problem), each with
        its exact null space.

    Returns
    -------
    hypothesis.strategies.SearchStrategy
        Of ``scipy.sparse.csr_matrix`` (float64, exactly symmetric, sorted
        indices), or with ``null_space=True`` of pairs ``(A, Z)``: ``A`` is
        positive semidefinite and its null space is exactly the span of the
        columns of ``Z`` (the constants, ``n x 1``, or the three rigid body
        modes of elasticity, ``n x 3``), so ``A Z = 0`` up to rounding.
    """
    strategy = _problems(kinds, max_n, singular=bool(null_space))
    if null_space:
        return strategy.map(lambda p: (p.A, p.null_space))
    return strategy.map(lambda p: p.A)


def _private_nodes(d, block_size: int) -> np.ndarray:
    """Per subdomain, the number of nodes that no other subdomain holds."""
    private = d.multiplicity[d.indices] == 1
    group = np.repeat(np.arange(d.num_subdomains), d.sizes)
    return np.bincount(group[private], minlength=d.num_subdomains) // block_size


def _two_connected_parts(problem: _Problem) -> np.ndarray:
    """Node labels of two connected parts, each with at least two nodes on the meshes.

    The meshes (at least two columns of kept nodes) are cut between two
    columns; a graph is cut at the edge of a BFS spanning tree that balances
    the two subtrees best (both are connected and non-empty).
    """
    from scipy.sparse import csgraph

    if problem.coordinates is not None:
        x = problem.coordinates[:, 0]
        columns = np.unique(x)
        return (x >= columns[columns.size // 2]).astype(np.int64)
    m = problem.A.shape[0]
    order, parent = csgraph.breadth_first_order(problem.A, 0, directed=False,
                                                return_predecessors=True)
    size = np.ones(m, dtype=np.int64)
    for v in order[:0:-1]:  # children before their parents
        size[parent[v]] += size[v]
    cut = order[1:][np.argmin(np.abs(2 * size[order[1:]] - m))]
    inside = np.zeros(m, dtype=bool)
    inside[cut] = True
    for v in order[1:]:  # parents before their children
        inside[v] |= inside[parent[v]]
    return inside.astype(np.int64)


def _algebraic_decomposition(problem: _Problem, subdomains: int, overlap: int, seed: int,
                             min_subdomains: int = 1):
    """``Decomposition.from_matrix`` of the problem, made valid deterministically.

    Valid: every part is non-empty and connected (no warning) and every
    subdomain keeps nodes of its own (one; two for elasticity: enough for the
    Nicolaides space of the null space to have full rank).  An invalid METIS
    draw is retried with one layer of overlap less and, at overlap 0, with one
    subdomain less; one subdomain (all nodes its own) is always valid.  With
    ``min_subdomains=2`` the last resort is two connected parts of
    :func:`_two_connected_parts` (METIS can leave a part of a tiny graph
    empty).  Returns None when nothing is valid.
    """
    from .dd.decomposition import Decomposition

    need = 1 if problem.block_size == 1 else 2
    tries = [(N, o, "metis") for N in range(subdomains, min_subdomains - 1, -1)
             for o in range(overlap if N == subdomains else 0, -1, -1)]
    if min_subdomains == 2:
        labels = _two_connected_parts(problem)
        tries += [(2, o, labels) for o in range(overlap, -1, -1)]
    for N, o, partitioner in tries:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                d = Decomposition.from_matrix(problem.A, N, o, partitioner=partitioner,
                                              block_size=problem.block_size,
                                              coordinates=problem.coordinates, seed=seed)
            except ValueError:  # METIS left a part empty
                continue
        if not caught and _private_nodes(d, problem.block_size).min() >= need:
            return d
    return None


def algebraic_decompositions(kinds: str | tuple[str, ...] = MATRIX_KINDS, max_n: int = 40,
                             max_subdomains: int = 6, max_overlap: int = 2,
                             min_subdomains: int = 1):
    """Hypothesis strategy for :meth:`ddops.Decomposition.from_matrix` on :func:`spd_matrices`.

    Draws an SPD matrix, a number of subdomains, an overlap (layers of the
    graph of ``A``) and a METIS seed.  Every drawn decomposition is valid for a
    two-level method: METIS fills every part, the parts are connected (no
    warning) and every subdomain keeps nodes no other subdomain holds (at
    least one; two for elasticity), so no subdomain is covered by the others
    and the Nicolaides space of the constants (of the rigid body modes for
    elasticity) has full rank.  A draw that misses this is replaced,
    deterministically, by the same matrix with less overlap, then fewer
    subdomains (and, at two subdomains, two connected parts cut by hand when
    METIS leaves one of them empty).

    Parameters
    ----------
    kinds : str or tuple of str
        Matrix kinds (see :func:`spd_matrices`).
    max_n : int
        Largest number of rows, ``>= 8`` (``>= 16`` with ``min_subdomains=2``).
    max_subdomains : int
        Largest number of subdomains (at most half the number of nodes).
    max_overlap : int
        Largest overlap.
    min_subdomains : int
        1 or 2: 2 leaves out single-subdomain decompositions, which have no
        interface (so no GDSW or adaptive coarse space).

    Returns
    -------
    hypothesis.strategies.SearchStrategy
        Of pairs ``(A, d)``: the CSR matrix and its
        :class:`~ddops.Decomposition` (with ``d.owner`` the METIS parts,
        ``d.block_size`` 2 for elasticity and, for the mesh kinds,
        ``d.coordinates`` the ``(x, y)`` point of every unknown).
    """
    from hypothesis import strategies as st

    if min_subdomains not in (1, 2) or max_subdomains < min_subdomains or max_overlap < 0:
        raise ValueError(f"need min_subdomains in (1, 2), max_subdomains >= min_subdomains and "
                         f"max_overlap >= 0, got {min_subdomains}, {max_subdomains} and "
                         f"{max_overlap}")
    # two subdomains with two nodes of their own each (elasticity) need four nodes
    problems = _problems(kinds, max_n, singular=False, min_nodes=2 * min_subdomains)

    @st.composite
    def _build(draw):
        problem = draw(problems)
        d = _draw_algebraic(draw, problem, max_subdomains, max_overlap, min_subdomains)
        return problem.A, d

    return _build()


def _draw_algebraic(draw, problem: _Problem, max_subdomains: int, max_overlap: int,
                    min_subdomains: int):
    from hypothesis import strategies as st

    nodes = problem.A.shape[0] // problem.block_size
    N = draw(st.integers(min_subdomains, max_subdomains))
    N = max(min_subdomains, min(N, nodes // 2))
    overlap = draw(st.integers(0, max_overlap))
    seed = draw(st.integers(0, 2**16))
    d = _algebraic_decomposition(problem, N, overlap, seed, min_subdomains)
    if d is None:  # cannot happen: one subdomain, or two cut by hand, is always valid
        raise AssertionError(f"no valid decomposition of a {problem.kind} matrix of size "
                             f"{problem.A.shape[0]} into {min_subdomains} subdomains")
    return d


def _diffusion_1d(m: int, rng: np.random.Generator):
    """Tridiagonal 1D diffusion with Dirichlet ends, edge coefficients between 0.1 and 10."""
    import scipy.sparse as sp

    k = _log_uniform(rng, m + 1)
    return sp.diags([-k[1:-1], k[:-1] + k[1:], -k[1:-1]], [-1, 0, 1], format="csr")


#: The coarse spaces :func:`two_level_configs` draws by default (None: one level).
TWO_LEVEL_COARSE_BASES = ("nicolaides", "interface_hats", "gdsw", "rgdsw", "agdsw", "geneo",
                          None)


def _admissible(kind: str, basis) -> bool:
    """Whether :func:`two_level_configs` draws ``basis`` for matrices of ``kind``."""
    if basis == "interface_hats":
        return kind == "1d"  # needs 1D coordinates and interface nodes
    if basis in ("agdsw", "geneo"):
        # their algebraic local Neumann matrices need a diagonally dominant A
        return kind != "elasticity"
    return basis in (None, "nicolaides", "pou", "gdsw", "rgdsw")


def _coarse_space_builds(A, d, basis) -> bool:
    """False for the two adaptive cases :func:`two_level_configs` leaves out.

    ``"geneo"`` with no eigenvalue below its threshold (small problems whose
    subdomains all touch the Dirichlet rows) gives no coarse function, and
    :class:`~ddops.TwoLevelSchwarz` warns that it is one-level.  ``"agdsw"``
    fails when every unknown lies on the interface (no interior unknown, so
    no harmonic extension).
    """
    if basis == "agdsw":
        from .dd.gdsw import interface_components

        comps = interface_components(A, d.owner, interface=d.shared_nodes,
                                     block_size=d.block_size)
        return comps.interface.size < d.num_dofs
    if basis == "geneo":
        from .dd.coarse import coarse_basis

        return coarse_basis(d, "geneo", A=A).shape[1] > 0
    return True


def two_level_configs(kinds: str | tuple[str, ...] = TWO_LEVEL_KINDS,
                      coarse_bases: tuple[Any, ...] = TWO_LEVEL_COARSE_BASES,
                      variants: tuple[str, ...] = SYMMETRIC_VARIANTS,
                      local_solvers: tuple[str, ...] = ("dense", "superlu"),
                      max_n: int = 40, max_subdomains: int = 6):
    """Hypothesis strategy for arguments of :class:`ddops.TwoLevelSchwarz` that construct.

    Draws a problem and a decomposition (a :func:`decompositions` 1D
    decomposition of a random 1D diffusion matrix, or an
    :func:`algebraic_decompositions` one), a coarse space the pair supports,
    a variant and a local solver.  ``TwoLevelSchwarz(A, d, **options)``
    constructs, without a warning, for every drawn triple, and with a variant
    of :data:`SYMMETRIC_VARIANTS` it is symmetric positive definite.

    Parameters
    ----------
    kinds : str or tuple of str
        Problem kinds (see :data:`TWO_LEVEL_KINDS`).
    coarse_bases : tuple
        Coarse spaces to draw from (see :data:`TWO_LEVEL_COARSE_BASES`; None is
        the one-level method).  Each kind draws only those it supports:
        ``"interface_hats"`` needs the 1D kind; ``"agdsw"`` and ``"geneo"``
        (with their algebraic local Neumann matrices) need a diagonally
        dominant matrix, so not elasticity; ``"interface_hats"``, the GDSW
        family and GenEO/AGDSW need at least two subdomains, which is then
        drawn.  For elasticity the null space (``"nicolaides"``, the GDSW
        family) is the rigid body modes.
    variants : tuple of str
        Variants to draw from (``"restricted"`` gives a non-symmetric ``M``).
    local_solvers : tuple of str
        Local solvers to draw from (see :data:`ddops.precond.schwarz.LOCAL_SOLVERS`).
    max_n : int
        Largest number of unknowns, ``>= 16``.
    max_subdomains : int
        Largest number of subdomains.

    Returns
    -------
    hypothesis.strategies.SearchStrategy
        Of triples ``(A, d, options)``: the CSR matrix, the
        :class:`~ddops.Decomposition` and a dict of keyword arguments
        (``coarse_basis``, ``variant``, ``local_solver`` and, for elasticity,
        ``null_space``).

    Notes
    -----
    Two adaptive cases are filtered out (rejected by the strategy, a few
    percent of the ``"geneo"`` and ``"agdsw"`` draws): GenEO that selects no
    coarse function (every subdomain of a small problem touches the
    Dirichlet rows, and the preconditioner would warn that it is one-level),
    and AGDSW on a partition whose every unknown lies on the interface, for
    which :func:`ddops.coarse_basis` raises.
    """
    from hypothesis import strategies as st

    kinds = _kinds(kinds, TWO_LEVEL_KINDS, "kinds")
    coarse_bases = tuple(coarse_bases)
    usable = {k: [b for b in coarse_bases if _admissible(k, b)] for k in kinds}
    kinds = tuple(k for k in kinds if usable[k])
    if not kinds:
        raise ValueError(f"no kind supports any of coarse_bases={coarse_bases!r}")
    if not variants or not local_solvers:
        raise ValueError("variants and local_solvers must not be empty")
    # two subdomains with two nodes of their own each (elasticity) need four nodes
    problems = {k: _problems(k, max_n, singular=False, min_nodes=4) for k in kinds
                if k != "1d"}

    @st.composite
    def _build(draw):
        kind = draw(st.sampled_from(kinds))
        basis = draw(st.sampled_from(usable[kind]))
        two = basis not in (None, "nicolaides", "pou")  # needs an interface
        options: dict[str, Any] = {"coarse_basis": basis}
        if kind == "1d":
            d = draw(decompositions(max_n=max_n, min_subdomains=2 if two else 1))
            A = _diffusion_1d(d.num_dofs, np.random.default_rng(draw(st.integers(0, 2**32 - 1))))
        else:
            problem = draw(problems[kind])
            d = _draw_algebraic(draw, problem, max_subdomains, 2, 2 if two else 1)
            A = problem.A
            if kind == "elasticity" and basis is not None:
                options["null_space"] = problem.null_space
        if not _coarse_space_builds(A, d, basis):
            from hypothesis import reject

            reject()
        options["variant"] = draw(st.sampled_from(variants))
        options["local_solver"] = draw(st.sampled_from(local_solvers))
        return A, d, options

    return _build()


def two_level_schwarz(kinds: str | tuple[str, ...] = TWO_LEVEL_KINDS,
                      coarse_bases: tuple[Any, ...] = TWO_LEVEL_COARSE_BASES,
                      variants: tuple[str, ...] = SYMMETRIC_VARIANTS,
                      local_solvers: tuple[str, ...] = ("dense", "superlu"),
                      max_n: int = 40, max_subdomains: int = 6):
    """Hypothesis strategy for :class:`ddops.TwoLevelSchwarz` preconditioners.

    :func:`two_level_configs` (same parameters), constructed.

    Returns
    -------
    hypothesis.strategies.SearchStrategy
        Of pairs ``(M, A)``: the preconditioner and its matrix
        (``M.decomposition`` is the decomposition).
    """
    from .precond.schwarz import TwoLevelSchwarz

    configs = two_level_configs(kinds, coarse_bases, variants, local_solvers, max_n,
                                max_subdomains)
    return configs.map(lambda c: (TwoLevelSchwarz(c[0], c[1], **c[2]), c[0]))
