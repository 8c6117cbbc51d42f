"""The participant report's uncertainty: the centre's standard-error map, the uncertain share, methods."""

from __future__ import annotations

import dataclasses
import html
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from helpers import fit_settings
from page_checks import check_page
from prfmap.engine import catalog
from prfmap.report.context import ReportContext
from prfmap.report.legends import centre_se_style
from prfmap.report.methods import methods_text
from prfmap.report.participant import NOT_DRAWN, write_participant_report
from prfmap.report.uncertainty import centre_standard_error, noise_model_text, uncertainty_methods

AR1 = {
    "option": "ar1",
    "description": (
        "AR(1) noise pooled over 812 units, estimated from grid-fit residuals (corrected for the nuisance "
        "projection); data and predictions prewhitened run by run (generalised least squares) in the "
        "refinement and the standard errors"
    ),
    "coefficients": [0.3125],
    "units": 812,
}
UNCERTAIN = catalog.STATUS_BITS["uncertain"]


def stat_maps(context: ReportContext, rng: np.random.Generator) -> dict[tuple[str, str], np.ndarray]:
    """Standard errors as ``FitResult.stat_maps()`` gives them: growing with eccentricity, NaN where
    not fitted, some infinite (a singular information matrix)."""
    ecc = context.maps["eccentricity"]
    fitted = np.isfinite(context.maps["r2"])
    se_x = np.where(fitted, 0.05 + 0.03 * ecc + rng.uniform(0, 0.05, ecc.size), np.nan)
    se_y = np.where(fitted, 0.05 + 0.02 * ecc + rng.uniform(0, 0.05, ecc.size), np.nan)
    se_x[np.flatnonzero(fitted)[:30]] = np.inf
    grid_only = fitted & (context.maps["r2"] < np.nanpercentile(context.maps["r2"], 25))
    se_x[grid_only], se_y[grid_only] = np.nan, np.nan  # not refined: no standard error
    sigma = context.maps["sigma"]
    return {
        ("se", "x"): se_x,
        ("se", "y"): se_y,
        ("se", "sigma"): np.where(fitted, 0.1 * sigma, np.nan),
        ("ci95lower", "sigma"): np.where(fitted, 0.8 * sigma, np.nan),
        ("ci95upper", "sigma"): np.where(fitted, 1.25 * sigma, np.nan),
    }


@pytest.fixture(scope="module")
def uncertain_context(context: ReportContext) -> ReportContext:
    """The session's context with standard errors, a status map with some uncertain units and AR(1) noise."""
    rng = np.random.default_rng(7)
    stats = stat_maps(context, rng)
    fitted = np.isfinite(context.maps["r2"])
    status = np.where(fitted, 0.0, 1.0)
    loose = np.fmax(stats[("se", "x")], stats[("se", "y")]) > 0.3
    status[fitted & loose] += UNCERTAIN
    return dataclasses.replace(
        context,
        maps={**context.maps, "status": status},
        stat_maps=stats,
        settings=fit_settings(noise_model=AR1),
        data=None,
    )


