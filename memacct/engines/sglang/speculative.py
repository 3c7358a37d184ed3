"""SGLang 0.5.23's speculative decoding at start-up: the draft's weights, its KV pool, the cap.

``--speculative-config`` (:class:`~memacct.engines.deployment.Speculative`) read as SGLang's
own ``--speculative-algorithm`` (sources in ``docs/engines.md``, "SGLang 0.5.23's
speculative decoding"):

* the method is SGLang's algorithm (:data:`SGLANG_ALGORITHMS`; ``NEXTN`` is an alias of
  ``EAGLE``, ``speculative/spec_info.py`` ``SpeculativeAlgorithm.from_string``);
* weights: the scheduler builds the draft worker, which loads the whole draft model, before
  the target's KV pool is sized (``managers/scheduler.py`` ``init_target_memory_pool`` runs
  after ``init_draft_worker``; the pool is the free memory left then,
  ``kv_cache_configurator.py`` ``_profile_available_bytes``). The draft shares the target's
  embedding and LM head only afterwards (``eagle_worker_v2.py``, ``alloc_memory_pool`` ->
  ``init_lm_head``), so at sizing time it holds its own: :func:`draft_weight_bytes`;
* KV: the draft's pool holds as many tokens as the target's, and the target's cell grows by
  ``int(cell x draft layers / target layers)`` (``pool_configurator.py``,
  ``DefaultPoolConfigurator.__init__``, EAGLE / EAGLE3 / STANDALONE), the draft's layers
  being ``num_nextn_predict_layers`` or its ``num_hidden_layers``
  (``spec_aux_hidden_state.py`` ``_resolve_eagle_aux_hidden_state``):
  :func:`with_draft_pool`; NGRAM drafts on the CPU and adds neither;
* ``max_running_requests``: 48 unless given (``arg_groups/speculative_hook.py``,
  ``_handle_eagle_family`` and ``_handle_ngram``), then SGLang's usual cap
  (:func:`memacct.engines.sglang.kv.max_running_requests`).

Not modelled, refused: pipeline parallelism, the split sliding-window pool, Mamba hybrids
(the draft's intermediate states), DSA models, layers of unequal size, MTP outside the
DeepSeek-V3 family, ``suffix`` (SGLang has none), a draft TP other than the target's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memacct.engines.deployment import Speculative
from memacct.engines.vllm.parallel import with_layers
from memacct.errors import InvalidInputError
from memacct.model.config import ModelConfig
from memacct.model.spec import KVCacheSpec
from memacct.model.weights.estimate import VOCAB_PADDING, dtype_bytes, formula_weights

__all__ = [
    "MTP_ARCHITECTURES",
    "SGLANG_ALGORITHMS",
    "draft_kv_layers",
    "draft_weight_bytes",
    "launch_flags",
    "sglang_algorithm",
    "with_draft_pool",
]

SGLANG_ALGORITHMS: dict[str, str] = {
    "eagle": "EAGLE", "eagle3": "EAGLE3", "mtp": "NEXTN", "draft_model": "STANDALONE",
    "ngram": "NGRAM",
}  # fmt: skip
"""``--speculative-config`` method -> SGLang's ``--speculative-algorithm``."""

MTP_ARCHITECTURES = ("DeepseekV3ForCausalLM",)
"""Targets whose MTP head memacct sizes (``models/deepseek_nextn.py``,
``DeepseekV3ForCausalLMNextN``); SGLang points the draft path at the target for them
(``_handle_eagle_family``)."""

# Model types SGLang sizes with a split sliding-window pool (kv.py keeps the same list).
_SPLIT_POOL_TYPES = frozenset({"gpt_oss", "llama4", "llama4_text"})


def sglang_algorithm(spec: Speculative) -> str:
    """SGLang's ``--speculative-algorithm`` for ``spec``.

    Raises:
        InvalidInputError: ``suffix``, which SGLang 0.5.23 does not have.
    """
    name = SGLANG_ALGORITHMS.get(spec.method)
    if name is None:
        raise InvalidInputError(
            f"--speculative-config method {spec.method}: SGLang 0.5.23 has no such algorithm "
            f"(it runs {', '.join(SGLANG_ALGORITHMS)}): pick one of those or plan --engine vllm"
        )
    return name


def _int(config: Mapping[str, Any], *keys: str) -> int:
    return ModelConfig(config, "config.json").first_int(keys, 0) or 0


def _draft(spec: Speculative) -> Mapping[str, Any]:
    if spec.draft_config is None:
        raise InvalidInputError(
            f"--speculative-config method {spec.method} for SGLang: memacct needs the draft "
            "model's config.json to size its weights and KV layers: add \"model\" (the draft's "
            "Hub id or path, SGLang's --speculative-draft-model-path) to --speculative-config"
        )
    return spec.draft_config


