"""TwoLevelSchwarz(local_solver=...): the sparse local solvers of ddops.linalg.local_solvers
("superlu" / alias "sparse", "pardiso", the inexact "amg") and the memory report ``stats``.

The exact solvers are compared with the dense padded inverses (an independent
construction: batched Cholesky in numpy); the amg preconditioner is assembled densely.
"""

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from threadpoolctl import threadpool_limits

import ddops
from ddops.precond.schwarz import TwoLevelSchwarz
from tests._optional import need

STATS_KEYS = {"local_solver", "sparse_solver", "coarse_dim", "setup_seconds",
              "phases", "symbolic_seconds", "numeric_seconds", "symbolic_bytes",
              "reuse_coarse_bytes",
              "coarse_basis_seconds",
              "local_setup_seconds", "coarse_setup_seconds", "local_beside_seconds",
              "local_factor_bytes", "coarse_factor_bytes", "coarse_basis_bytes",
              "restriction_bytes", "total_bytes", "factor_nnz"}
PARTS = ("local_factor_bytes", "coarse_factor_bytes", "coarse_basis_bytes",
         "restriction_bytes", "symbolic_bytes", "reuse_coarse_bytes")


def csr_bytes(M):
    return M.data.nbytes + M.indices.nbytes + M.indptr.nbytes


@pytest.fixture(scope="module")
def small():
    """2D Poisson 16 x 16 on 6 METIS subdomains (overlap 1)."""
    A = ddops.poisson_2d(16)
    return A, ddops.Decomposition.from_matrix(A, 6)


@pytest.fixture(scope="module")
def medium():
    """2D Poisson 24 x 24 on 6 subdomains: 723 stacked rows, so the amg hierarchy of the
    local matrices has two levels (pyamg's max_coarse is 500) and the V-cycle is inexact."""
    A = ddops.poisson_2d(24)
    return A, ddops.Decomposition.from_matrix(A, 6)


def dense_assembly(M, n):
    return M @ np.eye(n)


