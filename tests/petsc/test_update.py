"""A second ``PCSetUp`` for new values (both routes, 1 and 2 ranks), and the PETSc options
against ``ddops.SchwarzOptions`` (they cannot drift apart)."""

from __future__ import annotations

import dataclasses
import itertools
import warnings

import pytest

from . import _cases
from ._petsc import petsc4py, run_worker

_prefixes = itertools.count()


@pytest.fixture(scope="module")
def PETSc():
    return petsc4py()


@pytest.fixture(scope="module", params=[1, 2], ids=lambda p: f"np{p}")
def results(request, tmp_path_factory) -> dict:
    petsc4py()
    out = tmp_path_factory.mktemp(f"update{request.param}") / "results.json"
    return run_worker(request.param, out, worker="worker_update.py")


@pytest.mark.parametrize("case", ["python/additive", "python/hybrid", "native/additive",
                                  "native/hybrid"])
def test_same_pattern_runs_the_numeric_setup(results, case):
    r = results["cases"][case]
    its1, its2, its3 = r["iterations"]
    # the new values: the numeric set-up, on the same decomposition object, with the
    # iterations of a fresh PC on the new matrix
    assert r["second"] == ["numeric", 1, 1]
    assert r["parts_kept"]
    assert its2 == r["fresh"][0]
    assert not r["phi_bitwise"]  # Phi was built again for the new values
    # another pattern: everything again, and still right
    assert r["third"] == ["full", 2, 1]
    assert r["parts_rebuilt"]
    # measured on the native PCMG route (None where it cannot be: python, PCDEFLATION)
    assert r["smoother_current"] is (None if case != "native/additive" else True)
    assert its3 == r["fresh"][1]


@pytest.mark.parametrize("route", ["python", "native"])
def test_reuse_coarse_keeps_phi(results, route):
    r = results["cases"][f"{route}/reuse"]
    assert r["second"] == ["numeric", 1, 1]
    assert r["phi_bitwise"]
    if route == "native":
        assert r["phi_same_mat"]  # the PETSc Mat itself is kept
        assert r["smoother_current"] is True  # the kept PCMG's subdomain solves: the new Mat
    assert abs(r["iterations"][1] - r["fresh"][0]) <= 2


@pytest.mark.parametrize("kind", ["inplace-reuse", "inplace-none"])
def test_new_values_in_the_same_matrix_keep_petscs_factorisations(results, kind):
    """New values written into the same Mat, the native route with a kept Phi
    (-ddops_reuse_coarse) or without a coarse space: the inner PC is kept, PETSc refactorises
    the subdomain matrices in the factored matrices it holds (their symbolic factorisations
    kept), and CG takes the iterations of a fresh PC on the new values."""
    r = results["cases"][f"native/{kind}"]
    assert r["second"] == ["numeric", 1, 1]
    assert r["inner_kept"] and r["factors_kept"]
    assert r["iterations"][1] == r["fresh"]


# -- the options -------------------------------------------------------------------------
def _expected_options() -> dict:
    """``name -> (choices, default)`` from ddops.SchwarzOptions, OPTION_SPECS and the coarse
    spaces' options objects (what the PETSc options must be)."""
    import ddops
    from ddops.precond.options import COARSE_OPTION_SPECS, EXTENSION_SOLVERS, OPTION_SPECS

    defaults = {f.name: f.default for f in dataclasses.fields(ddops.SchwarzOptions)}
    out = {}
    for name, spec in OPTION_SPECS.items():
        if spec.petsc is None:
            continue
        choices = spec.choices
        default = defaults[name]
        if name == "null_space":  # PETSc's own choices and default, then the shared ones
            choices, default = ("auto", "near", *spec.choices), "auto"
        out[spec.petsc] = (tuple(choices), default)
    for space, cls in (("gdsw", ddops.GDSWOptions), ("agdsw", ddops.AGDSWOptions),
                       ("geneo", ddops.GenEOOptions)):
        for f in dataclasses.fields(cls):
            if f.name != "neumann":
                spec = COARSE_OPTION_SPECS[f.name]
                choices = (EXTENSION_SOLVERS if f.name == "extension_solver" else
                           spec.choices if spec.kind == "choice" else ())
                out[f"{space}_{f.name}"] = (tuple(choices), f.default)
    out["reuse_coarse"] = ((), False)
    return out


def test_options_are_those_of_schwarz_options(PETSc):
    from ddops.petsc.options import OPTIONS, PETSC_ONLY

    got = {name: (o.choices, o.default) for name, o in OPTIONS.items()}
    assert got == _expected_options()
    assert set(PETSC_ONLY) >= {"null_space", "reuse_coarse"}


