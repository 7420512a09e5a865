"""A resumed run never records something other than what ran.

A checkpoint written with other settings (any of ``RESUME_SETTINGS``, the
training seed, the sampler, the operator's architecture) is refused with one
line naming the setting and both values, or, with ``allow_changes=True``,
accepted, applied from the checkpoint's step on and recorded.
"""

import json

import numpy as np
import pytest

from ddops import Decomposition1D, GlobalLowRankOperator, SchwarzOperator
from ddops.io import describe_operator
from ddops.learning.data import FourierRHS
from ddops.learning.initialisation import lr_scales, problem_init
from ddops.learning.training import INIT_SETTINGS, RESUME_SETTINGS, Trainer, TrainingConfig
from ddops.problems.poisson1d import poisson_1d

BASE = dict(steps=20, batch_size=16, lr=1e-2, plateau_patience=1, progress=False)


def make(config=None, op=None, sampler=None, train_seed=7, **changes):
    config = TrainingConfig(**{**BASE, **changes}) if config is None else config
    op = SchwarzOperator(Decomposition1D(32, 4), seed=0) if op is None else op
    sampler = FourierRHS(32, modes=8) if sampler is None else sampler
    A = poisson_1d(32) if config.lr_scaling == "problem" else None
    return Trainer(op, sampler, config, train_seed=train_seed, A=A)


@pytest.fixture
def ckpt(tmp_path):
    """A finished 20-step run's checkpoint (the scheduler has reduced the rate)."""
    trainer = make()
    trainer.run()
    assert trainer.optimizer.lr < BASE["lr"]
    return trainer.save_checkpoint(tmp_path / "run.npz")


CHANGES = {  # setting -> (old, new) for a config field; steps: fewer (more continue the run)
    "steps": (20, 10), "batch_size": (16, 8), "lr": (1e-2, 1e-3), "loss": ("wmse", "mse"),
    "optimizer": ("adamw", "adam"), "weight_decay": (0.0, 1e-4),
    "betas": ([0.9, 0.999], [0.8, 0.99]), "eps": (1e-8, 1e-7), "scheduler": (True, False),
    "plateau_factor": (0.5, 0.25), "plateau_patience": (1, 10), "log_every": (1, 2),
    "workers": (1, 2), "divergence_factor": (1e4, 1e3), "divergence_window": (100, 50),
    "lr_scaling": ("none", "problem"),
}


def test_every_resume_setting_is_covered():
    assert set(CHANGES) == set(RESUME_SETTINGS)


def expected_refusal(path, setting, old, new):
    return (f"checkpoint {str(path)!r} was written with {setting}={old!r}, this run has "
            f"{setting}={new!r} (allow changed settings to continue anyway)")


@pytest.mark.parametrize("setting", CHANGES)
def test_changed_setting_is_refused_with_one_line(ckpt, setting):
    old, new = CHANGES[setting]
    value = tuple(new) if setting == "betas" else new
    trainer = make(**{setting: value})
    with pytest.raises(ValueError) as info:
        trainer.load_checkpoint(ckpt)
    assert str(info.value) == expected_refusal(ckpt, setting, old, new)
    assert trainer.step == 0 and trainer.changed_settings == {}


@pytest.mark.parametrize("setting", CHANGES)
def test_changed_setting_is_accepted_and_recorded(ckpt, setting):
    old, new = CHANGES[setting]
    value = tuple(new) if setting == "betas" else new
    trainer = make(**{setting: value})
    if setting == "steps":  # the checkpoint is at step 20: 10 steps cannot continue it
        with pytest.raises(ValueError, match="is at step 20, beyond this run's steps=10"):
            trainer.load_checkpoint(ckpt, allow_changes=True)
        return
    changed = trainer.load_checkpoint(ckpt, allow_changes=True)
    assert changed == {setting: [old, new]} == trainer.changed_settings
    assert trainer.step == 20


