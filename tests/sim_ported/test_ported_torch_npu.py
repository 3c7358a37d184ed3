"""torch_npu's own caching-allocator expectations, ported to the simulated device.

From Ascend/pytorch ``test/npu/test_npu.py`` (``TestNPU``; read at commit 885b19a8):
``_test_memory_stats_generator`` with ``_check_memory_stat_consistency`` after every
step (``test_memory_stats``), ``test_memory_allocation`` and ``test_out_of_memory``,
with their numbers. ``torch.npu.FloatTensor(*size)`` is a float32 allocation; the
snapshot the consistency check reads is the simulator's segment list. Deviations are
listed in docs/simulator.md ("Ported expectations").
"""

from __future__ import annotations

import collections
import random
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from memacct.sim import SimDevice, SimOutOfMemory

sys.path.insert(0, str(Path(__file__).parent))
from _torchlike import Tensor, empty


def check_memory_stat_consistency(dev: SimDevice) -> None:
    """TestNPU._check_memory_stat_consistency over the simulator's snapshot."""
    expected: dict[str, int] = collections.defaultdict(int)
    for pool, _addr, total_size, blocks in dev.allocator._segments():
        pool_str = pool
        expected["segment.all.current"] += 1
        expected["segment." + pool_str + ".current"] += 1
        allocated = sum(size for _, size, state in blocks if state == "in_use")
        expected["allocated_bytes.all.current"] += allocated
        expected["allocated_bytes." + pool_str + ".current"] += allocated
        expected["reserved_bytes.all.current"] += total_size
        expected["reserved_bytes." + pool_str + ".current"] += total_size
        expected["active_bytes.all.current"] += allocated
        expected["active_bytes." + pool_str + ".current"] += allocated
        is_split = len(blocks) > 1
        for _, size, state in blocks:
            if state == "in_use":
                expected["allocation.all.current"] += 1
                expected["allocation." + pool_str + ".current"] += 1
                expected["active.all.current"] += 1
                expected["active." + pool_str + ".current"] += 1
            if state == "free" and is_split:
                expected["inactive_split.all.current"] += 1
                expected["inactive_split." + pool_str + ".current"] += 1
                expected["inactive_split_bytes.all.current"] += size
                expected["inactive_split_bytes." + pool_str + ".current"] += size
    stats = dev.memory_stats()
    for k, v in expected.items():
        assert v == stats[k], k


