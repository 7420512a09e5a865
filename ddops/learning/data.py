"""Synthetic right-hand sides with their exact solutions: the paper's mixed Fourier
data and its analogues for grid problems and for any SPD matrix.

Every sampler here draws from one family, defined by a basis ``Phi`` (``num_dofs x
k``) of right-hand sides and the exact solutions ``Psi = A^{-1} Phi``:

* *Pure modes*: one basis vector, chosen uniformly among the ``k``, times a
  random sign, divided by its norm plus :data:`NORMALIZE_EPS`.
* *Random combinations*: ``Phi c`` with independent ``c_j ~ N(0, 1) s_j`` for a
  decaying per-vector scale ``s`` (:attr:`BasisRHS.combination_scale`), then
  normalised, ``f / (||f|| + 1e-12)``.
* A mixed batch has ``batch_size // 2`` pure modes followed by
  ``batch_size - batch_size // 2`` combinations, then the columns are shuffled.

The arrays follow the package's column convention: a batch is a
``num_dofs x B`` array, one right-hand side per column.

:class:`FourierRHS` is the paper's family (``sample_mixed_fourier_rhs``, listing
in section 5.3 of the first version of the paper, appendix of the second): on
the grid points ``x`` of the 1D unknowns, the first ``modes`` sine and cosine
modes ``sin(pi m x), cos(pi m x)``, ``m = 1..modes`` (16 in the paper); the
combination coefficients are ``N(0, 1) * m^-1.5`` applied to the **raw,
unnormalised** sine and cosine vectors (as in the listing), which on the
normalised basis is the scale ``m^-1.5 * (||raw mode|| + 1e-12)``; the raw norms
of sine and cosine differ slightly (e.g. ``sqrt(n/2)`` and ``sqrt(n/2 - 1)`` for
``kind="element"``), and that difference is kept.

:class:`GridFourierRHS` is its tensor-product analogue on the grids of
:func:`ddops.problems.poisson_2d`, :func:`~ddops.problems.poisson_3d` and the
diffusion problems, and :class:`MatrixRHS` serves any SPD matrix with low
eigenvectors or smoothed random vectors.  :func:`make_rhs_sampler` picks one.

Speed: the basis ``Phi``, its exact solutions ``Psi`` (one sparse factorisation
applied to the whole block, once) and the triangular factor ``R`` of
``Phi = QR`` are computed once.  A sample draws the small coefficient matrix
``C`` (``k x B``) on the host with the numpy ``Generator``, obtains the column
norms of ``F = Phi C`` as ``||R C||`` (no pass over the large arrays), scales
``C`` by them, and forms ``F = Phi C`` and ``U = Psi C`` with one GEMM each
(into caller-provided buffers with ``out=``).  With ``backend="cupy"`` only the
two GEMMs run on the device, so CPU and GPU get identical coefficients for the
same generator state.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from .._validation import check_choice, check_dtype, check_finite, check_int, check_memory
from ..backend import check_backend, get_array_module
from ..problems.poisson1d import KINDS, PoissonSolver, grid_points, num_dofs

__all__ = ["RHS_MODES", "DECAY", "NORMALIZE_EPS", "MATRIX_BASES", "SAMPLER_KINDS",
           "fourier_modes", "grid_fourier_modes", "BasisRHS", "FourierRHS", "GridFourierRHS",
           "MatrixRHS", "make_rhs_sampler", "exact_solutions"]

#: Kinds of right-hand-side batches: the paper's mixture, or only one of its halves.
RHS_MODES = ("mixed_fourier", "pure_modes", "random_combinations")

#: Decay exponent of the 1D random combinations: mode ``m`` is scaled by ``m^-DECAY``.
DECAY = 1.5

#: The ``eps`` of the listing's ``normalize_rows``: ``v / (||v|| + eps)``.
NORMALIZE_EPS = 1e-12

#: Bases of :class:`MatrixRHS`: low eigenvectors, or smoothed random vectors.
MATRIX_BASES = ("eigen", "smooth")

#: What :func:`make_rhs_sampler` can build (``"auto"``: Fourier on a grid, else eigen).
SAMPLER_KINDS = ("auto", "fourier", "eigen", "smooth")

#: Largest matrix whose eigenvectors :class:`MatrixRHS` computes densely (``eigh``);
#: larger ones use shift-invert Lanczos (``eigsh(sigma=0)``).
DENSE_EIGEN_LIMIT = 1000


def _check_common(mode: Any, dtype: Any, backend: Any) -> np.dtype:
    """Check the arguments every sampler shares (before any expensive work)."""
    check_choice("mode", mode, RHS_MODES)
    dt = check_dtype(dtype)
    if not isinstance(backend, str):
        raise TypeError(f"backend must be a string, got {type(backend).__name__}")
    check_backend(backend)
    return dt


def _check_n_kind(n: Any, kind: Any) -> int:
    check_choice("kind", kind, KINDS)
    n = check_int("n", n)
    low = 2 if kind == "element" else 1
    if n < low:
        raise ValueError(f"n must be >= {low} for kind={kind!r} (at least one unknown), got {n}")
    return n


def _sin_cos(x: np.ndarray, modes: int) -> np.ndarray:
    """Unnormalised ``sin(pi m x), cos(pi m x)`` columns, interleaved, ``m = 1..modes``."""
    m = np.arange(1, modes + 1, dtype=np.float64)
    raw = np.empty((x.shape[0], 2 * modes))
    # same expression as the listing: sin(pi * m * x) with (pi * m) evaluated first
    arg = (np.pi * m)[None, :] * x[:, None]
    raw[:, 0::2] = np.sin(arg)
    raw[:, 1::2] = np.cos(arg)
    return raw


def _raw_modes(n: int, kind: str, modes: int) -> np.ndarray:
    """Unnormalised ``sin(pi m x), cos(pi m x)`` columns on the 1D grid of ``(n, kind)``."""
    return _sin_cos(grid_points(n, kind), modes)


def _check_vanishing(norms: np.ndarray, dofs: int, what) -> None:
    """Refuse a mode that vanishes on the grid (e.g. ``cos(pi x)`` at the single point 1/2)."""
    tiny = norms <= 1e-8 * np.sqrt(dofs)
    if np.any(tiny):
        k = int(np.argmax(tiny))
        raise ValueError(f"mode {('sin', 'cos')[k % 2]}(pi*{k // 2 + 1}*x) vanishes on the "
                         f"grid for {what}; use a larger n or fewer modes")


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
    _check_vanishing(norms, dofs, f"n={n}, kind={kind!r}")
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


# -- exact solutions ---------------------------------------------------------------------------
def _check_spd_matrix(A: Any, name: str = "A") -> sp.csc_matrix:
    """``A`` as float64 CSC after checking it is a real, square, symmetric, finite matrix."""
    if not (sp.issparse(A) or isinstance(A, np.ndarray)):
        raise TypeError(f"{name} must be a scipy sparse matrix or a numpy array, "
                        f"got {type(A).__name__}")
    if A.ndim != 2 or A.shape[0] != A.shape[1] or A.shape[0] < 1:
        raise ValueError(f"{name} must be a non-empty square matrix, got shape {A.shape}")
    if A.dtype.kind not in "fiu":
        raise TypeError(f"{name} must be real, got dtype {A.dtype}")
    M = sp.csc_matrix(A, dtype=np.float64)
    check_finite(name, M.data)
    asym = abs(M - M.T)
    scale = abs(M).max() if M.nnz else 0.0
    if asym.nnz and asym.max() > 1e-12 * scale:
        raise ValueError(f"{name} must be symmetric (|A - A^T| is {asym.max():.3g} against "
                         f"max |A| = {scale:.3g})")
    return M


def exact_solutions(A: Any, F: np.ndarray) -> np.ndarray:
    """``A^{-1} F`` for a whole block from one sparse factorisation of the SPD ``A``.

    SuperLU with a symmetric ordering and diagonal pivots (a Cholesky in
    effect), applied to all columns of ``F`` at once.

    Parameters
    ----------
    A : sparse matrix or array
        Symmetric positive definite, ``n x n``.
    F : numpy.ndarray
        ``n x k`` right-hand sides.

    Returns
    -------
    numpy.ndarray
        ``n x k`` float64 solutions.

    Raises
    ------
    ValueError
        If ``A`` is singular, not square or not symmetric, or ``F`` has the wrong shape.
    """
    M = _check_spd_matrix(A)
    F = np.asarray(F, dtype=np.float64)
    if F.ndim != 2 or F.shape[0] != M.shape[0]:
        raise ValueError(f"F must have shape ({M.shape[0]}, k), got {F.shape}")
    return _factor(M).solve(np.asfortranarray(F))


def _factor(M: sp.csc_matrix):
    try:
        return spla.splu(M, permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0,
                         options={"SymmetricMode": True})
    except RuntimeError:
        raise ValueError("A is singular; exact solutions need an SPD matrix") from None


def _matrix_digest(M: sp.spmatrix) -> str:
    """A short SHA-256 digest of a sparse matrix (shape, pattern and values)."""
    C = sp.csr_matrix(M, dtype=np.float64)
    C.sum_duplicates()
    C.sort_indices()
    h = hashlib.sha256(repr(C.shape).encode())
    for a in (C.indptr.astype(np.int64), C.indices.astype(np.int64), C.data):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:12]


# -- the family ---------------------------------------------------------------------------------
class BasisRHS:
    """Sampler of right-hand sides on a basis ``Phi`` with exact solutions ``Psi = A^{-1} Phi``.

    The shared machinery of every sampler of this module, also usable
    directly with a basis of one's own.  A batch holds pure basis vectors
    and random combinations, normalised (see the module description).

    Parameters
    ----------
    basis : numpy.ndarray
        ``num_dofs x k`` real basis ``Phi`` (columns need not be normalised: a
        pure column is divided by its norm, a combination by the norm of
        ``Phi c``).
    solved_basis : numpy.ndarray
        ``Psi = A^{-1} Phi``, the same shape (see :func:`exact_solutions`).
    combination_scale : array of float, optional
        Standard deviation ``s_j`` of the combination coefficient of column
        ``j`` (default 1).
    mode : {"mixed_fourier", "pure_modes", "random_combinations"}, default "mixed_fourier"
        The mixture (half pure modes, half combinations, shuffled), or one of
        the two halves alone (then no shuffle is drawn).
    dtype : float32 or float64, default float64
        Precision of the basis, the GEMMs and the returned arrays.
    backend : {"numpy", "cupy"}, default "numpy"
        Where the returned arrays live and the GEMMs run.

    Attributes
    ----------
    num_dofs : int
        Number of unknowns (rows of a batch).
    num_functions : int
        Number ``k`` of basis vectors (rows of the coefficients ``C``).
    basis, solved_basis : array
        ``Phi`` and ``Psi`` on ``backend`` in ``dtype``.
    combination_scale : numpy.ndarray
        The ``s_j``, ordered like the basis columns.

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> A = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(50, 50))
    >>> Phi = np.random.default_rng(0).standard_normal((50, 6))
    >>> rhs = BasisRHS(Phi, exact_solutions(A, Phi))
    >>> F, U = rhs.sample(8, np.random.default_rng(1))
    >>> bool(np.allclose(A @ U, F))
    True
    """

    def __init__(self, basis: Any, solved_basis: Any, combination_scale: Any = None,
                 mode: str = "mixed_fourier", dtype: Any = np.float64,
                 backend: str = "numpy") -> None:
        phi = self._check_basis("basis", basis)
        psi = self._check_basis("solved_basis", solved_basis)
        if psi.shape != phi.shape:
            raise ValueError(f"solved_basis must have the shape of basis {phi.shape}, "
                             f"got {psi.shape}")
        k = phi.shape[1]
        if combination_scale is None:
            scale = np.ones(k)
        else:
            scale = np.asarray(combination_scale, dtype=np.float64)
            if scale.shape != (k,):
                raise ValueError(f"combination_scale must have shape ({k},), got {scale.shape}")
            check_finite("combination_scale", scale)
            if np.any(scale < 0):
                raise ValueError("combination_scale must be >= 0")
        self._setup(phi, psi, scale, mode, dtype, backend)
        h = hashlib.sha256(repr(phi.shape).encode())
        for X in (phi, psi, scale):
            h.update(np.ascontiguousarray(X).tobytes())
        self._digest = h.hexdigest()[:12]

    @staticmethod
    def _check_basis(name: str, X: Any) -> np.ndarray:
        if not isinstance(X, np.ndarray) or X.dtype.kind not in "fiu":
            raise TypeError(f"{name} must be a real numpy array, got {type(X).__name__}"
                            f"{' of dtype ' + str(X.dtype) if hasattr(X, 'dtype') else ''}")
        if X.ndim != 2 or X.shape[0] < 1 or X.shape[1] < 1:
            raise ValueError(f"{name} must be a non-empty 2-D array (num_dofs x k), "
                             f"got shape {X.shape}")
        check_finite(name, X)
        return np.asarray(X, dtype=np.float64)

    def _setup(self, phi: np.ndarray, psi: np.ndarray, scale: np.ndarray, mode: str,
               dtype: Any, backend: str) -> None:
        """Shared construction: checks, the ``R`` factor, the arrays on the backend."""
        dt = _check_common(mode, dtype, backend)
        self.mode = mode
        self.dtype = dt
        self.backend = backend
        self.num_dofs = phi.shape[0]
        self.num_functions = phi.shape[1]
        self.combination_scale = scale
        # ||Phi c|| = ||R c||: column norms of a batch from a k x k factor
        self._r = np.linalg.qr(phi, mode="r")
        self._basis_norms = np.sqrt(np.einsum("ij,ij->j", phi, phi))
        xp = get_array_module(backend=backend)
        self._xp = xp
        self.basis = xp.asarray(np.ascontiguousarray(phi, dtype=dt))
        self.solved_basis = xp.asarray(np.ascontiguousarray(psi, dtype=dt))

    def __repr__(self) -> str:
        # the digest of basis, solutions and scales: a checkpoint tells two bases apart
        return (f"BasisRHS(num_dofs={self.num_dofs}, k={self.num_functions}, "
                f"mode={self.mode!r}, digest={self._digest}, dtype={self.dtype.name}, "
                f"backend={self.backend!r})")

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
        pure columns (``rng.integers(0, k, B1)`` for ``k`` basis vectors),
        their signs (``2 rng.integers(0, 2, B1) - 1``), the standard normals of
        the ``B2`` combinations as a ``k x B2`` array in row order (for
        :class:`FourierRHS`: for each ``m`` the sine coefficients of all
        columns, then the cosine ones, as the listing's ``modes x 2 x B2``
        draw), and for
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
            ``k x batch_size`` float64 matrix ``C``: pure columns hold one
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
        k = self.num_functions
        C = np.zeros((k, batch_size))
        idx = rng.integers(0, k, size=pure)
        signs = 2.0 * rng.integers(0, 2, size=pure) - 1.0
        # ||+-basis[:, k]|| is the (float) norm of that column: normalise like the listing
        C[idx, np.arange(pure)] = signs / (self._basis_norms[idx] + NORMALIZE_EPS)
        z = rng.standard_normal((k, comb))
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
            ``k x B`` real coefficients (any layout, e.g. a column slice
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
            If ``C`` does not have ``k`` rows, or ``out`` has the wrong
            shape, dtype or layout.
        """
        if not isinstance(C, np.ndarray) or C.dtype.kind != "f":
            raise TypeError(f"C must be a real floating-point numpy array, got "
                            f"{type(C).__name__} of dtype {getattr(C, 'dtype', None)}")
        k = self.num_functions
        if C.ndim != 2 or C.shape[0] != k or C.shape[1] < 1:
            raise ValueError(f"C must have shape ({k}, B) with B >= 1, got {C.shape}")
        if out is not None:
            out = self._check_out(out, C.shape[1])
        return self._synthesize(C, out)

    def _synthesize(self, C: np.ndarray, out: tuple[Any, Any] | None) -> tuple[Any, Any]:
        C = C.astype(self.dtype, copy=False)
        xp = self._xp
        if xp is not np:
            C = xp.asarray(C)  # one host-to-device transfer of a k x B matrix
        if out is None:
            return xp.matmul(self.basis, C), xp.matmul(self.solved_basis, C)
        xp.matmul(self.basis, C, out=out[0])
        xp.matmul(self.solved_basis, C, out=out[1])
        return out


