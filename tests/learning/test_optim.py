"""Tests for ddops.learning.optim: Adam/AdamW and ReduceLROnPlateau against hand-computed
sequences."""

from __future__ import annotations

import io
import math
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddops.learning.optim import Adam, AdamW, ReduceLROnPlateau

# --------------------------------------------------------------------------- helpers


def require_torch():
    """torch, or a skip; with ``DDOPS_REQUIRE_TORCH`` set (as in CI) a missing torch fails."""
    if os.environ.get("DDOPS_REQUIRE_TORCH", "") not in ("", "0"):
        try:
            import torch
        except ImportError as exc:  # pragma: no cover - only where torch is missing
            pytest.fail(f"DDOPS_REQUIRE_TORCH is set but torch cannot be imported: {exc}")
        return torch
    return pytest.importorskip("torch")


def adam_reference(p0, grads, lr, betas, eps, wd, decoupled, with_budget=False):
    """Scalar textbook Adam/AdamW (torch's formulas), elementwise in Python floats.

    With ``with_budget`` also the rounding budget of each entry: torch (and
    ddops) update ``m`` by ``lerp``, which rounds ``g - m`` where the textbook
    form rounds ``b1 m`` and ``(1 - b1) g``; the two agree to a few units of
    ``|m| + |g|``, which the step ``lr m / denom`` amplifies when ``m`` nearly
    cancels.  The budget accumulates ``8 u (|m_prev| + |g|) step / denom`` plus
    ``8 u |p|`` per step (u the unit roundoff).
    """
    b1, b2 = betas
    u = np.finfo(np.float64).eps / 2
    out, budgets = [], []
    for j, p in enumerate(p0):
        m = v = 0.0
        traj, budget, total = [], [], 0.0
        for t, g_all in enumerate(grads, start=1):
            g = float(g_all[j])
            if wd:
                if decoupled:
                    p = p * (1 - lr * wd)
                else:
                    g = g + wd * p
            m_prev = m
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            step_size = lr / (1 - b1**t)
            denom = math.sqrt(v) / math.sqrt(1 - b2**t) + eps
            p = p - step_size * m / denom
            total += 8 * u * ((abs(m_prev) + abs(g)) * step_size / denom + abs(p))
            traj.append(p)
            budget.append(total)
        out.append(traj)
        budgets.append(budget)
    if with_budget:
        return np.array(out).T, np.array(budgets).T  # steps x entries
    return np.array(out).T  # steps x entries


def run(cls, p0, grads, **kw):
    p = np.array(p0, dtype=np.float64)
    opt = cls([p], **kw)
    traj = []
    for g in grads:
        opt.step([np.asarray(g, dtype=np.float64)])
        traj.append(p.copy())
    return np.array(traj), opt


# --------------------------------------------------------------------------- Adam / AdamW


def test_adam_first_two_steps_by_hand():
    # p0 = 1, g1 = 0.5, g2 = -0.25, lr = 0.1, default betas/eps, no weight decay
    p = np.array([1.0])
    opt = Adam([p], lr=0.1)
    opt.step([np.array([0.5])])
    # step 1: m = 0.1 g, v = 0.001 g^2, bias-corrected m/sqrt(v) = g/|g| -> 0.5/(0.5 + 1e-8)
    p1 = 1.0 - 0.1 * 0.5 / (0.5 + 1e-8)
    assert p[0] == pytest.approx(p1, rel=1e-15, abs=0)
    assert opt.exp_avg[0][0] == pytest.approx(0.05, rel=1e-15)
    assert opt.exp_avg_sq[0][0] == pytest.approx(0.001 * 0.25, rel=1e-15)
    opt.step([np.array([-0.25])])
    m2 = 0.9 * 0.05 + 0.1 * -0.25  # 0.02
    v2 = 0.999 * 0.00025 + 0.001 * 0.0625  # 0.00031225
    p2 = p1 - (0.1 / (1 - 0.81)) * m2 / (math.sqrt(v2) / math.sqrt(1 - 0.998001) + 1e-8)
    assert opt.exp_avg[0][0] == pytest.approx(m2, rel=1e-14)
    assert opt.exp_avg_sq[0][0] == pytest.approx(v2, rel=1e-14)
    assert p[0] == pytest.approx(p2, rel=1e-14)
    assert opt.step_count == 2


def test_first_step_moves_by_lr_times_sign():
    p0 = np.array([0.3, -2.0, 5.0, 0.0])
    g = np.array([1e-3, -7.0, 2.5, -0.5])
    traj, _ = run(Adam, p0, [g], lr=0.01, eps=0.0)
    np.testing.assert_allclose(traj[0], p0 - 0.01 * np.sign(g), rtol=0, atol=1e-15)


