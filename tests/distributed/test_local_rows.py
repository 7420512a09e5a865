"""The distributed preconditioner from each rank's own rows of A (under mpiexec -n 2 and -n 4).

The worker deletes the global matrix on every rank after computing the serial
references, so the layout, the ghost-row exchange, the subdomain matrices,
the GDSW/RGDSW basis and the coarse matrix can only come from the owned rows.
"""

from __future__ import annotations

import itertools

import pytest

from ._mpi import HERE, run_json
from .conftest import RANKS

MESHES = ("grid", "metis", "1d-element")
CASES = [f"{m}/{b}/{v}" for m, b, v in itertools.product(
    MESHES, ("gdsw", "rgdsw", "nicolaides", "None"),
    ("additive", "restricted", "symmetric_restricted", "hybrid"))]


@pytest.fixture(scope="module", params=RANKS, ids=lambda p: f"np{p}")
def results(request, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp(f"local_rows{request.param}") / "results.json"
    return run_json(HERE / "_workers_local_rows.py", request.param, out)


@pytest.mark.parametrize("mesh", MESHES)
def test_ghost_row_exchange_equals_slicing(results, mesh):
    r = results["ghost_rows"][mesh]
    assert r["equal"] and r["equal_subset"]
    # counted once, at set-up: flags, row lengths, columns and values; nothing per application
    assert r["setup_bytes"] == r["expected_bytes"] > 0
    assert r["per_application"] == 0


@pytest.mark.parametrize("case", CASES)
def test_apply_from_local_rows_equals_serial(results, case):
    r = results["apply"][case]
    assert r["matrix_input"] == "local rows"
    assert r["coarse_dim"] == r["serial_coarse_dim"]
    basis = case.split("/")[1]
    expected = {"gdsw": "rank-local", "rgdsw": "rank-local", "None": "None"}
    assert r["construction"] == expected.get(basis, "serial")
    assert not r["gathered"]  # no global matrix assembled anywhere
    assert r["err"] <= 1e-12 and r["err_adjoint"] <= 1e-12
    # one application: the forward and the reverse halo exchange (hybrid with a coarse space:
    # two products with A more), no set-up traffic
    extra = 2 if case.endswith("hybrid") and r["coarse_dim"] else 0
    assert r["exchanges"] == 2 + extra and r["apply_setup_bytes"] == 0
    assert r["setup_exchanges"] > 0  # the region's ghost rows were exchanged


@pytest.mark.parametrize("mesh", MESHES)
def test_agdsw_is_built_rank_locally(results, mesh):
    """AGDSW with local_basis=True: from the closed parts around each rank's components
    (:func:`ddops.distributed.precond.rank_local_agdsw`), equal to the serial AGDSW
    preconditioner, with no matrix gathered (also under the shared-node rule in 1D)."""
    r = results["apply"][f"{mesh}/agdsw-local/additive"]
    assert r["construction"] == "rank-local" and not r["gathered"]
    assert r["coarse_dim"] == r["serial_coarse_dim"]
    assert r["err"] <= 1e-10 and r["err_adjoint"] <= 1e-10


@pytest.mark.parametrize("case", [f"{m}/{z}" for m in MESHES
                                  for z in ("gdsw-ones", "gdsw-Z2", "rgdsw-Z2")])
def test_given_null_space_from_local_rows(results, case):
    r = results["apply"][f"{case}/additive"]
    assert r["construction"] == "rank-local" and not r["gathered"]
    assert r["coarse_dim"] == r["serial_coarse_dim"]  # the same vectors dropped
    assert r["err"] <= 1e-12 and r["err_adjoint"] <= 1e-12
    if case.endswith("gdsw-Z2") and not case.endswith("rgdsw-Z2"):
        # some second vectors were dropped (one-unknown components): the removal ran
        ones = results["apply"][case.replace("Z2", "ones") + "/additive"]["coarse_dim"]
        assert ones < r["coarse_dim"] < 2 * ones or case.startswith("1d")
        assert r["coarse_dim"] < 2 * ones


@pytest.mark.parametrize("mesh", MESHES)
def test_serial_basis_falls_back_to_the_gathered_matrix(results, mesh):
    r = results["apply"][f"{mesh}/gdsw-serial/additive"]
    assert r["construction"] == "serial" and r["gathered"]
    assert r["err"] <= 1e-12 and r["err_adjoint"] <= 1e-12


@pytest.mark.parametrize("case", [f"{m}/{b}" for m in MESHES for b in ("gdsw", "rgdsw", "None")])
def test_cg_iterations_equal_serial(results, case):
    r = results["cg"][case]
    assert r["iterations"] == r["min_iterations"] == r["serial_iterations"]
    assert r["info"] == r["serial_info"] == 0


def test_bad_matrix_arguments_raise_on_every_rank(results):
    m = results["errors"]
    assert m["wrong_rows"].startswith("ValueError: A must have shape")
    assert m["no_matrix"].startswith("ValueError: A is required")
    assert m["wrong_size"].startswith("ValueError: A has size 16")
    assert m["bad_which"].startswith("ValueError: which must have shape")


@pytest.mark.parametrize("basis", ("gdsw", "rgdsw"))
def test_elasticity_rigid_body_modes_from_local_rows(results, basis):
    # two unknowns per node: the interface rows are gathered node by node
    assert results["elasticity"]["block_size"] == 2
    r = results["elasticity"][basis]
    assert r["construction"] == "rank-local" and not r["gathered"]
    assert r["coarse_dim"] == r["serial_coarse_dim"]
    assert r["err"] <= 1e-12