class FourierRHS(BasisRHS):
    """Sampler of the paper's normalised right-hand sides and their exact discrete solutions.

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
    num_functions : int
        ``2 modes``.
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
        _check_common(mode, dtype, backend)
        phi, raw_norms = _modes_and_norms(n, kind, modes)
        self.n = int(n)
        self.kind = kind
        self.modes = int(modes)
        psi = PoissonSolver(self.n, kind).solve(phi)
        m = np.repeat(np.arange(1, self.modes + 1, dtype=np.float64), 2)
        self._setup(phi, psi, m**-DECAY * (raw_norms + NORMALIZE_EPS), mode, dtype, backend)

    def __repr__(self) -> str:
        return (
            f"FourierRHS(n={self.n}, kind={self.kind!r}, mode={self.mode!r}, "
            f"modes={self.modes}, dtype={self.dtype.name}, backend={self.backend!r})"
        )


# -- tensor-product Fourier modes on grids ------------------------------------------------------
def _check_shape(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, Sequence) or isinstance(shape, str) or not 1 <= len(shape) <= 3:
        raise TypeError(f"shape must be a sequence of 1 to 3 grid sizes, got {shape!r}")
    return tuple(check_int("shape", s, minimum=1) for s in shape)


def _grid_modes(shape: tuple[int, ...], modes: int, decay: float,
                max_functions: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Raw tensor-product modes, their frequency vectors and raw norms, ordered.

    Order: total frequency ``|m|_1`` first, then the frequencies of the slower
    directions, then the sine/cosine pattern (for one direction: ``sin(pi x)``,
    ``cos(pi x)``, ``sin(2 pi x)``, ... as :func:`fourier_modes`).
    """
    d = len(shape)
    per_dir = 2 * modes
    # every combination of one 1D function per direction; j = 2 (m - 1) + (0 sin, 1 cos)
    J = np.stack(np.unravel_index(np.arange(per_dir**d), (per_dir,) * d), axis=1)
    M = J // 2 + 1
    # np.lexsort sorts by the last key first
    keys = [J[:, t] % 2 for t in range(d)] + [M[:, t] for t in range(d)] + [M.sum(axis=1)]
    order = np.lexsort(keys)
    if max_functions is not None:
        order = order[:max_functions]
    J, M = J[order], M[order]
    columns = J.shape[0]
    factors, norms1 = [], []
    for t, size in enumerate(shape):
        x = (np.arange(size) + 1) * (1.0 / (size + 1))  # grid_coordinates' points
        raw = _sin_cos(x, modes)
        norm = np.sqrt(np.einsum("ij,ij->j", raw, raw))
        _check_vanishing(norm, size, f"grid size {size} in direction {t}")
        factors.append(raw)
        norms1.append(norm)
    check_memory(f"GridFourierRHS on a {shape} grid with {columns} modes",
                 8 * 3 * math.prod(shape) * columns, "use fewer modes (max_functions)")
    # x is the fast index: the vector of a product reshapes to (n_{d-1}, ..., n_0)
    raw = np.ones((1, columns))
    norms = np.ones(columns)
    for t in range(d):
        raw = (factors[t][:, J[:, t]][:, None, :] * raw[None, :, :]).reshape(-1, columns)
        norms *= norms1[t][J[:, t]]
    freq = np.sqrt((M.astype(np.float64) ** 2).sum(axis=1))
    return raw, freq, norms


