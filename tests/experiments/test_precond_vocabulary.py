"""``ddops precond`` speaks the library's vocabulary: its flags for the preconditioners'
settings are generated from :class:`ddops.SchwarzOptions` and the coarse spaces' options."""

from __future__ import annotations

import argparse

import pytest

import ddops
from ddops.dd.geneo import (
    GENEO_OVERSAMPLED_THRESHOLD,
    GENEO_THRESHOLD,
    MAX_PER_NULL_VECTOR,
    MAX_PER_SUBDOMAIN,
)
from ddops.experiments.cli import build_parser, main
from ddops.experiments.precond import PARTITIONER_CHOICES, PrecondConfig
from ddops.experiments.precond import runners as precond_runners
from ddops.precond.options import (
    COARSE_OPTION_SPECS,
    OPTION_SPECS,
    PARTITIONERS,
    SchwarzOptions,
    cli_flag,
)

from ._precond import QUIET, run

#: The options that ``ddops precond`` has flags for.
PRECOND_OPTIONS = {"subdomains", "overlap", "partitioner", "block_size", "seed", "coarse",
                   "local_solver", "factor_dtype", "null_space", "kernel", "extension_solver",
                   "threshold", "max_per_component", "max_per_subdomain", "oversampling",
                   "variant", "skip_contrast", "eigen_stop"}

#: Those whose default depends on the problem: not given (None), resolved by the experiment.
RESOLVED = {"subdomains", "overlap", "partitioner", "block_size", "coarse", "null_space",
            "kernel", "threshold", "max_per_component", "max_per_subdomain", "oversampling",
            "variant", "skip_contrast", "eigen_stop"}

#: The experiment's own values of ``--coarse`` besides the library's coarse spaces.
EXPERIMENT_COARSE = {"learned", "all"}


def _precond_parser():
    return build_parser()._subparsers._group_actions[0].choices["precond"]


def _strip_default(text):
    head, sep, tail = text.rpartition(" (default")
    return head if sep and tail.endswith(")") else text


def test_flags_are_the_options_names_choices_and_defaults():
    parser = _precond_parser()
    actions = {a.dest: a for a in parser._actions
               if a.option_strings and a.help != argparse.SUPPRESS}
    library = {**OPTION_SPECS, **COARSE_OPTION_SPECS}
    # every flag that stores an option is that option's flag, and none is missing
    assert {dest for dest in actions if dest in library} == PRECOND_OPTIONS
    defaults = SchwarzOptions()
    for name in sorted(PRECOND_OPTIONS):
        action, spec = actions[name], library[name]
        assert action.option_strings == [cli_flag(name)], name
        if spec.kind == "choice":
            choices = tuple(action.choices)
            assert choices[:len(spec.choices)] == spec.choices, name
            assert set(choices[len(spec.choices):]) <= EXPERIMENT_COARSE, name
        elif spec.kind == "array":
            assert action.metavar.endswith(",".join((*spec.choices, "FILE")) + "}"), name
        assert _strip_default(spec.help) in action.help, name
        if name in RESOLVED:
            assert action.default is None, name
        else:  # the library's default, which is also the configuration's
            default = (getattr(defaults, name) if name in OPTION_SPECS
                       else defaults.gdsw.extension_solver)
            assert action.default == default == getattr(PrecondConfig, name), name
    # the defaults of the coarse spaces' options are stated from their dataclasses
    agdsw, geneo = ddops.AGDSWOptions(), ddops.GenEOOptions()
    assert geneo.threshold is None  # a rule: the plain or the oversampled default
    assert (f"default agdsw {agdsw.threshold:g}, geneo {GENEO_THRESHOLD:g} "
            f"({GENEO_OVERSAMPLED_THRESHOLD:g} oversampled)" in actions["threshold"].help)
    assert f"default {agdsw.max_per_component}" in actions["max_per_component"].help
    assert geneo.max_per_subdomain is None  # a rule: 48, or 32 per null-space vector
    assert (f"default {MAX_PER_SUBDOMAIN}, or {MAX_PER_NULL_VECTOR} per null-space vector"
            in actions["max_per_subdomain"].help)
    # and --help shows the same choices
    text = parser.format_help()
    for name in ("partitioner", "coarse", "local_solver", "factor_dtype", "extension_solver"):
        assert "{" + ",".join(actions[name].choices) + "}" in text, name


