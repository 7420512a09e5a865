"""``ddops precond --matrix``: the matrix checked once, up front (naming ``--matrix``), a
singular matrix named before any row runs, refused rows that do not end the run, and the
block-size hint of a vector problem."""

import json

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

import ddops
from ddops.experiments.cli import EXIT_ROWS, EXIT_USAGE, main
from ddops.experiments.precond import block_structure

from ._precond import QUIET, cg_iterations, run


def neumann_2d(n):
    """The pure-Neumann 5-point Laplacian (its kernel: the constants)."""
    T = sp.diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1]).tolil()
    T[0, 0] = T[-1, -1] = 1.0
    I = sp.identity(n)
    return (sp.kron(T.tocsr(), I) + sp.kron(I, T.tocsr())).tocsr()


def precond(tmp_path, capsys, *argv):
    """(exit status, stdout, stderr) of ``ddops precond *argv``."""
    status = main(["precond", *argv, "--save-prefix", str(tmp_path / "out"), *QUIET])
    out, err = capsys.readouterr()
    return status, out, err.strip()


# -- a singular matrix -----------------------------------------------------------------------------
def test_singular_matrix_is_refused_before_any_row(tmp_path, capsys):
    N = neumann_2d(12)
    assert np.abs(N @ np.ones(N.shape[0])).max() == 0.0  # singular by construction
    scipy.io.mmwrite(tmp_path / "neumann.mtx", N)
    status, out, err = precond(tmp_path, capsys, "--matrix", str(tmp_path / "neumann.mtx"),
                               "--subdomains", "4")
    assert status == EXIT_USAGE
    assert out == ""  # no row ran (they used to run to the iteration cap first)
    assert len(err.splitlines()) == 1, err
    assert "--matrix: A is singular: it annihilates the constant vector" in err
    assert err.endswith("pass --kernel constants|FILE (the vectors the matrix annihilates)")
    assert "kernel=" not in err and "TwoLevelSchwarz" not in err  # the flag, not Python
    assert not list(tmp_path.glob("out_*"))


def test_floating_elastic_body_names_a_constant_component(tmp_path, capsys):
    fem = pytest.importorskip("ddops.problems.fem")
    pytest.importorskip("skfem")
    A, _ = fem.fem_elasticity_2d(6, dirichlet=None)  # translations and rotation in the kernel
    scipy.io.mmwrite(tmp_path / "free.mtx", A)
    status, out, err = precond(tmp_path, capsys, "--matrix", str(tmp_path / "free.mtx"),
                               "--block-size", "2", "--subdomains", "4")
    assert status == EXIT_USAGE and out == ""
    assert "A is singular: it annihilates constant component 0" in err, err


def test_a_kernel_found_by_the_coarse_matrix_names_the_flag(tmp_path, capsys):
    # a grounded Laplacian beside a floating (pure-Neumann) one: A 1 != 0, so the cheap test
    # passes, and the singular coarse matrix says it; the row is refused in the flag's words
    A = sp.block_diag([ddops.poisson_2d(12), neumann_2d(12)]).tocsr()
    assert np.abs(A @ np.ones(A.shape[0])).max() > 0.5
    sp.save_npz(tmp_path / "float.npz", A)
    payload, rows, table = run(tmp_path, "fl", "--matrix", str(tmp_path / "float.npz"),
                               "--subdomains", "6", status=EXIT_ROWS)
    r = rows["two_level"]
    assert r["status"] == "refused"
    assert r["failed"].startswith("A is singular: the coarse matrix A_0")
    assert r["failed"].endswith("pass --kernel constants|FILE (the vectors the matrix "
                                "annihilates)")
    assert "kernel=" not in r["failed"]
    err = capsys.readouterr().err
    assert "--kernel=" not in err and "pass --kernel constants|FILE" in err


# -- bad matrices: one line naming --matrix, before any row ----------------------------------------
def _nan(A):
    A = A.tolil()
    A[3, 3] = np.nan
    return A


def _unsymmetric(A):
    A = A.tolil()
    A[0, 1] = -0.5
    return A


def _negative(A):
    return -A


@pytest.mark.parametrize("damage, message", [
    (_nan, "--matrix: 'bad.mtx' contains NaN or inf (row 3)"),
    (_unsymmetric, "--matrix: 'bad.mtx' is not symmetric: max |A - A^T| = 5.000e-01"),
    (_negative, "--matrix: 'bad.mtx': diagonal entry 0 is -4 (and 99 more)"),
])
def test_bad_matrix_is_named_up_front(tmp_path, capsys, damage, message):
    L = ddops.poisson_2d(10)
    L = (L * (4.0 / L[0, 0])).tocsr()  # the stencil 4, -1
    scipy.io.mmwrite(tmp_path / "bad.mtx", sp.csr_matrix(damage(L)))
    status, out, err = precond(tmp_path, capsys, "--matrix", str(tmp_path / "bad.mtx"),
                               "--subdomains", "4")
    assert status == EXIT_USAGE and out == "", out  # found before the first row
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert message in err, err
    assert "Jacobi" not in err