def memory_stats_generator(dev: SimDevice, n: int = 35) -> Iterator[bool | None]:
    """TestNPU._test_memory_stats_generator, step for step."""
    api = dev.api
    m0 = api.memory_allocated()
    last_m = [api.memory_allocated()]
    max_m = [api.max_memory_allocated()]
    last_r = [api.memory_reserved()]
    max_r = [api.max_memory_reserved()]

    def alloc(*size: int) -> Tensor:
        return empty(dev, *size)

    def assert_change(comp: int = 1, empty_cache: bool = False, reset_peak: bool = False) -> None:
        new_m = api.memory_allocated()
        new_max_m = api.max_memory_allocated()
        if comp > 0:
            assert new_m > last_m[0]
        elif comp < 0:
            assert new_m < last_m[0]
        else:
            assert new_m == last_m[0]
        assert new_m <= new_max_m
        assert new_max_m >= max_m[0]
        last_m[0] = new_m
        max_m[0] = new_max_m
        new_r = api.memory_reserved()
        new_max_r = api.max_memory_reserved()
        assert new_r <= new_max_r
        assert new_max_r >= max_r[0]
        last_r[0] = new_r
        max_r[0] = new_max_r
        if empty_cache:
            api.empty_cache()
            new_r = api.memory_reserved()
            new_max_r = api.max_memory_reserved()
            assert new_r <= last_r[0]
            assert new_r <= new_max_r
            assert new_max_r == max_r[0]
            last_r[0] = new_r
        if reset_peak:
            api.reset_peak_memory_stats()
            assert api.memory_allocated() == last_m[0]
            assert api.max_memory_allocated() == last_m[0]
            max_m[0] = last_m[0]
            assert api.memory_reserved() == last_r[0]
            assert api.max_memory_reserved() == last_r[0]
            max_r[0] = last_r[0]

    assert_change(0)
    assert_change(0, reset_peak=True)
    assert_change(0, empty_cache=True)
    assert_change(0, reset_peak=True)
    assert_change(0)
    yield None

    tensors1 = [alloc(1), alloc(10, 20), alloc(200, 300, 2000)]
    m1 = api.memory_allocated()
    assert_change(1)
    yield None

    tensors2: list[Tensor] = []
    for i in range(1, int(n / 2) + 1):
        tensors2.append(alloc(i, i * 4))  # small ones
        assert_change(1)
        yield None
    for i in range(5, int(n / 2) + 5):
        tensors2.append(alloc(i, i * 7, i * 9, i * 11))  # large ones
        assert_change(1, reset_peak=(i % 2 == 0))
        yield None
    tensors2.append(alloc(0, 0, 0))
    assert_change(0)
    yield None

    order = list(range(len(tensors2)))
    random.Random(0).shuffle(order)  # torch.randperm
    permute = []
    for i in order:
        permute.append(tensors2[i])
        assert_change(0)
        yield None
    tensors2 = permute
    assert_change(0)
    yield None
    assert_change(0, reset_peak=True)
    yield None

    for i in range(int(n / 2)):
        x = tensors2[i].numel()
        tensors2[i].delete()
        del tensors2[i]
        assert_change(-x)
        yield None

    for i in range(2, int(2 * n / 3) + 2):
        tensors2.append(alloc(i, i * 3, i * 8))
        assert_change(1)
        yield None

    for t in tensors2:
        t.delete()
    assert_change(-1, reset_peak=True)
    assert_change(0)
    assert api.memory_allocated() == m1
    yield True

    for t in tensors1:
        t.delete()
    assert_change(-1, reset_peak=True)
    assert api.memory_allocated() == m0
    assert_change(0, empty_cache=True)
    assert_change(0, reset_peak=True)


@pytest.mark.parametrize("preset", ["npu", "torch-cuda"])
def test_memory_stats(preset: str) -> None:
    """test_npu.py::TestNPU::test_memory_stats (and test_cuda.py's older twin)."""
    dev = SimDevice("ascend-910b-64gb", preset)
    dev.api.empty_cache()
    for _ in memory_stats_generator(dev):
        check_memory_stat_consistency(dev)


@pytest.mark.parametrize("preset", ["npu-expandable", "torch-cuda-expandable"])
def test_memory_stats_generator_with_expandable_segments(preset: str) -> None:
    """test_npu.py::TestNPU::_test_memory_stats_generator's assertions on expandable presets.

    The snapshot consistency check is not run here: expandable segments count no
    ``segment`` and no ``inactive_split`` (docs/simulator.md).
    """
    dev = SimDevice("ascend-910b-64gb", preset)
    dev.api.empty_cache()
    for _ in memory_stats_generator(dev):
        pass


@pytest.mark.parametrize("preset", ["npu", "npu-expandable"])
def test_memory_allocation(preset: str) -> None:
    """test_npu.py::TestNPU::test_memory_allocation."""
    dev = SimDevice("ascend-910b-64gb", preset)
    api = dev.api
    api.empty_cache()
    prev = api.memory_allocated()
    mem = dev.malloc(1)
    assert api.memory_allocated() > prev
    dev.free(mem)
    assert api.memory_allocated() == prev


@pytest.mark.parametrize("preset", ["npu", "npu-expandable"])
def test_out_of_memory(preset: str) -> None:
    """test_npu.py::TestNPU::test_out_of_memory (a 64 GB 910B)."""
    dev = SimDevice("ascend-910b-64gb", preset)
    tensor = empty(dev, 1024)
    with pytest.raises(SimOutOfMemory, match="Tried to allocate 80.00 GiB"):
        empty(dev, 1024 * 1024 * 1024 * 80, dtype="int8")
    tensor.delete()
    dev.free(dev.malloc(4096))
