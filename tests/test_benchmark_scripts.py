"""The benchmark scripts that read ``setup_profile.py``'s problem list run at ``--quick``
sizes (a smoke test: a changed layout of that list broke two of them once), and
``geneo_eigen_stop.py`` and ``shared_order.py`` measure what they say."""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path

import pytest

from tests._optional import need

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def scripts(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    yield lambda name: importlib.import_module(name)
    for name in ("setup_profile", "agdsw_indicator", "geneo_inertia", "geneo_eigen_stop",
                 "shared_order", "pardiso_columns", "local_beside", "node_ordering",
                 "galerkin_product", "common", "coarse_columns",
                 "compare_revisions", "cores_ceiling", "small_dense"):  # (fresh for the next test)
        sys.modules.pop(name, None)


@pytest.fixture
def threaded_two_cpus(monkeypatch):
    """PARDISO's local solver threaded at ``--quick`` sizes too, on two CPUs (else skip)."""
    need("pardiso")
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs two CPUs")
    from ddops.precond import corrections

    monkeypatch.setattr(corrections, "THREADED_SOLVE_MIN_ROWS", 0)


@pytest.mark.parametrize("script,argv", [
    ("agdsw_indicator", ["--quick", "--repeat", "1", "--problems", "2"]),
    ("geneo_inertia", ["--quick", "--rounds", "1"]),
])
def test_problem_list_readers_run(scripts, script, argv, capsys):
    assert scripts(script).main(argv) == 0
    assert "floating channels" in capsys.readouterr().out


def test_geneo_eigen_stop_counts_fewer_solves(scripts, tmp_path, monkeypatch):
    need("pardiso")
    from ddops.dd import geneo

    # (the subspace iteration's solves: the block Krylov method, the default, settles these
    # small problems as soon as it reaches the counts)
    monkeypatch.setattr(geneo, "GENEO_KRYLOV", False)
    out = tmp_path / "stop.json"
    assert scripts("geneo_eigen_stop").main(
        ["--quick", "--repeat", "1", "--problems", "0", "2", "--json", str(out)]) == 0
    for row in json.loads(out.read_text()):
        settled, count = row["settled"], row["count"]
        assert settled["coarse_dim"] == count["coarse_dim"] > 0
        assert count["solves"] < settled["solves"], row["problem"]
        assert count["info"] == settled["info"] == 0
        assert row["sa"]["total"] > 0 and row["rs"]["total"] > 0  # the peers, same rounds


def test_geneo_krylov_solves_fewer_columns_for_the_same_space(scripts, tmp_path):
    """``geneo_krylov.py``: the block Krylov row solves fewer columns than the subspace
    iteration's, for the same coarse dimension, iterations and eigenvalues to the settle
    tolerance."""
    need("pardiso")
    out = tmp_path / "krylov.json"
    assert scripts("geneo_krylov").main(
        ["--quick", "--repeat", "1", "--problems", "0", "2", "--json", str(out)]) == 0
    for row in json.loads(out.read_text()):
        subspace, krylov = row["subspace"], row["Krylov"]
        assert 0 < krylov["columns"] < subspace["columns"], row["problem"]
        assert krylov["coarse_dim"] == subspace["coarse_dim"] > 0
        assert abs(krylov["iterations"] - subspace["iterations"]) <= 1
        assert row["apart"] <= 1e-5 and row["sa"]["setup"] > 0


def test_geneo_krylov_retiring_blocks_solve_the_same_columns(scripts, tmp_path):
    """``geneo_krylov.py --compare retire``: settled blocks retiring leave the solves (here:
    never more), the coarse dimension and the iterations as they are, the eigenvalues
    within the settle tolerance."""
    need("pardiso")
    out = tmp_path / "retire.json"
    assert scripts("geneo_krylov").main(
        ["--quick", "--repeat", "1", "--problems", "0", "2", "--compare", "retire",
         "--json", str(out)]) == 0
    for row in json.loads(out.read_text()):
        end, retiring = row["to the end"], row["retiring"]
        assert retiring["columns"] == end["columns"] > 0, row["problem"]
        assert retiring["coarse_dim"] == end["coarse_dim"] > 0
        assert abs(retiring["iterations"] - end["iterations"]) <= 1
        assert row["apart"] <= 1e-5 and row["sa"]["setup"] > 0


def test_the_machine_line_names_the_blas_libraries(scripts, monkeypatch, tmp_path):
    """``machine_summary`` names every BLAS library threadpoolctl finds, a mapped
    ``libblas`` it does not know by its path, and says so where there is neither."""
    import threadpoolctl

    common = scripts("common")
    found = [p for p in threadpoolctl.threadpool_info() if p.get("user_api") == "blas"]
    if not found:
        pytest.skip("threadpoolctl finds no BLAS library in this process")
    for p in found:
        assert f"{p['internal_api']} {p['version']}" in common.machine_summary()
    monkeypatch.setattr(threadpoolctl, "threadpool_info", lambda: [])
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0\n"
                    "7f02-7f03 r-xp 0 08:01 2 /usr/lib/libm.so.6\n")
    assert common.blas_summary(str(maps)) == (
        "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0 (unknown to threadpoolctl)")
    maps.write_text("")
    assert common.blas_summary(str(maps)) == "none found"


