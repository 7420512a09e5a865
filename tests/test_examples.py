"""The example scripts that are not run by another test, on small sizes, and what they show."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_elasticity_from_matrix_shows_geneo_flat_where_gdsw_grows():
    pytest.importorskip("skfem")
    out = subprocess.run([sys.executable, str(EXAMPLES / "elasticity_from_matrix.py"), "--n",
                          "24", "--parts", "8"], capture_output=True, text=True, timeout=300,
                         check=True).stdout
    its = {}
    for line in out.splitlines()[1:]:
        contrast, kind, _, count, _ = line.split()
        its[kind, float(contrast)] = int(count)
    assert set(its) == {(k, c) for k in ("gdsw", "geneo") for c in (1.0, 1e3, 1e6)}
    # GDSW grows with the contrast, GenEO from the matrix alone does not
    assert its["gdsw", 1e6] >= 3 * its["gdsw", 1.0]
    assert max(its["geneo", c] for c in (1.0, 1e3, 1e6)) <= 1.5 * its["geneo", 1.0]
    assert its["geneo", 1e6] * 3 <= its["gdsw", 1e6]


def test_elasticity_from_matrix_refuses_bad_sizes():
    run = subprocess.run([sys.executable, str(EXAMPLES / "elasticity_from_matrix.py"), "--n",
                          "2"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "--n must be >= 4" in run.stderr