def grid_fourier_modes(shape: Any, modes: int = 8, max_functions: int | None = None
                       ) -> np.ndarray:
    """The normalised tensor-product Fourier basis of :class:`GridFourierRHS`.

    Parameters
    ----------
    shape : int or sequence of int
        Interior points per direction (``x`` fastest, as
        :func:`ddops.problems.grid_coordinates`); 1 to 3 directions.
    modes : int
        Frequencies ``m = 1..modes`` per direction.
    max_functions : int, optional
        Keep only the first this many products in the order of
        :class:`GridFourierRHS` (lowest total frequency first).

    Returns
    -------
    numpy.ndarray
        ``prod(shape) x k`` float64, every column divided by its norm plus
        :data:`NORMALIZE_EPS`; ``k = (2 modes)^d`` or ``max_functions``.
    """
    shape = _check_shape(shape)
    modes, max_functions = _check_grid_modes(shape, modes, max_functions)
    raw, _, norms = _grid_modes(shape, modes, 1.0, max_functions)
    raw /= norms + NORMALIZE_EPS
    return raw


def _check_grid_modes(shape: tuple[int, ...], modes: Any, max_functions: Any
                      ) -> tuple[int, int | None]:
    modes = check_int("modes", modes, minimum=1)
    if modes > min(shape):
        raise ValueError(f"modes must be <= the smallest grid size {min(shape)}, got {modes}; "
                         "higher modes alias or vanish on the grid")
    if max_functions is not None:
        max_functions = check_int("max_functions", max_functions, minimum=1)
        max_functions = min(max_functions, (2 * modes) ** len(shape))
    return modes, max_functions


