"""Local-rows checks run on every rank under ``mpiexec``; rank 0 writes the numbers as JSON.

Usage: ``mpiexec -n P python tests/distributed/_workers_local_rows.py --out FILE``.
Every rank builds the problem, computes the serial references (the serial
:class:`ddops.TwoLevelSchwarz` applications and scipy CG iteration counts),
keeps only its own rows of ``A`` and deletes the global matrix before any
distributed object is built: the layout, the preconditioner and the
distributed matrix only ever see the owned rows.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse.linalg as spla
from _worker_support import (  # this folder's (the script's first path entry)
    count_iterations,
    worker_main,
)

import ddops
from ddops.distributed import DistributedLayout, DistributedMatrix, mpi
from ddops.distributed.krylov import cg
from ddops.distributed.precond import DistributedTwoLevelSchwarz
from ddops.precond.schwarz import TwoLevelSchwarz

BASES = ("gdsw", "rgdsw", "nicolaides", None)
VARIANTS = ("additive", "restricted", "symmetric_restricted", "hybrid")


def _max(comm, value: float) -> float:
    return float(comm.allreduce(float(value), op=mpi().MAX))


def _all(comm, flag: bool) -> bool:
    return bool(comm.allreduce(bool(flag), op=mpi().LAND))


def _rel(a, b) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


def _cases(P):
    """(name, matrix builder, decomposition, subdomain_ranks)."""
    grid = ddops.Decomposition.from_grid((32, 32), (4, 4), overlap=1)
    yield "grid", lambda: ddops.poisson_2d(32), grid, None
    B = ddops.poisson_2d(24)
    metis = ddops.Decomposition.from_matrix(B, 9, overlap=2, seed=1)
    yield "metis", lambda: ddops.poisson_2d(24), metis, (
        np.random.default_rng(2).permutation(np.arange(9) % P))
    # element-based 1D: the shared-node interface rule
    yield "1d-element", lambda: ddops.poisson_1d(256), ddops.Decomposition1D(256, 8,
                                                                             overlap=2), None


def run(comm) -> dict:
    P = comm.Get_size()
    out: dict = {"size": P, "apply": {}, "cg": {}, "ghost_rows": {}}
    for name, build, d, ranks in _cases(P):
        A = build()
        n = A.shape[0]
        X = np.random.default_rng(7).standard_normal(n)
        b = np.random.default_rng(3).standard_normal(n)
        # -- serial references, then only this rank's rows survive
        ref, ref_cg = {}, {}
        for basis in BASES:
            for variant in VARIANTS:
                S = TwoLevelSchwarz(A, d, coarse_basis=basis, variant=variant,
                                    coarse=basis is not None)
                ref[basis, variant] = (S.matvec(X), S.rmatvec(X), S.coarse_dim)
            if basis in ("gdsw", "rgdsw", None):
                S = TwoLevelSchwarz(A, d, coarse_basis=basis, coarse=basis is not None)
                ref_cg[basis] = count_iterations(spla.cg, A, b, rtol=1e-8, M=S)
        # given null spaces: the constants, and two vectors (dependent on one-unknown
        # components, where the second is dropped; cos keeps A_0 well conditioned, so
        # 1e-12 measures the construction, not the conditioning); the gathered fallback
        Z2 = np.stack([np.ones(n), np.cos(np.arange(n))], axis=1)
        given = {"gdsw-ones": ("gdsw", np.ones(n), True), "gdsw-Z2": ("gdsw", Z2, True),
                 "rgdsw-Z2": ("rgdsw", Z2, True), "gdsw-serial": ("gdsw", None, False),
                 # AGDSW asked for rank-local: from the closed parts around each rank's
                 # components (never silently as RGDSW)
                 "agdsw-local": ("agdsw", None, True)}
        for key, (basis, Z, _) in given.items():
            S = TwoLevelSchwarz(A, d, coarse_basis=basis, null_space=Z)
            ref[key, "additive"] = (S.matvec(X), S.rmatvec(X), S.coarse_dim)
        owned = DistributedLayout(d, comm, subdomain_ranks=ranks).owned
        rows = A[owned].tocsr()
        probe = DistributedLayout(d, comm, A=rows, subdomain_ranks=ranks)
        expected_ghost_rows = A[probe.ghosts].toarray()
        del A, S  # from here on no global matrix exists on any rank
        L = DistributedLayout(d, comm, A=rows, subdomain_ranks=ranks)
        # -- the ghost-row exchange against slicing the global matrix
        L.reset_stats()
        G = L.ghost_rows()
        some = np.arange(L.num_ghosts) % 2 == 0
        G2 = L.ghost_rows(rows, which=some)
        sub = expected_ghost_rows.copy()
        sub[~some] = 0.0
        out["ghost_rows"][name] = {
            "equal": _all(comm, np.array_equal(G.toarray(), expected_ghost_rows)),
            "equal_subset": _all(comm, np.array_equal(G2.toarray(), sub)
                                 and np.all(np.diff(G2.indptr)[~some] == 0)),
            "setup_bytes": int(comm.allreduce(L.stats["setup_bytes"])),
            # bytes received = bytes sent, over all ranks: per call one flag byte per
            # ghost, 8 bytes per row length, 8 + 8 per entry (column, value)
            "expected_bytes": int(comm.allreduce(
                9 * L.num_ghosts + 16 * np.count_nonzero(expected_ghost_rows)
                + L.num_ghosts + 8 * int(some.sum()) + 16 * np.count_nonzero(sub))),
            "per_application": int(comm.allreduce(L.stats["exchanges"] + L.stats["bytes"])),
        }
        # -- applications from the owned rows only
        for key, (y_ref, yt_ref, n0) in ref.items():
            basis, variant = key
            kwargs = {}
            if basis in given:
                basis, Z, local = given[basis]
                kwargs = {"null_space": Z, "local_basis": local}
            L.reset_stats()
            M = DistributedTwoLevelSchwarz(L, rows, basis, variant=variant, **kwargs)
            setup = dict(L.stats)
            L.reset_stats()
            y = L.gather(M.matvec(L.scatter(X)))
            apply_stats = dict(L.stats)
            yt = L.gather(M.rmatvec(L.scatter(X)))
            out["apply"][f"{name}/{key[0]}/{variant}"] = {
                "err": _max(comm, _rel(y, y_ref)), "err_adjoint": _max(comm, _rel(yt, yt_ref)),
                "coarse_dim": M.coarse_dim, "serial_coarse_dim": n0,
                "matrix_input": M.matrix_input, "construction": str(M.coarse_construction),
                "gathered": _all(comm, M.gathered_matrix) if basis else False,
                "setup_exchanges": int(comm.allreduce(setup["setup_exchanges"])),
                "apply_setup_bytes": int(comm.allreduce(apply_stats["setup_bytes"])),
                "exchanges": apply_stats["exchanges"],
            }
        # -- distributed CG from the owned rows against scipy's serial CG
        Ad = DistributedMatrix(L)
        for basis in ("gdsw", "rgdsw", None):
            M = DistributedTwoLevelSchwarz(L, None, basis)  # None: the layout's rows
            info, its = count_iterations(cg, Ad, L.scatter(b), rtol=1e-8, M=M)
            out["cg"][f"{name}/{basis}"] = {
                "iterations": int(comm.allreduce(its, op=mpi().MAX)),
                "min_iterations": int(comm.allreduce(its, op=mpi().MIN)),
                "serial_iterations": ref_cg[basis][1], "info": info,
                "serial_info": ref_cg[basis][0]}
    out["elasticity"] = _elasticity(comm)
    out["errors"] = _errors(comm)
    return out


def _elasticity(comm) -> dict:
    """2D elasticity (two unknowns per node, the rigid body modes) from owned rows."""
    from ddops.experiments.precond import PrecondConfig, build_problem, decompose

    c = PrecondConfig(problem="elasticity2d", n=12, subdomains=4, overlap=1, memory=False,
                      plots=False, progress=False).validated()
    prob = build_problem(c)
    d, _, _ = decompose(c, prob)
    A, Z = prob.A, prob.null_space
    X = np.random.default_rng(5).standard_normal(A.shape[0])
    ref = {b: TwoLevelSchwarz(A, d, coarse_basis=b, null_space=Z) for b in ("gdsw", "rgdsw")}
    ref = {b: (S.matvec(X), S.coarse_dim) for b, S in ref.items()}
    rows = A[DistributedLayout(d, comm).owned].tocsr()
    del A
    L = DistributedLayout(d, comm, A=rows)
    out = {"block_size": d.block_size}
    for b, (y_ref, n0) in ref.items():
        M = DistributedTwoLevelSchwarz(L, None, b, null_space=Z)
        out[b] = {"err": _max(comm, _rel(L.gather(M.matvec(L.scatter(X))), y_ref)),
                  "coarse_dim": M.coarse_dim, "serial_coarse_dim": n0,
                  "construction": M.coarse_construction,
                  "gathered": _all(comm, M.gathered_matrix)}
    return out


def _errors(comm) -> dict:
    """Bad matrix arguments raise on every rank alike (no rank is left in a collective)."""
    d = ddops.Decomposition.from_grid((8, 8), (4, 2), overlap=1)
    A = ddops.poisson_2d(8)
    bare = DistributedLayout(d, comm)
    rows = A[bare.owned]
    L = DistributedLayout(d, comm, A=rows)
    attempts = {
        "wrong_rows": lambda: DistributedTwoLevelSchwarz(L, rows[:-1], "gdsw"),
        "no_matrix": lambda: DistributedTwoLevelSchwarz(bare, None, "gdsw"),
        "wrong_size": lambda: DistributedTwoLevelSchwarz(L, ddops.poisson_2d(4), "gdsw"),
        "bad_which": lambda: L.ghost_rows(rows, which=np.ones(L.num_ghosts + 1, bool)),
    }
    messages = {}
    for key, attempt in attempts.items():
        try:
            attempt()
            messages[key] = ""
        except (ValueError, TypeError) as exc:
            messages[key] = f"{type(exc).__name__}: {exc}"
    return messages


if __name__ == "__main__":
    worker_main(run)
