"""Block-diagonal SPD solvers of ddops.linalg.local_solvers.

References are independent: scipy's spsolve and dense numpy (solve, eigvalsh, cholesky)
on block-diagonal matrices assembled here from 2D Laplacians and random B B^T + I blocks.
"""


import ctypes
import gc
import weakref

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from hypothesis import given
from hypothesis import strategies as st
from threadpoolctl import threadpool_limits

import ddops
from ddops.linalg import local_solvers
from ddops.linalg.local_solvers import (
    SingularBlockError,
    chunk_bounds,
    default_exact_solver,
    factorize_blocks,
    pardiso_available,
)
from tests._optional import need
from tests.reference import scrambled_csr

EXACT = ("superlu", "pardiso")


# -- matrices built here ------------------------------------------------------------------------
def lap1(m):
    return sp.diags([-np.ones(m - 1), 2 * np.ones(m), -np.ones(m - 1)], [-1, 0, 1])


def lap2(mx, my=None):
    """Dirichlet 5-point Laplacian on an mx x my grid (SPD)."""
    my = mx if my is None else my
    return (sp.kron(sp.identity(my), lap1(mx)) + sp.kron(lap1(my), sp.identity(mx))).tocsr()


def neumann2(m):
    """Pure Neumann 5-point Laplacian on an m x m grid: singular (constants), diagonal > 0."""
    T = lap1(m).tolil()
    T[0, 0] = T[m - 1, m - 1] = 1.0
    T = T.tocsr()
    return (sp.kron(sp.identity(m), T) + sp.kron(T, sp.identity(m))).tocsr()


def rand_spd(m, seed, density=0.2):
    """B B^T + I with a random sparse B."""
    B = sp.random(m, m, density=density, random_state=np.random.default_rng(seed))
    return (B @ B.T + sp.identity(m)).tocsr()


def spd_blocks():
    """Five SPD blocks of different sizes and structure (25, 17, 12, 30, 30 rows)."""
    return [lap2(5), rand_spd(17, 1), lap2(3, 4), rand_spd(30, 2), lap2(6, 5)]


def assemble(blocks):
    K = sp.block_diag(blocks, format="csr")
    offsets = np.concatenate([[0], np.cumsum([b.shape[0] for b in blocks])]).astype(np.int64)
    return K, offsets


def rel(a, b):
    return np.linalg.norm(a - b) / np.linalg.norm(b)


# -- exact solvers against spsolve --------------------------------------------------------------
@pytest.mark.parametrize("solver", EXACT)
@pytest.mark.parametrize("ncols", [None, 1, 4])
@pytest.mark.parametrize("chunk_rows", [local_solvers.CHUNK_ROWS, 20])
def test_exact_solvers_match_spsolve_float64(solver, ncols, chunk_rows):
    """float64 factors solve K x = b to rounding, for 1-D and 2-D right-hand sides (SuperLU
    also with several chunks of blocks)."""
    need(solver)
    K, offsets = assemble(spd_blocks())
    rng = np.random.default_rng(3)
    X = rng.standard_normal(K.shape[0] if ncols is None else (K.shape[0], ncols))
    f = factorize_blocks(K, offsets, solver, chunk_rows=chunk_rows)
    Y = f.solve(X)
    ref = spla.spsolve(K.tocsc(), X)
    assert Y.shape == X.shape and Y.dtype == np.float64
    assert rel(Y, ref.reshape(X.shape)) < 1e-12
    assert f.exact and f.name == solver and f.shape == K.shape


@pytest.mark.parametrize("solver", (*EXACT, "amg"))
@pytest.mark.parametrize("rows_only", [False, True])
def test_solve_sparse_equals_the_full_solve_of_the_scattered_rhs(solver, rows_only,
                                                                  monkeypatch):
    """Right-hand sides given on ``sparse_rows`` only: the solution (all of it, or its rows
    ``sparse_rows``) is the full solve of the right-hand side scattered into zeros; for
    PARDISO this is its partial solve (``iparm[30]``), checked against spsolve."""
    need(solver)
    modes = []
    if solver == "pardiso":
        call = local_solvers._PardisoHandle.call

        def spy(self, phase, B=None, partial=0):
            out = call(self, phase, B, partial)
            if phase == 33:  # the mode asked for, and the one PARDISO was called with
                modes.append((partial, int(self.iparm[30])))
            return out

        monkeypatch.setattr(local_solvers._PardisoHandle, "call", spy)
    K, offsets = assemble(spd_blocks())
    rng = np.random.default_rng(5)
    rows = np.sort(rng.choice(K.shape[0], size=29, replace=False))
    f = factorize_blocks(K, offsets, solver, sparse_rows=rows[::-1])  # any order
    np.testing.assert_array_equal(f.sparse_rows, rows)
    B = rng.standard_normal((rows.size, 6))
    X = np.zeros((K.shape[0], 6))
    X[rows] = B
    ref = spla.spsolve(K.tocsc(), X) if f.exact else f.solve(X)
    modes.clear()
    Y = f.solve_sparse(B, rows_only=rows_only)
    if solver == "pardiso":  # pruned: selected rows (1) or sparse right-hand sides (2)
        assert modes == [(1, 1)] if rows_only else [(2, 2)]
    assert Y.shape == ((rows.size, 6) if rows_only else X.shape)
    assert rel(Y, ref[rows] if rows_only else ref) < 1e-12
    # solve() stays a full solve
    assert rel(f.solve(X), ref) < 1e-12
    with pytest.raises(ValueError, match=r"B must have shape \(29, k\)"):
        f.solve_sparse(np.zeros((K.shape[0], 2)))


def test_pardiso_sparse_rows_must_be_rows_of_k():
    need("pardiso")
    K, offsets = assemble(spd_blocks())
    with pytest.raises(ValueError, match="sparse_rows must be row indices"):
        factorize_blocks(K, offsets, "pardiso", sparse_rows=[0, K.shape[0]])


@pytest.mark.parametrize("solver", EXACT)
@pytest.mark.parametrize("ncols", [None, 3])
def test_exact_solvers_float32(solver, ncols):
    """float32 factors: float64 result accurate to ~1e-4 relative, and really single
    precision (not accurate to float64 rounding)."""
    need(solver)
    K, offsets = assemble(spd_blocks())
    rng = np.random.default_rng(4)
    X = rng.standard_normal(K.shape[0] if ncols is None else (K.shape[0], ncols))
    f = factorize_blocks(K, offsets, solver, dtype=np.float32)
    Y = f.solve(X)
    ref = np.linalg.solve(K.toarray(), X)
    assert Y.dtype == np.float64 and Y.shape == X.shape
    err = rel(Y, ref)
    assert err < 1e-4
    assert err > 1e-12  # the factors are float32, not float64
    assert f.dtype == np.float32
    if solver == "superlu":  # the stored factors themselves are single precision
        assert all(lu.U.dtype == np.float32 for lu in f.factors)


def test_superlu_transposed_solve_is_the_same_solve():
    """trans="T" solves with K^T = K (the adjoint path of the Schwarz operator)."""
    K, offsets = assemble(spd_blocks())
    X = np.random.default_rng(5).standard_normal((K.shape[0], 2))
    f = factorize_blocks(K, offsets, "superlu", chunk_rows=20)
    assert rel(f.solve(X, trans="T"), np.linalg.solve(K.toarray().T, X)) < 1e-12


