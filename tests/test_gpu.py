"""The CuPy backend against the numpy one (runs only where CuPy sees a GPU).

Everything here is skipped cleanly without CuPy or without a GPU: the module
first asks :func:`ddops.backend.cupy_available` (which guards the CuPy import
and the device query) and only then imports CuPy.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import ddops
from ddops.backend import asarray, cupy_available, spmm, take_rows, to_numpy
from ddops.dd.coarse import COARSE_BASES
from ddops.dd.decomposition import WEIGHTINGS
from ddops.dd.gdsw import GDSW_VARIANTS, gdsw_basis, nicolaides_basis
from ddops.dd.partition import decomposition_from_grid
from ddops.io import load_operator, save_operator
from ddops.learning.data import RHS_MODES, FourierRHS
from ddops.learning.optim import Adam, AdamW
from ddops.learning.training import Trainer, TrainingConfig
from ddops.operators import PARTITIONS
from ddops.operators.losses import LOSSES, loss_and_grad
from ddops.precond.learned import (
    BASES,
    DISTRIBUTIONS,
    LEARNED_INITS,
    OBJECTIVES,
    PreconditionerSampler,
    cg_iterations,
    classical_init,
    learned_schwarz_preconditioner,
    parameter_scale,
    preconditioner_objective,
    train_preconditioner,
)
from ddops.precond.schwarz import VARIANTS, TwoLevelSchwarz, jacobi
from ddops.problems import poisson_2d
from ddops.problems.poisson1d import KINDS

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
@pytest.mark.parametrize("coarse", [*COARSE_BASES, None])
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
@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("tied", [False, True])
def test_value_and_grad_flat_matches_numpy(dtype, loss, tied):
    ops = _pair(dtype, tied=tied)
    rtol = RTOL[np.dtype(dtype)]
    n = ops["numpy"].shape[0]
    F, U = FourierRHS(64, dtype=dtype).sample(16, np.random.default_rng(3))
    W = ddops.poisson_1d(64).astype(dtype) if loss == "energy" else None
    Wc = asarray(W, backend="cupy") if loss == "energy" else None
    vn, gn = ops["numpy"].value_and_grad_flat(F, U, loss, loss_weight=W)
    vc, gc = ops["cupy"].value_and_grad_flat(cp.asarray(F), cp.asarray(U), loss, loss_weight=Wc)
    assert isinstance(gc, cp.ndarray) and gc.shape == gn.shape
    assert _rel(vc, vn) < rtol
    assert _rel(gc, gn) < rtol
    # the training path: reused workspace, preallocated gradient, no input checks
    out = cp.empty_like(ops["cupy"].theta)
    for _ in range(2):
        vc2, gc2 = ops["cupy"].value_and_grad_flat(cp.asarray(F), cp.asarray(U), loss,
                                                   out=out, check=False, loss_weight=Wc)
        assert gc2 is out
        assert _rel(vc2, vn) < rtol and _rel(gc2, gn) < rtol
    # the structured gradient, as the host dicts of get_params()
    _, grads = ops["cupy"].value_and_grad(cp.asarray(F), cp.asarray(U), loss, loss_weight=Wc)
    _, ref = ops["numpy"].value_and_grad(F, U, loss, loss_weight=W)
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


# -- everything else with a backend= argument --------------------------------------------------
def _solve(method, A, b, M, rtol, maxiter=500):
    """cupyx's CG/GMRES (``tol=`` in older CuPy, ``rtol=`` in newer): ``(x, info, callbacks)``."""
    import cupyx.scipy.sparse.linalg as linalg

    fn = getattr(linalg, method)
    calls = [0]

    def count(_):
        calls[0] += 1

    name = "rtol" if "rtol" in inspect.signature(fn).parameters else "tol"
    x, info = fn(A, b, M=M, maxiter=maxiter, callback=count, **{name: rtol})
    return x, int(info), calls[0]


def _host_cg(A, b, M, rtol, maxiter=500):
    calls = [0]

    def count(_):
        calls[0] += 1

    x, info = spla.cg(A, b, M=M, rtol=rtol, maxiter=maxiter, callback=count)
    return x, int(info), calls[0]


