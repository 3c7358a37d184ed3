"""A model's ``config.json`` keys, and checked access to their values.

The file is read by :func:`memacct.model.sources.local.read_config_file` (or another
source in :mod:`memacct.model.sources`). :class:`ModelConfig` is the
one reading of a model: checked access to its values (keys under their common
aliases, nested ``text_config`` sections, the model type's defaults that
transformers fills in, plausibility bounds, so a broken or hostile config
becomes a :class:`~memacct.errors.ConfigError` naming the key) and every fact
derived from them in one place: the architecture, the position limit as vLLM
derives it (:attr:`ModelConfig.position_limit`), the checkpoint dtype, the
quantization method. The per-layer list is :attr:`KVCacheSpec.layers
<memacct.model.spec.KVCacheSpec.layers>`: the spec reads this module, never the reverse.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from memacct.errors import ConfigError
from memacct.model.key_names import DERIVED_SIZES, KEY_NAMES

__all__ = ["DTYPE_BYTES", "NESTED_TEXT_SECTIONS", "NO_LENGTH_MAX_MODEL_LEN", "ModelConfig",
           "config_int"]

NO_LENGTH_MAX_MODEL_LEN = 2048
"""The ``max_model_len`` vLLM assumes for a config with none of its length keys
(``vllm/config/model.py`` ``_get_and_verify_max_len``: ``default_max_len = 2048``, with the
warning "Assuming the model's maximum length is 2048")."""

DTYPE_BYTES: dict[str, int] = {
    # torch's floating-point names and the aliases configs and flags use
    "float64": 8, "float32": 4, "fp32": 4, "float": 4,
    "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2,
    # FP8: torch's names and vLLM's --kv-cache-dtype ones (vllm/config/cache.py, CacheDType)
    "float8_e4m3fn": 1, "float8_e5m2": 1, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1,
    # integers and booleans
    "int8": 1, "uint8": 1, "bool": 1, "int16": 2, "int32": 4, "int64": 8,
    # a safetensors header's dtype, lower-cased (F64, F32, F16, BF16, F8_E4M3, I8, U8, ...)
    "f64": 8, "f32": 4, "f16": 2, "f8_e4m3": 1, "f8_e5m2": 1,
    "i8": 1, "u8": 1, "i16": 2, "i32": 4, "i64": 8,
}  # fmt: skip
"""Bytes per element of every dtype name memacct reads (config.json, flags, checkpoint
headers): the one table; the lists of names an engine or a reader accepts take their sizes
from it."""

# The KV-cache dtypes engines accept (vLLM's --kv-cache-dtype and friends), with their size.
KV_DTYPE_BYTES: dict[str, int] = {
    name: DTYPE_BYTES[name]
    for name in ("bfloat16", "float16", "float32", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "int8")
}
DTYPE_ALIASES = {
    "bf16": "bfloat16",
    "fp16": "float16",
    "half": "float16",
    "fp32": "float32",
    "float": "float32",
}

# Checkpoint dtypes a config.json may name in torch_dtype / dtype.
_MODEL_DTYPES = ("bfloat16", "float16", "float32")

# Keys transformers fills from the model class's defaults when a published config.json leaves
# them out: Gemma 3's files, for one, carry no head_dim (256, not hidden_size // heads = 240).
_GEMMA3_TEXT_DEFAULTS: dict[str, Any] = {
    "head_dim": 256,
    "sliding_window": 4096,
    "sliding_window_pattern": 6,
    "vocab_size": 262208,
    "max_position_embeddings": 131072,
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "num_hidden_layers": 26,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
}
_QWEN2_DEFAULTS: dict[str, Any] = {"use_sliding_window": False}
_MODEL_TYPE_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3": _GEMMA3_TEXT_DEFAULTS,
    "gemma3_text": _GEMMA3_TEXT_DEFAULTS,
    # Gemma 2 alternates: even layers slide, odd layers see everything.
    "gemma2": {"head_dim": 256, "sliding_window": 4096, "sliding_window_pattern": 2},
    "qwen2": _QWEN2_DEFAULTS,
    "qwen2_moe": _QWEN2_DEFAULTS,
    "qwen2_vl": _QWEN2_DEFAULTS,
    "qwen2_5_vl": _QWEN2_DEFAULTS,
    "qwen3": _QWEN2_DEFAULTS,
    "qwen3_moe": _QWEN2_DEFAULTS,
}

# Plausibility bounds: a value past these is a broken or hostile config, not a model.
MAX_LAYERS = 10_000
MAX_HEADS = 1 << 17
MAX_DIM = 1 << 20
MAX_INTERMEDIATE = 1 << 24
MAX_VOCAB = 1 << 24
MAX_POSITIONS = 1 << 40
MAX_PARALLEL = 1 << 16

LAYER_KEYS = ("num_hidden_layers", "n_layer", "n_layers", "num_layers")
HEAD_KEYS = ("num_attention_heads", "n_head", "n_heads")
HIDDEN_KEYS = ("hidden_size", "n_embd", "n_embed", "d_model")
KV_HEAD_KEYS = ("num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num")
_DTYPE_KEYS = ("torch_dtype", "dtype")
_TEXT_SECTIONS = ("text_config", "llm_config", "language_config")
# Text models a vLLM 0.33 model file reads from a section of another name, by architecture:
# Moondream3Config's config["text"] (vllm/transformers_utils/configs/moondream3.py), the
# MBart decoders of Nemotron-Parse in config.decoder (nemotron_parse3_5.py,
# RadioMBartPrefixForCausalLM.__init__; nemotron_parse.py), Cohere's ASR decoder in
# transf_decoder.config_dict (cohere_asr.py, CohereASRDecoder.__init__).
NESTED_TEXT_SECTIONS: dict[str, tuple[str, ...]] = {
    "Moondream3ForCausalLM": ("config", "text"), "HfMoondream": ("config", "text"),
    "RadioMBartPrefixForCausalLM": ("decoder",),
    "NemotronParseForConditionalGeneration": ("decoder",),
    "CohereAsrForConditionalGeneration": ("transf_decoder", "config_dict"),
}
# vLLM's length keys (vllm/config/model.py _get_and_verify_max_len, possible_keys).
_LENGTH_KEYS = (
    "max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
    "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len",
)
# Keys of a per-layer-type rope_parameters dict (transformers 5, vLLM's ALLOWED_LAYER_TYPES).
_ROPE_LAYER_TYPES = frozenset({
    "full_attention", "sliding_attention", "chunked_attention", "linear_attention",
    "mamba", "conv", "attention",
})


def check_config_int(source: str, key: str, value: Any, *, high: int, low: int = 1) -> int:
    """``value`` of ``key`` in a config file as an ``int`` in ``[low, high]``.

    An integral float (``4096.0``) is accepted; ``bool`` is refused.

    Raises:
        ConfigError: not an integer, or out of range; the message names ``source`` and ``key``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(
            f"{source}: {key} must be an integer, got {value!r} "
            f"({type(value).__name__}): fix the value in the config"
        )
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise ConfigError(f"{source}: {key} must be an integer, got {value!r}")
    if value < low:
        raise ConfigError(
            f"{source}: {key} = {value!r} must be at least {low}: fix the value in the config"
        )
    if value > high:
        raise ConfigError(
            f"{source}: {key} = {value!r} is not plausible (at most {high}): "
            f"fix the value in the config"
        )
    return int(value)


