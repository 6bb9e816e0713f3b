"""docs/methods.md's table of solo-learn methods is the one the code generates (no solo-learn)."""

from __future__ import annotations

from pathlib import Path

from solo_geometry.hosts.solo.losses import SUPPORTED, UNSUPPORTED, methods_table

METHODS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "methods.md"
START, END = "<!-- methods-table:start -->\n", "\n<!-- methods-table:end -->"


class TestMethodsTable:
    def test_readme_block_is_generated(self) -> None:
        text = METHODS_PAGE.read_text()
        block = text[text.index(START) + len(START) : text.index(END)]
        assert block == methods_table(), (
            "docs/methods.md's methods table is out of date; replace the block between the "
            "markers by "
            "the output of solo_geometry.hosts.solo.losses.methods_table()"
        )

    def test_one_row_per_method_saying_why(self) -> None:
        rows = methods_table().splitlines()[2:]
        names = [row.split(" | ")[0].removeprefix("| ") for row in rows]
        assert names == sorted(SUPPORTED) + sorted(UNSUPPORTED)
        assert all(row.split(" | ")[3].strip(" |") for row in rows)  # every row says what/why
        assert all(spec.held for spec in SUPPORTED.values())