@pytest.mark.parametrize("solver", ("superlu", "pardiso", "amg"))
def test_empty_blocks_and_odd_layouts(solver):
    """Empty blocks, non-contiguous and Fortran-ordered inputs and zero columns are solved;
    a bad block after an empty one is named by its label."""
    need(solver)
    blocks = [lap2(5), sp.csr_matrix((0, 0)), lap2(3, 4), lap2(4)]
    K = sp.block_diag([b for b in blocks if b.shape[0]], format="csr")
    offsets = np.concatenate([[0], np.cumsum([b.shape[0] for b in blocks])])
    X = np.random.default_rng(6).standard_normal((K.shape[0], 4))
    ref = np.linalg.solve(K.toarray(), X)
    f = factorize_blocks(K, offsets, solver, chunk_rows=10)
    # K is small: the amg hierarchy is one level with an exact coarse solve
    assert rel(f.solve(X[:, ::2]), ref[:, ::2]) < 1e-12
    assert rel(f.solve(np.asfortranarray(X)), ref) < 1e-12
    assert f.solve(X[:, :0]).shape == (K.shape[0], 0)
    bad = K.tolil()
    bad[30, 30] = -1.0  # a row of block 2 (offsets 0, 25, 25, 37, 53)
    with pytest.raises(SingularBlockError) as info:
        factorize_blocks(bad.tocsr(), offsets, solver)
    assert info.value.block == 2


def test_unknown_solver_name():
    K, offsets = assemble(spd_blocks())
    with pytest.raises(ValueError, match="solver"):
        factorize_blocks(K, offsets, "mumps")


def test_default_exact_solver_follows_availability():
    """pardiso when pypardiso is installed, else superlu."""
    try:
        import pypardiso  # noqa: F401
        installed = True
    except ImportError:
        installed = False
    assert pardiso_available() == installed
    assert default_exact_solver() == ("pardiso" if installed else "superlu")


# -- the inexact amg solver ---------------------------------------------------------------------
def amg_operator(K, offsets, cycles):
    """The amg solver and its operator B assembled densely (B e_j for every j)."""
    f = factorize_blocks(K, offsets, "amg", cycles=cycles)
    return f, f.solve(np.eye(K.shape[0]))


@pytest.fixture(scope="module")
def amg_problem():
    """Three Laplacian blocks, 584 rows (enough for a two-level hierarchy: max_coarse is
    500), and the amg operators B_1, B_2 of one and two cycles, assembled densely."""
    pytest.importorskip("pyamg")
    K, offsets = assemble([lap2(14), lap2(12, 15), lap2(16, 13)])
    Kd = K.toarray()
    ops = {c: amg_operator(K, offsets, c) for c in (1, 2)}
    # the dense references on one BLAS thread: multithreaded OpenBLAS next to MKL's
    # spinning threads (PARDISO) takes seconds on a small eigenproblem on 2 cores
    with threadpool_limits(1, user_api="blas"):
        L = np.linalg.cholesky(Kd)
        # the eigenvalues of L^T B L: those of B K, and (Sylvester) as many positive as B
        mu = {c: np.linalg.eigvalsh(L.T @ (0.5 * (B + B.T)) @ L) for c, (_, B) in ops.items()}
    return K, offsets, Kd, L, ops, mu


@pytest.mark.parametrize("cycles", [1, 2])
def test_amg_operator_is_spd_and_a_contraction(amg_problem, cycles):
    """The applied operator B is symmetric, positive definite and ||I - B K||_K < 1.

    For symmetric B, I - B K is K-self-adjoint: its K-norm is max |1 - mu| over the
    eigenvalues mu of L^T B L (K = L L^T), and B is positive definite iff all mu > 0.
    """
    K, offsets, Kd, L, ops, mu = amg_problem
    f, B = ops[cycles]
    assert len(f.hierarchy.levels) >= 2  # a real V-cycle, not only the exact coarse solve
    assert not f.exact and f.name == "amg" and f.cycles == cycles
    assert np.abs(B - B.T).max() <= 1e-12 * np.abs(B).max()
    assert mu[cycles].min() > 0
    rho = np.abs(1 - mu[cycles]).max()
    assert rho < 1
    assert rho > 1e-8  # inexact: B is not K^{-1}
    # the K-norm from its definition on a few vectors: ||(I - B K) v||_K <= rho ||v||_K
    V = np.random.default_rng(8).standard_normal((K.shape[0], 5))
    EV = V - B @ (Kd @ V)
    k_norm = np.sqrt(np.einsum("ij,ij->j", EV, Kd @ EV))
    assert (k_norm <= rho * np.sqrt(np.einsum("ij,ij->j", V, Kd @ V)) * (1 + 1e-8)).all()


def test_amg_cycles_compose(amg_problem):
    """Two cycles on the same hierarchy propagate the error by (I - B_1 K)^2, so
    ||I - B_2 K||_K = ||I - B_1 K||_K^2 (the error propagation is K-self-adjoint)."""
    K, offsets, Kd, L, ops, mu = amg_problem
    B1, B2 = ops[1][1], ops[2][1]
    E1 = np.eye(K.shape[0]) - B1 @ Kd
    np.testing.assert_allclose(np.eye(K.shape[0]) - B2 @ Kd, E1 @ E1, rtol=0, atol=1e-10)
    rho1, rho2 = np.abs(1 - mu[1]).max(), np.abs(1 - mu[2]).max()
    assert rho2 == pytest.approx(rho1**2, rel=1e-6)


def test_amg_solve_2d_equals_column_solves(amg_problem):
    """A 2-D right-hand side is solved column by column with the same operator."""
    K, offsets, _, _, ops, _ = amg_problem
    f = ops[1][0]
    X = np.random.default_rng(7).standard_normal((K.shape[0], 3))
    Y = f.solve(X)
    for j in range(3):
        np.testing.assert_allclose(Y[:, j], f.solve(X[:, j]), rtol=0, atol=1e-14)


