"""Solvers behind one protocol: named states through the loop on every backend, Adam as Keras does it."""

from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import keras
import numpy as np
import pytest
from keras import ops

from prfmap.engine import batching
from prfmap.engine.backend import get_backend
from prfmap.engine.backend.ops import tensor, to_numpy
from prfmap.engine.models import get_model
from prfmap.engine.solvers import Data, Solution, iterate
from prfmap.engine.solvers.adam import Adam


class HalvingState(NamedTuple):
    x: Any
    halvings: Any
    active: Any


@dataclass(frozen=True)
class Halving:
    """A solver of the contract that halves each unit's value until it is below ``tol``."""

    tol: float
    round_length: int | None = None
    copies: ClassVar[int] = 1

    def initial_carry(self, n):
        return ()

    def init(self, u, data):
        return HalvingState(u, ops.zeros_like(u), u > self.tol)

    def step(self, state, data):
        x = ops.where(state.active, state.x * 0.5, state.x)
        return HalvingState(x, state.halvings + ops.cast(state.active, x.dtype), x > self.tol)

    def terminate(self, state):
        return ~ops.any(state.active)

    def postprocess(self, state):
        return Solution(state.x, state.active, ())


@pytest.mark.backend
@pytest.mark.parametrize("compiled", ["0", "1"])
def test_iterate_carries_a_named_state_compiled_and_in_python(compiled, backend, monkeypatch):
    if backend == "torch" and compiled == "1":
        pytest.skip("torch.compile of the step costs minutes on a CPU; the eager loop covers torch")
    monkeypatch.setenv("PRFMAP_COMPILE", compiled)
    start = np.array([1.0, 8.0, 0.5, 100.0], dtype=np.float32)
    data = Data(tensor(np.zeros((4, 2)), "float32"), None, (), None, None, None, None, None)
    state, steps = iterate(Halving(1.0), tensor(start, "float32"), data, max_steps=50)
    assert isinstance(state, HalvingState)
    assert steps == 7  # 100 → 0.78 in seven halvings
    np.testing.assert_array_equal(to_numpy(state.halvings), [0, 3, 0, 7])
    state, steps = iterate(Halving(1.0), tensor(start, "float32"), data, max_steps=2)
    assert steps == 2 and to_numpy(state.active).tolist() == [False, True, False, True]


@pytest.mark.backend
def test_adam_update_is_keras_adam_step_by_step(backend):
    rng = np.random.default_rng(0)
    start = rng.normal(size=(6, 3)).astype(np.float32)
    grads = [rng.normal(size=(6, 3)).astype(np.float32) for _ in range(5)]
    variable = keras.Variable(start)
    optimizer = keras.optimizers.Adam(learning_rate=0.05)
    adam = Adam(get_model("gauss"), "float32", tol=1e-5, learning_rate=0.05)
    u, m, v = (tensor(a, "float32") for a in (start, np.zeros_like(start), np.zeros_like(start)))
    for k, g in enumerate(grads):
        optimizer.apply([tensor(g, "float32")], [variable])
        u, m, v = adam.update(u, m, v, tensor(np.float32(k), "float32"), tensor(g, "float32"))
        np.testing.assert_allclose(to_numpy(u), to_numpy(variable.value), rtol=1e-6, atol=1e-7)


def test_memory_budget_keeps_within_a_share_of_free_device_memory(monkeypatch):
    module = get_backend()
    monkeypatch.setattr(module, "free_memory", lambda: 2**30)
    assert batching.memory_budget(4.0) == pytest.approx(batching.GPU_SHARE)
    assert batching.memory_budget(0.1) == pytest.approx(0.1)
    monkeypatch.setattr(module, "free_memory", lambda: None)
    assert batching.memory_budget(None) == batching.DEFAULT_MEM_GB

    def broken():
        raise RuntimeError("no memory statistics on this device")

    monkeypatch.setattr(module, "free_memory", broken)
    assert batching.memory_budget(4.0) == 4.0