def _variant_kwargs(name, backend, A, d):
    if name in PARTITIONS:
        return {"partition": name}
    return {"tied": {"tied": True},
            "base_matrix": {"base": sp.identity(A.shape[0], format="csr") * 0.5},
            "base_operator": {"tied": True, "base": TwoLevelSchwarz(
                A, d, coarse=False, local_solver="dense", backend=backend)},
            "custom_phi": {"coarse_basis": sp.random(A.shape[0], 5, density=0.2, random_state=2,
                                                     format="csr") + sp.eye(A.shape[0], 5)},
            "coarse_rank_2": {"coarse_rank": 2},
            "naive": {"init": "naive"}}[name]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("variant", [*PARTITIONS, "tied", "base_matrix", "base_operator",
                                     "custom_phi", "coarse_rank_2", "naive"])
def test_schwarz_variants_match_numpy(dtype, variant):
    n = 64
    A = ddops.poisson_1d(n)
    d = ddops.Decomposition1D(n, 4, overlap=2)
    ops = {b: ddops.SchwarzOperator(d, local_rank=3, seed=1, dtype=dtype, backend=b,
                                    **_variant_kwargs(variant, b, A, d))
           for b in ("numpy", "cupy")}
    rtol = RTOL[np.dtype(dtype)]
    rng = np.random.default_rng(5)
    X = rng.standard_normal((A.shape[0], 6)).astype(dtype)
    Y = rng.standard_normal((A.shape[0], 6)).astype(dtype)
    assert _rel(ops["cupy"].matmat(cp.asarray(X)), ops["numpy"].matmat(X)) < rtol
    assert _rel(ops["cupy"].rmatmat(cp.asarray(X)), ops["numpy"].rmatmat(X)) < rtol
    vn, gn = ops["numpy"].value_and_grad_flat(X, Y, "wmse")
    vc, gc = ops["cupy"].value_and_grad_flat(cp.asarray(X), cp.asarray(Y), "wmse")
    assert _rel(vc, vn) < rtol and _rel(gc, gn) < rtol


@pytest.mark.parametrize("kind", KINDS)
def test_decompositions_of_other_shapes_match_numpy(kind):
    n = 96
    irregular = ddops.Decomposition([np.arange(0, 30), np.arange(25, 70), np.arange(60, 95)], 95)
    for d, coarse in ((ddops.Decomposition1D(n, 5, overlap=3, kind=kind), "interface_hats"),
                      (irregular, "pou"),
                      (decomposition_from_grid((12, 12), (3, 2), overlap=1), "pou")):
        ops = {b: ddops.SchwarzOperator(d, local_rank=2, coarse_basis=coarse, seed=4, backend=b)
               for b in ("numpy", "cupy")}
        X = np.random.default_rng(6).standard_normal((d.num_dofs, 4))
        assert _rel(ops["cupy"].matmat(cp.asarray(X)), ops["numpy"].matmat(X)) < 1e-11
        vn, gn = ops["numpy"].value_and_grad_flat(X, X[::-1].copy(), "mse")
        vc, gc = ops["cupy"].value_and_grad_flat(cp.asarray(X), cp.asarray(X[::-1]), "mse")
        assert _rel(vc, vn) < 1e-11 and _rel(gc, gn) < 1e-11


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("loss", LOSSES)
def test_global_low_rank_matches_numpy(dtype, loss):
    ops = {b: ddops.GlobalLowRankOperator(63, 5, seed=2, dtype=dtype, backend=b)
           for b in ("numpy", "cupy")}
    rtol = RTOL[np.dtype(dtype)]
    F, U = FourierRHS(64, dtype=dtype).sample(12, np.random.default_rng(7))
    W = ddops.poisson_1d(64).astype(dtype) if loss == "energy" else None
    Wc = asarray(W, backend="cupy") if loss == "energy" else None
    assert isinstance(ops["cupy"].theta, cp.ndarray)
    assert _rel(ops["cupy"].matmat(cp.asarray(F)), ops["numpy"].matmat(F)) < rtol
    assert _rel(ops["cupy"].rmatvec(cp.asarray(F[:, 0])), ops["numpy"].rmatvec(F[:, 0])) < rtol
    vn, gn = ops["numpy"].value_and_grad_flat(F, U, loss, loss_weight=W)
    vc, gc = ops["cupy"].value_and_grad_flat(cp.asarray(F), cp.asarray(U), loss, loss_weight=Wc)
    assert _rel(vc, vn) < rtol and _rel(gc, gn) < rtol


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", LOSSES)
def test_losses_match_numpy(dtype, name):
    rng = np.random.default_rng(8)
    P = rng.standard_normal((40, 6)).astype(dtype)
    U = rng.standard_normal((40, 6)).astype(dtype)
    W = ddops.poisson_1d(41).astype(dtype) if name == "energy" else None
    Wc = asarray(W, backend="cupy") if name == "energy" else None
    vn, gn = loss_and_grad(name, P, U, weight=W)
    Pc, Uc = cp.asarray(P), cp.asarray(U)
    buf = cp.empty_like(Pc)
    vc, gc = loss_and_grad(name, Pc, Uc, out=buf, weight=Wc)
    assert gc is buf and hasattr(vc, "shape")  # left on the device, not a Python float
    assert _rel(vc, vn) < RTOL[np.dtype(dtype)] and _rel(gc, gn) < RTOL[np.dtype(dtype)]
    np.testing.assert_array_equal(to_numpy(Pc), P)  # the inputs are left alone


