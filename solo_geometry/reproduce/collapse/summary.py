"""The collapse sweep's numbers: one row per run, the table over seeds, and the verdicts.

Everything is computed from a run folder's own files (``geometry.jsonl``, ``updates.jsonl``);
nothing is asserted. The curve ``std_curve`` is ``head/output_std`` of ``updates.jsonl`` per
epoch, judged by :func:`~.verdicts.escape`; the monitor's series after epoch e is the mean of
its records measured during it, epoch 0 its step-0 record (docs/reproducing.md, "Collapse").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path

from solo_geometry.folder.atomic import write_text
from solo_geometry.folder.records import GeometryRecord, read_records
from solo_geometry.geometry.ranks import spearman
from solo_geometry.reproduce.collapse.alerts import alert_markdown
from solo_geometry.reproduce.collapse.files import summary_runs
from solo_geometry.reproduce.collapse.protocol import lr_name
from solo_geometry.reproduce.collapse.result import (
    CellRecord,
    CollapseRow,
    CollapseSummary,
    Stat,
    TableRow,
)
from solo_geometry.reproduce.collapse.verdicts import ESCAPE_FACTOR, escape, judge
from solo_geometry.reproduce.results import write_result
from solo_geometry.runtime.updates import UpdateRecord, read_update_records

__all__ = [
    "SERIES_KEYS",
    "cell_record",
    "print_claims",
    "summarise",
    "write_summary",
]

# Monitor metrics kept per epoch (the mean over the epoch's records).
SERIES_KEYS = (
    "h/normalized_std",
    "z/normalized_std",
    "h/cond",
    "h/cond_paper",
    "z/cond",
    "z/cond_paper",
    "heff/lambda_min",
    "m/lambda_min",
    "m/neg_fraction",
)
# Update-size metrics kept per epoch (updates.jsonl is already per epoch).
UPDATE_KEYS = (
    "head/grad_norm",
    "backbone/grad_norm",
    "head/rel_update",
    "backbone/rel_update",
    "head/step_ratio",
    "backbone/step_ratio",
    "timescale_ratio",
)
CURVE_KEY = "head/output_std"  # the paper's statistic, per epoch, from updates.jsonl


def _mean(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def _epoch_series(
    records: Sequence[GeometryRecord], epochs: int, steps_per_epoch: int
) -> dict[str, list[float | None]]:
    """SERIES_KEYS after each epoch, from the monitor's records.

    Index 0 is the start record (step 0); index e >= 1 the mean of the records at steps
    (e - 1) S < step <= e S, S steps per epoch (the final record is the last epoch's).
    """
    start, later = records[0], records[1:]
    series: dict[str, list[float | None]] = {k: [start.value(k)] for k in SERIES_KEYS}
    for epoch in range(1, epochs + 1):
        lo, hi = (epoch - 1) * steps_per_epoch, epoch * steps_per_epoch
        chunk = [r for r in later if lo < r.step <= hi]
        for key in SERIES_KEYS:
            series[key].append(_mean(r.value(key) for r in chunk))
    return series


def _m_start(start: GeometryRecord) -> dict[str, object]:
    """M's negative part at the collapsed start, step 0.

    ``m_lambda_min_start`` is Lanczos' (None unless converged), against the record's floor
    tau * max|lambda(H_eff)|; ``m_neg_count_start`` is 0 when it is at or above -floor, else the
    SLQ estimate round(neg_fraction x dim) (at least 1), None when it did not converge;
    ``m_neg_mass_start`` is the SLQ fraction of M's spectrum below -floor.
    """
    floor, dim = start.settings.floor, start.settings.dim
    lam, frac = start.value("m/lambda_min"), start.value("m/neg_fraction")
    frac_std = start.value("m/neg_fraction_std")
    count: int | None
    if lam is None or floor is None or dim is None:
        count = None
    elif lam >= -floor:
        count = 0
    else:
        count = max(1, round((frac or 0.0) * dim))
    return {
        "m_lambda_min_start": lam,
        "floor_start": floor,
        "m_dim": dim,
        "m_neg_count_start": count,
        "m_neg_mass_start": frac,
        "m_neg_count_start_std": None if frac_std is None or dim is None else frac_std * dim,
        "heff_lambda_min_start": start.value("heff/lambda_min"),
    }


def _curve_fields(
    updates: Mapping[int, UpdateRecord], epochs: int, factor: float
) -> dict[str, object]:
    """The row's curve, its escape and the steps behind it.

    Raises:
        ValueError: if an epoch has no ``head/output_std`` (the update monitor was off).
    """
    missing = [e for e in range(epochs) if CURVE_KEY not in getattr(updates.get(e), "metrics", {})]
    if missing:
        raise ValueError(f"updates.jsonl has no {CURVE_KEY} for epochs {missing}")
    curve = [float(updates[e].metrics[CURVE_KEY]) for e in range(epochs)]
    rows = round(updates[0].metrics["head/output_rows"])
    dim = round(updates[0].metrics["head/output_dim"])
    per_epoch = updates[0].steps
    esc = escape(curve, rows=rows, dim=dim, steps_per_epoch=per_epoch, factor=factor)
    return {
        **asdict(esc),  # outcome, baseline_std, ceiling, escape_epoch, escape_step
        "escaped": esc.outcome == "escaped",
        "final_ratio": curve[-1] / curve[0] if curve[0] else None,
        "steps": sum(u.steps for u in updates.values()),
        "steps_per_epoch": per_epoch,
        "output_rows": rows,
        "output_dim": dim,
        "std_curve": curve,
    }


def _number(cell: Mapping[str, object], key: str, default: float | None = None) -> float:
    """The cell config's number ``key`` (``default`` when absent).

    Raises:
        ValueError: naming the key, when it is absent without a default or not a number.
    """
    value = cell.get(key, default)
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ValueError(f"cell option {key!r} must be a number, got {value!r}")
    return float(value)


def cell_record(
    run: Path,
    cell: Mapping[str, object],
    *,
    host: str,
    seconds: float,
    root: Path,
    factor: float = ESCAPE_FACTOR,
) -> CellRecord:
    """The row and per-epoch series of one finished run, from its own files.

    Args:
        run: the run folder.
        cell: the cell's config (head, norm, lr, seed, epochs, ...), kept in the record.
        host: the host that trained it.
        seconds: its wall time.
        root: the sweep folder (the row stores the run folder relative to it).
        factor: the escape factor (x the epoch-0 mean).

    Raises:
        ValueError: if the run has no ok measurement at step 0, or no per-step output std.
    """
    records = read_records(run, ok_only=True)
    if not records or records[0].step != 0:
        raise ValueError(f"run {str(run)!r}: no ok measurement at step 0 (the collapsed start)")
    epochs, lr = int(_number(cell, "epochs")), _number(cell, "lr")
    series = _epoch_series(records, epochs, int(_number(cell, "steps_per_epoch")))
    updates = {u.epoch: u for u in read_update_records(run)}
    for key in UPDATE_KEYS:
        per_epoch: list[float | None] = [
            updates[e].metrics.get(key) if e in updates else None for e in range(epochs)
        ]
        series[key] = [None, *per_epoch]
    curve = _curve_fields(updates, epochs, factor)
    row = {
        "head": cell["head"],
        "norm": cell["norm"],
        "lr": lr,
        "lr_name": lr_name(lr, _number(cell, "base_lr", 0.05)),
        "seed": int(_number(cell, "seed")),
        "host": host,
        "dataset": cell.get("data", "digits"),
        "backbone": cell.get("backbone", "resnet18"),
        **curve,
        "start_std": records[0].value("h/normalized_std"),
        "final_std": records[-1].value("h/normalized_std"),
        "final_std_z": records[-1].value("z/normalized_std"),
        "final_cond": records[-1].value("h/cond"),
        "final_cond_paper": records[-1].value("h/cond_paper"),
        **_m_start(records[0]),
        "lr_recorded": _mean(u.metrics.get("head/lr") for u in updates.values()),
        "timescale_ratio": _mean(series["timescale_ratio"][1:]),
        "head_grad_norm": _mean(series["head/grad_norm"][1:]),
        "backbone_grad_norm": _mean(series["backbone/grad_norm"][1:]),
        "records": len(records),
        "seconds": seconds,
        "run": str(Path(run).resolve().relative_to(root.resolve())),
    }
    typed = CollapseRow.from_json(row, where=f"run {str(run)!r}")
    series[CURVE_KEY] = list(typed.std_curve)
    return CellRecord(typed, {k: tuple(v) for k, v in series.items()}, dict(cell))


def _stats(values: Sequence[float | None]) -> Stat:
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return Stat(None, None, 0)
    std = statistics.pstdev(vals) if len(vals) > 1 else 0.0
    return Stat(sum(vals) / len(vals), std, len(vals))


def _table(rows: Sequence[CollapseRow]) -> tuple[TableRow, ...]:
    """Mean and std over seeds per head x norm x lr."""
    groups: dict[tuple[str, str, float], list[CollapseRow]] = {}
    for row in rows:
        groups.setdefault((row.head, row.norm, row.lr), []).append(row)
    table = []
    for (head, norm, lr), members in sorted(groups.items()):
        table.append(
            TableRow(
                head,
                norm,
                lr,
                len(members),
                final_std=_stats([m.final_std for m in members]),
                final_ratio=_stats([m.final_ratio for m in members]),
                escape_epoch=_stats([m.escape_epoch for m in members]),
                m_neg_count_start=_stats([m.m_neg_count_start for m in members]),
                timescale_ratio=_stats([m.timescale_ratio for m in members]),
                final_cond_paper=_stats([m.final_cond_paper for m in members]),
                escaped=sum(m.outcome == "escaped" for m in members),
                undecidable=sum(m.outcome == "undecidable" for m in members),
            )
        )
    return tuple(table)


def _spearman(records: Sequence[CellRecord]) -> dict[str, dict[str, float | None]]:
    """Spearman's rho between std(H) and cond(H) over every epoch of each head's runs."""
    out: dict[str, dict[str, float | None]] = {}
    for head in sorted({r.row.head for r in records}):
        result: dict[str, float | None] = {}
        for cond in ("h/cond", "h/cond_paper"):
            pairs = [
                (s, c)
                for r in records
                if r.row.head == head
                for s, c in zip(r.series["h/normalized_std"], r.series[cond], strict=True)
                if s is not None and c is not None
            ]
            rho = spearman(*zip(*pairs, strict=True)) if len(pairs) > 2 else math.nan
            result[cond] = None if math.isnan(rho) else rho
        result["points"] = float(len(pairs))
        out[head] = result
    return out


def summarise(
    records: Sequence[CellRecord],
    *,
    quick: bool,
    protocol: Mapping[str, object],
    factor: float = ESCAPE_FACTOR,
) -> CollapseSummary:
    """summary.json's content: rows, table, Spearman per head, claims and the protocol."""
    rows = tuple(r.row for r in records)
    summary = CollapseSummary(
        escape_criterion=f"first epoch whose mean per-step std of the normalised projector "
        f"output reaches {factor:g} x the epoch-0 mean; undecidable where "
        "that is above the ceiling sqrt(M / ((M - 1) d))",
        factor=factor,
        quick=quick,
        protocol=dict(protocol),
        rows=rows,
        table=_table(rows),
        spearman=_spearman(records),
    )
    return replace(summary, claims=tuple(judge(summary_runs(summary), factor)))


def _cell(stat: Stat, fmt: str = ".3g") -> str:
    if stat.mean is None or stat.std is None:
        return "-"
    return f"{stat.mean:{fmt}} +- {stat.std:{fmt}}"


def table_markdown(summary: CollapseSummary) -> str:
    """The table over seeds as Markdown."""
    lines = [
        "| head | norm | lr | seeds | escaped | undecidable | final std(H) | final / epoch 0 "
        "| escape epoch | M neg. count at start | timescale ratio | cond_paper(H) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for t in summary.table:
        lines.append(
            f"| {t.head} | {t.norm} | {t.lr:g} | {t.seeds} | {t.escaped} | "
            f"{t.undecidable} | {_cell(t.final_std)} | {_cell(t.final_ratio)} | "
            f"{_cell(t.escape_epoch, '.2g')} | {_cell(t.m_neg_count_start, '.4g')} | "
            f"{_cell(t.timescale_ratio)} | {_cell(t.final_cond_paper)} |"
        )
    return "\n".join(lines) + "\n"


def write_summary(out: Path, summary: CollapseSummary) -> None:
    """Write ``summary.json``, ``table.md`` and ``alert.md`` (:mod:`.alerts`) into ``out``."""
    write_result(out, "collapse", summary)
    write_text(out / "table.md", table_markdown(summary))
    write_text(out / "alert.md", alert_markdown(summary_runs(summary), summary.factor))


def print_claims(summary: CollapseSummary) -> None:
    """Print the table, Spearman's rho per head and each claim's verdict."""
    print(table_markdown(summary))
    print("Spearman rho(std(H), cond(H)) over epochs, per head:")
    for head, rho in summary.spearman.items():
        fmt = {k: "-" if v is None else f"{v:+.3f}" for k, v in rho.items() if k != "points"}
        print(
            f"  {head:>6}: numerical-rank cond {fmt['h/cond']}, paper's cond "
            f"{fmt['h/cond_paper']} ({rho['points'] or 0:.0f} points)"
        )
    print("\nThe paper's claims, from this run's numbers:")
    for claim in summary.claims:
        print(claim.text("  "))
    print("\nThe collapse alert replayed per epoch (geometry.alert's defaults):")
    print(alert_markdown(summary_runs(summary), summary.factor))