@pytest.mark.parametrize("cls", [Adam, AdamW])
@pytest.mark.parametrize("wd", [0.0, 0.05])
@pytest.mark.parametrize("betas", [(0.9, 0.999), (0.3, 0.5)])
def test_matches_scalar_reference(cls, wd, betas):
    rng = np.random.default_rng(3)
    p0 = rng.standard_normal(6)
    grads = rng.standard_normal((8, 6)) * np.array([1e-4, 1e-2, 1, 10, 1, 3])
    traj, _ = run(cls, p0, grads, lr=0.03, betas=betas, eps=1e-8, weight_decay=wd)
    ref = adam_reference(p0, grads, 0.03, betas, 1e-8, wd, decoupled=cls is AdamW)
    np.testing.assert_allclose(traj, ref, rtol=1e-13, atol=1e-15)


def test_weight_decay_semantics_differ():
    p0 = np.array([2.0, -4.0])
    zero = np.zeros(2)
    # AdamW with zero gradient: moments stay 0, only the decoupled decay acts
    traj_w, _ = run(AdamW, p0, [zero, zero], lr=0.1, weight_decay=0.5)
    np.testing.assert_allclose(traj_w[0], p0 * 0.95, rtol=1e-15)
    np.testing.assert_allclose(traj_w[1], p0 * 0.95 * 0.95, rtol=1e-15)
    # Adam (L2): the penalty wd * p is the gradient, normalised -> a step of lr * sign(p)
    traj_a, opt = run(Adam, p0, [zero], lr=0.1, weight_decay=0.5)
    np.testing.assert_allclose(traj_a[0], p0 - 0.1 * np.sign(p0), rtol=0, atol=1e-8)
    np.testing.assert_allclose(opt.exp_avg[0], 0.1 * 0.5 * p0, rtol=1e-15)
    # AdamW's moments never see the decay
    _, optw = run(AdamW, p0, [np.ones(2)], lr=0.1, weight_decay=0.5)
    np.testing.assert_allclose(optw.exp_avg[0], 0.1 * np.ones(2), rtol=1e-15)


def test_defaults_match_torch():
    p = np.zeros(3)
    a, w = Adam([p]), AdamW([p])
    assert (a.lr, a.betas, a.eps, a.weight_decay) == (1e-3, (0.9, 0.999), 1e-8, 0.0)
    assert (w.lr, w.betas, w.eps, w.weight_decay) == (1e-3, (0.9, 0.999), 1e-8, 1e-2)


def test_grads_not_modified_and_params_in_place():
    p = np.array([1.0, 2.0])
    ref = p
    g = np.array([0.1, -0.2])
    g_copy = g.copy()
    opt = Adam([p], lr=0.1, weight_decay=0.3)
    opt.step([g])
    assert ref is p and opt.params[0] is p
    np.testing.assert_array_equal(g, g_copy)
    assert not np.array_equal(p, [1.0, 2.0])


def test_several_params_and_dtypes():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 4))
    b = rng.standard_normal(5).astype(np.float32)
    a0, b0 = a.copy(), b.copy()
    opt = AdamW([a, b], lr=0.01, weight_decay=0.1)
    ga, gb = rng.standard_normal((3, 4)), rng.standard_normal(5).astype(np.float32)
    opt.step([ga, gb])
    ref_a = adam_reference(a0.ravel(), [ga.ravel()], 0.01, (0.9, 0.999), 1e-8, 0.1, True)
    np.testing.assert_allclose(a.ravel(), ref_a[0], rtol=1e-14)
    assert b.dtype == np.float32 and opt.exp_avg[1].dtype == np.float32
    ref_b = adam_reference(
        b0.astype(float), [gb.astype(float)], 0.01, (0.9, 0.999), 1e-8, 0.1, True
    )
    np.testing.assert_allclose(b, ref_b[0], rtol=1e-6)


def test_single_array_accepted():
    p = np.ones(4)
    opt = Adam(p, lr=0.5)
    opt.step(np.ones(4))
    np.testing.assert_allclose(p, 0.5, atol=1e-7)


def test_chunked_update_identical(monkeypatch):
    rng = np.random.default_rng(1)
    p0 = rng.standard_normal(1000)
    grads = rng.standard_normal((5, 1000))
    results = []
    for chunk in (10**9, 64, 7):
        monkeypatch.setattr(Adam, "chunk_size", chunk)
        p = p0.copy()
        opt = Adam([p], lr=0.01, weight_decay=0.2)
        assert (opt._chunks[0] is None) == (chunk > 1000)
        for g in grads:
            opt.step([g])
        results.append((p, opt.exp_avg[0], opt.exp_avg_sq[0]))
    for other in results[1:]:
        for x, y in zip(results[0], other):
            np.testing.assert_array_equal(x, y)