class GridFourierRHS(BasisRHS):
    r"""Tensor-product Fourier right-hand sides on a 1D, 2D or 3D grid, exact solutions.

    The ``d``-dimensional analogue of the paper's mixed data
    (:class:`FourierRHS`): on the interior grid points
    ``x_t = (i + 1) / (n_t + 1)`` of every direction, the basis holds the
    products ``prod_t g_t(pi m_t x_t)`` with ``g_t`` sine or cosine and
    ``m_t = 1..modes``, ordered by total frequency ``|m|_1`` (see
    :func:`grid_fourier_modes`), each normalised.  Pure modes are drawn
    uniformly among them; the combinations use coefficients
    ``N(0, 1) |m|_2^{-decay}`` on the raw (unnormalised) products, as the
    listing does in 1D.  The default ``decay = 1.5 + (d - 1) / 2`` (1.5, 2,
    2.5) gives every frequency shell ``|m|_2 ~ k`` the same share of the
    expected energy as in 1D (a shell holds ``O(k^{d-1})`` modes), so the
    data have the regularity of the paper's in every dimension.  On a 1D grid
    the basis and the law are those of ``FourierRHS(n, kind="dof")``.

    Parameters
    ----------
    A : sparse matrix or array
        The SPD matrix on the grid (``prod(shape)`` unknowns, lexicographic,
        ``x`` fastest: :func:`ddops.problems.poisson_2d`,
        :func:`~ddops.problems.poisson_3d`, :func:`~ddops.problems.diffusion_2d`,
        ...); the exact solutions come from one sparse factorisation of it
        (:func:`exact_solutions`).
    shape : int or sequence of int
        Interior points per direction, e.g. ``(n, n)``.
    modes : int, default 8
        Frequencies per direction, ``1 <= modes <= min(shape)``.
    mode : {"mixed_fourier", "pure_modes", "random_combinations"}
        As in :class:`FourierRHS`.
    decay : float, optional
        Exponent of the combination coefficients (default ``1.5 + (d-1)/2``).
    max_functions : int, optional
        Keep only the ``max_functions`` lowest products (``(2 modes)^d`` by
        default: 256 for ``modes=8`` in 2D).
    dtype, backend
        As in :class:`FourierRHS`.

    Attributes
    ----------
    shape : tuple of int
    modes, decay : as given (``decay`` resolved).
    frequencies : numpy.ndarray
        ``|m|_2`` of every basis column.

    Examples
    --------
    >>> from ddops.problems import poisson_2d
    >>> rhs = GridFourierRHS(poisson_2d(16), (16, 16), modes=4)
    >>> F, U = rhs.sample(32, np.random.default_rng(0))
    >>> F.shape, rhs.num_functions
    ((256, 32), 64)
    """

    def __init__(self, A: Any, shape: Any, modes: int = 8, mode: str = "mixed_fourier",
                 decay: float | None = None, max_functions: int | None = None,
                 dtype: Any = np.float64, backend: str = "numpy") -> None:
        _check_common(mode, dtype, backend)
        shape = _check_shape(shape)
        M = _check_spd_matrix(A)
        n = math.prod(shape)
        if M.shape[0] != n:
            raise ValueError(f"A has {M.shape[0]} rows, the grid {shape} has {n} points")
        modes, max_functions = _check_grid_modes(shape, modes, max_functions)
        d = len(shape)
        decay = 1.5 + (d - 1) / 2 if decay is None else float(decay)
        if not math.isfinite(decay):
            raise ValueError(f"decay must be finite, got {decay}")
        raw, freq, norms = _grid_modes(shape, modes, decay, max_functions)
        raw /= norms + NORMALIZE_EPS
        psi = _factor(M).solve(np.asfortranarray(raw))
        self.shape, self.modes, self.decay = shape, modes, decay
        self.max_functions = max_functions
        self.frequencies = freq
        self._matrix_digest = _matrix_digest(M)
        self._setup(raw, psi, freq**-decay * (norms + NORMALIZE_EPS), mode, dtype, backend)

    def __repr__(self) -> str:
        return (f"GridFourierRHS(shape={self.shape}, modes={self.modes}, mode={self.mode!r}, "
                f"decay={self.decay:g}, max_functions={self.max_functions}, "
                f"A={self._matrix_digest}, dtype={self.dtype.name}, backend={self.backend!r})")


