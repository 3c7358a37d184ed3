"""Rules of multimodal architectures whose vLLM 0.33 model file builds a text model of its own.

These files build no registered text class (so :mod:`memacct.model.mm_text` cannot name
one): they write their own decoder, whose layers are read here from the file and planned
by a layout of :mod:`memacct.model.layouts` (or :mod:`memacct.model.mm_layouts`). Each is
a multimodal row, so ``docs/architectures.md`` marks it partial (the towers' start-up is
the engine's); the text part's KV cache is the model file's:

* ``moondream3``: ``Moondream3TextModel`` (``moondream3.py``): ``n_layers`` blocks, each one
  ``Attention`` of ``n_kv_heads`` heads of ``dim // n_heads`` (``Moondream3Attention``),
  full attention; the checkpoint's ``config["text"]`` is the text section
  (``config.NESTED_TEXT_SECTIONS``, ``key_names``: Moondream3TextConfig's names).
* ``muse_spark``: ``MuseSpark1xModel`` (``vllm/models/muse_spark/nvidia/model.py``,
  ``MuseSpark1xAttention``): ``num_key_value_heads`` of ``head_dim`` in every layer,
  ``per_layer_sliding_window = sliding_window`` where ``layer_types[i]`` is
  ``sliding_attention`` (MuseSparkTextConfig allows only that and full attention).
* ``nemotron_parse3_5``: ``MBartDecoderNoPos`` (``nemotron_parse3_5.py``,
  ``NemotronParseSelfAttention``): ``decoder_layers`` layers of self attention only
  (``RadioMBartPrefixForCausalLM`` refuses ``add_cross_attention``), ``self_attention_kv_heads``
  (else all) heads of ``d_model // decoder_attention_heads``; the class is not SupportsPP.
* ``interns2_mobius``: :func:`memacct.model.mm_layouts._mobius`.
* ``whisper``: an encoder-decoder (:mod:`memacct.model.mm_layouts`): ``decoder_layers``
  layers of self and cross attention, ``decoder_attention_heads`` heads (as KV heads,
  ``max(1, heads // tp)``) of ``d_model // heads`` (``WhisperAttention``); the model class
  is not SupportsPP. ``nemotron_parse`` (``BartDecoderLayer``: WhisperAttention and
  WhisperCrossAttention of ``decoder_attention_heads``, in ``config.decoder``) and
  ``cohere_asr`` (``CohereASRDecoderLayer``: ``transf_decoder.config_dict``'s
  ``num_layers`` layers of ``num_attention_heads`` heads of ``hidden_size // heads``) alike;
  neither class is SupportsPP.
* ``diffusion_gemma``: ``Gemma4Model`` (Gemma 4's layout and geometry) with
  ``attention_k_eq_v`` forced on (``attention_geometry._diffusion_gemma_attention``); not
  SupportsPP.
"""

from __future__ import annotations

from memacct.model.config_keys import GDN_KEYS
from memacct.model.rule import Rule

__all__ = ["MM_RULES"]

_M = "vllm/model_executor/models"

MM_RULES: dict[str, Rule] = {
    "moondream3": Rule("decoder", "exact", f"{_M}/moondream3.py:817 and :588 "
                       "(Moondream3TextModel, Moondream3Attention); vLLM's "
                       "Moondream3TextConfig", frozenset({"n_kv_heads", "dim", "n_heads"})),
    "muse_spark": Rule("decoder", "exact", "vllm/models/muse_spark/nvidia/model.py:945 "
                       "(MuseSpark1xAttention; read, not run: its kernels need FlashInfer "
                       "and the CUTLASS DSL); vLLM's MuseSparkTextConfig"),
    "nemotron_parse3_5": Rule("decoder", "exact", f"{_M}/nemotron_parse3_5.py:147 and :198 "
                              "(NemotronParseSelfAttention, MBartDecoderLayer; read, not run: "
                              "a remote-code config); transformers MBartConfig",
                              frozenset({"decoder_layers", "decoder_attention_heads",
                                         "self_attention_kv_heads"}),
                              pipeline_parallel=False),
    "interns2_mobius": Rule("mobius", "exact", f"{_M}/interns2_mobius.py:173 "
                            "(InternS2MobiusDecoderLayer), vllm/model_executor/layers/mamba/"
                            "mamba_utils.py; remote-code config (run on a synthetic one)",
                            frozenset({"layer_types", *GDN_KEYS})),
    "whisper": Rule("encoder_decoder", "exact", f"{_M}/whisper.py:157 and :438 "
                    "(WhisperAttention, WhisperDecoderLayer), vllm/v1/kv_cache_interface.py "
                    "(CrossAttentionSpec); transformers WhisperConfig",
                    frozenset({"decoder_layers", "decoder_attention_heads",
                               "max_source_positions"}),
                    pipeline_parallel=False, layer_keys=("decoder_layers",)),
    "nemotron_parse": Rule("encoder_decoder", "exact", f"{_M}/nemotron_parse.py:82 "
                           "(BartDecoderLayer: whisper.py's WhisperAttention and "
                           "WhisperCrossAttention; read, not run: a remote-code config); "
                           "transformers MBartConfig", frozenset({
                               "decoder_layers", "decoder_attention_heads",
                               "max_source_positions"}),
                           pipeline_parallel=False, layer_keys=("decoder_layers",)),
    "cohere_asr": Rule("encoder_decoder", "exact", f"{_M}/cohere_asr.py:99 and :340 "
                       "(CohereASRAttention, CohereASRDecoderLayer; read, not run: no "
                       "published config here); the checkpoint's transf_decoder.config_dict",
                       frozenset({"max_source_positions"}), pipeline_parallel=False),
    # Gemma 4's layers (Gemma4Model), attention_k_eq_v forced on; the block-diffusion
    # decoding pass reads the cache its causal pass writes (diffusion_gemma.py docstring).
    "diffusion_gemma": Rule("diffusion_gemma", "exact", f"{_M}/diffusion_gemma.py:189 and "
                            ":236 (attention_k_eq_v = True; Gemma4Model of gemma4.py); "
                            "transformers DiffusionGemmaTextConfig", frozenset({
                                "global_head_dim", "num_global_key_value_heads",
                                "attention_k_eq_v", "per_layer_config",
                                "use_bidirectional_attention"}),
                            pipeline_parallel=False, defaults=(("sliding_window", 512),)),
}
"""vLLM module -> its rule (merged into :data:`memacct.model.arch_rules.RULES`)."""