def test_lr_is_mutable_and_validated():
    p = np.array([0.0])
    opt = Adam([p], lr=0.1)
    opt.lr = 0.0
    opt.step([np.array([1.0])])
    assert p[0] == 0.0  # lr 0: moments move, parameter does not
    opt.lr = 0.2
    assert opt.lr == 0.2
    with pytest.raises(ValueError, match="lr"):
        opt.lr = -1.0
    with pytest.raises(ValueError, match="lr"):
        opt.lr = float("nan")


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"lr": -1e-3}, "lr"),
        ({"lr": float("inf")}, "lr"),
        ({"betas": (1.0, 0.999)}, r"betas\[0\]"),
        ({"betas": (-0.1, 0.999)}, r"betas\[0\]"),
        ({"betas": (0.9, 1.0)}, r"betas\[1\]"),
        ({"betas": (0.9,)}, "betas"),
        ({"eps": -1e-8}, "eps"),
        ({"weight_decay": -0.1}, "weight_decay"),
        ({"weight_decay": float("nan")}, "weight_decay"),
    ],
)
@pytest.mark.parametrize("cls", [Adam, AdamW])
def test_invalid_hyperparameters(cls, kwargs, name):
    with pytest.raises(ValueError, match=name):
        cls([np.zeros(2)], **kwargs)


def test_invalid_params():
    with pytest.raises(ValueError, match="params"):
        Adam([])
    with pytest.raises(TypeError, match="params"):
        Adam([np.zeros(3, dtype=np.int64)])
    with pytest.raises(TypeError, match="params"):
        Adam([[1.0, 2.0]])
    with pytest.raises(TypeError, match="lr"):
        Adam([np.zeros(2)], lr="0.1")


def test_invalid_grads():
    opt = Adam([np.zeros(3), np.zeros((2, 2))])
    with pytest.raises(ValueError, match="expected 2 gradients"):
        opt.step([np.zeros(3)])
    with pytest.raises(ValueError, match=r"grads\[1\]"):
        opt.step([np.zeros(3), np.zeros(4)])
    with pytest.raises(ValueError, match=r"grads\[0\]"):
        opt.step([np.zeros((3, 1)), np.zeros((2, 2))])
    assert opt.step_count == 0  # a rejected call changes nothing


@pytest.mark.parametrize("cls", [Adam, AdamW])
def test_state_roundtrip_through_npz(cls, tmp_path):
    rng = np.random.default_rng(7)
    grads = rng.standard_normal((10, 2, 5))
    p = rng.standard_normal(5)
    q = rng.standard_normal(5).astype(np.float32)
    opt = cls([p, q], lr=0.02, betas=(0.8, 0.99), eps=1e-7, weight_decay=0.01)
    for g in grads[:4]:
        opt.step([g[0], g[1].astype(np.float32)])
    state = opt.state_dict()
    assert state["step"] == 4 and state["num_params"] == 2
    assert all(isinstance(v, (np.ndarray, int, float, str, bool)) for v in state.values())
    np.savez(tmp_path / "opt.npz", **state)
    # continue the original
    p_saved, q_saved = p.copy(), q.copy()
    for g in grads[4:]:
        opt.step([g[0], g[1].astype(np.float32)])
    # restore into a fresh optimiser with different hyper-parameters
    p2, q2 = p_saved.copy(), q_saved.copy()
    opt2 = cls([p2, q2], lr=1.0, betas=(0.5, 0.5), eps=0.0, weight_decay=0.0)
    with np.load(tmp_path / "opt.npz") as data:
        opt2.load_state_dict(data)
    assert (opt2.lr, opt2.betas, opt2.eps, opt2.weight_decay) == (0.02, (0.8, 0.99), 1e-7, 0.01)
    assert opt2.step_count == 4
    for g in grads[4:]:
        opt2.step([g[0], g[1].astype(np.float32)])
    np.testing.assert_array_equal(p2, p)
    np.testing.assert_array_equal(q2, q)
    np.testing.assert_array_equal(opt2.exp_avg_sq[1], opt.exp_avg_sq[1])
    assert opt2.step_count == opt.step_count == 10


def test_state_dict_is_a_snapshot():
    p = np.zeros(2)
    opt = Adam([p])
    opt.step([np.ones(2)])
    state = opt.state_dict()
    m = state["exp_avg_0"].copy()
    opt.step([np.ones(2)])
    np.testing.assert_array_equal(state["exp_avg_0"], m)


def test_load_state_dict_validation():
    opt = Adam([np.zeros(3)])
    opt.step([np.ones(3)])
    good = opt.state_dict()
    bad_shape = dict(good, exp_avg_0=np.zeros(4))
    with pytest.raises(ValueError, match="exp_avg_0"):
        Adam([np.zeros(3)]).load_state_dict(bad_shape)
    with pytest.raises(ValueError, match="parameters"):
        Adam([np.zeros(3), np.zeros(1)]).load_state_dict(good)
    with pytest.raises(ValueError, match="AdamW"):
        AdamW([np.zeros(3)]).load_state_dict(good)
    missing = {k: v for k, v in good.items() if k != "exp_avg_sq_0"}
    with pytest.raises(ValueError, match="exp_avg_sq_0"):
        Adam([np.zeros(3)]).load_state_dict(missing)
    with pytest.raises(ValueError, match="lr"):
        Adam([np.zeros(3)]).load_state_dict(dict(good, lr=-1.0))
    # nothing was changed by a failed load
    target = Adam([np.zeros(3)], lr=0.5)
    with pytest.raises(ValueError):
        target.load_state_dict(bad_shape)
    assert target.lr == 0.5 and target.step_count == 0
    np.testing.assert_array_equal(target.exp_avg[0], 0.0)


