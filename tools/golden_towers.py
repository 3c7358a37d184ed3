#!/usr/bin/env python3
"""Golden tower weights: vLLM 0.33 builds each multimodal model and counts its tower's parameters.

Run by hand in the throwaway vLLM environment (never in ``make test``)::

    /tmp/vllmenv/bin/python tools/golden_towers.py --vllm-src /tmp/vllm033/src

For every config of :data:`MODELS` (the published ``config.json`` sections that shape the
tower, cited by Hub id; the language model cut to one layer, which the tower does not
read), vLLM's own model class is built on the meta device at TP 1 as
``tools/golden_vllm_specs.py`` builds it (``EngineArgs.create_engine_config``,
``initialize_model`` under the stand-ins of ``golden_vllm_standins.py``), and the elements
of every parameter outside the language model are summed: the tower and projector as vLLM
holds them (LLaVA's tower cut at ``vision_feature_layer``, no pooling heads).
``tests/test_multimodal_towers.py`` checks :func:`memacct.model.towers.tower_params` against
the table this writes (``tests/data/golden/vllm-0.33-towers.json``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "golden" / "vllm-0.33-towers.json"

from golden_towers_models import MODELS  # noqa: E402  (tools/ is on sys.path)


def register_internvl_config() -> None:
    """InternVL's config class is the checkpoint's remote code: a stand-in holding the
    vision section as a plain ``PretrainedConfig`` and the language model's through
    transformers' own class, the attributes vLLM's ``internvl.py`` reads."""
    from transformers import AutoConfig, PretrainedConfig

    class InternVLChatStandIn(PretrainedConfig):
        model_type = "internvl_chat"

        def __init__(self, vision_config: Any = None, llm_config: Any = None,
                     **kwargs: Any) -> None:
            super().__init__(**kwargs)
            vision = dict(vision_config or {})
            self.vision_config = PretrainedConfig(**vision)
            llm = dict(llm_config or {"model_type": "qwen2"})
            self.llm_config = AutoConfig.for_model(**llm)
            self.text_config = self.llm_config

    with contextlib.suppress(ValueError):
        AutoConfig.register("internvl_chat", InternVLChatStandIn)


def register_minicpmv_config() -> None:
    """MiniCPM-V's and MiniCPM-o's config classes are the checkpoint's remote code: stand-ins
    holding the text
    keys at the top level (a ``Qwen2Config``, as the remote class is), the SigLIP section as
    ``SiglipVisionConfig`` and MiniCPM-o's audio section as ``WhisperConfig``, the attributes
    vLLM's ``minicpmv.py`` and ``minicpmo.py`` read."""
    from transformers import AutoConfig, Qwen2Config, SiglipVisionConfig, WhisperConfig

    class MiniCPMVStandIn(Qwen2Config):
        model_type = "minicpmv"

        def __init__(self, vision_config: Any = None, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.vision_config = SiglipVisionConfig(**dict(vision_config or {}))

    class MiniCPMOStandIn(MiniCPMVStandIn):
        model_type = "minicpmo"

        def __init__(self, audio_config: Any = None, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.audio_config = WhisperConfig(**dict(audio_config or {}))

    with contextlib.suppress(ValueError):
        AutoConfig.register("minicpmv", MiniCPMVStandIn)
    with contextlib.suppress(ValueError):
        AutoConfig.register("minicpmo", MiniCPMOStandIn)


def register_opencua_config() -> None:
    """OpenCUA's config class is the checkpoint's remote code: a stand-in holding the vision
    section as transformers' ``Qwen2_5_VLVisionConfig`` and the text one as ``Qwen2Config``,
    the attributes vLLM's ``opencua.py`` reads."""
    from transformers import AutoConfig, PretrainedConfig, Qwen2Config
    from transformers.models.qwen2_5_vl.configuration_qwen2_5_vl import Qwen2_5_VLVisionConfig

    class OpenCUAStandIn(PretrainedConfig):
        model_type = "opencua"

        def __init__(self, vision_config: Any = None, text_config: Any = None,
                     **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.vision_config = Qwen2_5_VLVisionConfig(**dict(vision_config or {}))
            self.text_config = Qwen2Config(**dict(text_config or {}))

    with contextlib.suppress(ValueError):
        AutoConfig.register("opencua", OpenCUAStandIn)


def register_tiled_configs() -> None:
    """H2OVL's and Eagle2.5-VL's config classes are the checkpoints' remote code: stand-ins
    holding the sections vLLM's ``h2ovl.py`` / ``eagle2_5_vl.py`` read (H2OVL's as InternVL's
    stand-in; Eagle's vision section as transformers' ``SiglipVisionConfig``)."""
    from transformers import AutoConfig, PretrainedConfig, SiglipVisionConfig

    class H2OVLStandIn(PretrainedConfig):
        model_type = "h2ovl_chat"

        def __init__(self, vision_config: Any = None, llm_config: Any = None,
                     **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.vision_config = PretrainedConfig(**dict(vision_config or {}))
            self.llm_config = AutoConfig.for_model(**dict(llm_config or {"model_type": "llama"}))
            self.text_config = self.llm_config

    class EagleStandIn(PretrainedConfig):
        model_type = "eagle_2_5_vl"

        def __init__(self, vision_config: Any = None, text_config: Any = None,
                     **kwargs: Any) -> None:
            super().__init__(**kwargs)
            vision = {k: v for k, v in dict(vision_config or {}).items() if k != "model_type"}
            self.vision_config = SiglipVisionConfig(**vision)
            self.text_config = AutoConfig.for_model(**dict(text_config or {"model_type": "qwen2"}))

    for name, cls in (("h2ovl_chat", H2OVLStandIn), ("eagle_2_5_vl", EagleStandIn)):
        with contextlib.suppress(ValueError):
            AutoConfig.register(name, cls)


def stub_tokenizer() -> None:
    """The tower count needs no tokenizer, but building an InternVL-style processor asks the
    context for one (``skip_tokenizer_init``): a stand-in with an empty vocabulary."""
    from vllm.multimodal.processing import context

    class NoTokens:
        def get_vocab(self) -> dict[str, int]:
            return {}

    get = context.InputProcessingContext.get_tokenizer
    context.InputProcessingContext.get_tokenizer = (  # type: ignore[method-assign]
        lambda self: NoTokens() if self.tokenizer is None else get(self))


def tower_count(raw: dict[str, Any]) -> int:
    """Elements of every parameter vLLM 0.33 builds outside the language model."""
    import torch
    from golden_vllm_standins import meta_values, patch_parallel_groups
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.model_loader.utils import initialize_model
    from vllm.utils.torch_utils import set_default_torch_dtype

    patch_parallel_groups(1)
    with tempfile.TemporaryDirectory() as folder:
        if "vision_encoder" in raw:  # a Mistral-format params.json (vLLM remaps it)
            Path(folder, "params.json").write_text(json.dumps({**raw, "dtype": "bfloat16"}))
        else:
            Path(folder, "config.json").write_text(json.dumps({**raw, "torch_dtype": "bfloat16"}))
        args = EngineArgs(model=folder, skip_tokenizer_init=True, load_format="dummy",
                          max_model_len=4096, enforce_eager=True, trust_remote_code=True,
                          config_format="mistral" if "vision_encoder" in raw else "auto",
                          runner="generate", tensor_parallel_size=1)
        vllm_config = args.create_engine_config()
        vllm_config.device_config.device = torch.device("meta")
        with set_default_torch_dtype(vllm_config.model_config.dtype), torch.device("meta"), \
                meta_values():
            model = initialize_model(vllm_config=vllm_config, prefix="")
    # GLM-4V keeps its tower inside the ChatGLM model: only transformer.vision counts there.
    return sum(p.numel() for name, p in model.named_parameters()
               if not name.startswith(("language_model.", "model.language_model.",
                                       "model.text_model.", "lm_head.", "llm."))
               and (not name.startswith("transformer.") or name.startswith("transformer.vision.")))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--vllm-src", default="/tmp/vllm033/src")
    parser.add_argument("--models", nargs="*", default=sorted(MODELS))
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tools"))
    from golden_vllm import import_vllm

    version = import_vllm(args.vllm_src, stub_vision=True)["version"]
    register_internvl_config()
    register_minicpmv_config()
    register_opencua_config()
    register_tiled_configs()
    stub_tokenizer()
    old = json.loads(OUT.read_text()) if OUT.exists() else {}
    rows: dict[str, Any] = dict(old.get("rows", {}))
    for name in args.models:
        try:
            rows[name] = {"config": MODELS[name], "tower_params": tower_count(MODELS[name])}
        except Exception as exc:
            traceback.print_exc()
            rows[name] = {"config": MODELS[name], "error": f"{type(exc).__name__}: {exc}"[:300]}
        print(name, rows[name].get("tower_params", rows[name].get("error")), flush=True)
    OUT.write_text(json.dumps({"vllm": version, "rows": dict(sorted(rows.items()))},
                              indent=1) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
