"""SGLang: its KV token pool (:mod:`memacct.engines.sglang.kv`) behind :class:`Engine`."""

from __future__ import annotations

from memacct.engines.base import Engine
from memacct.engines.sglang.kv import SGLANG_VERSION, SglangKVManager
from memacct.engines.sglang.startup import STARTUP

__all__ = ["ENGINE"]

ENGINE = Engine(name="sglang", version=SGLANG_VERSION, kv=SglangKVManager(), startup=STARTUP)
