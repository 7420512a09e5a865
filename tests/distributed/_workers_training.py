"""Worker of tests/distributed/test_training_mpi.py, run under ``mpiexec -n P``.

``python _workers_training.py --out OUTDIR`` trains the cases of :func:`cases`
with data-parallel training on the whole communicator and on a two-rank
sub-communicator, resumes a checkpoint written by two ranks on all ranks, and
writes what rank 0 (of each run) holds to ``OUTDIR/<case>_P<ranks>.npz``; then
runs the ``ddops compare`` experiment of :func:`compare_config` data-parallel
with the prefix ``OUTDIR/compare``.  The test compares these files with
serial training and the serial experiment in its own process.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from ddops.dd.decomposition import Decomposition1D
from ddops.distributed.comm import guard, world
from ddops.distributed.training import DataParallelTrainer, run_compare
from ddops.experiments.compare import ExperimentConfig
from ddops.learning.data import FourierRHS
from ddops.learning.training import TrainingConfig
from ddops.operators import GlobalLowRankOperator, SchwarzOperator

N_ELEMENTS = 64
STEPS = 12
CHECKPOINT_STEP = 8


class WholeBatchSampler:
    """A sampler that is not a stock FourierRHS: the trainer draws whole batches."""

    def __init__(self, n: int) -> None:
        self.inner = FourierRHS(n)

    def __repr__(self) -> str:
        return f"WholeBatchSampler({self.inner!r})"

    def sample(self, batch_size, rng):
        return self.inner.sample(batch_size, rng)


class ColumnSampler(WholeBatchSampler):
    """A sampler that forms only the columns asked for (``sample_columns``)."""

    def __repr__(self) -> str:
        return f"ColumnSampler({self.inner!r})"

    column_calls = 0

    def sample_columns(self, batch_size, rng, start, stop):
        self.column_calls += 1
        return self.inner.synthesize(self.inner.sample_coefficients(batch_size, rng)[:, start:stop])


class CountingComm:
    """A communicator that counts its collective calls by name (the rest is forwarded)."""

    def __init__(self, comm) -> None:
        self.comm, self.calls = comm, {}

    def __getattr__(self, name):
        attribute = getattr(self.comm, name)
        if name[0].isupper() and name not in ("Get_rank", "Get_size") or name in (
                "allgather", "bcast", "allreduce"):
            def counted(*args, **kwargs):
                self.calls[name] = self.calls.get(name, 0) + 1
                return attribute(*args, **kwargs)
            return counted
        return attribute


def cases() -> dict[str, dict]:
    """The trainings compared with serial training (same settings in the test)."""
    return {
        # wmse with the blockwise FourierRHS path, batch 10 (uneven on 4 ranks), scheduler
        "schwarz_wmse": dict(model="schwarz", loss="wmse", batch_size=10, sampler="fourier",
                             optimizer="adamw", scheduler=True),
        # mse with a sampler that draws whole batches, Adam, 7 columns
        "global_mse": dict(model="global", loss="mse", batch_size=7, sampler="whole",
                           optimizer="adam", scheduler=False),
        # a sampler that draws the batch's random numbers and forms the rank's columns
        "schwarz_columns": dict(model="schwarz", loss="wmse", batch_size=9, sampler="columns",
                                optimizer="adamw", scheduler=False),
    }


def compare_config(prefix: str) -> ExperimentConfig:
    """A small comparison: Schwarz and one global baseline, checkpoints, batch 10."""
    return ExperimentConfig(n=64, subdomains=4, steps=6, global_ranks=(3,), batch_size=10,
                            val_size=9, eval_size=4, val_every=3, checkpoint_every=3,
                            plots=False, progress=False, save_prefix=prefix)


def build(case: dict, checkpoint=None):
    """Operator, sampler, config and validation set of a case (the same on every rank)."""
    d = Decomposition1D(N_ELEMENTS, 4, 2)
    if case["model"] == "schwarz":
        op = SchwarzOperator(d, local_rank=3, seed=1)
    else:
        op = GlobalLowRankOperator(d.num_dofs, 5, seed=1, h=d.h)
    sampler = {"fourier": FourierRHS, "whole": WholeBatchSampler,
               "columns": ColumnSampler}[case["sampler"]](N_ELEMENTS)
    config = TrainingConfig(steps=STEPS, batch_size=case["batch_size"], lr=3e-2,
                            loss=case["loss"], optimizer=case["optimizer"],
                            scheduler=case["scheduler"], plateau_patience=2, val_every=4,
                            checkpoint_every=4 if checkpoint else 0, progress=False)
    validation = FourierRHS(N_ELEMENTS).sample(9, np.random.default_rng(5))
    return op, sampler, config, validation


def record(path: Path, trainer, result) -> None:
    state = trainer.optimizer.state_dict()
    np.savez(path, theta=trainer.op.theta, exp_avg=state["exp_avg_0"],
             exp_avg_sq=state["exp_avg_sq_0"], lr=trainer.optimizer.lr,
             **{f"hist_{k}": v for k, v in result.history.items()})


def main(outdir: Path) -> None:
    comm = world()
    rank, size = comm.Get_rank(), comm.Get_size()
    pair = comm.Split(0 if rank < 2 else 1, rank)  # ranks 0, 1: a two-rank run
    for name, case in cases().items():
        for sub in (comm, pair):
            if sub is pair and (rank >= 2 or size == 2):
                continue
            op, sampler, config, validation = build(case)
            trainer = DataParallelTrainer(op, sampler, config, validation=validation, comm=sub)
            result = trainer.run()
            if case["sampler"] == "columns":  # the rank's columns only, once per step
                assert sampler.column_calls == STEPS, sampler.column_calls
            if sub.Get_rank() == 0:
                record(outdir / f"{name}_P{sub.Get_size()}.npz", trainer, result)
    # the messages of a run: one Allreduce per step and per validation, nothing else but the
    # final check of the replicas
    op, sampler, config, validation = build(cases()["schwarz_wmse"])
    counting = CountingComm(comm)
    DataParallelTrainer(op, sampler, config, validation=validation, comm=counting).run()
    if rank == 0:
        (outdir / "calls.json").write_text(json.dumps(counting.calls))
    # a checkpoint written by two ranks at step 8, resumed by every rank to step 12
    case = cases()["schwarz_wmse"]
    ckpt = outdir / "resume_checkpoint.npz"
    if rank < 2:
        op, sampler, config, validation = build(case, checkpoint=True)
        trainer = DataParallelTrainer(op, sampler, config, validation=validation,
                                      checkpoint=ckpt, comm=pair)
        trainer.run(CHECKPOINT_STEP)
    comm.Barrier()
    op, sampler, config, validation = build(case, checkpoint=True)
    trainer = DataParallelTrainer(op, sampler, config, validation=validation, checkpoint=ckpt,
                                  comm=comm)
    trainer.load_checkpoint(ckpt)
    assert trainer.step == CHECKPOINT_STEP
    result = trainer.run()
    if rank == 0:
        record(outdir / f"resumed_P{size}.npz", trainer, result)
    # a replica that drifted (here: one parameter changed on the last rank) is noticed by all
    trainer.op.theta[0] += float(rank == size - 1)
    try:
        trainer.verify_replicas()
        noticed = False
    except RuntimeError as exc:
        noticed = f"ranks [{size - 1}]" in str(exc)
    flags = comm.allgather(noticed)
    if rank == 0:
        (outdir / "replicas.json").write_text(json.dumps(flags))
    run_compare(compare_config(str(outdir / "compare")), log=lambda line: None)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    with guard():
        main(Path(parser.parse_args().out))
