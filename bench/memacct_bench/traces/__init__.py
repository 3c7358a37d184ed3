"""Allocation traces of specific frameworks' model graphs, for the simulated device.

``mindformers``: the MindFormers Qwen2 inference graph that vllm-mindspore runs (sources
and the arithmetic in ``docs/simulator.md``, section "The seed's cases"); ``deepseek``: one
tensor-parallel rank of the MindFormers DeepSeek-V3 graph (MLA, MoE) as vllm-mindspore runs it.
"""
