"""Every figure function writes a readable PNG of the expected size, also for edge cases."""

import sys

import matplotlib.image as mpimg
import numpy as np
import pytest
import scipy.sparse as sp
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure

import ddops
from ddops.experiments import plotting

# matplotlib's user-facing warnings (empty legend, log axis without positive data, ...)
# point at a plotting bug here, so they fail the tests.
pytestmark = pytest.mark.filterwarnings("error::UserWarning")

DPI = 40
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def check_png(path, returned=None):
    """The file exists, is a PNG, and decodes; returns (height, width)."""
    if returned is not None:
        assert returned == path
    assert path.is_file() and path.stat().st_size > 0
    with open(path, "rb") as fh:
        assert fh.read(8) == PNG_MAGIC
    img = mpimg.imread(path)
    assert img.ndim == 3 and img.shape[2] in (3, 4)
    assert img.shape[0] >= 50 and img.shape[1] >= 50
    # not a blank canvas
    assert float(img[..., :3].min()) < 0.5
    return img.shape[:2]


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture(scope="module")
def small_model():
    d = ddops.Decomposition1D(n=32, subdomains=4, overlap=1, kind="element")
    op = ddops.SchwarzOperator(d, local_rank=2)
    Ainv = np.linalg.inv(ddops.poisson_1d(32).toarray())
    return d, op, Ainv


# -- training curves ---------------------------------------------------------------------------
def test_training_curves_several_models_nested_path(tmp_path, rng):
    steps = np.arange(1, 201)
    histories = {
        "Schwarz": {"step": steps, "train": np.exp(-steps / 50) + 1e-4,
                    "val_step": steps[::20], "val": np.exp(-steps[::20] / 50) + 2e-4},
        "global r=5": {"step": steps, "train": 0.3 + 0.01 * rng.random(200)},
    }
    path = tmp_path / "deep" / "er" / "train.png"
    out = plotting.plot_training_curves(histories, path, title="curves", dpi=DPI)
    h, w = check_png(path, out)
    assert (h, w) == (round(4.5 * DPI), round(7.0 * DPI))


def test_training_curves_one_model_val_without_steps_and_nan(tmp_path):
    steps = np.arange(10)
    val = np.linspace(1, 0.1, 10)
    val[3] = np.nan
    train = np.linspace(1, 0.05, 10)
    train[0] = 0.0  # not drawable on a log axis: left out
    path = tmp_path / "one.png"
    check_png(path, plotting.plot_training_curves(
        {"only": {"step": steps, "train": train, "val": val}}, path, ylabel="MSE", dpi=DPI))


