"""``ddops.backend.spgemm``: scipy's sparse product without its count of the entries, bit
for bit scipy's own."""

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from ddops import backend
from ddops.backend import spgemm


def _same(C, D):
    """The same CSR arrays: pointers, column indices in their order, values bit for bit."""
    D = sp.csr_matrix(D)
    assert C.shape == D.shape
    np.testing.assert_array_equal(C.indptr, D.indptr)
    np.testing.assert_array_equal(C.indices, D.indices)
    assert C.data.dtype == D.data.dtype
    assert C.data.tobytes() == D.data.tobytes()


def _kernel_calls(monkeypatch):
    calls = []
    kernel = backend._csr_matmat

    def counted(*args):
        calls.append(args[0])
        return kernel(*args)

    monkeypatch.setattr(backend, "_csr_matmat", counted)
    return calls


@settings(max_examples=80, deadline=None)
@given(m=st.integers(0, 30), k=st.integers(0, 30), n=st.integers(0, 30),
       dp=st.floats(0.0, 1.0), dq=st.floats(0.0, 1.0), seed=st.integers(0, 2**16),
       dtypes=st.sampled_from([(np.float64, np.float64), (np.float32, np.float64),
                               (np.float32, np.float32), (np.complex128, np.float64)]),
       block=st.sampled_from([1, 5, 40, 1 << 20]), workers=st.sampled_from([1, 2, 3]))
def test_spgemm_is_scipys_product(m, k, n, dp, dq, seed, dtypes, block, workers):
    """Any shapes (empty ones too), densities from empty to full, mixed value types, blocks
    from one row (every row's bound above the block) to all rows, on one to three threads:
    scipy's product exactly."""
    rng = np.random.default_rng(seed)
    P = sp.random(m, k, dp, format="csr", random_state=rng, dtype=dtypes[0])
    Q = sp.random(k, n, dq, format="csr", random_state=rng, dtype=dtypes[1])
    old = backend.SPGEMM_BLOCK_ENTRIES
    backend.SPGEMM_BLOCK_ENTRIES = block
    try:
        C = spgemm(P, Q, workers=workers)
    finally:
        backend.SPGEMM_BLOCK_ENTRIES = old
    _same(C, P @ Q)


def test_the_count_is_skipped_and_the_blocks_bounded(monkeypatch):
    """A coarse matrix of full-support columns (rows of the product nearly full): scipy's
    kernel alone, block by block of rows whose bound fits the block, and scipy's matrix;
    unsorted columns and duplicate entries in the factors as scipy handles them."""
    calls = _kernel_calls(monkeypatch)
    from scipy.sparse import _compressed

    def counted(*args):
        raise AssertionError("scipy's count of the entries ran")

    rng = np.random.default_rng(3)
    Phi = sp.random(400, 25, 0.5, format="csr", random_state=rng)
    A = sp.random(400, 400, 0.02, format="csr", random_state=rng)
    A = (A + A.T + sp.eye(400)).tocsr()
    P, Q = Phi.T.tocsr(), (A @ Phi).tocsr()
    expected = P @ Q
    monkeypatch.setattr(_compressed, "csr_matmat_maxnnz", counted)
    _same(spgemm(P, Q), expected)
    assert calls == [25]  # one block: every row's bound (25) within it
    monkeypatch.setattr(backend, "SPGEMM_BLOCK_ENTRIES", 60)
    calls.clear()
    _same(spgemm(P, Q), expected)
    assert calls == [2] * 12 + [1]  # two rows of 25 per block of 60
    monkeypatch.undo()
    calls = _kernel_calls(monkeypatch)
    coo = P.tocoo()
    order = rng.permutation(coo.nnz)
    rows, cols, vals = coo.row[order], coo.col[order], coo.data[order]
    U = sp.csr_matrix((np.r_[vals, vals[:7]], (np.r_[rows, rows[:7]], np.r_[cols, cols[:7]])),
                      shape=P.shape)
    U.has_canonical_format = False
    _same(spgemm(U, Q), U @ Q)
    assert calls == [25]


def test_without_scipys_kernel_scipys_product(monkeypatch):
    monkeypatch.setattr(backend, "_csr_matmat", None)
    P = sp.random(30, 20, 0.2, format="csr", random_state=1)
    _same(spgemm(P, P.T), P @ P.T)


def test_spgemm_names_mismatched_shapes():
    with pytest.raises(ValueError, match="P is \\(3, 4\\) and Q is \\(5, 2\\)"):
        spgemm(sp.eye(3, 4, format="csr"), sp.eye(5, 2, format="csr"))


