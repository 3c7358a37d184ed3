"""The allocations of one rank of an engine serving a transformer, for the simulated device.

A :class:`TransformerWorkload` is the core's :class:`~memacct.engines.forward.ForwardPass`
(the step traces the engines' offline estimates take peaks of) plus what a simulated
engine holds around them (see ``docs/workload.md``):

* :meth:`~TransformerWorkload.weight_tensors`: the model's weight inventory
  (:func:`memacct.model.weights.estimate.weight_tensors`, the tensors the offline
  estimate sums, quantized as the engine holds them), plus the engine's
  persistent input buffers (allocated once, never freed);
* :meth:`~TransformerWorkload.kv_cache_tensors`: the KV cache as one tensor per
  layer (keys and values together) for a number of blocks.

It is the :class:`memacct.replay.ServingTrace` a simulated start hands to the
profiler. :func:`replay` runs a trace on an allocator.

Example::

    >>> from memacct.planner import load_model_preset
    >>> from memacct.sim import SimDevice
    >>> work = TransformerWorkload.from_config(load_model_preset("qwen2.5-7b"))
    >>> dev = SimDevice("h100-80gb")
    >>> weights = [dev.malloc(n, persistent=True) for n in work.weight_tensors()]
    >>> before = dev.allocator.allocated
    >>> replay(dev, work.step_trace(8192, 256))     # one profiling-sized forward + sampling
    >>> dev.allocator.allocated == before           # the step freed all it took
    True
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from memacct.checks import check_int
from memacct.engines.base import KVSettings
from memacct.engines.forward import FLOAT32, INT32, INT64, ForwardPass
from memacct.engines.vllm.kv import kv_tensor_pages
from memacct.model.config import NO_LENGTH_MAX_MODEL_LEN
from memacct.model.spec import KVCacheSpec
from memacct.model.weights.estimate import WeightTensor, weight_tensors
from memacct.trace import Allocator, replay

__all__ = ["DEFAULT_MAX_MODEL_LEN", "Allocator", "TransformerWorkload", "replay"]

DEFAULT_MAX_MODEL_LEN = 32768
"""Cap on ``max_model_len`` used to size the engine's persistent block table when the config
allows longer contexts than an engine would serve by default."""


@lru_cache(maxsize=64)
def _inventory(
    config_json: str, tensor_parallel_size: int, mxfp4_pad: tuple[int, int]
) -> tuple[WeightTensor, ...]:
    """The weight inventory of a config (cached: a benchmark starts each model many times)."""
    config = json.loads(config_json)
    return tuple(
        weight_tensors(config, tensor_parallel_size=tensor_parallel_size, mxfp4_pad=mxfp4_pad)
    )


class TransformerWorkload(ForwardPass):
    """The allocations of one rank of an engine serving a transformer.

    Args:
        spec: the model's KV-cache spec on this rank.
        config: the model's ``config.json`` as a dict (for the sizes the spec omits).
        max_num_batched_tokens: the engine's token budget per step (sizes its
            persistent input buffers).
        max_num_seqs: the engine's sequence budget per step.
        block_size: tokens per KV-cache block.
        max_model_len: longest request (sizes the persistent block table);
            defaults to vLLM's (the config's position limit, 2048 without a length key)
            capped at 32768.
        mxfp4_pad: the MXFP4 expert padding of the device's kernels
            (:func:`memacct_bench.start.mxfp4_pad_for`); default ``estimate_weights``'s.
    """

    def __init__(
        self,
        spec: KVCacheSpec,
        config: Mapping[str, Any],
        *,
        max_num_batched_tokens: int = 8192,
        max_num_seqs: int = 256,
        block_size: int = 16,
        max_model_len: int | None = None,
        mxfp4_pad: tuple[int, int] = (256, 1),
    ) -> None:
        super().__init__(
            spec, config, max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs
        )
        self.block_size = check_int("block_size", block_size)
        # vLLM's own default (ModelConfig.default_max_model_len, carried by the spec), capped.
        self.max_model_len = max_model_len or min(
            spec.position_limit or NO_LENGTH_MAX_MODEL_LEN, DEFAULT_MAX_MODEL_LEN
        )
        self._kv_pages: list[int] | None = None
        self._weights = _inventory(
            json.dumps(dict(config), sort_keys=True, default=str),
            spec.tensor_parallel_size,
            (int(mxfp4_pad[0]), int(mxfp4_pad[1])),
        )

    # ---------------------------------------------------------------- weights

    def weight_tensors(self) -> list[int]:
        """Bytes of every tensor the engine holds from load to exit, in load order.

        The model's weight inventory (:meth:`parameter_tensors`), then the engine's
        persistent input buffers sized for ``max_num_batched_tokens`` and ``max_num_seqs``.
        """
        return self.parameter_tensors() + self.step_buffer_tensors()

    def parameter_tensors(self) -> list[int]:
        """Bytes of each tensor of the model's weight inventory on this rank, in load order.

        Exactly :func:`memacct.model.weights.estimate.weight_tensors` of the config (the tensors
        the offline estimate sums): quantized layers as the engine holds them, the rotary
        cos/sin cache, a vision tower where the config has one.
        """
        return [t.nbytes for t in self.weights]

    @property
    def weights(self) -> tuple[WeightTensor, ...]:
        """The model's weight inventory on this rank (role, shape and bytes of each tensor)."""
        return self._weights

    def step_buffer_tensors(self) -> list[int]:
        """Bytes of each persistent step buffer: vLLM's model runner keeps its step inputs in
        buffers sized for the budgets, allocated once in its constructor (vLLM 0.33's
        ``GPUModelRunner.__init__``, vllm/v1/worker/gpu_model_runner.py), outside the
        ``load_model`` window whose allocated growth vLLM charges as ``model_memory_usage``."""
        t = self.max_num_batched_tokens
        n = self.max_num_seqs
        blocks_per_seq = -(-self.max_model_len // self.block_size)
        return [
            t * INT32,  # input_ids
            t * INT64,  # positions
            t * INT64,  # slot_mapping
            (n + 1) * INT32,  # query_start_loc
            n * INT32,  # seq_lens
            n * blocks_per_seq * INT32,  # block_table
            n * FLOAT32,  # temperature
            n * FLOAT32,  # top_p
            n * INT32,  # top_k
        ]

    # ---------------------------------------------------------------- KV cache

    def kv_cache_tensors(self, num_blocks: int) -> list[int]:
        """Bytes of each KV-cache tensor for ``num_blocks`` blocks, as vLLM lays them out.

        A model with one KV-cache group gets one tensor per layer holding that
        layer's keys and values for every block; a hybrid (sliding-window and
        full attention, linear-attention state) gets one tensor per layer of
        its widest group, shared by a layer of every group
        (:func:`memacct.engines.vllm.kv.kv_tensor_pages`). The allocator rounds
        each one.
        """
        check_int("num_blocks", num_blocks, low=0)
        return [num_blocks * page for page in self.kv_tensor_pages]

    @property
    def kv_tensor_pages(self) -> list[int]:
        """Bytes per block of each KV-cache tensor (see :meth:`kv_cache_tensors`)."""
        if self._kv_pages is None:
            settings = KVSettings(block_size=self.block_size, max_model_len=self.max_model_len)
            self._kv_pages = kv_tensor_pages(self.spec, settings)
        return self._kv_pages

    @property
    def kv_block_bytes(self) -> int:
        """Bytes of one KV-cache block on this rank (all tensors' pages)."""
        return sum(self.kv_tensor_pages)

    def kv_cache_bytes(self, num_blocks: int) -> int:
        """Bytes of the whole KV cache for ``num_blocks`` blocks (before allocator rounding)."""
        return sum(self.kv_cache_tensors(num_blocks))

