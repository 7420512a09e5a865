"""``tests._optional.need``: a missing solver package skips, or fails under
``DDOPS_REQUIRE_SOLVERS`` (set in CI), and the solvers fail with a line naming the extra."""

from __future__ import annotations

import importlib.util

import pytest

import ddops.linalg.local_solvers as ls
from tests import _optional


def test_missing_package_skips_or_fails(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(_optional.importlib.util, "find_spec",
                        lambda name, *a: None if name == "pypardiso" else real(name, *a))
    monkeypatch.delenv("DDOPS_REQUIRE_SOLVERS", raising=False)
    with pytest.raises(pytest.skip.Exception):
        _optional.need("pardiso")
    monkeypatch.setenv("DDOPS_REQUIRE_SOLVERS", "1")
    with pytest.raises(pytest.fail.Exception, match="pypardiso"):
        _optional.need("pardiso")
    _optional.need("superlu")  # always there


def test_missing_pardiso_names_the_extra(monkeypatch):
    import numpy as np
    import scipy.sparse as sp

    caches = (ls.pardiso_available, ls._mkl_runtime, ls._pardiso_64)
    for cached in caches:
        cached.cache_clear()
    real = importlib.util.find_spec
    monkeypatch.setattr(ls.importlib.util, "find_spec",
                        lambda name, *a: None if name == "pypardiso" else real(name, *a))
    try:
        assert ls.pardiso_available() is False
        with pytest.raises(ImportError, match=r"ddops\[solvers\]"):
            ls.factorize_blocks(sp.identity(3, format="csr"), np.array([0, 3]), "pardiso")
        assert ls.default_exact_solver() == "superlu"
    finally:
        monkeypatch.undo()
        for cached in caches:
            cached.cache_clear()