def test_fewer_steps_than_planned_are_a_change(tmp_path):
    first = make(steps=20)
    first.run(10)  # stopped half-way: a checkpoint at step 10 of a 20-step run
    path = first.save_checkpoint(tmp_path / "half.npz")
    with pytest.raises(ValueError) as info:
        make(steps=15).load_checkpoint(path)
    assert str(info.value) == expected_refusal(path, "steps", 20, 15)
    assert make(steps=15).load_checkpoint(path, allow_changes=True) == {"steps": [20, 15]}


def test_other_seed_sampler_and_architecture_are_refused(ckpt):
    cases = [
        (dict(train_seed=8), "train_seed", 7, 8),
        (dict(sampler=FourierRHS(32, modes=4)), "sampler",
         repr(FourierRHS(32, modes=8)), repr(FourierRHS(32, modes=4))),
        (dict(op=SchwarzOperator(Decomposition1D(32, 4), seed=5)), "operator.seed", 0, 5),
        (dict(op=SchwarzOperator(Decomposition1D(32, 4), seed=0, init="naive")),
         "operator.init", "scaled", "naive"),
        (dict(op=SchwarzOperator(Decomposition1D(32, 4), seed=0, dtype=np.float32)),
         "operator.dtype", "float64", "float32"),
        (dict(op=SchwarzOperator(Decomposition1D(32, 4), seed=0, partition="left")),
         "operator.partition", "symmetric", "left"),
    ]
    for kwargs, setting, old, new in cases:
        trainer = make(**kwargs)
        with pytest.raises(ValueError) as info:
            trainer.load_checkpoint(ckpt)
        assert str(info.value) == expected_refusal(ckpt, setting, old, new)
        assert make(**kwargs).load_checkpoint(ckpt, allow_changes=True) == {setting: [old, new]}


@pytest.mark.parametrize("switch, value, kwargs", [("coarse_init", "galerkin", dict(local=False)),
                                                    ("local_init", "problem", dict(coarse=False))])
def test_other_initialisation_switch_is_refused(ckpt, switch, value, kwargs):
    """A run whose operator was initialised from the problem does not continue a random one."""
    assert INIT_SETTINGS == ("coarse_init", "local_init")
    op = problem_init(SchwarzOperator(Decomposition1D(32, 4), seed=0), poisson_1d(32), **kwargs)
    with pytest.raises(ValueError) as info:
        make(op=op).load_checkpoint(ckpt)
    assert str(info.value) == expected_refusal(ckpt, switch, "random", value)
    op = problem_init(SchwarzOperator(Decomposition1D(32, 4), seed=0), poisson_1d(32), **kwargs)
    assert make(op=op).load_checkpoint(ckpt, allow_changes=True) == {switch: ["random", value]}


def test_initialisation_switches_are_recorded_and_matched(tmp_path):
    A = poisson_1d(32)
    first = make(op=problem_init(SchwarzOperator(Decomposition1D(32, 4), seed=0), A))
    first.run(5)
    path = first.save_checkpoint(tmp_path / "improved.npz")
    with np.load(path) as z:
        meta = json.loads(str(z["meta"]))
    assert (meta["coarse_init"], meta["local_init"]) == ("galerkin", "problem")
    again = make(op=problem_init(SchwarzOperator(Decomposition1D(32, 4), seed=0), A))
    assert again.load_checkpoint(path) == {}


def test_lr_scale_is_restored_and_a_changed_scaling_takes_effect(tmp_path):
    """The multipliers travel with the optimiser state; an accepted change uses this run's."""
    scaled = make(lr_scaling="problem")
    scaled.run(5)
    path = scaled.save_checkpoint(tmp_path / "scaled.npz")
    expected = lr_scales(scaled.op, poisson_1d(32))
    same = make(lr_scaling="problem")
    same.optimizer.set_lr_scale(np.ones_like(expected))  # overwritten by the checkpoint's
    assert same.load_checkpoint(path) == {}
    np.testing.assert_array_equal(same.optimizer.lr_scale[0], expected)
    plain = make()
    assert plain.load_checkpoint(path, allow_changes=True) == {"lr_scaling": ["problem", "none"]}
    assert plain.optimizer.lr_scale is None
    back = make(lr_scaling="problem")
    back.load_checkpoint(path)
    back.optimizer.set_lr_scale(None)
    path2 = back.save_checkpoint(tmp_path / "plain.npz")
    again = make(lr_scaling="problem")
    assert again.load_checkpoint(path2) == {}  # same setting recorded, state without scale
    assert again.optimizer.lr_scale is None