def _check_mtp(config: Mapping[str, Any]) -> int:
    names = [str(a) for a in config.get("architectures") or ()]
    layers = _int(config, "num_nextn_predict_layers")
    if layers != 1 or not any(a in MTP_ARCHITECTURES for a in names):
        raise InvalidInputError(
            f"--speculative-config method mtp for SGLang: memacct sizes the MTP head of "
            f"{', '.join(MTP_ARCHITECTURES)} only (models/deepseek_nextn.py: one decoder layer), "
            f"with num_nextn_predict_layers 1 in its config; this model is "
            f"{', '.join(names) or '?'} with {layers}: "
            "give the draft model instead (method eagle/eagle3 with \"model\")"
        )
    return layers


def draft_kv_layers(config: Mapping[str, Any], spec: Speculative) -> int:
    """The draft's layers SGLang adds to the target's cell (``eagle_draft_num_layers``):
    ``num_nextn_predict_layers`` of the draft (the target's for MTP), else its
    ``num_hidden_layers``; 0 for NGRAM."""
    if spec.method == "ngram":
        return 0
    if spec.method == "mtp":
        return _check_mtp(config)
    draft = _draft(spec)
    return _int(draft, "num_nextn_predict_layers") or _int(draft, "num_hidden_layers")


def with_draft_pool(target: KVCacheSpec, draft_layers: int) -> KVCacheSpec:
    """The target's spec with ``draft_layers`` copies of its KV layer added to the one cell,
    as ``DefaultPoolConfigurator`` prices them: ``int(cell x draft / target layers)``.

    Raises:
        InvalidInputError: a pool SGLang sizes another way (see the module notes).
    """
    kv = [x for x in target.layers if x.bytes_per_token]
    kinds = {x.kind for x in target.layers}
    why = ""
    if target.pipeline_parallel_size > 1:
        why = "with --pipeline-parallel-size > 1 (the draft runs on the last stage only)"
    elif target.model_type in _SPLIT_POOL_TYPES:
        why = "with the split sliding-window pool (HybridSWAPoolConfigurator)"
    elif "mamba" in kinds:
        why = "for a Mamba hybrid (the draft's intermediate states in the state pool)"
    elif any(x.kind not in ("full", "mla") for x in kv):
        why = f"for layers of kind {', '.join(sorted(kinds - {'full', 'mla'}))}"
    elif len({x.bytes_per_token for x in kv}) != 1:
        why = "for layers of unequal KV size (its cell scales the sum, not a layer)"
    if why:
        raise InvalidInputError(
            f"SGLang speculative decoding {why}: memacct does not plan that pool for "
            f"{target.model_name}; plan without --speculative-config"
        )
    if draft_layers <= 0:
        return target
    from dataclasses import replace

    offset = target.total_num_layers
    base = kv[-1]
    layers = (*target.layers, *(replace(base, layer=offset + i) for i in range(draft_layers)))
    fields = {name: getattr(target, name) for name in type(target).model_fields}
    fields.update(
        layers=layers,
        total_num_layers=offset + draft_layers,
        num_layers=target.num_layers + draft_layers,
        pipeline_layers=(target.num_layers + draft_layers,),
        bytes_per_token=target.bytes_per_token + draft_layers * base.bytes_per_token,
        notes=(*target.notes, f"SGLang: {draft_layers} draft layer(s) priced into the cell "
                              "(the draft pool holds as many tokens as the target's)"),
    )  # fmt: skip
    return KVCacheSpec.model_validate(fields)


