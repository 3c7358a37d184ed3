"""Allocation traces of specific frameworks' model graphs, for the simulated device.

``mindformers``: the MindFormers Qwen2 inference graph that vllm-mindspore runs (sources
and the arithmetic in ``docs/simulator.md``, section "The seed's cases").
"""
