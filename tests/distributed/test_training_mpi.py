"""Data-parallel training under mpiexec equals serial training (to rounding).

``_workers_training.py`` trains on 2 and 4 ranks (batch 10 and 7: uneven splits),
resumes on 4 ranks a checkpoint written by 2, and runs the compare experiment
data-parallel; the serial references are computed here, in this process, with
the serial :class:`~ddops.learning.training.Trainer`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from ._mpi import HERE, launch

#: Relative tolerance of data-parallel against serial training: the two differ only in
#: the order of the column sums (measured about 2e-15 after 12 Adam steps).
RTOL = 1e-10


@pytest.fixture(scope="module", params=(2, 4), ids=lambda p: f"np{p}")
def worker_output(request, tmp_path_factory) -> tuple[int, Path]:
    out = tmp_path_factory.mktemp(f"training{request.param}")
    result = launch(HERE / "_workers_training.py", request.param, "--out", str(out))
    if result.returncode != 0:
        pytest.fail(f"mpiexec -n {request.param} _workers_training.py exited with "
                    f"{result.returncode}:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return request.param, out


@pytest.fixture(scope="module")
def workers():
    sys.path.insert(0, str(HERE))
    try:
        import _workers_training
    finally:
        sys.path.remove(str(HERE))
    return _workers_training


def _serial(workers, case: dict, steps=None):
    from ddops.learning.training import Trainer

    op, sampler, config, validation = workers.build(case)
    trainer = Trainer(op, sampler, config, validation=validation)
    result = trainer.run(steps)
    return trainer, result


def _close(a, b) -> float:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    assert a.shape == b.shape
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


@pytest.mark.parametrize("case", ("schwarz_wmse", "global_mse", "schwarz_columns"))
def test_data_parallel_equals_serial(worker_output, workers, case):
    nprocs, out = worker_output
    trainer, result = _serial(workers, workers.cases()[case])
    state = trainer.optimizer.state_dict()
    for P in sorted({2, nprocs}):
        got = np.load(out / f"{case}_P{P}.npz")
        assert _close(got["theta"], trainer.op.theta) < RTOL
        assert _close(got["exp_avg"], state["exp_avg_0"]) < RTOL
        assert _close(got["exp_avg_sq"], state["exp_avg_sq_0"]) < RTOL
        assert _close(got["hist_train"], result.history["train"]) < RTOL
        assert _close(got["hist_val"], result.history["val"]) < RTOL
        # the scheduler took the same decisions (it reduces the rate during this run)
        np.testing.assert_array_equal(got["hist_lr"], result.history["lr"])
        np.testing.assert_array_equal(got["hist_val_step"], result.history["val_step"])
    if case == "schwarz_wmse":
        assert len(set(result.history["lr"].tolist())) > 1


def test_resume_on_another_number_of_ranks(worker_output, workers):
    nprocs, out = worker_output
    if nprocs < 4:
        pytest.skip("the 2 -> 4 ranks resume runs in the four-rank job")
    trainer, result = _serial(workers, workers.cases()["schwarz_wmse"])  # uninterrupted
    got = np.load(out / "resumed_P4.npz")
    assert _close(got["theta"], trainer.op.theta) < RTOL
    assert _close(got["hist_train"], result.history["train"]) < RTOL
    np.testing.assert_array_equal(got["hist_lr"], result.history["lr"])


def test_one_allreduce_per_step(worker_output, workers):
    _, out = worker_output
    calls = json.loads((out / "calls.json").read_text())
    validations = workers.STEPS // 4  # val_every=4
    # the gradient and the loss of every step, the validation losses; one check of the replicas
    assert calls == {"Allreduce": workers.STEPS + validations, "allgather": 1}


def test_a_drifted_replica_is_noticed_on_every_rank(worker_output):
    nprocs, out = worker_output
    assert json.loads((out / "replicas.json").read_text()) == [True] * nprocs


def test_checkpoint_of_ranks_resumes_in_a_serial_trainer(worker_output, workers):
    from ddops.learning.training import Trainer

    _, out = worker_output
    # the final checkpoint (step 12) of the resumed run; a serial trainer accepts it as its own
    case = workers.cases()["schwarz_wmse"]
    path = out / "resume_checkpoint.npz"
    op, sampler, config, validation = workers.build(case, checkpoint=True)
    serial = Trainer(op, sampler, config, validation=validation)
    assert serial.load_checkpoint(path) == {}
    reference, _ = _serial(workers, case)
    assert serial.step == workers.STEPS
    assert _close(op.theta, reference.op.theta) < RTOL
    assert reference.rng.bit_generator.state == serial.rng.bit_generator.state


def test_compare_experiment_data_parallel_equals_serial(worker_output, workers, tmp_path):
    from ddops.experiments.compare import run_compare

    _, out = worker_output
    metrics = run_compare(workers.compare_config(str(tmp_path / "compare")), log=lambda s: None)
    got = json.loads((out / "compare_metrics.json").read_text())["models"]
    assert set(got) == set(metrics) == {"schwarz", "global_r3"}
    for name, entry in metrics.items():
        for key in ("final_train_loss", "val_wmse", "operator_fro_error"):
            assert abs(got[name][key] - entry[key]) <= RTOL * abs(entry[key]), (name, key)
        assert got[name]["status"] == "finished" and got[name]["steps"] == 6
        ours = np.load(out / f"compare_{name}.npz")["theta"]
        assert _close(ours, np.load(tmp_path / f"compare_{name}.npz")["theta"]) < RTOL
    # rank 0 wrote the files of a serial run, and no rank left anything else behind
    assert {p.name for p in out.glob("compare*")} == {p.name for p in tmp_path.glob("compare*")}


@pytest.mark.parametrize("case,status,message", [
    ("bad-prefix", 2, "ddops compare: error: save_prefix="),
    ("changed-lr", 2, "ddops compare: error: checkpoint "),
    ("checkpoint-fails", 3, "ddops: error: cannot write "),
])
def test_compare_errors_stop_every_rank_with_one_line(tmp_path, case, status, message):
    import re
    import shutil

    prefix = tmp_path / case
    if case == "bad-prefix":
        prefix.write_text("a file, not a directory")
    result = launch(HERE / "_workers_training_errors.py", 3, case, str(prefix), timeout=120)
    assert result.returncode == status, result.stderr[-3000:]
    assert result.stderr.count(message) == 1, result.stderr[-3000:]  # once: from rank 0
    assert "Traceback" not in result.stderr
    assert "unreachable" not in result.stdout
    if case == "changed-lr":
        assert "was written with lr=0.001, this run has lr=0.5" in result.stderr
    if case == "checkpoint-fails":  # the checkpoint went to the directory the line names
        rescue = Path(re.search(r"saved in (\S+) instead", result.stderr).group(1))
        try:
            assert (rescue / f"{case}_schwarz_checkpoint.npz").is_file()
        finally:
            shutil.rmtree(rescue, ignore_errors=True)


def test_ddops_compare_command_line_on_two_ranks(tmp_path):
    from ddops.experiments import cli

    flags = ["compare", "--n", "64", "--subdomains", "4", "--steps", "4", "--global-rank", "3",
             "--batch-size", "9", "--no-plots", "--checkpoint-every", "2"]
    result = launch(HERE / "_workers_training_cli.py", 2, *flags, "--save-prefix",
                    str(tmp_path / "mpi"), timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count(f"wrote {tmp_path / 'mpi'}_metrics.json") == 1  # rank 0 only
    assert cli.main([*flags, "--save-prefix", str(tmp_path / "serial")]) == 0
    ours = json.loads((tmp_path / "mpi_metrics.json").read_text())["models"]
    serial = json.loads((tmp_path / "serial_metrics.json").read_text())["models"]
    for name in ("schwarz", "global_r3"):
        for key in ("final_train_loss", "val_wmse"):
            assert abs(ours[name][key] - serial[name][key]) <= RTOL * abs(serial[name][key])
    # a setting that cannot work on two ranks: one line naming the flag, status 2
    bad = launch(HERE / "_workers_training_cli.py", 2, "compare", "--n", "64", "--batch-size",
                 "1", "--no-plots", "--save-prefix", str(tmp_path / "bad"), timeout=120)
    assert bad.returncode == 2
    line = "--batch-size (1) must be at least the number of MPI ranks (2)"
    assert bad.stderr.count(line) == 1, bad.stderr[-2000:]


def test_mpiexec_ddops_compare_takes_the_data_parallel_path(tmp_path):
    prefix = tmp_path / "c"
    result = launch("-mddops", 2, "compare", "--n", "64", "--subdomains", "4", "--steps", "2",
                    "--global-rank", "0", "--batch-size", "8", "--no-plots", "--save-prefix",
                    str(prefix), timeout=120)  # python -m ddops
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count(f"wrote {prefix}_metrics.json") == 1
    assert json.loads((tmp_path / "c_metrics.json").read_text())["models"]["schwarz"]["steps"] == 2