@settings(max_examples=40, deadline=None)
@given(
    p0=st.lists(st.floats(-10, 10), min_size=1, max_size=5),
    seed=st.integers(0, 2**32 - 1),
    lr=st.floats(0, 1),
    b1=st.floats(0, 0.99),
    b2=st.floats(0, 0.9999),
    wd=st.floats(0, 1),
    decoupled=st.booleans(),
)
def test_property_matches_reference(p0, seed, lr, b1, b2, wd, decoupled):
    rng = np.random.default_rng(seed)
    grads = rng.standard_normal((3, len(p0))) * 10.0 ** rng.integers(-3, 3, size=(3, 1))
    cls = AdamW if decoupled else Adam
    traj, _ = run(cls, p0, grads, lr=lr, betas=(b1, b2), eps=1e-8, weight_decay=wd)
    ref, budget = adam_reference(list(p0), grads, lr, (b1, b2), 1e-8, wd, decoupled,
                                 with_budget=True)
    # relative to the typical size of the update, lr, plus the rounding budget of lerp
    np.testing.assert_array_less(np.abs(traj - ref), 1e-12 * (1 + lr) + 1e-12 * np.abs(ref)
                                 + budget)


@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-12), (np.float32, 1e-5)])
@pytest.mark.parametrize("name", ["Adam", "AdamW"])
def test_against_torch_many_steps(name, dtype, rtol):
    torch = require_torch()
    cls = {"Adam": Adam, "AdamW": AdamW}[name]
    tcls = getattr(torch.optim, name)
    rng = np.random.default_rng(11)
    for betas in [(0.9, 0.999), (0.3, 0.8)]:  # 1 - beta1 >= 0.5 takes torch.lerp's other branch
        p0 = rng.standard_normal(257).astype(dtype)
        p = p0.copy()
        tp = torch.tensor(p0.copy(), requires_grad=True)
        opt = cls([p], lr=1e-2, betas=betas, weight_decay=0.1)
        topt = tcls([tp], lr=1e-2, betas=betas, weight_decay=0.1, foreach=False)
        sched = ReduceLROnPlateau(opt, factor=0.5, patience=5)
        tsched = torch.optim.lr_scheduler.ReduceLROnPlateau(topt, factor=0.5, patience=5)
        for k in range(200):
            g = ((p - 0.5) * (1 + k % 3) + 0.1 * rng.standard_normal(p.shape)).astype(dtype)
            tp.grad = torch.tensor(g.copy())
            topt.step()
            opt.step([g])
            metric = float(np.mean(g.astype(np.float64) ** 2))
            sched.step(metric)
            tsched.step(metric)
            assert opt.lr == topt.param_groups[0]["lr"]
        ref = tp.detach().numpy()
        assert np.max(np.abs(p - ref)) <= rtol * np.max(np.abs(ref))
        assert topt.state[tp]["step"].item() == opt.step_count


# --------------------------------------------------------------------------- ReduceLROnPlateau


class _Opt:
    """A minimal optimiser: anything with a mutable ``lr``."""

    def __init__(self, lr):
        self.lr = lr


def lr_sequence(metrics, lr=1.0, **kw):
    opt = _Opt(lr)
    sched = ReduceLROnPlateau(opt, **kw)
    out = []
    for m in metrics:
        sched.step(m)
        out.append(opt.lr)
        assert sched.last_lr == opt.lr
    return out, sched


def test_plateau_patience_counting():
    # best is set by the first value; the (patience + 1)-th bad step reduces
    lrs, sched = lr_sequence([1.0] * 8, factor=0.5, patience=2)
    assert lrs == [1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.25, 0.25]
    assert sched.num_bad_epochs == 1 and sched.best == 1.0 and sched.last_epoch == 8


def test_plateau_improvement_resets_counter():
    lrs, sched = lr_sequence([5, 5, 5, 4, 4, 4, 4], factor=0.1, patience=2)
    assert lrs == [1.0] * 6 + [pytest.approx(0.1)]
    assert sched.best == 4


def test_plateau_patience_zero_and_cooldown():
    lrs, _ = lr_sequence([1.0] * 6, factor=0.5, patience=0, cooldown=1)
    # step 2 reduces; step 3 is in cooldown (bad steps ignored); step 4 reduces again
    assert lrs == [1.0, 0.5, 0.5, 0.25, 0.25, 0.125]
    lrs, sched = lr_sequence([1.0] * 8, factor=0.5, patience=1, cooldown=2)
    # reduce at 3; cooldown 4, 5; bad counts restart at 6, 7 -> reduce at 7
    assert lrs == [1.0, 1.0, 0.5, 0.5, 0.5, 0.5, 0.25, 0.25]
    assert sched.cooldown_counter == 1 and sched.in_cooldown


