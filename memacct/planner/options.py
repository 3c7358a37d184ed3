"""The options of a plan, shared by the Python API and the command line.

:class:`PlanOptions` is the one place an option of ``memacct plan`` is
declared: :func:`memacct.planner.offline.plan_offline` takes it (or its fields
as keywords), and the CLI builds it from its flags, which carry the same names
(``--max-num-seqs`` is ``max_num_seqs``). A new option is one field here and
one click option in :mod:`memacct.cli.plan`. The checks that need nothing but
the options themselves (the engine, its release, the block size) run here;
those that need the model or the device run in the planner.

Example::

    >>> PlanOptions(engine="sglang", engine_version="0.4.0")
    Traceback (most recent call last):
    ...
    memacct.errors.InvalidInputError: sglang 0.4.0 is not a release memacct models: ...
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from memacct.checks import (
    check_batch_budget,
    check_fraction,
    check_int,
    check_optional_int,
    check_type,
)
from memacct.errors import InvalidInputError
from memacct.models import MAX_BYTES

if TYPE_CHECKING:
    from memacct.engines.deployment import Deployment
    from memacct.model.sources.checkpoint import TensorTable

__all__ = ["PlanOptions", "capacity_lists", "serve_keywords"]


@dataclass(frozen=True)
class PlanOptions:
    """How to plan: the engine, its settings (named as ``vllm serve`` names them) and the device.

    ``None`` is the engine's own default. Every field applies to the offline plan;
    :meth:`profile_refusal` says which do not apply to a saved profile.

    Attributes:
        model_name: the model's name, for people.
        engine: an engine of :data:`memacct.engines.ENGINE_MODULES`.
        engine_version: the release to follow; ``None``: the newest memacct models.
        device: a device preset or alias (:func:`memacct.devices.resolve_device`).
        device_memory: the total memory of any other device, bytes.
        gpu_memory_utilization: the engine's fraction of the device (SGLang:
            ``mem_fraction_static``).
        kv_cache_memory_bytes: the KV-cache budget itself, replacing the utilization.
        tensor_parallel_size: ranks a layer is split across.
        pipeline_parallel_size: pipeline stages.
        max_model_len: the longest request; ``-1``: the longest the cache holds (vLLM's auto-fit).
        allow_long_max_model_len: accept a length beyond the model's positions.
        max_num_batched_tokens: tokens one step may process.
        max_num_seqs: sequences one step may hold.
        enforce_eager: no CUDA graphs.
        kv_cache_dtype: the KV cache's dtype (``auto``: the model's).
        block_size: tokens per KV-cache block.
        sampler: vLLM's top-k/top-p path in the profile run (``None``: the release's).
        flashinfer_sampler_env: ``VLLM_USE_FLASHINFER_SAMPLER`` as the engine sees it.
        swa_full_tokens_ratio: SGLang's ``--swa-full-tokens-ratio`` (sliding-window
            tokens per full-attention token of its split pool; ``None``: 0.8).
        max_running_requests: SGLang's ``--max-running-requests`` (``None``: its cap for
            the pool).
        checkpoint: a checkpoint directory whose safetensors headers give the weights, or
            a tensor table already read (a Hub id's headers, a GGUF file's tensors).
    """

    model_name: str = "model"
    engine: str = "vllm"
    engine_version: str | None = None
    device: str | None = None
    device_memory: int | None = None
    gpu_memory_utilization: float | None = None
    kv_cache_memory_bytes: int | None = None
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    max_model_len: int | None = None
    allow_long_max_model_len: bool = False
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    enforce_eager: bool = False
    kv_cache_dtype: str = "auto"
    block_size: int | None = None
    sampler: str | None = None
    flashinfer_sampler_env: bool | None = None
    swa_full_tokens_ratio: float | None = None
    max_running_requests: int | None = None
    checkpoint: str | os.PathLike[str] | TensorTable | None = None
    deployment: Deployment | None = None
    """The other ``vllm serve`` settings that move memory (quantization, LoRA, speculative
    decoding, expert/data parallelism, CPU offload, multimodal limits; vLLM only)."""

    def __post_init__(self) -> None:
        from memacct.engines import ENGINE_MODULES
        from memacct.engines.accepts import (
            check_block_size,
            check_kv_cache_dtype_name,
            check_release,
        )

        self._check_types()
        if self.engine not in ENGINE_MODULES:
            raise InvalidInputError(
                f"engine {self.engine!r} is not known: use one of {', '.join(ENGINE_MODULES)}"
            )
        check_int("tensor_parallel_size", self.tensor_parallel_size)
        check_int("pipeline_parallel_size", self.pipeline_parallel_size)
        check_optional_int("max_num_batched_tokens", self.max_num_batched_tokens)
        check_optional_int("max_num_seqs", self.max_num_seqs)
        check_optional_int("max_running_requests", self.max_running_requests)
        # No device holds 2**60 bytes (MAX_BYTES, the profile's bound too): a budget past it
        # is a typo, and would plan a cache no engine could allocate.
        check_optional_int("kv_cache_memory_bytes", self.kv_cache_memory_bytes, high=MAX_BYTES)
        if self.max_model_len != -1:
            check_optional_int("max_model_len", self.max_model_len)
        if self.block_size is not None:
            check_block_size(self.engine, check_int("block_size", self.block_size))
        check_kv_cache_dtype_name(self.engine, self.kv_cache_dtype)
        tokens, seqs = self.max_num_batched_tokens, self.max_num_seqs
        if tokens is not None and seqs is not None and self.engine != "sglang":
            check_batch_budget(tokens, seqs)
        if self.device is not None and self.device_memory is not None:
            raise InvalidInputError("give --device or --device-memory, not both")
        check_release(self.engine, self.engine_version)

    def _check_types(self) -> None:
        """Each field of the type it is declared with, named in the error, before any rule
        reads it (a wrong type would fail deep inside the plan otherwise)."""
        text = "a string"
        for name in ("model_name", "engine", "kv_cache_dtype"):
            check_type(name, getattr(self, name), str, text)
        for name in ("engine_version", "device", "sampler"):
            value = getattr(self, name)
            if value is not None:
                check_type(name, value, str, f"{text} or None")
                if not value.strip():
                    raise InvalidInputError(
                        f"{name} {value!r} names nothing: give a value, or leave it out for "
                        "the default"
                    )
        for name in ("allow_long_max_model_len", "enforce_eager"):
            check_type(name, getattr(self, name), bool, "True or False")
        check_optional_int("device_memory", self.device_memory, high=MAX_BYTES)
        if self.gpu_memory_utilization is not None:
            check_fraction("gpu_memory_utilization", self.gpu_memory_utilization)
        if self.swa_full_tokens_ratio is not None:
            check_type("swa_full_tokens_ratio", self.swa_full_tokens_ratio, (int, float),
                       "a number in (0, 1]")

    def engine_options(self) -> dict[str, float | int | str]:
        """The engine-specific options set (``plan_kv_cache``'s ``engine_options``)."""
        given: dict[str, float | int | str | None] = {
            "swa_full_tokens_ratio": self.swa_full_tokens_ratio,
            "max_running_requests": self.max_running_requests}
        spec = self.deployment.speculative if self.deployment is not None else None
        if self.engine == "sglang" and spec is not None:
            from memacct.engines.sglang.speculative import sglang_algorithm

            given["speculative_algorithm"] = sglang_algorithm(spec)
        return {key: value for key, value in given.items() if value is not None}

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The option names, as keywords (the CLI's flags with ``-`` for ``_``)."""
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_kwargs(cls, options: PlanOptions | None = None, **kwargs: Any) -> PlanOptions:
        """``options`` (or the defaults) with ``kwargs`` replaced; an unknown keyword is named.

        The ``vllm serve`` settings ``memacct plan`` takes as flags are keywords here too
        (``quantization="fp8"``, ``enable_lora=True``, ``max_lora_rank=64``): they make the
        ``deployment`` (:meth:`memacct.engines.deployment.Deployment.from_serve_args`); a
        draft model ``speculative_config`` names is read as the CLI reads it, unless
        ``draft_config`` is given.
        """
        kwargs = _with_deployment(options, kwargs)
        unknown = sorted(set(kwargs) - set(cls.names()))
        if unknown:
            raise InvalidInputError(
                f"unknown plan option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}: "
                f"the options are {', '.join(cls.names())}, and vLLM's serve settings "
                f"{', '.join(serve_keywords())}"
            )
        if options is not None and not isinstance(options, PlanOptions):
            raise InvalidInputError(
                f"options must be a PlanOptions, got {type(options).__name__}: pass "
                "PlanOptions(...) or the options as keywords (plan_offline(config, "
                "device='l4'))"
            )
        return replace(options, **kwargs) if options is not None else cls(**kwargs)

    def given(self) -> tuple[str, ...]:
        """The options that differ from their defaults."""
        return tuple(f.name for f in fields(self) if getattr(self, f.name) != f.default)

    def profile_refusal(self) -> str | None:
        """Why an option given does not apply to a saved profile (``None``: they all do)."""
        given = self.given()
        shaping = [name for name in ("engine_version", "sampler", "enforce_eager") if name in given]
        if shaping:
            flags = " and ".join("--" + name.replace("_", "-") for name in shaping)
            return (
                f"{flags} shape{'s' if len(shaping) == 1 else ''} the offline plan; a saved "
                "profile already measured the engine (drop --profile to plan offline)"
            )
        return None


def serve_keywords() -> tuple[str, ...]:
    """The ``vllm serve`` settings that are keywords of a plan without being fields of
    :class:`PlanOptions` (they make its ``deployment``)."""
    import inspect

    from memacct.engines.deployment import Deployment

    names = set(PlanOptions.names())
    return tuple(
        name for name, param in inspect.signature(Deployment.from_serve_args).parameters.items()
        if param.kind is param.KEYWORD_ONLY and name not in names
    )


def _with_deployment(options: PlanOptions | None, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with its ``vllm serve`` settings turned into a ``deployment``."""
    serve = {key: kwargs[key] for key in serve_keywords() if key in kwargs}
    if not serve:
        return kwargs
    from memacct.engines.deployment import Deployment

    if "deployment" in kwargs or (options is not None and options.deployment is not None):
        raise InvalidInputError(
            f"{', '.join(sorted(serve))} and a deployment were both given: pass the settings "
            "as keywords or in deployment=Deployment.from_serve_args(...), not both"
        )
    rest = {key: value for key, value in kwargs.items() if key not in serve}
    if serve.get("speculative_config") is not None and serve.get("draft_config") is None:
        serve["draft_config"] = _draft_config(serve["speculative_config"])
    pp = rest.get("pipeline_parallel_size", 1)
    rest["deployment"] = Deployment.from_serve_args(pipeline_parallel_size=pp, **serve)
    return rest


def _draft_config(speculative_config: Any) -> dict[str, Any] | None:
    """The config of the draft model ``speculative_config`` names, read as a model name is
    read everywhere (:func:`memacct.model.sources.resolve.resolve_model`), as the CLI reads
    it; ``None``: a method without a draft model, or none named."""
    from memacct.engines.deployment import Speculative
    from memacct.model.sources.resolve import resolve_model

    spec = Speculative.parse(speculative_config)
    if spec.method not in ("eagle", "eagle3", "draft_model") or not spec.model:
        return None
    return dict(resolve_model(spec.model, None).config)


def capacity_lists(devices: object, degrees: object) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """A capacity plan's devices and tensor-parallel degrees, as sequences or as the CLI's
    comma lists (``"h100,l4"``, ``"1,2"``); one device or degree alone is a list of one.

    Raises:
        InvalidInputError: an item of the wrong type, an empty one, or one listed twice.
    """
    names = _items("devices", devices, str)
    sizes = _items("tensor_parallel_sizes", degrees, int)
    return tuple(map(str, names)), tuple(size for size in sizes if isinstance(size, int))


def _items(name: str, value: object, kind: type) -> tuple[object, ...]:
    if isinstance(value, str):
        parts: list[object] = [part.strip() for part in value.split(",")]
        if kind is int:
            try:
                parts = [int(str(part)) for part in parts]
            except ValueError:
                raise InvalidInputError(
                    f"{name} {value!r} is not a degree nor a comma list of them: give e.g. "
                    "'1,2,4' or (1, 2, 4)"
                ) from None
    elif isinstance(value, kind) and not isinstance(value, bool):
        parts = [value]
    elif isinstance(value, (list, tuple)):
        parts = list(value)
    else:
        raise InvalidInputError(
            f"{name} {value!r} is not a list: give a sequence or a comma list "
            f"({'h100,l4' if kind is str else '1,2,4'})"
        )
    for part in parts:
        if isinstance(part, bool) or not isinstance(part, kind) or part == "":
            raise InvalidInputError(
                f"{name} {value!r} holds {part!r}: each item must be "
                f"{'a device name' if kind is str else 'an integer degree'}"
            )
    twice = sorted({str(part) for part in parts if parts.count(part) > 1})
    if twice:
        raise InvalidInputError(f"{name} {value!r} lists {', '.join(twice)} more than once")
    return tuple(parts)