# -- refused rows ----------------------------------------------------------------------------------
def test_a_refusing_coarse_space_leaves_the_other_rows(tmp_path, capsys):
    # L^2 + L (L the Dirichlet Laplacian): SPD, not diagonally dominant (the squared
    # stencil's off-diagonal sum exceeds the diagonal), which GenEO's local matrices with
    # cut couplings (--oversampling 0) need
    L = ddops.poisson_2d(10)
    A = (L @ L + L).tocsr()
    off = abs(A).sum(axis=1).A1 - 2 * abs(A.diagonal())
    assert (off > 0).any()
    scipy.io.mmwrite(tmp_path / "sq.mtx", A)
    b = np.random.default_rng(3).standard_normal(A.shape[0])
    np.save(tmp_path / "b.npy", b)
    payload, rows, table = run(tmp_path, "sq", "--matrix", str(tmp_path / "sq.mtx"),
                               "--rhs", str(tmp_path / "b.npy"), "--subdomains", "4",
                               "--coarse", "all", "--oversampling", "0", status=EXIT_ROWS)
    geneo = rows["two_level_geneo"]
    assert geneo["status"] == "refused" and geneo["converged"] is False
    assert geneo["failed"].startswith("geneo: A is not diagonally dominant")
    assert "| two-level additive Schwarz, GenEO | refused: geneo: A is not diagonally" in table
    assert geneo["label"] not in payload["residual_histories"]
    # the rows after it ran, and the others are what the library gives
    assert rows["pyamg"]["status"] == "ok" and rows["pyamg"]["converged"]
    d = ddops.Decomposition.from_matrix(A, 4, 1)
    assert rows["two_level_gdsw"]["iterations"] == cg_iterations(
        A, b, ddops.TwoLevelSchwarz(A, d, "gdsw"))
    assert all(r["status"] == "ok" for k, r in rows.items() if k != "two_level_geneo")
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith("ddops precond: two-level additive Schwarz, GenEO: refused: geneo:")
    assert err.endswith(f"see {tmp_path / 'sq_results.json'}")
    assert json.loads((tmp_path / "sq_results.json").read_text())["rows"]


# -- the block-size hint ---------------------------------------------------------------------------
def test_block_structure_of_interleaved_unknowns():
    L = ddops.poisson_2d(6)
    # two components per node, coupled inside the node; one exact zero in a node block
    K = sp.kron(L, np.array([[2.0, 0.5], [0.5, 2.0]])).tolil()
    K[0, 1] = K[1, 0] = 0.0
    K = K.tocsr()
    K.eliminate_zeros()
    assert block_structure(K) == 2
    assert block_structure(sp.kron(L, np.ones((3, 3))).tocsr()) == 3
    # a scalar problem, and the same vector problem numbered field by field: no structure
    for scalar in (ddops.poisson_1d(40), L, ddops.poisson_3d(5)):
        assert block_structure(scalar.tocsr()) is None
    p = np.concatenate([np.arange(0, K.shape[0], 2), np.arange(1, K.shape[0], 2)])
    assert block_structure(K[p][:, p].tocsr()) is None
    assert block_structure(sp.csr_matrix(np.ones((6, 6)) + 6 * np.eye(6))) is None


def test_vector_problem_without_block_size_gets_one_hint(tmp_path, capsys):
    L = ddops.poisson_2d(8)
    K = sp.kron(L, np.array([[2.0, 0.5], [0.5, 2.0]])).tocsr()
    scipy.io.mmwrite(tmp_path / "vec.mtx", K)
    payload, _, _ = run(tmp_path, "v", "--matrix", str(tmp_path / "vec.mtx"),
                        "--subdomains", "4")
    out = capsys.readouterr().out
    assert out.count("--block-size 2") == 1, out
    assert len(payload["notes"]) == 1 and "groups of 2" in payload["notes"][0]
    payload, _, _ = run(tmp_path, "w", "--matrix", str(tmp_path / "vec.mtx"),
                        "--subdomains", "4", "--block-size", "2")
    assert payload["notes"] == [] and "--block-size" not in capsys.readouterr().out
