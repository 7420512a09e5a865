"""Worker of tests/distributed/test_operator_mpi.py, run under ``mpiexec -n P``.

``python _workers_operator.py --out FILE`` applies distributed Schwarz
operators (forward and adjoint, every part) to random blocks and writes, from
rank 0, the largest error against the serial ``op.matmat``/``op.rmatmat``
(relative to the largest entry of the serial result, maximised over ranks)
and the communication counted per application.
"""

from __future__ import annotations

import argparse
import json
import warnings

import numpy as np

import ddops
from ddops.distributed import DistributedLayout, guard, mpi, world
from ddops.distributed.operator import DistributedSchwarzOperator


def cases(P: int):
    """(name, operator, layout keyword arguments); identical on every rank."""
    d1 = ddops.Decomposition1D(96, 8, 2)
    yield "1d", ddops.SchwarzOperator(d1, local_rank=3, seed=1), {}
    yield "1d-tied-left-rankmap", ddops.SchwarzOperator(d1, local_rank=3, seed=2, tied=True,
                                                        partition="none"), \
        {"subdomain_ranks": np.random.default_rng(7).permutation(np.arange(8) % P)}
    yield "1d-left-pou", ddops.SchwarzOperator(d1, local_rank=2, seed=3, partition="left",
                                               coarse_basis="pou", coarse_rank=3), {}
    A = ddops.poisson_2d(20)
    d2 = ddops.Decomposition.from_grid((20, 20), (3, 3), overlap=2)
    phi = ddops.coarse_basis(d2, "gdsw", A=A)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a local rank capped at small subdomains
        yield "2d-gdsw", ddops.SchwarzOperator(d2, local_rank=4, coarse_basis=phi, seed=4), {}
        yield "2d-gdsw-alltoallv", ddops.SchwarzOperator(d2, local_rank=4, coarse_basis=phi,
                                                         coarse_rank=5, seed=5), \
            {"exchange": "alltoallv", "A": A}
    yield "2d-one-level", ddops.SchwarzOperator(d2, local_rank=4, coarse_basis=None, seed=6), {}
    # METIS parts of unequal sizes, stored in several padded groups where the operator has them
    B = ddops.poisson_2d(16)
    d3 = ddops.Decomposition.from_matrix(B, 7, overlap=1, seed=2)
    op = ddops.SchwarzOperator(d3, local_rank=3, coarse_basis=ddops.coarse_basis(d3, "gdsw", A=B),
                               seed=7, padding_groups=3)
    assert op.padding_groups == 3
    yield "metis-groups-rankmap", op, \
        {"subdomain_ranks": np.random.default_rng(3).permutation(np.arange(7) % P)}


def main(out: str) -> None:
    comm = world()
    MPI = mpi()
    rng = np.random.default_rng(11)  # the same global blocks on every rank
    report = {}
    for name, op, kwargs in cases(comm.Get_size()):
        layout = DistributedLayout(op.decomposition, comm, **kwargs)
        dop = DistributedSchwarzOperator(op, layout)
        X = rng.standard_normal((op.shape[0], 5))
        x = rng.standard_normal(op.shape[0])
        errors = {}
        for part in ("full", "local", "coarse"):
            for adjoint in (False, True):
                ref = (op.rmatmat(X) if adjoint else op.matmat(X)) if part == "full" else (
                    (op.coarse_part() if part == "coarse" else op.local_part()).rmatmat(X)
                    if adjoint else
                    (op.coarse_part() if part == "coarse" else op.local_part()).matmat(X))
                got = dop.apply(layout.scatter(X), adjoint=adjoint, part=part)
                scale = np.abs(ref).max() or 1.0  # the coarse part of a one-level operator is 0
                err = np.abs(got - ref[layout.owned]).max(initial=0.0) / scale
                errors[f"{part}{'-adjoint' if adjoint else ''}"] = comm.allreduce(err, MPI.MAX)
        vec = dop.matvec(layout.scatter(x))
        gathered = layout.gather(vec)
        errors["matvec-gathered"] = float(np.abs(gathered - op.matvec(x)).max()
                                          / np.abs(op.matvec(x)).max())
        layout.reset_stats()
        dop.matmat(layout.scatter(X))
        stats = [comm.allreduce(layout.stats[k], MPI.MAX) for k in ("exchanges", "reductions")]
        report[name] = {"errors": errors, "exchanges": int(stats[0]),
                        "reductions": int(stats[1]), "coarse_dim": op.coarse_dim}
    if comm.Get_rank() == 0:
        with open(out, "w") as fh:
            json.dump(report, fh, indent=1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    with guard():
        main(parser.parse_args().out)
