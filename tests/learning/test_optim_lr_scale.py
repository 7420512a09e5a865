"""Per-entry learning-rate multipliers of Adam/AdamW (``lr_scale``)."""

import io

import numpy as np
import pytest

from ddops.learning.optim import Adam, AdamW

from .test_optim import adam_reference, require_torch


@pytest.mark.parametrize("cls", [Adam, AdamW])
@pytest.mark.parametrize("eps", [1e-8, 0.0, 1e-3])
def test_first_step_is_minus_lr_scale_sign(cls, eps):
    """From a fresh state: exactly -lr s g / (|g| + eps) per entry (weight decay 0)."""
    rng = np.random.default_rng(3)
    p0 = np.zeros(40000)  # larger than one chunk of the blocked update; p - p0 is exact
    g = rng.standard_normal(p0.size) * np.logspace(-6, 3, p0.size)
    s = rng.uniform(1e-5, 1.0, p0.size)
    p = p0.copy()
    cls([p], lr=0.3, eps=eps, weight_decay=0.0, lr_scale=s).step([g])
    np.testing.assert_allclose(p - p0, -0.3 * s * g / (np.abs(g) + eps), rtol=1e-12)


@pytest.mark.parametrize("decoupled", [False, True])
def test_many_steps_equal_a_per_entry_learning_rate(decoupled):
    """Entry j follows textbook Adam with the rate lr * s_j (decay included for AdamW)."""
    rng = np.random.default_rng(7)
    p0 = rng.standard_normal(12)
    s = rng.uniform(0.01, 2.0, p0.size)
    grads = [rng.standard_normal(p0.size) for _ in range(30)]
    cls = AdamW if decoupled else Adam
    p = p0.copy()
    opt = cls([p], lr=1e-2, weight_decay=0.1, lr_scale=s)
    for g in grads:
        opt.step([g])
    for j in range(p0.size):
        ref = adam_reference([p0[j]], [g[j:j + 1] for g in grads], 1e-2 * s[j], (0.9, 0.999),
                             1e-8, 0.1, decoupled)
        assert p[j] == pytest.approx(ref[-1, 0], rel=1e-10, abs=1e-13)


@pytest.mark.parametrize("name", ["Adam", "AdamW"])
def test_against_torch_parameter_groups(name):
    """Two multiplier values = torch with two parameter groups at lr * s."""
    torch = require_torch()
    cls, tcls = {"Adam": Adam, "AdamW": AdamW}[name], getattr(torch.optim, name)
    rng = np.random.default_rng(5)
    a0, b0 = rng.standard_normal(30), rng.standard_normal(50)
    flat = np.concatenate([a0, b0])
    scale = np.concatenate([np.full(30, 0.25), np.full(50, 3e-3)])
    opt = cls([flat], lr=1e-2, weight_decay=0.1, lr_scale=scale)
    ta = torch.tensor(a0.copy(), requires_grad=True)
    tb = torch.tensor(b0.copy(), requires_grad=True)
    topt = tcls([{"params": [ta], "lr": 1e-2 * 0.25}, {"params": [tb], "lr": 1e-2 * 3e-3}],
                weight_decay=0.1, foreach=False)
    for k in range(100):
        g = (flat - 0.3) * (1 + k % 4) + 0.1 * rng.standard_normal(flat.size)
        ta.grad, tb.grad = torch.tensor(g[:30].copy()), torch.tensor(g[30:].copy())
        topt.step()
        opt.step([g])
    ref = np.concatenate([ta.detach().numpy(), tb.detach().numpy()])
    np.testing.assert_allclose(flat, ref, rtol=1e-11, atol=1e-13)


def test_none_is_the_plain_update():
    rng = np.random.default_rng(1)
    p0 = rng.standard_normal(100)
    grads = [rng.standard_normal(100) for _ in range(5)]
    plain, ones, unscaled = p0.copy(), p0.copy(), p0.copy()
    a, b = AdamW([plain], lr=1e-2), AdamW([ones], lr=1e-2, lr_scale=np.ones(100))
    c = AdamW([unscaled], lr=1e-2, lr_scale=np.full(100, 2.0))
    c.set_lr_scale(None)
    for g in grads:
        a.step([g])
        b.step([g])
        c.step([g])
    np.testing.assert_array_equal(plain, unscaled)
    np.testing.assert_allclose(plain, ones, rtol=1e-15)
    assert a.state_dict()["lr_scaled"] is False


def test_state_round_trip_and_continuation():
    rng = np.random.default_rng(2)
    p0 = rng.standard_normal(64)
    s = rng.uniform(0.1, 1.0, 64)
    grads = [rng.standard_normal(64) for _ in range(12)]
    p = p0.copy()
    opt = AdamW([p], lr=1e-2, lr_scale=s)
    for g in grads[:6]:
        opt.step([g])
    buf = io.BytesIO()
    np.savez(buf, **opt.state_dict())
    buf.seek(0)
    q = p.copy()
    other = AdamW([q], lr=1e-2)  # no multipliers: they come from the state
    other.load_state_dict(np.load(buf))
    np.testing.assert_array_equal(other.lr_scale[0], s)
    for g in grads[6:]:
        opt.step([g])
        other.step([g])
    np.testing.assert_array_equal(p, q)
    # a state without multipliers removes them; one without the key (older) too
    plain = AdamW([np.zeros(64)]).state_dict()
    other.load_state_dict(plain)
    assert other.lr_scale is None
    other.set_lr_scale(s)
    del plain["lr_scaled"]
    other.load_state_dict(plain)
    assert other.lr_scale is None


def test_invalid_multipliers_are_refused():
    p = np.zeros(4)
    with pytest.raises(ValueError, match=r"lr_scale\[0\] has shape"):
        Adam([p], lr_scale=np.ones(3))
    with pytest.raises(ValueError, match=r"lr_scale\[0\] must be finite and >= 0"):
        Adam([p], lr_scale=np.array([1.0, -1.0, 1.0, 1.0]))
    with pytest.raises(ValueError, match=r"lr_scale\[0\] must be finite"):
        Adam([p], lr_scale=np.array([1.0, np.nan, 1.0, 1.0]))
    with pytest.raises(ValueError, match="lr_scale must hold one array per parameter"):
        Adam([p], lr_scale=[np.ones(4), np.ones(4)])
    with pytest.raises(TypeError, match="lr_scale"):
        Adam([p], lr_scale=[1.0, 2.0])
    state = Adam([p], lr_scale=np.ones(4)).state_dict()
    opt = Adam([p])
    bad = dict(state, lr_scale_0=np.ones(5))
    with pytest.raises(ValueError, match="'lr_scale_0' must be a real array of shape"):
        opt.load_state_dict(bad)
    assert opt.lr_scale is None  # nothing changed
    missing = {k: v for k, v in state.items() if k != "lr_scale_0"}
    with pytest.raises(ValueError, match="missing the key 'lr_scale_0'"):
        opt.load_state_dict(missing)
    with pytest.raises(ValueError, match="'lr_scale_0' must be finite and >= 0"):
        opt.load_state_dict(dict(state, lr_scale_0=-np.ones(4)))
