"""Problems, PETSc set-up and the serial references shared by the PETSc tests and their MPI worker.

Imported as ``tests.petsc._cases`` by the in-process tests and as ``_cases``
by ``worker.py`` under ``mpiexec``: no relative imports here.

The reference of every comparison is the serial library: the decomposition
grown by :meth:`ddops.Decomposition.from_matrix` from the owner labels the PC
chose (or METIS itself on one rank), :class:`ddops.TwoLevelSchwarz` and
scipy's CG with the same relative tolerance.  PETSc's CG runs with
``-ksp_norm_type unpreconditioned`` so that both stop on ``||b - A x|| <=
rtol ||b||`` (zero initial guess).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse.linalg as spla

import ddops

#: Relative tolerance of both CG runs.
RTOL = 1e-8

#: The MPI cases: problem/coarse/overlap/variant/partitioner/null space option.
CASES = [
    "poisson2d/gdsw/1/additive/metis/auto",
    "poisson2d/rgdsw/1/additive/metis/auto",
    "poisson2d/nicolaides/1/additive/metis/auto",
    "poisson2d/agdsw/1/additive/metis/auto",
    "poisson2d/none/1/additive/metis/auto",
    "poisson2d/gdsw/2/additive/metis/auto",
    "poisson2d/gdsw/3/additive/contiguous/auto",
    "poisson2d/gdsw/1/hybrid/metis/auto",
    "poisson3d/gdsw/1/additive/metis/auto",
    "poisson3d/rgdsw/2/additive/metis/auto",
    "elasticity2d/gdsw/1/additive/metis/auto",
    "elasticity2d/rgdsw/2/additive/metis/auto",
    "elasticity2d/gdsw/1/additive/metis/constant",
    # GenEO from the assembled matrix alone, built from each rank's rows: oversampled on
    # elasticity (not diagonally dominant), the cut local matrices on Poisson
    "elasticity2d/geneo/1/additive/metis/auto",
    "poisson2d/geneo/1/additive/metis/auto",
]

#: Cases whose coarse space each rank builds from its own subdomains' eigenproblems
#: (GenEO): the eigensolver runs on other chunks of subdomains than the serial one, so on
#: several ranks the operator equals the serial one to the subspace iteration's accuracy,
#: not to rounding.
RANK_LOCAL_EIGEN = ("poisson2d/geneo/", "elasticity2d/geneo/")

#: The test problems and their number of subdomains (small: 4 ranks share 2 cores).
PROBLEMS = {
    "poisson2d": 8,
    "poisson3d": 8,
    "elasticity2d": 8,
}


def problem(name: str):
    """``(A, null_space or None, block_size)`` of a test problem."""
    if name == "poisson2d":
        return ddops.poisson_2d(40).tocsr(), None, 1
    if name == "poisson3d":
        return ddops.poisson_3d(12).tocsr(), None, 1
    if name == "elasticity2d":
        from ddops.problems.fem import fem_elasticity_2d

        A, coordinates = fem_elasticity_2d(24)
        return A.tocsr(), ddops.rigid_body_modes(coordinates), 2
    raise ValueError(f"unknown problem {name!r}")


def petsc_matrix(A, comm=None, block_size: int = 1, null_space=None):
    """``A`` as a PETSc AIJ matrix (seqaij on one rank, mpiaij on several), own rows only.

    Each rank inserts only its rows ``[rstart, rend)`` (PETSc's default split,
    in whole blocks); ``null_space`` (global ``n x k``) becomes the
    near-null space through ``MatSetNearNullSpace``.
    """
    from petsc4py import PETSc

    comm = PETSc.COMM_WORLD if comm is None else comm
    n = A.shape[0]
    P = PETSc.Mat().createAIJ([n, n], bsize=block_size, comm=comm)
    P.setUp()
    rstart, rend = P.getOwnershipRange()
    rows = A[rstart:rend]
    P.setPreallocationCSR((rows.indptr.astype(PETSc.IntType), rows.indices.astype(PETSc.IntType),
                           rows.data))
    P.assemble()
    if null_space is not None:
        vectors = []
        for k in range(null_space.shape[1]):
            v = P.createVecLeft()
            v.setArray(null_space[rstart:rend, k])
            vectors.append(v)
        P.setNearNullSpace(PETSc.NullSpace().create(constant=False, vectors=vectors, comm=comm))
    return P


def _solve(ksp, P, b_global) -> None:
    """Solve with this rank's rows of ``b_global`` (the PETSc vectors are destroyed after)."""
    b = P.createVecLeft()
    rstart, rend = P.getOwnershipRange()
    b.setArray(b_global[rstart:rend])
    x = b.duplicate()
    ksp.solve(b, x)
    b.destroy()
    x.destroy()


