import numpy as np
import pytest

from ddops import Decomposition1D, GlobalLowRankOperator, SchwarzOperator
from ddops.data import FourierRHS
from ddops.training import Trainer, TrainingConfig


def small_setup(seed=0, **cfg):
    d = Decomposition1D(32, 4)
    op = SchwarzOperator(d, seed=seed)
    sampler = FourierRHS(32, modes=8)
    val = sampler.sample(16, np.random.default_rng(99))
    config = TrainingConfig(batch_size=16, progress=False, **cfg)
    return op, sampler, val, config


def test_training_reduces_loss():
    op, sampler, val, config = small_setup(steps=300, lr=1e-2, val_every=100)
    result = Trainer(op, sampler, config, validation=val).run()
    h = result.history
    assert result.status == "finished" and result.steps == 300
    assert h["train"].shape == (300,) and h["step"].tolist() == list(range(1, 301))
    assert h["val_step"].tolist() == [100, 200, 300]
    assert h["train"][-20:].mean() < 0.1 * h["train"][:20].mean()
    assert h["val"][-1] < h["val"][0]


def test_resume_matches_uninterrupted(tmp_path):
    op_a, sampler, val, config = small_setup(steps=60, lr=1e-2, val_every=10,
                                             plateau_patience=3)
    full = Trainer(op_a, sampler, config, train_seed=7, validation=val).run()

    op_b, _, _, _ = small_setup()
    ckpt = tmp_path / "ckpt.npz"
    first = Trainer(op_b, sampler, config, train_seed=7, validation=val, checkpoint=ckpt)
    first.run(steps=25)
    first.save_checkpoint(ckpt)
    op_c, _, _, _ = small_setup(seed=123)  # different start: the checkpoint must overwrite it
    second = Trainer(op_c, sampler, config, train_seed=7, validation=val)
    second.load_checkpoint(ckpt)
    resumed = second.run()
    np.testing.assert_array_equal(op_c.theta, op_a.theta)
    for key in ("step", "train", "lr", "val_step", "val"):
        np.testing.assert_array_equal(resumed.history[key], full.history[key])
    assert resumed.history["lr"].min() < config.lr  # the scheduler did act


class NaNAfter:
    """A sampler that turns bad after k batches."""

    def __init__(self, inner, k):
        self.inner, self.k, self.calls = inner, k, 0

    def sample(self, B, rng):
        F, U = self.inner.sample(B, rng)
        self.calls += 1
        if self.calls > self.k:
            F = F * np.nan
        return F, U


def test_divergence_stops_cleanly_and_keeps_checkpoint(tmp_path):
    op, sampler, val, config = small_setup(steps=50, checkpoint_every=10)
    ckpt = tmp_path / "run.npz"
    trainer = Trainer(op, NaNAfter(sampler, 25), config, checkpoint=ckpt)
    result = trainer.run()
    assert result.status == "diverged"
    assert "step 26" in result.message and str(ckpt) in result.message
    assert result.history["train"].shape == (25,)
    # the checkpoint on disk is the last good one (step 20) and loads
    fresh, _, _, _ = small_setup()
    t2 = Trainer(fresh, sampler, config)
    t2.load_checkpoint(ckpt)
    assert t2.step == 20 and np.all(np.isfinite(fresh.theta))


def test_global_model_trains_and_log_every():
    op = GlobalLowRankOperator(31, 6, seed=1)
    sampler = FourierRHS(32, modes=4)
    cfg = TrainingConfig(steps=40, batch_size=8, lr=1e-2, progress=False, log_every=7)
    result = Trainer(op, sampler, cfg).run()
    assert result.history["train"].shape == (40,)
    assert result.seconds["data"] > 0 and result.seconds["step"] > 0


@pytest.mark.parametrize("field,value,exc", [
    ("steps", -1, ValueError), ("batch_size", 0, ValueError), ("lr", 0.0, ValueError),
    ("lr", float("nan"), ValueError), ("loss", "huber", ValueError),
    ("optimizer", "sgd", ValueError), ("val_every", 0, ValueError), ("steps", 1.5, TypeError),
])
def test_config_validation(field, value, exc):
    with pytest.raises(exc, match=field):
        TrainingConfig(**{field: value}).validated()


