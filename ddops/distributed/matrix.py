"""The distributed product with a sparse matrix: owned rows times the owned + ghost vector."""

from __future__ import annotations

from typing import Any

import numpy as np

from .layout import DistributedLayout

__all__ = ["DistributedMatrix"]


class DistributedMatrix:
    """``y_owned = A[owned, :] x``, with one forward halo exchange per product.

    Parameters
    ----------
    layout : DistributedLayout
        The layout; build it with ``A=`` so that the columns of the rank's
        rows are among its ghosts.
    A : sparse matrix, optional
        Global matrix or this rank's owned rows (see
        :meth:`DistributedLayout.local_rows`); default the layout's.

    Attributes
    ----------
    local : scipy.sparse.csr_matrix
        ``num_owned x num_ext``: the rank's rows in extended numbering.
    """

    def __init__(self, layout: DistributedLayout, A: Any = None) -> None:
        if not isinstance(layout, DistributedLayout):
            raise TypeError(f"layout must be a DistributedLayout, got {type(layout).__name__}")
        self.layout = layout
        self.local = layout.local_rows(A).astype(np.float64)
        self.shape = (layout.num_dofs, layout.num_dofs)
        self._ext: dict[Any, np.ndarray] = {}

    def matvec(self, x: Any) -> np.ndarray:
        """Owned rows of ``A x`` from the owned entries of ``x`` (1-D or ``(num_owned, k)``)."""
        x = np.asarray(x, dtype=np.float64)
        key = x.shape[1:]
        if key not in self._ext:  # one preallocated extended vector per shape
            self._ext[key] = np.empty((self.layout.num_ext,) + key)
        ext = self.layout.update_ghosts(x, out=self._ext[key])
        return self.local @ ext

    __matmul__ = matvec

    def diagonal(self) -> np.ndarray:
        """The owned entries of ``diag(A)`` (no communication)."""
        return self.local[:, : self.layout.num_owned].diagonal()
