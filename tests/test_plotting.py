"""Every figure function writes a readable PNG of the expected size, also for edge cases."""

import sys

import matplotlib.image as mpimg
import numpy as np
import pytest
import scipy.sparse as sp

import ddops
from ddops import plotting

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
