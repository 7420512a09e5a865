"""CuPy is imported lazily: a missing, broken or hanging CuPy never touches the CPU path.

Each case runs a fresh interpreter with a fake ``cupy`` package first on
``sys.path``, so the tests do not depend on whether CuPy is installed here.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# What a user does on the CPU: operators, products, a preconditioner, the sampler.
CPU_USE = textwrap.dedent("""
    import numpy as np
    import ddops
    from ddops.learning.data import FourierRHS
    d = ddops.Decomposition1D(32, 4)
    op = ddops.SchwarzOperator(d, local_rank=2)
    x = np.ones(31)
    assert op.matvec(x).shape == (31,) and op.rmatmat(np.ones((31, 2))).shape == (31, 2)
    M = ddops.TwoLevelSchwarz(ddops.poisson_1d(32), d)
    assert np.isfinite(M.matvec(x)).all()
    F, U = FourierRHS(32).sample(4, np.random.default_rng(0))
    assert F.shape == (31, 4)
    assert ddops.backend.get_array_module(x) is np
    assert ddops.backend.to_numpy(x) is x
""")

FAKE_DEVICELESS = textwrap.dedent("""
    class ndarray:
        pass

    class _Runtime:
        @staticmethod
        def getDeviceCount():
            raise RuntimeError("fake cudaErrorNoDevice: no CUDA-capable device is detected")

    class cuda:
        runtime = _Runtime()
""")


def _fake_cupy(root: Path, body: str, with_cupyx: bool = False) -> Path:
    pkg = root / "cupy"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(body)
    if with_cupyx:
        sparse = root / "cupyx" / "scipy" / "sparse"
        sparse.mkdir(parents=True)
        for folder in (root / "cupyx", root / "cupyx" / "scipy", sparse):
            (folder / "__init__.py").write_text("")
    return root


def _python(args, fake: Path | None = None, timeout: float = 120):
    """Run ``python *args`` in a fresh interpreter, with ``fake`` first on ``sys.path``."""
    env = dict(os.environ)
    if fake is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(fake), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, *args], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


def _run(code: str, fake: Path | None = None, timeout: float = 120):
    return _python(["-c", code], fake, timeout)


def _check(result):
    assert result.returncode == 0, result.stdout + result.stderr


def test_import_ddops_does_not_import_cupy(tmp_path):
    # an importable stand-in: an eager import would put it into sys.modules
    fake = _fake_cupy(tmp_path, "IMPORTED = True\n")
    _check(_run("import sys, ddops; assert 'cupy' not in sys.modules, 'imported eagerly'\n"
                + CPU_USE + "assert 'cupy' not in sys.modules, 'imported by CPU use'\n",
                fake))


def test_broken_cupy_keeps_cpu_path_and_reports_why(tmp_path):
    fake = _fake_cupy(tmp_path, "raise ImportError('fake: libcudart.so.12 cannot be opened')\n")
    code = CPU_USE + textwrap.dedent("""
        import pytest
        assert not ddops.cupy_available()
        assert 'libcudart.so.12 cannot be opened' in ddops.backend.cupy_unavailable_reason()
        for make in (lambda: ddops.SchwarzOperator(d, backend='cupy'),
                     lambda: ddops.TwoLevelSchwarz(ddops.poisson_1d(32), d, backend='cupy'),
                     lambda: FourierRHS(32, backend='cupy'),
                     lambda: ddops.get_array_module(backend='cupy')):
            with pytest.raises(ValueError, match="backend='cupy'.*libcudart.so.12 cannot be op"):
                make()
        assert op.matvec(x).shape == (31,)  # still fine after the failed request
    """)
    _check(_run(code, fake))


def test_cupy_raising_other_errors_is_reported(tmp_path):
    fake = _fake_cupy(tmp_path, "raise RuntimeError('fake: CUDA driver version is "
                                "insufficient for CUDA runtime version')\n")
    code = CPU_USE + textwrap.dedent("""
        import pytest
        with pytest.raises(ValueError, match="backend='cupy'.*RuntimeError.*driver version"):
            ddops.SchwarzOperator(d, backend='cupy')
    """)
    _check(_run(code, fake))


def test_cupy_without_a_device_is_reported(tmp_path):
    fake = _fake_cupy(tmp_path, FAKE_DEVICELESS, with_cupyx=True)
    code = CPU_USE + textwrap.dedent("""
        import pytest
        assert not ddops.cupy_available()
        with pytest.raises(ValueError, match="backend='cupy'.*no CUDA-capable device"):
            ddops.SchwarzOperator(d, backend='cupy')
    """)
    _check(_run(code, fake))


def test_hanging_cupy_cannot_hang_the_cpu_path(tmp_path):
    fake = _fake_cupy(tmp_path, "import time\ntime.sleep(600)\n")
    try:
        result = _run(CPU_USE, fake, timeout=90)
    except subprocess.TimeoutExpired:  # pragma: no cover - the failure this test catches
        pytest.fail("import ddops or CPU use waited for a hanging CuPy import")
    _check(result)


def test_gpu_tests_skip_cleanly_with_a_broken_cupy(tmp_path):
    fake = _fake_cupy(tmp_path, "raise ImportError('fake: broken cupy')\n")
    result = _python(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
                      "tests/test_gpu.py"], fake)
    # a module-level skip collects no test: pytest's exit status 5, not an error (1, 2)
    assert result.returncode in (0, 5), result.stdout + result.stderr
    assert "1 skipped" in result.stdout and "error" not in result.stdout.lower()
    assert "CuPy with a GPU is not available" in result.stdout
