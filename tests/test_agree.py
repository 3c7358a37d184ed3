"""agree: every rank of a torch.distributed group takes the smallest block count.

The group test is real: four processes on the CPU with the gloo backend, each
planning with a different budget, agree through ``all_gather``. One process
imports torch and forks the other ranks (four imports of torch took 8 s here).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import memacct
from memacct.errors import AgreementError, InsufficientMemoryError, InvalidInputError
from memacct.models import MemorySnapshot, ProfileResult, TruthSource
from memacct.planner import KVCachePlan, KVCacheSpec, agree, plan_kv_cache
from memacct.units import GiB

SPEC = KVCacheSpec.from_preset("llama-3.1-8b")
BLOCK = 16 * 2 * 32 * 8 * 128 * 2
WORLD = 4
REPO = Path(memacct.__file__).resolve().parent.parent


def profile(activation: int, total: int = 80 * GiB, weights: int = 16 * GiB) -> ProfileResult:
    def snap(t: float, reserved: int, peak: int) -> MemorySnapshot:
        return MemorySnapshot(
            backend="sim", device=0, timestamp=t, total=total, free=total - reserved, used=reserved,
            allocated=reserved, allocated_peak=peak, reserved=reserved, reserved_peak=peak,
            non_allocator=0, other_processes=0,
        )

    return ProfileResult(
        baseline=snap(0.0, 0, 0), before=snap(1.0, weights, weights),
        after=snap(2.0, weights, weights + activation), weights_memory=weights,
        activation_peak=activation, allocated_peak_increase=activation,
        reserved_peak_increase=activation, non_allocator_increase=0,
        non_kv_cache_memory=weights + activation, truth_source=TruthSource.ALLOCATED_PEAK,
        fragmentation=0.0, duration_s=0.1,
    )


def rank_plan(rank: int, block_size: int = 16) -> KVCachePlan:
    """Rank r's activations peak at (r + 1) GiB, so rank 3 has the fewest blocks."""
    return plan_kv_cache(profile((rank + 1) * GiB), SPEC, gpu_memory_utilization=0.5,
                         block_size=block_size, max_model_len=8192)


def test_single_rank_outside_any_group_is_a_recorded_no_op() -> None:
    pytest.importorskip("torch")
    plan = rank_plan(0)
    agreed = agree(plan)
    assert agreed.num_blocks == plan.num_blocks
    assert agreed.agreement is not None
    assert (agreed.agreement.ranks, agreed.agreement.world_size, agreed.agreement.backend) == (
        (plan.num_blocks,), 1, "none")


def test_group_given_without_initialized_distributed_is_agreement_error() -> None:
    pytest.importorskip("torch")
    with pytest.raises(AgreementError, match="init_process_group"):
        agree(rank_plan(0), group=object())