#: A value other than the default for every option, as the database spells it.
_VALUES = {"subdomains": ("6", 6), "overlap": ("2", 2), "partitioner": ("contiguous",
           "contiguous"), "block_size": ("1", 1), "seed": ("3", 3), "variant": ("hybrid",
           "hybrid"), "coarse": ("rgdsw", "rgdsw"), "coarse_size": None,
           "local_solver": ("superlu", "superlu"), "factor_dtype": ("float32", "float32"),
           "null_space": ("constants", "constants"), "kernel": None, "threads": ("1", 1),
           "gdsw_extension_solver": ("superlu", "superlu"), "agdsw_threshold": ("0.1", 0.1),
           "agdsw_max_per_component": ("4", 4), "agdsw_extension_solver": ("superlu",
           "superlu"), "agdsw_skip_contrast": ("0", 0.0), "geneo_threshold": ("0.5", 0.5),
           "geneo_max_per_subdomain": ("7", 7),
           "geneo_oversampling": ("3", 3), "geneo_skip_contrast": ("10", 10.0),
           "geneo_eigen_stop": ("count", "count"),
           "extension_reuse": ("ordering", "ordering"), "reuse_coarse": ("true", True)}


def test_schwarz_pc_reads_every_option(PETSc):
    """Every option of OPTIONS is read from the database under its name by SchwarzPC (and
    the list of values here covers every option: a new one fails until it is added)."""
    from ddops.petsc import SchwarzPC
    from ddops.petsc.options import OPTIONS

    assert set(_VALUES) == set(OPTIONS)
    prefix = f"o{next(_prefixes)}_"
    db = PETSc.Options()
    given = {name: v for name, v in _VALUES.items() if v is not None}
    for name, (raw, _) in given.items():
        db.setValue(f"{prefix}ddops_{name}", raw)
    pc = PETSc.PC().create(comm=PETSc.COMM_SELF)
    pc.setOptionsPrefix(prefix)
    ctx = SchwarzPC()
    try:
        ctx.setFromOptions(pc)
        for name, (_, value) in given.items():
            assert getattr(ctx.options, name) == value, name
    finally:
        pc.destroy()
        for name in given:
            db.delValue(f"{prefix}ddops_{name}")


@pytest.mark.parametrize("option, value, match", [
    ("gdsw_extension_solver", "lu", "ddops_gdsw_extension_solver must be one of \\('auto', "),
    ("factor_dtype", "float16", "ddops_factor_dtype must be one of \\('float64', 'float32'\\)"),
    ("reuse_coarse", "maybe", "ddops_reuse_coarse must be a bool"),
    ("agdsw_threshold", "-1", "ddops_agdsw_threshold: threshold must be a positive"),
    ("partitioner", "grid", "ddops_partitioner grid: not available under PETSc"),
    ("coarse", "grid_hats", "ddops_coarse grid_hats: not available under PETSc"),
])
def test_bad_value_is_refused_naming_the_option(PETSc, option, value, match):
    from ddops.petsc import SchwarzPC

    prefix = f"b{next(_prefixes)}_"
    db = PETSc.Options()
    db.setValue(f"{prefix}ddops_{option}", value)
    pc = PETSc.PC().create(comm=PETSc.COMM_SELF)
    pc.setOptionsPrefix(prefix)
    try:
        with pytest.raises(ValueError, match=f"-{prefix}{match}"):
            SchwarzPC().setFromOptions(pc)
    finally:
        pc.destroy()
        db.delValue(f"{prefix}ddops_{option}")


def test_old_null_space_spelling_warns(PETSc):
    from ddops.petsc.options import SchwarzOptions

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert SchwarzOptions(null_space="constant").null_space == "constants"
    assert any(issubclass(w.category, DeprecationWarning) and "'constants'" in str(w.message)
               for w in caught)


def test_native_route_refuses_what_petsc_factorises(PETSc):
    A, _, _ = _cases.problem("poisson2d")
    P = _cases.petsc_matrix(A, PETSc.COMM_SELF)
    from ddops.petsc import setup_native

    pc = PETSc.PC().create(comm=PETSc.COMM_SELF)
    pc.setOperators(P)
    try:
        with pytest.raises(ValueError, match="-ddops_factor_dtype float32: the native route"):
            setup_native(pc, factor_dtype="float32")
        with pytest.raises(ValueError, match="-ddops_kernel: the native route"):
            setup_native(pc, kernel="constants")
    finally:
        pc.destroy()
        P.destroy()


def test_docs_table_matches_the_options(PETSc):
    """The options table of docs/petsc.md has every option, with its choices and default."""
    import re
    from pathlib import Path

    from ddops.petsc.options import OPTIONS

    text = (Path(__file__).resolve().parents[2] / "docs" / "petsc.md").read_text()
    rows = {m.group(1): (m.group(2), m.group(3)) for m in re.finditer(
        r"^\| `-ddops_(\w+)` \| ([^|]*) \| ([^|]*) \|", text, flags=re.M)}
    assert set(rows) == set(OPTIONS)
    for name, option in OPTIONS.items():
        values, default = rows[name]
        if option.kind == "choice":
            assert re.findall(r"`(\w+)`", values) == list(option.choices), name
        if option.default is not None:
            shown = str(option.default).lower() if option.kind == "bool" else option.default
            assert f"`{shown}`" in default, name
