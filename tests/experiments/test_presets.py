"""The presets resolve to the documented settings; the switches reach the models."""

import json
from dataclasses import asdict

import numpy as np
import pytest

from ddops.experiments.cli import build_parser, config_from_args, main
from ddops.experiments.compare import (
    PRESETS,
    ExperimentConfig,
    build_models,
    build_problem,
    scaling_configs,
)
from ddops.learning.initialisation import local_scales, problem_init
from ddops.operators import SchwarzOperator


def resolve(*argv, command="compare"):
    args = build_parser().parse_args([command, *argv])
    return config_from_args(args, f"results/{command}")


def test_v2_is_the_default_and_the_papers_setting():
    default, v2 = resolve(), resolve("--preset", "v2")
    assert default == v2 == ExperimentConfig(save_prefix="results/compare")
    assert (v2.coarse_init, v2.local_init, v2.lr_scaling, v2.lr) == ("random", "random", "none",
                                                                      1e-3)
    assert (v2.init, v2.optimizer, v2.scheduler, v2.steps, v2.batch_size) == ("scaled", "adamw",
                                                                             True, 2000, 256)


@pytest.mark.parametrize("command", ["compare", "scaling", "sweep"])
def test_improved_preset_resolves_to_the_documented_settings(command):
    c = resolve("--preset", "improved", command=command)
    assert (c.coarse_init, c.local_init, c.lr_scaling) == ("galerkin", "problem", "problem")
    assert c.lr == 0.1
    # everything else is v2
    v2 = asdict(resolve(command=command))
    changed = {k for k, v in asdict(c).items() if v2[k] != v}
    assert changed == {"coarse_init", "local_init", "lr_scaling", "lr"}
    assert PRESETS["improved"] == dict(coarse_init="galerkin", local_init="problem",
                                       lr_scaling="problem", lr=0.1)


def test_individual_flags_and_overrides():
    c = resolve("--coarse-init", "galerkin")
    assert (c.coarse_init, c.local_init, c.lr_scaling, c.lr) == ("galerkin", "random", "none",
                                                                 1e-3)
    c = resolve("--local-init", "problem", "--lr-scaling", "problem")
    assert (c.coarse_init, c.local_init, c.lr_scaling) == ("random", "problem", "problem")
    c = resolve("--preset", "improved", "--lr", "0.3", "--coarse-init", "random")
    assert (c.coarse_init, c.local_init, c.lr_scaling, c.lr) == ("random", "problem", "problem",
                                                                 0.3)


@pytest.mark.parametrize("flag", ["--coarse-init", "--local-init", "--lr-scaling"])
def test_bad_switch_is_one_line(flag, capsys, tmp_path):
    rc = main(["compare", flag, "bogus", "--save-prefix", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and flag in err


def test_config_validation_names_the_switch():
    for field in ("coarse_init", "local_init", "lr_scaling"):
        with pytest.raises(ValueError, match=f"{field} must be one of"):
            ExperimentConfig(**{field: "bogus"}).validated()


def test_build_models_applies_the_switches():
    c = ExperimentConfig(n=128, subdomains=4, global_ranks=(5,), **PRESETS["improved"])
    prob = build_problem(c)
    models = build_models(c, prob.decomposition, prob.A)
    expected = problem_init(SchwarzOperator(prob.decomposition, seed=c.seed), prob.A)
    np.testing.assert_array_equal(models["schwarz"].theta, expected.theta)
    g = models["global_r5"]
    assert (g.local_init, g.coarse_init) == ("problem", "random")
    sigma = local_scales(g, prob.A)[0]
    assert np.sqrt(np.mean(g.theta**2)) == pytest.approx(sigma, rel=0.2)
    with pytest.raises(ValueError, match="A is required with coarse_init"):
        build_models(c, prob.decomposition)
    assert build_models(ExperimentConfig(n=128, subdomains=4), prob.decomposition)


def test_improved_compare_and_scaling_record_the_switches(tmp_path, capsys):
    prefix = str(tmp_path / "imp")
    assert main(["compare", "--preset", "improved", "--n", "64", "--subdomains", "4", "--steps",
                 "10", "--batch-size", "16", "--global-rank", "3", "--no-plots",
                 "--checkpoint-every", "5", "--save-prefix", prefix, "--no-progress"]) == 0
    payload = json.loads((tmp_path / "imp_metrics.json").read_text())
    config = payload["config"]
    assert (config["coarse_init"], config["local_init"], config["lr_scaling"],
            config["lr"]) == ("galerkin", "problem", "problem", 0.1)
    assert all(e["status"] == "finished" for e in payload["models"].values())
    with np.load(tmp_path / "imp_schwarz_checkpoint.npz") as z:
        meta = json.loads(str(z["meta"]))
        assert bool(z["opt_lr_scaled"])
    assert (meta["coarse_init"], meta["local_init"], meta["config"]["lr_scaling"]) == (
        "galerkin", "problem", "problem")
    # resuming the improved run with the paper's switches is refused
    rc = main(["compare", "--n", "64", "--subdomains", "4", "--steps", "10", "--batch-size",
               "16", "--global-rank", "3", "--no-plots", "--checkpoint-every", "5", "--lr", "0.1",
               "--save-prefix", prefix, "--no-progress", "--resume"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "--lr-scaling='problem'" in err and "--coarse-init='galerkin'" in err
    configs = scaling_configs(ExperimentConfig(**PRESETS["improved"]), (256, 512))
    assert all((k.coarse_init, k.lr_scaling, k.lr) == ("galerkin", "problem", 0.1)
               for k in configs)