# -- singular and indefinite blocks -------------------------------------------------------------
def make_bad(kind, blocks, pos):
    """Replace block ``pos`` by an indefinite one (diagonal still positive) or a singular one."""
    blocks = list(blocks)
    b = blocks[pos]
    m = b.shape[0]
    if kind == "indefinite":
        lam = np.linalg.eigvalsh(b.toarray())
        bad = (b - lam[m // 3] * sp.identity(m)).tocsr()  # a third of the spectrum < 0
        assert (bad.diagonal() > 0).all()
    elif kind == "singular":
        side = int(round(np.sqrt(m)))
        if side * side == m:
            bad = neumann2(side)
        else:  # shift the smallest eigenvalue to zero
            bad = sp.csr_matrix(b.toarray() - np.linalg.eigvalsh(b.toarray())[0] * np.eye(m))
        assert (bad.diagonal() > 0).all()
    else:  # "negative diagonal"
        bad = b.tolil()
        bad[1, 1] = -1.0
        bad = bad.tocsr()
    blocks[pos] = bad
    return assemble(blocks)


EXACT_CASES = [("superlu", {"exact_check": True}), ("superlu", {"exact_check": False}),
               ("superlu", {"exact_check": False, "chunk_rows": 20}),
               ("superlu", {"exact_check": True, "chunk_rows": 20}), ("pardiso", {})]


@pytest.mark.parametrize("pos", [0, 2, 4])
@pytest.mark.parametrize("kind", ["indefinite", "singular", "negative diagonal"])
@pytest.mark.parametrize("solver,options", EXACT_CASES)
def test_exact_solvers_name_the_bad_block(solver, options, kind, pos):
    """SingularBlockError (a ValueError) names the singular / indefinite block: first,
    middle and last, with SuperLU's pivot check and its one-solve check."""
    need(solver)
    K, offsets = make_bad(kind, spd_blocks(), pos)
    with pytest.raises(SingularBlockError) as info:
        factorize_blocks(K, offsets, solver, **options)
    assert info.value.block == pos
    assert isinstance(info.value, ValueError)
    assert str(pos) in str(info.value)


@pytest.mark.parametrize("solver,options", [*EXACT_CASES, ("amg", {})])
def test_two_bad_blocks_one_of_them_is_named(solver, options):
    """With two bad blocks (1 and 3) the error names one of them, never a good block."""
    need(solver)
    K, offsets = make_bad("negative diagonal", spd_blocks(), 1)
    blocks = [K[offsets[i]:offsets[i + 1], offsets[i]:offsets[i + 1]] for i in range(5)]
    K, offsets = make_bad("negative diagonal", blocks, 3)
    with pytest.raises(SingularBlockError) as info:
        factorize_blocks(K, offsets, solver, **options)
    assert info.value.block in (1, 3)


@pytest.mark.parametrize("pos", [0, 2, 4])
def test_amg_names_a_block_with_a_negative_diagonal(pos):
    need("amg")
    K, offsets = make_bad("negative diagonal", spd_blocks(), pos)
    with pytest.raises(SingularBlockError) as info:
        factorize_blocks(K, offsets, "amg")
    assert info.value.block == pos


# -- memory accounting --------------------------------------------------------------------------
@pytest.mark.parametrize("chunk_rows", [local_solvers.CHUNK_ROWS, 20])
def test_superlu_nnz_is_that_of_scipys_factors_of_the_chunks(chunk_rows):
    """nnz is the sum over the chunks of the nonzeros of scipy's own SuperLU factorisation
    of each chunk (same options), the chunks cut here at block boundaries by a plain loop."""
    K, offsets = assemble(spd_blocks())
    f = factorize_blocks(K, offsets, "superlu", chunk_rows=chunk_rows)
    cuts, key = [0], 0
    for start, stop in zip(offsets[:-1], offsets[1:]):
        if stop > start and start // chunk_rows != key and start > 0:
            cuts.append(int(start))
        if stop > start:
            key = start // chunk_rows
    cuts.append(int(offsets[-1]))
    expected = 0
    for r0, r1 in zip(cuts[:-1], cuts[1:]):
        lu = spla.splu(K[r0:r1, r0:r1].tocsc(), permc_spec="MMD_AT_PLUS_A",
                       diag_pivot_thresh=0.0, panel_size=local_solvers.SUPERLU_PANEL_SIZE,
                       options={"SymmetricMode": True})
        expected += lu.nnz
    assert len(cuts) - 1 == (1 if chunk_rows == local_solvers.CHUNK_ROWS else len(f.factors))
    assert f.nnz == expected


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _malloc_in_use():
    """Bytes the C allocator has handed out and not got back (glibc's mallinfo2, all
    arenas, mmapped chunks included), after a garbage collection."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallinfo2 = libc.mallinfo2
    except (OSError, AttributeError):
        pytest.skip("needs glibc's mallinfo2")
    mallinfo2.restype = _MallInfo2
    gc.collect()
    info = mallinfo2()
    return int(info.uordblks + info.hblkhd)


def test_pardiso_nbytes_is_what_the_process_holds_and_free_gives_it_back():
    """PARDISO's nbytes (MKL's reported memory plus the matrix kept for it) is, within 25%,
    what the C allocator holds while the solver lives (a 43k-row factor of 30 MiB), and
    free() gives all of it back: the factors and the matrix."""
    need("pardiso")
    K, offsets = _laplacian_blocks((120, 120), 3)
    with local_solvers.thread_limit(2):  # MKL's per-thread buffers: the same on any machine
        factorize_blocks(K, offsets, "pardiso").free()  # MKL's one-time allocations
        before = _malloc_in_use()
        f = factorize_blocks(K, offsets, "pardiso")
        held = _malloc_in_use() - before
    assert f.nnz >= sp.tril(K).nnz
    assert 0.8 * f.nbytes <= held <= 1.25 * f.nbytes, (held, f.nbytes)
    f.free()
    assert _malloc_in_use() - before < 0.02 * held
    f.free()  # idempotent
    with pytest.raises(RuntimeError, match="freed"):
        f.solve(np.ones(K.shape[0]))


def test_pardiso_free_drops_the_matrix_and_calls_phase_minus_one_on_valid_arrays(monkeypatch):
    """free() releases the upper triangle kept for PARDISO (no view keeps its buffer alive)
    and the release call (phase -1) reads a matrix that is still the factorised one; no
    PARDISO call sees an empty or foreign value array."""
    need("pardiso")
    real = local_solvers._pardiso_64()
    calls = []

    def spy(*args):
        phase, nnz = args[4]._obj.value, calls_nnz[0]
        values = None if args[6] is None else np.ctypeslib.as_array(
            (ctypes.c_double * nnz).from_address(args[6])).copy()
        calls.append((phase, values))
        return real(*args)

    K, offsets = assemble(spd_blocks())
    upper = sp.triu(K, format="csr")
    upper.sort_indices()
    calls_nnz = [upper.nnz]
    monkeypatch.setattr(local_solvers, "_pardiso_64", lambda: spy)
    f = factorize_blocks(K, offsets, "pardiso", ordering="md")
    b = np.random.default_rng(0).standard_normal(K.shape[0])
    assert rel(f.solve(b), np.linalg.solve(K.toarray(), b)) < 1e-12
    data = weakref.ref(f._handle.data)
    f.free()
    gc.collect()
    assert data() is None
    assert [phase for phase, _ in calls] == [11, 22, 33, 33, -1]
    for phase, values in calls:
        assert values is not None and np.array_equal(values, upper.data), phase


@pytest.mark.parametrize("code,error", [(-2, MemoryError), (-9, MemoryError),
                                        (-3, RuntimeError), (-8, RuntimeError)])
def test_pardiso_errors_other_than_singular_are_reported_as_what_they_are(monkeypatch, code,
                                                                         error):
    """A PARDISO failure that is not a singular matrix (out of memory, reordering, integer
    overflow) is raised with its code and meaning, not searched for a bad block: here on a
    matrix with a singular block 2 that the block search would otherwise report."""
    need("pardiso")
    _fail_factorisation(monkeypatch, code)
    K, offsets = make_bad("singular", spd_blocks(), 2)
    with pytest.raises(error) as info:
        factorize_blocks(K, offsets, "pardiso", ordering="md")
    assert not isinstance(info.value, SingularBlockError)
    assert f"error {code} ({local_solvers.PARDISO_ERRORS[code]})" in str(info.value)


@pytest.mark.parametrize("code", [-4, -7])
def test_pardiso_singular_errors_search_for_the_bad_block(monkeypatch, code):
    need("pardiso")
    _fail_factorisation(monkeypatch, code)
    K, offsets = make_bad("singular", spd_blocks(), 2)
    with pytest.raises(SingularBlockError) as info:
        factorize_blocks(K, offsets, "pardiso", ordering="md")
    assert info.value.block == 2


def _fail_factorisation(monkeypatch, code):
    """Make PARDISO's numeric factorisation phase report ``code``."""
    real = local_solvers._pardiso_64()

    def fake(*args):
        real(*args)
        if args[4]._obj.value == 22:
            args[15]._obj.value = code

    monkeypatch.setattr(local_solvers, "_pardiso_64", lambda: fake)


def test_amg_hierarchy_nbytes_covers_its_arrays(amg_problem):
    """nbytes counts the hierarchy's matrices: at least the bytes of the values of A, P and
    R on every level, as numpy holds them (R may be a view of P: counted once)."""
    K, offsets, _, _, ops, _ = amg_problem
    f = ops[1][0]
    seen, values = set(), 0
    for lv in f.hierarchy.levels:
        for name in ("A", "P", "R"):
            M = getattr(lv, name, None)
            if M is None:
                continue
            base = M.data if M.data.base is None else M.data.base
            if id(base) not in seen:
                seen.add(id(base))
                values += base.nbytes
    assert len(f.hierarchy.levels) >= 2
    assert values <= f.nbytes <= 3 * values
    assert f.nnz > K.nnz


# -- chunk_bounds -------------------------------------------------------------------------------
@given(sizes=st.lists(st.integers(0, 12), min_size=1, max_size=30),
       chunk_rows=st.integers(1, 60))
def test_chunk_bounds_properties(sizes, chunk_rows):
    """Bounds from 0 to m at block boundaries, strictly increasing, grouping block i by
    offsets[i] // chunk_rows, every chunk below chunk_rows plus one block's rows."""
    sizes = np.array(sizes)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    m = int(offsets[-1])
    bounds = chunk_bounds(offsets, chunk_rows)
    assert bounds.dtype == np.int64
    assert bounds[0] == 0 and bounds[-1] == m
    if m == 0:
        assert list(bounds) == [0, 0]
        return
    assert np.all(np.diff(bounds) > 0)
    assert np.isin(bounds, offsets).all()
    assert np.diff(bounds).max() < chunk_rows + sizes.max()
    # an independent grouping: nonempty blocks with the same key share a chunk
    keys = {}
    for start, size in zip(offsets[:-1], sizes):
        if size:
            keys.setdefault(int(start) // chunk_rows, int(start))
    assert list(bounds[:-1]) == sorted(keys.values())


def _plain_chunks(sizes, chunk_rows):
    """Chunk bounds by a plain walk over the blocks: a nonempty block opens a new chunk when
    its first row's ``row // chunk_rows`` differs from the open chunk's; empty blocks join
    whatever is open."""
    bounds, key, row = [0], None, 0
    for size in sizes:
        if size:
            if key is not None and row // chunk_rows != key:
                bounds.append(row)
            if key is None or row // chunk_rows != key:
                key = row // chunk_rows
        row += size
    return bounds + [row]


@given(inner=st.lists(st.integers(0, 12), min_size=0, max_size=20),
       lead=st.integers(0, 4), trail=st.integers(0, 4), chunk_rows=st.integers(1, 40))
def test_chunk_bounds_with_empty_blocks_at_the_ends(inner, lead, trail, chunk_rows):
    """Empty blocks before the first and after the last nonempty one make no chunk of their
    own: the bounds are those of the plain walk."""
    sizes = [0] * lead + inner + [0] * trail
    if not sizes:
        sizes = [0]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    bounds = chunk_bounds(offsets, chunk_rows)
    if offsets[-1] == 0:
        assert list(bounds) == [0, 0]
    else:
        assert list(bounds) == _plain_chunks(sizes, chunk_rows)


def test_chunk_bounds_empty_ends_by_hand():
    offsets = np.array([0, 0, 0, 5, 9, 9, 20, 20, 20])
    np.testing.assert_array_equal(chunk_bounds(offsets, 6), [0, 9, 20])
    np.testing.assert_array_equal(chunk_bounds(offsets, 1), [0, 5, 9, 20])
    np.testing.assert_array_equal(chunk_bounds(np.array([0, 0, 0]), 4), [0, 0])


def test_chunk_bounds_extremes():
    offsets = np.array([0, 3, 3, 8, 20, 21])
    np.testing.assert_array_equal(chunk_bounds(offsets, 10**6), [0, 21])
    np.testing.assert_array_equal(chunk_bounds(offsets, 1), [0, 3, 8, 20, 21])
    np.testing.assert_array_equal(chunk_bounds(offsets, 4), [0, 8, 20, 21])


def test_gdsw_reexports_the_same_helpers():
    from ddops.dd import gdsw

    assert gdsw.chunk_bounds is chunk_bounds
    assert gdsw.SUPERLU_PANEL_SIZE == local_solvers.SUPERLU_PANEL_SIZE


# -- PARDISO's ordering --------------------------------------------------------------------------
def _laplacian_blocks(shape, count):
    """``count`` copies of the finite-difference Laplacian of a grid of ``shape``."""
    one = ddops.poisson_2d(shape[0]) if len(shape) == 2 else ddops.poisson_3d(shape[0])
    K = sp.block_diag([one] * count, format="csr")
    return K, np.arange(count + 1) * one.shape[0]


@pytest.mark.parametrize("shape,count,expected", [
    ((40, 40), 3, "md"), ((14, 14, 14), 3, "md"), ((26, 26, 26), 2, "nd")])
def test_pardiso_auto_ordering_takes_nested_dissection_where_its_flops_pay(shape, count, expected):
    """"auto" takes nested dissection only when the factorisation flops it saves exceed
    PARDISO_ND_FLOPS_PER_ENTRY per stored entry of the largest block's upper triangle:
    minimum degree on 2D grids and small 3D blocks, nested dissection on a 3D block of
    17,576 unknowns (it halves the flops there).  Nested dissection is not analysed where
    minimum degree's flops are below that bound (it could not save them): then the flops
    the ordering reports have no "nd", and the nested-dissection factorisation's flops
    would indeed not have saved enough."""
    need("pardiso")
    K, offsets = _laplacian_blocks(shape, count)
    nd = factorize_blocks(K, offsets, "pardiso", ordering="nd")
    md = factorize_blocks(K, offsets, "pardiso", ordering="md")
    auto = factorize_blocks(K, offsets, "pardiso")
    assert (nd.ordering, md.ordering) == ("nd", "md")
    assert nd.ordering_flops == md.ordering_flops == {}
    flops = auto.ordering_flops
    one = offsets[1]
    assert flops["entries"] == sp.triu(K[:one, :one]).nnz
    limit = local_solvers.PARDISO_ND_FLOPS_PER_ENTRY * flops["entries"]
    probed = "nd" in flops
    assert probed == (flops["md"] > limit)
    if not probed:  # the flops nested dissection would have saved, from its own analysis
        upper = sp.triu(K[:one, :one], format="csr")
        probe = local_solvers._PardisoHandle(upper, np.dtype(np.float64), "nd")
        probe.iparm[18] = -1
        assert probe.call(11)[1] == 0
        flops = dict(flops, nd=1e6 * float(probe.iparm[18]))
        probe.free()
    rule = "nd" if flops["md"] - flops["nd"] > limit else "md"
    assert auto.ordering == rule == expected
    assert auto.nnz == {"nd": nd, "md": md}[expected].nnz
    b = np.random.default_rng(0).standard_normal(K.shape[0])
    for f in (nd, md, auto):
        assert np.linalg.norm(K @ f.solve(b) - b) <= 1e-10 * np.linalg.norm(b)


@pytest.mark.parametrize("shape,count,analyses", [
    ((20, 20), 1, 1), ((20, 20), 3, 2), ((16, 16, 16), 1, 2), ((16, 16, 16), 3, 3)])
def test_pardiso_auto_ordering_keeps_the_probe_of_a_single_block(monkeypatch, shape, count,
                                                                 analyses):
    """A matrix of one block (a coarse matrix) is analysed by the probes only, and the
    winner's analysis is the factorisation's; several blocks take one more analysis.  The
    probes are minimum degree, and nested dissection where minimum degree's flops leave it
    something to save (the 3D block, not the 2D one).  Either way the solves and a
    refactorisation with new values are exact."""
    need("pardiso")
    K, offsets = _laplacian_blocks(shape, count)
    calls = []
    original = local_solvers._PardisoHandle.call

    def counted(self, phase, *args, **kwargs):
        calls.append(phase)
        return original(self, phase, *args, **kwargs)

    monkeypatch.setattr(local_solvers._PardisoHandle, "call", counted)
    f = factorize_blocks(K, offsets, "pardiso")
    assert calls.count(11) == analyses
    b = np.random.default_rng(1).standard_normal(K.shape[0])
    assert np.linalg.norm(K @ f.solve(b) - b) <= 1e-10 * np.linalg.norm(b)
    K2 = K + sp.diags(np.linspace(1.0, 2.0, K.shape[0]))
    K2 = sp.csr_matrix(K2)
    K2.sort_indices()
    assert np.linalg.norm(K2 @ f.refactor(K2).solve(b) - b) <= 1e-10 * np.linalg.norm(b)
    assert calls.count(11) == analyses


def _node_blocks(sides, b=3):
    """Blocks ``kron(L, S)``: the Laplacian ``L`` of a ``side^3`` grid with an SPD ``b x b``
    coupling ``S`` at every node (rows ``j b : (j + 1) b`` are node ``j``), one per side."""
    S = np.eye(b) * 3.0 + np.diag(np.ones(b - 1), 1) + np.diag(np.ones(b - 1), -1)
    blocks = [sp.kron(ddops.poisson_3d(side), S, format="csr") for side in sides]
    K = sp.block_diag(blocks, format="csr")
    K.sort_indices()
    return K, np.concatenate([[0], np.cumsum([B.shape[0] for B in blocks])])


def _whole_nodes(order, b):
    """Whether every node's ``b`` rows follow each other, in order, in ``order``."""
    triples = np.asarray(order).reshape(-1, b)
    return bool(np.all(triples % b == np.arange(b)) and np.all(np.diff(triples, axis=1) == 1))


def test_node_nested_dissection_keeps_nodes_whole():
    """The ordering is a permutation that eliminates every node's rows together and in
    order, and it is a nested dissection: on a 12^3 grid of 3 x 3 nodes it has far less
    fill than the grid's natural (banded) order, as PARDISO factorises both."""
    need("pardiso")
    K, offsets = _node_blocks([12])
    order = local_solvers.node_nested_dissection(K, 3)
    assert np.array_equal(np.sort(order), np.arange(K.shape[0]))
    assert _whole_nodes(order, 3)
    block = np.zeros(K.shape[0], dtype=np.int64)
    nested = local_solvers.PardisoBlocks(K, offsets, block, order=order)
    natural = local_solvers.PardisoBlocks(K, offsets, block, order=np.arange(K.shape[0]))
    assert nested.nnz < 0.7 * natural.nnz
    with pytest.raises(ValueError, match="block_size 3 must divide"):
        local_solvers.node_nested_dissection(K[:-1, :-1], 3)


def test_node_minimum_degree_keeps_nodes_whole(monkeypatch):
    """The ordering is a permutation that eliminates every node's rows together and in
    order, computed by PARDISO's minimum degree on the node graph (the graph it analyses has
    one vertex per node): on a 12^3 grid of 3 x 3 nodes it has far less fill than the
    natural (banded) order, and no more than PARDISO's minimum degree on the unknowns."""
    need("pardiso")
    K, offsets = _node_blocks([12])
    analysed = []
    handle = local_solvers._PardisoHandle

    def spy(upper, *args):
        analysed.append(upper.shape[0])
        return handle(upper, *args)

    monkeypatch.setattr(local_solvers, "_PardisoHandle", spy)
    order = local_solvers.node_minimum_degree(K, 3)
    assert analysed == [K.shape[0] // 3]
    monkeypatch.setattr(local_solvers, "_PardisoHandle", handle)
    assert np.array_equal(np.sort(order), np.arange(K.shape[0]))
    assert _whole_nodes(order, 3)
    block = np.zeros(K.shape[0], dtype=np.int64)
    nodes = local_solvers.PardisoBlocks(K, offsets, block, order=order)
    own = local_solvers.PardisoBlocks(K, offsets, block, ordering="md")
    natural = local_solvers.PardisoBlocks(K, offsets, block, order=np.arange(K.shape[0]))
    assert nodes.nnz < 0.5 * natural.nnz and nodes.nnz <= own.nnz
    with pytest.raises(ValueError, match="block_size 3 must divide"):
        local_solvers.node_minimum_degree(K[:-1, :-1], 3)


def test_node_minimum_degree_off_leaves_the_ordering_to_pardiso(monkeypatch):
    """With :data:`PARDISO_NODE_MINIMUM_DEGREE` off, minimum degree with ``block_size = 3``
    is PARDISO's own on the unknowns' graph (read back, iparm[4] = 2), nested dissection
    still the node graph's, and both solve as the dense solve does."""
    need("pardiso")
    monkeypatch.setattr(local_solvers, "PARDISO_NODE_MINIMUM_DEGREE", False)
    K, offsets = _node_blocks([7, 6])
    b = np.random.default_rng(5).standard_normal(K.shape[0])
    md = factorize_blocks(K, offsets, "pardiso", ordering="md", block_size=3)
    nd = factorize_blocks(K, offsets, "pardiso", ordering="nd", block_size=3)
    assert md._handle.iparm[4] == 2 and nd._handle.iparm[4] == 1
    for f in (md, nd):
        np.testing.assert_allclose(f.solve(b), np.linalg.solve(K.toarray(), b), rtol=1e-10,
                                   atol=1e-12)


@pytest.mark.parametrize("ordering,nd_flops,chosen", [
    ("nd", None, "nd"), ("auto", -np.inf, "nd"), ("md", None, "md"), ("auto", np.inf, "md")])
def test_pardiso_orders_the_node_graph(monkeypatch, ordering, nd_flops, chosen):
    """With ``block_size = 3`` both orderings (chosen, or won by the "auto" probe, made to
    win here) order the node graph, nested dissection by METIS and minimum degree by
    PARDISO, and are handed to PARDISO as whole nodes; without a block size, or when a block
    does not hold whole nodes, PARDISO orders by itself.  Every factorisation solves
    ``K x = b`` as the dense solve does, to 1e-10."""
    need("pardiso")
    if nd_flops is not None:
        monkeypatch.setattr(local_solvers, "PARDISO_ND_FLOPS_PER_ENTRY", nd_flops)
    K, offsets = _node_blocks([7, 6])
    b = np.random.default_rng(2).standard_normal(K.shape[0])
    x = np.linalg.solve(K.toarray(), b)
    nodes = factorize_blocks(K, offsets, "pardiso", ordering=ordering, block_size=3)
    own = factorize_blocks(K, offsets, "pardiso", ordering=ordering)
    assert nodes.ordering == own.ordering == chosen and nodes.block_size == 3
    # given (iparm[4] = 1) as whole nodes; PARDISO's own (iparm[4] = 2), read back
    assert nodes._handle.iparm[4] == 1 and _whole_nodes(nodes._handle.order, 3)
    assert own._handle.iparm[4] == 2 and own.order is own._handle.order
    assert sorted(own.order) == list(range(K.shape[0]))
    # a 1 x 1 block after the node blocks: no node structure, PARDISO's own ordering
    K1 = sp.block_diag([K, sp.identity(1)], format="csr")
    odd = factorize_blocks(K1, np.r_[offsets, K.shape[0] + 1], "pardiso", ordering=ordering,
                           block_size=3)
    assert odd.block_size == 1 and odd._handle.iparm[4] == 2
    for f, rhs, ref in ((nodes, b, x), (own, b, x), (odd, np.r_[b, 1.0], np.r_[x, 1.0])):
        np.testing.assert_allclose(f.solve(rhs), ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("nd_flops,chosen", [(-np.inf, "nd"), (np.inf, "md")])
def test_threaded_blocks_hand_the_block_size_to_every_group(monkeypatch, nd_flops, chosen):
    """ThreadedBlocks passes ``block_size`` on: every group's ordering (nested dissection or
    minimum degree) keeps nodes whole, and the groups together solve as the dense solve
    does."""
    need("pardiso")
    from ddops.linalg.parallel import ThreadedBlocks

    monkeypatch.setattr(local_solvers, "PARDISO_ND_FLOPS_PER_ENTRY", nd_flops)
    K, offsets = _node_blocks([6, 5, 6, 5])
    f = ThreadedBlocks(K, offsets, groups=2, workers=1, block_size=3)
    assert len(f.parts) == 2 and f.ordering == chosen
    assert all(p.block_size == 3 and _whole_nodes(p._handle.order, 3) for p in f.parts)
    b = np.random.default_rng(3).standard_normal(K.shape[0])
    np.testing.assert_allclose(f.solve(b), np.linalg.solve(K.toarray(), b), rtol=1e-10,
                               atol=1e-12)


def test_pardiso_refuses_an_unknown_ordering():
    need("pardiso")
    K, offsets = _laplacian_blocks((5, 5), 2)
    with pytest.raises(ValueError, match="ordering"):
        factorize_blocks(K, offsets, "pardiso", ordering="amd")


# -- defaults of the AMG solver -------------------------------------------------------------------
def test_amg_defaults_are_one_plain_aggregation_cycle():
    """AMG_CYCLES = 1 and AMG_OPTIONS = plain aggregation: the default solver equals the one
    with cycles=1, differs from two cycles, and its prolongation is the tentative one (one
    nonzero per row for the constant near-null vector), not a smoothed one."""
    need("amg")
    assert local_solvers.AMG_CYCLES == 1
    assert local_solvers.AMG_OPTIONS == {"smooth": None}
    K, offsets = _laplacian_blocks((24, 24), 2)
    default = factorize_blocks(K, offsets, "amg")
    one = factorize_blocks(K, offsets, "amg", cycles=1)
    two = factorize_blocks(K, offsets, "amg", cycles=2)
    b = np.random.default_rng(3).standard_normal(K.shape[0])
    assert np.array_equal(default.solve(b), one.solve(b))
    assert not np.allclose(default.solve(b), two.solve(b))
    P = default.hierarchy.levels[0].P
    assert len(default.hierarchy.levels) >= 2
    assert np.diff(sp.csr_matrix(P).indptr).max() == 1


def test_amg_build_is_reproducible_and_leaves_the_global_generator_alone(monkeypatch):
    """Building the hierarchy neither draws from nor reseeds numpy's global generator (not
    thread-safe), and gives the same operator whatever the caller's generator state."""
    need("amg")
    touched = []
    for name in ("seed", "set_state", "get_state", "rand", "random", "random_sample",
                 "standard_normal", "randn", "permutation", "randint", "choice"):
        real = getattr(np.random, name)
        monkeypatch.setattr(np.random, name, lambda *a, _n=name, _r=real, **k: (
            touched.append(_n), _r(*a, **k))[1])
    K, offsets = _laplacian_blocks((24, 24), 2)
    Z = np.ones((K.shape[0], 1))
    b = np.random.default_rng(4).standard_normal(K.shape[0])
    first = factorize_blocks(K, offsets, "amg").solve(b)
    factorize_blocks(K, offsets, "amg", near_null=Z)
    assert touched == []
    monkeypatch.undo()
    np.random.seed(7)  # noqa: NPY002 - another caller state: the same hierarchy
    assert np.array_equal(factorize_blocks(K, offsets, "amg").solve(b), first)


def _elasticity_blocks():
    """Two 2D linear-elasticity blocks (P1, clamped on one side) and their rigid body
    modes, interleaved unknowns."""
    pytest.importorskip("skfem")
    from ddops.problems import fem_elasticity_2d

    A, X = fem_elasticity_2d(16)
    Z = ddops.rigid_body_modes(X)
    K = sp.block_diag([A, A], format="csr")
    return K, np.arange(3) * A.shape[0], np.vstack([Z, Z])


def test_amg_builds_its_hierarchy_on_the_near_null_space():
    """With a k-column near-null space the tentative prolongation has k columns per
    aggregate (the aggregates come from A alone: k times the columns of the constants'
    prolongation), and its span comes much closer to the rigid body modes (pyamg smooths
    the candidates on A first, so not exactly) than the constants' prolongation."""
    need("amg")
    K, offsets, Z = _elasticity_blocks()
    with_z = factorize_blocks(K, offsets, "amg", near_null=Z)
    without = factorize_blocks(K, offsets, "amg")
    P_z, P_1 = (sp.csr_matrix(f.hierarchy.levels[0].P).toarray() for f in (with_z, without))
    assert len(with_z.hierarchy.levels) >= 2
    assert P_z.shape[1] == Z.shape[1] * P_1.shape[1]

    def residual(P):
        return np.linalg.norm(P @ np.linalg.lstsq(P, Z, rcond=None)[0] - Z) / np.linalg.norm(Z)

    assert residual(P_z) < 0.25 * residual(P_1), (residual(P_z), residual(P_1))


def test_pardiso_schur_complement_against_the_dense_elimination():
    """PARDISO's partial factorisation onto scattered rows against the dense Schur complement
    (a 3D Poisson matrix with a random diagonal, rows in their sorted order), and a block
    that is not positive definite refused as SingularBlockError."""
    if not local_solvers.pardiso_available():
        pytest.skip("PARDISO is not installed")
    rng = np.random.default_rng(3)
    A = (ddops.poisson_3d(8) + sp.diags(rng.random(512))).tocsr()
    rows = np.sort(rng.choice(512, 70, replace=False))
    rest = np.setdiff1d(np.arange(512), rows)
    D = A.toarray()
    exact = D[np.ix_(rows, rows)] - D[np.ix_(rows, rest)] @ np.linalg.solve(
        D[np.ix_(rest, rest)], D[np.ix_(rest, rows)])
    S = local_solvers.pardiso_schur_complement(A, rows)
    assert np.abs(S - exact).max() <= 1e-12 * np.abs(exact).max()
    # the eliminated block indefinite (a negative diagonal entry there), the kept one free
    B = A.tolil()
    B[rest[0], rest[0]] = -1.0
    with pytest.raises(local_solvers.SingularBlockError):
        local_solvers.pardiso_schur_complement(B.tocsr(), rows)
    for bad in (rows[::-1], np.append(rows, rows[-1]), np.array([-1, 3]), np.array([3, 512])):
        with pytest.raises(ValueError, match="sorted, distinct row indices"):
            local_solvers.pardiso_schur_complement(A, bad)



@given(st.integers(0, local_solvers.SCHUR_DENSE_ELIMINATED + 2), st.integers(1, 30),
       st.integers(0, 2**31))
def test_few_eliminated_rows_give_the_dense_elimination(eliminated, kept, seed):
    """Up to ``SCHUR_DENSE_ELIMINATED`` eliminated rows (none included) the dense path,
    beyond it PARDISO's, both against a dense elimination of a random sparse SPD matrix
    whose lower triangle is garbage (only the upper one is read); an indefinite
    eliminated block is refused."""
    need("pardiso")
    rng = np.random.default_rng(seed)
    m = eliminated + kept
    A = rand_spd(m, seed, density=0.3).tocsr()
    D = A.toarray()
    rows = np.sort(rng.choice(m, kept, replace=False))
    rest = np.setdiff1d(np.arange(m), rows)
    exact = D[np.ix_(rows, rows)] - D[np.ix_(rows, rest)] @ np.linalg.solve(
        D[np.ix_(rest, rest)], D[np.ix_(rest, rows)])
    garbage = sp.triu(A, format="csr") + sp.tril(sp.random(m, m, density=0.3,
                                                           random_state=rng), k=-1)
    S = local_solvers.pardiso_schur_complement(garbage, rows)
    assert np.abs(S - exact).max() <= 1e-10 * np.abs(exact).max()
    if eliminated:
        B = A.tolil()
        B[rest[0], rest[0]] = -1.0
        with pytest.raises(local_solvers.SingularBlockError):
            local_solvers.pardiso_schur_complement(B.tocsr(), rows)



def test_pardiso_eliminates_only_past_the_dense_cutoff(monkeypatch):
    """``SCHUR_DENSE_ELIMINATED`` eliminated rows never reach PARDISO (whose partial
    factorisation is unsafe with one or none); one more does.  The cutoff is the
    documented 8."""
    need("pardiso")
    assert local_solvers.SCHUR_DENSE_ELIMINATED == 8
    made = []
    handle = local_solvers._PardisoHandle

    def counted(*args, **kwargs):
        made.append(1)
        return handle(*args, **kwargs)

    monkeypatch.setattr(local_solvers, "_PardisoHandle", counted)
    A = rand_spd(30, 4)
    for eliminated, calls in ((0, 0), (1, 0), (local_solvers.SCHUR_DENSE_ELIMINATED, 0),
                              (local_solvers.SCHUR_DENSE_ELIMINATED + 1, 1)):
        made.clear()
        local_solvers.pardiso_schur_complement(A, np.arange(eliminated, 30))
        assert len(made) == calls, (eliminated, made)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pardiso_inertia_counts_every_block_against_dense_eigenvalues(seed):
    """The negative eigenvalues of each block of a block-diagonal symmetric indefinite
    matrix (shifted 3D Poisson blocks with random diagonals, shifts between two eigenvalues
    so that no eigenvalue is near zero) against dense ``eigvalsh``, block by block."""
    need("pardiso")
    rng = np.random.default_rng(seed)
    blocks, expected = [], []
    for size in rng.integers(3, 7, size=5):
        K = (ddops.poisson_3d(int(size)) + sp.diags(rng.random(int(size) ** 3))).tocsr()
        lam = np.linalg.eigvalsh(K.toarray())
        j = int(rng.integers(0, lam.size - 1))
        blocks.append((K - 0.5 * (lam[j] + lam[j + 1]) * sp.eye(K.shape[0])).tocsr())
        expected.append(j + 1)
    offsets = np.concatenate([[0], np.cumsum([b.shape[0] for b in blocks])])
    negative, perturbed = local_solvers.pardiso_inertia(sp.block_diag(blocks, "csr"), offsets)
    assert perturbed == 0
    np.testing.assert_array_equal(negative, expected)
    # one block: the whole matrix
    whole, _ = local_solvers.pardiso_inertia(sp.block_diag(blocks, "csr"))
    assert whole.tolist() == [sum(expected)]


def arrow(m):
    """A diagonally dominant arrow matrix: row and column 0 full.  Eliminated last, the hub
    causes no fill (``2 m - 1`` stored factor entries); eliminated first, a dense factor."""
    K = sp.lil_matrix((m, m))
    K.setdiag(m + 1.0)
    K[0, 1:] = 1.0
    K[1:, 0] = 1.0
    return K.tocsr()


def test_pardiso_factorises_with_a_given_order():
    """``order`` is the elimination order, used as given (no probe): the hub of an arrow
    matrix last gives the factor without fill, first the dense one; both solve ``K x = b``
    as the dense solve does."""
    need("pardiso")
    m = 60
    K = arrow(m)
    offsets, block = np.array([0, m]), np.zeros(m, dtype=np.int64)
    hub_last = local_solvers.PardisoBlocks(K, offsets, block, order=np.r_[np.arange(1, m), 0])
    hub_first = local_solvers.PardisoBlocks(K, offsets, block, order=np.arange(m))
    assert hub_last.ordering == hub_first.ordering == "given"
    assert hub_last.nnz <= 2 * m + 1 < m * (m + 1) // 2 <= hub_first.nnz
    b = np.random.default_rng(0).standard_normal((m, 3))
    x = np.linalg.solve(K.toarray(), b)
    for solver in (hub_last, hub_first):
        np.testing.assert_allclose(solver.solve(b), x, rtol=1e-12, atol=1e-14)
    via = factorize_blocks(K, offsets, "pardiso", order=np.r_[np.arange(1, m), 0])
    assert via.ordering == "given" and via.nnz == hub_last.nnz


def test_pardiso_refuses_an_order_that_is_not_a_permutation():
    need("pardiso")
    K = arrow(8)
    offsets, block = np.array([0, 8]), np.zeros(8, dtype=np.int64)
    for bad in (np.arange(7), np.r_[np.arange(7), 6], np.r_[np.arange(7), 8],
                np.arange(8.0)):
        with pytest.raises(ValueError, match="order must be"):
            local_solvers.PardisoBlocks(K, offsets, block, order=bad)
    with pytest.raises(ValueError, match="order and sparse_rows"):
        local_solvers.PardisoBlocks(K, offsets, block, order=np.arange(8),
                                    sparse_rows=np.array([0]))


def test_pardiso_inertia_returns_the_order_of_its_factorisation():
    """The ordering the inertia's analysis computed (``return_order``) is a permutation, and
    it is the one that eliminates the hub of an arrow matrix last: factorised with it, the
    matrix has no fill, as with PARDISO's own minimum-degree analysis."""
    need("pardiso")
    m = 60
    K = arrow(m)
    negative, perturbed, order = local_solvers.pardiso_inertia(
        (K - 2.0 * m * sp.eye(m)).tocsr(), return_order=True)
    # K - 2m I: eigenvalues m + 1 - 2m +- sqrt(m - 1) and m + 1 - 2m, all negative
    assert negative.tolist() == [m] and perturbed == 0
    assert sorted(order.tolist()) == list(range(m))
    offsets, block = np.array([0, m]), np.zeros(m, dtype=np.int64)
    given = local_solvers.PardisoBlocks(K, offsets, block, order=order)
    own = local_solvers.PardisoBlocks(K, offsets, block, ordering="md")
    assert given.nnz == own.nnz <= 2 * m + 1


def test_pardiso_inertia_is_none_where_a_pivot_vanishes():
    """A singular matrix (a zero row and column) has no certain inertia: None."""
    need("pardiso")
    K = ddops.poisson_2d(6).tolil()
    K[5, :] = 0.0
    K[:, 5] = 0.0
    K[5, 5] = 0.0
    assert local_solvers.pardiso_inertia(K.tocsr()) is None


@pytest.mark.parametrize("seed", [0, 1])
def test_pardiso_pivots_are_an_eliminations_at_their_rows(seed):
    """``pardiso_pivots`` against closed forms: on a matrix of 2 x 2 SPD blocks and 1 x 1
    entries whose rows are scattered by a random permutation, each 1 x 1 row gets its entry
    and each pair gets ``(a, c - b^2 / a)`` at its rows or ``(a - b^2 / c, c)`` (whichever
    row went first); so the pivots sit at the rows they eliminated, and their product is the
    determinant.  A singular matrix (a zero pivot, perturbed) gives None."""
    need("pardiso")
    rng = np.random.default_rng(seed)
    pairs, singles = 20, 15
    m = 2 * pairs + singles
    where = rng.permutation(m)
    K = sp.lil_matrix((m, m))
    expected = []
    for j in range(pairs):
        i, k = int(where[2 * j]), int(where[2 * j + 1])
        a, c = rng.uniform(1.0, 3.0, size=2)
        b = rng.uniform(-0.9, 0.9) * np.sqrt(a * c)
        K[i, i], K[k, k], K[i, k], K[k, i] = a, c, b, b
        expected.append((i, k, a, c, b))
    for i in where[2 * pairs:]:
        K[int(i), int(i)] = rng.uniform(0.5, 2.0)
    K = K.tocsr()
    pivots = local_solvers.pardiso_pivots(K)
    for i, k, a, c, b in expected:
        options = [(a, c - b * b / a), (a - b * b / c, c)]
        assert min(np.abs(np.array(o) - pivots[[i, k]]).max() for o in options) < 1e-12
    singles_at = where[2 * pairs:]
    np.testing.assert_allclose(pivots[singles_at], K.diagonal()[singles_at], rtol=1e-14)
    sign, logdet = np.linalg.slogdet(K.toarray())
    assert sign > 0 and abs(np.log(pivots).sum() - logdet) < 1e-10 * abs(logdet) + 1e-12
    # a dependent row: [[1, 1], [1, 1]] inside, its second pivot vanishes
    S = sp.block_diag([K, sp.csr_matrix(np.ones((2, 2)))], "csr")
    assert local_solvers.pardiso_pivots(S) is None



def test_pardiso_partial_solve_analysis_is_not_probed(monkeypatch):
    """With the rows marked for partial solves PARDISO's analysis takes the same ordering
    whatever ``iparm[1]`` asks (the factor's nonzeros agree, unlike plain analyses), so
    ``"auto"`` makes no probe analyses and names the ordering nested dissection, another
    ordering is refused, and a plain analysis still probes."""
    need("pardiso")
    rng = np.random.default_rng(2)
    K = ddops.poisson_2d(30).tocsr()
    offsets = np.array([0, K.shape[0]])
    rows = np.sort(rng.choice(K.shape[0], size=60, replace=False))
    upper = sp.triu(K, format="csr")
    nnz = {}
    for marked in (False, True):
        for ordering in ("md", "nd"):
            handle = local_solvers._PardisoHandle(upper, np.float64, ordering)
            if marked:
                handle.mark_sparse(rows)
            assert handle.call(11)[1] == 0 and handle.call(22)[1] == 0
            nnz[marked, ordering] = int(handle.iparm[17])
            handle.free()
    assert nnz[True, "md"] == nnz[True, "nd"]
    assert nnz[False, "md"] != nnz[False, "nd"]  # (the orderings differ where they count)
    probes = []
    original = local_solvers.PardisoBlocks._cheaper_ordering

    def spy(self, *args, **kwargs):
        probes.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(local_solvers.PardisoBlocks, "_cheaper_ordering", spy)
    f = factorize_blocks(K, offsets, "pardiso", sparse_rows=rows)
    assert not probes and f.ordering == "nd" and f.nnz == nnz[True, "nd"]
    with pytest.raises(ValueError, match="ordering='md' with sparse_rows"):
        factorize_blocks(K, offsets, "pardiso", ordering="md", sparse_rows=rows)
    factorize_blocks(K, offsets, "pardiso")
    assert probes == [1]


@pytest.mark.parametrize("b", [1, 2, 3])
@pytest.mark.parametrize("canonical", [True, False])
def test_node_graph_of_any_stored_pattern_against_the_dense_one(b, canonical):
    """``node_graph`` itself (the factorisations' nested dissection calls it on their
    blocks as they come): nodes adjacent when any entry of their b x b blocks is stored,
    zeros included, also with unsorted and duplicated entries; Boolean, no diagonal,
    sorted."""
    rng = np.random.default_rng(7 + b)
    n = 9 * b
    R = sp.random(n, n, density=0.12, random_state=rng, format="csr")
    K = sp.csr_matrix(R + R.T + sp.identity(n))
    K.data[::4] = 0.0  # stored zeros are couplings
    stored = np.zeros((n, n), dtype=bool)
    stored[np.repeat(np.arange(n), np.diff(K.indptr)), K.indices] = True
    if not canonical:  # entries reversed within rows, the first one duplicated
        K = scrambled_csr(K)
    m = n // b
    expected = stored.reshape(m, b, m, b).any(axis=(1, 3)) & ~np.eye(m, dtype=bool)
    G = local_solvers.node_graph(K, b)
    np.testing.assert_array_equal(G.toarray(), expected)
    assert G.dtype == bool and G.has_sorted_indices
    assert np.all(np.diff(G.indptr) == expected.sum(axis=1))  # no duplicates
