"""Distributed application of a :class:`~ddops.operators.SchwarzOperator` (forward and adjoint).

:class:`DistributedSchwarzOperator` applies

.. math::

    M = \\Phi Q_0 K_0^T \\Phi^T + \\sum_i R_i^T D_i^{1/2} Q_i K_i^T D_i^{1/2} R_i

(or its adjoint) to a distributed block of vectors in the convention of
:class:`~ddops.distributed.layout.DistributedLayout` (every rank holds the
rows of its owned unknowns, in increasing global order).  One application:

1. one halo exchange (:meth:`~ddops.distributed.layout.DistributedLayout.update_ghosts`)
   gives every rank its owned + ghost rows;
2. the rank's subdomains are applied at once, as in the serial operator: one
   row gather into the padded ``(N_r, p, B)`` stack, two batched GEMMs with
   the weighted factors, one sparse scatter-add into the extended numbering;
3. one reverse exchange (:meth:`~ddops.distributed.layout.DistributedLayout.reduce_ghosts`)
   sums the contributions to ghosts into their owners;
4. the coarse term: every rank forms ``Phi_r^T X_r`` from its owned rows of
   ``Phi`` (``n0 x B``), one ``Allreduce`` sums them, and every rank applies
   the small ``Q0 K0^T`` redundantly and adds its owned rows of ``Phi`` times
   the result (no communication: ``Phi`` rows are local).

The parameters are the serial operator's (views into its ``theta``, no
copy), so an operator trained anywhere, or being trained, is applied as it is.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from .._validation import check_choice
from ..operators import SchwarzOperator
from ..operators.schwarz import PARTITIONS
from .layout import DistributedLayout

__all__ = ["DistributedSchwarzOperator"]


class DistributedSchwarzOperator:
    """A :class:`~ddops.operators.SchwarzOperator` applied across the ranks of a layout.

    Parameters
    ----------
    op : SchwarzOperator
        The operator, identical on every rank (numpy backend, no ``base``).
    layout : DistributedLayout
        The layout of ``op``'s decomposition (built from the same
        decomposition on every rank).

    Attributes
    ----------
    shape : tuple
        ``(num_owned, num_owned)`` of this rank: the rows of the blocks that
        :meth:`matmat` takes and returns.
    local_subdomains : numpy.ndarray
        The global subdomain indices applied on this rank.

    Raises
    ------
    TypeError
        ``op`` is not a SchwarzOperator or ``layout`` not a DistributedLayout.
    ValueError
        A ``base`` term, a non-numpy backend, or a layout of another
        decomposition.
    """

    PARTS = SchwarzOperator.PARTS

    def __init__(self, op: SchwarzOperator, layout: DistributedLayout) -> None:
        if not isinstance(op, SchwarzOperator):
            raise TypeError(f"op must be a SchwarzOperator, got {type(op).__name__}")
        if not isinstance(layout, DistributedLayout):
            raise TypeError(f"layout must be a DistributedLayout, got {type(layout).__name__}")
        if op.xp is not np:
            raise ValueError("op must be on the numpy backend for the distributed application")
        if op.base is not None:
            raise ValueError("op has a fixed base term, which the distributed application does "
                             "not support (apply the base matrix with a DistributedMatrix)")
        d, ld = op.decomposition, layout.decomposition
        if ld is not d and (ld.num_dofs != d.num_dofs or not np.array_equal(ld.sizes, d.sizes)
                            or not np.array_equal(ld.indices, d.indices)):
            raise ValueError("layout must be built from the operator's decomposition")
        self.op, self.layout = op, layout
        self.dtype = op.dtype
        n_own = layout.num_owned
        self.shape = (n_own, n_own)
        S = np.asarray(layout.local_subdomains, dtype=np.int64)
        self.local_subdomains = S
        # this rank's subdomains padded to their own largest size p_r: the packed entries
        # (subdomain-major, the decomposition's order) of the local subdomains ...
        offsets, sizes = np.asarray(d.offsets), np.asarray(d.sizes)
        Nr = int(S.size)
        p = int(sizes[S].max()) if Nr else 1
        counts = sizes[S]
        entries = np.repeat(offsets[S] - np.concatenate([[0], np.cumsum(counts)[:-1]]),
                            counts) + np.arange(int(counts.sum()))
        local = np.repeat(np.arange(Nr), counts)
        padded = local * p + (entries - offsets[S][local])
        # ... their rows in the operator's flat local storage (params["Q"] as rows x r) ...
        self._factor_rows = np.zeros(Nr * p, dtype=np.intp)
        self._factor_rows[padded] = np.asarray(op.entry_rows)[entries]
        # ... their extended positions (padding reads row 0, cancelled by its zero weight) ...
        self._gather = np.zeros(Nr * p, dtype=np.intp)
        self._gather[padded] = layout.ext_positions(np.asarray(d.indices)[entries])
        # ... and the partition-of-unity weights with the global multiplicity
        self._w = {}
        for side, weighting in zip(("in", "out"), PARTITIONS[op.partition], strict=True):
            w = np.zeros(Nr * p, dtype=op.dtype)
            w[padded] = d.entry_weights(weighting)[entries]
            self._w[side] = w.reshape(Nr, p, 1)
        self._scatter = sp.csr_matrix((np.ones(padded.size, dtype=op.dtype),
                                       (self._gather[padded], padded)),
                                      shape=(layout.num_ext, Nr * p))
        self._p = p
        phi = op.coarse_matrix
        self._phi = None if phi is None or op.coarse_rank == 0 else \
            sp.csr_matrix(phi[layout.owned], dtype=op.dtype)
        self._phi_t = None if self._phi is None else self._phi.T.tocsr()

    def __repr__(self) -> str:
        return (f"DistributedSchwarzOperator(rank={self.layout.rank}/{self.layout.size}, "
                f"owned={self.layout.num_owned}, subdomains={self.local_subdomains.size}, "
                f"coarse_dim={self.op.coarse_dim})")

    def _local_factor(self, factor: Any, weight: np.ndarray) -> np.ndarray:
        """``W factor`` of this rank's subdomains, ``(N_r, p_r, r)`` (a gather of its rows)."""
        r = self.op.local_rank
        rows = np.take(factor.reshape(-1, r), self._factor_rows, axis=0)
        return np.multiply(rows.reshape(weight.shape[0], self._p, r), weight, out=rows.reshape(
            weight.shape[0], self._p, r))

    # -- products -------------------------------------------------------------------------
    def matmat(self, X: Any, part: str = "full") -> np.ndarray:
        """``M X`` for this rank's owned rows ``X`` (``num_owned x B``); collective."""
        return self.apply(X, adjoint=False, part=part)

    def rmatmat(self, X: Any, part: str = "full") -> np.ndarray:
        """``M^T X`` for this rank's owned rows ``X``; collective."""
        return self.apply(X, adjoint=True, part=part)

    def matvec(self, x: Any) -> np.ndarray:
        """``M x`` for this rank's owned entries ``x`` (``num_owned``); collective."""
        return self.apply(np.asarray(x).reshape(-1, 1), adjoint=False).reshape(-1)

    def rmatvec(self, x: Any) -> np.ndarray:
        """``M^T x`` for this rank's owned entries ``x``; collective."""
        return self.apply(np.asarray(x).reshape(-1, 1), adjoint=True).reshape(-1)

    def apply(self, X: Any, adjoint: bool = False, part: str = "full") -> np.ndarray:
        """``M X`` or ``M^T X`` (or one part) on distributed blocks; collective.

        Parameters
        ----------
        X : array, shape (num_owned, B) or (num_owned,)
            This rank's owned rows.
        adjoint : bool
            Apply ``M^T``.
        part : {"full", "local", "coarse"}
            The whole operator or one of its two terms.  Every rank must pass
            the same value (the halo exchanges and the reduction are skipped
            together).

        Returns
        -------
        numpy.ndarray
            This rank's owned rows of the result, shape of ``X``.
        """
        check_choice("part", part, self.PARTS)
        X = np.asarray(X)
        if X.ndim not in (1, 2) or X.shape[0] != self.shape[0]:
            raise ValueError(f"X must have {self.shape[0]} rows (this rank's owned unknowns), "
                             f"got shape {X.shape}")
        if X.dtype.kind not in "fiu":
            raise TypeError(f"X must be a real array, got dtype {X.dtype}")
        vector = X.ndim == 1
        X2 = np.ascontiguousarray(X.reshape(X.shape[0], -1), dtype=self.dtype)
        B = X2.shape[1]
        op = self.op
        f = op._factors()
        # M = S^T W_out Q K^T W_in S (+ coarse); the adjoint swaps the roles
        (A, wA), (Bf, wB) = (((f["K"], self._w["in"]), (f["Q"], self._w["out"])) if adjoint
                             else ((f["Q"], self._w["out"]), (f["K"], self._w["in"])))
        out = np.zeros_like(X2)
        if part != "coarse":
            ext = self.layout.update_ghosts(X2)                       # halo exchange in
            Xl = ext[self._gather].reshape(-1, self._p, B)             # (N_r, p, B)
            left = self._local_factor(Bf, wB)                         # (N_r, p, r)
            T = np.matmul(left.transpose(0, 2, 1), Xl)                 # (N_r, r, B)
            Y = np.matmul(self._local_factor(A, wA), T)                # (N_r, p, B)
            y_ext = self._scatter @ Y.reshape(-1, B)                   # sum of R_i^T y_i here
            out = self.layout.reduce_ghosts(y_ext)                     # reverse exchange out
        if part != "local" and self._phi is not None:
            A0, B0 = (f["K0"], f["Q0"]) if adjoint else (f["Q0"], f["K0"])
            C = self.layout.allreduce(self._phi_t @ X2)                # Phi^T X, n0 x B
            out += self._phi @ (A0 @ (B0.T @ C))                       # redundant coarse apply
        return out.reshape(-1) if vector else out