def test_plateau_min_lr_and_eps_guard():
    lrs, _ = lr_sequence([1.0] * 6, lr=1.0, factor=0.1, patience=0, min_lr=0.05)
    assert lrs == [1.0, pytest.approx(0.1), 0.05, 0.05, 0.05, 0.05]
    # a reduction of at most eps is skipped: 1e-8 -> 5e-9 changes by 5e-9 < eps
    lrs, _ = lr_sequence([1.0] * 3, lr=1e-8, factor=0.5, patience=0, eps=1e-8)
    assert lrs == [1e-8, 1e-8, 1e-8]
    lrs, _ = lr_sequence([1.0] * 3, lr=1e-8, factor=0.5, patience=0, eps=0.0)
    assert lrs == [1e-8, 5e-9, 2.5e-9]
    # the guard is strict: a reduction of exactly eps (2e-8 -> 1e-8, exact in binary) is skipped
    lrs, _ = lr_sequence([1.0] * 2, lr=2e-8, factor=0.5, patience=0, eps=1e-8)
    assert lrs == [2e-8, 2e-8]


def test_plateau_threshold_rel_and_abs():
    # min/rel: 0.95 is not below 1 * (1 - 0.1) -> bad step
    lrs, sched = lr_sequence([1.0, 0.95], factor=0.5, patience=0, threshold=0.1)
    assert lrs == [1.0, 0.5] and sched.best == 1.0
    # min/abs: 0.95 < 1 - 0.01 -> improvement
    lrs, sched = lr_sequence(
        [1.0, 0.95], factor=0.5, patience=0, threshold=0.01, threshold_mode="abs"
    )
    assert lrs == [1.0, 1.0] and sched.best == 0.95
    # min/abs: 0.995 is not below 0.99
    lrs, _ = lr_sequence([1.0, 0.995], factor=0.5, patience=0, threshold=0.01, threshold_mode="abs")
    assert lrs == [1.0, 0.5]


def test_plateau_mode_max():
    # max/rel: improvement needs a > best * 1.1
    lrs, sched = lr_sequence(
        [1.0, 1.05, 1.2, 1.25], mode="max", factor=0.5, patience=0, threshold=0.1
    )
    assert lrs == [1.0, 0.5, 0.5, 0.25] and sched.best == 1.2
    lrs, sched = lr_sequence([10.0, 10.5, 11.5], mode="max", factor=0.5, patience=0, threshold=0.1)
    assert lrs == [1.0, 0.5, 0.5] and sched.best == 11.5
    # max/abs: a > best + 0.01
    lrs, sched = lr_sequence(
        [-3.0, -2.0, -1.995],
        mode="max",
        factor=0.5,
        patience=0,
        threshold=0.01,
        threshold_mode="abs",
    )
    assert lrs == [1.0, 1.0, 0.5] and sched.best == -2.0
    assert ReduceLROnPlateau(_Opt(1.0), mode="max").best == -math.inf
    assert ReduceLROnPlateau(_Opt(1.0)).best == math.inf


def test_plateau_nan_is_bad_and_numpy_metric():
    lrs, _ = lr_sequence([np.float64(1.0), float("nan"), np.array(2.0)], factor=0.5, patience=1)
    assert lrs == [1.0, 1.0, 0.5]


def test_plateau_state_roundtrip(tmp_path):
    metrics = [3, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 0.5]
    full, _ = lr_sequence(metrics, factor=0.5, patience=1, cooldown=1, threshold=0.01)
    opt = _Opt(1.0)
    sched = ReduceLROnPlateau(opt, factor=0.5, patience=1, cooldown=1, threshold=0.01)
    for m in metrics[:5]:
        sched.step(m)
    np.savez(tmp_path / "s.npz", **sched.state_dict())
    opt2 = _Opt(opt.lr)
    sched2 = ReduceLROnPlateau(opt2, mode="max", factor=0.9, patience=100)
    with np.load(tmp_path / "s.npz") as data:
        sched2.load_state_dict(data)
    assert sched2.mode == "min" and sched2.patience == 1 and sched2.factor == 0.5
    rest = []
    for m in metrics[5:]:
        sched2.step(m)
        rest.append(opt2.lr)
    assert rest == full[5:]
    assert sched2.state_dict()["last_epoch"] == len(metrics)


def test_plateau_with_adamw():
    p = np.zeros(2)
    opt = AdamW([p], lr=1e-3, weight_decay=0.0)
    sched = ReduceLROnPlateau(opt, factor=0.5, patience=200)
    for _ in range(202):
        sched.step(1.0)
    assert opt.lr == 5e-4 and sched.last_lr == 5e-4


