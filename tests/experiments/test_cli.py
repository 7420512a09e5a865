import json
import subprocess
import sys

import pytest

from ddops.experiments.cli import main

REQUIRED = {"num_params", "rank_bound", "final_train_wmse", "val_wmse", "operator_fro_error",
            "operator_rel_fro_error", "best_rank_fro_error", "mean_rel_l2", "max_rel_l2",
            "train_seconds", "steps"}


def test_compare_small_run(tmp_path, capsys):
    prefix = str(tmp_path / "run")
    rc = main(["compare", "--n", "64", "--subdomains", "4", "--steps", "20", "--global-rank",
               "7", "3", "--batch-size", "16", "--save-prefix", prefix, "--no-progress"])
    assert rc == 0
    payload = json.loads((tmp_path / "run_metrics.json").read_text())
    models = payload["models"]
    assert set(models) == {"schwarz", "global_r7", "global_r3"}
    for entry in models.values():
        assert REQUIRED <= set(entry)
        assert entry["steps"] == 20
    assert models["schwarz"]["num_params"] == 2 * 4 * (18 + 21 + 21 + 18) + 2 * 3 * 3
    assert models["global_r7"]["num_params"] == 2 * 63 * 7
    for suffix in ("training_curves.png", "schwarz_matrices.png", "schwarz_blocks.png",
                   "schwarz_phiT.png", "schwarz_solutions.png", "global_r7_solutions.png",
                   "history.csv", "schwarz.npz"):
        assert (tmp_path / f"run_{suffix}").stat().st_size > 0
    lines = (tmp_path / "run_history.csv").read_text().splitlines()
    assert lines[0] == "model,step,train_loss,val_loss,lr" and len(lines) == 1 + 3 * 20


def test_v1_preset_and_no_plots(tmp_path):
    prefix = str(tmp_path / "v1")
    with pytest.warns(UserWarning, match="truncated"):  # v1 requests coarse rank 8 > n0 = 3
        assert main(["compare", "--preset", "v1", "--n", "64", "--subdomains", "4", "--steps", "5",
                     "--global-rank", "0", "--no-plots", "--save-prefix", prefix,
                     "--no-progress"]) == 0
    payload = json.loads((tmp_path / "v1_metrics.json").read_text())
    assert payload["config"]["kind"] == "dof" and payload["config"]["init"] == "naive"
    assert set(payload["models"]) == {"schwarz"}
    assert not list(tmp_path.glob("*.png"))


@pytest.mark.parametrize("argv,needle", [
    (["--n", "-3"], "--n"),
    (["--lr", "abc"], "--lr"),
    (["--kind", "cells"], "--kind"),
    (["--n", "10", "--subdomains", "20"], "--n must be"),
    (["--n", "64", "--subdomains", "32", "--overlap", "5"], "--overlap"),
    (["--bogus"], "unrecognized"),
    (["--workers", "0"], "--workers"),
    (["--n", "64", "--subdomains", "2", "--batch-size", "2", "--workers", "3"], "--workers"),
])
def test_bad_input_one_line(argv, needle, capsys, tmp_path):
    rc = main(["compare", *argv, "--save-prefix", str(tmp_path / "x"), "--steps", "1",
               "--no-plots"])
    err = capsys.readouterr().err
    assert rc == 2
    assert len(err.strip().splitlines()) == 1 and needle in err
    assert "Traceback" not in err


