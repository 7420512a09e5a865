"""``DistributedTwoLevelSchwarz.update`` under ``mpiexec``; rank 0 writes the numbers as JSON.

Usage: ``mpiexec -n P python tests/distributed/_workers_update.py --out FILE``.  Every
rank builds the matrices ``A`` and ``A2`` (the same pattern, other values), the serial
references (``TwoLevelSchwarz(A, d).update(A2)``), then keeps its own rows; the
distributed preconditioner built on ``A`` and updated to ``A2`` is compared with a fresh
one built on ``A2`` and with the serial reference.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from _worker_support import worker_main  # this folder's (the script's first path entry)

import ddops
from ddops.distributed import DistributedLayout, DistributedMatrix, mpi
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
                                agdsw=ddops.AGDSWOptions(threshold=0.5),
                                extension_reuse="ordering")
    M = DistributedTwoLevelSchwarz(L, rows, options=opts)
    with warnings.catch_warnings():  # coarse_options= is deprecated, and still works
        warnings.simplefilter("ignore", DeprecationWarning)
        K = DistributedTwoLevelSchwarz(L, rows, "agdsw", "hybrid", factor_dtype=np.float32,
                                       coarse_options={"threshold": 0.5})
    S = TwoLevelSchwarz(A, d, options=opts)
    y, _ = _apply(M, Xo)
    refusals = {}
    for name, kwargs in {"both": {"variant": "hybrid", "options": opts}}.items():
        try:
            DistributedTwoLevelSchwarz(L, rows, **kwargs)
            refusals[name] = None
        except (ValueError, TypeError) as exc:
            refusals[name] = f"{type(exc).__name__}: {exc}"
    out["options"] = {"coarse_dim": [M.coarse_dim, S.coarse_dim],
                      "factor_dtype": str(M.local.factor_dtype),
                      "extension_reuse": M.coarse.analysis.reuse,
                      "serial": _max(comm, _rel(y, (S @ X)[owned])),
                      "refusals": refusals,
                      "keywords": _max(comm, _rel(_apply(K, Xo)[0], y))}
    out["kernel"] = kernel_cases(comm)
    return out


def _neumann_laplacian_2d(m: int) -> sp.csr_matrix:
    """The 5-point Laplacian with homogeneous Neumann conditions: kernel = constants."""
    T = sp.diags([-np.ones(m - 1), 2 * np.ones(m), -np.ones(m - 1)], [-1, 0, 1]).tolil()
    T[0, 0] = T[-1, -1] = 1.0
    T = T.tocsr()
    return (sp.kron(T, sp.identity(m)) + sp.kron(sp.identity(m), T)).tocsr()


def kernel_cases(comm) -> dict:
    """``kernel=``: the distributed P M P against the serial one (built, updated), CG on a
    consistent right-hand side, remove_kernel, the inconsistent-residual warning and a
    wrong kernel refused on every rank."""
    from ddops.distributed.krylov import cg

    A = _neumann_laplacian_2d(20)
    n = A.shape[0]
    A2 = (1.7 * A).tocsr()
    A2.data[: A2.indptr[n // 2]] *= 1.3  # other values in the first rows ...
    A2 = ((A2 + A2.T) * 0.5).tocsr()  # ... symmetric again, still annihilating the constants
    A2 = A2 - sp.diags(np.asarray(A2.sum(axis=1)).ravel())
    A2.sum_duplicates()
    A2 = (A2 + sp.csr_matrix((np.zeros(A.nnz), A.indices, A.indptr), shape=A.shape)).tocsr()
    A2.sort_indices()
    assert np.array_equal(A2.indices, A.indices) and np.array_equal(A2.indptr, A.indptr)
    d = ddops.Decomposition.from_matrix(A, 6, overlap=1, seed=1)
    owned = DistributedLayout(d, comm).owned
    rows, rows2 = A[owned].tocsr(), A2[owned].tocsr()
    L = DistributedLayout(d, comm, A=rows)
    X = np.random.default_rng(3).standard_normal((n, 3))
    X -= X.mean(axis=0)  # on range(A)
    Xo = X[owned]
    out: dict = {}
    for kind in ("gdsw", "rgdsw", "nicolaides", "geneo"):
        for variant in VARIANTS:
            S = TwoLevelSchwarz(A, d, kind, variant, kernel=np.ones(n))
            S2 = TwoLevelSchwarz(A, d, kind, variant, kernel=np.ones(n)).update(A2)
            M = DistributedTwoLevelSchwarz(L, rows, kind, variant, kernel="constants")
            y, yt = _apply(M, Xo)
            built = max(_max(comm, _rel(y, (S @ X)[owned])),
                        _max(comm, _rel(yt, (S.H @ X)[owned])))
            # the constants are annihilated (P M P), on every rank's rows
            with warnings.catch_warnings():  # the constants are no consistent residual
                warnings.simplefilter("ignore", RuntimeWarning)
                ones = _max(comm, np.abs(M.matvec(np.ones(owned.size))).max())
            ones /= _max(comm, np.abs(y).max())
            M.update(rows2)
            y, _ = _apply(M, Xo)
            out[f"{kind}/{variant}"] = {
                "construction": M.coarse_construction,
                "dropped": [M.coarse_stats["kernel_dropped"], S.coarse_stats["kernel_dropped"]],
                "coarse_dim": [M.coarse_dim, S.coarse_dim],
                "serial": built, "updated": _max(comm, _rel(y, (S2 @ X)[owned])),
                "constants": ones,
            }
    # CG on a consistent right-hand side: the serial iterations, the solution off the kernel
    S = TwoLevelSchwarz(A, d, "gdsw", kernel=np.ones(n))
    b = S.remove_kernel(np.random.default_rng(5).standard_normal(n) + 0.3)
    serial_its: list = []
    spla.cg(A, b, rtol=1e-8, M=S, callback=lambda xk: serial_its.append(1))
    M = DistributedTwoLevelSchwarz(L, rows, "gdsw", kernel=np.ones(n))
    its: list = []
    x, info = cg(DistributedMatrix(L, rows), b[owned], rtol=1e-8, M=M,
                 callback=lambda xk: its.append(1))
    r = b[owned] - DistributedMatrix(L, rows).matvec(x)
    out["cg"] = {"info": info, "its": [len(its), len(serial_its)],
                 "residual": float(np.sqrt(L.allreduce(np.array([r @ r]))[0])
                                   / np.linalg.norm(b)),
                 "mean": float(L.allreduce(np.array([x.sum()]))[0]) / n,
                 "scale": _max(comm, np.abs(x).max())}
    # remove_kernel as the serial one; an inconsistent residual warns once (rank 0 says it)
    c = np.random.default_rng(6).standard_normal(n) + 0.5
    out["remove_kernel"] = _max(comm, _rel(M.remove_kernel(c[owned]), S.remove_kernel(c)[owned]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        M.matvec(c[owned])
        M.matvec(c[owned])
        M.update(rows)  # a new matrix: its residuals warn again
        M.matvec(c[owned])
    said = [str(w.message) for w in caught if "inconsistent" in str(w.message)]
    out["warned"] = comm.allgather(len(said))
    # a vector A does not annihilate: refused on every rank
    bad = np.ones(n)
    bad[-1] = 1.5
    try:
        DistributedTwoLevelSchwarz(L, rows, "gdsw", kernel=bad)
        message = None
    except ValueError as exc:
        message = str(exc)
    out["refused"] = comm.allgather(message)
    return out


if __name__ == "__main__":
    worker_main(run)
