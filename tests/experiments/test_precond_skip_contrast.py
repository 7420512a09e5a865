"""``ddops precond --skip-contrast``: the contrast indicators of AGDSW and GenEO from the
command line."""

from __future__ import annotations

import pytest

import ddops
from ddops.experiments.cli import main
from ddops.experiments.precond import PrecondConfig, build_problem, decompose
from tests.experiments._precond import QUIET, run

#: METIS parts of a homogeneous problem, where AGDSW's full space has a function of small
#: eigenvalue that the default's indicator leaves out
FLAGS = ("--problem", "poisson2d", "--n", "95", "--subdomains", "24", "--partitioner", "metis",
         "--coarse", "agdsw", "--no-memory")


def test_the_flag_reaches_the_agdsw_row(tmp_path):
    c = PrecondConfig(problem="poisson2d", n=95, subdomains=24, partitioner="metis").validated()
    prob = build_problem(c)
    d, _, _ = decompose(c, prob)
    dims = {skip: ddops.TwoLevelSchwarz(prob.A, d, options=ddops.SchwarzOptions(
        coarse="agdsw", agdsw=ddops.AGDSWOptions(skip_contrast=skip))).coarse_dim
        for skip in (0.0, None)}
    assert dims[0.0] > dims[None]
    for flag, skip in ((("--skip-contrast", "0"), 0.0), ((), None)):
        _, rows, _ = run(tmp_path, f"s{skip}", *FLAGS, *flag)
        row = rows["two_level"]
        assert row["coarse_dim"] == dims[skip]
        assert (row["coarse_stats"]["skipped_eigenproblems"] > 0) == (skip is None)


@pytest.mark.parametrize("argv,message", [
    (["--skip-contrast", "-1"], "--skip-contrast: expected a finite number >= 0"),
    (["--skip-contrast", "inf"], "--skip-contrast: expected a finite number >= 0"),
    (["--skip-contrast", "x"], "--skip-contrast: expected a number"),
])
def test_bad_skip_contrast_is_one_line(capsys, tmp_path, argv, message):
    assert main(["precond", *FLAGS, *argv, "--save-prefix", str(tmp_path / "x"), *QUIET]) != 0
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_skip_contrast_without_an_adaptive_row_is_refused(capsys, tmp_path):
    argv = ["precond", "--problem", "poisson2d", "--n", "16", "--coarse", "gdsw",
            "--skip-contrast", "3", "--save-prefix", str(tmp_path / "x"), *QUIET]
    assert main(argv) != 0
    err = capsys.readouterr().err.strip()
    assert "--skip-contrast: only used with --coarse='agdsw', 'geneo' or 'all'" in err
    assert len(err.splitlines()) == 1


def test_the_flag_reaches_the_geneo_row(tmp_path):
    """GenEO's indicator is off by default: with the flag every box of the homogeneous
    problem keeps its Nicolaides function only (one per box)."""
    flags = ("--problem", "poisson2d", "--n", "63", "--subdomains", "16", "--coarse", "geneo",
             "--no-memory")
    for flag, dim in ((("--skip-contrast", "10"), 16), ((), None)):
        _, rows, _ = run(tmp_path, f"g{bool(flag)}", *flags, *flag)
        stats = rows["two_level"]["coarse_stats"]
        assert stats["skipped_by_contrast"] == (16 if flag else 0)
        if dim is not None:
            assert rows["two_level"]["coarse_dim"] == dim
        else:
            assert rows["two_level"]["coarse_dim"] > 16
