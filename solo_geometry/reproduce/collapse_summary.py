"""The collapse sweep's numbers: one row per run, the table over seeds, and the verdicts.

Everything here is computed from a run folder's own files (``geometry.jsonl`` through
:func:`solo_geometry.records.read_records`, ``updates.jsonl`` through
:func:`solo_geometry.updates.read_update_records`); nothing is asserted.

Definitions (the paper's where it has one, README "Reproducing the paper"):

* std: ``h/normalized_std``, the std over the batch of the L2-normalised projector outputs H,
  averaged over dimensions (the paper's ``torch.std(F.normalize(z), dim=0).mean()``, its z being
  the projector's output); ``start_std`` from the record at step 0, before any step (the
  collapsed start); after epoch e, the mean of the records measured during it (at its end when
  the monitor measures once per epoch); ``final_std`` from the final record, at the end of fit.
* escaped: ``final_std >= ESCAPE_FACTOR * start_std``; ``epochs_to_escape``: the first epoch
  (1-based) whose mean std reaches that level, None if none does.
* M at the start: ``m_lambda_min_start`` (Lanczos, None unless converged) against the record's
  floor tau * max|lambda(H_eff)|; ``m_neg_count_start``: 0 when the converged lambda_min(M) is
  at or above -floor (no eigenvalue below it), else the SLQ estimate round(neg_fraction x dim)
  (at least 1), None when lambda_min(M) did not converge; ``m_neg_mass_start``: the SLQ
  fraction of M's spectrum below -floor.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from scipy.stats import spearmanr

from solo_geometry.records import GeometryRecord, read_records
from solo_geometry.updates import read_update_records

__all__ = [
    "ESCAPE_FACTOR",
    "SERIES_KEYS",
    "cell_record",
    "claims",
    "print_claims",
    "summarise",
    "write_summary",
]

ESCAPE_FACTOR = 2.0
SMOOTH = ("gelu", "swish")
# Monitor metrics kept per epoch (the mean over the epoch's records).
SERIES_KEYS = ("h/normalized_std", "z/normalized_std", "h/cond", "h/cond_paper", "z/cond",
               "z/cond_paper", "heff/lambda_min", "m/lambda_min", "m/neg_fraction")  # fmt: skip
# Update-size metrics kept per epoch (updates.jsonl is already per epoch).
UPDATE_KEYS = ("head/grad_norm", "backbone/grad_norm", "head/rel_update", "backbone/rel_update",
               "head/step_ratio", "backbone/step_ratio", "timescale_ratio")  # fmt: skip


def _mean(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def _epoch_series(
    records: Sequence[GeometryRecord], epochs: int, steps_per_epoch: int
) -> dict[str, list]:
    """SERIES_KEYS after each epoch, from the monitor's records.

    Index 0 is the start record (step 0); index e >= 1 the mean of the records at steps
    (e - 1) S < step <= e S, S steps per epoch (the final record is the last epoch's).
    """
    start, later = records[0], records[1:]
    series: dict[str, list] = {k: [start.value(k)] for k in SERIES_KEYS}
    for epoch in range(1, epochs + 1):
        lo, hi = (epoch - 1) * steps_per_epoch, epoch * steps_per_epoch
        chunk = [r for r in later if lo < r.step <= hi]
        for key in SERIES_KEYS:
            series[key].append(_mean(r.value(key) for r in chunk))
    return series


def _m_start(start: GeometryRecord) -> dict[str, Any]:
    """M's negative part at the collapsed start (module docstring)."""
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
        "m_lambda_min_start": lam, "floor_start": floor, "m_dim": dim,
        "m_neg_count_start": count, "m_neg_mass_start": frac,
        "m_neg_count_start_std": None if frac_std is None or dim is None else frac_std * dim,
        "heff_lambda_min_start": start.value("heff/lambda_min"),
    }  # fmt: skip


