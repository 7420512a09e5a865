"""GenEO built from each rank's own rows (under mpiexec -n 2 and -n 4).

The worker deletes the global matrix on every rank before the distributed preconditioner
is built: GenEO's local eigenproblems, its basis and the coarse matrix come from the owned
rows, the region's ghost rows and the routed entries of Phi only.  Against the serial
basis (up to column order and sign) and the serial CG iterations.
"""

from __future__ import annotations

import pytest

from ._mpi import HERE, run_json
from .conftest import RANKS

CASES = ("channels-grid", "channels-metis", "channels-constants")


@pytest.fixture(scope="module", params=RANKS, ids=lambda p: f"np{p}")
def results(request, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp(f"adaptive{request.param}") / "results.json"
    return run_json(HERE / "_workers_adaptive.py", request.param, out)


@pytest.mark.parametrize("case", CASES)
def test_geneo_from_local_rows_equals_the_serial_basis(results, case):
    r = results["cases"][case]
    assert r["construction"] == "rank-local" and not r["gathered"]
    assert r["setup_exchanges"] > 0  # ghost rows and Phi's entries travelled
    assert r["coarse_dim"] == r["serial_coarse_dim"] > 0
    # the same span: each rank's eigensolves run on other chunks of subdomains than the
    # serial one, so the vectors agree to the subspace iteration's accuracy (its Ritz values
    # settle to 1e-6 of the threshold, the vectors to about the square root)
    assert r["gap"] <= 1e-3


@pytest.mark.parametrize("case", CASES)
def test_geneo_from_local_rows_takes_the_serial_iterations(results, case):
    r = results["cases"][case]
    assert r["info"] == r["serial_info"] == 0
    assert abs(r["iterations"] - r["serial_iterations"]) <= 1
