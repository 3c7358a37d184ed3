"""The names a model's config class gives the standard keys, and the sizes it derives.

transformers reads ``config.hidden_size`` of a GPT-2 config as ``n_embd`` through the
config class's ``attribute_map``, and the engines' model files read the class's own names
(vLLM ``vllm/model_executor/models/chatglm.py`` reads ``padded_vocab_size``,
``ffn_hidden_size``, ``kv_channels``). :class:`memacct.model.config.ModelConfig` looks a
standard key up under these names when the config does not write it, so every reading (the
layers, the weight inventory, the position limit) sees one model whatever the class calls
its keys; a size the class derives when its key is left out or ``null`` (GPT-2's ``n_inner``:
``4 * n_embd``) is derived the same way, with a note.

Sources, per model type: transformers ``models/<type>/configuration_<type>.py``
(``attribute_map`` and the ``__init__`` defaults) and, for the classes transformers does
not ship (ChatGLM, Falcon's RefinedWeb), vLLM ``vllm/transformers_utils/configs/`` and the
model's ``configuration_*.py`` on the Hub; the MLP widths from the modelling code
(``GPT2MLP``: ``4 * hidden_size`` when ``n_inner`` is ``None``; ``BloomMLP``,
``FalconMLP``, ``GPTJMLP``, ``CodeGenMLP``: the same; ``MptMLP``: ``expansion_ratio *
d_model``).
"""

from __future__ import annotations

__all__ = ["DERIVED_SIZES", "KEY_NAMES"]

_GPT2: dict[str, tuple[str, ...]] = {
    "hidden_size": ("n_embd",), "max_position_embeddings": ("n_positions",),
    "num_attention_heads": ("n_head",), "num_hidden_layers": ("n_layer",),
    "intermediate_size": ("n_inner",),
}  # fmt: skip
_RW: dict[str, tuple[str, ...]] = {
    "num_attention_heads": ("n_head",), "num_hidden_layers": ("n_layer",),
    "num_key_value_heads": ("n_head_kv", "num_kv_heads"), "intermediate_size": ("ffn_hidden_size",),
}  # fmt: skip
# MPT and DBRX: transformers' MptConfig and DbrxConfig spell the four alike.
_MPT: dict[str, tuple[str, ...]] = {
    "num_attention_heads": ("n_heads",), "hidden_size": ("d_model",),
    "num_hidden_layers": ("n_layers",), "max_position_embeddings": ("max_seq_len",),
}  # fmt: skip

KEY_NAMES: dict[str, dict[str, tuple[str, ...]]] = {
    "gpt2": _GPT2,
    "gpt_bigcode": _GPT2,
    "gptj": _GPT2,
    "codegen": _GPT2,
    "bloom": {"num_hidden_layers": ("n_layer",), "num_attention_heads": ("n_head",)},
    "gpt_neo": {"num_attention_heads": ("num_heads",), "num_hidden_layers": ("num_layers",)},
    "mpt": _MPT,
    "dbrx": _MPT,
    "falcon": _RW,
    "RefinedWeb": _RW,
    "RefinedWebModel": _RW,
    "opt": {"intermediate_size": ("ffn_dim",)},
    "xglm": {
        "num_attention_heads": ("attention_heads",), "hidden_size": ("d_model",),
        "num_hidden_layers": ("num_layers",), "intermediate_size": ("ffn_dim",),
    },
    # vLLM's Moondream3TextConfig (vllm/transformers_utils/configs/moondream3.py): the
    # checkpoint's config["text"] names, which the class copies to the standard ones.
    "moondream3": {
        "num_key_value_heads": ("n_kv_heads",), "hidden_size": ("dim",),
        "max_position_embeddings": ("max_context",), "intermediate_size": ("ff_dim",),
    },
    # transformers MBartConfig's decoder sizes, which vLLM's MBart decoders read
    # (nemotron_parse3_5.py MBartDecoderLayer: decoder_attention_heads,
    # self_attention_kv_heads, decoder_layers, decoder_ffn_dim).
    "mbart": {
        "num_hidden_layers": ("decoder_layers",),
        "num_attention_heads": ("decoder_attention_heads",),
        "num_key_value_heads": ("self_attention_kv_heads",),
        "intermediate_size": ("decoder_ffn_dim",),
    },
    # transformers WhisperConfig: the decoder's heads and MLP width, which whisper.py's
    # decoder reads (WhisperDecoderLayer: config.decoder_attention_heads,
    # config.decoder_ffn_dim); the rule counts decoder_layers.
    "whisper": {"num_attention_heads": ("decoder_attention_heads",),
                "intermediate_size": ("decoder_ffn_dim",)},
    # ChatGLM's class (vLLM transformers_utils/configs/chatglm.py, THUDM's configuration_chatglm.py)
    "chatglm": {
        "num_hidden_layers": ("num_layers",), "vocab_size": ("padded_vocab_size",),
        "intermediate_size": ("ffn_hidden_size",), "head_dim": ("kv_channels",),
        "max_position_embeddings": ("seq_length",),
    },
}  # fmt: skip
"""Per model type: a standard key and the names the config class writes it under."""

_Derived = tuple[str | None, int, str]
_FOUR_TIMES: dict[str, _Derived] = {"intermediate_size": (None, 4, "hidden_size")}

DERIVED_SIZES: dict[str, dict[str, _Derived]] = {
    **dict.fromkeys(("gpt2", "gpt_bigcode", "gptj", "codegen", "bloom", "gpt_neo", "falcon",
                     "RefinedWeb", "RefinedWebModel"), _FOUR_TIMES),
    "mpt": {"intermediate_size": ("expansion_ratio", 4, "hidden_size")},
}  # fmt: skip
"""Per model type: a size the class derives when the config leaves it out (or ``null``), as
``(factor key or None, default factor, base key)``: ``factor x base``."""
