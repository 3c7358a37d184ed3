"""Agreement across ranks: every rank of a process group takes the smallest block count.

Tensor- and pipeline-parallel ranks share block tables, so they must hold the
same number of blocks; like vLLM and LMDeploy, memacct takes the minimum.
torch is imported only when :func:`agree` runs.
"""

from __future__ import annotations

from typing import Any

from memacct._log import logger
from memacct.errors import AgreementError, InvalidInputError
from memacct.planner.result import Agreement, KVCachePlan

__all__ = ["agree"]


# Backends whose collectives take CPU tensors; every other one wants the rank's accelerator.
_CPU_BACKENDS = ("gloo", "mpi")


def agree(plan: KVCachePlan, group: Any = None) -> KVCachePlan:
    """Make every rank of a ``torch.distributed`` group take the smallest ``num_blocks`` (contract).

    Every rank of ``group`` must call it (it is a collective). Each rank's
    ``num_blocks`` and ``block_size`` are all-gathered; every rank returns a
    new plan with ``num_blocks`` set to the minimum, the numbers that follow
    from it recomputed, and :attr:`KVCachePlan.agreement` recording the
    per-rank values. gloo groups exchange a CPU tensor; NCCL and HCCL groups a
    tensor on the rank's current device.

    Outside any process group (``group`` is None and ``torch.distributed`` is
    not initialized, or torch is not installed) there is nothing to agree with: the plan comes back
    unchanged but for an agreement of one rank (``backend="none"``).

    Args:
        plan: this rank's plan.
        group: the process group; ``None`` for the default (world) group.

    Raises:
        AgreementError: a group was given but torch is not installed or
            ``torch.distributed`` is not initialized; this process is not in
            the group; the collective failed; or the ranks' block sizes differ.
        InsufficientMemoryError: with the smallest block count, one request
            of ``max_model_len`` no longer fits (possible only when ranks
            planned with different specs or lengths).
    """
    if not isinstance(plan, KVCachePlan):
        raise InvalidInputError(f"agree takes a KVCachePlan, got {type(plan).__name__}")
    try:
        import torch
        import torch.distributed as dist
    except ImportError as exc:
        if group is None:
            # Without torch there can be no process group: one rank, nothing to agree on
            # (a MindSpore-only engine calls agree() just the same).
            return _single_rank(plan)
        raise AgreementError(
            f"a process group was given but torch cannot be imported ({exc}): "
            "pip install torch, or call agree(plan) without a group on a single rank"
        ) from None
    if not dist.is_available():
        raise AgreementError(
            "this torch build has no torch.distributed support: install a torch build "
            "with distributed support, or skip agree() when there is a single rank"
        )
    if not dist.is_initialized():
        if group is None:
            return _single_rank(plan)
        raise AgreementError(
            "a process group was given but torch.distributed is not initialized: call "
            "torch.distributed.init_process_group() on every rank before agree()"
        )

    try:
        backend = str(dist.get_backend(group))
        rank = dist.get_rank(group)
        world_size = dist.get_world_size(group)
    except (RuntimeError, ValueError) as exc:
        raise AgreementError(f"cannot read the process group: {exc}") from None
    if rank < 0:
        raise AgreementError(
            "this process is not a member of the given process group: call agree() with a "
            "group this rank belongs to"
        )
    try:
        local = torch.tensor(
            [plan.num_blocks, plan.block_size], dtype=torch.int64, device=_device(torch, backend)
        )
        gathered = [torch.zeros_like(local) for _ in range(world_size)]
        dist.all_gather(gathered, local, group=group)
        values = [(int(t[0].item()), int(t[1].item())) for t in gathered]
    except (RuntimeError, ValueError) as exc:
        raise AgreementError(
            f"all_gather of num_blocks over the {backend} group of {world_size} ranks "
            f"failed: {exc}"
        ) from None

    block_sizes = [size for _, size in values]
    if len(set(block_sizes)) > 1:
        raise AgreementError(
            f"ranks planned with different block sizes {block_sizes} (rank order): every rank "
            f"of a group must use the same block_size"
        )
    per_rank = tuple(blocks for blocks, _ in values)
    smallest = min(per_rank)
    agreed = plan.with_num_blocks(
        smallest,
        Agreement(ranks=per_rank, min=smallest, rank=rank, world_size=world_size,
                  backend=backend),
    )
    if smallest < plan.num_blocks:
        logger.info(
            "rank %d of %d takes %d KV-cache blocks, the smallest of %s (it planned %d)",
            rank, world_size, smallest, list(per_rank), plan.num_blocks,
        )
    return agreed


def _single_rank(plan: KVCachePlan) -> KVCachePlan:
    return plan.with_num_blocks(
        plan.num_blocks,
        Agreement(
            ranks=(plan.num_blocks,), min=plan.num_blocks, rank=0, world_size=1, backend="none"
        ),
    )


def _device(torch: Any, backend: str) -> Any:
    """Where the group's collectives want their tensors."""
    if any(name in backend for name in _CPU_BACKENDS):
        return torch.device("cpu")
    if "nccl" in backend:
        return torch.device("cuda", torch.cuda.current_device())
    if "hccl" in backend:
        return torch.device("npu", torch.npu.current_device())
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and accelerator.is_available():
        kind = accelerator.current_accelerator().type
        return torch.device(kind, accelerator.current_device_index())
    return torch.device("cpu")