class ModelConfig:
    """The one reading of a model's ``config.json`` (typed look-ups plus derived facts).

    Every look-up names the key and the fix in its error. Derived facts:
    :attr:`architecture`, :attr:`position_limit`, :attr:`dtype`,
    :attr:`quantization` and :meth:`layers` (each layer's kind and geometry).
    """

    def __init__(self, root: Mapping[str, Any], source: str) -> None:
        self.source = source
        self.root = root
        # The language model's section: text_config, or InternVL/Ovis's llm_config,
        # DeepSeek-VL2's language_config, Qwen-Omni's thinker_config.text_config.
        key, text = next(((k, root[k]) for k in _TEXT_SECTIONS if root.get(k) is not None),
                         ("text_config", None))
        thinker = root.get("thinker_config")
        if text is None and isinstance(thinker, Mapping) and thinker.get("text_config"):
            key, text = "thinker_config.text_config", thinker["text_config"]
        names = root.get("architectures")
        path = NESTED_TEXT_SECTIONS.get(names[0] if isinstance(names, list) and names
                                        and isinstance(names[0], str) else "", ())
        if text is None and path:
            key, text = ".".join(path), root
            for part in path:
                text = text.get(part) if isinstance(text, Mapping) else None
        if text is not None and not isinstance(text, Mapping):
            raise ConfigError(
                f"{source}: {key} must be a JSON object, got {type(text).__name__}"
            )
        self.text: Mapping[str, Any] = text or {}
        model_type = self.text.get("model_type", root.get("model_type"))
        self.model_type = model_type if isinstance(model_type, str) else None
        self.defaults = _MODEL_TYPE_DEFAULTS.get(self.model_type or "", {})
        # The config class's own names of the standard keys, and the sizes it derives.
        self.key_names = KEY_NAMES.get(self.model_type or "", {})
        self.derived = DERIVED_SIZES.get(self.model_type or "", {})
        self.notes: list[str] = []

    @classmethod
    def of(
        cls, config: Mapping[str, Any] | ModelConfig, source: str = "config.json"
    ) -> ModelConfig:
        """The reading of ``config``: ``config`` itself when it is one already (a plan reads
        its model once and hands the reading down), else a new reading of the mapping."""
        return config if isinstance(config, ModelConfig) else cls(config, source)

    def find(self, keys: Sequence[str]) -> tuple[str, Any] | None:
        """``(key as written, value)`` of the first key present; ``null`` counts as absent."""
        for key in keys:
            if self.text.get(key) is not None:
                return f"text_config.{key}", self.text[key]
        for key in keys:
            if self.root.get(key) is not None:
                return key, self.root[key]
        for key in keys:
            for name in self.key_names.get(key, ()):
                if self.text.get(name) is not None:
                    return f"text_config.{name}", self.text[name]
                if self.root.get(name) is not None:
                    return name, self.root[name]
        for key in keys:
            if key in self.derived:
                value = self._derived(key)
                if value is not None:
                    return key, value
        for key in keys:
            if key in self.defaults:
                value = self.defaults[key]
                self.notes.append(
                    f"{key}={value!r} is not in the config: transformers' default for "
                    f"{self.model_type}"
                )
                return key, value
        return None

    def _derived(self, key: str) -> int | None:
        """``key`` as the config class derives it from another size (``4 * n_embd``)."""
        factor_key, factor, base_key = self.derived[key]
        base = self.find((base_key,))
        if factor_key is not None:
            factor = self.first_int((factor_key,), factor) or factor
        if base is None or isinstance(base[1], bool) or not isinstance(base[1], int):
            return None
        value = factor * base[1]
        self.notes.append(f"{key}={value} is not in the config: {self.model_type}'s config "
                          f"class derives it as {factor} x {base[0]}")
        return value

    def get(self, key: str, default: Any = None) -> Any:
        """The value of ``key`` (``text_config`` first, then the top level, then the model
        type's defaults), or ``default``."""
        found = self.find((key,))
        return default if found is None else found[1]

    def written_keys(self) -> set[str]:
        """Every key written in the config, top level and ``text_config``."""
        return {*self.root, *self.text}

    def first_int(self, keys: Sequence[str], default: int | None = None) -> int | None:
        """The first of ``keys`` whose value is an integer, else ``default``; lenient.

        A key written in another form (``bool``, a string, Gemma-3n's per-layer list) is
        passed over for the next one, as the weight formulas want: they fall back to
        another key or a default, and to the meta-device count where a size is missing.
        """
        for key in keys:
            found = self.find((key,))
            if found is not None and isinstance(found[1], int) and not isinstance(found[1], bool):
                return found[1]
        return default

    def integer(self, keys: Sequence[str], high: int, *, low: int = 1) -> int | None:
        found = self.find(keys)
        return None if found is None else self.check_int(*found, high=high, low=low)

    def check_int(self, key: str, value: Any, *, high: int, low: int = 1) -> int:
        return check_config_int(self.source, key, value, high=high, low=low)

    def required(self, keys: Sequence[str], high: int) -> int:
        value = self.integer(keys, high)
        if value is None:
            where = " in text_config or at the top level" if self.text else ""
            raise ConfigError(
                f"{self.source} has no {keys[0]} (looked for {', '.join(keys)}{where}): "
                f"is it a model's config.json? Add {keys[0]}"
            )
        return value

    @property
    def architecture(self) -> str | None:
        """``architectures[0]`` of the config (the class the engine loads), if written."""
        names = self.root.get("architectures")
        if isinstance(names, list) and names and isinstance(names[0], str):
            return names[0]
        return None

    @property
    def dtype(self) -> str | None:
        """The checkpoint's dtype (``torch_dtype``/``dtype``), normalised; ``None`` unwritten."""
        return checkpoint_dtype(self)[0]

    @property
    def quantization(self) -> str | None:
        """The checkpoint's ``quantization_config.quant_method`` (lower case), if any."""
        quant = self.get("quantization_config")
        method = quant.get("quant_method") if isinstance(quant, Mapping) else None
        return method.lower() if isinstance(method, str) else None

    @property
    def position_limit(self) -> tuple[int, str] | None:
        """The longest ``max_model_len`` vLLM accepts, and where it came from; the one owner.

        vLLM 0.33 ``vllm/config/model.py`` ``_get_and_verify_max_len`` on the text
        config: the smallest of its length keys (``model_max_length`` wins when
        set), times the RoPE factor of every type but ``su``/``longrope``/``llama3``
        (``mrope`` is read as ``default``, whose factor, when written, also
        counts); ``yarn`` scales ``original_max_position_embeddings`` (the
        top-level one first, as transformers' ``standardize_rope_params`` does);
        Gemma 3's length already states the scaled length. ``None``: no length key.
        """
        limit: int | None = None
        where = ""
        for key in _LENGTH_KEYS:
            value = self.first_int((key,))
            if value is not None and value > 0 and (limit is None or value < limit):
                limit, where = value, key
        explicit = self.first_int(("model_max_length",))
        if explicit is not None and explicit > 0:
            limit, where = explicit, "model_max_length"
        if limit is None:
            return None
        rope = self.get("rope_parameters") or self.get("rope_scaling")
        if not isinstance(rope, Mapping) or "gemma3" in (self.model_type or ""):
            return limit, where
        params = list(rope.values()) if set(rope) <= _ROPE_LAYER_TYPES else [rope]
        factor: float = 1.0
        for rp in params:
            if not isinstance(rp, Mapping):
                continue
            kind = str(rp.get("rope_type") or rp.get("type") or "default")
            if kind in ("su", "longrope", "llama3"):
                continue
            value = rp.get("factor", factor)
            factor = value if isinstance(value, (int, float)) and value > 0 else factor
            if kind == "yarn":
                original = self.first_int(("original_max_position_embeddings",))
                inner = rp.get("original_max_position_embeddings")
                original = original or (inner if isinstance(inner, int) else None)
                if original and original != limit:
                    limit, where = original, "original_max_position_embeddings"
        if factor != 1.0:
            return int(limit * factor), f"{where} x rope_scaling.factor {factor:g}"
        return limit, where


    @property
    def linear_rope_factor(self) -> float:
        """The factor of a ``linear`` ``rope_scaling``, else 1: vLLM's
        ``LinearScalingRotaryEmbedding`` caches ``max_positions x factor`` rows
        (``model_executor/layers/rotary_embedding/linear_scaling_rope.py``)."""
        rope = self.get("rope_scaling")
        if not isinstance(rope, Mapping) or (rope.get("rope_type") or rope.get("type")) != "linear":
            return 1.0
        factor = rope.get("factor")
        return float(factor) if isinstance(factor, (int, float)) and factor > 1 else 1.0

    @property
    def default_max_model_len(self) -> int:
        """The ``max_model_len`` vLLM serves when none is given: the position limit, else (no
        length key) :data:`NO_LENGTH_MAX_MODEL_LEN`. vLLM also scales that default by a RoPE
        factor the config may write; a config with RoPE scaling and no length key is not one
        memacct has met, and this reads 2048 for it."""
        found = self.position_limit
        return NO_LENGTH_MAX_MODEL_LEN if found is None else found[0]


