"""The per-layer KV-cache specs of ``tools/golden_vllm.py``, built by vLLM 0.33's own model code.

The model is read by ``EngineArgs.create_engine_config``, built on the meta device from the
registry's class, and each attention / Mamba module answers ``get_kv_cache_spec``
(:func:`build_model_specs`); the specs then take the emulated H100's block size (with
``Platform._align_hybrid_block_size`` for Mamba hybrids) and are split over pipeline stages
(:func:`build_specs`). Runs only in the throwaway vLLM environment, never in ``make test``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from golden_vllm_standins import meta_values, patch_parallel_groups


def text_config(raw: dict[str, Any]) -> dict[str, Any]:
    """The text model's config with Hugging Face's class defaults (for the TP checks)."""
    from transformers import AutoConfig

    text = dict(raw.get("text_config") or raw)
    model_type = text["model_type"]
    try:
        kwargs = {k: val for k, val in text.items() if k != "model_type"}
        full = AutoConfig.for_model(model_type, **kwargs).to_dict()
    except Exception as exc:  # a model type this transformers does not know
        print(f"  note: AutoConfig.for_model({model_type!r}) failed ({exc}); raw config used")
        full = text
    for key, value in text.items():  # keys transformers 5 turns into properties
        full.setdefault(key, value)
    if "num_hidden_layers" not in full:  # a text section of its own (Moondream3's config.text)
        full = {**vllm_text_config(raw), **full}
    return full


def vllm_text_config(raw: dict[str, Any]) -> dict[str, Any]:
    """The text config as vLLM's own config loading reads ``raw`` (``get_config``, then the
    config's ``get_text_config``): for checkpoints whose text model is a section no
    transformers class reads."""
    import tempfile

    from vllm.transformers_utils.config import get_config

    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "config.json").write_text(json.dumps(raw))
        config = get_config(folder, trust_remote_code=False)
    found: dict[str, Any] = config.get_text_config().to_dict()
    return found


_SPECS: dict[tuple[str, int, str, int], list[tuple[int, Any, str | None]]] = {}
# Per config (its JSON): the model class vLLM's registry resolved (a Transformers-backend
# class where vLLM runs it through transformers), and whether it is SupportsPP.
CLASSES: dict[str, str] = {}
PP_SUPPORTED: dict[str, bool] = {}
# Specs (by id) whose block size is their own, not the cache's (kept by build_specs).
OWN_BLOCK: set[int] = set()


def model_specs(raw: dict[str, Any], *, tp: int, cache_dtype: str,
                max_model_len: int) -> list[tuple[int, Any, str | None]]:
    """:func:`build_model_specs`, once per config, TP size, KV dtype and length."""
    key = (json.dumps(raw, sort_keys=True), tp, cache_dtype, max_model_len)
    if key not in _SPECS:
        _SPECS[key] = build_model_specs(raw, tp=tp, cache_dtype=cache_dtype,
                                        max_model_len=max_model_len)
    return _SPECS[key]


def build_model_specs(raw: dict[str, Any], *, tp: int, cache_dtype: str,
                      max_model_len: int) -> list[tuple[int, Any, str | None]]:
    """``(layer index, vLLM KV-cache spec, mamba_type)`` of every cache-holding module.

    Built by vLLM itself: ``EngineArgs(...).create_engine_config()`` reads the config as
    vLLM does (transformers' config class, vLLM's own config classes and
    ``verify_and_update_config`` hooks); the model class from vLLM's registry is
    instantiated on the meta device under ``set_current_vllm_config``; each attention or
    Mamba module registers itself in ``compilation_config.static_forward_context`` and
    answers ``get_kv_cache_spec(vllm_config)``, as ``gpu_model_runner.get_kv_cache_spec``
    asks it; modules with a ``kv_sharing_target_layer_name`` keep no cache. memacct's
    rules are not consulted: which layer slides, its window, heads and head sizes, and
    the state shapes are the model file's.
    """
    import tempfile

    import torch
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase
    from vllm.model_executor.model_loader.utils import get_model_architecture, initialize_model
    from vllm.utils.torch_utils import set_default_torch_dtype

    patch_parallel_groups(tp)
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "config.json").write_text(json.dumps(raw))
        args = EngineArgs(model=folder, skip_tokenizer_init=True, load_format="dummy",
                          kv_cache_dtype=cache_dtype, max_model_len=max_model_len,
                          enforce_eager=True, trust_remote_code=False, runner="generate",
                          tensor_parallel_size=tp)
        vllm_config = args.create_engine_config()
        model_cls, _ = get_model_architecture(vllm_config.model_config)
        key = json.dumps(raw, sort_keys=True)
        CLASSES[key] = f"{model_cls.__module__}.{model_cls.__name__}"
        model_config = vllm_config.model_config
        PP_SUPPORTED[key] = model_config.registry.is_pp_supported_model(
            model_config.architectures, model_config)
        # The Transformers backend puts the parameters it makes on the device's type.
        vllm_config.device_config.device = torch.device("meta")
        # As BaseModelLoader.load_model builds it, on the meta device.
        with set_default_torch_dtype(vllm_config.model_config.dtype), torch.device("meta"), \
                meta_values():
            try:
                model = initialize_model(vllm_config=vllm_config, prefix="")
            except AssertionError as exc:  # vLLM's layers refuse this TP size
                raise ValueError(f"model construction failed: {exc!r}") from exc
        found: list[tuple[int, Any, str | None]] = []
        paths = {id(m): path + "." for path, m in model.named_modules()}
        context = vllm_config.compilation_config.static_forward_context
        for name, module in context.items():
            if not isinstance(module, AttentionLayerBase):  # MoE runners register too
                continue
            if getattr(module, "kv_sharing_target_layer_name", None) is not None:
                continue
            spec = module.get_kv_cache_spec(vllm_config)
            if spec is not None and getattr(spec, "block_size", None) not in (
                    None, vllm_config.cache_config.block_size):
                # A spec of its own block size (Inkling's short-conv state pages a window
                # of sconv_kernel_size tokens): vLLM plans it as given.
                OWN_BLOCK.add(id(spec))
            # The decoder layer a module sits in, by its place in the module tree: a
            # module's registered name may number it otherwise (Falcon-H1's Mamba mixers
            # are "model.{num_layers + i}.mixer").
            # (Moondream3's text decoder names its layers "text.blocks.{i}".)
            match = re.search(r"(?:layers|blocks)\.(\d+)\.", paths.get(id(module), name))
            if spec is None or match is None:
                continue
            found.append((int(match.group(1)), spec, getattr(module, "mamba_type", None)))
    found.sort(key=lambda item: item[0])
    return found


def kv_dtype(raw: dict[str, Any], choice: str) -> str:
    """vLLM's resolve_kv_cache_dtype_string: "auto" follows a checkpoint's declared KV scheme."""
    if choice != "auto":
        return choice
    from vllm.utils.torch_utils import get_kv_cache_quant_algo_string

    quant = raw.get("quantization_config")
    algo = get_kv_cache_quant_algo_string(quant) if quant else None
    return algo or "auto"


def build_specs(v: dict[str, Any], found: list[tuple[int, Any, str | None]], *,
                num_layers: int, pp: int, block: int) -> list[dict[str, Any]]:
    """Per pipeline stage ``{layer name: spec}`` at the emulated H100's block size.

    The model's own specs get the block size and, for Mamba hybrids, the raise and the
    padded state page of ``Platform._align_hybrid_block_size`` (:func:`align_hybrid_block_size`);
    a Mamba spec keeps the cache mode vLLM gave it: "align" (prefix caching on) where the
    model supports Mamba prefix caching, else "none", and the prefill checkpoint blocks its
    layer asks for (a GDN state: one, as FlashInfer exports on an H100).
    """
    import dataclasses

    from vllm.v1.kv_cache_interface import MambaSpec

    states = [(s, kind) for _, s, kind in found if isinstance(s, MambaSpec)]
    attention = [s for _, s, _ in found if not isinstance(s, MambaSpec)]
    padded = None
    if states and attention:
        attn_1 = dataclasses.replace(attention[0], block_size=1).page_size_bytes
        block, padded = align_hybrid_block_size(states, attn_1, block)
    per_stage: list[dict[str, Any]] = []
    for rank in range(pp):
        start, end = v["get_pp_indices"](num_layers, rank, pp)
        specs: dict[str, Any] = {}
        for k, (i, own, kind) in enumerate(found):
            if not start <= i < end:
                continue
            if isinstance(own, MambaSpec) and own.mamba_cache_mode == "align" and _gdn(kind):
                # FlashInfer's GDN prefill exports a checkpoint on the H100 emulated here.
                spec = dataclasses.replace(
                    own, block_size=block, page_size_padded=padded,
                    num_prefill_checkpoint_blocks=1, prefill_checkpoint_alignment=64)
            elif isinstance(own, MambaSpec) and own.mamba_cache_mode == "align":
                # The model's own checkpoint blocks: MambaMixer2 sets 1, MambaMixer
                # (Mamba-1), ShortConv and linear attention keep MambaSpec's 0.
                spec = dataclasses.replace(own, block_size=block, page_size_padded=padded)
            elif isinstance(own, MambaSpec):  # prefix caching off (no Mamba prefix caching)
                spec = dataclasses.replace(own, block_size=block, page_size_padded=padded)
            elif id(own) in OWN_BLOCK:
                spec = own
            else:
                spec = dataclasses.replace(own, block_size=block)
            specs[f"model.layers.{i}.cache.{k}"] = spec
        per_stage.append(specs)
    return per_stage


def _gdn(kind: Any) -> bool:
    """A gated-delta-net state (``mamba_type``: a string, or vLLM 0.33's
    ``MambaAttentionBackendEnum.GDN_ATTN``)."""
    return str(getattr(kind, "name", kind)) in ("gdn_attention", "GDN_ATTN")


def align_hybrid_block_size(states: list[tuple[Any, str | None]], attn_1: int,
                            block: int) -> tuple[int, int | None]:
    """Platform._align_hybrid_block_size (vllm/platforms/interface.py) on an H100:
    FlashAttention's smallest kernel block 16, align mode, FlashInfer's GDN checkpoint
    alignment 64 (Mamba: 1). The state pages are the model's own MambaSpec pages."""
    import math

    from vllm.utils.math_utils import cdiv

    mamba_page = max(spec.page_size_bytes for spec, _ in states)
    align = max(16, block)
    align = math.lcm(align, 64 if any(_gdn(k) for _, k in states) else 1)
    attn_block = align * cdiv(mamba_page, align * attn_1)
    attn_block = 16 * cdiv(attn_block, 16)
    block = max(block, attn_block)
    page = block * attn_1
    return block, (page if page != mamba_page else None)