def test_module_entry_point_no_traceback():
    proc = subprocess.run([sys.executable, "-m", "ddops", "compare", "--steps", "x"],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_checkpoint_and_resume(tmp_path, capsys):
    prefix = str(tmp_path / "r")
    common = ["--n", "64", "--subdomains", "4", "--global-rank", "5", "--batch-size", "8",
              "--no-plots", "--no-progress", "--save-prefix", prefix, "--checkpoint-every", "10"]
    assert main(["compare", "--steps", "20", *common]) == 0
    assert (tmp_path / "r_schwarz_checkpoint.npz").exists()
    capsys.readouterr()
    # another learning rate changes the run: refused, naming the flag that accepts it
    assert main(["compare", "--steps", "30", "--resume", "--lr", "0.01", *common]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--lr=0.01" in err and "r_schwarz_checkpoint" in err
    assert err.endswith("; --allow-changed-settings continues anyway and records the changes")
    assert "allow changed settings to" not in err
    # --steps is the total: more steps continue the run, without the flag and no change
    assert main(["compare", "--steps", "30", "--resume", *common]) == 0
    assert "resumed from" in capsys.readouterr().out
    resumed = json.loads((tmp_path / "r_metrics.json").read_text())["models"]
    assert main(["compare", "--steps", "30", *common, "--save-prefix", str(tmp_path / "s")]) == 0
    straight = json.loads((tmp_path / "s_metrics.json").read_text())["models"]
    for name in ("schwarz", "global_r5"):
        assert resumed[name]["steps"] == 30
        assert resumed[name]["resumed_from_step"] == 20
        assert resumed[name]["changed_settings"] == {}
        assert straight[name]["resumed_from_step"] is None
        assert straight[name]["changed_settings"] == {}
        assert resumed[name]["final_train_loss"] == straight[name]["final_train_loss"]
        assert resumed[name]["val_wmse"] == straight[name]["val_wmse"]


def test_sweep_and_scaling_tables(tmp_path):
    prefix = str(tmp_path / "sw")
    assert main(["sweep", "--lrs", "1e-3", "1e-2", "--n", "64", "--subdomains", "4", "--steps",
                 "5", "--batch-size", "8", "--global-rank", "6", "--no-progress",
                 "--no-plots", "--save-prefix", prefix]) == 0
    rows = json.loads((tmp_path / "sw_sweep_metrics.json").read_text())["rows"]
    assert [(r["lr"], r["model"]) for r in rows] == [
        (1e-3, "schwarz"), (1e-3, "global_r6"), (1e-2, "schwarz"), (1e-2, "global_r6")]
    table = (tmp_path / "sw_sweep.md").read_text().splitlines()
    assert len(table) == 2 + 4 and "global_r6" in table[3]
    prefix = str(tmp_path / "sc")
    assert main(["scaling", "--ns", "64", "128", "--steps", "5", "--batch-size", "8",
                 "--no-progress", "--no-plots", "--save-prefix", prefix]) == 0
    rows = json.loads((tmp_path / "sc_scaling_metrics.json").read_text())["rows"]
    assert [(r["n"], r["N"], r["num_params"]) for r in rows] == [
        (64, 2, 2 * 4 * (34 + 34) + 2), (128, 4, 2 * 4 * (34 + 37 + 37 + 34) + 2 * 9)]


def test_compare_with_workers(tmp_path):
    prefix = str(tmp_path / "w")
    rc = main(["compare", "--n", "64", "--subdomains", "4", "--steps", "5", "--global-rank", "3",
               "--batch-size", "8", "--workers", "2", "--save-prefix", prefix, "--no-plots",
               "--no-progress"])
    assert rc == 0
    payload = json.loads((tmp_path / "w_metrics.json").read_text())
    assert payload["config"]["workers"] == 2


def test_coarse_basis_is_an_old_spelling_of_coarse(tmp_path, capsys):
    """``--coarse`` is the preconditioners' name; ``--coarse-basis`` works and warns once."""
    argv = ["compare", "--n", "64", "--subdomains", "2", "--steps", "1", "--global-rank", "0",
            "--no-plots", "--no-progress"]
    assert main([*argv, "--coarse-basis", "pou", "--save-prefix", str(tmp_path / "old")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == ["ddops compare: DeprecationWarning: --coarse-basis is deprecated; use "
                   "--coarse"]
    assert main([*argv, "--coarse", "pou", "--save-prefix", str(tmp_path / "new")]) == 0
    assert capsys.readouterr().err == ""
    for name in ("old", "new"):
        config = json.loads((tmp_path / f"{name}_metrics.json").read_text())["config"]
        assert config["coarse_basis"] == "pou"
    # the choices are the library's coarse bases
    from ddops.dd.coarse import ALL_COARSE_BASES
    from ddops.experiments.cli import build_parser

    sub = build_parser()._subparsers._group_actions[0].choices["compare"]
    coarse = next(a for a in sub._actions if "--coarse" in a.option_strings)
    assert tuple(coarse.choices) == ALL_COARSE_BASES and coarse.dest == "coarse_basis"
