"""``ddops compare`` / ``ddops scaling`` on the 2D and 3D grid problems."""

import json

import numpy as np
import pytest
import scipy.sparse as sp

from ddops import Decomposition, GlobalLowRankOperator, SchwarzOperator, coarse_basis
from ddops.experiments import grid
from ddops.experiments.cli import main
from ddops.experiments.compare import ExperimentConfig, build_models, build_problem
from ddops.problems import diffusion_2d, high_contrast_channels, poisson_2d, poisson_3d

SMALL = ["--n", "16", "--subdomains", "4", "--steps", "4", "--batch-size", "8", "--no-progress"]


@pytest.mark.parametrize("N,dim,expected", [(16, 2, (4, 4)), (12, 2, (4, 3)), (8, 3, (2, 2, 2)),
                                            (7, 2, (7, 1)), (64, 3, (4, 4, 4)),
                                            (18, 3, (3, 3, 2)), (1, 2, (1, 1))])
def test_grid_parts_most_balanced(N, dim, expected):
    parts = grid.grid_parts(N, dim, 64)
    assert parts == expected and int(np.prod(parts)) == N


def test_grid_parts_refuses_boxes_that_do_not_fit():
    with pytest.raises(ValueError, match=r"^subdomains=11 .* 11 > 8"):
        grid.grid_parts(11, 3, 8)


@pytest.mark.parametrize("n,dim", [(7, 2), (4, 3)])
def test_closed_form_spectrum_matches_dense(n, dim):
    A = (poisson_2d(n) if dim == 2 else poisson_3d(n)).toarray()
    dense = np.sort(1.0 / np.linalg.eigvalsh(A))[::-1]
    np.testing.assert_allclose(grid.poisson_inverse_eigenvalues(n, dim), dense, rtol=1e-12)


def _tiny_operator():
    n = 12
    A = poisson_2d(n)
    d = Decomposition.from_grid((n, n), (2, 2), overlap=1)
    op = SchwarzOperator(d, 3, coarse_basis=coarse_basis(d, "gdsw", A=A), seed=3)
    return A, op


def test_evaluate_grid_against_dense_construction():
    A, op = _tiny_operator()
    inv = np.linalg.inv(A.toarray())
    solver = grid.Factorisation(A)
    rng = np.random.default_rng(0)
    F = rng.standard_normal((A.shape[0], 5))
    sets = (F, inv @ F)
    mu, method = grid.spectrum("poisson2d", 12, A)
    e = grid.evaluate_grid(op, A, solver.solve, sets, sets, mu, method)
    M = op.to_dense()
    assert e["operator_fro_error"] == pytest.approx(np.linalg.norm(M - inv), rel=1e-10)
    assert e["operator_error_method"] == "exact" and e["sampled_metrics"] == []
    s = np.linalg.svd(inv, compute_uv=False)
    r = op.rank_bound
    assert e["best_rank_fro_error"] == pytest.approx(np.linalg.norm(s[r:]), rel=1e-8)
    assert e["inverse_fro_norm"] == pytest.approx(np.linalg.norm(inv), rel=1e-10)
    rel = np.linalg.norm(M @ F - inv @ F, axis=0) / np.linalg.norm(inv @ F, axis=0)
    assert e["max_rel_l2"] == pytest.approx(rel.max(), rel=1e-10)


def test_evaluate_grid_sampled_above_the_limit():
    A, op = _tiny_operator()
    inv = np.linalg.inv(A.toarray())
    solver = grid.Factorisation(A)
    F = np.eye(A.shape[0])[:, :3]
    # no spectrum known and the exact limit below n: both norms are estimates, and say so
    e = grid.evaluate_grid(op, A, solver.solve, (F, inv @ F), (F, inv @ F), None, None,
                           exact_limit=10)
    assert e["operator_error_method"].startswith("sampled")
    assert e["inverse_norm_method"].startswith("sampled")
    assert e["best_rank_fro_error"] is None
    assert set(e["sampled_metrics"]) == {"operator_fro_error", "operator_rel_fro_error"}
    exact = np.linalg.norm(op.to_dense() - inv)
    assert 0.6 < e["operator_fro_error"] / exact < 1.4  # 64 Rademacher probes
    assert 0.6 < e["inverse_fro_norm"] / np.linalg.norm(inv) < 1.4


