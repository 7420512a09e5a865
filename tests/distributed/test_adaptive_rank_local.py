"""GenEO built from each rank's own rows (under mpiexec -n 1, -n 2 and -n 4).

The worker deletes the global matrix on every rank before the distributed preconditioner
is built: GenEO's local eigenproblems, its basis and the coarse matrix come from the owned
rows, the region's ghost rows, the rows its grown sets reach beyond the region (fetched
from their owners) and the routed entries of Phi only.  Against the serial
basis (up to column order and sign) and the serial CG iterations.
"""

from __future__ import annotations

import pytest

from tests._optional import need

from ._mpi import HERE, run_json
from .conftest import RANKS

CASES = ("channels-grid", "channels-metis", "channels-constants", "half-channels-skip",
         "elasticity-metis", "elasticity-neumann")


@pytest.fixture(scope="module", params=(1, *RANKS), ids=lambda p: f"np{p}")
def results(request, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp(f"adaptive{request.param}") / "results.json"
    return run_json(HERE / "_workers_adaptive.py", request.param, out)


@pytest.mark.parametrize("case", CASES)
def test_geneo_from_local_rows_equals_the_serial_basis(results, case):
    r = results["cases"][case]
    assert r["construction"] == "rank-local" and not r["gathered"]
    assert r["setup_exchanges"] > 0  # ghost rows and Phi's entries travelled
    assert r["block_coarse_matrix"] == 0  # no rank keeps its block's Phi^T A Phi
    assert r["coarse_dim"] == r["serial_coarse_dim"] > 0
    # the same local matrices: every subdomain has as many eigenvalues below the threshold
    # (with PARDISO an exact count, the inertia of N_i - tau B_i)
    if r["serial_selected"] is not None:
        assert r["selected"] == r["serial_selected"]
    # the same span: each rank's eigensolves run on other chunks of subdomains than the
    # serial one, so the vectors agree to the subspace iteration's accuracy (its Ritz values
    # settle to 1e-6 of the threshold, the vectors to about the square root; on the small
    # elasticity problem the serial basis itself moves by 1.4e-2 (from A) and 1.6e-2 (with
    # the finite-element matrices) in this measure when its chunks of subdomains are cut
    # smaller, one subdomain each)
    assert r["gap"] <= (2e-2 if case.startswith("elasticity") else 1e-3)
    if results["size"] == 1:  # one rank: the serial chunks, the serial basis to rounding
        assert r["gap"] <= 1e-8
    # the cut local matrices on the diagonally dominant channels, oversampled on elasticity
    # from A, the user's (finite-element) ones with neumann=
    assert r["oversampling"] == (2 if case == "elasticity-metis" else 0)
    # the contrast indicator skips the serial build's subdomains, neighbours on other ranks
    # included in each one's measure
    assert r["skipped"] == r["serial_skipped"] == (4 if case == "half-channels-skip" else 0)


@pytest.mark.parametrize("case", CASES)
def test_geneo_from_local_rows_takes_the_serial_iterations(results, case):
    r = results["cases"][case]
    assert r["info"] == r["serial_info"] == 0
    # (measured: the serial count on 1, 2 and 4 ranks in every case)
    assert abs(r["iterations"] - r["serial_iterations"]) <= 1


@pytest.mark.parametrize("case", CASES)
def test_rows_fetched_on_request_equal_the_matrix_rows(results, case):
    """``DistributedLayout.fetch_rows``: any rows, from any owners, in the order asked."""
    assert results["cases"][case]["fetch_rows_equal"]


@pytest.mark.parametrize("case", ["channels-grid", "channels-metis", "elasticity-metis",
                                  "elasticity-neumann", "half-channels-grid", "strips-neumann"])
def test_agdsw_from_local_rows_equals_the_serial_preconditioner(results, case):
    """AGDSW from the closed parts around each rank's components (and two layers of rows
    around them): its eigenproblems are dense, so the preconditioner is the serial one to
    rounding (amplified by the contrast on elasticity), with the serial iterations (on
    elasticity at contrast 1e6 to the rounding sensitivity of CG's count).  With
    ``neumann=`` each rank holds its own subdomains' matrices only, and a rank without a
    component of its own still takes part in their exchange (strips).  On one rank the
    serial preconditioner itself."""
    r = results["agdsw"][case]
    # (one rank holds every row: the serial construction, which classifies the interface once)
    assert r["construction"] == ("serial" if results["size"] == 1 else "rank-local")
    assert not r["gathered"]
    assert r["coarse_dim"] == r["serial_coarse_dim"] > 0
    assert r["apply_error"] <= (1e-8 if case.startswith("elasticity") else 1e-10)
    assert r["info"] == 0
    if case.startswith("elasticity"):
        # contrast 1e6: CG's count moves with the last digits of the preconditioner (serially
        # 90 to 99 when the Neumann matrices are scaled by 1 + k 1e-15, k = 0, ..., 11; the
        # preconditioners themselves agree to apply_error above)
        assert abs(r["iterations"] - r["serial_iterations"]) <= 0.1 * r["serial_iterations"]
    else:
        assert r["iterations"] == r["serial_iterations"]
    # every component's eigenproblem is one rank's: the ranks' counts are the serial ones
    assert r["eigenproblems"] == r["serial_eigenproblems"] == r["components"]
    assert r["skipped"] == r["serial_skipped"]
    if case == "half-channels-grid":  # the contrast indicator skipped some components
        assert 0 < r["serial_skipped"] and 0 < r["serial_eigenproblems"]


def test_agdsw_a_missing_neumann_matrix_is_refused_on_every_rank(results):
    """The owner of subdomain 1 holds None for it: every rank raises the same ValueError
    (the matrices are checked before the exchange, the verdict agreed)."""
    messages = results["agdsw"]["missing_neumann"]
    assert len(messages) == results["size"]
    assert all("neumann[1] is None" in m for m in messages)


def test_geneo_eigen_stop_reaches_the_ranks(results):
    """``eigen_stop="count"`` from the ranks' rows: the serial counts and coarse dimension,
    fewer solves than settling, and the serial "count" run's CG iterations within two (each
    rank's chunks stop elsewhere; no longer the same basis to the digits)."""
    need("pardiso")
    r = results["eigen_stop"]
    settled, count = r["settled"], r["count"]
    assert count["selected"] == settled["selected"] == r["serial_selected"]
    assert count["coarse_dim"] == settled["coarse_dim"] == r["serial_coarse_dim"] > 0
    assert count["info"] == settled["info"] == 0
    assert count["solves"] < settled["solves"]
    assert abs(count["iterations"] - r["serial_iterations"]) <= 2
