"""Worker of the error tests of tests/distributed/test_training_mpi.py (under ``mpiexec``).

``python _workers_training_errors.py CASE PREFIX`` runs the data-parallel
compare experiment the way the command line does (a ``ValueError`` becomes
one line on stderr and exit status 2) with a failure:

* ``bad-prefix``: the output prefix lies under a file (refused before training);
* ``changed-lr``: resume a checkpoint written with another learning rate;
* ``checkpoint-fails``: rank 0 cannot write the checkpoint during training
  (the disk is "full" for files under PREFIX), so the job ends with status 3.
"""

from __future__ import annotations

import errno
import sys
from dataclasses import replace

import ddops.learning.training as training
from ddops.distributed.comm import world
from ddops.distributed.training import run_compare
from ddops.experiments.compare import ExperimentConfig


def config(prefix: str, **changes) -> ExperimentConfig:
    return replace(ExperimentConfig(n=64, subdomains=4, steps=4, global_ranks=(), batch_size=8,
                                    val_size=4, eval_size=2, checkpoint_every=2, plots=False,
                                    progress=False, save_prefix=prefix), **changes)


def cli_like(c: ExperimentConfig) -> None:
    try:
        run_compare(c, log=lambda line: None)
    except (ValueError, TypeError) as exc:
        print(f"ddops compare: error: {str(exc).splitlines()[0]}", file=sys.stderr, flush=True)
        sys.exit(2)


def main(case: str, prefix: str) -> None:
    if case == "bad-prefix":
        cli_like(config(prefix + "/below_a_file/run"))
    elif case == "changed-lr":
        run_compare(config(prefix), log=lambda line: None)
        world().Barrier()
        cli_like(config(prefix, lr=0.5, resume=True))
    elif case == "checkpoint-fails":
        if world().Get_rank() == 0:
            original = training.atomic_savez

            def full_disk(path, **arrays):
                if str(path).startswith(prefix):
                    raise OSError(errno.ENOSPC, "No space left on device", str(path))
                return original(path, **arrays)

            training.atomic_savez = full_disk
        cli_like(config(prefix))
    print(f"rank {world().Get_rank()} unreachable", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