# -- any SPD matrix ----------------------------------------------------------------------------
def _low_eigenvectors(M: sp.csc_matrix, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` smallest eigenpairs of the SPD ``M``, ascending, signs fixed."""
    n = M.shape[0]
    if n <= DENSE_EIGEN_LIMIT or k >= n - 1:
        check_memory(f"the dense eigenvectors of a {n} x {n} matrix", 8 * 3 * n * n,
                     "use basis='smooth'")
        lam, V = sla.eigh(M.toarray(), subset_by_index=(0, k - 1))
    else:
        v0 = np.random.default_rng(seed).standard_normal(n)
        lam, V = spla.eigsh(M, k=k, sigma=0.0, which="LM", v0=v0, tol=1e-12)
        order = np.argsort(lam)
        lam, V = lam[order], V[:, order]
    # the largest entry of every vector is positive: the basis does not depend on the solver
    big = np.argmax(np.abs(V), axis=0)
    V *= np.sign(V[big, np.arange(k)])
    return lam, V


def _smoothed_vectors(M: sp.csc_matrix, k: int, steps: int, seed: int
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Random vectors after ``steps`` weighted-Jacobi sweeps, Rayleigh-Ritz ordered."""
    n = M.shape[0]
    diag = M.diagonal()
    if np.any(diag <= 0):
        raise ValueError("A must have a positive diagonal (SPD) for basis='smooth'")
    X = np.random.default_rng(seed).standard_normal((n, k))
    inv_d = (2.0 / 3.0) / diag[:, None]  # weight 2/3: the classical smoothing factor
    A = sp.csr_matrix(M)
    for _ in range(steps):
        X -= inv_d * (A @ X)
        X /= np.linalg.norm(X, axis=0)  # keep the scale (the high part decays)
    Q = np.linalg.qr(X)[0]
    theta, W = np.linalg.eigh(Q.T @ (A @ Q))
    V = Q @ W
    big = np.argmax(np.abs(V), axis=0)
    V *= np.sign(V[big, np.arange(k)])
    return theta, V


class MatrixRHS(BasisRHS):
    """Right-hand sides for any SPD matrix: low eigenvectors or smoothed random vectors.

    The basis is either the ``size`` eigenvectors of ``A`` with the smallest
    eigenvalues (``basis="eigen"``: dense ``eigh`` up to
    :data:`DENSE_EIGEN_LIMIT` unknowns, else shift-invert Lanczos
    ``eigsh(A, sigma=0)``), or ``size`` random vectors after
    ``smoothing_steps`` weighted-Jacobi sweeps (``x <- x - 2/3 D^{-1} A x``,
    which damps their oscillating part), orthonormalised and rotated to Ritz
    vectors (``basis="smooth"``, cheaper for large matrices; an
    approximation of the low eigenvectors).  Columns are ordered by their
    (Ritz) eigenvalue ``lambda_j`` and signed so that their largest entry is
    positive.  The exact solutions come from one sparse factorisation of
    ``A`` applied to the whole basis (:func:`exact_solutions`).

    The combination coefficients have the scale ``(lambda_j / lambda_1)^{-decay/2}``:
    for a Laplacian ``lambda ~ |m|^2``, so this is the frequency law
    ``|m|^{-decay}`` of :class:`FourierRHS` (``decay = 1.5``) and
    :class:`GridFourierRHS` (pass ``1.5 + (d-1)/2`` for the same law in ``d``
    dimensions; :func:`make_rhs_sampler` does).

    Parameters
    ----------
    A : sparse matrix or array
        Symmetric positive definite, ``n x n``.
    size : int, default 32
        Number ``k`` of basis vectors, ``1 <= k < n`` (``k = n`` allowed for dense).
    basis : {"eigen", "smooth"}
        Which basis.
    mode : {"mixed_fourier", "pure_modes", "random_combinations"}
        As in :class:`FourierRHS` (the names are kept for all samplers).
    decay : float, default 1.5
        Exponent of the frequency law.
    smoothing_steps : int, default 10
        Jacobi sweeps for ``basis="smooth"``.
    seed : int, default 0
        Seed of the random start vectors (Lanczos start, or the vectors to
        smooth); the batches are drawn from the ``rng`` of :meth:`sample`.
    dtype, backend
        As in :class:`FourierRHS`.

    Attributes
    ----------
    eigenvalues : numpy.ndarray
        ``lambda_j`` (exact or Ritz values), ascending.

    Examples
    --------
    >>> from ddops.problems import poisson_2d
    >>> rhs = MatrixRHS(poisson_2d(12), size=16)
    >>> F, U = rhs.sample(8, np.random.default_rng(0))
    >>> U.shape
    (144, 8)
    """

    def __init__(self, A: Any, size: int = 32, basis: str = "eigen",
                 mode: str = "mixed_fourier", decay: float = 1.5, smoothing_steps: int = 10,
                 seed: int = 0, dtype: Any = np.float64, backend: str = "numpy") -> None:
        check_choice("basis", basis, MATRIX_BASES)
        _check_common(mode, dtype, backend)
        M = _check_spd_matrix(A)
        n = M.shape[0]
        size = check_int("size", size, minimum=1)
        if size > n or (basis == "smooth" and size > n):
            raise ValueError(f"size must be <= the number of unknowns {n}, got {size}")
        decay = float(decay)
        if not math.isfinite(decay):
            raise ValueError(f"decay must be finite, got {decay}")
        steps = check_int("smoothing_steps", smoothing_steps, minimum=0)
        seed = check_int("seed", seed, minimum=0)
        check_memory(f"MatrixRHS with {size} vectors of {n} unknowns", 8 * 4 * n * size,
                     "reduce size")
        if basis == "eigen":
            lam, V = _low_eigenvectors(M, size, seed)
        else:
            lam, V = _smoothed_vectors(M, size, steps, seed)
        if not lam[0] > 0:
            raise ValueError(f"A must be positive definite (smallest eigenvalue "
                             f"{lam[0]:.3g})")
        psi = _factor(M).solve(np.asfortranarray(V))
        self.size, self.kind, self.decay = size, basis, decay
        self.smoothing_steps, self.seed = steps, seed
        self.eigenvalues = lam
        self._matrix_digest = _matrix_digest(M)
        self._setup(V, psi, (lam / lam[0]) ** (-decay / 2), mode, dtype, backend)

    def __repr__(self) -> str:
        smooth = f", smoothing_steps={self.smoothing_steps}" if self.kind == "smooth" else ""
        return (f"MatrixRHS(size={self.size}, basis={self.kind!r}, mode={self.mode!r}, "
                f"decay={self.decay:g}{smooth}, seed={self.seed}, A={self._matrix_digest}, "
                f"dtype={self.dtype.name}, backend={self.backend!r})")


def make_rhs_sampler(A: Any, *, shape: Any = None, kind: str = "auto", size: int | None = None,
                     modes: int | None = None, mode: str = "mixed_fourier",
                     decay: float | None = None, seed: int = 0, dtype: Any = np.float64,
                     backend: str = "numpy") -> BasisRHS:
    """The training-data sampler that fits a problem.

    Parameters
    ----------
    A : sparse matrix or array
        The SPD matrix.
    shape : sequence of int, optional
        Grid points per direction when ``A`` lives on a tensor grid (the grid
        problems of :mod:`ddops.problems.grid`); then ``"auto"`` picks Fourier modes.
    kind : {"auto", "fourier", "eigen", "smooth"}
        ``"fourier"``: :class:`GridFourierRHS` (needs ``shape``); ``"eigen"``,
        ``"smooth"``: :class:`MatrixRHS`; ``"auto"``: ``"fourier"`` with a
        ``shape``, else ``"eigen"``.
    size : int, optional
        Number of basis vectors for ``"eigen"``/``"smooth"`` (default 32, at
        most ``n``), or ``max_functions`` for ``"fourier"`` (default all).
    modes : int, optional
        Frequencies per direction for ``"fourier"`` (default 16 in 1D, 8 in
        2D, 4 in 3D, at most ``min(shape)``); not used otherwise.
    mode : {"mixed_fourier", "pure_modes", "random_combinations"}
    decay : float, optional
        Default ``1.5 + (d - 1)/2`` with ``d = len(shape)``, or 1.5 without a shape.
    seed : int
        Seed of the ``"eigen"``/``"smooth"`` start vectors.
    dtype, backend
        As in :class:`FourierRHS`.

    Returns
    -------
    GridFourierRHS or MatrixRHS

    Examples
    --------
    >>> from ddops.problems import poisson_2d
    >>> rhs = make_rhs_sampler(poisson_2d(16), shape=(16, 16))
    >>> type(rhs).__name__, rhs.num_functions
    ('GridFourierRHS', 256)
    """
    check_choice("kind", kind, SAMPLER_KINDS)
    if shape is not None:
        shape = _check_shape(shape)
    if kind == "auto":
        kind = "fourier" if shape is not None else "eigen"
    if kind == "fourier":
        if shape is None:
            raise ValueError("kind='fourier' needs the grid shape (shape=)")
        if modes is None:
            modes = min({1: 16, 2: 8, 3: 4}[len(shape)], min(shape))
        return GridFourierRHS(A, shape, modes, mode, decay=decay, max_functions=size,
                              dtype=dtype, backend=backend)
    if modes is not None:
        raise ValueError(f"modes is only used with kind='fourier', not {kind!r}")
    if decay is None:
        decay = 1.5 + (len(shape) - 1) / 2 if shape is not None else DECAY
    n = A.shape[0] if hasattr(A, "shape") and len(A.shape) == 2 else None
    if size is None:
        size = 32 if n is None else min(32, n)
    return MatrixRHS(A, size, kind, mode, decay=decay, seed=seed, dtype=dtype, backend=backend)
