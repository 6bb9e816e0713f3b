"""The collapse sweep's typed results against files written by the dict-based code before them.

``fixtures/collapse_summary_v1.json`` and ``collapse_table_v1.md`` were written by the previous
(untyped) ``summarise`` and ``write_summary`` from the eight cell records of
``fixtures/collapse_cells_v1.json``: the typed code must read them and write the same bytes.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from solo_geometry.folder.field_types import from_plain, to_plain
from solo_geometry.reproduce.collapse.files import load_runs
from solo_geometry.reproduce.collapse.result import (
    CellRecord,
    CollapseRow,
    CollapseSummary,
    Stat,
    read_summary,
)
from solo_geometry.reproduce.collapse.summary import summarise, write_summary
from solo_geometry.reproduce.results import Verdict, write_result

FIXTURES = Path(__file__).parent / "fixtures"
SUMMARY = FIXTURES / "collapse_summary_v1.json"
CELLS = FIXTURES / "collapse_cells_v1.json"


@pytest.fixture(scope="module")
def cells() -> list[CellRecord]:
    return [CellRecord.from_json(c) for c in json.loads(CELLS.read_text())]


class TestSameBytes:
    def test_a_file_written_before_reads_and_writes_back_equal(self, tmp_path: Path) -> None:
        summary = read_summary(SUMMARY)
        assert isinstance(summary, CollapseSummary)
        assert all(isinstance(r, CollapseRow) for r in summary.rows)
        assert all(isinstance(c, Verdict) for c in summary.claims)
        assert isinstance(summary.table[0].final_std, Stat)
        write_result(tmp_path, "collapse", summary)
        assert (tmp_path / "summary.json").read_bytes() == SUMMARY.read_bytes()

    def test_summarise_writes_what_the_untyped_code_wrote(
        self, cells: list[CellRecord], tmp_path: Path
    ) -> None:
        plain = json.loads(SUMMARY.read_text())
        summary = summarise(cells, quick=True, protocol=plain["protocol"], factor=2.0)
        write_summary(tmp_path, summary)
        assert (tmp_path / "summary.json").read_bytes() == SUMMARY.read_bytes()
        table = (FIXTURES / "collapse_table_v1.md").read_text()
        assert (tmp_path / "table.md").read_text() == table

    def test_a_cell_record_writes_back_equal(self, cells: list[CellRecord]) -> None:
        plain = json.loads(CELLS.read_text())
        back = [json.dumps(c.to_json(finite=False), indent=1) for c in cells]
        assert back == [json.dumps(c, indent=1) for c in plain]
        assert cells[0].series["h/cond"][2] is None and cells[0].cell["solo_root"] is None

    def test_an_unstamped_file_is_version_0_same_content(self, tmp_path: Path) -> None:
        plain = json.loads(SUMMARY.read_text())
        del plain["kind"], plain["version"]
        (tmp_path / "summary.json").write_text(json.dumps(plain))
        assert read_summary(tmp_path) == read_summary(SUMMARY)
        assert load_runs(tmp_path / "summary.json") == load_runs(SUMMARY)


class TestCodec:
    def test_wrong_type_is_named_by_its_path(self, tmp_path: Path) -> None:
        plain = json.loads(SUMMARY.read_text())
        plain["rows"][1]["lr"] = "fast"
        (tmp_path / "summary.json").write_text(json.dumps(plain))
        with pytest.raises(ValueError, match=r"rows\[1\]: field lr must be float, got 'fast'"):
            read_summary(tmp_path)

    def test_a_missing_required_key_is_named(self) -> None:
        with pytest.raises(ValueError, match="lacks 'norm'"):
            CollapseRow.from_json({"head": "relu", "lr": 0.05})

    def test_bool_is_not_a_number_and_int_stays_int(self) -> None:
        with pytest.raises(ValueError, match="field seed must be int"):
            CollapseRow.from_json({"head": "relu", "norm": "bn", "lr": 0.05, "seed": True})
        row = CollapseRow.from_json({"head": "relu", "norm": "bn", "lr": 1, "std_curve": [1, 2]})
        assert row.lr == 1 and type(row.lr) is int  # written back as it was read
        assert row.std_curve == (1, 2) and row.escape_epoch is None

    def test_frozen_and_non_finite_to_null(self) -> None:
        row = CollapseRow("swish", "none", 0.05, final_ratio=float("inf"))
        with pytest.raises(dataclasses.FrozenInstanceError):
            row.lr = 0.5  # type: ignore[misc]
        plain = row.to_json()
        assert plain["final_ratio"] is None and list(plain)[:3] == ["head", "norm", "lr"]
        assert row.to_json(finite=False)["final_ratio"] == float("inf")
        assert from_plain(CollapseRow, to_plain(row)) == dataclasses.replace(row, final_ratio=None)
