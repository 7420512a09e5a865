"""Training memory on a 2D problem: the peak stays below 4 x (batch arrays + parameters)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from ddops import Decomposition, SchwarzOperator, Trainer, TrainingConfig
from ddops.learning.data import make_rhs_sampler
from ddops.problems import poisson_2d


@pytest.mark.parametrize("basis", ["gdsw", "nicolaides"])
def test_training_peak_below_four_batches_and_parameters(basis):
    """The bound of issue's 256 x 256 target, at 48 x 48 (the layout scales the same way).

    The F, U batch, the operator's work buffers (the padded gather X, the blocks Y, the
    output) and the temporaries of a step must stay below 4 x (F, U + parameters), with
    the sampler's basis and solutions and the operator counted too.
    """
    n, B = 48, 128
    A = poisson_2d(n)
    d = Decomposition.from_grid((n, n), (4, 4), 1)
    tracemalloc.start()
    try:
        rhs = make_rhs_sampler(A, shape=(n, n), size=16)
        op = SchwarzOperator(d, local_rank=4, coarse_basis=basis,
                             A=A if basis == "gdsw" else None)
        trainer = Trainer(op, rhs, TrainingConfig(steps=2, batch_size=B, progress=False,
                                                  val_every=1000))
        held = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        trainer.run()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    batch = 2 * A.shape[0] * B * 8
    bound = 4 * (batch + op.theta.nbytes)
    assert peak < bound
    # what a step holds: F, U and the work buffers, with at most 15 % of temporaries on top
    workspace = sum(a.nbytes for a in op._ws[0].values())
    assert peak - held < 1.15 * (batch + workspace)
    assert np.isfinite(trainer.history["train"]).all()