def test_factorisation_solves():
    A = diffusion_2d(high_contrast_channels(9, 1e4))
    X = np.random.default_rng(1).standard_normal((A.shape[0], 3))
    np.testing.assert_allclose(A @ grid.Factorisation(A).solve(X), X, atol=1e-8)


def test_compare_poisson2d_cli(tmp_path):
    prefix = str(tmp_path / "p2")
    assert main(["compare", "--problem", "poisson2d", *SMALL, "--save-prefix", prefix]) == 0
    payload = json.loads((tmp_path / "p2_metrics.json").read_text())
    assert payload["config"]["problem"] == "poisson2d"
    prob = payload["problem"]
    assert prob["unknowns"] == 256 and prob["parts_per_direction"] == [2, 2]
    assert prob["spectrum"] == "closed form"
    models = payload["models"]
    # the paper's two baselines: the Schwarz model's rank bound and its parameter count
    s = models["schwarz"]
    same_params = max(1, round(s["num_params"] / (2 * 256)))
    assert set(models) == {"schwarz", f"global_r{s['rank_bound']}", f"global_r{same_params}"}
    assert models[f"global_r{same_params}"]["num_params"] == 2 * 256 * same_params
    # the same decomposition and coarse space built directly
    A = poisson_2d(16)
    d = Decomposition.from_grid((16, 16), (2, 2), overlap=1)
    n0 = coarse_basis(d, "gdsw", A=A).shape[1]
    assert prob["coarse_dim"] == n0
    assert s["num_params"] == 2 * (4 * int(d.sizes.sum()) + n0 * n0)
    for suffix in ("training_curves", "schwarz_rows", "schwarz_solutions", "schwarz_blocks",
                   "schwarz_coarse", f"global_r{same_params}_rows"):
        assert (tmp_path / f"p2_{suffix}.png").stat().st_size > 0
    assert all(e["operator_error_method"] == "exact" for e in models.values())


def test_compare_3d_metis_and_diffusion(tmp_path):
    for problem, extra in (("poisson3d", ["--n", "8", "--subdomains", "8"]),
                           ("diffusion2d", ["--partitioner", "metis", "--contrast", "1e3",
                                            "--coarse", "rgdsw"])):
        prefix = str(tmp_path / problem)
        argv = ["compare", "--problem", problem, *SMALL, *extra, "--global-rank", "3",
                "--no-plots", "--save-prefix", prefix]
        assert main(argv) == 0, problem
        payload = json.loads((tmp_path / f"{problem}_metrics.json").read_text())
        assert set(payload["models"]) == {"schwarz", "global_r3"}
        assert payload["problem"]["partitioner"] == ("metis" if "metis" in extra else "grid")
    assert payload["problem"]["spectrum"] == "exact (dense eigenvalues)"


