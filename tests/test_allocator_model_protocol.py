"""``auto``'s replay drives whatever model the backend declares, through the protocol only."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

import memacct
from memacct.errors import BackendError
from memacct.sim import SimDevice
from memacct.sim.allocator import PresetModel
from memacct.units import MiB


class SmallSteps:
    """A serving trace of steps that each allocate and free one tensor of a MiB per token."""

    max_num_batched_tokens = 8
    max_num_seqs = 2

    def weight_tensors(self) -> list[int]:
        return [64 * MiB]

    def step_trace(self, num_tokens: int, num_seqs: int) -> list[int]:
        return [num_tokens * MiB // 2, num_seqs * MiB, ~0, ~1]

    def kv_cache_tensors(self, num_blocks: int) -> list[int]:
        return [num_blocks * MiB]


class CountingModel:
    """An allocator model of the backend's own: counts the instances the replay asks for."""

    def __init__(self) -> None:
        self.name = "counting"
        self.capacities: list[int] = []
        self._inner = PresetModel("torch-cuda")

    def instance(self, capacity: int) -> memacct.backend.ModelAllocator:
        self.capacities.append(capacity)
        return self._inner.instance(capacity)


class DeclaringBackend(memacct.TorchLikeBackend):
    name = "declaring"

    def __init__(self, dev: SimDevice, model: object) -> None:
        super().__init__(dev.api)
        self._model = model

    @property
    def allocator_model(self) -> memacct.AllocatorModel | None:
        return self._model  # type: ignore[return-value]


def _profile(backend: DeclaringBackend, dev: SimDevice) -> memacct.ProfileResult:
    work = SmallSteps()
    baseline = memacct.snapshot(backend)
    dev.malloc(64 * MiB, persistent=True)
    with memacct.memory_profiling(
        backend, baseline, truth_source="auto", serving_trace=work
    ) as session:
        ptrs: list[int] = []
        for op in work.step_trace(8, 2):
            if op >= 0:
                ptrs.append(dev.malloc(op))
            else:
                dev.free(ptrs[~op])
    return session.result


def test_the_replay_runs_through_the_declared_model() -> None:
    dev = SimDevice("h100-80gb")
    model = CountingModel()
    assert isinstance(model, memacct.AllocatorModel)
    result = _profile(DeclaringBackend(dev, model), dev)
    assert model.capacities, "the replay never asked the declared model for an instance"
    assert "replaying the profile" in result.truth_source_reason


def test_a_backend_without_a_model_gets_the_bound_on_its_readings() -> None:
    dev = SimDevice("h100-80gb")
    result = _profile(DeclaringBackend(dev, None), dev)
    assert "no replay" in result.truth_source_reason


def test_a_model_that_is_not_an_allocator_model_is_the_plugins_error() -> None:
    dev = SimDevice("h100-80gb")
    with pytest.raises(BackendError, match=r"allocator_model is 'torch-cuda': it must be None or"):
        _profile(DeclaringBackend(dev, "torch-cuda"), dev)


def test_a_preset_model_instance_replays_traces_and_says_when_it_ran_out() -> None:
    alloc = PresetModel("torch-cuda").instance(64 * MiB)
    steps: Sequence[int] = [40 * MiB, ~0]
    assert alloc.run(steps) and alloc.reserved == 40 * MiB
    alloc.empty_cache()
    assert alloc.reserved == 0
    assert not alloc.run([40 * MiB, 40 * MiB])
    with pytest.raises(memacct.InvalidInputError, match="unknown allocator preset 'cuda'"):
        PresetModel("cuda")
