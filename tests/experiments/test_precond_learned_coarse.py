"""``ddops precond --coarse learned``: the learned enrichment in one table with GDSW, AGDSW,
GenEO and the exact-deflation ceiling, checked against the library called directly."""

import numpy as np
import pytest
import scipy.sparse as sp

import ddops
import ddops.precond.learned_coarse as learned_coarse
from ddops.experiments.cli import main
from ddops.precond.learned_coarse import learned_coarse_basis
from ddops.problems import diffusion_2d, high_contrast_channels

from ._precond import QUIET, cg_iterations, run

ARGS = ["--problem", "channels2d", "--n", "31", "--subdomains", "4", "--coarse", "learned"]


def test_learned_rows_match_the_library(tmp_path):
    payload, rows, table = run(tmp_path, "lc", *ARGS, "--extra", "1")
    for key in ("gdsw", "agdsw", "geneo", "learned", "deflation"):
        assert rows[f"two_level_{key}"]["converged"], key
    assert rows["two_level_learned"]["coarse_basis"] == "learned"
    assert "GDSW + learned" in table and "exact deflation" in table
    A = diffusion_2d(high_contrast_channels(31, 1e6, margin=1))
    d = ddops.Decomposition.from_grid((31, 31), (2, 2), overlap=1)
    b = np.random.default_rng(0).standard_normal(A.shape[0])
    Phi = learned_coarse_basis(A, d, extra=1, seed=0)
    assert rows["two_level_learned"]["coarse_dim"] == Phi.shape[1]
    assert rows["two_level_learned"]["iterations"] == cg_iterations(
        A, b, ddops.TwoLevelSchwarz(A, d, coarse_basis=Phi))
    # the ceiling adds N * extra eigenvectors to GDSW
    assert rows["two_level_deflation"]["coarse_dim"] == rows["two_level_gdsw"]["coarse_dim"] + 4
    assert payload["config"]["extra"] == 1 and payload["config"]["coarse_train_steps"] == 0


def test_train_steps_reach_the_learned_row(tmp_path):
    _, rows, _ = run(tmp_path, "ts", *ARGS, "--extra", "1", "--train-steps", "3")
    assert rows["two_level_learned"]["train_steps"] == 3


def test_the_ceiling_fails_in_its_row_when_too_large(tmp_path, monkeypatch):
    monkeypatch.setattr(learned_coarse, "DEFLATION_MAX_UNKNOWNS", 100)
    _, rows, _ = run(tmp_path, "big", *ARGS, "--extra", "1", status=4)
    assert "limited to 100 unknowns" in rows["two_level_deflation"]["failed"]
    assert rows["two_level_deflation"]["status"] == "refused"
    assert rows["two_level_learned"]["converged"]


@pytest.mark.parametrize("argv, message", [
    (["--problem", "channels2d", "--n", "31", "--extra", "2"], "extra: only used with"),
    (["--n", "64", "--subdomains", "2", "--coarse", "learned"], "'learned' is for the 2D/3D"),
    (["--problem", "poisson2d", "--n", "16", "--train-steps", "3"], "only used with"),
    (["--matrix", "{neumann}", "--kernel", "constants", "--coarse", "learned"],
     "not available with --kernel"),
])
def test_learned_flags_out_of_place_give_one_line(tmp_path, capsys, argv, message):
    if any("{neumann}" in a for a in argv):
        n = 12
        T = sp.diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1]).tolil()
        T[0, 0] = T[-1, -1] = 1.0
        N = (sp.kron(T.tocsr(), sp.identity(n)) + sp.kron(sp.identity(n), T.tocsr())).tocsr()
        sp.save_npz(tmp_path / "neumann.npz", N)
        argv = [a.format(neumann=tmp_path / "neumann.npz") for a in argv]
    assert main(["precond", *argv, "--save-prefix", str(tmp_path / "x"), *QUIET]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
