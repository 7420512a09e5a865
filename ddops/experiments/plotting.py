"""Figures for trained operators: training curves, solutions, operator matrices, sweeps.

Every function draws one figure and writes it as a PNG file to ``path``
(parent folders are created) and returns that path as a :class:`pathlib.Path`;
with ``path=None`` it writes nothing and returns the
:class:`matplotlib.figure.Figure` instead (to show in a notebook, save in
another format, or inspect).

Colours name methods: a method or model has the same colour in every figure
(training curves, sweep, scaling, residual histories, solutions), see
:func:`method_color`.  Runs that did not converge are drawn dashed or dotted
and say so in the legend.

The module never touches pyplot or the global matplotlib backend: figures are
plain :class:`matplotlib.figure.Figure` objects rendered by their own
:class:`~matplotlib.backends.backend_agg.FigureCanvasAgg`, so importing or
calling it neither needs a display nor changes the backend of an interactive
session.  No figure is kept alive after a call returns (unless ``path=None``
hands it to the caller).

Large matrices are drawn from a strided view: a side longer than
``max_image`` entries (default 2048) is sampled every ``ceil(size /
max_image)``-th row or column before drawing, so an ``n x n`` image costs at
most ``max_image**2`` pixels whatever ``n`` is.  The axes still show the
original indices.  Striding can skip isolated extreme entries, so colour
limits and error normalisations are computed from the full arrays.
"""

from __future__ import annotations

import math
import os
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator, NullLocator
from numpy.typing import ArrayLike

from .._validation import check_positive_float
from ..backend import to_numpy

__all__ = [
    "MAX_IMAGE",
    "METHOD_COLORS",
    "method_color",
    "plot_training_curves",
    "plot_solutions",
    "plot_operator_matrices",
    "plot_learned_blocks",
    "plot_coarse_basis_transpose",
    "plot_sweep",
    "plot_scaling",
    "plot_residual_histories",
    "plot_grid_fields",
    "plot_grid_solutions",
    "plot_grid_rows",
]

#: Largest number of matrix entries drawn per image side; longer sides are strided.
MAX_IMAGE = 2048

#: Resolution of the written PNG files unless a call asks for another.
DEFAULT_DPI = 120

PathLike = str | os.PathLike

_SEQ_CMAP = "viridis"
_DIV_CMAP = "RdBu_r"

#: Fixed colours of the models and methods that the package's experiments draw, by
#: lower-case name (``ddops compare`` model names, ``ddops precond`` method keys and labels).
#: The Schwarz attention model keeps its blue in every figure.
METHOD_COLORS: dict[str, str] = {
    "schwarz": "C0",
    "paper": "C0",
    "schwarz attention, paper training": "C0",
    "learned_random": "C1",
    "learned symmetric, random init": "C1",
    "one_level": "C2",
    "one-level additive schwarz": "C2",
    "two_level": "C3",
    "two-level additive schwarz": "C3",
    "ras": "C4",
    "two-level ras": "C4",
    "learned_two_level": "C5",
    "learned symmetric, two-level init": "C5",
    "pyamg": "C6",
    "pyamg smoothed aggregation": "C6",
    "none": "C7",
    "no preconditioner": "C7",
    "jacobi": "C8",
}

#: Colours of other names (the ``global_r<rank>`` baselines, user labels), picked by a hash of
#: the name; the Schwarz model's C0 is not among them.
_OTHER_COLORS = ("C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8", "C9")

#: Drawing styles of a run that did not converge (residual histories) or whose training
#: stopped with a status other than "finished" (training curves, sweep and scaling points).
_NOT_CONVERGED_LS = "--"
_FAILED_TRAIN_LS = ":"
_FAILED_MARKER = "X"

#: Markers of the residual histories, one per method in drawing order (hollow, so that two
#: methods with the same residuals at an iteration both show: a circle inside a square).
_RESIDUAL_MARKERS = ("o", "s", "^", "v", "D", "<", ">", "p", "h", "8")
#: Markers drawn per residual history at most; longer histories mark every k-th iteration,
#: each method from another offset so that the markers of close curves do not overlap.
_RESIDUAL_MARKS = 20
#: Width of the band drawn under a residual history that a later method repeats exactly
#: (CG without a preconditioner and with Jacobi on a matrix with a constant diagonal).
_SHARED_BAND_LW = 4.5
#: Two residual histories closer than this (relative, at every iteration) are one curve on a
#: logarithmic axis (a thousandth of a decade).
_SAME_RTOL = 1e-3


# -- helpers ------------------------------------------------------------------------------------
def _new_figure(width: float, height: float) -> Figure:
    """A pyplot-free figure with its own Agg canvas and tight layout.

    Constrained layout took three quarters of the time of the 16-panel
    solutions figure; the tight layout is computed once at save time and
    gave the same legible result at a quarter of the cost.
    """
    fig = Figure(figsize=(width, height), layout="tight")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: PathLike | None, dpi: int,
          title: str | None = None) -> Path | Figure:
    """Write the figure to ``path`` and release it, or return it for ``path=None``."""
    if title:
        fig.suptitle(title)
    if path is None:
        return fig
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=dpi)
    fig.clear()
    return path


def _color(k: int) -> str:
    return f"C{k % 10}"


def method_color(name: str) -> str:
    """The colour of a method or model in every figure of this module.

    Parameters
    ----------
    name : str
        Model or method name, e.g. ``"schwarz"``, ``"global_r5"`` or a
        ``ddops precond`` label such as ``"two-level additive Schwarz"``.

    Returns
    -------
    str
        A matplotlib colour: the entry of :data:`METHOD_COLORS` for the
        lower-case name, otherwise one of the tab10 colours ``C1`` to ``C9``
        chosen by a CRC-32 hash of the name, so that it depends neither on the
        other names of a figure nor on their order, nor on the Python session.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a string, got {type(name).__name__}")
    fixed = METHOD_COLORS.get(name.lower())
    if fixed is not None:
        return fixed
    return _OTHER_COLORS[zlib.crc32(name.encode("utf-8")) % len(_OTHER_COLORS)]


def _method_colors(names: Sequence[str]) -> dict[str, str]:
    """:func:`method_color` of each name, made distinct within one figure.

    Names in :data:`METHOD_COLORS` always keep their colour.  Two other names whose hashes
    meet take the next free colour of the cycle, in sorted order of the names, so the
    assignment depends only on the set of names drawn together.
    """
    colors = {name: METHOD_COLORS[name.lower()] for name in names
              if name.lower() in METHOD_COLORS}
    taken = set(colors.values())
    for name in sorted(set(names) - set(colors)):
        start = _OTHER_COLORS.index(method_color(name))
        for step in range(len(_OTHER_COLORS)):
            candidate = _OTHER_COLORS[(start + step) % len(_OTHER_COLORS)]
            if candidate not in taken:
                break
        else:  # more names than colours: repeat the hashed one
            candidate = method_color(name)
        colors[name] = candidate
        taken.add(candidate)
    return colors


def _failed(status: Any) -> str | None:
    """The status of a run that did not finish normally (None for "finished" or no status)."""
    if status is None:
        return None
    status = str(status)
    return None if status == "finished" else status


def _float_array(values: Any, name: str) -> np.ndarray:
    """1-D float array; None entries become NaN."""
    if values is None:
        raise ValueError(f"{name} is missing")
    arr = to_numpy(values)
    if isinstance(arr, np.ndarray):
        out = np.asarray(arr, dtype=np.float64)
    else:
        out = np.array([np.nan if v is None else float(v) for v in arr], dtype=np.float64)
    if out.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {out.shape}")
    return out


def _scalar(value: Any) -> float:
    """A result-table entry as a float; None or a missing entry is NaN."""
    if value is None:
        return math.nan
    return float(value)


def _positive(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The points that can be drawn on a logarithmic y axis."""
    keep = np.isfinite(x) & np.isfinite(y) & (y > 0)
    return x[keep], y[keep]


