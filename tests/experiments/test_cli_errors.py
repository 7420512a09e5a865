"""The command line at its edges: help and version, one-line errors that name flags,
output locations checked before training, results kept when a late write fails,
resume and divergence."""

from __future__ import annotations

import argparse
import errno
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import ddops
import ddops.experiments.compare as experiments
from ddops.experiments.cli import COMMANDS, build_parser, main
from ddops.experiments.compare import ExperimentConfig, build_models
from ddops.experiments.precond import report as precond_report
from ddops.experiments.precond import runners as precond_runners
from ddops.io import load_operator
from ddops.learning.data import FourierRHS
from ddops.learning.training import Trainer, TrainingConfig

SMALL = ["--n", "32", "--subdomains", "2", "--steps", "5", "--batch-size", "8",
         "--global-rank", "3", "--no-plots", "--no-progress"]


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def no_training(monkeypatch):
    """Fail the test if any training step is taken."""

    def refuse(self, *args, **kwargs):
        raise AssertionError("training started")

    monkeypatch.setattr(Trainer, "run", refuse)
    monkeypatch.setattr(precond_runners, "solve_with_history", refuse)


@pytest.fixture
def system_tmp(tmp_path, monkeypatch):
    """A private system temporary directory (where rescued results go)."""
    folder = tmp_path / "systmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


# -- help, version, no abbreviation -----------------------------------------------------------
def test_version(capsys):
    assert main(["--version"]) == 0
    out = capsys.readouterr().out
    assert out == f"ddops {importlib.metadata.version('ddops')}\n"
    assert ddops.__version__ == importlib.metadata.version("ddops")


