"""The vllm-ascend releases memacct models, each with the vLLM release it pins.

vllm-ascend numbers its releases after the vLLM release each is built against
(``docs/source/community/versioning_policy.md``, "Release compatibility matrix";
``.github/vllm-release-tag.commit`` of each tag). :data:`PINS` holds the releases whose
start-up memacct models: from v0.21.0rc1 on, ``NPUWorker.determine_available_memory``
(``vllm_ascend/worker/worker.py``) is vLLM's ``memory_profiling`` with the torch peak read
before graph capture, and the ACL graphs take vLLM's capture sizes (``update_aclgraph_sizes``
in ``vllm_ascend/utils.py``, which capped them by the NPU's stream count, is gone from
v0.21.0rc1; it is in v0.13.0-v0.20.2rc1, whose sizes memacct does not model). Read in
v0.21.0rc1, v0.22.1rc1, v0.23.0rc1, v0.23.0, v0.24.0rc1, v0.25.1rc1 and main of 2026-08-22.
"""

from __future__ import annotations

__all__ = ["MAIN_PIN", "MODELLED", "PINS", "pins_text"]

PINS: tuple[tuple[str, str], ...] = (
    ("v0.25.1rc1", "v0.25.1"),
    ("v0.24.0rc1", "v0.24.0"),
    ("v0.23.0", "v0.23.0"),
    ("v0.23.0rc1", "v0.23.0"),
    ("v0.22.1rc1", "v0.22.1"),
    ("v0.21.0rc1", "v0.21.0"),
)
"""(vllm-ascend release, the vLLM release it pins), newest first."""

MAIN_PIN = ("main", "v0.27.1")
"""vllm-ascend main (commit 182b75ea84, 2026-08-22) and the vLLM release it is verified
against (``.github/vllm-release-tag.commit``)."""

MODELLED = ((0, 21), (0, 27))
"""The (major, minor) span of vllm-ascend releases modelled: v0.21.0rc1 to main (v0.27)."""


def pins_text() -> str:
    """The modelled releases, each with its vLLM, for a refusal message."""
    rows = [f"{ascend} (vLLM {vllm})" for ascend, vllm in (MAIN_PIN, *PINS)]
    return "vllm-ascend " + ", ".join(rows)
