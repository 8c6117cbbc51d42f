"""Backend selection: clear errors, only the selected backend imported, compile switch."""

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import backend_result, run_python
from prfmap.engine import backend_info
from prfmap.engine.backend import get_backend, select_backend
from prfmap.errors import ExitCode, UsageError

APP = str(Path(__file__).resolve().parents[3] / "app")
FRAMEWORKS = {"jax", "jaxlib", "torch", "tensorflow"}


def test_unknown_backend_is_a_usage_error():
    with pytest.raises(UsageError, match="unknown backend 'mxnet'") as err:
        select_backend("mxnet")
    assert err.value.exit_code == ExitCode.USAGE


def test_missing_backend_names_the_extra(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "torch" else real(n, *a))
    with pytest.raises(UsageError, match=r"pip install torch \(prfmap's \[torch\] extra\)") as err:
        select_backend("torch")
    assert "prfmap[torch]'" not in str(err.value)  # PyPI cannot serve prfmap yet


@pytest.mark.backend
def test_switching_backend_after_keras_import_is_refused(backend):
    other = "torch" if backend != "torch" else "jax"
    with pytest.raises(UsageError, match="already runs"):
        select_backend(other)


@pytest.mark.backend
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


@pytest.mark.backend
def test_compiled_and_eager_fits_agree(tmp_path, backend):
    """The backend's compiler (jax.jit / torch.compile / tf.function+XLA) gives the eager result."""
    code = (
        "import numpy as np\n"
        "from conftest import bar_design, random_params, FOV, TR\n"
        "from prfmap.engine import Stimulus, fit_prf, predict\n"
        "stim = Stimulus(bar_design(), FOV); p = random_params('gauss', 40, np.random.default_rng(5))\n"
        "res = fit_prf(predict(p, stim, TR), stim, TR, max_iter=8)\n"
        "result = {k: v.tolist() for k, v in res.params.items()} | {'compiled': res.settings.compiled}\n"
    )
    results = {flag: backend_result(backend, code, tmp_path, compiled=flag) for flag in (True, False)}
    assert results[True]["compiled"] is True and results[False]["compiled"] is False
    for key in ("x", "y", "sigma", "amplitude"):
        np.testing.assert_allclose(results[True][key], results[False][key], rtol=1e-3, atol=1e-3)


# Shapes on which TensorFlow 2.19–2.21's oneDNN BatchMatMulV2 crashes the process in eager mode.
BROADCAST_PRODUCTS = [
    ((4, 1, 256, 120), (1, 1, 120, 120)),
    ((4, 1, 256, 120), (120, 10)),
    ((3, 1, 8, 12), (1, 1, 12, 12)),
    ((4, 1, 256, 120), (1, 3, 120, 120)),
    ((2, 5, 7), (7, 3)),
    ((6, 4, 5), (6, 5, 2)),
]


@pytest.mark.backend
@pytest.mark.parametrize("compiled", [False, True], ids=["0", "1"])
def test_broadcast_matmul_runs_and_matches_numpy(tmp_path, backend, compiled):
    """backend.ops.matmul on broadcast shapes, in a subprocess so that a crash fails only this test."""
    code = (
        "import numpy as np\n"
        "from keras import ops; from prfmap.engine.backend.ops import matmul\n"
        "from prfmap.engine.backend import compile_enabled, get_backend\n"
        f"shapes = {BROADCAST_PRODUCTS!r}; rng = np.random.default_rng(0)\n"
        "fn = get_backend().compile_fun(matmul) if compile_enabled() else matmul\n"
        "for sa, sb in shapes:\n"
        "    a, b = rng.random(sa, dtype=np.float32), rng.random(sb, dtype=np.float32)\n"
        "    got = ops.convert_to_numpy(fn(ops.convert_to_tensor(a), ops.convert_to_tensor(b)))\n"
        "    np.testing.assert_allclose(got, np.matmul(a, b), rtol=1e-5, atol=1e-5)\n"
    )
    if backend == "torch" and compiled:
        pytest.skip("torch.compile of six shapes costs minutes of C++ builds on a CPU; eager covers torch")
    run_python(backend, code, compiled=compiled)


@pytest.mark.backend
def test_eager_lm_fit_survives_on_every_backend(tmp_path, backend):
    """The eager fit that crashed TensorFlow 2.21 (issue 9) exits 0 in a subprocess, for every model."""
    code = (
        "import numpy as np\n"
        "from conftest import bar_design, random_params, FOV, TR\n"
        "from prfmap.engine import Stimulus, fit_prf, predict\n"
        "stim = Stimulus(bar_design(), FOV)\n"
        "for model in ('gauss', 'css', 'dog', 'dn'):\n"
        "    p = random_params(model, 12, np.random.default_rng(5))\n"
        "    res = fit_prf(predict(p, stim, TR, model), stim, TR, model=model, max_iter=2)\n"
        "    assert np.isfinite(res.params['x']).all(), model\n"
    )
    run_python(backend, code)


def _framework_imports(path: Path) -> set[str]:
    """Frameworks a module imports: import statements and literal ``import_module``/``__import__`` calls."""
    text = path.read_text()
    names = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            names |= {alias.name.partition(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.partition(".")[0])
    names |= set(re.findall(r"(?:import_module|__import__)\(\s*[\"'](\w+)", text))
    return names & FRAMEWORKS


def test_no_module_outside_the_backend_folder_imports_a_framework():
    package = Path(APP) / "prfmap"
    backend_dir = package / "engine" / "backend"
    offenders = {
        str(p.relative_to(package)): sorted(_framework_imports(p))
        for p in package.rglob("*.py")
        if backend_dir not in p.parents and _framework_imports(p)
    }
    assert offenders == {}
    assert _framework_imports(backend_dir / "torch.py") == {"torch"}  # the grep sees what it looks for


@pytest.mark.backend
def test_select_backend_sets_threads_and_devices_before_import(backend, monkeypatch):
    for name in (
        "OMP_NUM_THREADS",
        "TF_NUM_INTRAOP_THREADS",
        "XLA_FLAGS",
        "CUDA_VISIBLE_DEVICES",
        "JAX_PLATFORMS",
    ):
        monkeypatch.delenv(name, raising=False)
    configured = []
    monkeypatch.setattr(get_backend(), "configure_threads", configured.append)  # keep the session's threads
    assert select_backend(backend, nprocs=3, device="cpu", omp_threads=2) == backend
    assert configured == [3]  # the framework is loaded in this session: its threads are set by a call
    assert os.environ["TF_NUM_INTRAOP_THREADS"] == "3" and os.environ["OMP_NUM_THREADS"] == "2"
    assert "intra_op_parallelism_threads=3" in os.environ["XLA_FLAGS"]
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "" and os.environ["JAX_PLATFORMS"] == "cpu"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    with pytest.raises(UsageError, match="only 2 GPU"):
        select_backend(backend, device="gpu:2")
    if "cpu" in backend_info()["device"]:
        with pytest.raises(UsageError, match="sees no GPU"):
            select_backend(backend, device="gpu")
