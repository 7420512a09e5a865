import numpy as np
import pytest

from ddops import Decomposition1D, GlobalLowRankOperator, SchwarzOperator
from ddops.learning.data import FourierRHS
from ddops.learning.training import Trainer, TrainingConfig


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
    op_c, _, _, _ = small_setup()
    op_c.theta[...] += 1.0  # a different start: the checkpoint must overwrite it
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
    t2 = Trainer(fresh, NaNAfter(sampler, 25), config)
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
    op_c, _, _, _ = small_setup()
    op_c.theta[...] += 1.0
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
    op_c, _, _, _ = small_setup()
    op_c.theta[...] += 1.0
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


# -- divergence: a blow-up of the loss stops the run, the last good checkpoint stays ----------
class SpikeSampler:
    """Right-hand sides times ``scale`` at the (1-based) steps in ``spikes`` (the relative
    error, and so the loss, grows by about ``scale**2``); ``calls`` batches drawn so far."""

    def __init__(self, inner, spikes, scale=1e4, calls=0):
        self.inner, self.spikes, self.scale, self.calls = inner, set(spikes), scale, calls

    def sample(self, B, rng):
        F, U = self.inner.sample(B, rng)
        self.calls += 1
        return (F * self.scale, U) if self.calls in self.spikes else (F, U)


def spike_setup(spikes, calls=0, **cfg):
    cfg = {"steps": 40, "lr": 1e-4, "scheduler": False, "divergence_window": 10, **cfg}
    op, sampler, _, config = small_setup(**cfg)
    return op, SpikeSampler(sampler, spikes, calls=calls), config


def test_huge_learning_rate_diverges_with_the_default_test():
    op, sampler, val, config = small_setup(steps=400, lr=1e6)
    assert config.validated().divergence_test == (1e4, 100)
    result = Trainer(op, sampler, config).run()
    train = result.history["train"]
    assert result.status == "diverged" and result.steps < 400
    # stopped after exactly 100 losses in a row above 1e4 times the first one
    above = train > 1e4 * train[0]
    assert above[-100:].all() and not above[-101]
    assert "stayed above 10000 x the first loss" in result.message
    assert f"step {train.size}" in result.message and "\n" not in result.message


def test_no_checkpoint_of_a_run_that_blows_up_from_the_start(tmp_path):
    op, sampler, val, config = small_setup(steps=300, lr=1e6, checkpoint_every=10)
    ckpt = tmp_path / "c.npz"
    result = Trainer(op, sampler, config, checkpoint=ckpt).run()
    assert result.status == "diverged" and "no checkpoint was written" in result.message
    assert not ckpt.exists()


def test_blow_up_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    """Rate 1e6 from update 36 on: the file is the state of step 30 of a normal run."""
    op, sampler, val, config = small_setup(steps=300, lr=1e-2, checkpoint_every=10)
    ckpt = tmp_path / "c.npz"
    trainer = Trainer(op, sampler, config, train_seed=3, checkpoint=ckpt)
    step = trainer.optimizer.step

    def step_then_blow_up(grads):
        if trainer.optimizer.step_count == 35:
            trainer.optimizer.lr = 1e6
        step(grads)

    monkeypatch.setattr(trainer.optimizer, "step", step_then_blow_up)
    result = trainer.run()
    assert result.status == "diverged" and f"last checkpoint {ckpt} kept" in result.message
    train = result.history["train"]
    threshold = 1e4 * train[0]
    first_above = int(np.argmax(train > threshold)) + 1  # 1-based step
    # periodic checkpoints are due at multiples of 10; one inside the blow-up is skipped
    last_good = max(k for k in range(10, result.steps + 1, 10) if train[k - 1] <= threshold)
    assert last_good == 30 and first_above == 37
    # an independent run stopped at that step: same parameters, moments and history
    ref_op, _, _, _ = small_setup()
    ref = Trainer(ref_op, sampler, config, train_seed=3)
    ref.run(last_good)
    with np.load(ckpt) as z:
        np.testing.assert_array_equal(z["theta"], ref_op.theta)
        np.testing.assert_array_equal(z["opt_exp_avg_0"], ref.optimizer.exp_avg[0])
        np.testing.assert_array_equal(z["opt_exp_avg_sq_0"], ref.optimizer.exp_avg_sq[0])
        np.testing.assert_array_equal(z["hist_train"], train[:last_good])
    with pytest.raises(RuntimeError, match="diverged"):
        trainer.save_checkpoint(tmp_path / "other.npz")
    assert not (tmp_path / "other.npz").exists()


@pytest.mark.parametrize("length,status", [(9, "finished"), (10, "diverged")])
def test_short_spike_does_not_stop_a_run(length, status):
    op, sampler, config = spike_setup(range(12, 12 + length))
    result = Trainer(op, sampler, config).run()
    assert result.status == status
    if status == "diverged":
        assert "at step 21 has stayed above" in result.message
        assert result.history["train"].size == 21
    else:
        assert result.steps == 40


def test_streak_restarts_after_a_normal_step():
    op, sampler, config = spike_setup([*range(5, 14), *range(15, 24)])  # 9, 1 normal, 9
    assert Trainer(op, sampler, config).run().status == "finished"


