"""Runs that cannot be meant are caught before they start: subdomains of a few unknowns are
refused, and a run estimated far above the documented run times is announced in one line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import ddops.experiments.compare as experiments
from ddops import Decomposition, coarse_basis
from ddops.experiments.cli import main
from ddops.experiments.compare import ExperimentConfig, build_models, estimate_cost
from ddops.problems import poisson_2d


@pytest.fixture
def nothing_built(monkeypatch):
    """Fail the test if a problem is built or a model trained."""

    def refuse(*args, **kwargs):
        raise AssertionError("work started")

    monkeypatch.setattr(experiments, "build_problem", refuse)
    monkeypatch.setattr(experiments.Trainer, "run", refuse)


@pytest.fixture
def ran(monkeypatch):
    """Record the comparisons the command line starts instead of running them."""
    calls = []

    def run_compare(c, *args, **kwargs):
        calls.append(c)
        return {}

    monkeypatch.setattr(experiments, "run_compare", run_compare)
    return calls


@pytest.mark.parametrize("command,argv,needle", [
    # the run: 4096 unknowns in 1000 boxes, about 4 each
    ("compare", ["--problem", "poisson2d", "--n", "64", "--subdomains", "1000"],
     "--subdomains=1000 leaves 4.1 unknowns per subdomain"),
    ("compare", ["--problem", "poisson2d", "--n", "64", "--subdomains", "800",
                 "--partitioner", "metis"], "at most 682 subdomains"),
    ("compare", ["--n", "64", "--subdomains", "16"], "3.9 unknowns per subdomain"),
    ("sweep", ["--n", "64", "--subdomains", "16", "--lrs", "1e-3"], "--subdomains=16"),
    ("scaling", ["--problem", "poisson2d", "--ns", "64", "--subdomain-width", "2"],
     "--subdomain-width"),
])
def test_subdomains_of_a_few_unknowns_are_refused(command, argv, needle, nothing_built,
                                                  capsys, tmp_path):
    rc = main([command, *argv, "--save-prefix", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not list(tmp_path.iterdir())


def test_subdomains_of_enough_unknowns_run(ran, capsys, tmp_path):
    # 63 unknowns in 8 subdomains (8 elements each) and 4096 in 512 boxes of 8 points
    assert main(["compare", "--n", "64", "--subdomains", "8", "--steps", "10",
                 "--save-prefix", str(tmp_path / "a")]) == 0
    assert main(["compare", "--problem", "poisson2d", "--n", "64", "--subdomains", "512",
                 "--global-rank", "0", "--steps", "10", "--save-prefix",
                 str(tmp_path / "b")]) == 0
    assert [c.subdomains for c in ran] == [8, 512]
    assert capsys.readouterr().err == ""


def test_a_run_of_hours_is_announced_in_one_line(ran, capsys, tmp_path):
    # 256 boxes of 4 x 4 points: about 1400 coarse functions, so baselines of rank 2400
    assert main(["compare", "--problem", "poisson2d", "--n", "64", "--subdomains", "256",
                 "--save-prefix", str(tmp_path / "x")]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(ran) == 1  # a warning, not a refusal: the run goes on
    assert len(err) == 1 and err[0].startswith("ddops compare: warning: estimated ")
    assert "2000 steps of 3 models" in err[0] and "documented run times" in err[0]
    # the documented commands are not
    for argv in (["compare"], ["compare", "--problem", "poisson2d", "--n", "64",
                               "--subdomains", "16", "--coarse", "gdsw", "--preset",
                               "improved"]):
        assert main([*argv, "--save-prefix", str(tmp_path / "y")]) == 0
        assert capsys.readouterr().err == ""


def test_a_study_of_hours_is_announced_once(ran, monkeypatch, capsys, tmp_path):
    calls = []
    monkeypatch.setattr(experiments, "run_scaling", lambda *a, **k: calls.append(a) or [])
    assert main(["scaling", "--ns", "32768", "65536", "131072",
                 "--save-prefix", str(tmp_path / "s")]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(calls) == 1 and len(err) == 1, err
    assert "3 comparisons of 2000 steps" in err[0]


def test_estimated_parameters_match_the_built_models():
    # 1D: exact, from the decomposition's sizes and n0 = N - 1 interface hats
    c = ExperimentConfig(n=128, subdomains=4, global_ranks=(7,)).validated()
    prob = experiments.build_problem(c)
    built = {k: op.num_params for k, op in build_models(c, prob.decomposition).items()}
    assert estimate_cost(c)["params"] == built


@pytest.mark.parametrize("N,parts", [(16, (4, 4)), (6, (3, 2)), (64, (8, 8))])
def test_estimated_coarse_dimension_of_boxes_is_gdsw(N, parts):
    # the GDSW space of a box decomposition, built from A, against the estimate
    A = poisson_2d(32)
    d = Decomposition.from_grid((32, 32), parts, overlap=1)
    n0 = coarse_basis(d, "gdsw", A=A).shape[1]
    c = ExperimentConfig.for_problem("poisson2d", n=32, subdomains=N, global_ranks=())
    expected = 2 * (4 * int(d.sizes.sum()) + n0 * n0)
    assert estimate_cost(c)["params"]["schwarz"] == pytest.approx(expected, rel=0.1)


def test_estimate_grows_with_the_steps_and_the_problem():
    small = estimate_cost(ExperimentConfig(steps=100))
    assert estimate_cost(ExperimentConfig(steps=200))["seconds"] == pytest.approx(
        2 * small["seconds"], rel=0.05)
    assert estimate_cost(ExperimentConfig(n=1024, subdomains=32))["step_seconds"] > \
        small["step_seconds"]


_TIME = re.compile(r"\b\d+\s+(seconds|minutes|hours)\b|\ba\s+minute\b")


def _documented_commands(text: str):
    """``(command, the paragraphs that may state its time)`` of every command the README runs.

    The lines of its code blocks that run ``ddops`` (their introducing paragraph states
    the time), and the ``ddops compare``/``sweep``/``scaling`` runs with flags quoted in
    the text.
    """
    paragraphs = re.split(r"\n\s*\n", text)
    for i, p in enumerate(paragraphs):
        for line in p.splitlines():
            if line.startswith("    ") and re.search(r"(^|&& |-n \d+ )ddops ", line.strip()):
                yield line.strip(), [paragraphs[i - 1], p]
        for quoted in re.findall(r"`(ddops (?:compare|sweep|scaling) --[^`]*)`", p):
            if "--help" not in quoted:
                yield " ".join(quoted.split()), [p]


def test_readme_states_the_run_time_of_every_documented_command():
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    commands = list(_documented_commands(text))
    assert any("ddops compare --problem poisson2d" in c for c, _ in commands)
    assert any(c.startswith("ddops scaling") for c, _ in commands)
    missing = [c for c, where in commands if not any(_TIME.search(p) for p in where)]
    assert not missing, missing