def worker_main(cases, run_case) -> None:
    """The ``main`` of the MPI workers: ``--out`` JSON and ``--cases`` (default all);
    ``run_case(case, k, comm, out)`` gives one record, rank 0 writes them."""
    import argparse
    import json

    from mpi4py import MPI

    from ddops.distributed import guard

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--cases", default="all")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    chosen = cases if args.cases == "all" else args.cases.split(",")
    results = {"size": comm.Get_size(), "cases": {}}
    with guard(comm):
        for k, case in enumerate(chosen):
            results["cases"][case] = run_case(case, k, comm, args.out)
    if comm.Get_rank() == 0:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


def petsc_cg(P, b_global, prefix: str, options: dict, context=None):
    """PETSc CG with the ddops PC; returns ``(iterations, reason, ksp)``; destroy ``ksp`` after use.

    ``options`` (without the leading dash and the prefix) go into the
    database under ``prefix``; with ``context`` the PC gets it through
    ``setPythonContext``, otherwise ``-pc_type python -pc_python_type
    ddops.petsc.SchwarzPC`` from the database.
    """
    from petsc4py import PETSc

    db = PETSc.Options()
    settings = {"ksp_type": "cg", "ksp_norm_type": "unpreconditioned", "ksp_rtol": RTOL,
                "ksp_atol": 0.0, "ksp_max_it": 1000}
    if context is None:
        settings.update(pc_type="python", pc_python_type="ddops.petsc.SchwarzPC")
    settings.update(options)
    for key, value in settings.items():
        db.setValue(f"{prefix}{key}", value)
    ksp = PETSc.KSP().create(comm=P.getComm())
    ksp.setOptionsPrefix(prefix)
    ksp.setOperators(P)
    if context is not None:
        pc = ksp.getPC()
        pc.setType(PETSc.PC.Type.PYTHON)
        pc.setPythonContext(context)
    try:
        ksp.setFromOptions()
        _solve(ksp, P, b_global)
    except BaseException:
        # freed now: the caller gets no KSP to destroy after a failure
        ksp.destroy()
        raise
    finally:
        for key in settings:
            db.delValue(f"{prefix}{key}")
    return ksp.getIterationNumber(), int(ksp.getConvergedReason()), ksp


def serial_reference(A, decomposition, coarse: str, variant: str = "additive", null_space=None,
                     b=None):
    """``(iterations, info, M)`` of scipy CG with the serial ``TwoLevelSchwarz``."""
    coarse_basis = None if coarse == "none" else coarse
    M = ddops.TwoLevelSchwarz(A, decomposition, coarse_basis=coarse_basis, variant=variant,
                              coarse=coarse_basis is not None, null_space=null_space)
    count = [0]

    def callback(_):
        count[0] += 1

    _, info = spla.cg(A, b, rtol=RTOL, atol=0.0, maxiter=1000, M=M, callback=callback)
    return count[0], int(info), M


def basis_gap(P: np.ndarray, Q: np.ndarray) -> float:
    """How far two bases are from spanning the same space: the largest relative distance of
    a column of either from the span of the other (0 when they are equal up to column
    order, sign and scale).  Both bases must have full column rank (a coarse basis has):
    the reduced QR of a rank-deficient one adds directions of its own."""
    def gap(P, Q):
        if Q.shape[1] == 0:
            return 0.0
        U, _ = np.linalg.qr(P)
        Q = Q / np.linalg.norm(Q, axis=0)
        return float(np.linalg.norm(Q - U @ (U.T @ Q), axis=0).max())

    return max(gap(P, Q), gap(Q, P))


def rhs(n: int) -> np.ndarray:
    """The right-hand side of every run (the same on every rank)."""
    return np.random.default_rng(7).standard_normal(n)


#: The native-route cases: problem/coarse/overlap/coarse solver (``default``: PETSc's own
#: choice, LU on one rank and redundant LU on several; see ``COARSE_SOLVERS``).
NATIVE_CASES = [
    "poisson2d/gdsw/1/default",
    "poisson2d/nicolaides/1/default",
    "poisson2d/agdsw/1/default",
    "poisson2d/geneo/1/default",
    "elasticity2d/geneo/1/default",
    "poisson2d/none/1/default",
    "poisson2d/gdsw/2/default",
    "poisson3d/gdsw/1/default",
    "poisson3d/rgdsw/2/default",
    "elasticity2d/gdsw/1/default",
    "elasticity2d/rgdsw/2/default",
    "poisson2d/gdsw/1/deflation",
    "poisson3d/gdsw/1/deflation",
    "elasticity2d/gdsw/1/deflation",
    "poisson2d/gdsw/1/deflation_one_rank",
    "poisson2d/gdsw/1/redundant",
    "poisson2d/gdsw/1/telescope",
    "poisson2d/gdsw/1/telescope_half",
    "poisson2d/gdsw/1/mumps",
    "poisson2d/gdsw/1/gamg_cg",
    "poisson2d/gdsw/1/gamg",
]

