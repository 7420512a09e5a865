"""The benchmark scripts that read ``setup_profile.py``'s problem list run at ``--quick``
sizes (a smoke test: a changed layout of that list broke two of them once), and
``geneo_eigen_stop.py`` measures what it says."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

from tests._optional import need

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def scripts(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    yield lambda name: importlib.import_module(name)
    for name in ("setup_profile", "agdsw_indicator", "geneo_inertia", "geneo_eigen_stop",
                 "common"):
        sys.modules.pop(name, None)


@pytest.mark.parametrize("script,argv", [
    ("agdsw_indicator", ["--quick", "--repeat", "1", "--problems", "2"]),
    ("geneo_inertia", ["--quick", "--rounds", "1"]),
])
def test_problem_list_readers_run(scripts, script, argv, capsys):
    assert scripts(script).main(argv) == 0
    assert "floating channels" in capsys.readouterr().out


def test_geneo_eigen_stop_counts_fewer_solves(scripts, tmp_path):
    need("pardiso")
    out = tmp_path / "stop.json"
    assert scripts("geneo_eigen_stop").main(
        ["--quick", "--repeat", "1", "--problems", "0", "2", "--json", str(out)]) == 0
    for row in json.loads(out.read_text()):
        settled, count = row["settled"], row["count"]
        assert settled["coarse_dim"] == count["coarse_dim"] > 0
        assert count["solves"] < settled["solves"], row["problem"]
        assert count["info"] == settled["info"] == 0