@pytest.mark.parametrize("argv,needle", [
    (["--problem", "poisson3d", "--n", "8", "--subdomains", "11"], "--subdomains=11"),
    (["--problem", "poisson2d", "--n", "8"], "--n must be >= 16"),
    (["--problem", "poisson2d", "--kind", "dof"], "--kind"),
    (["--problem", "poisson2d", "--coarse", "interface_hats"], "--coarse"),
    (["--problem", "poisson2d", "--n", "16", "--subdomains", "300", "--partitioner", "metis"],
     "--subdomains=300"),
    (["--partitioner", "metis"], "--partitioner"),
    (["--problem", "diffusion2d", "--contrast", "-1"], "--contrast"),
    (["--problem", "poisson5d"], "--problem"),
])
def test_bad_grid_input_one_line(argv, needle, capsys, tmp_path):
    rc = main(["compare", *argv, "--save-prefix", str(tmp_path / "x"), "--steps", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not list(tmp_path.iterdir())


def test_resume_on_another_problem_is_refused(tmp_path, capsys):
    prefix = str(tmp_path / "r")
    common = [*SMALL, "--coarse", "nicolaides", "--global-rank", "0", "--no-plots",
              "--checkpoint-every", "2", "--save-prefix", prefix]
    assert main(["compare", "--problem", "poisson2d", *common]) == 0
    capsys.readouterr()
    # same decomposition and the same Nicolaides basis: only the problem tells them apart
    rc = main(["compare", "--problem", "diffusion2d", *common, "--resume"])
    err = capsys.readouterr().err
    assert rc == 2 and "sampler" in err and "diffusion2d" in err, err
    assert main(["compare", "--problem", "poisson2d", *common, "--resume"]) == 0


def test_build_models_auto_ranks_and_config_defaults():
    c = ExperimentConfig.for_problem("poisson2d", n=16, subdomains=4).validated()
    assert (c.overlap, c.coarse_basis, c.global_ranks) == (1, "gdsw", None)
    prob = build_problem(c)
    models = build_models(c, prob.decomposition, prob.A, coarse=prob.coarse)
    s = models["schwarz"]
    ranks = sorted(op.rank for op in models.values() if isinstance(op, GlobalLowRankOperator))
    assert ranks == sorted({s.rank_bound, max(1, round(s.num_params / 512))})
    # the training data solve the problem exactly
    F, U = prob.sampler.sample(4, np.random.default_rng(0))
    np.testing.assert_allclose(prob.A @ U, F, atol=1e-10)
    assert "poisson2d(n=16)" in repr(prob.sampler)
    assert ExperimentConfig.for_problem() == ExperimentConfig()


def test_scaling_poisson2d(tmp_path):
    prefix = str(tmp_path / "s")
    assert main(["scaling", "--problem", "poisson2d", "--ns", "16", "32", "--subdomain-width",
                 "8", "--steps", "3", "--batch-size", "8", "--no-plots",
                 "--no-progress", "--save-prefix", prefix]) == 0
    payload = json.loads((tmp_path / "s_scaling_metrics.json").read_text())
    assert [(r["n"], r["N"], r["unknowns"]) for r in payload["rows"]] == [(16, 4, 256),
                                                                         (32, 16, 1024)]
    assert "unknowns" in (tmp_path / "s_scaling.md").read_text()


def test_grid_figures_validate_their_input():
    from ddops.experiments import plotting

    rows = np.zeros((16, 1))
    fig = plotting.plot_grid_rows((4, 4), [5], rows, rows, None)
    assert len(fig.axes) >= 3
    with pytest.raises(ValueError, match="shape"):
        plotting.plot_grid_rows((4, 5), [5], rows, rows, None)
    with pytest.raises(ValueError, match="one column per point"):
        plotting.plot_grid_rows((4, 4), [1, 2], rows, rows, None)
    # a 2D field is drawn with x along the columns: the image is the field reshaped (ny, nx)
    field = np.arange(12.0)
    fig = plotting.plot_grid_fields((4, 3), [field], ["f"], None, diverging=False)
    image = fig.axes[0].images[0].get_array()
    np.testing.assert_array_equal(np.asarray(image), field.reshape(3, 4))
    assert sp.issparse(sp.csr_matrix(rows))


def test_rhs_modes_sets_the_number_of_functions():
    c = ExperimentConfig.for_problem("poisson2d", n=16, subdomains=4, rhs_modes=2).validated()
    prob = build_problem(c)
    assert prob.sampler.inner.basis.shape == (256, (2 * 2) ** 2)
    with pytest.raises(ValueError, match="^rhs_modes=4 applies to the grid problems"):
        ExperimentConfig(rhs_modes=4).validated()


# -- the partitioners and problems shared with ddops precond ------------------------------------
def _choices(command, flag):
    from ddops.experiments.cli import build_parser

    sub = build_parser()._subparsers._group_actions[0].choices[command]
    return set(next(a for a in sub._actions if flag in a.option_strings).choices)


@pytest.mark.parametrize("command", ["compare", "scaling"])
def test_partitioners_and_problems_of_precond_are_accepted(command):
    from ddops.experiments import precond

    assert set(precond.PARTITIONER_CHOICES) <= _choices(command, "--partitioner")
    assert "elasticity2d" in _choices(command, "--problem") & set(precond.PROBLEMS)


def test_compare_rcb_partitioner(tmp_path):
    from ddops.problems import grid_coordinates

    prefix = str(tmp_path / "r")
    assert main(["compare", "--problem", "poisson2d", *SMALL, "--subdomains", "5",
                 "--partitioner", "rcb", "--global-rank", "0", "--no-plots",
                 "--save-prefix", prefix]) == 0
    payload = json.loads((tmp_path / "r_metrics.json").read_text())
    assert payload["problem"]["partitioner"] == "rcb"
    # the same parts as recursive coordinate bisection of the grid points
    d = Decomposition.from_matrix(poisson_2d(16), 5, 1, partitioner="rcb",
                                  coordinates=grid_coordinates(16, 2))
    n0 = coarse_basis(d, "gdsw", A=poisson_2d(16)).shape[1]
    assert payload["models"]["schwarz"]["num_params"] == 2 * (4 * int(d.sizes.sum()) + n0 * n0)
    assert payload["problem"]["subdomain_sizes"]["max"] == int(d.sizes.max())


def test_compare_elasticity2d(tmp_path, monkeypatch):
    pytest.importorskip("skfem")
    from pathlib import Path

    from ddops.experiments import plotting
    from ddops.problems import fem, rigid_body_modes

    figures = {}

    def keep(fig, path, dpi, title=None):  # the figures without the cost of rendering them
        figures[Path(path).name] = fig
        return Path(path)

    monkeypatch.setattr(plotting, "_save", keep)
    n = 8
    prefix = str(tmp_path / "e")
    assert main(["compare", "--problem", "elasticity2d", "--n", str(n), "--subdomains", "4",
                 "--rhs-modes", "2", "--steps", "3", "--batch-size", "8", "--no-progress",
                 "--global-rank", "5", "--save-prefix", prefix]) == 0
    payload = json.loads((tmp_path / "e_metrics.json").read_text())
    prob = payload["problem"]
    assert payload["config"]["partitioner"] == "metis"  # the grid's boxes do not apply
    assert prob["unknowns"] == 2 * (n + 1) * (n + 2) and prob["unknowns_per_node"] == 2
    assert prob["shape"] == [n + 1, n + 2]
    # the decomposition and the coarse space of ddops precond's elasticity2d, built directly
    A, X = fem.fem_elasticity_2d(n)
    d = Decomposition.from_matrix(A, 4, 1, partitioner="metis", coordinates=X, block_size=2)
    n0 = coarse_basis(d, "gdsw", A=A, null_space=rigid_body_modes(X)).shape[1]
    assert prob["coarse_dim"] == n0
    s = payload["models"]["schwarz"]
    assert s["num_params"] == 2 * (4 * int(d.sizes.sum()) + n0 * n0)
    # the figures of a grid problem show one displacement component on the grid of nodes:
    # n + 1 columns (x = 0 is clamped) and n + 2 rows
    for suffix in ("schwarz_rows", "schwarz_solutions", "schwarz_coarse", "global_r5_rows"):
        images = [im for ax in figures[f"e_{suffix}.png"].axes for im in ax.get_images()]
        assert images and {im.get_array().shape for im in images} == {(n + 2, n + 1)}
    # the training data solve the elasticity problem, in both displacement components
    c = ExperimentConfig.for_problem("elasticity2d", n=n, subdomains=4, rhs_modes=2)
    built = build_problem(c.validated())
    F, U = built.sampler.sample(64, np.random.default_rng(0))
    np.testing.assert_allclose(A @ U, F, atol=1e-10)
    assert np.abs(F[0::2]).max() > 0 and np.abs(F[1::2]).max() > 0
    # both unknowns of a node stay in the same subdomains
    for idx in built.decomposition.subdomains:
        assert set(idx[0::2] // 2) == set(idx[1::2] // 2) and np.all(idx[1::2] == idx[0::2] + 1)


def test_scaling_elasticity2d(tmp_path):
    pytest.importorskip("skfem")
    assert main(["scaling", "--problem", "elasticity2d", "--ns", "16", "--subdomain-width", "8",
                 "--steps", "2", "--batch-size", "8", "--no-plots", "--no-progress",
                 "--partitioner", "rcb", "--save-prefix", str(tmp_path / "s")]) == 0
    (row,) = json.loads((tmp_path / "s_scaling_metrics.json").read_text())["rows"]
    assert (row["n"], row["N"], row["unknowns"]) == (16, 4, 2 * 17 * 18)


@pytest.mark.parametrize("argv,needle", [
    (["--problem", "elasticity2d", "--partitioner", "grid"], "--partitioner"),
    (["--problem", "elasticity2d", "--contrast", "10"], "--contrast"),
    (["--problem", "poisson2d", "--contrast", "10"], "--contrast"),
    (["--problem", "elasticity2d", "--n", "16", "--subdomains", "400"], "--subdomains=400"),
])
def test_bad_elasticity_input_one_line(argv, needle, capsys, tmp_path):
    rc = main(["compare", *argv, "--save-prefix", str(tmp_path / "x"), "--steps", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not list(tmp_path.iterdir())
