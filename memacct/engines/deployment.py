"""How a model is served: the ``vllm serve`` settings that change what a rank holds.

:class:`Deployment` is one frozen, validated value: online quantization and dtype,
LoRA (:class:`LoraSettings`), speculative decoding (:class:`Speculative`), expert,
data and pipeline parallelism, CPU offload of weights, and the multimodal limits
(:class:`Multimodal`). Each field is named as ``vllm serve`` names its flag (dashes
become underscores). vLLM's start-up estimate (:mod:`memacct.engines.vllm.startup`)
consumes it term by term; docs/engines.md gives each term's source in vLLM 0.33.

Example::

    >>> d = Deployment.from_serve_args(enable_lora=True, max_loras=4, max_lora_rank=64,
    ...                                speculative_config='{"method": "ngram",'
    ...                                ' "num_speculative_tokens": 4}')
    >>> (d.lora.max_loras, d.speculative.method)
    (4, 'ngram')

A bad value raises :class:`~memacct.errors.InvalidInputError` naming the value and the fix.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from memacct.checks import check_int
from memacct.errors import InvalidInputError

__all__ = [
    "LORA_DTYPES",
    "QUANTIZATIONS",
    "SERVE_DTYPES",
    "SPECULATIVE_METHODS",
    "Deployment",
    "LoraSettings",
    "Multimodal",
    "Speculative",
    "serve_deployment",
]

QUANTIZATIONS = ("fp8",)
"""``--quantization`` values memacct sizes as online quantization of an unquantized
checkpoint. A checkpoint that carries its own ``quantization_config`` is sized from it;
``--quantization`` may then name its method (``awq``, ``gptq_marlin``, ``modelopt``,
``compressed-tensors``, ...; vLLM refuses another)."""

SERVE_DTYPES = ("auto", "bfloat16", "float16", "half")
"""``--dtype`` values memacct plans (all 16-bit: the weights, KV cache and activations keep
two bytes per element). ``float32`` doubles all three and is refused, not guessed."""

LORA_DTYPES = ("auto", "bfloat16", "float16")
"""``--lora-dtype`` values (``auto``: the model's dtype, ``vllm/config/lora.py``)."""

SPECULATIVE_METHODS = ("ngram", "eagle", "eagle3", "mtp", "draft_model", "suffix")
"""``--speculative-config`` methods memacct plans. ``ngram`` and ``suffix`` propose
tokens on the CPU; the others run a drafter on the device."""

_SPEC_KEYS = frozenset((
    "method", "model", "num_speculative_tokens", "draft_tensor_parallel_size", "quantization",
    "max_model_len", "revision", "code_revision", "disable_by_batch_size",
    "disable_padded_drafter_batch", "prompt_lookup_max", "prompt_lookup_min",
    "speculative_token_tree", "parallel_drafting", "disable_logprobs", "disable_log_stats",
    "enforce_eager", "attention_backend", "acceptance_method", "posterior_threshold",
    "posterior_alpha", "suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests",
    "suffix_decoding_max_spec_factor", "suffix_decoding_min_token_prob", "hf_overrides",
    "moe_backend",
))  # fmt: skip
"""``--speculative-config`` keys vLLM takes (``vllm/config/speculative.py``); memacct reads
``method``, ``model``, ``num_speculative_tokens`` and ``draft_tensor_parallel_size``, the
others move no memory term it plans."""

_MAX_SPEC_TOKENS = 64
_MAX_LORAS = 1024
_MAX_RANK = 1024
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The ``--max-lora-rank`` values vLLM 0.33 accepts (``vllm/config/lora.py`` MaxLoRARanks)."""
_MODALITIES = ("image", "video", "audio")


def _bad(flag: str, value: object, fix: str) -> InvalidInputError:
    return InvalidInputError(f"{flag} {value!r} {fix}")


def _json_object(flag: str, value: str | Mapping[str, Any], example: str) -> dict[str, Any]:
    """A JSON-object flag as ``vllm serve`` takes it (a string, or the object itself)."""
    obj: object = value
    if isinstance(value, str):
        try:
            obj = json.loads(value)
        except json.JSONDecodeError as exc:
            raise _bad(flag, value, f"is not JSON ({exc.msg}): give e.g. '{example}'") from None
    if not isinstance(obj, Mapping):
        raise _bad(flag, value, "must be a JSON object")
    return dict(obj)


@dataclass(frozen=True)
class LoraSettings:
    """``--enable-lora`` and its sizes (``vllm/config/lora.py``, ``LoRAConfig``).

    Attributes:
        max_loras: adapters resident on the device at once (vLLM's default 1).
        max_lora_rank: the rank every adapter slot is sized for (default 16).
        max_cpu_loras: adapters cached in host memory (default ``max_loras``): no device cost.
        lora_dtype: ``auto`` (the model's dtype), ``bfloat16`` or ``float16``.
        fully_sharded_loras: ``--fully-sharded-loras``: the A stacks of column-parallel
            layers and the B stacks of row-parallel layers are split across TP ranks.
    """

    max_loras: int = 1
    max_lora_rank: int = 16
    max_cpu_loras: int | None = None
    lora_dtype: str = "auto"
    fully_sharded_loras: bool = False

    def __post_init__(self) -> None:
        check_int("--max-loras", self.max_loras, high=_MAX_LORAS)
        check_int("--max-lora-rank", self.max_lora_rank, high=_MAX_RANK)
        if self.max_lora_rank not in LORA_RANKS:
            raise _bad("--max-lora-rank", self.max_lora_rank,
                       f"is not a rank vLLM takes: one of {', '.join(map(str, LORA_RANKS))} "
                       "(vllm/config/lora.py MaxLoRARanks); give the next one up")  # fmt: skip
        if self.max_cpu_loras is not None:
            check_int("--max-cpu-loras", self.max_cpu_loras, high=100 * _MAX_LORAS)
            if self.max_cpu_loras < self.max_loras:
                raise _bad("--max-cpu-loras", self.max_cpu_loras,
                           f"is below --max-loras {self.max_loras}: vLLM requires "
                           "max_cpu_loras >= max_loras; raise it or leave it unset")  # fmt: skip
        if self.lora_dtype not in LORA_DTYPES:
            raise _bad("--lora-dtype", self.lora_dtype, f"is not one of {', '.join(LORA_DTYPES)}")

    def dtype_bytes(self, model_dtype_bytes: int) -> int:
        """Bytes per element of the adapter stacks."""
        return model_dtype_bytes if self.lora_dtype == "auto" else 2


@dataclass(frozen=True)
class Speculative:
    """``--speculative-config`` (``vllm/config/speculative.py``, ``SpeculativeConfig``).

    Attributes:
        method: one of :data:`SPECULATIVE_METHODS`.
        num_speculative_tokens: draft tokens proposed per step.
        model: the draft model's name, as given (for messages).
        draft_config: the draft model's ``config.json`` (EAGLE, EAGLE-3 and draft
            models need it; MTP reads the target's own config).
        draft_tensor_parallel_size: ``draft_tensor_parallel_size``; ``None``: the
            target's TP (EAGLE and draft models shard with the target).
    """

    method: str
    num_speculative_tokens: int
    model: str | None = None
    draft_config: Mapping[str, Any] | None = field(default=None, compare=False)
    draft_tensor_parallel_size: int | None = None

    def __post_init__(self) -> None:
        if self.method not in SPECULATIVE_METHODS:
            raise _bad("--speculative-config method", self.method,
                       f"is not one memacct plans: give {', '.join(SPECULATIVE_METHODS)}")
        check_int("--speculative-config num_speculative_tokens", self.num_speculative_tokens,
                  high=_MAX_SPEC_TOKENS)  # fmt: skip
        if self.draft_tensor_parallel_size is not None:
            check_int("--speculative-config draft_tensor_parallel_size",
                      self.draft_tensor_parallel_size, high=1024)  # fmt: skip

    @property
    def on_device(self) -> bool:
        """Whether a drafter runs on the device (not ``ngram`` or ``suffix``)."""
        return self.method not in ("ngram", "suffix")

    @classmethod
    def parse(
        cls, value: str | Mapping[str, Any], draft_config: Mapping[str, Any] | None = None
    ) -> Speculative:
        """Read ``--speculative-config`` as ``vllm serve`` takes it: a JSON object.

        ``method`` may be left out when ``model`` names a draft (vLLM then reads the
        draft's architecture; memacct calls it ``draft_model``, or ``eagle``/``eagle3``
        when the name says so, as vLLM's ``SpeculativeConfig.__post_init__`` does).
        """
        obj = _json_object("--speculative-config", value,
                           '{"method": "eagle", "model": "...", "num_speculative_tokens": 3}')
        unknown = sorted(set(obj) - _SPEC_KEYS)
        if unknown:
            raise _bad("--speculative-config", dict(obj),
                       f"has keys vLLM's SpeculativeConfig does not take ({', '.join(unknown)}): "
                       "drop them")  # fmt: skip
        model = obj.get("model")
        method = obj.get("method")
        if method is None:
            if model is None:
                raise _bad("--speculative-config", dict(obj), "names neither a method nor a model")
            low = str(model).lower()
            method = "eagle3" if "eagle3" in low else "eagle" if "eagle" in low else "draft_model"
        if method == "deepseek_mtp" or str(method).endswith("_mtp"):
            method = "mtp"  # vLLM folds the per-family MTP names into "mtp"
        tokens = obj.get("num_speculative_tokens")
        if tokens is None:
            raise _bad("--speculative-config", dict(obj),
                       "lacks num_speculative_tokens: add it (e.g. 3)")  # fmt: skip
        return cls(
            method=str(method),
            num_speculative_tokens=tokens,
            model=None if model is None else str(model),
            draft_config=draft_config,
            draft_tensor_parallel_size=obj.get("draft_tensor_parallel_size"),
        )


@dataclass(frozen=True)
class Multimodal:
    """The multimodal start-up settings (``vllm/config/multimodal.py``, ``MultiModalConfig``).

    Attributes:
        limit_mm_per_prompt: per modality, the most items a prompt may carry, in vLLM's
            count form (``{"image": 2}``) or size form (``{"image": {"count": 1,
            "width": 512, "height": 512}}``, ``{"video": {"count": 1, "num_frames": 16}}``).
            A modality left out takes vLLM's default of 999 items
            (``vllm/config/multimodal.py``, ``MultiModalConfig.get_limit_per_prompt``).
        mm_processor_kwargs: ``--mm-processor-kwargs`` (``max_pixels``, ``min_pixels``, ...).
        skip_mm_profiling: ``--skip-mm-profiling``: no encoder pass in the profile run.
    """

    # Compared but not hashed (mappings): a Deployment stays hashable, as PlanOptions is.
    limit_mm_per_prompt: Mapping[str, Any] = field(default_factory=dict, hash=False)
    mm_processor_kwargs: Mapping[str, Any] = field(default_factory=dict, hash=False)
    skip_mm_profiling: bool = False

    def __post_init__(self) -> None:
        for modality, limit in self.limit_mm_per_prompt.items():
            if modality not in _MODALITIES:
                raise _bad("--limit-mm-per-prompt", dict(self.limit_mm_per_prompt),
                           f"names {modality!r}: give {', '.join(_MODALITIES)}")
            if isinstance(limit, Mapping):
                for key, v in limit.items():
                    if key not in ("count", "width", "height", "num_frames", "length"):
                        raise _bad(f"--limit-mm-per-prompt {modality}", dict(limit),
                                   f"has key {key!r}: give count, width, height, num_frames "
                                   "or length")  # fmt: skip
                    check_int(f"--limit-mm-per-prompt {modality}.{key}", v, low=0)
            else:
                check_int(f"--limit-mm-per-prompt {modality}", limit, low=0)
        for key in ("max_pixels", "min_pixels"):
            if key in self.mm_processor_kwargs:
                check_int(f"--mm-processor-kwargs {key}", self.mm_processor_kwargs[key])

    def count(self, modality: str, default: int = 999) -> int:
        """The most items of ``modality`` one prompt may carry."""
        limit = self.limit_mm_per_prompt.get(modality, default)
        return int(limit.get("count", 1)) if isinstance(limit, Mapping) else int(limit)

    def size(self, modality: str) -> Mapping[str, int]:
        """The size form's fields for ``modality`` (empty in the count form)."""
        limit = self.limit_mm_per_prompt.get(modality)
        return {k: int(v) for k, v in limit.items() if k != "count"} if isinstance(
            limit, Mapping) else {}  # fmt: skip

    @staticmethod
    def parse_limits(value: str | Mapping[str, Any] | None) -> Mapping[str, Any]:
        """``--limit-mm-per-prompt`` as ``vllm serve`` takes it: JSON (``'{"image": 2}'``)."""
        if value is None:
            return {}
        return _json_object("--limit-mm-per-prompt", value, '{"image": 2, "video": 0}')


@dataclass(frozen=True)
class Deployment:
    """The ``vllm serve`` settings beyond batch and cache sizes that change a memory term.

    Attributes:
        quantization: ``--quantization``: :data:`QUANTIZATIONS` online, or the checkpoint's
            own method; ``None``: the checkpoint's.
        dtype: ``--dtype`` (:data:`SERVE_DTYPES`).
        lora: ``--enable-lora`` with its sizes, ``None``: LoRA off.
        speculative: ``--speculative-config``, ``None``: off.
        enable_expert_parallel: ``--enable-expert-parallel``: MoE experts split whole over
            TP x DP ranks instead of each expert split across TP ranks.
        data_parallel_size: ``--data-parallel-size``: engine replicas (each with its own
            attention and KV cache; the experts shared with EP).
        pipeline_parallel_size: ``--pipeline-parallel-size``.
        cpu_offload_gb: ``--cpu-offload-gb``: GiB of weights kept in host memory.
        multimodal: the multimodal settings.
    """

    quantization: str | None = None
    dtype: str = "auto"
    lora: LoraSettings | None = None
    speculative: Speculative | None = None
    enable_expert_parallel: bool = False
    data_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    cpu_offload_gb: float = 0.0
    multimodal: Multimodal = field(default_factory=Multimodal)

    def __post_init__(self) -> None:
        q = self.quantization
        if q is not None and (not isinstance(q, str) or not q or not all(
                c.isalnum() or c in "-_" for c in q)):  # fmt: skip
            raise _bad("--quantization", q, "is not a quantization method name: give fp8, or "
                       "the method of the checkpoint's quantization_config")  # fmt: skip
        if self.dtype not in SERVE_DTYPES:
            fix = ("doubles weights, KV cache and activations; memacct plans 16-bit serving: "
                   "give bfloat16 or float16") if self.dtype in ("float32", "float") else (
                f"is not a dtype vLLM serves: give one of {', '.join(SERVE_DTYPES)}")  # fmt: skip
            raise _bad("--dtype", self.dtype, fix)
        check_int("--data-parallel-size", self.data_parallel_size, high=1024)
        check_int("--pipeline-parallel-size", self.pipeline_parallel_size, high=1024)
        gb = self.cpu_offload_gb
        if isinstance(gb, bool) or not isinstance(gb, (int, float)) or not math.isfinite(gb) or (
                gb < 0):  # fmt: skip
            raise _bad("--cpu-offload-gb", gb, "must be a number of GiB, 0 or more")

    @property
    def cpu_offload_bytes(self) -> int:
        """``--cpu-offload-gb`` in bytes (vLLM: ``int(cpu_offload_gb * 1024**3)``)."""
        return int(self.cpu_offload_gb * 1024**3)

    @property
    def is_default(self) -> bool:
        """Whether every setting is vLLM's default (the start-up is the plain one)."""
        return self == Deployment()

    @classmethod
    def from_serve_args(
        cls,
        *,
        quantization: str | None = None,
        dtype: str = "auto",
        enable_lora: bool = False,
        max_loras: int | None = None,
        max_lora_rank: int | None = None,
        max_cpu_loras: int | None = None,
        lora_dtype: str = "auto",
        fully_sharded_loras: bool = False,
        speculative_config: str | Mapping[str, Any] | None = None,
        draft_config: Mapping[str, Any] | None = None,
        enable_expert_parallel: bool = False,
        data_parallel_size: int = 1,
        pipeline_parallel_size: int = 1,
        cpu_offload_gb: float = 0.0,
        limit_mm_per_prompt: str | Mapping[str, Any] | None = None,
        mm_processor_kwargs: str | Mapping[str, Any] | None = None,
        skip_mm_profiling: bool = False,
    ) -> Deployment:
        """A deployment from ``vllm serve``'s flags, by their names (JSON flags as strings).

        ``draft_config`` is the config.json of the model ``--speculative-config`` names.
        A LoRA size given without ``enable_lora`` is refused (vLLM ignores it silently).
        """
        lora = None
        if enable_lora:
            lora = LoraSettings(
                max_loras=1 if max_loras is None else max_loras,
                max_lora_rank=16 if max_lora_rank is None else max_lora_rank,
                max_cpu_loras=max_cpu_loras,
                lora_dtype=lora_dtype,
                fully_sharded_loras=fully_sharded_loras,
            )
        elif any(v is not None for v in (max_loras, max_lora_rank, max_cpu_loras)):
            raise InvalidInputError(
                "--max-loras, --max-lora-rank and --max-cpu-loras size LoRA adapters: add "
                "--enable-lora, or drop them"
            )
        spec = (
            None if speculative_config is None
            else Speculative.parse(speculative_config, draft_config)
        )  # fmt: skip
        kwargs = (
            {} if mm_processor_kwargs is None
            else _json_object("--mm-processor-kwargs", mm_processor_kwargs,
                              '{"max_pixels": 1003520}')
        )  # fmt: skip
        return cls(
            quantization=quantization,
            dtype=dtype,
            lora=lora,
            speculative=spec,
            enable_expert_parallel=enable_expert_parallel,
            data_parallel_size=data_parallel_size,
            pipeline_parallel_size=pipeline_parallel_size,
            cpu_offload_gb=cpu_offload_gb,
            multimodal=Multimodal(
                limit_mm_per_prompt=Multimodal.parse_limits(limit_mm_per_prompt),
                mm_processor_kwargs=kwargs,
                skip_mm_profiling=skip_mm_profiling,
            ),
        )


def serve_deployment(options: Any) -> Deployment | None:
    """The deployment a plan's options ask for (:class:`memacct.planner.options.PlanOptions`):
    its ``deployment`` with its ``pipeline_parallel_size``; ``None`` for vLLM's defaults.

    Raises:
        InvalidInputError: a setting given for an engine memacct models it for only on vLLM.
    """
    d = options.deployment or Deployment()
    if not isinstance(d, Deployment):
        raise InvalidInputError(
            f"deployment must be a memacct.engines.deployment.Deployment, got {type(d).__name__}"
        )
    pp = options.pipeline_parallel_size
    if pp != d.pipeline_parallel_size:
        if d.pipeline_parallel_size != 1 and pp != 1:
            raise InvalidInputError(
                f"pipeline_parallel_size {pp} and deployment.pipeline_parallel_size "
                f"{d.pipeline_parallel_size} disagree: give one"
            )
        d = replace(d, pipeline_parallel_size=max(pp, d.pipeline_parallel_size))
    if d.is_default:
        return None
    # SGLang plans --speculative-config too (memacct.engines.sglang.speculative).
    planned = ("speculative",) if options.engine == "sglang" else ()
    changed = ", ".join(f"--{f.name.replace('_', '-')}" for f in fields(d)
                        if getattr(d, f.name) != getattr(Deployment(), f.name)
                        and f.name not in planned)  # fmt: skip
    if options.engine != "vllm" and changed:
        raise InvalidInputError(
            f"{changed}: memacct plans these vLLM 0.33 start-up settings for --engine vllm; "
            f"{options.engine} is planned with its defaults only"
            f"{' and --speculative-config' if planned else ''} (drop them, or plan with "
            "--engine vllm)"
        )
    return d
