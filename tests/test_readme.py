"""Every ```python block of README.md runs when pasted alone into a fresh interpreter."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)


def python_blocks(text: str) -> list[str]:
    """The bodies of the ```python fenced blocks, in order."""
    return FENCE.findall(text)


def test_block_extraction():
    text = "intro\n```python\nx = 1\n```\n\n```bash\nls\n```\n```python\nprint(x)\n```\n"
    assert python_blocks(text) == ["x = 1\n", "print(x)\n"]
    readme = README.read_text(encoding="utf-8")
    blocks = python_blocks(readme)
    # every opening fence was matched, so no snippet escapes the test below
    assert blocks and len(blocks) == len(re.findall(r"^```python", readme, re.M))


def start_alone(code: str, cwd: Path) -> subprocess.Popen:
    """``code`` in a new interpreter, without the tests' imports or state."""
    # the package the tests import (the checkout, when it is not installed)
    path = os.pathsep.join(p for p in (str(README.parent), os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=path)
    return subprocess.Popen([sys.executable, "-c", code], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(proc: subprocess.Popen) -> tuple[int, str]:
    """Exit status and standard error of a started snippet."""
    try:
        _, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        err += "\n(timed out after 300 s)"
    return proc.returncode, err


def test_run_alone_reports_a_failing_block(tmp_path):
    assert finish(start_alone("import numpy as np\nnp.ones(2)\n", tmp_path))[0] == 0
    # a snippet that relies on an import it does not make fails
    status, err = finish(start_alone("x = np.ones(2)\n", tmp_path))
    assert status != 0 and "NameError" in err


@pytest.fixture(scope="module")
def readme_runs(tmp_path_factory):
    """All README blocks started at once (each alone, in its own folder), then collected."""
    blocks = python_blocks(README.read_text(encoding="utf-8"))
    procs = [start_alone(code, tmp_path_factory.mktemp(f"block{i + 1}"))
             for i, code in enumerate(blocks)]
    return [(code, *finish(proc)) for code, proc in zip(blocks, procs, strict=True)]


@pytest.mark.parametrize("index", range(len(python_blocks(README.read_text(encoding="utf-8")))))
def test_readme_block_runs_alone(index, readme_runs):
    code, status, err = readme_runs[index]
    assert status == 0, f"README python block {index + 1} failed:\n{code}\n--- stderr ---\n{err}"
