"""vLLM's speculative decoding at start-up: the drafter's weights, its KV layers, its sampler.

``--speculative-config`` (:class:`~memacct.engines.deployment.Speculative`) as vLLM 0.33
runs it (sources in docs/engines.md, "Deployment settings"):

* ``ngram`` and ``suffix`` propose on the CPU: no weights, no KV layers
  (``vllm/v1/spec_decode/ngram_proposer.py``);
* ``eagle`` / ``eagle3`` (``vllm/v1/spec_decode/eagle.py``, ``EagleProposer.load_model``):
  the draft head's layers, its ``fc`` (``2 x hidden -> hidden``; EAGLE-3 ``3 x hidden``, and
  a first layer whose attention takes ``2 x hidden``), sharing the target's embedding and
  (EAGLE) its LM head; EAGLE-3 keeps its own LM head over ``draft_vocab_size`` and the
  ``d2t`` map (``vllm/model_executor/models/llama_eagle3.py``);
* ``mtp``: the target's own ``num_nextn_predict_layers`` extra decoder layers, each with
  ``enorm``, ``hnorm``, ``eh_proj`` (``2 x hidden -> hidden``, whole on every rank) and the
  shared head's norm (``vllm/model_executor/models/deepseek_mtp.py``), sharing the
  target's embedding and LM head;
* ``draft_model``: the whole draft model, split over ``draft_tensor_parallel_size`` ranks.

The drafter's attention layers join the target's in the one KV-cache pool
(``vllm/v1/worker/gpu_model_runner.py``, ``get_kv_cache_spec`` walks every attention layer
of the forward context, the drafter's included): :func:`with_draft_layers`.

The profile run's sampler pass (``_dummy_sampler_run``) then draws one dummy draft token
per request: logits for ``2 x rows`` and the rejection sampler over them
(:func:`rejection_sampler_bytes`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from memacct.engines.deployment import Speculative
from memacct.engines.vllm.parallel import with_layers
from memacct.errors import InvalidInputError
from memacct.model.config import ModelConfig
from memacct.model.spec import KVCacheSpec
from memacct.model.weights.estimate import VOCAB_PADDING, dtype_bytes, formula_weights

__all__ = [
    "draft_layer_config",
    "draft_weight_bytes",
    "mtp_layers",
    "rejection_sampler_bytes",
    "with_draft_layers",
]


def _int(config: Mapping[str, Any], *keys: str) -> int:
    return ModelConfig(config, "config.json").first_int(keys, 0) or 0


def mtp_layers(config: Mapping[str, Any]) -> int:
    """The target's multi-token-prediction layers (``num_nextn_predict_layers``, Qwen3-Next's
    ``mtp_num_hidden_layers``)."""
    return _int(config, "num_nextn_predict_layers", "mtp_num_hidden_layers")


def _need_draft(spec: Speculative) -> Mapping[str, Any]:
    if spec.draft_config is None and not spec.model:
        # vLLM's SpeculativeConfig needs the draft model for these methods as well.
        raise InvalidInputError(
            f"--speculative-config method {spec.method} names no draft model: add \"model\": "
            "the draft's Hub id or path, to --speculative-config, from which memacct reads the "
            "draft model's config.json (e.g. '{\"method\": "
            f"\"{spec.method}\", \"model\": \"org/draft\", \"num_speculative_tokens\": "
            f"{spec.num_speculative_tokens}}}')"
        )
    if spec.draft_config is None:
        raise InvalidInputError(
            f"--speculative-config method {spec.method}: memacct needs the draft model's "
            f"config.json ({spec.model or 'the model the config names'}) to size its weights "
            "and KV layers: pass it as draft_config (the CLI reads it from the draft's name)"
        )
    return spec.draft_config


def draft_layer_config(config: Mapping[str, Any], spec: Speculative) -> Mapping[str, Any] | None:
    """A config whose layers are exactly the drafter's attention layers (``None``: none)."""
    if not spec.on_device:
        return None
    if spec.method == "mtp":
        n = mtp_layers(config)
        if not n:
            raise InvalidInputError(
                "--speculative-config method mtp: the model's config.json has no "
                "num_nextn_predict_layers, so it has no MTP layers to run: use eagle, a "
                "draft model or ngram"
            )
        return with_layers(config, n)
    draft = _need_draft(spec)
    names = [str(a) for a in draft.get("architectures") or ()]
    if any("eagle" in a.lower() for a in names):
        # vLLM's EAGLE heads build the base family's decoder layers (llama_eagle.py,
        # llama_eagle3.py, qwen..._eagle): their cache is that family's.
        base = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                "qwen3": "Qwen3ForCausalLM", "mistral": "MistralForCausalLM"}  # fmt: skip
        draft = {**draft, "architectures": [base.get(str(draft.get("model_type")),
                                                     "LlamaForCausalLM")]}  # fmt: skip
    return draft


