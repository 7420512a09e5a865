"""The distributed layout against a serial construction of the same plan (under mpiexec)."""

from __future__ import annotations

import pytest

CASES = ("grid", "grid-alltoallv", "metis-random-map", "no-owner")


@pytest.mark.parametrize("case", CASES)
def test_halo_plan_matches_serial_construction(mpi_results, case):
    r = mpi_results["layout"][case]
    # owners, ghost sets (subdomains with overlap + columns of the owned rows), ghost order by
    # owning rank, and the send lists: all equal to the Python-set construction on every rank
    for flag in ("ok_map", "ok_owned", "ok_ghosts", "ok_order", "ok_send"):
        assert r[flag], flag
    assert r["ghosts_total"] > 0


@pytest.mark.parametrize("case", CASES)
def test_exchanges_gather_and_matvec(mpi_results, case):
    r = mpi_results["layout"][case]
    assert r["err_forward"] == 0.0  # a copy: exact
    assert r["err_reverse"] <= 1e-14  # sums of up to P multiples of one value, in another order
    assert r["err_gather"] == 0.0
    assert r["ok_root"]
    assert r["err_matvec"] <= 1e-14
    # two exchanges: one message per send neighbour each, 8 bytes x (3 + 1) columns per entry
    assert r["ok_stats"]


def test_bad_arguments_raise_on_every_rank(mpi_results):
    m = mpi_results["layout_errors"]
    P = mpi_results["size"]
    assert m["too_many_ranks"].startswith("ValueError") and f"{P} ranks" in m["too_many_ranks"]
    assert "subdomain_ranks" in m["bad_map"]
    assert m["bad_A"].startswith("ValueError: A must have shape")
    assert "exchange" in m["bad_exchange"]
