"""Every ```python block of README.md, and of the documentation pages in DOC_PAGES, runs
when pasted alone into a fresh interpreter.

Which pages run is an explicit list rather than a marker in the page: every page with
python blocks must appear either in DOC_PAGES or, with the reason, in NOT_RUN
(test_every_page_is_classified), so a new page is a deliberate choice.  Blocks that run
must stay fast (seconds) and self-contained: their own imports and data.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
DOCS = README.parent / "docs"
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)

#: Documentation pages whose python blocks run, each alone, like the README's.
DOC_PAGES = ("index.md", "conventions.md", "preconditioning.md", "reproduction.md",
             "testing.md", "your-matrix.md", "learned-coarse.md")

#: Pages with python blocks that do not run here, and why.
NOT_RUN = {
    "adaptive.md": "measurements at full size (the first block takes about 20 s on two "
                   "cores, the second assembles and decomposes 2D elasticity at 130^2)",
    "distributed.md": "scripts for mpiexec with several ranks",
    "petsc.md": "needs petsc4py (Debian's PETSc, a venv of its own) and Open MPI's mpiexec; "
                "tests/petsc runs the same code",
}


def python_blocks(text: str) -> list[str]:
    """The bodies of the ```python fenced blocks, in order."""
    return FENCE.findall(text)


def test_block_extraction():
    text = "intro\n```python\nx = 1\n```\n\n```bash\nls\n```\n```python\nprint(x)\n```\n"
    assert python_blocks(text) == ["x = 1\n", "print(x)\n"]
    for path in [README] + [DOCS / page for page in DOC_PAGES]:
        text = path.read_text(encoding="utf-8")
        blocks = python_blocks(text)
        # every opening fence was matched, so no snippet escapes the tests below
        assert blocks and len(blocks) == len(re.findall(r"^```python", text, re.M)), path.name


def test_every_page_is_classified():
    """A page with python blocks either runs them (DOC_PAGES) or says why not (NOT_RUN)."""
    with_blocks = {p.name for p in DOCS.glob("*.md")
                   if re.search(r"^```python", p.read_text(encoding="utf-8"), re.M)}
    assert not set(DOC_PAGES) & set(NOT_RUN)
    assert with_blocks == set(DOC_PAGES) | set(NOT_RUN)


def test_readme_links_to_docs_pages_that_exist():
    """Every ``docs/*.md`` the README names exists, and the testing guide is linked."""
    readme = README.read_text(encoding="utf-8")
    named = set(re.findall(r"docs/[\w-]+\.md", readme))
    assert named and all((README.parent / page).is_file() for page in named), named
    links = re.findall(r"\]\((docs/[\w-]+\.md)\)", readme)
    assert "docs/testing.md" in links


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


def doc_blocks() -> list[tuple[str, int, str]]:
    """``(page, index, code)`` of every python block of the pages in DOC_PAGES."""
    return [(page, i, code) for page in DOC_PAGES
            for i, code in enumerate(python_blocks((DOCS / page).read_text(encoding="utf-8")))]


@pytest.fixture(scope="module")
def doc_runs(tmp_path_factory):
    """All blocks of DOC_PAGES started at once (each alone, in its own folder), then collected."""
    blocks = doc_blocks()
    procs = [start_alone(code, tmp_path_factory.mktemp(f"{page[:-3]}{i + 1}"))
             for page, i, code in blocks]
    return {(page, i): (code, *finish(proc))
            for (page, i, code), proc in zip(blocks, procs, strict=True)}


@pytest.mark.parametrize(("page", "index"), [(page, i) for page, i, _ in doc_blocks()])
def test_doc_block_runs_alone(page, index, doc_runs):
    code, status, err = doc_runs[page, index]
    assert status == 0, (f"docs/{page} python block {index + 1} failed:\n{code}\n"
                         f"--- stderr ---\n{err}")