@pytest.mark.parametrize(
    "kwargs, exc, name",
    [
        ({"factor": 1.0}, ValueError, "factor"),
        ({"factor": -0.5}, ValueError, "factor"),
        ({"patience": -1}, ValueError, "patience"),
        ({"patience": 1.5}, TypeError, "patience"),
        ({"cooldown": -1}, ValueError, "cooldown"),
        ({"threshold": -1e-4}, ValueError, "threshold"),
        ({"min_lr": -1.0}, ValueError, "min_lr"),
        ({"eps": float("nan")}, ValueError, "eps"),
        ({"mode": "minimum"}, ValueError, "mode"),
        ({"threshold_mode": "relative"}, ValueError, "threshold_mode"),
    ],
)
def test_plateau_invalid_arguments(kwargs, exc, name):
    with pytest.raises(exc, match=name):
        ReduceLROnPlateau(_Opt(1.0), **kwargs)


def test_plateau_requires_optimizer_with_lr():
    with pytest.raises(TypeError, match="optimizer"):
        ReduceLROnPlateau(object())


def test_plateau_against_torch_random_sequences():
    torch = require_torch()
    rng = np.random.default_rng(5)
    for mode in ("min", "max"):
        for threshold_mode, threshold in (("rel", 0.05), ("abs", 0.02)):
            kw = dict(
                mode=mode,
                factor=0.5,
                patience=2,
                threshold=threshold,
                threshold_mode=threshold_mode,
                cooldown=1,
                min_lr=1e-3,
                eps=1e-8,
            )
            opt = _Opt(0.1)
            sched = ReduceLROnPlateau(opt, **kw)
            tp = torch.zeros(1, requires_grad=True)
            topt = torch.optim.SGD([tp], lr=0.1)
            tsched = torch.optim.lr_scheduler.ReduceLROnPlateau(topt, **kw)
            x = 1.0
            for _ in range(300):
                x += rng.choice([-0.1, -0.01, 0.0, 0.01, 0.1])
                sched.step(x)
                tsched.step(x)
                assert opt.lr == topt.param_groups[0]["lr"]
                assert sched.num_bad_epochs == tsched.num_bad_epochs
                assert sched.cooldown_counter == tsched.cooldown_counter
                assert sched.best == tsched.best


# --------------------------------------------------------------------------- save / restore
# A run saved after step k and restored into fresh objects must continue exactly like the
# uninterrupted run, for every k: the metric sequence below drives ReduceLROnPlateau through
# all of its states (patience counting, a reduction, cooldown, an improvement during patience
# and during cooldown, the floor min_lr where reductions stop), and the scheduler's learning
# rate drives Adam, so a state entry that is lost or mangled changes the rest of the run.

PLATEAU = dict(factor=0.5, patience=2, cooldown=2, min_lr=0.1, threshold=0.01)
PLATEAU_METRICS = (
    [1.0, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.8, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7, 0.6]
    + [0.6] * 6 + [0.5] + [0.5] * 9 + [0.4] + [0.4] * 6
)
#: fresh objects get other settings, so that everything must come from the saved state
OTHER_PLATEAU = dict(mode="max", factor=0.9, patience=7, cooldown=0, min_lr=0.0, threshold=0.3)
OTHER_ADAM = dict(lr=0.7, betas=(0.5, 0.6), eps=1e-3, weight_decay=0.4)


def npz_roundtrip(state):
    """The state as it comes back from ``np.savez`` / ``np.load`` (0-d arrays, numpy str)."""
    buf = io.BytesIO()
    np.savez(buf, **state)
    buf.seek(0)
    with np.load(buf) as data:
        return {key: data[key] for key in data.files}


def plateau_metrics(mode):
    """PLATEAU_METRICS for ``mode="min"``; mirrored (``2 - m``, still positive) for max."""
    return list(PLATEAU_METRICS) if mode == "min" else [2.0 - m for m in PLATEAU_METRICS]


def scheduler_state_class(sched, lr_before, lr_after):
    """Which state of the plateau state machine the scheduler is in after a step."""
    classes = set()
    if sched.last_epoch == 0:
        classes.add("fresh")
    if lr_after < lr_before:
        classes.add("right after a reduction")
    elif sched.cooldown_counter > 0:
        classes.add("mid-cooldown")
    if sched.num_bad_epochs > 0:
        classes.add("mid-patience")
    if lr_after == sched.min_lr:
        classes.add("at min_lr")
    return classes


def scheduler_snapshot(sched, opt):
    return (opt.lr, sched.last_lr, sched.best, sched.num_bad_epochs, sched.cooldown_counter,
            sched.last_epoch)