@pytest.mark.parametrize("cls, weight_decay", [(Adam, 0.0), (Adam, 0.01), (AdamW, 0.01)])
def test_optimizers_and_their_state_on_the_device(cls, weight_decay):
    rng = np.random.default_rng(9)
    p0 = rng.standard_normal(50)
    grads = [rng.standard_normal(50) for _ in range(6)]
    host, dev = p0.copy(), cp.array(p0)
    oh, oc = cls([host], lr=0.1, weight_decay=weight_decay), cls([dev], lr=0.1,
                                                                  weight_decay=weight_decay)
    for g in grads[:3]:
        oh.step([g])
        oc.step([cp.asarray(g)])
    resumed = dev.copy()
    fresh = cls([resumed], lr=1.0, weight_decay=weight_decay)
    fresh.load_state_dict(oc.state_dict())
    for g in grads[3:]:
        oh.step([g])
        oc.step([cp.asarray(g)])
        fresh.step([cp.asarray(g)])
    assert _rel(dev, host) < 1e-12 and _rel(resumed, host) < 1e-12
    assert _rel(dev, p0) > 1e-3  # the steps did move the parameters


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", RHS_MODES)
def test_fourier_rhs_modes_and_synthesize_match_numpy(kind, mode):
    host = FourierRHS(96, kind=kind, mode=mode)
    dev = FourierRHS(96, kind=kind, mode=mode, backend="cupy")
    Fn, Un = host.sample(20, np.random.default_rng(10))
    Fc, Uc = dev.sample(20, np.random.default_rng(10))
    assert _rel(Fc, Fn) < 1e-11 and _rel(Uc, Un) < 1e-11
    C = host.sample_coefficients(20, np.random.default_rng(11))
    Fs, Us = dev.synthesize(C[:, 4:15])
    assert isinstance(Fs, cp.ndarray)
    Fr, Ur = host.synthesize(C)
    assert _rel(Fs, Fr[:, 4:15]) < 1e-11 and _rel(Us, Ur[:, 4:15]) < 1e-11


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_preconditioner_sampler_matches_numpy(distribution):
    A = ddops.poisson_1d(64)
    Fn, Un = PreconditionerSampler(A, distribution).sample(8, np.random.default_rng(12))
    Fc, Uc = PreconditionerSampler(A, distribution, dtype=np.float32,
                                   backend="cupy").sample(8, np.random.default_rng(12))
    assert isinstance(Fc, cp.ndarray) and Fc.dtype == np.float32
    assert _rel(Fc, Fn) < 1e-6 and _rel(Uc, Un) < 1e-6


