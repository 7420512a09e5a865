"""``ddops precond`` on 2 ranks: the table's iterations equal the serial solves; errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse.linalg as spla

import ddops
from ddops.precond.schwarz import TwoLevelSchwarz

from ._mpi import HERE, launch

FLAGS = ("--problem", "poisson2d", "--n", "32", "--subdomains", "4", "--coarse", "all")


def _serial_iterations(coarse, method):
    A = ddops.poisson_2d(32)
    d = ddops.Decomposition.from_grid((32, 32), (2, 2), overlap=1)
    b = np.random.default_rng(0).standard_normal(A.shape[0])
    variant = "additive" if method == "cg" else "restricted"
    M = TwoLevelSchwarz(A, d, coarse_basis=None if coarse == "none" else coarse,
                        coarse=coarse != "none", variant=variant)
    calls = []
    if method == "cg":
        spla.cg(A, b, rtol=1e-8, M=M, callback=calls.append)
    else:
        spla.gmres(A, b, rtol=1e-8, M=M, callback=calls.append, callback_type="pr_norm")
    return len(calls)


def test_distributed_precond_table_matches_serial(tmp_path):
    prefix = tmp_path / "out" / "p"
    result = launch(HERE / "cli_worker.py", 2, *FLAGS, "--save-prefix", str(prefix))
    assert result.returncode == 0, result.stderr
    payload = json.loads((tmp_path / "out" / "p_distributed.json").read_text())
    assert payload["ranks"] == 2 and payload["num_dofs"] == 1024
    rows = {(r["method"], r["coarse"]): r for r in payload["rows"]}
    assert set(rows) == {("cg", "none"), ("cg", "nicolaides"), ("cg", "gdsw"), ("cg", "rgdsw"),
                         ("gmres", "gdsw")}
    for (method, coarse), r in rows.items():
        assert r["info"] == 0 and r["relative_residual"] <= 1e-8
        assert r["iterations"] == _serial_iterations(coarse, method), (method, coarse)
        assert r["per_application"]["reductions"] == (0 if coarse == "none" else 1)
    assert "| CG | additive | gdsw |" in (tmp_path / "out" / "p_distributed.md").read_text()


def test_bad_flag_prints_one_line_and_exits_nonzero(tmp_path):
    result = launch(HERE / "cli_worker.py", 2, "--problem", "poisson2d", "--n", "16",
                    "--subdomains", "1", "--save-prefix", str(tmp_path / "p"))
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "subdomains must be >= 2" in lines[0]
    assert not (tmp_path / "p_distributed.json").exists()


def test_more_ranks_than_subdomains_is_refused(tmp_path):
    result = launch(HERE / "cli_worker.py", 4, "--problem", "poisson2d", "--n", "16",
                    "--subdomains", "2", "--save-prefix", str(tmp_path / "p"))
    assert result.returncode == 2
    assert "subdomains must be at least the number of ranks (4), got 2" in result.stderr


def test_mpiexec_ddops_precond_takes_the_distributed_path(tmp_path):
    prefix = tmp_path / "p"
    result = launch("-mddops", 2, "precond", *FLAGS, "--save-prefix", str(prefix))  # python -m
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "p_distributed.json").exists()


@pytest.mark.parametrize("coarse", ["geneo", "agdsw"])
def test_adaptive_spaces_under_mpi_match_the_serial_iterations(tmp_path, coarse):
    """``--coarse geneo`` / ``agdsw`` with ``--threshold`` under ``mpiexec``: built from the
    ranks' own rows, the serial CG iterations (within one) and coarse dimension."""
    prefix = tmp_path / "g"
    threshold = 0.3 if coarse == "geneo" else 0.1
    flags = ("--problem", "channels2d", "--n", "31", "--contrast", "1e4", "--subdomains", "4",
             "--coarse", coarse, "--threshold", str(threshold))
    result = launch(HERE / "cli_worker.py", 2, *flags, "--save-prefix", str(prefix))
    assert result.returncode == 0, result.stderr
    payload = json.loads((tmp_path / "g_distributed.json").read_text())
    row = next(r for r in payload["rows"] if r["method"] == "cg" and r["coarse"] == coarse)
    from ddops.experiments.precond import PrecondConfig, build_problem, decompose

    c = PrecondConfig(problem="channels2d", n=31, contrast=1e4, subdomains=4).validated()
    prob = build_problem(c)
    d, _, _ = decompose(c, prob)
    options = (ddops.GenEOOptions(threshold=threshold) if coarse == "geneo"
               else ddops.AGDSWOptions(threshold=threshold))
    M = TwoLevelSchwarz(prob.A, d, options=ddops.SchwarzOptions(coarse=coarse,
                                                                **{coarse: options}))
    b = np.random.default_rng(0).standard_normal(prob.A.shape[0])
    calls = []
    spla.cg(prob.A, b, rtol=1e-8, M=M, callback=calls.append)
    assert row["info"] == 0 and row["coarse_dim"] == M.coarse_dim > 0
    assert abs(row["iterations"] - len(calls)) <= 1


def test_skip_contrast_reaches_the_ranks_agdsw(tmp_path):
    """``--skip-contrast 0`` under ``mpiexec``: every AGDSW eigenproblem runs, as in the
    serial build with ``skip_contrast=0`` (on these METIS parts of a homogeneous problem the
    full space has a function that the default's indicator leaves out)."""
    flags = ("--problem", "poisson2d", "--n", "95", "--subdomains", "24", "--partitioner",
             "metis", "--coarse", "agdsw", "--skip-contrast", "0")
    result = launch(HERE / "cli_worker.py", 2, *flags, "--save-prefix", str(tmp_path / "s"))
    assert result.returncode == 0, result.stderr
    payload = json.loads((tmp_path / "s_distributed.json").read_text())
    row = next(r for r in payload["rows"] if r["method"] == "cg" and r["coarse"] == "agdsw")
    from ddops.experiments.precond import PrecondConfig, build_problem, decompose

    c = PrecondConfig(problem="poisson2d", n=95, subdomains=24, partitioner="metis").validated()
    prob = build_problem(c)
    d, _, _ = decompose(c, prob)
    dims = {skip: TwoLevelSchwarz(prob.A, d, options=ddops.SchwarzOptions(
        coarse="agdsw", agdsw=ddops.AGDSWOptions(skip_contrast=skip))).coarse_dim
        for skip in (0.0, None)}
    assert dims[0.0] > dims[None]
    assert row["info"] == 0 and row["coarse_dim"] == dims[0.0]