@pytest.mark.parametrize("mode", ["min", "max"])
def test_plateau_restored_at_every_step_continues_identically(mode):
    metrics = plateau_metrics(mode)

    def fresh():
        opt = _Opt(1.0)
        return opt, ReduceLROnPlateau(opt, mode=mode, **PLATEAU)

    opt, sched = fresh()
    reference, states = [scheduler_snapshot(sched, opt)], [npz_roundtrip(sched.state_dict())]
    visited = [scheduler_state_class(sched, 1.0, 1.0)]
    for m in metrics:
        before = opt.lr
        sched.step(m)
        reference.append(scheduler_snapshot(sched, opt))
        states.append(npz_roundtrip(sched.state_dict()))
        visited.append(scheduler_state_class(sched, before, opt.lr))
    # the sequence really visits every state, and ends at the floor
    assert set().union(*visited) == {"fresh", "right after a reduction", "mid-cooldown",
                                     "mid-patience", "at min_lr"}
    assert opt.lr == PLATEAU["min_lr"]
    for k in range(len(metrics) + 1):
        # a fresh scheduler with other settings, whose optimiser got the saved learning rate
        opt2 = _Opt(reference[k][0])
        sched2 = ReduceLROnPlateau(opt2, **OTHER_PLATEAU)
        sched2.load_state_dict(states[k])
        assert scheduler_snapshot(sched2, opt2) == reference[k], f"restored after step {k}"
        for j, m in enumerate(metrics[k:], start=k + 1):
            sched2.step(m)
            assert scheduler_snapshot(sched2, opt2) == reference[j], (
                f"saved after step {k}, differs at step {j} ({sorted(visited[k])})")


@pytest.mark.parametrize("mode", ["min", "max"])
def test_plateau_restored_into_a_used_scheduler(mode):
    """Loading overwrites every counter of a scheduler that has already run."""
    metrics = plateau_metrics(mode)
    opt = _Opt(1.0)
    sched = ReduceLROnPlateau(opt, mode=mode, **PLATEAU)
    for m in metrics[:14]:
        sched.step(m)
    assert sched.cooldown_counter > 0  # saved mid-cooldown
    state = npz_roundtrip(sched.state_dict())
    tail = []
    for m in metrics[14:]:
        sched.step(m)
        tail.append(scheduler_snapshot(sched, opt))
    opt2 = _Opt(0.3)
    used = ReduceLROnPlateau(opt2, mode="max" if mode == "min" else "min", factor=0.2,
                             patience=0, cooldown=5)
    for m in (5.0, 1.0, 7.0, 7.0, 7.0):  # best, counters and last_epoch all away from zero
        used.step(m)
    assert used.cooldown_counter > 0 and used.last_epoch == 5
    opt2.lr = state["last_lr"].item()
    used.load_state_dict(state)
    for m, expected in zip(metrics[14:], tail, strict=True):
        used.step(m)
        assert scheduler_snapshot(used, opt2) == expected


def adam_plateau_run(cls, dtype, metrics, steps, *, start=None, record=True):
    """Adam/AdamW driven by ReduceLROnPlateau on gradients that depend on the parameters.

    ``start=(params, opt_state, sched_state)`` continues a saved run in fresh objects built
    with other settings.  Returns the parameter trajectory (after each step), the learning
    rates, and (if ``record``) the states after every step, through an npz round trip.
    """
    rng = np.random.default_rng(21)
    noise = rng.standard_normal((steps, 2, 40)).astype(dtype)
    target = np.linspace(-1, 1, 40).astype(dtype)
    if start is None:
        k = 0
        p = [np.linspace(2, -2, 40).astype(dtype), np.linspace(0.5, 1.5, 40).astype(dtype)]
        opt = cls(p, lr=1.0, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.05)
        sched = ReduceLROnPlateau(opt, **PLATEAU)
    else:
        (p0, q0), opt_state, sched_state = start
        k = int(opt_state["step"])
        p = [p0.copy(), q0.copy()]
        opt = cls(p, **OTHER_ADAM)
        sched = ReduceLROnPlateau(opt, **OTHER_PLATEAU)
        opt.load_state_dict(opt_state)
        sched.load_state_dict(sched_state)
    trajectory, lrs, states = [], [], []
    for t in range(k, steps):
        g = [((p[0] - target) * (1 + t % 3) + 0.1 * noise[t, 0]).astype(dtype),
             (p[1] * p[0] + 0.1 * noise[t, 1]).astype(dtype)]
        opt.step(g)
        sched.step(metrics[t])
        trajectory.append([a.copy() for a in p])
        lrs.append(opt.lr)
        if record:
            states.append(([a.copy() for a in p], npz_roundtrip(opt.state_dict()),
                           npz_roundtrip(sched.state_dict())))
    return trajectory, lrs, states, (opt, sched)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("cls", [Adam, AdamW])
