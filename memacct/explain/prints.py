"""How vLLM releases print "GPU KV cache size: N tokens" for the same blocks.

Earlier releases printed ``num_blocks // len(kv_cache_groups) x block_size``
(vllm-project/vllm#13596; vllm-project/vllm#40691 shows it for hybrid models); the
release memacct follows prints ``int(max_concurrency x max_model_len)``
(vllm-project/vllm#51041 quotes the code), which is the plan's ``kv_tokens``. For
a model with one attention type and ``max_model_len`` a multiple of the block size
they agree; otherwise they differ, and a log's tokens match one of them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["block_print_tokens"]


def block_print_tokens(plan: Any) -> int:
    """"GPU KV cache size" of ``plan`` as releases before the concurrency print printed it."""
    return int(plan.num_blocks // max(1, len(plan.groups)) * plan.block_size)
