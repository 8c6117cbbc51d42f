"""The SPM HRF equals nilearn's, is integrated exactly per TR, and every unit gets its own HRF."""

import numpy as np
import pytest
from nilearn.glm.first_level import hemodynamic_models as hm
from scipy.integrate import quad

from prfmap.engine import Stimulus, predict
from prfmap.engine.hrf import convolution_matrices, hrf_kernels, spm_hrf


@pytest.mark.parametrize("tr", [0.8, 1.5, 2.0])
@pytest.mark.parametrize(
    ("basis", "reference"),
    [
        ("canonical", hm.spm_hrf),
        ("derivative", hm.spm_time_derivative),
        ("dispersion", hm.spm_dispersion_derivative),
    ],
)
def test_hrf_equals_nilearn(tr, basis, reference):
    oversampling = 50
    ref = reference(tr, oversampling=oversampling)
    # nilearn samples on linspace(0, 32, n) with its gamma densities shifted by one fine step
    n = len(ref)
    times = np.linspace(0, 32, n) - tr / oversampling
    mine = spm_hrf(times, basis)
    scale = np.abs(ref).max() / np.abs(mine).max()
    assert np.abs(ref - mine * scale).max() < 1e-3 * np.abs(ref).max()


@pytest.mark.parametrize("tr", [0.8, 2.0])
def test_kernels_integrate_the_hrf_exactly(tr):
    kernels = hrf_kernels(tr, n_basis=1, slice_time_ref=0.0)[0]
    for m in range(1, 12):
        integral, _ = quad(lambda t: float(spm_hrf(np.array(t))), (m - 1) * tr, m * tr)
        assert kernels[m] == pytest.approx(integral, abs=1e-9)
    assert kernels.sum() == pytest.approx(1.0, abs=1e-3)


def test_convolution_restarts_at_each_run():
    kernels = hrf_kernels(1.5)
    h = convolution_matrices(kernels, [10, 15])[0]
    assert np.all(h[10:, :10] == 0) and np.all(h[:10, 10:] == 0)
    np.testing.assert_allclose(h[10:, 10:], convolution_matrices(kernels, [15])[0])


def test_each_unit_is_convolved_with_its_own_hrf():
    tr = 1.5
    rng = np.random.default_rng(3)
    design = (rng.uniform(size=(60, 9, 9)) > 0.7).astype(np.float32)
    stim = Stimulus(design, 10.0)
    params = {
        "x": [0.0, 0.0],
        "y": [0.0, 0.0],
        "sigma": [50.0, 50.0],
        "amplitude": [1.0, 1.0],
        "baseline": [0.0, 0.0],
        "hrf_deriv": [0.0, 2.0],
        "hrf_disp": [0.0, -1.5],
    }
    pred = predict(params, stim, tr, "gauss", dtype="float64")

    # numpy reference: the neural drive of a huge Gaussian is the stimulated fraction of pixels,
    # convolved by direct summation with each unit's own HRF integrated over each TR
    xs = np.linspace(-5, 5, 9)
    xx, yy = np.meshgrid(xs, xs[::-1])
    g = np.exp(-(xx**2 + yy**2) / (2 * 50.0**2)) / (2 * np.pi * 50.0**2) * (xs[1] - xs[0]) ** 2
    drive = design.reshape(60, -1) @ g.ravel()
    k = hrf_kernels(tr, n_basis=3)
    for unit in range(2):
        kernel = k[0] + params["hrf_deriv"][unit] * k[1] + params["hrf_disp"][unit] * k[2]
        expected = np.convolve(drive, kernel)[:60]
        np.testing.assert_allclose(pred[unit], expected, rtol=1e-6, atol=1e-12)
    assert not np.allclose(pred[0], pred[1])
