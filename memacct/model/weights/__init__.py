"""A model's weights: the tensor inventory (:mod:`.inventory`), its sum per rank
(:mod:`.estimate`), the per-architecture rules (:mod:`.rules`), quantization
(:mod:`.quant`) and the meta-device reading (:mod:`.meta`, :mod:`.meta_cache`)."""