def test_bad_checkpoint(tmp_path):
    op, sampler, val, config = small_setup()
    t = Trainer(op, sampler, config)
    bad = tmp_path / "bad.npz"
    np.savez(bad, theta=np.zeros(3))
    with pytest.raises(ValueError, match="checkpoint"):
        t.load_checkpoint(bad)
    with pytest.raises(ValueError, match="checkpoint"):
        t.load_checkpoint(tmp_path / "missing.npz")
    with pytest.raises(ValueError, match="validation"):
        Trainer(op, sampler, config, validation=(np.ones((5, 2)), np.ones((5, 2))))


def test_energy_loss_needs_weight():
    op, sampler, val, config = small_setup()
    cfg = TrainingConfig(loss="energy", progress=False)
    with pytest.raises(ValueError, match="loss_weight"):
        Trainer(op, sampler, cfg)
    with pytest.raises(ValueError, match="loss_weight"):
        Trainer(op, sampler, config, loss_weight=np.eye(31))


def test_resume_with_buffered_losses(tmp_path):
    """log_every > 1: a checkpoint flushes the buffered losses first."""
    op_a, sampler, val, config = small_setup(steps=40, lr=1e-2, log_every=5, plateau_patience=2)
    full = Trainer(op_a, sampler, config, train_seed=3).run()
    op_b, _, _, _ = small_setup()
    ckpt = tmp_path / "c.npz"
    cfg = TrainingConfig(**{**config.__dict__, "checkpoint_every": 10})
    first = Trainer(op_b, sampler, cfg, train_seed=3, checkpoint=ckpt)
    first.run(steps=20)
    op_c, _, _, _ = small_setup(seed=5)
    second = Trainer(op_c, sampler, cfg, train_seed=3)
    second.load_checkpoint(ckpt)
    assert second.history["train"].shape == (20,)
    resumed = second.run()
    assert resumed.history["lr"].min() < config.lr  # the scheduler acted
    np.testing.assert_array_equal(op_c.theta, op_a.theta)
    np.testing.assert_array_equal(resumed.history["train"], full.history["train"])


def test_resume_refuses_other_settings(tmp_path):
    op, sampler, val, config = small_setup(steps=5)
    ckpt = tmp_path / "c.npz"
    t = Trainer(op, sampler, config, train_seed=1)
    t.run()
    t.save_checkpoint(ckpt)
    other = Trainer(op, sampler, TrainingConfig(batch_size=8, progress=False), train_seed=1)
    with pytest.raises(ValueError, match="batch_size"):
        other.load_checkpoint(ckpt)
    with pytest.raises(ValueError, match="train_seed"):
        Trainer(op, sampler, config, train_seed=2).load_checkpoint(ckpt)


def test_checkpoint_interval_must_align_with_log_interval():
    with pytest.raises(ValueError, match="multiple of log_every"):
        TrainingConfig(log_every=4, checkpoint_every=10).validated()


class PlainSampler:
    """A sampler with only ``sample`` (no coefficient interface)."""

    def __init__(self, inner):
        self.inner = inner

    def sample(self, B, rng):
        return self.inner.sample(B, rng)


@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("plain", [False, True])
@pytest.mark.parametrize("loss", ["wmse", "mse"])
def test_workers_match_one_worker(workers, plain, loss):
    """Column blocks in threads give the one-worker trajectory up to rounding."""
    runs = []
    for w in (1, workers):
        op, sampler, val, config = small_setup(steps=40, lr=1e-2, val_every=20, loss=loss,
                                               workers=w)
        sampler = PlainSampler(sampler) if plain else sampler
        trainer = Trainer(op, sampler, config, train_seed=5, validation=val)
        runs.append((trainer.run(), op.theta.copy(), trainer))
    (one, theta1, t1), (many, theta2, t2) = runs
    np.testing.assert_allclose(many.history["train"], one.history["train"], rtol=1e-10)
    np.testing.assert_allclose(theta2, theta1, rtol=1e-8, atol=1e-12)
    assert t1.rng.bit_generator.state == t2.rng.bit_generator.state  # same stream consumed
    assert many.seconds["data"] > 0 and many.seconds["step"] > 0


