"""Backend selection: clear errors, only the selected backend imported, compile switch."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from prfmap.engine import backend_info
from prfmap.engine.backend import select_backend
from prfmap.errors import ExitCode, UsageError

APP = str(Path(__file__).resolve().parents[2] / "app")


def test_unknown_backend_is_a_usage_error():
    with pytest.raises(UsageError, match="unknown backend 'mxnet'") as err:
        select_backend("mxnet")
    assert err.value.exit_code == ExitCode.USAGE


def test_missing_backend_names_the_extra(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "torch" else real(n, *a))
    with pytest.raises(UsageError, match=r"pip install 'prfmap\[torch\]'"):
        select_backend("torch")


def test_switching_backend_after_keras_import_is_refused(backend):
    other = "torch" if backend != "torch" else "jax"
    with pytest.raises(UsageError, match="already runs"):
        select_backend(other)


def test_backend_info_names_backend_and_device(backend):
    info = backend_info()
    assert info["backend"] == backend
    assert info["device"] and info["version"] and info["keras"].startswith("3.")


@pytest.mark.parametrize("name", ["jax", "torch", "tensorflow"])
def test_engine_imports_no_other_backend(name):
    others = {"jax", "torch", "tensorflow"} - {name}
    code = (
        f"import sys; sys.path.insert(0, {APP!r});"
        f"from prfmap.engine import select_backend; select_backend({name!r});"
        "import prfmap.engine.fit, prfmap.engine.backend as b; b.get_backend();"
        "print(' '.join(m for m in ('tensorflow', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # Keras itself imports jax opportunistically when it is installed; torch and TF never leak.
    assert set(out.stdout.split()) & (others - {"jax"}) == set()


def test_compiled_and_eager_fits_agree(tmp_path, backend):
    """The backend's compiler (jax.jit / torch.compile / tf.function+XLA) gives the eager result."""
    code = (
        "import sys, json, numpy as np; sys.path[:0] = [sys.argv[1], sys.argv[2]];"
        "from conftest import bar_design, random_params, FOV, TR;"
        "from prfmap.engine import Stimulus, fit_prf, predict;"
        "stim = Stimulus(bar_design(), FOV); p = random_params('gauss', 40, np.random.default_rng(5));"
        "res = fit_prf(predict(p, stim, TR), stim, TR, max_iter=8);"
        "json.dump({k: v.tolist() for k, v in res.params.items()} | {'compiled': res.settings['compiled']},"
        " open(sys.argv[3], 'w'))"
    )
    here = Path(__file__).resolve().parent
    results = {}
    for flag in ("1", "0"):
        out = tmp_path / f"{flag}.json"
        env = {**os.environ, "KERAS_BACKEND": backend, "PRFMAP_COMPILE": flag}
        subprocess.run([sys.executable, "-c", code, str(here), APP, str(out)], check=True, env=env,
                       capture_output=True)
        results[flag] = json.loads(out.read_text())
    assert results["1"]["compiled"] is True and results["0"]["compiled"] is False
    for key in ("x", "y", "sigma", "amplitude"):
        np.testing.assert_allclose(results["1"][key], results["0"][key], rtol=1e-3, atol=1e-3)
