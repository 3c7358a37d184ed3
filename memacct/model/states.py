"""Recurrent states: each state layer's tensors, as vLLM 0.33 shapes them for one rank.

``vllm/model_executor/layers/mamba/mamba_utils.py`` (``MambaStateShapeCalculator``,
``MambaStateDtypeCalculator``) gives each family's conv and temporal state; the
shapes here follow it, the geometry every module of one rank shares
(:class:`Geometry`) beside them. Which layer holds which state is
:mod:`memacct.model.layouts`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memacct.errors import ConfigError, InvalidInputError
from memacct.model.config import DTYPE_ALIASES, KV_DTYPE_BYTES, MAX_DIM, MAX_HEADS, ModelConfig
from memacct.model.layers import (
    GatedDeltaNetState,
    KimiDeltaState,
    LayerSpec,
    LinearAttentionState,
    Mamba1State,
    Mamba2State,
    ShortConvState,
)

__all__ = ["STATES", "Geometry", "linear_config", "ssm_dtype_bytes"]


def linear_config(cfg: ModelConfig) -> dict[str, Any]:
    section = cfg.get("linear_attn_config")
    if not isinstance(section, dict):
        raise ConfigError(f"{cfg.source}: linear_attn_config must be a JSON object")
    return section


@dataclass(frozen=True)
class Geometry:
    """What every module of one rank shares: parallelism, dtypes, the attention geometry.

    ``attention`` maps ``full``/``sliding``/``chunked`` to ``(kv heads per rank,
    head size, V head size)``; ``latent`` is MLA's latent row (elements), else ``None``.
    """

    tp: int
    hidden: int
    kv_bytes: int
    model_bytes: int
    ssm_bytes: int
    attention: dict[str, tuple[int, int, int]]
    latent: int | None = None
    latent_row_bytes: int | None = None
    state_checkpoints: bool = True


def ssm_dtype_bytes(cfg: ModelConfig, model_bytes: int) -> int:
    """The recurrent state's bytes: ``mamba_ssm_dtype`` when written, else the model dtype
    (Nemotron-H: float32)."""
    name = cfg.get("mamba_ssm_dtype") or cfg.get("mamba_ssm_cache_dtype")
    if name is None and cfg.model_type == "nemotron_h":
        # vLLM 0.33's NemotronHForCausalLMConfig (vllm/model_executor/models/config.py):
        # the SSM cache is float32 unless the config names another dtype.
        name = "float32"
    if isinstance(name, str):
        key = DTYPE_ALIASES.get(name.lower().removeprefix("torch."), name.lower())
        return KV_DTYPE_BYTES.get(key, model_bytes)
    return model_bytes


def _check_divides(cfg: ModelConfig, tp: int, values: dict[str, int]) -> None:
    for name, value in values.items():
        if value % tp:
            raise InvalidInputError(
                f"tensor_parallel_size {tp} does not divide the {value} {name} of "
                f"{cfg.source}: use a tensor_parallel_size that divides {value}"
            )


def _conv_ssm(conv: int, ssm: int, geo: Geometry) -> tuple[tuple[int, int], ...]:
    return ((conv, geo.model_bytes), (ssm, geo.ssm_bytes))


def _gdn(cfg: ModelConfig, geo: Geometry) -> tuple[tuple[int, int], ...]:
    nk = cfg.required(("linear_num_key_heads",), MAX_HEADS)
    nv = cfg.required(("linear_num_value_heads",), MAX_HEADS)
    dk = cfg.required(("linear_key_head_dim",), MAX_DIM)
    dv = cfg.required(("linear_value_head_dim",), MAX_DIM)
    kernel = cfg.required(("linear_conv_kernel_dim",), MAX_DIM)
    conv_dim = dk * nk * 2 + dv * nv
    _check_divides(cfg, geo.tp, {"linear_num_value_heads": nv, "linear conv dim": conv_dim})
    return _conv_ssm(conv_dim // geo.tp * (kernel - 1), nv // geo.tp * dv * dk, geo)


def _mamba2(cfg: ModelConfig, geo: Geometry) -> tuple[tuple[int, int], ...]:
    heads = cfg.required(("mamba_n_heads", "mamba_num_heads", "n_mamba_heads", "num_heads"),
                         MAX_HEADS)
    head_dim = cfg.required(("mamba_d_head", "mamba_head_dim", "mamba_headdim", "head_dim"),
                            MAX_DIM)
    state = cfg.required(("mamba_d_state", "ssm_state_size", "state_size"), MAX_DIM)
    groups = cfg.required(("mamba_n_groups", "n_groups", "mamba_ngroups"), MAX_HEADS)
    kernel = cfg.required(("mamba_d_conv", "conv_kernel"), MAX_DIM)
    expand = cfg.integer(("mamba_expand", "expand"), MAX_DIM)
    inner = cfg.integer(("mamba_d_ssm",), MAX_DIM)
    if inner is None:
        # Nemotron-H's mixer is heads x head_dim wide; Granite's and Bamba's mamba_expand x hidden.
        use_expand = expand is not None and cfg.model_type != "nemotron_h"
        inner = expand * geo.hidden if use_expand and expand is not None else heads * head_dim
    # Groups that do not divide the TP size are replicated up to it.
    groups += 0 if groups % geo.tp == 0 else geo.tp - groups
    conv_dim = inner + 2 * groups * state
    _check_divides(cfg, geo.tp, {"mamba heads": heads, "mamba conv dim": conv_dim})
    return _conv_ssm(conv_dim // geo.tp * (kernel - 1), heads // geo.tp * head_dim * state, geo)


def _mamba1(cfg: ModelConfig, geo: Geometry) -> tuple[tuple[int, int], ...]:
    state = cfg.required(("mamba_d_state", "state_size"), MAX_DIM)
    kernel = cfg.required(("mamba_d_conv", "conv_kernel"), MAX_DIM)
    expand = cfg.integer(("mamba_expand",), MAX_DIM)
    # Jamba's mixer is mamba_expand x hidden wide; Mamba's intermediate_size.
    inner = expand * geo.hidden if expand else cfg.required(("intermediate_size",), MAX_DIM)
    _check_divides(cfg, geo.tp, {"mamba intermediate size": inner})
    return _conv_ssm(inner // geo.tp * (kernel - 1), inner // geo.tp * state, geo)


def _short_conv(cfg: ModelConfig, geo: Geometry) -> tuple[tuple[int, int], ...]:
    # lfm2.py: short_conv_state_shape(intermediate_size=conv_dim) when the config writes it.
    kernel = cfg.required(("conv_L_cache",), MAX_DIM)
    width = cfg.integer(("conv_dim",), MAX_DIM) or geo.hidden
    _check_divides(cfg, geo.tp, {"conv width": width})
    return ((width // geo.tp * (kernel - 1), geo.model_bytes),)


def _linear(cfg: ModelConfig, geo: Geometry) -> tuple[tuple[int, int], ...]:
    # minimax_text_01.py: heads / tp x head_dim x head_dim, in the cache dtype (auto: the model's).
    heads = cfg.required(("num_attention_heads",), MAX_HEADS)
    head_dim = cfg.integer(("head_dim",), MAX_DIM) or geo.hidden // heads
    _check_divides(cfg, geo.tp, {"attention heads": heads})
    return ((heads // geo.tp * head_dim * head_dim, geo.model_bytes),)


def _kda_state(cfg: ModelConfig, geo: Geometry, heads: int, head_dim: int,
               kernel: int) -> tuple[tuple[int, int], ...]:
    """mamba_utils.py kda_state_shape / kda_state_dtype: a conv state of q, k and v
    (3 x heads x head_dim / tp x (kernel - 1)) in the model dtype, heads / tp x hd x hd in
    fp32; each model reads the three sizes from its own keys."""
    _check_divides(cfg, geo.tp, {"KDA heads": heads})
    conv = 3 * heads * head_dim // geo.tp * (kernel - 1)
    return ((conv, geo.model_bytes), (heads // geo.tp * head_dim * head_dim, 4))


def _kda(cfg: ModelConfig, geo: Geometry) -> tuple[tuple[int, int], ...]:
    # Kimi-Linear: linear_attn_config's num_heads, head_dim, short_conv_kernel_size.
    section = linear_config(cfg)
    heads = cfg.check_int("linear_attn_config.num_heads", section.get("num_heads"),
                          high=MAX_HEADS)
    head_dim = cfg.check_int("linear_attn_config.head_dim", section.get("head_dim"),
                             high=MAX_DIM)
    kernel = cfg.check_int("linear_attn_config.short_conv_kernel_size",
                           section.get("short_conv_kernel_size", 4), high=MAX_DIM)
    return _kda_state(cfg, geo, heads, head_dim, kernel)


def _kda_flat(cfg: ModelConfig, geo: Geometry) -> tuple[tuple[int, int], ...]:
    # alice_ai.py: kda_state_shape(num_heads=linear_num_key_heads,
    # head_dim=linear_key_head_dim, conv_kernel_size=linear_conv_kernel_dim), kda dtypes.
    heads = cfg.required(("linear_num_key_heads",), MAX_HEADS)
    head_dim = cfg.required(("linear_key_head_dim",), MAX_DIM)
    kernel = cfg.required(("linear_conv_kernel_dim",), MAX_DIM)
    return _kda_state(cfg, geo, heads, head_dim, kernel)


def _kda_heads(cfg: ModelConfig, geo: Geometry) -> tuple[tuple[int, int], ...]:
    # bailing_moe_v3.py: kda_state_shape(num_attention_heads, head_dim,
    # conv_kernel_size=short_conv_kernel_size).
    heads = cfg.required(("num_attention_heads",), MAX_HEADS)
    head_dim = cfg.required(("head_dim",), MAX_DIM)
    kernel = cfg.required(("short_conv_kernel_size",), MAX_DIM)
    return _kda_state(cfg, geo, heads, head_dim, kernel)


def _bailing_lightning(cfg: ModelConfig, geo: Geometry) -> tuple[tuple[int, int], ...]:
    # bailing_linear_attn.py: the lightning state of _linear; its local RMS norm asserts
    # tp <= group_norm_size (default 1) and that tp divides it.
    group = cfg.integer(("group_norm_size",), MAX_HEADS) or 1
    if geo.tp > group or group % geo.tp:
        raise InvalidInputError(
            f"tensor_parallel_size {geo.tp} does not divide the group_norm_size {group} of "
            f"{cfg.source} (vLLM's Bailing linear attention needs it): use a "
            f"tensor_parallel_size that divides {group}")
    return _linear(cfg, geo)


STATES: dict[str, tuple[type[LayerSpec], Callable[[ModelConfig, Geometry], tuple[
    tuple[int, int], ...]]]] = {
    "gdn": (GatedDeltaNetState, _gdn),
    "mamba2": (Mamba2State, _mamba2),
    "mamba1": (Mamba1State, _mamba1),
    "short_conv": (ShortConvState, _short_conv),
    "linear": (LinearAttentionState, _linear),
    "kda": (KimiDeltaState, _kda),
    "kda_flat": (KimiDeltaState, _kda_flat),
    "bailing_lightning": (LinearAttentionState, _bailing_lightning),
    "kda_heads": (KimiDeltaState, _kda_heads),
}
