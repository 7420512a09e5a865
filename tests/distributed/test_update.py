"""``DistributedTwoLevelSchwarz``: the numeric phase again for a new matrix (``update``), and
the options of the serial preconditioner (under ``mpiexec -n 2``)."""

from __future__ import annotations

import pytest

from ._mpi import HERE, run_json

KINDS = ("gdsw", "rgdsw", "agdsw", "geneo")
CASES = [f"{k}/{v}/local rows" for k in KINDS for v in ("additive", "hybrid")] + [
    "gdsw/additive/global", "gdsw/hybrid/global"]


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("update") / "results.json"
    return run_json(HERE / "_workers_update.py", 2, out)


@pytest.mark.parametrize("case", CASES)
def test_update_equals_fresh_and_serial(results, case):
    r = results["update"][case]
    assert r["returns_self"]
    assert r["matrix_input"] == case.split("/")[2]
    before, updated, fresh, serial = r["coarse_dim"]
    assert updated == fresh == serial
    # GenEO from the ranks' rows solves its eigenproblems in other chunks than the serial
    # code: the same functions to the subspace iteration's accuracy
    assert r["fresh"] <= 1e-12 and r["serial"] <= (1e-4 if case.startswith("geneo") else 1e-12)
    assert r["updates"] == 1 and r["symbolic_seconds"] == 0.0


def test_geneo_update_rebuilds_the_basis(results):
    """GenEO's dimension depends on the values: the update rebuilt Phi, it did not keep it."""
    before, updated, _, _ = results["update"]["geneo/additive/local rows"]["coarse_dim"]
    assert before != updated


@pytest.mark.parametrize("variant", ["additive", "hybrid"])
def test_reuse_coarse_keeps_phi(results, variant):
    r = results[f"reuse/{variant}"]
    assert r["phi_bitwise"] and r["fresh_differs"]
    assert r["serial"] <= 1e-12  # the serial update with reuse_coarse=True
    assert r["local_same_object"]  # the local part was updated, not rebuilt


def test_changed_pattern_on_one_rank_raises_on_every_rank(results):
    r = results["pattern"]
    assert r["raised"] == [True, True]
    assert "another sparsity pattern on rank 1" in r["messages"][1]
    assert r["messages"][0].startswith("DistributedTwoLevelSchwarz.update failed on rank 1 of 2")
    assert "build a new DistributedTwoLevelSchwarz" in r["messages"][0]


def test_options_as_the_serial_class(results):
    r = results["options"]
    assert r["coarse_dim"][0] == r["coarse_dim"][1] > 14  # the threshold was used
    assert r["factor_dtype"] == "float32"
    assert r["extension_reuse"] == "ordering"  # reaches the ranks' coarse construction
    assert r["serial"] <= 1e-5  # float32 local factors
    assert r["keywords"] == 0.0  # options= and the keywords build the same preconditioner
    assert r["refusals"]["both"].startswith("TypeError: give the settings either as options=")


KERNEL_CASES = [f"{k}/{v}" for k in ("gdsw", "rgdsw", "nicolaides", "geneo")
                for v in ("additive", "hybrid")]


@pytest.mark.parametrize("case", KERNEL_CASES)
def test_kernel_gives_the_serial_projected_preconditioner(results, case):
    """``kernel=`` on a pure-Neumann Laplacian: the grounded coarse space and ``P M P`` of
    the serial class, built and updated (GDSW/RGDSW/GenEO grounded over the ranks' rows of
    Phi, Nicolaides by the serial code), with the constants annihilated."""
    r = results["kernel"][case]
    kind = case.split("/")[0]
    assert r["construction"] == ("serial" if kind == "nicolaides" else "rank-local")
    if kind == "geneo":
        # the serial basis code drops the constants' direction as a dependent function
        # (no energy in the singular A); a rank's region block is definite, so the
        # grounding drops it there
        assert r["dropped"][0] >= r["dropped"][1]
    else:
        assert r["dropped"][0] == r["dropped"][1]
    assert r["coarse_dim"][0] == r["coarse_dim"][1]
    assert r["serial"] <= 1e-12 and r["updated"] <= 1e-12
    assert r["constants"] <= 1e-12


def test_kernel_cg_converges_as_the_serial_one(results):
    r = results["kernel"]["cg"]
    assert r["info"] == 0
    assert abs(r["its"][0] - r["its"][1]) <= 1
    assert r["residual"] <= 1.1e-8
    assert abs(r["mean"]) <= 1e-12 * r["scale"]  # the solution orthogonal to the kernel


def test_kernel_remove_and_the_inconsistent_warning(results):
    r = results["kernel"]
    assert r["remove_kernel"] <= 1e-14
    assert r["warned"] == [2, 0]  # once per matrix, by rank 0 only


def test_a_wrong_kernel_is_refused_on_every_rank(results):
    messages = results["kernel"]["refused"]
    assert all(m is not None and "column 0 is not in the kernel of A" in m for m in messages)
