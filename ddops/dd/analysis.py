"""The symbolic part of the GDSW-type coarse bases, kept for matrices with one pattern.

:class:`GDSWAnalysis` holds what a GDSW, RGDSW or AGDSW basis computes from the pattern of
``A`` and the partition alone (the interface components, the elimination orders of the
extension's interior problems), so that the basis of another matrix with the same pattern
(:meth:`ddops.TwoLevelSchwarz.update`) redoes only the numeric work.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..linalg.local_solvers import factorize_blocks
from .interface import InterfaceComponents, classify_interface

__all__ = ["GDSWAnalysis", "classify"]


class GDSWAnalysis:
    """The symbolic part of a GDSW-type coarse basis, kept between calls on one pattern.

    Two things depend on the pattern of ``A`` (and the partition) but not on its values:

    - the interface and its components (:meth:`components`, the algebraic rule of
      :func:`~ddops.dd.interface.classify_interface`), kept with a copy of the pattern and
      of the partition they were computed for, and recomputed for any other;
    - the elimination orders of the extension's interior problems:
      :func:`~ddops.dd.extension.harmonic_extension` with ``analysis=`` keeps, for every
      chunk of parts it factorises with PARDISO, the fill-reducing order of its analysis
      (:attr:`~ddops.linalg.local_solvers.PardisoBlocks.order`) with the chunk's pattern,
      and a later call on a matrix with the same pattern analyses each chunk with it, with
      no ordering step.  Not the analyses themselves: MKL held 280 MiB for those of the
      227,448-unknown 3D elasticity beam.  Measured on its chunks (one thread): a fresh
      factorisation 0.60 s, one with the kept order 0.34 s, a refactorisation of a kept
      analysis (before) 0.25 s.  A chunk whose pattern changed is ordered afresh; other
      solvers are factorised afresh every time.

    :meth:`ddops.TwoLevelSchwarz.update` keeps one for the GDSW-type coarse spaces
    (:func:`~ddops.dd.gdsw.gdsw_basis`, :func:`~ddops.dd.agdsw.agdsw_basis` and
    :func:`~ddops.coarse_basis` take it as ``analysis=``).

    Attributes
    ----------
    reused : int
        Chunks factorised with a kept order so far.
    """

    def __init__(self) -> None:
        self._chunks: dict = {}
        self._components = None  # (pattern, owner, interface, block size, components)
        self.reused = 0
        self._lock = threading.Lock()  # chunks are factorised on several threads

    def components(self, A: sp.csr_matrix, owner: np.ndarray, interface: Any,
                   block_size: int) -> InterfaceComponents:
        """:func:`~ddops.dd.interface.classify_interface` of the arguments, from the cache
        when ``A`` has the pattern (``indptr`` and ``indices``) and the other arguments
        the values of the call that filled it."""
        key = (A.indptr, A.indices, owner, interface, block_size)
        if self._components is not None and _same(self._components[:-1], key):
            return self._components[-1]
        comps = classify_interface(A, owner, interface, block_size)
        self._components = (*(np.array(k, copy=True) if isinstance(k, np.ndarray) else k
                              for k in key), comps)
        return comps

    def factor(self, key: tuple, K: sp.csr_matrix, offsets: np.ndarray, solver: str,
               **options: Any):
        """The factorisation of chunk ``key``: by its kept elimination order when ``K`` has
        the pattern it was computed for (PARDISO's symbolic and numeric phases, no
        ordering), else :func:`factorize_blocks` (whose order is kept when it is
        PARDISO's)."""
        kept = self._chunks.pop(key, None)
        if (kept is not None and solver == "pardiso" and np.array_equal(K.indptr, kept[0])
                and np.array_equal(K.indices, kept[1])):
            lu = factorize_blocks(K, offsets, solver, order=kept[2], **options)
            with self._lock:
                self.reused += 1
        else:
            lu = factorize_blocks(K, offsets, solver, **options)
        order = getattr(lu, "order", None)
        if order is not None:
            self._chunks[key] = (K.indptr.copy(), K.indices.copy(), order)
        return lu

    def retain(self, keys: Any) -> None:
        """Drop the kept orders of every chunk not in ``keys`` (the chunks of this call:
        their boundaries follow the threads, so a call under another thread limit has
        other chunks, and the old ones would otherwise stay)."""
        keys = set(keys)
        for key in [k for k in self._chunks if k not in keys]:
            del self._chunks[key]

    def done(self, lu: Any) -> None:
        """The chunk of ``lu`` is extended: release its factors and PARDISO's analysis
        with them (its order is kept: MKL's analyses of the 3D elasticity beam's interiors
        held 280 MiB)."""
        if hasattr(lu, "free"):
            lu.free()

    @property
    def nbytes(self) -> int:
        """Bytes held for the kept orders (with the patterns they are for) and the copy of
        the pattern of the components."""
        held = sum(int(a.nbytes) for kept in self._chunks.values() for a in kept)
        if self._components is not None:
            held += sum(k.nbytes for k in self._components[:-1] if isinstance(k, np.ndarray))
        return held

    def free(self) -> None:
        """Drop every kept order and the kept components."""
        self._chunks.clear()
        self._components = None


def _same(kept: tuple, key: tuple) -> bool:
    """Whether the arguments ``key`` equal the ``kept`` ones (arrays by value)."""
    for a, b in zip(kept, key, strict=True):
        if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
            if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
                    and np.array_equal(a, b)):
                return False
        elif sp.issparse(a) or sp.issparse(b) or a != b:
            return False
    return True


def classify(A: sp.csr_matrix, owner: np.ndarray, interface: Any, block_size: int,
             analysis: GDSWAnalysis | None = None) -> InterfaceComponents:
    """:func:`~ddops.dd.interface.classify_interface`, through ``analysis`` when given
    (:meth:`GDSWAnalysis.components`)."""
    if analysis is None:
        return classify_interface(A, owner, interface, block_size)
    return analysis.components(A, owner, interface, block_size)