#: Coarse solvers that are exact (to rounding): same iterations as the serial library.
EXACT_COARSE = ("default", "deflation", "deflation_one_rank", "redundant", "telescope",
                "telescope_half", "mumps", "gamg_cg")


def coarse_solver_options(name: str, size: int) -> dict:
    """PETSc options (no prefix) of a coarse solver of ``NATIVE_CASES`` on ``size`` ranks.

    ``telescope``: the coarse problem on one rank (reduction factor ``size``),
    LU there; ``telescope_half``: on ``max(size // 2, 1)`` ranks, redundant LU
    there; ``mumps``: a parallel LU of MUMPS (PETSc's LU on one rank);
    ``deflation``: PCDEFLATION (``-ddops_variant hybrid``) with its own
    coarse solver, ``deflation_one_rank``: with its coarse problem on one rank;
    ``gamg_cg``: CG preconditioned by GAMG to ``1e-12`` (an iterative but
    tight solve); ``gamg``: one GAMG V-cycle (inexact: the iterations may
    differ).
    """
    if name in ("default", "deflation"):  # deflation: -ddops_variant hybrid, PCDEFLATION
        return {}
    if name == "deflation_one_rank":  # PCDEFLATION's coarse problem telescoped to one rank
        return {"pc_deflation_reduction_factor": size}
    if name == "redundant":
        return {"mg_coarse_pc_type": "redundant", "mg_coarse_redundant_pc_type": "lu"}
    if name == "telescope":
        return {"mg_coarse_pc_type": "telescope", "mg_coarse_pc_telescope_reduction_factor": size,
                "mg_coarse_telescope_ksp_type": "preonly", "mg_coarse_telescope_pc_type": "lu"}
    if name == "telescope_half":
        return {"mg_coarse_pc_type": "telescope",
                "mg_coarse_pc_telescope_reduction_factor": min(size, 2),
                "mg_coarse_telescope_ksp_type": "preonly",
                "mg_coarse_telescope_pc_type": "redundant"}
    if name == "mumps":
        return {"mg_coarse_pc_type": "lu", "mg_coarse_pc_factor_mat_solver_type":
                "mumps" if size > 1 else "petsc"}
    if name == "gamg_cg":
        return {"mg_coarse_ksp_type": "cg", "mg_coarse_ksp_rtol": 1e-12,
                "mg_coarse_ksp_atol": 0.0, "mg_coarse_ksp_max_it": 500,
                "mg_coarse_pc_type": "gamg"}
    if name == "gamg":
        return {"mg_coarse_pc_type": "gamg"}
    raise ValueError(f"unknown coarse solver {name!r}")


def native_cg(P, b_global, prefix: str, ddops_options: dict, petsc_options: dict):
    """PETSc CG with the native route (:func:`ddops.petsc.native.setup_native`).

    Returns ``(iterations, reason, ksp, native)``; destroy ``ksp`` and
    ``native`` after use.  The options (no dash, no prefix) go into the
    database under ``prefix`` and are removed afterwards, with the defaults
    ``setup_native`` wrote there.
    """
    from petsc4py import PETSc

    from ddops.petsc.native import (
        DEFLATION_COARSE_SOLVER,
        DEFLATION_DEFAULTS,
        NATIVE_DEFAULTS,
        ONE_LEVEL_DEFAULTS,
        setup_native,
    )

    db = PETSc.Options()
    settings = {"ksp_type": "cg", "ksp_norm_type": "unpreconditioned", "ksp_rtol": RTOL,
                "ksp_atol": 0.0, "ksp_max_it": 1000}
    settings.update({f"ddops_{k}": v for k, v in ddops_options.items()})
    settings.update(petsc_options)
    for key, value in settings.items():
        db.setValue(f"{prefix}{key}", value)
    ksp = PETSc.KSP().create(comm=P.getComm())
    ksp.setOptionsPrefix(prefix)
    ksp.setOperators(P)
    try:
        native = setup_native(ksp)
        ksp.setFromOptions()
        _solve(ksp, P, b_global)
    except BaseException:
        ksp.destroy()
        raise
    finally:
        for key in [*settings, *NATIVE_DEFAULTS, *ONE_LEVEL_DEFAULTS, *DEFLATION_DEFAULTS,
                    *DEFLATION_COARSE_SOLVER]:
            db.delValue(f"{prefix}{key}")
    return ksp.getIterationNumber(), int(ksp.getConvergedReason()), ksp, native