def test_coarse_columns_runs_give_the_triples_matrix(scripts, tmp_path):
    """``coarse_columns.py``: GenEO's columns assembled as runs are the matrix of the entry
    triples, bit for bit, their Galerkin product by ``spgemm`` scipy's, and every way and
    the peer were timed."""
    need("skfem")
    out = tmp_path / "columns.json"
    assert scripts("coarse_columns").main(["--quick", "--repeat", "1", "--json", str(out)]) == 0
    row = json.loads(out.read_text())
    assert row["same"] and row["entries"] > row["columns"] > 0
    assert row["runs"]["seconds"] > 0 and row["triples"]["seconds"] > 0 and row["sa"] > 0
    assert row["same_product"] and row["product_entries"] > 0
    assert row["spgemm"]["seconds"] > 0 and row["scipy"]["seconds"] > 0


def test_compare_revisions_times_both_sides_of_each_kind(scripts, tmp_path, capsys):
    """``compare_revisions.py`` against the last commit: the training step of both versions
    (the names it builds from exist in both), and the set-up of both with the same coarse
    dimension, each side built by its own package, pyamg SA's set-up beside; the exported
    package and its paths gone afterwards; a bad revision or problem index refused."""
    import shutil
    import subprocess

    root = BENCHMARKS.parent
    if shutil.which("git") is None or subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True).returncode:
        pytest.skip("needs the git repository")
    script = scripts("compare_revisions")
    scripts("geneo_inertia")  # (its import puts the benchmarks folder on sys.path, once)
    before = list(sys.path)
    assert script.main(["HEAD", "--sizes", "64", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "n=64" in out and "step" in out and "data" in out
    assert sys.path == before
    rows = tmp_path / "setup.json"
    assert script.main(["HEAD", "--setup", "--quick", "--rounds", "1", "--problems", "2",
                        "--coarse", "gdsw", "--json", str(rows)]) == 0
    (row,) = json.loads(rows.read_text())
    assert row["same_dim"] and row["rev_setup"] > 0 and row["tree_setup"] > 0
    assert row["sa_setup"] > 0
    assert "ddops_rev" not in sys.modules and sys.path == before
    assert script.main(["no-such-revision", "--setup"]) == 2
    assert "cannot export" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        script.main(["HEAD", "--setup", "--problems", "99"])


def test_compare_revisions_refuses_revisions_that_build_different_matrices(scripts,
                                                                          monkeypatch):
    """The set-ups of two revisions compare only on the same matrix: one side's matrix
    changed, the run stops with a message naming the problem."""
    import shutil
    import subprocess
    from types import SimpleNamespace

    if shutil.which("git") is None or subprocess.run(
            ["git", "-C", str(BENCHMARKS.parent), "rev-parse", "HEAD"],
            capture_output=True).returncode:
        pytest.skip("needs the git repository")
    script = scripts("compare_revisions")
    side = script.setup_side

    def changed(pkg, *args):
        build, prob = side(pkg, *args)
        if pkg == "ddops":
            prob = SimpleNamespace(A=2.0 * prob.A, null_space=prob.null_space)
        return build, prob

    monkeypatch.setattr(script, "setup_side", changed)
    with pytest.raises(SystemExit, match="different matrices"):
        script.main(["HEAD", "--setup", "--quick", "--rounds", "1", "--problems", "2",
                     "--coarse", "gdsw"])
    assert "ddops_rev" not in sys.modules


def test_coarse_beside_keeps_the_iterations(scripts, tmp_path, threaded_two_cpus):
    """``coarse_beside.py``: the three rows (one thread, two with the coarse correction after
    the local solves, two with it beside them; the local solves threaded at this small size
    too) give the same iterations, and every row timed an application and a solve."""
    out = tmp_path / "beside.json"
    assert scripts("coarse_beside").main(
        ["--quick", "--repeat", "1", "--problems", "2", "--json", str(out)]) == 0
    for row in json.loads(out.read_text()):
        runs = [row[way] for way in ("one", "after", "beside")]
        assert len({r["iterations"] for r in runs}) == 1 and runs[0]["iterations"] > 0
        assert all(r["apply_ms"] > 0 and r["solve"] > 0 for r in runs)
        assert row["sa"]["total"] > 0 and row["coarse_dim"] > 0 and row["threaded"]


def test_local_beside_keeps_the_preconditioner(scripts, tmp_path, threaded_two_cpus):
    """``local_beside.py``: on two threads the numeric local factorisation ran beside the
    coarse space in the beside row only (the local solver threaded at this small size too),
    the two-thread preconditioners apply the same bit for bit, and the one-thread one
    within rounding."""
    out = tmp_path / "beside.json"
    assert scripts("local_beside").main(
        ["--quick", "--repeat", "1", "--problems", "2", "--coarse", "gdsw", "geneo",
         "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [row["coarse"] for row in rows] == ["gdsw", "geneo"]
    for row in rows:
        assert row["beside"]["beside"] > 0 == row["before"]["beside"] == row["one"]["beside"]
        assert row["same"] and row["one_thread_apart"] <= 1e-10
        assert row["sa"]["setup"] > 0 and row["beside"]["coarse_dim"] > 0


def test_node_ordering_factorises_with_fewer_nonzeros(scripts, tmp_path):
    """``node_ordering.py`` (GDSW on 3D elasticity and the beam, ``--quick``): the node
    graph's minimum degree has fewer factor nonzeros than the unknowns' on the inclusions
    (both orderings are minimum degree there), the two preconditioners agree to the rounding
    of the local solves and need the same iterations, and the flag is on again after."""
    need("pardiso")
    from ddops.linalg import local_solvers

    out = tmp_path / "nodes.json"
    assert scripts("node_ordering").main(
        ["--quick", "--repeat", "1", "--problems", "1", "--coarse", "gdsw", "--beam", "6",
         "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [r["problem"].split(",")[0] for r in rows] == ["3D elasticity",
                                                         "3D elasticity beam"]
    for row in rows:
        assert row["apart"] <= 1e-8, row["problem"]
        assert row["nodes"]["iterations"] == row["unknowns"]["iterations"] > 0
        assert row["sa"]["iterations"] > 0  # the peer, same rounds
    assert rows[0]["nodes"]["factor_nnz"] < rows[0]["unknowns"]["factor_nnz"]
    assert local_solvers.PARDISO_NODE_MINIMUM_DEGREE is True


def test_galerkin_product_ways_agree_and_the_rule_is_restored(scripts, tmp_path):
    """``galerkin_product.py`` (``--quick``, 3D elasticity and 3D Poisson): the three ways
    give the same ``A_0`` to rounding, the library's way follows the entry ratio, and the
    rule's constant is the library's again after the forced runs."""
    import ddops.dd.coarse_matrix as cm

    before = cm.GALERKIN_SPLIT_MIN
    out = tmp_path / "galerkin.json"
    assert scripts("galerkin_product").main(
        ["--quick", "--repeat", "1", "--problems", "1", "4", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [r["problem"] for r in rows] == ["3D elasticity, stiff inclusions 1e6",
                                            "3D Poisson"]
    for row in rows:
        assert row["apart"] <= 1e-13, row["problem"]
        assert row["coarse_dim"] > 0 and min(row["seconds"].values()) > 0
        assert row["library"] == ("interior" if row["phi_to_a"] >= before else "interface")
        setup = row["setup"]  # GDSW's whole set-up and its phase, and the peer's
        assert 0 < setup["coarse_assembly"] < setup["gdsw"] and setup["sa"] > 0
    assert cm.GALERKIN_SPLIT_MIN == before


def test_shared_order_shares_and_keeps_the_basis(scripts, tmp_path, monkeypatch):
    """``shared_order.py``: the shared row analyses its interiors by the subdomains' order,
    the other row by PARDISO's own, and the two bases agree to rounding."""
    need("pardiso")
    out = tmp_path / "order.json"
    assert scripts("shared_order").main(
        ["--quick", "--repeat", "1", "--problems", "2", "4", "--json", str(out)]) == 0
    for row in json.loads(out.read_text()):
        assert row["shared"]["shared_chunks"] > 0 == row["own"]["shared_chunks"]
        assert row["own"]["factor_nnz"] > 0 and row["shared"]["factor_nnz"] > 0
        assert row["apart"] <= 1e-12, row["problem"]
        assert row["sa"]["setup"] > 0  # the peer, same rounds
    # GenEO with the Neumann matrices of 2D elasticity: its eigenproblems take the order.
    # The same basis bit for bit where that order is the one GenEO computes by itself,
    # PARDISO's minimum degree on the unknowns' graph; the default orders the subdomains'
    # node graph instead, and the eigenvectors of the rigid modes' multiple eigenvalue then
    # rotate (the preconditioners agree to rounding, node_ordering.py)
    from ddops.linalg import local_solvers

    monkeypatch.setattr(local_solvers, "PARDISO_NODE_MINIMUM_DEGREE", False)
    assert scripts("shared_order").main(
        ["--quick", "--repeat", "1", "--problems", "0", "--coarse", "geneo", "--json",
         str(out)]) == 0
    (row,) = json.loads(out.read_text())
    assert (row["own"]["shared_chunks"], row["shared"]["shared_chunks"]) == (0, 1)
    assert row["apart"] <= 1e-12


def test_setup_profile_targets_follow_from_its_rows(scripts, tmp_path):
    """``setup_profile.py --both-cores`` at ``--quick`` sizes: every ratio it prints as a
    target is the one recomputed here from the rows it reports (the race against pyamg SA
    from ddops' fastest two-level row, the set-up ratios, the speed-ups of the one-thread
    and all-cores runs), and PASS/MISS follows from the target's bound."""
    out = tmp_path / "profile.json"
    assert scripts("setup_profile").main(["--quick", "--problems", "0", "--both-cores",
                                          "--json", str(out)]) == 0
    one, many = json.loads(out.read_text())
    rows = one["rows"]
    targets = {t["target"]: t for t in one["targets"]}
    ours = {k: r for k, r in rows.items() if k.startswith("two_level") and r["converged"]}
    best = min(ours, key=lambda k: ours[k]["total"])
    race = targets[f"pyamg set-up + solve / ddops' fastest ({best})"]
    assert race["value"] == pytest.approx(rows["pyamg"]["total"] / ours[best]["total"])
    assert race["pass"] == (race["value"] >= 2.0)
    for space in ("agdsw", "geneo"):
        ratio = targets[f"{space} set-up / GDSW's"]
        assert ratio["value"] == pytest.approx(rows[f"two_level_{space}"]["setup"]
                                               / rows["two_level_gdsw"]["setup"])
        assert ratio["pass"] == (ratio["value"] <= 1.5)
    speed = {t["target"]: t for t in one["both_cores"]}
    assert set(speed) == {f"{k} both cores" for k in ours if many["rows"][k]["converged"]}
    for name in ours:
        s = speed[f"{name} both cores"]
        assert s["value"] == pytest.approx(rows[name]["total"] / many["rows"][name]["total"])
        assert s["pass"] == (s["value"] >= 1.6)


def test_pardiso_columns_keeps_the_coarse_spaces(scripts, tmp_path):
    """``pardiso_columns.py``: the set-ups with PARDISO's narrow multi-column solves split
    and in one call build the same coarse spaces to rounding."""
    need("pardiso")
    out = tmp_path / "columns.json"
    assert scripts("pardiso_columns").main(
        ["--quick", "--repeat", "1", "--problems", "2", "--kinds", "gdsw", "geneo",
         "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [row["kind"] for row in rows] == ["gdsw", "geneo"]
    for row in rows:
        assert row["one_call"]["coarse_dim"] == row["split"]["coarse_dim"] > 0
        assert row["apart"] <= 1e-10, row["kind"]
        assert row["one_call"]["setup"] > 0 and row["split"]["setup"] > 0
        assert row["sa"]["setup"] > 0  # the peer, same rounds
    # --calls: every full solve of several columns of the set-up, timed both ways
    assert scripts("pardiso_columns").main(
        ["--quick", "--calls", "--problems", "2", "--kinds", "geneo", "--json", str(out)]) == 0
    calls = json.loads(out.read_text())
    assert calls and all(c[1] == "geneo" and c[2] >= 2 and c[5] > 0 and c[6] > 0
                         for c in calls)


@pytest.mark.parametrize("script", ["setup_profile", "cost3d"])
def test_a_wrong_petsc_python_stops_before_the_first_measurement(scripts, tmp_path, script,
                                                                 monkeypatch):
    """``--petsc-python`` is checked first: a Python without petsc4py, or none at that
    path, stops the script with one line naming the flag, before any row is measured."""
    module = scripts(script)

    def measured(*args, **kwargs):
        raise AssertionError("a row was measured before --petsc-python was checked")

    monkeypatch.setattr(module, "run", measured, raising=False)
    monkeypatch.setattr(module, "_measure", measured, raising=False)
    monkeypatch.setattr(module, "machine_summary", measured)
    without = tmp_path / "python"
    without.write_text("#!/bin/sh\necho 'ModuleNotFoundError: no petsc4py' >&2\nexit 1\n")
    without.chmod(0o755)
    for python, said in [(without, "cannot import what the PETSc peers need "
                                   "(ModuleNotFoundError"),
                         (tmp_path / "absent", "cannot run it")]:
        with pytest.raises(SystemExit) as stop:
            module.main(["--quick", "--petsc-python", str(python)])
        assert str(stop.value).startswith(f"--petsc-python {python}: {said}")


def test_setup_profile_keeps_what_it_measured(scripts, tmp_path, monkeypatch, capsys):
    """A failed ``ddops precond`` run is reported on its problem's line and the others are
    measured (exit status 1); the JSON file holds every finished problem after each one, so
    a run stopped later keeps them."""
    module = scripts("setup_profile")
    out = tmp_path / "profile.json"
    real = module.run
    calls = []

    def flaky(args, prefix, threads=1):
        calls.append(args[1])
        if len(calls) == 1:
            raise SystemExit("ddops precond failed (1): a made-up failure")
        if len(calls) == 3:
            raise KeyboardInterrupt  # the run stopped by hand during the third problem
        return real(args, prefix, threads)

    monkeypatch.setattr(module, "run", flaky)
    with pytest.raises(KeyboardInterrupt):
        module.main(["--quick", "--problems", "2", "4", "0", "--json", str(out)])
    printed = capsys.readouterr().out
    assert "### 2D floating channels 1e6: ddops precond failed (1): a made-up failure" in printed
    kept = json.loads(out.read_text())
    assert [r["label"] for r in kept] == ["3D Poisson"]  # measured, then kept
    assert kept[0]["rows"]["two_level_gdsw"]["setup"] > 0

    def unreadable(args, prefix, threads=1):  # exit 0, but no results file
        raise FileNotFoundError(f"{prefix}_results.json")

    monkeypatch.setattr(module, "run", unreadable)
    assert module.main(["--quick", "--problems", "2", "--json", str(out)]) == 1
    assert "failed: 2D floating channels 1e6" in capsys.readouterr().out
    assert json.loads(out.read_text()) == kept  # nothing measured: the file as it was


def test_a_petsc_python_that_hangs_is_stopped_by_the_timeout(scripts, tmp_path):
    common = scripts("common")
    slow = tmp_path / "python"
    slow.write_text("#!/bin/sh\nsleep 30\n")
    slow.chmod(0o755)
    with pytest.raises(SystemExit) as stop:
        common.check_petsc_python(str(slow), timeout=0.5)
    assert str(stop.value) == f"--petsc-python {slow}: its imports took more than 0.5 s"


def test_setup_profile_reports_failed_peers_and_keeps_its_rows(scripts, tmp_path, monkeypatch,
                                                               capsys):
    """The PETSc peers failing on a problem: its table is printed with ddops' rows alone,
    the failure is listed, and the exit status is 1."""
    module = scripts("setup_profile")
    out = tmp_path / "profile.json"
    monkeypatch.setattr(module, "check_petsc_python", lambda python: None)

    def failing(python, args, threads=1):
        raise SystemExit("petsc_setup_peers.py failed (1): a made-up failure")

    monkeypatch.setattr(module, "run_petsc_peers", failing)
    assert module.main(["--quick", "--problems", "4", "--petsc-python", "python",
                        "--json", str(out)]) == 1
    printed = capsys.readouterr().out
    assert ("3D Poisson: petsc_setup_peers.py failed (1): a made-up failure; the table "
            "without the PETSc peers") in printed
    assert "failed: 3D Poisson (PETSc peers)" in printed
    kept = json.loads(out.read_text())
    assert kept[0]["rows"]["two_level_gdsw"]["setup"] > 0
    assert not any(r.get("peer") for r in kept[0]["rows"].values())


def test_the_ceiling_is_the_copies_work_over_their_time(scripts):
    ceiling = scripts("cores_ceiling").ceiling
    assert ceiling(1.0, [1.0, 1.0]) == 2.0  # no contention: both cores' worth
    assert ceiling(1.0, [2.0, 2.0]) == 1.0  # each copy twice as slow: nothing to gain
    assert ceiling(2.0, [2.4, 2.6]) == pytest.approx(1.6)  # 4 s of work in 2.5 s
    assert ceiling(1.0, [1.5, 1.5, 1.5, 1.5]) == pytest.approx(4 / 1.5)


def test_cores_ceiling_times_the_copies_at_once(scripts, tmp_path):
    """``cores_ceiling.py`` at ``--quick`` sizes: the side-by-side copies (one per core)
    time their repetitions at the same time, and every number of a row follows from the
    times it keeps (the ceiling, the speed-up, its share of the ceiling)."""
    module = scripts("cores_ceiling")
    out = tmp_path / "ceiling.json"
    assert module.main(["--quick", "--problems", "4", "--methods", "gdsw", "sa",
                        "--repeat", "2", "--rounds", "2", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    cores = os.cpu_count() or 1
    assert [(r["problem"], r["method"]) for r in rows] == [("3D Poisson", "gdsw"),
                                                            ("3D Poisson", "sa")]
    for r in rows:
        walls = r["walls"]
        # two rounds of two repetitions: one process alone and threaded, `cores` at once
        assert [len(w) for w in walls["alone"]] == [2, 2]
        assert len(walls["side by side"]) == 2 * cores
        assert r["overlap_seconds"] > 0  # every copy's timed loop overlaps all the others'
        alone = sorted(w for run in walls["alone"] for w in run)
        assert r["alone"] == pytest.approx(0.5 * (alone[1] + alone[2]))  # median of four
        # each copy's median over its repetitions and the rounds (kept round by round)
        for c in range(cores):
            side = sorted(w for k in (c, cores + c) for w in walls["side by side"][k])
            assert r["side_by_side"][c] == pytest.approx(0.5 * (side[1] + side[2]))
        threaded = sorted(w for run in walls["threaded"] for w in run)
        assert r["threaded"] == pytest.approx(0.5 * (threaded[1] + threaded[2]))
        assert 0 < r["alone_cpu"] and 0 < r["threaded_cpu"] and r["converged"]
        assert r["ceiling"] == pytest.approx(cores * r["alone"] * cores
                                             / sum(r["side_by_side"]))
        assert r["speedup"] == pytest.approx(r["alone"] / r["threaded"])
        assert r["share"] == pytest.approx(r["speedup"] / r["ceiling"])
        assert all(its and max(its) < 20_000 for its in r["iterations"].values())
    with pytest.raises(SystemExit):
        module.main(["--quick", "--problems", "99"])
    with pytest.raises(SystemExit):
        module.main(["--quick", "--repeat", "0"])


def test_a_failing_copy_stops_the_measurement_with_its_error(scripts, tmp_path):
    """A worker that fails while it builds (no such problem): the others are not left
    waiting, and the error names the worker's own exception."""
    module = scripts("cores_ceiling")
    spec = {"problem": 99, "method": "gdsw", "quick": True, "repeat": 1, "threads": 1}
    with pytest.raises(SystemExit, match=r"(?s)a worker failed \(1\): .*IndexError"):
        module.launch(spec, 2, str(tmp_path), "bad")


def test_small_dense_alternates_the_bound_on_the_same_operator(scripts, tmp_path, monkeypatch):
    """``small_dense.py``: the two ways alternate (the bound 0, then the library's, then in
    the other order), converge in the same iterations, apply the same operator to rounding,
    and the library's bound is given back; pyamg SA runs in the same rounds."""
    from ddops.linalg import parallel

    module = scripts("small_dense")
    bound, seen = parallel.SMALL_DENSE_ROWS, []
    run = module.one_run

    def spy(*args):
        seen.append(parallel.SMALL_DENSE_ROWS)
        return run(*args)

    monkeypatch.setattr(module, "one_run", spy)
    out = tmp_path / "small_dense.json"
    assert module.main(["--quick", "--repeat", "2", "--problems", "2", "--json",
                        str(out)]) == 0
    assert seen == [0, bound, bound, 0] and parallel.SMALL_DENSE_ROWS == bound
    (row,) = json.loads(out.read_text())
    assert row["bound"] == bound and row["apart"] <= 1e-10
    runs = [r for way in module.WAYS for r in row["runs"][way]]
    assert len(runs) == 4 and len({r["iterations"] for r in runs}) == 1
    assert all(r["converged"] and r["iterations"] > 0 for r in runs)
    assert all(r["total"] == pytest.approx(r["setup"] + r["solve"]) for r in runs)
    spun = [r["spun"] for r in runs]
    assert all(s is None for s in spun) or all(s >= 0 for s in spun)
    # the peer in the same rounds, timed the same way
    assert len(row["sa"]) == 2 and all(r["converged"] and r["iterations"] > 0
                                       for r in row["sa"])
    assert all(r["total"] == pytest.approx(r["setup"] + r["solve"]) and r["total_cpu"] > 0
               for r in row["sa"] + runs)
    with pytest.raises(SystemExit):
        module.main(["--repeat", "0"])


def test_small_dense_counts_native_threads_only(scripts):
    """The spinning workers' CPU: what the threads that are not Python's took between two
    readings (a Python thread's own time is left out)."""
    import threading

    spun = scripts("small_dense").spun
    main = threading.main_thread().native_id
    before = {main: 1.0, -1: 2.0}
    after = {main: 5.0, -1: 2.5, -2: 0.25}  # (-2: a native thread started meanwhile)
    assert spun(before, after) == pytest.approx(0.75)
    assert spun(None, after) is None and spun(before, None) is None
