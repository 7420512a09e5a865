"""``ddops precond --eigen-stop``: when GenEO's eigensolves stop, from the command line."""

from __future__ import annotations

import pytest

from ddops.experiments.cli import main
from tests._optional import need
from tests.experiments._precond import QUIET, run

FLAGS = ("--problem", "channels2d", "--n", "47", "--subdomains", "16", "--contrast", "1e2",
         "--coarse", "geneo", "--no-memory")


def test_the_flag_reaches_the_geneo_row(tmp_path, monkeypatch):
    """The inertia's counts (the coarse dimension) either way, in fewer solves with
    ``count`` (of the subspace iteration: the block Krylov method, the default, settles
    these small problems as soon as it reaches the counts)."""
    need("pardiso")
    from ddops.dd import geneo

    monkeypatch.setattr(geneo, "GENEO_KRYLOV", False)
    stats = {}
    for stop in ("settled", "count"):
        _, rows, _ = run(tmp_path, stop, *FLAGS, "--eigen-stop", stop)
        stats[stop] = rows["two_level"]
    assert stats["count"]["coarse_dim"] == stats["settled"]["coarse_dim"] > 0
    solves = {stop: row["coarse_stats"]["subspace_iterations"] for stop, row in stats.items()}
    assert solves["count"] < solves["settled"], solves
    _, rows, _ = run(tmp_path, "default", *FLAGS)  # the default settles
    assert rows["two_level"]["coarse_stats"]["subspace_iterations"] == solves["settled"]


@pytest.mark.parametrize("argv,message", [
    (["--eigen-stop", "fast"], "--eigen-stop: invalid choice: 'fast'"),
    (["--coarse", "gdsw", "--eigen-stop", "count"],
     "--eigen-stop: only used with --coarse='geneo' or 'all'"),
])
def test_bad_eigen_stop_is_one_line(capsys, tmp_path, argv, message):
    assert main(["precond", *FLAGS, *argv, "--save-prefix", str(tmp_path / "x"), *QUIET]) != 0
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err