def test_the_experiment_builds_library_partitioners():
    assert set(PARTITIONER_CHOICES) < set(PARTITIONERS)


def _refused(capsys, tmp_path, monkeypatch, *argv):
    def refuse(*args, **kwargs):
        raise AssertionError("a solve started")

    monkeypatch.setattr(precond_runners, "solve_with_history", refuse)
    rc = main(["precond", *argv, "--save-prefix", str(tmp_path / "out" / "x"), *QUIET])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()
    return lines[0]


@pytest.mark.parametrize("flag,typo,names", [
    ("--partitioner", "metsi", PARTITIONERS),
    ("--coarse", "gdws", ("auto", "none", "gdsw", "geneo", "learned", "all")),
    ("--local-solver", "superlo", ("sparse", "superlu", "pardiso")),
    ("--extension-solver", "cholmod", ("auto", "superlu", "amg")),
    ("--factor-dtype", "float16", ("float64", "float32")),
])
def test_a_misspelled_choice_is_refused_with_the_accepted_names(flag, typo, names, capsys,
                                                                 tmp_path, monkeypatch):
    line = _refused(capsys, tmp_path, monkeypatch, "--problem", "poisson2d", flag, typo)
    assert f"argument {flag}: invalid choice: '{typo}'" in line
    for name in names:
        assert f"'{name}'" in line, line


@pytest.mark.parametrize("argv,needle", [
    (["--problem", "poisson2d", "--partitioner", "contiguous"],
     "--partitioner: 'contiguous' is not available in ddops precond; it takes 'grid', 'metis' "
     "or 'rcb'"),
    (["--problem", "poisson2d", "--coarse", "auto"],
     "--coarse: 'auto' is not available in ddops precond; it takes 'nicolaides', 'gdsw', "
     "'rgdsw', 'agdsw', 'geneo', 'learned' or 'all'"),
    (["--coarse", "none"], "--coarse: 'none' is not available in ddops precond; it takes "
                           "'interface_hats', 'nicolaides'"),
    (["--problem", "poisson2d", "--coarse", "pou"], "--coarse: 'pou' is not available"),
])
def test_library_names_the_experiment_does_not_build_are_refused(argv, needle, capsys,
                                                                 tmp_path, monkeypatch):
    assert needle in _refused(capsys, tmp_path, monkeypatch, *argv)


def test_local_solver_takes_the_library_alias_sparse(tmp_path):
    payload, rows, _ = run(tmp_path, "s", "--problem", "poisson2d", "--n", "16",
                           "--subdomains", "4", "--coarse", "gdsw", "--local-solver", "sparse",
                           "--no-memory")
    assert payload["config"]["local_solver"] == "sparse"
    for key in ("one_level", "two_level"):
        assert (rows[key]["local_solver"], rows[key]["sparse_solver"]) == ("sparse", "superlu")


def test_old_spelling_of_a_null_space_warns_and_works(tmp_path, capsys):
    pytest.importorskip("skfem")
    payload, rows, _ = run(tmp_path, "e", "--problem", "elasticity2d", "--n", "6",
                           "--subdomains", "4", "--null-space", "constant", "--no-memory")
    assert capsys.readouterr().err.splitlines() == [
        "ddops precond: DeprecationWarning: --null-space constant is deprecated; use "
        "--null-space constants"]
    assert payload["config"]["null_space"] == "constants"
    assert rows["two_level"]["converged"]


@pytest.mark.parametrize("coarse,small,large", [("agdsw", 0.01, 0.5), ("geneo", 0.05, 0.5)])
def test_threshold_reaches_the_coarse_space_builder(coarse, small, large, tmp_path):
    base = ["--problem", "channels2d", "--n", "24", "--subdomains", "9", "--coarse", coarse,
            "--no-memory"]
    dims = {}
    for threshold in (small, large):
        payload, rows, _ = run(tmp_path, f"t{threshold}", *base, "--threshold", str(threshold))
        assert payload["config"]["threshold"] == threshold
        assert rows["two_level"]["threshold"] == threshold  # what the builder used
        dims[threshold] = rows["two_level"]["coarse_dim"]
    assert dims[large] > dims[small]  # measured 34 -> 36 (AGDSW), 9 -> 14 (GenEO)