@pytest.fixture
def without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch (and torch.distributed) cannot be imported."""
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "torch.distributed", None)


@pytest.mark.usefixtures("without_torch")
def test_without_torch_a_group_is_an_error_naming_the_install() -> None:
    with pytest.raises(AgreementError, match="pip install torch"):
        agree(rank_plan(0), group=object())


@pytest.mark.usefixtures("without_torch")
def test_without_torch_and_without_group_is_a_single_rank_no_op() -> None:
    plan = rank_plan(0)
    agreed = agree(plan)
    assert agreed.num_blocks == plan.num_blocks
    assert agreed.agreement is not None and agreed.agreement.backend == "none"


def test_agree_takes_a_plan() -> None:
    with pytest.raises(InvalidInputError, match="KVCachePlan"):
        agree({"num_blocks": 3})  # type: ignore[arg-type]


def test_agreement_survives_json() -> None:
    pytest.importorskip("torch")
    agreed = agree(rank_plan(0))
    assert KVCachePlan.model_validate_json(agreed.model_dump_json()) == agreed


def test_one_rank_gloo_group_agrees_with_itself(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        agreed = agree(rank_plan(1))
    finally:
        dist.destroy_process_group()
    assert agreed.agreement is not None
    assert (agreed.agreement.backend, agreed.agreement.world_size) == ("gloo", 1)
    assert agreed.num_blocks == rank_plan(1).num_blocks


def test_fewer_blocks_after_agreement_recompute_tokens_and_concurrency() -> None:
    plan = rank_plan(0)
    smaller = rank_plan(3).num_blocks
    agreed = plan.with_num_blocks(smaller)
    assert (agreed.num_tokens, agreed.kv_cache_used_bytes) == (smaller * 16, smaller * BLOCK)
    assert agreed.max_concurrency == smaller / (8192 // 16)
    assert agreed.kv_cache_bytes == plan.kv_cache_bytes


def test_agreed_count_too_small_for_max_model_len_is_refused() -> None:
    with pytest.raises(InsufficientMemoryError, match="after vLLM's null block"):
        rank_plan(0).with_num_blocks(1)


# --- four real processes --------------------------------------------------------------------------

RANKS = textwrap.dedent(
    """
    import json, os, sys, traceback
    from datetime import timedelta

    import torch.distributed as dist

    from memacct.errors import AgreementError
    from memacct.planner import KVCachePlan, agree

    workdir, world = sys.argv[1], int(sys.argv[2])
    rank, children = 0, []
    for other in range(1, world):  # torch is imported once; each rank is a fork
        pid = os.fork()
        if pid == 0:
            rank, children = other, []
            break
        children.append(pid)
    code = 0
    try:
        dist.init_process_group(
            "gloo", rank=rank, world_size=world, timeout=timedelta(seconds=60)
        )
        out = {}
        agreed = agree(KVCachePlan.load(f"{workdir}/plan{rank}.json"))
        out["plan"] = json.loads(agreed.model_dump_json())
        try:
            agree(KVCachePlan.load(f"{workdir}/odd{rank}.json"))
            out["mismatch"] = None
        except AgreementError as exc:
            out["mismatch"] = str(exc)
        dist.destroy_process_group()
        with open(f"{workdir}/out{rank}.json", "w") as fh:
            json.dump(out, fh)
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    if rank:
        os._exit(code)  # a forked rank leaves without running the parent's exit hooks
    failed = [pid for pid in children if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])]
    sys.exit(code or (1 if failed else 0))
    """
)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[dict[str, Any]]]:
    """Run four gloo ranks: each agrees on its own plan, then on plans whose block sizes differ."""
    pytest.importorskip("torch")
    workdir = tmp_path_factory.mktemp("agree")
    env = {
        **os.environ,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "WORLD_SIZE": str(WORLD),
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
    }
    for rank in range(WORLD):
        rank_plan(rank).save(workdir / f"plan{rank}.json")
        rank_plan(rank, block_size=32 if rank == 2 else 16).save(workdir / f"odd{rank}.json")
    proc = subprocess.Popen(
        [sys.executable, "-c", RANKS, str(workdir), str(WORLD)], env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:  # a healthy run takes a few seconds; the limit only stops a hang
        log = proc.communicate(timeout=90)[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # every rank: they share the session
            proc.wait()
    assert proc.returncode == 0, log
    yield [json.loads((workdir / f"out{rank}.json").read_text()) for rank in range(WORLD)]


@pytest.mark.slow
def test_every_rank_ends_with_the_minimum(four_ranks: list[dict[str, Any]]) -> None:
    planned = [rank_plan(rank).num_blocks for rank in range(WORLD)]
    assert len(set(planned)) == WORLD  # the budgets really differ
    assert [out["plan"]["num_blocks"] for out in four_ranks] == [min(planned)] * WORLD


@pytest.mark.slow
def test_every_rank_records_the_per_rank_values(four_ranks: list[dict[str, Any]]) -> None:
    planned = [rank_plan(rank).num_blocks for rank in range(WORLD)]
    for rank, out in enumerate(four_ranks):
        assert out["plan"]["agreement"] == {
            "ranks": planned, "min": min(planned), "rank": rank, "world_size": WORLD,
            "backend": "gloo",
        }


@pytest.mark.slow
def test_agreed_plans_are_valid_plans(four_ranks: list[dict[str, Any]]) -> None:
    for rank, out in enumerate(four_ranks):
        agreed = KVCachePlan.model_validate(out["plan"])
        assert agreed.kv_cache_bytes == rank_plan(rank).kv_cache_bytes
        assert agreed.num_tokens == agreed.num_blocks * 16


@pytest.mark.slow
def test_ranks_with_different_block_sizes_refuse_to_agree(
    four_ranks: list[dict[str, Any]],
) -> None:
    for out in four_ranks:
        assert out["mismatch"] is not None
        assert "different block sizes [16, 16, 32, 16]" in out["mismatch"]
