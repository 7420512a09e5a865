"""The symbolic part of the GDSW-type coarse bases, kept for matrices with one pattern.

:class:`GDSWAnalysis` holds what a GDSW, RGDSW or AGDSW basis computes from the pattern of
``A`` and the partition alone (the interface components, PARDISO's analyses or orderings
of the extension's interior problems), so that the basis of another matrix with the same pattern
(:meth:`ddops.TwoLevelSchwarz.update`) redoes only the numeric work.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..linalg.local_solvers import SingularBlockError, factorize_blocks
from .interface import InterfaceComponents, classify_interface

__all__ = ["EXTENSION_REUSE", "GDSWAnalysis", "classify"]


#: What :class:`GDSWAnalysis` keeps of each chunk of the extension's interior problems:
#: PARDISO's analysis (fill-reducing ordering and symbolic factorisation), or only the
#: ordering (PETSc's ``-pc_factor_reuse_ordering``).
EXTENSION_REUSE = ("analysis", "ordering")


class GDSWAnalysis:
    """The symbolic part of a GDSW-type coarse basis, kept between calls on one pattern.

    Two things depend on the pattern of ``A`` (and the partition) but not on its values:

    - the interface and its components (:meth:`components`, the algebraic rule of
      :func:`~ddops.dd.interface.classify_interface`), kept with a copy of the pattern and
      of the partition they were computed for, and recomputed for any other;
    - the symbolic work of the extension's interior problems:
      :func:`~ddops.dd.extension.harmonic_extension` with ``analysis=`` keeps something of
      every chunk of parts it factorises with PARDISO (the numeric factors are released
      once the chunk is extended), and a later call on a matrix with the same pattern
      reuses it.  A chunk whose pattern changed is analysed afresh; other solvers are
      factorised afresh every time.

    :meth:`ddops.TwoLevelSchwarz.update` keeps one for the GDSW-type coarse spaces
    (:func:`~ddops.dd.gdsw.gdsw_basis`, :func:`~ddops.dd.agdsw.agdsw_basis` and
    :func:`~ddops.coarse_basis` take it as ``analysis=``); the ``extension_reuse`` option
    of :class:`~ddops.TwoLevelSchwarz` chooses its ``reuse``.

    Parameters
    ----------
    reuse : {"analysis", "ordering"}
        What is kept of a chunk.  ``"analysis"``: PARDISO's analysis (ordering and
        symbolic factorisation), so that a later call runs PARDISO's numeric phase alone
        (:meth:`~ddops.linalg.local_solvers.PardisoBlocks.refactor`); the fastest update,
        but MKL holds the analyses (about 280 MiB for the 227,448-unknown 3D elasticity
        beam of ``docs/preconditioning.md``).  ``"ordering"``: only the chunk's
        elimination order (:attr:`~ddops.linalg.local_solvers.PardisoBlocks.order`) with
        the chunk's pattern it is for (integers: about 4 bytes per nonzero of the
        interiors); a later call runs PARDISO's symbolic and numeric phases with it, with
        no ordering step.  Measured on the beam's chunks (one thread): a fresh
        factorisation 0.60 s, with the kept ordering 0.34 s, a refactorisation of the kept
        analysis 0.25 s.

    Attributes
    ----------
    reuse : str
        ``reuse`` (read-only: what is kept is of that kind).
    reused : int
        Chunks factorised on a kept analysis or ordering so far.
    shared : int
        Chunks analysed afresh by the order of the overlapping subdomains' factorisation
        (:meth:`share_local_order`) so far.
    """

    def __init__(self, reuse: str = "analysis") -> None:
        if not isinstance(reuse, str):
            raise TypeError(f"reuse must be one of {EXTENSION_REUSE}, got "
                            f"{type(reuse).__name__} {reuse!r}")
        if reuse not in EXTENSION_REUSE:
            raise ValueError(f"reuse must be one of {EXTENSION_REUSE}, got {reuse!r}")
        self._reuse = reuse
        self._chunks: dict = {}
        self._components = None  # (pattern, owner, interface, block size, components)
        self._local_order = None  # (sorted subdomain-unknown keys, positions, num_dofs)
        self._subdomain_orders = None  # (positions, subdomain of every entry, offsets)
        self.reused = 0
        self.shared = 0
        self._lock = threading.Lock()  # chunks are factorised on several threads

    @property
    def reuse(self) -> str:
        """What is kept of a chunk, ``"analysis"`` or ``"ordering"`` (fixed at
        construction)."""
        return self._reuse

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

    def share_local_order(self, decomposition: Any, positions: np.ndarray | None) -> None:
        """Take the elimination positions of the overlapping subdomains' factorisation
        (:meth:`~ddops.precond.corrections.OverlappingCorrection.elimination_positions`,
        one per packed entry of ``decomposition``) for the interior problems that follow,
        or forget them (``positions`` None).

        The interior of part ``p`` lies in subdomain ``p``, and an elimination order of a
        graph restricted to a subset of its vertices fills no more than it fills there (a
        fill path within the subset is one in the whole graph): the subdomain's order
        serves its interior without an ordering step of its own (PARDISO's minimum degree
        or nested dissection, about half of the interiors' analysis).
        """
        if positions is None:
            self._local_order = self._subdomain_orders = None
            return
        n = int(decomposition.num_dofs)
        group = decomposition._subdomain_of_entry.astype(np.int64)
        keys = group * n + decomposition.indices
        if keys.size != positions.size:
            raise ValueError(f"positions: {positions.size} for {keys.size} packed entries")
        # (every subdomain's own rows in this order: computed when GenEO asks)
        self._subdomain_orders = (np.asarray(positions, dtype=np.int64), group,
                                  np.asarray(decomposition.offsets, dtype=np.int64))
        if keys.size and not (np.diff(keys) > 0).all():  # (unknowns unsorted in a subdomain)
            by = np.argsort(keys, kind="stable")
            keys, positions = keys[by], positions[by]
        self._local_order = (keys, np.asarray(positions, dtype=np.int64), n)

    def subdomain_orders(self) -> np.ndarray | None:
        """The shared order (:meth:`share_local_order`) of every subdomain's own rows: for
        each subdomain in turn, its rows (numbered within it, as its packed entries) in the
        order its factorisation eliminates them; None when none is shared.  GenEO's
        factorisations of ``N_i - tau B_i`` and ``N_i + sigma B_i`` on the subdomains (with
        finite-element Neumann matrices, or from ``A`` without oversampling: the graph of
        ``A_i``) take it instead of ordering."""
        if self._subdomain_orders is None:
            return None
        positions, group, offsets = self._subdomain_orders
        by = np.lexsort((positions, group))
        return by - offsets[group[by]]

    def local_order(self, rows: np.ndarray, parts: np.ndarray,
                    blocks: np.ndarray) -> np.ndarray | None:
        """An elimination order of a stack of blocks (``blocks``: the block of every row,
        nondecreasing) whose rows are the unknowns ``rows`` of the parts ``parts``: each
        block's rows in the order in which subdomain ``parts`` eliminates them
        (:meth:`share_local_order`); None when none is shared, or when a row does not lie
        in the subdomain of its part (a decomposition whose subdomain ``p`` is not grown
        from part ``p``)."""
        if self._local_order is None or not rows.size:
            return None
        keys, positions, n = self._local_order
        wanted = np.asarray(parts, dtype=np.int64) * n + rows
        at = np.minimum(np.searchsorted(keys, wanted), keys.size - 1)
        if not np.array_equal(keys[at], wanted):
            return None
        return np.lexsort((positions[at], blocks))

    def factor(self, key: tuple, K: sp.csr_matrix, offsets: np.ndarray, solver: str,
               order: np.ndarray | None = None, **options: Any):
        """The factorisation of chunk ``key``: from what is kept of it when ``K`` has its
        pattern (a refactorisation of its analysis, or an analysis with its ordering),
        else :func:`factorize_blocks` (kept when it is PARDISO's), by ``order`` where
        given (:meth:`local_order`)."""
        kept = self._chunks.pop(key, None)
        if self.reuse == "ordering":
            return self._factor_ordered(key, kept, K, offsets, solver, order, options)
        if kept is not None and solver == "pardiso":
            try:
                lu = kept.refactor(K)
            except ValueError as exc:  # another pattern (a singular block propagates)
                if isinstance(exc, SingularBlockError):
                    raise
                kept.free()
            else:
                self._count()
                self._chunks[key] = lu
                return lu
        elif kept is not None:
            kept.free()
        lu = self._fresh(K, offsets, solver, order, options)
        if hasattr(lu, "release_factors"):
            self._chunks[key] = lu
        return lu

    def _fresh(self, K: sp.csr_matrix, offsets: np.ndarray, solver: str,
               order: np.ndarray | None, options: dict):
        """:func:`factorize_blocks`, PARDISO's by ``order`` where given (counted in
        :attr:`shared`)."""
        if solver != "pardiso" or order is None:
            return factorize_blocks(K, offsets, solver, **options)
        with self._lock:
            self.shared += 1
        return factorize_blocks(K, offsets, solver, order=order, **options)

    def _factor_ordered(self, key: tuple, kept: Any, K: sp.csr_matrix, offsets: np.ndarray,
                        solver: str, order: np.ndarray | None, options: dict):
        """:meth:`factor` with ``reuse="ordering"``: ``kept`` is (indptr, indices, order)."""
        if (kept is not None and solver == "pardiso" and np.array_equal(K.indptr, kept[0])
                and np.array_equal(K.indices, kept[1])):
            lu = factorize_blocks(K, offsets, solver, order=kept[2], **options)
            self._count()
        else:
            lu = self._fresh(K, offsets, solver, order, options)
        order = getattr(lu, "order", None)
        if order is not None:
            self._chunks[key] = (K.indptr.copy(), K.indices.copy(), order)
        return lu

    def _count(self) -> None:
        with self._lock:
            self.reused += 1

    def retain(self, keys: Any) -> None:
        """Drop what is kept of every chunk not in ``keys`` (the chunks of this call:
        their boundaries follow the threads, so a call under another thread limit has
        other chunks, and the old ones would otherwise stay)."""
        keys = set(keys)
        for key in [k for k in self._chunks if k not in keys]:
            _release(self._chunks.pop(key))

    def done(self, lu: Any) -> None:
        """The chunk of ``lu`` is extended: release its numeric factors (and with
        ``reuse="ordering"`` PARDISO's analysis with them: its ordering is kept)."""
        if self.reuse == "ordering" and hasattr(lu, "free"):
            lu.free()
        elif hasattr(lu, "release_factors"):
            lu.release_factors()

    @property
    def nbytes(self) -> int:
        """Bytes held for the kept analyses (MKL's permanent memory and the matrices) or
        orderings (with the patterns they are for) and the copy of the pattern."""
        held = sum(_held_bytes(kept) for kept in self._chunks.values())
        if self._components is not None:
            held += sum(k.nbytes for k in self._components[:-1] if isinstance(k, np.ndarray))
        return held

    def free(self) -> None:
        """Drop everything kept: the analyses (or orderings) and the components."""
        for kept in self._chunks.values():
            _release(kept)
        self._chunks.clear()
        self._components = None
        self._local_order = self._subdomain_orders = None


def _release(kept: Any) -> None:
    """Free a kept analysis (a kept ordering is plain arrays)."""
    if hasattr(kept, "free"):
        kept.free()


def _held_bytes(kept: Any) -> int:
    """Bytes of a kept analysis (:attr:`analysis_bytes`) or of a kept (indptr, indices,
    order)."""
    if isinstance(kept, tuple):
        return sum(int(a.nbytes) for a in kept)
    return int(kept.analysis_bytes)


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