def test_architecture_with_other_parameters_is_refused_even_when_allowed(ckpt):
    op = SchwarzOperator(Decomposition1D(32, 4), local_rank=3, seed=0)
    old = SchwarzOperator(Decomposition1D(32, 4), seed=0)
    for allow in (False, True):
        with pytest.raises(ValueError) as info:
            make(op=op).load_checkpoint(ckpt, allow_changes=allow)
        message = str(info.value)
        assert message.startswith(f"checkpoint {str(ckpt)!r} holds {old.theta.size} parameter "
                                  f"values, this operator has {op.theta.size}: it was written "
                                  "with ")
        assert "operator.local_rank=4" in message and "operator.local_rank=3" in message
        assert "\n" not in message
    glob = GlobalLowRankOperator(31, 14, seed=0)
    with pytest.raises(ValueError, match="operator.class='SchwarzOperator'"):
        make(op=glob).load_checkpoint(ckpt, allow_changes=True)


def test_several_changes_in_one_line(ckpt):
    trainer = make(lr=1e-3, batch_size=8)
    with pytest.raises(ValueError) as info:
        trainer.load_checkpoint(ckpt)
    assert str(info.value) == (
        f"checkpoint {str(ckpt)!r} was written with batch_size=16, lr=0.01; this run has "
        "batch_size=8, lr=0.001 (allow changed settings to continue anyway)")


def test_settings_that_do_not_change_the_result_may_differ(ckpt):
    trainer = make(val_every=7, progress=False, blas_threads=None, checkpoint_every=5)
    assert trainer.load_checkpoint(ckpt) == {} and trainer.changed_settings == {}
    assert trainer.run().changed_settings == {}
    # without a scheduler in either run its constants do not matter
    first = make(scheduler=False, plateau_factor=0.1)
    first.run()
    path = first.save_checkpoint(ckpt.with_name("noschedule.npz"))
    assert make(scheduler=False, plateau_factor=0.9).load_checkpoint(path) == {}


def test_allowed_changes_take_effect(ckpt):
    with np.load(ckpt) as z:
        saved_lr = float(z["opt_lr"])
        moments = z["opt_exp_avg_0"], z["opt_exp_avg_sq_0"]
    # the rate: the stored (reduced) one, or this run's when lr changed
    same = make()
    same.load_checkpoint(ckpt)
    assert same.optimizer.lr == saved_lr < BASE["lr"]
    other = make(lr=3e-3)
    other.load_checkpoint(ckpt, allow_changes=True)
    assert other.optimizer.lr == 3e-3
    # optimiser and scheduler constants
    t = make(betas=(0.8, 0.99), eps=1e-7, weight_decay=1e-4, plateau_factor=0.25,
             plateau_patience=10)
    t.load_checkpoint(ckpt, allow_changes=True)
    assert (t.optimizer.betas, t.optimizer.eps, t.optimizer.weight_decay) == ((0.8, 0.99), 1e-7,
                                                                              1e-4)
    assert (t.scheduler.factor, t.scheduler.patience) == (0.25, 10)
    # Adam instead of AdamW: the moments carry over
    adam = make(optimizer="adam")
    adam.load_checkpoint(ckpt, allow_changes=True)
    assert type(adam.optimizer).__name__ == "Adam"
    np.testing.assert_array_equal(adam.optimizer.exp_avg[0], moments[0])
    np.testing.assert_array_equal(adam.optimizer.exp_avg_sq[0], moments[1])
    # another training seed: the stream restarts from it
    seeded = make(train_seed=99)
    seeded.load_checkpoint(ckpt, allow_changes=True)
    assert seeded.rng.bit_generator.state == np.random.default_rng(99).bit_generator.state
    # a scheduler switched on starts fresh
    with_sched = make(scheduler=True)
    first = make(scheduler=False)
    first.run()
    path = first.save_checkpoint(ckpt.with_name("noschedule.npz"))
    assert with_sched.load_checkpoint(path, allow_changes=True) == {"scheduler": [False, True]}
    assert with_sched.scheduler.num_bad_epochs == 0 and with_sched.scheduler.last_epoch == 0


