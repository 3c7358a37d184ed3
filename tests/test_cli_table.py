"""The plan's breakdown table on a pipe is rich's own text, written without rich
(:mod:`memacct.cli.table`); what rich alone lays out is handed to it."""

from __future__ import annotations

import importlib.util
import io

import pytest
from rich.console import Console
from rich.table import Table

from memacct.cli.render import BREAKDOWN_COLUMNS, breakdown_rows
from memacct.cli.table import PIPE_WIDTH, plain_table
from memacct.errors import ConfigError
from memacct.model.sources.presets import load_model_preset, offline_presets
from memacct.planner.offline import plan_offline

# Without the hf extra (the core-only environment) a hybrid preset that only the meta device
# sizes is refused naming the extra (tests/test_listed_presets_plan.py): it has no table.
_HF = all(importlib.util.find_spec(m) is not None for m in ("transformers", "torch"))


def _rich(columns: tuple[tuple[str, str], ...], rows: list[tuple[str, ...]]) -> str:
    """The table as rich prints it to a pipe (memacct.cli.common.console's settings)."""
    out = io.StringIO()
    table = Table()
    for header, justify in columns:
        table.add_column(header, justify=justify)  # type: ignore[arg-type]
    for row in rows:
        table.add_row(*row)
    Console(file=out, highlight=False, width=PIPE_WIDTH).print(table)
    return out.getvalue().removesuffix("\n")


@pytest.mark.parametrize("tp", [1, 2])
def test_every_preset_plan_table_is_riches_text(tp: int) -> None:
    compared = 0
    for name in offline_presets():
        for device, extra in (("h100", {}), ("l4", {"max_model_len": 4096})):
            try:
                plan = plan_offline(load_model_preset(name), device=device,
                                    tensor_parallel_size=tp, model_name=name, **extra)
            except ConfigError as exc:
                if _HF or "memacct's hf extra" not in str(exc):
                    raise
                continue
            rows = breakdown_rows(plan, None)
            text = plain_table(BREAKDOWN_COLUMNS, rows)
            assert text is not None, name  # every preset's table is plain text
            assert text == _rich(BREAKDOWN_COLUMNS, rows), (name, device)
            compared += 1
    assert compared >= (30 if _HF else 24)


def test_a_table_that_does_not_fit_prints_its_shortfall_as_rich_does() -> None:
    plan = plan_offline(load_model_preset("llama-3.1-8b"), device="l4", model_name="x")
    assert not plan.fits
    rows = breakdown_rows(plan, None)
    assert plain_table(BREAKDOWN_COLUMNS, rows) == _rich(BREAKDOWN_COLUMNS, rows)


@pytest.mark.parametrize("cell", ["[bold]x", "a :smile: b", "x:y:z", "déjà", "tab\there"])
def test_cells_rich_reads_otherwise_go_to_rich(cell: str) -> None:
    assert plain_table((("a", "left"),), [(cell,)]) is None


def test_a_table_wider_than_the_pipe_goes_to_rich() -> None:
    columns = (("a", "left"), ("b", "right"))
    assert plain_table(columns, [("x" * 80, "y" * 74)]) is None  # 80 + 74 + 7 borders: 161
    fits = [("x" * 80, "y" * 73)]  # 160: the pipe's width
    assert plain_table(columns, fits) == _rich(columns, fits)