# -- exact sparse solvers give the dense operator --------------------------------------------
@pytest.mark.parametrize("variant", ["additive", "restricted", "hybrid"])
@pytest.mark.parametrize("solver", ["superlu", "sparse", "pardiso"])
def test_exact_sparse_solvers_equal_dense(small, solver, variant):
    """M and its adjoint with SuperLU / PARDISO local solves equal those with the dense
    padded inverses, to 1e-10 relative, on random vectors."""
    need(solver)
    A, d = small
    ref = TwoLevelSchwarz(A, d, coarse_basis="gdsw", variant=variant, local_solver="dense")
    M = TwoLevelSchwarz(A, d, coarse_basis="gdsw", variant=variant, local_solver=solver)
    assert M.local_solver == "sparse" and ref.local_solver == "dense"
    assert M.sparse_solver == ("superlu" if solver == "sparse" else solver)
    X = np.random.default_rng(0).standard_normal((A.shape[0], 4))
    for apply in (lambda op: op @ X, lambda op: op.H @ X):
        Y, Y_ref = apply(M), apply(ref)
        assert np.linalg.norm(Y - Y_ref) <= 1e-10 * np.linalg.norm(Y_ref)
    y = M @ X[:, 0]
    assert y.shape == (A.shape[0],)
    assert np.linalg.norm(y - ref @ X[:, 0]) <= 1e-10 * np.linalg.norm(y)


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("ordering", ["nd", "md"])
def test_pardiso_node_orderings_give_the_dense_preconditioner(monkeypatch, shared, ordering):
    """On 3D elasticity (block size 3) with nested dissection, or minimum degree, made to
    win every "auto" probe, PARDISO's local factors are ordered on the node graph, and the
    interior (extension) factors by their restriction (``shared``) or on their own node
    graph, and M is the one with the dense padded inverses and the SuperLU extension, to
    1e-10 relative."""
    need("pardiso")
    from ddops.linalg import local_solvers
    from ddops.precond.corrections import OverlappingCorrection
    from ddops.problems.fem import fem_elasticity_3d

    A, X = fem_elasticity_3d(4, length=2.0)
    A = A.tocsr()
    Z = ddops.rigid_body_modes(X)
    d = ddops.Decomposition.from_matrix(A, 4, block_size=3)
    ref = TwoLevelSchwarz(A, d, options=ddops.SchwarzOptions(
        coarse="gdsw", null_space=Z, local_solver="dense",
        gdsw=ddops.GDSWOptions(extension_solver="superlu")))
    rows = []  # the row counts of the matrices ordered on their node graph
    name = {"nd": "node_nested_dissection", "md": "node_minimum_degree"}[ordering]
    original = getattr(local_solvers, name)

    def recorded(K, block_size):
        order = original(K, block_size)
        triples = order.reshape(-1, 3)
        assert np.all(triples % 3 == np.arange(3)) and np.all(np.diff(triples, axis=1) == 1)
        rows.append(K.shape[0])
        return order

    monkeypatch.setattr(local_solvers, "PARDISO_ND_FLOPS_PER_ENTRY",
                        -np.inf if ordering == "nd" else np.inf)
    monkeypatch.setattr(local_solvers, name, recorded)
    if not shared:
        monkeypatch.setattr(OverlappingCorrection, "elimination_positions", lambda self: None)
    M = TwoLevelSchwarz(A, d, options=ddops.SchwarzOptions(
        coarse="gdsw", null_space=Z, local_solver="pardiso",
        gdsw=ddops.GDSWOptions(extension_solver="pardiso")))
    assert M.local.solver.ordering == ordering
    # the interface: the nodes coupled to another part; the interior is the rest
    C = A.tocoo()
    cut = d.owner[C.row] != d.owner[C.col]
    interface = np.unique(np.concatenate([C.row[cut] // 3 * 3 + k for k in range(3)]))
    assert d.indices.size in rows  # the stacked subdomains
    # the interiors of the extension: by the subdomains' node order, or their own
    assert (A.shape[0] - interface.size in rows) == (not shared)
    assert (M.coarse.analysis.shared > 0) == shared
    Y = np.random.default_rng(4).standard_normal((A.shape[0], 3))
    assert np.linalg.norm(M @ Y - ref @ Y) <= 1e-10 * np.linalg.norm(ref @ Y)


@pytest.mark.parametrize("solver", ["superlu", "pardiso"])
def test_float32_sparse_local_factors(small, solver):
    """factor_dtype=float32 with a sparse solver: the operator is the dense one to float32
    accuracy (and not to float64 rounding: the factors are single precision)."""
    need(solver)
    A, d = small
    ref = TwoLevelSchwarz(A, d, coarse_basis="gdsw", local_solver="dense")
    M = TwoLevelSchwarz(A, d, coarse_basis="gdsw", local_solver=solver,
                        factor_dtype=np.float32)
    X = np.random.default_rng(1).standard_normal((A.shape[0], 3))
    err = np.linalg.norm(M @ X - ref @ X) / np.linalg.norm(ref @ X)
    assert 1e-12 < err < 1e-4
    if solver == "superlu":
        assert all(lu.U.dtype == np.float32 for lu in M._local_lu)


# -- amg: SPD, usable by CG ------------------------------------------------------------------
@pytest.mark.parametrize("variant", ["additive", "hybrid"])
def test_amg_local_solver_gives_an_spd_preconditioner(medium, variant):
    """With one V-cycle per local solve, M is symmetric positive definite (dense assembly)
    and differs from the exact-solver M (the local solves are inexact)."""
    need("amg")
    A, d = medium
    n = A.shape[0]
    M = TwoLevelSchwarz(A, d, coarse_basis="gdsw", variant=variant, local_solver="amg")
    assert M.local_solver == "sparse" and M.sparse_solver == "amg"
    assert len(M._local_solver.hierarchy.levels) >= 2  # a real V-cycle
    Md = dense_assembly(M, n)
    with threadpool_limits(1, user_api="blas"):
        exact = dense_assembly(TwoLevelSchwarz(A, d, coarse_basis="gdsw", variant=variant,
                                               local_solver="dense"), n)
        lam = np.linalg.eigvalsh(0.5 * (Md + Md.T))
    assert np.abs(Md - Md.T).max() <= 1e-10 * np.abs(Md).max()
    assert lam.min() > 0
    assert np.abs(Md - exact).max() > 1e-8 * np.abs(exact).max()


@pytest.mark.parametrize("variant", ["additive", "hybrid"])
def test_cg_converges_with_amg_local_solves(medium, variant):
    """Preconditioned CG reaches 1e-8 with M(local_solver="amg"): true residual checked."""
    need("amg")
    A, d = medium
    M = TwoLevelSchwarz(A, d, coarse_basis="gdsw", variant=variant, local_solver="amg")
    b = np.random.default_rng(2).standard_normal(A.shape[0])
    x, info = spla.cg(A, b, rtol=1e-8, maxiter=200, M=M)
    assert info == 0
    assert np.linalg.norm(b - A @ x) <= 1e-7 * np.linalg.norm(b)


def test_amg_uses_the_null_space(medium):
    """null_space (restricted to the subdomains) feeds the aggregation: constants give the
    default operator, a different near-null space another SPD one."""
    need("amg")
    A, d = medium
    n = A.shape[0]
    X = np.random.default_rng(3).standard_normal((n, 2))
    results = []
    for Z in (None, np.ones(n), np.column_stack([np.ones(n), np.arange(n) % 24])):
        M = TwoLevelSchwarz(A, d, coarse_basis="gdsw", local_solver="amg", null_space=Z)
        results.append(M @ X)
    scale = np.abs(results[0]).max()
    assert np.abs(results[1] - results[0]).max() <= 1e-12 * scale
    assert np.abs(results[2] - results[0]).max() > 1e-10 * scale


# -- names and refusals -------------------------------------------------------------------------
def test_auto_is_dense_only_for_subdomains_up_to_the_size_limit(small, monkeypatch):
    """``"auto"`` takes the dense inverses for subdomains of at most DENSE_LOCAL_MAX_SIZE
    unknowns (their set-up costs N p^3 flops), the default sparse solver above."""
    from ddops.linalg.local_solvers import default_exact_solver
    from ddops.precond import corrections

    A, d = small
    p = d.max_size
    for limit, dense in ((p, True), (p - 1, False)):
        monkeypatch.setattr(corrections, "DENSE_LOCAL_MAX_SIZE", limit)
        for kwargs in ({}, {"local_solver": "auto"}):
            M = TwoLevelSchwarz(A, d, coarse_basis="gdsw", **kwargs)
            if dense:
                assert M.local_solver == "dense" and M.sparse_solver is None
                assert M.stats["sparse_solver"] is None and M.stats["local_solver"] == "dense"
            else:
                assert (M.local_solver, M.sparse_solver) == ("sparse", default_exact_solver())
    monkeypatch.undo()
    tiny = ddops.Decomposition.from_matrix(A, 16)
    assert tiny.max_size <= corrections.DENSE_LOCAL_MAX_SIZE < p
    assert TwoLevelSchwarz(A, tiny, coarse_basis="gdsw").local_solver == "dense"
    assert TwoLevelSchwarz(A, d, coarse_basis="gdsw").local_solver == "sparse"


def test_sparse_is_an_alias_of_superlu(small):
    A, d = small
    M = TwoLevelSchwarz(A, d, coarse_basis="gdsw", local_solver="sparse")
    assert (M.local_solver, M.sparse_solver) == ("sparse", "superlu")
    assert M._local_lu is not None and len(M._local_lu) >= 1


def test_unknown_local_solver_is_refused(small):
    A, d = small
    with pytest.raises(ValueError, match="local_solver"):
        TwoLevelSchwarz(A, d, coarse_basis="gdsw", local_solver="mumps")


def test_amg_with_float32_factors_is_refused(small):
    need("amg")
    A, d = small
    with pytest.raises(ValueError, match="amg"):
        TwoLevelSchwarz(A, d, coarse_basis="gdsw", local_solver="amg",
                        factor_dtype=np.float32)


@pytest.mark.parametrize("solver", ["superlu", "pardiso", "amg"])
def test_indefinite_subdomain_named_by_sparse_solvers(small, solver):
    """A negative diagonal entry makes the subdomain that holds it singular-or-indefinite:
    the error names a subdomain that contains the entry."""
    need(solver)
    A, d = small
    bad = A.tolil()
    bad[100, 100] = -4.0
    with pytest.raises(ValueError, match="not positive definite") as info:
        TwoLevelSchwarz(bad.tocsr(), d, coarse_basis=None, local_solver=solver)
    holders = [i for i in range(d.num_subdomains) if 100 in d.subdomains[i]]
    assert any(f"subdomain {i}," in str(info.value) for i in holders)


# -- stats and memory accounting ----------------------------------------------------------------
@pytest.mark.parametrize("variant", ["additive", "hybrid"])
@pytest.mark.parametrize("solver", ["dense", "superlu", "pardiso", "amg"])
def test_stats_parts_add_up(small, solver, variant):
    """Every key is present, total_bytes is the sum of the four parts, and the coarse parts
    are the dense Cholesky factor (n0^2 float64) and Phi (plus A Phi for hybrid, held on
    the interface rows only: GDSW's columns are discrete harmonic) in CSR."""
    need(solver)
    A, d = small
    M = TwoLevelSchwarz(A, d, coarse_basis="gdsw", variant=variant, local_solver=solver)
    s = M.stats
    assert set(s) == STATS_KEYS
    assert s["total_bytes"] == sum(s[k] for k in PARTS)
    assert all(s[k] > 0 for k in PARTS)
    assert s["coarse_dim"] == M.coarse_dim > 0
    assert s["coarse_factor_bytes"] == M.coarse_dim**2 * 8  # dense coarse Cholesky
    Phi = M.coarse_matrix
    expected = csr_bytes(Phi)
    if variant == "hybrid":
        AP = (A @ Phi).toarray()
        held = M._AP.toarray()
        assert np.abs(held - AP).max() <= 1e-12 * np.abs(AP).max()  # A Phi to rounding
        interface = M.coarse_info.components.interface
        assert not np.any(np.delete(held, interface, axis=0))  # nothing off the interface
        expected += csr_bytes(M._AP)
    assert s["coarse_basis_bytes"] == expected
    assert s["local_solver"] == M.local_solver and s["sparse_solver"] == M.sparse_solver
    assert s["factor_nnz"] == M.factor_nnz
    for key in ("setup_seconds", "coarse_basis_seconds", "local_setup_seconds",
                "coarse_setup_seconds"):
        assert s[key] >= 0
    assert s["setup_seconds"] >= s["local_setup_seconds"] + s["coarse_setup_seconds"]


@pytest.mark.parametrize("solver", ["superlu", "pardiso", "amg"])
def test_restriction_bytes_additive_sparse(small, solver):
    """Additive variant, sparse local solver: one unpadded Boolean stacked restriction."""
    need(solver)
    A, d = small
    M = TwoLevelSchwarz(A, d, coarse_basis="gdsw", local_solver=solver)
    S = d.stacked_restriction("none", padded=False)
    assert M.stats["restriction_bytes"] == csr_bytes(S)


def test_superlu_local_factor_bytes(small):
    """SuperLU: 12 bytes (float64 value + int32 index) per stored factor nonzero, also in
    factor_bytes (the coarse solver is dense: no coarse SuperLU factor)."""
    A, d = small
    M = TwoLevelSchwarz(A, d, coarse_basis="gdsw", local_solver="superlu")
    nnz = sum(lu.nnz for lu in M._local_lu)
    assert M.stats["local_factor_bytes"] == nnz * 12
    assert M.factor_bytes == nnz * 12
    assert M.factor_nnz == nnz
    M32 = TwoLevelSchwarz(A, d, coarse_basis="gdsw", local_solver="superlu",
                          factor_dtype=np.float32)
    assert M32.stats["local_factor_bytes"] == sum(lu.nnz for lu in M32._local_lu) * 8


def test_dense_local_factor_bytes(small):
    """Dense: the padded float64 inverses, N p^2 values; nothing outside the Python heap."""
    A, d = small
    M = TwoLevelSchwarz(A, d, coarse_basis="gdsw", local_solver="dense")
    assert M.stats["local_factor_bytes"] == d.num_subdomains * d.max_size**2 * 8
    assert M.factor_bytes == 0 and M.factor_nnz == 0


def test_factor_bytes_by_solver(small):
    """factor_bytes counts what lives outside the Python heap: PARDISO's reported memory,
    nothing for the amg hierarchy (numpy / scipy arrays, reported by stats only)."""
    A, d = small
    need("amg")
    M = TwoLevelSchwarz(A, d, coarse_basis="gdsw", local_solver="amg")
    assert M.factor_bytes == 0
    assert M.stats["local_factor_bytes"] == M._local_solver.nbytes > 0
    pytest.importorskip("pypardiso")
    M = TwoLevelSchwarz(A, d, coarse_basis="gdsw", local_solver="pardiso")
    assert M.factor_bytes == M.stats["local_factor_bytes"] == M._local_solver.nbytes > 0


def test_dense_local_bytes_are_really_allocated(small):
    """The traced peak of building M (dense local solver) is at least its
    local_factor_bytes: the reported inverses are numpy memory that tracemalloc sees."""
    A, d = small
    if tracemalloc.is_tracing():
        pytest.skip("tracemalloc already running")
    tracemalloc.start()
    try:
        M = TwoLevelSchwarz(A, d, coarse_basis="gdsw", local_solver="dense")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert M.stats["local_factor_bytes"] > 0
    assert peak >= M.stats["local_factor_bytes"]


def test_stats_restriction_counts_restricted_variant_twice(small):
    """restricted (RAS): S_in and the weighted S_out are two matrices, both counted."""
    A, d = small
    M = TwoLevelSchwarz(A, d, coarse_basis="gdsw", variant="restricted",
                        local_solver="superlu")
    S_in = d.stacked_restriction("none", padded=False)
    S_out = d.stacked_restriction("full", padded=False)
    assert sp.issparse(S_out)
    assert M.stats["restriction_bytes"] == csr_bytes(S_in) + csr_bytes(S_out)