def cell_record(
    run: Path, cell: Mapping[str, Any], *, host: str, seconds: float, root: Path
) -> dict[str, Any]:
    """The row and per-epoch series of one finished run, from its own files.

    Args:
        run: the run folder.
        cell: the cell's config (head, norm, lr, seed, epochs, ...).
        host: the host that trained it.
        seconds: its wall time.
        root: the sweep folder (the row stores the run folder relative to it).

    Returns:
        ``{"row": {...}, "series": {...}}``.

    Raises:
        ValueError: if the run has no ok measurement.
    """
    records = read_records(run, ok_only=True)
    if not records or records[0].step != 0:
        raise ValueError(f"run {str(run)!r}: no ok measurement at step 0 (the collapsed start)")
    epochs = int(cell["epochs"])
    series = _epoch_series(records, epochs, int(cell["steps_per_epoch"]))
    updates = {u.epoch: u.metrics for u in read_update_records(run)}
    for key in UPDATE_KEYS:
        series[key] = [None] + [updates.get(e, {}).get(key) for e in range(epochs)]
    start_std = records[0].value("h/normalized_std")
    final_std = records[-1].value("h/normalized_std")
    level = None if start_std is None else ESCAPE_FACTOR * start_std
    epochs_to_escape = next((e for e, v in enumerate(series["h/normalized_std"])
                             if e > 0 and v is not None and level is not None and v >= level),
                            None)  # fmt: skip
    lrs = [u.get("head/lr") for u in updates.values()]
    row = {
        "head": cell["head"], "norm": cell["norm"], "lr": float(cell["lr"]),
        "seed": int(cell["seed"]), "host": host,
        "escaped": bool(final_std is not None and level is not None and final_std >= level),
        "epochs_to_escape": epochs_to_escape, "start_std": start_std, "final_std": final_std,
        "std_ratio": None if not start_std or final_std is None else final_std / start_std,
        "final_std_z": records[-1].value("z/normalized_std"),
        "final_cond": records[-1].value("h/cond"),
        "final_cond_paper": records[-1].value("h/cond_paper"),
        **_m_start(records[0]),
        "lr_recorded": _mean(lrs), "timescale_ratio": _mean(series["timescale_ratio"][1:]),
        "head_grad_norm": _mean(series["head/grad_norm"][1:]),
        "backbone_grad_norm": _mean(series["backbone/grad_norm"][1:]),
        "steps": records[-1].step, "records": len(records), "seconds": seconds,
        "run": str(Path(run).resolve().relative_to(root.resolve())),
    }  # fmt: skip
    return {"row": row, "series": series}


def _stats(values: Sequence[float | None]) -> dict[str, float | None]:
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return {"mean": None, "std": None, "n": 0}
    std = statistics.pstdev(vals) if len(vals) > 1 else 0.0
    return {"mean": sum(vals) / len(vals), "std": std, "n": len(vals)}