def test_training_curves_reject_bad_histories(tmp_path):
    with pytest.raises(ValueError, match="differ in length"):
        plotting.plot_training_curves({"m": {"step": np.arange(3), "train": np.ones(4)}},
                                      tmp_path / "x.png")
    with pytest.raises(ValueError, match="val_step"):
        plotting.plot_training_curves(
            {"m": {"step": np.arange(3), "train": np.ones(3), "val": np.ones(2)}},
            tmp_path / "x.png")
    with pytest.raises(ValueError):
        plotting.plot_training_curves({}, tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


# -- solutions ------------------------------------------------------------------------------------
def test_solution_grid_shape():
    assert plotting._grid(16, 4) == (4, 4)  # the default 16 samples: a 4 x 4 grid
    assert plotting._grid(12, 4) == (3, 4)
    assert plotting._grid(5, 4) == (2, 4)
    assert plotting._grid(3, 4) == (1, 3)
    assert plotting._grid(1, 4) == (1, 1)


def test_solutions_capped_panels_and_fewer_samples(tmp_path, small_model, rng):
    d, _, Ainv = small_model
    x = d.coordinates
    F = rng.standard_normal((x.size, 20))
    U = Ainv @ F
    P = U + 0.01 * rng.standard_normal(U.shape) * np.abs(U).max()
    capped = tmp_path / "sol5.png"
    h5, w5 = check_png(capped, plotting.plot_solutions(x, F, U, P, capped, title="t",
                                                       max_panels=5, dpi=DPI))
    assert (h5, w5) == (round((2.3 * 2 + 0.5) * DPI), round((3.0 * 4 + 0.4) * DPI))
    single = tmp_path / "sol1.png"  # B = 1 given as 1-D arrays, a zero prediction
    h1, w1 = check_png(single, plotting.plot_solutions(x, F[:, 0], U[:, 0], np.zeros(x.size),
                                                       single, dpi=DPI))
    assert (h1, w1) == (round((2.3 + 0.5) * DPI), round((3.0 + 0.4) * DPI))


def test_solutions_reject_mismatched_shapes(tmp_path):
    x = np.linspace(0, 1, 5)
    with pytest.raises(ValueError, match="same shape"):
        plotting.plot_solutions(x, np.ones((5, 2)), np.ones((5, 2)), np.ones((5, 3)),
                                tmp_path / "s.png")
    with pytest.raises(ValueError, match="rows"):
        plotting.plot_solutions(x, np.ones((4, 2)), np.ones((4, 2)), np.ones((4, 2)),
                                tmp_path / "s.png")


# -- operator matrices ----------------------------------------------------------------------------
def test_operator_matrices_two_level(tmp_path, small_model):
    d, op, Ainv = small_model
    local = op.local_part().to_dense()
    coarse = op.coarse_part()  # operators are assembled with their to_dense()
    path = tmp_path / "ops.png"
    out = plotting.plot_operator_matrices(local, coarse, op, Ainv, op.coarse_matrix,
                                          path, title="two-level", x=d.coordinates, dpi=DPI)
    h, w = check_png(path, out)
    assert h > 0.5 * w  # two rows


def test_operator_matrices_one_level_and_global(tmp_path, small_model, rng):
    d, op, Ainv = small_model
    n = Ainv.shape[0]
    full = Ainv + 1e-3 * rng.standard_normal((n, n))
    full[0, 1] = np.nan  # a diverged entry must not break the colour limits
    glob = tmp_path / "global.png"
    hg, wg = check_png(glob, plotting.plot_operator_matrices(None, None, full, Ainv, None, glob,
                                                             dpi=DPI))
    assert wg > 2.5 * hg  # a single row of three panels
    # one level with a basis to show; sparse inputs are accepted
    one = tmp_path / "onelevel.png"
    full[0, 1] = 0.0
    check_png(one, plotting.plot_operator_matrices(sp.csr_matrix(full), None, full,
                                                   sp.csr_matrix(Ainv), op.coarse_matrix.toarray(),
                                                   one, dpi=DPI))


def test_operator_matrices_strided_large_input_without_basis(tmp_path, rng):
    n = 50
    A = rng.standard_normal((n, n))
    path = tmp_path / "strided.png"  # coarse part but no Phi: the basis panel stays empty
    check_png(path, plotting.plot_operator_matrices(A, A, A, A.T, None, path, max_image=16,
                                                    dpi=DPI))
    img = plotting._strided(A, 16)
    assert max(img.shape) <= 16
    np.testing.assert_array_equal(img, A[::4, ::4])
    np.testing.assert_array_equal(plotting._strided(sp.csr_matrix(A), 16), A[::4, ::4])


def test_operator_matrices_reject_bad_shapes(tmp_path):
    with pytest.raises(ValueError, match="square"):
        plotting.plot_operator_matrices(None, None, np.ones((3, 3)), np.ones((4, 4)), None,
                                        tmp_path / "o.png")
    with pytest.raises(ValueError, match="Phi"):
        plotting.plot_operator_matrices(None, np.ones((3, 3)), np.ones((3, 3)), np.ones((3, 3)),
                                        np.ones((4, 2)), tmp_path / "o.png")


# -- learned blocks and Phi^T -------------------------------------------------------------------
def test_block_selection_and_layout():
    np.testing.assert_array_equal(plotting._chosen_blocks(5, 8), np.arange(5))
    chosen = plotting._chosen_blocks(64, 8)
    assert chosen.size == 8 and chosen[0] == 0 and chosen[-1] == 63
    assert np.all(np.diff(chosen) > 0)
    assert plotting._grid(9, 5) == (2, 5)  # 8 local blocks + coarse


def test_learned_blocks_many_and_uneven(tmp_path, rng):
    blocks = [rng.standard_normal((6 + i % 2, 6 + i % 2)) for i in range(11)]
    path = tmp_path / "blocks.png"
    h, w = check_png(path, plotting.plot_learned_blocks(blocks, rng.standard_normal((4, 4)),
                                                        path, title="blocks", max_blocks=3,
                                                        dpi=DPI))
    assert w > 2 * h  # 3 of 11 local blocks + coarse: one row


def test_learned_blocks_from_operator_without_coarse(tmp_path, small_model):
    _, op, _ = small_model
    params = op.get_params()
    blocks = [q @ k.T for q, k in zip(params["Q"], params["K"], strict=True)]
    path = tmp_path / "blocks_local.png"
    check_png(path, plotting.plot_learned_blocks(blocks[:2], None, path, dpi=DPI))
    with pytest.raises(ValueError, match="nothing to plot"):
        plotting.plot_learned_blocks([], None, tmp_path / "none.png")


@pytest.mark.parametrize("dense", [False, True])
def test_coarse_basis_transpose(tmp_path, small_model, dense):
    _, op, _ = small_model
    Phi = op.coarse_matrix.toarray() if dense else op.coarse_matrix
    path = tmp_path / f"phit_{dense}.png"
    h, w = check_png(path, plotting.plot_coarse_basis_transpose(Phi, path, title="Phi^T",
                                                                dpi=DPI))
    assert w > h


# -- result tables --------------------------------------------------------------------------------
def test_sweep_with_missing_values(tmp_path):
    results = [{"lr": lr, "model": m, "val_wmse": v * (1 + k), "operator_fro_error": e,
                "best_rank_fro_error": 2.5e-4}
               for k, lr in enumerate([1e-4, 1e-3, 1e-2])
               for m, v, e in [("Schwarz", 1e-3, 0.05), ("global 5", 0.3, None)]]
    results[0]["val_wmse"] = float("nan")
    path = tmp_path / "sweep.png"
    h, w = check_png(path, plotting.plot_sweep(results, path, dpi=DPI))
    assert w > 2 * h
    with pytest.raises(ValueError, match="model"):
        plotting.plot_sweep([{"lr": 1e-3}], tmp_path / "bad.png")


def test_scaling_with_nan_and_uncomputed_entries(tmp_path):
    nan = float("nan")
    results = [
        {"n": 256, "val_wmse": 2e-4, "operator_fro_error": 0.05, "best_rank_fro_error": 2e-4},
        {"n": 512, "val_wmse": nan, "operator_fro_error": 0.06, "best_rank_fro_error": None},
        {"n": 1024, "val_wmse": 5e-4, "operator_fro_error": None, "best_rank_fro_error": nan},
        {"n": 2048, "val_wmse": 6e-4},
    ]
    path = tmp_path / "scaling.png"
    check_png(path, plotting.plot_scaling(results, path, dpi=DPI))
    # a column that was never computed leaves its panel empty but still writes the figure
    empty = tmp_path / "scaling_empty.png"
    check_png(empty, plotting.plot_scaling(
        [{"n": 256, "val_wmse": 1e-3, "operator_fro_error": nan, "best_rank_fro_error": None}],
        empty, dpi=DPI))


def test_residual_histories_without_pyplot(tmp_path):
    pyplot_before = "matplotlib.pyplot" in sys.modules
    histories = {
        "CG": np.logspace(0, -10, 120),
        "PCG (Schwarz)": np.array([1.0, 1e-2, 1e-5, 1e-9, 0.0]),  # exact zero at the end
        "GMRES": [1.0, 0.5, 0.1],
    }
    path = tmp_path / "res.png"
    check_png(path, plotting.plot_residual_histories(histories, path, title="residuals",
                                                     dpi=DPI))
    # the module draws on its own Agg canvases and never touches pyplot or the backend
    assert pyplot_before or "matplotlib.pyplot" not in sys.modules


# -- what the figures show (inspected on the returned Figure) -------------------------------------
def images(fig):
    """``(axes, image)`` for every matrix image of a figure (colour bars are not images)."""
    return [(ax, im) for ax in fig.axes for im in ax.get_images()]


def image_by_title(fig, text):
    (found,) = [(ax, im) for ax, im in images(fig) if text in ax.get_title()]
    return found


def labelled_lines(fig):
    """``label -> RGBA colour`` of every line that has a legend label."""
    return {line.get_label(): to_rgba(line.get_color()) for ax in fig.axes
            for line in ax.get_lines() if not line.get_label().startswith("_")}


def legend_texts(ax):
    legend = ax.get_legend()
    return [] if legend is None else [t.get_text() for t in legend.get_texts()]


def test_path_none_returns_the_figure(tmp_path):
    fig = plotting.plot_residual_histories({"CG": [1.0, 0.1]}, None, title="t")
    assert isinstance(fig, Figure) and fig.get_suptitle() == "t"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("two_level", [True, False])
def test_matrix_panels_axes_and_own_colour_scales(small_model, rng, two_level):
    d, op, Ainv = small_model
    n = Ainv.shape[0]
    # a learned operator with a much wider range than A^-1: it must not set A^-1's colour scale
    full = 3.0 * Ainv + 0.5 * rng.standard_normal((n, n))
    local = op.local_part().to_dense() if two_level else None
    coarse = op.coarse_part().to_dense() if two_level else None
    fig = plotting.plot_operator_matrices(local, coarse, full, Ainv,
                                          op.coarse_matrix if two_level else None, None)
    shown = images(fig)
    assert len(shown) == (5 if two_level else 3)
    # every matrix panel has its own colour bar and row/column axis labels
    bars = {id(im.colorbar) for _, im in shown}
    assert None not in {im.colorbar for _, im in shown} and len(bars) == len(shown)
    for ax, _ in shown:
        assert (ax.get_xlabel(), ax.get_ylabel()) == ("column index", "row index")
    _, exact = image_by_title(fig, "exact")
    assert (exact.norm.vmin, exact.norm.vmax) == (Ainv.min(), Ainv.max())
    _, learned = image_by_title(fig, "learned")
    assert (learned.norm.vmin, learned.norm.vmax) == (full.min(), full.max())
    _, error = image_by_title(fig, "(M")
    lim = np.abs(full - Ainv).max() / np.abs(Ainv).max()
    assert error.norm.vmax == pytest.approx(lim) and error.norm.vmin == -error.norm.vmax
    if two_level:
        _, im = image_by_title(fig, "local")
        assert (im.norm.vmin, im.norm.vmax) == (local.min(), local.max())


def test_colour_limits_include_entries_that_striding_skips(rng):
    A = rng.random((50, 50))
    A[1, 2] = 100.0  # rows and columns 1, 2 are not drawn at stride 4
    B = A.copy()
    B[1, 2] = 0.5
    fig = plotting.plot_operator_matrices(A, A, A, B, None, None, max_image=16)
    assert all(im.get_array().shape == (13, 13) for _, im in images(fig))
    for title in ("local", "coarse", "learned"):
        assert image_by_title(fig, title)[1].norm.vmax == 100.0
    assert image_by_title(fig, "exact")[1].norm.vmax == B.max()
    error = image_by_title(fig, "(M")[1]
    assert error.norm.vmax == pytest.approx(99.5 / B.max())


def test_learned_blocks_and_phi_transpose_axes(small_model, rng):
    _, op, _ = small_model
    blocks = [rng.standard_normal((6, 6)) for _ in range(3)]
    fig = plotting.plot_learned_blocks(blocks, rng.standard_normal((4, 4)), None)
    shown = images(fig)
    assert len(shown) == 4
    for ax, im in shown:
        assert (ax.get_xlabel(), ax.get_ylabel()) == ("local column", "local row")
        assert im.colorbar is not None and im.norm.vmin == -im.norm.vmax
    fig = plotting.plot_coarse_basis_transpose(op.coarse_matrix, None)
    ((ax, _),) = images(fig)
    assert ax.get_xlabel() == "fine dof index" and ax.get_ylabel().startswith("coarse function")


def test_one_colour_per_method_across_figures(small_model, rng):
    d, _, Ainv = small_model
    steps = np.arange(1, 11)
    loss = np.linspace(1, 0.1, 10)
    curves = plotting.plot_training_curves(
        {name: {"step": steps, "train": loss} for name in ("global_r39", "schwarz", "global_r5")},
        None)
    train = {label.split(" (")[0]: c for label, c in labelled_lines(curves).items()}
    assert len(set(train.values())) == 3  # three models, three colours
    # the sweep lists the models in another order: the colours stay with the names
    rows = [{"lr": lr, "model": m, "val_wmse": 1e-3, "operator_fro_error": 0.1}
            for m in ("schwarz", "global_r5", "global_r39") for lr in (1e-3, 1e-2)]
    sweep = labelled_lines(plotting.plot_sweep(rows, None))
    for name, colour in train.items():
        assert sweep[name] == colour
    # a sweep of one model, the scaling study (rows without a model) and the solutions
    alone = labelled_lines(plotting.plot_sweep([r for r in rows if r["model"] == "global_r5"],
                                               None))
    assert alone["global_r5"] == train["global_r5"]
    scaling = labelled_lines(plotting.plot_scaling(
        [{"n": 64, "val_wmse": 1e-3, "operator_fro_error": 0.1},
         {"n": 128, "val_wmse": 2e-3, "operator_fro_error": 0.2}], None))
    assert scaling["learned operator"] == train["schwarz"]
    x = d.coordinates
    F = rng.standard_normal((x.size, 2))
    sol = labelled_lines(plotting.plot_solutions(x, F, Ainv @ F, Ainv @ F, None,
                                                 model="global_r5"))
    assert sol["global_r5 prediction"] == train["global_r5"]
    # the precond methods: the same label, the same colour, whatever else is drawn
    a = labelled_lines(plotting.plot_residual_histories(
        {"no preconditioner": [1, 0.5], "two-level additive Schwarz": [1, 1e-9],
         "Schwarz attention, paper training": [1, 1e-8]}, None))
    b = labelled_lines(plotting.plot_residual_histories(
        {"pyamg smoothed aggregation": [1, 1e-8], "two-level additive Schwarz": [1, 1e-9]},
        None))
    assert a["two-level additive Schwarz (1 it.)"] == b["two-level additive Schwarz (1 it.)"]
    assert a["Schwarz attention, paper training (1 it.)"] == train["schwarz"]
    assert len(set(a.values())) == 3


def test_method_colors_are_distinct_within_a_figure():
    names = [f"method {k}" for k in range(9)]
    colours = plotting._method_colors(names)
    assert len(set(colours.values())) == 9
    assert plotting._method_colors(names[::-1]) == colours  # the order does not matter
    # a name alone gets its own colour, which the fixed table wins over
    assert plotting._method_colors(["method 3"])["method 3"] == plotting.method_color("method 3")
    assert plotting.method_color("Schwarz") == plotting.method_color("schwarz") == "C0"
    assert "C0" not in plotting._method_colors(names).values()
    with pytest.raises(TypeError, match="name"):
        plotting.method_color(3)


@pytest.mark.parametrize("how", ["converged", "rtol"])
def test_residual_histories_mark_runs_that_did_not_converge(how):
    histories = {"CG": np.logspace(0, -9, 10), "GMRES": np.logspace(0, -3, 30)}
    kwargs = {"converged": {"CG": True, "GMRES": False}} if how == "converged" else {
        "rtol": 1e-8}
    fig = plotting.plot_residual_histories(histories, None, **kwargs)
    (ax,) = fig.axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert lines["CG (9 it.)"].get_linestyle() == "-"
    assert lines["GMRES (not converged, 29 it.)"].get_linestyle() == "--"
    assert legend_texts(ax) == ["CG (9 it.)", "GMRES (not converged, 29 it.)"]
    # without the information every run is drawn as converged
    (ax,) = plotting.plot_residual_histories(histories, None).axes
    assert legend_texts(ax) == ["CG (9 it.)", "GMRES (29 it.)"]


def test_residual_histories_reject_bad_convergence_arguments(tmp_path):
    with pytest.raises(ValueError, match="converged"):
        plotting.plot_residual_histories({"CG": [1, 0.1]}, tmp_path / "r.png",
                                         converged={"BiCGStab": False})
    with pytest.raises(ValueError, match="rtol"):
        plotting.plot_residual_histories({"CG": [1, 0.1]}, tmp_path / "r.png", rtol=-1.0)
    assert not (tmp_path / "r.png").exists()


def test_training_curves_mark_a_diverged_run():
    steps = np.arange(1, 21)
    histories = {
        "schwarz": {"step": steps, "train": np.linspace(1, 0.1, 20), "status": "finished"},
        "global_r5": {"step": steps, "train": np.logspace(0, 30, 20), "status": "diverged",
                      "val_step": steps[::5], "val": np.logspace(0, 30, 4)},
    }
    fig = plotting.plot_training_curves(histories, None)
    (ax,) = fig.axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert lines["schwarz (train)"].get_linestyle() == "-"
    assert lines["global_r5 (train, diverged)"].get_linestyle() == ":"
    assert lines["global_r5 (val., diverged)"].get_linestyle() == "-."
    assert legend_texts(ax) == ["schwarz (train)", "global_r5 (train, diverged)",
                                "global_r5 (val., diverged)"]
    # the diverged run keeps its model's colour
    colours = labelled_lines(fig)
    assert colours["global_r5 (train, diverged)"] == to_rgba(plotting.method_color("global_r5"))


def test_sweep_and_scaling_cross_diverged_runs():
    rows = [{"lr": lr, "model": "schwarz", "val_wmse": v, "operator_fro_error": 0.1,
             "status": s}
            for lr, v, s in [(1e-3, 1e-3, "finished"), (1e-2, 5e-4, "finished"),
                             (1e-1, 3e2, "diverged")]]
    ax_mse, ax_fro = plotting.plot_sweep(rows, None).axes
    for ax in (ax_mse, ax_fro):
        assert "schwarz (diverged)" in legend_texts(ax)
        (cross,) = [line for line in ax.get_lines() if line.get_label() == "schwarz (diverged)"]
        np.testing.assert_array_equal(cross.get_xdata(), [1e-1])
        assert cross.get_marker() == "X"
        assert to_rgba(cross.get_color()) == to_rgba("C0")
    scaling = [{"n": n, "val_wmse": 1e-3, "operator_fro_error": 0.1, "status": s}
               for n, s in [(64, "finished"), (128, "diverged")]]
    ax_mse, _ = plotting.plot_scaling(scaling, None).axes
    (cross,) = [line for line in ax_mse.get_lines() if line.get_label() == "diverged"]
    np.testing.assert_array_equal(cross.get_xdata(), [128])
    # every run finished: no crosses, no extra legend entries
    ax_mse, _ = plotting.plot_sweep([dict(r, status="finished") for r in rows], None).axes
    assert legend_texts(ax_mse) == ["schwarz"]


def _pixels_of(fig, colour, exclude_legend=True, tol=12):
    """Pixels of the rendered axes area (legend excluded) within ``tol`` of ``colour``."""
    fig.canvas.draw()
    img = np.asarray(fig.canvas.buffer_rgba())[..., :3].astype(int)
    (ax,) = fig.axes
    height = img.shape[0]
    mask = np.zeros(img.shape[:2], dtype=bool)
    x0, y0, x1, y1 = ax.get_window_extent().extents
    mask[int(height - y1):int(height - y0), int(x0):int(x1)] = True
    if exclude_legend and ax.get_legend() is not None:
        x0, y0, x1, y1 = ax.get_legend().get_window_extent().extents
        mask[int(height - y1) - 2:int(height - y0) + 2, int(x0) - 2:int(x1) + 2] = False
    target = np.array([round(255 * c) for c in to_rgba(colour)[:3]])
    close = np.abs(img - target).max(axis=-1) <= tol
    return int(np.count_nonzero(close & mask))


@pytest.mark.parametrize("length", [12, 200])
def test_residual_histories_equal_curves_both_visible(length):
    # CG with Jacobi on a matrix of constant diagonal repeats CG's residuals exactly: the
    # "no preconditioner" curve, drawn first, must not disappear under Jacobi's
    res = np.logspace(0, -9, length)
    fig = plotting.plot_residual_histories(
        {"no preconditioner": res, "Jacobi": res.copy(),
         "two-level additive Schwarz": np.logspace(0, -9, 6)}, None, dpi=80)
    none = plotting.method_color("no preconditioner")
    jacobi = plotting.method_color("Jacobi")
    assert none != jacobi
    # the grey of "no preconditioner" shows inside the axes, outside the legend, with
    # Jacobi's curve on top; and Jacobi's own colour shows too
    alone = plotting.plot_residual_histories({"no preconditioner": res}, None, dpi=80)
    assert _pixels_of(fig, none) >= 0.5 * _pixels_of(alone, none) > 50
    assert _pixels_of(fig, jacobi) > 50
    (ax,) = fig.axes
    assert legend_texts(ax) == [
        f"no preconditioner ({length - 1} it.)",
        f"Jacobi ({length - 1} it., same residuals as no preconditioner)",
        "two-level additive Schwarz (5 it.)"]
    # the repeated curve is a wide band (also in the legend), the others have own markers
    lines = {line.get_label().split(" (")[0]: line for line in ax.get_lines()}
    assert lines["no preconditioner"].get_linewidth() > 2 * lines["Jacobi"].get_linewidth()
    assert lines["Jacobi"].get_marker() != lines["two-level additive Schwarz"].get_marker()
