"""``ddops precond --local-solver/--extension-solver`` and the default subdomain count.

The references are independent: the iteration count from scipy's CG on a preconditioner
built here, the default count from the documented rule (parts of about 2000 unknowns).
"""

from __future__ import annotations

import numpy as np
import pytest

import ddops
from ddops.dd.partition import TARGET_SUBDOMAIN_UNKNOWNS, default_subdomains
from ddops.experiments.cli import main
from ddops.experiments.precond import PrecondConfig
from tests._optional import need
from tests.experiments._precond import QUIET, cg_iterations, run


# -- default subdomain count ------------------------------------------------------------------
def test_target_subdomain_size_is_pinned():
    assert TARGET_SUBDOMAIN_UNKNOWNS == 2000
    # round(n / 2000), at least 2, at most the number of nodes
    assert default_subdomains(10**6) == 500
    assert default_subdomains(16384) == 8       # 8.19
    assert default_subdomains(17000) == 8       # 8.5 rounds to even
    assert default_subdomains(19000) == 10      # 9.5 rounds to even
    assert default_subdomains(1500) == 2        # at least two parts
    assert default_subdomains(3, block_size=3) == 1  # one node: one part
    assert default_subdomains(227448, block_size=3) == 114


@pytest.mark.parametrize("bad", [0, -1, 2.5, "10"])
def test_default_subdomains_refuses_bad_sizes(bad):
    with pytest.raises((ValueError, TypeError), match="num_dofs"):
        default_subdomains(bad)


def test_from_matrix_without_subdomains_uses_the_target():
    A = ddops.poisson_2d(100)  # 10^4 unknowns: 5 parts
    d = ddops.Decomposition.from_matrix(A)
    assert d.num_subdomains == 5
    same = ddops.Decomposition.from_matrix(A, 5, overlap=1)
    assert np.array_equal(d.owner, same.owner)
    assert np.array_equal(d.indices, same.indices)
    assert ddops.Decomposition.from_matrix(ddops.poisson_2d(10)).num_subdomains == 2


# -- the command line -------------------------------------------------------------------------
@pytest.mark.parametrize("solver", ["superlu", "pardiso", "amg"])
def test_local_solver_flag_reaches_the_preconditioner(tmp_path, solver):
    need(solver)
    _, rows, _ = run(tmp_path, solver, "--problem", "poisson2d", "--n", "48", "--subdomains", "9",
               "--coarse", "gdsw", "--local-solver", solver)
    r = rows["two_level"]
    assert r["sparse_solver"] == solver and r["local_solver"] == "sparse"
    held = r["memory_held"]
    assert held["total_bytes"] == sum(held[k] for k in (
        "local_factor_bytes", "coarse_factor_bytes", "coarse_basis_bytes", "restriction_bytes",
        "symbolic_bytes", "reuse_coarse_bytes"))
    # the same iterations as a preconditioner built here on the same decomposition
    A = ddops.poisson_2d(48)
    d = ddops.Decomposition.from_grid((48, 48), (3, 3))
    M = ddops.TwoLevelSchwarz(A, d, coarse_basis="gdsw", local_solver=solver)
    b = np.random.default_rng(0).standard_normal(A.shape[0])
    assert abs(r["iterations"] - cg_iterations(A, b, M)) <= 1


def test_extension_solver_flag_changes_the_basis(tmp_path):
    need("amg")
    exact = run(tmp_path, "exact", "--problem", "poisson2d", "--n", "48", "--subdomains", "9",
                "--coarse", "gdsw", "--extension-solver", "superlu")[1]["two_level"]
    inexact = run(tmp_path, "inexact", "--problem", "poisson2d", "--n", "48", "--subdomains",
                  "9", "--coarse", "gdsw", "--extension-solver", "amg")[1]["two_level"]
    assert exact["coarse_dim"] == inexact["coarse_dim"]
    assert abs(exact["iterations"] - inexact["iterations"]) <= 2  # rtol 1e-6 keeps them


def test_bad_local_solver_is_one_line(capsys, tmp_path):
    assert main(["precond", "--problem", "poisson2d", "--n", "16", "--local-solver", "mumps",
                 "--save-prefix", str(tmp_path / "x"), *QUIET]) == 2
    err = capsys.readouterr().err
    assert "--local-solver" in err and "Traceback" not in err


def test_config_refuses_unknown_solvers():
    with pytest.raises(ValueError, match="local_solver"):
        PrecondConfig(problem="poisson2d", local_solver="mumps").validated()
    with pytest.raises(ValueError, match="extension_solver"):
        PrecondConfig(problem="poisson2d", extension_solver="dense").validated()


def test_the_krylov_loop_runs_its_vector_operations_on_one_blas_thread(monkeypatch):
    """Whatever --blas-threads, the Krylov method's vector operations run on one BLAS thread
    (threaded, their spinning threads take the cores the preconditioners' threads need)."""
    import types

    import numpy as np
    from threadpoolctl import threadpool_info, threadpool_limits

    from ddops.experiments.precond import runners

    seen = []

    def recording(A, b, M, method, **kwargs):
        seen.append([p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"])
        return None, 0, [1.0, 0.0], 1

    monkeypatch.setattr(runners, "solve_with_history", recording)
    c = types.SimpleNamespace(rtol=1e-8, restart=10)
    with threadpool_limits(limits=2):
        before = [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]
        for method in ("cg", "gmres"):
            runners._solve(None, np.ones(3), None, method, c, 10)
        after = [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]
    assert seen and all(limits and set(limits) == {1} for limits in seen)
    assert after == before  # restored


@pytest.mark.parametrize("variant", ["additive", "hybrid"])
def test_variant_flag_reaches_the_two_level_rows(tmp_path, variant):
    """--variant of the 2D/3D two-level rows: their label, and the iterations of a
    preconditioner of that variant built here on the same decomposition."""
    _, rows, table = run(tmp_path, variant, "--problem", "poisson2d", "--n", "48",
                         "--subdomains", "9", "--coarse", "gdsw", "--variant", variant)
    r = rows["two_level"]
    assert r["label"] == f"two-level {variant} Schwarz, GDSW"
    assert rows["one_level"]["label"] == "one-level additive Schwarz"
    A = ddops.poisson_2d(48)
    d = ddops.Decomposition.from_grid((48, 48), (3, 3))
    M = ddops.TwoLevelSchwarz(A, d, coarse_basis="gdsw", variant=variant)
    b = np.random.default_rng(0).standard_normal(A.shape[0])
    assert abs(r["iterations"] - cg_iterations(A, b, M)) <= 1


@pytest.mark.parametrize("argv,message", [
    (["--problem", "poisson2d", "--n", "16", "--variant", "restricted"],
     "--variant: the 2D/3D rows run CG"),
    (["--problem", "poisson1d", "--variant", "hybrid"],
     "--variant: only used with the 2D/3D problems"),
    (["--problem", "poisson2d", "--n", "16", "--variant", "multiplicative"],
     "--variant"),
])
def test_bad_variant_is_one_line(capsys, tmp_path, argv, message):
    assert main(["precond", *argv, "--save-prefix", str(tmp_path / "x"), *QUIET]) != 0
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err
