"""The CuPy backend against the numpy one (runs only where CuPy sees a GPU).

Everything here is skipped cleanly without CuPy or without a GPU: the module
first asks :func:`ddops.backend.cupy_available` (which guards the CuPy import
and the device query) and only then imports CuPy.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import ddops
from ddops.backend import cupy_available, to_numpy
from ddops.data import FourierRHS
from ddops.training import Trainer, TrainingConfig

if not cupy_available():
    pytest.skip("CuPy with a GPU is not available", allow_module_level=True)

cp = pytest.importorskip("cupy")

RTOL = {np.dtype(np.float64): 1e-11, np.dtype(np.float32): 2e-5}
DTYPES = [np.float64, np.float32]


def _rel(a, b) -> float:
    a = np.asarray(to_numpy(a), dtype=np.float64)
    b = np.asarray(to_numpy(b), dtype=np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


def _pair(dtype, n=64, N=4, **kwargs):
    d = ddops.Decomposition1D(n, N, overlap=2, kind="element")
    return {b: ddops.SchwarzOperator(d, local_rank=3, seed=1, dtype=dtype, backend=b, **kwargs)
            for b in ("numpy", "cupy")}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("coarse", ["interface_hats", None, "pou"])
def test_products_match_numpy(dtype, coarse):
    ops = _pair(dtype, coarse_basis=coarse)
    rtol = RTOL[np.dtype(dtype)]
    rng = np.random.default_rng(0)
    x = rng.standard_normal(ops["numpy"].shape[0])
    X = rng.standard_normal((ops["numpy"].shape[0], 5))
    assert _rel(ops["cupy"].theta, ops["numpy"].theta) == 0.0
    y = ops["cupy"].matvec(cp.asarray(x))
    assert isinstance(y, cp.ndarray) and y.shape == x.shape
    assert _rel(y, ops["numpy"].matvec(x)) < rtol
    assert _rel(ops["cupy"].rmatvec(cp.asarray(x)), ops["numpy"].rmatvec(x)) < rtol
    assert _rel(ops["cupy"].matmat(cp.asarray(X)), ops["numpy"].matmat(X)) < rtol
    assert _rel(ops["cupy"].rmatmat(cp.asarray(X)), ops["numpy"].rmatmat(X)) < rtol
    # host input is moved to the device
    assert _rel(ops["cupy"].matmat(X), ops["numpy"].matmat(X)) < rtol


@pytest.mark.parametrize("dtype", DTYPES)
def test_to_dense_matches_numpy(dtype):
    ops = _pair(dtype)
    rtol = RTOL[np.dtype(dtype)]
    dense = ops["cupy"].to_dense()
    assert isinstance(dense, np.ndarray)
    assert _rel(dense, ops["numpy"].to_dense()) < rtol
    for part in ("local", "coarse"):
        assert _rel(ops["cupy"].to_dense(part), ops["numpy"].to_dense(part)) < rtol
    # the dense matrix is the operator: M^T from rmatmat of the identity
    eye = cp.eye(ops["cupy"].shape[0], dtype=dtype)
    assert _rel(ops["cupy"].rmatmat(eye), dense.T) < rtol


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("loss", ["wmse", "mse"])
@pytest.mark.parametrize("tied", [False, True])
def test_value_and_grad_flat_matches_numpy(dtype, loss, tied):
    ops = _pair(dtype, tied=tied)
    rtol = RTOL[np.dtype(dtype)]
    n = ops["numpy"].shape[0]
    F, U = FourierRHS(64, dtype=dtype).sample(16, np.random.default_rng(3))
    vn, gn = ops["numpy"].value_and_grad_flat(F, U, loss)
    vc, gc = ops["cupy"].value_and_grad_flat(cp.asarray(F), cp.asarray(U), loss)
    assert isinstance(gc, cp.ndarray) and gc.shape == gn.shape
    assert _rel(vc, vn) < rtol
    assert _rel(gc, gn) < rtol
    # the training path: reused workspace, preallocated gradient, no input checks
    out = cp.empty_like(ops["cupy"].theta)
    for _ in range(2):
        vc2, gc2 = ops["cupy"].value_and_grad_flat(cp.asarray(F), cp.asarray(U), loss,
                                                   out=out, check=False)
        assert gc2 is out
        assert _rel(vc2, vn) < rtol and _rel(gc2, gn) < rtol
    # the structured gradient, as the host dicts of get_params()
    _, grads = ops["cupy"].value_and_grad(cp.asarray(F), cp.asarray(U), loss)
    _, ref = ops["numpy"].value_and_grad(F, U, loss)
    for key in ref:
        got = np.concatenate(grads[key]) if isinstance(grads[key], list) else grads[key]
        want = np.concatenate(ref[key]) if isinstance(ref[key], list) else ref[key]
        assert _rel(got, want) < rtol
    assert n == F.shape[0]


@pytest.mark.parametrize("dtype", DTYPES)
def test_fourier_rhs_matches_numpy(dtype):
    rtol = RTOL[np.dtype(dtype)]
    Fn, Un = FourierRHS(128, dtype=dtype).sample(32, np.random.default_rng(9))
    Fc, Uc = FourierRHS(128, dtype=dtype, backend="cupy").sample(32, np.random.default_rng(9))
    assert isinstance(Fc, cp.ndarray) and Fc.dtype == np.dtype(dtype)
    assert _rel(Fc, Fn) < rtol and _rel(Uc, Un) < rtol
    buffers = (cp.empty_like(Fc), cp.empty_like(Uc))
    Fo, Uo = FourierRHS(128, dtype=dtype, backend="cupy").sample(
        32, np.random.default_rng(9), out=buffers)
    assert Fo is buffers[0] and _rel(Fo, Fn) < rtol and _rel(Uo, Un) < rtol


@pytest.mark.parametrize("dtype", DTYPES)
def test_trainer_history_matches_numpy(dtype):
    d = ddops.Decomposition1D(128, 8, overlap=2, kind="element")
    hist = {}
    for backend, log_every in (("numpy", 1), ("cupy", 1), ("cupy", 4)):
        op = ddops.SchwarzOperator(d, local_rank=4, seed=0, dtype=dtype, backend=backend)
        cfg = TrainingConfig(steps=10, batch_size=32, lr=1e-3, progress=False, val_every=5,
                             log_every=log_every)
        result = Trainer(op, FourierRHS(128, dtype=dtype, backend=backend), cfg,
                         train_seed=11).run()
        assert result.status == "finished" and result.steps == 10
        hist[(backend, log_every)] = result.history["train"]
        if backend == "cupy":
            assert isinstance(op.theta, cp.ndarray)
    tol = 1e-9 if np.dtype(dtype) == np.float64 else 1e-3
    np.testing.assert_allclose(hist[("cupy", 1)], hist[("numpy", 1)], rtol=tol)
    # fetching the loss every 4 steps changes nothing but when the host sees it
    np.testing.assert_array_equal(hist[("cupy", 4)], hist[("cupy", 1)])


def test_gmres_accepts_operator_as_preconditioner():
    linalg = pytest.importorskip("cupyx.scipy.sparse.linalg")
    if not hasattr(linalg, "gmres"):
        pytest.skip("cupyx.scipy.sparse.linalg.gmres is not available")
    import cupyx.scipy.sparse as cpsp

    n = 64
    A = ddops.poisson_1d(n)
    m = A.shape[0]
    d = ddops.Decomposition1D(n, 4, overlap=2, kind="element")
    # a fixed identity term keeps M nonsingular (the learned part has rank <= 15 here)
    op = ddops.SchwarzOperator(d, local_rank=3, seed=1, backend="cupy", base=sp.identity(m))
    b = cp.asarray(np.random.default_rng(2).standard_normal(m))
    x, info = linalg.gmres(cpsp.csr_matrix(A), b, M=op, restart=m, maxiter=5)
    assert info == 0
    assert isinstance(x, cp.ndarray) and x.shape == (m,)
    residual = float(cp.linalg.norm(cpsp.csr_matrix(A) @ x - b) / cp.linalg.norm(b))
    assert residual < 1e-4
    x_ref = np.linalg.solve(A.toarray(), to_numpy(b))
    assert _rel(x, x_ref) < 1e-3


def test_parts_accept_device_vectors():
    ops = _pair(np.float64)
    x = np.random.default_rng(4).standard_normal(ops["numpy"].shape[0])
    for name in ("local_part", "coarse_part"):
        got = getattr(ops["cupy"], name)().matvec(cp.asarray(x))
        assert _rel(got, getattr(ops["numpy"], name)().matvec(x)) < 1e-11