def test_continuing_with_more_steps_equals_the_longer_run(ckpt):
    """A finished 20-step run continued to 30 steps is the uninterrupted 30-step run."""
    full = make(steps=30)
    full_result = full.run()
    resumed = make(steps=30)
    assert resumed.load_checkpoint(ckpt) == {}  # a longer total is no changed setting
    result = resumed.run()
    np.testing.assert_array_equal(resumed.op.theta, full.op.theta)
    np.testing.assert_array_equal(result.history["train"], full_result.history["train"])
    np.testing.assert_array_equal(result.history["lr"], full_result.history["lr"])
    assert result.changed_settings == {} == full_result.changed_settings
    assert full_result.history["lr"].min() < BASE["lr"]  # the scheduler acted in both


def test_fewer_steps_than_done_is_refused_even_when_allowed(ckpt):
    with pytest.raises(ValueError, match="is at step 20, beyond this run's steps=10"):
        make(steps=10).load_checkpoint(ckpt, allow_changes=True)


def test_recorded_changes_survive_a_later_resume(tmp_path, ckpt):
    second = make(steps=30, lr=1e-3)
    second.load_checkpoint(ckpt, allow_changes=True)
    second.run()
    path = second.save_checkpoint(tmp_path / "second.npz")
    third = make(steps=30, lr=1e-3)
    # the earlier change is kept; the longer totals are no change
    assert third.load_checkpoint(path) == {"lr": [1e-2, 1e-3]}
    fourth = make(steps=40, lr=1e-4)
    assert fourth.load_checkpoint(path, allow_changes=True) == {"lr": [1e-2, 1e-4]}
    assert fourth.run().changed_settings == {"lr": [1e-2, 1e-4]}


def test_checkpoint_records_the_architecture(ckpt):
    with np.load(ckpt) as z:
        meta = json.loads(str(z["meta"]))
    op = SchwarzOperator(Decomposition1D(32, 4), seed=0)
    assert meta["operator"] == describe_operator(op)
    assert meta["operator"]["decomposition"] == {"type": "Decomposition1D", "n": 32,
                                                 "subdomains": 4, "overlap": 2,
                                                 "kind": "element"}
    assert meta["operator"]["num_params"] == op.num_params
    assert meta["train_seed"] == 7 and meta["sampler"] == repr(FourierRHS(32, modes=8))


def test_old_checkpoint_without_the_new_records(tmp_path, ckpt):
    """A file of the previous format: unknown settings count as changed."""
    with np.load(ckpt) as z:
        arrays = dict(z)
    meta = json.loads(str(arrays["meta"]))
    for key in ("format", "operator", "sampler", "changed_settings", "coarse_init",
                "local_init"):
        del meta[key]
    for key in ("divergence_factor", "divergence_window", "lr_scaling"):
        del meta["config"][key]
    old = tmp_path / "old.npz"
    np.savez(old, **{**arrays, "meta": np.array(json.dumps(meta))})
    with pytest.raises(ValueError) as info:
        make().load_checkpoint(old)
    message = str(info.value)
    assert message.startswith(f"checkpoint {str(old)!r} was written with "
                              "divergence_factor=<not recorded>, divergence_window=<not "
                              "recorded>, sampler=<not recorded>, operator=<not recorded>; "
                              "this run has divergence_factor=10000.0")
    assert message.endswith("(allow changed settings to continue anyway)")
    trainer = make()
    changed = trainer.load_checkpoint(old, allow_changes=True)
    assert changed["divergence_factor"] == [None, 1e4]
    assert changed["operator"][0] is None and changed["operator"][1]["class"] == "SchwarzOperator"
    assert trainer.step == 20
    # the switches did not exist then: such a file had the defaults, which is no change
    assert not {"lr_scaling", "coarse_init", "local_init"} & set(changed)
