"""A Hub that does not answer in time, or at all, is named with the whole reason: the
endpoint, "timed out after N s" or the error, never a reason cut short."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from memacct.model.sources import hub as hub_module
from memacct.model.sources.hub import ModelSourceError, load_hub_model
from memacct.model.sources.resolve import resolve_model


@pytest.fixture
def silent_endpoint(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    """An endpoint that takes connections and never answers; an empty Hugging Face cache."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)  # the kernel completes the handshake; nothing ever replies
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        monkeypatch.setenv("HF_ENDPOINT", url)
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.setattr(hub_module, "_TIMEOUT_S", 0.5)
        yield url


def test_a_hub_slower_than_the_limit_timed_out_after_the_limit(silent_endpoint: str) -> None:
    with pytest.raises(ModelSourceError, match=rf"{silent_endpoint} timed out after 0.5 s"):
        load_hub_model("acme/tiny", status=None)


def test_the_preset_fallback_note_keeps_the_whole_reason(silent_endpoint: str) -> None:
    source = resolve_model("Qwen/Qwen2.5-7B-Instruct", status=None)
    assert source.origin == "preset"
    note = next(n for n in source.notes if "shipped preset qwen2.5-7b" in n)
    assert f"{silent_endpoint} timed out after 0.5 s" in note
