"""A simulated serving scenario: its JSON file (contract), validated, and its serving steps.

A scenario (contract: a JSON file, loaded by :meth:`Scenario.load`) names a
device, an allocator, a model, the engine's budgets and a list of serving
steps::

    {"name": "qwen7b-mindspore-mixed", "device": "ascend-910b-64gb", "allocator": "mindspore",
     "model": "qwen2.5-7b", "max_num_batched_tokens": 8192, "max_num_seqs": 256,
     "block_size": 16, "gpu_memory_utilization": 1.0, "other_process_bytes": 0,
     "context_bytes": 536870912,
     "serving": [{"num_tokens": 8192, "num_seqs": 1}, {"num_tokens": 256, "num_seqs": 256}],
     "seed": 0}

``device`` is a preset name or ``{"total_bytes": N}``; ``model`` a model
preset name or a ``config.json`` object. A serving step may also give
``"repeat": n``, and ``num_tokens``/``num_seqs`` as ``[low, high]`` ranges that
are drawn per step from ``seed`` (mixed lengths).

:mod:`memacct_bench.scenario` runs a scenario and finds its oracle.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from memacct.checks import FROZEN
from memacct.errors import ConfigError
from memacct.io import read_json_object
from memacct.model.sources.presets import load_model_preset, model_presets
from memacct.models import validation_problems
from memacct.sim import ALLOCATOR_PRESETS, DEVICE_PRESETS
from memacct_bench.start import DEFAULT_CONTEXT_BYTES

__all__ = ["Scenario", "ServingStep"]

_FROZEN = FROZEN
_Range = int | tuple[int, int]


class ServingStep(BaseModel):
    """One engine step of the serving trace (or ``repeat`` of them).

    Attributes:
        num_tokens: tokens in the step, or ``[low, high]`` drawn per step from the seed.
        num_seqs: sequences in the step (each samples one token), or a range.
        repeat: how many such steps follow each other.
    """

    model_config = _FROZEN

    num_tokens: _Range
    num_seqs: _Range
    repeat: int = Field(default=1, ge=1, le=100_000)

    @field_validator("num_tokens", "num_seqs")
    @classmethod
    def _positive(cls, value: _Range) -> _Range:
        low, high = (value, value) if isinstance(value, int) else value
        if low < 1 or high < low:
            raise ValueError(
                f"must be a positive int or a range [low, high] with 1 <= low <= high, "
                f"got {value!r}"
            )
        return value


class Scenario(BaseModel):
    """A simulated serving scenario (contract; see the module docstring for the JSON).

    Attributes:
        name: the scenario's name in tables.
        device: a device preset name or ``{"total_bytes": N}``.
        allocator: an allocator preset name.
        model: a model preset name or a ``config.json`` object.
        max_num_batched_tokens: the engine's token budget per step (the profile's size).
        max_num_seqs: the engine's sequence budget per step (the profile's sampler rows).
        block_size: tokens per KV-cache block.
        gpu_memory_utilization: the share of the device's total memory the
            engine may hold; 1.0 is the physical limit.
        other_process_bytes: memory a co-tenant holds before the engine starts.
        context_bytes: the engine's memory outside the allocator.
        serving: the serving steps, replayed in order after the KV cache exists.
        seed: draws the per-step values of ranges in ``serving``.
        tensor_parallel_size: this rank's share of each layer.
        kv_cache_dtype: as for :meth:`memacct.KVCacheSpec.from_hf_config`.
        max_model_len: the longest request; ``None`` takes the config's, capped at 32768.
        serving_role: ``mixed``, ``prefill`` or ``decode``: the instance the engine is
            deployed as (:data:`memacct.replay.SERVING_ROLES`), which its profile
            records. ``None``: ``decode`` when every serving step has as many tokens as
            sequences (the steps of a disaggregated decode instance), else ``mixed``.
        description: free text for people.
    """

    model_config = _FROZEN

    name: str = Field(min_length=1)
    device: str | dict[str, int]
    allocator: str
    model: str | dict[str, Any]
    max_num_batched_tokens: int = Field(default=8192, ge=1)
    max_num_seqs: int = Field(default=256, ge=1)
    block_size: int = Field(default=16, ge=1)
    gpu_memory_utilization: float = Field(default=1.0, gt=0.0, le=1.0)
    other_process_bytes: int = Field(default=0, ge=0)
    context_bytes: int = Field(default=DEFAULT_CONTEXT_BYTES, ge=0)
    serving: tuple[ServingStep, ...] = Field(min_length=1)
    seed: int = 0
    tensor_parallel_size: int = Field(default=1, ge=1)
    kv_cache_dtype: str = "auto"
    max_model_len: int | None = Field(default=None, ge=1)
    serving_role: Literal["mixed", "prefill", "decode"] | None = None
    description: str = ""

    @field_validator("device")
    @classmethod
    def _device(cls, value: str | dict[str, int]) -> str | dict[str, int]:
        if isinstance(value, str):
            if value not in DEVICE_PRESETS:
                choices = ", ".join(sorted(DEVICE_PRESETS))
                raise ValueError(
                    f"unknown device preset {value!r}; use one of {choices} "
                    'or {"total_bytes": N}'
                )
        elif set(value) != {"total_bytes"} or value["total_bytes"] <= 0:
            raise ValueError(f'a custom device is {{"total_bytes": N}} with N > 0, got {value!r}')
        return value

    @field_validator("allocator")
    @classmethod
    def _allocator(cls, value: str) -> str:
        if value not in ALLOCATOR_PRESETS:
            choices = ", ".join(sorted(ALLOCATOR_PRESETS))
            raise ValueError(f"unknown allocator preset {value!r}; use one of {choices}")
        return value

    @field_validator("model")
    @classmethod
    def _model(cls, value: str | dict[str, Any]) -> str | dict[str, Any]:
        if isinstance(value, str) and value.strip().lower() not in model_presets():
            raise ValueError(
                f"unknown model preset {value!r}; use one of {', '.join(model_presets())} "
                "or give the config.json object"
            )
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        total = self.total_bytes
        if (
            self.other_process_bytes
            and self.gpu_memory_utilization > 1 - self.other_process_bytes / total
        ):
            most = 1 - self.other_process_bytes / total
            raise ValueError(
                f"gpu_memory_utilization {self.gpu_memory_utilization} with other_process_bytes "
                f"{self.other_process_bytes} asks for more than the device has free: use at most "
                f"{most:.4f} (= 1 - other/total)"
            )
        for i, step in enumerate(self.serving):
            tokens_high = (
                step.num_tokens if isinstance(step.num_tokens, int) else step.num_tokens[1]
            )
            seqs_high = step.num_seqs if isinstance(step.num_seqs, int) else step.num_seqs[1]
            seqs_low = step.num_seqs if isinstance(step.num_seqs, int) else step.num_seqs[0]
            tokens_low = step.num_tokens if isinstance(step.num_tokens, int) else step.num_tokens[0]
            if tokens_high > self.max_num_batched_tokens or seqs_high > self.max_num_seqs:
                raise ValueError(
                    f"serving[{i}] ({step.num_tokens} tokens, {step.num_seqs} sequences) exceeds "
                    f"max_num_batched_tokens {self.max_num_batched_tokens} or max_num_seqs "
                    f"{self.max_num_seqs}: an engine never schedules such a step"
                )
            if seqs_low > tokens_low:
                raise ValueError(
                    f"serving[{i}] can have more sequences ({step.num_seqs}) than tokens "
                    f"({step.num_tokens}): every sequence contributes at least one token"
                )
        prefill = next(((t, n) for t, n in self.steps() if t != n), None)
        if self.serving_role == "decode" and prefill is not None:
            t, n = prefill
            raise ValueError(
                f"serving_role 'decode' but a serving step has {t} tokens for {n} sequences: "
                "a decode instance runs one token per sequence; use serving_role 'mixed'"
            )
        return self

    @property
    def role(self) -> str:
        """The serving role the engine is deployed as (declared, else from the steps)."""
        if self.serving_role is not None:
            return self.serving_role
        return "decode" if all(t == n for t, n in self.steps()) else "mixed"

    # ------------------------------------------------------------ loading

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "scenario") -> Scenario:
        """Validate a scenario dict.

        Raises:
            ConfigError: a field is missing, mistyped or out of range; the
                message names the field.
        """
        if not isinstance(data, Mapping):
            raise ConfigError(f"{source} must be a JSON object, got {type(data).__name__}")
        try:
            return cls.model_validate(dict(data))
        except ValidationError as exc:
            raise ConfigError(f"invalid {source}: {validation_problems(exc)}") from None

    @classmethod
    def load(cls, path: str | Path) -> Scenario:
        """Read a scenario JSON file.

        Raises:
            ConfigError: missing, unreadable, not JSON, or invalid (naming the field).
        """
        data = read_json_object(path, "scenario")
        return cls.from_dict(data, source=f"scenario {str(path)!r}")

    # ------------------------------------------------------------ derived

    @property
    def total_bytes(self) -> int:
        """The device's capacity in bytes."""
        if isinstance(self.device, str):
            return DEVICE_PRESETS[self.device]
        return self.device["total_bytes"]

    @property
    def budget_bytes(self) -> int:
        """The memory the engine may hold: ``total x gpu_memory_utilization`` (vLLM's target),
        never more than the co-tenants leave."""
        return min(int(self.total_bytes * self.gpu_memory_utilization),
                   self.total_bytes - self.other_process_bytes)

    @property
    def outside_budget_bytes(self) -> int:
        """Free device memory the engine may not use at this utilization (0 at 1.0)."""
        return max(0, self.total_bytes - self.other_process_bytes - self.budget_bytes)

    @property
    def device_name(self) -> str:
        """The device's name for tables."""
        return self.device if isinstance(self.device, str) else f"sim-{self.total_bytes}"

    @property
    def model_name(self) -> str:
        """The model's name for tables."""
        if isinstance(self.model, str):
            return self.model.strip().lower()
        name = self.model.get("_name_or_path") or self.model.get("model_type") or "model"
        return str(name)

    def model_config_dict(self) -> dict[str, Any]:
        """The model's ``config.json`` as a fresh dict."""
        if isinstance(self.model, str):
            return load_model_preset(self.model)
        copy: dict[str, Any] = json.loads(json.dumps(self.model))  # a deep copy
        return copy

    def steps(self) -> list[tuple[int, int]]:
        """The serving steps as ``(num_tokens, num_seqs)``, ranges drawn from :attr:`seed`."""
        rng = random.Random(self.seed)
        out: list[tuple[int, int]] = []
        for step in self.serving:
            for _ in range(step.repeat):
                tokens = _draw(rng, step.num_tokens)
                seqs = min(_draw(rng, step.num_seqs), tokens)
                out.append((tokens, seqs))
        return out


def _draw(rng: random.Random, value: _Range) -> int:
    return value if isinstance(value, int) else rng.randint(value[0], value[1])
