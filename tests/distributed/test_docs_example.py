"""The example at the top of docs/distributed.md runs under mpiexec and converges."""

from __future__ import annotations

import re

from ._mpi import HERE, launch


def test_docs_example_runs_on_two_ranks(tmp_path):
    page = (HERE.parents[1] / "docs" / "distributed.md").read_text()
    code = re.findall(r"```python\n(.*?)```", page, re.S)[0]
    script = tmp_path / "poisson_mpi.py"
    script.write_text(code)
    result = launch(script, 2)
    assert result.returncode == 0, result.stderr
    info, stats = result.stdout.strip().split(" ", 1)
    assert info == "0" and "'reductions'" in stats