@pytest.mark.parametrize("weighting", WEIGHTINGS)
@pytest.mark.parametrize("padded", [True, False])
def test_stacked_restriction_matches_numpy(weighting, padded):
    d = ddops.Decomposition1D(64, 4, overlap=2)
    X = np.random.default_rng(13).standard_normal((d.num_dofs, 3))
    S = d.stacked_restriction(weighting, padded=padded, backend="cupy")
    assert _rel(S @ cp.asarray(X), d.stacked_restriction(weighting, padded=padded) @ X) < 1e-12


def test_spmm_and_take_rows_on_the_device():
    rng = np.random.default_rng(14)
    A = sp.random(30, 20, density=0.2, random_state=3, format="csr")
    X = rng.standard_normal((20, 4))
    Ac, Xc = asarray(A, backend="cupy"), cp.asarray(X)
    out = cp.ones((30, 4))
    assert spmm(Ac, Xc, out) is out and _rel(out, A @ X) < 1e-12
    spmm(Ac, Xc, out, accumulate=True)
    assert _rel(out, 2 * (A @ X)) < 1e-12
    empty = asarray(sp.csr_matrix((30, 20)), backend="cupy")
    assert float(cp.abs(spmm(empty, Xc)).max()) == 0.0
    index = rng.integers(0, 20, 25)
    buf = cp.empty((25, 4))
    assert take_rows(Xc, cp.asarray(index), buf) is buf and _rel(buf, X[index]) < 1e-15


def test_save_and_load_across_backends(tmp_path):
    d = ddops.Decomposition1D(64, 4, overlap=2)
    op = ddops.SchwarzOperator(d, local_rank=3, seed=5, backend="cupy")
    path = save_operator(op, tmp_path / "op.npz")
    X = np.random.default_rng(15).standard_normal((63, 3))
    on_device = load_operator(path, backend="cupy")
    on_host = load_operator(path)
    assert isinstance(on_device.theta, cp.ndarray)
    np.testing.assert_array_equal(to_numpy(on_device.theta), on_host.theta)
    assert _rel(on_device.matmat(cp.asarray(X)), op.matmat(X)) < 1e-12


def test_trainer_energy_loss_validation_and_resume(tmp_path):
    n = 64
    A = ddops.poisson_1d(n)
    d = ddops.Decomposition1D(n, 4, overlap=2)
    Fv, Uv = PreconditionerSampler(A, "energy").sample(8, np.random.default_rng(16))

    def trainer(backend, log_every, **kw):
        op = learned_schwarz_preconditioner(A, d, base="jacobi", init="scaled", backend=backend)
        cfg = TrainingConfig(steps=12, batch_size=8, lr=0.05 * parameter_scale(A), loss="energy",
                             progress=False, val_every=4, log_every=log_every, **kw)
        return Trainer(op, PreconditionerSampler(A, "energy", backend=backend), cfg,
                       validation=(Fv, Uv), loss_weight=asarray(A, backend=backend))

    host = trainer("numpy", 1)
    host.run()
    dev = trainer("cupy", 4)
    dev.run()
    assert _rel(dev.history["train"], host.history["train"]) < 1e-9
    assert _rel(dev.history["val"], host.history["val"]) < 1e-9
    assert host.history["train"][-1] < host.history["train"][0]  # it did train
    first = trainer("cupy", 4, checkpoint_every=4)
    first.checkpoint_path = tmp_path / "ckpt.npz"
    first.run(8)
    resumed = trainer("cupy", 4)
    resumed.load_checkpoint(tmp_path / "ckpt.npz")
    resumed.run()
    np.testing.assert_array_equal(resumed.history["train"], dev.history["train"])
    np.testing.assert_array_equal(to_numpy(resumed.op.theta), to_numpy(dev.op.theta))


def test_trainer_float64_sampler_for_float32_operator():
    d = ddops.Decomposition1D(64, 4, overlap=2)
    hist = {}
    for backend in ("numpy", "cupy"):
        op = ddops.SchwarzOperator(d, local_rank=3, seed=0, dtype=np.float32, backend=backend)
        cfg = TrainingConfig(steps=6, batch_size=16, progress=False, val_every=10**9)
        hist[backend] = Trainer(op, FourierRHS(64, backend=backend), cfg).run().history["train"]
    assert _rel(hist["cupy"], hist["numpy"]) < 1e-4