@pytest.mark.parametrize("log_every", [1, 5])
def test_blow_up_decision_survives_chunks_and_resume(tmp_path, log_every):
    """run() in pieces and a resume mid-spike stop at the same step with the same history."""
    spikes = range(12, 30)
    op, sampler, config = spike_setup(spikes, log_every=log_every)
    full = Trainer(op, sampler, config, train_seed=4).run()
    assert full.status == "diverged" and full.history["train"].size == 21
    op2, sampler2, _ = spike_setup(spikes, log_every=log_every)
    chunked = Trainer(op2, sampler2, config, train_seed=4)
    assert chunked.run(15).status == "finished"  # 4 steps into the spike
    chunked.save_checkpoint(tmp_path / "mid.npz")
    assert chunked.run().message == full.message
    op3, sampler3, _ = spike_setup(spikes, calls=15, log_every=log_every)
    resumed = Trainer(op3, sampler3, config, train_seed=4)
    resumed.load_checkpoint(tmp_path / "mid.npz")
    result = resumed.run()
    assert result.message == full.message
    np.testing.assert_array_equal(result.history["train"], full.history["train"])
    np.testing.assert_array_equal(op3.theta, op.theta)


def test_no_checkpoint_while_the_loss_is_above_the_threshold(tmp_path):
    ckpt = tmp_path / "c.npz"
    op, sampler, config = spike_setup(range(12, 21), checkpoint_every=5)
    trainer = Trainer(op, sampler, config, checkpoint=ckpt)
    result = trainer.run(19)  # ends inside the spike: no final save either
    assert result.status == "finished" and "not updated" in result.message
    with np.load(ckpt) as z:
        assert z["hist_train"].size == 10  # step 15 was inside the spike
    result = trainer.run(40)
    assert result.status == "finished"
    with np.load(ckpt) as z:
        assert z["hist_train"].size == 40


def test_non_finite_parameters_stop_before_a_checkpoint(tmp_path, monkeypatch):
    op, sampler, val, config = small_setup(steps=30, checkpoint_every=5)
    ckpt = tmp_path / "c.npz"
    trainer = Trainer(op, sampler, config, checkpoint=ckpt)
    step = trainer.optimizer.step

    def poisoned(grads):
        step(grads)
        if trainer.optimizer.step_count == 10:
            op.theta[3] = np.inf

    monkeypatch.setattr(trainer.optimizer, "step", poisoned)
    result = trainer.run()
    assert result.status == "diverged"
    assert "parameters became NaN or inf at step 10" in result.message
    with np.load(ckpt) as z:
        assert z["hist_train"].size == 5 and np.all(np.isfinite(z["theta"]))


def test_divergence_test_can_be_disabled():
    for disabled in ({"divergence_factor": None}, {"divergence_factor": 0},
                     {"divergence_window": 0}, {"divergence_window": None}):
        op, sampler, val, config = small_setup(steps=150, lr=1e6, **disabled)
        assert config.validated().divergence_test is None
        assert Trainer(op, sampler, config).run().status == "finished"


@pytest.mark.parametrize("field,value,exc", [
    ("divergence_factor", 0.5, ValueError), ("divergence_factor", 1.0, ValueError),
    ("divergence_factor", -3.0, ValueError), ("divergence_factor", float("inf"), ValueError),
    ("divergence_factor", "big", TypeError), ("divergence_window", -1, ValueError),
    ("divergence_window", 2.5, TypeError),
])
def test_divergence_settings_validation(field, value, exc):
    with pytest.raises(exc, match=field):
        TrainingConfig(**{field: value}).validated()


def test_paper_settings_never_trigger_the_default_test():
    """The default compare setting at the largest rate of the sweep (and beyond) finishes."""
    from dataclasses import replace

    from ddops.experiments.compare import ExperimentConfig, build_models, build_problem

    c = replace(ExperimentConfig(), steps=300, lr=1e-1).validated()
    prob = build_problem(c)
    for name, op in build_models(c, prob.decomposition).items():
        cfg = TrainingConfig(steps=c.steps, batch_size=c.batch_size, lr=c.lr, progress=False)
        result = Trainer(op, prob.sampler, cfg, train_seed=c.train_seed).run()
        assert result.status == "finished", (name, result.message)


class _Terminal:
    """A standard error that is (or is not) a terminal, keeping what is written."""

    def __init__(self, terminal):
        self.terminal, self.text = terminal, []

    def isatty(self):
        return self.terminal

    def write(self, text):
        self.text.append(text)
        return len(text)

    def flush(self):
        pass


@pytest.mark.parametrize("terminal, progress, bars", [
    (False, None, False), (True, None, True), (False, True, True), (True, False, False)])
def test_progress_bars_only_on_a_terminal_by_default(monkeypatch, terminal, progress, bars):
    # the README's training snippet run into a log: no bar unless asked for
    err = _Terminal(terminal)
    monkeypatch.setattr("sys.stderr", err)
    op, sampler, _, _ = small_setup()
    cfg = {} if progress is None else {"progress": progress}
    trainer = Trainer(op, sampler, TrainingConfig(steps=3, batch_size=4, **cfg))
    assert trainer.config.progress is bars
    trainer.run()
    assert ("SchwarzOperator" in "".join(err.text)) == bars, err.text


def test_progress_must_be_a_bool_or_none():
    with pytest.raises(TypeError, match="progress must be a bool or None, got str"):
        TrainingConfig(progress="yes").validated()
