"""The paper's synthetic right-hand sides: mixed Fourier modes and exact solutions.

This reproduces ``sample_mixed_fourier_rhs`` (listing in section 5.3 of the first
version of the paper, appendix of the second): on the grid points ``x`` of the
unknowns, the family uses the first ``modes`` sine and cosine modes
``sin(pi m x), cos(pi m x)``, ``m = 1..modes`` (16 in the paper).

* *Pure modes*: one normalised basis vector, chosen uniformly among the
  ``2 * modes``, times a random sign (no decay).
* *Random combinations*: ``sum_m a_m sin(pi m x) + b_m cos(pi m x)`` with
  ``a_m, b_m ~ N(0, 1) * m^-1.5`` applied to the **raw, unnormalised** sine and
  cosine vectors (as in the listing). On the normalised basis this is the
  coefficient ``N(0, 1) * m^-1.5 * (||raw mode|| + 1e-12)``; the raw norms of
  sine and cosine differ slightly (e.g. ``sqrt(n/2)`` and ``sqrt(n/2 - 1)`` for
  ``kind="element"``), and that difference is kept.
* A mixed batch has ``batch_size // 2`` pure modes followed by
  ``batch_size - batch_size // 2`` combinations, then the columns are shuffled.
* Every right-hand side is normalised, ``f / (||f|| + 1e-12)``, like the basis
  (the listing's ``normalize_rows`` with ``eps = 1e-12``).

The arrays follow the package's column convention: a batch is a
``num_dofs x B`` array, one right-hand side per column (the listing uses rows).

Speed: the basis ``Phi`` (``num_dofs x 2 modes``), its exact solutions
``Psi = A^{-1} Phi`` and the triangular factor ``R`` of ``Phi = QR`` are computed
once. A sample draws the small coefficient matrix ``C`` (``2 modes x B``) on the
host with the numpy ``Generator``, obtains the column norms of ``F = Phi C`` as
``||R C||`` (no pass over the large arrays), scales ``C`` by them, and forms
``F = Phi C`` and ``U = Psi C`` with one GEMM each (into caller-provided
buffers with ``out=``). With ``backend="cupy"`` only the two GEMMs run on the
device, so CPU and GPU get identical coefficients for the same generator state.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import check_choice, check_dtype, check_int
from ..backend import check_backend, get_array_module
from ..problems.poisson1d import KINDS, PoissonSolver, grid_points, num_dofs

__all__ = ["RHS_MODES", "DECAY", "NORMALIZE_EPS", "fourier_modes", "FourierRHS"]

#: Kinds of right-hand-side batches: the paper's mixture, or only one of its halves.
RHS_MODES = ("mixed_fourier", "pure_modes", "random_combinations")

#: Decay exponent of the random combinations: mode ``m`` is scaled by ``m^-DECAY``.
DECAY = 1.5

#: The ``eps`` of the listing's ``normalize_rows``: ``v / (||v|| + eps)``.
NORMALIZE_EPS = 1e-12


def _check_n_kind(n: Any, kind: Any) -> int:
    check_choice("kind", kind, KINDS)
    n = check_int("n", n)
    low = 2 if kind == "element" else 1
    if n < low:
        raise ValueError(f"n must be >= {low} for kind={kind!r} (at least one unknown), got {n}")
    return n


def _raw_modes(n: int, kind: str, modes: int) -> np.ndarray:
    """Unnormalised ``sin(pi m x), cos(pi m x)`` columns, interleaved, ``m = 1..modes``."""
    x = grid_points(n, kind)
    m = np.arange(1, modes + 1, dtype=np.float64)
    raw = np.empty((x.shape[0], 2 * modes))
    # same expression as the listing: sin(pi * m * x) with (pi * m) evaluated first
    arg = (np.pi * m)[None, :] * x[:, None]
    raw[:, 0::2] = np.sin(arg)
    raw[:, 1::2] = np.cos(arg)
    return raw


def _modes_and_norms(n: Any, kind: Any, modes: Any) -> tuple[np.ndarray, np.ndarray]:
    n = _check_n_kind(n, kind)
    modes = check_int("modes", modes, minimum=1)
    dofs = num_dofs(n, kind)
    if modes > dofs:
        raise ValueError(
            f"modes must be <= the number of unknowns ({dofs} for n={n}, kind={kind!r}), "
            f"got {modes}; higher modes alias or vanish on the grid"
        )
    raw = _raw_modes(n, kind, modes)
    norms = np.sqrt(np.einsum("ij,ij->j", raw, raw))
    # a mode that vanishes on the grid (e.g. cos(pi x) at the single point x = 1/2)
    tiny = norms <= 1e-8 * np.sqrt(dofs)
    if np.any(tiny):
        k = int(np.argmax(tiny))
        name = ("sin", "cos")[k % 2]
        raise ValueError(
            f"mode {name}(pi*{k // 2 + 1}*x) vanishes on the grid for n={n}, kind={kind!r}; "
            f"use a larger n or fewer modes"
        )
    return raw / (norms + NORMALIZE_EPS), norms


def fourier_modes(n: int, kind: str = "element", modes: int = 16) -> np.ndarray:
    """The normalised Fourier basis of the paper's right-hand sides.

    Parameters
    ----------
    n : int
        Problem size (see :func:`ddops.problems.poisson1d.num_dofs`).
    kind : {"element", "dof"}
        Discretisation convention.
    modes : int, default 16
        Number of sine and of cosine modes, ``1 <= modes <= num_dofs``.

    Returns
    -------
    numpy.ndarray
        ``num_dofs x 2*modes`` float64 array with columns ``sin(pi x)``,
        ``cos(pi x)``, ``sin(2 pi x)``, ``cos(2 pi x)``, ... on
        :func:`ddops.problems.poisson1d.grid_points`, each divided by its 2-norm plus
        :data:`NORMALIZE_EPS` (the listing's ``normalize_rows``).

    Raises
    ------
    ValueError
        For an invalid ``n``/``kind``/``modes``, or when a mode vanishes on the grid.
    TypeError
        For a non-integer ``n`` or ``modes``.
    """
    return _modes_and_norms(n, kind, modes)[0]


class FourierRHS:
    """Sampler of normalised right-hand sides and their exact discrete solutions.

    Parameters
    ----------
    n : int
        Problem size (see :func:`ddops.problems.poisson1d.num_dofs`).
    kind : {"element", "dof"}, default "element"
        Discretisation convention.
    mode : {"mixed_fourier", "pure_modes", "random_combinations"}, default "mixed_fourier"
        The paper's mixture (half pure modes, half combinations, shuffled), or
        one of the two halves alone (then no shuffle is drawn: the columns are
        already exchangeable).
    modes : int, default 16
        Number of sine and of cosine modes.
    dtype : float32 or float64, default float64
        Precision of the basis, the GEMMs and the returned arrays.
    backend : {"numpy", "cupy"}, default "numpy"
        Where the returned arrays live and the GEMMs run.

    Attributes
    ----------
    num_dofs : int
        Number of unknowns (rows of a batch).
    basis : array
        ``Phi``, the normalised modes (:func:`fourier_modes`), on ``backend``.
    solved_basis : array
        ``Psi = A^{-1} Phi``, on ``backend``.
    combination_scale : numpy.ndarray
        Per-basis-vector standard deviation of the combination coefficients,
        ``m^-1.5 * (||raw mode|| + 1e-12)``, ordered like the basis columns.

    Examples
    --------
    >>> rhs = FourierRHS(256)
    >>> F, U = rhs.sample(256, np.random.default_rng(4711))
    >>> F.shape, U.shape
    ((255, 256), (255, 256))
    """

    def __init__(
        self,
        n: int,
        kind: str = "element",
        mode: str = "mixed_fourier",
        modes: int = 16,
        dtype: Any = np.float64,
        backend: str = "numpy",
    ) -> None:
        check_choice("mode", mode, RHS_MODES)
        dt = check_dtype(dtype)
        if not isinstance(backend, str):
            raise TypeError(f"backend must be a string, got {type(backend).__name__}")
        check_backend(backend)
        phi, raw_norms = _modes_and_norms(n, kind, modes)
        self.n = int(n)
        self.kind = kind
        self.mode = mode
        self.modes = int(modes)
        self.dtype = dt
        self.backend = backend
        self.num_dofs = phi.shape[0]
        psi = PoissonSolver(self.n, kind).solve(phi)
        m = np.repeat(np.arange(1, self.modes + 1, dtype=np.float64), 2)
        self.combination_scale = m**-DECAY * (raw_norms + NORMALIZE_EPS)
        # ||Phi c|| = ||R c||: column norms of a batch from a 2 modes x 2 modes factor
        self._r = np.linalg.qr(phi, mode="r")
        self._basis_norms = np.sqrt(np.einsum("ij,ij->j", phi, phi))
        xp = get_array_module(backend=backend)
        self._xp = xp
        self.basis = xp.asarray(np.ascontiguousarray(phi, dtype=dt))
        self.solved_basis = xp.asarray(np.ascontiguousarray(psi, dtype=dt))

    def __repr__(self) -> str:
        return (
            f"FourierRHS(n={self.n}, kind={self.kind!r}, mode={self.mode!r}, "
            f"modes={self.modes}, dtype={self.dtype.name}, backend={self.backend!r})"
        )

    @staticmethod
    def _check_sample_args(batch_size: Any, rng: Any) -> int:
        batch_size = check_int("batch_size", batch_size, minimum=1)
        if not isinstance(rng, np.random.Generator):
            raise TypeError(
                f"rng must be a numpy.random.Generator (np.random.default_rng(seed)), "
                f"got {type(rng).__name__}"
            )
        return batch_size

    def split(self, batch_size: int) -> tuple[int, int]:
        """Numbers ``(pure, combinations)`` of columns in a batch (listing: ``B // 2`` pure)."""
        batch_size = check_int("batch_size", batch_size, minimum=1)
        if self.mode == "pure_modes":
            return batch_size, 0
        if self.mode == "random_combinations":
            return 0, batch_size
        half = batch_size // 2
        return half, batch_size - half

    def sample_coefficients(self, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        """Draw the normalised coefficients of one batch on the basis.

        :meth:`sample` returns ``(basis @ C, solved_basis @ C)`` for this ``C``.
        Random draws, in the listing's order: the ``B1`` basis indices of the
        pure columns (``rng.integers(0, 2 modes, B1)``), their signs
        (``2 rng.integers(0, 2, B1) - 1``), the standard normals of the ``B2``
        combinations as a ``modes x 2 x B2`` array (for each ``m``: the sine
        coefficients of all columns, then the cosine ones), and for
        ``mode="mixed_fourier"`` the column permutation
        ``perm = rng.permutation(B)`` (column ``i`` of the batch is unshuffled
        column ``perm[i]``, like the listing's ``f[perm]``).

        Parameters
        ----------
        batch_size : int
            Number of right-hand sides ``B >= 1``.
        rng : numpy.random.Generator
            Source of randomness.

        Returns
        -------
        numpy.ndarray
            ``2 modes x batch_size`` float64 matrix ``C``: pure columns hold one
            nonzero ``+-1 / (||basis[:, k]|| + 1e-12)``, combination columns
            ``z * combination_scale``, ``z ~ N(0, 1)``; every column is then
            divided by ``||basis @ c|| + 1e-12``.

        Raises
        ------
        TypeError
            If ``batch_size`` is not an integer or ``rng`` not a numpy Generator.
        ValueError
            If ``batch_size < 1``.
        """
        batch_size = self._check_sample_args(batch_size, rng)
        pure, comb = self.split(batch_size)
        k = 2 * self.modes
        C = np.zeros((k, batch_size))
        idx = rng.integers(0, k, size=pure)
        signs = 2.0 * rng.integers(0, 2, size=pure) - 1.0
        # ||+-basis[:, k]|| is the (float) norm of that column: normalise like the listing
        C[idx, np.arange(pure)] = signs / (self._basis_norms[idx] + NORMALIZE_EPS)
        z = rng.standard_normal((self.modes, 2, comb)).reshape(k, comb)
        block = C[:, pure:]
        np.multiply(z, self.combination_scale[:, None], out=block)
        # column norms of basis @ block, as ||R block|| (basis = QR): O(modes^2 B) work
        rc = self._r @ block
        block /= np.sqrt(np.einsum("ij,ij->j", rc, rc)) + NORMALIZE_EPS
        if self.mode == "mixed_fourier":
            C = C[:, rng.permutation(batch_size)]
        return C

    def _check_out(self, out: Any, batch_size: int) -> tuple[Any, Any]:
        try:
            F, U = out
        except (TypeError, ValueError) as exc:
            raise TypeError("out must be a pair (F, U) of arrays") from exc
        xp = self._xp
        shape = (self.num_dofs, batch_size)
        for name, X in (("out[0]", F), ("out[1]", U)):
            if not isinstance(X, xp.ndarray):
                raise TypeError(f"{name} must be a {xp.__name__} array, got {type(X).__name__}")
            if X.shape != shape or X.dtype != self.dtype:
                raise ValueError(
                    f"{name} must have shape {shape} and dtype {self.dtype}, "
                    f"got {X.shape} and {X.dtype}"
                )
            if not X.flags.c_contiguous:
                raise ValueError(f"{name} must be C-contiguous")
        if F is U or (hasattr(xp, "may_share_memory") and xp.may_share_memory(F, U)):
            raise ValueError("out[0] and out[1] must not share memory")
        return F, U

    def sample(
        self, batch_size: int, rng: np.random.Generator, out: tuple[Any, Any] | None = None
    ) -> tuple[Any, Any]:
        """Draw one batch of normalised right-hand sides and their exact solutions.

        Parameters
        ----------
        batch_size : int
            Number of right-hand sides ``B >= 1``.
        rng : numpy.random.Generator
            Source of randomness (consumed as in :meth:`sample_coefficients`).
        out : (array, array), optional
            Preallocated C-contiguous ``num_dofs x B`` arrays of ``dtype`` on
            ``backend`` that receive ``F`` and ``U`` (and are returned). Reusing
            buffers in a training loop avoids allocating (and page-faulting)
            two fresh arrays per step, which costs as much as the GEMMs for
            ``n = 256``.

        Returns
        -------
        F : array
            ``num_dofs x B`` C-contiguous right-hand sides, each column of unit
            2-norm (up to the listing's ``1e-12``), on ``backend`` with ``dtype``.
        U : array
            ``num_dofs x B`` exact solutions, ``A U = F``.

        Raises
        ------
        TypeError
            If ``batch_size`` is not an integer, ``rng`` not a numpy Generator,
            or ``out`` not a pair of arrays of the backend.
        ValueError
            If ``batch_size < 1``, or ``out`` has the wrong shape, dtype or layout.
        """
        batch_size = self._check_sample_args(batch_size, rng)
        if out is not None:  # validated before any random number is drawn
            out = self._check_out(out, batch_size)
        return self._synthesize(self.sample_coefficients(batch_size, rng), out)

    def synthesize(self, C: Any, out: tuple[Any, Any] | None = None) -> tuple[Any, Any]:
        """The batch ``(basis @ C, solved_basis @ C)`` of given coefficients.

        :meth:`sample` is ``synthesize(sample_coefficients(B, rng))``; calling
        the two apart lets a trainer draw the coefficients of a whole batch
        once (one random stream) and form column blocks of it in parallel.

        Parameters
        ----------
        C : numpy.ndarray
            ``2 modes x B`` real coefficients (any layout, e.g. a column slice
            of :meth:`sample_coefficients`).
        out : (array, array), optional
            As in :meth:`sample`.

        Returns
        -------
        F, U : array
            ``num_dofs x B`` right-hand sides and exact solutions on ``backend``.

        Raises
        ------
        TypeError
            If ``C`` is not a real numpy array or ``out`` not a pair of arrays.
        ValueError
            If ``C`` does not have ``2 modes`` rows, or ``out`` has the wrong
            shape, dtype or layout.
        """
        if not isinstance(C, np.ndarray) or C.dtype.kind != "f":
            raise TypeError(f"C must be a real floating-point numpy array, got "
                            f"{type(C).__name__} of dtype {getattr(C, 'dtype', None)}")
        if C.ndim != 2 or C.shape[0] != 2 * self.modes or C.shape[1] < 1:
            raise ValueError(f"C must have shape ({2 * self.modes}, B) with B >= 1, got {C.shape}")
        if out is not None:
            out = self._check_out(out, C.shape[1])
        return self._synthesize(C, out)

    def _synthesize(self, C: np.ndarray, out: tuple[Any, Any] | None) -> tuple[Any, Any]:
        C = C.astype(self.dtype, copy=False)
        xp = self._xp
        if xp is not np:
            C = xp.asarray(C)  # one host-to-device transfer of a 2 modes x B matrix
        if out is None:
            return xp.matmul(self.basis, C), xp.matmul(self.solved_basis, C)
        xp.matmul(self.basis, C, out=out[0])
        xp.matmul(self.solved_basis, C, out=out[1])
        return out