def _padded_rows(vocab: int, tp: int) -> int:
    """Rows of a ``VocabParallelEmbedding`` / ``ParallelLMHead`` on one rank
    (``layers/vocab_parallel_embedding.py``: padded to 64, then split)."""
    padded = -(-vocab // VOCAB_PADDING) * VOCAB_PADDING
    return -(-padded // tp)


def _eagle3_extra(draft: Mapping[str, Any], tp: int, own_head: int) -> int:
    """What ``LlamaForCausalLMEagle3`` (``models/llama_eagle3.py``) holds beyond a Llama of
    the same layers, less the LM head the formula priced (``own_head``)."""
    h = _int(draft, "hidden_size")
    dt = dtype_bytes(draft)
    layers = _int(draft, "num_hidden_layers")
    heads = _int(draft, "num_attention_heads")
    kv = _int(draft, "num_key_value_heads") or heads
    hd = _int(draft, "head_dim") or (h // heads if heads else 0)
    qkv_out = (heads // tp + 2 * max(1, kv // tp)) * hd
    eagle = draft.get("eagle_config")
    eagle = eagle if isinstance(eagle, Mapping) else {}
    ids = eagle.get("eagle_aux_hidden_state_layer_ids")
    aux = _int(draft, "num_aux_hidden_states") or (len(ids) if isinstance(ids, list) and ids
                                                   else 3)  # fmt: skip
    target_h = _int(draft, "target_hidden_size") or h
    extra = qkv_out * h * dt  # layer 0's q/k/v read [embedding; hidden]: one more hidden
    extra += layers * h * dt  # hidden_norm in every layer
    extra += aux * target_h * h * dt + (h * dt if draft.get("bias") else 0)  # fc, whole
    norms = int(bool(draft.get("fc_norm") or draft.get("use_aux_norm")))
    norms += int(bool(eagle.get("norm_before_fc", draft.get("norm_before_fc", False))))
    extra += norms * aux * target_h * dt
    if draft.get("tie_word_embeddings"):
        return extra - own_head
    vocab = _int(draft, "draft_vocab_size") or _int(draft, "vocab_size")
    return extra - own_head + _padded_rows(vocab, tp) * h * dt


def draft_weight_bytes(config: Mapping[str, Any], spec: Speculative, *,
                       tensor_parallel_size: int) -> int:  # fmt: skip
    """The draft's weights on one rank when the target's pool is sized (see the module notes).

    EAGLE (``models/llama_eagle.py``): a Llama of the draft's layers with ``fc`` (``2 x
    hidden -> hidden``, with bias), without the final norm and layer 0's input norm;
    EAGLE-3 (``models/llama_eagle3.py``): see :func:`_eagle3_extra`; STANDALONE: the
    whole draft model; MTP (``models/deepseek_nextn.py``): one more decoder layer,
    ``enorm``, ``hnorm``, ``eh_proj`` (``2 x hidden -> hidden``, whole), the shared head's
    norm and its own embedding and LM head. Every draft is split over the target's TP
    (``speculative/draft_parallel.py``, without DP attention).

    Raises:
        InvalidInputError: a draft memacct cannot size (see the module notes).
    """
    tp = tensor_parallel_size
    if spec.method == "ngram":
        return 0
    if spec.draft_tensor_parallel_size not in (None, tp):
        raise InvalidInputError(
            f"--speculative-config draft_tensor_parallel_size {spec.draft_tensor_parallel_size}: "
            f"SGLang runs the draft over the target's TP ({tp}); drop it"
        )
    if spec.method == "mtp":
        n = _check_mtp(config)  # one DeepseekModelNextN decoder layer
        h, dt = _int(config, "hidden_size"), dtype_bytes(config)
        base = formula_weights(config, tensor_parallel_size=tp)
        more = formula_weights(with_layers(config, _int(config, "num_hidden_layers") + n),
                               tensor_parallel_size=tp)  # fmt: skip
        own = base.by_role.get("embedding", 0) + base.by_role.get("lm_head", 0)
        return more.total_bytes - base.total_bytes + own + (3 * h + 2 * h * h) * dt
    draft = _draft(spec)
    w = formula_weights(draft, tensor_parallel_size=tp)
    h, dt = _int(draft, "hidden_size"), dtype_bytes(draft)
    # The rotary table stays float32 on CUDA (layers/rotary_embedding/base.py); the formulas
    # keep it in the model dtype.
    total = w.total_bytes + w.by_role.get("buffers", 0) * (4 - dt) // dt
    if spec.method == "draft_model":
        return total
    if spec.method == "eagle":
        # fc with bias; no final norm and no input_layernorm in layer 0 (llama_eagle.py).
        return total + (2 * h * h + h - 2 * h) * dt
    return total + _eagle3_extra(draft, tp, w.by_role.get("lm_head", 0))


def launch_flags(spec: Speculative) -> list[str]:
    """``sglang.launch_server``'s flags for ``spec`` (``arg_groups/fields/spec.py``): the
    algorithm, the draft's path (none for the MTP head, which SGLang finds in the target:
    ``_handle_eagle_family``) and a chain of ``num_speculative_tokens`` steps, ``topk`` 1,
    ``steps + 1`` draft tokens, as vLLM's ``num_speculative_tokens`` proposes."""
    flags = ["--speculative-algorithm", sglang_algorithm(spec)]
    if spec.method == "ngram":
        return flags
    if spec.method != "mtp" and spec.model is not None:
        flags += ["--speculative-draft-model-path", spec.model]
    steps = spec.num_speculative_tokens
    return [*flags, "--speculative-num-steps", str(steps), "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", str(steps + 1)]
