"""``ddops precond``: the iteration table on a small size and one-line errors."""

from __future__ import annotations

import json

import pytest

from ddops.experiments.cli import main
from ddops.experiments.precond import METHODS, PrecondConfig

try:
    import pyamg  # noqa: F401

    HAVE_PYAMG = True
except ImportError:
    HAVE_PYAMG = False

EXPECTED = [k for k in METHODS if k != "pyamg" or HAVE_PYAMG]


def test_precond_small_run_writes_table_json_and_plot(tmp_path, capsys):
    prefix = str(tmp_path / "pc")
    rc = main(["precond", "--n", "128", "--train-steps", "20", "--check-every", "10",
               "--paper-steps", "20", "--batch-size", "8", "--save-prefix", prefix,
               "--no-progress"])
    assert rc == 0
    payload = json.loads((tmp_path / "pc_results.json").read_text())
    rows = {r["method"]: r for r in payload["rows"]}
    assert list(rows) == EXPECTED
    for r in rows.values():
        assert r["iterations"] >= 1 and isinstance(r["converged"], bool)
        assert r["second"]["iterations"] >= 1
        assert min(r["setup_seconds"], r["train_seconds"], r["solve_seconds"]) >= 0
    assert payload["config"]["subdomains"] == 4 and payload["unknowns"] == 127
    # the classical preconditioners converge; two-level beats one-level or ties
    for key in ("one_level", "two_level", "ras", "learned_two_level"):
        assert rows[key]["converged"]
    assert rows["two_level"]["iterations"] <= rows["one_level"]["iterations"]
    # the safeguard: trained from two-level Schwarz, never more iterations than two-level
    assert rows["learned_two_level"]["iterations"] <= rows["two_level"]["iterations"]
    train = rows["learned_random"]["training"]
    assert train["steps"] == 20 and [c["step"] for c in train["checks"]] == [0, 10, 20]
    assert rows["paper"]["training"]["steps"] == 20
    table = (tmp_path / "pc_table.md").read_text()
    for key in EXPECTED:
        assert f"| {METHODS[key][1]} |" in table
    assert (tmp_path / "pc_residuals.png").stat().st_size > 0
    assert "wrote" in capsys.readouterr().out


def test_precond_no_train_no_plots(tmp_path):
    prefix = str(tmp_path / "nt")
    assert main(["precond", "--n", "64", "--subdomains", "2", "--no-train", "--no-plots",
                 "--save-prefix", prefix, "--no-progress", "--objective", "mse"]) == 0
    payload = json.loads((tmp_path / "nt_results.json").read_text())
    rows = {r["method"]: r for r in payload["rows"]}
    assert rows["learned_two_level"]["training"]["steps"] == 0
    assert rows["paper"]["training"]["steps"] == 0
    assert rows["learned_two_level"]["iterations"] == rows["two_level"]["iterations"]
    assert not list(tmp_path.glob("*.png"))


@pytest.mark.parametrize("argv,needle", [
    (["--n", "0"], "--n"),
    (["--lr", "-1"], "--lr"),
    (["--rtol", "abc"], "--rtol"),
    (["--objective", "l1"], "--objective"),
    (["--learned-base", "none"], "--learned-base"),
    (["--bogus"], "unrecognized"),
    (["--n", "64", "--subdomains", "100"], "n must be"),
    (["--n", "64", "--subdomains", "32", "--overlap", "5"], "overlap"),
    (["--rtol", "2"], "rtol"),
    (["--factor-dtype", "float16"], "--factor-dtype"),
])
def test_precond_bad_flags_one_line(argv, needle, tmp_path, capsys):
    rc = main(["precond", *argv, "--save-prefix", str(tmp_path / "x"), "--no-train",
               "--no-plots", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2
    assert len(err.strip().splitlines()) == 1 and needle in err
    assert "Traceback" not in err
    assert not list(tmp_path.iterdir())


def test_precond_factor_dtype_float32(tmp_path):
    """float32 local factors: at most two iterations more than float64, smaller factors."""
    payloads = {}
    for dt in ("float64", "float32"):
        prefix = str(tmp_path / dt)
        assert main(["precond", "--problem", "poisson2d", "--n", "64", "--subdomains", "4",
                     "--factor-dtype", dt, "--save-prefix", prefix, "--no-plots",
                     "--no-progress"]) == 0
        payloads[dt] = json.loads((tmp_path / f"{dt}_results.json").read_text())
    rows = {dt: {r["method"]: r for r in p["rows"]} for dt, p in payloads.items()}
    assert payloads["float32"]["config"]["factor_dtype"] == "float32"
    for key in ("one_level", "two_level"):
        r64, r32 = rows["float64"][key], rows["float32"][key]
        assert r32["converged"] and abs(r32["iterations"] - r64["iterations"]) <= 2
        assert r32["factor_dtype"] == "float32" and r64["factor_dtype"] == "float64"
        if r64["local_solver"] == "sparse":
            assert r32["superlu_factor_bytes"] < r64["superlu_factor_bytes"]
    assert "float32 local factors" in (tmp_path / "float32_table.md").read_text()


def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match="factor_dtype"):
        PrecondConfig(factor_dtype="half").validated()
    with pytest.raises(ValueError, match="learned_base"):
        PrecondConfig(learned_base="none").validated()
    with pytest.raises(TypeError, match="train_steps"):
        PrecondConfig(train_steps=1.5).validated()
    assert PrecondConfig(n=4096).validated().subdomains == 128
    # the two-level methods need an interface: at least two subdomains by default ...
    assert PrecondConfig(n=32).validated().subdomains == 2
    # ... and when given
    with pytest.raises(ValueError, match="subdomains must be >= 2"):
        PrecondConfig(n=256, subdomains=1).validated()
    # the paper-trained model's right-hand sides need 16 unknowns, checked before any work
    with pytest.raises(ValueError, match="n must be >= 17"):
        PrecondConfig(n=16).validated()
