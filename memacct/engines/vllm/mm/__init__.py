"""Per-family pieces of vLLM's multimodal profile pass (:mod:`memacct.engines.vllm.multimodal`
is the entry point)."""
