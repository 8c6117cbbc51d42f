"""The identifiability oracle: what a stimulus lets any comparison of pRF models see."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from prfmap.cli.synth import main as synth
from prfmap.synth.config import PRF_MODELS, SynthConfig
from prfmap.synth.dataset import load_truth
from prfmap.synth.model import unit_kernels
from prfmap.synth.oracle import (
    ALPHA,
    _residual_maker,
    best_gaussian_misfit,
    dataset_config,
    identifiability,
    noise_free_responses,
    noise_of,
    oracle_power,
)
from prfmap.synth.response import stimulus_apertures

CSS, DOG = PRF_MODELS.index("css"), PRF_MODELS.index("dog")


@pytest.fixture(scope="module")
def designs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The same small participant (Gaussian, CSS and DoG units) under the bars and the multiwidth design."""
    root = tmp_path_factory.mktemp("oracle")
    out = {}
    for design in ("bars", "multiwidth"):
        out[design] = root / design
        argv = ["--small", "--space", "T1w", "--runs", "2", "--prf-models", "gauss", "css", "dog"]
        assert synth([str(out[design]), *argv, "--stimulus-design", design]) == 0
    return out


def test_the_dataset_config_is_the_one_written(designs: dict[str, Path]) -> None:
    config = dataset_config(designs["multiwidth"])
    assert config.stimulus_design == "multiwidth" and config.prf_models == ("gauss", "css", "dog")
    assert config.sweep_widths == SynthConfig(small=True, stimulus_design="multiwidth").sweep_widths


def test_a_gaussian_is_its_own_best_gaussian(designs: dict[str, Path]) -> None:
    root = designs["bars"]
    config, truth = dataset_config(root), load_truth(root)
    design = stimulus_apertures(config)
    nuisance = _residual_maker(design.shape[0], config.tr)
    gauss = np.flatnonzero(truth["mask"] & (truth["truemodel"] == 0))[:5]
    response = noise_free_responses(truth, config, design, gauss)
    kernels = unit_kernels(
        config.tr, truth["sampletime"][gauss], truth["hrfdelay"][gauss], truth["hrfdispersion"][gauss]
    )
    for i, unit in enumerate(gauss):
        start = (truth["x"][unit] + 0.4, truth["y"][unit] - 0.3, truth["sigma"][unit] * 1.5)
        total = np.sum((response[i] - nuisance @ (nuisance.T @ response[i])) ** 2)
        left = best_gaussian_misfit(response[i], design, config.fov_deg, kernels[i], start, nuisance)
        assert left @ left < 1e-5 * total, (left @ left, total)


def test_the_recomputed_response_is_the_data_minus_noise(designs: dict[str, Path]) -> None:
    """The noise the oracle measures is the generator's: the realistic noise's spread around 0.5 %."""
    result = identifiability(designs["bars"])
    prf = np.isfinite(result.noise_sd)
    assert 0.2 < np.median(result.noise_sd[prf]) < 1.0
    assert np.all(np.abs(result.noise_rho[prf]) < 0.9)


def test_two_bar_widths_make_compressive_prfs_distinguishable(designs: dict[str, Path]) -> None:
    """With one bar width a Gaussian imitates a CSS pRF; with two it cannot (Kay et al. 2013)."""
    one, two = identifiability(designs["bars"]), identifiability(designs["multiwidth"])
    css = one.model == CSS
    assert css.sum() >= 10
    assert np.median(two.misfit[css]) > 10 * np.median(one.misfit[css])
    assert two.distinguishable[css].mean() >= 0.8 > one.distinguishable[css].mean()
    for result in (one, two):
        assert not result.distinguishable[result.model == 0].any()
        assert np.all(result.energy[result.model == 0] == 0)


def test_noise_of_recovers_an_ar1_process() -> None:
    rng = np.random.default_rng(0)
    n_frames, rho, sd = 400, 0.4, 0.7
    shocks = rng.normal(0, sd * np.sqrt(1 - rho**2), (2, 300, n_frames))
    noise = np.zeros_like(shocks)
    noise[..., 0] = rng.normal(0, sd, (2, 300))
    for t in range(1, n_frames):
        noise[..., t] = rho * noise[..., t - 1] + shocks[..., t]
    got_sd, got_rho = noise_of(noise + 0.01 * np.arange(n_frames), _residual_maker(n_frames, 1.5))
    assert abs(np.median(got_sd) - sd) < 0.03 and abs(np.median(got_rho) - rho) < 0.05


def test_the_oracle_power_is_alpha_at_no_difference_and_grows_with_runs_and_falls_with_rho() -> None:
    sd, rho = np.array([1.0]), np.array([0.3])
    difference = np.sin(np.linspace(0, 12 * np.pi, 300))[None]
    assert oracle_power(0 * difference, sd, rho, 4)[0] == pytest.approx(ALPHA)
    powers = [oracle_power(0.15 * difference, sd, rho, runs)[0] for runs in (1, 2, 4, 8)]
    assert np.all(np.diff(powers) > 0) and powers[0] < 0.5 and powers[-1] > 0.9
    assert oracle_power(0.15 * difference, sd, np.array([0.6]), 4)[0] < powers[2]


def test_a_gaussian_only_participant_has_nothing_to_distinguish(tmp_path: Path) -> None:
    root = tmp_path / "gauss"
    argv = ["--small", "--space", "T1w", "--runs", "2", "--prf-models", "gauss", "--stimulus-design", "hcp"]
    assert synth([str(root), *argv]) == 0
    result = identifiability(root)
    assert not result.distinguishable.any()
    assert np.all(np.isnan(result.model) | (result.model == 0))
