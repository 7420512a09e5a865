"""``ddops.SchwarzOptions``: one field per concept, the same preconditioner as the keywords."""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np
import pytest

import ddops
from ddops.precond.options import (
    COARSE_OPTION_SPECS,
    OPTION_SPECS,
    SchwarzOptions,
    add_cli_arguments,
    add_deprecated_flag,
    cli_flag,
    coarse_option_defaults,
    coarse_option_users,
    options_from_cli,
)
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


# -- the command-line flags of the options -----------------------------------------------------
def _parser(**kwargs):
    parser = argparse.ArgumentParser(exit_on_error=False)
    actions = add_cli_arguments(parser, **kwargs)
    return parser, actions


def test_every_coarse_space_option_has_a_spec():
    fields = {f.name for kind in (ddops.GDSWOptions, ddops.AGDSWOptions, ddops.GenEOOptions)
              for f in dataclasses.fields(kind)}
    assert set(COARSE_OPTION_SPECS) == fields
    assert coarse_option_users("threshold") == ("agdsw", "geneo")
    assert coarse_option_users("extension_solver") == ("gdsw", "rgdsw", "agdsw")
    assert coarse_option_defaults("threshold") == {"agdsw": ddops.AGDSWOptions().threshold,
                                                   "geneo": ddops.GenEOOptions().threshold}


def test_flags_carry_the_names_choices_and_defaults_of_the_options():
    parser, actions = _parser()
    expected = [n for n in (*OPTION_SPECS, *COARSE_OPTION_SPECS) if n != "neumann"]
    assert list(actions) == expected
    defaults = SchwarzOptions()
    for name, action in actions.items():
        spec = OPTION_SPECS.get(name) or COARSE_OPTION_SPECS[name]
        assert action.option_strings == ["--" + name.replace("_", "-")] == [cli_flag(name)]
        assert action.dest == name
        if spec.kind == "choice":
            assert tuple(action.choices) == spec.choices
        if name in OPTION_SPECS:
            assert action.default == getattr(defaults, name), name
    # no flag given: the default options
    assert options_from_cli(parser.parse_args([])) == defaults
    # a default the coarse spaces do not share is not one value: the help states each
    assert actions["threshold"].default is None
    assert "default agdsw 0.05, geneo 0.25 (0.5 oversampled)" in actions["threshold"].help
    with pytest.raises(ValueError, match="no command-line flag"):
        add_cli_arguments(argparse.ArgumentParser(), ["neumann"])


def test_flags_reach_the_options_of_every_space_that_takes_them():
    parser, _ = _parser()
    args = parser.parse_args(["--coarse", "agdsw", "--threshold", "0.3", "--extension-solver",
                              "amg", "--max-per-subdomain", "5", "--local-solver", "sparse",
                              "--subdomains", "4", "--partitioner", "rcb"])
    opts = options_from_cli(args)
    assert (opts.coarse, opts.local_solver, opts.subdomains, opts.partitioner) == (
        "agdsw", "sparse", 4, "rcb")
    assert opts.agdsw.threshold == opts.geneo.threshold == 0.3
    assert opts.gdsw.extension_solver == opts.agdsw.extension_solver == "amg"
    assert opts.geneo.max_per_subdomain == 5
    assert opts.agdsw.max_per_component == ddops.AGDSWOptions().max_per_component
    assert opts.coarse_keywords()["threshold"] == 0.3
    assert options_from_cli(args, variant="hybrid").variant == "hybrid"


@pytest.mark.parametrize("argv,match", [
    (["--partitioner", "metsi"], r"invalid choice: 'metsi'.*'metis', 'rcb'"),
    (["--local-solver", "superlo"], "invalid choice"),
    (["--overlap", "-1"], "integer >= 0"),
    (["--threshold", "0"], "finite positive number"),
    (["--max-per-component", "x"], "expected an integer"),
])
def test_bad_flags_are_refused_by_the_parser(argv, match):
    parser, _ = _parser()
    with pytest.raises(argparse.ArgumentError, match=match):
        parser.parse_args(argv)


def test_overrides_of_a_program():
    parser, actions = _parser(names=["coarse", "null_space", "overlap"],
                              defaults={"coarse": None, "overlap": None},
                              extra_choices={"coarse": ("all",)},
                              extra_names={"null_space": ("rbm",)},
                              notes={"overlap": "in elements in 1D"},
                              default_help={"overlap": "2 in 1D"})
    assert actions["coarse"].choices[-1] == "all" and actions["coarse"].default is None
    assert actions["coarse"].help.endswith("default auto")  # the library's, where not given
    assert actions["null_space"].metavar == "{rbm,constants,FILE}"
    assert actions["overlap"].help == ("layers of the graph of A added to every subdomain; "
                                       "in elements in 1D; default 2 in 1D")
    assert parser.parse_args(["--coarse", "all"]).coarse == "all"


def test_old_spellings_of_flags_and_values_warn_and_work():
    parser, actions = _parser(names=["coarse", "null_space"])
    add_deprecated_flag(parser, "--coarse-space", actions["coarse"])
    with pytest.warns(DeprecationWarning, match="--coarse-space is deprecated; use --coarse"):
        args = parser.parse_args(["--coarse-space", "gdsw"])
    assert args.coarse == "gdsw"
    with pytest.raises(argparse.ArgumentError, match="invalid choice"):
        parser.parse_args(["--coarse-space", "gdws"])
    with pytest.warns(DeprecationWarning, match="--null-space constant is deprecated; use "
                                                "--null-space constants"):
        args = parser.parse_args(["--null-space", "constant"])
    assert options_from_cli(args).null_space == "constants"
    # hidden from the help
    assert "--coarse-space" not in parser.format_help()


def test_options_compare_by_identity_and_refuse_non_bases_for_coarse():
    """Arrays inside (null space, kernel, a basis) compare by identity, never an error, and
    the options are unhashable; coarse takes a name or a matrix, not None or a bool."""
    Z = np.ones((10, 1))
    a, b = SchwarzOptions(null_space=Z), SchwarzOptions(null_space=Z)
    assert a == b and a != SchwarzOptions(null_space=Z.copy()) and a != SchwarzOptions()
    assert SchwarzOptions(agdsw=ddops.AGDSWOptions(threshold=0.1)) == SchwarzOptions(
        agdsw=ddops.AGDSWOptions(threshold=0.1)) != SchwarzOptions()
    with pytest.raises(TypeError, match="unhashable"):
        hash(a)
    for bad in (None, True, False, 3):
        with pytest.raises(TypeError, match="coarse must be one of"):
            SchwarzOptions(coarse=bad)
    with pytest.raises(TypeError, match="factor_dtype"):
        SchwarzOptions(factor_dtype=None)