def test_trainer_refuses_workers_on_the_device():
    op = ddops.SchwarzOperator(ddops.Decomposition1D(64, 4), local_rank=2, backend="cupy")
    with pytest.raises(ValueError, match="workers"):
        Trainer(op, FourierRHS(64, backend="cupy"), TrainingConfig(workers=2, batch_size=8))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("coarse", [*COARSE_BASES, None])
def test_two_level_schwarz_matches_numpy(dtype, variant, coarse):
    n = 128
    A = ddops.poisson_1d(n)
    d = ddops.Decomposition1D(n, 8, overlap=2)
    ops = {b: TwoLevelSchwarz(A, d, coarse_basis=coarse, variant=variant, dtype=dtype,
                              local_solver="dense", backend=b) for b in ("numpy", "cupy")}
    X = np.random.default_rng(17).standard_normal((A.shape[0], 5)).astype(dtype)
    rtol = RTOL[np.dtype(dtype)] * 10  # through the local and coarse inverses
    y = ops["cupy"].matmat(cp.asarray(X))
    assert isinstance(y, cp.ndarray)
    assert _rel(y, ops["numpy"].matmat(X)) < rtol
    assert _rel(ops["cupy"].rmatmat(cp.asarray(X)), ops["numpy"].rmatmat(X)) < rtol


def test_jacobi_matches_numpy():
    A = ddops.poisson_1d(64)
    x = np.random.default_rng(18).standard_normal(63)
    assert _rel(jacobi(A, backend="cupy").matvec(cp.asarray(x)), jacobi(A).matvec(x)) < 1e-14


@pytest.mark.parametrize("variant", ["additive", "symmetric_restricted"])
def test_cupyx_cg_with_two_level_schwarz(variant):
    n = 256
    A = ddops.poisson_1d(n)
    d = ddops.Decomposition1D(n, 8, overlap=2)
    b = np.random.default_rng(19).standard_normal(A.shape[0])
    M = TwoLevelSchwarz(A, d, variant=variant, local_solver="dense", backend="cupy")
    x, info, its = _solve("cg", asarray(A, backend="cupy"), cp.asarray(b), M, 1e-10)
    _, info_h, its_h = _host_cg(A, b, TwoLevelSchwarz(A, d, variant=variant), 1e-10)
    assert info == 0 == info_h and isinstance(x, cp.ndarray)
    assert abs(its - its_h) <= 1 and its < 40  # preconditioned: far fewer than n iterations
    assert _rel(A @ to_numpy(x), b) < 1e-9


def test_cupyx_gmres_with_restricted_additive_schwarz():
    n = 256
    A = ddops.poisson_1d(n)
    d = ddops.Decomposition1D(n, 8, overlap=2)
    b = np.random.default_rng(20).standard_normal(A.shape[0])
    M = TwoLevelSchwarz(A, d, variant="restricted", local_solver="dense", backend="cupy")
    x, info, _ = _solve("gmres", asarray(A, backend="cupy"), cp.asarray(b), M, 1e-10, 50)
    assert info == 0
    assert _rel(A @ to_numpy(x), b) < 1e-8
    assert _rel(x, np.linalg.solve(A.toarray(), b)) < 1e-6


def test_cupyx_cg_on_a_2d_problem_with_boxes():
    A = poisson_2d(16)
    d = decomposition_from_grid((16, 16), (4, 4), overlap=1)
    b = np.random.default_rng(21).standard_normal(A.shape[0])
    M = TwoLevelSchwarz(A, d, coarse_basis="pou", local_solver="dense", backend="cupy")
    x, info, its = _solve("cg", asarray(A, backend="cupy"), cp.asarray(b), M, 1e-10)
    _, _, its_h = _host_cg(A, b, TwoLevelSchwarz(A, d, coarse_basis="pou"), 1e-10)
    assert info == 0 and abs(its - its_h) <= 1
    assert _rel(A @ to_numpy(x), b) < 1e-9