def test_adam_with_plateau_restored_at_every_step_continues_identically(cls, dtype, monkeypatch):
    # a chunk smaller than the 40-entry parameters also puts the blocked update path under test
    monkeypatch.setattr(Adam, "chunk_size", 16)
    metrics, steps = PLATEAU_METRICS, len(PLATEAU_METRICS)
    trajectory, lrs, states, (opt, _) = adam_plateau_run(cls, dtype, metrics, steps)
    assert opt._chunks == [16, 16]
    assert lrs[-1] == PLATEAU["min_lr"] and len(set(lrs)) == 5  # four reductions, then the floor
    # the state before the first step: a run restored from it is the whole run
    initial = adam_plateau_run(cls, dtype, metrics, 0)
    assert initial[0] == []
    _, _, _, (opt0, sched0) = initial
    p_init = [np.linspace(2, -2, 40).astype(dtype), np.linspace(0.5, 1.5, 40).astype(dtype)]
    saved = [(p_init, npz_roundtrip(opt0.state_dict()), npz_roundtrip(sched0.state_dict()))]
    saved += states
    for k in range(steps):  # saved after step k (0: before any step, 1: after the first, ...)
        rest, rest_lrs, _, (opt2, _) = adam_plateau_run(cls, dtype, metrics, steps,
                                                        start=saved[k], record=False)
        assert rest_lrs == lrs[k:], f"saved after step {k}"
        for j, (got, want) in enumerate(zip(rest, trajectory[k:], strict=True)):
            for a, b in zip(got, want, strict=True):
                np.testing.assert_array_equal(a, b, err_msg=f"saved after {k}, step {k + j + 1}")
        assert opt2.step_count == steps
        np.testing.assert_array_equal(opt2.exp_avg_sq[1], opt.exp_avg_sq[1])


@pytest.mark.parametrize("cls", [Adam, AdamW])
def test_adam_restored_into_a_used_optimiser(cls):
    """Loading replaces moments and step count of an optimiser that has already stepped."""
    rng = np.random.default_rng(2)
    grads = rng.standard_normal((6, 5))
    for k in (0, 1, 3):
        p = np.linspace(-1, 1, 5)
        opt = cls([p], lr=0.05, weight_decay=0.1)
        for g in grads[:k]:
            opt.step([g])
        state, p_saved = npz_roundtrip(opt.state_dict()), p.copy()
        for g in grads[k:]:
            opt.step([g])
        q = p_saved.copy()
        used = cls([q], **OTHER_ADAM)
        for g in grads[:4]:
            used.step([10 * g])
        q[...] = p_saved
        used.load_state_dict(state)
        assert used.step_count == k
        for g in grads[k:]:
            used.step([g])
        np.testing.assert_array_equal(q, p, err_msg=f"saved after step {k}")
        np.testing.assert_array_equal(used.exp_avg[0], opt.exp_avg[0])


@pytest.mark.parametrize("name", ["Adam", "AdamW"])
def test_restored_run_agrees_with_torch(name):
    """Saved after step k and restored, the run still follows torch.optim's uninterrupted one."""
    torch = require_torch()
    cls, tcls = {"Adam": Adam, "AdamW": AdamW}[name], getattr(torch.optim, name)
    metrics, steps = PLATEAU_METRICS, len(PLATEAU_METRICS)
    trajectory, lrs, states, _ = adam_plateau_run(cls, np.float64, metrics, steps)
    # torch, uninterrupted, on the same parameter-dependent gradients
    rng = np.random.default_rng(21)
    noise = rng.standard_normal((steps, 2, 40))
    target = np.linspace(-1, 1, 40)
    tp = [torch.tensor(np.linspace(2, -2, 40), requires_grad=True),
          torch.tensor(np.linspace(0.5, 1.5, 40), requires_grad=True)]
    topt = tcls(tp, lr=1.0, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.05, foreach=False)
    tsched = torch.optim.lr_scheduler.ReduceLROnPlateau(topt, **PLATEAU)
    t_traj, t_lrs, t_counters = [], [], []
    for t in range(steps):
        p0, p1 = (a.detach().numpy() for a in tp)
        tp[0].grad = torch.tensor((p0 - target) * (1 + t % 3) + 0.1 * noise[t, 0])
        tp[1].grad = torch.tensor(p1 * p0 + 0.1 * noise[t, 1])
        topt.step()
        tsched.step(metrics[t])
        t_traj.append([a.detach().numpy().copy() for a in tp])
        t_lrs.append(topt.param_groups[0]["lr"])
        t_counters.append((tsched.num_bad_epochs, tsched.cooldown_counter, tsched.best))
    assert lrs == t_lrs
    for k in (1, 4, 5, 6, 9, 20, 30):
        rest, rest_lrs, rest_states, _ = adam_plateau_run(cls, np.float64, metrics, steps,
                                                          start=states[k - 1])
        assert rest_lrs == t_lrs[k:]
        for got, want in zip(rest, t_traj[k:], strict=True):
            for a, b in zip(got, want, strict=True):
                assert np.max(np.abs(a - b)) <= 1e-12 * np.max(np.abs(b))
        for (_, _, s), counters in zip(rest_states, t_counters[k:], strict=True):
            assert (int(s["num_bad_epochs"]), int(s["cooldown_counter"]),
                    float(s["best"])) == counters
