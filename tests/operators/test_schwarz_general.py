"""SchwarzOperator on algebraic decompositions (METIS parts of grids and unstructured P1
meshes, boxes of 2D/3D grids) with every coarse basis, against dense assemblies."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ddops
from ddops import Decomposition, GlobalLowRankOperator, SchwarzOperator
from ddops.io import load_operator, save_operator
from ddops.operators import init_scale
from ddops.problems import poisson_2d, poisson_3d
from ddops.testing import dottest
from tests.reference import batch, dense_operator, fd_check


def _fem():
    pytest.importorskip("skfem")
    from ddops.problems.fem import fem_poisson_2d

    return fem_poisson_2d(9, mesh="unstructured")


def _problem(kind):
    if kind == "grid_metis":
        A = poisson_2d(9)
        return A, Decomposition.from_matrix(A, 5, 1)  # 5 uneven METIS parts
    if kind == "fem_metis":
        A, X = _fem()
        return A, Decomposition.from_matrix(A, 4, 2, coordinates=X)
    if kind == "grid_boxes":
        return poisson_2d(8), Decomposition.from_grid((8, 8), (2, 3), 1)
    return poisson_3d(5), Decomposition.from_grid((5, 5, 5), (2, 2, 1), 1)


PROBLEMS = ["grid_metis", "fem_metis", "grid_boxes", "boxes_3d"]


def _operator(A, d, basis, **kw):
    if basis == "custom":
        Phi = ddops.coarse_basis(d, "gdsw", A=A)[:, ::2]  # a basis of one's own
        return SchwarzOperator(d, coarse_basis=Phi, **kw)
    if basis in ("gdsw", "rgdsw"):
        return SchwarzOperator(d, coarse_basis=basis, A=A, **kw)
    return SchwarzOperator(d, coarse_basis=basis, **kw)


def _randomise(op, seed=1):
    """O(1) parameters everywhere (the scaled init is tiny: products would hide errors)."""
    rng = np.random.default_rng(seed)
    params = op.get_params()
    op.set_params({k: ([rng.standard_normal(a.shape) for a in v] if isinstance(v, list)
                       else rng.standard_normal(v.shape)) for k, v in params.items()})
    return op


@pytest.mark.parametrize("problem", PROBLEMS)
@pytest.mark.parametrize("basis", ["gdsw", "rgdsw", "nicolaides", "custom", None])
def test_dense_equality(problem, basis):
    A, d = _problem(problem)
    op = _randomise(_operator(A, d, basis, local_rank=3))
    M = dense_operator(op)
    np.testing.assert_allclose(op.to_dense(), M, rtol=1e-12, atol=1e-12 * np.abs(M).max())
    np.testing.assert_allclose(op.to_dense("local") + op.to_dense("coarse"), M,
                               atol=1e-12 * np.abs(M).max())
    X = np.random.default_rng(0).standard_normal((A.shape[0], 5))
    np.testing.assert_allclose(op.rmatmat(X), M.T @ X, atol=1e-11 * np.abs(M).max())
    dottest(op, nblock=3)
    dense_rank = np.linalg.matrix_rank(M)
    assert dense_rank <= op.rank_bound
    if basis is None:
        assert op.rank_bound == int(np.minimum(3, d.sizes).sum())


@pytest.mark.parametrize("partition, tied", [("symmetric", False), ("left", False),
                                             ("none", True), ("symmetric", True)])
@pytest.mark.parametrize("problem", ["grid_metis", "fem_metis"])
def test_partitions_and_tied_against_dense(problem, partition, tied):
    A, d = _problem(problem)
    op = _randomise(_operator(A, d, "gdsw", local_rank=2, partition=partition, tied=tied,
                              coarse_rank=3))
    np.testing.assert_allclose(op.to_dense(), dense_operator(op), atol=1e-12 * 50)


@pytest.mark.filterwarnings("ignore:coarse_rank=2 exceeds")  # RGDSW on 4 parts: n0 = 1
@pytest.mark.parametrize("loss", ["wmse", "mse"])
@pytest.mark.parametrize("problem, basis", [("grid_metis", "gdsw"), ("fem_metis", "rgdsw"),
                                            ("boxes_3d", "nicolaides"),
                                            ("grid_boxes", "custom")])
def test_gradients_finite_differences(problem, basis, loss):
    A, d = _problem(problem)
    assert d.sizes.min() < d.max_size or problem.endswith("boxes") or problem == "boxes_3d"
    op = _randomise(_operator(A, d, basis, local_rank=2, coarse_rank=2), seed=3)
    op.theta *= 0.3
    F, U = batch(op, 6)
    fd_check(op, F, U, loss, coords=14)


def test_uneven_metis_parts_pad_and_padding_gets_no_gradient():
    A, d = _problem("grid_metis")
    assert d.sizes.min() < d.max_size  # uneven parts: padding present
    overhead = (d.max_size * d.num_subdomains - d.sizes.sum()) / d.sizes.sum()
    assert d.padding_overhead == pytest.approx(overhead)
    op = _randomise(_operator(A, d, "gdsw", local_rank=2))
    F, U = batch(op, 4)
    _, grad = op.value_and_grad_flat(F, U, "wmse")
    views = op._views(grad)
    pad = np.arange(d.max_size)[None, :] >= d.sizes[:, None]
    assert np.all(views["Q"][pad] == 0) and np.all(views["K"][pad] == 0)


def test_matrix_bases_need_A_and_the_message_says_how():
    A, d = _problem("grid_boxes")
    for basis in ("gdsw", "rgdsw"):
        with pytest.raises(ValueError, match=r"built from the matrix A: pass A=A"):
            SchwarzOperator(d, coarse_basis=basis)
    # problem data is accepted by every basis and used only where it builds it
    np.testing.assert_array_equal(
        SchwarzOperator(d, coarse_basis="nicolaides", A=A, seed=1).to_dense(),
        SchwarzOperator(d, coarse_basis="nicolaides", seed=1).to_dense())
    np.testing.assert_array_equal(
        SchwarzOperator(d, coarse_basis=None, null_space=np.ones((64, 1)), seed=1).to_dense(),
        SchwarzOperator(d, coarse_basis=None, seed=1).to_dense())
    op = SchwarzOperator(d, coarse_basis="gdsw", A=A)
    np.testing.assert_array_equal(op.coarse_matrix.toarray(),
                                  ddops.coarse_basis(d, "gdsw", A=A).toarray())
    assert op.coarse_basis_name == "gdsw"


def test_null_space_passes_through():
    A, d = _problem("grid_boxes")
    Z = np.stack([np.ones(64), np.arange(64.0)], axis=1)
    op = SchwarzOperator(d, coarse_basis="nicolaides", null_space=Z)
    assert op.coarse_dim == 2 * d.num_subdomains
    np.testing.assert_array_equal(op.coarse_matrix.toarray(),
                                  ddops.coarse_basis(d, "nicolaides", null_space=Z).toarray())


@pytest.mark.parametrize("basis", ["gdsw", "rgdsw", "nicolaides", "custom"])
def test_save_load_round_trip(tmp_path, basis):
    A, d = _problem("fem_metis")
    op = _randomise(_operator(A, d, basis, local_rank=2))
    path = save_operator(op, tmp_path / "op.npz")
    back = load_operator(path)
    assert back.coarse_basis_name == op.coarse_basis_name
    np.testing.assert_array_equal(back.theta, op.theta)
    X = np.random.default_rng(0).standard_normal((A.shape[0], 3))
    np.testing.assert_array_equal(back.matmat(X), op.matmat(X))
    assert ddops.io.describe_operator(back) == ddops.io.describe_operator(op)
    # a basis from another matrix is another architecture
    if basis == "gdsw":
        other = _operator(2 * A + sp.eye(A.shape[0]), d, basis, local_rank=2)
        assert ddops.io.describe_operator(other) != ddops.io.describe_operator(op)


def test_to_dense_limit_applies():
    A, d = _problem("grid_metis")
    op = _operator(A, d, "gdsw")
    with pytest.raises(ValueError, match="max_bytes"):
        op.to_dense(max_bytes=1000)


def test_scaled_init_in_d_dimensions():
    """h^2/4 entry scale in 2D/3D, h/4 in 1D; h is the grid's or the coordinates' spacing."""
    d2 = Decomposition.from_grid((30, 30), (3, 3), 1)
    assert d2.dim == 2 and d2.h == 1 / 31
    op = SchwarzOperator(d2, local_rank=4, coarse_basis="nicolaides", seed=5)
    Q = np.concatenate(op.get_params()["Q"])
    expected = np.sqrt((1 / 31) ** 2 / 4) * 4 ** -0.25
    assert init_scale("scaled", 1 / 31, 4, 2) == pytest.approx(expected)
    assert Q.std() == pytest.approx(expected, rel=0.05)
    assert init_scale("scaled", 0.1, 4, 1) == pytest.approx(np.sqrt(0.1 / 4) * 4 ** -0.25)
    assert init_scale("scaled", 0.1, 4, 3) == init_scale("scaled", 0.1, 4, 2)
    # unstructured: mean spacing of the coordinates, (area / nodes)^(1/2)
    A, X = _fem()
    d = Decomposition.from_matrix(A, 4, 1, coordinates=X)
    area = np.prod(X.max(axis=0) - X.min(axis=0))
    assert d.dim == 2 and d.h == pytest.approx(np.sqrt(area / A.shape[0]))
    assert 0.8 / 10 < d.h < 1.2 / 10
    # without coordinates the 1D rule stays
    assert Decomposition.from_matrix(A, 4, 1).h == 1 / (A.shape[0] + 1)
    g = GlobalLowRankOperator(100, 3, h=0.1, dim=2)
    assert g.theta.std() == pytest.approx(init_scale("scaled", 0.1, 3, 2), rel=0.1)


def test_global_dim_saved_and_old_files_default(tmp_path):
    g = GlobalLowRankOperator(50, 3, h=0.1, dim=2)
    back = load_operator(save_operator(g, tmp_path / "g.npz"))
    assert back.dim == 2
    np.testing.assert_array_equal(back.theta, g.theta)
    assert "dim" not in ddops.io.describe_operator(GlobalLowRankOperator(50, 3))


def test_files_written_before_general_decompositions_still_load():
    """Operators saved by the release before these changes (files in tests/operators/data)."""
    from pathlib import Path

    data = Path(__file__).parent / "data"
    products = np.load(data / "before_general_products.npz")
    X = np.random.default_rng(0).standard_normal((31, 2))
    X2 = np.random.default_rng(0).standard_normal((36, 2))
    op = load_operator(data / "schwarz_1d_before_general.npz")
    np.testing.assert_array_equal(op.matmat(X), products["schwarz"])
    # the 1D random initialisation is unchanged
    fresh = SchwarzOperator(ddops.Decomposition1D(32, 4, 2), local_rank=3, seed=3)
    np.testing.assert_array_equal(fresh.theta, op.theta)
    grid = load_operator(data / "schwarz_grid_custom_before_general.npz")
    assert grid.coarse_basis_name == "custom"
    np.testing.assert_array_equal(grid.matmat(X2), products["grid"])
    glob = load_operator(data / "global_before_general.npz")
    assert glob.dim == 1
    np.testing.assert_array_equal(glob.matmat(X), products["glob"])
    np.testing.assert_array_equal(GlobalLowRankOperator(31, 3, seed=2).theta, glob.theta)


# -- grouped padding --------------------------------------------------------------------------
def _uneven():
    """Many small METIS parts: padding overhead above the 25 % limit (about 26 %)."""
    A = poisson_2d(16)
    d = Decomposition.from_matrix(A, 24, 1)
    assert d.padding_overhead > 0.25
    return A, d


def test_padding_groups_minimise_the_padded_size_brute_force():
    import itertools

    from ddops.operators.schwarz import padding_groups

    rng = np.random.default_rng(0)
    for _ in range(200):
        sizes = rng.integers(1, 25, size=rng.integers(1, 10))
        G = int(rng.integers(1, 5))
        groups = padding_groups(sizes, G)
        assert sorted(np.concatenate(groups).tolist()) == list(range(sizes.size))
        assert len(groups) <= G
        got = sum(len(g) * sizes[g].max() for g in groups)
        values = np.unique(sizes)
        best = min(
            sum(((sizes >= values[b[t]]) & (sizes <= values[b[t + 1] - 1])).sum()
                * values[b[t + 1] - 1] for t in range(len(b) - 1))
            for k in range(min(G, values.size))
            for cuts in itertools.combinations(range(1, values.size), k)
            for b in [[0, *cuts, values.size]])
        assert got == best


def test_auto_groups_only_above_the_limit():
    A, d = _uneven()
    op = SchwarzOperator(d, coarse_basis="gdsw", A=A)
    assert 1 < op.padding_groups <= 4
    assert op.padded_rows <= 1.10 * d.sizes.sum() < d.num_subdomains * d.max_size
    _, even = _problem("grid_boxes")
    assert SchwarzOperator(even, coarse_basis="nicolaides").padding_groups == 1
    assert SchwarzOperator(d, coarse_basis=None, padding_groups=1).padding_groups == 1
    with pytest.raises(ValueError, match="padding_groups"):
        SchwarzOperator(d, padding_groups="many")
    with pytest.raises(ValueError, match="padding_groups"):
        SchwarzOperator(d, padding_groups=0)


@pytest.mark.parametrize("basis, tied, partition", [("gdsw", False, "symmetric"),
                                                    ("rgdsw", False, "left"),
                                                    ("nicolaides", True, "none"),
                                                    (None, False, "symmetric")])
def test_grouped_against_dense_and_one_group(basis, tied, partition):
    A, d = _uneven()
    kw = dict(local_rank=3, tied=tied, partition=partition, seed=4)
    op = _randomise(_operator(A, d, basis, padding_groups=3, **kw))
    assert op.padding_groups == 3
    M = dense_operator(op)
    np.testing.assert_allclose(op.to_dense(), M, atol=1e-12 * np.abs(M).max())
    one = _operator(A, d, basis, padding_groups=1, **kw)
    one.set_params(op.get_params())
    X = np.random.default_rng(0).standard_normal((A.shape[0], 6))
    U = np.random.default_rng(1).standard_normal((A.shape[0], 6))
    np.testing.assert_allclose(op.matmat(X), one.matmat(X), atol=1e-12 * np.abs(M).max())
    np.testing.assert_allclose(op.rmatmat(X), one.rmatmat(X), atol=1e-12 * np.abs(M).max())
    v, g = op.value_and_grad(X, U)
    v1, g1 = one.value_and_grad(X, U)
    assert v == pytest.approx(v1, rel=1e-12)
    for key in g:
        a = np.concatenate(g[key]) if isinstance(g[key], list) else g[key]
        b = np.concatenate(g1[key]) if isinstance(g1[key], list) else g1[key]
        np.testing.assert_allclose(a, b, atol=1e-12 * max(np.abs(b).max(initial=0), 1))
    dottest(op, nblock=2)
    assert op.rank_bound == one.rank_bound and op.num_params == one.num_params
    stacked = np.concatenate(op.get_params()["Q"])
    np.testing.assert_array_equal(op.params["Q"].reshape(-1, 3)[op.entry_rows], stacked)
    np.testing.assert_array_equal(one.entry_rows, d._padded_rows())
    # the same random draw as one group, and fewer stored rows
    assert op.padded_rows < one.padded_rows
    same = _operator(A, d, basis, padding_groups=3, **kw)
    ref = _operator(A, d, basis, padding_groups=1, **kw)
    for key, value in same.get_params().items():
        other = ref.get_params()[key]
        if isinstance(value, list):
            assert all(np.array_equal(x, y) for x, y in zip(value, other))
        else:
            np.testing.assert_array_equal(value, other)


@pytest.mark.parametrize("loss", ["wmse", "mse"])
@pytest.mark.parametrize("tied, partition", [(False, "left"), (True, "symmetric")])
def test_grouped_gradients_finite_differences(loss, tied, partition):
    A, d = _uneven()
    op = _randomise(_operator(A, d, "gdsw", local_rank=2, coarse_rank=3, tied=tied,
                              partition=partition), seed=5)
    assert op.padding_groups > 1
    op.theta *= 0.3
    F, U = batch(op, 4)
    fd_check(op, F, U, loss, coords=16)  # also: padding rows get exactly zero gradient


def test_grouped_save_load_and_training_init(tmp_path):
    from ddops.learning.initialisation import local_scales, lr_scales, problem_init
    from ddops.precond.learned import classical_init

    A, d = _uneven()
    op = _randomise(_operator(A, d, "gdsw", local_rank=2))
    back = load_operator(save_operator(op, tmp_path / "g.npz"))
    assert back.padding_groups == op.padding_groups > 1
    X = np.random.default_rng(0).standard_normal((A.shape[0], 3))
    np.testing.assert_array_equal(back.matmat(X), op.matmat(X))
    # the problem-scaled and classical initialisations give what one group gives
    one = _operator(A, d, "gdsw", local_rank=2, padding_groups=1)
    for init in (problem_init, classical_init):
        init(op, A)
        init(one, A)
        np.testing.assert_allclose(op.to_dense(), one.to_dense(), rtol=1e-12, atol=1e-15)
    sigma = local_scales(op, A)
    scales = op.unflatten(lr_scales(op, A))
    for i, block in enumerate(scales["Q"]):
        np.testing.assert_array_equal(block, sigma[i])