@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("init", LEARNED_INITS)
def test_learned_preconditioner_matches_numpy(base, init):
    n = 128
    A = ddops.poisson_1d(n)
    d = ddops.Decomposition1D(n, 8, overlap=2)
    ops = {b: learned_schwarz_preconditioner(A, d, base=base, init=init, backend=b)
           for b in ("numpy", "cupy")}
    X = np.random.default_rng(22).standard_normal((A.shape[0], 4))
    np.testing.assert_array_equal(to_numpy(ops["cupy"].theta), ops["numpy"].theta)
    assert _rel(ops["cupy"].matmat(cp.asarray(X)), ops["numpy"].matmat(X)) < 1e-10
    Z = PreconditionerSampler(A).sample(8, np.random.default_rng(23))[1]
    for objective in OBJECTIVES:
        assert _rel(preconditioner_objective(ops["cupy"], A, Z, objective),
                    preconditioner_objective(ops["numpy"], A, Z, objective)) < 1e-10


def test_classical_init_on_the_device():
    n = 128
    A = ddops.poisson_1d(n)
    d = ddops.Decomposition1D(n, 8, overlap=2)
    ops = {b: classical_init(ddops.SchwarzOperator(d, local_rank=4, backend=b), A)
           for b in ("numpy", "cupy")}
    np.testing.assert_array_equal(to_numpy(ops["cupy"].theta), ops["numpy"].theta)


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_train_preconditioner_on_the_device(objective):
    n = 128
    A = ddops.poisson_1d(n)
    d = ddops.Decomposition1D(n, 8, overlap=2)
    ops = {b: learned_schwarz_preconditioner(A, d, local_init_scale=0.1, backend=b)
           for b in ("numpy", "cupy")}
    res = {b: train_preconditioner(op, A, steps=10, check_every=5, batch_size=8,
                                   objective=objective) for b, op in ops.items()}
    assert res["cupy"].status == res["numpy"].status == "finished"
    assert _rel(res["cupy"].history["train"], res["numpy"].history["train"]) < 1e-8
    assert abs(res["cupy"].best.iterations - res["numpy"].best.iterations) <= 1
    b = np.random.default_rng(24).standard_normal(A.shape[0])
    its, ok, _ = cg_iterations(A, ops["cupy"], b)
    its_h, ok_h, _ = cg_iterations(A, ops["numpy"], b)
    assert ok and ok_h and abs(its - its_h) <= 1
    # the trained operator inside cupyx's CG
    x, info, its_d = _solve("cg", asarray(A, backend="cupy"), cp.asarray(b), ops["cupy"], 1e-8)
    assert info == 0 and abs(its_d - its_h) <= 1
    assert _rel(A @ to_numpy(x), b) < 1e-7


@pytest.mark.parametrize("basis", [*GDSW_VARIANTS, "nicolaides"])
def test_algebraic_coarse_spaces_on_the_device(basis):
    A = poisson_2d(16)
    d = decomposition_from_grid((16, 16), (4, 4), overlap=1)
    Phi = nicolaides_basis(d) if basis == "nicolaides" else gdsw_basis(A, d.owner, variant=basis)
    ops = {b: TwoLevelSchwarz(A, d, coarse_basis=Phi, local_solver="dense", backend=b)
           for b in ("numpy", "cupy")}
    X = np.random.default_rng(25).standard_normal((A.shape[0], 3))
    assert _rel(ops["cupy"].matmat(cp.asarray(X)), ops["numpy"].matmat(X)) < 1e-10
    b = X[:, 0].copy()
    x, info, its = _solve("cg", asarray(A, backend="cupy"), cp.asarray(b), ops["cupy"], 1e-10)
    _, _, its_h = _host_cg(A, b, ops["numpy"], 1e-10)
    assert info == 0 and abs(its - its_h) <= 1
    assert _rel(A @ to_numpy(x), b) < 1e-9
    # a learned operator on the same coarse space
    learned = {be: ddops.SchwarzOperator(d, local_rank=2, coarse_basis=Phi, coarse_rank=6, seed=1,
                                         backend=be) for be in ("numpy", "cupy")}
    vn, gn = learned["numpy"].value_and_grad_flat(X, X[::-1].copy(), "wmse")
    vc, gc = learned["cupy"].value_and_grad_flat(cp.asarray(X), cp.asarray(X[::-1]), "wmse")
    assert _rel(vc, vn) < 1e-11 and _rel(gc, gn) < 1e-11
