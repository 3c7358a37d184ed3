"""Concurrency: snapshots, sessions and the registry used from many threads at once.

test_profiling.py and test_registry.py have the gentle versions (readers while
a thread allocates in one segment; listing from eight threads); these churn
every kind of memory and mix registration with look-ups.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from _fakes import OneDeviceModule

import memacct
from memacct import MemorySnapshot, TorchLikeBackend
from memacct.sim import SimDevice
from memacct.units import GiB, MiB

NEIGHBOUR = GiB
EXTERNAL = 64 * MiB
SEGMENT = 30 * MiB  # a 30 MiB request gets a segment of exactly its size


def churn_until(dev: SimDevice, stop: threading.Event) -> None:
    """Allocate and free through the allocator (segments come and go) and outside it."""
    while not stop.is_set():
        ptrs = [dev.malloc(SEGMENT) for _ in range(4)]
        handle = dev.external_malloc(EXTERNAL)
        for ptr in ptrs:
            dev.free(ptr)
        dev.empty_cache()
        dev.external_free(handle)


def snapshots_under_churn(backend: memacct.DeviceBackend, dev: SimDevice) -> list[MemorySnapshot]:
    stop = threading.Event()
    churners = [threading.Thread(target=churn_until, args=(dev, stop)) for _ in range(2)]
    for t in churners:
        t.start()
    try:
        with ThreadPoolExecutor(4) as pool:
            return list(pool.map(lambda _: memacct.snapshot(backend), range(1000)))
    finally:
        stop.set()
        for t in churners:
            t.join()


def test_snapshots_from_many_threads_are_each_one_state_of_the_device() -> None:
    # Before the fix a snapshot could mix readings from before and after another thread's
    # change, so a constant co-tenant showed up as anything between 0.9 and 1.2 GiB.
    dev = SimDevice(total_bytes=8 * GiB)
    dev.other_process_malloc(NEIGHBOUR)
    snaps = snapshots_under_churn(memacct.get_backend("sim", device=dev), dev)
    assert {s.other_processes for s in snaps} == {NEIGHBOUR}
    # Each churner holds 0 or 1 external block and whole 30 MiB segments: never a torn mix.
    assert {s.non_allocator for s in snaps} <= {0, EXTERNAL, 2 * EXTERNAL}
    assert all(s.reserved % SEGMENT == 0 for s in snaps)
    assert all(s.used == s.reserved + s.non_allocator + NEIGHBOUR for s in snaps)


class ChangingModule(OneDeviceModule):
    """A torch.cuda-shaped module whose allocator grows once between two of its readings."""

    def __init__(self) -> None:
        self.reserved = 0
        self.reads = 0

    def memory_stats(self, device: int) -> Mapping[str, int]:
        self.reads += 1
        return {"reserved_bytes.all.current": self.reserved,
                "reserved_bytes.all.peak": self.reserved}

    def mem_get_info(self, device: int) -> tuple[int, int]:
        if self.reads == 1:
            self.reserved = 2 * GiB  # another thread allocates between the stats and this
        return 10 * GiB - self.reserved, 10 * GiB


def test_snapshot_without_a_device_lock_rereads_until_its_readings_agree() -> None:
    module = ChangingModule()
    snap = memacct.snapshot(TorchLikeBackend(module, name="busy"))
    assert (snap.reserved, snap.used, snap.non_allocator) == (2 * GiB, 2 * GiB, 0)
    assert module.reads == 3  # the torn first round, then two that agree


def test_profiling_sessions_on_different_devices_run_in_parallel_exactly() -> None:
    def session(gib: int) -> int:
        dev = SimDevice("h100-80gb")
        backend = memacct.get_backend("sim", device=dev)
        baseline = memacct.snapshot(backend)
        with memacct.memory_profiling(backend, baseline, weights_memory=0) as s:
            for _ in range(20):
                dev.free(dev.malloc(gib * GiB))
        return s.result.activation_peak

    with ThreadPoolExecutor(8) as pool:
        peaks = list(pool.map(session, range(1, 9)))
    assert peaks == [g * GiB for g in range(1, 9)]


def test_registry_serves_lookups_while_other_threads_register_and_unregister() -> None:
    errors: list[BaseException] = []

    def factory(**options: Any) -> TorchLikeBackend:
        return TorchLikeBackend(SimDevice(total_bytes=GiB).api, name="mine")

    def run(work: Callable[[int], object]) -> Callable[[int], None]:
        def wrapped(i: int) -> None:
            try:
                work(i)
            except Exception as exc:  # collected for the assertion
                errors.append(exc)
        return wrapped

    def register(i: int) -> None:
        memacct.register_backend(f"mine{i}", factory)
        memacct.unregister_backend(f"mine{i}")

    def look_up(i: int) -> None:
        assert memacct.get_backend("sim").name == "sim"
        assert "sim" in {info.name for info in memacct.available_backends()}

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(run(register), range(50)))
        list(pool.map(run(look_up), range(50)))
        list(pool.map(lambda i: run(register if i % 2 else look_up)(i), range(100)))
    assert errors == []
    assert not [n for n in memacct.registry.backend_names() if n.startswith("mine")]


class EverChangingModule(ChangingModule):
    """The allocator grows by 2 MiB at every reading: no two rounds ever agree."""

    def memory_stats(self, device: int) -> Mapping[str, int]:
        self.reserved += 2 * MiB
        return super().memory_stats(device)

    def mem_get_info(self, device: int) -> tuple[int, int]:
        return 10 * GiB - self.reserved, 10 * GiB


def test_snapshot_of_a_device_that_never_settles_uses_its_last_reading() -> None:
    from memacct.measure import READ_ATTEMPTS

    module = EverChangingModule()
    snap = memacct.snapshot(TorchLikeBackend(module, name="busy"))
    assert module.reads == READ_ATTEMPTS
    assert snap.reserved == snap.used == READ_ATTEMPTS * 2 * MiB