def test_no_command_prints_help_and_runs_nothing(capsys, no_training, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main([]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("usage: ddops") and captured.err == ""
    for command in COMMANDS:
        assert command in captured.out
    assert not list(tmp_path.iterdir())


def test_module_without_command_prints_help(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "ddops"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: ddops")
    assert not list(tmp_path.iterdir())


def test_flags_without_command_are_refused(capsys, no_training):
    assert main(["--n", "64"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "command" in line and "compare" in line


@pytest.mark.parametrize("argv,flag", [
    (["compare", "--step", "10"], "--step"),
    (["compare", "--lr", "1e-3", "--batch", "8"], "--batch"),
    (["sweep", "--lr", "1e-3"], "--lr"),  # sweep has --lrs; --lr would be ignored
    (["scaling", "--n", "64"], "--n"),  # scaling has --ns; N = n/32
    (["scaling", "--subdomains", "4"], "--subdomains"),
    (["precond", "--train-step", "3"], "--train-step"),
    (["--vers"], "--vers"),
])
def test_no_abbreviations_and_no_ignored_flags(argv, flag, capsys, no_training):
    assert main(argv) == 2
    line = _one_line(capsys.readouterr().err)
    assert flag in line


def _subparsers():
    parser = build_parser()
    return parser._subparsers._group_actions[0].choices


def test_every_command_has_description_and_example():
    commands = _subparsers()
    assert set(commands) == set(COMMANDS)
    for name, p in commands.items():
        assert p.description and len(p.description) > 40
        assert f"ddops {name}" in p.epilog and "exit status" in p.epilog
        assert not p.allow_abbrev
    assert not build_parser().allow_abbrev


def test_every_flag_has_help_with_its_default():
    for name, p in _subparsers().items():
        for action in p._actions:
            if action.dest == "help" or action.help == argparse.SUPPRESS:  # old spellings
                continue
            assert action.help and "default" in action.help, (name, action.option_strings)
        overlap = next(a for a in p._actions if "--overlap" in a.option_strings)
        assert "elements" in overlap.help and "unknowns" in overlap.help


def _stated_default(help_text: str) -> str:
    m = re.search(r"default (\S+?)[;:),]?(?:\s|$)", help_text)
    assert m, help_text
    return m.group(1)


@pytest.mark.parametrize("command", ["compare", "sweep", "scaling"])
def test_stated_defaults_are_the_applied_ones(command):
    from ddops.experiments.cli import config_from_args

    parser = build_parser()
    applied = config_from_args(parser.parse_args([command]), "unused")
    p = _subparsers()[command]
    checked = 0
    for action in p._actions:
        field = action.dest
        if (not action.option_strings or not hasattr(applied, field) or field == "save_prefix"
                or action.help == argparse.SUPPRESS):  # an old spelling
            continue
        value = getattr(applied, field)
        if value is None or isinstance(value, (tuple, bool)):
            continue
        stated = _stated_default(action.help)
        if isinstance(value, float):
            assert float(stated) == value, (field, stated, value)
        else:
            assert stated == str(value), (field, stated, value)
        checked += 1
    assert checked >= 12
    # the v1 preset's values are stated too
    v1 = config_from_args(parser.parse_args([command, "--preset", "v1"]), "unused")
    kind = next(a for a in p._actions if "--kind" in a.option_strings)
    assert f"--preset v1: {v1.kind}" in kind.help


def test_precond_stated_defaults_are_the_applied_ones():
    p = _subparsers()["precond"]
    args = build_parser().parse_args(["precond"])
    checked = 0
    for action in p._actions:
        if action.default is None or action.dest in ("help", "train", "plots", "progress"):
            continue
        stated = _stated_default(p._get_formatter()._expand_help(action))
        value = getattr(args, action.dest)
        if isinstance(value, float):
            assert float(stated) == value, action.dest
        else:
            assert stated == str(value), action.dest
        checked += 1
    assert checked >= 14


# -- one-line errors that name flags ----------------------------------------------------------
_UNFLAGGED = ("modes", "val_size", "eval_size", "val_every", "interface_nodes", "coarse=False",
              "Decomposition(", "base=")


def _check_names_flags(line: str, needle: str) -> None:
    assert needle in line, line
    unquoted = re.sub(r"'[^']*'|\"[^\"]*\"", "", line)  # choices and file names
    for word in _UNFLAGGED:
        assert word not in unquoted, line
    # setting names are spelled as flags (--batch-size), never as fields (batch_size)
    assert not re.findall(r"(?<![-\w])[a-z]+_[a-z_]+\b", unquoted), line


@pytest.mark.parametrize("argv,needle", [
    (["compare", "--n", "4"], "--n must be >= 17"),
    (["compare", "--n", "16"], "--n must be >= 17"),
    (["compare", "--n", "15", "--kind", "dof"], "--n must be >= 16"),
    (["compare", "--n", "64", "--subdomains", "1"], "--coarse='interface_hats'"),
    (["compare", "--n", "64", "--subdomains", "65"], "--n must be"),
    (["compare", "--n", "64", "--subdomains", "4", "--overlap", "40"], "--overlap"),
    (["compare", "--n", "64", "--subdomains", "4", "--kind", "dof", "--overlap", "40"],
     "--overlap"),
    (["compare", "--steps", "0"], "--steps"),
    (["compare", "--lr", "0"], "--lr"),
    (["compare", "--lr", "nan"], "--lr"),
    (["compare", "--batch-size", "0"], "--batch-size"),
    (["compare", "--batch-size", "2", "--workers", "3"], "--workers"),
    (["compare", "--seed", "-1"], "--seed"),
    (["compare", "--train-seed", "x"], "--train-seed"),
    (["compare", "--test-seed", "1.5"], "--test-seed"),
    (["compare", "--local-rank", "0"], "--local-rank"),
    (["compare", "--coarse-rank", "0"], "--coarse-rank"),
    (["compare", "--global-rank", "-1"], "--global-rank"),
    (["compare", "--global-rank"], "--global-rank"),
    (["compare", "--checkpoint-every", "-1"], "--checkpoint-every"),
    (["compare", "--exact-limit", "0"], "--exact-limit"),
    (["compare", "--partition", "middle"], "--partition"),
    (["compare", "--coarse-basis", "hats"], "--coarse-basis"),
    (["compare", "--coarse", "hats"], "--coarse"),
    (["compare", "--rhs-mode", "low"], "--rhs-mode"),
    (["compare", "--loss", "energy"], "--loss"),
    (["compare", "--optimizer", "sgd"], "--optimizer"),
    (["compare", "--dtype", "float16"], "--dtype"),
    (["compare", "--init", "zero"], "--init"),
    (["compare", "--preset", "v3"], "--preset"),
    (["compare", "--save-prefix", ""], "--save-prefix must not be empty"),
    (["sweep", "--lrs", "0"], "--lrs"),
    (["sweep", "--lrs", "1e-3", "1.2e-3"], "--lrs"),
    (["sweep", "--n", "8"], "--n must be >= 17"),
    (["scaling", "--ns", "4"], "--ns"),
    (["scaling", "--ns", "32"], "--ns=32"),
    (["scaling", "--ns", "64", "64"], "--ns"),
    (["scaling", "--ns", "64", "--overlap", "40"], "--overlap"),
    (["scaling", "--ns", "1"], "--ns"),
    (["precond", "--n", "8"], "--n must be >= 17"),
    (["precond", "--n", "1"], "--n"),
    (["precond", "--subdomains", "1"], "--subdomains must be >= 2"),
    (["precond", "--n", "64", "--subdomains", "4", "--overlap", "40"], "--overlap"),
    (["precond", "--n", "64", "--subdomains", "65"], "--n must be"),
    (["precond", "--rtol", "1"], "--rtol"),
    (["precond", "--restart", "0"], "--restart"),
    (["precond", "--maxiter", "0"], "--maxiter"),
    (["precond", "--check-every", "0"], "--check-every"),
    (["precond", "--batch-size", "0"], "--batch-size"),
    (["precond", "--blas-threads", "-1"], "--blas-threads"),
    (["precond", "--learned-base", "none"], "--learned-base"),
    (["precond", "--local-rank", "0"], "--local-rank"),
    (["precond", "--coarse-rank", "0"], "--coarse-rank"),
    (["precond", "--save-prefix", ""], "--save-prefix must not be empty"),
])
def test_bad_values_one_line_naming_the_flag(argv, needle, capsys, tmp_path, no_training):
    out = tmp_path / "out"
    extra = [] if "--save-prefix" in argv else ["--save-prefix", str(out / "x")]
    rc = main([*argv, *extra, "--no-plots", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2
    _check_names_flags(_one_line(err), needle)
    assert not out.exists() or not list(out.iterdir())


# -- output locations, checked before training ------------------------------------------------
def _compare(prefix, *extra):
    return main(["compare", *SMALL, "--save-prefix", str(prefix), *extra])


@pytest.mark.parametrize("command", ["compare", "sweep", "scaling", "precond"])
def test_parent_is_a_file_refused_before_training(command, tmp_path, capsys, no_training):
    blocker = tmp_path / "file.txt"
    blocker.write_text("not a directory")
    for prefix in (blocker / "run", blocker / "sub" / "run"):
        rc = main([command, "--save-prefix", str(prefix), "--no-plots", "--no-progress"])
        assert rc == 2
        line = _one_line(capsys.readouterr().err)
        assert "--save-prefix" in line and "is not a directory" in line and "file.txt" in line
    assert blocker.read_text() == "not a directory"


def test_unwritable_directory_refused_before_training(tmp_path, capsys, no_training,
                                                      monkeypatch):
    out = tmp_path / "ro"
    out.mkdir()
    real = tempfile.mkstemp

    def mkstemp(*args, dir=None, **kwargs):
        if dir is not None and Path(dir) == out:
            raise PermissionError(errno.EACCES, "Permission denied", str(dir))
        return real(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    assert _compare(out / "run") == 2
    line = _one_line(capsys.readouterr().err)
    assert "--save-prefix" in line and "Permission denied" in line and str(out) in line


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                    reason="needs POSIX permissions and a user that they apply to")
def test_read_only_directory_refused_before_training(tmp_path, capsys, no_training):
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(0o500)
    try:
        assert _compare(out / "run") == 2
    finally:
        out.chmod(0o700)
    assert "--save-prefix" in _one_line(capsys.readouterr().err)


def test_output_name_that_is_a_directory_refused(tmp_path, capsys, no_training):
    (tmp_path / "run_metrics.json").mkdir()
    assert _compare(tmp_path / "run") == 2
    line = _one_line(capsys.readouterr().err)
    assert "run_metrics.json" in line and "is a directory" in line


def test_missing_directories_are_created(tmp_path):
    prefix = tmp_path / "a" / "b" / "run"
    assert _compare(prefix) == 0
    assert (tmp_path / "a" / "b" / "run_metrics.json").exists()
    assert not [p for p in (tmp_path / "a" / "b").iterdir() if p.name.endswith(".tmp")]


# -- a late write failure keeps the results ---------------------------------------------------
def _failing(real, out: Path, after: int):
    """``real`` that raises ENOSPC for files in ``out`` after ``after`` successful calls."""
    calls = {"n": 0}

    def write(*args, **kwargs):
        path = Path(args[1] if real.__name__ in ("save_operator", "save_checkpoint")
                    else args[0])
        if path.parent == out:
            calls["n"] += 1
            if calls["n"] > after:
                raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(*args, **kwargs)

    write.__name__ = real.__name__
    return write


def _rescue_dir(line: str, system_tmp: Path) -> Path:
    m = re.search(r"saved in (\S+) instead", line)
    assert m, line
    folder = Path(m.group(1))
    assert folder.parent == system_tmp and folder.is_dir()
    return folder


def test_late_write_failure_keeps_trained_models(tmp_path, capsys, monkeypatch, system_tmp):
    out = tmp_path / "out"
    out.mkdir()
    # the first model's operator is written, the second's fails (disk full)
    monkeypatch.setattr(experiments, "save_operator",
                        _failing(experiments.save_operator, out, after=1))
    assert _compare(out / "run") == 3
    line = _one_line(capsys.readouterr().err)
    assert "No space left on device" in line and "run_global_r3.npz" in line
    rescue = _rescue_dir(line, system_tmp)
    payload = json.loads((rescue / "run_metrics.json").read_text())
    assert set(payload["models"]) == {"schwarz", "global_r3"}
    assert payload["rescued_from"] == str(out / "run")
    assert len((rescue / "run_history.csv").read_text().splitlines()) == 1 + 2 * 5
    # the rescued operators are the trained ones: a clean run gives the same parameters
    monkeypatch.undo()
    assert _compare(tmp_path / "clean") == 0
    for name in ("schwarz", "global_r3"):
        rescued = load_operator(rescue / f"run_{name}.npz")
        clean = load_operator(tmp_path / f"clean_{name}.npz")
        np.testing.assert_array_equal(rescued.theta, clean.theta)
        untrained = build_models(replace(ExperimentConfig(), global_ranks=(3,), n=32,
                                         subdomains=2),
                                 ddops.Decomposition1D(32, 2))[name]
        assert not np.array_equal(rescued.theta, untrained.theta)


def test_checkpoint_write_failure_mid_training_keeps_the_state(tmp_path, capsys, monkeypatch,
                                                               system_tmp):
    out = tmp_path / "out"
    out.mkdir()
    # the schwarz model's checkpoint at step 5 is written, the one at step 10 fails
    monkeypatch.setattr(Trainer, "save_checkpoint",
                        _failing(Trainer.save_checkpoint, out, after=1))
    rc = main(["compare", *SMALL, "--steps", "20", "--checkpoint-every", "5",
               "--save-prefix", str(out / "run")])
    assert rc == 3
    line = _one_line(capsys.readouterr().err)
    rescue = _rescue_dir(line, system_tmp)
    monkeypatch.undo()
    d = ddops.Decomposition1D(32, 2)
    op = build_models(replace(ExperimentConfig(), global_ranks=(3,), n=32, subdomains=2), d)
    trainer = Trainer(op["schwarz"], FourierRHS(32),
                      TrainingConfig(steps=20, batch_size=8, progress=False,
                                     checkpoint_every=5))
    trainer.load_checkpoint(rescue / "run_schwarz_checkpoint.npz")
    assert trainer.step == 10
    assert not (rescue / "run_metrics.json").exists()  # no model had finished


def test_sweep_late_failure_keeps_the_rows_so_far(tmp_path, capsys, monkeypatch, system_tmp):
    out = tmp_path / "out"
    out.mkdir()
    # the first learning rate's comparison is written (one metrics file per model), the
    # second's first metrics file fails
    monkeypatch.setattr(experiments, "atomic_write_json",
                        _failing(experiments.atomic_write_json, out, after=2))
    rc = main(["sweep", "--lrs", "1e-3", "1e-2", *[a for a in SMALL],
               "--save-prefix", str(out / "sw")])
    assert rc == 3
    rescue = _rescue_dir(_one_line(capsys.readouterr().err), system_tmp)
    rows = json.loads((rescue / "sw_sweep_metrics.json").read_text())["rows"]
    assert [(r["lr"], r["model"]) for r in rows] == [(1e-3, "schwarz"), (1e-3, "global_r3")]
    assert (rescue / "sw_lr1em2_schwarz.npz").exists()
    assert (out / "sw_lr1em3_metrics.json").exists()


def test_precond_late_failure_keeps_the_results(tmp_path, capsys, monkeypatch, system_tmp):
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setattr(precond_report, "atomic_write_json",
                        _failing(precond_report.atomic_write_json, out, after=0))
    rc = main(["precond", "--n", "64", "--no-train", "--no-plots", "--no-progress",
               "--save-prefix", str(out / "pc")])
    assert rc == 3
    rescue = _rescue_dir(_one_line(capsys.readouterr().err), system_tmp)
    payload = json.loads((rescue / "pc_results.json").read_text())
    assert {r["method"] for r in payload["rows"]} >= {"none", "two_level", "paper"}
    assert (rescue / "pc_table.md").read_text().count("|") > 20


# -- resume -----------------------------------------------------------------------------------
def test_resume_without_checkpoint_says_it_starts_fresh(tmp_path, capsys):
    assert _compare(tmp_path / "r", "--resume") == 0
    out = capsys.readouterr().out
    fresh = [line for line in out.splitlines() if "starting fresh" in line]
    assert len(fresh) == 2 and "r_schwarz_checkpoint.npz" in fresh[0]
    models = json.loads((tmp_path / "r_metrics.json").read_text())["models"]
    assert all(e["resumed_from_step"] is None for e in models.values())


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04 truncated", os.urandom(256)])
def test_damaged_checkpoint_one_line_before_training(content, tmp_path, capsys, no_training):
    (tmp_path / "r_global_r3_checkpoint.npz").write_bytes(content)
    assert _compare(tmp_path / "r", "--resume", "--checkpoint-every", "5") == 2
    line = _one_line(capsys.readouterr().err)
    assert "r_global_r3_checkpoint.npz" in line


def test_changed_settings_refused_or_recorded(tmp_path, capsys):
    prefix = tmp_path / "r"
    assert _compare(prefix, "--checkpoint-every", "5") == 0
    capsys.readouterr()
    assert _compare(prefix, "--checkpoint-every", "5", "--resume", "--lr", "0.01") == 2
    line = _one_line(capsys.readouterr().err)
    assert "lr" in line and "0.001" in line and "0.01" in line
    assert _compare(prefix, "--checkpoint-every", "5", "--resume", "--lr", "0.01",
                    "--allow-changed-settings") == 0
    models = json.loads((tmp_path / "r_metrics.json").read_text())["models"]
    for entry in models.values():
        assert entry["changed_settings"] == {"lr": [0.001, 0.01]}
        assert entry["resumed_from_step"] == 5 and entry["steps"] == 5


# -- divergence -------------------------------------------------------------------------------
def test_real_divergence_exits_nonzero(tmp_path, capsys):
    rc = main(["compare", *SMALL, "--lr", "1e6", "--steps", "150",
               "--save-prefix", str(tmp_path / "d")])
    assert rc == 1
    line = _one_line(capsys.readouterr().err)
    assert "diverged" in line
    models = json.loads((tmp_path / "d_metrics.json").read_text())["models"]
    assert {e["status"] for e in models.values()} == {"diverged"}
    assert all(e["message"] for e in models.values())


@pytest.fixture
def schwarz_diverges_at_high_lr(monkeypatch):
    """The Schwarz model 'diverges' at lr >= 1e-2 (the others train normally)."""
    real = Trainer.run

    def run(self, *args, **kwargs):
        result = real(self, *args, **kwargs)
        if isinstance(self.op, ddops.SchwarzOperator) and self.config.lr >= 1e-2:
            return replace(result, status="diverged",
                           message="SchwarzOperator: loss blew up; training stopped as diverged")
        return result

    monkeypatch.setattr(Trainer, "run", run)


def test_compare_diverged_model_recorded_others_run(tmp_path, capsys,
                                                    schwarz_diverges_at_high_lr):
    assert _compare(tmp_path / "d", "--lr", "1e-2") == 1
    line = _one_line(capsys.readouterr().err)
    assert "schwarz" in line and "diverged" in line and "blew up" in line
    models = json.loads((tmp_path / "d_metrics.json").read_text())["models"]
    assert models["schwarz"]["status"] == "diverged"
    assert models["global_r3"]["status"] == "finished" and models["global_r3"]["steps"] == 5


@pytest.mark.parametrize("keep_going", [False, True])
def test_sweep_stops_at_divergence_unless_keep_going(keep_going, tmp_path, capsys,
                                                     schwarz_diverges_at_high_lr):
    argv = ["sweep", "--lrs", "1e-3", "1e-2", "1e-1", *SMALL, "--save-prefix",
            str(tmp_path / "sw")] + (["--keep-going"] if keep_going else [])
    rc = main(argv)
    captured = capsys.readouterr()
    rows = json.loads((tmp_path / "sw_sweep_metrics.json").read_text())["rows"]
    status = [(r["lr"], r["model"], r["status"]) for r in rows]
    table = (tmp_path / "sw_sweep.md").read_text()
    if keep_going:
        assert rc == 0 and captured.err == ""
        assert status == [(1e-3, "schwarz", "finished"), (1e-3, "global_r3", "finished"),
                          (1e-2, "schwarz", "diverged"), (1e-2, "global_r3", "finished"),
                          (1e-1, "schwarz", "diverged"), (1e-1, "global_r3", "finished")]
    else:
        assert rc == 1
        line = _one_line(captured.err)
        assert "lr=0.01" in line and "--keep-going" in line
        assert status == [(1e-3, "schwarz", "finished"), (1e-3, "global_r3", "finished"),
                          (1e-2, "schwarz", "diverged"), (1e-2, "global_r3", "finished")]
        assert not (tmp_path / "sw_lr1em1_metrics.json").exists()
    assert table.count("diverged") == sum(s == "diverged" for *_, s in status)


def test_scaling_stops_at_divergence_unless_keep_going(tmp_path, capsys,
                                                       schwarz_diverges_at_high_lr):
    argv = ["scaling", "--ns", "64", "128", "--lr", "1e-2", "--steps", "3", "--batch-size",
            "8", "--no-plots", "--no-progress", "--save-prefix", str(tmp_path / "sc")]
    assert main(argv) == 1
    assert "n=64" in _one_line(capsys.readouterr().err)
    rows = json.loads((tmp_path / "sc_scaling_metrics.json").read_text())["rows"]
    assert [(r["n"], r["status"]) for r in rows] == [(64, "diverged")]
    assert main([*argv, "--keep-going"]) == 0
    rows = json.loads((tmp_path / "sc_scaling_metrics.json").read_text())["rows"]
    assert [(r["n"], r["status"]) for r in rows] == [(64, "diverged"), (128, "diverged")]


def test_rescue_directory_is_fresh_per_failure(tmp_path, capsys, monkeypatch, system_tmp):
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setattr(experiments, "save_operator",
                        _failing(experiments.save_operator, out, after=0))
    assert _compare(out / "a") == 3
    first = _rescue_dir(_one_line(capsys.readouterr().err), system_tmp)
    assert _compare(out / "a") == 3
    second = _rescue_dir(_one_line(capsys.readouterr().err), system_tmp)
    assert first != second
    shutil.rmtree(first)
    assert (second / "a_metrics.json").exists()


def test_figures_mark_diverged_and_unconverged_runs(tmp_path, monkeypatch,
                                                    schwarz_diverges_at_high_lr):
    import ddops.experiments.plotting as plotting

    seen = {}
    real_curves = plotting.plot_training_curves
    real_residuals = plotting.plot_residual_histories

    def curves(histories, *args, **kwargs):
        seen["curves"] = {k: h.get("status") for k, h in histories.items()}
        return real_curves(histories, *args, **kwargs)

    def residuals(histories, *args, **kwargs):
        seen.setdefault("residuals", []).append(dict(kwargs.get("converged") or {}))
        return real_residuals(histories, *args, **kwargs)

    monkeypatch.setattr(plotting, "plot_training_curves", curves)
    monkeypatch.setattr(plotting, "plot_residual_histories", residuals)
    monkeypatch.setattr(experiments, "_plot_model", lambda *args: [])
    args = [a for a in SMALL if a != "--no-plots"]
    assert main(["compare", *args, "--lr", "1e-2", "--save-prefix", str(tmp_path / "d")]) == 1
    assert seen["curves"] == {"schwarz": "diverged", "global_r3": "finished"}
    # a cap of 3 iterations: CG without a preconditioner does not converge, Jacobi neither
    assert main(["precond", "--n", "64", "--no-train", "--no-progress", "--maxiter", "3",
                 "--save-prefix", str(tmp_path / "pc")]) == 0
    rows = json.loads((tmp_path / "pc_results.json").read_text())["rows"]
    expected = {r["label"]: r["converged"] for r in rows}
    assert not all(expected.values())
    assert seen["residuals"][0] == expected


@pytest.mark.parametrize("command", ["sweep", "scaling"])
def test_sweep_and_scaling_refuse_mpi_ranks(command, monkeypatch, capsys):
    # under mpiexec every rank would run the whole sweep and write the same files
    monkeypatch.setenv("PMI_SIZE", "2")
    assert main([command, "--steps", "1", "--no-plots"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "runs in one process" in err[0] and "2 ranks" in err[0]
