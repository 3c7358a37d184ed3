"""What the seed's cases replay besides the framework graphs: each graph's decode mask.

The graphs themselves are the core's, the facts the offline plan of ``--engine
vllm-mindspore`` charges: :mod:`memacct.engines.vllm_mindspore.qwen2_graph` (the
MindFormers Qwen2 inference graph vllm-mindspore runs) and
:mod:`memacct.engines.vllm_mindspore.deepseek_graph` (one tensor-parallel rank of the
MindFormers DeepSeek-V3 graph, MLA and MoE). The decode mask is built in the model's
constructor and freed before the profile starts, so only a replay of the start, never
the offline plan, needs its trace (sources in ``docs/simulator.md``, "The seed's cases").
"""

from __future__ import annotations

from memacct.engines.vllm_mindspore.deepseek_graph import DeepseekV3Graph
from memacct.engines.vllm_mindspore.qwen2_graph import Qwen2Graph

__all__ = ["decode_mask_trace", "deepseek_v3_mask_trace", "qwen2_mask_trace"]


def decode_mask_trace(side: int, dtype_bytes: int) -> list[int]:
    """The decode mask's construction: the cast triangle, the product kept, the cast freed."""
    nbytes = side * side * dtype_bytes
    return [nbytes, nbytes, ~0]


def qwen2_mask_trace(graph: Qwen2Graph) -> list[int]:
    """Qwen2's decode mask (:func:`decode_mask_trace`), ``max_model_len`` on a side."""
    return decode_mask_trace(graph.max_model_len, graph.dtype_bytes)


def deepseek_v3_mask_trace(graph: DeepseekV3Graph) -> list[int]:
    """DeepSeek-V3's decode mask (:func:`decode_mask_trace`), ``mask_side`` on a side."""
    return decode_mask_trace(graph.mask_side, graph.dtype_bytes)
