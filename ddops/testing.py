"""Test utilities for users of ddops: a dot test and hypothesis strategies.

``dottest`` needs only numpy.  The strategies need the ``hypothesis`` package
(installed with the ``test`` extra) and are imported lazily.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .backend import get_array_module, to_numpy

__all__ = ["dottest", "decompositions", "schwarz_operators"]


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

    from .decomposition import Decomposition1D

    @st.composite
    def _build(draw):
        kind = draw(st.sampled_from(kinds))
        n = draw(st.integers(4, max_n))
        N = draw(st.integers(1, max(1, min(12, n // 2))))
        overlap = draw(st.integers(0, min(4, n // N)))
        return Decomposition1D(n, N, overlap=overlap, kind=kind)

    return _build()


def schwarz_operators(max_n: int = 96, dtypes: tuple[Any, ...] = (np.float64,)):
    """Hypothesis strategy for random :class:`~ddops.SchwarzOperator` objects.

    Covers decompositions, local and coarse ranks (including ranks above the
    subdomain size), every named coarse basis and one-level operators.
    """
    from hypothesis import strategies as st

    from .operators import SchwarzOperator

    @st.composite
    def _build(draw):
        d = draw(decompositions(max_n))
        choices = ["pou", "grid_hats", None]
        if d.num_subdomains > 1:
            choices.append("interface_hats")
        basis = draw(st.sampled_from(choices))
        size = draw(st.integers(1, 6)) if basis == "grid_hats" else None
        n0 = {"pou": d.num_subdomains, "grid_hats": size, "interface_hats": d.num_subdomains - 1,
              None: 0}[basis]
        coarse_rank = None if basis is None else draw(st.one_of(st.none(), st.integers(1, n0)))
        return SchwarzOperator(
            d,
            local_rank=draw(st.integers(1, 6)),
            coarse_rank=coarse_rank,
            coarse_basis=basis,
            coarse_size=size,
            init=draw(st.sampled_from(["scaled", "naive"])),
            seed=draw(st.integers(0, 2**16)),
            dtype=draw(st.sampled_from(dtypes)),
        )

    return _build()
