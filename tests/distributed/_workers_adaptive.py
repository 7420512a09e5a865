"""Rank-local GenEO checks run on every rank under ``mpiexec``; rank 0 writes JSON.

Usage: ``mpiexec -n P python tests/distributed/_workers_adaptive.py --out FILE``.
Every rank builds the problem and the serial references (GenEO's basis, the serial
preconditioner's applications and CG iterations), keeps only its own rows of ``A`` and
deletes the global matrix before the distributed preconditioner is built, so its GenEO
basis can only come from the owned and ghost rows.  The distributed basis is gathered on
every rank (for the comparison only) and compared with the serial one up to column order
and sign: each serial column must be in the span of the distributed ones and back.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from _worker_support import (  # this folder's (the script's first path entry)
    count_iterations,
    worker_main,
)

import ddops
from ddops.dd.adaptive import geneo_basis
from ddops.distributed import DistributedLayout, DistributedMatrix, mpi
from ddops.distributed.krylov import cg
from ddops.distributed.precond import DistributedTwoLevelSchwarz
from ddops.linalg.local_solvers import default_exact_solver
from ddops.precond.schwarz import TwoLevelSchwarz
from ddops.problems import diffusion_2d, high_contrast_channels


def _max(comm, value: float) -> float:
    return float(comm.allreduce(float(value), op=mpi().MAX))


def _all(comm, flag: bool) -> bool:
    return bool(comm.allreduce(bool(flag), op=mpi().LAND))


def _span_gap(P: np.ndarray, Q: np.ndarray) -> float:
    """The largest relative distance of a column of ``Q`` from the span of ``P``."""
    if Q.shape[1] == 0:
        return 0.0
    U, _ = np.linalg.qr(P)
    Q = Q / np.linalg.norm(Q, axis=0)
    return float(np.linalg.norm(Q - U @ (U.T @ Q), axis=0).max())


def _cases(P):
    """(name, matrix, decomposition, subdomain_ranks, null space, Neumann matrices)."""
    n = 31
    A = diffusion_2d(high_contrast_channels(n, 1e6, margin=2, period=3))
    yield ("channels-grid", A, ddops.Decomposition.from_grid((n, n), (4, 4), overlap=1), None,
           None, None)
    yield ("channels-metis", A, ddops.Decomposition.from_matrix(A, 12, overlap=2, seed=1),
           np.random.default_rng(2).permutation(np.arange(12) % P), None, None)
    yield ("channels-constants", A, ddops.Decomposition.from_grid((n, n), (4, 4), overlap=1),
           None, np.ones(n * n), None)
    # GenEO's contrast indicator (skip_contrast): the lower boxes, homogeneous with their
    # neighbours, solve no eigenproblem; their neighbours may live on other ranks
    yield ("half-channels-skip", _half_channels(n, 1e6),
           ddops.Decomposition.from_grid((n, n), (4, 4), overlap=1), None, None, None)
    # not diagonally dominant: oversampled local matrices, whose grown sets (two layers and
    # the stiff growth) reach beyond a rank's region
    from ddops.experiments.precond import PrecondConfig, build_problem, decompose

    c = PrecondConfig(problem="elasticity2d", n=23, contrast=1e6, subdomains=8).validated()
    prob = build_problem(c)
    d, _, _ = decompose(c, prob)
    yield "elasticity-metis", prob.A.tocsr(), d, None, prob.null_space, None
    # the finite-element Neumann matrices of the subdomains (each rank reads its own)
    yield "elasticity-neumann", prob.A.tocsr(), d, None, prob.null_space, prob.neumann(d)


def run(comm) -> dict:
    P = comm.Get_size()
    out: dict = {"size": P, "cases": {}, "agdsw": _agdsw(comm),
                 "eigen_stop": _eigen_stop(comm)}
    for name, A, d, ranks, Z, neumann in _cases(P):
        n = A.shape[0]
        b = np.random.default_rng(3).standard_normal(n)
        skip = 10.0 if name.endswith("-skip") else None
        ref_phi, ref_info = geneo_basis(A, d, null_space=Z, neumann=neumann, return_info=True,
                                        skip_contrast=skip)
        ref_phi = ref_phi.toarray()
        options = ddops.SchwarzOptions(coarse="geneo", null_space=Z,
                                       geneo=ddops.GenEOOptions(neumann=neumann,
                                                                skip_contrast=skip))
        S = TwoLevelSchwarz(A, d, options=options)
        ref_its = count_iterations(spla.cg, A, b, rtol=1e-8, M=S)
        owned = DistributedLayout(d, comm, subdomain_ranks=ranks).owned
        rows = A[owned].tocsr()
        # rows of any owners on request (the growth's fetches): a different sample per rank
        wanted = np.unique(np.random.default_rng(comm.Get_rank()).choice(n, 40))
        expected = A[wanted].toarray()
        del A, S  # from here on no global matrix exists on any rank
        L = DistributedLayout(d, comm, A=rows, subdomain_ranks=ranks)
        got, none = L.fetch_rows(rows, wanted), L.fetch_rows(rows, wanted[:0])  # collective
        fetched = _all(comm, np.array_equal(got.toarray(), expected) and none.shape == (0, n))
        L.reset_stats()
        if neumann is not None:  # every rank holds only its own subdomains' matrices
            mine = set(L.local_subdomains.tolist())
            options = ddops.SchwarzOptions(coarse="geneo", null_space=Z, geneo=ddops.GenEOOptions(
                neumann=[N if i in mine else None for i, N in enumerate(neumann)]))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            M = DistributedTwoLevelSchwarz(L, rows, options=options)
        # the distributed basis, gathered for the comparison only: owned rows of every rank
        mine = M._Phi_ext[: L.num_owned].tocoo()
        pieces = comm.allgather((L.owned[mine.row], mine.col, mine.data))
        r, c, v = (np.concatenate(x) for x in zip(*pieces, strict=True))
        phi = sp.csr_matrix((v, (r, c)), shape=(n, M.coarse_dim)).toarray()
        # the eigenvalues below the threshold of every subdomain (exact counts, with PARDISO's
        # inertia): the same local matrices as the serial ones
        mine = dict(zip(L.local_subdomains.tolist(), M.coarse_info.selected.tolist(),
                        strict=True))
        counts = {k: v for part in comm.allgather(mine) for k, v in part.items()}
        selected = [counts[i] for i in range(d.num_subdomains)]
        Ad = DistributedMatrix(L)
        info, its = count_iterations(cg, Ad, L.scatter(b), rtol=1e-8, M=M)
        out["cases"][name] = {
            "construction": str(M.coarse_construction),
            "gathered": _all(comm, M.gathered_matrix),
            "coarse_dim": M.coarse_dim, "serial_coarse_dim": int(ref_phi.shape[1]),
            "gap": max(_span_gap(phi, ref_phi), _span_gap(ref_phi, phi)),
            "iterations": int(comm.allreduce(its, op=mpi().MAX)),
            "serial_iterations": ref_its[1], "info": info, "serial_info": ref_its[0],
            # the set-up exchanged rows and Phi's entries, and gathered no rows
            "setup_exchanges": int(comm.allreduce(L.stats["setup_exchanges"])),
            # no rank keeps its block's Phi^T A Phi (the serial builder's, not A_0's)
            "block_coarse_matrix": int(comm.allreduce(
                int(getattr(M.coarse_info, "coarse_matrix", None) is not None))),
            "oversampling": int(M.coarse_stats.get("oversampling", -1)),
            "skipped": int(comm.allreduce(M.coarse_info.stats["skipped_by_contrast"])),
            "serial_skipped": int(ref_info.stats["skipped_by_contrast"]),
            "fetch_rows_equal": fetched,
            "selected": selected,
            # exact counts with PARDISO's inertia only (else the iteration's, to its accuracy)
            "serial_selected": (ref_info.selected.tolist()
                                if default_exact_solver() == "pardiso" else None),
        }
    return out


def _eigen_stop(comm) -> dict:
    """GenEO with ``eigen_stop`` "settled" and "count" from the ranks' rows, beside the serial
    "count" run: the counts, coarse dimensions, CG iterations and the most solves of a
    chunk (over the ranks), by the subspace iteration (the block Krylov method, the
    default, settles this small problem as soon as it reaches the counts: no fewer solves
    to tell the stops apart)."""
    from ddops.dd import geneo

    krylov, geneo.GENEO_KRYLOV = geneo.GENEO_KRYLOV, False
    try:
        return _eigen_stops(comm)
    finally:
        geneo.GENEO_KRYLOV = krylov


def _eigen_stops(comm) -> dict:
    """:func:`_eigen_stop`'s runs."""
    n = 31  # (contrast 100: eigenvalues between a tenth of the threshold and it)
    A = diffusion_2d(high_contrast_channels(n, 1e2, margin=2, period=3))
    d = ddops.Decomposition.from_grid((n, n), (4, 4), overlap=1)
    b = np.random.default_rng(3).standard_normal(n * n)
    out: dict = {}
    serial = TwoLevelSchwarz(A, d, options=ddops.SchwarzOptions(
        coarse="geneo", geneo=ddops.GenEOOptions(eigen_stop="count")))
    out["serial_selected"] = serial.coarse_info.selected.tolist()
    out["serial_coarse_dim"] = serial.coarse_dim
    out["serial_iterations"] = count_iterations(spla.cg, A, b, rtol=1e-8, M=serial)[1]
    owned = DistributedLayout(d, comm).owned
    rows = A[owned].tocsr()
    del A, serial
    L = DistributedLayout(d, comm, A=rows)
    for stop in ("settled", "count"):
        M = DistributedTwoLevelSchwarz(L, rows, options=ddops.SchwarzOptions(
            coarse="geneo", geneo=ddops.GenEOOptions(eigen_stop=stop)))
        mine = dict(zip(L.local_subdomains.tolist(), M.coarse_info.selected.tolist(),
                        strict=True))
        counts = {k: v for part in comm.allgather(mine) for k, v in part.items()}
        info, its = count_iterations(cg, DistributedMatrix(L), L.scatter(b), rtol=1e-8, M=M)
        out[stop] = {"selected": [counts[i] for i in range(d.num_subdomains)],
                     "coarse_dim": M.coarse_dim, "info": info,
                     "iterations": int(comm.allreduce(its, op=mpi().MAX)),
                     "solves": int(_max(comm, M.coarse_info.stats["subspace_iterations"]))}
    return out


