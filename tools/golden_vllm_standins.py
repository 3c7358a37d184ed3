"""Stand-ins that let vLLM's own model code run on a machine without a GPU (for
``tools/golden_vllm.py``; run by hand, never in ``make test``).

vLLM's pure-Python files are imported from the wheel; its compiled extensions are absent.
These answer what the model constructors and the config code ask of the device (as one
H100, SM90), of the kernels (capability questions answer False; a kernel handle refuses
to run) and of the process groups (rank 0 of the tensor-parallel size, one rank of every
other group). Nothing here decides a KV-cache spec: the specs are the model modules' own.
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterator
from typing import Any

GiB = 1 << 30


def _unavailable(name: str) -> Any:
    def unavailable(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{name} is a stub: no GPU kernels here")

    return unavailable

class _OpHandle:
    """An op handle (``torch.ops._C.name``, and its ``.default`` overload) that refuses
    to run."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _OpHandle(f"{self.name}.{attr}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{self.name} is a stub: no GPU kernels here")


def stub_extension(name: str) -> None:
    """A compiled vLLM extension absent from the pure-Python files: any name it is asked for
    is a function that refuses to run (the planning never calls a kernel)."""

    def attribute(attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _unavailable(f"{name}.{attr}")

    module = types.ModuleType(name)
    module.__getattr__ = attribute  # type: ignore[method-assign]
    sys.modules.setdefault(name, module)


def stub_ops() -> None:
    """vLLM's kernel capability questions (``vllm._custom_ops.*support*``, some asked at
    import time, e.g. ``cutlass_scaled_mm_supports_block_fp8``) answer False: the CUDA
    kernels are absent here, and none of them decides a KV-cache spec."""
    import torch
    import vllm._custom_ops as ops

    for name in dir(ops):
        if "support" in name and callable(getattr(ops, name)):
            setattr(ops, name, lambda *args, **kwargs: False)

    class Ops:
        """Layers take op handles at construction (``torch.ops._C.silu_and_mul``): any
        op not registered here is a handle that refuses to run."""

        def __init__(self, real: Any) -> None:
            self._real = real

        def __getattr__(self, name: str) -> Any:
            try:
                return getattr(self._real, name)
            except AttributeError:
                if name.startswith("__"):
                    raise
                return _OpHandle(f"torch.ops._C.{name}")

    torch.ops._C = Ops(torch.ops._C)  # after _custom_ops' own hasattr checks


def emulate_h100() -> None:
    """Make vLLM's ``current_platform`` the CUDA platform of one H100 (SM90), no GPU needed.

    ``CudaPlatformBase`` (``vllm/platforms/cuda.py``) with the device questions NVML
    would answer (capability, name, memory, NVLink) answered as an H100 SXM's.
    """
    from vllm import platforms
    from vllm.platforms.cuda import CudaPlatformBase
    from vllm.platforms.interface import DeviceCapability

    class EmulatedH100(CudaPlatformBase):
        @classmethod
        def get_device_capability(cls, device_id: int = 0) -> DeviceCapability:
            return DeviceCapability(major=9, minor=0)

        @classmethod
        def get_device_name(cls, device_id: int = 0) -> str:
            return "NVIDIA H100 80GB HBM3"

        @classmethod
        def get_device_total_memory(cls, device_id: int = 0) -> int:
            return 80 * GiB

        @classmethod
        def is_fully_connected(cls, device_ids: list[int]) -> bool:
            return True

        @classmethod
        def device_count(cls) -> int:
            return 8

        @classmethod
        def num_compute_units(cls, device_id: int = 0) -> int:
            return 132

        @classmethod
        def current_device(cls) -> Any:
            import torch

            return torch.device("meta")  # modules built with an explicit device

    platforms._current_platform = EmulatedH100()
    # What model constructors ask torch.cuda directly (streams for overlapped MoE,
    # device properties): stand-ins, nothing runs on them.
    import torch

    properties = types.SimpleNamespace(name="NVIDIA H100 80GB HBM3", major=9, minor=0,
                                       multi_processor_count=132, total_memory=80 * GiB)

    class Handle:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

    torch.cuda.Stream = Handle  # type: ignore[misc,assignment]
    torch.cuda.Event = Handle  # type: ignore[misc,assignment]
    torch.cuda.get_device_properties = lambda *args, **kwargs: properties  # type: ignore[assignment]
    torch.cuda.get_device_capability = lambda *args, **kwargs: (9, 0)  # type: ignore[assignment]


class _ProcessGroup:
    """What model code asks a torch process group: its size and this rank."""

    def __init__(self, world_size: int) -> None:
        self._size = world_size

    def size(self) -> int:
        return self._size

    def rank(self) -> int:
        return 0


class _Group:
    """A one-process stand-in for vLLM's ``GroupCoordinator``: rank 0 of ``world_size``."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self.rank_in_group = self.rank = self.local_rank = 0
        self.ranks = list(range(world_size))
        self.is_first_rank = True
        self.is_last_rank = world_size == 1
        self.device_group = self.cpu_group = _ProcessGroup(world_size)
        self.device_communicator = None
        self.unique_name = "golden"


def patch_parallel_groups(tp: int) -> None:
    """Make vLLM's model code see ``tp`` tensor-parallel ranks (rank 0), one pipeline stage
    and one rank of every other group, without starting a process group: the groups of
    ``vllm/distributed/parallel_state.py`` are set to :class:`_Group` stand-ins
    (``get_tensor_model_parallel_world_size`` reads ``_TP.world_size``)."""
    import vllm.distributed.parallel_state as state

    for name in ("_WORLD", "_PP", "_DP", "_EP", "_EPLB", "_PCP", "_DCP", "_ETP"):
        setattr(state, name, _Group(1))
    state._TP = _Group(tp)  # type: ignore[assignment]


@contextlib.contextmanager
def meta_values() -> Iterator[None]:
    """A module built on the meta device that reads a value of its own parameters
    (``XIELU`` reads its beta with ``.cpu().item()``) gets zeros of the right shape:
    no weight value decides a KV-cache spec."""
    import torch

    cpu, item, tolist = torch.Tensor.cpu, torch.Tensor.item, torch.Tensor.tolist

    def as_cpu(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self.is_meta:
            return torch.zeros(self.shape, dtype=self.dtype, device="cpu")
        return cpu(self, *args, **kwargs)

    def as_item(self: Any) -> Any:
        return 0 if self.is_meta else item(self)

    def as_list(self: Any) -> Any:
        return as_cpu(self).tolist() if self.is_meta else tolist(self)

    torch.Tensor.cpu, torch.Tensor.item, torch.Tensor.tolist = (  # type: ignore[method-assign]
        as_cpu, as_item, as_list)
    try:
        with _DeviceToMeta():
            yield
    finally:
        torch.Tensor.cpu, torch.Tensor.item, torch.Tensor.tolist = (  # type: ignore[method-assign]
            cpu, item, tolist)


def _on_device(value: Any) -> bool:
    return str(value).startswith("cuda")


try:
    from torch.overrides import TorchFunctionMode
except ImportError:  # torch is in the golden venv only
    TorchFunctionMode = object  # type: ignore[assignment,misc]


class _DeviceToMeta(TorchFunctionMode):  # type: ignore[misc,valid-type]
    """A tensor a model makes explicitly on the (emulated) CUDA device while it is built
    (DeepSeek-V3.2's shared top-k buffer, ``device=current_platform.device_type``) goes to
    the meta device with the rest: its values never decide a KV-cache spec."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        if _on_device(kwargs.get("device")):
            kwargs["device"] = "meta"
        args = tuple("meta" if isinstance(a, str) and _on_device(a) else a for a in args)
        return func(*args, **kwargs)


class _StandInType(type):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _StandIn


class _StandIn(metaclass=_StandInType):
    """Any name a stubbed vision package is asked for: a class one may subclass, call or
    read attributes of (text-only models import these at module level, never run them)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __class_getitem__(cls, item: Any) -> Any:
        return cls

    def __getattr__(self, name: str) -> Any:
        return _StandIn


def stub_vision_packages(*names: str) -> None:
    """Packages this env lacks (torchvision) that multimodal model files import at module
    level, also for their text-only classes (qwen3_5.py imports qwen3_vl.py): every module
    under them is an empty module whose names are :class:`_StandIn`."""
    import importlib.abc
    import importlib.machinery

    class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
            if fullname.split(".", maxsplit=1)[0] not in names:
                return None
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

        def create_module(self, spec: Any) -> Any:
            module = types.ModuleType(spec.name)

            def attribute(attr: str) -> Any:
                if attr.startswith("__"):
                    raise AttributeError(attr)
                return _StandIn

            module.__getattr__ = attribute  # type: ignore[method-assign]
            module.__path__ = []
            module.__version__ = "0.0"  # type: ignore[attr-defined]
            return module

        def exec_module(self, module: Any) -> None:
            pass

    sys.meta_path.insert(0, Finder())


def stub_kernel_checks() -> None:
    """Kernel libraries an H100 would have (DeepGEMM for DeepSeek-V3.2's sparse indexer):
    the checks made while a model is built say they are there (no kernel ever runs)."""
    from vllm.model_executor.layers import sparse_attn_indexer

    sparse_attn_indexer.has_deep_gemm = lambda: True  # type: ignore[attr-defined]
    # The GPU model runner sets up its workspace before building the model; here on meta.
    import torch
    from vllm.v1.worker import workspace

    workspace.init_workspace_manager(torch.device("meta"))
    torch.accelerator.empty_cache = lambda: None  # no accelerator: nothing cached


def register_generic_configs(model_types: list[str]) -> None:
    """Model types whose config class is the checkpoint's remote code: read as a plain
    ``PretrainedConfig`` carrying the config.json keys as attributes (what vLLM's model
    file reads), so vLLM's own model code can be built for them without remote code."""
    from transformers import AutoConfig, PretrainedConfig

    for model_type in model_types:
        cls = type(f"Generic_{model_type}_Config", (PretrainedConfig,),
                   {"model_type": model_type})
        with contextlib.suppress(ValueError):  # transformers already has one
            AutoConfig.register(model_type, cls)