def test_workers_first_step_gradient_matches_full_batch():
    """One step with blocks of 5, 6, 5 columns moves the parameters like the full batch."""
    thetas = []
    for w in (1, 3):
        op, sampler, _, config = small_setup(steps=1, lr=1e-3, workers=w, scheduler=False)
        Trainer(op, sampler, config, train_seed=2).run()
        thetas.append(op.theta.copy())
    # AdamW's first step is lr * sign(g) up to eps: compare the gradients instead
    op, sampler, _, _ = small_setup()
    F, U = sampler.sample(16, np.random.default_rng(2))
    _, g_full = op.value_and_grad_flat(F, U)
    g_blocks = sum(op.value_and_grad_flat(F[:, lo:hi].copy(), U[:, lo:hi].copy(), slot=k)[1]
                   * (hi - lo) / 16 for k, (lo, hi) in enumerate([(0, 5), (5, 10), (10, 16)]))
    np.testing.assert_allclose(g_blocks, g_full, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(thetas[1], thetas[0], rtol=1e-12, atol=1e-15)


def test_workers_validation():
    with pytest.raises(ValueError, match="workers"):
        TrainingConfig(workers=0).validated()
    with pytest.raises(TypeError, match="workers"):
        TrainingConfig(workers=1.5).validated()
    with pytest.raises(ValueError, match="workers"):
        TrainingConfig(batch_size=4, workers=5).validated()


def test_resume_with_workers_is_exact(tmp_path):
    """With the same worker count a resumed run repeats the uninterrupted one bit for bit."""
    op_a, sampler, val, config = small_setup(steps=30, lr=1e-2, val_every=10, workers=2)
    full = Trainer(op_a, sampler, config, train_seed=3, validation=val).run()
    op_b, _, _, _ = small_setup()
    ckpt = tmp_path / "w.npz"
    first = Trainer(op_b, sampler, config, train_seed=3, validation=val)
    first.run(steps=12)
    first.save_checkpoint(ckpt)
    op_c, _, _, _ = small_setup(seed=9)
    second = Trainer(op_c, sampler, config, train_seed=3, validation=val)
    second.load_checkpoint(ckpt)
    resumed = second.run()
    np.testing.assert_array_equal(op_c.theta, op_a.theta)
    np.testing.assert_array_equal(resumed.history["train"], full.history["train"])


class ScaledRHS(FourierRHS):
    """A sampler subclass that changes the data in ``sample`` (targets times 10)."""

    def sample(self, batch_size, rng, out=None):
        F, U = super().sample(batch_size, rng, out=out)
        U *= 10.0
        return F, U


@pytest.mark.parametrize("make,rtol", [
    (lambda: (SchwarzOperator(Decomposition1D(32, 4), seed=0, dtype=np.float32),
              FourierRHS(32, modes=8)), 1e-5),                # sampler dtype != operator dtype
    (lambda: (SchwarzOperator(Decomposition1D(32, 4), seed=0), ScaledRHS(32, modes=8)), 1e-10),
], ids=["dtype-mismatch", "overridden-sample"])
def test_workers_respect_the_samplers_batches(make, rtol):
    """Workers train on exactly the batches ``sampler.sample`` returns, whatever the sampler."""
    histories = []
    for w in (1, 2):
        op, sampler = make()
        cfg = TrainingConfig(batch_size=8, steps=5, progress=False, workers=w, loss="mse")
        histories.append(Trainer(op, sampler, cfg, train_seed=1).run().history["train"])
    np.testing.assert_allclose(histories[1], histories[0], rtol=rtol)
