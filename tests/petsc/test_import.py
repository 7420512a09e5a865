"""``ddops.petsc`` is optional: ``import ddops`` never loads it, and without petsc4py it says
how to install it (these tests need no PETSc)."""

from __future__ import annotations

import subprocess
import sys


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)


def test_import_ddops_does_not_import_petsc():
    result = _run("import sys, ddops; print('petsc4py' in sys.modules, "
                  "'ddops.petsc' in sys.modules)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "False"]


def test_without_petsc4py_one_line_naming_the_install():
    # petsc4py made unimportable, whether installed or not
    result = _run("import sys; sys.modules['petsc4py'] = None\n"
                  "try:\n    import ddops.petsc\n"
                  "except ImportError as exc:\n    print(exc)\n")
    assert result.returncode == 0, result.stderr
    message = result.stdout.strip()
    assert "\n" not in message
    assert "ddops.petsc needs petsc4py" in message
    assert "python3-petsc4py" in message and "ddops[petsc]" in message
