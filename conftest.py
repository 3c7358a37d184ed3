"""Suite-wide settings for every test directory (tests/, backends/, bench/)."""

from __future__ import annotations

import gc

import pytest


def pytest_collection_finish(session: pytest.Session) -> None:
    """Move what exists after collection (every imported module, every collected test) into
    the garbage collector's permanent generation.

    Each profiling session runs ``gc.collect()`` on entry and exit, as the engines do before
    they measure. With the whole suite's modules and test items on the heap, one full
    collection took about 0.25 s here, so a test that profiles six times spent 1.5 s in the
    collector (tests/test_exclude.py: 0.05 s alone, 1.5 s in the full run). Frozen objects are
    never scanned; everything a test creates still is, so no garbage a test leaves is kept.
    """
    gc.collect()
    gc.freeze()


_DEEPSEEK_INT_KEYS = ("q_lora_rank", "qk_nope_head_dim", "v_head_dim", "first_k_dense_replace")
_NOT_INTS = {"string": "x", "list": [4], "object": {}}


@pytest.fixture(
    params=[(key, value) for key in _DEEPSEEK_INT_KEYS for value in _NOT_INTS.values()],
    ids=[f"{key}-{kind}" for key in _DEEPSEEK_INT_KEYS for kind in _NOT_INTS],
)
def deepseek_key_of_the_wrong_type(request: pytest.FixtureRequest) -> tuple[str, object]:
    """(key, value): one of the DeepSeek config keys the forward pass reads as an integer
    (MLA ranks and head sizes, the first dense layers) with a value that is not one; the
    core's and the harness's trials both check it is refused by name."""
    pair: tuple[str, object] = request.param
    return pair