def test_the_galerkin_product_follows_the_thread_limit(monkeypatch):
    """``transposed_product`` runs ``spgemm``'s blocks on the threads the BLAS limit
    allows: one under ``threadpool_limits(1)`` (the preconditioners' ``threads=1``), two
    under a limit of two (where the machine has two CPUs), the same matrix either way."""
    import threadpoolctl

    from ddops.dd import coarse_matrix
    from ddops.linalg.parallel import chunk_workers

    seen = []

    def recording(P, Q, workers=1):
        seen.append(workers() if callable(workers) else workers)
        return spgemm(P, Q, workers=workers)

    monkeypatch.setattr(coarse_matrix, "spgemm", recording)
    monkeypatch.setattr(backend, "SPGEMM_BLOCK_ENTRIES", 50)
    rng = np.random.default_rng(5)
    Phi = sp.random(300, 40, 0.4, format="csr", random_state=rng)
    Q = sp.random(300, 60, 0.3, format="csr", random_state=rng)
    with threadpoolctl.threadpool_limits(1):
        one = coarse_matrix.transposed_product(Phi, Q)
    assert seen == [1]
    with threadpoolctl.threadpool_limits(2):
        if chunk_workers() >= 2:  # (two CPUs and a BLAS that threadpoolctl sees)
            two = coarse_matrix.transposed_product(Phi, Q)
            assert seen == [1, 2]
            _same(two, one)
    _same(one, Phi.T.tocsr() @ Q)


def _raw(rng, m, n, entries, dtype=np.float64, int64=False):
    """A CSR matrix as a user may hand it over: duplicate entries (some cancelling to zero),
    explicit zeros, unsorted columns, 32- or 64-bit indices."""
    rows = rng.integers(0, m, entries) if m else np.zeros(0, dtype=int)
    cols = rng.integers(0, n, entries) if n else np.zeros(0, dtype=int)
    vals = rng.standard_normal(entries).astype(dtype)
    vals[rng.random(entries) < 0.2] = 0.0
    twin = rng.random(entries) < 0.2  # a duplicate cancelling the entry
    rows, cols = np.r_[rows, rows[twin]], np.r_[cols, cols[twin]]
    vals = np.r_[vals, -vals[twin]]
    order = np.lexsort((rng.random(rows.size), rows))  # rows in order, columns not
    rows, cols, vals = rows[order], cols[order], vals[order]
    index = np.int64 if int64 else np.int32
    indptr = np.zeros(m + 1, dtype=index)
    np.cumsum(np.bincount(rows, minlength=m), out=indptr[1:])
    A = sp.csr_matrix((vals, cols.astype(index), indptr), shape=(m, n))
    A.has_canonical_format = False
    A.has_sorted_indices = False
    return A


@settings(max_examples=60, deadline=None)
@given(m=st.integers(0, 25), k=st.integers(0, 25), n=st.integers(0, 25),
       ep=st.integers(0, 200), eq=st.integers(0, 200), seed=st.integers(0, 2**16),
       int64=st.booleans(), block=st.sampled_from([1, 7, 1 << 20]))
def test_raw_inputs_bounds_and_products(m, k, n, ep, eq, seed, int64, block):
    """Duplicates, cancellations, explicit zeros, unsorted and 64-bit indices: every row's
    bound holds the columns the kernel can reach (the entries of the product of the stored
    patterns, all ones: no cancellation there), at most ``n``, and the product is
    scipy's."""
    rng = np.random.default_rng(seed)
    P = _raw(rng, m, k, ep if m and k else 0, int64=int64)
    Q = _raw(rng, k, n, eq if k and n else 0, int64=int64)
    def pattern(A):  # every stored entry, explicit zeros and duplicates too, as a one
        return sp.csr_matrix((np.ones(A.indptr[-1]), A.indices[:A.indptr[-1]], A.indptr),
                             shape=A.shape)

    reach = np.diff((pattern(P) @ pattern(Q)).tocsr().indptr)
    bound = backend.row_bounds(P, Q)
    assert np.all(bound >= reach) and np.all(bound <= n)
    old = backend.SPGEMM_BLOCK_ENTRIES
    backend.SPGEMM_BLOCK_ENTRIES = block
    try:
        C = spgemm(P, Q, workers=2)
    finally:
        backend.SPGEMM_BLOCK_ENTRIES = old
    _same(C, P @ Q)
