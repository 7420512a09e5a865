"""The distributed SchwarzOperator application equals the serial one (under mpiexec).

``_workers_operator.py`` applies every case forward and adjoint, whole and by
part, on 2 and 4 ranks: a 1D decomposition (interface hats, partition of unity,
tied, every PoU placement, a random map of subdomains to ranks) and a 2D
``from_grid`` decomposition with a GDSW coarse basis (neighbourhood and
``Alltoallv`` exchanges, a truncated coarse rank) and without a coarse space,
and METIS parts of unequal sizes (local blocks in several padded groups) on a
random map of subdomains to ranks.
"""

from __future__ import annotations

import pytest

from ._mpi import HERE, run_json

CASES = ("1d", "1d-tied-left-rankmap", "1d-left-pou", "2d-gdsw", "2d-gdsw-alltoallv",
         "2d-one-level", "metis-groups-rankmap")


@pytest.fixture(scope="module", params=(2, 4), ids=lambda p: f"np{p}")
def operator_results(request, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp(f"operator{request.param}") / "results.json"
    return run_json(HERE / "_workers_operator.py", request.param, out)


@pytest.mark.parametrize("case", CASES)
def test_distributed_apply_equals_serial(operator_results, case):
    r = operator_results[case]
    expected = {f"{part}{adj}" for part in ("full", "local", "coarse")
                for adj in ("", "-adjoint")} | {"matvec-gathered"}
    assert set(r["errors"]) == expected
    for what, error in r["errors"].items():
        assert error <= 1e-12, (case, what, error)


@pytest.mark.parametrize("case", CASES)
def test_one_halo_exchange_each_way_and_one_reduction(operator_results, case):
    r = operator_results[case]
    assert r["exchanges"] == 2  # owned + ghost rows in, ghost contributions back
    assert r["reductions"] == (1 if r["coarse_dim"] else 0)  # Phi^T X, n0 x B


def test_bad_arguments_are_refused():
    pytest.importorskip("mpi4py")
    import numpy as np

    import ddops
    from ddops.distributed import DistributedLayout
    from ddops.distributed.operator import DistributedSchwarzOperator

    d = ddops.Decomposition1D(32, 4, 1)
    op = ddops.SchwarzOperator(d, local_rank=2)
    layout = DistributedLayout(d)  # one rank (no mpiexec): owns everything
    with pytest.raises(TypeError, match="op"):
        DistributedSchwarzOperator(object(), layout)
    with pytest.raises(TypeError, match="layout"):
        DistributedSchwarzOperator(op, object())
    other = DistributedLayout(ddops.Decomposition1D(32, 4, 2))
    with pytest.raises(ValueError, match="layout"):
        DistributedSchwarzOperator(op, other)
    with pytest.raises(ValueError, match="base"):
        DistributedSchwarzOperator(ddops.SchwarzOperator(d, 2, base=np.eye(d.num_dofs)), layout)
    dop = DistributedSchwarzOperator(op, layout)
    with pytest.raises(ValueError, match="X"):
        dop.matmat(np.ones((3, 2)))
    with pytest.raises(ValueError, match="part"):
        dop.apply(np.ones((d.num_dofs, 2)), part="middle")
    x = np.random.default_rng(0).standard_normal(d.num_dofs)
    np.testing.assert_allclose(dop.matvec(x), op.matvec(x), rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(dop.rmatvec(x), op.rmatvec(x), rtol=1e-13, atol=1e-14)