def _agdsw(comm) -> dict:
    """AGDSW from the ranks' rows against the serial basis (its eigenproblems are dense: the
    same functions to rounding), on the channels (boxes and METIS parts) and elasticity."""
    P = comm.Get_size()
    from ddops.experiments.precond import PrecondConfig, build_problem, decompose

    n = 31
    A = diffusion_2d(high_contrast_channels(n, 1e4, margin=2, period=3))
    c = PrecondConfig(problem="elasticity2d", n=23, contrast=1e6, subdomains=8).validated()
    prob = build_problem(c)
    de = decompose(c, prob)[0]
    strips = ddops.Decomposition.from_grid((n, n), (4, 1), overlap=1)
    cases = [("channels-grid", A, ddops.Decomposition.from_grid((n, n), (4, 4), overlap=1),
              None, None, None),
             ("channels-metis", A, ddops.Decomposition.from_matrix(A, 12, overlap=1, seed=1),
              np.random.default_rng(2).permutation(np.arange(12) % P), None, None),
             ("elasticity-metis", prob.A.tocsr(), de, None, prob.null_space, None),
             # the finite-element Neumann matrices: each rank holds its own subdomains', and
             # fetches those of the other parts around its components
             ("elasticity-neumann", prob.A.tocsr(), de,
              np.random.default_rng(4).permutation(np.arange(8) % P), prob.null_space,
              prob.neumann(de)),
             # channels in the upper boxes only: the indicator skips the components around
             # the lower ones (on every rank as in the serial build)
             ("half-channels-grid", _half_channels(n, 1e4),
              ddops.Decomposition.from_grid((n, n), (4, 4), overlap=1), None, None, None),
             # four strips, the last rank holding only the last one: no component of its own
             # (every component's first part is another rank's), yet it takes part in the
             # exchange of the Neumann matrices
             ("strips-neumann", A, strips,
              np.arange(4) if P == 4 else np.minimum(np.array([0, 0, 0, 1]), P - 1),
              None, _cut_matrices(A, strips))]
    out = {}
    for name, A, d, ranks, Z, neumann in cases:
        nn = A.shape[0]
        b = np.random.default_rng(3).standard_normal(nn)
        agdsw = ddops.AGDSWOptions(neumann=neumann)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # elasticity: not dominant
            S = TwoLevelSchwarz(A, d, options=ddops.SchwarzOptions(
                coarse="agdsw", null_space=Z, agdsw=agdsw))
        ref_its = count_iterations(spla.cg, A, b, rtol=1e-8, M=S)
        X = np.random.default_rng(7).standard_normal(nn)
        y_ref = S.matvec(X)
        owned = DistributedLayout(d, comm, subdomain_ranks=ranks).owned
        rows = A[owned].tocsr()
        L = DistributedLayout(d, comm, A=rows, subdomain_ranks=ranks)
        if neumann is not None:  # every rank holds only its own subdomains' matrices
            mine = set(L.local_subdomains.tolist())
            agdsw = ddops.AGDSWOptions(
                neumann=[N if i in mine else None for i, N in enumerate(neumann)])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            M = DistributedTwoLevelSchwarz(L, rows, options=ddops.SchwarzOptions(
                coarse="agdsw", null_space=Z, agdsw=agdsw))
        y = L.gather(M.matvec(L.scatter(X)))
        info, its = count_iterations(cg, DistributedMatrix(L), L.scatter(b), rtol=1e-8, M=M)
        out[name] = {"construction": str(M.coarse_construction),
                     "gathered": _all(comm, M.gathered_matrix),
                     "coarse_dim": M.coarse_dim, "serial_coarse_dim": S.coarse_dim,
                     "apply_error": _max(comm, np.abs(y - y_ref).max() / np.abs(y_ref).max()),
                     "iterations": int(comm.allreduce(its, op=mpi().MAX)),
                     "serial_iterations": ref_its[1], "info": info,
                     "serial_skipped": S.coarse_stats["skipped_eigenproblems"],
                     "serial_eigenproblems": S.coarse_stats["eigenproblems"],
                     # each component is one rank's: the ranks' counts add up to the serial
                     "skipped": int(comm.allreduce(
                         M.coarse_stats.get("skipped_eigenproblems", 0))),
                     "eigenproblems": int(comm.allreduce(M.coarse_stats.get("eigenproblems", 0))),
                     "components": int(comm.allreduce(0 if M.coarse_info is None else int(
                         (~np.isnan(M.coarse_info.eigenvalues)).sum())))}
    # a Neumann matrix missing on the rank that owns it: every rank raises (none waits)
    owned = DistributedLayout(strips, comm).owned
    rows = A[owned].tocsr()
    L = DistributedLayout(strips, comm, A=rows)
    mine = set(L.local_subdomains.tolist())
    missing = [N if i in mine and i != 1 else None
               for i, N in enumerate(_cut_matrices(A, strips))]
    try:
        DistributedTwoLevelSchwarz(L, rows, options=ddops.SchwarzOptions(
            coarse="agdsw", agdsw=ddops.AGDSWOptions(neumann=missing, skip_contrast=0)))
        message = ""
    except ValueError as exc:
        message = str(exc)
    out["missing_neumann"] = comm.allgather(message)
    return out


def _cut_matrices(A, d) -> list:
    """Local Neumann matrices of the subdomains of ``d`` from ``A``: its block with the
    absolute couplings that leave the subdomain taken off the diagonal."""
    absA = abs(A).tocsr()
    out = []
    for idx in d.subdomains:  # a loop over a few subdomains (a test's reference)
        block = A[idx][:, idx].tocsr()
        leaving = np.asarray(absA[idx].sum(axis=1)).ravel() - np.asarray(
            abs(block).sum(axis=1)).ravel()
        out.append((block - sp.diags(leaving)).tocsr())
    return out


def _half_channels(n: int, contrast: float):
    """Floating channels along x in the upper rows only."""
    c = np.ones((n + 1, n + 1))
    c[20:n - 2:3, 3:n - 2] = contrast
    return diffusion_2d(c)


if __name__ == "__main__":
    worker_main(run)
