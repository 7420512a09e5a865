"""Checks run on every rank under ``mpiexec``; rank 0 writes the numbers as JSON.

Usage: ``mpiexec -n P python tests/distributed/mpi_checks.py --out FILE [--only NAME ...]``.
Every check returns numbers already reduced over the ranks (maximum errors,
all-rank agreement), computed against an independent serial construction;
the pytest modules assert on them.  A failing rank stops the job through
:func:`ddops.distributed.guard`.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import ddops
from ddops.distributed import DistributedLayout, DistributedMatrix, guard, world
from ddops.distributed.krylov import cg, gmres
from ddops.distributed.precond import DistributedTwoLevelSchwarz
from ddops.precond.schwarz import TwoLevelSchwarz

CHECKS: dict[str, Callable] = {}


def check(fn: Callable) -> Callable:
    CHECKS[fn.__name__] = fn
    return fn


def _max(comm, value: float) -> float:
    return float(comm.allreduce(float(value), op=_mpi().MAX))


def _all(comm, flag: bool) -> bool:
    return bool(comm.allreduce(bool(flag), op=_mpi().LAND))


def _mpi():
    from ddops.distributed import mpi

    return mpi()


def _layout_cases(comm):
    """(name, decomposition, A, subdomain_ranks, exchange) of the halo-plan checks."""
    P = comm.Get_size()
    A = ddops.poisson_2d(24)
    grid = ddops.Decomposition.from_grid((24, 24), (4, 3), overlap=1)
    yield "grid", grid, A, None, "neighbor"
    yield "grid-alltoallv", grid, A, None, "alltoallv"
    B = ddops.poisson_2d(20)
    metis = ddops.Decomposition.from_matrix(B, 7, overlap=2, seed=3)
    ranks = np.random.default_rng(5).permutation(np.arange(7) % P)  # same on every rank
    yield "metis-random-map", metis, B, ranks, "neighbor"
    # no owner labels: unknowns go to the first subdomain that contains them
    d1 = ddops.Decomposition([np.arange(0, 30), np.arange(25, 60), np.arange(55, 100),
                              np.arange(90, 120)], 120)
    yield "no-owner", d1, ddops.poisson_1d(121), None, "neighbor"


def _serial_plan(d, A, ranks, P):
    """Owned and ghost sets of every rank from Python sets and a dense A (independent)."""
    n = d.num_dofs
    if d.owner is not None:
        owner = d.owner
    else:
        owner = np.array([next(i for i, s in enumerate(d.subdomains) if j in set(s.tolist()))
                          for j in range(n)])
    dof_rank = np.array([ranks[owner[j]] for j in range(n)])
    dense = A.toarray()
    plan = []
    for r in range(P):
        owned = {j for j in range(n) if dof_rank[j] == r}
        region = set()
        for i, s in enumerate(d.subdomains):
            if ranks[i] == r:
                region |= set(s.tolist())
        cols = {int(c) for j in owned for c in np.flatnonzero(dense[j])}
        plan.append((owned, (region | cols) - owned))
    return dof_rank, plan


@check
def layout(comm):
    P, rank = comm.Get_size(), comm.Get_rank()
    out = {}
    for name, d, A, ranks, exchange in _layout_cases(comm):
        L = DistributedLayout(d, comm, A=A, subdomain_ranks=ranks, exchange=exchange)
        r_of_sub = L.subdomain_ranks if ranks is None else ranks
        if ranks is None:  # contiguous blocks, independently
            sizes = [len(b) for b in np.array_split(np.arange(d.num_subdomains), P)]
            r_of_sub = np.repeat(np.arange(P), sizes)
        dof_rank, plan = _serial_plan(d, A, r_of_sub, P)
        owned, ghosts = plan[rank]
        ok_map = np.array_equal(L.subdomain_ranks, r_of_sub)
        ok_owned = L.owned.tolist() == sorted(owned)
        ok_ghosts = set(L.ghosts.tolist()) == ghosts and L.num_ghosts == len(ghosts)
        key = dof_rank[L.ghosts] * d.num_dofs + L.ghosts  # ordered by (owner rank, index)
        ok_order = bool(np.all(np.diff(key) > 0))
        ok_send = True
        for dest in range(P):
            sent = L.owned[L.send_index[L.send_displs[dest]:L.send_displs[dest]
                                        + L.send_counts[dest]]]
            ok_send &= sent.tolist() == sorted(plan[dest][1] & owned)
        rng = np.random.default_rng(11)
        X = rng.standard_normal((d.num_dofs, 3))
        L.reset_stats()
        ext2 = L.update_ghosts(L.scatter(X))
        ext1 = L.update_ghosts(L.scatter(X[:, 0]))
        err_forward = max(np.abs(ext2 - X[L.ext_indices]).max(),
                          np.abs(ext1 - X[L.ext_indices, 0]).max())
        stats = dict(L.stats)
        ok_stats = (stats["exchanges"] == 2 and stats["messages"] == 2 * len(L.send_ranks)
                    and stats["bytes"] == 8 * 4 * int(L.send_counts.sum()))
        # reverse: rank s contributes (s + 1) X[j] for every j in its extended vector
        back = L.reduce_ghosts((rank + 1) * X[L.ext_indices])
        expect = np.zeros_like(X)
        for s in range(P):
            for j in plan[s][0] | plan[s][1]:
                expect[j] += (s + 1) * X[j]
        err_reverse = np.abs(back - expect[L.owned]).max() if L.num_owned else 0.0
        err_gather = np.abs(L.gather(L.scatter(X)) - X).max()
        g0 = L.gather(L.scatter(X[:, 1]), root=0)
        ok_root = (g0 is None) if rank else bool(np.array_equal(g0, X[:, 1]))
        # the matrix: owned rows times the extended vector
        M = DistributedMatrix(L)
        AX = A @ X
        err_matvec = np.abs(L.gather(M.matvec(L.scatter(X))) - AX).max() / np.abs(AX).max()
        out[name] = {
            "ok_map": _all(comm, ok_map), "ok_owned": _all(comm, ok_owned),
            "ok_ghosts": _all(comm, ok_ghosts), "ok_order": _all(comm, ok_order),
            "ok_send": _all(comm, ok_send), "ok_stats": _all(comm, ok_stats),
            "ok_root": _all(comm, ok_root),
            "err_forward": _max(comm, err_forward), "err_reverse": _max(comm, err_reverse),
            "err_gather": _max(comm, err_gather), "err_matvec": _max(comm, err_matvec),
            "ghosts_total": int(comm.allreduce(L.num_ghosts)),
        }
    return out


@check
def layout_errors(comm):
    """Bad arguments raise on every rank alike (so no rank is left in a collective)."""
    d = ddops.Decomposition.from_grid((8, 8), (4, 2), overlap=1)
    P = comm.Get_size()
    messages = {}
    attempts = {
        "too_many_ranks": lambda: DistributedLayout(
            ddops.Decomposition.from_grid((8, 8), (1, 1), overlap=0), comm),
        "bad_map": lambda: DistributedLayout(d, comm, subdomain_ranks=np.array([0] * 7 + [P])),
        "bad_A": lambda: DistributedLayout(d, comm, A=sp.eye(5)),
        "bad_exchange": lambda: DistributedLayout(d, comm, exchange="ring"),
    }
    for key, attempt in attempts.items():
        try:
            attempt()
            messages[key] = ""
        except (ValueError, TypeError) as exc:
            messages[key] = f"{type(exc).__name__}: {exc}"
    return messages


def _rel(a, b) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


def _precond_cases(comm):
    """(name, A, decomposition, subdomain_ranks) of the preconditioner checks."""
    P = comm.Get_size()
    A = ddops.poisson_2d(32)
    yield "grid", A, ddops.Decomposition.from_grid((32, 32), (4, 4), overlap=1), None
    B = ddops.poisson_2d(24)
    metis = ddops.Decomposition.from_matrix(B, 9, overlap=2, seed=1)
    yield "metis", B, metis, np.random.default_rng(2).permutation(np.arange(9) % P)
    # element-based 1D: GDSW classifies the shared interface nodes (the shared-node rule)
    yield "1d-element", ddops.poisson_1d(256), ddops.Decomposition1D(256, 8, overlap=2), None


@check
def precond(comm):
    """Distributed M x and M^T x against the serial TwoLevelSchwarz, every variant and basis."""
    out = {}
    for name, A, d, ranks in _precond_cases(comm):
        L = DistributedLayout(d, comm, A=A, subdomain_ranks=ranks)
        X = np.random.default_rng(7).standard_normal(d.num_dofs)
        for basis in ("gdsw", "rgdsw", "nicolaides", None):
            for variant in ("additive", "restricted", "symmetric_restricted", "hybrid"):
                serial = TwoLevelSchwarz(A, d, coarse_basis=basis, variant=variant,
                                         coarse=basis is not None)
                dist = DistributedTwoLevelSchwarz(L, A, basis, variant=variant)
                L.reset_stats()
                y = L.gather(dist.matvec(L.scatter(X)))
                stats = dict(L.stats)
                yt = L.gather(dist.rmatvec(L.scatter(X)))
                err_phi = err_A0 = 0.0
                if basis is not None:  # this rank's rows of Phi and the assembled A_0
                    Phi = serial.coarse_matrix
                    err_phi = _rel(dist._Phi.toarray(), Phi[L.owned].toarray())
                    A0 = (Phi.T @ A @ Phi).toarray()
                    err_A0 = _rel(dist.coarse_matrix.toarray(), A0)
                out[f"{name}/{basis}/{variant}"] = {
                    "err_phi": _max(comm, err_phi), "err_A0": _max(comm, err_A0),
                    "construction": str(dist.coarse_construction),
                    "err": _max(comm, _rel(y, serial.matvec(X))),
                    "err_adjoint": _max(comm, _rel(yt, serial.rmatvec(X))),
                    "coarse_dim": dist.coarse_dim, "serial_coarse_dim": serial.coarse_dim,
                    # one application: forward + reverse exchange, one coarse reduction
                    "exchanges": stats["exchanges"], "reductions": stats["reductions"],
                    "reduction_bytes": stats["reduction_bytes"],
                }
    return out


@check
def coarse_constructions(comm):
    """The rank-local GDSW/RGDSW rows and A_0 equal the serial basis; other cases fall back."""
    A = ddops.poisson_2d(24)
    d = ddops.Decomposition.from_matrix(A, 6, overlap=1, seed=4)
    L = DistributedLayout(d, comm, A=A)
    out = {}
    for basis in ("gdsw", "rgdsw"):
        for local in (True, False):
            for null_space in (None, np.ones(A.shape[0])):
                dist = DistributedTwoLevelSchwarz(L, A, basis, local_basis=local,
                                                  null_space=null_space)
                Phi = ddops.coarse_basis(d, basis, A=A)
                err = _rel(dist._Phi.toarray(), Phi[L.owned].toarray())
                err0 = _rel(dist.coarse_matrix.toarray(), (Phi.T @ A @ Phi).toarray())
                key = f"{basis}/{'local' if local else 'serial'}/" + (
                    "constants" if null_space is None else "given")
                out[key] = {"construction": dist.coarse_construction,
                            "err_phi": _max(comm, err), "err_A0": _max(comm, err0)}
    # a user matrix Phi (here the RGDSW basis scaled by 2), serial on every rank
    Phi = 2.0 * ddops.coarse_basis(d, "rgdsw", A=A)
    dist = DistributedTwoLevelSchwarz(L, A, Phi)
    out["user/serial/given"] = {
        "construction": dist.coarse_construction,
        "err_phi": _max(comm, _rel(dist._Phi.toarray(), Phi[L.owned].toarray())),
        "err_A0": _max(comm, _rel(dist.coarse_matrix.toarray(), (Phi.T @ A @ Phi).toarray()))}
    return out


def _count(solver, *args, **kwargs):
    calls = [0]

    def callback(_):
        calls[0] += 1

    x, info = solver(*args, callback=callback, **kwargs)
    return x, int(info), calls[0]


@check
def krylov(comm):
    """Iterations, info and solutions of distributed CG/GMRES against scipy's serial ones."""
    out = {}
    A = ddops.poisson_2d(32)
    d = ddops.Decomposition.from_grid((32, 32), (4, 4), overlap=1)
    L = DistributedLayout(d, comm, A=A)
    Ad = DistributedMatrix(L)
    rng = np.random.default_rng(3)
    b = rng.standard_normal(d.num_dofs)
    x0 = rng.standard_normal(d.num_dofs)
    runs = {
        "cg/gdsw/additive": ("cg", "gdsw", "additive", {}),
        "cg/rgdsw/additive": ("cg", "rgdsw", "additive", {}),
        "cg/one-level": ("cg", None, "additive", {}),
        "cg/gdsw/hybrid": ("cg", "gdsw", "hybrid", {}),
        "cg/gdsw/x0-atol": ("cg", "gdsw", "additive", {"x0": x0, "atol": 1e-3}),
        "cg/maxiter": ("cg", "gdsw", "additive", {"maxiter": 5}),
        "gmres/gdsw/restricted": ("gmres", "gdsw", "restricted", {}),
        "gmres/gdsw/restricted/restart5": ("gmres", "gdsw", "restricted", {"restart": 5}),
        "gmres/one-level/restricted/x0": ("gmres", None, "restricted", {"x0": x0}),
        "gmres/maxiter": ("gmres", "gdsw", "restricted", {"restart": 3, "maxiter": 2}),
    }
    for key, (method, basis, variant, kw) in runs.items():
        serial = TwoLevelSchwarz(A, d, coarse_basis=basis, variant=variant,
                                 coarse=basis is not None)
        dist = DistributedTwoLevelSchwarz(L, A, basis, variant=variant)
        skw = dict(kw)
        dkw = dict(kw)
        if "x0" in kw:
            dkw["x0"] = L.scatter(kw["x0"])
        if method == "cg":
            xs, infos, its = _count(spla.cg, A, b, rtol=1e-8, M=serial, **skw)
            xd, infod, itd = _count(cg, Ad, L.scatter(b), rtol=1e-8, M=dist, **dkw)
        else:
            xs, infos, its = _count(spla.gmres, A, b, rtol=1e-8, M=serial,
                                    callback_type="pr_norm", **skw)
            xd, infod, itd = _count(gmres, Ad, L.scatter(b), rtol=1e-8, M=dist, **dkw)
        out[key] = {"serial_iterations": its, "iterations": int(comm.allreduce(itd, op=_mpi().MAX)),
                    "serial_info": infos, "info": infod,
                    "err_x": _max(comm, _rel(L.gather(xd), xs))}
    # classical Gram-Schmidt twice: other rounding, same convergence
    dist = DistributedTwoLevelSchwarz(L, A, "gdsw", variant="restricted")
    xd, infod, itd = _count(gmres, Ad, L.scatter(b), rtol=1e-8, M=dist, orthogonalization="cgs2")
    res = L.norm(L.scatter(b) - Ad.matvec(xd)) / np.linalg.norm(b)
    out["gmres/cgs2"] = {"iterations": itd, "info": infod, "relres": res}
    # a zero right-hand side returns it with info 0, as scipy
    z, info = cg(Ad, np.zeros(L.num_owned), M=dist)
    out["zero_rhs"] = {"info": info, "max": _max(comm, np.abs(z).max() if z.size else 0.0)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args()
    comm = world()
    with guard(comm):
        names = args.only or list(CHECKS)
        results = {name: CHECKS[name](comm) for name in names}
        results["size"] = comm.Get_size()
        if comm.Get_rank() == 0:
            with open(args.out, "w") as fh:
                json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
