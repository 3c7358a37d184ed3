"""A model's weight inventory on one tensor-parallel rank: every tensor with its role, shape, bytes.

One inventory serves every use of the weights: the offline estimate is its sum
(:func:`memacct.model.weights.estimate.estimate_weights`), and the simulated engine of
the harness allocates exactly its tensors, one allocation each. Each source of
the weights gives the same structure, a list of :class:`WeightTensor`: the
checkpoint's tensor table (:func:`memacct.model.sources.checkpoint.table_tensors`),
the model ``transformers`` builds on the meta device
(:func:`memacct.model.weights.meta.meta_tensors`), and the per-family formulas over
``config.json`` here (:func:`formula_tensors`: dense, MoE, MLA, multimodal
towers). :func:`memacct.model.weights.estimate.weight_tensors` picks the source as
``estimate_weights`` does.

A quantized linear layer is one tensor holding its packed weight and its
scales, zero points and index tensors (:mod:`memacct.model.weights.quant`); ``shape``
is the layer's (out, in) on this rank, ``nbytes`` what the engine holds for it.

Example::

    >>> from memacct.planner import load_model_preset
    >>> tensors = formula_tensors(load_model_preset("qwen2.5-7b"))
    >>> tensors[0].role, tensors[0].shape
    ('embedding', (152064, 3584))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memacct.checks import check_int
from memacct.errors import ConfigError
from memacct.model.config import ModelConfig
from memacct.model.geometry import kv_heads_of
from memacct.model.towers import tower_tensors
from memacct.model.weights.looped import LOOPED_TYPES, looped_layers
from memacct.model.weights.quant import QuantScheme, parse_quantization
from memacct.model.weights.rules import (
    WeightTensor,
    ceil_div,
    dtype_bytes,
    int_of,
    padded_vocab_per_rank,
    required_int,
    rotary_tensor,
    text_section,
)

__all__ = ["WeightTensor", "formula_tensors", "rotary_tensor"]

_PLAIN_MLP = frozenset({
    "gpt2", "gpt_bigcode", "gptj", "codegen", "bloom", "gpt_neo", "gpt_neox", "falcon",
    "RefinedWeb", "RefinedWebModel", "opt", "mpt", "phi", "starcoder2", "persimmon", "xglm",
    "biogpt",
})  # fmt: skip
"""Model types whose dense MLP is two matrices, up and down, with no gate: vLLM's
``GPT2MLP`` (``c_fc``/``c_proj``), ``GPTBigMLP``, ``GPTJMLP`` (``fc_in``/``fc_out``),
``BloomMLP``, ``GPTNeoXMLP``, ``FalconMLP``, OPT's ``fc1``/``fc2``, ``MPTMLP``, ``PhiMLP``,
``Starcoder2MLP``, ``PersimmonMLP`` (``vllm/model_executor/models/<type>.py``). Every other
dense MLP is gated (``gate_up_proj`` of twice the width)."""

_LEARNED_POSITIONS = {"gpt2": 0, "gpt_bigcode": 0, "opt": 2}
"""Model types with a learned position embedding (``wpe``, OPT's ``embed_positions``), and
the rows it holds beyond the positions (OPT's offset of 2: ``OPTLearnedPositionalEmbedding``
in vLLM's ``opt.py``); it is replicated on every rank."""


def _moe_layers(cfg: ModelConfig, layers: int, experts: int) -> set[int]:
    if not experts:
        return set()
    first_dense = int_of(cfg, "first_k_dense_replace", default=0) or 0
    step = int_of(cfg, "decoder_sparse_step", "interleave_moe_layer_step", default=1) or 1
    mlp_only = cfg.get("mlp_only_layers") or []
    only = {int(i) for i in mlp_only if isinstance(i, int)}
    return {i for i in range(layers) if i >= first_dense and (i + 1) % step == 0 and i not in only}


def _refuse_state_layers(cfg: ModelConfig) -> None:
    # Mamba and linear-attention layers (Granite 4.0-H, Qwen3-Next, Nemotron-H, Jamba) carry
    # projections, convolutions and gates the formulas do not model: the meta-device count
    # or the checkpoint's headers size them (both exact), never a guess.
    kinds = {str(kind) for kind in cfg.get("layer_types") or () if isinstance(kind, str)}
    keys = [key for key in cfg.written_keys() if key.startswith(("mamba_", "linear_", "ssm_"))]
    if kinds & {"mamba", "linear_attention"} or keys:
        from memacct.plugin import extra_hint

        raise ConfigError(
            f"{cfg.get('model_type', 'this model')} has Mamba or linear-attention layers, "
            f"which memacct's per-family formulas do not size: {extra_hint('hf')}, or give "
            "the checkpoint directory"
        )


class _Inventory:
    """Tensors in load order, with the model's dtype and quantization for the linear layers."""

    def __init__(self, dt: int, quant: QuantScheme | None) -> None:
        self.dt = dt
        self.quant = quant
        self.tensors: list[WeightTensor] = []

    def add(self, name: str, role: str, shape: tuple[int, ...], nbytes: int | None = None) -> None:
        """One tensor; ``nbytes`` default: its elements in the model's dtype."""
        if nbytes is None:
            nbytes = self.dt
            for d in shape:
                nbytes *= d
        self.tensors.append(WeightTensor(name, role, shape, int(nbytes)))

    def linear(
        self, module: str, out_f: int, in_f: int, role: str, name: str | None = None
    ) -> None:
        """A linear layer's weight on this rank, quantized unless the checkpoint skips
        ``module`` (the name its ``ignore`` list uses); ``name`` default ``module.weight``."""
        quant = self.quant
        quantized = quant is not None and not quant.experts_only and not quant.skips(module)
        nbytes = quant.linear_bytes(out_f, in_f) if quant is not None and quantized else None
        self.add(name or f"{module}.weight", role, (out_f, in_f), nbytes)


def _attention(inv: _Inventory, cfg: ModelConfig, p: str, h: int, tp: int) -> None:
    """One layer's attention: MLA (DeepSeek) or MHA/GQA, with its biases, norms and sinks."""
    model_type = str(cfg.get("model_type", ""))
    heads = required_int(cfg, "num_attention_heads", "num_attention_heads", "n_head")
    # the spec's reading (Falcon's multi_query, ChatGLM's groups)
    kv_heads = kv_heads_of(cfg, heads)
    head_dim = int_of(cfg, "head_dim", default=h // heads) or h // heads
    h_rank = max(1, heads // tp)
    if cfg.get("kv_lora_rank") is not None:
        rank = required_int(cfg, "kv_lora_rank", "kv_lora_rank")
        rope = int_of(cfg, "qk_rope_head_dim", default=64) or 64
        nope = int_of(cfg, "qk_nope_head_dim", default=128) or 128
        v_dim = int_of(cfg, "v_head_dim", default=nope) or nope
        q_rank = int_of(cfg, "q_lora_rank", default=0) or 0
        if q_rank:
            inv.linear(f"{p}.self_attn.q_a_proj", q_rank, h, "attention")
            inv.add(f"{p}.self_attn.q_a_layernorm.weight", "norms", (q_rank,))
            inv.linear(f"{p}.self_attn.q_b_proj", h_rank * (nope + rope), q_rank, "attention")
        else:
            inv.linear(f"{p}.self_attn.q_proj", h_rank * (nope + rope), h, "attention")
        inv.linear(f"{p}.self_attn.kv_a_proj_with_mqa", rank + rope, h, "attention")
        inv.add(f"{p}.self_attn.kv_a_layernorm.weight", "norms", (rank,))
        inv.linear(f"{p}.self_attn.kv_b_proj", h_rank * (nope + v_dim), rank, "attention")
        inv.linear(f"{p}.self_attn.o_proj", h, h_rank * v_dim, "attention")
        return
    kv_rank = max(1, kv_heads // tp)
    qkv_out = (h_rank + 2 * kv_rank) * head_dim
    qkv_bias = model_type.startswith("qwen2") or bool(cfg.get("attention_bias", False))
    o_bias = bool(cfg.get("attention_bias", False)) and not model_type.startswith("qwen2")
    # One fused QKV layer, skipped or quantized as the checkpoint's q_proj is.
    inv.linear(f"{p}.self_attn.q_proj", qkv_out, h, "attention", f"{p}.self_attn.qkv_proj.weight")
    inv.linear(f"{p}.self_attn.o_proj", h, h_rank * head_dim, "attention")
    if qkv_bias:
        inv.add(f"{p}.self_attn.qkv_proj.bias", "attention", (qkv_out,))
    if o_bias:
        inv.add(f"{p}.self_attn.o_proj.bias", "attention", (h,))
    if model_type.startswith("qwen3") or model_type in ("olmo2", "gemma3", "gemma3_text"):
        inv.add(f"{p}.self_attn.q_norm.weight", "norms", (head_dim,))
        inv.add(f"{p}.self_attn.k_norm.weight", "norms", (head_dim,))
    if model_type == "gpt_oss":
        inv.add(f"{p}.self_attn.sinks", "attention", (h_rank,))


def _experts(
    inv: _Inventory, p: str, experts: int, im: int, h: int, mxfp4_pad: tuple[int, int]
) -> None:
    """A MoE layer's routed experts on this rank: fused gate/up (w13) and down (w2) tensors."""
    quant = inv.quant
    name = f"{p}.mlp.experts"
    if quant is None or not (quant.experts_only or not quant.skips(name)):
        inv.add(f"{name}.w13_weight", "experts", (experts, 2 * im, h))
        inv.add(f"{name}.w2_weight", "experts", (experts, h, im))
        return
    w13 = quant.experts_bytes(experts, 2 * im, h, mxfp4_pad=(2 * mxfp4_pad[0], mxfp4_pad[1]))
    w2 = quant.experts_bytes(experts, h, im, mxfp4_pad=(mxfp4_pad[1], mxfp4_pad[0]))
    inv.add(f"{name}.w13_weight", "experts", (experts, 2 * im, h), w13)
    inv.add(f"{name}.w2_weight", "experts", (experts, h, im), w2)
    if quant.method == "mxfp4":
        im_p = ceil_div(im, mxfp4_pad[0]) * mxfp4_pad[0]
        h_p = ceil_div(h, mxfp4_pad[1]) * mxfp4_pad[1]
        # The MXFP4 kernels keep the experts' biases in bf16, padded as the weights are.
        inv.add(f"{name}.w13_bias", "experts", (experts, 2 * im_p), experts * 2 * im_p * 2)
        inv.add(f"{name}.w2_bias", "experts", (experts, h_p), experts * h_p * 2)


def _vision(inv: _Inventory, vision: Mapping[str, Any], text_hidden: int, tp: int) -> None:
    """A ViT tower plus its projector, for a tower without a rule of
    :mod:`memacct.model.towers`: attention (4 h^2) and MLP (2 h i) split across ranks, norms
    whole, the patch embedding, and the projector into the text model."""
    vision_cfg = ModelConfig(vision, "vision_config")
    vh = int_of(vision_cfg, "hidden_size", "embed_dim", "width", default=0) or 0
    depth = int_of(vision_cfg, "num_hidden_layers", "depth", "num_layers", default=0) or 0
    vi = int_of(vision_cfg, "intermediate_size", "mlp_dim", default=4 * vh) or 4 * vh
    patch = int_of(vision_cfg, "patch_size", default=14) or 14
    channels = int_of(vision_cfg, "num_channels", "in_channels", default=3) or 3
    if not vh or not depth:
        return
    dt = inv.dt
    for i in range(depth):
        p = f"vision_tower.layers.{i}"
        linears = ceil_div(4 * vh * vh + 2 * vh * vi, tp)
        inv.add(f"{p}.linears", "vision", (linears,), linears * dt)
        inv.add(f"{p}.norms", "vision", (4, vh))
    inv.add("vision_tower.patch_embedding.weight", "vision", (vh, channels, patch, patch))
    projector = ceil_div(vh * text_hidden + text_hidden * text_hidden, tp)
    inv.add("multi_modal_projector", "vision", (projector,), projector * dt)


def _refuse_no_mlp_width(cfg: ModelConfig, model_type: str) -> None:
    """Raise: a dense model whose config gives no MLP width the formulas can use."""
    widths = cfg.get("intermediate_size")
    if isinstance(widths, list):  # Gemma 3n: one width per layer, beside per-layer inputs
        raise ConfigError(
            f"intermediate_size is a per-layer list ({len(widths)} widths) and this "
            f"{model_type or 'model'} has weights the formulas do not size: give the "
            "checkpoint directory or its Hub id (the weights are then read from its "
            "safetensors headers)"
        )
    raise ConfigError(
        "intermediate_size: the config has no MLP width; add it to config.json or give the "
        "checkpoint directory"
    )


def formula_tensors(
    config: Mapping[str, Any] | ModelConfig,
    *,
    tensor_parallel_size: int = 1,
    mxfp4_pad: tuple[int, int] = (256, 1),
) -> list[WeightTensor]:
    """Every weight tensor of one rank from per-family formulas over ``config.json``.

    In load order: the embedding (and an untied LM head), each layer's norms,
    attention and MLP or experts, the final norm, the rotary cos/sin cache and a
    vision tower. Shapes are this rank's (the vocabulary padded and split, the
    linear layers split as vLLM splits them).

    Args:
        config: the model's ``config.json``, or its reading.
        tensor_parallel_size: ranks the layers are split across.
        mxfp4_pad: (intermediate, hidden) alignment the engine's MXFP4 MoE
            kernel pads expert matrices to (:func:`memacct.model.weights.estimate.mxfp4_padding`).

    Raises:
        ConfigError: a size the formulas need is missing.
        UnknownQuantizationError: the quantization method is not known.
    """
    tp = check_int("tensor_parallel_size", tensor_parallel_size)
    cfg = text_section(config)
    raw = cfg.root
    _refuse_state_layers(cfg)
    inv = _Inventory(dtype_bytes(cfg), parse_quantization(raw))
    h = required_int(cfg, "hidden_size", "hidden_size", "d_model", "n_embd")
    if cfg.get("model_type") in LOOPED_TYPES:
        looped_layers(inv, cfg, h, tp)
        inv.tensors.append(rotary_tensor(cfg))
        return inv.tensors
    layers = required_int(cfg, "num_hidden_layers", "num_hidden_layers", "num_layers", "n_layer")
    vocab = required_int(cfg, "vocab_size", "vocab_size")
    model_type = str(cfg.get("model_type", ""))
    experts = int_of(cfg, "num_experts", "num_local_experts", "n_routed_experts", default=0) or 0
    intermediate = (
        int_of(cfg, "intermediate_size", "intermediate_size_mlp", "ffn_dim", default=0) or 0
    )
    dense_i = int_of(cfg, "intermediate_size_mlp", default=intermediate) or intermediate
    moe_i = int_of(cfg, "moe_intermediate_size", default=intermediate) or intermediate
    if not experts and not dense_i:
        _refuse_no_mlp_width(cfg, model_type)
    pv = padded_vocab_per_rank(vocab, tp)
    inv.add("model.embed_tokens.weight", "embedding", (pv, h))
    if model_type in _LEARNED_POSITIONS:
        rows = required_int(
            cfg, "max_position_embeddings", "max_position_embeddings", "n_positions"
        )
        inv.add("model.embed_positions.weight", "embedding",
                (rows + _LEARNED_POSITIONS[model_type], h))
    # transformers' default when config.json omits it (Gemma 2 and 3 do) is tied; its
    # MistralConfig's is untied (Mistral 3's text_config omits it; vLLM's llama.py reads it).
    if not cfg.get("tie_word_embeddings", model_type != "mistral"):
        inv.add("lm_head.weight", "lm_head", (pv, h))
    norms = 4 if model_type.startswith(("gemma2", "gemma3")) else 2
    moe = _moe_layers(cfg, layers, experts)
    shared_i = (int_of(cfg, "shared_expert_intermediate_size", default=0) or 0) or (
        (int_of(cfg, "n_shared_experts", default=0) or 0) * moe_i
    )
    if model_type.startswith("llama4"):
        shared_i = intermediate  # Llama 4's MoE layers add one shared expert of the same width
    for i in range(layers):
        p = f"model.layers.{i}"
        inv.add(f"{p}.norms", "norms", (norms, h))
        _attention(inv, cfg, p, h, tp)
        if i in moe:
            inv.add(f"{p}.mlp.gate.weight", "router", (experts, h))
            if model_type == "gpt_oss":
                inv.add(f"{p}.mlp.gate.bias", "router", (experts,))
            _experts(inv, p, experts, ceil_div(moe_i, tp), h, mxfp4_pad)
            if shared_i:
                si = ceil_div(shared_i, tp)
                inv.linear(f"{p}.mlp.shared_experts.gate_up_proj", 2 * si, h, "mlp")
                inv.linear(f"{p}.mlp.shared_experts.down_proj", h, si, "mlp")
                if cfg.get("shared_expert_intermediate_size"):
                    inv.add(f"{p}.mlp.shared_expert_gate.weight", "router", (1, h))
        else:
            di = ceil_div(dense_i, tp)
            if model_type in _PLAIN_MLP:
                inv.linear(f"{p}.mlp.up_proj", di, h, "mlp")
            else:
                inv.linear(f"{p}.mlp.gate_up_proj", 2 * di, h, "mlp")
            inv.linear(f"{p}.mlp.down_proj", h, di, "mlp")
    inv.add("model.norm.weight", "norms", (h,))
    inv.tensors.append(rotary_tensor(cfg))
    tower = tower_tensors(raw)  # the tower rules of memacct/model/towers.py
    if tower is not None:
        for t in tower:
            n = ceil_div(t.numel, tp) if t.split else t.numel
            inv.add(t.name, "vision", (n,) if t.split else t.shape, n * inv.dt)
        return inv.tensors
    vision = raw.get("vision_config")
    if isinstance(vision, Mapping):
        _vision(inv, vision, h, tp)
    return inv.tensors

