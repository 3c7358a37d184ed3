"""Install hints name what can be installed today: a folder of a memacct checkout for the
backends, the packages themselves for the extras (no memacct distribution is on an index
yet); ``memacct backends`` lists every first-party backend, installed or not."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from memacct.cli import main
from memacct.plugin import EXTRAS, KNOWN_BACKENDS, extra_hint

ROOT = Path(__file__).resolve().parents[1]


def test_every_backend_hint_names_a_folder_of_this_checkout() -> None:
    for name, known in KNOWN_BACKENDS.items():
        folder = re.fullmatch(r"pip install (\S+) \(in a memacct checkout: (\S+)\)", known.install)
        assert folder is not None, known.install
        assert (ROOT / folder.group(1) / "pyproject.toml").is_file()
        assert folder.group(2) == known.distribution, name


def test_extra_hints_name_the_packages_of_each_extra() -> None:
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]  # fmt: skip
    for extra, packages in EXTRAS.items():
        declared = {re.split(r"[<>=\[ ]", req)[0].replace("-", "_") for req in extras[extra]}
        assert set(packages.replace("-", "_").split()) == declared
        assert "memacct[" not in extra_hint(extra)


def test_backends_lists_the_first_party_plugins_that_are_not_installed(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.metadata

    from memacct import registry

    installed = importlib.metadata.entry_points(group="memacct.backends")
    sim_only = [ep for ep in installed if ep.name == "sim" and ep.dist is not None]
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: sim_only)
    registry.refresh()
    try:
        assert main(["backends", "--json"]) == 0
    finally:
        monkeypatch.undo()
        registry.refresh()
    listed = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert set(listed) == set(KNOWN_BACKENDS)
    assert listed["sim"]["available"]
    for name in ("cuda", "npu", "mindspore", "nvml"):
        row = listed[name]
        assert not row["available"] and f"./backends/{name}" in row["reason"]
