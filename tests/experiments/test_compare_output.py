"""What ``ddops compare`` (and ``sweep``/``scaling``) tell the user: every file written, what
the columns of the model lines mean, and progress bars only on a terminal."""

from __future__ import annotations

import io
import os
import re

import pytest

from ddops.experiments.cli import build_parser, main

TINY = ["--n", "32", "--subdomains", "2", "--steps", "3", "--batch-size", "8",
        "--global-rank", "3"]


def _wrote(out: str) -> list[str]:
    return [line[len("wrote "):] for line in out.splitlines() if line.startswith("wrote ")]


def _files(folder) -> set[str]:
    return {str(p) for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("extra", [[], ["--no-plots", "--checkpoint-every", "3"]])
def test_compare_names_every_file_it_writes(tmp_path, capsys, extra):
    out_dir = tmp_path / "out"
    rc = main(["compare", *TINY, "--no-progress", "--save-prefix", str(out_dir / "c"), *extra])
    assert rc == 0
    named = _wrote(capsys.readouterr().out)
    assert len(named) == len(set(named))  # each once
    assert set(named) == _files(out_dir)  # the directory holds exactly the named files
    assert any(p.endswith("_checkpoint.npz") for p in named) == bool(extra)
    assert any(p.endswith(".png") for p in named) != bool(extra)


def test_compare_does_not_name_older_files(tmp_path, capsys):
    # files of an earlier run with the same prefix are not this run's output
    prefix = str(tmp_path / "c")
    assert main(["compare", *TINY, "--no-progress", "--no-plots", "--checkpoint-every", "3",
                 "--save-prefix", prefix]) == 0
    capsys.readouterr()
    assert main(["compare", *TINY, "--no-progress", "--no-plots", "--global-rank", "0",
                 "--save-prefix", prefix]) == 0
    named = _wrote(capsys.readouterr().out)
    assert sorted(os.path.basename(p) for p in named) == ["c_history.csv", "c_metrics.json",
                                                           "c_schwarz.npz"]


@pytest.mark.parametrize("command,flags,each", [
    ("sweep", ["--lrs", "1e-3", "1e-2", "--n", "32", "--subdomains", "2", "--global-rank", "3"],
     "_lr<rate>_*"),
    ("scaling", ["--ns", "64", "128"], "_n<n>_*"),
])
def test_sweep_and_scaling_name_their_files_and_count_the_rest(tmp_path, capsys, command,
                                                               flags, each):
    out_dir = tmp_path / "study"
    rc = main([command, *flags, "--steps", "2", "--batch-size", "8", "--no-progress",
               "--no-plots", "--save-prefix", str(out_dir / "s")])
    assert rc == 0
    out = capsys.readouterr().out
    own = set(_wrote(out)[:-1])
    assert own == {str(out_dir / f"s_{command}{s}") for s in (".md", "_metrics.json")}
    count = re.search(rf"^wrote (\d+) files of the comparisons in (\S+) \(s{re.escape(each)}\)$",
                      out, re.M)
    assert count is not None, out
    assert int(count.group(1)) == len(_files(out_dir) - own)
    assert count.group(2).rstrip("/") == str(out_dir)


def test_compare_explains_fro_and_best(tmp_path, capsys):
    text = build_parser()._subparsers._group_actions[0].choices["compare"].format_help()
    for needle in ("fro      ||M - A^-1||_F", "best     the smallest fro of any operator of "
                   "rank <= r"):
        assert needle in text
    assert main(["compare", *TINY, "--no-progress", "--no-plots",
                 "--save-prefix", str(tmp_path / "c")]) == 0
    lines = capsys.readouterr().out.splitlines()
    first_model = next(i for i, line in enumerate(lines) if "fro=" in line)
    legend = "\n".join(lines[:first_model])
    assert "fro = ||M - A^-1||_F" in legend and "best = the smallest fro" in legend


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("terminal,flag,bars", [
    (False, [], False), (True, [], True), (False, ["--progress"], True),
    (True, ["--no-progress"], False)])
def test_progress_bars_only_on_a_terminal(tmp_path, monkeypatch, capsys, terminal, flag,
                                          bars):
    # tqdm draws its bar on standard error; into a file or a pipe it would write
    # carriage-return garbage, so neither flag means: bars only on a terminal
    err = _Terminal() if terminal else io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    assert main(["compare", *TINY, "--no-plots", *flag,
                 "--save-prefix", str(tmp_path / "c")]) == 0
    assert ("SchwarzOperator" in err.getvalue()) == bars, err.getvalue()


@pytest.mark.parametrize("terminal,flag,expected", [
    (False, [], False), (True, [], True), (False, ["--progress"], True),
    (True, ["--no-progress"], False)])
def test_precond_progress_follows_the_terminal(monkeypatch, terminal, flag, expected):
    from ddops.experiments import cli

    seen = {}
    monkeypatch.setattr("sys.stderr", _Terminal() if terminal else io.StringIO())
    def run_from_args(args):
        seen["progress"] = args.progress
        return {"rows": []}

    monkeypatch.setattr("ddops.experiments.precond.run_from_args", run_from_args)
    assert cli.main(["precond", "--n", "64", *flag]) == 0
    assert seen["progress"] is expected


def test_a_second_run_into_the_same_prefix_warns_once(tmp_path, capsys):
    # an earlier run's results are replaced with a warning, before training; --resume
    # continues that run and a new prefix keeps it, both without one
    common = [*TINY, "--no-progress", "--no-plots", "--checkpoint-every", "3"]
    prefix = str(tmp_path / "c")
    assert main(["compare", *common, "--save-prefix", prefix]) == 0
    assert "warning" not in capsys.readouterr().err
    before = (tmp_path / "c_metrics.json").stat().st_mtime_ns
    assert main(["compare", *common, "--save-prefix", prefix]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"ddops compare: warning: --save-prefix {prefix} holds the "
                             f"results of an earlier run ({prefix}_metrics.json and ")
    assert err[0].endswith("--resume continues that run)")
    assert (tmp_path / "c_metrics.json").stat().st_mtime_ns >= before
    assert main(["compare", *common, "--save-prefix", prefix, "--resume"]) == 0
    assert "warning" not in capsys.readouterr().err
    assert main(["compare", *common, "--save-prefix", str(tmp_path / "d")]) == 0
    assert "warning" not in capsys.readouterr().err