def checkpoint_dtype(cfg: ModelConfig) -> tuple[str | None, int | None]:
    found = cfg.find(_DTYPE_KEYS)
    if found is None:
        return None, None
    key, value = found
    name = ""
    if isinstance(value, str):
        name = value.strip().lower().removeprefix("torch.")
        name = DTYPE_ALIASES.get(name, name)
    if name not in _MODEL_DTYPES:
        raise ConfigError(
            f"{cfg.source}: {key} = {value!r} is not a dtype memacct knows: use one of "
            f"{', '.join(_MODEL_DTYPES)}"
        )
    return name, KV_DTYPE_BYTES[name]


def checkpoint_kv_dtype(cfg: ModelConfig) -> str | None:
    """The KV dtype a ModelOpt checkpoint declares, as vLLM resolves ``auto`` from it."""
    quant = cfg.get("quantization_config")
    if not isinstance(quant, Mapping):
        return None
    producer = quant.get("producer")
    method = str(quant.get("quant_method", ""))
    is_modelopt = method.startswith("modelopt") or (
        isinstance(producer, Mapping) and producer.get("name") == "modelopt"
    )
    if not is_modelopt:
        return None
    inner = quant.get("quantization")
    inner = inner if isinstance(inner, Mapping) else quant
    scheme = (
        inner.get("kv_cache_scheme")
        or quant.get("kv_cache_scheme")
        or inner.get("kv_cache_quant_algo")
        or quant.get("kv_cache_quant_algo")
    )
    if scheme is None:
        return None
    fp8 = (
        isinstance(scheme, Mapping)
        and scheme.get("dynamic") is False
        and scheme.get("num_bits") == 8
        and scheme.get("type") == "float"
    ) or (isinstance(scheme, str) and scheme.lower() == "fp8")
    if fp8:
        return "fp8_e4m3"
    cfg.notes.append(
        f"the checkpoint's KV-cache scheme {scheme!r} is not one memacct sizes: "
        f"using the model dtype, as vLLM does"
    )
    return None


def config_int(
    config: Mapping[str, Any] | ModelConfig,
    key: str,
    default: int,
    *,
    source: str = "config.json",
    high: int = MAX_DIM,
) -> int:
    """``config[key]`` checked as an integer from 0 to ``high``; ``default`` when absent, null or 0.

    For the keys read outside the spec (the forward pass's ``qk_nope_head_dim``,
    ``v_head_dim``, ``q_lora_rank``, ``first_k_dense_replace``): a string, list,
    object, fraction, negative or absurd value is a :class:`ConfigError` naming
    the key, never a ``ValueError`` from ``int()``.

    Raises:
        ConfigError: the value is not a plausible non-negative integer.
    """
    value = ModelConfig.of(config, source).get(key)
    if value is None:
        return default
    return check_config_int(source, key, value, high=high, low=0) or default