def _no_data(ax: Any, what: str = "no data") -> None:
    ax.text(0.5, 0.5, what, transform=ax.transAxes, ha="center", va="center", color="0.4")


def _legend(ax: Any, **kwargs: Any) -> None:
    """A legend only when something carries a label (avoids matplotlib's warning)."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, **kwargs)


def _finite_range(*mats: Any) -> tuple[float | None, float | None]:
    """Smallest and largest finite entry over several matrices (None, None if there is none)."""
    lo, hi = math.inf, -math.inf
    for A in mats:
        values = A.data if sp.issparse(A) else A
        values = values[np.isfinite(values)]
        if values.size:
            lo, hi = min(lo, float(values.min())), max(hi, float(values.max()))
        if sp.issparse(A) and A.nnz < A.shape[0] * A.shape[1]:
            lo, hi = min(lo, 0.0), max(hi, 0.0)  # implicit zeros
    return (lo, hi) if lo <= hi else (None, None)


def _max_abs(A: Any) -> float:
    """Largest absolute entry of a dense or sparse matrix (0 for an empty one)."""
    if sp.issparse(A):
        return float(abs(A).max()) if A.nnz else 0.0
    return float(np.max(np.abs(A))) if A.size else 0.0


def _matrix(A: Any, name: str) -> Any:
    """A 2-D numpy array or scipy sparse matrix (cupy inputs are moved to the host).

    Objects with a ``to_dense()`` method (the ddops operators and their
    ``local_part()`` / ``coarse_part()``) are assembled first.
    """
    if not sp.issparse(A) and callable(getattr(A, "to_dense", None)):
        A = A.to_dense()
    A = to_numpy(A)
    if sp.issparse(A):
        return sp.csr_matrix(A, dtype=np.float64)
    A = np.asarray(A, dtype=np.float64)
    if A.ndim != 2:
        raise ValueError(f"{name} must be a 2-D matrix, got shape {A.shape}")
    return A


def _max_abs_diff(A: Any, B: Any, chunk: int = 1024) -> float:
    """``max |A - B|`` for dense or sparse matrices of one shape, a block of rows at a time."""
    out = 0.0
    for start in range(0, A.shape[0], chunk):
        a, b = A[start:start + chunk], B[start:start + chunk]
        a = a.toarray() if sp.issparse(a) else a
        b = b.toarray() if sp.issparse(b) else b
        if a.size:
            out = max(out, float(np.max(np.abs(a - b))))
    return out


def _strided(A: Any, max_image: int) -> np.ndarray:
    """Dense view of ``A`` with at most ``max_image`` entries per side (by striding)."""
    if max_image < 1:
        raise ValueError(f"max_image must be >= 1, got {max_image}")
    sr = max(1, math.ceil(A.shape[0] / max_image))
    sc = max(1, math.ceil(A.shape[1] / max_image))
    view = A[::sr, ::sc]
    return view.toarray() if sp.issparse(view) else np.ascontiguousarray(view)


def _image(fig: Figure, ax: Any, A: Any, title: str, max_image: int, *, diverging: bool = False,
           vmin: float | None = None, vmax: float | None = None, aspect: str = "equal",
           shape: tuple[int, int] | None = None, xlabel: str = "column index",
           ylabel: str = "row index", labelsize: str = "small") -> None:
    """imshow of a (possibly strided) matrix in original index coordinates, with its own colorbar.

    ``shape`` is the size of the matrix that ``A`` was already strided from, if any.  Limits
    that are not given come from every entry of ``A`` (not only the drawn ones): the
    symmetric ``+-max|A|`` for a diverging map, the finite range otherwise.
    """
    img = _strided(A, max_image)
    rows, cols = A.shape if shape is None else shape
    if diverging:
        lim = _max_abs(A) if vmax is None else vmax
        lim = lim if lim > 0 and np.isfinite(lim) else 1.0
        vmin, vmax, cmap = -lim, lim, _DIV_CMAP
    else:
        cmap = _SEQ_CMAP
        lo, hi = _finite_range(A)
        vmin = lo if vmin is None else vmin
        vmax = hi if vmax is None else vmax
    im = ax.imshow(img, cmap=cmap, vmin=vmin, vmax=vmax, aspect=aspect,
                   extent=(-0.5, cols - 0.5, rows - 0.5, -0.5))
    ax.set_title(title, fontsize="medium")
    ax.set_xlabel(xlabel, fontsize=labelsize)
    ax.set_ylabel(ylabel, fontsize=labelsize)
    cbar = fig.colorbar(im, ax=ax, shrink=0.85)
    cbar.ax.tick_params(labelsize="small")


def _grid(count: int, max_cols: int) -> tuple[int, int]:
    """(rows, cols) of a panel grid for ``count`` panels, at most ``max_cols`` per row."""
    cols = min(max_cols, count)
    return math.ceil(count / cols), cols


def _chosen_blocks(count: int, max_blocks: int) -> np.ndarray:
    """Indices of at most ``max_blocks`` of ``count`` blocks, evenly spread, ends included."""
    if count <= max_blocks:
        return np.arange(count)
    return np.unique(np.round(np.linspace(0, count - 1, max_blocks)).astype(int))


def _group(results: Sequence[Mapping[str, Any]], key: str | None) -> dict[str, list]:
    """Rows grouped by ``row[key]`` in order of first appearance."""
    groups: dict[str, list] = {}
    for row in results:
        label = "" if key is None or row.get(key) is None else str(row[key])
        groups.setdefault(label, []).append(row)
    return groups


# -- training ------------------------------------------------------------------------------------
def plot_training_curves(
    histories: Mapping[str, Mapping[str, Any]],
    path: PathLike | None,
    title: str | None = None,
    ylabel: str = "wMSE",
    *,
    dpi: int = DEFAULT_DPI,
) -> Path | Figure:
    """Training (and validation) loss against the optimisation step, one colour per model.

    Parameters
    ----------
    histories : mapping of str to mapping
        ``model name -> history``.  A history holds ``"step"`` (1-D integer
        array) and ``"train"`` (the training loss at those steps), and
        optionally ``"val"`` (validation loss) with ``"val_step"`` (the steps
        at which it was measured; may be omitted when ``"val"`` has one entry
        per ``"step"``), and ``"status"`` (the :class:`ddops.learning.training.TrainingResult`
        status; a run that did not finish, e.g. ``"diverged"``, is marked).
        Non-finite or non-positive losses are left out.
    path : str, path-like or None
        Where to write the PNG; ``None`` returns the figure instead.
    title : str, optional
        Figure title.
    ylabel : str
        Label of the (logarithmic) loss axis.
    dpi : int
        Resolution of the PNG.

    Returns
    -------
    pathlib.Path or matplotlib.figure.Figure
        ``path``, or the figure when ``path`` is None.

    Notes
    -----
    Training curves are solid lines, validation curves dashed with markers, in
    the model's colour (:func:`method_color`), on a logarithmic y axis.  A run
    whose status is not ``"finished"`` is drawn dotted (training) and
    dash-dotted (validation), its last point marked with a cross, and its
    legend entries end with the status, e.g. ``"(train, diverged)"``.
    """
    if not histories:
        raise ValueError("histories must contain at least one model")
    fig = _new_figure(7.0, 4.5)
    ax = fig.add_subplot()
    drawn = False
    colors = _method_colors([str(name) for name in histories])
    for name, hist in histories.items():
        color = colors[str(name)]
        failed = _failed(hist.get("status"))
        tag = f", {failed}" if failed else ""
        train_ls, val_ls = (_FAILED_TRAIN_LS, "-.") if failed else ("-", "--")
        steps = _float_array(hist.get("step"), f"histories[{name!r}]['step']")
        train = _float_array(hist.get("train"), f"histories[{name!r}]['train']")
        if steps.shape != train.shape:
            raise ValueError(f"histories[{name!r}]: 'step' and 'train' differ in length "
                             f"({steps.size} != {train.size})")
        s, t = _positive(steps, train)
        if s.size:
            ax.plot(s, t, ls=train_ls, color=color, lw=1.2, label=f"{name} (train{tag})")
            if failed:
                ax.plot(s[-1:], t[-1:], ls="none", marker=_FAILED_MARKER, ms=8, color=color)
            drawn = True
        if hist.get("val") is None:
            continue
        val = _float_array(hist["val"], f"histories[{name!r}]['val']")
        if hist.get("val_step") is not None:
            vsteps = _float_array(hist["val_step"], f"histories[{name!r}]['val_step']")
        elif val.size == steps.size:
            vsteps = steps
        else:
            raise ValueError(f"histories[{name!r}]: 'val_step' is needed when 'val' has a "
                             f"different length from 'step' ({val.size} != {steps.size})")
        if vsteps.shape != val.shape:
            raise ValueError(f"histories[{name!r}]: 'val_step' and 'val' differ in length "
                             f"({vsteps.size} != {val.size})")
        s, v = _positive(vsteps, val)
        if s.size:
            ax.plot(s, v, ls=val_ls, color=color, lw=1.2, marker="o", ms=3,
                    label=f"{name} (val.{tag})")
            drawn = True
    if drawn:
        ax.set_yscale("log")
    else:
        _no_data(ax, "no finite positive losses")
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.4)
    ax.grid(True, which="minor", alpha=0.15)
    _legend(ax, fontsize="small")
    return _save(fig, path, dpi, title)


# -- solutions -----------------------------------------------------------------------------------
def _columns(M: ArrayLike, name: str) -> np.ndarray:
    M = np.asarray(to_numpy(M), dtype=np.float64)
    if M.ndim == 1:
        M = M[:, None]
    if M.ndim != 2:
        raise ValueError(f"{name} must be (n,) or (n, B), got shape {M.shape}")
    return M


def plot_solutions(
    x: ArrayLike,
    F: ArrayLike,
    U: ArrayLike,
    P: ArrayLike,
    path: PathLike | None,
    title: str | None = None,
    max_panels: int = 16,
    *,
    model: str | None = None,
    dpi: int = DEFAULT_DPI,
) -> Path | Figure:
    """Exact and predicted solutions for a few right-hand sides, one panel per sample.

    Parameters
    ----------
    x : array_like, shape (n,)
        Coordinates of the unknowns.
    F, U, P : array_like, shape (n, B) or (n,)
        Right-hand sides, exact solutions ``A^{-1} F`` and predictions ``M F``,
        one sample per column.
    path : str, path-like or None
        Where to write the PNG; ``None`` returns the figure instead.
    title : str, optional
        Figure title.
    max_panels : int
        At most this many samples (the first ones) are drawn, four per row:
        a 4 x 4 grid for the default 16, fewer rows or columns when ``B`` is
        smaller.
    model : str, optional
        Name of the model that predicted ``P``: the prediction is drawn in its
        colour (:func:`method_color`) and labelled with its name.
    dpi : int
        Resolution of the PNG.

    Returns
    -------
    pathlib.Path or matplotlib.figure.Figure
        ``path``, or the figure when ``path`` is None.

    Notes
    -----
    As in the paper's sample-solution figures, the exact solution is black,
    the prediction a dashed line (red, or the model's colour), and the
    right-hand side green, rescaled by ``max|u| / max|f|`` so that it fits
    the solution's range.  Each panel
    title gives the relative error ``||p - u||_2 / ||u||_2`` (the absolute
    error when ``u = 0``).
    """
    x = _float_array(x, "x")
    F, U, P = _columns(F, "F"), _columns(U, "U"), _columns(P, "P")
    if not (F.shape == U.shape == P.shape):
        raise ValueError(f"F, U and P must have the same shape, got {F.shape}, {U.shape}, "
                         f"{P.shape}")
    if F.shape[0] != x.size:
        raise ValueError(f"F, U, P must have n = len(x) = {x.size} rows, got {F.shape[0]}")
    if max_panels < 1:
        raise ValueError(f"max_panels must be >= 1, got {max_panels}")
    if model is None:
        pred_color, pred_label = "red", "prediction"
    else:
        pred_color, pred_label = method_color(model), f"{model} prediction"
    count = min(F.shape[1], max_panels)
    if count == 0:
        raise ValueError("no samples to plot (B = 0)")
    nrows, ncols = _grid(count, 4)
    fig = _new_figure(3.0 * ncols + 0.4, 2.3 * nrows + 0.5)
    axes = fig.subplots(nrows, ncols, squeeze=False, sharex=True)
    for b in range(nrows * ncols):
        ax = axes.flat[b]
        if b >= count:
            ax.set_axis_off()
            continue
        f, u, p = F[:, b], U[:, b], P[:, b]
        umax, fmax = float(np.max(np.abs(u))), float(np.max(np.abs(f)))
        scale = (umax if umax > 0 else 1.0) / fmax if fmax > 0 else 0.0
        unorm = float(np.linalg.norm(u))
        err = float(np.linalg.norm(p - u))
        err = err / unorm if unorm > 0 else err
        ax.plot(x, f * scale, color="tab:green", lw=1.0, alpha=0.8, label="f (rescaled)")
        ax.plot(x, u, color="black", lw=1.6, label="exact u")
        ax.plot(x, p, color=pred_color, lw=1.4, ls="--", label=pred_label)
        ax.set_title(f"#{b}  rel. err {err:.2e}", fontsize="small")
        ax.tick_params(labelsize="x-small")
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 3))
        ax.yaxis.get_offset_text().set_fontsize("x-small")
        ax.grid(True, alpha=0.3)
    _legend(axes.flat[0], fontsize="x-small", loc="best")
    for b in range(max(count - ncols, 0), count):  # lowest panel of every column
        axes.flat[b].xaxis.set_tick_params(labelbottom=True)
        axes.flat[b].set_xlabel("x", fontsize="small")
    return _save(fig, path, dpi, title)


# -- operator matrices ---------------------------------------------------------------------------
def _basis_lines(ax: Any, Phi: Any, x: np.ndarray | None) -> None:
    """Each column of Phi as a line over its support (plus one point either side)."""
    C = sp.csc_matrix(Phi)
    C.eliminate_zeros()
    n, n0 = C.shape
    coords = np.arange(n, dtype=np.float64) if x is None else x
    segments, colors = [], []
    for j in range(n0):
        rows = C.indices[C.indptr[j]:C.indptr[j + 1]]
        if rows.size == 0:
            continue
        lo, hi = max(int(rows.min()) - 1, 0), min(int(rows.max()) + 2, n)
        values = C[lo:hi, j].toarray().ravel()
        segments.append(np.column_stack([coords[lo:hi], values]))
        colors.append(_color(j))
    if segments:
        ax.add_collection(LineCollection(segments, colors=colors, linewidths=1.3))
        ax.autoscale_view()
    else:
        _no_data(ax, "Phi is zero")
    ax.set_xlim(coords[0], coords[-1])
    ax.set_xlabel("x" if x is not None else "dof index")
    ax.set_title(rf"coarse basis $\phi_j$ ($n_0 = {n0}$)", fontsize="medium")
    ax.grid(True, alpha=0.3)


def plot_operator_matrices(
    local: ArrayLike | sp.spmatrix | None,
    coarse: ArrayLike | sp.spmatrix | None,
    full: ArrayLike | sp.spmatrix,
    exact_inverse: ArrayLike | sp.spmatrix,
    Phi: ArrayLike | sp.spmatrix | None,
    path: PathLike | None,
    title: str | None = None,
    *,
    x: ArrayLike | None = None,
    max_image: int = MAX_IMAGE,
    dpi: int = DEFAULT_DPI,
) -> Path | Figure:
    """The parts of a learned operator next to the exact inverse (paper Fig. 4 / A.8).

    Parameters
    ----------
    local : (n, n) matrix or None
        Local part ``sum_i R_i^T D_i^{1/2} G_i D_i^{1/2} R_i``.
    coarse : (n, n) matrix or None
        Coarse part ``Phi G_0 Phi^T``; ``None`` for a one-level or a global
        model, which draws the single row full / exact / error (plus the
        basis functions if ``Phi`` is given).
    full : (n, n) matrix
        The full learned operator ``M``.
    exact_inverse : (n, n) matrix
        ``A^{-1}``.
    Phi : (n, n0) matrix (dense or scipy sparse) or None
        Coarse interpolation; its columns are drawn as line plots.
    path : str, path-like or None
        Where to write the PNG; ``None`` returns the figure instead.
    title : str, optional
        Figure title.
    x : array_like, shape (n,), optional
        Coordinates for the basis-function plot (default: dof index).
    max_image : int
        Longest matrix side drawn without striding, see the module notes.
    dpi : int
        Resolution of the PNG.

    Returns
    -------
    pathlib.Path or matplotlib.figure.Figure
        ``path``, or the figure when ``path`` is None.

    Notes
    -----
    With a coarse part the layout is 2 x 3: local, coarse, full (top);
    exact inverse, normalised error, basis functions (bottom).  The error
    ``(M - A^{-1}) / max_jk |A^{-1}|_jk`` uses a diverging colour map centred
    at zero (the paper writes the normaliser as ``||A^{-1}||_inf``; here it is
    the largest entry in absolute value).  Every matrix panel has its own
    colour bar and range, taken from all of its entries; in particular the
    exact inverse is scaled by ``A^{-1}`` alone, so that a learned operator
    with a wider range (early in training, or diverged) does not wash out the
    reference.  The axes are the row and column indices.  Matrices may be
    dense or scipy sparse (cupy arrays are moved to the host), or ddops
    operators, which are assembled with their ``to_dense()``.
    """
    full = _matrix(full, "full")
    exact = _matrix(exact_inverse, "exact_inverse")
    n = full.shape[0]
    if full.shape != (n, n) or exact.shape != (n, n):
        raise ValueError(f"full and exact_inverse must both be square of the same size, got "
                         f"{full.shape} and {exact.shape}")
    parts = {}
    for name, M in (("local", local), ("coarse", coarse)):
        if M is not None:
            parts[name] = _matrix(M, name)
            if parts[name].shape != (n, n):
                raise ValueError(f"{name} must have shape {(n, n)}, got {parts[name].shape}")
    if Phi is not None:
        Phi = _matrix(Phi, "Phi")
        if Phi.shape[0] != n:
            raise ValueError(f"Phi must have {n} rows, got shape {Phi.shape}")
    xs = None
    if x is not None:
        xs = _float_array(x, "x")
        if xs.size != n:
            raise ValueError(f"x must have {n} entries, got {xs.size}")

    scale = _max_abs(exact)
    scale = scale if scale > 0 else 1.0
    # the error is formed on the strided views only; its colour range comes from all entries
    error = (_strided(full, max_image) - _strided(exact, max_image)) / scale
    error_lim = _max_abs_diff(full, exact) / scale

    two_level = "coarse" in parts
    if two_level:
        fig = _new_figure(13.5, 8.0)
        axes = fig.subplots(2, 3, squeeze=False).ravel()
        top = [("local", r"local $M_{\mathrm{loc}}$"),
               ("coarse", r"coarse $M_0 = \Phi G_0 \Phi^T$")]
        for ax, (key, label) in zip(axes[:2], top, strict=True):
            if key in parts:
                _image(fig, ax, parts[key], label, max_image)
            else:
                ax.set_title(label, fontsize="medium")
                _no_data(ax, "not given")
                ax.set_xticks([])
                ax.set_yticks([])
        slots = {"full": axes[2], "exact": axes[3], "error": axes[4], "basis": axes[5]}
    else:
        panels = 4 if Phi is not None else 3
        fig = _new_figure(4.5 * panels, 4.2)
        axes = fig.subplots(1, panels, squeeze=False).ravel()
        slots = {"full": axes[0], "exact": axes[1], "error": axes[2]}
        if Phi is not None:
            slots["basis"] = axes[3]
    # the learned operator and the exact inverse get separate colour scales (see Notes)
    _image(fig, slots["full"], full, r"learned $M_\theta^{-1}$", max_image)
    _image(fig, slots["exact"], exact, r"exact $A^{-1}$", max_image)
    _image(fig, slots["error"], error, r"$(M_\theta^{-1} - A^{-1}) / \max|A^{-1}|$",
           max_image, diverging=True, vmax=error_lim, shape=(n, n))
    if "basis" in slots:
        if Phi is not None:
            _basis_lines(slots["basis"], Phi, xs)
        else:
            slots["basis"].set_title(r"coarse basis $\phi_j$", fontsize="medium")
            _no_data(slots["basis"], "no coarse basis given")
            slots["basis"].set_axis_off()
    return _save(fig, path, dpi, title)


def plot_learned_blocks(
    local_blocks: Sequence[ArrayLike],
    coarse_block: ArrayLike | None,
    path: PathLike | None,
    title: str | None = None,
    *,
    max_blocks: int = 8,
    dpi: int = DEFAULT_DPI,
) -> Path | Figure:
    """The learned local blocks ``G_i = Q_i K_i^T`` and the coarse block ``G_0`` (Fig. 5 / A.9).

    Parameters
    ----------
    local_blocks : sequence of array_like
        ``G_i`` (``n_i x n_i``; sizes may differ) for every subdomain, in
        subdomain order.
    coarse_block : array_like or None
        ``G_0 = Q_0 K_0^T`` (``n0 x n0``), or ``None`` for a one-level model.
    path : str, path-like or None
        Where to write the PNG; ``None`` returns the figure instead.
    title : str, optional
        Figure title.
    max_blocks : int
        At most this many local blocks are drawn, evenly spread over the
        subdomains (always including the first and the last).  Panels are
        titled ``G_i`` with the paper's 1-based subdomain number ``i`` (list
        entry ``i - 1``), so that ``G_0`` is the coarse block.
    dpi : int
        Resolution of the PNG.

    Returns
    -------
    pathlib.Path or matplotlib.figure.Figure
        ``path``, or the figure when ``path`` is None.

    Notes
    -----
    Panels are laid out in one row for up to five panels, otherwise in two
    rows.  Each block has its own colour bar and a diverging colour map
    centred at zero, since learned blocks take both signs; the axes are the
    row and column indices within the subdomain (or the coarse space).
    """
    if max_blocks < 1:
        raise ValueError(f"max_blocks must be >= 1, got {max_blocks}")
    blocks = [_matrix(G, f"local_blocks[{i}]") for i, G in enumerate(local_blocks)]
    N = len(blocks)
    shown = _chosen_blocks(N, max_blocks)
    panels: list[tuple[str, Any]] = [(rf"$G_{{{i + 1}}}$ ({blocks[i].shape[0]}"
                                      rf"$\times${blocks[i].shape[1]})", blocks[i])
                                     for i in shown]
    if coarse_block is not None:
        G0 = _matrix(coarse_block, "coarse_block")
        panels.append((rf"coarse $G_0$ ({G0.shape[0]}$\times${G0.shape[1]})", G0))
    if not panels:
        raise ValueError("nothing to plot: no local blocks and no coarse block")
    total = len(panels)
    nrows, ncols = _grid(total, 5 if total <= 5 else math.ceil(total / 2))
    fig = _new_figure(2.9 * ncols + 0.3, 2.7 * nrows + (0.5 if title else 0.2))
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, (label, G) in zip(axes, panels, strict=False):
        _image(fig, ax, G, label, MAX_IMAGE, diverging=True, xlabel="local column",
               ylabel="local row", labelsize="x-small")
        ax.tick_params(labelsize="x-small")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(MaxNLocator(4, integer=True))
    for ax in axes[total:]:
        ax.set_axis_off()
    if N > len(shown):
        fig.text(0.01, 0.005, f"{len(shown)} of {N} local blocks shown", fontsize="x-small",
                 color="0.4")
    return _save(fig, path, dpi, title)


def plot_coarse_basis_transpose(
    Phi: ArrayLike | sp.spmatrix,
    path: PathLike | None,
    title: str | None = None,
    *,
    max_image: int = MAX_IMAGE,
    dpi: int = DEFAULT_DPI,
) -> Path | Figure:
    """``Phi^T`` as an image: one row per coarse basis function (paper Fig. 6 / A.10).

    Parameters
    ----------
    Phi : (n, n0) matrix, dense or scipy sparse
        Coarse interpolation.
    path : str, path-like or None
        Where to write the PNG; ``None`` returns the figure instead.
    title : str, optional
        Figure title.
    max_image : int
        Longest side drawn without striding, see the module notes.
    dpi : int
        Resolution of the PNG.

    Returns
    -------
    pathlib.Path or matplotlib.figure.Figure
        ``path``, or the figure when ``path`` is None.
    """
    Phi = _matrix(Phi, "Phi")
    PhiT = Phi.T.tocsr() if sp.issparse(Phi) else Phi.T
    n0, n = PhiT.shape
    fig = _new_figure(8.0, min(max(2.6, 0.28 * n0 + 1.4), 8.0))
    ax = fig.add_subplot()
    vmin = min(0.0, _finite_range(PhiT)[0] or 0.0)
    _image(fig, ax, PhiT, rf"$\Phi^T$ ({n0} $\times$ {n})", max_image, vmin=vmin, aspect="auto",
           xlabel="fine dof index", ylabel="coarse function $j$", labelsize="medium")
    ax.yaxis.set_major_locator(MaxNLocator(min(n0, 10), integer=True))
    return _save(fig, path, dpi, title)


# -- result tables -------------------------------------------------------------------------------
def _series(rows: Sequence[Mapping[str, Any]], xkey: str, ykey: str) -> tuple[np.ndarray, ...]:
    xs = np.array([_scalar(r.get(xkey)) for r in rows])
    ys = np.array([_scalar(r.get(ykey)) for r in rows])
    order = np.argsort(xs, kind="stable")
    return _positive(xs[order], ys[order])


def _mark_failed(ax: Any, rows: Sequence[Mapping[str, Any]], xkey: str, ykey: str, color: str,
                 name: str) -> bool:
    """A cross over every drawn point of a run whose ``"status"`` is not "finished"."""
    by_status: dict[str, list] = {}
    for row in rows:
        status = _failed(row.get("status"))
        if status:
            by_status.setdefault(status, []).append(row)
    drawn = False
    for status, failed_rows in by_status.items():
        x, y = _series(failed_rows, xkey, ykey)
        if x.size:
            ax.plot(x, y, ls="none", marker=_FAILED_MARKER, ms=9, color=color, mec="black",
                    mew=0.6, label=f"{name} ({status})" if name else status)
            drawn = True
    return drawn


def _loglog_panel(ax: Any, drawn: bool, xlabel: str, ylabel: str) -> None:
    if drawn:
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.grid(True, which="major", alpha=0.4)
        ax.grid(True, which="minor", alpha=0.15)
    else:
        _no_data(ax)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    _legend(ax, fontsize="small")


def plot_sweep(
    results: Sequence[Mapping[str, Any]],
    path: PathLike | None,
    title: str | None = None,
    *,
    dpi: int = DEFAULT_DPI,
) -> Path | Figure:
    """Learning-rate sweep: validation wMSE and operator error against the learning rate.

    Parameters
    ----------
    results : sequence of mapping
        One row per run with keys ``"lr"``, ``"model"``, ``"val_wmse"`` and
        ``"operator_fro_error"``; optionally ``"best_rank_fro_error"``, drawn
        as a dotted reference line in the model's colour
        (:func:`method_color`), and ``"status"``: the points of a run that did
        not finish (e.g. ``"diverged"``) are crossed, with a legend entry
        ``"<model> (<status>)"``.  Missing, None, NaN or non-positive values
        are left out.
    path : str, path-like or None
        Where to write the PNG; ``None`` returns the figure instead.
    title : str, optional
        Figure title.
    dpi : int
        Resolution of the PNG.

    Returns
    -------
    pathlib.Path or matplotlib.figure.Figure
        ``path``, or the figure when ``path`` is None.
    """
    if not results:
        raise ValueError("results must contain at least one row")
    for i, row in enumerate(results):
        for key in ("lr", "model"):
            if key not in row:
                raise ValueError(f"results[{i}] has no {key!r} entry")
    fig = _new_figure(11.0, 4.3)
    ax_mse, ax_fro = fig.subplots(1, 2)
    drawn_mse = drawn_fro = False
    groups = _group(results, "model")
    colors = _method_colors(list(groups))
    for model, rows in groups.items():
        color = colors[model]
        lr, v = _series(rows, "lr", "val_wmse")
        if lr.size:
            ax_mse.plot(lr, v, "-o", color=color, ms=4, label=model)
            _mark_failed(ax_mse, rows, "lr", "val_wmse", color, model)
            drawn_mse = True
        lr, e = _series(rows, "lr", "operator_fro_error")
        if lr.size:
            ax_fro.plot(lr, e, "-o", color=color, ms=4, label=model)
            _mark_failed(ax_fro, rows, "lr", "operator_fro_error", color, model)
            drawn_fro = True
        lr, b = _series(rows, "lr", "best_rank_fro_error")
        if lr.size:
            ax_fro.plot(lr, b, ":", color=color, lw=1.2, label=f"{model}: best rank-r")
            drawn_fro = True
    _loglog_panel(ax_mse, drawn_mse, "learning rate", "final validation wMSE")
    _loglog_panel(ax_fro, drawn_fro, "learning rate", r"$\|M_\theta^{-1} - A^{-1}\|_F$")
    return _save(fig, path, dpi, title)


def plot_scaling(
    results: Sequence[Mapping[str, Any]],
    path: PathLike | None,
    title: str | None = None,
    *,
    model: str = "schwarz",
    dpi: int = DEFAULT_DPI,
) -> Path | Figure:
    """Scaling with the problem size: validation wMSE and operator errors against ``n``.

    Parameters
    ----------
    results : sequence of mapping
        One row per problem size with keys ``"n"``, ``"val_wmse"``,
        ``"operator_fro_error"`` and ``"best_rank_fro_error"``; an optional
        ``"model"`` key draws one line per model, and an optional
        ``"status"`` crosses the points of runs that did not finish (e.g.
        ``"diverged"``).  Entries may be missing, None or NaN (not computed);
        those points are left out.
    path : str, path-like or None
        Where to write the PNG; ``None`` returns the figure instead.
    title : str, optional
        Figure title.
    model : str, default "schwarz"
        The model of rows without a ``"model"`` entry; it sets their colour
        (:func:`method_color`; ``ddops scaling`` studies the Schwarz attention
        model).
    dpi : int
        Resolution of the PNG.

    Returns
    -------
    pathlib.Path or matplotlib.figure.Figure
        ``path``, or the figure when ``path`` is None.

    Notes
    -----
    Left: final validation wMSE.  Right: the learned operator's Frobenius
    error (solid) and the best rank-r error of ``A^{-1}`` (dotted, hollow
    markers).  Both axes are logarithmic; the ``n`` ticks are the sizes in
    ``results`` when there are at most twelve of them.
    """
    if not results:
        raise ValueError("results must contain at least one row")
    for i, row in enumerate(results):
        if "n" not in row:
            raise ValueError(f"results[{i}] has no 'n' entry")
    fig = _new_figure(11.0, 4.3)
    ax_mse, ax_fro = fig.subplots(1, 2)
    drawn_mse = drawn_fro = False
    if not isinstance(model, str):
        raise TypeError(f"model must be a string, got {type(model).__name__}")
    groups = _group(results, "model")
    colors = _method_colors([name or model for name in groups])
    for name, rows in groups.items():
        prefix = f"{name}: " if name else ""
        color = colors[name or model]
        n, v = _series(rows, "n", "val_wmse")
        if n.size:
            ax_mse.plot(n, v, "-o", color=color, ms=4, label=name or None)
            _mark_failed(ax_mse, rows, "n", "val_wmse", color, name)
            drawn_mse = True
        n, e = _series(rows, "n", "operator_fro_error")
        if n.size:
            ax_fro.plot(n, e, "-o", color=color, ms=4, label=f"{prefix}learned operator")
            _mark_failed(ax_fro, rows, "n", "operator_fro_error", color, name)
            drawn_fro = True
        n, b = _series(rows, "n", "best_rank_fro_error")
        if n.size:
            ax_fro.plot(n, b, ":o", color=color, ms=4, mfc="none",
                        label=f"{prefix}best rank-r")
            drawn_fro = True
    _loglog_panel(ax_mse, drawn_mse, "n", "final validation wMSE")
    _loglog_panel(ax_fro, drawn_fro, "n", "Frobenius error")
    sizes = np.unique([v for v in (_scalar(r.get("n")) for r in results)
                       if np.isfinite(v) and v > 0])
    if 0 < sizes.size <= 12:
        for ax, drawn in ((ax_mse, drawn_mse), (ax_fro, drawn_fro)):
            if drawn:
                ax.set_xticks(sizes)
                ax.set_xticklabels([f"{s:g}" for s in sizes], fontsize="small")
                ax.xaxis.set_minor_locator(NullLocator())
    return _save(fig, path, dpi, title)


def plot_residual_histories(
    histories: Mapping[str, ArrayLike],
    path: PathLike | None,
    title: str | None = None,
    *,
    converged: Mapping[str, bool] | None = None,
    rtol: float | None = None,
    dpi: int = DEFAULT_DPI,
) -> Path | Figure:
    """Convergence of iterative solvers: relative residual norm per iteration.

    Parameters
    ----------
    histories : mapping of str to array_like
        ``method name -> 1-D array`` of relative residual norms, entry ``k``
        after ``k`` iterations.  Non-finite or non-positive entries are left out.
    path : str, path-like or None
        Where to write the PNG; ``None`` returns the figure instead.
    title : str, optional
        Figure title.
    converged : mapping of str to bool, optional
        ``method name -> whether the solver reached its tolerance`` (e.g. the
        Krylov ``info == 0``), for some or all of the methods.
    rtol : float, optional
        For methods not in ``converged``: a history whose last entry is above
        ``rtol`` (or not finite) did not converge.  Without ``converged`` and
        ``rtol`` every run counts as converged.
    dpi : int
        Resolution of the PNG.

    Returns
    -------
    pathlib.Path or matplotlib.figure.Figure
        ``path``, or the figure when ``path`` is None.

    Raises
    ------
    ValueError
        For an empty ``histories``, a ``converged`` entry of a method without
        a history, or an ``rtol`` that is not finite and positive.

    Notes
    -----
    One colour and one hollow marker per method (:func:`method_color`; markers in
    drawing order).  A run that did not converge is drawn dashed, and its legend entry
    reads ``"<name> (not converged, <k> it.)"`` instead of ``"<name> (<k> it.)"``.  A
    history equal to an earlier one (to a relative 1e-3 at every iteration, which a
    logarithmic axis does not tell apart; CG without a preconditioner and with Jacobi on
    a matrix with a constant diagonal) would hide it: the earlier one is drawn as a wide
    band without markers (in the legend too), the later one inside the band, and the
    later legend entry adds ``"same residuals as <earlier name>"``.
    """
    if not histories:
        raise ValueError("histories must contain at least one method")
    converged = {} if converged is None else dict(converged)
    unknown = [name for name in converged if name not in histories]
    if unknown:
        raise ValueError(f"converged names methods without a history: {unknown}")
    if rtol is not None:
        rtol = check_positive_float("rtol", rtol)
    fig = _new_figure(7.0, 4.5)
    ax = fig.add_subplot()
    drawn: list[tuple[str, np.ndarray, np.ndarray, Any]] = []
    colors = _method_colors([str(name) for name in histories])
    for k, (name, res) in enumerate(histories.items()):
        r = _float_array(res, f"histories[{name!r}]")
        iterations = r.size - 1
        if name in converged:
            ok = bool(converged[name])
        elif rtol is not None:
            ok = r.size > 0 and bool(np.isfinite(r[-1]) and r[-1] <= rtol)
        else:
            ok = True
        it, r = _positive(np.arange(r.size, dtype=np.float64), r)
        if not it.size:
            continue
        label = f"{name} ({iterations} it.)" if ok else (
            f"{name} (not converged, {iterations} it.)")
        twin = next((d for d in drawn if d[1].size == it.size and np.array_equal(d[1], it)
                     and np.allclose(d[2], r, rtol=_SAME_RTOL, atol=0.0)), None)
        if twin is not None:
            label = f"{label[:-1]}, same residuals as {twin[0]})"
            # the earlier curve becomes a wide band (in the legend too) with this one inside
            twin[3].set(linewidth=_SHARED_BAND_LW, solid_capstyle="round", zorder=1.5,
                        marker="None")
        step = max(1, math.ceil(it.size / _RESIDUAL_MARKS))
        (line,) = ax.plot(it, r, "-" if ok else _NOT_CONVERGED_LS, color=colors[str(name)],
                          marker=_RESIDUAL_MARKERS[k % len(_RESIDUAL_MARKERS)], ms=4.5,
                          mfc="none", mew=1.0, markevery=(k % step, step), lw=1.3,
                          label=label, zorder=2.0 + k / 100)
        drawn.append((str(name), it, r, line))
    if drawn:
        ax.set_yscale("log")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, which="major", alpha=0.4)
        ax.grid(True, which="minor", alpha=0.15)
    else:
        _no_data(ax)
    ax.set_xlabel("iteration")
    ax.set_ylabel(r"relative residual $\|r_k\| / \|r_0\|$")
    _legend(ax, fontsize="small")
    return _save(fig, path, dpi, title)


# -- grid problems (2D, and slices of 3D) --------------------------------------------------------
def _grid_shape(shape: Sequence[int], n: int) -> tuple[int, ...]:
    shape = tuple(int(s) for s in shape)
    if len(shape) not in (2, 3) or min(shape) < 1:
        raise ValueError(f"shape must be 2 or 3 positive sizes (points per direction), "
                         f"got {shape}")
    if math.prod(shape) != n:
        raise ValueError(f"shape {shape} holds {math.prod(shape)} points, the fields have {n}")
    return shape


def _as_image(field: np.ndarray, shape: tuple[int, ...], plane: int | None) -> np.ndarray:
    """The field on the grid (x fastest) as an ``ny x nx`` image; 3D: the plane ``z = plane``."""
    if len(shape) == 2:
        return field.reshape(shape[1], shape[0])
    cube = field.reshape(shape[2], shape[1], shape[0])
    return cube[shape[2] // 2 if plane is None else plane]


def plot_grid_fields(
    shape: Sequence[int],
    fields: Sequence[ArrayLike],
    titles: Sequence[str],
    path: PathLike | None,
    title: str | None = None,
    *,
    ncols: int = 4,
    diverging: bool = True,
    planes: Sequence[int | None] | None = None,
    dpi: int = DEFAULT_DPI,
) -> Path | Figure:
    """Vectors on a 2D grid (or a plane of a 3D grid) drawn as images, one panel each.

    Parameters
    ----------
    shape : sequence of int
        Points per direction, ``(nx, ny)`` or ``(nx, ny, nz)``, lexicographic
        numbering with ``x`` fastest (the numbering of
        :func:`ddops.problems.poisson_2d`).
    fields : sequence of array_like
        Vectors of ``prod(shape)`` values.
    titles : sequence of str
        One title per field.
    path : str, path-like or None
        Where to write the PNG; ``None`` returns the figure instead.
    title : str, optional
        Figure title.
    ncols : int
        Panels per row.
    diverging : bool
        A colour map centred at zero (``RdBu_r``, limits ``+-max|v|``), else
        ``viridis`` over the finite range.  Each panel has its own colour bar.
    planes : sequence of int or None, optional
        3D only: the ``z`` plane drawn for each field (default the middle one).
    dpi : int
        Resolution of the PNG.

    Returns
    -------
    pathlib.Path or matplotlib.figure.Figure
    """
    if len(fields) != len(titles):
        raise ValueError(f"fields and titles must have the same length, got {len(fields)} and "
                         f"{len(titles)}")
    if not fields:
        raise ValueError("nothing to plot: no fields")
    values = [_float_array(f, f"fields[{i}]").ravel() for i, f in enumerate(fields)]
    shape = _grid_shape(shape, values[0].size)
    for i, v in enumerate(values):
        if v.size != values[0].size:
            raise ValueError(f"fields[{i}] has {v.size} values, fields[0] {values[0].size}")
    planes = [None] * len(values) if planes is None else list(planes)
    nrows, cols = _grid(len(values), ncols)
    fig = _new_figure(3.1 * cols + 0.3, 2.8 * nrows + (0.5 if title else 0.2))
    axes = fig.subplots(nrows, cols, squeeze=False).ravel()
    for ax, v, label, plane in zip(axes, values, titles, planes, strict=False):
        img = _as_image(v, shape, plane)
        if len(shape) == 3:
            label = f"{label} (z plane {shape[2] // 2 if plane is None else plane})"
        _image(fig, ax, img, label, MAX_IMAGE, diverging=diverging, xlabel="x index",
               ylabel="y index", labelsize="x-small")
        ax.invert_yaxis()  # y grows upwards, as on the unit square
        ax.tick_params(labelsize="x-small")
    for ax in axes[len(values):]:
        ax.set_axis_off()
    return _save(fig, path, dpi, title)


def plot_grid_solutions(
    shape: Sequence[int],
    F: ArrayLike,
    U: ArrayLike,
    P: ArrayLike,
    path: PathLike | None,
    title: str | None = None,
    *,
    dpi: int = DEFAULT_DPI,
) -> Path | Figure:
    """Right-hand sides, exact solutions, predictions and errors on the grid (one row each).

    ``F``, ``U`` and ``P`` are ``n x k`` blocks (one sample per column,
    ``n = prod(shape)``); row ``j`` of the figure shows ``f_j``, ``u_j``,
    ``M f_j`` and ``M f_j - u_j``.
    """
    F, U, P = (_columns(X, name) for X, name in ((F, "F"), (U, "U"), (P, "P")))
    if not (F.shape == U.shape == P.shape):
        raise ValueError(f"F, U and P must have the same shape, got {F.shape}, {U.shape}, "
                         f"{P.shape}")
    fields, titles = [], []
    for j in range(F.shape[1]):
        fields += [F[:, j], U[:, j], P[:, j], P[:, j] - U[:, j]]
        titles += [f"f{j}", f"u{j} = A^-1 f{j}", f"M f{j}", f"M f{j} - u{j}"]
    return plot_grid_fields(shape, fields, titles, path, title, ncols=4, dpi=dpi)


def plot_grid_rows(
    shape: Sequence[int],
    points: Sequence[int],
    rows_M: ArrayLike,
    rows_exact: ArrayLike,
    path: PathLike | None,
    title: str | None = None,
    *,
    dpi: int = DEFAULT_DPI,
) -> Path | Figure:
    """Rows of the learned operator ``M`` against rows of ``A^{-1}``, drawn on the grid.

    Row ``i`` of an ``n x n`` operator is a field on the grid (its entry ``j``
    is the response at ``i`` to a unit source at ``j``), so the learned
    Green's function can be compared with the exact one.

    Parameters
    ----------
    shape : sequence of int
        Points per direction (see :func:`plot_grid_fields`).
    points : sequence of int
        The unknowns ``i`` whose rows are drawn (one figure row each; in 3D
        the ``z`` plane through the point is shown).
    rows_M, rows_exact : array_like
        ``n x len(points)``: column ``k`` is row ``points[k]`` of ``M``
        (``M^T e_i``) and of ``A^{-1}``.
    path : str, path-like or None
        Where to write the PNG; ``None`` returns the figure instead.
    title : str, optional
        Figure title.
    dpi : int
        Resolution of the PNG.
    """
    M = _columns(rows_M, "rows_M")
    X = _columns(rows_exact, "rows_exact")
    points = [int(p) for p in points]
    if M.shape != X.shape or M.shape[1] != len(points):
        raise ValueError(f"rows_M and rows_exact must be n x {len(points)} (one column per "
                         f"point), got {M.shape} and {X.shape}")
    shape = _grid_shape(shape, M.shape[0])
    fields, titles, planes = [], [], []
    for k, i in enumerate(points):
        where = np.unravel_index(i, shape[::-1])[::-1]
        at = "(" + ", ".join(map(str, where)) + ")"
        fields += [M[:, k], X[:, k], M[:, k] - X[:, k]]
        titles += [f"row of M at {at}", f"row of A^-1 at {at}", "difference"]
        planes += [int(where[2]) if len(shape) == 3 else None] * 3
    return plot_grid_fields(shape, fields, titles, path, title, ncols=3, planes=planes,
                            dpi=dpi)