@pytest.fixture(scope="module")
def uncertain_report(uncertain_context: ReportContext, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_participant_report(tmp_path_factory.mktemp("uncertain"), "01", uncertain_context)


def figures(page: Path) -> dict[str, tuple[str, str]]:
    """Figure kind (``flat-centrese``) → (src, alt)."""
    found = re.findall(r'<img src="([^"]+)" alt="([^"]*)"', page.read_text())
    return {Path(src).stem.rsplit("_", 1)[-1]: (src, html.unescape(alt)) for src, alt in found}


def test_centre_standard_error_map_is_drawn_with_stat_maps(uncertain_report: Path) -> None:
    check_page(uncertain_report)
    shown = figures(uncertain_report)
    assert {"flat-centrese", "views-centrese"} <= set(shown)
    kinds = list(shown)
    assert kinds.index("flat-centrese") > kinds.index("flat-r2")  # after the retinotopic maps
    src, alt = shown["flat-centrese"]
    assert alt.startswith("standard error of the pRF centre on the flattened occipital cortex")
    assert "(deg) from 0 to" in alt and "doubtful estimates included" in alt
    assert "(deg)" in Image.open(uncertain_report.parent / src).text["Title"]
    text = html.unescape(uncertain_report.read_text())
    assert "The larger of the standard errors of x and y" in text
    assert "compares with a fifth of the stimulated radius" in text  # issue 35: it said a tenth
    assert catalog.share_of(catalog.CENTRE_SE_LIMIT) == "a fifth of "  # the limit the engine applies
    assert NOT_DRAWN not in text


def test_the_standard_error_scale_is_set_by_the_units_not_flagged_doubtful() -> None:
    """Issue 35: a median error of 0.24° drawn on a 0-10° scale (set by the flagged units' errors) was
    all black; then, on 0-2° (the flag's limit, set by the doubtful units' 95th percentile of 16°), still
    nearly black on the demo (median 0.20°). The settled units set it, at most the flag's limit."""
    rng = np.random.default_rng(3)
    settled = rng.gamma(2.0, 0.12, 680)  # the demo's: median 0.18°, 95th percentile 0.35°
    style = centre_se_style(settled, 20.0)
    assert style.vmax < 1.0 and np.median(settled) / style.vmax > 0.3
    assert "95th percentile of the units not flagged doubtful" in style.scale_note
    loose = centre_se_style(np.concatenate([rng.uniform(1, 30, 200), [np.inf] * 5]), 20.0)
    assert loose.vmax == pytest.approx(2.0)  # never past the flag's limit
    assert "a fifth of the stimulated radius (2°)" in loose.scale_note


def test_uncertain_share_is_in_the_summary(uncertain_report: Path, uncertain_context: ReportContext) -> None:
    """Issue 35: the share is over the units that have standard errors (the refined ones), not over
    grid-only units that never get one."""
    status = uncertain_context.maps["status"]
    stats = uncertain_context.stat_maps
    with_se = np.isfinite(uncertain_context.maps["r2"]) & ~np.isnan(
        np.fmax(stats[("se", "x")], stats[("se", "y")])
    )
    assert 0 < with_se.sum() < np.isfinite(uncertain_context.maps["r2"]).sum()
    flagged = int(np.sum(with_se & ((status.astype(int) & UNCERTAIN) != 0)))
    assert 0 < flagged < with_se.sum()
    share = 100 * flagged / with_se.sum()
    text = html.unescape(uncertain_report.read_text())
    lead = re.search(r'<p class="lead">(.*?)</p>', text, re.S).group(1)
    assert (
        f"{flagged} ({share:.1f} %) of the units with standard errors (those refined) flagged uncertain "
        "(status bit 512)"
    ) in lead
    row = f"<th>Units flagged uncertain (bit 512)</th><td>{flagged} of {int(with_se.sum())}"
    assert f"{row} with standard errors" in text


def test_methods_say_how_uncertainty_was_computed(uncertain_report: Path) -> None:
    text = html.unescape(uncertain_report.read_text())
    methods = re.search(r'<p class="methods">(.*?)</p>', text, re.S).group(1)
    for expected in (
        "Standard errors are Laplace (Gauss–Newton) approximations at each unit's final estimate",
        "the linear weights included",
        "prewhitened residual",
        "RSS over frames minus nuisance regressors minus fitted parameters",
        "delta method",
        "sigma's 95 % interval from the interval of log sigma",
        "Noise model: AR(1) noise pooled over 812 units",
        "(coefficients 0.312)",
        "flagged uncertain (status bit 512) when the data do not pin the estimate down",
    ):
        assert expected in methods, expected
    assert "sandwich" not in methods  # the default, --covariance laplace


def test_methods_state_the_sigma_prior_when_one_was_used() -> None:
    record = {
        "option": "eccentricity",
        "log_sigma_intercept": -0.9123,
        "log_sigma_slope_per_deg": 0.1411,
        "log_sigma_spread": 0.2234,
        "units": 187,
    }
    text = uncertainty_methods(SimpleNamespace(noise_model={"option": "ols"}, sigma_prior=record))
    assert "posterior mode under an empirical-Bayes prior on log sigma given eccentricity" in text
    assert "N(-0.912 + 0.141 × eccentricity, 0.223²)" in text and "187 refined units" in text
    assert "posterior mode" not in uncertainty_methods(SimpleNamespace(noise_model={"option": "ols"}))


def test_methods_state_the_delay_prior_when_one_was_used() -> None:
    sigma = {
        "option": "eccentricity",
        "log_sigma_intercept": -0.9,
        "log_sigma_slope_per_deg": 0.14,
        "log_sigma_spread": 0.22,
        "units": 187,
    }
    delay = {
        "option": "spread",
        "delay_sd_s": 0.5123,
        "offsets_s": [0.0, -0.666, 0.666],
        "units_per_offset": [90, 50, 47],
        "residual_delay_sd_s": 0.3012,
    }
    settings = SimpleNamespace(noise_model={"option": "ols"}, sigma_prior=sigma, delay_prior=delay)
    text = uncertainty_methods(settings)
    assert "delay moved by +0.00, -0.67, +0.67 s (prior N(0, 0.51 s²)" in text
    assert "units per delay 90, 50, 47" in text and "remaining spread (0.30 s)" in text
    without = uncertainty_methods(SimpleNamespace(noise_model={"option": "ols"}, sigma_prior=sigma))
    assert "delay" not in without


def test_methods_name_the_sandwich_term_when_it_was_used() -> None:
    settings = SimpleNamespace(noise_model={"option": "ols"}, covariance="sandwich")
    text = uncertainty_methods(settings)
    assert "minus fitted parameters) plus the sandwich (Huber–White) term" in text
    assert "Newey–West, Bartlett weights within each run" in text
    assert "(--covariance sandwich)" in text


def test_without_stat_maps_the_report_is_as_before(context: ReportContext, report: Path) -> None:
    shown = figures(report)
    assert not any("centrese" in kind for kind in shown)
    text = html.unescape(report.read_text())
    assert "flagged uncertain" not in text and "Laplace" not in text and "Noise model" not in text
    # a status map alone (an older fit's) says nothing of uncertainty either
    methods, _ = methods_text(
        model="gauss",
        settings=fit_settings(),
        backend={},
        preprocessing={},
        dummy_scans=0,
        tr=1.5,
        fov_deg=20.0,
        maps=["r2"],
    )
    assert "Laplace" not in methods and "Noise model" not in methods


def test_methods_name_the_noise_model() -> None:
    common = dict(backend={}, preprocessing={}, dummy_scans=0, tr=1.5, fov_deg=20.0, maps=["r2"])
    text, _ = methods_text(model="gauss", settings=fit_settings(noise_model=AR1), uncertainty=True, **common)
    assert "Noise model: AR(1) noise pooled over 812 units" in text
    text, _ = methods_text(
        model="gauss", settings=fit_settings(noise_model={"option": "ols"}), uncertainty=True, **common
    )
    assert "Noise model: ordinary least squares (no prewhitening)." in text
    text, _ = methods_text(model="gauss", settings=fit_settings(noise_model=AR1), **common)
    assert "Noise model: AR(1)" in text and "Laplace" not in text  # prewhitened fit, no standard errors
    assert noise_model_text(None) == ""


def test_centre_standard_error_is_the_larger_of_x_and_y() -> None:
    se = centre_standard_error(
        {("se", "x"): np.array([0.1, 0.5, np.nan, np.inf]), ("se", "y"): np.array([0.2, 0.3, np.nan, 1.0])}
    )
    np.testing.assert_array_equal(se, [0.2, 0.5, np.nan, np.inf])
    assert centre_standard_error({("se", "sigma"): np.ones(3)}) is None
    assert centre_standard_error({}) is None


def test_volume_report_draws_the_centre_standard_error_as_slices(
    uncertain_context: ReportContext, tmp_path: Path
) -> None:
    n = uncertain_context.maps["r2"].size
    mask = np.zeros((64, 40, 16), bool)
    mask.reshape(-1)[:n] = True
    grid = SimpleNamespace(mask=mask, affine=np.diag([2.0, 2.0, 2.0, 1.0]))
    ctx = dataclasses.replace(uncertain_context, space="T1w", surface=None, volume=grid)
    page = write_participant_report(tmp_path, "01", ctx)
    assert "slices-centrese" in figures(page)
    check_page(page)


def test_stat_maps_of_another_size_are_warned(uncertain_context: ReportContext, tmp_path: Path) -> None:
    short = {k: v[:100] for k, v in uncertain_context.stat_maps.items()}
    ctx = dataclasses.replace(uncertain_context, stat_maps=short, surface=None, volume=None)
    text = write_participant_report(tmp_path, "01", ctx).read_text()
    assert f"{NOT_DRAWN} the centre&#39;s standard error: its maps have 100 units" in text


@pytest.mark.parametrize("kind", ["gifti", "volume"])
def test_reports_only_reads_the_stat_se_maps_back(
    uncertain_context: ReportContext, tmp_path: Path, kind: str
) -> None:
    """``--reports-only`` rebuilds the context from disk: the stat maps too, and never as estimates."""
    import nibabel as nib

    from prfmap.derivatives import OutputKey, write_map_files
    from prfmap.io.geometry import GiftiGeometry, VolumeGeometry
    from prfmap.report.rebuild import participant_contexts

    ctx = uncertain_context
    n = ctx.maps["r2"].size
    if kind == "gifti":
        key = OutputKey("01", None, "bar", "fsaverage5", None, None, "gauss")
        geometry = GiftiGeometry(hemis={"L": n // 2, "R": n // 2})
    else:
        key = OutputKey("01", None, "bar", "T1w", None, None, "gauss")
        mask = np.zeros((64, 40, 16), bool)
        mask.reshape(-1)[:n] = True
        geometry = VolumeGeometry(mask=mask, affine=np.eye(4), header=nib.Nifti1Header())
    func = key.func_dir(tmp_path / "out")
    maps = {k: np.asarray(v, np.float32) for k, v in ctx.maps.items()}
    provenance = {"RepetitionTime": 1.5, "Runs": ["sub-01_task-bar_run-1"]}
    by_stat: dict[str, dict[str, np.ndarray]] = {}
    for (stat, label), values in ctx.stat_maps.items():
        by_stat.setdefault(stat, {})[label] = np.asarray(values, np.float32)
    write_map_files(func, key, geometry, maps, ctx.settings, provenance, statistics=by_stat)
    (tmp_path / "bids").mkdir()
    (rebuilt,) = participant_contexts(
        tmp_path / "out", "01", bids_dir=tmp_path / "bids", derivatives={}, r2_threshold=0.1
    )
    assert set(rebuilt.stat_maps) == set(ctx.stat_maps)
    keep = np.isfinite(ctx.maps["r2"]) if kind == "volume" else slice(None)  # volumes: voxels with r²
    for stat_label, values in ctx.stat_maps.items():
        np.testing.assert_allclose(rebuilt.stat_maps[stat_label], values.astype(np.float32)[keep], rtol=1e-6)
    for label in ("x", "y", "sigma"):  # the estimates are the estimates, not their standard errors
        np.testing.assert_allclose(rebuilt.maps[label], maps[label][keep], rtol=1e-6)
    assert rebuilt.settings is not None and dict(rebuilt.settings.noise_model) == AR1
    assert any("_stat-se_desc-x_" in p for p in rebuilt.outputs)
    page = write_participant_report(tmp_path / "out", "01", [rebuilt])
    text = html.unescape(page.read_text())
    assert "Noise model: AR(1) noise pooled over 812 units" in text and "flagged uncertain" in text
