"""Test utilities for users of ddops: a dot test and hypothesis strategies.

``dottest`` needs only numpy.  The strategies need the ``hypothesis`` package
(installed with the ``test`` extra) and are imported lazily.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .backend import get_array_module, to_numpy

__all__ = ["dottest", "decompositions", "general_subdomains", "general_decompositions",
           "any_decompositions", "coarse_matrices", "schwarz_operators"]


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


def decompositions(max_n: int = 96, kinds: tuple[str, ...] = ("element", "dof")):
    """Hypothesis strategy for valid :class:`~ddops.Decomposition1D` objects.

    Draws the kind, ``n``, the number of subdomains and an overlap no larger
    than the smallest non-overlapping block.
    """
    from hypothesis import strategies as st

    from .dd.decomposition import Decomposition1D

    @st.composite
    def _build(draw):
        kind = draw(st.sampled_from(kinds))
        n = draw(st.integers(4, max_n))
        N = draw(st.integers(1, max(1, min(12, n // 2))))
        overlap = draw(st.integers(0, min(4, n // N)))
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
