"""The one reading of a model: floor 1, below the engines and the planner.

* :mod:`memacct.model.config`: :class:`ModelConfig`, the model's configuration as
  vLLM reads it (layers, position limit, dtype, quantization);
* :mod:`memacct.model.arch_rules`, :mod:`memacct.model.layouts`,
  :mod:`memacct.model.layers`, :mod:`memacct.model.geometry`: which layers an
  architecture has and each layer's KV-cache spec class;
* :mod:`memacct.model.spec`: :class:`KVCacheSpec`, the layers of one rank;
* :mod:`memacct.model.shape`: the transformer's shape the forward pass needs;
* :mod:`memacct.model.sources`: where a configuration comes from (preset, local
  file, checkpoint directory, Hugging Face Hub id, GGUF file);
* :mod:`memacct.model.weights`: the weight inventory and quantization.

Nothing here imports :mod:`memacct.engines` or :mod:`memacct.planner` (a layering
test keeps it so).
"""
