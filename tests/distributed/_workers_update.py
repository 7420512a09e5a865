"""``DistributedTwoLevelSchwarz.update`` under ``mpiexec``; rank 0 writes the numbers as JSON.

Usage: ``mpiexec -n P python tests/distributed/_workers_update.py --out FILE``.  Every
rank builds the matrices ``A`` and ``A2`` (the same pattern, other values), the serial
references (``TwoLevelSchwarz(A, d).update(A2)``), then keeps its own rows; the
distributed preconditioner built on ``A`` and updated to ``A2`` is compared with a fresh
one built on ``A2`` and with the serial reference.
"""

from __future__ import annotations

import argparse
import json
import warnings

import numpy as np
import scipy.sparse as sp

import ddops
from ddops.distributed import DistributedLayout, guard, mpi, world
from ddops.distributed.precond import DistributedTwoLevelSchwarz
from ddops.precond.schwarz import TwoLevelSchwarz

KINDS = ("gdsw", "rgdsw", "agdsw", "geneo")
VARIANTS = ("additive", "hybrid")


def _max(comm, value: float) -> float:
    return float(comm.allreduce(float(value), op=mpi().MAX))


def _all(comm, flag: bool) -> bool:
    return bool(comm.allreduce(bool(flag), op=mpi().LAND))


def _rel(a, b) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


def _apply(M, X):
    return np.stack([M.matvec(x) for x in X.T], axis=1), np.stack([M.rmatvec(x)
                                                                   for x in X.T], axis=1)


def run(comm) -> dict:
    rank = comm.Get_rank()
    A = ddops.poisson_2d(24)
    n = A.shape[0]
    # the same pattern, other values (diagonally dominant, as GenEO's algebraic form needs)
    A2 = (2.3 * A + sp.diags(0.5 + np.random.default_rng(1).random(n))).tocsr()
    assert np.array_equal(A2.indices, A.indices) and np.array_equal(A2.indptr, A.indptr)
    d = ddops.Decomposition.from_matrix(A, 6, overlap=1, seed=1)
    X = np.random.default_rng(7).standard_normal((n, 3))
    owned = DistributedLayout(d, comm).owned
    rows, rows2 = A[owned].tocsr(), A2[owned].tocsr()
    L = DistributedLayout(d, comm, A=rows)
    Xo = X[owned]
    out: dict = {"size": comm.Get_size(), "update": {}}
    for kind in KINDS:
        for variant in VARIANTS:
            S = TwoLevelSchwarz(A, d, kind, variant).update(A2)
            ref = (S @ X)[owned], (S.H @ X)[owned]
            for form in ("local rows", "global"):
                if form == "global" and kind != "gdsw":
                    continue
                old, new = (rows, rows2) if form == "local rows" else (A, A2)
                M = DistributedTwoLevelSchwarz(L, old, kind, variant)
                before = M.coarse_dim
                same = M.update(new)
                F = DistributedTwoLevelSchwarz(L, new, kind, variant)
                y, yt = _apply(M, Xo)
                f, ft = _apply(F, Xo)
                out["update"][f"{kind}/{variant}/{form}"] = {
                    "returns_self": _all(comm, same is M),
                    "matrix_input": M.matrix_input,
                    "coarse_dim": [before, M.coarse_dim, F.coarse_dim, S.coarse_dim],
                    "fresh": max(_max(comm, _rel(y, f)), _max(comm, _rel(yt, ft))),
                    "serial": max(_max(comm, _rel(y, ref[0])), _max(comm, _rel(yt, ref[1]))),
                    "updates": M.updates, "symbolic_seconds": M.symbolic_seconds,
                }
    # reuse_coarse=True keeps Phi's rows bit for bit and equals the serial reuse
    for variant in VARIANTS:
        M = DistributedTwoLevelSchwarz(L, rows, "gdsw", variant)
        Phi = M.coarse_basis_rows.copy()
        local = M.local
        M.update(rows2, reuse_coarse=True)
        P2 = M.coarse_basis_rows
        S = TwoLevelSchwarz(A, d, "gdsw", variant).update(A2, reuse_coarse=True)
        y, _ = _apply(M, Xo)
        fresh = DistributedTwoLevelSchwarz(L, rows2, "gdsw", variant).coarse_basis_rows
        out[f"reuse/{variant}"] = {
            "phi_bitwise": _all(comm, np.array_equal(Phi.indptr, P2.indptr)
                                and np.array_equal(Phi.indices, P2.indices)
                                and np.array_equal(Phi.data, P2.data)),
            # the fresh basis of A2 differs: keeping it was a real choice
            "fresh_differs": not _all(comm, Phi.shape == fresh.shape
                                      and abs(Phi - fresh).max() == 0),
            "serial": _max(comm, _rel(y, (S @ X)[owned])),
            "local_same_object": _all(comm, M.local is local),
        }
    # a pattern changed on rank 1 only: every rank raises
    bad = rows2.tocoo()
    if rank == 1 % comm.Get_size():
        far = int(np.setdiff1d(np.arange(n), bad.col[bad.row == 0])[-1])
        bad = sp.coo_matrix((np.append(bad.data, 0.0), (np.append(bad.row, 0),
                                                         np.append(bad.col, far))),
                            shape=bad.shape)
    bad = bad.tocsr()
    M = DistributedTwoLevelSchwarz(L, rows, "gdsw", "additive")
    try:
        M.update(bad)
        message = None
    except ValueError as exc:
        message = str(exc)
    messages = comm.allgather(message)
    out["pattern"] = {"raised": [m is not None for m in messages], "messages": messages}
    # the options: SchwarzOptions and keywords, the refusals
    opts = ddops.SchwarzOptions(coarse="agdsw", variant="hybrid", factor_dtype="float32",
                                agdsw=ddops.AGDSWOptions(threshold=0.5))
    M = DistributedTwoLevelSchwarz(L, rows, options=opts)
    with warnings.catch_warnings():  # coarse_options= is deprecated, and still works
        warnings.simplefilter("ignore", DeprecationWarning)
        K = DistributedTwoLevelSchwarz(L, rows, "agdsw", "hybrid", factor_dtype=np.float32,
                                       coarse_options={"threshold": 0.5})
    S = TwoLevelSchwarz(A, d, options=opts)
    y, _ = _apply(M, Xo)
    refusals = {}
    for name, kwargs in {"kernel": {"kernel": np.ones(n)},
                         "both": {"variant": "hybrid", "options": opts}}.items():
        try:
            DistributedTwoLevelSchwarz(L, rows, **kwargs)
            refusals[name] = None
        except (ValueError, TypeError) as exc:
            refusals[name] = f"{type(exc).__name__}: {exc}"
    out["options"] = {"coarse_dim": [M.coarse_dim, S.coarse_dim],
                      "factor_dtype": str(M.local.factor_dtype),
                      "serial": _max(comm, _rel(y, (S @ X)[owned])),
                      "refusals": refusals,
                      "keywords": _max(comm, _rel(_apply(K, Xo)[0], y))}
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    comm = world()
    with guard(comm):
        out = run(comm)
    if comm.Get_rank() == 0:
        with open(args.out, "w") as f:
            json.dump(out, f)


if __name__ == "__main__":
    main()