def draft_weight_bytes(
    config: Mapping[str, Any], spec: Speculative, *, tensor_parallel_size: int,
    mxfp4_pad: tuple[int, int] = (256, 1),
) -> int:  # fmt: skip
    """The drafter's weights on one rank (see the module notes)."""
    if not spec.on_device:
        return 0
    tp = tensor_parallel_size
    h = _int(config, "hidden_size", "d_model")
    dt = dtype_bytes(config)
    if spec.method == "mtp":
        n = mtp_layers(config)
        layers = _int(config, "num_hidden_layers")
        more = with_layers(config, layers + n)
        pad = mxfp4_pad
        extra = (formula_weights(more, tensor_parallel_size=tp, mxfp4_pad=pad).total_bytes
                 - formula_weights(config, tensor_parallel_size=tp, mxfp4_pad=pad).total_bytes)
        # enorm + hnorm + the shared head's norm, and eh_proj (an nn.Linear: whole on each rank).
        return extra + n * (3 * h + 2 * h * h) * dt
    draft = _need_draft(spec)
    if spec.method == "draft_model":
        dtp = spec.draft_tensor_parallel_size or tp
        return formula_weights(draft, tensor_parallel_size=dtp, mxfp4_pad=mxfp4_pad).total_bytes
    w = formula_weights(draft, tensor_parallel_size=tp, mxfp4_pad=mxfp4_pad)
    dh = _int(draft, "hidden_size") or h
    ddt = dtype_bytes(draft)
    own = w.total_bytes - w.by_role.get("embedding", 0) - w.by_role.get("lm_head", 0)
    if spec.method == "eagle":
        return own + 2 * dh * dh * ddt  # fc: [embedding; hidden] -> hidden
    # EAGLE-3: fc over three of the target's hidden states, the first layer's q/k/v over
    # [embedding; hidden] (one more hidden of input), its own LM head over draft_vocab_size.
    heads = _int(draft, "num_attention_heads")
    kv = _int(draft, "num_key_value_heads") or heads
    hd = _int(draft, "head_dim") or (dh // heads if heads else 0)
    qkv_out = (-(-heads // tp) + 2 * max(1, kv // tp)) * hd
    vocab = _int(draft, "draft_vocab_size") or _int(draft, "vocab_size")
    padded = -(-vocab // VOCAB_PADDING) * VOCAB_PADDING
    head = -(-padded // tp) * dh * ddt
    target_h = _int(draft, "target_hidden_size") or h
    return own + qkv_out * dh * ddt + 3 * target_h * dh * ddt + dh * ddt + head + 8 * vocab


def with_draft_layers(target: KVCacheSpec, draft: KVCacheSpec) -> KVCacheSpec:
    """The target's KV spec with the drafter's attention layers added to its one pool."""
    if target.pipeline_parallel_size > 1:
        raise InvalidInputError(
            "speculative decoding with --pipeline-parallel-size > 1: vLLM 0.33's drafters run "
            "on one pipeline stage and memacct does not plan that split: use PP 1"
        )
    n = draft.total_num_layers
    offset = target.total_num_layers
    layers = (*target.layers, *(replace(x, layer=x.layer + offset) for x in draft.layers))
    fields = {name: getattr(target, name) for name in type(target).model_fields}
    fields.update(
        layers=layers,
        total_num_layers=offset + n,
        num_layers=target.num_layers + n,
        pipeline_layers=(target.num_layers + n,),
        bytes_per_token=target.bytes_per_token + draft.bytes_per_token,
        notes=(*target.notes, f"{n} drafter layer(s) share the KV-cache pool"),
    )
    return KVCacheSpec.model_validate(fields)


def rejection_sampler_bytes(rows: int, vocab: int, logits_dtype_bytes: int) -> int:
    """What the profile run's rejection-sampler pass holds beyond the plain sampler's peak.

    ``_dummy_sampler_run`` (``vllm/v1/worker/gpu_model_runner.py``) with a drafter: one dummy
    draft token per request, fresh logits for ``rows`` draft plus ``rows`` bonus positions
    (``2 x rows x vocab`` in the model dtype) and the target positions' float32 softmax inside
    ``RejectionSampler.forward``; the bonus rows go through the same sampler.
    """
    return rows * vocab * (2 * logits_dtype_bytes + 4)
