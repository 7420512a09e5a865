"""``-ddops_kernel constants`` through PETSc on 1 and 2 ranks: the serial singular form.

On several ranks the python PC builds a ``DistributedTwoLevelSchwarz``, which grounds the
coarse space and applies ``P M P`` over the ranks' rows (``worker_kernel.py``).
"""

from __future__ import annotations

import pytest

from ._petsc import run_worker


@pytest.fixture(scope="module", params=(1, 2), ids=lambda p: f"np{p}")
def results(request, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp(f"kernel{request.param}") / "results.json"
    data = run_worker(request.param, out, worker="worker_kernel.py")
    assert data["size"] == request.param
    return data


@pytest.mark.parametrize("case", ["gdsw", "nicolaides"])
def test_kernel_constants_converge_as_the_serial_preconditioner(results, case):
    r = results["cases"][case]
    assert r["kind"] == ("TwoLevelSchwarz" if results["size"] == 1
                         else "DistributedTwoLevelSchwarz")
    assert r["petsc_reason"] > 0 and r["serial_info"] == 0
    assert abs(r["petsc_iterations"] - r["serial_iterations"]) <= 1
    assert r["dropped"] == r["serial_dropped"] == 1
    assert r["coarse_dim"] == r["serial_coarse_dim"]
