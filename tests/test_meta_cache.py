"""The meta-device model's parameter list is kept per config in the user cache directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memacct.errors import ConfigError
from memacct.model.weights.meta_cache import Parameters, cache_path, cached_parameters
from memacct.planner import load_model_preset

pytest.importorskip("transformers")


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MEMACCT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def key(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True)


class Counter:
    """A stand-in for the meta-device build that counts its calls."""

    def __init__(self, fail: str | None = None) -> None:
        self.calls = 0
        self.fail = fail

    def __call__(self) -> Parameters:
        self.calls += 1
        if self.fail:
            raise ConfigError(self.fail)
        return (("model.embed_tokens.weight", (256, 64)), ("lm_head.weight", (256, 64))), True


def test_second_build_of_a_config_comes_from_the_cache(_cache: Path) -> None:
    config = key(load_model_preset("granite-4.0-h-small"))
    count = Counter()
    first = cached_parameters(config, count)
    second = cached_parameters(config, count)
    assert count.calls == 1 and second == first
    assert list(_cache.rglob("*.json")) == [cache_path(config)]


def test_the_key_is_the_config() -> None:
    config = load_model_preset("granite-4.0-h-small")
    count = Counter()
    cached_parameters(key(config), count)
    cached_parameters(key({**config, "num_hidden_layers": 7}), count)
    assert count.calls == 2


def test_cache_off_builds_every_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMACCT_CACHE_DIR", "off")
    count = Counter()
    cached_parameters("{}", count)
    cached_parameters("{}", count)
    assert count.calls == 2 and cache_path("{}") is None


def test_xdg_cache_home_is_honoured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMACCT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    path = cache_path("{}")
    assert path is not None and path.is_relative_to(tmp_path / "xdg" / "memacct")


@pytest.mark.parametrize(
    "damage",
    [b"{not json", b'{"parameters": [["w", [-5]]], "tied": true}', b"[" * 100, b"",
     b'{"parameters": [["w", ["a"]]], "tied": false}'],
)  # fmt: skip
def test_a_damaged_entry_is_built_again(damage: bytes) -> None:
    count = Counter()
    first = cached_parameters("{}", count)
    path = cache_path("{}")
    assert path is not None
    path.write_bytes(damage)
    assert cached_parameters("{}", count) == first and count.calls == 2


def test_a_refusal_is_kept_too() -> None:
    count = Counter(fail="transformers cannot build model_type 'x'")
    for _ in range(2):
        with pytest.raises(ConfigError, match="cannot build model_type 'x'"):
            cached_parameters("{}", count)
    assert count.calls == 1


def test_meta_weights_of_a_cached_config_build_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    from memacct.model.weights import meta

    pytest.importorskip("torch", reason="the first build runs transformers on torch's meta device")
    config = load_model_preset("qwen2.5-7b")
    config["num_hidden_layers"] = 2
    first = meta.meta_weights(config)
    meta._parameters.cache_clear()  # a new process: only the disk cache is left

    def refuse(config_json: str) -> Parameters:
        raise AssertionError("built again")

    monkeypatch.setattr(meta, "_build_parameters", refuse)
    assert meta.meta_weights(config) == first and first.source == "transformers"
    meta._parameters.cache_clear()
