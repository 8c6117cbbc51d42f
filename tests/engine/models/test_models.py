"""Predictions match a numpy reference on every backend and across backends; gradients flow."""

import warnings

import numpy as np
import pytest

from conftest import FOV, TR, bar_design, random_params
from helpers import backend_result
from prfmap.engine import Stimulus, catalog, predict
from prfmap.engine.backend import get_backend
from prfmap.engine.hrf import hrf_kernels
from prfmap.engine.models import get_model

MODEL_NAMES = list(catalog.MODELS)


def reference_prediction(model: str, p: dict, stim: Stimulus) -> np.ndarray:
    """Independent float64 numpy implementation of the four models (one unit at a time)."""
    xs, ys = stim.coordinates
    area = stim.pixel_size**2
    design = stim.design.reshape(stim.n_frames, -1).astype(np.float64)
    kernel = hrf_kernels(TR)[0]
    out = []
    for i in range(len(p["x"])):

        def summed(sigma, i=i):
            g = np.exp(-((xs - p["x"][i]) ** 2 + (ys - p["y"][i]) ** 2) / (2 * sigma**2))
            return design @ (g.ravel() * area / (2 * np.pi * sigma**2))

        s = summed(p["sigma"][i])
        a = p["amplitude"][i]
        if model == "gauss":
            neural = a * s
        elif model == "css":
            neural = a * s ** p["n"][i]
        elif model == "dog":
            neural = a * s - p["amplitude_surround"][i] * summed(p["sigma_surround"][i])
        else:
            b, c, d = p["baseline_activation"][i], p["amplitude_norm"][i], p["baseline_norm"][i]
            neural = (a * s + b) / (c * summed(p["sigma_norm"][i]) + d) - b / d
        out.append(np.convolve(neural, kernel)[: stim.n_frames] + p["baseline"][i])
    return np.array(out)


@pytest.mark.backend
@pytest.mark.parametrize("model", MODEL_NAMES)
def test_predictions_match_numpy_reference(model, stim):
    p = random_params(model, 12, np.random.default_rng(1))
    got = predict(p, stim, TR, model)
    ref = reference_prediction(model, p, stim)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


@pytest.mark.parametrize(("model", "extra"), [("dog", "amplitude_surround"), ("dn", "baseline_activation")])
def test_zero_amplitudes_predict_quietly(model, extra, stim):
    """Issue 24, case 17: ``extra / amplitude`` printed ``RuntimeWarning: invalid value encountered in
    divide`` on stderr (cross-validation predicts every unit, units of zero amplitude included)."""
    p = random_params(model, 4, np.random.default_rng(2))
    p["amplitude"][:3] = 0.0
    p[extra][:2] = 0.0
    p["amplitude"][3] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        got = predict(p, stim, TR, model)
    flat = np.broadcast_to(p["baseline"][:2, None], got[:2].shape)
    np.testing.assert_allclose(got[:2], flat, atol=1e-6)  # nothing but the baseline
    assert np.isnan(got[2:]).all()  # a surround (or baseline) without a centre: no ratio describes it


PREDICTIONS = (
    "import numpy as np\n"
    "from conftest import bar_design, random_params, FOV, TR\n"
    "from prfmap.engine import Stimulus, predict\n"
    "stim = Stimulus(bar_design(), FOV)\n"
    "result = {m: predict(random_params(m, 16, np.random.default_rng(7)), stim, TR, m).tolist()"
    " for m in ('gauss', 'css', 'dog', 'dn')}\n"
)


def test_predictions_agree_across_backends(tmp_path, backend):
    if backend != "jax":
        pytest.skip("the cross-backend comparison runs once, in the jax session")
    results = {b: backend_result(b, PREDICTIONS, tmp_path) for b in ("jax", "torch", "tensorflow")}
    for model in MODEL_NAMES:
        ref = np.array(results["jax"][model])
        for other in ("torch", "tensorflow"):
            np.testing.assert_allclose(
                np.array(results[other][model]),
                ref,
                rtol=1e-4,
                atol=1e-4 * np.abs(ref).max(),
                err_msg=f"{model} {other}",
            )


@pytest.mark.backend
@pytest.mark.parametrize("model", MODEL_NAMES)
def test_autodiff_gradients_of_every_parameter_are_finite_and_nonzero(model, stim):
    from keras import ops

    from prfmap.engine import kernels
    from prfmap.engine.problem import make_problem

    m = get_model(model)
    rng = np.random.default_rng(2)
    p = random_params(model, 6, rng, max_ecc=5.0)
    truth = predict(p, stim, TR, model, dtype="float64")
    data = truth + 0.1 * rng.standard_normal(truth.shape)
    start = {k: v * 1.1 + 0.05 for k, v in p.items()}
    u = m.internal(m.from_report(start))
    prob = make_problem(m, stim, TR, 1, None, "float64", 0.5)
    y = data - data.mean(axis=1, keepdims=True)

    def loss(u, y):
        return ops.sum(kernels.vp_cost(m, u, y, prob.stim, prob.hrf_t, prob.q))

    value, grad = get_backend().value_and_grad(loss)(
        ops.convert_to_tensor(u, dtype="float64"), ops.convert_to_tensor(y, dtype="float64")
    )
    grad = np.asarray(ops.convert_to_numpy(grad))
    assert np.isfinite(float(ops.convert_to_numpy(value)))
    assert np.all(np.isfinite(grad))
    assert np.all(np.abs(grad) > 0), f"zero gradient for {np.array(m.names)[np.any(grad == 0, 0)]}"


def test_stimulus_rejects_bad_designs():
    with pytest.raises(ValueError, match="within"):
        Stimulus(np.full((4, 5, 5), 2.0), FOV)
    with pytest.raises(ValueError, match="frames"):
        Stimulus(np.zeros((5, 5)), FOV)
    with pytest.raises(ValueError, match="run_lengths"):
        Stimulus(bar_design(8, 9), FOV, (3, 3))
