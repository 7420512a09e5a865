"""``ddops.SchwarzOptions``: one field per concept, the same preconditioner as the keywords."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import ddops
from ddops.precond.options import OPTION_SPECS, SchwarzOptions
from ddops.precond.schwarz import TwoLevelSchwarz


@pytest.fixture(scope="module")
def small():
    A = ddops.poisson_2d(14)
    return A, ddops.Decomposition.from_matrix(A, 5)


def _same(M1, M2, n):
    X = np.random.default_rng(0).standard_normal((n, 3))
    np.testing.assert_array_equal(M1 @ X, M2 @ X)


@pytest.mark.parametrize("settings", [
    dict(variant="hybrid", coarse="gdsw", local_solver="superlu"),
    dict(variant="restricted", coarse="rgdsw", local_solver="dense", factor_dtype="float32"),
    dict(coarse="none"),
    dict(coarse="agdsw", agdsw=ddops.AGDSWOptions(threshold=0.1, max_per_component=2)),
])
def test_options_build_the_preconditioner_of_the_keywords(small, settings):
    A, d = small
    kw = {("coarse_basis" if k == "coarse" else k): v for k, v in settings.items()}
    if kw.get("coarse_basis") == "none":
        kw["coarse_basis"] = None
    sub = kw.pop("agdsw", None)
    with pytest.warns(DeprecationWarning, match="coarse_options") if sub else _nothing():
        by_keywords = TwoLevelSchwarz(A, d, **kw, coarse_options=None if sub is None else {
            "threshold": sub.threshold, "max_per_component": sub.max_per_component})
    by_options = TwoLevelSchwarz(A, d, options=SchwarzOptions(**settings))
    assert by_options.coarse_dim == by_keywords.coarse_dim
    _same(by_options, by_keywords, A.shape[0])


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_options_and_keywords_are_exclusive(small):
    A, d = small
    with pytest.raises(TypeError, match=r"either as options= or as keyword.*variant"):
        TwoLevelSchwarz(A, d, variant="hybrid", options=SchwarzOptions())
    with pytest.raises(TypeError, match="options must be a ddops.SchwarzOptions"):
        TwoLevelSchwarz(A, d, options={"variant": "hybrid"})


def test_the_adaptive_options_reach_the_builder(small):
    """A cap of 0 functions per component leaves AGDSW with the GDSW-like null-space part
    only; a larger threshold keeps more functions."""
    A, d = small
    dims = [TwoLevelSchwarz(A, d, options=SchwarzOptions(
        coarse="agdsw", agdsw=ddops.AGDSWOptions(threshold=t))).coarse_dim
        for t in (1e-3, 0.5)]
    assert dims[0] < dims[1]


@pytest.mark.parametrize("name, value, error, match", [
    ("variant", "multiplicative", ValueError, "variant must be one of"),
    ("coarse", "gdws", ValueError, "coarse must be one of"),
    ("local_solver", "mumps", ValueError, "local_solver must be one of"),
    ("partitioner", "scotch", ValueError, "partitioner must be one of"),
    ("factor_dtype", "float16", ValueError, "factor_dtype must be one of"),
    ("overlap", -1, ValueError, "overlap must be >= 0"),
    ("overlap", 1.5, TypeError, "overlap must be an integer"),
    ("threads", 0, ValueError, "threads must be >= 1"),
    ("agdsw", {"threshold": 0.1}, TypeError, "agdsw must be a AGDSWOptions"),
    ("coarse_size", 4, ValueError, "coarse_size is only used with coarse='grid_hats'"),
])
def test_bad_values_name_the_field(name, value, error, match):
    with pytest.raises(error, match=match):
        SchwarzOptions(**{name: value})


def test_sub_options_are_checked():
    with pytest.raises(ValueError, match="threshold must be a positive"):
        ddops.AGDSWOptions(threshold=-1.0)
    with pytest.raises(ValueError, match="max_per_subdomain"):
        ddops.GenEOOptions(max_per_subdomain=-2)
    with pytest.raises(ValueError, match="extension_solver must be one of"):
        ddops.GDSWOptions(extension_solver="cholmod")


def test_unknown_names_are_refused_with_the_accepted_ones():
    with pytest.raises(TypeError, match="unexpected keyword|overlapp"):
        SchwarzOptions(overlapp=2)
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['overlapp'\].*'overlap'"):
        SchwarzOptions().replace(overlapp=2)
    assert SchwarzOptions().replace(overlap=3).overlap == 3


def test_options_are_frozen_and_have_one_default_per_field():
    opts = SchwarzOptions()
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.variant = "hybrid"
    defaults = {f.name: f.default for f in dataclasses.fields(SchwarzOptions)
                if f.default is not dataclasses.MISSING}
    assert set(OPTION_SPECS) <= set(defaults)
    # every choice field's default is one of its choices
    for name, spec in OPTION_SPECS.items():
        if spec.kind == "choice":
            assert defaults[name] in spec.choices, name


def test_old_spellings_warn_and_mean_the_new_ones():
    with pytest.warns(DeprecationWarning, match="'constant' is deprecated; use 'constants'"):
        opts = SchwarzOptions(null_space="constant")
    assert opts.null_space == "constants"


def test_constants_as_null_space_and_kernel(small):
    """The string "constants" is the vector of ones, for the null space and the kernel."""
    A, d = small
    n = A.shape[0]
    by_name = TwoLevelSchwarz(A, d, options=SchwarzOptions(coarse="nicolaides",
                                                           null_space="constants"))
    by_array = TwoLevelSchwarz(A, d, coarse_basis="nicolaides", null_space=np.ones(n))
    _same(by_name, by_array, n)


def test_decomposition_from_the_options(small):
    A, _ = small
    d = SchwarzOptions(subdomains=4, overlap=2, seed=1).decomposition(A)
    ref = ddops.Decomposition.from_matrix(A, 4, overlap=2, seed=1)
    assert d.num_subdomains == 4
    assert all(np.array_equal(a, b) for a, b in zip(d.subdomains, ref.subdomains))
    with pytest.raises(ValueError, match="grid"):
        SchwarzOptions(partitioner="grid").decomposition(A)
