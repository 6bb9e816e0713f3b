"""The collapse sweep's results as typed records: a cell's row and series, the table, the summary.

Frozen dataclasses whose fields are the JSON keys of their file in its order, through the one
codec of :mod:`solo_geometry.folder.field_types` (``cells/<cell>.json``: :class:`CellRecord`;
``summary.json``: :class:`CollapseSummary`); a field an older file lacks defaults to None.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from solo_geometry.folder.field_types import JsonRecord
from solo_geometry.reproduce.results import Verdict, read_result

__all__ = [
    "CellRecord",
    "CollapseRow",
    "CollapseSummary",
    "Stat",
    "TableRow",
    "read_cell",
    "read_summary",
]

# A per-epoch series: index 0 the collapsed start, None where nothing was measured.
Series = tuple[float | None, ...]


@dataclass(frozen=True)
class CollapseRow(JsonRecord):
    """One run of the sweep (one cell): its configuration, its curve and its numbers."""

    head: str
    norm: str
    lr: float
    lr_name: str | None = None
    seed: int = 0
    host: str | None = None
    dataset: str = "digits"
    backbone: str = "resnet18"
    outcome: str | None = None  # "escaped", "not escaped" or "undecidable"
    escaped: bool | None = None
    escape_epoch: int | None = None
    escape_step: int | None = None
    baseline_std: float | None = None
    ceiling: float | None = None
    final_ratio: float | None = None
    steps: int | None = None
    steps_per_epoch: int | None = None
    output_rows: int | None = None
    output_dim: int | None = None
    std_curve: tuple[float, ...] = ()
    start_std: float | None = None
    final_std: float | None = None
    final_std_z: float | None = None
    final_cond: float | None = None
    final_cond_paper: float | None = None
    m_lambda_min_start: float | None = None
    floor_start: float | None = None
    m_dim: int | None = None
    m_neg_count_start: int | None = None
    m_neg_mass_start: float | None = None
    m_neg_count_start_std: float | None = None
    heff_lambda_min_start: float | None = None
    lr_recorded: float | None = None
    timescale_ratio: float | None = None
    head_grad_norm: float | None = None
    backbone_grad_norm: float | None = None
    records: int | None = None
    seconds: float | None = None
    run: str | None = None  # the run folder, relative to the sweep folder


@dataclass(frozen=True)
class CellRecord(JsonRecord):
    """A finished cell: its row, its per-epoch series by metric, and the cell's config."""

    row: CollapseRow
    series: Mapping[str, Series]
    cell: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Stat(JsonRecord):
    """Mean and (population) std over seeds of one number; None for both when n is 0."""

    mean: float | None
    std: float | None
    n: int


@dataclass(frozen=True)
class TableRow(JsonRecord):
    """One configuration (head x norm x lr) over its seeds."""

    head: str
    norm: str
    lr: float
    seeds: int
    final_std: Stat
    final_ratio: Stat
    escape_epoch: Stat
    m_neg_count_start: Stat
    timescale_ratio: Stat
    final_cond_paper: Stat
    escaped: int
    undecidable: int


@dataclass(frozen=True)
class CollapseSummary(JsonRecord):
    """``summary.json``: the rows, the table over seeds, Spearman's rho per head, the claims."""

    escape_criterion: str = ""
    factor: float = 2.0
    quick: bool = False
    protocol: Mapping[str, object] = field(default_factory=dict)  # Protocol as plain JSON
    rows: tuple[CollapseRow, ...] = ()
    table: tuple[TableRow, ...] = ()
    # head -> {"h/cond": rho, "h/cond_paper": rho, "points": pairs}
    spearman: Mapping[str, Mapping[str, float | None]] = field(default_factory=dict)
    claims: tuple[Verdict, ...] = ()


def read_summary(path: str | Path) -> CollapseSummary:
    """A ``summary.json`` (or the sweep folder holding it), typed (:func:`read_result`)."""
    return read_result(CollapseSummary, path, "collapse")


def read_cell(path: Path) -> CellRecord:
    """A finished cell's record, ``cells/<cell>.json``.

    Raises:
        ValueError: naming the file, when it does not read as a cell record.
    """
    try:
        return CellRecord.from_json(json.loads(path.read_text()), where=str(path))
    except ValueError as err:
        raise ValueError(f"{str(path)!r}: not a cell record ({err})") from None