def _table(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Mean and std over seeds per head x norm x lr."""
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["head"], row["norm"], row["lr"]), []).append(row)
    table = []
    for (head, norm, lr), members in sorted(groups.items()):
        entry: dict[str, Any] = {"head": head, "norm": norm, "lr": lr, "seeds": len(members)}
        for key in ("final_std", "std_ratio", "epochs_to_escape", "m_neg_count_start",
                    "timescale_ratio", "final_cond_paper"):  # fmt: skip
            entry[key] = _stats([m[key] for m in members])
        entry["escaped"] = sum(bool(m["escaped"]) for m in members)
        table.append(entry)
    return table


def _spearman(records: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Spearman's rho between std(H) and cond(H) over every epoch of each head's runs."""
    out: dict[str, dict[str, float | None]] = {}
    for head in sorted({r["row"]["head"] for r in records}):
        result: dict[str, float | None] = {}
        for cond in ("h/cond", "h/cond_paper"):
            pairs = [(s, c) for r in records if r["row"]["head"] == head
                     for s, c in zip(r["series"]["h/normalized_std"], r["series"][cond],
                                     strict=True) if s is not None and c is not None]  # fmt: skip
            rho = spearmanr(*zip(*pairs, strict=True)).statistic if len(pairs) > 2 else None
            result[cond] = None if rho is None or math.isnan(rho) else float(rho)
        result["points"] = float(len(pairs))
        out[head] = result
    return out


def claims(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The paper's claims, each with the counts behind it and a verdict from them."""
    smooth = [r for r in rows if r["head"] in SMOOTH]
    linear = [r for r in rows if r["head"] == "linear"]
    esc_s, esc_l = sum(r["escaped"] for r in smooth), sum(r["escaped"] for r in linear)
    if smooth and linear and esc_s == len(smooth) and esc_l == 0:
        v1 = "held"
    elif smooth and linear and esc_s / len(smooth) > esc_l / len(linear):
        v1 = "held in part"
    else:
        v1 = "not held"
    relu = [r for r in rows if r["head"] == "relu"]
    by_cell: dict[tuple[str, float], list[bool]] = {(r["norm"], r["lr"]): [] for r in relu}
    for r in relu:
        by_cell[(r["norm"], r["lr"])].append(r["escaped"])
    relu_rates = {f"{n} lr={lr:g}": sum(v) / len(v) for (n, lr), v in sorted(by_cell.items())}
    v2 = "held" if len(set(relu_rates.values())) > 1 else "not held"
    flat = [r for r in rows if r["head"] in ("linear", "relu") and r["norm"] == "none"]
    neg_s = [r["m_neg_count_start"] for r in smooth]
    neg_f = [r["m_neg_count_start"] for r in flat]
    known = all(c is not None for c in neg_s + neg_f)
    if not (smooth and flat) or not known:
        v3 = "undecided (an extreme of M did not converge, or cells are missing)"
    elif all(c > 0 for c in neg_s) and all(c == 0 for c in neg_f):
        v3 = "held"
    else:
        v3 = "not held"
    return [
        {"claim": "smooth heads' std(H) rose from the collapsed start (escaped) while the linear "
                  "head's stayed collapsed",
         "evidence": f"escaped: smooth {esc_s}/{len(smooth)}, linear {esc_l}/{len(linear)}",
         "verdict": v1},
        {"claim": "ReLU's escape depends on BatchNorm and the learning rate",
         "evidence": "escape rate per cell: " + ", ".join(f"{k}: {v:.2f}"
                                                          for k, v in relu_rates.items()),
         "verdict": v2},
        {"claim": "at the collapsed start M has eigenvalues below the floor for smooth heads "
                  "and none for linear and ReLU heads without BatchNorm",
         "evidence": f"M's negative count at start: smooth {neg_s}, linear/ReLU without BN "
                     f"{neg_f}",
         "verdict": v3},
    ]  # fmt: skip


def summarise(
    records: Sequence[Mapping[str, Any]], *, quick: bool, protocol: Mapping[str, Any]
) -> dict[str, Any]:
    """summary.json's content: rows, table, Spearman per head, claims and the protocol."""
    rows = [dict(r["row"]) for r in records]
    return {
        "escape_criterion": f"final std(H) >= {ESCAPE_FACTOR:g} x std(H) at step 0",
        "quick": quick,
        "protocol": dict(protocol),
        "rows": rows,
        "table": _table(rows),
        "spearman": _spearman(records),
        "claims": claims(rows),
    }


def _cell(stat: Mapping[str, Any], fmt: str = ".3g") -> str:
    if stat["mean"] is None:
        return "-"
    return f"{stat['mean']:{fmt}} +- {stat['std']:{fmt}}"


def table_markdown(summary: Mapping[str, Any]) -> str:
    """The table over seeds as Markdown."""
    lines = ["| head | norm | lr | seeds | escaped | final std(H) | std ratio | epochs to escape "
             "| M neg. count at start | timescale ratio | cond_paper(H) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for t in summary["table"]:
        lines.append(
            f"| {t['head']} | {t['norm']} | {t['lr']:g} | {t['seeds']} | {t['escaped']} | "
            f"{_cell(t['final_std'])} | {_cell(t['std_ratio'])} | "
            f"{_cell(t['epochs_to_escape'], '.2g')} | {_cell(t['m_neg_count_start'], '.4g')} | "
            f"{_cell(t['timescale_ratio'])} | {_cell(t['final_cond_paper'])} |"
        )
    return "\n".join(lines) + "\n"


def write_summary(out: Path, summary: Mapping[str, Any]) -> None:
    """Write ``summary.json`` and ``table.md`` into the sweep folder."""
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    (out / "table.md").write_text(table_markdown(summary))


def print_claims(summary: Mapping[str, Any]) -> None:
    """Print the table, Spearman's rho per head and each claim's verdict."""
    print(table_markdown(summary))
    print("Spearman rho(std(H), cond(H)) over epochs, per head:")
    for head, rho in summary["spearman"].items():
        fmt = {k: "-" if v is None else f"{v:+.3f}" for k, v in rho.items() if k != "points"}
        print(f"  {head:>6}: numerical-rank cond {fmt['h/cond']}, paper's cond "
              f"{fmt['h/cond_paper']} ({rho['points']:.0f} points)")  # fmt: skip
    print("\nThe paper's claims, from this run's numbers:")
    for c in summary["claims"]:
        print(f"  [{c['verdict']}] {c['claim']}\n      {c['evidence']}")
